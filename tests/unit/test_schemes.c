/*
** test_schemes.c: the kernel's scheme-neutral relative terms (relattn_rel)
** against a naive float64 reference of DESIGN 5b's formula, every score
** materialized, on fresh random inputs: random bucket maps (not monotone,
** not contiguous), tables on the query, key and value sides, per-bucket
** scalars, the linear bias, rotations (halves and interleaved, partial),
** offsets u and w, a given scale, shared and per-head tables, causal and
** not, n = 1 and band edges falling inside and across blocks (small block
** sizes). Tolerance: ||out - ref|| / ||ref|| <= 1e-5. Also the attention
** map, thread independence with the shared rotated keys, flat scratch,
** the first n_q queries alone (n_q), and the schemes' builders (T5's band
** settles inside n).
*/
#include <string.h>

#include "relattn.h"
#include "unit.h"
#include "vecmath.h" /* src/, internal */

#define TOL 1e-5

typedef struct rcase {
  int n, heads, d, band, rows, causal, per_head;
  int mapped, use_rk, use_rq, use_rv, use_beta, use_uw, use_slope, rot, rot_half;
  double scale;
} rcase;

typedef struct rdata {
  relattn_attn a;
  relattn_rel t;
  float *q, *k, *v, *out, *rk, *rq, *rv, *beta, *u, *w, *slope, *cs;
  int *bucket;
} rdata;

static float *rnd(size_t n, double scale) {
  float *p = relattn_alloc(sizeof(float) * (n ? n : 1));
  size_t i;
  for (i = 0; i < n; i++) p[i] = (float)(unit_uniform() * scale);
  return p;
}

static void make(const rcase *c, rdata *r) {
  const int w = c->heads * c->d;
  const size_t tab = (size_t)(c->per_head ? c->heads : 1) * c->rows * c->d;
  int i;
  memset(r, 0, sizeof *r);
  r->q = rnd((size_t)c->n * w, 1.5);
  r->k = rnd((size_t)c->n * w, 1.5);
  r->v = rnd((size_t)c->n * w, 1.0);
  r->out = rnd((size_t)c->n * w, 1.0);
  if (c->use_rk) r->rk = rnd(tab, 1.5);
  if (c->use_rq) r->rq = rnd(tab, 1.5);
  if (c->use_rv) r->rv = rnd(tab, 1.0);
  if (c->use_beta) r->beta = rnd((size_t)c->heads * c->rows, 2.0);
  if (c->use_uw) {
    r->u = rnd((size_t)w, 1.0);
    r->w = rnd((size_t)w, 1.0);
  }
  if (c->use_slope) {
    r->slope = rnd((size_t)c->heads, 0.5);
    for (i = 0; i < c->heads; i++) r->slope[i] = fabsf(r->slope[i]) + 0.01f;
  }
  if (c->mapped) {
    r->bucket = malloc(sizeof(int) * (2 * (size_t)c->band + 1));
    for (i = 0; i <= 2 * c->band; i++) r->bucket[i] = (int)(unit_next() % (unsigned)c->rows);
  }
  if (c->rot) {
    const int h2 = c->rot / 2;
    int p, t;
    r->cs = relattn_alloc(sizeof(float) * (size_t)c->n * c->rot + 4);
    for (p = 0; p < c->n; p++)
      for (t = 0; t < h2; t++) {
        const double ang = p * pow(100.0, -2.0 * t / c->rot);
        r->cs[(size_t)p * h2 + t] = (float)cos(ang);
        r->cs[(size_t)c->n * h2 + (size_t)p * h2 + t] = (float)sin(ang);
      }
  }
  r->t.scale = c->scale;
  r->t.band = c->band;
  r->t.bucket = r->bucket;
  r->t.rows = c->rows;
  r->t.per_head = c->per_head;
  r->t.rk = r->rk;
  r->t.rq = r->rq;
  r->t.rv = r->rv;
  r->t.beta = r->beta;
  r->t.u = r->u;
  r->t.w = r->w;
  r->t.slope = r->slope;
  r->t.rot_dim = c->rot;
  r->t.rot_half = c->rot_half;
  r->t.rot_cos = r->cs;
  r->t.rot_sin = r->cs ? r->cs + (size_t)c->n * (c->rot / 2) : NULL;
  r->a.n = c->n;
  r->a.heads = c->heads;
  r->a.d_head = c->d;
  r->a.causal = c->causal;
  r->a.q = r->q; r->a.ldq = w;
  r->a.k = r->k; r->a.ldk = w;
  r->a.v = r->v; r->a.ldv = w;
  r->a.out = r->out; r->a.ldo = w;
  r->a.rel = &r->t;
}

