/*
** pool.c: a small persistent thread pool.
**
** Workers wait for jobs between them. A job is n_tasks calls of one
** function; tasks are handed out by an atomic counter, so uneven tasks
** balance themselves. The calling thread takes part as worker 0. One job runs
** at a time per pool (a mutex); a job started from inside a task runs
** serially on that task's worker, so nesting cannot deadlock.
**
** SHORT JOBS
** A decoding step runs a few dozen jobs of some microseconds each (one per
** product, src/forward.c's relattn_fwd_rows), so the hand-off is made
** cheap: a worker that finished a job spins for a while (SPIN_NS) before it
** sleeps, yielding the CPU at each turn (on a machine whose cores are busy
** a pure spin took the time of the caller's own thread: two threads ran
** 0.63-0.78 times as fast as one on d_model 512 decoding, yielding
** 0.98-1.53 times, sleeping at once 0.74-1.31, the medians of 10
** interleaved rounds), and the caller waits only for the tasks taken, not for
** every worker to check in: a worker the OS has not run yet costs nothing,
** the caller takes its share. The counter holds the job's number beside
** the next task (next_of), so a worker that wakes late for a finished job
** can take no task of the next one; it reads the job (fn, ctx, n_tasks)
** under the lock with that number.
*/
#include "relattn.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long an idle worker, or the caller waiting for the last tasks, spins
** before it sleeps. */
#define SPIN_NS 100000L

typedef struct pool_scratch {
  void *p;
  size_t size;
} pool_scratch;

struct relattn_pool {
  int n;                     /* workers including the caller */
  pthread_t *threads;        /* (n - 1) */
  pthread_mutex_t run_lock;  /* one job at a time */
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  atomic_ulong generation;   /* bumped per job, under lock */
  atomic_int quit;
  int sleeping;              /* workers waiting on wake (under lock) */
  int waiting;               /* the caller waits on done (under lock) */
  relattn_task_fn fn;        /* the job: under lock */
  void *ctx;
  int n_tasks;
  _Atomic uint64_t next;     /* (job number << 32) | next task */
  atomic_int finished;       /* tasks of the job done (or skipped) */
  pool_scratch *scratch;     /* (n, RELATTN_POOL_SLOTS) */
  relattn_cancel_fn check;   /* polled by owner between tasks, or NULL */
  void *check_ctx;
  pthread_t owner;           /* the thread that set check */
  atomic_int cancelled;
};

/* Polls the check when called on its owner's thread; 1 once cancelled. */
static int stopping(relattn_pool *pool) {
  if (atomic_load_explicit(&pool->cancelled, memory_order_relaxed)) return 1;
  if (pool->check && pthread_equal(pthread_self(), pool->owner) &&
      pool->check(pool->check_ctx)) {
    atomic_store(&pool->cancelled, 1);
    return 1;
  }
  return 0;
}

typedef struct worker_arg {
  relattn_pool *pool;
  int id;
} worker_arg;

/* The job this thread is working on, so a nested run stays on its worker. */
static _Thread_local relattn_pool *in_pool = NULL;
static _Thread_local int in_pool_worker = 0;

static uint64_t next_of(unsigned long gen, int task) {
  return ((uint64_t)(uint32_t)gen << 32) | (uint32_t)task;
}

static long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* What a spin waits for: a job other than number old (or quit) ... */
static int new_job(relattn_pool *pool, unsigned long old) {
  return atomic_load_explicit(&pool->generation, memory_order_acquire) !=
             old ||
         atomic_load_explicit(&pool->quit, memory_order_relaxed);
}

/* ... or n_tasks tasks of the job done. */
static int tasks_done(relattn_pool *pool, unsigned long n_tasks) {
  return atomic_load_explicit(&pool->finished, memory_order_acquire) >=
         (int)n_tasks;
}

