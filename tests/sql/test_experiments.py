"""experiments/sweep.py end to end, in miniature: three runs of the sweep (an
untrained model, a Shaw k = 2 model and a Transformer-XL model, trained for a
few steps at a tiny width) on a small corpus made from a random grammar
(fresh seed each run), evaluated through relattn_scan, recorded in a results
database, drawn.

Checks that every row is complete and sane: the untrained model is near
uniform (log2 259 bits per byte), the trained ones beat it at every length,
the script's bits per byte are the ones relattn_score gives on the windows
the test cuts itself from the held-out rows, each row's config is its
scheme's, the relative/plain timing ran with the model's own terms, and a
second run resumes (trains nothing). docs/experiments.md's queries of the
committed results run in tests/shell/test_doc_examples.py. Not run under the
sanitizers: the training is PyTorch's (see test_train_corpus.py)."""
import json
import math
import os
import pathlib
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from conftest import connect

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
SCRIPT = ROOT / "experiments" / "sweep.py"
LENGTHS = (64, 256, 1024, 4096)

pytestmark = pytest.mark.skipif(bool(os.environ.get("RELATTN_SANITIZED")),
                                reason="PyTorch is not run under the sanitizer preload")


def corpus(path, rng):
    """train(id, source, body) and heldout(id, source, body): sentences of a small grammar."""
    subj = ["the cat", "a dog", "my friend", "the old man", "our teacher", "the bird"]
    verb = ["sees", "likes", "finds", "calls", "helps", "meets"]
    obj = ["the ball", "a red apple", "the house", "a small boat", "the garden", "her brother"]
    sent = lambda: " ".join(f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)}."
                            for _ in range(int(rng.integers(1, 4))))
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE train(id INTEGER PRIMARY KEY, source TEXT, body TEXT)")
    db.execute("CREATE TABLE heldout(id INTEGER PRIMARY KEY, source TEXT, body TEXT)")
    db.executemany("INSERT INTO train(source, body) VALUES ('g', ?)", [(sent(),) for _ in range(400)])
    db.executemany("INSERT INTO heldout(source, body) VALUES ('g', ?)", [(sent(),) for _ in range(150)])
    db.commit()
    held = " ".join(b for (b,) in db.execute("SELECT body FROM heldout ORDER BY id")).encode()
    db.close()
    return held


def sweep(tmp, *extra):
    r = subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(tmp / "corpus.db"), "--work", str(tmp / "work"),
                        "--results", str(tmp / "results.db"), "--pictures", str(tmp / "img"),
                        "--only", "untrained,shaw-k2,xl-1000steps", "--profiles", "shaw-k2", "--steps", "30",
                        "--warmup", "5",
                        "--d-model", "16", "--layers", "1", "--heads", "2", "--batch-tokens", "1024",
                        "--windows", "1", "--trainer-heldout", "0.05", "--so", SO, *extra],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_miniature_sweep(tmp_path):
    held = corpus(tmp_path / "corpus.db", np.random.default_rng())
    out = sweep(tmp_path)
    res = sqlite3.connect(tmp_path / "results.db")
    res.row_factory = sqlite3.Row
    rows = {r["name"]: r for r in res.execute("SELECT * FROM runs")}

    done = {n: r for n, r in rows.items() if r["status"] == "done"}
    assert sorted(rows) == sorted(done) == ["shaw-k2", "untrained", "xl-1000steps"]
    for name, r in done.items():
        assert all(r[c] is not None for c in r.keys() if c != "rel_v" or r["scheme"] == "shaw"), name
        for c in ("bpb_64", "bpb_256", "bpb_1024", "bpb_4096"):
            assert 0 < r[c] < 20 and math.isfinite(r[c]), (name, c, r[c])
        assert r["tokens_per_s"] > 0 and r["rel_ms"] > 0 and r["plain_ms"] > 0
        assert r["rel_plain"] == pytest.approx(r["rel_ms"] / r["plain_ms"])
        assert r["eval_bytes"] == 4096 and r["data_fraction"] == 1.0 and r["seq_len"] == 256
        assert (r["d_model"], r["layers"], r["heads"], r["threads"]) == (16, 1, 2, 1)
        cfg = json.loads(r["config"])
        if r["scheme"] == "shaw":
            assert cfg["position"] == {"type": "shaw", "clip": r["clip"], "values": bool(r["rel_v"]),
                                       "per_head": False}
        assert cfg["training"]["steps"] == r["steps"]
    k2, u, xl = done["shaw-k2"], done["untrained"], done["xl-1000steps"]
    assert (k2["clip"], k2["rel_v"], k2["steps"], u["steps"], u["train_seconds"]) == (2, 1, 30, 0, 0)
    # the plan's Transformer-XL run, with the step count asked for
    assert (xl["scheme"], xl["clip"], xl["rel_v"], xl["steps"]) == ("xl", 4095, None, 30)
    assert json.loads(xl["config"])["position"] == {"type": "xl", "clip": 4095}
    assert json.loads(xl["config"])["training"]["settings"]["warmup"] == 5
    for r in (k2, xl):
        assert r["train_seconds"] > 0 and r["bytes_seen"] > 0 and r["params"] > 0
    # An untrained model (weights N(0, 0.02)) is close to uniform over the 259 tokens.
    for n in LENGTHS:
        assert abs(u[f"bpb_{n}"] - math.log2(259)) < 0.1, (n, u[f"bpb_{n}"])
        for r in (k2, xl):
            assert r[f"bpb_{n}"] < u[f"bpb_{n}"] - 1.0, (r["name"], n, r[f"bpb_{n}"], u[f"bpb_{n}"])

    # The script's figures, recomputed: the first 4096 held-out bytes cut into windows, each
    # scored from its own bos by relattn_score.
    db = connect(str(tmp_path / "work" / "models.db"))
    for name, r in done.items():
        for n in LENGTHS:
            nats = -sum(db.execute("SELECT relattn_score(?, relattn_tokens(?))",
                                   (name, json.dumps(list(held[i:i + n])))).fetchone()[0]
                        for i in range(0, 4096, n))
            assert r[f"bpb_{n}"] == pytest.approx(nats / math.log(2) / 4096, rel=1e-9), (name, n)
    db.close()

    for f in ("experiments_bpb_vs_k.svg", "experiments_bpb_vs_length.svg", "experiments_profile_shaw-k2.svg"):
        root = ET.parse(tmp_path / "img" / f).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg", f
    # one line per run of the longest step count (the untrained model's 0 steps are not)
    by_length = (tmp_path / "img" / "experiments_bpb_vs_length.svg").read_text()
    assert ">shaw-k2<" in by_length and ">xl-1000steps<" in by_length and ">untrained<" not in by_length
    assert ">256 bytes, 30 steps<" in (tmp_path / "img" / "experiments_bpb_vs_k.svg").read_text()
    assert not (tmp_path / "img" / "experiments_data_fraction.svg").exists()  # no 10% run here

    # Run again: every run is in the results with the same settings, so nothing trains.
    before = [tuple(r) for r in res.execute("SELECT * FROM runs WHERE status = 'done' ORDER BY name")]
    again = sweep(tmp_path)
    assert all(f"{n}: already in" in again for n in done) and "training" not in again
    assert [tuple(r) for r in res.execute("SELECT * FROM runs WHERE status = 'done' ORDER BY name")] == before
    res.close()
