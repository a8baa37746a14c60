/*
** scan.c: relattn_scan, the virtual table for batch jobs over stored corpora.
**
**   CREATE VIRTUAL TABLE temp.job
**     USING relattn_scan(model='tiny', source='docs', tokens='body' [, id='doc_id']);
**   SELECT id, n_tokens, score, perplexity, embedding FROM temp.job WHERE id > 1000;
**   (text_b='hyp': each row the pair [CLS] body [SEP] hyp [SEP], as
**   relattn_classify(model, body, hyp); a NULL in either gives NULL results)
**
** Columns: id (the source's id column, default its rowid), n_tokens (the
** sequence's own tokens, BOS not counted), score and perplexity (as
** relattn_score and relattn_perplexity), embedding (as relattn_embed: float32
** [d_model], subtype 223; pooled as the optional pooling= argument says:
** mean, cls, pooler; without it, the model's sentence-transformers vector
** when its config has "sentence", else mean). A NULL token value gives NULL
** results.
** Hidden: label, logit, prob (a classifier's best label, as relattn_classify,
** with its logit and prob as relattn_labels gives them), and error. A bad row (its tokens, its length, a result not finite)
** fails the statement, unless the query reads error: then it is a row with
** NULL results and its message there, and the scan goes on.
**
**   SELECT id, score, error FROM temp.job;      -- a job one row cannot end
**   SELECT id, label, prob FROM temp.job;       -- a classifier model
**
** HOW IT WORKS
** CREATE parses and checks the arguments (ext/scan_create.c). Each query
** runs here. xFilter acquires the model once: every row of one scan comes from that
** version, whatever another connection imports meanwhile. It then runs
**   SELECT id, tokens FROM source WHERE id <op> ? ... ORDER BY id
** with the id constraints xBestIndex pushed down (=, >, >=, <, <=; LIMIT and
** OFFSET as a cap on the rows read, when nothing is left to filter or sort).
** The connection's thread reads rows ahead into a ring of
** slots (bounded: memory stays flat on any corpus) and hands them to the
** ordered batch runner of src/batch.c: consecutive rows up to BATCH_ROWS and
** BATCH_TOKENS form one relattn_forward_batch call, run by one of
** relattn_threads() worker threads, each single-threaded with its own
** one-thread relattn_pool holding its scratch. Which rows share a call
** depends on the rows alone, and a row's result does not depend on what
** shares its call anyway (src/forward.c, DETERMINISM): the scan gives the
** same bits as relattn_score / relattn_embed, at any thread count and
** reading pace. Sharing a call saves hand-offs between threads and per-call
** set-up, and where relattn's own product kernels run the layers, the rows
** of a call share their products too, with the same bits (src/forward.c,
** TILES). Measured on OpenBLAS products, one thread, d_model 256, 4 layers,
** tokens per CPU second (5 interleaved runs, medians): 10-40-token rows 6366
** packed, 5317 one row a call, 8186 when packed rows shared OpenBLAS's GEMMs
** (results then depended on the packing); 50-500-token rows 9014, 8289 and
** 9026. xNext waits only for the next row in
** order, so rows come out in id order as soon as they are done. Only the
** columns the query reads are computed (colUsed): no forward pass for id /
** n_tokens alone, no LM head for embedding alone.
**
** Cancellation: while waiting, xNext steps a trivial statement every 50 ms;
** after sqlite3_interrupt it fails with SQLITE_INTERRUPT. Ending the scan
** (an error, a LIMIT, xClose) cancels each worker's pool, so a forward pass
** in flight stops within one of its tasks; the workers are joined and
** everything is freed. A scan run inline (WHERE id = ?) polls the
** interrupt itself between tasks, as the scalar functions do.
**
** Progress (relattn_progress(1), or stderr is a terminal): rows done / total,
** the share of the tokens, tokens/s and ETA on stderr, a line per second
** (redrawn in place on a tty; there, a scan done within a second prints
** nothing). Lines come from xNext's wait, so a long row does not silence
** them: the forward pass counts each row's layers passed (relattn_fwd's
** layer_rows), and a row in flight counts for that share of its tokens.
*/
#include "ext.h"
#include "functions.h"
#include "scan.h"
#include "generate.h"

SQLITE_EXTENSION_INIT3

#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { COL_ID, COL_NTOK, COL_SCORE, COL_PPL, COL_EMB, COL_ERR, COL_LABEL,
       COL_LOGIT, COL_PROB, COL_GEN };
#define WANT_SCORE 1  /* score or perplexity: the LM head */
#define WANT_EMB 2    /* embedding */
#define WANT_TOKENS 4 /* n_tokens: the tokens are read, no model runs */
#define WANT_ERRORS 8 /* error: a bad row is a row, not a failure */
#define ID_DESC 16    /* ORDER BY id DESC: the source is read backwards */
#define WANT_CLASS 32 /* label, logit or prob: the classifier */
#define WANT_LABEL 64 /* label itself (a regression model has none) */
#define WANT_GEN 128  /* generated: relattn_generate on each row */
#define ERR_LEN 320
#define POLL_MS 50    /* interrupt check while waiting for a row */
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
  sqlite3_int64 total, rows_done, tok_done, tok_rows;
  sqlite3_int64 total_bytes, bytes_done; /* the source's token values */
  double t0, t_shown;
};

/* ---- planning ------------------------------------------------------------ */

