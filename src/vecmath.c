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

static void add_scalar(float *x, const float *y, int n) {
  int j;
  for (j = 0; j < n; j++) x[j] += y[j];
}

static float max_ramp_scalar(const float *x, int n, float r) {
  float m = x[0];
  int j;
  for (j = 1; j < n; j++) {
    const float y = x[j] + r * (float)j;
    m = y > m ? y : m;
  }
  return m;
}

static float exp_sum_ramp_scalar(float *x, int n, float sub, float r) {
  float sum = 0.0f;
  int j;
  for (j = 0; j < n; j++) {
    x[j] = expf(x[j] + r * (float)j - sub);
    sum += x[j];
  }
  return sum;
}

static void gather_add_scalar(float *x, const float *t, const int *idx, int n,
                              int base, int stride, int step) {
  int j;
  if (!idx) {
    for (j = 0; j < n; j++) x[j] += t[base + j * (stride + step)];
    return;
  }
  for (j = 0; j < n; j++) x[j] += t[base + idx[j] * stride + j * step];
}

/* dot_rows' sum of one row (vecmath.h), from c0 = 0 */
static float dot_fixed(const float *q, const float *k, int d) {
  const int d8 = d / 8 * 8;
  float p[8] = {0, 0, 0, 0, 0, 0, 0, 0}, r;
  int c, l;
  for (c = 0; c < d8; c += 8)
    for (l = 0; l < 8; l++) p[l] = fmaf(q[c + l], k[c + l], p[l]);
  r = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
  for (c = d8; c < d; c++) r = fmaf(q[c], k[c], r);
  return r;
}

static void dot_rows_scalar(float *y, const float *q, const float *k, int ldk,
                            int n, int d, float s) {
  int j;
  for (j = 0; j < n; j++) y[j] = dot_fixed(q, k + (size_t)j * ldk, d) * s;
}

static void axpy_rows_scalar(float *z, const float *p, const float *v,
                             int ldv, int n, int d) {
  int j, c;
  for (c = 0; c < d; c++) z[c] = 0.0f;
  for (j = 0; j < n; j++)
    for (c = 0; c < d; c++) z[c] = fmaf(p[j], v[(size_t)j * ldv + c], z[c]);
}

static void dot_heads_scalar(float *y, int ldy, const float *q,
                             const float *k, int ldk, int n, int heads, int d,
                             float s) {
  int h;
  for (h = 0; h < heads; h++)
    dot_rows_scalar(y + (size_t)h * ldy, q + (size_t)h * d, k + (size_t)h * d,
                    ldk, n, d, s);
}

static void axpy_heads_scalar(float *z, const float *p, int ldp,
                              const float *v, int ldv, int n, int heads,
                              int d) {
  int h;
  for (h = 0; h < heads; h++)
    axpy_rows_scalar(z + (size_t)h * d, p + (size_t)h * ldp,
                     v + (size_t)h * d, ldv, n, d);
}

static const relattn_vec vec_scalar = {"scalar", max_scalar, exp_sum_scalar,
                                       scale_scalar, add_scalar,
                                       max_ramp_scalar, exp_sum_ramp_scalar,
                                       gather_add_scalar, dot_rows_scalar,
                                       axpy_rows_scalar, dot_heads_scalar,
                                       axpy_heads_scalar};

/* ---- x86-64: AVX2 + FMA and AVX-512F ------------------------------------ */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* exp as in Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-5
** polynomial for e^r, then 2^n. Relative error about 2e-7 on the inputs of a
** softmax (x <= 0); below -87.3 the result is 0 (under FLT_MIN). */
#define EXP_LOG2E 1.44269504088896341f
#define EXP_C1 0.693359375f        /* ln2 = C1 + C2, C1 exact in float */
#define EXP_C2 -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f
#define EXP_LO -87.3f

__attribute__((target("avx2,fma"))) static inline __m256 exp_avx2(__m256 x) {
  const __m256 lo = _mm256_set1_ps(EXP_LO);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  __m256 n, r, r2, p, y;
  __m256i e;
  x = _mm256_max_ps(x, lo);
  x = _mm256_min_ps(x, _mm256_set1_ps(88.3f));
  n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_C1), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_C2), r);
  r2 = _mm256_mul_ps(r, r);
  p = _mm256_set1_ps(EXP_P0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P5));
  y = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                         _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}

