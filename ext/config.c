/*
** config.c: a model's native config (docs/reference.md, the config keys),
** JSON text decoded into a relattn_config and checked (src/model.c). The
** store decodes the config of each model it loads; relattn_import decodes
** the one it is about to write. No SQL function of its own; it reads the
** JSON with SQLite's json_type / json_extract.
**
**   SELECT relattn_import('m', readfile('tiny.safetensors'), '{"arch": "decoder"}');
**   -- relattn_import: config: missing key 'vocab_size'
**
** HOW IT WORKS
** One table, config_keys, holds every key: its JSON path, its kind, its
** choices and the field it sets, and for the keys of one position type or
** one head, which. relattn_config_decode walks it in order with one
** prepared statement, so a key is checked after the keys it depends on
** (position.type before position.clip, head before labels).
*/
#include "ext.h"

#include <stddef.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

enum { K_INT, K_NUM, K_BOOL, K_ENUM, K_OBJ, K_ID, K_OPTBOOL, K_DBL, K_OPTOBJ,
       K_LABELS };

/* position.type's choices and what each decodes to */
static const int position_types[] = {RELATTN_POS_SHAW, RELATTN_POS_NONE,
                                     RELATTN_POS_T5, RELATTN_POS_ALIBI,
                                     RELATTN_POS_ROPE, RELATTN_POS_ABSOLUTE,
                                     RELATTN_POS_REL_KEY,
                                     RELATTN_POS_REL_KEY_QUERY, RELATTN_POS_XL,
                                     RELATTN_POS_DEBERTA};
static const int rotary_styles[] = {1, 0}; /* half, interleaved */
static const int activations[] = {RELATTN_GELU, RELATTN_GELU_TANH,
                                  RELATTN_RELU};
static const int negated[] = {1, 0}; /* a K_BOOL into a "no_" field */
/* head_activation's and pooler.activation's choices */
static const int head_activations[] = {RELATTN_GELU, RELATTN_GELU_TANH,
                                       RELATTN_RELU, RELATTN_TANH};

