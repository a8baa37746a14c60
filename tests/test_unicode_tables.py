"""src/unicode_data.c is what src/unicode_gen.py writes from this Python's
unicodedata: the tables are generated, never edited by hand."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_unicode_tables_are_generated():
    out = subprocess.run([sys.executable, str(ROOT / "src/unicode_gen.py"), "-"],
                         check=True, capture_output=True).stdout
    assert out == (ROOT / "src/unicode_data.c").read_bytes(), (
        "src/unicode_data.c differs from the generator: run "
        "/usr/bin/python3 src/unicode_gen.py")
