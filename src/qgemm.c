/*
** qgemm.c: the linear layers' product y = x W^T + b on int8 and bf16
** weights, each with one definition that every vector path computes bit
** for bit (as src/gemm.c does for float32).
**
** INT8 (the dynamic quantization of ONNX Runtime's MatMulInteger path and
** fbgemm's: weights once, activations per call)
**   Weights, symmetric per output row: s_w[c] = max_k |W[c][k]| / 127,
**   q_w = round_half_even(W / s_w) clamped to [-127, 127] (a zero row: s_w
**   = 0, q_w = 0). relattn_q8_quantize does this from float32 weights; a
**   quantized model stores q_w and s_w.
**   Activations, asymmetric per row (per token): lo = min(0, min_k x),
**   hi = max(0, max_k x), s_x = (hi - lo) / 255, z = round_half_even(-lo /
**   s_x) clamped to [0, 255], q_x = round_half_even(x / s_x) + z clamped to
**   [0, 255] (s_x = 0: q_x = z = 0). Unsigned with a zero point, not
**   symmetric int8, because the instructions multiply u8 by s8 (vpdpbusd)
**   and because the inputs of a linear layer are often one-sided (after
**   GELU almost all of a row is >= -0.17): all 256 levels cover the row's
**   own range, where a symmetric s8 spends half of them on values that do
**   not occur. The zero point costs one term per output, from the weights'
**   row sums taken once at pack time:
**     acc[r][c] = sum_k q_x[r][k] q_w[c][k]            (int32, exact)
**     y[r][c]   = fmaf((float)(acc - z[r] sum_k q_w[c][k]),
**                      s_x[r] * s_w[c], start)
**   start = (accumulate ? y : 0) + b (no b: nothing added), one rounding
**   each. The integers are exact on every path (|acc| <= 255 127 in, hence
**   in <= RELATTN_Q8_MAX_IN), so the floats are the same bits everywhere.
**
** BF16
**   Weights rounded to bf16 once (round to nearest even; subnormals become
**   zero: the instruction reads them so), activations per call the same way.
**   The sum is vdpbf16ps's, as Intel's SDM defines it: for each pair of k
**   (2j, 2j+1), zero-padded to an even in,
**     acc = step(acc, x[2j+1] w[2j+1]);  acc = step(acc, x[2j] w[2j])
**   from acc = start (as above), where step(a, p) is a + p rounded once to
**   nearest even (a fused multiply-add: a product of two bf16 is exact in
**   float32), with a subnormal a read as zero and a tiny result written as
**   a zero of its sign. The SDM says "DAZ, FTZ, RNE" but not when a result
**   is tiny; the instruction here tests after rounding, as x86's FTZ does:
**   tiny when the sum rounded to 24 bits with an unbounded exponent is
**   below FLT_MIN, i.e. |exact| < FLT_MIN (1 - 2^-25), so a sum just under
**   FLT_MIN that rounds up to it is kept. MXCSR plays no part. The AVX2 and
**   scalar paths compute this with fmaf; measured on this machine's
**   vdpbf16ps (AMD, AVX512_BF16): 0 differences in 1.4 10^7 random steps
**   including subnormal inputs and 10^6 sums that round to FLT_MIN, where
**   testing before rounding differs in half of those, and a single
**   rounding of the pair's sum or the even product first in 3-15% of all.
**
** PANEL ORDER (both kinds)
** W (out, in) is cut into panels of RELATTN_QPANEL = 32 output rows, zero-
** padded to full width; k is padded to a multiple of 4 (int8) or 2 (bf16)
** with zero weights. Within a panel, for each group g of 4 (2) values of k,
** 32 lanes of 4 bytes: lane c holds W[32 p + c][4g .. 4g+3] (bf16: [2g,
** 2g+1]), the operand vpdpbusd (vdpbf16ps) takes in one 32-bit lane. A
** group's 128 bytes are two zmm loads.
**
** PATHS (relattn_q8_path, relattn_bf16_path: the best this CPU runs)
**   int8  avx512vnni  vpdpbusd on zmm: tiles of 8 rows x 32 columns (12
**                     rows, as the float32 kernel, ran out of registers
**                     for the row addresses here: 480 GFLOP/s, 8 rows 720)
**         avxvnni     vpdpbusd on ymm (VEX): 6 x 16
**         avx2        vpmovsxbw / vpmaddwd on 16-bit values: 6 x 8. Not
**                     vpmaddubsw: its pairs of u8 x s8 reach 2 255 127 =
**                     64770 and saturate at 32767.
**         scalar
**   bf16  avx512bf16  vdpbf16ps: 12 x 32
**         avx2        fmaf steps on ymm: 5 x 8; a tile in which any sum
**                     comes within FLT_MIN of zero (never, in practice) is
**                     done again on the scalar path, which decides the flush
**                     exactly.
**         scalar
** relattn_q8_gemm_on / relattn_bf16_gemm_on run a named path, as
** relattn_gemm_on does, for the tests (tests/unit/test_qgemm.c).
*/
#include "relattn.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define QP RELATTN_QPANEL

static int round_up(int n, int m) { return (n + m - 1) / m * m; }

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- paths --------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define QX86 1

/* AVX-VNNI (vpdpbusd on ymm without AVX-512): CPUID leaf 7, sub-leaf 1,
** EAX bit 4. Read directly: clang 14's __builtin_cpu_supports does not
** know the name (the fuzz build compiles with it). */
static int has_avxvnni(void) {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, NULL) < 7) return 0;
  __cpuid_count(7, 1, a, b, c, d);
  (void)b, (void)c, (void)d;
  return (a >> 4) & 1;
}
#endif

int relattn_q8_path_ok(const char *path) {
  if (strcmp(path, "scalar") == 0) return 1;
#ifdef QX86
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    return 0;
  if (strcmp(path, "avx2") == 0) return 1;
  if (strcmp(path, "avxvnni") == 0)
    return has_avxvnni();
  if (strcmp(path, "avx512vnni") == 0)
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni") != 0;
#endif
  return 0;
}

int relattn_bf16_path_ok(const char *path) {
  if (strcmp(path, "scalar") == 0) return 1;
#ifdef QX86
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    return 0;
  if (strcmp(path, "avx2") == 0) return 1;
  if (strcmp(path, "avx512bf16") == 0)
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
#endif
  return 0;
}

/* Decided once, as relattn_simd_path. */
const char *relattn_q8_path(void) {
  static const char *chosen = NULL;
  const char *p = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
  if (!p) {
    static const char *const order[] = {"avx512vnni", "avxvnni", "avx2"};
    int i;
    p = "scalar";
    for (i = 0; i < 3; i++)
      if (relattn_q8_path_ok(order[i])) {
        p = order[i];
        break;
      }
    __atomic_store_n(&chosen, p, __ATOMIC_RELEASE);
  }
  return p;
}

const char *relattn_bf16_path(void) {
  static const char *chosen = NULL;
  const char *p = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
  if (!p) {
    p = relattn_bf16_path_ok("avx512bf16") ? "avx512bf16"
        : relattn_bf16_path_ok("avx2")     ? "avx2"
                                           : "scalar";
    __atomic_store_n(&chosen, p, __ATOMIC_RELEASE);
  }
  return p;
}

