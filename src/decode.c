/*
** decode.c: incremental decoding of a decoder-only model over a key/value
** cache (relattn.h, relattn_dec_*), what src/generate.c searches over.
**
** HOW IT WORKS
** Each beam keeps, for every layer, the keys and values of the tokens it
** has seen: k (max_len, i) and v (max_len, i), i the attention's inner
** width, k rotated by its position under RoPE (so a key is rotated once).
** A new token is one row through the layers: its q, k, v by the same
** products as the forward pass (relattn_fwd_linear: panel-order float,
** int8 or bf16 weights), its k and v appended to the beam's cache, then the
** attention of that one query over the cached keys (attend_one below), the
** output projection, the FFN and the norms, and the LM head on the final
** row. So a token costs O(history) in the attention and O(1) elsewhere,
** not a rerun of the prefix.
** At batch 1 a token reads every weight once, so it is bound by memory
** bandwidth: the products run on the connection's threads, each one's
** output columns cut into tasks of whole panels (src/forward.c,
** relattn_fwd_rows; q, k and v one job), the LM head in fixed pieces of
** the vocabulary; every output is still computed by one thread in one
** order, so the bits do not depend on the thread count. The attention
** and the norms stay on the calling thread.
**
** The relative terms are those of the forward pass, as one relattn_rel per
** layer: Shaw's clipped tables (the layer's rel_k, rel_v), or what
** src/schemes.c builds for the longest history (max_len): T5's bucketed
** bias, ALiBi's slopes, RoPE's angles, DeBERTa's bucket map with each
** layer's tables; rel_key and Transformer-XL take the model's per-layer
** terms. For query i and key j <= i, with delta = j - i and b its row
** (relattn.h, relattn_rel):
**   e_j = s ((q^ + u) . k^_j + (q + w) . rk[b] + k_j . rq[b])
**         + beta[b] - slope |delta|
**   z   = sum_j softmax(e)_j (v_j + rv[b])
** the softmax that of the attention kernel (src/vecmath.c).
**
** The prefix at open goes through in chunks of up to CHUNK rows (the
** products take many rows at once; row r attends to the cache up to r),
** into beam 0's cache, which is then copied to the other beams. A step
** first reorders the caches by parent: beams whose parent is another beam
** take a copy of its rows, through a second cache (so memory is twice the
** cache with beams > 1, all of it known at open: relattn_dec_memory).
*/
#include "relattn.h"
#include "fwd.h"
#include "vecmath.h"

#include <math.h>
#include <string.h>

#define CHUNK 64              /* prefix rows per pass through the layers */

struct relattn_dec {
  const relattn_model *m;
  relattn_dec *s2s;           /* an encoder-decoder's state, or NULL */
  relattn_pool *pool;
  int beams, max_len, len;    /* len: tokens each beam's cache holds */
  int d, in, hw, dh, ff, rows_max;
  size_t cache_floats;        /* one beam's one layer: max_len * in */
  float *k, *v;               /* (layers, beams, max_len, in) */
  float *k2, *v2;             /* the same: a reorder's target (beams > 1) */
  relattn_rel *rel;           /* (layers) each layer's terms */
  relattn_scheme scheme;      /* the terms built for max_len, or none */
  float *x;                   /* (rows_max, d) residual stream */
  float *h;                   /* (rows_max, hw) normed input, then z */
  float *qkv;                 /* (rows_max, 3 in) */
  float *hid;                 /* (rows_max, ff (2 ff gated)) */
  float *ef, *tr;             /* (heads, max_len): each head's scores then
                              ** weights; (max_len): a table's rows (when
                              ** no more than the keys) */
  int *rb;                    /* (max_len) each key's table row */
  float *qa;                  /* (2 d_head) q + w; then a row quantized
                              ** for an int8 table */
  float *qr;                  /* (in) every head's q rotated + u */
  int *row_beam, *row_pos;    /* (rows_max) whose cache each row reads */
  float *last;                /* (rows_max, d) rows the head reads */
  void *mem;
};

