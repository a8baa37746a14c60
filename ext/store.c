/*
** store.c: models in the database. The tables (sql/schema.sql), written
** by relattn_store_write from the plan relattn_import checked
** (ext/import.c), and read back, one snapshot per model, into the
** per-connection cache of float32 weights every model function runs on.
**
**   SELECT name, dtype, shape, length(data) FROM relattn_tensor WHERE model = 'tiny';
**   SELECT relattn_weights('tiny', 'ln_f.weight');   -- float32, as computed with
**
** HOW IT WORKS
** A write happens inside one SAVEPOINT: the tables (on first use), the
** model row, its tensors in the config's order, a bumped version and the
** sha256 of the tensor data. Any failure rolls the savepoint back.
**
** The cache: relattn_store_acquire reads (version, sha256, config) of the
** model row on every call (one indexed lookup) and reuses the connection's
** float32 copy when all three match what it loaded. The writers keep them
** current: import sets a new version and sha256, and triggers raise version
** (and clear sha256) on any INSERT, UPDATE or DELETE of a tensor row, from
** any connection, with or without the extension loaded. They raise it by a
** random 32-bit step: this connection may have loaded an edit that was then
** rolled back (to a savepoint, or the whole transaction), and a bump by one
** would give the next edit the same version, and the cache the rolled-back
** weights. (An import may set the next version: it also gives the row a
** new rowid, past the largest with a random gap, so an import made after
** a rolled-back one, even of the same bytes as other dtypes, has a new key.)
** Deleting a model and
** importing it again starts its version at 1 again, so the cache also keys
** on the model row's rowid, which a fresh import picks past the largest
** one plus a random 32-bit gap: the re-imported model is a new row (odds of
** getting the deleted row's rowid back: 2^-32) even when it is later edited
** to the same (version, sha256 NULL) as the cached copy. Cached
** models are reference counted: one that a worker still holds stays valid
** after a newer version replaced it, and is freed on its last release.
** The list is kept in order of use and bounded by relattn_cache_size()
** bytes (the model used last always stays); each load also drops the
** models whose rows are gone or changed, so deleted models do not pile up.
*/
#include "ext.h"
#include "functions.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

/* The tables and triggers: sql/schema.sql, made into a C string at build
** time (the Makefile's schema_sql.h rule), so there is one text. */
static const char schema_sql[] =
#include "schema_sql.h"
    ;

/* ---- the weight cache ---------------------------------------------------- */

/* printf arguments for "%s%w%s" before a table name: "schema". when schema is
** given, nothing for SQLite's own resolution of the bare name. */
#define IN_SCHEMA(schema) \
  (schema) ? "\"" : "", (schema) ? (schema) : "", (schema) ? "\"." : ""

struct relattn_cache_entry {
  relattn_model model;        /* first: release maps the pointer back */
  relattn_cache_entry *next;
  atomic_int refs;            /* 1 while in the cache, + 1 per holder */
  char *schema;               /* the database of the model's tables; NULL:
                              ** wherever SQLite resolves the bare names */
  char *name;
  sqlite3_int64 version;
  sqlite3_int64 rowid;        /* of the model row: new for each fresh import */
  char *sha256;               /* NULL when the row has none */
  char *config;
  char **labels;              /* classifier: n_labels names, one block */
  sqlite3_int64 bytes;        /* of float32 weights (relattn_model_bytes) */
};

static void entryUnref(relattn_cache_entry *e) {
  if (atomic_fetch_sub(&e->refs, 1) != 1) return;
  relattn_model_free(&e->model);
  sqlite3_free(e->schema);
  sqlite3_free(e->name);
  sqlite3_free(e->sha256);
  sqlite3_free(e->config);
  sqlite3_free(e->labels);
  sqlite3_free(e);
}

const char *relattn_store_label(const relattn_model *m, int i) {
  const relattn_cache_entry *e = (const relattn_cache_entry *)m;
  if (!e->labels || i < 0 || i >= m->cfg.n_labels) return NULL;
  return e->labels[i];
}