#define NO_FIELD ((size_t)-1)
#define POS(t) (1u << (t))
#define HEAD(h) (1u << (16 + (h))) /* in only, above the POS bits */
#define POS_BITS 0xffffu
#define F(f) offsetof(relattn_config, f)
/* Each key: its JSON path, the name errors use, its kind, the choices of an
** enum ("a|b", decoded to their index, or to values[index]; a K_BOOL with
** values sets values[false or true]), the field it
** sets (an int, float for K_NUM, double for K_DBL), and for position keys
** the types they belong to (0: any): such a key is refused with another
** type, and optional with its own unless required. Keys absent and not
** required keep the defaults relattn_config_decode sets. HEAD bits in
** only do the same for the keys of some heads (head comes before them). */
static const struct config_key {
  const char *path, *key;
  int kind;
  const char *choices;
  const int *values;
  size_t field;
  unsigned only;           /* POS(RELATTN_POS_*) | ..., or 0: any */
  int required;
} config_keys[] = {
    {"$.arch", "arch", K_ENUM, "decoder|encoder", 0, F(arch), 0, 1},
    {"$.vocab_size", "vocab_size", K_INT, 0, 0, F(vocab_size), 0, 1},
    {"$.d_model", "d_model", K_INT, 0, 0, F(d_model), 0, 1},
    {"$.n_layers", "n_layers", K_INT, 0, 0, F(n_layers), 0, 1},
    {"$.n_heads", "n_heads", K_INT, 0, 0, F(n_heads), 0, 1},
    {"$.d_ff", "d_ff", K_INT, 0, 0, F(d_ff), 0, 1},
    /* optional: absent, d_model / n_heads (0 in the field) */
    {"$.d_head", "d_head", K_INT, 0, 0, F(d_head), 0, 0},
    {"$.norm", "norm", K_ENUM, "pre|post", 0, F(norm), 0, 1},
    {"$.norm_eps", "norm_eps", K_NUM, 0, 0, F(norm_eps), 0, 1},
    {"$.activation", "activation", K_ENUM, "gelu|gelu_tanh|relu", activations,
     F(activation), 0, 1},
    {"$.tie_embeddings", "tie_embeddings", K_BOOL, 0, 0, F(tie_embeddings), 0,
     1},
    /* the forward pass's options, each optional (docs/reference.md) */
    {"$.norm_kind", "norm_kind", K_ENUM, "layernorm|rmsnorm", 0, F(norm_kind),
     0, 0},
    {"$.biases", "biases", K_BOOL, 0, negated, F(no_biases), 0, 0},
    {"$.ffn", "ffn", K_ENUM, "plain|gated", 0, F(ffn_gated), 0, 0},
    {"$.quantization", "quantization", K_OBJ, 0, 0, NO_FIELD, 0, 0},
    {"$.quantization.linear", "quantization.linear", K_ENUM,
     "float32|int8|bf16", 0, F(quant), 0, 0},
    {"$.quantization.embeddings", "quantization.embeddings", K_ENUM,
     "float32|int8|bf16", 0, F(quant_emb), 0, 0},
    {"$.embedding", "embedding", K_OBJ, 0, 0, NO_FIELD, 0, 0},
    {"$.embedding.norm", "embedding.norm", K_BOOL, 0, 0, F(emb_norm), 0, 0},
    {"$.embedding.token_types", "embedding.token_types", K_INT, 0, 0,
     F(token_types), 0, 0},
    {"$.position", "position", K_OBJ, 0, 0, NO_FIELD, 0, 1},
    {"$.position.type", "position.type", K_ENUM, "shaw|none|t5|alibi|rope|absolute|rel_key|rel_key_query|xl|deberta",
     position_types, F(pos.type), 0, 1},
    {"$.position.clip", "position.clip", K_INT, 0, 0, F(clip),
     POS(RELATTN_POS_SHAW) | POS(RELATTN_POS_XL), 1},
    {"$.position.values", "position.values", K_BOOL, 0, 0, F(rel_values),
     POS(RELATTN_POS_SHAW), 1},
    {"$.position.per_head", "position.per_head", K_BOOL, 0, 0, F(per_head),
     POS(RELATTN_POS_SHAW), 1},
    {"$.position.num_buckets", "position.num_buckets", K_INT, 0, 0,
     F(pos.num_buckets), POS(RELATTN_POS_T5), 0},
    {"$.position.max_distance", "position.max_distance", K_INT, 0, 0,
     F(pos.max_distance), POS(RELATTN_POS_T5), 0},
    {"$.position.rotary", "position.rotary", K_ENUM, "half|interleaved",
     rotary_styles, F(pos.rotary_half), POS(RELATTN_POS_ROPE), 0},
    {"$.position.rotary_dim", "position.rotary_dim", K_INT, 0, 0,
     F(pos.rotary_dim), POS(RELATTN_POS_ROPE), 0},
    {"$.position.base", "position.base", K_DBL, 0, 0, F(pos.base),
     POS(RELATTN_POS_ROPE), 0},
    {"$.position.max_len", "position.max_len", K_INT, 0, 0, F(max_len),
     POS(RELATTN_POS_ABSOLUTE), 1},
    {"$.position.max_position_embeddings", "position.max_position_embeddings",
     K_INT, 0, 0, F(max_len),
     POS(RELATTN_POS_REL_KEY) | POS(RELATTN_POS_REL_KEY_QUERY), 1},
    {"$.position.position_buckets", "position.position_buckets", K_INT, 0, 0,
     F(pos.position_buckets), POS(RELATTN_POS_DEBERTA), 0},
    {"$.position.max_relative_positions", "position.max_relative_positions",
     K_INT, 0, 0, F(pos.max_relative_positions), POS(RELATTN_POS_DEBERTA), 0},
    {"$.position.norm_rel_ebd", "position.norm_rel_ebd", K_ENUM,
     "none|layer_norm", 0, F(rel_norm), POS(RELATTN_POS_DEBERTA), 0},
    {"$.tokenizer", "tokenizer", K_OBJ, 0, 0, NO_FIELD, 0, 1},
    {"$.tokenizer.type", "tokenizer.type", K_ENUM,
     "bytes|wordpiece|sentencepiece", 0, F(tok_type), 0, 1},
    {"$.tokenizer.bos", "tokenizer.bos", K_ID, 0, 0, F(bos), 0, 0},
    {"$.tokenizer.eos", "tokenizer.eos", K_ID, 0, 0, F(eos), 0, 0},
    {"$.tokenizer.pad", "tokenizer.pad", K_ID, 0, 0, F(pad), 0, 0},
    {"$.tokenizer.append", "tokenizer.append", K_ID, 0, 0, F(append), 0, 0},
    {"$.tokenizer.sep", "tokenizer.sep", K_ID, 0, 0, F(sep), 0, 0},
    {"$.tokenizer.mask", "tokenizer.mask", K_ID, 0, 0, F(mask), 0, 0},
    {"$.tokenizer.unk", "tokenizer.unk", K_ID, 0, 0, F(unk), 0, 0},
    /* checked entry by entry where the tokenizer is made (ext/tokfile.c) */
    {"$.tokenizer.split_special", "tokenizer.split_special", K_BOOL, 0, 0,
     F(split_special), 0, 0},
    {"$.tokenizer.added_tokens", "tokenizer.added_tokens", K_OBJ, 0, 0,
     NO_FIELD, 0, 0},
    /* absent or null: do_lower_case, chinese chars and clean-up true,
    ** strip_accents -1 (as do_lower_case) */
    {"$.tokenizer.do_lower_case", "tokenizer.do_lower_case", K_OPTBOOL, 0, 0,
     F(do_lower_case), 0, 0},
    {"$.tokenizer.strip_accents", "tokenizer.strip_accents", K_OPTBOOL, 0, 0,
     F(strip_accents), 0, 0},
    {"$.tokenizer.tokenize_chinese_chars", "tokenizer.tokenize_chinese_chars",
     K_OPTBOOL, 0, 0, F(chinese_chars), 0, 0},
    /* absent: transformers (RELATTN_RULES_*) */
    {"$.tokenizer.rules", "tokenizer.rules", K_ENUM, "transformers|tokenizers",
     0, F(tok_rules), 0, 0},
    {"$.tokenizer.clean_up_tokenization_spaces",
     "tokenizer.clean_up_tokenization_spaces", K_OPTBOOL, 0, 0,
     F(clean_up_spaces), 0, 0},
    /* an encoder-decoder's decoder (docs/reference.md): absent, none */
    {"$.decoder", "decoder", K_OPTOBJ, 0, 0, F(decoder), 0, 0},
    {"$.decoder.n_layers", "decoder.n_layers", K_INT, 0, 0, F(dec_layers), 0,
     0},
    {"$.decoder.start", "decoder.start", K_ID, 0, 0, F(dec_start), 0, 0},
    /* the head (absent: lm) and its keys */
    {"$.head", "head", K_ENUM, "lm|mlm|classifier|none|token_classifier", 0,
     F(head), 0, 0},
    {"$.head_activation", "head_activation", K_ENUM, "gelu|gelu_tanh|relu|tanh",
     head_activations, F(head_activation), HEAD(RELATTN_HEAD_MLM), 0},
    {"$.pooler", "pooler", K_OPTOBJ, 0, 0, F(pooler), 0, 0},
    {"$.pooler.activation", "pooler.activation", K_ENUM,
     "gelu|gelu_tanh|relu|tanh", head_activations, F(pooler_activation), 0, 0},
    {"$.labels", "labels", K_LABELS, 0, 0, F(n_labels),
     HEAD(RELATTN_HEAD_CLASSIFIER) | HEAD(RELATTN_HEAD_TOKEN), 0},
    {"$.problem_type", "problem_type", K_ENUM,
     "single_label_classification|multi_label_classification|regression", 0,
     F(problem_type), HEAD(RELATTN_HEAD_CLASSIFIER), 0},
};
#undef F

