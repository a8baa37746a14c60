/*
** zero_shot.c: zero-shot classification over an NLI classifier, as
** transformers' ZeroShotClassificationPipeline does it: each candidate
** label makes a pair (text, hypothesis_template with the label in its {}),
** the classifier runs on each pair, and the entailment logits become the
** scores (src/forward.c, relattn_zero_shot_scores).
**
**   SELECT * FROM relattn_zero_shot(model, text, labels_json [, options_json])
**       -> label, score, logit      (best first; rowid is the rank from 0)
**   options: {"hypothesis_template": "This example is {}.",
**             "multi_label": false}
**
** Example:
**   SELECT label, round(score, 3) FROM relattn_zero_shot('nli',
**     'The match went to extra time.', '["sports", "politics", "cooking"]');
**
** The entailment class is the first label of the model (in id order) that
** starts with "entail", in any case, as the pipeline's entailment_id reads
** label2id; a model with none is refused. The pair is [CLS] text [SEP]
** hypothesis [SEP] (relattn_model_pair_input), text cut at its end when the
** pair is over the model's positions (the pipeline's truncation
** 'only_first'). logit is the pair's entailment logit.
*/
#include "ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

#include "functions.h"

#define FN "relattn_zero_shot"
#define DEFAULT_TEMPLATE "This example is {}."

enum { ZS_LABEL, ZS_SCORE, ZS_LOGIT, ZS_MODEL, ZS_TEXT, ZS_LABELS, ZS_OPTIONS };

typedef struct zsCursor {
  sqlite3_vtab_cursor base; /* must be first */
  char **labels;            /* (n) the candidates, in the order given */
  double *score;            /* (n) */
  float *logit;             /* (n) each pair's entailment logit */
  int *order;               /* (n) candidates best first */
  int n, row;
} zsCursor;

static int zsConnect(sqlite3 *db, void *aux, int argc,
                     const char *const *argv, sqlite3_vtab **ppVtab,
                     char **pzErr) {
  (void)argc;
  (void)argv;
  (void)pzErr;
  return relattn_tvf_connect(db, aux,
                             "CREATE TABLE x(label TEXT, score REAL, "
                             "logit REAL, model HIDDEN, text HIDDEN, "
                             "labels HIDDEN, options HIDDEN)",
                             ppVtab);
}

static int zsOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  (void)pVtab;
  return relattn_tvf_open(sizeof(zsCursor), ppCursor);
}

static void zsReset(zsCursor *c) {
  int i;
  for (i = 0; c->labels && i < c->n; i++) sqlite3_free(c->labels[i]);
  sqlite3_free(c->labels);
  sqlite3_free(c->score);
  sqlite3_free(c->logit);
  sqlite3_free(c->order);
  c->labels = NULL;
  c->score = NULL;
  c->logit = NULL;
  c->order = NULL;
  c->n = c->row = 0;
}

static int zsClose(sqlite3_vtab_cursor *cur) {
  zsReset((zsCursor *)cur);
  sqlite3_free(cur);
  return SQLITE_OK;
}

/* model, text and labels are required; options is optional. */
static int zsBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  static const int cols[] = {ZS_MODEL, ZS_TEXT, ZS_LABELS, ZS_OPTIONS};
  (void)pVtab;
  return relattn_tvf_best_index(info, cols, 4, 7, 15, 10);
}

static int zsError(zsCursor *c, int rc, char *zErr) {
  zsReset(c);
  return relattn_tvf_error(c->base.pVtab, rc, zErr);
}

/* The JSON type of text v ("array", "object", ...), or NULL when it is not
** TEXT holding valid JSON; *rc set on an SQL failure. Result freed by the
** caller. */
static char *jsonType(sqlite3 *db, sqlite3_value *v, int *rc) {
  sqlite3_stmt *st = NULL;
  char *type = NULL;
  *rc = SQLITE_OK;
  if (sqlite3_value_type(v) != SQLITE_TEXT) return NULL;
  *rc = sqlite3_prepare_v2(db,
                           "SELECT CASE WHEN json_valid(?1) THEN json_type(?1) "
                           "END",
                           -1, &st, NULL);
  if (*rc == SQLITE_OK) {
    sqlite3_bind_value(st, 1, v);
    if (sqlite3_step(st) == SQLITE_ROW) {
      if (sqlite3_column_type(st, 0) != SQLITE_NULL)
        type = sqlite3_mprintf("%s", sqlite3_column_text(st, 0));
    } else {
      *rc = sqlite3_errcode(db);
    }
  }
  sqlite3_finalize(st);
  return type;
}

