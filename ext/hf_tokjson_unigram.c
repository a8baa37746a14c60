/*
** hf_tokjson_unigram.c: a Unigram tokenizer.json (what transformers'
** SpmConverter writes) mapped onto the SentencePiece kind. No SQL function
** of its own; ext/hf_tokjson.c calls it when the file's model is Unigram.
**
**   SELECT relattn_import('t5', readfile('model.safetensors'),
**                         readfile('config.json'), readfile('tokenizer.json'));
**
** HOW IT WORKS
**   The pieces and their scores become a SentencePiece ModelProto, and each
**   component (normalizer, pre_tokenizer, decoder, added_tokens, the
**   post_processor's template) is checked and written, step by step, into
**   the ModelProto's extension field that src/tok_sentencepiece.c runs as
**   Hugging Face's library does. The first component it cannot run is
**   refused by its name.
*/
#include "hf_tokjson_doc.h"

#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

/* The stored file of a Unigram tokenizer.json: a SentencePiece ModelProto
** (its pieces, trainer_spec.byte_fallback) whose extension field 777 holds
** the pipeline src/tok_sentencepiece.c runs as Hugging Face's library does
** (that file's "Hugging Face's pipeline" says the fields). */
enum { HF_FIELD = 777 };
enum { HN_PRECOMPILED = 1, HN_REPLACE = 2, HN_REPLACE_RUN = 3, HN_STRIP = 4,
       HN_LOWERCASE = 5, HN_NFKC = 6, HN_NFC = 7 };
enum { HP_METASPACE = 1, HP_WHITESPACE_SPLIT = 2 };
enum { HD_METASPACE = 1, HD_REPLACE = 2, HD_BYTE_FALLBACK = 3, HD_FUSE = 4,
       HD_STRIP = 5 };

static void pbVar(sqlite3_str *o, sqlite3_uint64 v) {
  do {
    char b = (char)(v & 0x7f);
    v >>= 7;
    if (v) b = (char)(b | 0x80);
    sqlite3_str_append(o, &b, 1);
  } while (v);
}

static void pbInt(sqlite3_str *o, int num, sqlite3_uint64 v) {
  pbVar(o, (sqlite3_uint64)num << 3);
  pbVar(o, v);
}

static void pbBytes(sqlite3_str *o, int num, const void *p, size_t n) {
  pbVar(o, (sqlite3_uint64)num << 3 | 2);
  pbVar(o, n);
  if (n) sqlite3_str_append(o, (const char *)p, (int)n);
}

/* A step message (kind, a, b, x, y) as field num of o. */
static void pbStep(sqlite3 *db, sqlite3_str *o, int num, int kind,
                   const char *a, size_t an, const char *b, int x, int y,
                   int *rc) {
  sqlite3_str *m = sqlite3_str_new(db);
  char *z;
  int n;
  pbInt(m, 1, (sqlite3_uint64)kind);
  if (a) pbBytes(m, 2, a, an);
  if (b) pbBytes(m, 3, b, strlen(b));
  if (x) pbInt(m, 4, (sqlite3_uint64)x);
  if (y) pbInt(m, 5, (sqlite3_uint64)y);
  n = sqlite3_str_length(m);
  if (sqlite3_str_errcode(m)) *rc = SQLITE_NOMEM;
  z = sqlite3_str_finish(m);
  if (z || n == 0) pbBytes(o, num, z ? z : "", (size_t)n);
  else *rc = SQLITE_NOMEM;
  sqlite3_free(z);
}

static int tjArrayLen(tj_doc *d, const char *path) {
  char type[16], *v, *p = sqlite3_mprintf("%s", path);
  int n = 0;
  sqlite3_stmt *st = NULL;
  (void)type;
  (void)v;
  if (!p) {
    d->rc = SQLITE_NOMEM;
    return 0;
  }
  if (d->rc == SQLITE_OK &&
      (d->rc = sqlite3_prepare_v2(d->db, "SELECT json_array_length(?1, ?2)",
                                  -1, &st, NULL)) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, p, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int(st, 0);
    d->rc = sqlite3_finalize(st);
  }
  sqlite3_free(p);
  return n;
}

