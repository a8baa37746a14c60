/*
** activate.c: the FFN's activations on floats, in place: GELU (erf form),
** GELU (tanh form), ReLU, each on AVX-512 and AVX2 with the same bits, and
** on plain C where there is no FMA (src/forward.c calls them).
*/
#include "relattn.h"
#include "fwd.h"

#include <math.h>
#include <string.h>

/* GELU, the exact form: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), with erf
** from Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7):
**   1 - erf(z) = t (a1 + t (a2 + ... + t a5)) exp(-z^2),  t = 1 / (1 + p z)
** so Phi(x) = 1 - h for x >= 0 and h for x < 0, h = tail / 2 at z = |x|/sqrt 2.
** libm's erff costs ~11 ns an element here, as much as a third of the
** FFN's GEMM time; this form vectorizes (AVX2 below). Absolute error of
** GELU(x) stays under 5e-7 |x|. */
#define GELU_P 0.3275911f
#define GELU_A1 0.254829592f
#define GELU_A2 -0.284496736f
#define GELU_A3 1.421413741f
#define GELU_A4 -1.453152027f
#define GELU_A5 1.061405429f
#define GELU_ZMAX 9.3f /* exp(-z^2) underflows past it */

static float gelu1(float x) {
  float z = fabsf(x) * 0.70710678118654752f;
  float t, tail;
  if (z > GELU_ZMAX) z = GELU_ZMAX;
  t = 1.0f / (1.0f + GELU_P * z);
  tail = t * (GELU_A1 + t * (GELU_A2 + t * (GELU_A3 + t * (GELU_A4 + t * GELU_A5)))) *
         expf(-z * z);
  return x * (x >= 0 ? 1.0f - 0.5f * tail : 0.5f * tail);
}

/* GELU, the tanh form (HF's gelu_new, gelu_pytorch_tanh):
**   0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
** the right side being the same number without tanh (1 + tanh u = 2 /
** (1 + exp(-2u))). -2u is clamped to [-TANH_TMAX, TANH_TMAX]: past it the
** result is x or 0 to float32's precision, and exp stays finite. */
#define TANH_C1 -1.5957691216057308f /* -2 sqrt(2/pi) */
#define TANH_C3 0.044715f
#define TANH_TMAX 80.0f

static float gelu_tanh1(float x) {
  float t = TANH_C1 * x * (1.0f + TANH_C3 * x * x);
  if (t > TANH_TMAX) t = TANH_TMAX;
  if (t < -TANH_TMAX) t = -TANH_TMAX;
  return x / (1.0f + expf(t));
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* exp(y) for y in [-87, 87]: y = k ln2 + r, |r| <= ln2 / 2, ln2 split in
** two (Cody & Waite), Taylor to r^6 (relative error ~1e-7), times 2^k
** made from its exponent bits. */
__attribute__((target("avx2,fma"))) static inline __m256 exp_avx2(__m256 y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 k, r, e, scale;
  k = _mm256_round_ps(_mm256_mul_ps(y, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), y);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  e = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 720), _mm256_set1_ps(1.0f / 120));
  e = _mm256_fmadd_ps(r, e, _mm256_set1_ps(1.0f / 24));
  e = _mm256_fmadd_ps(r, e, _mm256_set1_ps(1.0f / 6));
  e = _mm256_fmadd_ps(r, e, _mm256_set1_ps(0.5f));
  e = _mm256_fmadd_ps(r, e, one);
  e = _mm256_fmadd_ps(r, e, one);
  scale = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(e, scale);
}

__attribute__((target("avx2,fma"))) static size_t gelu_tanh_avx2(float *x,
                                                                  size_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), tmax = _mm256_set1_ps(TANH_TMAX);
  size_t i;
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i), t;
    t = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(TANH_C3), v), v, one);
    t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(TANH_C1), v), t);
    t = _mm256_max_ps(_mm256_min_ps(t, tmax),
                      _mm256_sub_ps(_mm256_setzero_ps(), tmax));
    _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, exp_avx2(t))));
  }
  return i;
}

/* ReLU, 8 at a time: x where x > 0, else +0 (NaN too), the scalar loop's
** bits. The scalar loop compiles to a branch that random signs mispredict:
** a fifth of relattn's time on the bench's T5 encoder (perf, one thread). */
__attribute__((target("avx2"))) static size_t relu_avx2(float *x, size_t n) {
  const __m256 zero = _mm256_setzero_ps();
  size_t i;
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(x + i,
                     _mm256_and_ps(v, _mm256_cmp_ps(v, zero, _CMP_GT_OQ)));
  }
  return i;
}