/* A classifier's labels from its config (checked by relattn_config_decode:
** an array of n strings) into one block: the pointers, then the strings. */
static int labelsLoad(sqlite3 *db, relattn_cache_entry *e, const char *what,
                      char **pzErr) {
  const int n = e->model.cfg.n_labels;
  sqlite3_stmt *st;
  sqlite3_uint64 bytes = sizeof(char *) * (sqlite3_uint64)n;
  char *p = NULL;
  int i = 0, rc;
  if (!RELATTN_HEAD_HAS_LABELS(e->model.cfg.head)) return SQLITE_OK;
  st = relattn_prepare(
      db,
      "SELECT value, sum(length(CAST(value AS BLOB)) + 1) OVER () "
      "FROM json_each(?1, '$.labels') ORDER BY key",
      what, pzErr);
  if (!st) return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, e->config, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW && i < n) {
    const char *v = (const char *)sqlite3_column_text(st, 0);
    int len = sqlite3_column_bytes(st, 0);
    if (!e->labels) {
      e->labels = sqlite3_malloc64(bytes + (sqlite3_uint64)
                                               sqlite3_column_int64(st, 1));
      if (!e->labels) break;
      p = (char *)(e->labels + n);
    }
    memcpy(p, v ? v : "", (size_t)len);
    p[len] = 0;
    e->labels[i++] = p;
    p += len + 1;
  }
  sqlite3_finalize(st);
  if (i == n) return SQLITE_OK;
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
    *pzErr = sqlite3_mprintf("%s: out of memory for its labels", what);
    return SQLITE_NOMEM;
  }
  *pzErr = relattn_sql_errmsg(db, what, rc);
  return rc;
}

/* Takes entry e out of the connection's list and drops the cache's ref. */
static void entryDrop(relattn_conn *conn, relattn_cache_entry *e) {
  relattn_cache_entry **pp;
  for (pp = &conn->cache; *pp; pp = &(*pp)->next)
    if (*pp == e) {
      *pp = e->next;
      break;
    }
  entryUnref(e);
}

void relattn_store_close(relattn_conn *conn) {
  while (conn->cache) entryDrop(conn, conn->cache);
}

void relattn_store_stats(relattn_conn *conn, int *n_models,
                         sqlite3_int64 *bytes) {
  relattn_cache_entry *e;
  *n_models = 0;
  *bytes = 0;
  for (e = conn->cache; e; e = e->next) (*n_models)++, *bytes += e->bytes;
}

/* The list is in order of use, most recent first: keep the first, then
** each next one that still fits relattn_cache_size(). A model a call still
** holds leaves the list but lives until its release. */
void relattn_store_trim(relattn_conn *conn) {
  relattn_cache_entry *e, *next;
  sqlite3_int64 kept;
  if (!conn->cache) return;
  kept = conn->cache->bytes;
  for (e = conn->cache->next; e; e = next) {
    next = e->next;
    if (kept + e->bytes <= conn->cache_size)
      kept += e->bytes;
    else
      entryDrop(conn, e);
  }
}

/* Moves e to the front of the list (most recently used). */
static void entryTouch(relattn_conn *conn, relattn_cache_entry *e) {
  relattn_cache_entry **pp;
  if (conn->cache == e) return;
  for (pp = &conn->cache; *pp; pp = &(*pp)->next)
    if (*pp == e) {
      *pp = e->next;
      break;
    }
  e->next = conn->cache;
  conn->cache = e;
}

void relattn_store_release(relattn_conn *conn, const relattn_model *m) {
  (void)conn;
  if (m) entryUnref((relattn_cache_entry *)(void *)m);
}