/* Lanes [0, rem) set, for the tail of a row. */
__attribute__((target("avx2"))) static inline __m256i tail_mask_avx2(int rem) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), idx);
}

__attribute__((target("avx2,fma"))) static float max_avx2(const float *x,
                                                          int n) {
  __m256 m = _mm256_set1_ps(-INFINITY), m2 = m;
  __m128 h;
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
    m2 = _mm256_max_ps(m2, _mm256_loadu_ps(x + j + 8));
  }
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
  if (j < n) {
    const __m256i mask = tail_mask_avx2(n - j);
    __m256 t = _mm256_maskload_ps(x + j, mask);
    t = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), t,
                         _mm256_castsi256_ps(mask));
    m = _mm256_max_ps(m, t);
  }
  m = _mm256_max_ps(m, m2);
  h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma"))) static float exp_sum_avx2(float *x, int n,
                                                              float sub) {
  const __m256 s = _mm256_set1_ps(sub);
  __m256 acc = _mm256_setzero_ps(), acc2 = acc;
  __m128 h;
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256 a = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j), s));
    __m256 b = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), s));
    _mm256_storeu_ps(x + j, a);
    _mm256_storeu_ps(x + j + 8, b);
    acc = _mm256_add_ps(acc, a);
    acc2 = _mm256_add_ps(acc2, b);
  }
  for (; j + 8 <= n; j += 8) {
    __m256 a = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j), s));
    _mm256_storeu_ps(x + j, a);
    acc = _mm256_add_ps(acc, a);
  }
  if (j < n) {
    const __m256i mask = tail_mask_avx2(n - j);
    __m256 a = exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + j, mask), s));
    a = _mm256_and_ps(a, _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(x + j, mask, a);
    acc = _mm256_add_ps(acc, a);
  }
  acc = _mm256_add_ps(acc, acc2);
  h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma"))) static void scale_avx2(float *x, int n,
                                                           float f) {
  const __m256 v = _mm256_set1_ps(f);
  int j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), v));
  for (; j < n; j++) x[j] *= f;
}

__attribute__((target("avx512f"))) static inline __m512 exp_avx512(__m512 x) {
  __m512 n, r, r2, p, y;
  /* scalef does 2^n with underflow to 0, so only the lower clamp keeps r
  ** finite (x = -inf). */
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.3f));
  n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_C1), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_C2), r);
  r2 = _mm512_mul_ps(r, r);
  p = _mm512_set1_ps(EXP_P0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
  y = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
}

__attribute__((target("avx512f"))) static float max_avx512(const float *x,
                                                           int n) {
  __m512 m = _mm512_set1_ps(-INFINITY), m2 = m;
  int j = 0;
  for (; j + 32 <= n; j += 32) {
    m = _mm512_max_ps(m, _mm512_loadu_ps(x + j));
    m2 = _mm512_max_ps(m2, _mm512_loadu_ps(x + j + 16));
  }
  for (; j + 16 <= n; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + j));
  if (j < n) {
    const __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
    m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, x + j));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(m, m2));
}

__attribute__((target("avx512f"))) static float exp_sum_avx512(float *x, int n,
                                                               float sub) {
  const __m512 s = _mm512_set1_ps(sub);
  __m512 acc = _mm512_setzero_ps(), acc2 = acc;
  int j = 0;
  for (; j + 32 <= n; j += 32) {
    __m512 a = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + j), s));
    __m512 b = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + j + 16), s));
    _mm512_storeu_ps(x + j, a);
    _mm512_storeu_ps(x + j + 16, b);
    acc = _mm512_add_ps(acc, a);
    acc2 = _mm512_add_ps(acc2, b);
  }
  for (; j + 16 <= n; j += 16) {
    __m512 a = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + j), s));
    _mm512_storeu_ps(x + j, a);
    acc = _mm512_add_ps(acc, a);
  }
  if (j < n) {
    const __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
    __m512 a = exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), s));
    a = _mm512_maskz_mov_ps(k, a);
    _mm512_mask_storeu_ps(x + j, k, a);
    acc = _mm512_add_ps(acc, a);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc, acc2));
}

__attribute__((target("avx512f"))) static void scale_avx512(float *x, int n,
                                                            float f) {
  const __m512 v = _mm512_set1_ps(f);
  int j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_loadu_ps(x + j), v));
  if (j < n) {
    const __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(x + j, k,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), v));
  }
}

