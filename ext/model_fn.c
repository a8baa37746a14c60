/*
** model_fn.c: the model's forward pass in SQL, one value per call, and the
** model call every function that runs a model makes (relattn_call_init:
** the model held, the tokens decoded, the memory checked, the pass run).
** The table-valued functions are in ext/model_tvf.c.
**
**   relattn_score(model, tokens)       -> REAL  sum of ln p(token | prefix)
**   relattn_perplexity(model, tokens)  -> REAL  exp(-score / scored tokens)
**   relattn_embed(model, tokens [, pooling]) -> BLOB  float32 [d_model], subtype
**       223; pooling 'mean' (default), 'cls' (final row 0), 'pooler'; a
**       model with sentence-transformers modules (config "sentence") gives
**       their vector by default (src/sentence.c)
**   relattn_classify(model, tokens)    -> TEXT  a classifier's best label
**   relattn_score(model, target, source)      -> REAL  an encoder-decoder's
**   relattn_perplexity(model, target, source) -> REAL  teacher-forced score
**       of target given source (T5ForConditionalGeneration's labels)
**   relattn_classify(model, text_a, text_b) -> TEXT  the same on a pair,
**       [CLS] text_a [SEP] text_b [SEP] (a cross-encoder, an NLI model)
**
** Example:
**   SELECT id, relattn_perplexity('tiny', body) FROM docs ORDER BY 2;
**   SELECT id, relattn_classify('nli', body) FROM docs;
**   SELECT relattn_classify('nli', 'A cat sat.', 'An animal sat.');
**
** tokens is a BLOB of little-endian int32 ids or TEXT for the model's
** tokenizer. The model's input is [bos] + tokens + [append], each special
** id when the tokenizer has it (relattn_model_input). With bos every token
** is scored; without, tokens 1..n-1 are, and the appended token last
** (docs/reference.md). The embedding is the mean of the final hidden states
** over every input row, bos and the appended one included, as
** sentence-transformers' mean over the attention mask. A NULL tokens
** argument gives NULL (no rows).
** Encoder models embed and show attention maps; they cannot score. A model
** answers what its head has (docs/reference.md, Heads): lm scores, mlm fills
** [MASK], classifier classifies; any other call says it has no such head.
*/
#include "ext.h"
SQLITE_EXTENSION_INIT3

#include <math.h>
#include <string.h>

#include "functions.h"

#define KEEP_SCRATCH ((size_t)64 << 20) /* bytes kept in the pool after a call */

void relattn_call_clear(relattn_call *mc) {
  if (mc->m) relattn_store_release(mc->conn, mc->m);
  sqlite3_free(mc->input);
  memset(mc, 0, sizeof *mc);
}

/* The message when model m (named name) cannot serve need, else NULL. */
static char *needMsg(const relattn_model *m, const char *fn,
                     const unsigned char *name, int need) {
  const relattn_config *c = &m->cfg;
  char e[RELATTN_ECHO_BUF];
  const char *head = relattn_head_name(c->head);
  relattn_echo(e, name, -1);
  if (need == RELATTN_NEED_CLASSIFIER && c->head != RELATTN_HEAD_CLASSIFIER)
    return sqlite3_mprintf("%s: model '%s' has no classifier head (its head "
                           "is '%s')",
                           fn, e, head);
  if (need == RELATTN_NEED_GEN) {
    if (relattn_config_is_s2s(c)) return NULL;
    if (c->arch != RELATTN_DECODER)
      return sqlite3_mprintf("%s: model '%s' is an encoder; only decoder and "
                             "encoder-decoder models generate text",
                             fn, e);
    if (c->head != RELATTN_HEAD_LM)
      return sqlite3_mprintf("%s: model '%s' has no LM head (its head is "
                             "'%s')",
                             fn, e, head);
    return NULL;
  }
  if (need == RELATTN_NEED_FILL && c->head == RELATTN_HEAD_MLM) {
    if (c->mask < 0)
      return sqlite3_mprintf("%s: model '%s' has no tokenizer.mask: no "
                             "[MASK] positions to fill",
                             fn, e);
    return NULL;
  }
  if ((need == RELATTN_NEED_LM || need == RELATTN_NEED_FILL) &&
      relattn_config_is_s2s(c)) {
    /* the functions with a 3-argument form say how to call it */
    if (strcmp(fn, "relattn_score") == 0 ||
        strcmp(fn, "relattn_perplexity") == 0 ||
        strcmp(fn, "relattn_logprobs") == 0)
      return sqlite3_mprintf("%s: model '%s' is an encoder-decoder: give the "
                             "source as the third argument, %s(model, "
                             "target, source)",
                             fn, e, fn);
    return sqlite3_mprintf("%s: model '%s' is an encoder-decoder; only "
                           "decoder models give next-token probabilities "
                           "here",
                           fn, e);
  }
  if ((need == RELATTN_NEED_LM || need == RELATTN_NEED_FILL) &&
      c->arch != RELATTN_DECODER)
    return sqlite3_mprintf("%s: model '%s' is an encoder; only decoder "
                           "models give next-token probabilities",
                           fn, e);
  if ((need == RELATTN_NEED_LM || need == RELATTN_NEED_FILL) &&
      c->head != RELATTN_HEAD_LM)
    return sqlite3_mprintf("%s: model '%s' has no LM head (its head is '%s')",
                           fn, e, head);
  return NULL;
}

