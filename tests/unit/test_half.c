/* test_half.c: src/half.c against a float64 reference built from the
** fields, over every 16-bit pattern. */
#include <math.h>
#include <string.h>

#include "relattn.h"
#include "unit.h"

static double ref_f16(unsigned h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  if (e == 31) v = m ? NAN : INFINITY;
  return s ? -v : v;
}

static double ref_bf16(unsigned h) {
  int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
  double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
  if (e == 255) v = m ? NAN : INFINITY;
  return s ? -v : v;
}

int main(void) {
  unsigned h;
  int bad16 = 0, badbf = 0, nonfinite16 = 0, nonfinitebf = 0;
  uint8_t buf[8];
  float out[4];
  unit_seed();
  for (h = 0; h < 65536; h++) {
    double r = ref_f16(h), got = relattn_f16_to_f32((uint16_t)h);
    uint16_t le = (uint16_t)h;
    if (isnan(r) ? !isnan(got) : (got != r || signbit(got) != signbit(r)))
      bad16++;
    r = ref_bf16(h), got = relattn_bf16_to_f32((uint16_t)h);
    if (isnan(r) ? !isnan(got) : (got != r || signbit(got) != signbit(r)))
      badbf++;
    memcpy(buf, &le, 2);
    nonfinite16 += relattn_find_nonfinite(buf, RELATTN_F16, 1) == 0;
    nonfinitebf += relattn_find_nonfinite(buf, RELATTN_BF16, 1) == 0;
  }
  CHECK(bad16 == 0, "%d F16 patterns wrong", bad16);
  CHECK(badbf == 0, "%d BF16 patterns wrong", badbf);
  CHECK(nonfinite16 == 2048, "F16 non-finite: %d", nonfinite16);
  CHECK(nonfinitebf == 256, "BF16 non-finite: %d", nonfinitebf);

  /* bulk conversion from unaligned little-endian bytes */
  buf[1] = 0x00, buf[2] = 0x3c;        /* 1.0 */
  buf[3] = 0x01, buf[4] = 0x80;        /* -2^-24 */
  relattn_to_f32(out, buf + 1, RELATTN_F16, 2);
  CHECK(out[0] == 1.0f && out[1] == -ldexpf(1, -24), "f16 bulk %g %g", out[0],
        out[1]);
  {
    float f[3] = {1.5f, -0.0f, 3.0f};
    uint8_t raw[13];
    memcpy(raw + 1, f, 12);
    relattn_to_f32(out, raw + 1, RELATTN_F32, 3);
    CHECK(memcmp(out, f, 12) == 0, "f32 copy");
    f[2] = INFINITY;
    CHECK(relattn_find_nonfinite(f, RELATTN_F32, 3) == 2, "f32 inf");
    f[2] = NAN;
    CHECK(relattn_find_nonfinite(f, RELATTN_F32, 3) == 2, "f32 nan");
    f[2] = 3.4e38f;
    CHECK(relattn_find_nonfinite(f, RELATTN_F32, 3) == 3, "f32 max is finite");
  }
  {
    /* the bulk conversion (vectorized where the CPU can) against the
    ** scalar one, every pattern, at an odd offset and length */
    static uint8_t raw[2 * 65536 + 3];
    static float bulk[65536];
    int bad = 0, dt;
    for (dt = RELATTN_F16; dt <= RELATTN_BF16; dt++) {
      for (h = 0; h < 65536; h++) raw[1 + 2 * h] = (uint8_t)h, raw[2 + 2 * h] = (uint8_t)(h >> 8);
      relattn_to_f32(bulk, raw + 1, dt, 65535);
      for (h = 0; h < 65535; h++) {
        float want = dt == RELATTN_F16 ? relattn_f16_to_f32((uint16_t)h)
                                       : relattn_bf16_to_f32((uint16_t)h);
        if (isnan(want) ? !isnan(bulk[h]) : memcmp(&want, &bulk[h], 4) != 0) bad++;
      }
    }
    CHECK(bad == 0, "%d patterns where bulk and scalar conversion differ", bad);
  }
  CHECK(relattn_dtype_parse("BF16") == RELATTN_BF16 &&
            relattn_dtype_parse("bf16") == -1 && relattn_dtype_parse("F64") == -1,
        "parse");
  UNIT_DONE();
}
