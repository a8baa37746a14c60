/*
** test_batch.c: src/batch.c, the ordered batch runner relattn_scan drives.
**
** 1. Grouping: which items share a batch is the greedy rule on the items'
**    costs alone (written again here), for 0 to 8 worker threads, with
**    random delays in the batches (so workers claim and finish in varied
**    orders) and a producer that pauses at random; every item runs once and
**    comes out in order.
** 2. Results: sequences run through the runner with relattn_forward_batch
**    (a serial pool per worker, as the scan does) are bitwise what
**    relattn_forward gives each sequence alone on pools of 1 to 4 threads,
**    whatever the thread count, the delays and the packing rule.
*/
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "relattn.h"
#include "unit.h"

/* ---- 1. grouping ----------------------------------------------------------- */

enum { MAXN = 600 };

typedef struct group_ctx {
  int64_t cost[MAXN];
  int batch_len[MAXN];   /* at a batch's first item, its count; else 0 */
  int runs[MAXN];        /* times each item ran */
  int delay_us;          /* random delay per batch, up to this */
  pthread_mutex_t rng_mu;
} group_ctx;

static uint64_t locked_next(group_ctx *g) {
  uint64_t r;
  pthread_mutex_lock(&g->rng_mu);
  r = unit_next();
  pthread_mutex_unlock(&g->rng_mu);
  return r;
}

static void group_fn(void *ctxp, int64_t first, int count, int worker) {
  group_ctx *g = ctxp;
  int i;
  (void)worker;
  g->batch_len[first] = count;
  for (i = 0; i < count; i++) g->runs[first + i]++;
  if (g->delay_us) usleep((useconds_t)(locked_next(g) % (uint64_t)g->delay_us));
}

/* The rule, from its statement in src/batch.c: close a batch at max_items
** items, when its cost reaches max_cost, or before an item that would take
** it past max_cost; the input's end closes the last. */
static void expected_groups(const int64_t *cost, int n, int max_items,
                            int64_t max_cost, int *len /* (n) */) {
  int start = 0, i;
  int64_t c = 0;
  memset(len, 0, sizeof(int) * (size_t)n);
  for (i = 0; i < n; i++) {
    if (i > start && c + cost[i] > max_cost) {
      len[start] = i - start;
      start = i;
      c = 0;
    }
    c += cost[i];
    if (i + 1 - start >= max_items || c >= max_cost) {
      len[start] = i + 1 - start;
      start = i + 1;
      c = 0;
    }
  }
  if (start < n) len[start] = n - start;
}

static void check_grouping(void) {
  static const int threads[] = {0, 1, 2, 4, 8};
  static group_ctx g;
  int expect[MAXN];
  int round, t;
  pthread_mutex_init(&g.rng_mu, NULL);
  for (round = 0; round < 6; round++) {
    int n = 1 + (int)(unit_next() % MAXN);
    int max_items = 1 + (int)(unit_next() % 20);
    int64_t max_cost = (int64_t)(unit_next() % 400);
    int cap = max_items + (int)(unit_next() % 40);
    int i;
    for (i = 0; i < n; i++)
      g.cost[i] = unit_next() % 4 == 0 ? 0 : (int64_t)(unit_next() % 120);
    expected_groups(g.cost, n, max_items < cap ? max_items : cap, max_cost,
                    expect);
    for (t = 0; t < 5; t++) {
      relattn_batch *b;
      char err[128] = "";
      int64_t added = 0, taken = 0;
      int order_ok = 1, bad_runs = 0;
      memset(g.batch_len, 0, sizeof g.batch_len);
      memset(g.runs, 0, sizeof g.runs);
      g.delay_us = t % 2 ? 0 : 300;
      b = relattn_batch_new(threads[t], cap, max_items, max_cost, group_fn, &g,
                            err, sizeof err);
      CHECK(b != NULL, "new: %s", err);
      if (!b) continue;
      while (taken < n) {
        int w;
        while (added < n && relattn_batch_room(b) > 0) {
          CHECK(relattn_batch_next(b) == added, "next numbers items in order");
          if (relattn_batch_add(b, g.cost[added]) != added) order_ok = 0;
          added++;
        }
        if (added == n) relattn_batch_flush(b);
        while ((w = relattn_batch_wait(b, 50)) == 0) {
        }
        if (w != 1 || relattn_batch_head(b) != taken || g.runs[taken] != 1)
          order_ok = 0;
        if (unit_next() % 16 == 0) usleep(200); /* a slow reader */
        relattn_batch_pop(b);
        taken++;
      }
      CHECK(relattn_batch_wait(b, 10) == -1, "empty after the last pop");
      relattn_batch_free(b);
      for (i = 0; i < n; i++) bad_runs += g.runs[i] != 1;
      CHECK(order_ok && bad_runs == 0,
            "threads %d: items in order %d, %d run other than once", threads[t],
            order_ok, bad_runs);
      CHECK(memcmp(g.batch_len, expect, sizeof(int) * (size_t)n) == 0,
            "threads %d n %d max_items %d max_cost %lld cap %d: batches differ "
            "from the rule",
            threads[t], n, max_items, (long long)max_cost, cap);
    }
  }
  pthread_mutex_destroy(&g.rng_mu);
}

