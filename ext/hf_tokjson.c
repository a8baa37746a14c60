/*
** hf_tokjson.c: a Hugging Face tokenizer.json (the fast tokenizer's file)
** as the tokenizer_blob of relattn_import, read through SQLite's JSON
** functions and mapped onto the WordPiece kind where the two give the
** same ids: what transformers' BertConverter writes. No SQL function of
** its own; ext/hf.c calls it when the blob is a JSON object.
**
**   SELECT relattn_import('bert', readfile('model.safetensors'),
**                         readfile('config.json'), readfile('tokenizer.json'));
**
** HOW IT WORKS
**   The components are checked one by one against what the WordPiece kind
**   does (docs/reference.md lists them); the first that differs is refused
**   by its name. What holds becomes a vocab.txt (model.vocab in id order,
**   which must run 0, 1, ... without a gap), the BertNormalizer's options
**   (do_lower_case, strip_accents, tokenize_chinese_chars) and the texts of
**   the template's [CLS] and [SEP] and of the model's unk_token. The model
**   stores that vocab.txt: nothing of the JSON is kept.
*/
#include "hf.h"

#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

#define FN "relattn_import"
#define TJ FN ": tokenizer.json"

/* The specials the WordPiece kind splits out of a text itself
** (src/tok_wordpiece.c); a BertConverter file lists the same ones among its
** added_tokens. */
static const char *const wpSpecials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                         "[MASK]"};

/* One value of the document: sqlite3_malloc'd text (NULL for JSON null or
** a missing key) and its json_type in type ("" when missing). */
typedef struct tj_doc {
  sqlite3 *db;
  const char *json;
  int n;
  int rc;
} tj_doc;

static char *tjGet(tj_doc *d, const char *path, char type[16]) {
  sqlite3_stmt *st = NULL;
  char *out = NULL;
  type[0] = 0;
  if (d->rc != SQLITE_OK) return NULL;
  d->rc = sqlite3_prepare_v2(d->db, "SELECT json_type(?1, ?2), "
                                    "json_extract(?1, ?2)", -1, &st, NULL);
  if (d->rc != SQLITE_OK) return NULL;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) {
    const char *t = (const char *)sqlite3_column_text(st, 0);
    const char *v = (const char *)sqlite3_column_text(st, 1);
    if (t) sqlite3_snprintf(16, type, "%s", t);
    if (v && (!t || strcmp(t, "null") != 0)) {
      out = sqlite3_mprintf("%s", v);
      if (!out) d->rc = SQLITE_NOMEM;
    }
  }
  d->rc = sqlite3_finalize(st);
  if (d->rc != SQLITE_OK) {
    sqlite3_free(out);
    out = NULL;
  }
  return out;
}

/* A component's name as messages give it: its type; a Sequence's members'
** types joined with '+' ("Lowercase+Nmt"); "null" when there is none. */
static char *tjName(tj_doc *d, const char *key, const char *members) {
  sqlite3_stmt *st = NULL;
  char *out = NULL, *path = sqlite3_mprintf("$.%s", key);
  char *list = sqlite3_mprintf("$.%s.%s", key, members);
  if (!path || !list) d->rc = SQLITE_NOMEM;
  if (d->rc == SQLITE_OK)
    d->rc = sqlite3_prepare_v2(
        d->db,
        "SELECT CASE coalesce(json_type(?1, ?2), 'null') WHEN 'null' THEN "
        "'null' WHEN 'object' THEN CASE json_extract(?1, ?2 || '.type') WHEN "
        "'Sequence' THEN (SELECT group_concat(coalesce(json_extract(value, "
        "'$.type'), '?'), '+') FROM json_each(?1, ?3)) ELSE "
        "coalesce(json_extract(?1, ?2 || '.type'), '?') END ELSE json_type(?1, "
        "?2) END",
        -1, &st, NULL);
  if (d->rc == SQLITE_OK) {
    sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, list, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
      out = sqlite3_mprintf("%s", sqlite3_column_text(st, 0)
                                      ? (const char *)sqlite3_column_text(st, 0)
                                      : "");
    d->rc = sqlite3_finalize(st);
    if (d->rc == SQLITE_OK && !out) d->rc = SQLITE_NOMEM;
  }
  sqlite3_free(path);
  sqlite3_free(list);
  if (d->rc != SQLITE_OK) {
    sqlite3_free(out);
    out = NULL;
  }
  return out;
}

