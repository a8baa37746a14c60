/*
** tok_wordpiece.c: BERT's tokenizer, as Hugging Face's slow BertTokenizer
** (transformers, models/bert/tokenization_bert.py: BasicTokenizer, then
** WordpieceTokenizer, after tokenization_utils.py's split on the special
** tokens) gives it.
**
** The file is BERT's vocab.txt: one token per line (lines end with \n,
** \r\n or \r, as Python's universal newlines read them); a token's id is
** its line number from 0; a token on two lines has the later id.
**
** HOW IT WORKS (each step as the Python does it; the Unicode properties
** come from tables generated from Python's unicodedata, src/unicode_gen.py)
**   0. the special tokens [UNK] [SEP] [PAD] [CLS] [MASK] of the vocabulary,
**      written in the text, are split off first, each its own id
**   1. clean: U+0000, U+FFFD and control characters (category C*, except
**      \t \n \r) are dropped, invalid UTF-8 with them; BERT's whitespace
**      (\t \n \r, space, Zs) becomes a space
**   2. CJK ideographs get a space on each side (tokenize_chinese_chars)
**   3. split on Python's whitespace (str.split)
**   4. each piece: str.lower() (with its final sigma rule) when
**      do_lower_case; NFD with nonspacing marks (Mn) dropped when
**      strip_accents (by default: when do_lower_case)
**   5. punctuation (P* and the ASCII symbols) split off as one-character words
**   6. each word: [UNK] past 100 characters, else greedy longest match from
**      the left, continuation pieces with "##" in front; [UNK] for the whole
**      word when some part matches nothing
** tokenizer.rules "tokenizers": as Hugging Face's Rust library runs a
** tokenizer.json's BertNormalizer and BertPreTokenizer instead, where it
** differs from the Python: its categories are Unicode 8.0's (the
** unicode_categories crate), so in 1, 4 and 5 a code point assigned later
** (or unassigned) is neither control, nor Mn, nor punctuation: kept, and
** a word holding one is [UNK] unless the vocabulary has it; its whitespace
** in 1 is Rust's (White_Space); in 4, lowercasing is per character, Σ
** always σ (no final sigma rule). relattn_uflags8_of gives those flags.
**
** Decoding leaves out the config's bos, eos and pad ([CLS], [SEP], [PAD]),
** joins the other tokens with spaces, removes " ##" and strips the ends
** (convert_tokens_to_string), then, with clean_up_tokenization_spaces,
** removes the space before . ? ! , and English contractions
** (clean_up_tokenization), as PreTrainedTokenizer.decode does.
*/
#include "tok.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

#define MAX_WORD_CHARS 100 /* max_input_chars_per_word */

typedef struct wp_slot {
  uint32_t hash;
  int32_t id;       /* -1: empty */
} wp_slot;

typedef struct wordpiece {
  relattn_tokenizer base; /* must be first */
  uint8_t *pool;          /* the file's bytes */
  size_t *off, *len;      /* (n_ids): each line's token in pool */
  int32_t *final;         /* (n_ids): the id its token has (a later line) */
  wp_slot *slots;         /* open addressing, power of two */
  size_t mask;
  int unk;
  int32_t special[5];     /* ids of specials[] (below), -1: not in the vocab */
  int lower, strip, chinese;
  int rules;              /* RELATTN_RULES_* */
  int clean;              /* clean_up_tokenization_spaces */
} wordpiece;