/* Loads the model and decodes tokens into mc (relattn_model_input: the
** rules every model function shares). Returns SQLITE_OK, or an error code
** with *pzErr set (sqlite3_malloc'd). A NULL tokens argument gives
** SQLITE_OK with mc->n == 0: the caller answers NULL. */
int relattn_call_init(relattn_conn *conn, const char *fn, sqlite3_value *model,
                      sqlite3_value *tokens, int need, relattn_call *mc,
                      char **pzErr) {
  return relattn_call_init_pair(conn, fn, model, tokens, NULL, need, 0, mc,
                                pzErr);
}

/* Both: one argument named arg, or a pair. */
static int callInit(relattn_conn *conn, const char *fn, sqlite3_value *model,
                    sqlite3_value *tokens, const char *arg,
                    sqlite3_value *text_b, int need, int truncate_a,
                    relattn_call *mc, char **pzErr);

int relattn_call_init_named(relattn_conn *conn, const char *fn,
                            sqlite3_value *model, sqlite3_value *text,
                            const char *arg, int need, relattn_call *mc,
                            char **pzErr) {
  return callInit(conn, fn, model, text, arg, NULL, need, 0, mc, pzErr);
}

int relattn_call_init_pair(relattn_conn *conn, const char *fn,
                           sqlite3_value *model, sqlite3_value *tokens,
                           sqlite3_value *text_b, int need, int truncate_a,
                           relattn_call *mc, char **pzErr) {
  return callInit(conn, fn, model, tokens, "tokens", text_b, need, truncate_a,
                  mc, pzErr);
}

static int callInit(relattn_conn *conn, const char *fn, sqlite3_value *model,
                    sqlite3_value *tokens, const char *arg,
                    sqlite3_value *text_b, int need, int truncate_a,
                    relattn_call *mc, char **pzErr) {
  relattn_input in;
  int rc;
  memset(mc, 0, sizeof *mc);
  mc->conn = conn;
  *pzErr = NULL;
  if (sqlite3_value_type(model) != SQLITE_TEXT) {
    *pzErr = relattn_bad_model_msg(fn);
    return SQLITE_ERROR;
  }
  if (sqlite3_value_type(tokens) == SQLITE_NULL ||
      (text_b && sqlite3_value_type(text_b) == SQLITE_NULL))
    return SQLITE_OK;
  mc->m = relattn_store_acquire(conn, (const char *)sqlite3_value_text(model),
                                fn, pzErr);
  if (!mc->m) {
    if (!*pzErr) *pzErr = sqlite3_mprintf("%s: out of memory", fn);
    return SQLITE_ERROR;
  }
  *pzErr = needMsg(mc->m, fn, sqlite3_value_text(model), need);
  if (*pzErr) {
    relattn_call_clear(mc);
    return SQLITE_ERROR;
  }
  /* a pair: relattn_classify's text_a and text_b, or relattn_zero_shot's
  ** text and hypothesis, the one call that cuts its text to fit */
  if (text_b)
    rc = relattn_model_pair_input(conn, mc->m, tokens, text_b, fn,
                                  (const char *)sqlite3_value_text(model),
                                  truncate_a ? "text" : "text_a",
                                  truncate_a ? "hypothesis" : "text_b",
                                  truncate_a, &in, pzErr);
  else
    rc = relattn_model_input(conn, mc->m, tokens, fn, arg, &in, pzErr);
  if (rc != SQLITE_OK) {
    relattn_call_clear(mc);
    return rc;
  }
  mc->input = in.ids;
  mc->n = in.n;
  mc->bos = in.bos;
  return SQLITE_OK;
}

