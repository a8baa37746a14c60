/*
** model.c: which tensors a config needs (docs/reference.md, Tensor names and shapes) and the float32
** model built from them.
**
** The tensors have a fixed order: tok_emb; per layer ln1.weight, ln1.bias,
** attn.wq .wk .wv .wo, attn.bq .bk .bv .bo, [attn.rel_k, attn.rel_v: shaw],
** [attn.wr, attn.u, attn.w: xl], ln2.weight, ln2.bias, ffn.w1 .b1,
** [ffn.w3 .b3: gated], ffn.w2 .b2; ln_f.weight, ln_f.bias (pre-norm only);
** lm_head (untied only); rel_bias (t5 only); pos_emb (absolute only);
** rel_emb, [rel_emb_norm.weight, .bias] (deberta only); type_emb
** (token_types); emb_norm.weight, .bias (embedding.norm); the head's:
** mlm.dense.weight, .bias, mlm.norm.weight, .bias, mlm.bias (mlm),
** pooler.weight, .bias (a pooler), classifier.weight, .bias (classifier).
** With quantization int8 each linear weight of a layer (attn.wq .wk .wv
** .wo, ffn.w1 .w3 .w2) is I8 and followed by its per-row scales
** (attn.wq.scale, ...: F32, one per output row); its slot then holds a
** packed relattn_q8w (src/qgemm.c) instead of floats. With bf16 the same
** weights are BF16, no scales, the slot a packed relattn_bf16w. With
** quantization.embeddings int8 tok_emb, an untied lm_head, pos_emb and
** rel_emb are I8 and followed by their per-row scales (tok_emb.scale, ...);
** tok_emb's and lm_head's slots then hold a packed relattn_q8w, pos_emb's
** the floats q s (read in place by relattn_model_prepare), rel_emb's its
** I8 rows as stored (build_terms reads them into floats in its scratch);
** with bf16 the four are BF16, read into floats. A bias is left
** out where the config has none: the linear ones with biases false, the
** norms' with rmsnorm. The tables below hold them. Import stores them in
** this order and export writes them in it. Every array lives in one 64-byte
** aligned block (m->mem): the layer table first, then each tensor at a
** 64-byte boundary.
*/
#include "relattn.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tensors, as data: a name, a shape rule, the field that points at
** the array, and when a config has it. A new tensor is one row here.
** Shape rules: */
enum { S_D, S_DD, S_F, S_FD, S_DF, S_VD, S_REL, S_BIAS, S_POS, S_HD, S_RELEMB,
       S_TYPES, S_V, S_LD, S_L, S_ID, S_DI, S_I, S_POSROWS, S_RELROWS, S_STW0,
       S_STB0 = S_STW0 + 4 };
/* (S_ID, S_DI, S_I: the attention's inner width i = n_heads * d_head by
** d_model, d_model by i, and i alone) */
/* Presence rules: */
enum { W_ALL, W_REL_K, W_SHAW_VALUES, W_PRE, W_UNTIED, W_T5, W_ABSOLUTE, W_XL,
       W_DEBERTA, W_REL_LN, W_GATED, W_TYPES, W_EMB_NORM, W_MLM, W_POOLER,
       W_CLASSIFIER, W_Q8, W_Q8_GATED, W_DEC, W_DEC_T5, W_Q8E, W_Q8E_UNTIED,
       W_Q8E_ABSOLUTE, W_Q8E_DEBERTA, W_STW0, W_STB0 = W_STW0 + 4 };
/* (S_STW0 + k, S_STB0 + k, W_STW0 + k, W_STB0 + k: sentence Dense module
** k's weight and bias, k < RELATTN_ST_MAX_DENSE) */
/* Which kind of bias a row is, besides its presence rule: a linear layer's
** (absent with biases false) or a norm's (absent with rmsnorm). */
enum { B_NONE, B_LINEAR, B_NORM };

typedef struct tensor_row {
  const char *name;
  int shape, when;
  size_t field;          /* offsetof in relattn_layer or relattn_model */
  int bias;              /* B_*: B_NONE when left out */
} tensor_row;

#define L(f) offsetof(relattn_layer, f)
#define M(f) offsetof(relattn_model, f)
static const tensor_row layer_rows[] = {
    {"ln1.weight", S_D, W_ALL, L(ln1_w), B_NONE},
    {"ln1.bias", S_D, W_ALL, L(ln1_b), B_NORM},
    {"attn.wq", S_ID, W_ALL, L(wq), B_NONE},
    {"attn.wq.scale", S_I, W_Q8, L(sq), B_NONE},
    {"attn.wk", S_ID, W_ALL, L(wk), B_NONE},
    {"attn.wk.scale", S_I, W_Q8, L(sk), B_NONE},
    {"attn.wv", S_ID, W_ALL, L(wv), B_NONE},
    {"attn.wv.scale", S_I, W_Q8, L(sv), B_NONE},
    {"attn.wo", S_DI, W_ALL, L(wo), B_NONE},
    {"attn.wo.scale", S_D, W_Q8, L(so), B_NONE},
    {"attn.bq", S_I, W_ALL, L(bq), B_LINEAR},
    {"attn.bk", S_I, W_ALL, L(bk), B_LINEAR},
    {"attn.bv", S_I, W_ALL, L(bv), B_LINEAR},
    {"attn.bo", S_D, W_ALL, L(bo), B_LINEAR},
    {"attn.rel_k", S_REL, W_REL_K, L(rel_k), B_NONE},
    {"attn.rel_v", S_REL, W_SHAW_VALUES, L(rel_v), B_NONE},
    {"attn.wr", S_ID, W_XL, L(wr), B_NONE},
    {"attn.u", S_HD, W_XL, L(u), B_NONE},
    {"attn.w", S_HD, W_XL, L(w), B_NONE},
    {"ln2.weight", S_D, W_ALL, L(ln2_w), B_NONE},
    {"ln2.bias", S_D, W_ALL, L(ln2_b), B_NORM},
    {"ffn.w1", S_FD, W_ALL, L(w1), B_NONE},
    {"ffn.w1.scale", S_F, W_Q8, L(s1), B_NONE},
    {"ffn.b1", S_F, W_ALL, L(b1), B_LINEAR},
    {"ffn.w3", S_FD, W_GATED, L(w3), B_NONE},
    {"ffn.w3.scale", S_F, W_Q8_GATED, L(s3), B_NONE},
    {"ffn.b3", S_F, W_GATED, L(b3), B_LINEAR},
    {"ffn.w2", S_DF, W_ALL, L(w2), B_NONE},
    {"ffn.w2.scale", S_D, W_Q8, L(s2), B_NONE},
    {"ffn.b2", S_D, W_ALL, L(b2), B_LINEAR}};
/* An encoder-decoder's decoder layers (after the tail below): the rows
** above with a cross-attention between the self-attention and the FFN. */
static const tensor_row dec_layer_rows[] = {
    {"ln1.weight", S_D, W_ALL, L(ln1_w), B_NONE},
    {"ln1.bias", S_D, W_ALL, L(ln1_b), B_NORM},
    {"attn.wq", S_ID, W_ALL, L(wq), B_NONE},
    {"attn.wq.scale", S_I, W_Q8, L(sq), B_NONE},
    {"attn.wk", S_ID, W_ALL, L(wk), B_NONE},
    {"attn.wk.scale", S_I, W_Q8, L(sk), B_NONE},
    {"attn.wv", S_ID, W_ALL, L(wv), B_NONE},
    {"attn.wv.scale", S_I, W_Q8, L(sv), B_NONE},
    {"attn.wo", S_DI, W_ALL, L(wo), B_NONE},
    {"attn.wo.scale", S_D, W_Q8, L(so), B_NONE},
    {"attn.bq", S_I, W_ALL, L(bq), B_LINEAR},
    {"attn.bk", S_I, W_ALL, L(bk), B_LINEAR},
    {"attn.bv", S_I, W_ALL, L(bv), B_LINEAR},
    {"attn.bo", S_D, W_ALL, L(bo), B_LINEAR},
    {"lnx.weight", S_D, W_ALL, L(lnx_w), B_NONE},
    {"lnx.bias", S_D, W_ALL, L(lnx_b), B_NORM},
    {"xattn.wq", S_ID, W_ALL, L(xq), B_NONE},
    {"xattn.wq.scale", S_I, W_Q8, L(sxq), B_NONE},
    {"xattn.wk", S_ID, W_ALL, L(xk), B_NONE},
    {"xattn.wk.scale", S_I, W_Q8, L(sxk), B_NONE},
    {"xattn.wv", S_ID, W_ALL, L(xv), B_NONE},
    {"xattn.wv.scale", S_I, W_Q8, L(sxv), B_NONE},
    {"xattn.wo", S_DI, W_ALL, L(xo), B_NONE},
    {"xattn.wo.scale", S_D, W_Q8, L(sxo), B_NONE},
    {"xattn.bq", S_I, W_ALL, L(bxq), B_LINEAR},
    {"xattn.bk", S_I, W_ALL, L(bxk), B_LINEAR},
    {"xattn.bv", S_I, W_ALL, L(bxv), B_LINEAR},
    {"xattn.bo", S_D, W_ALL, L(bxo), B_LINEAR},
    {"ln2.weight", S_D, W_ALL, L(ln2_w), B_NONE},
    {"ln2.bias", S_D, W_ALL, L(ln2_b), B_NORM},
    {"ffn.w1", S_FD, W_ALL, L(w1), B_NONE},
    {"ffn.w1.scale", S_F, W_Q8, L(s1), B_NONE},
    {"ffn.b1", S_F, W_ALL, L(b1), B_LINEAR},
    {"ffn.w3", S_FD, W_GATED, L(w3), B_NONE},
    {"ffn.w3.scale", S_F, W_Q8_GATED, L(s3), B_NONE},
    {"ffn.b3", S_F, W_GATED, L(b3), B_LINEAR},
    {"ffn.w2", S_DF, W_ALL, L(w2), B_NONE},
    {"ffn.w2.scale", S_D, W_Q8, L(s2), B_NONE},
    {"ffn.b2", S_D, W_ALL, L(b2), B_LINEAR}};
