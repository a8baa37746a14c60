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
** mapping, here, is the same for every family. The next family is one more
** such file, an entry in families[] below, and its tests.
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

/* ---- the tokenizer ----------------------------------------------------------- */

typedef struct hf_tok {
  int kind;                        /* RELATTN_TOK_* */
  int bos, eos, pad, append, sep, mask, unk;
  int lower, strip, chinese;       /* wordpiece options, -1: null */
  int clean;                       /* wordpiece: clean_up_tokenization_spaces */
  uint8_t *file;                   /* the file stored in place of the
                                   ** tokenizer_blob (a tokenizer.json's
                                   ** vocab.txt), or NULL */
  size_t file_n;
  int json_unigram;                /* file: a tokenizer.json's Unigram */
} hf_tok;

/* An HF checkpoint's spm.model as AutoTokenizer runs it: the tokenizer.json
** transformers' DebertaV2Converter / T5Converter (convert_slow_tokenizer.py)
** builds from it, PreTrainedTokenizerFast then adding the slow tokenizer's
** added tokens. Stored in out->file: the model carrying that pipeline
** (src/tok_sentencepiece.c, relattn_sentencepiece_convert). The added
** tokens: each of tokenizer_config's added_tokens_decoder, with its flags
** (T5 without one: T5Tokenizer's <extra_id_N>, lstrip and rstrip), then
** the special ids (roles[]) not among them, special, no strip. */
static int convertSpm(sqlite3 *db, const relattn_hf_model *m,
                      const relattn_tokenizer *t, const char *tok_config,
                      const uint8_t *tok, size_t tok_n, const int *roles,
                      const char *const *role_text, int n_roles, int lower,
                      hf_tok *out, char **pzErr) {
  relattn_jdoc j;
  relattn_spm_convert c;
  relattn_spm_added *a = NULL;
  char **own = NULL, err[256];
  int n_own = 0, n_a = 0, cap, n_pieces = relattn_tokenizer_n_ids(t), k, i;
  int rc = SQLITE_OK, has_decoder = 0, aps = 1, legacy = 1, extra = 0;
  int extra_default = 0;
  uint8_t *conv = NULL;
  size_t conv_n = 0;
  sqlite3_stmt *st = NULL;
  memset(&c, 0, sizeof c);
  c.t5 = m->fam->eos_only;
  c.lower = lower == 1;
  if (tok_config) {
    if (relattn_jdoc_open(&j, db, tok_config, "tokenizer_config_json", pzErr))
      return SQLITE_ERROR;
    /* T5Tokenizer's: 100 sentinels, add_prefix_space and legacy true */
    aps = relattn_jdoc_bool(&j, "add_prefix_space", 1);
    legacy = relattn_jdoc_bool(&j, "legacy", 1);
    extra = relattn_jdoc_int(&j, "extra_ids", -1);
    if (extra == -1) extra = 100, extra_default = 1;
    rc = j.rc;
    if (rc == SQLITE_OK && (extra < 0 || extra > 1000000)) {
      *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: extra_ids must be "
                               "between 0 and 1000000, not %d", FN, extra);
      rc = SQLITE_ERROR;
    }
    relattn_jdoc_close(&j);
    if (rc != SQLITE_OK) return rc;
  } else {
    extra = 100, extra_default = 1;
  }
  /* SpmConverter's _get_prepend_scheme; DebertaV2Tokenizer has neither
  ** add_prefix_space nor legacy: always */
  c.scheme = !c.t5 ? 2 : aps == 0 ? 0 : legacy == 0 ? 1 : 2;
  c.n_extra = c.t5 ? extra : 0;
  if (c.t5 && extra_default && n_pieces + c.n_extra > m->vocab)
    /* T5Tokenizer's default of 100, for a model with fewer rows than
    ** that: the last sentinels, whose ids stay the library's, that fit */
    c.n_extra = m->vocab > n_pieces ? m->vocab - n_pieces : 0;
  if (n_pieces + c.n_extra > m->vocab) {
    *pzErr = sqlite3_mprintf("%s: the tokenizer's %d <extra_id_N> pieces "
                             "(extra_ids) end at id %d, past the model's "
                             "vocab_size %d", FN, c.n_extra,
                             n_pieces + c.n_extra - 1, m->vocab);
    return SQLITE_ERROR;
  }
  cap = c.n_extra + n_roles + 64;
  if (tok_config &&
      (rc = sqlite3_prepare_v2(
           db,
           "SELECT coalesce(json_type(?1, '$.added_tokens_decoder'), 'null'), "
           "(SELECT count(*) FROM json_each(?1, '$.added_tokens_decoder')), "
           "(SELECT count(*) FROM json_each(?1, '$.added_tokens_decoder') "
           "WHERE type <> 'object')",
           -1, &st, NULL)) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, tok_config, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
      const char *type = (const char *)sqlite3_column_text(st, 0);
      int null = type && strcmp(type, "null") == 0;
      if (!null && (!type || strcmp(type, "object") != 0 ||
                    sqlite3_column_int(st, 2) > 0))
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                 "added_tokens_decoder must be an object of "
                                 "objects ({\"<id>\": {\"content\": ...}})",
                                 FN);
      cap += sqlite3_column_int(st, 1);
      has_decoder = !null && sqlite3_column_int(st, 1) > 0;
    }
    rc = sqlite3_finalize(st);
    st = NULL;
    if (*pzErr) goto done;
  }
  if (rc != SQLITE_OK) goto done;
  a = sqlite3_malloc64((sqlite3_uint64)cap * sizeof *a);
  own = sqlite3_malloc64((sqlite3_uint64)cap * sizeof *own);
  if (!a || !own) goto nomem;
  if (has_decoder) {
    if ((rc = sqlite3_prepare_v2(
             db,
             "SELECT key, json_extract(value, '$.content'), "
             "json_type(value, '$.content'), "
             "coalesce(json_type(value, '$.special'), 'true'), "
             "json_type(value, '$.lstrip'), json_type(value, '$.rstrip'), "
             "json_type(value, '$.single_word'), "
             "json_type(value, '$.normalized'), json_extract(?1, fullkey || "
             "'.content', fullkey || '.content') FROM json_each(?1, "
             "'$.added_tokens_decoder') ORDER BY CAST(key AS INTEGER)",
             -1, &st, NULL)) != SQLITE_OK)
      goto done;
    sqlite3_bind_text(st, 1, tok_config, -1, SQLITE_STATIC);
    while (sqlite3_step(st) == SQLITE_ROW) {
      const char *key = (const char *)sqlite3_column_text(st, 0);
      const char *text = (const char *)sqlite3_column_text(st, 1);
      const char *type = (const char *)sqlite3_column_text(st, 2);
      const char *sw = (const char *)sqlite3_column_text(st, 6);
      const char *nz = (const char *)sqlite3_column_text(st, 7);
      char e[RELATTN_ECHO_BUF], e2[RELATTN_ECHO_BUF];
      int id = -1;
      size_t pn = 0;
      const uint8_t *piece;
      if (key && key[0] && strlen(key) <= 9 &&
          strspn(key, "0123456789") == strlen(key))
        id = atoi(key);
      relattn_echo(e, key ? key : "", -1);
      if (id < 0 || !type || strcmp(type, "text") != 0 || !text[0]) {
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                 "added_tokens_decoder '%s' needs an id as "
                                 "its key and a content", FN, e);
        goto done;
      }
      if (relattn_json_has_nul((const char *)sqlite3_column_text(st, 8))) {
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: the content of "
                                 "added_tokens_decoder '%d'" RELATTN_NUL_MSG,
                                 FN, id);
        goto done;
      }
      relattn_echo(e2, text, -1);
      if ((sw && strcmp(sw, "true") == 0) || (nz && strcmp(nz, "true") == 0)) {
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                 "added_tokens_decoder '%s' ('%s') with %s "
                                 "true is not supported", FN, e, e2,
                                 sw && strcmp(sw, "true") == 0 ? "single_word"
                                                               : "normalized");
        goto done;
      }
      /* the fast tokenizer finds it at its piece, or adds it after
      ** the vocabulary: another id than the file's is another token */
      piece = id < n_pieces ? relattn_tokenizer_id_text(t, id, &pn) : NULL;
      if (id < n_pieces + c.n_extra) {
        char want[32];
        if (id >= n_pieces)
          sqlite3_snprintf(sizeof want, want, "<extra_id_%d>",
                           n_pieces + c.n_extra - 1 - id);
        if (id < n_pieces ? (!piece || pn != strlen(text) ||
                             memcmp(piece, text, pn) != 0)
                          : strcmp(want, text) != 0) {
          *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                   "added_tokens_decoder '%s' ('%s') is not "
                                   "the tokenizer's piece %d", FN, e, e2, id);
          goto done;
        }
      } else {
        int next = n_pieces + c.n_extra;
        for (k = 0; k < n_a; k++)
          if (a[k].id >= next) next = a[k].id + 1;
        if (id != next) {
          *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                   "added_tokens_decoder '%s' ('%s') is not at "
                                   "id %d, where the fast tokenizer adds it",
                                   FN, e, e2, next);
          goto done;
        }
      }
      if (id >= m->vocab) {
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                 "added_tokens_decoder '%s' ('%s') is past "
                                 "the model's vocab_size %d", FN, e, e2,
                                 m->vocab);
        goto done;
      }
      if (!(own[n_own] = sqlite3_mprintf("%s", text))) goto nomem;
      a[n_a].id = id, a[n_a].text = own[n_own++], a[n_a].n = strlen(text);
      a[n_a].flags =
          (strcmp((const char *)sqlite3_column_text(st, 3), "true") == 0
               ? RELATTN_ADDED_SPECIAL : 0) |
          (sqlite3_column_text(st, 4) &&
                   strcmp((const char *)sqlite3_column_text(st, 4), "true") == 0
               ? RELATTN_ADDED_LSTRIP : 0) |
          (sqlite3_column_text(st, 5) &&
                   strcmp((const char *)sqlite3_column_text(st, 5), "true") == 0
               ? RELATTN_ADDED_RSTRIP : 0);
      n_a++;
    }
    rc = sqlite3_finalize(st);
    st = NULL;
    if (rc != SQLITE_OK) goto done;
  } else {
    for (k = 0; k < c.n_extra; k++) {
      if (!(own[n_own] = sqlite3_mprintf("<extra_id_%d>", k))) goto nomem;
      a[n_a].id = n_pieces + c.n_extra - 1 - k, a[n_a].text = own[n_own++];
      a[n_a].n = strlen(a[n_a].text);
      a[n_a].flags = RELATTN_ADDED_SPECIAL | RELATTN_ADDED_LSTRIP |
                     RELATTN_ADDED_RSTRIP;
      n_a++;
    }
  }
  for (i = 0; i < n_roles; i++) {
    if (roles[i] < 0 || !role_text[i]) continue;
    for (k = 0; k < n_a && a[k].id != roles[i]; k++) {
    }
    if (k < n_a) continue;
    a[n_a].id = roles[i], a[n_a].text = role_text[i];
    a[n_a].n = strlen(role_text[i]);
    a[n_a].flags = RELATTN_ADDED_SPECIAL;
    n_a++;
  }
  c.added = a, c.n_added = n_a;
  if (relattn_sentencepiece_convert(tok, tok_n, &c, &conv, &conv_n,
                                    FN ": tokenizer_blob", err,
                                    sizeof err) != RELATTN_OK) {
    if (!(*pzErr = sqlite3_mprintf("%s", err))) goto nomem;
    goto done;
  }
  out->file = sqlite3_malloc64(conv_n);
  if (!out->file) goto nomem;
  memcpy(out->file, conv, conv_n);
  out->file_n = conv_n;
  out->json_unigram = 1;
  goto done;