static void unmake(rdata *r) {
  relattn_free(r->q); relattn_free(r->k); relattn_free(r->v); relattn_free(r->out);
  relattn_free(r->rk); relattn_free(r->rq); relattn_free(r->rv); relattn_free(r->beta);
  relattn_free(r->u); relattn_free(r->w); relattn_free(r->slope); relattn_free(r->cs);
  free(r->bucket);
}

static int row_of(const relattn_rel *t, int delta) {
  const int c = delta < -t->band ? -t->band : (delta > t->band ? t->band : delta);
  return t->bucket ? t->bucket[c + t->band] : c + t->band;
}

/* x rotated by position p in double, as DESIGN 5b's q^ (RoFormer pairs or
** GPT-NeoX halves over the first r dims). */
static void rot_ref(double *out, const float *x, const relattn_rel *t, int d, int p) {
  const int r = t->rot_dim, h2 = r / 2;
  int i;
  for (i = 0; i < d; i++) out[i] = x[i];
  for (i = 0; i < h2; i++) {
    const double ang = p * pow(100.0, -2.0 * i / r), c = cos(ang), s = sin(ang);
    const int a = t->rot_half ? i : 2 * i, b = t->rot_half ? i + h2 : 2 * i + 1;
    out[a] = x[a] * c - x[b] * s;
    out[b] = x[b] * c + x[a] * s;
  }
}

/* Weights of (h, i) in double: w (n). */
static void ref_weights(const relattn_attn *a, int h, int i, double *wt) {
  const relattn_rel *t = a->rel;
  const int d = a->d_head;
  const size_t ts = t->per_head ? (size_t)t->rows * d : 0;
  const double s = t->scale > 0 ? t->scale : 1.0 / sqrt((double)d);
  const float *qi = a->q + (size_t)i * a->ldq + (size_t)h * d;
  double *qr = malloc(sizeof(double) * d), *kr = malloc(sizeof(double) * d);
  double mx = -INFINITY, sum = 0;
  int j, c;
  if (t->rot_dim) rot_ref(qr, qi, t, d, i);
  else for (c = 0; c < d; c++) qr[c] = qi[c];
  for (j = 0; j < a->n; j++) {
    const float *kj = a->k + (size_t)j * a->ldk + (size_t)h * d;
    const int b = row_of(t, j - i);
    double e = 0;
    if (a->causal && j > i) {
      wt[j] = -INFINITY;
      continue;
    }
    if (t->rot_dim) rot_ref(kr, kj, t, d, j);
    else for (c = 0; c < d; c++) kr[c] = kj[c];
    for (c = 0; c < d; c++) {
      e += (qr[c] + (t->u ? t->u[h * d + c] : 0.0)) * kr[c];
      if (t->rk) e += ((double)qi[c] + (t->w ? t->w[h * d + c] : 0.0)) *
                      t->rk[h * ts + (size_t)b * d + c];
      if (t->rq) e += (double)kj[c] * t->rq[h * ts + (size_t)b * d + c];
    }
    e *= s;
    if (t->beta) e += t->beta[(size_t)h * t->rows + b];
    if (t->slope) e -= t->slope[h] * fabs((double)(j - i));
    wt[j] = e;
    if (e > mx) mx = e;
  }
  for (j = 0; j < a->n; j++) {
    wt[j] = exp(wt[j] - mx);
    sum += wt[j];
  }
  for (j = 0; j < a->n; j++) wt[j] /= sum;
  free(qr);
  free(kr);
}

