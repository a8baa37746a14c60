"""relattn_scan's progress lines while long rows run.

A row of many thousand tokens takes seconds; the progress line must not wait
for it to end. Each line counts the tokens of the rows in flight by the share
of the model's layers they have passed, and the ETA divides the source's
bytes of token values still to do by the rate so far. The scan runs in a
process of its own (progress goes to its stderr)."""
import os
import re
import subprocess
import sys

import numpy as np

import modelgen
from conftest import SO, connect

SANITIZED = bool(os.environ.get("RELATTN_SANITIZED"))
LINE = re.compile(r"relattn_scan: (\d+)/(\d+) rows \((\d+\.\d)% of the tokens\), "
                  r"(\d+) tokens/s(, ETA (\d+):(\d\d):(\d\d))?")
FINAL = re.compile(r"relattn_scan: (\d+) rows in \d+\.\d s, \d+ rows/s, \d+ tokens/s")

SCRIPT = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[2])
db.enable_load_extension(True)
db.load_extension(sys.argv[1])
db.execute("SELECT relattn_progress(1)")
db.execute("SELECT relattn_threads(1)")
db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
           "model='m', source='docs', tokens='body')")
for row in db.execute("SELECT id, embedding IS NOT NULL FROM temp.job"):
    print(*row, flush=True)
"""


def test_progress_counts_tokens_inside_long_rows(tmp_path, rng):
    path = str(tmp_path / "c.db")
    db = connect(path)
    # a row takes seconds: wide enough layers, long enough rows
    cfg = modelgen.config(arch="encoder", d_model=128 if SANITIZED else 256,
                          n_heads=4, d_ff=512 if SANITIZED else 1024, n_layers=4,
                          clip=16, bos=None, eos=None, pad=None)
    modelgen.load(db, "m", cfg, rng)
    n = 2500 if SANITIZED else 7000
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    lengths = [n, n // 2, 40]
    for i, k in enumerate(lengths, 1):
        db.execute("INSERT INTO docs VALUES (?, ?)",
                   (i, rng.integers(0, 256, k, dtype="<i4").tobytes()))
    db.commit()
    db.close()
    r = subprocess.run([sys.executable, "-c", SCRIPT, SO, path],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    # results on stdout alone, progress on stderr alone
    assert r.stdout.split("\n") == ["1 1", "2 1", "3 1", ""]
    lines = r.stderr.strip().split("\n")
    assert FINAL.fullmatch(lines[-1]) and lines[-1].startswith("relattn_scan: 3 rows in "), lines
    shown = [LINE.fullmatch(ln) for ln in lines[:-1]]
    assert shown and all(shown), lines
    rows = [int(m.group(1)) for m in shown]
    pct = [float(m.group(3)) for m in shown]
    tps = [int(m.group(4)) for m in shown]
    assert all(int(m.group(2)) == 3 for m in shown)
    # an ETA once anything is done (a loaded machine may draw a line
    # before the first layer of the first row ends)
    assert all(m.group(5) or pct[i] == 0 for i, m in enumerate(shown)), lines
    # lines while the first row ran, counting its tokens so far (it is
    # 2/3.5 of the tokens: it alone takes more than the line's second)
    inside = [i for i, k in enumerate(rows) if k == 0 and pct[i] > 0]
    assert inside, lines
    assert all(pct[i] < 100 * n / sum(lengths) for i in inside), lines
    assert all(tps[i] > 0 for i in inside), lines
    # the share only grows, and the rows done with it
    assert pct == sorted(pct) and rows == sorted(rows), lines
