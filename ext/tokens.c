/*
** tokens.c: token sequences (docs/reference.md, Formats): BLOBs of little-endian int32
** ids, JSON arrays, text through a model's tokenizer (bytes, wordpiece or
** sentencepiece: src/tokenizer.c).
**
**   SELECT relattn_tokens('[72,105]');              -- X'4800000069000000'
**   SELECT relattn_tokens_json(relattn_tokens('[72,105]'));   -- '[72,105]'
**   SELECT relattn_tokenize('tiny', 'Hi');          -- the same BLOB
**   SELECT relattn_detokenize('tiny', relattn_tokenize('tiny', 'Hi'));  -- 'Hi'
**   SELECT pos, token FROM relattn_tokens_each(relattn_tokens('[5,6,7]'));
**   SELECT relattn_tokens_agg(token) FROM (SELECT token FROM t ORDER BY pos);
*/
#include "ext.h"
#include "functions.h"

#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

/* A BLOB result of n ids, within SQLite's length limit. Takes ids. */
static void resultTokens(sqlite3_context *ctx, const char *fn, int32_t *ids,
                         size_t n) {
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  if (n * 4 > (size_t)sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1)) {
    sqlite3_free(ids);
    relattn_result_errorf(ctx, "%s: the result is larger than SQLite's BLOB "
                          "limit", fn);
    sqlite3_result_error_code(ctx, SQLITE_TOOBIG);
    return;
  }
  sqlite3_result_blob64(ctx, ids, n * 4, sqlite3_free);
}

/* ---- relattn_tokens(json_array) -------------------------------------------- */

void relattn_tokens_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  static const char fn[] = "relattn_tokens";
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  sqlite3_stmt *st = NULL;
  int32_t *ids = NULL;
  size_t n = 0, cap = 0;
  int rc;
  (void)argc;
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) return; /* NULL in, out */
  if (sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
    relattn_result_errorf(ctx, "%s: json_array must be TEXT, a JSON array of "
                          "integers", fn);
    return;
  }
  rc = sqlite3_prepare_v2(db,
                          "SELECT CASE WHEN json_valid(?1) THEN "
                          "json_type(?1) END",
                          -1, &st, NULL);
  if (rc != SQLITE_OK) goto sqlerr;
  sqlite3_bind_value(st, 1, argv[0]);
  if (sqlite3_step(st) != SQLITE_ROW) goto sqlerr;
  if (!sqlite3_column_text(st, 0) ||
      strcmp((const char *)sqlite3_column_text(st, 0), "array") != 0) {
    sqlite3_finalize(st);
    relattn_result_errorf(ctx, "%s: json_array is not a JSON array", fn);
    return;
  }
  sqlite3_finalize(st);
  rc = sqlite3_prepare_v2(db, "SELECT type, atom FROM json_each(?1)", -1, &st,
                          NULL);
  if (rc != SQLITE_OK) goto sqlerr;
  sqlite3_bind_value(st, 1, argv[0]);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *type = (const char *)sqlite3_column_text(st, 0);
    sqlite3_int64 v = sqlite3_column_int64(st, 1);
    if (strcmp(type, "integer") != 0) {
      relattn_result_errorf(ctx, "%s: element %llu of json_array is not an "
                            "integer", fn, (sqlite3_uint64)n);
      goto fail;
    }
    if (sqlite3_column_type(st, 1) != SQLITE_INTEGER || v < INT32_MIN ||
        v > INT32_MAX) {
      relattn_result_errorf(ctx, "%s: element %llu of json_array is outside "
                            "the int32 range", fn, (sqlite3_uint64)n);
      goto fail;
    }
    if (n == cap) {
      size_t grown = cap ? 2 * cap : 64;
      int32_t *p = sqlite3_realloc64(ids, grown * 4);
      if (!p) {
        sqlite3_result_error_nomem(ctx);
        goto fail;
      }
      ids = p, cap = grown;
    }
    ids[n++] = (int32_t)v;
  }
  if (rc != SQLITE_DONE) goto sqlerr;
  sqlite3_finalize(st);
  if (!ids && !(ids = sqlite3_malloc(1))) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  resultTokens(ctx, fn, ids, n);
  return;
