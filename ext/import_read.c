/*
** import_read.c: the readers of relattn_import's weights files (ext/import.c
** calls them): a safetensors file's header, its JSON decoded with SQLite's
** json_each/json_extract, never a parser of our own (offsets and sizes:
** src/safetensors.c), and a sharded checkpoint's index, whose weight_map
** says which tensors its shards hold together. No SQL function of its own.
** Another weights format's reader belongs here too, filling the same
** relattn_import_state (ext/import_read.h).
**
**   SELECT relattn_import('big', readfile('model.safetensors.index.json'),
**                         readfile('config.json'), readfile('vocab.txt'), NULL,
**                         readfile('model-00001-of-00002.safetensors'),
**                         readfile('model-00002-of-00002.safetensors'));
*/
#include "import_read.h"

#include <stdint.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

/* The dtypes a Hugging Face file may hold besides the float ones (integer
** buffers such as position_ids), and their element sizes. */
static size_t rawDtypeSize(const char *name, const char **canonical) {
  static const struct { const char *name; size_t size; } raw[] = {
      {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1}, {"U64", 8}, {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"F64", 8}, {"BOOL", 1}};
  size_t i;
  for (i = 0; name && i < sizeof raw / sizeof raw[0]; i++)
    if (strcmp(name, raw[i].name) == 0) {
      *canonical = raw[i].name;
      return raw[i].size;
    }
  return 0;
}

