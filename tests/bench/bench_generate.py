"""Generation speed: relattn_generate (greedy, batch 1, its key/value cache)
against the same decoder written in PyTorch with a key/value cache, same
threads, float32 against float32 and int8 against int8; and relattn's cost
per new token at 16 and at 512 new tokens (the cache keeps it flat: a token
costs O(n) attention, not a rerun of the prefix).

    python3 tests/bench/bench_generate.py relattn.so [--threads 1,2] [--runs 5] [--long 512]

Models: the bundled byte model (d_model 160, 4 layers, Shaw's clipped
tables with values) and a random decoder of the same kind at d_model 512,
8 layers, 8 heads (tests/modelgen.py). The PyTorch module is written here
from the model's definition (docs/reference.md, The forward pass): pre-norm
layers, Shaw et al. 2018's relative keys and values clipped at k, GELU,
tied LM head; torch.inference_mode, the cache preallocated, the relative
rows gathered once per step and shared by the layers. Its float32 products
are torch.addmv (BLAS's gemv: the tuned batch-1 path, about 4 times
faster here than F.linear on a (1, d) row); its int8 ones are the layers'
nn.Linear through torch.ao.quantization.quantize_dynamic (int8 weights,
activations quantized per call, as relattn_quantize's int8 does), the LM
head float32 on both sides. Both decode the same prompt greedily for N
tokens (eos ignored); the float32 tokens must agree (near ties aside: the
first 16 are checked; int8 rounds differently on each side).

A new token's cost is (T(N) - T(1)) / (N - 1), T(N) the median time to N
new tokens over the runs, the sides and lengths interleaved within each
run (the machine is shared: a slow spell falls on all), a run's T(1) the
mean of 4 calls and its T(16) of 2; the prompt's own cost is left out on
both sides. For each side: its CPU time over its wall time (the cores it
used), and the weights a new token reads (float32: every layer's and the
tied head's, 4 bytes each; int8: the layers' at 1 byte, the head at 4)
over its time per token, the effective GB/s, beside the machine's
bandwidth measured once (a 256 MB numpy copy: read plus written bytes over
the time): at batch 1 every weight is read once per token, so that
bandwidth bounds both sides. Threads: relattn_threads, torch's and
OpenBLAS's own count (torch.addmv runs in it), all the same.

Measured here (2-core AMD EPYC, shared with others' test runs), the d512
decoder, --models big --runs 3 --long 32, before the products were cut
across threads (relattn on the calling thread) and after; tokens per
second (PyTorch's in brackets, its own run each time):

    threads  N   before fp32      after fp32       before int8  after int8
    1       16   239 (157) 1.52x  254 (178) 1.43x  1060 (117)    910 (63)
    1       32   264 (193) 1.36x  278 (143) 1.95x   563 (57)    1093 (74)
    2       16   229 (-)          695 (62) 11.1x    681 (13)    1093 (28)
    2       32   226 (-)          617 (66)  9.3x   1264 (7)     1146 (-)

(-: PyTorch's two short runs' medians in the wrong order, a negative
cost: its times at two threads swing by more than a token's.) relattn
at two threads before the cut used 1.10 cores and read 23 GB/s of
weights a token; after, 1.58 cores and 62-70 GB/s.
At two threads relattn read 62-70 GB/s of weights a token against the
copy's 37-42 GB/s (read plus written), using 1.58 cores; one thread
24-28 GB/s. PyTorch at two threads ran slower than at one in that run
(its pool and OpenBLAS's contending). int8 PyTorch (quantize_dynamic,
oneDNN) is slow on one row here (two 512 x 2048 products in 0.33 ms
at one thread), so the int8 ratio is large. These runs are minutes apart on a busy machine: the ratios
within a row are what to read; relattn alone, base and new .so
interleaved in one process (12 rounds, medians, only about one core
free): two threads 1.22x the speed before on this decoder in float32,
1.04x int8; one thread unchanged (0.95-1.04x).

Then a step stopped calling OpenBLAS: a weight of one row is read whole
(src/gemm.c no longer cuts k in 256-step chunks for one tile of rows:
1 x 512 x 2048 from memory went from 27 to 50 GB/s), and the attention
over the cache, Shaw's table rows and a head of up to 8 rows are
src/vecmath.c's dot_rows and axpy_rows, read in place (one-row sgemm
calls packed the cache on every call). --runs 5, the default lengths, the
machine otherwise quiet:

    model thr    N   fp32 tok/s (torch)  ratio   int8 tok/s (torch)  GB/s
    tiny   1    16   8697 (2277)  3.82x   23748 (213)   44.2
    tiny   1   512   6538 (2106)  3.10x   10421 (219)   33.2
    big    1    16    410  (186)  2.20x     770  (75)   41.5
    big    1   512    368  (190)  1.94x     929  (68)   37.2
    big    2    16    374  (225)  1.67x    1496  (14)   37.9
    big    2   512    571   (51) 11.19x    1183  (17)   57.8

per token 512 / 16 new: big 1.11 (one thread), 0.66 (two). A rate at 16
tokens is a small difference of two noisy totals: PyTorch at two threads
gave 225 at 16 and 51 at 512 in this run, 47-55 at 16 in the two before;
at one thread 242 at 16 in another run minutes apart (big 1.37x). Before
these changes, one thread: 255-262 tokens a second on big. A pure stream
of the big model's products (8 layers, one row, src/gemm.c) takes 2.0 ms
(49-52 GB/s): at 512 new tokens the rest of a step (the cache's 10 MB on
average, norms, the head) is 0.7 ms.

Then the attention read each layer's cache once for all heads
(src/vecmath.c's dot_heads and axpy_heads: eight heads side by side over
a row, 256 value columns in registers over all rows) instead of once per
head, the same bits. --models big --runs 5, one thread, the machine
otherwise quiet (its numpy copy 42.8 GB/s):

    model thr    N   fp32 tok/s (torch)  ratio   int8 tok/s (torch)  GB/s
    big    1    16    396  (203)  1.94x    1778  (68)   40.0
    big    1   512    381  (196)  1.95x    1111  (66)   38.6

per token 512 / 16 new: 1.04 (1.17 in the run just before it, with the
previous build: 425 and 362 tokens a second against PyTorch's 190 and
189). Over 1,500 new tokens a token took 3.75 ms against 4.54 before
(interleaved in one process): there the cache (48 MB) no longer fits in
the last-level cache and each head's pass went to memory. The float32
ratio stays near 2x at one thread because both sides are bound by the
same 101 MB a token: relattn reads them at 38-43 GB/s, about this core's
measured read bandwidth (a 128 MB stream of one-row products: 40-42
GB/s), PyTorch at about 20.
"""
import argparse
import ctypes
import json
import math
import pathlib
import sqlite3
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import modelgen  # noqa: E402
import safetensors_py  # noqa: E402