/* ---- int8: weights ------------------------------------------------------- */

void relattn_q8_quantize(int8_t *q, float *scale, const float *w, int out,
                         int in) {
  int c, k;
  for (c = 0; c < out; c++) {
    const float *wr = w + (size_t)c * in;
    float m = 0.0f, s;
    for (k = 0; k < in; k++) m = fmaxf(m, fabsf(wr[k]));
    s = m / 127.0f;
    scale[c] = s;
    for (k = 0; k < in; k++) {
      const float v = s > 0.0f ? nearbyintf(wr[k] / s) : 0.0f;
      q[(size_t)c * in + k] = (int8_t)fminf(fmaxf(v, -127.0f), 127.0f);
    }
  }
}

/* Byte offset of W[c][k] in panel order, k padded to kp. */
static size_t q8_at(int c, int k, int kp) {
  return (size_t)(c / QP) * QP * kp + (size_t)(k / 4) * QP * 4 +
         (size_t)(c % QP) * 4 + (size_t)(k % 4);
}

int relattn_q8w_new(relattn_q8w *qw, const int8_t *q, const float *scale,
                    int out, int in) {
  int c, k, op, kp;
  memset(qw, 0, sizeof *qw);
  if (out <= 0 || in <= 0) return RELATTN_ERR_ARG;
  if (in > RELATTN_Q8_MAX_IN) return RELATTN_ERR_TOOBIG;
  op = round_up(out, QP), kp = round_up(in, 4);
  qw->w = relattn_alloc((size_t)op * kp);
  qw->scale = relattn_alloc(sizeof(float) * (size_t)op);
  qw->sum = relattn_alloc(sizeof(int32_t) * (size_t)op);
  if (!qw->w || !qw->scale || !qw->sum) {
    relattn_q8w_free(qw);
    return RELATTN_ERR_NOMEM;
  }
  qw->out = out, qw->in = in;
  memset(qw->w, 0, (size_t)op * kp);
  memset(qw->scale, 0, sizeof(float) * (size_t)op);
  memset(qw->sum, 0, sizeof(int32_t) * (size_t)op);
  for (c = 0; c < out; c++) {
    int32_t sum = 0;
    for (k = 0; k < in; k++) {
      const int8_t v = q[(size_t)c * in + k];
      qw->w[q8_at(c, k, kp)] = v;
      sum += v;
    }
    qw->sum[c] = sum;
    qw->scale[c] = scale[c];
  }
  return RELATTN_OK;
}

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t relattn_q8w_block_bytes(int out, int in) {
  const size_t op = (size_t)round_up(out, QP), kp = (size_t)round_up(in, 4);
  return up64(sizeof(relattn_q8w)) + up64(op * kp) + 2 * up64(4 * op);
}

size_t relattn_q8w_scale_offset(int out, int in) {
  const size_t op = (size_t)round_up(out, QP), kp = (size_t)round_up(in, 4);
  return up64(sizeof(relattn_q8w)) + up64(op * kp);
}

relattn_q8w *relattn_q8w_place(void *mem, const int8_t *q, const float *scale,
                               int out, int in) {
  const int op = round_up(out, QP), kp = round_up(in, 4);
  relattn_q8w *qw = mem;
  char *p = (char *)mem + up64(sizeof *qw);
  int c, k;
  memset(mem, 0, relattn_q8w_block_bytes(out, in));
  qw->out = out, qw->in = in;
  qw->w = (int8_t *)p;
  qw->scale = (float *)(p + up64((size_t)op * kp));
  qw->sum = (int32_t *)((char *)qw->scale + up64(4 * (size_t)op));
  for (c = 0; c < out; c++) {
    int32_t sum = 0;
    for (k = 0; k < in; k++) {
      const int8_t v = q[(size_t)c * in + k];
      qw->w[q8_at(c, k, kp)] = v;
      sum += v;
    }
    qw->sum[c] = sum;
    qw->scale[c] = scale[c];
  }
  return qw;
}

void relattn_q8w_free(relattn_q8w *qw) {
  relattn_free(qw->w), relattn_free(qw->scale), relattn_free(qw->sum);
  memset(qw, 0, sizeof *qw);
}

void relattn_q8w_unpack(int8_t *q, const relattn_q8w *qw) {
  const int kp = round_up(qw->in, 4);
  int c, k;
  for (c = 0; c < qw->out; c++)
    for (k = 0; k < qw->in; k++)
      q[(size_t)c * qw->in + k] = qw->w[q8_at(c, k, kp)];
}

static float q8_finish(int32_t acc, int32_t z, int32_t sum, float sx, float sw,
                       float start);

relattn_q8w relattn_q8w_rows(const relattn_q8w *qw, int lo, int out) {
  relattn_q8w v = *qw;
  v.out = out;
  v.w = qw->w + (size_t)(lo / QP) * QP * round_up(qw->in, 4);
  v.scale = qw->scale + lo;
  v.sum = qw->sum + lo;
  return v;
}

float relattn_q8w_dot(const relattn_q8w *qw, int r, const uint8_t *xq,
                      float sx, int32_t zx) {
  const int kp = round_up(qw->in, 4);
  const int8_t *w = qw->w + q8_at(r, 0, kp);
  int32_t acc = 0;
  int k;
  for (k = 0; k < kp; k++)
    acc += (int32_t)xq[k] * w[(size_t)(k / 4) * QP * 4 + (k % 4)];
  return q8_finish(acc, zx, qw->sum[r], sx, qw->scale[r], 0.0f);
}

void relattn_q8w_dequantize(float *w, const relattn_q8w *qw) {
  const int kp = round_up(qw->in, 4);
  int c, k;
  for (c = 0; c < qw->out; c++)
    for (k = 0; k < qw->in; k++)
      w[(size_t)c * qw->in + k] = (float)qw->w[q8_at(c, k, kp)] * qw->scale[c];
}

void relattn_q8w_row(float *w, const relattn_q8w *qw, int r) {
  const int kp = round_up(qw->in, 4);
  const float s = qw->scale[r];
  int k;
  for (k = 0; k < qw->in; k++) w[k] = (float)qw->w[q8_at(r, k, kp)] * s;
}

/* ---- int8: activations --------------------------------------------------- */

/* One row's scale and zero point from its range (lo <= 0 <= hi). */
static void q8_params(float lo, float hi, float *s, int32_t *z) {
  const float sc = (hi - lo) / 255.0f;
  *s = sc;
  *z = sc > 0.0f ? (int32_t)fminf(fmaxf(nearbyintf(-lo / sc), 0.0f), 255.0f)
                 : 0;
}

static uint8_t q8_one(float x, float s, float zf) {
  return (uint8_t)fminf(fmaxf(nearbyintf(x / s) + zf, 0.0f), 255.0f);
}