/* The options: *tmpl (sqlite3_malloc'd) and *multi. */
static char *readOptions(sqlite3 *db, sqlite3_value *v, char **tmpl,
                         int *multi) {
  char e[RELATTN_ECHO_BUF];
  sqlite3_stmt *st = NULL;
  char *zErr = NULL, *type;
  int rc;
  if (sqlite3_value_type(v) == SQLITE_NULL) return NULL;
  type = jsonType(db, v, &rc);
  if (rc != SQLITE_OK) return sqlite3_mprintf("%s: %s", FN, sqlite3_errmsg(db));
  if (!type || strcmp(type, "object") != 0) {
    sqlite3_free(type);
    return sqlite3_mprintf("%s: options must be a JSON object, not '%s'", FN,
                           relattn_echo(e, sqlite3_value_text(v), -1));
  }
  sqlite3_free(type);
  if (relattn_json_has_nul((const char *)sqlite3_value_text(v)))
    return sqlite3_mprintf("%s: options hold a NUL character (\\u0000)", FN);
  rc = sqlite3_prepare_v2(db, "SELECT key, type, value FROM json_each(?1)", -1,
                          &st, NULL);
  if (rc != SQLITE_OK) return sqlite3_mprintf("%s: %s", FN, sqlite3_errmsg(db));
  sqlite3_bind_value(st, 1, v);
  while (!zErr && sqlite3_step(st) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(st, 0);
    const char *t = (const char *)sqlite3_column_text(st, 1);
    if (key && strcmp(key, "hypothesis_template") == 0) {
      if (strcmp(t, "text") != 0)
        zErr = sqlite3_mprintf("%s: options: hypothesis_template must be a "
                               "string, not %s", FN, t);
      else {
        sqlite3_free(*tmpl);
        *tmpl = sqlite3_mprintf("%s", sqlite3_column_text(st, 2));
        if (!*tmpl) zErr = sqlite3_mprintf("%s: out of memory", FN);
      }
    } else if (key && strcmp(key, "multi_label") == 0) {
      if (strcmp(t, "true") != 0 && strcmp(t, "false") != 0)
        zErr = sqlite3_mprintf("%s: options: multi_label must be true or "
                               "false, not %s", FN, t);
      else
        *multi = strcmp(t, "true") == 0;
    } else {
      zErr = sqlite3_mprintf("%s: options: unknown key '%s' (the keys are "
                             "hypothesis_template and multi_label)",
                             FN, relattn_echo(e, key, -1));
    }
  }
  sqlite3_finalize(st);
  return zErr;
}

/* The candidate labels of a JSON array of strings into c. */
static char *readLabels(sqlite3 *db, sqlite3_value *v, zsCursor *c) {
  char e[RELATTN_ECHO_BUF];
  sqlite3_stmt *st = NULL;
  char *zErr = NULL, *type;
  int rc, cap = 0;
  type = jsonType(db, v, &rc);
  if (rc != SQLITE_OK) return sqlite3_mprintf("%s: %s", FN, sqlite3_errmsg(db));
  if (!type || strcmp(type, "array") != 0) {
    sqlite3_free(type);
    if (sqlite3_value_type(v) != SQLITE_TEXT)
      return sqlite3_mprintf("%s: labels must be a JSON array of label texts "
                             "(TEXT)", FN);
    return sqlite3_mprintf("%s: labels must be a JSON array of label texts, "
                           "not '%s'", FN,
                           relattn_echo(e, sqlite3_value_text(v), -1));
  }
  sqlite3_free(type);
  if (relattn_json_has_nul((const char *)sqlite3_value_text(v)))
    return sqlite3_mprintf("%s: labels hold a NUL character (\\u0000)", FN);
  rc = sqlite3_prepare_v2(db, "SELECT type, value FROM json_each(?1)", -1, &st,
                          NULL);
  if (rc != SQLITE_OK) return sqlite3_mprintf("%s: %s", FN, sqlite3_errmsg(db));
  sqlite3_bind_value(st, 1, v);
  while (!zErr && sqlite3_step(st) == SQLITE_ROW) {
    const char *t = (const char *)sqlite3_column_text(st, 0);
    if (strcmp(t, "text") != 0) {
      zErr = sqlite3_mprintf("%s: labels[%d] must be a string, not %s", FN,
                             c->n, t);
      break;
    }
    if (c->n == cap) {
      char **more;
      cap = cap ? 2 * cap : 8;
      more = sqlite3_realloc64(c->labels, sizeof(char *) * (sqlite3_uint64)cap);
      if (!more) {
        zErr = sqlite3_mprintf("%s: out of memory", FN);
        break;
      }
      c->labels = more;
    }
    c->labels[c->n] = sqlite3_mprintf("%s", sqlite3_column_text(st, 1));
    if (!c->labels[c->n]) {
      zErr = sqlite3_mprintf("%s: out of memory", FN);
      break;
    }
    c->n++;
  }
  sqlite3_finalize(st);
  if (!zErr && c->n == 0)
    zErr = sqlite3_mprintf("%s: labels is empty: give at least one label", FN);
  return zErr;
}

