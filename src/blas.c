/*
** blas.c: the one file that includes cblas.h.
**
** relattn runs its own worker threads and keeps OpenBLAS single-threaded
** inside them: several multi-threaded sgemm calls at once would
** oversubscribe the cores. OpenBLAS's thread count is process-wide and may
** belong to the host, so it is set for the duration of a call and restored.
*/
#include "relattn.h"

#include <cblas.h>
#include <pthread.h>

/* Several callers (connections, scans) may hold "single" at once: the first
** saves the host's count and sets 1, the last puts it back. */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int blas_holders = 0;
static int blas_saved = 1;

void relattn_sgemm(int ta, int tb, int m, int n, int k, float alpha,
                   const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

int relattn_blas_single(void) {
  int previous;
  pthread_mutex_lock(&blas_lock);
  if (blas_holders++ == 0) {
    blas_saved = openblas_get_num_threads();
    if (blas_saved != 1) openblas_set_num_threads(1);
  }
  previous = blas_saved;
  pthread_mutex_unlock(&blas_lock);
  return previous;
}

void relattn_blas_restore(int previous) {
  (void)previous; /* the first holder's saved count is what comes back */
  pthread_mutex_lock(&blas_lock);
  if (blas_holders > 0 && --blas_holders == 0 && blas_saved > 1 &&
      openblas_get_num_threads() != blas_saved)
    openblas_set_num_threads(blas_saved);
  pthread_mutex_unlock(&blas_lock);
}

const char *relattn_blas_config(void) { return openblas_get_config(); }

const char *relattn_blas_corename(void) { return openblas_get_corename(); }
