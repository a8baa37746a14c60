/*
** generate_fn.c: text generation in SQL (src/generate.c does the search).
**
**   relattn_generate(model, input [, options])          -> TEXT
**   SELECT * FROM relattn_generate_tokens(model, input [, options])
**       -> step, token, text, logprob
**
** Example:
**   SELECT relattn_generate('tiny', 'In the beginning',
**                           '{"max_new_tokens": 40, "num_beams": 4}');
**
** input is TEXT for the model's tokenizer or a BLOB of int32 ids, bos put
** in front as every model function does; NULL gives NULL (no rows).
** options is a JSON object (docs/reference.md, Generation): max_new_tokens,
** do_sample, temperature, top_k, top_p, seed, num_beams, length_penalty,
** early_stopping, no_repeat_ngram_size, eos_token_id, stop. The text is the
** new tokens' (eos left out), cut before the first stop string it holds;
** bytes that make no valid UTF-8 character become U+FFFD. A row of
** relattn_generate_tokens is one new token: its id, what it adds to the
** text (the rows' texts joined are relattn_generate's text), and its
** log-probability under the model.
*/
#include "ext.h"
SQLITE_EXTENSION_INIT3

#include <stdlib.h>
#include <string.h>

#include "functions.h"
#include "generate.h"

#define MAX_STOPS 16
#define MAX_BEAMS 64

static const char FN[] = "relattn_generate";

/* The options' keys, for the message about one it does not know. */
static const char KEYS[] =
    "max_new_tokens, do_sample, temperature, top_k, top_p, seed, num_beams, "
    "length_penalty, early_stopping, no_repeat_ngram_size, eos_token_id, stop";

void relattn_gen_clear(relattn_gen_call *g) {
  int i;
  relattn_call_clear(&g->mc);
  relattn_gen_result_free(&g->r);
  for (i = 0; i < g->n_stops; i++) sqlite3_free(g->stops[i]);
  free(g->raw);
  sqlite3_free(g->ends);
  memset(g, 0, sizeof *g);
}

/* What the stop check reads: the model, the options, the stop strings. */
typedef struct gen_ctx {
  const relattn_model *m;
  const relattn_gen_opts *o;
  char *const *stops;
  int n_stops;
} gen_ctx;

/* How many of a model input's n tokens a search is given: a decoder
** continues the text, so not the token a tokenizer appends to a sequence
** to be scored ([SEP], </s>); an encoder-decoder's encoder reads its
** source as the tokenizer gives it, </s> included, as Hugging Face's
** generate does. */
int relattn_gen_input_n(const relattn_model *m, int n) {
  if (relattn_config_is_s2s(&m->cfg)) return n;
  return m->cfg.append >= 0 && n > 1 ? n - 1 : n;
}

/* The text of ids (eos and ids without text left out) in bytes as the
** tokenizer gives them, into *raw (malloc'd). No SQLite call: relattn_scan's
** workers run it. */
static int decodeRaw(const relattn_model *m, const relattn_gen_opts *o,
                     const int32_t *ids, int n, uint8_t **raw, size_t *len,
                     char *err, size_t errsz) {
  int32_t *keep = malloc(sizeof(int32_t) * ((size_t)n + 1));
  const int bytes = relattn_tokenizer_kind(m->tok) == RELATTN_TOK_BYTES;
  const int n_ids = bytes ? 256 : relattn_tokenizer_n_ids(m->tok);
  int i, k = 0, j, rc;
  *raw = NULL;
  *len = 0;
  if (!keep) return RELATTN_ERR_NOMEM;
  for (i = 0; i < n; i++) {
    for (j = 0; j < o->n_eos && o->eos[j] != ids[i]; j++) {
    }
    /* an id with no text (a byte model's past 255) adds none */
    if (j == o->n_eos && ids[i] < n_ids) keep[k++] = ids[i];
  }
  rc = relattn_tokenizer_decode(m->tok, keep, (size_t)k, raw, len, FN, err,
                                errsz);
  free(keep);
  return rc;
}

/* Where the first stop string starts in text, or len. */
static size_t stopAt(const gen_ctx *g, const uint8_t *text, size_t len) {
  size_t cut = len;
  int i;
  for (i = 0; i < g->n_stops; i++) {
    const uint8_t *p = memmem(text, len, g->stops[i], strlen(g->stops[i]));
    if (p && (size_t)(p - text) < cut) cut = (size_t)(p - text);
  }
  return cut;
}