/* Encoder-decoder models decode in src/seq2seq.c: their state is held in
** d->s2s, and open, step, close and memory pass through to it. */
static int is_seq2seq(const relattn_model *m) {
  return relattn_config_is_s2s(&m->cfg);
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Floats after qa's for one row of d_head quantized (src/qgemm.c: bytes
** rounded up to 64) or rounded to bf16 (d_head floats, even) for an int8
** (bf16) table's products: a quantized DeBERTa's. */
static size_t q8_row_floats(const relattn_config *c) {
  if (c->quant == RELATTN_QUANT_NONE || c->pos.type != RELATTN_POS_DEBERTA)
    return 0;
  return round16((size_t)relattn_config_d_head(c) + 64);
}

static int rows_max_of(int n_src, int beams) {
  const int chunk = n_src < CHUNK ? n_src : CHUNK;
  return chunk > beams ? chunk : beams;
}

static int h_width(const relattn_config *c) {
  const int in = relattn_config_inner(c);
  return in > c->d_model ? in : c->d_model;
}

/* Does the scheme take terms built by src/schemes.c for the history? */
static int builds_scheme(const relattn_model *m) {
  const int t = m->cfg.pos.type;
  if (t == RELATTN_POS_SHAW) return 0;
  if (m->terms && t != RELATTN_POS_DEBERTA) return 0; /* rel_key*, xl */
  return 1;
}

/* The scheme src/schemes.c builds (absolute positions: none) and its tables. */
static void scheme_args(const relattn_model *m, relattn_position *pos,
                        relattn_pos_tables *tb) {
  const relattn_config *c = &m->cfg;
  *pos = c->pos;
  if (pos->type == RELATTN_POS_ABSOLUTE) pos->type = RELATTN_POS_NONE;
  memset(tb, 0, sizeof *tb);
  if (c->pos.type == RELATTN_POS_T5) {
    tb->t[2] = m->rel_bias;
    tb->count[2] = (int64_t)c->n_heads * c->pos.num_buckets;
  }
  if (c->pos.type == RELATTN_POS_DEBERTA && m->terms) {
    const relattn_rel *t = &m->terms[0].rel;
    const int64_t per = (int64_t)t->rows * relattn_config_inner(c);
    /* an int8 table stands in for its floats (src/forward.c) */
    tb->t[0] = t->rk    ? t->rk
               : t->qrk ? (const float *)(const void *)t->qrk
                        : (const float *)(const void *)t->brk;
    tb->t[2] = t->rq    ? t->rq
               : t->qrq ? (const float *)(const void *)t->qrq
                        : (const float *)(const void *)t->brq;
    tb->count[0] = tb->t[0] ? per : 0;
    tb->count[2] = tb->t[2] ? per : 0;
  }
}

/* Floats of each buffer, in the order they are laid out; 0 on overflow. */
static size_t layout(const relattn_model *m, int n_src, int beams,
                     int max_len, size_t part[8]) {
  const relattn_config *c = &m->cfg;
  const size_t in = (size_t)relattn_config_inner(c);
  const size_t rows = (size_t)rows_max_of(n_src, beams);
  const size_t ff = (size_t)c->d_ff * (c->ffn_gated ? 2 : 1);
  size_t cache, total = 0;
  int i;
  if (!relattn_mul_ok((size_t)max_len, in, &cache) ||
      !relattn_mul_ok(cache, (size_t)beams, &cache) ||
      !relattn_mul_ok(cache, (size_t)c->n_layers, &cache) ||
      !relattn_mul_ok(cache, beams > 1 ? 4 : 2, &cache))
    return 0;
  part[0] = round16(cache);                         /* k, v (and k2, v2) */
  part[1] = round16(rows * (size_t)c->d_model);     /* x */
  part[2] = round16(rows * (size_t)h_width(c));     /* h */
  part[3] = round16(rows * 3 * in);                 /* qkv */
  part[4] = round16(rows * ff);                     /* hid */
  part[5] = ((size_t)c->n_heads + 2) * round16((size_t)max_len); /* ef tr rb */
  part[6] = round16(2 * (size_t)relattn_config_d_head(c)) +
            q8_row_floats(c) +
            round16(2 * rows) + round16(in) +       /* qa, row_beam/pos, qr */
            round16(rows * (size_t)c->d_model);     /* last */
  part[7] = round16((sizeof(relattn_rel) * (size_t)c->n_layers + 3) / 4);
  for (i = 0; i < 8; i++)
    if (!relattn_add_ok(total, part[i], &total)) return 0;
  return total;
}

