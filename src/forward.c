/*
** forward.c: one token sequence through a relattn model (docs/reference.md, The forward pass).
**
**   x = tok_emb[tokens] (+ pos_emb: absolute) (+ type_emb[type]); emb_norm(x)
**   per layer, pre-norm:  x += attn(LN1(x));  x += ffn(LN2(x))
**              post-norm: x = LN1(x + attn(x)); x = LN2(x + ffn(x))
**   pre-norm ends with LN_f; then the LM head (tied: tok_emb) and log-softmax.
**   Each norm is LayerNorm, or RMSNorm with norm_kind rmsnorm (no bias);
**   with biases false the projections below have no b.
**   attn: q, k, v = h Wq^T + bq, ...; relative attention per head (causal
**   for decoders): shaw with the layer's rel_k / rel_v, or the config's
**   position scheme (t5 with the model's rel_bias, alibi, rope, none;
**   deberta's bucket map, with its layers' tables) built once per sequence
**   by src/schemes.c; out = z Wo^T + bo. An absolute
**   model adds pos_emb[i] to row i of x first (attention as none).
**   ffn:  act(h W1^T + b1) W2^T + b2, act = GELU (erf form), GELU (tanh
**   form) or ReLU; gated: (act(h W1^T + b1) * (h W3^T + b3)) W2^T + b2.
**   heads (on the final x): cls = x[0]; pooled = act(cls P^T + p) (a
**   pooler); classifier logits = (pooled or cls) C^T + c; masked LM at the
**   rows asked: log_softmax(norm(act(x W^T + b)) E^T + mlm.bias), E = tok_emb
**   when tied, else lm_head (BERT's BertLMPredictionHead).
**
** relattn_forward_batch takes several sequences in one call (one set of
** buffers, one round of tasks per step); each is computed exactly as if alone.
**
** HOW IT WORKS
** Activations live in three buffers kept in the pool's scratch slot 1 across
** calls: x (n, d) the residual stream, h (n, hw) a normed copy (rows of d)
** and then the attention output (rows of i), qkv (n, 3i) the projections
** side by side (the kernel reads them with a stride); i = n_heads * d_head
** is the attention's inner width, d_model unless the config's d_head says
** otherwise, and hw = max(d, i), so a block's rows of h are its own under
** either use. Everything that is row-wise (LayerNorm, the
** projections, the FFN, the LM head) runs as tasks over blocks of 64 to 256 rows
** on the pool, each with a small per-worker buffer (slot 2) for the FFN's
** hidden rows or a block of logits, so no (n, d_ff) or (n, vocab) matrix is
** ever made. The attention itself is the kernel's (src/attention.c), which
** runs its own (head, query block) tasks on the same pool.
**
** DETERMINISM
** A row's result is a function of its sequence and the model alone: the same
** bits whatever the thread count, whichever worker runs a task, and whatever
** other sequences share the call (relattn_scan packs rows; relattn_score runs
** one sequence on the connection's threads). OpenBLAS does not promise that a
** row of a product is independent of the other rows: which kernel runs and in
** what order it sums depends on the whole shape (M, N, K): its SkylakeX
** build, for one, sends small products (M N K up to about 10^6) to another
** kernel than large ones, and edge tiles go through narrower kernels. So
** the rule here is by construction, not by what one kernel set happens to do:
** every product over rows is one block of one sequence, blocks start at the
** sequence's first row and have row_block(n) rows (the last one fewer), a
** function of that sequence's length alone; the tasks are the list of those
** blocks, which does not depend on the pool's size; each task writes only its
** own rows. The attention kernel follows the same rule per sequence (its
** grid depends on n alone), and every reduction (LayerNorm, log-softmax, the
** embedding's mean) is a fixed loop over one row or one sequence. Packing
** therefore no longer makes short sequences' GEMMs bigger; what a batch still
** shares is the buffers and one round of tasks per step. The price, measured
** on relattn_scan at one thread (d_model 256, 4 layers): 22% fewer tokens per
** CPU second on 10-40-token rows than when packed rows shared GEMMs (OpenBLAS
** packs the weights once per product: per sequence now), none on 50-500.
** Where the CPU has FMA the layers' products are src/gemm.c's instead (the
** model's weights put in panel order once, at load): each output is one
** chain of fmaf over the inner dimension, which no other row can change, and
** nothing is repacked per block, so short rows lost their price: 10-40-token
** rows went from 6421 to 10457 tokens per CPU second (same model, one
** thread), 1.27 times what packed rows had. OpenBLAS keeps the heads'
** products (pooler, classifier, masked-LM and LM heads), under the block
** rule above.
** Only the outputs asked for are computed: the LM head only for log-probs,
** and for an attention map alone only the layers up to the map's.
**
** TILES
** Where every output row of a layer's product is a function of its own
** input row alone (src/gemm.c's float32 kernel and src/qgemm.c's int8 and
** bf16 ones say so by definition, whatever the tile or the path), the
** layers' row-wise steps (qkv_task, ffn_task, final_norm_task) run on tiles
** cut across sequences instead: each run of consecutive sequences, first
** row to last, in tiles of row_block(run) rows. The rows get the same bits
** as in their own sequence's blocks; short rows share the weights' trip
** through the cache again, and most of src/gemm.c's edge tiles (under 12
** rows, one or two a sequence) go. Measured on relattn_scan (one thread,
** make bench-deberta's base shape, DeBERTa-v3 6 x 384, embed, 400 rows of
** 10-40 tokens, float32): the edge tiles' share of perf's samples in the
** library from 6.8% to 1.7%, the library's samples 6% fewer; tokens per
** CPU second 6900-7200 before, 7200-7500 after (interleaved, a busy
** machine). int8 and bf16 short rows, and rows of 50-500 tokens (alone in
** their pass), within the noise. The row-0 path (ROW 0) cuts its rows, one
** a classified sequence, the same way.
** On OpenBLAS (no FMA) and for the heads the blocks stay per sequence.
**
** ROW 0
** A classifier's logits, the pooler and the cls embedding read the final
** row 0 alone, so in the last layer that row has a path of its own: q, k
** and v of every row as before (row 0 attends to all keys), then the
** attention of query 0 alone (the kernel's n_q) and the rest of the layer
** on a one-row block (row0_layer). Only the sequences that read other
** final rows too (a mean embedding, log-probs, masked-LM fills) run the
** full last layer, and they run the row-0 path besides, into its own
** buffer: the one-row products are not the bits of row 0 in a block, so a
** second way of making these outputs would break the rule above (a scan's
** label must be relattn_classify's, whatever else the scan reads). A
** classifier so skips the last layer but its q, k and v for all rows but
** row 0: 13% of a six-layer DeBERTa-v3-xsmall-shaped scan at one thread.
*/
#include "relattn.h"
#include "fwd.h"
#include "vecmath.h"

#include <math.h>
#include <string.h>

/* Rows per task: sgemm gets ~20% faster from 64 rows to 256 (its packing
** of the weights is amortized), and a sequence of 128 rows or more should
** give two tasks at least. The size depends on the sequence's length alone
** (see DETERMINISM above): half of it, 64 to 256. Measured on the scan (one
** thread, d_model 256, rows of 50-500 tokens), tokens per CPU second: a
** quarter 8690, an eighth 8272, half 9106. */
#define ROWS_MIN 64
#define ROWS_MAX 256
#define ROWS_SPLIT 2
#define SLOT_ACTS 1            /* worker 0: x, h, qkv */
#define SLOT_ROWS 2            /* every worker: one block's hidden/logits */
#define SLOT_Q8 4              /* every worker: an int8 or bf16 product's rows */

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Rows per block of a sequence of n rows. */
static int row_block(int n) {
  int rows = (n / ROWS_SPLIT + 15) & ~15;
  return rows < ROWS_MIN ? ROWS_MIN : (rows > ROWS_MAX ? ROWS_MAX : rows);
}

/* Upper bound on the blocks of count sequences of n rows in all: each
** sequence has at most n_s / ROWS_MIN + 1. */
static size_t max_blocks(int n, int count) {
  return (size_t)n / ROWS_MIN + (size_t)count;
}

/* Floats in one worker's block buffer when blocks have up to rows rows:
** the FFN's hidden rows (and a gated FFN's gate rows after them), or a
** block of logits. */
static size_t rows_floats(const relattn_config *c, int rows) {
  size_t f = (size_t)c->d_ff * (c->ffn_gated ? 2 : 1);
  size_t w = f > (size_t)c->vocab_size ? f : (size_t)c->vocab_size;
  if (rows > ROWS_MAX) rows = ROWS_MAX;
  return round16((size_t)rows * w);
}

static size_t fill_floats(const relattn_config *c, int rows);