/* opts->stop: has the text of the tokens so far a stop string? */
static int stopCheck(void *ctx, const int32_t *ids, int n) {
  const gen_ctx *g = ctx;
  uint8_t *raw;
  size_t len, cut;
  char err[64];
  if (decodeRaw(g->m, g->o, ids, n, &raw, &len, err, sizeof err))
    return 0; /* the final decode reports it */
  cut = stopAt(g, raw, len);
  free(raw);
  return cut < len;
}

int relattn_gen_text(const relattn_model *m, const relattn_gen_opts *opts,
                     char *const *stops, int n_stops, const int32_t *input,
                     int n, relattn_pool *pool, sqlite3_int64 max_memory,
                     char **text, size_t *len, char *err, size_t errsz) {
  relattn_gen_opts o = *opts;
  gen_ctx g;
  relattn_gen_result r;
  uint8_t *raw = NULL;
  size_t raw_len, cut, need;
  int rc;
  *text = NULL;
  *len = 0;
  g.m = m;
  g.o = &o;
  g.stops = stops;
  g.n_stops = n_stops;
  if (n_stops) {
    o.stop = stopCheck;
    o.stop_ctx = &g;
  }
  need = relattn_generate_memory(m, n, &o);
  if (need == SIZE_MAX || (sqlite3_uint64)need > (sqlite3_uint64)max_memory)
    return relattn_errorf(err, errsz, RELATTN_ERR_TOOBIG,
                          "%s: needs %llu bytes, over the limit of %lld per "
                          "call (relattn_max_memory)",
                          FN, (unsigned long long)need, max_memory);
  rc = relattn_generate(m, input, n, &o, pool, &r, err, errsz);
  if (rc != RELATTN_OK) return rc;
  rc = decodeRaw(m, &o, r.ids, r.n, &raw, &raw_len, err, errsz);
  relattn_gen_result_free(&r);
  if (rc != RELATTN_OK) return rc;
  cut = stopAt(&g, raw, raw_len);
  *text = malloc(relattn_utf8_repair(NULL, raw, cut) + 1);
  if (!*text) {
    free(raw);
    return relattn_errorf(err, errsz, RELATTN_ERR_NOMEM, "%s: out of memory",
                          FN);
  }
  *len = relattn_utf8_repair((uint8_t *)*text, raw, cut);
  free(raw);
  return RELATTN_OK;
}

/* ---- options ------------------------------------------------------------- */

/* Who reads the options, for messages: "<fn>: <what>.key must be ...". */
typedef struct opt_who {
  const char *fn, *what;
} opt_who;

static char *optBad(const opt_who *w, const char *key, const char *want,
                    const char *json) {
  char e[RELATTN_ECHO_BUF];
  return sqlite3_mprintf("%s: %s.%s must be %s, not %s", w->fn, w->what, key,
                         want, relattn_echo(e, json, -1));
}

/* An integer in [lo, hi] of JSON type type ('integer'), or sets *zErr. */
static int optInt(const opt_who *w, const char *key, const char *type,
                  sqlite3_value *v,
                  const char *json, sqlite3_int64 lo, sqlite3_int64 hi,
                  sqlite3_int64 *out, char **zErr) {
  char want[96];
  sqlite3_int64 x = sqlite3_value_int64(v);
  if (strcmp(type, "integer") != 0 || x < lo || x > hi) {
    if (hi >= INT32_MAX)
      sqlite3_snprintf(sizeof want, want, "an integer of at least %lld", lo);
    else
      sqlite3_snprintf(sizeof want, want, "an integer from %lld to %lld", lo,
                       hi);
    *zErr = optBad(w, key, want, json);
    return 0;
  }
  *out = x;
  return 1;
}

static int optNum(const char *type, sqlite3_value *v, double *out) {
  if (strcmp(type, "integer") != 0 && strcmp(type, "real") != 0) return 0;
  *out = sqlite3_value_double(v);
  return 1;
}

