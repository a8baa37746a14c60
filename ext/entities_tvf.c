/*
** entities_tvf.c: a token classifier (head token_classifier: Hugging
** Face's BertForTokenClassification, DebertaV2ForTokenClassification) as
** transformers' token-classification pipeline reports it: tokens, words or
** entities with their character offsets in the text (src/entities.c).
**
**   SELECT * FROM relattn_token_labels(model, text [, aggregation
**                                      [, ignore_labels_json]])
**       -> entity, score, word, start, end, token_index
**   aggregation: 'none' (the default: a row per token), 'simple', 'first',
**   'average', 'max'; ignore_labels: a JSON array, '["O"]' by default
**
** Example:
**   SELECT entity, word, start, end FROM relattn_token_labels('ner',
**     'Ada Lovelace was born in London.', 'simple');
**
** start and end are character offsets ([start, end), from 0) into text:
** substr(text, start + 1, end - start) is what a row covers. entity is the
** token's label with 'none', else the group's (entity_group: the label past
** its B- / I-); token_index is the token's index in the model's input
** ([CLS] is 0) with 'none', else NULL.
*/
#include "ext.h"
SQLITE_EXTENSION_INIT3

#include <stdlib.h>
#include <string.h>

#include "functions.h"

#define FN "relattn_token_labels"

enum { TL_ENTITY, TL_SCORE, TL_WORD, TL_START, TL_END, TL_INDEX, TL_MODEL,
       TL_TEXT, TL_AGG, TL_IGNORE };

typedef struct tlCursor {
  sqlite3_vtab_cursor base; /* must be first */
  relattn_entity *e;        /* (n) */
  int n, row;
  char **labels;            /* the model's label names (copies), n_labels */
  int n_labels;
} tlCursor;

static int tlConnect(sqlite3 *db, void *aux, int argc,
                     const char *const *argv, sqlite3_vtab **ppVtab,
                     char **pzErr) {
  (void)argc;
  (void)argv;
  (void)pzErr;
  return relattn_tvf_connect(db, aux,
                             "CREATE TABLE x(entity TEXT, score REAL, "
                             "word TEXT, start INTEGER, \"end\" INTEGER, "
                             "token_index INTEGER, model HIDDEN, text HIDDEN, "
                             "aggregation HIDDEN, ignore_labels HIDDEN)",
                             ppVtab);
}

static int tlOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  (void)pVtab;
  return relattn_tvf_open(sizeof(tlCursor), ppCursor);
}

static void tlReset(tlCursor *c) {
  int i;
  relattn_entities_free(c->e, c->n);
  for (i = 0; c->labels && i < c->n_labels; i++) sqlite3_free(c->labels[i]);
  sqlite3_free(c->labels);
  c->e = NULL;
  c->labels = NULL;
  c->n = c->row = c->n_labels = 0;
}

static int tlClose(sqlite3_vtab_cursor *cur) {
  tlReset((tlCursor *)cur);
  sqlite3_free(cur);
  return SQLITE_OK;
}

/* model and text are required; aggregation and ignore_labels optional. */
static int tlBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  static const int cols[] = {TL_MODEL, TL_TEXT, TL_AGG, TL_IGNORE};
  (void)pVtab;
  return relattn_tvf_best_index(info, cols, 4, 3, 15, 100);
}

static int tlError(tlCursor *c, int rc, char *zErr) {
  tlReset(c);
  return relattn_tvf_error(c->base.pVtab, rc, zErr);
}

/* The aggregation argument: RELATTN_AGG_*, or -1. */
static int aggParse(sqlite3_value *v) {
  static const char *const names[] = {"none", "simple", "first", "average",
                                      "max"};
  const char *s = (const char *)sqlite3_value_text(v);
  int i;
  if (sqlite3_value_type(v) != SQLITE_TEXT || !s) return -1;
  for (i = 0; i < 5; i++)
    if (sqlite3_stricmp(s, names[i]) == 0) return i;
  return -1;
}

