"""Another connection changes the schema; then this one uses relattn.

Every use runs in a process of its own (schema_change_probe.py), so that a
crash fails one test. With RELATTN_SQLITE_DEBUG (a libsqlite3.so.0 built with
SQLITE_DEBUG by tests/sqlite_debug.sh; make test sets it) each case runs again
on that SQLite, whose assertions check every call the extension makes and
fail on the first misuse, deterministically; the release library only crashes
now and then, when the freed memory is reused.
A temp scan created after such a change used to corrupt the heap: the scan's
CREATE read main, SQLite reset the schemas and freed the Table it was still
building (SQLITE_DEBUG: "sqlite3_declare_vtab: Assertion `IsVirtual(pTab)'").
"""
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import modelgen
from conftest import SO, connect

sys.path.insert(0, os.path.dirname(__file__))
import reference_model as ref  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
PROBE = HERE / "schema_change_probe.py"
DEBUG_LIB = os.environ.get("RELATTN_SQLITE_DEBUG")
CASES = ["temp_scan", "main_scan", "temp_scan_error", "stored_temp_scan",
         "stored_main_scan", "temp_scan_of_temp", "logprobs",
         "attention_weights", "labels", "tokens_each", "score",
         "score_in_temp_insert", "generate_tokens", "zero_shot", "token_labels",
         "temp_scan_in_immediate", "temp_scan_in_exclusive", "temp_scan_of_new_table",
         "main_scan_in_immediate",
         "strict_temp_from_scan", "strict_temp_from_temp_scan", "strict_temp_from_score",
         "strict_temp_from_json"]


def make_db(path, rng, wal=False):
    db = connect(path)
    if wal:
        db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    for i in range(1, 6):
        ids = rng.integers(0, 256, int(rng.integers(3, 20)), dtype="<i4")
        db.execute("INSERT INTO docs VALUES (?, ?)", (i, ids.tobytes()))
    cfg = modelgen.config(d_model=32, n_heads=4, d_ff=64)
    db.execute("SELECT relattn_import('m', ?)", (modelgen.safetensors(cfg, rng),))
    clf = ref.with_head(ref.random_config(rng, arch="encoder"), "classifier",
                        labels=["no", "yes"])
    db.execute("SELECT relattn_import('clf', ?)",
               (ref.safetensors_bytes(ref.random_params(rng, clf), clf),))
    # an NLI classifier for relattn_zero_shot (a pair needs tokenizer.sep),
    # a token classifier for relattn_token_labels
    nli = ref.with_head(ref.random_config(rng, arch="encoder", sep=259), "classifier",
                        labels=["entailment", "neutral", "contradiction"])
    db.execute("SELECT relattn_import('nli', ?)",
               (ref.safetensors_bytes(ref.random_params(rng, nli), nli),))
    ner = ref.with_head(ref.random_config(rng, arch="encoder"), "token_classifier",
                        labels=["O", "B-X", "I-X"])
    db.execute("SELECT relattn_import('ner', ?)",
               (ref.safetensors_bytes(ref.random_params(rng, ner), ner),))
    db.commit()
    db.close()


def probe_env():
    """The sanitizers' settings as the suite's, without the leak check: the
    probes look for uses of freed memory (the suite's own run checks leaks),
    and LeakSanitizer's exit-time tracer can die on its own on a loaded
    machine, which would read as a crash here."""
    env = dict(os.environ)
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":detect_leaks=0"
    return env


def probe(path, case, rounds, lib_dir=None):
    env = probe_env()
    if lib_dir:
        env["LD_LIBRARY_PATH"] = lib_dir
    return subprocess.run([sys.executable, str(PROBE), SO, path, case, str(rounds)],
                          capture_output=True, text=True, env=env, timeout=600)