/* The width of h's rows: the normed input's (d_model) or the attention
** output's (the inner width), the larger. */
static int h_width(const relattn_config *c) {
  const int in = relattn_config_inner(c);
  return in > c->d_model ? in : c->d_model;
}

/* Floats of the activation buffers for n rows in count sequences; 0 on
** overflow. */
static size_t acts_floats(const relattn_config *c, int n, int count) {
  size_t nd, nh, ni, total, qkv;
  if (n < 1 || count < 1 ||
      !relattn_mul_ok((size_t)n, (size_t)c->d_model, &nd) ||
      !relattn_mul_ok((size_t)n, (size_t)h_width(c), &nh) ||
      !relattn_mul_ok((size_t)n, (size_t)relattn_config_inner(c), &ni) ||
      !relattn_mul_ok(round16(ni), 3, &qkv))
    return 0;
  /* x: (n, d); h: (n, hw); qkv: (n, 3i); start: (count); blocks:
  ** (max_blocks, 3); the row-0 path's x1: (count, d), h1: (count, hw),
  ** row0: (count, 3); tiles: (max_blocks + count, 3), the row-0 path's
  ** after the layers' */
  total = round16(nd);
  if (!relattn_add_ok(total, round16(nh), &total) ||
      !relattn_add_ok(total, qkv, &total) ||
      !relattn_add_ok(total, round16((size_t)count), &total) ||
      !relattn_add_ok(total, round16(3 * max_blocks(n, count)), &total) ||
      !relattn_add_ok(total, round16((size_t)count * c->d_model), &total) ||
      !relattn_add_ok(total, round16((size_t)count * h_width(c)), &total) ||
      !relattn_add_ok(total, round16(3 * (size_t)count), &total) ||
      !relattn_add_ok(total, round16(3 * (max_blocks(n, count) + (size_t)count)),
                      &total))
    return 0;
  return total;
}

/* Every buffer a pass may hold, as relattn_forward_batch and the attention
** kernel take them: worker 0's activations, and on each worker (tasks go to
** any) a block buffer of min(n, ROWS_MAX) rows and the kernel's scratch for
** a sequence of n rows (its longest; the scratch grows with min(clip, n)). */
size_t relattn_forward_memory(const relattn_model *m, int n, int count,
                              int workers) {
  const relattn_config *c;
  relattn_attn a;
  relattn_rel rel;
  size_t acts, per, total, extra;
  if (!m || workers < 1) return 0;
  c = &m->cfg;
  acts = acts_floats(c, n, count);
  /* a masked-LM model's block buffer also holds two blocks of d_model
  ** rows; its fill blocks' list is at most (n / 64 + count) entries */
  if (!acts || !relattn_mul_ok(acts, sizeof(float), &total) ||
      !relattn_mul_ok(c->head == RELATTN_HEAD_MLM &&
                              fill_floats(c, n) > rows_floats(c, n)
                          ? fill_floats(c, n)
                          : rows_floats(c, n),
                      sizeof(float), &per) ||
      (c->head == RELATTN_HEAD_MLM &&
       !relattn_add_ok(total, 12 * max_blocks(n, count), &total)))
    return 0;
  memset(&a, 0, sizeof a);
  a.n = n;
  a.heads = c->n_heads;
  a.d_head = relattn_config_d_head(c);
  if (c->pos.type == RELATTN_POS_SHAW) {
    a.clip = c->clip;
    a.rel_k = (const float *)m; /* only whether there is a table counts */
    a.rel_v = c->rel_values ? a.rel_k : NULL;
  } else {
    /* the terms' shape for the estimate: a band as long as the sequence */
    relattn_pos_tables tb;
    memset(&rel, 0, sizeof rel);
    memset(&tb, 0, sizeof tb);
    rel.band = n > 1 ? n - 1 : 0;
    rel.rows = 1;
    if (c->pos.type == RELATTN_POS_T5) {
      rel.bucket = (const int *)m;
      rel.rows = c->pos.num_buckets;
      rel.beta = (const float *)m;
    }
    if (c->pos.type == RELATTN_POS_REL_KEY ||
        c->pos.type == RELATTN_POS_REL_KEY_QUERY) {
      rel.band = c->max_len > 1 ? c->max_len - 1 : 0;
      rel.rows = 2 * rel.band + 1;
      rel.rk = (const float *)m;
      if (c->pos.type == RELATTN_POS_REL_KEY_QUERY) rel.rq = rel.rk;
    }
    if (c->pos.type == RELATTN_POS_XL) {
      rel.band = c->clip;
      rel.rows = 2 * c->clip + 1;
      rel.rk = rel.u = rel.w = (const float *)m;
    }
    if (c->pos.type == RELATTN_POS_DEBERTA) {
      rel.rows = 2 * (c->pos.position_buckets > 0
                          ? c->pos.position_buckets
                          : c->pos.max_relative_positions);
      rel.rk = rel.rq = (const float *)m;
      if (c->quant == RELATTN_QUANT_INT8) { /* int8 tables (model.c) */
        rel.rk = rel.rq = NULL;
        rel.qrk = rel.qrq = (const relattn_q8w *)m;
      } else if (c->quant == RELATTN_QUANT_BF16) { /* bf16 tables */
        rel.rk = rel.rq = NULL;
        rel.brk = rel.brq = (const relattn_bf16w *)m;
      }
      rel.bucket = (const int *)m;
      rel.per_head = 1;
    }
    if (c->pos.type == RELATTN_POS_ROPE)
      rel.rot_dim = c->pos.rotary_dim ? c->pos.rotary_dim : a.d_head;
    a.rel = &rel;
    if (!relattn_mul_ok(relattn_scheme_bytes(&c->pos, &tb, n, a.heads,
                                             a.d_head),
                        (size_t)count, &extra) ||
        !relattn_add_ok(total, extra, &total) ||
        !relattn_add_ok(total, relattn_attention_shared_bytes(&a), &total))
      return 0;
  }
  if (c->quant != RELATTN_QUANT_NONE) {
    /* an int8 (bf16) product's rows, rounded (src/qgemm.c): at most a
    ** block's rows of the widest input */
    int in = c->d_model > c->d_ff ? c->d_model : c->d_ff;
    if (relattn_config_inner(c) > in) in = relattn_config_inner(c);
    if (!relattn_add_ok(per,
                        c->quant == RELATTN_QUANT_INT8
                            ? relattn_q8_scratch(ROWS_MAX, in)
                            : relattn_bf16_scratch(ROWS_MAX, in),
                        &per))
      return 0;
  }
  if (!relattn_add_ok(per, relattn_attention_scratch_bytes(&a), &per) ||
      !relattn_mul_ok(per, (size_t)workers, &per) ||
      !relattn_add_ok(total, per, &total))
    return 0;
  return total;
}

/* ---- row-wise pieces ----------------------------------------------------- */

/* The model's norm (its norm_kind and eps) of a block of rows. */
static void model_norm(const relattn_model *m, float *out, const float *x,
                       int rows, const float *w, const float *b) {
  relattn_norm(out, x, rows, m->cfg.d_model, w, b, m->cfg.norm_eps,
               m->cfg.norm_kind);
}

/* y = x W^T + b for a block of rows: W is (out, in) as nn.Linear.
** beta 1 adds into y (the residual). */
static void linear(float *y /* (rows, ldy) */, int ldy, const float *x,
                   int ldx, int rows, int in, int out, const float *w,
                   const float *b, float beta) {
  int r, c;
  relattn_sgemm(0, 1, rows, out, in, 1.0f, x, ldx, w, in, beta, y, ldy);
  if (b)
    for (r = 0; r < rows; r++) {
      float *yr = y + (size_t)r * ldy;
      for (c = 0; c < out; c++) yr[c] += b[c];
    }
}

/* linear() for a layer's weight (src/decode.c takes it too): the model's weights in panel order go to
** src/gemm.c's kernel (its own fixed order of arithmetic), int8 ones
** (quantization int8: w is a relattn_q8w; bf16: a relattn_bf16w) to
** src/qgemm.c's, each row of x rounded on the way, else sgemm. 0, or 1 when the worker's scratch
** could not be had. */
int relattn_fwd_linear(const relattn_model *m, relattn_pool *pool, int worker,
                       float *y, int ldy, const float *x, int ldx, int rows,
                       int in, int out, const float *w, const float *b,
                       float beta) {
  if (m->cfg.quant == RELATTN_QUANT_INT8) {
    void *scratch = relattn_pool_scratch_slot(pool, worker, SLOT_Q8,
                                              relattn_q8_scratch(rows, in));
    if (!scratch) return 1;
    relattn_q8_gemm(y, ldy, x, ldx, rows, (const relattn_q8w *)(const void *)w,
                    b, beta != 0.0f, scratch);
    return 0;
  }
  if (m->cfg.quant == RELATTN_QUANT_BF16) {
    void *scratch = relattn_pool_scratch_slot(pool, worker, SLOT_Q8,
                                              relattn_bf16_scratch(rows, in));
    if (!scratch) return 1;
    relattn_bf16_gemm(y, ldy, x, ldx, rows,
                      (const relattn_bf16w *)(const void *)w, b,
                      beta != 0.0f, scratch);
    return 0;
  }
  if (m->packed)
    relattn_gemm(y, ldy, x, ldx, rows, in, out, w, b, beta != 0.0f);
  else
    linear(y, ldy, x, ldx, rows, in, out, w, b, beta);
  return 0;
}

