"""python/relattn: relattn.load(conn), as sqlite-vec's module does it."""
import pathlib
import sqlite3
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import relattn  # noqa: E402

pytestmark = pytest.mark.skipif(not (ROOT / "relattn.so").exists(),
                                reason="the module loads the checkout's relattn.so")


def test_load_in_a_checkout():
    assert relattn.loadable_path() == str(ROOT / "relattn")
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    relattn.load(db)
    db.enable_load_extension(False)
    assert db.execute("SELECT relattn_version()").fetchone()[0] == relattn.__version__
    blob = (ROOT / "models" / "tiny.safetensors").read_bytes()
    assert db.execute("SELECT relattn_import('tiny', ?)", (blob,)).fetchone()[0] == 75
    real, shuffled = (db.execute("SELECT relattn_perplexity('tiny', ?)", (t,)).fetchone()[0]
                      for t in ("And God said, Let there be light", "thgil eb ereht teL ,dias doG dnA"))
    assert 1 < real < shuffled
    db.close()


def test_no_library_names_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setattr(relattn, "_HERE", str(tmp_path / "a" / "b"))
    monkeypatch.setattr(relattn, "_LIBDIR", str(tmp_path / "lib"))
    with pytest.raises(FileNotFoundError) as e:
        relattn.loadable_path()
    assert str(e.value) == (f"relattn: no relattn.so in {tmp_path}/a/b/relattn.so, "
                            f"{tmp_path}/relattn.so, {tmp_path}/lib/relattn.so "
                            "(run `make` in the checkout, or `make install`)")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "relattn.so").write_bytes((ROOT / "relattn.so").read_bytes())
    assert relattn.loadable_path() == str(tmp_path / "lib" / "relattn")
