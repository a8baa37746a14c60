"""A float64 numpy reference of a relattn model's forward pass, written from
DESIGN §4-6 (not from src/forward.c), plus random models to test it on.

    cfg = random_config(rng, arch="decoder", norm="pre", ...)
    params = random_params(rng, cfg)
    out = forward(cfg, params, input_ids)      # hidden, logprobs, maps
    blob = safetensors_bytes(params, cfg)      # for relattn_import
"""
import json
import math
import struct

import numpy as np

from position_ports import (bert_relative_scores, bloom_slopes,
                            build_relative_position, rope_rotate, t5_bucket,
                            xl_table)


def random_config(rng, arch="decoder", norm="pre", activation="gelu",
                  tie=True, clip=4, values=True, per_head=False, bos=True,
                  d_model=32, n_heads=4, n_layers=2, d_ff=48, vocab_size=260,
                  position=None, options=None, sep=None):
    """position: the config's position object (default shaw with clip,
    values, per_head); options: the forward pass's optional keys (norm_kind,
    biases, ffn, embedding), added as given; sep: tokenizer.sep."""
    cfg = {
        "arch": arch, "vocab_size": vocab_size, "d_model": d_model,
        "n_layers": n_layers, "n_heads": n_heads, "d_ff": d_ff,
        "norm": norm, "norm_eps": 1e-5, "activation": activation,
        "tie_embeddings": tie,
        "position": {"type": "shaw", "clip": clip, "values": values,
                     "per_head": per_head},
        "tokenizer": {"type": "bytes", "bos": 256 if bos else None,
                      "eos": 257, "pad": 258},
    }
    if position is not None:
        cfg["position"] = dict(position)
    if options:
        cfg.update(json.loads(json.dumps(options)))
    if sep is not None:
        cfg["tokenizer"]["sep"] = sep
    return cfg


def options_of(cfg):
    """The forward pass's options with their defaults: (rmsnorm, biases,
    gated, embedding norm, token types)."""
    emb = cfg.get("embedding", {})
    return (cfg.get("norm_kind", "layernorm") == "rmsnorm",
            cfg.get("biases", True), cfg.get("ffn", "plain") == "gated",
            emb.get("norm", False), emb.get("token_types", 0))