/* ---- products of a few rows across the pool (a decoding step) ---------- */

/* Work below which a call stays on the calling thread, in rows x in x out
** x the bytes of a weight (4 float32, 2 bf16, 1 int8: at batch 1 the time
** is the weights' reading): a small matrix is read in a few microseconds,
** and the hand-off and the second thread's misses cost as much. Measured
** on one row against 64 packed float32 weights in turn (so from memory, as
** in a decoding step), two threads against one, the best of 7 (this 2-core
** machine shared, load average near 6): 65K-147K multiply-adds 0.5-1.35x,
** 262K 1.2-1.9x, 512 x 1024 to 512 x 2048 0.9-4.4x (the noise is the
** others' load); so 1 MB. */
#define ROWS_SPLIT_WORK ((int64_t)1 << 20)
/* Tasks per worker: the atomic counter balances them, so a worker that the
** OS (or a busy machine) delays leaves its share to the others. */
#define ROWS_TASKS_PER_WORKER 4
#define ROWS_MAX_PRODS 3

typedef struct rows_ctx {
  const relattn_model *m;
  const float *x;
  int ldx, rows, in, n;
  const relattn_fwd_prod *p;
  int first[ROWS_MAX_PRODS + 1]; /* product i's panels: [first[i], first[i+1]) */
  int n_tasks;
  const void *scratch;           /* int8 / bf16: x's rows, prepared once */
} rows_ctx;

/* Panels [p0, p1) of the products, one call per product they touch. */
static void rows_task(void *ctxp, int task, int worker) {
  const rows_ctx *c = ctxp;
  const int total = c->first[c->n];
  const int p0 = (int)((int64_t)total * task / c->n_tasks);
  const int p1 = (int)((int64_t)total * (task + 1) / c->n_tasks);
  int i;
  (void)worker;
  for (i = 0; i < c->n; i++) {
    const relattn_fwd_prod *p = &c->p[i];
    const int a = p0 > c->first[i] ? p0 : c->first[i];
    const int e = p1 < c->first[i + 1] ? p1 : c->first[i + 1];
    const int acc = p->beta != 0.0f;
    int c0, c1;
    if (a >= e) continue;
    c0 = (a - c->first[i]) * RELATTN_PANEL;
    c1 = (e - c->first[i]) * RELATTN_PANEL;
    if (c1 > p->out) c1 = p->out;
    if (c->m->cfg.quant == RELATTN_QUANT_INT8)
      relattn_q8_gemm_cols(p->y, p->ldy, c->rows,
                           (const relattn_q8w *)(const void *)p->w, p->b, acc,
                           c->scratch, c0, c1);
    else if (c->m->cfg.quant == RELATTN_QUANT_BF16)
      relattn_bf16_gemm_cols(p->y, p->ldy, c->rows,
                             (const relattn_bf16w *)(const void *)p->w, p->b,
                             acc, c->scratch, c0, c1);
    else
      relattn_gemm(p->y + c0, p->ldy, c->x, c->ldx, c->rows, c->in, c1 - c0,
                   p->w + (size_t)c0 * c->in, p->b ? p->b + c0 : NULL, acc);
  }
}

int relattn_fwd_rows(const relattn_model *m, relattn_pool *pool,
                     const float *x, int ldx, int rows, int in,
                     const relattn_fwd_prod *p, int n) {
  const int worker = relattn_pool_worker(pool);
  rows_ctx c;
  int64_t work = 0;
  int i;
  if (n < 1 || n > ROWS_MAX_PRODS || rows < 1) return 0;
  if (m->cfg.quant == RELATTN_QUANT_NONE && !m->packed) {
    /* OpenBLAS's sgemm: its bits depend on the product's shape, so no cut */
    for (i = 0; i < n; i++)
      if (relattn_fwd_linear(m, pool, worker, p[i].y, p[i].ldy, x, ldx, rows,
                             in, p[i].out, p[i].w, p[i].b, p[i].beta))
        return 1;
    return 0;
  }
  memset(&c, 0, sizeof c);
  c.m = m, c.x = x, c.ldx = ldx, c.rows = rows, c.in = in, c.p = p, c.n = n;
  for (i = 0; i < n; i++) {
    c.first[i + 1] = c.first[i] + (p[i].out + RELATTN_PANEL - 1) / RELATTN_PANEL;
    work += (int64_t)rows * in * p[i].out *
            (m->cfg.quant == RELATTN_QUANT_INT8   ? 1
             : m->cfg.quant == RELATTN_QUANT_BF16 ? 2
                                                  : 4);
  }
  if (m->cfg.quant != RELATTN_QUANT_NONE) {
    /* x rounded once for every product and task (the caller's scratch) */
    const int q8 = m->cfg.quant == RELATTN_QUANT_INT8;
    void *scratch = relattn_pool_scratch_slot(
        pool, worker, SLOT_Q8,
        q8 ? relattn_q8_scratch(rows, in) : relattn_bf16_scratch(rows, in));
    if (!scratch) return 1;
    if (q8) relattn_q8_rows(scratch, x, ldx, rows, in);
    else relattn_bf16_rows(scratch, x, ldx, rows, in);
    c.scratch = scratch;
  }
  /* every output's bits are the kernel's whatever the cut (src/gemm.c,
  ** src/qgemm.c), so the cut may follow the pool's size */
  c.n_tasks = 1;
  if (work >= ROWS_SPLIT_WORK && relattn_pool_size(pool) > 1) {
    c.n_tasks = relattn_pool_size(pool) * ROWS_TASKS_PER_WORKER;
    if (c.n_tasks > c.first[n]) c.n_tasks = c.first[n];
  }
  relattn_pool_run(pool, c.n_tasks, rows_task, &c);
  return 0;
}

int relattn_fwd_ffn_rows(const relattn_model *m, const relattn_layer *L,
                         relattn_pool *pool, float *x, const float *in,
                         int rows, float *hid) {
  const relattn_config *cfg = &m->cfg;
  const int d = cfg->d_model, ff = cfg->d_ff;
  float *gate = hid + (size_t)rows * ff;
  relattn_fwd_prod p[2];
  size_t i, count = (size_t)rows * ff;
  p[0].y = hid, p[0].ldy = ff, p[0].out = ff, p[0].w = L->w1, p[0].b = L->b1;
  p[0].beta = 0.0f;
  p[1] = p[0];
  p[1].y = gate, p[1].w = L->w3, p[1].b = L->b3;
  if (relattn_fwd_rows(m, pool, in, d, rows, d, p, cfg->ffn_gated ? 2 : 1))
    return 1;
  relattn_fwd_activate(hid, count, cfg->activation);
  if (cfg->ffn_gated)
    for (i = 0; i < count; i++) hid[i] *= gate[i];
  p[0].y = x, p[0].ldy = d, p[0].out = d, p[0].w = L->w2, p[0].b = L->b2;
  p[0].beta = 1.0f;
  return relattn_fwd_rows(m, pool, hid, ff, rows, ff, p, 1);
}

/* Columns of the LM head per task (float32 tables): a fixed cut, since
** OpenBLAS's bits depend on the product's shape; a function of the shape
** alone, so the same on any number of threads. */
#define HEAD_COLS 1024

typedef struct head_ctx {
  float *logits;
  const float *x, *e;
  int ldx, rows, d, vocab;
  float alpha;
} head_ctx;

/* Columns [c0, c0 + cols) of the logits. A few rows (a decoding step's,
** a row per beam) take src/vecmath.c's dot_rows, each row on its own,
** reading the table in place: sgemm packed the whole table on every call
** (a tenth of a T5 step at one thread); more rows take sgemm. */
#define HEAD_DOT_ROWS 8

static void head_part(const head_ctx *h, int c0, int cols) {
  int r;
  if (h->rows > HEAD_DOT_ROWS) {
    relattn_sgemm(0, 1, h->rows, cols, h->d, h->alpha, h->x, h->ldx,
                  h->e + (size_t)c0 * h->d, h->d, 0.0f, h->logits + c0,
                  h->vocab);
    return;
  }
  for (r = 0; r < h->rows; r++)
    relattn_vec_ops()->dot_rows(h->logits + (size_t)r * h->vocab + c0,
                                h->x + (size_t)r * h->ldx,
                                h->e + (size_t)c0 * h->d, h->d, cols, h->d,
                                h->alpha);
}