static const char *kind_name(int kind) {
  switch (kind) {
    case K_INT: return "an integer";
    case K_NUM: return "a number";
    case K_BOOL: return "true or false";
    case K_ENUM: return "a string";
    case K_OBJ: return "an object";
    case K_OPTBOOL: return "true, false or null";
    case K_DBL: return "a number";
    case K_OPTOBJ: return "an object or null";
    case K_LABELS: return "an array of strings";
    default: return "an integer or null";
  }
}

/* Index of s in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *s) {
  size_t n = strlen(s);
  int i = 0;
  const char *p = choices;
  while (*p) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && memcmp(p, s, n) == 0) return i;
    if (!bar) break;
    p = bar + 1, i++;
  }
  return -1;
}

/* The number of labels of an array of strings at $.labels into *n; an
** element of another type is refused, naming it. */
static int labelsCount(sqlite3 *db, const char *json, const char *key,
                       const char *what, sqlite3_int64 *n, char **pzErr) {
  sqlite3_stmt *st = relattn_prepare(
      db,
      "SELECT count(*), min(CASE WHEN type != 'text' THEN key END), "
      "min(CASE WHEN type != 'text' THEN key END) IS NOT NULL, "
      "(SELECT type FROM json_each(?1, '$.labels') WHERE type != 'text' "
      "ORDER BY key LIMIT 1) FROM json_each(?1, '$.labels')",
      what, pzErr);
  int rc;
  if (!st) return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_ROW) {
    rc = relattn_sql_code(db);
    *pzErr = relattn_sql_errmsg(db, what, rc);
    sqlite3_finalize(st);
    return rc;
  }
  *n = sqlite3_column_int64(st, 0);
  rc = SQLITE_OK;
  if (sqlite3_column_int(st, 2)) {
    *pzErr = sqlite3_mprintf("%s: '%s' must be an array of strings, not "
                             "with %s at %lld",
                             what, key, sqlite3_column_text(st, 3),
                             sqlite3_column_int64(st, 1));
    rc = SQLITE_ERROR;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_OK) return rc;
  /* each label as written: see relattn_json_has_nul */
  st = relattn_prepare(db,
                       "SELECT key, json_extract(?1, fullkey, fullkey) FROM "
                       "json_each(?1, '$.labels') ORDER BY key",
                       what, pzErr);
  if (!st) return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    if (relattn_json_has_nul((const char *)sqlite3_column_text(st, 1))) {
      *pzErr = sqlite3_mprintf("%s: label %lld of '%s'" RELATTN_NUL_MSG, what,
                               sqlite3_column_int64(st, 0), key);
      sqlite3_finalize(st);
      return SQLITE_ERROR;
    }
  if (rc != SQLITE_DONE) {
    rc = relattn_sql_code(db);
    *pzErr = relattn_sql_errmsg(db, what, rc);
  } else {
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc;
}

