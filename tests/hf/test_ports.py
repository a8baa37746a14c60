"""The HF ports (tests/hf/ports.py) checked on their own before they judge
the import: their bucket maps against relattn's position schemes through
relattn_attention, their BERT-relative and DeBERTa encoders against the
native relattn model with the same weights renamed by hand (the embedding
LayerNorm folded into tok_emb, which is exact for one segment without
absolute positions), and cheap invariants of each piece. The checkpoint
writers (tests/hf/checkpoints.py) are checked for HF's names and config
keys.

Tolerances: attention outputs 1e-5 absolute (float32 kernel vs float64);
embeddings 1e-5 relative (L2), as tests/sql/test_model_schemes.py."""
import json
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import checkpoints  # noqa: E402
import ports  # noqa: E402
import safetensors_py  # noqa: E402
from conftest import f32, from_f32, rel_err  # noqa: E402


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


# ---- bucket maps against relattn's schemes ---------------------------------

def plain_attention(q, k, v, scores_extra, scale):
    e = q @ k.T * scale + scores_extra
    return ports.softmax(e) @ v


@pytest.mark.parametrize("num_buckets,max_distance", [(8, 20), (32, 128), (6, 9)])
def test_t5_bucket_port_matches_relattn(db, rng, num_buckets, max_distance):
    """T5Attention._relative_position_bucket's port decides the bias row of
    relattn_attention's t5 scheme: the weights with values one-hot per key
    (v = identity) are the softmax rows, compared at 1e-5, over distances
    past max_distance on both sides."""
    n = max(2 * max_distance + 10, 40)
    d = n                                   # v = I: output row i = weights of query i
    q = rng.standard_normal((n, 4))
    k = rng.standard_normal((n, 4))
    qd = np.zeros((n, d)); qd[:, :4] = q
    kd = np.zeros((n, d)); kd[:, :4] = k
    v = np.eye(n)
    bias = rng.uniform(-3, 3, (1, num_buckets))
    rel = np.arange(n)[None, :] - np.arange(n)[:, None]       # j - i
    b = ports.t5_relative_position_bucket(rel, True, num_buckets, max_distance)
    want = plain_attention(qd, kd, v, bias[0][b], 1.0)
    opts = json.dumps({"heads": 1, "d_head": d, "position": {
        "type": "t5", "num_buckets": num_buckets, "max_distance": max_distance}})
    got = db.execute("SELECT relattn_attention(?, ?, ?, NULL, NULL, ?, ?)",
                     (f32(qd), f32(kd), f32(v), opts, f32(bias))).fetchone()[0]
    assert np.abs(from_f32(got, (n, d)) - want).max() < 1e-5
    # the map is not trivial: every bucket is reached but the upper half's
    # first (distance +0 falls in the lower half, as in the reference)
    assert set(np.unique(b)) == set(range(num_buckets)) - {num_buckets // 2}


@pytest.mark.parametrize("buckets,max_rel", [(16, 64), (8, 20), (-1, 12)])
def test_deberta_log_bucket_port_matches_relattn(db, rng, buckets, max_rel):
    """make_log_bucket_position / build_relative_position's port, with the
    c2p and p2c gathers of DisentangledSelfAttention, against relattn's
    deberta scheme: one head, v = identity, past the clamp on both sides."""
    span = buckets if buckets > 0 else max_rel
    n = max(2 * max_rel + 6, 30)
    d = n
    rng_d = 6
    q = np.zeros((n, d)); q[:, :rng_d] = rng.standard_normal((n, rng_d))
    k = np.zeros((n, d)); k[:, :rng_d] = rng.standard_normal((n, rng_d))
    pk = np.zeros((2 * span, d)); pk[:, :rng_d] = rng.standard_normal((2 * span, rng_d))
    pq = np.zeros((2 * span, d)); pq[:, :rng_d] = rng.standard_normal((2 * span, rng_d))
    v = np.eye(n)
    r = ports.build_relative_position(n, n, buckets, max_rel)
    c2p = np.take_along_axis(q @ pk.T, np.clip(r + span, 0, 2 * span - 1), -1)
    p2c = np.take_along_axis(k @ pq.T, np.clip(-r + span, 0, 2 * span - 1), -1).T
    scale = 1 / math.sqrt(3 * d)
    want = plain_attention(q, k, v, (c2p + p2c) * scale, scale)
    opts = json.dumps({"heads": 1, "d_head": d, "position": {
        "type": "deberta", "position_buckets": buckets,
        "max_relative_positions": max_rel}})
    got = db.execute("SELECT relattn_attention(?, ?, ?, ?, NULL, ?, ?)",
                     (f32(q), f32(k), f32(v), f32(pk), opts, f32(pq))).fetchone()[0]
    assert np.abs(from_f32(got, (n, d)) - want).max() < 1e-5
    if buckets > 0:      # the log part is reached and differs from the distance
        assert (np.abs(r) != np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])).any()


