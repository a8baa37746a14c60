"""The per-call limits (README, "Limits"): settings, their errors, and the
errors a request over them gets."""
import sqlite3

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
