/*
** test_vecmath.c: src/vecmath.c's products of one query against rows (a
** decoding step's attention over its cache), on fresh random inputs.
**
** 1. dot_rows and axpy_rows give the same bits on every path this CPU runs
**    (avx512, avx2, scalar): their order is defined in vecmath.h, and the
**    scalar path writes it out with fmaf.
** 2. Against float64: |y - ref| <= 1e-5 (1 + sum |terms|) per element.
** Shapes: rows 0-37 (the four-key blocks and their tail), d 1-200 (below,
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
  UNIT_DONE();
}
