"""The bundled model (models/tiny.safetensors) through SQL, against what PyTorch computed at export.

models/tiny.reference.json holds, from models/train.py (a PyTorch implementation written from DESIGN
§4-5, independent of the C code and of tests/sql/reference_model.py), float64 per-token log-probs of
held-out sequences computed from the weights as stored (F16). Tolerances: 1e-4 absolute per token;
the held-out bits per byte to 1e-5 (it averages 50k bytes). The corpus test runs sql/demo_corpus.sql,
the texts `make demo` ranks."""
import json
import math
import pathlib
import re

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
MODELS = ROOT / "models"
REF = json.loads((MODELS / "tiny.reference.json").read_text())


@pytest.fixture
def tiny(db):
    n = db.execute("SELECT relattn_import('tiny', ?)",
                   ((MODELS / "tiny.safetensors").read_bytes(),)).fetchone()[0]
    assert n == 3 + 18 * 4  # tok_emb, ln_f (2), 18 per layer, 4 layers; no lm_head (tied)
    return db


def test_file_is_the_one_the_reference_was_computed_from():
    import hashlib
    assert hashlib.sha256((MODELS / "tiny.safetensors").read_bytes()).hexdigest() == REF["sha256"]
    assert (MODELS / "tiny.safetensors").stat().st_size <= 8 * 1024 * 1024


def test_config_from_metadata(tiny):
    cfg = json.loads(tiny.execute("SELECT config FROM relattn_model WHERE name = 'tiny'").fetchone()[0])
    assert cfg["arch"] == "decoder" and cfg["vocab_size"] == 259
    assert cfg["position"] == {"type": "shaw", "clip": 16, "values": True, "per_head": False}
    assert cfg["tokenizer"] == {"type": "bytes", "bos": 256, "eos": 257, "pad": 258}


@pytest.mark.parametrize("i", range(len(REF["sequences"])), ids=[s["ref"] for s in REF["sequences"]])
def test_logprobs_equal_pytorch(tiny, i):
    seq = REF["sequences"][i]
    rows = tiny.execute("SELECT pos, token, logprob, top_token, top_logprob FROM relattn_logprobs('tiny', ?)",
                        (seq["text"],)).fetchall()
    assert [r[0] for r in rows] == list(range(len(seq["tokens"])))
    assert [r[1] for r in rows] == seq["tokens"]
    got = np.array([r[2] for r in rows])
    want = np.array(seq["logprobs"])
    assert np.abs(got - want).max() < 1e-4
    assert np.abs(np.array([r[4] for r in rows]) - seq["top_logprob"]).max() < 1e-4
    # the top token is PyTorch's, unless two candidates are within the tolerance of each other
    for r, top, top_lp, lp in zip(rows, seq["top_token"], seq["top_logprob"], want):
        if r[3] != top:
            assert abs(r[4] - top_lp) < 1e-4
    # relattn_score, given the same sequence as a token BLOB
    blob = np.array(seq["tokens"], dtype="<i4").tobytes()
    score = tiny.execute("SELECT relattn_score('tiny', ?)", (blob,)).fetchone()[0]
    assert abs(score - seq["score"]) < 1e-4 * len(seq["tokens"])
    assert score == pytest.approx(got.sum(), abs=1e-9 * len(seq["tokens"]))


def heldout_rows():
    import csv
    with open(MODELS / "tiny.heldout.csv", newline="", encoding="utf-8") as f:
        return [(r["source"], r["ref"], r["text"]) for r in csv.DictReader(f)]


def test_heldout_bits_per_byte_equal_the_model_card(tiny):
    rows = heldout_rows()
    assert len(rows) == REF["heldout_set"]["sequences"]
    tiny.execute("CREATE TABLE heldout(source TEXT, ref TEXT, text TEXT)")
    tiny.executemany("INSERT INTO heldout VALUES (?, ?, ?)", rows)
    # the query the model card shows
    bpb, nbytes = tiny.execute(
        "SELECT -sum(relattn_score('tiny', text)) / sum(length(CAST(text AS BLOB))) / ln(2),"
        "       sum(length(CAST(text AS BLOB))) FROM heldout").fetchone()
    assert nbytes == REF["heldout_set"]["bytes"]
    assert abs(bpb - REF["heldout_set"]["bits_per_byte"]) < 1e-5
    card = (MODELS / "README.md").read_text()
    m = re.search(r"^\| bundled held-out set.*\*\*([0-9.]+)\*\* \|$", card, re.M)  # its row, in bold
    assert m, "models/README.md states the bundled held-out set's bits per byte"
    assert float(m.group(1)) == pytest.approx(bpb, abs=0.00006)


def test_real_text_ranks_below_its_corruptions(tiny):
    tiny.executescript((ROOT / "sql" / "demo_corpus.sql").read_text())
    rows = tiny.execute("SELECT kind, label, relattn_perplexity('tiny', body) FROM corpus").fetchall()
    by_kind = {}
    for kind, label, ppl in rows:
        by_kind.setdefault(kind, {})[label] = ppl
    assert set(by_kind) == {"held-out verse", "modern English", "shuffled characters", "other language",
                            "random bytes"}
    real = list(by_kind["held-out verse"].values()) + list(by_kind["modern English"].values())
    corrupted = list(by_kind["shuffled characters"].values()) + list(by_kind["random bytes"].values())
    # every real text below every corrupted one, by a wide margin (perplexity per byte)
    assert max(real) * 2 < min(corrupted)
    # each shuffled text above its own original
    originals = {**by_kind["held-out verse"], **by_kind["modern English"]}
    for label, ppl in by_kind["shuffled characters"].items():
        assert ppl > 2 * originals[label]
    # random bytes are the least likely of all
    assert min(by_kind["random bytes"].values()) > max(by_kind["shuffled characters"].values())
    # another language sits between: below random bytes
    assert max(by_kind["other language"].values()) < min(by_kind["random bytes"].values())
    assert all(math.isfinite(p) for p in real + corrupted)