static int same_text(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

/* Drops every cached model but keep whose row is gone or changed: a model
** deleted, or replaced, is not used again under that key (nor is one whose
** database was detached). Run after a load (a load reads the model's
** tables anyway; a hit stays one lookup). Best effort: a lookup that fails
** for another reason (interrupted, busy) keeps the entry for the next one. */
static void dropGone(relattn_conn *conn, relattn_cache_entry *keep) {
  relattn_cache_entry *e, *next;
  for (e = conn->cache; e; e = next) {
    sqlite3_stmt *st = NULL;
    char *sql;
    int rc, same = 0;
    next = e->next;
    if (e == keep) continue;
    sql = sqlite3_mprintf("SELECT version, sha256, config, rowid FROM "
                          "%s%w%srelattn_model WHERE name = ?1",
                          IN_SCHEMA(e->schema));
    if (!sql) return;
    rc = sqlite3_prepare_v2(relattn_read_db(conn, e->schema, "relattn_model"),
                            sql, -1, &st, NULL);
    sqlite3_free(sql);
    if (rc == SQLITE_OK) {
      sqlite3_bind_text(st, 1, e->name, -1, SQLITE_STATIC);
      rc = sqlite3_step(st);
      same = rc == SQLITE_ROW && sqlite3_column_int64(st, 0) == e->version &&
             sqlite3_column_int64(st, 3) == e->rowid &&
             same_text((const char *)sqlite3_column_text(st, 1), e->sha256) &&
             same_text((const char *)sqlite3_column_text(st, 2), e->config);
    }
    sqlite3_finalize(st);
    /* SQLITE_ERROR from prepare: no such table or database any more */
    if (rc != SQLITE_ROW && rc != SQLITE_DONE && rc != SQLITE_ERROR) return;
    if (!same) entryDrop(conn, e);
  }
}

/* Reads the tensors of model `name` into e->model, checking each. */
static int loadTensors(sqlite3 *db, relattn_cache_entry *e, const char *what,
                       char **pzErr) {
  relattn_model *m = &e->model;
  const relattn_config *c = &m->cfg;
  int n = relattn_model_n_tensors(c), i, rc = SQLITE_OK, seen_count = 0, kind;
  unsigned char *seen;
  sqlite3_stmt *st;
  relattn_tensor_spec spec;
  char want[96], *sql;

  seen = sqlite3_malloc64((sqlite3_uint64)n);
  if (!seen) return SQLITE_NOMEM;
  memset(seen, 0, (size_t)n);
  sql = sqlite3_mprintf("SELECT name, dtype, CASE WHEN json_valid(shape) "
                        "THEN json(shape) END, data FROM %s%w%srelattn_tensor "
                        "WHERE model = ?1", IN_SCHEMA(e->schema));
  st = sql ? relattn_prepare(db, sql, what, pzErr) : NULL;
  sqlite3_free(sql);
  if (!st) {
    sqlite3_free(seen);
    return SQLITE_ERROR;
  }
  sqlite3_bind_text(st, 1, e->name, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    const char *dtype_s = (const char *)sqlite3_column_text(st, 1);
    const char *shape = (const char *)sqlite3_column_text(st, 2);
    const void *data = sqlite3_column_blob(st, 3);
    sqlite3_uint64 bytes = (sqlite3_uint64)sqlite3_column_bytes(st, 3);
    int dtype = relattn_dtype_parse(dtype_s);
    char ename[RELATTN_ECHO_BUF], edtype[RELATTN_ECHO_BUF];
    size_t bad;
    if (!name) name = "";
    relattn_echo(ename, name, -1); /* input bytes, for messages */
    relattn_echo(edtype, dtype_s, -1);
    if (relattn_is_tokfile(name)) { /* the tokenizer's file, parsed once */
      *pzErr = relattn_tokfile_parse(c, name, dtype_s, shape, data,
                                     (size_t)bytes, what, &m->tok);
      if (*pzErr) goto fail;
      continue;
    }
    i = relattn_model_index(c, name);
    if (i < 0) {
      *pzErr = sqlite3_mprintf("%s: unexpected tensor '%s' (not part of "
                               "the config)", what, ename);
      goto fail;
    }
    relattn_model_spec(c, i, &spec);
    relattn_shape_json(spec.shape, spec.ndim, want, sizeof want);
    kind = relattn_model_slot_kind(c, i);
    if (!relattn_slot_dtype_ok(kind, dtype)) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has dtype '%s'; expected "
                               "%s", what, ename, edtype,
                               relattn_slot_dtypes(kind));
      goto fail;
    }
    if (!shape || strcmp(shape, want) != 0) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has shape %s; the config "
                               "needs %s", what, ename,
                               shape ? shape : "(not JSON)", want);
      goto fail;
    }
    if (bytes != (sqlite3_uint64)spec.numel * relattn_dtype_size(dtype)) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has %llu bytes of data, but "
                               "dtype %s and shape %s need %llu", what, ename,
                               bytes, edtype, want,
                               (sqlite3_uint64)spec.numel *
                                   relattn_dtype_size(dtype));
      goto fail;
    }
    if ((bad = relattn_find_nonfinite(data, dtype, spec.numel)) < spec.numel) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has %s at element %llu", what,
                               ename, dtype == RELATTN_I8 ? "-128" : "NaN or Inf",
                               (sqlite3_uint64)bad);
      goto fail;
    }
    if (!seen[i]) seen_count++;
    seen[i] = 1;
    if (kind == RELATTN_SLOT_Q8 || kind == RELATTN_SLOT_BF16 ||
        kind == RELATTN_SLOT_Q8F || kind == RELATTN_SLOT_Q8R)
      /* as stored: packed (or read into floats) once all are read, or
      ** kept so (Q8R) */
      memcpy(relattn_model_slot(m, i), data, (size_t)bytes);
    else if (spec.numel)
      relattn_to_f32(relattn_model_slot(m, i), data, dtype, spec.numel);
  }
  if (rc != SQLITE_DONE) {
    *pzErr = sqlite3_mprintf("%s: %s", what, sqlite3_errmsg(db));
    goto fail;
  }
  rc = SQLITE_OK;
  if (seen_count < n) {
    for (i = 0; i < n && seen[i]; i++) {
    }
    *pzErr = relattn_missing_tensor_msg(c, i, what);
    rc = SQLITE_ERROR;
  } else if ((*pzErr = relattn_tokfile_finish(m, what)) != NULL ||
             (*pzErr = relattn_tokfile_special(db, e->config, c, m->tok,
                                               what)) != NULL) {
    rc = SQLITE_ERROR;
  }
  sqlite3_finalize(st);
  sqlite3_free(seen);
  return rc;
