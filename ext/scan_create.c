/*
** scan_create.c: CREATE VIRTUAL TABLE ... USING relattn_scan(...): the
** arguments parsed and everything checked before the table exists (the
** source and its columns, the model, loaded once), and the look-ups of
** where the source and the model live that each query makes again. The
** scan itself runs in ext/scan.c.
**
**   CREATE VIRTUAL TABLE temp.job
**     USING relattn_scan(model='tiny', source='docs', tokens='body' [, id='doc_id']);
**   -- relattn_scan: source 'docs' is not a table or view in temp or main
*/
#include "ext.h"
#include "functions.h"
#include "scan.h"
#include "generate.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

/* ---- arguments ----------------------------------------------------------- */

/* "key = value" with value bare, 'quoted' or "quoted". Returns 0 when it is
** not of that form. *key and *val are sqlite3_malloc'd. */
static int scanParseArg(const char *arg, char **key, char **val) {
  const char *eq = strchr(arg, '=');
  const char *k0 = arg, *k1, *v0, *v1;
  *key = *val = NULL;
  if (!eq) return 0;
  while (*k0 == ' ' || *k0 == '\t' || *k0 == '\n') k0++;
  k1 = eq;
  while (k1 > k0 && (k1[-1] == ' ' || k1[-1] == '\t' || k1[-1] == '\n')) k1--;
  v0 = eq + 1;
  while (*v0 == ' ' || *v0 == '\t' || *v0 == '\n') v0++;
  v1 = v0 + strlen(v0);
  while (v1 > v0 && (v1[-1] == ' ' || v1[-1] == '\t' || v1[-1] == '\n')) v1--;
  if (k1 == k0 || v1 == v0) return 0;
  *key = sqlite3_mprintf("%.*s", (int)(k1 - k0), k0);
  if ((*v0 == '\'' || *v0 == '"') && v1 - v0 >= 2 && v1[-1] == *v0) {
    /* Dequote: a doubled quote inside stands for one. */
    char q = *v0, *out;
    const char *p;
    *val = sqlite3_malloc64((sqlite3_uint64)(v1 - v0));
    if (*val) {
      out = *val;
      for (p = v0 + 1; p < v1 - 1; p++) {
        if (*p == q && p + 1 < v1 - 1 && p[1] == q) p++;
        *out++ = *p;
      }
      *out = 0;
    }
  } else {
    *val = sqlite3_mprintf("%.*s", (int)(v1 - v0), v0);
  }
  return *key && *val;
}

/* The database that holds the scan's table `name` (its source, or the model
** tables): the scan's own, as FTS5 reads its content= table in the schema
** of the FTS5 table. A scan in temp (the connection's own, as in
** CREATE VIRTUAL TABLE temp.job ...) reads temp when the name is there, else
** main. Never another attached database: a scan stored in a database reads
** that database alone, and never switches to a temp table of the same name
** made later. */
const char *relattn_scan_schema_of(sqlite3 *db, const scan_vtab *vt,
                                          const char *name) {
  if (sqlite3_stricmp(vt->schema, "temp") != 0) return vt->schema;
  return relattn_in_temp(db, name) ? "temp" : "main";
}

/* The model tables' database for relattn_store_acquire_in:
** relattn_scan_schema_of, or NULL when the bare names resolve there anyway
** (temp, main, then attached databases in order), so the scan and the
** scalar functions share one cached copy of the model. Temp and main are
** told apart by temp's catalogue alone: a query runs this, and a first read
** of main here must not happen on the connection (relattn_read_db). */
const char *relattn_scan_model_schema(sqlite3 *db,
                                             const scan_vtab *vt) {
  const char *schema = relattn_scan_schema_of(db, vt, "relattn_model");
  sqlite3_stmt *st = NULL;
  int same = 0;
  if (sqlite3_stricmp(schema, "temp") == 0) return NULL;
  if (sqlite3_stricmp(schema, "main") == 0)
    return relattn_in_temp(db, "relattn_model") ? schema : NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT t.schema FROM pragma_table_list(?1) t "
                         "JOIN pragma_database_list d ON d.name = t.schema "
                         "ORDER BY d.seq = 1 DESC, d.seq LIMIT 1",
                         -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, "relattn_model", -1, SQLITE_STATIC);
    same = sqlite3_step(st) == SQLITE_ROW &&
           sqlite3_stricmp((const char *)sqlite3_column_text(st, 0), schema) ==
               0;
  }
  sqlite3_finalize(st);
  return same ? NULL : schema;
}

