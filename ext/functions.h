/*
** functions.h: the SQL functions and modules each ext/ file defines, for the
** registration table in relattn.c.
*/
#ifndef RELATTN_FUNCTIONS_H
#define RELATTN_FUNCTIONS_H

#include "ext.h"


/* ext/store.c: frees the connection's model cache. */
void relattn_store_close(relattn_conn *conn);

/* ext/store.c: the connection's cached, float32 copy of model `name`, loaded
** on first use and reloaded when its rows changed (from any connection).
** Returns NULL with *pzErr set (sqlite3_malloc'd, prefixed by fn) on error:
** "<fn>: no model named 'x'", a bad config or tensor. Each acquire is paired
** with a release; a model stays valid while held, even if a newer version
** replaces it in the cache (worker threads may hold it). Call from the
** connection's thread (it reads the tables); release from any thread. */
const relattn_model *relattn_store_acquire(relattn_conn *conn,
                                           const char *name, const char *fn,
                                           char **pzErr);
/* The same, reading the model tables of database schema ("main", "aux", ...)
** alone; schema NULL: where SQLite resolves the unqualified names. */
const relattn_model *relattn_store_acquire_in(relattn_conn *conn,
                                              const char *schema,
                                              const char *name, const char *fn,
                                              char **pzErr);
void relattn_store_release(relattn_conn *conn, const relattn_model *m);
/* ext/store.c: moves every model in from's cache (a connection of the
** caller's, conn's settings with another sqlite3 *) into conn's cache, under
** schema as relattn_store_acquire_in names it; from's cache is left empty. */
void relattn_store_adopt(relattn_conn *conn, relattn_conn *from,
                         const char *schema);
/* ext/store.c: label i of a classifier model held from acquire (its
** config's labels[i]), NULL for another head or i out of range. */
const char *relattn_store_label(const relattn_model *m, int i);
/* ext/store.c: the number of models in the connection's cache and their
** bytes of float32 weights (relattn_debug). */
void relattn_store_stats(relattn_conn *conn, int *n_models,
                         sqlite3_int64 *bytes);
/* ext/store.c: drops the least recently used models until the rest fit
** relattn_cache_size(); the most recent one always stays. */
void relattn_store_trim(relattn_conn *conn);

/* ext/store.c: the model named by argument v (TEXT), acquired; NULL with
** the SQL error set ("<fn>: model must be a model name (TEXT)", unknown
** model, ...). Release with relattn_store_release. */
const relattn_model *relattn_model_arg(sqlite3_context *ctx, sqlite3_value *v,
                                       const char *fn);

/* ext/util.c: a token-sequence argument as int32 ids: a BLOB of
** little-endian int32, or TEXT run through m's tokenizer (TEXT needs m). Does
** not add BOS. With m, checks every id < vocab_size. Returns an
** sqlite3_malloc'd array (n may be 0) or NULL with *pzErr set, naming fn and
** arg: "<fn>: <arg> has 10 bytes, not a multiple of 4". */
int32_t *relattn_tokens_value(sqlite3_value *v, const relattn_model *m,
                              const char *fn, const char *arg, int *n_out,
                              char **pzErr);
/* relattn_tokens_value for a function that takes a model, under
** relattn_max_tokens(): more ids is refused before a BLOB is copied and as
** soon as encoding a TEXT passes it ("<fn>: <arg> has 70000 tokens, over
** relattn_max_tokens() = 65536", SQLITE_TOOBIG). Returns an SQLite code;
** *ids (sqlite3_malloc'd) is set when it is SQLITE_OK. */
int relattn_tokens_limited(relattn_conn *conn, const relattn_model *m,
                           sqlite3_value *v, const char *fn, const char *arg,
                           int32_t **ids, int *n_out, char **pzErr);