fail:
  sqlite3_finalize(st);
  sqlite3_free(seen);
  return SQLITE_ERROR;
}

/* Before anything sized by the config is allocated: the model must have at
** least as many rows as the config needs tensors (n_layers alone may ask for
** hundreds of millions), naming the first missing one as loadTensors would,
** and its float32 weights must fit relattn_max_memory(). */
static int checkSize(relattn_conn *conn, sqlite3 *db, relattn_cache_entry *e,
                     const char *what, char **pzErr) {
  const relattn_config *c = &e->model.cfg;
  int n = relattn_model_n_tensors(c), have = 0, i, k;
  char **names;
  sqlite3_stmt *st;
  size_t bytes;
  char err[256], *sql;

  sql = sqlite3_mprintf("SELECT name FROM %s%w%srelattn_tensor WHERE "
                        "model = ?1", IN_SCHEMA(e->schema));
  if (!sql) return SQLITE_NOMEM;
  st = relattn_prepare(db, sql, what, pzErr);
  sqlite3_free(sql);
  if (!st) return SQLITE_ERROR;
  sqlite3_bind_text(st, 1, e->name, -1, SQLITE_STATIC);
  while (sqlite3_step(st) == SQLITE_ROW) have++;
  if (have < n) {
    /* fewer rows than tensors: name the first missing one */
    names = sqlite3_malloc64(sizeof *names * ((sqlite3_uint64)have + 1));
    if (!names) {
      sqlite3_finalize(st);
      return SQLITE_NOMEM;
    }
    memset(names, 0, sizeof *names * ((size_t)have + 1));
    sqlite3_reset(st);
    for (i = 0; i < have && sqlite3_step(st) == SQLITE_ROW; i++)
      names[i] = sqlite3_mprintf("%s", sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    i = relattn_missing_tensor(c, (const char *const *)names, have);
    for (k = 0; k < have; k++) sqlite3_free(names[k]);
    sqlite3_free(names);
    if (i == -2) return SQLITE_NOMEM;
    *pzErr = relattn_missing_tensor_msg(c, i, what);
    return SQLITE_ERROR;
  }
  sqlite3_finalize(st);
  if (relattn_model_bytes(c, &bytes, what, err, sizeof err) != RELATTN_OK) {
    *pzErr = sqlite3_mprintf("%s", err);
    return SQLITE_ERROR;
  }
  /* and the tables built from the weights when the model is loaded */
  if (!relattn_add_ok(bytes, relattn_model_prepared_bytes(c), &bytes) ||
      bytes > (size_t)INT64_MAX)
    bytes = (size_t)INT64_MAX;
  e->bytes = (sqlite3_int64)bytes;
  *pzErr = relattn_memory_check(conn, what, bytes);
  return *pzErr ? SQLITE_TOOBIG : SQLITE_OK;
}

const relattn_model *relattn_store_acquire(relattn_conn *conn,
                                           const char *name, const char *fn,
                                           char **pzErr) {
  return relattn_store_acquire_in(conn, NULL, name, fn, pzErr);
}

const relattn_model *relattn_model_arg(sqlite3_context *ctx, sqlite3_value *v,
                                       const char *fn) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  const relattn_model *m;
  char *zErr = NULL;
  if (sqlite3_value_type(v) != SQLITE_TEXT) {
    relattn_result_error(ctx, SQLITE_ERROR, relattn_bad_model_msg(fn));
    return NULL;
  }
  m = relattn_store_acquire(conn, (const char *)sqlite3_value_text(v), fn,
                            &zErr);
  if (!m) relattn_result_error(ctx, SQLITE_ERROR, zErr);
  return m;
}

/* NULL (SQLite's resolution) only matches NULL; names match as SQLite's do. */
static int sameSchema(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return sqlite3_stricmp(a, b) == 0;
}

