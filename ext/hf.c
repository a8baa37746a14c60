/*
** hf.c: Hugging Face checkpoints for relattn_import. A config with
** "model_type" (and no native "arch") is HF's config.json; this file maps
** the checkpoint onto the native model: a native config (with a "source"
** key naming where it came from), each HF tensor renamed to its native
** name or left out, and the tokenizer's special ids.
**
**   SELECT relattn_import('nli', readfile('model.safetensors'),
**                         readfile('config.json'), readfile('spm.model'),
**                         readfile('tokenizer_config.json'));
**
** HOW IT WORKS
** A family is one relattn_hf_family (ext/hf.h), in a file of its own
** (ext/hf_bert.c, hf_deberta.c, hf_t5.c): how its config.json is told
** (model_type) and its classes, its tensor-name rules, its config keys and
** the native keys they make, its tokenizer's defaults. The rest of the
** mapping, here and in ext/hf_tokenizer.c (the tokenizer's file and special
** ids), is the same for every family. The next family is one more such
** file, an entry in families[] below, and its tests.
**
** The family comes from model_type: bert (position_embedding_type
** relative_key or relative_key_query), deberta-v2 (v2 and v3 configs) and
** t5 / mt5 (the encoder). The head comes from architectures[0] (*Model:
** none, *ForMaskedLM: mlm, *ForSequenceClassification: classifier), or,
** without architectures, from the head tensors the file has. Each tensor
** name, with or without the base model's prefix ("bert.", "deberta."),
** is looked up in the family's table of HF names (the module paths of
** transformers' modeling_bert.py, modeling_deberta_v2.py, modeling_t5.py);
** a name no table knows is refused, naming it. Tensors HF itself ignores
** when loading that class (BERT's unused position_embeddings, a pooler
** under a masked-LM head, T5's decoder under T5ForConditionalGeneration)
** are left out. The data is stored as given, except T5's bias table,
** which HF keeps as [num_buckets, heads] and relattn as [heads,
** num_buckets]: it is transposed. Everything is decided before the caller
** writes anything.
*/
#include "ext.h"
#include "functions.h"
#include "hf.h"

#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

#define FN "relattn_import"

/* ---- small helpers -------------------------------------------------------- */

/* HF's hidden_act names -> the native activation, or NULL. */
const char *relattn_hf_activation(const char *hf) {
  if (!hf || strcmp(hf, "gelu") == 0) return "gelu";
  if (strcmp(hf, "gelu_new") == 0 || strcmp(hf, "gelu_pytorch_tanh") == 0 ||
      strcmp(hf, "gelu_fast") == 0)
    return "gelu_tanh";
  if (strcmp(hf, "relu") == 0) return "relu";
  if (strcmp(hf, "tanh") == 0) return "tanh";
  return NULL;
}

/* ---- the tensor names ------------------------------------------------------ */

/* Does name match rule hf? *layer gets the "{i}" number (-1 when none). */
static int ruleMatch(const char *hf, const char *name, int *layer) {
  const char *brace = strstr(hf, "{i}");
  size_t pre;
  long v = 0;
  const char *p;
  *layer = -1;
  if (!brace) return strcmp(hf, name) == 0;
  pre = (size_t)(brace - hf);
  if (strncmp(hf, name, pre) != 0) return 0;
  p = name + pre;
  if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
    return 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    v = 10 * v + (*p - '0');
    if (v > 1 << 20) return 0;
  }
  if (strcmp(p, brace + 3) != 0) return 0;
  *layer = (int)v;
  return 1;
}

/* The native name of rule native for layer (sqlite3_malloc'd). */
static char *nativeName(const char *native, int layer) {
  const char *brace = strstr(native, "{i}");
  if (!brace) return sqlite3_mprintf("%s", native);
  return sqlite3_mprintf("%.*s%d%s", (int)(brace - native), native, layer,
                         brace + 3);
}

/* ---- the checkpoint ---------------------------------------------------------- */