/* ignore_labels: a JSON array of strings into *out (sqlite3_malloc'd
** strings), or the message. */
static char *readIgnore(sqlite3 *db, sqlite3_value *v, char ***out, int *n) {
  char e[RELATTN_ECHO_BUF];
  sqlite3_stmt *st = NULL;
  char *zErr = NULL;
  int rc, cap = 0, ok = 0;
  *out = NULL;
  *n = 0;
  if (sqlite3_value_type(v) == SQLITE_TEXT &&
      !relattn_json_has_nul((const char *)sqlite3_value_text(v))) {
    rc = sqlite3_prepare_v2(db,
                            "SELECT json_valid(?1) AND json_type(?1) = "
                            "'array'",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) return sqlite3_mprintf("%s: %s", FN, sqlite3_errmsg(db));
    sqlite3_bind_value(st, 1, v);
    ok = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    st = NULL;
  }
  if (!ok)
    return sqlite3_mprintf("%s: ignore_labels must be a JSON array of label "
                           "names, not '%s'",
                           FN, sqlite3_value_type(v) == SQLITE_NULL
                                   ? "NULL"
                                   : relattn_echo(e, sqlite3_value_text(v), -1));
  rc = sqlite3_prepare_v2(db, "SELECT type, value FROM json_each(?1)", -1, &st,
                          NULL);
  if (rc != SQLITE_OK) return sqlite3_mprintf("%s: %s", FN, sqlite3_errmsg(db));
  sqlite3_bind_value(st, 1, v);
  while (!zErr && sqlite3_step(st) == SQLITE_ROW) {
    if (strcmp((const char *)sqlite3_column_text(st, 0), "text") != 0) {
      zErr = sqlite3_mprintf("%s: ignore_labels[%d] must be a string, not %s",
                             FN, *n, sqlite3_column_text(st, 0));
      break;
    }
    if (*n == cap) {
      char **more;
      cap = cap ? 2 * cap : 8;
      more = sqlite3_realloc64(*out, sizeof(char *) * (sqlite3_uint64)cap);
      if (!more) {
        zErr = sqlite3_mprintf("%s: out of memory", FN);
        break;
      }
      *out = more;
    }
    (*out)[*n] = sqlite3_mprintf("%s", sqlite3_column_text(st, 1));
    if (!(*out)[*n]) {
      zErr = sqlite3_mprintf("%s: out of memory", FN);
      break;
    }
    (*n)++;
  }
  sqlite3_finalize(st);
  return zErr;
}

static const uint8_t *tokenText(void *ctx, int32_t id, size_t *len) {
  return relattn_tokenizer_id_text((const relattn_tokenizer *)ctx, id, len);
}

/* A special id of the config (the template's and the tokenizer's marks):
** the pipeline's special_tokens_mask leaves them out. */
static int isSpecial(const relattn_config *c, int32_t id) {
  return id == c->bos || id == c->eos || id == c->pad || id == c->append ||
         id == c->sep || id == c->mask;
}