const relattn_model *relattn_store_acquire_in(relattn_conn *conn,
                                              const char *schema,
                                              const char *name, const char *fn,
                                              char **pzErr) {
  /* (conn->side when this is the connection's first read of main) */
  sqlite3 *db = relattn_read_db(conn, schema, "relattn_model");
  sqlite3_stmt *st = NULL;
  relattn_cache_entry *e = NULL, *old = NULL;
  char *what = NULL, err[256], *sql;
  sqlite3_int64 version, rowid;
  const char *sha, *config;
  int rc;

  *pzErr = NULL;
  if (!name) {
    *pzErr = relattn_bad_model_msg(fn);
    return NULL;
  }
  sql = sqlite3_mprintf("SELECT version, sha256, config, rowid FROM "
                        "%s%w%srelattn_model WHERE name = ?1",
                        IN_SCHEMA(schema));
  if (!sql) goto nomem;
  rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK && db != conn->db) {
    /* not in main: the bare name finds an attached database's tables */
    db = conn->db;
    rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  }
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    /* no tables yet: nothing was ever imported here */
    if (strstr(sqlite3_errmsg(db), "no such table"))
      *pzErr = relattn_no_model_msg(fn, name);
    else
      *pzErr = sqlite3_mprintf("%s: %s", fn, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return NULL;
  }
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  for (old = conn->cache;
       old && (strcmp(old->name, name) != 0 || !sameSchema(old->schema, schema));
       old = old->next) {
  }
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    if (rc == SQLITE_DONE) {
      *pzErr = relattn_no_model_msg(fn, name);
      if (old) entryDrop(conn, old); /* deleted: free its memory now */
    } else {
      *pzErr = sqlite3_mprintf("%s: %s", fn, sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return NULL;
  }
  version = sqlite3_column_int64(st, 0);
  sha = (const char *)sqlite3_column_text(st, 1);
  config = (const char *)sqlite3_column_text(st, 2);
  if (!config) config = "";
  rowid = sqlite3_column_int64(st, 3);
  if (old && old->version == version && old->rowid == rowid &&
      same_text(old->sha256, sha) &&
      strcmp(old->config, config) == 0) {
    sqlite3_finalize(st);
    atomic_fetch_add(&old->refs, 1);
    entryTouch(conn, old);
    return &old->model;
  }

  /* (re)load */
  e = sqlite3_malloc64(sizeof *e);
  if (!e) goto nomem;
  memset(e, 0, sizeof *e);
  atomic_init(&e->refs, 1);
  e->version = version;
  e->rowid = rowid;
  e->name = sqlite3_mprintf("%s", name);
  e->schema = schema ? sqlite3_mprintf("%s", schema) : NULL;
  e->config = sqlite3_mprintf("%s", config);
  e->sha256 = sha ? sqlite3_mprintf("%s", sha) : NULL;
  /* st stays open (on its row) until the tensors are read: while one
  ** statement of the connection is active, its read transaction holds, so
  ** the statements below read the same snapshot as the row. Without it,
  ** another process's import committed in between gave one model's config
  ** with the other's tensors (or "tensor ... is missing"). */
  if (!e->name || (schema && !e->schema) || !e->config || (sha && !e->sha256))
    goto nomem;
  what = sqlite3_mprintf("%s: model '%s': config", fn, name);
  if (!what) goto nomem;
  if (relattn_config_decode(db, e->config, &e->model.cfg, what, pzErr) !=
      SQLITE_OK)
    goto fail;
  what[strlen(what) - strlen(": config")] = 0;
  if (checkSize(conn, db, e, what, pzErr) != SQLITE_OK) goto fail;
  if (labelsLoad(db, e, what, pzErr) != SQLITE_OK) goto fail;
  rc = relattn_model_init(&e->model, &e->model.cfg, what, err, sizeof err);
  if (rc != RELATTN_OK) {
    *pzErr = sqlite3_mprintf("%s", err);
    goto fail;
  }
  if (loadTensors(db, e, what, pzErr) != SQLITE_OK) goto fail;
  rc = relattn_model_prepare(&e->model, what, err, sizeof err);
  if (rc != RELATTN_OK) {
    *pzErr = sqlite3_mprintf("%s", err);
    goto fail;
  }
  sqlite3_finalize(st);
  sqlite3_free(what);
  if (old) entryDrop(conn, old);
  e->next = conn->cache;
  conn->cache = e;
  atomic_fetch_add(&e->refs, 1);
  dropGone(conn, e);
  relattn_store_trim(conn);
  return &e->model;

nomem:
  sqlite3_free(*pzErr);
  *pzErr = sqlite3_mprintf("%s: out of memory loading model '%s'", fn, name);
fail:
  sqlite3_finalize(st);
  sqlite3_free(what);
  if (e) entryUnref(e);
  return NULL;
}