/* The paths of a component's members: the component itself, or each of
** its Sequence's list (members: "normalizers", ...). *n of them. */
static char **tjMembers(tj_doc *d, const char *key, const char *members,
                        int *n) {
  char type[16], *t, *path = sqlite3_mprintf("$.%s", key), **out;
  int k, m = 1, seq = 0;
  *n = 0;
  if (!path) {
    d->rc = SQLITE_NOMEM;
    return NULL;
  }
  t = sqlite3_mprintf("$.%s.type", key);
  if (t) {
    char *v = relattn_tj_get(d, t, type);
    seq = v && strcmp(v, "Sequence") == 0;
    sqlite3_free(v);
    sqlite3_free(t);
  }
  if (seq) {
    char *list = sqlite3_mprintf("$.%s.%s", key, members);
    m = list ? tjArrayLen(d, list) : 0;
    sqlite3_free(list);
  }
  out = sqlite3_malloc64((sqlite3_uint64)(m + 1) * sizeof *out);
  if (!out || d->rc != SQLITE_OK) {
    sqlite3_free(out);
    sqlite3_free(path);
    if (d->rc == SQLITE_OK) d->rc = SQLITE_NOMEM;
    return NULL;
  }
  for (k = 0; k < m; k++) {
    out[k] = seq ? sqlite3_mprintf("%s.%s[%d]", path, members, k)
                 : sqlite3_mprintf("%s", path);
    if (!out[k]) d->rc = SQLITE_NOMEM;
  }
  out[m] = NULL;
  sqlite3_free(path);
  *n = m;
  return out;
}

static void tjMembersFree(char **m, int n) {
  int k;
  if (!m) return;
  for (k = 0; k < n; k++) sqlite3_free(m[k]);
  sqlite3_free(m);
}

/* member + "." + field, read */
static char *tjField(tj_doc *d, const char *member, const char *field,
                     char type[16]) {
  char *p = sqlite3_mprintf("%s.%s", member, field), *v;
  if (!p) {
    d->rc = SQLITE_NOMEM;
    type[0] = 0;
    return NULL;
  }
  v = relattn_tj_get(d, p, type);
  sqlite3_free(p);
  return v;
}

/* Metaspace's prepend_scheme: 0 never, 1 first, 2 always; -1 refused,
** as metaspace.rs reads it (add_prefix_space false needs "never"). */
static int tjScheme(tj_doc *d, const char *member) {
  char type[16], *v = tjField(d, member, "prepend_scheme", type);
  int scheme = 2, aps;
  if (v) {
    scheme = strcmp(v, "never") == 0   ? 0
             : strcmp(v, "first") == 0  ? 1
             : strcmp(v, "always") == 0 ? 2
                                        : -1;
  }
  sqlite3_free(v);
  v = tjField(d, member, "add_prefix_space", type);
  sqlite3_free(v);
  aps = strcmp(type, "false") == 0 ? 0 : 1;
  if (!aps && scheme != 0) return -1;
  return scheme;
}

/* One character of text (UTF-8): its length, else 0. */
static int oneChar(const char *s) {
  size_t n = s ? strlen(s) : 0;
  const unsigned char *u = (const unsigned char *)s;
  int len;
  if (n == 0) return 0;
  len = u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
  return (size_t)len == n ? len : 0;
}

/* "c{m,}": the regex of one literal character repeated m or more times
** (SpmConverter's " {2,}"); its character in c, m; 0 when it is not. */
static int runRegex(const char *re, char c[8], int *m) {
  const char *brace = strchr(re, '{');
  size_t cl;
  char *end;
  long v;
  if (!brace) return 0;
  cl = (size_t)(brace - re);
  if (cl == 0 || cl > 4) return 0;
  memcpy(c, re, cl);
  c[cl] = 0;
  if (oneChar(c) == 0 || strchr(".^$*+?()[]{}|\\", c[0])) return 0;
  v = strtol(brace + 1, &end, 10);
  if (end == brace + 1 || v < 1 || v > 1000 || strcmp(end, ",}") != 0)
    return 0;
  *m = (int)v;
  return 1;
}

#define TJ_REFUSE(...) \
  do { \
    *pzErr = sqlite3_mprintf(__VA_ARGS__); \
    goto done; \
  } while (0)

