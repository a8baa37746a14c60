"""make help: the list of targets at the top of the Makefile, each one a
target the Makefile defines."""
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_make_help_lists_the_targets():
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MAKEFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "-s", "help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    listed = re.findall(r"^  make ([\w-]+)\s+\S", r.stdout, re.M)
    assert {"help", "test", "demo", "hf-demo", "bench", "install", "experiments", "fuzz", "deps"} <= set(listed)
    assert r.stdout.startswith("  make            build relattn.so")
    makefile = (ROOT / "Makefile").read_text()
    for target in listed:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target
    # the header comment, as it is, and nothing else
    header = makefile[:makefile.index("\n\n")].split("\n")[2:]
    assert r.stdout == "".join(line[2:] + "\n" for line in header)
