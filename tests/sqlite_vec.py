"""Where sqlite-vec's loadable library is: tests/node's node_modules, from the lockfile.

npm's package sqlite-vec (tests/node/package.json) brings vec0.so for this platform in its
optional dependency sqlite-vec-<os>-<cpu>. When it is missing, `npm ci` installs it (and
better-sqlite3), as tests/node/deps.sh does in `make deps`; without node or npm, vec0() gives
the reason, for the test to skip with."""
import os
import platform
import shutil
import subprocess

from conftest import ROOT

NODE_DIR = ROOT / "tests" / "node"
PLATFORM = {"Linux": "linux", "Darwin": "darwin"}.get(platform.system(), platform.system().lower())
CPU = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
    platform.machine().lower(), platform.machine().lower())
LIB = NODE_DIR / "node_modules" / f"sqlite-vec-{PLATFORM}-{CPU}" / "vec0.so"


def vec0():
    """(path of vec0.so without its suffix, as load_extension and .load take it, None), or
    (None, why it is not there)."""
    if not LIB.exists():
        npm = shutil.which("npm")
        if not npm:
            return None, "npm is not installed (needed for `npm ci` in tests/node, which installs sqlite-vec)"
        if os.environ.get("RELATTN_SANITIZED"):
            return None, "sqlite-vec is not installed: `npm ci` runs in the normal pass (make deps)"
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR,
                           capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            return None, "`npm ci` in tests/node failed (no registry access, or no C++ compiler " \
                         "for better-sqlite3's build): " + r.stderr.strip()[-500:]
        if not LIB.exists():
            return None, f"npm's sqlite-vec has no library for {PLATFORM}-{CPU} (looked for {LIB})"
    return str(LIB)[:-3], None