/* Row r of x into q (in bytes, then zeros up to kp), s, z: elements from j
** on (the vector paths did the first j). */
static void q8_row_tail(uint8_t *q, const float *x, int j, int in, int kp,
                        float s, int32_t z) {
  for (; j < in; j++) q[j] = s > 0.0f ? q8_one(x[j], s, (float)z) : 0;
  for (; j < kp; j++) q[j] = 0;
}

static void q8_rows_scalar(uint8_t *xq, int ldq, float *sx, int32_t *zx,
                           const float *x, int ldx, int rows, int in) {
  const int kp = round_up(in, 4);
  int r, k;
  for (r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * ldx;
    float lo = 0.0f, hi = 0.0f;
    for (k = 0; k < in; k++) lo = fminf(lo, xr[k]), hi = fmaxf(hi, xr[k]);
    q8_params(lo, hi, &sx[r], &zx[r]);
    q8_row_tail(xq + (size_t)r * ldq, xr, 0, in, kp, sx[r], zx[r]);
  }
}

#ifdef QX86
__attribute__((target("avx2,fma"))) static void q8_rows_avx2(
    uint8_t *xq, int ldq, float *sx, int32_t *zx, const float *x, int ldx,
    int rows, int in) {
  const int kp = round_up(in, 4), n8 = in & ~7;
  int r, k;
  for (r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * ldx;
    uint8_t *q = xq + (size_t)r * ldq;
    __m256 vlo = _mm256_setzero_ps(), vhi = _mm256_setzero_ps();
    float lo, hi, t[8];
    for (k = 0; k < n8; k += 8) {
      const __m256 v = _mm256_loadu_ps(xr + k);
      vlo = _mm256_min_ps(vlo, v), vhi = _mm256_max_ps(vhi, v);
    }
    _mm256_storeu_ps(t, vlo);
    lo = 0.0f;
    for (k = 0; k < 8; k++) lo = fminf(lo, t[k]);
    _mm256_storeu_ps(t, vhi);
    hi = 0.0f;
    for (k = 0; k < 8; k++) hi = fmaxf(hi, t[k]);
    for (k = n8; k < in; k++) lo = fminf(lo, xr[k]), hi = fmaxf(hi, xr[k]);
    q8_params(lo, hi, &sx[r], &zx[r]);
    k = 0;
    if (sx[r] > 0.0f) {
      const __m256 s = _mm256_set1_ps(sx[r]), z = _mm256_set1_ps((float)zx[r]),
                   zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f);
      for (; k < n8; k += 8) {
        __m256 v = _mm256_div_ps(_mm256_loadu_ps(xr + k), s);
        __m256i i;
        __m128i p;
        v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, z), zero), top);
        i = _mm256_cvttps_epi32(v);
        p = _mm_packus_epi32(_mm256_castsi256_si128(i),
                             _mm256_extracti128_si256(i, 1));
        p = _mm_packus_epi16(p, p);
        _mm_storel_epi64((__m128i *)(q + k), p);
      }
    }
    q8_row_tail(q, xr, k, in, kp, sx[r], zx[r]);
  }
}

__attribute__((target("avx512f,avx512bw"))) static void q8_rows_avx512(
    uint8_t *xq, int ldq, float *sx, int32_t *zx, const float *x, int ldx,
    int rows, int in) {
  const int kp = round_up(in, 4);
  int r, k;
  for (r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * ldx;
    uint8_t *q = xq + (size_t)r * ldq;
    __m512 vlo = _mm512_setzero_ps(), vhi = _mm512_setzero_ps();
    for (k = 0; k < in; k += 16) {
      const __mmask16 m =
          in - k >= 16 ? 0xffff : (__mmask16)((1u << (in - k)) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(m, xr + k); /* zeros past in */
      vlo = _mm512_min_ps(vlo, v), vhi = _mm512_max_ps(vhi, v);
    }
    q8_params(_mm512_reduce_min_ps(vlo), _mm512_reduce_max_ps(vhi), &sx[r],
              &zx[r]);
    if (!(sx[r] > 0.0f)) {
      q8_row_tail(q, xr, 0, in, kp, sx[r], zx[r]);
      continue;
    }
    {
      const __m512 s = _mm512_set1_ps(sx[r]), z = _mm512_set1_ps((float)zx[r]),
                   zero = _mm512_setzero_ps(), top = _mm512_set1_ps(255.0f);
      for (k = 0; k < kp; k += 16) {
        const int left = in - k;
        const __mmask16 m = left >= 16 ? 0xffff
                            : left > 0 ? (__mmask16)((1u << left) - 1)
                                       : 0;
        const __mmask16 mp =
            kp - k >= 16 ? 0xffff : (__mmask16)((1u << (kp - k)) - 1);
        __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(m, xr + k), s);
        v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT |
                                        _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, z), zero), top);
        /* past in: 0 */
        _mm512_mask_cvtepi32_storeu_epi8(
            q + k, mp, _mm512_maskz_cvttps_epi32(m, v));
      }
    }
  }
}
#endif

void relattn_q8_quantize_rows_on(const char *path, uint8_t *xq, int ldq,
                                 float *sx, int32_t *zx, const float *x,
                                 int ldx, int rows, int in) {
#ifdef QX86
  if (strcmp(path, "avx512vnni") == 0) {
    q8_rows_avx512(xq, ldq, sx, zx, x, ldx, rows, in);
    return;
  }
  if (strcmp(path, "avxvnni") == 0 || strcmp(path, "avx2") == 0) {
    q8_rows_avx2(xq, ldq, sx, zx, x, ldx, rows, in);
    return;
  }
#endif
  q8_rows_scalar(xq, ldq, sx, zx, x, ldx, rows, in);
}

/* ---- int8: the product --------------------------------------------------- */

/* What a call's tiles read: the quantized rows and their parameters. */
typedef struct q8call {
  const uint8_t *xq;
  int ldq;
  const float *sx;
  const int32_t *zx;
  const relattn_q8w *qw;
  const float *b;
  int accumulate;
} q8call;

/* The epilogue of one element, the definition every path computes. */
static float q8_finish(int32_t acc, int32_t z, int32_t sum, float sx, float sw,
                       float start) {
  const int32_t v = (int32_t)((int64_t)acc - (int64_t)z * sum);
  return fmaf((float)v, sx * sw, start);
}

static float start_of(const float *y, const float *b, int c, int accumulate) {
  if (accumulate) return b ? y[c] + b[c] : y[c];
  return b ? b[c] : 0.0f;
}

static void q8_scalar(float *y, int ldy, int rows, const q8call *C) {
  const relattn_q8w *qw = C->qw;
  const int kp = round_up(qw->in, 4);
  int r, c, k;
  for (r = 0; r < rows; r++) {
    const uint8_t *xr = C->xq + (size_t)r * C->ldq;
    float *yr = y + (size_t)r * ldy;
    for (c = 0; c < qw->out; c++) {
      const int8_t *w = qw->w + q8_at(c, 0, kp);
      int32_t acc = 0;
      for (k = 0; k < kp; k++)
        acc += (int32_t)xr[k] * w[(size_t)(k / 4) * QP * 4 + (k % 4)];
      yr[c] = q8_finish(acc, C->zx[r], qw->sum[c], C->sx[r], qw->scale[c],
                        start_of(yr, C->b, c, C->accumulate));
    }
  }
}