/* Reads the integers of a JSON array (shape or data_offsets) of a tensor;
** *ok is 0 when one is not an integer. Returns an SQLite code: a failed
** step (interrupted) is not a malformed array. */
static int readInts(sqlite3_stmt *st, const char *value, const char *path,
                    int64_t *out, int max, int *n_out, int *too_big,
                    int *ok) {
  int n = 0, rc;
  *too_big = 0;
  *ok = 1;
  sqlite3_bind_text(st, 1, value, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *type = (const char *)sqlite3_column_text(st, 0);
    if (!type || strcmp(type, "integer") != 0) {
      *ok = 0;
      continue;
    }
    if (sqlite3_column_type(st, 1) != SQLITE_INTEGER) {
      *too_big = 1; /* beyond int64 */
      continue;
    }
    if (n < max) out[n] = sqlite3_column_int64(st, 1);
    n++;
  }
  if (rc != SQLITE_DONE) rc = relattn_sql_code(sqlite3_db_handle(st));
  sqlite3_reset(st);
  *n_out = n;
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Decodes the header JSON into s. Returns an SQLite code and sets *pzErr
** on error. */
static int importHeader(sqlite3 *db, const char *hdr, size_t len,
                        relattn_import_state *s, int lenient, char **pzErr) {
  static const char fn[] = "relattn_import";
  sqlite3_stmt *top = NULL, *fields = NULL, *ints = NULL;
  int code = SQLITE_ERROR, rc;

  if (memchr(hdr, 0, len)) {
    *pzErr = sqlite3_mprintf("%s: safetensors header is not valid JSON", fn);
    return SQLITE_ERROR;
  }
  top = relattn_prepare(db,
                        "SELECT json_valid(?1), CASE WHEN json_valid(?1) THEN "
                        "json_type(?1) END",
                        fn, pzErr);
  if (!top) return relattn_sql_code(db);
  sqlite3_bind_text64(top, 1, hdr, len, SQLITE_STATIC, SQLITE_UTF8);
  if (sqlite3_step(top) != SQLITE_ROW) goto sqlerr;
  if (!sqlite3_column_int(top, 0)) {
    *pzErr = sqlite3_mprintf("%s: safetensors header is not valid JSON", fn);
    goto done;
  }
  if (strcmp((const char *)sqlite3_column_text(top, 1), "object") != 0) {
    *pzErr = sqlite3_mprintf("%s: safetensors header is not a JSON object", fn);
    goto done;
  }
  sqlite3_finalize(top);
  top = relattn_prepare(db, "SELECT key, type, value FROM json_each(?1)", fn,
                        pzErr);
  if (top)
    fields =
        relattn_prepare(db,
                        "SELECT json_type(?1, '$.dtype'), json_extract(?1, "
                        "'$.dtype'), json_type(?1, '$.shape'), json_type(?1, "
                        "'$.data_offsets'), json_type(?1, "
                        "'$.\"relattn.config\"'), json_extract(?1, "
                        "'$.\"relattn.config\"')",
                        fn, pzErr);
  if (fields)
    ints = relattn_prepare(db, "SELECT type, atom FROM json_each(?1, ?2)", fn,
                           pzErr);
  if (!ints) {
    code = relattn_sql_code(db);
    goto done;
  }
  sqlite3_bind_text64(top, 1, hdr, len, SQLITE_STATIC, SQLITE_UTF8);
  while ((rc = sqlite3_step(top)) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(top, 0);
    const char *type = (const char *)sqlite3_column_text(top, 1);
    const char *value = (const char *)sqlite3_column_text(top, 2);
    relattn_st_tensor *t;
    const char *ftype;
    int64_t off[2];
    int n, too_big, ok;
    size_t raw_size;
    char ekey[RELATTN_ECHO_BUF], edt[RELATTN_ECHO_BUF];
    if (!key) key = "";
    relattn_echo(ekey, key, -1); /* input bytes, for messages */
    if (strcmp(key, "__metadata__") == 0) {
      if (strcmp(type, "object") != 0) {
        *pzErr = sqlite3_mprintf("%s: safetensors __metadata__ is not an "
                                 "object", fn);
        goto done;
      }
      sqlite3_bind_text(fields, 1, value, -1, SQLITE_STATIC);
      if (sqlite3_step(fields) != SQLITE_ROW) goto sqlerr;
      ftype = (const char *)sqlite3_column_text(fields, 4);
      if (ftype && strcmp(ftype, "text") != 0) {
        *pzErr = sqlite3_mprintf("%s: __metadata__[\"relattn.config\"] is "
                                 "not a string", fn);
        goto done;
      }
      if (ftype && !s->config) {
        s->config = sqlite3_mprintf(
            "%s", (const char *)sqlite3_column_text(fields, 5));
        if (!s->config) goto nomem;
      }
      sqlite3_reset(fields);
      continue;
    }
    if (strcmp(type, "object") != 0) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' is not a JSON object in the "
                               "header", fn, ekey);
      goto done;
    }
    if (s->n == s->cap) {
      int cap = s->cap ? 2 * s->cap : 64;
      relattn_st_tensor *grown =
          sqlite3_realloc64(s->t, (sqlite3_uint64)cap * sizeof *grown);
      if (!grown) goto nomem;
      s->t = grown;
      if (lenient) {
        const char **raw =
            sqlite3_realloc64(s->raw, (sqlite3_uint64)cap * sizeof *raw);
        if (!raw) goto nomem;
        s->raw = raw;
      }
      s->cap = cap;
    }
    if (lenient) s->raw[s->n] = NULL;
    t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    t->name = sqlite3_mprintf("%s", key);
    if (!t->name) goto nomem;
    s->n++;
    sqlite3_bind_text(fields, 1, value, -1, SQLITE_STATIC);
    if (sqlite3_step(fields) != SQLITE_ROW) goto sqlerr;
    ftype = (const char *)sqlite3_column_text(fields, 0);
    if (!ftype || strcmp(ftype, "text") != 0) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has no dtype string", fn, ekey);
      goto done;
    }
    t->dtype = relattn_dtype_parse((const char *)sqlite3_column_text(fields, 1));
    raw_size = 0;
    if (lenient &&
        (t->dtype < 0 || t->dtype == RELATTN_U8 || t->dtype == RELATTN_I8) &&
        (raw_size = rawDtypeSize(
             (const char *)sqlite3_column_text(fields, 1),
             &s->raw[s->n - 1])) != 0)
      t->dtype = RELATTN_U8; /* its bytes, checked as such below */
    if (t->dtype < 0) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has dtype '%s'; expected F32, "
                               "F16 or BF16", fn, ekey,
                               relattn_echo(edt, sqlite3_column_text(fields, 1), -1));
      goto done;
    }
    ftype = (const char *)sqlite3_column_text(fields, 2);
    if (!ftype || strcmp(ftype, "array") != 0) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has no shape array", fn, ekey);
      goto done;
    }
    ftype = (const char *)sqlite3_column_text(fields, 3);
    if (!ftype || strcmp(ftype, "array") != 0) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has no data_offsets array",
                               fn, ekey);
      goto done;
    }
    sqlite3_reset(fields);
    if ((rc = readInts(ints, value, "$.shape", t->shape, RELATTN_ST_MAX_DIMS,
                       &n, &too_big, &ok)) != SQLITE_OK)
      goto sqlmsg;
    if (!ok) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has a shape that is not an "
                               "array of integers", fn, ekey);
      goto done;
    }
    if (too_big) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has a shape whose size "
                               "overflows", fn, ekey);
      goto done;
    }
    if (n > RELATTN_ST_MAX_DIMS) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has %d dimensions, more than "
                               "%d", fn, ekey, n, RELATTN_ST_MAX_DIMS);
      goto done;
    }
    t->ndim = n;
    if (raw_size) {
      /* a buffer that is no weight: its bytes, a U8 tensor [bytes] */
      size_t bytes = raw_size;
      int d, ok = 1;
      for (d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0 || (uint64_t)t->shape[d] > SIZE_MAX ||
            !relattn_mul_ok(bytes, (size_t)t->shape[d], &bytes))
          ok = 0;
      if (!ok || bytes > (size_t)INT64_MAX) {
        *pzErr = sqlite3_mprintf("%s: tensor '%s' has a shape whose size "
                                 "overflows", fn, ekey);
        goto done;
      }
      t->ndim = 1;
      t->shape[0] = (int64_t)bytes;
    }
    if ((rc = readInts(ints, value, "$.data_offsets", off, 2, &n, &too_big,
                       &ok)) != SQLITE_OK)
      goto sqlmsg;
    if (!ok || n != 2 || too_big) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has data_offsets that are not "
                               "two integers", fn, ekey);
      goto done;
    }
    t->begin = off[0], t->end = off[1];
  }
  if (rc != SQLITE_DONE) goto sqlerr;
  code = SQLITE_OK;
  goto done;
