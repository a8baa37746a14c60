"""Random models of a given config, with DESIGN sec. 4 tensor names, for the
tests (the store's, the forward pass's, the batch scan's).

    cfg = modelgen.config(d_model=32, n_layers=2, n_heads=4, clip=3)
    tensors = modelgen.tensors(cfg, rng)              # {name: float32 array}
    blob = modelgen.safetensors(cfg, rng)             # a file for relattn_import
    db.execute("SELECT relattn_import('m', ?)", (blob,))

tensors() returns them in the order the store keeps them (tok_emb, each
layer's, ln_f, lm_head). Weights are scaled so activations stay O(1).
"""
import copy
import json

import numpy as np

import safetensors_py

BASE = {
    "arch": "decoder", "vocab_size": 259, "d_model": 16, "n_layers": 2,
    "n_heads": 2, "d_ff": 32, "norm": "pre", "norm_eps": 1e-5,
    "activation": "gelu", "tie_embeddings": True,
    "position": {"type": "shaw", "clip": 4, "values": True, "per_head": False},
    "tokenizer": {"type": "bytes", "bos": 256, "eos": 257, "pad": 258},
}

POSITION_KEYS = ("clip", "values", "per_head")
TOKENIZER_KEYS = ("bos", "eos", "pad", "sep")


def config(**kw):
    """BASE with overrides; clip/values/per_head and bos/eos/pad/sep may be
    given flat (config(clip=8, bos=None))."""
    c = copy.deepcopy(BASE)
    for k, v in kw.items():
        if k in POSITION_KEYS:
            c["position"][k] = v
        elif k in TOKENIZER_KEYS:
            c["tokenizer"][k] = v
        else:
            c[k] = v
    return c