__attribute__((target("avx2"))) static void add_avx2(float *x, const float *y,
                                                    int n) {
  int j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(x + j, _mm256_add_ps(_mm256_loadu_ps(x + j),
                                          _mm256_loadu_ps(y + j)));
  for (; j < n; j++) x[j] += y[j];
}

__attribute__((target("avx512f"))) static void add_avx512(float *x,
                                                          const float *y,
                                                          int n) {
  int j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(x + j, _mm512_add_ps(_mm512_loadu_ps(x + j),
                                          _mm512_loadu_ps(y + j)));
  if (j < n) {
    const __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(x + j, k,
                          _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + j),
                                        _mm512_maskz_loadu_ps(k, y + j)));
  }
}

/* The ramp r*j is computed from the integer j in each lane (one rounding),
** not accumulated. */
__attribute__((target("avx2,fma"))) static float max_ramp_avx2(const float *x,
                                                               int n, float r) {
  const __m256 rv = _mm256_set1_ps(r);
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 m = _mm256_set1_ps(-INFINITY);
  __m128 h;
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    m = _mm256_max_ps(m, _mm256_fmadd_ps(rv, _mm256_cvtepi32_ps(idx),
                                         _mm256_loadu_ps(x + j)));
    idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
  }
  if (j < n) {
    const __m256i mask = tail_mask_avx2(n - j);
    __m256 t = _mm256_fmadd_ps(rv, _mm256_cvtepi32_ps(idx),
                               _mm256_maskload_ps(x + j, mask));
    t = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), t,
                         _mm256_castsi256_ps(mask));
    m = _mm256_max_ps(m, t);
  }
  h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma"))) static float exp_sum_ramp_avx2(float *x,
                                                                   int n,
                                                                   float sub,
                                                                   float r) {
  const __m256 s = _mm256_set1_ps(sub), rv = _mm256_set1_ps(r);
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 acc = _mm256_setzero_ps();
  __m128 h;
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 a =
        _mm256_fmadd_ps(rv, _mm256_cvtepi32_ps(idx), _mm256_loadu_ps(x + j));
    a = exp_avx2(_mm256_sub_ps(a, s));
    _mm256_storeu_ps(x + j, a);
    acc = _mm256_add_ps(acc, a);
    idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
  }
  if (j < n) {
    const __m256i mask = tail_mask_avx2(n - j);
    __m256 a = _mm256_fmadd_ps(rv, _mm256_cvtepi32_ps(idx),
                               _mm256_maskload_ps(x + j, mask));
    a = exp_avx2(_mm256_sub_ps(a, s));
    a = _mm256_and_ps(a, _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(x + j, mask, a);
    acc = _mm256_add_ps(acc, a);
  }
  h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx512f"))) static float max_ramp_avx512(const float *x,
                                                                int n,
                                                                float r) {
  const __m512 rv = _mm512_set1_ps(r);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                  13, 14, 15);
  __m512 m = _mm512_set1_ps(-INFINITY);
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    m = _mm512_max_ps(m, _mm512_fmadd_ps(rv, _mm512_cvtepi32_ps(idx),
                                         _mm512_loadu_ps(x + j)));
    idx = _mm512_add_epi32(idx, _mm512_set1_epi32(16));
  }
  if (j < n) {
    const __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
    m = _mm512_mask_max_ps(m, k, m,
                           _mm512_fmadd_ps(rv, _mm512_cvtepi32_ps(idx),
                                           _mm512_maskz_loadu_ps(k, x + j)));
  }
  return _mm512_reduce_max_ps(m);
}

__attribute__((target("avx512f"))) static float exp_sum_ramp_avx512(float *x,
                                                                    int n,
                                                                    float sub,
                                                                    float r) {
  const __m512 s = _mm512_set1_ps(sub), rv = _mm512_set1_ps(r);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                  13, 14, 15);
  __m512 acc = _mm512_setzero_ps();
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 a =
        _mm512_fmadd_ps(rv, _mm512_cvtepi32_ps(idx), _mm512_loadu_ps(x + j));
    a = exp_avx512(_mm512_sub_ps(a, s));
    _mm512_storeu_ps(x + j, a);
    acc = _mm512_add_ps(acc, a);
    idx = _mm512_add_epi32(idx, _mm512_set1_epi32(16));
  }
  if (j < n) {
    const __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
    __m512 a = _mm512_fmadd_ps(rv, _mm512_cvtepi32_ps(idx),
                               _mm512_maskz_loadu_ps(k, x + j));
    a = _mm512_maskz_mov_ps(k, exp_avx512(_mm512_sub_ps(a, s)));
    _mm512_mask_storeu_ps(x + j, k, a);
    acc = _mm512_add_ps(acc, a);
  }
  return _mm512_reduce_add_ps(acc);
}

