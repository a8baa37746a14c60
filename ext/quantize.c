/*
** quantize.c: relattn_quantize, a stored model copied as a new model whose
** layers' linear weights and embeddings are int8 or bf16 (docs/reference.md,
** relattn_quantize).
**
**   SELECT relattn_quantize('tiny', 'tiny_q8', 'int8');   -- 99
**   SELECT relattn_score('tiny_q8', 'In the beginning');
**
** HOW IT WORKS
** The source model is loaded first (ext/store.c checks every row of it),
** then its rows are read again as stored, in the snapshot its config was
** read in (that statement stays open, as ext/store.c does), each checked
** against the config's size before it is used. Each linear weight of a
** layer (attn.wq .wk .wv .wo, ffn.w1 .w3 .w2) and each embedding table
** (tok_emb, an untied lm_head, pos_emb, rel_emb) becomes I8 rows and a F32
** tensor of per-row scales (relattn_q8_quantize, src/qgemm.c), or BF16
** (rounded to nearest even, subnormals zero, as the kernel reads them);
** every other tensor and the tokenizer's file are copied as stored. The
** config is the source's with "quantization": {"linear": mode,
** "embeddings": mode}. The plan goes to relattn_store_write
** as an import's does: all or nothing. A new_model that exists is refused
** rather than replaced, checked again inside the write.
*/
#include "ext.h"
#include "functions.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

/* One row of the source model, as stored. */
typedef struct src_row {
  int dtype;
  void *data;
  sqlite3_uint64 bytes;
} src_row;

/* What one call holds, freed by quantFree. */
typedef struct quant_state {
  src_row *src;            /* (n_src) in the source config's order */
  int n_src;
  uint8_t *tok;            /* the tokenizer's file, or NULL */
  size_t tok_n;
  void **own;              /* (n) the new int8 rows and scales, or NULL */
  int n;
  relattn_plan_tensor *t;  /* (n) */
  char *config;
} quant_state;

static void quantFree(quant_state *q) {
  int i;
  for (i = 0; q->src && i < q->n_src; i++) sqlite3_free(q->src[i].data);
  for (i = 0; q->own && i < q->n; i++) sqlite3_free(q->own[i]);
  sqlite3_free(q->src);
  sqlite3_free(q->tok);
  sqlite3_free(q->own);
  sqlite3_free(q->t);
  sqlite3_free(q->config);
}

/* A TEXT argument naming a model, non-empty, or NULL after an error. */
static const char *nameArg(sqlite3_context *ctx, sqlite3_value *v,
                           const char *fn, const char *arg) {
  if (sqlite3_value_type(v) != SQLITE_TEXT || sqlite3_value_bytes(v) == 0) {
    relattn_result_errorf(ctx, "%s: %s must be a non-empty name (TEXT)", fn,
                          arg);
    return NULL;
  }
  return (const char *)sqlite3_value_text(v);
}

/* Reads the source's rows (checked by its load) into q. */
static int readSource(sqlite3 *db, const relattn_config *src, const char *name,
                      quant_state *q, const char *fn, char **pzErr) {
  sqlite3_stmt *st;
  int rc, i;
  q->n_src = relattn_model_n_tensors(src);
  q->src = sqlite3_malloc64(sizeof *q->src * ((sqlite3_uint64)q->n_src + 1));
  if (!q->src) return SQLITE_NOMEM;
  memset(q->src, 0, sizeof *q->src * ((size_t)q->n_src + 1));
  st = relattn_prepare(db,
                       "SELECT name, dtype, data FROM relattn_tensor "
                       "WHERE model = ?1",
                       fn, pzErr);
  if (!st) return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *tname = (const char *)sqlite3_column_text(st, 0);
    const void *data = sqlite3_column_blob(st, 2);
    sqlite3_uint64 bytes = (sqlite3_uint64)sqlite3_column_bytes(st, 2);
    void *copy = sqlite3_malloc64(bytes + 1);
    if (!copy) {
      sqlite3_finalize(st);
      return SQLITE_NOMEM;
    }
    if (bytes) memcpy(copy, data, bytes);
    if (tname && relattn_is_tokfile(tname)) {
      sqlite3_free(q->tok);
      q->tok = copy;
      q->tok_n = (size_t)bytes;
      continue;
    }
    i = tname ? relattn_model_index(src, tname) : -1;
    if (i < 0) { /* the load refused any such row: not reached */
      sqlite3_free(copy);
      continue;
    }
    sqlite3_free(q->src[i].data);
    q->src[i].dtype =
        relattn_dtype_parse((const char *)sqlite3_column_text(st, 1));
    q->src[i].data = copy;
    q->src[i].bytes = bytes;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    *pzErr = relattn_sql_errmsg(db, fn, rc);
    return rc;
  }
  for (i = 0; i < q->n_src; i++)
    if (!q->src[i].data) { /* changed since the load: not in one snapshot */
      *pzErr = sqlite3_mprintf("%s: the model changed while it was read", fn);
      return SQLITE_ERROR;
    }
  return SQLITE_OK;
}

