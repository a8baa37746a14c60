/*
** util.c: the helpers every SQL function shares, so each rule is written once.
**
**   errors      relattn_result_errorf / relattn_result_error / relattn_vtab_error
**               set a message (always valid UTF-8) and a code;
**               relattn_status_code maps a src/ status to an SQLite code;
**               relattn_sql_errmsg words a failed statement of ours
**               ("<fn>: interrupted" after sqlite3_interrupt);
**               relattn_prepare / relattn_sql_code: a statement of ours
**               prepared, and the code of one that failed.
**   echo        relattn_echo: input bytes quoted in a message, escaped and cut.
**   models      relattn_bad_model_msg / relattn_no_model_msg: one wording;
**               relattn_missing_tensor: the first tensor a config lacks.
**   tokens      relattn_tokens_value: a token argument as int32 ids;
**               relattn_tokens_limited: the same under relattn_max_tokens();
**               relattn_model_input: a token argument as a model's input.
**   memory      relattn_memory_check / relattn_memory_ok: relattn_max_memory().
**   pool        relattn_conn_pool: the connection's workers.
**   interrupt   relattn_watch_begin / relattn_watch_end: sqlite3_interrupt
**               seen by the worker pool while a call computes;
**               relattn_interrupted: has it been called?
**   tvf         relattn_tvf_best_index: a table-valued function's arguments
**               (its hidden columns' = constraints) handed to xFilter;
**               relattn_tvf_connect / _disconnect / _open / _error: its
**               vtab (the connection alone), a cursor, its errors.
**
** Example (what a model function does with them, the model acquired by
** relattn_model_arg of ext/store.c):
**   const relattn_model *m = relattn_model_arg(ctx, argv[0], fn);
**   rc = relattn_model_input(conn, m, argv[1], fn, "tokens", &in, &zErr);
*/
#include "ext.h"
#include "functions.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

SQLITE_EXTENSION_INIT3

/* ---- UTF-8 --------------------------------------------------------------- */

