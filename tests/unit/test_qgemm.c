/*
** test_qgemm.c: the int8 and bf16 linear layers (src/qgemm.c) on fresh
** random inputs.
**
** int8
** 1. Weights: q in [-127, 127], each row's largest |W| at +-127,
**    |W - q s| <= s (1/2 + 2^-16) (ties to even, checked on exact halves),
**    pack / unpack and the row sums.
** 2. Activations, every path the same bytes, scales and zero points as the
**    scalar one; |x - (q - z) s| <= s (1/2 + 2^-16); a row of zeros,
**    one-sided rows.
** 3. The product, bit for bit on every path this CPU runs, against its
**    definition computed here from the row-major q: the int32 sum, then
**    fmaf((float)(acc - z sum_q), s_x s_w, (accumulate ? y : 0) + b).
** 3b. A weight's rows from a panel on (relattn_q8w_rows, as DeBERTa's
**    tables are read for a block's buckets): every path the same bits as
**    the whole weight's columns; relattn_q8w_dot (one row against one
**    quantized row) the same bits as the product without b.
** 4. Against float64 of the dequantized math: |y - ref| <= 2^-22 (|terms|);
**    and against float64 of the unquantized x, W: the quantization's own
**    bound sum_k |dx||w| + |x||dw| + |dx||dw|, |dx| <= s_x (1/2 + 2^-16),
**    |dw| the same with s_w (the division x / s rounds too).
** bf16
** 5. relattn_f32_to_bf16 against the nearest of the two neighbours (ties
**    to even), subnormals to signed zeros, NaN kept; pack / unpack.
** 6. The product on every path against vdpbf16ps's definition computed
**    here with __float128 for the flush below FLT_MIN (the AVX-512 BF16
**    path is the instruction itself, so this also checks the emulation
**    against the hardware); inputs near FLT_MIN, where the flush decides.
** 6b. A bf16 weight's rows from a panel (relattn_bf16w_rows) on every
**    path, and relattn_bf16w_dot, the same bits as the whole product.
** 7. Against float64: |y - ref| <= (in + 2) 2^-24 |terms| on the bf16
**    values, plus 2^-7 |terms| from rounding x and W to bf16.
** 8. The same products by columns (x prepared once, then pieces of whole
**    panels in any order: what relattn_fwd_rows runs on threads).
** Shapes: rows 1..40, out 1..100 (panel edges 31, 32, 33, 95), in 1..600
** (not multiples of 4, 64), padded leading dimensions, with and without b,
** accumulate.
*/
#include <float.h>
#include <string.h>

#include "relattn.h"
#include "unit.h"

static const char *const q8_paths[] = {"avx512vnni", "avxvnni", "avx2",
                                       "scalar"};
static const char *const bf_paths[] = {"avx512bf16", "avx2", "scalar"};

