/*
** test_attention.c: the blocked relative-attention kernel against a naive
** float64 reference (every score materialized: allowed in tests only), on
** fresh random inputs. Tolerance: ||out - ref|| / ||ref|| <= 1e-5.
**
** Covers n = 1, n < k, n = k, n >> k, n not a multiple of the block sizes,
** d_head not a multiple of 8, 1 to 8 heads, shared and per-head tables, each
** relative term alone, both, neither, k = 0, causal and not, padded rows
** (ld > heads*d_head), small blocks (many far/band blocks at small n), and
** bitwise equality across thread counts. Also relattn_attention_map.
*/
#include <string.h>

#include "relattn.h"
#include "unit.h"
#include "vecmath.h" /* src/, internal */

#define TOL 1e-5

typedef struct tcase {
  int n, heads, d, clip, causal, per_head, use_k, use_v, pad;
} tcase;

typedef struct tdata {
  relattn_attn a;
  float *q, *k, *v, *rk, *rv, *out;
} tdata;

static float *rand_floats(size_t n, double scale) {
  float *p = relattn_alloc(sizeof(float) * (n ? n : 1));
  size_t i;
  for (i = 0; i < n; i++) p[i] = (float)(unit_uniform() * scale);
  return p;
}

static void make_data(const tcase *c, tdata *t) {
  const int w = c->heads * c->d, ld = w + c->pad;
  const size_t rows = (size_t)(c->per_head ? c->heads : 1) * (2 * c->clip + 1);
  memset(t, 0, sizeof *t);
  /* Large enough that the softmax is far from uniform and the relative
  ** terms move the result well beyond the tolerance. */
  t->q = rand_floats((size_t)c->n * ld, 2.0);
  t->k = rand_floats((size_t)c->n * ld, 2.0);
  t->v = rand_floats((size_t)c->n * ld, 1.0);
  t->rk = c->use_k ? rand_floats(rows * c->d, 2.0) : NULL;
  t->rv = c->use_v ? rand_floats(rows * c->d, 1.0) : NULL;
  t->out = rand_floats((size_t)c->n * ld, 1.0); /* garbage: all overwritten */
  t->a.n = c->n;
  t->a.heads = c->heads;
  t->a.d_head = c->d;
  t->a.clip = c->clip;
  t->a.causal = c->causal;
  t->a.per_head = c->per_head;
  t->a.q = t->q; t->a.ldq = ld;
  t->a.k = t->k; t->a.ldk = ld;
  t->a.v = t->v; t->a.ldv = ld;
  t->a.rel_k = t->rk;
  t->a.rel_v = t->rv;
  t->a.out = t->out; t->a.ldo = ld;
}

static void free_data(tdata *t) {
  relattn_free(t->q); relattn_free(t->k); relattn_free(t->v);
  relattn_free(t->rk); relattn_free(t->rv); relattn_free(t->out);
}

static int rel_row(int i, int j, int k) {
  int r = j - i;
  return (r < -k ? -k : (r > k ? k : r)) + k;
}

/* Softmax weights of (h, i) in double: w (n). */
static void ref_weights(const relattn_attn *a, int h, int i, double *w) {
  const int d = a->d_head, R = 2 * a->clip + 1;
  const float *q = a->q + (size_t)i * a->ldq + (size_t)h * d;
  const float *rk = a->rel_k ? a->rel_k + (a->per_head ? (size_t)h * R * d : 0) : NULL;
  double s = 1.0 / sqrt((double)d), mx = -INFINITY, sum = 0;
  int j, c;
  for (j = 0; j < a->n; j++) {
    const float *kj = a->k + (size_t)j * a->ldk + (size_t)h * d;
    const int r = rel_row(i, j, a->clip);
    double e = 0;
    if (a->causal && j > i) {
      w[j] = -INFINITY;
      continue;
    }
    for (c = 0; c < d; c++)
      e += (double)q[c] * ((double)kj[c] + (rk ? (double)rk[(size_t)r * d + c] : 0.0));
    w[j] = s * e;
    if (w[j] > mx) mx = w[j];
  }
  for (j = 0; j < a->n; j++) {
    w[j] = exp(w[j] - mx);
    sum += w[j];
  }
  for (j = 0; j < a->n; j++) w[j] /= sum;
}