#ifdef QX86
static int32_t load4(const uint8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* AVX2 epilogue for 8 columns from c: acc (8 int32) to y. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
q8_store8(float *yr, __m256i acc, const q8call *C, int r, int c, int cols) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lane);
  const __m256i sum = _mm256_loadu_si256((const __m256i *)(C->qw->sum + c));
  const __m256 sw = _mm256_loadu_ps(C->qw->scale + c);
  __m256 start = _mm256_setzero_ps(), f, s;
  if (C->accumulate) start = _mm256_maskload_ps(yr + c, m);
  if (C->b)
    start = C->accumulate
                ? _mm256_add_ps(start, _mm256_maskload_ps(C->b + c, m))
                : _mm256_maskload_ps(C->b + c, m);
  acc = _mm256_sub_epi32(acc,
                         _mm256_mullo_epi32(_mm256_set1_epi32(C->zx[r]), sum));
  f = _mm256_cvtepi32_ps(acc);
  s = _mm256_mul_ps(_mm256_set1_ps(C->sx[r]), sw);
  _mm256_maskstore_ps(yr + c, m, _mm256_fmadd_ps(f, s, start));
}

/* AVX-512 epilogue for 16 columns from c (mask m) of row r: acc to y. */
__attribute__((target("avx512f,avx512bw,fma"), always_inline)) static inline void
q8_store16(float *yc, __m512i acc, const q8call *C, int r, int c, __mmask16 m) {
  const __m512i sum = _mm512_loadu_si512(C->qw->sum + c);
  const __m512 sw = _mm512_loadu_ps(C->qw->scale + c);
  __m512 start = _mm512_setzero_ps();
  if (C->accumulate) start = _mm512_maskz_loadu_ps(m, yc);
  if (C->b)
    start = C->accumulate ? _mm512_add_ps(start, _mm512_maskz_loadu_ps(m, C->b + c))
                          : _mm512_maskz_loadu_ps(m, C->b + c);
  acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(C->zx[r]), sum));
  _mm512_mask_storeu_ps(
      yc, m, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc),
                             _mm512_mul_ps(_mm512_set1_ps(C->sx[r]), sw), start));
}

#define MR_V512 8
/* Rows r0 .. r0+mr-1 by panel p (its first cols columns). */
__attribute__((target("avx512f,avx512bw,avx512vnni,fma"), always_inline))
static inline void q8_tile512(float *y, int ldy, const q8call *C, int r0,
                              int p, int cols, int mr) {
  const int kp = round_up(C->qw->in, 4), ng = kp / 4;
  const int8_t *w = C->qw->w + (size_t)p * QP * kp;
  const uint8_t *x = C->xq + (size_t)r0 * C->ldq;
  const int c0 = p * QP;
  __m512i acc[MR_V512][2];
  int r, g;
#pragma GCC unroll 12
  for (r = 0; r < mr; r++)
    acc[r][0] = _mm512_setzero_si512(), acc[r][1] = _mm512_setzero_si512();
  for (g = 0; g < ng; g++, w += QP * 4) {
    const __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 64);
#pragma GCC unroll 12
    for (r = 0; r < mr; r++) {
      const __m512i xb =
          _mm512_set1_epi32(load4(x + (size_t)r * C->ldq + 4 * g));
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], xb, w0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], xb, w1);
    }
  }
  {
    const __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
    const __mmask16 m1 =
        cols >= 32 ? 0xffff
                   : (cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : 0);
    /* (constant indices only: a variable one puts acc on the stack) */
#pragma GCC unroll 12
    for (r = 0; r < mr; r++) {
      float *yr = y + (size_t)(r0 + r) * ldy + c0;
      q8_store16(yr, acc[r][0], C, r0 + r, c0, m0);
      if (m1) q8_store16(yr + 16, acc[r][1], C, r0 + r, c0 + 16, m1);
    }
  }
}

#define MR_V256 6
/* AVX-VNNI: rows by 16 columns of panel p from c0 (0 or 16). */
__attribute__((target("avx2,fma,avxvnni"), always_inline)) static inline void
q8_tile_vnni256(float *y, int ldy, const q8call *C, int r0, int p, int half,
                int cols, int mr) {
  const int kp = round_up(C->qw->in, 4), ng = kp / 4;
  const int8_t *w = C->qw->w + (size_t)p * QP * kp + 64 * half;
  const uint8_t *x = C->xq + (size_t)r0 * C->ldq;
  const int c0 = p * QP + 16 * half;
  __m256i acc[MR_V256][2];
  int r, g;
#pragma GCC unroll 6
  for (r = 0; r < mr; r++)
    acc[r][0] = _mm256_setzero_si256(), acc[r][1] = _mm256_setzero_si256();
  for (g = 0; g < ng; g++, w += QP * 4) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i *)w),
                  w1 = _mm256_loadu_si256((const __m256i *)(w + 32));
#pragma GCC unroll 6
    for (r = 0; r < mr; r++) {
      const __m256i xb =
          _mm256_set1_epi32(load4(x + (size_t)r * C->ldq + 4 * g));
      acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], xb, w0);
      acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], xb, w1);
    }
  }
  for (r = 0; r < mr; r++) {
    float *yr = y + (size_t)(r0 + r) * ldy;
    q8_store8(yr, acc[r][0], C, r0 + r, c0, cols);
    if (cols > 8) q8_store8(yr, acc[r][1], C, r0 + r, c0 + 8, cols - 8);
  }
}

/* AVX2: rows by 8 columns of panel p from column 8 q of it. Each group of
** 4 k is two vpmaddwd lanes per column, added at the end. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
q8_tile_avx2(float *y, int ldy, const q8call *C, int r0, int p, int q,
             int cols, int mr) {
  const int kp = round_up(C->qw->in, 4), ng = kp / 4;
  const int8_t *w = C->qw->w + (size_t)p * QP * kp + 32 * q;
  const uint8_t *x = C->xq + (size_t)r0 * C->ldq;
  __m256i acc[MR_V256][2];
  int r, g;
#pragma GCC unroll 6
  for (r = 0; r < mr; r++)
    acc[r][0] = _mm256_setzero_si256(), acc[r][1] = _mm256_setzero_si256();
  for (g = 0; g < ng; g++, w += QP * 4) {
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w)),
                  w1 = _mm256_cvtepi8_epi16(
                      _mm_loadu_si128((const __m128i *)(w + 16)));
#pragma GCC unroll 6
    for (r = 0; r < mr; r++) {
      const __m256i xb = _mm256_cvtepu8_epi16(
          _mm_set1_epi32(load4(x + (size_t)r * C->ldq + 4 * g)));
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(xb, w0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(xb, w1));
    }
  }
  for (r = 0; r < mr; r++) {
    /* [c0 c1 c4 c5 | c2 c3 c6 c7] -> c0 .. c7 */
    const __m256i s = _mm256_permute4x64_epi64(
        _mm256_hadd_epi32(acc[r][0], acc[r][1]), 0xD8);
    q8_store8(y + (size_t)(r0 + r) * ldy, s, C, r0 + r, p * QP + 8 * q, cols);
  }
}