size_t relattn_dec_memory(const relattn_model *m, int n_src, int beams,
                          int max_len) {
  size_t part[8], floats, bytes, extra = 0;
  if (m && is_seq2seq(m)) {
    size_t b = relattn_s2s_memory(m, n_src, beams, max_len);
    return b == SIZE_MAX || b > SIZE_MAX - sizeof(relattn_dec)
               ? SIZE_MAX
               : b + sizeof(relattn_dec);
  }
  if (!m || n_src < 1 || beams < 1 || max_len < n_src) return SIZE_MAX;
  floats = layout(m, n_src, beams, max_len, part);
  if (!floats || !relattn_mul_ok(floats, sizeof(float), &bytes))
    return SIZE_MAX;
  if (builds_scheme(m)) {
    relattn_position pos;
    relattn_pos_tables tb;
    scheme_args(m, &pos, &tb);
    extra = relattn_scheme_bytes(&pos, &tb, max_len, m->cfg.n_heads,
                                 relattn_config_d_head(&m->cfg));
  }
  if (m->cfg.quant != RELATTN_QUANT_NONE) {
    /* the int8 (bf16) products' rows, in the pool's scratch */
    const relattn_config *c = &m->cfg;
    int in = c->d_model > c->d_ff ? c->d_model : c->d_ff;
    const int rows = rows_max_of(n_src, beams);
    if (relattn_config_inner(c) > in) in = relattn_config_inner(c);
    if (!relattn_add_ok(extra,
                        c->quant == RELATTN_QUANT_INT8
                            ? relattn_q8_scratch(rows, in)
                            : relattn_bf16_scratch(rows, in),
                        &extra))
      return SIZE_MAX;
  }
  if (extra == SIZE_MAX ||
      !relattn_add_ok(bytes, extra + sizeof(relattn_dec), &bytes))
    return SIZE_MAX;
  return bytes;
}

/* Layer l's terms (the scheme's, with DeBERTa's tables of layer l). */
static void layer_rel(relattn_dec *d, int l) {
  const relattn_model *m = d->m;
  const relattn_config *c = &m->cfg;
  relattn_rel *r = &d->rel[l];
  memset(r, 0, sizeof *r);
  if (c->pos.type == RELATTN_POS_SHAW) {
    /* Shaw et al. 2018, eq. 3-4: rows clip(j - i, -k, k) + k */
    r->band = c->clip;
    r->rows = 2 * c->clip + 1;
    r->per_head = c->per_head;
    r->rk = m->layers[l].rel_k;
    r->rv = c->rel_values ? m->layers[l].rel_v : NULL;
    return;
  }
  if (!builds_scheme(m)) {
    *r = m->terms[l].rel;
    return;
  }
  *r = d->scheme.rel;
  if (c->pos.type == RELATTN_POS_DEBERTA) {
    r->rk = m->terms[l].rel.rk;
    r->rq = m->terms[l].rel.rq;
    r->qrk = m->terms[l].rel.qrk;
    r->qrq = m->terms[l].rel.qrq;
    r->brk = m->terms[l].rel.brk;
    r->brq = m->terms[l].rel.brq;
  }
}

