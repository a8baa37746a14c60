/*
** attention.c: relative self-attention as one fused, blocked kernel, for
** every position scheme. It knows no scheme by name: it
** takes the relative terms as data (relattn_rel: a bucket map constant
** beyond a band, tables on the query, key and value sides, a scalar per
** bucket, a linear bias, a rotation, query offsets, a scale); src/schemes.c
** makes them from a scheme. Shaw, Uszkoreit & Vaswani 2018, eq. 3-4, with
** the value term of tensor2tensor's dot_product_attention_relative, is the
** case the notes below describe; the others add to it:
**
** HOW IT WORKS
** One task is one (head, block of queries). It walks the keys in blocks with
** an online softmax (running max m, running sum l, rescaled accumulators), so
** no n x n matrix exists anywhere. For a query block:
**   P = s Q rel_k^T                       (bq, 2k+1): one small GEMM
** then for each key block:
**   S = s Q K^T                           (bq, bk): one GEMM
** and each row i of S splits into three runs of columns: keys at distance
** j - i < -k, where the key term is the row constant P[i,0]; the band
** |j - i| <= k, where P's row segment is added to S (it is contiguous:
** column j takes P[i, j-i+k]); keys at > k, with P[i,2k]. The constants are
** folded into the softmax's subtraction (exp(S - (m - c))), so a block far
** from the diagonal, one run only, costs what plain attention costs. The
** weights' sums over the outer runs go to the edge buckets el[i], er[i]
** (rel_v's rows 0 and 2k) and the band's weights to their buckets B[i, j-i+k]
** (kept relative to their own max, rescaled only when the band is visited).
**   O += softmax weights . V              one GEMM, V read in place
** and at the end Z = (O + B rel_v) / l, B holding the buckets (one GEMM).
** So the relative terms cost O(n k d) + O(n k), not O(n^2 d): two GEMMs of
** (n, 2k+1, d) against attention's 4 n^2 d flops, and a pass over the band.
** With the causal mask only table rows 0..k are reachable, so both GEMMs
** use k+1 rows.
**
** Tables are clipped to what a sequence can reach: with k >= n only rows
** k-(n-1) .. k+(n-1) are used, which is a table of clip n-1. In general a
** query block's P covers the rows its distances reach (the band's bucket
** range), so an unclipped table (k >= n) costs a GEMM of about n rows per
** block, a second QK-like product, not memory of n x n.
**
** The other terms, in the same frame:
**   a bucket map b(delta) (T5, DeBERTa): the band gathers P[i, b(j-i)]
**       instead of adding a contiguous segment; far blocks are unchanged
**       (b is constant there);
**   scalars beta[b] (T5): added to P's rows, or P is beta itself;
**   a key-side table rq (DeBERTa p2c, rel_key_query): per key block
**       G = s rq K^T over the buckets the block reaches; far blocks add
**       G's edge row, a per-key vector;
**   a linear bias -m |j - i| (ALiBi): on each side of the band a per-query
**       constant plus m times the key's column, folded into the max and
**       exp passes (vec->max_ramp, exp_sum_ramp), so it costs no pass;
**   a rotation (RoPE): K rotated once per call into shared scratch, each
**       query block's Q rotated into its own;
**   query offsets u, w (Transformer-XL): added to the block's Q copies.
**
** The products run on src/gemm.c's kernel (the right operand, a block of
** keys or of table rows, put in its panel order per block; V read as it
** lies), or cblas_sgemm on a CPU without AVX2 and FMA. The block grid
** depends on n alone and each task does a fixed sequence of operations on
** its own rows, so the result is bitwise the same for any thread count.
** With n_q < n only the first n_q queries run (a classifier reads row 0 of
** the last layer alone): the grid is then the one of n_q queries over n
** keys, a function of (n, n_q).
*/
#include "relattn.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "vecmath.h"

/* Rows per GEMM in a block the causal mask cuts. */
#define CAUSAL_PANEL 64

/* Block sizes: queries per task, keys per step. Tunable for tests/bench. */
static int block_q = 256, block_k = 512;

void relattn_attention_blocks(int bq, int bk) {
  block_q = bq > 0 ? bq : 256;
  block_k = bk > 0 ? bk : 512;
}

/* The relative terms, with Shaw's shorthand turned into them. */
static relattn_rel terms_of(const relattn_attn *a) {
  relattn_rel t;
  if (a->rel) return *a->rel;
  memset(&t, 0, sizeof t);
  t.band = a->clip;
  t.rows = 2 * a->clip + 1;
  t.per_head = a->per_head;
  t.rk = a->rel_k;
  t.rv = a->rel_v;
  return t;
}

/* Table row of distance delta. */
static int bucket_of(const relattn_rel *t, long long delta) {
  long long c =
      delta < -t->band ? -t->band : (delta > t->band ? t->band : delta);
  return t->bucket ? t->bucket[c + t->band] : (int)(c + t->band);
}

/* The rows distances [dlo, dhi] reach: *lo, *hi. */
static void bucket_range(const relattn_rel *t, long long dlo, long long dhi,
                         int *lo, int *hi) {
  const long long D = t->band;
  long long a = dlo + D, b = dhi + D, x;
  a = a < 0 ? 0 : (a > 2 * D ? 2 * D : a);
  b = b < 0 ? 0 : (b > 2 * D ? 2 * D : b);
  if (!t->bucket) {
    *lo = (int)a;
    *hi = (int)b;
    return;
  }
  *lo = *hi = t->bucket[a];
  for (x = a + 1; x <= b; x++) {
    const int r = t->bucket[x];
    if (r < *lo) *lo = r;
    if (r > *hi) *hi = r;
  }
}

