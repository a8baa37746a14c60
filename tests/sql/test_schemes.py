"""relattn_attention with options.position: every scheme of DESIGN 5b against a
float64 numpy port of its reference, written from the reference's own source
(each port names the file and function it follows), on fresh random inputs,
causal and bidirectional, at the band edges, n = 1, and tables longer than a
sequence needs. Tolerance 1e-5 relative (the kernel computes in float32). Also
the exact error text for a scheme's bad tables and options."""
import json
import math
import sqlite3

import numpy as np
import pytest

from conftest import f32, from_f32, rel_err
from position_ports import (bert_relative_scores, bloom_slopes,
                            build_relative_position, rope_rotate, t5_bucket,
                            xl_sinusoid, xl_table)

TOL = 1e-5
E = "relattn_attention: "


def run(db, q, k, v, rk, rv, opts, *extra):
    args = [None if x is None else f32(x) for x in (q, k, v, rk, rv)]
    args.append(json.dumps(opts))
    args += [None if x is None else f32(x) for x in extra]
    marks = ", ".join("?" * len(args))
    out = db.execute(f"SELECT relattn_attention({marks})", args).fetchone()[0]
    return from_f32(out, (q.shape[0], -1))


def qkv(rng, n, heads, d, scale=2.0):
    # float32 values: the reference starts from exactly what the kernel sees
    return [rng.uniform(-scale, scale, (n, heads * d)).astype(np.float32)
            for _ in range(3)]


def heads_of(x, heads):
    """(n, H*d) -> (H, n, d) float64"""
    n = x.shape[0]
    return np.asarray(x, np.float64).reshape(n, heads, -1).transpose(1, 0, 2)


def softmax_out(scores, v, causal):
    """scores (H, n, n), v (H, n, d) -> (n, H*d), masked rows j > i."""
    H, n, _ = scores.shape
    if causal:
        scores = np.where(np.triu(np.ones((n, n), bool), 1), -np.inf, scores)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return (w @ v).transpose(1, 0, 2).reshape(n, -1)


# ---- HF modeling_bert.py, BertSelfAttention.forward, position_embedding_type
# relative_key / relative_key_query -----------------------------------------------

def bert_port(q, k, v, E, heads, causal, key_query):
    Q, K, V = (heads_of(x, heads) for x in (q, k, v))
    d = Q.shape[2]
    scores = bert_relative_scores(Q, K, E, key_query)
    return softmax_out(scores / math.sqrt(d), V, causal)


@pytest.mark.parametrize("n,heads,d,M,causal,key_query", [
    (1, 1, 8, 1, False, False),          # n = 1, the smallest table
    (1, 2, 8, 4, True, True),
    (7, 2, 8, 7, False, True),           # M = n: every row used
    (7, 2, 8, 7, True, False),
    (40, 3, 12, 100, False, True),       # table longer than needed
    (300, 2, 16, 300, True, True),       # several query blocks, unclipped
    (300, 2, 16, 310, False, False),
])
def test_bert_relative_key(db, rng, n, heads, d, M, causal, key_query):
    q, k, v = qkv(rng, n, heads, d)
    E = rng.uniform(-2, 2, (2 * M - 1, d)).astype(np.float32)
    typ = "rel_key_query" if key_query else "rel_key"
    out = run(db, q, k, v, E, None, {"heads": heads, "d_head": d, "causal": causal,
                                     "position": {"type": typ}})
    ref = bert_port(q, k, v, E, heads, causal, key_query)
    assert rel_err(out, ref) <= TOL
    if n > 1:   # the terms matter beyond the tolerance
        assert rel_err(ref, bert_port(q, k, v, E * 0, heads, causal, False)) > 1e-3


# ---- HF modeling_t5.py, T5Attention._relative_position_bucket and compute_bias --