static int tjNormalizers(tj_doc *d, sqlite3_str *pipe, char **pzErr) {
  char type[16], **m, *name = relattn_tj_name(d, "normalizer", "normalizers"),
                     *t = NULL, *a = NULL, *b = NULL;
  int n = 0, k, rc = SQLITE_OK, precompiled = 0, steps;
  uint8_t *map = NULL;
  if (!name) return d->rc;
  m = tjMembers(d, "normalizer", "normalizers", &n);
  steps = strcmp(name, "null") != 0 ? n : 0; /* (m holds n paths) */
  for (k = 0; k < steps && d->rc == SQLITE_OK && rc == SQLITE_OK; k++) {
    t = tjField(d, m[k], "type", type);
    if (!t) t = sqlite3_mprintf("?");
    if (strcmp(t, "Precompiled") == 0) {
      a = tjField(d, m[k], "precompiled_charsmap", type);
      if (precompiled++)
        TJ_REFUSE("%s: normalizer '%s' is not supported (one Precompiled at "
                  "most)", TJ, name);
      if (a) { /* null: no map, nothing changes */
        size_t len = strlen(a), got = 0;
        map = sqlite3_malloc64(len / 4 * 3 + 4);
        if (!map) {
          rc = SQLITE_NOMEM;
          goto done;
        }
        if (relattn_base64_decode(a, len, map, &got) != RELATTN_OK || got < 8)
          TJ_REFUSE("%s: normalizer Precompiled: precompiled_charsmap is not "
                    "a base64 character map", TJ);
        pbStep(d->db, pipe, 1, HN_PRECOMPILED, (const char *)map, got, NULL,
               0, 0, &rc);
      }
    } else if (strcmp(t, "Replace") == 0) {
      char c[8];
      int rep = 0;
      b = tjField(d, m[k], "content", type);
      if (!b || strcmp(type, "text") != 0)
        TJ_REFUSE("%s: normalizer Replace: content must be a string", TJ);
      a = tjField(d, m[k], "pattern.String", type);
      if (a && strcmp(type, "text") == 0 && a[0]) {
        pbStep(d->db, pipe, 1, HN_REPLACE, a, strlen(a), b, 0, 0, &rc);
      } else {
        sqlite3_free(a);
        a = tjField(d, m[k], "pattern.Regex", type);
        if (!a || !runRegex(a, c, &rep)) {
          char e[RELATTN_ECHO_BUF];
          TJ_REFUSE("%s: normalizer Replace with pattern '%s' is not "
                    "supported (supported: a String, or a Regex of one "
                    "character repeated, as ' {2,}')", TJ,
                    relattn_echo(e, a ? a : "null", -1));
        }
        pbStep(d->db, pipe, 1, HN_REPLACE_RUN, c, strlen(c), b, rep, 0, &rc);
      }
    } else if (strcmp(t, "Strip") == 0) {
      int bad = 0, l, r;
      char *p1 = sqlite3_mprintf("%s.strip_left", m[k]);
      char *p2 = sqlite3_mprintf("%s.strip_right", m[k]);
      l = p1 ? relattn_tj_bool(d, p1, &bad) : -1;
      r = p2 ? relattn_tj_bool(d, p2, &bad) : -1;
      sqlite3_free(p1);
      sqlite3_free(p2);
      if (bad || l < 0 || r < 0)
        TJ_REFUSE("%s: normalizer Strip: strip_left and strip_right must be "
                  "true or false", TJ);
      pbStep(d->db, pipe, 1, HN_STRIP, NULL, 0, NULL, l, r, &rc);
    } else if (strcmp(t, "Lowercase") == 0) {
      pbStep(d->db, pipe, 1, HN_LOWERCASE, NULL, 0, NULL, 0, 0, &rc);
    } else if (strcmp(t, "NFKC") == 0 || strcmp(t, "NFC") == 0) {
      pbStep(d->db, pipe, 1, t[2] == 'K' ? HN_NFKC : HN_NFC, NULL, 0, NULL, 0,
             0, &rc);
    } else {
      TJ_REFUSE("%s: normalizer '%s' is not supported (supported: "
                "Precompiled, NFKC, NFC, Replace, Strip, Lowercase, a Sequence of "
                "them, null)", TJ, name);
    }
    sqlite3_free(t), sqlite3_free(a), sqlite3_free(b);
    sqlite3_free(map);
    t = a = b = NULL, map = NULL;
  }
done:
  sqlite3_free(t), sqlite3_free(a), sqlite3_free(b), sqlite3_free(map);
  sqlite3_free(name);
  tjMembersFree(m, n);
  return rc != SQLITE_OK ? rc : d->rc;
}

