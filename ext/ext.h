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

typedef struct relattn_cache_entry relattn_cache_entry; /* ext/store.c */

typedef struct relattn_conn {
  sqlite3 *db;
  int refs;               /* registrations holding this (xDestroy count) */
  int n_threads;          /* relattn_threads() */
  int max_tokens;         /* relattn_max_tokens() */
  int progress;           /* relattn_progress() */
  relattn_pool *pool;     /* n_threads workers, made on first use */
  relattn_cache_entry *cache; /* loaded models, see ext/store.c */
} relattn_conn;

/* The connection's pool with its current thread count; NULL when out of memory. */
relattn_pool *relattn_conn_pool(relattn_conn *conn);

/* sqlite3_result_error with a printf-style message. */
void relattn_result_errorf(sqlite3_context *ctx, const char *fmt, ...);
/* Maps a src/ status to an SQL error code and sets the message. */
void relattn_result_status(sqlite3_context *ctx, int status, const char *msg);

#endif /* RELATTN_EXT_H */
