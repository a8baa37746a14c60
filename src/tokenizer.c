/*
** tokenizer.c: the one interface every tokenizer kind sits behind
** (relattn.h, "tokenizers"), and the byte tokenizer (docs/reference.md).
**
** A kind is chosen by the config's tokenizer.type: bytes (UTF-8 bytes are
** ids 0-255; bos, eos and pad are ids >= 256), wordpiece (tok_wordpiece.c)
** or sentencepiece (tok_sentencepiece.c). The kinds with a file parse it
** once, when the model is loaded; encode and decode then only read it, so
** one tokenizer serves every thread.
**
** tokenizer.split_special sits in front of every kind: the text is cut at
** the special tokens' texts, each becoming its id, and the parts between
** are encoded as they are (below, "special tokens").
*/
#include "tok.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

/* ---- bytes ---------------------------------------------------------------- */

static int bytesEncode(const relattn_tokenizer *t, const uint8_t *text,
                       size_t n, relattn_idbuf *out) {
  size_t i;
  int rc = RELATTN_OK;
  (void)t;
  for (i = 0; i < n && rc == RELATTN_OK; i++) {
    out->s0 = i, out->s1 = i + 1;
    rc = relattn_idbuf_push(out, text[i]);
  }
  return rc;
}

static int bytesDecode(const relattn_tokenizer *t, const int32_t *ids,
                       size_t n, size_t at, relattn_bytebuf *out,
                       const char *what, char *err, size_t errlen) {
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
                            what, (int)id, at + i);
    if (relattn_bytebuf_add(out, &b, 1)) return RELATTN_ERR_NOMEM;
  }
  return RELATTN_OK;
}

static void plainDestroy(relattn_tokenizer *t) { free(t); }

/* ---- special tokens ----------------------------------------------------------- */

/* As transformers' PreTrainedTokenizer.tokenize (tokenization_utils.py)
** with its added tokens: Trie.split cuts the text at each match, the
** earliest first and of those the longest; a token with rstrip takes the
** whitespace (Python's str.isspace) at the start of the part after it, one
** with lstrip that at the end of the part before it; parts left empty are
** dropped, the others go to the tokenizer's own encode (_tokenize). HF's
** single_word flag is not followed. */

static void specialsFree(relattn_tokenizer *t) {
  int k;
  for (k = 0; k < t->n_special; k++) free(t->special[k].text);
  free(t->special);
  t->special = NULL;
  t->n_special = 0;
  memset(t->first, 0, sizeof t->first);
}

int relattn_tokenizer_set_special(relattn_tokenizer *t,
                                  const relattn_special_token *s, int n,
                                  const char *what, char *err,
                                  size_t errlen) {
  struct tok_special *sp;
  int k, m = 0, a, b, *from;
  specialsFree(t);
  if (n <= 0) return RELATTN_OK;
  sp = calloc((size_t)n, sizeof *sp);
  from = malloc((size_t)n * sizeof *from);
  if (!sp || !from) {
    free(sp);
    free(from);
    return RELATTN_ERR_NOMEM;
  }
  /* one entry per id: the last one with a text, else the first */
  for (k = 0; k < n; k++) {
    for (a = 0; a < m && sp[a].id != s[k].id; a++) {
    }
    if (a == m) sp[m].id = s[k].id, from[m++] = k;
    else if (s[k].text) from[a] = k;
  }
  t->special = sp;
  t->n_special = m;
  for (a = 0; a < m; a++) {
    const relattn_special_token *e = &s[from[a]];
    const uint8_t *text = (const uint8_t *)e->text;
    size_t len = text ? strlen(e->text) : 0;
    if (!text && t->id_text) text = t->id_text(t, e->id, &len);
    if (!text || len == 0) {
      specialsFree(t);
      free(from);
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            text ? "%s: tokenizer.split_special: token %d "
                                   "(%s) has an empty text"
                                 : "%s: tokenizer.split_special: token %d "
                                   "(%s) has no text in the tokenizer's "
                                   "file; give it in tokenizer.added_tokens",
                            what, (int)e->id, e->key ? e->key : "?");
    }
    sp[a].text = malloc(len);
    if (!sp[a].text) {
      specialsFree(t);
      free(from);
      return RELATTN_ERR_NOMEM;
    }
    memcpy(sp[a].text, text, len);
    sp[a].n = len;
    sp[a].lstrip = e->lstrip != 0;
    sp[a].rstrip = e->rstrip != 0;
  }
  for (a = 0; a < m; a++)
    for (b = a + 1; b < m; b++)
      if (sp[a].n == sp[b].n && memcmp(sp[a].text, sp[b].text, sp[a].n) == 0) {
        int ia = sp[a].id, ib = sp[b].id;
        const char *ka = s[from[a]].key, *kb = s[from[b]].key;
        specialsFree(t);
        free(from);
        return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                              "%s: tokenizer.split_special: tokens %d (%s) "
                              "and %d (%s) have the same text",
                              what, ia, ka ? ka : "?", ib, kb ? kb : "?");
      }
  for (a = 0; a < m; a++) t->first[sp[a].text[0]] = 1;
  free(from);
  return RELATTN_OK;
}

