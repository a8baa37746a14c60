/*
** batch.c: an ordered, deterministic batch runner (what relattn_scan drives).
**
** A producer (the connection's thread) adds items one by one: item s is the
** s-th added, and its data lives in the caller's ring slot s % capacity.
** Consecutive items are grouped into batches; worker threads run the
** batches, in any order and on any worker; the producer takes the results
** in item order (relattn_batch_wait on the head item, then pop).
**
** DETERMINISM
** Which items share a batch is a function of the items' costs and the end
** of the input alone, never of timing, the thread count or the reading pace:
** a batch is closed when it holds max_items items, when its cost reaches
** max_cost, when the next item would take it past max_cost, or when the
** producer says the input ended (relattn_batch_flush). The runner also
** closes the open batch when the head item is waited on while in it; that
** cannot move a boundary: capacity >= max_items (enforced), the producer
** fills every free slot before it waits (the scan does), and so the open
** batch reaches a boundary of its own before the head gets to it, unless the
** input ended. So a batch function whose per-item results depend only on the
** item (relattn_forward_batch: src/forward.c, DETERMINISM) gives results that
** are a function of the input alone; tests/unit/test_batch.c checks both.
**
** With no worker threads, the batches run on the producer's thread inside
** relattn_batch_wait, as worker 0.
*/
#include "relattn.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct relattn_batch {
  int n_threads;          /* worker threads started; 0: run in wait */
  int cap;                /* items in flight at most */
  int max_items;
  int64_t max_cost;
  relattn_batch_fn fn;
  void *ctx;
  pthread_mutex_t mu;
  pthread_cond_t work;    /* a batch was closed, or stop */
  pthread_cond_t done;    /* a batch finished */
  /* items head <= s < tail are in flight; [head, closed) are in closed
  ** batches, [closed, tail) the open one; batches starting before claim are
  ** taken by a worker */
  int64_t head, tail, closed, claim;
  int64_t open_cost;
  int *len;               /* (cap): at a batch's first item, its item count */
  unsigned char *is_done; /* (cap) */
  int stop;
  pthread_t *threads;     /* (n_threads) */
};

typedef struct batch_arg {
  relattn_batch *b;
  int worker;
} batch_arg;

/* Closes the open batch, if any; called with the lock held. */
static void close_open(relattn_batch *b) {
  if (b->tail == b->closed) return;
  b->len[b->closed % b->cap] = (int)(b->tail - b->closed);
  b->closed = b->tail;
  b->open_cost = 0;
  pthread_cond_broadcast(&b->work);
}

/* Takes the next closed batch and runs it; called with the lock held, which
** is released while fn runs. */
static void run_next(relattn_batch *b, int worker) {
  int64_t first = b->claim, s;
  int count = b->len[first % b->cap];
  b->claim += count;
  pthread_mutex_unlock(&b->mu);
  b->fn(b->ctx, first, count, worker);
  pthread_mutex_lock(&b->mu);
  for (s = first; s < first + count; s++) b->is_done[s % b->cap] = 1;
  pthread_cond_broadcast(&b->done);
}

static void *worker_main(void *argp) {
  batch_arg arg = *(batch_arg *)argp;
  relattn_batch *b = arg.b;
  free(argp);
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (!b->stop && b->claim >= b->closed)
      pthread_cond_wait(&b->work, &b->mu);
    if (b->stop) break;
    run_next(b, arg.worker);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

relattn_batch *relattn_batch_new(int n_threads, int capacity, int max_items,
                                 int64_t max_cost, relattn_batch_fn fn,
                                 void *ctx, char *err, size_t errlen) {
  relattn_batch *b;
  int i;
  if (capacity < 1 || max_items < 1 || max_cost < 0 || !fn || n_threads < 0) {
    relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                   "batch: bad arguments (capacity %d, max_items %d)",
                   capacity, max_items);
    return NULL;
  }
  b = calloc(1, sizeof *b);
  if (!b) goto nomem;
  b->cap = capacity;
  b->max_items = max_items < capacity ? max_items : capacity;
  b->max_cost = max_cost;
  b->fn = fn;
  b->ctx = ctx;
  b->len = calloc((size_t)capacity, sizeof *b->len);
  b->is_done = calloc((size_t)capacity, 1);
  b->threads = calloc((size_t)(n_threads > 0 ? n_threads : 1),
                      sizeof *b->threads);
  if (!b->len || !b->is_done || !b->threads) {
    free(b->len), free(b->is_done), free(b->threads), free(b);
    goto nomem;
  }
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->work, NULL);
  pthread_cond_init(&b->done, NULL);
  for (i = 0; i < n_threads; i++) {
    batch_arg *arg = malloc(sizeof *arg);
    if (!arg) break;
    arg->b = b;
    arg->worker = i;
    if (pthread_create(&b->threads[i], NULL, worker_main, arg) != 0) {
      free(arg);
      break;
    }
  }
  b->n_threads = i;
  if (n_threads > 0 && i == 0) {
    relattn_batch_free(b);
    relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                   "cannot start a worker thread");
    return NULL;
  }
  return b;