sqlerr:
  relattn_result_errorf(ctx, "%s: %s", fn, sqlite3_errmsg(db));
fail:
  sqlite3_finalize(st);
  sqlite3_free(ids);
}

/* ---- relattn_tokens_json(tokens) ------------------------------------------ */

void relattn_tokens_json_func(sqlite3_context *ctx, int argc,
                              sqlite3_value **argv) {
  static const char fn[] = "relattn_tokens_json";
  sqlite3_str *s;
  char *zErr, *text;
  int n, i;
  int32_t *ids;
  (void)argc;
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) return;
  ids = relattn_tokens_value(argv[0], NULL, fn, "tokens", &n, &zErr);
  if (!ids) {
    relattn_result_error(ctx, SQLITE_ERROR, zErr);
    return;
  }
  s = sqlite3_str_new(sqlite3_context_db_handle(ctx));
  sqlite3_str_appendchar(s, 1, '[');
  for (i = 0; i < n; i++) sqlite3_str_appendf(s, i ? ",%d" : "%d", ids[i]);
  sqlite3_str_appendchar(s, 1, ']');
  sqlite3_free(ids);
  if (sqlite3_str_errcode(s) == SQLITE_TOOBIG) {
    sqlite3_free(sqlite3_str_finish(s));
    relattn_result_errorf(ctx, "%s: the result is larger than SQLite's TEXT "
                          "limit", fn);
    sqlite3_result_error_code(ctx, SQLITE_TOOBIG);
    return;
  }
  text = sqlite3_str_finish(s);
  if (!text) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_text(ctx, text, -1, sqlite3_free);
}

/* ---- relattn_tokenize(model, text), relattn_detokenize(model, tokens) ----- */

void relattn_tokenize_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  static const char fn[] = "relattn_tokenize";
  relattn_conn *conn = sqlite3_user_data(ctx);
  const relattn_model *m;
  int32_t *ids;
  char *zErr;
  int n, rc;
  (void)argc;
  if (sqlite3_value_type(argv[1]) != SQLITE_TEXT) {
    relattn_result_errorf(ctx, "%s: text must be TEXT", fn);
    return;
  }
  if (!(m = relattn_model_arg(ctx, argv[0], fn))) return;
  rc = relattn_tokens_limited(conn, m, argv[1], fn, "text", &ids, &n, &zErr);
  relattn_store_release(conn, m);
  if (rc != SQLITE_OK) {
    relattn_result_error(ctx, rc, zErr);
    return;
  }
  resultTokens(ctx, fn, ids, (size_t)n);
}

void relattn_detokenize_func(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv) {
  static const char fn[] = "relattn_detokenize";
  relattn_conn *conn = sqlite3_user_data(ctx);
  const relattn_model *m;
  int32_t *ids;
  uint8_t *text;
  size_t len;
  char *zErr, err[256];
  int n, rc;
  (void)argc;
  if (!(m = relattn_model_arg(ctx, argv[0], fn))) return;
  rc = relattn_tokens_limited(conn, m, argv[1], fn, "tokens", &ids, &n, &zErr);
  if (rc != SQLITE_OK) {
    relattn_store_release(conn, m);
    relattn_result_error(ctx, rc, zErr);
    return;
  }
  rc = relattn_tokenizer_decode(m->tok, ids, (size_t)n, &text, &len, fn, err,
                                sizeof err);
  relattn_store_release(conn, m);
  sqlite3_free(ids);
  if (rc != RELATTN_OK) {
    relattn_result_status(ctx, rc, err);
    return;
  }
  sqlite3_result_text64(ctx, (const char *)text, len, free, SQLITE_UTF8);
}

/* ---- the tokenizer file stored with a model ------------------------------ */

int relattn_is_tokfile(const char *name) {
  return name && strncmp(name, "tokenizer.", 10) == 0;
}

