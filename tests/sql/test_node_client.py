"""relattn through Node's better-sqlite3 (tests/node/test_scan.mjs).

Needs Node 20 or newer (better-sqlite3 12's engines field; Debian 12's own
nodejs is 18) and npm: node_modules is installed from the lockfile with
`npm ci` when missing. Without them the test is skipped, saying why."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import modelgen
from conftest import ROOT, SO, connect

NODE_DIR = ROOT / "tests" / "node"


def node_ready():
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node:
        return "node is not installed (better-sqlite3 12 needs Node >= 20; Debian 12's nodejs is 18)"
    v = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    try:
        major = int(v.lstrip("v").split(".")[0])
    except ValueError:
        return f"cannot read the node version ({v!r})"
    if major < 20:
        return f"node {v} is too old: better-sqlite3 12 needs Node >= 20 (Debian 12's nodejs is 18)"
    if os.environ.get("RELATTN_SANITIZED"):
        return "node is not built with AddressSanitizer: the Node client runs in the normal pass"
    if not (NODE_DIR / "node_modules" / "better-sqlite3" / "build" / "Release").exists():
        if not npm:
            return "npm is not installed (needed for `npm ci` in tests/node)"
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR,
                           capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            return "`npm ci` in tests/node failed (no registry access, or no C++ compiler " \
                   "for better-sqlite3's build): " + r.stderr.strip()[-500:]
    return None


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
