/*
** generate.c: text generation as Hugging Face's generate defines it, over
** the incremental decoding of src/decode.c (relattn.h, relattn_generate).
**
**   greedy:   the most likely token (the lowest id on a tie), after the
**             n-gram rule (NoRepeatNGramLogitsProcessor)
**   sampling: logits -> n-gram rule -> / temperature -> top_k -> top_p
**             (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
**             min_tokens_to_keep 1) -> softmax -> one draw
**   beam:     log_softmax -> n-gram rule -> + beam score, the best
**             max(2, 1 + n_eos) * num_beams candidates, then BeamSearchScorer
**             and BeamHypotheses (transformers 4.3x,
**             generation/beam_search.py): eos candidates ranked below
**             num_beams are dropped, the others end a hypothesis scored
**             sum_logprobs / len^length_penalty (len counts the input),
**             early_stopping true / false / "never" as is_done says.
** Each stops at max_new_tokens, at an eos (greedy and sampling keep it as
** their last token) or when opts->stop says so.
**
** DETERMINISM
** Sampling draws from its own generator (xoshiro256**, seeded by
** splitmix64), computes the softmax in double and walks the tokens in id
** order, and top_p sorts by (logit, id): the same draw for the same logits
** on every machine. The logits themselves are float32 products, equal
** across OpenBLAS kernel sets within their tolerance: a draw can differ
** only where two tokens' cumulative probabilities meet within it.
*/
#include "relattn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void relattn_gen_defaults(relattn_gen_opts *o) {
  memset(o, 0, sizeof *o);
  o->max_new_tokens = 20;
  o->temperature = 1.0;
  o->top_p = 1.0;
  o->num_beams = 1;
  o->length_penalty = 1.0;
  o->early_stopping = RELATTN_EARLY_FALSE;
}

/* ---- the generator ----------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void relattn_rng_seed(relattn_rng *r, uint64_t seed) {
  int i;
  for (i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t relattn_rng_next(relattn_rng *r) {
  uint64_t *s = r->s;
  const uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double relattn_rng_uniform(relattn_rng *r) {
  return (double)(relattn_rng_next(r) >> 11) * 0x1.0p-53;
}

/* ---- the pieces ---------------------------------------------------------- */

static int is_eos(const relattn_gen_opts *o, int t) {
  int i;
  for (i = 0; i < o->n_eos; i++)
    if (o->eos[i] == t) return 1;
  return 0;
}

/* ln sum exp(z) over n, in double. */
static double log_sum_exp(const float *z, int n) {
  double mx = -INFINITY, sum = 0.0;
  int i;
  for (i = 0; i < n; i++)
    if (z[i] > mx) mx = z[i];
  if (mx == -INFINITY) return mx;
  for (i = 0; i < n; i++) sum += exp((double)z[i] - mx);
  return mx + log(sum);
}

/* NoRepeatNGramLogitsProcessor: after seq (len tokens, the input
** included), every token that would repeat an n-gram of seq gets -inf. */
static void ban_ngrams(double *score, const int32_t *seq, int len, int n) {
  int s, i;
  if (n <= 0 || len + 1 < n) return;
  /* the n-1 tokens at the end, matched against every earlier n-gram's start */
  for (s = 0; s + n <= len; s++) {
    for (i = 0; i < n - 1; i++)
      if (seq[s + i] != seq[len - n + 1 + i]) break;
    if (i == n - 1) score[seq[s + n - 1]] = -INFINITY;
  }
}

/* Is a ranked before b: the larger value, then the lower id. */
static int before(const double *v, int a, int b) {
  return v[a] > v[b] || (v[a] == v[b] && a < b);
}

/* The k best entries of v (n) into idx, best first (k <= n). Insertion
** into a sorted list of k: O(n k), k small (beams, top_k). */
static void top_k_of(int *idx, const double *v, int n, int k) {
  int have = 0, i, j;
  for (i = 0; i < n; i++) {
    if (have == k && !before(v, i, idx[k - 1])) continue;
    j = have < k ? have++ : k - 1;
    for (; j > 0 && before(v, i, idx[j - 1]); j--) idx[j] = idx[j - 1];
    idx[j] = i;
  }
}

