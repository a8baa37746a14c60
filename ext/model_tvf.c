/*
** model_tvf.c: the model's forward pass as table-valued functions, a row
** per position, label or attention weight (the scalar functions:
** ext/model_fn.c, whose model call they share).
**
**   SELECT * FROM relattn_logprobs(model, tokens)
**       -> pos, token, logprob, top_token, top_logprob
**       (a masked-LM model: k rows per [MASK], its k best fills by hidden
**       rank, relattn_logprobs(model, tokens, k); k is 1 by default)
**   SELECT * FROM relattn_logprobs(model, target, source)
**       (an encoder-decoder: the third argument is the source, and row i
**       is target token i given the source and the target before it)
**   SELECT * FROM relattn_labels(model, tokens [, text_b]) -> label, logit, prob
**       (with text_b: the pair [CLS] tokens [SEP] text_b [SEP])
**   SELECT * FROM relattn_attention_weights(model, tokens) WHERE layer=0 AND head=1
**       -> layer, head, qpos, kpos, distance, weight
**
** relattn_attention_weights computes one (layer, head) map at a time, running
** only the layers up to it; `layer = ?` and `head = ?` are pushed down, so a
** query for one map computes one map. qpos and kpos index the model's input
** (0 is BOS when there is one); for decoders the masked pairs (kpos > qpos,
** weight 0) are left out.
*/
#include "ext.h"
SQLITE_EXTENSION_INIT3

#include <math.h>
#include <string.h>

#include "functions.h"

/* ---- relattn_logprobs(model, tokens) --------------------------------------- */

enum {
  LP_POS, LP_TOKEN, LP_LOGPROB, LP_TOP_TOKEN, LP_TOP_LOGPROB, LP_MODEL,
  LP_TOKENS, LP_K, LP_RANK
};

typedef struct lpCursor {
  sqlite3_vtab_cursor base; /* must be first */
  int32_t *input;           /* (n) the model's input */
  float *logprob;           /* (n - 1) */
  float *top_logprob;       /* (n - 1) */
  int32_t *top_token;       /* (n - 1) */
  int32_t *fill;            /* masked LM: input rows of [MASK], or NULL; then
                            ** top_token, top_logprob are (masks, k) */
  int k;                    /* masked LM: best fills per [MASK] */
  int n, bos, row;
  int rows;                 /* rows of the answer */
  int s2s;                  /* an encoder-decoder: row r is input[r] */
} lpCursor;

static int lpOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  (void)pVtab;
  return relattn_tvf_open(sizeof(lpCursor), ppCursor);
}

static void lpReset(lpCursor *c) {
  sqlite3_free(c->input);
  sqlite3_free(c->logprob);
  c->input = NULL;
  c->logprob = NULL;
  c->top_logprob = NULL;
  c->top_token = NULL;
  c->fill = NULL;
  c->n = c->row = c->rows = 0;
  c->k = 1;
  c->s2s = 0;
}

/* relattn_logprobs(model, target, source): an encoder-decoder's rows, each
** target token given the source and the target before it. */
static int lpS2s(lpCursor *c, relattn_conn *conn, sqlite3_value **argv) {
  static const char fn[] = "relattn_logprobs";
  relattn_s2s_call sc;
  relattn_s2s_req r;
  char *zErr = NULL;
  int rc = relattn_s2s_init(conn, fn, argv[0], argv[1], argv[2], &sc, &zErr);
  if (rc != SQLITE_OK) return relattn_tvf_error(c->base.pVtab, rc, zErr);
  if (!sc.src) {
    relattn_s2s_clear(&sc);
    return SQLITE_OK;
  }
  c->logprob = sqlite3_malloc64(3 * sizeof(float) * (sqlite3_uint64)sc.mc.n);
  if (!c->logprob) {
    relattn_s2s_clear(&sc);
    return SQLITE_NOMEM;
  }
  c->top_logprob = c->logprob + sc.mc.n;
  c->top_token = (int32_t *)(c->top_logprob + sc.mc.n);
  memset(&r, 0, sizeof r);
  r.logprob = c->logprob;
  r.top_logprob = c->top_logprob;
  r.top_token = c->top_token;
  rc = relattn_s2s_run(&sc, fn, &r, &zErr);
  if (rc != SQLITE_OK) {
    relattn_s2s_clear(&sc);
    lpReset(c);
    return zErr ? relattn_tvf_error(c->base.pVtab, rc, zErr) : rc;
  }
  c->input = sc.mc.input;
  sc.mc.input = NULL;
  c->n = c->rows = sc.mc.n;
  c->s2s = 1;
  relattn_s2s_clear(&sc);
  return SQLITE_OK;
}