/* The plan of the new model, config cfg, from the source's rows. */
static int planRows(const relattn_config *src, const relattn_config *cfg,
                    quant_state *q) {
  const int bf16 = cfg->quant == RELATTN_QUANT_BF16;
  int i;
  relattn_tensor_spec s;
  q->n = relattn_model_n_tensors(cfg);
  q->t = sqlite3_malloc64(sizeof *q->t * ((sqlite3_uint64)q->n + 1));
  q->own = sqlite3_malloc64(sizeof *q->own * ((sqlite3_uint64)q->n + 1));
  if (!q->t || !q->own) return SQLITE_NOMEM;
  memset(q->own, 0, sizeof *q->own * ((size_t)q->n + 1));
  for (i = 0; i < q->n; i++) {
    const src_row *r;
    float *w;
    relattn_model_spec(cfg, i, &s);
    if (relattn_model_slot_kind(cfg, i) == RELATTN_SLOT_SCALE)
      continue; /* made with its weight, the slot before */
    r = &q->src[relattn_model_index(src, s.name)];
    if (r->dtype < 0 || r->dtype == RELATTN_U8 || r->dtype == RELATTN_I8 ||
        r->bytes != (sqlite3_uint64)s.numel * relattn_dtype_size(r->dtype))
      return SQLITE_ABORT; /* not the rows the load checked */
    if (relattn_model_slot_kind(cfg, i) == RELATTN_SLOT_FLOAT) {
      q->t[i].dtype = r->dtype;
      q->t[i].data = r->data;
      q->t[i].bytes = r->bytes;
      continue;
    }
    /* the rows as float32, then bf16, or int8 q and s */
    w = sqlite3_malloc64((sqlite3_uint64)s.numel * 4 + 1);
    q->own[i] = sqlite3_malloc64((sqlite3_uint64)s.numel * (bf16 ? 2 : 1) + 1);
    if (!bf16)
      q->own[i + 1] = sqlite3_malloc64((sqlite3_uint64)s.shape[0] * 4 + 1);
    if (!w || !q->own[i] || (!bf16 && !q->own[i + 1])) {
      sqlite3_free(w);
      return SQLITE_NOMEM;
    }
    relattn_to_f32(w, r->data, r->dtype, s.numel);
    if (bf16) {
      relattn_f32_to_bf16_n(q->own[i], w, s.numel);
      sqlite3_free(w);
      q->t[i].dtype = RELATTN_BF16;
      q->t[i].data = q->own[i];
      q->t[i].bytes = (sqlite3_uint64)s.numel * 2;
      continue;
    }
    relattn_q8_quantize(q->own[i], q->own[i + 1], w, (int)s.shape[0],
                        (int)s.shape[1]);
    sqlite3_free(w);
    q->t[i].dtype = RELATTN_I8;
    q->t[i].data = q->own[i];
    q->t[i].bytes = (sqlite3_uint64)s.numel;
    q->t[i + 1].dtype = RELATTN_F32;
    q->t[i + 1].data = q->own[i + 1];
    q->t[i + 1].bytes = (sqlite3_uint64)s.shape[0] * 4;
  }
  return SQLITE_OK;
}