__attribute__((target("avx2,fma"))) static size_t gelu_avx2(float *x,
                                                             size_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  const __m256 half = _mm256_set1_ps(0.5f);
  size_t i;
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i), z, t, p, y, h;
    z = _mm256_mul_ps(_mm256_andnot_ps(sign, v),
                      _mm256_set1_ps(0.70710678118654752f));
    z = _mm256_min_ps(z, _mm256_set1_ps(GELU_ZMAX));
    t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(GELU_P), z, one));
    p = _mm256_fmadd_ps(t, _mm256_set1_ps(GELU_A5), _mm256_set1_ps(GELU_A4));
    p = _mm256_fmadd_ps(t, p, _mm256_set1_ps(GELU_A3));
    p = _mm256_fmadd_ps(t, p, _mm256_set1_ps(GELU_A2));
    p = _mm256_fmadd_ps(t, p, _mm256_set1_ps(GELU_A1));
    p = _mm256_mul_ps(t, p);
    /* exp(y), y = -z^2 in [-86.5, 0] */
    y = _mm256_mul_ps(_mm256_xor_ps(z, sign), z);
    h = _mm256_mul_ps(_mm256_mul_ps(half, p), exp_avx2(y));
    /* Phi = 0.5 + copysign(0.5 - h, x) */
    h = _mm256_or_ps(_mm256_sub_ps(half, h), _mm256_and_ps(sign, v));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(v, _mm256_add_ps(half, h)));
  }
  return i;
}

/* The AVX-512 forms: the AVX2 ones' operations, one for one, 16 at a time
** (each correctly rounded or exact, so the same bits; tests/unit/
** test_activate.c compares the two paths). The logic ops are integer ones:
** AVX-512F has no float and/or/xor. */
#define AS_I(v) _mm512_castps_si512(v)
#define AS_F(v) _mm512_castsi512_ps(v)

__attribute__((target("avx512f"))) static inline __m512 exp_avx512(__m512 y) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 k, r, e, scale;
  k = _mm512_roundscale_ps(_mm512_mul_ps(y, _mm512_set1_ps(1.44269504088896341f)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), y);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  e = _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 720), _mm512_set1_ps(1.0f / 120));
  e = _mm512_fmadd_ps(r, e, _mm512_set1_ps(1.0f / 24));
  e = _mm512_fmadd_ps(r, e, _mm512_set1_ps(1.0f / 6));
  e = _mm512_fmadd_ps(r, e, _mm512_set1_ps(0.5f));
  e = _mm512_fmadd_ps(r, e, one);
  e = _mm512_fmadd_ps(r, e, one);
  scale = AS_F(_mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23));
  return _mm512_mul_ps(e, scale);
}

__attribute__((target("avx512f"))) static size_t gelu_tanh_avx512(float *x,
                                                                  size_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), tmax = _mm512_set1_ps(TANH_TMAX);
  size_t i;
  for (i = 0; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i), t;
    t = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(TANH_C3), v), v, one);
    t = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(TANH_C1), v), t);
    t = _mm512_max_ps(_mm512_min_ps(t, tmax),
                      _mm512_sub_ps(_mm512_setzero_ps(), tmax));
    _mm512_storeu_ps(x + i,
                     _mm512_div_ps(v, _mm512_add_ps(one, exp_avx512(t))));
  }
  return i;
}

__attribute__((target("avx512f"))) static size_t gelu_avx512(float *x,
                                                             size_t n) {
  const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
  const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
  size_t i;
  for (i = 0; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i), z, t, p, y, h;
    z = _mm512_mul_ps(AS_F(_mm512_andnot_si512(sign, AS_I(v))),
                      _mm512_set1_ps(0.70710678118654752f));
    z = _mm512_min_ps(z, _mm512_set1_ps(GELU_ZMAX));
    t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(GELU_P), z, one));
    p = _mm512_fmadd_ps(t, _mm512_set1_ps(GELU_A5), _mm512_set1_ps(GELU_A4));
    p = _mm512_fmadd_ps(t, p, _mm512_set1_ps(GELU_A3));
    p = _mm512_fmadd_ps(t, p, _mm512_set1_ps(GELU_A2));
    p = _mm512_fmadd_ps(t, p, _mm512_set1_ps(GELU_A1));
    p = _mm512_mul_ps(t, p);
    y = _mm512_mul_ps(AS_F(_mm512_xor_si512(AS_I(z), sign)), z);
    h = _mm512_mul_ps(_mm512_mul_ps(half, p), exp_avx512(y));
    h = AS_F(_mm512_or_si512(AS_I(_mm512_sub_ps(half, h)),
                             _mm512_and_si512(sign, AS_I(v))));
    _mm512_storeu_ps(x + i, _mm512_mul_ps(v, _mm512_add_ps(half, h)));
  }
  return i;
}

#undef AS_I
#undef AS_F
#endif

void relattn_fwd_activate_on(const char *path, float *x, size_t count,
                             int activation) {
  size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  const int wide = strcmp(path, "avx512") == 0;
  const int fma = wide || strcmp(path, "avx2") == 0;
#endif
  if (activation == RELATTN_RELU) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (fma) i = relu_avx2(x, count);
#endif
    for (; i < count; i++) x[i] = x[i] > 0 ? x[i] : 0;
    return;
  }
  if (activation == RELATTN_GELU_TANH) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (wide) i = gelu_tanh_avx512(x, count);
    if (fma) i += gelu_tanh_avx2(x + i, count - i);
#endif
    for (; i < count; i++) x[i] = gelu_tanh1(x[i]);
    return;
  }
#if defined(__x86_64__) && defined(__GNUC__)
  if (wide) i = gelu_avx512(x, count);
  if (fma) i += gelu_avx2(x + i, count - i);
#endif
  for (; i < count; i++) x[i] = gelu1(x[i]);
}

void relattn_fwd_activate(float *x, size_t count, int activation) {
  relattn_fwd_activate_on(relattn_simd_path(), x, count, activation);
}
