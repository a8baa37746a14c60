/*
** sentence.c: sentence-transformers' modules after the encoder, on one
** sequence's final hidden rows: Pooling, then each Dense, then Normalize
** (config "sentence", docs/reference.md). relattn_embed and relattn_scan's
** embedding give this vector for a model that has them.
**
** The computation follows sentence-transformers' own modules
** (sentence_transformers/models/Pooling.py, Dense.py, Normalize.py) for one
** unpadded sequence, whose attention mask is 1 on every row:
**   cls           row 0
**   max           the largest value of each column (padding, which would be
**                 -1e9 there, never occurs)
**   mean          sum / n                 (the sum over the mask)
**   mean_sqrt_len sum / sqrt(n)
**   weightedmean  sum_i (i+1) x_i / sum_i (i+1)   (positions from 1, SGPT)
**   lasttoken     row n-1 (the last row of the mask: [SEP] or </s>)
** side by side in that order (torch.cat of the modes it has), then
** y = act(W v + b) per Dense, then v / max(||v||_2, 1e-12) (F.normalize).
** Everything after the encoder runs in double, in one fixed order, so the
** vector does not depend on the thread count or the BLAS kernels.
*/
#include "relattn.h"

#include <math.h>
#include <string.h>

static int popcount6(int bits) {
  int k, n = 0;
  for (k = 0; k < 6; k++) n += (bits >> k) & 1;
  return n;
}

int relattn_sentence_dim(const relattn_config *c) {
  if (c->st_n_dense > 0) return c->st_out[c->st_n_dense - 1];
  return popcount6(c->st_pooling) * c->d_model;
}

const char *relattn_sentence_pooling_name(int bit) {
  switch (bit) {
    case RELATTN_SP_CLS: return "cls";
    case RELATTN_SP_MAX: return "max";
    case RELATTN_SP_MEAN: return "mean";
    case RELATTN_SP_MEAN_SQRT: return "mean_sqrt_len";
    case RELATTN_SP_WEIGHTED: return "weightedmean";
    case RELATTN_SP_LAST: return "lasttoken";
    default: return "?";
  }
}

const char *relattn_dense_activation_name(int act) {
  static const char *const names[] = {"identity", "tanh", "relu", "gelu",
                                      "sigmoid"};
  return act >= 0 && act <= RELATTN_DENSE_SIGMOID ? names[act] : "?";
}

static double dense_act(int act, double v) {
  switch (act) {
    case RELATTN_DENSE_TANH: return tanh(v);
    case RELATTN_DENSE_RELU: return v > 0 ? v : 0;
    case RELATTN_DENSE_GELU: return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    case RELATTN_DENSE_SIGMOID: return 1.0 / (1.0 + exp(-v));
    default: return v;
  }
}

/* The pooled vector (popcount(modes) * d) of x (n, d) into v. */
static void pool(const relattn_config *c, const float *x, int n, double *v) {
  const int d = c->d_model;
  int bit, i, j;
  double *o = v;
  for (bit = 1; bit <= RELATTN_SP_LAST; bit <<= 1) {
    if (!(c->st_pooling & bit)) continue;
    for (j = 0; j < d; j++) {
      double acc = 0, wsum = 0;
      switch (bit) {
        case RELATTN_SP_CLS: acc = x[j]; break;
        case RELATTN_SP_LAST: acc = x[(size_t)(n - 1) * d + j]; break;
        case RELATTN_SP_MAX:
          acc = x[j];
          for (i = 1; i < n; i++)
            if (x[(size_t)i * d + j] > acc) acc = x[(size_t)i * d + j];
          break;
        case RELATTN_SP_WEIGHTED:
          for (i = 0; i < n; i++) {
            acc += (double)(i + 1) * x[(size_t)i * d + j];
            wsum += (double)(i + 1);
          }
          acc /= wsum;
          break;
        default: /* mean, mean_sqrt_len: the sum over every row */
          for (i = 0; i < n; i++) acc += x[(size_t)i * d + j];
          acc = bit == RELATTN_SP_MEAN ? acc / n : acc / sqrt((double)n);
          break;
      }
      o[j] = acc;
    }
    o += d;
  }
}

int relattn_sentence_embed(const relattn_model *m, const float *x, int n,
                           float *out, char *err, size_t errlen) {
  const relattn_config *c = &m->cfg;
  size_t width = (size_t)popcount6(c->st_pooling) * (size_t)c->d_model;
  double *a, *b, norm = 0;
  int k, i, j, w;
  for (k = 0; k < c->st_n_dense; k++)
    if ((size_t)c->st_out[k] > width) width = (size_t)c->st_out[k];
  a = relattn_alloc(2 * width * sizeof(double));
  if (!a)
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "relattn_forward: out of memory");
  b = a + width;
  pool(c, x, n, a);
  w = (int)(popcount6(c->st_pooling) * c->d_model);
  for (k = 0; k < c->st_n_dense; k++) {
    const float *W = m->st_w[k], *bias = m->st_b[k];
    double *t;
    for (j = 0; j < c->st_out[k]; j++) {
      const float *row = W + (size_t)j * (size_t)c->st_in[k];
      double acc = bias ? bias[j] : 0;
      for (i = 0; i < w; i++) acc += (double)row[i] * a[i];
      b[j] = dense_act(c->st_act[k], acc);
    }
    w = c->st_out[k];
    t = a, a = b, b = t;
  }
  if (c->st_normalize) {
    for (j = 0; j < w; j++) norm += a[j] * a[j];
    norm = sqrt(norm);
    if (norm < 1e-12) norm = 1e-12;
  } else {
    norm = 1;
  }
  for (j = 0; j < w; j++) out[j] = (float)(a[j] / norm);
  relattn_free(a < b ? a : b); /* the block's start */
  return RELATTN_OK;
}