/* idxStr holds one letter per argument of xFilter, in order:
**   E =, G >, g >=, L <, l <=  (on id), N limit, O offset.
** idxNum holds the WANT_* bits from colUsed.
**
** LIMIT and OFFSET: SQLite offers them whenever every WHERE term is on this
** table and ORDER BY names only its columns, whether or not the table can
** honour those terms itself (vtab.html, "LIMIT and OFFSET"). They bound the
** rows read only when nothing is left for SQLite to do after us: every other
** constraint is one we apply, and ORDER BY is absent or ours (id, either way).
** Otherwise a cap would cut rows before SQLite filters or sorts them. */
static int scanBestIndex(sqlite3_vtab *tab, sqlite3_index_info *info) {
  char letters[64];
  int i, n = 0, has_eq = 0, has_range = 0, has_limit = 0;
  int all_ours = 1, i_limit = -1, i_offset = -1;
  int want = 0;
  double rows = 1e6;
  (void)tab;
  for (i = 0; i < info->nConstraint && n < (int)sizeof letters - 3; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    char letter = 0;
    if (c->op == SQLITE_INDEX_CONSTRAINT_LIMIT) {
      if (c->usable) i_limit = i;
      continue;
    }
    if (c->op == SQLITE_INDEX_CONSTRAINT_OFFSET) {
      if (c->usable) i_offset = i;
      continue;
    }
    if (c->usable && (c->iColumn == COL_ID || c->iColumn == -1)) {
      switch (c->op) {
        case SQLITE_INDEX_CONSTRAINT_EQ: letter = 'E'; has_eq = 1; break;
        case SQLITE_INDEX_CONSTRAINT_GT: letter = 'G'; has_range = 1; break;
        case SQLITE_INDEX_CONSTRAINT_GE: letter = 'g'; has_range = 1; break;
        case SQLITE_INDEX_CONSTRAINT_LT: letter = 'L'; has_range = 1; break;
        case SQLITE_INDEX_CONSTRAINT_LE: letter = 'l'; has_range = 1; break;
        default: break;
      }
    }
    if (!letter) {
      all_ours = 0;
      continue;
    }
    letters[n++] = letter;
    info->aConstraintUsage[i].argvIndex = n;
    /* SQLite checks again: the source's own comparison may differ in
    ** affinity from ours. */
    info->aConstraintUsage[i].omit = 0;
  }
  if (i < info->nConstraint) all_ours = 0; /* more than idxStr can hold */
  /* ORDER BY id, either way, is the order the source is read in, so
  ** ORDER BY id DESC LIMIT 10 (the newest rows) reads ten rows. */
  if (info->nOrderBy == 1 && (info->aOrderBy[0].iColumn == COL_ID ||
                              info->aOrderBy[0].iColumn == -1)) {
    info->orderByConsumed = 1;
    if (info->aOrderBy[0].desc) want |= ID_DESC;
  }
  if (all_ours && i_limit >= 0 &&
      (info->nOrderBy == 0 || info->orderByConsumed)) {
    /* Not omitted: SQLite still counts the rows out and skips the OFFSET;
    ** here they only cap how many rows are read. */
    letters[n++] = 'N';
    info->aConstraintUsage[i_limit].argvIndex = n;
    has_limit = 1;
    if (i_offset >= 0) {
      letters[n++] = 'O';
      info->aConstraintUsage[i_offset].argvIndex = n;
    }
  }
  letters[n] = 0;
  if (info->colUsed & (((sqlite3_uint64)1 << COL_SCORE) |
                       ((sqlite3_uint64)1 << COL_PPL)))
    want |= WANT_SCORE;
  if (info->colUsed & ((sqlite3_uint64)1 << COL_EMB)) want |= WANT_EMB;
  if (info->colUsed & ((sqlite3_uint64)1 << COL_NTOK)) want |= WANT_TOKENS;
  if (info->colUsed & ((sqlite3_uint64)1 << COL_ERR)) want |= WANT_ERRORS;
  if (info->colUsed & (((sqlite3_uint64)1 << COL_LABEL) |
                       ((sqlite3_uint64)1 << COL_LOGIT) |
                       ((sqlite3_uint64)1 << COL_PROB)))
    want |= WANT_CLASS;
  if (info->colUsed & ((sqlite3_uint64)1 << COL_LABEL)) want |= WANT_LABEL;
  if (info->colUsed & ((sqlite3_uint64)1 << COL_GEN)) want |= WANT_GEN;
  info->idxNum = want;
  if (n) {
    info->idxStr = sqlite3_mprintf("%s", letters);
    if (!info->idxStr) return SQLITE_NOMEM;
    info->needToFreeIdxStr = 1;
  }
  if (has_eq) rows = 1;
  else if (has_range) rows = 1e5;
  if (has_limit && rows > 100) rows = 100;
  info->estimatedRows = (sqlite3_int64)rows;
  /* Each row is a forward pass: far costlier than a table row. */
  info->estimatedCost = rows * (want ? 1000.0 : 10.0);
  if (has_eq) info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
  return SQLITE_OK;
}

/* ---- workers ------------------------------------------------------------- */

static double nowSeconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The generated column of rows [first, first + k): relattn_generate on
** each, on the worker's pool (src/generate.c; its text as
** relattn_gen_text makes it). */
static void scanGenerate(scan_cursor *cur, scan_worker *w, sqlite3_int64 first,
                         int k) {
  int i;
  for (i = 0; i < k; i++) {
    scan_slot *s = &cur->ring[(first + i) % cur->cap];
    const int n = relattn_gen_input_n(cur->model, s->n);
    if (s->status != RELATTN_OK || s->n == 0) continue;
    s->status = relattn_gen_text(cur->model, &cur->gen, cur->stops,
                                 cur->n_stops, s->tokens, n, w->pool,
                                 cur->max_memory, &s->generated,
                                 &s->generated_len, s->err, ERR_LEN);
  }
}