def t5_port(q, k, v, bias, heads, causal, num_buckets, max_distance):
    Q, K, V = (heads_of(x, heads) for x in (q, k, v))
    n = Q.shape[1]
    rel = np.arange(n)[None, :] - np.arange(n)[:, None]     # memory - context
    b = t5_bucket(rel, not causal, num_buckets, max_distance)
    position_bias = np.asarray(bias, np.float64)[:, b]     # (H, n, n)
    return softmax_out(Q @ K.transpose(0, 2, 1) + position_bias, V, causal)  # no scaling


@pytest.mark.parametrize("n,heads,d,nb,md,causal", [
    (1, 2, 8, 32, 128, False),
    (5, 2, 8, 32, 128, True),
    (60, 4, 8, 32, 128, False),
    (200, 3, 16, 32, 128, True),          # past max_distance: the far rows
    (200, 2, 16, 16, 20, False),          # a small band, many far blocks
    (600, 2, 8, 8, 9, True),              # D ~ 9 across several key blocks
])
def test_t5(db, rng, n, heads, d, nb, md, causal):
    q, k, v = qkv(rng, n, heads, d, 1.0)
    bias = rng.uniform(-3, 3, (heads, nb)).astype(np.float32)
    out = run(db, q, k, v, None, None,
              {"heads": heads, "d_head": d, "causal": causal,
               "position": {"type": "t5", "num_buckets": nb, "max_distance": md}}, bias)
    ref = t5_port(q, k, v, bias, heads, causal, nb, md)
    assert rel_err(out, ref) <= TOL
    if n > 1:
        assert rel_err(ref, t5_port(q, k, v, bias * 0, heads, causal, nb, md)) > 1e-3


def test_t5_buckets_are_hfs(db):
    # The default map, bidirectional: the bucket table itself (bias row t = t)
    # through one head whose keys all score 0: weights are softmax(bias[b]).
    n, nb = 300, 32
    bias = np.arange(nb, dtype=np.float32)[None, :] * 0.01
    # values e_j (d_head = n): row i of the result is row i's weights
    eye = np.eye(n, dtype=np.float32)
    out = run(db, np.zeros((n, n), np.float32), np.zeros((n, n), np.float32), eye,
              None, None, {"heads": 1, "d_head": n, "position": {"type": "t5"}}, bias)
    rel = np.arange(n)[None, :] - np.arange(n)[:, None]
    want = np.exp(bias[0][t5_bucket(rel, True, 32, 128)])
    want /= want.sum(1, keepdims=True)
    assert np.abs(out - want).max() <= 1e-6


# ---- HF modeling_deberta_v2.py, make_log_bucket_position, build_relative_position,
# DisentangledSelfAttention.disentangled_attention_bias ------------------------------

def deberta_port(q, k, v, pos_key, pos_query, heads, causal, buckets, max_rel):
    Q, K, V = (heads_of(x, heads) for x in (q, k, v))
    n, d = Q.shape[1], Q.shape[2]
    att_span = buckets if buckets > 0 else max_rel
    relative_pos = build_relative_position(n, buckets, max_rel)
    scale_factor = 1 + (pos_key is not None) + (pos_query is not None)
    scale = math.sqrt(d * scale_factor)
    scores = Q @ K.transpose(0, 2, 1) / scale
    if pos_key is not None:                 # c2p
        pk = np.asarray(pos_key, np.float64)   # (H, 2 span, d)
        c2p_att = Q @ pk.transpose(0, 2, 1)    # (H, n, 2 span)
        c2p_pos = np.clip(relative_pos + att_span, 0, att_span * 2 - 1)
        c2p_att = np.take_along_axis(c2p_att, np.broadcast_to(c2p_pos, (heads, n, n)), -1)
        scores = scores + c2p_att / scale
    if pos_query is not None:               # p2c
        pq = np.asarray(pos_query, np.float64)
        p2c_pos = np.clip(-relative_pos + att_span, 0, att_span * 2 - 1)
        p2c_att = K @ pq.transpose(0, 2, 1)    # (H, n keys, 2 span)
        p2c_att = np.take_along_axis(p2c_att, np.broadcast_to(p2c_pos, (heads, n, n)),
                                     -1).transpose(0, 2, 1)
        scores = scores + p2c_att / scale
    return softmax_out(scores, V, causal)


