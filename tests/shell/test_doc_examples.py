"""Every SQL and Python example in the documentation, run as a reader runs it.

Files: README.md, models/README.md, models/*/README.md and docs/*.md. Each file's ```sql blocks
run in order in the sqlite3 shell on one database, in a fresh directory where
models/, sql/ and experiments/ are the repository's (so `readfile('models/tiny.safetensors')`
works and files the examples write land in the fresh directory); a block with
no `.load` gets one. Its ```python blocks run with /usr/bin/python3 in the same
directory. Each statement is checked:

  - it must not fail, unless the comment after it says so:
        SELECT relattn_threads(0);
        -- Error: relattn_threads: n must be between 1 and 256, not 0
    and then it must fail with exactly that message (the shell's suffix for
    a code other than SQLITE_ERROR, " (18)" for SQLITE_TOOBIG, may follow);
  - `-- => text` comments after it are its exact output, one per line.

A block right after an HTML comment `<!-- run by tests/...py ... -->` is run by
that test instead (it needs a model the test trains); the test file must
exist and name the Markdown file.
"""
import os
import pathlib
import re
import sqlite3
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
SO_NOEXT = SO[:-3] if SO.endswith(".so") else SO
FILES = [ROOT / "README.md", ROOT / "models" / "README.md", *sorted((ROOT / "models").glob("*/README.md")),
         *sorted((ROOT / "docs").glob("*.md"))]

BLOCK = re.compile(r"(<!--\s*run by ([\w./-]+\.py)[^>]*-->\s*\n)?```(sql|python)\n(.*?)```", re.S)


def blocks(path):
    """[(lang, code, line, run_by)] of a Markdown file."""
    text = path.read_text()
    return [(m.group(3), m.group(4), text.count("\n", 0, m.start(3)) + 1, m.group(2))
            for m in BLOCK.finditer(text)]


class Stmt:
    def __init__(self, text, line):
        self.text, self.line = text, line
        self.want_out, self.want_err = [], None


def statements(code, first_line):
    """Splits a shell script into statements (dot-commands and complete SQL),
    with the expectations in the comments that follow each."""
    out, cur, start = [], "", 0
    for i, raw in enumerate(code.split("\n")):
        line = raw.strip()
        exp = re.match(r"--\s*(=>|Error:)\s?(.*)$", line)
        if not cur and exp and out:
            (out[-1].want_out.append(exp.group(2)) if exp.group(1) == "=>"
             else setattr(out[-1], "want_err", exp.group(2)))
            continue
        if not cur and (not line or line.startswith("--")):
            continue
        if not cur and line.startswith("."):
            out.append(Stmt(raw, first_line + i))
            continue
        if not cur:
            start = i
        cur += raw + "\n"
        if sqlite3.complete_statement(cur):
            s = Stmt(cur, first_line + start)
            # a trailing "-- => x" or "-- Error: x" on the statement's last line
            tail = re.search(r";\s*--\s*(=>|Error:)\s?(.*)$", raw)
            if tail:
                (s.want_out.append(tail.group(2)) if tail.group(1) == "=>" else setattr(s, "want_err", tail.group(2)))
            out.append(s)
            cur = ""
    assert not cur.strip(), f"incomplete SQL at the end of the block: {cur!r}"
    return out


def same_error(got, want):
    """The shell prints a result code other than SQLITE_ERROR after the
    message: " (18)" for SQLITE_TOOBIG, " (9)" SQLITE_INTERRUPT, " (7)" NOMEM."""
    return got is not None and (got == want or re.fullmatch(re.escape(want) + r" \((7|9|18)\)", got))


