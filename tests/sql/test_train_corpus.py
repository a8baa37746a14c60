"""models/train_corpus.py: training on a table of the user's own, importing
the model with its training facts, resuming after an interrupt.

Each test trains a very small model for a few steps on a small table of
sentences made from a random grammar (fresh seed each run), with PyTorch
(python3-torch, one thread). Not run under the sanitizers: the training is
PyTorch's, and PyTorch under the ASan preload is not ours to check; the
import it ends with is the extension's, tested everywhere else."""
import json
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from conftest import connect

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
SCRIPT = ROOT / "models" / "train_corpus.py"
QUERY = "SELECT body FROM docs WHERE lang = 'en' ORDER BY id"

pytestmark = pytest.mark.skipif(bool(os.environ.get("RELATTN_SANITIZED")),
                                reason="PyTorch is not run under the sanitizer preload")

SMALL = ["--layers", "2", "--d-model", "32", "--heads", "2", "--clip", "4",
         "--batch-tokens", "1024", "--seq-len", "64", "--heldout", "0.2", "--so", SO]


def corpus(path, rng, rows=240):
    """docs(id, body, lang): English sentences from a small grammar, and a few
    rows the query leaves out."""
    subj = ["the cat", "a dog", "my friend", "the old man", "our teacher", "the bird"]
    verb = ["sees", "likes", "finds", "calls", "helps", "meets"]
    obj = ["the ball", "a red apple", "the house", "a small boat", "the garden", "her brother"]
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT, lang TEXT)")
    for i in range(rows):
        s = " ".join(f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)}."
                     for _ in range(int(rng.integers(1, 4))))
        db.execute("INSERT INTO docs(body, lang) VALUES (?, ?)", (s, "en" if i % 8 else "xx"))
    db.execute("INSERT INTO docs(body, lang) VALUES (NULL, 'en'), ('', 'en')")  # skipped
    db.commit()
    n = db.execute("SELECT count(*) FROM docs WHERE lang = 'en' AND body <> ''").fetchone()[0]
    db.close()
    return n


