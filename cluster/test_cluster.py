"""cluster/relattn_dask.py on Dask LocalClusters of worker processes, against a
plain relattn_scan of the same corpus in this process.

A few thousand random short texts (fresh every run; the seed is printed), ids
with gaps, one NULL body, the bundled model. Not run under the sanitized pass
of make test (RELATTN_SANITIZED): the workers are other processes, and Dask's
own threads are not ours to check.
"""
import os
import pathlib
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "sql"))
import reference_model as ref  # noqa: E402

pytestmark = pytest.mark.skipif(bool(os.environ.get("RELATTN_SANITIZED")),
                                reason="Dask workers are not run under the sanitizers")

ROOT = pathlib.Path(__file__).resolve().parents[1]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
PROGRAM = ROOT / "cluster" / "relattn_dask.py"
MODEL = ROOT / "models" / "tiny.safetensors"
ROWS = 2000
ALL = "n_tokens,score,perplexity,embedding"


def connect(path):
    db = sqlite3.connect(path, isolation_level=None)
    db.enable_load_extension(True)
    db.load_extension(SO)
    db.enable_load_extension(False)
    return db


def make_corpus(path, rng, rows, lengths=(2, 30)):
    """docs(id, body): random texts of 2-30 characters (or lengths), ids 1, 4,
    7, ... (gaps), one NULL and one empty (a row the model cannot take); and
    the bundled model."""
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz      ,.'ETAOINSHRDLU"))
    lengths = rng.integers(lengths[0], lengths[1] + 1, rows)
    bodies = ["".join(rng.choice(alphabet, n)) for n in lengths]
    bodies[rows // 2] = None
    bodies[rows // 3] = ""
    db = connect(path)
    db.execute("SELECT relattn_import('tiny', ?)", (MODEL.read_bytes(),))
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO docs VALUES (?, ?)",
                   [(3 * i + 1, b) for i, b in enumerate(bodies)])
    db.close()


def scan(path, columns=ALL):
    """A single-process relattn_scan of the whole corpus, in id order, with
    its error column."""
    db = connect(path)
    db.execute("SELECT relattn_threads(2)")
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='tiny', "
               "source='docs', tokens='body')")
    rows = db.execute(f"SELECT id, {columns}, error FROM temp.job").fetchall()
    db.close()
    return rows


def results(path, table="docs_scores", columns=ALL):
    db = sqlite3.connect(path)
    rows = db.execute(f"SELECT id, {columns}, error FROM {table} ORDER BY id").fetchall()
    db.close()
    return rows


def ranges(path):
    db = sqlite3.connect(path)
    rows = db.execute("SELECT shard, lo, hi, planned_rows, rows, worker, done_at "
                      "FROM relattn_cluster_range ORDER BY shard, lo").fetchall()
    db.close()
    return rows


def command(*args):
    return [sys.executable, str(PROGRAM), "--extension", SO, *map(str, args)]


def run(*args, rc=0):
    r = subprocess.run(command(*args), capture_output=True, text=True, timeout=600)
    assert r.returncode == rc, r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed={seed}")
    path = tmp_path_factory.mktemp("corpus") / "corpus.db"
    make_corpus(path, np.random.default_rng(seed), ROWS)
    return path


@pytest.fixture(scope="module")
def reference(corpus):
    return scan(corpus)