/* The first r dims of x (d floats) rotated by position p's angles into out;
** the rest copied. */
static void rotate_row(float *out, const float *x, int d, const relattn_rel *t,
                       int p) {
  const int h2 = t->rot_dim / 2;
  const float *c = t->rot_cos + (size_t)p * h2,
              *s = t->rot_sin + (size_t)p * h2;
  int i;
  if (t->rot_half) {
    for (i = 0; i < h2; i++) {
      const float a = x[i], b = x[i + h2];
      out[i] = a * c[i] - b * s[i];
      out[i + h2] = b * c[i] + a * s[i];
    }
  } else {
    for (i = 0; i < h2; i++) {
      const float a = x[2 * i], b = x[2 * i + 1];
      out[2 * i] = a * c[i] - b * s[i];
      out[2 * i + 1] = b * c[i] + a * s[i];
    }
  }
  for (i = t->rot_dim; i < d; i++) out[i] = x[i];
}

typedef struct attn_job {
  const relattn_attn *a;
  relattn_rel t;             /* the terms */
  relattn_pool *pool;
  int d, R;                  /* d_head; rows a block's P may span */
  int nq, bq, bk, n_qb;      /* queries; per block; keys per step; blocks */
  float scale;
  size_t table_stride;       /* floats between heads' tables; 0 when shared */
  float *kr;                 /* (n, H*d) rotated keys, or NULL */
  size_t scratch_bytes;
  int own_gemm;              /* products on src/gemm.c's kernel (FMA), else sgemm */
  int id_lo, id_hi;          /* bucket map entries [id_lo, id_hi] around
                             ** distance 0 where it is a shift: bucket[t] =
                             ** bucket[id_lo] + t - id_lo */
  atomic_int failed;
} attn_job;

#define ROT_ROWS 64 /* key rows per rotation task */

/* Keys per product with the key-side table: a chunk of keys reaches
** bq + G_CHUNK - 1 distances, so the product costs about (bq + 64) / bq
** times the chunk's share of Q K^T, where a whole key block would cost
** (bq + bk) / bq. */
#define G_CHUNK 64

/* Table rows before a product's first: an int8 table's products start at a
** panel (src/qgemm.c), up to RELATTN_QPANEL - 1 rows before the first the
** block reaches. */
#define Q8_LEAD (RELATTN_QPANEL - 1)

/* Rows of one chunk's key-side product. */
static int g_rows(const relattn_rel *t, int R, int bq) {
  const int lead = t->qrq || t->brq ? Q8_LEAD : 0;
  if (t->bucket) return R + lead;
  return (R < bq + G_CHUNK - 1 ? R : bq + G_CHUNK - 1) + lead;
}

/* Columns of a row of P: an int8 table's product may start Q8_LEAD rows
** early. */
static int p_width(const relattn_rel *t, int R) {
  return R + (t->qrk || t->brk ? Q8_LEAD : 0);
}

/* Floats of scratch for the int8 tables' products: one product's (src/
** qgemm.c) of up to max(bq, G_CHUNK) rows, 64-byte aligned. */
static size_t q8_floats(const relattn_rel *t, int bq, int d) {
  const int rows = bq > G_CHUNK ? bq : G_CHUNK;
  if (t->qrk || t->qrq)
    return relattn_q8_scratch(rows, d) / sizeof(float) + 16;
  if (t->brk || t->brq)
    return relattn_bf16_scratch(rows, d) / sizeof(float) + 16;
  return 0;
}

/* y (rows, ldy) = s x T^T over rows [lo, lo + cnt) of an int8 (q8) or bf16
** (b16) table, lo a multiple of RELATTN_QPANEL: its products on
** src/qgemm.c, then times s. */
static void low_prod(const relattn_vec *vec, float *y, int ldy, const float *x,
                     int ldx, int rows, const relattn_q8w *q8,
                     const relattn_bf16w *b16, int lo, int cnt, float s,
                     void *scratch) {
  int r;
  if (q8) {
    const relattn_q8w part = relattn_q8w_rows(q8, lo, cnt);
    relattn_q8_gemm(y, ldy, x, ldx, rows, &part, NULL, 0, scratch);
  } else {
    const relattn_bf16w part = relattn_bf16w_rows(b16, lo, cnt);
    relattn_bf16_gemm(y, ldy, x, ldx, rows, &part, NULL, 0, scratch);
  }
  for (r = 0; r < rows; r++) vec->scale(y + (size_t)r * ldy, cnt, s);
}

static void rotate_task(void *ctx, int task, int worker) {
  attn_job *J = ctx;
  const relattn_attn *a = J->a;
  const int w = a->heads * J->d, r1 = (task + 1) * ROT_ROWS;
  int i, h;
  (void)worker;
  for (i = task * ROT_ROWS; i < r1 && i < a->n; i++)
    for (h = 0; h < a->heads; h++)
      rotate_row(J->kr + (size_t)i * w + (size_t)h * J->d,
                 a->k + (size_t)i * a->ldk + (size_t)h * J->d, J->d, &J->t, i);
}

static size_t scratch_floats(const relattn_rel *t, int bq, int bk, int d,
                             int R) {
  const size_t chunks = (size_t)(bk + G_CHUNK - 1) / G_CHUNK;
  size_t f =
      (size_t)bq * bk + (size_t)bq * d + 5 * (size_t)bq; /* S O m l el er mb */
  if (t->rot_dim || t->u) f += (size_t)bq * d;                  /* Qc */
  if (t->w && t->rk) f += (size_t)bq * d;                       /* Qw */
  if (t->rk || t->qrk || t->brk) f += (size_t)bq * p_width(t, R); /* P */
  if (t->rv) f += (size_t)bq * R;                               /* B */
  if (t->rq || t->qrq || t->brq)
    f += chunks * ((size_t)g_rows(t, R, bq) * G_CHUNK + 1); /* G, gmin */
  /* right operands in panel order (src/gemm.c): a key block or P's table
  ** rows; a chunk of keys for G */
  f += (size_t)((bk > R ? bk : R) + RELATTN_PANEL) * d;
  if (t->rq) f += (size_t)G_CHUNK * d;
  return f + q8_floats(t, bq, d);
}

