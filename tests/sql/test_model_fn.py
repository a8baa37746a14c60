"""relattn_score, relattn_perplexity, relattn_embed, relattn_logprobs and
relattn_attention_weights against tests/sql/reference_model.py (float64
numpy, written from DESIGN §4-6) on fresh random models.

Tolerances: per-token log-probs 1e-4 absolute; embeddings 1e-5 relative (L2);
attention maps 1e-5 absolute, rows summing to 1 within 1e-5."""
import math
import os
import sqlite3
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import reference_model as ref  # noqa: E402
from conftest import from_f32, rel_err  # noqa: E402


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


def load(db, name, cfg, params):
    db.execute("SELECT relattn_import(?, ?)",
               (name, ref.safetensors_bytes(params, cfg)))


def random_tokens(rng, n, cfg):
    # ordinary ids (bytes); BOS/EOS/PAD ids are valid input too, except BOS
    # first: the functions put it in front themselves and refuse a second
    t = [int(t) for t in rng.integers(0, cfg["vocab_size"], n)]
    while cfg["tokenizer"].get("bos") is not None and t[0] == cfg["tokenizer"]["bos"]:
        t[0] = int(rng.integers(0, cfg["vocab_size"]))
    return t


# Each axis of DESIGN §4 takes each value at least once; n covers 1 .. 600.
CASES = [
    # arch, norm, act, tie, clip, values, per_head, bos, n
    ("decoder", "pre", "gelu", True, 16, True, False, True, 1),
    ("decoder", "pre", "relu", False, 1, False, True, True, 37),
    ("decoder", "post", "gelu", False, 0, True, True, False, 2),
    ("decoder", "post", "relu", True, 16, False, False, True, 130),
    ("decoder", "pre", "gelu", True, 1, True, True, False, 600),
    ("decoder", "post", "gelu", True, 0, False, False, True, 257),
    ("decoder", "pre", "relu", True, 16, True, True, False, 1),
]


def case_id(c):
    return "-".join(str(x) for x in c)


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_logprobs_score_perplexity(db, rng, case):
    arch, norm, act, tie, clip, values, per_head, bos, n = case
    cfg = ref.random_config(rng, arch=arch, norm=norm, activation=act, tie=tie,
                            clip=clip, values=values, per_head=per_head, bos=bos)
    params = ref.random_params(rng, cfg)
    load(db, "m", cfg, params)
    tokens = random_tokens(rng, n, cfg)
    want = ref.logprob_rows(cfg, params, tokens)
    got = db.execute("SELECT pos, token, logprob, top_token, top_logprob "
                     "FROM relattn_logprobs('m', ?)", (toks(tokens),)).fetchall()
    assert len(got) == len(want) == (n if bos else n - 1)
    assert [r[0] for r in got] == [r[0] for r in want]
    assert [r[1] for r in got] == [r[1] for r in want]
    if got:
        lp = np.array([r[2] for r in got])
        assert np.abs(lp - [r[2] for r in want]).max() < 1e-4
        assert np.abs(np.array([r[4] for r in got]) - [r[4] for r in want]).max() < 1e-4
        # the top token is the reference's argmax, up to a near-tie
        ids = ref.model_input(cfg, tokens)
        full = ref.forward(cfg, params, ids)["logprobs"]
        for i, r in enumerate(got):
            assert full[i, r[3]] > full[i].max() - 1e-4

    score, ppl = db.execute("SELECT relattn_score('m', ?), relattn_perplexity('m', ?)",
                            (toks(tokens), toks(tokens))).fetchone()
    assert abs(score - ref.score(cfg, params, tokens)) < 1e-4 * max(1, len(want))
    # consistency: the sum of the rows, and exp(-score / scored)
    assert score == pytest.approx(sum(r[2] for r in got), abs=1e-9 * (n + 1))
    if want:
        assert ppl == pytest.approx(math.exp(-score / len(want)), rel=1e-12)
    else:
        assert score == 0.0 and ppl is None  # one token, no bos: nothing scored


@pytest.mark.parametrize("arch,norm,bos,clip", [
    ("decoder", "pre", True, 16), ("decoder", "post", False, 1),
    ("encoder", "pre", True, 0), ("encoder", "post", False, 16)])
