/* test_model.c: src/model.c (the tensors a config needs, the model's
** arrays) and src/tokenizer.c. */
#include <string.h>

#include "relattn.h"
#include "unit.h"

static relattn_config base(void) {
  relattn_config c;
  memset(&c, 0, sizeof c);
  c.arch = RELATTN_DECODER, c.vocab_size = 259, c.d_model = 12, c.n_layers = 3;
  c.n_heads = 3, c.d_ff = 20, c.norm = RELATTN_NORM_PRE, c.norm_eps = 1e-5f;
  c.tie_embeddings = 1, c.clip = 2, c.rel_values = 1, c.per_head = 0;
  c.bos = 256, c.eos = 257, c.pad = -1;
  c.append = c.sep = c.mask = c.unk = -1;
  relattn_position_defaults(&c.pos, RELATTN_POS_SHAW);
  return c;
}

int main(void) {
  char err[256];
  int variant;
  unit_seed();
  for (variant = 0; variant < 8; variant++) {
    relattn_config c = base();
    relattn_model m;
    relattn_tensor_spec s;
    int i, n, expect;
    size_t total = 0, bytes;
    c.rel_values = variant & 1;
    c.per_head = (variant >> 1) & 1;
    c.tie_embeddings = (variant >> 2) & 1;
    c.norm = variant == 3 ? RELATTN_NORM_POST : RELATTN_NORM_PRE;
    CHECK(relattn_config_check(&c, "cfg", err, sizeof err) == RELATTN_OK, "%s",
          err);
    n = relattn_model_n_tensors(&c);
    expect = 1 + 3 * (17 + c.rel_values) + (c.norm == RELATTN_NORM_PRE) * 2 +
             !c.tie_embeddings;
    CHECK(n == expect, "variant %d: %d tensors, want %d", variant, n, expect);
    CHECK(relattn_model_init(&m, &c, "m", err, sizeof err) == RELATTN_OK, "%s",
          err);
    CHECK(relattn_model_bytes(&c, &bytes, "m", err, sizeof err) == RELATTN_OK,
          "bytes");
    for (i = 0; i < n; i++) {
      float *p;
      size_t k;
      relattn_model_spec(&c, i, &s);
      CHECK(relattn_model_index(&c, s.name) == i, "index of %s", s.name);
      p = relattn_model_slot(&m, i);
      CHECK(((uintptr_t)p & 63) == 0, "%s aligned", s.name);
      for (k = 0; k < s.numel; k++) p[k] = (float)i; /* asan: inside mem */
      total += s.numel;
      if (strstr(s.name, "rel_")) {
        CHECK(s.ndim == (c.per_head ? 3 : 2) && s.shape[s.ndim - 2] == 5 &&
                  s.shape[s.ndim - 1] == 4, "%s shape", s.name);
      }
    }
    CHECK(total * 4 <= bytes, "bytes bound");
    /* every pointer of the model points at its own tensor */
    CHECK(m.tok_emb[0] == 0.0f, "tok_emb");
    CHECK(m.layers[0].ln1_w[0] == 1.0f && m.layers[0].wq[0] == 3.0f, "layer 0");
    CHECK(m.layers[2].b2[0] == (float)(1 + 3 * (17 + c.rel_values) - 1),
          "layer 2 b2");
    CHECK(c.rel_values ? m.layers[1].rel_v != NULL : m.layers[1].rel_v == NULL,
          "rel_v");
    CHECK(c.norm == RELATTN_NORM_PRE ? m.lnf_w != NULL : m.lnf_w == NULL, "ln_f");
    CHECK(c.tie_embeddings ? m.lm_head == m.tok_emb
                           : m.lm_head[0] == (float)(n - 1), "lm_head");
    relattn_model_free(&m);
  }
  {
    relattn_config c = base();
    const char *bad[] = {"layers.3.ln1.weight", "layers.01.ln1.weight",
                         "layers.-1.ln1.weight", "layers.0.ln1", "lm_head",
                         "layers.0.attn.rel_v.x", "layers..ln1.weight",
                         "layers.99999999999999999999.ln1.bias", "tok_emb ", ""};
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
      CHECK(relattn_model_index(&c, bad[i]) == -1, "'%s' rejected", bad[i]);
    c.d_model = 13;
    CHECK(relattn_config_check(&c, "cfg", err, sizeof err) == RELATTN_ERR_ARG &&
              !strcmp(err, "cfg: 'd_model' (13) is not divisible by 'n_heads' (3)"),
          "%s", err);
    /* d_head: the attention's width apart from d_model (13 = 3 x 5 is
    ** not needed then); q, k, v (15, 13), o (13, 15), rel_k (5, 5) */
    {
      static const struct { const char *name; int ndim; int64_t a, b; } want[] = {
          {"layers.0.attn.wq", 2, 15, 13}, {"layers.2.attn.wv", 2, 15, 13},
          {"layers.1.attn.wo", 2, 13, 15}, {"layers.0.attn.bk", 1, 15, 0},
          {"layers.0.attn.bo", 1, 13, 0},  {"layers.1.attn.rel_k", 2, 5, 5},
          {"layers.0.ffn.w1", 2, 20, 13}};
      relattn_tensor_spec s;
      size_t k;
      c.d_head = 5;
      CHECK(relattn_config_check(&c, "cfg", err, sizeof err) == RELATTN_OK,
            "%s", err);
      CHECK(relattn_config_d_head(&c) == 5 && relattn_config_inner(&c) == 15,
            "d_head");
      for (k = 0; k < sizeof want / sizeof want[0]; k++) {
        int i = relattn_model_index(&c, want[k].name);
        CHECK(i >= 0, "%s", want[k].name);
        relattn_model_spec(&c, i, &s);
        CHECK(s.ndim == want[k].ndim && s.shape[0] == want[k].a &&
                  (s.ndim == 1 || s.shape[1] == want[k].b),
              "%s shape", want[k].name);
      }
      c.d_head = -1;
      CHECK(relattn_config_check(&c, "cfg", err, sizeof err) == RELATTN_ERR_ARG &&
                !strcmp(err, "cfg: 'd_head' must be between 1 and 16777216, "
                             "not -1"),
            "%s", err);
      c.d_head = 1 << 23;
      CHECK(relattn_config_check(&c, "cfg", err, sizeof err) == RELATTN_ERR_ARG &&
                !strcmp(err, "cfg: 'n_heads' * 'd_head' (3 * 8388608) must "
                             "be at most 16777216"),
            "%s", err);
      c = base();
      CHECK(relattn_config_d_head(&c) == 4 && relattn_config_inner(&c) == 12,
            "no d_head");
    }
    c = base();
    c.d_model = 1 << 24, c.n_heads = 1, c.vocab_size = 1 << 24, c.d_ff = 1 << 24;
    c.n_layers = 1 << 24;
    /* accepted by the checks, but far too big: bytes must not overflow */
    {
      size_t bytes;
      int rc = relattn_model_bytes(&c, &bytes, "m", err, sizeof err);
      CHECK(rc == RELATTN_ERR_TOOBIG || bytes > ((size_t)1 << 60), "huge: %d", rc);
    }
  }
  {
    /* the heads' tensors: lm_head only for the LM and masked-LM heads */
    static const struct { int head, pooler, labels, untied, extra; } h[] = {
        {RELATTN_HEAD_MLM, 0, 0, 1, 6}, {RELATTN_HEAD_MLM, 1, 0, 0, 7},
        {RELATTN_HEAD_CLASSIFIER, 1, 3, 1, 4},
        {RELATTN_HEAD_CLASSIFIER, 0, 1, 0, 2}, {RELATTN_HEAD_NONE, 1, 0, 1, 2},
        {RELATTN_HEAD_NONE, 0, 0, 1, 0}};
    size_t k;
    for (k = 0; k < sizeof h / sizeof h[0]; k++) {
      relattn_config c = base();
      relattn_tensor_spec s;
      int i;
      c.arch = RELATTN_ENCODER, c.head = h[k].head, c.pooler = h[k].pooler;
      c.n_labels = h[k].labels, c.tie_embeddings = !h[k].untied;
      CHECK(relattn_config_check(&c, "cfg", err, sizeof err) == RELATTN_OK,
            "%s", err);
      CHECK(relattn_model_n_tensors(&c) == 1 + 3 * 18 + 2 + h[k].extra,
            "head %zu: %d tensors", k, relattn_model_n_tensors(&c));
      i = relattn_model_index(&c, "classifier.weight");
      CHECK((i >= 0) == (h[k].head == RELATTN_HEAD_CLASSIFIER), "classifier");
      if (i >= 0) {
        relattn_model_spec(&c, i, &s);
        CHECK(s.ndim == 2 && s.shape[0] == h[k].labels && s.shape[1] == 12,
              "classifier shape");
      }
      i = relattn_model_index(&c, "mlm.bias");
      if (i >= 0) relattn_model_spec(&c, i, &s);
      CHECK((i >= 0) == (h[k].head == RELATTN_HEAD_MLM) &&
                (i < 0 || (s.ndim == 1 && s.shape[0] == 259)),
            "mlm.bias");
      CHECK((relattn_model_index(&c, "lm_head") >= 0) ==
                (h[k].head == RELATTN_HEAD_MLM && h[k].untied),
            "lm_head");
    }
    {
      relattn_config c = base();
      c.head = RELATTN_HEAD_CLASSIFIER, c.arch = RELATTN_ENCODER;
      CHECK(relattn_config_check(&c, "cfg", err, sizeof err) == RELATTN_ERR_ARG &&
                !strcmp(err, "cfg: head 'classifier' needs 'labels' (an array "
                             "of names, one per class)"),
            "%s", err);
      c.head = RELATTN_HEAD_NONE, c.n_labels = 2;
      CHECK(relattn_config_check(&c, "cfg", err, sizeof err) == RELATTN_ERR_ARG &&
                !strcmp(err, "cfg: 'labels' is a key of heads 'classifier' "
                             "and 'token_classifier', not 'none'"),
            "%s", err);
    }
  }
  {
    /* tokenizer */
    relattn_config c = base();
    int32_t ids[6];
    uint8_t text[8];
    size_t len;
    relattn_tokenize_bytes((const uint8_t *)"h\xc3\xa9", 3, ids);
    CHECK(ids[0] == 'h' && ids[1] == 0xc3 && ids[2] == 0xa9, "bytes");
    ids[3] = 256, ids[4] = 'x', ids[5] = 257;
    CHECK(relattn_detokenize_bytes(&c, ids, 6, text, &len, "d", err, sizeof err) ==
              RELATTN_OK && len == 4 && !memcmp(text, "h\xc3\xa9x", 4), "detok");
    ids[4] = 258; /* pad is absent in this config */
    CHECK(relattn_detokenize_bytes(&c, ids, 6, text, &len, "d", err, sizeof err) ==
              RELATTN_ERR_ARG, "258 is not special here");
  }
  UNIT_DONE();
}