static void head_cols_task(void *ctxp, int task, int worker) {
  const head_ctx *h = ctxp;
  const int c0 = task * HEAD_COLS;
  const int cols = h->vocab - c0 < HEAD_COLS ? h->vocab - c0 : HEAD_COLS;
  (void)worker;
  head_part(h, c0, cols);
}

int relattn_fwd_head(const relattn_model *m, relattn_pool *pool, int worker,
                     float *logits, const float *x, int ldx, int rows,
                     float alpha, const float *b) {
  const int V = m->cfg.vocab_size, d = m->cfg.d_model;
  int r, c, n_tasks = 1;
  (void)worker; /* relattn_fwd_rows finds the caller's own */
  if (m->cfg.quant_emb == RELATTN_QUANT_INT8) {
    /* the packed int8 table: a linear layer's product, split as one */
    relattn_fwd_prod p;
    p.y = logits, p.ldy = V, p.out = V, p.w = m->lm_head, p.b = b;
    p.beta = 0.0f;
    if (relattn_fwd_rows(m, pool, x, ldx, rows, d, &p, 1)) return 1;
    if (alpha != 1.0f)
      for (r = 0; r < rows; r++)
        for (c = 0; c < V; c++) logits[(size_t)r * V + c] *= alpha;
    return 0;
  }
  if ((int64_t)rows * d * V * 4 >= ROWS_SPLIT_WORK)
    n_tasks = (V + HEAD_COLS - 1) / HEAD_COLS;
  {
    head_ctx h;
    h.logits = logits, h.x = x, h.e = m->lm_head, h.ldx = ldx, h.rows = rows;
    h.d = d, h.vocab = V, h.alpha = alpha;
    if (n_tasks == 1)
      head_part(&h, 0, V);
    else
      relattn_pool_run(pool, n_tasks, head_cols_task, &h);
  }
  if (b)
    for (r = 0; r < rows; r++)
      for (c = 0; c < V; c++) logits[(size_t)r * V + c] += b[c];
  return 0;
}

/* The heads' activations on floats (mlm.dense): those of the FFN, and tanh,
** which only the heads take. */
static void activate_head(float *x, size_t count, int activation) {
  size_t i;
  if (activation == RELATTN_TANH)
    for (i = 0; i < count; i++) x[i] = tanhf(x[i]);
  else
    relattn_fwd_activate(x, count, activation);
}

/* The same on one double (the pooler, computed in double). */
static double activate1(double x, int activation) {
  switch (activation) {
    case RELATTN_RELU: return x > 0 ? x : 0;
    case RELATTN_TANH: return tanh(x);
    case RELATTN_GELU_TANH:
      return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    default: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752));
  }
}

/* ---- the pass -------------------------------------------------------------- */

/* One pass over count sequences packed row after row: every row-wise step
** runs on all rows at once (bigger GEMMs for short sequences), the attention
** runs per sequence. */
typedef struct fwd_ctx {
  const relattn_model *m;
  relattn_fwd *f;        /* (count) */
  int count;
  relattn_pool *pool;
  const relattn_layer *layer;
  int n, d;              /* n: rows of all sequences */
  int in, hw;            /* the attention's inner width; h's row width */
  float *x;              /* (n, d) residual stream */
  float *h;              /* (n, hw) normed input, then attention output */
  float *qkv;            /* (n, 3 in) */
  int *start;            /* (count) first row of each sequence */
  int32_t *blocks;       /* (n_blocks, 3): sequence, first row, rows */
  int n_blocks;
  int32_t *tiles;        /* (n_tiles, 3): the layers' blocks (TILES) */
  int n_tiles;
  int block_max;         /* rows of the largest block or tile */
  relattn_scheme *schemes; /* (count) the terms of each sequence, or NULL (shaw) */
  int failed;            /* a worker's scratch could not be had */
  int32_t *fills;        /* (n_fills, 3): sequence, first fill row, rows */
  int n_fills;
  int fill_max;          /* rows of the largest fill block */
  float *x1;             /* (count, d) the row-0 path: each final row 0 */
  float *h1;             /* (count, hw) its attention row, then normed row */
  int32_t *row0;         /* (count, 3) its one-row blocks, as blocks */
  int32_t *tiles1;       /* (count, 3) room for its tiles */
} fwd_ctx;

/* The rows of task (block) number task: sets *r0, returns the count. */
static int block_rows(const fwd_ctx *c, int task, int *r0) {
  *r0 = c->blocks[3 * task + 1];
  return c->blocks[3 * task + 2];
}

/* The rows of a layer's task (tile) number task, as block_rows. */
static int tile_rows(const fwd_ctx *c, int task, int *r0) {
  *r0 = c->tiles[3 * task + 1];
  return c->tiles[3 * task + 2];
}

/* Attention input of one block: (pre) h = LN1(x), then q, k, v. */
static void qkv_task(void *ctxp, int task, int worker) {
  fwd_ctx *c = ctxp;
  const relattn_layer *L = c->layer;
  int r0, rows = tile_rows(c, task, &r0), d = c->d, w = c->in;
  const float *in = c->x + (size_t)r0 * d;
  float *qkv = c->qkv + (size_t)r0 * 3 * w;
  if (c->m->cfg.norm == RELATTN_NORM_PRE) {
    float *h = c->h + (size_t)r0 * c->hw; /* rows of d in the block's rows */
    model_norm(c->m, h, in, rows, L->ln1_w, L->ln1_b);
    in = h;
  }
  if (!c->m->packed && !c->m->cfg.quant && L->wk == L->wq + (size_t)w * d &&
      L->wv == L->wk + (size_t)w * d &&
      (L->bq ? L->bk == L->bq + w && L->bv == L->bk + w : !L->bk && !L->bv)) {
    /* the store lays wq, wk, wv (and bq, bk, bv) out back to back: one
    ** (3i, d) product fills the three side by side */
    linear(qkv, 3 * w, in, d, rows, d, 3 * w, L->wq, L->bq, 0.0f);
    return;
  }
  if (relattn_fwd_linear(c->m, c->pool, worker, qkv, 3 * w, in, d, rows, d, w,
                   L->wq, L->bq, 0.0f) ||
      relattn_fwd_linear(c->m, c->pool, worker, qkv + w, 3 * w, in, d, rows, d, w,
                   L->wk, L->bk, 0.0f) ||
      relattn_fwd_linear(c->m, c->pool, worker, qkv + 2 * w, 3 * w, in, d, rows, d,
                   w, L->wv, L->bv, 0.0f))
    c->failed = 1;
}

/* The rest of a layer for one block: output projection and residual, the
** FFN and its residual, with the LayerNorms where the norm puts them. */
static void ffn_task(void *ctxp, int task, int worker) {
  fwd_ctx *c = ctxp;
  const relattn_layer *L = c->layer;
  const relattn_config *cfg = &c->m->cfg;
  int r0, rows = tile_rows(c, task, &r0), d = c->d, pre;
  float *x = c->x + (size_t)r0 * d, *h = c->h + (size_t)r0 * c->hw, *in;
  float *hid = relattn_pool_scratch_slot(c->pool, worker, SLOT_ROWS,
                                         rows_floats(cfg, c->block_max) * sizeof(float));
  if (!hid) {
    c->failed = 1;
    return;
  }
  pre = cfg->norm == RELATTN_NORM_PRE;
  /* the attention output's rows (hw apart), then the block's rows of h
  ** hold its normed rows (d apart) */
  if (relattn_fwd_linear(c->m, c->pool, worker, x, d, h, c->hw, rows, c->in, d,
                   L->wo, L->bo, 1.0f)) {
    c->failed = 1;
    return;
  }
  if (pre) {
    model_norm(c->m, h, x, rows, L->ln2_w, L->ln2_b);
    in = h;
  } else {
    model_norm(c->m, x, x, rows, L->ln1_w, L->ln1_b);
    in = x;
  }
  if (relattn_fwd_ffn(c->m, L, c->pool, worker, x, in, rows, hid)) {
    c->failed = 1;
    return;
  }
  if (!pre) model_norm(c->m, x, x, rows, L->ln2_w, L->ln2_b);
}