/* One token id or a list of them into o->eos. */
static char *optEos(const opt_who *w, sqlite3 *db, relattn_gen_opts *o,
                    const relattn_model *m,
                    const char *type, sqlite3_value *v, const char *json) {
  char want[96];
  sqlite3_snprintf(sizeof want, want,
                   "null, a token id below vocab_size (%d) or a list of at "
                   "most %d",
                   m->cfg.vocab_size, RELATTN_GEN_MAX_EOS);
  o->n_eos = 0;
  if (strcmp(type, "null") == 0) return NULL;
  if (strcmp(type, "integer") == 0) {
    sqlite3_int64 x = sqlite3_value_int64(v);
    if (x < 0 || x >= m->cfg.vocab_size)
      return optBad(w, "eos_token_id", want, json);
    o->eos[o->n_eos++] = (int)x;
    return NULL;
  }
  if (strcmp(type, "array") == 0) {
    sqlite3_stmt *st = NULL;
    char *zErr = NULL;
    if (sqlite3_prepare_v2(db, "SELECT type, atom FROM json_each(?1)", -1, &st,
                           NULL) != SQLITE_OK)
      return relattn_sql_errmsg(db, w->fn, relattn_sql_code(db));
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    while (!zErr && sqlite3_step(st) == SQLITE_ROW) {
      sqlite3_int64 x = sqlite3_column_int64(st, 1);
      if (strcmp((const char *)sqlite3_column_text(st, 0), "integer") != 0 ||
          x < 0 || x >= m->cfg.vocab_size || o->n_eos == RELATTN_GEN_MAX_EOS)
        zErr = optBad(w, "eos_token_id", want, json);
      else
        o->eos[o->n_eos++] = (int)x;
    }
    sqlite3_finalize(st);
    return zErr;
  }
  return optBad(w, "eos_token_id", want, json);
}

/* A string or a list of strings into stops. */
static char *optStop(const opt_who *w, sqlite3 *db, char **stops,
                     int *n_stops, const char *type,
                     sqlite3_value *v, const char *json) {
  char want[96];
  sqlite3_snprintf(sizeof want, want,
                   "a non-empty string or a list of at most %d", MAX_STOPS);
  if (strcmp(type, "text") == 0) {
    const char *s = (const char *)sqlite3_value_text(v);
    if (!s || !*s || relattn_json_has_nul(json))
      return optBad(w, "stop", want, json);
    if (!(stops[0] = sqlite3_mprintf("%s", s))) return NULL;
    *n_stops = 1;
    return NULL;
  }
  if (strcmp(type, "array") == 0 && !relattn_json_has_nul(json)) {
    sqlite3_stmt *st = NULL;
    char *zErr = NULL;
    if (sqlite3_prepare_v2(db, "SELECT type, atom FROM json_each(?1)", -1, &st,
                           NULL) != SQLITE_OK)
      return relattn_sql_errmsg(db, w->fn, relattn_sql_code(db));
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    while (!zErr && sqlite3_step(st) == SQLITE_ROW) {
      const char *s = (const char *)sqlite3_column_text(st, 1);
      if (strcmp((const char *)sqlite3_column_text(st, 0), "text") != 0 ||
          !s || !*s || *n_stops == MAX_STOPS)
        zErr = optBad(w, "stop", want, json);
      else if ((stops[*n_stops] = sqlite3_mprintf("%s", s)) != NULL)
        (*n_stops)++;
    }
    sqlite3_finalize(st);
    if (!zErr && *n_stops == 0) zErr = optBad(w, "stop", want, json);
    return zErr;
  }
  return optBad(w, "stop", want, json);
}

