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
** (lm_head, or tok_emb when tied), b (vocab_size) or NULL. With
** quantization.embeddings int8 an int8 product (src/qgemm.c, x quantized
** per row as a linear layer's) on worker's scratch, then times alpha when
** alpha is not 1 (a second rounding); else sgemm. 0, or 1 when that
** scratch could not be had. */
int relattn_fwd_head(const relattn_model *m, relattn_pool *pool, int worker,
                     float *logits, const float *x, int ldx, int rows,
                     float alpha, const float *b);
/* The FFN's activation (config activation) on count floats, in place. */
void relattn_fwd_activate(float *x, size_t count, int activation);
/* x (rows, d_model) += FFN(in) of layer L, in (rows, d_model) already
** normed; hid: (rows, d_ff) floats, twice that when gated. 0, or 1 as
** relattn_fwd_linear. */
int relattn_fwd_ffn(const relattn_model *m, const relattn_layer *L,
                    relattn_pool *pool, int worker, float *x, const float *in,
                    int rows, float *hid);

#endif /* RELATTN_FWD_H */