/* ext/store.c: a model as relattn_import hands it to the store, checked:
** its native config (the text and as decoded) and, in the config's order,
** each tensor it needs, then the tokenizer's file (NULL: none). */
typedef struct relattn_plan_tensor {
  int dtype;            /* RELATTN_F32, RELATTN_F16, RELATTN_BF16, RELATTN_I8 */
  const void *data;     /* (bytes), never NULL */
  sqlite3_uint64 bytes;
} relattn_plan_tensor;
typedef struct relattn_plan {
  const char *config;
  const relattn_config *cfg;
  relattn_plan_tensor *t;   /* (relattn_model_n_tensors(cfg)) */
  const uint8_t *tok;       /* (tok_n) */
  size_t tok_n;
  const char *fn;           /* the function messages name; NULL: relattn_import */
  int no_replace;           /* 1: a model of that name is an error, not replaced */
} relattn_plan;
/* ext/store.c: writes plan p as model `model`, all or nothing: the tables
** on first use, the model row (a new rowid, the next version), its tensor
** rows and the sha256 of their data. Returns an SQLite code, with *pzErr
** set (starting with p->fn) on failure, the database unchanged. */
int relattn_store_write(sqlite3 *db, const char *model, const relattn_plan *p,
                        char **pzErr);
/* ext/import.c: relattn_import(model, safetensors_blob [, config_json [,
** tokenizer_blob [, tokenizer_config_json]]]). */
void relattn_import_func(sqlite3_context *ctx, int argc, sqlite3_value **argv);
/* ext/quantize.c: relattn_quantize(model, new_model, mode). */
void relattn_quantize_func(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv);
/* ext/export.c: relattn_export(model). */
void relattn_export_func(sqlite3_context *ctx, int argc, sqlite3_value **argv);
/* ext/hf.c: is config (JSON text) Hugging Face's config.json (it has
** model_type and no native arch)? */
int relattn_hf_is_config(sqlite3 *db, const char *config);
/* ext/hf.c: maps a Hugging Face checkpoint onto the native model: renames
** t[i].name (sqlite3_malloc'd) to native names, sets skip[i] for tensors
** the model leaves out and own[i] for data it rewrites (sqlite3_malloc'd),
** and gives the native config. raw[i] (or raw NULL) names a tensor's dtype
** that is no float. Returns an SQLite code with *pzErr set on error. */
typedef struct relattn_hf_info {
  int family;      /* which rules named the tensors */
  int prefixed;    /* the base model's names carry "bert." / "deberta." */
  int gated;       /* T5: wi_0 / wi_1 */
  int lm_predictions; /* DeBERTa: Microsoft's masked-LM names */
} relattn_hf_info;
int relattn_hf_map(sqlite3 *db, const char *hf_config, const char *tok_config,
                   relattn_st_tensor *t, int n, const char *const *raw,
                   const uint8_t *const *data /* (n): each tensor's file's
                                               ** data section */,
                   const uint8_t **tok, size_t *tok_n,
                   uint8_t **tok_own, unsigned char *skip, uint8_t **own,
                   char **hf_names, relattn_hf_info *info, char **native,
                   char **pzErr);
/* ext/hf.c: the Hugging Face name a native tensor of such a checkpoint
** has (sqlite3_malloc'd), or NULL: for messages about a missing tensor. */
char *relattn_hf_name_of(const relattn_hf_info *info, const char *native);

/* ext/hf_st.c: a sentence-transformers directory's files, given to
** relattn_import as (name, file) pairs after the checkpoint's. */
typedef struct relattn_st_file {
  const char *name;        /* "modules.json", "1_Pooling/config.json", ... */
  const uint8_t *data;     /* the file's bytes (in the argument) */
  size_t n;
  int arg;                 /* its name's argument number, from 1 */
  int used;                /* set when a module reads it */
} relattn_st_file;
/* A Dense module's weights: its model.safetensors and the module's path. */
typedef struct relattn_st_dense {
  const uint8_t *file;
  size_t n;
  char path[64];
} relattn_st_dense;
/* Reads modules.json and its modules' files against native (the config
** ext/hf.c made) into *native_out (sqlite3_malloc'd: native with its
** "sentence" key) and the Dense modules' files, in order. */
int relattn_hf_st_read(sqlite3 *db, relattn_st_file *files, int n_files,
                       const char *native, char **native_out,
                       relattn_st_dense *dense, int *n_dense, char **pzErr);

/* relattn_weights(model, tensor): float32 weights as the cache holds them. */
void relattn_weights_func(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv);

