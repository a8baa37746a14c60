/*
** hf_bert.c: BERT with relative positions (model_type bert,
** position_embedding_type relative_key or relative_key_query), as
** transformers' modeling_bert.py names its modules: BertModel,
** BertForMaskedLM, BertForSequenceClassification. One entry of the
** families of ext/hf.c.
**
**   SELECT relattn_import('bert', readfile('model.safetensors'),
**                         readfile('config.json'), readfile('vocab.txt'));
*/
#include "hf.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

#define FN "relattn_import"

static const relattn_hf_rule bert_rules[] = {
    {"embeddings.word_embeddings.weight", "tok_emb"},
    /* absolute positions: created by BertEmbeddings but not added for
    ** relative_key* */
    {"embeddings.position_embeddings.weight", NULL},
    {"embeddings.position_ids", NULL},
    {"embeddings.token_type_embeddings.weight", "type_emb"},
    {"embeddings.LayerNorm.weight", "emb_norm.weight"},
    {"embeddings.LayerNorm.bias", "emb_norm.bias"},
    {"encoder.layer.{i}.attention.self.query.weight", "layers.{i}.attn.wq"},
    {"encoder.layer.{i}.attention.self.query.bias", "layers.{i}.attn.bq"},
    {"encoder.layer.{i}.attention.self.key.weight", "layers.{i}.attn.wk"},
    {"encoder.layer.{i}.attention.self.key.bias", "layers.{i}.attn.bk"},
    {"encoder.layer.{i}.attention.self.value.weight", "layers.{i}.attn.wv"},
    {"encoder.layer.{i}.attention.self.value.bias", "layers.{i}.attn.bv"},
    {"encoder.layer.{i}.attention.self.distance_embedding.weight",
     "layers.{i}.attn.rel_k"},
    {"encoder.layer.{i}.attention.output.dense.weight", "layers.{i}.attn.wo"},
    {"encoder.layer.{i}.attention.output.dense.bias", "layers.{i}.attn.bo"},
    {"encoder.layer.{i}.attention.output.LayerNorm.weight",
     "layers.{i}.ln1.weight"},
    {"encoder.layer.{i}.attention.output.LayerNorm.bias",
     "layers.{i}.ln1.bias"},
    {"encoder.layer.{i}.intermediate.dense.weight", "layers.{i}.ffn.w1"},
    {"encoder.layer.{i}.intermediate.dense.bias", "layers.{i}.ffn.b1"},
    {"encoder.layer.{i}.output.dense.weight", "layers.{i}.ffn.w2"},
    {"encoder.layer.{i}.output.dense.bias", "layers.{i}.ffn.b2"},
    {"encoder.layer.{i}.output.LayerNorm.weight", "layers.{i}.ln2.weight"},
    {"encoder.layer.{i}.output.LayerNorm.bias", "layers.{i}.ln2.bias"},
    {"pooler.dense.weight", "pooler.weight"},
    {"pooler.dense.bias", "pooler.bias"},
    /* BertOnlyMLMHead */
    {"cls.predictions.transform.dense.weight", "mlm.dense.weight"},
    {"cls.predictions.transform.dense.bias", "mlm.dense.bias"},
    {"cls.predictions.transform.LayerNorm.weight", "mlm.norm.weight"},
    {"cls.predictions.transform.LayerNorm.bias", "mlm.norm.bias"},
    {"cls.predictions.bias", "mlm.bias"},
    {"cls.predictions.decoder.weight", "lm_head"},
    {"cls.predictions.decoder.bias", "mlm.bias"},
    /* BertForPreTraining's next-sentence head: no use here */
    {"cls.seq_relationship.weight", NULL},
    {"cls.seq_relationship.bias", NULL},
    {"classifier.weight", "classifier.weight"},
    {"classifier.bias", "classifier.bias"},
    {NULL, NULL}};