/* Python's str.format(label) on the template, for the fields it supports:
** {} and {0} become the label, {{ and }} a brace. NULL with *zErr set when
** the template has another field or none. */
static char *hypothesis(const char *tmpl, const char *label, char **zErr) {
  char e[RELATTN_ECHO_BUF];
  sqlite3_str *o = sqlite3_str_new(NULL);
  const char *p = tmpl;
  int fields = 0;
  while (*p) {
    if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
      sqlite3_str_appendchar(o, 1, p[0]);
      p += 2;
    } else if (p[0] == '{' && p[1] == '}') {
      sqlite3_str_appendall(o, label);
      p += 2, fields++;
    } else if (p[0] == '{' && p[1] == '0' && p[2] == '}') {
      sqlite3_str_appendall(o, label);
      p += 3, fields++;
    } else if (p[0] == '{' || p[0] == '}') {
      sqlite3_free(sqlite3_str_finish(o));
      *zErr = sqlite3_mprintf("%s: hypothesis_template '%s' has a field "
                              "other than {} (the label), or a lone brace "
                              "(write {{ or }})",
                              FN, relattn_echo(e, tmpl, -1));
      return NULL;
    } else {
      sqlite3_str_appendchar(o, 1, *p++);
    }
  }
  if (!fields) {
    sqlite3_free(sqlite3_str_finish(o));
    *zErr = sqlite3_mprintf("%s: hypothesis_template '%s' has no {} where the "
                            "label goes",
                            FN, relattn_echo(e, tmpl, -1));
    return NULL;
  }
  return sqlite3_str_finish(o); /* NULL after an allocation failure */
}

/* The entailment class of a classifier: the first label that starts with
** "entail" in any case (the pipeline's entailment_id), or -1. */
static int entailmentId(const relattn_model *m) {
  int i;
  for (i = 0; i < m->cfg.n_labels; i++) {
    const char *l = relattn_store_label(m, i);
    if (l && sqlite3_strnicmp(l, "entail", 6) == 0) return i;
  }
  return -1;
}

/* The classifier on the pair (text, hyp) into logits (n_classes); on the
** first call checks the model (*n_classes, *entail set). */
static int runPair(relattn_tvf *v, sqlite3_value *model, sqlite3_value *text,
                   const char *hyp, float **logits, int i, int n,
                   int *n_classes, int *entail, int *null_text, char **zErr) {
  sqlite3_stmt *st = NULL;
  sqlite3_value *hv = NULL;
  relattn_call mc;
  relattn_fwd f;
  int rc;
  /* the hypothesis as an SQL value, for the shared token reader */
  rc = sqlite3_prepare_v2(v->conn->db, "SELECT ?1", -1, &st, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_bind_text(st, 1, hyp, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
      hv = sqlite3_value_dup(sqlite3_column_value(st, 0));
  }
  sqlite3_finalize(st);
  if (!hv) return SQLITE_NOMEM;
  rc = relattn_call_init_pair(v->conn, FN, model, text, hv,
                              RELATTN_NEED_CLASSIFIER, 1, &mc, zErr);
  sqlite3_value_free(hv);
  if (rc != SQLITE_OK) return rc;
  if (mc.n == 0) { /* NULL text: no rows */
    relattn_call_clear(&mc);
    *null_text = 1;
    return SQLITE_OK;
  }
  if (!*logits) {
    char e[RELATTN_ECHO_BUF];
    *n_classes = mc.m->cfg.n_labels;
    *entail = entailmentId(mc.m);
    if (*entail < 0 || *n_classes < 2) {
      *zErr = sqlite3_mprintf("%s: model '%s' has no entailment label (none "
                              "of its labels starts with 'entail'): "
                              "zero-shot classification needs an NLI model",
                              FN, relattn_echo(e, sqlite3_value_text(model), -1));
      relattn_call_clear(&mc);
      return SQLITE_ERROR;
    }
    *logits = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)n *
                               (sqlite3_uint64)*n_classes);
    if (!*logits) {
      relattn_call_clear(&mc);
      return SQLITE_NOMEM;
    }
  }
  rc = relattn_call_memory(&mc, FN, 0, zErr);
  if (rc == SQLITE_OK) {
    memset(&f, 0, sizeof f);
    f.logits = *logits + (size_t)i * (size_t)*n_classes;
    rc = relattn_call_run(&mc, FN, &f, zErr);
  }
  relattn_call_clear(&mc);
  return rc;
}