__attribute__((target("avx2,fma"))) static void gather_add_avx2(
    float *x, const float *t, const int *idx, int n, int base, int stride,
    int step) {
  const __m256i vb = _mm256_set1_epi32(base), vs = _mm256_set1_epi32(stride);
  const __m256i vstep = _mm256_set1_epi32(idx ? step : stride + step);
  __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256i off = _mm256_add_epi32(vb, _mm256_mullo_epi32(lane, vstep));
    if (idx)
      off = _mm256_add_epi32(
          off, _mm256_mullo_epi32(
                   _mm256_loadu_si256((const __m256i *)(idx + j)), vs));
    _mm256_storeu_ps(x + j, _mm256_add_ps(_mm256_loadu_ps(x + j),
                                          _mm256_i32gather_ps(t, off, 4)));
    lane = _mm256_add_epi32(lane, _mm256_set1_epi32(8));
  }
  gather_add_scalar(x + j, t, idx ? idx + j : NULL, n - j,
                    base + j * (idx ? step : stride + step), stride, step);
}

__attribute__((target("avx512f"))) static void gather_add_avx512(
    float *x, const float *t, const int *idx, int n, int base, int stride,
    int step) {
  const __m512i vb = _mm512_set1_epi32(base), vs = _mm512_set1_epi32(stride);
  const __m512i vstep = _mm512_set1_epi32(idx ? step : stride + step);
  __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                   13, 14, 15);
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512i off = _mm512_add_epi32(vb, _mm512_mullo_epi32(lane, vstep));
    if (idx)
      off = _mm512_add_epi32(
          off, _mm512_mullo_epi32(_mm512_loadu_si512(idx + j), vs));
    _mm512_storeu_ps(x + j, _mm512_add_ps(_mm512_loadu_ps(x + j),
                                          _mm512_i32gather_ps(off, t, 4)));
    lane = _mm512_add_epi32(lane, _mm512_set1_epi32(16));
  }
  gather_add_scalar(x + j, t, idx ? idx + j : NULL, n - j,
                    base + j * (idx ? step : stride + step), stride, step);
}

/* dot_rows: the eight partial sums are a ymm's lanes (on the AVX-512 path
** too: sixteen would be another order). Eight keys at a time, so eight fma
** chains run side by side and eight rows stream at once: a 4096 x 512 head
** from memory at 41-47 GB/s, 25-33 with four keys (one core; the panel
** kernel of src/gemm.c reads the same set at 50-57); then four, then one. */
__attribute__((target("avx2,fma"))) static inline float join8(__m256 a) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a),
                              _mm256_extractf128_ps(a, 1)); /* p_l + p_l+4 */
  const __m128 t = _mm_add_ps(h, _mm_movehl_ps(h, h)); /* (0+4)+(2+6), (1+5)+(3+7) */
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

