"""Regression tests: each input here once crashed, hung, or took the host's
memory (found by the fuzzers in tests/fuzz or by auditing sizes computed from
input). Each must now end in a result or a clear error, quickly and within
the per-call memory bound."""
import json
import sqlite3

import pytest

import modelgen


def rss_mb():
    """Peak resident memory since the last call (VmHWM, reset each time)."""
    with open("/proc/self/status") as f:
        peak = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return peak / 1024


@pytest.fixture
def small(db, rng):
    cfg = modelgen.config(d_model=4, n_heads=1, d_ff=4, n_layers=1, clip=1)
    blob = modelgen.safetensors(cfg, rng)
    return cfg, blob


HUGE_LAYERS = modelgen.config(d_model=1, n_heads=1, d_ff=1, n_layers=65536, clip=0)  # the cap


def test_import_config_with_huge_layer_count(db, small):
    # Once (n_layers up to 2^24 then): a 1.2 GB index array and 3e8 tensor
    # names formatted, minutes of CPU, before noticing the file has 18.
    _, blob = small
    before = rss_mb()
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_import('x', ?, ?)", (blob, json.dumps(HUGE_LAYERS)))
    assert str(e.value) == ("relattn_import: tensor 'layers.1.ln1.weight' is "
                            "missing (the config needs it)")
    assert rss_mb() - before < 100


def test_stored_config_with_huge_layer_count(db, small):
    # Once: the model cache allocated and cleared the layer table (2.6 GB at
    # n_layers = 2^24) before reading the rows.
    _, blob = small
    db.execute("SELECT relattn_import('m', ?)", (blob,))
    db.execute("UPDATE relattn_model SET config = ? WHERE name = 'm'",
               (json.dumps(HUGE_LAYERS),))
    before = rss_mb()
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_tokenize('m', 'ab')")
    assert str(e.value) == ("relattn_tokenize: model 'm': tensor "
                            "'layers.1.ln1.weight' is missing (the config "
                            "needs it)")
    assert rss_mb() - before < 100


def test_model_over_the_memory_bound(db, rng):
    # A model's float32 weights count towards relattn_max_memory() when a
    # call first loads it; F16 storage doubles in memory.
    cfg = modelgen.config(d_model=256, n_heads=2, d_ff=256, n_layers=1, clip=1)
    db.execute("SELECT relattn_import('m', ?)", (modelgen.safetensors(cfg, rng, dtype="F16"),))
    db.execute("SELECT relattn_max_memory(1 << 20)")
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_tokenize('m', 'ab')")
    msg = str(e.value)
    assert msg.startswith("relattn_tokenize: model 'm': needs ")
    assert msg.endswith(" bytes, over the limit of 1048576 per call (relattn_max_memory)")
    need = int(msg.split("needs ")[1].split(" ")[0])
    numel = sum(int(a.size) for a in modelgen.tensors(cfg, rng).values())
    assert 4 * numel <= need < 4 * numel + 64 * 1024
    db.execute("SELECT relattn_max_memory(1 << 30)")
    assert db.execute("SELECT relattn_tokenize('m', 'ab')").fetchone()[0] == b"a\0\0\0b\0\0\0"


def test_tokens_agg_stops_at_the_blob_limit(db):
    # Once: grew without bound over an endless row source, checking the
    # limit only at the end.
    db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 4000)
    with pytest.raises(sqlite3.DataError) as e:
        db.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                   "SELECT relattn_tokens_agg(x) FROM c").fetchone()
    assert str(e.value) == "relattn_tokens_agg: the result is larger than SQLite's BLOB limit"
    assert len(db.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                          "WHERE x < 1000) SELECT relattn_tokens_agg(x) FROM c").fetchone()[0]) == 4000


def test_long_text_is_refused_before_decoding(db, small):
    # Once: a TEXT argument was decoded into 4 bytes a token before the
    # relattn_max_tokens check (160 MB here for a 40 MB text).
    _, blob = small
    db.execute("SELECT relattn_import('m', ?)", (blob,))
    text = "a" * (40 << 20)
    base = rss_mb()
    with pytest.raises(sqlite3.DataError) as e:
        db.execute("SELECT relattn_score('m', ?)", (text,))
    assert str(e.value) == ("relattn_score: tokens has 41943040 tokens, over "
                            "relattn_max_tokens() = 65536")
    assert rss_mb() - base < 120  # SQLite's copy of the text: 40 MB


def test_scan_memory_bound_covers_every_worker(db, small):
    # Once: each row was checked alone, while every worker thread may hold a
    # row that long at once (n_threads times the bound).
    import numpy as np
    _, blob = small
    db.execute("SELECT relattn_import('m', ?)", (blob,))
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.execute("INSERT INTO docs VALUES (1, ?)",
               (np.full(20000, 5, dtype="<i4").tobytes(),))
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', source='docs', tokens='body')")
    db.execute("SELECT relattn_max_memory(1 << 20)")

    def need(threads):
        db.execute(f"SELECT relattn_threads({threads})")
        with pytest.raises(sqlite3.DataError) as e:
            db.execute("SELECT score FROM temp.job").fetchall()
        assert str(e.value).endswith(" bytes, over the limit of 1048576 per call (relattn_max_memory)")
        return int(str(e.value).split("needs ")[1].split()[0])

    one, two = need(1), need(2)
    assert two == 2 * one
    db.execute(f"SELECT relattn_max_memory({one + one // 2})")
    db.execute("SELECT relattn_threads(1)")
    assert len(db.execute("SELECT score FROM temp.job").fetchall()) == 1
    db.execute("SELECT relattn_threads(2)")
    with pytest.raises(sqlite3.DataError):
        db.execute("SELECT score FROM temp.job").fetchall()