static float *rand_floats(size_t n, double scale) {
  float *p = relattn_alloc(sizeof(float) * (n ? n : 1));
  size_t i;
  for (i = 0; i < n; i++) p[i] = (float)(scale * unit_uniform());
  return p;
}

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* Columns by panels in a shuffled order, as threads take them (the _cols
** entry points, src/forward.c's relattn_fwd_rows): width 1 or 2 panels
** each, the last one past out. Returns how many elements differ from want
** or were written past out (pad columns must stay y0's). */
static int cols_check(int kind, const void *wt, int out, float *got,
                      const float *want, const float *y0, int rows, int ldy,
                      const float *b, int acc, const void *scratch) {
  const int n_panels = (out + 31) / 32;
  int order[8], n = 0, i, r, c, bad = 0;
  for (i = 0; i < n_panels; i += 1 + i % 2) order[n++] = i;
  memcpy(got, y0, sizeof(float) * (size_t)rows * ldy);
  for (i = n - 1; i >= 0; i--) { /* last first */
    const int c0 = order[i] * 32;
    const int c1 = (i + 1 < n ? order[i + 1] * 32 : out + 7);
    if (kind == 8)
      relattn_q8_gemm_cols(got, ldy, rows, wt, b, acc, scratch, c0, c1);
    else
      relattn_bf16_gemm_cols(got, ldy, rows, wt, b, acc, scratch, c0, c1);
  }
  for (r = 0; r < rows; r++) {
    for (c = 0; c < out; c++)
      bad += fbits(got[(size_t)r * ldy + c]) != fbits(want[(size_t)r * ldy + c]);
    for (c = out; c < ldy; c++)
      bad += fbits(got[(size_t)r * ldy + c]) != fbits(y0[(size_t)r * ldy + c]);
  }
  return bad;
}

/* ---- int8 ---------------------------------------------------------------- */

static void q8_weights(void) {
  /* exact halves: s = 1, so W / s is the value itself */
  static const float row[6] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -3.5f};
  static const int8_t want[6] = {127, 0, 2, 2, 0, -4};
  const int out = 37, in = 70;
  float *w = rand_floats((size_t)out * in, 3.0), s[37], s1;
  int8_t *q = relattn_alloc((size_t)out * in), *back = relattn_alloc((size_t)out * in);
  int8_t q1[6];
  relattn_q8w qw;
  int c, k, bad = 0, top = 0;
  relattn_q8_quantize(q1, &s1, row, 1, 6);
  CHECK(s1 == 1.0f && memcmp(q1, want, 6) == 0,
        "ties to even: s %g, q %d %d %d %d %d %d", s1, q1[0], q1[1], q1[2],
        q1[3], q1[4], q1[5]);
  for (k = 0; k < in; k++) w[5 * in + k] = 0.0f; /* a zero row */
  relattn_q8_quantize(q, s, w, out, in);
  CHECK(s[5] == 0.0f, "a zero row's scale is %g", s[5]);
  for (c = 0; c < out; c++) {
    int has_top = 0;
    for (k = 0; k < in; k++) {
      const int v = q[(size_t)c * in + k];
      const double d = fabs((double)w[(size_t)c * in + k] - (double)v * s[c]);
      if (v < -127 || v > 127 || d > s[c] * (0.5 + 0x1p-16)) bad++;
      if (v == 127 || v == -127) has_top = 1;
    }
    if (c != 5) top += has_top;
  }
  CHECK(bad == 0, "q8 weights: %d elements off the round trip", bad);
  CHECK(top == out - 1, "only %d of %d rows reach +-127", top, out - 1);
  CHECK(relattn_q8w_new(&qw, q, s, out, in) == RELATTN_OK, "q8w_new");
  relattn_q8w_unpack(back, &qw);
  CHECK(memcmp(back, q, (size_t)out * in) == 0, "q8 unpack(pack(q)) != q");
  for (c = 0, bad = 0; c < out; c++) {
    int32_t sum = 0;
    for (k = 0; k < in; k++) sum += q[(size_t)c * in + k];
    if (sum != qw.sum[c] || s[c] != qw.scale[c]) bad++;
  }
  CHECK(bad == 0, "q8 row sums or scales differ in %d rows", bad);
  { /* one row, as an embedding lookup reads it: q s, the same floats the
    ** whole table dequantizes to */
    float *all = relattn_alloc(sizeof(float) * (size_t)out * in);
    float *row = relattn_alloc(sizeof(float) * (size_t)in);
    relattn_q8w_dequantize(all, &qw);
    for (c = 0, bad = 0; c < out; c++) {
      relattn_q8w_row(row, &qw, c);
      for (k = 0; k < in; k++)
        if (fbits(row[k]) != fbits((float)q[(size_t)c * in + k] * s[c]) ||
            fbits(row[k]) != fbits(all[(size_t)c * in + k]))
          bad++;
    }
    CHECK(bad == 0, "q8 row lookup: %d elements differ from q s", bad);
    relattn_free(all), relattn_free(row);
  }
  relattn_q8w_free(&qw);
  CHECK(relattn_q8w_new(&qw, q, s, out, RELATTN_Q8_MAX_IN + 1) ==
                RELATTN_ERR_TOOBIG && qw.w == NULL,
        "in past RELATTN_Q8_MAX_IN is refused");
  CHECK(relattn_q8w_new(&qw, q, s, 0, in) == RELATTN_ERR_ARG,
        "out 0 is refused");
  relattn_free(w), relattn_free(q), relattn_free(back);
}

static void q8_activations(int rows, int in, int ldx) {
  const int ldq = in + 9 - in % 4; /* past in rounded to 4 */
  float *x = rand_floats((size_t)rows * ldx, 2.0), sx[40], sx0[40];
  uint8_t *q = relattn_alloc((size_t)rows * ldq), *q0 = relattn_alloc((size_t)rows * ldq);
  int32_t zx[40], zx0[40];
  const int kp = (in + 3) / 4 * 4;
  int r, k, p, bad = 0;
  if (rows > 1) /* a row of zeros, an all-positive one, an all-negative one */
    for (k = 0; k < in; k++) x[k] = 0.0f;
  if (rows > 2)
    for (k = 0; k < in; k++) x[ldx + k] = fabsf(x[ldx + k]) + 0.25f;
  if (rows > 3)
    for (k = 0; k < in; k++) x[2 * ldx + k] = -fabsf(x[2 * ldx + k]) - 0.25f;
  memset(q0, 0xAA, (size_t)rows * ldq);
  relattn_q8_quantize_rows_on("scalar", q0, ldq, sx0, zx0, x, ldx, rows, in);
  for (r = 0; r < rows; r++) {
    const float s = sx0[r];
    if (zx0[r] < 0 || zx0[r] > 255) bad++;
    for (k = 0; k < in; k++) {
      const double d = fabs((double)x[(size_t)r * ldx + k] -
                            ((double)q0[(size_t)r * ldq + k] - zx0[r]) * s);
      /* 1/2 of the rounding, plus x / s's own: |x / s| <= 256 units of 2^-24 */
      if (d > s * (0.5 + 0x1p-16)) bad++;
    }
    for (k = in; k < kp; k++)
      if (q0[(size_t)r * ldq + k] != 0) bad++;
  }
  CHECK(bad == 0, "q8 activations (rows %d in %d): %d off the round trip",
        rows, in, bad);
  if (rows > 1) CHECK(sx0[0] == 0.0f && zx0[0] == 0, "a zero row: s %g z %d", sx0[0], zx0[0]);
  if (rows > 2) CHECK(zx0[1] == 0, "an all-positive row: z %d", zx0[1]);
  if (rows > 3) CHECK(zx0[2] == 255, "an all-negative row: z %d", zx0[2]);
  for (p = 0; p < 3; p++) {
    if (!relattn_q8_path_ok(q8_paths[p])) continue;
    memset(q, 0x55, (size_t)rows * ldq);
    relattn_q8_quantize_rows_on(q8_paths[p], q, ldq, sx, zx, x, ldx, rows, in);
    for (r = 0, bad = 0; r < rows; r++)
      if (memcmp(q + (size_t)r * ldq, q0 + (size_t)r * ldq, kp) != 0 ||
          fbits(sx[r]) != fbits(sx0[r]) || zx[r] != zx0[r])
        bad++;
    CHECK(bad == 0, "%s: %d of %d rows quantized unlike scalar (in %d)",
          q8_paths[p], bad, rows, in);
  }
  relattn_free(x), relattn_free(q), relattn_free(q0);
}

static void q8_case(int rows, int in, int out, int with_b, int acc, int pad) {
  const int ldx = in + pad, ldy = out + 2 * pad, ldq = in + 4;
  float *x = rand_floats((size_t)rows * ldx, 1.0);
  float *w = rand_floats((size_t)out * in, 0.5);
  float *b = with_b ? rand_floats((size_t)out, 1.0) : NULL;
  float *y0 = rand_floats((size_t)rows * ldy, 1.0);
  float *want = relattn_alloc(sizeof(float) * (size_t)rows * ldy);
  float *got = relattn_alloc(sizeof(float) * (size_t)rows * ldy);
  float *sw = relattn_alloc(sizeof(float) * (size_t)out);
  int8_t *q = relattn_alloc((size_t)out * in);
  uint8_t *xq = relattn_alloc((size_t)rows * ldq);
  float sx[40];
  int32_t zx[40];
  void *scratch = relattn_alloc(relattn_q8_scratch(rows, in));
  relattn_q8w qw;
  int r, c, k, p, bad_def, bad_pad, bad_ref = 0, bad_fp = 0;
  double worst = 0, worst_fp = 0;

  relattn_q8_quantize(q, sw, w, out, in);
  CHECK(relattn_q8w_new(&qw, q, sw, out, in) == RELATTN_OK, "q8w_new");
  relattn_q8_quantize_rows_on("scalar", xq, ldq, sx, zx, x, ldx, rows, in);
  memcpy(want, y0, sizeof(float) * (size_t)rows * ldy);
  for (r = 0; r < rows; r++)
    for (c = 0; c < out; c++) {
      const float *xr = x + (size_t)r * ldx, *wr = w + (size_t)c * in;
      const float y = want[(size_t)r * ldy + c];
      const float start = acc ? (b ? y + b[c] : y) : (b ? b[c] : 0.0f);
      int64_t dot = 0, sum = 0;
      double ref, mag, fp = 0, fp_bound = 0, ya = acc ? y : 0.0;
      float v;
      for (k = 0; k < in; k++) {
        dot += (int64_t)xq[(size_t)r * ldq + k] * q[(size_t)c * in + k];
        sum += q[(size_t)c * in + k];
      }
      v = fmaf((float)(int32_t)(dot - (int64_t)zx[r] * sum), sx[r] * sw[c],
               start);
      want[(size_t)r * ldy + c] = v;
      ref = (double)(dot - zx[r] * sum) * sx[r] * sw[c];
      mag = fabs(ref) + fabs(ya) + (b ? fabs(b[c]) : 0);
      ref += ya + (b ? b[c] : 0);
      if (fabs(v - ref) > ldexp(1, -22) * mag) bad_ref++;
      if (fabs(v - ref) > worst) worst = fabs(v - ref);
      for (k = 0; k < in; k++) { /* against x and W themselves */
        const double dx = sx[r] * (0.5 + 0x1p-16), dw = sw[c] * (0.5 + 0x1p-16);
        fp += (double)xr[k] * wr[k];
        fp_bound += dx * fabs(wr[k]) + fabs(xr[k]) * dw + dx * dw;
      }
      fp += ya + (b ? b[c] : 0);
      if (fabs(v - fp) > fp_bound + ldexp(1, -22) * mag) bad_fp++;
      if (fp_bound > 0 && fabs(v - fp) / fp_bound > worst_fp)
        worst_fp = fabs(v - fp) / fp_bound;
    }
  CHECK(bad_ref == 0, "q8 vs float64 of the dequantized math: %d off (worst %g)",
        bad_ref, worst);
  CHECK(bad_fp == 0,
        "q8 vs float64 of x, W: %d past the quantization bound (worst %g of it)",
        bad_fp, worst_fp);

  for (p = 0; p < 4; p++) {
    if (!relattn_q8_path_ok(q8_paths[p])) continue;
    memcpy(got, y0, sizeof(float) * (size_t)rows * ldy);
    relattn_q8_gemm_on(q8_paths[p], got, ldy, x, ldx, rows, &qw, b, acc,
                       scratch);
    bad_def = bad_pad = 0;
    for (r = 0; r < rows; r++) {
      for (c = 0; c < out; c++)
        if (fbits(got[(size_t)r * ldy + c]) != fbits(want[(size_t)r * ldy + c]))
          bad_def++;
      for (c = out; c < ldy; c++)
        if (got[(size_t)r * ldy + c] != y0[(size_t)r * ldy + c]) bad_pad++;
    }
    CHECK(bad_def == 0,
          "q8 %s: %d of %d elements differ from the definition (rows %d in %d "
          "out %d b %d acc %d)",
          q8_paths[p], bad_def, rows * out, rows, in, out, with_b, acc);
    CHECK(bad_pad == 0, "q8 %s: wrote %d elements past out", q8_paths[p],
          bad_pad);
  }
  { /* the same weight in one block, as a model's slot holds it: the rows
    ** as stored fit before its scales, and the product is the same bits */
    void *block = relattn_alloc(relattn_q8w_block_bytes(out, in));
    const relattn_q8w *pw = relattn_q8w_place(block, q, sw, out, in);
    int bad_block = 0;
    CHECK(relattn_q8w_scale_offset(out, in) >= (size_t)out * in &&
              pw->scale == (const float *)((const char *)block +
                                           relattn_q8w_scale_offset(out, in)) &&
              (char *)(pw->sum + out) <=
                  (char *)block + relattn_q8w_block_bytes(out, in),
          "q8 block layout (out %d in %d)", out, in);
    memcpy(got, y0, sizeof(float) * (size_t)rows * ldy);
    relattn_q8_gemm(got, ldy, x, ldx, rows, pw, b, acc, scratch);
    for (r = 0; r < rows; r++)
      for (c = 0; c < out; c++)
        if (fbits(got[(size_t)r * ldy + c]) != fbits(want[(size_t)r * ldy + c]))
          bad_block++;
    CHECK(bad_block == 0, "q8 placed block: %d of %d elements differ", bad_block,
          rows * out);
    relattn_free(block);
  }
  /* x quantized once, then the columns in pieces: the same bits */
  relattn_q8_rows(scratch, x, ldx, rows, in);
  k = cols_check(8, &qw, out, got, want, y0, rows, ldy, b, acc, scratch);
  CHECK(k == 0, "q8 by columns: %d elements differ (rows %d in %d out %d)", k,
        rows, in, out);
  relattn_q8w_free(&qw);
  relattn_free(x), relattn_free(w), relattn_free(b), relattn_free(y0);
  relattn_free(want), relattn_free(got), relattn_free(sw), relattn_free(q);
  relattn_free(xq), relattn_free(scratch);
}

/* Rows [lo, hi] of a weight from lo's panel, on every path, against the
** whole weight's product; relattn_q8w_dot against the product's bits. */
static void q8_rows_case(int rows, int in, int out) {
  const int ldq = (in + 63) / 64 * 64;
  float *x = rand_floats((size_t)rows * in, 1.0);
  float *w = rand_floats((size_t)out * in, 0.5);
  float *whole = relattn_alloc(sizeof(float) * (size_t)rows * out);
  float *got = relattn_alloc(sizeof(float) * (size_t)rows * out);
  float *sw = relattn_alloc(sizeof(float) * (size_t)out);
  int8_t *q = relattn_alloc((size_t)out * in);
  uint8_t *xq = relattn_alloc((size_t)rows * ldq);
  float sx[40];
  int32_t zx[40];
  void *scratch = relattn_alloc(relattn_q8_scratch(rows, in));
  relattn_q8w qw;
  int r, c, p, lo, bad = 0, bad_dot = 0, views = 0;

  relattn_q8_quantize(q, sw, w, out, in);
  CHECK(relattn_q8w_new(&qw, q, sw, out, in) == RELATTN_OK, "q8w_new");
  relattn_q8_gemm_on("scalar", whole, out, x, in, rows, &qw, NULL, 0, scratch);
  for (p = 0; p < 4; p++) {
    if (!relattn_q8_path_ok(q8_paths[p])) continue;
    for (lo = 0; lo < out; lo += RELATTN_QPANEL) {
      const int hi = lo + (int)(unit_next() % (uint64_t)(out - lo));
      const relattn_q8w v = relattn_q8w_rows(&qw, lo, hi - lo + 1);
      memset(got, 0, sizeof(float) * (size_t)rows * out);
      relattn_q8_gemm_on(q8_paths[p], got, out, x, in, rows, &v, NULL, 0,
                         scratch);
      views++;
      for (r = 0; r < rows; r++)
        for (c = 0; c < out; c++) {
          const float want = c <= hi - lo ? whole[(size_t)r * out + lo + c] : 0.0f;
          if (fbits(got[(size_t)r * out + c]) != fbits(want)) bad++;
        }
    }
  }
  relattn_q8_quantize_rows_on(relattn_q8_path(), xq, ldq, sx, zx, x, in, rows,
                              in);
  for (r = 0; r < rows; r++)
    for (c = 0; c < out; c++)
      if (fbits(relattn_q8w_dot(&qw, c, xq + (size_t)r * ldq, sx[r], zx[r])) !=
          fbits(whole[(size_t)r * out + c]))
        bad_dot++;
  CHECK(views > 0 && bad == 0,
        "q8 rows from a panel: %d elements differ over %d views (rows %d in %d "
        "out %d)", bad, views, rows, in, out);
  CHECK(bad_dot == 0, "q8w_dot: %d of %d differ from the product (in %d)",
        bad_dot, rows * out, in);
  relattn_q8w_free(&qw);
  relattn_free(x), relattn_free(w), relattn_free(whole), relattn_free(got);
  relattn_free(sw), relattn_free(q), relattn_free(xq), relattn_free(scratch);
}

/* ---- bf16 ---------------------------------------------------------------- */

static float bfv(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void bf_convert(void) {
  int i, bad = 0;
  for (i = 0; i < 200000; i++) {
    uint32_t u = (uint32_t)unit_next();
    float f, lo, hi;
    double dl, dh;
    uint16_t h, want;
    memcpy(&f, &u, 4);
    if (!isfinite(f) || fabsf(f) < FLT_MIN || fabsf(f) > 1e38f) continue;
    h = relattn_f32_to_bf16(f);
    lo = bfv((uint16_t)(u >> 16)), hi = bfv((uint16_t)((u >> 16) + 1));
    dl = fabs((double)f - lo), dh = fabs((double)hi - f);
    want = (uint16_t)(u >> 16);
    if (dh < dl || (dh == dl && (want & 1))) want++;
    if (h != want) bad++;
  }
  CHECK(bad == 0, "f32 -> bf16: %d of the random floats misrounded", bad);
  CHECK(relattn_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80 &&
            relattn_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82,
        "f32 -> bf16: ties to even");
  CHECK(relattn_f32_to_bf16(0x1p-130f) == 0 &&
            relattn_f32_to_bf16(-0x1p-130f) == 0x8000,
        "f32 -> bf16: subnormals to signed zeros");
  CHECK(isnan(bfv(relattn_f32_to_bf16(NAN))), "f32 -> bf16: NaN");
}

/* Steps whose result the flush changed, over all cases. */
static long flushed_sub;

/* One step of vdpbf16ps (DAZ in, RNE, FTZ out; tiny after rounding with
** an unbounded exponent, as src/qgemm.c says), decided on the exact sum
** in __float128: tiny when |exact| < FLT_MIN (1 - 2^-25). */
static float step(float a, float x, float w) {
  float r;
  __float128 ex;
  if (fabsf(a) < FLT_MIN) a = copysignf(0.0f, a);
  if (fabsf(x) < FLT_MIN) x = copysignf(0.0f, x);
  if (fabsf(w) < FLT_MIN) w = copysignf(0.0f, w);
  r = fmaf(x, w, a);
  if (fabsf(r) >= 2 * FLT_MIN) return r;
  ex = (__float128)a + (__float128)((double)x * w);
  if (ex != 0 && (ex < 0 ? -ex : ex) < (__float128)FLT_MIN -
                                          (__float128)ldexp(1, -151)) {
    if (r != 0) flushed_sub++;
    return ex < 0 ? -0.0f : 0.0f;
  }
  return r;
}

static void bf_case(int rows, int in, int out, int with_b, int acc, int pad,
                    int tiny) {
  const int ldx = in + pad, ldy = out + 2 * pad;
  /* tiny: products and sums around FLT_MIN (2^-126), starts subnormal too */
  const double sc = tiny ? ldexp(1, -63) : 1.0, sb = tiny ? ldexp(1, -125) : 1.0;
  float *x = rand_floats((size_t)rows * ldx, sc);
  float *w = rand_floats((size_t)out * in, sc);
  float *b = with_b ? rand_floats((size_t)out, sb) : NULL;
  float *y0 = rand_floats((size_t)rows * ldy, sb);
  float *want = relattn_alloc(sizeof(float) * (size_t)rows * ldy);
  float *got = relattn_alloc(sizeof(float) * (size_t)rows * ldy);
  uint16_t *wb = relattn_alloc(sizeof(uint16_t) * (size_t)out * in);
  uint16_t *back = relattn_alloc(sizeof(uint16_t) * (size_t)out * in);
  void *scratch = relattn_alloc(relattn_bf16_scratch(rows, in));
  relattn_bf16w bw;
  int r, c, k, p, bad_def, bad_pad, bad_ref = 0;
  double worst = 0;

  for (k = 0; k < out * in; k++) wb[k] = relattn_f32_to_bf16(w[k]);
  CHECK(relattn_bf16w_new(&bw, wb, out, in) == RELATTN_OK, "bf16w_new");
  relattn_bf16w_unpack(back, &bw);
  CHECK(memcmp(back, wb, sizeof(uint16_t) * (size_t)out * in) == 0,
        "bf16 unpack(pack(w)) != w");
  memcpy(want, y0, sizeof(float) * (size_t)rows * ldy);
  for (r = 0; r < rows; r++)
    for (c = 0; c < out; c++) {
      const float y = want[(size_t)r * ldy + c];
      float v = acc ? (b ? y + b[c] : y) : (b ? b[c] : 0.0f);
      double ref = (acc ? y : 0.0) + (b ? b[c] : 0.0), mag = fabs(ref), orig = ref;
      double mag_orig = mag;
      for (k = 0; k < in; k += 2) {
        const float x0 = bfv(relattn_f32_to_bf16(x[(size_t)r * ldx + k]));
        const float x1 = k + 1 < in ? bfv(relattn_f32_to_bf16(x[(size_t)r * ldx + k + 1])) : 0.0f;
        const float w0 = bfv(wb[(size_t)c * in + k]);
        const float w1 = k + 1 < in ? bfv(wb[(size_t)c * in + k + 1]) : 0.0f;
        v = step(v, x1, w1);
        v = step(v, x0, w0);
        ref += (double)x0 * w0 + (double)x1 * w1;
        mag += fabs((double)x0 * w0) + fabs((double)x1 * w1);
        orig += (double)x[(size_t)r * ldx + k] * w[(size_t)c * in + k];
        mag_orig += fabs((double)x[(size_t)r * ldx + k] * w[(size_t)c * in + k]);
        if (k + 1 < in) {
          orig += (double)x[(size_t)r * ldx + k + 1] * w[(size_t)c * in + k + 1];
          mag_orig += fabs((double)x[(size_t)r * ldx + k + 1] * w[(size_t)c * in + k + 1]);
        }
      }
      want[(size_t)r * ldy + c] = v;
      if (!tiny) { /* (no bound where FLT_MIN flushes: the definition holds) */
        const double tol = (in + 2) * ldexp(1, -24) * mag;
        if (fabs(v - ref) > tol) bad_ref++;
        if (fabs(v - orig) > tol + (ldexp(1, -7) + ldexp(1, -16)) * mag_orig)
          bad_ref++;
        if (fabs(v - ref) > worst) worst = fabs(v - ref);
      }
    }
  CHECK(bad_ref == 0, "bf16 vs float64: %d off (worst %g, in %d)", bad_ref,
        worst, in);

  for (p = 0; p < 3; p++) {
    if (!relattn_bf16_path_ok(bf_paths[p])) continue;
    memcpy(got, y0, sizeof(float) * (size_t)rows * ldy);
    relattn_bf16_gemm_on(bf_paths[p], got, ldy, x, ldx, rows, &bw, b, acc,
                         scratch);
    bad_def = bad_pad = 0;
    for (r = 0; r < rows; r++) {
      for (c = 0; c < out; c++)
        if (fbits(got[(size_t)r * ldy + c]) != fbits(want[(size_t)r * ldy + c]))
          bad_def++;
      for (c = out; c < ldy; c++)
        if (fbits(got[(size_t)r * ldy + c]) != fbits(y0[(size_t)r * ldy + c]))
          bad_pad++;
    }
    CHECK(bad_def == 0,
          "bf16 %s: %d of %d elements differ from vdpbf16ps's definition "
          "(rows %d in %d out %d b %d acc %d tiny %d)",
          bf_paths[p], bad_def, rows * out, rows, in, out, with_b, acc, tiny);
    CHECK(bad_pad == 0, "bf16 %s: wrote %d elements past out", bf_paths[p],
          bad_pad);
  }
  relattn_bf16_rows(scratch, x, ldx, rows, in);
  k = cols_check(16, &bw, out, got, want, y0, rows, ldy, b, acc, scratch);
  CHECK(k == 0, "bf16 by columns: %d elements differ (rows %d in %d out %d)",
        k, rows, in, out);
  relattn_bf16w_free(&bw);
  relattn_free(x), relattn_free(w), relattn_free(b), relattn_free(y0);
  relattn_free(want), relattn_free(got), relattn_free(wb), relattn_free(back);
  relattn_free(scratch);
}

/* The flush that depends on the exact sum: start b = +-FLT_MIN, then 0 x 0
** (k odd, first), then a product 2^-63 x m 2^-89, m in 1 .. 2.875 (k even),
** of either sign. Against b's sign the sum FLT_MIN - m 2^-152 rounds to
** FLT_MIN; it is tiny after rounding to 24 bits when m > 2 (m = 2 is the
** tie, to even: FLT_MIN), and vdpbf16ps then writes a zero of b's sign. */
static void bf_edge(void) {
  enum { OUT = 64 };
  const float x[2] = {0x1p-63f, 0.0f};
  uint16_t w[OUT * 2];
  float b[OUT], y[OUT];
  void *scratch = relattn_alloc(relattn_bf16_scratch(1, 2));
  relattn_bf16w bw;
  int c, p, bad, flushes = 0;
  for (c = 0; c < OUT; c++) {
    const float m = 1.0f + (float)(c / 4) / 8;
    b[c] = c % 2 ? -FLT_MIN : FLT_MIN;
    w[2 * c] = relattn_f32_to_bf16((c / 2) % 2 ? -ldexpf(m, -89) : ldexpf(m, -89));
    w[2 * c + 1] = 0;
  }
  CHECK(relattn_bf16w_new(&bw, w, OUT, 2) == RELATTN_OK, "bf16w_new");
  for (p = 0; p < 3; p++) {
    if (!relattn_bf16_path_ok(bf_paths[p])) continue;
    relattn_bf16_gemm_on(bf_paths[p], y, OUT, x, 2, 1, &bw, b, 0, scratch);
    for (c = 0, bad = 0, flushes = 0; c < OUT; c++) {
      const int against = c % 2 != (c / 2) % 2, over = c / 4 > 8;
      const float want = against && over ? copysignf(0.0f, b[c]) : b[c];
      if (fbits(y[c]) != fbits(want)) bad++;
      flushes += want == 0;
    }
    CHECK(bad == 0, "bf16 %s: %d of %d sums at FLT_MIN flushed otherwise than "
          "vdpbf16ps", bf_paths[p], bad, OUT);
  }
  CHECK(flushes == 14, "bf_edge flushes %d sums", flushes);
  relattn_bf16w_free(&bw);
  relattn_free(scratch);
}

static void bf_subnormal_weights(void) {
  const uint16_t w[4] = {0x0001, 0x8040, 0x3f80, 0x007f};
  uint16_t back[4];
  relattn_bf16w bw;
  CHECK(relattn_bf16w_new(&bw, w, 1, 4) == RELATTN_OK, "bf16w_new");
  relattn_bf16w_unpack(back, &bw);
  CHECK(back[0] == 0 && back[1] == 0x8000 && back[2] == 0x3f80 && back[3] == 0,
        "subnormal bf16 weights are packed as signed zeros: %04x %04x %04x %04x",
        back[0], back[1], back[2], back[3]);
  relattn_bf16w_free(&bw);
}

/* bf16: rows [lo, hi] from lo's panel on every path against the whole
** weight's product; relattn_bf16w_dot against its bits. */
static void bf_rows_case(int rows, int in, int out) {
  float *x = rand_floats((size_t)rows * in, 1.0);
  float *w = rand_floats((size_t)out * in, 0.5);
  float *xr = relattn_alloc(sizeof(float) * (size_t)(in + 1));
  float *whole = relattn_alloc(sizeof(float) * (size_t)rows * out);
  float *got = relattn_alloc(sizeof(float) * (size_t)rows * out);
  uint16_t *h = relattn_alloc(sizeof(uint16_t) * (size_t)out * in);
  void *scratch = relattn_alloc(relattn_bf16_scratch(rows, in));
  relattn_bf16w bw;
  int r, c, k, p, lo, bad = 0, bad_dot = 0, views = 0;
  relattn_f32_to_bf16_n(h, w, (size_t)out * in);
  CHECK(relattn_bf16w_new(&bw, h, out, in) == RELATTN_OK, "bf16w_new");
  relattn_bf16_gemm_on("scalar", whole, out, x, in, rows, &bw, NULL, 0,
                       scratch);
  for (p = 0; p < 3; p++) {
    if (!relattn_bf16_path_ok(bf_paths[p])) continue;
    for (lo = 0; lo < out; lo += RELATTN_QPANEL) {
      const int hi = lo + (int)(unit_next() % (uint64_t)(out - lo));
      const relattn_bf16w v = relattn_bf16w_rows(&bw, lo, hi - lo + 1);
      memset(got, 0, sizeof(float) * (size_t)rows * out);
      relattn_bf16_gemm_on(bf_paths[p], got, out, x, in, rows, &v, NULL, 0,
                           scratch);
      views++;
      for (r = 0; r < rows; r++)
        for (c = 0; c < out; c++) {
          const float want = c <= hi - lo ? whole[(size_t)r * out + lo + c] : 0.0f;
          if (fbits(got[(size_t)r * out + c]) != fbits(want)) bad++;
        }
    }
  }
  for (r = 0; r < rows; r++) {
    for (k = 0; k < in; k++) xr[k] = bfv(relattn_f32_to_bf16(x[(size_t)r * in + k]));
    for (c = 0; c < out; c++)
      if (fbits(relattn_bf16w_dot(&bw, c, xr)) != fbits(whole[(size_t)r * out + c]))
        bad_dot++;
  }
  CHECK(views > 0 && bad == 0,
        "bf16 rows from a panel: %d elements differ over %d views (rows %d in "
        "%d out %d)", bad, views, rows, in, out);
  CHECK(bad_dot == 0, "bf16w_dot: %d of %d differ from the product (in %d)",
        bad_dot, rows * out, in);
  relattn_bf16w_free(&bw);
  relattn_free(x), relattn_free(w), relattn_free(xr), relattn_free(whole);
  relattn_free(got), relattn_free(h), relattn_free(scratch);
}

int main(void) {
  static const int outs[] = {1, 17, 31, 32, 33, 64, 95, 100};
  static const int ins[] = {1, 3, 4, 5, 63, 64, 65, 257, 600};
  static const int rowss[] = {1, 5, 6, 7, 12, 13, 40};
  int i, j, t;
  unit_seed();
  printf("int8 paths here: avx512vnni %d, avxvnni %d, avx2 %d (best: %s)\n",
         relattn_q8_path_ok("avx512vnni"), relattn_q8_path_ok("avxvnni"),
         relattn_q8_path_ok("avx2"), relattn_q8_path());
  printf("bf16 paths here: avx512bf16 %d, avx2 %d (best: %s)\n",
         relattn_bf16_path_ok("avx512bf16"), relattn_bf16_path_ok("avx2"),
         relattn_bf16_path());
  CHECK(relattn_q8_path_ok("scalar") && relattn_bf16_path_ok("scalar"),
        "the scalar paths always run");
  CHECK(!relattn_q8_path_ok("sse9") && !relattn_bf16_path_ok("avx512vnni"),
        "an unknown path is refused");

  q8_weights();
  for (i = 0; i < 9; i++) q8_activations(rowss[i % 7], ins[i], ins[i] + i % 3);
  q8_activations(40, 600, 601);
  for (i = 0; i < 8; i++)
    for (j = 0; j < 9; j++)
      q8_case(rowss[(i + j) % 7], ins[j], outs[i], (i + j) % 2, (i + 2 * j) % 3 == 0,
              j % 2);
  for (t = 0; t < 20; t++)
    q8_case(1 + (int)(unit_next() % 40), 1 + (int)(unit_next() % 600),
            1 + (int)(unit_next() % 100), (int)(unit_next() % 2),
            (int)(unit_next() % 2), (int)(unit_next() % 3));
  q8_case(40, 384, 96, 1, 1, 1);
  for (t = 0; t < 12; t++) /* DeBERTa's tables: up to 2 x 256 rows of d_head */
    q8_rows_case(1 + (int)(unit_next() % 40), 1 + (int)(unit_next() % 130),
                 1 + (int)(unit_next() % 512));
  q8_rows_case(40, 64, 512);

  bf_convert();
  bf_subnormal_weights();
  bf_edge();
  for (i = 0; i < 8; i++)
    for (j = 0; j < 9; j++)
      bf_case(rowss[(i + j) % 7], ins[j], outs[i], (i + j) % 2,
              (i + 2 * j) % 3 == 0, j % 2, 0);
  for (t = 0; t < 20; t++)
    bf_case(1 + (int)(unit_next() % 40), 1 + (int)(unit_next() % 600),
            1 + (int)(unit_next() % 100), (int)(unit_next() % 2),
            (int)(unit_next() % 2), (int)(unit_next() % 3),
            (int)(unit_next() % 2));
  for (t = 0; t < 6; t++) /* sums around FLT_MIN */
    bf_case(1 + (int)(unit_next() % 20), 1 + (int)(unit_next() % 200),
            1 + (int)(unit_next() % 70), 1, (int)(unit_next() % 2), 0, 1);
  bf_case(20, 300, 40, 1, 0, 0, 1);
  for (t = 0; t < 10; t++)
    bf_rows_case(1 + (int)(unit_next() % 40), 1 + (int)(unit_next() % 130),
                 1 + (int)(unit_next() % 512));
  printf("steps the flush changed: %ld\n", flushed_sub);
  CHECK(flushed_sub > 0, "the tiny cases flushed no subnormal sum");
  UNIT_DONE();
}
