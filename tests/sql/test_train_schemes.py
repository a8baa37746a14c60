"""models/train_corpus.py trains every native position scheme it offers
(--position shaw, none, absolute, t5, alibi, rope, xl), and the model it writes
is the one it trained: after a few training steps, the per-token log-probs
relattn_logprobs computes from the imported weights equal PyTorch's from the
trainer's own forward pass, within 1e-4 absolute (float32 on both sides, as
tests/sql/test_model_fn.py's tolerance), on fresh random bytes longer than the
training sequences (so clipped tables, far T5 buckets and rotations past the
training length are all reached).

A few training steps move the position tensors little from their
initialisation; so the same comparison is made again with the position
tensors and the attention's projections drawn large and fresh, where the
position terms change the log-probs by far more than the tolerance (checked
against the same weights with no position terms): a trainer whose scheme
differed from the extension's in any term would fail there.

Not run under the sanitizers: the training is PyTorch's (see
test_train_corpus.py)."""
import importlib.util
import json
import os
import pathlib
import sqlite3
import sys

import numpy as np
import pytest

from conftest import connect

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))

pytestmark = pytest.mark.skipif(bool(os.environ.get("RELATTN_SANITIZED")),
                                reason="PyTorch is not run under the sanitizer preload")

# position option -> (its options, the config's position object)
SCHEMES = {
    "shaw": (["--clip", "5"], {"type": "shaw", "clip": 5, "values": True, "per_head": False}),
    "none": ([], {"type": "none"}),
    "absolute": (["--max-len", "160"], {"type": "absolute", "max_len": 160}),
    "t5": (["--num-buckets", "8", "--max-distance", "40"], {"type": "t5", "num_buckets": 8, "max_distance": 40}),
    "alibi": ([], {"type": "alibi"}),
    "rope": (["--rotary", "interleaved", "--rotary-dim", "6", "--base", "500"],
             {"type": "rope", "rotary": "interleaved", "rotary_dim": 6, "base": 500.0}),
    "rope-half": ([], {"type": "rope", "rotary": "half", "base": 10000.0}),
    "xl": (["--clip", "7"], {"type": "xl", "clip": 7}),
    "xl-unclipped": (["--clip", "200"], {"type": "xl", "clip": 200}),
}
POSITION_TENSORS = ("rel_k", "rel_v", "rel_bias", "pos_emb", "wr", ".u", ".w")


@pytest.fixture(scope="module")
def tc():
    """models/train_corpus.py as a module, with PyTorch on one thread."""
    spec = importlib.util.spec_from_file_location("train_corpus", ROOT / "models" / "train_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import torch
    torch.set_num_threads(1)
    mod.torch = torch
    return mod


def corpus(path, rng, rows=120):
    subj = ["the cat", "a dog", "my friend", "the old man", "our teacher", "the bird"]
    verb = ["sees", "likes", "finds", "calls", "helps", "meets"]
    obj = ["the ball", "a red apple", "the house", "a small boat", "the garden", "her brother"]
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO docs(body) VALUES (?)",
                   [(" ".join(f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)}."
                              for _ in range(int(rng.integers(1, 4)))),) for _ in range(rows)])
    db.commit()
    db.close()


def read_safetensors(path):
    raw = pathlib.Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    out = {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], "<f4").reshape(v["shape"])
           for k, v in header.items()}
    return out, json.loads(meta["relattn.config"])


def torch_rows(tc, cfg, weights, ids):
    """PyTorch's ln p of ids[t + 1] given ids[..t], from the trainer's model with these weights."""
    torch = tc.torch
    model = tc.build_model(torch, cfg)
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()}, strict=True)
    model.eval()
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids]))[0].double(), -1).numpy()
    return np.array([lp[i, ids[i + 1]] for i in range(len(ids) - 1)])