/* Length of the valid UTF-8 character at p (at most n bytes), or 0 when the
** bytes there are not one: overlong forms, surrogates and code points past
** U+10FFFF are not (RFC 3629, sec. 4). */
static int utf8Char(const unsigned char *p, size_t n) {
  unsigned c = p[0];
  int len, i;
  unsigned cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
  else return 0;
  if ((size_t)len > n) return 0;
  for (i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
      (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
    return 0;
  return len;
}

int relattn_json_has_nul(const char *json) {
  const char *p;
  if (!json) return 0;
  for (p = json; *p; p++) {
    if (*p != '\\') continue;
    if (!p[1]) break;
    if (p[1] == 'u' && strncmp(p + 2, "0000", 4) == 0) return 1;
    p++; /* the escaped character: \\ is not the start of another escape */
  }
  return 0;
}

/* Does a BLOB of n bytes look like text stored as a BLOB (readfile, a
** column of BLOBs) rather than int32 ids? Valid UTF-8 with no control
** character but tab, newline and carriage return. Little-endian ids under
** 2^24 have a zero byte each, so real token arrays do not. */
static int blobIsText(const unsigned char *p, size_t n) {
  size_t i = 0;
  if (!p || !n) return 0;
  while (i < n) {
    int len = utf8Char(p + i, n - i);
    if (!len) return 0;
    if (len == 1 && ((p[i] < 0x20 && p[i] != '\t' && p[i] != '\n' &&
                      p[i] != '\r') || p[i] == 0x7f))
      return 0;
    i += (size_t)len;
  }
  return 1;
}

/* The hint an error about a token BLOB ends with when the BLOB is text and
** the model could tokenize it as TEXT. */
static const char *castHint(sqlite3_value *v, const relattn_model *m) {
  const void *p;
  if (!m || sqlite3_value_type(v) != SQLITE_BLOB) return "";
  p = sqlite3_value_blob(v); /* before its size, as SQLite asks */
  if (!blobIsText(p, (size_t)sqlite3_value_bytes(v))) return "";
  return "; if the BLOB holds text, pass CAST(... AS TEXT) to tokenize it";
}

/* Appends p[0..n) to out (capacity cap, NUL included) escaped: a control
** character or a byte outside valid UTF-8 as \xNN, the rest as is. With
** limit, stops where the next character would not leave room for "..." and
** writes "..." instead. Returns the length written. */
static size_t escapeInto(char *out, size_t cap, const unsigned char *p,
                         size_t n, int limit) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0, i = 0, cut = 0;
  int have_cut = 0;
  while (i < n) {
    int len = utf8Char(p + i, n - i);
    size_t w = len == 1 && (p[i] < 0x20 || p[i] == 0x7f) ? 4
               : len ? (size_t)len : 4;
    if (limit && !have_cut && o + w + 3 >= cap) {
      cut = o; /* the last place "..." still fits */
      have_cut = 1;
    }
    if (o + w >= cap) {
      if (limit) {
        memcpy(out + cut, "...", 3);
        o = cut + 3;
      }
      break;
    }
    if (w == 4) {
      out[o++] = '\\', out[o++] = 'x';
      out[o++] = hex[p[i] >> 4], out[o++] = hex[p[i] & 15];
      i++;
    } else {
      memcpy(out + o, p + i, w);
      o += w, i += w;
    }
  }
  out[o] = 0;
  return o;
}

const char *relattn_echo_into(char *buf, size_t cap, const void *p, int n) {
  if (!p) p = "";
  escapeInto(buf, cap, p, n < 0 ? strlen(p) : (size_t)n, 1);
  return buf;
}

const char *relattn_echo(char buf[RELATTN_ECHO_BUF], const void *p, int n) {
  return relattn_echo_into(buf, RELATTN_ECHO_BUF, p, n);
}

/* Each byte outside valid UTF-8 escaped; controls kept (see ext.h). */
char *relattn_utf8_message(char *msg) {
  const unsigned char *p = (const unsigned char *)msg;
  size_t n, i, cap;
  char *fixed;
  if (!msg) return NULL;
  n = strlen(msg);
  for (i = 0; i < n;) {
    int len = utf8Char(p + i, n - i);
    if (!len) break;
    i += (size_t)len;
  }
  if (i == n) return msg;
  cap = 4 * n + 1;
  fixed = sqlite3_malloc64(cap);
  if (fixed) {
    /* controls kept here: a message of ours may hold none but \n */
    size_t o = 0;
    for (i = 0; i < n;) {
      int len = utf8Char(p + i, n - i);
      if (len) {
        memcpy(fixed + o, p + i, (size_t)len);
        o += (size_t)len, i += (size_t)len;
      } else {
        o += escapeInto(fixed + o, cap - o, p + i, 1, 0);
        i++;
      }
    }
    fixed[o] = 0;
  }
  sqlite3_free(msg);
  return fixed;
}

/* ---- errors -------------------------------------------------------------- */

int relattn_status_code(int status) {
  switch (status) {
    case RELATTN_OK: return SQLITE_OK;
    case RELATTN_ERR_NOMEM: return SQLITE_NOMEM;
    case RELATTN_ERR_TOOBIG: return SQLITE_TOOBIG;
    case RELATTN_ERR_INTERRUPT: return SQLITE_INTERRUPT;
    default: return SQLITE_ERROR;
  }
}

/* After sqlite3_interrupt, a statement of ours fails part way, and what it
** failed at ("options must be a JSON object") is not the cause: the error
** becomes "<fn>: interrupted" with SQLITE_INTERRUPT, fn taken from msg. */
static char *interruptedInstead(sqlite3 *db, char *msg, int *code) {
  const char *colon;
  char *instead;
  if (*code == SQLITE_INTERRUPT || *code == SQLITE_NOMEM || !db ||
      !relattn_interrupted(db))
    return msg;
  colon = msg ? strstr(msg, ": ") : NULL;
  instead = colon ? sqlite3_mprintf("%.*s: interrupted", (int)(colon - msg), msg)
                  : sqlite3_mprintf("interrupted");
  if (!instead) return msg;
  sqlite3_free(msg);
  *code = SQLITE_INTERRUPT;
  return instead;
}

void relattn_result_error(sqlite3_context *ctx, int code, char *msg) {
  msg = interruptedInstead(sqlite3_context_db_handle(ctx), msg, &code);
  msg = relattn_utf8_message(msg);
  if (!msg || code == SQLITE_NOMEM) {
    sqlite3_free(msg);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_error(ctx, msg, -1);
  if (code != SQLITE_ERROR && code != SQLITE_OK)
    sqlite3_result_error_code(ctx, code);
  sqlite3_free(msg);
}

void relattn_result_errorf(sqlite3_context *ctx, const char *fmt, ...) {
  va_list ap;
  char *msg;
  va_start(ap, fmt);
  msg = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  relattn_result_error(ctx, SQLITE_ERROR, msg);
}

void relattn_result_status(sqlite3_context *ctx, int status, const char *msg) {
  if (status == RELATTN_OK) return;
  relattn_result_error(ctx, relattn_status_code(status),
                       sqlite3_mprintf("%s", msg));
}

int relattn_vtab_error(sqlite3 *db, sqlite3_vtab *vtab, int code, char *msg) {
  msg = interruptedInstead(db, msg, &code);
  sqlite3_free(vtab->zErrMsg);
  vtab->zErrMsg = relattn_utf8_message(msg);
  return vtab->zErrMsg || code != SQLITE_ERROR ? code : SQLITE_NOMEM;
}

char *relattn_sql_errmsg(sqlite3 *db, const char *fn, int rc) {
  if (rc == SQLITE_INTERRUPT) return sqlite3_mprintf("%s: interrupted", fn);
  return sqlite3_mprintf("%s: %s", fn, sqlite3_errmsg(db));
}

/* After sqlite3_interrupt every prepare fails, and a caller preparing
** several statements in a row must not leak the first messages. */
sqlite3_stmt *relattn_prepare(sqlite3 *db, const char *sql, const char *what,
                              char **pzErr) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) {
    sqlite3_free(*pzErr);
    *pzErr = relattn_sql_errmsg(db, what, rc);
    sqlite3_finalize(st);
    return NULL;
  }
  return st;
}