@pytest.mark.parametrize("n,heads,d,buckets,max_rel,causal,terms", [
    (1, 2, 8, 8, 20, False, "both"),
    (12, 2, 8, 8, 20, False, "both"),     # n < span: every distance in the band
    (100, 3, 8, 8, 20, False, "both"),    # past max_relative_positions: the clamp
    (100, 3, 8, 8, 20, True, "c2p"),
    (100, 2, 12, -1, 16, False, "p2c"),   # no log buckets: clamp(-delta + span)
    (700, 2, 16, 32, 64, True, "both"),   # several blocks both sides of the band
    (700, 2, 16, 32, 64, False, "both"),
])
def test_deberta(db, rng, n, heads, d, buckets, max_rel, causal, terms):
    q, k, v = qkv(rng, n, heads, d)
    rows = 2 * (buckets if buckets > 0 else max_rel)
    pk = rng.uniform(-2, 2, (heads, rows, d)).astype(np.float32) if terms != "p2c" else None
    pq = rng.uniform(-2, 2, (heads, rows, d)).astype(np.float32) if terms != "c2p" else None
    opts = {"heads": heads, "d_head": d, "causal": causal, "per_head": True,
            "position": {"type": "deberta", "position_buckets": buckets,
                         "max_relative_positions": max_rel}}
    out = run(db, q, k, v, pk, None, opts, *([pq] if pq is not None else []))
    ref = deberta_port(q, k, v, pk, pq, heads, causal, buckets, max_rel)
    assert rel_err(out, ref) <= TOL


def test_deberta_shared_table(db, rng):
    # per_head false: one table for every head (the port repeats it)
    n, heads, d = 50, 3, 8
    q, k, v = qkv(rng, n, heads, d)
    t = rng.uniform(-2, 2, (16, d)).astype(np.float32)
    opts = {"heads": heads, "d_head": d,
            "position": {"type": "deberta", "position_buckets": 8, "max_relative_positions": 20}}
    out = run(db, q, k, v, t, None, opts, t)
    tt = np.broadcast_to(t, (heads, 16, d))
    assert rel_err(out, deberta_port(q, k, v, tt, tt, heads, False, 8, 20)) <= TOL


# ---- HF modeling_bloom.py, build_alibi_tensor and BloomAttention (causal); the
# bidirectional form is Press et al.'s -m |i - j| --------------------------------------

def alibi_port(q, k, v, heads, causal):
    Q, K, V = (heads_of(x, heads) for x in (q, k, v))
    n, d = Q.shape[1], Q.shape[2]
    m = bloom_slopes(heads)[:, None, None]
    j = np.arange(n)[None, None, :]
    i = np.arange(n)[None, :, None]
    # BLOOM: alibi = slopes * key position, added to q.k / sqrt(d) (beta = 1)
    alibi = m * j if causal else -m * np.abs(j - i)
    return softmax_out(alibi + Q @ K.transpose(0, 2, 1) / math.sqrt(d), V, causal)


@pytest.mark.parametrize("n,heads,d,causal", [
    (1, 1, 8, False), (1, 3, 8, True), (30, 3, 8, False), (30, 5, 8, True),
    (700, 8, 16, False), (700, 12, 16, True), (1100, 2, 8, False),
])
def test_alibi(db, rng, n, heads, d, causal):
    q, k, v = qkv(rng, n, heads, d, 0.5)
    out = run(db, q, k, v, None, None, {"heads": heads, "d_head": d, "causal": causal,
                                        "position": {"type": "alibi"}})
    ref = alibi_port(q, k, v, heads, causal)
    assert rel_err(out, ref) <= TOL
    if n > 1:
        Q, K, V = (heads_of(x, heads) for x in (q, k, v))
        plain = softmax_out(Q @ K.transpose(0, 2, 1) / math.sqrt(d), V, causal)
        assert rel_err(ref, plain) > 1e-3


# ---- RoPE: GPT-NeoX (HF modeling_gpt_neox.py rotate_half / apply_rotary_pos_emb,
# partial rotary_ndims) and RoFormer / GPT-J (modeling_gptj.py rotate_every_two) -----