char *relattn_gen_parse(relattn_conn *conn, const relattn_model *m,
                        const char *fn, const char *what, const char *json,
                        relattn_gen_opts *o, char **stops, int *n_stops) {
  sqlite3 *db = relattn_json_db(conn);
  const opt_who who = {fn, what}, *w = &who;
  sqlite3_stmt *st = NULL;
  char *zErr = NULL;
  int rc;
  relattn_gen_defaults(o);
  *n_stops = 0;
  if (m->cfg.eos >= 0) o->eos[o->n_eos++] = m->cfg.eos;
  if (!json) return NULL;
  rc = sqlite3_prepare_v2(db,
                          "SELECT json_valid(?1) AND json_type(?1) = 'object'",
                          -1, &st, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0)
             ? SQLITE_OK
             : SQLITE_ERROR;
    sqlite3_finalize(st);
    st = NULL;
    if (rc != SQLITE_OK) {
      char e[RELATTN_ECHO_BUF];
      return sqlite3_mprintf("%s: %s must be a JSON object, not %s", fn, what,
                             relattn_echo(e, json, -1));
    }
  }
  if (sqlite3_prepare_v2(db,
                         "SELECT key, type, atom, json_quote(value) FROM "
                         "json_each(?1)",
                         -1, &st, NULL) != SQLITE_OK)
    return relattn_sql_errmsg(db, w->fn, relattn_sql_code(db));
  sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
  while (!zErr && sqlite3_step(st) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(st, 0);
    const char *type = (const char *)sqlite3_column_text(st, 1);
    sqlite3_value *v = sqlite3_column_value(st, 2);
    const char *vj = (const char *)sqlite3_column_text(st, 3);
    sqlite3_int64 x;
    double f;
    if (!key || !type || !vj) {
      zErr = sqlite3_mprintf("%s: out of memory", fn);
    } else if (strcmp(key, "max_new_tokens") == 0) {
      if (optInt(w, key, type, v, vj, 0, conn->max_tokens, &x, &zErr))
        o->max_new_tokens = (int)x;
    } else if (strcmp(key, "do_sample") == 0) {
      if (strcmp(type, "true") && strcmp(type, "false"))
        zErr = optBad(w, key, "true or false", vj);
      else
        o->do_sample = strcmp(type, "true") == 0;
    } else if (strcmp(key, "temperature") == 0) {
      if (!optNum(type, v, &f) || !(f > 0.0) || f > 1e300)
        zErr = optBad(w, key, "a number over 0", vj);
      else
        o->temperature = f;
    } else if (strcmp(key, "top_k") == 0) {
      if (optInt(w, key, type, v, vj, 0, INT32_MAX, &x, &zErr))
        o->top_k = (int)x;
    } else if (strcmp(key, "top_p") == 0) {
      if (!optNum(type, v, &f) || !(f > 0.0 && f <= 1.0))
        zErr = optBad(w, key, "a number over 0 and at most 1", vj);
      else
        o->top_p = f;
    } else if (strcmp(key, "seed") == 0) {
      if (strcmp(type, "integer") != 0)
        zErr = optBad(w, key, "an integer", vj);
      else
        o->seed = (uint64_t)sqlite3_value_int64(v);
    } else if (strcmp(key, "num_beams") == 0) {
      if (optInt(w, key, type, v, vj, 1, MAX_BEAMS, &x, &zErr))
        o->num_beams = (int)x;
    } else if (strcmp(key, "length_penalty") == 0) {
      if (!optNum(type, v, &f) || f < -1e6 || f > 1e6)
        zErr = optBad(w, key, "a number", vj);
      else
        o->length_penalty = f;
    } else if (strcmp(key, "early_stopping") == 0) {
      const char *s = (const char *)sqlite3_value_text(v);
      if (strcmp(type, "true") == 0) o->early_stopping = RELATTN_EARLY_TRUE;
      else if (strcmp(type, "false") == 0)
        o->early_stopping = RELATTN_EARLY_FALSE;
      else if (strcmp(type, "text") == 0 && s && strcmp(s, "never") == 0)
        o->early_stopping = RELATTN_EARLY_NEVER;
      else
        zErr = optBad(w, key, "true, false or \"never\"", vj);
    } else if (strcmp(key, "no_repeat_ngram_size") == 0) {
      if (optInt(w, key, type, v, vj, 0, INT32_MAX, &x, &zErr))
        o->no_repeat_ngram_size = (int)x;
    } else if (strcmp(key, "eos_token_id") == 0) {
      zErr = optEos(w, db, o, m, type, v, vj);
    } else if (strcmp(key, "stop") == 0) {
      zErr = optStop(w, db, stops, n_stops, type, v, vj);
    } else {
      char e[RELATTN_ECHO_BUF];
      zErr = sqlite3_mprintf("%s: %s has no key '%s' (its keys: %s)", fn,
                             what, relattn_echo(e, key, -1), KEYS);
    }
  }
  sqlite3_finalize(st);
  if (zErr) return zErr;
  if (o->num_beams > 1 && o->do_sample)
    return sqlite3_mprintf("%s: %s.do_sample and %s.num_beams > 1 together "
                           "(beam sampling) are not supported",
                           fn, what, what);
  if (o->num_beams > 1 && *n_stops)
    return sqlite3_mprintf("%s: %s.stop works with greedy search and "
                           "sampling, not with %s.num_beams > 1",
                           fn, what, what);
  return NULL;
}

/* ---- the call ------------------------------------------------------------ */