/* x rounded to bf16 (relattn_f32_to_bf16) as a float. */
static float bf16_value(float x) {
  const uint32_t u = (uint32_t)relattn_f32_to_bf16(x) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static float dot(const float *a, const float *b, int n) {
  float s = 0.0f;
  int i;
  for (i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* The table row of distance delta (relattn.h, relattn_rel). */
static int row_of(const relattn_rel *t, int delta) {
  const int c =
      delta < -t->band ? -t->band : (delta > t->band ? t->band : delta);
  return t->bucket ? t->bucket[c + t->band] : c + t->band;
}

/* Does the scheme read a table row per key? */
static int rk_any(const relattn_rel *t) {
  return t->rk || t->rq || t->qrk || t->qrq || t->brk || t->brq || t->rv ||
         t->beta;
}

/* The first r dims of x rotated by position p's angles into out, the rest
** copied (as src/attention.c rotates its rows). */
static void rotate(float *out, const float *x, int dh, const relattn_rel *t,
                   int p) {
  const int h2 = t->rot_dim / 2;
  const float *c = t->rot_cos + (size_t)p * h2;
  const float *s = t->rot_sin + (size_t)p * h2;
  int i;
  for (i = 0; i < h2; i++) {
    const int ia = t->rot_half ? i : 2 * i;
    const int ib = t->rot_half ? i + h2 : 2 * i + 1;
    const float a = x[ia], b = x[ib];
    out[ia] = a * c[i] - b * s[i];
    out[ib] = b * c[i] + a * s[i];
  }
  for (i = t->rot_dim; i < dh; i++) out[i] = x[i];
}

/* One query at position i over keys and values 0..i of a cache (rows in
** floats apart): z (H d_head) from q (H d_head, not rotated). The products
** over the keys are src/vecmath.c's dot_heads and axpy_heads (the query
** against the cache's rows, read in place, every head in one pass, in one
** order on every path and kernel set: sgemm packed the cache on every
** call, 38% of a 1,500-token generation of a d512 decoder); a table of
** no more rows than there are keys has its query-side products made once
** per row and its value rows weighted by each row's summed probability,
** so Shaw's 2k+1 rows cost O(k d), not O(n d). */
static void attend_one(relattn_dec *d, const relattn_rel *t, const float *q,
                       int i, const float *K, const float *V, float *z) {
  const int H = d->m->cfg.n_heads, dh = d->dh, in = d->in, n = i + 1;
  const float s = (float)(t->scale > 0 ? t->scale : 1.0 / sqrt((double)dh));
  const size_t ts = t->per_head ? (size_t)t->rows * dh : 0;
  const int by_row = t->rows <= n;
  const relattn_vec *vec = relattn_vec_ops();
  float *qw = d->qa + dh;
  uint8_t *xq = (uint8_t *)(d->qa + round16(2 * (size_t)dh));
  const size_t ldef = round16((size_t)d->max_len);
  float *tr = d->tr;
  int *rb = d->rb;
  int h, j, c;
  /* each key's table row, the same for every head */
  if (rk_any(t))
    for (j = 0; j < n; j++) rb[j] = row_of(t, j - i);
  /* s (q^ + u) . k^_j for every key and head, the cache read once */
  for (h = 0; h < H; h++) {
    float *qa = d->qr + (size_t)h * dh;
    if (t->rot_dim) rotate(qa, q + (size_t)h * dh, dh, t, i);
    else memcpy(qa, q + (size_t)h * dh, sizeof(float) * dh);
    if (t->u)
      for (c = 0; c < dh; c++) qa[c] += t->u[(size_t)h * dh + c];
  }
  vec->dot_heads(d->ef, (int)ldef, d->qr, K, in, n, H, dh, s);
  for (h = 0; h < H; h++) {
    const float *qh = q + (size_t)h * dh;
    const float *rk = t->rk ? t->rk + h * ts : NULL;
    const float *rq = t->rq ? t->rq + h * ts : NULL;
    const relattn_q8w *qk8 = t->qrk ? t->qrk + h : NULL;
    const relattn_q8w *qq8 = t->qrq ? t->qrq + h : NULL;
    const relattn_bf16w *bk16 = t->brk ? t->brk + h : NULL;
    const relattn_bf16w *bq16 = t->brq ? t->brq + h : NULL;
    const float *beta = t->beta ? t->beta + (size_t)h * t->rows : NULL;
    const float slope = t->slope ? t->slope[h] : 0.0f;
    float *ef = d->ef + (size_t)h * ldef;
    float mx, sum, sx;
    int32_t zx;
    if (rk) {
      memcpy(qw, qh, sizeof(float) * dh);
      if (t->w)
        for (c = 0; c < dh; c++) qw[c] += t->w[(size_t)h * dh + c];
      if (by_row) {
        vec->dot_rows(tr, qw, rk, dh, t->rows, dh, s);
        for (j = 0; j < n; j++) ef[j] += tr[rb[j]];
      } else {
        for (j = 0; j < n; j++)
          ef[j] += s * dot(qw, rk + (size_t)rb[j] * dh, dh);
      }
    }
    if (qk8) {
      /* the int8 table: q + w quantized per row as src/attention.c's
      ** products take it, each key's row of the product (the same bits) */
      memcpy(qw, qh, sizeof(float) * dh);
      if (t->w)
        for (c = 0; c < dh; c++) qw[c] += t->w[(size_t)h * dh + c];
      relattn_q8_quantize_rows_on(relattn_q8_path(), xq, dh, &sx, &zx, qw, dh,
                                  1, dh);
      for (j = 0; j < n; j++)
        ef[j] += s * relattn_q8w_dot(qk8, rb[j], xq, sx, zx);
    }
    if (bk16) {
      /* the bf16 table: q + w rounded to bf16, each key's row of the
      ** product as relattn_bf16_gemm sums it */
      float *xr = (float *)(void *)xq;
      for (c = 0; c < dh; c++)
        xr[c] = bf16_value(qh[c] + (t->w ? t->w[(size_t)h * dh + c] : 0.0f));
      for (j = 0; j < n; j++) ef[j] += s * relattn_bf16w_dot(bk16, rb[j], xr);
    }
    if (rq)
      for (j = 0; j < n; j++)
        ef[j] += s * dot(K + (size_t)j * in + (size_t)h * dh,
                         rq + (size_t)rb[j] * dh, dh);
    if (bq16)
      for (j = 0; j < n; j++) {
        float *xr = (float *)(void *)xq;
        const float *kr = K + (size_t)j * in + (size_t)h * dh;
        for (c = 0; c < dh; c++) xr[c] = bf16_value(kr[c]);
        ef[j] += s * relattn_bf16w_dot(bq16, rb[j], xr);
      }
    if (qq8)
      for (j = 0; j < n; j++) {
        relattn_q8_quantize_rows_on(relattn_q8_path(), xq, dh, &sx, &zx,
                                    K + (size_t)j * in + (size_t)h * dh, in,
                                    1, dh);
        ef[j] += s * relattn_q8w_dot(qq8, rb[j], xq, sx, zx);
      }
    if (beta)
      for (j = 0; j < n; j++) ef[j] += beta[rb[j]];
    if (slope != 0.0f)
      for (j = 0; j < n; j++) ef[j] -= slope * (float)(i - j);
    /* the softmax as the attention kernel takes it (src/vecmath.c) */
    mx = vec->max(ef, n);
    sum = vec->exp_sum(ef, n, mx);
    vec->scale(ef, n, 1.0f / sum);
  }
  /* z = sum_j p_j (v_j + rv[b]) */
  vec->axpy_heads(z, d->ef, (int)ldef, V, in, n, H, dh);
  if (!t->rv) return;
  for (h = 0; h < H; h++) {
    const float *rv = t->rv + h * ts, *ef = d->ef + (size_t)h * ldef;
    float *zh = z + (size_t)h * dh;
    if (by_row) {
      /* qw (free by now) takes the rows' weighted sum */
      memset(tr, 0, sizeof(float) * (size_t)t->rows);
      for (j = 0; j < n; j++) tr[rb[j]] += ef[j];
      vec->axpy_rows(qw, tr, rv, dh, t->rows, dh);
      for (c = 0; c < dh; c++) zh[c] += qw[c];
    } else {
      for (j = 0; j < n; j++) {
        const float *r = rv + (size_t)rb[j] * dh;
        for (c = 0; c < dh; c++) zh[c] += ef[j] * r[c];
      }
    }
  }
}

static float *cache_of(const relattn_dec *d, float *base, int l, int b) {
  return base + ((size_t)l * d->beams + (size_t)b) * d->cache_floats;
}

/* rows rows through every layer: row r is token tok[r] at position
** row_pos[r] of beam row_beam[r]'s cache; rows of one beam come in order of
** position. The final rows (normed) land in d->last. */
static int run_rows(relattn_dec *d, const int *tok, int rows, char *err,
                    size_t errsz) {
  const relattn_model *m = d->m;
  const relattn_config *c = &m->cfg;
  const int D = d->d, in = d->in, hw = d->hw, ff = d->ff;
  const int pre = c->norm == RELATTN_NORM_PRE;
  relattn_pool *pool = d->pool;
  int r, l, j;
  for (r = 0; r < rows; r++) {
    float *x = d->x + (size_t)r * D;
    relattn_model_embed(m, x, tok[r]);
    if (m->pos_emb) {
      const float *pe = m->pos_emb + (size_t)d->row_pos[r] * D;
      for (j = 0; j < D; j++) x[j] += pe[j];
    }
    if (m->emb_ln_w)
      relattn_norm(x, x, 1, D, m->emb_ln_w, m->emb_ln_b, c->norm_eps,
                   c->norm_kind);
  }
  for (l = 0; l < c->n_layers; l++) {
    const relattn_layer *L = &m->layers[l];
    const relattn_rel *t = &d->rel[l];
    const float *a_in = d->x;
    int lda = D;
    if (relattn_pool_poll(pool))
      return relattn_errorf(err, errsz, RELATTN_ERR_INTERRUPT, "interrupted");
    if (pre) {
      relattn_norm(d->h, d->x, rows, D, L->ln1_w, L->ln1_b, c->norm_eps,
                   c->norm_kind);
      a_in = d->h;
    }
    (void)hw;
    {
      relattn_fwd_prod p[3];
      int i;
      for (i = 0; i < 3; i++) {
        p[i].y = d->qkv + (size_t)i * in, p[i].ldy = 3 * in, p[i].out = in;
        p[i].beta = 0.0f;
      }
      p[0].w = L->wq, p[0].b = L->bq, p[1].w = L->wk, p[1].b = L->bk;
      p[2].w = L->wv, p[2].b = L->bv;
      if (relattn_fwd_rows(m, pool, a_in, lda, rows, D, p, 3)) goto nomem;
    }
    /* the rows' keys (rotated) and values into their caches */
    for (r = 0; r < rows; r++) {
      const float *q = d->qkv + (size_t)r * 3 * in;
      const int p = d->row_pos[r];
      float *kc = cache_of(d, d->k, l, d->row_beam[r]) + (size_t)p * in;
      float *vc = cache_of(d, d->v, l, d->row_beam[r]) + (size_t)p * in;
      if (t->rot_dim) {
        int h;
        for (h = 0; h < c->n_heads; h++)
          rotate(kc + (size_t)h * d->dh, q + in + (size_t)h * d->dh, d->dh,
                 t, p);
      } else {
        memcpy(kc, q + in, sizeof(float) * in);
      }
      memcpy(vc, q + 2 * in, sizeof(float) * in);
    }
    for (r = 0; r < rows; r++)
      attend_one(d, t, d->qkv + (size_t)r * 3 * in, d->row_pos[r],
                 cache_of(d, d->k, l, d->row_beam[r]),
                 cache_of(d, d->v, l, d->row_beam[r]),
                 d->h + (size_t)r * d->hw);
    /* the rest of the layer, as src/forward.c's ffn_task */
    {
      relattn_fwd_prod p;
      p.y = d->x, p.ldy = D, p.out = D, p.w = L->wo, p.b = L->bo;
      p.beta = 1.0f;
      if (relattn_fwd_rows(m, pool, d->h, d->hw, rows, in, &p, 1)) goto nomem;
    }
    if (pre) {
      relattn_norm(d->h, d->x, rows, D, L->ln2_w, L->ln2_b, c->norm_eps,
                   c->norm_kind);
      a_in = d->h;
    } else {
      relattn_norm(d->x, d->x, rows, D, L->ln1_w, L->ln1_b, c->norm_eps,
                   c->norm_kind);
      a_in = d->x;
    }
    if (relattn_fwd_ffn_rows(m, L, pool, d->x, a_in, rows, d->hid))
      goto nomem;
    if (!pre)
      relattn_norm(d->x, d->x, rows, D, L->ln2_w, L->ln2_b, c->norm_eps,
                   c->norm_kind);
  }
  (void)ff;
  if (pre)
    relattn_norm(d->last, d->x, rows, D, m->lnf_w, m->lnf_b, c->norm_eps,
                 c->norm_kind);
  else
    memcpy(d->last, d->x, sizeof(float) * (size_t)rows * D);
  return RELATTN_OK;
nomem:
  return relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                        "relattn_generate: out of memory for scratch");
}

/* The LM head on rows of d->last starting at first: logits (rows, vocab).
** 0, or 1 when worker 0's scratch could not be had. */
static int head(relattn_dec *d, int first, int rows, float *logits) {
  return relattn_fwd_head(d->m, d->pool, 0, logits,
                          d->last + (size_t)first * d->d, d->d, rows, 1.0f,
                          NULL);
}

int relattn_dec_open(const relattn_model *m, const int *src, int n_src,
                     int beams, int max_len, relattn_pool *pool,
                     relattn_dec **out, float *logits, char *err,
                     size_t errsz) {
  const relattn_config *c;
  relattn_dec *d;
  size_t part[8], floats;
  float *p;
  int i, rc, b, l, done;
  *out = NULL;
  if (!m || !src || !pool || !logits)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: model, input, pool and logits "
                          "required");
  if (is_seq2seq(m)) {
    d = relattn_alloc(sizeof *d);
    if (!d)
      return relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                            "relattn_generate: out of memory");
    memset(d, 0, sizeof *d);
    d->m = m;
    rc = relattn_s2s_open(m, src, n_src, beams, max_len, pool, &d->s2s,
                          logits, err, errsz);
    if (rc != RELATTN_OK) {
      relattn_free(d);
      return rc;
    }
    *out = d;
    return RELATTN_OK;
  }
  c = &m->cfg;
  if (c->arch != RELATTN_DECODER || c->head != RELATTN_HEAD_LM)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: the model is not a decoder with "
                          "an LM head");
  if (n_src < 1 || beams < 1 || max_len < n_src)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: %d input tokens, %d beams, a "
                          "cache of %d tokens",
                          n_src, beams, max_len);
  for (i = 0; i < n_src; i++)
    if (src[i] < 0 || src[i] >= c->vocab_size)
      return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                            "relattn_generate: token %d at position %d is not "
                            "below vocab_size %d",
                            src[i], i, c->vocab_size);
  if ((c->pos.type == RELATTN_POS_ABSOLUTE ||
       c->pos.type == RELATTN_POS_REL_KEY ||
       c->pos.type == RELATTN_POS_REL_KEY_QUERY) && max_len > c->max_len)
    return relattn_errorf(err, errsz, RELATTN_ERR_TOOBIG,
                          "relattn_generate: %d tokens in all (input and "
                          "new), over the model's %d positions",
                          max_len, c->max_len);
  if ((c->pos.type == RELATTN_POS_REL_KEY ||
       c->pos.type == RELATTN_POS_REL_KEY_QUERY ||
       c->pos.type == RELATTN_POS_XL || c->pos.type == RELATTN_POS_DEBERTA) &&
      !m->terms)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: the model's terms are not built "
                          "(relattn_model_prepare)");
  floats = layout(m, n_src, beams, max_len, part);
  if (!floats || relattn_dec_memory(m, n_src, beams, max_len) == SIZE_MAX)
    return relattn_errorf(err, errsz, RELATTN_ERR_TOOBIG,
                          "relattn_generate: a cache of %d tokens for %d "
                          "beams overflows",
                          max_len, beams);
  d = relattn_alloc(sizeof *d);
  if (!d)
    return relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                          "relattn_generate: out of memory");
  memset(d, 0, sizeof *d);
  d->mem = relattn_alloc(sizeof(float) * floats);
  if (!d->mem) {
    relattn_free(d);
    return relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                          "relattn_generate: out of memory for a cache of %d "
                          "tokens (%d beams)",
                          max_len, beams);
  }
  d->m = m;
  d->pool = pool;
  d->beams = beams;
  d->max_len = max_len;
  d->d = c->d_model;
  d->in = relattn_config_inner(c);
  d->hw = h_width(c);
  d->dh = relattn_config_d_head(c);
  d->ff = c->d_ff;
  d->rows_max = rows_max_of(n_src, beams);
  d->cache_floats = (size_t)max_len * d->in;
  p = d->mem;
  d->k = p;
  d->v = d->k + part[0] / (beams > 1 ? 4 : 2);
  if (beams > 1) {
    d->k2 = d->v + part[0] / 4;
    d->v2 = d->k2 + part[0] / 4;
  }
  p += part[0];
  d->x = p, p += part[1];
  d->h = p, p += part[2];
  d->qkv = p, p += part[3];
  d->hid = p, p += part[4];
  d->ef = p;
  d->tr = d->ef + (size_t)c->n_heads * round16((size_t)max_len);
  d->rb = (int *)(d->tr + round16((size_t)max_len));
  p += part[5];
  d->qa = p, p += round16(2 * (size_t)d->dh) + q8_row_floats(c);
  d->qr = p, p += round16((size_t)d->in);
  d->row_beam = (int *)p;
  d->row_pos = d->row_beam + d->rows_max;
  p += round16(2 * (size_t)d->rows_max);
  d->last = p, p += round16((size_t)d->rows_max * d->d);
  d->rel = (relattn_rel *)p;
  if (builds_scheme(m)) {
    relattn_position pos;
    relattn_pos_tables tb;
    scheme_args(m, &pos, &tb);
    rc = relattn_scheme_build(&d->scheme, &pos, &tb, max_len, c->n_heads,
                              d->dh, 1, c->pos.type == RELATTN_POS_DEBERTA,
                              err, errsz);
    if (rc != RELATTN_OK) {
      relattn_dec_close(d);
      return rc;
    }
  }
  for (l = 0; l < c->n_layers; l++) layer_rel(d, l);

  /* the prefix, in chunks, into beam 0's cache */
  for (done = 0; done < n_src; done += CHUNK) {
    const int rows = n_src - done < CHUNK ? n_src - done : CHUNK;
    for (i = 0; i < rows; i++) {
      d->row_beam[i] = 0;
      d->row_pos[i] = done + i;
    }
    rc = run_rows(d, src + done, rows, err, errsz);
    if (rc != RELATTN_OK) {
      relattn_dec_close(d);
      return rc;
    }
    if (done + rows == n_src && head(d, rows - 1, 1, logits)) {
      relattn_dec_close(d);
      return relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                            "relattn_generate: out of memory for scratch");
    }
  }
  for (l = 0; l < c->n_layers; l++)
    for (b = 1; b < beams; b++) {
      memcpy(cache_of(d, d->k, l, b), cache_of(d, d->k, l, 0),
             sizeof(float) * (size_t)n_src * d->in);
      memcpy(cache_of(d, d->v, l, b), cache_of(d, d->v, l, 0),
             sizeof(float) * (size_t)n_src * d->in);
    }
  d->len = n_src;
  *out = d;
  return RELATTN_OK;
}

