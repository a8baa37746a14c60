"""Shared fixtures: a connection with the built extension loaded.

RELATTN_SO names the shared library under test (make test sets it; default
./relattn.so at the repository root)."""
import os
import pathlib
import sqlite3
import threading
import time

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))

if os.environ.get("RELATTN_SANITIZED"):
    # SQLite unloads the library when a connection closes; keeping it mapped
    # lets LeakSanitizer's report at exit name our functions.
    import ctypes
    ctypes.CDLL(SO)


def connect(path=":memory:", **kw):
    db = sqlite3.connect(path, **kw)
    db.enable_load_extension(True)
    db.load_extension(SO)
    db.enable_load_extension(False)
    return db


@pytest.fixture
def db():
    conn = connect()
    yield conn
    conn.close()


@pytest.fixture
def rng(request):
    # Fresh inputs every run; the seed is printed on failure, and
    # RELATTN_TEST_SEED=that seed runs the same inputs again.
    given = os.environ.get("RELATTN_TEST_SEED")
    seed = int(given) if given else int.from_bytes(os.urandom(4), "little")
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return np.random.default_rng(seed)


def f32(a):
    """float32 little-endian BLOB of an array."""
    return np.ascontiguousarray(a, dtype="<f4").tobytes()


def from_f32(b, shape=None):
    a = np.frombuffer(b, dtype="<f4")
    return a.reshape(shape) if shape is not None else a


def attention_maps(db, blob, shape, model="m"):
    """relattn_attention_weights(model, blob) as an array of shape (layers, heads, n, n),
    zero where it gives no row, and its rows (layer, head, qpos, kpos, weight)."""
    rows = db.execute("SELECT layer, head, qpos, kpos, weight FROM "
                      "relattn_attention_weights(?, ?)", (model, blob)).fetchall()
    got = np.zeros(shape)
    for layer, head, q, k, w in rows:
        got[layer, head, q, k] = w
    return got, rows


def rel_err(out, ref):
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300)


def interrupted(db, sql, args=(), after=0.3):
    """Runs sql, calling db.interrupt() from another thread `after` seconds on
    and again every 0.1 s until the statement ends: an interrupt that comes
    before the statement has started (a busy machine, a large argument to
    bind) is lost, SQLite clears it then. Returns (seconds from the first
    interrupt to the end, message, error name); the statement must fail."""
    fired, done = [], threading.Event()

    def fire():
        wait = after
        while not done.wait(wait):
            fired.append(time.perf_counter())
            db.interrupt()
            wait = 0.1

    thread = threading.Thread(target=fire)
    thread.start()
    try:
        with pytest.raises(Exception) as e:
            db.execute(sql, args).fetchall()
        end = time.perf_counter()
    finally:
        done.set()
        thread.join()   # no interrupt is left to reach the next statement
    assert fired, "the statement ended before the interrupt"
    return end - fired[0], str(e.value), getattr(e.value, "sqlite_errorname", None)