/* The longest special text at p (n > 0 bytes left), or NULL. */
static const struct tok_special *specialAt(const relattn_tokenizer *t,
                                           const uint8_t *p, size_t n) {
  const struct tok_special *best = NULL;
  int k;
  if (!t->first[p[0]]) return NULL;
  for (k = 0; k < t->n_special; k++) {
    const struct tok_special *s = &t->special[k];
    if (s->n <= n && (!best || s->n > best->n) &&
        memcmp(s->text, p, s->n) == 0)
      best = s;
  }
  return best;
}

static int isSpaceChar(const uint8_t *p, size_t n, size_t *len) {
  uint32_t c;
  int l = relattn_utf8_decode(p, n, &c);
  *len = (size_t)l;
  return l > 0 && (relattn_uflags_of(c) & RELATTN_U_SPACE);
}

/* Bytes of whitespace at the start of p[0..n) (str.lstrip). */
static size_t leadingSpace(const uint8_t *p, size_t n) {
  size_t i = 0, len;
  while (i < n && isSpaceChar(p + i, n - i, &len)) i += len;
  return i;
}

/* Bytes of whitespace at the end of p[0..n) (str.rstrip): the last
** character starts at most 3 continuation bytes back. */
static size_t trailingSpace(const uint8_t *p, size_t n) {
  size_t end = n, j, len;
  while (end > 0) {
    for (j = end - 1; j > 0 && end - j < 4 && (p[j] & 0xC0) == 0x80; j--) {
    }
    if (!isSpaceChar(p + j, end - j, &len) || len != end - j) break;
    end = j;
  }
  return n - end;
}

static int splitEncode(const relattn_tokenizer *t, const uint8_t *text,
                       size_t n, relattn_idbuf *out) {
  size_t start = 0, at;
  int strip_left = 0; /* the token before the part has rstrip */
  int rc;
  for (;;) {
    const struct tok_special *s = NULL;
    const uint8_t *p = text + start;
    size_t len;
    for (at = start; at < n && !(s = specialAt(t, text + at, n - at)); at++) {
    }
    len = at - start;
    if (strip_left) {
      size_t k = leadingSpace(p, len);
      p += k, len -= k;
    }
    if (s && s->lstrip) len -= trailingSpace(p, len);
    if (len > 0) {
      size_t base = out->base;
      out->base += (size_t)(p - text);
      rc = t->encode(t, p, len, out);
      out->base = base;
      if (rc != RELATTN_OK) return rc;
    }
    if (!s) return RELATTN_OK;
    out->s0 = at, out->s1 = at + s->n; /* the token's text alone */
    if ((rc = relattn_idbuf_push(out, s->id)) != RELATTN_OK) return rc;
    strip_left = s->rstrip;
    start = at + s->n;
  }
}

static const struct tok_special *specialOf(const relattn_tokenizer *t,
                                           int32_t id) {
  int k;
  for (k = 0; k < t->n_special; k++)
    if (t->special[k].id == id) return &t->special[k];
  return NULL;
}

