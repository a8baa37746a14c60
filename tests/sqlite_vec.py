"""Where sqlite-vec's loadable library is: tests/node's node_modules, from the lockfile.

npm's package sqlite-vec (tests/node/package.json) brings vec0.so for this platform in its
optional dependency sqlite-vec-<os>-<cpu>. When it is missing, `npm ci` installs it (and
better-sqlite3), as tests/node/deps.sh does in `make deps`; without node or npm, vec0() gives
the reason, for the test to skip with."""
import platform

import nodedeps

NODE_DIR = nodedeps.NODE_DIR
PLATFORM = {"Linux": "linux", "Darwin": "darwin"}.get(platform.system(), platform.system().lower())
CPU = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
    platform.machine().lower(), platform.machine().lower())
LIB = NODE_DIR / "node_modules" / f"sqlite-vec-{PLATFORM}-{CPU}" / "vec0.so"


def vec0():
    """(path of vec0.so without its suffix, as load_extension and .load take it, None), or
    (None, why it is not there)."""
    why = nodedeps.npm_ci(LIB, "sqlite-vec")
    if why:
        return None, why
    if not LIB.exists():
        return None, f"npm's sqlite-vec has no library for {PLATFORM}-{CPU} (looked for {LIB})"
    return str(LIB)[:-3], None