/* The work of one call inside the savepoint the caller holds. */
static int quantize(sqlite3_context *ctx, const char *name,
                    const char *new_name, const char *mode, quant_state *q,
                    const char *fn, char **pzErr) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  sqlite3 *db = conn->db;
  const relattn_model *m;
  relattn_config src, cfg;
  relattn_plan plan;
  sqlite3_stmt *st;
  char e[RELATTN_ECHO_BUF], *config;
  int rc;

  m = relattn_store_acquire(conn, name, fn, pzErr);
  if (!m) return SQLITE_ERROR;
  src = m->cfg;
  relattn_store_release(conn, m);
  if (src.quant != RELATTN_QUANT_NONE) {
    *pzErr = sqlite3_mprintf("%s: model '%s' is already quantized", fn,
                             relattn_echo(e, name, -1));
    return SQLITE_ERROR;
  }
  /* the tables exist: the source was loaded from them. st stays on its
  ** row while the rows are read: one snapshot for both */
  st = relattn_prepare(db,
                       "SELECT 1 FROM relattn_model WHERE name = ?2 UNION ALL "
                       "SELECT json_set(config, '$.quantization', "
                       "json_object('linear', ?3, 'embeddings', ?3)) "
                       "FROM relattn_model "
                       "WHERE name = ?1",
                       fn, pzErr);
  if (!st) return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, new_name, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, mode, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
    sqlite3_finalize(st);
    *pzErr = sqlite3_mprintf("%s: new_model '%s' already exists", fn,
                             relattn_echo(e, new_name, -1));
    return SQLITE_ERROR;
  }
  if (rc != SQLITE_ROW) {
    *pzErr = rc == SQLITE_DONE ? relattn_no_model_msg(fn, name)
                               : relattn_sql_errmsg(db, fn, rc);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_ERROR : rc;
  }
  q->config = sqlite3_mprintf("%s", sqlite3_column_text(st, 0));
  config = sqlite3_mprintf("%s: new config", fn);
  if (!q->config || !config) {
    sqlite3_finalize(st);
    sqlite3_free(config);
    return SQLITE_NOMEM;
  }
  /* the source's config with the key: its limits checked (src/model.c) */
  rc = relattn_config_decode(db, q->config, &cfg, config, pzErr);
  sqlite3_free(config);
  if (rc == SQLITE_OK) rc = readSource(db, &src, name, q, fn, pzErr);
  sqlite3_finalize(st);
  if (rc != SQLITE_OK) return rc;
  if ((rc = planRows(&src, &cfg, q)) == SQLITE_ABORT) {
    *pzErr = sqlite3_mprintf("%s: the model changed while it was read", fn);
    return SQLITE_ERROR;
  }
  if (rc != SQLITE_OK) return rc;
  memset(&plan, 0, sizeof plan);
  plan.config = q->config;
  plan.cfg = &cfg;
  plan.t = q->t;
  plan.tok = q->tok;
  plan.tok_n = q->tok_n;
  plan.fn = fn;
  plan.no_replace = 1;
  return relattn_store_write(db, new_name, &plan, pzErr);
}

void relattn_quantize_func(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv) {
  static const char fn[] = "relattn_quantize";
  relattn_conn *conn = sqlite3_user_data(ctx);
  sqlite3 *db = conn->db;
  const char *name, *new_name, *mode;
  char *zErr = NULL, e[RELATTN_ECHO_BUF];
  quant_state q;
  int rc, written;
  (void)argc;
  if (!(name = nameArg(ctx, argv[0], fn, "model")) ||
      !(new_name = nameArg(ctx, argv[1], fn, "new_model")))
    return;
  mode = (const char *)sqlite3_value_text(argv[2]);
  if (sqlite3_value_type(argv[2]) != SQLITE_TEXT) {
    relattn_result_errorf(ctx, "%s: mode must be 'int8' or 'bf16' (TEXT)", fn);
    return;
  }
  if (strcmp(mode, "int8") != 0 && strcmp(mode, "bf16") != 0) {
    relattn_result_errorf(ctx, "%s: mode must be 'int8' or 'bf16', not '%s'",
                          fn, relattn_echo(e, mode, -1));
    return;
  }
  memset(&q, 0, sizeof q);
  rc = quantize(ctx, name, new_name, mode, &q, fn, &zErr);
  written = q.n + (q.tok != NULL); /* rows, as relattn_import counts */
  quantFree(&q);
  if (rc == SQLITE_OK) {
    sqlite3_result_int(ctx, written);
    return;
  }
  if (rc == SQLITE_NOMEM && !zErr) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  relattn_result_error(ctx, rc, zErr ? zErr : relattn_sql_errmsg(db, fn, rc));
}