# ---- invariants ---------------------------------------------------------------

def test_t5_bucket_invariants():
    for nb, md in ((32, 128), (8, 20), (16, 50)):
        rel = np.arange(-3 * md, 3 * md + 1)
        b = ports.t5_relative_position_bucket(rel, True, nb, md)
        half, exact = nb // 2, nb // 4
        assert b.min() >= 0 and b.max() == nb - 1
        neg, pos = b[rel <= 0], b[rel > 0]
        assert neg.max() < half and pos.min() >= half           # a half each side
        assert (b[np.abs(rel) < exact] == np.where(rel[np.abs(rel) < exact] > 0,
                                                   half + rel[np.abs(rel) < exact],
                                                   -rel[np.abs(rel) < exact])).all()
        assert (np.diff(neg[::-1]) >= 0).all() and (np.diff(pos) >= 0).all()
        assert (b[rel >= md] == nb - 1).all() and (b[rel <= -md] == half - 1).all()
        # causal: only the past, all buckets on one side
        bc = ports.t5_relative_position_bucket(rel, False, nb, md)
        assert (bc[rel >= 0] == 0).all() and bc.max() == nb - 1


def test_deberta_log_bucket_invariants():
    for size, mp in ((256, 512), (16, 64), (8, 20)):
        mid = size // 2
        rel = np.arange(-3 * mp, 3 * mp + 1)
        b = ports.make_log_bucket_position(rel, size, mp)
        small = np.abs(rel) <= mid
        assert (b[small] == rel[small]).all()                   # exact near
        assert (b == -b[::-1]).all()                            # odd
        assert (np.diff(b) >= 0).all()                          # monotone
        assert b[rel == mp - 1][0] == size - 1                  # max_position - 1 -> last
        assert (np.abs(b[~small]) > mid).all()


def test_norms_and_activations(rng):
    x = rng.standard_normal((5, 32)) * 3 + 1
    y = ports.layer_norm(x, np.ones(32), np.zeros(32), 1e-12)
    assert np.abs(y.mean(-1)).max() < 1e-12 and np.abs(y.std(-1) - 1).max() < 1e-9
    z = ports.t5_layer_norm(x, np.ones(32), 1e-12)
    assert np.abs(np.sqrt((z ** 2).mean(-1)) - 1).max() < 1e-9
    assert not np.allclose(z, y)
    t = np.linspace(-6, 6, 241)
    g, gt = ports.ACT2FN["gelu"](t), ports.ACT2FN["gelu_new"](t)
    assert np.abs(g - gt).max() < 1e-3 and np.abs(g - gt).max() > 1e-5
    assert np.abs(g[t > 5] - t[t > 5]).max() < 1e-5 and np.abs(g[t < -5]).max() < 1e-5


def test_relative_key_constant_table_is_plain_attention(rng, tmp_path):
    """BertSelfAttention relative_key: a table whose rows are all one
    vector c adds q_i . c to each score of row i, which softmax ignores;
    relative_key_query adds k_j . c, which it does not."""
    ck = checkpoints.bert(tmp_path, rng, "BertModel", "relative_key")
    cfg = dict(ck.config)
    P = ports.Params(ck.params, "bert.")
    L = "encoder.layer.0."
    c = rng.standard_normal(P[L + "attention.self.distance_embedding.weight"].shape[1])
    P.p[L + "attention.self.distance_embedding.weight"][:] = c
    x = rng.standard_normal((20, cfg["hidden_size"]))
    h = cfg["num_attention_heads"]
    q = ports.heads_split(P.linear(x, L + "attention.self.query"), h)
    k = ports.heads_split(P.linear(x, L + "attention.self.key"), h)
    v = ports.heads_split(P.linear(x, L + "attention.self.value"), h)
    plain = ports.heads_merge(ports.softmax(q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])) @ v)
    assert np.abs(ports.bert_self_attention(cfg, P, L, x) - plain).max() < 1e-12
    cfg["position_embedding_type"] = "relative_key_query"
    assert np.abs(ports.bert_self_attention(cfg, P, L, x) - plain).max() > 1e-3