def expect(case, rounds):
    """What each round prints: the rows of the last statement, or the error."""
    n = {"temp_scan": 5, "main_scan": 5, "stored_temp_scan": 5,
         "stored_main_scan": 5, "temp_scan_of_temp": 5, "labels": 2,
         "tokens_each": 3, "score": 1, "score_in_temp_insert": 0,
         # max_new_tokens 4, no eos: 4 steps; 3 candidate labels; 'some text'
         # in bytes, 'none' with nothing ignored: a row per byte
         "generate_tokens": 4, "zero_shot": 3, "token_labels": 9,
         "temp_scan_in_immediate": 5, "temp_scan_in_exclusive": 5,
         "temp_scan_of_new_table": 5, "main_scan_in_immediate": 5, "strict_temp_from_scan": 5,
         "strict_temp_from_temp_scan": 5, "strict_temp_from_score": 1,
         "strict_temp_from_json": 1,
         "temp_scan_error": "relattn_scan: no model named 'nope'"}
    return [f"{case} {r} {n[case]}" for r in range(rounds)] + ["ok"]


@pytest.mark.parametrize("sqlite", ["release", "debug"])
@pytest.mark.parametrize("case", CASES)
def test_use_after_another_connection_changed_the_schema(tmp_path, rng, case, sqlite):
    lib_dir = None
    if sqlite == "debug":
        if not DEBUG_LIB or not os.path.exists(DEBUG_LIB):
            pytest.skip("no SQLite built with SQLITE_DEBUG: RELATTN_SQLITE_DEBUG names the "
                        "libsqlite3.so.0 tests/sqlite_debug.sh builds (make test does)")
        lib_dir = os.path.dirname(DEBUG_LIB)
    path = str(tmp_path / "c.db")
    make_db(path, rng)
    r = probe(path, case, 3, lib_dir)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    if case in ("logprobs", "attention_weights"):
        # one row per token / per (layer, head, q, k): counted, and the same each round
        assert lines[-1] == "ok" and len(lines) == 4
        assert len({ln.split()[2] for ln in lines[:3]}) == 1 and int(lines[0].split()[2]) > 0
    else:
        assert lines == expect(case, 3), r.stdout
    # the failed CREATE left nothing behind; the others left their tables
    db = connect(path)
    names = {n for (n,) in db.execute("SELECT name FROM sqlite_master")}
    db.close()
    assert sum(n.startswith(f"changed_{case}_") for n in names) == 3
    if case == "main_scan":
        assert {"job0", "job1", "job2"} <= names


ROUNDS = 60  # per scanning process
SCANNERS = ("temp_scan", "main_scan", "stored_temp_scan", "logprobs", "score",
            "strict_temp_from_scan")


def test_a_schema_changing_writer_against_scanners(tmp_path, rng):
    """A writer changes the schema without pause (tables made and dropped,
    models re-imported) while six processes create temp and main scans and
    read them (one into a STRICT temp table), and call a table-valued and a
    scalar function: every round ends, none crashes."""
    path = str(tmp_path / "c.db")
    make_db(path, rng, wal=True)
    stop = threading.Event()
    writes = [0]
    blob = modelgen.safetensors(modelgen.config(d_model=32, n_heads=4, d_ff=64), rng)

    def writer():
        w = connect(path, timeout=30, check_same_thread=False, isolation_level=None)
        k = 0
        while not stop.is_set():
            w.execute("BEGIN IMMEDIATE")
            w.execute(f"CREATE TABLE w{k}(x)")
            if k % 3 == 0:
                w.execute("SELECT relattn_import('m', ?)", (blob,))
            w.execute("COMMIT")
            w.execute(f"DROP TABLE w{k}")
            time.sleep(0.002)  # room for the others' writes
            k += 1
            writes[0] = k
        w.close()

    t = threading.Thread(target=writer)
    t.start()
    procs = []
    try:
        for case in SCANNERS:
            procs.append((case, subprocess.Popen(
                [sys.executable, str(PROBE), SO, path, case, str(ROUNDS)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=probe_env())))
        results = [(case, p.communicate(timeout=900), p.returncode) for case, p in procs]
    finally:
        stop.set()
        t.join()
    rounds = 0
    for case, (out, err), rc in results:
        assert rc == 0, f"{case}: exit {rc}\n{err[-3000:]}"
        lines = out.splitlines()
        assert lines[-1] == "ok", (case, out[-500:], err[-2000:])
        rounds += len(lines) - 1
    print(f"{rounds} rounds against {writes[0]} schema changes, 0 crashes")
    assert rounds == len(SCANNERS) * ROUNDS and writes[0] > 0
