/*
** blas.c: the one file that includes cblas.h.
**
** relattn runs its own worker threads and keeps OpenBLAS single-threaded
** inside them (DESIGN §5): several multi-threaded sgemm calls at once would
** oversubscribe the cores. OpenBLAS's thread count is process-wide and may
** belong to the host, so it is set for the duration of a call and restored.
*/
#include "relattn.h"

#include <cblas.h>

void relattn_sgemm(int ta, int tb, int m, int n, int k, float alpha,
                   const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

int relattn_blas_single(void) {
  int previous = openblas_get_num_threads();
  if (previous != 1) openblas_set_num_threads(1);
  return previous;
}

void relattn_blas_restore(int previous) {
  if (previous > 1 && openblas_get_num_threads() != previous)
    openblas_set_num_threads(previous);
}

const char *relattn_blas_config(void) { return openblas_get_config(); }

const char *relattn_blas_corename(void) { return openblas_get_corename(); }
