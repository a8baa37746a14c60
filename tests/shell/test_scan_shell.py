"""relattn_scan and sql/score_corpus.sql through the sqlite3 shell.

The batch job is killed (SIGKILL) in the middle of a chunk and run again: the results
must be complete, without duplicates, and equal to a run never interrupted
(scores within 2e-5 per token: rows may be packed into different batches)."""
import os
import pathlib
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import modelgen  # noqa: E402
from conftest import connect  # noqa: E402

SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
LOAD = SO[:-3] if SO.endswith(".so") else SO
SCRIPT = (ROOT / "sql" / "score_corpus.sql").read_text()


def make_corpus(path, rng, n_rows, lo, hi, d_model=32):
    db = connect(str(path))
    cfg = modelgen.config(d_model=d_model, n_heads=4, d_ff=2 * d_model)
    modelgen.load(db, "tiny", cfg, rng)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.executemany("INSERT INTO docs VALUES (?, ?)",
                   [(3 * i + 1, np.asarray(rng.integers(0, 256, int(rng.integers(lo, hi + 1))),
                                           dtype="<i4").tobytes())
                    for i in range(n_rows)])
    db.commit()
    db.close()


def job(path, *settings, last=()):
    """The README's pipeline: the script (settings on the first sqlite3) prints
    the SQL that prints the job, which the last sqlite3 runs. For
    subprocess with shell=True, the script on stdin."""
    db = shlex.quote(str(path))
    first = " ".join(f"-cmd {shlex.quote(f'.parameter set {k} {v}')}" for k, v in settings)
    cmds = " ".join(f"-cmd {shlex.quote(c)}" for c in [f".load {LOAD}", *last])
    return f"sqlite3 {db} {first} | sqlite3 {db} | sqlite3 {db} {cmds}"


def results(path):
    db = sqlite3.connect(str(path))
    rows = db.execute("SELECT id, n_tokens, score, perplexity FROM docs_scores "
                      "ORDER BY id").fetchall()
    db.close()
    return rows


