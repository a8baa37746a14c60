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
  sqlite3 *db = relattn_json_db(sqlite3_user_data(ctx));
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
