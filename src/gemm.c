/*
** gemm.c: the linear layers' product y = x W^T + b on weights kept in panel
** order, with one fixed order of arithmetic on every vector path.
**
** WHY NOT OPENBLAS HERE
** sgemm packs its operands into panels on every call: for y = x W^T over a
** block of 64 to 256 rows that is the whole weight matrix, read from memory
** and rewritten, once per block of every sequence. On relattn_scan over a
** 6-layer width-384 encoder (rows of 50-500 tokens, one thread) that packing
** was 8% of the run. A model's weights do not change while it is cached, so
** they are put in panel order once (relattn_model_prepare) and this kernel
** reads them as they lie. It also fixes the arithmetic: OpenBLAS's order of
** summation is its kernel set's (Prescott, Haswell, SkylakeX...), this one's
** is the definition below on every machine with FMA.
**
** THE ORDER OF ARITHMETIC (the definition every path computes bit for bit)
**   y[r][c] = (accumulate ? y[r][c] : 0) + b[c]       (no b: nothing added)
**   for k = 0 .. in-1:  y[r][c] = fma(x[r][k], W[c][k], y[r][c])
** one rounding per step, k in order; the AVX-512 and AVX2 paths keep each
** y[r][c] in one vector lane and run the same chain (tests/unit/test_gemm.c
** checks them against fmaf()). It does not depend on the number of rows,
** on where a row sits in a tile or on the thread that runs it.
**
** PANEL ORDER
** W (out, in), row-major as nn.Linear keeps it, is cut into panels of
** RELATTN_PANEL output rows (the last one narrower: out % RELATTN_PANEL);
** panel p, width w_p, is stored (in, w_p) row-major at p * RELATTN_PANEL * in:
** element [k][c] is W[p RELATTN_PANEL + c][k]. The size is out * in, so the
** weights are reordered in place; relattn_unpack gives the stored order back.
**
** HOW IT RUNS
** Tiles of MR rows by one panel: MR x 32 accumulators live in registers
** (AVX-512: 12 x 2 zmm; AVX2: 6 x 2 ymm per half panel), each step of k
** loads the panel's row k once and broadcasts x[r][k]. k goes in chunks of
** KC (the accumulators go back to y between chunks, which changes nothing:
** a float stored is the float loaded), so a chunk of the panel (KC x 32
** floats) stays in L1 while the block's rows pass over it. Rows of one tile
** (a decoding step's single row) take k whole: no other tile reuses a chunk,
** and chunking cut a weight's stream into 32 KB pieces, read in two passes
** over every panel, at half the memory's speed (1 x 512 x 2048 from memory:
** 27 GB/s in chunks, 50 whole; the d512 decoder 255-262 tokens a second on
** one thread, 377-380 whole). Measured on this
** loop against OpenBLAS's sgemm with the same bias pass, one thread, weights
** of 6 layers in turn (so from L3 as in a forward pass): 154 x 1536 x 384
** 95 vs 82 GFLOP/s, 154 x 384 x 1536 104 vs 83, 52 x 1536 x 384 88 vs 60.
**
** THE ATTENTION'S PRODUCTS (src/attention.c) take the same tiles:
** relattn_gemm_nt (S = s Q K^T, the tables' P and G) puts its right operand
** in panel order per block with 8 x 8 register transposes and applies the
** scale when the sums are stored; relattn_gemm_nn (O += weights V) reads V
** where it lies, a panel being 32 of its columns with its own row stride.
*/
#include "relattn.h"
#include "vecmath.h"

#include <math.h>
#include <string.h>

#define KC 256 /* steps of k per chunk */

/* Where a tile's accumulators start: y (a later chunk of k, or y += x W^T
** without b), b (the first chunk: 0 + b; 0 without b), y + b. */
enum { INIT_Y, INIT_B, INIT_Y_B };