char *relattn_tokfile_parse(const relattn_config *c, const char *name,
                            const char *dtype, const char *shape,
                            const void *data, size_t bytes, const char *what,
                            relattn_tokenizer **tok) {
  const char *kind = relattn_tokenizer_kind_name(c->tok_type);
  char ename[RELATTN_ECHO_BUF], want[48], err[256];
  int rc;
  *tok = NULL;
  relattn_echo(ename, name, -1);
  if (c->tok_type == RELATTN_TOK_BYTES)
    return sqlite3_mprintf("%s: tensor '%s' is a tokenizer file, but the "
                           "config's tokenizer.type is bytes, which has none",
                           what, ename);
  if (strcmp(name + 10, kind) != 0)
    return sqlite3_mprintf("%s: tensor '%s' does not match the config's "
                           "tokenizer.type (%s): expected 'tokenizer.%s'",
                           what, ename, kind, kind);
  if (!dtype || strcmp(dtype, "U8") != 0)
    return sqlite3_mprintf("%s: tensor '%s' must have dtype U8", what, ename);
  sqlite3_snprintf(sizeof want, want, "[%llu]", (sqlite3_uint64)bytes);
  if (shape && strcmp(shape, want) != 0)
    return sqlite3_mprintf("%s: tensor '%s' has shape %s; its %llu bytes "
                           "need %s", what, ename, shape,
                           (sqlite3_uint64)bytes, want);
  rc = relattn_tokenizer_new(tok, c, data, bytes, what, err, sizeof err);
  if (rc == RELATTN_ERR_FORMAT) {
    /* another kind's file (told by its structure) says so, rather than
    ** where it breaks as this kind's */
    int found = relattn_tokenizer_file_kind(data, bytes);
    int expect = c->tok_type == RELATTN_TOK_WORDPIECE ? RELATTN_TOKFILE_VOCAB
                                                      : RELATTN_TOKFILE_SPM;
    if (found != RELATTN_TOKFILE_UNKNOWN && found != expect)
      return sqlite3_mprintf("%s: tokenizer.%s is %s, not the %s the "
                             "config's tokenizer.type (%s) needs",
                             what, kind, relattn_tokenizer_file_name(found),
                             expect == RELATTN_TOKFILE_VOCAB
                                 ? "vocab.txt"
                                 : "SentencePiece model",
                             kind);
  }
  if (rc != RELATTN_OK) return sqlite3_mprintf("%s", err);
  return NULL;
}

char *relattn_tokfile_finish(relattn_model *m, const char *what) {
  char err[256];
  if (m->tok) return NULL;
  if (m->cfg.tok_type != RELATTN_TOK_BYTES)
    return sqlite3_mprintf("%s: tensor 'tokenizer.%s' is missing (the "
                           "config's tokenizer.type needs its file)",
                           what, relattn_tokenizer_kind_name(m->cfg.tok_type));
  if (relattn_tokenizer_new(&m->tok, &m->cfg, NULL, 0, what, err, sizeof err))
    return sqlite3_mprintf("%s", err);
  return NULL;
}