/* Rows a query block's buckets may span: the table's with a bucket map (its
** rows need not be in distance order); else the band's, or the distances a
** block reaches when fewer. */
static int span_rows(const relattn_rel *t, int n, int bq) {
  long long r = 2LL * t->band + 1;
  if (t->bucket) return t->rows;
  if (r > (long long)n + bq - 1) r = (long long)n + bq - 1;
  return (int)r;
}

/* C = alpha A B^T, B (n, k) with rows ldb apart: on src/gemm.c's kernel
** through pack where the CPU has FMA, else sgemm. */
static void prod_nt(const attn_job *J, int m, int n, int k, float alpha,
                    const float *a, int lda, const float *b, int ldb, float *c,
                    int ldc, float *pack) {
  if (J->own_gemm)
    relattn_gemm_nt(c, ldc, a, lda, m, k, n, alpha, b, ldb, pack, n);
  else
    relattn_sgemm(0, 1, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
}

/* C += A B, B (k, n) with rows ldb apart: src/gemm.c's kernel where the
** CPU has FMA (it reads B in place, where sgemm would pack it first), else
** sgemm. */
static void prod_add(const attn_job *J, int m, int n, int k, const float *a,
                     int lda, const float *b, int ldb, float *c, int ldc) {
  if (J->own_gemm)
    relattn_gemm_nn(c, ldc, a, lda, m, k, n, b, ldb);
  else
    relattn_sgemm(0, 0, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, ldc);
}

/* s[q] += g[base + bucket[t0 + q] gb + q gk] for q < len (the key-side
** term along a row: each key its own column of a chunk of G; gb, gk:
** G_CHUNK, 1 as sgemm writes it, 1 and the chunk's rows as the int8
** product does). Where the map is a shift ([id_lo, id_hi]) the element
** steps by gb + gk: the same floats without reading the map. */
static void band_g(const relattn_vec *vec, float *s, const float *g,
                   const int *bucket, int t0, int len, int base, int gb,
                   int gk, int id_lo, int id_hi) {
  const int q0 = id_lo - t0 < 0 ? 0 : (id_lo - t0 > len ? len : id_lo - t0);
  const int q1 = id_hi + 1 - t0 < q0    ? q0
                 : id_hi + 1 - t0 > len ? len
                                        : id_hi + 1 - t0;
  if (q0 > 0) vec->gather_add(s, g, bucket + t0, q0, base, gb, gk);
  if (q1 > q0)
    vec->gather_add(s + q0, g, NULL, q1 - q0,
                    base + q0 * gk + bucket[t0 + q0] * gb, gb, gk);
  if (len > q1)
    vec->gather_add(s + q1, g, bucket + t0 + q1, len - q1, base + q1 * gk, gb,
                    gk);
}

static void attn_task(void *ctx, int task, int worker) {
  attn_job *J = ctx;
  const relattn_attn *a = J->a;
  const relattn_rel *T = &J->t;
  const int d = J->d, R = J->R, BK = J->bk, n = a->n, D = T->band;
  /* The last query blocks first: with a causal mask they cost the most. */
  const int h = task % a->heads;
  const int qb = J->n_qb - 1 - task / a->heads;
  const int i0 = qb * J->bq;
  const int bq = J->nq - i0 < J->bq ? J->nq - i0 : J->bq;
  const float s = J->scale;
  const float *Q = a->q + (size_t)i0 * a->ldq + (size_t)h * d;
  const size_t ts = J->table_stride;
  const float *rk = T->rk ? T->rk + h * ts : NULL;
  const float *rq = T->rq ? T->rq + h * ts : NULL;
  const float *rv = T->rv ? T->rv + h * ts : NULL;
  const relattn_q8w *qk8 = T->qrk ? T->qrk + h : NULL;
  const relattn_q8w *qq8 = T->qrq ? T->qrq + h : NULL;
  const relattn_bf16w *bk16 = T->brk ? T->brk + h : NULL;
  const relattn_bf16w *bq16 = T->brq ? T->brq + h : NULL;
  const int lowk = qk8 || bk16, lowq = qq8 || bq16; /* int8 or bf16 */
  const int PW = p_width(T, R);
  const float *beta = T->beta ? T->beta + (size_t)h * T->rows : NULL;
  const float slope = T->slope ? T->slope[h] : 0.0f;
  const float *kc = J->kr ? J->kr + (size_t)h * d : a->k + (size_t)h * d;
  const int ldkc = J->kr ? a->heads * d : a->ldk;
  const int j_end = a->causal ? i0 + bq : n;
  const int has_p = rk || lowk || beta;
  const int rel = has_p || rq || lowq || rv || slope != 0.0f;
  /* Distances this block reaches and the table rows they map to. */
  const long long dmin = -(long long)(i0 + bq - 1),
                  dmax = a->causal ? 0 : (long long)n - 1 - i0;
  const int left = dmin < -(long long)D, right = dmax > (long long)D;
  const relattn_vec *vec = relattn_vec_ops();
  const float *Qs = Q, *Qp = Q, *pbase = NULL;
  size_t pstride = 0;
  int ldqs = a->ldq, ldqp = a->ldq, pmin = 0, pmax = -1, np, b_left, b_right;
  float *S, *O, *Qc = NULL, *Qw = NULL, *P = NULL, *B = NULL, *G = NULL;
  float *m, *l, *el, *er, *mb, *sp, *kp, *gp = NULL;
  void *q8s = NULL;
  int *gmin = NULL, ii, j0, j;
  const int n_chunks = (BK + G_CHUNK - 1) / G_CHUNK;
  const size_t g_size = (size_t)g_rows(T, R, J->bq) * G_CHUNK;
  /* G's element (row b, key c of a chunk): (b - gmin) gb + c gk; the int8
  ** product writes each key's row of table rows */
  const int gb = lowq ? 1 : G_CHUNK, gk = lowq ? g_rows(T, R, J->bq) : 1;

  if (atomic_load(&J->failed)) return;
  sp = relattn_pool_scratch(J->pool, worker, J->scratch_bytes);
  if (!sp) {
    atomic_store(&J->failed, 1);
    return;
  }
  S = sp;  sp += (size_t)J->bq * BK;  /* (bq, BK) */
  O = sp;  sp += (size_t)J->bq * d;   /* (bq, d) */
  if (T->rot_dim || T->u) { Qc = sp; sp += (size_t)J->bq * d; } /* (bq, d) */
  if (T->w && T->rk) { Qw = sp; sp += (size_t)J->bq * d; }      /* (bq, d) */
  if (rk || lowk) { P = sp; sp += (size_t)J->bq * PW; }        /* (bq, PW) */
  if (rv) { B = sp; sp += (size_t)J->bq * R; }                  /* (bq, R) */
  if (rq || lowq) {  /* per chunk of keys (rows, G_CHUNK), and its first row */
    G = sp;
    sp += (size_t)n_chunks * g_size;
    gmin = (int *)sp;
    sp += n_chunks;
  }
  kp = sp; /* a key block (or P's rows) in panel order */
  sp += (size_t)((BK > R ? BK : R) + RELATTN_PANEL) * d;
  if (rq) { gp = sp; sp += (size_t)G_CHUNK * d; } /* a chunk of keys */
  m = sp;  sp += J->bq;
  l = sp;  sp += J->bq;
  el = sp; sp += J->bq;
  er = sp; sp += J->bq;
  mb = sp; sp += J->bq;
  if (lowk || lowq) /* src/qgemm.c's scratch, 64-byte aligned */
    q8s = (void *)(((uintptr_t)sp + 63) & ~(uintptr_t)63);

  bucket_range(T, dmin, dmax, &pmin, &pmax);
  np = pmax - pmin + 1;
  b_left = bucket_of(T, -(long long)D - 1);
  b_right = bucket_of(T, (long long)D + 1);

  /* The block's queries: rotated and offset by u for the content term,
  ** offset by w for the query-side table. */
  if (Qc) {
    for (ii = 0; ii < bq; ii++) {
      float *row = Qc + (size_t)ii * d;
      const float *x = Q + (size_t)ii * a->ldq;
      if (T->rot_dim)
        rotate_row(row, x, d, T, i0 + ii);
      else
        memcpy(row, x, sizeof(float) * (size_t)d);
      if (T->u) vec->add(row, T->u + (size_t)h * d, d);
    }
    Qs = Qc;
    ldqs = d;
  }
  if (Qw) {
    for (ii = 0; ii < bq; ii++) {
      float *row = Qw + (size_t)ii * d;
      memcpy(row, Q + (size_t)ii * a->ldq, sizeof(float) * (size_t)d);
      vec->add(row, T->w + (size_t)h * d, d);
    }
    Qp = Qw;
    ldqp = d;
  }
  if (lowk) {
    /* rows [pal, pmax] of the int8 (bf16) table: from pmin's panel */
    const int pal = pmin / RELATTN_QPANEL * RELATTN_QPANEL;
    low_prod(vec, P, PW, Qp, ldqp, bq, qk8, bk16, pal, pmax - pal + 1, s, q8s);
    if (beta)
      for (ii = 0; ii < bq; ii++)
        vec->add(P + (size_t)ii * PW + (pmin - pal), beta + pmin, np);
    pbase = P + (pmin - pal); /* pbase[b - pmin] is P's row b - pal */
    pstride = (size_t)PW;
  } else if (rk) {
    prod_nt(J, bq, np, d, s, Qp, ldqp, rk + (size_t)pmin * d, d, P, R, kp);
    if (beta)
      for (ii = 0; ii < bq; ii++) vec->add(P + (size_t)ii * R, beta + pmin, np);
    pbase = P;
    pstride = (size_t)R;
  } else if (beta) {
    pbase = beta + pmin; /* the same row for every query */
  }
  memset(O, 0, sizeof(float) * (size_t)bq * d);
  if (B) memset(B, 0, sizeof(float) * (size_t)bq * R);
  for (ii = 0; ii < bq; ii++) {
    m[ii] = -INFINITY;
    mb[ii] = -INFINITY;
    l[ii] = el[ii] = er[ii] = 0.0f;
  }

  for (j0 = 0; j0 < j_end; j0 += BK) {
    const int bk = j_end - j0 < BK ? j_end - j0 : BK;
    /* A block the causal mask cuts goes in panels of rows, each with the
    ** columns its last row may use, so masked products are mostly skipped. */
    const int diag = a->causal && j0 + bk > i0 + 1;
    const int panel = diag ? CAUSAL_PANEL : bq;
    int r0, c0, keys_packed = 0;
    if (rq || lowq) {
      /* Key-side terms of this key block, G_CHUNK keys at a time, each
      ** chunk over the table rows its distances to the block reach. */
      const int wmax = a->causal && i0 + bq - j0 < bk ? i0 + bq - j0 : bk;
      for (c0 = 0; c0 < wmax; c0 += G_CHUNK) {
        const int gc = wmax - c0 < G_CHUNK ? wmax - c0 : G_CHUNK,
                  cc = c0 / G_CHUNK;
        long long thi = (long long)j0 + c0 + gc - 1 - i0;
        int gmax;
        if (a->causal && thi > 0) thi = 0;
        bucket_range(T, (long long)j0 + c0 - (i0 + bq - 1), thi, &gmin[cc],
                     &gmax);
        if (lowq) {
          /* the keys' rows against table rows [gmin, gmax] from gmin's
          ** panel, times s: (gc, gk) */
          const int gal = gmin[cc] / RELATTN_QPANEL * RELATTN_QPANEL;
          low_prod(vec, G + cc * g_size, gk,
                   a->k + (size_t)(j0 + c0) * a->ldk + (size_t)h * d, a->ldk,
                   gc, qq8, bq16, gal, gmax - gal + 1, s, q8s);
          gmin[cc] = gal;
          continue;
        }
        prod_nt(J, gmax - gmin[cc] + 1, gc, d, s, rq + (size_t)gmin[cc] * d,
                d, a->k + (size_t)(j0 + c0) * a->ldk + (size_t)h * d, a->ldk,
                G + cc * g_size, G_CHUNK, gp);
      }
    }
    for (r0 = 0; r0 < bq; r0 += panel) {
      const int r1 = r0 + panel < bq ? r0 + panel : bq;
      /* Columns any row of the panel may use (the mask cuts the last ones). */
      const int width = a->causal && i0 + r1 - j0 < bk ? i0 + r1 - j0 : bk;
      if (width <= 0) continue; /* every key of the block is after these rows */
      if (J->own_gemm) { /* the block's keys into panel order once */
        relattn_gemm_nt(S + (size_t)r0 * BK, BK, Qs + (size_t)r0 * ldqs, ldqs,
                        r1 - r0, d, width, s,
                        keys_packed ? NULL : kc + (size_t)j0 * ldkc, ldkc, kp,
                        bk);
        keys_packed = 1;
      } else
        relattn_sgemm(0, 1, r1 - r0, width, d, s, Qs + (size_t)r0 * ldqs, ldqs,
                      kc + (size_t)j0 * ldkc, ldkc, 0.0f, S + (size_t)r0 * BK,
                      BK);
      for (ii = r0; ii < r1; ii++) {
        const int i = i0 + ii;
        float *srow = S + (size_t)ii * BK;
        const float *prow = pbase ? pbase + ii * pstride : NULL;
        int cnt = width, b0, b1;
        long long lo, hi;
        float cl = 0.0f, cr = 0.0f, mx = -INFINITY, m_new, alpha;
        float sl = 0.0f, sb = 0.0f, sr = 0.0f;
        if (a->causal && i - j0 + 1 < cnt) cnt = i - j0 + 1;
        if (cnt <= 0) {
          memset(srow, 0, sizeof(float) * (size_t)width);
          continue;
        }
        /* Columns [0, b0) are at distance < -D (row b_left), [b0, b1) in
        ** the band (column c at t = c - lo of the bucket map), [b1, cnt) at
        ** > D (row b_right). Without relative terms the whole row is one
        ** segment. A block far from the diagonal has one segment only: its
        ** relative term is a row constant (plus a per-key vector, or a ramp
        ** along the row). */
        lo = (long long)i - D - j0; /* the column at distance -D */
        hi = (long long)i + D - j0; /* the column at distance +D */
        if (rel) {
          b0 = (int)(lo < 0 ? 0 : (lo > cnt ? cnt : lo));
          b1 = (int)(hi + 1 < b0 ? b0 : (hi + 1 > cnt ? cnt : hi + 1));
        } else {
          b0 = b1 = cnt;
        }
        if (b1 > b0) {
          if (prow) {
            if (!T->bucket) {
              vec->add(srow + b0, prow + (b0 - lo - pmin), b1 - b0);
            } else {
              /* where the map is a shift (DeBERTa's |delta| < mid, T5's
              ** exact buckets) the row segment is contiguous: an add */
              const long long u0 = J->id_lo + lo, u1 = J->id_hi + 1 + lo;
              const int x0 = (int)(u0 < b0 ? b0 : (u0 > b1 ? b1 : u0));
              const int x1 = (int)(u1 < x0 ? x0 : (u1 > b1 ? b1 : u1));
              if (x0 > b0)
                vec->gather_add(srow + b0, prow, T->bucket + (b0 - lo),
                                x0 - b0, -pmin, 1, 0);
              if (x1 > x0)
                vec->add(srow + x0, prow + (T->bucket[x0 - lo] - pmin),
                         x1 - x0);
              if (b1 > x1)
                vec->gather_add(srow + x1, prow, T->bucket + (x1 - lo),
                                b1 - x1, -pmin, 1, 0);
            }
          }
          if (G)
            for (j = b0; j < b1;) {
              /* column j of chunk cc: row (b - gmin), key j - cc G_CHUNK */
              const int cc = j / G_CHUNK, off = j - cc * G_CHUNK;
              const int len = b1 - j < G_CHUNK - off ? b1 - j : G_CHUNK - off;
              const int t0 = (int)(j - lo);
              if (T->bucket)
                band_g(vec, srow + j, G + cc * g_size, T->bucket, t0, len,
                       off * gk - gmin[cc] * gb, gb, gk, J->id_lo, J->id_hi);
              else
                vec->gather_add(srow + j, G + cc * g_size, NULL, len,
                                off * gk + (t0 - gmin[cc]) * gb, gb, gk);
              j += len;
            }
          if (slope != 0.0f)
            for (j = b0; j < b1; j++) {
              const long long dist = j - lo - D;
              srow[j] -= slope * (float)(dist < 0 ? -dist : dist);
            }
        }
        if (b0 > 0) {
          /* keys at j0 + c, c < b0: bias -slope (i - j0 - c) */
          if (prow) cl = prow[b_left - pmin];
          if (G)
            for (j = 0; j < b0; j += G_CHUNK) {
              const int cc = j / G_CHUNK,
                        len = b0 - j < G_CHUNK ? b0 - j : G_CHUNK;
              const float *grow =
                  G + cc * g_size + (size_t)(b_left - gmin[cc]) * gb;
              if (gk == 1)
                vec->add(srow + j, grow, len);
              else
                vec->gather_add(srow + j, grow, NULL, len, 0, 0, gk);
            }
          cl -= slope * (float)(i - j0);
          mx = (slope != 0.0f ? vec->max_ramp(srow, b0, slope)
                              : vec->max(srow, b0)) + cl;
        }
        if (b1 > b0) {
          const float mband = vec->max(srow + b0, b1 - b0);
          mx = mband > mx ? mband : mx;
        }
        if (cnt > b1) {
          /* keys at j0 + b1 + c: bias -slope (j0 + b1 + c - i) */
          float mr;
          if (prow) cr = prow[b_right - pmin];
          if (G)
            for (j = b1; j < cnt;) {
              const int cc = j / G_CHUNK, off = j - cc * G_CHUNK;
              const int len = cnt - j < G_CHUNK - off ? cnt - j : G_CHUNK - off;
              const float *grow = G + cc * g_size +
                                  (size_t)(b_right - gmin[cc]) * gb +
                                  (size_t)off * gk;
              if (gk == 1)
                vec->add(srow + j, grow, len);
              else
                vec->gather_add(srow + j, grow, NULL, len, 0, 0, gk);
              j += len;
            }
          cr -= slope * (float)(j0 + b1 - i);
          mr = (slope != 0.0f ? vec->max_ramp(srow + b1, cnt - b1, -slope)
                              : vec->max(srow + b1, cnt - b1)) + cr;
          mx = mr > mx ? mr : mx;
        }
        m_new = mx > m[ii] ? mx : m[ii];
        alpha = expf(m[ii] - m_new); /* 0 on the first block: m = -inf */
        if (b0 > 0)
          sl = slope != 0.0f ? vec->exp_sum_ramp(srow, b0, m_new - cl, slope)
                             : vec->exp_sum(srow, b0, m_new - cl);
        if (b1 > b0) sb = vec->exp_sum(srow + b0, b1 - b0, m_new);
        if (cnt > b1)
          sr = slope != 0.0f
                   ? vec->exp_sum_ramp(srow + b1, cnt - b1, m_new - cr, -slope)
                   : vec->exp_sum(srow + b1, cnt - b1, m_new - cr);
        if (cnt < width)
          memset(srow + cnt, 0, sizeof(float) * (size_t)(width - cnt));
        if (alpha != 1.0f) {
          l[ii] *= alpha;
          el[ii] *= alpha;
          er[ii] *= alpha;
          vec->scale(O + (size_t)ii * d, d, alpha);
        }
        l[ii] += (sl + sb) + sr;
        m[ii] = m_new;
        if (B) {
          el[ii] += sl;
          er[ii] += sr;
          if (b1 > b0) {
            /* Band weights go to their own buckets, kept relative to mb. */
            float *brow = B + (size_t)ii * R;
            if (mb[ii] != m_new) {
              /* (on the first visit the buckets are still zero) */
              if (mb[ii] != -INFINITY)
                vec->scale(brow, np, expf(mb[ii] - m_new));
              mb[ii] = m_new;
            }
            if (!T->bucket) {
              vec->add(brow + (b0 - lo - pmin), srow + b0, b1 - b0);
            } else {
              for (j = b0; j < b1; j++)
                brow[T->bucket[j - lo] - pmin] += srow[j];
            }
          }
        }
      }
      prod_add(J, r1 - r0, d, width, S + (size_t)r0 * BK, BK,
               a->v + (size_t)j0 * a->ldv + (size_t)h * d, a->ldv,
               O + (size_t)r0 * d, d);
    }
  }

  if (B) {
    for (ii = 0; ii < bq; ii++) {
      float *brow = B + (size_t)ii * R;
      if (mb[ii] != m[ii] && mb[ii] != -INFINITY)
        vec->scale(brow, np, expf(mb[ii] - m[ii]));
      if (left) brow[b_left - pmin] += el[ii];
      if (right) brow[b_right - pmin] += er[ii];
    }
    prod_add(J, bq, d, np, B, R, rv + (size_t)pmin * d, d, O, d);
  }
  for (ii = 0; ii < bq; ii++) {
    float *orow = a->out + (size_t)(i0 + ii) * a->ldo + (size_t)h * d;
    const float inv = 1.0f / l[ii];
    const float *src = O + (size_t)ii * d;
    for (j = 0; j < d; j++) orow[j] = src[j] * inv;
  }
}

/* Checks the shape fields; returns RELATTN_OK or an error. */
static int check_attn(const relattn_attn *a, char *err, size_t errlen) {
  long long width;
  const relattn_rel *t;
  if (!a)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: no arguments");
  if (a->n < 0 || a->heads < 1 || a->d_head < 1 || a->clip < 0)
    return relattn_errorf(
        err, errlen, RELATTN_ERR_ARG,
        "attention: bad shape n=%d heads=%d d_head=%d clip=%d", a->n, a->heads,
        a->d_head, a->clip);
  if (a->n_q < 0 || a->n_q > a->n)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: n_q=%d outside [0, n=%d]", a->n_q,
                          a->n);
  width = (long long)a->heads * a->d_head;
  if (width > INT_MAX || a->clip > INT_MAX / 2 - 1)
    return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                          "attention: heads*d_head or clip too large");
  if (a->ldq < width || a->ldk < width || a->ldv < width || a->ldo < width)
    return relattn_errorf(
        err, errlen, RELATTN_ERR_ARG,
        "attention: a leading dimension is below heads*d_head = %lld", width);
  if (a->n > 0 && (!a->q || !a->k || !a->v || !a->out))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: q, k, v and out are required");
  t = a->rel;
  if (!t) return RELATTN_OK;
  if (a->clip || a->rel_k || a->rel_v || a->per_head)
    return relattn_errorf(
        err, errlen, RELATTN_ERR_ARG,
        "attention: rel with clip, rel_k, rel_v or per_head set");
  if (t->band < 0 || t->band > INT_MAX / 4 || t->rows < 1 ||
      (!t->bucket && t->rows < 2LL * t->band + 1))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: band %d does not fit %d table rows",
                          t->band, t->rows);
  if (t->bucket) {
    long long x;
    for (x = 0; x <= 2LL * t->band; x++)
      if (t->bucket[x] < 0 || t->bucket[x] >= t->rows)
        return relattn_errorf(
            err, errlen, RELATTN_ERR_ARG,
            "attention: bucket %lld is row %d, outside [0, %d)", x - t->band,
            t->bucket[x], t->rows);
  }
  if (t->rot_dim < 0 || t->rot_dim % 2 || t->rot_dim > a->d_head ||
      (t->rot_dim && a->n > 0 && (!t->rot_cos || !t->rot_sin)))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: rotation of %d dims (d_head %d)",
                          t->rot_dim, a->d_head);
  if (!isfinite(t->scale) || t->scale < 0)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG, "attention: scale %g",
                          t->scale);
  return RELATTN_OK;
}

