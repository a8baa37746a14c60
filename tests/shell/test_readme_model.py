"""The README's "Scoring, embedding and inspecting sequences" example, run as
written in the sqlite3 shell from the repository root, on the bundled model."""
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
MODEL = ROOT / "models" / "tiny.safetensors"


def readme_block(title):
    text = (ROOT / "README.md").read_text()
    section = text[text.index(title):]
    return re.search(r"```sql\n(.*?)```", section, re.S).group(1)


@pytest.mark.skipif(not MODEL.exists(), reason="no bundled model yet")
def test_readme_scoring_example():
    sql = readme_block("## Scoring, embedding and inspecting sequences")
    so = SO[:-3] if SO.endswith(".so") else SO
    sql = sql.replace(".load ./relattn", f".load {so}")
    r = subprocess.run(["sqlite3", "-bail", ":memory:"], input=sql, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    score, ppl, dim = float(lines[1]), float(lines[2]), int(lines[3])
    assert score < 0 and ppl > 1 and dim > 0
    # 'In the beginning' has 16 bytes: one log-prob row each (the model has bos)
    rows = [l for l in lines[4:] if l.count("|") == 4]
    assert [int(l.split("|")[0]) for l in rows] == list(range(16))
    # the map row of query 6 covers keys 0..6 and sums to 1 (3 decimals each)
    att = [l.split("|") for l in lines if l.count("|") == 3]
    assert [int(a[1]) for a in att] == list(range(7))
    assert abs(sum(float(a[3]) for a in att) - 1) < 0.01
    ranked = [l for l in lines if l.count("|") == 2]
    assert len(ranked) == 3
