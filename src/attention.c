/*
** attention.c: Shaw relative self-attention as one fused, blocked kernel.
**
** Shaw, Uszkoreit & Vaswani 2018, eq. 3-4, with the value term of
** tensor2tensor's dot_product_attention_relative.
**
** HOW IT WORKS
** One task is one (head, block of queries). It walks the keys in blocks with
** an online softmax (running max m, running sum l, rescaled accumulators), so
** no n x n matrix exists anywhere. For a query block:
**   P = s Q rel_k^T                       (bq, 2k+1): one small GEMM
** then for each key block:
**   S = s Q K^T                           (bq, bk): cblas_sgemm
** and each row i of S splits into three runs of columns: keys at distance
** j - i < -k, where the key term is the row constant P[i,0]; the band
** |j - i| <= k, where P's row segment is added to S (it is contiguous:
** column j takes P[i, j-i+k]); keys at > k, with P[i,2k]. The constants are
** folded into the softmax's subtraction (exp(S - (m - c))), so a block far
** from the diagonal, one run only, costs what plain attention costs. The
** weights' sums over the outer runs go to the edge buckets el[i], er[i]
** (rel_v's rows 0 and 2k) and the band's weights to their buckets B[i, j-i+k]
** (kept relative to their own max, rescaled only when the band is visited).
**   O += softmax weights . V              cblas_sgemm
** and at the end Z = (O + B rel_v) / l, B holding the buckets (one GEMM).
** So the relative terms cost O(n k d) + O(n k), not O(n^2 d): two GEMMs of
** (n, 2k+1, d) against attention's 4 n^2 d flops, and a pass over the band.
** With the causal mask only table rows 0..k are reachable, so both GEMMs
** use k+1 rows.
**
** Tables are clipped to what a sequence can reach: with k >= n only rows
** k-(n-1) .. k+(n-1) are used, which is a table of clip n-1.
**
** The block grid depends on n alone and each task does a fixed sequence of
** operations on its own rows, so the result is bitwise the same for any
** thread count.
*/
#include "relattn.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
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

typedef struct attn_job {
  const relattn_attn *a;
  relattn_pool *pool;
  int d, ke, R;              /* d_head, effective clip, table rows 2ke+1 */
  int bq, bk, n_qb;
  float scale;
  const float *rk, *rv;      /* first used row of head 0's tables, or NULL */
  size_t table_stride;       /* floats between heads' tables; 0 when shared */
  size_t scratch_bytes;
  atomic_int failed;
} attn_job;

static size_t scratch_floats(int bq, int bk, int d, int R, int has_rk,
                             int has_rv) {
  /* S (bq,bk), O (bq,d), P (bq,R), B (bq,R), m, l, el, er, mb (bq) */
  return (size_t)bq * bk + (size_t)bq * d + (has_rk ? (size_t)bq * R : 0) +
         (has_rv ? (size_t)bq * R : 0) + 5 * (size_t)bq;
}

