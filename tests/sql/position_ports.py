"""Float64 ports of the position schemes' references, shared by the kernel's
tests (test_schemes.py) and the model reference (reference_model.py). Each
names the reference's file and function it is written from."""
import math

import numpy as np


# HF modeling_t5.py, T5Attention._relative_position_bucket
def t5_bucket(relative_position, bidirectional, num_buckets, max_distance):
    # float32 arithmetic as the reference's (relative_position.float(), torch.log)
    ret = np.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        ret += (relative_position > 0).astype(np.int64) * num_buckets
        n = np.abs(relative_position)
    else:
        n = -np.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    with np.errstate(divide="ignore", invalid="ignore"):   # n = 0: not used
        large = max_exact + (np.log(np.maximum(n, 1).astype(np.float32) / np.float32(max_exact))
                             / np.float32(math.log(max_distance / max_exact))
                             * np.float32(num_buckets - max_exact)).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return ret + np.where(is_small, n, large)


# HF modeling_bloom.py, build_alibi_tensor (the slopes)
def bloom_slopes(num_heads):
    closest = 2 ** math.floor(math.log2(num_heads))
    base = np.float32(2 ** (-(2 ** -(math.log2(closest) - 3))))
    slopes = [base ** np.float32(p) for p in range(1, 1 + closest)]
    if closest != num_heads:
        extra_base = np.float32(2 ** (-(2 ** -(math.log2(2 * closest) - 3))))
        rest = min(closest, num_heads - closest)
        slopes += [extra_base ** np.float32(p) for p in range(1, 1 + 2 * rest, 2)]
    return np.array(slopes, np.float64)


# RoPE: GPT-NeoX (HF modeling_gpt_neox.py rotate_half / apply_rotary_pos_emb,
# partial rotary_ndims) and RoFormer / GPT-J (modeling_gptj.py rotate_every_two)
def rope_rotate(x, rd, base, half):
    """x (..., n, d) at positions 0..n-1: dims [0, rd) rotated."""
    n = x.shape[-2]
    inv_freq = 1.0 / (base ** (np.arange(0, rd, 2) / rd))
    freqs = np.outer(np.arange(n), inv_freq)                 # (n, rd/2)
    x_rot, x_pass = x[..., :rd], x[..., rd:]
    if half:   # GPT-NeoX: emb = cat(freqs, freqs); x*cos + rotate_half(x)*sin
        cos = np.cos(np.concatenate([freqs, freqs], -1))
        sin = np.sin(np.concatenate([freqs, freqs], -1))
        x1, x2 = x_rot[..., :rd // 2], x_rot[..., rd // 2:]
        rotated = np.concatenate([-x2, x1], -1)
    else:      # GPT-J: sin, cos repeat_interleave(2); rotate_every_two
        cos = np.repeat(np.cos(freqs), 2, -1)
        sin = np.repeat(np.sin(freqs), 2, -1)
        x1, x2 = x_rot[..., ::2], x_rot[..., 1::2]
        rotated = np.stack([-x2, x1], -1).reshape(x_rot.shape)
    return np.concatenate([x_rot * cos + rotated * sin, x_pass], -1)



# HF modeling_bert.py, BertSelfAttention.forward, position_embedding_type
# relative_key / relative_key_query
def bert_relative_scores(Q, K, E, key_query):
    """Q, K (..., n, d); E the distance_embedding (2M-1, d): the scores before
    the 1/sqrt(d) scaling."""
    n = Q.shape[-2]
    M = (E.shape[0] + 1) // 2
    l = np.arange(n)[:, None]
    r = np.arange(n)[None, :]
    pos = np.asarray(E, np.float64)[l - r + M - 1]          # (n, n, d)
    scores = Q @ np.swapaxes(K, -1, -2)
    scores = scores + np.einsum("...ld,lrd->...lr", Q, pos)
    if key_query:
        scores = scores + np.einsum("...rd,lrd->...lr", K, pos)
    return scores


# Transformer-XL mem_transformer.py, PositionalEmbedding and r_net
def xl_sinusoid(pos_seq, d_model):
    inv_freq = 1 / (10000 ** (np.arange(0.0, d_model, 2.0) / d_model))
    sinusoid_inp = np.outer(pos_seq, inv_freq)
    return np.concatenate([np.sin(sinusoid_inp), np.cos(sinusoid_inp)], -1)


def xl_table(W_r, heads, d, c, d_model):
    """relattn's layout: row delta + c is W_r sinusoid(-delta), per head."""
    dist = -np.arange(-c, c + 1, dtype=np.float64)
    R = xl_sinusoid(dist, d_model) @ np.asarray(W_r, np.float64).T    # (2c+1, H d)
    return R.reshape(2 * c + 1, heads, d).transpose(1, 0, 2)          # float64


# HF modeling_deberta_v2.py: make_log_bucket_position and build_relative_position
# (relative_pos = i - j, in float32 as there)

def make_log_bucket_position(relative_pos, bucket_size, max_position):
    sign = np.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = np.where((relative_pos < mid) & (relative_pos > -mid), mid - 1,
                       np.abs(relative_pos))
    with np.errstate(divide="ignore", invalid="ignore"):   # mid 1: not used
        log_pos = np.ceil(np.log(abs_pos.astype(np.float32) / np.float32(mid))
                          / np.log(np.float32((max_position - 1) / mid))
                          * np.float32(mid - 1)) + mid
    return np.where(abs_pos <= mid, relative_pos.astype(np.float32),
                    log_pos * sign).astype(np.int64)


def build_relative_position(n, bucket_size, max_position):
    rel = np.arange(n)[:, None] - np.arange(n)[None, :]
    if bucket_size > 0 and max_position > 0:
        rel = make_log_bucket_position(rel, bucket_size, max_position)
    return rel
