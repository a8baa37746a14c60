"""cluster/relattn_dask.py against a plain relattn_scan of the same rows, and
1 vs 2 Dask worker processes.

    /usr/bin/python3 tests/bench/bench_cluster.py [relattn.so]      (make bench)

The bundled model (models/tiny.safetensors) and a corpus of random texts of
20-300 bytes (uniform) in a SQLite file. Each round runs every variant over the
same rows, in a rotated order (interleaved); the table shows medians:
  scan       SELECT id, score, perplexity FROM temp.job, in this process
             (relattn_scan over the corpus file, relattn_threads 1 or 2)
  dask       the program's whole command, `relattn_dask.py corpus.db
             --results r.db --scheduler ...` (a new process: it starts, exports
             and checks the model, plans, sends the model to the workers, runs
             the ranges and commits them), against LocalClusters started
             beforehand: 1 worker process running 1 or 2 relattn threads, and 2
             worker processes of 1 thread each (what --workers 2 runs); and
             the same command on a corpus of one row, its fixed cost
CPU seconds are this process's (scan) or the program's plus its workers' (read
from /proc), so "cores" says how much of the machine a variant had: on a machine
busy with other work, compare CPU time, not wall time.

BENCH_CLUSTER_ROWS (default 2000), BENCH_CLUSTER_ROUNDS (3) and
BENCH_CLUSTER_RANGE (range rows, default 250) change the size. About 4 minutes
on two idle cores. Measured here with the machine busy (load average 10, runs
getting 0.6-1.0 of the 2 cores): 2 workers 1.42x less wall time than 1 worker
(1.19x less than 1 worker of 2 threads), the same tokens per CPU second
(14,980 vs 14,752); CPU +11% over a 2-thread relattn_scan, of which 0.91 s is
the command's fixed cost and +6% the per-row cost (docs/cluster.md).
"""
import os
import pathlib
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from distributed import Client, LocalCluster

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "relattn.so"))
ROWS = int(os.environ.get("BENCH_CLUSTER_ROWS", "2000"))
ROUNDS = int(os.environ.get("BENCH_CLUSTER_ROUNDS", "3"))
RANGE = int(os.environ.get("BENCH_CLUSTER_RANGE", "250"))
TICK = os.sysconf("SC_CLK_TCK")


def connect(path):
    db = sqlite3.connect(path)
    db.enable_load_extension(True)
    db.load_extension(SO)
    return db


