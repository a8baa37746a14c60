/*
** test_seq2seq.c: src/seq2seq.c's two paths against each other on random
** encoder-decoder models (relu and tied, gated and untied, d_head apart
** from d_model / n_heads, one and two threads): the logits of the cached
** path (relattn_s2s_open, then relattn_s2s_step a token at a time, beams
** reordered by random parents) equal the teacher-forced recompute of each
** beam's whole history (relattn_s2s_forward, the fused attention kernel)
** within 1e-4 relative to the largest logit. The two share no attention
** code (a plain loop over the cache against src/attention.c), so a wrong
** cache row, a wrong bucket or a wrong reorder shows. The numbers
** themselves are checked against a float64 port of Hugging Face's
** T5ForConditionalGeneration in tests/hf/test_t5_generation.py. Also: the
** refusals (a model without a decoder, a full cache, a bad token or
** parent), an interrupt, and relattn_s2s_memory.
*/
#include <string.h>

#include "relattn.h"
#include "unit.h"

#define TOL 1e-4

/* A random model of config c: every tensor from the config's own list. */
static int make_model(relattn_model *m, const relattn_config *c) {
  char err[256];
  int i, n;
  if (relattn_model_init(m, c, "test", err, sizeof err) != RELATTN_OK) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  n = relattn_model_n_tensors(c);
  for (i = 0; i < n; i++) {
    relattn_tensor_spec s;
    float *w = relattn_model_slot(m, i);
    double scale = 1.0, offset = 0.0;
    size_t k;
    relattn_model_spec(c, i, &s);
    if (strstr(s.name, "ln") && strstr(s.name, ".weight"))
      scale = 0.3, offset = 1.0; /* norms near 1 */
    else if (s.ndim == 2 && strcmp(s.name, "tok_emb") != 0 &&
             strcmp(s.name, "lm_head") != 0 && !strstr(s.name, "rel_bias"))
      scale = 2.0 / sqrt((double)s.shape[1]); /* linear: (out, in) */
    for (k = 0; k < s.numel; k++)
      w[k] = (float)(offset + scale * unit_uniform());
  }
  if (relattn_model_prepare(m, "test", err, sizeof err) != RELATTN_OK) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  return 0;
}

static relattn_config t5_config(int gated, int d_head) {
  relattn_config c;
  memset(&c, 0, sizeof c);
  c.arch = RELATTN_ENCODER;
  c.vocab_size = 300, c.d_model = 24, c.n_layers = 2, c.n_heads = 3;
  c.d_ff = 40, c.norm = RELATTN_NORM_PRE, c.norm_eps = 1e-6f;
  c.activation = gated ? RELATTN_GELU_TANH : RELATTN_RELU;
  c.ffn_gated = gated;
  c.tie_embeddings = !gated;
  c.norm_kind = RELATTN_RMSNORM, c.no_biases = 1;
  c.d_head = d_head;
  c.bos = -1, c.eos = 1, c.pad = 0, c.append = 1;
  c.sep = c.mask = c.unk = -1;
  c.tok_type = RELATTN_TOK_SENTENCEPIECE;
  relattn_position_defaults(&c.pos, RELATTN_POS_T5);
  c.pos.num_buckets = 8, c.pos.max_distance = 12;
  c.head = RELATTN_HEAD_LM;
  c.decoder = 1, c.dec_layers = 2, c.dec_start = 0;
  return c;
}

static int rand_token(int V) { return (int)(unit_next() % (uint64_t)V); }

/* max |a - b| / (1 + max |b|) over n */
static double rel_err(const float *a, const float *b, int n) {
  double e = 0, big = 0;
  int i;
  for (i = 0; i < n; i++) {
    if (fabs(b[i]) > big) big = fabs(b[i]);
    if (fabs((double)a[i] - b[i]) > e || a[i] != a[i]) e = fabs((double)a[i] - b[i]);
  }
  return e / (1.0 + big);
}

/* The teacher-forced logits after decoder history h (n tokens): the last
** row of relattn_s2s_forward over h + [any token]. */
static int forward_after(const relattn_model *m, const int32_t *src, int n_src,
                         const int32_t *h, int n, float *out,
                         relattn_pool *pool) {
  const int V = m->cfg.vocab_size;
  int32_t *tgt = malloc(sizeof(int32_t) * (size_t)(n + 1));
  float *lg = malloc(sizeof(float) * (size_t)(n + 1) * V);
  relattn_s2s_req r;
  char err[256];
  int rc;
  if (n) memcpy(tgt, h, sizeof(int32_t) * (size_t)n);
  tgt[n] = 5;
  memset(&r, 0, sizeof r);
  r.src = src, r.n_src = n_src, r.tgt = tgt, r.n_tgt = n + 1, r.logits = lg;
  rc = relattn_s2s_forward(m, &r, pool, err, sizeof err);
  if (rc != RELATTN_OK) fprintf(stderr, "%s\n", err);
  memcpy(out, lg + (size_t)n * V, sizeof(float) * V);
  free(tgt);
  free(lg);
  return rc;
}