/* ---- sentence: sentence-transformers' modules ------------------------------ */

/* One value of the config: its JSON type into *type (NULL: absent) and,
** for an integer, *iv; a string's text (SQLITE_MISMATCH when it holds a
** NUL). The statement is json_type, json_extract of ?1, ?2 and the value as
** written. */
static int sentenceValue(sqlite3_stmt *st, const char *path, char *type,
                         size_t type_n, sqlite3_int64 *iv, char *text,
                         size_t text_n) {
  int rc;
  sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SQLITE_ERROR : rc;
  }
  type[0] = 0;
  if (sqlite3_column_type(st, 0) != SQLITE_NULL)
    sqlite3_snprintf((int)type_n, type, "%s", sqlite3_column_text(st, 0));
  if (iv) *iv = sqlite3_column_int64(st, 1);
  if (text) {
    const char *t = (const char *)sqlite3_column_text(st, 1);
    text[0] = 0;
    if (sqlite3_column_type(st, 1) == SQLITE_TEXT && t) {
      /* a string holding a NUL (\u0000) would read as its first part:
      ** seen in the value as written (SQLite before 3.45 cuts it) */
      if ((size_t)sqlite3_column_bytes(st, 1) != strlen(t) ||
          relattn_json_has_nul((const char *)sqlite3_column_text(st, 2))) {
        sqlite3_reset(st);
        return SQLITE_MISMATCH;
      }
      sqlite3_snprintf((int)text_n, text, "%s", t);
    }
  }
  sqlite3_reset(st);
  return SQLITE_OK;
}