static void attn_task(void *ctx, int task, int worker) {
  attn_job *J = ctx;
  const relattn_attn *a = J->a;
  const int d = J->d, ke = J->ke, R = J->R, BK = J->bk, n = a->n;
  /* With the mask no key lies to the right: table rows ke+1.. are unused. */
  const int Rg = a->causal ? ke + 1 : R;
  /* The last query blocks first: with a causal mask they cost the most. */
  const int h = task % a->heads;
  const int qb = J->n_qb - 1 - task / a->heads;
  const int i0 = qb * J->bq;
  const int bq = n - i0 < J->bq ? n - i0 : J->bq;
  const float s = J->scale;
  const float *Q = a->q + (size_t)i0 * a->ldq + (size_t)h * d;
  const float *rk = J->rk ? J->rk + h * J->table_stride : NULL;
  const float *rv = J->rv ? J->rv + h * J->table_stride : NULL;
  const int rel = rk || rv;
  const int j_end = a->causal ? i0 + bq : n;
  const relattn_vec *vec = relattn_vec_ops();
  float *S, *O, *P, *B, *m, *l, *el, *er, *mb, *sp;
  int ii, j0, j;

  if (atomic_load(&J->failed)) return;
  sp = relattn_pool_scratch(J->pool, worker, J->scratch_bytes);
  if (!sp) {
    atomic_store(&J->failed, 1);
    return;
  }
  S = sp;                 sp += (size_t)J->bq * BK;  /* (bq, BK) */
  O = sp;                 sp += (size_t)J->bq * d;   /* (bq, d) */
  P = rk ? sp : NULL;     sp += rk ? (size_t)J->bq * R : 0; /* (bq, R) */
  B = rv ? sp : NULL;     sp += rv ? (size_t)J->bq * R : 0; /* (bq, R) */
  m = sp;  sp += J->bq;
  l = sp;  sp += J->bq;
  el = sp; sp += J->bq;
  er = sp; sp += J->bq;
  mb = sp;

  if (rk) relattn_sgemm(0, 1, bq, Rg, d, s, Q, a->ldq, rk, d, 0.0f, P, R);
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
    int r0;
    for (r0 = 0; r0 < bq; r0 += panel) {
      const int r1 = r0 + panel < bq ? r0 + panel : bq;
      /* Columns any row of the panel may use (the mask cuts the last ones). */
      const int width = a->causal && i0 + r1 - j0 < bk ? i0 + r1 - j0 : bk;
      if (width <= 0) continue; /* every key of the block is after these rows */
      relattn_sgemm(0, 1, r1 - r0, width, d, s, Q + (size_t)r0 * a->ldq,
                    a->ldq, a->k + (size_t)j0 * a->ldk + (size_t)h * d,
                    a->ldk, 0.0f, S + (size_t)r0 * BK, BK);
      for (ii = r0; ii < r1; ii++) {
        const int i = i0 + ii;
        float *srow = S + (size_t)ii * BK;
        int cnt = width, lo, hi, b0, b1;
        float cl = 0.0f, cr = 0.0f, mx = -INFINITY, m_new, alpha;
        float sl = 0.0f, sb = 0.0f, sr = 0.0f;
        if (a->causal && i - j0 + 1 < cnt) cnt = i - j0 + 1;
        if (cnt <= 0) {
          memset(srow, 0, sizeof(float) * (size_t)width);
          continue;
        }
        /* Columns [0, b0) are at distance < -ke (table row 0), [b0, b1) in
        ** the band (row j-i+ke), [b1, cnt) at > ke (row 2ke). Without tables
        ** the whole row is one segment. A block far from the diagonal has
        ** one segment only: its relative term is a row constant. */
        lo = i - ke - j0; /* the column at distance -ke */
        hi = i + ke - j0; /* the column at distance +ke */
        if (rel) {
          b0 = lo < 0 ? 0 : (lo > cnt ? cnt : lo);
          b1 = hi + 1 < b0 ? b0 : (hi + 1 > cnt ? cnt : hi + 1);
        } else {
          b0 = b1 = cnt;
        }
        if (rk) {
          const float *prow = P + (size_t)ii * R;
          cl = prow[0];
          cr = a->causal ? 0.0f : prow[2 * ke];
          if (b1 > b0) vec->add(srow + b0, prow + (b0 - lo), b1 - b0);
        }
        if (b0 > 0) mx = vec->max(srow, b0) + cl;
        if (b1 > b0) {
          const float mband = vec->max(srow + b0, b1 - b0);
          mx = mband > mx ? mband : mx;
        }
        if (cnt > b1) {
          const float mr = vec->max(srow + b1, cnt - b1) + cr;
          mx = mr > mx ? mr : mx;
        }
        m_new = mx > m[ii] ? mx : m[ii];
        alpha = expf(m[ii] - m_new); /* 0 on the first block: m = -inf */
        if (b0 > 0) sl = vec->exp_sum(srow, b0, m_new - cl);
        if (b1 > b0) sb = vec->exp_sum(srow + b0, b1 - b0, m_new);
        if (cnt > b1) sr = vec->exp_sum(srow + b1, cnt - b1, m_new - cr);
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
        if (rv) {
          el[ii] += sl;
          er[ii] += sr;
          if (b1 > b0) {
            /* Band weights go to their own buckets, kept relative to mb. */
            float *brow = B + (size_t)ii * R;
            if (mb[ii] != m_new) {
              /* (on the first visit the buckets are still zero) */
              if (mb[ii] != -INFINITY)
                vec->scale(brow, Rg, expf(mb[ii] - m_new));
              mb[ii] = m_new;
            }
            vec->add(brow + (b0 - lo), srow + b0, b1 - b0);
          }
        }
      }
      relattn_sgemm(0, 0, r1 - r0, d, width, 1.0f, S + (size_t)r0 * BK, BK,
                    a->v + (size_t)j0 * a->ldv + (size_t)h * d, a->ldv, 1.0f,
                    O + (size_t)r0 * d, d);
    }
  }

  if (rv) {
    for (ii = 0; ii < bq; ii++) {
      float *brow = B + (size_t)ii * R;
      if (mb[ii] != m[ii] && mb[ii] != -INFINITY)
        vec->scale(brow, Rg, expf(mb[ii] - m[ii]));
      if (ke == 0) {
        brow[0] += el[ii] + er[ii];
      } else {
        brow[0] += el[ii];
        brow[2 * ke] += er[ii];
      }
    }
    relattn_sgemm(0, 0, bq, d, Rg, 1.0f, B, R, rv, d, 1.0f, O, d);
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
  if (!a)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG, "attention: no arguments");
  if (a->n < 0 || a->heads < 1 || a->d_head < 1 || a->clip < 0)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: bad shape n=%d heads=%d d_head=%d clip=%d",
                          a->n, a->heads, a->d_head, a->clip);
  width = (long long)a->heads * a->d_head;
  if (width > INT_MAX || a->clip > INT_MAX / 2 - 1)
    return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                          "attention: heads*d_head or clip too large");
  if (a->ldq < width || a->ldk < width || a->ldv < width || a->ldo < width)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: a leading dimension is below heads*d_head = %lld",
                          width);
  if (a->n > 0 && (!a->q || !a->k || !a->v || !a->out))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: q, k, v and out are required");
  return RELATTN_OK;
}