@pytest.fixture(scope="module")
def two_workers(corpus, tmp_path_factory):
    """The default command: a LocalCluster of 2 worker processes."""
    out = tmp_path_factory.mktemp("two") / "scores.db"
    r = run(corpus, "--results", out, "--workers", 2, "--range-rows", 300, "--columns", ALL)
    return out, r.stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Dask cluster started as the README starts one, with `dask scheduler`
    and `dask worker` (2 worker processes of 1 thread, each with a nanny that
    replaces it when it dies); yields its address and a client of it."""
    from distributed import Client
    d = tmp_path_factory.mktemp("dask")
    log = open(d / "log", "w")
    procs = [subprocess.Popen(["dask", "scheduler", "--port", "0", "--dashboard-address", ":0",
                               "--scheduler-file", d / "scheduler.json"],
                              stdout=log, stderr=log)]
    try:
        client = Client(scheduler_file=str(d / "scheduler.json"), timeout="120s")
        procs.append(subprocess.Popen(
            ["dask", "worker", client.scheduler.address, "--nworkers", "2", "--nthreads", "1",
             "--local-directory", d, "--dashboard-address", ":0"], stdout=log, stderr=log))
        client.wait_for_workers(2, timeout=120)
        yield client.scheduler.address, client
        client.close()
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()


def test_two_workers_equal_a_single_process_scan(corpus, reference, two_workers):
    out, stdout = two_workers
    assert "7 ranges to score (2000 rows), 0 done before" in stdout
    got = results(out)
    assert len(got) == ROWS
    # Bit-identical: floats compared with ==, embeddings byte for byte.
    mismatched = [g[0] for g, w in zip(got, reference) if g != w]
    assert mismatched == [] and len(got) == len(reference)
    done = ranges(out)
    assert len(done) == 7 and all(d[6] is not None for d in done)
    assert sum(d[4] for d in done) == ROWS
    assert len({d[5] for d in done}) == 2      # both workers scored ranges
    # consecutive ranges, each its planned size, covering every id
    assert [d[1] for d in done] == [1 + 3 * 300 * i for i in range(7)]
    assert [d[3] for d in done] == [300] * 6 + [200]


def test_docs_cluster_md_queries(two_workers):
    """docs/cluster.md's SQL block, on the results of the 2-worker run."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    block = text.split("<!-- run by cluster/test_cluster.py")[1].split("```sql\n")[1]
    block = block.split("```")[0]
    first, second = [q for q in block.split(";") if q.strip()]
    db = sqlite3.connect(two_workers[0])
    (shard, n, done, rows, tokens), = db.execute(first).fetchall()
    assert (n, done, rows) == (7, 7, ROWS)
    assert tokens == db.execute("SELECT sum(n_tokens) FROM docs_scores").fetchone()[0] > ROWS
    assert db.execute(second).fetchall() == \
        [(1 + 3 * (ROWS // 3), f"relattn_scan: body of id {1 + 3 * (ROWS // 3)} is empty")]


def test_rerun_after_completion_does_nothing(corpus, two_workers):
    out, _ = two_workers
    before = list(sqlite3.connect(out).iterdump())
    r = run(corpus, "--results", out, "--workers", 2, "--range-rows", 300, "--columns", ALL)
    assert r.stdout == "nothing to do: all 7 ranges of 'docs_scores' are done\n"
    assert list(sqlite3.connect(out).iterdump()) == before


def test_rerun_scores_only_rows_added_since(cluster, tmp_path):
    """New ids past the last range are planned as new ranges; nothing else is
    scored again. The model comes from its own database file."""
    address, _ = cluster
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "corpus.db"
    make_corpus(path, rng, 50)
    model_db = tmp_path / "model.db"
    shutil.copy(path, model_db)
    db = sqlite3.connect(path)
    db.execute("DELETE FROM relattn_model")
    db.commit()
    out = tmp_path / "scores.db"
    args = (path, "--results", out, "--model-file", model_db, "--scheduler",
            address, "--threads", 1, "--range-rows", 20, "--columns", ALL)
    r = run(*args)
    assert "3 ranges to score (50 rows), 0 done before" in r.stdout
    before = results(out)
    db.executemany("INSERT INTO docs VALUES (?, ?)",
                   [(10 ** 6 + i, "added row %d" % i) for i in range(5)])
    db.commit()
    db.close()
    r = run(*args)
    assert "1 ranges to score (5 rows), 3 done before" in r.stdout
    got = results(out)
    assert got[:50] == before
    assert [g[0] for g in got[50:]] == [10 ** 6 + i for i in range(5)]
    assert [g[1:] for g in got[50:]] == scan_rows(model_db, [f"added row {i}" for i in range(5)])


def scan_rows(model_db, bodies):
    """The given texts, scanned in this process with the model of model_db."""
    db = connect(model_db)
    db.execute("CREATE TEMP TABLE t(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO t(body) VALUES (?)", [(b,) for b in bodies])
    db.execute("CREATE VIRTUAL TABLE temp.j USING relattn_scan(model='tiny', "
               "source='t', tokens='body')")
    rows = db.execute(f"SELECT {ALL}, error FROM temp.j").fetchall()
    db.close()
    return rows


def test_killed_worker_loses_only_its_range(corpus, reference, cluster, tmp_path):
    """SIGKILL to a worker process while it runs a range: Dask runs that range
    again on a worker that is alive (its nanny also starts a new one), and the
    results are complete, each range committed once."""
    address, client = cluster
    out = tmp_path / "scores.db"

    def executing(dask_worker):
        return os.getpid(), [ts.key for ts in dask_worker.state.executing]

    job = subprocess.Popen(command(corpus, "--results", out, "--scheduler", address,
                                   "--threads", 1, "--range-rows", 250, "--columns", ALL),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        victim = None
        deadline = time.monotonic() + 300
        while victim is None and job.poll() is None and time.monotonic() < deadline:
            for addr, (pid, keys) in client.run(executing).items():
                keys = [k for k in keys if k.startswith("relattn-scan-")]
                if keys:
                    os.kill(pid, signal.SIGKILL)   # as soon as a range is seen running
                    victim = addr, keys[0]
                    break
            time.sleep(0.02)
        stdout, stderr = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    assert victim is not None, "no range was seen running"
    assert job.returncode == 0, stdout + stderr
    assert results(out) == reference
    done = ranges(out)
    assert len(done) == 8 and all(d[6] is not None for d in done)
    assert sum(d[4] for d in done) == ROWS
    # the killed range: committed once, by another worker than the one killed
    addr, key = victim
    lo = int(key.split("-")[3])
    (killed,) = [d for d in done if d[1] == lo]
    assert killed[5] != addr


def test_three_shard_files_equal_one_file(corpus, reference, cluster, tmp_path):
    """The corpus cut into 3 files by id, the model in its safetensors file."""
    address, _ = cluster
    shards = [tmp_path / f"shard{i}.db" for i in range(3)]
    src = sqlite3.connect(corpus)
    rows = src.execute("SELECT id, body FROM docs ORDER BY id").fetchall()
    src.close()
    cuts = [0, 700, 1400, ROWS]
    for i, path in enumerate(shards):
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
        db.executemany("INSERT INTO docs VALUES (?, ?)", rows[cuts[i]:cuts[i + 1]])
        db.commit()
        db.close()
    out = tmp_path / "scores.db"
    r = run(*shards, "--results", out, "--model-file", MODEL, "--scheduler",
            address, "--threads", 1, "--range-rows", 5000, "--columns", ALL)
    assert "3 ranges to score (2000 rows), 0 done before" in r.stdout
    assert results(out) == reference
    done = ranges(out)
    assert [(pathlib.Path(d[0]).name, d[4]) for d in done] == \
        [("shard0.db", 700), ("shard1.db", 700), ("shard2.db", 600)]


def test_failed_range_is_not_committed_and_is_redone(cluster, tmp_path):
    """A source that cannot be read fails its range only; the others are
    committed, and the next run does just that range. A row the model cannot
    take is not a failure: it is stored with its error."""
    address, _ = cluster
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "corpus.db"
    make_corpus(path, rng, 40)                    # id 40 (row 13) is empty
    db = sqlite3.connect(path)
    # id 43 (row 14, in the second range) cannot be read
    db.execute("CREATE VIEW docs_v AS SELECT id, CASE id WHEN 43 THEN json('{') "
               "ELSE body END AS body FROM docs")
    db.commit()
    out = tmp_path / "scores.db"
    args = (path, "--results", out, "--source", "docs_v", "--id", "id", "--table",
            "docs_scores", "--scheduler", address, "--threads", 1, "--range-rows", 10)
    r = run(*args, rc=1)
    lines = r.stderr.splitlines()    # among Dask's own log lines
    assert f"range 31..58 of {path} failed: malformed JSON" in lines
    assert "1 ranges failed; run the same command again to retry them" in lines
    assert [d[1] for d in ranges(out) if d[6] is None] == [31]
    assert len(results(out, columns="score")) == 30
    db.execute("DROP VIEW docs_v")
    db.execute("CREATE VIEW docs_v AS SELECT id, body FROM docs")
    db.commit()
    db.close()
    r = run(*args)
    assert "1 ranges to score (10 rows), 3 done before" in r.stdout
    assert "1 rows have an error instead of results: SELECT id, error FROM " \
        '"docs_scores" WHERE error IS NOT NULL' in r.stdout.splitlines()
    got = results(out, columns="n_tokens,score,perplexity")
    assert got == scan(path, "n_tokens,score,perplexity")
    assert [g for g in got if g[4] is not None] == \
        [(40, None, None, None, "relattn_scan: body of id 40 is empty")]


def test_bad_jobs_are_refused_before_anything_runs(corpus, two_workers, tmp_path):
    out, _ = two_workers
    before = list(sqlite3.connect(out).iterdump())
    r = run(corpus, "--results", out, "--columns", "score", rc=2)
    assert r.stderr == ("relattn_dask: results table 'docs_scores' belongs to another job "
                        "(columns 'n_tokens,score,perplexity,embedding', not 'score'): "
                        "name another --table or --results\n")
    r = run(corpus, "--results", out, "--source", "nodocs", "--table", "other", rc=2)
    assert r.stderr == (f"relattn_dask: source 'nodocs' in {corpus} is not a table or view "
                        "(--source)\n")
    r = run(corpus, "--results", out, "--model", "small", "--table", "other", rc=2)
    assert r.stderr == (f"relattn_dask: no model named 'small' in {corpus} (--model-file "
                        "names the file that holds it)\n")
    r = run(corpus, "--results", out, "--model-file", PROGRAM, "--table", "other", rc=2)
    assert r.stderr.startswith(f"relattn_dask: model 'tiny' from {PROGRAM}: relattn_import: "
                               "safetensors_blob: header length ")
    # nothing was written: no plan, no job, no rows
    assert list(sqlite3.connect(out).iterdump()) == before


def readme_section():
    text = (ROOT / "README.md").read_text()
    start = text.index("## Beyond one machine: a sharded corpus on Dask")
    return text[start:text.index("\n## ", start + 1)]


def test_readme_commands(cluster, tmp_path):
    """The README's two commands, as written but for the paths and the address."""
    address, _ = cluster
    blocks = readme_section().split("```sh\n")[1:]
    local = blocks[0].split("```")[0].strip()
    remote = blocks[1].split("```")[0].replace("\\\n", " ")
    remote = next(l for l in remote.splitlines() if "relattn_dask.py" in l).strip()
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    make_corpus(tmp_path / "corpus.db", rng, 60)
    local = local.replace("cluster/relattn_dask.py", str(PROGRAM)) + " --extension " + SO
    r = subprocess.run(local, shell=True, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    # no --range-rows: 4 ranges for each of the 2 workers
    assert r.stdout.splitlines()[0] == "8 ranges to score (60 rows), 0 done before"
    want = scan(tmp_path / "corpus.db", "n_tokens,score,perplexity")
    assert results(tmp_path / "scores.db", columns="n_tokens,score,perplexity") == want

    shared = tmp_path / "shared"
    (shared / "corpus").mkdir(parents=True)
    src = sqlite3.connect(tmp_path / "corpus.db")
    for i in range(3):
        db = sqlite3.connect(shared / "corpus" / f"shard{i}.db")
        db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
        db.executemany("INSERT INTO docs VALUES (?, ?)", src.execute(
            "SELECT id, body FROM docs WHERE id / 3 % 3 = ?", (i,)))
        db.commit()
        db.close()
    src.close()
    (tmp_path / "scores.db").unlink()
    remote = (remote.replace("cluster/relattn_dask.py", str(PROGRAM))
              .replace("/shared/corpus/", str(shared / "corpus") + "/")
              .replace("/shared/tiny.safetensors", str(MODEL))
              .replace("tcp://host:8786", address)
              .replace("/shared/relattn/relattn.so", SO)) + " --threads 1"
    r = subprocess.run(remote, shell=True, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    # 60 rows for 2 workers: ranges of 8 rows, 3 in each shard of 20
    assert r.stdout.splitlines()[0] == "9 ranges to score (60 rows), 0 done before"
    assert results(tmp_path / "scores.db", columns="n_tokens,score,perplexity") == want


def schema(path):
    db = sqlite3.connect(path)
    rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")
    rows = rows.fetchall()
    db.close()
    return rows


def test_misspelt_source_or_column_writes_nothing(corpus, two_workers, cluster, tmp_path):
    """A --tokens the source does not have used to be planned, its ranges all
    failed, and the results table and the job's record were left naming it
    (a rerun spelt right was then refused as another job)."""
    out, _ = two_workers
    before = schema(out)
    first = tmp_path / "corpus.db"
    shutil.copy(corpus, first)
    db = sqlite3.connect(first)
    db.execute("CREATE VIEW docs_v AS SELECT id, body FROM docs")
    db.commit()
    db.close()
    second = tmp_path / "shard2.db"          # the column has another name there
    db = sqlite3.connect(second)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, text TEXT)")
    db.commit()
    db.close()
    fresh = tmp_path / "fresh.db"
    cases = [
        ([first, "--source", "dcos"],
         f"source 'dcos' in {first} is not a table or view (--source)"),
        ([first, "--tokens", "bdy"], f"source 'docs' in {first} has no column 'bdy' (--tokens)"),
        ([first, "--id", "idd"], f"source 'docs' in {first} has no column 'idd' (--id)"),
        ([first, "--source", "docs_v"],
         f"source 'docs_v' in {first} is a view: name its INTEGER id column with --id"),
        ([first, second], f"source 'docs' in {second} has no column 'body' (--tokens)"),
    ]
    for args, error in cases:
        for results_db in (out, fresh):
            r = run(*args, "--results", results_db, rc=2)
            assert r.stderr == f"relattn_dask: {error}\n"
        assert schema(out) == before
        assert not fresh.exists()
    # spelt right, the view with its id column is a job
    r = run(first, "--source", "docs_v", "--id", "id", "--results", fresh, "--scheduler",
            cluster[0], "--threads", 1)
    assert r.stdout.splitlines()[0] == f"8 ranges to score ({ROWS} rows), 0 done before"


DONE = "SELECT count(*) FROM relattn_cluster_range WHERE done_at IS NOT NULL"


def lock_mid_run(out, job):
    """This process's connection holding the results database's write lock
    (BEGIN IMMEDIATE), taken as soon as the job has committed a range, and
    the count of ranges done then."""
    lock = sqlite3.connect(out, timeout=60, isolation_level=None)
    done, deadline = 0, time.monotonic() + 300
    while not done and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
        try:
            done = lock.execute(DONE).fetchone()[0]
        except sqlite3.OperationalError:    # not planned yet
            pass
    assert job.poll() is None, "".join(job.communicate())
    lock.execute("BEGIN IMMEDIATE")
    return lock, lock.execute(DONE).fetchone()[0]


@pytest.fixture
def slow_corpus(tmp_path):
    """400 texts of 200-400 characters: 20 ranges of 20 rows, about as many
    seconds on the two workers, so that a range is committed well before
    the last one is scored."""
    path = tmp_path / "slow.db"
    make_corpus(path, np.random.default_rng(int.from_bytes(os.urandom(4), "little")), 400,
                (200, 400))
    return path


def test_progress_comes_every_second_while_ranges_run(cluster, tmp_path):
    """Two ranges of 1,000 rows of 200-400 characters, one a worker, each
    some seconds long: the whole job's line comes less than 2 s after the
    one before (it came when a range was committed, so not at all until
    then), and counts the rows the workers report of the ranges they still
    hold."""
    address, _ = cluster
    path = tmp_path / "slow.db"
    make_corpus(path, np.random.default_rng(int.from_bytes(os.urandom(4), "little")), 2000,
                (200, 400))
    p = subprocess.Popen(command(path, "--results", tmp_path / "scores.db",
                                 "--scheduler", address, "--threads", 1,
                                 "--range-rows", 1000),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []   # (arrival time, line)
    for line in p.stderr:
        if line.startswith("relattn_dask: "):
            lines.append((time.monotonic(), line.rstrip("\n")))
    out = p.stdout.read()
    assert p.wait(timeout=600) == 0, out
    got = [PROGRESS.fullmatch(l) for _, l in lines]
    assert all(got), lines
    rows = [int(m[1]) for m in got]
    assert rows == sorted(rows) and rows[-1] == 2000 and all(m[2] == "2000" for m in got)
    # rows of ranges not committed yet: neither 0 nor a whole range's 1,000
    assert any(r % 1000 for r in rows), rows
    gaps = [b - a for (a, _), (b, _) in zip(lines, lines[1:])]
    assert len(lines) >= 4 and max(gaps) < 2.0, (gaps, lines)


def test_waits_for_a_writer_holding_the_lock(cluster, slow_corpus, tmp_path):
    """Another connection holds the results database's write lock for 4 s,
    past the job's busy timeout (1 s), mid-run: the job keeps what it scores
    meanwhile, and commits it once the lock is free. It used to stop with
    SQLite's "database is locked" and a traceback, past its busy timeout."""
    address, _ = cluster
    out = tmp_path / "scores.db"
    job = subprocess.Popen(command(slow_corpus, "--results", out, "--scheduler", address,
                                   "--threads", 1, "--range-rows", 20, "--lock-wait", 120),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock, done = lock_mid_run(out, job)
        try:
            assert 0 < done < 20
            time.sleep(4)
            assert job.poll() is None
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        stdout, stderr = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stdout + stderr
    lines = stdout.replace("\r", "\n").splitlines()
    assert (f"the results database {out} is locked by another connection: "
            "waiting for up to 120 s (--lock-wait)") in lines
    assert [l for l in lines if l.startswith("the results database is free again after ")]
    assert results(out, columns="n_tokens,score,perplexity") == \
        scan(slow_corpus, "n_tokens,score,perplexity")
    assert [(d[3], d[4]) for d in ranges(out)] == [(20, 20)] * 20


def test_gives_up_on_a_writer_that_keeps_the_lock(cluster, slow_corpus, tmp_path):
    """The lock held from before the job starts, then from mid-run, for
    longer than --lock-wait: one line that names the database and says what
    to do, nothing committed lost; the same command then does the rest."""
    address, _ = cluster
    out = tmp_path / "scores.db"
    args = (slow_corpus, "--results", out, "--scheduler", address, "--threads", 1,
            "--range-rows", 20, "--lock-wait", 2)
    advice = ("Let that connection commit or close, then run the same command again: "
              "it scores only the ranges not saved")
    lock = sqlite3.connect(out, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        r = run(*args, rc=2)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert r.stdout == (f"the results database {out} is locked by another connection: "
                        "waiting for up to 2 s (--lock-wait)\n")
    assert r.stderr == (f"relattn_dask: the results database {out} is locked: another "
                        "connection has held its write lock for the 2 s of --lock-wait; "
                        f"nothing was scored. {advice}\n")
    assert schema(out) == []

    job = subprocess.Popen(command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        lock, done = lock_mid_run(out, job)
        try:
            assert 0 < done < 20
            stdout, stderr = job.communicate(timeout=600)
        finally:
            lock.execute("ROLLBACK")
            lock.close()
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 2, stdout + stderr
    assert "Traceback" not in stderr
    last = stderr.splitlines()[-1]
    m = re.fullmatch(re.escape(f"relattn_dask: the results database {out} is locked: another "
                               "connection has held its write lock for the 2 s of --lock-wait; ")
                     + r"(\d+)" + re.escape(f" ranges scored in this run are not saved. {advice}"),
                     last)
    assert m and 1 <= int(m[1]) <= 20 - done, last
    saved = ranges(out)
    assert len([d for d in saved if d[6]]) == done
    assert len(results(out, columns="score")) == sum(d[4] or 0 for d in saved)

    r = run(*args)
    assert r.stdout.splitlines()[0] == \
        f"{20 - done} ranges to score ({400 - 20 * done} rows), {done} done before"
    assert results(out, columns="n_tokens,score,perplexity") == \
        scan(slow_corpus, "n_tokens,score,perplexity")
    assert [(d[3], d[4]) for d in ranges(out)] == [(20, 20)] * 20


PROGRESS = re.compile(r"relattn_dask: (\d+)/(\d+) rows, (\d+)/(\d+) tokens \((\d+\.\d)%\), "
                      r"\d+ tokens/s, ETA \d+:\d\d:\d\d")


def test_default_ranges_and_progress_off_a_terminal(corpus, reference, cluster, tmp_path):
    """Without --range-rows, 2,000 rows on 2 workers are 8 ranges (it was one
    range of 10,000 rows at most: one worker did it all), and both workers
    score some. Progress, on stderr, is the whole job's; to a file it is a
    line a second at most (Dask's bar drew 10 frames a second into a
    redirected stdout)."""
    address, _ = cluster
    out = tmp_path / "scores.db"
    with open(tmp_path / "stdout", "w+") as so, open(tmp_path / "stderr", "w+") as se:
        t = time.monotonic()
        job = subprocess.run(command(corpus, "--results", out, "--scheduler", address,
                                     "--threads", 1, "--columns", ALL),
                             stdout=so, stderr=se, timeout=600)
        seconds = time.monotonic() - t
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    assert job.returncode == 0, stdout + stderr
    lines = stdout.splitlines()
    assert lines[0] == f"8 ranges to score ({ROWS} rows), 0 done before"
    assert lines[1].startswith(f"scored {ROWS} rows (") and len(lines) == 3   # and the errors
    assert "\r" not in stdout + stderr
    assert results(out) == reference
    done = ranges(out)
    assert [d[3] for d in done] == [250] * 8 and len({d[5] for d in done}) == 2
    progress = [PROGRESS.fullmatch(l) for l in stderr.splitlines()
                if l.startswith("relattn_dask: ")]
    tokens = sum(r[1] or 0 for r in reference)
    assert all(progress) and 1 <= len(progress) <= seconds + 2
    assert progress[-1].groups() == (str(ROWS), str(ROWS), str(tokens), str(tokens), "100.0")
    assert [int(m[1]) for m in progress] == sorted(int(m[1]) for m in progress)


def test_classifier_job_killed_equals_the_scalar_functions(cluster, tmp_path):
    """A classifier's job: by default label, prob and logit (it used to fail
    every range: relattn_scan: model 'enc' is an encoder; only decoder
    models give score and perplexity). The program is killed (SIGKILL) once
    a range is committed, and run again: every row once, equal to
    relattn_classify and relattn_labels; an embedding job equal to
    relattn_embed, bit for bit."""
    address, _ = cluster
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "corpus.db"
    # texts of 200-400 characters: the ranges take long enough that the lock
    # is taken while some are still being scored (of short ones, all 15 could
    # be scored, and committed, before it)
    make_corpus(path, rng, 300, (200, 400))
    cfg = ref.with_head(ref.random_config(rng, arch="encoder", d_model=64, n_heads=4,
                                          d_ff=128), "classifier", pooler="tanh",
                        labels=["negative", "positive", "neutral"])
    db = connect(path)
    db.execute("SELECT relattn_import('enc', ?)",
               (ref.safetensors_bytes(ref.random_params(rng, cfg), cfg),))
    want, embed = [], []
    for i, body in db.execute("SELECT id, body FROM docs ORDER BY id").fetchall():
        if not body:
            want.append((i, None, None, None, None,
                         None if body is None else f"relattn_scan: body of id {i} is empty"))
            embed.append((i, None, want[-1][-1]))
            continue
        (label,) = db.execute("SELECT relattn_classify('enc', ?)", (body,)).fetchone()
        (best,) = [r for r in db.execute("SELECT label, prob, logit FROM relattn_labels('enc', ?)",
                                         (body,)) if r[0] == label]
        (n,) = db.execute("SELECT length(relattn_tokenize('enc', ?)) / 4", (body,)).fetchone()
        want.append((i, n) + best + (None,))
        embed.append((i,) + db.execute("SELECT relattn_embed('enc', ?), NULL",
                                       (body,)).fetchone())
    db.close()
    out = tmp_path / "scores.db"
    args = (path, "--results", out, "--model", "enc", "--scheduler", address, "--threads", 1,
            "--range-rows", 20)
    job = subprocess.Popen(command(*args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lock, done = lock_mid_run(out, job)   # the lock taken, so that no more commit
        job.kill()
        job.wait()
        lock.execute("ROLLBACK")
        lock.close()
    finally:
        if job.poll() is None:
            job.kill()
    cols = "n_tokens,label,prob,logit"
    partial = results(out, columns=cols)
    assert 0 < done < 15 and len(partial) == sum(d[4] or 0 for d in ranges(out))
    assert all(p in want for p in partial)
    r = run(*args)
    assert r.stdout.splitlines()[0] == \
        f"{15 - done} ranges to score ({300 - 20 * done} rows), {done} done before"
    assert results(out, columns=cols) == want
    r = run(*args, "--columns", "embedding", "--table", "emb")
    assert results(out, table="emb", columns="embedding") == embed


def test_bad_columns_write_nothing(corpus, tmp_path):
    out = tmp_path / "scores.db"
    choose = "n_tokens, score, perplexity, embedding, label, prob, logit, generated, error"
    for columns, error in [
            ("labl,prob", f"--columns: relattn_scan has no column 'labl' (choose from {choose})"),
            ("score, Score", "--columns names 'score' twice"),
            (" , ", f"--columns is empty: name one or more of {choose}")]:
        r = run(corpus, "--results", out, "--columns", columns, rc=2)
        assert r.stderr.splitlines()[-1] == f"relattn_dask.py: error: {error}"
    r = run(corpus, "--results", out, "--columns", "label", rc=2)
    assert r.stderr == ("relattn_dask: --columns: relattn_scan: model 'tiny' has no classifier "
                        "head (its head is 'lm'): no label, logit or prob\n")
    assert not out.exists()


def test_generated_column_equals_relattn_generate(tmp_path):
    """--columns generated with --generate: each row's text is
    relattn_generate's on its body with the same options."""
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "corpus.db"
    make_corpus(path, rng, 12)
    out = tmp_path / "scores.db"
    options = '{"max_new_tokens": 8, "num_beams": 2}'
    run(path, "--results", out, "--workers", 1, "--range-rows", 5,
        "--columns", "n_tokens,generated", "--generate", options)
    db = connect(path)
    want = db.execute("SELECT id, relattn_generate('tiny', body, ?) FROM docs "
                      "WHERE length(body) > 0 ORDER BY id", (options,)).fetchall()
    db.close()
    got = sqlite3.connect(out).execute(
        "SELECT id, generated FROM docs_scores WHERE error IS NULL AND generated "
        "IS NOT NULL ORDER BY id").fetchall()
    assert got == want and len(got) == 10
    # the options are part of the job: the same ones in another order go on,
    # other ones would mix two texts in one table and are refused
    before = list(sqlite3.connect(out).iterdump())
    r = run(path, "--results", out, "--workers", 1, "--range-rows", 5,
            "--columns", "n_tokens,generated", "--generate", '{"num_beams":2,"max_new_tokens":8}')
    assert r.stdout == "nothing to do: all 3 ranges of 'docs_scores' are done\n"
    r = run(path, "--results", out, "--workers", 1, "--columns", "n_tokens,generated",
            "--generate", '{"max_new_tokens": 9, "num_beams": 2}', rc=2)
    assert r.stderr == ("relattn_dask: results table 'docs_scores' belongs to another job "
                        """(generate '{"max_new_tokens": 8, "num_beams": 2}', not """
                        """'{"max_new_tokens": 9, "num_beams": 2}'): """
                        "name another --table or --results\n")
    assert list(sqlite3.connect(out).iterdump()) == before
    # a results database from before the options were recorded goes on
    db = sqlite3.connect(out)
    db.execute("ALTER TABLE relattn_cluster_job DROP COLUMN generate")
    db.execute("UPDATE relattn_cluster_job SET columns = 'n_tokens,generated'")
    db.commit()
    db.close()
    r = run(path, "--results", out, "--workers", 1, "--columns", "n_tokens", rc=2)
    assert r.stderr == ("relattn_dask: results table 'docs_scores' belongs to another job "
                        "(columns 'n_tokens,generated', not 'n_tokens'): "
                        "name another --table or --results\n")
    r = run(path, "--results", out, "--workers", 1, "--columns", "n_tokens", "--table", "n")
    assert [c[1] for c in sqlite3.connect(out).execute(
        "PRAGMA table_info(relattn_cluster_job)")][-1] == "generate"