/* Over the rows of out the call writes: the first n_q, or all n. */
static double ref_error(const relattn_attn *a) {
  const relattn_rel *t = a->rel;
  const int d = a->d_head, nq = a->n_q ? a->n_q : a->n;
  const size_t ts = t->per_head ? (size_t)t->rows * d : 0;
  double *wt = malloc(sizeof(double) * a->n), *z = malloc(sizeof(double) * d);
  double num = 0, den = 0;
  int h, i, j, c;
  for (h = 0; h < a->heads; h++)
    for (i = 0; i < nq; i++) {
      ref_weights(a, h, i, wt);
      for (c = 0; c < d; c++) z[c] = 0;
      for (j = 0; j < a->n; j++) {
        const float *vj = a->v + (size_t)j * a->ldv + (size_t)h * d;
        const int b = row_of(t, j - i);
        for (c = 0; c < d; c++)
          z[c] += wt[j] * ((double)vj[c] + (t->rv ? t->rv[h * ts + (size_t)b * d + c] : 0.0));
      }
      for (c = 0; c < d; c++) {
        const double o = a->out[(size_t)i * a->ldo + (size_t)h * d + c];
        num += (o - z[c]) * (o - z[c]);
        den += z[c] * z[c];
      }
    }
  free(wt);
  free(z);
  return sqrt(num) / (den > 0 ? sqrt(den) : 1e-300);
}

static void describe(const rcase *c, char *buf, size_t len) {
  snprintf(buf, len, "n=%d H=%d d=%d D=%d B=%d causal=%d ph=%d map=%d rk=%d rq=%d "
           "rv=%d beta=%d uw=%d slope=%d rot=%d/%d s=%g", c->n, c->heads, c->d,
           c->band, c->rows, c->causal, c->per_head, c->mapped, c->use_rk, c->use_rq,
           c->use_rv, c->use_beta, c->use_uw, c->use_slope, c->rot, c->rot_half, c->scale);
}

static void run_case(const rcase *c, relattn_pool *pool) {
  rdata r;
  char err[256] = "", what[256];
  int rc;
  double e;
  make(c, &r);
  describe(c, what, sizeof what);
  rc = relattn_attention(&r.a, pool, err, sizeof err);
  CHECK(rc == RELATTN_OK, "%s: %s", what, err);
  e = ref_error(&r.a);
  CHECK(e <= TOL, "%s: relative error %.3g", what, e);
  unmake(&r);
}

/* A random case of n rows: every term on or off, a map or not. */
static rcase random_case(int n) {
  rcase c;
  memset(&c, 0, sizeof c);
  c.n = n;
  c.heads = 1 + (int)(unit_next() % 3);
  c.d = 2 * (1 + (int)(unit_next() % 6));  /* even, for rotations */
  c.band = (int)(unit_next() % 12);
  c.mapped = (int)(unit_next() % 2);
  c.rows = c.mapped ? 1 + (int)(unit_next() % 9) : 2 * c.band + 1 + (int)(unit_next() % 3);
  c.causal = (int)(unit_next() % 2);
  c.per_head = (int)(unit_next() % 2);
  c.use_rk = (int)(unit_next() % 2);
  c.use_rq = (int)(unit_next() % 2);
  c.use_rv = (int)(unit_next() % 2);
  c.use_beta = (int)(unit_next() % 2);
  c.use_uw = (int)(unit_next() % 2);
  c.use_slope = (int)(unit_next() % 3) == 0;
  c.rot = unit_next() % 3 == 0 ? 2 * (1 + (int)(unit_next() % (unsigned)(c.d / 2))) : 0;
  c.rot_half = (int)(unit_next() % 2);
  c.scale = unit_next() % 4 == 0 ? 1.0 : 0.0;
  return c;
}