static int tjPreTokenizers(tj_doc *d, sqlite3_str *pipe, char **pzErr) {
  char type[16], **m, *t = NULL, *a = NULL,
                     *name = relattn_tj_name(d, "pre_tokenizer",
                                             "pretokenizers");
  int n = 0, k, rc = SQLITE_OK, steps;
  if (!name) return d->rc;
  m = tjMembers(d, "pre_tokenizer", "pretokenizers", &n);
  steps = strcmp(name, "null") != 0 ? n : 0; /* (m holds n paths) */
  for (k = 0; k < steps && d->rc == SQLITE_OK && rc == SQLITE_OK; k++) {
    t = tjField(d, m[k], "type", type);
    if (!t) t = sqlite3_mprintf("?");
    if (t && strcmp(t, "Metaspace") == 0) {
      int scheme = tjScheme(d, m[k]), bad = 0, split;
      char *p = sqlite3_mprintf("%s.split", m[k]);
      split = p ? relattn_tj_bool(d, p, &bad) : -1;
      sqlite3_free(p);
      a = tjField(d, m[k], "replacement", type);
      if (!oneChar(a) || scheme < 0 || bad)
        TJ_REFUSE("%s: pre_tokenizer Metaspace: replacement must be one "
                  "character, prepend_scheme first, always or never (never "
                  "when add_prefix_space is false), split true or false", TJ);
      pbStep(d->db, pipe, 2, HP_METASPACE, a, strlen(a), NULL, scheme,
             split != 0, &rc);
    } else if (t && strcmp(t, "WhitespaceSplit") == 0) {
      pbStep(d->db, pipe, 2, HP_WHITESPACE_SPLIT, NULL, 0, NULL, 0, 0, &rc);
    } else {
      TJ_REFUSE("%s: pre_tokenizer '%s' is not supported (supported: "
                "Metaspace, WhitespaceSplit, a Sequence of them, null)", TJ,
                name);
    }
    sqlite3_free(t), sqlite3_free(a);
    t = a = NULL;
  }
done:
  sqlite3_free(t), sqlite3_free(a);
  sqlite3_free(name);
  tjMembersFree(m, n);
  return rc != SQLITE_OK ? rc : d->rc;
}

static int tjDecoders(tj_doc *d, sqlite3_str *pipe, char **pzErr) {
  char type[16], **m, *t = NULL, *a = NULL, *b = NULL,
                     *name = relattn_tj_name(d, "decoder", "decoders");
  int n = 0, k, rc = SQLITE_OK, steps;
  if (!name) return d->rc;
  m = tjMembers(d, "decoder", "decoders", &n);
  steps = strcmp(name, "null") != 0 ? n : 0; /* (m holds n paths) */
  for (k = 0; k < steps && d->rc == SQLITE_OK && rc == SQLITE_OK; k++) {
    t = tjField(d, m[k], "type", type);
    if (!t) t = sqlite3_mprintf("?");
    if (strcmp(t, "Metaspace") == 0) {
      int scheme = tjScheme(d, m[k]);
      a = tjField(d, m[k], "replacement", type);
      if (!oneChar(a) || scheme < 0)
        TJ_REFUSE("%s: decoder Metaspace: replacement must be one character, "
                  "prepend_scheme first, always or never (never when "
                  "add_prefix_space is false)", TJ);
      pbStep(d->db, pipe, 3, HD_METASPACE, a, strlen(a), NULL, scheme, 0,
             &rc);
    } else if (strcmp(t, "Replace") == 0) {
      a = tjField(d, m[k], "pattern.String", type);
      b = tjField(d, m[k], "content", type);
      if (!a || !a[0] || !b)
        TJ_REFUSE("%s: decoder Replace: only a String pattern and a string "
                  "content are supported", TJ);
      pbStep(d->db, pipe, 3, HD_REPLACE, a, strlen(a), b, 0, 0, &rc);
    } else if (strcmp(t, "ByteFallback") == 0) {
      pbStep(d->db, pipe, 3, HD_BYTE_FALLBACK, NULL, 0, NULL, 0, 0, &rc);
    } else if (strcmp(t, "Fuse") == 0) {
      pbStep(d->db, pipe, 3, HD_FUSE, NULL, 0, NULL, 0, 0, &rc);
    } else if (strcmp(t, "Strip") == 0) {
      char t1[16], t2[16], *s1 = tjField(d, m[k], "start", t1),
                           *s2 = tjField(d, m[k], "stop", t2);
      int x = s1 ? atoi(s1) : -1, y = s2 ? atoi(s2) : -1;
      sqlite3_free(s1);
      sqlite3_free(s2);
      a = tjField(d, m[k], "content", type);
      if (!oneChar(a) || strcmp(t1, "integer") || strcmp(t2, "integer") ||
          x < 0 || y < 0 || x > 1000000 || y > 1000000)
        TJ_REFUSE("%s: decoder Strip: content must be one character, start "
                  "and stop counts", TJ);
      pbStep(d->db, pipe, 3, HD_STRIP, a, strlen(a), NULL, x, y, &rc);
    } else {
      TJ_REFUSE("%s: decoder '%s' is not supported (supported: Metaspace, "
                "Replace, ByteFallback, Fuse, Strip, a Sequence of them, "
                "null)", TJ, name);
    }
    sqlite3_free(t), sqlite3_free(a), sqlite3_free(b);
    t = a = b = NULL;
  }
done:
  sqlite3_free(t), sqlite3_free(a), sqlite3_free(b);
  sqlite3_free(name);
  tjMembersFree(m, n);
  return rc != SQLITE_OK ? rc : d->rc;
}

