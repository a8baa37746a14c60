/*
** hf_deberta.c: DeBERTa-v2 and -v3 (model_type deberta-v2), as
** transformers' modeling_deberta_v2.py names its modules, and Microsoft's
** own masked-LM head names: DebertaV2Model, DebertaV2ForMaskedLM,
** DebertaV2ForSequenceClassification. One entry of the families of
** ext/hf.c.
**
**   SELECT relattn_import('nli', readfile('model.safetensors'),
**                         readfile('config.json'), readfile('spm.model'),
**                         readfile('tokenizer_config.json'));
*/
#include "hf.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

#define FN "relattn_import"

static const relattn_hf_rule deberta_rules[] = {
    {"embeddings.word_embeddings.weight", "tok_emb"},
    /* ignored by HF when position_biased_input is false */
    {"embeddings.position_embeddings.weight", NULL},
    {"embeddings.position_ids", NULL},
    {"embeddings.token_type_embeddings.weight", "type_emb"},
    {"embeddings.LayerNorm.weight", "emb_norm.weight"},
    {"embeddings.LayerNorm.bias", "emb_norm.bias"},
    {"encoder.layer.{i}.attention.self.query_proj.weight",
     "layers.{i}.attn.wq"},
    {"encoder.layer.{i}.attention.self.query_proj.bias", "layers.{i}.attn.bq"},
    {"encoder.layer.{i}.attention.self.key_proj.weight", "layers.{i}.attn.wk"},
    {"encoder.layer.{i}.attention.self.key_proj.bias", "layers.{i}.attn.bk"},
    {"encoder.layer.{i}.attention.self.value_proj.weight",
     "layers.{i}.attn.wv"},
    {"encoder.layer.{i}.attention.self.value_proj.bias", "layers.{i}.attn.bv"},
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
    {"encoder.rel_embeddings.weight", "rel_emb"},
    {"encoder.LayerNorm.weight", "rel_emb_norm.weight"},
    {"encoder.LayerNorm.bias", "rel_emb_norm.bias"},
    /* ContextPooler */
    {"pooler.dense.weight", "pooler.weight"},
    {"pooler.dense.bias", "pooler.bias"},
    {"classifier.weight", "classifier.weight"},
    {"classifier.bias", "classifier.bias"},
    /* the masked-LM head: HF's (legacy) names, and Microsoft's */
    {"cls.predictions.transform.dense.weight", "mlm.dense.weight"},
    {"cls.predictions.transform.dense.bias", "mlm.dense.bias"},
    {"cls.predictions.transform.LayerNorm.weight", "mlm.norm.weight"},
    {"cls.predictions.transform.LayerNorm.bias", "mlm.norm.bias"},
    {"cls.predictions.bias", "mlm.bias"},
    {"cls.predictions.decoder.weight", "lm_head"},
    {"cls.predictions.decoder.bias", "mlm.bias"},
    {"lm_predictions.lm_head.dense.weight", "mlm.dense.weight"},
    {"lm_predictions.lm_head.dense.bias", "mlm.dense.bias"},
    {"lm_predictions.lm_head.LayerNorm.weight", "mlm.norm.weight"},
    {"lm_predictions.lm_head.LayerNorm.bias", "mlm.norm.bias"},
    {"lm_predictions.lm_head.bias", "mlm.bias"},
    /* the replaced-token detector of Microsoft's pre-training files
    ** (deberta-v3-base): no Hugging Face class loads it */
    {"mask_predictions.dense.weight", NULL},
    {"mask_predictions.dense.bias", NULL},
    {"mask_predictions.LayerNorm.weight", NULL},
    {"mask_predictions.LayerNorm.bias", NULL},
    {"mask_predictions.classifier.weight", NULL},
    {"mask_predictions.classifier.bias", NULL},
    {NULL, NULL}};