def test_embed(db, rng, arch, norm, bos, clip):
    cfg = ref.random_config(rng, arch=arch, norm=norm, bos=bos, clip=clip,
                            per_head=bool(rng.integers(2)),
                            values=bool(rng.integers(2)))
    params = ref.random_params(rng, cfg)
    load(db, "m", cfg, params)
    for n in (1, 5, 300):
        tokens = random_tokens(rng, n, cfg)
        blob = db.execute("SELECT relattn_embed('m', ?)", (toks(tokens),)).fetchone()[0]
        assert len(blob) == 4 * cfg["d_model"]
        got = from_f32(blob)
        assert rel_err(got, ref.embedding(cfg, params, tokens)) < 1e-5


def test_embed_mean_keeps_bos(db, rng):
    """The mean is over every row the model sees, bos too, as
    sentence-transformers' mean over the attention mask."""
    cfg = ref.random_config(rng, arch="encoder", bos=True)
    params = ref.random_params(rng, cfg)
    load(db, "m", cfg, params)
    tokens = random_tokens(rng, 9, cfg)
    got = from_f32(db.execute("SELECT relattn_embed('m', ?)", (toks(tokens),)).fetchone()[0])
    hidden = ref.forward(cfg, params, ref.model_input(cfg, tokens))["hidden"]
    assert rel_err(got, hidden.mean(0)) < 1e-5
    assert rel_err(got, hidden[1:].mean(0)) > 1e-3


def test_text_and_blob_tokens_agree(db, rng):
    cfg = ref.random_config(rng, bos=True)
    params = ref.random_params(rng, cfg)
    load(db, "m", cfg, params)
    text = "Relative positions, né 2018 — in SQLite."
    blob = toks(list(text.encode("utf-8")))
    for fn in ("relattn_score", "relattn_perplexity", "relattn_embed"):
        a, b = db.execute(f"SELECT {fn}('m', ?), {fn}('m', ?)", (text, blob)).fetchone()
        assert a == b, fn
    ra = db.execute("SELECT * FROM relattn_logprobs('m', ?)", (text,)).fetchall()
    rb = db.execute("SELECT * FROM relattn_logprobs('m', ?)", (blob,)).fetchall()
    assert ra == rb and len(ra) == len(text.encode())
    assert db.execute("SELECT relattn_score('m', ?)", (text,)).fetchone()[0] == \
        pytest.approx(ref.score(cfg, params, list(text.encode())), abs=1e-3)


@pytest.mark.parametrize("arch,per_head,clip,bos", [
    ("decoder", False, 1, True), ("encoder", True, 16, False),
    ("decoder", True, 0, False)])
def test_attention_weights(db, rng, arch, per_head, clip, bos):
    cfg = ref.random_config(rng, arch=arch, per_head=per_head, clip=clip, bos=bos,
                            n_layers=3, n_heads=2, d_model=16)
    params = ref.random_params(rng, cfg)
    load(db, "m", cfg, params)
    tokens = random_tokens(rng, 40, cfg)
    maps = ref.forward(cfg, params, ref.model_input(cfg, tokens), maps=True)["maps"]
    n = len(tokens) + bos
    rows = db.execute("SELECT layer, head, qpos, kpos, distance, weight "
                      "FROM relattn_attention_weights('m', ?)", (toks(tokens),)).fetchall()
    # decoders leave the masked pairs out
    per_map = n * (n + 1) // 2 if arch == "decoder" else n * n
    assert len(rows) == cfg["n_layers"] * cfg["n_heads"] * per_map
    got = np.zeros((cfg["n_layers"], cfg["n_heads"], n, n))
    for layer, head, q, k, dist, w in rows:
        assert dist == k - q
        assert arch == "encoder" or k <= q
        got[layer, head, q, k] = w
    want = np.array(maps)
    assert np.abs(got - want).max() < 1e-5
    assert np.abs(got.sum(-1) - 1).max() < 1e-5

    # one map, pushed down: the plan hands layer and head to the table
    layer, head = cfg["n_layers"] - 1, 1
    one = db.execute("SELECT qpos, kpos, weight FROM relattn_attention_weights('m', ?) "
                     "WHERE layer = ? AND head = ?", (toks(tokens), layer, head)).fetchall()
    assert len(one) == per_map
    for q, k, w in one:
        assert abs(w - want[layer, head, q, k]) < 1e-5
    plan = " ".join(r[-1] for r in db.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM relattn_attention_weights('m', ?) "
        "WHERE layer = ? AND head = ?", (toks(tokens), layer, head)))
    assert "VIRTUAL TABLE INDEX 15:" in plan, plan
    with pytest.raises(sqlite3.OperationalError, match="layer = 99 is out of range"):
        db.execute("SELECT count(*) FROM relattn_attention_weights('m', ?) "
                   "WHERE layer = 99", (toks(tokens),)).fetchone()
    assert db.execute("SELECT count(*) FROM relattn_attention_weights('m', ?) "
                      "WHERE head = 0", (toks(tokens),)).fetchone()[0] == \
        cfg["n_layers"] * per_map


