"""sql/demo.sql (what `make demo` runs) in the sqlite3 shell, from the repository root, on a fresh
database: it runs to the end, and its ranking puts real text first and random bytes last."""
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))


def test_demo_runs_and_ranks(tmp_path):
    sql = (ROOT / "sql" / "demo.sql").read_text()
    so = SO[:-3] if SO.endswith(".so") else SO
    assert ".load ./relattn\n" in sql
    sql = sql.replace(".load ./relattn\n", f".load {so}\n")
    r = subprocess.run(["sqlite3", str(tmp_path / "demo.db")], input=sql, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = r.stdout
    assert out.startswith("imported 75 tensors\n")
    # the ranking table: rows "rank  kind  label  perplexity  bits  text", in rank order
    rows = re.findall(r"^(\d+)\s+(held-out verse|modern English|shuffled characters|other language"
                      r"|random bytes)\s", out, re.M)
    ranks = [int(n) for n, _ in rows]
    kinds = [k for _, k in rows]
    assert ranks == list(range(1, len(rows) + 1)) and len(rows) == 19
    real = [i for i, k in enumerate(kinds) if k in ("held-out verse", "modern English")]
    corrupted = [i for i, k in enumerate(kinds) if k in ("shuffled characters", "random bytes")]
    assert len(real) == 8 and len(corrupted) == 8 and max(real) < min(corrupted)
    assert kinds[-2:] == ["random bytes", "random bytes"]
    # the surprise section: each shown text, then a line of marks under each line of text
    assert "Where the model is surprised" in out
    assert "held-out verse (" in out and "most surprising bytes" in out