/* Moves the models `from` loaded (a scan's CREATE loads through a connection
** of its own, ext/scan.c) into conn's cache under `schema` (NULL: the bare
** names), in place of an entry under that key. As for any entry, its row
** decides at each use whether it is still the model. */
void relattn_store_adopt(relattn_conn *conn, relattn_conn *from,
                         const char *schema) {
  while (from->cache) {
    relattn_cache_entry *e = from->cache, *old;
    char *key = schema ? sqlite3_mprintf("%s", schema) : NULL;
    from->cache = e->next;
    if (schema && !key) { /* out of memory: it is only a cache */
      entryUnref(e);
      continue;
    }
    sqlite3_free(e->schema);
    e->schema = key;
    for (old = conn->cache;
         old && (strcmp(old->name, e->name) != 0 || !sameSchema(old->schema, key));
         old = old->next) {
    }
    if (old) entryDrop(conn, old);
    e->next = conn->cache;
    conn->cache = e;
  }
  relattn_store_trim(conn);
}

/* ---- writing a model: relattn_store_write ------------------------------- */

/* Writes plan p inside the savepoint the caller holds. */
static int writeRows(sqlite3 *db, const char *model, const relattn_plan *p,
                     const char *sha256, char **pzErr) {
  const char *fn = p->fn ? p->fn : "relattn_import";
  const relattn_config *cfg = p->cfg;
  sqlite3_stmt *st = NULL;
  sqlite3_int64 old_version = 0;
  int exists = 0, i, n = relattn_model_n_tensors(cfg), rc;
  char *msg = NULL;
  relattn_tensor_spec spec;
  char shape[96];

  if (sqlite3_exec(db, schema_sql, 0, 0, &msg) != SQLITE_OK) goto execerr;
  if (!(st = relattn_prepare(
            db, "SELECT version FROM relattn_model WHERE name = ?1", fn,
            pzErr)))
    return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
  if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    exists = 1;
    old_version = sqlite3_column_int64(st, 0);
  } else if (rc != SQLITE_DONE)
    goto sqlerr;
  sqlite3_finalize(st);
  st = NULL;
  if (exists && p->no_replace) {
    char e[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf("%s: new_model '%s' already exists", fn,
                             relattn_echo(e, model, -1));
    return SQLITE_ERROR;
  }

  if (!(st = relattn_prepare(
            db,
            /* Each import gives the row a new rowid, past the
            ** largest with a random gap: a model deleted and
            ** imported again does not get its old rowid back, nor
            ** does an import made after one that was rolled back
            ** (its version and sha256 may repeat), so the caches
            ** tell them apart (see the top). */
            exists ? "UPDATE relattn_model SET config = ?2, rowid "
                     "= (SELECT max(rowid) FROM relattn_model) + 1 "
                     "+ (random() & 4294967295) WHERE name = ?1"
                   : "INSERT INTO relattn_model(rowid, name, "
                     "config) VALUES ((SELECT coalesce(max(rowid), "
                     "0) FROM relattn_model) + 1 + (random() & "
                     "4294967295), ?1, ?2)",
            fn, pzErr)))
    return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, p->config, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_DONE) goto sqlerr;
  sqlite3_finalize(st);
  st = NULL;

  /* also rows left by a model deleted while foreign keys were off */
  if (!(st = relattn_prepare(db, "DELETE FROM relattn_tensor WHERE model = ?1",
                             fn, pzErr)))
    return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_DONE) goto sqlerr;
  sqlite3_finalize(st);

  if (!(st = relattn_prepare(
            db,
            "INSERT INTO relattn_tensor(model, name, dtype, shape, "
            "data) VALUES (?1, ?2, ?3, ?4, ?5)",
            fn, pzErr)))
    return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
  for (i = 0; i < n; i++) {
    const relattn_plan_tensor *t = &p->t[i];
    relattn_model_spec(cfg, i, &spec);
    relattn_shape_json(spec.shape, spec.ndim, shape, sizeof shape);
    sqlite3_bind_text(st, 2, spec.name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, relattn_dtype_name(t->dtype), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, shape, -1, SQLITE_STATIC);
    /* never NULL (that would store NULL, not an empty BLOB) */
    sqlite3_bind_blob64(st, 5, t->data, t->bytes, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) goto sqlerr;
    sqlite3_reset(st);
  }
  if (p->tok) { /* the tokenizer's file, after the weights */
    char name[32];
    sqlite3_snprintf(sizeof name, name, "tokenizer.%s",
                     relattn_tokenizer_kind_name(cfg->tok_type));
    sqlite3_snprintf(sizeof shape, shape, "[%llu]", (sqlite3_uint64)p->tok_n);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, "U8", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, shape, -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob64(st, 5, p->tok, p->tok_n, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) goto sqlerr;
  }
  sqlite3_finalize(st);

  /* last, so the triggers' bumps above do not count */
  if (!(st = relattn_prepare(
            db,
            "UPDATE relattn_model SET version = ?2, sha256 = ?3 "
            "WHERE name = ?1",
            fn, pzErr)))
    return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, old_version + 1);
  sqlite3_bind_text(st, 3, sha256, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_DONE) goto sqlerr;
  sqlite3_finalize(st);
  return SQLITE_OK;