static int lpClose(sqlite3_vtab_cursor *cur) {
  lpReset((lpCursor *)cur);
  sqlite3_free(cur);
  return SQLITE_OK;
}

/* A masked-LM model: k rows per [MASK] of the input (tokenizer.mask), its
** k best fills; none when the input has no [MASK]. Takes mc. */
static int lpFill(lpCursor *c, relattn_call *mc, int k) {
  static const char fn[] = "relattn_logprobs";
  relattn_fwd f;
  char *zErr = NULL;
  int rc, i, rows = 0;
  sqlite3_uint64 cells, bytes;
  for (i = 0; i < mc->n; i++) rows += mc->input[i] == mc->m->cfg.mask;
  if (rows == 0) {
    relattn_call_clear(mc);
    return SQLITE_OK;
  }
  /* one allocation: fill rows (rows), top_token and top_logprob (rows, k) */
  cells = (sqlite3_uint64)rows * (sqlite3_uint64)k;
  bytes = sizeof(float) * (2 * cells + (sqlite3_uint64)rows);
  rc = cells > INT32_MAX ? SQLITE_TOOBIG
                         : relattn_call_memory(mc, fn, bytes, &zErr);
  if (rc != SQLITE_OK) {
    if (!zErr)
      zErr = sqlite3_mprintf("%s: %d [MASK] x k = %d is over 2^31 rows", fn,
                             rows, k);
    relattn_call_clear(mc);
    return relattn_tvf_error(c->base.pVtab, rc, zErr);
  }
  c->logprob = sqlite3_malloc64(bytes);
  if (!c->logprob) {
    relattn_call_clear(mc);
    return SQLITE_NOMEM;
  }
  c->top_logprob = c->logprob;
  c->top_token = (int32_t *)(c->top_logprob + cells);
  c->fill = c->top_token + cells;
  for (i = 0, rows = 0; i < mc->n; i++)
    if (mc->input[i] == mc->m->cfg.mask) c->fill[rows++] = i;
  memset(&f, 0, sizeof f);
  f.fill = c->fill;
  f.n_fill = rows;
  f.fill_k = k;
  f.fill_token = c->top_token;
  f.fill_logprob = c->top_logprob;
  rc = relattn_call_run(mc, fn, &f, &zErr);
  if (rc != SQLITE_OK) {
    relattn_call_clear(mc);
    lpReset(c);
    return zErr ? relattn_tvf_error(c->base.pVtab, rc, zErr) : rc;
  }
  c->input = mc->input;
  mc->input = NULL;
  c->n = mc->n;
  c->bos = mc->bos;
  c->rows = (int)cells;
  c->k = k;
  relattn_call_clear(mc);
  return SQLITE_OK;
}

static int lpBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  static const int cols[] = {LP_MODEL, LP_TOKENS, LP_K};
  (void)pVtab;
  return relattn_tvf_best_index(info, cols, 3, 3, 3, 1000);
}

