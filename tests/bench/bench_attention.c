/*
** bench_attention.c: the attention kernel's speed as ratios (DESIGN §8).
**
** For n in {256, 1024, 4096, 16384}, 8 heads, d_head 64, k in {16, 64},
** causal and not, three variants on the same inputs and the same threads:
**   rel    relattn_attention with rel_k and rel_v
**   plain  the same kernel with NULL tables
**   naive  scores materialized per head as an n x n matrix (the seed's way;
**          GEMMs, the same vectorized softmax), where it fits (n <= 4096)
** Runs are interleaved (the order rotates every round) and each variant's
** median is reported; ratios are what count on a shared machine. GFLOP/s
** counts the attention GEMM work (4 n^2 d per head, half when causal) and is
** compared with this machine's cblas_sgemm rate measured here (one thread,
** times the threads). Scratch is the kernel's per-thread buffer.
**
** Then one row per position scheme (README: Position schemes) at n = 4096:
** the scheme's median CPU time over plain attention's (the same kernel, no
** relative terms), interleaved, causal and not; and the memory a call takes
** at n = 16384: per-thread scratch, the scratch the tasks share, and the
** scheme's own tables.
**
** Measured here (2 threads on a shared 2-core machine, Cooperlake kernels;
** noise is a few percent): over plain attention, bidirectional / causal,
** shaw k=16 +1% / +3%, k=64 +7% / +8% (the same as before the schemes:
** +4-7% in a direct comparison), t5 +2% / 0%, alibi +3% / -1%, rope 0% / +1%,
** deberta (512 rows) +34% / +29%, rel_key (M = n) +74% / +73%,
** rel_key_query +175% / +165%, xl (c = n-1) +70% / +71%. The unclipped
** tables cost time, not memory: every key block is in their band, so the
** query-side table is a second product the size of Q K^T (a query block
** against the n + 256 rows it reaches) and rel_key_query's key side a
** third; the band's per-element gathers add the rest. At n = 16384 a call
** takes 1.4-1.9 MB for none/shaw/t5/alibi, 4.6 MB deberta, 42-51 MB for
** the unclipped tables (their scratch per thread and flipped table grow
** with n: O(n)), 37.5 MB rope (its rotated keys, n x H x d floats); each
** thread's scratch includes a key block (or the table's rows) in the
** product kernel's panel order (src/gemm.c), 136 KB at d_head 64.
**
**   bench_attention [--quick]        BENCH_REPS=r multiplies the rounds
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "relattn.h"
#include "vecmath.h" /* src/, internal: the naive variant's softmax */