/* For top_p: a token's score and id, sorted ascending by (score, id), as
** TopPLogitsWarper sorts (the pair carries its own key: generation runs
** on several threads at once in relattn_scan). */
typedef struct scored_id {
  double v;
  int id;
} scored_id;

static int cmp_asc(const void *pa, const void *pb) {
  const scored_id *a = pa, *b = pb;
  if (a->v != b->v) return a->v < b->v ? -1 : 1;
  return a->id < b->id ? -1 : (a->id > b->id);
}

/* One draw from softmax(score) after the warpers; work (V ints), pairs
** (V). */
static int sample(double *score, int V, const relattn_gen_opts *o,
                  relattn_rng *rng, int *work, scored_id *pairs) {
  double mx = -INFINITY, sum = 0.0, u, acc = 0.0;
  int i, last = -1;
  if (o->temperature != 1.0)
    for (i = 0; i < V; i++) score[i] /= o->temperature;
  if (o->top_k > 0 && o->top_k < V) {
    /* every token below the k-th largest value goes (ties at it stay) */
    double kth;
    top_k_of(work, score, V, o->top_k);
    kth = score[work[o->top_k - 1]];
    for (i = 0; i < V; i++)
      if (score[i] < kth) score[i] = -INFINITY;
  }
  if (o->top_p < 1.0) {
    /* ascending: drop while the cumulative probability is <= 1 - top_p,
    ** never the most likely token */
    double m2 = -INFINITY, s2 = 0.0, cum = 0.0;
    for (i = 0; i < V; i++) {
      pairs[i].v = score[i];
      pairs[i].id = i;
      if (score[i] > m2) m2 = score[i];
    }
    qsort(pairs, (size_t)V, sizeof *pairs, cmp_asc);
    for (i = 0; i < V; i++) s2 += exp(score[i] - m2);
    for (i = 0; i < V - 1; i++) {
      cum += exp(pairs[i].v - m2) / s2;
      if (cum <= 1.0 - o->top_p) score[pairs[i].id] = -INFINITY;
      else break;
    }
  }
  for (i = 0; i < V; i++)
    if (score[i] > mx) mx = score[i];
  for (i = 0; i < V; i++) {
    score[i] = score[i] == -INFINITY ? 0.0 : exp(score[i] - mx);
    sum += score[i];
  }
  u = relattn_rng_uniform(rng) * sum;
  for (i = 0; i < V; i++) {
    if (score[i] <= 0.0) continue;
    last = i;
    acc += score[i];
    if (u < acc) return i;
  }
  return last; /* u within rounding of the sum */
}

/* ---- greedy and sampling ------------------------------------------------- */

/* The tokens a search continues, which its length, its n-gram rule and its
** hypotheses count: a decoder's input; an encoder-decoder's decoder start
** token alone (its input is the encoder's, given to relattn_dec_open), as
** Hugging Face's generate counts decoder_input_ids. */
static void prefix_of(const relattn_model *m, const int32_t *input,
                      int n_input, const int32_t **prefix, int *n_prefix,
                      int32_t *start) {
  if (relattn_config_is_s2s(&m->cfg)) {
    *start = m->cfg.dec_start;
    *prefix = start;
    *n_prefix = 1;
  } else {
    *prefix = input;
    *n_prefix = n_input;
  }
}