/* Runs rows [first, first + k) as one packed forward pass, on a worker (or
** inline). Touches no SQLite API: results and errors go into the slots. */
static void scanRun(scan_cursor *cur, scan_worker *w, sqlite3_int64 first,
                    int k) {
  relattn_fwd f[BATCH_ROWS];
  scan_slot *slot[BATCH_ROWS];
  char err[ERR_LEN];
  const int fwd = cur->want & ~WANT_GEN;
  int count = 0, i, j, rc, total = 0, off = 0;
  if (cur->want & WANT_GEN) scanGenerate(cur, w, first, k);
  for (i = 0; i < k; i++) {
    scan_slot *s = &cur->ring[(first + i) % cur->cap];
    s->score = 0;
    /* Errors found on reading, NULL tokens, one token without BOS when only
    ** the score is read: nothing to run. */
    if (s->status != RELATTN_OK || s->n == 0 || !fwd) continue;
    if (fwd == WANT_SCORE && s->n < 2) continue;
    slot[count] = s;
    memset(&f[count], 0, sizeof f[count]);
    f[count].tokens = s->tokens;
    f[count].n = s->n;
    if (cur->want & WANT_EMB)
      relattn_pooling_request(&f[count], cur->model, cur->vt->pooling,
                              s->embedding);
    if (cur->want & WANT_CLASS) f[count].logits = s->logits;
    f[count].layer_rows = &s->layer_rows;
    total += s->n;
    count++;
  }
  if (!count) return;
  if (cur->want & WANT_SCORE) {
    if (w->cap_lp < total) {
      relattn_free(w->logprob);
      w->cap_lp = 0;
      w->logprob = relattn_alloc(sizeof(float) * (size_t)total);
      if (!w->logprob) {
        for (i = 0; i < count; i++) {
          slot[i]->status = RELATTN_ERR_NOMEM;
          snprintf(slot[i]->err, ERR_LEN, "out of memory for %d tokens",
                   total);
        }
        return;
      }
      w->cap_lp = total;
    }
    for (i = 0; i < count; i++) {
      if (f[i].n > 1) f[i].logprob = w->logprob + off;
      off += f[i].n;
    }
  }
  err[0] = 0;
  rc = relattn_forward_batch(cur->model, f, count, w->pool, err, sizeof err);
  for (i = 0; i < count; i++) {
    if (rc == RELATTN_OK &&
        (slot[i]->status = relattn_forward_check_finite(
             &f[i], &cur->model->cfg, slot[i]->err, ERR_LEN)) !=
            RELATTN_OK)
      continue;
    if (rc != RELATTN_OK) {
      slot[i]->status = rc;
      memcpy(slot[i]->err, err, ERR_LEN);
    } else {
      if (f[i].logprob) {
        double sum = 0;
        for (j = 0; j < f[i].n - 1; j++) sum += f[i].logprob[j];
        slot[i]->score = sum;
      }
      if (f[i].logits) {
        /* as relattn_classify and relattn_labels read them */
        const relattn_config *c = &cur->model->cfg;
        slot[i]->best = relattn_label_best(f[i].logits, c->n_labels);
        slot[i]->prob = relattn_label_probs(w->probs, f[i].logits,
                                            c->n_labels, c->problem_type)
                            ? w->probs[slot[i]->best]
                            : 0;
      }
    }
  }
  /* A rare huge sequence should not pin its scratch for the whole scan. */
  if (relattn_forward_memory(cur->model, total, count, 1) > TRIM_BYTES)
    relattn_pool_trim(w->pool, TRIM_BYTES);
}

/* The runner's batch function: runs on one of its threads (or inline). */
static void scanBatch(void *ctx, int64_t first, int count, int worker) {
  scan_cursor *cur = ctx;
  scanRun(cur, &cur->workers[worker], first, count);
}

/* Stops and joins the workers; the ring is then the caller's alone. */
static void scanStopWorkers(scan_cursor *cur) {
  int i;
  /* a forward pass in flight stops within a task, not at its end */
  for (i = 0; i < cur->n_workers; i++) relattn_pool_cancel(cur->workers[i].pool);
  relattn_batch_free(cur->runner);
  cur->runner = NULL;
}

static void scanFreeSlots(scan_cursor *cur) {
  sqlite3_int64 s;
  for (s = cur->head; s < cur->tail; s++) {
    sqlite3_free(cur->ring[s % cur->cap].tokens);
    cur->ring[s % cur->cap].tokens = NULL;
    free(cur->ring[s % cur->cap].generated);
    cur->ring[s % cur->cap].generated = NULL;
  }
  cur->head = cur->tail = 0;
}

static void scanProgressLine(scan_cursor *cur, int final);

/* Ends a scan: workers joined, rows freed, model released, BLAS restored. */
static void scanReset(scan_cursor *cur) {
  scanStopWorkers(cur);
  /* Left early: "(stopped)" when the scan failed (an error, an interrupt);
  ** a LIMIT met or a client done reading is a normal end. */
  if (cur->progress && cur->t0 > 0 && !cur->eof &&
      (cur->asked || cur->t_shown > cur->t0))
    scanProgressLine(cur, cur->failed ? 2 : 1);
  scanFreeSlots(cur);
  sqlite3_finalize(cur->src);
  cur->src = NULL;
  if (cur->model) relattn_store_release(cur->vt->conn, cur->model);
  cur->model = NULL;
  if (cur->blas_held) relattn_blas_restore(cur->blas_prev);
  cur->blas_held = 0;
  sqlite3_free(cur->ring);
  cur->ring = NULL;
  sqlite3_free(cur->emb);
  cur->emb = NULL;
  sqlite3_free(cur->logits);
  cur->logits = NULL;
  cur->t0 = 0;
  while (cur->n_stops > 0) sqlite3_free(cur->stops[--cur->n_stops]);
}

/* ---- cursor -------------------------------------------------------------- */

static int scanOpen(sqlite3_vtab *tab, sqlite3_vtab_cursor **ppCursor) {
  scan_cursor *cur = sqlite3_malloc64(sizeof *cur);
  if (!cur) return SQLITE_NOMEM;
  memset(cur, 0, sizeof *cur);
  cur->vt = (scan_vtab *)tab;
  *ppCursor = &cur->base;
  return SQLITE_OK;
}

static int scanClose(sqlite3_vtab_cursor *p) {
  scan_cursor *cur = (scan_cursor *)p;
  int i;
  scanReset(cur);
  for (i = 0; i < cur->n_workers; i++) {
    relattn_pool_free(cur->workers[i].pool);
    relattn_free(cur->workers[i].logprob);
    sqlite3_free(cur->workers[i].probs);
  }
  sqlite3_free(cur->workers);
  sqlite3_finalize(cur->ping);
  sqlite3_free(cur);
  return SQLITE_OK;
}

static int scanError(scan_cursor *cur, int rc, const char *fmt, ...) {
  va_list ap;
  char *msg;
  va_start(ap, fmt);
  msg = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  cur->failed = 1;
  return relattn_vtab_error(cur->vt->conn->db, &cur->vt->base, rc, msg);
}

/* Reads source rows into the ring while there is room. Token errors are
** kept in the row's slot and reported when its turn comes, so the rows
** before it are returned whatever the read-ahead. */
/* What a row of n tokens may hold: on every worker at once (each may run a
** row that long, or a batch of BATCH_TOKENS), its own one-worker pool's
** scratch for the forward pass and its log-prob buffer, so the per-call
** bound covers the whole scan. SIZE_MAX on overflow. */
static size_t scanRowBytes(const scan_cursor *cur, const relattn_model *m,
                           int n) {
  int rows = n > BATCH_TOKENS ? n : BATCH_TOKENS;
  size_t one = relattn_forward_memory(m, rows, BATCH_ROWS, 1), all;
  if (!one || !relattn_add_ok(one, sizeof(float) * (size_t)rows, &one) ||
      !relattn_mul_ok(one, (size_t)(cur->n_workers > 1 ? cur->n_workers : 1),
                      &all))
    return SIZE_MAX;
  return all;
}