def sql_rows(db, name, tokens):
    rows = db.execute("SELECT pos, token, logprob FROM relattn_logprobs(?, ?)",
                      (name, np.asarray(tokens, "<i4").tobytes())).fetchall()
    assert [(p, t) for p, t, _ in rows] == list(enumerate(tokens))
    return np.array([lp for _, _, lp in rows])


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_trained_scheme_scores_the_same_in_sql(tmp_path, rng, tc, scheme, monkeypatch):
    opts, position = SCHEMES[scheme]
    corpus(tmp_path / "corpus.db", rng)
    monkeypatch.chdir(tmp_path)
    # main() sets these for the PyTorch it imports; they go again after the test (other tests
    # read OPENBLAS_CORETYPE as the kernel set their process runs)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE"):
        monkeypatch.setenv(var, os.environ.get(var, "unset"))
        if os.environ[var] == "unset":
            monkeypatch.delenv(var)
    seed = int(rng.integers(1, 1 << 30))
    rc = tc.main(["--db", "corpus.db", "--query", "SELECT body FROM docs ORDER BY id", "--position",
                  scheme.split("-")[0], *opts, "--layers", "2", "--d-model", "24", "--heads", "2", "--d-ff", "40",
                  "--seq-len", "48", "--batch-tokens", "512", "--heldout", "0.2", "--steps", "4", "--warmup", "1",
                  "--lr", "1e-2", "--seed", str(seed), "--out", "m.safetensors", "--into", "corpus.db",
                  "--name", "m", "--heldout-table", "h", "--so", SO])
    assert rc == 0
    db = connect(str(tmp_path / "corpus.db"))
    cfg = json.loads(db.execute("SELECT config FROM relattn_model WHERE name = 'm'").fetchone()[0])
    assert cfg["position"] == position
    assert cfg["training"]["steps"] == 4

    # The tensors relattn_import took are the trainer's parameters, name for name and shape for shape.
    weights, file_cfg = read_safetensors(tmp_path / "m.safetensors")
    stored = dict(db.execute("SELECT name, shape FROM relattn_tensor WHERE model = 'm'").fetchall())
    assert stored == {k: json.dumps(list(v.shape), separators=(",", ":")) for k, v in weights.items()}
    assert {k for k in weights if k.endswith(POSITION_TENSORS)} == {
        "shaw": {f"layers.{i}.attn.rel_{t}" for i in (0, 1) for t in "kv"},
        "none": set(), "alibi": set(), "rope": set(), "absolute": {"pos_emb"}, "t5": {"rel_bias"},
        "xl": {f"layers.{i}.attn.{t}" for i in (0, 1) for t in ("wr", "u", "w")}}[position["type"]]
    ref_cfg = {k: v for k, v in file_cfg.items() if k != "training"}

    # Trained for a few steps: SQL and PyTorch agree on every token of an input longer than training's.
    n = 150
    tokens = [int(t) for t in rng.integers(0, 256, n)]
    ids = [tc.BOS] + tokens
    want = torch_rows(tc, ref_cfg, weights, ids)
    got = sql_rows(db, "m", tokens)
    assert np.abs(got - want).max() < 1e-4
    # and on the held-out rows, the trainer's figure is SQL's
    bits = db.execute("SELECT -sum(relattn_score('m', body)) / sum(length(CAST(body AS BLOB))) / ln(2) "
                      "FROM h").fetchone()[0]
    assert abs(bits - cfg["training"]["heldout_bits_per_byte"]) < 1e-3

    # Large fresh position tensors and projections: the terms now matter, and still agree.
    big = dict(weights)
    d = ref_cfg["d_model"]
    for k, v in weights.items():
        if k.endswith(("attn.wq", "attn.wk", "attn.wv", "attn.wo")):
            big[k] = rng.normal(0, 1.5 / np.sqrt(d), v.shape).astype("<f4")
        elif k.endswith("attn.wr"):
            big[k] = rng.normal(0, 2 / np.sqrt(d), v.shape).astype("<f4")
        elif k.endswith(POSITION_TENSORS):
            big[k] = rng.normal(0, 1.0, v.shape).astype("<f4")
    tc.write_safetensors(str(tmp_path / "big.safetensors"), {k: tc.torch.from_numpy(np.array(v)) for k, v in big.items()},
                         ref_cfg, "F32")
    db.execute("SELECT relattn_import('big', ?)", ((tmp_path / "big.safetensors").read_bytes(),))
    want = torch_rows(tc, ref_cfg, big, ids)
    assert np.abs(sql_rows(db, "big", tokens) - want).max() < 1e-4
    if position["type"] != "none":
        plain = dict(ref_cfg, position={"type": "none"})
        without = torch_rows(tc, plain, {k: v for k, v in big.items() if not k.endswith(POSITION_TENSORS)}, ids)
        assert np.abs(without - want).max() > 1e-2
    db.close()


def test_options_of_another_scheme_are_refused(tmp_path, tc, capsys):
    for args, msg in ((["--position", "t5", "--clip", "4"], "--clip is an option of --position shaw and xl, not t5"),
                      (["--position", "xl", "--no-values"], "--values is an option of --position shaw, not xl"),
                      (["--max-len", "300"], "--max-len is an option of --position absolute, not shaw"),
                      (["--position", "absolute", "--max-len", "100"], "--max-len 100 is shorter than --seq-len 256"),
                      (["--position", "rope", "--rotary-dim", "5", "--d-model", "32", "--heads", "4"],
                       "--rotary-dim must be even, at least 2 and at most d_model/heads = 8, not 5"),
                      (["--position", "xl", "--d-model", "15", "--heads", "3"],
                       "--position xl needs an even --d-model, not 15")):
        with pytest.raises(SystemExit) as e:
            tc.parse_args(["--db", "x.db", "--query", "SELECT 1", *args])
        assert e.value.code == 2
        assert f"error: {msg}\n" in capsys.readouterr().err