/* ||out - ref|| / ||ref|| over every head and row. */
static double ref_error(const relattn_attn *a) {
  const int d = a->d_head, R = 2 * a->clip + 1;
  double *w = malloc(sizeof(double) * a->n), *z = malloc(sizeof(double) * d);
  double num = 0, den = 0;
  int h, i, j, c;
  for (h = 0; h < a->heads; h++) {
    const float *rv = a->rel_v ? a->rel_v + (a->per_head ? (size_t)h * R * d : 0) : NULL;
    for (i = 0; i < a->n; i++) {
      ref_weights(a, h, i, w);
      for (c = 0; c < d; c++) z[c] = 0;
      for (j = 0; j < a->n; j++) {
        const float *vj = a->v + (size_t)j * a->ldv + (size_t)h * d;
        const int r = rel_row(i, j, a->clip);
        for (c = 0; c < d; c++)
          z[c] += w[j] * ((double)vj[c] + (rv ? (double)rv[(size_t)r * d + c] : 0.0));
      }
      for (c = 0; c < d; c++) {
        double o = a->out[(size_t)i * a->ldo + (size_t)h * d + c];
        num += (o - z[c]) * (o - z[c]);
        den += z[c] * z[c];
      }
    }
  }
  free(w);
  free(z);
  return sqrt(num) / (den > 0 ? sqrt(den) : 1e-300);
}

static void describe(const tcase *c, char *buf, size_t len) {
  snprintf(buf, len,
           "n=%d heads=%d d=%d clip=%d causal=%d per_head=%d rel_k=%d rel_v=%d pad=%d",
           c->n, c->heads, c->d, c->clip, c->causal, c->per_head, c->use_k,
           c->use_v, c->pad);
}

/* Runs one case with pool, checks against the reference and that the
** padding columns of out were left alone. */
static void run_case(const tcase *c, relattn_pool *pool) {
  tdata t;
  char err[256] = "", what[200];
  int rc;
  double e;
  make_data(c, &t);
  if (c->pad) { /* mark the padding to see it is not written */
    int i, p;
    for (i = 0; i < c->n; i++)
      for (p = 0; p < c->pad; p++)
        t.out[(size_t)i * t.a.ldo + c->heads * c->d + p] = 12345.0f;
  }
  describe(c, what, sizeof what);
  rc = relattn_attention(&t.a, pool, err, sizeof err);
  CHECK(rc == RELATTN_OK, "%s: rc %d %s", what, rc, err);
  e = ref_error(&t.a);
  CHECK(e <= TOL, "%s: relative error %.3g", what, e);
  if (c->pad) {
    int i, p, ok = 1;
    for (i = 0; i < c->n; i++)
      for (p = 0; p < c->pad; p++)
        if (t.out[(size_t)i * t.a.ldo + c->heads * c->d + p] != 12345.0f) ok = 0;
    CHECK(ok, "%s: padding untouched", what);
  }
  free_data(&t);
}