static void modelFree(relattn_hf_model *m) {
  int i;
  sqlite3_free(m->model_type);
  sqlite3_free(m->cls);
  for (i = 0; i < m->n_labels; i++) sqlite3_free(m->labels[i]);
  sqlite3_free(m->labels);
  sqlite3_free(m->problem_type);
}

/* Strips the base model's prefix ("bert.", "deberta.") from a name. */
static const char *stripPrefix(const relattn_hf_model *m, const char *name) {
  const char *p = m->fam->prefix;
  if (p && strncmp(name, p, strlen(p)) == 0) return name + strlen(p);
  return name;
}

/* Looks name up in the family's rules: 1 with *native (NULL: left out) and
** *layer, or 0 when no rule knows it. */
static int lookupName(const relattn_hf_model *m, const char *name,
                      const char **native, int *layer) {
  const relattn_hf_rule *r = m->fam->rules;
  const char *s = stripPrefix(m, name);
  for (; r->hf; r++)
    if (ruleMatch(r->hf, s, layer)) {
      /* a decoder layer's number is checked against the decoder's */
      int dec = r->native && strncmp(r->native, "dec.", 4) == 0;
      if (dec && !m->dec_layers) break; /* not imported: left out or not */
      if (*layer >= (dec ? m->dec_layers : m->layers)) return 0;
      *native = r->native;
      return 1;
    }
  if (m->fam->left_out && m->fam->left_out(m, name)) {
    *native = NULL;
    *layer = -1;
    return 1;
  }
  return 0;
}

/* Has the checkpoint a tensor named stripped (its prefix stripped)? */
int relattn_hf_has_tensor(const relattn_st_tensor *t, int n,
                          const relattn_hf_model *m, const char *stripped) {
  int i;
  for (i = 0; i < n; i++)
    if (strcmp(stripPrefix(m, t[i].name), stripped) == 0) return 1;
  return 0;
}

/* Is s one of the choices "a|b|c"? */
static int oneOf(const char *choices, const char *s, size_t n) {
  const char *p = choices;
  for (;;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncmp(p, s, n) == 0) return 1;
    if (!bar) return 0;
    p = bar + 1;
  }
}

/* ---- the table ---------------------------------------------------------------- */

/* The families relattn_import knows, told by model_type. */
static const relattn_hf_family *const families[] = {
    &relattn_hf_bert, &relattn_hf_deberta, &relattn_hf_t5};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