/* tokenizer.added_tokens: {"128000": "[MASK]"} or, as Hugging Face's
** added_tokens_decoder writes it, {"128000": {"content": "[MASK]",
** "lstrip": false, "rstrip": false, ...}} (other keys ignored). */
char *relattn_tokfile_special(sqlite3 *db, const char *config,
                              const relattn_config *c, relattn_tokenizer *tok,
                              const char *what) {
  static const char *const keys[] = {"tokenizer.bos", "tokenizer.eos",
                                     "tokenizer.pad", "tokenizer.append",
                                     "tokenizer.sep", "tokenizer.mask",
                                     "tokenizer.unk"};
  const int ids[] = {c->bos, c->eos, c->pad, c->append, c->sep, c->mask,
                     c->unk};
  relattn_special_token *sp = NULL;
  char **names = NULL, *zErr = NULL, err[256];
  sqlite3_stmt *st = NULL;
  int n = 0, cap = 7, k, rc;
  if (!c->split_special) return NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT key, type, CASE type WHEN 'object' THEN "
                         "json_type(value, '$.content') END, CASE type WHEN "
                         "'object' THEN json_extract(value, '$.content') "
                         "ELSE value END, CASE type WHEN 'object' THEN "
                         "json_type(value, '$.lstrip') END, CASE type WHEN "
                         "'object' THEN json_type(value, '$.rstrip') END, "
                         "count(*) OVER (), CASE type WHEN 'object' THEN "
                         "json_extract(?1, fullkey || '.content', fullkey || "
                         "'.content') ELSE json_extract(?1, fullkey, fullkey) "
                         "END FROM json_each(?1, '$.tokenizer.added_tokens')",
                         -1, &st, NULL) != SQLITE_OK)
    return relattn_sql_errmsg(db, what, sqlite3_errcode(db));
  sqlite3_bind_text(st, 1, config, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(st, 0);
    const char *type = (const char *)sqlite3_column_text(st, 1);
    const char *ctype = (const char *)sqlite3_column_text(st, 2);
    const char *text = (const char *)sqlite3_column_text(st, 3);
    const char *flag[2];
    char e[RELATTN_ECHO_BUF];
    long id = 0;
    const char *p = key ? key : "";
    flag[0] = (const char *)sqlite3_column_text(st, 4);
    flag[1] = (const char *)sqlite3_column_text(st, 5);
    if (!sp) {
      cap += sqlite3_column_int(st, 6);
      sp = sqlite3_malloc64(sizeof *sp * (sqlite3_uint64)cap);
      names = sqlite3_malloc64(sizeof *names * (sqlite3_uint64)cap);
      if (!sp || !names) goto nomem;
      memset(names, 0, sizeof *names * (size_t)cap);
      for (k = 0; k < 7; k++) /* the roles first: added_tokens texts win */
        if (ids[k] >= 0) {
          memset(&sp[n], 0, sizeof sp[n]);
          sp[n].id = ids[k], sp[n].key = keys[k];
          n++;
        }
    }
    for (; *p >= '0' && *p <= '9' && id < c->vocab_size; p++)
      id = 10 * id + (*p - '0');
    if (!key || !*key || *p || id >= c->vocab_size) {
      zErr = sqlite3_mprintf("%s: config: 'tokenizer.added_tokens' has key "
                             "'%s', not a token id (0 to %d)",
                             what, relattn_echo(e, key, -1),
                             c->vocab_size - 1);
      goto done;
    }
    if (!type || (strcmp(type, "text") != 0 &&
                  (strcmp(type, "object") != 0 || !ctype ||
                   strcmp(ctype, "text") != 0)) ||
        !text || !*text) {
      zErr = sqlite3_mprintf("%s: config: 'tokenizer.added_tokens' entry "
                             "'%s' must be a non-empty string, or an object "
                             "with a non-empty string 'content'",
                             what, relattn_echo(e, key, -1));
      goto done;
    }
    if (relattn_json_has_nul((const char *)sqlite3_column_text(st, 7))) {
      zErr = sqlite3_mprintf("%s: config: 'tokenizer.added_tokens' entry "
                             "'%s'" RELATTN_NUL_MSG,
                             what, relattn_echo(e, key, -1));
      goto done;
    }
    for (k = 0; k < 2; k++)
      if (flag[k] && strcmp(flag[k], "true") != 0 &&
          strcmp(flag[k], "false") != 0 && strcmp(flag[k], "null") != 0) {
        zErr = sqlite3_mprintf("%s: config: 'tokenizer.added_tokens' entry "
                               "'%s': '%s' must be true or false, not %s",
                               what, relattn_echo(e, key, -1),
                               k ? "rstrip" : "lstrip", flag[k]);
        goto done;
      }
    names[n] = sqlite3_mprintf("%s", text);
    if (!names[n]) goto nomem;
    memset(&sp[n], 0, sizeof sp[n]);
    sp[n].id = (int32_t)id;
    sp[n].text = names[n];
    sp[n].lstrip = flag[0] && strcmp(flag[0], "true") == 0;
    sp[n].rstrip = flag[1] && strcmp(flag[1], "true") == 0;
    sp[n].key = "tokenizer.added_tokens";
    n++;
  }
  if (rc != SQLITE_DONE) {
    zErr = relattn_sql_errmsg(db, what, sqlite3_errcode(db));
    goto done;
  }
  if (!sp) { /* no added_tokens: the roles alone */
    sp = sqlite3_malloc64(sizeof *sp * 7);
    if (!sp) goto nomem;
    for (k = 0; k < 7; k++)
      if (ids[k] >= 0) {
        memset(&sp[n], 0, sizeof sp[n]);
        sp[n].id = ids[k], sp[n].key = keys[k];
        n++;
      }
  }
  rc = relattn_tokenizer_set_special(tok, sp, n, what, err, sizeof err);
  if (rc == RELATTN_ERR_NOMEM) goto nomem;
  if (rc != RELATTN_OK) zErr = sqlite3_mprintf("%s", err);
  goto done;
