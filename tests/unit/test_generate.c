/*
** test_generate.c: src/decode.c against src/forward.c, and the pieces of
** src/generate.c. On random decoders (Shaw's tables shared or per head,
** with or without the value term, clip 0 to 9, pre/post norm, the forward
** pass's options, panel-order weights or as stored) and under the schemes
** src/schemes.c builds (none, t5, alibi, rope), each beam's next-token
** log-probabilities from the cache equal relattn_forward's on that beam's
** whole history within 1e-4 absolute, at open and after steps whose
** parents reorder the beams (a beam copying another's history). Also: the
** cache's errors, the generator (the same numbers for a seed, others for
** another seed, uniform in [0, 1)), the UTF-8 of new text, and greedy
** search against a step-by-step argmax of relattn_forward.
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

/* A random decoder of cfg: weights scaled so activations stay O(1). */
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
           4 * (size_t)d + (size_t)cfg.n_heads * 64;
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
    L->wv = take(t, (size_t)in * d, ws, 0);
    L->wo = take(t, (size_t)d * in, 1.0 / sqrt((double)in), 0);
    if (!cfg.no_biases) {
      L->bq = take(t, in, 0.1, 0);
      L->bk = take(t, in, 0.1, 0);
      L->bv = take(t, in, 0.1, 0);
      L->bo = take(t, d, 0.1, 0);
    }
    if (cfg.pos.type == RELATTN_POS_SHAW) {
      L->rel_k = take(t, tab, 1.0, 0);
      L->rel_v = cfg.rel_values ? take(t, tab, 1.0, 0) : NULL;
    }
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
  if (cfg.pos.type == RELATTN_POS_T5)
    t->m.rel_bias = take(t, (size_t)cfg.n_heads * cfg.pos.num_buckets, 1.0, 0);
  t->m.lm_head = t->m.tok_emb;
}

static void free_model(test_model *t) {
  free(t->arena);
  free(t->m.layers);
  relattn_free(t->m.mem);
}

/* ln softmax(z)[tok] in double. */
static double log_softmax_at(const float *z, int V, int tok) {
  double mx = z[0], sum = 0;
  int i;
  for (i = 1; i < V; i++)
    if (z[i] > mx) mx = z[i];
  for (i = 0; i < V; i++) sum += exp(z[i] - mx);
  return z[tok] - mx - log(sum);
}

/* The forward pass's log-probability of each token after its prefix. */
static void forward_lp(relattn_pool *pool, const relattn_model *m,
                       const int32_t *seq, int n, float *lp, int32_t *top) {
  relattn_fwd f;
  char err[256] = "";
  memset(&f, 0, sizeof f);
  f.tokens = seq;
  f.n = n;
  f.logprob = lp;
  f.top_token = top;
  CHECK(relattn_forward(m, &f, pool, err, sizeof err) == RELATTN_OK,
        "forward: %s", err);
}

#define BEAMS 3
#define STEPS 12