int relattn_gen_run(relattn_conn *conn, sqlite3_value *model,
                    sqlite3_value *input, sqlite3_value *options, int pieces,
                    relattn_gen_call *g, char **pzErr) {
  relattn_pool *pool;
  relattn_watch watch;
  gen_ctx gc;
  char err[256] = "";
  int rc, blas, n, s;
  size_t need, cut;
  memset(g, 0, sizeof *g);
  *pzErr = NULL;
  rc = relattn_call_init(conn, FN, model, input, RELATTN_NEED_GEN, &g->mc,
                         pzErr);
  if (rc != SQLITE_OK || g->mc.n == 0) return rc;
  if (options && sqlite3_value_type(options) != SQLITE_NULL &&
      sqlite3_value_type(options) != SQLITE_TEXT) {
    *pzErr = sqlite3_mprintf("%s: options must be a JSON object (TEXT)", FN);
    return SQLITE_ERROR;
  }
  *pzErr = relattn_gen_parse(
      conn, g->mc.m, FN, "options",
      options && sqlite3_value_type(options) == SQLITE_TEXT
          ? (const char *)sqlite3_value_text(options)
          : NULL,
      &g->o, g->stops, &g->n_stops);
  if (*pzErr) return SQLITE_ERROR;
  n = relattn_gen_input_n(g->mc.m, g->mc.n);
  gc.m = g->mc.m;
  gc.o = &g->o;
  gc.stops = g->stops;
  gc.n_stops = g->n_stops;
  if (g->n_stops) {
    g->o.stop = stopCheck;
    g->o.stop_ctx = &gc;
  }
  need = relattn_generate_memory(g->mc.m, n, &g->o);
  *pzErr = relattn_memory_check(conn, FN, need);
  if (*pzErr) return SQLITE_TOOBIG;
  pool = relattn_conn_pool(conn);
  if (!pool) return SQLITE_NOMEM;
  blas = relattn_blas_single();
  relattn_watch_begin(&watch, conn, pool); /* sqlite3_interrupt stops it */
  rc = relattn_generate(g->mc.m, g->mc.input, n, &g->o, pool, &g->r, err,
                        sizeof err);
  relattn_watch_end(&watch);
  relattn_blas_restore(blas);
  if (rc != RELATTN_OK) {
    /* src/ messages name relattn_generate; the pool's own say "interrupted" */
    *pzErr = strncmp(err, FN, sizeof FN - 1) == 0
                 ? sqlite3_mprintf("%s", err)
                 : sqlite3_mprintf("%s: %s", FN, err);
    return relattn_status_code(rc);
  }
  rc = decodeRaw(g->mc.m, &g->o, g->r.ids, g->r.n, &g->raw, &g->len, err,
                 sizeof err);
  if (rc != RELATTN_OK) {
    *pzErr = sqlite3_mprintf("%s", err);
    return relattn_status_code(rc);
  }
  cut = stopAt(&gc, g->raw, g->len);
  if (pieces && g->r.n > 0) {
    /* where each token's text ends in raw: the decode of the tokens up to
    ** it, to its last whole character (the last token: all of it) */
    g->ends = sqlite3_malloc64(sizeof(size_t) * (sqlite3_uint64)g->r.n);
    if (!g->ends) return SQLITE_NOMEM;
    for (s = 0; s < g->r.n; s++) {
      uint8_t *part;
      size_t len, e;
      rc = decodeRaw(g->mc.m, &g->o, g->r.ids, s + 1, &part, &len, err,
                     sizeof err);
      if (rc != RELATTN_OK) {
        *pzErr = sqlite3_mprintf("%s", err);
        return relattn_status_code(rc);
      }
      e = s + 1 == g->r.n ? len : relattn_utf8_complete(part, len);
      free(part);
      if (e > cut) e = cut;
      if (s > 0 && e < g->ends[s - 1]) e = g->ends[s - 1];
      g->ends[s] = e;
    }
  }
  g->len = cut;
  return SQLITE_OK;
}

/* raw[from, to) as valid UTF-8, the result of ctx. */
static void resultText(sqlite3_context *ctx, const uint8_t *raw, size_t from,
                       size_t to) {
  const size_t n = relattn_utf8_repair(NULL, raw + from, to - from);
  uint8_t *out = sqlite3_malloc64(n + 1);
  if (!out) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  relattn_utf8_repair(out, raw + from, to - from);
  sqlite3_result_text64(ctx, (const char *)out, n, sqlite3_free, SQLITE_UTF8);
}

