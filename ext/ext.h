/*
** ext.h: what the SQLite glue files share.
**
** One relattn_conn per connection holds the settings (threads, token limit,
** progress), the worker pool and the model cache. Every function gets it as
** its user data; it is freed when the connection closes.
*/
#ifndef RELATTN_EXT_H
#define RELATTN_EXT_H

#include <sqlite3ext.h>

#include "relattn.h"

#ifndef SQLITE_CORE
extern const sqlite3_api_routines *sqlite3_api;
#endif

#define RELATTN_SUBTYPE_VECTOR 223 /* float32 vectors, as sqlite-vec */
#define RELATTN_DEFAULT_MAX_TOKENS 65536
#define RELATTN_DEFAULT_MAX_MEMORY ((sqlite3_int64)2 << 30) /* bytes per call */
#define RELATTN_DEFAULT_CACHE_SIZE ((sqlite3_int64)1 << 30) /* bytes of models */

typedef struct relattn_cache_entry relattn_cache_entry; /* ext/store.c */

typedef struct relattn_conn {
  sqlite3 *db;
  int refs;               /* registrations holding this (xDestroy count) */
  int n_threads;          /* relattn_threads() */
  int max_tokens;         /* relattn_max_tokens() */
  int progress;           /* relattn_progress() */
  /* relattn_progress_job(): the job the scans' progress lines count toward;
  ** job_label "" when there is none */
  char job_label[64];
  sqlite3_int64 job_rows, job_all_rows, job_tokens, job_all_tokens;
  sqlite3_int64 max_memory; /* relattn_max_memory(): bytes one call may allocate */
  relattn_pool *pool;     /* n_threads workers, made on first use */
  relattn_cache_entry *cache; /* loaded models, see ext/store.c */
  sqlite3_int64 cache_size; /* relattn_cache_size(): bytes of models kept */
  struct scan_worker *scan_spare; /* a closed scan's workers (ext/scan.c) */
  sqlite3 *side;          /* read-only, on main's file: relattn_read_db */
  sqlite3 *json;          /* in memory, for JSON arguments: relattn_json_db */
  int n_scan_spare;
} relattn_conn;

/* The connection's pool with its current thread count; NULL when out of memory. */
relattn_pool *relattn_conn_pool(relattn_conn *conn);
/* A connection of the extension's own, in memory, for statements that read
** only their JSON arguments (json_each, json_tree open main, though they
** read nothing there); conn->db when it cannot be opened. */
sqlite3 *relattn_json_db(relattn_conn *conn);
/* Whether temp holds a table or view of that name (reads temp alone). */
int relattn_in_temp(sqlite3 *db, const char *table);
/* The connection to read table `table` of database `schema` (NULL: the bare
** name, temp then main) on, from inside a running statement: conn->db, or
** conn->side when that read would be the connection's first of main's file
** in this statement or transaction (see ext/util.c). The schema name is the
** same on both. */
sqlite3 *relattn_read_db(relattn_conn *conn, const char *schema,
                         const char *table);
/* Frees the workers a closed relattn_scan left the connection (ext/scan.c). */
void relattn_scan_spare_free(relattn_conn *conn);

/* ---- ext/util.c: the shared helpers -------------------------------------- */

/* Checks the memory a call is about to allocate (computed with overflow
** checks; SIZE_MAX when the computation overflowed) against
** relattn_max_memory(). Returns NULL when it fits, else an sqlite3_malloc'd
** message naming fn (a vtab's zErrMsg, or for relattn_result_toobig). */
char *relattn_memory_check(relattn_conn *conn, const char *fn, size_t need);
/* The same for scalar functions: returns 1 when it fits, else sets an
** SQLITE_TOOBIG error on ctx and returns 0. */
int relattn_memory_ok(sqlite3_context *ctx, relattn_conn *conn,
                      const char *fn, size_t need);