int relattn_sql_code(sqlite3 *db) {
  int rc = sqlite3_errcode(db);
  return rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_ERROR
                                                                 : rc;
}

/* ---- pool ---------------------------------------------------------------- */

relattn_pool *relattn_conn_pool(relattn_conn *conn) {
  if (conn->pool && relattn_pool_size(conn->pool) != conn->n_threads) {
    relattn_pool_free(conn->pool);
    conn->pool = NULL;
  }
  if (!conn->pool) conn->pool = relattn_pool_new(conn->n_threads);
  return conn->pool;
}

/* ---- reading inside a statement ------------------------------------------ */

/* A statement that reads main checks main's schema cookie when it opens its
** read transaction. Should another connection have changed the schema since,
** SQLite discards this connection's schemas, main's and temp's, at once,
** even under a statement still running. The extension's reads run inside
** the user's statement (a function per row, a scan's xFilter); when that
** statement reads only temp (INSERT INTO temp.t SELECT ... FROM temp.job),
** our read is the connection's first of main, and the statement may still
** use what was discarded: a STRICT temp table's definition, checked on each
** row it writes. So such a first read goes to a read-only connection of
** our own to main's file, which sees what it would have seen, and the
** user's connection never opens main under its statement. A read in temp or
** an in-memory database, or in a transaction the connection already has
** on main, stays on the connection (as does one in an attached database,
** read where it is). */
int relattn_in_temp(sqlite3 *db, const char *table) {
  sqlite3_stmt *st = NULL;
  int found = 0;
  if (sqlite3_prepare_v2(db,
                         "SELECT 1 FROM temp.sqlite_master WHERE name = ?1 "
                         "COLLATE NOCASE AND type IN ('table', 'view')",
                         -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    found = sqlite3_step(st) == SQLITE_ROW;
  }
  sqlite3_finalize(st);
  return found;
}

sqlite3 *relattn_read_db(relattn_conn *conn, const char *schema,
                         const char *table) {
  sqlite3 *db = conn->db;
  const char *file;
  sqlite3_vfs *vfs = NULL;
  if (schema ? sqlite3_stricmp(schema, "main") != 0
             : relattn_in_temp(db, table))
    return db;
  if (sqlite3_txn_state(db, "main") != SQLITE_TXN_NONE) return db;
  file = sqlite3_db_filename(db, "main");
  if (!file || !*file) return db;
  if (conn->side && strcmp(sqlite3_db_filename(conn->side, "main"), file) == 0)
    return conn->side;
  sqlite3_close_v2(conn->side);
  conn->side = NULL;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_VFS_POINTER, &vfs) !=
      SQLITE_OK)
    vfs = NULL;
  if (sqlite3_open_v2(file, &conn->side,
                      SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                      vfs ? vfs->zName : NULL) != SQLITE_OK) {
    sqlite3_close_v2(conn->side);
    conn->side = NULL;
    return db;
  }
  sqlite3_busy_timeout(conn->side, 5000);
  return conn->side;
}

/* JSON arguments are read with json_each and json_tree, table-valued
** functions, which open main like any table: on the connection, a first read
** of main under the user's statement, as above, and, in a deterministic
** function SQLite may call while it prepares another statement, a reset in
** the middle of that. Nothing of main is needed, so they run here. Like
** conn->side it is used on the connection's own thread alone, under its
** lock: it has no mutex of its own (a value read from one of its rows is
** then no misuse outside a call on it). */
sqlite3 *relattn_json_db(relattn_conn *conn) {
  /* An interrupt of the user's statement must stop these too, with the
  ** error the caller gives for it: on the connection, an interrupted
  ** statement stops before it opens anything. */
  if (relattn_interrupted(conn->db)) return conn->db;
  if (!conn->json &&
      sqlite3_open_v2(":memory:", &conn->json,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                          SQLITE_OPEN_NOMUTEX,
                      NULL) != SQLITE_OK) {
    sqlite3_close_v2(conn->json);
    conn->json = NULL;
  }
  return conn->json ? conn->json : conn->db;
}