typedef void (*q8tile_fn)(float *, int, const q8call *, int, int, int, int);

#define Q8T512(R)                                                           \
  __attribute__((target("avx512f,avx512bw,avx512vnni,fma"))) static void    \
  q8t512_##R(float *y, int ldy, const q8call *C, int r0, int p, int part,   \
             int cols) {                                                    \
    (void)part;                                                             \
    q8_tile512(y, ldy, C, r0, p, cols, R);                                  \
  }
#define Q8TVNNI(R)                                                          \
  __attribute__((target("avx2,fma,avxvnni"))) static void q8tvnni_##R(      \
      float *y, int ldy, const q8call *C, int r0, int p, int part,          \
      int cols) {                                                           \
    q8_tile_vnni256(y, ldy, C, r0, p, part, cols, R);                       \
  }
#define Q8TAVX2(R)                                                          \
  __attribute__((target("avx2,fma"))) static void q8tavx2_##R(              \
      float *y, int ldy, const q8call *C, int r0, int p, int part,          \
      int cols) {                                                           \
    q8_tile_avx2(y, ldy, C, r0, p, part, cols, R);                          \
  }
Q8T512(1) Q8T512(2) Q8T512(3) Q8T512(4) Q8T512(5) Q8T512(6)
Q8T512(7) Q8T512(8)
Q8TVNNI(1) Q8TVNNI(2) Q8TVNNI(3) Q8TVNNI(4) Q8TVNNI(5) Q8TVNNI(6)
Q8TAVX2(1) Q8TAVX2(2) Q8TAVX2(3) Q8TAVX2(4) Q8TAVX2(5) Q8TAVX2(6)

static const q8tile_fn q8t512[MR_V512 + 1] = {
    NULL,       q8t512_1,  q8t512_2,  q8t512_3, q8t512_4,
    q8t512_5,   q8t512_6,  q8t512_7,  q8t512_8};
static const q8tile_fn q8tvnni[MR_V256 + 1] = {
    NULL, q8tvnni_1, q8tvnni_2, q8tvnni_3, q8tvnni_4, q8tvnni_5, q8tvnni_6};
static const q8tile_fn q8tavx2[MR_V256 + 1] = {
    NULL, q8tavx2_1, q8tavx2_2, q8tavx2_3, q8tavx2_4, q8tavx2_5, q8tavx2_6};

/* Every tile: a panel at a time (it stays in cache while the rows pass),
** in parts of part_w columns, mr_max rows at a time. */
static void q8_tiles(float *y, int ldy, int rows, const q8call *C,
                     const q8tile_fn *tiles, int mr_max, int part_w) {
  const int out = C->qw->out;
  int p, part, r0;
  for (p = 0; p * QP < out; p++)
    for (part = 0; part * part_w < QP && p * QP + part * part_w < out; part++) {
      const int left = out - p * QP - part * part_w;
      const int cols = left < part_w ? left : part_w;
      for (r0 = 0; r0 < rows; r0 += mr_max) {
        const int mr = rows - r0 < mr_max ? rows - r0 : mr_max;
        tiles[mr](y, ldy, C, r0, p, part, cols);
      }
    }
}
#endif

size_t relattn_q8_scratch(int rows, int in) {
  const size_t params = (size_t)round_up(rows > 0 ? rows : 1, 8) * 8;
  return params + (size_t)(rows > 0 ? rows : 1) * round_up(in > 0 ? in : 1, 64);
}

/* The quantized rows of a call in scratch (relattn_q8_scratch's layout). */
static void q8_call_of(q8call *C, const void *scratch, int rows, int in) {
  const float *sx = scratch;
  const int32_t *zx = (const int32_t *)(sx + round_up(rows > 0 ? rows : 1, 8));
  C->xq = (const uint8_t *)(zx + round_up(rows > 0 ? rows : 1, 8));
  C->sx = sx, C->zx = zx, C->ldq = round_up(in, 64);
}

/* A weight's columns [c0, c1) as a weight of their own (c0 a multiple of
** QP): the same panels, scales and sums, read where they lie. */
static relattn_q8w q8_view(const relattn_q8w *qw, int c0, int c1) {
  relattn_q8w v;
  v.out = c1 - c0, v.in = qw->in;
  v.w = qw->w + (size_t)c0 * round_up(qw->in, 4);
  v.scale = qw->scale + c0, v.sum = qw->sum + c0;
  return v;
}

static void q8_run(const char *path, float *y, int ldy, int rows,
                   const q8call *C) {
#ifdef QX86
  if (strcmp(path, "avx512vnni") == 0) {
    q8_tiles(y, ldy, rows, C, q8t512, MR_V512, QP);
    return;
  }
  if (strcmp(path, "avxvnni") == 0) {
    q8_tiles(y, ldy, rows, C, q8tvnni, MR_V256, 16);
    return;
  }
  if (strcmp(path, "avx2") == 0) {
    q8_tiles(y, ldy, rows, C, q8tavx2, MR_V256, 8);
    return;
  }
#else
  (void)path;
#endif
  q8_scalar(y, ldy, rows, C);
}

void relattn_q8_gemm_on(const char *path, float *y, int ldy, const float *x,
                        int ldx, int rows, const relattn_q8w *qw,
                        const float *b, int accumulate, void *scratch) {
  q8call C;
  if (rows <= 0 || qw->out <= 0) return;
  q8_call_of(&C, scratch, rows, qw->in);
  relattn_q8_quantize_rows_on(path, (uint8_t *)C.xq, C.ldq, (float *)C.sx,
                              (int32_t *)C.zx, x, ldx, rows, qw->in);
  C.qw = qw, C.b = b, C.accumulate = accumulate;
  q8_run(path, y, ldy, rows, &C);
}

void relattn_q8_rows(void *scratch, const float *x, int ldx, int rows,
                     int in) {
  q8call C;
  if (rows <= 0 || in <= 0) return;
  q8_call_of(&C, scratch, rows, in);
  relattn_q8_quantize_rows_on(relattn_q8_path(), (uint8_t *)C.xq, C.ldq,
                              (float *)C.sx, (int32_t *)C.zx, x, ldx, rows,
                              in);
}

void relattn_q8_gemm_cols(float *y, int ldy, int rows, const relattn_q8w *qw,
                          const float *b, int accumulate, const void *scratch,
                          int c0, int c1) {
  q8call C;
  relattn_q8w v;
  if (c1 > qw->out) c1 = qw->out;
  if (rows <= 0 || c0 < 0 || c0 % QP || c1 <= c0) return;
  v = q8_view(qw, c0, c1);
  q8_call_of(&C, scratch, rows, qw->in);
  C.qw = &v, C.b = b ? b + c0 : NULL, C.accumulate = accumulate;
  q8_run(relattn_q8_path(), y + c0, ldy, rows, &C);
}

void relattn_q8_gemm(float *y, int ldy, const float *x, int ldx, int rows,
                     const relattn_q8w *qw, const float *b, int accumulate,
                     void *scratch) {
  relattn_q8_gemm_on(relattn_q8_path(), y, ldy, x, ldx, rows, qw, b,
                     accumulate, scratch);
}