static uint32_t hashBytes(const uint8_t *p, size_t n) {
  uint32_t h = 2166136261u; /* FNV-1a */
  size_t i;
  for (i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
  return h;
}

/* The id of the token p[0..n), or -1. */
static int32_t lookup(const wordpiece *w, const uint8_t *p, size_t n) {
  uint32_t h = hashBytes(p, n);
  size_t i = h & w->mask;
  for (;; i = (i + 1) & w->mask) {
    const wp_slot *s = &w->slots[i];
    if (s->id < 0) return -1;
    if (s->hash == h && w->len[s->id] == n &&
        memcmp(w->pool + w->off[s->id], p, n) == 0)
      return s->id;
  }
}

/* The id of a line's token, as the encoder gives it (its later line). */
static int32_t wpPieceId(const relattn_tokenizer *t, const uint8_t *p,
                         size_t n) {
  const wordpiece *w = (const wordpiece *)t;
  int32_t id = lookup(w, p, n);
  return id < 0 ? -1 : w->final[id];
}

static const uint8_t *wpIdText(const relattn_tokenizer *t, int32_t id,
                               size_t *n) {
  const wordpiece *w = (const wordpiece *)t;
  if (id < 0 || id >= t->n_ids) return NULL;
  *n = w->len[id];
  return w->pool + w->off[id];
}

static void wpDestroy(relattn_tokenizer *t) {
  wordpiece *w = (wordpiece *)t;
  free(w->pool);
  free(w->off);
  free(w->len);
  free(w->final);
  free(w->slots);
  free(w);
}

/* ---- encode ----------------------------------------------------------------- */

/* Code points, each with the span [a, b) of the text's bytes it came
** from (for the spans of the pieces: relattn_tokenizer_encode_spans). */
typedef struct cpbuf {
  uint32_t *p;
  uint32_t *a, *b;
  size_t n, cap;
} cpbuf;

static int cpPush(cpbuf *b, uint32_t c, size_t from, size_t to) {
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    uint32_t *q = realloc(b->p, cap * sizeof *q), *qa, *qb;
    if (!q) return RELATTN_ERR_NOMEM;
    b->p = q;
    if (!(qa = realloc(b->a, cap * sizeof *qa))) return RELATTN_ERR_NOMEM;
    b->a = qa;
    if (!(qb = realloc(b->b, cap * sizeof *qb))) return RELATTN_ERR_NOMEM;
    b->b = qb;
    b->cap = cap;
  }
  b->a[b->n] = (uint32_t)from, b->b[b->n] = (uint32_t)to;
  b->p[b->n++] = c;
  return RELATTN_OK;
}

static void cpFree(cpbuf *b) {
  free(b->p);
  free(b->a);
  free(b->b);
}