/* ---- memory -------------------------------------------------------------- */

char *relattn_memory_check(relattn_conn *conn, const char *fn, size_t need) {
  if (need == SIZE_MAX)
    return sqlite3_mprintf("%s: the input's size overflows a memory size", fn);
  if ((sqlite3_uint64)need <= (sqlite3_uint64)conn->max_memory) return NULL;
  return sqlite3_mprintf(
      "%s: needs %llu bytes, over the limit of %lld per call "
      "(relattn_max_memory)",
      fn, (unsigned long long)need, conn->max_memory);
}

int relattn_memory_ok(sqlite3_context *ctx, relattn_conn *conn,
                      const char *fn, size_t need) {
  char *msg = relattn_memory_check(conn, fn, need);
  if (!msg) return 1;
  relattn_result_error(ctx, SQLITE_TOOBIG, msg);
  return 0;
}

/* ---- models -------------------------------------------------------------- */

char *relattn_bad_model_msg(const char *fn) {
  return sqlite3_mprintf("%s: model must be a model name (TEXT)", fn);
}

char *relattn_no_model_msg(const char *fn, const char *name) {
  char e[RELATTN_ECHO_BUF];
  return sqlite3_mprintf("%s: no model named '%s'", fn,
                         relattn_echo(e, name, -1));
}

int relattn_missing_tensor(const relattn_config *c, const char *const *names,
                           int n_names) {
  int n = relattn_model_n_tensors(c), i;
  unsigned char *seen;
  if (n_names >= n) {
    /* enough rows: each spec is looked up by name */
    for (i = 0; i < n; i++) {
      relattn_tensor_spec spec;
      int k;
      relattn_model_spec(c, i, &spec);
      for (k = 0; k < n_names; k++)
        if (names[k] && strcmp(names[k], spec.name) == 0) break;
      if (k == n_names) return i;
    }
    return -1;
  }
  /* Fewer names than tensors: one is missing, among the first n_names + 1
  ** specs (n_layers alone may ask for hundreds of millions: look no
  ** further). */
  seen = sqlite3_malloc64((sqlite3_uint64)n_names + 1);
  if (!seen) return -2;
  memset(seen, 0, (size_t)n_names + 1);
  for (i = 0; i < n_names; i++) {
    int k = names[i] ? relattn_model_index(c, names[i]) : -1;
    if (k >= 0 && k <= n_names) seen[k] = 1;
  }
  for (i = 0; seen[i]; i++) {
  }
  sqlite3_free(seen);
  return i;
}

char *relattn_missing_tensor_msg(const relattn_config *c, int i,
                                 const char *what) {
  relattn_tensor_spec spec;
  relattn_model_spec(c, i, &spec);
  return sqlite3_mprintf("%s: tensor '%s' is missing (the config needs it)",
                         what, spec.name);
}

/* ---- tokens -------------------------------------------------------------- */