/* Errors. Every message handed to SQLite goes through one of these, which
** make it valid UTF-8 (clients decode it: Python raises UnicodeDecodeError
** instead of sqlite3.Error on bytes that are not). */
/* Sets msg (sqlite3_malloc'd, taken; NULL: out of memory) with code
** (SQLITE_ERROR, SQLITE_TOOBIG, SQLITE_INTERRUPT, ...).
** After sqlite3_interrupt, relattn_result_error and relattn_vtab_error set
** "<fn>: interrupted" with SQLITE_INTERRUPT instead, whatever failed. */
void relattn_result_error(sqlite3_context *ctx, int code, char *msg);
/* sqlite3_result_error with a printf-style message. */
void relattn_result_errorf(sqlite3_context *ctx, const char *fmt, ...);
/* Maps a src/ status to an SQL error code and sets the message. */
void relattn_result_status(sqlite3_context *ctx, int status, const char *msg);
/* A virtual table's zErrMsg (the old one freed, msg taken); returns code,
** or SQLITE_NOMEM when msg is NULL. */
int relattn_vtab_error(sqlite3 *db, sqlite3_vtab *vtab, int code, char *msg);
/* xBestIndex of a table-valued function whose arguments are the hidden
** columns cols (at most 8): = constraints in order as argv, idxNum their
** bits; required, refuse: bit masks over cols (ext/util.c). */
int relattn_tvf_best_index(sqlite3_index_info *info, const int *cols,
                           int n_cols, int required, int refuse, double rows);
/* The vtab of a table-valued function: no state beyond the connection. */
typedef struct relattn_tvf {
  sqlite3_vtab base; /* must be first */
  relattn_conn *conn;
} relattn_tvf;
/* Its xConnect's work: declares schema, makes the relattn_tvf of conn (the
** module's aux). */
int relattn_tvf_connect(sqlite3 *db, void *aux, const char *schema,
                        sqlite3_vtab **ppVtab);
/* Its xDisconnect. */
int relattn_tvf_disconnect(sqlite3_vtab *pVtab);
/* Its xOpen's work: a zeroed cursor of size bytes (base first). */
int relattn_tvf_open(size_t size, sqlite3_vtab_cursor **ppCursor);
/* Sets its message (relattn_vtab_error: SQLITE_INTERRUPT after an
** interrupt) and returns rc. */
int relattn_tvf_error(sqlite3_vtab *pVtab, int rc, char *zErr);
/* The SQLite code for a src/ status (RELATTN_ERR_TOOBIG: SQLITE_TOOBIG, ...). */
int relattn_status_code(int status);
/* The message for a statement of ours that failed with rc (sqlite3_malloc'd):
** "<fn>: interrupted" for SQLITE_INTERRUPT, else "<fn>: <sqlite3_errmsg>". */
char *relattn_sql_errmsg(sqlite3 *db, const char *fn, int rc);
/* Prepares sql or sets *pzErr (prefixed by what; a message already there is
** replaced) and returns NULL. */
sqlite3_stmt *relattn_prepare(sqlite3 *db, const char *sql, const char *what,
                              char **pzErr);
/* The error code of the connection's last failed call, never OK: what a
** failed prepare or step of ours returns to its caller. */
int relattn_sql_code(sqlite3 *db);

/* msg (sqlite3_malloc'd, taken) as valid UTF-8: itself when it already is,
** else a copy with each byte outside valid UTF-8 as \xNN (msg freed). NULL
** stays NULL. For messages that do not pass through the setters above (a
** virtual table's xCreate). */
char *relattn_utf8_message(char *msg);
/* Input bytes quoted in a message: valid UTF-8 as is, each control character
** and each byte outside valid UTF-8 as \xNN, cut on a character boundary
** with "..." past RELATTN_ECHO_BUF - 1 bytes. n < 0: up to the NUL. Returns
** buf, so it goes straight into a printf argument list. */
#define RELATTN_ECHO_BUF 100
const char *relattn_echo(char buf[RELATTN_ECHO_BUF], const void *p, int n);
/* The same into a buffer of cap >= 4 bytes (a message kept in a fixed
** buffer: cut on a character boundary, never in the middle of one). */
const char *relattn_echo_into(char *buf, size_t cap, const void *p, int n);

