"""relattn_import / relattn_export, the model tables, the weight cache.

Files are built by tests/safetensors_py.py (json + struct + numpy), which
shares no code with the extension."""
import hashlib
import json
import pathlib
import struct

import numpy as np
import pytest

import modelgen
import safetensors_py as sp
from conftest import ROOT, connect


def counts(db):
    try:
        return db.execute("SELECT (SELECT count(*) FROM relattn_model), "
                          "(SELECT count(*) FROM relattn_tensor), "
                          "(SELECT group_concat(name || ':' || version || ':' || "
                          "coalesce(sha256, ''), ',') FROM relattn_model)").fetchone()
    except Exception:
        return None  # no tables yet


def snapshot(db):
    """Everything about the stored models, to assert 'unchanged'."""
    c = counts(db)
    if c is None:
        return None
    return c, db.execute("SELECT model, name, dtype, shape, hex(data) FROM "
                         "relattn_tensor ORDER BY rowid").fetchall()


def test_round_trip_bit_for_bit(db, rng):
    cfg = modelgen.config(n_layers=2, tie_embeddings=False, norm="pre")
    w = modelgen.tensors(cfg, rng)
    blob = modelgen.safetensors(cfg, weights=w)
    n = db.execute("SELECT relattn_import('m', ?)", (blob,)).fetchone()[0]
    assert n == len(w) == len(modelgen.shapes(cfg))
    out = db.execute("SELECT relattn_export('m')").fetchone()[0]
    got, meta = sp.read(out)
    assert list(got) == [name for name, _ in modelgen.shapes(cfg)]
    for name, a in w.items():
        assert got[name] == ("F32", list(a.shape), a.tobytes())
    assert json.loads(meta["relattn.config"]) == cfg
    # import(export(m)) gives back the same tensors, and the same sha256
    db.execute("SELECT relattn_import('m2', ?)", (out,))
    rows = db.execute("SELECT a.name, a.data = b.data, a.dtype = b.dtype, "
                      "a.shape = b.shape FROM relattn_tensor a JOIN "
                      "relattn_tensor b ON a.name = b.name "
                      "WHERE a.model = 'm' AND b.model = 'm2'").fetchall()
    assert len(rows) == len(w) and all(r[1] and r[2] and r[3] for r in rows)
    sha = db.execute("SELECT DISTINCT sha256 FROM relattn_model").fetchall()
    assert len(sha) == 1
    # the sha256 is of the tensor data in the stored order
    data = b"".join(w[name].tobytes() for name, _ in modelgen.shapes(cfg))
    assert sha[0][0] == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
def test_round_trip_half(db, rng, dtype):
    cfg = modelgen.config(n_layers=1)
    blob = modelgen.safetensors(cfg, rng, dtype=dtype)
    db.execute("SELECT relattn_import('h', ?)", (blob,))
    assert db.execute("SELECT DISTINCT dtype FROM relattn_tensor").fetchall() == [(dtype,)]
    out = db.execute("SELECT relattn_export('h')").fetchone()[0]
    a, _ = sp.read(blob)
    b, _ = sp.read(out)
    assert a == b
