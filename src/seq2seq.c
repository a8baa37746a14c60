/*
** seq2seq.c: an encoder-decoder (config "decoder": T5ForConditionalGeneration)
** run as one: the encoder once over the source, then its decoder, either
** over a whole target at once (teacher forcing: relattn_s2s_forward) or a
** token at a time over a key/value cache (relattn_s2s_open / step / close,
** the encoder-decoder side of relattn_dec_*).
**
**   enc   = encoder(src)                 (src/forward.c, the final rows)
**   x     = tok_emb[decoder input]       (T5 embeds the decoder with shared)
**   per decoder layer:
**     x  += Wo attn(LN1(x))             causal self-attention, T5's
**                                        one-sided buckets of the decoder's
**                                        own dec.rel_bias, no 1/sqrt(d)
**     x  += Xo xattn(LNx(x), enc)        cross-attention over every source
**                                        row: no bias, no mask, no scaling
**     x  += FFN(LN2(x))
**   logits = dec.LN_f(x) E^T, E = lm_head, or tok_emb times d_model^-0.5
**            when tied (modeling_t5.py T5ForConditionalGeneration.forward)
**
** HOW IT WORKS
** The row-wise pieces (linear layers on the model's kernels, int8 and bf16
** included, the FFN, the norms) are the forward pass's own (src/fwd.h); a
** step's products and its head run on the pool's threads as src/decode.c's
** do (relattn_fwd_rows, relattn_fwd_head). The
** teacher-forced pass runs the self-attention through the fused kernel
** (src/attention.c) with T5's causal terms from src/schemes.c; the cached
** step computes one query per beam against the beam's cache in a plain
** loop, so the two paths share no attention code and a test comparing them
** compares two computations. Cross-attention keys and values depend on the
** source alone: computed once per layer at open, (n_src, i) each.
** Each beam's cache holds, per layer, the keys and values of its history
** (max_len rows of i floats each, i = n_heads * d_head); a step writes row
** t of every beam and reads rows 0..t: O(t) per token. Beams take their
** parent's history by copying cache rows (only when some parent differs).
*/
#include "relattn.h"
#include "fwd.h"
#include "vecmath.h"

#include <math.h>
#include <string.h>

/* The state behind a relattn_dec * from relattn_s2s_open (a relattn_dec
** of the encoder-decoder kind: relattn_dec_* hand it to relattn_s2s_*). */
typedef struct s2s {
  const relattn_model *m;
  relattn_pool *pool;
  int beams, max_len, n_src, t; /* t: decoder tokens in each beam's cache */
  int in, hw;                   /* inner width; max(d_model, in) */
  float *xk, *xv;               /* (dec_layers, n_src, in) cross keys, values */
  float *ck, *cv;               /* (dec_layers, beams, max_len, in) cache */
  float *x;                     /* (beams, d) residual rows */
  float *h;                     /* (beams, hw) normed rows */
  float *q, *kv, *att;          /* (beams, in); kv (beams, 2 in) */
  float *hid;                   /* (beams, 2 d_ff) */
  float *scores;                /* scores_floats(max(max_len, n_src)) */
  float *tmp;                   /* (beams, max_len, in): a reorder's copy */
  int *bucket;                  /* (max_len): bucket of delta -k */
  void *mem;
} s2s;

static size_t r16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Floats of the scores of every head over up to n keys, each head's row
** lds = r16(n) apart, then each head's softmax sum (a double). */
static size_t scores_floats(const relattn_config *c, size_t n) {
  return (size_t)c->n_heads * (r16(n) + 2);
}

