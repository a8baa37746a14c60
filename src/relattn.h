/*
** relattn.h: the plain C library under the SQLite extension.
**
** Nothing here knows about SQLite. Functions return a relattn_status and,
** where an error message is useful, write it into a caller's buffer
** (err, errlen); ext/ turns both into SQL errors.
*/
#ifndef RELATTN_H
#define RELATTN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define RELATTN_VERSION "0.1.0"

typedef enum relattn_status {
  RELATTN_OK = 0,
  RELATTN_ERR_ARG,       /* bad input: the message says which */
  RELATTN_ERR_NOMEM,     /* an allocation failed */
  RELATTN_ERR_TOOBIG,    /* a size over a limit, or an overflow */
  RELATTN_ERR_FORMAT,    /* malformed file or data */
  RELATTN_ERR_INTERRUPT  /* stopped on request */
} relattn_status;

/* Writes a printf-style message into err (when err != NULL), returns code. */
int relattn_errorf(char *err, size_t errlen, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* ---- memory (src/mem.c) ------------------------------------------------ */

/* 64-byte aligned allocation; size 0 gives a valid pointer. */
void *relattn_alloc(size_t size);
void relattn_free(void *p);
/* *out = a * b, returning 0 on overflow. */
int relattn_mul_ok(size_t a, size_t b, size_t *out);
int relattn_add_ok(size_t a, size_t b, size_t *out);

/* The vector path chosen at run time for our own loops: "avx512", "avx2"
** or "scalar" (src/cpu.c). Anything but "scalar" implies AVX2 and FMA. */
const char *relattn_simd_path(void);
/* Whether that path is not "scalar" (AVX2 and FMA at least); cached. */
int relattn_simd_fma(void);

/* ---- BLAS (src/blas.c: the one file that includes cblas.h) -------------- */

/* C = alpha * op(A) op(B) + beta * C, row-major; op is transpose when ta/tb. */
void relattn_sgemm(int ta, int tb, int m, int n, int k, float alpha,
                   const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc);
/* OpenBLAS's thread count is process-wide: set it to 1 for the duration of
** a call and put the old value back (relattn_blas_restore). */
int relattn_blas_single(void);          /* returns the previous count */
void relattn_blas_restore(int previous);
const char *relattn_blas_config(void);  /* OpenBLAS's own description */
const char *relattn_blas_corename(void); /* the kernel set it chose: "Haswell", ... */

/* ---- the linear layers' product (src/gemm.c) --------------------------- */

/* Output rows per panel of a weight in panel order (src/gemm.c). */
#define RELATTN_PANEL 32
/* W (out, in) into panel order: in place (0, or RELATTN_ERR_NOMEM for its
** temporary copy), or from w into dst; relattn_unpack gives W back. */
int relattn_pack(float *w, int out, int in);
void relattn_pack_into(float *dst, const float *w, int out, int in);
void relattn_unpack(float *dst, const float *packed, int out, int in);
/* y (rows, ldy) = (accumulate ? y : 0) + b + x W^T, W in panel order, b
** (out) or NULL; each element a chain of fmaf over k in order. */
void relattn_gemm(float *y, int ldy, const float *x, int ldx, int rows, int in,
                  int out, const float *wp, const float *b, int accumulate);
/* The same on a named path ("avx512", "avx2", "scalar"), where
** relattn_gemm_path_ok says this CPU runs it. */
void relattn_gemm_on(const char *path, float *y, int ldy, const float *x,
                     int ldx, int rows, int in, int out, const float *wp,
                     const float *b, int accumulate);
int relattn_gemm_path_ok(const char *path);
/* The attention's products on the same kernel and path: y += x B, B (in,
** out) row-major with rows ldb apart, read in place. */
void relattn_gemm_nn(float *y, int ldy, const float *x, int ldx, int rows,
                     int in, int out, const float *b, int ldb);
/* y = alpha (x B^T) for B's first out rows, B (packed, in) with rows ldb
** apart: B goes into panel order in pack (packed rounded up to
** RELATTN_PANEL, times in floats) first; with b NULL pack holds it already
** (an earlier call's, with the same packed). */
void relattn_gemm_nt(float *y, int ldy, const float *x, int ldx, int rows,
                     int in, int out, float alpha, const float *b, int ldb,
                     float *pack, int packed);

/* ---- thread pool (src/pool.c) ------------------------------------------ */

typedef struct relattn_pool relattn_pool;
/* fn(ctx, task, worker) runs every task in [0, n_tasks) once; worker is in
** [0, relattn_pool_size(pool)) and identifies per-worker scratch. */
typedef void (*relattn_task_fn)(void *ctx, int task, int worker);

relattn_pool *relattn_pool_new(int n_threads); /* NULL on failure */
void relattn_pool_free(relattn_pool *pool);    /* joins the workers */
int relattn_pool_size(const relattn_pool *pool);
/* Runs the tasks on the pool's threads (the caller takes part) and returns
** when all are done. relattn_pool_new(1) starts no thread: it is a cheap
** serial pool that only holds scratch (what a worker of an outer pool uses).
** A run started from inside a task of another run goes serially. */
void relattn_pool_run(relattn_pool *pool, int n_tasks, relattn_task_fn fn,
                      void *ctx);
/* Per-worker scratch kept alive across calls (pages are costly to fault in
** here): returns at least size bytes, 64-byte aligned, or NULL. Contents
** are not kept when the buffer grows. */
void *relattn_pool_scratch(relattn_pool *pool, int worker, size_t size);
/* The same with a slot: each (worker, slot) has its own buffer, so code that
** holds scratch across a nested call (the forward pass around the attention
** kernel) does not share it. relattn_pool_scratch is slot 0 (the kernels');
** the forward pass uses slots 1, 2 and 4 (attention.c 3). */
#define RELATTN_POOL_SLOTS 5
void *relattn_pool_scratch_slot(relattn_pool *pool, int worker, int slot,
                                size_t size);
/* Cancellation. check(ctx), when set, is polled between tasks by the thread
** that set it (the call's own thread: it may call into the host, which the
** workers must not), so a run stops within about one task's work of the
** host's request. Once check answers nonzero, or relattn_pool_cancel was
** called (from any thread: what another thread uses to stop a worker's
** pool), the pool starts no more tasks until relattn_pool_set_cancel is
** called again, and relattn_pool_cancelled answers 1: relattn_attention and
** the forward pass then return RELATTN_ERR_INTERRUPT. Set it for a call and
** clear it after (check NULL), as the call's owner. */
typedef int (*relattn_cancel_fn)(void *ctx);
void relattn_pool_set_cancel(relattn_pool *pool, relattn_cancel_fn check,
                             void *ctx);
void relattn_pool_cancel(relattn_pool *pool);
int relattn_pool_cancelled(relattn_pool *pool);
/* For serial work outside the pool's tasks: polls the check as a run would
** between tasks (on its owner's thread), 1 once cancelled. */
int relattn_pool_poll(relattn_pool *pool);
/* Frees every scratch buffer larger than keep bytes (after a call with a
** rare huge sequence, so the connection does not hold its memory forever). */
void relattn_pool_trim(relattn_pool *pool, size_t keep);
/* The worker the calling thread is inside pool's run as, else 0: whose
** scratch a nested call may use for buffers shared by its own tasks. */
int relattn_pool_worker(const relattn_pool *pool);
int relattn_cpu_count(void);

/* ---- ordered batch runner (src/batch.c) ---------------------------------- */

/* Items are numbered 0, 1, ... in the order they are added; the caller keeps
** item s's data in its own ring slot s % capacity. Consecutive items form
** batches by a rule on their costs alone (max_items items, cost up to
** max_cost; an item over max_cost alone is a batch of one; the input's end,
** relattn_batch_flush, closes the last). fn(ctx, first, count, worker) runs
** items [first, first + count) on a worker thread (worker in [0, threads)),
** touching only their slots. The caller (one thread) adds items while
** there is room and takes them in order: wait for the head item, read its
** slot, pop. */
typedef struct relattn_batch relattn_batch;
typedef void (*relattn_batch_fn)(void *ctx, int64_t first, int count,
                                 int worker);
/* n_threads 0: no threads; batches run inside relattn_batch_wait as worker
** 0. Fewer threads than asked may start (relattn_batch_threads); none of
** n_threads > 0 is an error. max_items is cut to capacity. */
relattn_batch *relattn_batch_new(int n_threads, int capacity, int max_items,
                                 int64_t max_cost, relattn_batch_fn fn,
                                 void *ctx, char *err, size_t errlen);
/* Stops the workers and joins them (each finishes the batch it holds). */
void relattn_batch_free(relattn_batch *b);
int relattn_batch_threads(const relattn_batch *b);
int relattn_batch_room(relattn_batch *b);    /* items that can be added now */
int64_t relattn_batch_next(relattn_batch *b); /* the number the next add gets */
int64_t relattn_batch_head(relattn_batch *b); /* the oldest item not popped */
/* Adds the next item (its slot already filled); returns its number, or -1
** when there is no room. */
int64_t relattn_batch_add(relattn_batch *b, int64_t cost);
void relattn_batch_flush(relattn_batch *b);  /* the input ended (for now) */
/* Waits until the head item is done: 1, 0 after timeout_ms (call again), -1
** when no item is in flight. */
int relattn_batch_wait(relattn_batch *b, int timeout_ms);
void relattn_batch_pop(relattn_batch *b);    /* the head item is done with */

/* ---- relative self-attention (src/attention.c) ------------------------- */

/* The relative terms of any position scheme, as data: src/schemes.c
** builds them from a scheme's name and tables. For head h, query i, key j,
** d = d_head, delta = j - i and table row b = b(delta):
**   e_ij = s ((q^_i + u_h) . k^_j + (q_i + w_h) . rk[b] + k_j . rq[b])
**          + beta_h[b] - slope_h |delta|          (-inf where causal, j > i)
**   z_i  = sum_j softmax_j(e_ij) (v_j + rv[b])
** q^, k^ are q, k rotated by position (RoPE) when rot_dim > 0, else q, k.
** b(delta) = bucket[clamp(delta, -band, band) + band], or
** clamp(delta, -band, band) + band when bucket is NULL: constant beyond the
** band, which is what lets far key blocks cost what plain attention costs. */
typedef struct relattn_rel {
  double scale;           /* s; 0 means 1/sqrt(d_head) */
  int band;               /* D >= 0 */
  const int *bucket;      /* (2D+1) rows in [0, rows), or NULL: identity */
  int rows;               /* B: rows of each table */
  int per_head;           /* tables (H, B, d), else (B, d) shared */
  const float *rk;        /* query side, or NULL */
  const float *rq;        /* key side, or NULL */
  /* rk, rq as int8 instead (per_head; rk, rq NULL): H weights of (rows, d)
  ** each, symmetric per row (src/qgemm.c); the products s q rk[b] and
  ** s k rq[b] are qgemm's, q and k rows quantized per row as a linear
  ** layer's input, then times s. NULL: the float tables. */
  const struct relattn_q8w *qrk, *qrq;
  /* rk, rq as bf16 instead (per_head; rk, rq NULL): H weights of (rows, d),
  ** the products relattn_bf16_gemm's (q and k rows rounded to bf16), then
  ** times s. NULL: as above. */
  const struct relattn_bf16w *brk, *brq;
  const float *rv;        /* value side, or NULL */
  const float *beta;      /* (H, B) scalars added unscaled, or NULL */
  const float *u, *w;     /* (H, d) query offsets, or NULL */
  const float *slope;     /* (H) linear bias -slope_h |delta|, or NULL */
  int rot_dim;            /* r: rotate dims [0, r) of q and k; 0 for none */
  int rot_half;           /* pairs (t, t + r/2), else (2t, 2t + 1) */
  const float *rot_cos;   /* (n, r/2): cos of pair t's angle at position p */
  const float *rot_sin;   /* (n, r/2) */
} relattn_rel;

/* Shaw, Uszkoreit & Vaswani 2018, eq. 3-4 (tensor2tensor's
** dot_product_attention_relative, value term included) is the shorthand:
** with rel NULL, for r = clip(j - i, -k, k) + k and s = 1/sqrt(d):
**   e_ij = s * q_i . (k_j + rel_k[r])      (-inf where causal and j > i)
**   z_i  = sum_j softmax_j(e_ij) * (v_j + rel_v[r])
** Any other scheme passes rel (and leaves clip, rel_k, rel_v zero).
** Head h of a row lives at columns h*d .. h*d + d - 1. */
typedef struct relattn_attn {
  int n;                  /* sequence length: queries = keys = values */
  int heads;              /* H */
  int d_head;             /* d */
  int clip;               /* k >= 0: tables have 2k+1 rows */
  int causal;             /* mask keys after the query */
  int per_head;           /* tables are (H, 2k+1, d), else (2k+1, d) */
  const float *q; int ldq; /* (n, ldq), ldq >= H*d */
  const float *k; int ldk; /* (n, ldk) */
  const float *v; int ldv; /* (n, ldv) */
  const float *rel_k;     /* (2k+1, d) or (H, 2k+1, d); NULL: no key term */
  const float *rel_v;     /* same shape; NULL: no value term */
  float *out; int ldo;    /* (n, ldo) */
  const relattn_rel *rel; /* the terms of any scheme, or NULL (Shaw above) */
  int n_q;                /* queries: only rows [0, n_q) of out (0: all n);
                          ** keys and values are still all n rows */
} relattn_attn;

/* Fused blocked kernel with online softmax; never builds an n x n matrix.
** Runs (head, query block) tasks on pool (NULL: serially on the caller's
** thread), with per-worker scratch slot 0 from it; called from inside a task
** of the same pool it runs serially on that task's worker. Sets OpenBLAS to
** one thread for the call and restores it. The result is bitwise the same
** for any thread count. out may be q itself (ldo = ldq: each task reads
** only its own rows of q), never k or v. With n_q set only the first n_q
** queries run (the blocks are a function of n and n_q alone) and only their
** rows of out are written. */
int relattn_attention(const relattn_attn *a, relattn_pool *pool, char *err,
                      size_t errlen);
/* The softmax weights of one head as an explicit matrix, for inspection:
** map (n, n), row i sums to 1 (zeros where masked). Runs on the caller's
** thread; pool (may be NULL) is only asked whether to stop
** (relattn_pool_poll, every few rows: RELATTN_ERR_INTERRUPT). */
int relattn_attention_map(const relattn_attn *a, int head,
                          float *map /* (n, n) */, relattn_pool *pool,
                          char *err, size_t errlen);
/* Bytes of per-worker scratch relattn_attention takes for a (0 for n = 0):
** O(block x (block + 2k+1 + d)), whatever n is; with a table of more rows
** than a block reaches (unclipped), O(block x n). Fewer queries (n_q) take
** no more than all n. */
size_t relattn_attention_scratch_bytes(const relattn_attn *a);
/* Bytes of scratch shared by a call's tasks (rotated keys, n x H x d floats,
** with a rotation; else 0), kept by the calling worker for the next call. */
size_t relattn_attention_shared_bytes(const relattn_attn *a);
/* Block sizes (queries per task, keys per step); <= 0 restores the default.
** Process-wide, for tests and the benchmark: not for use while a kernel runs. */
void relattn_attention_blocks(int block_q, int block_k);

/* ---- position schemes (src/schemes.c) ---------------------------------- */

/* The one place that knows position schemes by name: each becomes a
** relattn_rel (bucket map, tables, scale) for the kernel. */
enum {
  RELATTN_POS_NONE = 0, RELATTN_POS_SHAW, RELATTN_POS_REL_KEY,
  RELATTN_POS_REL_KEY_QUERY, RELATTN_POS_T5, RELATTN_POS_DEBERTA,
  RELATTN_POS_ALIBI, RELATTN_POS_ROPE, RELATTN_POS_XL, RELATTN_POS_COUNT
};
/* Models only (not an attention scheme, so relattn_position_parse does not
** know it): learned absolute positions added to the input (pos_emb); the
** attention is as none. */
enum { RELATTN_POS_ABSOLUTE = RELATTN_POS_COUNT };
int relattn_position_parse(const char *name);   /* RELATTN_POS_*, or -1 */
const char *relattn_position_name(int type);
/* "none, shaw, ..." for messages. */
const char *relattn_position_names(void);

/* A scheme and its parameters (relattn_position_defaults fills them). */
typedef struct relattn_position {
  int type;
  int num_buckets, max_distance;     /* t5: 32, 128 */
  int position_buckets;              /* deberta: 256 (<= 0: no log buckets) */
  int max_relative_positions;        /* deberta: 512 */
  int rotary_half;                   /* rope: 1 "half" (GPT-NeoX), 0 "interleaved" */
  int rotary_dim;                    /* rope: 0 means d_head */
  double base;                       /* rope: 10000 */
} relattn_position;
void relattn_position_defaults(relattn_position *p, int type);
/* Checks T5's and DeBERTa's bucket parameters (the rest: no-op) as HF's
** formulas take them (causal: T5's one-sided buckets); messages name a key
** as pre key post ("options.position.", ""). */
int relattn_position_check_buckets(const relattn_position *p, int causal,
                                   const char *pre, const char *post,
                                   char *err, size_t errlen);
/* The parameter names a scheme takes (besides "type"), NULL-terminated. */
const char *const *relattn_position_keys(int type);
/* The names of the tables a scheme takes after rel_k, rel_v (relattn_attention's
** arguments 7, 8, ...), NULL-terminated. */
const char *const *relattn_position_extra(int type);

/* The tables as given: rel_k, rel_v, then the extra ones; NULL when absent;
** counts in floats. */
#define RELATTN_POS_TABLES 4
typedef struct relattn_pos_tables {
  const float *t[RELATTN_POS_TABLES];  /* rel_k, rel_v, extra 0, extra 1 */
  int64_t count[RELATTN_POS_TABLES];
} relattn_pos_tables;

/* A built description and the memory it owns. */
typedef struct relattn_scheme {
  relattn_rel rel;
  void *mem;
} relattn_scheme;
/* Checks the parameters and tables against the scheme (rows for its bucket
** map, required tables present, others absent) and builds the terms for a
** sequence of n; messages name the table or option. relattn_scheme_free
** after use, also on failure. */
int relattn_scheme_build(relattn_scheme *out, const relattn_position *p,
                         const relattn_pos_tables *tables, int n, int heads,
                         int d_head, int causal, int per_head, char *err,
                         size_t errlen);
/* Bytes relattn_scheme_build allocates (an upper bound), for memory limits. */
size_t relattn_scheme_bytes(const relattn_position *p,
                            const relattn_pos_tables *tables, int n, int heads,
                            int d_head);
void relattn_scheme_free(relattn_scheme *s);

/* Bucket maps of the references, exposed for tests: T5's
** _relative_position_bucket of delta = j - i; DeBERTa-v2's
** make_log_bucket_position of i - j. */
int relattn_t5_bucket(int delta, int bidirectional, int num_buckets,
                      int max_distance);
int relattn_deberta_log_position(int rel, int bucket_size, int max_position);
/* BLOOM's build_alibi_tensor slopes: out (heads). */
void relattn_alibi_slopes(float *out, int heads);

/* Table builders for tables that depend only on a layer's weights (built
** once per model, not per call). Transformer-XL: row delta + c of head h is
** W_r's rows h*d .. h*d+d-1 times sinusoid(-delta) (PositionalEmbedding:
** sin then cos of p / 10000^(2i/d_model)). */
int relattn_xl_table(float *out /* (heads, 2c+1, d_head) */,
                     const float *w_r /* (heads*d_head, d_model) */,
                     int d_model, int heads, int d_head, int c, char *err,
                     size_t errlen);
/* DeBERTa-v2: a layer's projection of the shared relative embeddings,
** split by head (transpose_for_scores of key_proj(rel_embeddings) for c2p,
** query_proj for p2c): out[h][r] = rel[r] . w[h*d + i] + b[h*d + i]. */
void relattn_project_table(float *out /* (heads, rows, d_head) */,
                           const float *rel /* (rows, d_model) */,
                           const float *w /* (heads*d_head, d_model) */,
                           const float *b /* (heads*d_head) or NULL */,
                           int rows, int d_model, int heads, int d_head);

/* out = LayerNorm(x) * w + b over rows of d (src/norm.c); out may be x. */
void relattn_layer_norm(float *out, const float *x, int rows, int d,
                        const float *w, const float *b, float eps);
/* The norm of a config's norm_kind: LayerNorm as above, or RMSNorm (T5's
** T5LayerNorm) out = x / sqrt(mean(x^2) + eps) * w. b may be NULL (no
** bias; rmsnorm has none). out may be x. */
void relattn_norm(float *out, const float *x, int rows, int d, const float *w,
                  const float *b, float eps, int kind);

/* ---- models (src/model.c: config, tensor list, weights) ----------------- */

enum { RELATTN_DECODER = 0, RELATTN_ENCODER = 1 };
enum { RELATTN_NORM_PRE = 0, RELATTN_NORM_POST = 1 };
enum { RELATTN_GELU = 0, RELATTN_RELU = 1, RELATTN_GELU_TANH = 2 };
enum { RELATTN_LAYERNORM = 0, RELATTN_RMSNORM = 1 };
/* An activation only the heads take (head_activation, pooler.activation). */
enum { RELATTN_TANH = 3 };
/* What sits on top of the layers (config "head"). */
enum { RELATTN_HEAD_LM = 0, RELATTN_HEAD_MLM = 1, RELATTN_HEAD_CLASSIFIER = 2,
       RELATTN_HEAD_NONE = 3, RELATTN_HEAD_TOKEN = 4 };
/* Heads with labels and classifier.weight / .bias: the sequence classifier
** (row 0, through the pooler) and the token classifier (every row). */
#define RELATTN_HEAD_HAS_LABELS(h) \
  ((h) == RELATTN_HEAD_CLASSIFIER || (h) == RELATTN_HEAD_TOKEN)
/* sentence-transformers' pooling modes (config sentence.pooling): bits,
** concatenated in this order as its Pooling module concatenates them. */
enum { RELATTN_SP_CLS = 1, RELATTN_SP_MAX = 2, RELATTN_SP_MEAN = 4,
       RELATTN_SP_MEAN_SQRT = 8, RELATTN_SP_WEIGHTED = 16,
       RELATTN_SP_LAST = 32 };
#define RELATTN_SP_ALL 63
/* A Dense module's activation (config sentence.dense[k].activation). */
enum { RELATTN_DENSE_IDENTITY = 0, RELATTN_DENSE_TANH = 1,
       RELATTN_DENSE_RELU = 2, RELATTN_DENSE_GELU = 3,
       RELATTN_DENSE_SIGMOID = 4 };
/* Dense modules a model may have after its pooling. */
#define RELATTN_ST_MAX_DENSE 4
/* A classifier's problem_type: softmax, sigmoid per label, or a value. */
enum { RELATTN_PROBLEM_SINGLE = 0, RELATTN_PROBLEM_MULTI = 1,
       RELATTN_PROBLEM_REGRESSION = 2 };

/* The model config (docs/reference.md), decoded from JSON by ext/ (JSON goes through SQLite). */
typedef struct relattn_config {
  int arch;               /* RELATTN_DECODER | RELATTN_ENCODER */
  int vocab_size, d_model, n_layers, n_heads, d_ff;
  int norm;               /* RELATTN_NORM_PRE | RELATTN_NORM_POST */
  float norm_eps;
  int activation;         /* RELATTN_GELU (erf form) | RELATTN_RELU |
                          ** RELATTN_GELU_TANH */
  int tie_embeddings;
  int clip;               /* position.clip (shaw) */
  int rel_values;         /* position.values (shaw) */
  int per_head;           /* position.per_head (shaw) */
  int bos, eos, pad;      /* tokenizer ids, -1 when absent */
  int tok_type;           /* tokenizer.type: RELATTN_TOK_* */
  int do_lower_case;      /* wordpiece: tokenizer.do_lower_case (default 1) */
  int strip_accents;      /* wordpiece: 1, 0, or -1 (null: as do_lower_case) */
  int chinese_chars;      /* wordpiece: tokenizer.tokenize_chinese_chars */
  relattn_position pos;   /* position.type and its parameters: set it
                          ** (relattn_position_defaults) in a config made by
                          ** hand; zeros are type none */
  int max_len;            /* absolute: position.max_len, rows of pos_emb;
                          ** rel_key*: position.max_position_embeddings M */
  int rel_norm;           /* deberta: position.norm_rel_ebd, 1 layer_norm */
  int append, sep, mask, unk; /* tokenizer ids, -1 when absent: append goes
                          ** after the sequence (ext/util.c), sep splits
                          ** token types, mask is [MASK], unk informational */
  int split_special;      /* tokenizer.split_special: the special ids' texts
                          ** are cut out of a text first (ext/tokens.c
                          ** gives them: relattn_tokenizer_set_special) */
  /* The forward pass's options; zeros are the defaults (a config made by
  ** hand with memset 0 is today's model). */
  int norm_kind;          /* RELATTN_LAYERNORM | RELATTN_RMSNORM (no biases) */
  int no_biases;          /* biases false: no attn.b*, ffn.b* */
  int ffn_gated;          /* ffn gated: act(x W1^T + b1) * (x W3^T + b3) */
  int emb_norm;           /* embedding.norm: emb_norm of the input rows */
  int token_types;        /* embedding.token_types: rows of type_emb, or 0 */
  /* heads (docs/reference.md, Heads) */
  int head;               /* RELATTN_HEAD_*: lm unless set */
  int head_activation;    /* mlm: of mlm.dense (RELATTN_GELU ... RELATTN_TANH) */
  int pooler;             /* 1: pooler.weight/.bias on final row 0 */
  int pooler_activation;  /* its activation (RELATTN_TANH, RELATTN_GELU, ...) */
  int n_labels;           /* classifier: rows of classifier.weight (labels) */
  int problem_type;       /* classifier: RELATTN_PROBLEM_* */
  /* the attention's width per head (config d_head), 0 when absent:
  ** d_model / n_heads (relattn_config_d_head); last, so configs written
  ** field by field stay as they were */
  int d_head;
  int tok_rules;          /* wordpiece: tokenizer.rules, RELATTN_RULES_*;
                          ** after d_head for the same reason */
  /* wordpiece: tokenizer.clean_up_tokenization_spaces (decode's " ," ->
  ** ","; default 1 from the config, 0 here when unset) */
  int clean_up_spaces;
  /* quantization.linear: RELATTN_QUANT_INT8 stores the layers' linear
  ** weights as int8 with per-row scales, RELATTN_QUANT_BF16 as bf16
  ** (docs/reference.md), both run by src/qgemm.c; RELATTN_QUANT_NONE (0)
  ** float */
  int quant;
  /* decoder (an encoder-decoder, T5ForConditionalGeneration): the layers
  ** above describe the encoder; the decoder has dec_layers layers of the
  ** same shapes, each with a cross-attention over the encoder's output,
  ** its own final norm and (t5) bias table, and starts from token
  ** dec_start. 0 layers: no decoder (every other model). */
  int decoder;            /* 1 when the config has "decoder" */
  int dec_layers;         /* decoder.n_layers */
  int dec_start;          /* decoder.start: the first decoder input id */
  /* sentence-transformers (config "sentence"): the vector relattn_embed
  ** gives by default, the final rows pooled (st_pooling's modes side by
  ** side), then each Dense module, then an L2 normalization; st 0: none */
  int st;
  int st_pooling;         /* RELATTN_SP_* bits, at least one */
  int st_n_dense;         /* 0 .. RELATTN_ST_MAX_DENSE */
  int st_in[RELATTN_ST_MAX_DENSE], st_out[RELATTN_ST_MAX_DENSE];
  int st_bias[RELATTN_ST_MAX_DENSE]; /* 1: sentence.dense.{k}.bias */
  int st_act[RELATTN_ST_MAX_DENSE];  /* RELATTN_DENSE_* */
  int st_normalize;       /* 1: a Normalize module last */
  int st_max_seq;         /* sentence.max_seq_length: the input is cut to
                          ** this many rows (ext/util.c), 0: not cut */
  /* quantization.embeddings (RELATTN_QUANT_*, 0 when absent: models
  ** quantized before it stored their embeddings float): with int8,
  ** tok_emb and an untied lm_head are I8 with per-row scales and stay int8
  ** in the cache (relattn_q8w), pos_emb is I8 with scales, read into floats
  ** (q s), rel_emb I8 with scales kept as stored (read into floats only
  ** while the DeBERTa tables are built); with bf16 all four are BF16, read
  ** into floats.
  ** Only the same mode as quantization.linear. */
  int quant_emb;
} relattn_config;

/* Whether c is an encoder-decoder (its decoder runs through src/seq2seq.c). */
int relattn_config_is_s2s(const relattn_config *c);

enum { RELATTN_QUANT_NONE = 0, RELATTN_QUANT_INT8 = 1, RELATTN_QUANT_BF16 = 2 };

typedef struct relattn_tokenizer relattn_tokenizer; /* src/tokenizer.c */

typedef struct relattn_layer {
  const float *ln1_w, *ln1_b;         /* (d_model) */
  const float *wq, *wk, *wv;          /* (n_heads*d_head, d_model), y = x W^T + b */
  const float *wo;                    /* (d_model, n_heads*d_head) */
  const float *bq, *bk, *bv, *bo;     /* (n_heads*d_head); bo (d_model) */
  const float *rel_k;                 /* (2*clip+1, d_head) or (n_heads, 2*clip+1, d_head);
                                      ** rel_key*: (2M-1, d_head) */
  const float *rel_v;                 /* same; NULL unless rel_values */
  const float *wr;                    /* xl: W_r (n_heads*d_head, d_model), or NULL */
  const float *u, *w;                 /* xl: (n_heads, d_head) offsets, or NULL */
  const float *ln2_w, *ln2_b;         /* (d_model) */
  const float *w1, *b1;               /* (d_ff, d_model), (d_ff) */
  const float *w3, *b3;               /* gated: (d_ff, d_model), (d_ff), else NULL */
  const float *w2, *b2;               /* (d_model, d_ff), (d_model) */
  /* quantization int8 (bf16): each of wq wk wv wo w1 w3 w2 points at a
  ** packed relattn_q8w (relattn_bf16w, src/qgemm.c) instead of floats;
  ** int8: these at its per-row scales: (out) of that weight; else NULL */
  const float *sq, *sk, *sv, *so, *s1, *s3, *s2;
  /* every bias above is NULL when the config has none (biases false;
  ** rmsnorm for ln1_b, ln2_b) */
  /* a decoder layer's cross-attention (T5LayerCrossAttention), between
  ** the self-attention and the FFN: its norm, queries from the decoder
  ** (n_heads*d_head, d_model), keys and values from the encoder's output,
  ** output (d_model, n_heads*d_head); NULL in an encoder's layers.
  ** Quantized as wq..wo, with scales sxq..sxo under int8. */
  const float *lnx_w, *lnx_b;         /* (d_model) */
  const float *xq, *xk, *xv;          /* (n_heads*d_head, d_model) */
  const float *xo;                    /* (d_model, n_heads*d_head) */
  const float *bxq, *bxk, *bxv, *bxo; /* (n_heads*d_head); bxo (d_model) */
  const float *sxq, *sxk, *sxv, *sxo;
} relattn_layer;

typedef struct relattn_model {
  relattn_config cfg;
  const float *tok_emb;               /* (vocab_size, d_model) */
  relattn_layer *layers;              /* (n_layers) */
  const float *lnf_w, *lnf_b;         /* (d_model); NULL for post-norm */
  const float *lm_head;               /* (vocab_size, d_model); = tok_emb when tied */
  const float *rel_bias;              /* t5: (n_heads, num_buckets), else NULL */
  const float *pos_emb;               /* absolute: (max_len, d_model), else NULL */
  const float *rel_emb;               /* deberta: (2 span, d_model), else NULL */
  const float *rel_ln_w, *rel_ln_b;   /* deberta with norm_rel_ebd: (d_model) */
  const float *type_emb;              /* (token_types, d_model), or NULL */
  const float *emb_ln_w, *emb_ln_b;   /* embedding.norm: (d_model), or NULL */
  const float *mlm_w, *mlm_b;         /* mlm: dense (d_model, d_model), (d_model) */
  const float *mlm_ln_w, *mlm_ln_b;   /* mlm: its norm (d_model) */
  const float *mlm_bias;              /* mlm: (vocab_size) added to the logits */
  const float *pool_w, *pool_b;       /* pooler: (d_model, d_model), (d_model) */
  const float *cls_w, *cls_b;         /* classifier: (n_labels, d_model), (n_labels) */
  const float *st_w[RELATTN_ST_MAX_DENSE]; /* sentence Dense k: (st_out, st_in) */
  const float *st_b[RELATTN_ST_MAX_DENSE]; /* (st_out), or NULL */
  float *rel_proj;                    /* deberta: each layer's c2p, p2c tables, owned */
  relattn_scheme *terms;              /* (n_layers) rel_key*, xl: each layer's terms,
                                      ** built from its weights once
                                      ** (relattn_model_prepare); deberta:
                                      ** its tables and scale, the bucket
                                      ** map being each sequence's
                                      ** (src/forward.c); else NULL */
  void *mem;                          /* owns every array above */
  int packed;                         /* the layers' wq wk wv wo w1 w3 w2 are in
                                      ** panel order (src/gemm.c): set by
                                      ** relattn_model_prepare where the CPU
                                      ** has FMA; else as stored */
  relattn_tokenizer *tok;             /* owned; freed by relattn_model_free */
  /* an encoder-decoder's decoder (config decoder), else NULL */
  relattn_layer *dec_layers;          /* (dec_layers) */
  const float *dec_lnf_w, *dec_lnf_b; /* (d_model) its final norm */
  const float *dec_rel_bias;          /* t5: (n_heads, num_buckets) causal */
  /* quantization.embeddings int8: the per-row scales of tok_emb, lm_head,
  ** pos_emb and rel_emb (in their blocks), else NULL. tok_emb and an
  ** untied lm_head then point at a relattn_q8w, not floats: read a row
  ** with relattn_model_embed, the head with relattn_fwd_head; rel_emb at
  ** its int8_t rows (RELATTN_SLOT_Q8R). */
  const float *tok_scale, *lm_scale, *pos_scale, *rel_scale;
} relattn_model;

/* ---- half precision (src/half.c) ---------------------------------------- */

enum { RELATTN_F32 = 0, RELATTN_F16 = 1, RELATTN_BF16 = 2,
       RELATTN_U8 = 3, /* a tokenizer file's bytes, never a weight */
       RELATTN_I8 = 4  /* an int8 linear weight (quantization int8) */ };

/* "F32", "F16", "BF16", "U8", "I8" -> RELATTN_*, or -1. */
int relattn_dtype_parse(const char *name);
const char *relattn_dtype_name(int dtype);
size_t relattn_dtype_size(int dtype);    /* bytes per element, 0 if unknown */
float relattn_f16_to_f32(uint16_t h);    /* exact, subnormals, inf, nan */
float relattn_bf16_to_f32(uint16_t h);   /* exact */
/* out = in (n elements of dtype, little-endian, any alignment) as float32. */
void relattn_to_f32(float *out /* (n) */, const void *in, int dtype, size_t n);
/* Index of the first NaN or Inf among n elements of dtype (I8: of the first
** -128, outside the range of int8 weights), or n if none. */
size_t relattn_find_nonfinite(const void *in, int dtype, size_t n);

/* ---- safetensors (src/safetensors.c) ------------------------------------ */

/* A safetensors file is an 8-byte little-endian header length, that many
** bytes of JSON, then the data. The JSON is decoded by ext/ with SQLite's
** JSON functions into relattn_st_tensor rows; src/ checks the numbers. */
#define RELATTN_ST_MAX_DIMS 8
typedef struct relattn_st_tensor {
  const char *name;
  int dtype;                          /* RELATTN_F32 | F16 | BF16 */
  int ndim;                           /* <= RELATTN_ST_MAX_DIMS */
  int64_t shape[RELATTN_ST_MAX_DIMS];
  int64_t begin, end;                 /* data_offsets, relative to the data */
  size_t numel;                       /* set by relattn_st_check */
} relattn_st_tensor;

/* Finds the header in a file of size n: *header at offset 8, *header_len
** bytes; the data starts after it. RELATTN_ERR_FORMAT when the file is too
** short or the length runs past its end. Messages start with what. */
int relattn_st_header(const uint8_t *file, size_t n, const char *what,
                      size_t *header_len, char *err, size_t errlen);
/* Checks every tensor against a data section of data_size bytes: shapes
** non-negative without overflow, offsets inside the data and not reversed,
** size = numel * dtype size, no two tensors overlapping, no byte of the data
** left uncovered. Sets numel. Uses scratch for n indices (sorting). */
int relattn_st_check(relattn_st_tensor *t, int n, uint64_t data_size,
                     const char *what, char *err, size_t errlen);
/* Writes the 8-byte length and the header, padded with spaces to a multiple
** of 8 bytes, into out; returns the bytes written (the data goes after).
** relattn_st_prefix_size says how many that is. */
size_t relattn_st_prefix_size(size_t json_len);
size_t relattn_st_write_prefix(uint8_t *out, const char *json, size_t json_len);

/* ---- sha256 (src/sha256.c) ---------------------------------------------- */

typedef struct relattn_sha256 {
  uint32_t h[8];
  uint64_t len;                       /* bytes hashed so far */
  uint8_t buf[64];
  size_t nbuf;
} relattn_sha256;
void relattn_sha256_init(relattn_sha256 *s);
void relattn_sha256_update(relattn_sha256 *s, const void *data, size_t n);
void relattn_sha256_hex(relattn_sha256 *s, char out[65]); /* finishes */
/* 1 when the x86 SHA extensions are used; relattn_sha256_set_portable(1)
** turns them off (for tests comparing the two). */
int relattn_sha256_accelerated(void);
void relattn_sha256_set_portable(int on);

/* ---- model tensors (src/model.c) ---------------------------------------- */

/* The attention's width per head: the config's d_head, else d_model /
** n_heads; and its inner width, n_heads times that (q, k, v's columns). */
int relattn_config_d_head(const relattn_config *c);
int relattn_config_inner(const relattn_config *c);
/* Checks a decoded config: sizes positive, d_model divisible by n_heads
** (without d_head; with it, n_heads * d_head at most 2^24),
** clip >= 0, vocab_size >= 256 (the byte tokenizer), the tokenizer's ids
** absent (-1) or in [256, vocab_size), the options in range. Messages start
** with what. */
int relattn_config_check(const relattn_config *c, const char *what, char *err,
                         size_t errlen);
/* "lm", "mlm", "classifier", "none" (RELATTN_HEAD_*), for messages. */
const char *relattn_head_name(int head);

/* The tensors a config needs (docs/reference.md), in a fixed order: tok_emb,
** then each layer's (rel_k, rel_v with shaw), then ln_f (pre-norm), lm_head
** (untied), rel_bias (t5), pos_emb (absolute). */
#define RELATTN_NAME_MAX 64
typedef struct relattn_tensor_spec {
  char name[RELATTN_NAME_MAX];
  int ndim;
  int64_t shape[3];
  size_t numel;
} relattn_tensor_spec;
int relattn_model_n_tensors(const relattn_config *c);
/* Fills spec i in [0, relattn_model_n_tensors(c)) of a config that passed
** relattn_config_check and relattn_model_bytes. */
void relattn_model_spec(const relattn_config *c, int i,
                        relattn_tensor_spec *spec);
/* The index of the tensor with this name, or -1 when the config has none. */
int relattn_model_index(const relattn_config *c, const char *name);
/* Writes the shape as JSON, e.g. "[4,33,64]" (buffer of 80 bytes is enough). */
void relattn_shape_json(const int64_t *shape, int ndim, char *out, size_t n);
/* Bytes of float32 weights (every tensor 64-byte aligned) plus the layer
** table; RELATTN_ERR_TOOBIG on overflow. The bound callers check before
** allocating. */
int relattn_model_bytes(const relattn_config *c, size_t *bytes,
                        const char *what, char *err, size_t errlen);
/* Allocates m->mem for c and points every array of m into it; the weights
** are then written through relattn_model_slot. */
int relattn_model_init(relattn_model *m, const relattn_config *c,
                       const char *what, char *err, size_t errlen);
float *relattn_model_slot(relattn_model *m, int i); /* spec i's array */
/* After the weights are written: builds the tables that depend only on them
** (rel_key, rel_key_query: each layer's table in the kernel's order; xl:
** W_r times the sinusoids, rows -clip .. clip; deberta: rel_emb (normed)
** through each layer's wk and wq), kept
** with the model until relattn_model_free. Messages start with what. */
int relattn_model_prepare(relattn_model *m, const char *what, char *err,
                          size_t errlen);
/* Bytes relattn_model_prepare allocates (an upper bound; SIZE_MAX on
** overflow), for memory limits: 0 for schemes without such tables. */
/* What tensor i of config c holds: RELATTN_SLOT_FLOAT (F32, F16 or BF16
** accepted); with quantization int8, RELATTN_SLOT_Q8 (a linear weight:
** I8 only) and RELATTN_SLOT_SCALE (its per-row scales: F32 only); with
** bf16, RELATTN_SLOT_BF16 (a linear weight: BF16 only). */
/* With quantization.embeddings int8 tok_emb and an untied lm_head are
** RELATTN_SLOT_Q8 too, pos_emb RELATTN_SLOT_Q8F (I8 only, followed by its
** scales, read into floats q s) and rel_emb RELATTN_SLOT_Q8R (I8 only,
** followed by its scales, kept as stored: a byte per element); with bf16
** all four are RELATTN_SLOT_BF16F (BF16 only, read into floats). */
enum { RELATTN_SLOT_FLOAT = 0, RELATTN_SLOT_Q8 = 1, RELATTN_SLOT_SCALE = 2,
       RELATTN_SLOT_BF16 = 3, RELATTN_SLOT_Q8F = 4, RELATTN_SLOT_BF16F = 5,
       RELATTN_SLOT_Q8R = 6 };
int relattn_model_slot_kind(const relattn_config *c, int i);
/* out (rows, cols) = q s, each row's int8 values times its scale: the
** floats a RELATTN_SLOT_Q8R table stands for (a Q8F one is read into the
** same at load). */
void relattn_q8r_to_f32(float *out, const int8_t *q, const float *scale,
                        size_t rows, size_t cols);
/* The dtypes slot kind k takes, for messages: "F32, F16 or BF16", ... */
const char *relattn_slot_dtypes(int kind);
int relattn_slot_dtype_ok(int kind, int dtype);
/* A loaded slot of kind RELATTN_SLOT_Q8 (after relattn_model_prepare). */
const struct relattn_q8w *relattn_model_slot_q8(const relattn_model *m,
                                                int i);
/* Row token of tok_emb into x (d_model floats): an int8 table's row
** dequantized, q s, the floats it stands for. */
void relattn_model_embed(const relattn_model *m, float *x, int token);
/* Whether tensor slot i is kept in panel order (*out, *in its shape). */
int relattn_model_slot_packed(const relattn_model *m, int i, int *out,
                              int *in);
size_t relattn_model_prepared_bytes(const relattn_config *c);
void relattn_model_free(relattn_model *m);          /* frees m->mem */

/* Standard base64 (RFC 4648, '=' padding optional) of s[0..n) into out
** (room for n * 3 / 4 + 3 bytes), *out_n bytes; RELATTN_ERR_FORMAT when s
** is not base64 (src/buf.c). */
int relattn_base64_decode(const char *s, size_t n, uint8_t *out,
                          size_t *out_n);

/* ---- tokenizers (src/tokenizer.c, tok_wordpiece.c, tok_sentencepiece.c) -- */

/* tokenizer.type, in the config's order; the tensor holding a kind's file
** is named "tokenizer." + its name (dtype U8, shape [bytes]). */
enum { RELATTN_TOK_BYTES = 0, RELATTN_TOK_WORDPIECE = 1,
       RELATTN_TOK_SENTENCEPIECE = 2 };
/* tokenizer.rules of a wordpiece tokenizer: whose text rules it follows where
** the two differ (src/tok_wordpiece.c): transformers' BertTokenizer (Python),
** or Hugging Face's Rust tokenizers library running a tokenizer.json. */
enum { RELATTN_RULES_TRANSFORMERS = 0, RELATTN_RULES_TOKENIZERS = 1 };
const char *relattn_tokenizer_kind_name(int kind);
/* Parses the tokenizer of config c from its file (n bytes; none for bytes).
** The file is untrusted: every length is checked. Messages start with what. */
int relattn_tokenizer_new(relattn_tokenizer **out, const relattn_config *c,
                          const uint8_t *file, size_t n, const char *what,
                          char *err, size_t errlen);
void relattn_tokenizer_free(relattn_tokenizer *t);
/* What a tokenizer file is, told by its structure alone: a SentencePiece
** .model (a protobuf ModelProto, read to its end, with at least one
** piece), a tokenizer.json (UTF-8 text whose first and last characters
** other than whitespace are { and }), a vocab.txt (other UTF-8 text), or,
** empty or none of these, unknown. Only a positive answer for another
** kind than expected is worth a message: a .model is rarely UTF-8, but a
** few bytes can be both. */
enum { RELATTN_TOKFILE_UNKNOWN = 0, RELATTN_TOKFILE_VOCAB = 1,
       RELATTN_TOKFILE_SPM = 2, RELATTN_TOKFILE_JSON = 3 };
int relattn_tokenizer_file_kind(const uint8_t *file, size_t n);
/* transformers' DebertaV2Converter / T5Converter (convert_slow_tokenizer.py)
** applied to an spm.model: the file in *out (malloc'd) as the model plus
** T5's <extra_id_N> pieces, carrying the tokenizer.json pipeline the
** converter writes (normalizers, Metaspace with prepend scheme, the scores
** in double, the added tokens: the control and user-defined pieces, then
** added[], which replace one of the same id), which the sentencepiece kind
** then runs as Hugging Face's tokenizers library runs that file. */
enum { RELATTN_ADDED_SPECIAL = 1, RELATTN_ADDED_LSTRIP = 2,
       RELATTN_ADDED_RSTRIP = 4 };
typedef struct relattn_spm_added {
  int32_t id;
  const char *text; /* n bytes */
  size_t n;
  int flags;        /* RELATTN_ADDED_* */
} relattn_spm_added;
typedef struct relattn_spm_convert {
  int t5;           /* T5Converter, else DebertaV2Converter */
  int lower;        /* DeBERTa's do_lower_case: Lowercase first */
  int scheme;       /* Metaspace's prepend_scheme: 0 never, 1 first, 2 always */
  int n_extra;      /* T5's extra_ids */
  const relattn_spm_added *added;
  int n_added;
} relattn_spm_convert;
int relattn_sentencepiece_convert(const uint8_t *file, size_t n,
                                  const relattn_spm_convert *c, uint8_t **out,
                                  size_t *out_n, const char *what, char *err,
                                  size_t errlen);
/* The kind as messages name it: "a vocab.txt (lines of UTF-8 text)". */
const char *relattn_tokenizer_file_name(int filekind);
int relattn_tokenizer_kind(const relattn_tokenizer *t);
int relattn_tokenizer_n_ids(const relattn_tokenizer *t); /* ids in [0, n) */
/* The id of the token whose text is piece ("[CLS]", "</s>"), a line of
** vocab.txt or a SentencePiece piece of any type; -1 when there is none. */
int relattn_tokenizer_piece_id(const relattn_tokenizer *t, const char *piece);
/* The ids of text (n bytes; invalid UTF-8 is the kind's business), in a
** malloc'd array with lead free slots in front: RELATTN_ERR_TOOBIG as soon
** as there are more than max_ids, so a limit stops the work early. */
int relattn_tokenizer_encode(const relattn_tokenizer *t, const uint8_t *text,
                             size_t n, size_t lead, size_t max_ids,
                             int32_t **ids, size_t *n_ids);
/* The same (no lead) with where each id comes from: spans (n_ids, 2),
** malloc'd, the byte offsets [start, end) in text of the characters it
** was made from, as Hugging Face's fast tokenizers give offset_mapping
** (docs/reference.md, relattn_token_labels): a word piece its characters,
** a SentencePiece piece with its U+2581 the space it stands for (the
** dummy prefix: nothing, an empty span), a character normalized into
** several pieces each of them its span, a special token its own text. */
int relattn_tokenizer_encode_spans(const relattn_tokenizer *t,
                                   const uint8_t *text, size_t n,
                                   size_t max_ids, int32_t **ids,
                                   uint32_t **spans, size_t *n_ids);
/* tokenizer.split_special: the tokens a text is split on before it is
** encoded, each becoming its id, as Hugging Face's tokenizers split their
** added tokens out (docs/reference.md, Tokenizers). text NULL: the
** tokenizer's own text of id (its piece or line in the file). lstrip /
** rstrip: the whitespace on the token's left / right goes with it. key
** names the entry in messages ("tokenizer.mask"). An id given twice takes
** the last text given. Messages start with what. */
typedef struct relattn_special_token {
  int32_t id;
  const char *text;   /* NUL-terminated, or NULL */
  int lstrip, rstrip;
  const char *key;
} relattn_special_token;
int relattn_tokenizer_set_special(relattn_tokenizer *t,
                                  const relattn_special_token *s, int n,
                                  const char *what, char *err, size_t errlen);
/* The text of ids, malloc'd, NUL after *len bytes; an id the tokenizer does
** not define is an error naming its position. With split_special, a
** special id is its text, a space between it and the text around it. */
int relattn_tokenizer_decode(const relattn_tokenizer *t, const int32_t *ids,
                             size_t n, uint8_t **text, size_t *len,
                             const char *what, char *err, size_t errlen);

/* The byte tokenizer alone (for callers without a model): */

/* The byte tokenizer: UTF-8 bytes are ids 0-255. out has n entries. */
void relattn_tokenize_bytes(const uint8_t *text, size_t n,
                            int32_t *out /* (n) */);
/* Ids 0-255 become bytes; bos, eos and pad are left out; any other id is
** an error naming its position. out has room for n bytes; *out_len is set. */
int relattn_detokenize_bytes(const relattn_config *c, const int32_t *ids,
                             size_t n, uint8_t *out, size_t *out_len,
                             const char *what, char *err, size_t errlen);

/* ---- token classification as the pipeline reports it (src/entities.c) -- */

/* aggregation_strategy of transformers' TokenClassificationPipeline */
enum { RELATTN_AGG_NONE = 0, RELATTN_AGG_SIMPLE = 1, RELATTN_AGG_FIRST = 2,
       RELATTN_AGG_AVERAGE = 3, RELATTN_AGG_MAX = 4 };
typedef struct relattn_entities_in {
  const uint8_t *text;     /* the text the tokens came from */
  size_t text_n;
  const int32_t *ids;      /* (n) the text's tokens, special ones left out */
  const uint32_t *spans;   /* (n, 2) their byte spans in text */
  const float *logits;     /* (n, n_labels) their rows of the classifier */
  int n, n_labels;
  const int *index;        /* (n) each token's index in the model input */
  const char *const *labels; /* (n_labels) */
  int kind;                /* RELATTN_TOK_*: how tokens join into words */
  int unk;                 /* the unknown token's id, or -1 */
  int strategy;            /* RELATTN_AGG_* */
  const char *const *ignore; /* labels (none) or groups left out */
  int n_ignore;
  /* a token's text in the vocabulary (*len bytes) */
  const uint8_t *(*token_text)(void *ctx, int32_t id, size_t *len);
  void *ctx;
} relattn_entities_in;
typedef struct relattn_entity {
  int label;               /* the label (none), the group's first (others) */
  char *group;             /* the group's name (not none), malloc'd */
  double score;
  char *word;              /* malloc'd, NUL-terminated */
  int64_t start, end;      /* characters (code points) of text: [start, end) */
  int index;               /* none: the token's model input index; else -1 */
} relattn_entity;
/* The rows of the pipeline's answer into *out (malloc'd, *n_out of them,
** freed by relattn_entities_free): RELATTN_OK or RELATTN_ERR_NOMEM. */
int relattn_entities_make(const relattn_entities_in *in, relattn_entity **out,
                          int *n_out);
void relattn_entities_free(relattn_entity *e, int n);
/* A token's text in the tokenizer's vocabulary (a piece, a line of
** vocab.txt, the byte of a byte id), or NULL. */
const uint8_t *relattn_tokenizer_id_text(const relattn_tokenizer *t,
                                         int32_t id, size_t *len);

/* ---- forward pass (src/forward.c) --------------------------------------- */

/* One sequence through the model. tokens is the model's input: BOS already
** in front when the tokenizer has one. Outputs left NULL are not computed
** (no LM head when logprob, top_token and top_logprob are all NULL). */
typedef struct relattn_fwd {
  const int32_t *tokens;   /* (n) ids < vocab_size */
  int n;                   /* >= 1 */
  float *logprob;          /* (n-1): ln p(tokens[i+1] | tokens[0..i]) */
  int32_t *top_token;      /* (n-1): most likely token after tokens[0..i] */
  float *top_logprob;      /* (n-1) */
  float *embedding;        /* (d_model): mean of final hidden rows [mean_from, n) */
  int mean_from;           /* 1 to leave BOS out of the mean, else 0 */
  float *map;              /* (n, n): weights of (map_layer, map_head), or NULL */
  int map_layer, map_head;
  /* heads: each needs the model to have it (relattn_forward says so) */
  float *cls;              /* (d_model): final hidden row 0 */
  float *pooled;           /* (d_model): the pooler on row 0 (a pooler) */
  float *logits;           /* (n_labels): the classifier's (head classifier) */
  float *sentence;         /* (relattn_sentence_dim): the model's sentence-
                           ** transformers vector (config sentence) */
  float *token_logits;     /* (n, n_labels): each row's (token_classifier) */
  const int32_t *fill;     /* (n_fill) input rows for the masked-LM head */
  int n_fill;
  int fill_k;              /* best tokens per row, >= 1 when fill is set */
  int32_t *fill_token;     /* (n_fill, fill_k): best first */
  float *fill_logprob;     /* (n_fill, fill_k): their log-softmax */
  /* progress, for a caller showing it while a long sequence runs: when set,
  ** n is added after each layer the sequence passes (read from any thread) */
  atomic_llong *layer_rows;
  float *hidden;           /* (n, d_model): the final hidden rows (after
                           ** ln_f): an encoder-decoder's encoder output */
} relattn_fwd;

/* The activations live in pool's scratch (worker 0, slots 1-2) and stay for
** the next call: one forward pass per pool at a time. From inside a task of
** another pool, pass that worker's own serial pool (relattn_pool_new(1)). */
int relattn_forward(const relattn_model *m, relattn_fwd *f, relattn_pool *pool,
                    char *err, size_t errlen);
/* Several sequences in one call, each request as for relattn_forward. Each
** sequence's results are bitwise what relattn_forward gives it alone, on a
** pool of any size (src/forward.c, DETERMINISM). */
int relattn_forward_batch(const relattn_model *m, relattn_fwd *f, int count,
                          relattn_pool *pool, char *err, size_t errlen);
/* After a pass: every output of request f finite? Weights that are finite
** but so large that float32 overflows give NaN or Inf, which SQL shows as
** NULL; this names the first such output instead (RELATTN_ERR_FORMAT:
** "the model's log-probability at position 3 is not finite ..."). The
** config sizes the vectors. Per request, so a packed batch can tell whose. */
int relattn_forward_check_finite(const relattn_fwd *f, const relattn_config *c,
                                 char *err, size_t errlen);
/* A classifier's logits as its problem_type reads them: out (n) gets the
** softmax (single_label_classification) or each one's sigmoid
** (multi_label_classification); regression has none (returns 0, else 1).
** relattn_label_best: the index of the largest logit, the first on a tie. */
int relattn_label_probs(double *out, const float *logits, int n,
                        int problem_type);
int relattn_label_best(const float *logits, int n);
/* Zero-shot classification over an NLI classifier, as transformers'
** ZeroShotClassificationPipeline.postprocess: logits (n, n_classes) of the
** pairs (text, hypothesis of candidate i); entail is the entailment class.
** multi (or n == 1): out[i] = softmax over (contradiction, entailment) of
** pair i, contradiction the class 0, or the last when entail is 0; else
** the softmax of the n entailment logits. order (n) gets the candidates
** best first, as the pipeline's reversed(argsort): equal scores put the
** later candidate first. */
void relattn_zero_shot_scores(double *out, int *order, const float *logits,
                              int n, int n_classes, int entail, int multi);
/* Bytes of scratch relattn_forward_batch may hold for count sequences of n
** tokens in all on a pool of workers workers (0 with an overflow): the one
** estimate callers check a memory bound against before anything is
** allocated. Activations (n, d_model + max(d_model, i) + 3 i) once, i the
** attention's inner width (5 d_model without d_head), and for the final
** row 0 of each sequence (count, d_model + max(d_model, i)); on every worker a block
** buffer of min(n, 256) x max(d_ff (2 d_ff gated), vocab_size) floats (a
** masked-LM head's rows: 2 d_model + vocab_size, when more) and the
** attention kernel's scratch, which grows with min(clip, n). */
size_t relattn_forward_memory(const relattn_model *m, int n, int count,
                              int workers);

/* ---- sentence-transformers' modules (src/sentence.c) -------------------- */

/* The width of a config's sentence vector: the last Dense module's
** out_features, else the pooling modes times d_model. */
int relattn_sentence_dim(const relattn_config *c);
/* One sequence's final rows x (n, d_model) through the config's Pooling,
** Dense and Normalize modules into out (relattn_sentence_dim floats),
** computed in double. RELATTN_OK, or RELATTN_ERR_NOMEM. */
int relattn_sentence_embed(const relattn_model *m, const float *x, int n,
                           float *out, char *err, size_t errlen);
/* The name of pooling mode bit (RELATTN_SP_*) and of a Dense activation. */
const char *relattn_sentence_pooling_name(int bit);
const char *relattn_dense_activation_name(int act);

/* ---- int8 and bf16 linear layers (src/qgemm.c) -------------------------- */

/* Output rows per panel of a packed int8 or bf16 weight. */
#define RELATTN_QPANEL 32
/* Longest k of an int8 product: its int32 sums stay exact (255 127 in). */
#define RELATTN_Q8_MAX_IN 65536

/* An int8 weight in panel order (src/qgemm.c), with what its products need. */
typedef struct relattn_q8w {
  int out, in;
  int8_t *w;    /* (out rounded up to RELATTN_QPANEL, in rounded up to 4) */
  float *scale; /* (out, rounded up): s_w, W = q s_w */
  int32_t *sum; /* (out, rounded up): the row sums of q, for the zero point */
} relattn_q8w;
/* Symmetric per row: q (out, in) and scale (out) from w (out, in). */
void relattn_q8_quantize(int8_t *q, float *scale, const float *w, int out,
                         int in);
/* Packs q (out, in) and scale (out): 0, RELATTN_ERR_ARG (out or in < 1),
** RELATTN_ERR_TOOBIG (in > RELATTN_Q8_MAX_IN), RELATTN_ERR_NOMEM. */
int relattn_q8w_new(relattn_q8w *qw, const int8_t *q, const float *scale,
                    int out, int in);
void relattn_q8w_free(relattn_q8w *qw);
/* In one block instead (a model's slot): the bytes it takes, a multiple of
** 64; relattn_q8w_place lays out the header, w, scale and sum in mem (64-
** byte aligned, that many bytes) from q and scale, which may not overlap
** it, and returns the header. Nothing to free but mem. */
size_t relattn_q8w_block_bytes(int out, int in);
/* Where in that block relattn_q8w_place puts the scales (out floats, then
** zeros to a panel), at least out + in bytes from its start. */
size_t relattn_q8w_scale_offset(int out, int in);
relattn_q8w *relattn_q8w_place(void *mem, const int8_t *q, const float *scale,
                               int out, int in);
void relattn_q8w_unpack(int8_t *q /* (out, in) */, const relattn_q8w *qw);
/* Rows [lo, lo + out) of qw as a weight of its own (no copy, nothing to
** free): lo a multiple of RELATTN_QPANEL, lo + out <= qw->out. */
relattn_q8w relattn_q8w_rows(const relattn_q8w *qw, int lo, int out);
/* Row r of qw against one row as relattn_q8_quantize_rows_on left it (xq,
** its scale sx and zero point zx): the value relattn_q8_gemm writes for
** them without b, the same bits. */
float relattn_q8w_dot(const relattn_q8w *qw, int r, const uint8_t *xq,
                      float sx, int32_t zx);
/* The floats an int8 weight stands for: w (out, in) = q s_w per row. */
void relattn_q8w_dequantize(float *w /* (out, in) */, const relattn_q8w *qw);
/* Row r of it: w (in) = q[r] s_w[r], the same floats. */
void relattn_q8w_row(float *w /* (in) */, const relattn_q8w *qw, int r);
/* Per row: u8 with a zero point, x = (q - z) s; rows of q ldq apart,
** zero from in to in rounded up to 4. On a path as below. */
void relattn_q8_quantize_rows_on(const char *path, uint8_t *xq, int ldq,
                                 float *sx, int32_t *zx, const float *x,
                                 int ldx, int rows, int in);
/* Bytes of scratch a product of rows rows takes (64-byte aligned). */
size_t relattn_q8_scratch(int rows, int in);
/* y (rows, ldy) = (accumulate ? y : 0) + b + x W^T, x quantized per row,
** the sums in int32: the same bits on every path. */
void relattn_q8_gemm(float *y, int ldy, const float *x, int ldx, int rows,
                     const relattn_q8w *qw, const float *b, int accumulate,
                     void *scratch);
/* On a named path ("avx512vnni", "avxvnni", "avx2", "scalar") where
** relattn_q8_path_ok says this CPU runs it; relattn_q8_path: the best. */
void relattn_q8_gemm_on(const char *path, float *y, int ldy, const float *x,
                        int ldx, int rows, const relattn_q8w *qw,
                        const float *b, int accumulate, void *scratch);
int relattn_q8_path_ok(const char *path);
const char *relattn_q8_path(void);
/* The same product in two halves, for products that share their rows x
** and are cut by output columns across threads: relattn_q8_rows quantizes
** x (rows, in) once into scratch (relattn_q8_scratch(rows, in) bytes);
** relattn_q8_gemm_cols then computes y's columns [c0, c1) of any weight of
** that in from it (c0 a multiple of RELATTN_QPANEL; c1 past out: out),
** reading scratch only: the bits relattn_q8_gemm gives those columns. */
void relattn_q8_rows(void *scratch, const float *x, int ldx, int rows, int in);
void relattn_q8_gemm_cols(float *y, int ldy, int rows, const relattn_q8w *qw,
                          const float *b, int accumulate, const void *scratch,
                          int c0, int c1);

/* A bf16 weight in panel order. */
typedef struct relattn_bf16w {
  int out, in;
  uint16_t *w; /* (out rounded up to RELATTN_QPANEL, in rounded up to 2) */
} relattn_bf16w;
/* Round to nearest even; a subnormal gives a zero of its sign. */
uint16_t relattn_f32_to_bf16(float f);
/* Packs w (out, in) bf16, subnormals as zeros: as relattn_q8w_new. */
int relattn_bf16w_new(relattn_bf16w *bw, const uint16_t *w, int out, int in);
void relattn_bf16w_free(relattn_bf16w *bw);
void relattn_bf16w_unpack(uint16_t *w /* (out, in) */, const relattn_bf16w *bw);
/* In one block (a model's slot), as relattn_q8w_place; subnormals as zeros. */
size_t relattn_bf16w_block_bytes(int out, int in);
relattn_bf16w *relattn_bf16w_place(void *mem, const uint16_t *w, int out,
                                   int in);
/* Rows [lo, lo + out) of bw as a weight of its own, as relattn_q8w_rows. */
relattn_bf16w relattn_bf16w_rows(const relattn_bf16w *bw, int lo, int out);
/* Row r of bw against x (in floats, each already a bf16 value): the value
** relattn_bf16_gemm writes for them without b, the same bits. */
float relattn_bf16w_dot(const relattn_bf16w *bw, int r, const float *x);
/* The floats a bf16 weight is: w (out, in), exactly. */
void relattn_bf16w_to_f32(float *w /* (out, in) */, const relattn_bf16w *bw);
/* relattn_f32_to_bf16 on n values. */
void relattn_f32_to_bf16_n(uint16_t *out, const float *w, size_t n);
size_t relattn_bf16_scratch(int rows, int in);
/* y = (accumulate ? y : 0) + b + x W^T, x rounded to bf16, the sums
** vdpbf16ps's (src/qgemm.c): the same bits on every path. */
void relattn_bf16_gemm(float *y, int ldy, const float *x, int ldx, int rows,
                       const relattn_bf16w *bw, const float *b, int accumulate,
                       void *scratch);
/* Paths "avx512bf16", "avx2", "scalar", as for int8. */
void relattn_bf16_gemm_on(const char *path, float *y, int ldy, const float *x,
                          int ldx, int rows, const relattn_bf16w *bw,
                          const float *b, int accumulate, void *scratch);
int relattn_bf16_path_ok(const char *path);
/* As relattn_q8_rows and relattn_q8_gemm_cols, for bf16 (scratch:
** relattn_bf16_scratch(rows, in) bytes). */
void relattn_bf16_rows(void *scratch, const float *x, int ldx, int rows,
                       int in);
void relattn_bf16_gemm_cols(float *y, int ldy, int rows,
                            const relattn_bf16w *bw, const float *b,
                            int accumulate, const void *scratch, int c0,
                            int c1);
const char *relattn_bf16_path(void);

/* ---- incremental decoding (src/seq2seq.c for encoder-decoders) ---------- */

/* A decoding state over a key/value cache. */
typedef struct relattn_dec relattn_dec;
/* The encoder-decoder side of relattn_dec_open / step / close / memory
** (the same contract; src/seq2seq.c): src (n_src >= 1 ids, eos already
** appended as the tokenizer does) is the encoder input, encoded once at
** open, and each layer's cross-attention keys and values computed once;
** every beam starts from the config's decoder.start token. max_len bounds
** the decoder tokens each beam's cache holds, that start token included.
** Writes the next-token logits of beam 0 (vocab floats) at open; step
** appends token[b] to beam parent[b]'s history (parent NULL: b) and writes
** (beams, vocab) logits. Logits are the LM head's raw outputs (a tied head
** after T5's d_model^-0.5 scaling). open and step check the pool's
** interrupt flag (RELATTN_ERR_INTERRUPT). A state from relattn_s2s_open
** is closed with relattn_s2s_close. */
int relattn_s2s_open(const relattn_model *m, const int *src, int n_src,
                     int beams, int max_len, relattn_pool *pool,
                     relattn_dec **out, float *logits, char *err,
                     size_t errsz);
int relattn_s2s_step(relattn_dec *d, const int *parent, const int *token,
                     float *logits, char *err, size_t errsz);
void relattn_s2s_close(relattn_dec *d);
size_t relattn_s2s_memory(const relattn_model *m, int n_src, int beams,
                          int max_len);

/* Teacher forcing, all target rows at once (no cache): the decoder reads
** [decoder.start] + tgt[0 .. n_tgt-2] over the encoder's output of src;
** row i predicts tgt[i]. Outputs left NULL are not computed: logprob (n_tgt)
** ln p(tgt[i] | src, tgt[<i]), top_token / top_logprob (n_tgt) the most
** likely token there, logits (n_tgt, vocab) the raw LM head. */
typedef struct relattn_s2s_req {
  const int32_t *src;  /* (n_src) ids < vocab_size */
  int n_src;           /* >= 1 */
  const int32_t *tgt;  /* (n_tgt) */
  int n_tgt;           /* >= 1 */
  float *logprob;      /* (n_tgt), or NULL */
  int32_t *top_token;  /* (n_tgt), or NULL */
  float *top_logprob;  /* (n_tgt), or NULL */
  float *logits;       /* (n_tgt, vocab_size), or NULL */
} relattn_s2s_req;
int relattn_s2s_forward(const relattn_model *m, relattn_s2s_req *r,
                        relattn_pool *pool, char *err, size_t errsz);
/* Bytes relattn_s2s_forward allocates for these lengths (0: overflow),
** besides the encoder pass's relattn_forward_memory(m, n_src, 1, workers). */
size_t relattn_s2s_forward_memory(const relattn_model *m, int n_src,
                                  int n_tgt);

/* ---- generation (src/decode.c, src/generate.c) --------------------------- */

/* Incremental decoding over a key/value cache (relattn_dec above). */
/* Opens a decoding state for `beams` hypotheses (1 for greedy/sampling). Decoder-only models: src (n_src >= 1
** ids, the model's own bos already in front if it has one) is the prefix every beam starts with.
** Encoder-decoder models: src is the encoder input, encoded once; every beam starts from the decoder start token.
** max_len bounds the tokens each beam's cache will hold (so memory is known up front).
** Writes the next-token logits of beam 0 to logits (vocab floats; every beam has the same at open). */
int relattn_dec_open(const relattn_model *m, const int *src, int n_src, int beams, int max_len,
                     relattn_pool *pool, relattn_dec **out, float *logits, char *err, size_t errsz);
/* Beam b's history becomes beam parent[b]'s history followed by token[b] (parent NULL: parent[b] = b);
** writes the next-token logits (beams, vocab). Each new token costs O(history) attention (the cache). */
int relattn_dec_step(relattn_dec *d, const int *parent, const int *token, float *logits, char *err, size_t errsz);
void relattn_dec_close(relattn_dec *d);
/* Bytes relattn_dec_open will allocate for these sizes (for relattn_max_memory). */
size_t relattn_dec_memory(const relattn_model *m, int n_src, int beams, int max_len);

/* The search over relattn_dec_* (src/generate.c), as Hugging Face's
** generate defines greedy search, sampling and beam search. */
enum { RELATTN_EARLY_FALSE = 0, RELATTN_EARLY_TRUE = 1,
       RELATTN_EARLY_NEVER = 2 };
#define RELATTN_GEN_MAX_EOS 16
typedef struct relattn_gen_opts {
  int max_new_tokens;       /* >= 0 */
  int do_sample;            /* sample instead of taking the best token */
  double temperature;       /* > 0 (sampling) */
  int top_k;                /* >= 0, 0 off (sampling) */
  double top_p;             /* (0, 1], 1 off (sampling) */
  uint64_t seed;            /* the sampler's generator */
  int num_beams;            /* >= 1; > 1 is beam search */
  double length_penalty;    /* beam search: score = sum / len^lp */
  int early_stopping;       /* RELATTN_EARLY_* */
  int no_repeat_ngram_size; /* 0 off */
  int eos[RELATTN_GEN_MAX_EOS]; /* tokens that end a sequence */
  int n_eos;
  /* greedy and sampling: after each new token other than eos, stop(ctx,
  ** ids, n) with the n tokens made so far; nonzero ends the search */
  int (*stop)(void *ctx, const int32_t *ids, int n);
  void *stop_ctx;
} relattn_gen_opts;
/* Hugging Face's defaults: greedy, 20 new tokens, temperature 1, top_k 0,
** top_p 1, one beam, length_penalty 1, early_stopping false, no eos. */
void relattn_gen_defaults(relattn_gen_opts *o);

/* How a search ended. */
enum { RELATTN_GEN_MAX = 0, RELATTN_GEN_EOS = 1, RELATTN_GEN_STOP = 2 };
typedef struct relattn_gen_result {
  int32_t *ids;             /* (n) the new tokens, the ending eos included */
  float *logprob;           /* (n) ln p(token | what precedes it), the
                            ** model's own (before temperature, top_k, top_p
                            ** and the n-gram rule) */
  int n;
  int ended;                /* RELATTN_GEN_* */
  double score;             /* beam search: the hypothesis' score */
} relattn_gen_result;
/* Runs the search from input (n_input ids, bos in front when the model
** has one) on pool (interrupts: RELATTN_ERR_INTERRUPT). out's arrays are
** relattn_alloc'd: relattn_gen_result_free. Messages start with
** "relattn_generate: ". */
int relattn_generate(const relattn_model *m, const int32_t *input,
                     int n_input, const relattn_gen_opts *o,
                     relattn_pool *pool, relattn_gen_result *out, char *err,
                     size_t errsz);
void relattn_gen_result_free(relattn_gen_result *r);
/* Bytes relattn_generate allocates (the cache included); SIZE_MAX on
** overflow. */
size_t relattn_generate_memory(const relattn_model *m, int n_input,
                               const relattn_gen_opts *o);
/* The generator the sampler draws from: xoshiro256** (Blackman & Vigna
** 2018) seeded by splitmix64, the same numbers on every machine. */
typedef struct relattn_rng { uint64_t s[4]; } relattn_rng;
void relattn_rng_seed(relattn_rng *r, uint64_t seed);
uint64_t relattn_rng_next(relattn_rng *r);
double relattn_rng_uniform(relattn_rng *r); /* [0, 1), 53 bits */
/* The text of new tokens, as it grows: the length of s's longest prefix
** that does not end inside a character still to come (a lead byte and the
** good continuation bytes after it); relattn_utf8_repair writes s with each
** maximal part that starts no valid character as U+FFFD (as Python's
** decode with errors="replace") into out (NULL: only count) and returns its
** length, at most 3 n. */
size_t relattn_utf8_complete(const uint8_t *s, size_t n);
size_t relattn_utf8_repair(uint8_t *out, const uint8_t *s, size_t n);

#endif /* RELATTN_H */
