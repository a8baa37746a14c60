/*
** scan_work.c: relattn_scan's rows on the worker threads, and its progress
** line. ext/scan.c reads the source into the cursor's ring of slots and
** hands them to the ordered batch runner of src/batch.c; the runner calls
** relattn_scan_batch on one of its threads with consecutive rows, which run
** here as one packed forward pass (and relattn_generate for the generated
** column) on that worker's one-thread pool. Nothing here calls SQLite: a
** row's results and its error go into its slot, read back on the
** connection's thread once the runner marks it done. See ext/scan.c, HOW IT
** WORKS.
*/
#include "ext.h"
#include "functions.h"
#include "scan.h"
#include "generate.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double relattn_scan_now(void) {
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
void relattn_scan_batch(void *ctx, int64_t first, int count, int worker) {
  scan_cursor *cur = ctx;
  scanRun(cur, &cur->workers[worker], first, count);
}

/* Stops and joins the workers; the ring is then the caller's alone. */
void relattn_scan_stop_workers(scan_cursor *cur) {
  int i;
  /* a forward pass in flight stops within a task, not at its end */
  for (i = 0; i < cur->n_workers; i++) relattn_pool_cancel(cur->workers[i].pool);
  relattn_batch_free(cur->runner);
  cur->runner = NULL;
}

/* What a row of n tokens may hold: on every worker at once (each may run a
** row that long, or a batch of BATCH_TOKENS), its own one-worker pool's
** scratch for the forward pass and its log-prob buffer, so the per-call
** bound covers the whole scan. SIZE_MAX on overflow. */
size_t relattn_scan_row_bytes(const scan_cursor *cur, const relattn_model *m,
                              int n) {
  int rows = n > BATCH_TOKENS ? n : BATCH_TOKENS;
  size_t one = relattn_forward_memory(m, rows, BATCH_ROWS, 1), all;
  if (!one || !relattn_add_ok(one, sizeof(float) * (size_t)rows, &one) ||
      !relattn_mul_ok(one, (size_t)(cur->n_workers > 1 ? cur->n_workers : 1),
                      &all))
    return SIZE_MAX;
  return all;
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

/* A job's line (relattn_progress_job): its rows and tokens done before this
** scan plus this scan's, rows in flight counted by the layers passed, of the
** job's totals; the ETA at this scan's rate. The job prints its own line at
** the scan's end, so there the line drawn on a terminal is only cleared. */
static void scanJobLine(scan_cursor *cur, int final, double el, double tokens,
                        double rows) {
  const double jt = (double)cur->job_tokens + tokens,
               jr = (double)cur->job_rows + rows;
  double pct, left = 0;
  int known = 0; /* a rate measured: the ETA can be given */
  char eta[32] = "";
  if (final) {
    if (cur->tty && cur->t_shown > cur->t0) fputs("\r\033[K", stderr);
    fflush(stderr);
    return;
  }
  if (cur->job_all_tokens > 0) {
    pct = 100.0 * jt / (double)cur->job_all_tokens;
    if ((known = tokens > 0))
      left = ((double)cur->job_all_tokens - jt) / (tokens / el);
  } else {
    pct = 100.0 * jr / (double)(cur->job_all_rows > 0 ? cur->job_all_rows : 1);
    if ((known = rows > 0))
      left = ((double)cur->job_all_rows - jr) / (rows / el);
  }
  if (pct > 100) pct = 100;
  if (known) {
    long s = left > 0 ? (long)(left + 0.5) : 0; /* done past the total: 0 */
    snprintf(eta, sizeof eta, ", ETA %ld:%02ld:%02ld", s / 3600, s / 60 % 60,
             s % 60);
  }
  fprintf(stderr, "%s%s: %lld/%lld rows, %lld/%lld tokens (%.1f%%), %.0f "
          "tokens/s%s%s", cur->tty ? "\r\033[K" : "", cur->job_label,
          (long long)(cur->job_rows + cur->rows_done),
          (long long)cur->job_all_rows, (long long)jt,
          (long long)cur->job_all_tokens, pct, tokens / el, eta,
          cur->tty ? "" : "\n");
  fflush(stderr);
}

void relattn_scan_progress_line(scan_cursor *cur, int final) {
  double t = relattn_scan_now(), el = t - cur->t0, tps, rps, tokens, bytes,
         rows;
  char eta[32] = "", pct[48] = "";
  if (el <= 0) el = 1e-9;
  scanWorkDone(cur, &tokens, &bytes, &rows);
  if (cur->job) {
    scanJobLine(cur, final, el, tokens, rows);
    cur->t_shown = t;
    return;
  }
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
void relattn_scan_progress_tick(scan_cursor *cur) {
  if (cur->progress &&
      relattn_scan_now() - cur->t_shown >= (cur->tty ? 0.25 : 1.0))
    relattn_scan_progress_line(cur, 0);
}
