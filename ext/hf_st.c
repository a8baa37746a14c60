/*
** hf_st.c: a sentence-transformers model directory for relattn_import: its
** modules.json and the files of its modules, given after the checkpoint's
** own files as (name, file) pairs, read into the native config's
** "sentence" key (docs/reference.md) and the Dense modules' weights.
**
**   SELECT relattn_import('st', readfile('st/model.safetensors'),
**       readfile('st/config.json'), readfile('st/vocab.txt'),
**       readfile('st/tokenizer_config.json'),
**       'modules.json', readfile('st/modules.json'),
**       'sentence_bert_config.json', readfile('st/sentence_bert_config.json'),
**       '1_Pooling/config.json', readfile('st/1_Pooling/config.json'),
**       '2_Dense/config.json', readfile('st/2_Dense/config.json'),
**       '2_Dense/model.safetensors', readfile('st/2_Dense/model.safetensors'));
**
** HOW IT WORKS
** modules.json lists the modules in the order SentenceTransformer runs
** them (sentence_transformers/SentenceTransformer.py, _load_sbert_model):
** a Transformer (the Hugging Face checkpoint, mapped by ext/hf.c), one
** Pooling, then Dense modules, then optionally Normalize. Each module's
** files are named by its path: "1_Pooling/config.json" (Pooling.py's
** pooling_mode_* flags and word_embedding_dimension), "2_Dense/config.json"
** (Dense.py's in_features, out_features, bias, activation_function) with
** "2_Dense/model.safetensors" (linear.weight, linear.bias), and the
** Transformer's sentence_bert_config.json (max_seq_length, do_lower_case).
** What the native model cannot do the same way is refused by name before
** anything is written. The Dense files are handed back to ext/import.c,
** which reads them as it reads any safetensors file.
*/
#include "ext.h"
#include "functions.h"
#include "hf.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

#define FN "relattn_import"

/* The pooling_mode_* keys of 1_Pooling/config.json, in the order Pooling
** concatenates them, and the native mode of each (RELATTN_SP_* bits). */
static const struct {
  const char *key;
  int bit;
} pooling_keys[] = {
    {"pooling_mode_cls_token", RELATTN_SP_CLS},
    {"pooling_mode_max_tokens", RELATTN_SP_MAX},
    {"pooling_mode_mean_tokens", RELATTN_SP_MEAN},
    {"pooling_mode_mean_sqrt_len_tokens", RELATTN_SP_MEAN_SQRT},
    {"pooling_mode_weightedmean_tokens", RELATTN_SP_WEIGHTED},
    {"pooling_mode_lasttoken", RELATTN_SP_LAST}};
#define N_POOLING (int)(sizeof pooling_keys / sizeof pooling_keys[0])

/* Dense.py saves its activation as the class's full name (util.fullname);
** torch's default GELU is the erf form. */
static const struct {
  const char *torch;
  int act;
} dense_acts[] = {
    {"torch.nn.modules.activation.Tanh", RELATTN_DENSE_TANH},
    {"torch.nn.modules.linear.Identity", RELATTN_DENSE_IDENTITY},
    {"torch.nn.modules.activation.ReLU", RELATTN_DENSE_RELU},
    {"torch.nn.modules.activation.GELU", RELATTN_DENSE_GELU},
    {"torch.nn.modules.activation.Sigmoid", RELATTN_DENSE_SIGMOID}};
#define N_ACTS (int)(sizeof dense_acts / sizeof dense_acts[0])

/* The module kinds of modules.json ("type": the class's full name). */
enum { M_TRANSFORMER, M_POOLING, M_DENSE, M_NORMALIZE };
static const char *const module_kinds[] = {"Transformer", "Pooling", "Dense",
                                           "Normalize"};

/* The file named name, marked used; NULL when not given. */
static relattn_st_file *findFile(relattn_st_file *f, int n, const char *name) {
  int i;
  for (i = 0; i < n; i++)
    if (strcmp(f[i].name, name) == 0) {
      f[i].used = 1;
      return &f[i];
    }
  return NULL;
}

