/*
** test_sentence.c: src/sentence.c, sentence-transformers' Pooling, Dense
** and Normalize on final rows, against a long double reference written
** here from sentence-transformers' Pooling.py, Dense.py and Normalize.py
** (one unpadded sequence), on random rows and weights, every mode alone
** and all six together, one to three Dense modules, with and without
** Normalize. Tolerance: 1e-6 relative to the vector's largest element.
*/
#include "relattn.h"
#include "unit.h"

#include <string.h>

#define MAXW 256

/* The reference: the modes in Pooling's order, then the Dense modules,
** then F.normalize(p=2, eps=1e-12). */
static int reference(const relattn_config *c, const float *x, int n,
                     float *const *W, float *const *b, long double *out) {
  long double v[MAXW], t[MAXW];
  int d = c->d_model, w = 0, bit, i, j, k;
  for (bit = 1; bit <= RELATTN_SP_LAST; bit <<= 1) {
    if (!(c->st_pooling & bit)) continue;
    for (j = 0; j < d; j++) {
      long double s = 0, ws = 0, m = -1e9L;
      for (i = 0; i < n; i++) {
        long double e = x[i * d + j];
        s += e;
        ws += (i + 1) * e;
        if (e > m) m = e;
      }
      switch (bit) {
        case RELATTN_SP_CLS: v[w + j] = x[j]; break;
        case RELATTN_SP_MAX: v[w + j] = m; break;
        case RELATTN_SP_MEAN: v[w + j] = s / n; break;
        case RELATTN_SP_MEAN_SQRT: v[w + j] = s / sqrtl((long double)n); break;
        case RELATTN_SP_WEIGHTED: v[w + j] = ws / (n * (n + 1) / 2.0L); break;
        default: v[w + j] = x[(n - 1) * d + j]; break;
      }
    }
    w += d;
  }
  for (k = 0; k < c->st_n_dense; k++) {
    for (j = 0; j < c->st_out[k]; j++) {
      long double a = b[k] ? b[k][j] : 0;
      for (i = 0; i < w; i++) a += (long double)W[k][j * w + i] * v[i];
      switch (c->st_act[k]) {
        case RELATTN_DENSE_TANH: a = tanhl(a); break;
        case RELATTN_DENSE_RELU: a = a > 0 ? a : 0; break;
        case RELATTN_DENSE_GELU: a = a * 0.5L * (1 + erfl(a / sqrtl(2.0L))); break;
        case RELATTN_DENSE_SIGMOID: a = 1 / (1 + expl(-a)); break;
        default: break;
      }
      t[j] = a;
    }
    w = c->st_out[k];
    memcpy(v, t, sizeof(long double) * (size_t)w);
  }
  if (c->st_normalize) {
    long double nn = 0;
    for (j = 0; j < w; j++) nn += v[j] * v[j];
    nn = sqrtl(nn);
    if (nn < 1e-12L) nn = 1e-12L;
    for (j = 0; j < w; j++) v[j] /= nn;
  }
  memcpy(out, v, sizeof(long double) * (size_t)w);
  return w;
}

static void fill(float *p, int n, double scale) {
  int i;
  for (i = 0; i < n; i++) p[i] = (float)(scale * unit_uniform());
}

static void one(int pooling, int n_dense, int normalize, int n, int d) {
  relattn_model m;
  float x[40 * 16], *W[3] = {0}, *b[3] = {0}, got[MAXW];
  long double want[MAXW];
  char err[128];
  int k, w = 0, j, dim, in;
  double worst = 0, big = 0;
  memset(&m, 0, sizeof m);
  m.cfg.d_model = d;
  m.cfg.st = 1;
  m.cfg.st_pooling = pooling;
  m.cfg.st_normalize = normalize;
  m.cfg.st_n_dense = n_dense;
  for (k = 0; k < 6; k++) w += (pooling >> k) & 1;
  in = w * d;
  for (k = 0; k < n_dense; k++) {
    int out = 5 + (int)(unit_next() % 20);
    m.cfg.st_in[k] = in, m.cfg.st_out[k] = out;
    m.cfg.st_bias[k] = k != 1;
    m.cfg.st_act[k] = (int)(unit_next() % 5);
    W[k] = malloc(sizeof(float) * (size_t)(out * in));
    fill(W[k], out * in, 2.0 / sqrt((double)in));
    if (m.cfg.st_bias[k]) {
      b[k] = malloc(sizeof(float) * (size_t)out);
      fill(b[k], out, 0.1);
    }
    m.st_w[k] = W[k], m.st_b[k] = b[k];
    in = out;
  }
  fill(x, n * d, 1.5);
  dim = relattn_sentence_dim(&m.cfg);
  CHECK(dim == in, "dim %d, want %d", dim, in);
  CHECK(relattn_sentence_embed(&m, x, n, got, err, sizeof err) == RELATTN_OK,
        "%s", err);
  CHECK(reference(&m.cfg, x, n, W, b, want) == dim, "reference width");
  for (j = 0; j < dim; j++) {
    double e = fabs((double)got[j] - (double)want[j]);
    if (e > worst) worst = e;
    if (fabs((double)want[j]) > big) big = fabs((double)want[j]);
  }
  CHECK(worst / (big > 1 ? big : 1) < 1e-6,
        "pooling %d, %d dense, normalize %d, n %d: error %.3g", pooling,
        n_dense, normalize, n, worst);
  for (k = 0; k < 3; k++) free(W[k]), free(b[k]);
}

int main(void) {
  int bit, rep;
  unit_seed();
  for (rep = 0; rep < 4; rep++) {
    int n = 1 + (int)(unit_next() % 40), d = 1 + (int)(unit_next() % 16);
    for (bit = 1; bit <= RELATTN_SP_LAST; bit <<= 1) one(bit, 0, 0, n, d);
    one(RELATTN_SP_ALL, 0, 0, n, d);
    one(RELATTN_SP_ALL, 0, 1, n, d);
    one(RELATTN_SP_MEAN | RELATTN_SP_CLS, 1, 0, n, d);
    one(RELATTN_SP_MAX | RELATTN_SP_LAST, 2, 1, n, d);
    one(RELATTN_SP_WEIGHTED, 3, 1, n, d);
    one(RELATTN_SP_MEAN_SQRT, 1, 1, 1, d); /* one row */
  }
  {
    /* Normalize's eps: a vector of norm under 1e-12 is divided by 1e-12 */
    relattn_model m;
    float x[4] = {3e-14f, -4e-14f, 0, 0}, got[2];
    char err[128];
    memset(&m, 0, sizeof m);
    m.cfg.d_model = 2, m.cfg.st = 1, m.cfg.st_pooling = RELATTN_SP_CLS;
    m.cfg.st_normalize = 1;
    CHECK(relattn_sentence_embed(&m, x, 2, got, err, sizeof err) == RELATTN_OK,
          "%s", err);
    CHECK(fabsf(got[0] - 0.03f) < 1e-6f && fabsf(got[1] + 0.04f) < 1e-6f,
          "eps: %g %g", got[0], got[1]);
  }
  UNIT_DONE();
}