/* The id of text among model.vocab's pieces (n of them) and added_tokens,
** or -1. */
static int tjUnigramId(tj_doc *d, const char *text) {
  sqlite3_stmt *st = NULL;
  int id = -1;
  if (d->rc != SQLITE_OK || !text) return -1;
  d->rc = sqlite3_prepare_v2(
      d->db,
      "SELECT id FROM (SELECT json_extract(value, '$.id') AS id FROM "
      "json_each(?1, '$.added_tokens') WHERE json_extract(value, "
      "'$.content') = ?2 UNION ALL SELECT key FROM json_each(?1, "
      "'$.model.vocab') WHERE json_extract(value, '$[0]') = ?2) LIMIT 1",
      -1, &st, NULL);
  if (d->rc != SQLITE_OK) return -1;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) id = sqlite3_column_int(st, 0);
  d->rc = sqlite3_finalize(st);
  return id;
}

/* The pieces, their scores, the unknown piece; the added tokens. */
static int tjUnigramVocab(tj_doc *d, sqlite3_str *o, sqlite3_str *pipe,
                          int *n_pieces, int *unk, char **pzErr) {
  sqlite3_stmt *st = NULL;
  sqlite3_str *scores = sqlite3_str_new(d->db);
  char type[16], *v;
  int rc, n = 0, bf = 0, bad = 0;
  *unk = -1;
  v = relattn_tj_get(d, "$.model.unk_id", type);
  if (v && strcmp(type, "integer") == 0) *unk = atoi(v);
  sqlite3_free(v);
  bf = relattn_tj_bool(d, "$.model.byte_fallback", &bad);
  if (d->rc != SQLITE_OK) return d->rc;
  if (bad) {
    *pzErr = sqlite3_mprintf("%s: model Unigram: byte_fallback must be true "
                             "or false", TJ);
    return SQLITE_OK;
  }
  rc = sqlite3_prepare_v2(
      d->db,
      "SELECT json_type(value, '$[0]'), json_extract(value, '$[0]'), "
      "json_type(value, '$[1]'), value -> '$[1]', json_array_length(value) "
      "FROM json_each(?1, '$.model.vocab') ORDER BY key",
      -1, &st, NULL);
  if (rc != SQLITE_OK) return rc;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *t0 = (const char *)sqlite3_column_text(st, 0);
    const char *piece = (const char *)sqlite3_column_text(st, 1);
    const char *t1 = (const char *)sqlite3_column_text(st, 2);
    const char *num = (const char *)sqlite3_column_text(st, 3);
    int plen = sqlite3_column_bytes(st, 1);
    double score;
    float f;
    uint64_t u;
    unsigned char le[8];
    int b;
    sqlite3_str *pm;
    char *z;
    int zn;
    if (!t0 || strcmp(t0, "text") != 0 || !t1 ||
        (strcmp(t1, "integer") != 0 && strcmp(t1, "real") != 0) || !num ||
        sqlite3_column_int(st, 4) != 2 || plen == 0) {
      *pzErr = sqlite3_mprintf("%s: model.vocab[%d] is not a [piece, score] "
                               "pair with a piece of text", TJ, n);
      break;
    }
    score = strtod(num, NULL);
    f = (float)score;
    memcpy(&u, &score, 8);
    for (b = 0; b < 8; b++) le[b] = (unsigned char)(u >> (8 * b));
    sqlite3_str_append(scores, (const char *)le, 8);
    pm = sqlite3_str_new(d->db);
    pbBytes(pm, 1, piece, (size_t)plen);
    {
      uint32_t fu;
      unsigned char f4[4];
      memcpy(&fu, &f, 4);
      for (b = 0; b < 4; b++) f4[b] = (unsigned char)(fu >> (8 * b));
      pbVar(pm, 2 << 3 | 5);
      sqlite3_str_append(pm, (const char *)f4, 4);
    }
    pbInt(pm, 3, n == *unk ? 2 : 1);
    zn = sqlite3_str_length(pm);
    z = sqlite3_str_finish(pm);
    if (!z) {
      rc = SQLITE_NOMEM;
      break;
    }
    pbBytes(o, 1, z, (size_t)zn);
    sqlite3_free(z);
    n++;
  }
  sqlite3_finalize(st);
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  if (rc == SQLITE_OK && !*pzErr && n == 0)
    *pzErr = sqlite3_mprintf("%s: model.vocab is empty or not an array", TJ);
  if (rc == SQLITE_OK && !*pzErr && (*unk < 0 || *unk >= n))
    *pzErr = sqlite3_mprintf("%s: model Unigram: unk_id must be the id of a "
                             "piece of model.vocab", TJ);
  if (rc == SQLITE_OK && !*pzErr) {
    int zn = sqlite3_str_length(scores);
    char *z = sqlite3_str_finish(scores);
    scores = NULL;
    if (!z) return SQLITE_NOMEM;
    pbBytes(pipe, 4, z, (size_t)zn);
    sqlite3_free(z);
    pbInt(pipe, 6, (sqlite3_uint64)*unk);
    {
      /* trainer_spec: unigram, byte_fallback */
      sqlite3_str *ts = sqlite3_str_new(d->db);
      char *z2;
      int n2;
      pbInt(ts, 3, 1);
      if (bf == 1) pbInt(ts, 35, 1);
      n2 = sqlite3_str_length(ts);
      z2 = sqlite3_str_finish(ts);
      if (!z2) return SQLITE_NOMEM;
      pbBytes(o, 2, z2, (size_t)n2);
      sqlite3_free(z2);
    }
  }
  if (scores) sqlite3_free(sqlite3_str_finish(scores));
  *n_pieces = n;
  return rc;
}