/* first, before the layers: the token embedding (and its scales) */
static const tensor_row head_rows[] = {
    {"tok_emb", S_VD, W_ALL, M(tok_emb), B_NONE},
    {"tok_emb.scale", S_V, W_Q8E, M(tok_scale), B_NONE}};
/* after the layers */
static const tensor_row tail_rows[] = {
    {"ln_f.weight", S_D, W_PRE, M(lnf_w), B_NONE},
    {"ln_f.bias", S_D, W_PRE, M(lnf_b), B_NORM},
    {"lm_head", S_VD, W_UNTIED, M(lm_head), B_NONE},
    {"lm_head.scale", S_V, W_Q8E_UNTIED, M(lm_scale), B_NONE},
    {"rel_bias", S_BIAS, W_T5, M(rel_bias), B_NONE},
    {"pos_emb", S_POS, W_ABSOLUTE, M(pos_emb), B_NONE},
    {"pos_emb.scale", S_POSROWS, W_Q8E_ABSOLUTE, M(pos_scale), B_NONE},
    {"rel_emb", S_RELEMB, W_DEBERTA, M(rel_emb), B_NONE},
    {"rel_emb.scale", S_RELROWS, W_Q8E_DEBERTA, M(rel_scale), B_NONE},
    {"rel_emb_norm.weight", S_D, W_REL_LN, M(rel_ln_w), B_NONE},
    {"rel_emb_norm.bias", S_D, W_REL_LN, M(rel_ln_b), B_NORM},
    {"type_emb", S_TYPES, W_TYPES, M(type_emb), B_NONE},
    {"emb_norm.weight", S_D, W_EMB_NORM, M(emb_ln_w), B_NONE},
    {"emb_norm.bias", S_D, W_EMB_NORM, M(emb_ln_b), B_NORM},
    /* the heads (BERT's BertLMPredictionHead, BertPooler, classifier): their
    ** linear biases stay with biases false */
    {"mlm.dense.weight", S_DD, W_MLM, M(mlm_w), B_NONE},
    {"mlm.dense.bias", S_D, W_MLM, M(mlm_b), B_NONE},
    {"mlm.norm.weight", S_D, W_MLM, M(mlm_ln_w), B_NONE},
    {"mlm.norm.bias", S_D, W_MLM, M(mlm_ln_b), B_NORM},
    {"mlm.bias", S_V, W_MLM, M(mlm_bias), B_NONE},
    {"pooler.weight", S_DD, W_POOLER, M(pool_w), B_NONE},
    {"pooler.bias", S_D, W_POOLER, M(pool_b), B_NONE},
    {"classifier.weight", S_LD, W_CLASSIFIER, M(cls_w), B_NONE},
    {"classifier.bias", S_L, W_CLASSIFIER, M(cls_b), B_NONE},
    /* sentence-transformers' Dense modules (config sentence.dense) */
#define DENSE_ROWS(k)                                                        \
  {"sentence.dense." #k ".weight", S_STW0 + k, W_STW0 + k, M(st_w[k]),        \
   B_NONE},                                                                  \
  {"sentence.dense." #k ".bias", S_STB0 + k, W_STB0 + k, M(st_b[k]), B_NONE}
    DENSE_ROWS(0), DENSE_ROWS(1), DENSE_ROWS(2), DENSE_ROWS(3)};
#undef DENSE_ROWS
/* an encoder-decoder's, after its decoder layers */
static const tensor_row dec_tail_rows[] = {
    {"dec.ln_f.weight", S_D, W_DEC, M(dec_lnf_w), B_NONE},
    {"dec.ln_f.bias", S_D, W_DEC, M(dec_lnf_b), B_NORM},
    {"dec.rel_bias", S_BIAS, W_DEC_T5, M(dec_rel_bias), B_NONE}};
#undef L
#undef M
#define N_HEAD_ROWS (int)(sizeof head_rows / sizeof head_rows[0])
#define N_LAYER_ROWS (int)(sizeof layer_rows / sizeof layer_rows[0])
#define N_TAIL_ROWS (int)(sizeof tail_rows / sizeof tail_rows[0])
#define N_DEC_ROWS (int)(sizeof dec_layer_rows / sizeof dec_layer_rows[0])
#define N_DEC_TAIL (int)(sizeof dec_tail_rows / sizeof dec_tail_rows[0])

static int has_when(const relattn_config *c, int when) {
  switch (when) {
    case W_REL_K:
      return c->pos.type == RELATTN_POS_SHAW ||
             c->pos.type == RELATTN_POS_REL_KEY ||
             c->pos.type == RELATTN_POS_REL_KEY_QUERY;
    case W_SHAW_VALUES:
      return c->pos.type == RELATTN_POS_SHAW && c->rel_values;
    case W_PRE: return c->norm == RELATTN_NORM_PRE;
    case W_UNTIED: /* the LM and masked-LM heads' output embedding */
      return !c->tie_embeddings &&
             (c->head == RELATTN_HEAD_LM || c->head == RELATTN_HEAD_MLM);
    case W_T5: return c->pos.type == RELATTN_POS_T5;
    case W_ABSOLUTE: return c->pos.type == RELATTN_POS_ABSOLUTE;
    case W_XL: return c->pos.type == RELATTN_POS_XL;
    case W_DEBERTA: return c->pos.type == RELATTN_POS_DEBERTA;
    case W_REL_LN:
      return c->pos.type == RELATTN_POS_DEBERTA && c->rel_norm;
    case W_GATED: return c->ffn_gated;
    case W_TYPES: return c->token_types > 0;
    case W_EMB_NORM: return c->emb_norm;
    case W_MLM: return c->head == RELATTN_HEAD_MLM;
    case W_POOLER: return c->pooler;
    case W_CLASSIFIER: return RELATTN_HEAD_HAS_LABELS(c->head);
    case W_Q8: return c->quant == RELATTN_QUANT_INT8;
    case W_Q8_GATED: return c->quant == RELATTN_QUANT_INT8 && c->ffn_gated;
    case W_Q8E: return c->quant_emb == RELATTN_QUANT_INT8;
    case W_Q8E_UNTIED:
      return c->quant_emb == RELATTN_QUANT_INT8 && has_when(c, W_UNTIED);
    case W_Q8E_ABSOLUTE:
      return c->quant_emb == RELATTN_QUANT_INT8 &&
             c->pos.type == RELATTN_POS_ABSOLUTE;
    case W_Q8E_DEBERTA:
      return c->quant_emb == RELATTN_QUANT_INT8 &&
             c->pos.type == RELATTN_POS_DEBERTA;
    case W_DEC: return c->decoder;
    case W_DEC_T5: return c->decoder && c->pos.type == RELATTN_POS_T5;
    default:
      if (when >= W_STW0 && when < W_STW0 + RELATTN_ST_MAX_DENSE)
        return c->st && when - W_STW0 < c->st_n_dense;
      if (when >= W_STB0 && when < W_STB0 + RELATTN_ST_MAX_DENSE)
        return c->st && when - W_STB0 < c->st_n_dense &&
               c->st_bias[when - W_STB0];
      return 1;
  }
}

static int has(const relattn_config *c, const tensor_row *r) {
  if (r->bias == B_LINEAR && c->no_biases) return 0;
  if (r->bias == B_NORM && c->norm_kind == RELATTN_RMSNORM) return 0;
  return has_when(c, r->when);
}

/* DeBERTa-v2's att_span: the shared table has 2 span rows. */
static int deberta_span(const relattn_config *c) {
  return c->pos.position_buckets > 0 ? c->pos.position_buckets
                                     : c->pos.max_relative_positions;
}

static void shape_of(const relattn_config *c, int rule,
                     relattn_tensor_spec *s) {
  int64_t d = c->d_model, f = c->d_ff, v = c->vocab_size;
  int64_t rows = 2 * (int64_t)c->clip + 1, dh = relattn_config_d_head(c);
  int64_t a = d, b = 0, e = 0, in = dh * c->n_heads;
  switch (rule) {
    case S_DD: b = d; break;
    case S_ID: a = in, b = d; break;
    case S_DI: b = in; break;
    case S_I: a = in; break;
    case S_F: a = f; break;
    case S_FD: a = f, b = d; break;
    case S_DF: b = f; break;
    case S_VD: a = v, b = d; break;
    case S_REL:
      if (c->pos.type != RELATTN_POS_SHAW) /* rel_key*: HF distance_embedding */
        a = 2 * (int64_t)c->max_len - 1, b = dh;
      else if (c->per_head) a = c->n_heads, b = rows, e = dh;
      else a = rows, b = dh;
      break;
    case S_BIAS: a = c->n_heads, b = c->pos.num_buckets; break;
    case S_POS: a = c->max_len, b = d; break;
    case S_POSROWS: a = c->max_len; break;
    case S_RELROWS: a = 2 * (int64_t)deberta_span(c); break;
    case S_HD: a = c->n_heads, b = dh; break;
    case S_RELEMB: a = 2 * (int64_t)deberta_span(c), b = d; break;
    case S_TYPES: a = c->token_types, b = d; break;
    case S_V: a = v; break;
    case S_LD: a = c->n_labels, b = d; break;
    case S_L: a = c->n_labels; break;
    default:
      if (rule >= S_STW0 && rule < S_STW0 + RELATTN_ST_MAX_DENSE)
        a = c->st_out[rule - S_STW0], b = c->st_in[rule - S_STW0];
      else if (rule >= S_STB0 && rule < S_STB0 + RELATTN_ST_MAX_DENSE)
        a = c->st_out[rule - S_STB0];
      break; /* else (d_model) */
  }
  s->ndim = e ? 3 : (b ? 2 : 1);
  s->shape[0] = a, s->shape[1] = b, s->shape[2] = e;
}

/* Hard limits that keep every product well inside int64 and size_t, and the
** number of tensors (at most 23 per layer) small enough to list. */
#define MAX_DIM (1 << 24)
#define MAX_LAYERS (1 << 16)

int relattn_config_d_head(const relattn_config *c) {
  if (c->d_head) return c->d_head;
  return c->n_heads > 0 ? c->d_model / c->n_heads : 0;
}

int relattn_config_inner(const relattn_config *c) {
  return relattn_config_d_head(c) * c->n_heads;
}

const char *relattn_head_name(int head) {
  static const char *const names[] = {"lm", "mlm", "classifier", "none",
                                      "token_classifier"};
  return head >= 0 && head <= RELATTN_HEAD_TOKEN ? names[head] : "?";
}

static int known_activation(int a) {
  return a == RELATTN_GELU || a == RELATTN_RELU || a == RELATTN_GELU_TANH ||
         a == RELATTN_TANH;
}

/* The head's keys: labels only (and always) with a classifier of sequences
** or of tokens; masked-LM and classifier heads read every row, so they need
** an encoder. */
static int heads_check(const relattn_config *c, const char *what, char *err,
                       size_t errlen) {
  if (c->head < RELATTN_HEAD_LM || c->head > RELATTN_HEAD_TOKEN ||
      !known_activation(c->head_activation) ||
      !known_activation(c->pooler_activation) ||
      c->problem_type < RELATTN_PROBLEM_SINGLE ||
      c->problem_type > RELATTN_PROBLEM_REGRESSION)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: unknown head, activation or problem_type",
                          what);
  if ((c->head == RELATTN_HEAD_MLM || RELATTN_HEAD_HAS_LABELS(c->head)) &&
      c->arch != RELATTN_ENCODER)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: head '%s' needs arch 'encoder'", what,
                          relattn_head_name(c->head));
  if (RELATTN_HEAD_HAS_LABELS(c->head) && c->n_labels < 1)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: head '%s' needs 'labels' (an array of "
                          "names, one per class)",
                          what, relattn_head_name(c->head));
  if (c->n_labels > MAX_DIM)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'labels' must have 1 to %d names, not %d", what,
                          MAX_DIM, c->n_labels);
  if (!RELATTN_HEAD_HAS_LABELS(c->head) && c->n_labels)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'labels' is a key of heads 'classifier' and "
                          "'token_classifier', not '%s'",
                          what, relattn_head_name(c->head));
  return RELATTN_OK;
}