PROMPT = "In the beginning God created the heaven and the earth. And the earth"
REPS = {1: 4, 16: 2}   # a short run's time: the mean of this many



def interleaved(sides, lengths, runs, reps):
    """Times each side (a function of N new tokens -> (seconds, tokens)) at
    each length, runs times, the sides in a rotated order within each run
    so that a slow spell falls on all; a length's time is the mean of
    reps.get(N, 1) calls. -> (median seconds per (side, N), CPU seconds
    per side, wall seconds per side, tokens per (side, N))."""
    for f in sides.values():                 # warm every side up
        f(4)
    times = {(side, n): [] for side in sides for n in lengths}
    cpu, wall = dict.fromkeys(sides, 0.0), dict.fromkeys(sides, 0.0)
    toks = {}
    order = list(sides)
    for r in range(runs):
        for n in lengths:
            for side in order[r % len(order):] + order[:r % len(order)]:
                c = time.process_time()
                got = [sides[side](n) for _ in range(reps.get(n, 1))]
                cpu[side] += time.process_time() - c
                wall[side] += sum(g[0] for g in got)
                times[side, n].append(sum(g[0] for g in got) / len(got))
                toks[side, n] = got[0][1]
    med = {key: statistics.median(v) for key, v in times.items()}
    return med, cpu, wall, toks

def connect(so):
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    db.load_extension(so)
    return db


def relattn_run(db, model, new):
    opts = json.dumps({"max_new_tokens": new, "eos_token_id": None})
    t = time.perf_counter()
    rows = db.execute("SELECT token FROM relattn_generate_tokens(?, ?, ?)",
                      (model, PROMPT, opts)).fetchall()
    return time.perf_counter() - t, [r[0] for r in rows]