/* A template as HF writes it in Python: "[CLS]:0 $A:0 [SEP]:0". */
static char *tjTemplate(tj_doc *d, const char *path) {
  sqlite3_stmt *st = NULL;
  char *out = NULL;
  if (d->rc != SQLITE_OK) return NULL;
  d->rc = sqlite3_prepare_v2(
      d->db,
      "SELECT group_concat(CASE WHEN json_type(value, '$.SpecialToken') = "
      "'object' THEN json_extract(value, '$.SpecialToken.id') || ':' || "
      "json_extract(value, '$.SpecialToken.type_id') WHEN json_type(value, "
      "'$.Sequence') = 'object' THEN '$' || json_extract(value, "
      "'$.Sequence.id') || ':' || json_extract(value, '$.Sequence.type_id') "
      "ELSE '?' END, ' ') FROM json_each(?1, ?2)",
      -1, &st, NULL);
  if (d->rc != SQLITE_OK) return NULL;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW)
    out = sqlite3_mprintf("%s", sqlite3_column_text(st, 0)
                                    ? (const char *)sqlite3_column_text(st, 0)
                                    : "");
  d->rc = sqlite3_finalize(st);
  if (d->rc == SQLITE_OK && !out) d->rc = SQLITE_NOMEM;
  return out;
}

/* The id of token text in model.vocab, or -1. */
static int tjVocabId(tj_doc *d, const char *text) {
  sqlite3_stmt *st = NULL;
  int id = -1;
  if (d->rc != SQLITE_OK || !text) return -1;
  d->rc = sqlite3_prepare_v2(d->db,
                             "SELECT value FROM json_each(?1, '$.model.vocab') "
                             "WHERE key = ?2 AND type = 'integer'",
                             -1, &st, NULL);
  if (d->rc != SQLITE_OK) return -1;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) id = sqlite3_column_int(st, 0);
  d->rc = sqlite3_finalize(st);
  return id;
}

/* model.vocab as a vocab.txt: its tokens in id order, one a line. */
static int tjVocab(tj_doc *d, relattn_hf_tokjson *out, char **pzErr) {
  sqlite3_stmt *st = NULL;
  sqlite3_str *o;
  sqlite3_int64 want = 0;
  int rc;
  rc = sqlite3_prepare_v2(d->db,
                          "SELECT key, type, value FROM json_each(?1, "
                          "'$.model.vocab') ORDER BY type = 'integer', value",
                          -1, &st, NULL);
  if (rc != SQLITE_OK) return rc;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  o = sqlite3_str_new(d->db);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(st, 0);
    const char *type = (const char *)sqlite3_column_text(st, 1);
    char e[RELATTN_ECHO_BUF];
    relattn_echo(e, key, -1);
    if (!type || strcmp(type, "integer") != 0) {
      *pzErr = sqlite3_mprintf("%s: model.vocab: token '%s' has no integer "
                               "id", TJ, e);
      break;
    }
    if (sqlite3_column_int64(st, 2) != want) {
      *pzErr = sqlite3_mprintf(
          "%s: model.vocab has no token with id %lld (its ids must run from "
          "0 without a gap)", TJ, want);
      break;
    }
    if (key && (strchr(key, '\n') || strchr(key, '\r') ||
                relattn_json_has_nul(key))) {
      *pzErr = sqlite3_mprintf("%s: model.vocab: token %lld ('%s') holds a "
                               "line break or U+0000, which a vocab.txt "
                               "cannot", TJ, want, e);
      break;
    }
    sqlite3_str_appendf(o, "%s\n", key ? key : "");
    want++;
  }
  if (!*pzErr && rc == SQLITE_DONE && want == 0)
    *pzErr = sqlite3_mprintf("%s: model.vocab is empty or not an object", TJ);
  sqlite3_finalize(st);
  if (sqlite3_str_errcode(o)) rc = SQLITE_NOMEM;
  else if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  out->vocab_n = (size_t)sqlite3_str_length(o);
  out->vocab = (uint8_t *)sqlite3_str_finish(o);
  if (rc == SQLITE_OK && !out->vocab) rc = SQLITE_NOMEM;
  return rc;
}