/* Where the scan looks, for messages: "main", or "temp or main". */
static const char *scanWhere(const scan_vtab *vt) {
  return sqlite3_stricmp(vt->schema, "temp") == 0 ? "temp or main"
                                                  : vt->schema;
}

/* How much of the source scanCheckSource may look at (see "the checks at
** CREATE" below): everything; on a side connection, all but whether the
** query compiles (a view may call functions only this connection has);
** only the catalogue and a table's own columns (no view compiled: that
** could meet another database's changed schema). */
enum { CHECK_FULL, CHECK_SIDE, CHECK_NARROW };

/* Checks that source is a table or view in `schema` with the named columns.
** Reads the schema's catalogue and PRAGMA table_xinfo, which touch that
** database alone (a table-valued pragma_table_xinfo would also check main's
** schema: SQLite opens main for every eponymous virtual table). What cannot
** be looked at here is checked by xFilter, at the first query. */
static int scanCheckSource(sqlite3 *db, scan_vtab *vt, const char *schema,
                           int mode, char **pzErr) {
  sqlite3_stmt *st = NULL;
  int found = 0, has_tokens = 0, has_id = 0, has_text_b = 0, is_view = 0, rc;
  char *sql;
  sql = sqlite3_mprintf("SELECT type FROM \"%w\".sqlite_master WHERE name = ?1 "
                        "COLLATE NOCASE AND type IN ('table', 'view')",
                        schema);
  if (!sql) return SQLITE_NOMEM;
  rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc == SQLITE_OK) {
    sqlite3_bind_text(st, 1, vt->source, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
      found = 1;
      is_view = sqlite3_stricmp((const char *)sqlite3_column_text(st, 0),
                                "view") == 0;
      rc = SQLITE_DONE;
    }
  }
  sqlite3_finalize(st);
  st = NULL;
  if (rc != SQLITE_DONE) {
    if (mode == CHECK_SIDE) return SQLITE_OK;
    *pzErr = sqlite3_mprintf("relattn_scan: cannot inspect source '%s': %s",
                             vt->source, sqlite3_errmsg(db));
    return SQLITE_ERROR;
  }
  if (!found) {
    *pzErr = sqlite3_mprintf("relattn_scan: source '%s' is not a table or view "
                             "in %s", vt->source, scanWhere(vt));
    return SQLITE_ERROR;
  }
  /* A view's rowid is NULL: it must name its id column. */
  if (!vt->id && is_view) {
    *pzErr = sqlite3_mprintf("relattn_scan: source '%s' is a view: name "
                             "its INTEGER id column with id=",
                             vt->source);
    return SQLITE_ERROR;
  }
  if (is_view && mode == CHECK_NARROW) return SQLITE_OK;
  sql = sqlite3_mprintf("PRAGMA \"%w\".table_xinfo(\"%w\")", schema,
                        vt->source);
  if (!sql) return SQLITE_NOMEM;
  rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 1);
    const char *type = (const char *)sqlite3_column_text(st, 2);
    rc = SQLITE_OK;
    if (!name) continue;
    if (sqlite3_stricmp(name, vt->tokens) == 0) has_tokens = 1;
    if (vt->text_b && sqlite3_stricmp(name, vt->text_b) == 0) has_text_b = 1;
    if (vt->id && sqlite3_stricmp(name, vt->id) == 0) {
      has_id = 1;
      /* A declared type must give INTEGER affinity; views may have none. */
      if (type && *type && sqlite3_strlike("%INT%", type, 0) != 0) {
        *pzErr = sqlite3_mprintf(
            "relattn_scan: id column '%s' of '%s' is %s, not INTEGER", vt->id,
            vt->source, type);
        sqlite3_finalize(st);
        return SQLITE_ERROR;
      }
    }
  }
  if (rc != SQLITE_DONE) {
    /* A view that does not compile on a side connection (a function it
    ** lacks, say) is not a verdict on the source. */
    if (mode == CHECK_SIDE) {
      sqlite3_finalize(st);
      return SQLITE_OK;
    }
    *pzErr = sqlite3_mprintf("relattn_scan: cannot inspect source '%s': %s",
                             vt->source, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return SQLITE_ERROR;
  }
  sqlite3_finalize(st);
  if (!has_tokens) {
    *pzErr = sqlite3_mprintf("relattn_scan: source '%s' has no column '%s' "
                             "(tokens=)", vt->source, vt->tokens);
    return SQLITE_ERROR;
  }
  if (vt->id && !has_id) {
    *pzErr = sqlite3_mprintf("relattn_scan: source '%s' has no column '%s' "
                             "(id=)", vt->source, vt->id);
    return SQLITE_ERROR;
  }
  if (vt->text_b && !has_text_b) {
    *pzErr = sqlite3_mprintf("relattn_scan: source '%s' has no column '%s' "
                             "(text_b=)", vt->source, vt->text_b);
    return SQLITE_ERROR;
  }
  if (mode != CHECK_FULL) return SQLITE_OK;
  /* The query xFilter runs must prepare. */
  sql = sqlite3_mprintf("SELECT \"%w\", \"%w\"%s%w%s FROM \"%w\".\"%w\"",
                        vt->id ? vt->id : "rowid", vt->tokens,
                        vt->text_b ? ", \"" : "", vt->text_b ? vt->text_b : "",
                        vt->text_b ? "\"" : "", schema, vt->source);
  if (!sql) return SQLITE_NOMEM;
  rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    *pzErr = sqlite3_mprintf("relattn_scan: cannot read source '%s': %s",
                             vt->source, sqlite3_errmsg(db));
    return SQLITE_ERROR;
  }
  sqlite3_finalize(st);
  return SQLITE_OK;
}

