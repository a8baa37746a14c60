"""The extension through the sqlite3 shell's .load, as a user runs it."""
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))


def shell(sql, db=":memory:"):
    so = SO[:-3] if SO.endswith(".so") else SO
    return subprocess.run(["sqlite3", "-bail", db], input=f".load {so}\n{sql}\n",
                          capture_output=True, text=True, timeout=600)


def test_load_and_version():
    r = shell("SELECT relattn_version();")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0.1.0"


def test_setting_error_text():
    r = shell("SELECT relattn_threads(0);")
    assert r.returncode != 0
    assert "relattn_threads: n must be between 1 and 256, not 0" in r.stderr


def test_import_of_a_missing_file():
    # readfile() of a path that is not there gives NULL; say so
    r = shell("SELECT relattn_import('m', readfile('no/such/model.safetensors'));")
    assert r.returncode != 0
    assert r.stderr.strip().endswith(
        "relattn_import: safetensors_blob is NULL (file not found?)"), r.stderr