/* Checks what a call will allocate: the forward pass's scratch for the
** input on every worker of the connection's pool, plus extra bytes of
** results, against relattn_max_memory(). */
int relattn_call_memory(relattn_call *mc, const char *fn, sqlite3_uint64 extra,
                        char **pzErr) {
  size_t need = relattn_forward_memory(mc->m, mc->n, 1, mc->conn->n_threads);
  if (extra > SIZE_MAX || need == 0 ||
      !relattn_add_ok(need, (size_t)extra, &need))
    need = SIZE_MAX;
  *pzErr = relattn_memory_check(mc->conn, fn, need);
  return *pzErr ? SQLITE_TOOBIG : SQLITE_OK;
}

/* Runs the forward pass of f (tokens and n filled in here) on the
** connection's pool, with OpenBLAS single-threaded for the duration. */
int relattn_call_run(relattn_call *mc, const char *fn, relattn_fwd *f,
                     char **pzErr) {
  relattn_pool *pool = relattn_conn_pool(mc->conn);
  relattn_watch watch;
  char err[256] = "";
  int rc, blas;
  *pzErr = NULL;
  if (!pool) return SQLITE_NOMEM;
  f->tokens = mc->input;
  f->n = mc->n;
  blas = relattn_blas_single();
  relattn_watch_begin(&watch, mc->conn, pool); /* sqlite3_interrupt stops it */
  rc = relattn_forward(mc->m, f, pool, err, sizeof err);
  relattn_watch_end(&watch);
  if (rc == RELATTN_OK)
    rc = relattn_forward_check_finite(f, &mc->m->cfg, err, sizeof err);
  relattn_blas_restore(blas);
  /* The scratch stays for the next call, unless a rare long sequence made it
  ** big: then the connection should not hold that memory until it closes. */
  if (relattn_forward_memory(mc->m, mc->n, 1, 1) > KEEP_SCRATCH)
    relattn_pool_trim(pool, KEEP_SCRATCH);
  if (rc == RELATTN_OK) return SQLITE_OK;
  *pzErr = sqlite3_mprintf("%s: %s", fn, err);
  return relattn_status_code(rc);
}

/* ---- an encoder-decoder's calls ------------------------------------------- */

char *relattn_s2s_refusal(const relattn_model *m, const char *fn,
                          const unsigned char *name) {
  char e[RELATTN_ECHO_BUF];
  (void)m;
  return sqlite3_mprintf("%s: model '%s' is not an encoder-decoder; a source "
                         "(the third argument) is for encoder-decoder "
                         "models, such as T5ForConditionalGeneration",
                         fn, relattn_echo(e, name, -1));
}

void relattn_s2s_clear(relattn_s2s_call *sc) {
  relattn_call_clear(&sc->mc);
  sqlite3_free(sc->src);
  sc->src = NULL;
  sc->n_src = 0;
}