/* Width of panel p of a weight with out rows. */
static int panel_width(int out, int p) {
  const int left = out - p * RELATTN_PANEL;
  return left < RELATTN_PANEL ? left : RELATTN_PANEL;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* An 8 x 8 block: rows[c][k] (rows ldw apart) to panel[k][c] (wp apart). */
__attribute__((target("avx2"))) static void transpose8(float *panel, int wp,
                                                       const float *rows,
                                                       int ldw) {
  __m256 r0 = _mm256_loadu_ps(rows), r1 = _mm256_loadu_ps(rows + ldw),
         r2 = _mm256_loadu_ps(rows + 2 * (size_t)ldw),
         r3 = _mm256_loadu_ps(rows + 3 * (size_t)ldw),
         r4 = _mm256_loadu_ps(rows + 4 * (size_t)ldw),
         r5 = _mm256_loadu_ps(rows + 5 * (size_t)ldw),
         r6 = _mm256_loadu_ps(rows + 6 * (size_t)ldw),
         r7 = _mm256_loadu_ps(rows + 7 * (size_t)ldw);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
         t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
         t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
         t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  r0 = _mm256_shuffle_ps(t0, t2, 0x44), r1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  r2 = _mm256_shuffle_ps(t1, t3, 0x44), r3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  r4 = _mm256_shuffle_ps(t4, t6, 0x44), r5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  r6 = _mm256_shuffle_ps(t5, t7, 0x44), r7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(panel, _mm256_permute2f128_ps(r0, r4, 0x20));
  _mm256_storeu_ps(panel + wp, _mm256_permute2f128_ps(r1, r5, 0x20));
  _mm256_storeu_ps(panel + 2 * (size_t)wp, _mm256_permute2f128_ps(r2, r6, 0x20));
  _mm256_storeu_ps(panel + 3 * (size_t)wp, _mm256_permute2f128_ps(r3, r7, 0x20));
  _mm256_storeu_ps(panel + 4 * (size_t)wp, _mm256_permute2f128_ps(r0, r4, 0x31));
  _mm256_storeu_ps(panel + 5 * (size_t)wp, _mm256_permute2f128_ps(r1, r5, 0x31));
  _mm256_storeu_ps(panel + 6 * (size_t)wp, _mm256_permute2f128_ps(r2, r6, 0x31));
  _mm256_storeu_ps(panel + 7 * (size_t)wp, _mm256_permute2f128_ps(r3, r7, 0x31));
}
#endif

/* Panel order from rows ldw apart: blocks of 8 x 8 in registers where the
** CPU has AVX2 (a copy: the same floats either way), the rest one by one. */
static void pack_rows(float *dst, const float *w, int ldw, int out, int in) {
  int p, k, c, k8 = 0, c8;
#if defined(__x86_64__) && defined(__GNUC__)
  const int fast = relattn_simd_fma();
#else
  const int fast = 0;
#endif
  for (p = 0; p * RELATTN_PANEL < out; p++) {
    const int wp = panel_width(out, p);
    float *panel = dst + (size_t)p * RELATTN_PANEL * in;
    const float *rows = w + (size_t)p * RELATTN_PANEL * ldw;
    c8 = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (fast) {
      k8 = in & ~7;
      c8 = wp & ~7;
      for (k = 0; k < k8; k += 8)
        for (c = 0; c < c8; c += 8)
          transpose8(panel + (size_t)k * wp + c, wp,
                     rows + (size_t)c * ldw + k, ldw);
      for (k = 0; k < k8; k++) /* the columns past the blocks */
        for (c = c8; c < wp; c++)
          panel[(size_t)k * wp + c] = rows[(size_t)c * ldw + k];
    }
#endif
    for (k = fast ? k8 : 0; k < in; k++) /* the rows past the blocks */
      for (c = 0; c < wp; c++)
        panel[(size_t)k * wp + c] = rows[(size_t)c * ldw + k];
  }
}

void relattn_pack_into(float *dst, const float *w, int out, int in) {
  pack_rows(dst, w, in, out, in);
}

void relattn_unpack(float *dst, const float *packed, int out, int in) {
  int p, k, c;
  for (p = 0; p * RELATTN_PANEL < out; p++) {
    const int wp = panel_width(out, p);
    const float *panel = packed + (size_t)p * RELATTN_PANEL * in;
    float *rows = dst + (size_t)p * RELATTN_PANEL * in;
    for (k = 0; k < in; k++)
      for (c = 0; c < wp; c++)
        rows[(size_t)c * in + k] = panel[(size_t)k * wp + c];
  }
}

int relattn_pack(float *w, int out, int in) {
  const size_t n = (size_t)out * in;
  float *tmp;
  if (n == 0) return RELATTN_OK;
  tmp = relattn_alloc(sizeof(float) * n);
  if (!tmp) return RELATTN_ERR_NOMEM;
  memcpy(tmp, w, sizeof(float) * n);
  relattn_pack_into(w, tmp, out, in);
  relattn_free(tmp);
  return RELATTN_OK;
}

/* y's rows before the products: (accumulate ? y : 0) + b. */
static void start_rows(float *y, int ldy, int rows, int out, const float *b,
                       int accumulate) {
  int r, c;
  for (r = 0; r < rows; r++) {
    float *yr = y + (size_t)r * ldy;
    if (!accumulate) {
      if (b)
        memcpy(yr, b, sizeof(float) * (size_t)out);
      else
        memset(yr, 0, sizeof(float) * (size_t)out);
    } else if (b) {
      for (c = 0; c < out; c++) yr[c] += b[c];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define MR512 12

/* One tile: mr rows (a constant where inlined) by the first cols (up to
** 32) columns of a panel whose rows are ws apart, steps k0 .. k0+kc-1. */
__attribute__((target("avx512f,fma"), always_inline)) static inline void
tile512(float *y, int ldy, const float *x, int ldx, const float *panel, int ws,
        int cols, int k0, int kc, const float *bias, int init, float scale,
        int mr) {
  const __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
  const __mmask16 m1 =
      cols >= 32 ? 0xffff
                 : (cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : 0);
  const float *w = panel + (size_t)k0 * ws, *xk = x + k0;
  __m512 acc[MR512][2];
  int r, k;
  const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps(),
               b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16)
                         : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (r = 0; r < mr; r++) {
    if (init == INIT_B) { /* 0 + b, which is b: the first chunk */
      acc[r][0] = b0;
      acc[r][1] = b1;
      continue;
    }
    acc[r][0] = _mm512_maskz_loadu_ps(m0, y + (size_t)r * ldy);
    acc[r][1] = _mm512_maskz_loadu_ps(m1, y + (size_t)r * ldy + 16);
    if (init == INIT_Y_B) {
      acc[r][0] = _mm512_add_ps(acc[r][0], b0);
      acc[r][1] = _mm512_add_ps(acc[r][1], b1);
    }
  }
  if (cols == RELATTN_PANEL) {
    for (k = 0; k < kc; k++, w += ws, xk++) {
      const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16);
#pragma GCC unroll 12
      for (r = 0; r < mr; r++) {
        const __m512 xb = _mm512_set1_ps(xk[(size_t)r * ldx]);
        acc[r][0] = _mm512_fmadd_ps(xb, w0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(xb, w1, acc[r][1]);
      }
    }
  } else {
    for (k = 0; k < kc; k++, w += ws, xk++) {
      const __m512 w0 = _mm512_maskz_loadu_ps(m0, w),
                   w1 = _mm512_maskz_loadu_ps(m1, w + 16);
#pragma GCC unroll 12
      for (r = 0; r < mr; r++) {
        const __m512 xb = _mm512_set1_ps(xk[(size_t)r * ldx]);
        acc[r][0] = _mm512_fmadd_ps(xb, w0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(xb, w1, acc[r][1]);
      }
    }
  }
  if (scale != 1.0f) {
    const __m512 f = _mm512_set1_ps(scale);
#pragma GCC unroll 12
    for (r = 0; r < mr; r++) {
      acc[r][0] = _mm512_mul_ps(acc[r][0], f);
      acc[r][1] = _mm512_mul_ps(acc[r][1], f);
    }
  }
#pragma GCC unroll 12
  for (r = 0; r < mr; r++) {
    _mm512_mask_storeu_ps(y + (size_t)r * ldy, m0, acc[r][0]);
    _mm512_mask_storeu_ps(y + (size_t)r * ldy + 16, m1, acc[r][1]);
  }
}

/* (y, ldy, x, ldx, panel, its rows' stride, columns, k0, kc, the bias's
** columns or NULL, INIT_*, a factor on the stored sums) */
typedef void (*tile_fn)(float *, int, const float *, int, const float *, int,
                        int, int, int, const float *, int, float);

#define TILE512(R)                                                          \
  __attribute__((target("avx512f,fma"))) static void tile512_##R(           \
      float *y, int ldy, const float *x, int ldx, const float *p, int wp,   \
      int cols, int k0, int kc, const float *b, int init, float f) {        \
    tile512(y, ldy, x, ldx, p, wp, cols, k0, kc, b, init, f, R);            \
  }
TILE512(1) TILE512(2) TILE512(3) TILE512(4) TILE512(5) TILE512(6)
TILE512(7) TILE512(8) TILE512(9) TILE512(10) TILE512(11) TILE512(12)

static const tile_fn tiles512[MR512 + 1] = {
    NULL,        tile512_1, tile512_2, tile512_3,  tile512_4,  tile512_5,
    tile512_6,   tile512_7, tile512_8, tile512_9, tile512_10, tile512_11,
    tile512_12};

#define MR256 6

/* AVX2: a tile is mr rows by the first cols (up to 16) columns of what
** panel points to (a panel's half: its rows stay wp apart). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
tile256(float *y, int ldy, const float *x, int ldx, const float *panel, int wp,
        int cols, int k0, int kc, const float *bias, int init, float scale,
        int mr) {
  __m256i m0, m1;
  const float *w = panel + (size_t)k0 * wp, *xk = x + k0;
  __m256 acc[MR256][2];
  int r, k;
  {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lane);
    m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols - 8), lane);
  }
  const __m256 b0 = bias ? _mm256_maskload_ps(bias, m0) : _mm256_setzero_ps(),
               b1 = bias ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
#pragma GCC unroll 6
  for (r = 0; r < mr; r++) {
    if (init == INIT_B) {
      acc[r][0] = b0;
      acc[r][1] = b1;
      continue;
    }
    acc[r][0] = _mm256_maskload_ps(y + (size_t)r * ldy, m0);
    acc[r][1] = _mm256_maskload_ps(y + (size_t)r * ldy + 8, m1);
    if (init == INIT_Y_B) {
      acc[r][0] = _mm256_add_ps(acc[r][0], b0);
      acc[r][1] = _mm256_add_ps(acc[r][1], b1);
    }
  }
  if (cols == 16) {
    for (k = 0; k < kc; k++, w += wp, xk++) {
      const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
#pragma GCC unroll 6
      for (r = 0; r < mr; r++) {
        const __m256 xb = _mm256_broadcast_ss(xk + (size_t)r * ldx);
        acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
      }
    }
  } else {
    for (k = 0; k < kc; k++, w += wp, xk++) {
      const __m256 w0 = _mm256_maskload_ps(w, m0),
                   w1 = _mm256_maskload_ps(w + 8, m1);
#pragma GCC unroll 6
      for (r = 0; r < mr; r++) {
        const __m256 xb = _mm256_broadcast_ss(xk + (size_t)r * ldx);
        acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
      }
    }
  }
  if (scale != 1.0f) {
    const __m256 f = _mm256_set1_ps(scale);
#pragma GCC unroll 6
    for (r = 0; r < mr; r++) {
      acc[r][0] = _mm256_mul_ps(acc[r][0], f);
      acc[r][1] = _mm256_mul_ps(acc[r][1], f);
    }
  }
#pragma GCC unroll 6
  for (r = 0; r < mr; r++) {
    _mm256_maskstore_ps(y + (size_t)r * ldy, m0, acc[r][0]);
    _mm256_maskstore_ps(y + (size_t)r * ldy + 8, m1, acc[r][1]);
  }
}

#define TILE256(R)                                                          \
  __attribute__((target("avx2,fma"))) static void tile256_##R(              \
      float *y, int ldy, const float *x, int ldx, const float *p, int wp,   \
      int cols, int k0, int kc, const float *b, int init, float f) {        \
    tile256(y, ldy, x, ldx, p, wp, cols, k0, kc, b, init, f, R);            \
  }
TILE256(1) TILE256(2) TILE256(3) TILE256(4) TILE256(5) TILE256(6)

static const tile_fn tiles256[MR256 + 1] = {
    NULL, tile256_1, tile256_2, tile256_3, tile256_4, tile256_5, tile256_6};
#endif

/* Where panel p of the right operand is and how far apart its rows are:
** in panel order (wp: panels of RELATTN_PANEL rows of W, each (in, width))
** or a row-major (in, out) matrix B with rows ldb apart (panel p is its
** columns from p RELATTN_PANEL on), when ldb > 0. */
typedef struct panels {
  const float *base;
  int in, out, ldb;
  int packed_out; /* in panel order: the out it was packed with (>= out) */
} panels;

static const float *panel_at(const panels *P, int p, int *stride) {
  if (P->ldb > 0) {
    *stride = P->ldb;
    return P->base + (size_t)p * RELATTN_PANEL;
  }
  *stride = panel_width(P->packed_out, p);
  return P->base + (size_t)p * RELATTN_PANEL * P->in;
}

/* The scalar form of the definition (fmaf): for CPUs without FMA hardware
** only through tests; the forward pass does not pack for them. */
static void run_scalar(float *y, int ldy, const float *x, int ldx, int rows,
                       const panels *P, float scale) {
  int r, p, k, c, ws;
  for (p = 0; p * RELATTN_PANEL < P->out; p++) {
    const int w = panel_width(P->out, p);
    const float *panel = panel_at(P, p, &ws);
    for (r = 0; r < rows; r++) {
      float *yr = y + (size_t)r * ldy + p * RELATTN_PANEL;
      const float *xr = x + (size_t)r * ldx;
      for (c = 0; c < w; c++) {
        float acc = yr[c];
        for (k = 0; k < P->in; k++)
          acc = fmaf(xr[k], panel[(size_t)k * ws + c], acc);
        yr[c] = scale != 1.0f ? acc * scale : acc;
      }
    }
  }
}

/* The paths are vecmath's, and run where its do. */
int relattn_gemm_path_ok(const char *path) {
  return relattn_vec_path(path) != NULL;
}

/* y = (accumulate ? y : 0) + b + x B over the panels, on a path; times
** scale at the end (the products alone: with neither b nor accumulate). */
static void run(const char *path, float *y, int ldy, const float *x, int ldx,
                int rows, const panels *P, const float *b, int accumulate,
                float scale) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (strcmp(path, "avx512") == 0 || strcmp(path, "avx2") == 0) {
    const int wide = path[3] == '5';
    const int mr_max = wide ? MR512 : MR256, step = wide ? RELATTN_PANEL : 16;
    const tile_fn *tiles = wide ? tiles512 : tiles256;
    /* rows of one tile: k whole (above) */
    const int KCR = rows <= mr_max ? P->in : KC;
    int k0, p, r0, c0, ws;
    for (k0 = 0; k0 < P->in; k0 += KCR) {
      const int kc = P->in - k0 < KCR ? P->in - k0 : KCR;
      const int init = k0 > 0 ? INIT_Y
                       : !accumulate ? INIT_B
                       : b          ? INIT_Y_B
                                    : INIT_Y;
      for (p = 0; p * RELATTN_PANEL < P->out; p++) {
        const int w = panel_width(P->out, p);
        const float *panel = panel_at(P, p, &ws);
        /* AVX2 takes a panel in halves of 16 columns */
        for (c0 = 0; c0 < w; c0 += step)
          for (r0 = 0; r0 < rows; r0 += mr_max) {
            const int mr = rows - r0 < mr_max ? rows - r0 : mr_max;
            tiles[mr](y + (size_t)r0 * ldy + p * RELATTN_PANEL + c0, ldy,
                      x + (size_t)r0 * ldx, ldx, panel + c0, ws,
                      w - c0 < step ? w - c0 : step, k0, kc,
                      b ? b + p * RELATTN_PANEL + c0 : NULL, init,
                      k0 + kc == P->in ? scale : 1.0f);
          }
      }
    }
    return;
  }
#endif
  start_rows(y, ldy, rows, P->out, b, accumulate);
  run_scalar(y, ldy, x, ldx, rows, P, scale);
}

void relattn_gemm_on(const char *path, float *y, int ldy, const float *x,
                     int ldx, int rows, int in, int out, const float *wp,
                     const float *b, int accumulate) {
  panels P;
  if (rows <= 0 || out <= 0) return;
  if (in <= 0) { /* no products: the start alone */
    start_rows(y, ldy, rows, out, b, accumulate);
    return;
  }
  P.base = wp, P.in = in, P.out = P.packed_out = out, P.ldb = 0;
  run(path, y, ldy, x, ldx, rows, &P, b, accumulate, 1.0f);
}

void relattn_gemm_nn(float *y, int ldy, const float *x, int ldx, int rows,
                     int in, int out, const float *b, int ldb) {
  panels P;
  if (rows <= 0 || out <= 0 || in <= 0) return;
  P.base = b, P.in = in, P.out = P.packed_out = out, P.ldb = ldb;
  run(relattn_simd_path(), y, ldy, x, ldx, rows, &P, NULL, 1, 1.0f);
}

void relattn_gemm_nt(float *y, int ldy, const float *x, int ldx, int rows,
                     int in, int out, float alpha, const float *b, int ldb,
                     float *pack, int packed) {
  panels P;
  if (rows <= 0 || out <= 0 || packed < out) return;
  if (b) pack_rows(pack, b, ldb, packed, in);
  if (in <= 0) {
    start_rows(y, ldy, rows, out, NULL, 0);
    return;
  }
  P.base = pack, P.in = in, P.out = out, P.packed_out = packed, P.ldb = 0;
  run(relattn_simd_path(), y, ldy, x, ldx, rows, &P, NULL, 0, alpha);
}

void relattn_gemm(float *y, int ldy, const float *x, int ldx, int rows, int in,
                  int out, const float *wp, const float *b, int accumulate) {
  relattn_gemm_on(relattn_simd_path(), y, ldy, x, ldx, rows, in, out, wp, b,
                  accumulate);
}