static void grid(relattn_pool *pool, int bq, int bk, int reps) {
  static const int ns[] = {1, 2, 7, 16, 33, 100};
  size_t ni;
  int r;
  relattn_attention_blocks(bq, bk);
  for (ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
    for (r = 0; r < reps; r++) {
      rcase c = random_case(ns[ni]);
      run_case(&c, pool);
    }
  relattn_attention_blocks(0, 0);
}

/* Each term alone, on a longer sequence across default blocks. */
static void each_term(relattn_pool *pool) {
  static const rcase cs[] = {
      /* n  H  d  D  B  ca ph map rk rq rv be uw sl rot half scale */
      {700, 2, 16, 9, 6, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0.0},   /* mapped rk */
      {700, 2, 16, 9, 6, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0.0},   /* key side */
      {700, 2, 16, 30, 61, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0.0}, /* identity rq */
      {700, 2, 16, 9, 6, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0.0},   /* mapped rv */
      {700, 3, 8, 20, 12, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1.0},  /* beta, s = 1 */
      {700, 3, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0.0},    /* slope alone */
      {700, 3, 8, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0.0},
      {700, 2, 16, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 1, 0.0},  /* rotation */
      {700, 2, 16, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0.0},
      {700, 2, 16, 699, 1399, 1, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0.0}, /* XL-like */
      {1, 4, 8, 3, 5, 0, 1, 1, 1, 1, 1, 1, 1, 1, 8, 1, 0.0},      /* n = 1, all */
  };
  size_t i;
  for (i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i], pool);
}

static void map_matches(void) {
  rcase c = random_case(40);
  rdata r;
  char err[256] = "";
  float *map;
  double *w, num = 0, den = 0;
  int h, i, j;
  c.use_rk = c.use_rq = c.use_beta = c.use_uw = 1;
  c.use_slope = 1;
  c.rot = c.d;
  make(&c, &r);
  map = malloc(sizeof(float) * 40 * 40);
  w = malloc(sizeof(double) * 40);
  h = (int)(unit_next() % (unsigned)c.heads);
  CHECK(relattn_attention_map(&r.a, h, map, NULL, err, sizeof err) == RELATTN_OK, "map: %s", err);
  for (i = 0; i < 40; i++) {
    ref_weights(&r.a, h, i, w);
    for (j = 0; j < 40; j++) {
      num += (map[i * 40 + j] - w[j]) * (map[i * 40 + j] - w[j]);
      den += w[j] * w[j];
    }
  }
  CHECK(sqrt(num / den) <= TOL, "map: relative error %.3g", sqrt(num / den));
  free(map);
  free(w);
  unmake(&r);
}

/* Rotated keys live in scratch the tasks share: the same bits on 1-3 threads. */
static void threads_same_bits(void) {
  rcase c = {517, 3, 16, 5, 7, 0, 1, 1, 1, 1, 1, 1, 1, 1, 8, 0, 0.0};
  int causal, t;
  for (causal = 0; causal < 2; causal++) {
    rdata r;
    float *first = NULL;
    const size_t bytes = sizeof(float) * 517 * 48;
    c.causal = causal;
    make(&c, &r);
    for (t = 1; t <= 3; t++) {
      relattn_pool *pool = relattn_pool_new(t);
      char err[256] = "";
      CHECK(relattn_attention(&r.a, pool, err, sizeof err) == RELATTN_OK, "%s", err);
      if (!first) {
        first = malloc(bytes);
        memcpy(first, r.out, bytes);
      } else {
        CHECK(memcmp(first, r.out, bytes) == 0, "causal=%d: %d threads differ", causal, t);
      }
      relattn_pool_free(pool);
    }
    free(first);
    unmake(&r);
  }
}

