/*
** test_gemm.c: the linear layers' kernel (src/gemm.c) on fresh random inputs.
**
** 1. Its definition, bit for bit: every path this CPU runs (avx512, avx2,
**    scalar) gives y[r][c] = (acc ? y : 0) + b, then fmaf(x[r][k], W[c][k], .)
**    for k in order, computed here from W as stored (not in panel order), so
**    the panel order, the tiles, the chunks of k and the masked edges are all
**    checked against the one chain.
** 2. Against float64: |y - ref| <= 1e-5 (1 + sum |x W| terms) per element.
** 3. Pack / unpack round trip, and in-place relattn_pack = relattn_pack_into.
** 4. relattn_gemm_nn (B read in place) against its chain the same way.
** Shapes: rows 1..40 (edge tiles of 12 and 6), out not a multiple of the
** panel (1, 17, 31, 33, 95) and multiples (32, 64), in 1..600 (one and three
** chunks of k; rows of one tile take k whole), padded leading dimensions, with and without b, accumulate.
*/
#include <string.h>

#include "relattn.h"
#include "unit.h"

static float *rand_floats(size_t n) {
  float *p = relattn_alloc(sizeof(float) * (n ? n : 1));
  size_t i;
  for (i = 0; i < n; i++) p[i] = (float)unit_uniform();
  return p;
}

static void one_case(int rows, int in, int out, int with_b, int acc, int pad) {
  static const char *paths[] = {"avx512", "avx2", "scalar"};
  const int ldx = in + pad, ldy = out + 2 * pad;
  float *x = rand_floats((size_t)rows * ldx), *w = rand_floats((size_t)out * in);
  float *b = with_b ? rand_floats((size_t)out) : NULL;
  float *y0 = rand_floats((size_t)rows * ldy); /* what acc adds to */
  float *want = relattn_alloc(sizeof(float) * (size_t)rows * ldy);
  float *got = relattn_alloc(sizeof(float) * (size_t)rows * ldy);
  float *wp = relattn_alloc(sizeof(float) * (size_t)out * in);
  float *back = relattn_alloc(sizeof(float) * (size_t)out * in);
  int r, c, k, p, bad_def = 0, bad_ref = 0, bad_pad = 0;
  double worst = 0;

  relattn_pack_into(wp, w, out, in);
  relattn_unpack(back, wp, out, in);
  CHECK(memcmp(back, w, sizeof(float) * (size_t)out * in) == 0,
        "unpack(pack(W)) != W (out %d in %d)", out, in);
  memcpy(back, w, sizeof(float) * (size_t)out * in);
  CHECK(relattn_pack(back, out, in) == RELATTN_OK &&
            memcmp(back, wp, sizeof(float) * (size_t)out * in) == 0,
        "in-place pack differs (out %d in %d)", out, in);

  /* the definition, from W as stored */
  memcpy(want, y0, sizeof(float) * (size_t)rows * ldy);
  for (r = 0; r < rows; r++)
    for (c = 0; c < out; c++) {
      float v = acc ? want[(size_t)r * ldy + c] : 0.0f;
      double ref = acc ? (double)v : 0.0, mag = fabs(ref);
      if (b) {
        v += b[c];
        ref += b[c];
        mag += fabs(b[c]);
      }
      for (k = 0; k < in; k++) {
        v = fmaf(x[(size_t)r * ldx + k], w[(size_t)c * in + k], v);
        ref += (double)x[(size_t)r * ldx + k] * w[(size_t)c * in + k];
        mag += fabs((double)x[(size_t)r * ldx + k] * w[(size_t)c * in + k]);
      }
      want[(size_t)r * ldy + c] = v;
      if (fabs(v - ref) > 1e-5 * (1 + mag)) bad_ref++;
      if (fabs(v - ref) > worst) worst = fabs(v - ref);
    }
  CHECK(bad_ref == 0, "definition vs float64: %d elements off (worst %g)",
        bad_ref, worst);

  for (p = 0; p < 3; p++) {
    if (!relattn_gemm_path_ok(paths[p])) continue;
    memcpy(got, y0, sizeof(float) * (size_t)rows * ldy);
    relattn_gemm_on(paths[p], got, ldy, x, ldx, rows, in, out, wp, b, acc);
    bad_def = bad_pad = 0;
    for (r = 0; r < rows; r++) {
      for (c = 0; c < out; c++)
        if (memcmp(&got[(size_t)r * ldy + c], &want[(size_t)r * ldy + c],
                   sizeof(float)) != 0)
          bad_def++;
      for (c = out; c < ldy; c++) /* past out: untouched */
        if (got[(size_t)r * ldy + c] != y0[(size_t)r * ldy + c]) bad_pad++;
    }
    CHECK(bad_def == 0,
          "%s: %d of %d elements differ from the fmaf chain (rows %d in %d "
          "out %d b %d acc %d)",
          paths[p], bad_def, rows * out, rows, in, out, with_b, acc);
    CHECK(bad_pad == 0, "%s: wrote %d elements past out", paths[p], bad_pad);
  }
  relattn_free(x), relattn_free(w), relattn_free(b), relattn_free(y0);
  relattn_free(want), relattn_free(got), relattn_free(wp), relattn_free(back);
}