/* A classifier's labels: id2label, else HF's default. */
static int readLabels(relattn_jdoc *j, relattn_hf_model *m, char **pzErr) {
  /* labels: id2label in id order, ids 0..L-1 each once */
  sqlite3_stmt *st = NULL;
  int rc, k;
  const char *type = relattn_jdoc_step(j, "id2label");
  if (!type) goto out;
  if (strcmp(type, "null") != 0 && strcmp(type, "object") != 0) {
    relattn_jdoc_bad(j, "id2label", "an object", type);
    goto out;
  }
  if (strcmp(type, "object") == 0) {
    /* each label as written too: see relattn_json_has_nul */
    rc = sqlite3_prepare_v2(j->db,
                            "SELECT key, type, value, json_extract(?1, "
                            "fullkey, fullkey) FROM json_each(?1, "
                            "'$.id2label')",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) {
      j->rc = rc;
      *pzErr = relattn_sql_errmsg(j->db, FN, rc);
      goto out;
    }
    sqlite3_bind_text(st, 1, j->json, -1, SQLITE_STATIC);
    while (sqlite3_step(st) == SQLITE_ROW) m->n_labels++;
    sqlite3_reset(st);
    m->labels = sqlite3_malloc64(sizeof *m->labels *
                                 ((sqlite3_uint64)m->n_labels + 1));
    if (!m->labels) {
      sqlite3_finalize(st);
      j->rc = SQLITE_NOMEM;
      goto out;
    }
    memset(m->labels, 0, sizeof *m->labels * ((size_t)m->n_labels + 1));
    while (sqlite3_step(st) == SQLITE_ROW) {
      const char *key = (const char *)sqlite3_column_text(st, 0);
      const char *vt = (const char *)sqlite3_column_text(st, 1);
      long id = 0;
      const char *p = key ? key : "";
      char e[RELATTN_ECHO_BUF];
      for (; *p >= '0' && *p <= '9' && id <= m->n_labels; p++)
        id = 10 * id + (*p - '0');
      if (!key || !*key || *p || id >= m->n_labels || m->labels[id] ||
          !vt || strcmp(vt, "text") != 0) {
        *pzErr = sqlite3_mprintf(
            "%s: config_json: id2label must map the ids 0 to %d to "
            "strings, not '%s'",
            FN, m->n_labels - 1, relattn_echo(e, key, -1));
        sqlite3_finalize(st);
        goto fail;
      }
      if (relattn_json_has_nul((const char *)sqlite3_column_text(st, 3))) {
        *pzErr = sqlite3_mprintf("%s: config_json: label %ld of id2label"
                                 RELATTN_NUL_MSG, FN, id);
        sqlite3_finalize(st);
        goto fail;
      }
      m->labels[id] =
          sqlite3_mprintf("%s", (const char *)sqlite3_column_text(st, 2));
      if (!m->labels[id]) {
        sqlite3_finalize(st);
        j->rc = SQLITE_NOMEM;
        goto out;
      }
    }
    sqlite3_finalize(st);
  }
  if (m->n_labels == 0) {
    /* HF's default: LABEL_0, LABEL_1 */
    m->labels = sqlite3_malloc64(2 * sizeof *m->labels);
    if (!m->labels) {
      j->rc = SQLITE_NOMEM;
      goto out;
    }
    m->n_labels = 2;
    for (k = 0; k < 2; k++) {
      m->labels[k] = sqlite3_mprintf("LABEL_%d", k);
      if (!m->labels[k]) {
        j->rc = SQLITE_NOMEM;
        goto out;
      }
    }
  }
  m->problem_type = relattn_jdoc_str(j, "problem_type", 0);
  if (j->rc) goto out;
  if (!m->problem_type) /* HF's forward: one label is a regression */
    m->problem_type = sqlite3_mprintf(m->n_labels == 1
                                          ? "regression"
                                          : "single_label_classification");
  if (!m->problem_type) {
    j->rc = SQLITE_NOMEM;
    goto out;
  }
out:
  return j->rc;
fail:
  return SQLITE_ERROR;
}

