/*
** export.c: relattn_export(model), a model's rows as one safetensors file:
** the config under __metadata__["relattn.config"], the tensors as stored
** (their dtypes, the tokenizer's file too), in the order import wrote them.
** relattn_import reads the file back to the same rows.
**
**   SELECT writefile('out.safetensors', relattn_export('tiny'));
**
** HOW IT WORKS
** It reads the tables, not the cache: one statement over relattn_model
** stays open while the rest runs, so the header and the data come from one
** snapshot; the header's JSON is SQLite's, the prefix src/safetensors.c's.
*/
#include "ext.h"
#include "functions.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

void relattn_export_func(sqlite3_context *ctx, int argc,
                        sqlite3_value **argv) {
  static const char fn[] = "relattn_export";
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  sqlite3_stmt *st = NULL, *pin = NULL;
  sqlite3_str *hdr = NULL;
  const char *model;
  char *header = NULL;
  struct { sqlite3_int64 rowid, size; } *rows = NULL; /* in export order */
  sqlite3_int64 data_bytes = 0;
  size_t hlen, prefix, total, off;
  uint8_t *out = NULL;
  int n = 0, cap = 0, i, rc;
  (void)argc;

  if (sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
    relattn_result_error(ctx, SQLITE_ERROR, relattn_bad_model_msg(fn));
    return;
  }
  model = (const char *)sqlite3_value_text(argv[0]);
  rc = sqlite3_prepare_v2(db,
                          "SELECT json_object('relattn.config', config) FROM "
                          "relattn_model WHERE name = ?1",
                          -1, &st, NULL);
  if (rc != SQLITE_OK) {
    if (strstr(sqlite3_errmsg(db), "no such table"))
      relattn_result_error(ctx, SQLITE_ERROR, relattn_no_model_msg(fn, model));
    else
      relattn_result_errorf(ctx, "%s: %s", fn, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return;
  }
  sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    if (rc == SQLITE_DONE)
      relattn_result_error(ctx, SQLITE_ERROR, relattn_no_model_msg(fn, model));
    else
      relattn_result_errorf(ctx, "%s: %s", fn, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return;
  }
  /* The header: every piece of JSON comes from SQLite's json functions;
  ** here they are only joined, with the offsets. length(data) does not read
  ** the BLOBs, so this pass is cheap however big the model. */
  hdr = sqlite3_str_new(db);
  sqlite3_str_appendf(hdr, "{\"__metadata__\":%s", sqlite3_column_text(st, 0));
  /* The row's statement stays open on its row until the data is copied:
  ** while it is active, the connection's read transaction holds, so the
  ** config, the header and the data all come from one snapshot. Without
  ** it, an import committed by another process in between gave a file
  ** with one model's config and another's tensors. */
  pin = st;
  st = NULL;
  rc = sqlite3_prepare_v2(db,
                          "SELECT rowid, json_quote(name), json_quote(dtype), "
                          "json(shape), length(data) FROM relattn_tensor "
                          "WHERE model = ?1 ORDER BY rowid",
                          -1, &st, NULL);
  if (rc != SQLITE_OK) goto sqlerr;
  sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    sqlite3_int64 len = sqlite3_column_int64(st, 4);
    if (n == cap) {
      int grown = cap ? 2 * cap : 64;
      void *r = sqlite3_realloc64(rows, (sqlite3_uint64)grown * sizeof *rows);
      if (!r) goto nomem;
      rows = r, cap = grown;
    }
    rows[n].rowid = sqlite3_column_int64(st, 0);
    rows[n++].size = len;
    sqlite3_str_appendf(hdr, ",%s:{\"dtype\":%s,\"shape\":%s,"
                        "\"data_offsets\":[%lld,%lld]}",
                        sqlite3_column_text(st, 1), sqlite3_column_text(st, 2),
                        sqlite3_column_text(st, 3), data_bytes,
                        data_bytes + len);
    data_bytes += len;
  }
  if (rc != SQLITE_DONE) goto sqlerr;
  sqlite3_finalize(st);
  st = NULL;
  sqlite3_str_appendchar(hdr, 1, '}');
  if (sqlite3_str_errcode(hdr) == SQLITE_NOMEM) goto nomem;
  hlen = (size_t)sqlite3_str_length(hdr);
  header = sqlite3_str_finish(hdr);
  hdr = NULL;
  if (!header) goto nomem;
  prefix = relattn_st_prefix_size(hlen);
  if (prefix == 0 || !relattn_add_ok(prefix, (size_t)data_bytes, &total) ||
      total > (size_t)sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1)) {
    relattn_result_errorf(ctx, "%s: model '%s' is larger than SQLite's BLOB "
                          "limit (SQLITE_LIMIT_LENGTH)", fn, model);
    sqlite3_result_error_code(ctx, SQLITE_TOOBIG);
    goto done;
  }
  out = sqlite3_malloc64(total ? total : 1);
  if (!out) goto nomem;
  off = relattn_st_write_prefix(out, header, hlen);
  /* The data, one row at a time by rowid: a single ORDER BY over the BLOBs
  ** would copy every one of them into a sorter first. */
  rc = sqlite3_prepare_v2(db, "SELECT data FROM relattn_tensor WHERE rowid = ?1",
                          -1, &st, NULL);
  if (rc != SQLITE_OK) goto sqlerr;
  for (i = 0; i < n; i++) {
    sqlite3_bind_int64(st, 1, rows[i].rowid);
    if (sqlite3_step(st) != SQLITE_ROW) goto sqlerr;
    if (sqlite3_column_bytes(st, 0) != rows[i].size) {
      /* cannot happen within one read transaction (pin) */
      relattn_result_errorf(ctx, "%s: model '%s' changed while exporting", fn,
                            model);
      goto done;
    }
    if (rows[i].size) memcpy(out + off, sqlite3_column_blob(st, 0), (size_t)rows[i].size);
    off += (size_t)rows[i].size;
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  sqlite3_finalize(pin);
  sqlite3_free(rows);
  sqlite3_free(header);
  sqlite3_result_blob64(ctx, out, total, sqlite3_free);
  return;
nomem:
  sqlite3_result_error_nomem(ctx);
  goto done;
sqlerr:
  relattn_result_errorf(ctx, "%s: %s", fn, sqlite3_errmsg(db));
done:
  sqlite3_finalize(st);
  sqlite3_finalize(pin);
  if (hdr) sqlite3_free(sqlite3_str_finish(hdr));
  sqlite3_free(rows);
  sqlite3_free(header);
  sqlite3_free(out);
}