static int scanFill(scan_cursor *cur) {
  const relattn_model *m = cur->model;
  while (!cur->src_done && cur->tail - cur->head < cur->cap &&
         cur->to_read != 0) {
    scan_slot *s;
    int rc = sqlite3_step(cur->src);
    if (rc == SQLITE_DONE) {
      cur->src_done = 1;
      break;
    }
    if (rc != SQLITE_ROW) {
      const char *msg;
      rc = sqlite3_reset(cur->src);
      cur->src_done = 1;
      msg = sqlite3_errmsg(cur->vt->conn->db);
      /* A scan inside the source said what went wrong, naming itself. */
      if (strncmp(msg, "relattn_scan: ", 14) == 0)
        return scanError(cur, rc ? rc : SQLITE_ERROR, "%s", msg);
      return scanError(cur, rc ? rc : SQLITE_ERROR,
                       "relattn_scan: reading '%s': %s", cur->vt->source, msg);
    }
    s = &cur->ring[cur->tail % cur->cap];
    s->status = RELATTN_OK;
    s->err[0] = 0;
    s->tokens = NULL;
    s->generated = NULL;
    s->n = s->n_tokens = 0;
    s->score = 0;
    s->id = sqlite3_column_int64(cur->src, 0);
    s->fatal = 0;
    s->counted = 0;
    s->bytes = cur->read_tokens ? sqlite3_column_bytes(cur->src, 1) : 0;
    atomic_store(&s->layer_rows, 0);
    if (sqlite3_column_type(cur->src, 0) != SQLITE_INTEGER) {
      int type = sqlite3_column_type(cur->src, 0);
      char *msg = sqlite3_mprintf(
          "relattn_scan: '%s' has a row whose id is %s, not an integer",
          cur->vt->source,
          type == SQLITE_NULL    ? "NULL"
          : type == SQLITE_FLOAT ? "REAL"
          : type == SQLITE_TEXT  ? "TEXT"
                                 : "a BLOB");
      /* no id to file the row's error under, nor to resume after */
      s->fatal = 1;
      s->status = RELATTN_ERR_ARG;
      /* cut on a character boundary, as every message kept in a slot */
      relattn_echo_into(s->err, ERR_LEN,
                        msg ? msg : "relattn_scan: out of memory", -1);
      sqlite3_free(msg);
    } else if (cur->read_tokens &&
               sqlite3_column_type(cur->src, 1) != SQLITE_NULL &&
               !(cur->vt->text_b &&
                 sqlite3_column_type(cur->src, 2) == SQLITE_NULL)) {
      /* the rules of every model function: relattn_model_input, or with
      ** text_b= the pair's, relattn_model_pair_input */
      char *arg = sqlite3_mprintf("%s of id %lld", cur->vt->tokens, s->id);
      char *arg_b = cur->vt->text_b ? sqlite3_mprintf("%s of id %lld",
                                                       cur->vt->text_b, s->id)
                                     : NULL;
      char *zErr = NULL;
      relattn_input in;
      int rc = !arg || (cur->vt->text_b && !arg_b) ? SQLITE_NOMEM
               : cur->vt->text_b
                   ? relattn_model_pair_input(
                         cur->vt->conn, m, sqlite3_column_value(cur->src, 1),
                         sqlite3_column_value(cur->src, 2), "relattn_scan",
                         cur->vt->model, arg, arg_b, 0, &in, &zErr)
                   : relattn_model_input(cur->vt->conn, m,
                                         sqlite3_column_value(cur->src, 1),
                                         "relattn_scan", arg, &in, &zErr);
      sqlite3_free(arg);
      sqlite3_free(arg_b);
      if (rc == SQLITE_OK && cur->want &&
          (zErr = relattn_memory_check(cur->vt->conn, "relattn_scan",
                                       scanRowBytes(cur, m, in.n))) != NULL) {
        char *why = zErr;
        zErr = sqlite3_mprintf("relattn_scan: %s of id %lld%s",
                               cur->vt->tokens, s->id, why + 12);
        sqlite3_free(why);
        sqlite3_free(in.ids);
        rc = SQLITE_TOOBIG;
      }
      if (rc != SQLITE_OK) {
        s->status = rc == SQLITE_TOOBIG   ? RELATTN_ERR_TOOBIG
                    : rc == SQLITE_NOMEM ? RELATTN_ERR_NOMEM
                                         : RELATTN_ERR_ARG;
        relattn_echo_into(s->err, ERR_LEN,
                          zErr ? zErr : "relattn_scan: out of memory", -1);
        sqlite3_free(zErr);
      } else {
        s->tokens = in.ids;
        s->n_tokens = in.n_seq;
        s->n = in.n;
      }
    }
    if (cur->to_read > 0) cur->to_read--;
    relattn_batch_add(cur->runner, s->n);
    cur->tail++;
  }
  /* The input's end closes the last batch (more rows would join it). */
  if (cur->src_done || cur->to_read == 0) relattn_batch_flush(cur->runner);
  return SQLITE_OK;
}

/* Has sqlite3_interrupt been called? A trivial statement fails then. */
static int scanInterrupted(scan_cursor *cur) {
  int rc;
  if (!cur->ping) {
    /* the parser refuses to start once the flag is set */
    rc = sqlite3_prepare_v2(cur->vt->conn->db, "SELECT 1", -1, &cur->ping,
                            NULL);
    if (rc != SQLITE_OK) return rc == SQLITE_INTERRUPT;
  }
  rc = sqlite3_step(cur->ping);
  sqlite3_reset(cur->ping);
  return rc == SQLITE_INTERRUPT;
}

/* The work done so far, rows in flight included: each counts the fraction of
** the model's layers it has passed (a row of 50 KB takes minutes; the line
** must not wait for it). Tokens and source bytes move together, so the ETA
** is the source's bytes left at the bytes-per-second rate so far. */
static void scanWorkDone(scan_cursor *cur, double *tokens, double *bytes,
                         double *rows) {
  const int L = cur->model ? cur->model->cfg.n_layers : 0;
  sqlite3_int64 i;
  *tokens = (double)cur->tok_done;
  *bytes = (double)cur->bytes_done;
  *rows = (double)cur->rows_done;
  for (i = cur->head; cur->ring && L > 0 && i < cur->tail; i++) {
    scan_slot *s = &cur->ring[i % cur->cap];
    double part;
    if (s->counted || s->n == 0) continue;
    part = (double)atomic_load(&s->layer_rows) / ((double)s->n * L);
    if (part > 1) part = 1;
    *tokens += part * s->n_tokens;
    *bytes += part * (double)s->bytes;
    *rows += part;
  }
}