/* Does JSON text hold the escape \u0000, a NUL in a string? Strings from a
** config are refused with one: SQLite before 3.45 cuts a string there when
** it decodes it, and a C string ends there. Callers scan the JSON as
** written (json_extract(doc, path, path) keeps a string's escapes). */
int relattn_json_has_nul(const char *json);
/* The end of the message that refuses one, after what names the string. */
#define RELATTN_NUL_MSG " holds a NUL character (\\u0000), which relattn does not accept"

/* One wording for a bad or unknown model name (sqlite3_malloc'd). */
char *relattn_bad_model_msg(const char *fn);
char *relattn_no_model_msg(const char *fn, const char *name);
/* The index of the first tensor config c needs that is not among names
** (n_names of them, NULL entries ignored), -1 when none is missing, -2 when
** out of memory. Costs O(n_names) memory whatever the config asks for.
** relattn_missing_tensor_msg words it: "<what>: tensor 'x' is missing ...". */
int relattn_missing_tensor(const relattn_config *c, const char *const *names,
                           int n_names);
char *relattn_missing_tensor_msg(const relattn_config *c, int i,
                                 const char *what);

/* sqlite3_interrupt while a call computes. relattn_watch_begin installs a
** check on pool (relattn_pool_set_cancel) that the pool polls between tasks
** on the calling thread; relattn_watch_end removes it and answers whether it
** fired. relattn_interrupted: has sqlite3_interrupt been called on db while
** a statement runs? */
typedef struct relattn_watch {
  sqlite3 *db;
  relattn_pool *pool;
  sqlite3_stmt *ping;  /* SELECT 1, prepared on the first poll */
  double last_ms;      /* last poll */
} relattn_watch;
void relattn_watch_begin(relattn_watch *w, relattn_conn *conn,
                         relattn_pool *pool);
int relattn_watch_end(relattn_watch *w);
int relattn_interrupted(sqlite3 *db);

/* A token argument as a model's input, the rules of every function that runs
** a model in one place: NULL gives SQLITE_OK with n = 0 (the caller answers
** NULL); more than relattn_max_tokens() tokens is refused before decoding
** (SQLITE_TOOBIG); an empty sequence, an id outside the vocabulary (with a
** hint when a BLOB holds text) and a sequence that starts with bos (the
** model puts bos in front itself) are refused; then bos goes in front when
** the tokenizer has one. The caller frees in->ids with sqlite3_free. */
typedef struct relattn_input {
  int32_t *ids;  /* (n): [bos] + the sequence + [append] */
  int n;         /* model input length; 0 for a NULL argument */
  int n_seq;     /* the sequence's own tokens */
  int bos;       /* 1 when ids[0] is bos */
  int append;    /* 1 when ids[n - 1] is tokenizer.append, put there */
} relattn_input;
int relattn_model_input(relattn_conn *conn, const relattn_model *m,
                        sqlite3_value *v, const char *fn, const char *arg,
                        relattn_input *in, char **pzErr);
/* A pair of texts (or token BLOBs) as Hugging Face's pair template builds
** it: [bos] a [sep] b [append] ([CLS] a [SEP] b [SEP]); the forward pass
** gives the rows after the first sep token type 1. A model without
** tokenizer.sep takes no pair (an error naming model name); messages name
** the arguments arg_a and arg_b ("text_a", "text_b"); either NULL
** gives SQLITE_OK with in->n == 0. Over the model's positions is an error,
** or with truncate_a, text_a cut at its end to fit (Hugging Face's
** truncation 'only_first', what the zero-shot pipeline asks for). */
int relattn_model_pair_input(relattn_conn *conn, const relattn_model *m,
                             sqlite3_value *a, sqlite3_value *b,
                             const char *fn, const char *name,
                             const char *arg_a, const char *arg_b,
                             int truncate_a, relattn_input *in,
                             char **pzErr);

