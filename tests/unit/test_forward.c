/*
** test_forward.c: src/forward.c against a naive float64 forward pass written
** here from DESIGN §4-5, on random models of every shape the config allows
** (decoder/encoder, pre/post norm, GELU/GELU-tanh/ReLU, shared/per-head
** tables, value term on/off, tied/untied, clip 0/1/16; the forward pass's
** options: layernorm/rmsnorm, biases or none, plain/gated FFN, embedding
** norm, token types split at a sep; d_head apart from d_model / n_heads,
** the attention narrower or wider than d_model), with 1 to 3 threads.
** Tolerances: log-probs 1e-4 absolute, embeddings 1e-5 relative (L2),
** attention maps 1e-5 absolute with rows summing to 1, the final row 0
** (cls) 1e-5 relative (L2). Batches of several sequences match each
** sequence run alone; the final row 0 is the same bits alone, with other
** outputs and in any batch (its own path through the last layer).
*/
#include <string.h>

#include "relattn.h"
#include "unit.h"

typedef struct {
  relattn_model m;
  float *arena;
  size_t used, cap;
} test_model;

static float *take(test_model *t, size_t count, double scale, double offset) {
  float *p = t->arena + t->used;
  size_t i;
  t->used += count;
  if (t->used > t->cap) {
    fprintf(stderr, "arena too small\n");
    exit(2);
  }
  for (i = 0; i < count; i++) p[i] = (float)(offset + scale * unit_uniform());
  return p;
}

static void make_model(test_model *t, relattn_config cfg) {
  int d = cfg.d_model, R = 2 * cfg.clip + 1, l;
  int dh = relattn_config_d_head(&cfg), in = dh * cfg.n_heads;
  size_t tab = (size_t)(cfg.per_head ? cfg.n_heads : 1) * R * dh;
  double ws = 1.0 / sqrt((double)d);
  memset(t, 0, sizeof *t);
  t->cap = 2 * (size_t)cfg.vocab_size * d +
           (size_t)cfg.n_layers * (4 * (size_t)in * d + 3 * in + 6 * d +
                                   2 * tab + 3 * (size_t)cfg.d_ff * d +
                                   2 * cfg.d_ff + 16) +
           (4 + (size_t)cfg.token_types) * d;
  t->arena = malloc(t->cap * sizeof(float));
  t->m.cfg = cfg;
  t->m.tok_emb = take(t, (size_t)cfg.vocab_size * d, 1.0, 0);
  t->m.layers = calloc((size_t)cfg.n_layers, sizeof *t->m.layers);
  for (l = 0; l < cfg.n_layers; l++) {
    relattn_layer *L = &t->m.layers[l];
    L->ln1_w = take(t, d, 0.3, 1.0);
    L->ln1_b = cfg.norm_kind == RELATTN_RMSNORM ? NULL : take(t, d, 0.1, 0);
    L->wq = take(t, (size_t)in * d, 2 * ws, 0);
    L->wk = take(t, (size_t)in * d, 2 * ws, 0);
    if (unit_next() % 2) take(t, 16, 0, 0); /* not back to back: 3 products */
    L->wv = take(t, (size_t)in * d, ws, 0);
    L->wo = take(t, (size_t)d * in, 1.0 / sqrt((double)in), 0);
    if (!cfg.no_biases) {
      L->bq = take(t, in, 0.1, 0);
      L->bk = take(t, in, 0.1, 0);
      L->bv = take(t, in, 0.1, 0);
      L->bo = take(t, d, 0.1, 0);
    }
    L->rel_k = take(t, tab, 1.0, 0);
    L->rel_v = cfg.rel_values ? take(t, tab, 1.0, 0) : NULL;
    L->ln2_w = take(t, d, 0.3, 1.0);
    L->ln2_b = cfg.norm_kind == RELATTN_RMSNORM ? NULL : take(t, d, 0.1, 0);
    L->w1 = take(t, (size_t)cfg.d_ff * d, ws, 0);
    L->b1 = cfg.no_biases ? NULL : take(t, cfg.d_ff, 0.1, 0);
    if (cfg.ffn_gated) {
      L->w3 = take(t, (size_t)cfg.d_ff * d, 2 * ws, 0);
      L->b3 = cfg.no_biases ? NULL : take(t, cfg.d_ff, 0.1, 0);
    }
    L->w2 = take(t, (size_t)d * cfg.d_ff, 1.0 / sqrt((double)cfg.d_ff), 0);
    L->b2 = cfg.no_biases ? NULL : take(t, d, 0.1, 0);
  }
  if (cfg.norm == RELATTN_NORM_PRE) {
    t->m.lnf_w = take(t, d, 0.3, 1.0);
    t->m.lnf_b = cfg.norm_kind == RELATTN_RMSNORM ? NULL : take(t, d, 0.1, 0);
  }
  if (cfg.token_types)
    t->m.type_emb = take(t, (size_t)cfg.token_types * d, 1.0, 0);
  if (cfg.emb_norm) {
    t->m.emb_ln_w = take(t, d, 0.3, 1.0);
    t->m.emb_ln_b = cfg.norm_kind == RELATTN_RMSNORM ? NULL : take(t, d, 0.1, 0);
  }
  t->m.lm_head = cfg.tie_embeddings ? t->m.tok_emb
                                    : take(t, (size_t)cfg.vocab_size * d, 1.0, 0);
}