def shapes(cfg):
    """[(name, shape)] in the store's order."""
    d, f, v = cfg["d_model"], cfg["d_ff"], cfg["vocab_size"]
    h = cfg["n_heads"]
    dh = cfg.get("d_head", d // h)   # the heads' width; inner width h * dh
    hd = h * dh
    pos = cfg["position"]
    shaw = pos.get("type", "shaw") == "shaw"
    rows = 2 * pos.get("clip", 0) + 1
    rel = [h, rows, dh] if pos.get("per_head") else [rows, dh]
    if pos.get("type") in ("rel_key", "rel_key_query"):
        shaw, rel = True, [2 * pos["max_position_embeddings"] - 1, dh]
    rms = cfg.get("norm_kind", "layernorm") == "rmsnorm"
    biases = cfg.get("biases", True)
    gated = cfg.get("ffn", "plain") == "gated"
    emb = cfg.get("embedding", {})
    out = [("tok_emb", [v, d])]
    for i in range(cfg["n_layers"]):
        p = f"layers.{i}."
        out += [(p + "ln1.weight", [d]), (p + "ln1.bias", [d])]
        out += [(p + "attn." + w, [hd, d]) for w in ("wq", "wk", "wv")]
        out += [(p + "attn.wo", [d, hd])]
        out += [(p + "attn." + b, [hd]) for b in ("bq", "bk", "bv")]
        out += [(p + "attn.bo", [d])]
        if shaw:
            out += [(p + "attn.rel_k", rel)]
        if pos.get("type") == "xl":
            out += [(p + "attn.wr", [hd, d]), (p + "attn.u", [h, dh]),
                    (p + "attn.w", [h, dh])]
        if shaw and pos.get("values"):
            out += [(p + "attn.rel_v", rel)]
        out += [(p + "ln2.weight", [d]), (p + "ln2.bias", [d])]
        out += [(p + "ffn.w1", [f, d]), (p + "ffn.b1", [f])]
        if gated:
            out += [(p + "ffn.w3", [f, d]), (p + "ffn.b3", [f])]
        out += [(p + "ffn.w2", [d, f]), (p + "ffn.b2", [d])]
    if cfg["norm"] == "pre":
        out += [("ln_f.weight", [d]), ("ln_f.bias", [d])]
    head = cfg.get("head", "lm")
    if not cfg["tie_embeddings"] and head in ("lm", "mlm"):
        out += [("lm_head", [v, d])]
    if pos.get("type") == "t5":
        out += [("rel_bias", [h, pos.get("num_buckets", 32)])]
    if pos.get("type") == "absolute":
        out += [("pos_emb", [pos["max_len"], d])]
    if pos.get("type") == "deberta":
        b = pos.get("position_buckets", 256)
        out += [("rel_emb", [2 * (b if b > 0 else pos.get("max_relative_positions", 512)), d])]
        if pos.get("norm_rel_ebd", "none") == "layer_norm":
            out += [("rel_emb_norm.weight", [d]), ("rel_emb_norm.bias", [d])]
    if head == "mlm":
        out += [("mlm.dense.weight", [d, d]), ("mlm.dense.bias", [d]),
                ("mlm.norm.weight", [d]), ("mlm.norm.bias", [d]),
                ("mlm.bias", [v])]
    if cfg.get("pooler"):
        out += [("pooler.weight", [d, d]), ("pooler.bias", [d])]
    if head == "classifier":
        n = len(cfg["labels"])
        out += [("classifier.weight", [n, d]), ("classifier.bias", [n])]
    if emb.get("token_types", 0):
        out += [("type_emb", [emb["token_types"], d])]
    if emb.get("norm", False):
        out += [("emb_norm.weight", [d]), ("emb_norm.bias", [d])]
    # the norms' biases go with rmsnorm, the linear layers' with biases false
    # (the heads' linear biases stay)
    linear = ("bq", "bk", "bv", "bo", "b1", "b2", "b3")
    heads = ("mlm.dense.bias", "mlm.bias", "pooler.bias", "classifier.bias")
    return [(n, s) for n, s in out
            if not (rms and n.endswith(".bias") and n not in heads)
            and not (not biases and n.rsplit(".", 1)[-1] in linear)]


def tensors(cfg, rng):
    """{name: float32 array}: LayerNorm weights near 1, biases small, matrices
    ~ N(0, 1/fan_in), embeddings and relative tables ~ N(0, 0.5)."""
    out = {}
    for name, shape in shapes(cfg):
        leaf = name.rsplit(".", 1)[-1]
        if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name in (
                "ln_f.weight", "rel_emb_norm.weight", "emb_norm.weight", "mlm.norm.weight"):
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:
            a = 0.1 * rng.standard_normal(shape)
        elif name == "rel_bias":
            a = rng.standard_normal(shape)
        elif leaf in ("rel_k", "rel_v") or name in ("tok_emb", "lm_head", "pos_emb", "rel_emb",
                                                     "type_emb"):
            a = 0.5 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / np.sqrt(shape[-1])
        out[name] = a.astype(np.float32)
    return out


def safetensors(cfg, rng=None, weights=None, dtype="F32", metadata=True):
    """A safetensors file of the model; config in __metadata__ unless
    metadata is False. dtype F32, F16 or BF16 for every tensor."""
    if weights is None:
        weights = tensors(cfg, rng)
    enc = {}
    for name, a in weights.items():
        if dtype == "F32":
            enc[name] = a.astype(np.float32)
        elif dtype == "F16":
            enc[name] = a.astype(np.float16)
        else:
            enc[name] = ("BF16", list(a.shape), safetensors_py.bf16_bytes(a))
    meta = {"relattn.config": json.dumps(cfg)} if metadata else None
    return safetensors_py.write(enc, metadata=meta)


def load(db, name, cfg, rng=None, weights=None, dtype="F32"):
    """Imports a random (or given) model; returns its float32 weights as the
    model computes with them (after the F16/BF16 rounding)."""
    if weights is None:
        weights = tensors(cfg, rng)
    blob = safetensors(cfg, weights=weights, dtype=dtype)
    db.execute("SELECT relattn_import(?, ?)", (name, blob))
    got, _ = safetensors_py.read(blob)
    return {k: safetensors_py.to_array(*v) for k, v in got.items()}