/* Beams stepped with random parents and tokens against the recompute. */
static void run_case(const relattn_config *c, int threads, int beams) {
  relattn_model m;
  relattn_pool *pool = relattn_pool_new(threads);
  relattn_dec *d = NULL;
  const int V = c->vocab_size, max_len = 2 + (int)(unit_next() % 10);
  const int n_src = 1 + (int)(unit_next() % 9);
  int32_t src[16], hist[8][16], nh[8], ntmp[8], tmp[8][16];
  int token[8], parent[8], b, t, rc;
  float *lg = malloc(sizeof(float) * (size_t)beams * V), *ref = malloc(sizeof(float) * V);
  char err[256];
  double worst = 0, moved = 0;
  if (make_model(&m, c)) {
    CHECK(0, "model");
    return;
  }
  for (t = 0; t < n_src; t++) src[t] = rand_token(V);
  rc = relattn_s2s_open(&m, src, n_src, beams, max_len, pool, &d, lg, err,
                        sizeof err);
  CHECK(rc == RELATTN_OK, "open: %s", err);
  if (rc != RELATTN_OK) goto out;
  forward_after(&m, src, n_src, NULL, 0, ref, pool);
  worst = rel_err(lg, ref, V);
  for (b = 0; b < beams; b++) nh[b] = 0;
  for (t = 1; t < max_len; t++) {
    for (b = 0; b < beams; b++) {
      parent[b] = (int)(unit_next() % (uint64_t)beams);
      token[b] = rand_token(V);
      if (parent[b] != b) moved = 1;
    }
    /* the histories as the state should now hold them */
    for (b = 0; b < beams; b++) {
      ntmp[b] = nh[parent[b]];
      memcpy(tmp[b], hist[parent[b]], sizeof(int32_t) * (size_t)ntmp[b]);
      tmp[b][ntmp[b]++] = token[b];
    }
    memcpy(hist, tmp, sizeof hist);
    memcpy(nh, ntmp, sizeof nh);
    rc = relattn_s2s_step(d, parent, token, lg, err, sizeof err);
    CHECK(rc == RELATTN_OK, "step %d: %s", t, err);
    if (rc != RELATTN_OK) break;
    for (b = 0; b < beams; b++) {
      double e;
      forward_after(&m, src, n_src, hist[b], nh[b], ref, pool);
      e = rel_err(lg + (size_t)b * V, ref, V);
      if (e > worst) worst = e;
    }
  }
  CHECK(worst < TOL,
        "cached vs recomputed logits: %.3g (gated %d, d_head %d, beams %d, "
        "threads %d, max_len %d, n_src %d)",
        worst, c->ffn_gated, c->d_head, beams, threads, max_len, n_src);
  if (beams > 2 && max_len > 3) CHECK(moved, "no beam was reordered");
  /* the cache is full: one more step is refused */
  for (b = 0; b < beams; b++) token[b] = 1;
  rc = relattn_s2s_step(d, NULL, token, lg, err, sizeof err);
  CHECK(rc == RELATTN_ERR_TOOBIG &&
            strstr(err, "relattn_s2s_step: the cache is full (max_len"),
        "full cache: %d %s", rc, err);
  relattn_s2s_close(d);
out:
  relattn_pool_free(pool);
  relattn_model_free(&m);
  free(lg);
  free(ref);
}