nomem:
  sqlite3_free(zErr);
  zErr = sqlite3_mprintf("%s: out of memory", what);
done:
  sqlite3_finalize(st);
  if (names)
    for (k = 0; k < cap; k++) sqlite3_free(names[k]);
  sqlite3_free(names);
  sqlite3_free(sp);
  return zErr;
}

/* ---- relattn_tokens_agg(token) -------------------------------------------- */

typedef struct agg {
  int32_t *ids;
  size_t n, cap;
} agg;

void relattn_tokens_agg_step(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  agg *a = sqlite3_aggregate_context(ctx, sizeof *a);
  sqlite3_int64 v;
  (void)argc;
  if (!a) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  v = sqlite3_value_int64(argv[0]);
  if (sqlite3_value_type(argv[0]) != SQLITE_INTEGER || v < INT32_MIN ||
      v > INT32_MAX) {
    relattn_result_errorf(ctx, "relattn_tokens_agg: token %llu is not an "
                          "integer in the int32 range", (sqlite3_uint64)a->n);
    return;
  }
  if ((a->n + 1) * 4 > (size_t)sqlite3_limit(sqlite3_context_db_handle(ctx),
                                             SQLITE_LIMIT_LENGTH, -1)) {
    /* Stop growing here, not at the end: the rows may never stop. */
    relattn_result_errorf(ctx, "relattn_tokens_agg: the result is larger "
                          "than SQLite's BLOB limit");
    sqlite3_result_error_code(ctx, SQLITE_TOOBIG);
    return;
  }
  if (a->n == a->cap) {
    size_t grown = a->cap ? 2 * a->cap : 256;
    int32_t *p = sqlite3_realloc64(a->ids, grown * 4);
    if (!p) {
      sqlite3_result_error_nomem(ctx);
      return;
    }
    a->ids = p, a->cap = grown;
  }
  a->ids[a->n++] = (int32_t)v;
}

void relattn_tokens_agg_final(sqlite3_context *ctx) {
  agg *a = sqlite3_aggregate_context(ctx, 0);
  if (!a || !a->ids) {
    sqlite3_result_zeroblob(ctx, 0); /* no rows: the empty sequence */
    return;
  }
  resultTokens(ctx, "relattn_tokens_agg", a->ids, a->n); /* takes ids */
  a->ids = NULL;
}

/* ---- relattn_tokens_each(tokens) → pos, token ------------------------------ */

typedef struct each_cursor {
  sqlite3_vtab_cursor base; /* must be first */
  int32_t *ids;
  int n, pos;
} each_cursor;

#define EACH_POS 0
#define EACH_TOKEN 1
#define EACH_TOKENS 2

static int eachConnect(sqlite3 *db, void *aux, int argc,
                       const char *const *argv, sqlite3_vtab **ppVtab,
                       char **pzErr) {
  sqlite3_vtab *vt;
  int rc = sqlite3_declare_vtab(
      db, "CREATE TABLE x(pos INTEGER, token INTEGER, tokens HIDDEN)");
  (void)aux, (void)argc, (void)argv, (void)pzErr;
  if (rc != SQLITE_OK) return rc;
  vt = sqlite3_malloc(sizeof *vt);
  if (!vt) return SQLITE_NOMEM;
  memset(vt, 0, sizeof *vt);
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  *ppVtab = vt;
  return SQLITE_OK;
}