int relattn_fwd_ffn(const relattn_model *m, const relattn_layer *L,
                    relattn_pool *pool, int worker, float *x, const float *in,
                    int rows, float *hid) {
  const relattn_config *cfg = &m->cfg;
  const int d = cfg->d_model;
  if (relattn_fwd_linear(m, pool, worker, hid, cfg->d_ff, in, d, rows, d,
                         cfg->d_ff, L->w1, L->b1, 0.0f))
    return 1;
  relattn_fwd_activate(hid, (size_t)rows * cfg->d_ff, cfg->activation);
  if (cfg->ffn_gated) {
    /* the gate's rows after the hidden rows (rows_floats has room) */
    float *gate = hid + (size_t)rows * cfg->d_ff;
    size_t i, count = (size_t)rows * cfg->d_ff;
    if (relattn_fwd_linear(m, pool, worker, gate, cfg->d_ff, in, d, rows, d,
                           cfg->d_ff, L->w3, L->b3, 0.0f))
      return 1;
    for (i = 0; i < count; i++) hid[i] *= gate[i];
  }
  return relattn_fwd_linear(m, pool, worker, x, d, hid, cfg->d_ff, rows,
                            cfg->d_ff, d, L->w2, L->b2, 1.0f);
}

static void final_norm_task(void *ctxp, int task, int worker) {
  fwd_ctx *c = ctxp;
  int r0, rows = tile_rows(c, task, &r0);
  float *x = c->x + (size_t)r0 * c->d;
  (void)worker;
  model_norm(c->m, x, x, rows, c->m->lnf_w, c->m->lnf_b);
}

static int wants_head(const relattn_fwd *f) {
  return f->logprob || f->top_token || f->top_logprob;
}

/* Outputs read from the final hidden rows (all layers run). */
static int wants_rows(const relattn_fwd *f) {
  return f->embedding || f->cls || f->pooled || f->logits || f->fill ||
         f->hidden || f->sentence || f->token_logits;
}

/* Outputs read from the final row 0 alone: the row-0 path makes them. */
static int wants_row0(const relattn_fwd *f) {
  return f->cls || f->pooled || f->logits;
}

/* Outputs that read every final row: the last layer runs on all of them. */
static int wants_all_rows(const relattn_fwd *f) {
  return f->embedding || f->fill || f->hidden || f->sentence ||
         f->token_logits || wants_head(f);
}

/* Logits of a block of rows, then per row the log-softmax at the next token
** and the most likely token. A sequence's last row predicts nothing. */
static void head_task(void *ctxp, int task, int worker) {
  fwd_ctx *c = ctxp;
  const relattn_config *cfg = &c->m->cfg;
  int r0, rows = block_rows(c, task, &r0), r, t, V = cfg->vocab_size;
  float *logits = relattn_pool_scratch_slot(c->pool, worker, SLOT_ROWS,
                                            rows_floats(cfg, c->block_max) * sizeof(float));
  if (!logits) {
    c->failed = 1;
    return;
  }
  if (relattn_fwd_head(c->m, c->pool, worker, logits,
                       c->x + (size_t)r0 * c->d, c->d, rows, 1.0f, NULL)) {
    c->failed = 1;
    return;
  }
  for (r = 0; r < rows; r++) {
    const float *z = logits + (size_t)r * V;
    int s = c->blocks[3 * task], i = r0 + r - c->start[s], arg = 0;
    relattn_fwd *f = &c->f[s];
    float mx = z[0], lse;
    double sum = 0;
    if (i >= f->n - 1 || !wants_head(f)) continue;
    for (t = 1; t < V; t++)
      if (z[t] > mx) mx = z[t], arg = t;
    for (t = 0; t < V; t++) sum += expf(z[t] - mx);
    lse = mx + (float)log(sum);
    if (f->logprob) f->logprob[i] = z[f->tokens[i + 1]] - lse;
    if (f->top_token) f->top_token[i] = arg;
    if (f->top_logprob) f->top_logprob[i] = mx - lse;
  }
}

/* Floats of a worker's buffer for a masked-LM block of rows: the gathered
** rows, their hidden rows, and their logits. */
static size_t fill_floats(const relattn_config *c, int rows) {
  if (rows > ROWS_MAX) rows = ROWS_MAX;
  return 2 * round16((size_t)rows * (size_t)c->d_model) +
         round16((size_t)rows * (size_t)c->vocab_size);
}

/* The masked-LM head on a block of a sequence's fill rows: logits, then per
** row the log-softmax of its fill_k best tokens, best first (the lower id
** first on a tie). */
static void fill_task(void *ctxp, int task, int worker) {
  fwd_ctx *c = ctxp;
  const relattn_model *m = c->m;
  const relattn_config *cfg = &m->cfg;
  const int s = c->fills[3 * task], i0 = c->fills[3 * task + 1];
  const int rows = c->fills[3 * task + 2], d = c->d, V = cfg->vocab_size;
  relattn_fwd *f = &c->f[s];
  float *g = relattn_pool_scratch_slot(c->pool, worker, SLOT_ROWS,
                                       fill_floats(cfg, c->fill_max) *
                                           sizeof(float));
  float *h, *logits;
  int r, t, j, k = f->fill_k;
  if (!g) {
    c->failed = 1;
    return;
  }
  h = g + round16((size_t)rows * d);
  logits = h + round16((size_t)rows * d);
  for (r = 0; r < rows; r++)
    memcpy(g + (size_t)r * d,
           c->x + ((size_t)c->start[s] + (size_t)f->fill[i0 + r]) * d,
           sizeof(float) * d);
  linear(h, d, g, d, rows, d, d, m->mlm_w, m->mlm_b, 0.0f);
  activate_head(h, (size_t)rows * d, cfg->head_activation);
  model_norm(m, h, h, rows, m->mlm_ln_w, m->mlm_ln_b);
  if (relattn_fwd_head(m, c->pool, worker, logits, h, d, rows, 1.0f,
                       m->mlm_bias)) {
    c->failed = 1;
    return;
  }
  for (r = 0; r < rows; r++) {
    const float *z = logits + (size_t)r * V;
    int32_t *tok = f->fill_token + (size_t)(i0 + r) * k;
    float *lp = f->fill_logprob + (size_t)(i0 + r) * k;
    float mx = z[0], lse;
    double sum = 0;
    int have = 0;
    for (t = 1; t < V; t++)
      if (z[t] > mx) mx = z[t];
    for (t = 0; t < V; t++) sum += expf(z[t] - mx);
    lse = mx + (float)log(sum);
    /* the k best by insertion: a token enters only above a strictly smaller
    ** logit, so equal logits keep id order */
    for (t = 0; t < V; t++) {
      if (have == k && !(z[t] > z[tok[k - 1]])) continue;
      j = have < k ? have++ : k - 1;
      for (; j > 0 && z[t] > z[tok[j - 1]]; j--) tok[j] = tok[j - 1];
      tok[j] = t;
    }
    for (j = 0; j < k; j++) lp[j] = z[tok[j]] - lse;
  }
}

/* The pooler and the classifier of sequence s on its final row 0 (the
** row-0 path's, x1), in double: one row, so a plain loop (the same bits on
** any BLAS). */
/* Whether a layer's products give each row bits of its own (TILES). */
static int rows_apart(const relattn_model *m) {
  return m->packed || m->cfg.quant;
}

/* Cuts into tiles (TILES) the rows of each run of consecutive sequences
** for which keep holds (every sequence: keep NULL): x's rows (start, n),
** or with one_row the row-0 path's (sequence s is row s). Returns the
** count, at most max_blocks(rows, count); raises block_max. */
static int cut_tiles(fwd_ctx *c, int32_t *tiles,
                     int (*keep)(const relattn_fwd *), int one_row) {
  int s = 0, e, k = 0, r0, run, rows, b;
  while (s < c->count) {
    if (keep && !keep(&c->f[s])) {
      s++;
      continue;
    }
    for (e = s + 1; e < c->count && (!keep || keep(&c->f[e])); e++) {
    }
    r0 = one_row ? s : c->start[s];
    run = one_row ? e - s : c->start[e - 1] + c->f[e - 1].n - r0;
    rows = row_block(run);
    for (b = 0; b < run; b += rows, k++) {
      tiles[3 * k] = s;
      tiles[3 * k + 1] = r0 + b;
      tiles[3 * k + 2] = run - b < rows ? run - b : rows;
      if (tiles[3 * k + 2] > c->block_max) c->block_max = tiles[3 * k + 2];
    }
    s = e;
  }
  return k;
}

static void pool_rows(const fwd_ctx *c, relattn_fwd *f, int s) {
  const relattn_model *m = c->m;
  const relattn_config *cfg = &m->cfg;
  const int d = c->d;
  const float *x0 = c->x1 + (size_t)s * d, *in = x0;
  float *pooled = f->pooled;
  int o, j;
  if (f->cls) memcpy(f->cls, x0, sizeof(float) * d);
  if (cfg->pooler && (f->pooled || f->logits)) {
    if (!pooled) pooled = c->h1 + (size_t)s * c->hw; /* a spent row */
    for (o = 0; o < d; o++) {
      const float *w = m->pool_w + (size_t)o * d;
      double acc = m->pool_b[o];
      for (j = 0; j < d; j++) acc += (double)w[j] * x0[j];
      pooled[o] = (float)activate1(acc, cfg->pooler_activation);
    }
    in = pooled;
  }
  if (f->logits)
    for (o = 0; o < cfg->n_labels; o++) {
      const float *w = m->cls_w + (size_t)o * d;
      double acc = m->cls_b[o];
      for (j = 0; j < d; j++) acc += (double)w[j] * in[j];
      f->logits[o] = (float)acc;
    }
}