int relattn_s2s_init(relattn_conn *conn, const char *fn, sqlite3_value *model,
                     sqlite3_value *target, sqlite3_value *source,
                     relattn_s2s_call *sc, char **pzErr) {
  relattn_input tgt, src;
  int rc;
  memset(sc, 0, sizeof *sc);
  sc->mc.conn = conn;
  *pzErr = NULL;
  if (sqlite3_value_type(model) != SQLITE_TEXT) {
    *pzErr = relattn_bad_model_msg(fn);
    return SQLITE_ERROR;
  }
  /* NULL target or source: NULL, without loading the model (as the
  ** 2-argument forms answer NULL tokens) */
  if (sqlite3_value_type(target) == SQLITE_NULL ||
      sqlite3_value_type(source) == SQLITE_NULL)
    return SQLITE_OK;
  sc->mc.m = relattn_store_acquire(conn, (const char *)sqlite3_value_text(model),
                                   fn, pzErr);
  if (!sc->mc.m) {
    if (!*pzErr) *pzErr = sqlite3_mprintf("%s: out of memory", fn);
    return SQLITE_ERROR;
  }
  if (!relattn_config_is_s2s(&sc->mc.m->cfg)) {
    *pzErr = relattn_s2s_refusal(sc->mc.m, fn, sqlite3_value_text(model));
    relattn_s2s_clear(sc);
    return SQLITE_ERROR;
  }
  rc = relattn_model_input(conn, sc->mc.m, target, fn, "target", &tgt, pzErr);
  if (rc != SQLITE_OK) {
    relattn_s2s_clear(sc);
    return rc;
  }
  sc->mc.input = tgt.ids;
  sc->mc.n = tgt.n;
  rc = relattn_model_input(conn, sc->mc.m, source, fn, "source", &src, pzErr);
  if (rc != SQLITE_OK) {
    relattn_s2s_clear(sc);
    return rc;
  }
  sc->src = src.ids;
  sc->n_src = src.n;
  return SQLITE_OK;
}

int relattn_s2s_run(relattn_s2s_call *sc, const char *fn, relattn_s2s_req *r,
                    char **pzErr) {
  relattn_call *mc = &sc->mc;
  relattn_pool *pool = relattn_conn_pool(mc->conn);
  relattn_watch watch;
  char err[256] = "";
  size_t need = relattn_forward_memory(mc->m, sc->n_src, 1,
                                       mc->conn->n_threads);
  size_t dec = relattn_s2s_forward_memory(mc->m, sc->n_src, mc->n);
  int rc, blas;
  *pzErr = NULL;
  if (!need || !dec || !relattn_add_ok(need, dec, &need)) need = SIZE_MAX;
  *pzErr = relattn_memory_check(mc->conn, fn, need);
  if (*pzErr) return SQLITE_TOOBIG;
  if (!pool) return SQLITE_NOMEM;
  r->src = sc->src;
  r->n_src = sc->n_src;
  r->tgt = mc->input;
  r->n_tgt = mc->n;
  blas = relattn_blas_single();
  relattn_watch_begin(&watch, mc->conn, pool);
  rc = relattn_s2s_forward(mc->m, r, pool, err, sizeof err);
  relattn_watch_end(&watch);
  relattn_blas_restore(blas);
  if (relattn_forward_memory(mc->m, sc->n_src, 1, 1) > KEEP_SCRATCH)
    relattn_pool_trim(pool, KEEP_SCRATCH);
  if (rc == RELATTN_OK && r->logprob &&
      relattn_find_nonfinite(r->logprob, RELATTN_F32, (size_t)mc->n) <
          (size_t)mc->n) {
    *pzErr = sqlite3_mprintf("%s: the model's log-probability %s", fn,
                             "is not finite (NaN or Inf): the weights are "
                             "too large for float32");
    return SQLITE_ERROR;
  }
  if (rc == RELATTN_OK) return SQLITE_OK;
  *pzErr = sqlite3_mprintf("%s: %s", fn, err);
  return relattn_status_code(rc);
}

static void resultError(sqlite3_context *ctx, int rc, char *zErr) {
  if (zErr || rc == SQLITE_NOMEM)
    relattn_result_error(ctx, rc, zErr);
  else
    sqlite3_result_error_code(ctx, rc);
}

/* ---- relattn_score, relattn_perplexity ------------------------------------ */

