"""relattn through Node's better-sqlite3 (tests/node/test_scan.mjs).

Needs Node 20 or newer (better-sqlite3 12's engines field; Debian 12's own
nodejs is 18) and npm: node_modules is installed from the lockfile with
`npm ci` when missing. Without them the test is skipped, saying why."""
import json
import os
import subprocess

import numpy as np
import pytest

import modelgen
import nodedeps  # noqa: E402
from conftest import SO, connect

NODE_DIR = nodedeps.NODE_DIR


def node_ready():
    if os.environ.get("RELATTN_SANITIZED"):
        return "node is not built with AddressSanitizer: the Node client runs in the normal pass"
    return nodedeps.node_ready(NODE_DIR / "node_modules" / "better-sqlite3" / "build" / "Release",
                               "better-sqlite3 12")


def test_better_sqlite3_scan(tmp_path, rng):
    reason = node_ready()
    if reason:
        pytest.skip(reason)
    path = str(tmp_path / "corpus.db")
    db = connect(path)
    modelgen.load(db, "tiny", modelgen.config(d_model=32, n_heads=4, d_ff=64), rng)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.executemany("INSERT INTO docs VALUES (?, ?)",
                   [(i, np.asarray(rng.integers(0, 256, int(rng.integers(2, 80))), dtype="<i4").tobytes())
                    for i in range(1, 21)])
    db.execute("CREATE TABLE expected AS SELECT id, relattn_score('tiny', body) AS score, "
               "relattn_perplexity('tiny', body) AS perplexity, "
               "relattn_embed('tiny', body) AS embedding FROM docs")
    db.commit()
    db.close()
    r = subprocess.run(["node", str(NODE_DIR / "test_scan.mjs"), SO, path],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["failures"] == [] and out["rows"] == 20
    assert out["version"] == db_version()


def db_version():
    c = connect()
    v = c.execute("SELECT relattn_version()").fetchone()[0]
    c.close()
    return v
