"""sql/classify_demo.sql (what `make hf-demo` runs) in the sqlite3 shell, from the repository root,
on a fresh database: it imports models/deberta-licenses from Hugging Face's files, labels the
held-out paragraphs through relattn_scan, and its accuracy and per-licence counts are the ones
the training run measured in PyTorch (models/deberta-licenses/train.json)."""
import json
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
RUN = json.loads((ROOT / "models" / "deberta-licenses" / "train.json").read_text())


def test_hf_demo_runs_and_gives_the_trained_accuracy(tmp_path):
    sql = (ROOT / "sql" / "classify_demo.sql").read_text()
    so = SO[:-3] if SO.endswith(".so") else SO
    assert ".load ./relattn\n" in sql
    sql = sql.replace(".load ./relattn\n", f".load {so}\n")
    r = subprocess.run(["sqlite3", str(tmp_path / "hf-demo.db")], input=sql, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = r.stdout
    assert out.startswith("imported 43 tensors\n")
    assert ("model licenses: DebertaV2ForSequenceClassification from deberta-v2, 2 layers, 4 heads, "
            "d_model 128, head classifier, labels " + json.dumps(RUN["documents"], separators=(",", ":"))
            in out)
    # each text the demo labels one at a time is shown beside its label and probability,
    # the first 57 characters and '...' when it is longer than 60
    first = "You may convey verbatim copies of the Program's source co..."
    second = "The Package may be distributed freely, with the Standard ..."
    best = re.findall(r"^(.{60})  (\S+)\s+([0-9.]+)\s*$", out.split("text ", 1)[1].split("\ntext ")[0], re.M)
    assert [(t, label) for t, label, _ in best] == [(first, "GPL-3"), (second, "Artistic")]
    assert all(0.5 < float(p) <= 1 for _, _, p in best)
    every = re.findall(r"^(.{60})  (\S+)\s+(-?[0-9.]+)\s+([0-9.]+)\s*$",
                       out.split("\ntext ", 1)[1].split("heldout_paragraphs")[0], re.M)
    assert [(t, label) for t, label, _, _ in every] == [(second, d) for d in RUN["documents"]]
    assert [p for _, label, _, p in every if label == "Artistic"] == [best[1][2]]
    per_doc = {d: tuple(map(int, c.split("/"))) for d, c in RUN["heldout_accuracy_per_document"].items()}
    right, total = sum(c[0] for c in per_doc.values()), sum(c[1] for c in per_doc.values())
    assert total == RUN["passages"]["heldout"]
    m = re.search(r"^(\d+)\s+(\d+)\s+([0-9.]+)\s*$", out.split("passages  correct  accuracy")[1], re.M)
    assert m and (int(m[1]), int(m[2])) == (total, right)
    assert float(m[3]) == RUN["heldout_accuracy"]
    rows = dict((d, (int(c), int(n))) for d, n, c in
                re.findall(r"^(\S+)\s+(\d+)\s+(\d+)\s+[0-9.]+\s*$", out.split("licence ")[1], re.M))
    assert rows == per_doc
    # the mistakes, most confident first: as many as there are wrong answers, at most 5
    mistakes = out.split("truth ")[1]
    shown = re.findall(r"^(\S+)\s+(\S+)\s+([0-9.]+)\s+\S", mistakes, re.M)
    assert len(shown) == min(5, total - right)
    assert all(t != p for t, p, _ in shown)
    probs = [float(p) for _, _, p in shown]
    assert probs == sorted(probs, reverse=True)