def worker_cpu(client):
    """CPU seconds used so far by the cluster's worker processes."""
    def cpu():
        with open(f"/proc/{os.getpid()}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK   # utime, stime
    return sum(client.run(cpu).values())


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def self_cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_cluster."))
    corpus = tmp / "corpus.db"
    rng = np.random.default_rng(12345)
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz      ,.'ETAOINSHRDLU"))
    lengths = rng.integers(20, 301, ROWS)
    db = connect(str(corpus))
    db.execute("SELECT relattn_import('tiny', ?)", ((ROOT / "models" / "tiny.safetensors")
                                                   .read_bytes(),))
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO docs(body) VALUES (?)",
                   [("".join(rng.choice(alphabet, n)),) for n in lengths])
    db.commit()
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='tiny', "
               "source='docs', tokens='body')")
    tokens = int(lengths.sum())
    one_row = tmp / "one_row.db"   # the command's fixed cost: one range of one row
    db.execute("VACUUM INTO ?", (str(one_row),))
    small = sqlite3.connect(one_row)
    small.execute("DELETE FROM docs WHERE id > 1")
    small.commit()
    small.close()

    t = time.perf_counter()
    one = LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                       dashboard_address=":0")
    start_one = time.perf_counter() - t
    t = time.perf_counter()
    two = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                       dashboard_address=":0")
    start_two = time.perf_counter() - t
    clients = {one: Client(one), two: Client(two)}

    def scan(threads):
        def go():
            db.execute(f"SELECT relattn_threads({threads})")
            return db.execute("SELECT id, score, perplexity FROM temp.job").fetchall()
        return go

    def dask(cluster, threads, corpus=corpus):
        def go():
            out = tmp / "scores.db"
            for p in tmp.glob("scores.db*"):
                p.unlink()
            subprocess.run([sys.executable, str(ROOT / "cluster" / "relattn_dask.py"), corpus,
                            "--results", out, "--scheduler", cluster.scheduler_address,
                            "--threads", str(threads), "--range-rows", str(RANGE),
                            "--columns", "score,perplexity", "--extension", SO],
                           check=True, stdout=subprocess.DEVNULL)
            r = sqlite3.connect(out)
            rows = r.execute("SELECT id, score, perplexity FROM docs_scores ORDER BY id").fetchall()
            r.close()
            return rows
        return go

    variants = {
        "relattn_scan, 1 thread": (scan(1), None),
        "relattn_scan, 2 threads": (scan(2), None),
        "dask, 1 worker x 1 thread": (dask(one, 1), one),
        "dask, 1 worker x 2 threads": (dask(one, 2), one),
        "dask, 2 workers x 1 thread": (dask(two, 1), two),
        "dask, 2 workers, 1 row": (dask(two, 1, one_row), two),
    }
    names = list(variants)
    times = {k: [] for k in names}
    cpu = {k: [] for k in names}
    check = {}
    variants[names[0]][0]()   # warm-up: weights cached, scratch faulted in
    for r in range(ROUNDS):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            go, cluster = variants[k]
            c0 = self_cpu() + children_cpu() + (worker_cpu(clients[cluster]) if cluster else 0)
            t = time.perf_counter()
            check[k] = go()
            times[k].append(time.perf_counter() - t)
            c1 = self_cpu() + children_cpu() + (worker_cpu(clients[cluster]) if cluster else 0)
            cpu[k].append(c1 - c0)
    ref = np.array([row[1] for row in check[names[0]]])
    assert check["dask, 2 workers, 1 row"] == check[names[0]][:1]
    for k in names[:-1]:   # every variant scored every row, to float32 precision
        got = np.array([row[1] for row in check[k]])
        assert len(got) == ROWS and np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max(), k

    med = {k: statistics.median(v) for k, v in times.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"cluster/relattn_dask.py vs relattn_scan: {ROWS} texts of 20-300 bytes "
          f"({tokens} tokens), the bundled model, ranges of {RANGE} rows; {ROUNDS} "
          "interleaved rounds, medians")
    print(f"{'variant':28s} {'tokens/s':>9s} {'time s':>8s} {'cpu s':>8s} {'cores':>6s} "
          f"{'tok/cpu-s':>10s}")
    for k in names:
        n = 1 if k.endswith("1 row") else tokens
        print(f"{k:28s} {n / med[k]:9.0f} {med[k]:8.2f} {mcpu[k]:8.2f} "
              f"{mcpu[k] / med[k]:6.2f} {n / mcpu[k]:10.0f}")
    s1, s2 = med["relattn_scan, 1 thread"], med["relattn_scan, 2 threads"]
    d11, d12 = med["dask, 1 worker x 1 thread"], med["dask, 1 worker x 2 threads"]
    d21 = med["dask, 2 workers x 1 thread"]
    print(f"dask 2 workers vs 1 worker (1 thread each):   {d11 / d21:5.2f}x  (2 cores: 2.00 ideal)")
    print(f"dask 2 workers x 1 vs 1 worker x 2 threads:   {d12 / d21:5.2f}x")
    print(f"dask overhead, 1 worker x 1 thread vs scan 1: {d11 / s1 - 1:+6.1%} wall, "
          f"{mcpu['dask, 1 worker x 1 thread'] / mcpu['relattn_scan, 1 thread'] - 1:+6.1%} CPU")
    print(f"dask overhead, 2 workers vs scan 2 threads:   {d21 / s2 - 1:+6.1%} wall, "
          f"{mcpu['dask, 2 workers x 1 thread'] / mcpu['relattn_scan, 2 threads'] - 1:+6.1%} CPU")
    fixed, fixed_cpu = med["dask, 2 workers, 1 row"], mcpu["dask, 2 workers, 1 row"]
    print(f"the command's fixed cost (1 row):             {fixed:5.2f} s wall, {fixed_cpu:5.2f} s CPU")
    print(f"dask per-row overhead, 2 workers vs scan 2:   "
          f"{(mcpu['dask, 2 workers x 1 thread'] - fixed_cpu) / mcpu['relattn_scan, 2 threads'] - 1:+6.1%}"
          " CPU, the fixed cost taken out")
    print(f"LocalCluster start: {start_one:.1f} s (1 worker), {start_two:.1f} s (2 workers); "
          "not in the times above")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for c in clients.values():
        c.close()
    one.close()
    two.close()
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()


if __name__ == "__main__":
    main()