/* added_tokens: special or not, lstrip and rstrip as they are; matched in
** the text as written (normalized false), not single_word; an id among
** the pieces names that piece, the others follow the pieces. */
static int tjUnigramAdded(tj_doc *d, sqlite3_str *pipe, int n_pieces,
                          char **pzErr) {
  static const char *const flags[] = {"single_word", "normalized"};
  sqlite3_stmt *st = NULL;
  int rc, next = n_pieces, k;
  rc = sqlite3_prepare_v2(
      d->db,
      "SELECT json_extract(value, '$.content'), json_extract(value, '$.id'), "
      "json_type(value, '$.id'), json_type(value, '$.special'), "
      "json_type(value, '$.lstrip'), json_type(value, '$.rstrip'), "
      "json_type(value, '$.single_word'), json_type(value, '$.normalized'), "
      "json_extract(?1, '$.model.vocab[' || json_extract(value, '$.id') || "
      "'][0]') FROM json_each(?1, '$.added_tokens') ORDER BY "
      "json_extract(value, '$.id')",
      -1, &st, NULL);
  if (rc != SQLITE_OK) return rc;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  while (!*pzErr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *text = (const char *)sqlite3_column_text(st, 0);
    const char *idt = (const char *)sqlite3_column_text(st, 2);
    const char *piece = (const char *)sqlite3_column_text(st, 8);
    int id = sqlite3_column_int(st, 1), fl = 0;
    char e[RELATTN_ECHO_BUF];
    sqlite3_str *m;
    char *z;
    int zn;
    relattn_echo(e, text ? text : "null", -1);
    if (!text || !text[0] || !idt || strcmp(idt, "integer") != 0 || id < 0) {
      *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' needs a content and "
                               "an integer id", TJ, e);
      break;
    }
    for (k = 0; k < 2; k++) {
      const char *f = (const char *)sqlite3_column_text(st, 6 + k);
      if (f && strcmp(f, "false") != 0) {
        *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' with %s %s is not "
                                 "supported", TJ, e, flags[k], f);
        break;
      }
    }
    if (*pzErr) break;
    if (id < n_pieces && (!piece || strcmp(piece, text) != 0)) {
      *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' has id %d, whose "
                               "piece in model.vocab is another", TJ, e, id);
      break;
    }
    if (id >= n_pieces && id != next) {
      *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' has id %d, not %d "
                               "(the ids past model.vocab follow it without "
                               "a gap)", TJ, e, id, next);
      break;
    }
    if (id >= n_pieces) next++;
    {
      const char *sp = (const char *)sqlite3_column_text(st, 3);
      const char *ls = (const char *)sqlite3_column_text(st, 4);
      const char *rs = (const char *)sqlite3_column_text(st, 5);
      if (sp && strcmp(sp, "true") == 0) fl |= 1;
      if (ls && strcmp(ls, "true") == 0) fl |= 2;
      if (rs && strcmp(rs, "true") == 0) fl |= 4;
    }
    m = sqlite3_str_new(d->db);
    pbInt(m, 1, (sqlite3_uint64)id);
    pbBytes(m, 2, text, strlen(text));
    pbInt(m, 3, (sqlite3_uint64)fl);
    zn = sqlite3_str_length(m);
    z = sqlite3_str_finish(m);
    if (!z) {
      rc = SQLITE_NOMEM;
      break;
    }
    pbBytes(pipe, 5, z, (size_t)zn);
    sqlite3_free(z);
  }
  sqlite3_finalize(st);
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  return rc;
}

