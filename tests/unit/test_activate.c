/*
** test_activate.c: the FFN's activations (src/forward.c,
** relattn_fwd_activate_on) on fresh random inputs.
**
** 1. The AVX-512 and AVX2 paths give the same bits for GELU, GELU-tanh and
**    ReLU, on every length (the vector blocks and the scalar tail), on
**    values of every size (|x| from 1e-30 to 1e30, both signs, zeros, the
**    clamps' edges, infinities and NaN) where this CPU runs both.
** 2. Every path against float64 (erf, tanh): |y - ref| <= 1e-6 (1 + |x|)
**    on finite inputs (the erf approximation is good to 1.5e-7, the tanh
**    form exact up to float32 rounding), ReLU exactly.
*/
#include <math.h>
#include <string.h>

#include "fwd.h"
#include "relattn.h"
#include "unit.h"

#define N 1000

static double reference(double x, int activation) {
  switch (activation) {
    case RELATTN_RELU: return x > 0 ? x : 0;
    case RELATTN_GELU_TANH:
      return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    default: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752));
  }
}

/* Inputs of every size: uniform in [-8, 8] mostly, then the magnitudes and
** the special values. */
static void fill(float *x, int n) {
  static const float special[] = {0.0f, -0.0f, 9.3f * 1.41421356f,
                                  -9.3f * 1.41421356f, 1e30f, -1e30f,
                                  1e-30f, -1e-30f, 50.0f, -50.0f};
  int i;
  for (i = 0; i < n; i++) {
    const double u = unit_uniform();
    if (i % 7 == 3)
      x[i] = (float)((u < 0.5 ? -1 : 1) * pow(10.0, -30 + 60 * unit_uniform()));
    else if (i % 11 == 5)
      x[i] = special[unit_next() % (sizeof special / sizeof *special)];
    else
      x[i] = (float)(16.0 * u - 8.0);
  }
}

int main(void) {
  static const int acts[] = {RELATTN_GELU, RELATTN_GELU_TANH, RELATTN_RELU};
  static const char *const names[] = {"gelu", "gelu_tanh", "relu"};
  static const char *const paths[] = {"avx512", "avx2", "scalar"};
  static float x[N + 3], y[3][N + 3];
  int a, p, n, i, both;
  unit_seed();
  both = relattn_gemm_path_ok("avx512") && relattn_gemm_path_ok("avx2");
  printf("paths here: avx512 %d, avx2 %d\n", relattn_gemm_path_ok("avx512"),
         relattn_gemm_path_ok("avx2"));
  for (a = 0; a < 3; a++)
    for (n = 1; n <= N; n += n < 40 ? 1 : 97) {
      fill(x, n);
      for (p = 0; p < 3; p++) {
        memcpy(y[p], x, sizeof(float) * (size_t)n);
        if (p < 2 && !relattn_gemm_path_ok(paths[p])) continue;
        relattn_fwd_activate_on(paths[p], y[p], (size_t)n, acts[a]);
        for (i = 0; i < n; i++) {
          const double want = reference(x[i], acts[a]);
          if (!isfinite(x[i])) continue;
          CHECK(fabs(y[p][i] - want) <= 1e-6 * (1 + fabs(x[i])),
                "%s %s n=%d x=%.9g: %.9g, float64 %.9g", names[a], paths[p],
                n, x[i], y[p][i], want);
        }
      }
      if (both) {
        /* NaN and the infinities too: the same operations on both */
        x[0] = NAN;
        if (n > 1) x[n - 1] = INFINITY;
        if (n > 2) x[n / 2] = -INFINITY;
        memcpy(y[0], x, sizeof(float) * (size_t)n);
        memcpy(y[1], x, sizeof(float) * (size_t)n);
        relattn_fwd_activate_on("avx512", y[0], (size_t)n, acts[a]);
        relattn_fwd_activate_on("avx2", y[1], (size_t)n, acts[a]);
        CHECK(memcmp(y[0], y[1], sizeof(float) * (size_t)n) == 0,
              "%s n=%d: avx512 and avx2 differ", names[a], n);
      }
    }
  UNIT_DONE();
}
