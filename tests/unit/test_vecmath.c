/*
** test_vecmath.c: src/vecmath.c's products of one query against rows (a
** decoding step's attention over its cache), on fresh random inputs.
**
** 1. dot_rows and axpy_rows give the same bits on every path this CPU runs
**    (avx512, avx2, scalar): their order is defined in vecmath.h, and the
**    scalar path writes it out with fmaf.
** 2. Against float64: |y - ref| <= 1e-5 (1 + sum |terms|) per element.
** 3. dot_heads and axpy_heads (every head of a cache row at once) equal
**    dot_rows and axpy_rows head by head, bit for bit, on every path:
**    heads of 32, 64 and 128 columns (the one-pass kernels: eight heads
**    side by side, AVX-512's 256-column blocks, with heads left over) and
**    of other widths, rows of scores wider than n.
** Shapes: rows 0-37 (the eight- and four-key blocks and their tail), d 1-200 (below,
** at and past the eight lanes, the 32 and 64 columns held in registers),
** row strides wider than d.
*/
#include <math.h>
#include <string.h>

#include "relattn.h"
#include "unit.h"
#include "vecmath.h"

static float rnd(void) { return (float)unit_uniform(); } /* [-1, 1) */

int main(void) {
  static const char *const paths[] = {"avx512", "avx2", "scalar"};
  static const int ds[] = {1, 3, 7, 8, 9, 16, 31, 32, 33, 63, 64, 65, 100, 128, 200};
  enum { NMAX = 37, DMAX = 200, PAD = 5 };
  static float q[DMAX], k[NMAX * (DMAX + PAD)], p[NMAX];
  static float y[3][NMAX], z[3][DMAX];
  int di, n, j, c, a;
  unit_seed();
  for (di = 0; di < (int)(sizeof ds / sizeof *ds); di++)
    for (n = 0; n <= NMAX; n += n < 9 ? 1 : 7) {
      const int d = ds[di], ld = d + (int)(unit_next() % PAD);
      const float s = 0.625f + 0.5f * (float)unit_uniform(); /* [0.125, 1.125) */
      int first = -1;
      for (c = 0; c < d; c++) q[c] = rnd();
      for (j = 0; j < n * ld; j++) k[j] = rnd();
      for (j = 0; j < n; j++) p[j] = 0.5f + 0.5f * (float)unit_uniform();
      for (a = 0; a < 3; a++) {
        const relattn_vec *v = relattn_vec_path(paths[a]);
        if (!v) continue;
        v->dot_rows(y[a], q, k, ld, n, d, s);
        v->axpy_rows(z[a], p, k, ld, n, d);
        for (j = 0; j < n; j++) {
          double want = 0, mag = 0;
          for (c = 0; c < d; c++) {
            want += (double)q[c] * k[(size_t)j * ld + c];
            mag += fabs((double)q[c] * k[(size_t)j * ld + c]);
          }
          CHECK(fabs(y[a][j] - s * want) <= 1e-5 * (1 + s * mag),
                "dot_rows %s d=%d n=%d row %d: %.9g, float64 %.9g", paths[a],
                d, n, j, y[a][j], s * want);
        }
        for (c = 0; c < d; c++) {
          double want = 0, mag = 0;
          for (j = 0; j < n; j++) {
            want += (double)p[j] * k[(size_t)j * ld + c];
            mag += fabs((double)p[j] * k[(size_t)j * ld + c]);
          }
          CHECK(fabs(z[a][c] - want) <= 1e-5 * (1 + mag),
                "axpy_rows %s d=%d n=%d column %d: %.9g, float64 %.9g",
                paths[a], d, n, c, z[a][c], want);
        }
        if (first < 0) {
          first = a;
          continue;
        }
        CHECK(memcmp(y[a], y[first], sizeof(float) * (size_t)n) == 0,
              "dot_rows d=%d n=%d: %s and %s differ", d, n, paths[a],
              paths[first]);
        CHECK(memcmp(z[a], z[first], sizeof(float) * (size_t)d) == 0,
              "axpy_rows d=%d n=%d: %s and %s differ", d, n, paths[a],
              paths[first]);
      }
    }
  /* 3. axpy_heads against axpy_rows head by head */
  {
    static const int dhs[] = {1, 8, 16, 24, 32, 48, 64, 96, 128};
    static const int hss[] = {1, 2, 3, 4, 5, 8, 9, 12};
    enum { HMAX = 12, DHMAX = 128, N2 = 21, LDP = N2 + 3 };
    static float v[N2 * (HMAX * DHMAX + PAD)], w[HMAX * (LDP + DHMAX)];
    static float za[HMAX * DHMAX], zb[HMAX * DHMAX];
    int hi, hs;
    for (di = 0; di < (int)(sizeof dhs / sizeof *dhs); di++)
      for (hi = 0; hi < (int)(sizeof hss / sizeof *hss); hi++)
        for (n = 0; n <= N2; n += 7) {
          const int dh = dhs[di], H = hss[hi];
          const int ld = H * dh + (int)(unit_next() % PAD);
          for (j = 0; j < n * ld; j++) v[j] = rnd();
          for (j = 0; j < H * (LDP + DHMAX); j++)
            w[j] = 0.5f + 0.5f * (float)unit_uniform();
          for (a = 0; a < 3; a++) {
            const relattn_vec *vp = relattn_vec_path(paths[a]);
            if (!vp) continue;
            memset(za, 0xff, sizeof za);
            /* dot_heads, the weights' rows taken as the queries */
            vp->dot_heads(za, LDP, w, v, ld, n, H, dh, 0.375f);
            for (hs = 0; hs < H; hs++)
              vp->dot_rows(zb + (size_t)hs * LDP, w + (size_t)hs * dh,
                           v + (size_t)hs * dh, ld, n, dh, 0.375f);
            for (hs = 0; hs < H; hs++)
              CHECK(memcmp(za + (size_t)hs * LDP, zb + (size_t)hs * LDP,
                           sizeof(float) * (size_t)n) == 0,
                    "dot_heads %s heads=%d d=%d n=%d head %d: not dot_rows' "
                    "bits", paths[a], H, dh, n, hs);
            memset(za, 0xff, sizeof za);
            vp->axpy_heads(za, w, LDP, v, ld, n, H, dh);
            for (hs = 0; hs < H; hs++)
              vp->axpy_rows(zb + (size_t)hs * dh, w + (size_t)hs * LDP,
                            v + (size_t)hs * dh, ld, n, dh);
            CHECK(memcmp(za, zb, sizeof(float) * (size_t)H * dh) == 0,
                  "axpy_heads %s heads=%d d=%d n=%d: not axpy_rows' bits",
                  paths[a], H, dh, n);
          }
        }
  }
  UNIT_DONE();
}