/* Sum of the scored tokens' log-probabilities into *score, their count into
** *scored. Returns 0 after setting a result (NULL or an error). */
/* The 3-argument form: target given source (an encoder-decoder). */
static int scoreS2s(sqlite3_context *ctx, const char *fn, sqlite3_value **argv,
                    double *score, int *scored) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  relattn_s2s_call sc;
  relattn_s2s_req r;
  char *zErr = NULL;
  double sum = 0;
  int rc, i;
  rc = relattn_s2s_init(conn, fn, argv[0], argv[1], argv[2], &sc, &zErr);
  if (rc != SQLITE_OK) {
    resultError(ctx, rc, zErr);
    return 0;
  }
  if (!sc.src) {
    relattn_s2s_clear(&sc);
    sqlite3_result_null(ctx);
    return 0;
  }
  memset(&r, 0, sizeof r);
  r.logprob = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)sc.mc.n);
  if (!r.logprob) {
    relattn_s2s_clear(&sc);
    sqlite3_result_error_nomem(ctx);
    return 0;
  }
  rc = relattn_s2s_run(&sc, fn, &r, &zErr);
  if (rc == SQLITE_OK)
    for (i = 0; i < sc.mc.n; i++) sum += r.logprob[i];
  *score = sum;
  *scored = sc.mc.n;
  sqlite3_free(r.logprob);
  relattn_s2s_clear(&sc);
  if (rc != SQLITE_OK) {
    resultError(ctx, rc, zErr);
    return 0;
  }
  return 1;
}

static int scoreCall(sqlite3_context *ctx, const char *fn, int argc,
                     sqlite3_value **argv, double *score, int *scored) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  relattn_call mc;
  relattn_fwd f;
  float *lp;
  char *zErr = NULL;
  double sum = 0;
  int rc, i;
  if (argc == 3) return scoreS2s(ctx, fn, argv, score, scored);
  rc = relattn_call_init(conn, fn, argv[0], argv[1], 1, &mc, &zErr);
  if (rc != SQLITE_OK) {
    resultError(ctx, rc, zErr);
    return 0;
  }
  if (mc.n == 0) {
    relattn_call_clear(&mc);
    sqlite3_result_null(ctx);
    return 0;
  }
  /* every input position but the last predicts the next */
  rc =
      relattn_call_memory(&mc, fn, sizeof(float) * (sqlite3_uint64)mc.n, &zErr);
  lp = rc == SQLITE_OK ? sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)mc.n)
                       : NULL;
  if (rc != SQLITE_OK) {
    relattn_call_clear(&mc);
    resultError(ctx, rc, zErr);
    return 0;
  }
  if (!lp) {
    relattn_call_clear(&mc);
    sqlite3_result_error_nomem(ctx);
    return 0;
  }
  memset(&f, 0, sizeof f);
  f.logprob = lp;
  rc = relattn_call_run(&mc, fn, &f, &zErr);
  if (rc == SQLITE_OK)
    for (i = 0; i < mc.n - 1; i++) sum += lp[i];
  *score = sum;
  *scored = mc.n - 1;
  sqlite3_free(lp);
  relattn_call_clear(&mc);
  if (rc != SQLITE_OK) {
    resultError(ctx, rc, zErr);
    return 0;
  }
  return 1;
}

void relattn_score_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  double score;
  int scored;
  if (scoreCall(ctx, "relattn_score", argc, argv, &score, &scored))
    sqlite3_result_double(ctx, score);
}

void relattn_perplexity_func(sqlite3_context *ctx, int argc,
                            sqlite3_value **argv) {
  double score;
  int scored;
  if (!scoreCall(ctx, "relattn_perplexity", argc, argv, &score, &scored))
    return;
  /* one token and no bos: nothing is scored, perplexity is undefined */
  if (scored == 0)
    sqlite3_result_null(ctx);
  else
    sqlite3_result_double(ctx, exp(-score / scored));
}

/* ---- relattn_embed -------------------------------------------------------- */

/* relattn_embed's and relattn_scan's pooling argument: RELATTN_POOL_* from
** "mean", "cls", "pooler", or -1. */
int relattn_pooling_parse(const char *name) {
  static const char *const names[] = {"mean", "cls", "pooler"};
  int i;
  for (i = 0; name && i < 3; i++)
    if (strcmp(name, names[i]) == 0) return i;
  return -1;
}