def random_params(rng, cfg):
    """Weights scaled so activations stay O(1) and the softmaxes are neither
    flat nor one-hot; LayerNorm gains around 1."""
    d, f, v = cfg["d_model"], cfg["d_ff"], cfg["vocab_size"]
    h = cfg["n_heads"]
    dh = cfg.get("d_head", d // h)   # d_head: the heads' width, h dh in all
    hd = h * dh
    pos = cfg["position"]
    shaw = pos["type"] == "shaw"
    bert = pos["type"] in ("rel_key", "rel_key_query")
    rows = 2 * pos["clip"] + 1 if shaw else 0
    tab = (h, rows, dh) if shaw and pos["per_head"] else (rows, dh)
    if bert:
        tab = (2 * max(pos.get("max_position_embeddings", 1), 1) - 1, dh)

    def u(*shape, scale=1.0, offset=0.0):
        return (offset + scale * rng.uniform(-1, 1, shape)).astype(np.float32)

    rms, biases, gated, emb_norm, types = options_of(cfg)
    p = {"tok_emb": u(v, d)}
    for i in range(cfg["n_layers"]):
        pre = f"layers.{i}."
        p[pre + "ln1.weight"] = u(d, scale=0.3, offset=1.0)
        p[pre + "ln1.bias"] = u(d, scale=0.1)
        for w, s in (("wq", 2.0), ("wk", 2.0), ("wv", 1.0)):
            p[pre + "attn." + w] = u(hd, d, scale=s / math.sqrt(d))
        p[pre + "attn.wo"] = u(d, hd, scale=1.0 / math.sqrt(hd))
        for b in ("bq", "bk", "bv"):
            p[pre + "attn." + b] = u(hd, scale=0.1)
        p[pre + "attn.bo"] = u(d, scale=0.1)
        if shaw or bert:
            p[pre + "attn.rel_k"] = u(*tab)
        if pos["type"] == "xl":
            p[pre + "attn.wr"] = u(hd, d, scale=1 / math.sqrt(d))
            p[pre + "attn.u"] = u(h, dh, scale=0.5)
            p[pre + "attn.w"] = u(h, dh, scale=0.5)
        if shaw and pos["values"]:
            p[pre + "attn.rel_v"] = u(*tab)
        p[pre + "ln2.weight"] = u(d, scale=0.3, offset=1.0)
        p[pre + "ln2.bias"] = u(d, scale=0.1)
        p[pre + "ffn.w1"] = u(f, d, scale=1 / math.sqrt(d))
        p[pre + "ffn.b1"] = u(f, scale=0.1)
        if gated:
            p[pre + "ffn.w3"] = u(f, d, scale=2 / math.sqrt(d))
            p[pre + "ffn.b3"] = u(f, scale=0.1)
        p[pre + "ffn.w2"] = u(d, f, scale=1 / math.sqrt(f))
        p[pre + "ffn.b2"] = u(d, scale=0.1)
    if cfg["norm"] == "pre":
        p["ln_f.weight"] = u(d, scale=0.3, offset=1.0)
        p["ln_f.bias"] = u(d, scale=0.1)
    head = cfg.get("head", "lm")
    if not cfg["tie_embeddings"] and head in ("lm", "mlm"):
        p["lm_head"] = u(v, d)
    if pos["type"] == "t5":
        p["rel_bias"] = u(h, pos.get("num_buckets", 32), scale=2.0)
    if pos["type"] == "absolute":
        p["pos_emb"] = u(max(pos.get("max_len", 1), 1), d)
    if pos["type"] == "deberta":
        p["rel_emb"] = u(2 * deberta_span(pos), d)
        if pos.get("norm_rel_ebd", "none") == "layer_norm":
            p["rel_emb_norm.weight"] = u(d, scale=0.3, offset=1.0)
            p["rel_emb_norm.bias"] = u(d, scale=0.1)
    if types:
        p["type_emb"] = u(types, d)
    if emb_norm:
        p["emb_norm.weight"] = u(d, scale=0.3, offset=1.0)
        p["emb_norm.bias"] = u(d, scale=0.1)
    if head == "mlm":
        p["mlm.dense.weight"] = u(d, d, scale=2 / math.sqrt(d))
        p["mlm.dense.bias"] = u(d, scale=0.3)
        p["mlm.norm.weight"] = u(d, scale=0.3, offset=1.0)
        p["mlm.norm.bias"] = u(d, scale=0.1)
        p["mlm.bias"] = u(v, scale=0.5)
    if cfg.get("pooler"):
        p["pooler.weight"] = u(d, d, scale=2 / math.sqrt(d))
        p["pooler.bias"] = u(d, scale=0.3)
    if head in ("classifier", "token_classifier"):
        n = len(cfg["labels"])
        p["classifier.weight"] = u(n, d, scale=3 / math.sqrt(d))
        p["classifier.bias"] = u(n, scale=0.3)
    # what the options leave out: the norms' biases with rmsnorm, the
    # linear layers' with biases false (the heads' linear biases stay)
    for name in list(p):
        leaf = name.rsplit(".", 1)[-1]
        if (rms and leaf == "bias" and name not in (
                "mlm.dense.bias", "mlm.bias", "pooler.bias", "classifier.bias")) or (not biases and leaf in (
                "bq", "bk", "bv", "bo", "b1", "b2", "b3")):
            del p[name]
    return p


def with_head(cfg, head, pooler=None, labels=None, problem_type=None,
              head_activation=None, mask=None):
    """cfg with a head (an encoder's): mlm, classifier (labels), none;
    pooler: its activation or None; mask: tokenizer.mask."""
    c = json.loads(json.dumps(cfg))
    c["arch"] = "encoder"
    c["head"] = head
    if pooler:
        c["pooler"] = {"activation": pooler}
    if labels is not None:
        c["labels"] = list(labels)
    if problem_type:
        c["problem_type"] = problem_type
    if head_activation:
        c["head_activation"] = head_activation
    if mask is not None:
        c["tokenizer"]["mask"] = mask
    return c


def deberta_span(pos):
    """DeBERTa-v2's att_span: position_buckets (256) if over 0, else
    max_relative_positions (512)."""
    b = pos.get("position_buckets", 256)
    return b if b > 0 else pos.get("max_relative_positions", 512)


def safetensors_bytes(params, cfg=None):
    """A safetensors file (F32), the config in __metadata__ when given."""
    header, chunks, off = {}, [], 0
    for name, a in params.items():
        raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if cfg is not None:
        header["__metadata__"] = {"relattn.config": json.dumps(cfg)}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(chunks)


# ---- the reference --------------------------------------------------------

def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)  # biased, as PyTorch
    return (x - mean) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    """HF T5LayerNorm (transformers/models/t5/modeling_t5.py): no mean
    taken, no bias."""
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    """HF's gelu_new / gelu_pytorch_tanh (transformers/activations.py
    NewGELUActivation): the tanh approximation."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) *
                                    (x + 0.044715 * x ** 3)))


ACTIVATIONS = {"gelu": gelu, "gelu_tanh": gelu_tanh,
               "relu": lambda t: np.maximum(t, 0)}


def token_types(cfg, ids):
    """HF's pair encoding [CLS] A [SEP] B [SEP]: 0 up to and including the
    first sep, 1 after it (when there are 2 types or more and a sep)."""
    sep = cfg["tokenizer"].get("sep")
    types = np.zeros(len(ids), dtype=int)
    if options_of(cfg)[4] >= 2 and sep is not None and sep in ids:
        types[list(ids).index(sep) + 1:] = 1
    return types


def shaw_attention(q, k, v, rel_k, rel_v, clip, causal):
    """One head (DESIGN §5): q, k, v (n, d); rel_k, rel_v (2k+1, d) or None.
    Returns z (n, d) and the weights (n, n)."""
    n, d = q.shape
    idx = np.arange(n)
    r = np.clip(idx[None, :] - idx[:, None], -clip, clip) + clip  # r[i, j]
    e = q @ k.T
    if rel_k is not None:
        e = e + np.einsum("id,ijd->ij", q, rel_k[r])
    e = e / math.sqrt(d)
    if causal:
        e = np.where(idx[None, :] > idx[:, None], -np.inf, e)
    e = e - e.max(-1, keepdims=True)
    a = np.exp(e)
    a = a / a.sum(-1, keepdims=True)
    z = a @ v
    if rel_v is not None:
        z = z + np.einsum("ij,ijd->id", a, rel_v[r])
    return z, a


def scheme_attention(q, k, v, pos, head, n_heads, rel_bias, causal,
                     rel_k=None, xl=None, deb=None, deb_quant=None):
    """One head under a position scheme other than shaw (position_ports.py
    has each reference's port): returns z (n, d) and the weights (n, n).
    deb_quant: (act, table) functions for an int8 model's c2p and p2c
    products: q and k rows as act rounds them, each table's rows as table
    does."""
    n, d = q.shape
    idx = np.arange(n)
    rel = idx[None, :] - idx[:, None]                    # j - i
    kind = pos["type"]
    if kind == "t5":        # HF T5Attention: unscaled scores + position_bias
        b = t5_bucket(rel, not causal, pos.get("num_buckets", 32),
                      pos.get("max_distance", 128))
        e = q @ k.T + rel_bias[head][b]
    elif kind == "alibi":   # BLOOM: slope * key position (causal), else -m|j-i|
        m = bloom_slopes(n_heads)[head]
        bias = m * idx[None, :] if causal else -m * np.abs(rel)
        e = q @ k.T / math.sqrt(d) + bias
    elif kind in ("rel_key", "rel_key_query"):   # the layer's table
        e = bert_relative_scores(q, k, rel_k, kind == "rel_key_query")
        e = e / math.sqrt(d)
    elif kind == "xl":      # (q + u).k + (q + w).R[clip(j - i) + c], R = W_r sinusoid
        R, u_h, w_h = xl
        c = (R.shape[0] - 1) // 2
        Rr = R[np.clip(rel, -c, c) + c]                       # (n, n, d)
        e = (q + u_h) @ k.T + np.einsum("id,ijd->ij", q + w_h, Rr)
        e = e / math.sqrt(d)
    elif kind == "deberta":  # HF DisentangledSelfAttention, c2p and p2c
        pk, pq = deb                                          # (2 span, d) each
        span = pk.shape[0] // 2
        qt, kt = q, k
        if deb_quant:
            act, table = deb_quant
            qt, kt, pk, pq = act(q), act(k), table(pk), table(pq)
        r = build_relative_position(n, pos.get("position_buckets", 256),
                                    pos.get("max_relative_positions", 512))
        c2p = np.take_along_axis(qt @ pk.T, np.clip(r + span, 0, 2 * span - 1), -1)
        p2c = np.take_along_axis(kt @ pq.T, np.clip(-r + span, 0, 2 * span - 1),
                                 -1).T
        e = (q @ k.T + c2p + p2c) / math.sqrt(3 * d)
    elif kind == "rope":
        rd = pos.get("rotary_dim", d)
        base = pos.get("base", 10000)
        half = pos.get("rotary", "half") == "half"
        e = rope_rotate(q, rd, base, half) @ rope_rotate(k, rd, base, half).T
        e = e / math.sqrt(d)
    else:                   # none, absolute (its positions are in the input)
        e = q @ k.T / math.sqrt(d)
    if causal:
        e = np.where(idx[None, :] > idx[:, None], -np.inf, e)
    e = e - e.max(-1, keepdims=True)
    a = np.exp(e)
    a = a / a.sum(-1, keepdims=True)
    return a @ v, a


def forward(cfg, params, ids, maps=False, act_quant=None, head_quant=None, deb_quant=None):
    """The model on its input ids (BOS already in front). Returns hidden
    (n, d) after the last norm, logprobs (n, V) (decoders) and, with maps,
    maps[layer][head] (n, n). act_quant: a function of a (rows, in) array
    the layers' linear weights (wq wk wv wo w1 w3 w2) see instead of their
    input, the activations of an int8 model as its kernel rounds them;
    head_quant: the same for the output embedding's input (an int8
    tok_emb or lm_head); deb_quant: scheme_attention's, for DeBERTa's
    position tables, which then come from rel_emb's rows through act_quant
    too."""
    p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
    d, h = cfg["d_model"], cfg["n_heads"]
    dh = cfg.get("d_head", d // h)   # head hd is columns hd*dh .. of q, k, v
    eps = cfg["norm_eps"]
    pos = cfg["position"]
    clip = pos.get("clip", 0)
    causal = cfg["arch"] == "decoder"
    pre = cfg["norm"] == "pre"
    act = ACTIVATIONS[cfg["activation"]]
    rms, _, gated, emb_norm, types = options_of(cfg)

    def norm(t, w, b, eps):   # the config's norm; b None without bias
        if rms:
            return rms_norm(t, w, eps)
        return layer_norm(t, w, 0.0 if b is None else b, eps)

    x = p["tok_emb"][np.asarray(ids)]
    if pos["type"] == "absolute":   # learned positions added to the input
        x = x + p["pos_emb"][:len(ids)]
    if types:
        x = x + p["type_emb"][token_types(cfg, ids)]
    if emb_norm:
        x = norm(x, p["emb_norm.weight"], p.get("emb_norm.bias"), eps)
    all_maps = []

    def lin(t, name_w, name_b):
        return t @ p[name_w].T + p.get(name_b, 0.0)

    def llin(t, name_w, name_b):   # a layer's linear weight
        return lin(act_quant(t) if act_quant else t, name_w, name_b)

    for i in range(cfg["n_layers"]):
        L = f"layers.{i}."
        a_in = norm(x, p[L + "ln1.weight"], p.get(L + "ln1.bias"), eps) if pre else x
        q = llin(a_in, L + "attn.wq", L + "attn.bq")
        k = llin(a_in, L + "attn.wk", L + "attn.bk")
        v = llin(a_in, L + "attn.wv", L + "attn.bv")
        z = np.zeros_like(q)
        layer_maps = []
        if pos["type"] == "xl":
            R_all = xl_table(p[L + "attn.wr"], h, dh, pos["clip"], d)
        if pos["type"] == "deberta":   # the shared table through this layer's wk, wq
            E = p["rel_emb"]
            if pos.get("norm_rel_ebd", "none") == "layer_norm":   # get_rel_embedding
                E = norm(E, p["rel_emb_norm.weight"], p.get("rel_emb_norm.bias"), eps)
            # an int8 model's tables come from its int8 layers as their
            # products take any input (deb_quant: rows rounded as act_quant)
            proj = llin if deb_quant else lin
            PK = proj(E, L + "attn.wk", L + "attn.bk")
            PQ = proj(E, L + "attn.wq", L + "attn.bq")
        for hd in range(h):
            s = slice(hd * dh, (hd + 1) * dh)
            if pos["type"] != "shaw":
                z[:, s], w = scheme_attention(q[:, s], k[:, s], v[:, s], pos,
                                              hd, h, p.get("rel_bias"), causal,
                                              p.get(L + "attn.rel_k"),
                                              (R_all[hd], p[L + "attn.u"][hd],
                                               p[L + "attn.w"][hd])
                                              if pos["type"] == "xl" else None,
                                              (PK[:, s], PQ[:, s])
                                              if pos["type"] == "deberta" else None,
                                              deb_quant)
                layer_maps.append(w)
                continue
            rk = p[L + "attn.rel_k"]
            rv = p.get(L + "attn.rel_v") if pos["values"] else None
            if pos["per_head"]:
                rk = rk[hd]
                rv = rv[hd] if rv is not None else None
            z[:, s], w = shaw_attention(q[:, s], k[:, s], v[:, s], rk, rv,
                                        clip, causal)
            layer_maps.append(w)
        all_maps.append(layer_maps)
        x = x + llin(z, L + "attn.wo", L + "attn.bo")
        if not pre:
            x = norm(x, p[L + "ln1.weight"], p.get(L + "ln1.bias"), eps)
        f_in = norm(x, p[L + "ln2.weight"], p.get(L + "ln2.bias"), eps) if pre else x
        hid = act(llin(f_in, L + "ffn.w1", L + "ffn.b1"))
        if gated:   # HF T5DenseGatedActDense: act(wi_0 h) * wi_1 h
            hid = hid * llin(f_in, L + "ffn.w3", L + "ffn.b3")
        x = x + llin(hid, L + "ffn.w2", L + "ffn.b2")
        if not pre:
            x = norm(x, p[L + "ln2.weight"], p.get(L + "ln2.bias"), eps)
    if pre:
        x = norm(x, p["ln_f.weight"], p.get("ln_f.bias"), eps)
    out = {"hidden": x}
    if causal:
        head = p["tok_emb"] if cfg["tie_embeddings"] else p["lm_head"]
        logits = (head_quant(x) if head_quant else x) @ head.T
        m = logits.max(-1, keepdims=True)
        out["logprobs"] = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
    if maps:
        out["maps"] = all_maps
    return out


# ---- heads -------------------------------------------------------------------
# Written from Hugging Face transformers' models/bert/modeling_bert.py
# (BertPredictionHeadTransform: dense, act, LayerNorm; BertLMPredictionHead:
# decoder tied to the word embeddings, plus its own bias; BertPooler: dense
# and tanh on the first token; BertForSequenceClassification: classifier on
# the pooled output) and models/deberta_v2/modeling_deberta_v2.py
# (ContextPooler: dense then pooler_hidden_act on token 0).

def activation(name):
    if name == "gelu":
        return gelu
    if name == "gelu_tanh":   # HF gelu_new / gelu_pytorch_tanh
        return gelu_tanh
    if name == "relu":
        return lambda t: np.maximum(t, 0)
    return np.tanh


def heads(cfg, params, ids, act_quant=None, head_quant=None, deb_quant=None):
    """The heads on the final hidden rows of ids: cls (d), pooled (d, or
    None), logits (labels, or None), probs (softmax / sigmoid / None),
    mlm (n, V) log-probs at every row (mlm head, else None)."""
    p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
    x = forward(cfg, params, ids, act_quant=act_quant, deb_quant=deb_quant)["hidden"]
    out = {"hidden": x, "cls": x[0], "pooled": None, "logits": None,
           "probs": None, "mlm": None}
    head = cfg.get("head", "lm")
    if cfg.get("pooler"):
        act = activation(cfg["pooler"].get("activation", "tanh"))
        out["pooled"] = act(x[0] @ p["pooler.weight"].T + p["pooler.bias"])
    if head == "classifier":
        inp = out["pooled"] if out["pooled"] is not None else x[0]
        z = inp @ p["classifier.weight"].T + p["classifier.bias"]
        out["logits"] = z
        kind = cfg.get("problem_type", "single_label_classification")
        if kind == "single_label_classification":
            e = np.exp(z - z.max())
            out["probs"] = e / e.sum()
        elif kind == "multi_label_classification":
            out["probs"] = 1 / (1 + np.exp(-z))
    if head == "mlm":
        act = activation(cfg.get("head_activation", "gelu"))
        h = act(x @ p["mlm.dense.weight"].T + p["mlm.dense.bias"])
        if options_of(cfg)[0]:     # rmsnorm: the head's norm too
            h = rms_norm(h, p["mlm.norm.weight"], cfg["norm_eps"])
        else:
            h = layer_norm(h, p["mlm.norm.weight"], p["mlm.norm.bias"],
                           cfg["norm_eps"])
        E = p["tok_emb"] if cfg["tie_embeddings"] else p["lm_head"]
        z = (head_quant(h) if head_quant else h) @ E.T + p["mlm.bias"]
        m = z.max(-1, keepdims=True)
        out["mlm"] = z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))
    return out


# ---- DESIGN §6: what the SQL functions return ------------------------------

def model_input(cfg, tokens):
    """[bos] + tokens + [append], each when the tokenizer has it."""
    bos = cfg["tokenizer"].get("bos")
    append = cfg["tokenizer"].get("append")
    return (([bos] if bos is not None else []) + list(tokens)
            + ([append] if append is not None else []))


def logprob_rows(cfg, params, tokens):
    """(pos, token, logprob, top_token, top_logprob) per scored token."""
    ids = model_input(cfg, tokens)
    lp = forward(cfg, params, ids)["logprobs"]
    off = 1 if cfg["tokenizer"].get("bos") is not None else 0
    rows = []
    for i in range(len(ids) - 1):  # input row i predicts ids[i + 1]
        rows.append((i + 1 - off, ids[i + 1], lp[i, ids[i + 1]],
                     int(lp[i].argmax()), lp[i].max()))
    return rows


def score(cfg, params, tokens):
    return sum(r[2] for r in logprob_rows(cfg, params, tokens))


def embedding(cfg, params, tokens):
    """relattn_embed's mean: every input row, bos and the appended token
    too (sentence-transformers' mean over the attention mask)."""
    ids = model_input(cfg, tokens)
    return forward(cfg, params, ids)["hidden"].mean(0)
