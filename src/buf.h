/*
** buf.h: growing arrays of ids and of bytes (src/buf.c), what the
** tokenizer kinds encode into and decode into. Internal to src/.
*/
#ifndef RELATTN_BUF_H
#define RELATTN_BUF_H

#include "relattn.h"

/* A growing array of ids, refusing to grow past max (RELATTN_ERR_TOOBIG).
** With spans_on, each id also gets the span of the text it came from:
** spans[2i], spans[2i + 1] = base + s0, base + s1, the byte offsets
** [start, end) the kind set in s0, s1 before the push (relative to the
** text it was handed; base is where that text starts in the caller's).
** A kind that maps normalized bytes to the text sets nmap (2 offsets per
** byte of nbase, relative to its text) for its model to read. */
typedef struct relattn_idbuf {
  int32_t *ids;
  size_t n, cap, max;
  int spans_on;
  uint32_t *spans;       /* (cap, 2) when spans_on */
  size_t base, s0, s1;
  const uint32_t *nmap;  /* a kind's own: normalized byte -> text span */
  const uint8_t *nbase;
} relattn_idbuf;
int relattn_idbuf_push(relattn_idbuf *b, int32_t id);
/* Moves entry from to entry to (id and span), for kinds that rewrite
** their output in place. */
void relattn_idbuf_move(relattn_idbuf *b, size_t to, size_t from);

/* A growing byte string. */
typedef struct relattn_bytebuf {
  uint8_t *p;
  size_t n, cap;
} relattn_bytebuf;
int relattn_bytebuf_add(relattn_bytebuf *b, const void *p, size_t n);

#endif /* RELATTN_BUF_H */