nomem:
  rc = SQLITE_NOMEM;
done:
  sqlite3_finalize(st);
  free(conv);
  for (k = 0; k < n_own; k++) sqlite3_free(own[k]);
  sqlite3_free(own);
  sqlite3_free(a);
  if (rc == SQLITE_OK && *pzErr) rc = SQLITE_ERROR;
  if (rc != SQLITE_OK && !*pzErr) *pzErr = relattn_sql_errmsg(db, FN, rc);
  return rc;
}

/* The id of token text in the tokenizer's file, else in tokenizer_config's
** added_tokens_decoder ({"128000": {"content": "[MASK]"}}), else -1. */
static int tokenId(sqlite3 *db, const relattn_tokenizer *t,
                   const char *tok_config, const char *text) {
  sqlite3_stmt *st = NULL;
  int id = relattn_tokenizer_piece_id(t, text);
  if (id >= 0 || !tok_config) return id;
  if (sqlite3_prepare_v2(db,
                         "SELECT key FROM json_each(?1, "
                         "'$.added_tokens_decoder') WHERE "
                         "json_extract(value, '$.content') = ?2 AND key "
                         "NOT GLOB '*[^0-9]*' AND length(key) BETWEEN 1 AND 9",
                         -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, tok_config, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) id = sqlite3_column_int(st, 0);
  }
  sqlite3_finalize(st);
  return id;
}