/* The sentence-transformers modules (config "sentence"): each Dense takes
** what comes before it, the pooled modes side by side or the Dense before,
** and the input may be cut to max_seq_length rows only past its special
** rows. */
static int sentence_check(const relattn_config *c, const char *what,
                          char *err, size_t errlen) {
  int k, modes = 0, width;
  for (k = 0; k < 6; k++) modes += (c->st_pooling >> k) & 1;
  if (modes == 0 || (c->st_pooling & ~RELATTN_SP_ALL))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'sentence.pooling' needs at least one mode",
                          what);
  if (c->st_n_dense < 0 || c->st_n_dense > RELATTN_ST_MAX_DENSE)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'sentence.dense' may have at most %d modules, "
                          "not %d",
                          what, RELATTN_ST_MAX_DENSE, c->st_n_dense);
  width = modes * c->d_model; /* d_model at most MAX_DIM: no overflow */
  for (k = 0; k < c->st_n_dense; k++) {
    if (c->st_out[k] < 1 || c->st_out[k] > MAX_DIM)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: 'sentence.dense[%d].out_features' must be "
                            "between 1 and %d, not %d",
                            what, k, MAX_DIM, c->st_out[k]);
    if (c->st_in[k] != width)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: 'sentence.dense[%d].in_features' is %d; "
                            "what comes before it is %d wide (%s)",
                            what, k, c->st_in[k], width,
                            k ? "the Dense before" : "the pooling");
    if (c->st_act[k] < RELATTN_DENSE_IDENTITY ||
        c->st_act[k] > RELATTN_DENSE_SIGMOID)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: unknown sentence.dense activation", what);
    width = c->st_out[k];
  }
  if (c->st_max_seq != 0 &&
      (c->st_max_seq < 1 + (c->bos >= 0) + (c->append >= 0) ||
       c->st_max_seq > MAX_DIM))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'sentence.max_seq_length' must be between %d "
                          "(a token and the special rows) and %d, not %d",
                          what, 1 + (c->bos >= 0) + (c->append >= 0), MAX_DIM,
                          c->st_max_seq);
  return RELATTN_OK;
}