/* Spins up to SPIN_NS, yielding the CPU each turn, until ready(pool, arg):
** 1 when it is, 0 when the time ran out. */
static int spin(relattn_pool *pool,
                int (*ready)(relattn_pool *, unsigned long),
                unsigned long arg) {
  long t0 = 0;
  int i;
  for (i = 0;; i++) {
    if (ready(pool, arg)) return 1;
    sched_yield();
    if ((i & 63) == 0) {
      const long t = now_ns();
      if (!t0) t0 = t;
      else if (t - t0 > SPIN_NS) return 0;
    }
  }
}

/* Takes tasks of job gen until there are none left; skipped ones (the pool
** cancelled) count as done too. */
static void drain(relattn_pool *pool, int worker, unsigned long gen,
                  relattn_task_fn fn, void *ctx, int n_tasks) {
  in_pool = pool;
  in_pool_worker = worker;
  for (;;) {
    uint64_t v = atomic_load(&pool->next);
    int t;
    do {
      if ((uint32_t)(v >> 32) != (uint32_t)gen ||
          (int)(uint32_t)v >= n_tasks)
        goto out;
    } while (!atomic_compare_exchange_weak(&pool->next, &v, v + 1));
    t = (int)(uint32_t)v;
    if (!stopping(pool)) fn(ctx, t, worker);
    if (atomic_fetch_add(&pool->finished, 1) + 1 == n_tasks) {
      pthread_mutex_lock(&pool->lock);
      if (pool->waiting) pthread_cond_signal(&pool->done);
      pthread_mutex_unlock(&pool->lock);
    }
  }
out:
  in_pool = NULL;
}

static void *worker_main(void *argp) {
  worker_arg arg = *(worker_arg *)argp;
  relattn_pool *pool = arg.pool;
  unsigned long seen = 0;
  free(argp);
  for (;;) {
    relattn_task_fn fn;
    void *ctx;
    int n_tasks;
    spin(pool, new_job, seen);
    pthread_mutex_lock(&pool->lock);
    while (!atomic_load(&pool->quit) && atomic_load(&pool->generation) == seen) {
      pool->sleeping++;
      pthread_cond_wait(&pool->wake, &pool->lock);
      pool->sleeping--;
    }
    if (atomic_load(&pool->quit)) {
      pthread_mutex_unlock(&pool->lock);
      return NULL;
    }
    seen = atomic_load(&pool->generation);
    fn = pool->fn, ctx = pool->ctx, n_tasks = pool->n_tasks;
    pthread_mutex_unlock(&pool->lock);
    drain(pool, arg.id, seen, fn, ctx, n_tasks);
  }
}

int relattn_cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > 256 ? 256 : (int)n);
}

relattn_pool *relattn_pool_new(int n_threads) {
  relattn_pool *pool;
  int i;
  if (n_threads < 1) n_threads = 1;
  pool = calloc(1, sizeof *pool);
  if (!pool) return NULL;
  atomic_init(&pool->cancelled, 0);
  atomic_init(&pool->generation, 0);
  atomic_init(&pool->quit, 0);
  atomic_init(&pool->next, 0);
  atomic_init(&pool->finished, 0);
  pool->n = n_threads;
  pool->scratch = calloc((size_t)n_threads * RELATTN_POOL_SLOTS,
                         sizeof *pool->scratch);
  pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
  if (!pool->scratch || !pool->threads) goto fail_alloc;
  pthread_mutex_init(&pool->run_lock, NULL);
  pthread_mutex_init(&pool->lock, NULL);
  pthread_cond_init(&pool->wake, NULL);
  pthread_cond_init(&pool->done, NULL);
  for (i = 1; i < n_threads; i++) {
    worker_arg *arg = malloc(sizeof *arg);
    if (!arg) break;
    arg->pool = pool;
    arg->id = i;
    if (pthread_create(&pool->threads[i - 1], NULL, worker_main, arg) != 0) {
      free(arg);
      break;
    }
  }
  /* Fewer threads than asked (resource limits) still make a working pool. */
  pool->n = i;
  return pool;

fail_alloc:
  free(pool->scratch);
  free(pool->threads);
  free(pool);
  return NULL;
}