/* The id after the tokenizer's own: past its file's ids and the ids of
** tokenizer_config's added_tokens_decoder, as len(get_vocab()) is for
** Hugging Face's tokenizer when the added ids follow the file's. */
static int nextId(sqlite3 *db, const relattn_tokenizer *t,
                  const char *tok_config) {
  sqlite3_stmt *st = NULL;
  int next = relattn_tokenizer_n_ids(t);
  if (!tok_config) return next;
  if (sqlite3_prepare_v2(db,
                         "SELECT max(CAST(key AS INTEGER)) FROM json_each(?1, "
                         "'$.added_tokens_decoder') WHERE key NOT GLOB "
                         "'*[^0-9]*' AND length(key) BETWEEN 1 AND 9",
                         -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, tok_config, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_type(st, 0) != SQLITE_NULL &&
        sqlite3_column_int(st, 0) >= next)
      next = sqlite3_column_int(st, 0) + 1;
  }
  sqlite3_finalize(st);
  return next;
}

/* The special tokens' ids: each role's text (HF's default for the family,
** or tokenizer_config.json's cls_token, sep_token, ...) looked up. */
static int readTokenizer(sqlite3 *db, const relattn_hf_model *m,
                         const char *tok_config, const uint8_t *tok,
                         size_t tok_n, hf_tok *out, char **pzErr) {
  static const char *const keys[] = {"cls_token", "sep_token", "mask_token",
                                     "pad_token", "unk_token", "eos_token"};
  enum { R_CLS, R_SEP, R_MASK, R_PAD, R_UNK, R_EOS, N_ROLES };
  char *text[N_ROLES];
  int id[N_ROLES], i, rc = SQLITE_OK;
  relattn_config c;
  relattn_tokenizer *t = NULL;
  char err[256];
  relattn_jdoc j;
  relattn_hf_tokjson tj;
  memset(text, 0, sizeof text);
  memset(out, 0, sizeof *out);
  memset(&tj, 0, sizeof tj);
  if (!tok) {
    *pzErr = sqlite3_mprintf("%s: a %s checkpoint needs its tokenizer's file "
                             "(%s) as tokenizer_blob", FN,
                             m->fam->name, m->fam->tok_file);
    return SQLITE_ERROR;
  }
  /* The kind by the file's structure: a vocab.txt may start with any
  ** line, an empty one too (BertTokenizer's load_vocab makes it token ''
  ** at id 0). A file of no known kind is read as the family's own, whose
  ** parser says where it breaks. */
  switch (relattn_tokenizer_file_kind(tok, tok_n)) {
    case RELATTN_TOKFILE_SPM: out->kind = RELATTN_TOK_SENTENCEPIECE; break;
    case RELATTN_TOKFILE_VOCAB: out->kind = RELATTN_TOK_WORDPIECE; break;
    case RELATTN_TOKFILE_JSON:
      /* the fast tokenizer's file: mapped onto the WordPiece kind, whose
      ** vocab.txt the model stores (ext/hf_tokjson.c) */
      if ((rc = relattn_hf_tokjson_read(db, tok, tok_n, &tj, pzErr)) !=
          SQLITE_OK)
        return rc;
      /* a Unigram's: the SentencePiece kind running Hugging Face's
      ** pipeline, which the stored file carries */
      out->kind = tj.unigram ? RELATTN_TOK_SENTENCEPIECE
                             : RELATTN_TOK_WORDPIECE;
      out->json_unigram = tj.unigram;
      if (tj.unigram && (m->fam->eos_only ? tj.cls != NULL : !tj.cls)) {
        char e[RELATTN_ECHO_BUF];
        *pzErr = sqlite3_mprintf(
            m->fam->eos_only
                ? "%s: tokenizer.json: post_processor: a %s model's input is "
                  "the text and then '%s', with nothing in front"
                : "%s: tokenizer.json: post_processor: a %s model's input "
                  "starts with a token ([CLS]), not with the text, as "
                  "'$A:0 %s:0' has it",
            FN, m->fam->name, relattn_echo(e, tj.sep ? tj.sep : "", -1));
        relattn_hf_tokjson_free(&tj);
        return SQLITE_ERROR;
      }
      out->file = tj.vocab, out->file_n = tj.vocab_n;
      tj.vocab = NULL;
      tok = out->file, tok_n = out->file_n;
      break;
    default:
      out->kind = m->fam->tok_kind;
  }
  out->lower = out->kind == RELATTN_TOK_WORDPIECE ? 1 : 0;
  out->strip = -1;
  out->chinese = 1;
  if (out->json_unigram) {
    out->lower = 0;
    text[R_CLS] = tj.cls, text[R_UNK] = tj.unk;
    text[m->fam->eos_only ? R_EOS : R_SEP] = tj.sep;
    tj.cls = tj.sep = tj.unk = NULL;
  } else if (out->file) {
    out->lower = tj.lower, out->strip = tj.strip, out->chinese = tj.chinese;
    text[R_CLS] = tj.cls, text[R_SEP] = tj.sep, text[R_UNK] = tj.unk;
    tj.cls = tj.sep = tj.unk = NULL;
  }
  out->clean = 1;
  if (tok_config) {
    if (relattn_jdoc_open(&j, db, tok_config, "tokenizer_config_json", pzErr)) {
      rc = SQLITE_ERROR;
      goto done;
    }
    {
      const char *type = relattn_jdoc_step(&j, "$");
      if (type && strcmp(type, "object") != 0) {
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json is not a JSON "
                                 "object", FN);
        relattn_jdoc_close(&j);
        rc = SQLITE_ERROR;
        goto done;
      }
    }
    if (out->json_unigram) {
      /* the file's normalizer and pre-tokenizer are the tokenizer's */
    } else if (out->file) {
      /* BertTokenizerFast rebuilds the normalizer from these when they
      ** differ from tokenizer.json's: one of the two would be wrong */
      static const char *const opt[] = {"do_lower_case", "strip_accents",
                                        "tokenize_chinese_chars"};
      static const char *const norm[] = {"lowercase", "strip_accents",
                                         "handle_chinese_chars"};
      const int have[] = {out->lower, out->strip, out->chinese};
      for (i = 0; i < 3 && j.rc == SQLITE_OK; i++) {
        int v = relattn_jdoc_bool(&j, opt[i], -2);
        if (v == -2 || v == have[i] || j.rc != SQLITE_OK) continue;
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: %s %s differs "
                                 "from the tokenizer.json's normalizer "
                                 "(%s %s)", FN, opt[i],
                                 v < 0 ? "null" : v ? "true" : "false",
                                 norm[i],
                                 have[i] < 0 ? "null" : have[i] ? "true"
                                                                : "false");
        relattn_jdoc_close(&j);
        rc = SQLITE_ERROR;
        goto done;
      }
    } else {
      out->lower = relattn_jdoc_bool(&j, "do_lower_case", out->lower);
      out->strip = relattn_jdoc_bool(&j, "strip_accents", -1);
      out->chinese = relattn_jdoc_bool(&j, "tokenize_chinese_chars", 1);
    }
    /* BertTokenizer's default: true */
    out->clean = relattn_jdoc_bool(&j, "clean_up_tokenization_spaces", 1);
    if (out->kind == RELATTN_TOK_WORDPIECE && !out->file &&
        relattn_jdoc_bool(&j, "do_basic_tokenize", 1) == 0 &&
        j.rc == SQLITE_OK) {
      /* BertTokenizer then splits on whitespace only: not what the
      ** wordpiece tokenizer does */
      *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: do_basic_tokenize "
                               "false is not supported", FN);
      relattn_jdoc_close(&j);
      rc = SQLITE_ERROR;
      goto done;
    }
    if (out->kind == RELATTN_TOK_SENTENCEPIECE && !out->json_unigram &&
        relattn_jdoc_bool(&j, "split_by_punct", 0) == 1 && j.rc == SQLITE_OK) {
      /* DebertaV2Tokenizer then cuts the text at punctuation before
      ** SentencePiece sees it: other pieces than ours */
      *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: split_by_punct "
                               "true is not supported", FN);
      relattn_jdoc_close(&j);
      rc = SQLITE_ERROR;
      goto done;
    }
    for (i = 0; i < N_ROLES && j.rc == SQLITE_OK; i++)
      if (!text[i]) /* a tokenizer.json's own come first */
        text[i] = relattn_jdoc_str(&j, keys[i], 1);
    rc = j.rc;
    relattn_jdoc_close(&j);
    if (rc != SQLITE_OK) goto done;
  }
  if (out->kind == RELATTN_TOK_SENTENCEPIECE && out->lower == 1 &&
      m->fam->eos_only) {
    /* (DebertaV2Converter lower-cases first; T5's converter has no such
    ** option) */
    *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: do_lower_case true "
                             "is not supported with a SentencePiece "
                             "tokenizer", FN);
    rc = SQLITE_ERROR;
    goto done;
  }
  memset(&c, 0, sizeof c);
  c.tok_type = out->kind;
  c.vocab_size = m->vocab > 0 ? m->vocab : 1;
  c.do_lower_case = out->lower, c.strip_accents = out->strip;
  c.chinese_chars = out->chinese;
  c.bos = c.eos = c.pad = c.append = c.sep = c.mask = c.unk = -1;
  if (relattn_tokenizer_new(&t, &c, tok, tok_n, FN, err, sizeof err) !=
      RELATTN_OK) {
    *pzErr = sqlite3_mprintf("%s", err);
    rc = SQLITE_ERROR;
    goto done;
  }
  for (i = 0; i < N_ROLES; i++) {
    const char *want = text[i] ? text[i] : m->fam->roles[i];
    id[i] = want ? tokenId(db, t, tok_config, want) : -1;
  }
  if (out->kind == RELATTN_TOK_SENTENCEPIECE && !m->fam->eos_only &&
      !out->json_unigram) {
    /* DebertaV2Tokenizer (a PreTrainedTokenizer) adds the special tokens
    ** its files lack after their ids, in SPECIAL_TOKENS_ATTRIBUTES order:
    ** bos ([CLS] by default), eos ([SEP]), unk, sep, pad, cls, mask. So
    ** deberta-v3's spm.model without [MASK] gets it at the number of its
    ** pieces, 128000. */
    static const int order[] = {R_CLS, R_SEP, R_UNK, R_PAD, R_MASK};
    int next = nextId(db, t, tok_config), k, r;
    for (k = 0; k < (int)(sizeof order / sizeof order[0]); k++) {
      const char *want;
      i = order[k];
      want = text[i] ? text[i] : m->fam->roles[i];
      if (!want || id[i] >= 0) continue;
      for (r = 0; r < N_ROLES; r++) {
        const char *other = text[r] ? text[r] : m->fam->roles[r];
        if (r != i && id[r] >= 0 && other && strcmp(other, want) == 0) break;
      }
      if (r < N_ROLES) {
        id[i] = id[r];
        continue;
      }
      if (next >= m->vocab) {
        char e[RELATTN_ECHO_BUF];
        *pzErr = sqlite3_mprintf("%s: the tokenizer adds '%s' (%s) at id %d, "
                                 "past the model's vocab_size %d", FN,
                                 relattn_echo(e, want, -1), keys[i], next,
                                 m->vocab);
        rc = SQLITE_ERROR;
        goto done;
      }
      id[i] = next++;
    }
  }
  for (i = 0; i < N_ROLES; i++) {
    const char *want = text[i] ? text[i] : m->fam->roles[i];
    if (id[i] < 0 && want &&
        ((!m->fam->eos_only && (i == R_CLS || i == R_SEP)) ||
         (m->fam->eos_only && i == R_EOS) ||
         (i == R_MASK && m->head == RELATTN_HEAD_MLM))) {
      char e[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("%s: the tokenizer has no '%s' token (%s)%s",
                               FN, relattn_echo(e, want, -1), keys[i],
                               i == R_MASK ? ", which the masked-LM head "
                                             "needs" : "");
      rc = SQLITE_ERROR;
      goto done;
    }
  }
  out->pad = id[R_PAD], out->unk = id[R_UNK];
  if (m->fam->eos_only) {
    out->bos = -1, out->sep = -1, out->mask = -1;
    out->eos = out->append = id[R_EOS];
  } else {
    out->bos = id[R_CLS];
    out->eos = out->append = out->sep = id[R_SEP];
    out->mask = id[R_MASK];
  }
  if (out->kind == RELATTN_TOK_SENTENCEPIECE && !out->json_unigram) {
    /* AutoTokenizer's: the converter's tokenizer.json, run as the
    ** tokenizers library runs it */
    int roles[7];
    const char *rt[7];
    roles[0] = out->bos, roles[1] = out->eos, roles[2] = out->pad;
    roles[3] = out->append, roles[4] = out->sep, roles[5] = out->mask;
    roles[6] = out->unk;
    for (i = 0; i < 7; i++) {
      int r;
      rt[i] = NULL;
      for (r = 0; r < N_ROLES && roles[i] >= 0; r++)
        if (id[r] == roles[i]) {
          rt[i] = text[r] ? text[r] : m->fam->roles[r];
          break;
        }
    }
    rc = convertSpm(db, m, t, tok_config, tok, tok_n, roles, rt, 7,
                    out->lower, out, pzErr);
    if (rc != SQLITE_OK) goto done;
  }
done:
  relattn_tokenizer_free(t);
  relattn_hf_tokjson_free(&tj);
  for (i = 0; i < N_ROLES; i++) sqlite3_free(text[i]);
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
                          const hf_tok *k) {
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
  hf_tok k;
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
    rc = readTokenizer(db, &m, tok_config, *tok, *tok_n, &k, pzErr);
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