/* TemplateProcessing: "[CLS]:0 $A:0 [SEP]:0" (pair "... $B:1 [SEP]:1"),
** as DebertaV2Converter writes it, or "$A:0 </s>:0" (pair
** "$A:0 </s>:0 $B:0 </s>:0"), as T5Converter does; out->cls (NULL for the
** second) and out->sep the tokens' texts. */
static int tjUnigramTemplate(tj_doc *d, relattn_hf_tokjson *out,
                             char **pzErr) {
  char type[16], *name = relattn_tj_name(d, "post_processor", "processors");
  char *single = NULL, *pair = NULL, *w1 = NULL, *w2 = NULL;
  const char *tok[2];
  int k, rc = SQLITE_OK;
  if (!name) return d->rc;
  if (strcmp(name, "TemplateProcessing") != 0) {
    *pzErr = sqlite3_mprintf("%s: post_processor '%s' is not supported "
                             "(supported: TemplateProcessing)", TJ, name);
    goto done;
  }
  single = relattn_tj_template(d, "$.post_processor.single");
  pair = relattn_tj_template(d, "$.post_processor.pair");
  if (d->rc != SQLITE_OK) goto done;
  if (strncmp(single, "$A:0 ", 5) == 0) {
    out->sep = relattn_tj_get(d, "$.post_processor.single[1].SpecialToken.id",
                              type);
    w1 = sqlite3_mprintf("$A:0 %s:0", out->sep ? out->sep : "");
    w2 = sqlite3_mprintf("$A:0 %s:0 $B:0 %s:0", out->sep ? out->sep : "",
                         out->sep ? out->sep : "");
  } else {
    out->cls = relattn_tj_get(d, "$.post_processor.single[0].SpecialToken.id",
                              type);
    out->sep = relattn_tj_get(d, "$.post_processor.single[2].SpecialToken.id",
                              type);
    w1 = sqlite3_mprintf("%s:0 $A:0 %s:0", out->cls ? out->cls : "",
                         out->sep ? out->sep : "");
    w2 = sqlite3_mprintf("%s:0 $A:0 %s:0 $B:1 %s:1", out->cls ? out->cls : "",
                         out->sep ? out->sep : "", out->sep ? out->sep : "");
  }
  if (!w1 || !w2) {
    rc = SQLITE_NOMEM;
    goto done;
  }
  if (d->rc != SQLITE_OK) goto done;
  if (!out->sep || strcmp(single, w1) != 0 || strcmp(pair, w2) != 0) {
    char e1[RELATTN_ECHO_BUF], e2[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf(
        "%s: post_processor TemplateProcessing with single '%s' and pair "
        "'%s' is not supported (supported: '[CLS]:0 $A:0 [SEP]:0' with "
        "'[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1', and '$A:0 </s>:0' with "
        "'$A:0 </s>:0 $B:0 </s>:0', any tokens for [CLS], [SEP] and </s>)",
        TJ, relattn_echo(e1, single, -1), relattn_echo(e2, pair, -1));
    goto done;
  }
  tok[0] = out->cls, tok[1] = out->sep;
  for (k = 0; k < 2; k++) {
    char *p, *ids, *want;
    int id;
    if (!tok[k]) continue;
    p = sqlite3_mprintf("$.post_processor.special_tokens.\"%w\".ids", tok[k]);
    if (!p) {
      rc = SQLITE_NOMEM;
      goto done;
    }
    ids = relattn_tj_get(d, p, type);
    sqlite3_free(p);
    id = tjUnigramId(d, tok[k]);
    want = sqlite3_mprintf("[%d]", id);
    if (d->rc == SQLITE_OK && (id < 0 || !ids || !want || strcmp(ids, want))) {
      char e[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("%s: post_processor: special token '%s' must "
                               "have the one id the tokenizer gives it", TJ,
                               relattn_echo(e, tok[k], -1));
    }
    sqlite3_free(ids);
    sqlite3_free(want);
    if (*pzErr || d->rc != SQLITE_OK) goto done;
  }
done:
  sqlite3_free(name);
  sqlite3_free(single);
  sqlite3_free(pair);
  sqlite3_free(w1);
  sqlite3_free(w2);
  return rc != SQLITE_OK ? rc : d->rc;
}

int relattn_tj_unigram(tj_doc *d, relattn_hf_tokjson *out, char **pzErr) {
  sqlite3_str *o = sqlite3_str_new(d->db), *pipe = sqlite3_str_new(d->db);
  int rc, n = 0, unk = -1;
  char *z;
  out->unigram = 1;
  rc = tjUnigramVocab(d, o, pipe, &n, &unk, pzErr);
  if (rc == SQLITE_OK && !*pzErr) rc = tjNormalizers(d, pipe, pzErr);
  if (rc == SQLITE_OK && !*pzErr) rc = tjPreTokenizers(d, pipe, pzErr);
  if (rc == SQLITE_OK && !*pzErr) rc = tjDecoders(d, pipe, pzErr);
  if (rc == SQLITE_OK && !*pzErr) rc = tjUnigramAdded(d, pipe, n, pzErr);
  if (rc == SQLITE_OK && !*pzErr) rc = tjUnigramTemplate(d, out, pzErr);
  if (rc == SQLITE_OK && !*pzErr) {
    char type[16];
    char *p = sqlite3_mprintf("$.model.vocab[%d][0]", unk);
    out->unk = p ? relattn_tj_get(d, p, type) : NULL;
    sqlite3_free(p);
    if (!out->unk) rc = d->rc != SQLITE_OK ? d->rc : SQLITE_NOMEM;
  }
  {
    int zn = sqlite3_str_length(pipe);
    if (sqlite3_str_errcode(pipe) && rc == SQLITE_OK) rc = SQLITE_NOMEM;
    z = sqlite3_str_finish(pipe);
    if (rc == SQLITE_OK && !*pzErr) {
      if (!z) rc = SQLITE_NOMEM;
      else pbBytes(o, HF_FIELD, z, (size_t)zn);
    }
    sqlite3_free(z);
  }
  if (sqlite3_str_errcode(o) && rc == SQLITE_OK) rc = SQLITE_NOMEM;
  out->vocab_n = (size_t)sqlite3_str_length(o);
  out->vocab = (uint8_t *)sqlite3_str_finish(o);
  if (rc == SQLITE_OK && !*pzErr && !out->vocab) rc = SQLITE_NOMEM;
  return rc;
}