void relattn_generate_func(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv) {
  relattn_gen_call g;
  char *zErr = NULL;
  int rc = relattn_gen_run(sqlite3_user_data(ctx), argv[0], argv[1],
                           argc > 2 ? argv[2] : NULL, 0, &g, &zErr);
  if (rc != SQLITE_OK) {
    if (zErr || rc == SQLITE_NOMEM)
      relattn_result_error(ctx, rc, zErr);
    else
      sqlite3_result_error_code(ctx, rc);
  } else if (g.mc.n == 0) {
    sqlite3_result_null(ctx);
  } else {
    resultText(ctx, g.raw, 0, g.len);
  }
  relattn_gen_clear(&g);
}

/* ---- relattn_generate_tokens(model, input [, options]) ------------------- */

enum { GT_STEP, GT_TOKEN, GT_TEXT, GT_LOGPROB, GT_MODEL, GT_INPUT,
       GT_OPTIONS };

typedef struct gtCursor {
  sqlite3_vtab_cursor base; /* must be first */
  relattn_gen_call g;
  int row;
} gtCursor;

static int gtConnect(sqlite3 *db, void *aux, int argc,
                     const char *const *argv, sqlite3_vtab **ppVtab,
                     char **pzErr) {
  (void)argc;
  (void)argv;
  (void)pzErr;
  return relattn_tvf_connect(db, aux,
                             "CREATE TABLE x(step INTEGER, token INTEGER, "
                             "text TEXT, logprob REAL, model HIDDEN, "
                             "input HIDDEN, options HIDDEN)",
                             ppVtab);
}

static int gtOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  (void)pVtab;
  return relattn_tvf_open(sizeof(gtCursor), ppCursor);
}

static int gtClose(sqlite3_vtab_cursor *cur) {
  relattn_gen_clear(&((gtCursor *)cur)->g);
  sqlite3_free(cur);
  return SQLITE_OK;
}

/* model, input and options (the last optional) as = constraints, in order. */
static int gtBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  static const int cols[] = {GT_MODEL, GT_INPUT, GT_OPTIONS};
  (void)pVtab;
  return relattn_tvf_best_index(info, cols, 3, 3, 7, 100);
}

static int gtFilter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv) {
  gtCursor *c = (gtCursor *)cur;
  relattn_tvf *v = (relattn_tvf *)cur->pVtab;
  char *zErr = NULL;
  int rc;
  (void)idxStr;
  (void)argc;
  relattn_gen_clear(&c->g);
  c->row = 0;
  if ((idxNum & 3) != 3)
    return relattn_tvf_error(cur->pVtab, SQLITE_ERROR,
                             sqlite3_mprintf("relattn_generate_tokens: model "
                                             "and input arguments are "
                                             "required"));
  rc = relattn_gen_run(v->conn, argv[0], argv[1], idxNum & 4 ? argv[2] : NULL,
                       1, &c->g, &zErr);
  if (rc != SQLITE_OK) {
    relattn_gen_clear(&c->g);
    if (!zErr && rc != SQLITE_NOMEM) return rc;
    return relattn_tvf_error(cur->pVtab, rc, zErr);
  }
  return SQLITE_OK;
}

static int gtNext(sqlite3_vtab_cursor *cur) {
  ((gtCursor *)cur)->row++;
  return SQLITE_OK;
}

static int gtEof(sqlite3_vtab_cursor *cur) {
  gtCursor *c = (gtCursor *)cur;
  return c->g.mc.n == 0 || c->row >= c->g.r.n;
}

static int gtColumn(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  gtCursor *c = (gtCursor *)cur;
  const int r = c->row;
  switch (col) {
    case GT_STEP: sqlite3_result_int(ctx, r); break;
    case GT_TOKEN: sqlite3_result_int(ctx, c->g.r.ids[r]); break;
    case GT_TEXT:
      resultText(ctx, c->g.raw, r ? c->g.ends[r - 1] : 0, c->g.ends[r]);
      break;
    case GT_LOGPROB: sqlite3_result_double(ctx, c->g.r.logprob[r]); break;
    default: break;
  }
  return SQLITE_OK;
}

static int gtRowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid) {
  *rowid = ((gtCursor *)cur)->row;
  return SQLITE_OK;
}

sqlite3_module relattn_generate_tokens_module = {
    0,            /* iVersion */
    0,            /* xCreate: eponymous only */
    gtConnect, gtBestIndex, relattn_tvf_disconnect,
    0,            /* xDestroy */
    gtOpen, gtClose, gtFilter, gtNext, gtEof, gtColumn, gtRowid,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 /* xUpdate .. xShadowName */
};