/* Decodes v into ids with lead free slots in front and room for trail more
** after them. See relattn_tokens_value. */
static int32_t *decodeTokens(sqlite3_value *v, const relattn_model *m,
                             const char *fn, const char *arg, int lead,
                             int trail, size_t max_ids, int *n_out, int *oom,
                             int *toobig, char **pzErr) {
  int32_t *ids;
  size_t n, i;
  *pzErr = NULL;
  *n_out = 0;
  switch (sqlite3_value_type(v)) {
    case SQLITE_BLOB: {
      size_t bytes = (size_t)sqlite3_value_bytes(v);
      if (bytes % 4) {
        *pzErr = sqlite3_mprintf("%s: %s has %llu bytes, not a multiple of "
                                 "4%s", fn, arg, (sqlite3_uint64)bytes,
                                 castHint(v, m));
        return NULL;
      }
      n = bytes / 4;
      ids = sqlite3_malloc64((sqlite3_uint64)bytes +
                            4 * (size_t)(lead + trail) + 1);
      if (!ids) goto nomem;
      if (bytes) memcpy(ids + lead, sqlite3_value_blob(v), bytes); /* unaligned */
      break;
    }
    case SQLITE_TEXT: {
      const unsigned char *text;
      if (!m) {
        *pzErr = sqlite3_mprintf("%s: %s is TEXT, but there is no model to "
                                 "tokenize it: pass a token BLOB, e.g. "
                                 "relattn_tokens('[1,2,3]')", fn, arg);
        return NULL;
      }
      text = sqlite3_value_text(v);
      n = (size_t)sqlite3_value_bytes(v);
      if (n && !text) goto nomem;
      {
        /* through the model's tokenizer, stopped as soon as it passes the
        ** limit (the byte tokenizer's count is known before: see
        ** relattn_model_input) */
        int32_t *got;
        size_t n_got;
        int rc = relattn_tokenizer_encode(m->tok, text, n, (size_t)lead,
                                          max_ids, &got, &n_got);
        if (rc == RELATTN_ERR_TOOBIG) {
          *toobig = 1;
          *pzErr = sqlite3_mprintf("%s: %s has more tokens than "
                                   "relattn_max_tokens() = %llu",
                                   fn, arg, (sqlite3_uint64)max_ids);
          return NULL;
        }
        if (rc != RELATTN_OK) goto nomem;
        n = n_got;
        ids = sqlite3_malloc64(
            ((sqlite3_uint64)n + (size_t)(lead + trail)) * 4 + 1);
        if (!ids) {
          free(got);
          goto nomem;
        }
        memcpy(ids, got, (n + (size_t)lead) * 4);
        free(got);
      }
      break;
    }
    case SQLITE_NULL:
      *pzErr = sqlite3_mprintf("%s: %s is NULL", fn, arg);
      return NULL;
    default:
      *pzErr = sqlite3_mprintf("%s: %s must be a token BLOB (int32 ids) or "
                               "TEXT", fn, arg);
      return NULL;
  }
  if (n > 0x7fffffff - (size_t)(lead + trail)) {
    sqlite3_free(ids);
    *pzErr = sqlite3_mprintf("%s: %s has more than 2^31 tokens", fn, arg);
    return NULL;
  }
  if (m) {
    for (i = 0; i < n; i++) {
      if (ids[lead + i] >= 0 && ids[lead + i] < m->cfg.vocab_size) continue;
      *pzErr = sqlite3_mprintf(
          "%s: %s has token %d at position %llu, outside the model's "
          "vocabulary [0, %d)%s",
          fn, arg, (int)ids[lead + i], (sqlite3_uint64)i, m->cfg.vocab_size,
          castHint(v, m));
      sqlite3_free(ids);
      return NULL;
    }
  }
  *n_out = (int)n;
  return ids;
nomem:
  *oom = 1;
  *pzErr = sqlite3_mprintf("%s: out of memory reading %s", fn, arg);
  return NULL;
}

int32_t *relattn_tokens_value(sqlite3_value *v, const relattn_model *m,
                              const char *fn, const char *arg, int *n_out,
                              char **pzErr) {
  int oom = 0, toobig = 0;
  return decodeTokens(v, m, fn, arg, 0, 0, 0x7fffffff, n_out, &oom, &toobig,
                      pzErr);
}

/* relattn_max_tokens() before decoding, which allocates 4 bytes a token:
** a BLOB holds bytes/4 ids, and the byte tokenizer gives one id per byte.
** (Another tokenizer's count is known only by encoding, which stops as soon
** as it passes the limit: decodeTokens.) */
static int overMaxTokens(relattn_conn *conn, const relattn_model *m,
                         sqlite3_value *v, const char *fn, const char *arg,
                         char **pzErr) {
  sqlite3_int64 bytes = sqlite3_value_bytes(v), count = -1;
  if (sqlite3_value_type(v) == SQLITE_BLOB && bytes % 4 == 0)
    count = bytes / 4;
  else if (sqlite3_value_type(v) == SQLITE_TEXT &&
           relattn_tokenizer_kind(m->tok) == RELATTN_TOK_BYTES &&
           !m->cfg.split_special) /* a special text is one id */
    count = bytes;
  if (count <= conn->max_tokens) return 0;
  *pzErr = sqlite3_mprintf("%s: %s has %lld tokens, over "
                           "relattn_max_tokens() = %d%s",
                           fn, arg, count, conn->max_tokens, castHint(v, m));
  return 1;
}

int relattn_tokens_limited(relattn_conn *conn, const relattn_model *m,
                           sqlite3_value *v, const char *fn, const char *arg,
                           int32_t **ids, int *n_out, char **pzErr) {
  int oom = 0, toobig = 0;
  *ids = NULL;
  *n_out = 0;
  *pzErr = NULL;
  if (overMaxTokens(conn, m, v, fn, arg, pzErr)) return SQLITE_TOOBIG;
  *ids = decodeTokens(v, m, fn, arg, 0, 0, (size_t)conn->max_tokens, n_out,
                      &oom, &toobig, pzErr);
  if (*ids) return SQLITE_OK;
  return oom || !*pzErr ? SQLITE_NOMEM : toobig ? SQLITE_TOOBIG : SQLITE_ERROR;
}