/* relattn_gemm_nn (the attention's y += x B, B read in place with rows ldb
** apart) against the same chain: from y, fmaf over k in order. */
static void nn_case(int rows, int in, int out, int pad) {
  const int ldx = in + pad, ldb = out + 3 * pad, ldy = out + pad;
  float *x = rand_floats((size_t)rows * ldx), *bm = rand_floats((size_t)in * ldb);
  float *y = rand_floats((size_t)rows * ldy);
  float *want = relattn_alloc(sizeof(float) * (size_t)rows * ldy);
  int r, c, k, bad = 0;
  memcpy(want, y, sizeof(float) * (size_t)rows * ldy);
  for (r = 0; r < rows; r++)
    for (c = 0; c < out; c++) {
      float v = want[(size_t)r * ldy + c];
      for (k = 0; k < in; k++)
        v = fmaf(x[(size_t)r * ldx + k], bm[(size_t)k * ldb + c], v);
      want[(size_t)r * ldy + c] = v;
    }
  relattn_gemm_nn(y, ldy, x, ldx, rows, in, out, bm, ldb);
  for (r = 0; r < rows; r++)
    for (c = 0; c < ldy; c++)
      if (memcmp(&y[(size_t)r * ldy + c], &want[(size_t)r * ldy + c],
                 sizeof(float)) != 0)
        bad++;
  CHECK(bad == 0, "gemm_nn on %s: %d elements differ (rows %d in %d out %d)",
        relattn_simd_path(), bad, rows, in, out);
  relattn_free(x), relattn_free(bm), relattn_free(y), relattn_free(want);
}

int main(void) {
  static const int outs[] = {1, 17, 31, 32, 33, 64, 95};
  static const int ins[] = {1, 7, 64, 256, 257, 600};
  static const int rowss[] = {1, 5, 6, 7, 12, 13, 40};
  int i, j, t;
  unit_seed();
  printf("paths here: avx512 %d, avx2 %d\n", relattn_gemm_path_ok("avx512"),
         relattn_gemm_path_ok("avx2"));
  CHECK(relattn_gemm_path_ok("scalar"), "the scalar path always runs");
  CHECK(!relattn_gemm_path_ok("sse9"), "an unknown path is refused");
  for (i = 0; i < 7; i++)
    for (j = 0; j < 6; j++)
      one_case(rowss[(i + j) % 7], ins[j], outs[i], (i + j) % 2, 0, 0);
  for (t = 0; t < 12; t++)
    one_case(1 + (int)(unit_next() % 40), 1 + (int)(unit_next() % 400),
             1 + (int)(unit_next() % 100), (int)(unit_next() % 2),
             (int)(unit_next() % 2), (int)(unit_next() % 3));
  one_case(40, 384, 96, 1, 1, 1); /* a width-384 layer's shape, residual */
  for (t = 0; t < 10; t++)
    nn_case(1 + (int)(unit_next() % 40), 1 + (int)(unit_next() % 600),
            1 + (int)(unit_next() % 100), (int)(unit_next() % 3));
  nn_case(256, 300, 64, 1100); /* P V: a head's values inside the qkv rows */
  UNIT_DONE();
}