static int lpFilter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv) {
  static const char fn[] = "relattn_logprobs";
  lpCursor *c = (lpCursor *)cur;
  relattn_tvf *v = (relattn_tvf *)cur->pVtab;
  relattn_call mc;
  relattn_fwd f;
  char *zErr = NULL;
  int rc;
  (void)idxStr;
  (void)argc;
  lpReset(c);
  if ((idxNum & 3) != 3)
    return relattn_tvf_error(cur->pVtab, SQLITE_ERROR,
                             sqlite3_mprintf("%s: model and tokens arguments "
                                             "are required", fn));
  if ((idxNum & 4) && (sqlite3_value_type(argv[2]) == SQLITE_TEXT ||
                      sqlite3_value_type(argv[2]) == SQLITE_BLOB ||
                      sqlite3_value_type(argv[2]) == SQLITE_NULL) &&
      sqlite3_value_type(argv[0]) == SQLITE_TEXT) {
    /* a source (TEXT or BLOB tokens) for an encoder-decoder; k is a number.
    ** Which the model is says which the argument is. */
    const relattn_model *m = relattn_store_acquire(
        v->conn, (const char *)sqlite3_value_text(argv[0]), fn, &zErr);
    int s2s;
    if (!m)
      return relattn_tvf_error(cur->pVtab, zErr ? SQLITE_ERROR : SQLITE_NOMEM,
                               zErr);
    s2s = relattn_config_is_s2s(&m->cfg);
    if (!s2s && m->cfg.head != RELATTN_HEAD_MLM &&
        sqlite3_value_type(argv[2]) != SQLITE_NULL)
      zErr = relattn_s2s_refusal(m, fn, sqlite3_value_text(argv[0]));
    relattn_store_release(v->conn, m);
    if (zErr) return relattn_tvf_error(cur->pVtab, SQLITE_ERROR, zErr);
    if (s2s) return lpS2s(c, v->conn, argv);
  }
  rc = relattn_call_init(v->conn, fn, argv[0], argv[1], RELATTN_NEED_FILL, &mc,
                         &zErr);
  if (rc != SQLITE_OK) return relattn_tvf_error(cur->pVtab, rc, zErr);
  if (mc.n > 0 && (idxNum & 4)) {
    /* k: the best fills per [MASK], a masked-LM model's */
    const relattn_config *cfg = &mc.m->cfg;
    sqlite3_value *kv = argv[2];
    sqlite3_int64 k = sqlite3_value_int64(kv);
    char e[RELATTN_ECHO_BUF];
    if (cfg->head != RELATTN_HEAD_MLM &&
        !(sqlite3_value_numeric_type(kv) == SQLITE_INTEGER && k == 1))
      zErr = sqlite3_mprintf("%s: k (the best fills per [MASK]) needs a "
                             "masked-LM model; model '%s' has head '%s'",
                             fn, relattn_echo(e, sqlite3_value_text(argv[0]), -1),
                             relattn_head_name(cfg->head));
    else if (sqlite3_value_numeric_type(kv) != SQLITE_INTEGER || k < 1 ||
             k > cfg->vocab_size)
      zErr = sqlite3_mprintf("%s: k must be an integer from 1 to vocab_size "
                             "(%d), not %s",
                             fn, cfg->vocab_size,
                             sqlite3_value_type(kv) == SQLITE_NULL
                                 ? "NULL"
                                 : relattn_echo(e, sqlite3_value_text(kv), -1));
    if (zErr) {
      relattn_call_clear(&mc);
      return relattn_tvf_error(cur->pVtab, SQLITE_ERROR, zErr);
    }
    if (cfg->head == RELATTN_HEAD_MLM) return lpFill(c, &mc, (int)k);
  }
  if (mc.n > 0 && mc.m->cfg.head == RELATTN_HEAD_MLM)
    return lpFill(c, &mc, 1);
  if (mc.n < 2) { /* NULL tokens, or nothing scored */
    relattn_call_clear(&mc);
    return SQLITE_OK;
  }
  /* one allocation: logprob, top_logprob, top_token, each (n - 1) */
  rc = relattn_call_memory(&mc, fn, 3 * sizeof(float) * (sqlite3_uint64)mc.n,
                           &zErr);
  if (rc != SQLITE_OK) {
    relattn_call_clear(&mc);
    return relattn_tvf_error(cur->pVtab, rc, zErr);
  }
  c->logprob = sqlite3_malloc64(3 * sizeof(float) * (sqlite3_uint64)mc.n);
  if (!c->logprob) {
    relattn_call_clear(&mc);
    return SQLITE_NOMEM;
  }
  c->top_logprob = c->logprob + mc.n;
  c->top_token = (int32_t *)(c->top_logprob + mc.n);
  memset(&f, 0, sizeof f);
  f.logprob = c->logprob;
  f.top_logprob = c->top_logprob;
  f.top_token = c->top_token;
  rc = relattn_call_run(&mc, fn, &f, &zErr);
  if (rc != SQLITE_OK) {
    relattn_call_clear(&mc);
    lpReset(c);
    return zErr ? relattn_tvf_error(cur->pVtab, rc, zErr) : rc;
  }
  c->input = mc.input; /* keep the tokens for the token column */
  mc.input = NULL;
  c->n = mc.n;
  c->bos = mc.bos;
  c->rows = mc.n - 1;
  relattn_call_clear(&mc);
  return SQLITE_OK;
}

