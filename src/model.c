/*
** model.c: which tensors a config needs (docs/reference.md, Tensor names and shapes) and the float32
** model built from them.
**
** The tensors have a fixed order: tok_emb; per layer ln1.weight, ln1.bias,
** attn.wq .wk .wv .wo, attn.bq .bk .bv .bo, attn.rel_k, [attn.rel_v],
** ln2.weight, ln2.bias, ffn.w1 .b1 .w2 .b2; ln_f.weight, ln_f.bias (pre-norm
** only); lm_head (untied only). Import stores them in this order and export
** writes them in it. Every array lives in one 64-byte aligned block (m->mem):
** the layer table first, then each tensor at a 64-byte boundary.
*/
#include "relattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-layer tensors, in order; rel_v (index 11) only with position.values. */
static const char *const layer_names[] = {
    "ln1.weight", "ln1.bias", "attn.wq",    "attn.wk",  "attn.wv",
    "attn.wo",    "attn.bq",  "attn.bk",    "attn.bv",  "attn.bo",
    "attn.rel_k", "attn.rel_v", "ln2.weight", "ln2.bias", "ffn.w1",
    "ffn.b1",     "ffn.w2",   "ffn.b2"};
#define N_LAYER_NAMES 18
#define REL_V 11

/* Hard limits that keep every product well inside int64 and size_t, and the
** number of tensors (18 per layer) small enough to list. */
#define MAX_DIM (1 << 24)
#define MAX_LAYERS (1 << 16)

int relattn_config_check(const relattn_config *c, const char *what, char *err,
                         size_t errlen) {
  const struct { const char *key; int v; } sizes[] = {
      {"vocab_size", c->vocab_size}, {"d_model", c->d_model},
      {"n_layers", c->n_layers},     {"n_heads", c->n_heads},
      {"d_ff", c->d_ff}};
  const struct { const char *key; int v; } ids[] = {
      {"tokenizer.bos", c->bos}, {"tokenizer.eos", c->eos},
      {"tokenizer.pad", c->pad}};
  size_t i;
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
  if (c->d_model % c->n_heads != 0)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'd_model' (%d) is not divisible by 'n_heads' "
                          "(%d)",
                          what, c->d_model, c->n_heads);
  if (c->clip < 0 || c->clip > MAX_DIM)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'position.clip' must be between 0 and %d, not "
                          "%d",
                          what, MAX_DIM, c->clip);
  if (!(c->norm_eps >= 0.0f) || c->norm_eps > 1.0f)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: 'norm_eps' must be between 0 and 1", what);
  if ((c->arch != RELATTN_DECODER && c->arch != RELATTN_ENCODER) ||
      (c->norm != RELATTN_NORM_PRE && c->norm != RELATTN_NORM_POST) ||
      (c->activation != RELATTN_GELU && c->activation != RELATTN_RELU))
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: unknown arch, norm or activation", what);
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

static int per_layer(const relattn_config *c) {
  return N_LAYER_NAMES - (c->rel_values ? 0 : 1);
}

int relattn_model_n_tensors(const relattn_config *c) {
  return 1 + c->n_layers * per_layer(c) +
         (c->norm == RELATTN_NORM_PRE ? 2 : 0) + (c->tie_embeddings ? 0 : 1);
}

/* Bytes of the layer table at the start of mem, 64-byte aligned. */
static size_t table_bytes(const relattn_config *c) {
  return ((size_t)c->n_layers * sizeof(relattn_layer) + 63) & ~(size_t)63;
}

/* Name and shape of spec i (no offset). */
static void spec_shape(const relattn_config *c, int i, relattn_tensor_spec *s) {
  int64_t d = c->d_model, f = c->d_ff, v = c->vocab_size;
  int64_t rows = 2 * (int64_t)c->clip + 1, dh = d / c->n_heads;
  int pl = per_layer(c), n_layer_tensors = c->n_layers * pl, k;
  s->ndim = 1;
  s->shape[0] = d;
  s->shape[1] = s->shape[2] = 0;
  if (i == 0) {
    snprintf(s->name, sizeof s->name, "tok_emb");
    s->ndim = 2, s->shape[0] = v, s->shape[1] = d;
    return;
  }
  i -= 1;
  if (i < n_layer_tensors) {
    int layer = i / pl;
    k = i % pl;
    if (!c->rel_values && k >= REL_V) k++;
    snprintf(s->name, sizeof s->name, "layers.%d.%s", layer, layer_names[k]);
    switch (k) {
      case 2: case 3: case 4: case 5:
        s->ndim = 2, s->shape[1] = d;
        break;
      case 10: case 11:
        if (c->per_head)
          s->ndim = 3, s->shape[0] = c->n_heads, s->shape[1] = rows,
          s->shape[2] = dh;
        else
          s->ndim = 2, s->shape[0] = rows, s->shape[1] = dh;
        break;
      case 14: s->ndim = 2, s->shape[0] = f, s->shape[1] = d; break;
      case 15: s->shape[0] = f; break;
      case 16: s->ndim = 2, s->shape[0] = d, s->shape[1] = f; break;
      default: break; /* (d_model) */
    }
    return;
  }
  i -= n_layer_tensors;
  if (c->norm == RELATTN_NORM_PRE) {
    if (i < 2) {
      snprintf(s->name, sizeof s->name, i == 0 ? "ln_f.weight" : "ln_f.bias");
      return;
    }
    i -= 2;
  }
  snprintf(s->name, sizeof s->name, "lm_head");
  s->ndim = 2, s->shape[0] = v, s->shape[1] = d;
}