def rope_port(q, k, v, heads, causal, rd, base, half):
    Q, K, V = (heads_of(x, heads) for x in (q, k, v))
    d = Q.shape[2]
    return softmax_out(rope_rotate(Q, rd, base, half)
                       @ rope_rotate(K, rd, base, half).transpose(0, 2, 1)
                       / math.sqrt(d), V, causal)


@pytest.mark.parametrize("n,heads,d,rd,base,rotary,causal", [
    (1, 2, 8, 8, 10000, "half", False),
    (50, 2, 8, 8, 10000, "half", True),
    (50, 2, 8, 8, 10000, "interleaved", False),
    (70, 3, 16, 6, 500, "half", False),          # partial rotary_dim
    (70, 3, 16, 4, 10000, "interleaved", True),
    (600, 2, 32, 32, 10000, "half", False),      # several query blocks
    (600, 2, 32, 16, 10000, "interleaved", True),
])
def test_rope(db, rng, n, heads, d, rd, base, rotary, causal):
    q, k, v = qkv(rng, n, heads, d, 1.0)
    pos = {"type": "rope", "rotary": rotary, "base": base}
    if rd != d:
        pos["rotary_dim"] = rd
    out = run(db, q, k, v, None, None, {"heads": heads, "d_head": d, "causal": causal,
                                        "position": pos})
    ref = rope_port(q, k, v, heads, causal, rd, base, rotary == "half")
    assert rel_err(out, ref) <= TOL
    if n > 1:
        other = rope_port(q, k, v, heads, causal, rd, base, rotary != "half")
        assert rel_err(ref, other) > 1e-3


def test_rope_defaults_are_half_over_d_head(db, rng):
    q, k, v = qkv(rng, 40, 2, 8)
    out = run(db, q, k, v, None, None, {"heads": 2, "d_head": 8, "position": {"type": "rope"}})
    assert rel_err(out, rope_port(q, k, v, 2, False, 8, 10000, True)) <= TOL


# ---- Transformer-XL, mem_transformer.py RelPartialLearnableMultiHeadAttn (with
# PositionalEmbedding and _rel_shift), no memory: causal as there ----------------------

def rel_shift(x):
    # x: (qlen, klen, H); the reference's pad-and-view trick
    zero_pad = np.zeros((x.shape[0], 1) + x.shape[2:])
    x_padded = np.concatenate([zero_pad, x], 1)
    x_padded = x_padded.reshape((x.shape[1] + 1, x.shape[0]) + x.shape[2:])
    return x_padded[1:].reshape(x.shape)


def xl_port(q, k, v, W_r, u, w, heads, d_model):
    n = q.shape[0]
    d = q.shape[1] // heads
    w_head_q, w_head_k, w_head_v = (np.asarray(x, np.float64).reshape(n, heads, d)
                                    for x in (q, k, v))
    pos_seq = np.arange(n - 1, -1, -1.0)
    r = xl_sinusoid(pos_seq, d_model)                          # (klen, d_model)
    r_head_k = (r @ np.asarray(W_r, np.float64).T).reshape(n, heads, d)
    AC = np.einsum("ind,jnd->ijn", w_head_q + u, w_head_k)
    BD = rel_shift(np.einsum("ind,jnd->ijn", w_head_q + w, r_head_k))
    score = (AC + BD) / math.sqrt(d)
    score = np.where(np.triu(np.ones((n, n), bool), 1)[:, :, None], -np.inf, score)
    prob = np.exp(score - score.max(1, keepdims=True))
    prob /= prob.sum(1, keepdims=True)
    return np.einsum("ijn,jnd->ind", prob, w_head_v).reshape(n, heads * d)