def run_sql(code, first_line, cwd, where):
    stmts = statements(code, first_line)
    if not any(s.text.startswith(".load") for s in stmts):
        stmts.insert(0, Stmt(".load ./relattn", first_line))
    script, ranges = [], []
    for i, s in enumerate(stmts):
        text = re.sub(r"^\.load \./relattn\b", f".load {SO_NOEXT}", s.text.rstrip("\n"))
        script.append(f".print @@{i}")
        begin = len(script) + 1
        script.extend(text.split("\n"))
        ranges.append((begin, len(script)))
    r = subprocess.run(["sqlite3", "doc.db"], input="\n".join(script) + "\n", cwd=cwd,
                       capture_output=True, text=True, timeout=600)
    outs = {}
    for chunk in r.stdout.split("@@")[1:]:
        n, _, rest = chunk.partition("\n")
        outs[int(n)] = rest.rstrip("\n").split("\n") if rest.strip("\n") else []
    errs = {}
    for line in r.stderr.splitlines():
        m = re.match(r"(?:Runtime|Parse) error near line (\d+): (.*)$", line) or re.match(r"()Error: (.*)$", line)
        if not m:
            continue
        n = int(m.group(1)) if m.group(1) else None
        i = next((k for k, (a, b) in enumerate(ranges) if n is not None and a <= n <= b), None)
        assert i is not None, f"{where}: an error not tied to a statement: {line}"
        errs[i] = m.group(2)
    wrong = []
    for i, s in enumerate(stmts):
        at = f"{where}, line {s.line}: {s.text.strip()[:80]}"
        if s.want_err is not None and not same_error(errs.get(i), s.want_err):
            wrong.append(f"{at}\n  expected error: {s.want_err}\n  got: {errs.get(i)}")
        elif s.want_err is None and i in errs:
            wrong.append(f"{at}\n  unexpected error: {errs[i]}")
        if s.want_out and outs.get(i, []) != s.want_out:
            wrong.append(f"{at}\n  expected: {s.want_out}\n  got: {outs.get(i)}")
    assert not wrong, "\n".join(wrong)
    return stmts


def run_python(code, cwd, where):
    code = code.replace('load_extension("./relattn")', f'load_extension("{SO_NOEXT}")')
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    assert r.returncode == 0, f"{where}\n{r.stderr}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_examples(path, tmp_path):
    found = blocks(path)
    assert found, f"{path} has no examples"
    (tmp_path / "models").symlink_to(ROOT / "models")
    (tmp_path / "sql").symlink_to(ROOT / "sql")
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")  # the committed results
    rel = path.relative_to(ROOT)
    for lang, code, line, run_by in found:
        where = f"{rel}, block at line {line}"
        if run_by:
            other = ROOT / run_by
            assert other.exists() and rel.name in other.read_text(), f"{where}: {run_by} does not run it"
            continue
        if lang == "sql":
            run_sql(code, line + 1, tmp_path, where)
        else:
            run_python(code, tmp_path, where)


def test_the_checker_catches_wrong_docs(tmp_path):
    """The checks above fail on a wrong error text, an unexpected error and a
    wrong output (else a doc could drift and this test pass)."""
    with pytest.raises(AssertionError, match="expected error"):
        run_sql("SELECT relattn_threads(0);\n-- Error: relattn_threads: wrong\n", 1, tmp_path, "x")
    with pytest.raises(AssertionError, match="unexpected error"):
        run_sql("SELECT relattn_threads(0);\n", 1, tmp_path, "x")
    with pytest.raises(AssertionError, match="expected"):
        run_sql("SELECT 1 + 1;   -- => 3\n", 1, tmp_path, "x")
    stmts = run_sql("SELECT 1 + 1;   -- => 2\nSELECT relattn_threads(0);\n"
                    "-- Error: relattn_threads: n must be between 1 and 256, not 0\n"
                    "SELECT 'a'\n UNION ALL SELECT 'b';\n-- => a\n-- => b\n", 1, tmp_path, "x")
    assert [s.want_out for s in stmts[1:]] == [["2"], [], ["a", "b"]]


def anchors(path):
    """GitHub's anchors for a Markdown file's headings: lower case, spaces to
    dashes, punctuation other than - and _ dropped."""
    out = set()
    for line in path.read_text().splitlines():
        m = re.match(r"#+ (.*)", line)
        if m:
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_links_resolve(path):
    """Every relative link of the docs names a file that exists and, with
    #anchor, a heading in it."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not bad, "\n".join(bad)
