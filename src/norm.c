/*
** norm.c: LayerNorm and RMSNorm over rows (relattn.h, relattn_norm), each
** row on its own and summed in one fixed order (src/forward.c,
** DETERMINISM). The forward pass uses it, and so does src/model.c when it
** prepares DeBERTa's normed relative embeddings.
*/
#include "relattn.h"

#include <math.h>
#include <stddef.h>

/* Sums over a row in one fixed order: eight running sums (column c goes to
** sum c mod 8), added as ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)),
** then the columns past the last multiple of 8 in order. Eight chains run
** side by side where one would wait on each add; the compiler may hold them
** in a vector, which does not change the order. */
static float row_sum(const float *x, int d) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, t;
  int c, j;
  for (c = 0; c + 8 <= d; c += 8)
    for (j = 0; j < 8; j++) s[j] += x[c + j];
  t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; c < d; c++) t += x[c];
  return t;
}

/* The same order for the sum of (x - mean)^2 (mean 0: of x^2). */
static float row_sum_sq(const float *x, int d, float mean) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, t, u;
  int c, j;
  for (c = 0; c + 8 <= d; c += 8)
    for (j = 0; j < 8; j++) {
      u = x[c + j] - mean;
      s[j] += u * u;
    }
  t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; c < d; c++) {
    u = x[c] - mean;
    t += u * u;
  }
  return t;
}

/* out = LayerNorm(x) * w + b over rows of d (biased variance, as PyTorch),
** or with kind RELATTN_RMSNORM out = x / sqrt(mean(x^2) + eps) * w (T5's
** T5LayerNorm: no mean taken, no bias). b may be NULL. out may be x. */
static void norm_rows(float *out /* (rows, d) */, const float *x, int rows,
                      int d, const float *w, const float *b, float eps,
                      int kind) {
  int r, c;
  for (r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * d;
    float *o = out + (size_t)r * d;
    float mean, var, inv;
    if (kind == RELATTN_RMSNORM) {
      var = row_sum_sq(xr, d, 0.0f);
      inv = 1.0f / sqrtf(var / (float)d + eps);
      for (c = 0; c < d; c++) o[c] = xr[c] * inv * w[c];
      continue;
    }
    mean = row_sum(xr, d) / (float)d;
    var = row_sum_sq(xr, d, mean);
    inv = 1.0f / sqrtf(var / (float)d + eps);
    if (b)
      for (c = 0; c < d; c++) o[c] = (xr[c] - mean) * inv * w[c] + b[c];
    else
      for (c = 0; c < d; c++) o[c] = (xr[c] - mean) * inv * w[c];
  }
}

void relattn_layer_norm(float *out, const float *x, int rows, int d,
                        const float *w, const float *b, float eps) {
  norm_rows(out, x, rows, d, w, b, eps, RELATTN_LAYERNORM);
}

void relattn_norm(float *out, const float *x, int rows, int d, const float *w,
                  const float *b, float eps, int kind) {
  norm_rows(out, x, rows, d, w, b, eps, kind);
}
