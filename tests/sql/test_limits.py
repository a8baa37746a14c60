"""The per-call limits (README, "Limits"): settings, their errors, and the
errors a request over them gets."""
import sqlite3

import numpy as np
import pytest


def test_max_memory_default_and_set(db):
    assert db.execute("SELECT relattn_max_memory()").fetchone()[0] == 2 << 30
    assert db.execute("SELECT relattn_max_memory(1 << 24)").fetchone()[0] == 1 << 24
    assert db.execute("SELECT relattn_max_memory()").fetchone()[0] == 1 << 24
    assert "max_memory: 16777216" in db.execute("SELECT relattn_debug()").fetchone()[0]


@pytest.mark.parametrize("arg, msg", [
    ("5", "relattn_max_memory: bytes must be at least 1048576, not 5"),
    ("-1", "relattn_max_memory: bytes must be at least 1048576, not -1"),
    ("'1e9'", "relattn_max_memory: bytes must be an integer"),
    ("NULL", "relattn_max_memory: bytes must be an integer"),
])
def test_max_memory_bad(db, arg, msg):
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute(f"SELECT relattn_max_memory({arg})")
    assert str(e.value) == msg
    assert db.execute("SELECT relattn_max_memory()").fetchone()[0] == 2 << 30


def test_settings_are_per_connection(db):
    from conftest import connect
    db.execute("SELECT relattn_max_memory(1 << 25)")
    other = connect()
    try:
        assert other.execute("SELECT relattn_max_memory()").fetchone()[0] == 2 << 30
    finally:
        other.close()


def test_settings_are_directonly(db):
    db.execute("CREATE TABLE t(x)")
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("CREATE VIEW v AS SELECT relattn_max_memory(1 << 25)")
        db.execute("SELECT * FROM v")
    assert "unsafe use of relattn_max_memory()" in str(e.value)


def test_huge_head_count(db):
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_attention(zeroblob(64), zeroblob(64), zeroblob(64), "
                   "NULL, NULL, '{\"heads\": 2147483647, \"d_head\": 2147483647}')")
    assert str(e.value) == ("relattn_attention: q has 16 floats, not a multiple of "
                            "heads*d_head = 4611686014132420609")
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_attention(zeroblob(64), zeroblob(64), zeroblob(64), "
                   "NULL, NULL, '{\"heads\": 2147483648, \"d_head\": 1}')")
    assert str(e.value) == ("relattn_attention: options.heads must be a positive "
                            "integer, not 2147483648")


def test_attention_over_the_memory_bound(db):
    # 6000 rows of one 64-wide head: a 1.5 MB result, over a 1 MiB bound.
    db.execute("SELECT relattn_max_memory(1 << 20)")
    z = "zeroblob(4 * 64 * 6000)"
    with pytest.raises(sqlite3.DataError) as e:
        db.execute(f"SELECT relattn_attention({z}, {z}, {z}, NULL, NULL, "
                   "'{\"heads\": 1, \"d_head\": 64}')")
    msg = str(e.value)
    assert msg.startswith("relattn_attention: needs ")
    assert msg.endswith(" bytes, over the limit of 1048576 per call (relattn_max_memory)")
    assert int(msg.split()[2]) >= 4 * 64 * 6000


def test_huge_table_is_cut_to_the_sequence(db, rng):
    # A relative table far longer than the sequence: only rows within
    # distance n - 1 matter, and no scratch is sized by the table.
    from conftest import f32, from_f32
    q, k, v = (rng.standard_normal((4, 4)) for _ in range(3))
    rk = rng.standard_normal((2 * 100000 + 1, 4))
    rk_cut = rk[100000 - 3:100000 + 4]
    opts = '{"heads": 1, "d_head": 4}'
    a = db.execute("SELECT relattn_attention(?, ?, ?, ?, NULL, ?)",
                   (f32(q), f32(k), f32(v), f32(rk), opts)).fetchone()[0]
    b = db.execute("SELECT relattn_attention(?, ?, ?, ?, NULL, ?)",
                   (f32(q), f32(k), f32(v), f32(rk_cut), opts)).fetchone()[0]
    assert np.allclose(from_f32(a), from_f32(b), rtol=1e-5, atol=1e-6)


def test_attention_map_over_the_memory_bound(db, rng):
    # relattn_attention_weights holds an n x n map: 30000 tokens need 3.6 GB.
    import modelgen
    cfg = modelgen.config(d_model=4, n_heads=1, d_ff=4, n_layers=1, clip=1)
    db.execute("SELECT relattn_import('m', ?)", (modelgen.safetensors(cfg, rng),))
    with pytest.raises(sqlite3.DataError) as e:
        db.execute("SELECT count(*) FROM relattn_attention_weights('m', ?) "
                   "WHERE layer = 0 AND head = 0", ("a" * 30000,)).fetchone()
    msg = str(e.value)
    assert msg.startswith("relattn_attention_weights: needs ")
    assert int(msg.split()[2]) >= 4 * 30001 * 30001