static int zsFilter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv) {
  zsCursor *c = (zsCursor *)cur;
  relattn_tvf *v = (relattn_tvf *)cur->pVtab;
  sqlite3 *db = v->conn->db;
  char *zErr = NULL, *tmpl;
  float *logits = NULL;
  int rc = SQLITE_OK, multi = 0, i, n_classes = 0, entail = -1, null_text = 0;
  (void)idxStr;
  (void)argc;
  zsReset(c);
  if ((idxNum & 7) != 7)
    return zsError(c, SQLITE_ERROR,
                   sqlite3_mprintf("%s: model, text and labels arguments are "
                                   "required", FN));
  if (sqlite3_value_type(argv[0]) != SQLITE_TEXT)
    return zsError(c, SQLITE_ERROR, relattn_bad_model_msg(FN));
  tmpl = sqlite3_mprintf("%s", DEFAULT_TEMPLATE);
  if (!tmpl) return SQLITE_NOMEM;
  if (idxNum & 8) zErr = readOptions(db, argv[3], &tmpl, &multi);
  if (!zErr) zErr = readLabels(db, argv[2], c);
  if (zErr) {
    sqlite3_free(tmpl);
    return zsError(c, SQLITE_ERROR, zErr);
  }
  for (i = 0; i < c->n && rc == SQLITE_OK && !null_text; i++) {
    char *hyp = hypothesis(tmpl, c->labels[i], &zErr);
    if (!hyp) {
      rc = zErr ? SQLITE_ERROR : SQLITE_NOMEM;
      break;
    }
    rc = runPair(v, argv[0], argv[1], hyp, &logits, i, c->n, &n_classes,
                 &entail, &null_text, &zErr);
    sqlite3_free(hyp);
  }
  sqlite3_free(tmpl);
  if (rc != SQLITE_OK || null_text) {
    sqlite3_free(logits);
    if (rc == SQLITE_OK) {
      zsReset(c);
      return SQLITE_OK;
    }
    return zErr ? zsError(c, rc, zErr) : (zsReset(c), rc);
  }
  c->score = sqlite3_malloc64(sizeof(double) * (sqlite3_uint64)c->n);
  c->logit = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)c->n);
  c->order = sqlite3_malloc64(sizeof(int) * (sqlite3_uint64)c->n);
  if (!c->score || !c->logit || !c->order) {
    sqlite3_free(logits);
    zsReset(c);
    return SQLITE_NOMEM;
  }
  for (i = 0; i < c->n; i++)
    c->logit[i] = logits[(size_t)i * n_classes + entail];
  relattn_zero_shot_scores(c->score, c->order, logits, c->n, n_classes,
                           entail, multi);
  sqlite3_free(logits);
  return SQLITE_OK;
}

static int zsNext(sqlite3_vtab_cursor *cur) {
  ((zsCursor *)cur)->row++;
  return SQLITE_OK;
}

static int zsEof(sqlite3_vtab_cursor *cur) {
  zsCursor *c = (zsCursor *)cur;
  return !c->order || c->row >= c->n;
}

static int zsColumn(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  zsCursor *c = (zsCursor *)cur;
  int k = c->order[c->row];
  switch (col) {
    case ZS_LABEL:
      sqlite3_result_text(ctx, c->labels[k], -1, SQLITE_TRANSIENT);
      break;
    case ZS_SCORE: sqlite3_result_double(ctx, c->score[k]); break;
    case ZS_LOGIT: sqlite3_result_double(ctx, c->logit[k]); break;
    default: break; /* hidden arguments: NULL */
  }
  return SQLITE_OK;
}

static int zsRowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  *pRowid = ((zsCursor *)cur)->row;
  return SQLITE_OK;
}

sqlite3_module relattn_zero_shot_module = {
    0,            /* iVersion */
    0,            /* xCreate: eponymous only */
    zsConnect,    /* xConnect */
    zsBestIndex,  /* xBestIndex */
    relattn_tvf_disconnect, /* xDisconnect */
    0,            /* xDestroy */
    zsOpen,       /* xOpen */
    zsClose,      /* xClose */
    zsFilter,     /* xFilter */
    zsNext,       /* xNext */
    zsEof,        /* xEof */
    zsColumn,     /* xColumn */
    zsRowid,      /* xRowid */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 /* xUpdate .. xShadowName */
};