/* Floats of a state's buffers (0 on overflow); with layout, carves them. */
static size_t state_floats(const relattn_model *m, int n_src, int beams,
                           int max_len, s2s *lay) {
  const relattn_config *c = &m->cfg;
  const size_t L = (size_t)c->dec_layers, in = (size_t)relattn_config_inner(c);
  const size_t d = (size_t)c->d_model, B = (size_t)beams, T = (size_t)max_len;
  const size_t hw = d > in ? d : in, S = (size_t)n_src;
  size_t cross, cache, tmp, total = 0, parts[12];
  int k, ok = 1;
  float *p = lay ? lay->mem : NULL;
  ok &= relattn_mul_ok(L * S, in, &cross);
  ok &= relattn_mul_ok(L * B, T, &cache) && relattn_mul_ok(cache, in, &cache);
  ok &= relattn_mul_ok(B * T, in, &tmp);
  if (!ok) return 0;
  parts[0] = cross, parts[1] = cross, parts[2] = cache, parts[3] = cache;
  parts[4] = B * d, parts[5] = B * hw, parts[6] = B * in, parts[7] = 2 * B * in;
  parts[8] = B * in, parts[9] = 2 * B * (size_t)c->d_ff;
  parts[10] = scores_floats(c, T > S ? T : S), parts[11] = tmp;
  for (k = 0; k < 12; k++) {
    if (lay) {
      float **dst[12] = {&lay->xk, &lay->xv, &lay->ck,  &lay->cv,
                         &lay->x,  &lay->h,  &lay->q,   &lay->kv,
                         &lay->att, &lay->hid, &lay->scores, &lay->tmp};
      *dst[k] = p + total;
    }
    if (!relattn_add_ok(total, r16(parts[k]), &total)) return 0;
  }
  if (lay) lay->bucket = (int *)(p + total);
  if (!relattn_add_ok(total, r16(T), &total)) return 0; /* ints, as floats */
  return total;
}

size_t relattn_s2s_memory(const relattn_model *m, int n_src, int beams,
                          int max_len) {
  size_t f, b, enc;
  if (!m || !relattn_config_is_s2s(&m->cfg) || n_src < 1 || beams < 1 ||
      max_len < 1)
    return 0;
  f = state_floats(m, n_src, beams, max_len, NULL);
  enc = relattn_forward_memory(m, n_src, 1, 1);
  if (!f || !enc || !relattn_mul_ok(f, sizeof(float), &b) ||
      !relattn_add_ok(b, sizeof(s2s) + 64, &b) ||
      !relattn_add_ok(b, sizeof(float) * (size_t)n_src *
                             (size_t)m->cfg.d_model, &b) ||
      !relattn_add_ok(b, enc, &b))
    return 0;
  return b;
}

/* ---- pieces both paths share ----------------------------------------- */

/* The attention's query scale: T5 scales by nothing (its init folds
** 1/sqrt(d) into the weights). */
static void norm_rows(const relattn_model *m, float *out, const float *x,
                      int rows, const float *w, const float *b) {
  relattn_norm(out, x, rows, m->cfg.d_model, w, b, m->cfg.norm_eps,
               m->cfg.norm_kind);
}

/* The softmax's weights exp(s - max) of n scores in place; their sum, in
** double, divides the weighted values (divide). */
static double weights(const relattn_vec *vec, float *scores, int n) {
  const float mx = vec->max(scores, n);
  double sum = 0;
  int j;
  for (j = 0; j < n; j++) {
    scores[j] = expf(scores[j] - mx);
    sum += scores[j];
  }
  return sum;
}

static void divide(float *o, int dh, double sum) {
  int e;
  for (e = 0; e < dh; e++) o[e] = (float)(o[e] / sum);
}