nomem:
  sqlite3_free(*pzErr);
  *pzErr = sqlite3_mprintf("%s: out of memory", fn);
  code = SQLITE_NOMEM;
  goto done;
sqlerr:
  rc = relattn_sql_code(db);
sqlmsg:
  sqlite3_free(*pzErr);
  *pzErr = relattn_sql_errmsg(db, fn, rc);
  code = rc;
done:
  sqlite3_finalize(top);
  sqlite3_finalize(fields);
  sqlite3_finalize(ints);
  return code;
}

int relattn_import_read_file(sqlite3 *db, relattn_import_state *s,
                             const uint8_t *file, size_t size, int shard,
                             const char *what, const char *what_t,
                             int lenient, char **pzErr) {
  char err[512];
  size_t hlen;
  int n0 = s->n, i, rc;
  const uint8_t **base;
  if (relattn_st_header(file, size, what, &hlen, err, sizeof err)) {
    *pzErr = sqlite3_mprintf("%s", err);
    return SQLITE_ERROR;
  }
  if ((rc = importHeader(db, (const char *)file + 8, hlen, s, lenient,
                         pzErr)) != SQLITE_OK)
    return rc;
  /* a header of no tensors leaves s->t NULL: no offset into it */
  if (relattn_st_check(s->t ? s->t + n0 : NULL, s->n - n0, size - 8 - hlen,
                       what_t, err, sizeof err)) {
    *pzErr = sqlite3_mprintf("%s", err);
    return SQLITE_ERROR;
  }
  base = sqlite3_realloc64(s->base, sizeof *base * ((sqlite3_uint64)s->n + 1));
  if (!base) return SQLITE_NOMEM;
  s->base = base;
  if (shard) {
    int *sh = sqlite3_realloc64(s->shard,
                                sizeof *sh * ((sqlite3_uint64)s->n + 1));
    if (!sh) return SQLITE_NOMEM;
    s->shard = sh;
  }
  for (i = n0; i < s->n; i++) {
    s->base[i] = file + 8 + hlen;
    if (shard) s->shard[i] = shard;
  }
  return SQLITE_OK;
}

int relattn_import_is_index(sqlite3_value *v) {
  const unsigned char *p = sqlite3_value_type(v) == SQLITE_BLOB
                               ? sqlite3_value_blob(v)
                               : sqlite3_value_text(v);
  int n = sqlite3_value_bytes(v), i;
  if (!p || n == 0 || memchr(p, 0, (size_t)(n < 8 ? n : 8))) return 0;
  for (i = 0; i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' ||
                        p[i] == '\r');
       i++) {
  }
  return i < n && p[i] == '{';
}