static void scanProgressLine(scan_cursor *cur, int final) {
  double t = nowSeconds(), el = t - cur->t0, tps, rps, tokens, bytes, rows;
  char eta[32] = "", pct[48] = "";
  if (el <= 0) el = 1e-9;
  scanWorkDone(cur, &tokens, &bytes, &rows);
  tps = tokens / el;
  rps = (double)cur->rows_done / el;
  if (!final) {
    double left = -1;
    if (cur->total_bytes > 0 && bytes > 0)
      left = ((double)cur->total_bytes - bytes) / (bytes / el);
    else if (cur->total > 0 && rows > 0)
      left = ((double)cur->total - rows) / (rows / el);
    if (left >= 0) {
      long s = (long)(left + 0.5);
      snprintf(eta, sizeof eta, ", ETA %ld:%02ld:%02ld", s / 3600,
               s / 60 % 60, s % 60);
    }
    if (cur->total_bytes > 0)
      snprintf(pct, sizeof pct, " (%.1f%% of the tokens)",
               100.0 * bytes / (double)cur->total_bytes);
    else if (cur->total > 0)
      snprintf(pct, sizeof pct, " (%.1f%%)",
               100.0 * (double)cur->rows_done / (double)cur->total);
  }
  if (final)
    fprintf(stderr, "%srelattn_scan: %lld rows in %.1f s, %.0f rows/s, %.0f "
            "tokens/s%s\n", cur->tty ? "\r\033[K" : "",
            (long long)cur->rows_done, el, rps, tps,
            final == 2 ? " (stopped)" : "");
  else if (cur->total >= 0)
    fprintf(stderr, "%srelattn_scan: %lld/%lld rows%s, %.0f tokens/s%s%s",
            cur->tty ? "\r\033[K" : "", (long long)cur->rows_done,
            (long long)cur->total, pct, tps, eta, cur->tty ? "" : "\n");
  fflush(stderr);
  cur->t_shown = t;
}

/* While a row is awaited: a line a second (4 a second on a terminal). */
static void scanProgressTick(scan_cursor *cur) {
  if (cur->progress && nowSeconds() - cur->t_shown >= (cur->tty ? 0.25 : 1.0))
    scanProgressLine(cur, 0);
}

/* Makes the head slot the current row: reads ahead, waits for it (or runs it
** here when there are no worker threads). */
static int scanAdvance(scan_cursor *cur) {
  scan_slot *s;
  int rc = scanFill(cur);
  if (rc != SQLITE_OK) return rc;
  if (cur->head == cur->tail) {
    cur->eof = 1;
    /* On a terminal alone, a quick query prints nothing. */
    if (cur->progress && cur->t0 > 0 && (cur->asked || cur->t_shown > cur->t0))
      scanProgressLine(cur, 1);
    return SQLITE_OK;
  }
  s = &cur->ring[cur->head % cur->cap];
  /* Without worker threads the wait runs the row's batch here, polling
  ** sqlite3_interrupt between its tasks as the scalar functions do. */
  if (relattn_batch_threads(cur->runner) == 0) {
    relattn_watch watch;
    relattn_watch_begin(&watch, cur->vt->conn, cur->workers[0].pool);
    while (relattn_batch_wait(cur->runner, POLL_MS) == 0) {
      if (relattn_pool_cancelled(cur->workers[0].pool) || scanInterrupted(cur))
        break;
      scanProgressTick(cur);
    }
    relattn_watch_end(&watch);
  } else {
    while (relattn_batch_wait(cur->runner, POLL_MS) == 0) {
      if (scanInterrupted(cur))
        return scanError(cur, SQLITE_INTERRUPT, "relattn_scan: interrupted");
      scanProgressTick(cur);
    }
  }
  if (s->status != RELATTN_OK && cur->keep_errors && !s->fatal &&
      (s->status == RELATTN_ERR_ARG || s->status == RELATTN_ERR_TOOBIG ||
       s->status == RELATTN_ERR_FORMAT)) {
    /* The row's own fault (its tokens, its length, a non-finite result):
    ** with the error column read, it is a row like the others. Running out
    ** of memory or an interrupt still ends the statement. */
    cur->rows_done++;
    cur->bytes_done += s->bytes;
    s->counted = 1;
    return SQLITE_OK;
  }
  if (s->status != RELATTN_OK) {
    int code = relattn_status_code(s->status);
    if (code == SQLITE_INTERRUPT)
      return scanError(cur, code, "relattn_scan: interrupted");
    if (strncmp(s->err, "relattn_scan:", 13) == 0)
      return scanError(cur, code, "%s", s->err);
    return scanError(cur, code, "relattn_scan: id %lld: %s", s->id, s->err);
  }
  cur->rows_done++;
  cur->tok_done += s->n_tokens;
  cur->bytes_done += s->bytes;
  s->counted = 1;
  scanProgressTick(cur);
  return SQLITE_OK;
}

static int scanNext(sqlite3_vtab_cursor *p) {
  scan_cursor *cur = (scan_cursor *)p;
  scan_slot *s;
  int rc;
  if (cur->eof || cur->head >= cur->tail) {
    cur->eof = 1;
    return SQLITE_OK;
  }
  s = &cur->ring[cur->head % cur->cap];
  sqlite3_free(s->tokens);
  s->tokens = NULL;
  free(s->generated);
  s->generated = NULL;
  cur->head++;
  relattn_batch_pop(cur->runner);
  cur->vt->busy++;
  rc = scanAdvance(cur);
  cur->vt->busy--;
  return rc;
}

/* Per-worker pools, made once per cursor. */
static int scanSetupWorkers(scan_cursor *cur, int n_threads) {
  int i, n = n_threads < 1 ? 1 : n_threads;
  if (!cur->workers) {
    cur->workers = sqlite3_malloc64(sizeof *cur->workers * (size_t)n);
    if (!cur->workers) return SQLITE_NOMEM;
    memset(cur->workers, 0, sizeof *cur->workers * (size_t)n);
    cur->n_workers = n;
    for (i = 0; i < n; i++) {
      cur->workers[i].pool = relattn_pool_new(1);
      if (!cur->workers[i].pool) return SQLITE_NOMEM;
    }
  }
  return SQLITE_OK;
}