int relattn_config_check(const relattn_config *c, const char *what, char *err,
                         size_t errlen) {
  const struct { const char *key; int v; } sizes[] = {
      {"vocab_size", c->vocab_size}, {"d_model", c->d_model},
      {"n_layers", c->n_layers},     {"n_heads", c->n_heads},
      {"d_ff", c->d_ff}};
  const struct { const char *key; int v; } ids[] = {
      {"tokenizer.bos", c->bos}, {"tokenizer.eos", c->eos},
      {"tokenizer.pad", c->pad},       {"tokenizer.append", c->append},
      {"tokenizer.sep", c->sep},       {"tokenizer.mask", c->mask},
      {"tokenizer.unk", c->unk}};
  size_t i;
  int rc = heads_check(c, what, err, errlen);
  if (rc != RELATTN_OK) return rc;
  for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    if (sizes[i].v < 1 || sizes[i].v > MAX_DIM)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: '%s' must be between 1 and %d, not %d", what,
                            sizes[i].key, MAX_DIM, sizes[i].v);
  if (c->n_layers > MAX_LAYERS)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'n_layers' must be between 1 and %d, not %d",
                          what, MAX_LAYERS, c->n_layers);
  if (c->tok_type == RELATTN_TOK_BYTES && c->vocab_size < 256)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'vocab_size' must be at least 256 (the byte "
                          "tokenizer), not %d",
                          what, c->vocab_size);
  /* d_head: the heads' width as given (T5's d_kv), their inner width
  ** n_heads * d_head free of d_model; without it, d_model split in n_heads */
  if (c->d_head < 0 || c->d_head > MAX_DIM)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'd_head' must be between 1 and %d, not %d",
                          what, MAX_DIM, c->d_head);
  if ((int64_t)c->d_head * c->n_heads > MAX_DIM)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'n_heads' * 'd_head' (%d * %d) must be at most "
                          "%d",
                          what, c->n_heads, c->d_head, MAX_DIM);
  if (!c->d_head && c->d_model % c->n_heads != 0)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'd_model' (%d) is not divisible by 'n_heads' "
                          "(%d)",
                          what, c->d_model, c->n_heads);
  if (c->clip < 0 || c->clip > MAX_DIM)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'position.clip' must be between 0 and %d, not "
                          "%d",
                          what, MAX_DIM, c->clip);
  if (c->pos.type == RELATTN_POS_T5 || c->pos.type == RELATTN_POS_DEBERTA) {
    char pre[256];
    int rc;
    snprintf(pre, sizeof pre, "%s: 'position.", what);
    rc = relattn_position_check_buckets(&c->pos, c->arch == RELATTN_DECODER,
                                        pre, "'", err, errlen);
    if (rc != RELATTN_OK) return rc;
  }
  if ((c->pos.type == RELATTN_POS_ABSOLUTE ||
       c->pos.type == RELATTN_POS_REL_KEY ||
       c->pos.type == RELATTN_POS_REL_KEY_QUERY) &&
      (c->max_len < 1 || c->max_len > MAX_DIM))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'position.%s' must be between 1 and %d, not %d",
                          what,
                          c->pos.type == RELATTN_POS_ABSOLUTE
                              ? "max_len"
                              : "max_position_embeddings",
                          MAX_DIM, c->max_len);
  if (c->pos.type == RELATTN_POS_XL && c->d_model % 2)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'd_model' must be even for position type 'xl' "
                          "(its sinusoids), not %d",
                          what, c->d_model);
  if (c->pos.type == RELATTN_POS_ROPE) {
    const int dh = relattn_config_d_head(c);
    const int r = c->pos.rotary_dim ? c->pos.rotary_dim : dh;
    if (r < 2 || r % 2 || r > dh)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: 'position.rotary_dim' must be even, at least "
                            "2 and at most %s = %d, not %d",
                            what, c->d_head ? "d_head" : "d_model/n_heads",
                            dh, r);
    if (!(c->pos.base > 1.0) || !(c->pos.base < 1e300))
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: 'position.base' must be a number over 1",
                            what);
  }
  if (c->decoder) {
    /* an encoder-decoder: T5's shape (src/seq2seq.c) */
    if (c->dec_layers < 1 || c->dec_layers > MAX_LAYERS)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: 'decoder.n_layers' must be between 1 and "
                            "%d, not %d",
                            what, MAX_LAYERS, c->dec_layers);
    if (c->dec_start < 0 || c->dec_start >= c->vocab_size)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: 'decoder.start' must be a token id below "
                            "vocab_size (%d)",
                            what, c->vocab_size);
    if (c->arch != RELATTN_ENCODER || c->head != RELATTN_HEAD_LM ||
        c->norm != RELATTN_NORM_PRE)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: 'decoder' needs arch 'encoder', head 'lm' "
                            "and norm 'pre'",
                            what);
    if (c->pos.type != RELATTN_POS_T5)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: 'decoder' needs position type 't5', not "
                            "'%s'",
                            what, relattn_position_name(c->pos.type));
    {
      char pre[256];
      int rc;
      snprintf(pre, sizeof pre, "%s: 'position.", what);
      rc = relattn_position_check_buckets(&c->pos, 1, pre, "'", err, errlen);
      if (rc != RELATTN_OK) return rc;
    }
  }
  if (c->quant != RELATTN_QUANT_NONE && c->quant != RELATTN_QUANT_INT8 &&
      c->quant != RELATTN_QUANT_BF16)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: unknown quantization.linear", what);
  if (c->quant_emb != RELATTN_QUANT_NONE && c->quant_emb != c->quant)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: quantization.embeddings must be the same as "
                          "quantization.linear",
                          what);
  if (c->quant == RELATTN_QUANT_INT8 &&
      (c->d_model > RELATTN_Q8_MAX_IN || c->d_ff > RELATTN_Q8_MAX_IN ||
       relattn_config_inner(c) > RELATTN_Q8_MAX_IN))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: quantization.linear 'int8' needs d_model, d_ff "
                          "and n_heads * d_head of at most %d",
                          what, RELATTN_Q8_MAX_IN);
  if (c->token_types < 0 || c->token_types > MAX_DIM)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'embedding.token_types' must be between 0 and "
                          "%d, not %d",
                          what, MAX_DIM, c->token_types);
  if (!(c->norm_eps >= 0.0f) || c->norm_eps > 1.0f)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'norm_eps' must be between 0 and 1", what);
  if ((c->arch != RELATTN_DECODER && c->arch != RELATTN_ENCODER) ||
      (c->norm != RELATTN_NORM_PRE && c->norm != RELATTN_NORM_POST) ||
      (c->activation != RELATTN_GELU && c->activation != RELATTN_RELU &&
       c->activation != RELATTN_GELU_TANH) ||
      (c->norm_kind != RELATTN_LAYERNORM && c->norm_kind != RELATTN_RMSNORM) ||
      (c->ffn_gated != 0 && c->ffn_gated != 1))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: unknown arch, norm, norm_kind, ffn or "
                          "activation",
                          what);
  if (c->st && (rc = sentence_check(c, what, err, errlen)) != RELATTN_OK)
    return rc;
  if (c->tok_type != RELATTN_TOK_BYTES) {
    /* the tokenizer's own ids: any in the vocabulary */
    for (i = 0; i < sizeof ids / sizeof ids[0]; i++)
      if (ids[i].v != -1 && (ids[i].v < 0 || ids[i].v >= c->vocab_size))
        return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                              "%s: '%s' must be at least 0 and below "
                              "vocab_size (%d), not %d",
                              what, ids[i].key, c->vocab_size, ids[i].v);
    return RELATTN_OK;
  }
  for (i = 0; i < sizeof ids / sizeof ids[0]; i++)
    if (ids[i].v != -1 && (ids[i].v < 256 || ids[i].v >= c->vocab_size))
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: '%s' must be at least 256 and below "
                            "vocab_size (%d), not %d",
                            what, ids[i].key, c->vocab_size, ids[i].v);
  return RELATTN_OK;
}

/* Which rows of head_rows (layer_rows, ...) a config has, in order: *out
** gets their indices. */
static int head_list(const relattn_config *c, int *out) {
  int k, n = 0;
  for (k = 0; k < N_HEAD_ROWS; k++)
    if (has(c, &head_rows[k])) out[n++] = k;
  return n;
}

/* The tensors before the layers: tok_emb, [tok_emb.scale]. */
static int n_head(const relattn_config *c) {
  int idx[N_HEAD_ROWS];
  return head_list(c, idx);
}

static int layer_list(const relattn_config *c, int *out) {
  int k, n = 0;
  for (k = 0; k < N_LAYER_ROWS; k++)
    if (has(c, &layer_rows[k])) out[n++] = k;
  return n;
}

static int tail_list(const relattn_config *c, int *out) {
  int k, n = 0;
  for (k = 0; k < N_TAIL_ROWS; k++)
    if (has(c, &tail_rows[k])) out[n++] = k;
  return n;
}

static int dec_list(const relattn_config *c, int *out) {
  int k, n = 0;
  if (!c->decoder) return 0;
  for (k = 0; k < N_DEC_ROWS; k++)
    if (has(c, &dec_layer_rows[k])) out[n++] = k;
  return n;
}

static int dec_tail_list(const relattn_config *c, int *out) {
  int k, n = 0;
  for (k = 0; k < N_DEC_TAIL; k++)
    if (has(c, &dec_tail_rows[k])) out[n++] = k;
  return n;
}

static int per_layer(const relattn_config *c) {
  int idx[N_LAYER_ROWS];
  return layer_list(c, idx);
}

static int per_dec_layer(const relattn_config *c) {
  int idx[N_DEC_ROWS];
  return dec_list(c, idx);
}

/* The decoder's layers: 0 without one. */
static int dec_layers(const relattn_config *c) {
  return c->decoder ? c->dec_layers : 0;
}

int relattn_config_is_s2s(const relattn_config *c) {
  return c->decoder && c->dec_layers > 0;
}

/* The first index after the encoder's tail: the decoder's first tensor. */
static int dec_first(const relattn_config *c) {
  int idx[N_TAIL_ROWS];
  return n_head(c) + c->n_layers * per_layer(c) + tail_list(c, idx);
}

int relattn_model_n_tensors(const relattn_config *c) {
  int idx[N_DEC_TAIL];
  return dec_first(c) + dec_layers(c) * per_dec_layer(c) +
         dec_tail_list(c, idx);
}

/* Bytes of the layer table at the start of mem (the encoder's layers, then
** the decoder's), 64-byte aligned. */
static size_t table_bytes(const relattn_config *c) {
  return ((size_t)(c->n_layers + dec_layers(c)) * sizeof(relattn_layer) +
          63) & ~(size_t)63;
}

static int is_dec_tail_row(const tensor_row *r) {
  return r >= dec_tail_rows && r < dec_tail_rows + N_DEC_TAIL;
}

static int is_dec_row(const tensor_row *r) {
  return r >= dec_layer_rows && r < dec_layer_rows + N_DEC_ROWS;
}

/* The row of spec i: *layer is its layer (-1 outside the layers). */
static const tensor_row *row_of(const relattn_config *c, int i, int *layer) {
  int lidx[N_LAYER_ROWS], tidx[N_TAIL_ROWS], didx[N_DEC_ROWS];
  int dtidx[N_DEC_TAIL], hidx[N_HEAD_ROWS];
  int pl = layer_list(c, lidx), nt, pd, nh = head_list(c, hidx);
  *layer = -1;
  if (i < nh) return &head_rows[hidx[i]];
  i -= nh;
  if (i < c->n_layers * pl) {
    *layer = i / pl;
    return &layer_rows[lidx[i % pl]];
  }
  i -= c->n_layers * pl;
  nt = tail_list(c, tidx);
  if (i < nt) return &tail_rows[tidx[i]];
  /* the decoder's layers are numbered after the encoder's */
  i -= nt;
  pd = dec_list(c, didx);
  if (i < dec_layers(c) * pd) {
    *layer = c->n_layers + i / pd;
    return &dec_layer_rows[didx[i % pd]];
  }
  i -= dec_layers(c) * pd;
  dec_tail_list(c, dtidx);
  return &dec_tail_rows[dtidx[i]];
}