/* nk dot products (nk a constant where inlined, d too for dot_heads):
** y[i ys] = s (q_i . k_i), q_i = q + i qs, k_i = k + i ks, each in
** dot_rows' order. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
dot_keys(float *y, int ys, const float *q, int qs, const float *k, int ks,
         int d, float s, int nk) {
  const int d8 = d / 8 * 8;
  __m256 a[8];
  float r[8];
  int i, c;
#pragma GCC unroll 8
  for (i = 0; i < nk; i++) a[i] = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (c = 0; c < d8; c += 8) {
    const __m256 qc = _mm256_loadu_ps(q + c);
#pragma GCC unroll 8
    for (i = 0; i < nk; i++)
      a[i] = _mm256_fmadd_ps(qs ? _mm256_loadu_ps(q + (size_t)i * qs + c) : qc,
                             _mm256_loadu_ps(k + (size_t)i * ks + c), a[i]);
  }
#pragma GCC unroll 8
  for (i = 0; i < nk; i++) r[i] = join8(a[i]);
  for (c = d8; c < d; c++)
#pragma GCC unroll 8
    for (i = 0; i < nk; i++)
      r[i] = fmaf(q[(size_t)i * qs + c], k[(size_t)i * ks + c], r[i]);
#pragma GCC unroll 8
  for (i = 0; i < nk; i++) y[(size_t)i * ys] = r[i] * s;
}

__attribute__((target("avx2,fma"))) static void dot_rows_avx2(
    float *y, const float *q, const float *k, int ldk, int n, int d, float s) {
  int j = 0;
  for (; j + 8 <= n; j += 8)
    dot_keys(y + j, 1, q, 0, k + (size_t)j * ldk, ldk, d, s, 8);
  for (; j + 4 <= n; j += 4)
    dot_keys(y + j, 1, q, 0, k + (size_t)j * ldk, ldk, d, s, 4);
  for (; j < n; j++) dot_keys(y + j, 1, q, 0, k + (size_t)j * ldk, ldk, d, s, 1);
}

/* axpy_rows: each z[c] its own lane, so any width gives the same bits;
** 32 (AVX2) or 64 (AVX-512) columns stay in registers over all j. */
__attribute__((target("avx2,fma"))) static void axpy_rows_avx2(
    float *z, const float *p, const float *v, int ldv, int n, int d) {
  int c0 = 0, j, c;
  for (; c0 + 32 <= d; c0 += 32) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (j = 0; j < n; j++) {
      const float *vj = v + (size_t)j * ldv + c0;
      const __m256 pj = _mm256_set1_ps(p[j]);
      a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj), a0);
      a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8), a1);
      a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 16), a2);
      a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 24), a3);
    }
    _mm256_storeu_ps(z + c0, a0), _mm256_storeu_ps(z + c0 + 8, a1);
    _mm256_storeu_ps(z + c0 + 16, a2), _mm256_storeu_ps(z + c0 + 24, a3);
  }
  for (c = c0; c < d; c++) z[c] = 0.0f;
  for (j = 0; j < n && c0 < d; j++)
    for (c = c0; c < d; c++) z[c] = fmaf(p[j], v[(size_t)j * ldv + c], z[c]);
}

__attribute__((target("avx512f"))) static void axpy_rows_avx512(
    float *z, const float *p, const float *v, int ldv, int n, int d) {
  int c0 = 0, j;
  for (; c0 + 64 <= d; c0 += 64) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (j = 0; j < n; j++) {
      const float *vj = v + (size_t)j * ldv + c0;
      const __m512 pj = _mm512_set1_ps(p[j]);
      a0 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj), a0);
      a1 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 16), a1);
      a2 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 32), a2);
      a3 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 48), a3);
    }
    _mm512_storeu_ps(z + c0, a0), _mm512_storeu_ps(z + c0 + 16, a1);
    _mm512_storeu_ps(z + c0 + 32, a2), _mm512_storeu_ps(z + c0 + 48, a3);
  }
  if (c0 < d) axpy_rows_avx2(z + c0, p, v + c0, ldv, n, d - c0);
}

/* dot_heads: where a head is 32, 64 or 128 columns, a cache row at a time,
** eight heads side by side (eight fma chains), so the keys are read once
** in order rather than once per head a head's slice apart: 8 layers of a
** 512 x 512 cache of 8 heads of 64, 84 us a token against 103-126 head by
** head; at 1,500 rows (from memory) 514 against 700. Else head by head. */
#define DOT_HEADS(D)                                                         \
  __attribute__((target("avx2,fma"))) static void dot_heads_##D(             \
      float *y, int ldy, const float *q, const float *k, int ldk, int n,     \
      int heads, float s) {                                                  \
    int j, h;                                                                \
    for (j = 0; j < n; j++) {                                                \
      const float *kj = k + (size_t)j * ldk;                                 \
      for (h = 0; h + 8 <= heads; h += 8)                                    \
        dot_keys(y + (size_t)h * ldy + j, ldy, q + h * D, D, kj + h * D, D,  \
                 D, s, 8);                                                   \
      for (; h < heads; h++)                                                 \
        dot_keys(y + (size_t)h * ldy + j, ldy, q + h * D, D, kj + h * D, D,  \
                 D, s, 1);                                                   \
    }                                                                        \
  }
DOT_HEADS(32) DOT_HEADS(64) DOT_HEADS(128)