/* DebertaV2Config's keys, after BERT's (its defaults differ). */
static int readDeberta(relattn_jdoc *j, relattn_hf_model *m,
                       const relattn_st_tensor *t, int n, char **pzErr) {
  char *s = NULL;
  int v, rc = relattn_hf_read_bert_keys(j, m, 128100, 1e-7, 0, pzErr);
  if (rc != SQLITE_OK) return rc;
  int conv = relattn_jdoc_int(j, "conv_kernel_size", 0), emb;
  const char *type;
  if (j->rc) goto out;
  if (conv > 0) {
    *pzErr = sqlite3_mprintf("%s: DeBERTa's ConvLayer (conv_kernel_size "
                             "%d) is not supported", FN, conv);
    goto fail;
  }
  emb = relattn_jdoc_int(j, "embedding_size", m->d);
  if (j->rc) goto out;
  if (emb != m->d) {
    *pzErr = sqlite3_mprintf("%s: DeBERTa with embedding_size (%d) other "
                             "than hidden_size (%d) is not supported (its "
                             "embed_proj)", FN, emb, m->d);
    goto fail;
  }
  if (relattn_jdoc_bool(j, "relative_attention", 0) != 1) {
    if (j->rc) goto out;
    *pzErr = sqlite3_mprintf("%s: DeBERTa without relative_attention is "
                             "not a relative-position model", FN);
    goto fail;
  }
  if (relattn_jdoc_bool(j, "position_biased_input", 1) != 0) {
    if (j->rc) goto out;
    *pzErr = sqlite3_mprintf("%s: DeBERTa with position_biased_input (its "
                             "absolute positions) is not supported", FN);
    goto fail;
  }
  if (relattn_jdoc_bool(j, "share_att_key", 0) != 1) {
    if (j->rc) goto out;
    *pzErr = sqlite3_mprintf("%s: DeBERTa with share_att_key false (its "
                             "pos_key_proj and pos_query_proj) is not "
                             "supported", FN);
    goto fail;
  }
  v = relattn_jdoc_int(j, "attention_head_size",
                       m->heads > 0 ? m->d / m->heads : 0);
  if (j->rc) goto out;
  if (m->heads > 0 && (sqlite3_int64)v * m->heads != m->d) {
    *pzErr = sqlite3_mprintf("%s: DeBERTa with attention_head_size (%d) "
                             "other than hidden_size / num_attention_heads "
                             "is not supported", FN, v);
    goto fail;
  }
  /* pos_att_type: a list, or "p2c|c2p" as older configs write it; both
  ** c2p and p2c, nothing else */
  type = relattn_jdoc_step(j, "pos_att_type");
  if (!type) goto out;
  {
    char *list = NULL;
    int c2p = 0, p2c = 0, other = 0;
    if (relattn_jdoc_nul(j, "'pos_att_type'")) goto out;
    if (strcmp(type, "text") == 0) {
      list = sqlite3_mprintf("%s", sqlite3_column_text(j->st, 1));
    } else if (strcmp(type, "array") == 0) {
      /* the array's strings joined by | (anything else: '?') */
      sqlite3_stmt *q = NULL;
      const char *json = (const char *)sqlite3_column_text(j->st, 1);
      if (sqlite3_prepare_v2(j->db,
                             "SELECT coalesce(group_concat(CASE WHEN type "
                             "= 'text' THEN value ELSE '?' END, '|'), '') "
                             "FROM json_each(?1)",
                             -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, json, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(q) == SQLITE_ROW)
          list = sqlite3_mprintf("%s", sqlite3_column_text(q, 0));
      }
      sqlite3_finalize(q);
    } else if (strcmp(type, "null") == 0) {
      list = sqlite3_mprintf("");
    } else {
      relattn_jdoc_bad(j, "pos_att_type", "a list or a string", type);
      goto out;
    }
    if (!list) {
      j->rc = SQLITE_NOMEM;
      goto out;
    }
    {
      char *p = list, *bar;
      for (;;) {
        size_t len;
        char *a = p, *b;
        bar = strchr(p, '|');
        len = bar ? (size_t)(bar - p) : strlen(p);
        while (len && (*a == ' ')) a++, len--;
        b = a + len;
        while (len && b[-1] == ' ') b--, len--;
        if (len == 3 && sqlite3_strnicmp(a, "c2p", 3) == 0) c2p++;
        else if (len == 3 && sqlite3_strnicmp(a, "p2c", 3) == 0) p2c++;
        else if (len) other++;
        if (!bar) break;
        p = bar + 1;
      }
    }
    if (c2p != 1 || p2c != 1 || other) {
      char e[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("%s: DeBERTa with pos_att_type '%s' is not "
                               "supported (only c2p and p2c together)",
                               FN, relattn_echo(e, list, -1));
      sqlite3_free(list);
      goto fail;
    }
    sqlite3_free(list);
  }
  m->pos_type = "deberta";
  m->max_pos = relattn_jdoc_int(j, "max_position_embeddings", 512);
  m->max_rel = relattn_jdoc_int(j, "max_relative_positions", -1);
  if (m->max_rel < 1) m->max_rel = m->max_pos;
  m->buckets = relattn_jdoc_int(j, "position_buckets", -1);
  if (m->buckets < 0) m->buckets = 0;
  s = relattn_jdoc_str(j, "norm_rel_ebd", 0);
  if (j->rc) goto out;
  if (!s || strcmp(s, "none") == 0)
    m->rel_ln = 0;
  else if (strcmp(s, "layer_norm") == 0)
    m->rel_ln = 1;
  else {
    char e[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf("%s: DeBERTa with norm_rel_ebd '%s' is not "
                             "supported (none, layer_norm)",
                             FN, relattn_echo(e, s, -1));
    goto fail;
  }
  if (m->head == RELATTN_HEAD_CLASSIFIER) {
    char *pa = relattn_jdoc_str(j, "pooler_hidden_act", 0);
    int ph = relattn_jdoc_int(j, "pooler_hidden_size", m->d);
    if (j->rc) {
      sqlite3_free(pa);
      goto out;
    }
    m->pooler_act = relattn_hf_activation(pa);
    if (!m->pooler_act || ph != m->d) {
      char e[RELATTN_ECHO_BUF];
      if (!m->pooler_act)
        *pzErr = sqlite3_mprintf("%s: pooler_hidden_act '%s' is not "
                                 "supported (gelu, gelu_new, "
                                 "gelu_pytorch_tanh, relu, tanh)",
                                 FN, relattn_echo(e, pa, -1));
      else
        *pzErr = sqlite3_mprintf("%s: DeBERTa with pooler_hidden_size (%d) "
                                 "other than hidden_size (%d) is not "
                                 "supported", FN, ph, m->d);
      sqlite3_free(pa);
      goto fail;
    }
    sqlite3_free(pa);
  }
out:
  sqlite3_free(s);
  return j->rc;
fail:
  sqlite3_free(s);
  return SQLITE_ERROR;
}

static int debertaOtherVariant(const relattn_hf_info *info, const char *hf) {
  return info->lm_predictions ? strncmp(hf, "cls.", 4) == 0
                              : strncmp(hf, "lm_predictions.", 15) == 0;
}

static void debertaPosition(sqlite3_str *o, const relattn_hf_model *m) {
  sqlite3_str_appendf(o,
                      "\"position\": {\"type\": \"deberta\", "
                      "\"position_buckets\": %d, "
                      "\"max_relative_positions\": %d, \"norm_rel_ebd\": "
                      "\"%s\"}, ",
                      m->buckets, m->max_rel,
                      m->rel_ln ? "layer_norm" : "none");
}

const relattn_hf_family relattn_hf_deberta = {
    "deberta-v2", "deberta-v2", "deberta-v2", "DebertaV2",
    relattn_hf_bert_classes,
    "DebertaV2Model, DebertaV2ForMaskedLM, "
    "DebertaV2ForSequenceClassification and DebertaV2ForTokenClassification",
    1, "deberta.", "embeddings.|encoder.", deberta_rules, NULL,
    debertaOtherVariant, readDeberta, "post", NULL, 1, debertaPosition,
    "spm.model", RELATTN_TOK_SENTENCEPIECE,
    {"[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", NULL}, 0};