/* The layer weights the forward pass reads in panel order (src/gemm.c),
** or with quantization int8, as int8 (src/qgemm.c). */
static const size_t packed_fields[] = {
    offsetof(relattn_layer, wq), offsetof(relattn_layer, wk),
    offsetof(relattn_layer, wv), offsetof(relattn_layer, wo),
    offsetof(relattn_layer, w1), offsetof(relattn_layer, w3),
    offsetof(relattn_layer, w2), offsetof(relattn_layer, xq),
    offsetof(relattn_layer, xk), offsetof(relattn_layer, xv),
    offsetof(relattn_layer, xo)};
#define N_PACKED (int)(sizeof packed_fields / sizeof packed_fields[0])

static int is_packed_field(const tensor_row *r) {
  int f;
  for (f = 0; f < N_PACKED; f++)
    if (r->field == packed_fields[f]) return 1;
  return 0;
}

/* Whether r is one of the embedding tables quantization.embeddings
** quantizes: 2 for those the cache keeps packed (the vocabulary's), 3 for
** the one it keeps as stored (rel_emb: read only while the DeBERTa tables
** are built), 1 for the one read into floats (pos_emb), 0 for none. */
static int emb_table(const tensor_row *r) {
  if (r->field == offsetof(relattn_model, tok_emb) ||
      r->field == offsetof(relattn_model, lm_head))
    return 2;
  if (r->field == offsetof(relattn_model, rel_emb)) return 3;
  if (r->field == offsetof(relattn_model, pos_emb)) return 1;
  return 0;
}

int relattn_model_slot_kind(const relattn_config *c, int i) {
  int layer;
  const tensor_row *r = row_of(c, i, &layer);
  if (r->when == W_Q8 || r->when == W_Q8_GATED || r->when == W_Q8E ||
      r->when == W_Q8E_UNTIED || r->when == W_Q8E_ABSOLUTE ||
      r->when == W_Q8E_DEBERTA)
    return RELATTN_SLOT_SCALE;
  if (layer < 0) { /* (head and tail rows: fields of relattn_model) */
    const int t = is_dec_tail_row(r) ? 0 : emb_table(r);
    if (!t || c->quant_emb == RELATTN_QUANT_NONE) return RELATTN_SLOT_FLOAT;
    if (c->quant_emb == RELATTN_QUANT_BF16) return RELATTN_SLOT_BF16F;
    return t == 2 ? RELATTN_SLOT_Q8 : t == 3 ? RELATTN_SLOT_Q8R
                                             : RELATTN_SLOT_Q8F;
  }
  if (!is_packed_field(r)) return RELATTN_SLOT_FLOAT;
  return c->quant == RELATTN_QUANT_INT8   ? RELATTN_SLOT_Q8
         : c->quant == RELATTN_QUANT_BF16 ? RELATTN_SLOT_BF16
                                          : RELATTN_SLOT_FLOAT;
}

const char *relattn_slot_dtypes(int kind) {
  return kind == RELATTN_SLOT_Q8 || kind == RELATTN_SLOT_Q8F ||
                 kind == RELATTN_SLOT_Q8R
             ? "I8"
         : kind == RELATTN_SLOT_SCALE                       ? "F32"
         : kind == RELATTN_SLOT_BF16 || kind == RELATTN_SLOT_BF16F
             ? "BF16"
             : "F32, F16 or BF16";
}

int relattn_slot_dtype_ok(int kind, int dtype) {
  if (kind == RELATTN_SLOT_Q8 || kind == RELATTN_SLOT_Q8F ||
      kind == RELATTN_SLOT_Q8R)
    return dtype == RELATTN_I8;
  if (kind == RELATTN_SLOT_SCALE) return dtype == RELATTN_F32;
  if (kind == RELATTN_SLOT_BF16 || kind == RELATTN_SLOT_BF16F)
    return dtype == RELATTN_BF16;
  return dtype == RELATTN_F32 || dtype == RELATTN_F16 || dtype == RELATTN_BF16;
}

/* Name and shape of spec i (no offset). */
static void spec_shape(const relattn_config *c, int i, relattn_tensor_spec *s) {
  int layer;
  const tensor_row *r = row_of(c, i, &layer);
  if (layer >= 0 && is_dec_row(r))
    snprintf(s->name, sizeof s->name, "dec.layers.%d.%s",
             layer - c->n_layers, r->name);
  else if (layer >= 0)
    snprintf(s->name, sizeof s->name, "layers.%d.%s", layer, r->name);
  else
    snprintf(s->name, sizeof s->name, "%s", r->name);
  shape_of(c, r->shape, s);
}

static size_t spec_numel(const relattn_tensor_spec *s) {
  size_t n = 1;
  int d;
  for (d = 0; d < s->ndim; d++) n *= (size_t)s->shape[d];
  return n;
}

static size_t aligned_floats(size_t numel) { return (numel + 15) & ~(size_t)15; }

/* Floats a RELATTN_SLOT_Q8R table's numel bytes take (its scales after). */
static size_t q8r_floats(size_t numel) {
  return aligned_floats((numel + sizeof(float) - 1) / sizeof(float));
}

/* numel of spec s, 0 (and *ok = 0) on overflow */
static size_t checked_numel(const relattn_tensor_spec *s, int *ok) {
  size_t n = 1;
  int d;
  for (d = 0; d < s->ndim; d++)
    if (!relattn_mul_ok(n, (size_t)s->shape[d], &n)) *ok = 0;
  if (n > SIZE_MAX - 16) *ok = 0;
  return *ok ? aligned_floats(n) : 0;
}

/* Floats slot i of spec s takes in m->mem: an int8 weight its packed
** block (relattn_q8w_block_bytes, a multiple of 64 bytes), which has room
** for the rows as stored while it loads; its scales none: they are read
** into the block's own (relattn_q8w_scale_offset), kept once. An int8
** table read into floats (Q8F) its floats, then its scales; one kept as
** stored (Q8R) its bytes, then its scales. */
static size_t slot_floats(const relattn_config *c, int i,
                          const relattn_tensor_spec *s, int *ok) {
  size_t n = checked_numel(s, ok);
  int kind = *ok ? relattn_model_slot_kind(c, i) : RELATTN_SLOT_FLOAT;
  if (kind == RELATTN_SLOT_Q8)
    n = relattn_q8w_block_bytes((int)s->shape[0], (int)s->shape[1]) /
        sizeof(float);
  if (kind == RELATTN_SLOT_SCALE) n = 0;
  if (kind == RELATTN_SLOT_Q8F) /* the floats, then the scales' room */
    n += aligned_floats((size_t)s->shape[0]);
  if (kind == RELATTN_SLOT_Q8R) /* the bytes, then the scales' room */
    n = q8r_floats(spec_numel(s)) + aligned_floats((size_t)s->shape[0]);
  if (kind == RELATTN_SLOT_BF16)
    n = relattn_bf16w_block_bytes((int)s->shape[0], (int)s->shape[1]) /
        sizeof(float);
  return n;
}

int relattn_model_bytes(const relattn_config *c, size_t *bytes,
                        const char *what, char *err, size_t errlen) {
  /* closed form: every layer has the same shapes, so a config with many
  ** layers costs no more to size than one with a single layer */
  size_t total = table_bytes(c) / sizeof(float), layer = 0, dec = 0, b;
  int i, n = relattn_model_n_tensors(c), pl = per_layer(c), ok = 1;
  const int d0 = dec_first(c), pd = per_dec_layer(c), nh = n_head(c);
  const int d1 = d0 + dec_layers(c) * pd;
  relattn_tensor_spec s;
  /* tok_emb, the encoder's tail, the decoder's tail: one by one */
  for (i = 0; i < n; i = (i + 1 == nh ? nh + c->n_layers * pl
                                       : i + 1 == d0 ? d1 : i + 1)) {
    if (i >= d0 && i < d1) continue; /* (no tail: the jump lands here) */
    spec_shape(c, i, &s);
    if (!relattn_add_ok(total, slot_floats(c, i, &s, &ok), &total)) ok = 0;
  }
  for (i = nh; i < nh + pl; i++) {
    spec_shape(c, i, &s);
    if (!relattn_add_ok(layer, slot_floats(c, i, &s, &ok), &layer)) ok = 0;
  }
  for (i = d0; i < d0 + pd; i++) {
    spec_shape(c, i, &s);
    if (!relattn_add_ok(dec, slot_floats(c, i, &s, &ok), &dec)) ok = 0;
  }
  if (!ok || !relattn_mul_ok(layer, (size_t)c->n_layers, &layer) ||
      !relattn_mul_ok(dec, (size_t)dec_layers(c), &dec) ||
      !relattn_add_ok(layer, dec, &layer) ||
      !relattn_add_ok(total, layer, &total) ||
      !relattn_mul_ok(total, sizeof(float), &b))
    return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                          "%s: the model's size overflows", what);
  *bytes = b;
  return RELATTN_OK;
}