@pytest.mark.parametrize("n,heads,d,d_model,extra", [
    (1, 2, 8, 16, 0), (9, 2, 8, 16, 0), (40, 3, 8, 24, 5),   # table longer than needed
    (300, 2, 16, 32, 0), (600, 4, 8, 32, 0),
])
def test_xl_causal(db, rng, n, heads, d, d_model, extra):
    q, k, v = qkv(rng, n, heads, d, 1.0)
    W_r = rng.uniform(-0.5, 0.5, (heads * d, d_model)).astype(np.float32)
    u, w = (rng.uniform(-1, 1, (heads, d)).astype(np.float32) for _ in range(2))
    c = n - 1 + extra
    R = xl_table(W_r, heads, d, c, d_model).astype(np.float32)
    out = run(db, q, k, v, R, None, {"heads": heads, "d_head": d, "causal": True,
                                     "per_head": True, "position": {"type": "xl"}}, u, w)
    ref = xl_port(q, k, v, W_r, u.astype(np.float64), w.astype(np.float64), heads, d_model)
    assert rel_err(out, ref) <= 2 * TOL


def xl_direct(q, k, v, R, u, w, heads, causal):
    """(q + u).k + (q + w).R[j - i + c], as DESIGN 5b writes it (both sides)."""
    Q, K, V = (heads_of(x, heads) for x in (q, k, v))
    n, d = Q.shape[1], Q.shape[2]
    c = (R.shape[1] - 1) // 2
    idx = np.clip(np.arange(n)[None, :] - np.arange(n)[:, None], -c, c) + c
    Rh = np.asarray(R, np.float64)[:, idx]                      # (H, n, n, d)
    scores = (Q + u[:, None]) @ K.transpose(0, 2, 1)
    scores += np.einsum("hid,hijd->hij", Q + w[:, None], Rh)
    return softmax_out(scores / math.sqrt(d), V, causal)


@pytest.mark.parametrize("n,c,causal", [(50, 49, False), (300, 20, False), (300, 20, True)])
def test_xl_clipped_and_bidirectional(db, rng, n, c, causal):
    heads, d = 2, 8
    q, k, v = qkv(rng, n, heads, d, 1.0)
    R = rng.uniform(-1, 1, (heads, 2 * c + 1, d)).astype(np.float32)
    u, w = (rng.uniform(-1, 1, (heads, d)).astype(np.float32) for _ in range(2))
    out = run(db, q, k, v, R, None, {"heads": heads, "d_head": d, "causal": causal,
                                     "per_head": True, "position": {"type": "xl"}}, u, w)
    ref = xl_direct(q, k, v, R, u.astype(np.float64), w.astype(np.float64), heads, causal)
    assert rel_err(out, ref) <= TOL


# ---- none, and shaw through options.position --------------------------------------

def test_none_and_explicit_shaw(db, rng):
    n, heads, d = 80, 2, 8
    q, k, v = qkv(rng, n, heads, d)
    Q, K, V = (heads_of(x, heads) for x in (q, k, v))
    out = run(db, q, k, v, None, None, {"heads": heads, "d_head": d,
                                        "position": {"type": "none"}})
    assert rel_err(out, softmax_out(Q @ K.transpose(0, 2, 1) / math.sqrt(d), V, False)) <= TOL
    rk, rv = (rng.uniform(-1, 1, (7, d)).astype(np.float32) for _ in range(2))
    a = run(db, q, k, v, rk, rv, {"heads": heads, "d_head": d})
    b = run(db, q, k, v, rk, rv, {"heads": heads, "d_head": d, "position": {"type": "shaw"}})
    assert a.tobytes() == b.tobytes()


# ---- errors ---------------------------------------------------------------------

H, D, N = 2, 8, 5


def err(db, position, rk=None, rv=None, *extra, causal=False):
    rng = np.random.default_rng(1)
    q, k, v = qkv(rng, N, H, D)
    with pytest.raises(sqlite3.Error) as e:
        run(db, q, k, v, rk, rv, {"heads": H, "d_head": D, "causal": causal,
                                  "position": position}, *extra)
    return str(e.value)[len(E):] if str(e.value).startswith(E) else str(e.value)


def ones(*shape):
    return np.ones(shape, np.float32)


