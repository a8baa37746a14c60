/*
** buf.c: the growing arrays the tokenizer kinds write into (buf.h): ids
** with a ceiling, and bytes.
*/
#include "buf.h"

#include <stdlib.h>
#include <string.h>

int relattn_idbuf_push(relattn_idbuf *b, int32_t id) {
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 64;
    int32_t *p;
    if (b->n >= b->max) return RELATTN_ERR_TOOBIG;
    if (cap > b->max) cap = b->max;
    p = realloc(b->ids, cap * sizeof *p);
    if (!p) return RELATTN_ERR_NOMEM;
    b->ids = p;
    if (b->spans_on) {
      uint32_t *q = realloc(b->spans, 2 * cap * sizeof *q);
      if (!q) return RELATTN_ERR_NOMEM;
      b->spans = q;
    }
    b->cap = cap;
  }
  if (b->spans_on) {
    b->spans[2 * b->n] = (uint32_t)(b->base + b->s0);
    b->spans[2 * b->n + 1] = (uint32_t)(b->base + b->s1);
  }
  b->ids[b->n++] = id;
  return RELATTN_OK;
}

void relattn_idbuf_move(relattn_idbuf *b, size_t to, size_t from) {
  b->ids[to] = b->ids[from];
  if (b->spans_on) {
    b->spans[2 * to] = b->spans[2 * from];
    b->spans[2 * to + 1] = b->spans[2 * from + 1];
  }
}

int relattn_bytebuf_add(relattn_bytebuf *b, const void *p, size_t n) {
  if (n > b->cap - b->n) {
    size_t cap = b->cap ? b->cap : 64;
    uint8_t *q;
    while (cap - b->n < n) {
      if (cap > SIZE_MAX / 2) return RELATTN_ERR_NOMEM;
      cap *= 2;
    }
    q = realloc(b->p, cap);
    if (!q) return RELATTN_ERR_NOMEM;
    b->p = q, b->cap = cap;
  }
  if (n && p) memcpy(b->p + b->n, p, n); /* p NULL: room only */
  b->n += n;
  return RELATTN_OK;
}

int relattn_base64_decode(const char *s, size_t n, uint8_t *out,
                          size_t *out_n) {
  uint32_t acc = 0;
  int bits = 0, pad = 0;
  size_t i, o = 0;
  for (i = 0; i < n; i++) {
    int c = (unsigned char)s[i], v;
    if (c == '=') {
      pad++;
      continue;
    }
    if (pad) return RELATTN_ERR_FORMAT; /* data after padding */
    v = c >= 'A' && c <= 'Z'   ? c - 'A'
        : c >= 'a' && c <= 'z' ? c - 'a' + 26
        : c >= '0' && c <= '9' ? c - '0' + 52
        : c == '+'             ? 62
        : c == '/'             ? 63
                               : -1;
    if (v < 0) return RELATTN_ERR_FORMAT;
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (uint8_t)(acc >> bits);
    }
  }
  if (pad > 2 || bits >= 6 || (acc & ((1u << bits) - 1)) != 0)
    return RELATTN_ERR_FORMAT;
  *out_n = o;
  return RELATTN_OK;
}
