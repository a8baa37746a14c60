/*
** sha256.c: SHA-256 (FIPS 180-4), for relattn_model.sha256: a fingerprint
** of the imported tensors, so a result can name the exact weights it used.
**
** Import hashes every byte of a model, so the block function has two forms:
** the portable one (about 80 MB/s here) and one on the x86 SHA extensions
** (Intel's "SHA extensions" white paper, 2013), chosen at run time by cpuid.
*/
#include "relattn.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_SHA_NI 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void block(uint32_t h[8], const uint8_t *p) {
  uint32_t w[64], a, b, c, d, e, f, g, k, t1, t2;
  int i;
  for (i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (i = 16; i < 64; i++) {
    uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6],
  k = h[7];
  for (i = 0; i < 64; i++) {
    t1 = k + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) +
         K[i] + w[i];
    t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g,
      h[7] += k;
}

#ifdef HAVE_SHA_NI
/* n blocks of 64 bytes. The state is kept as ABEF and CDGH, the order the
** sha256rnds2 instruction works in; each step does 4 rounds (two of 2). */
__attribute__((target("sha,ssse3,sse4.1"))) static void blocks_ni(
    uint32_t h[8], const uint8_t *p, size_t n) {
  const __m128i bswap =
      _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i s0, s1, t, abef, cdgh, m[4], k;
  int g;
  t = _mm_loadu_si128((const __m128i *)&h[0]);  /* DCBA */
  s1 = _mm_loadu_si128((const __m128i *)&h[4]); /* HGFE */
  t = _mm_shuffle_epi32(t, 0xB1);               /* CDAB */
  s1 = _mm_shuffle_epi32(s1, 0x1B);             /* EFGH */
  s0 = _mm_alignr_epi8(t, s1, 8);               /* ABEF */
  s1 = _mm_blend_epi16(s1, t, 0xF0);            /* CDGH */
  for (; n > 0; n--, p += 64) {
    abef = s0, cdgh = s1;
#pragma GCC unroll 16 /* keeps m[] in registers */
    for (g = 0; g < 16; g++) {
      __m128i *cur = &m[g & 3];
      if (g < 4)
        *cur = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)),
                                bswap);
      k = _mm_add_epi32(*cur, _mm_loadu_si128((const __m128i *)&K[4 * g]));
      s1 = _mm_sha256rnds2_epu32(s1, s0, k);
      if (g >= 3 && g <= 14) {
        /* W[4g+4..4g+7] from the words 16, 15, 7 and 2 before them */
        __m128i *next = &m[(g + 1) & 3];
        t = _mm_alignr_epi8(*cur, m[(g + 3) & 3], 4);
        *next = _mm_add_epi32(*next, t);
        *next = _mm_sha256msg2_epu32(*next, *cur);
      }
      k = _mm_shuffle_epi32(k, 0x0E);
      s0 = _mm_sha256rnds2_epu32(s0, s1, k);
      if (g >= 1 && g <= 12) {
        __m128i *prev = &m[(g + 3) & 3];
        *prev = _mm_sha256msg1_epu32(*prev, *cur);
      }
    }
    s0 = _mm_add_epi32(s0, abef);
    s1 = _mm_add_epi32(s1, cdgh);
  }
  t = _mm_shuffle_epi32(s0, 0x1B);    /* FEBA */
  s1 = _mm_shuffle_epi32(s1, 0xB1);   /* DCHG */
  s0 = _mm_blend_epi16(t, s1, 0xF0);  /* DCBA */
  s1 = _mm_alignr_epi8(s1, t, 8);     /* HGFE */
  _mm_storeu_si128((__m128i *)&h[0], s0);
  _mm_storeu_si128((__m128i *)&h[4], s1);
}

static int force_portable;

static int have_sha_ni(void) {
  static int cached = -1; /* a benign race: every thread computes the same */
  unsigned a, b, c, d;
  if (cached < 0) {
    int ok = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSSE3) &&
             (c & bit_SSE4_1) && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
             (b & (1u << 29)) /* SHA */;
    cached = ok;
  }
  return cached && !force_portable;
}
#endif

void relattn_sha256_set_portable(int on) {
#ifdef HAVE_SHA_NI
  force_portable = on;
#else
  (void)on;
#endif
}

int relattn_sha256_accelerated(void) {
#ifdef HAVE_SHA_NI
  return have_sha_ni();
#else
  return 0;
#endif
}

/* n blocks of 64 bytes */
static void blocks(uint32_t h[8], const uint8_t *p, size_t n) {
#ifdef HAVE_SHA_NI
  if (have_sha_ni()) {
    blocks_ni(h, p, n);
    return;
  }
#endif
  for (; n > 0; n--, p += 64) block(h, p);
}

void relattn_sha256_init(relattn_sha256 *s) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                 0xa54ff53a, 0x510e527f, 0x9b05688c,
                                 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, h0, sizeof h0);
  s->len = 0;
  s->nbuf = 0;
}

void relattn_sha256_update(relattn_sha256 *s, const void *data, size_t n) {
  const uint8_t *p = data;
  s->len += n;
  if (s->nbuf) {
    size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
    memcpy(s->buf + s->nbuf, p, take);
    s->nbuf += take, p += take, n -= take;
    if (s->nbuf < 64) return;
    blocks(s->h, s->buf, 1);
    s->nbuf = 0;
  }
  blocks(s->h, p, n / 64);
  p += n / 64 * 64, n %= 64;
  memcpy(s->buf, p, n);
  s->nbuf = n;
}

void relattn_sha256_hex(relattn_sha256 *s, char out[65]) {
  uint64_t bits = s->len * 8;
  uint8_t pad[72] = {0x80};
  size_t npad = (s->nbuf < 56 ? 56 : 120) - s->nbuf;
  int i;
  for (i = 0; i < 8; i++) pad[npad + i] = (uint8_t)(bits >> (56 - 8 * i));
  relattn_sha256_update(s, pad, npad + 8);
  for (i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", s->h[i]);
}