static int run_single(const relattn_model *m, const int32_t *src,
                      int n_src, const int32_t *input, int n_input, const relattn_gen_opts *o,
                      relattn_pool *pool, relattn_gen_result *out, char *err,
                      size_t errsz) {
  const int V = m->cfg.vocab_size, total = n_input + o->max_new_tokens;
  relattn_dec *d = NULL;
  relattn_rng rng;
  float *logits = relattn_alloc(sizeof(float) * (size_t)V);
  double *score = relattn_alloc(sizeof(double) * (size_t)V);
  int *work = relattn_alloc(sizeof(int) * (size_t)V);
  scored_id *pairs = relattn_alloc(sizeof(scored_id) * (size_t)V);
  int32_t *seq = relattn_alloc(sizeof(int32_t) * (size_t)total);
  int rc, i, tok;
  if (!logits || !score || !work || !pairs || !seq) {
    rc = relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                        "relattn_generate: out of memory");
    goto done;
  }
  memcpy(seq, input, sizeof(int32_t) * (size_t)n_input);
  relattn_rng_seed(&rng, o->seed);
  rc = relattn_dec_open(m, src, n_src, 1, total, pool, &d, logits, err,
                        errsz);
  out->ended = RELATTN_GEN_MAX;
  for (i = 0; rc == RELATTN_OK && i < o->max_new_tokens; i++) {
    const double lse = log_sum_exp(logits, V);
    int t;
    if (relattn_pool_poll(pool)) {
      rc = relattn_errorf(err, errsz, RELATTN_ERR_INTERRUPT, "interrupted");
      break;
    }
    if (!isfinite(lse)) {
      rc = relattn_errorf(err, errsz, RELATTN_ERR_FORMAT,
                          "relattn_generate: the model's logits at new token "
                          "%d are not finite (NaN or Inf): the weights are "
                          "too large for float32",
                          i);
      break;
    }
    for (t = 0; t < V; t++) score[t] = logits[t];
    ban_ngrams(score, seq, n_input + i, o->no_repeat_ngram_size);
    if (o->do_sample) {
      tok = sample(score, V, o, &rng, work, pairs);
    } else {
      tok = 0;
      for (t = 1; t < V; t++)
        if (score[t] > score[tok]) tok = t;
    }
    seq[n_input + i] = tok;
    out->ids[i] = tok;
    out->logprob[i] = (float)((double)logits[tok] - lse);
    out->n = i + 1;
    if (is_eos(o, tok)) {
      out->ended = RELATTN_GEN_EOS;
      break;
    }
    if (o->stop && o->stop(o->stop_ctx, out->ids, out->n)) {
      out->ended = RELATTN_GEN_STOP;
      break;
    }
    if (i + 1 < o->max_new_tokens)
      rc = relattn_dec_step(d, NULL, &tok, logits, err, errsz);
  }
done:
  relattn_dec_close(d);
  relattn_free(logits);
  relattn_free(score);
  relattn_free(work);
  relattn_free(pairs);
  relattn_free(seq);
  return rc;
}

/* ---- beam search --------------------------------------------------------- */

/* A finished hypothesis: its new tokens (the eos that ended it last, when
** one did) and score. */
typedef struct hyp {
  double score;
  int n;          /* new tokens, eos included */
  int32_t *ids;   /* (max_new) */
  float *lp;      /* (max_new) */
} hyp;

typedef struct beam_state {
  int K, max_new, n_input, n_hyps;
  double worst;
  hyp *hyps;      /* (K + 1): BeamHypotheses.beams, in its list order */
  double lp_pow_max; /* max_length^length_penalty, for "never" */
} beam_state;

/* BeamHypotheses.add: the new tokens ids (n, eos included or not), the
** hypothesis length len for the penalty. */
static void hyp_add(beam_state *s, const relattn_gen_opts *o,
                    const int32_t *ids, const float *lp, int n, int len,
                    double sum_logprobs) {
  const double score = sum_logprobs / pow((double)len, o->length_penalty);
  hyp *h;
  int i, worst_i, second_i;
  if (!(s->n_hyps < s->K || score > s->worst)) return;
  h = &s->hyps[s->n_hyps++];
  h->score = score;
  h->n = n;
  memcpy(h->ids, ids, sizeof(int32_t) * (size_t)n);
  memcpy(h->lp, lp, sizeof(float) * (size_t)n);
  if (s->n_hyps > s->K) {
    /* sorted((score, index)): the lowest goes (the earlier on a tie); the
    ** next lowest is the new worst */
    worst_i = 0;
    for (i = 1; i < s->n_hyps; i++)
      if (s->hyps[i].score < s->hyps[worst_i].score) worst_i = i;
    second_i = -1;
    for (i = 0; i < s->n_hyps; i++)
      if (i != worst_i &&
          (second_i < 0 || s->hyps[i].score < s->hyps[second_i].score))
        second_i = i;
    s->worst = s->hyps[second_i].score;
    {
      /* del beams[worst_i]: the rest keep their order; its buffers go last */
      hyp gone = s->hyps[worst_i];
      memmove(&s->hyps[worst_i], &s->hyps[worst_i + 1],
              sizeof(hyp) * (size_t)(s->n_hyps - worst_i - 1));
      s->hyps[--s->n_hyps] = gone;
    }
  } else if (score < s->worst) {
    s->worst = score;
  }
}