/* The optional "sentence" object (docs/reference.md): pooling (an array of
** mode names), dense (an array of {in_features, out_features, bias,
** activation}), normalize, max_seq_length. Other keys inside it are kept
** and ignored, as anywhere in the config. */
static int sentenceDecode(sqlite3 *db, const char *json, relattn_config *cfg,
                          const char *what, char **pzErr) {
  static const char *const modes[] = {"cls", "max", "mean", "mean_sqrt_len",
                                      "weightedmean", "lasttoken"};
  static const char *const acts[] = {"identity", "tanh", "relu", "gelu",
                                     "sigmoid"};
  sqlite3_stmt *st = relattn_prepare(
      db, "SELECT json_type(?1, ?2), json_extract(?1, ?2), "
          "json_extract(?1, ?2, ?2)", what, pzErr);
  char type[16], text[64], path[96], e[RELATTN_ECHO_BUF];
  sqlite3_int64 n = 0, iv;
  int rc, k, j;
  if (!st) return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
#define VALUE(p, ivp, txt)                                                   \
  if ((rc = sentenceValue(st, p, type, sizeof type, ivp, txt,                \
                          sizeof text)) == SQLITE_MISMATCH)                  \
    FAIL("%s: '%s'" RELATTN_NUL_MSG, what, p + 2);                           \
  else if (rc != SQLITE_OK)                                                  \
    goto sqlerr;
#define FAIL(...)                                                            \
  do {                                                                       \
    *pzErr = sqlite3_mprintf(__VA_ARGS__);                                   \
    rc = SQLITE_ERROR;                                                       \
    goto done;                                                               \
  } while (0)
  VALUE("$.sentence", NULL, NULL);
  if (!type[0]) {
    rc = SQLITE_OK;
    goto done;
  }
  if (strcmp(type, "object") != 0)
    FAIL("%s: 'sentence' must be an object, not %s", what, type);
  cfg->st = 1;
  VALUE("$.sentence.pooling", NULL, NULL);
  if (!type[0]) FAIL("%s: missing key 'sentence.pooling'", what);
  if (strcmp(type, "array") != 0)
    FAIL("%s: 'sentence.pooling' must be an array of strings, not %s", what,
         type);
  {
    sqlite3_stmt *len = relattn_prepare(
        db, "SELECT json_array_length(?1, '$.sentence.pooling'), "
            "json_array_length(?1, '$.sentence.dense')", what, pzErr);
    if (!len) {
      rc = relattn_sql_code(db);
      goto done;
    }
    sqlite3_bind_text(len, 1, json, -1, SQLITE_STATIC);
    if (sqlite3_step(len) == SQLITE_ROW) {
      n = sqlite3_column_int64(len, 0);
      cfg->st_n_dense = (int)(sqlite3_column_int64(len, 1) >
                                      RELATTN_ST_MAX_DENSE
                                  ? RELATTN_ST_MAX_DENSE + 1
                                  : sqlite3_column_int64(len, 1));
    }
    sqlite3_finalize(len);
  }
  for (k = 0; k < n; k++) {
    sqlite3_snprintf(sizeof path, path, "$.sentence.pooling[%d]", k);
    VALUE(path, NULL, text);
    if (strcmp(type, "text") != 0)
      FAIL("%s: 'sentence.pooling' must be an array of strings, not with %s "
           "at %d", what, type, k);
    for (j = 0; j < 6 && strcmp(text, modes[j]) != 0; j++) {
    }
    if (j == 6)
      FAIL("%s: 'sentence.pooling' has '%s'; the modes are cls, max, mean, "
           "mean_sqrt_len, weightedmean, lasttoken",
           what, relattn_echo(e, text, -1));
    cfg->st_pooling |= 1 << j;
  }
  VALUE("$.sentence.dense", NULL, NULL);
  if (type[0] && strcmp(type, "array") != 0)
    FAIL("%s: 'sentence.dense' must be an array of objects, not %s", what,
         type);
  if (!type[0]) cfg->st_n_dense = 0;
  if (cfg->st_n_dense > RELATTN_ST_MAX_DENSE)
    FAIL("%s: 'sentence.dense' may have at most %d modules", what,
         RELATTN_ST_MAX_DENSE);
  for (k = 0; k < cfg->st_n_dense; k++) {
    static const char *const ints[] = {"in_features", "out_features"};
    sqlite3_snprintf(sizeof path, path, "$.sentence.dense[%d]", k);
    VALUE(path, NULL, NULL);
    if (strcmp(type, "object") != 0)
      FAIL("%s: 'sentence.dense[%d]' must be an object, not %s", what, k,
           type);
    for (j = 0; j < 2; j++) {
      sqlite3_snprintf(sizeof path, path, "$.sentence.dense[%d].%s", k,
                       ints[j]);
      VALUE(path, &iv, NULL);
      if (!type[0])
        FAIL("%s: missing key 'sentence.dense[%d].%s'", what, k, ints[j]);
      if (strcmp(type, "integer") != 0)
        FAIL("%s: 'sentence.dense[%d].%s' must be an integer, not %s", what,
             k, ints[j], type);
      if (iv < 1 || iv > (1 << 24))
        FAIL("%s: 'sentence.dense[%d].%s' must be between 1 and %d, not %lld",
             what, k, ints[j], 1 << 24, iv);
      if (j == 0) cfg->st_in[k] = (int)iv;
      else cfg->st_out[k] = (int)iv;
    }
    sqlite3_snprintf(sizeof path, path, "$.sentence.dense[%d].bias", k);
    VALUE(path, NULL, NULL);
    if (type[0] && strcmp(type, "true") != 0 && strcmp(type, "false") != 0)
      FAIL("%s: 'sentence.dense[%d].bias' must be true or false, not %s",
           what, k, type);
    cfg->st_bias[k] = !type[0] || strcmp(type, "true") == 0;
    sqlite3_snprintf(sizeof path, path, "$.sentence.dense[%d].activation", k);
    VALUE(path, NULL, text);
    if (!type[0]) FAIL("%s: missing key 'sentence.dense[%d].activation'",
                       what, k);
    if (strcmp(type, "text") != 0)
      FAIL("%s: 'sentence.dense[%d].activation' must be a string, not %s",
           what, k, type);
    for (j = 0; j < 5 && strcmp(text, acts[j]) != 0; j++) {
    }
    if (j == 5)
      FAIL("%s: 'sentence.dense[%d].activation' must be one of identity,"
           "tanh,relu,gelu,sigmoid, not '%s'",
           what, k, relattn_echo(e, text, -1));
    cfg->st_act[k] = j;
  }
  VALUE("$.sentence.normalize", NULL, NULL);
  if (type[0] && strcmp(type, "true") != 0 && strcmp(type, "false") != 0)
    FAIL("%s: 'sentence.normalize' must be true or false, not %s", what,
         type);
  cfg->st_normalize = strcmp(type, "true") == 0;
  VALUE("$.sentence.max_seq_length", &iv, NULL);
  if (type[0] && strcmp(type, "null") != 0) {
    if (strcmp(type, "integer") != 0)
      FAIL("%s: 'sentence.max_seq_length' must be an integer or null, not %s",
           what, type);
    if (iv < 1 || iv > (1 << 24))
      FAIL("%s: 'sentence.max_seq_length' must be between 1 and %d, not "
           "%lld", what, 1 << 24, iv);
    cfg->st_max_seq = (int)iv;
  }
  rc = SQLITE_OK;
  goto done;
#undef VALUE
#undef FAIL
sqlerr:
  rc = relattn_sql_code(db);
  *pzErr = relattn_sql_errmsg(db, what, rc);
done:
  sqlite3_finalize(st);
  return rc;
}