/* Every term combination, causal or not, shared or per-head, over a grid of
** lengths around the clip and the block sizes. */
static void grid(relattn_pool *pool, int bq, int bk) {
  static const int ns[] = {1, 2, 5, 16, 17, 40, 100};
  static const int clips[] = {0, 1, 3, 16};
  size_t ni, ci;
  int causal, per_head, terms;
  relattn_attention_blocks(bq, bk);
  for (ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
    for (ci = 0; ci < sizeof clips / sizeof clips[0]; ci++)
      for (causal = 0; causal < 2; causal++)
        for (per_head = 0; per_head < 2; per_head++)
          for (terms = 0; terms < 4; terms++) {
            tcase c;
            c.n = ns[ni];
            c.clip = clips[ci];
            c.causal = causal;
            c.per_head = per_head;
            c.use_k = terms & 1;
            c.use_v = (terms >> 1) & 1;
            c.heads = 1 + (int)(unit_next() % 4);
            c.d = 1 + (int)(unit_next() % 13); /* mostly not a multiple of 8 */
            c.pad = (int)(unit_next() % 3);
            run_case(&c, pool);
          }
  relattn_attention_blocks(0, 0);
}

/* The same inputs on 1, 2 and 3 threads give the same bits. */
static void thread_independence(void) {
  tcase c = {517, 3, 24, 16, 0, 1, 1, 1, 0};
  int causal, threads;
  for (causal = 0; causal < 2; causal++) {
    tdata t;
    float *first = NULL;
    size_t bytes = sizeof(float) * (size_t)c.n * c.heads * c.d;
    c.causal = causal;
    make_data(&c, &t);
    for (threads = 1; threads <= 3; threads++) {
      relattn_pool *pool = relattn_pool_new(threads);
      char err[256] = "";
      int rc = relattn_attention(&t.a, pool, err, sizeof err);
      CHECK(rc == RELATTN_OK, "threads=%d: %s", threads, err);
      if (!first) {
        first = malloc(bytes);
        memcpy(first, t.out, bytes);
      } else {
        CHECK(memcmp(first, t.out, bytes) == 0,
              "causal=%d: %d threads give other bits than 1", causal, threads);
      }
      relattn_pool_free(pool);
    }
    free(first);
    free_data(&t);
  }
}

/* relattn_attention_map: rows are the reference's weights and sum to 1. */
static void map_case(const tcase *c) {
  tdata t;
  char err[256] = "", what[200];
  float *map = malloc(sizeof(float) * (size_t)c->n * c->n);
  double *w = malloc(sizeof(double) * c->n), num = 0, den = 0, worst_sum = 0;
  int h = (int)(unit_next() % (unsigned)c->heads), i, j, rc;
  make_data(c, &t);
  describe(c, what, sizeof what);
  rc = relattn_attention_map(&t.a, h, map, NULL, err, sizeof err);
  CHECK(rc == RELATTN_OK, "map %s: %s", what, err);
  for (i = 0; i < c->n; i++) {
    double rs = 0;
    ref_weights(&t.a, h, i, w);
    for (j = 0; j < c->n; j++) {
      double m = map[(size_t)i * c->n + j];
      num += (m - w[j]) * (m - w[j]);
      den += w[j] * w[j];
      rs += m;
      if (c->causal && j > i) CHECK(m == 0.0, "map %s: masked (%d,%d) is %g", what, i, j, m);
    }
    if (fabs(rs - 1) > worst_sum) worst_sum = fabs(rs - 1);
  }
  CHECK(sqrt(num / den) <= TOL, "map %s: relative error %.3g", what, sqrt(num / den));
  CHECK(worst_sum <= 1e-5, "map %s: a row sums to 1 %+g", what, worst_sum);
  free(map);
  free(w);
  free_data(&t);
}

/* out written over q (documented as allowed): each task reads only its own
** rows of q. */
static void in_place(relattn_pool *pool) {
  tcase c = {600, 3, 16, 8, 0, 1, 1, 1, 2};
  int causal;
  for (causal = 0; causal < 2; causal++) {
    tdata t;
    relattn_attn a;
    char err[256] = "";
    const size_t len = (size_t)c.n * (c.heads * c.d + c.pad);
    float *q_copy = malloc(sizeof(float) * len);
    double e;
    c.causal = causal;
    make_data(&c, &t);
    memcpy(q_copy, t.q, sizeof(float) * len);
    a = t.a;
    a.out = t.q;
    a.ldo = a.ldq;
    CHECK(relattn_attention(&a, pool, err, sizeof err) == RELATTN_OK, "in place: %s", err);
    a.out = t.q;       /* the result */
    a.q = q_copy;      /* the inputs it was computed from */
    e = ref_error(&a);
    CHECK(e <= TOL, "in place causal=%d: relative error %.3g", causal, e);
    free(q_copy);
    free_data(&t);
  }
}

static void errors(void) {
  tcase c = {10, 2, 8, 2, 0, 0, 1, 1, 0};
  tdata t;
  char err[256];
  float map[100];
  make_data(&c, &t);
  t.a.heads = 0;
  CHECK(relattn_attention(&t.a, NULL, err, sizeof err) == RELATTN_ERR_ARG &&
            strstr(err, "heads=0"), "heads 0: %s", err);
  t.a.heads = 2;
  t.a.ldk = 15;
  CHECK(relattn_attention(&t.a, NULL, err, sizeof err) == RELATTN_ERR_ARG &&
            strstr(err, "leading dimension"), "ldk: %s", err);
  t.a.ldk = 16;
  CHECK(relattn_attention_map(&t.a, 2, map, NULL, err, sizeof err) == RELATTN_ERR_ARG &&
            strstr(err, "head 2 out of range"), "map head: %s", err);
  CHECK(relattn_attention(NULL, NULL, err, sizeof err) == RELATTN_ERR_ARG, "NULL");
  t.a.n_q = 11;
  CHECK(relattn_attention(&t.a, NULL, err, sizeof err) == RELATTN_ERR_ARG &&
            strcmp(err, "attention: n_q=11 outside [0, n=10]") == 0, "n_q 11: %s", err);
  t.a.n_q = -1;
  CHECK(relattn_attention(&t.a, NULL, err, sizeof err) == RELATTN_ERR_ARG &&
            strcmp(err, "attention: n_q=-1 outside [0, n=10]") == 0, "n_q -1: %s", err);
  CHECK(relattn_attention_scratch_bytes(&t.a) == 0, "n_q -1: scratch");
  t.a.n_q = 0;
  t.a.n = 0; /* nothing to do */
  CHECK(relattn_attention(&t.a, NULL, err, sizeof err) == RELATTN_OK, "n = 0");
  free_data(&t);
}

/* Scratch per worker does not grow with n. */
static void scratch_flat(void) {
  relattn_attn a;
  size_t s4, s16;
  memset(&a, 0, sizeof a);
  a.heads = 8; a.d_head = 64; a.clip = 64;
  a.rel_k = a.rel_v = (const float *)&a; /* only tested for NULL */
  a.n = 4096;
  s4 = relattn_attention_scratch_bytes(&a);
  a.n = 16384;
  s16 = relattn_attention_scratch_bytes(&a);
  CHECK(s4 == s16 && s16 < (4u << 20), "scratch %zu at 4096, %zu at 16384", s4, s16);
}

/* Each vector path this CPU runs agrees with scalar C. */
static void vec_paths(void) {
  static const char *names[] = {"avx2", "avx512"};
  const relattn_vec *sc = relattn_vec_path("scalar");
  size_t p;
  for (p = 0; p < 2; p++) {
    const relattn_vec *v = relattn_vec_path(names[p]);
    int n;
    if (!v) continue;
    for (n = 1; n <= 70; n++) {
      float x[70], y[70], f[70];
      double num = 0, den = 0;
      int j;
      float sx, sy;
      for (j = 0; j < n; j++) x[j] = y[j] = (float)(unit_uniform() * 40.0 - 20.0);
      x[n - 1] = y[n - 1] = 25.0f; /* the max at the tail */
      memcpy(f, x, sizeof(float) * (size_t)n);
      CHECK(v->max(x, n) == 25.0f, "%s max n=%d", names[p], n);
      sx = v->exp_sum(x, n, 25.0f);
      sy = sc->exp_sum(y, n, 25.0f);
      for (j = 0; j < n; j++) {
        double ref = exp((double)f[j] - 25.0);
        num += (x[j] - ref) * (x[j] - ref);
        den += ref * ref;
      }
      CHECK(sqrt(num / den) <= 1e-6, "%s exp n=%d: %.3g", names[p], n, sqrt(num / den));
      CHECK(fabsf(sx - sy) <= 1e-5f * sy, "%s sum n=%d %g vs %g", names[p], n, sx, sy);
      v->scale(x, n, 0.5f);
      sc->scale(y, n, 0.5f);
      for (j = 0; j < n; j++) f[j] = (float)unit_uniform();
      memcpy(y, x, sizeof(float) * (size_t)n);
      v->add(x, f, n);
      {
        int same = 1;
        for (j = 0; j < n; j++) same &= x[j] == y[j] + f[j];
        CHECK(same, "%s add n=%d", names[p], n);
      }
    }
    {
      float x[16] = {-200.0f, -88.0f, -87.0f, 0.0f, 1.0f, -1e30f};
      v->exp_sum(x, 6, 0.0f);
      CHECK(x[0] == 0.0f && x[5] == 0.0f && x[3] == 1.0f &&
                fabs(x[4] - exp(1.0)) < 1e-6 && x[1] >= 0.0f,
            "%s exp edges %g %g %g %g", names[p], x[0], x[1], x[3], x[4]);
    }
  }
}

int main(void) {
  relattn_pool *pool2 = relattn_pool_new(2);
  unit_seed();
  printf("simd path: %s\n", relattn_vec_ops()->name);

  /* Small blocks: many far-left, band and far-right blocks at small n. */
  grid(pool2, 8, 16);
  grid(NULL, 3, 5);
  /* Default blocks. */
  grid(pool2, 0, 0);
  {
    /* n >> k over several default blocks; 8 heads; long causal. */
    static const tcase big[] = {
        {1000, 2, 64, 16, 0, 0, 1, 1, 0},
        {1000, 2, 64, 16, 1, 1, 1, 1, 3},
        {700, 8, 12, 5, 1, 0, 1, 0, 0},
        {700, 8, 12, 5, 0, 1, 0, 1, 0},
        {300, 5, 20, 64, 0, 1, 1, 1, 0},   /* n > k, band wider than a block */
        {64, 2, 16, 64, 1, 0, 1, 1, 0},    /* n = k */
        {30, 3, 16, 64, 0, 0, 1, 1, 0},    /* n < k */
        {1, 8, 64, 64, 0, 1, 1, 1, 0},     /* n = 1 */
        {257, 1, 64, 0, 1, 0, 1, 1, 0},    /* k = 0 */
    };
    size_t i;
    for (i = 0; i < sizeof big / sizeof big[0]; i++) run_case(&big[i], pool2);
  }
  thread_independence();
  in_place(pool2);
  {
    static const tcase maps[] = {
        {1, 1, 8, 2, 0, 0, 1, 1, 0},
        {50, 3, 12, 4, 0, 1, 1, 1, 2},
        {50, 3, 12, 4, 1, 0, 1, 0, 0},
        {40, 2, 8, 0, 1, 0, 1, 1, 0},
        {20, 2, 8, 30, 0, 0, 0, 0, 0},
    };
    size_t i;
    for (i = 0; i < sizeof maps / sizeof maps[0]; i++) map_case(&maps[i]);
  }
  errors();
  scratch_flat();
  vec_paths();
  relattn_pool_free(pool2);
  UNIT_DONE();
}