/* The token classifier on every final row of sequence s, in double as the
** sequence classifier (the same bits on any BLAS): logits (n, n_labels). */
static void token_rows(const fwd_ctx *c, relattn_fwd *f, int s) {
  const relattn_model *m = c->m;
  const int d = c->d, L = m->cfg.n_labels;
  int i, o, j;
  for (i = 0; i < f->n; i++) {
    const float *x = c->x + ((size_t)c->start[s] + (size_t)i) * d;
    for (o = 0; o < L; o++) {
      const float *w = m->cls_w + (size_t)o * d;
      double acc = m->cls_b[o];
      for (j = 0; j < d; j++) acc += (double)w[j] * x[j];
      f->token_logits[(size_t)i * L + o] = (float)acc;
    }
  }
}

/* The attention of sequence s in the current layer. */
static relattn_attn layer_attn(const fwd_ctx *c, int s) {
  const relattn_config *cfg = &c->m->cfg;
  size_t r0 = (size_t)c->start[s];
  relattn_attn a;
  memset(&a, 0, sizeof a);
  a.n = c->f[s].n;
  a.heads = cfg->n_heads;
  a.d_head = relattn_config_d_head(cfg);
  a.clip = cfg->clip;
  a.causal = cfg->arch == RELATTN_DECODER;
  a.per_head = cfg->per_head;
  a.q = c->qkv + r0 * 3 * c->in;
  a.k = a.q + c->in;
  a.v = a.q + 2 * c->in;
  a.ldq = a.ldk = a.ldv = 3 * c->in;
  if (c->schemes || c->m->terms) {
    a.clip = 0;
    a.per_head = 0;
    a.rel = c->schemes ? &c->schemes[s].rel
                       : &c->m->terms[c->layer - c->m->layers].rel;
  } else {
    a.rel_k = c->layer->rel_k;
    a.rel_v = cfg->rel_values ? c->layer->rel_v : NULL;
  }
  a.out = c->h + r0 * c->hw;
  a.ldo = c->hw;
  return a;
}

/* The last layer for row 0 of each sequence that reads it (cls, pooled,
** logits), after that layer's qkv_task: the attention of query 0 alone
** into h1, then ffn_task and the final norm on one-row blocks of x1, which
** starts as a copy of the layer's input row 0 (the full path overwrites x
** later). These outputs are made this way only, whether or not the
** sequence's other rows run too, so they are the same bits in any request
** (DETERMINISM): a one-row product has one shape. */
static int row0_layer(fwd_ctx *c, char *err, size_t errlen) {
  fwd_ctx one = *c;
  int s, k = 0, rc;
  for (s = 0; s < c->count; s++) {
    relattn_attn a;
    if (!wants_row0(&c->f[s])) continue;
    memcpy(c->x1 + (size_t)s * c->d, c->x + (size_t)c->start[s] * c->d,
           sizeof(float) * c->d);
    a = layer_attn(c, s);
    a.n_q = 1;
    a.out = c->h1 + (size_t)s * c->hw;
    rc = relattn_attention(&a, c->pool, err, errlen);
    if (rc != RELATTN_OK) return rc;
    c->row0[3 * k] = s;
    c->row0[3 * k + 1] = s; /* x1's row */
    c->row0[3 * k + 2] = 1;
    k++;
  }
  one.x = c->x1;
  one.h = c->h1;
  one.blocks = one.tiles = c->row0;
  one.n_blocks = one.n_tiles = k;
  if (rows_apart(c->m)) {
    one.tiles = c->tiles1;
    one.n_tiles = cut_tiles(&one, one.tiles, wants_row0, 1);
  }
  relattn_pool_run(c->pool, one.n_tiles, ffn_task, &one);
  if (!one.failed && c->m->cfg.norm == RELATTN_NORM_PRE)
    relattn_pool_run(c->pool, one.n_tiles, final_norm_task, &one);
  if (one.failed) c->failed = 1;
  return RELATTN_OK;
}

/* Keeps the blocks of the sequences that read final rows besides row 0;
** after the last layer's qkv_task, the one step every row takes. */
static void keep_all_rows(fwd_ctx *c) {
  int b, k = 0;
  for (b = 0; b < c->n_blocks; b++)
    if (wants_all_rows(&c->f[c->blocks[3 * b]])) {
      memmove(c->blocks + 3 * k, c->blocks + 3 * b, 3 * sizeof(int32_t));
      k++;
    }
  c->n_blocks = k;
  if (c->tiles == c->blocks)
    c->n_tiles = k;
  else
    c->n_tiles = cut_tiles(c, c->tiles, wants_all_rows, 0);
}

/* The relative terms of every sequence for a model whose scheme is not
** shaw (shaw's tables are each layer's own: the kernel's shorthand): from
** src/schemes.c, shared by all layers; t5's bias is the model's rel_bias.
** DeBERTa's are the layers' tables (the model's terms, layer_tables picks
** them) with the sequence's own bucket map, as long as its distances reach:
** one map for any length runs out to max_relative_positions (up to 2^24
** entries, each layer's, and a pass over them in every call). */
static int build_schemes(fwd_ctx *c, char *err, size_t errlen) {
  const relattn_config *cfg = &c->m->cfg;
  relattn_pos_tables tb;
  int s, rc;
  relattn_position pos = cfg->pos;
  const int deb = pos.type == RELATTN_POS_DEBERTA;
  if (pos.type == RELATTN_POS_SHAW || (c->m->terms && !deb)) return RELATTN_OK;
  if (pos.type == RELATTN_POS_ABSOLUTE) pos.type = RELATTN_POS_NONE;
  c->schemes = relattn_alloc(sizeof(relattn_scheme) * (size_t)c->count);
  if (!c->schemes)
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "relattn_forward: out of memory");
  memset(c->schemes, 0, sizeof(relattn_scheme) * (size_t)c->count);
  memset(&tb, 0, sizeof tb);
  if (cfg->pos.type == RELATTN_POS_T5) {
    tb.t[2] = c->m->rel_bias;
    tb.count[2] = (int64_t)cfg->n_heads * cfg->pos.num_buckets;
  }
  if (deb) { /* layer 0's tables (H, 2S, d_head): the checks and the scale
             ** (an int8 table stands in for its floats: only its presence
             ** and size are read) */
    const relattn_rel *t = &c->m->terms[0].rel;
    const int64_t per = (int64_t)t->rows * c->in;
    tb.t[0] = t->rk    ? t->rk
              : t->qrk ? (const float *)(const void *)t->qrk
                       : (const float *)(const void *)t->brk;
    tb.t[2] = t->rq    ? t->rq
              : t->qrq ? (const float *)(const void *)t->qrq
                       : (const float *)(const void *)t->brq;
    tb.count[0] = tb.t[0] ? per : 0;
    tb.count[2] = tb.t[2] ? per : 0;
  }
  for (s = 0; s < c->count; s++) {
    rc = relattn_scheme_build(&c->schemes[s], &pos, &tb, c->f[s].n,
                              cfg->n_heads, relattn_config_d_head(cfg),
                              cfg->arch == RELATTN_DECODER, deb, err, errlen);
    if (rc != RELATTN_OK) return rc;
  }
  return RELATTN_OK;
}

/* DeBERTa: every sequence's terms take layer l's tables. */
static void layer_tables(fwd_ctx *c, int l) {
  int s;
  if (c->m->cfg.pos.type != RELATTN_POS_DEBERTA || !c->schemes) return;
  for (s = 0; s < c->count; s++) {
    c->schemes[s].rel.rk = c->m->terms[l].rel.rk;
    c->schemes[s].rel.rq = c->m->terms[l].rel.rq;
    c->schemes[s].rel.qrk = c->m->terms[l].rel.qrk;
    c->schemes[s].rel.qrq = c->m->terms[l].rel.qrq;
    c->schemes[s].rel.brk = c->m->terms[l].rel.brk;
    c->schemes[s].rel.brq = c->m->terms[l].rel.brq;
  }
}

static void free_schemes(fwd_ctx *c) {
  int s;
  if (!c->schemes) return;
  for (s = 0; s < c->count; s++) relattn_scheme_free(&c->schemes[s]);
  relattn_free(c->schemes);
  c->schemes = NULL;
}