/* ---- bf16 ---------------------------------------------------------------- */

uint16_t relattn_f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static uint16_t bf16_flush(uint16_t h) {
  return (h & 0x7f80u) == 0 ? (uint16_t)(h & 0x8000u) : h;
}

static float bf(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* Element offset of W[c][k] in panel order, k padded to kp (even). */
static size_t bf_at(int c, int k, int kp) {
  return (size_t)(c / QP) * QP * kp + (size_t)(k / 2) * QP * 2 +
         (size_t)(c % QP) * 2 + (size_t)(k % 2);
}

int relattn_bf16w_new(relattn_bf16w *bw, const uint16_t *w, int out, int in) {
  int c, k, op, kp;
  memset(bw, 0, sizeof *bw);
  if (out <= 0 || in <= 0) return RELATTN_ERR_ARG;
  op = round_up(out, QP), kp = round_up(in, 2);
  bw->w = relattn_alloc(sizeof(uint16_t) * (size_t)op * kp);
  if (!bw->w) return RELATTN_ERR_NOMEM;
  bw->out = out, bw->in = in;
  memset(bw->w, 0, sizeof(uint16_t) * (size_t)op * kp);
  for (c = 0; c < out; c++)
    for (k = 0; k < in; k++)
      bw->w[bf_at(c, k, kp)] = bf16_flush(w[(size_t)c * in + k]);
  return RELATTN_OK;
}

size_t relattn_bf16w_block_bytes(int out, int in) {
  const size_t op = (size_t)round_up(out, QP), kp = (size_t)round_up(in, 2);
  return up64(sizeof(relattn_bf16w)) + up64(sizeof(uint16_t) * op * kp);
}

relattn_bf16w *relattn_bf16w_place(void *mem, const uint16_t *w, int out,
                                   int in) {
  const int kp = round_up(in, 2);
  relattn_bf16w *bw = mem;
  int c, k;
  memset(mem, 0, relattn_bf16w_block_bytes(out, in));
  bw->out = out, bw->in = in;
  bw->w = (uint16_t *)((char *)mem + up64(sizeof *bw));
  for (c = 0; c < out; c++)
    for (k = 0; k < in; k++)
      bw->w[bf_at(c, k, kp)] = bf16_flush(w[(size_t)c * in + k]);
  return bw;
}

void relattn_bf16w_to_f32(float *w, const relattn_bf16w *bw) {
  const int kp = round_up(bw->in, 2);
  int c, k;
  for (c = 0; c < bw->out; c++)
    for (k = 0; k < bw->in; k++)
      w[(size_t)c * bw->in + k] = relattn_bf16_to_f32(bw->w[bf_at(c, k, kp)]);
}

void relattn_f32_to_bf16_n(uint16_t *out, const float *w, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) out[i] = relattn_f32_to_bf16(w[i]);
}

void relattn_bf16w_free(relattn_bf16w *bw) {
  relattn_free(bw->w);
  memset(bw, 0, sizeof *bw);
}

void relattn_bf16w_unpack(uint16_t *w, const relattn_bf16w *bw) {
  const int kp = round_up(bw->in, 2);
  int c, k;
  for (c = 0; c < bw->out; c++)
    for (k = 0; k < bw->in; k++) w[(size_t)c * bw->in + k] = bw->w[bf_at(c, k, kp)];
}

/* One step of vdpbf16ps: a + p, p = x w exact (both bf16, neither
** subnormal), DAZ on a, RNE, a tiny result (after rounding, above) a zero
** of its sign. */
static float bf_step(float a, float x, float w) {
  float r;
  if (fabsf(a) < FLT_MIN) a = copysignf(0.0f, a);
  r = fmaf(x, w, a);
  if (fabsf(r) < FLT_MIN) return copysignf(0.0f, r);
  if (fabsf(r) == FLT_MIN) {
    /* |exact| < FLT_MIN (1 - 2^-25)? exact = s + e (TwoSum in double:
    ** the product and a are exact there) */
    const double lim = (double)FLT_MIN - ldexp(1.0, -151);
    const double p = (double)x * w, s = p + a, bb = s - p;
    const double e = (p - (s - bb)) + (a - bb);
    if (fabs(s) < lim || (fabs(s) == lim && (s > 0 ? e < 0 : e > 0)))
      return copysignf(0.0f, r);
  }
  return r;
}

relattn_bf16w relattn_bf16w_rows(const relattn_bf16w *bw, int lo, int out) {
  relattn_bf16w v = *bw;
  v.out = out;
  v.w = bw->w + (size_t)(lo / QP) * QP * round_up(bw->in, 2);
  return v;
}

float relattn_bf16w_dot(const relattn_bf16w *bw, int r, const float *x) {
  const int kp = round_up(bw->in, 2);
  const uint16_t *w = bw->w + bf_at(r, 0, kp);
  float acc = 0.0f;
  int k;
  for (k = 0; k < kp; k += 2, w += QP * 2) {
    acc = bf_step(acc, k + 1 < bw->in ? x[k + 1] : 0.0f, bf(w[1]));
    acc = bf_step(acc, x[k], bf(w[0]));
  }
  return acc;
}

typedef struct bfcall {
  const uint16_t *xb; /* (rows, ldq) bf16 rows: avx512bf16 */
  const float *xf;    /* (rows, ldq) the same values as float: the others */
  int ldq;
  const relattn_bf16w *bw;
  const float *b;
  int accumulate;
} bfcall;

/* Rows r0 .. r0+mr-1 by columns [c0, c1) on the scalar path. */
static void bf_scalar(float *y, int ldy, const bfcall *C, int r0, int mr,
                      int c0, int c1) {
  const int kp = round_up(C->bw->in, 2);
  int r, c, k;
  for (r = r0; r < r0 + mr; r++) {
    const float *xr = C->xf + (size_t)r * C->ldq;
    float *yr = y + (size_t)r * ldy;
    for (c = c0; c < c1; c++) {
      const uint16_t *w = C->bw->w + bf_at(c, 0, kp);
      float acc = start_of(yr, C->b, c, C->accumulate);
      for (k = 0; k < kp; k += 2, w += QP * 2) {
        acc = bf_step(acc, xr[k + 1], bf(w[1]));
        acc = bf_step(acc, xr[k], bf(w[0]));
      }
      yr[c] = acc;
    }
  }
}

