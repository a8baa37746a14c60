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
  /* One query against n rows (a decoding step's attention over its cache,
  ** src/decode.c), in one order on every path:
  ** dot_rows: y[j] = s * (q . k_j), k_j = k + j*ldk, d long: eight partial
  **   sums, sum l an fma chain over c = l, l + 8, ... below d rounded down
  **   to 8, joined ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)), then
  **   fma over the rest of c in order, then times s;
  ** axpy_rows: z[c] = sum_j p[j] v[j*ldv + c], c < d: per c an fma chain
  **   over j = 0 .. n-1 from 0. */
  void (*dot_rows)(float *y, const float *q, const float *k, int ldk, int n,
                   int d, float s);
  void (*axpy_rows)(float *z, const float *p, const float *v, int ldv, int n,
                    int d);
  /* dot_rows and axpy_rows for every head at once, a cache row holding
  ** heads slices of d, each number in the order above (so the same bits),
  ** the cache read in fewer passes: dot_heads: y + h ldy = dot_rows of
  ** q + h d over k + h d; axpy_heads: z + h d = axpy_rows of p + h ldp
  ** over v + h d; h < heads. */
  void (*dot_heads)(float *y, int ldy, const float *q, const float *k,
                    int ldk, int n, int heads, int d, float s);
  void (*axpy_heads)(float *z, const float *p, int ldp, const float *v,
                     int ldv, int n, int heads, int d);
} relattn_vec;

const relattn_vec *relattn_vec_ops(void);
/* A given path, for tests: NULL when this CPU cannot run it. */
const relattn_vec *relattn_vec_path(const char *name);

#endif /* RELATTN_VECMATH_H */
