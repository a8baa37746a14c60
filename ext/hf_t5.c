/*
** hf_t5.c: T5 and mT5 (model_type t5, mt5), as transformers'
** modeling_t5.py names its modules: T5EncoderModel and the encoder of
** T5Model (its decoder left out: it has no LM head) as encoders;
** T5ForConditionalGeneration whole, as an encoder-decoder (the native
** config's "decoder": its decoder stack, its own relative_attention_bias,
** lm_head or the tied shared embedding, decoder_start_token_id). One entry
** of the families of ext/hf.c.
**
**   SELECT relattn_import('t5', readfile('model.safetensors'),
**                         readfile('config.json'), readfile('spiece.model'));
*/
#include "hf.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

#define FN "relattn_import"

static int endsWith(const char *s, const char *tail) {
  size_t n = strlen(s), m = strlen(tail);
  return n >= m && strcmp(s + n - m, tail) == 0;
}

static const relattn_hf_rule t5_rules[] = {
    {"shared.weight", "tok_emb"},
    {"encoder.embed_tokens.weight", "tok_emb"}, /* a tied copy of shared */
    {"encoder.block.{i}.layer.0.SelfAttention.q.weight", "layers.{i}.attn.wq"},
    {"encoder.block.{i}.layer.0.SelfAttention.k.weight", "layers.{i}.attn.wk"},
    {"encoder.block.{i}.layer.0.SelfAttention.v.weight", "layers.{i}.attn.wv"},
    {"encoder.block.{i}.layer.0.SelfAttention.o.weight", "layers.{i}.attn.wo"},
    {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
     "rel_bias"},
    {"encoder.block.{i}.layer.0.layer_norm.weight", "layers.{i}.ln1.weight"},
    {"encoder.block.{i}.layer.1.DenseReluDense.wi.weight", "layers.{i}.ffn.w1"},
    {"encoder.block.{i}.layer.1.DenseReluDense.wi_0.weight",
     "layers.{i}.ffn.w1"},
    {"encoder.block.{i}.layer.1.DenseReluDense.wi_1.weight",
     "layers.{i}.ffn.w3"},
    {"encoder.block.{i}.layer.1.DenseReluDense.wo.weight", "layers.{i}.ffn.w2"},
    {"encoder.block.{i}.layer.1.layer_norm.weight", "layers.{i}.ln2.weight"},
    {"encoder.final_layer_norm.weight", "ln_f.weight"},
    /* T5ForConditionalGeneration's decoder (T5Block with
    ** T5LayerCrossAttention between self-attention and FFN) and head */
    {"decoder.embed_tokens.weight", "tok_emb"}, /* a tied copy of shared */
    {"decoder.block.{i}.layer.0.SelfAttention.q.weight",
     "dec.layers.{i}.attn.wq"},
    {"decoder.block.{i}.layer.0.SelfAttention.k.weight",
     "dec.layers.{i}.attn.wk"},
    {"decoder.block.{i}.layer.0.SelfAttention.v.weight",
     "dec.layers.{i}.attn.wv"},
    {"decoder.block.{i}.layer.0.SelfAttention.o.weight",
     "dec.layers.{i}.attn.wo"},
    {"decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
     "dec.rel_bias"},
    {"decoder.block.{i}.layer.0.layer_norm.weight",
     "dec.layers.{i}.ln1.weight"},
    {"decoder.block.{i}.layer.1.EncDecAttention.q.weight",
     "dec.layers.{i}.xattn.wq"},
    {"decoder.block.{i}.layer.1.EncDecAttention.k.weight",
     "dec.layers.{i}.xattn.wk"},
    {"decoder.block.{i}.layer.1.EncDecAttention.v.weight",
     "dec.layers.{i}.xattn.wv"},
    {"decoder.block.{i}.layer.1.EncDecAttention.o.weight",
     "dec.layers.{i}.xattn.wo"},
    {"decoder.block.{i}.layer.1.layer_norm.weight",
     "dec.layers.{i}.lnx.weight"},
    {"decoder.block.{i}.layer.2.DenseReluDense.wi.weight",
     "dec.layers.{i}.ffn.w1"},
    {"decoder.block.{i}.layer.2.DenseReluDense.wi_0.weight",
     "dec.layers.{i}.ffn.w1"},
    {"decoder.block.{i}.layer.2.DenseReluDense.wi_1.weight",
     "dec.layers.{i}.ffn.w3"},
    {"decoder.block.{i}.layer.2.DenseReluDense.wo.weight",
     "dec.layers.{i}.ffn.w2"},
    {"decoder.block.{i}.layer.2.layer_norm.weight",
     "dec.layers.{i}.ln2.weight"},
    {"decoder.final_layer_norm.weight", "dec.ln_f.weight"},
    {"lm_head.weight", "lm_head"},
    {NULL, NULL}};