static size_t spec_numel(const relattn_tensor_spec *s) {
  size_t n = 1;
  int d;
  for (d = 0; d < s->ndim; d++) n *= (size_t)s->shape[d];
  return n;
}

static size_t aligned_floats(size_t numel) { return (numel + 15) & ~(size_t)15; }

/* numel of spec s, 0 (and *ok = 0) on overflow */
static size_t checked_numel(const relattn_tensor_spec *s, int *ok) {
  size_t n = 1;
  int d;
  for (d = 0; d < s->ndim; d++)
    if (!relattn_mul_ok(n, (size_t)s->shape[d], &n)) *ok = 0;
  if (n > SIZE_MAX - 16) *ok = 0;
  return *ok ? aligned_floats(n) : 0;
}

int relattn_model_bytes(const relattn_config *c, size_t *bytes,
                        const char *what, char *err, size_t errlen) {
  /* closed form: every layer has the same shapes, so a config with many
  ** layers costs no more to size than one with a single layer */
  size_t total = table_bytes(c) / sizeof(float), layer = 0, b;
  int i, n = relattn_model_n_tensors(c), pl = per_layer(c), ok = 1;
  relattn_tensor_spec s;
  for (i = 0; i < n; i = (i == 0 ? 1 + c->n_layers * pl : i + 1)) {
    spec_shape(c, i, &s);
    if (!relattn_add_ok(total, checked_numel(&s, &ok), &total)) ok = 0;
  }
  for (i = 1; i <= pl; i++) {
    spec_shape(c, i, &s);
    if (!relattn_add_ok(layer, checked_numel(&s, &ok), &layer)) ok = 0;
  }
  if (!ok || !relattn_mul_ok(layer, (size_t)c->n_layers, &layer) ||
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
  int n = relattn_model_n_tensors(c), pl = per_layer(c), i = -1, k;
  if (strcmp(name, "tok_emb") == 0) i = 0;
  else if (strncmp(name, "layers.", 7) == 0) {
    const char *p = name + 7;
    long layer = 0;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
      return -1;
    while (*p >= '0' && *p <= '9' && layer <= c->n_layers)
      layer = layer * 10 + (*p++ - '0');
    if (*p++ != '.' || layer >= c->n_layers) return -1;
    for (k = 0; k < N_LAYER_NAMES; k++)
      if (strcmp(p, layer_names[k]) == 0) break;
    if (k == N_LAYER_NAMES || (k == REL_V && !c->rel_values)) return -1;
    if (!c->rel_values && k > REL_V) k--;
    i = 1 + (int)layer * pl + k;
  } else if (c->norm == RELATTN_NORM_PRE && strcmp(name, "ln_f.weight") == 0)
    i = 1 + c->n_layers * pl;
  else if (c->norm == RELATTN_NORM_PRE && strcmp(name, "ln_f.bias") == 0)
    i = 2 + c->n_layers * pl;
  else if (!c->tie_embeddings && strcmp(name, "lm_head") == 0)
    i = n - 1;
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
  const relattn_config *c = &m->cfg;
  int pl = per_layer(c), k;
  relattn_layer *l;
  if (i == 0) return &m->tok_emb;
  i -= 1;
  if (i < c->n_layers * pl) {
    l = &m->layers[i / pl];
    k = i % pl;
    if (!c->rel_values && k >= REL_V) k++;
    switch (k) {
      case 0: return &l->ln1_w;
      case 1: return &l->ln1_b;
      case 2: return &l->wq;
      case 3: return &l->wk;
      case 4: return &l->wv;
      case 5: return &l->wo;
      case 6: return &l->bq;
      case 7: return &l->bk;
      case 8: return &l->bv;
      case 9: return &l->bo;
      case 10: return &l->rel_k;
      case 11: return &l->rel_v;
      case 12: return &l->ln2_w;
      case 13: return &l->ln2_b;
      case 14: return &l->w1;
      case 15: return &l->b1;
      case 16: return &l->w2;
      default: return &l->b2;
    }
  }
  i -= c->n_layers * pl;
  if (c->norm == RELATTN_NORM_PRE) {
    if (i == 0) return &m->lnf_w;
    if (i == 1) return &m->lnf_b;
  }
  return &m->lm_head;
}

int relattn_model_init(relattn_model *m, const relattn_config *c,
                       const char *what, char *err, size_t errlen) {
  size_t bytes, off;
  int i, n, rc;
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
  n = relattn_model_n_tensors(c);
  off = table_bytes(c) / sizeof(float);
  for (i = 0; i < n; i++) {
    spec_shape(c, i, &s);
    *slot_ptr(m, i) = (float *)m->mem + off;
    off += aligned_floats(spec_numel(&s));
  }
  if (c->tie_embeddings) m->lm_head = m->tok_emb;
  return RELATTN_OK;
}

float *relattn_model_slot(relattn_model *m, int i) {
  /* the arrays are ours (in m->mem); const only for the model's readers */
  return (float *)*slot_ptr(m, i);
}

void relattn_model_free(relattn_model *m) {
  relattn_free(m->mem);
  relattn_tokenizer_free(m->tok);
  m->mem = NULL;
  m->layers = NULL;
  m->tok = NULL;
}