def test_deberta_without_position_terms_is_scaled_plain(rng, tmp_path):
    """DisentangledSelfAttention with pos_att_type empty: q.k / sqrt(d)
    only; with c2p and p2c the content score is scaled by 1/sqrt(3d)."""
    ck = checkpoints.deberta(tmp_path, rng, "DebertaV2Model", "v3")
    cfg = dict(ck.config, pos_att_type=[])
    P = ports.Params(ck.params, "deberta.")
    L = "encoder.layer.1."
    x = rng.standard_normal((17, cfg["hidden_size"]))
    h = cfg["num_attention_heads"]
    q = ports.heads_split(P.linear(x, L + "attention.self.query_proj"), h)
    k = ports.heads_split(P.linear(x, L + "attention.self.key_proj"), h)
    v = ports.heads_split(P.linear(x, L + "attention.self.value_proj"), h)
    plain = ports.heads_merge(ports.softmax(q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])) @ v)
    E = ports.deberta_rel_embeddings(cfg, P)
    r = ports.build_relative_position(17, 17, 16, 64)
    assert np.abs(ports.disentangled_self_attention(cfg, P, L, x, r, E) - plain).max() < 1e-12
    cfg["pos_att_type"] = ["c2p", "p2c"]
    assert np.abs(ports.disentangled_self_attention(cfg, P, L, x, r, E) - plain).max() > 1e-3


def test_t5_gated_gelu_and_relu_differ(rng, tmp_path):
    """T5's feed_forward_proj: 'gated-gelu' is gelu_new over wi_0 times
    wi_1; the port reads it, and a relu config of the same weights for
    wi_0 alone (wi) gives another result."""
    ck = checkpoints.t5(tmp_path, rng, "T5EncoderModel", "gated-gelu")
    assert ports.t5_feed_forward_act(ck.config) == (True, "gelu_new")
    assert ports.t5_feed_forward_act({"feed_forward_proj": "relu"}) == (False, "relu")
    assert ports.t5_feed_forward_act({"feed_forward_proj": "gated-relu"}) == (True, "relu")
    ids = rng.integers(0, ck.vocab_size, 12)
    gated = ports.forward(ck.config, ck.params, ids)["hidden"]
    plain = dict(ck.params)
    for i in range(ck.config["num_layers"]):
        D = f"encoder.block.{i}.layer.1.DenseReluDense."
        plain[D + "wi.weight"] = plain.pop(D + "wi_0.weight")
        del plain[D + "wi_1.weight"]
    relu = ports.forward(dict(ck.config, feed_forward_proj="relu"), plain, ids)["hidden"]
    assert np.abs(gated - relu).max() > 1e-2
    # RMS-normed output: each row has rms equal to the final weights' scale
    assert np.isfinite(gated).all()


# ---- the checkpoints: HF's names ----------------------------------------------