static int tlFilter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv) {
  tlCursor *c = (tlCursor *)cur;
  relattn_tvf *v = (relattn_tvf *)cur->pVtab;
  const relattn_config *cfg;
  relattn_call mc;
  relattn_fwd f;
  relattn_entities_in in;
  char *zErr = NULL, **ignore = NULL, e[RELATTN_ECHO_BUF];
  int32_t *ids = NULL, *kept_ids = NULL;
  uint32_t *spans = NULL, *kept_spans = NULL;
  int *index = NULL, n_ignore = 0, strategy = RELATTN_AGG_NONE, a = 2;
  int rc, i, k, L;
  size_t n_ids = 0;
  float *logits = NULL, *kept_logits = NULL;
  sqlite3_uint64 cells;
  static char *const default_ignore[] = {"O"};
  (void)idxStr;
  (void)argc;
  tlReset(c);
  if ((idxNum & 3) != 3)
    return tlError(c, SQLITE_ERROR,
                   sqlite3_mprintf("%s: model and text arguments are required",
                                   FN));
  if (idxNum & 4) {
    sqlite3_value *av = argv[a++];
    strategy = aggParse(av);
    if (strategy < 0)
      return tlError(c, SQLITE_ERROR,
                     sqlite3_mprintf("%s: aggregation must be 'none', "
                                     "'simple', 'first', 'average' or 'max', "
                                     "not '%s'",
                                     FN, sqlite3_value_type(av) == SQLITE_NULL
                                             ? "NULL"
                                             : relattn_echo(e, sqlite3_value_text(av), -1)));
  }
  if (idxNum & 8) {
    zErr = readIgnore(v->conn->db, argv[a++], &ignore, &n_ignore);
    if (zErr) goto fail_ignore;
  }
  if (sqlite3_value_type(argv[1]) != SQLITE_TEXT &&
      sqlite3_value_type(argv[1]) != SQLITE_NULL) {
    zErr = sqlite3_mprintf("%s: text must be TEXT (the offsets are into the "
                           "text), not a token BLOB",
                           FN);
    goto fail_ignore;
  }
  rc = relattn_call_init_named(v->conn, FN, argv[0], argv[1], "text",
                               RELATTN_NEED_ANY, &mc, &zErr);
  if (rc != SQLITE_OK) {
    for (i = 0; i < n_ignore; i++) sqlite3_free(ignore[i]);
    sqlite3_free(ignore);
    return zErr ? tlError(c, rc, zErr) : (tlReset(c), rc);
  }
  if (mc.n == 0) { /* NULL text: no rows */
    for (i = 0; i < n_ignore; i++) sqlite3_free(ignore[i]);
    sqlite3_free(ignore);
    return SQLITE_OK;
  }
  cfg = &mc.m->cfg;
  L = cfg->n_labels;
  if (cfg->head != RELATTN_HEAD_TOKEN) {
    zErr = sqlite3_mprintf("%s: model '%s' has no token classifier head (its "
                           "head is '%s')",
                           FN, relattn_echo(e, sqlite3_value_text(argv[0]), -1),
                           relattn_head_name(cfg->head));
    rc = SQLITE_ERROR;
    goto done;
  }
  /* the spans: the same tokens again, with where each came from */
  rc = relattn_tokenizer_encode_spans(
      mc.m->tok, sqlite3_value_text(argv[1]),
      (size_t)sqlite3_value_bytes(argv[1]), (size_t)v->conn->max_tokens,
      &ids, &spans, &n_ids);
  if (rc != RELATTN_OK || n_ids != (size_t)(mc.n - mc.bos - (cfg->append >= 0)) ||
      memcmp(ids, mc.input + mc.bos, n_ids * sizeof *ids) != 0) {
    /* cannot be: the same tokenizer on the same text */
    zErr = sqlite3_mprintf("%s: %s", FN,
                           rc == RELATTN_OK ? "the text's offsets do not "
                                              "match its tokens"
                           : rc == RELATTN_ERR_TOOBIG
                               ? "text has more tokens than relattn_max_tokens()"
                               : "out of memory for offsets");
    rc = rc == RELATTN_OK            ? SQLITE_INTERNAL
         : rc == RELATTN_ERR_TOOBIG ? SQLITE_TOOBIG
                                     : SQLITE_NOMEM;
    goto done;
  }
  cells = (sqlite3_uint64)mc.n * (sqlite3_uint64)L;
  rc = relattn_call_memory(&mc, FN, 2 * sizeof(float) * cells, &zErr);
  if (rc != SQLITE_OK) goto done;
  logits = sqlite3_malloc64(sizeof(float) * cells);
  kept_logits = sqlite3_malloc64(sizeof(float) * cells);
  kept_ids = sqlite3_malloc64(sizeof(int32_t) * (n_ids + 1));
  kept_spans = sqlite3_malloc64(2 * sizeof(uint32_t) * (n_ids + 1));
  index = sqlite3_malloc64(sizeof(int) * (n_ids + 1));
  c->labels = sqlite3_malloc64(sizeof(char *) * (sqlite3_uint64)L);
  if (!logits || !kept_logits || !kept_ids || !kept_spans || !index ||
      !c->labels) {
    rc = SQLITE_NOMEM;
    goto done;
  }
  memset(c->labels, 0, sizeof(char *) * (size_t)L);
  c->n_labels = L;
  for (i = 0; i < L; i++)
    if (!(c->labels[i] = sqlite3_mprintf("%s", relattn_store_label(mc.m, i)))) {
      rc = SQLITE_NOMEM;
      goto done;
    }
  memset(&f, 0, sizeof f);
  f.token_logits = logits;
  rc = relattn_call_run(&mc, FN, &f, &zErr);
  if (rc != SQLITE_OK) goto done;
  /* the text's tokens, the special ones left out as the pipeline does */
  for (i = 0, k = 0; i < (int)n_ids; i++) {
    if (isSpecial(cfg, ids[i])) continue;
    kept_ids[k] = ids[i];
    kept_spans[2 * k] = spans[2 * i];
    kept_spans[2 * k + 1] = spans[2 * i + 1];
    memcpy(kept_logits + (size_t)k * L, logits + (size_t)(mc.bos + i) * L,
           sizeof(float) * (size_t)L);
    index[k++] = mc.bos + i;
  }
  memset(&in, 0, sizeof in);
  in.text = sqlite3_value_text(argv[1]);
  in.text_n = (size_t)sqlite3_value_bytes(argv[1]);
  in.ids = kept_ids;
  in.spans = kept_spans;
  in.logits = kept_logits;
  in.n = k;
  in.n_labels = L;
  in.index = index;
  in.labels = (const char *const *)c->labels;
  in.kind = relattn_tokenizer_kind(mc.m->tok);
  in.unk = cfg->unk;
  in.strategy = strategy;
  in.ignore = (const char *const *)(ignore ? ignore : default_ignore);
  in.n_ignore = ignore || (idxNum & 8) ? n_ignore : 1;
  in.token_text = tokenText;
  in.ctx = (void *)mc.m->tok;
  rc = relattn_entities_make(&in, &c->e, &c->n) == RELATTN_OK ? SQLITE_OK
                                                              : SQLITE_NOMEM;
done:
  relattn_call_clear(&mc);
  free(ids);
  free(spans);
  sqlite3_free(logits);
  sqlite3_free(kept_logits);
  sqlite3_free(kept_ids);
  sqlite3_free(kept_spans);
  sqlite3_free(index);
  for (i = 0; i < n_ignore; i++) sqlite3_free(ignore[i]);
  sqlite3_free(ignore);
  if (rc != SQLITE_OK) return zErr ? tlError(c, rc, zErr) : (tlReset(c), rc);
  return SQLITE_OK;
fail_ignore:
  for (i = 0; i < n_ignore; i++) sqlite3_free(ignore[i]);
  sqlite3_free(ignore);
  return tlError(c, SQLITE_ERROR, zErr);
}