@pytest.mark.parametrize("position,tables,message", [
    ({"type": "alibo"}, (), "options.position.type must be one of none, shaw, rel_key, "
     "rel_key_query, t5, deberta, alibi, rope, xl, not \"alibo\""),
    ({}, (), "options.position lacks type (one of none, shaw, rel_key, rel_key_query, "
     "t5, deberta, alibi, rope, xl)"),
    ({"type": 3}, (), "options.position.type must be one of none, shaw, rel_key, "
     "rel_key_query, t5, deberta, alibi, rope, xl, not 3"),
    ({"type": "rope", "clip": 3}, (), "unknown key 'clip' in options.position "
     "(type 'rope' takes: rotary, rotary_dim, base)"),
    ({"type": "alibi", "base": 3}, (), "unknown key 'base' in options.position "
     "(type 'alibi' takes: no other key)"),
    ({"type": "rope", "rotary_dim": 7}, (), "options.position.rotary_dim must be even, "
     "at least 2 and at most d_head = 8, not 7"),
    ({"type": "rope", "rotary_dim": 10}, (), "options.position.rotary_dim must be even, "
     "at least 2 and at most d_head = 8, not 10"),
    ({"type": "rope", "rotary": "full"}, (), "options.position.rotary must be \"half\" "
     "or \"interleaved\", not \"full\""),
    ({"type": "rope", "base": 1}, (), "options.position.base must be a number over 1, not 1"),
    ({"type": "t5", "num_buckets": 0}, (None, None, ones(H, 32)),
     "options.position.num_buckets must be a positive integer, not 0"),
    ({"type": "t5", "max_distance": 8}, (None, None, ones(H, 32)),
     "options.position.max_distance must be over max_exact = num_buckets/4 = 8 "
     "and at most 16777216, not 8 (T5's log buckets divide by "
     "log(max_distance/max_exact), which must be over 0)"),
    ({"type": "t5"}, (), "position type 't5' needs bias (argument 7)"),
    ({"type": "t5"}, (None, None, ones(H, 31)),
     "bias has 62 floats, position type 't5' needs heads*num_buckets = 64 ([heads, num_buckets])"),
    ({"type": "t5"}, (ones(3, D), None, ones(H, 32)),
     "rel_k must be NULL with position type 't5' (its tables: bias)"),
    ({"type": "t5"}, (None, None, ones(H, 32), ones(H, 32)),
     "position type 't5' takes 1 argument after options (bias), not 2"),
    ({"type": "alibi"}, (None, None, ones(2)),
     "position type 'alibi' takes 0 arguments after options, not 1"),
    ({"type": "rel_key"}, (), "position type 'rel_key' needs rel_k (argument 4)"),
    ({"type": "rel_key"}, (ones(7, D),), "rel_k has 7 rows (max_position_embeddings 4), "
     "fewer than the 2n-1 = 9 that q's 5 rows reach (position type 'rel_key')"),
    ({"type": "rel_key_query"}, (ones(10, D),),
     "rel_k has 10 rows, not an odd number (2M-1, M = max_position_embeddings)"),
    ({"type": "rel_key"}, (ones(9, D), ones(9, D)),
     "rel_v must be NULL with position type 'rel_key' (its tables: rel_k)"),
    ({"type": "deberta", "position_buckets": 8, "max_relative_positions": 20},
     (ones(15, D),), "rel_k has 15 rows, position type 'deberta' needs 2*position_buckets = 16"),
    ({"type": "deberta", "position_buckets": -1, "max_relative_positions": 20},
     (None, None, ones(16, D)),
     "pos_query has 16 rows, position type 'deberta' needs 2*max_relative_positions = 40"),
    ({"type": "deberta", "position_buckets": 30, "max_relative_positions": 16}, (),
     "options.position.max_relative_positions must not be 16 with "
     "position_buckets 30 (DeBERTa's log buckets divide by "
     "log((max_relative_positions - 1)/mid), mid = position_buckets/2 = 15: "
     "here log(1))"),
    ({"type": "xl"}, (ones(9, D),), "position type 'xl' needs u (argument 7)"),
    ({"type": "xl"}, (ones(9, D), None, ones(H, D)), "position type 'xl' needs w (argument 8)"),
    ({"type": "xl"}, (ones(9, D), None, ones(H, D), ones(D)),
     "w has 8 floats, position type 'xl' needs heads*d_head = 16 ([heads, d_head])"),
    ({"type": "xl"}, (ones(8, D), None, ones(H, D), ones(H, D)),
     "rel_k has 8 rows, not an odd number (2c+1)"),
    ({"type": "xl"}, (None, None, ones(H, D), ones(H, D)),
     "position type 'xl' needs rel_k (argument 4)"),
    ({"type": "xl"}, (ones(9, D), None, ones(H, D), np.array([1, np.nan] * 8, np.float32)),
     "w has a NaN or Inf at float 1"),
    ("alibi", (), "options.position must be a JSON object, not \"alibi\""),
])
def test_error_text(db, position, tables, message):
    assert err(db, position, *tables) == message