/* out (rows, ldo) = softmax(q k^T) v per head over n keys (ld floats
** apart), no mask, no bias: the cross-attention of rows queries, for every
** head at once (scores: scores_floats(c, m) floats, lds = r16(m), n <= m).
** The products are src/vecmath.c's dot_heads and
** axpy_heads (one order on every path, the keys and values read once for
** all heads; a scalar loop's chain of dependent adds was about a sixth of
** a T5 step), the weights exp(s - max) summed in double. */
static void cross_rows(const relattn_config *c, float *out, int ldo,
                       const float *q, int ldq, int rows, const float *k,
                       const float *v, int ld, int n, float *scores,
                       size_t lds) {
  const int H = c->n_heads, dh = relattn_config_d_head(c);
  const relattn_vec *vec = relattn_vec_ops();
  double *sums = (double *)(void *)(scores + (size_t)H * lds);
  int r, h;
  if (n < 1) { /* nothing to attend to (the source always has its </s>) */
    for (r = 0; r < rows; r++)
      memset(out + (size_t)r * ldo, 0, sizeof(float) * (size_t)H * dh);
    return;
  }
  for (r = 0; r < rows; r++) {
    float *o = out + (size_t)r * ldo;
    vec->dot_heads(scores, (int)lds, q + (size_t)r * ldq, k, ld, n, H, dh,
                   1.0f);
    for (h = 0; h < H; h++) sums[h] = weights(vec, scores + h * lds, n);
    vec->axpy_heads(o, scores, (int)lds, v, ld, n, H, dh);
    for (h = 0; h < H; h++) divide(o + (size_t)h * dh, dh, sums[h]);
  }
}

/* The LM head's raw outputs of rows (rows, d) into logits (rows, vocab):
** 0, or 1 when worker's scratch could not be had. */
static int head_rows(const relattn_model *m, relattn_pool *pool, int worker,
                     float *logits, const float *x, int rows) {
  const relattn_config *c = &m->cfg;
  const float alpha =
      c->tie_embeddings ? (float)(1.0 / sqrt((double)c->d_model)) : 1.0f;
  return relattn_fwd_head(m, pool, worker, logits, x, c->d_model, rows, alpha,
                          NULL);
}

/* The encoder's final rows of src into enc (n_src, d). */
static int encode(const relattn_model *m, const int *src, int n_src,
                  float *enc, relattn_pool *pool, const char *fn, char *err,
                  size_t errsz) {
  relattn_fwd f;
  int i;
  for (i = 0; i < n_src; i++)
    if (src[i] < 0 || src[i] >= m->cfg.vocab_size)
      return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                            "%s: source token %d at position %d is not below "
                            "vocab_size %d",
                            fn, src[i], i, m->cfg.vocab_size);
  memset(&f, 0, sizeof f);
  f.tokens = (const int32_t *)src;
  f.n = n_src;
  f.hidden = enc;
  return relattn_forward(m, &f, pool, err, errsz);
}

static int check_model(const relattn_model *m, const char *fn, char *err,
                       size_t errsz) {
  if (!m || !relattn_config_is_s2s(&m->cfg))
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "%s: the model is not an encoder-decoder", fn);
  return RELATTN_OK;
}

/* ---- the cached path ---------------------------------------------------- */

/* y (beams, ldy) = beta y + x W^T + b, W (out, in): a step's product on
** the pool's threads (src/fwd.h, relattn_fwd_rows). */
static int one(s2s *s, float *y, int ldy, const float *x, int ldx, int in,
               int out, const float *w, const float *b, float beta) {
  relattn_fwd_prod p;
  p.y = y, p.ldy = ldy, p.out = out, p.w = w, p.b = b, p.beta = beta;
  return relattn_fwd_rows(s->m, s->pool, x, ldx, s->beams, in, &p, 1);
}