static int check_request(const relattn_model *m, const relattn_fwd *f, int s,
                         char *err, size_t errlen) {
  const relattn_config *cfg = &m->cfg;
  int i;
  if (f->n < 1 || !f->tokens)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: sequence %d is empty", s);
  for (i = 0; i < f->n; i++)
    if (f->tokens[i] < 0 || f->tokens[i] >= cfg->vocab_size)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "relattn_forward: token %d at position %d is not "
                            "below vocab_size %d",
                            (int)f->tokens[i], i, cfg->vocab_size);
  if ((cfg->pos.type == RELATTN_POS_ABSOLUTE ||
       cfg->pos.type == RELATTN_POS_REL_KEY ||
       cfg->pos.type == RELATTN_POS_REL_KEY_QUERY) && f->n > cfg->max_len)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: sequence %d has %d tokens, over "
                          "the model's %d positions",
                          s, f->n, cfg->max_len);
  if ((cfg->pos.type == RELATTN_POS_REL_KEY ||
       cfg->pos.type == RELATTN_POS_REL_KEY_QUERY ||
       cfg->pos.type == RELATTN_POS_XL ||
       cfg->pos.type == RELATTN_POS_DEBERTA) && !m->terms)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: the model's terms are not built "
                          "(relattn_model_prepare)");
  if (wants_head(f) && cfg->arch != RELATTN_DECODER)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: an encoder model has no next-token "
                          "probabilities");
  if (wants_head(f) && cfg->head != RELATTN_HEAD_LM)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: the model's head is '%s': no "
                          "next-token probabilities",
                          relattn_head_name(cfg->head));
  if (f->pooled && !cfg->pooler)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: the model has no pooler");
  if (f->logits && cfg->head != RELATTN_HEAD_CLASSIFIER)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: the model's head is '%s', not "
                          "'classifier'",
                          relattn_head_name(cfg->head));
  if (f->token_logits && cfg->head != RELATTN_HEAD_TOKEN)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: the model's head is '%s', not "
                          "'token_classifier'",
                          relattn_head_name(cfg->head));
  if (f->fill) {
    if (cfg->head != RELATTN_HEAD_MLM)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "relattn_forward: the model's head is '%s', not "
                            "'mlm'",
                            relattn_head_name(cfg->head));
    if (f->n_fill < 1 || f->fill_k < 1 || f->fill_k > cfg->vocab_size ||
        !f->fill_token || !f->fill_logprob)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "relattn_forward: a fill request needs rows, k "
                            "in [1, vocab_size] and its outputs");
    for (i = 0; i < f->n_fill; i++)
      if (f->fill[i] < 0 || f->fill[i] >= f->n)
        return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                              "relattn_forward: fill row %d is outside the "
                              "sequence of %d",
                              (int)f->fill[i], f->n);
  }
  if (f->embedding && (f->mean_from < 0 || f->mean_from >= f->n))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: mean_from %d leaves no row of %d",
                          f->mean_from, f->n);
  if (f->map && (f->map_layer < 0 || f->map_layer >= cfg->n_layers ||
                 f->map_head < 0 || f->map_head >= cfg->n_heads))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: no attention map for layer %d "
                          "head %d (the model has %d layers of %d heads)",
                          f->map_layer, f->map_head, cfg->n_layers,
                          cfg->n_heads);
  return RELATTN_OK;
}

int relattn_forward_batch(const relattn_model *m, relattn_fwd *f, int count,
                          relattn_pool *pool, char *err, size_t errlen) {
  const relattn_config *cfg;
  fwd_ctx c;
  int want_head = 0, want_final = 0, want_fill = 0, n_layers = 0, n_blocks;
  int i, s, l, rc, b, rows, type;
  float *acts;
  size_t nd, total = 0, fill_total = 0;

  if (!m || !f || count < 1 || !pool)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "relattn_forward: model, requests and pool required");
  cfg = &m->cfg;
  for (s = 0; s < count; s++) {
    rc = check_request(m, &f[s], s, err, errlen);
    if (rc != RELATTN_OK) return rc;
    total += (size_t)f[s].n;
    if (total > INT32_MAX)
      return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                            "relattn_forward: over 2^31 rows in one batch");
    if (wants_head(&f[s])) want_head = 1;
    if (wants_head(&f[s]) || wants_rows(&f[s])) want_final = 1;
    if (f[s].fill) {
      want_fill = 1;
      fill_total += (size_t)f[s].n_fill / ROWS_MIN + 1;
    }
    if (f[s].map && f[s].map_layer + 1 > n_layers)
      n_layers = f[s].map_layer + 1;
  }
  if (want_final) n_layers = cfg->n_layers;
  if (n_layers == 0) return RELATTN_OK; /* nothing asked for */

  if (!relattn_forward_memory(m, (int)total, count, relattn_pool_size(pool)))
    return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                          "relattn_forward: %zu tokens overflow the scratch "
                          "size", total);
  acts = relattn_pool_scratch_slot(
      pool, 0, SLOT_ACTS, acts_floats(cfg, (int)total, count) * sizeof(float));
  if (!acts)
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "relattn_forward: out of memory for %zu tokens",
                          total);
  memset(&c, 0, sizeof c);
  c.m = m;
  c.f = f;
  c.count = count;
  c.pool = pool;
  c.n = (int)total;
  c.d = cfg->d_model;
  c.in = relattn_config_inner(cfg);
  c.hw = h_width(cfg);
  nd = total * (size_t)c.d;
  c.x = acts;
  c.h = acts + round16(nd);
  c.qkv = c.h + round16(total * (size_t)c.hw);
  c.start = (int *)(c.qkv + 3 * round16(total * (size_t)c.in));
  c.blocks = (int32_t *)(c.start + round16((size_t)count));
  c.x1 = (float *)(c.blocks + round16(3 * max_blocks((int)total, count)));
  c.h1 = c.x1 + round16((size_t)count * c.d);
  c.row0 = (int32_t *)(c.h1 + round16((size_t)count * c.hw));
  c.tiles = c.row0 + round16(3 * (size_t)count);
  c.tiles1 = c.tiles + 3 * max_blocks((int)c.n, count);

  /* Blocks aligned to each sequence's start, sized by its length alone. */
  for (s = 0, total = 0, n_blocks = 0; s < count; s++) {
    c.start[s] = (int)total;
    rows = row_block(f[s].n);
    for (b = 0; b < f[s].n; b += rows, n_blocks++) {
      c.blocks[3 * n_blocks] = s;
      c.blocks[3 * n_blocks + 1] = (int)total + b;
      c.blocks[3 * n_blocks + 2] = f[s].n - b < rows ? f[s].n - b : rows;
      if (c.blocks[3 * n_blocks + 2] > c.block_max)
        c.block_max = c.blocks[3 * n_blocks + 2];
    }
    for (i = 0, type = 0; i < f[s].n; i++, total++) {
      float *x = c.x + total * c.d;
      int j;
      relattn_model_embed(m, x, f[s].tokens[i]);
      if (m->pos_emb) { /* absolute: learned positions added to the input */
        const float *pe = m->pos_emb + (size_t)i * c.d;
        for (j = 0; j < c.d; j++) x[j] += pe[j];
      }
      if (m->type_emb) {
        /* HF's pair encoding [CLS] A [SEP] B [SEP]: type 0 up to and
        ** including the first sep, 1 after it */
        const float *te = m->type_emb + (size_t)type * c.d;
        for (j = 0; j < c.d; j++) x[j] += te[j];
        if (f[s].tokens[i] == cfg->sep && cfg->token_types >= 2) type = 1;
      }
      if (m->emb_ln_w) model_norm(m, x, x, 1, m->emb_ln_w, m->emb_ln_b);
    }
  }
  c.n_blocks = n_blocks;
  if (rows_apart(m)) {
    c.n_tiles = cut_tiles(&c, c.tiles, NULL, 0);
  } else {
    c.tiles = c.blocks;
    c.n_tiles = n_blocks;
  }
  rc = build_schemes(&c, err, errlen);
  if (rc != RELATTN_OK) goto done;

  for (l = 0; l < n_layers && !c.failed && !relattn_pool_cancelled(pool); l++) {
    /* with maps alone, the last layer run only needs its q and k */
    int whole = want_final || l < n_layers - 1;
    /* the last layer before the heads: row 0 on its own path, the other
    ** rows only where something reads them (a classifier reads row 0) */
    int last = want_final && l == n_layers - 1;
    c.layer = &m->layers[l];
    layer_tables(&c, l);
    relattn_pool_run(pool, c.n_tiles, qkv_task, &c);
    if (last) {
      rc = row0_layer(&c, err, errlen);
      if (rc != RELATTN_OK) goto done;
      keep_all_rows(&c);
    }
    for (s = 0; s < count; s++) {
      relattn_attn a = layer_attn(&c, s);
      if (f[s].map && f[s].map_layer == l) {
        rc = relattn_attention_map(&a, f[s].map_head, f[s].map, pool, err,
                                  errlen);
        if (rc != RELATTN_OK) goto done;
      }
      if (!whole || (last && !wants_all_rows(&f[s]))) continue;
      rc = relattn_attention(&a, pool, err, errlen);
      if (rc != RELATTN_OK) goto done;
    }
    if (whole) relattn_pool_run(pool, c.n_tiles, ffn_task, &c);
    for (s = 0; s < count; s++)
      if (f[s].layer_rows) atomic_fetch_add(f[s].layer_rows, f[s].n);
  }
  if (want_final && !c.failed && cfg->norm == RELATTN_NORM_PRE)
    relattn_pool_run(pool, c.n_tiles, final_norm_task, &c);
  if (want_head && !c.failed)
    relattn_pool_run(pool, c.n_blocks, head_task, &c);
  if (want_fill && !c.failed && !relattn_pool_cancelled(pool)) {
    /* the masked-LM rows of each sequence in blocks sized by its request
    ** alone (DETERMINISM) */
    c.fills = relattn_alloc(sizeof(int32_t) * 3 * fill_total);
    if (!c.fills) {
      rc = relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "relattn_forward: out of memory");
      goto done;
    }
    for (s = 0; s < count; s++) {
      if (!f[s].fill) continue;
      rows = row_block(f[s].n_fill);
      for (b = 0; b < f[s].n_fill; b += rows, c.n_fills++) {
        c.fills[3 * c.n_fills] = s;
        c.fills[3 * c.n_fills + 1] = b;
        c.fills[3 * c.n_fills + 2] =
            f[s].n_fill - b < rows ? f[s].n_fill - b : rows;
        if (c.fills[3 * c.n_fills + 2] > c.fill_max)
          c.fill_max = c.fills[3 * c.n_fills + 2];
      }
    }
    relattn_pool_run(pool, c.n_fills, fill_task, &c);
  }
  relattn_free(c.fills);
  c.fills = NULL;
  free_schemes(&c);
  /* the host asked to stop (relattn_pool_set_cancel): tasks were skipped */
  if (relattn_pool_cancelled(pool))
    return relattn_errorf(err, errlen, RELATTN_ERR_INTERRUPT, "interrupted");
  if (c.failed)
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "relattn_forward: out of memory for worker scratch");

  for (s = 0; s < count; s++) {
    double sum;
    int j, rows;
    if (f[s].cls || f[s].pooled || f[s].logits) pool_rows(&c, &f[s], s);
    if (f[s].hidden)
      memcpy(f[s].hidden, c.x + (size_t)c.start[s] * c.d,
             sizeof(float) * (size_t)f[s].n * c.d);
    if (f[s].sentence &&
        (rc = relattn_sentence_embed(m, c.x + (size_t)c.start[s] * c.d,
                                     f[s].n, f[s].sentence, err, errlen)) !=
            RELATTN_OK)
      return rc;
    if (f[s].token_logits) token_rows(&c, &f[s], s);
    if (!f[s].embedding) continue;
    rows = f[s].n - f[s].mean_from;
    for (j = 0; j < c.d; j++) {
      const float *col = c.x + (size_t)(c.start[s] + f[s].mean_from) * c.d + j;
      sum = 0;
      for (i = 0; i < rows; i++) sum += col[(size_t)i * c.d];
      f[s].embedding[j] = (float)(sum / rows);
    }
  }
  return RELATTN_OK;
