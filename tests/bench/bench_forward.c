/*
** bench_forward.c: the forward pass's throughput, through SQL and through the
** C API, and the share of it spent in the attention kernel.
**
**   build/bench/bench_forward [relattn.so] [n ...]     (make bench)
**
** A random model of DESIGN §4's example size (d_model 256, 4 layers of 4
** heads, d_ff 1024, vocab 259, clip 16, value term, bos) is built in memory,
** and the same weights are imported into an in-memory database through
** relattn_import. For each n, interleaved rounds time:
**   C:    relattn_forward for the log-probs (what relattn_score needs)
**   SQL:  SELECT relattn_score('m', ?) with a BLOB of n tokens
**   attn: relattn_attention alone, once per layer, on the same shapes
** and print medians: tokens/s, the SQL overhead (SQL time / C time - 1), and
** attention's share of the C forward time. Both sides use the machine's
** cores (relattn_threads() default) with OpenBLAS single-threaded.
*/
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "relattn.h"

#define D 256
#define LAYERS 4
#define HEADS 4
#define DFF 1024
#define VOCAB 259
#define CLIP 16
#define ROUNDS 11

/* ---- a random model, kept as named tensors for the safetensors file ------ */

typedef struct {
  char name[64];
  int ndim;
  int shape[2];
  float *data;
} tensor;

static tensor tensors[8 + LAYERS * 20];
static int n_tensors;
static unsigned long long rng_state = 88172645463325252ull;

static float uniform(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
}

static float *add(const char *name, int rows, int cols, float scale,
                  float offset) {
  tensor *t = &tensors[n_tensors++];
  size_t count = (size_t)rows * (cols ? cols : 1), i;
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = cols ? 2 : 1;
  t->shape[0] = rows;
  t->shape[1] = cols;
  t->data = relattn_alloc(count * sizeof(float));
  for (i = 0; i < count; i++) t->data[i] = offset + scale * uniform();
  return t->data;
}

static void build(relattn_model *m) {
  static relattn_layer layers[LAYERS];
  char name[64];
  int l;
  float ws = 1.0f / 16; /* 1 / sqrt(d_model) */
  memset(m, 0, sizeof *m);
  m->cfg.arch = RELATTN_DECODER;
  m->cfg.vocab_size = VOCAB;
  m->cfg.d_model = D;
  m->cfg.n_layers = LAYERS;
  m->cfg.n_heads = HEADS;
  m->cfg.d_ff = DFF;
  m->cfg.norm = RELATTN_NORM_PRE;
  m->cfg.norm_eps = 1e-5f;
  m->cfg.activation = RELATTN_GELU;
  m->cfg.tie_embeddings = 1;
  m->cfg.clip = CLIP;
  m->cfg.rel_values = 1;
  m->cfg.bos = 256;
  m->cfg.eos = 257;
  m->cfg.pad = 258;
  m->tok_emb = m->lm_head = add("tok_emb", VOCAB, D, 1, 0);
  m->layers = layers;
#define T(field, suffix, rows, cols, scale, offset)              \
  snprintf(name, sizeof name, "layers.%d.%s", l, suffix);      \
  layers[l].field = add(name, rows, cols, scale, offset)
  for (l = 0; l < LAYERS; l++) {
    T(ln1_w, "ln1.weight", D, 0, 0.3f, 1);
    T(ln1_b, "ln1.bias", D, 0, 0.1f, 0);
    T(wq, "attn.wq", D, D, 2 * ws, 0);
    T(wk, "attn.wk", D, D, 2 * ws, 0);
    T(wv, "attn.wv", D, D, ws, 0);
    T(wo, "attn.wo", D, D, ws, 0);
    T(bq, "attn.bq", D, 0, 0.1f, 0);
    T(bk, "attn.bk", D, 0, 0.1f, 0);
    T(bv, "attn.bv", D, 0, 0.1f, 0);
    T(bo, "attn.bo", D, 0, 0.1f, 0);
    T(rel_k, "attn.rel_k", 2 * CLIP + 1, D / HEADS, 1, 0);
    T(rel_v, "attn.rel_v", 2 * CLIP + 1, D / HEADS, 1, 0);
    T(ln2_w, "ln2.weight", D, 0, 0.3f, 1);
    T(ln2_b, "ln2.bias", D, 0, 0.1f, 0);
    T(w1, "ffn.w1", DFF, D, ws, 0);
    T(b1, "ffn.b1", DFF, 0, 0.1f, 0);
    T(w2, "ffn.w2", D, DFF, 1.0f / 32, 0);
    T(b2, "ffn.b2", D, 0, 0.1f, 0);
  }
#undef T
  m->lnf_w = add("ln_f.weight", D, 0, 0.3f, 1);
  m->lnf_b = add("ln_f.bias", D, 0, 0.1f, 0);
}