static int lpNext(sqlite3_vtab_cursor *cur) {
  ((lpCursor *)cur)->row++;
  return SQLITE_OK;
}

static int lpEof(sqlite3_vtab_cursor *cur) {
  lpCursor *c = (lpCursor *)cur;
  return c->row >= c->rows;
}

static int lpColumn(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  lpCursor *c = (lpCursor *)cur;
  int r = c->row;
  if (c->fill) {
    /* masked LM: row r is fill r % k of [MASK] r / k (input row fill[r / k]);
    ** no logprob (the token there is the mask) */
    const int m = c->fill[r / c->k];
    switch (col) {
      case LP_POS: sqlite3_result_int(ctx, m - c->bos); break;
      case LP_TOKEN: sqlite3_result_int(ctx, c->input[m]); break;
      case LP_TOP_TOKEN: sqlite3_result_int(ctx, c->top_token[r]); break;
      case LP_TOP_LOGPROB:
        sqlite3_result_double(ctx, c->top_logprob[r]);
        break;
      case LP_K: sqlite3_result_int(ctx, c->k); break;
      case LP_RANK: sqlite3_result_int(ctx, r % c->k + 1); break;
      default: break;
    }
    return SQLITE_OK;
  }
  if (c->s2s) { /* row r: target token r; no k, one rank */
    switch (col) {
      case LP_POS: sqlite3_result_int(ctx, r); break;
      case LP_TOKEN: sqlite3_result_int(ctx, c->input[r]); break;
      case LP_LOGPROB: sqlite3_result_double(ctx, c->logprob[r]); break;
      case LP_TOP_TOKEN: sqlite3_result_int(ctx, c->top_token[r]); break;
      case LP_TOP_LOGPROB:
        sqlite3_result_double(ctx, c->top_logprob[r]);
        break;
      case LP_RANK: sqlite3_result_int(ctx, 1); break;
      default: break;
    }
    return SQLITE_OK;
  }
  switch (col) {
    /* row r predicts input[r + 1]: sequence position r with bos, r + 1 without */
    case LP_POS: sqlite3_result_int(ctx, c->bos ? r : r + 1); break;
    case LP_TOKEN: sqlite3_result_int(ctx, c->input[r + 1]); break;
    case LP_LOGPROB: sqlite3_result_double(ctx, c->logprob[r]); break;
    case LP_TOP_TOKEN: sqlite3_result_int(ctx, c->top_token[r]); break;
    case LP_TOP_LOGPROB: sqlite3_result_double(ctx, c->top_logprob[r]); break;
    case LP_K:
    case LP_RANK: sqlite3_result_int(ctx, 1); break;
    default: break; /* hidden arguments: NULL */
  }
  return SQLITE_OK;
}

static int lpRowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  *pRowid = ((lpCursor *)cur)->row;
  return SQLITE_OK;
}

static int lpConnect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                     sqlite3_vtab **ppVtab, char **pzErr) {
  (void)argc;
  (void)argv;
  (void)pzErr;
  return relattn_tvf_connect(db, aux,
                             "CREATE TABLE x(pos INTEGER, token INTEGER, "
                             "logprob REAL, top_token INTEGER, "
                             "top_logprob REAL, model HIDDEN, tokens HIDDEN, "
                             "k HIDDEN, rank HIDDEN)",
                             ppVtab);
}

sqlite3_module relattn_logprobs_module = {
    0,            /* iVersion */
    0,            /* xCreate: eponymous only */
    lpConnect,    /* xConnect */
    lpBestIndex,  /* xBestIndex */
    relattn_tvf_disconnect, /* xDisconnect */
    0,            /* xDestroy */
    lpOpen,       /* xOpen */
    lpClose,      /* xClose */
    lpFilter,     /* xFilter */
    lpNext,       /* xNext */
    lpEof,        /* xEof */
    lpColumn,     /* xColumn */
    lpRowid,      /* xRowid */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 /* xUpdate .. xShadowName */
};

/* ---- relattn_attention_weights(model, tokens) ------------------------------- */

enum {
  AW_LAYER, AW_HEAD, AW_QPOS, AW_KPOS, AW_DISTANCE, AW_WEIGHT, AW_MODEL,
  AW_TOKENS
};

