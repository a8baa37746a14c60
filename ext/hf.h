/*
** hf.h: the inside of the Hugging Face import (ext/hf.c): a checkpoint's
** config as read, and the families. Each family (ext/hf_<family>.c) is
** one relattn_hf_family; ext/hf.c lists them in families[]. The tokenizer
** (ext/hf_tokenizer.c, ext/hf_tokjson*.c) is read apart.
*/
#ifndef RELATTN_HF_H
#define RELATTN_HF_H

#include "ext.h"
#include "functions.h"

/* One HF name and its native name: "{i}" stands for a layer number in
** both. A native name NULL: the tensor is left out (HF does not use it
** either). Heads' tensors are kept only with their head (below). */
typedef struct relattn_hf_rule {
  const char *hf, *native;
} relattn_hf_rule;

typedef struct relattn_hf_family relattn_hf_family;

typedef struct relattn_hf_model {
  const relattn_hf_family *fam;
  int family;              /* its index in families[] */
  int head;                /* RELATTN_HEAD_MLM, _CLASSIFIER or _NONE */
  char *model_type, *cls;  /* cls: architectures[0], or NULL */
  int vocab, d, layers, heads, ff;
  int d_head;              /* T5's d_kv when d_kv * heads is not d: the
                           ** native d_head; else 0 (d / heads) */
  double eps;
  const char *act;         /* native activation */
  const char *head_act;    /* mlm: hidden_act */
  const char *pooler_act;  /* NULL: no pooler */
  int tied;                /* tie_word_embeddings */
  int types;               /* token types */
  /* positions */
  const char *pos_type;
  int max_pos, buckets, max_rel, rel_ln, t5_buckets, t5_dist;
  int gated;
  int whole_t5;            /* T5Model: its decoder is left out too */
  int dec_layers;          /* an encoder-decoder's decoder layers, else 0 */
  int dec_start;           /* its decoder_start_token_id */
  /* classifier */
  char **labels;
  int n_labels;
  char *problem_type;
} relattn_hf_model;

/* A class of a family (architectures[0] past the prefix) and its head. */
typedef struct relattn_hf_class {
  const char *suffix;
  int head;                /* RELATTN_HEAD_* */
} relattn_hf_class;

/* A Hugging Face family: how a checkpoint of it is told, its tensors'
** names, its config keys and what they make of the native config, its
** tokenizer. The next family is one more of these (and its tests). */
struct relattn_hf_family {
  const char *name;          /* source.family and messages: "bert" */
  const char *model_types;   /* its config.json's model_type: "t5|mt5" */
  const char *types_msg;     /* how the refusal of another names them */
  const char *class_prefixes; /* architectures[0] starts with one: "T5|MT5" */
  const relattn_hf_class *classes; /* NULL-terminated */
  const char *classes_msg;   /* the known classes, for the refusal */
  int heads_from_tensors;    /* no architectures: the head its tensors show */
  const char *prefix;        /* the base model's tensor prefix, or NULL */
  const char *base_parts;    /* names under the prefix: "embeddings.|..." */
  const relattn_hf_rule *rules; /* HF name -> native, NULL-terminated */
  /* 1 to leave out a tensor no rule names (T5's decoder), or NULL */
  int (*left_out)(const relattn_hf_model *m, const char *name);
  /* 1 when rule hf is another variant than the checkpoint's (a gated FFN,
  ** Microsoft's head names), for relattn_hf_name_of; or NULL */
  int (*other_variant)(const relattn_hf_info *info, const char *hf);
  /* the family's config keys into m (after model_type and the class) */
  int (*read)(relattn_jdoc *j, relattn_hf_model *m,
              const relattn_st_tensor *t, int n, char **pzErr);
  /* the native config: norm, the keys after d_head (or NULL), whether
  ** the embeddings have a norm and token types, and "position" */
  const char *norm;
  void (*native_shape)(sqlite3_str *o, const relattn_hf_model *m);
  int emb_norm;
  void (*native_position)(sqlite3_str *o, const relattn_hf_model *m);
  /* the tokenizer: its file (messages), the kind a file of no known kind
  ** is read as, the default texts of cls, sep, mask, pad, unk and eos, and
  ** whether a sequence only ends with eos (no [CLS] ... [SEP]) */
  const char *tok_file;
  int tok_kind;
  const char *roles[6];
  int eos_only;
};

extern const relattn_hf_family relattn_hf_bert, relattn_hf_deberta,
    relattn_hf_t5;
/* BERT's classes, which DeBERTa-v2's are too (with their own prefix). */
extern const relattn_hf_class relattn_hf_bert_classes[];

/* HF's hidden_act names -> the native activation, or NULL. */
const char *relattn_hf_activation(const char *hf);
/* Has the checkpoint a tensor named stripped (its prefix stripped)? */
int relattn_hf_has_tensor(const relattn_st_tensor *t, int n,
                          const relattn_hf_model *m, const char *stripped);
/* BertConfig's keys, which DebertaV2Config shares (with its defaults of
** vocab_size, layer_norm_eps and type_vocab_size). */
int relattn_hf_read_bert_keys(relattn_jdoc *j, relattn_hf_model *m, int vocab,
                              double eps, int types, char **pzErr);

/* ext/hf_tokjson.c: a tokenizer.json read and mapped onto the WordPiece
** kind: its vocab.txt, options and special tokens' texts (all
** sqlite3_malloc'd). */
typedef struct relattn_hf_tokjson {
  uint8_t *vocab;          /* model.vocab as a vocab.txt */
  size_t vocab_n;
  int lower, strip, chinese; /* BertNormalizer's; strip -1: null */
  char *cls, *sep, *unk;   /* the post-processor's and the model's */
  int unigram;             /* 1: a Unigram model, vocab then holds the
                           ** SentencePiece ModelProto the sentencepiece
                           ** kind runs as the tokenizers library does;
                           ** cls NULL when the template is "$A </s>" */
} relattn_hf_tokjson;
int relattn_hf_tokjson_read(sqlite3 *db, const uint8_t *file, size_t n,
                            relattn_hf_tokjson *out, char **pzErr);
void relattn_hf_tokjson_free(relattn_hf_tokjson *t);

/* ---- ext/hf_tokenizer.c: the tokenizer ----------------------------------- */

/* What the checkpoint's tokenizer gives the native config. */
typedef struct relattn_hf_tok {
  int kind;                        /* RELATTN_TOK_* */
  int bos, eos, pad, append, sep, mask, unk;
  int lower, strip, chinese;       /* wordpiece options, -1: null */
  int clean;                       /* wordpiece: clean_up_tokenization_spaces */
  uint8_t *file;                   /* the file stored in place of the
                                   ** tokenizer_blob (a tokenizer.json's
                                   ** vocab.txt), or NULL */
  size_t file_n;
  int json_unigram;                /* file: a tokenizer.json's Unigram */
} relattn_hf_tok;

/* The tokenizer's kind, options and special ids (each role's text: the
** family's default or tokenizer_config.json's cls_token, sep_token, ...,
** looked up in the file tok). out->file, when set, is sqlite3_malloc'd and
** the caller's. */
int relattn_hf_read_tokenizer(sqlite3 *db, const relattn_hf_model *m,
                              const char *tok_config, const uint8_t *tok,
                              size_t tok_n, relattn_hf_tok *out,
                              char **pzErr);

#endif /* RELATTN_HF_H */