/* T5Config's keys (the encoder's). */
static int readT5(relattn_jdoc *j, relattn_hf_model *m,
                  const relattn_st_tensor *t, int n, char **pzErr) {
  char *s = NULL;
  int v;
  /* T5Model: an encoder and a decoder, no lm_head; both left out */
  m->whole_t5 = m->cls && endsWith(m->cls, "T5Model");
  m->vocab = relattn_jdoc_int(j, "vocab_size", 32128);
  m->d = relattn_jdoc_int(j, "d_model", 512);
  m->layers = relattn_jdoc_int(j, "num_layers", 6);
  m->heads = relattn_jdoc_int(j, "num_heads", 8);
  m->ff = relattn_jdoc_int(j, "d_ff", 2048);
  relattn_jdoc_size(j, "vocab_size", m->vocab, 1 << 24);
  relattn_jdoc_size(j, "d_model", m->d, 1 << 24);
  relattn_jdoc_size(j, "num_layers", m->layers, 1 << 16);
  relattn_jdoc_size(j, "num_heads", m->heads, 1 << 24);
  relattn_jdoc_size(j, "d_ff", m->ff, 1 << 24);
  v = relattn_jdoc_int(j, "d_kv", 64);
  relattn_jdoc_size(j, "d_kv", v, 1 << 24);
  m->eps = relattn_jdoc_num(j, "layer_norm_epsilon", 1e-6);
  m->t5_buckets = relattn_jdoc_int(j, "relative_attention_num_buckets", 32);
  m->t5_dist = relattn_jdoc_int(j, "relative_attention_max_distance", 128);
  m->tied = 1;
  if (m->head == RELATTN_HEAD_LM) {
    /* T5ForConditionalGeneration: T5Config's decoder keys, its defaults */
    int pad = relattn_jdoc_int(j, "pad_token_id", 0);
    m->tied = relattn_jdoc_bool(j, "tie_word_embeddings", 1);
    m->dec_layers = relattn_jdoc_int(j, "num_decoder_layers", m->layers);
    relattn_jdoc_size(j, "num_decoder_layers", m->dec_layers, 1 << 16);
    m->dec_start = relattn_jdoc_int(j, "decoder_start_token_id", pad);
    if (j->rc) goto out;
    if (m->dec_start < 0 || m->dec_start >= m->vocab) {
      *pzErr = sqlite3_mprintf("%s: config_json: 'decoder_start_token_id' "
                               "(%d) must be a token id below vocab_size "
                               "(%d)", FN, m->dec_start, m->vocab);
      goto fail;
    }
  }
  s = relattn_jdoc_str(j, "feed_forward_proj", 0);
  if (j->rc) goto out;
  {
    /* T5Config: "gated-gelu" is gated with gelu_new; else "[gated-]act" */
    const char *proj = s ? s : "relu";
    const char *act = proj;
    m->gated = strncmp(proj, "gated-", 6) == 0;
    if (m->gated) act = proj + 6;
    m->act = strcmp(proj, "gated-gelu") == 0 ? "gelu_tanh"
                                              : relattn_hf_activation(act);
    if (!m->act || strcmp(m->act, "tanh") == 0 || strchr(act, '-')) {
      char e[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("%s: feed_forward_proj '%s' is not "
                               "supported (relu, gated-gelu, gated-relu, "
                               "gelu_new)", FN, relattn_echo(e, proj, -1));
      goto fail;
    }
  }
  if (j->rc) goto out;
  /* T5Attention's inner_dim = n_heads * d_kv, which need not be d_model
  ** (t5-v1_1-small, flan-t5-small, mt5-small: 6 * 64 for 512): the
  ** native d_head, written when it differs from d_model / num_heads */
  if ((sqlite3_int64)v * m->heads > 1 << 24) {
    *pzErr = sqlite3_mprintf("%s: config_json: 'd_kv' * 'num_heads' (%d * "
                             "%d) must be at most %d",
                             FN, v, m->heads, 1 << 24);
    goto fail;
  }
  if ((sqlite3_int64)v * m->heads != m->d) m->d_head = v;
  m->pos_type = "t5";
out:
  sqlite3_free(s);
  return j->rc;
fail:
  sqlite3_free(s);
  return SQLITE_ERROR;
}

static int t5LeftOut(const relattn_hf_model *m, const char *name) {
  /* T5Model: the decoder half (no head to read it); T5EncoderModel has
  ** none; T5ForConditionalGeneration is imported whole */
  return m->whole_t5 && (strncmp(name, "decoder.", 8) == 0 ||
                         strcmp(name, "lm_head.weight") == 0);
}

static int t5OtherVariant(const relattn_hf_info *info, const char *hf) {
  return strstr(hf, info->gated ? ".wi.weight" : ".wi_0.") != NULL ||
         strcmp(hf, "encoder.embed_tokens.weight") == 0 ||
         strcmp(hf, "decoder.embed_tokens.weight") == 0;
}

static void t5Shape(sqlite3_str *o, const relattn_hf_model *m) {
  sqlite3_str_appendf(o, "\"norm_kind\": \"rmsnorm\", \"biases\": false, ");
  if (m->gated) sqlite3_str_appendf(o, "\"ffn\": \"gated\", ");
}

static void t5Position(sqlite3_str *o, const relattn_hf_model *m) {
  sqlite3_str_appendf(o,
                      "\"position\": {\"type\": \"t5\", \"num_buckets\": "
                      "%d, \"max_distance\": %d}, ",
                      m->t5_buckets, m->t5_dist);
}

static const relattn_hf_class t5_classes[] = {
    {"EncoderModel", RELATTN_HEAD_NONE},
    {"ForConditionalGeneration", RELATTN_HEAD_LM},
    {"Model", RELATTN_HEAD_NONE},
    {NULL, 0}};

const relattn_hf_family relattn_hf_t5 = {
    "t5", "t5|mt5", "t5 and mt5", "T5|MT5", t5_classes,
    "T5EncoderModel, T5ForConditionalGeneration and T5Model (its encoder)",
    0,
    NULL, NULL, t5_rules, t5LeftOut, t5OtherVariant, readT5,
    "pre", t5Shape, 0, t5Position,
    "spiece.model", RELATTN_TOK_SENTENCEPIECE,
    {NULL, NULL, NULL, "<pad>", "<unk>", "</s>"}, 1};