static int scanFilterRun(scan_cursor *cur, int idxNum, const char *idxStr,
                         int argc, sqlite3_value **argv);

/* A source (or a model table) that is a view selecting from this very scan
** would start it again from inside itself, without end, until the stack
** overflows; a database file can be made to hold such a view. The scan is
** marked while it runs its own SQL, and entering it again then fails, as
** SQLite refuses a view defined in terms of itself ("circularly defined"). */
static int scanFilter(sqlite3_vtab_cursor *p, int idxNum, const char *idxStr,
                      int argc, sqlite3_value **argv) {
  scan_cursor *cur = (scan_cursor *)p;
  scan_vtab *vt = cur->vt;
  int rc;
  if (vt->busy) {
    scanReset(cur);
    return scanError(cur, SQLITE_ERROR,
                     "relattn_scan: '%s' reads itself: its source '%s' or a "
                     "model table selects from it",
                     vt->name, vt->source);
  }
  vt->busy++;
  rc = scanFilterRun(cur, idxNum, idxStr, argc, argv);
  vt->busy--;
  return rc;
}

static int scanFilterRun(scan_cursor *cur, int idxNum, const char *idxStr,
                            int argc, sqlite3_value **argv) {
  scan_vtab *vt = cur->vt;
  relattn_conn *conn = vt->conn;
  sqlite3 *db = conn->db;
  sqlite3_str *where;
  sqlite3_int64 limit = -1, offset = 0;
  char *zErr = NULL, *sql, *cond, err[128];
  const char *idcol, *schema;
  int i, rc, n_threads, d;
  sqlite3_stmt *count = NULL, *last = NULL;
  sqlite3_value *bound = NULL; /* the largest id when the scan begins */

  scanReset(cur);
  cur->eof = 0;
  cur->src_done = 0;
  cur->rows_done = cur->tok_done = cur->bytes_done = 0;
  cur->total_bytes = 0;
  cur->want = idxNum & (WANT_SCORE | WANT_EMB | WANT_CLASS | WANT_GEN);
  cur->keep_errors = (idxNum & WANT_ERRORS) != 0;
  cur->read_tokens = cur->want || (idxNum & (WANT_TOKENS | WANT_ERRORS));
  cur->failed = 0;

  cur->model = relattn_store_acquire_in(conn,
                                        relattn_scan_model_schema(db, vt),
                                        vt->model, "relattn_scan", &zErr);
  if (!cur->model) return relattn_vtab_error(db, &vt->base, SQLITE_ERROR, zErr);
  if ((cur->want & WANT_SCORE) && relattn_config_is_s2s(&cur->model->cfg))
    return scanError(cur, SQLITE_ERROR,
                     "relattn_scan: model '%s' is an encoder-decoder; score "
                     "a target given a source with relattn_score(model, "
                     "target, source) (embedding works: its encoder's)",
                     vt->model);
  if ((cur->want & WANT_SCORE) && cur->model->cfg.arch != RELATTN_DECODER)
    return scanError(cur, SQLITE_ERROR,
                     "relattn_scan: model '%s' is an encoder; only decoder "
                     "models give score and perplexity (embedding works)",
                     vt->model);
  if ((cur->want & WANT_SCORE) && cur->model->cfg.head != RELATTN_HEAD_LM)
    return scanError(cur, SQLITE_ERROR,
                     "relattn_scan: model '%s' has no LM head (its head is "
                     "'%s'): no score or perplexity",
                     vt->model, relattn_head_name(cur->model->cfg.head));
  if ((cur->want & WANT_CLASS) &&
      cur->model->cfg.head != RELATTN_HEAD_CLASSIFIER)
    return scanError(cur, SQLITE_ERROR,
                     "relattn_scan: model '%s' has no classifier head (its "
                     "head is '%s'): no label, logit or prob",
                     vt->model, relattn_head_name(cur->model->cfg.head));
  if ((idxNum & WANT_LABEL) &&
      cur->model->cfg.problem_type == RELATTN_PROBLEM_REGRESSION)
    return scanError(cur, SQLITE_ERROR,
                     "relattn_scan: model '%s' is a regression model "
                     "(problem_type regression): its value is logit; it has "
                     "no label",
                     vt->model);
  if ((cur->want & WANT_GEN) && !relattn_config_is_s2s(&cur->model->cfg) &&
      (cur->model->cfg.arch != RELATTN_DECODER ||
       cur->model->cfg.head != RELATTN_HEAD_LM))
    return scanError(cur, SQLITE_ERROR,
                     "relattn_scan: model '%s' is neither a decoder with an "
                     "LM head nor an encoder-decoder: it generates no text",
                     vt->model);
  if (cur->want & WANT_GEN) {
    char *msg = relattn_gen_parse(conn, cur->model, "relattn_scan", "generate",
                                  vt->generate_arg, &cur->gen, cur->stops,
                                  &cur->n_stops);
    if (msg) {
      cur->failed = 1;
      return relattn_vtab_error(db, &vt->base, SQLITE_ERROR, msg);
    }
    cur->max_memory = conn->max_memory;
  }
  if (cur->want & WANT_EMB) {
    char *msg = relattn_pooling_check(cur->model, "relattn_scan", vt->model,
                                      vt->pooling);
    if (msg) {
      cur->failed = 1;
      return relattn_vtab_error(db, &vt->base, SQLITE_ERROR, msg);
    }
  }

  /* SELECT id, tokens FROM source WHERE ... ORDER BY id */
  idcol = vt->id ? vt->id : "rowid";
  where = sqlite3_str_new(db);
  for (i = 0; idxStr && idxStr[i] && i < argc; i++) {
    const char *op = NULL;
    switch (idxStr[i]) {
      case 'E': op = "="; break;
      case 'G': op = ">"; break;
      case 'g': op = ">="; break;
      case 'L': op = "<"; break;
      case 'l': op = "<="; break;
      case 'N': limit = sqlite3_value_int64(argv[i]); break;
      case 'O': offset = sqlite3_value_int64(argv[i]); break;
    }
    if (op)
      sqlite3_str_appendf(where, "%s \"%w\" %s ?%d",
                          sqlite3_str_length(where) ? " AND" : " WHERE", idcol,
                          op, i + 1);
  }
  cond = sqlite3_str_finish(where);
  /* The rows that exist now, and no others: a statement that inserts into
  ** the source while reading the scan (INSERT INTO docs SELECT ... FROM
  ** job) would otherwise feed it without end. The source is read in id
  ** order up to the largest id it holds when the scan begins. (Rows changed
  ** in the middle of that range meanwhile are seen or not, as SQLite says of
  ** its own tables changed by the connection that reads them.) */
  schema = relattn_scan_schema_of(db, vt, vt->source);
  sql = sqlite3_mprintf("SELECT max(\"%w\") FROM \"%w\".\"%w\"%s", idcol,
                        schema, vt->source, cond ? cond : "");
  if (!sql) {
    sqlite3_free(cond);
    return SQLITE_NOMEM;
  }
  rc = sqlite3_prepare_v2(db, sql, -1, &last, NULL);
  sqlite3_free(sql);
  if (rc == SQLITE_OK) {
    for (i = 0; idxStr && idxStr[i] && i < argc; i++)
      if (strchr("EGgLl", idxStr[i])) sqlite3_bind_value(last, i + 1, argv[i]);
    rc = sqlite3_step(last);
    if (rc == SQLITE_ROW) {
      rc = SQLITE_OK;
      bound = sqlite3_value_dup(sqlite3_column_value(last, 0));
      if (!bound) rc = SQLITE_NOMEM;
    } else {
      rc = sqlite3_reset(last);
      if (rc == SQLITE_OK) rc = SQLITE_ERROR;
    }
  }
  if (rc != SQLITE_OK) {
    const char *msg = sqlite3_errmsg(db);
    sqlite3_free(cond);
    if (rc == SQLITE_NOMEM) {
      sqlite3_finalize(last);
      return SQLITE_NOMEM;
    }
    /* A scan inside the source said what went wrong, naming itself. */
    if (strncmp(msg, "relattn_scan: ", 14) == 0)
      scanError(cur, rc, "%s", msg);
    else
      scanError(cur, rc, "relattn_scan: cannot read source '%s': %s",
                vt->source, msg);
    sqlite3_finalize(last);
    return rc;
  }
  sqlite3_finalize(last);
  /* A named id column may hold NULL (no rowid does): such a row is still
  ** read, to fail with its error rather than vanish. */
  if (vt->id)
    sql = sqlite3_mprintf("%s%s (\"%w\" <= ?%d OR \"%w\" IS NULL)",
                          cond ? cond : "", cond ? " AND" : " WHERE", idcol,
                          argc + 1, idcol);
  else
    sql = sqlite3_mprintf("%s%s \"%w\" <= ?%d", cond ? cond : "",
                          cond ? " AND" : " WHERE", idcol, argc + 1);
  sqlite3_free(cond);
  cond = sql;
  if (!cond) {
    sqlite3_value_free(bound);
    return SQLITE_NOMEM;
  }
  /* The rows SQLite may ask for: LIMIT + OFFSET (a negative LIMIT is none),
  ** unbounded when the sum would overflow. */
  if (offset < 0) offset = 0;
  cur->to_read = limit < 0 || limit > INT64_MAX - offset ? -1 : limit + offset;
  /* With only id read, the token column is not even fetched. */
  sql = sqlite3_mprintf("SELECT \"%w\", %s%w%s, %s%w%s FROM \"%w\".\"%w\"%s "
                        "ORDER BY \"%w\"%s",
                        idcol, cur->read_tokens ? "\"" : "",
                        cur->read_tokens ? vt->tokens : "NULL",
                        cur->read_tokens ? "\"" : "",
                        cur->read_tokens && vt->text_b ? "\"" : "",
                        cur->read_tokens && vt->text_b ? vt->text_b : "NULL",
                        cur->read_tokens && vt->text_b ? "\"" : "", schema,
                        vt->source, cond ? cond : "", idcol,
                        (idxNum & ID_DESC) ? " DESC" : "");
  if (!sql) {
    sqlite3_free(cond);
    return SQLITE_NOMEM;
  }
  rc = sqlite3_prepare_v2(db, sql, -1, &cur->src, NULL);
  sqlite3_free(sql);
  if (rc == SQLITE_OK && (conn->progress || isatty(2))) {
    /* the rows, and the bytes of their token values: the measure of the
    ** work the progress line's ETA divides */
    sql = sqlite3_mprintf("SELECT count(*), %s%w%s FROM \"%w\".\"%w\"%s",
                          cur->read_tokens ? "sum(length(CAST(\"" : "0",
                          cur->read_tokens ? vt->tokens : "",
                          cur->read_tokens ? "\" AS BLOB)))" : "", schema,
                          vt->source, cond ? cond : "");
    if (sql) rc = sqlite3_prepare_v2(db, sql, -1, &count, NULL);
    sqlite3_free(sql);
  }
  sqlite3_free(cond);
  if (rc != SQLITE_OK) {
    sqlite3_value_free(bound);
    return scanError(cur, rc, "relattn_scan: cannot read source '%s': %s",
                     vt->source, sqlite3_errmsg(db));
  }
  sqlite3_bind_value(cur->src, argc + 1, bound);
  if (count) sqlite3_bind_value(count, argc + 1, bound);
  sqlite3_value_free(bound);
  for (i = 0; idxStr && idxStr[i] && i < argc; i++) {
    if (strchr("EGgLl", idxStr[i])) {
      sqlite3_bind_value(cur->src, i + 1, argv[i]);
      if (count) sqlite3_bind_value(count, i + 1, argv[i]);
    }
  }
  cur->progress = count != NULL;
  cur->asked = conn->progress;
  cur->tty = isatty(2);
  cur->total = -1;
  if (count) {
    if (sqlite3_step(count) == SQLITE_ROW) {
      cur->total = sqlite3_column_int64(count, 0);
      cur->total_bytes = sqlite3_column_int64(count, 1);
    }
    sqlite3_finalize(count);
    if (cur->total >= 0 && cur->to_read >= 0 && cur->to_read < cur->total) {
      cur->total = cur->to_read;
      cur->total_bytes = 0; /* a LIMIT: which rows is not known, ETA by rows */
    }
  }

  /* The ring: a few rows per worker keeps them busy while rows of uneven
  ** length finish out of order; no more is read ahead than that. It holds
  ** two batches at least, so batches close by the rows alone (src/batch.c). */
  n_threads = conn->n_threads < 1 ? 1 : conn->n_threads;
  if (!cur->want || (idxStr && strchr(idxStr, 'E'))) n_threads = 0;
  rc = scanSetupWorkers(cur, n_threads > 0 ? n_threads : 1);
  if (rc != SQLITE_OK) return rc;
  if (cur->n_workers < n_threads) n_threads = cur->n_workers;
  cur->cap = n_threads > 0 ? 4 * n_threads + 8 : 1;
  if (n_threads > 0 && cur->cap < 2 * BATCH_ROWS) cur->cap = 2 * BATCH_ROWS;
  if (cur->to_read >= 0 && cur->to_read < cur->cap)
    cur->cap = cur->to_read > 0 ? (int)cur->to_read : 1;
  d = relattn_pooling_width(cur->model, cur->vt->pooling);
  cur->ring = sqlite3_malloc64(sizeof *cur->ring * (size_t)cur->cap);
  cur->emb = sqlite3_malloc64(sizeof(float) * (size_t)cur->cap * (size_t)d);
  if (!cur->ring || !cur->emb) return SQLITE_NOMEM;
  memset(cur->ring, 0, sizeof *cur->ring * (size_t)cur->cap);
  for (i = 0; i < cur->cap; i++)
    cur->ring[i].embedding = cur->emb + (size_t)i * d;
  if (cur->want & WANT_CLASS) {
    /* the logits of each slot; each worker's probabilities */
    const size_t L = (size_t)cur->model->cfg.n_labels;
    cur->logits = sqlite3_malloc64(sizeof(float) * (size_t)cur->cap * L);
    if (!cur->logits) return SQLITE_NOMEM;
    for (i = 0; i < cur->cap; i++) cur->ring[i].logits = cur->logits + i * L;
    for (i = 0; i < cur->n_workers; i++) {
      sqlite3_free(cur->workers[i].probs);
      cur->workers[i].probs = sqlite3_malloc64(sizeof(double) * L);
      if (!cur->workers[i].probs) return SQLITE_NOMEM;
    }
  }
  cur->head = cur->tail = 0;

  if (cur->want) {
    cur->blas_prev = relattn_blas_single();
    cur->blas_held = 1;
  }
  for (i = 0; i < cur->n_workers; i++) /* cancelled by the last scan's end */
    relattn_pool_set_cancel(cur->workers[i].pool, NULL, NULL);
  cur->runner = relattn_batch_new(n_threads, cur->cap, BATCH_ROWS,
                                  BATCH_TOKENS, scanBatch, cur, err,
                                  sizeof err);
  if (!cur->runner) return scanError(cur, SQLITE_ERROR, "relattn_scan: %s", err);
  cur->t0 = nowSeconds();
  cur->t_shown = cur->t0;
  return scanAdvance(cur);
}