/* BeamHypotheses.is_done. */
static int hyp_done(const beam_state *s, const relattn_gen_opts *o,
                    double best_sum, int cur_len) {
  double high;
  if (s->n_hyps < s->K) return 0;
  if (o->early_stopping == RELATTN_EARLY_TRUE) return 1;
  if (o->early_stopping == RELATTN_EARLY_NEVER && o->length_penalty > 0.0)
    high = best_sum / s->lp_pow_max;
  else
    high = best_sum / pow((double)cur_len, o->length_penalty);
  return s->worst >= high;
}

static int run_beams(const relattn_model *m, const int32_t *src,
                     int n_src, const int32_t *input, int n_input, const relattn_gen_opts *o,
                     relattn_pool *pool, relattn_gen_result *out, char *err,
                     size_t errsz) {
  const int V = m->cfg.vocab_size, K = o->num_beams, T = o->max_new_tokens;
  const int total = n_input + T;
  const int C = (o->n_eos + 1 > 2 ? o->n_eos + 1 : 2) * K;
  relattn_dec *d = NULL;
  beam_state s;
  float *logits = NULL, *lp = NULL, *lp2 = NULL, *hmem_lp = NULL;
  float *newlp = NULL, *hlp = NULL;
  int32_t *hseq = NULL;
  double *flat = NULL, *bscore = NULL, *nscore = NULL, *row = NULL;
  int32_t *seq = NULL, *seq2 = NULL, *hmem = NULL;
  int *cand = NULL, *parent = NULL, *token = NULL;
  size_t cells;
  int rc = RELATTN_OK, step, b, t, i, done = 0;

  memset(&s, 0, sizeof s);
  s.K = K;
  s.max_new = T;
  s.n_input = n_input;
  s.worst = 1e9;
  s.lp_pow_max = pow((double)total, o->length_penalty);
  if (!relattn_mul_ok((size_t)K, (size_t)V, &cells)) goto nomem;
  logits = relattn_alloc(sizeof(float) * cells);
  flat = relattn_alloc(sizeof(double) * cells);
  row = relattn_alloc(sizeof(double) * (size_t)V);
  bscore = relattn_alloc(sizeof(double) * (size_t)K);
  nscore = relattn_alloc(sizeof(double) * (size_t)K);
  seq = relattn_alloc(sizeof(int32_t) * (size_t)K * total);
  seq2 = relattn_alloc(sizeof(int32_t) * (size_t)K * total);
  lp = relattn_alloc(sizeof(float) * (size_t)K * (T + 1));
  lp2 = relattn_alloc(sizeof(float) * (size_t)K * (T + 1));
  cand = relattn_alloc(sizeof(int) * (size_t)C);
  parent = relattn_alloc(sizeof(int) * (size_t)K);
  token = relattn_alloc(sizeof(int) * (size_t)K);
  s.hyps = relattn_alloc(sizeof(hyp) * (size_t)(K + 1));
  hmem = relattn_alloc(sizeof(int32_t) * (size_t)(K + 1) * (T + 1));
  hmem_lp = relattn_alloc(sizeof(float) * (size_t)(K + 1) * (T + 1));
  newlp = relattn_alloc(sizeof(float) * (size_t)K);
  hlp = relattn_alloc(sizeof(float) * (size_t)(T + 1));
  hseq = relattn_alloc(sizeof(int32_t) * (size_t)(T + 1));
  if (!newlp || !hlp || !hseq || !logits || !flat || !row || !bscore ||
      !nscore || !seq || !seq2 ||
      !lp || !lp2 || !cand || !parent || !token || !s.hyps || !hmem ||
      !hmem_lp)
    goto nomem;
  for (i = 0; i <= K; i++) {
    s.hyps[i].ids = hmem + (size_t)i * (T + 1);
    s.hyps[i].lp = hmem_lp + (size_t)i * (T + 1);
  }
  for (b = 0; b < K; b++) {
    memcpy(seq + (size_t)b * total, input, sizeof(int32_t) * (size_t)n_input);
    bscore[b] = b == 0 ? 0.0 : -1e9; /* the first step reads beam 0 alone */
  }
  rc = relattn_dec_open(m, src, n_src, K, total, pool, &d, logits, err,
                        errsz);
  if (rc != RELATTN_OK) goto end;
  for (b = 1; b < K; b++)
    memcpy(logits + (size_t)b * V, logits, sizeof(float) * (size_t)V);

  for (step = 0; step < T && !done; step++) {
    const int cur_len = n_input + step;
    int k = 0, rank;
    if (relattn_pool_poll(pool)) {
      rc = relattn_errorf(err, errsz, RELATTN_ERR_INTERRUPT, "interrupted");
      goto end;
    }
    for (b = 0; b < K; b++) {
      const float *z = logits + (size_t)b * V;
      const double lse = log_sum_exp(z, V);
      if (!isfinite(lse)) {
        rc = relattn_errorf(err, errsz, RELATTN_ERR_FORMAT,
                            "relattn_generate: the model's logits at new "
                            "token %d are not finite (NaN or Inf): the "
                            "weights are too large for float32",
                            step);
        goto end;
      }
      for (t = 0; t < V; t++) row[t] = (double)z[t] - lse;
      ban_ngrams(row, seq + (size_t)b * total, cur_len,
                 o->no_repeat_ngram_size);
      for (t = 0; t < V; t++) flat[(size_t)b * V + t] = row[t] + bscore[b];
    }
    top_k_of(cand, flat, (int)cells, C);
    /* BeamSearchScorer.process */
    for (rank = 0; rank < C && k < K; rank++) {
      const int src = cand[rank] / V, tok = cand[rank] % V;
      const double sc = flat[cand[rank]];
      const float tlp =
          (float)((double)logits[(size_t)src * V + tok] -
                  log_sum_exp(logits + (size_t)src * V, V));
      if (is_eos(o, tok)) {
        if (rank >= K) continue;
        /* the beam's new tokens, then the eos; its length without it */
        memcpy(hseq, seq + (size_t)src * total + n_input,
               sizeof(int32_t) * (size_t)step);
        memcpy(hlp, lp + (size_t)src * (T + 1), sizeof(float) * (size_t)step);
        hseq[step] = tok;
        hlp[step] = tlp;
        hyp_add(&s, o, hseq, hlp, step + 1, cur_len, sc);
        continue;
      }
      nscore[k] = sc;
      parent[k] = src;
      token[k] = tok;
      newlp[k] = tlp;
      k++;
    }
    if (k < K) {
      rc = relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: more than %d of the best %d "
                          "candidates are eos",
                          K, C);
      goto end;
    }
    /* the beams' histories by parent, then the new token */
    for (b = 0; b < K; b++) {
      memcpy(seq2 + (size_t)b * total, seq + (size_t)parent[b] * total,
             sizeof(int32_t) * (size_t)cur_len);
      seq2[(size_t)b * total + cur_len] = token[b];
      memcpy(lp2 + (size_t)b * (T + 1), lp + (size_t)parent[b] * (T + 1),
             sizeof(float) * (size_t)step);
      lp2[(size_t)b * (T + 1) + step] = newlp[b];
    }
    {
      int32_t *ts = seq;
      float *tl = lp;
      seq = seq2, seq2 = ts;
      lp = lp2, lp2 = tl;
    }
    /* is_done with the best of all candidates' scores, at cur_len */
    {
      double best = flat[cand[0]];
      for (b = 0; b < K; b++) bscore[b] = nscore[b];
      if (hyp_done(&s, o, best, cur_len)) done = 1;
    }
    if (!done && step + 1 < T) {
      rc = relattn_dec_step(d, parent, token, logits, err, errsz);
      if (rc != RELATTN_OK) goto end;
    }
  }
  if (!done)
    /* finalize: every open beam is a hypothesis, of its full length */
    for (b = 0; b < K; b++)
      hyp_add(&s, o, seq + (size_t)b * total + n_input,
              lp + (size_t)b * (T + 1), step, n_input + step, bscore[b]);
  {
    /* sorted(beams, key=score).pop(): the highest, the later on a tie */
    int best = 0;
    for (i = 1; i < s.n_hyps; i++)
      if (s.hyps[i].score >= s.hyps[best].score) best = i;
    out->n = s.hyps[best].n;
    memcpy(out->ids, s.hyps[best].ids, sizeof(int32_t) * (size_t)out->n);
    memcpy(out->logprob, s.hyps[best].lp, sizeof(float) * (size_t)out->n);
    out->score = s.hyps[best].score;
    out->ended = out->n > 0 && is_eos(o, out->ids[out->n - 1])
                     ? RELATTN_GEN_EOS
                     : RELATTN_GEN_MAX;
  }
  goto end;