void relattn_model_spec(const relattn_config *c, int i,
                        relattn_tensor_spec *s) {
  spec_shape(c, i, s);
  s->numel = spec_numel(s);
}

int relattn_model_index(const relattn_config *c, const char *name) {
  relattn_tensor_spec s;
  int lidx[N_LAYER_ROWS], tidx[N_TAIL_ROWS], hidx[N_HEAD_ROWS];
  int n = relattn_model_n_tensors(c), pl = layer_list(c, lidx), i = -1, k;
  int nt = tail_list(c, tidx), nh = head_list(c, hidx);
  for (k = 0; k < nh; k++) /* tok_emb, [tok_emb.scale]: first */
    if (strcmp(name, head_rows[hidx[k]].name) == 0) i = k;
  if (i < 0 && strncmp(name, "layers.", 7) == 0) {
    const char *p = name + 7;
    long layer = 0;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
      return -1;
    while (*p >= '0' && *p <= '9' && layer <= c->n_layers)
      layer = layer * 10 + (*p++ - '0');
    if (*p++ != '.' || layer >= c->n_layers) return -1;
    for (k = 0; k < pl; k++)
      if (strcmp(p, layer_rows[lidx[k]].name) == 0) break;
    if (k == pl) return -1;
    i = nh + (int)layer * pl + k;
  } else if (strncmp(name, "dec.layers.", 11) == 0) {
    int didx[N_DEC_ROWS], pd = dec_list(c, didx);
    const char *p = name + 11;
    long layer = 0;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
      return -1;
    while (*p >= '0' && *p <= '9' && layer <= dec_layers(c))
      layer = layer * 10 + (*p++ - '0');
    if (*p++ != '.' || layer >= dec_layers(c)) return -1;
    for (k = 0; k < pd; k++)
      if (strcmp(p, dec_layer_rows[didx[k]].name) == 0) break;
    if (k == pd) return -1;
    i = dec_first(c) + (int)layer * pd + k;
  } else if (strncmp(name, "dec.", 4) == 0) {
    int dtidx[N_DEC_TAIL], ndt = dec_tail_list(c, dtidx);
    for (k = 0; k < ndt; k++)
      if (strcmp(name, dec_tail_rows[dtidx[k]].name) == 0)
        i = dec_first(c) + dec_layers(c) * per_dec_layer(c) + k;
  } else {
    for (k = 0; k < nt; k++)
      if (strcmp(name, tail_rows[tidx[k]].name) == 0)
        i = nh + c->n_layers * pl + k;
  }
  if (i < 0 || i >= n) return -1;
  spec_shape(c, i, &s); /* the name must round-trip exactly */
  return strcmp(s.name, name) == 0 ? i : -1;
}

void relattn_shape_json(const int64_t *shape, int ndim, char *out, size_t n) {
  size_t len = 0;
  int d;
  if (n == 0) return;
  out[0] = 0;
  len += (size_t)snprintf(out + len, n - len, "[");
  for (d = 0; d < ndim && len < n; d++)
    len += (size_t)snprintf(out + len, n - len, d ? ",%lld" : "%lld",
                            (long long)shape[d]);
  if (len < n) snprintf(out + len, n - len, "]");
}

/* Where spec i's pointer lives in m. */
static const float **slot_ptr(relattn_model *m, int i) {
  int layer;
  const tensor_row *r = row_of(&m->cfg, i, &layer);
  if (layer >= m->cfg.n_layers) /* the decoder's, numbered after */
    return (const float **)((char *)&m->dec_layers[layer - m->cfg.n_layers] +
                            r->field);
  if (layer >= 0)
    return (const float **)((char *)&m->layers[layer] + r->field);
  return (const float **)((char *)m + r->field);
}

int relattn_model_init(relattn_model *m, const relattn_config *c,
                       const char *what, char *err, size_t errlen) {
  size_t bytes, off;
  int i, n, rc, ok = 1;
  relattn_tensor_spec s;
  relattn_config copy = *c; /* c may be &m->cfg */
  memset(m, 0, sizeof *m);
  m->cfg = copy;
  c = &m->cfg;
  rc = relattn_model_bytes(c, &bytes, what, err, errlen);
  if (rc) return rc;
  m->mem = relattn_alloc(bytes);
  if (!m->mem)
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "%s: out of memory for %zu bytes of weights", what,
                          bytes);
  memset(m->mem, 0, table_bytes(c));
  m->layers = m->mem;
  if (dec_layers(c)) m->dec_layers = m->layers + c->n_layers;
  n = relattn_model_n_tensors(c);
  off = table_bytes(c) / sizeof(float);
  for (i = 0; i < n; i++) {
    if (relattn_model_slot_kind(c, i) == RELATTN_SLOT_SCALE) {
      /* in its weight's block (slot i - 1, whose shape s still is): a
      ** packed one's own, else after the floats (the bytes: Q8R) */
      const int wk = relattn_model_slot_kind(c, i - 1);
      *slot_ptr(m, i) =
          wk == RELATTN_SLOT_Q8
              ? (const float *)((const char *)*slot_ptr(m, i - 1) +
                                relattn_q8w_scale_offset((int)s.shape[0],
                                                         (int)s.shape[1]))
          : wk == RELATTN_SLOT_Q8R
              ? *slot_ptr(m, i - 1) + q8r_floats(spec_numel(&s))
              : *slot_ptr(m, i - 1) + aligned_floats(spec_numel(&s));
      continue;
    }
    spec_shape(c, i, &s);
    *slot_ptr(m, i) = (float *)m->mem + off;
    off += slot_floats(c, i, &s, &ok); /* ok: relattn_model_bytes held */
  }
  if (c->tie_embeddings) m->lm_head = m->tok_emb, m->lm_scale = m->tok_scale;
  return RELATTN_OK;
}

float *relattn_model_slot(relattn_model *m, int i) {
  /* the arrays are ours (in m->mem); const only for the model's readers */
  return (float *)*slot_ptr(m, i);
}

/* Bytes of deberta's int8 (bf16) tables: each layer's c2p and p2c, one
** weight (2 span rows, d_head) per head (src/qgemm.c's block and its
** header). */
static size_t deberta_q8_bytes(const relattn_config *c) {
  const int rows = 2 * deberta_span(c), dh = relattn_config_d_head(c);
  const size_t count = 2 * (size_t)c->n_heads * (size_t)c->n_layers;
  if (c->quant == RELATTN_QUANT_BF16)
    return (count * sizeof(relattn_bf16w) + 63) / 64 * 64 +
           count * relattn_bf16w_block_bytes(rows, dh);
  return (count * sizeof(relattn_q8w) + 63) / 64 * 64 +
         count * relattn_q8w_block_bytes(rows, dh);
}

size_t relattn_model_prepared_bytes(const relattn_config *c) {
  size_t per, total, once = 0;
  const size_t dh = (size_t)relattn_config_d_head(c);
  const size_t in = (size_t)relattn_config_inner(c);
  if (c->pos.type == RELATTN_POS_XL)
    per = (2 * (size_t)c->clip + 1) * in;
  else if (c->pos.type == RELATTN_POS_REL_KEY ||
           c->pos.type == RELATTN_POS_REL_KEY_QUERY)
    per = (2 * (size_t)c->max_len - 1) * dh; /* the flipped table */
  else if (c->pos.type == RELATTN_POS_DEBERTA &&
           c->quant != RELATTN_QUANT_NONE) {
    /* int8 (bf16) c2p and p2c tables (build_terms: the normed table, and
    ** an int8 rel_emb's floats, are scratch);
    ** the bucket map is each sequence's own (src/forward.c), not the
    ** model's: here one entry */
    per = 8;
    once = deberta_q8_bytes(c);
  } else if (c->pos.type == RELATTN_POS_DEBERTA) {
    /* each layer's c2p and p2c tables (2 span rows of the inner width each)
    ** and the normed table (2 span rows of d_model, once: build_terms keeps
    ** it after the layers'); the bucket map as above */
    per = 4 * (size_t)deberta_span(c) * in + 8;
    once = sizeof(float) * (2 * (size_t)deberta_span(c) * (size_t)c->d_model);
  } else
    return 0;
  /* each layer's floats, 64 bytes of slack and its terms' entry */
  if (!relattn_mul_ok(per, sizeof(float), &per) ||
      !relattn_add_ok(per, 64 + sizeof(relattn_scheme), &per) ||
      !relattn_mul_ok(per, (size_t)c->n_layers, &total) ||
      !relattn_add_ok(total, once, &total))
    return SIZE_MAX;
  return total;
}


int relattn_model_slot_packed(const relattn_model *m, int i, int *out,
                              int *in) {
  int layer;
  relattn_tensor_spec s;
  const tensor_row *r;
  if (!m->packed) return 0;
  r = row_of(&m->cfg, i, &layer);
  if (layer < 0 || !is_packed_field(r)) return 0;
  spec_shape(&m->cfg, i, &s);
  *out = (int)s.shape[0];
  *in = (int)s.shape[1];
  return 1;
}