static void scanFreeVtab(scan_vtab *vt) {
  if (!vt) return;
  sqlite3_free(vt->model);
  sqlite3_free(vt->source);
  sqlite3_free(vt->tokens);
  sqlite3_free(vt->text_b);
  sqlite3_free(vt->id);
  sqlite3_free(vt->schema);
  sqlite3_free(vt->name);
  sqlite3_free(vt->pooling_arg);
  sqlite3_free(vt->generate_arg);
  sqlite3_free(vt);
}

/* ---- the checks at CREATE ----------------------------------------------- */

/* SQL run inside xCreate must never meet a schema another connection changed.
** When a statement of the connection finds that a database's schema cookie
** moved (opening it for a read, or looking again after a name it could not
** resolve), SQLite resets that database's schema and temp's, freeing every
** Table there. For a scan created in temp that includes the Table of the
** scan itself, which SQLite goes on writing to once xCreate returns: a heap
** corruption, seen as SIGSEGV or "free(): invalid size". SQLite defers such
** resets while xConnect and xBestIndex run; not while xCreate does. And
** statements reach further than they name: any table-valued function
** (pragma_table_xinfo, json_each) opens main.
**
** So a scan created in a database other than temp checks everything on the
** connection: its own database cannot have changed (the CREATE verified its
** schema when it began its write transaction there), and a reset elsewhere
** frees nothing of its. A scan created in temp does the same when every
** other database is in-memory. Otherwise it reads only temp's catalogue and
** a temp table's columns on the connection, and checks what is in main
** through a read-only side connection, which sees what this connection will
** see once its next read transaction begins. An open transaction proves
** nothing: BEGIN IMMEDIATE takes the write lock without looking at the
** schema, so the next read of main can still meet another connection's
** change. Inside one the side connection is not used either (it would not
** see what the transaction wrote, nor the snapshot it reads). What is left
** unchecked (a temp view's columns, a model in temp, a database this
** connection is in a transaction on, anything when the side connection
** cannot read) is checked at the first query: xFilter runs every check
** again anyway, and a reset there is safe (the running statement holds its
** own reference to the scan). */
static int scanUnchangeable(sqlite3 *db, const char *schema) {
  const char *file;
  if (sqlite3_stricmp(schema, "temp") == 0) return 1;
  file = sqlite3_db_filename(db, schema);
  return !file || !*file;
}

static int scanCreateSafe(sqlite3 *db, const scan_vtab *vt) {
  const char *name;
  int i;
  if (sqlite3_stricmp(vt->schema, "temp") != 0) return 1;
  for (i = 0; (name = sqlite3_db_name(db, i)) != NULL; i++)
    if (!scanUnchangeable(db, name)) return 0;
  return 1;
}

/* A read-only connection to the file of `schema`, in its own read
** transaction, or NULL when that cannot be had at once, or when db is in a
** transaction there (the side connection would not see what db sees). */
static sqlite3 *scanSideOpen(sqlite3 *db, const char *schema) {
  sqlite3 *side = NULL;
  sqlite3_vfs *vfs = NULL;
  const char *file = sqlite3_db_filename(db, schema);
  if (!file || !*file || sqlite3_txn_state(db, schema) != SQLITE_TXN_NONE)
    return NULL;
  if (sqlite3_file_control(db, schema, SQLITE_FCNTL_VFS_POINTER, &vfs) !=
      SQLITE_OK)
    vfs = NULL;
  if (sqlite3_open_v2(file, &side, SQLITE_OPEN_READONLY,
                      vfs ? vfs->zName : NULL) != SQLITE_OK ||
      sqlite3_exec(side, "BEGIN; SELECT count(*) FROM sqlite_master", 0, 0,
                   0) != SQLITE_OK) {
    sqlite3_close(side);
    return NULL;
  }
  return side;
}