done:
  free_schemes(&c);
  return rc;
}

int relattn_forward(const relattn_model *m, relattn_fwd *f, relattn_pool *pool,
                    char *err, size_t errlen) {
  return relattn_forward_batch(m, f, 1, pool, err, errlen);
}

int relattn_forward_check_finite(const relattn_fwd *f, const relattn_config *c,
                                 char *err,
                                 size_t errlen) {
  static const char why[] = "is not finite (NaN or Inf): the weights are too "
                            "large for float32";
  const size_t rows = f->n > 1 ? (size_t)f->n - 1 : 0;
  const int d_model = c->d_model;
  size_t bad;
  if (f->logprob &&
      (bad = relattn_find_nonfinite(f->logprob, RELATTN_F32, rows)) < rows)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "the model's log-probability at position %zu %s",
                          bad + 1, why);
  if (f->top_logprob &&
      (bad = relattn_find_nonfinite(f->top_logprob, RELATTN_F32, rows)) < rows)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "the model's top log-probability at position %zu %s",
                          bad + 1, why);
  if (f->embedding && (bad = relattn_find_nonfinite(
                           f->embedding, RELATTN_F32, (size_t)d_model)) <
                          (size_t)d_model)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "the model's embedding (element %zu) %s", bad, why);
  if (f->sentence) {
    const size_t w = (size_t)relattn_sentence_dim(c);
    if ((bad = relattn_find_nonfinite(f->sentence, RELATTN_F32, w)) < w)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "the model's sentence vector (element %zu) %s",
                            bad, why);
  }
  if (f->cls && (bad = relattn_find_nonfinite(f->cls, RELATTN_F32,
                                               (size_t)d_model)) <
                    (size_t)d_model)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "the model's final row 0 (element %zu) %s", bad,
                          why);
  if (f->pooled && (bad = relattn_find_nonfinite(f->pooled, RELATTN_F32,
                                                  (size_t)d_model)) <
                       (size_t)d_model)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "the model's pooled vector (element %zu) %s", bad,
                          why);
  if (f->logits && (bad = relattn_find_nonfinite(f->logits, RELATTN_F32,
                                                  (size_t)c->n_labels)) <
                       (size_t)c->n_labels)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "the model's logit of label %zu %s", bad, why);
  if (f->token_logits) {
    size_t cells = (size_t)f->n * (size_t)c->n_labels;
    if ((bad = relattn_find_nonfinite(f->token_logits, RELATTN_F32, cells)) <
        cells)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "the model's logit of label %zu at input row %zu "
                            "%s",
                            bad % (size_t)c->n_labels,
                            bad / (size_t)c->n_labels, why);
  }
  if (f->fill && f->fill_logprob) {
    size_t cells = (size_t)f->n_fill * (size_t)f->fill_k;
    if ((bad = relattn_find_nonfinite(f->fill_logprob, RELATTN_F32, cells)) <
        cells)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "the model's log-probability at position %d %s",
                            (int)f->fill[bad / (size_t)f->fill_k], why);
  }
  if (f->map) {
    size_t cells = (size_t)f->n * (size_t)f->n;
    if ((bad = relattn_find_nonfinite(f->map, RELATTN_F32, cells)) < cells)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "the attention weight of query %zu, key %zu %s",
                            bad / (size_t)f->n, bad % (size_t)f->n, why);
  }
  return RELATTN_OK;
}

int relattn_label_probs(double *out, const float *logits, int n,
                        int problem_type) {
  double mx, sum = 0;
  int i;
  if (problem_type == RELATTN_PROBLEM_REGRESSION || n < 1) return 0;
  if (problem_type == RELATTN_PROBLEM_MULTI) {
    for (i = 0; i < n; i++) out[i] = 1.0 / (1.0 + exp(-(double)logits[i]));
    return 1;
  }
  mx = logits[relattn_label_best(logits, n)];
  for (i = 0; i < n; i++) sum += out[i] = exp((double)logits[i] - mx);
  for (i = 0; i < n; i++) out[i] /= sum;
  return 1;
}

int relattn_label_best(const float *logits, int n) {
  int i, best = 0;
  for (i = 1; i < n; i++)
    if (logits[i] > logits[best]) best = i;
  return best;
}

void relattn_zero_shot_scores(double *out, int *order, const float *logits,
                              int n, int n_classes, int entail, int multi) {
  int i, j;
  if (multi || n == 1) {
    int contra = entail == 0 ? n_classes - 1 : 0;
    for (i = 0; i < n; i++) {
      const float *z = logits + (size_t)i * n_classes;
      /* exp(e) / (exp(c) + exp(e)), without overflow */
      out[i] = 1.0 / (1.0 + exp((double)z[contra] - (double)z[entail]));
    }
  } else {
    double mx = logits[entail], sum = 0;
    for (i = 1; i < n; i++)
      if (logits[(size_t)i * n_classes + entail] > mx)
        mx = logits[(size_t)i * n_classes + entail];
    for (i = 0; i < n; i++)
      sum += out[i] = exp((double)logits[(size_t)i * n_classes + entail] - mx);
    for (i = 0; i < n; i++) out[i] /= sum;
  }
  /* a stable ascending sort, read backwards: ties come later index first */
  for (i = 0; i < n; i++) {
    for (j = i; j > 0 && out[order[j - 1]] > out[i]; j--)
      order[j] = order[j - 1];
    order[j] = i;
  }
  for (i = 0, j = n - 1; i < j; i++, j--) {
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}