size_t relattn_attention_scratch_bytes(const relattn_attn *a) {
  int ke, bq;
  if (!a || a->n < 1 || a->d_head < 1 || a->clip < 0) return 0;
  ke = a->clip < a->n - 1 ? a->clip : a->n - 1;
  bq = a->n < block_q ? a->n : block_q;
  return sizeof(float) * scratch_floats(bq, block_k, a->d_head, 2 * ke + 1,
                                        a->rel_k != NULL, a->rel_v != NULL);
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
  J.d = a->d_head;
  J.ke = a->clip < a->n - 1 ? a->clip : a->n - 1;
  J.R = 2 * J.ke + 1;
  J.bq = a->n < block_q ? a->n : block_q;
  J.bk = block_k;
  J.n_qb = (a->n + J.bq - 1) / J.bq;
  J.scale = (float)(1.0 / sqrt((double)a->d_head));
  /* With ke < clip, row k - ke of the table is row 0 of the clipped one. */
  J.rk = a->rel_k ? a->rel_k + (size_t)(a->clip - J.ke) * J.d : NULL;
  J.rv = a->rel_v ? a->rel_v + (size_t)(a->clip - J.ke) * J.d : NULL;
  J.table_stride = a->per_head ? (size_t)(2 * a->clip + 1) * J.d : 0;
  J.scratch_bytes = sizeof(float) * scratch_floats(J.bq, J.bk, J.d, J.R,
                                                   J.rk != NULL, J.rv != NULL);
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
  relattn_vec_ops(); /* decide the vector path before the workers start */
  blas = relattn_blas_single();
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
  int rc, d, ke, R, i, j;
  const float *q, *rk;
  float s, *p;

  rc = check_attn(a, err, errlen);
  if (rc != RELATTN_OK || n == 0) return rc;
  if (head < 0 || head >= a->heads)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "attention: head %d out of range [0, %d)", head,
                          a->heads);
  if (!map)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG, "attention: map is NULL");
  d = a->d_head;
  ke = a->clip < n - 1 ? a->clip : n - 1;
  R = 2 * ke + 1;
  s = (float)(1.0 / sqrt((double)d));
  q = a->q + (size_t)head * d;
  rk = a->rel_k ? a->rel_k + (size_t)(a->clip - ke) * d +
                      (a->per_head ? (size_t)head * (2 * a->clip + 1) * d : 0)
                : NULL;
  p = relattn_alloc(sizeof(float) * (size_t)R);
  if (!p)
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM, "attention: out of memory");

  /* The scores in place, then each row's relative term, mask and softmax;
  ** in blocks of MAP_ROWS rows, between which the pool is asked whether to
  ** stop (a map of 16384 rows takes seconds, most of it first writes to
  ** its pages). */
  for (i = 0; i < n; i++) {
    float *row = map + (size_t)i * n;
    const float *qi = q + (size_t)i * a->ldq;
    const int cnt = a->causal ? i + 1 : n;
    float mx = -INFINITY;
    double sum = 0.0;
    if (i % MAP_ROWS == 0) {
      if (relattn_pool_poll(pool)) {
        relattn_free(p);
        return relattn_errorf(err, errlen, RELATTN_ERR_INTERRUPT,
                              "interrupted");
      }
      relattn_sgemm(0, 1, n - i < MAP_ROWS ? n - i : MAP_ROWS, n, d, s, qi,
                    a->ldq, a->k + (size_t)head * d, a->ldk, 0.0f, row, n);
    }
    if (rk) {
      int r, c;
      for (r = 0; r < R; r++) {
        float dot = 0.0f;
        for (c = 0; c < d; c++) dot += qi[c] * rk[(size_t)r * d + c];
        p[r] = s * dot;
      }
      for (j = 0; j < cnt; j++) {
        int dist = j - i;
        dist = dist < -ke ? -ke : (dist > ke ? ke : dist);
        row[j] += p[dist + ke];
      }
    }
    for (j = 0; j < cnt; j++) mx = row[j] > mx ? row[j] : mx;
    for (j = 0; j < cnt; j++) {
      row[j] = expf(row[j] - mx);
      sum += row[j];
    }
    for (j = 0; j < cnt; j++) row[j] = (float)(row[j] / sum);
    for (j = cnt; j < n; j++) row[j] = 0.0f;
  }
  relattn_free(p);
  return RELATTN_OK;
}