typedef struct awCursor {
  sqlite3_vtab_cursor base; /* must be first */
  relattn_call mc;          /* the held model and its input */
  float *map;               /* (n, n) weights of (layer, head) */
  int causal;
  int layer, head;          /* the map in map[] */
  int layer_end, head_lo, head_end;
  int qpos, kpos;
  sqlite3_int64 rowid;
} awCursor;

static int awOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  (void)pVtab;
  return relattn_tvf_open(sizeof(awCursor), ppCursor);
}

static void awReset(awCursor *c) {
  relattn_call_clear(&c->mc);
  sqlite3_free(c->map);
  c->map = NULL;
  c->layer = c->layer_end = 0;
}

static int awClose(sqlite3_vtab_cursor *cur) {
  awReset((awCursor *)cur);
  sqlite3_free(cur);
  return SQLITE_OK;
}

static int awBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  static const int cols[] = {AW_MODEL, AW_TOKENS, AW_LAYER, AW_HEAD};
  (void)pVtab;
  return relattn_tvf_best_index(info, cols, 4, 3, 3, 1000);
}

/* Computes the map of (c->layer, c->head). */
static int awCompute(awCursor *c) {
  relattn_fwd f;
  char *zErr = NULL;
  int rc;
  memset(&f, 0, sizeof f);
  f.map = c->map;
  f.map_layer = c->layer;
  f.map_head = c->head;
  rc = relattn_call_run(&c->mc, "relattn_attention_weights", &f, &zErr);
  if (rc != SQLITE_OK && zErr)
    return relattn_tvf_error(c->base.pVtab, rc, zErr);
  return rc;
}

/* Moves to the next pair that is not masked, computing the next map when
** one is done. */
static int awAdvance(awCursor *c) {
  if (++c->kpos <= (c->causal ? c->qpos : c->mc.n - 1)) return SQLITE_OK;
  c->kpos = 0;
  if (++c->qpos < c->mc.n) return SQLITE_OK;
  c->qpos = 0;
  if (++c->head >= c->head_end) {
    c->head = c->head_lo;
    if (++c->layer >= c->layer_end) return SQLITE_OK; /* eof */
  }
  return awCompute(c);
}

/* A pushed-down `layer = x` or `head = x`: x as a number (1.0 and '1' mean
** 1, as for an INTEGER column). Returns the index, -2 when x matches no row
** of any model (NULL, a fraction, text that is not a number), or -3 with
** *pzErr set when x is a whole number outside [0, count): a layer the model
** does not have is a mistake worth saying, not an empty answer. */
static int indexArg(sqlite3_value *x, int count, const char *fn,
                    const char *col, const char *what, char **pzErr) {
  double r;
  sqlite3_int64 i;
  switch (sqlite3_value_numeric_type(x)) {
    case SQLITE_INTEGER: i = sqlite3_value_int64(x); break;
    case SQLITE_FLOAT:
      r = sqlite3_value_double(x);
      if (r != floor(r)) return -2;
      if (r < 0 || r >= count) {
        *pzErr = sqlite3_mprintf("%s: %s = %s is out of range: the model has "
                                 "%d %s (0 to %d)", fn, col,
                                 sqlite3_value_text(x), count, what, count - 1);
        return -3;
      }
      return (int)r;
    default: return -2;
  }
  if (i < 0 || i >= count) {
    *pzErr = sqlite3_mprintf("%s: %s = %lld is out of range: the model has "
                             "%d %s (0 to %d)", fn, col, i, count, what,
                             count - 1);
    return -3;
  }
  return (int)i;
}