execerr:
  rc = relattn_sql_code(db);
  *pzErr = rc == SQLITE_INTERRUPT || !msg ? relattn_sql_errmsg(db, fn, rc)
                                          : sqlite3_mprintf("%s: %s", fn, msg);
  sqlite3_free(msg);
  return rc;
sqlerr:
  rc = relattn_sql_code(db);
  *pzErr = relattn_sql_errmsg(db, fn, rc);
  sqlite3_finalize(st);
  return rc;
}

/* The statements that undo a failed write, prepared before it starts:
** after sqlite3_interrupt no statement can be prepared, and none stepped,
** until the statement that called us ends. */
typedef struct import_undo {
  sqlite3_stmt *rollback, *release;
  sqlite3_stmt *guard; /* the schema's first CREATE TABLE IF NOT EXISTS */
} import_undo;

static int undoPrepare(sqlite3 *db, import_undo *u, const char *fn,
                       char **pzErr) {
  int rc;
  u->rollback = relattn_prepare(db, "ROLLBACK TO relattn_import", fn, pzErr);
  if (u->rollback)
    u->release = relattn_prepare(db, "RELEASE relattn_import", fn, pzErr);
  if (!u->release) return relattn_sql_code(db);
  /* only the first statement of the text is prepared */
  rc = sqlite3_prepare_v2(db, schema_sql, -1, &u->guard, NULL);
  if (rc != SQLITE_OK) {
    sqlite3_free(*pzErr);
    *pzErr = relattn_sql_errmsg(db, fn, rc);
  }
  return rc;
}

/* Rolls the savepoint back. When interrupted, ROLLBACK TO fails at once
** and would leave the savepoint open (a transaction the caller has not
** asked for, holding half an import): stepping a statement that writes
** makes SQLite roll the whole transaction back, as it does when it
** interrupts any write (see sqlite3_interrupt), and the guard, stepped
** while interrupted, stops before doing anything else. */
static void undoRun(import_undo *u) {
  int rc = sqlite3_step(u->rollback);
  sqlite3_reset(u->rollback);
  if (rc == SQLITE_DONE) {
    rc = sqlite3_step(u->release);
    sqlite3_reset(u->release);
  }
  if (rc == SQLITE_INTERRUPT) {
    sqlite3_step(u->guard);
    sqlite3_reset(u->guard);
  }
}

static void undoFree(import_undo *u) {
  sqlite3_finalize(u->rollback);
  sqlite3_finalize(u->release);
  sqlite3_finalize(u->guard);
}

int relattn_store_write(sqlite3 *db, const char *model, const relattn_plan *p,
                        char **pzErr) {
  const char *fn = p->fn ? p->fn : "relattn_import";
  int i, rc, n = relattn_model_n_tensors(p->cfg);
  relattn_sha256 h;
  char sha[65];
  import_undo undo;

  /* sha256 of the tensor data, in the stored (and exported) order */
  relattn_sha256_init(&h);
  for (i = 0; i < n; i++) {
    if (relattn_interrupted(db)) {
      *pzErr = relattn_sql_errmsg(db, fn, SQLITE_INTERRUPT);
      return SQLITE_INTERRUPT;
    }
    relattn_sha256_update(&h, p->t[i].data, (size_t)p->t[i].bytes);
  }
  if (p->tok) relattn_sha256_update(&h, p->tok, p->tok_n);
  relattn_sha256_hex(&h, sha);

  /* write, all or nothing */
  memset(&undo, 0, sizeof undo);
  if ((rc = undoPrepare(db, &undo, fn, pzErr)) != SQLITE_OK) goto done;
  if ((rc = sqlite3_exec(db, "SAVEPOINT relattn_import", 0, 0, 0)) !=
      SQLITE_OK) {
    *pzErr = relattn_sql_errmsg(db, fn, rc);
    goto done;
  }
  rc = writeRows(db, model, p, sha, pzErr);
  if (rc != SQLITE_OK) {
    undoRun(&undo); /* rc: SQLITE_BUSY, SQLITE_READONLY let callers retry */
    goto done;
  }
  rc = sqlite3_step(undo.release);
  sqlite3_reset(undo.release);
  if (rc != SQLITE_DONE) {
    rc = relattn_sql_code(db);
    *pzErr = relattn_sql_errmsg(db, fn, rc);
    undoRun(&undo);
    goto done;
  }
  rc = SQLITE_OK;
done:
  undoFree(&undo);
  return rc;
}

