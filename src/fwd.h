/*
** fwd.h: the forward pass's row-wise pieces (src/forward.c), shared with
** the encoder-decoder's decoder (src/seq2seq.c) so both run the same
** arithmetic. Internal to src/: not part of relattn.h.
*/
#ifndef RELATTN_FWD_H
#define RELATTN_FWD_H

#include "relattn.h"

/* y (rows, ldy) = beta y + x W^T + b for one of the model's linear weights
** (w as the model holds it: panel order, int8 or bf16 packed, or as
** stored), on the kernel the model's weights take; worker's scratch slot 4
** of pool for an int8 or bf16 product. 0, or 1 when that scratch could
** not be had. */
int relattn_fwd_linear(const relattn_model *m, relattn_pool *pool, int worker,
                       float *y, int ldy, const float *x, int ldx, int rows,
                       int in, int out, const float *w, const float *b,
                       float beta);
/* logits (rows, vocab_size) = alpha x E^T + b, E the output embedding
** (lm_head, or tok_emb when tied), b (vocab_size) or NULL, its columns
** split across pool when the work is large (the same bits on any thread
** count). With quantization.embeddings int8 an int8 product
** (relattn_fwd_rows: x quantized per row as a linear layer's, on the
** caller's scratch), then times alpha when alpha is not 1 (a second
** rounding); else OpenBLAS's sgemm, on fixed cuts of the vocabulary when
** large (a function of the shape alone). 0, or 1 when that scratch could
** not be had. (worker: unused, the caller's is found from pool.) */
int relattn_fwd_head(const relattn_model *m, relattn_pool *pool, int worker,
                     float *logits, const float *x, int ldx, int rows,
                     float alpha, const float *b);
/* The FFN's activation (config activation) on count floats, in place. */
void relattn_fwd_activate(float *x, size_t count, int activation);
/* The same on a named vector path ("avx512", "avx2", "scalar"): the same
** bits on the first two; for the tests. */
void relattn_fwd_activate_on(const char *path, float *x, size_t count,
                             int activation);
/* x (rows, d_model) += FFN(in) of layer L, in (rows, d_model) already
** normed; hid: (rows, d_ff) floats, twice that when gated. 0, or 1 as
** relattn_fwd_linear. */
int relattn_fwd_ffn(const relattn_model *m, const relattn_layer *L,
                    relattn_pool *pool, int worker, float *x, const float *in,
                    int rows, float *hid);

/* One of several products of the same rows: y (rows, ldy) = beta y +
** x W^T + b, W (out, in) one of the model's linear weights. */
typedef struct relattn_fwd_prod {
  float *y;
  int ldy, out;
  const float *w, *b;
  float beta;
} relattn_fwd_prod;
/* n (1 to 3) products of x (rows, in) as relattn_fwd_linear makes them,
** the same bits, for the few rows of a decoding step: their output
** columns cut into tasks of whole panels on pool (the calling thread takes
** part), or on the calling thread alone when the work is small. 0, or 1
** when the caller's scratch could not be had. */
int relattn_fwd_rows(const relattn_model *m, relattn_pool *pool,
                     const float *x, int ldx, int rows, int in,
                     const relattn_fwd_prod *p, int n);
/* relattn_fwd_ffn on relattn_fwd_rows: the same bits. */
int relattn_fwd_ffn_rows(const relattn_model *m, const relattn_layer *L,
                         relattn_pool *pool, float *x, const float *in,
                         int rows, float *hid);
#endif /* RELATTN_FWD_H */