nomem:
  rc = relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                      "relattn_generate: out of memory");
end:
  relattn_dec_close(d);
  relattn_free(logits);
  relattn_free(flat);
  relattn_free(row);
  relattn_free(bscore);
  relattn_free(nscore);
  relattn_free(seq);
  relattn_free(seq2);
  relattn_free(lp);
  relattn_free(lp2);
  relattn_free(cand);
  relattn_free(parent);
  relattn_free(token);
  relattn_free(s.hyps);
  relattn_free(hmem);
  relattn_free(hmem_lp);
  relattn_free(newlp);
  relattn_free(hlp);
  relattn_free(hseq);
  return rc;
}

/* ---- the entry ----------------------------------------------------------- */

static int check_opts(const relattn_model *m, int n_input,
                      const relattn_gen_opts *o, char *err, size_t errsz) {
  int i;
  if (n_input < 1)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: the input is empty");
  if (o->max_new_tokens < 0 || o->max_new_tokens > INT32_MAX - n_input - 1)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: max_new_tokens %d out of range",
                          o->max_new_tokens);
  if (o->num_beams < 1 || (o->num_beams > 1 && o->do_sample))
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: num_beams %d with%s sampling",
                          o->num_beams, o->do_sample ? "" : "out");
  if (!(o->temperature > 0.0) || !(o->top_p > 0.0 && o->top_p <= 1.0) ||
      o->top_k < 0 || o->no_repeat_ngram_size < 0 ||
      o->n_eos < 0 || o->n_eos > RELATTN_GEN_MAX_EOS ||
      !isfinite(o->length_penalty))
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: an option out of range");
  for (i = 0; i < o->n_eos; i++)
    if (o->eos[i] < 0 || o->eos[i] >= m->cfg.vocab_size)
      return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                            "relattn_generate: eos %d is not below "
                            "vocab_size %d",
                            o->eos[i], m->cfg.vocab_size);
  return RELATTN_OK;
}