/* ---- the float64 reference --------------------------------------------- */

/* LayerNorm, or RMSNorm (T5LayerNorm: x / sqrt(mean(x^2) + eps) * w) when
** rms; b NULL: no bias */
static void ref_ln(double *x, int n, int d, const float *w, const float *b,
                   double eps, int rms) {
  int i, c;
  for (i = 0; i < n; i++) {
    double *r = x + (size_t)i * d, mean = 0, var = 0;
    if (rms) {
      for (c = 0; c < d; c++) var += r[c] * r[c];
      for (c = 0; c < d; c++) r[c] = r[c] / sqrt(var / d + eps) * w[c];
      continue;
    }
    for (c = 0; c < d; c++) mean += r[c];
    mean /= d;
    for (c = 0; c < d; c++) var += (r[c] - mean) * (r[c] - mean);
    var /= d;
    for (c = 0; c < d; c++)
      r[c] = (r[c] - mean) / sqrt(var + eps) * w[c] + (b ? b[c] : 0);
  }
}

/* y (n, out) = x (n, in) W^T + b */
static void ref_linear(double *y, const double *x, int n, int in, int out,
                       const float *w, const float *b) {
  int i, o, c;
  for (i = 0; i < n; i++)
    for (o = 0; o < out; o++) {
      double s = b ? b[o] : 0;
      for (c = 0; c < in; c++) s += x[(size_t)i * in + c] * w[(size_t)o * in + c];
      y[(size_t)i * out + o] = s;
    }
}