/* Beams that reorder: each step every beam takes a random parent and a
** random token; its history is checked against the forward pass. */
static void run_case(relattn_pool *pool, relattn_config cfg) {
  test_model t;
  const int V = cfg.vocab_size;
  const int n_src = 1 + (int)(unit_next() % 20), max_len = n_src + STEPS;
  int32_t hist[BEAMS][64], next[BEAMS][64];
  int32_t *src = malloc(sizeof(int32_t) * n_src), top[64];
  float *logits = malloc(sizeof(float) * BEAMS * V), lp[64];
  int parent[BEAMS], token[BEAMS], b, s, i;
  relattn_dec *d = NULL;
  char err[256] = "";
  double worst = 0;
  make_model(&t, cfg);
  if (unit_next() % 2)
    CHECK(relattn_model_prepare(&t.m, "test", err, sizeof err) == RELATTN_OK,
          "prepare: %s", err);
  for (i = 0; i < n_src; i++) src[i] = (int32_t)(unit_next() % V);
  CHECK(relattn_dec_open(&t.m, src, n_src, BEAMS, max_len, pool, &d, logits,
                         err, sizeof err) == RELATTN_OK,
        "open: %s", err);
  if (!d) goto done;
  for (b = 0; b < BEAMS; b++) memcpy(hist[b], src, sizeof(int32_t) * n_src);
  for (s = 0; s < STEPS; s++) {
    const int len = n_src + s;
    for (b = 0; b < BEAMS; b++) {
      /* beam b's logits (at open: beam 0's for all) against the forward
      ** pass on its history and one more token */
      const float *z = logits + (size_t)(s ? b : 0) * V;
      int32_t seq[64];
      const int tok = (int)(unit_next() % V);
      memcpy(seq, hist[b], sizeof(int32_t) * len);
      seq[len] = tok;
      forward_lp(pool, &t.m, seq, len + 1, lp, top);
      {
        const double dlt = fabs(log_softmax_at(z, V, tok) - lp[len - 1]);
        if (dlt > worst) worst = dlt;
      }
      parent[b] = (int)(unit_next() % BEAMS);
      token[b] = (int)(unit_next() % V);
    }
    if (s + 1 == STEPS) break;
    for (b = 0; b < BEAMS; b++) {
      memcpy(next[b], hist[parent[b]], sizeof(int32_t) * len);
      next[b][len] = token[b];
    }
    memcpy(hist, next, sizeof hist);
    CHECK(relattn_dec_step(d, parent, token, logits, err, sizeof err) ==
              RELATTN_OK,
          "step: %s", err);
  }
  CHECK(worst < 1e-4, "scheme %s clip %d: cache vs forward %.3g",
        relattn_position_name(cfg.pos.type), cfg.clip, worst);
  token[0] = V;
  CHECK(relattn_dec_step(d, NULL, token, logits, err, sizeof err) ==
                RELATTN_ERR_ARG &&
            strstr(err, "is not below vocab_size") != NULL,
        "a token past the vocabulary: %s", err);
  token[0] = 0;
  parent[0] = BEAMS;
  CHECK(relattn_dec_step(d, parent, token, logits, err, sizeof err) ==
                RELATTN_ERR_ARG &&
            strstr(err, "is not a beam") != NULL,
        "a parent that is no beam: %s", err);
  /* the cache holds max_len tokens: after those, a step is refused */
  {
    int full = 0;
    for (s = 0; s < 4 && !full; s++)
      full = relattn_dec_step(d, NULL, token, logits, err, sizeof err) ==
             RELATTN_ERR_TOOBIG;
    CHECK(full && strstr(err, "the cache is full") != NULL,
          "a full cache: %s", err);
  }
done:
  relattn_dec_close(d);
  free(src);
  free(logits);
  free_model(&t);
}

/* Greedy search is the forward pass's top token, step by step. */
static void check_greedy(relattn_pool *pool) {
  relattn_config cfg;
  test_model t;
  relattn_gen_opts o;
  relattn_gen_result r;
  int32_t seq[64], top[64];
  float lp[64];
  char err[256] = "";
  int i, n = 5, bad = 0;
  memset(&cfg, 0, sizeof cfg);
  cfg.arch = RELATTN_DECODER;
  cfg.vocab_size = 40;
  cfg.n_heads = 2;
  cfg.d_model = 16;
  cfg.n_layers = 2;
  cfg.d_ff = 24;
  cfg.norm_eps = 1e-5f;
  cfg.clip = 3;
  cfg.rel_values = 1;
  cfg.bos = cfg.eos = cfg.pad = cfg.append = cfg.sep = cfg.mask = cfg.unk = -1;
  relattn_position_defaults(&cfg.pos, RELATTN_POS_SHAW);
  make_model(&t, cfg);
  for (i = 0; i < n; i++) seq[i] = (int32_t)(unit_next() % cfg.vocab_size);
  relattn_gen_defaults(&o);
  o.max_new_tokens = 30;
  CHECK(relattn_generate(&t.m, seq, n, &o, pool, &r, err, sizeof err) ==
            RELATTN_OK,
        "generate: %s", err);
  CHECK(r.n == 30 && r.ended == RELATTN_GEN_MAX, "%d tokens, ended %d", r.n,
        r.ended);
  memcpy(seq + n, r.ids, sizeof(int32_t) * r.n);
  forward_lp(pool, &t.m, seq, n + r.n, lp, top);
  for (i = 0; i < r.n; i++)
    if (top[n - 1 + i] != r.ids[i] || fabsf(lp[n - 1 + i] - r.logprob[i]) > 1e-4f)
      bad++;
  CHECK(bad <= 1, "greedy: %d of %d tokens not the forward pass's top", bad,
        r.n);
  relattn_gen_result_free(&r);
  /* an eos ends it, kept as the last token */
  o.eos[0] = seq[n + 4];
  o.n_eos = 1;
  CHECK(relattn_generate(&t.m, seq, n, &o, pool, &r, err, sizeof err) ==
            RELATTN_OK,
        "generate: %s", err);
  CHECK(r.ended == RELATTN_GEN_EOS && r.ids[r.n - 1] == seq[n + 4] && r.n <= 5,
        "eos: %d tokens, ended %d", r.n, r.ended);
  relattn_gen_result_free(&r);
  /* bad options */
  o.num_beams = 2;
  o.do_sample = 1;
  CHECK(relattn_generate(&t.m, seq, n, &o, pool, &r, err, sizeof err) ==
            RELATTN_ERR_ARG,
        "beams and sampling together");
  free_model(&t);
}

