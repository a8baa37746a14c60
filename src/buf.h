/*
** buf.h: growing arrays of ids and of bytes (src/buf.c), what the
** tokenizer kinds encode into and decode into. Internal to src/.
*/
#ifndef RELATTN_BUF_H
#define RELATTN_BUF_H

#include "relattn.h"

/* A growing array of ids, refusing to grow past max (RELATTN_ERR_TOOBIG). */
typedef struct relattn_idbuf {
  int32_t *ids;
  size_t n, cap, max;
} relattn_idbuf;
int relattn_idbuf_push(relattn_idbuf *b, int32_t id);

/* A growing byte string. */
typedef struct relattn_bytebuf {
  uint8_t *p;
  size_t n, cap;
} relattn_bytebuf;
int relattn_bytebuf_add(relattn_bytebuf *b, const void *p, size_t n);

#endif /* RELATTN_BUF_H */
