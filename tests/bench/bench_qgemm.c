/*
** bench_qgemm.c: the int8 and bf16 linear layers (src/qgemm.c) against
** relattn_gemm's float32 (src/gemm.c), one thread.
**
** Shapes rows x out x in of a width-384 encoder with d_ff 1536: the FFN's
** two products over a block of 154 rows, and the first over 52. Each
** variant runs its product over the weights of 6 layers in turn (so from
** L3, as in a forward pass); variants are interleaved, the order rotating
** every round, and each one's median is reported as GFLOP/s-equivalent
** (2 rows out in per product) and as a ratio to float32. int8 and bf16
** times include quantizing (converting) the activations, which every call
** does. Also: the largest |y - y_fp32| over max |y_fp32| of each.
**
** Measured here (AMD, AVX512 VNNI and BF16, 31 rounds), GFLOP/s and ratio
** to float32: 154 x 1536 x 384 fp32 183, int8 668 (3.7x), bf16 418 (2.3x);
** 154 x 384 x 1536 fp32 186, int8 652 (3.5x), bf16 362 (1.9x); 52 x 1536 x
** 384 fp32 142, int8 613 (4.3x), bf16 334 (2.3x). Forced paths on the first
** shape: int8 avxvnni 1.2x, int8 avx2 0.6x, bf16 avx2 (emulated) 0.2x.
** Error against float32: int8 5-7e-3, bf16 2-3e-3 of the largest output.
**
**   bench_qgemm [--quick]
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "relattn.h"

#define LAYERS 6

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static float uniform(void) {
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (float)((double)((rng * 2685821657736338717ull) >> 11) /
                     9007199254740992.0 * 2.0 - 1.0);
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { V_F32, V_Q8, V_BF16, V_Q8_AVXVNNI, V_Q8_AVX2, V_BF16_AVX2, NV };
static const char *const names[NV] = {"fp32 relattn_gemm", "int8 ",
                                      "bf16 ", "int8 avxvnni",
                                      "int8 avx2", "bf16 avx2 (emulated)"};

typedef struct layer {
  float *wp, *b;
  relattn_q8w q8;
  relattn_bf16w bf;
} layer;

static void run(int v, float *y, const float *x, int rows, int in, int out,
                layer *L, void *scratch) {
  int l;
  for (l = 0; l < LAYERS; l++) switch (v) {
      case V_F32:
        relattn_gemm(y, out, x, in, rows, in, out, L[l].wp, L[l].b, 0);
        break;
      case V_Q8:
        relattn_q8_gemm(y, out, x, in, rows, &L[l].q8, L[l].b, 0, scratch);
        break;
      case V_BF16:
        relattn_bf16_gemm(y, out, x, in, rows, &L[l].bf, L[l].b, 0, scratch);
        break;
      case V_Q8_AVXVNNI:
        relattn_q8_gemm_on("avxvnni", y, out, x, in, rows, &L[l].q8, L[l].b, 0,
                           scratch);
        break;
      case V_Q8_AVX2:
        relattn_q8_gemm_on("avx2", y, out, x, in, rows, &L[l].q8, L[l].b, 0,
                           scratch);
        break;
      case V_BF16_AVX2:
        relattn_bf16_gemm_on("avx2", y, out, x, in, rows, &L[l].bf, L[l].b, 0,
                             scratch);
        break;
    }
}

static int runs_here(int v) {
  switch (v) {
    case V_Q8_AVXVNNI:
      return relattn_q8_path_ok("avxvnni") &&
             strcmp(relattn_q8_path(), "avxvnni") != 0;
    case V_Q8_AVX2:
      return relattn_q8_path_ok("avx2") && strcmp(relattn_q8_path(), "avx2") != 0;
    case V_BF16_AVX2:
      return relattn_bf16_path_ok("avx2") &&
             strcmp(relattn_bf16_path(), "avx2") != 0;
    default:
      return 1;
  }
}

static void shape(int rows, int out, int in, int rounds) {
  layer L[LAYERS];
  const size_t nw = (size_t)out * in;
  float *w = malloc(sizeof(float) * nw), *x = relattn_alloc(sizeof(float) * (size_t)rows * in);
  float *y[NV];
  int8_t *q = malloc(nw);
  uint16_t *wb = malloc(sizeof(uint16_t) * nw);
  float *sw = malloc(sizeof(float) * out);
  size_t ss = relattn_q8_scratch(rows, in);
  void *scratch;
  double *t[NV], med[NV], ymax = 0, err[NV];
  const double flop = 2.0 * rows * out * in * LAYERS;
  int l, v, i, k, reps = 1;
  if (relattn_bf16_scratch(rows, in) > ss) ss = relattn_bf16_scratch(rows, in);
  scratch = relattn_alloc(ss);
  for (k = 0; k < rows * in; k++) x[k] = uniform();
  for (l = 0; l < LAYERS; l++) {
    for (k = 0; k < (int)nw; k++) w[k] = uniform() * 0.05f;
    L[l].b = relattn_alloc(sizeof(float) * out);
    for (k = 0; k < out; k++) L[l].b[k] = uniform() * 0.1f;
    L[l].wp = relattn_alloc(sizeof(float) * nw);
    relattn_pack_into(L[l].wp, w, out, in);
    relattn_q8_quantize(q, sw, w, out, in);
    for (k = 0; k < (int)nw; k++) wb[k] = relattn_f32_to_bf16(w[k]);
    if (relattn_q8w_new(&L[l].q8, q, sw, out, in) ||
        relattn_bf16w_new(&L[l].bf, wb, out, in)) {
      fprintf(stderr, "out of memory\n");
      exit(1);
    }
  }
  for (v = 0; v < NV; v++) {
    y[v] = relattn_alloc(sizeof(float) * (size_t)rows * out);
    t[v] = malloc(sizeof(double) * rounds);
  }
  /* enough products per sample for ~5 ms */
  {
    double t0 = cpu_now();
    run(V_F32, y[0], x, rows, in, out, L, scratch);
    t0 = cpu_now() - t0;
    reps = t0 > 0 ? (int)(0.005 / t0) + 1 : 1;
  }
  for (i = 0; i < rounds; i++)
    for (k = 0; k < NV; k++) {
      const int vv = (k + i) % NV;
      double t0;
      int rep;
      if (!runs_here(vv)) continue;
      t0 = cpu_now();
      for (rep = 0; rep < reps; rep++)
        run(vv, y[vv], x, rows, in, out, L, scratch);
      t[vv][i] = (cpu_now() - t0) / reps;
    }
  for (k = 0; k < rows * out; k++)
    if (fabs(y[V_F32][k]) > ymax) ymax = fabs(y[V_F32][k]);
  for (v = 0; v < NV; v++) {
    if (!runs_here(v)) continue;
    qsort(t[v], rounds, sizeof(double), cmp_double);
    med[v] = t[v][rounds / 2];
    err[v] = 0;
    for (k = 0; k < rows * out; k++)
      if (fabs(y[v][k] - y[V_F32][k]) > err[v]) err[v] = fabs(y[v][k] - y[V_F32][k]);
  }
  printf("\n%d x %d x %d (rows x out x in), %d layers' weights in turn\n", rows,
         out, in, LAYERS);
  printf("  %-24s %9s %9s %12s\n", "variant", "GFLOP/s", "vs fp32", "max err/max");
  for (v = 0; v < NV; v++) {
    char name[64];
    if (!runs_here(v)) continue;
    snprintf(name, sizeof name, "%s%s", names[v],
             v == V_Q8 ? relattn_q8_path() : v == V_BF16 ? relattn_bf16_path() : "");
    printf("  %-24s %9.1f %8.2fx %12.2e\n", name, flop / med[v] * 1e-9,
           med[V_F32] / med[v], err[v] / ymax);
  }
  for (l = 0; l < LAYERS; l++) {
    relattn_free(L[l].wp), relattn_free(L[l].b);
    relattn_q8w_free(&L[l].q8), relattn_bf16w_free(&L[l].bf);
  }
  for (v = 0; v < NV; v++) relattn_free(y[v]), free(t[v]);
  free(w), free(q), free(wb), free(sw);
  relattn_free(x), relattn_free(scratch);
}

int main(int argc, char **argv) {
  const int rounds = argc > 1 && strcmp(argv[1], "--quick") == 0 ? 5 : 31;
  printf("one thread; float32 path %s, int8 path %s, bf16 path %s; medians of "
         "%d interleaved rounds\n",
         relattn_simd_path(), relattn_q8_path(), relattn_bf16_path(), rounds);
  shape(154, 1536, 384, rounds);
  shape(154, 384, 1536, rounds);
  shape(52, 1536, 384, rounds);
  return 0;
}
