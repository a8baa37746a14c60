"""sql/demo.sql (what `make demo` runs) in the sqlite3 shell, from the repository root, on a fresh
database: it runs to the end, and its ranking puts real text first and random bytes last."""
import os
import pathlib
import re
import subprocess
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))


def test_demo_runs_and_ranks(tmp_path):
    sql = (ROOT / "sql" / "demo.sql").read_text()
    so = SO[:-3] if SO.endswith(".so") else SO
    assert ".load ./relattn\n" in sql
    sql = sql.replace(".load ./relattn\n", f".load {so}\n")
    # the pictures go to the test's directory, not over the committed ones
    assert "'docs/img/" in sql
    sql = sql.replace("'docs/img/", f"'{tmp_path}/img/")
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
    # the pictures: the same files as the committed ones in docs/img, each an
    # SVG with the parts of its kind (the README shows the committed ones)
    made = sorted(p.name for p in (tmp_path / "img").glob("*.svg"))
    assert made == sorted(p.name for p in (ROOT / "docs" / "img").glob("*.svg"))
    assert made == ["attention_layer0_head0.svg", "attention_layer2_head2.svg",
                    "distance_profile.svg", "surprise_french.svg", "surprise_verse.svg"]
    for name in made:
        new = ET.parse(tmp_path / "img" / name).getroot()
        old = ET.parse(ROOT / "docs" / "img" / name).getroot()
        # the committed picture is what this demo makes: same size, same elements
        assert new.get("viewBox") == old.get("viewBox") and new.get("width") == old.get("width")
        assert [e.tag for e in new.iter()] == [e.tag for e in old.iter()], name
        assert f"  {tmp_path}/img/{name}\n" in out
    # the model continues a verse: greedy, 4 beams and a sample, 48 new bytes each
    tail = out.split("The model continues a verse (relattn_generate, 48 new bytes):\n\n")[1]
    lines = tail.splitlines()[:3]
    start = "And God said, Let there be"
    assert [l[:11] for l in lines] == ["  greedy:  ", "  4 beams: ", "  sampled: "]
    assert all(l[11:].startswith(start) and len(l[11:]) == len(start) + 48 for l in lines)
    assert len(set(l[11:] for l in lines)) == 3
    prof = ET.parse(tmp_path / "img" / "distance_profile.svg").getroot()
    panels = prof.findall(".//{http://www.w3.org/2000/svg}g[@class='panel']")
    assert len(panels) == 16  # 4 layers x 4 heads