def test_checkpoint_names(rng, tmp_path):
    b = checkpoints.bert(tmp_path / "b", rng, "BertForMaskedLM", "relative_key_query")
    names = set(safetensors_py.read(b.read("weights"))[0])
    assert "bert.encoder.layer.1.attention.self.distance_embedding.weight" in names
    assert "bert.embeddings.token_type_embeddings.weight" in names
    assert {"cls.predictions.bias", "cls.predictions.transform.dense.weight",
            "cls.predictions.transform.LayerNorm.bias"} <= names
    assert not any(n.startswith("bert.pooler") for n in names)
    m = checkpoints.bert(tmp_path / "m", rng, "BertModel")
    names = set(safetensors_py.read(m.read("weights"))[0])
    assert "pooler.dense.weight" in names and "embeddings.LayerNorm.weight" in names
    d = checkpoints.deberta(tmp_path / "d", rng, "DebertaV2ForSequenceClassification")
    names = set(safetensors_py.read(d.read("weights"))[0])
    assert {"deberta.encoder.rel_embeddings.weight", "deberta.encoder.LayerNorm.weight",
            "deberta.encoder.layer.0.attention.self.query_proj.weight",
            "pooler.dense.weight", "classifier.bias"} <= names
    t = checkpoints.t5(tmp_path / "t", rng, "T5ForConditionalGeneration", "gated-gelu")
    names = set(safetensors_py.read(t.read("weights"))[0])
    assert {"shared.weight", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            "encoder.block.1.layer.1.DenseReluDense.wi_1.weight",
            "encoder.final_layer_norm.weight", "decoder.block.0.layer.1.EncDecAttention.q.weight",
            "lm_head.weight"} <= names
    assert "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight" not in names
    cfg = json.loads(t.read("config"))
    assert cfg["model_type"] == "t5" and cfg["feed_forward_proj"] == "gated-gelu"
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_proto=t.read("tokenizer"))
    assert (sp.pad_id(), sp.eos_id(), sp.unk_id(), sp.bos_id()) == (0, 1, 2, -1)
    sp = spm.SentencePieceProcessor(model_proto=d.read("tokenizer"))
    assert [sp.id_to_piece(i) for i in range(4)] == ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]


# ---- the ports against the native model, renamed by hand ----------------------

def native_config(hf, d, V, position, eps):
    return {"arch": "encoder", "vocab_size": V, "d_model": d,
            "n_layers": hf["num_hidden_layers"], "n_heads": hf["num_attention_heads"],
            "d_ff": hf["intermediate_size"], "norm": "post", "norm_eps": eps,
            "activation": "gelu", "tie_embeddings": True, "position": position,
            "tokenizer": {"type": "bytes", "bos": None, "eos": None, "pad": None}}


def native_layers(P, layers, names):
    """HF encoder layer tensors -> native names (post-norm: ln1 after
    attention, ln2 after the FFN)."""
    out = {}
    q, k, v = names
    for i in range(layers):
        L = f"encoder.layer.{i}."
        N = f"layers.{i}."
        for hf, nat in ((q, "q"), (k, "k"), (v, "v")):
            out[N + "attn.w" + nat] = P[L + "attention.self." + hf + ".weight"]
            out[N + "attn.b" + nat] = P[L + "attention.self." + hf + ".bias"]
        out[N + "attn.wo"] = P[L + "attention.output.dense.weight"]
        out[N + "attn.bo"] = P[L + "attention.output.dense.bias"]
        out[N + "ln1.weight"] = P[L + "attention.output.LayerNorm.weight"]
        out[N + "ln1.bias"] = P[L + "attention.output.LayerNorm.bias"]
        out[N + "ffn.w1"] = P[L + "intermediate.dense.weight"]
        out[N + "ffn.b1"] = P[L + "intermediate.dense.bias"]
        out[N + "ffn.w2"] = P[L + "output.dense.weight"]
        out[N + "ffn.b2"] = P[L + "output.dense.bias"]
        out[N + "ln2.weight"] = P[L + "output.LayerNorm.weight"]
        out[N + "ln2.bias"] = P[L + "output.LayerNorm.bias"]
    return out


def import_native(db, cfg, tensors):
    blob = safetensors_py.write({k: np.asarray(v, np.float32) for k, v in tensors.items()},
                                metadata={"relattn.config": json.dumps(cfg)})
    db.execute("SELECT relattn_import('native', ?)", (blob,))


@pytest.mark.parametrize("position", ["relative_key", "relative_key_query"])
def test_bert_port_matches_native(db, rng, tmp_path, position):
    ck = checkpoints.bert(tmp_path, rng, "BertModel", position)
    hf = ck.config
    P = ports.Params(ck.params, "bert.")
    d, V = hf["hidden_size"], max(hf["vocab_size"], 256)
    word = np.zeros((V, d))
    word[:hf["vocab_size"]] = P["embeddings.word_embeddings.weight"]
    # one segment: LayerNorm(word + type 0) is a per-token row
    tok = ports.layer_norm(word + P["embeddings.token_type_embeddings.weight"][0],
                           P["embeddings.LayerNorm.weight"], P["embeddings.LayerNorm.bias"],
                           hf["layer_norm_eps"])
    kind = "rel_key" if position == "relative_key" else "rel_key_query"
    cfg = native_config(hf, d, V, {"type": kind,
                                   "max_position_embeddings": hf["max_position_embeddings"]},
                        hf["layer_norm_eps"])
    t = {"tok_emb": tok}
    t.update(native_layers(P, hf["num_hidden_layers"], ("query", "key", "value")))
    for i in range(hf["num_hidden_layers"]):
        t[f"layers.{i}.attn.rel_k"] = P[f"encoder.layer.{i}.attention.self.distance_embedding.weight"]
    import_native(db, cfg, t)
    for n in (1, 9, hf["max_position_embeddings"]):
        ids = rng.integers(0, hf["vocab_size"], n)
        want = ports.forward(hf, ck.params, ids)["hidden"].mean(0)
        got = from_f32(db.execute("SELECT relattn_embed('native', ?)", (toks(ids),)).fetchone()[0])
        assert rel_err(got, want) < 1e-5, n