int relattn_import_check_index(sqlite3 *db, const char *index,
                               const relattn_import_state *s, char **pzErr) {
  static const char fn[] = "relattn_import";
  sqlite3_stmt *st = NULL;
  unsigned char *found = NULL;
  char *miss = NULL, *miss_file = NULL, e[RELATTN_ECHO_BUF],
       f[RELATTN_ECHO_BUF];
  int rc, i, code = SQLITE_ERROR;
  st = relattn_prepare(db,
                       "SELECT json_valid(?1), CASE WHEN json_valid(?1) THEN "
                       "json_type(?1, '$.weight_map') END",
                       fn, pzErr);
  if (!st) return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, index, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_ROW) goto sqlerr;
  if (!sqlite3_column_int(st, 0)) {
    *pzErr = sqlite3_mprintf("%s: the safetensors index is not valid JSON", fn);
    goto done;
  }
  if (sqlite3_column_type(st, 1) == SQLITE_NULL ||
      strcmp((const char *)sqlite3_column_text(st, 1), "object") != 0) {
    *pzErr = sqlite3_mprintf("%s: the safetensors index has no weight_map "
                             "object", fn);
    goto done;
  }
  sqlite3_finalize(st);
  found = sqlite3_malloc64((sqlite3_uint64)s->n + 1);
  if (!found) goto nomem;
  memset(found, 0, (size_t)s->n + 1);
  st = relattn_prepare(db,
                       "SELECT key, value, type FROM json_each(?1, "
                       "'$.weight_map')",
                       fn, pzErr);
  if (!st) return sqlite3_free(found), relattn_sql_code(db);
  sqlite3_bind_text(st, 1, index, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(st, 0);
    const char *file = (const char *)sqlite3_column_text(st, 1);
    int at = -1;
    if (!key) key = "";
    if (strcmp((const char *)sqlite3_column_text(st, 2), "text") != 0) {
      *pzErr = sqlite3_mprintf("%s: the safetensors index's weight_map gives "
                               "tensor '%s' no file name", fn,
                               relattn_echo(e, key, -1));
      goto done;
    }
    for (i = 0; i < s->n; i++) {
      if (strcmp(s->t[i].name, key) != 0) continue;
      if (at >= 0) {
        *pzErr = sqlite3_mprintf("%s: tensor '%s' is in shards %d and %d",
                                 fn, relattn_echo(e, key, -1),
                                 s->shard[at], s->shard[i]);
        goto done;
      }
      at = i;
    }
    if (at >= 0) {
      found[at] = 1;
    } else if (!miss) {
      miss = sqlite3_mprintf("%s", key);
      miss_file = sqlite3_mprintf("%s", file);
      if (!miss || !miss_file) goto nomem;
    }
  }
  if (rc != SQLITE_DONE) goto sqlerr;
  if (miss) {
    /* the whole shard, or one tensor of a shard that is there */
    int any = 0;
    sqlite3_finalize(st);
    st = relattn_prepare(db,
                         "SELECT key FROM json_each(?1, '$.weight_map') "
                         "WHERE value = ?2",
                         fn, pzErr);
    if (!st) goto sqlcode;
    sqlite3_bind_text(st, 1, index, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, miss_file, -1, SQLITE_STATIC);
    while (!any && (rc = sqlite3_step(st)) == SQLITE_ROW)
      for (i = 0; i < s->n && !any; i++)
        any = found[i] &&
              strcmp(s->t[i].name, (const char *)sqlite3_column_text(st, 0)) ==
                  0;
    if (!any && rc != SQLITE_DONE) goto sqlerr;
    relattn_echo(e, miss, -1);
    relattn_echo(f, miss_file, -1);
    *pzErr = any ? sqlite3_mprintf("%s: tensor '%s' is missing: the index "
                                   "puts it in '%s', whose shard lacks it",
                                   fn, e, f)
                 : sqlite3_mprintf("%s: shard '%s' of the index is missing "
                                   "(it holds tensor '%s')", fn, f, e);
    goto done;
  }
  for (i = 0; i < s->n; i++)
    if (!found[i]) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' of shard %d is not in the "
                               "index's weight_map", fn,
                               relattn_echo(e, s->t[i].name, -1), s->shard[i]);
      goto done;
    }
  code = SQLITE_OK;
  goto done;
nomem:
  code = SQLITE_NOMEM;
  goto done;
sqlerr:
  rc = relattn_sql_code(db);
  sqlite3_free(*pzErr);
  *pzErr = relattn_sql_errmsg(db, fn, rc);
  code = rc;
  goto done;
sqlcode:
  code = relattn_sql_code(db);
done:
  sqlite3_finalize(st);
  sqlite3_free(found);
  sqlite3_free(miss);
  sqlite3_free(miss_file);
  return code;
}