size_t relattn_generate_memory(const relattn_model *m, int n_input,
                               const relattn_gen_opts *o) {
  const size_t V = m ? (size_t)m->cfg.vocab_size : 0;
  const size_t K = o ? (size_t)o->num_beams : 0;
  size_t total, dec, search, t;
  if (!m || !o || n_input < 1 || o->max_new_tokens < 0 || K < 1)
    return SIZE_MAX;
  {
    int32_t start;
    const int32_t *prefix;
    int n_prefix;
    prefix_of(m, NULL, n_input, &prefix, &n_prefix, &start);
    total = (size_t)n_prefix + (size_t)o->max_new_tokens;
  }
  if (total > INT32_MAX) return SIZE_MAX;
  dec = relattn_dec_memory(m, n_input, (int)K, (int)total);
  if (dec == SIZE_MAX) return SIZE_MAX;
  /* logits (K V floats), scores (K V + V doubles), the beams' tokens and
  ** log-probs (twice), the hypotheses', the result's */
  if (!relattn_mul_ok(K, V, &search) ||
      !relattn_mul_ok(search, 3 * sizeof(double), &search) ||
      !relattn_mul_ok(K + 1, total + 1, &t) ||
      !relattn_mul_ok(t, 4 * (sizeof(int32_t) + sizeof(float)), &t) ||
      !relattn_add_ok(search, t, &search) ||
      !relattn_add_ok(search, V * (2 * sizeof(double) + 2 * sizeof(int)), &search) ||
      !relattn_add_ok(dec, search, &dec))
    return SIZE_MAX;
  return dec;
}