void relattn_model_embed(const relattn_model *m, float *x, int token) {
  const int d = m->cfg.d_model;
  if (m->cfg.quant_emb == RELATTN_QUANT_INT8)
    relattn_q8w_row(x, (const relattn_q8w *)(const void *)m->tok_emb, token);
  else
    memcpy(x, m->tok_emb + (size_t)token * d, sizeof(float) * d);
}

const struct relattn_q8w *relattn_model_slot_q8(const relattn_model *m,
                                                int i) {
  if (relattn_model_slot_kind(&m->cfg, i) != RELATTN_SLOT_Q8) return NULL;
  return (const relattn_q8w *)relattn_model_slot((relattn_model *)m, i);
}

/* Each int8 (bf16) weight, loaded as stored at the start of its slot,
** packed in place for src/qgemm.c, int8 with its scales (the slot after
** it). */
static int pack_q8(relattn_model *m, const char *what, char *err,
                   size_t errlen) {
  const relattn_config *c = &m->cfg;
  const int n = relattn_model_n_tensors(c);
  size_t most = 0;
  int8_t *rows;
  int i;
  relattn_tensor_spec s;
  for (i = 0; i < n; i++)
    if (relattn_model_slot_kind(c, i) == RELATTN_SLOT_Q8 ||
        relattn_model_slot_kind(c, i) == RELATTN_SLOT_BF16) {
      relattn_model_spec(c, i, &s);
      if (s.numel > most) most = s.numel;
    }
  /* the rows as stored, then their scales (both in the block) */
  most = (most + 63) & ~(size_t)63;
  rows = relattn_alloc(most + sizeof(float) * (most + 1));
  if (!rows)
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "%s: out of memory putting the weights in order",
                          what);
  for (i = 0; i < n; i++) {
    const int kind = relattn_model_slot_kind(c, i);
    float *slot, *scale = (float *)(void *)(rows + most);
    if (kind != RELATTN_SLOT_Q8 && kind != RELATTN_SLOT_BF16) continue;
    relattn_model_spec(c, i, &s);
    slot = relattn_model_slot(m, i);
    if (kind == RELATTN_SLOT_BF16) { /* 2 numel bytes: room after rows */
      memcpy(scale, slot, sizeof(uint16_t) * s.numel);
      relattn_bf16w_place(slot, (const uint16_t *)(void *)scale,
                          (int)s.shape[0], (int)s.shape[1]);
      continue;
    }
    memcpy(rows, slot, s.numel);
    memcpy(scale, relattn_model_slot(m, i + 1), sizeof(float) * s.shape[0]);
    relattn_q8w_place(slot, rows, scale, (int)s.shape[0], (int)s.shape[1]);
  }
  relattn_free(rows);
  return RELATTN_OK;
}

/* out (heads, rows, d_head) = rel (rows, d_model) W^T + b for an int8
** weight as stored (q (inner, d_model), its scales) or a bf16 one (q, no
** scales): the linear layer's product (src/qgemm.c) into full (rows,
** inner), split by head. */
static int q8_project_table(float *out, float *full, const float *rel,
                            const void *q, const float *scale, const float *b,
                            int rows, const relattn_config *c, void *scratch) {
  const int in = relattn_config_inner(c), dh = relattn_config_d_head(c);
  int h, r;
  if (c->quant == RELATTN_QUANT_BF16) {
    relattn_bf16w w;
    if (relattn_bf16w_new(&w, q, in, c->d_model) != RELATTN_OK)
      return RELATTN_ERR_NOMEM;
    relattn_bf16_gemm(full, in, rel, c->d_model, rows, &w, b, 0, scratch);
    relattn_bf16w_free(&w);
  } else {
    relattn_q8w w;
    if (relattn_q8w_new(&w, q, scale, in, c->d_model) != RELATTN_OK)
      return RELATTN_ERR_NOMEM;
    relattn_q8_gemm(full, in, rel, c->d_model, rows, &w, b, 0, scratch);
    relattn_q8w_free(&w);
  }
  for (h = 0; h < c->n_heads; h++)
    for (r = 0; r < rows; r++)
      memcpy(out + ((size_t)h * rows + r) * dh,
             full + (size_t)r * in + (size_t)h * dh, sizeof(float) * dh);
  return RELATTN_OK;
}

/* The layers' linear weights into panel order, where the CPU runs the
** kernel that reads them (AVX2 and FMA); elsewhere they stay as stored and
** the forward pass calls sgemm. */
static int pack_layers(relattn_model *m, const char *what, char *err,
                       size_t errlen) {
  const relattn_config *c = &m->cfg;
  const int n = relattn_model_n_tensors(c);
  int i, out, in;
  if (m->packed || !relattn_simd_fma() || c->quant != RELATTN_QUANT_NONE)
    return RELATTN_OK;
  m->packed = 1;
  for (i = 0; i < n; i++) {
    if (!relattn_model_slot_packed(m, i, &out, &in)) continue;
    if (relattn_pack(relattn_model_slot(m, i), out, in) != RELATTN_OK) {
      /* the layers before are in panel order, the rest not: unusable */
      m->packed = 0;
      return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                            "%s: out of memory putting the weights in order",
                            what);
    }
  }
  return RELATTN_OK;
}

static int prepare_terms(relattn_model *m, const char *what, char *err,
                         size_t errlen);

/* Each int8 table read into floats (pos_emb: I8 as stored at the
** start of its slot, its scales after), in place: q s, last element
** first, so that float k (bytes 4k .. 4k+3) overwrites only bytes already
** read. */
static void dequantize_q8f(relattn_model *m) {
  const relattn_config *c = &m->cfg;
  const int n = relattn_model_n_tensors(c);
  relattn_tensor_spec s;
  int i;
  for (i = 0; i < n; i++) {
    float *f, *scale;
    const int8_t *q;
    size_t k, cols;
    if (relattn_model_slot_kind(c, i) != RELATTN_SLOT_Q8F) continue;
    relattn_model_spec(c, i, &s);
    f = relattn_model_slot(m, i);
    q = (const int8_t *)(const void *)f;
    scale = relattn_model_slot(m, i + 1);
    cols = (size_t)s.shape[1];
    for (k = s.numel; k-- > 0;) f[k] = (float)q[k] * scale[k / cols];
  }
}

void relattn_q8r_to_f32(float *out, const int8_t *q, const float *scale,
                        size_t rows, size_t cols) {
  size_t k;
  for (k = 0; k < rows * cols; k++) out[k] = (float)q[k] * scale[k / cols];
}

int relattn_model_prepare(relattn_model *m, const char *what, char *err,
                          size_t errlen) {
  int rc;
  dequantize_q8f(m);
  /* the terms first: deberta's tables project the rows through wk, wq as
  ** stored */
  rc = prepare_terms(m, what, err, errlen);
  if (rc != RELATTN_OK) return rc;
  if (m->cfg.quant != RELATTN_QUANT_NONE) return pack_q8(m, what, err, errlen);
  return pack_layers(m, what, err, errlen);
}

static int build_terms(relattn_model *m, float *deq, const char *what,
                       char *err, size_t errlen);

/* What the position scheme builds once from the weights (rel_key*, xl,
** deberta). deberta's int8 layers: through floats dequantized per layer
** into one scratch buffer. */
static int prepare_terms(relattn_model *m, const char *what, char *err,
                         size_t errlen) {
  const relattn_config *c = &m->cfg;
  float *deq = NULL;
  int rc;
  if (c->pos.type == RELATTN_POS_DEBERTA && c->quant != RELATTN_QUANT_NONE) {
    /* (build_terms) a projection's output, the layer's float tables, the
    ** normed table, a table's scales and rows quantized (int8, or bf16),
    ** the product's scratch */
    const size_t rows = 2 * (size_t)deberta_span(c);
    const size_t in = (size_t)relattn_config_inner(c);
    const size_t q8 = relattn_q8_scratch((int)rows, c->d_model);
    const size_t b16 = relattn_bf16_scratch((int)rows, c->d_model);
    const size_t f = rows * in + 2 * rows * in + rows * (size_t)c->d_model +
                     rows + rows * (size_t)relattn_config_d_head(c) + 16 +
                     (q8 > b16 ? q8 : b16) / sizeof(float);
    deq = relattn_alloc(sizeof(float) * f);
    if (!deq)
      return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                            "%s: out of memory for the deberta tables", what);
  }
  rc = build_terms(m, deq, what, err, errlen);
  relattn_free(deq);
  return rc;
}

