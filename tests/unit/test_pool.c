/*
** test_pool.c: the thread pool runs every task exactly once, on valid
** workers, nested runs go serial, and scratch is reused per worker and slot;
** a cancel check stops a run (and the attention kernel) between tasks.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "relattn.h"
#include "unit.h"

typedef struct {
  atomic_int counts[1000];
  int n_workers;
  atomic_int bad_worker;
  relattn_pool *inner;
  atomic_int inner_calls;
} job;

static void count_task(void *ctx, int task, int worker) {
  job *j = ctx;
  atomic_fetch_add(&j->counts[task], 1);
  if (worker < 0 || worker >= j->n_workers) atomic_store(&j->bad_worker, 1);
}

static void inner_task(void *ctx, int task, int worker) {
  job *j = ctx;
  (void)task;
  (void)worker;
  atomic_fetch_add(&j->inner_calls, 1);
}

static void nesting_task(void *ctx, int task, int worker) {
  job *j = ctx;
  count_task(ctx, task, worker);
  relattn_pool_run(j->inner, 3, inner_task, ctx);
}

/* The host's check: answers 1 from the stop-th poll on; counts polls and
** notes a poll from any thread but the one that installed it. */
typedef struct {
  int polls, stop;
  pthread_t owner;
  int foreign;
} canceller;

static int cancel_check(void *ctx) {
  canceller *c = ctx;
  if (!pthread_equal(pthread_self(), c->owner)) c->foreign = 1;
  return ++c->polls >= c->stop;
}

static void cancel_tests(int threads) {
  relattn_pool *pool = relattn_pool_new(threads);
  static job j;
  canceller c;
  int i, ran;
  if (!pool) return;
  /* The check stops the run. Serially, at the third poll: two tasks ran.
  ** With threads, the caller polls before its first task (stop = 1), but
  ** how many tasks the workers took meanwhile is up to the scheduler. */
  memset(&j, 0, sizeof j);
  memset(&c, 0, sizeof c);
  c.stop = threads == 1 ? 3 : 1;
  c.owner = pthread_self();
  j.n_workers = threads;
  relattn_pool_set_cancel(pool, cancel_check, &c);
  relattn_pool_run(pool, 1000, count_task, &j);
  for (i = 0, ran = 0; i < 1000; i++) ran += atomic_load(&j.counts[i]);
  CHECK(relattn_pool_cancelled(pool), "threads=%d: cancelled", threads);
  CHECK(threads > 1 || ran == 2, "serial: %d tasks ran, not 2", ran);
  CHECK(!c.foreign, "the check ran on the thread that set it only");
  /* once cancelled, a run starts nothing, and the kernel says interrupted */
  memset(&j, 0, sizeof j);
  j.n_workers = threads;
  relattn_pool_run(pool, 10, count_task, &j);
  CHECK(atomic_load(&j.counts[0]) == 0, "no task after the stop");
  {
    enum { N = 300, H = 2, D = 8 };
    static float q[N * H * D], out[N * H * D];
    relattn_attn a;
    char err[128] = "";
    for (i = 0; i < N * H * D; i++) q[i] = (float)((i * 7919) % 13) / 13.0f;
    memset(&a, 0, sizeof a);
    a.n = N, a.heads = H, a.d_head = D;
    a.q = a.k = a.v = q, a.ldq = a.ldk = a.ldv = a.ldo = H * D;
    a.out = out;
    CHECK(relattn_attention(&a, pool, err, sizeof err) == RELATTN_ERR_INTERRUPT &&
              strcmp(err, "interrupted") == 0,
          "attention on a cancelled pool: %s", err);
    /* cleared: everything runs again */
    relattn_pool_set_cancel(pool, NULL, NULL);
    CHECK(!relattn_pool_cancelled(pool), "cleared");
    CHECK(relattn_attention(&a, pool, err, sizeof err) == RELATTN_OK, "%s", err);
    /* relattn_pool_cancel, as another thread stops a worker's pool */
    relattn_pool_cancel(pool);
    CHECK(relattn_attention(&a, pool, err, sizeof err) == RELATTN_ERR_INTERRUPT,
          "attention after relattn_pool_cancel");
  }
  relattn_pool_free(pool);
}

int main(void) {
  int threads, round, i;
  unit_seed();
  for (threads = 1; threads <= 4; threads++) {
    relattn_pool *pool = relattn_pool_new(threads);
    CHECK(pool != NULL, "pool_new(%d)", threads);
    if (!pool) continue;
    CHECK(relattn_pool_size(pool) == threads, "size %d", relattn_pool_size(pool));
    for (round = 0; round < 50; round++) {
      static job j;
      int n = 1 + (int)(unit_next() % 1000), ok = 1;
      memset(&j, 0, sizeof j);
      j.n_workers = threads;
      relattn_pool_run(pool, n, count_task, &j);
      for (i = 0; i < 1000; i++)
        if (atomic_load(&j.counts[i]) != (i < n ? 1 : 0)) ok = 0;
      CHECK(ok, "threads=%d n=%d: each task once", threads, n);
      CHECK(!atomic_load(&j.bad_worker), "worker id in range");
    }
    {
      static job j;
      memset(&j, 0, sizeof j);
      j.n_workers = threads;
      j.inner = pool; /* nested on the same pool: serial, no deadlock */
      relattn_pool_run(pool, 20, nesting_task, &j);
      CHECK(atomic_load(&j.inner_calls) == 60, "nested calls %d",
            atomic_load(&j.inner_calls));
    }
    {
      char *a = relattn_pool_scratch(pool, threads - 1, 100);
      char *b = relattn_pool_scratch(pool, threads - 1, 50);
      CHECK(a && a == b, "scratch reused");
      CHECK(((uintptr_t)a & 63) == 0, "scratch aligned");
      CHECK(relattn_pool_scratch(pool, threads, 10) == NULL, "worker out of range");
      {
        char *c = relattn_pool_scratch_slot(pool, threads - 1, 1, 100);
        CHECK(c && c != a, "slot 1 is its own buffer");
        CHECK(relattn_pool_scratch_slot(pool, threads - 1, 0, 10) == a,
              "slot 0 is relattn_pool_scratch's");
        CHECK(relattn_pool_scratch_slot(pool, 0, RELATTN_POOL_SLOTS, 10) == NULL,
              "slot out of range");
        relattn_pool_trim(pool, 64);
        c = relattn_pool_scratch_slot(pool, threads - 1, 1, 10);
        CHECK(c != NULL, "scratch after trim");
      }
    }
    relattn_pool_free(pool);
    cancel_tests(threads);
  }
  UNIT_DONE();
}