static int isChinese(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* The Unicode flags of c under the tokenizer's rules. */
static int wpFlags(const wordpiece *w, uint32_t c) {
  return w->rules == RELATTN_RULES_TOKENIZERS ? relattn_uflags8_of(c)
                                               : relattn_uflags_of(c);
}

/* One word (after punctuation splitting) to ids; sa, sb: each code
** point's span. */
static int wordIds(const wordpiece *w, const uint32_t *cp, const uint32_t *sa,
                   const uint32_t *sb, size_t n, relattn_idbuf *out,
                   uint8_t *buf /* 2 + 4 * MAX_WORD_CHARS */) {
  size_t off[MAX_WORD_CHARS + 1], start = 0, mark = out->n, i;
  uint8_t *word = buf + 2; /* "##" goes in front of it when needed */
  int rc;
  out->s0 = sa[0], out->s1 = sb[n - 1]; /* the whole word, as [UNK] */
  if (n > MAX_WORD_CHARS) return relattn_idbuf_push(out, w->unk);
  off[0] = 0;
  for (i = 0; i < n; i++) off[i + 1] = off[i] + relattn_utf8_encode(cp[i], word + off[i]);
  while (start < n) {
    size_t end = n;
    int32_t id = -1;
    for (; end > start; end--) {
      const uint8_t *p = word + off[start];
      size_t len = off[end] - off[start];
      if (start > 0) {
        /* "##" + the piece, built in place over the bytes before it */
        uint8_t save[2];
        memcpy(save, p - 2, 2);
        memcpy((uint8_t *)p - 2, "##", 2);
        id = lookup(w, p - 2, len + 2);
        memcpy((uint8_t *)p - 2, save, 2);
      } else {
        id = lookup(w, p, len);
      }
      if (id >= 0) break;
    }
    if (id < 0) {
      out->n = mark; /* the whole word is [UNK] */
      out->s0 = sa[0], out->s1 = sb[n - 1];
      return relattn_idbuf_push(out, w->unk);
    }
    out->s0 = sa[start], out->s1 = sb[end - 1];
    if ((rc = relattn_idbuf_push(out, id)) != RELATTN_OK) return rc;
    start = end;
  }
  return RELATTN_OK;
}

/* One whitespace-separated piece: lower, strip accents, split
** punctuation; what a character becomes keeps its span (sa, sb). */
static int pieceIds(const wordpiece *w, const uint32_t *cp, const uint32_t *sa,
                    const uint32_t *sb, size_t n, cpbuf *tmp,
                    relattn_idbuf *out, uint8_t *buf) {
  size_t i, start;
  int rc, k;
  tmp->n = 0;
  for (i = 0; i < n; i++) {
    uint32_t c = cp[i];
    const uint32_t *low = NULL;
    int nl = 1;
    if (w->lower) {
      if (c == 0x3A3 && w->rules == RELATTN_RULES_TRANSFORMERS) {
        /* str.lower()'s final sigma: cased letter before, none after,
        ** case-ignorable characters skipped on both sides */
        size_t j = i;
        int fin = 0;
        while (j > 0 && (relattn_uflags_of(cp[j - 1]) & RELATTN_U_IGNORABLE)) j--;
        if (j > 0 && (relattn_uflags_of(cp[j - 1]) & RELATTN_U_CASED)) {
          for (j = i + 1; j < n && (relattn_uflags_of(cp[j]) & RELATTN_U_IGNORABLE); j++) {
          }
          fin = j == n || !(relattn_uflags_of(cp[j]) & RELATTN_U_CASED);
        }
        c = fin ? 0x3C2 : 0x3C3;
      } else {
        low = relattn_ulower(c, &nl);
      }
    }
    for (k = 0; k < nl; k++) {
      uint32_t d = low ? low[k] : c;
      if (w->strip) {
        int nd = 1, m;
        const uint32_t *dec = relattn_unfd(d, &nd);
        uint32_t hangul[3];
        if (d >= 0xAC00 && d < 0xAC00 + 11172) {
          /* Hangul syllables decompose by rule (Unicode 3.12) */
          uint32_t s = d - 0xAC00;
          hangul[0] = 0x1100 + s / 588;
          hangul[1] = 0x1161 + (s % 588) / 28;
          hangul[2] = 0x11A7 + s % 28;
          dec = hangul;
          nd = s % 28 ? 3 : 2;
        }
        for (m = 0; m < nd; m++) {
          uint32_t e = dec ? dec[m] : d;
          if (wpFlags(w, e) & RELATTN_U_MN) continue;
          if ((rc = cpPush(tmp, e, sa[i], sb[i])) != RELATTN_OK) return rc;
        }
      } else if ((rc = cpPush(tmp, d, sa[i], sb[i])) != RELATTN_OK) {
        return rc;
      }
    }
  }
  for (i = start = 0; i <= tmp->n; i++) {
    if (i < tmp->n && !(wpFlags(w, tmp->p[i]) & RELATTN_U_PUNCT)) continue;
    if (i > start &&
        (rc = wordIds(w, tmp->p + start, tmp->a + start, tmp->b + start,
                      i - start, out, buf)))
      return rc;
    if (i < tmp->n &&
        (rc = wordIds(w, tmp->p + i, tmp->a + i, tmp->b + i, 1, out, buf)))
      return rc;
    start = i + 1;
  }
  return RELATTN_OK;
}

/* Steps 1 to 6 on text without special tokens. */
/* Steps 3 to 6 on cleaned text: its whitespace-separated pieces. */
static int wpWords(const wordpiece *w, const cpbuf *cps, cpbuf *tmp,
                   relattn_idbuf *out, uint8_t *buf) {
  const uint32_t *cp = cps->p;
  size_t i, start, n = cps->n;
  int rc = RELATTN_OK;
  for (i = start = 0; i <= n && rc == RELATTN_OK; i++) {
    if (i < n && !(wpFlags(w, cp[i]) & RELATTN_U_SPACE)) continue;
    if (i > start)
      rc = pieceIds(w, cp + start, cps->a + start, cps->b + start, i - start,
                    tmp, out, buf);
    start = i + 1;
  }
  return rc;
}

/* Steps 1 and 2 character by character; the words before each whitespace
** go through steps 3 to 6 as soon as it is seen (no word spans it), so the
** work stops soon after out passes its limit, however long the text. */
static int wpText(const wordpiece *w, const uint8_t *text, size_t n,
                  size_t at, relattn_idbuf *out) {
  cpbuf cps = {0}, tmp = {0};
  uint8_t buf[2 + 4 * MAX_WORD_CHARS];
  size_t i = 0;
  int rc = RELATTN_OK;
  while (i < n && rc == RELATTN_OK) {
    uint32_t c;
    int len = relattn_utf8_decode(text + i, n - i, &c), f;
    size_t from = at + i; /* the character's span in the caller's text */
    if (len == 0) { /* U+FFFD in Python: dropped */
      i++;
      continue;
    }
    i += (size_t)len;
    f = wpFlags(w, c);
    if (c == 0 || c == 0xFFFD || (f & RELATTN_U_CONTROL)) continue;
    if (f & RELATTN_U_BERT_WS) c = ' ';
    if (w->chinese && isChinese(c)) {
      if ((rc = cpPush(&cps, ' ', from, at + i)) == RELATTN_OK &&
          (rc = cpPush(&cps, c, from, at + i)) == RELATTN_OK)
        rc = cpPush(&cps, ' ', from, at + i);
    } else {
      rc = cpPush(&cps, c, from, at + i);
    }
    if (rc == RELATTN_OK &&
        (wpFlags(w, cps.p[cps.n - 1]) & RELATTN_U_SPACE)) {
      rc = wpWords(w, &cps, &tmp, out, buf);
      cps.n = 0;
    }
  }
  if (rc == RELATTN_OK) rc = wpWords(w, &cps, &tmp, out, buf);
  cpFree(&cps);
  cpFree(&tmp);
  return rc;
}

/* The special tokens BertTokenizer never splits: written in the text, each
** is its own id (PreTrainedTokenizer.tokenize splits the text on them
** first, case-sensitively); the text between them is tokenized alone. */
static const char *const specials[] = {"[UNK]", "[SEP]", "[PAD]", "[CLS]",
                                       "[MASK]"};

static int wpEncode(const relattn_tokenizer *t, const uint8_t *text, size_t n,
                    relattn_idbuf *out) {
  const wordpiece *w = (const wordpiece *)t;
  size_t i, seg = 0, k;
  int rc = RELATTN_OK;
  for (i = 0; i < n && rc == RELATTN_OK; i++) {
    if (text[i] != '[') continue;
    for (k = 0; k < 5; k++) {
      size_t len = strlen(specials[k]);
      if (w->special[k] >= 0 && n - i >= len &&
          memcmp(text + i, specials[k], len) == 0) {
        if (i > seg) rc = wpText(w, text + seg, i - seg, seg, out);
        out->s0 = i, out->s1 = i + len;
        if (rc == RELATTN_OK) rc = relattn_idbuf_push(out, w->special[k]);
        seg = i + len;
        i = seg - 1;
        break;
      }
    }
  }
  if (rc == RELATTN_OK && n > seg)
    rc = wpText(w, text + seg, n - seg, seg, out);
  return rc;
}

/* ---- decode ----------------------------------------------------------------- */

static int isPySpace(const uint8_t *p, size_t n, size_t *len) {
  uint32_t c;
  int l = relattn_utf8_decode(p, n, &c);
  *len = (size_t)l;
  return l > 0 && (relattn_uflags_of(c) & RELATTN_U_SPACE);
}

static int wpDecode(const relattn_tokenizer *t, const int32_t *ids, size_t n,
                    size_t at, relattn_bytebuf *out, const char *what,
                    char *err, size_t errlen) {
  const wordpiece *w = (const wordpiece *)t;
  relattn_bytebuf joined = {0};
  size_t i, a, b, len, kept = 0;
  int rc = RELATTN_OK;
  for (i = 0; i < n && rc == RELATTN_OK; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= t->n_ids) {
      free(joined.p);
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: token %d at position %zu is not in the "
                            "tokenizer's vocabulary (%d tokens)",
                            what, (int)id, at + i, t->n_ids);
    }
    /* the template's markers are no text (decode's skip_special_tokens) */
    if (id == t->bos || id == t->eos || id == t->pad) continue;
    if (w->final[id] != id) id = w->unk; /* as ids_to_tokens gives it */
    if (kept++) rc = relattn_bytebuf_add(&joined, " ", 1);
    if (rc == RELATTN_OK)
      rc = relattn_bytebuf_add(&joined, w->pool + w->off[id], w->len[id]);
  }
  if (rc != RELATTN_OK) {
    free(joined.p);
    return rc;
  }
  /* .replace(" ##", ""): left to right, without overlaps */
  for (a = b = 0; a < joined.n;) {
    if (joined.n - a >= 3 && memcmp(joined.p + a, " ##", 3) == 0) {
      a += 3;
      continue;
    }
    joined.p[b++] = joined.p[a++];
  }
  joined.n = b;
  /* .strip() */
  for (a = 0; a < joined.n && isPySpace(joined.p + a, joined.n - a, &len);)
    a += len;
  for (b = joined.n; b > a;) {
    size_t k = b - 1;
    while (k > a && (joined.p[k] & 0xC0) == 0x80) k--;
    if (!isPySpace(joined.p + k, b - k, &len) || k + len != b) break;
    b = k;
  }
  if (w->clean) {
    /* PreTrainedTokenizerBase.clean_up_tokenization (transformers'
    ** tokenization_utils_base.py): each str.replace over the whole text in
    ** turn, left to right without overlaps; never longer, so in place */
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ",
                                       " n't", " 'm", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'",
                                     "n't", "'m", "'s", "'ve", "'re"};
    size_t r, e = b, lf, lt;
    for (r = 0; r < sizeof from / sizeof from[0]; r++) {
      size_t x = a, y = a;
      lf = strlen(from[r]), lt = strlen(to[r]);
      while (x < e) {
        if (e - x >= lf && memcmp(joined.p + x, from[r], lf) == 0) {
          memmove(joined.p + y, to[r], lt);
          x += lf, y += lt;
        } else {
          joined.p[y++] = joined.p[x++];
        }
      }
      e = y;
    }
    b = e;
  }
  rc = relattn_bytebuf_add(out, joined.p + a, b - a);
  free(joined.p);
  return rc;
}