static void check_errors(void) {
  relattn_config c = t5_config(0, 0), enc = c;
  relattn_model m, e;
  relattn_pool *pool = relattn_pool_new(1);
  relattn_dec *d = NULL;
  float *lg = malloc(sizeof(float) * 2 * c.vocab_size);
  int src[3] = {4, 5, 1}, tok[2] = {3, 4}, bad[2] = {3, 300}, par[2] = {0, 2};
  char err[256] = "";
  int rc;
  size_t m1, m2;
  enc.decoder = 0, enc.dec_layers = 0, enc.head = RELATTN_HEAD_NONE;
  if (make_model(&m, &c) || make_model(&e, &enc)) {
    CHECK(0, "models");
    return;
  }
  rc = relattn_s2s_open(&e, src, 3, 1, 4, pool, &d, lg, err, sizeof err);
  CHECK(rc == RELATTN_ERR_ARG && d == NULL &&
            strcmp(err, "relattn_s2s_open: the model is not an "
                        "encoder-decoder") == 0,
        "encoder refused: %s", err);
  CHECK(relattn_s2s_memory(&e, 3, 1, 4) == 0, "no memory for an encoder");
  m1 = relattn_s2s_memory(&m, 3, 1, 4);
  m2 = relattn_s2s_memory(&m, 3, 2, 8);
  CHECK(m1 > 0 && m2 > m1, "memory grows with beams and max_len: %zu %zu", m1,
        m2);
  src[1] = 300;
  rc = relattn_s2s_open(&m, src, 3, 2, 4, pool, &d, lg, err, sizeof err);
  CHECK(rc == RELATTN_ERR_ARG &&
            strstr(err, "relattn_s2s_open: source token 300 at position 1 is "
                        "not below vocab_size 300"),
        "bad source: %s", err);
  src[1] = 5;
  rc = relattn_s2s_open(&m, src, 3, 2, 4, pool, &d, lg, err, sizeof err);
  CHECK(rc == RELATTN_OK, "open: %s", err);
  rc = relattn_s2s_step(d, NULL, bad, lg, err, sizeof err);
  CHECK(rc == RELATTN_ERR_ARG &&
            strcmp(err, "relattn_s2s_step: token 300 of beam 1 is not below "
                        "vocab_size 300") == 0,
        "bad token: %s", err);
  rc = relattn_s2s_step(d, par, tok, lg, err, sizeof err);
  CHECK(rc == RELATTN_ERR_ARG &&
            strcmp(err, "relattn_s2s_step: parent 2 of beam 1 is not a beam "
                        "(0 to 1)") == 0,
        "bad parent: %s", err);
  /* an interrupt: the pool stops, the step says so */
  relattn_pool_cancel(pool);
  rc = relattn_s2s_step(d, NULL, tok, lg, err, sizeof err);
  CHECK(rc == RELATTN_ERR_INTERRUPT && strcmp(err, "interrupted") == 0,
        "interrupt: %d %s", rc, err);
  relattn_pool_set_cancel(pool, NULL, NULL);
  relattn_s2s_close(d);
  /* open and the teacher-forced pass stop too, nothing left open */
  relattn_pool_cancel(pool);
  d = NULL;
  rc = relattn_s2s_open(&m, src, 3, 1, 4, pool, &d, lg, err, sizeof err);
  CHECK(rc == RELATTN_ERR_INTERRUPT && d == NULL, "open interrupted: %d %s", rc,
        err);
  {
    relattn_s2s_req r;
    int32_t s32[3] = {4, 5, 1}, t32[2] = {6, 1};
    memset(&r, 0, sizeof r);
    r.src = s32, r.n_src = 3, r.tgt = t32, r.n_tgt = 2, r.logits = lg;
    rc = relattn_s2s_forward(&m, &r, pool, err, sizeof err);
    CHECK(rc == RELATTN_ERR_INTERRUPT, "forward interrupted: %d %s", rc, err);
    relattn_pool_set_cancel(pool, NULL, NULL);
    rc = relattn_s2s_forward(&e, &r, pool, err, sizeof err);
    CHECK(rc == RELATTN_ERR_ARG &&
              strcmp(err, "relattn_s2s_forward: the model is not an "
                          "encoder-decoder") == 0,
          "forward of an encoder: %s", err);
    t32[1] = 300;
    rc = relattn_s2s_forward(&m, &r, pool, err, sizeof err);
    CHECK(rc == RELATTN_ERR_ARG &&
              strcmp(err, "relattn_s2s_forward: target token 300 at position "
                          "1 is not below vocab_size 300") == 0,
          "bad target: %s", err);
  }
  relattn_s2s_close(NULL);
  relattn_pool_free(pool);
  relattn_model_free(&m);
  relattn_model_free(&e);
  free(lg);
}

int main(void) {
  int i;
  unit_seed();
  {
    relattn_config relu = t5_config(0, 0), gated = t5_config(1, 0);
    relattn_config wide = t5_config(1, 16); /* 3 x 16 = 48 for d_model 24 */
    for (i = 0; i < 2; i++) {
      run_case(&relu, 1, 1);
      run_case(&relu, 2, 3);
      run_case(&gated, 1, 4);
      run_case(&wide, 2, 2);
    }
  }
  check_errors();
  UNIT_DONE();
}