/* ---- relattn_weights(model, tensor) -------------------------------------- */

/* The float32 weights of one tensor as the model computes with them (from
** the connection's cache, F16 and BF16 converted): for inspection. */
void relattn_weights_func(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv) {
  static const char fn[] = "relattn_weights";
  relattn_conn *conn = sqlite3_user_data(ctx);
  const relattn_model *m;
  relattn_tensor_spec spec;
  const char *name;
  int i;
  (void)argc;
  if (!(m = relattn_model_arg(ctx, argv[0], fn))) return;
  if (sqlite3_value_type(argv[1]) != SQLITE_TEXT) {
    relattn_store_release(conn, m);
    relattn_result_errorf(ctx, "%s: tensor must be a tensor name (TEXT)", fn);
    return;
  }
  name = (const char *)sqlite3_value_text(argv[1]);
  i = relattn_model_index(&m->cfg, name);
  if (i < 0) {
    relattn_result_errorf(ctx, "%s: model '%s' has no tensor '%s'", fn,
                          sqlite3_value_text(argv[0]), name);
  } else {
    int out, in;
    float *rows;
    relattn_model_spec(&m->cfg, i, &spec);
    /* the cache is ours (const for its readers) */
    rows = relattn_model_slot((relattn_model *)m, i);
    if (relattn_model_slot_kind(&m->cfg, i) == RELATTN_SLOT_Q8) {
      /* an int8 weight: q s, the floats its products stand for */
      const relattn_q8w *qw = relattn_model_slot_q8(m, i);
      float *f = sqlite3_malloc64((sqlite3_uint64)spec.numel * 4 + 1);
      if (!f) {
        sqlite3_result_error_nomem(ctx);
      } else {
        relattn_q8w_dequantize(f, qw);
        sqlite3_result_blob64(ctx, f, (sqlite3_uint64)spec.numel * 4,
                              sqlite3_free);
      }
    } else if (relattn_model_slot_kind(&m->cfg, i) == RELATTN_SLOT_BF16) {
      float *f = sqlite3_malloc64((sqlite3_uint64)spec.numel * 4 + 1);
      if (!f) {
        sqlite3_result_error_nomem(ctx);
      } else {
        relattn_bf16w_to_f32(f, (const relattn_bf16w *)(const void *)rows);
        sqlite3_result_blob64(ctx, f, (sqlite3_uint64)spec.numel * 4,
                              sqlite3_free);
      }
    } else if (relattn_model_slot_kind(&m->cfg, i) == RELATTN_SLOT_Q8R) {
      /* an int8 table kept as stored (its scales the next slot): q s */
      float *f = sqlite3_malloc64((sqlite3_uint64)spec.numel * 4 + 1);
      if (!f) {
        sqlite3_result_error_nomem(ctx);
      } else {
        relattn_q8r_to_f32(f, (const int8_t *)(const void *)rows,
                           relattn_model_slot((relattn_model *)m, i + 1),
                           (size_t)spec.shape[0], (size_t)spec.shape[1]);
        sqlite3_result_blob64(ctx, f, (sqlite3_uint64)spec.numel * 4,
                              sqlite3_free);
      }
    } else if (!relattn_model_slot_packed(m, i, &out, &in)) {
      sqlite3_result_blob64(ctx, rows, (sqlite3_uint64)spec.numel * 4,
                            SQLITE_TRANSIENT);
    } else {
      /* a linear weight the forward pass keeps in panel order: as stored */
      float *stored = sqlite3_malloc64((sqlite3_uint64)spec.numel * 4 + 1);
      if (!stored) {
        sqlite3_result_error_nomem(ctx);
      } else {
        relattn_unpack(stored, rows, out, in);
        sqlite3_result_blob64(ctx, stored, (sqlite3_uint64)spec.numel * 4,
                              sqlite3_free);
      }
    }
  }
  relattn_store_release(conn, m);
}