char *relattn_pooling_check(const relattn_model *m, const char *fn,
                            const char *name, int pooling) {
  char e[RELATTN_ECHO_BUF];
  if (pooling != RELATTN_POOL_POOLER || m->cfg.pooler) return NULL;
  return sqlite3_mprintf("%s: model '%s' has no pooler (pooling 'pooler')",
                         fn, relattn_echo(e, name, -1));
}

int relattn_pooling_width(const relattn_model *m, int pooling) {
  if (pooling == RELATTN_POOL_DEFAULT && m->cfg.st)
    return relattn_sentence_dim(&m->cfg);
  return m->cfg.d_model;
}

/* mean: every row the model sees, as sentence-transformers' Pooling
** (pooling_mode_mean_tokens) averages over the attention mask, [CLS] and
** [SEP] included. The default: the model's sentence-transformers modules
** (src/sentence.c), or mean. */
void relattn_pooling_request(relattn_fwd *f, const relattn_model *m,
                             int pooling, float *out) {
  if (pooling == RELATTN_POOL_DEFAULT && m->cfg.st) f->sentence = out;
  else if (pooling == RELATTN_POOL_CLS) f->cls = out;
  else if (pooling == RELATTN_POOL_POOLER) f->pooled = out;
  else {
    f->embedding = out;
    f->mean_from = 0;
  }
  (void)m;
}

void relattn_embed_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  static const char fn[] = "relattn_embed";
  relattn_conn *conn = sqlite3_user_data(ctx);
  relattn_call mc;
  relattn_fwd f;
  float *emb;
  char *zErr = NULL;
  int rc, pooling = RELATTN_POOL_DEFAULT;
  sqlite3_uint64 bytes;
  if (argc > 2) {
    char e[RELATTN_ECHO_BUF];
    if (sqlite3_value_type(argv[2]) != SQLITE_TEXT) {
      relattn_result_errorf(ctx, "%s: pooling must be 'mean', 'cls' or "
                            "'pooler' (TEXT)", fn);
      return;
    }
    pooling = relattn_pooling_parse((const char *)sqlite3_value_text(argv[2]));
    if (pooling < 0) {
      relattn_result_errorf(ctx, "%s: pooling must be 'mean', 'cls' or "
                            "'pooler', not '%s'", fn,
                            relattn_echo(e, sqlite3_value_text(argv[2]), -1));
      return;
    }
  }
  rc = relattn_call_init(conn, fn, argv[0], argv[1], RELATTN_NEED_ANY, &mc,
                         &zErr);
  if (rc == SQLITE_OK && mc.n > 0 &&
      (zErr = relattn_pooling_check(mc.m, fn,
                                    (const char *)sqlite3_value_text(argv[0]),
                                    pooling)) != NULL) {
    relattn_call_clear(&mc);
    rc = SQLITE_ERROR;
  }
  if (rc != SQLITE_OK) {
    resultError(ctx, rc, zErr);
    return;
  }
  if (mc.n == 0) {
    relattn_call_clear(&mc);
    sqlite3_result_null(ctx);
    return;
  }
  bytes = sizeof(float) * (sqlite3_uint64)relattn_pooling_width(mc.m, pooling);
  rc = relattn_call_memory(&mc, fn, bytes, &zErr);
  if (rc != SQLITE_OK) {
    relattn_call_clear(&mc);
    resultError(ctx, rc, zErr);
    return;
  }
  emb = sqlite3_malloc64(bytes);
  if (!emb) {
    relattn_call_clear(&mc);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  memset(&f, 0, sizeof f);
  relattn_pooling_request(&f, mc.m, pooling, emb);
  rc = relattn_call_run(&mc, fn, &f, &zErr);
  relattn_call_clear(&mc);
  if (rc != SQLITE_OK) {
    sqlite3_free(emb);
    resultError(ctx, rc, zErr);
    return;
  }
  sqlite3_result_blob64(ctx, emb, bytes, sqlite3_free);
  sqlite3_result_subtype(ctx, RELATTN_SUBTYPE_VECTOR);
}

