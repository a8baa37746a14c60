"""Run by test_kernel_sets.py in a fresh process (OpenBLAS picks its kernel
set when it loads, from OPENBLAS_CORETYPE): a random model and inputs from a
seed, every model function, relattn_scan and relattn_attention; the results
as JSON on stdout, floats as exact hex.

    OPENBLAS_CORETYPE=Haswell python3 kernel_probe.py SEED THREADS
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import modelgen  # noqa: E402
from conftest import connect  # noqa: E402


def hexes(values):
    return [float(v).hex() for v in values]


def main():
    seed, threads = int(sys.argv[1]), int(sys.argv[2])
    rng = np.random.default_rng(seed)
    db = connect()
    cfg = modelgen.config(d_model=64, n_heads=4, d_ff=256, n_layers=2, clip=8)
    modelgen.load(db, "m", cfg, rng)
    db.execute("SELECT relattn_threads(?)", (threads,))
    debug = db.execute("SELECT relattn_debug()").fetchone()[0]
    out = {"blas": [line for line in debug.split("\n") if line.startswith("blas:")][0],
           "simd": [line for line in debug.split("\n") if line.startswith("simd:")][0]}
    lens = [1, 3, 17, 40, 130, 300, 520]
    seqs = [rng.integers(0, 256, n).astype("<i4").tobytes() for n in lens]
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.executemany("INSERT INTO docs(body) VALUES (?)", [(s,) for s in seqs])
    rows = db.execute("SELECT relattn_score('m', body), relattn_embed('m', body) "
                      "FROM docs ORDER BY id").fetchall()
    out["score"] = hexes(r[0] for r in rows)
    out["embed"] = [hexes(np.frombuffer(r[1], "<f4")) for r in rows]
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', "
               "source='docs', tokens='body')")
    rows = db.execute("SELECT score, embedding FROM temp.job").fetchall()
    out["scan_score"] = hexes(r[0] for r in rows)
    out["scan_embed"] = [hexes(np.frombuffer(r[1], "<f4")) for r in rows]
    out["logprob"] = hexes(r[0] for r in db.execute(
        "SELECT logprob FROM relattn_logprobs('m', ?)", (seqs[5],)))
    # its int8 copy, the embedding table int8 too: the LM head an int8
    # product (src/qgemm.c), no OpenBLAS product in the scores
    db.execute("SELECT relattn_quantize('m', 'q8', 'int8')")
    out["q8_score"] = hexes(r[0] for r in db.execute(
        "SELECT relattn_score('q8', body) FROM docs ORDER BY id"))
    out["q8_logprob"] = hexes(r[0] for r in db.execute(
        "SELECT logprob FROM relattn_logprobs('q8', ?)", (seqs[5],)))
    q, k, v = (rng.standard_normal((600, 2 * 32)).astype("<f4") for _ in range(3))
    rk, rv = (rng.standard_normal((2 * 16 + 1, 32)).astype("<f4") for _ in range(2))
    att = db.execute("SELECT relattn_attention(?, ?, ?, ?, ?, ?)",
                     (q.tobytes(), k.tobytes(), v.tobytes(), rk.tobytes(), rv.tobytes(),
                      json.dumps({"heads": 2, "d_head": 32, "causal": True}))).fetchone()[0]
    out["attention"] = hexes(np.frombuffer(att, "<f4"))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