/* Decodes a config (the README's config keys) and checks it. Errors start
** with what, e.g. "relattn_import: config". Returns an SQLite code. */
int relattn_config_decode(sqlite3 *db, const char *json, relattn_config *cfg,
                          const char *what, char **pzErr) {
  sqlite3_stmt *st;
  size_t i;
  int rc = SQLITE_OK;
  char err[256];
  memset(cfg, 0, sizeof *cfg);
  cfg->bos = cfg->eos = cfg->pad = -1;
  cfg->append = cfg->sep = cfg->mask = cfg->unk = -1;
  cfg->pooler_activation = RELATTN_TANH; /* BERT's pooler */
  cfg->do_lower_case = cfg->chinese_chars = cfg->clean_up_spaces = 1;
  cfg->strip_accents = -1;
  relattn_position_defaults(&cfg->pos, RELATTN_POS_SHAW);
  st =
      relattn_prepare(db,
                      "SELECT json_valid(?1), CASE WHEN json_valid(?1) THEN "
                      "json_type(?1) END, CASE WHEN json_valid(?1) THEN "
                      "json_type(?1, ?2) END, CASE WHEN json_valid(?1) THEN "
                      "json_extract(?1, ?2) END, CASE WHEN json_valid(?1) THEN "
                      "json_extract(?1, ?2, ?2) END",
                      what, pzErr);
  if (!st) return relattn_sql_code(db);
  sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
  for (i = 0; i < sizeof config_keys / sizeof config_keys[0]; i++) {
    const struct config_key *k = &config_keys[i];
    const char *type;
    sqlite3_int64 iv = 0;
    double dv = 0;
    sqlite3_bind_text(st, 2, i == 0 ? "$" : k->path, -1, SQLITE_STATIC);
    if (i == 0) {
      /* first, the document itself */
      if (sqlite3_step(st) != SQLITE_ROW) goto sqlerr;
      if (!sqlite3_column_int(st, 0)) {
        *pzErr = sqlite3_mprintf("%s: not valid JSON", what);
        rc = SQLITE_ERROR;
        goto done;
      }
      if (strcmp((const char *)sqlite3_column_text(st, 1), "object") != 0) {
        *pzErr = sqlite3_mprintf("%s: not a JSON object", what);
        rc = SQLITE_ERROR;
        goto done;
      }
      sqlite3_reset(st);
      sqlite3_bind_text(st, 2, k->path, -1, SQLITE_STATIC);
    }
    if (sqlite3_step(st) != SQLITE_ROW) goto sqlerr;
    type = (const char *)sqlite3_column_text(st, 2);
    if ((k->only & POS_BITS) && !(k->only & POS(cfg->pos.type))) {
      /* the key of another position type (position.type came before) */
      if (type) {
        *pzErr = sqlite3_mprintf("%s: '%s' is not a key of position type "
                                 "'%s'",
                                 what, k->key,
                                 relattn_position_name(cfg->pos.type));
        rc = SQLITE_ERROR;
        goto done;
      }
      sqlite3_reset(st);
      continue;
    }
    if ((k->only & ~POS_BITS) && !(k->only & HEAD(cfg->head)) && type) {
      *pzErr = sqlite3_mprintf("%s: '%s' is not a key of head '%s'", what,
                               k->key, relattn_head_name(cfg->head));
      rc = SQLITE_ERROR;
      goto done;
    }
    if (!type) {
      if (k->required) {
        *pzErr = sqlite3_mprintf("%s: missing key '%s'", what, k->key);
        rc = SQLITE_ERROR;
        goto done;
      }
      if (k->kind != K_ID && k->kind != K_OPTBOOL) {
        sqlite3_reset(st); /* the default stays */
        continue;
      }
      type = "null";
    }
    switch (k->kind) {
      case K_INT:
      case K_ID:
        if (k->kind == K_ID && strcmp(type, "null") == 0) {
          iv = -1;
          break;
        }
        if (strcmp(type, "integer") != 0) goto badtype;
        if (sqlite3_column_type(st, 3) != SQLITE_INTEGER ||
            (iv = sqlite3_column_int64(st, 3)) < -2147483647 ||
            iv > 2147483647) {
          *pzErr = sqlite3_mprintf("%s: '%s' is out of range", what, k->key);
          rc = SQLITE_ERROR;
          goto done;
        }
        if (k->kind == K_ID && iv == -1) iv = -2; /* -1 means absent */
        if (k->field == offsetof(relattn_config, d_head) && iv < 1) {
          /* 0 in the field means absent: a d_head given is at least 1 */
          *pzErr = sqlite3_mprintf("%s: 'd_head' must be between 1 and %d, "
                                   "not %lld",
                                   what, 1 << 24, iv);
          rc = SQLITE_ERROR;
          goto done;
        }
        break;
      case K_NUM:
      case K_DBL:
        if (strcmp(type, "integer") != 0 && strcmp(type, "real") != 0)
          goto badtype;
        dv = sqlite3_column_double(st, 3);
        break;
      case K_BOOL:
        if (strcmp(type, "true") != 0 && strcmp(type, "false") != 0)
          goto badtype;
        iv = strcmp(type, "true") == 0;
        if (k->values) iv = k->values[iv];
        break;
      case K_OBJ:
        if (strcmp(type, "object") != 0) goto badtype;
        break;
      case K_OPTOBJ: /* null: as absent */
        if (strcmp(type, "null") != 0 && strcmp(type, "object") != 0)
          goto badtype;
        iv = strcmp(type, "object") == 0;
        break;
      case K_LABELS:
        if (strcmp(type, "array") != 0) goto badtype;
        rc = labelsCount(db, json, k->key, what, &iv, pzErr);
        if (rc != SQLITE_OK) goto done;
        break;
      case K_OPTBOOL: /* absent or null: -1 */
        if (strcmp(type, "null") == 0) {
          iv = -1;
          break;
        }
        if (strcmp(type, "true") != 0 && strcmp(type, "false") != 0)
          goto badtype;
        iv = strcmp(type, "true") == 0;
        break;
      case K_ENUM: {
        const char *s = (const char *)sqlite3_column_text(st, 3);
        if (strcmp(type, "text") != 0) goto badtype;
        if (relattn_json_has_nul((const char *)sqlite3_column_text(st, 4))) {
          *pzErr = sqlite3_mprintf("%s: '%s'" RELATTN_NUL_MSG, what, k->key);
          rc = SQLITE_ERROR;
          goto done;
        }
        iv = choice_index(k->choices, s ? s : "");
        if (iv < 0) {
          char *list = sqlite3_mprintf("%s", k->choices), *p;
          if (!list) {
            rc = SQLITE_NOMEM;
            goto done;
          }
          for (p = list; *p; p++)
            if (*p == '|') *p = ',';
          char e[RELATTN_ECHO_BUF];
          *pzErr = sqlite3_mprintf("%s: '%s' must be one of %s, not '%s'",
                                   what, k->key, list, relattn_echo(e, s, -1));
          sqlite3_free(list);
          rc = SQLITE_ERROR;
          goto done;
        }
        if (k->values) iv = k->values[iv];
        break;
      }
    }
    if (k->field != NO_FIELD) {
      char *field = (char *)cfg + k->field;
      if (k->kind == K_NUM) {
        float f = (float)dv;
        memcpy(field, &f, sizeof f);
      } else if (k->kind == K_DBL) {
        memcpy(field, &dv, sizeof dv);
      } else {
        int v = (int)iv;
        if (k->kind == K_OPTBOOL && iv == -1 &&
            k->field != offsetof(relattn_config, strip_accents))
          v = 1; /* do_lower_case, tokenize_chinese_chars,
                 ** clean_up_tokenization_spaces: default true */
        memcpy(field, &v, sizeof v);
      }
    }
    sqlite3_reset(st);
    continue;
  badtype:
    *pzErr = sqlite3_mprintf("%s: '%s' must be %s, not %s", what, k->key,
                             kind_name(k->kind), type);
    rc = SQLITE_ERROR;
    goto done;
  }
  if ((rc = sentenceDecode(db, json, cfg, what, pzErr)) != SQLITE_OK)
    goto done;
  if (relattn_config_check(cfg, what, err, sizeof err) != RELATTN_OK) {
    *pzErr = sqlite3_mprintf("%s", err);
    rc = SQLITE_ERROR;
  }
  goto done;
sqlerr:
  rc = relattn_sql_code(db);
  *pzErr = relattn_sql_errmsg(db, what, rc);
done:
  sqlite3_finalize(st);
  return rc;
}
