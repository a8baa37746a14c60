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

typedef struct relattn_cache_entry relattn_cache_entry; /* ext/store.c */

typedef struct relattn_conn {
  sqlite3 *db;
  int refs;               /* registrations holding this (xDestroy count) */
  int n_threads;          /* relattn_threads() */
  int max_tokens;         /* relattn_max_tokens() */
  int progress;           /* relattn_progress() */
  sqlite3_int64 max_memory; /* relattn_max_memory(): bytes one call may allocate */
  relattn_pool *pool;     /* n_threads workers, made on first use */
  relattn_cache_entry *cache; /* loaded models, see ext/store.c */
} relattn_conn;

/* The connection's pool with its current thread count; NULL when out of memory. */
relattn_pool *relattn_conn_pool(relattn_conn *conn);

/* Checks the memory a call is about to allocate (computed with overflow
** checks; SIZE_MAX when the computation overflowed) against
** relattn_max_memory(). Returns NULL when it fits, else an sqlite3_malloc'd
** message naming fn (a vtab's zErrMsg, or for relattn_result_toobig). */
char *relattn_memory_check(relattn_conn *conn, const char *fn, size_t need);
/* The same for scalar functions: returns 1 when it fits, else sets an
** SQLITE_TOOBIG error on ctx and returns 0. */
int relattn_memory_ok(sqlite3_context *ctx, relattn_conn *conn,
                      const char *fn, size_t need);

/* sqlite3_result_error with a printf-style message. */
void relattn_result_errorf(sqlite3_context *ctx, const char *fmt, ...);
/* Maps a src/ status to an SQL error code and sets the message. */
void relattn_result_status(sqlite3_context *ctx, int status, const char *msg);

#endif /* RELATTN_EXT_H */