int relattn_generate(const relattn_model *m, const int32_t *input,
                     int n_input, const relattn_gen_opts *o,
                     relattn_pool *pool, relattn_gen_result *out, char *err,
                     size_t errsz) {
  int rc, n_prefix;
  int32_t start;
  const int32_t *prefix;
  const size_t n = o ? (size_t)o->max_new_tokens + 1 : 1;
  memset(out, 0, sizeof *out);
  if (!m || !input || !o || !pool)
    return relattn_errorf(err, errsz, RELATTN_ERR_ARG,
                          "relattn_generate: model, input, options and pool "
                          "required");
  rc = check_opts(m, n_input, o, err, errsz);
  if (rc != RELATTN_OK) return rc;
  out->ids = relattn_alloc(sizeof(int32_t) * n);
  out->logprob = relattn_alloc(sizeof(float) * n);
  if (!out->ids || !out->logprob) {
    relattn_gen_result_free(out);
    return relattn_errorf(err, errsz, RELATTN_ERR_NOMEM,
                          "relattn_generate: out of memory");
  }
  if (o->max_new_tokens == 0) return RELATTN_OK;
  prefix_of(m, input, n_input, &prefix, &n_prefix, &start);
  rc = o->num_beams > 1
           ? run_beams(m, input, n_input, prefix, n_prefix, o, pool, out, err,
                       errsz)
           : run_single(m, input, n_input, prefix, n_prefix, o, pool, out,
                        err, errsz);
  if (rc != RELATTN_OK) relattn_gen_result_free(out);
  return rc;
}

void relattn_gen_result_free(relattn_gen_result *r) {
  if (!r) return;
  relattn_free(r->ids);
  relattn_free(r->logprob);
  r->ids = NULL;
  r->logprob = NULL;
  r->n = 0;
}

/* ---- the text of new tokens ---------------------------------------------- */

/* Length of the UTF-8 sequence a lead byte starts (0: not a lead byte). */
static int utf8_len(uint8_t c) {
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return 2;
  if (c >= 0xe0 && c <= 0xef) return 3;
  if (c >= 0xf0 && c <= 0xf4) return 4;
  return 0;
}

/* How many bytes from s (n of them) make the start of a character
** (Unicode's "maximal subpart", as Python's decode with errors="replace"
** counts them): the whole character when it is valid. *whole says which. */
static size_t utf8_part(const uint8_t *s, size_t n, int *whole) {
  const int len = utf8_len(s[0]);
  uint8_t lo = 0x80, hi = 0xbf;
  size_t j = 1;
  *whole = len == 1;
  if (len <= 1) return 1;
  /* no overlong forms, no surrogates, nothing past U+10FFFF */
  if (s[0] == 0xe0) lo = 0xa0;
  if (s[0] == 0xed) hi = 0x9f;
  if (s[0] == 0xf0) lo = 0x90;
  if (s[0] == 0xf4) hi = 0x8f;
  if (n > 1 && s[1] >= lo && s[1] <= hi) {
    j = 2;
    while (j < (size_t)len && j < n && (s[j] & 0xc0) == 0x80) j++;
  }
  *whole = j == (size_t)len;
  return j;
}

size_t relattn_utf8_complete(const uint8_t *s, size_t n) {
  size_t i = n, back;
  /* a lead byte within the last 3 whose character runs past the end, its
  ** continuation bytes so far being good, is cut */
  for (back = 0; back < 4 && back < n; back++) {
    int len;
    i = n - 1 - back;
    if ((s[i] & 0xc0) == 0x80) continue;
    len = utf8_len(s[i]);
    if (len > 1 && (size_t)len > back + 1) {
      size_t j;
      for (j = i + 1; j < n; j++)
        if ((s[j] & 0xc0) != 0x80) return n;
      return i;
    }
    return n;
  }
  return n;
}

size_t relattn_utf8_repair(uint8_t *out, const uint8_t *s, size_t n) {
  size_t i = 0, o = 0;
  while (i < n) {
    int whole;
    const size_t j = utf8_part(s + i, n - i, &whole);
    if (whole) {
      if (out) memcpy(out + o, s + i, j);
      o += j;
    } else {
      /* one U+FFFD for each maximal part that starts no valid character */
      if (out) memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
    }
    i += j;
  }
  return o;
}