/* One decoder token per beam (s->x holds their embeddings) at position
** s->t; logits (beams, vocab). */
static int step_rows(s2s *s, float *logits, const char *fn, char *err,
                     size_t errsz) {
  const relattn_model *m = s->m;
  const relattn_config *c = &m->cfg;
  const int B = s->beams, d = c->d_model, in = s->in, t = s->t;
  const int H = c->n_heads, dh = relattn_config_d_head(c);
  const size_t per = (size_t)s->max_len * in; /* a beam's cache, one layer */
  const size_t lds = r16((size_t)(s->max_len > s->n_src ? s->max_len
                                                         : s->n_src));
  const relattn_vec *vec = relattn_vec_ops();
  double *sums = (double *)(void *)(s->scores + (size_t)H * lds);
  relattn_fwd_prod p[3];
  int l, b, h, j;
  for (l = 0; l < c->dec_layers; l++) {
    const relattn_layer *L = &m->dec_layers[l];
    float *ck = s->ck + (size_t)l * B * per, *cv = s->cv + (size_t)l * B * per;
    if (relattn_pool_poll(s->pool))
      return relattn_errorf(err, errsz, RELATTN_ERR_INTERRUPT, "interrupted");
    /* self-attention: q, and this position's k, v into the cache */
    norm_rows(m, s->h, s->x, B, L->ln1_w, L->ln1_b);
    p[0].y = s->q, p[0].ldy = in, p[0].w = L->wq, p[0].b = L->bq;
    p[1].y = s->kv, p[1].ldy = 2 * in, p[1].w = L->wk, p[1].b = L->bk;
    p[2].y = s->kv + in, p[2].ldy = 2 * in, p[2].w = L->wv, p[2].b = L->bv;
    for (b = 0; b < 3; b++) p[b].out = in, p[b].beta = 0.0f;
    if (relattn_fwd_rows(m, s->pool, s->h, d, B, d, p, 3)) goto nomem;
    for (b = 0; b < B; b++) {
      memcpy(ck + b * per + (size_t)t * in, s->kv + (size_t)b * 2 * in,
             sizeof(float) * in);
      memcpy(cv + b * per + (size_t)t * in, s->kv + (size_t)b * 2 * in + in,
             sizeof(float) * in);
    }
    /* each beam's query over its cache: the products are vecmath's
    ** dot_heads and axpy_heads (a scalar chain of dependent adds was about
    ** half of a T5 step at one thread), plus the bias of each distance */
    for (b = 0; b < B; b++) {
      vec->dot_heads(s->scores, (int)lds, s->q + (size_t)b * in, ck + b * per,
                     in, t + 1, H, dh, 1.0f);
      for (h = 0; h < H; h++) {
        const float *bias = m->dec_rel_bias + (size_t)h * c->pos.num_buckets;
        float *sc = s->scores + (size_t)h * lds;
        for (j = 0; j <= t; j++) sc[j] += bias[s->bucket[t - j]];
        sums[h] = weights(vec, sc, t + 1);
      }
      vec->axpy_heads(s->att + (size_t)b * in, s->scores, (int)lds,
                      cv + b * per, in, t + 1, H, dh);
      for (h = 0; h < H; h++)
        divide(s->att + (size_t)b * in + (size_t)h * dh, dh, sums[h]);
    }
    if (one(s, s->x, d, s->att, in, in, d, L->wo, L->bo, 1.0f)) goto nomem;
    /* cross-attention over the source's keys and values */
    norm_rows(m, s->h, s->x, B, L->lnx_w, L->lnx_b);
    if (one(s, s->q, in, s->h, d, d, in, L->xq, L->bxq, 0.0f)) goto nomem;
    cross_rows(c, s->att, in, s->q, in, B, s->xk + (size_t)l * s->n_src * in,
               s->xv + (size_t)l * s->n_src * in, in, s->n_src, s->scores, lds);
    if (one(s, s->x, d, s->att, in, in, d, L->xo, L->bxo, 1.0f)) goto nomem;
    norm_rows(m, s->h, s->x, B, L->ln2_w, L->ln2_b);
    if (relattn_fwd_ffn_rows(m, L, s->pool, s->x, s->h, B, s->hid))
      goto nomem;
  }
  norm_rows(m, s->x, s->x, B, m->dec_lnf_w, m->dec_lnf_b);
  if (head_rows(m, s->pool, relattn_pool_worker(s->pool), logits, s->x, B))
    goto nomem;
  s->t++;
  return RELATTN_OK;
nomem:
  return relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                        "%s: out of memory for worker scratch", fn);
}

static void embed_rows(s2s *s, const int *token) {
  const relattn_model *m = s->m;
  const int d = m->cfg.d_model;
  int b;
  for (b = 0; b < s->beams; b++)
    relattn_model_embed(m, s->x + (size_t)b * d, token[b]);
}