static int tlNext(sqlite3_vtab_cursor *cur) {
  ((tlCursor *)cur)->row++;
  return SQLITE_OK;
}

static int tlEof(sqlite3_vtab_cursor *cur) {
  tlCursor *c = (tlCursor *)cur;
  return c->row >= c->n;
}

static int tlColumn(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  tlCursor *c = (tlCursor *)cur;
  const relattn_entity *e = &c->e[c->row];
  switch (col) {
    case TL_ENTITY:
      sqlite3_result_text(ctx, e->group ? e->group : c->labels[e->label], -1,
                          SQLITE_TRANSIENT);
      break;
    case TL_SCORE: sqlite3_result_double(ctx, e->score); break;
    case TL_WORD: sqlite3_result_text(ctx, e->word, -1, SQLITE_TRANSIENT); break;
    case TL_START: sqlite3_result_int64(ctx, e->start); break;
    case TL_END: sqlite3_result_int64(ctx, e->end); break;
    case TL_INDEX:
      if (e->index >= 0) sqlite3_result_int(ctx, e->index);
      break;
    default: break; /* hidden arguments: NULL */
  }
  return SQLITE_OK;
}

static int tlRowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  *pRowid = ((tlCursor *)cur)->row;
  return SQLITE_OK;
}

sqlite3_module relattn_token_labels_module = {
    0,            /* iVersion */
    0,            /* xCreate: eponymous only */
    tlConnect,    /* xConnect */
    tlBestIndex,  /* xBestIndex */
    relattn_tvf_disconnect, /* xDisconnect */
    0,            /* xDestroy */
    tlOpen,       /* xOpen */
    tlClose,      /* xClose */
    tlFilter,     /* xFilter */
    tlNext,       /* xNext */
    tlEof,        /* xEof */
    tlColumn,     /* xColumn */
    tlRowid,      /* xRowid */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 /* xUpdate .. xShadowName */
};