@pytest.mark.parametrize("style", ["v3", "v2"])
def test_deberta_port_matches_native(db, rng, tmp_path, style):
    ck = checkpoints.deberta(tmp_path, rng, "DebertaV2Model", style, type_vocab_size=0)
    hf = ck.config
    P = ports.Params(ck.params, "deberta.")
    d, V = hf["hidden_size"], max(hf["vocab_size"], 256)
    word = np.zeros((V, d))
    word[:hf["vocab_size"]] = P["embeddings.word_embeddings.weight"]
    tok = ports.layer_norm(word, P["embeddings.LayerNorm.weight"], P["embeddings.LayerNorm.bias"],
                           hf["layer_norm_eps"])
    buckets, mrp, _ = ports._deberta_spans(hf)
    pos = {"type": "deberta", "position_buckets": buckets, "max_relative_positions": mrp,
           "norm_rel_ebd": hf["norm_rel_ebd"]}
    cfg = native_config(hf, d, V, pos, hf["layer_norm_eps"])
    t = {"tok_emb": tok}
    t.update(native_layers(P, hf["num_hidden_layers"], ("query_proj", "key_proj", "value_proj")))
    t["rel_emb"] = P["encoder.rel_embeddings.weight"]
    if hf["norm_rel_ebd"] == "layer_norm":
        t["rel_emb_norm.weight"] = P["encoder.LayerNorm.weight"]
        t["rel_emb_norm.bias"] = P["encoder.LayerNorm.bias"]
    import_native(db, cfg, t)
    for n in (1, 7, 60):
        ids = rng.integers(0, hf["vocab_size"], n)
        want = ports.forward(hf, ck.params, ids)["hidden"].mean(0)
        got = from_f32(db.execute("SELECT relattn_embed('native', ?)", (toks(ids),)).fetchone()[0])
        assert rel_err(got, want) < 1e-5, n


# ---- with the forward pass's options (norm_kind, biases, ffn, embedding) ------

def test_bert_pair_port_matches_native_options(db, rng, tmp_path):
    """BertModel relative_key_query on a pair [CLS] A [SEP] B [SEP],
    renamed by hand onto embedding.norm and embedding.token_types 2 (type 1
    after the first tokenizer.sep), the checkpoint's vocab.txt as the
    tokenizer: the port's hidden states, averaged past [CLS], within 1e-5."""
    ck = checkpoints.bert(tmp_path, rng, "BertModel", "relative_key_query")
    hf = ck.config
    P = ports.Params(ck.params, "bert.")
    d = hf["hidden_size"]
    cfg = native_config(hf, d, hf["vocab_size"], {
        "type": "rel_key_query", "max_position_embeddings": hf["max_position_embeddings"]},
        hf["layer_norm_eps"])
    cfg["embedding"] = {"norm": True, "token_types": 2}
    cfg["tokenizer"] = {"type": "wordpiece", "bos": ck.special["cls"],
                        "sep": ck.special["sep"], "pad": ck.special["pad"]}
    t = {"tok_emb": P["embeddings.word_embeddings.weight"],
         "type_emb": P["embeddings.token_type_embeddings.weight"],
         "emb_norm.weight": P["embeddings.LayerNorm.weight"],
         "emb_norm.bias": P["embeddings.LayerNorm.bias"]}
    t.update(native_layers(P, hf["num_hidden_layers"], ("query", "key", "value")))
    for i in range(hf["num_hidden_layers"]):
        t[f"layers.{i}.attn.rel_k"] = P[f"encoder.layer.{i}.attention.self.distance_embedding.weight"]
    blob = safetensors_py.write({k: np.asarray(v, np.float32) for k, v in t.items()},
                                metadata={"relattn.config": json.dumps(cfg)})
    db.execute("SELECT relattn_import('native', ?, NULL, ?)", (blob, ck.read("tokenizer")))
    sep = ck.special["sep"]
    a = list(rng.integers(10, ck.n_pieces, 11))
    b = list(rng.integers(10, ck.n_pieces, 17))
    seq = a + [sep] + b + [sep]
    ids = [ck.special["cls"]] + seq
    types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    want = ports.forward(hf, ck.params, ids, types)["hidden"].mean(0)
    got = from_f32(db.execute("SELECT relattn_embed('native', ?)", (toks(seq),)).fetchone()[0])
    assert rel_err(got, want) < 1e-5
    # segment B's type row matters
    flat = ports.forward(hf, ck.params, ids)["hidden"].mean(0)
    assert rel_err(flat, want) > 1e-3