T5_DIV = "(T5's log buckets divide by max_exact = num_buckets/"
T5_LOG = ("(T5's log buckets divide by log(max_distance/max_exact), which "
          "must be over 0)")


@pytest.mark.parametrize("position,causal,message", [
    ({"type": "t5", "num_buckets": 3, "max_distance": 8}, False,
     "options.position.num_buckets must be between 4 and 1048576 when "
     "bidirectional, not 3 " + T5_DIV + "4)"),
    ({"type": "t5", "num_buckets": 1, "max_distance": 8}, True,
     "options.position.num_buckets must be between 2 and 1048576 when causal, "
     "not 1 " + T5_DIV + "2)"),
    ({"type": "t5", "num_buckets": (1 << 20) + 1}, True,
     "options.position.num_buckets must be between 2 and 1048576 when causal, "
     "not 1048577 " + T5_DIV + "2)"),
    ({"type": "t5", "num_buckets": 8, "max_distance": 2}, False,
     "options.position.max_distance must be over max_exact = num_buckets/4 = 2 "
     "and at most 16777216, not 2 " + T5_LOG),
    ({"type": "t5", "num_buckets": 8, "max_distance": 4}, True,
     "options.position.max_distance must be over max_exact = num_buckets/2 = 4 "
     "and at most 16777216, not 4 " + T5_LOG),
    ({"type": "deberta", "position_buckets": 1}, False,
     "options.position.position_buckets must be at most 0 (none), or between 2 "
     "and 16777216, not 1 (DeBERTa's log buckets divide by mid = "
     "position_buckets/2)"),
    ({"type": "deberta", "position_buckets": (1 << 24) + 1}, False,
     "options.position.position_buckets must be at most 0 (none), or between 2 "
     "and 16777216, not 16777217 (DeBERTa's log buckets divide by mid = "
     "position_buckets/2)"),
    ({"type": "deberta", "position_buckets": 8, "max_relative_positions": 1}, True,
     "options.position.max_relative_positions must not be 1 with "
     "position_buckets 8 (DeBERTa's log buckets divide by "
     "log((max_relative_positions - 1)/mid), mid = position_buckets/2 = 4: "
     "here log(0))"),
])
def test_bucket_limits_refused(db, position, causal, message):
    assert err(db, position, None, None, ones(H, 64), causal=causal) == message


# Each was refused before; Hugging Face's formulas take it (T5's
# max_exact = num_buckets/4 bidirectional, /2 causal; DeBERTa's mid =
# position_buckets/2, and any max_relative_positions - 1 over 0 but mid)
@pytest.mark.parametrize("nb,md,causal", [
    (4, 2, False), (8, 3, False), (7, 2, False), (32, 9, False),
    (2, 2, True), (3, 5, True),
])
def test_t5_bucket_limits_accepted(db, rng, nb, md, causal):
    n, heads, d = 150, 2, 8
    q, k, v = qkv(rng, n, heads, d, 1.0)
    bias = rng.uniform(-3, 3, (heads, nb)).astype(np.float32)
    out = run(db, q, k, v, None, None,
              {"heads": heads, "d_head": d, "causal": causal,
               "position": {"type": "t5", "num_buckets": nb, "max_distance": md}}, bias)
    assert rel_err(out, t5_port(q, k, v, bias, heads, causal, nb, md)) <= TOL