/* ---- relattn_classify ------------------------------------------------------ */

/* The classifier's logits of tokens into *logits (sqlite3_malloc'd,
** n_labels), mc left holding the model; NULL tokens give SQLITE_OK with
** mc->n == 0 and no logits. On an error mc is ended. */
int relattn_call_classify(relattn_conn *conn, const char *fn,
                          sqlite3_value *model, sqlite3_value *tokens,
                          sqlite3_value *text_b, relattn_call *mc,
                          float **logits, char **pzErr) {
  relattn_fwd f;
  sqlite3_uint64 bytes;
  int rc = relattn_call_init_pair(conn, fn, model, tokens, text_b,
                                  RELATTN_NEED_CLASSIFIER, 0, mc, pzErr);
  *logits = NULL;
  if (rc != SQLITE_OK || mc->n == 0) return rc;
  bytes = sizeof(float) * (sqlite3_uint64)mc->m->cfg.n_labels;
  rc = relattn_call_memory(mc, fn, bytes, pzErr);
  if (rc == SQLITE_OK && !(*logits = sqlite3_malloc64(bytes)))
    rc = SQLITE_NOMEM;
  if (rc == SQLITE_OK) {
    memset(&f, 0, sizeof f);
    f.logits = *logits;
    rc = relattn_call_run(mc, fn, &f, pzErr);
  }
  if (rc != SQLITE_OK) {
    sqlite3_free(*logits);
    *logits = NULL;
    relattn_call_clear(mc);
  }
  return rc;
}

void relattn_classify_func(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv) {
  static const char fn[] = "relattn_classify";
  relattn_call mc;
  float *logits;
  char *zErr = NULL;
  int rc;
  rc = relattn_call_classify(sqlite3_user_data(ctx), fn, argv[0], argv[1],
                             argc > 2 ? argv[2] : NULL, &mc, &logits, &zErr);
  if (rc != SQLITE_OK) {
    resultError(ctx, rc, zErr);
    return;
  }
  if (mc.n == 0) {
    relattn_call_clear(&mc);
    sqlite3_result_null(ctx);
    return;
  }
  if (mc.m->cfg.problem_type == RELATTN_PROBLEM_REGRESSION) {
    char e[RELATTN_ECHO_BUF];
    relattn_result_errorf(ctx, "%s: model '%s' is a regression model "
                          "(problem_type regression): its value is the logit "
                          "of relattn_labels", fn,
                          relattn_echo(e, sqlite3_value_text(argv[0]), -1));
  } else {
    sqlite3_result_text(
        ctx, relattn_store_label(mc.m, relattn_label_best(logits,
                                                          mc.m->cfg.n_labels)),
        -1, SQLITE_TRANSIENT);
  }
  sqlite3_free(logits);
  relattn_call_clear(&mc);
}

/* ---- one model call, for the other ext/ files (ext/svg_fn.c) -------------- */

int relattn_call_begin(relattn_conn *conn, const char *fn,
                       sqlite3_value *model, sqlite3_value *tokens,
                       int scores, relattn_call **out, char **pzErr) {
  relattn_call *mc = sqlite3_malloc64(sizeof *mc);
  int rc;
  *out = NULL;
  *pzErr = NULL;
  if (!mc) return SQLITE_NOMEM;
  rc = relattn_call_init(conn, fn, model, tokens, scores, mc, pzErr);
  if (rc != SQLITE_OK || mc->n == 0) {
    sqlite3_free(mc);
    return rc;
  }
  *out = mc;
  return SQLITE_OK;
}

const relattn_model *relattn_call_model(const relattn_call *mc) {
  return mc->m;
}

const int32_t *relattn_call_input(const relattn_call *mc, int *n, int *bos) {
  *n = mc->n;
  *bos = mc->bos;
  return mc->input;
}

void relattn_call_end(relattn_call *mc) {
  if (!mc) return;
  relattn_call_clear(mc);
  sqlite3_free(mc);
}