/* added_tokens: each one of the specials the WordPiece kind splits out
** itself, at its model.vocab id, special, matched as written (normalized,
** lstrip, rstrip, single_word false); and every such special of the
** vocabulary among them. */
static int tjAdded(tj_doc *d, char **pzErr) {
  static const char *const flags[] = {"lstrip", "rstrip", "single_word",
                                      "normalized"};
  sqlite3_stmt *st = NULL;
  int seen[5] = {0}, rc, k;
  rc = sqlite3_prepare_v2(
      d->db,
      "SELECT json_extract(value, '$.content'), json_extract(value, '$.id'), "
      "json_type(value, '$.special'), json_type(value, '$.lstrip'), "
      "json_type(value, '$.rstrip'), json_type(value, '$.single_word'), "
      "json_type(value, '$.normalized') FROM json_each(?1, '$.added_tokens')",
      -1, &st, NULL);
  if (rc != SQLITE_OK) return rc;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  while (!*pzErr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *text = (const char *)sqlite3_column_text(st, 0);
    char e[RELATTN_ECHO_BUF];
    int id = sqlite3_column_int(st, 1), vid;
    relattn_echo(e, text, -1);
    for (k = 0; k < 5 && (!text || strcmp(text, wpSpecials[k]) != 0); k++) {
    }
    if (k == 5) {
      *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' is not supported "
                               "(supported: [PAD], [UNK], [CLS], [SEP], "
                               "[MASK], which WordPiece splits out itself)",
                               TJ, e);
      break;
    }
    seen[k] = 1;
    vid = tjVocabId(d, text);
    if (d->rc != SQLITE_OK) break;
    if (vid != id) {
      *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' has id %d, not its "
                               "id in model.vocab", TJ, e, id);
      break;
    }
    {
      const char *sp = (const char *)sqlite3_column_text(st, 2);
      if (!sp || strcmp(sp, "true") != 0) {
        *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' with special false "
                                 "is not supported", TJ, e);
        break;
      }
    }
    for (k = 0; k < 4; k++) {
      const char *f = (const char *)sqlite3_column_text(st, 3 + k);
      if (f && strcmp(f, "false") != 0) {
        *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' with %s %s is not "
                                 "supported", TJ, e, flags[k], f);
        break;
      }
    }
  }
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  sqlite3_finalize(st);
  if (d->rc != SQLITE_OK) rc = d->rc;
  for (k = 0; rc == SQLITE_OK && !*pzErr && k < 5; k++) {
    if (seen[k] || tjVocabId(d, wpSpecials[k]) < 0) continue;
    *pzErr = sqlite3_mprintf("%s: added_tokens lacks '%s', which model.vocab "
                             "has (WordPiece splits it out of a text)",
                             TJ, wpSpecials[k]);
  }
  return rc == SQLITE_OK ? d->rc : rc;
}

/* A flag of a component: 1, 0, or -1 for null; *bad when not a bool. */
static int tjBool(tj_doc *d, const char *path, int *bad) {
  char type[16], *v = tjGet(d, path, type);
  sqlite3_free(v);
  if (strcmp(type, "true") == 0) return 1;
  if (strcmp(type, "false") == 0) return 0;
  if (strcmp(type, "null") != 0 && type[0]) *bad = 1;
  return -1;
}