int relattn_model_input(relattn_conn *conn, const relattn_model *m,
                        sqlite3_value *v, const char *fn, const char *arg,
                        relattn_input *in, char **pzErr) {
  int bos = m->cfg.bos >= 0, append = m->cfg.append >= 0;
  int n = 0, oom = 0, toobig = 0;
  memset(in, 0, sizeof *in);
  *pzErr = NULL;
  if (sqlite3_value_type(v) == SQLITE_NULL) return SQLITE_OK;
  if (overMaxTokens(conn, m, v, fn, arg, pzErr)) return SQLITE_TOOBIG;
  in->ids = decodeTokens(v, m, fn, arg, bos, append,
                         (size_t)conn->max_tokens, &n, &oom, &toobig, pzErr);
  if (!in->ids)
    return oom || !*pzErr ? SQLITE_NOMEM : toobig ? SQLITE_TOOBIG
                                                  : SQLITE_ERROR;
  if (n == 0) {
    *pzErr = sqlite3_mprintf("%s: %s is empty", fn, arg);
    sqlite3_free(in->ids);
    in->ids = NULL;
    return SQLITE_ERROR;
  }
  /* A sequence never holds bos (the functions put it in front): one that
  ** starts with it would silently get two. */
  if (bos && in->ids[1] == m->cfg.bos) {
    *pzErr = sqlite3_mprintf("%s: %s starts with bos (%d); leave it out: "
                             "the model puts bos in front itself",
                             fn, arg, m->cfg.bos);
    sqlite3_free(in->ids);
    in->ids = NULL;
    return SQLITE_ERROR;
  }
  /* sentence-transformers' Transformer module: the tokenizer cuts the
  ** text's tokens so that the input, special rows included, is at most
  ** max_seq_length rows (truncation "longest_first" on one text) */
  if (m->cfg.st_max_seq > 0 && n + bos + append > m->cfg.st_max_seq)
    n = m->cfg.st_max_seq - bos - append;
  if ((m->cfg.pos.type == RELATTN_POS_ABSOLUTE ||
       m->cfg.pos.type == RELATTN_POS_REL_KEY ||
       m->cfg.pos.type == RELATTN_POS_REL_KEY_QUERY) &&
      n + bos + append > m->cfg.max_len) {
    /* counted in input rows, which is what the positions index */
    char note[64];
    if (m->cfg.pos.type == RELATTN_POS_ABSOLUTE)
      sqlite3_snprintf(sizeof note, note, "the rows of its pos_emb");
    else
      sqlite3_snprintf(sizeof note, note,
                       "its rel_k tables cover distances up to %d",
                       m->cfg.max_len - 1);
    *pzErr = sqlite3_mprintf(
        "%s: %s makes %d input rows (%d tokens%s), over the model's "
        "position.%s = %d (%s)",
        fn, arg, n + bos + append, n,
        bos && append ? " with bos and the appended token"
        : bos         ? " with bos"
        : append      ? " with the appended token"
                      : "",
        m->cfg.pos.type == RELATTN_POS_ABSOLUTE ? "max_len"
                                                : "max_position_embeddings",
        m->cfg.max_len, note);
    sqlite3_free(in->ids);
    in->ids = NULL;
    return SQLITE_TOOBIG;
  }
  if (bos) in->ids[0] = m->cfg.bos;
  /* [bos] + tokens + [append]: HF's template for one sequence, e.g.
  ** [CLS] ... [SEP] or ... </s> */
  if (append) in->ids[bos + n] = m->cfg.append;
  in->n_seq = n;
  in->n = n + bos + append;
  in->bos = bos;
  in->append = append;
  return SQLITE_OK;
}
int relattn_model_pair_input(relattn_conn *conn, const relattn_model *m,
                             sqlite3_value *a, sqlite3_value *b,
                             const char *fn, const char *name,
                             const char *arg_a, const char *arg_b,
                             int truncate_a, relattn_input *in,
                             char **pzErr) {
  const relattn_config *c = &m->cfg;
  int bos = c->bos >= 0, append = c->append >= 0;
  int n_a = 0, n_b = 0, oom = 0, toobig = 0, i, rows;
  int32_t *ids_b = NULL;
  char e[RELATTN_ECHO_BUF];
  memset(in, 0, sizeof *in);
  *pzErr = NULL;
  if (c->sep < 0) {
    *pzErr = sqlite3_mprintf("%s: model '%s' has no tokenizer.sep: it takes "
                             "one text, not a pair",
                             fn, relattn_echo(e, name, -1));
    return SQLITE_ERROR;
  }
  if (sqlite3_value_type(a) == SQLITE_NULL ||
      sqlite3_value_type(b) == SQLITE_NULL)
    return SQLITE_OK;
  if (overMaxTokens(conn, m, a, fn, arg_a, pzErr) ||
      overMaxTokens(conn, m, b, fn, arg_b, pzErr))
    return SQLITE_TOOBIG;
  /* [bos] a [sep] b [append]: a with its lead, room for the rest after */
  in->ids = decodeTokens(a, m, fn, arg_a, bos, 0, (size_t)conn->max_tokens,
                         &n_a, &oom, &toobig, pzErr);
  if (in->ids)
    ids_b = decodeTokens(b, m, fn, arg_b, 0, 0, (size_t)conn->max_tokens,
                         &n_b, &oom, &toobig, pzErr);
  if (!in->ids || !ids_b) {
    sqlite3_free(in->ids);
    in->ids = NULL;
    return oom || !*pzErr ? SQLITE_NOMEM : toobig ? SQLITE_TOOBIG
                                                  : SQLITE_ERROR;
  }
  if (n_a == 0 || n_b == 0) {
    *pzErr = sqlite3_mprintf("%s: %s is empty", fn, n_a ? arg_b : arg_a);
    goto fail;
  }
  if (bos && (in->ids[1] == c->bos || ids_b[0] == c->bos)) {
    *pzErr = sqlite3_mprintf("%s: %s starts with bos (%d); leave it out: "
                             "the model puts bos in front itself",
                             fn, in->ids[1] == c->bos ? arg_a : arg_b,
                             c->bos);
    goto fail;
  }
  /* the token types switch after the first sep: one inside text_a would
  ** put the rest of it in the second segment */
  for (i = 0; c->token_types >= 2 && i < n_a; i++)
    if (in->ids[bos + i] == c->sep) {
      *pzErr = sqlite3_mprintf("%s: %s holds the separator (token %d at "
                               "position %d); a pair puts it between "
                               "%s and %s itself",
                               fn, arg_a, c->sep, i, arg_a, arg_b);
      goto fail;
    }
  rows = bos + n_a + 1 + n_b + append;
  if ((sqlite3_int64)n_a + n_b > conn->max_tokens) {
    *pzErr = sqlite3_mprintf("%s: %s and %s have %lld tokens, over "
                             "relattn_max_tokens() = %d",
                             fn, arg_a, arg_b, (sqlite3_int64)n_a + n_b,
                             conn->max_tokens);
    sqlite3_free(ids_b);
    sqlite3_free(in->ids);
    in->ids = NULL;
    return SQLITE_TOOBIG;
  }
  if ((c->pos.type == RELATTN_POS_ABSOLUTE ||
       c->pos.type == RELATTN_POS_REL_KEY ||
       c->pos.type == RELATTN_POS_REL_KEY_QUERY) &&
      rows > c->max_len && truncate_a &&
      c->max_len - (rows - n_a) >= 1) {
    /* Hugging Face's truncation 'only_first': text_a loses its last tokens */
    n_a = c->max_len - (rows - n_a);
    rows = c->max_len;
  }
  if ((c->pos.type == RELATTN_POS_ABSOLUTE ||
       c->pos.type == RELATTN_POS_REL_KEY ||
       c->pos.type == RELATTN_POS_REL_KEY_QUERY) &&
      rows > c->max_len) {
    /* no truncation: the caller shortens the texts it means to compare */
    *pzErr = sqlite3_mprintf(
        "%s: %s and %s make %d input rows (%d + %d tokens and %d "
        "special), over the model's position.%s = %d; shorten the texts",
        fn, arg_a, arg_b, rows, n_a, n_b, rows - n_a - n_b,
        c->pos.type == RELATTN_POS_ABSOLUTE ? "max_len"
                                            : "max_position_embeddings",
        c->max_len);
    sqlite3_free(ids_b);
    sqlite3_free(in->ids);
    in->ids = NULL;
    return SQLITE_TOOBIG;
  }
  {
    int32_t *all = sqlite3_realloc64(in->ids, 4 * (sqlite3_uint64)rows + 1);
    if (!all) {
      *pzErr = sqlite3_mprintf("%s: out of memory reading %s", fn, arg_b);
      sqlite3_free(ids_b);
      sqlite3_free(in->ids);
      in->ids = NULL;
      return SQLITE_NOMEM;
    }
    in->ids = all;
  }
  if (bos) in->ids[0] = c->bos;
  in->ids[bos + n_a] = c->sep;
  memcpy(in->ids + bos + n_a + 1, ids_b, 4 * (size_t)n_b);
  if (append) in->ids[rows - 1] = c->append;
  sqlite3_free(ids_b);
  in->n_seq = n_a + 1 + n_b;
  in->n = rows;
  in->bos = bos;
  in->append = append;
  return SQLITE_OK;
fail:
  sqlite3_free(ids_b);
  sqlite3_free(in->ids);
  in->ids = NULL;
  return SQLITE_ERROR;
}