/* ---- 2. results ---------------------------------------------------------- */

typedef struct small_model {
  relattn_model m;
  float *arena;
} small_model;

static void make_model(small_model *t, int d, int heads, int d_ff, int layers,
                       int clip, int vocab) {
  relattn_config *c = &t->m.cfg;
  size_t R = (size_t)(2 * clip + 1), dh = (size_t)(d / heads), used = 0, cap;
  float *p;
  int l;
  size_t i;
  memset(t, 0, sizeof *t);
  c->arch = RELATTN_DECODER;
  c->vocab_size = vocab;
  c->d_model = d;
  c->n_layers = layers;
  c->n_heads = heads;
  c->d_ff = d_ff;
  c->norm = RELATTN_NORM_PRE;
  c->norm_eps = 1e-5f;
  c->activation = RELATTN_GELU;
  c->tie_embeddings = 1;
  c->clip = clip;
  c->rel_values = 1;
  c->bos = c->eos = c->pad = -1;
  cap = (size_t)vocab * d + 2 * (size_t)d +
        (size_t)layers * (4 * (size_t)d * d + 9 * (size_t)d + 2 * R * dh +
                          2 * (size_t)d_ff * d + (size_t)d_ff);
  t->arena = malloc(cap * sizeof(float));
  t->m.layers = calloc((size_t)layers, sizeof *t->m.layers);
  for (i = 0; i < cap; i++)
    t->arena[i] = (float)(unit_uniform() / sqrt((double)d));
  p = t->arena;
#define TAKE(n) (used += (n), p + used - (n))
  t->m.tok_emb = TAKE((size_t)vocab * d);
  for (l = 0; l < layers; l++) {
    relattn_layer *L = &t->m.layers[l];
    float *w;
    L->ln1_w = w = TAKE((size_t)d);
    for (i = 0; i < (size_t)d; i++) w[i] += 1.0f;
    L->ln1_b = TAKE((size_t)d);
    L->wq = TAKE((size_t)d * d);
    L->wk = TAKE((size_t)d * d);
    L->wv = TAKE((size_t)d * d);
    L->wo = TAKE((size_t)d * d);
    L->bq = TAKE((size_t)d);
    L->bk = TAKE((size_t)d);
    L->bv = TAKE((size_t)d);
    L->bo = TAKE((size_t)d);
    L->rel_k = TAKE(R * dh);
    L->rel_v = TAKE(R * dh);
    L->ln2_w = w = TAKE((size_t)d);
    for (i = 0; i < (size_t)d; i++) w[i] += 1.0f;
    L->ln2_b = TAKE((size_t)d);
    L->w1 = TAKE((size_t)d_ff * d);
    L->b1 = TAKE((size_t)d_ff);
    L->w2 = TAKE((size_t)d * d_ff);
    L->b2 = TAKE((size_t)d);
  }
  t->m.lnf_w = TAKE((size_t)d);
  t->m.lnf_b = TAKE((size_t)d);
  t->m.lm_head = t->m.tok_emb;
#undef TAKE
}

enum { NSEQ = 40, MAXW = 8 };

typedef struct fwd_ctx {
  const relattn_model *m;
  int32_t *tok[NSEQ];
  int n[NSEQ];
  float *lp[NSEQ];       /* (n - 1) */
  float *emb[NSEQ];      /* (d_model) */
  int status[NSEQ];
  relattn_pool *pool[MAXW];
  int delay_us;
  pthread_mutex_t rng_mu;
} fwd_ctx;

static void fwd_fn(void *ctxp, int64_t first, int count, int worker) {
  fwd_ctx *c = ctxp;
  relattn_fwd f[NSEQ];
  char err[256];
  int i, rc;
  memset(f, 0, sizeof f);
  for (i = 0; i < count; i++) {
    int s = (int)first + i;
    f[i].tokens = c->tok[s];
    f[i].n = c->n[s];
    f[i].logprob = c->n[s] > 1 ? c->lp[s] : NULL;
    f[i].embedding = c->emb[s];
  }
  rc = relattn_forward_batch(c->m, f, count, c->pool[worker], err, sizeof err);
  for (i = 0; i < count; i++) c->status[first + i] = rc;
  if (c->delay_us) {
    uint64_t r;
    pthread_mutex_lock(&c->rng_mu);
    r = unit_next();
    pthread_mutex_unlock(&c->rng_mu);
    usleep((useconds_t)(r % (uint64_t)c->delay_us));
  }
}

