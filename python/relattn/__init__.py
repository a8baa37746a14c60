"""relattn for Python's sqlite3: load the extension into a connection.

Use Debian's /usr/bin/python3: its sqlite3 module has enable_load_extension. A
Python built without --enable-loadable-sqlite-extensions (pyenv's, by default)
lacks it and loads no extension.

    import sqlite3
    import relattn

    db = sqlite3.connect("corpus.db")
    db.enable_load_extension(True)
    relattn.load(db)
    db.enable_load_extension(False)
    print(db.execute("SELECT relattn_version()").fetchone()[0])

As with sqlite-vec, the caller enables extension loading around load(). The
library is looked for next to this package (a checkout: python/relattn/ two
levels below relattn.so), then where `make install` put it.
"""
import os

__all__ = ["load", "loadable_path", "__version__"]
__version__ = "0.1.0"

_HERE = os.path.dirname(os.path.abspath(__file__))
# `make install` writes the directory it installed relattn.so into here.
_LIBDIR = None


def _candidates():
    yield os.path.join(_HERE, "relattn.so")
    yield os.path.join(os.path.dirname(os.path.dirname(_HERE)), "relattn.so")
    if _LIBDIR:
        yield os.path.join(_LIBDIR, "relattn.so")


def loadable_path():
    """The path of relattn.so, without its suffix (as sqlite3's
    load_extension takes it). Raises FileNotFoundError naming the places
    looked in when there is none."""
    tried = []
    for path in _candidates():
        if os.path.isfile(path):
            return path[:-3]
        tried.append(path)
    raise FileNotFoundError(
        "relattn: no relattn.so in " + ", ".join(tried)
        + " (run `make` in the checkout, or `make install`)")


def load(conn):
    """Loads relattn into the sqlite3 connection conn. Enable extension
    loading on it first (conn.enable_load_extension(True)): Python's sqlite3
    may refuse to load otherwise."""
    conn.load_extension(loadable_path())