int relattn_hf_read_bert_keys(relattn_jdoc *j, relattn_hf_model *m, int vocab,
                              double eps, int types, char **pzErr) {
  char *s = NULL;
  m->vocab = relattn_jdoc_int(j, "vocab_size", vocab);
  m->d = relattn_jdoc_int(j, "hidden_size", 768);
  m->layers = relattn_jdoc_int(j, "num_hidden_layers", 12);
  m->heads = relattn_jdoc_int(j, "num_attention_heads", 12);
  m->ff = relattn_jdoc_int(j, "intermediate_size", 3072);
  relattn_jdoc_size(j, "vocab_size", m->vocab, 1 << 24);
  relattn_jdoc_size(j, "hidden_size", m->d, 1 << 24);
  relattn_jdoc_size(j, "num_hidden_layers", m->layers, 1 << 16);
  relattn_jdoc_size(j, "num_attention_heads", m->heads, 1 << 24);
  relattn_jdoc_size(j, "intermediate_size", m->ff, 1 << 24);
  m->eps = relattn_jdoc_num(j, "layer_norm_eps", eps);
  m->types = relattn_jdoc_int(j, "type_vocab_size", types);
  m->tied = relattn_jdoc_bool(j, "tie_word_embeddings", 1);
  s = relattn_jdoc_str(j, "hidden_act", 0);
  if (j->rc) goto out;
  m->act = relattn_hf_activation(s);
  if (!m->act || strcmp(m->act, "tanh") == 0) {
    char e[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf("%s: hidden_act '%s' is not supported (gelu, "
                             "gelu_new, gelu_pytorch_tanh, relu)",
                             FN, relattn_echo(e, s, -1));
    goto fail;
  }
  m->head_act = m->act;
  if (relattn_jdoc_bool(j, "is_decoder", 0) == 1) {
    *pzErr = sqlite3_mprintf("%s: is_decoder true (a causal BERT) is not "
                             "supported", FN);
    goto fail;
  }
out:
  sqlite3_free(s);
  return j->rc;
fail:
  sqlite3_free(s);
  return SQLITE_ERROR;
}

static int isPreTraining(const relattn_hf_model *m) {
  static const char suffix[] = "ForPreTraining";
  size_t n = m->cls ? strlen(m->cls) : 0;
  return n >= sizeof suffix - 1 &&
         strcmp(m->cls + n - (sizeof suffix - 1), suffix) == 0;
}

/* BertConfig's keys: relative positions only. */
static int readBert(relattn_jdoc *j, relattn_hf_model *m,
                    const relattn_st_tensor *t, int n, char **pzErr) {
  char *s = NULL;
  int rc = relattn_hf_read_bert_keys(j, m, 30522, 1e-12, 2, pzErr);
  if (rc != SQLITE_OK) return rc;
  s = relattn_jdoc_str(j, "position_embedding_type", 0);
  if (j->rc) goto out;
  if (!s || strcmp(s, "absolute") == 0) {
    *pzErr = sqlite3_mprintf("%s: BERT with absolute positions is not a "
                             "relative-position model", FN);
    goto fail;
  }
  if (strcmp(s, "relative_key") != 0 &&
      strcmp(s, "relative_key_query") != 0) {
    char e[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf("%s: position_embedding_type '%s' is not "
                             "supported (relative_key, relative_key_query)",
                             FN, relattn_echo(e, s, -1));
    goto fail;
  }
  m->pos_type = strcmp(s, "relative_key") == 0 ? "rel_key" : "rel_key_query";
  m->max_pos = relattn_jdoc_int(j, "max_position_embeddings", 512);
  /* BertModel's pooler when it has one (BertForPreTraining's too, beside
  ** its masked-LM head; BertForMaskedLM is built without); the
  ** classifier's always */
  if (m->head == RELATTN_HEAD_CLASSIFIER ||
      ((m->head == RELATTN_HEAD_NONE || isPreTraining(m)) &&
       relattn_hf_has_tensor(t, n, m, "pooler.dense.weight")))
    m->pooler_act = "tanh";
out:
  sqlite3_free(s);
  return j->rc;
fail:
  sqlite3_free(s);
  return SQLITE_ERROR;
}

static void bertPosition(sqlite3_str *o, const relattn_hf_model *m) {
  sqlite3_str_appendf(o,
                      "\"position\": {\"type\": \"%s\", "
                      "\"max_position_embeddings\": %d}, ",
                      m->pos_type, m->max_pos);
}

const relattn_hf_class relattn_hf_bert_classes[] = {
    {"Model", RELATTN_HEAD_NONE},
    {"ForMaskedLM", RELATTN_HEAD_MLM},
    {"ForPreTraining", RELATTN_HEAD_MLM},
    {"ForSequenceClassification", RELATTN_HEAD_CLASSIFIER},
    {"ForTokenClassification", RELATTN_HEAD_TOKEN},
    {NULL, 0}};

const relattn_hf_family relattn_hf_bert = {
    "bert", "bert", "bert (relative_key, relative_key_query)", "Bert",
    relattn_hf_bert_classes,
    "BertModel, BertForMaskedLM, BertForSequenceClassification and "
    "BertForTokenClassification",
    1, "bert.", "embeddings.|encoder.|pooler.", bert_rules, NULL, NULL,
    readBert, "post", NULL, 1, bertPosition,
    "vocab.txt", RELATTN_TOK_WORDPIECE,
    {"[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", NULL}, 0};
