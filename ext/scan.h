/*
** scan.h: what the parts of relattn_scan share: the virtual table's
** arguments, as ext/scan_create.c parses and checks them at CREATE and
** ext/scan.c runs them at each query; the query's cursor, whose rows
** ext/scan_work.c runs on the worker threads.
*/
#ifndef RELATTN_SCAN_H
#define RELATTN_SCAN_H

#include "ext.h"
#include "generate.h"

typedef struct scan_vtab {
  sqlite3_vtab base; /* must be first */
  relattn_conn *conn;
  char *model;       /* model name */
  char *source;      /* source table or view */
  char *tokens;      /* its token column */
  char *text_b;      /* text_b=: its column of pairs' second texts, or NULL */
  char *id;          /* its INTEGER id column; NULL: rowid */
  char *schema;      /* where the virtual table lives ("main", "temp", ...) */
  char *name;        /* its own name */
  char *pooling_arg; /* pooling=, as given, or NULL */
  char *generate_arg; /* generate=: the generated column's options (JSON) */
  int pooling;       /* RELATTN_POOL_* of the embedding column */
  int busy;          /* running its own SQL: reading source or the model */
} scan_vtab;

/* xCreate, xConnect, xDisconnect (xDestroy too) of relattn_scan_module. */
int relattn_scan_create(sqlite3 *db, void *aux, int argc,
                        const char *const *argv, sqlite3_vtab **ppVtab,
                        char **pzErr);
int relattn_scan_connect(sqlite3 *db, void *aux, int argc,
                         const char *const *argv, sqlite3_vtab **ppVtab,
                         char **pzErr);
int relattn_scan_disconnect(sqlite3_vtab *p);

/* The database a name the scan uses is looked up in: the scan's own, or
** for a scan in temp, temp when the name is there, else main. */
const char *relattn_scan_schema_of(sqlite3 *db, const scan_vtab *vt,
                                   const char *name);
/* The model tables' database for relattn_store_acquire_in, or NULL when
** the bare names resolve there anyway. */
const char *relattn_scan_model_schema(sqlite3 *db, const scan_vtab *vt);

/* ---- a query: ext/scan.c reads the rows, ext/scan_work.c runs them ---- */

#define WANT_SCORE 1  /* score or perplexity: the LM head */
#define WANT_EMB 2    /* embedding */
#define WANT_TOKENS 4 /* n_tokens: the tokens are read, no model runs */
#define WANT_ERRORS 8 /* error: a bad row is a row, not a failure */
#define ID_DESC 16    /* ORDER BY id DESC: the source is read backwards */
#define WANT_CLASS 32 /* label, logit or prob: the classifier */
#define WANT_LABEL 64 /* label itself (a regression model has none) */
#define WANT_GEN 128  /* generated: relattn_generate on each row */
#define ERR_LEN 320
#define BATCH_TOKENS 256 /* pack rows into one pass up to this many tokens */
#define BATCH_ROWS 16
#define TRIM_BYTES ((size_t)64 << 20) /* keep a worker's scratch below this */

/* One row in flight. Filled by the connection's thread before it is added to
** the runner, results written by one worker before the runner marks it done
** (the runner's lock orders both). */
typedef struct scan_slot {
  sqlite3_int64 id;
  int32_t *tokens;        /* (n): the model's input, BOS in front if any */
  int n;                  /* 0: NULL tokens, nothing to compute */
  int n_tokens;           /* the sequence's own tokens */
  int status;             /* RELATTN_OK or an error in err */
  int fatal;              /* an error the error column cannot hold */
  double score;           /* sum of ln p over the scored tokens */
  float *embedding;       /* (d_model), into the cursor's emb block */
  float *logits;          /* (n_labels), into the cursor's logits block */
  int best;               /* classifier: the label of the largest logit */
  double prob;            /* its probability (none for regression) */
  sqlite3_int64 bytes;    /* of its source value: the progress's measure */
  atomic_llong layer_rows; /* n times the layers it has passed (workers add) */
  int counted;            /* in rows_done, tok_done and bytes_done */
  char *generated;         /* (generated_len) the row's new text, malloc'd */
  size_t generated_len;
  char err[ERR_LEN];
} scan_slot;

typedef struct scan_cursor scan_cursor;

typedef struct scan_worker {
  relattn_pool *pool;     /* one thread: scratch only */
  float *logprob;         /* (cap_lp) */
  int cap_lp;
  double *probs;          /* (n_labels) the classifier's probabilities */
} scan_worker;

struct scan_cursor {
  sqlite3_vtab_cursor base; /* must be first */
  scan_vtab *vt;
  const relattn_model *model; /* held from xFilter to the next or xClose */
  sqlite3_stmt *src;      /* SELECT id, tokens FROM source ... ORDER BY id */
  sqlite3_stmt *ping;     /* SELECT 1: sees sqlite3_interrupt */
  int want;               /* WANT_SCORE | WANT_EMB | WANT_CLASS: the model runs */
  int read_tokens;        /* tokens decoded (the model runs, or n_tokens) */
  int blas_prev, blas_held;
  /* the ring: rows seq head <= s < tail are in flight (item s of runner) */
  scan_slot *ring;        /* (cap) */
  float *emb;             /* (cap, d_model) */
  float *logits;          /* (cap, n_labels) with WANT_CLASS */
  int cap;
  sqlite3_int64 head, tail;
  sqlite3_int64 to_read;  /* rows still allowed by a LIMIT; -1: any */
  int src_done, eof;
  int keep_errors;        /* the error column is read: rows' errors are data */
  int failed;             /* an error was returned: the scan did not finish */
  /* the generated column: generate='s options, the memory bound */
  relattn_gen_opts gen;
  char *stops[16];
  int n_stops;
  sqlite3_int64 max_memory;
  /* workers */
  relattn_batch *runner;  /* src/batch.c: runs the ring's rows in batches */
  scan_worker *workers;   /* (n_workers), or one used inline when 0 threads */
  int n_workers;
  /* progress */
  int progress, tty;
  int asked;              /* relattn_progress(1): a last line even when quick */
  int job;                /* relattn_progress_job(): the lines are the job's */
  char job_label[64];
  sqlite3_int64 job_rows, job_all_rows, job_tokens, job_all_tokens;
  sqlite3_int64 total, rows_done, tok_done, tok_rows;
  sqlite3_int64 total_bytes, bytes_done; /* the source's token values */
  double t0, t_shown;
};

/* ext/scan_work.c: what runs off the connection's thread, and the progress
** line. None of it calls SQLite. */

/* Seconds on the monotonic clock. */
double relattn_scan_now(void);
/* The runner's batch function (relattn_batch_new's): runs rows
** [first, first + count) of the ring on worker `worker` (or inline); results
** and errors go into the slots. ctx is the scan_cursor. */
void relattn_scan_batch(void *ctx, int64_t first, int count, int worker);
/* Stops and joins the workers; the ring is then the caller's alone. */
void relattn_scan_stop_workers(scan_cursor *cur);
/* What a row of n tokens may hold at once on every worker; SIZE_MAX on
** overflow. */
size_t relattn_scan_row_bytes(const scan_cursor *cur, const relattn_model *m,
                              int n);
/* The progress line on stderr: final 0 while running, 1 at the end, 2 when
** the scan stopped early. */
void relattn_scan_progress_line(scan_cursor *cur, int final);
/* While a row is awaited: a line a second (4 a second on a terminal). */
void relattn_scan_progress_tick(scan_cursor *cur);

#endif /* RELATTN_SCAN_H */