def train(tmp, *args, check=True):
    r = subprocess.run([sys.executable, str(SCRIPT), "--db", "corpus.db", "--query", QUERY, *SMALL, *args],
                       cwd=tmp, capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def doc_block(name):
    """The sql block after the "run by" comment naming this test in a doc."""
    text = (ROOT / name).read_text()
    return text.split("<!-- run by tests/sql/test_train_corpus.py", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]


def shell(cwd, sql):
    so = SO[:-3] if SO.endswith(".so") else SO
    r = subprocess.run(["sqlite3", "-bail", "corpus.db"], input=f".load {so}\n{sql}", cwd=cwd,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def sql_bits(db, model, table):
    """Bits per byte of a table's rows through relattn_score."""
    return db.execute(f"SELECT -sum(relattn_score(?, body)) / sum(length(CAST(body AS BLOB))) / ln(2) "
                      f"FROM {table}", (model,)).fetchone()[0]


def test_trains_on_a_query_and_imports_with_its_facts(tmp_path, rng):
    n_rows = corpus(tmp_path / "corpus.db", rng)
    out = train(tmp_path, "--steps", "30", "--into", "corpus.db", "--name", "mine",
                "--heldout-table", "mine_heldout").stdout
    train(tmp_path, "--steps", "0", "--into", "corpus.db", "--name", "untrained")
    assert "ETA" in out and "held-out curve" in out
    db = connect(str(tmp_path / "corpus.db"))
    facts = json.loads(db.execute("SELECT json_extract(config, '$.training') FROM relattn_model "
                                  "WHERE name = 'mine'").fetchone()[0])
    held = db.execute("SELECT count(*), sum(length(CAST(body AS BLOB))) FROM mine_heldout").fetchone()
    assert facts["query"] == QUERY and facts["db"] == "corpus.db" and facts["steps"] == 30
    assert facts["rows"]["heldout"] == held[0] and facts["bytes"]["heldout"] == held[1]
    # held-out rows that also occur in training are dropped, never added
    assert 0 < held[0] and facts["rows"]["train"] + held[0] <= n_rows
    assert facts["rows"]["train"] + round(0.2 * n_rows) >= n_rows
    assert [p["step"] for p in facts["curve"]] == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]
    # the held-out figure PyTorch reported is the one SQL computes from the imported weights
    trained = sql_bits(db, "mine", "mine_heldout")
    assert abs(trained - facts["heldout_bits_per_byte"]) < 1e-3
    assert f"held-out rows scored whole: {facts['heldout_bits_per_byte']:.4f} bits/byte" in out
    # and training helped: well below the untrained model of the same shape on the same rows
    untrained = sql_bits(db, "untrained", "mine_heldout")
    assert untrained > 7.5 and trained < untrained - 1.5, (trained, untrained)
    # the examples of reading the facts in README.md and docs/reference.md, run as printed
    readme, ref = (doc_block(f) for f in ("README.md", "docs/reference.md"))
    row, again = shell(tmp_path, readme).splitlines()
    assert row.split("|") == [QUERY, str(facts["rows"]["train"]), str(facts["bytes"]["train"]), "30",
                              str(facts["seconds"]), str(facts["heldout_bits_per_byte"])]
    assert float(again) == pytest.approx(trained, abs=1e-9)
    lines = shell(tmp_path, ref).splitlines()
    assert lines == [str(facts["heldout_bits_per_byte"])] + [
        f"{p['step']}|{p['heldout_bits_per_byte']}" for p in facts["curve"]]
    svg = (tmp_path / "mine.safetensors.curve.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and svg.count("<circle") == 20
    db.close()


def test_every_config_option_reaches_the_model(tmp_path, rng):
    """Post-norm, relu, untied head, per-head tables without values, clip 2,
    F16: the imported model has that config, and SQL's forward pass agrees
    with the PyTorch one the script trained (its held-out figure)."""
    corpus(tmp_path / "corpus.db", rng, rows=80)
    train(tmp_path, "--steps", "3", "--norm", "post", "--activation", "relu", "--no-tie", "--per-head",
          "--no-values", "--clip", "2", "--d-ff", "48", "--norm-eps", "1e-6", "--dtype", "F16",
          "--seed", "7", "--into", "corpus.db", "--name", "odd", "--heldout-table", "h")
    db = connect(str(tmp_path / "corpus.db"))
    cfg = json.loads(db.execute("SELECT config FROM relattn_model WHERE name = 'odd'").fetchone()[0])
    assert (cfg["norm"], cfg["activation"], cfg["tie_embeddings"], cfg["d_ff"], cfg["norm_eps"]) == \
        ("post", "relu", False, 48, 1e-6)
    assert cfg["position"] == {"type": "shaw", "clip": 2, "values": False, "per_head": True}
    shapes = dict(db.execute("SELECT name, shape FROM relattn_tensor WHERE model = 'odd'").fetchall())
    assert shapes["layers.1.attn.rel_k"] == "[2,5,16]" and "lm_head" in shapes
    assert "ln_f.weight" not in shapes and "layers.0.attn.rel_v" not in shapes
    assert {d for (d,) in db.execute("SELECT DISTINCT dtype FROM relattn_tensor WHERE model = 'odd'")} == {"F16"}
    assert cfg["training"]["seed"] == 7
    assert abs(sql_bits(db, "odd", "h") - cfg["training"]["heldout_bits_per_byte"]) < 1e-3
    db.close()


def test_interrupt_and_resume_gives_the_same_model(tmp_path, rng):
    corpus(tmp_path / "corpus.db", rng, rows=160)
    steps = ["--steps", "60", "--log-every", "1", "--seed", "3"]
    train(tmp_path, *steps, "--out", "whole.safetensors")
    cmd = [sys.executable, str(SCRIPT), "--db", "corpus.db", "--query", QUERY, *SMALL, *steps,
           "--out", "parts.safetensors"]
    p = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in p.stdout:  # Ctrl-C once training is under way
        lines.append(line)
        if " step 3/60 " in line:
            p.send_signal(signal.SIGINT)
            break
    rest, err = p.communicate(timeout=300)
    assert p.returncode == 130, "".join(lines) + rest + err
    assert "interrupted: saving a checkpoint after this step" in err
    assert "run the same command again to resume" in rest
    assert (tmp_path / "parts.safetensors.ckpt").exists() and not (tmp_path / "parts.safetensors").exists()
    # other settings do not resume from it
    r = train(tmp_path, *steps, "--out", "parts.safetensors", "--lr", "1e-3", check=False)
    assert r.returncode != 0 and ("parts.safetensors.ckpt was made with other data or settings; "
                                  "delete it or pass --fresh") in r.stderr
    out = train(tmp_path, *steps, "--out", "parts.safetensors").stdout
    stopped = int(out.split("resuming from parts.safetensors.ckpt at step ")[1].split()[0])
    assert 3 <= stopped < 60
    assert not (tmp_path / "parts.safetensors.ckpt").exists()
    a, b = (tensors(tmp_path / f) for f in ("whole.safetensors", "parts.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    ca, cb = (meta(tmp_path / f)["training"] for f in ("whole.safetensors", "parts.safetensors"))
    assert ca["heldout_bits_per_byte"] == cb["heldout_bits_per_byte"]
    assert [p["heldout_bits_per_byte"] for p in ca["curve"]] == [p["heldout_bits_per_byte"] for p in cb["curve"]]

    # killed outright (no chance to save): the periodic checkpoint, here after every step
    cmd[-1] = "killed.safetensors"
    p = subprocess.Popen(cmd + ["--checkpoint-minutes", "0"], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if " step 5/60 " in line:
            p.kill()
            break
    p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL and (tmp_path / "killed.safetensors.ckpt").exists()
    out = train(tmp_path, *steps, "--out", "killed.safetensors").stdout
    assert 1 <= int(out.split("resuming from killed.safetensors.ckpt at step ")[1].split()[0]) < 60
    c = tensors(tmp_path / "killed.safetensors")
    assert all(np.array_equal(a[k], c[k]) for k in a)


def header(path):
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n]), data[8 + n:]


def tensors(path):
    h, data = header(path)
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype="<f4")
            for k, v in h.items() if k != "__metadata__"}


def meta(path):
    return json.loads(header(path)[0]["__metadata__"]["relattn.config"])