def test_encoder_cannot_score(db, rng):
    cfg = ref.random_config(rng, arch="encoder")
    load(db, "enc", cfg, ref.random_params(rng, cfg))
    t = toks([1, 2, 3])
    for sql, fn in (("SELECT relattn_score('enc', ?)", "relattn_score"),
                    ("SELECT relattn_perplexity('enc', ?)", "relattn_perplexity"),
                    ("SELECT * FROM relattn_logprobs('enc', ?)", "relattn_logprobs")):
        with pytest.raises(Exception) as e:
            db.execute(sql, (t,)).fetchall()
        assert str(e.value) == (f"{fn}: model 'enc' is an encoder; only decoder "
                                "models give next-token probabilities")


def test_errors(db, rng):
    cfg = ref.random_config(rng)
    load(db, "m", cfg, ref.random_params(rng, cfg))

    def err(sql, *args):
        with pytest.raises(Exception) as e:
            db.execute(sql, args).fetchall()
        return str(e.value)

    for fn in ("relattn_score", "relattn_perplexity", "relattn_embed"):
        assert err(f"SELECT {fn}('nope', ?)", toks([1])) == f"{fn}: no model named 'nope'"
        assert err(f"SELECT {fn}('m', ?)", b"") == f"{fn}: tokens is empty"
        assert err(f"SELECT {fn}('m', '')") == f"{fn}: tokens is empty"
        assert err(f"SELECT {fn}(1, ?)", toks([1])) == \
            f"{fn}: model must be a model name (TEXT)"
        assert db.execute(f"SELECT {fn}('m', NULL)").fetchone()[0] is None
        assert err(f"SELECT {fn}('m', ?)", toks([1, 260, 2])) == (
            f"{fn}: tokens has token 260 at position 1, outside the model's "
            "vocabulary [0, 260)")
        assert err(f"SELECT {fn}('m', ?)", toks([-1])) == (
            f"{fn}: tokens has token -1 at position 0, outside the model's "
            "vocabulary [0, 260)")
        assert err(f"SELECT {fn}('m', ?)", b"\x01\x02\x03\x04\x05") == \
            f"{fn}: tokens has 5 bytes, not a multiple of 4"
        assert err(f"SELECT {fn}('m', ?)", b"12345") == (
            f"{fn}: tokens has 5 bytes, not a multiple of 4; if the BLOB holds "
            "text, pass CAST(... AS TEXT) to tokenize it")
        assert err(f"SELECT {fn}('m', 7)") == \
            f"{fn}: tokens must be a token BLOB (int32 ids) or TEXT"
    for tv in ("relattn_logprobs", "relattn_attention_weights"):
        assert err(f"SELECT * FROM {tv}('nope', ?)", toks([1])) == \
            f"{tv}: no model named 'nope'"
        assert err(f"SELECT * FROM {tv}('m', ?)", b"") == f"{tv}: tokens is empty"
        assert err(f"SELECT * FROM {tv}") == f"{tv}: model and tokens arguments are required"
        assert db.execute(f"SELECT count(*) FROM {tv}('m', NULL)").fetchone()[0] == 0
        assert err(f"SELECT * FROM {tv}('m', ?)", toks([259, 260])) == (
            f"{tv}: tokens has token 260 at position 1, outside the model's "
            "vocabulary [0, 260)")

    db.execute("SELECT relattn_max_tokens(5)")
    assert err("SELECT relattn_score('m', ?)", toks([1] * 6)) == \
        "relattn_score: tokens has 6 tokens, over relattn_max_tokens() = 5"
    assert err("SELECT * FROM relattn_logprobs('m', ?)", toks([1] * 6)) == \
        "relattn_logprobs: tokens has 6 tokens, over relattn_max_tokens() = 5"
    assert db.execute("SELECT relattn_score('m', ?)", (toks([1] * 5),)).fetchone()[0] < 0