def test_scan_in_the_shell(tmp_path):
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "c.db"
    make_corpus(path, rng, 12, 3, 30)
    r = subprocess.run(
        ["sqlite3", "-bail", str(path)],
        input=f".load {LOAD}\n"
              "CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='tiny', source='docs', tokens='body');\n"
              "SELECT count(*), sum(score < 0), sum(perplexity > 1) FROM temp.job WHERE id > 10;\n"
              "SELECT id, typeof(embedding), length(embedding) FROM temp.job WHERE id = 13;\n"
              "SELECT relattn_progress(1);\n"
              "SELECT count(*) FROM temp.job;\n"
              "CREATE VIRTUAL TABLE temp.bad USING relattn_scan(model='tiny', source='docs', tokens='text');\n",
        capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert r.stdout.split() == ["8|8|8", "13|blob|128", "1", "12"]
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("relattn_scan: 12 rows in ") and "tokens/s" in lines[0], r.stderr
    assert lines[-1].endswith("relattn_scan: source 'docs' has no column 'text' (tokens=)")


def test_score_corpus_resumes_after_sigkill(tmp_path):
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    whole, killed = tmp_path / "whole.db", tmp_path / "killed.db"
    make_corpus(whole, rng, 300, 20, 200, d_model=64)
    shutil.copy(whole, killed)
    settings = [("@chunk", 25)]

    r = subprocess.run(job(whole, *settings), input=SCRIPT, capture_output=True,
                       text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == 'score_corpus: done, 300 rows in "docs_scores"'
    want = results(whole)
    assert len(want) == 300

    # Kill the job in the middle of a chunk, with no race against its speed:
    # the first two steps of the pipeline print the job's SQL, which is fed
    # to the last sqlite3 chunk by chunk. After two chunks, another
    # connection holds the write lock, a third chunk starts and waits for
    # it inside its transaction, and the job is killed there.
    text = subprocess.run(job(killed, *settings).rsplit(" | ", 1)[0], input=SCRIPT,
                          capture_output=True, text=True, timeout=600, shell=True)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    head, chunks = lines[:4], [lines[i:i + 4] for i in range(4, len(lines) - 1, 4)]
    assert head[-1].startswith('CREATE TABLE IF NOT EXISTS "docs_scores"')
    assert len(chunks) == 12 and all(c[0] == "BEGIN;" for c in chunks)
    p = subprocess.Popen(["sqlite3", str(killed), "-cmd", f".load {LOAD}"],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, text=True)
    p.stdin.write("\n".join(head + chunks[0] + chunks[1]) + "\n")
    p.stdin.flush()
    lock = sqlite3.connect(str(killed), timeout=60, isolation_level=None)
    deadline = time.monotonic() + 600
    done = 0
    while done < 50 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
        try:
            done = lock.execute("SELECT count(*) FROM docs_scores").fetchone()[0]
        except sqlite3.OperationalError:  # the table not made yet, or busy
            pass
    assert done == 50, done
    lock.execute("BEGIN IMMEDIATE")
    p.stdin.write("\n".join(chunks[2]) + "\n")
    p.stdin.flush()
    time.sleep(0.2)  # not needed for the result: the chunk cannot commit
    p.kill()
    p.wait()
    lock.execute("ROLLBACK")
    lock.close()
    partial = results(killed)
    assert len(partial) == 50  # whole chunks only
    assert [r[:2] for r in partial] == [w[:2] for w in want[:50]]

    r = subprocess.run(job(killed, *settings), input=SCRIPT, capture_output=True,
                       text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    got = results(killed)
    assert [g[0] for g in got] == [w[0] for w in want]  # complete, no duplicates
    assert [g[1] for g in got] == [w[1] for w in want]
    for g, w in zip(got, want):
        assert abs(g[2] - w[2]) <= 2e-5 * (w[1] + 1), (g, w)
        assert abs(g[3] - w[3]) <= 2e-5 * w[3]
    # a third run finds nothing left to do
    r = subprocess.run(job(killed, *settings), input=SCRIPT, capture_output=True,
                       text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == 'score_corpus: done, 300 rows in "docs_scores"'
    assert results(killed) == got


def test_score_corpus_writes_no_file():
    # It used to write /tmp/relattn_score_corpus.*.sql and .read it back: two
    # jobs clashed, and another local user could plant SQL there. Now each
    # step pipes the SQL of the next: no dot-command of the script names a file.
    dots = [l.split()[0] for l in SCRIPT.splitlines() if l.startswith(".")]
    assert dots and set(dots) <= {".bail", ".parameter", ".headers", ".mode"}, dots


def test_score_corpus_bad_rows_are_recorded_and_the_job_goes_on(tmp_path):
    # One empty, oversized or bad-token row used to stop the whole job.
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "c.db"
    make_corpus(path, rng, 0, 1, 1)
    db = connect(str(path))
    vocab = db.execute("SELECT config ->> '$.vocab_size' FROM relattn_model").fetchone()[0]
    rows = {}
    for i in range(1, 41):
        kind = i % 5
        if kind == 1:
            body = b""                                            # empty
        elif kind == 2:
            body = np.asarray(rng.integers(0, 256, 60), dtype="<i4").tobytes()  # too long
        elif kind == 3:
            body = np.asarray([5, vocab + i, 7], dtype="<i4").tobytes()      # bad token
        else:
            body = np.asarray(rng.integers(0, 256, int(rng.integers(2, 40))),
                              dtype="<i4").tobytes()
        rows[i] = body
    db.executemany("INSERT INTO docs VALUES (?, ?)", rows.items())
    db.commit()
    r = subprocess.run(job(path, ("@chunk", 7), last=["SELECT relattn_max_tokens(50)"]),
                       input=SCRIPT, capture_output=True, text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == 'score_corpus: done, 40 rows in "docs_scores"'
    got = db.execute("SELECT id, n_tokens, score, perplexity, error FROM docs_scores "
                     "ORDER BY id").fetchall()
    assert [g[0] for g in got] == list(rows)
    for (i, n, score, ppl, error), body in zip(got, rows.values()):
        kind = i % 5
        if kind == 1:
            assert (n, score, error) == (None, None, f"relattn_scan: body of id {i} is empty")
        elif kind == 2:
            assert (n, score, error) == (None, None, f"relattn_scan: body of id {i} has 60 "
                                         "tokens, over relattn_max_tokens() = 50")
        elif kind == 3:
            assert (n, score, error) == (None, None, (
                f"relattn_scan: body of id {i} has token {vocab + i} at position 1, "
                f"outside the model's vocabulary [0, {vocab})"))
        else:
            want = db.execute("SELECT relattn_score('tiny', ?)", (body,)).fetchone()[0]
            assert error is None and n == len(body) // 4
            assert abs(score - want) <= 2e-5 * (n + 1)
    db.close()


def test_score_corpus_chunks_end_without_stopped(tmp_path):
    # Every chunk is a scan cut by its LIMIT: a normal end, not "(stopped)".
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "c.db"
    make_corpus(path, rng, 20, 3, 20)
    r = subprocess.run(job(path, ("@chunk", 6), last=["SELECT relattn_progress(1)"]),
                       input=SCRIPT, capture_output=True, text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert [l.split(" rows in ")[0] for l in lines] == ["relattn_scan: 6"] * 3 + ["relattn_scan: 2"]
    assert not any("stopped" in l for l in lines), lines
    # a scan that fails still says so
    r = subprocess.run(["sqlite3", str(path), "-cmd", f".load {LOAD}", "-cmd",
                        "SELECT relattn_progress(1)"],
                       input="INSERT INTO docs VALUES (100, x'');\n"
                             "CREATE VIRTUAL TABLE temp.j USING relattn_scan("
                             "model='tiny', source='docs', tokens='body');\n"
                             "SELECT count(score) FROM temp.j;\n",
                       capture_output=True, text=True, timeout=600)
    assert r.stderr.splitlines()[0].startswith("relattn_scan: 20 rows in ")
    assert r.stderr.splitlines()[0].endswith(" (stopped)")
    assert "relattn_scan: body of id 100 is empty" in r.stderr.splitlines()[1]


def test_score_corpus_bad_settings_change_nothing(tmp_path):
    # A typo in @source or @tokens used to leave an empty results table
    # behind (made before the source was read), and the pipeline's status
    # was 0: the second sqlite3 failed, the last one ran nothing.
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "c.db"
    make_corpus(path, rng, 5, 3, 10)
    db = sqlite3.connect(str(path))
    db.execute("CREATE VIEW docs_v AS SELECT id, body FROM docs")
    db.commit()
    schema = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
    before = db.execute(schema).fetchall()
    cases = [
        ([("@source", "dcos")],
         "relattn_scan: source 'dcos' is not a table or view in temp or main"),
        ([("@tokens", "bdy")], "relattn_scan: source 'docs' has no column 'bdy' (tokens=)"),
        ([("@id", "idd")], "relattn_scan: source 'docs' has no column 'idd' (id=)"),
        ([("@source", "docs_v")],
         "relattn_scan: source 'docs_v' is a view: name its INTEGER id column with id="),
        ([("@model", "tny")], "relattn_scan: no model named 'tny'"),
        ([("@tokens", "bdy"), ("@results", "docs_scores")],
         "relattn_scan: source 'docs' has no column 'bdy' (tokens=)"),
    ]
    for settings, error in cases:
        r = subprocess.run(job(path, *settings), input=SCRIPT, capture_output=True,
                           text=True, timeout=600, shell=True)
        assert (r.returncode, r.stdout, r.stderr) == \
            (1, "", f"Runtime error near line 3: {error}\n"), settings
        assert db.execute(schema).fetchall() == before, settings
    # the same settings, spelt right, do the job
    r = subprocess.run(job(path, ("@source", "docs_v"), ("@id", "id")), input=SCRIPT,
                       capture_output=True, text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == 'score_corpus: done, 5 rows in "docs_v_scores"'
    db.close()