/* A module's file name: path/file, or file at the top ("" or "."). */
static char *pathOf(const char *path, const char *file) {
  if (!path[0] || strcmp(path, ".") == 0) return sqlite3_mprintf("%s", file);
  return sqlite3_mprintf("%s/%s", path, file);
}

/* A file's text, or NULL (sqlite3_malloc'd) */
static char *textOf(const relattn_st_file *f) {
  char *s = sqlite3_malloc64((sqlite3_uint64)f->n + 1);
  if (!s) return NULL;
  if (f->n) memcpy(s, f->data, f->n);
  s[f->n] = 0;
  return s;
}

/* Is json a JSON value of type want ("object", "array")? -1 on an SQL
** failure. */
static int isJson(sqlite3 *db, const char *json, const char *want) {
  sqlite3_stmt *st = NULL;
  int is = -1;
  if (sqlite3_prepare_v2(db,
                         "SELECT CASE WHEN json_valid(?1) THEN json_type(?1) "
                         "= ?2 ELSE 0 END", -1,
                         &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, want, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) is = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return is;
}

/* The named file's JSON text, checked to be an object (or an array);
** NULL with *pzErr when it is missing or malformed. */
static char *jsonFile(sqlite3 *db, relattn_st_file *files, int n,
                      const char *name, const char *want, char **pzErr) {
  relattn_st_file *f = findFile(files, n, name);
  char *s;
  int is;
  if (!f) {
    *pzErr = sqlite3_mprintf("%s: the sentence-transformers directory's '%s' "
                             "is missing: pass '%s', readfile('.../%s')",
                             FN, name, name, name);
    return NULL;
  }
  s = textOf(f);
  if (!s) {
    *pzErr = sqlite3_mprintf("%s: out of memory", FN);
    return NULL;
  }
  is = isJson(db, s, want);
  if (is != 1) {
    *pzErr = is < 0 ? relattn_sql_errmsg(db, FN, relattn_sql_code(db))
                    : sqlite3_mprintf("%s: %s is not a JSON %s", FN, name,
                                      want);
    sqlite3_free(s);
    return NULL;
  }
  return s;
}

/* A native config's integer or boolean at path (json_extract), or def. */
static int nativeInt(sqlite3 *db, const char *native, const char *path,
                     int def) {
  sqlite3_stmt *st = NULL;
  int v = def;
  if (sqlite3_prepare_v2(db, "SELECT json_extract(?1, ?2)", -1, &st, NULL) ==
      SQLITE_OK) {
    sqlite3_bind_text(st, 1, native, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_type(st, 0) != SQLITE_NULL)
      v = sqlite3_column_int(st, 0);
  }
  sqlite3_finalize(st);
  return v;
}

/* 1_Pooling/config.json: the modes into *bits, include_prompt. */
static int readPooling(sqlite3 *db, const char *json, const char *name,
                       int d_model, int *bits, int *include_prompt,
                       char **pzErr) {
  relattn_jdoc j;
  sqlite3_stmt *st = NULL;
  int k, dim;
  *bits = 0;
  if (relattn_jdoc_open(&j, db, json, name, pzErr)) return SQLITE_ERROR;
  dim = relattn_jdoc_int(&j, "word_embedding_dimension", d_model);
  for (k = 0; k < N_POOLING && j.rc == SQLITE_OK; k++)
    if (relattn_jdoc_bool(&j, pooling_keys[k].key, 0) == 1)
      *bits |= pooling_keys[k].bit;
  *include_prompt = relattn_jdoc_bool(&j, "include_prompt", 1);
  relattn_jdoc_close(&j);
  if (j.rc != SQLITE_OK) return j.rc;
  /* a pooling_mode_* key this import does not know, set true */
  if (sqlite3_prepare_v2(db,
                         "SELECT key FROM json_each(?1) WHERE key LIKE "
                         "'pooling\\_mode\\_%' ESCAPE '\\' AND type = 'true' "
                         "ORDER BY key",
                         -1, &st, NULL) != SQLITE_OK) {
    *pzErr = relattn_sql_errmsg(db, FN, relattn_sql_code(db));
    return SQLITE_ERROR;
  }
  sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(st, 0);
    for (k = 0; k < N_POOLING && strcmp(key, pooling_keys[k].key) != 0; k++) {
    }
    if (k == N_POOLING) {
      char e[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf(
          "%s: %s: pooling mode '%s' is not supported (pooling_mode_"
          "cls_token, _max_tokens, _mean_tokens, _mean_sqrt_len_tokens, "
          "_weightedmean_tokens, _lasttoken)",
          FN, name, relattn_echo(e, key, -1));
      sqlite3_finalize(st);
      return SQLITE_ERROR;
    }
  }
  sqlite3_finalize(st);
  if (!*bits) {
    *pzErr = sqlite3_mprintf("%s: %s: no pooling_mode_* is true", FN, name);
    return SQLITE_ERROR;
  }
  if (dim != d_model) {
    *pzErr = sqlite3_mprintf("%s: %s: word_embedding_dimension %d is not the "
                             "model's hidden size %d",
                             FN, name, dim, d_model);
    return SQLITE_ERROR;
  }
  return SQLITE_OK;
}

/* A Dense module's config.json into one entry of the sentence object. */
static int readDense(sqlite3 *db, const char *json, const char *name,
                     int width, int *out, sqlite3_str *o, char **pzErr) {
  relattn_jdoc j;
  int in, bias, k;
  char *act;
  if (relattn_jdoc_open(&j, db, json, name, pzErr)) return SQLITE_ERROR;
  in = relattn_jdoc_int(&j, "in_features", -1);
  *out = relattn_jdoc_int(&j, "out_features", -1);
  bias = relattn_jdoc_bool(&j, "bias", 1);
  act = relattn_jdoc_str(&j, "activation_function", 0);
  relattn_jdoc_close(&j);
  if (j.rc != SQLITE_OK) {
    sqlite3_free(act);
    return j.rc;
  }
  if (in < 1 || *out < 1) {
    *pzErr = sqlite3_mprintf("%s: %s: in_features and out_features must be "
                             "positive integers",
                             FN, name);
    sqlite3_free(act);
    return SQLITE_ERROR;
  }
  for (k = 0; act && k < N_ACTS && strcmp(act, dense_acts[k].torch) != 0; k++) {
  }
  if (act && k == N_ACTS) {
    char e[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf("%s: %s: activation_function '%s' is not "
                             "supported (Tanh, Identity, ReLU, GELU, Sigmoid "
                             "of torch.nn)",
                             FN, name, relattn_echo(e, act, -1));
    sqlite3_free(act);
    return SQLITE_ERROR;
  }
  sqlite3_free(act);
  if (in != width) {
    *pzErr = sqlite3_mprintf("%s: %s: in_features %d is not the width of "
                             "what comes before it, %d",
                             FN, name, in, width);
    return SQLITE_ERROR;
  }
  sqlite3_str_appendf(o,
                      "{\"in_features\": %d, \"out_features\": %d, \"bias\": "
                      "%s, \"activation\": \"%s\"}",
                      in, *out, bias ? "true" : "false",
                      relattn_dense_activation_name(
                          act ? dense_acts[k].act : RELATTN_DENSE_TANH));
  return SQLITE_OK;
}

int relattn_hf_st_read(sqlite3 *db, relattn_st_file *files, int n_files,
                       const char *native, char **native_out,
                       relattn_st_dense *dense, int *n_dense, char **pzErr) {
  sqlite3_stmt *st = NULL, *set = NULL;
  sqlite3_str *o = NULL;
  char *modules = NULL, *json = NULL, *name = NULL, *obj = NULL;
  int rc = SQLITE_ERROR, idx = 0, seen[4] = {0, 0, 0, 0}, bits = 0;
  int include_prompt = 1, width = 0, max_seq = 0, lower = 0, i;
  const int d_model = nativeInt(db, native, "$.d_model", 0);
  char e[RELATTN_ECHO_BUF], e2[RELATTN_ECHO_BUF];
  *native_out = NULL;
  *n_dense = 0;

  modules = jsonFile(db, files, n_files, "modules.json", "array", pzErr);
  if (!modules) goto done;
  o = sqlite3_str_new(db);
  if (sqlite3_prepare_v2(db,
                         "SELECT json_extract(value, '$.type'), "
                         "coalesce(json_extract(value, '$.path'), ''), "
                         "json_type(value, '$.type') = 'text' AND "
                         "coalesce(json_type(value, '$.path'), 'text') = "
                         "'text', json_extract(value, '$.type', '$.path') "
                         "FROM json_each(?1) ORDER BY "
                         "coalesce(json_extract(value, '$.idx'), key)",
                         -1, &st, NULL) != SQLITE_OK)
    goto sqlerr;
  sqlite3_bind_text(st, 1, modules, -1, SQLITE_STATIC);
  for (; (rc = sqlite3_step(st)) == SQLITE_ROW; idx++) {
    const char *type = (const char *)sqlite3_column_text(st, 0);
    const char *path = (const char *)sqlite3_column_text(st, 1);
    const char *dot;
    int kind;
    if (!sqlite3_column_int(st, 2)) {
      *pzErr = sqlite3_mprintf("%s: modules.json: module %d needs a 'type' "
                               "and a 'path' string", FN, idx);
      goto fail;
    }
    /* as written: SQLite before 3.45 cuts a string at its \u0000 */
    if (relattn_json_has_nul((const char *)sqlite3_column_text(st, 3))) {
      *pzErr = sqlite3_mprintf("%s: modules.json: module %d's type or path"
                               RELATTN_NUL_MSG, FN, idx);
      goto fail;
    }
    dot = strrchr(type, '.');
    for (kind = 0; kind < 4; kind++)
      if (strncmp(type, "sentence_transformers.", 22) == 0 && dot &&
          strcmp(dot + 1, module_kinds[kind]) == 0)
        break;
    if (kind == 4) {
      *pzErr = sqlite3_mprintf("%s: modules.json: module %d '%s' is not "
                               "supported (Transformer, Pooling, Dense, "
                               "Normalize of sentence_transformers.models)",
                               FN, idx, relattn_echo(e, type, -1));
      goto fail;
    }
    /* Transformer, Pooling, Dense..., Normalize: the order the native
    ** model runs them in */
    if ((kind == M_TRANSFORMER && idx != 0) ||
        (kind != M_TRANSFORMER && !seen[M_TRANSFORMER]) ||
        (kind == M_POOLING && seen[M_POOLING]) ||
        (kind == M_DENSE && !seen[M_POOLING]) ||
        (kind != M_NORMALIZE && seen[M_NORMALIZE]) ||
        (kind == M_NORMALIZE && !seen[M_POOLING])) {
      *pzErr = sqlite3_mprintf("%s: modules.json: module %d (%s) is out of "
                               "order; relattn runs Transformer, Pooling, "
                               "Dense modules, then Normalize",
                               FN, idx, module_kinds[kind]);
      goto fail;
    }
    seen[kind]++;
    if (kind == M_TRANSFORMER) {
      /* its sentence_bert_config.json: the longest input, lower-casing */
      relattn_st_file *f;
      name = pathOf(path, "sentence_bert_config.json");
      if (!name) goto nomem;
      f = findFile(files, n_files, name);
      if (f) {
        relattn_jdoc j;
        json = jsonFile(db, files, n_files, name, "object", pzErr);
        if (!json) goto fail;
        if (relattn_jdoc_open(&j, db, json, name, pzErr)) goto fail;
        max_seq = relattn_jdoc_int(&j, "max_seq_length", 0);
        lower = relattn_jdoc_bool(&j, "do_lower_case", 0);
        relattn_jdoc_close(&j);
        if (j.rc != SQLITE_OK) goto fail;
        if (max_seq < 0) {
          *pzErr = sqlite3_mprintf("%s: %s: max_seq_length must be positive, "
                                   "not %d", FN, name, max_seq);
          goto fail;
        }
        if (lower == 1) {
          /* Transformer.tokenize lower-cases the text (str.lower) first:
          ** the same only where the tokenizer lower-cases too */
          sqlite3_stmt *t = NULL;
          int wp = 0;
          if (sqlite3_prepare_v2(db,
                                 "SELECT json_extract(?1, '$.tokenizer.type')"
                                 " = 'wordpiece' AND coalesce(json_extract("
                                 "?1, '$.tokenizer.do_lower_case'), 1)",
                                 -1, &t, NULL) == SQLITE_OK) {
            sqlite3_bind_text(t, 1, native, -1, SQLITE_STATIC);
            if (sqlite3_step(t) == SQLITE_ROW) wp = sqlite3_column_int(t, 0);
          }
          sqlite3_finalize(t);
          if (!wp) {
            *pzErr = sqlite3_mprintf("%s: %s: do_lower_case true is not "
                                     "supported with a tokenizer that keeps "
                                     "case",
                                     FN, name);
            goto fail;
          }
        }
        sqlite3_free(json);
        json = NULL;
      }
      sqlite3_free(name);
      name = NULL;
      continue;
    }
    if (kind == M_POOLING) {
      name = pathOf(path, "config.json");
      if (!name) goto nomem;
      json = jsonFile(db, files, n_files, name, "object", pzErr);
      if (!json) goto fail;
      if (readPooling(db, json, name, d_model, &bits, &include_prompt,
                      pzErr) != SQLITE_OK)
        goto fail;
      for (i = 0; i < 6; i++) width += (bits >> i) & 1;
      width *= d_model;
      sqlite3_str_appendf(o, "{\"pooling\": [");
      for (i = 0; i < N_POOLING; i++)
        if (bits & pooling_keys[i].bit)
          sqlite3_str_appendf(o, "%s\"%s\"",
                              (bits & (pooling_keys[i].bit - 1)) ? ", " : "",
                              relattn_sentence_pooling_name(
                                  pooling_keys[i].bit));
      sqlite3_str_appendf(o, "], \"include_prompt\": %s, \"dense\": [",
                          include_prompt ? "true" : "false");
    } else if (kind == M_DENSE) {
      relattn_st_file *w;
      int out;
      if (*n_dense == RELATTN_ST_MAX_DENSE) {
        *pzErr = sqlite3_mprintf("%s: modules.json: more than %d Dense "
                                 "modules", FN, RELATTN_ST_MAX_DENSE);
        goto fail;
      }
      name = pathOf(path, "config.json");
      if (!name) goto nomem;
      json = jsonFile(db, files, n_files, name, "object", pzErr);
      if (!json) goto fail;
      if (*n_dense) sqlite3_str_appendf(o, ", ");
      if (readDense(db, json, name, width, &out, o, pzErr) != SQLITE_OK)
        goto fail;
      width = out;
      sqlite3_free(name);
      name = pathOf(path, "pytorch_model.bin");
      if (!name) goto nomem;
      if (findFile(files, n_files, name)) {
        *pzErr = sqlite3_mprintf("%s: %s is a PyTorch pickle, which relattn "
                                 "does not read; save the module's weights "
                                 "as model.safetensors",
                                 FN, relattn_echo(e, name, -1));
        goto fail;
      }
      sqlite3_free(name);
      name = pathOf(path, "model.safetensors");
      if (!name) goto nomem;
      w = findFile(files, n_files, name);
      if (!w) {
        *pzErr = sqlite3_mprintf("%s: the sentence-transformers directory's "
                                 "'%s' is missing: pass '%s', "
                                 "readfile('.../%s')",
                                 FN, relattn_echo(e, name, -1),
                                 relattn_echo(e2, name, -1),
                                 relattn_echo(e2, name, -1));
        goto fail;
      }
      dense[*n_dense].file = w->data;
      dense[*n_dense].n = w->n;
      sqlite3_snprintf(sizeof dense[*n_dense].path, dense[*n_dense].path,
                       "%s", path);
      (*n_dense)++;
    }
    sqlite3_free(name);
    sqlite3_free(json);
    name = json = NULL;
  }
  if (rc != SQLITE_DONE) goto sqlerr;
  if (!seen[M_TRANSFORMER] || !seen[M_POOLING]) {
    *pzErr = sqlite3_mprintf("%s: modules.json has no %s module", FN,
                             seen[M_TRANSFORMER] ? "Pooling" : "Transformer");
    goto fail;
  }
  sqlite3_str_appendf(o, "], \"normalize\": %s",
                      seen[M_NORMALIZE] ? "true" : "false");
  if (max_seq > 0)
    sqlite3_str_appendf(o, ", \"max_seq_length\": %d", max_seq);
  sqlite3_str_appendf(o, ", \"do_lower_case\": %s}",
                      lower == 1 ? "true" : "false");
  /* prompts: encode() without prompt_name uses the default one */
  {
    relattn_st_file *f = findFile(files, n_files,
                                  "config_sentence_transformers.json");
    if (f) {
      relattn_jdoc j;
      char *prompt;
      json = jsonFile(db, files, n_files, "config_sentence_transformers.json",
                      "object", pzErr);
      if (!json) goto fail;
      if (relattn_jdoc_open(&j, db, json,
                            "config_sentence_transformers.json", pzErr))
        goto fail;
      prompt = relattn_jdoc_str(&j, "default_prompt_name", 0);
      relattn_jdoc_close(&j);
      if (j.rc != SQLITE_OK) goto fail;
      if (prompt) {
        *pzErr = sqlite3_mprintf("%s: config_sentence_transformers.json: "
                                 "default_prompt_name '%s' is not supported "
                                 "(relattn_embed puts no prompt in front)",
                                 FN, relattn_echo(e, prompt, -1));
        sqlite3_free(prompt);
        goto fail;
      }
    }
  }
  for (i = 0; i < n_files; i++)
    if (!files[i].used) {
      *pzErr = sqlite3_mprintf("%s: file '%s' (argument %d) is not a file of "
                               "the modules modules.json lists",
                               FN, relattn_echo(e, files[i].name, -1),
                               files[i].arg);
      goto fail;
    }
  obj = sqlite3_str_finish(o);
  o = NULL;
  if (!obj) goto nomem;
  if (sqlite3_prepare_v2(db, "SELECT json_set(?1, '$.sentence', json(?2))",
                         -1, &set, NULL) != SQLITE_OK)
    goto sqlerr;
  sqlite3_bind_text(set, 1, native, -1, SQLITE_STATIC);
  sqlite3_bind_text(set, 2, obj, -1, SQLITE_STATIC);
  if (sqlite3_step(set) != SQLITE_ROW) goto sqlerr;
  *native_out = sqlite3_mprintf("%s", sqlite3_column_text(set, 0));
  if (!*native_out) goto nomem;
  rc = SQLITE_OK;
  goto done;
nomem:
  rc = SQLITE_NOMEM;
  sqlite3_free(*pzErr);
  *pzErr = sqlite3_mprintf("%s: out of memory", FN);
  goto done;
sqlerr:
  rc = relattn_sql_code(db);
  sqlite3_free(*pzErr);
  *pzErr = relattn_sql_errmsg(db, FN, rc);
  goto done;
fail:
  rc = SQLITE_ERROR;
done:
  sqlite3_finalize(st);
  sqlite3_finalize(set);
  if (o) sqlite3_free(sqlite3_str_finish(o));
  sqlite3_free(obj);
  sqlite3_free(modules);
  sqlite3_free(json);
  sqlite3_free(name);
  if (rc != SQLITE_OK && !*pzErr) *pzErr = sqlite3_mprintf("%s: out of memory", FN);
  return rc;
}