/* ext/tokens.c: relattn_tokens, relattn_tokens_json, relattn_tokenize,
** relattn_detokenize, relattn_tokens_agg, relattn_tokens_each. */
void relattn_tokens_func(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void relattn_tokens_json_func(sqlite3_context *ctx, int argc,
                              sqlite3_value **argv);
void relattn_tokenize_func(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv);
void relattn_detokenize_func(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv);
void relattn_tokens_agg_step(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv);
void relattn_tokens_agg_final(sqlite3_context *ctx);
extern sqlite3_module relattn_tokens_each_module;

/* ext/attention_fn.c: relattn_attention(q, k, v, rel_k, rel_v, options
** [, table, table]). */
void relattn_attention_func(sqlite3_context *ctx, int argc,
                            sqlite3_value **argv);

/* ext/model_fn.c: the forward pass in SQL. */
void relattn_score_func(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void relattn_perplexity_func(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv);
void relattn_embed_func(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void relattn_classify_func(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv);

/* ext/model_tvf.c: the forward pass as table-valued functions. */
extern sqlite3_module relattn_logprobs_module;
extern sqlite3_module relattn_labels_module;
/* ext/zero_shot.c: zero-shot classification over an NLI classifier. */
extern sqlite3_module relattn_zero_shot_module;
/* ext/entities_tvf.c: a token classifier's words and entities. */
extern sqlite3_module relattn_token_labels_module;
extern sqlite3_module relattn_attention_weights_module;

/* ext/model_fn.c: the pooling of an embedding (relattn_embed's third
** argument, relattn_scan's pooling=): "mean" over the sequence's own rows,
** "cls" the final row 0, "pooler" the model's pooler on it. parse gives
** RELATTN_POOL_* or -1; check gives the message when model m (named name)
** cannot (sqlite3_malloc'd), else NULL; request sets f's output to out.
** RELATTN_POOL_DEFAULT (no pooling argument) is the model's own vector: its
** sentence-transformers modules when its config has "sentence", else mean;
** width gives the floats of a pooling's vector. */
enum { RELATTN_POOL_MEAN = 0, RELATTN_POOL_CLS = 1, RELATTN_POOL_POOLER = 2,
       RELATTN_POOL_DEFAULT = 3 };
int relattn_pooling_width(const relattn_model *m, int pooling);
int relattn_pooling_parse(const char *name);
char *relattn_pooling_check(const relattn_model *m, const char *fn,
                            const char *name, int pooling);
void relattn_pooling_request(relattn_fwd *f, const relattn_model *m,
                             int pooling, float *out);

/* ext/model_fn.c: one model call, as every function that runs a model on
** a token argument makes it: the held model and its input. */
typedef struct relattn_call {
  relattn_conn *conn;
  const relattn_model *m; /* held (relattn_store_acquire) */
  int32_t *input;         /* (n) [bos] + tokens + [append] */
  int n;                  /* model input length */
  int bos;                /* 1 when input[0] is the tokenizer's bos */
} relattn_call;
/* What a call needs of the model. */
enum { RELATTN_NEED_ANY = 0, RELATTN_NEED_LM = 1, RELATTN_NEED_FILL = 2,
       RELATTN_NEED_CLASSIFIER = 3,
       RELATTN_NEED_GEN = 4 /* generates: a decoder's LM head, or an
                            ** encoder-decoder */ };
/* relattn_call_init loads the model and decodes tokens into *mc
** (relattn_model_input: the rules every model function shares), checking
** that the model serves need (RELATTN_NEED_*). Returns SQLITE_OK, or an
** error code with *pzErr set (sqlite3_malloc'd). A NULL tokens argument
** gives SQLITE_OK with mc->n == 0: the caller answers NULL. Then
** relattn_call_memory checks the forward pass plus extra bytes against
** relattn_max_memory(), relattn_call_run runs the forward pass of f
** (tokens and n filled in), relattn_call_clear releases it all. */
int relattn_call_init(relattn_conn *conn, const char *fn, sqlite3_value *model,
                      sqlite3_value *tokens, int need, relattn_call *mc,
                      char **pzErr);
/* The same with the argument named arg in messages ("text"). */
int relattn_call_init_named(relattn_conn *conn, const char *fn,
                            sqlite3_value *model, sqlite3_value *text,
                            const char *arg, int need, relattn_call *mc,
                            char **pzErr);
/* The same with a pair of texts (relattn_model_pair_input, truncate_a its
** 'only_first') when text_b is not NULL; either argument NULL in SQL gives
** mc->n == 0. */
int relattn_call_init_pair(relattn_conn *conn, const char *fn,
                           sqlite3_value *model, sqlite3_value *tokens,
                           sqlite3_value *text_b, int need, int truncate_a,
                           relattn_call *mc, char **pzErr);
int relattn_call_memory(relattn_call *mc, const char *fn,
                        sqlite3_uint64 extra, char **pzErr);
int relattn_call_run(relattn_call *mc, const char *fn, relattn_fwd *f,
                     char **pzErr);
void relattn_call_clear(relattn_call *mc);
/* The classifier's logits of tokens into *logits (sqlite3_malloc'd,
** n_labels), mc left holding the model; NULL tokens give SQLITE_OK with
** mc->n == 0 and no logits. text_b, when not NULL, makes tokens and it a
** pair (relattn_model_pair_input). On an error mc is cleared. */
int relattn_call_classify(relattn_conn *conn, const char *fn,
                          sqlite3_value *model, sqlite3_value *tokens,
                          sqlite3_value *text_b, relattn_call *mc,
                          float **logits, char **pzErr);
/* The same call on the heap, for ext/svg_fn.c: relattn_call_begin gives
** *out, or NULL for NULL tokens (the caller answers NULL); scores: the
** model must be a decoder with an LM head. relattn_call_end frees it. */
int relattn_call_begin(relattn_conn *conn, const char *fn,
                       sqlite3_value *model, sqlite3_value *tokens,
                       int scores, relattn_call **out, char **pzErr);
const relattn_model *relattn_call_model(const relattn_call *mc);
/* The model's input ([bos] + tokens), its length, and whether it has bos. */
const int32_t *relattn_call_input(const relattn_call *mc, int *n, int *bos);
void relattn_call_end(relattn_call *mc);

/* ext/model_fn.c: an encoder-decoder's teacher-forced call, (model,
** target, source): relattn_s2s_init loads the model (it must be an
** encoder-decoder) and decodes both token arguments as relattn_call_init
** does (each with the tokenizer's appended eos); NULL target or source
** gives SQLITE_OK with n 0. relattn_s2s_run checks the memory of the
** encoder pass and the decoder against relattn_max_memory(), runs
** relattn_s2s_forward for r (src and tgt filled in), interruptible.
** relattn_s2s_clear releases it. */
typedef struct relattn_s2s_call {
  relattn_call mc;        /* the model; input, n: the target */
  int32_t *src;           /* (n_src) the source */
  int n_src;
} relattn_s2s_call;
int relattn_s2s_init(relattn_conn *conn, const char *fn, sqlite3_value *model,
                     sqlite3_value *target, sqlite3_value *source,
                     relattn_s2s_call *sc, char **pzErr);
int relattn_s2s_run(relattn_s2s_call *sc, const char *fn, relattn_s2s_req *r,
                    char **pzErr);
void relattn_s2s_clear(relattn_s2s_call *sc);
/* The refusal of a 3-argument form (a source) for model m, which is not an
** encoder-decoder (sqlite3_malloc'd). */
char *relattn_s2s_refusal(const relattn_model *m, const char *fn,
                          const unsigned char *name);

/* ext/svg_fn.c: pictures as SVG text. */
void relattn_svg_attention_func(sqlite3_context *ctx, int argc,
                                sqlite3_value **argv);
void relattn_svg_surprise_func(sqlite3_context *ctx, int argc,
                               sqlite3_value **argv);
void relattn_svg_profile_step(sqlite3_context *ctx, int argc,
                              sqlite3_value **argv);
void relattn_svg_profile_final(sqlite3_context *ctx);

/* ext/generate_fn.c: text generation. */
void relattn_generate_func(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv);
extern sqlite3_module relattn_generate_tokens_module;

/* ext/scan.c: the batch virtual table. */
extern sqlite3_module relattn_scan_module;

#endif /* RELATTN_FUNCTIONS_H */
