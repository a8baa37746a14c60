/*
** vecmath.h: the vectorized row operations of the attention kernel, one
** table per instruction set, chosen once at run time (src/vecmath.c).
** Internal to src/.
*/
#ifndef RELATTN_VECMATH_H
#define RELATTN_VECMATH_H

typedef struct relattn_vec {
  const char *name;                          /* "avx512", "avx2", "scalar" */
  float (*max)(const float *x, int n);       /* n >= 1 */
  /* x[j] = exp(x[j] - sub) for j < n; returns the sum of the new x. */
  float (*exp_sum)(float *x, int n, float sub);
  void (*scale)(float *x, int n, float f);   /* x *= f */
  void (*add)(float *x, const float *y, int n); /* x += y */
  /* The same over x[j] + r*j (a linear bias along the row, ALiBi's on one
  ** side of the diagonal): max of x[j] + r*j; x[j] = exp(x[j] + r*j - sub). */
  float (*max_ramp)(const float *x, int n, float r);
  float (*exp_sum_ramp)(float *x, int n, float sub, float r);
  /* x[j] += t[base + idx[j]*stride + j*step], j < n; with idx NULL,
  ** x[j] += t[base + j*(stride + step)]: a bucket map's band (the table row
  ** of each column), in int32 index arithmetic. */
  void (*gather_add)(float *x, const float *t, const int *idx, int n, int base,
                     int stride, int step);
} relattn_vec;

const relattn_vec *relattn_vec_ops(void);
/* A given path, for tests: NULL when this CPU cannot run it. */
const relattn_vec *relattn_vec_path(const char *name);

#endif /* RELATTN_VECMATH_H */