/* ---- Unigram ------------------------------------------------------------ */

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
    char *v = tjGet(d, t, type);
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
  v = tjGet(d, p, type);
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
  char type[16], **m, *name = tjName(d, "normalizer", "normalizers"),
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
      l = p1 ? tjBool(d, p1, &bad) : -1;
      r = p2 ? tjBool(d, p2, &bad) : -1;
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
  char type[16], **m, *name = tjName(d, "pre_tokenizer", "pretokenizers"),
                     *t = NULL, *a = NULL;
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
      split = p ? tjBool(d, p, &bad) : -1;
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
  char type[16], **m, *name = tjName(d, "decoder", "decoders"), *t = NULL,
                     *a = NULL, *b = NULL;
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
  v = tjGet(d, "$.model.unk_id", type);
  if (v && strcmp(type, "integer") == 0) *unk = atoi(v);
  sqlite3_free(v);
  bf = tjBool(d, "$.model.byte_fallback", &bad);
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
  char type[16], *name = tjName(d, "post_processor", "processors");
  char *single = NULL, *pair = NULL, *w1 = NULL, *w2 = NULL;
  const char *tok[2];
  int k, rc = SQLITE_OK;
  if (!name) return d->rc;
  if (strcmp(name, "TemplateProcessing") != 0) {
    *pzErr = sqlite3_mprintf("%s: post_processor '%s' is not supported "
                             "(supported: TemplateProcessing)", TJ, name);
    goto done;
  }
  single = tjTemplate(d, "$.post_processor.single");
  pair = tjTemplate(d, "$.post_processor.pair");
  if (d->rc != SQLITE_OK) goto done;
  if (strncmp(single, "$A:0 ", 5) == 0) {
    out->sep = tjGet(d, "$.post_processor.single[1].SpecialToken.id", type);
    w1 = sqlite3_mprintf("$A:0 %s:0", out->sep ? out->sep : "");
    w2 = sqlite3_mprintf("$A:0 %s:0 $B:0 %s:0", out->sep ? out->sep : "",
                         out->sep ? out->sep : "");
  } else {
    out->cls = tjGet(d, "$.post_processor.single[0].SpecialToken.id", type);
    out->sep = tjGet(d, "$.post_processor.single[2].SpecialToken.id", type);
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
    ids = tjGet(d, p, type);
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

static int tjUnigram(tj_doc *d, relattn_hf_tokjson *out, char **pzErr) {
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
    out->unk = p ? tjGet(d, p, type) : NULL;
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

int relattn_hf_tokjson_read(sqlite3 *db, const uint8_t *file, size_t n,
                            relattn_hf_tokjson *out, char **pzErr) {
  tj_doc d;
  char type[16], *name = NULL, *v = NULL, *single = NULL, *pair = NULL;
  int bad = 0, clean;
  memset(out, 0, sizeof *out);
  if (n >= 3 && memcmp(file, "\xef\xbb\xbf", 3) == 0) file += 3, n -= 3;
  if (n > 0x7fffffff) {
    *pzErr = sqlite3_mprintf("%s is too large", TJ);
    return SQLITE_TOOBIG;
  }
  d.db = db, d.json = (const char *)file, d.n = (int)n, d.rc = SQLITE_OK;
  {
    sqlite3_stmt *st = NULL;
    int ok = 0;
    if ((d.rc = sqlite3_prepare_v2(db, "SELECT json_valid(?1)", -1, &st,
                                   NULL)) != SQLITE_OK)
      goto fail;
    sqlite3_bind_text(st, 1, d.json, d.n, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) ok = sqlite3_column_int(st, 0);
    if ((d.rc = sqlite3_finalize(st)) != SQLITE_OK) goto fail;
    if (!ok) {
      *pzErr = sqlite3_mprintf("%s is not valid JSON", TJ);
      goto fail;
    }
  }
  /* what changes ids outside the components */
  v = tjGet(&d, "$.truncation", type);
  if (d.rc == SQLITE_OK && v) {
    *pzErr = sqlite3_mprintf("%s: truncation is not supported (it must be "
                             "null)", TJ);
    goto fail;
  }
  sqlite3_free(v);
  v = tjGet(&d, "$.padding", type);
  if (d.rc == SQLITE_OK && v) {
    *pzErr = sqlite3_mprintf("%s: padding is not supported (it must be "
                             "null)", TJ);
    goto fail;
  }
  sqlite3_free(v), v = NULL;

  /* the model */
  name = tjName(&d, "model", "models");
  if (d.rc != SQLITE_OK) goto fail;
  if (strcmp(name, "Unigram") == 0) {
    if ((d.rc = tjUnigram(&d, out, pzErr)) != SQLITE_OK || *pzErr) goto fail;
    sqlite3_free(name);
    return SQLITE_OK;
  }
  if (strcmp(name, "WordPiece") != 0) {
    *pzErr = sqlite3_mprintf("%s: model '%s' is not supported (supported: "
                             "WordPiece, Unigram)", TJ, name);
    goto fail;
  }
  v = tjGet(&d, "$.model.continuing_subword_prefix", type);
  if (d.rc == SQLITE_OK && (!v || strcmp(v, "##") != 0)) {
    char e[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf("%s: model WordPiece with "
                             "continuing_subword_prefix '%s' is not supported "
                             "(supported: '##')", TJ,
                             relattn_echo(e, v ? v : "null", -1));
    goto fail;
  }
  sqlite3_free(v);
  v = tjGet(&d, "$.model.max_input_chars_per_word", type);
  if (d.rc == SQLITE_OK && (!v || strcmp(type, "integer") != 0 ||
                            strcmp(v, "100") != 0)) {
    char e[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf("%s: model WordPiece with "
                             "max_input_chars_per_word %s is not supported "
                             "(supported: 100)", TJ,
                             relattn_echo(e, v ? v : "null", -1));
    goto fail;
  }
  sqlite3_free(v), v = NULL;
  out->unk = tjGet(&d, "$.model.unk_token", type);
  if (d.rc != SQLITE_OK) goto fail;
  if (!out->unk || strcmp(type, "text") != 0 || tjVocabId(&d, out->unk) < 0) {
    char e[RELATTN_ECHO_BUF];
    if (d.rc != SQLITE_OK) goto fail;
    *pzErr = sqlite3_mprintf("%s: model.unk_token '%s' is not in "
                             "model.vocab", TJ,
                             relattn_echo(e, out->unk ? out->unk : "null",
                                          -1));
    goto fail;
  }

  /* the normalizer: BertNormalizer, whose options are the WordPiece
  ** kind's own */
  sqlite3_free(name);
  name = tjName(&d, "normalizer", "normalizers");
  if (d.rc != SQLITE_OK) goto fail;
  if (strcmp(name, "BertNormalizer") != 0) {
    *pzErr = sqlite3_mprintf("%s: normalizer '%s' is not supported "
                             "(supported: BertNormalizer)", TJ, name);
    goto fail;
  }
  clean = tjBool(&d, "$.normalizer.clean_text", &bad);
  out->chinese = tjBool(&d, "$.normalizer.handle_chinese_chars", &bad);
  out->strip = tjBool(&d, "$.normalizer.strip_accents", &bad);
  out->lower = tjBool(&d, "$.normalizer.lowercase", &bad);
  if (d.rc != SQLITE_OK) goto fail;
  if (bad || clean < 0 || out->chinese < 0 || out->lower < 0) {
    *pzErr = sqlite3_mprintf("%s: normalizer BertNormalizer: clean_text, "
                             "handle_chinese_chars and lowercase must be true "
                             "or false, strip_accents true, false or null",
                             TJ);
    goto fail;
  }
  if (!clean) {
    *pzErr = sqlite3_mprintf("%s: normalizer BertNormalizer with clean_text "
                             "false is not supported", TJ);
    goto fail;
  }

  sqlite3_free(name);
  name = tjName(&d, "pre_tokenizer", "pretokenizers");
  if (d.rc != SQLITE_OK) goto fail;
  if (strcmp(name, "BertPreTokenizer") != 0) {
    *pzErr = sqlite3_mprintf("%s: pre_tokenizer '%s' is not supported "
                             "(supported: BertPreTokenizer)", TJ, name);
    goto fail;
  }

  sqlite3_free(name);
  name = tjName(&d, "decoder", "decoders");
  if (d.rc != SQLITE_OK) goto fail;
  if (strcmp(name, "WordPiece") != 0 && strcmp(name, "null") != 0) {
    *pzErr = sqlite3_mprintf("%s: decoder '%s' is not supported (supported: "
                             "WordPiece, null)", TJ, name);
    goto fail;
  }
  if (strcmp(name, "WordPiece") == 0) {
    v = tjGet(&d, "$.decoder.prefix", type);
    if (d.rc == SQLITE_OK && (!v || strcmp(v, "##") != 0)) {
      char e[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("%s: decoder WordPiece with prefix '%s' is "
                               "not supported (supported: '##')", TJ,
                               relattn_echo(e, v ? v : "null", -1));
      goto fail;
    }
    sqlite3_free(v), v = NULL;
  }

  /* the post-processor: [CLS] $A [SEP], and [CLS] $A [SEP] $B [SEP] with
  ** token type 1 from $B, as relattn_tokenize adds them */
  sqlite3_free(name);
  name = tjName(&d, "post_processor", "processors");
  if (d.rc != SQLITE_OK) goto fail;
  if (strcmp(name, "TemplateProcessing") == 0) {
    char *want1, *want2;
    single = tjTemplate(&d, "$.post_processor.single");
    pair = tjTemplate(&d, "$.post_processor.pair");
    out->cls = tjGet(&d, "$.post_processor.single[0].SpecialToken.id", type);
    out->sep = tjGet(&d, "$.post_processor.single[2].SpecialToken.id", type);
    if (d.rc != SQLITE_OK) goto fail;
    want1 = sqlite3_mprintf("%s:0 $A:0 %s:0", out->cls ? out->cls : "",
                            out->sep ? out->sep : "");
    want2 = sqlite3_mprintf("%s:0 $A:0 %s:0 $B:1 %s:1",
                            out->cls ? out->cls : "",
                            out->sep ? out->sep : "",
                            out->sep ? out->sep : "");
    if (!want1 || !want2) {
      sqlite3_free(want1);
      sqlite3_free(want2);
      d.rc = SQLITE_NOMEM;
      goto fail;
    }
    if (!out->cls || !out->sep || strcmp(single, want1) != 0 ||
        strcmp(pair, want2) != 0) {
      char e1[RELATTN_ECHO_BUF], e2[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("%s: post_processor TemplateProcessing with "
                               "single '%s' and pair '%s' is not supported "
                               "(supported: '[CLS]:0 $A:0 [SEP]:0' and "
                               "'[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1', any "
                               "two tokens for [CLS] and [SEP])", TJ,
                               relattn_echo(e1, single, -1),
                               relattn_echo(e2, pair, -1));
    }
    sqlite3_free(want1);
    sqlite3_free(want2);
    if (*pzErr) goto fail;
    {
      /* each special's ids: the one id model.vocab gives it */
      const char *tok[2];
      int k;
      tok[0] = out->cls, tok[1] = out->sep;
      for (k = 0; k < 2; k++) {
        char *p = sqlite3_mprintf("$.post_processor.special_tokens.\"%w\".ids",
                                  tok[k]);
        char *ids;
        int id;
        if (!p) {
          d.rc = SQLITE_NOMEM;
          goto fail;
        }
        ids = tjGet(&d, p, type);
        sqlite3_free(p);
        id = tjVocabId(&d, tok[k]);
        if (d.rc != SQLITE_OK) {
          sqlite3_free(ids);
          goto fail;
        }
        p = sqlite3_mprintf("[%d]", id);
        if (id < 0 || !ids || !p || strcmp(ids, p) != 0) {
          char e[RELATTN_ECHO_BUF];
          *pzErr = sqlite3_mprintf("%s: post_processor: special token '%s' "
                                   "must have the one id model.vocab gives "
                                   "it", TJ, relattn_echo(e, tok[k], -1));
        }
        sqlite3_free(ids);
        sqlite3_free(p);
        if (*pzErr) goto fail;
      }
    }
  } else if (strcmp(name, "BertProcessing") == 0) {
    const char *key[2] = {"cls", "sep"};
    char **tok[2];
    int k;
    tok[0] = &out->cls, tok[1] = &out->sep;
    for (k = 0; k < 2; k++) {
      char p[48], *id;
      sqlite3_snprintf(sizeof p, p, "$.post_processor.%s[0]", key[k]);
      *tok[k] = tjGet(&d, p, type);
      sqlite3_snprintf(sizeof p, p, "$.post_processor.%s[1]", key[k]);
      id = tjGet(&d, p, type);
      if (d.rc == SQLITE_OK &&
          (!*tok[k] || !id || strcmp(type, "integer") != 0 ||
           atoi(id) != tjVocabId(&d, *tok[k]))) {
        *pzErr = sqlite3_mprintf("%s: post_processor BertProcessing: %s must "
                                 "be a token of model.vocab and its id", TJ,
                                 key[k]);
      }
      sqlite3_free(id);
      if (d.rc != SQLITE_OK || *pzErr) goto fail;
    }
  } else {
    *pzErr = sqlite3_mprintf("%s: post_processor '%s' is not supported "
                             "(supported: TemplateProcessing, "
                             "BertProcessing)", TJ, name);
    goto fail;
  }

  if ((d.rc = tjAdded(&d, pzErr)) != SQLITE_OK || *pzErr) goto fail;
  if ((d.rc = tjVocab(&d, out, pzErr)) != SQLITE_OK || *pzErr) goto fail;
  sqlite3_free(name);
  sqlite3_free(single);
  sqlite3_free(pair);
  return SQLITE_OK;
fail:
  sqlite3_free(v);
  sqlite3_free(name);
  sqlite3_free(single);
  sqlite3_free(pair);
  relattn_hf_tokjson_free(out);
  if (!*pzErr)
    *pzErr = d.rc == SQLITE_NOMEM ? sqlite3_mprintf("%s: out of memory", FN)
                                  : relattn_sql_errmsg(db, FN, d.rc);
  return d.rc != SQLITE_OK ? d.rc : SQLITE_ERROR;
}

void relattn_hf_tokjson_free(relattn_hf_tokjson *t) {
  sqlite3_free(t->vocab);
  sqlite3_free(t->cls);
  sqlite3_free(t->sep);
  sqlite3_free(t->unk);
  memset(t, 0, sizeof *t);
}