int relattn_s2s_open(const relattn_model *m, const int *src, int n_src,
                     int beams, int max_len, relattn_pool *pool,
                     relattn_dec **out, float *logits, char *err,
                     size_t errsz) {
  static const char fn[] = "relattn_s2s_open";
  const relattn_config *c;
  s2s *s = NULL;
  float *enc = NULL, *row0 = NULL;
  size_t floats;
  int rc, l, k, *start = NULL, blas;
  if (out) *out = NULL;
  rc = check_model(m, fn, err, errsz);
  if (rc != RELATTN_OK) return rc;
  c = &m->cfg;
  if (!src || n_src < 1 || beams < 1 || max_len < 1 || !pool || !out ||
      !logits)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "%s: needs a source of at least 1 token, beams and "
                          "max_len of at least 1, a pool and outputs",
                          fn);
  floats = state_floats(m, n_src, beams, max_len, NULL);
  if (!floats)
    return relattn_errorf(err, errsz, RELATTN_ERR_TOOBIG,
                          "%s: the cache's size overflows", fn);
  s = relattn_alloc(sizeof *s);
  enc = relattn_alloc(sizeof(float) * (size_t)n_src * c->d_model);
  start = relattn_alloc(sizeof(int) * (size_t)beams);
  if (s) {
    memset(s, 0, sizeof *s);
    s->mem = relattn_alloc(sizeof(float) * floats);
  }
  if (!s || !s->mem || !enc || !start) {
    rc = relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                        "%s: out of memory for the cache (%zu bytes)", fn,
                        sizeof(float) * floats);
    goto fail;
  }
  s->m = m, s->pool = pool, s->beams = beams, s->max_len = max_len;
  s->n_src = n_src, s->in = relattn_config_inner(c);
  s->hw = c->d_model > s->in ? c->d_model : s->in;
  state_floats(m, n_src, beams, max_len, s);
  for (k = 0; k < max_len; k++) /* delta = j - t = -k */
    s->bucket[k] = relattn_t5_bucket(-k, 0, c->pos.num_buckets,
                                     c->pos.max_distance);
  blas = relattn_blas_single();
  rc = encode(m, src, n_src, enc, pool, fn, err, errsz);
  /* each layer's cross keys and values, once */
  for (l = 0; rc == RELATTN_OK && l < c->dec_layers; l++) {
    const relattn_layer *L = &m->dec_layers[l];
    const int in = s->in, d = c->d_model;
    relattn_fwd_prod p[2];
    p[0].y = s->xk + (size_t)l * n_src * in, p[0].w = L->xk, p[0].b = L->bxk;
    p[1].y = s->xv + (size_t)l * n_src * in, p[1].w = L->xv, p[1].b = L->bxv;
    p[0].ldy = p[1].ldy = in, p[0].out = p[1].out = in;
    p[0].beta = p[1].beta = 0.0f;
    if (relattn_fwd_rows(m, pool, enc, d, n_src, d, p, 2))
      rc = relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                          "%s: out of memory for worker scratch", fn);
  }
  if (rc == RELATTN_OK && relattn_pool_poll(pool))
    rc = relattn_errorf(err, errsz, RELATTN_ERR_INTERRUPT, "interrupted");
  if (rc == RELATTN_OK) {
    /* every beam starts from decoder.start: the same logits; beam 0's out */
    for (k = 0; k < beams; k++) start[k] = c->dec_start;
    embed_rows(s, start);
    row0 = relattn_alloc(sizeof(float) * (size_t)beams * c->vocab_size);
    if (!row0)
      rc = relattn_errorf(err, errsz, RELATTN_ERR_NOMEM, "%s: out of memory",
                          fn);
    else
      rc = step_rows(s, row0, fn, err, errsz);
    if (rc == RELATTN_OK)
      memcpy(logits, row0, sizeof(float) * c->vocab_size);
  }
  relattn_blas_restore(blas);
  relattn_free(row0);
  if (rc != RELATTN_OK) goto fail;
  relattn_free(enc);
  relattn_free(start);
  *out = (relattn_dec *)(void *)s;
  return RELATTN_OK;