/* Each special id its text; the runs between them through the kind's
** decode; the parts joined by a space, as transformers' _decode with
** spaces_between_special_tokens (an empty run is no part). */
static int splitDecode(const relattn_tokenizer *t, const int32_t *ids,
                       size_t n, relattn_bytebuf *out, const char *what,
                       char *err, size_t errlen) {
  relattn_bytebuf run = {0};
  size_t i = 0, j;
  int rc = RELATTN_OK, first = 1;
  while (i < n && rc == RELATTN_OK) {
    const struct tok_special *s = specialOf(t, ids[i]);
    const uint8_t *part;
    size_t len;
    if (s) {
      part = s->text, len = s->n, j = i + 1;
    } else {
      for (j = i; j < n && !specialOf(t, ids[j]); j++) {
      }
      run.n = 0;
      rc = t->decode(t, ids + i, j - i, i, &run, what, err, errlen);
      part = run.p, len = run.n;
    }
    if (rc == RELATTN_OK && len > 0) {
      if (!first) rc = relattn_bytebuf_add(out, " ", 1);
      if (rc == RELATTN_OK) rc = relattn_bytebuf_add(out, part, len);
      first = 0;
    }
    i = j;
  }
  free(run.p);
  return rc;
}

/* ---- the interface ---------------------------------------------------------- */

static int bytesInit(relattn_tokenizer **t, const relattn_config *c,
                     const uint8_t *file, size_t n, const char *what,
                     char *err, size_t errlen) {
  *t = calloc(1, sizeof **t);
  if (!*t) return RELATTN_ERR_NOMEM;
  (*t)->n_ids = 256;
  (*t)->encode = bytesEncode;
  (*t)->decode = bytesDecode;
  (*t)->destroy = plainDestroy;
  return RELATTN_OK;
}

/* The kinds, by tokenizer.type (RELATTN_TOK_*): the name the config and
** the tokenizer's tensor use, and the constructor. The next kind is one
** more entry here, its RELATTN_TOK_* and its tok_<kind>.c. */
static const struct {
  const char *name;
  relattn_tok_init *init;
} kinds[] = {
    [RELATTN_TOK_BYTES] = {"bytes", bytesInit},
    [RELATTN_TOK_WORDPIECE] = {"wordpiece", relattn_wordpiece_init},
    [RELATTN_TOK_SENTENCEPIECE] = {"sentencepiece",
                                   relattn_sentencepiece_init},
};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

const char *relattn_tokenizer_kind_name(int kind) {
  return kind >= 0 && kind < N_KINDS ? kinds[kind].name : "?";
}

