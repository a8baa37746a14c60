"""Generation speed on an encoder-decoder: relattn_generate (greedy, batch 1, its key/value cache)
on a T5ForConditionalGeneration imported with relattn_import, against the same checkpoint in
PyTorch with a key/value cache (tests/bench/t5_generate.py), same threads; the cost per new token
at 16 and at 256 new tokens.

    python3 tests/bench/bench_generate_t5.py relattn.so [--threads 1] [--runs 7] [--long 256]

Models: random checkpoints in Hugging Face's layout (tests/hf/checkpoints.py's t5()), t5-small's
shape scaled to run in seconds: d_model 512, 8 heads of 64, 32 buckets, max_distance 128, 4
encoder and 4 decoder layers, an embedding of 4096 rows; t5 (relu, d_ff 2048, lm_head tied to
shared, so scaled by d_model**-0.5) and t5-v1_1 / flan-t5 (gated-gelu, d_ff 1024, an untied
lm_head). The source: 40 random ids and </s>. Both sides decode it greedily from
decoder_start_token_id for N new tokens (eos ignored); the tokens must agree (float32 on both
sides, near ties aside: the first 16 are checked, tests/hf/test_bench_t5_decoder.py checks them
in full on tiny models).

A new token's cost is (T(N) - T(1)) / (N - 1), T(N) the median time to N new tokens over the
runs, the sides and the lengths interleaved within each run (the machine is shared: a slow spell
falls on all), a run's T(1) the mean of 16 calls and its T(16) of 4 (T(1), the encoder's run
and the first step, is a few milliseconds: one call's noise would swamp the difference); the
encoder and the cross-attention's keys, paid once, are left out on both sides. The target:
relattn at least 2x PyTorch's tokens per second, PASS or FAIL at each N.

The threads: relattn_threads, torch.set_num_threads and OpenBLAS's own count (torch.mv runs in
it), all --threads; the CPU time over the wall time of each side is printed as a check.

Beside it, not counted: the same ratio for relattn's int8 and bf16 copies of the model
(relattn_quantize) against PyTorch's float32; and the float32 weights a new token reads, with the
rate relattn reads them at (at batch 1 a token is a matrix-vector product per weight: the
memory's bandwidth bounds both sides).

Measured here (2-core AMD EPYC, shared, 1 thread, medians of 7; ms per new token):

    model                  N  relattn  torch  ratio   int8 ratio  bf16 ratio
    t5 (relu, tied)       16    2.76    3.06  1.11x     2.25x       1.86x
    t5 (relu, tied)      256    3.22    3.06  0.95x     2.17x       1.65x
    flan-t5 (gated-gelu)  16    3.52    4.57  1.30x     3.14x       2.35x
    flan-t5 (gated-gelu) 256    4.06    4.47  1.10x     2.64x       1.87x

so the float32 target fails: a new token reads 59-67 MB of float32 weights through one
matrix-vector product each, on both sides, at about the same rate (some 20-24 GB/s); relattn's
per-token cost grows 15-17% from 16 to 256 new tokens. Other runs at 1 thread gave 0.98-1.43x
(int8 2.0-3.2x, bf16 1.7-2.4x). At --threads 2 on this machine under others' load (load average
near 9, neither side reaching one core) PyTorch took 20-66 ms a token against relattn's 3.4-4.7,
a 5-14x that measures its thread pools contending for the cores more than either side's code.

A step's products and head now run on relattn_threads (src/forward.c, relattn_fwd_rows); at
--threads 2 --runs 2 --long 32, minutes apart on a quieter spell, ms per new token (ratio to
PyTorch in the same run):

    model                  N  before         after
    t5 (relu, tied)       16  2.54  4.05x    2.60  5.51x
    t5 (relu, tied)       32  2.74  2.85x    1.52  5.82x
    flan-t5 (gated-gelu)  16  2.31  3.62x    1.36  6.93x
    flan-t5 (gated-gelu)  32  2.37  1.99x    1.45  6.13x

relattn's cores 1.0 before, 1.4-1.6 after; PyTorch's own times moved between the runs (4.7-10.3
ms before, 8.9-14.3 after), so part of the ratios' change is its noise. relattn alone, base and
new .so interleaved in one process (12 rounds, only about one core free): 1.07x at two threads
in float32, 0.95x int8; one thread unchanged.

Then a step's self- and cross-attention and its head of one row (or a row per beam) became
src/vecmath.c's dot_rows and axpy_rows (a scalar chain of dependent adds, and an sgemm that packed
the 8 MB head on every call, were 49% and 10% of a long generation). Quiet machine, ms per new
token (ratio), 1 thread (--runs 7); 2 threads (--runs 5):

    model                  N  1 thread          2 threads
    t5 (relu, tied)       16  1.951  1.62x      1.107  8.40x
    t5 (relu, tied)      256  1.810  1.78x      0.965  6.15x
    flan-t5 (gated-gelu)  16  1.394  1.94x      0.912  7.02x
    flan-t5 (gated-gelu) 256  1.345  1.95x      0.844  6.28x

per token 256 / 16 new: 0.93 and 0.96 at one thread (1.16 before). int8 6.2-7.2x PyTorch
float32 at one thread, bf16 3.1-3.3x. One thread reads 34-42 GB/s of float32 weights a token,
against PyTorch's 21-25; the one-thread target still fails, by 3-20%. A run minutes earlier gave
1.77x, 1.77x, 1.94x, 1.98x.
With the attention over the cache read once for all heads and dot_rows
taking eight keys at a time (--runs 5, one thread, quiet machine; ms per
new token, relattn / PyTorch):

    model                  N  relattn  torch  ratio   int8 ratio  bf16 ratio
    t5 (relu, tied)       16    1.58    2.67  1.69x     8.89x       3.42x
    t5 (relu, tied)      256    1.48    2.59  1.75x     8.08x       3.32x
    flan-t5 (gated-gelu)  16    1.51    3.02  1.99x     7.43x       4.05x
    flan-t5 (gated-gelu) 256    1.38    2.93  2.12x     7.08x       3.58x

(a run an hour before, with only the eight-key dot_rows: 1.80x, 1.80x,
2.53x, 2.07x). relattn reads t5's 67.1 MB a token at 42.5 GB/s, this
core's read bandwidth from memory (40-42 GB/s on a 128 MB stream of
one-row products; the 50+ seen on smaller sets is the last-level cache
helping): 2x needs PyTorch slower than 2.7-3.0 ms a token, which it was
in some runs and not in others.
"""
import argparse
import ctypes
import json
import pathlib
import sqlite3
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "hf"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))
import checkpoints  # noqa: E402
from bench_generate import interleaved  # noqa: E402

