"""sql/unshuffle_demo.sql in the sqlite3 shell, from the repository root, on a fresh
database: it imports models/t5-unshuffle (a T5ForConditionalGeneration in Hugging Face's
files), scores four candidate orders of each held-out summary's shuffled words with
relattn_score(model, target, source), and the share it restores is the one the training run
measured in PyTorch on the same stored weights (models/t5-unshuffle/train.json), within two
summaries (float32 here against PyTorch's float32 there: a near-tie may go either way), and
well above chance (one in four); greedy relattn_generate restores as many exactly as the
training run's greedy decoding did (within two). Also: relattn's scores of the committed model equal the float64
port of T5ForConditionalGeneration.forward (tests/hf/ports.py) within 1e-4 per token."""
import csv
import json
import os
import pathlib
import re
import sqlite3
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
MODEL = ROOT / "models" / "t5-unshuffle"
RUN = json.loads((MODEL / "train.json").read_text())


def test_demo_runs_and_gives_the_trained_accuracy(tmp_path):
    sql = (ROOT / "sql" / "unshuffle_demo.sql").read_text()
    so = SO[:-3] if SO.endswith(".so") else SO
    assert ".load ./relattn\n" in sql
    sql = sql.replace(".load ./relattn\n", f".load {so}\n")
    r = subprocess.run(["sqlite3", str(tmp_path / "t5-demo.db")], input=sql, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = r.stdout
    assert out.startswith("imported 48 tensors\n")
    cfg = json.loads((MODEL / "config.json").read_text())
    assert (f"model unshuffle: T5ForConditionalGeneration, {cfg['num_layers']} encoder and "
            f"{cfg['num_decoder_layers']} decoder layers, d_model {cfg['d_model']}") in out
    held = RUN["heldout"]
    m = re.search(r"^(\d+)\|(\d+)\|([0-9.]+)$", out, re.M)
    assert m and int(m.group(1)) == held
    restored = int(m.group(2))
    assert abs(restored - round(RUN["heldout_original_ranked_first"] * held)) <= 2
    assert restored > 0.5 * held        # chance is a quarter
    # step 6: greedy generation rewrites the table; as often exact as the
    # training run's greedy decoding in PyTorch on the same weights
    m = re.search(r"^written (\d+), exactly the original (\d+)$", out, re.M)
    assert m and int(m.group(1)) == held
    assert abs(int(m.group(2)) - round(RUN["heldout_greedy_exact"] * held)) <= 2
    shown = re.findall(r"^(.+) => (.+)$", out, re.M)
    assert len(shown) == 5
    with open(MODEL / "heldout.csv") as f:
        rows = list(csv.DictReader(f))
    for shuffled, chosen in shown:
        assert sorted(shuffled.split()) == sorted(chosen.split())
        assert any(r["shuffled"] == shuffled and r["candidate"] == chosen for r in rows)


def test_scores_equal_the_port():
    sys.path.insert(0, str(ROOT / "tests" / "hf"))
    import ports
    from safetensors_py import read
    sys.path.insert(0, str(ROOT / "tests"))
    import conftest
    db = conftest.connect()
    db.execute("SELECT relattn_import('u', ?, ?, ?, ?)",
               ((MODEL / "model.safetensors").read_bytes(), (MODEL / "config.json").read_text(),
                (MODEL / "spiece.model").read_bytes(),
                (MODEL / "tokenizer_config.json").read_text()))
    cfg = json.loads((MODEL / "config.json").read_text())
    raw, _ = read((MODEL / "model.safetensors").read_bytes())
    params = {k: np.frombuffer(b, "<f2").reshape(shape).astype(np.float64)
              for k, (dtype, shape, b) in raw.items() if dtype == "F16"}
    assert len(params) == len(raw)
    with open(MODEL / "heldout.csv") as f:
        rows = list(csv.DictReader(f))[:12]
    for r in rows:
        src = [t[0] for t in db.execute(
            "SELECT token FROM relattn_tokens_each(relattn_tokenize('u', ?))", (r["shuffled"],))]
        tgt = [t[0] for t in db.execute(
            "SELECT token FROM relattn_tokens_each(relattn_tokenize('u', ?))", (r["candidate"],))]
        labels = tgt + [1]
        out = ports.t5_conditional_generation_forward(cfg, params, src + [1],
                                                      ports.t5_shift_right(cfg, labels))
        lp = ports.log_softmax(out["logits"])[np.arange(len(labels)), labels]
        got = [x[0] for x in db.execute("SELECT logprob FROM relattn_logprobs('u', ?, ?)",
                                        (r["candidate"], r["shuffled"]))]
        assert np.abs(np.array(got) - lp).max() < 1e-4
    db.close()