@pytest.mark.parametrize("buckets,max_rel,causal", [
    (2, 3, False), (3, 40, True),
    (40, 20, False), (8, 2, False), (64, 30, True),   # max_rel - 1 under mid
])
def test_deberta_bucket_limits_accepted(db, rng, buckets, max_rel, causal):
    n, heads, d = 300, 2, 8
    q, k, v = qkv(rng, n, heads, d)
    pk = rng.uniform(-2, 2, (heads, 2 * buckets, d)).astype(np.float32)
    pq = rng.uniform(-2, 2, (heads, 2 * buckets, d)).astype(np.float32)
    opts = {"heads": heads, "d_head": d, "causal": causal, "per_head": True,
            "position": {"type": "deberta", "position_buckets": buckets,
                         "max_relative_positions": max_rel}}
    out = run(db, q, k, v, pk, None, opts, pq)
    ref = deberta_port(q, k, v, pk, pq, heads, causal, buckets, max_rel)
    assert rel_err(out, ref) <= TOL


def test_rel_key_sequence_past_M_is_refused_whatever_the_mask(db):
    # HF would index past its table; a causal call reaches the same distances
    assert err(db, {"type": "rel_key"}, ones(7, D), causal=True).startswith("rel_k has 7 rows")


# ---- the README's section, run as written ------------------------------------------

def test_readme_position_schemes():
    import pathlib
    import re
    import subprocess
    from conftest import SO
    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = text.index("## Position schemes: options.position\n")
    end = text.find("\n## ", start + 1)
    (sql,) = re.findall(r"```sql\n(.*?)```", text[start:end], re.S)
    so = SO[:-3] if SO.endswith(".so") else SO
    r = subprocess.run(["sqlite3", "-bail", ":memory:"],
                       input=sql.replace(".load ./relattn", f".load {so}"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = r.stdout.split()
    # the hex the README shows after each query is what it prints
    assert got == re.findall(r"^-- ([0-9A-F]{32}):", sql, re.M)
    # and each is its scheme's port
    q = k = np.eye(2, dtype=np.float32)
    v = np.array([[1, 2], [3, 4]], np.float32)
    outs = [np.frombuffer(bytes.fromhex(h), "<f4").reshape(2, 2) for h in got]
    assert rel_err(outs[0], alibi_port(q, k, v, 1, True)) <= TOL
    bias = np.array([[0, 1, 0.5, 0]], np.float32)
    assert rel_err(outs[1], t5_port(q, k, v, bias, 1, False, 4, 8)) <= TOL
    assert rel_err(outs[2], rope_port(q, k, v, 1, False, 2, 10000, True)) <= TOL


def test_position_input_echoed_escaped_and_cut(db):
    sql = ("SELECT relattn_attention('[[1,0]]', '[[1,0]]', '[[1,0]]', NULL, NULL, "
           "CAST(? AS TEXT))")

    def msg(opts):
        with pytest.raises(sqlite3.Error) as e:
            db.execute(sql, (opts,)).fetchone()
        return str(e.value)
    assert msg(b'{"heads":1,"d_head":2,"position":{"type":"ro\xffpe"}}') == E + \
        "options.position.type must be one of none, shaw, rel_key, rel_key_query, t5, " \
        "deberta, alibi, rope, xl, not \"ro\\xFFpe\""
    assert msg(b'{"heads":1,"d_head":2,"position":{"type":"rope","b\xffse":2}}') == E + \
        "unknown key 'b\\xFFse' in options.position (type 'rope' takes: rotary, rotary_dim, base)"
    long = "é" * 300
    assert msg(('{"heads":1,"d_head":2,"position":{"type":"rope","rotary":"%s"}}'
                % long).encode()) == E + \
        "options.position.rotary must be \"half\" or \"interleaved\", not \"" + "é" * 47 + "..."