/* ---- interrupt ----------------------------------------------------------- */

/* Polled by the pool on the calling thread between tasks, at most every
** WATCH_MS: has sqlite3_interrupt been called? SQLite 3.41 answers directly
** (sqlite3_is_interrupted); before it, a trivial statement stepped while the
** caller's statement runs fails with SQLITE_INTERRUPT (the flag is only
** cleared when no statement is active), as ext/scan.c does while it waits. */
#define WATCH_MS 10

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int watchCheck(void *arg) {
  relattn_watch *w = arg;
  double t = nowMs();
  int rc;
  if (t - w->last_ms < WATCH_MS) return 0;
  w->last_ms = t;
#ifdef sqlite3_is_interrupted
  if (sqlite3_libversion_number() >= 3041000)
    return sqlite3_is_interrupted(w->db);
#endif
  if (!w->ping) {
    /* the parser refuses to start once the flag is set */
    rc = sqlite3_prepare_v2(w->db, "SELECT 1", -1, &w->ping, NULL);
    if (rc != SQLITE_OK) return rc == SQLITE_INTERRUPT;
  }
  rc = sqlite3_step(w->ping);
  sqlite3_reset(w->ping);
  return rc == SQLITE_INTERRUPT;
}

void relattn_watch_begin(relattn_watch *w, relattn_conn *conn,
                         relattn_pool *pool) {
  memset(w, 0, sizeof *w);
  w->db = conn->db;
  w->pool = pool;
  w->last_ms = nowMs();
  if (pool) relattn_pool_set_cancel(pool, watchCheck, w);
}