def test_table_functions_in_joins(db, rng):
    cfg = ref.random_config(rng, n_layers=2, n_heads=2, d_model=16)
    params = ref.random_params(rng, cfg)
    load(db, "m", cfg, params)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    bodies = ["hello", "abc", "relative positions"]
    db.executemany("INSERT INTO docs(body) VALUES (?)", [(b,) for b in bodies])
    # the tokens argument from the outer row: one pass per document
    got = db.execute("SELECT d.id, count(*), sum(l.logprob) FROM docs d, "
                     "relattn_logprobs('m', d.body) l GROUP BY d.id").fetchall()
    for (i, count, total), body in zip(got, bodies):
        assert count == len(body.encode())
        assert total == pytest.approx(ref.score(cfg, params, list(body.encode())), abs=1e-4 * count)
    # layer from the outer row, pushed down per row
    got = db.execute("SELECT d.id, count(*) FROM docs d JOIN relattn_attention_weights('m', d.body) w "
                     "ON w.layer = d.id - 1 AND w.head = 0 WHERE d.id <= 2 GROUP BY d.id").fetchall()
    n = [len(b.encode()) + 1 for b in bodies]
    assert got == [(1, n[0] * (n[0] + 1) // 2), (2, n[1] * (n[1] + 1) // 2)]
    # a layer the model does not have (doc 3: layer 2 of 2) is an error
    with pytest.raises(sqlite3.OperationalError, match="layer = 2 is out of range"):
        db.execute("SELECT d.id, count(*) FROM docs d JOIN relattn_attention_weights('m', d.body) w "
                   "ON w.layer = d.id - 1 AND w.head = 0 GROUP BY d.id").fetchall()


def test_layer_and_head_values(db, rng):
    cfg = ref.random_config(rng, n_layers=2, n_heads=4, d_model=16)
    load(db, "m", cfg, ref.random_params(rng, cfg))
    per_map = 4 * 5 // 2  # 'abc' and bos, causal
    # values no layer can equal match nothing; a layer the model lacks is an
    # error (tests/sql/test_call_rules.py)
    for v, maps in ((1, 4), (1.0, 4), ("1", 4), (1.5, 0), ("x", 0), (None, 0)):
        assert db.execute("SELECT count(*) FROM relattn_attention_weights('m', 'abc') "
                          "WHERE layer = ?", (v,)).fetchone()[0] == maps * per_map, v
    assert db.execute("SELECT count(*) FROM relattn_attention_weights('m', 'abc') "
                      "WHERE head = 3.0 AND layer = 0").fetchone()[0] == per_map


def test_memory_bound(db, rng):
    cfg = ref.random_config(rng)
    load(db, "m", cfg, ref.random_params(rng, cfg))
    db.execute("SELECT relattn_max_memory(1048576)")
    long = toks(random_tokens(rng, 3000, cfg))
    for sql in ("SELECT relattn_score('m', ?)", "SELECT relattn_embed('m', ?)",
                "SELECT * FROM relattn_logprobs('m', ?)"):
        fn = sql.split("(")[0].split()[-1] if "FROM" not in sql else "relattn_logprobs"
        with pytest.raises(Exception) as e:
            db.execute(sql, (long,)).fetchall()
        msg = str(e.value)
        assert msg.startswith(f"{fn}: needs ") and msg.endswith(
            " bytes, over the limit of 1048576 per call (relattn_max_memory)"), msg
    # a short one still fits, and the connection works after the refusals
    assert db.execute("SELECT relattn_score('m', ?)", (toks([1, 2, 3]),)).fetchone()[0] < 0