static void check_rng(void) {
  relattn_rng a, b, c;
  double sum = 0, lo = 1, hi = 0;
  int i, same = 1, other = 0;
  relattn_rng_seed(&a, 42);
  relattn_rng_seed(&b, 42);
  relattn_rng_seed(&c, 43);
  for (i = 0; i < 100000; i++) {
    const double u = relattn_rng_uniform(&a);
    same &= u == relattn_rng_uniform(&b);
    other += u == relattn_rng_uniform(&c);
    sum += u;
    if (u < lo) lo = u;
    if (u > hi) hi = u;
  }
  CHECK(same, "the same seed gives the same numbers");
  CHECK(other == 0, "another seed gives other numbers (%d equal)", other);
  CHECK(lo >= 0 && hi < 1 && fabs(sum / 100000 - 0.5) < 0.005,
        "uniform in [0, 1): min %g max %g mean %g", lo, hi, sum / 100000);
}

static void check_utf8(void) {
  static const struct {
    const char *in;
    size_t n, complete;
    const char *repaired;
  } cases[] = {
      {"ab", 2, 2, "ab"},
      {"a\xE2\x82", 3, 1, "a\xEF\xBF\xBD"},         /* a character to come */
      {"a\xE2\x82\xAC", 4, 4, "a\xE2\x82\xAC"},     /* the euro sign */
      {"\xE2\x82x", 3, 3, "\xEF\xBF\xBDx"},          /* one part, one U+FFFD */
      {"\xFF\xFE", 2, 2, "\xEF\xBF\xBD\xEF\xBF\xBD"}, /* no lead bytes */
      {"\xC0\xAF", 2, 2, "\xEF\xBF\xBD\xEF\xBF\xBD"}, /* overlong */
      {"\xED\xA0\x80", 3, 3,                          /* a surrogate */
       "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"x\xF0\x9F\x98", 4, 1, "x\xEF\xBF\xBD"},
  };
  size_t i;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t out[64];
    size_t n = relattn_utf8_repair(out, (const uint8_t *)cases[i].in,
                                   cases[i].n);
    CHECK(relattn_utf8_complete((const uint8_t *)cases[i].in, cases[i].n) ==
              cases[i].complete,
          "case %zu: complete", i);
    CHECK(n == strlen(cases[i].repaired) &&
              memcmp(out, cases[i].repaired, n) == 0,
          "case %zu: repaired", i);
  }
}

int main(void) {
  static const int schemes[] = {RELATTN_POS_SHAW, RELATTN_POS_NONE,
                                RELATTN_POS_T5, RELATTN_POS_ALIBI,
                                RELATTN_POS_ROPE};
  relattn_pool *pool = relattn_pool_new(2);
  int i;
  unit_seed();
  for (i = 0; i < 20; i++) {
    relattn_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.arch = RELATTN_DECODER;
    cfg.vocab_size = 7 + (int)(unit_next() % 60);
    cfg.n_heads = 1 + (int)(unit_next() % 3);
    cfg.d_model = cfg.n_heads * (4 + 4 * (int)(unit_next() % 4));
    cfg.n_layers = 1 + (int)(unit_next() % 3);
    cfg.d_ff = 8 + (int)(unit_next() % 40);
    cfg.norm = unit_next() % 2 ? RELATTN_NORM_POST : RELATTN_NORM_PRE;
    cfg.norm_eps = 1e-5f;
    cfg.activation = unit_next() % 2 ? RELATTN_GELU_TANH : RELATTN_GELU;
    cfg.tie_embeddings = 1;
    cfg.bos = cfg.eos = cfg.pad = cfg.append = cfg.sep = cfg.mask = cfg.unk =
        -1;
    relattn_position_defaults(&cfg.pos, schemes[i % 5]);
    if (cfg.pos.type == RELATTN_POS_SHAW) {
      cfg.clip = (int)(unit_next() % 10);
      cfg.rel_values = (int)(unit_next() % 2);
      cfg.per_head = (int)(unit_next() % 2);
    }
    if (cfg.pos.type == RELATTN_POS_T5) {
      cfg.pos.num_buckets = 8;
      cfg.pos.max_distance = 12;
    }
    if (unit_next() % 2) {
      cfg.norm_kind = (int)(unit_next() % 2);
      cfg.no_biases = (int)(unit_next() % 2);
      cfg.ffn_gated = (int)(unit_next() % 2);
    }
    run_case(pool, cfg);
  }
  check_greedy(pool);
  check_rng();
  check_utf8();
  relattn_pool_free(pool);
  UNIT_DONE();
}
