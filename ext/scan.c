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
** runs here, its rows' forward passes and the progress line in
** ext/scan_work.c (scan.h: the cursor both share). xFilter acquires the
** model once: every row of one scan comes from that version, whatever
** another connection imports meanwhile. It then runs
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
** Inside a job (relattn_progress_job) the lines are the job's, this scan's
** work added to its counts, printed whatever relattn_progress says, and the
** scan's end prints none: the job prints its own.
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
#include <unistd.h>

enum { COL_ID, COL_NTOK, COL_SCORE, COL_PPL, COL_EMB, COL_ERR, COL_LABEL,
       COL_LOGIT, COL_PROB, COL_GEN };
#define POLL_MS 50    /* interrupt check while waiting for a row */

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

/* ---- ending a scan ------------------------------------------------------- */

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

/* Ends a scan: workers joined, rows freed, model released, BLAS restored. */
static void scanReset(scan_cursor *cur) {
  relattn_scan_stop_workers(cur);
  /* Left early: "(stopped)" when the scan failed (an error, an interrupt);
  ** a LIMIT met or a client done reading is a normal end. */
  if (cur->progress && cur->t0 > 0 && !cur->eof &&
      (cur->asked || cur->t_shown > cur->t0))
    relattn_scan_progress_line(cur, cur->failed ? 2 : 1);
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

static void scanFreeWorkers(scan_worker *w, int n) {
  int i;
  for (i = 0; i < n; i++) {
    relattn_pool_free(w[i].pool);
    relattn_free(w[i].logprob);
    sqlite3_free(w[i].probs);
  }
  sqlite3_free(w);
}

void relattn_scan_spare_free(relattn_conn *conn) {
  scanFreeWorkers(conn->scan_spare, conn->n_scan_spare);
  conn->scan_spare = NULL;
  conn->n_scan_spare = 0;
}

/* A closed scan's workers stay with the connection, their scratch (each
** under TRIM_BYTES) with them, for its next scan: a query's rows then run
** in pages already mapped. Fresh scratch took 8% of a 40-row scan of the
** width-128 encoder in page faults. One set is kept; the connection's
** close frees it. */
static int scanClose(sqlite3_vtab_cursor *p) {
  scan_cursor *cur = (scan_cursor *)p;
  relattn_conn *conn = cur->vt->conn;
  scanReset(cur);
  if (cur->workers && !conn->scan_spare &&
      cur->workers[cur->n_workers - 1].pool) { /* all made */
    conn->scan_spare = cur->workers;
    conn->n_scan_spare = cur->n_workers;
  } else {
    scanFreeWorkers(cur->workers, cur->n_workers);
  }
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
      msg = sqlite3_errmsg(sqlite3_db_handle(cur->src));
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
          (zErr = relattn_memory_check(
               cur->vt->conn, "relattn_scan",
               relattn_scan_row_bytes(cur, m, in.n))) != NULL) {
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
      relattn_scan_progress_line(cur, 1);
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
      relattn_scan_progress_tick(cur);
    }
    relattn_watch_end(&watch);
  } else {
    while (relattn_batch_wait(cur->runner, POLL_MS) == 0) {
      if (scanInterrupted(cur))
        return scanError(cur, SQLITE_INTERRUPT, "relattn_scan: interrupted");
      relattn_scan_progress_tick(cur);
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
  relattn_scan_progress_tick(cur);
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

/* Per-worker pools, made once per cursor, or the last closed scan's when
** it had as many. */
static int scanSetupWorkers(scan_cursor *cur, int n_threads) {
  relattn_conn *conn = cur->vt->conn;
  int i, n = n_threads < 1 ? 1 : n_threads;
  if (!cur->workers && conn->scan_spare) {
    if (conn->n_scan_spare == n) {
      cur->workers = conn->scan_spare;
      cur->n_workers = n;
      conn->scan_spare = NULL;
      conn->n_scan_spare = 0;
    } else {
      relattn_scan_spare_free(conn);
    }
  }
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
  sqlite3 *sdb; /* the source's: db, or conn->side (relattn_read_db) */
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
  /* A first read of main under the user's statement goes to conn->side; a
  ** view there may call a function only this connection has. */
  sdb = relattn_read_db(conn, schema, vt->source);
  rc = sqlite3_prepare_v2(sdb, sql, -1, &last, NULL);
  if (rc != SQLITE_OK && sdb != db) {
    sdb = db;
    rc = sqlite3_prepare_v2(db, sql, -1, &last, NULL);
  }
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
    const char *msg = sqlite3_errmsg(sdb);
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
  rc = sqlite3_prepare_v2(sdb, sql, -1, &cur->src, NULL);
  sqlite3_free(sql);
  if (rc == SQLITE_OK && (conn->progress || isatty(2))) {
    /* the rows, and the bytes of their token values: the measure of the
    ** work the progress line's ETA divides */
    sql = sqlite3_mprintf("SELECT count(*), %s%w%s FROM \"%w\".\"%w\"%s",
                          cur->read_tokens ? "sum(length(CAST(\"" : "0",
                          cur->read_tokens ? vt->tokens : "",
                          cur->read_tokens ? "\" AS BLOB)))" : "", schema,
                          vt->source, cond ? cond : "");
    if (sql) rc = sqlite3_prepare_v2(sdb, sql, -1, &count, NULL);
    sqlite3_free(sql);
  }
  sqlite3_free(cond);
  if (rc != SQLITE_OK) {
    sqlite3_value_free(bound);
    return scanError(cur, rc, "relattn_scan: cannot read source '%s': %s",
                     vt->source, sqlite3_errmsg(sdb));
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
  /* relattn_progress_job(): the lines count toward the job's totals */
  cur->job = conn->job_label[0] != 0;
  if (cur->job) {
    memcpy(cur->job_label, conn->job_label, sizeof cur->job_label);
    cur->job_rows = conn->job_rows;
    cur->job_all_rows = conn->job_all_rows;
    cur->job_tokens = conn->job_tokens;
    cur->job_all_tokens = conn->job_all_tokens;
  }
  cur->progress = count != NULL || cur->job;
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
                                  BATCH_TOKENS, relattn_scan_batch, cur, err,
                                  sizeof err);
  if (!cur->runner) return scanError(cur, SQLITE_ERROR, "relattn_scan: %s", err);
  cur->t0 = relattn_scan_now();
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
