/*
** half.c: the safetensors dtypes (F32, F16, BF16) and their conversion to
** float32, which is what the model computes in. U8 is only for the bytes
** of a tokenizer file, never a weight; I8 only for the int8 linear weights
** of a quantized model (src/qgemm.c runs them as they are).
**
** F16 is IEEE 754 binary16 (1 sign, 5 exponent, 10 fraction bits); BF16 is
** the top half of a float32. Both convert to float32 exactly.
*/
#include "relattn.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_F16C 1
#endif

int relattn_dtype_parse(const char *name) {
  if (!name) return -1;
  if (strcmp(name, "F32") == 0) return RELATTN_F32;
  if (strcmp(name, "F16") == 0) return RELATTN_F16;
  if (strcmp(name, "BF16") == 0) return RELATTN_BF16;
  if (strcmp(name, "U8") == 0) return RELATTN_U8;
  if (strcmp(name, "I8") == 0) return RELATTN_I8;
  return -1;
}

const char *relattn_dtype_name(int dtype) {
  switch (dtype) {
    case RELATTN_F32: return "F32";
    case RELATTN_F16: return "F16";
    case RELATTN_BF16: return "BF16";
    case RELATTN_U8: return "U8";
    case RELATTN_I8: return "I8";
    default: return "?";
  }
}

size_t relattn_dtype_size(int dtype) {
  switch (dtype) {
    case RELATTN_F32: return 4;
    case RELATTN_F16:
    case RELATTN_BF16: return 2;
    case RELATTN_U8:
    case RELATTN_I8: return 1;
    default: return 0;
  }
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float relattn_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t frac = h & 0x3ff;
  if (exp == 0x1f) /* inf, nan: keep the payload */
    return bits_f32(sign | 0x7f800000u | (frac << 13));
  if (exp == 0) {
    /* zero or subnormal: frac * 2^-24, exact in float32 */
    float v = (float)frac * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (frac << 13));
}

float relattn_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

static uint16_t load16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}

#ifdef HAVE_F16C
/* vcvtph2ps converts exactly, subnormals included (about 15x the scalar
** loop's speed on random data, where its branches mispredict). */
__attribute__((target("avx,f16c"))) static size_t f16_f16c(float *out,
                                                           const uint8_t *p,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  (const __m128i *)(p + 2 * i))));
  return i;
}

static int have_f16c(void) {
  static int cached = -1; /* a benign race: every thread computes the same */
  unsigned a, b, c, d;
  if (cached < 0)
    /* avx2 (checked with the OS's support for the registers) implies AVX */
    cached = relattn_simd_fma() &&
             __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  return cached;
}
#endif

void relattn_to_f32(float *out, const void *in, int dtype, size_t n) {
  const uint8_t *p = in;
  size_t i = 0;
  switch (dtype) {
    case RELATTN_F32:
      /* little-endian hosts only (as the whole project): a plain copy */
      memcpy(out, in, n * 4);
      break;
    case RELATTN_F16:
#ifdef HAVE_F16C
      if (have_f16c()) i = f16_f16c(out, p, n);
#endif
      for (; i < n; i++) out[i] = relattn_f16_to_f32(load16(p + 2 * i));
      break;
    case RELATTN_BF16:
      for (; i < n; i++) {
        /* the high half of a float32: a shift the compiler vectorizes */
        uint16_t h;
        uint32_t u;
        memcpy(&h, p + 2 * i, 2);
        u = (uint32_t)h << 16;
        memcpy(out + i, &u, 4);
      }
      break;
    case RELATTN_I8:
      for (; i < n; i++) out[i] = (float)(int8_t)p[i];
      break;
  }
}

size_t relattn_find_nonfinite(const void *in, int dtype, size_t n) {
  const uint8_t *p = in;
  size_t i;
  switch (dtype) {
    case RELATTN_F32:
      for (i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, p + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) return i;
      }
      break;
    case RELATTN_F16:
      for (i = 0; i < n; i++)
        if ((load16(p + 2 * i) & 0x7c00) == 0x7c00) return i;
      break;
    case RELATTN_BF16:
      for (i = 0; i < n; i++)
        if ((load16(p + 2 * i) & 0x7f80) == 0x7f80) return i;
      break;
    case RELATTN_I8: /* -128: outside the symmetric range (src/qgemm.c) */
      for (i = 0; i < n; i++)
        if (p[i] == 0x80) return i;
      break;
  }
  return n;
}