int relattn_tokenizer_new(relattn_tokenizer **out, const relattn_config *c,
                          const uint8_t *file, size_t n, const char *what,
                          char *err, size_t errlen) {
  relattn_tokenizer *t = NULL;
  int rc;
  *out = NULL;
  if (c->tok_type < 0 || c->tok_type >= N_KINDS)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: unknown tokenizer type", what);
  rc = kinds[c->tok_type].init(&t, c, file, n, what, err, errlen);
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

static int isJsonSpace(uint8_t c) { /* RFC 8259, sec. 2 */
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int relattn_tokenizer_file_kind(const uint8_t *file, size_t n) {
  size_t i, a, b;
  uint32_t cp;
  if (n == 0) return RELATTN_TOKFILE_UNKNOWN;
  if (relattn_sentencepiece_is_model(file, n)) return RELATTN_TOKFILE_SPM;
  for (i = 0; i < n;) {
    int l = relattn_utf8_decode(file + i, n - i, &cp);
    if (l == 0) return RELATTN_TOKFILE_UNKNOWN;
    i += (size_t)l;
  }
  a = n >= 3 && memcmp(file, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* a BOM */
  while (a < n && isJsonSpace(file[a])) a++;
  for (b = n; b > a && isJsonSpace(file[b - 1]); b--) {
  }
  if (b - a >= 2 && file[a] == '{' && file[b - 1] == '}')
    return RELATTN_TOKFILE_JSON;
  return RELATTN_TOKFILE_VOCAB;
}

const char *relattn_tokenizer_file_name(int filekind) {
  switch (filekind) {
    case RELATTN_TOKFILE_VOCAB: return "a vocab.txt (lines of UTF-8 text)";
    case RELATTN_TOKFILE_SPM: return "a SentencePiece model (a protobuf)";
    case RELATTN_TOKFILE_JSON: return "a tokenizer.json (a JSON object)";
    default: return "of no kind relattn knows";
  }
}

void relattn_tokenizer_free(relattn_tokenizer *t) {
  if (!t) return;
  specialsFree(t);
  t->destroy(t);
}

int relattn_tokenizer_kind(const relattn_tokenizer *t) { return t->kind; }
int relattn_tokenizer_n_ids(const relattn_tokenizer *t) { return t->n_ids; }

const uint8_t *relattn_tokenizer_id_text(const relattn_tokenizer *t,
                                         int32_t id, size_t *len) {
  static const uint8_t bytes[256] = {
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
      20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37,
      38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55,
      56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73,
      74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91,
      92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107,
      108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121,
      122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135,
      136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149,
      150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163,
      164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177,
      178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191,
      192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205,
      206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219,
      220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233,
      234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246, 247,
      248, 249, 250, 251, 252, 253, 254, 255};
  *len = 0;
  if (t->id_text) return t->id_text(t, id, len);
  if (t->kind == RELATTN_TOK_BYTES && id >= 0 && id < 256) {
    *len = 1;
    return bytes + id;
  }
  return NULL;
}

int relattn_tokenizer_piece_id(const relattn_tokenizer *t, const char *piece) {
  if (!t->piece_id) return -1;
  return t->piece_id(t, (const uint8_t *)piece, strlen(piece));
}

/* Both encodes: with spans, each id's span of the text too. */
static int encodeWith(const relattn_tokenizer *t, const uint8_t *text,
                      size_t n, size_t lead, size_t max_ids, int32_t **ids,
                      uint32_t **spans, size_t *n_ids) {
  relattn_idbuf b;
  size_t i;
  int rc = RELATTN_OK;
  memset(&b, 0, sizeof b);
  b.max = max_ids > SIZE_MAX / 8 - lead ? SIZE_MAX / 8 : max_ids + lead;
  b.spans_on = spans != NULL;
  *ids = NULL;
  if (spans) *spans = NULL;
  *n_ids = 0;
  if (spans && n > UINT32_MAX) return RELATTN_ERR_TOOBIG;
  for (i = 0; i < lead && rc == RELATTN_OK; i++)
    rc = relattn_idbuf_push(&b, 0);
  if (rc == RELATTN_OK)
    rc = t->n_special ? splitEncode(t, text, n, &b) : t->encode(t, text, n, &b);
  if (rc == RELATTN_OK && !b.ids && !(b.ids = malloc(sizeof *b.ids)))
    rc = RELATTN_ERR_NOMEM; /* no text: an empty array, not NULL */
  if (rc == RELATTN_OK && spans && !b.spans &&
      !(b.spans = malloc(2 * sizeof *b.spans)))
    rc = RELATTN_ERR_NOMEM;
  if (rc != RELATTN_OK) {
    free(b.ids);
    free(b.spans);
    return rc;
  }
  *ids = b.ids;
  if (spans) *spans = b.spans;
  *n_ids = b.n - lead;
  return RELATTN_OK;
}

int relattn_tokenizer_encode(const relattn_tokenizer *t, const uint8_t *text,
                             size_t n, size_t lead, size_t max_ids,
                             int32_t **ids, size_t *n_ids) {
  return encodeWith(t, text, n, lead, max_ids, ids, NULL, n_ids);
}

int relattn_tokenizer_encode_spans(const relattn_tokenizer *t,
                                   const uint8_t *text, size_t n,
                                   size_t max_ids, int32_t **ids,
                                   uint32_t **spans, size_t *n_ids) {
  return encodeWith(t, text, n, 0, max_ids, ids, spans, n_ids);
}

int relattn_tokenizer_decode(const relattn_tokenizer *t, const int32_t *ids,
                             size_t n, uint8_t **text, size_t *len,
                             const char *what, char *err, size_t errlen) {
  relattn_bytebuf b;
  int rc;
  memset(&b, 0, sizeof b);
  *text = NULL;
  *len = 0;
  rc = t->n_special ? splitDecode(t, ids, n, &b, what, err, errlen)
                    : t->decode(t, ids, n, 0, &b, what, err, errlen);
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