@pytest.mark.parametrize("ffn,shape", [("relu", {}), ("gated-gelu", {}),
                                       ("gated-gelu", dict(d=48, heads=3, d_kv=8))])
def test_t5_port_matches_native_options(db, rng, tmp_path, ffn, shape):
    """T5EncoderModel renamed by hand onto norm_kind rmsnorm, biases false,
    ffn plain / gated with relu / gelu_tanh, pre-norm with ln_f the
    final_layer_norm, position t5 with rel_bias the transpose of block 0's
    relative_attention_bias, d_head = d_kv when num_heads * d_kv is not
    d_model (flan-t5-small's shape); </s> passed as a token."""
    ck = checkpoints.t5(tmp_path, rng, "T5EncoderModel", ffn, **shape)
    hf = ck.config
    p = ck.params
    gated = ffn == "gated-gelu"
    cfg = {"arch": "encoder", "vocab_size": hf["vocab_size"], "d_model": hf["d_model"],
           "n_layers": hf["num_layers"], "n_heads": hf["num_heads"], "d_ff": hf["d_ff"],
           "norm": "pre", "norm_eps": hf["layer_norm_epsilon"],
           "activation": "gelu_tanh" if gated else "relu", "tie_embeddings": True,
           "norm_kind": "rmsnorm", "biases": False, "ffn": "gated" if gated else "plain",
           "position": {"type": "t5", "num_buckets": hf["relative_attention_num_buckets"],
                        "max_distance": hf["relative_attention_max_distance"]},
           "tokenizer": {"type": "sentencepiece", "pad": 0, "eos": 1}}
    if hf["d_kv"] * hf["num_heads"] != hf["d_model"]:
        cfg["d_head"] = hf["d_kv"]
    t = {"tok_emb": p["shared.weight"],
         "rel_bias": p["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"].T,
         "ln_f.weight": p["encoder.final_layer_norm.weight"]}
    for i in range(hf["num_layers"]):
        B, N = f"encoder.block.{i}.layer.", f"layers.{i}."
        for w in "qkvo":
            t[N + "attn.w" + w] = p[B + "0.SelfAttention." + w + ".weight"]
        t[N + "ln1.weight"] = p[B + "0.layer_norm.weight"]
        t[N + "ln2.weight"] = p[B + "1.layer_norm.weight"]
        D = B + "1.DenseReluDense."
        t[N + "ffn.w1"] = p[D + ("wi_0" if gated else "wi") + ".weight"]
        if gated:
            t[N + "ffn.w3"] = p[D + "wi_1.weight"]
        t[N + "ffn.w2"] = p[D + "wo.weight"]
    blob = safetensors_py.write({k: np.asarray(v, np.float32) for k, v in t.items()},
                                metadata={"relattn.config": json.dumps(cfg)})
    db.execute("SELECT relattn_import('native', ?, NULL, ?)", (blob, ck.read("tokenizer")))
    for n in (1, 12, 50):
        ids = list(rng.integers(3, ck.n_pieces, n)) + [1]
        want = ports.forward(hf, p, ids)["hidden"].mean(0)
        got = from_f32(db.execute("SELECT relattn_embed('native', ?)", (toks(ids),)).fetchone()[0])
        assert rel_err(got, want) < 1e-5, n