nomem:
  relattn_errorf(err, errlen, RELATTN_ERR_NOMEM, "out of memory");
  return NULL;
}

void relattn_batch_free(relattn_batch *b) {
  int i;
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  b->stop = 1;
  pthread_cond_broadcast(&b->work);
  pthread_mutex_unlock(&b->mu);
  for (i = 0; i < b->n_threads; i++) pthread_join(b->threads[i], NULL);
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->work);
  pthread_cond_destroy(&b->done);
  free(b->len);
  free(b->is_done);
  free(b->threads);
  free(b);
}

int relattn_batch_threads(const relattn_batch *b) { return b->n_threads; }

int relattn_batch_room(relattn_batch *b) {
  int room;
  pthread_mutex_lock(&b->mu);
  room = b->cap - (int)(b->tail - b->head);
  pthread_mutex_unlock(&b->mu);
  return room;
}

int64_t relattn_batch_next(relattn_batch *b) {
  int64_t s;
  pthread_mutex_lock(&b->mu);
  s = b->tail;
  pthread_mutex_unlock(&b->mu);
  return s;
}

int64_t relattn_batch_head(relattn_batch *b) {
  int64_t s;
  pthread_mutex_lock(&b->mu);
  s = b->head;
  pthread_mutex_unlock(&b->mu);
  return s;
}

int64_t relattn_batch_add(relattn_batch *b, int64_t cost) {
  int64_t s;
  if (cost < 0) cost = 0;
  pthread_mutex_lock(&b->mu);
  if (b->tail - b->head >= b->cap) {
    pthread_mutex_unlock(&b->mu);
    return -1;
  }
  /* The next item does not fit the open batch: close it first. */
  if (b->tail > b->closed && b->open_cost + cost > b->max_cost) close_open(b);
  s = b->tail++;
  b->is_done[s % b->cap] = 0;
  b->open_cost += cost;
  if (b->tail - b->closed >= b->max_items || b->open_cost >= b->max_cost)
    close_open(b);
  pthread_mutex_unlock(&b->mu);
  return s;
}

void relattn_batch_flush(relattn_batch *b) {
  pthread_mutex_lock(&b->mu);
  close_open(b);
  pthread_mutex_unlock(&b->mu);
}

int relattn_batch_wait(relattn_batch *b, int timeout_ms) {
  struct timespec ts;
  int rc = 1;
  pthread_mutex_lock(&b->mu);
  if (b->head >= b->tail) {
    pthread_mutex_unlock(&b->mu);
    return -1;
  }
  if (b->head >= b->closed) close_open(b);
  if (b->n_threads == 0) {
    while (!b->is_done[b->head % b->cap]) run_next(b, 0);
    pthread_mutex_unlock(&b->mu);
    return 1;
  }
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  while (!b->is_done[b->head % b->cap]) {
    if (pthread_cond_timedwait(&b->done, &b->mu, &ts) == ETIMEDOUT &&
        !b->is_done[b->head % b->cap]) {
      rc = 0;
      break;
    }
  }
  pthread_mutex_unlock(&b->mu);
  return rc;
}

void relattn_batch_pop(relattn_batch *b) {
  pthread_mutex_lock(&b->mu);
  if (b->head < b->tail && b->is_done[b->head % b->cap]) b->head++;
  pthread_mutex_unlock(&b->mu);
}