fail:
  relattn_free(enc);
  relattn_free(start);
  if (s) relattn_free(s->mem);
  relattn_free(s);
  return rc;
}

int relattn_s2s_step(relattn_dec *d, const int *parent, const int *token,
                     float *logits, char *err, size_t errsz) {
  static const char fn[] = "relattn_s2s_step";
  s2s *s = (s2s *)(void *)d;
  const relattn_config *c;
  int b, l, moved = 0, rc, blas;
  if (!s || !token || !logits)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "%s: needs a state, tokens and logits", fn);
  c = &s->m->cfg;
  if (s->t >= s->max_len)
    return relattn_errorf(err, errsz, RELATTN_ERR_TOOBIG,
                          "%s: the cache is full (max_len %d tokens)", fn,
                          s->max_len);
  for (b = 0; b < s->beams; b++) {
    if (token[b] < 0 || token[b] >= c->vocab_size)
      return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                            "%s: token %d of beam %d is not below vocab_size "
                            "%d",
                            fn, token[b], b, c->vocab_size);
    if (parent && (parent[b] < 0 || parent[b] >= s->beams))
      return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                            "%s: parent %d of beam %d is not a beam (0 to %d)",
                            fn, parent[b], b, s->beams - 1);
    if (parent && parent[b] != b) moved = 1;
  }
  if (moved) {
    /* beam b takes parent[b]'s rows 0..t-1, layer by layer through tmp */
    const size_t per = (size_t)s->max_len * s->in, rows = (size_t)s->t * s->in;
    for (l = 0; l < 2 * c->dec_layers; l++) {
      float *cache = (l % 2 ? s->cv : s->ck) + (size_t)(l / 2) * s->beams * per;
      for (b = 0; b < s->beams; b++)
        memcpy(s->tmp + b * per, cache + b * per, sizeof(float) * rows);
      for (b = 0; b < s->beams; b++)
        memcpy(cache + b * per, s->tmp + (size_t)parent[b] * per,
               sizeof(float) * rows);
    }
  }
  embed_rows(s, token);
  blas = relattn_blas_single();
  rc = step_rows(s, logits, fn, err, errsz);
  relattn_blas_restore(blas);
  return rc;
}

void relattn_s2s_close(relattn_dec *d) {
  s2s *s = (s2s *)(void *)d;
  if (!s) return;
  relattn_free(s->mem);
  relattn_free(s);
}

/* ---- teacher forcing ----------------------------------------------------- */

/* Buffers of relattn_s2s_forward, in floats: enc (S, d), x (T, d), h (T,
** hw), qkv (T, 3 in), att (T, in), cross k, v (S, in) each, hid (FFN_ROWS,
** 2 d_ff): the FFN runs on blocks of rows, so no (T, d_ff) matrix is made,
** scores_floats(max(S, T)), a block of logits (HEAD_ROWS, vocab). */
#define HEAD_ROWS 64
#define FFN_ROWS 256
static size_t forward_floats(const relattn_config *c, size_t S, size_t T) {
  const size_t d = (size_t)c->d_model, in = (size_t)relattn_config_inner(c);
  const size_t hw = d > in ? d : in, V = (size_t)c->vocab_size;
  size_t parts[9], total = 0, k;
  parts[0] = S * d, parts[1] = T * d, parts[2] = T * hw, parts[3] = 3 * T * in;
  parts[4] = T * in, parts[5] = 2 * S * in;
  parts[6] = 2 * (T < FFN_ROWS ? T : FFN_ROWS) * (size_t)c->d_ff;
  parts[7] = scores_floats(c, S > T ? S : T), parts[8] = HEAD_ROWS * V;
  for (k = 0; k < 9; k++)
    if (!relattn_add_ok(total, r16(parts[k]), &total)) return 0;
  return total;
}

