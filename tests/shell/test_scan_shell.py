"""relattn_scan and sql/score_corpus.sql through the sqlite3 shell.

The batch job is killed (SIGKILL) in the middle of a chunk and run again: the results
must be complete, without duplicates, and equal to a run never interrupted
(scores within 2e-5 per token: rows may be packed into different batches). A
classifier's job, killed twice, must equal relattn_classify and relattn_labels row
for row, and an embedding job relattn_embed, bit for bit."""
import os
import pathlib
import re
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

sys.path.insert(0, str(ROOT / "tests" / "sql"))
import reference_model as ref  # noqa: E402

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


def job_text(path, *settings):
    """The job's SQL, as the first two steps print it: its head (to the first
    chunk), its chunks (each from BEGIN to the next) and its last line."""
    r = subprocess.run(job(path, *settings).rsplit(" | ", 1)[0], input=SCRIPT,
                       capture_output=True, text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    starts = [i for i, l in enumerate(lines) if l == "BEGIN;"] + [len(lines) - 1]
    head = lines[:starts[0]]
    chunks = [lines[a:b] for a, b in zip(starts, starts[1:])]
    return head, chunks, lines[-1:]


def results(path):
    db = sqlite3.connect(str(path))
    rows = db.execute("SELECT id, n_tokens, score, perplexity FROM docs_scores "
                      "ORDER BY id").fetchall()
    db.close()
    return rows


def kill_in_third_chunk(path, head, chunks, rows):
    """Kills the job in the middle of a chunk, with no race against its
    speed: the job's SQL (head, then chunk by chunk, from job_text) is fed
    to a sqlite3 shell; once the first two chunks' rows are committed,
    another connection holds the write lock, the third chunk starts and
    waits for it inside its transaction, and the shell is killed there."""
    p = subprocess.Popen(["sqlite3", str(path), "-cmd", f".load {LOAD}"],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, text=True)
    p.stdin.write("\n".join(head + chunks[0] + chunks[1]) + "\n")
    p.stdin.flush()
    lock = sqlite3.connect(str(path), timeout=60, isolation_level=None)
    deadline = time.monotonic() + 600
    done = 0
    while done < rows and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
        try:
            done = lock.execute("SELECT count(*) FROM docs_scores").fetchone()[0]
        except sqlite3.OperationalError:  # the table not made yet, or busy
            pass
    assert done == rows, done
    lock.execute("BEGIN IMMEDIATE")
    p.stdin.write("\n".join(chunks[2]) + "\n")
    p.stdin.flush()
    time.sleep(0.3)  # not needed for the result: the chunk cannot commit
    p.kill()
    p.wait()
    lock.execute("ROLLBACK")
    lock.close()


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
    head, chunks, _ = job_text(killed, *settings)
    assert any(l.startswith('CREATE TABLE IF NOT EXISTS "docs_scores"') for l in head)
    assert len(chunks) == 12
    kill_in_third_chunk(killed, head, chunks, 50)
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


def test_score_corpus_writes_no_file(tmp_path):
    # It used to write /tmp/relattn_score_corpus.*.sql and .read it back: two
    # jobs clashed, and another local user could plant SQL there. Now each
    # step pipes the SQL of the next: no dot-command of the script, nor of the
    # job it prints, names a file (.output only stderr and stdout).
    dots = [l.split()[0] for l in SCRIPT.splitlines() if l.startswith(".")]
    assert dots and set(dots) <= {".bail", ".timeout", ".parameter", ".headers", ".mode"}, dots
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    make_corpus(tmp_path / "c.db", rng, 5, 3, 10)
    for settings in ([("@progress", 2)], [("@columns", "labl")]):
        head, chunks, tail = job_text(tmp_path / "c.db", ("@chunk", 2), *settings)
        dots = {l for l in head + sum(chunks, []) + tail if l.startswith(".")}
        assert dots <= {".bail on", ".timeout 60000", ".mode off", ".mode list",
                        ".output stderr", ".output stdout", ".exit 1"}, dots


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
    # Inside the job the scans print the job's lines and no end of their own.
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "c.db"
    make_corpus(path, rng, 20, 3, 20)
    r = subprocess.run(job(path, ("@chunk", 6)),
                       input=SCRIPT, capture_output=True, text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    assert [g[0] for g in chunk_lines(r.stderr, [6, 12, 18, 20])[1]] == ["6", "12", "18", "20"]
    assert "stopped" not in r.stderr and "relattn_scan" not in r.stderr, r.stderr
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


# A chunk's line has an ETA; a line from inside a chunk has one once a rate
# is measured.
PROGRESS = re.compile(r"score_corpus: (\d+)/(\d+) rows, (\d+)/(\d+) tokens \((\d+\.\d)%\), "
                      r"(\d+) tokens/s(?:, ETA (\d+):(\d\d):(\d\d))?")


def chunk_lines(stderr, done):
    """The progress lines of stderr, each the whole job's: their groups, and
    those of the lines at the chunks' ends (rows in done; a line from inside
    a chunk that reached the same count is the same line)."""
    got = [PROGRESS.fullmatch(l).groups() for l in stderr.splitlines()]
    assert [int(g[2]) for g in got] == sorted(int(g[2]) for g in got)
    ends = []
    for g in got:
        if int(g[0]) in done and (not ends or ends[-1][:5] != g[:5]):
            ends.append(g)
    return got, ends


def test_score_corpus_progress_is_the_whole_job_on_stderr(tmp_path):
    # It was one line per chunk of that chunk's rows alone (relattn_scan's
    # own, with -cmd 'SELECT relattn_progress(1)', which printed a stray 1 on
    # stdout), and a running count on stdout.
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "c.db"
    make_corpus(path, rng, 20, 3, 20)
    db = sqlite3.connect(str(path))
    n = [len(b) // 4 for (b,) in db.execute("SELECT body FROM docs ORDER BY id")]
    # a first run does 6 rows only (its 2nd chunk is never run)
    head, chunks, _ = job_text(path, ("@chunk", 6))
    r = subprocess.run(["sqlite3", str(path), "-cmd", f".load {LOAD}"],
                       input="\n".join(head + chunks[0]) + "\n", capture_output=True,
                       text=True, timeout=600)
    assert (r.returncode, r.stdout) == (0, "")
    assert PROGRESS.fullmatch(r.stderr.strip()).groups()[:5] == \
        ("6", "20", str(sum(n[:6])), str(sum(n)), f"{100 * sum(n[:6]) / sum(n):.1f}")
    r = subprocess.run(job(path, ("@chunk", 6)), input=SCRIPT, capture_output=True,
                       text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == 'score_corpus: done, 20 rows in "docs_scores"\n'
    done = [12, 18, 20]   # the whole job's rows and tokens, the 6 before included
    got, ends = chunk_lines(r.stderr, done)
    assert [g[:5] for g in ends] == [(str(k), "20", str(sum(n[:k])), str(sum(n)),
                                      f"{100 * sum(n[:k]) / sum(n):.1f}") for k in done]
    assert got[-1][6:] == ("0", "00", "00")
    assert all(g[1:4:2] == ("20", str(sum(n))) for g in got)
    # @progress 2 (once relattn_scan's own lines as well) is 1; 0: no line
    db.execute("DROP TABLE docs_scores")
    db.commit()
    r = subprocess.run(job(path, ("@chunk", 8), ("@progress", 2)), input=SCRIPT,
                       capture_output=True, text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == 'score_corpus: done, 20 rows in "docs_scores"\n'
    assert [g[0] for g in chunk_lines(r.stderr, [8, 16, 20])[1]] == ["8", "16", "20"]
    db.execute("DROP TABLE docs_scores")
    db.commit()
    r = subprocess.run(job(path, ("@chunk", 8), ("@progress", 0)), input=SCRIPT,
                       capture_output=True, text=True, timeout=600, shell=True)
    assert (r.returncode, r.stdout, r.stderr) == \
        (0, 'score_corpus: done, 20 rows in "docs_scores"\n', "")
    db.close()


def test_score_corpus_progress_never_goes_quiet_inside_long_rows(tmp_path):
    # A chunk of rows of many thousand tokens used to print nothing until it
    # ended (minutes on rows of 17-53 KB). Now the scan prints the whole
    # job's line once a second, counting the layers a row in flight has
    # passed: a line at most 2 s after the last, each with the job's totals.
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "c.db"
    db = connect(str(path))
    # some seconds even on a fast machine: 8 layers over 4 rows of 8,000
    modelgen.load(db, "tiny", modelgen.config(d_model=256, n_heads=4, d_ff=512,
                                              n_layers=8), rng)
    n = [8000, 300, 8000, 300, 8000, 300, 8000, 300]
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.executemany("INSERT INTO docs VALUES (?, ?)",
                   [(i + 1, rng.integers(0, 256, k).astype("<i4").tobytes())
                    for i, k in enumerate(n)])
    db.commit()
    db.close()
    p = subprocess.Popen(job(path, ("@chunk", 3)), shell=True, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdin.write(SCRIPT)
    p.stdin.close()
    lines = []   # (arrival time, line)
    for line in p.stderr:
        lines.append((time.monotonic(), line.rstrip("\n")))
    out = p.stdout.read()
    assert p.wait(timeout=600) == 0, lines
    assert out == 'score_corpus: done, 8 rows in "docs_scores"\n'
    got = [PROGRESS.fullmatch(l).groups() for _, l in lines]
    assert all(g[1:4:2] == ("8", str(sum(n))) for g in got), lines
    # tokens counted inside rows: counts that are no whole rows' sum
    whole = {sum(n[:k]) for k in range(len(n) + 1)}
    assert any(int(g[2]) not in whole for g in got), lines
    assert int(got[-1][2]) == sum(n) and got[-1][6:] == ("0", "00", "00")
    gaps = [b - a for (a, _), (b, _) in zip(lines, lines[1:])]
    assert len(lines) >= 4 and max(gaps) < 2.0, (gaps, lines)


LABELS = ["negative", "positive", "neutral"]


def classifier_corpus(path, rng, rows, head="classifier"):
    """docs(id, body): token BLOBs of 2-120 tokens (ids with gaps), one
    empty and one NULL; models 'enc' (an encoder with the given head, d_model
    64) and, so that the job must pick, a decoder 'tiny'."""
    db = connect(str(path))
    modelgen.load(db, "tiny", modelgen.config(d_model=32, n_heads=4, d_ff=64), rng)
    cfg = ref.random_config(rng, arch="encoder", d_model=64, n_heads=4, d_ff=128)
    cfg = ref.with_head(cfg, head, pooler="tanh", labels=LABELS if head == "classifier" else None)
    db.execute("SELECT relattn_import('enc', ?)",
               (ref.safetensors_bytes(ref.random_params(rng, cfg), cfg),))
    bodies = [np.asarray(rng.integers(0, 256, int(rng.integers(2, 121))), dtype="<i4").tobytes()
              for _ in range(rows)]
    bodies[rows // 3], bodies[rows // 2] = b"", None
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.executemany("INSERT INTO docs VALUES (?, ?)", [(2 * i + 5, b) for i, b in enumerate(bodies)])
    db.commit()
    db.close()


def scalar_labels(path):
    """Each row as relattn_classify and relattn_labels give it: (id, n_tokens,
    label, prob, logit, error), the best label's prob and logit."""
    db = connect(str(path))
    want = []
    for i, body in db.execute("SELECT id, body FROM docs ORDER BY id").fetchall():
        if body == b"":
            want.append((i, None, None, None, None, f"relattn_scan: body of id {i} is empty"))
            continue
        if body is None:
            want.append((i, None, None, None, None, None))
            continue
        (label,) = db.execute("SELECT relattn_classify('enc', ?)", (body,)).fetchone()
        rows = db.execute("SELECT label, prob, logit FROM relattn_labels('enc', ?)",
                          (body,)).fetchall()
        (best,) = [r for r in rows if r[0] == label]
        assert best[2] == max(r[2] for r in rows)
        want.append((i, len(body) // 4) + best + (None,))
    db.close()
    return want


def scores(path, columns):
    db = sqlite3.connect(str(path))
    rows = db.execute(f"SELECT id, {columns} FROM docs_scores ORDER BY id").fetchall()
    db.close()
    return rows


def test_classifier_job_killed_twice_equals_the_scalar_functions(tmp_path):
    # A classifier's job used to stop at once: relattn_scan: model 'enc' is
    # an encoder; only decoder models give score and perplexity. Without
    # @columns it now keeps label, prob and logit, by the model's head.
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "c.db"
    classifier_corpus(path, rng, 400)
    want = scalar_labels(path)
    settings = [("@model", "enc"), ("@chunk", 25)]
    cols = "n_tokens, label, prob, logit, error"

    # Kill 1, at a point chosen with no race: two chunks committed, the
    # third scored into its staging table and waiting for the write lock
    # that another connection holds, inside its transaction.
    head, chunks, _ = job_text(path, *settings)
    assert len(chunks) == 16
    kill_in_third_chunk(path, head, chunks, 50)
    assert scores(path, cols) == want[:50]

    # Kill 2, wherever the running job is when a 5th chunk of this run has
    # been seen committed (scoring the next one, most of the time).
    first, second = (subprocess.Popen(["sqlite3", str(path)] + sum(
        (["-cmd", f".parameter set {k} {v}"] for k, v in settings), []),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True), None)
    second = subprocess.Popen(["sqlite3", str(path)], stdin=first.stdout, stdout=subprocess.PIPE)
    last = subprocess.Popen(["sqlite3", str(path), "-cmd", f".load {LOAD}"], stdin=second.stdout,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first.stdout.close()
    second.stdout.close()
    first.stdin.write(SCRIPT)
    first.stdin.close()
    lock = sqlite3.connect(str(path), timeout=60, isolation_level=None)
    deadline = time.monotonic() + 600
    done = 50
    while done < 175 and time.monotonic() < deadline and last.poll() is None:
        time.sleep(0.005)
        try:
            done = lock.execute("SELECT count(*) FROM docs_scores").fetchone()[0]
        except sqlite3.OperationalError:
            pass
    time.sleep(rng.uniform(0, 0.05))
    assert last.poll() is None, "the job ended before it was killed"
    last.kill()
    for q in (last, second, first):
        q.wait()
    lock.close()
    partial = scores(path, cols)
    assert 175 <= len(partial) < 400 and len(partial) % 25 == 0   # whole chunks only
    assert partial == want[:len(partial)]

    # The third run completes: every row once, each equal to the scalar
    # functions' bits
    r = subprocess.run(job(path, *settings), input=SCRIPT, capture_output=True,
                       text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == 'score_corpus: done, 400 rows in "docs_scores"\n'
    assert scores(path, cols) == want
    db = sqlite3.connect(str(path))
    assert db.execute("SELECT sql FROM sqlite_master WHERE name = 'docs_scores'").fetchone() == (
        'CREATE TABLE "docs_scores"(id INTEGER PRIMARY KEY, n_tokens INTEGER, label TEXT, '
        'prob REAL, logit REAL, error TEXT)',)
    db.close()


def test_embedding_job_equals_relattn_embed(tmp_path):
    # An encoder without a classifier keeps n_tokens and embedding; @columns
    # chooses any other set, for a decoder too.
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "c.db"
    classifier_corpus(path, rng, 60, head="none")
    r = subprocess.run(job(path, ("@model", "enc"), ("@chunk", 7)), input=SCRIPT,
                       capture_output=True, text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    db = connect(str(path))
    assert db.execute("SELECT count(*) FROM docs_scores a JOIN docs d USING (id) WHERE "
                      "a.embedding IS relattn_embed('enc', nullif(d.body, x'')) AND "
                      "a.n_tokens IS length(d.body) / 4 AND a.error IS NULL").fetchone() == (59,)
    assert db.execute("SELECT id, n_tokens, embedding, error FROM docs_scores "
                      "WHERE error IS NOT NULL").fetchall() == \
        [(45, None, None, "relattn_scan: body of id 45 is empty")]  # row 20
    r = subprocess.run(job(path, ("@model", "tiny"), ("@results", "emb"),
                           ("@columns", "'embedding, Score'")),
                       input=SCRIPT, capture_output=True, text=True, timeout=600, shell=True)
    assert r.returncode == 0, r.stderr
    assert db.execute("SELECT sql FROM sqlite_master WHERE name = 'emb'").fetchone() == (
        'CREATE TABLE "emb"(id INTEGER PRIMARY KEY, embedding BLOB, score REAL, error TEXT)',)
    assert db.execute("SELECT count(*) FROM emb a JOIN docs d USING (id) WHERE "
                      "a.embedding IS relattn_embed('tiny', nullif(d.body, x'')) AND "
                      "a.score IS relattn_score('tiny', nullif(d.body, x''))").fetchone() == (60,)
    db.close()


def test_score_corpus_bad_columns_change_nothing(tmp_path):
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "c.db"
    classifier_corpus(path, rng, 10)
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE old_scores(id INTEGER PRIMARY KEY, n_tokens INTEGER, score REAL, "
               "perplexity REAL, error TEXT)")
    db.commit()
    schema = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
    before = db.execute(schema).fetchall()
    choose = "n_tokens, score, perplexity, embedding, label, prob, logit, generated, error"
    cases = [
        ([("@columns", "labl,prob")],
         f"score_corpus: @columns: relattn_scan has no column 'labl' (choose from {choose})"),
        ([("@columns", "'label, prob, Label'")], "score_corpus: @columns names 'label' twice"),
        ([("@columns", "''")], f"score_corpus: @columns is empty: name one or more of {choose}"),
        ([("@columns", "' , '")], f"score_corpus: @columns is empty: name one or more of {choose}"),
        ([("@columns", "score")], "Runtime error near line 4: relattn_scan: model 'enc' is an "
         "encoder; only decoder models give score and perplexity (embedding works)"),
        ([("@model", "tiny"), ("@columns", "label")], "Runtime error near line 4: relattn_scan: "
         "model 'tiny' has no classifier head (its head is 'lm'): no label, logit or prob"),
        ([("@results", "old_scores")], "score_corpus: results table 'old_scores' has the columns "
         "(id, n_tokens, score, perplexity, error), not this job's (id, n_tokens, label, prob, "
         "logit, error): set @columns to its columns, or name another @results"),
        ([("@model", "tiny"), ("@results", "old_scores"), ("@columns", "score,n_tokens")],
         "score_corpus: results table 'old_scores' has the columns (id, n_tokens, score, "
         "perplexity, error), not this job's (id, score, n_tokens, error): set @columns to its "
         "columns, or name another @results"),
    ]
    for settings, error in cases:
        r = subprocess.run(job(path, ("@model", "enc"), *settings), input=SCRIPT,
                           capture_output=True, text=True, timeout=600, shell=True)
        assert (r.returncode, r.stdout, r.stderr) == (1, "", error + "\n"), settings
        assert db.execute(schema).fetchall() == before, settings
    # the table's own columns, in its order, resume into it
    r = subprocess.run(job(path, ("@model", "tiny"), ("@results", "old_scores"),
                           ("@columns", "n_tokens,score,perplexity")), input=SCRIPT,
                       capture_output=True, text=True, timeout=600, shell=True)
    assert (r.returncode, r.stdout) == (0, 'score_corpus: done, 10 rows in "old_scores"\n')
    db.close()


def test_generated_job_resumes_and_equals_relattn_generate(tmp_path):
    """@columns generated with @generate: the results are relattn_generate's
    on each row; a run stopped half-way (its results cut back to a chunk's
    end, as after SIGKILL) and run again ends with every row once."""
    path = tmp_path / "c.db"
    db = connect(str(path))
    db.execute("SELECT relattn_import('tiny', ?)",
               ((ROOT / "models" / "tiny.safetensors").read_bytes(),))
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    words = ["And God said", "In the beginning", "Blessed are the", "Let there be",
             "The LORD is my", None, "", "Thou shalt"]
    db.executemany("INSERT INTO docs(body) VALUES (?)", [(w,) for w in words * 3])
    db.commit()
    options = '{"max_new_tokens": 12, "stop": "."}'
    want = db.execute("SELECT id, relattn_generate('tiny', body, ?) FROM docs "
                      "WHERE body IS NOT '' ORDER BY id", (options,)).fetchall()
    db.close()
    settings = [("@columns", "generated"), ("@generate", shlex.quote(options)),
                ("@chunk", 5), ("@progress", 0)]
    r = subprocess.run(job(path, *settings), input=SCRIPT, shell=True,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == 'score_corpus: done, 24 rows in "docs_scores"'
    db = sqlite3.connect(str(path))
    assert db.execute("SELECT id, generated FROM docs_scores WHERE error IS NULL "
                      "ORDER BY id").fetchall() == want
    db.execute("DELETE FROM docs_scores WHERE id > 10")
    db.commit()
    db.close()
    r = subprocess.run(job(path, *settings), input=SCRIPT, shell=True,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    db = sqlite3.connect(str(path))
    assert db.execute("SELECT id, generated FROM docs_scores WHERE error IS NULL "
                      "ORDER BY id").fetchall() == want
    assert db.execute("SELECT count(*), count(DISTINCT id) FROM docs_scores").fetchone() == (24, 24)
    db.close()