static int scanEof(sqlite3_vtab_cursor *p) {
  return ((scan_cursor *)p)->eof;
}

static int scanColumn(sqlite3_vtab_cursor *p, sqlite3_context *ctx, int col) {
  scan_cursor *cur = (scan_cursor *)p;
  scan_slot *s = &cur->ring[cur->head % cur->cap];
  int scored = s->n - 1;
  if (s->status != RELATTN_OK) {
    /* a bad row kept (the error column is read): its id and its error */
    if (col == COL_ID) sqlite3_result_int64(ctx, s->id);
    if (col != COL_ERR) return SQLITE_OK;
    if (strncmp(s->err, "relattn_scan:", 13) == 0)
      sqlite3_result_text(ctx, s->err, -1, SQLITE_TRANSIENT);
    else {
      char *msg = sqlite3_mprintf("relattn_scan: id %lld: %s", s->id, s->err);
      if (!msg) return SQLITE_NOMEM;
      sqlite3_result_text(ctx, msg, -1, sqlite3_free);
    }
    return SQLITE_OK;
  }
  switch (col) {
    case COL_ID: sqlite3_result_int64(ctx, s->id); break;
    case COL_NTOK:
      if (s->n) sqlite3_result_int(ctx, s->n_tokens);
      break;
    case COL_SCORE:
      if (s->n) sqlite3_result_double(ctx, s->score);
      break;
    case COL_PPL:
      if (s->n && scored > 0)
        sqlite3_result_double(ctx, exp(-s->score / (double)scored));
      break;
    case COL_LABEL:
      if (s->n)
        sqlite3_result_text(ctx, relattn_store_label(cur->model, s->best), -1,
                            SQLITE_TRANSIENT);
      break;
    case COL_LOGIT:
      if (s->n) sqlite3_result_double(ctx, s->logits[s->best]);
      break;
    case COL_PROB:
      if (s->n && cur->model->cfg.problem_type != RELATTN_PROBLEM_REGRESSION)
        sqlite3_result_double(ctx, s->prob);
      break;
    case COL_GEN:
      if (s->n && s->generated)
        sqlite3_result_text64(ctx, s->generated, s->generated_len,
                              SQLITE_TRANSIENT, SQLITE_UTF8);
      break;
    case COL_EMB:
      if (s->n) {
        sqlite3_result_blob64(ctx, s->embedding,
                              sizeof(float) * (sqlite3_uint64)
                                  relattn_pooling_width(cur->model,
                                                        cur->vt->pooling),
                              SQLITE_TRANSIENT);
        sqlite3_result_subtype(ctx, RELATTN_SUBTYPE_VECTOR);
      }
      break;
  }
  return SQLITE_OK;
}

static int scanRowid(sqlite3_vtab_cursor *p, sqlite3_int64 *pRowid) {
  scan_cursor *cur = (scan_cursor *)p;
  *pRowid = cur->ring[cur->head % cur->cap].id;
  return SQLITE_OK;
}

sqlite3_module relattn_scan_module = {
    0,                       /* iVersion */
    relattn_scan_create,     /* xCreate */
    relattn_scan_connect,    /* xConnect */
    scanBestIndex,           /* xBestIndex */
    relattn_scan_disconnect, /* xDisconnect */
    relattn_scan_disconnect, /* xDestroy */
    scanOpen,                /* xOpen */
    scanClose,               /* xClose */
    scanFilter,              /* xFilter */
    scanNext,                /* xNext */
    scanEof,                 /* xEof */
    scanColumn,              /* xColumn */
    scanRowid,               /* xRowid */
    0,                       /* xUpdate */
    0,                       /* xBegin */
    0,                       /* xSync */
    0,                       /* xCommit */
    0,                       /* xRollback */
    0,                       /* xFindFunction */
    0,                       /* xRename */
    0,                       /* xSavepoint */
    0,                       /* xRelease */
    0,                       /* xRollbackTo */
    0,                       /* xShadowName */
};