SHAPE = dict(d=512, heads=8, d_kv=64, layers=4, decoder_layers=4, num_buckets=32,
             max_distance=128, vocab=4096)
MODELS = {"t5 (relu, tied)": dict(ffn="relu", ff=2048),
          "flan-t5 (gated-gelu)": dict(ffn="gated-gelu", ff=1024)}
TARGET = 2.0
REPS = {1: 16, 16: 4}   # a short run's time: the mean of this many, as long as a few tokens more


def relattn_run(db, name, src, new):
    opts = json.dumps({"max_new_tokens": new, "eos_token_id": None})
    t = time.perf_counter()
    rows = db.execute("SELECT token FROM relattn_generate_tokens(?, ?, ?)",
                      (name, src, opts)).fetchall()
    return time.perf_counter() - t, [r[0] for r in rows]


def torch_run(gen, src, new):
    t = time.perf_counter()
    out, _ = gen.greedy(src, new)
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("so")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--long", type=int, default=256)
    args = ap.parse_args()
    import torch
    import t5_generate
    torch.set_num_threads(args.threads)
    # Debian's PyTorch runs torch.mv in OpenBLAS (the libopenblas relattn loads), whose own
    # thread pool torch.set_num_threads leaves at the core count: without this PyTorch used 2
    # cores at --threads 1 (CPU time twice the wall time). relattn sets it only around its calls.
    blas = ctypes.CDLL("libopenblas.so.0")
    blas.openblas_set_num_threads(args.threads)
    assert blas.openblas_get_num_threads() == args.threads
    rng = np.random.default_rng(11)
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    db.load_extension(args.so)
    db.execute(f"SELECT relattn_threads({args.threads})")
    lengths = (1, 16, args.long)
    print(f"threads {args.threads} (relattn_threads, torch.set_num_threads, OpenBLAS's); "
          "greedy, batch 1; "
          f"d_model {SHAPE['d']}, {SHAPE['heads']} heads of {SHAPE['d_kv']}, "
          f"{SHAPE['layers']}+{SHAPE['decoder_layers']} layers, vocab {SHAPE['vocab']}; "
          f"a source of 41 tokens; medians of {args.runs} interleaved runs; a new token's cost "
          "is (T(N) - T(1)) / (N - 1); int8 and bf16 (relattn_quantize of the same model) "
          "are shown beside it, not counted")
    print(f"{'model':<22} {'N':>4} {'relattn ms/tok':>15} {'torch ms/tok':>13} "
          f"{'relattn tok/s':>14} {'torch tok/s':>12} {'ratio':>6}  target {TARGET:.0f}x  "
          f"{'int8 ratio':>10} {'bf16 ratio':>10}")
    verdicts, flat, stream, cores = [], {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, kw) in enumerate(MODELS.items()):
            ck = checkpoints.t5(pathlib.Path(tmp) / str(i), rng, "T5ForConditionalGeneration",
                                **SHAPE, **kw)
            name = f"m{i}"
            db.execute("SELECT relattn_import(?, ?, ?, ?, ?)",
                       (name, ck.read("weights"), ck.path("config").read_text(),
                        ck.read("tokenizer"), ck.path("tokenizer_config").read_text()))
            for mode in ("int8", "bf16"):
                db.execute("SELECT relattn_quantize(?, ?, ?)", (name, f"{name}_{mode}", mode))
            gen = t5_generate.T5Generator(ck.config, ck.params)
            # the float32 weights a new token reads: the decoder's but the cross-attention's
            # keys and values (run once) and the bias table (gathered), and the head
            stream[label] = 4 * (sum(v.size for k, v in ck.params.items()
                                     if k.startswith("decoder.")
                                     and not k.endswith(("EncDecAttention.k.weight",
                                                         "EncDecAttention.v.weight",
                                                         "relative_attention_bias.weight")))
                                 + gen.head.numel())
            src = [int(t) for t in rng.integers(3, ck.n_pieces, 40)]
            blob = np.asarray(src, "<i4").tobytes()
            enc = src + [ck.special["eos"]]
            sides = {"relattn": lambda n: relattn_run(db, name, blob, n),
                     "torch": lambda n: torch_run(gen, enc, n),
                     "int8": lambda n: relattn_run(db, f"{name}_int8", blob, n),
                     "bf16": lambda n: relattn_run(db, f"{name}_bf16", blob, n)}
            med, cpu, wall, toks = interleaved(sides, lengths, args.runs, REPS)
            cores[label] = {side: cpu[side] / wall[side] for side in sides}
            for n in lengths[1:]:
                per = {side: (med[side, n] - med[side, 1]) / (n - 1) for side in sides}
                a, b = per["relattn"], per["torch"]
                flat[label, n] = a
                ok = b / a >= TARGET
                verdicts.append(ok)
                agree = toks["relattn", n][:16] == toks["torch", n][:16]
                print(f"{label:<22} {n:>4} {1e3 * a:>15.3f} {1e3 * b:>13.3f} {1 / a:>14.0f} "
                      f"{1 / b:>12.0f} {b / a:>5.2f}x  {'PASS' if ok else 'FAIL':<9}  "
                      f"{b / per['int8']:>9.2f}x {b / per['bf16']:>9.2f}x"
                      f"{'' if agree else '  (tokens differ)'}")
    for label in MODELS:
        print(f"relattn per token, {label}: {args.long} new / 16 new = "
              f"{flat[label, args.long] / flat[label, 16]:.2f}; float32 weights read per new "
              f"token {stream[label] / 1e6:.1f} MB, so {stream[label] / flat[label, 16] / 1e9:.1f}"
              " GB/s at 16 new")
        print(f"  CPU time / wall time (cores used): " + ", ".join(
            f"{side} {v:.2f}" for side, v in cores[label].items()))
    print(f"\n{'PASS' if all(verdicts) else 'FAIL'}: relattn_generate >= {TARGET:.0f}x PyTorch "
          f"with a key/value cache on T5 ({sum(verdicts)} of {len(verdicts)} rows)")

if __name__ == "__main__":
    main()