static int eachDisconnect(sqlite3_vtab *vt) {
  sqlite3_free(vt);
  return SQLITE_OK;
}

static int eachOpen(sqlite3_vtab *vt, sqlite3_vtab_cursor **pp) {
  each_cursor *c = sqlite3_malloc(sizeof *c);
  (void)vt;
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof *c);
  *pp = &c->base;
  return SQLITE_OK;
}

static int eachClose(sqlite3_vtab_cursor *cur) {
  each_cursor *c = (each_cursor *)cur;
  sqlite3_free(c->ids);
  sqlite3_free(c);
  return SQLITE_OK;
}

static int eachBestIndex(sqlite3_vtab *vt, sqlite3_index_info *info) {
  int i;
  (void)vt;
  for (i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if (c->iColumn != EACH_TOKENS || c->op != SQLITE_INDEX_CONSTRAINT_EQ)
      continue;
    if (!c->usable) return SQLITE_CONSTRAINT; /* wait for a usable plan */
    info->aConstraintUsage[i].argvIndex = 1;
    info->aConstraintUsage[i].omit = 1;
    info->idxNum = 1;
    info->estimatedCost = 10;
    info->estimatedRows = 1000;
    if (info->nOrderBy == 1 && info->aOrderBy[0].iColumn == EACH_POS &&
        !info->aOrderBy[0].desc)
      info->orderByConsumed = 1;
    return SQLITE_OK;
  }
  info->idxNum = 0; /* xFilter names the missing argument */
  info->estimatedCost = 1e12;
  return SQLITE_OK;
}

static int eachFilter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr,
                      int argc, sqlite3_value **argv) {
  each_cursor *c = (each_cursor *)cur;
  char *zErr = NULL;
  (void)idxStr;
  sqlite3_free(c->ids);
  c->ids = NULL;
  c->n = c->pos = 0;
  if (idxNum != 1 || argc < 1) {
    return relattn_vtab_error(
        NULL, cur->pVtab, SQLITE_ERROR,
        sqlite3_mprintf("relattn_tokens_each: the tokens argument is missing"));
  }
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) return SQLITE_OK; /* no rows */
  c->ids = relattn_tokens_value(argv[0], NULL, "relattn_tokens_each", "tokens",
                                &c->n, &zErr);
  if (!c->ids) {
    return relattn_vtab_error(NULL, cur->pVtab, SQLITE_ERROR, zErr);
  }
  return SQLITE_OK;
}

static int eachNext(sqlite3_vtab_cursor *cur) {
  ((each_cursor *)cur)->pos++;
  return SQLITE_OK;
}

static int eachEof(sqlite3_vtab_cursor *cur) {
  each_cursor *c = (each_cursor *)cur;
  return c->pos >= c->n;
}

static int eachColumn(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  each_cursor *c = (each_cursor *)cur;
  switch (col) {
    case EACH_POS: sqlite3_result_int(ctx, c->pos); break;
    case EACH_TOKEN: sqlite3_result_int(ctx, c->ids[c->pos]); break;
    default: sqlite3_result_null(ctx); break;
  }
  return SQLITE_OK;
}

static int eachRowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid) {
  *rowid = ((each_cursor *)cur)->pos;
  return SQLITE_OK;
}

sqlite3_module relattn_tokens_each_module = {
    .iVersion = 0,
    .xCreate = 0, /* eponymous only */
    .xConnect = eachConnect,
    .xBestIndex = eachBestIndex,
    .xDisconnect = eachDisconnect,
    .xOpen = eachOpen,
    .xClose = eachClose,
    .xFilter = eachFilter,
    .xNext = eachNext,
    .xEof = eachEof,
    .xColumn = eachColumn,
    .xRowid = eachRowid,
};