/* Reads config.json into m, refusing what the native model cannot run:
** model_type (the family), architectures[0] (the head), the family's own
** keys, a classifier's labels. */
static int readConfig(relattn_jdoc *j, relattn_hf_model *m,
                      const relattn_st_tensor *t, int n, char **pzErr) {
  const relattn_hf_family *f = NULL;
  int i, rc;
  m->head = RELATTN_HEAD_NONE;
  m->model_type = relattn_jdoc_str(j, "model_type", 0);
  if (j->rc) return j->rc;
  if (!m->model_type) {
    *pzErr = sqlite3_mprintf("%s: config_json: 'model_type' must be a string",
                             FN);
    return SQLITE_ERROR;
  }
  for (i = 0; i < N_FAMILIES && !f; i++)
    if (oneOf(families[i]->model_types, m->model_type,
              strlen(m->model_type)))
      f = families[i];
  if (!f) {
    sqlite3_str *known = sqlite3_str_new(j->db);
    char e[RELATTN_ECHO_BUF], *list;
    for (i = 0; i < N_FAMILIES; i++)
      sqlite3_str_appendf(known, "%s%s", i ? ", " : "", families[i]->types_msg);
    list = sqlite3_str_finish(known);
    if (!list) return SQLITE_NOMEM;
    *pzErr = sqlite3_mprintf("%s: model_type '%s' is not supported; the known "
                             "ones are %s",
                             FN, relattn_echo(e, m->model_type, -1), list);
    sqlite3_free(list);
    return SQLITE_ERROR;
  }
  m->fam = f;
  m->family = i - 1;

  /* the class, and from it the head */
  {
    const char *type = relattn_jdoc_step(j, "$.architectures[0]");
    if (!type) return j->rc;
    if (strcmp(type, "null") != 0) {
      if (strcmp(type, "text") != 0) {
        relattn_jdoc_bad(j, "architectures", "an array of strings", type);
        return j->rc;
      }
      if (relattn_jdoc_nul(j, "'architectures[0]'")) return j->rc;
      m->cls = sqlite3_mprintf("%s", sqlite3_column_text(j->st, 1));
      if (!m->cls) return SQLITE_NOMEM;
    }
  }
  if (m->cls) {
    const relattn_hf_class *c = NULL;
    const char *p = f->class_prefixes;
    for (;;) { /* the prefix, then the class past it */
      const char *bar = strchr(p, '|');
      size_t len = bar ? (size_t)(bar - p) : strlen(p);
      if (strncmp(m->cls, p, len) == 0)
        for (c = f->classes; c->suffix; c++)
          if (strcmp(m->cls + len, c->suffix) == 0) break;
      if ((c && c->suffix) || !bar) break;
      p = bar + 1;
    }
    if (!c || !c->suffix) {
      char e[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("%s: architectures[0] '%s' is not supported; "
                               "the known ones are %s",
                               FN, relattn_echo(e, m->cls, -1),
                               f->classes_msg);
      return SQLITE_ERROR;
    }
    m->head = c->head;
  } else if (f->heads_from_tensors) {
    /* no class: the head whose tensors are there */
    if (relattn_hf_has_tensor(t, n, m, "classifier.weight"))
      m->head = RELATTN_HEAD_CLASSIFIER;
    else if (relattn_hf_has_tensor(t, n, m, "cls.predictions.bias") ||
             relattn_hf_has_tensor(t, n, m, "cls.predictions.decoder.bias") ||
             relattn_hf_has_tensor(t, n, m, "lm_predictions.lm_head.bias"))
      m->head = RELATTN_HEAD_MLM;
  }

  rc = f->read(j, m, t, n, pzErr);
  if (rc == SQLITE_OK && RELATTN_HEAD_HAS_LABELS(m->head))
    rc = readLabels(j, m, pzErr);
  return rc;
}

/* ---- the native config --------------------------------------------------------- */

static void idKey(sqlite3_str *o, const char *key, int id) {
  if (id >= 0)
    sqlite3_str_appendf(o, ", \"%s\": %d", key, id);
  else
    sqlite3_str_appendf(o, ", \"%s\": null", key);
}

static char *nativeConfig(sqlite3 *db, const relattn_hf_model *m,
                          const relattn_hf_tok *k) {
  sqlite3_str *o = sqlite3_str_new(db);
  int i;
  sqlite3_str_appendf(o,
                      "{\"arch\": \"encoder\", \"vocab_size\": %d, "
                      "\"d_model\": %d, \"n_layers\": %d, \"n_heads\": %d, "
                      "\"d_ff\": %d, \"norm\": \"%s\", \"norm_eps\": %.15g, ",
                      m->vocab, m->d, m->layers, m->heads, m->ff,
                      m->fam->norm, m->eps);
  if (m->d_head) sqlite3_str_appendf(o, "\"d_head\": %d, ", m->d_head);
  if (m->fam->native_shape) m->fam->native_shape(o, m);
  sqlite3_str_appendf(o, "\"activation\": \"%s\", \"tie_embeddings\": %s, ",
                      m->act,
                      (m->head == RELATTN_HEAD_MLM ||
                       m->head == RELATTN_HEAD_LM) && !m->tied
                          ? "false"
                          : "true");
  if (m->dec_layers)
    sqlite3_str_appendf(o,
                        "\"decoder\": {\"n_layers\": %d, \"start\": %d}, ",
                        m->dec_layers, m->dec_start);
  if (m->fam->emb_norm)
    sqlite3_str_appendf(o,
                        "\"embedding\": {\"norm\": true, \"token_types\": "
                        "%d}, ",
                        m->types);
  m->fam->native_position(o, m);
  sqlite3_str_appendf(o, "\"head\": \"%s\", ",
                      relattn_head_name(m->head));
  if (m->head == RELATTN_HEAD_MLM)
    sqlite3_str_appendf(o, "\"head_activation\": \"%s\", ", m->head_act);
  if (m->pooler_act)
    sqlite3_str_appendf(o, "\"pooler\": {\"activation\": \"%s\"}, ",
                        m->pooler_act);
  if (RELATTN_HEAD_HAS_LABELS(m->head)) {
    sqlite3_str_appendf(o, "\"labels\": [");
    for (i = 0; i < m->n_labels; i++) {
      if (i) sqlite3_str_appendf(o, ", ");
      relattn_json_string(o, m->labels[i]);
    }
    sqlite3_str_appendf(o, "], ");
  }
  if (m->head == RELATTN_HEAD_CLASSIFIER) {
    sqlite3_str_appendf(o, "\"problem_type\": ");
    relattn_json_string(o, m->problem_type);
    sqlite3_str_appendf(o, ", ");
  }
  sqlite3_str_appendf(o, "\"tokenizer\": {\"type\": \"%s\"",
                      relattn_tokenizer_kind_name(k->kind));
  idKey(o, "bos", k->bos);
  idKey(o, "eos", k->eos);
  idKey(o, "pad", k->pad);
  idKey(o, "append", k->append);
  idKey(o, "sep", k->sep);
  idKey(o, "mask", k->mask);
  idKey(o, "unk", k->unk);
  if (k->kind == RELATTN_TOK_WORDPIECE) {
    sqlite3_str_appendf(o, ", \"do_lower_case\": %s",
                        k->lower ? "true" : "false");
    if (k->strip >= 0)
      sqlite3_str_appendf(o, ", \"strip_accents\": %s",
                          k->strip ? "true" : "false");
    sqlite3_str_appendf(o, ", \"tokenize_chinese_chars\": %s",
                        k->chinese ? "true" : "false");
    sqlite3_str_appendf(o, ", \"clean_up_tokenization_spaces\": %s",
                        k->clean ? "true" : "false");
    /* A checkpoint's users get the ids of the Rust library: from its
    ** tokenizer.json, or from the one transformers' BertConverter builds
    ** out of its vocab.txt (AutoTokenizer gives the fast tokenizer). */
    sqlite3_str_appendf(o, ", \"rules\": \"tokenizers\"");
  }
  sqlite3_str_appendf(o, "}, \"source\": {\"family\": \"%s\", \"class\": ",
                      m->fam->name);
  if (m->cls)
    relattn_json_string(o, m->cls);
  else
    sqlite3_str_appendf(o, "null");
  sqlite3_str_appendf(o, ", \"model_type\": ");
  relattn_json_string(o, m->model_type);
  sqlite3_str_appendf(o, "}}");
  return sqlite3_str_finish(o);
}

/* ---- relattn_import's entry points ------------------------------------------- */

int relattn_hf_is_config(sqlite3 *db, const char *json) {
  sqlite3_stmt *st = NULL;
  int is = 0;
  if (sqlite3_prepare_v2(db,
                         "SELECT json_valid(?1) AND json_type(?1) = 'object' "
                         "AND json_type(?1, '$.model_type') IS NOT NULL AND "
                         "json_type(?1, '$.arch') IS NULL",
                         -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) is = sqlite3_column_int(st, 0);
  }
  sqlite3_finalize(st);
  return is;
}

/* Transposes a [rows, cols] tensor of esize-byte elements. */
static uint8_t *transposed(const uint8_t *p, int64_t rows, int64_t cols,
                           size_t esize) {
  uint8_t *q = sqlite3_malloc64((sqlite3_uint64)(rows * cols) * esize + 1);
  int64_t r, c;
  if (!q) return NULL;
  for (r = 0; r < rows; r++)
    for (c = 0; c < cols; c++)
      memcpy(q + ((size_t)(c * rows + r)) * esize,
             p + ((size_t)(r * cols + c)) * esize, esize);
  return q;
}

/* Is hf (a rule's name) a name of the base model, under its prefix? */
static int inBase(const relattn_hf_family *f, const char *hf) {
  const char *p = f->base_parts;
  while (p) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (strncmp(hf, p, len) == 0) return 1;
    p = bar ? bar + 1 : NULL;
  }
  return 0;
}

