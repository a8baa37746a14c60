"""Runs each C unit test binary (tests/unit/test_*.c, built by make) as one
pytest case, so make test ends with one summary line."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
UNIT = pathlib.Path(os.environ.get("RELATTN_UNIT", ROOT / "build" / "unit"))
SOURCES = sorted((ROOT / "tests" / "unit").glob("test_*.c"))


@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_unit(src):
    exe = UNIT / src.stem
    assert exe.exists(), f"{exe} not built (run make unit)"
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=1200)
    print(r.stdout)
    print(r.stderr)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