size_t relattn_s2s_forward_memory(const relattn_model *m, int n_src,
                                  int n_tgt) {
  size_t f, b;
  if (!m || n_src < 1 || n_tgt < 1 || n_src > (1 << 30) || n_tgt > (1 << 30))
    return 0;
  f = forward_floats(&m->cfg, (size_t)n_src, (size_t)n_tgt);
  if (!f || !relattn_mul_ok(f, sizeof(float), &b) ||
      !relattn_add_ok(b, sizeof(relattn_scheme) + 16 * (size_t)n_tgt + 256,
                      &b))
    return 0;
  return b;
}

int relattn_s2s_forward(const relattn_model *m, relattn_s2s_req *r,
                        relattn_pool *pool, char *err, size_t errsz) {
  static const char fn[] = "relattn_s2s_forward";
  const relattn_config *c;
  relattn_scheme sch;
  relattn_pos_tables tb;
  float *mem = NULL, *enc, *x, *h, *qkv, *att, *xk, *xv, *hid, *scores, *lg;
  int rc, l, i, T, S, d, in, hw, w, blas;
  size_t floats;
  memset(&sch, 0, sizeof sch);
  rc = check_model(m, fn, err, errsz);
  if (rc != RELATTN_OK) return rc;
  c = &m->cfg;
  if (!r || !r->src || !r->tgt || r->n_src < 1 || r->n_tgt < 1 || !pool)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "%s: needs a source and a target of at least 1 "
                          "token, and a pool",
                          fn);
  S = r->n_src, T = r->n_tgt, d = c->d_model, in = relattn_config_inner(c);
  hw = d > in ? d : in;
  for (i = 0; i < T; i++)
    if (r->tgt[i] < 0 || r->tgt[i] >= c->vocab_size)
      return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                            "%s: target token %d at position %d is not below "
                            "vocab_size %d",
                            fn, (int)r->tgt[i], i, c->vocab_size);
  floats = relattn_s2s_forward_memory(m, S, T) ? forward_floats(c, S, T) : 0;
  if (!floats)
    return relattn_errorf(err, errsz, RELATTN_ERR_TOOBIG,
                          "%s: the buffers' size overflows", fn);
  mem = relattn_alloc(sizeof(float) * floats);
  if (!mem)
    return relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                          "%s: out of memory for %d target tokens", fn, T);
  enc = mem;
  x = enc + r16((size_t)S * d);
  h = x + r16((size_t)T * d);
  qkv = h + r16((size_t)T * hw);
  att = qkv + r16(3 * (size_t)T * in);
  xk = att + r16((size_t)T * in);
  xv = xk + (size_t)S * in;
  hid = xk + r16(2 * (size_t)S * in);
  scores = hid + r16(2 * (size_t)(T < FFN_ROWS ? T : FFN_ROWS) * c->d_ff);
  lg = scores + r16(scores_floats(c, (size_t)(S > T ? S : T)));
  blas = relattn_blas_single();
  w = relattn_pool_worker(pool);
  rc = encode(m, (const int *)r->src, S, enc, pool, fn, err, errsz);
  if (rc != RELATTN_OK) goto done;
  /* the decoder's input: decoder.start, then the target shifted right */
  for (i = 0; i < T; i++)
    relattn_model_embed(m, x + (size_t)i * d,
                        i ? r->tgt[i - 1] : c->dec_start);
  memset(&tb, 0, sizeof tb);
  tb.t[2] = m->dec_rel_bias;
  tb.count[2] = (int64_t)c->n_heads * c->pos.num_buckets;
  rc = relattn_scheme_build(&sch, &c->pos, &tb, T, c->n_heads,
                            relattn_config_d_head(c), 1, 0, err, errsz);
  if (rc != RELATTN_OK) goto done;
  for (l = 0; l < c->dec_layers; l++) {
    const relattn_layer *L = &m->dec_layers[l];
    relattn_attn a;
    if (relattn_pool_poll(pool)) {
      rc = relattn_errorf(err, errsz, RELATTN_ERR_INTERRUPT, "interrupted");
      goto done;
    }
    norm_rows(m, h, x, T, L->ln1_w, L->ln1_b);
    if (relattn_fwd_linear(m, pool, w, qkv, 3 * in, h, d, T, d, in, L->wq,
                           L->bq, 0.0f) ||
        relattn_fwd_linear(m, pool, w, qkv + in, 3 * in, h, d, T, d, in,
                           L->wk, L->bk, 0.0f) ||
        relattn_fwd_linear(m, pool, w, qkv + 2 * in, 3 * in, h, d, T, d, in,
                           L->wv, L->bv, 0.0f))
      goto nomem;
    memset(&a, 0, sizeof a);
    a.n = T, a.heads = c->n_heads, a.d_head = relattn_config_d_head(c);
    a.causal = 1;
    a.q = qkv, a.k = qkv + in, a.v = qkv + 2 * in;
    a.ldq = a.ldk = a.ldv = 3 * in;
    a.rel = &sch.rel;
    a.out = att, a.ldo = in;
    rc = relattn_attention(&a, pool, err, errsz);
    if (rc != RELATTN_OK) goto done;
    if (relattn_fwd_linear(m, pool, w, x, d, att, in, T, in, d, L->wo, L->bo,
                           1.0f))
      goto nomem;
    norm_rows(m, h, x, T, L->lnx_w, L->lnx_b);
    if (relattn_fwd_linear(m, pool, w, qkv, in, h, d, T, d, in, L->xq, L->bxq,
                           0.0f) ||
        relattn_fwd_linear(m, pool, w, xk, in, enc, d, S, d, in, L->xk,
                           L->bxk, 0.0f) ||
        relattn_fwd_linear(m, pool, w, xv, in, enc, d, S, d, in, L->xv,
                           L->bxv, 0.0f))
      goto nomem;
    cross_rows(c, att, in, qkv, in, T, xk, xv, in, S, scores,
               r16((size_t)(S > T ? S : T)));
    if (relattn_fwd_linear(m, pool, w, x, d, att, in, T, in, d, L->xo, L->bxo,
                           1.0f))
      goto nomem;
    norm_rows(m, h, x, T, L->ln2_w, L->ln2_b);
    /* the FFN in blocks of rows: hid holds 2 d_ff floats per row of one */
    for (i = 0; i < T; i += FFN_ROWS) {
      const int rows = T - i < FFN_ROWS ? T - i : FFN_ROWS;
      if (relattn_fwd_ffn(m, L, pool, w, x + (size_t)i * d, h + (size_t)i * d,
                          rows, hid))
        goto nomem;
    }
  }
  norm_rows(m, x, x, T, m->dec_lnf_w, m->dec_lnf_b);
  for (i = 0; i < T; i += HEAD_ROWS) {
    const int rows = T - i < HEAD_ROWS ? T - i : HEAD_ROWS;
    const int V = c->vocab_size;
    int k, t;
    if (head_rows(m, pool, w, lg, x + (size_t)i * d, rows)) goto nomem;
    if (r->logits)
      memcpy(r->logits + (size_t)i * V, lg, sizeof(float) * rows * (size_t)V);
    for (k = 0; k < rows; k++) {
      const float *z = lg + (size_t)k * V;
      float mx = z[0], lse;
      double sum = 0;
      int arg = 0;
      for (t = 1; t < V; t++)
        if (z[t] > mx) mx = z[t], arg = t;
      for (t = 0; t < V; t++) sum += expf(z[t] - mx);
      lse = mx + (float)log(sum);
      if (r->logprob) r->logprob[i + k] = z[r->tgt[i + k]] - lse;
      if (r->top_token) r->top_token[i + k] = arg;
      if (r->top_logprob) r->top_logprob[i + k] = mx - lse;
    }
  }
  if (relattn_pool_poll(pool))
    rc = relattn_errorf(err, errsz, RELATTN_ERR_INTERRUPT, "interrupted");
  goto done;
nomem:
  rc = relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                      "%s: out of memory for worker scratch", fn);
done:
  relattn_blas_restore(blas);
  relattn_scheme_free(&sch);
  relattn_free(mem);
  return rc;
}
