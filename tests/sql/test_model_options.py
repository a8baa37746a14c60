"""The forward pass's options (docs/reference.md, Model config): norm_kind,
biases, ffn, activation gelu_tanh, embedding.norm and embedding.token_types
with tokenizer.sep, alone and in the combinations Hugging Face families use
(T5: pre-norm, rmsnorm, no biases, gated gelu_tanh; BERT: post-norm, an
embedding LayerNorm, two token types). relattn_logprobs, relattn_score and
relattn_embed against the float64 reference (tests/sql/reference_model.py)
on fresh random models; export gives back the bytes and the options, and the
exported file imports to the same results; errors for bad values and for
tensors the options leave out or need, exact text.

Tolerances (as tests/sql/test_model_schemes.py): per-token log-probs 1e-4
absolute; embeddings 1e-5 relative (L2); attention maps 1e-5 absolute."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import modelgen  # noqa: E402
import reference_model as ref  # noqa: E402
import safetensors_py  # noqa: E402
from conftest import attention_maps, from_f32, rel_err  # noqa: E402

SEP = 259  # the byte tokenizer's ids over 255: bos 256, eos 257, pad 258

T5 = {"type": "t5", "num_buckets": 8, "max_distance": 20}
# name: (random_config arguments, the options)
CASES = {
    "rmsnorm": ({}, {"norm_kind": "rmsnorm"}),
    "no-biases": ({}, {"biases": False}),
    "gated": ({"d_ff": 45}, {"ffn": "gated"}),
    "gelu_tanh": ({"activation": "gelu_tanh", "d_ff": 45}, {}),
    "gated-relu": ({"activation": "relu"}, {"ffn": "gated", "biases": False}),
    "emb-norm": ({}, {"embedding": {"norm": True}}),
    "emb-norm-rms": ({}, {"embedding": {"norm": True}, "norm_kind": "rmsnorm"}),
    "types": ({"sep": SEP}, {"embedding": {"token_types": 3}}),
    "t5-like": ({"activation": "gelu_tanh", "position": T5},
                {"norm_kind": "rmsnorm", "biases": False, "ffn": "gated"}),
    "bert-like": ({"sep": SEP, "position": {"type": "rel_key_query",
                                            "max_position_embeddings": 90}},
                  {"embedding": {"norm": True, "token_types": 2}}),
    "deberta-rms": ({"position": {"type": "deberta", "position_buckets": 8,
                                  "max_relative_positions": 20,
                                  "norm_rel_ebd": "layer_norm"}},
                    {"norm_kind": "rmsnorm", "embedding": {"norm": True}}),
}
# the families' norm placement, for the encoder runs
ENCODER_NORM = {"t5-like": "pre"}


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


def random_tokens(rng, n, cfg):
    """Bytes, with a sep or two in the middle when the model has one (the
    type switches at the first only)."""
    t = [int(t) for t in rng.integers(0, 256, n)]
    if cfg["tokenizer"].get("sep") is not None and n > 4:
        t[int(rng.integers(1, n // 2))] = SEP
        t[int(rng.integers(n // 2, n - 1))] = SEP
    return t


def make(rng, case, arch, norm):
    kw, options = CASES[case]
    kw = dict(kw)
    cfg = ref.random_config(rng, arch=arch, norm=norm, n_heads=3, d_model=24,
                            bos=arch == "decoder", options=options, **kw)
    return cfg, ref.random_params(rng, cfg)


def without_options(cfg):
    """The same config with today's defaults: what the test would see if
    the options did nothing (the reference ignores tensors it does not use
    and treats a missing bias as 0)."""
    plain = {k: v for k, v in cfg.items()
             if k not in ("norm_kind", "biases", "ffn", "embedding")}
    if plain["activation"] == "gelu_tanh":
        plain["activation"] = "gelu"
    return plain


def export(db, name):
    return db.execute("SELECT relattn_export(?)", (name,)).fetchone()[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_decoder_logprobs(db, rng, case):
    cfg, params = make(rng, case, "decoder", "pre")
    db.execute("SELECT relattn_import('m', ?)", (ref.safetensors_bytes(params, cfg),))
    tokens = random_tokens(rng, 70, cfg)
    want = ref.logprob_rows(cfg, params, tokens)
    sql = "SELECT pos, token, logprob, top_token, top_logprob FROM relattn_logprobs(?, ?)"
    got = db.execute(sql, ("m", toks(tokens))).fetchall()
    assert [r[:2] for r in got] == [r[:2] for r in want]
    assert np.abs(np.array([r[2] for r in got]) - [r[2] for r in want]).max() < 1e-4
    assert np.abs(np.array([r[4] for r in got]) - [r[4] for r in want]).max() < 1e-4
    score = db.execute("SELECT relattn_score('m', ?)", (toks(tokens),)).fetchone()[0]
    err = abs(score - ref.score(cfg, params, tokens))
    assert err < 1e-4 * len(want)
    # the options matter: the same weights without them give other
    # log-probs, by far more than the error (gelu and gelu_tanh differ by
    # 2e-4 at most). Per position: a sum over positions can cancel (the
    # summed score fell under 10x the error in 5 of 300 seeds for
    # gelu_tanh; the worst position was 117x or more in all 300).
    # biases false alone computes as zero biases: its test is the tensors'
    if case != "no-biases":
        lp = np.array([r[2] for r in got])
        plain = np.array([r[2] for r in ref.logprob_rows(without_options(cfg), params, tokens)])
        assert np.abs(plain - lp).max() > 10 * np.abs(lp - [r[2] for r in want]).max()
    # export: the tensors in the store's order, the same bytes, the options
    blob = export(db, "m")
    out, meta = safetensors_py.read(blob)
    assert list(out) == [name for name, _ in modelgen.shapes(cfg)]
    assert set(out) == set(params)
    for name, (dtype, shape, raw) in out.items():
        assert dtype == "F32" and shape == list(params[name].shape)
        assert raw == params[name].astype("<f4").tobytes(), name
    assert json.loads(meta["relattn.config"]) == cfg
    # and the exported file is the same model
    db.execute("SELECT relattn_import('again', ?)", (blob,))
    assert db.execute(sql, ("again", toks(tokens))).fetchall() == got


@pytest.mark.parametrize("case", sorted(CASES))
def test_encoder_embed(db, rng, case):
    cfg, params = make(rng, case, "encoder", ENCODER_NORM.get(case, "post"))
    db.execute("SELECT relattn_import('m', ?)", (ref.safetensors_bytes(params, cfg),))
    for n in (1, 45):
        tokens = random_tokens(rng, n, cfg)
        got = from_f32(db.execute("SELECT relattn_embed('m', ?)",
                                  (toks(tokens),)).fetchone()[0])
        want = ref.embedding(cfg, params, tokens)
        assert rel_err(got, want) < 1e-5
        if case != "no-biases" and (n > 1 or case not in ("types", "bert-like")):
            plain = ref.embedding(without_options(cfg), params, tokens)
            assert rel_err(got, plain) > 10 * rel_err(got, want)
    # the attention maps see the embedding's extras (last layer's: after
    # every norm, gate and activation before it)
    tokens = random_tokens(rng, 30, cfg)
    maps = np.array(ref.forward(cfg, params, ref.model_input(cfg, tokens),
                                maps=True)["maps"])
    got, rows = attention_maps(db, toks(tokens), maps.shape)
    assert len(rows) == maps.size
    assert np.abs(got - maps).max() < 1e-5


def test_token_type_switches_after_the_first_sep_only(db, rng):
    # 3 types: the third row of type_emb is never used; without a sep all
    # rows are type 0, and with sep at the end too
    cfg, params = make(rng, "types", "encoder", "post")
    db.execute("SELECT relattn_import('m', ?)", (ref.safetensors_bytes(params, cfg),))
    body = [int(t) for t in rng.integers(0, 256, 20)]
    for tokens in (body, body[:10] + [SEP] + body[10:], body + [SEP],
                   [SEP] + body, body[:5] + [SEP] + body[5:12] + [SEP] + body[12:]):
        got = from_f32(db.execute("SELECT relattn_embed('m', ?)",
                                  (toks(tokens),)).fetchone()[0])
        assert rel_err(got, ref.embedding(cfg, params, tokens)) < 1e-5
    assert list(ref.token_types(cfg, [1, SEP, 2, SEP, 3])) == [0, 0, 1, 1, 1]
    # without tokenizer.sep no row switches: the type-1 row is not used
    nosep = json.loads(json.dumps(cfg))
    del nosep["tokenizer"]["sep"]
    db.execute("SELECT relattn_import('nosep', ?)",
               (ref.safetensors_bytes(params, nosep),))
    tokens = body[:10] + [SEP] + body[10:]
    got = from_f32(db.execute("SELECT relattn_embed('nosep', ?)",
                              (toks(tokens),)).fetchone()[0])
    assert list(ref.token_types(nosep, tokens)) == [0] * len(tokens)
    assert rel_err(got, ref.embedding(nosep, params, tokens)) < 1e-5
    assert rel_err(got, ref.embedding(cfg, params, tokens)) > 1e-3


def test_gelu_tanh_over_a_wide_range(db, rng):
    # FFN inputs far past where tanh saturates (|x| up to ~40), through the
    # vector path and the scalar tail (d_ff 45: 8 lanes do not divide a row)
    cfg, params = make(rng, "gelu_tanh", "encoder", "post")
    for i in range(cfg["n_layers"]):
        params[f"layers.{i}.ffn.w1"] *= 20
    db.execute("SELECT relattn_import('m', ?)", (ref.safetensors_bytes(params, cfg),))
    tokens = random_tokens(rng, 30, cfg)
    got = from_f32(db.execute("SELECT relattn_embed('m', ?)",
                              (toks(tokens),)).fetchone()[0])
    assert rel_err(got, ref.embedding(cfg, params, tokens)) < 1e-5


def import_error(db, rng, options, edit=None, **kw):
    """The message of importing a model with these options, its weights
    those of the nearest valid config, edited."""
    cfg = ref.random_config(rng, n_heads=2, d_model=8, n_layers=1,
                            options=options, **kw)
    if edit:
        params = ref.random_params(rng, cfg)
        edit(params)
    else:  # a bad config: the weights of today's defaults
        params = ref.random_params(rng, ref.random_config(
            rng, n_heads=2, d_model=8, n_layers=1))
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_import('x', ?)",
                   (ref.safetensors_bytes(params, cfg),))
    # nothing written: no tables on first use, no model 'x' after
    if db.execute("SELECT count(*) FROM sqlite_master WHERE "
                  "name = 'relattn_model'").fetchone()[0]:
        assert db.execute("SELECT count(*) FROM relattn_model WHERE "
                          "name = 'x'").fetchone()[0] == 0
    return str(e.value)


def test_config_errors(db, rng):
    pre = "relattn_import: config: "
    for options, kw, message in [
        ({"norm_kind": "x"}, {},
         "'norm_kind' must be one of layernorm,rmsnorm, not 'x'"),
        ({"norm_kind": 1}, {}, "'norm_kind' must be a string, not integer"),
        ({"ffn": "swiglu"}, {}, "'ffn' must be one of plain,gated, not 'swiglu'"),
        ({"biases": 0}, {}, "'biases' must be true or false, not integer"),
        ({"biases": None}, {}, "'biases' must be true or false, not null"),
        ({}, {"activation": "silu"},
         "'activation' must be one of gelu,gelu_tanh,relu, not 'silu'"),
        ({"embedding": 2}, {}, "'embedding' must be an object, not integer"),
        ({"embedding": {"norm": "yes"}}, {},
         "'embedding.norm' must be true or false, not text"),
        ({"embedding": {"token_types": -1}}, {},
         "'embedding.token_types' must be between 0 and 16777216, not -1"),
        ({"embedding": {"token_types": 1.5}}, {},
         "'embedding.token_types' must be an integer, not real"),
        ({}, {"sep": 12},
         "'tokenizer.sep' must be at least 256 and below vocab_size (260), "
         "not 12"),
        ({}, {"sep": 260},
         "'tokenizer.sep' must be at least 256 and below vocab_size (260), "
         "not 260"),
    ]:
        assert import_error(db, rng, options, **kw) == pre + message


def test_tensor_errors(db, rng):
    def drop(name):
        return lambda p: p.pop(name)

    def add(name, shape):
        return lambda p: p.update({name: np.ones(shape, np.float32)})

    unexpected = "relattn_import: unexpected tensor '{}' (not part of the config)"
    missing = "relattn_import: tensor '{}' is missing (the config needs it)"
    for options, edit, message in [
        ({"norm_kind": "rmsnorm"}, add("layers.0.ln1.bias", (8,)),
         unexpected.format("layers.0.ln1.bias")),
        ({"norm_kind": "rmsnorm"}, add("ln_f.bias", (8,)),
         unexpected.format("ln_f.bias")),
        ({"norm_kind": "rmsnorm", "embedding": {"norm": True}},
         add("emb_norm.bias", (8,)), unexpected.format("emb_norm.bias")),
        ({"biases": False}, add("layers.0.attn.bq", (8,)),
         unexpected.format("layers.0.attn.bq")),
        ({"biases": False}, add("layers.0.ffn.b2", (8,)),
         unexpected.format("layers.0.ffn.b2")),
        ({"biases": False, "ffn": "gated"}, add("layers.0.ffn.b3", (48,)),
         unexpected.format("layers.0.ffn.b3")),
        ({}, add("layers.0.ffn.w3", (48, 8)), unexpected.format("layers.0.ffn.w3")),
        ({"ffn": "gated"}, drop("layers.0.ffn.w3"), missing.format("layers.0.ffn.w3")),
        ({"ffn": "gated"}, drop("layers.0.ffn.b3"), missing.format("layers.0.ffn.b3")),
        ({"ffn": "gated"}, add("layers.0.ffn.w3", (8, 48)),
         "relattn_import: tensor 'layers.0.ffn.w3' has shape [8,48]; the config "
         "needs [48,8]"),
        ({"embedding": {"norm": True}}, drop("emb_norm.bias"),
         missing.format("emb_norm.bias")),
        ({"embedding": {"norm": True}}, drop("emb_norm.weight"),
         missing.format("emb_norm.weight")),
        ({}, add("emb_norm.weight", (8,)), unexpected.format("emb_norm.weight")),
        ({"embedding": {"token_types": 2}}, add("type_emb", (3, 8)),
         "relattn_import: tensor 'type_emb' has shape [3,8]; the config needs "
         "[2,8]"),
        ({"embedding": {"token_types": 2}}, drop("type_emb"), missing.format("type_emb")),
        ({}, add("type_emb", (2, 8)), unexpected.format("type_emb")),
    ]:
        assert import_error(db, rng, options, edit) == message, options


def test_gated_ffn_counts_its_gate_rows_against_the_memory_limit(db, rng):
    # d_ff over vocab_size: the block buffer is the FFN's, twice as wide
    # gated (src/forward.c, rows_floats): 256 rows of 2 d_ff floats a worker
    def need(ffn, threads):
        cfg = modelgen.config(vocab_size=259, d_model=16, n_heads=2, d_ff=1024,
                              n_layers=1, clip=4, ffn=ffn)
        modelgen.load(db, ffn, cfg, rng)
        db.execute("SELECT relattn_threads(?)", (threads,))
        db.execute("SELECT relattn_max_memory(1048576)")
        with pytest.raises(Exception) as e:
            db.execute("SELECT relattn_embed(?, ?)",
                       (ffn, rng.integers(0, 256, 600).astype("<i4").tobytes()))
        db.execute("SELECT relattn_max_memory(1 << 31)")
        return int(str(e.value).split("needs ")[1].split()[0])
    for threads in (1, 3):
        assert need("gated", threads) - need("plain", threads) == threads * 4 * 256 * 1024
    # and it runs within that bound, as the reference says
    cfg = modelgen.config(vocab_size=259, d_model=16, n_heads=2, d_ff=300,
                          n_layers=2, clip=4, ffn="gated", activation="gelu_tanh")
    weights = modelgen.load(db, "g", cfg, rng)
    tokens = [int(t) for t in rng.integers(0, 256, 300)]
    db.execute("SELECT relattn_threads(2)")
    got = from_f32(db.execute("SELECT relattn_embed('g', ?)", (toks(tokens),)).fetchone()[0])
    assert rel_err(got, ref.embedding(cfg, weights, tokens)) < 1e-5


# ---- d_head: the attention's width apart from d_model ----------------------
# (d_model 24, 3 heads: d_head 12 is wider than d_model / n_heads = 8, 5
# narrower; every position scheme's tables follow d_head)
D_HEAD_CASES = {
    "shaw-wide": (12, {}),
    "shaw-narrow-per-head": (5, {"per_head": True}),
    "t5-like": (10, {"activation": "gelu_tanh", "position": T5,
                     "options": {"norm_kind": "rmsnorm", "biases": False,
                                 "ffn": "gated"}}),
    "rel_key_query": (7, {"position": {"type": "rel_key_query",
                                       "max_position_embeddings": 90}}),
    "xl": (10, {"position": {"type": "xl", "clip": 6}}),
    "deberta": (6, {"position": {"type": "deberta", "position_buckets": 8,
                                 "max_relative_positions": 20,
                                 "norm_rel_ebd": "layer_norm"},
                    "options": {"embedding": {"norm": True}}}),
    "rope": (10, {"position": {"type": "rope", "rotary_dim": 6}}),
    "alibi": (9, {"position": {"type": "alibi"}}),
}


def make_d_head(rng, case, arch, norm):
    d_head, kw = D_HEAD_CASES[case]
    kw = json.loads(json.dumps(kw))
    options = dict(kw.pop("options", {}), d_head=d_head)
    cfg = ref.random_config(rng, arch=arch, norm=norm, n_heads=3, d_model=24,
                            bos=arch == "decoder", options=options, **kw)
    return cfg, ref.random_params(rng, cfg)


def check_export(db, cfg, params):
    """The exported file: the store's order, the same bytes and config, and
    it imports again."""
    blob = export(db, "m")
    out, meta = safetensors_py.read(blob)
    assert list(out) == [name for name, _ in modelgen.shapes(cfg)]
    assert set(out) == set(params)
    for name, (dtype, shape, raw) in out.items():
        assert dtype == "F32" and shape == list(params[name].shape)
        assert raw == params[name].astype("<f4").tobytes(), name
    assert json.loads(meta["relattn.config"]) == cfg
    db.execute("SELECT relattn_import('again', ?)", (blob,))


@pytest.mark.parametrize("case", sorted(D_HEAD_CASES))
def test_d_head_decoder_logprobs(db, rng, case):
    cfg, params = make_d_head(rng, case, "decoder", "pre")
    d, h, dh = cfg["d_model"], cfg["n_heads"], cfg["d_head"]
    assert params["layers.0.attn.wq"].shape == (h * dh, d)
    assert params["layers.0.attn.wo"].shape == (d, h * dh)
    db.execute("SELECT relattn_import('m', ?)", (ref.safetensors_bytes(params, cfg),))
    shapes = dict(db.execute("SELECT name, shape FROM relattn_tensor WHERE "
                             "model = 'm' AND name LIKE 'layers.0.attn.%'"))
    assert shapes["layers.0.attn.wk"] == f"[{h * dh},{d}]"
    assert shapes["layers.0.attn.wo"] == f"[{d},{h * dh}]"
    tokens = random_tokens(rng, 70, cfg)
    want = ref.logprob_rows(cfg, params, tokens)
    sql = "SELECT pos, token, logprob, top_token, top_logprob FROM relattn_logprobs(?, ?)"
    got = db.execute(sql, ("m", toks(tokens))).fetchall()
    assert [r[:2] for r in got] == [r[:2] for r in want]
    assert np.abs(np.array([r[2] for r in got]) - [r[2] for r in want]).max() < 1e-4
    assert np.abs(np.array([r[4] for r in got]) - [r[4] for r in want]).max() < 1e-4
    score = db.execute("SELECT relattn_score('m', ?)", (toks(tokens),)).fetchone()[0]
    assert abs(score - ref.score(cfg, params, tokens)) < 1e-4 * len(want)
    check_export(db, cfg, params)
    assert db.execute(sql, ("again", toks(tokens))).fetchall() == got


@pytest.mark.parametrize("case", sorted(D_HEAD_CASES))
def test_d_head_encoder_embed_and_maps(db, rng, case):
    cfg, params = make_d_head(rng, case, "encoder",
                              "pre" if case == "t5-like" else "post")
    db.execute("SELECT relattn_import('m', ?)", (ref.safetensors_bytes(params, cfg),))
    for n in (1, 45):
        tokens = random_tokens(rng, n, cfg)
        got = from_f32(db.execute("SELECT relattn_embed('m', ?)",
                                  (toks(tokens),)).fetchone()[0])
        assert len(got) == cfg["d_model"]
        assert rel_err(got, ref.embedding(cfg, params, tokens)) < 1e-5
    tokens = random_tokens(rng, 30, cfg)
    maps = np.array(ref.forward(cfg, params, ref.model_input(cfg, tokens),
                                maps=True)["maps"])
    got, rows = attention_maps(db, toks(tokens), maps.shape)
    assert len(rows) == maps.size
    assert np.abs(got - maps).max() < 1e-5
    svg = db.execute("SELECT relattn_svg_attention('m', ?, 1, 2)",
                     (toks(tokens),)).fetchone()[0]
    assert "<svg " in svg and svg.rstrip().endswith("</svg>")
    check_export(db, cfg, params)
    assert db.execute("SELECT relattn_embed('again', ?) = relattn_embed('m', ?)",
                      (toks(tokens), toks(tokens))).fetchone()[0] == 1


def test_d_head_rows_past_a_block(db, rng):
    # several row blocks (64 to 256 rows each) and several threads: the
    # attention's rows and the normed rows share h's rows block by block
    for d_head in (20, 3):
        cfg, params = make_d_head(rng, "shaw-wide", "encoder", "pre")
        cfg["d_head"] = d_head
        params = ref.random_params(rng, cfg)
        db.execute("SELECT relattn_import(?, ?)", (f"m{d_head}",
                                                   ref.safetensors_bytes(params, cfg)))
        tokens = random_tokens(rng, 300, cfg)
        want = ref.embedding(cfg, params, tokens)
        got = []
        for threads in (1, 2):
            db.execute("SELECT relattn_threads(?)", (threads,))
            got.append(db.execute("SELECT relattn_embed(?, ?)",
                                  (f"m{d_head}", toks(tokens))).fetchone()[0])
        assert got[0] == got[1]
        assert rel_err(from_f32(got[0]), want) < 1e-5


def test_d_head_errors(db, rng):
    pre = "relattn_import: config: "
    for options, kw, message in [
        ({"d_head": 0}, {}, "'d_head' must be between 1 and 16777216, not 0"),
        ({"d_head": -3}, {}, "'d_head' must be between 1 and 16777216, not -3"),
        ({"d_head": "4"}, {}, "'d_head' must be an integer, not text"),
        ({"d_head": 4.5}, {}, "'d_head' must be an integer, not real"),
        ({"d_head": None}, {}, "'d_head' must be an integer, not null"),
        ({"d_head": 1 << 24}, {},
         "'n_heads' * 'd_head' (2 * 16777216) must be at most 16777216"),
        ({"d_head": 3}, {"position": {"type": "rope", "rotary_dim": 4}},
         "'position.rotary_dim' must be even, at least 2 and at most d_head = "
         "3, not 4"),
        ({"d_head": 3}, {"position": {"type": "rope"}},
         "'position.rotary_dim' must be even, at least 2 and at most d_head = "
         "3, not 3"),
    ]:
        assert import_error(db, rng, options, **kw) == pre + message, options
    # the tensors follow d_head: d_model-wide ones are refused
    for name, shape, want in [("layers.0.attn.wq", (8, 8), "[6,8]"),
                              ("layers.0.attn.wo", (8, 8), "[8,6]"),
                              ("layers.0.attn.bv", (8,), "[6]")]:
        def edit(p, name=name, shape=shape):
            p[name] = np.ones(shape, np.float32)
        assert import_error(db, rng, {"d_head": 3}, edit) == (
            f"relattn_import: tensor '{name}' has shape "
            f"{json.dumps(list(shape)).replace(' ', '')}; the config needs {want}")


def test_d_head_frees_d_model_from_n_heads(db, rng):
    # d_model 25 with 3 heads: refused without d_head, a model with it
    cfg = ref.random_config(rng, arch="encoder", norm="post", n_heads=3,
                            d_model=25, options={"d_head": 8})
    params = ref.random_params(rng, cfg)
    db.execute("SELECT relattn_import('m', ?)", (ref.safetensors_bytes(params, cfg),))
    tokens = random_tokens(rng, 20, cfg)
    got = from_f32(db.execute("SELECT relattn_embed('m', ?)",
                              (toks(tokens),)).fetchone()[0])
    assert rel_err(got, ref.embedding(cfg, params, tokens)) < 1e-5
    del cfg["d_head"]
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_import('x', ?)",
                   (ref.safetensors_bytes(params, cfg),))
    assert str(e.value) == ("relattn_import: config: 'd_model' (25) is not "
                            "divisible by 'n_heads' (3)")
    # d_head equal to d_model / n_heads is today's model, key and all
    cfg = ref.random_config(rng, arch="decoder", n_heads=3, d_model=24)
    params = ref.random_params(rng, cfg)
    db.execute("SELECT relattn_import('plain', ?)", (ref.safetensors_bytes(params, cfg),))
    cfg["d_head"] = 8
    db.execute("SELECT relattn_import('keyed', ?)", (ref.safetensors_bytes(params, cfg),))
    tokens = toks(random_tokens(rng, 40, cfg))
    assert db.execute("SELECT relattn_score('plain', ?) = relattn_score('keyed', ?)",
                      (tokens, tokens)).fetchone()[0] == 1


def test_d_head_counts_the_inner_width_against_the_memory_limit(db, rng):
    # The activations are x (n, d_model), h (n, max(d_model, inner)) and
    # q, k, v (n, 3 inner), and the final row 0's x1 (1, d_model) and h1
    # (1, max(d_model, inner)) (src/forward.c, acts_floats): models with the
    # same heads' width (8, so the same attention scratch) and d_model 16,
    # their inner widths 16 (2 heads, no d_head), 128 (16 heads) and 8 (one
    # head) differ by exactly that, on any thread count. 4000 tokens and
    # bos: 4001 rows.
    def need(name, threads, **kw):
        cfg = modelgen.config(vocab_size=259, d_model=16, d_ff=32, n_layers=1,
                              clip=4, **kw)
        modelgen.load(db, name, cfg, rng)
        db.execute("SELECT relattn_threads(?)", (threads,))
        db.execute("SELECT relattn_max_memory(1048576)")
        with pytest.raises(Exception) as e:
            db.execute("SELECT relattn_embed(?, ?)",
                       (name, rng.integers(0, 256, 4000).astype("<i4").tobytes()))
        db.execute("SELECT relattn_max_memory(1 << 31)")
        db.execute("DELETE FROM relattn_model WHERE name = ?", (name,))
        return int(str(e.value).split("needs ")[1].split()[0])
    r16 = lambda n: (n + 15) // 16 * 16   # noqa: E731
    for threads in (1, 3):
        plain = need("plain", threads, n_heads=2)
        wide = need("wide", threads, n_heads=16, d_head=8)
        narrow = need("narrow", threads, n_heads=1, d_head=8)
        assert wide - plain == 4 * (4 * 4001 + 1) * (128 - 16)
        assert narrow - plain == 4 * 3 * (r16(4001 * 8) - 4001 * 16)
    # and the wide one runs within its bound, as the reference says
    cfg = modelgen.config(vocab_size=259, d_model=16, d_ff=32, n_layers=2, clip=4,
                          n_heads=16, d_head=8)
    weights = modelgen.load(db, "w", cfg, rng)
    tokens = [int(t) for t in rng.integers(0, 256, 300)]
    db.execute("SELECT relattn_threads(2)")
    got = from_f32(db.execute("SELECT relattn_embed('w', ?)", (toks(tokens),)).fetchone()[0])
    assert rel_err(got, ref.embedding(cfg, weights, tokens)) < 1e-5