static int awFilter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv) {
  static const char fn[] = "relattn_attention_weights";
  awCursor *c = (awCursor *)cur;
  relattn_tvf *v = (relattn_tvf *)cur->pVtab;
  const relattn_config *cfg;
  sqlite3_uint64 cells;
  char *zErr = NULL;
  int rc, a = 2, layer = -1, head = -1;
  (void)idxStr;
  (void)argc;
  awReset(c);
  c->rowid = 0;
  if ((idxNum & 3) != 3)
    return relattn_tvf_error(cur->pVtab, SQLITE_ERROR,
                             sqlite3_mprintf("%s: model and tokens arguments "
                                             "are required", fn));
  rc = relattn_call_init(v->conn, fn, argv[0], argv[1], 0, &c->mc, &zErr);
  if (rc != SQLITE_OK) return relattn_tvf_error(cur->pVtab, rc, zErr);
  if (c->mc.n == 0) return SQLITE_OK; /* NULL tokens: no rows */
  cfg = &c->mc.m->cfg;
  if (idxNum & 4)
    layer = indexArg(argv[a++], cfg->n_layers, fn, "layer", "layers", &zErr);
  if ((idxNum & 8) && layer != -3)
    head = indexArg(argv[a++], cfg->n_heads, fn, "head", "heads", &zErr);
  if (layer == -3 || head == -3) {
    relattn_call_clear(&c->mc);
    return relattn_tvf_error(cur->pVtab, SQLITE_ERROR, zErr);
  }
  if (layer == -2 || head == -2) {
    relattn_call_clear(&c->mc);
    return SQLITE_OK;
  }
  c->layer = layer >= 0 ? layer : 0;
  c->layer_end = layer >= 0 ? layer + 1 : cfg->n_layers;
  c->head = c->head_lo = head >= 0 ? head : 0;
  c->head_end = head >= 0 ? head + 1 : cfg->n_heads;
  c->causal = cfg->arch == RELATTN_DECODER;
  c->qpos = c->kpos = 0;
  cells = (sqlite3_uint64)c->mc.n * (sqlite3_uint64)c->mc.n;
  rc = relattn_call_memory(&c->mc, fn, sizeof(float) * cells, &zErr);
  if (rc != SQLITE_OK) {
    awReset(c);
    return relattn_tvf_error(cur->pVtab, rc, zErr);
  }
  c->map = sqlite3_malloc64(sizeof(float) * cells);
  if (!c->map) {
    awReset(c);
    return relattn_tvf_error(cur->pVtab, SQLITE_NOMEM,
                     sqlite3_mprintf("%s: out of memory for a %d x %d "
                                     "attention map", fn, c->mc.n, c->mc.n));
  }
  return awCompute(c);
}

static int awNext(sqlite3_vtab_cursor *cur) {
  awCursor *c = (awCursor *)cur;
  c->rowid++;
  return awAdvance(c);
}

static int awEof(sqlite3_vtab_cursor *cur) {
  awCursor *c = (awCursor *)cur;
  return c->mc.n == 0 || c->layer >= c->layer_end;
}

static int awColumn(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  awCursor *c = (awCursor *)cur;
  switch (col) {
    case AW_LAYER: sqlite3_result_int(ctx, c->layer); break;
    case AW_HEAD: sqlite3_result_int(ctx, c->head); break;
    case AW_QPOS: sqlite3_result_int(ctx, c->qpos); break;
    case AW_KPOS: sqlite3_result_int(ctx, c->kpos); break;
    case AW_DISTANCE: sqlite3_result_int(ctx, c->kpos - c->qpos); break;
    case AW_WEIGHT:
      sqlite3_result_double(ctx,
                            c->map[(size_t)c->qpos * c->mc.n + c->kpos]);
      break;
    default: break;
  }
  return SQLITE_OK;
}

static int awRowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  *pRowid = ((awCursor *)cur)->rowid;
  return SQLITE_OK;
}

static int awConnect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                     sqlite3_vtab **ppVtab, char **pzErr) {
  (void)argc;
  (void)argv;
  (void)pzErr;
  return relattn_tvf_connect(db, aux,
                             "CREATE TABLE x(layer INTEGER, head INTEGER, "
                             "qpos INTEGER, kpos INTEGER, distance INTEGER, "
                             "weight REAL, model HIDDEN, tokens HIDDEN)",
                             ppVtab);
}

sqlite3_module relattn_attention_weights_module = {
    0,            /* iVersion */
    0,            /* xCreate: eponymous only */
    awConnect,    /* xConnect */
    awBestIndex,  /* xBestIndex */
    relattn_tvf_disconnect, /* xDisconnect */
    0,            /* xDestroy */
    awOpen,       /* xOpen */
    awClose,      /* xClose */
    awFilter,     /* xFilter */
    awNext,       /* xNext */
    awEof,        /* xEof */
    awColumn,     /* xColumn */
    awRowid,      /* xRowid */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 /* xUpdate .. xShadowName */
};

/* ---- relattn_labels(model, tokens) ------------------------------------------ */

enum { LB_LABEL, LB_LOGIT, LB_PROB, LB_MODEL, LB_TOKENS, LB_TEXT_B };

typedef struct lbCursor {
  sqlite3_vtab_cursor base; /* must be first */
  relattn_call mc;          /* holds the model (its labels) */
  float *logits;            /* (rows) */
  double *prob;             /* (rows), or NULL (regression) */
  int rows, row;
} lbCursor;