static int query_block(int n) { return n < block_q ? n : block_q; }

/* The queries that run: the first n_q, or all n. */
static int queries(const relattn_attn *a) { return a->n_q ? a->n_q : a->n; }

size_t relattn_attention_scratch_bytes(const relattn_attn *a) {
  relattn_rel t;
  int bq;
  if (!a || a->n < 1 || a->d_head < 1 || a->clip < 0 || a->n_q < 0 ||
      a->n_q > a->n)
    return 0;
  t = terms_of(a);
  bq = query_block(queries(a));
  return sizeof(float) * scratch_floats(&t, bq, block_k, a->d_head,
                                        span_rows(&t, a->n, bq));
}

size_t relattn_attention_shared_bytes(const relattn_attn *a) {
  if (!a || a->n < 1 || !a->rel || !a->rel->rot_dim) return 0;
  return sizeof(float) * (size_t)a->n * a->heads * a->d_head;
}

int relattn_attention(const relattn_attn *a, relattn_pool *pool, char *err,
                      size_t errlen) {
  attn_job J;
  relattn_pool *own = NULL;
  int rc, blas, stopped;
  long long tasks;

  rc = check_attn(a, err, errlen);
  if (rc != RELATTN_OK || a->n == 0) return rc;

  memset(&J, 0, sizeof J);
  J.a = a;
  J.t = terms_of(a);
  J.d = a->d_head;
  J.nq = queries(a);
  J.bq = query_block(J.nq);
  J.bk = block_k;
  J.R = span_rows(&J.t, a->n, J.bq);
  J.n_qb = (J.nq + J.bq - 1) / J.bq;
  J.scale = (float)(J.t.scale > 0 ? J.t.scale : 1.0 / sqrt((double)a->d_head));
  J.table_stride = J.t.per_head ? (size_t)J.t.rows * J.d : 0;
  J.own_gemm = relattn_simd_fma();
  if (J.t.bucket) {
    const int *b = J.t.bucket, D = J.t.band;
    J.id_lo = J.id_hi = D;
    while (J.id_lo > 0 && b[J.id_lo - 1] == b[J.id_lo] - 1) J.id_lo--;
    while (J.id_hi < 2 * D && b[J.id_hi + 1] == b[J.id_hi] + 1) J.id_hi++;
  }
  J.scratch_bytes = sizeof(float) * scratch_floats(&J.t, J.bq, J.bk, J.d, J.R);
  atomic_init(&J.failed, 0);
  tasks = (long long)a->heads * J.n_qb;
  if (tasks > INT_MAX)
    return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                          "attention: too many (head, block) tasks");

  if (!pool) {
    own = relattn_pool_new(1);
    if (!own)
      return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                            "attention: out of memory");
    pool = own;
  }
  J.pool = pool;
  if (J.t.rot_dim) {
    /* Every task reads all keys: rotate them once, into the calling
    ** worker's scratch (kept for the next call: pages are costly here). */
    J.kr = relattn_pool_scratch_slot(pool, relattn_pool_worker(pool), 3,
                                     relattn_attention_shared_bytes(a));
    if (!J.kr) {
      relattn_pool_free(own);
      return relattn_errorf(
          err, errlen, RELATTN_ERR_NOMEM,
          "attention: out of memory for %zu bytes of rotated keys",
          relattn_attention_shared_bytes(a));
    }
  }
  relattn_vec_ops(); /* decide the vector path before the workers start */
  blas = relattn_blas_single();
  if (J.kr)
    relattn_pool_run(pool, (a->n + ROT_ROWS - 1) / ROT_ROWS, rotate_task, &J);
  relattn_pool_run(pool, (int)tasks, attn_task, &J);
  relattn_blas_restore(blas);
  stopped = relattn_pool_cancelled(pool); /* tasks were skipped */
  relattn_pool_free(own);
  if (stopped)
    return relattn_errorf(err, errlen, RELATTN_ERR_INTERRUPT, "interrupted");
  if (atomic_load(&J.failed))
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "attention: out of memory for %zu bytes of scratch",
                          J.scratch_bytes);
  return RELATTN_OK;
}