def torch_model(blob, cfg, int8=False):
    """A Decoder class over the model's weights; int8: the layers' linear
    weights through quantize_dynamic, the head float32."""
    import torch
    tensors, _ = safetensors_py.read(blob)
    w = {k: torch.from_numpy(np.array(safetensors_py.to_array(*v), dtype=np.float32))
         for k, v in tensors.items()}
    d, H, L = cfg["d_model"], cfg["n_heads"], cfg["n_layers"]
    dh, k = d // H, cfg["position"]["clip"]
    eps = cfg["norm_eps"]
    F = torch.nn.functional
    names = [f"layers.{l}.{p}" for l in range(L)
             for p in ("attn.q", "attn.k", "attn.v", "attn.o", "ffn.1", "ffn.2")]

    def weight(name):
        p, s = name.rsplit(".", 1)
        return w[f"{p}.w{s}"], w[f"{p}.b{s}"]

    if int8:
        mods = torch.nn.ModuleDict()
        for name in names:
            wt, b = weight(name)
            lin = torch.nn.Linear(wt.shape[1], wt.shape[0])
            lin.weight.data.copy_(wt)
            lin.bias.data.copy_(b)
            mods[name.replace(".", "_")] = lin
        mods = torch.ao.quantization.quantize_dynamic(mods, {torch.nn.Linear},
                                                      dtype=torch.qint8)

        def lin(name, x):
            return mods[name.replace(".", "_")](x.view(1, -1)).view(-1)
    else:
        def lin(name, x):
            wt, b = weight(name)
            return torch.addmv(b, wt, x)

    class Decoder(torch.nn.Module):
        """The model with a key/value cache: one new token per call."""

        def __init__(self, max_len):
            super().__init__()
            self.kc = torch.zeros(L, H, max_len, dh)
            self.vc = torch.zeros(L, H, max_len, dh)
            self.n = 0

        def step(self, tok):
            x = w["tok_emb"][tok]                                  # (d,)
            i = self.n
            idx = (torch.arange(i + 1) - i).clamp(-k, k) + k       # rows of key j
            for l in range(L):
                p = f"layers.{l}."
                h = F.layer_norm(x, (d,), w[p + "ln1.weight"], w[p + "ln1.bias"], eps)
                q = lin(p + "attn.q", h).view(H, 1, dh)
                self.kc[l, :, i] = lin(p + "attn.k", h).view(H, dh)
                self.vc[l, :, i] = lin(p + "attn.v", h).view(H, dh)
                K, V = self.kc[l, :, :i + 1], self.vc[l, :, :i + 1]
                rk = w[p + "attn.rel_k"][idx]                      # (i+1, dh)
                rv = w[p + "attn.rel_v"][idx]
                e = (q @ K.transpose(1, 2) + q @ rk.T) / math.sqrt(dh)   # (H, 1, i+1)
                a = torch.softmax(e, -1)
                z = (a @ V + a @ rv).reshape(d)
                x = x + lin(p + "attn.o", z)
                h = F.layer_norm(x, (d,), w[p + "ln2.weight"], w[p + "ln2.bias"], eps)
                x = x + lin(p + "ffn.2", F.gelu(lin(p + "ffn.1", h)))
            x = F.layer_norm(x, (d,), w["ln_f.weight"], w["ln_f.bias"], eps)
            self.n += 1
            return torch.mv(w["tok_emb"], x)

    layer_weights = sum(weight(n)[0].numel() for n in names)
    return Decoder, layer_weights, w["tok_emb"].numel()


def torch_run(Decoder, bos, new):
    import torch
    ids = [bos] + list(PROMPT.encode())
    with torch.inference_mode():
        t = time.perf_counter()
        m = Decoder(len(ids) + new)
        for tok in ids:
            logits = m.step(tok)
        out = []
        for _ in range(new):
            tok = int(torch.argmax(logits))
            out.append(tok)
            if len(out) == new:
                break
            logits = m.step(tok)
        return time.perf_counter() - t, out


def copy_bandwidth():
    """Bytes read plus written per second by a 256 MB numpy copy (best of 5)."""
    a = np.ones(64 << 20, dtype=np.float32)
    b = np.empty_like(a)
    best = min(timed(lambda: np.copyto(b, a)) for _ in range(5))
    return 2 * a.nbytes / best


def timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def set_threads(db, blas, torch, n):
    db.execute(f"SELECT relattn_threads({n})")
    torch.set_num_threads(n)
    # Debian's PyTorch runs its matrix-vector products in the OpenBLAS relattn
    # loads, whose own thread count torch.set_num_threads leaves alone
    blas.openblas_set_num_threads(n)
    assert blas.openblas_get_num_threads() == n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("so")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--long", type=int, default=512)
    ap.add_argument("--models", default="tiny,big")
    args = ap.parse_args()
    import torch
    blas = ctypes.CDLL("libopenblas.so.0")
    rng = np.random.default_rng(7)
    tiny = (ROOT / "models" / "tiny.safetensors").read_bytes()
    db = connect(args.so)
    db.execute("SELECT relattn_import('tiny', ?)", (tiny,))
    tiny_cfg = json.loads(db.execute("SELECT config FROM relattn_model WHERE name = 'tiny'"
                                     ).fetchone()[0])
    big_cfg = modelgen.config(d_model=512, n_layers=8, n_heads=8, d_ff=2048, clip=16,
                              values=True)
    big = modelgen.safetensors(big_cfg, rng)
    db.execute("SELECT relattn_import('big', ?)", (big,))
    for name in ("tiny", "big"):
        db.execute("SELECT relattn_quantize(?, ?, 'int8')", (name, name + "_int8"))
    bw = copy_bandwidth()
    lengths = (1, 16, args.long)
    print(f"greedy, batch 1, a prompt of {len(PROMPT) + 1} tokens; medians of {args.runs} "
          "interleaved runs; a new token's cost is (T(N) - T(1)) / (N - 1); fp32: relattn "
          "and PyTorch float32, int8: relattn_quantize int8 and quantize_dynamic; "
          f"machine bandwidth (numpy copy, read + write) {bw / 1e9:.1f} GB/s")
    print(f"{'model':<10} {'thr':>3} {'N':>4} | {'fp32 tok/s':>10} {'torch':>7} {'ratio':>6} | "
          f"{'int8 tok/s':>10} {'torch':>7} {'ratio':>6} | GB/s of weights: fp32 relattn "
          "torch, int8 relattn torch | cores: relattn torch, int8 relattn torch")
    flat = {}
    models = []
    for name, blob, cfg in [("tiny", tiny, tiny_cfg), ("big", big, big_cfg)]:
        if name not in args.models.split(","):
            continue
        Dec32, n_layer, n_head = torch_model(blob, cfg)
        Dec8, _, _ = torch_model(blob, cfg, int8=True)
        models.append((name, cfg, Dec32, Dec8, {"fp32": 4 * (n_layer + n_head),
                                                "int8": n_layer + 4 * n_head}))
    for threads in [int(t) for t in args.threads.split(",")]:
        set_threads(db, blas, torch, threads)
        for name, cfg, Dec32, Dec8, weights in models:
            bos = cfg["tokenizer"]["bos"]
            sides = {"relattn": lambda n: relattn_run(db, name, n),
                     "torch": lambda n: torch_run(Dec32, bos, n),
                     "relattn8": lambda n: relattn_run(db, name + "_int8", n),
                     "torch8": lambda n: torch_run(Dec8, bos, n)}
            med, cpu, wall, toks = interleaved(sides, lengths, args.runs, REPS)
            cores = " ".join(f"{cpu[s] / wall[s]:.2f}" for s in sides)
            for n in lengths[1:]:
                per = {s: (med[s, n] - med[s, 1]) / (n - 1) for s in sides}
                flat[name, threads, n] = per["relattn"]
                gbs = " ".join(f"{weights['int8' if s.endswith('8') else 'fp32'] / per[s] / 1e9:.1f}"
                               for s in sides)
                agree = toks["relattn", n][:16] == toks["torch", n][:16]
                print(f"{name:<10} {threads:>3} {n:>4} | {1 / per['relattn']:>10.0f} "
                      f"{1 / per['torch']:>7.0f} {per['torch'] / per['relattn']:>5.2f}x | "
                      f"{1 / per['relattn8']:>10.0f} {1 / per['torch8']:>7.0f} "
                      f"{per['torch8'] / per['relattn8']:>5.2f}x | {gbs} | {cores}"
                      f"{'' if agree else '  (fp32 tokens differ)'}", flush=True)
    for name, cfg, *_ in models:
        for threads in [int(t) for t in args.threads.split(",")]:
            print(f"relattn per token, {name}, {threads} thread(s): {args.long} new / 16 new = "
                  f"{flat[name, threads, args.long] / flat[name, threads, 16]:.2f}")
    for name, cfg, *_, weights in models:
        print(f"weights read per new token, {name}: float32 {weights['fp32'] / 1e6:.1f} MB, "
              f"int8 {weights['int8'] / 1e6:.1f} MB; cache per token (one beam) "
              f"{2 * cfg['n_layers'] * cfg['d_model'] * 4} bytes")


if __name__ == "__main__":
    main()