static int build_terms(relattn_model *m, float *deq, const char *what,
                       char *err, size_t errlen) {
  const relattn_config *c = &m->cfg;
  relattn_pos_tables tb;
  const int dh = relattn_config_d_head(c), xl = c->pos.type == RELATTN_POS_XL;
  const int deb = c->pos.type == RELATTN_POS_DEBERTA;
  const size_t rows = 2 * (size_t)c->clip + 1, in = (size_t)dh * c->n_heads;
  const size_t drows = deb ? 2 * (size_t)deberta_span(c) : 0;
  const size_t per = drows * in; /* one deberta table (heads, rows, d_head) */
  /* int8 deberta: the layer's float tables in scratch (deq, after the
  ** projection's output), made by the int8 layers wk, wq as a linear
  ** layer's product (src/qgemm.c: the same bits on every path and any
  ** OpenBLAS), then quantized per head and row into m->rel_proj:
  ** (n_layers, 2, heads) headers, then their weights' blocks
  ** (deberta_q8_bytes) */
  /* (bf16 the same, the tables rounded to bf16) */
  const int q8 = deb && c->quant != RELATTN_QUANT_NONE;
  const int bf = c->quant == RELATTN_QUANT_BF16;
  float *full = q8 ? deq : NULL;
  float *ftab = q8 ? full + drows * in : NULL;
  float *qscale = q8 ? ftab + 2 * per + drows * c->d_model : NULL;
  int8_t *qrows = q8 ? (int8_t *)(qscale + drows) : NULL;
  void *q8s = q8 ? (void *)(((uintptr_t)(qrows + 4 * drows * dh) + 63) &
                            ~(uintptr_t)63)
                 : NULL;
  relattn_q8w *hdr = NULL;
  relattn_bf16w *hdr16 = NULL;
  char *blocks = NULL;
  const float *rel = NULL;
  int l, rc;
  if (c->pos.type != RELATTN_POS_REL_KEY &&
      c->pos.type != RELATTN_POS_REL_KEY_QUERY && !xl && !deb)
    return RELATTN_OK;
  if (deb) {
    /* HF DisentangledSelfAttention (share_att_key): pos_key =
    ** key_proj(rel_embeddings), pos_query = query_proj(rel_embeddings),
    ** each layer its own, built once here */
    if (q8)
      m->rel_proj = relattn_alloc(deberta_q8_bytes(c));
    else
      m->rel_proj = relattn_alloc(
          sizeof(float) *
              (per * 2 * (size_t)c->n_layers + drows * (size_t)c->d_model) +
          1);
    if (!m->rel_proj)
      return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                            "%s: out of memory for the deberta tables", what);
    /* norm_rel_ebd "layer_norm": the table through the model's norm first
    ** (LayerNorm, or RMSNorm with norm_kind rmsnorm; its eps the model's),
    ** after the layers' tables (int8 models: in scratch) */
    rel = m->rel_emb;
    if (c->quant_emb == RELATTN_QUANT_INT8) {
      /* rel_emb kept int8 (RELATTN_SLOT_Q8R; quantization.embeddings int8
      ** only with linear int8, so q8): its floats q s, as dequantize_q8f
      ** reads pos_emb, in scratch where the normed table goes */
      float *fe = ftab + 2 * per;
      relattn_q8r_to_f32(fe, (const int8_t *)(const void *)m->rel_emb,
                         m->rel_scale, drows, (size_t)c->d_model);
      rel = fe;
    }
    if (q8) {
      hdr = (relattn_q8w *)(void *)m->rel_proj;
      hdr16 = (relattn_bf16w *)(void *)m->rel_proj;
      blocks = (char *)m->rel_proj +
               (2 * (size_t)c->n_heads * c->n_layers *
                    (bf ? sizeof(relattn_bf16w) : sizeof(relattn_q8w)) +
                63) / 64 * 64;
    }
    if (c->rel_norm) {
      float *normed = q8 ? ftab + 2 * per
                         : m->rel_proj + per * 2 * (size_t)c->n_layers;
      /* (int8 rel_emb: rel is normed already, normed in place) */
      relattn_norm(normed, rel, (int)drows, c->d_model, m->rel_ln_w,
                   m->rel_ln_b, c->norm_eps, c->norm_kind);
      rel = normed;
    }
  }
  m->terms = relattn_alloc(sizeof(relattn_scheme) * (size_t)c->n_layers);
  if (!m->terms)
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "%s: out of memory", what);
  memset(m->terms, 0, sizeof(relattn_scheme) * (size_t)c->n_layers);
  memset(&tb, 0, sizeof tb);
  for (l = 0; l < c->n_layers; l++) {
    /* the terms hold for any sequence of up to M rows (inputs are checked
    ** against max_len), so they are built for one */
    float *table = NULL;
    tb.t[0] = m->layers[l].rel_k;
    tb.count[0] = (2 * (int64_t)c->max_len - 1) * dh;
    if (xl) {
      /* (heads, 2 clip + 1, d_head), owned by the layer's terms below */
      table = relattn_alloc(sizeof(float) * rows * in);
      if (!table)
        return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                              "%s: out of memory for the xl tables", what);
      rc = relattn_xl_table(table, m->layers[l].wr, c->d_model, c->n_heads,
                            dh, c->clip, err, errlen);
      if (rc != RELATTN_OK) {
        relattn_free(table);
        return rc;
      }
      tb.t[0] = table;
      tb.count[0] = (int64_t)(rows * in);
      tb.t[2] = m->layers[l].u, tb.count[2] = (int64_t)in;
      tb.t[3] = m->layers[l].w, tb.count[3] = (int64_t)in;
    }
    if (deb) {
      float *pk = q8 ? ftab : m->rel_proj + (size_t)l * 2 * per, *pq = pk + per;
      const relattn_layer *L = &m->layers[l];
      if (q8) {
        /* pos_key = key_proj(rel), pos_query = query_proj(rel): the int8
        ** (bf16) layers' products (rows of rel quantized (rounded) as their
        ** inputs are), split by head */
        rc = q8_project_table(pk, full, rel, L->wk, L->sk, L->bk, (int)drows,
                              c, q8s);
        if (rc == RELATTN_OK)
          rc = q8_project_table(pq, full, rel, L->wq, L->sq, L->bq,
                                (int)drows, c, q8s);
        if (rc != RELATTN_OK)
          return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                                "%s: out of memory for the deberta tables",
                                what);
      } else {
        relattn_project_table(pk, rel, L->wk, L->bk, (int)drows, c->d_model,
                              c->n_heads, dh);
        relattn_project_table(pq, rel, L->wq, L->bq, (int)drows, c->d_model,
                              c->n_heads, dh);
      }
      tb.t[0] = pk, tb.count[0] = (int64_t)per;
      tb.t[2] = pq, tb.count[2] = (int64_t)per;
    }
    /* deberta's terms here are its tables and scale; the bucket map is
    ** built per call for the sequence (src/forward.c, build_schemes): one
    ** for any length would reach max_relative_positions (up to 2^24) */
    rc = relattn_scheme_build(&m->terms[l], &c->pos, &tb, 1, c->n_heads, dh,
                              c->arch == RELATTN_DECODER, xl || deb, err,
                              errlen);
    if (xl) m->terms[l].mem = table; /* xl's build allocates nothing */
    if (rc != RELATTN_OK) return rc;
    if (q8) {
      /* each head's tables, symmetric per row (src/qgemm.c; bf16: rounded
      ** to nearest even), for the kernel's int8 (bf16) products in place of
      ** the floats */
      const size_t qb = bf ? relattn_bf16w_block_bytes((int)drows, dh)
                           : relattn_q8w_block_bytes((int)drows, dh);
      int side, hh;
      for (side = 0; side < 2; side++)
        for (hh = 0; hh < c->n_heads; hh++) {
          const size_t k = ((size_t)l * 2 + side) * c->n_heads + hh;
          const float *t = ftab + side * per + (size_t)hh * drows * dh;
          if (bf) {
            uint16_t *h16 = (uint16_t *)(void *)qrows;
            relattn_f32_to_bf16_n(h16, t, drows * dh);
            hdr16[k] = *relattn_bf16w_place(blocks + k * qb, h16, (int)drows,
                                            dh);
            continue;
          }
          relattn_q8_quantize(qrows, qscale, t, (int)drows, dh);
          hdr[k] = *relattn_q8w_place(blocks + k * qb, qrows, qscale,
                                      (int)drows, dh);
        }
      m->terms[l].rel.rk = m->terms[l].rel.rq = NULL;
      if (bf) {
        m->terms[l].rel.brk = hdr16 + (size_t)l * 2 * c->n_heads;
        m->terms[l].rel.brq = hdr16 + ((size_t)l * 2 + 1) * c->n_heads;
      } else {
        m->terms[l].rel.qrk = hdr + (size_t)l * 2 * c->n_heads;
        m->terms[l].rel.qrq = hdr + ((size_t)l * 2 + 1) * c->n_heads;
      }
    }
  }
  return RELATTN_OK;
}

void relattn_model_free(relattn_model *m) {
  int l;
  if (m->terms)
    for (l = 0; l < m->cfg.n_layers; l++) relattn_scheme_free(&m->terms[l]);
  relattn_free(m->terms);
  m->terms = NULL;
  relattn_free(m->rel_proj);
  m->rel_proj = NULL;
  relattn_free(m->mem);
  relattn_tokenizer_free(m->tok);
  m->mem = NULL;
  m->layers = NULL;
  m->dec_layers = NULL;
  m->tok = NULL;
}