static void scanSideClose(sqlite3 *side) {
  if (!side) return;
  sqlite3_exec(side, "COMMIT", 0, 0, 0);
  sqlite3_close(side);
}

/* The model loads (all of it: a bad tensor fails the CREATE) through db, into
** a cache of its own, then moves to the connection's cache under `key`, the
** name the scan's queries look it up by (relattn_scan_model_schema): the
** first query finds it loaded. `schema` names its tables' database on db. */
static int scanCheckModel(sqlite3 *db, scan_vtab *vt, const char *schema,
                          const char *key, char **pzErr) {
  relattn_conn probe = *vt->conn;
  const relattn_model *m;
  probe.db = db;
  probe.cache = NULL;
  probe.pool = NULL;
  probe.side = NULL; /* its own, if it needs them: closed below */
  probe.json = NULL;
  m = relattn_store_acquire_in(&probe, schema, vt->model, "relattn_scan",
                               pzErr);
  if (m) {
    *pzErr = relattn_pooling_check(m, "relattn_scan", vt->model, vt->pooling);
    if (!*pzErr && vt->generate_arg) {
      /* generate='{...}': its options, read as each query will */
      relattn_gen_opts o;
      char *stops[16];
      int n_stops = 0, i;
      *pzErr = relattn_gen_parse(&probe, m, "relattn_scan", "generate",
                                 vt->generate_arg, &o, stops, &n_stops);
      for (i = 0; i < n_stops; i++) sqlite3_free(stops[i]);
    }
    if (!*pzErr && vt->text_b && m->cfg.sep < 0) {
      char e[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("relattn_scan: model '%s' has no "
                               "tokenizer.sep: it takes one text, not a pair "
                               "(text_b=)",
                               relattn_echo(e, vt->model, -1));
    }
    relattn_store_release(&probe, m);
  }
  if (*pzErr)
    relattn_store_close(&probe);
  else
    relattn_store_adopt(vt->conn, &probe, key);
  sqlite3_close_v2(probe.side);
  sqlite3_close_v2(probe.json);
  return *pzErr ? SQLITE_ERROR : SQLITE_OK;
}

static int scanCreateCheck(sqlite3 *db, scan_vtab *vt, char **pzErr) {
  const char *src = relattn_scan_schema_of(db, vt, vt->source);
  const char *mod = relattn_scan_schema_of(db, vt, "relattn_model");
  sqlite3 *side = NULL;
  int rc = SQLITE_OK;
  if (scanCreateSafe(db, vt)) {
    rc = scanCheckSource(db, vt, src, CHECK_FULL, pzErr);
    if (rc == SQLITE_OK)
      rc = scanCheckModel(db, vt, mod, relattn_scan_model_schema(db, vt),
                          pzErr);
    return rc;
  }
  /* a temp scan, and main (or an attached database) may have changed */
  if (sqlite3_stricmp(src, "temp") == 0)
    rc = scanCheckSource(db, vt, src, CHECK_NARROW, pzErr);
  else if ((side = scanSideOpen(db, src)) != NULL)
    rc = scanCheckSource(side, vt, "main", CHECK_SIDE, pzErr);
  if (rc == SQLITE_OK && sqlite3_stricmp(mod, "temp") != 0) {
    if (!side) side = scanSideOpen(db, mod);
    /* in main, not temp: the bare names the queries use find it */
    if (side) rc = scanCheckModel(side, vt, "main", NULL, pzErr);
  }
  scanSideClose(side);
  return rc;
}

static int scanInit(sqlite3 *db, void *aux, int argc, const char *const *argv,
                    sqlite3_vtab **ppVtab, char **pzErr, int create) {
  scan_vtab *vt;
  int i, rc;
  vt = sqlite3_malloc64(sizeof *vt);
  if (!vt) return SQLITE_NOMEM;
  memset(vt, 0, sizeof *vt);
  vt->conn = aux;
  vt->schema = sqlite3_mprintf("%s", argv[1]);
  vt->name = sqlite3_mprintf("%s", argv[2]);
  if (!vt->schema || !vt->name) {
    scanFreeVtab(vt);
    return SQLITE_NOMEM;
  }
  for (i = 3; i < argc; i++) {
    char *key, *val, **dst = NULL;
    if (!scanParseArg(argv[i], &key, &val)) {
      sqlite3_free(key);
      sqlite3_free(val);
      *pzErr = sqlite3_mprintf("relattn_scan: argument %d (%s) is not "
                               "key=value", i - 2, argv[i]);
      scanFreeVtab(vt);
      return SQLITE_ERROR;
    }
    if (sqlite3_stricmp(key, "model") == 0) dst = &vt->model;
    else if (sqlite3_stricmp(key, "source") == 0) dst = &vt->source;
    else if (sqlite3_stricmp(key, "tokens") == 0) dst = &vt->tokens;
    else if (sqlite3_stricmp(key, "id") == 0) dst = &vt->id;
    else if (sqlite3_stricmp(key, "pooling") == 0) dst = &vt->pooling_arg;
    else if (sqlite3_stricmp(key, "generate") == 0) dst = &vt->generate_arg;
    else if (sqlite3_stricmp(key, "text_b") == 0) dst = &vt->text_b;
    if (!dst || *dst) {
      *pzErr = sqlite3_mprintf(
          dst ? "relattn_scan: argument '%s' given twice"
              : "relattn_scan: unknown argument '%s' (expected model, source, "
                "tokens, id, pooling, text_b, generate)",
          key);
      sqlite3_free(key);
      sqlite3_free(val);
      scanFreeVtab(vt);
      return SQLITE_ERROR;
    }
    *dst = val;
    sqlite3_free(key);
  }
  if (!vt->model || !vt->source || !vt->tokens) {
    *pzErr = sqlite3_mprintf("relattn_scan: %s= is required, as in "
                             "relattn_scan(model='m', source='docs', "
                             "tokens='body')",
                             !vt->model ? "model"
                             : !vt->source ? "source" : "tokens");
    scanFreeVtab(vt);
    return SQLITE_ERROR;
  }
  vt->pooling = vt->pooling_arg ? relattn_pooling_parse(vt->pooling_arg)
                                : RELATTN_POOL_DEFAULT;
  if (vt->pooling < 0) {
    char e[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf("relattn_scan: pooling must be 'mean', 'cls' or "
                             "'pooler', not '%s'",
                             relattn_echo(e, vt->pooling_arg, -1));
    scanFreeVtab(vt);
    return SQLITE_ERROR;
  }
  /* At CREATE, everything is checked now; a stored table reconnecting only
  ** parses, so a later problem shows when it is queried. */
  if (create && (rc = scanCreateCheck(db, vt, pzErr)) != SQLITE_OK) {
    scanFreeVtab(vt);
    return rc;
  }
  /* error is HIDDEN, as SQLite's table-valued functions hide their extra
  ** columns (generate_series' start/stop/step, json_each's json and root):
  ** SELECT * leaves it out, and naming it is the choice to keep bad rows.
  ** label, logit and prob too: a classifier's, named when wanted, so
  ** SELECT * stays what it is for every model. */
  rc = sqlite3_declare_vtab(db,
                            "CREATE TABLE x(id INTEGER, n_tokens INTEGER, "
                            "score REAL, perplexity REAL, embedding BLOB, "
                            "error TEXT HIDDEN, label TEXT HIDDEN, "
                            "logit REAL HIDDEN, prob REAL HIDDEN, "
                            "generated TEXT HIDDEN)");
  if (rc != SQLITE_OK) {
    scanFreeVtab(vt);
    return rc;
  }
  *ppVtab = &vt->base;
  return SQLITE_OK;
}

int relattn_scan_create(sqlite3 *db, void *aux, int argc,
                               const char *const *argv, sqlite3_vtab **ppVtab,
                               char **pzErr) {
  int rc = scanInit(db, aux, argc, argv, ppVtab, pzErr, 1);
  if (rc != SQLITE_OK) *pzErr = relattn_utf8_message(*pzErr); /* echoes */
  return rc;
}

int relattn_scan_connect(sqlite3 *db, void *aux, int argc,
                                const char *const *argv, sqlite3_vtab **ppVtab,
                                char **pzErr) {
  int rc = scanInit(db, aux, argc, argv, ppVtab, pzErr, 0);
  if (rc != SQLITE_OK) *pzErr = relattn_utf8_message(*pzErr);
  return rc;
}

int relattn_scan_disconnect(sqlite3_vtab *p) {
  scanFreeVtab((scan_vtab *)p);
  return SQLITE_OK;
}
