"""Native models with each position scheme (position.type): relattn_logprobs,
relattn_score, relattn_embed and relattn_attention_weights against the
float64 reference (tests/sql/reference_model.py, whose scheme terms are the
ports in tests/sql/position_ports.py), decoder and encoder, on fresh random
models; export gives back the bytes imported; errors for a scheme's config
and tensors, exact text.

Tolerances (as tests/sql/test_model_fn.py): per-token log-probs 1e-4
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

POSITIONS = {
    "none": {"type": "none"},
    "t5": {"type": "t5", "num_buckets": 8, "max_distance": 20},
    "t5-defaults": {"type": "t5"},
    "alibi": {"type": "alibi"},
    "absolute": {"type": "absolute", "max_len": 80},
    "rel_key": {"type": "rel_key", "max_position_embeddings": 75},
    "xl": {"type": "xl", "clip": 6},
    "xl-unclipped": {"type": "xl", "clip": 80},
    "rel_key_query": {"type": "rel_key_query", "max_position_embeddings": 90},
    "rope": {"type": "rope"},
    "deberta": {"type": "deberta", "position_buckets": 8,
                "max_relative_positions": 20},
    "deberta-unbucketed": {"type": "deberta", "position_buckets": -1,
                           "max_relative_positions": 12,
                           "norm_rel_ebd": "layer_norm"},
    "rope-partial": {"type": "rope", "rotary": "interleaved",
                     "rotary_dim": 4, "base": 500},
}


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


def random_tokens(rng, n, cfg):
    t = [int(t) for t in rng.integers(0, 256, n)]
    return t


def load_model(db, rng, scheme, arch, **kw):
    cfg = ref.random_config(rng, arch=arch, position=POSITIONS[scheme],
                            n_heads=3, d_model=24, **kw)
    params = ref.random_params(rng, cfg)
    db.execute("SELECT relattn_import('m', ?)",
               (ref.safetensors_bytes(params, cfg),))
    return cfg, params


@pytest.mark.parametrize("scheme", sorted(POSITIONS))
@pytest.mark.parametrize("n", [1, 70])
def test_decoder(db, rng, scheme, n):
    cfg, params = load_model(db, rng, scheme, "decoder", norm="pre")
    tokens = random_tokens(rng, n, cfg)
    want = ref.logprob_rows(cfg, params, tokens)
    got = db.execute("SELECT pos, token, logprob, top_logprob "
                     "FROM relattn_logprobs('m', ?)", (toks(tokens),)).fetchall()
    assert [r[:2] for r in got] == [r[:2] for r in want]
    assert np.abs(np.array([r[2] for r in got]) - [r[2] for r in want]).max() < 1e-4
    assert np.abs(np.array([r[3] for r in got]) - [r[4] for r in want]).max() < 1e-4
    score = db.execute("SELECT relattn_score('m', ?)", (toks(tokens),)).fetchone()[0]
    assert abs(score - ref.score(cfg, params, tokens)) < 1e-4 * len(want)
    # the scheme matters: the same weights under shaw-less plain attention
    # (position none) score otherwise
    if scheme != "none" and n > 1:
        plain = dict(cfg, position={"type": "none"})
        assert abs(ref.score(plain, params, tokens) - score) > 1e-3
    # export: the same tensors, in the store's order, and the config back
    out, meta = safetensors_py.read(db.execute("SELECT relattn_export('m')").fetchone()[0])
    assert list(out) == [name for name, _ in modelgen.shapes(cfg)]
    for name, (dtype, shape, raw) in out.items():
        assert dtype == "F32" and shape == list(params[name].shape)
        assert raw == params[name].astype("<f4").tobytes(), name
    assert json.loads(meta["relattn.config"])["position"] == cfg["position"]


@pytest.mark.parametrize("scheme", sorted(POSITIONS))
def test_encoder_embed_and_maps(db, rng, scheme):
    cfg, params = load_model(db, rng, scheme, "encoder", norm="post", bos=False)
    for n in (1, 45):
        tokens = random_tokens(rng, n, cfg)
        got = from_f32(db.execute("SELECT relattn_embed('m', ?)",
                                  (toks(tokens),)).fetchone()[0])
        assert rel_err(got, ref.embedding(cfg, params, tokens)) < 1e-5
    tokens = random_tokens(rng, 30, cfg)
    maps = np.array(ref.forward(cfg, params, tokens, maps=True)["maps"])
    got, rows = attention_maps(db, toks(tokens), maps.shape)
    assert len(rows) == maps.size
    assert np.abs(got - maps).max() < 1e-5


@pytest.mark.parametrize("scheme", ["t5", "alibi", "rope-partial", "deberta"])
def test_decoder_maps(db, rng, scheme):
    cfg, params = load_model(db, rng, scheme, "decoder", norm="post")
    tokens = random_tokens(rng, 33, cfg)
    maps = np.array(ref.forward(cfg, params, ref.model_input(cfg, tokens),
                                maps=True)["maps"])
    got, rows = attention_maps(db, toks(tokens), maps.shape)
    assert all(k <= q for _, _, q, k, _ in rows)
    assert np.abs(got - maps).max() < 1e-5


def import_error(db, rng, position, edit=None, arch="decoder"):
    cfg = ref.random_config(rng, position=position, n_heads=2, d_model=8,
                            n_layers=1, arch=arch)
    # weights of a valid config close to it: the error is the config's
    ok = position if position["type"] in ("t5", "absolute", "rel_key", "xl",
                                          "deberta") else {"type": "none"}
    params = ref.random_params(rng, dict(cfg, position=ok))
    if edit:
        edit(params)
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
    for position, message in [
        ({"type": "alibo"},
         "'position.type' must be one of shaw,none,t5,alibi,rope,absolute,"
         "rel_key,rel_key_query,xl,deberta, not 'alibo'"),
        ({"type": "rope", "rotary_dim": 3},
         "'position.rotary_dim' must be even, at least 2 and at most "
         "d_model/n_heads = 4, not 3"),
        ({"type": "rope", "rotary_dim": 6},
         "'position.rotary_dim' must be even, at least 2 and at most "
         "d_model/n_heads = 4, not 6"),
        ({"type": "rope", "base": 1}, "'position.base' must be a number over 1"),
        ({"type": "rope", "rotary": "both"},
         "'position.rotary' must be one of half,interleaved, not 'both'"),
        ({"type": "alibi", "clip": 3},
         "'position.clip' is not a key of position type 'alibi'"),
        ({"type": "none", "num_buckets": 8},
         "'position.num_buckets' is not a key of position type 'none'"),
        ({"type": "shaw"}, "missing key 'position.clip'"),
        ({"type": "absolute"}, "missing key 'position.max_len'"),
        ({"type": "xl"}, "missing key 'position.clip'"),
        ({"type": "xl", "clip": 2, "values": True},
         "'position.values' is not a key of position type 'xl'"),
        ({"type": "rel_key_query"},
         "missing key 'position.max_position_embeddings'"),
        ({"type": "rel_key", "max_position_embeddings": -2},
         "'position.max_position_embeddings' must be between 1 and 16777216, "
         "not -2"),
        ({"type": "absolute", "max_len": 5, "max_position_embeddings": 5},
         "'position.max_position_embeddings' is not a key of position type "
         "'absolute'"),
        ({"type": "deberta", "max_relative_positions": 0},
         "'position.max_relative_positions' must be between 1 and 16777216, "
         "not 0"),
        ({"type": "deberta", "norm_rel_ebd": "layernorm"},
         "'position.norm_rel_ebd' must be one of none,layer_norm, not "
         "'layernorm'"),
        ({"type": "deberta", "clip": 3},
         "'position.clip' is not a key of position type 'deberta'"),
        ({"type": "absolute", "max_len": 0},
         "'position.max_len' must be between 1 and 16777216, not 0"),
    ]:
        assert import_error(db, rng, position) == pre + message


T5_DIV = "(T5's log buckets divide by max_exact = num_buckets/"
T5_LOG = ("(T5's log buckets divide by log(max_distance/max_exact), which "
          "must be over 0)")
DEB_LOG = ("(DeBERTa's log buckets divide by log((max_relative_positions - "
           "1)/mid), mid = position_buckets/2 = ")


@pytest.mark.parametrize("arch,position,message", [
    # T5 bidirectional (an encoder): max_exact = num_buckets/2/2
    ("encoder", {"type": "t5", "num_buckets": 3},
     "'position.num_buckets' must be between 4 and 1048576 when bidirectional, "
     "not 3 " + T5_DIV + "4)"),
    ("encoder", {"type": "t5", "num_buckets": 1 << 20 | 1},
     "'position.num_buckets' must be between 4 and 1048576 when bidirectional, "
     "not 1048577 " + T5_DIV + "4)"),
    ("encoder", {"type": "t5", "num_buckets": 8, "max_distance": 2},
     "'position.max_distance' must be over max_exact = num_buckets/4 = 2 and "
     "at most 16777216, not 2 " + T5_LOG),
    ("encoder", {"type": "t5", "num_buckets": 11, "max_distance": 1},
     "'position.max_distance' must be over max_exact = num_buckets/4 = 2 and "
     "at most 16777216, not 1 " + T5_LOG),
    ("encoder", {"type": "t5", "max_distance": (1 << 24) + 1},
     "'position.max_distance' must be over max_exact = num_buckets/4 = 8 and "
     "at most 16777216, not 16777217 " + T5_LOG),
    # T5 causal (a decoder): max_exact = num_buckets/2
    ("decoder", {"type": "t5", "num_buckets": 1},
     "'position.num_buckets' must be between 2 and 1048576 when causal, not 1 "
     + T5_DIV + "2)"),
    ("decoder", {"type": "t5", "num_buckets": 8, "max_distance": 4},
     "'position.max_distance' must be over max_exact = num_buckets/2 = 4 and "
     "at most 16777216, not 4 " + T5_LOG),
    ("decoder", {"type": "t5", "num_buckets": 3, "max_distance": 1},
     "'position.max_distance' must be over max_exact = num_buckets/2 = 1 and "
     "at most 16777216, not 1 " + T5_LOG),
    # DeBERTa: mid = position_buckets/2 and log((max_relative_positions - 1)/mid)
    ("encoder", {"type": "deberta", "position_buckets": 1},
     "'position.position_buckets' must be at most 0 (none), or between 2 and "
     "16777216, not 1 (DeBERTa's log buckets divide by mid = "
     "position_buckets/2)"),
    ("encoder", {"type": "deberta", "position_buckets": 38,
                 "max_relative_positions": 20},
     "'position.max_relative_positions' must not be 20 with position_buckets "
     "38 " + DEB_LOG + "19: here log(1))"),
    ("decoder", {"type": "deberta", "position_buckets": 3,
                 "max_relative_positions": 2},
     "'position.max_relative_positions' must not be 2 with position_buckets "
     "3 " + DEB_LOG + "1: here log(1))"),
    ("encoder", {"type": "deberta", "position_buckets": 8,
                 "max_relative_positions": 1},
     "'position.max_relative_positions' must not be 1 with position_buckets "
     "8 " + DEB_LOG + "4: here log(0))"),
])
def test_bucket_limits_refused(db, rng, arch, position, message):
    assert import_error(db, rng, position, arch=arch) == \
        "relattn_import: config: " + message


# The limits' other side: each of these was refused before and is what
# Hugging Face's formulas take; the model computes what the float32 ports of
# them in position_ports.py give, through tests/sql/reference_model.py.
EDGES = [
    ("encoder", {"type": "t5", "num_buckets": 4, "max_distance": 2}),
    ("encoder", {"type": "t5", "num_buckets": 8, "max_distance": 3}),
    ("encoder", {"type": "t5", "num_buckets": 7, "max_distance": 2}),
    ("decoder", {"type": "t5", "num_buckets": 2, "max_distance": 2}),
    ("decoder", {"type": "t5", "num_buckets": 3, "max_distance": 5}),
    ("encoder", {"type": "deberta", "position_buckets": 2,
                 "max_relative_positions": 3}),
    ("decoder", {"type": "deberta", "position_buckets": 3,
                 "max_relative_positions": 40}),
    # max_relative_positions - 1 under mid: log buckets that shrink, then
    # the clamp
    ("encoder", {"type": "deberta", "position_buckets": 40,
                 "max_relative_positions": 20}),
    ("encoder", {"type": "deberta", "position_buckets": 8,
                 "max_relative_positions": 2}),
]


@pytest.mark.parametrize("arch,position", EDGES)
def test_bucket_limits_accepted(db, rng, arch, position):
    cfg = ref.random_config(rng, arch=arch, position=position, n_heads=3,
                            d_model=24, norm="post", bos=arch == "decoder")
    params = ref.random_params(rng, cfg)
    db.execute("SELECT relattn_import('m', ?)",
               (ref.safetensors_bytes(params, cfg),))
    tokens = random_tokens(rng, 90, cfg)
    maps = np.array(ref.forward(cfg, params, ref.model_input(cfg, tokens),
                                maps=True)["maps"])
    got, rows = attention_maps(db, toks(tokens), maps.shape)
    n = maps.shape[-1]   # a decoder's keys: up to the query's position
    assert len(rows) == maps.shape[0] * maps.shape[1] * (
        n * n if arch == "encoder" else n * (n + 1) // 2)
    assert np.abs(got - maps).max() < 1e-5


def test_tensor_errors(db, rng):
    t5 = {"type": "t5", "num_buckets": 8, "max_distance": 20}
    assert import_error(db, rng, t5, lambda p: p.pop("rel_bias")) == \
        "relattn_import: tensor 'rel_bias' is missing (the config needs it)"
    assert import_error(db, rng, t5, lambda p: p.update(
        rel_bias=np.ones((2, 7), np.float32))) == (
        "relattn_import: tensor 'rel_bias' has shape [2,7]; the config needs "
        "[2,8]")
    assert import_error(db, rng, {"type": "alibi"}, lambda p: p.update(
        {"layers.0.attn.rel_k": np.ones((3, 4), np.float32)})) == (
        "relattn_import: unexpected tensor 'layers.0.attn.rel_k' (not part of "
        "the config)")
    absolute = {"type": "absolute", "max_len": 16}
    assert import_error(db, rng, absolute, lambda p: p.update(
        pos_emb=np.ones((15, 8), np.float32))) == (
        "relattn_import: tensor 'pos_emb' has shape [15,8]; the config needs "
        "[16,8]")
    deb = {"type": "deberta", "position_buckets": 4, "max_relative_positions": 10}
    assert import_error(db, rng, deb, lambda p: p.update(
        rel_emb=np.ones((9, 8), np.float32))) == (
        "relattn_import: tensor 'rel_emb' has shape [9,8]; the config needs "
        "[8,8]")
    assert import_error(db, rng, deb, lambda p: p.pop("rel_emb")) == (
        "relattn_import: tensor 'rel_emb' is missing (the config needs it)")
    assert import_error(db, rng, dict(deb, norm_rel_ebd="layer_norm"), lambda p: p.pop(
        "rel_emb_norm.bias")) == (
        "relattn_import: tensor 'rel_emb_norm.bias' is missing (the config needs it)")
    xl = {"type": "xl", "clip": 3}
    assert import_error(db, rng, {"type": "xl", "clip": 3}, lambda p: p.pop(
        "layers.0.attn.u")) == (
        "relattn_import: tensor 'layers.0.attn.u' is missing (the config needs it)")
    assert import_error(db, rng, xl, lambda p: p.update(
        {"layers.0.attn.w": np.ones((4, 2), np.float32)})) == (
        "relattn_import: tensor 'layers.0.attn.w' has shape [4,2]; the config "
        "needs [2,4]")


def test_absolute_past_max_len_is_refused(db, rng):
    cfg = ref.random_config(rng, position={"type": "absolute", "max_len": 10},
                            n_heads=2, d_model=8, n_layers=1)
    db.execute("SELECT relattn_import('m', ?)",
               (ref.safetensors_bytes(ref.random_params(rng, cfg), cfg),))
    ok = toks(random_tokens(rng, 9, cfg))          # with bos: 10 rows
    assert db.execute("SELECT relattn_score('m', ?)", (ok,)).fetchone()[0] < 0
    long = toks(random_tokens(rng, 10, cfg))
    for sql, fn in (("SELECT relattn_score('m', ?)", "relattn_score"),
                    ("SELECT relattn_embed('m', ?)", "relattn_embed"),
                    ("SELECT * FROM relattn_logprobs('m', ?)", "relattn_logprobs")):
        with pytest.raises(Exception) as e:
            db.execute(sql, (long,)).fetchall()
        assert str(e.value) == (f"{fn}: tokens makes 11 input rows (10 tokens "
                                "with bos), over the model's position.max_len "
                                "= 10 (the rows of its pos_emb)")


def test_rel_key_past_max_position_embeddings_is_refused(db, rng):
    cfg = ref.random_config(rng, position={"type": "rel_key_query",
                                           "max_position_embeddings": 6},
                            n_heads=2, d_model=8, n_layers=1, bos=False)
    db.execute("SELECT relattn_import('m', ?)",
               (ref.safetensors_bytes(ref.random_params(rng, cfg), cfg),))
    assert db.execute("SELECT relattn_score('m', ?)",
                      (toks(random_tokens(rng, 6, cfg)),)).fetchone()[0] < 0
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_embed('m', ?)", (toks(random_tokens(rng, 7, cfg)),))
    assert str(e.value) == ("relattn_embed: tokens makes 7 input rows (7 tokens), "
                            "over the model's position.max_position_embeddings "
                            "= 6 (its rel_k tables cover distances up to 5)")
    assert import_error(db, rng, {"type": "rel_key", "max_position_embeddings": 4},
                        lambda p: p.update({"layers.0.attn.rel_k": np.ones((8, 4), np.float32)})) == (
        "relattn_import: tensor 'layers.0.attn.rel_k' has shape [8,4]; the config "
        "needs [7,4]")


def test_tables_built_at_load_count_against_the_memory_limit(db, rng):
    # xl with a long clip: its table (2 clip + 1 rows of d_model floats a
    # layer) is far larger than the weights, and is what the limit refuses
    cfg = ref.random_config(rng, position={"type": "xl", "clip": 100000},
                            n_heads=2, d_model=8, n_layers=1)
    params = ref.random_params(rng, cfg)
    db.execute("SELECT relattn_import('m', ?)", (ref.safetensors_bytes(params, cfg),))
    weights = sum(a.size * 4 for a in params.values())
    assert weights < 100000
    db.execute("SELECT relattn_max_memory(4194304)")
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_score('m', 'abc')").fetchone()
    msg = str(e.value)
    assert msg.startswith("relattn_score: model 'm': needs ") and msg.endswith(
        " bytes, over the limit of 4194304 per call (relattn_max_memory)"), msg
    need = int(msg.split("needs ")[1].split()[0])
    assert need >= (2 * 100000 + 1) * 8 * 4
    db.execute("SELECT relattn_max_memory(16777216)")
    got = db.execute("SELECT relattn_score('m', 'abc')").fetchone()[0]
    assert abs(got - ref.score(cfg, params, list(b"abc"))) < 1e-4 * 3