static void check_results(void) {
  static const int threads[] = {0, 1, 2, 4, 8};
  static fwd_ctx c;
  small_model t;
  float *ref_lp[NSEQ], *ref_emb[NSEQ];
  int s, i, k, d;
  make_model(&t, 64, 4, 256, 2, 8, 300);
  d = t.m.cfg.d_model;
  memset(&c, 0, sizeof c);
  c.m = &t.m;
  pthread_mutex_init(&c.rng_mu, NULL);
  for (s = 0; s < NSEQ; s++) {
    /* mostly short (packed), some long (several row blocks) */
    c.n[s] = s % 8 == 3 ? 130 + (int)(unit_next() % 300)
                        : 1 + (int)(unit_next() % 40);
    c.tok[s] = malloc(sizeof(int32_t) * (size_t)c.n[s]);
    for (i = 0; i < c.n[s]; i++)
      c.tok[s][i] = (int32_t)(unit_next() % (uint64_t)t.m.cfg.vocab_size);
    c.lp[s] = malloc(sizeof(float) * (size_t)c.n[s]);
    c.emb[s] = malloc(sizeof(float) * (size_t)d);
    ref_lp[s] = malloc(sizeof(float) * (size_t)c.n[s]);
    ref_emb[s] = malloc(sizeof(float) * (size_t)d);
  }
  /* The reference: each sequence alone, on pools of 1 to 4 threads, all
  ** the same bits. */
  for (k = 1; k <= 4; k++) {
    relattn_pool *pool = relattn_pool_new(k);
    int same = 1, blas = relattn_blas_single();
    for (s = 0; s < NSEQ; s++) {
      relattn_fwd f;
      char err[256];
      float *lp = k == 1 ? ref_lp[s] : c.lp[s];
      float *emb = k == 1 ? ref_emb[s] : c.emb[s];
      memset(&f, 0, sizeof f);
      f.tokens = c.tok[s];
      f.n = c.n[s];
      f.logprob = c.n[s] > 1 ? lp : NULL;
      f.embedding = emb;
      CHECK(relattn_forward(&t.m, &f, pool, err, sizeof err) == RELATTN_OK,
            "alone: %s", err);
      if (k > 1 &&
          (memcmp(lp, ref_lp[s], sizeof(float) * (size_t)(c.n[s] - 1)) ||
           memcmp(emb, ref_emb[s], sizeof(float) * (size_t)d)))
        same = 0;
    }
    relattn_blas_restore(blas);
    CHECK(same, "a sequence alone on %d threads differs from 1 thread", k);
    relattn_pool_free(pool);
  }
  for (i = 0; i < MAXW; i++) c.pool[i] = relattn_pool_new(1);
  for (k = 0; k < 10; k++) {
    int nt = threads[k % 5], max_items = 1 + (int)(unit_next() % 16);
    int64_t max_cost = 1 + (int64_t)(unit_next() % 600);
    int cap = max_items + (int)(unit_next() % 16), diff = -1, bad = 0;
    int64_t added = 0, taken = 0;
    char err[128] = "";
    relattn_batch *b;
    int blas = relattn_blas_single();
    c.delay_us = k >= 5 ? 2000 : 0;
    for (s = 0; s < NSEQ; s++) {
      memset(c.lp[s], 0, sizeof(float) * (size_t)c.n[s]);
      memset(c.emb[s], 0, sizeof(float) * (size_t)d);
      c.status[s] = -1;
    }
    b = relattn_batch_new(nt, cap, max_items, max_cost, fwd_fn, &c, err,
                          sizeof err);
    CHECK(b != NULL, "new: %s", err);
    if (!b) continue;
    while (taken < NSEQ) {
      while (added < NSEQ && relattn_batch_room(b) > 0)
        relattn_batch_add(b, c.n[added++]);
      if (added == NSEQ) relattn_batch_flush(b);
      while (relattn_batch_wait(b, 50) == 0) {
      }
      s = (int)relattn_batch_head(b);
      if (c.status[s] != RELATTN_OK) bad++;
      if (diff < 0 &&
          (memcmp(c.lp[s], ref_lp[s], sizeof(float) * (size_t)(c.n[s] - 1)) ||
           memcmp(c.emb[s], ref_emb[s], sizeof(float) * (size_t)d)))
        diff = s;
      relattn_batch_pop(b);
      taken++;
    }
    relattn_batch_free(b);
    relattn_blas_restore(blas);
    CHECK(bad == 0 && diff < 0,
          "threads %d max_items %d max_cost %lld: %d failed, first sequence "
          "with other bits: %d (n=%d)",
          nt, max_items, (long long)max_cost, bad, diff,
          diff >= 0 ? c.n[diff] : 0);
  }
  for (i = 0; i < MAXW; i++) relattn_pool_free(c.pool[i]);
  for (s = 0; s < NSEQ; s++) {
    free(c.tok[s]), free(c.lp[s]), free(c.emb[s]);
    free(ref_lp[s]), free(ref_emb[s]);
  }
  pthread_mutex_destroy(&c.rng_mu);
  free(t.arena);
  free(t.m.layers);
}

static void check_errors(void) {
  char err[128] = "";
  CHECK(relattn_batch_new(1, 0, 1, 1, (relattn_batch_fn)group_fn, NULL, err,
                          sizeof err) == NULL &&
            strstr(err, "capacity 0"),
        "capacity 0: %s", err);
}

int main(void) {
  unit_seed();
  check_grouping();
  check_results();
  check_errors();
  UNIT_DONE();
}