#ifdef QX86
#define MR_BF512 12
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) static inline void
bf_tile512(float *y, int ldy, const bfcall *C, int r0, int p, int cols, int mr) {
  const int kp = round_up(C->bw->in, 2), np = kp / 2;
  const uint16_t *w = C->bw->w + (size_t)p * QP * kp;
  const uint16_t *x = C->xb + (size_t)r0 * C->ldq;
  const int c0 = p * QP;
  const __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
  const __mmask16 m1 =
      cols >= 32 ? 0xffff
                 : (cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : 0);
  const __m512 b0 = C->b ? _mm512_maskz_loadu_ps(m0, C->b + c0)
                         : _mm512_setzero_ps(),
               b1 = C->b ? _mm512_maskz_loadu_ps(m1, C->b + c0 + 16)
                         : _mm512_setzero_ps();
  __m512 acc[MR_BF512][2];
  int r, j;
#pragma GCC unroll 12
  for (r = 0; r < mr; r++) {
    float *yr = y + (size_t)(r0 + r) * ldy + c0;
    acc[r][0] = b0, acc[r][1] = b1;
    if (C->accumulate) {
      acc[r][0] = _mm512_maskz_loadu_ps(m0, yr);
      acc[r][1] = _mm512_maskz_loadu_ps(m1, yr + 16);
      if (C->b) {
        acc[r][0] = _mm512_add_ps(acc[r][0], b0);
        acc[r][1] = _mm512_add_ps(acc[r][1], b1);
      }
    }
  }
  for (j = 0; j < np; j++, w += QP * 2) {
    const __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 32);
#pragma GCC unroll 12
    for (r = 0; r < mr; r++) {
      uint32_t pair;
      __m512i xb;
      memcpy(&pair, x + (size_t)r * C->ldq + 2 * j, 4);
      xb = _mm512_set1_epi32((int)pair);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)xb, (__m512bh)w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)xb, (__m512bh)w1);
    }
  }
#pragma GCC unroll 12
  for (r = 0; r < mr; r++) {
    float *yr = y + (size_t)(r0 + r) * ldy + c0;
    _mm512_mask_storeu_ps(yr, m0, acc[r][0]);
    _mm512_mask_storeu_ps(yr + 16, m1, acc[r][1]);
  }
}

#define MR_BF256 5
/* AVX2: rows by 8 columns of panel p from column 8 q of it, each step a
** fmaf and the flush of subnormal results; min_abs tracks the smallest
** nonzero |sum| (as bits minus one, unsigned) so that a sum at FLT_MIN,
** whose flush depends on the exact value, sends the tile to bf_scalar. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
bf_tile_avx2(float *y, int ldy, const bfcall *C, int r0, int p, int q,
             int cols, int mr) {
  const int kp = round_up(C->bw->in, 2), np = kp / 2;
  const uint16_t *w = C->bw->w + (size_t)p * QP * kp + 16 * q;
  const float *x = C->xf + (size_t)r0 * C->ldq;
  const int c0 = p * QP + 8 * q;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lane);
  const __m256i absm = _mm256_set1_epi32(0x7fffffff),
                one = _mm256_set1_epi32(1);
  const __m256 fmin = _mm256_set1_ps(FLT_MIN);
  const __m256 bv = C->b ? _mm256_maskload_ps(C->b + c0, m) : _mm256_setzero_ps();
  __m256 acc[MR_BF256];
  __m256i low[MR_BF256], all = _mm256_set1_epi32(-1);
  int r, j;
#pragma GCC unroll 5
  for (r = 0; r < mr; r++) {
    __m256 a = bv, tiny;
    if (C->accumulate) {
      a = _mm256_maskload_ps(y + (size_t)(r0 + r) * ldy + c0, m);
      if (C->b) a = _mm256_add_ps(a, bv);
    }
    /* DAZ on the start */
    tiny = _mm256_cmp_ps(_mm256_and_ps(a, _mm256_castsi256_ps(absm)), fmin,
                         _CMP_LT_OQ);
    acc[r] = _mm256_blendv_ps(a, _mm256_andnot_ps(_mm256_castsi256_ps(absm), a),
                              tiny);
    low[r] = all;
  }
  for (j = 0; j < np; j++, w += QP * 2) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)w);
    const __m256 wodd = _mm256_castsi256_ps(
                     _mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u))),
                 weven = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
#pragma GCC unroll 5
    for (r = 0; r < mr; r++) {
      const float *xr = x + (size_t)r * C->ldq + 2 * j;
      acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(xr + 1), wodd, acc[r]);
      low[r] = _mm256_min_epu32(
          low[r], _mm256_sub_epi32(
                      _mm256_and_si256(_mm256_castps_si256(acc[r]), absm), one));
      acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(xr), weven, acc[r]);
      low[r] = _mm256_min_epu32(
          low[r], _mm256_sub_epi32(
                      _mm256_and_si256(_mm256_castps_si256(acc[r]), absm), one));
    }
  }
  {
    const __m256i lim = _mm256_set1_epi32(0x007fffff); /* |sum| <= FLT_MIN */
    __m256i any = _mm256_setzero_si256();
    for (r = 0; r < mr; r++)
      any = _mm256_or_si256(
          any, _mm256_cmpeq_epi32(_mm256_min_epu32(low[r], lim), low[r]));
    if (_mm256_movemask_epi8(_mm256_and_si256(any, m))) {
      bf_scalar(y, ldy, C, r0, mr, c0, c0 + cols);
      return;
    }
  }
  for (r = 0; r < mr; r++)
    _mm256_maskstore_ps(y + (size_t)(r0 + r) * ldy + c0, m, acc[r]);
}

typedef void (*bftile_fn)(float *, int, const bfcall *, int, int, int, int);

#define BFT512(R)                                                           \
  __attribute__((target("avx512f,avx512bw,avx512bf16"))) static void        \
  bft512_##R(float *y, int ldy, const bfcall *C, int r0, int p, int part,   \
             int cols) {                                                    \
    (void)part;                                                             \
    bf_tile512(y, ldy, C, r0, p, cols, R);                                  \
  }
#define BFTAVX2(R)                                                          \
  __attribute__((target("avx2,fma"))) static void bftavx2_##R(              \
      float *y, int ldy, const bfcall *C, int r0, int p, int part,          \
      int cols) {                                                           \
    bf_tile_avx2(y, ldy, C, r0, p, part, cols, R);                          \
  }
BFT512(1) BFT512(2) BFT512(3) BFT512(4) BFT512(5) BFT512(6)
BFT512(7) BFT512(8) BFT512(9) BFT512(10) BFT512(11) BFT512(12)
BFTAVX2(1) BFTAVX2(2) BFTAVX2(3) BFTAVX2(4) BFTAVX2(5)

static const bftile_fn bft512[MR_BF512 + 1] = {
    NULL,      bft512_1,  bft512_2,  bft512_3, bft512_4,
    bft512_5,  bft512_6,  bft512_7,  bft512_8, bft512_9,
    bft512_10, bft512_11, bft512_12};
static const bftile_fn bftavx2[MR_BF256 + 1] = {
    NULL, bftavx2_1, bftavx2_2, bftavx2_3, bftavx2_4, bftavx2_5};

static void bf_tiles(float *y, int ldy, int rows, const bfcall *C,
                     const bftile_fn *tiles, int mr_max, int part_w) {
  const int out = C->bw->out;
  int p, part, r0;
  for (p = 0; p * QP < out; p++)
    for (part = 0; part * part_w < QP && p * QP + part * part_w < out; part++) {
      const int left = out - p * QP - part * part_w;
      const int cols = left < part_w ? left : part_w;
      for (r0 = 0; r0 < rows; r0 += mr_max) {
        const int mr = rows - r0 < mr_max ? rows - r0 : mr_max;
        tiles[mr](y, ldy, C, r0, p, part, cols);
      }
    }
}

