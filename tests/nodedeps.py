"""tests/node's packages (better-sqlite3, tokenizers, sqlite-vec), installed from its lockfile
with `npm ci` when a test needs one that is missing (`make deps` runs it first), and the Node
version they need. Each function gives None when ready, else the reason, for the test to skip
with."""
import os
import shutil
import subprocess

from conftest import ROOT

NODE_DIR = ROOT / "tests" / "node"


def npm_ci(marker, what):
    """None once marker (a path under tests/node) exists, running `npm ci` there if it does
    not; else why not. what: the package, for messages."""
    if marker.exists():
        return None
    npm = shutil.which("npm")
    if not npm:
        return f"npm is not installed (needed for `npm ci` in tests/node, which installs {what})"
    if os.environ.get("RELATTN_SANITIZED"):
        return f"{what} is not installed: `npm ci` runs in the normal pass (make deps)"
    r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR,
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        return ("`npm ci` in tests/node failed (no registry access, or no C++ compiler "
                "for better-sqlite3's build): " + r.stderr.strip()[-500:])
    return None


def node_ready(marker, what):
    """None when node 20 or newer runs and marker is installed (npm_ci); else why not."""
    node = shutil.which("node")
    if not node:
        return f"node is not installed ({what} needs Node >= 20; Debian 12's nodejs is 18)"
    v = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    try:
        major = int(v.lstrip("v").split(".")[0])
    except ValueError:
        return f"cannot read the node version ({v!r})"
    if major < 20:
        return f"node {v} is too old: {what} needs Node >= 20 (Debian 12's nodejs is 18)"
    return npm_ci(marker, what)