int relattn_dec_step(relattn_dec *d, const int *parent, const int *token,
                     float *logits, char *err, size_t errsz) {
  const relattn_config *c;
  int b, l, moved = 0, rc;
  if (!d || !token || !logits)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: state, tokens and logits "
                          "required");
  if (d->s2s) return relattn_s2s_step(d->s2s, parent, token, logits, err, errsz);
  c = &d->m->cfg;
  if (d->len >= d->max_len)
    return relattn_errorf(err, errsz, RELATTN_ERR_TOOBIG,
                          "relattn_generate: the cache is full (%d tokens)",
                          d->max_len);
  for (b = 0; b < d->beams; b++) {
    if (token[b] < 0 || token[b] >= c->vocab_size)
      return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                            "relattn_generate: token %d of beam %d is not "
                            "below vocab_size %d",
                            token[b], b, c->vocab_size);
    if (parent && (parent[b] < 0 || parent[b] >= d->beams))
      return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                            "relattn_generate: parent %d of beam %d is not a "
                            "beam",
                            parent[b], b);
    if (parent && parent[b] != b) moved = 1;
  }
  if (moved) {
    /* every beam's history from its parent's, through the second cache */
    float *t;
    const size_t bytes = sizeof(float) * (size_t)d->len * d->in;
    for (l = 0; l < c->n_layers; l++)
      for (b = 0; b < d->beams; b++) {
        memcpy(cache_of(d, d->k2, l, b), cache_of(d, d->k, l, parent[b]),
               bytes);
        memcpy(cache_of(d, d->v2, l, b), cache_of(d, d->v, l, parent[b]),
               bytes);
      }
    t = d->k, d->k = d->k2, d->k2 = t;
    t = d->v, d->v = d->v2, d->v2 = t;
  }
  for (b = 0; b < d->beams; b++) {
    d->row_beam[b] = b;
    d->row_pos[b] = d->len;
  }
  rc = run_rows(d, token, d->beams, err, errsz);
  if (rc != RELATTN_OK) return rc;
  if (head(d, 0, d->beams, logits))
    return relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                          "relattn_generate: out of memory for scratch");
  d->len++;
  return RELATTN_OK;
}

void relattn_dec_close(relattn_dec *d) {
  if (!d) return;
  if (d->s2s) relattn_s2s_close(d->s2s);
  relattn_scheme_free(&d->scheme);
  relattn_free(d->mem);
  relattn_free(d);
}
