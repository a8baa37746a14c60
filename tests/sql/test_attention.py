"""relattn_attention(q, k, v, rel_k, rel_v, options) through Python's sqlite3,
against a numpy float64 reference of Shaw et al. 2018 eq. 3-4 (DESIGN §5) on
fresh random inputs, tolerance 1e-5 relative; and the exact error text of
each bad argument."""
import ctypes
import json
import os
import pathlib
import sqlite3
import subprocess

import numpy as np
import pytest

from conftest import SO, f32, from_f32, rel_err

TOL = 1e-5
SQL = "SELECT relattn_attention(?, ?, ?, ?, ?, ?)"


def reference(q, k, v, rk, rv, heads, d, causal=False, per_head=False):
    """float64, every score materialized: out (n, heads*d)."""
    q, k, v = (np.asarray(x, np.float64).reshape(-1, heads, d) for x in (q, k, v))
    n = q.shape[0]
    out = np.zeros((n, heads, d))
    for h in range(heads):
        def table(t):
            if t is None:
                return None
            t = np.asarray(t, np.float64)
            return t[h] if per_head else t
        tk, tv = table(rk), table(rv)
        clip = ((tk if tk is not None else tv).shape[0] - 1) // 2 if (
            tk is not None or tv is not None) else 0
        i = np.arange(n)[:, None]
        j = np.arange(n)[None, :]
        r = np.clip(j - i, -clip, clip) + clip                # (n, n)
        e = q[:, h] @ k[:, h].T
        if tk is not None:
            e += np.einsum("id,ijd->ij", q[:, h], tk[r])
        e /= np.sqrt(d)
        if causal:
            e = np.where(j > i, -np.inf, e)
        w = np.exp(e - e.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        z = w @ v[:, h]
        if tv is not None:
            z += np.einsum("ij,ijd->id", w, tv[r])
        out[:, h] = z
    return out.reshape(n, heads * d)


def make(rng, n, heads, d, clip, per_head=False, use_k=True, use_v=True):
    q, k, v = (rng.uniform(-2, 2, (n, heads * d)) for _ in range(3))
    shape = (heads, 2 * clip + 1, d) if per_head else (2 * clip + 1, d)
    rk = rng.uniform(-2, 2, shape) if use_k else None
    rv = rng.uniform(-1, 1, shape) if use_v else None
    # float32 is what the kernel sees: the reference starts from the same values.
    return [None if x is None else x.astype(np.float32) for x in (q, k, v, rk, rv)]


def call(db, q, k, v, rk, rv, **opts):
    args = [x if x is None or isinstance(x, (str, bytes, int, float)) else f32(x)
            for x in (q, k, v, rk, rv)]
    return db.execute(SQL, (*args, json.dumps(opts))).fetchone()[0]


CASES = [
    # n, heads, d, clip, causal, per_head, use_k, use_v
    (1, 1, 8, 2, False, False, True, True),        # n = 1
    (5, 2, 12, 16, False, False, True, True),      # n < k
    (16, 3, 12, 16, True, True, True, True),       # n = k
    (300, 2, 20, 4, False, False, True, True),     # n >> k, not a block multiple
    (300, 2, 20, 4, True, True, True, True),
    (130, 8, 8, 3, True, False, True, False),      # key term alone, 8 heads
    (130, 4, 7, 3, False, True, False, True),      # value term alone, d odd
    (90, 3, 16, 0, True, False, True, True),       # k = 0
    (90, 3, 16, 5, False, False, False, False),    # no relative term
    (700, 1, 64, 64, True, False, True, True),     # band wider than a block
]


@pytest.mark.parametrize("n,heads,d,clip,causal,per_head,use_k,use_v", CASES)
def test_against_numpy(db, rng, n, heads, d, clip, causal, per_head, use_k, use_v):
    q, k, v, rk, rv = make(rng, n, heads, d, clip, per_head, use_k, use_v)
    out = call(db, q, k, v, rk, rv, heads=heads, d_head=d, causal=causal,
               per_head=per_head)
    assert isinstance(out, bytes) and len(out) == n * heads * d * 4
    ref = reference(q, k, v, rk, rv, heads, d, causal, per_head)
    assert rel_err(from_f32(out, (n, heads * d)), ref) <= TOL


def test_relative_terms_matter(db, rng):
    # The tables change the result far beyond the tolerance (the test above
    # would notice a kernel that ignored them).
    q, k, v, rk, rv = make(rng, 50, 2, 8, 3)
    with_terms = from_f32(call(db, q, k, v, rk, rv, heads=2, d_head=8))
    without = from_f32(call(db, q, k, v, None, None, heads=2, d_head=8))
    assert rel_err(with_terms, without) > 1e-2


def test_threads_give_the_same_bits(db, rng):
    q, k, v, rk, rv = make(rng, 777, 4, 32, 16, per_head=True)
    results = []
    for t in (1, 2, 3):
        db.execute("SELECT relattn_threads(?)", (t,))
        results.append(call(db, q, k, v, rk, rv, heads=4, d_head=32, causal=True,
                            per_head=True))
    assert results[0] == results[1] == results[2]


def test_json_matrices(db, rng):
    q, k, v, rk, rv = make(rng, 6, 2, 3, 2)
    blob = call(db, q, k, v, rk, rv, heads=2, d_head=3)
    # Nested, flat, and mixed: the float32 values survive JSON via repr.
    nested = [json.dumps(x.astype(float).tolist()) for x in (q, k, v, rk, rv)]
    flat = [json.dumps(x.astype(float).ravel().tolist()) for x in (q, k, v, rk, rv)]
    assert call(db, *nested, heads=2, d_head=3) == blob
    assert call(db, flat[0], nested[1], f32(v), flat[3], nested[4],
                heads=2, d_head=3) == blob


def test_readme_example(db):
    out = db.execute(
        "SELECT relattn_attention('[[1,0],[0,1]]', '[[1,0],[0,1]]', "
        "'[[1,2],[3,4]]', '[[0,0],[0,1],[1,0]]', NULL, "
        "json_object('heads', 1, 'd_head', 2))").fetchone()[0]
    ref = reference(np.eye(2), np.eye(2), [[1, 2], [3, 4]],
                    [[0, 0], [0, 1], [1, 0]], None, 1, 2)
    assert rel_err(from_f32(out, (2, 2)), ref) <= TOL


def test_unaligned_blobs_from_a_table(db, rng):
    # Column values can point into a database page at any offset.
    q, k, v, rk, rv = make(rng, 20, 2, 5, 3)
    db.execute("CREATE TABLE t(pad TEXT, q BLOB, k BLOB, v BLOB, rk BLOB, rv BLOB)")
    for pad in ("", "a", "ab", "abc"):
        db.execute("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
                   (pad, f32(q), f32(k), f32(v), f32(rk), f32(rv)))
    ref = reference(q, k, v, rk, rv, 2, 5)
    rows = db.execute("SELECT relattn_attention(q, k, v, rk, rv, "
                      "'{\"heads\":2,\"d_head\":5}') FROM t").fetchall()
    for (out,) in rows:
        assert rel_err(from_f32(out, (20, 10)), ref) <= TOL


def test_options_spellings(db, rng):
    q, k, v, rk, rv = make(rng, 9, 1, 4, 1)
    a = call(db, q, k, v, rk, rv, heads=1, d_head=4, causal=True)
    opts = '{"d_head": 4, "causal": 1, "heads": 1, "per_head": false}'
    b = db.execute(SQL, (f32(q), f32(k), f32(v), f32(rk), f32(rv), opts)).fetchone()[0]
    assert a == b


def test_openblas_threads_restored(db, rng):
    # OpenBLAS's thread count is process-wide: the call sets it to 1 and puts
    # the caller's value back.
    blas = ctypes.CDLL("libopenblas.so.0")
    before = blas.openblas_get_num_threads()
    try:
        blas.openblas_set_num_threads(2)
        q, k, v, rk, rv = make(rng, 40, 2, 8, 2)
        call(db, q, k, v, rk, rv, heads=2, d_head=8)
        assert blas.openblas_get_num_threads() == 2
    finally:
        blas.openblas_set_num_threads(before)


def test_shell_load(tmp_path):
    so = SO[:-3] if SO.endswith(".so") else SO
    sql = ("SELECT length(relattn_attention('[[1,0],[0,1],[1,1]]', "
           "'[[1,0],[0,1],[1,1]]', '[[1,2],[3,4],[5,6]]', '[[0,0],[0,1],[1,0]]', "
           "'[[1,1],[0,0],[2,2]]', '{\"heads\":1,\"d_head\":2,\"causal\":true}'));")
    r = subprocess.run(["sqlite3", "-bail", ":memory:"], input=f".load {so}\n{sql}\n",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "24"
    r = subprocess.run(["sqlite3", "-bail", ":memory:"],
                       input=f".load {so}\nSELECT relattn_attention(x'00', x'', x'', "
                             "NULL, NULL, '{}');\n",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "relattn_attention: q has 1 bytes, not a multiple of 4" in r.stderr


# ---- errors -------------------------------------------------------------------

H, D = 2, 8
OPT = json.dumps({"heads": H, "d_head": D})


def err(db, args):
    with pytest.raises(sqlite3.Error) as e:
        db.execute(SQL, args).fetchone()
    return str(e.value)


@pytest.fixture
def good(rng):
    q, k, v, rk, rv = make(rng, 4, H, D, 1)
    return [f32(q), f32(k), f32(v), f32(rk), f32(rv), OPT]


def with_arg(good, i, value):
    args = list(good)
    args[i] = value
    return args


E = "relattn_attention: "


@pytest.mark.parametrize("i,value,message", [
    (0, b"\x01" * 1001, "q has 1001 bytes, not a multiple of 4"),
    (1, 7, "k must be a float32 BLOB or a JSON array, not an integer"),
    (2, None, "v must be a float32 BLOB or a JSON array, not NULL"),
    (3, 1.5, "rel_k must be a float32 BLOB or a JSON array, not a real"),
    (4, b"\x01\x02", "rel_v has 2 bytes, not a multiple of 4"),
    (0, b"", "q is empty"),
    (0, "[1, 2", "q is text but not valid JSON"),
    (1, '{"a": 1}', "k is not a JSON array of numbers"),
    (2, '[[1, 2], ["x"]]', "v is not a JSON array of numbers (found text)"),
    (3, "[1, null, 2]", "rel_k is not a JSON array of numbers (found null)"),
    (0, f32(np.arange(1, 25)), "q has 24 floats, not a multiple of heads*d_head = 16"),
    (1, f32(np.arange(1, 49)), "k has 48 floats, q has 64 (q, k and v must have the same shape)"),
    (2, f32(np.arange(1, 81)), "v has 80 floats, q has 64 (q, k and v must have the same shape)"),
    (3, f32(np.arange(1, 21)), "rel_k has 20 floats, not a multiple of d_head = 8"),
    (3, f32(np.arange(1, 33)), "rel_k has 4 rows, not an odd number (2k+1)"),
    (4, b"", "rel_v has 0 rows, not an odd number (2k+1)"),
    (4, f32(np.arange(1, 41)), "rel_v has 5 rows, rel_k has 3 (both must have 2k+1 rows)"),
    (5, None, "options must be a JSON object, not NULL"),
    (5, "[1, 2]", "options must be a JSON object"),
    (5, "{heads: 2}", "options must be a JSON object"),
    (5, '{"d_head": 8}', "options lack heads"),
    (5, '{"heads": 2}', "options lack d_head"),
    (5, '{"heads": 0, "d_head": 8}', "options.heads must be a positive integer, not 0"),
    (5, '{"heads": 2, "d_head": -8}', "options.d_head must be a positive integer, not -8"),
    (5, '{"heads": 2.5, "d_head": 8}', "options.heads must be a positive integer, not 2.5"),
    (5, '{"heads": "2", "d_head": 8}', 'options.heads must be a positive integer, not "2"'),
    (5, '{"heads": 2, "d_head": 8, "causel": true}',
     "unknown option 'causel' (known: heads, d_head, causal, per_head, position)"),
    (5, '{"heads": 2, "d_head": 8, "causal": "yes"}', 'options.causal must be true or false, not "yes"'),
    (5, '{"heads": 2, "d_head": 8, "per_head": 2}', "options.per_head must be true or false, not 2"),
    (5, '{"heads": 2, "d_head": 8, "per_head": true}',
     "rel_k has 24 floats, not a multiple of heads*d_head = 16 (per_head)"),
])
def test_error_text(db, good, i, value, message):
    assert err(db, with_arg(good, i, value)) == E + message


def test_per_head_rows_error(db, good):
    args = with_arg(good, 5, '{"heads": 2, "d_head": 8, "per_head": true}')
    args[3] = f32(np.arange(1, 2 * 2 * 8 + 1))    # 2 rows per head
    args[4] = None
    assert err(db, args) == E + "rel_k has 2 rows per head, not an odd number (2k+1)"


@pytest.mark.parametrize("i,name", list(enumerate(["q", "k", "v", "rel_k", "rel_v"])))
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite(db, rng, good, i, name, bad):
    a = from_f32(good[i]).copy()
    at = int(rng.integers(len(a)))
    a[at] = bad
    assert err(db, with_arg(good, i, f32(a))) == E + f"{name} has a NaN or Inf at float {at}"


def test_nonfinite_json(db, good):
    # 1e39 is finite in JSON but not as float32
    assert err(db, with_arg(good, 2, json.dumps([1.0] * 63 + [1e39]))) == \
        E + "v has a NaN or Inf at float 63"


def test_result_over_length_limit(db):
    # 400 numbers as JSON fit in 1000 bytes of text; the result needs 1600.
    db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1000)
    m = "[" + ",".join(["1"] * 400) + "]"
    assert err(db, (m, m, m, None, None, '{"heads":1,"d_head":4}')) == \
        E + "the result would have 1600 bytes, over SQLITE_LIMIT_LENGTH (1000)"


# ---- the README's section, run as written --------------------------------------

def readme_blocks(lang):
    import re
    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    title = "## Relative attention on matrices: relattn_attention\n"
    start = text.index(title)
    end = text.find("\n## ", start + 1)
    return re.findall(rf"```{lang}\n(.*?)```", text[start:end], re.S)


def test_readme_sql():
    (sql,) = readme_blocks("sql")
    so = SO[:-3] if SO.endswith(".so") else SO
    r = subprocess.run(["sqlite3", "-bail", ":memory:"],
                       input=sql.replace(".load ./relattn", f".load {so}"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["00000040000040408EF726408FF76640", "2560"]


def test_readme_python():
    (code,) = readme_blocks("python")
    scope = {}
    exec(code.replace('"./relattn"', repr(SO)), scope)
    q, k, v, rk, rv = (scope[x] for x in ("q", "k", "v", "rel_k", "rel_v"))
    ref = reference(q, k, v, rk, rv, scope["heads"], scope["d"])
    assert rel_err(scope["z"], ref) <= TOL


def test_memory_limit(db, rng):
    # The result and every thread's scratch are counted before allocating.
    db.execute("SELECT relattn_max_memory(1048576)")
    db.execute("SELECT relattn_threads(2)")
    q, k, v, rk, rv = make(rng, 1024, 4, 16, 16)
    msg = err(db, (f32(q), f32(k), f32(v), f32(rk), f32(rv), '{"heads":4,"d_head":16}'))
    assert msg.startswith(E + "needs ") and msg.endswith(
        " bytes, over the limit of 1048576 per call (relattn_max_memory)"), msg
    # JSON text: bounded by its length before it is read (2 characters a number).
    m = "[" + ",".join(["1"] * 300000) + "]"
    assert err(db, (m, m, m, None, None, '{"heads":1,"d_head":4}')) == \
        E + f"needs {(len(m) // 2 + 1) * 4} bytes, over the limit of 1048576 per call (relattn_max_memory)"