/* The tensors as a safetensors file, the config in __metadata__. */
static unsigned char *safetensors(size_t *size) {
  static const char config[] =
      "{\\\"arch\\\":\\\"decoder\\\",\\\"vocab_size\\\":259,\\\"d_model\\\":256,"
      "\\\"n_layers\\\":4,\\\"n_heads\\\":4,\\\"d_ff\\\":1024,\\\"norm\\\":\\\"pre\\\","
      "\\\"norm_eps\\\":1e-5,\\\"activation\\\":\\\"gelu\\\",\\\"tie_embeddings\\\":true,"
      "\\\"position\\\":{\\\"type\\\":\\\"shaw\\\",\\\"clip\\\":16,\\\"values\\\":true,"
      "\\\"per_head\\\":false},\\\"tokenizer\\\":{\\\"type\\\":\\\"bytes\\\","
      "\\\"bos\\\":256,\\\"eos\\\":257,\\\"pad\\\":258}}";
  char *json = malloc(1 << 16);
  size_t len = 0, off = 0, hdr, data = 0, i;
  unsigned char *out;
  len += sprintf(json + len, "{\"__metadata__\":{\"relattn.config\":\"%s\"}", config);
  for (i = 0; i < (size_t)n_tensors; i++) {
    tensor *t = &tensors[i];
    size_t bytes = (size_t)t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1) * 4;
    if (t->ndim == 2)
      len += sprintf(json + len, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],"
                     "\"data_offsets\":[%zu,%zu]}", t->name, t->shape[0],
                     t->shape[1], off, off + bytes);
    else
      len += sprintf(json + len, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],"
                     "\"data_offsets\":[%zu,%zu]}", t->name, t->shape[0], off,
                     off + bytes);
    off += bytes;
  }
  json[len++] = '}';
  while (len % 8) json[len++] = ' ';
  hdr = len;
  *size = 8 + hdr + off;
  out = malloc(*size);
  for (i = 0; i < 8; i++) out[i] = (unsigned char)((unsigned long long)hdr >> (8 * i));
  memcpy(out + 8, json, hdr);
  for (i = 0; i < (size_t)n_tensors; i++) {
    tensor *t = &tensors[i];
    size_t bytes = (size_t)t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1) * 4;
    memcpy(out + 8 + hdr + data, t->data, bytes);
    data += bytes;
  }
  free(json);
  return out;
}

