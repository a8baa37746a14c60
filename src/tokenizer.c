/*
** tokenizer.c: the one interface every tokenizer kind sits behind
** (relattn.h, "tokenizers"), and the byte tokenizer (docs/reference.md).
**
** A kind is chosen by the config's tokenizer.type: bytes (UTF-8 bytes are
** ids 0-255; bos, eos and pad are ids >= 256), wordpiece (tok_wordpiece.c)
** or sentencepiece (tok_sentencepiece.c). The kinds with a file parse it
** once, when the model is loaded; encode and decode then only read it, so
** one tokenizer serves every thread.
*/
#include "tok.h"

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
    b->ids = p, b->cap = cap;
  }
  b->ids[b->n++] = id;
  return RELATTN_OK;
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

/* ---- bytes ---------------------------------------------------------------- */

static int bytesEncode(const relattn_tokenizer *t, const uint8_t *text,
                       size_t n, relattn_idbuf *out) {
  size_t i;
  int rc = RELATTN_OK;
  (void)t;
  for (i = 0; i < n && rc == RELATTN_OK; i++)
    rc = relattn_idbuf_push(out, text[i]);
  return rc;
}

static int bytesDecode(const relattn_tokenizer *t, const int32_t *ids,
                       size_t n, relattn_bytebuf *out, const char *what,
                       char *err, size_t errlen) {
  size_t i;
  for (i = 0; i < n; i++) {
    int32_t id = ids[i];
    uint8_t b = (uint8_t)id;
    if (id > 255 && (id == t->bos || id == t->eos || id == t->pad))
      continue; /* markers, not text */
    if (id < 0 || id > 255)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: token %d at position %zu is not a byte "
                            "(0-255) nor the tokenizer's bos, eos or pad",
                            what, (int)id, i);
    if (relattn_bytebuf_add(out, &b, 1)) return RELATTN_ERR_NOMEM;
  }
  return RELATTN_OK;
}

static void plainDestroy(relattn_tokenizer *t) { free(t); }

/* ---- the interface ---------------------------------------------------------- */

static const char *const kind_names[] = {"bytes", "wordpiece",
                                         "sentencepiece"};

const char *relattn_tokenizer_kind_name(int kind) {
  return kind >= 0 && kind < 3 ? kind_names[kind] : "?";
}

int relattn_tokenizer_new(relattn_tokenizer **out, const relattn_config *c,
                          const uint8_t *file, size_t n, const char *what,
                          char *err, size_t errlen) {
  relattn_tokenizer *t = NULL;
  int rc;
  *out = NULL;
  switch (c->tok_type) {
    case RELATTN_TOK_BYTES:
      t = calloc(1, sizeof *t);
      if (!t) return RELATTN_ERR_NOMEM;
      t->n_ids = 256;
      t->encode = bytesEncode;
      t->decode = bytesDecode;
      t->destroy = plainDestroy;
      rc = RELATTN_OK;
      break;
    case RELATTN_TOK_WORDPIECE:
      rc = relattn_wordpiece_init(&t, c, file, n, what, err, errlen);
      break;
    case RELATTN_TOK_SENTENCEPIECE:
      rc = relattn_sentencepiece_init(&t, c, file, n, what, err, errlen);
      break;
    default:
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: unknown tokenizer type", what);
  }
  if (rc != RELATTN_OK) {
    if (rc == RELATTN_ERR_NOMEM)
      relattn_errorf(err, errlen, rc, "%s: out of memory", what);
    return rc;
  }
  t->kind = c->tok_type;
  t->bos = c->bos, t->eos = c->eos, t->pad = c->pad;
  if (t->n_ids > c->vocab_size) {
    int have = t->n_ids;
    t->destroy(t);
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: the tokenizer has %d tokens, more than "
                          "vocab_size (%d)",
                          what, have, c->vocab_size);
  }
  *out = t;
  return RELATTN_OK;
}

void relattn_tokenizer_free(relattn_tokenizer *t) {
  if (t) t->destroy(t);
}

int relattn_tokenizer_kind(const relattn_tokenizer *t) { return t->kind; }
int relattn_tokenizer_n_ids(const relattn_tokenizer *t) { return t->n_ids; }

int relattn_tokenizer_piece_id(const relattn_tokenizer *t, const char *piece) {
  if (!t->piece_id) return -1;
  return t->piece_id(t, (const uint8_t *)piece, strlen(piece));
}

int relattn_tokenizer_encode(const relattn_tokenizer *t, const uint8_t *text,
                             size_t n, size_t lead, size_t max_ids,
                             int32_t **ids, size_t *n_ids) {
  relattn_idbuf b;
  size_t i;
  int rc = RELATTN_OK;
  memset(&b, 0, sizeof b);
  b.max = max_ids > SIZE_MAX / 8 - lead ? SIZE_MAX / 8 : max_ids + lead;
  *ids = NULL;
  *n_ids = 0;
  for (i = 0; i < lead && rc == RELATTN_OK; i++)
    rc = relattn_idbuf_push(&b, 0);
  if (rc == RELATTN_OK) rc = t->encode(t, text, n, &b);
  if (rc == RELATTN_OK && !b.ids && !(b.ids = malloc(sizeof *b.ids)))
    rc = RELATTN_ERR_NOMEM; /* no text: an empty array, not NULL */
  if (rc != RELATTN_OK) {
    free(b.ids);
    return rc;
  }
  *ids = b.ids;
  *n_ids = b.n - lead;
  return RELATTN_OK;
}

int relattn_tokenizer_decode(const relattn_tokenizer *t, const int32_t *ids,
                             size_t n, uint8_t **text, size_t *len,
                             const char *what, char *err, size_t errlen) {
  relattn_bytebuf b;
  int rc;
  memset(&b, 0, sizeof b);
  *text = NULL;
  *len = 0;
  rc = t->decode(t, ids, n, &b, what, err, errlen);
  if (rc == RELATTN_OK && relattn_bytebuf_add(&b, "", 1)) rc = RELATTN_ERR_NOMEM;
  if (rc != RELATTN_OK) {
    if (rc == RELATTN_ERR_NOMEM)
      relattn_errorf(err, errlen, rc, "%s: out of memory", what);
    free(b.p);
    return rc;
  }
  *text = b.p;
  *len = b.n - 1; /* a NUL after the text */
  return RELATTN_OK;
}

/* ---- the byte tokenizer's older entry points ------------------------------ */

void relattn_tokenize_bytes(const uint8_t *text, size_t n, int32_t *out) {
  size_t i;
  for (i = 0; i < n; i++) out[i] = text[i];
}

int relattn_detokenize_bytes(const relattn_config *c, const int32_t *ids,
                             size_t n, uint8_t *out, size_t *out_len,
                             const char *what, char *err, size_t errlen) {
  size_t i, len = 0;
  for (i = 0; i < n; i++) {
    int32_t t = ids[i];
    if (t >= 0 && t < 256)
      out[len++] = (uint8_t)t;
    else if (t == c->bos || t == c->eos || t == c->pad)
      continue; /* markers, not text */
    else
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: token %d at position %zu is not a byte (0-255) "
                            "nor the tokenizer's bos, eos or pad",
                            what, (int)t, i);
  }
  *out_len = len;
  return RELATTN_OK;
}