static int lbOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  (void)pVtab;
  return relattn_tvf_open(sizeof(lbCursor), ppCursor);
}

static void lbReset(lbCursor *c) {
  relattn_call_clear(&c->mc);
  sqlite3_free(c->logits);
  sqlite3_free(c->prob);
  c->logits = NULL;
  c->prob = NULL;
  c->rows = c->row = 0;
}

static int lbClose(sqlite3_vtab_cursor *cur) {
  lbReset((lbCursor *)cur);
  sqlite3_free(cur);
  return SQLITE_OK;
}

static int lbBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  static const int cols[] = {LB_MODEL, LB_TOKENS, LB_TEXT_B};
  (void)pVtab;
  return relattn_tvf_best_index(info, cols, 3, 3, 3, 1000);
}

static int lbFilter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv) {
  static const char fn[] = "relattn_labels";
  lbCursor *c = (lbCursor *)cur;
  relattn_tvf *v = (relattn_tvf *)cur->pVtab;
  char *zErr = NULL;
  int rc, n;
  (void)idxStr;
  (void)argc;
  lbReset(c);
  if ((idxNum & 3) != 3)
    return relattn_tvf_error(cur->pVtab, SQLITE_ERROR,
                             sqlite3_mprintf("%s: model and tokens arguments "
                                             "are required", fn));
  rc = relattn_call_classify(v->conn, fn, argv[0], argv[1],
                             (idxNum & 4) ? argv[2] : NULL, &c->mc, &c->logits,
                             &zErr);
  if (rc != SQLITE_OK)
    return zErr ? relattn_tvf_error(cur->pVtab, rc, zErr) : rc;
  if (c->mc.n == 0) return SQLITE_OK; /* NULL tokens: no rows */
  n = c->mc.m->cfg.n_labels;
  if (c->mc.m->cfg.problem_type != RELATTN_PROBLEM_REGRESSION) {
    c->prob = sqlite3_malloc64(sizeof(double) * (sqlite3_uint64)n);
    if (!c->prob) {
      lbReset(c);
      return SQLITE_NOMEM;
    }
    relattn_label_probs(c->prob, c->logits, n, c->mc.m->cfg.problem_type);
  }
  c->rows = n;
  return SQLITE_OK;
}

static int lbNext(sqlite3_vtab_cursor *cur) {
  ((lbCursor *)cur)->row++;
  return SQLITE_OK;
}

static int lbEof(sqlite3_vtab_cursor *cur) {
  lbCursor *c = (lbCursor *)cur;
  return c->row >= c->rows;
}

static int lbColumn(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  lbCursor *c = (lbCursor *)cur;
  switch (col) {
    case LB_LABEL:
      sqlite3_result_text(ctx, relattn_store_label(c->mc.m, c->row), -1,
                          SQLITE_TRANSIENT);
      break;
    case LB_LOGIT: sqlite3_result_double(ctx, c->logits[c->row]); break;
    case LB_PROB:
      if (c->prob) sqlite3_result_double(ctx, c->prob[c->row]);
      break;
    default: break;
  }
  return SQLITE_OK;
}

static int lbRowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  *pRowid = ((lbCursor *)cur)->row;
  return SQLITE_OK;
}

static int lbConnect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                     sqlite3_vtab **ppVtab, char **pzErr) {
  (void)argc;
  (void)argv;
  (void)pzErr;
  return relattn_tvf_connect(db, aux,
                             "CREATE TABLE x(label TEXT, logit REAL, "
                             "prob REAL, model HIDDEN, tokens HIDDEN, "
                             "text_b HIDDEN)",
                             ppVtab);
}

sqlite3_module relattn_labels_module = {
    0,            /* iVersion */
    0,            /* xCreate: eponymous only */
    lbConnect,    /* xConnect */
    lbBestIndex,  /* xBestIndex */
    relattn_tvf_disconnect, /* xDisconnect */
    0,            /* xDestroy */
    lbOpen,       /* xOpen */
    lbClose,      /* xClose */
    lbFilter,     /* xFilter */
    lbNext,       /* xNext */
    lbEof,        /* xEof */
    lbColumn,     /* xColumn */
    lbRowid,      /* xRowid */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 /* xUpdate .. xShadowName */
};