/* ---- the file ---------------------------------------------------------------- */

int relattn_wordpiece_init(relattn_tokenizer **out, const relattn_config *c,
                           const uint8_t *file, size_t n, const char *what,
                           char *err, size_t errlen) {
  wordpiece *w;
  size_t i, lines = 0, cap, k;
  uint32_t cp;
  *out = NULL;
  for (i = 0; i < n;) {
    int l = relattn_utf8_decode(file + i, n - i, &cp);
    if (l == 0)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "%s: tokenizer.wordpiece is not valid UTF-8 at "
                            "byte %zu",
                            what, i);
    i += (size_t)l;
  }
  for (i = 0; i < n; i++) /* lines: each \n, \r\n or \r ends one */
    if (file[i] == '\n' || (file[i] == '\r' && (i + 1 == n || file[i + 1] != '\n')))
      lines++;
  if (n && file[n - 1] != '\n' && file[n - 1] != '\r') lines++;
  if (lines == 0)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "%s: tokenizer.wordpiece has no tokens", what);
  if (lines > 0x7ffffffe)
    return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                          "%s: tokenizer.wordpiece has more than 2^31 tokens",
                          what);
  w = calloc(1, sizeof *w);
  if (!w) return RELATTN_ERR_NOMEM;
  for (cap = 16; cap < 2 * lines; cap *= 2) {
  }
  w->pool = malloc(n ? n : 1);
  w->off = malloc(lines * sizeof *w->off);
  w->len = malloc(lines * sizeof *w->len);
  w->final = malloc(lines * sizeof *w->final);
  w->slots = malloc(cap * sizeof *w->slots);
  if (!w->pool || !w->off || !w->len || !w->final || !w->slots) {
    wpDestroy(&w->base);
    return RELATTN_ERR_NOMEM;
  }
  if (n) memcpy(w->pool, file, n);
  w->mask = cap - 1;
  for (k = 0; k < cap; k++) w->slots[k].id = -1;
  for (i = 0, k = 0; k < lines; k++) {
    size_t s = i, h;
    uint32_t hv;
    while (i < n && file[i] != '\n' && file[i] != '\r') i++;
    w->off[k] = s, w->len[k] = i - s;
    if (i < n && file[i] == '\r' && i + 1 < n && file[i + 1] == '\n') i++;
    i++;
    /* insert, or move the token to this (later) line */
    hv = hashBytes(file + s, w->len[k]);
    for (h = hv & w->mask;; h = (h + 1) & w->mask) {
      wp_slot *sl = &w->slots[h];
      if (sl->id < 0) {
        sl->hash = hv, sl->id = (int32_t)k;
        break;
      }
      if (sl->hash == hv && w->len[sl->id] == w->len[k] &&
          memcmp(file + w->off[sl->id], file + s, w->len[k]) == 0) {
        sl->id = (int32_t)k;
        break;
      }
    }
  }
  for (k = 0; k < lines; k++)
    w->final[k] = lookup(w, w->pool + w->off[k], w->len[k]);
  w->base.n_ids = (int)lines;
  w->base.encode = wpEncode;
  w->base.decode = wpDecode;
  w->base.destroy = wpDestroy;
  w->base.piece_id = wpPieceId;
  w->base.id_text = wpIdText;
  w->unk = lookup(w, (const uint8_t *)"[UNK]", 5);
  for (k = 0; k < 5; k++)
    w->special[k] = lookup(w, (const uint8_t *)specials[k], strlen(specials[k]));
  w->lower = c->do_lower_case;
  w->strip = c->strip_accents < 0 ? c->do_lower_case : c->strip_accents;
  w->chinese = c->chinese_chars;
  w->rules = c->tok_rules;
  w->clean = c->clean_up_spaces;
  if (w->unk < 0) {
    wpDestroy(&w->base);
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "%s: tokenizer.wordpiece has no [UNK] token", what);
  }
  *out = &w->base;
  return RELATTN_OK;
}
