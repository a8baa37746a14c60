"""The README's "Models in the database" and "Token sequences" examples, run
as written in the sqlite3 shell (on a random model made by tests/modelgen.py,
saved where the README reads the bundled one)."""
import os
import pathlib
import re
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
sys.path.insert(0, str(ROOT / "tests"))
import modelgen  # noqa: E402


def section_sql(title):
    text = (ROOT / "README.md").read_text()
    start = text.index("## " + title + "\n")
    end = text.find("\n## ", start + 1)
    # a block marked "<!-- run by tests/... -->" needs files that test
    # writes, and runs there
    blocks = [b for marked, b in re.findall(r"(<!-- run by [^>]*-->\n)?```sql\n(.*?)```",
                                            text[start:end if end > 0 else None], re.S)
              if not marked]
    assert blocks, title
    so = SO[:-3] if SO.endswith(".so") else SO
    sql = "\n".join(blocks).replace(".load ./relattn", f".load {so}")
    if f".load {so}" not in sql:
        sql = f".load {so}\n" + sql
    return sql


def run(sql, cwd):
    r = subprocess.run(["sqlite3", "-bail", "readme.db"], input=sql, cwd=cwd,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def make_model(tmp_path, rng):
    cfg = modelgen.config(n_layers=2, d_model=16, n_heads=2)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.safetensors").write_bytes(modelgen.safetensors(cfg, rng))
    return cfg


def test_readme_models(tmp_path, rng):
    cfg = make_model(tmp_path, rng)
    n = len(modelgen.shapes(cfg))
    out = run(section_sql("Models in the database"), tmp_path)
    assert out[0] == str(n)                          # relattn_import
    name, version, sha = out[1].split("|")
    assert (name, version, len(sha)) == ("tiny", "1", 64)
    assert out[2] == f"{cfg['n_layers']}|{cfg['position']['clip']}"
    assert out[3].startswith("tok_emb|F32|[259,16]|")
    assert out[7 + 5] == "16"                        # relattn_weights length
    size = (tmp_path / "tiny-copy.safetensors").stat().st_size
    assert out[13:17] == [str(size), str(n), str(n), "1"]  # export, re-import,
    #                                  every tensor equal, the same sha256
    assert out[-2] == "1|1" and out[-1] == "16"      # after the UPDATE
    assert (tmp_path / "tiny-copy.safetensors").exists()


def test_readme_tokens(tmp_path, rng):
    make_model(tmp_path, rng)
    out = run(section_sql("Token sequences"), tmp_path)
    assert out[1:4] == ["[104,195,169,108,108,111]", "hi", "01000000FFFFFFFF"]
    assert out[4:7] == ["0|97", "1|98", "2|99"]
    assert out[7] == "cba"


# relattn_model as earlier builds made it (the CHECK that trusted_schema=OFF
# refuses), and their triggers: the database the README's migration is for.
OLD_SCHEMA = """
CREATE TABLE relattn_model(
  name    TEXT PRIMARY KEY,
  config  TEXT NOT NULL CHECK (json_valid(config)),
  version INTEGER NOT NULL DEFAULT 1,
  sha256  TEXT
);
CREATE TABLE relattn_tensor(
  model TEXT NOT NULL REFERENCES relattn_model(name)
        ON DELETE CASCADE ON UPDATE CASCADE,
  name  TEXT NOT NULL,
  dtype TEXT NOT NULL,
  shape TEXT NOT NULL,
  data  BLOB NOT NULL,
  UNIQUE (model, name)
);
CREATE TRIGGER relattn_tensor_update
AFTER UPDATE ON relattn_tensor BEGIN
  UPDATE relattn_model SET version = version + 1, sha256 = NULL
   WHERE name IN (old.model, new.model);
END;
"""


def test_readme_migration_from_the_check(tmp_path, rng):
    import sqlite3
    text = (ROOT / "README.md").read_text()
    sql = next(b for b in re.findall(r"```sql\n(.*?)```", text, re.S)
               if "writable_schema" in b)
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(OLD_SCHEMA)
    old.close()
    cfg = modelgen.config(n_layers=1, d_model=16, n_heads=2)
    blob = modelgen.safetensors(cfg, rng)
    toks = rng.integers(0, 256, 12).astype("<i4").tobytes()
    ext = sqlite3.connect(path)
    ext.enable_load_extension(True)
    ext.load_extension(SO)
    ext.execute("SELECT relattn_import('m', ?)", (blob,))
    ext.execute("CREATE TABLE notes(x)")
    ext.execute("INSERT INTO notes VALUES ('kept')")
    ext.commit()
    score = ext.execute("SELECT relattn_score('m', ?)", (toks,)).fetchone()[0]
    ext.close()

    def plain_off():
        db = sqlite3.connect(path)
        db.execute("PRAGMA trusted_schema = OFF")
        try:
            return db.execute("SELECT x FROM notes").fetchall()
        finally:
            db.close()

    try:
        plain_off()
        assert False, "the old schema was readable with trusted_schema=OFF"
    except sqlite3.DatabaseError as e:
        assert str(e) == ("malformed database schema (relattn_model) - "
                          "unsafe use of json_valid()")
    r = subprocess.run(["sqlite3", "-bail", str(path)], input=sql,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert plain_off() == [("kept",)]
    db = sqlite3.connect(path)
    db.execute("PRAGMA trusted_schema = OFF")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert "CHECK" not in db.execute("SELECT sql FROM sqlite_schema "
                                     "WHERE name = 'relattn_model'").fetchone()[0]
    db.enable_load_extension(True)
    db.load_extension(SO)
    assert db.execute("SELECT relattn_score('m', ?)", (toks,)).fetchone()[0] == score
    db.close()