char *relattn_hf_name_of(const relattn_hf_info *info, const char *native) {
  const relattn_hf_family *f = families[info->family];
  const relattn_hf_rule *r = f->rules;
  int layer;
  for (; r->hf; r++) {
    const char *pfx = "";
    char *hf, *out;
    if (!r->native || !ruleMatch(r->native, native, &layer)) continue;
    /* the rule of this checkpoint's kind, when several give one tensor */
    if (f->other_variant && f->other_variant(info, r->hf)) continue;
    if (info->prefixed && f->prefix && inBase(f, r->hf)) pfx = f->prefix;
    hf = nativeName(r->hf, layer);
    out = hf ? sqlite3_mprintf("%s%s", pfx, hf) : NULL;
    sqlite3_free(hf);
    return out;
  }
  return NULL;
}

int relattn_hf_map(sqlite3 *db, const char *hf_config, const char *tok_config,
                   relattn_st_tensor *t, int n, const char *const *raw_dtype,
                   const uint8_t *const *data, const uint8_t **tok,
                   size_t *tok_n, uint8_t **tok_own, unsigned char *skip,
                   uint8_t **own, char **hf_names, relattn_hf_info *info,
                   char **native, char **pzErr) {
  relattn_hf_model m;
  relattn_hf_tok k;
  relattn_jdoc j;
  char **orig = NULL;
  int i, a, rc, has_pred_bias, has_shared;
  *native = NULL;
  *pzErr = NULL;
  memset(&m, 0, sizeof m);
  memset(&k, 0, sizeof k);
  if (relattn_jdoc_open(&j, db, hf_config, "config_json", pzErr))
    return SQLITE_ERROR;
  rc = readConfig(&j, &m, t, n, pzErr);
  relattn_jdoc_close(&j);
  if (rc == SQLITE_OK && !*pzErr && j.rc == SQLITE_OK)
    rc = relattn_hf_read_tokenizer(db, &m, tok_config, *tok, *tok_n, &k, pzErr);
  if (rc != SQLITE_OK || *pzErr) goto done;

  /* each tensor: its native name, or left out (the names are looked at
  ** before any is renamed) */
  has_pred_bias = relattn_hf_has_tensor(t, n, &m, "cls.predictions.bias");
  has_shared = relattn_hf_has_tensor(t, n, &m, "shared.weight");
  memset(info, 0, sizeof *info);
  info->family = m.family;
  info->gated = m.gated;
  for (i = 0; i < n; i++) {
    if (stripPrefix(&m, t[i].name) != t[i].name) info->prefixed = 1;
    if (strncmp(t[i].name, "lm_predictions.", 15) == 0)
      info->lm_predictions = 1;
  }
  orig = sqlite3_malloc64(sizeof *orig * ((sqlite3_uint64)n + 1));
  if (!orig) goto nomem;
  memset(orig, 0, sizeof *orig * ((size_t)n + 1));
  for (i = 0; i < n; i++) {
    const char *nat = NULL, *s = stripPrefix(&m, t[i].name);
    int layer;
    char e[RELATTN_ECHO_BUF];
    relattn_echo(e, t[i].name, -1);
    if (!lookupName(&m, t[i].name, &nat, &layer)) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' is not part of a %s "
                               "checkpoint that relattn knows (%s)",
                               FN, e, m.fam->name,
                               m.cls ? m.cls : "no architectures");
      rc = SQLITE_ERROR;
      goto done;
    }
    /* what HF's class leaves out, this import leaves out */
    if (nat && strncmp(nat, "pooler.", 7) == 0 && !m.pooler_act) nat = NULL;
    if (nat && strncmp(nat, "mlm.", 4) == 0 && m.head != RELATTN_HEAD_MLM)
      nat = NULL;
    if (nat && strcmp(nat, "lm_head") == 0 && m.head != RELATTN_HEAD_MLM &&
        m.head != RELATTN_HEAD_LM)
      nat = NULL;
    if (nat && strcmp(nat, "lm_head") == 0 && m.tied) nat = NULL; /* a copy */
    if (nat && strcmp(s, "cls.predictions.decoder.bias") == 0 &&
        has_pred_bias)
      nat = NULL; /* the same parameter as cls.predictions.bias */
    if (nat && strncmp(nat, "classifier.", 11) == 0 &&
        !RELATTN_HEAD_HAS_LABELS(m.head))
      nat = NULL;
    if (nat && strncmp(nat, "rel_emb_norm.", 13) == 0 && !m.rel_ln) nat = NULL;
    if (nat && (strcmp(s, "encoder.embed_tokens.weight") == 0 ||
                strcmp(s, "decoder.embed_tokens.weight") == 0) &&
        has_shared)
      nat = NULL; /* tied to shared */
    if (!nat) {
      skip[i] = 1;
      continue;
    }
    if (raw_dtype && raw_dtype[i]) {
      *pzErr = sqlite3_mprintf("%s: tensor '%s' has dtype '%s'; expected F32, "
                               "F16 or BF16", FN, e, raw_dtype[i]);
      rc = SQLITE_ERROR;
      goto done;
    }
    if ((strcmp(nat, "rel_bias") == 0 || strcmp(nat, "dec.rel_bias") == 0) &&
        t[i].ndim == 2) {
      /* HF: [num_buckets, heads]; relattn: [heads, num_buckets] */
      int64_t r = t[i].shape[0], c = t[i].shape[1];
      own[i] = transposed(data[i] + t[i].begin, r, c,
                          relattn_dtype_size(t[i].dtype));
      if (!own[i]) goto nomem;
      t[i].shape[0] = c, t[i].shape[1] = r;
    }
    orig[i] = (char *)t[i].name;
    t[i].name = nativeName(nat, layer);
    if (!t[i].name) {
      t[i].name = orig[i];
      orig[i] = NULL;
      goto nomem;
    }
  }
  /* two HF names for one tensor (with and without the prefix) */
  for (i = 0; i < n; i++)
    for (a = i + 1; !skip[i] && a < n; a++)
      if (!skip[a] && strcmp(t[i].name, t[a].name) == 0) {
        char e1[RELATTN_ECHO_BUF], e2[RELATTN_ECHO_BUF];
        *pzErr = sqlite3_mprintf("%s: tensors '%s' and '%s' are both '%s'",
                                 FN, relattn_echo(e1, orig[i], -1),
                                 relattn_echo(e2, orig[a], -1), t[i].name);
        rc = SQLITE_ERROR;
        goto done;
      }
  *native = nativeConfig(db, &m, &k);
  if (!*native) goto nomem;
  if (k.file) { /* stored in place of the blob */
    *tok = *tok_own = k.file, *tok_n = k.file_n;
    k.file = NULL;
  }
  rc = SQLITE_OK;
  goto done;
nomem:
  rc = SQLITE_NOMEM;
  sqlite3_free(*pzErr);
  *pzErr = sqlite3_mprintf("%s: out of memory", FN);
done:
  /* the file's names, for the caller's messages */
  if (orig)
    for (i = 0; i < n; i++) hf_names[i] = orig[i];
  sqlite3_free(orig);
  sqlite3_free(k.file);
  modelFree(&m);
  if (*pzErr && rc == SQLITE_OK) rc = SQLITE_ERROR;
  return rc;
}