/* f32 -> bf16 as relattn_f32_to_bf16, 16 at a time. */
__attribute__((target("avx512f,avx512bw"))) static void bf_rows_avx512(
    uint16_t *xb, int ldq, const float *x, int ldx, int rows, int in) {
  const int kp = round_up(in, 2);
  const __m512i expm = _mm512_set1_epi32(0x7f800000), absm =
                    _mm512_set1_epi32(0x7fffffff), bias = _mm512_set1_epi32(0x7fff),
                one = _mm512_set1_epi32(1);
  int r, k;
  for (r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * ldx;
    uint16_t *q = xb + (size_t)r * ldq;
    for (k = 0; k < kp; k += 16) {
      const __mmask16 m = in - k >= 16 ? 0xffff
                          : in > k     ? (__mmask16)((1u << (in - k)) - 1)
                                       : 0;
      const __mmask16 mp =
          kp - k >= 16 ? 0xffff : (__mmask16)((1u << (kp - k)) - 1);
      const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, xr + k));
      const __mmask16 sub = _mm512_testn_epi32_mask(u, expm);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absm),
                                                    expm);
      __m512i h = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(u, bias),
                           _mm512_and_si512(_mm512_srli_epi32(u, 16), one)),
          16);
      h = _mm512_mask_mov_epi32(
          h, sub, _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                   _mm512_set1_epi32(0x8000)));
      h = _mm512_mask_mov_epi32(
          h, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16),
                                  _mm512_set1_epi32(0x40)));
      _mm512_mask_cvtepi32_storeu_epi16(q + k, mp, h);
    }
  }
}

/* f32 -> bf16 -> f32 (the values the emulating paths multiply), 8 at a
** time; the tail one by one. */
__attribute__((target("avx2,fma"))) static void bf_rows_f32_avx2(
    float *xf, int ldq, const float *x, int ldx, int rows, int in) {
  const int kp = round_up(in, 2), n8 = in & ~7;
  const __m256i expm = _mm256_set1_epi32(0x7f800000),
                absm = _mm256_set1_epi32(0x7fffffff),
                bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1),
                hi = _mm256_set1_epi32((int)0xffff0000u);
  int r, k;
  for (r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * ldx;
    float *q = xf + (size_t)r * ldq;
    for (k = 0; k < n8; k += 8) {
      const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(xr + k));
      const __m256i e = _mm256_and_si256(u, expm);
      const __m256i sub = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), expm);
      __m256i h = _mm256_and_si256(
          _mm256_add_epi32(_mm256_add_epi32(u, bias),
                           _mm256_and_si256(_mm256_srli_epi32(u, 16), one)),
          hi);
      h = _mm256_blendv_epi8(
          h, _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u)), sub);
      h = _mm256_blendv_epi8(
          h, _mm256_or_si256(_mm256_and_si256(u, hi),
                             _mm256_set1_epi32(0x400000)),
          nan);
      _mm256_storeu_ps(q + k, _mm256_castsi256_ps(h));
    }
    for (; k < in; k++) q[k] = bf(relattn_f32_to_bf16(xr[k]));
    for (; k < kp; k++) q[k] = 0.0f;
  }
}
#endif

size_t relattn_bf16_scratch(int rows, int in) {
  return (size_t)(rows > 0 ? rows : 1) * round_up(in > 0 ? in : 1, 16) * 4;
}

/* x's rows as the path's tiles read them, into scratch (ldq apart). */
static void bf_rows(const char *path, void *scratch, int ldq, const float *x,
                    int ldx, int rows, int in) {
  float *xf = scratch;
  const int kp = round_up(in, 2);
  int r, k;
#ifdef QX86
  if (strcmp(path, "avx512bf16") == 0) {
    bf_rows_avx512(scratch, ldq, x, ldx, rows, in);
    return;
  }
  if (strcmp(path, "avx2") == 0) {
    bf_rows_f32_avx2(scratch, ldq, x, ldx, rows, in);
    return;
  }
#else
  (void)path;
#endif
  for (r = 0; r < rows; r++) {
    for (k = 0; k < in; k++)
      xf[(size_t)r * ldq + k] = bf(relattn_f32_to_bf16(x[(size_t)r * ldx + k]));
    for (; k < kp; k++) xf[(size_t)r * ldq + k] = 0.0f;
  }
}

/* The tiles over rows already in scratch (bf_rows, the same path). */
static void bf_run(const char *path, float *y, int ldy, int rows,
                   const relattn_bf16w *bw, const float *b, int accumulate,
                   const void *scratch) {
  bfcall C;
  C.ldq = round_up(bw->in, 16), C.bw = bw, C.b = b, C.accumulate = accumulate;
  C.xb = NULL, C.xf = NULL;
#ifdef QX86
  if (strcmp(path, "avx512bf16") == 0) {
    C.xb = scratch;
    bf_tiles(y, ldy, rows, &C, bft512, MR_BF512, QP);
    return;
  }
  if (strcmp(path, "avx2") == 0) {
    C.xf = scratch;
    bf_tiles(y, ldy, rows, &C, bftavx2, MR_BF256, 8);
    return;
  }
#endif
  C.xf = scratch;
  bf_scalar(y, ldy, &C, 0, rows, 0, bw->out);
}

void relattn_bf16_gemm_on(const char *path, float *y, int ldy, const float *x,
                          int ldx, int rows, const relattn_bf16w *bw,
                          const float *b, int accumulate, void *scratch) {
  if (rows <= 0 || bw->out <= 0) return;
  bf_rows(path, scratch, round_up(bw->in, 16), x, ldx, rows, bw->in);
  bf_run(path, y, ldy, rows, bw, b, accumulate, scratch);
}

void relattn_bf16_rows(void *scratch, const float *x, int ldx, int rows,
                       int in) {
  if (rows <= 0 || in <= 0) return;
  bf_rows(relattn_bf16_path(), scratch, round_up(in, 16), x, ldx, rows, in);
}

void relattn_bf16_gemm_cols(float *y, int ldy, int rows,
                            const relattn_bf16w *bw, const float *b,
                            int accumulate, const void *scratch, int c0,
                            int c1) {
  relattn_bf16w v;
  if (c1 > bw->out) c1 = bw->out;
  if (rows <= 0 || c0 < 0 || c0 % QP || c1 <= c0) return;
  v.out = c1 - c0, v.in = bw->in;
  v.w = bw->w + (size_t)c0 * round_up(bw->in, 2);
  bf_run(relattn_bf16_path(), y + c0, ldy, rows, &v, b ? b + c0 : NULL,
         accumulate, scratch);
}

void relattn_bf16_gemm(float *y, int ldy, const float *x, int ldx, int rows,
                       const relattn_bf16w *bw, const float *b, int accumulate,
                       void *scratch) {
  relattn_bf16_gemm_on(relattn_bf16_path(), y, ldy, x, ldx, rows, bw, b,
                       accumulate, scratch);
}