/* n_q: the first n_q queries against all n keys, as the reference has
** them; the rows after them left as they were; the same bits on 1 and 2
** threads; no more scratch than all n queries take. Every term at random
** (DeBERTa's classifier reads query 0 of its last layer alone). */
static void first_queries(relattn_pool *pool2) {
  static const int ns[] = {1, 7, 100, 700};
  size_t ni;
  int r, bl;
  for (bl = 0; bl < 2; bl++) {
    relattn_attention_blocks(bl ? 0 : 8, bl ? 0 : 16);
    for (ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
      for (r = 0; r < 3; r++) {
        rcase c = random_case(ns[ni]);
        const int nq = r == 0 ? 1 : (r == 1 ? c.n : 1 + (int)(unit_next() % (unsigned)c.n));
        const size_t w = (size_t)c.heads * c.d, all = (size_t)c.n * w;
        rdata rd;
        char err[256] = "", what[256];
        float *before, *one;
        size_t scratch_all;
        double e;
        make(&c, &rd);
        describe(&c, what, sizeof what);
        before = malloc(sizeof(float) * all);
        one = malloc(sizeof(float) * all);
        memcpy(before, rd.out, sizeof(float) * all);
        scratch_all = relattn_attention_scratch_bytes(&rd.a);
        rd.a.n_q = nq;
        CHECK(relattn_attention_scratch_bytes(&rd.a) <= scratch_all,
              "%s n_q=%d: scratch %zu over all queries' %zu", what, nq,
              relattn_attention_scratch_bytes(&rd.a), scratch_all);
        CHECK(relattn_attention(&rd.a, NULL, err, sizeof err) == RELATTN_OK,
              "%s n_q=%d: %s", what, nq, err);
        memcpy(one, rd.out, sizeof(float) * all);
        e = ref_error(&rd.a);
        CHECK(e <= TOL, "%s n_q=%d: relative error %.3g", what, nq, e);
        CHECK(memcmp(rd.out + (size_t)nq * w, before + (size_t)nq * w,
                     sizeof(float) * (all - (size_t)nq * w)) == 0,
              "%s n_q=%d: rows after n_q written", what, nq);
        memcpy(rd.out, before, sizeof(float) * all);
        CHECK(relattn_attention(&rd.a, pool2, err, sizeof err) == RELATTN_OK,
              "%s n_q=%d: %s", what, nq, err);
        CHECK(memcmp(rd.out, one, sizeof(float) * all) == 0,
              "%s n_q=%d: 1 and 2 threads differ", what, nq);
        free(before);
        free(one);
        unmake(&rd);
      }
  }
  relattn_attention_blocks(0, 0);
}

static void scratch_flat(void) {
  relattn_attn a;
  relattn_rel t;
  int bucket[2 * 300 + 1] = {0};
  size_t s4, s16;
  memset(&a, 0, sizeof a);
  memset(&t, 0, sizeof t);
  t.band = 300;
  t.bucket = bucket;
  t.rows = 512;
  t.rk = t.rq = (const float *)&a; /* only tested for NULL */
  a.heads = 8; a.d_head = 64; a.rel = &t;
  a.n = 4096;
  s4 = relattn_attention_scratch_bytes(&a);
  a.n = 16384;
  s16 = relattn_attention_scratch_bytes(&a);
  CHECK(s4 == s16 && s16 < (8u << 20), "scratch %zu at 4096, %zu at 16384", s4, s16);
}

/* The builders: T5's map settles well inside a long sequence (the band is
** what the far-block shortcut needs) and its rows are the reference's. */
static void builders(void) {
  relattn_position p;
  relattn_pos_tables tb;
  relattn_scheme s;
  float bias[2 * 32];
  char err[256] = "";
  int x;
  relattn_position_defaults(&p, RELATTN_POS_T5);
  memset(&tb, 0, sizeof tb);
  tb.t[2] = bias;
  tb.count[2] = 64;
  CHECK(relattn_scheme_build(&s, &p, &tb, 4096, 2, 8, 0, 0, err, sizeof err) == RELATTN_OK,
        "t5: %s", err);
  CHECK(s.rel.band > 0 && s.rel.band <= 128, "t5 band %d", s.rel.band);
  for (x = -s.rel.band; x <= s.rel.band; x++)
    CHECK(s.rel.bucket[x + s.rel.band] == relattn_t5_bucket(x, 1, 32, 128), "t5 row %d", x);
  CHECK(relattn_t5_bucket(-100000, 1, 32, 128) == s.rel.bucket[0] &&
            relattn_t5_bucket(100000, 1, 32, 128) == s.rel.bucket[2 * s.rel.band],
        "t5 edges");
  relattn_scheme_free(&s);
  /* a short sequence: the band is n - 1 */
  CHECK(relattn_scheme_build(&s, &p, &tb, 5, 2, 8, 1, 0, err, sizeof err) == RELATTN_OK &&
            s.rel.band == 4, "t5 short: band %d %s", s.rel.band, err);
  relattn_scheme_free(&s);
  relattn_position_defaults(&p, RELATTN_POS_DEBERTA);
  memset(&tb, 0, sizeof tb);
  CHECK(relattn_scheme_build(&s, &p, &tb, 4096, 2, 8, 0, 0, err, sizeof err) == RELATTN_OK &&
            s.rel.band > 256 && s.rel.band <= 512 && s.rel.scale == 1.0 / sqrt(8.0),
        "deberta band %d scale %g %s", s.rel.band, s.rel.scale, err);
  relattn_scheme_free(&s);
  {
    float sl[12];
    relattn_alibi_slopes(sl, 8);
    CHECK(sl[0] == 0.5f && sl[7] == 1.0f / 256, "alibi 8: %g %g", sl[0], sl[7]);
    relattn_alibi_slopes(sl, 12);
    CHECK(sl[8] == (float)pow(pow(2.0, -0.5), 1) && sl[11] == (float)pow((float)pow(2.0, -0.5), 7),
          "alibi 12: %g %g", sl[8], sl[11]);
  }
}

/* The table builders against float64 ports: Transformer-XL's
** PositionalEmbedding (inv_freq = 1 / 10000^(2i/d_model), [sin, cos]) of
** pos_seq klen-1 .. 0 through r_net, split by head; DeBERTa's projection of
** the relative embeddings split by head (transpose_for_scores). */
static void table_builders(void) {
  const int dm = 12, H = 3, d = 4, c = 9, rows = 2 * c + 1;
  float *w = rnd((size_t)H * d * dm, 0.5), *out = rnd((size_t)H * rows * d, 1.0);
  float *rel = rnd((size_t)rows * dm, 1.0), *b = rnd((size_t)H * d, 1.0);
  double num = 0, den = 0;
  char err[256] = "";
  int h, t, k, m;
  CHECK(relattn_xl_table(out, w, dm, H, d, c, err, sizeof err) == RELATTN_OK, "xl: %s", err);
  for (h = 0; h < H; h++)
    for (t = 0; t < rows; t++)
      for (k = 0; k < d; k++) {
        const double pos = c - t; /* delta = t - c, the distance i - j = -delta */
        double ref = 0;
        for (m = 0; m < dm / 2; m++) {
          const double inv_freq = 1.0 / pow(10000.0, 2.0 * m / dm);
          ref += sin(pos * inv_freq) * w[(size_t)(h * d + k) * dm + m];
          ref += cos(pos * inv_freq) * w[(size_t)(h * d + k) * dm + dm / 2 + m];
        }
        num += (out[((size_t)h * rows + t) * d + k] - ref) * (out[((size_t)h * rows + t) * d + k] - ref);
        den += ref * ref;
      }
  CHECK(sqrt(num / den) <= 1e-6, "xl table: relative error %.3g", sqrt(num / den));
  CHECK(relattn_xl_table(out, w, 7, H, d, c, err, sizeof err) == RELATTN_ERR_ARG &&
            strstr(err, "d_model 7"), "xl odd d_model: %s", err);
  num = den = 0;
  relattn_project_table(out, rel, w, b, rows, dm, H, d);
  for (h = 0; h < H; h++)
    for (t = 0; t < rows; t++)
      for (k = 0; k < d; k++) {
        double ref = b[h * d + k];
        for (m = 0; m < dm; m++)
          ref += (double)rel[(size_t)t * dm + m] * w[(size_t)(h * d + k) * dm + m];
        num += (out[((size_t)h * rows + t) * d + k] - ref) * (out[((size_t)h * rows + t) * d + k] - ref);
        den += ref * ref;
      }
  CHECK(sqrt(num / den) <= 1e-6, "projected table: relative error %.3g", sqrt(num / den));
  relattn_free(w); relattn_free(out); relattn_free(rel); relattn_free(b);
}

/* The ops the schemes added (ramp max and exp, gather-add) on each vector
** path this CPU runs, against a double reference. */
static void vec_ops(void) {
  static const char *names[] = {"scalar", "avx2", "avx512"};
  size_t p;
  for (p = 0; p < 3; p++) {
    const relattn_vec *v = relattn_vec_path(names[p]);
    int n;
    if (!v) continue;
    for (n = 1; n <= 70; n++) {
      float x[70], y[70], t[70 * 5];
      int idx[70], j;
      const float r = (float)unit_uniform() * 0.5f;
      double mx = -INFINITY, sum = 0, got_sum, num = 0, den = 0;
      for (j = 0; j < n; j++) x[j] = y[j] = (float)(unit_uniform() * 10.0);
      for (j = 0; j < 70 * 5; j++) t[j] = (float)unit_uniform();
      for (j = 0; j < n; j++) mx = fmax(mx, (double)x[j] + (double)r * j);
      CHECK(fabs(v->max_ramp(x, n, r) - mx) <= 1e-5 * (1 + fabs(mx)), "%s max_ramp n=%d",
            names[p], n);
      got_sum = v->exp_sum_ramp(x, n, (float)mx, r);
      for (j = 0; j < n; j++) {
        const double e = exp((double)y[j] + (double)r * j - (float)mx);
        sum += e;
        num += (x[j] - e) * (x[j] - e);
        den += e * e;
      }
      /* the argument x + r j - sub reaches 45 in magnitude: its float32
      ** rounding alone is a relative error of a few 1e-6 in exp */
      CHECK(sqrt(num / den) <= 1e-5 && fabs(got_sum - sum) <= 1e-5 * sum,
            "%s exp_sum_ramp n=%d: %.3g", names[p], n, sqrt(num / den));
      for (j = 0; j < n; j++) {
        idx[j] = (int)(unit_next() % 4);
        x[j] = y[j];
      }
      v->gather_add(x, t, idx, n, 3, 70, 1);
      {
        int ok = 1;
        for (j = 0; j < n; j++) ok &= x[j] == y[j] + t[3 + idx[j] * 70 + j];
        CHECK(ok, "%s gather_add n=%d", names[p], n);
      }
      for (j = 0; j < n; j++) x[j] = y[j];
      v->gather_add(x, t, NULL, n, 2, 3, 1);
      {
        int ok = 1;
        for (j = 0; j < n; j++) ok &= x[j] == y[j] + t[2 + j * 4];
        CHECK(ok, "%s gather_add identity n=%d", names[p], n);
      }
    }
  }
}

int main(void) {
  relattn_pool *pool2 = relattn_pool_new(2);
  unit_seed();
  grid(pool2, 8, 16, 6);   /* band edges inside and across small blocks */
  grid(NULL, 3, 5, 3);
  grid(pool2, 0, 0, 4);
  each_term(pool2);
  map_matches();
  threads_same_bits();
  first_queries(pool2);
  scratch_flat();
  builders();
  table_builders();
  vec_ops();
  relattn_pool_free(pool2);
  UNIT_DONE();
}