#define MAP_ROWS 64

int relattn_attention_map(const relattn_attn *a, int head,
                          float *map /* (n, n) */, relattn_pool *pool,
                          char *err, size_t errlen) {
  const int n = a ? a->n : 0;
  relattn_rel t;
  int rc, d, i, j, c, pmin, pmax, np, pal, pw, gw;
  size_t ts;
  const float *rk, *rq, *beta;
  const relattn_q8w *qk8, *qq8;
  const relattn_bf16w *bk16, *bq16;
  const relattn_vec *vec = relattn_vec_ops();
  float s, slope, *qs, *ks, *qw, *p = NULL, *g = NULL;
  void *q8s = NULL;

  rc = check_attn(a, err, errlen);
  if (rc != RELATTN_OK || n == 0) return rc;
  if (head < 0 || head >= a->heads)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: head %d out of range [0, %d)", head,
                          a->heads);
  if (!map)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: map is NULL");
  t = terms_of(a);
  d = a->d_head;
  s = (float)(t.scale > 0 ? t.scale : 1.0 / sqrt((double)d));
  ts = t.per_head ? (size_t)t.rows * d : 0;
  rk = t.rk ? t.rk + head * ts : NULL;
  rq = t.rq ? t.rq + head * ts : NULL;
  beta = t.beta ? t.beta + (size_t)head * t.rows : NULL;
  slope = t.slope ? t.slope[head] : 0.0f;
  qk8 = t.qrk ? t.qrk + head : NULL;
  qq8 = t.qrq ? t.qrq + head : NULL;
  bk16 = t.brk ? t.brk + head : NULL;
  bq16 = t.brq ? t.brq + head : NULL;
  bucket_range(&t, -(long long)(n - 1), a->causal ? 0 : n - 1, &pmin, &pmax);
  np = pmax - pmin + 1;
  /* int8 tables: their products from pmin's panel, rows [pal, pmax] (as
  ** the kernel's, the same values) */
  pal = pmin / RELATTN_QPANEL * RELATTN_QPANEL;
  pw = qk8 || bk16 ? pmax - pal + 1 : np;
  gw = qq8 || bq16 ? pmax - pal + 1 : np;
  /* q (rotated, + u) and k (rotated) of this head, q + w; the query-side
  ** terms of a block of rows; the key-side ones of every key. */
  qs =
      relattn_alloc(sizeof(float) * ((size_t)n * d * 2 + (size_t)MAP_ROWS * d));
  if (rk || qk8 || bk16)
    p = relattn_alloc(sizeof(float) * (size_t)MAP_ROWS * pw);
  if (rq || qq8 || bq16) g = relattn_alloc(sizeof(float) * (size_t)n * gw);
  if (qk8 || qq8)
    q8s = relattn_alloc(relattn_q8_scratch(n > MAP_ROWS ? n : MAP_ROWS, d));
  else if (bk16 || bq16)
    q8s = relattn_alloc(relattn_bf16_scratch(n > MAP_ROWS ? n : MAP_ROWS, d));
  if (!qs || ((rk || qk8 || bk16) && !p) || ((rq || qq8 || bq16) && !g) ||
      ((qk8 || qq8 || bk16 || bq16) && !q8s)) {
    relattn_free(qs);
    relattn_free(p);
    relattn_free(g);
    relattn_free(q8s);
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "attention: out of memory");
  }
  ks = qs + (size_t)n * d;
  qw = ks + (size_t)n * d;
  for (i = 0; i < n; i++) {
    const float *qi = a->q + (size_t)i * a->ldq + (size_t)head * d;
    const float *ki = a->k + (size_t)i * a->ldk + (size_t)head * d;
    if (t.rot_dim) {
      rotate_row(qs + (size_t)i * d, qi, d, &t, i);
      rotate_row(ks + (size_t)i * d, ki, d, &t, i);
    } else {
      memcpy(qs + (size_t)i * d, qi, sizeof(float) * (size_t)d);
      memcpy(ks + (size_t)i * d, ki, sizeof(float) * (size_t)d);
    }
    if (t.u)
      for (c = 0; c < d; c++)
        qs[(size_t)i * d + c] += t.u[(size_t)head * d + c];
  }
  if (qq8 || bq16)
    low_prod(vec, g, gw, a->k + (size_t)head * d, a->ldk, n, qq8, bq16, pal,
             gw, s, q8s);
  else if (rq)
    relattn_sgemm(0, 1, n, np, d, s, a->k + (size_t)head * d, a->ldk,
                  rq + (size_t)pmin * d, d, 0.0f, g, np);

  /* The scores in place, then each row's relative terms, mask and softmax;
  ** in blocks of MAP_ROWS rows, between which the pool is asked whether to
  ** stop (a map of 16384 rows takes seconds, most of it first writes to
  ** its pages). */
  for (i = 0; i < n; i++) {
    float *row = map + (size_t)i * n;
    const int cnt = a->causal ? i + 1 : n;
    const float *prow =
        p ? p + (size_t)(i % MAP_ROWS) * pw + (qk8 || bk16 ? pmin - pal : 0)
          : NULL;
    const float *grow = g ? g + (qq8 || bq16 ? pmin - pal : 0) : NULL;
    float mx = -INFINITY;
    double sum = 0.0;
    if (i % MAP_ROWS == 0) {
      const int rows = n - i < MAP_ROWS ? n - i : MAP_ROWS;
      if (relattn_pool_poll(pool)) {
        relattn_free(qs);
        relattn_free(p);
        relattn_free(g);
        relattn_free(q8s);
        return relattn_errorf(err, errlen, RELATTN_ERR_INTERRUPT,
                              "interrupted");
      }
      relattn_sgemm(0, 1, rows, n, d, s, qs + (size_t)i * d, d, ks, d, 0.0f,
                    row, n);
      if (rk || qk8 || bk16) {
        for (j = 0; j < rows; j++) {
          float *qj = qw + (size_t)j * d;
          memcpy(qj, a->q + (size_t)(i + j) * a->ldq + (size_t)head * d,
                 sizeof(float) * (size_t)d);
          if (t.w)
            for (c = 0; c < d; c++) qj[c] += t.w[(size_t)head * d + c];
        }
        if (qk8 || bk16) {
          low_prod(vec, p, pw, qw, d, rows, qk8, bk16, pal, pw, s, q8s);
        } else {
          relattn_sgemm(0, 1, rows, np, d, s, qw, d, rk + (size_t)pmin * d, d,
                        0.0f, p, np);
        }
      }
    }
    for (j = 0; j < cnt; j++) {
      const int b = bucket_of(&t, (long long)j - i) - pmin;
      if (prow) row[j] += prow[b];
      if (grow) row[j] += grow[(size_t)j * gw + b];
      if (beta) row[j] += beta[b + pmin];
      if (slope != 0.0f) row[j] -= slope * (float)(j > i ? j - i : i - j);
    }
    for (j = 0; j < cnt; j++) mx = row[j] > mx ? row[j] : mx;
    for (j = 0; j < cnt; j++) {
      row[j] = expf(row[j] - mx);
      sum += row[j];
    }
    for (j = 0; j < cnt; j++) row[j] = (float)(row[j] / sum);
    for (j = cnt; j < n; j++) row[j] = 0.0f;
  }
  relattn_free(qs);
  relattn_free(p);
  relattn_free(g);
  relattn_free(q8s);
  return RELATTN_OK;
}