void relattn_pool_free(relattn_pool *pool) {
  int i;
  if (!pool) return;
  pthread_mutex_lock(&pool->lock);
  atomic_store(&pool->quit, 1);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  for (i = 1; i < pool->n; i++) pthread_join(pool->threads[i - 1], NULL);
  for (i = 0; i < pool->n * RELATTN_POOL_SLOTS; i++)
    relattn_free(pool->scratch[i].p);
  pthread_mutex_destroy(&pool->run_lock);
  pthread_mutex_destroy(&pool->lock);
  pthread_cond_destroy(&pool->wake);
  pthread_cond_destroy(&pool->done);
  free(pool->scratch);
  free(pool->threads);
  free(pool);
}

int relattn_pool_size(const relattn_pool *pool) { return pool ? pool->n : 1; }

int relattn_pool_worker(const relattn_pool *pool) {
  return pool && in_pool == pool ? in_pool_worker : 0;
}

void relattn_pool_run(relattn_pool *pool, int n_tasks, relattn_task_fn fn,
                      void *ctx) {
  unsigned long gen;
  int t;
  if (n_tasks <= 0) return;
  if (!pool || pool->n == 1 || n_tasks == 1 || in_pool) {
    int worker = (pool && in_pool == pool) ? in_pool_worker : 0;
    for (t = 0; t < n_tasks && !(pool && stopping(pool)); t++)
      fn(ctx, t, worker);
    return;
  }
  pthread_mutex_lock(&pool->run_lock);
  pthread_mutex_lock(&pool->lock);
  pool->fn = fn;
  pool->ctx = ctx;
  pool->n_tasks = n_tasks;
  gen = atomic_load(&pool->generation) + 1;
  atomic_store(&pool->finished, 0);
  atomic_store(&pool->next, next_of(gen, 0));
  atomic_store_explicit(&pool->generation, gen, memory_order_release);
  if (pool->sleeping) pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);

  drain(pool, 0, gen, fn, ctx, n_tasks);

  if (!spin(pool, tasks_done, (unsigned long)n_tasks)) {
    pthread_mutex_lock(&pool->lock);
    while (atomic_load(&pool->finished) < n_tasks) {
      pool->waiting = 1;
      pthread_cond_wait(&pool->done, &pool->lock);
    }
    pool->waiting = 0;
    pthread_mutex_unlock(&pool->lock);
  }
  pthread_mutex_unlock(&pool->run_lock);
}

void *relattn_pool_scratch_slot(relattn_pool *pool, int worker, int slot,
                                size_t size) {
  pool_scratch *s;
  if (!pool || worker < 0 || worker >= pool->n || slot < 0 ||
      slot >= RELATTN_POOL_SLOTS)
    return NULL;
  s = &pool->scratch[(size_t)worker * RELATTN_POOL_SLOTS + slot];
  if (s->size < size || !s->p) {
    void *p = relattn_alloc(size);
    if (!p) return NULL;
    relattn_free(s->p);
    s->p = p;
    s->size = size;
  }
  return s->p;
}

void *relattn_pool_scratch(relattn_pool *pool, int worker, size_t size) {
  return relattn_pool_scratch_slot(pool, worker, 0, size);
}

void relattn_pool_set_cancel(relattn_pool *pool, relattn_cancel_fn check,
                             void *ctx) {
  if (!pool) return;
  pool->check = check;
  pool->check_ctx = ctx;
  pool->owner = pthread_self();
  atomic_store(&pool->cancelled, 0);
}

void relattn_pool_cancel(relattn_pool *pool) {
  if (pool) atomic_store(&pool->cancelled, 1);
}

int relattn_pool_cancelled(relattn_pool *pool) {
  return pool ? atomic_load(&pool->cancelled) : 0;
}

int relattn_pool_poll(relattn_pool *pool) { return pool ? stopping(pool) : 0; }

void relattn_pool_trim(relattn_pool *pool, size_t keep) {
  int i;
  if (!pool) return;
  for (i = 0; i < pool->n * RELATTN_POOL_SLOTS; i++) {
    if (pool->scratch[i].size > keep) {
      relattn_free(pool->scratch[i].p);
      pool->scratch[i].p = NULL;
      pool->scratch[i].size = 0;
    }
  }
}