__attribute__((target("avx2,fma"))) static void dot_heads_avx2(
    float *y, int ldy, const float *q, const float *k, int ldk, int n,
    int heads, int d, float s) {
  int h;
  if (d == 64) dot_heads_64(y, ldy, q, k, ldk, n, heads, s);
  else if (d == 32) dot_heads_32(y, ldy, q, k, ldk, n, heads, s);
  else if (d == 128) dot_heads_128(y, ldy, q, k, ldk, n, heads, s);
  else
    for (h = 0; h < heads; h++)
      dot_rows_avx2(y + (size_t)h * ldy, q + (size_t)h * d, k + (size_t)h * d,
                    ldk, n, d, s);
}

/* axpy_heads: on AVX2 each head's axpy_rows; on AVX-512, where a head is
** 32, 64 or 128 columns, 256 columns (sixteen zmm: 8, 4 or 2 heads) at a
** time over all rows, so the values are read in heads d / 256 passes
** rather than one per head: a 512 x 512 cache of 8 heads of 64 per layer,
** 8 layers from L3, 89 us a token against 162 one head at a time. */
__attribute__((target("avx2,fma"))) static void axpy_heads_avx2(
    float *z, const float *p, int ldp, const float *v, int ldv, int n,
    int heads, int d) {
  int h;
  for (h = 0; h < heads; h++)
    axpy_rows_avx2(z + (size_t)h * d, p + (size_t)h * ldp, v + (size_t)h * d,
                   ldv, n, d);
}

/* 256 columns from head h0, heads of zh zmm (a constant where inlined) */
__attribute__((target("avx512f"), always_inline)) static inline void
axpy_block512(float *z, const float *p, int ldp, const float *v, int ldv,
              int n, int h0, int zh) {
  __m512 a[16];
  const float *ph[8];
  int i, j;
#pragma GCC unroll 16
  for (i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (i = 0; i < 16 / zh; i++) ph[i] = p + (size_t)(h0 + i) * ldp;
  for (j = 0; j < n; j++) {
    const float *vj = v + (size_t)j * ldv;
#pragma GCC unroll 16
    for (i = 0; i < 16; i++)
      a[i] = _mm512_fmadd_ps(_mm512_set1_ps(ph[i / zh][j]),
                             _mm512_loadu_ps(vj + 16 * i), a[i]);
  }
#pragma GCC unroll 16
  for (i = 0; i < 16; i++) _mm512_storeu_ps(z + 16 * i, a[i]);
}

__attribute__((target("avx512f"))) static void axpy_heads_avx512(
    float *z, const float *p, int ldp, const float *v, int ldv, int n,
    int heads, int d) {
  const int per = d == 32 || d == 64 || d == 128 ? 256 / d : 0;
  int h = 0;
  for (; per && h + per <= heads; h += per) {
    float *zb = z + (size_t)h * d;
    const float *vb = v + (size_t)h * d;
    if (d == 64) axpy_block512(zb, p, ldp, vb, ldv, n, h, 4);
    else if (d == 32) axpy_block512(zb, p, ldp, vb, ldv, n, h, 2);
    else axpy_block512(zb, p, ldp, vb, ldv, n, h, 8);
  }
  for (; h < heads; h++)
    axpy_rows_avx512(z + (size_t)h * d, p + (size_t)h * ldp,
                     v + (size_t)h * d, ldv, n, d);
}

static const relattn_vec vec_avx2 = {"avx2", max_avx2, exp_sum_avx2,
                                     scale_avx2, add_avx2,
                                     max_ramp_avx2, exp_sum_ramp_avx2,
                                     gather_add_avx2, dot_rows_avx2,
                                     axpy_rows_avx2, dot_heads_avx2,
                                     axpy_heads_avx2};
static const relattn_vec vec_avx512 = {"avx512", max_avx512, exp_sum_avx512,
                                       scale_avx512, add_avx512,
                                       max_ramp_avx512, exp_sum_ramp_avx512,
                                       gather_add_avx512, dot_rows_avx2,
                                       axpy_rows_avx512, dot_heads_avx2,
                                       axpy_heads_avx512};
#endif

const relattn_vec *relattn_vec_path(const char *name) {
  if (strcmp(name, "scalar") == 0) return &vec_scalar;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    return &vec_avx2;
  if (strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f"))
    return &vec_avx512;
#endif
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