int relattn_watch_end(relattn_watch *w) {
  int stopped = w->pool ? relattn_pool_cancelled(w->pool) : 0;
  if (w->pool) relattn_pool_set_cancel(w->pool, NULL, NULL);
  sqlite3_finalize(w->ping);
  w->ping = NULL;
  return stopped;
}

int relattn_interrupted(sqlite3 *db) {
  relattn_watch w;
  int rc;
  memset(&w, 0, sizeof w);
  w.db = db;
  w.last_ms = -1e300;
  rc = watchCheck(&w);
  sqlite3_finalize(w.ping);
  return rc;
}

/* ---- table-valued functions ---------------------------------------------- */

/* Finds the usable = constraints on the given hidden columns, in order, and
** hands them to xFilter as argv; idxNum has bit i set for cols[i]. A
** column of refuse (bit i: cols[i]) constrained only by unusable = terms
** makes the plan impossible (SQLITE_CONSTRAINT): its argument would come
** later, from another table. The plan with every column of required costs
** 1000, each optional column pushed down a tenth of that; rows: its rows. */
int relattn_tvf_best_index(sqlite3_index_info *info, const int *cols,
                           int n_cols, int required, int refuse, double rows) {
  int i, c, argv_i = 0, mask = 0, present = 0;
  int idx[8];
  for (c = 0; c < n_cols; c++) idx[c] = -1;
  for (i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *k = &info->aConstraint[i];
    for (c = 0; c < n_cols; c++) {
      if (k->iColumn != cols[c] || k->op != SQLITE_INDEX_CONSTRAINT_EQ)
        continue;
      present |= 1 << c;
      if (k->usable && idx[c] < 0) idx[c] = i;
    }
  }
  for (c = 0; c < n_cols; c++) {
    if (idx[c] < 0) {
      if ((refuse >> c) & 1 && (present >> c) & 1) return SQLITE_CONSTRAINT;
      continue;
    }
    mask |= 1 << c;
    info->aConstraintUsage[idx[c]].argvIndex = ++argv_i;
    info->aConstraintUsage[idx[c]].omit = 1;
  }
  info->idxNum = mask;
  info->estimatedCost = (mask & required) == required ? 1000.0 : 1e12;
  for (c = 0; c < n_cols; c++)
    if (!((required >> c) & 1) && (mask >> c) & 1) info->estimatedCost /= 10;
  info->estimatedRows = (sqlite3_int64)rows;
  return SQLITE_OK;
}

/* xConnect's work for an eponymous table-valued function: schema declared,
** a relattn_tvf holding the connection (aux). */
int relattn_tvf_connect(sqlite3 *db, void *aux, const char *schema,
                        sqlite3_vtab **ppVtab) {
  relattn_tvf *v;
  int rc = sqlite3_declare_vtab(db, schema);
  if (rc != SQLITE_OK) return rc;
  v = sqlite3_malloc64(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  v->conn = aux;
  *ppVtab = &v->base;
  return SQLITE_OK;
}

int relattn_tvf_disconnect(sqlite3_vtab *pVtab) {
  sqlite3_free(pVtab);
  return SQLITE_OK;
}

int relattn_tvf_open(size_t size, sqlite3_vtab_cursor **ppCursor) {
  sqlite3_vtab_cursor *c = sqlite3_malloc64(size);
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, size);
  *ppCursor = c;
  return SQLITE_OK;
}

int relattn_tvf_error(sqlite3_vtab *pVtab, int rc, char *zErr) {
  return relattn_vtab_error(((relattn_tvf *)pVtab)->conn->db, pVtab, rc, zErr);
}