/* ---- timing ---------------------------------------------------------------- */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  const char *so = argc > 1 ? argv[1] : "./relattn.so";
  int sizes[16] = {128, 512, 2048}, n_sizes = 3, s, r, i;
  relattn_model m;
  relattn_pool *pool;
  sqlite3 *db;
  sqlite3_stmt *score;
  char *zErr = NULL, err[256];
  unsigned char *file;
  size_t file_size;
  int threads = relattn_cpu_count();

  if (argc > 2) {
    for (n_sizes = 0; n_sizes + 2 < argc && n_sizes < 16; n_sizes++)
      sizes[n_sizes] = atoi(argv[n_sizes + 2]);
  }
  build(&m);
  file = safetensors(&file_size);
  pool = relattn_pool_new(threads);

  if (sqlite3_open(":memory:", &db) != SQLITE_OK ||
      sqlite3_enable_load_extension(db, 1) != SQLITE_OK ||
      sqlite3_load_extension(db, so, NULL, &zErr) != SQLITE_OK) {
    fprintf(stderr, "bench_forward: cannot load %s: %s\n", so,
            zErr ? zErr : sqlite3_errmsg(db));
    return 1;
  }
  {
    sqlite3_stmt *imp;
    sqlite3_prepare_v2(db, "SELECT relattn_import('m', ?)", -1, &imp, NULL);
    sqlite3_bind_blob(imp, 1, file, (int)file_size, SQLITE_STATIC);
    if (sqlite3_step(imp) != SQLITE_ROW) {
      fprintf(stderr, "bench_forward: import: %s\n", sqlite3_errmsg(db));
      return 1;
    }
    sqlite3_finalize(imp);
  }
  sqlite3_prepare_v2(db, "SELECT relattn_score('m', ?)", -1, &score, NULL);

  printf("forward pass, d_model %d, %d layers x %d heads, d_ff %d, clip %d, "
         "%d threads, median of %d interleaved rounds\n",
         D, LAYERS, HEADS, DFF, CLIP, threads, ROUNDS);
  printf("openblas: %s (OPENBLAS_CORETYPE %s)\n", relattn_blas_config(),
         getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "not set");
  printf("%6s %12s %12s %13s %15s\n", "n", "C tok/s", "SQL tok/s",
         "SQL overhead", "attention share");
  for (s = 0; s < n_sizes; s++) {
    int n = sizes[s], dh = D / HEADS, reps;
    int32_t *input = malloc(sizeof(int32_t) * (n + 1));
    float *lp = malloc(sizeof(float) * (n + 1));
    float *qkv = relattn_alloc(sizeof(float) * (size_t)(n + 1) * 3 * D);
    float *out = relattn_alloc(sizeof(float) * (size_t)(n + 1) * D);
    double tc[ROUNDS], ts[ROUNDS], ta[ROUNDS], sql_score = 0;
    relattn_fwd f;
    relattn_attn a;
    input[0] = 256;
    for (i = 1; i <= n; i++) input[i] = (int32_t)((uniform() + 1) * 127.99);
    for (i = 0; i < (n + 1) * 3 * D; i++) qkv[i] = uniform();
    memset(&a, 0, sizeof a);
    a.n = n + 1;
    a.heads = HEADS;
    a.d_head = dh;
    a.clip = CLIP;
    a.causal = 1;
    a.q = qkv, a.k = qkv + D, a.v = qkv + 2 * D;
    a.ldq = a.ldk = a.ldv = 3 * D;
    a.rel_k = m.layers[0].rel_k;
    a.rel_v = m.layers[0].rel_v;
    a.out = out;
    a.ldo = D;
    reps = 1; /* round -1 sets it: ~0.1 s per measurement */
    sqlite3_bind_blob(score, 1, input + 1, 4 * n, SQLITE_STATIC);
    for (r = -1; r < ROUNDS; r++) { /* round -1 warms the caches up */
      double t0, c_time, s_time, a_time;
      int k, blas = relattn_blas_single();
      t0 = now();
      for (k = 0; k < reps; k++) {
        memset(&f, 0, sizeof f);
        f.tokens = input;
        f.n = n + 1;
        f.logprob = lp;
        if (relattn_forward(&m, &f, pool, err, sizeof err) != RELATTN_OK) {
          fprintf(stderr, "bench_forward: %s\n", err);
          return 1;
        }
      }
      c_time = (now() - t0) / reps;
      t0 = now();
      for (k = 0; k < reps; k++)
        for (i = 0; i < LAYERS; i++)
          if (relattn_attention(&a, pool, err, sizeof err) != RELATTN_OK) {
            fprintf(stderr, "bench_forward: %s\n", err);
            return 1;
          }
      a_time = (now() - t0) / reps;
      relattn_blas_restore(blas);
      t0 = now();
      for (k = 0; k < reps; k++) {
        if (sqlite3_step(score) != SQLITE_ROW) {
          fprintf(stderr, "bench_forward: %s\n", sqlite3_errmsg(db));
          return 1;
        }
        sql_score = sqlite3_column_double(score, 0);
        sqlite3_reset(score);
      }
      s_time = (now() - t0) / reps;
      if (r >= 0) tc[r] = c_time, ts[r] = s_time, ta[r] = a_time / c_time;
      else reps = c_time > 0.1 ? 1 : (int)(0.1 / c_time);
    }
    {
      double c = median(tc, ROUNDS), q = median(ts, ROUNDS), c_score = 0;
      for (i = 0; i < n; i++) c_score += lp[i];
      printf("%6d %12.0f %12.0f %12.1f%% %14.0f%%\n", n, n / c, n / q,
             100 * (q / c - 1), 100 * median(ta, ROUNDS));
      if (c_score - sql_score > 1e-3 * n || sql_score - c_score > 1e-3 * n)
        printf("       (score differs: C %g, SQL %g)\n", c_score, sql_score);
    }
    free(input), free(lp), relattn_free(qkv), relattn_free(out);
  }
  sqlite3_finalize(score);
  sqlite3_close(db);
  relattn_pool_free(pool);
  for (i = 0; i < n_tensors; i++) relattn_free(tensors[i].data);
  free(file);
  return 0;
}