/* Runs the model; fills logprob (n-1), top (n-1), emb (d), the final row 0
** row0 (d) and, for layer ml head mh, map (n, n). */
static void ref_forward(const relattn_model *m, const int32_t *tok, int n,
                        int mean_from, double *logprob, int *top, double *lsm,
                        double *emb, double *row0,
                        int ml, int mh, double *map) {
  const relattn_config *cfg = &m->cfg;
  int d = cfg->d_model, H = cfg->n_heads, K = cfg->clip, R = 2 * K + 1;
  /* the heads' width: d_head when given, else d / H; q, k, v, z are
  ** (n, in) with head h at columns h dh .. */
  int dh = cfg->d_head ? cfg->d_head : d / H, in = H * dh;
  int i, j, c, l, h, V = cfg->vocab_size, pre = cfg->norm == RELATTN_NORM_PRE;
  double *x = calloc((size_t)n * d, 8), *a = calloc((size_t)n * d, 8);
  double *q = calloc((size_t)n * in, 8), *k = calloc((size_t)n * in, 8);
  double *v = calloc((size_t)n * in, 8), *z = calloc((size_t)n * in, 8);
  double *o = calloc((size_t)n * d, 8), *w = calloc((size_t)n, 8);
  double *f1 = calloc((size_t)n * cfg->d_ff, 8);
  double *f3 = calloc((size_t)n * cfg->d_ff, 8);
  double *lg = calloc((size_t)V, 8);
  int type = 0, rms = cfg->norm_kind == RELATTN_RMSNORM;
  for (i = 0; i < n; i++) {
    for (c = 0; c < d; c++) x[(size_t)i * d + c] = m->tok_emb[(size_t)tok[i] * d + c];
    /* token types: 0 up to and including the first sep, then 1 */
    if (m->type_emb)
      for (c = 0; c < d; c++) x[(size_t)i * d + c] += m->type_emb[(size_t)type * d + c];
    if (cfg->token_types >= 2 && tok[i] == cfg->sep) type = 1;
  }
  if (m->emb_ln_w) ref_ln(x, n, d, m->emb_ln_w, m->emb_ln_b, cfg->norm_eps, rms);
  for (l = 0; l < cfg->n_layers; l++) {
    const relattn_layer *L = &m->layers[l];
    memcpy(a, x, (size_t)n * d * 8);
    if (pre) ref_ln(a, n, d, L->ln1_w, L->ln1_b, cfg->norm_eps, rms);
    ref_linear(q, a, n, d, in, L->wq, L->bq);
    ref_linear(k, a, n, d, in, L->wk, L->bk);
    ref_linear(v, a, n, d, in, L->wv, L->bv);
    for (h = 0; h < H; h++) {
      const float *rk = L->rel_k + (cfg->per_head ? (size_t)h * R * dh : 0);
      const float *rv = L->rel_v ? L->rel_v + (cfg->per_head ? (size_t)h * R * dh : 0) : NULL;
      for (i = 0; i < n; i++) {
        double mx = -INFINITY, sum = 0;
        for (j = 0; j < n; j++) {
          int r = j - i < -K ? -K : (j - i > K ? K : j - i);
          double e = 0;
          if (cfg->arch == RELATTN_DECODER && j > i) {
            w[j] = -INFINITY;
            continue;
          }
          for (c = 0; c < dh; c++)
            e += q[(size_t)i * in + h * dh + c] *
                 (k[(size_t)j * in + h * dh + c] + rk[(r + K) * dh + c]);
          w[j] = e / sqrt((double)dh);
          if (w[j] > mx) mx = w[j];
        }
        for (j = 0; j < n; j++) sum += (w[j] = exp(w[j] - mx));
        for (j = 0; j < n; j++) w[j] /= sum;
        if (map && l == ml && h == mh)
          for (j = 0; j < n; j++) map[(size_t)i * n + j] = w[j];
        for (c = 0; c < dh; c++) {
          double s = 0;
          for (j = 0; j < n; j++) {
            int r = j - i < -K ? -K : (j - i > K ? K : j - i);
            s += w[j] * (v[(size_t)j * in + h * dh + c] + (rv ? rv[(r + K) * dh + c] : 0));
          }
          z[(size_t)i * in + h * dh + c] = s;
        }
      }
    }
    ref_linear(o, z, n, in, d, L->wo, L->bo);
    for (i = 0; i < n * d; i++) x[i] += o[i];
    if (!pre) ref_ln(x, n, d, L->ln1_w, L->ln1_b, cfg->norm_eps, rms);
    memcpy(a, x, (size_t)n * d * 8);
    if (pre) ref_ln(a, n, d, L->ln2_w, L->ln2_b, cfg->norm_eps, rms);
    ref_linear(f1, a, n, d, cfg->d_ff, L->w1, L->b1);
    if (cfg->ffn_gated) ref_linear(f3, a, n, d, cfg->d_ff, L->w3, L->b3);
    for (i = 0; i < n * cfg->d_ff; i++) {
      double u = f1[i];
      if (cfg->activation == RELATTN_RELU) u = u > 0 ? u : 0;
      else if (cfg->activation == RELATTN_GELU_TANH) /* HF gelu_new */
        u = 0.5 * u * (1 + tanh(sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
      else u = 0.5 * u * (1 + erf(u / sqrt(2.0)));
      f1[i] = cfg->ffn_gated ? u * f3[i] : u;
    }
    ref_linear(o, f1, n, cfg->d_ff, d, L->w2, L->b2);
    for (i = 0; i < n * d; i++) x[i] += o[i];
    if (!pre) ref_ln(x, n, d, L->ln2_w, L->ln2_b, cfg->norm_eps, rms);
  }
  if (pre) ref_ln(x, n, d, m->lnf_w, m->lnf_b, cfg->norm_eps, rms);
  for (c = 0; c < d; c++) {
    double s = 0;
    for (i = mean_from; i < n; i++) s += x[(size_t)i * d + c];
    emb[c] = s / (n - mean_from);
    row0[c] = x[c];
  }
  if (cfg->arch == RELATTN_DECODER)
    for (i = 0; i + 1 < n; i++) {
      double mx = -INFINITY, s = 0;
      int arg = 0;
      ref_linear(lg, x + (size_t)i * d, 1, d, V, m->lm_head, NULL);
      for (j = 0; j < V; j++)
        if (lg[j] > mx) mx = lg[j], arg = j;
      for (j = 0; j < V; j++) s += exp(lg[j] - mx);
      logprob[i] = lg[tok[i + 1]] - mx - log(s);
      for (j = 0; j < V; j++) lsm[(size_t)i * V + j] = lg[j] - mx - log(s);
      top[i] = arg;
    }
  free(x), free(a), free(q), free(k), free(v), free(z), free(o), free(w), free(f1), free(f3);
  free(lg);
}

static void run_case(relattn_pool *pool, relattn_config cfg, int n) {
  test_model t;
  int32_t *tok = malloc(sizeof *tok * n);
  float *lp = malloc(sizeof(float) * n), *tlp = malloc(sizeof(float) * n);
  int32_t *top = malloc(sizeof(int32_t) * n);
  int *rtop = malloc(sizeof(int) * n);
  double *rlp = malloc(sizeof(double) * n), *remb = malloc(8 * cfg.d_model);
  double *rmap = malloc(8 * (size_t)n * n);
  double *rlsm = malloc(8 * (size_t)n * cfg.vocab_size);
  float *emb = malloc(sizeof(float) * cfg.d_model);
  float *map = malloc(sizeof(float) * (size_t)n * n);
  double *rcls = malloc(8 * cfg.d_model);
  float *cls = malloc(sizeof(float) * cfg.d_model);
  float *cls_alone = malloc(sizeof(float) * cfg.d_model);
  relattn_fwd f;
  char err[256] = "";
  int i, j, rc, ml, mh, mean_from = n > 1 ? (int)(unit_next() % 2) : 0;
  double worst_lp = 0, e2 = 0, r2 = 0, worst_map = 0, worst_sum = 0;
  int bad_top = 0;

  make_model(&t, cfg);
  for (i = 0; i < n; i++) tok[i] = (int32_t)(unit_next() % cfg.vocab_size);
  ml = (int)(unit_next() % cfg.n_layers);
  mh = (int)(unit_next() % cfg.n_heads);
  ref_forward(&t.m, tok, n, mean_from, rlp, rtop, rlsm, remb, rcls, ml, mh,
              rmap);
  /* half the cases as the store loads a model: relattn_model_prepare puts
  ** the layers' weights in panel order (src/gemm.c's kernel) where the CPU
  ** has FMA; the reference above read them as stored */
  if (unit_next() % 2) {
    CHECK(relattn_model_prepare(&t.m, "test", err, sizeof err) == RELATTN_OK,
          "prepare: %s", err);
    CHECK(t.m.packed == relattn_simd_fma(),
          "packed %d on path %s", t.m.packed, relattn_simd_path());
  }

  memset(&f, 0, sizeof f);
  f.tokens = tok;
  f.n = n;
  f.embedding = emb;
  f.mean_from = mean_from;
  f.cls = cls;
  if (cfg.arch == RELATTN_DECODER) {
    f.logprob = lp;
    f.top_token = top;
    f.top_logprob = tlp;
  }
  rc = relattn_forward(&t.m, &f, pool, err, sizeof err);
  CHECK(rc == RELATTN_OK, "forward: %s", err);
  if (cfg.arch == RELATTN_DECODER)
    for (i = 0; i + 1 < n; i++) {
      double dlt = fabs(lp[i] - rlp[i]);
      if (dlt > worst_lp) worst_lp = dlt;
      /* top_token is the reference's argmax up to a near-tie */
      if (top[i] < 0 || top[i] >= cfg.vocab_size ||
          rlsm[(size_t)i * cfg.vocab_size + top[i]] <=
              rlsm[(size_t)i * cfg.vocab_size + rtop[i]] - 1e-4 ||
          fabs(tlp[i] - rlsm[(size_t)i * cfg.vocab_size + rtop[i]]) >= 1e-4)
        bad_top++;
    }
  CHECK(bad_top == 0, "n=%d: %d top tokens differ from the reference", n, bad_top);
  for (j = 0; j < cfg.d_model; j++) {
    e2 += (emb[j] - remb[j]) * (emb[j] - remb[j]);
    r2 += remb[j] * remb[j];
  }
  CHECK(worst_lp < 1e-4, "arch %d norm %d act %d n=%d: log-prob error %g",
        cfg.arch, cfg.norm, cfg.activation, n, worst_lp);
  CHECK(sqrt(e2 / r2) < 1e-5, "arch %d norm %d n=%d: embedding rel err %g",
        cfg.arch, cfg.norm, n, sqrt(e2 / r2));
  for (j = 0, e2 = r2 = 0; j < cfg.d_model; j++) {
    e2 += (cls[j] - rcls[j]) * (cls[j] - rcls[j]);
    r2 += rcls[j] * rcls[j];
  }
  CHECK(sqrt(e2 / r2) < 1e-5, "arch %d norm %d n=%d: row 0 rel err %g",
        cfg.arch, cfg.norm, n, sqrt(e2 / r2));

  /* row 0 alone (the last layer on that row only): the same bits */
  memset(&f, 0, sizeof f);
  f.tokens = tok;
  f.n = n;
  f.cls = cls_alone;
  rc = relattn_forward(&t.m, &f, pool, err, sizeof err);
  CHECK(rc == RELATTN_OK && !memcmp(cls, cls_alone, sizeof(float) * cfg.d_model),
        "arch %d norm %d n=%d: row 0 alone differs from row 0 with the rest: %s",
        cfg.arch, cfg.norm, n, err);

  /* the attention map alone (only layers up to ml run) */
  memset(&f, 0, sizeof f);
  f.tokens = tok;
  f.n = n;
  f.map = map;
  f.map_layer = ml;
  f.map_head = mh;
  rc = relattn_forward(&t.m, &f, pool, err, sizeof err);
  CHECK(rc == RELATTN_OK, "map: %s", err);
  for (i = 0; i < n; i++) {
    double s = 0;
    for (j = 0; j < n; j++) {
      double dlt = fabs(map[(size_t)i * n + j] - rmap[(size_t)i * n + j]);
      if (dlt > worst_map) worst_map = dlt;
      s += map[(size_t)i * n + j];
    }
    if (fabs(s - 1) > worst_sum) worst_sum = fabs(s - 1);
  }
  CHECK(worst_map < 1e-5, "map (%d,%d) n=%d: error %g", ml, mh, n, worst_map);
  CHECK(worst_sum < 1e-5, "map rows sum to 1 within %g", worst_sum);

  free(t.arena), free(t.m.layers), free(tok), free(lp), free(tlp), free(top);
  free(rtop), free(rlp), free(remb), free(rmap), free(rlsm), free(emb), free(map);
  free(rcls), free(cls), free(cls_alone);
}


/* Several sequences in one relattn_forward_batch, each asking for its own
** outputs, against the reference run on each alone. */
static void run_batch(relattn_pool *pool, relattn_config cfg) {
  enum { MAXB = 5 };
  test_model t;
  relattn_fwd f[MAXB];
  int count = 1 + (int)(unit_next() % MAXB), s, i, j, rc;
  int32_t *tok[MAXB], *top[MAXB];
  float *lp[MAXB], *emb[MAXB], *map[MAXB], *cls[MAXB];
  char err[256] = "";
  make_model(&t, cfg);
  memset(f, 0, sizeof f);
  for (s = 0; s < count; s++) {
    int n = 1 + (int)(unit_next() % 70), what = (int)(unit_next() % 4);
    tok[s] = malloc(sizeof(int32_t) * n);
    top[s] = malloc(sizeof(int32_t) * n);
    lp[s] = malloc(sizeof(float) * n);
    emb[s] = malloc(sizeof(float) * cfg.d_model);
    map[s] = malloc(sizeof(float) * (size_t)n * n);
    cls[s] = malloc(sizeof(float) * cfg.d_model);
    for (i = 0; i < n; i++) tok[s][i] = (int32_t)(unit_next() % cfg.vocab_size);
    f[s].tokens = tok[s];
    f[s].n = n;
    if ((what & 1) && cfg.arch == RELATTN_DECODER) f[s].logprob = lp[s];
    if (what & 2) f[s].embedding = emb[s];
    if (unit_next() % 2) f[s].cls = cls[s];
    if (what == 0 || unit_next() % 2) {
      f[s].map = map[s];
      f[s].map_layer = (int)(unit_next() % cfg.n_layers);
      f[s].map_head = (int)(unit_next() % cfg.n_heads);
    }
  }
  rc = relattn_forward_batch(&t.m, f, count, pool, err, sizeof err);
  CHECK(rc == RELATTN_OK, "batch: %s", err);
  for (s = 0; s < count; s++) {
    int n = f[s].n;
    double *rlp = malloc(8 * n), *rlsm = malloc(8 * (size_t)n * cfg.vocab_size);
    double *remb = malloc(8 * cfg.d_model), *rmap = malloc(8 * (size_t)n * n);
    double *rcls = malloc(8 * cfg.d_model);
    int *rtop = malloc(sizeof(int) * n);
    double worst = 0, e2 = 0, r2 = 0;
    ref_forward(&t.m, tok[s], n, 0, rlp, rtop, rlsm, remb, rcls,
                f[s].map_layer, f[s].map_head, rmap);
    if (f[s].logprob)
      for (i = 0; i + 1 < n; i++)
        if (fabs(lp[s][i] - rlp[i]) > worst) worst = fabs(lp[s][i] - rlp[i]);
    if (f[s].map)
      for (i = 0; i < n * n; i++)
        if (fabs(map[s][i] - rmap[i]) > worst) worst = fabs(map[s][i] - rmap[i]);
    if (f[s].embedding)
      for (j = 0; j < cfg.d_model; j++) {
        e2 += (emb[s][j] - remb[j]) * (emb[s][j] - remb[j]);
        r2 += remb[j] * remb[j];
      }
    CHECK(worst < 1e-4 && (r2 == 0 || sqrt(e2 / r2) < 1e-5),
          "batch of %d, sequence %d (n=%d): error %g, embedding %g", count, s,
          n, worst, r2 ? sqrt(e2 / r2) : 0);
    if (f[s].cls) {
      /* near the reference, and the bits of row 0 asked for alone */
      relattn_fwd one;
      float *alone = malloc(sizeof(float) * cfg.d_model);
      for (j = 0, e2 = r2 = 0; j < cfg.d_model; j++) {
        e2 += (cls[s][j] - rcls[j]) * (cls[s][j] - rcls[j]);
        r2 += rcls[j] * rcls[j];
      }
      memset(&one, 0, sizeof one);
      one.tokens = tok[s];
      one.n = n;
      one.cls = alone;
      rc = relattn_forward(&t.m, &one, pool, err, sizeof err);
      CHECK(sqrt(e2 / r2) < 1e-5 && rc == RELATTN_OK &&
                !memcmp(alone, cls[s], sizeof(float) * cfg.d_model),
            "batch of %d, sequence %d (n=%d): row 0 error %g, or not the "
            "bits of row 0 alone",
            count, s, n, sqrt(e2 / r2));
      free(alone);
    }
    free(rlp), free(rlsm), free(remb), free(rmap), free(rtop), free(rcls);
    free(tok[s]), free(top[s]), free(lp[s]), free(emb[s]), free(map[s]);
    free(cls[s]);
  }
  free(t.arena), free(t.m.layers);
}

static void check_errors(relattn_pool *pool) {
  test_model t;
  relattn_config cfg = {RELATTN_ENCODER, 11, 8, 1, 2, 16, RELATTN_NORM_PRE,
                        1e-5f, RELATTN_GELU, 1, 2, 1, 0, -1, -1, -1, 0, 1, -1, 1,
                        {RELATTN_POS_SHAW, 32, 128, 256, 512, 1, 0, 10000.0}, 0, 0,
                        -1, -1, -1, -1, 0, 0, 0, 0, 0, RELATTN_HEAD_LM, 0, 0, 0,
                        0, 0, 0, 0 /* d_head: d_model / n_heads */,
                        RELATTN_RULES_TRANSFORMERS,
                        1 /* clean_up_spaces */, RELATTN_QUANT_NONE,
                        0, 0, 0 /* no decoder */,
                        0, 0, 0, {0}, {0}, {0}, {0}, 0, 0 /* no sentence modules */,
                        RELATTN_QUANT_NONE /* quantization.embeddings */};
  int32_t tok[3] = {1, 11, 2};
  float lp[3], emb[8];
  relattn_fwd f;
  char err[256];
  make_model(&t, cfg);
  memset(&f, 0, sizeof f);
  f.tokens = tok;
  f.n = 3;
  f.embedding = emb;
  CHECK(relattn_forward(&t.m, &f, pool, err, sizeof err) == RELATTN_ERR_ARG &&
            !strcmp(err, "relattn_forward: token 11 at position 1 is not below "
                         "vocab_size 11"),
        "%s", err);
  tok[1] = 3;
  f.logprob = lp;
  CHECK(relattn_forward(&t.m, &f, pool, err, sizeof err) == RELATTN_ERR_ARG &&
            strstr(err, "encoder"),
        "%s", err);
  f.logprob = NULL;
  f.n = 0;
  CHECK(relattn_forward(&t.m, &f, pool, err, sizeof err) == RELATTN_ERR_ARG,
        "empty: %s", err);
  f.n = 3;
  f.map = emb;
  f.map_layer = 1;
  CHECK(relattn_forward(&t.m, &f, pool, err, sizeof err) == RELATTN_ERR_ARG,
        "map layer: %s", err);
  CHECK(relattn_forward_memory(&t.m, 1 << 30, 1, 1) == 0 || sizeof(size_t) > 4,
        "overflow gives 0");
  free(t.arena), free(t.m.layers);
}

/* The masked-LM head's best-k list: with k = vocab_size it is every token
** once, by log-prob, the log-probs a distribution; any k is its first k,
** bit for bit, and a sequence in a batch gets what it gets alone. The head's
** values against a float64 reference: tests/sql/test_heads.py. */
static void check_fill(relattn_pool *pool) {
  test_model t;
  relattn_config cfg;
  int32_t tok[40], rows[5] = {0, 7, 8, 20, 39}, *all_t, *few_t, other_t[6];
  float *all_lp, *few_lp, other_lp[6];
  relattn_fwd f[2];
  char err[256];
  int V = 23, d = 16, i, j, k;
  memset(&cfg, 0, sizeof cfg);
  cfg.arch = RELATTN_ENCODER, cfg.vocab_size = V, cfg.d_model = d;
  cfg.n_layers = 1, cfg.n_heads = 2, cfg.d_ff = 24, cfg.norm = RELATTN_NORM_POST;
  cfg.norm_eps = 1e-5f, cfg.tie_embeddings = 1, cfg.clip = 3;
  cfg.bos = cfg.eos = cfg.pad = cfg.mask = -1;
  cfg.head = RELATTN_HEAD_MLM, cfg.head_activation = RELATTN_GELU_TANH;
  relattn_position_defaults(&cfg.pos, RELATTN_POS_SHAW);
  make_model(&t, cfg);
  t.m.mlm_w = t.m.layers[0].wq, t.m.mlm_b = t.m.layers[0].bq;
  t.m.mlm_ln_w = t.m.layers[0].ln1_w, t.m.mlm_ln_b = t.m.layers[0].ln1_b;
  t.m.mlm_bias = t.m.tok_emb + 5;
  for (i = 0; i < 40; i++) tok[i] = (int32_t)(unit_next() % (unsigned)V);
  all_t = malloc(sizeof(int32_t) * 5 * V), few_t = malloc(sizeof(int32_t) * 5 * 3);
  all_lp = malloc(sizeof(float) * 5 * V), few_lp = malloc(sizeof(float) * 5 * 3);
  memset(f, 0, sizeof f);
  f[0].tokens = tok, f[0].n = 40, f[0].fill = rows, f[0].n_fill = 5;
  f[0].fill_k = V, f[0].fill_token = all_t, f[0].fill_logprob = all_lp;
  CHECK(relattn_forward(&t.m, &f[0], pool, err, sizeof err) == RELATTN_OK, "%s",
        err);
  for (i = 0; i < 5; i++) {
    double sum = 0;
    int seen[64] = {0};
    for (j = 0; j < V; j++) {
      sum += exp(all_lp[i * V + j]);
      seen[all_t[i * V + j]]++;
      if (j) CHECK(all_lp[i * V + j] <= all_lp[i * V + j - 1], "sorted");
    }
    for (j = 0; j < V; j++) CHECK(seen[j] == 1, "token %d once", j);
    CHECK(fabs(sum - 1) < 1e-5, "sums to %g", sum);
  }
  /* k = 3 alone, and the same as the second of a batch of two */
  f[1] = f[0];
  f[1].fill_k = 3, f[1].fill_token = few_t, f[1].fill_logprob = few_lp;
  f[0].tokens = tok + 1, f[0].n = 30, f[0].fill = rows + 1, f[0].n_fill = 3;
  f[0].fill_k = 2, f[0].fill_token = other_t, f[0].fill_logprob = other_lp;
  CHECK(relattn_forward_batch(&t.m, f, 2, pool, err, sizeof err) == RELATTN_OK,
        "%s", err);
  for (i = 0; i < 5; i++)
    for (k = 0; k < 3; k++)
      CHECK(few_t[i * 3 + k] == all_t[i * V + k] &&
                few_lp[i * 3 + k] == all_lp[i * V + k],
            "row %d best %d", i, k);
  /* outputs the model has no head for */
  f[1].fill_k = V + 1;
  CHECK(relattn_forward(&t.m, &f[1], pool, err, sizeof err) == RELATTN_ERR_ARG,
        "k over vocab: %s", err);
  memset(&f[0], 0, sizeof f[0]);
  f[0].tokens = tok, f[0].n = 40, f[0].logits = all_lp;
  CHECK(relattn_forward(&t.m, &f[0], pool, err, sizeof err) == RELATTN_ERR_ARG &&
            !strcmp(err, "relattn_forward: the model's head is 'mlm', not "
                         "'classifier'"),
        "%s", err);
  f[0].logits = NULL, f[0].pooled = all_lp;
  CHECK(relattn_forward(&t.m, &f[0], pool, err, sizeof err) == RELATTN_ERR_ARG &&
            !strcmp(err, "relattn_forward: the model has no pooler"),
        "%s", err);
  free(all_t), free(few_t), free(all_lp), free(few_lp);
  free(t.arena), free(t.m.layers);
}

/* relattn_zero_shot_scores against the zero-shot pipeline's postprocess
** written out here: fresh random logits, single- and multi-label, the
** entailment class first, in the middle and last, and ties. */
static void check_zero_shot(void) {
  float z[7 * 4];
  double out[7], want[7];
  int order[7], n, c, e, multi, i, k;
  for (k = 0; k < 40; k++) {
    n = 1 + (int)(unit_next() % 7);
    c = 2 + (int)(unit_next() % 3);
    e = (int)(unit_next() % (unsigned)c);
    multi = (int)(unit_next() % 2);
    for (i = 0; i < n * c; i++) z[i] = (float)(4 * unit_uniform());
    relattn_zero_shot_scores(out, order, z, n, c, e, multi);
    if (multi || n == 1) {
      int contra = e == 0 ? c - 1 : 0; /* the pipeline's -1 when e is 0 */
      for (i = 0; i < n; i++) {
        double a = exp((double)z[i * c + contra]), b = exp((double)z[i * c + e]);
        want[i] = b / (a + b);
      }
    } else {
      double sum = 0;
      for (i = 0; i < n; i++) sum += want[i] = exp((double)z[i * c + e]);
      for (i = 0; i < n; i++) want[i] /= sum;
    }
    for (i = 0; i < n; i++)
      CHECK(fabs(out[i] - want[i]) < 1e-12, "zero-shot score %d: %g vs %g",
            i, out[i], want[i]);
    for (i = 1; i < n; i++)
      CHECK(out[order[i - 1]] >= out[order[i]], "zero-shot order");
  }
  /* ties: reversed(argsort) puts the later candidate first */
  for (i = 0; i < 4 * 3; i++) z[i] = 0.5f;
  z[1 * 3 + 1] = 2.0f; /* candidate 1 best, 0, 2 and 3 tied */
  relattn_zero_shot_scores(out, order, z, 4, 3, 1, 0);
  CHECK(order[0] == 1 && order[1] == 3 && order[2] == 2 && order[3] == 0,
        "zero-shot ties: %d %d %d %d", order[0], order[1], order[2],
        order[3]);
}

int main(void) {
  static const int lens[] = {1, 2, 3, 17, 64, 65, 130};
  static const int clips[] = {0, 1, 16};
  int threads, i;
  unit_seed();
  for (threads = 1; threads <= 3; threads++) {
    relattn_pool *pool = relattn_pool_new(threads);
    for (i = 0; i < 12; i++) {
      relattn_config cfg;
      memset(&cfg, 0, sizeof cfg);
      cfg.arch = (i & 1) ? RELATTN_ENCODER : RELATTN_DECODER;
      cfg.vocab_size = 7 + (int)(unit_next() % 60);
      cfg.n_heads = 1 + (int)(unit_next() % 3);
      cfg.d_model = cfg.n_heads * (4 + 4 * (int)(unit_next() % 4));
      cfg.n_layers = 1 + (int)(unit_next() % 3);
      cfg.d_ff = 8 + (int)(unit_next() % 40);
      cfg.norm = (i >> 1) & 1 ? RELATTN_NORM_POST : RELATTN_NORM_PRE;
      cfg.norm_eps = 1e-5f;
      cfg.activation = (i >> 2) & 1 ? RELATTN_RELU
                       : unit_next() % 2 ? RELATTN_GELU_TANH : RELATTN_GELU;
      cfg.tie_embeddings = (int)(unit_next() % 2);
      cfg.clip = clips[unit_next() % 3];
      cfg.rel_values = (int)(unit_next() % 2);
      cfg.per_head = (int)(unit_next() % 2);
      cfg.bos = cfg.eos = cfg.pad = -1;
      cfg.append = cfg.sep = cfg.mask = cfg.unk = -1;
      relattn_position_defaults(&cfg.pos, RELATTN_POS_SHAW);
      /* the options: today's model in a third of the cases */
      if (unit_next() % 3) {
        cfg.norm_kind = (int)(unit_next() % 2);
        cfg.no_biases = (int)(unit_next() % 2);
        cfg.ffn_gated = (int)(unit_next() % 2);
        cfg.emb_norm = (int)(unit_next() % 2);
        cfg.token_types = (int)(unit_next() % 4);
        cfg.sep = (int)(unit_next() % cfg.vocab_size); /* random tokens hit it */
      }
      /* d_head in a third of the cases: 1 to 24 wide, d_model then free
      ** of n_heads (the attention narrower or wider than d_model) */
      if (unit_next() % 3 == 0) {
        cfg.d_head = 1 + (int)(unit_next() % 24);
        cfg.d_model += (int)(unit_next() % 3);
      }
      run_case(pool, cfg, lens[unit_next() % 7]);
      run_batch(pool, cfg);
    }
    check_errors(pool);
    check_fill(pool);
    relattn_pool_free(pool);
  }
  check_zero_shot();
  UNIT_DONE();
}