#define HEADS 8
#define DHEAD 64

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU time of every thread: what a run costs, whatever else the shared
** machine is doing (wall time also counts other people's work). */
static double cpu_now(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static float *rand_floats(size_t n, unsigned *seed) {
  float *p = relattn_alloc(sizeof(float) * n);
  size_t i;
  if (!p) {
    fprintf(stderr, "bench: out of memory\n");
    exit(1);
  }
  for (i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = (float)((*seed >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
  }
  return p;
}

/* ---- single-thread cblas_sgemm rate ---------------------------------------- */

static double sgemm_rate(int m, int n, int k, int reps) {
  unsigned seed = 7;
  float *a = rand_floats((size_t)m * k, &seed), *b = rand_floats((size_t)k * n, &seed);
  float *c = rand_floats((size_t)m * n, &seed);
  double t[16], best;
  int r;
  relattn_sgemm(0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n); /* warm */
  for (r = 0; r < reps; r++) {
    double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    relattn_sgemm(0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
    t[r] = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
  }
  best = median(t, reps);
  relattn_free(a);
  relattn_free(b);
  relattn_free(c);
  return 2.0 * m * n * k / best * 1e-9;
}

/* ---- the naive variant: per head, an n x n score matrix -------------------- */

typedef struct naive_job {
  const relattn_attn *a;
  float **scores;  /* per worker (n, n) */
  float **buckets; /* per worker (n, 2k+1) */
} naive_job;

static void naive_head(void *ctx, int h, int worker) {
  naive_job *J = ctx;
  const relattn_attn *a = J->a;
  const int n = a->n, d = a->d_head, k = a->clip, R = 2 * k + 1;
  const float s = 1.0f / sqrtf((float)d);
  const relattn_vec *vec = relattn_vec_ops();
  float *S = J->scores[worker], *B = J->buckets[worker];
  const float *Q = a->q + h * d, *K = a->k + h * d, *V = a->v + h * d;
  float *out = a->out + h * d;
  int i, j;
  relattn_sgemm(0, 1, n, n, d, s, Q, a->ldq, K, a->ldk, 0.0f, S, n);
  if (a->rel_k) { /* P = s Q rel_k^T into B, then gathered into S */
    relattn_sgemm(0, 1, n, R, d, s, Q, a->ldq, a->rel_k, d, 0.0f, B, R);
    for (i = 0; i < n; i++)
      for (j = 0; j < n; j++) {
        int r = j - i < -k ? -k : (j - i > k ? k : j - i);
        S[(size_t)i * n + j] += B[(size_t)i * R + r + k];
      }
  }
  for (i = 0; i < n; i++) {
    float *row = S + (size_t)i * n, sum;
    const int cnt = a->causal ? i + 1 : n;
    sum = vec->exp_sum(row, cnt, vec->max(row, cnt));
    vec->scale(row, cnt, 1.0f / sum);
    if (cnt < n) memset(row + cnt, 0, sizeof(float) * (size_t)(n - cnt));
  }
  relattn_sgemm(0, 0, n, d, n, 1.0f, S, n, V, a->ldv, 0.0f, out, a->ldo);
  if (a->rel_v) {
    memset(B, 0, sizeof(float) * (size_t)n * R);
    for (i = 0; i < n; i++)
      for (j = 0; j < n; j++) {
        int r = j - i < -k ? -k : (j - i > k ? k : j - i);
        B[(size_t)i * R + r + k] += S[(size_t)i * n + j];
      }
    relattn_sgemm(0, 0, n, d, R, 1.0f, B, R, a->rel_v, d, 1.0f, out, a->ldo);
  }
}

/* ---- one configuration ----------------------------------------------------- */

typedef struct row {
  int n, k, causal;
  double rel, plain, naive; /* median wall seconds; naive < 0 when skipped */
  double rel_cpu, plain_cpu, naive_cpu; /* median CPU seconds, all threads */
  double gflops;
  size_t scratch, naive_bytes;
  double diff; /* ||rel - naive|| / ||naive||: the two compute the same */
} row;

static row run_config(relattn_pool *pool, int n, int k, int causal, int rounds,
                      int with_naive) {
  const int w = HEADS * DHEAD, R = 2 * k + 1, threads = relattn_pool_size(pool);
  unsigned seed = 12345u + (unsigned)n;
  float *q = rand_floats((size_t)n * w, &seed), *kk = rand_floats((size_t)n * w, &seed);
  float *v = rand_floats((size_t)n * w, &seed), *out = rand_floats((size_t)n * w, &seed);
  float *out_naive = rand_floats((size_t)n * w, &seed);
  float *rk = rand_floats((size_t)R * DHEAD, &seed), *rv = rand_floats((size_t)R * DHEAD, &seed);
  float *scores[256] = {0}, *buckets[256] = {0};
  double t[3][64], c[3][64];
  relattn_attn a;
  naive_job nj;
  row res;
  char err[256];
  int r, i, variant;

  memset(&a, 0, sizeof a);
  a.n = n; a.heads = HEADS; a.d_head = DHEAD; a.clip = k; a.causal = causal;
  a.q = q; a.ldq = w; a.k = kk; a.ldk = w; a.v = v; a.ldv = w;
  a.out = out; a.ldo = w;
  memset(&res, 0, sizeof res);
  res.n = n; res.k = k; res.causal = causal;
  a.rel_k = rk; a.rel_v = rv;
  res.scratch = relattn_attention_scratch_bytes(&a);
  if (with_naive) {
    for (i = 0; i < threads; i++) {
      scores[i] = rand_floats((size_t)n * n, &seed); /* faulted in now */
      buckets[i] = rand_floats((size_t)n * R, &seed);
    }
    res.naive_bytes = sizeof(float) * ((size_t)n * n + (size_t)n * R);
  }
  nj.a = &a;
  nj.scores = scores;
  nj.buckets = buckets;

  /* A warm-up of each (not for the one-round sizes: the scratch is already
  ** there), then interleaved rounds in rotating order. */
  for (r = rounds > 1 ? -1 : 0; r < rounds; r++) {
    for (i = 0; i < 3; i++) {
      double t0, c0;
      variant = (r < 0 ? i : r + i) % 3;
      if (variant == 2 && !with_naive) continue;
      a.rel_k = variant == 1 ? NULL : rk;
      a.rel_v = variant == 1 ? NULL : rv;
      c0 = cpu_now();
      t0 = now();
      if (variant == 2) {
        a.out = out_naive;
        relattn_pool_run(pool, HEADS, naive_head, &nj);
        a.out = out;
      } else if (relattn_attention(&a, pool, err, sizeof err) != RELATTN_OK) {
        fprintf(stderr, "bench: %s\n", err);
        exit(1);
      }
      if (r >= 0) {
        t[variant][r] = now() - t0;
        c[variant][r] = cpu_now() - c0;
      }
    }
  }
  res.rel = median(t[0], rounds);
  res.plain = median(t[1], rounds);
  res.naive = with_naive ? median(t[2], rounds) : -1;
  res.rel_cpu = median(c[0], rounds);
  res.plain_cpu = median(c[1], rounds);
  res.naive_cpu = with_naive ? median(c[2], rounds) : -1;
  res.diff = -1;
  if (with_naive) { /* out holds the last run of rel or plain: run rel */
    double num = 0, den = 0;
    size_t e;
    a.rel_k = rk;
    a.rel_v = rv;
    relattn_attention(&a, pool, err, sizeof err);
    for (e = 0; e < (size_t)n * w; e++) {
      num += ((double)out[e] - out_naive[e]) * ((double)out[e] - out_naive[e]);
      den += (double)out_naive[e] * out_naive[e];
    }
    res.diff = sqrt(num / den);
  }
  res.gflops = (causal ? 2.0 * HEADS * (double)n * (n + 1) * DHEAD
                       : 4.0 * HEADS * (double)n * n * DHEAD) / res.rel_cpu *
               relattn_pool_size(pool) * 1e-9;
  for (i = 0; i < threads; i++) {
    relattn_free(scores[i]);
    relattn_free(buckets[i]);
  }
  relattn_free(q); relattn_free(kk); relattn_free(v); relattn_free(out);
  relattn_free(out_naive);
  relattn_free(rk); relattn_free(rv);
  return res;
}

/* ---- the schemes ------------------------------------------------------------ */

#define N_SCHEMES 10
static const char *const scheme_rows[N_SCHEMES] = {
    "none", "shaw k=16", "shaw k=64", "rel_key M=n", "rel_key_query M=n", "t5",
    "deberta", "alibi", "rope", "xl c=n-1"};

/* Scheme row r for n: the position and its tables (random; freed by caller). */
static void scheme_setup(int r, int n, relattn_position *p, relattn_pos_tables *t,
                         int *per_head, unsigned *seed) {
  static const int types[N_SCHEMES] = {
      RELATTN_POS_NONE, RELATTN_POS_SHAW, RELATTN_POS_SHAW, RELATTN_POS_REL_KEY,
      RELATTN_POS_REL_KEY_QUERY, RELATTN_POS_T5, RELATTN_POS_DEBERTA,
      RELATTN_POS_ALIBI, RELATTN_POS_ROPE, RELATTN_POS_XL};
  int64_t rows = 0;
  relattn_position_defaults(p, types[r]);
  memset(t, 0, sizeof *t);
  *per_head = 0;
  switch (r) {
    case 1: case 2: rows = r == 1 ? 33 : 129; break;
    case 3: case 4: rows = 2 * (int64_t)n - 1; break;
    case 6: rows = 512; *per_head = 1; break;
    case 9: rows = 2 * (int64_t)n - 1; *per_head = 1; break;
  }
  if (rows) {
    t->count[0] = rows * DHEAD * (*per_head ? HEADS : 1);
    t->t[0] = rand_floats((size_t)t->count[0], seed);
  }
  if (r == 1 || r == 2) {
    t->count[1] = t->count[0];
    t->t[1] = rand_floats((size_t)t->count[1], seed);
  }
  if (r == 5) {
    t->count[2] = HEADS * 32;
    t->t[2] = rand_floats((size_t)t->count[2], seed);
  }
  if (r == 6) {
    t->count[2] = t->count[0];
    t->t[2] = rand_floats((size_t)t->count[2], seed);
  }
  if (r == 9) {
    t->count[2] = t->count[3] = HEADS * DHEAD;
    t->t[2] = rand_floats((size_t)t->count[2], seed);
    t->t[3] = rand_floats((size_t)t->count[3], seed);
  }
}

static void scheme_free_tables(relattn_pos_tables *t) {
  int i;
  for (i = 0; i < RELATTN_POS_TABLES; i++) relattn_free((void *)t->t[i]);
}

static void run_schemes(relattn_pool *pool, int quick) {
  const int n = 4096, w = HEADS * DHEAD, threads = relattn_pool_size(pool);
  int rounds = quick ? 3 : 5, causal, r, i;
  unsigned seed = 777u;
  float *q = rand_floats((size_t)n * w, &seed), *k = rand_floats((size_t)n * w, &seed);
  float *v = rand_floats((size_t)n * w, &seed), *out = rand_floats((size_t)n * w, &seed);
  double ratio[2][N_SCHEMES];
  char err[256];

  printf("#\n# Position schemes (README: Position schemes), n = %d, heads %d, d_head %d: median CPU time over\n"
         "# plain attention's (the same kernel without relative terms), interleaved runs;\n"
         "# memory of one call at n = 16384 on %d threads: scratch per thread x threads +\n"
         "# scratch shared by the tasks + the scheme's own tables (no n x n buffer).\n",
         n, HEADS, DHEAD, threads);
  for (causal = 0; causal < 2; causal++) {
    relattn_scheme sch[N_SCHEMES];
    relattn_pos_tables tb[N_SCHEMES];
    relattn_attn a[N_SCHEMES];
    double c[N_SCHEMES][16];
    for (r = 0; r < N_SCHEMES; r++) {
      relattn_position p;
      int per_head;
      scheme_setup(r, n, &p, &tb[r], &per_head, &seed);
      if (relattn_scheme_build(&sch[r], &p, &tb[r], n, HEADS, DHEAD, causal, per_head,
                               err, sizeof err) != RELATTN_OK) {
        fprintf(stderr, "bench: %s: %s\n", scheme_rows[r], err);
        exit(1);
      }
      memset(&a[r], 0, sizeof a[r]);
      a[r].n = n; a[r].heads = HEADS; a[r].d_head = DHEAD; a[r].causal = causal;
      a[r].q = q; a[r].ldq = w; a[r].k = k; a[r].ldk = w; a[r].v = v; a[r].ldv = w;
      a[r].out = out; a[r].ldo = w;
      a[r].rel = &sch[r].rel;
    }
    for (i = -1; i < rounds; i++)
      for (r = 0; r < N_SCHEMES; r++) {
        const int x = (r + (i < 0 ? 0 : i)) % N_SCHEMES;
        double c0 = cpu_now();
        if (relattn_attention(&a[x], pool, err, sizeof err) != RELATTN_OK) {
          fprintf(stderr, "bench: %s\n", err);
          exit(1);
        }
        if (i >= 0) c[x][i] = cpu_now() - c0;
      }
    {
      const double base = median(c[0], rounds);
      for (r = 0; r < N_SCHEMES; r++) ratio[causal][r] = median(c[r], rounds) / base;
    }
    for (r = 0; r < N_SCHEMES; r++) {
      relattn_scheme_free(&sch[r]);
      scheme_free_tables(&tb[r]);
    }
  }
  printf("%-18s | %10s %10s | %10s %10s %10s %10s\n", "scheme", "over plain", "(causal)",
         "scratch/t", "shared", "tables", "total");
  for (r = 0; r < N_SCHEMES; r++) {
    /* memory at 16384, from the sizes the kernel and the builder state */
    const int big = 16384;
    relattn_position p;
    relattn_pos_tables t;
    relattn_scheme s;
    relattn_attn a;
    int per_head;
    size_t scratch, shared, tables;
    scheme_setup(r, big, &p, &t, &per_head, &seed);
    if (relattn_scheme_build(&s, &p, &t, big, HEADS, DHEAD, 0, per_head, err,
                             sizeof err) != RELATTN_OK) {
      fprintf(stderr, "bench: %s\n", err);
      exit(1);
    }
    memset(&a, 0, sizeof a);
    a.n = big; a.heads = HEADS; a.d_head = DHEAD; a.rel = &s.rel;
    scratch = relattn_attention_scratch_bytes(&a);
    shared = relattn_attention_shared_bytes(&a);
    tables = relattn_scheme_bytes(&p, &t, big, HEADS, DHEAD);
    printf("%-18s | %+9.1f%% %+9.1f%% | %8.0fKB %8.1fMB %8.0fKB %8.1fMB\n", scheme_rows[r],
           100.0 * (ratio[0][r] - 1.0), 100.0 * (ratio[1][r] - 1.0), scratch / 1024.0,
           shared / 1048576.0, tables / 1024.0,
           (scratch * (size_t)threads + shared + tables) / 1048576.0);
    fflush(stdout);
    relattn_scheme_free(&s);
    scheme_free_tables(&t);
  }
  relattn_free(q); relattn_free(k); relattn_free(v); relattn_free(out);
}

int main(int argc, char **argv) {
  static const int ns[] = {256, 1024, 4096, 16384};
  static const int ks[] = {16, 64};
  const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  const char *reps_env = getenv("BENCH_REPS");
  const int mult = reps_env && atoi(reps_env) > 0 ? atoi(reps_env) : 1;
  const int threads = relattn_cpu_count();
  const char *coretype = getenv("OPENBLAS_CORETYPE");
  relattn_pool *pool = relattn_pool_new(threads);
  double rate_qk, rate_pv, rate_big, rate;
  size_t ni, ki;
  int causal, blas;
  double max_diff = 0;
  time_t now_t = time(NULL);

  blas = relattn_blas_single();
  printf("# relattn %s attention benchmark, %s", RELATTN_VERSION, ctime(&now_t));
  printf("# openblas: %s\n# openblas corename: %s (OPENBLAS_CORETYPE %s)\n",
         relattn_blas_config(), relattn_blas_corename(),
         coretype ? coretype : "not set");
  printf("# simd path: %s; threads: %d; heads %d, d_head %d\n",
         relattn_vec_ops()->name, threads, HEADS, DHEAD);

  rate_qk = sgemm_rate(1024, 1024, 64, 7);
  rate_pv = sgemm_rate(1024, 64, 1024, 7);
  rate_big = sgemm_rate(1024, 1024, 1024, 3);
  rate = rate_qk > rate_pv ? rate_qk : rate_pv;
  printf("# cblas_sgemm, one thread: %.1f GFLOP/s (1024x1024x64), %.1f (1024x64x1024), "
         "%.1f (1024^3); reference = %.1f x %d threads = %.1f GFLOP/s\n",
         rate_qk, rate_pv, rate_big, rate, threads, rate * threads);
  printf("#\n# ms: median wall time of interleaved runs. Ratios and GFLOP/s use the median\n"
         "# CPU time of all threads (the machine is shared: wall time counts others' work).\n"
         "# GFLOP/s = attention GEMM work / (CPU time / threads); %%sgemm = of the reference.\n"
         "# scratch/t: the kernel's buffer per thread; naive/t: its n x n scores per thread.\n");
  printf("%6s %3s %6s | %9s %9s %9s | %9s %6s %9s | %7s %6s | %9s %9s\n", "n", "k",
         "causal", "rel ms", "plain ms", "naive ms", "rel/plain", "(wall)",
         "naive/rel", "GFLOP/s", "%sgemm", "scratch/t", "naive/t");
  fflush(stdout);

  if (getenv("BENCH_SCHEMES_ONLY")) {
    run_schemes(pool, quick);
    relattn_blas_restore(blas);
    relattn_pool_free(pool);
    return 0;
  }
  for (ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
    const int n = ns[ni];
    int rounds = n <= 256 ? 21 : n <= 1024 ? 11 : n <= 4096 ? 5 : 1;
    if (quick) rounds = rounds > 3 ? 3 : rounds;
    if (quick && n > 4096) continue;
    rounds *= mult;
    if (rounds > 63) rounds = 63;
    for (ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
      for (causal = 0; causal < 2; causal++) {
        row r = run_config(pool, n, ks[ki], causal, rounds, n <= 4096);
        if (r.diff > max_diff) max_diff = r.diff;
        char naive_ms[32], ratio[32], nbytes[32];
        if (r.naive >= 0) {
          snprintf(naive_ms, sizeof naive_ms, "%9.1f", r.naive * 1e3);
          snprintf(ratio, sizeof ratio, "%9.2f", r.naive_cpu / r.rel_cpu);
          snprintf(nbytes, sizeof nbytes, "%7.1fMB", r.naive_bytes / 1048576.0);
        } else {
          snprintf(naive_ms, sizeof naive_ms, "%9s", "-");
          snprintf(ratio, sizeof ratio, "%9s", "-");
          snprintf(nbytes, sizeof nbytes, "%9s", "-");
        }
        printf("%6d %3d %6s | %9.1f %9.1f %s | %9.3f %6.2f %s | %7.1f %5.0f%% | %7.0fKB %s\n",
               r.n, r.k, r.causal ? "yes" : "no", r.rel * 1e3, r.plain * 1e3,
               naive_ms, r.rel_cpu / r.plain_cpu, r.rel / r.plain, ratio, r.gflops,
               100.0 * r.gflops / (rate * threads), r.scratch / 1024.0, nbytes);
        fflush(stdout);
      }
  }
  printf("# check: rel vs naive, largest relative difference %.2g\n", max_diff);
  run_schemes(pool, quick);
  relattn_blas_restore(blas);
  relattn_pool_free(pool);
  return 0;
}