/* ---- ext/config.c: a model's native config ----------------------------- */

/* Decodes a config (JSON text, the keys of docs/reference.md) into *cfg and
** checks it (relattn_config_check). Errors start with what, e.g.
** "relattn_import: config". Returns an SQLite code with *pzErr set. */
int relattn_config_decode(sqlite3 *db, const char *json, relattn_config *cfg,
                          const char *what, char **pzErr);

/* ---- ext/jdoc.c: the keys of a JSON document, for relattn_import -------- */

/* One document; the first failure stops the reads after it (each then
** returns its default) and stays in rc, its message in *pzErr, which names
** relattn_import, what and the key. */
typedef struct relattn_jdoc {
  sqlite3 *db;
  sqlite3_stmt *st; /* SELECT json_type(?1, ?2), json_extract(?1, ?2),
                    ** the value as written (json_extract(?1, ?2, ?2)) */
  const char *json; /* the document */
  const char *what; /* "config_json", "tokenizer_config_json" */
  char **pzErr;
  int rc;           /* the first failure (SQLite code), or SQLITE_OK */
} relattn_jdoc;
int relattn_jdoc_open(relattn_jdoc *j, sqlite3 *db, const char *json,
                      const char *what, char **pzErr);
void relattn_jdoc_close(relattn_jdoc *j);
/* Steps on key (a top-level key, or a path from "$"): its JSON type
** ("null" when absent), or NULL after an error. The value is then column 1
** of j->st. */
const char *relattn_jdoc_step(relattn_jdoc *j, const char *key);
/* Refuses the value stepped on, named name ("'key'"), when a string in it
** holds a NUL; 1 when it did. */
int relattn_jdoc_nul(relattn_jdoc *j, const char *name);
/* "'key' must be <want>, not <type>". */
void relattn_jdoc_bad(relattn_jdoc *j, const char *key, const char *want,
                      const char *type);
/* An integer, a number, true or false (-1 for a def of "no value"), a
** string (sqlite3_malloc'd; with obj_content, an object's "content" too):
** absent or null gives def, or NULL. */
int relattn_jdoc_int(relattn_jdoc *j, const char *key, int def);
double relattn_jdoc_num(relattn_jdoc *j, const char *key, double def);
int relattn_jdoc_bool(relattn_jdoc *j, const char *key, int def);
char *relattn_jdoc_str(relattn_jdoc *j, const char *key, int obj_content);
/* A size read from key: 1 to max, else refused naming key. */
void relattn_jdoc_size(relattn_jdoc *j, const char *key, int v, int max);
/* Appends s as a JSON string. */
void relattn_json_string(sqlite3_str *out, const char *s);

/* ---- ext/tokfile.c: the tokenizer file stored with a model ---------------- */

/* Is name a tokenizer file's tensor name ("tokenizer." ...)? */
int relattn_is_tokfile(const char *name);
/* Checks a tokenizer file's row (name, dtype, shape as JSON text) against
** config c and parses it into *tok. NULL when it is good, else a message
** (sqlite3_malloc'd) starting with what. */
char *relattn_tokfile_parse(const relattn_config *c, const char *name,
                            const char *dtype, const char *shape,
                            const void *data, size_t bytes, const char *what,
                            relattn_tokenizer **tok);
/* After a model's rows are read: the byte tokenizer when the config asks
** for it, else an error when its file was missing. NULL when m->tok is set. */
char *relattn_tokfile_finish(relattn_model *m, const char *what);
/* tokenizer.split_special: gives tok the config's special ids and
** tokenizer.added_tokens (from config, the JSON c was decoded from).
** NULL when good (or split_special is false), else a message starting
** with what. */
char *relattn_tokfile_special(sqlite3 *db, const char *config,
                              const relattn_config *c, relattn_tokenizer *tok,
                              const char *what);

#endif /* RELATTN_EXT_H */
