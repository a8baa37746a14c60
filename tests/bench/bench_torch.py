"""relattn_attention (through SQL) against the same relative attention in
PyTorch (Debian's python3-torch), with the same thread count (DESIGN §8).

The torch version is the usual efficient one: scores as an (H, n, n) tensor,
the key term gathered from Q rel_k^T (H, n, 2k+1), the value term as
bucketed weights (scatter_add) times rel_v; no (n, n, d) tensor. Both run on
the same float32 inputs, interleaved, medians of wall time. The first call's
result is checked against torch's (relative error).

    RELATTN_SO=./relattn.so /usr/bin/python3 tests/bench/bench_torch.py [--quick]
"""
import os
import sqlite3
import statistics
import sys
import time

import numpy as np
import torch

SO = os.environ.get("RELATTN_SO", os.path.join(os.path.dirname(__file__), "..", "..", "relattn.so"))
HEADS, DHEAD = 8, 64


def torch_relative(q, k, v, rk, rv, clip, causal):
    n = q.shape[0]
    Q, K, V = (x.view(n, HEADS, DHEAD).transpose(0, 1) for x in (q, k, v))  # (H, n, d)
    pos = torch.arange(n)
    idx = ((pos[None, :] - pos[:, None]).clamp(-clip, clip) + clip).expand(HEADS, n, n)
    scores = torch.matmul(Q, K.transpose(1, 2))
    scores += torch.gather(torch.matmul(Q, rk.T), 2, idx)
    scores *= DHEAD ** -0.5
    if causal:
        scores.masked_fill_(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    w = torch.softmax(scores, dim=-1)
    z = torch.matmul(w, V)
    buckets = torch.zeros(HEADS, n, 2 * clip + 1).scatter_add_(2, idx, w)
    z += torch.matmul(buckets, rv)
    return z.transpose(0, 1).reshape(n, HEADS * DHEAD)


def main():
    quick = "--quick" in sys.argv
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    db.load_extension(os.path.abspath(SO))
    db.execute("SELECT relattn_threads(?)", (threads,))
    blas = db.execute("SELECT relattn_debug()").fetchone()[0]
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; relattn: "
          + "; ".join(l for l in blas.splitlines() if l.startswith(("blas", "simd", "threads"))))
    print("# medians of interleaved wall times; ratio < 1: relattn is faster")
    print(f"{'n':>6} {'k':>3} {'causal':>6} | {'relattn ms':>10} {'torch ms':>10} | "
          f"{'relattn/torch':>13} | {'rel.err':>8}")
    configs = [(1024, 16, False), (1024, 64, True), (4096, 16, False), (4096, 64, False),
               (4096, 64, True)]
    if quick:
        configs = configs[:2]
    rng = np.random.default_rng(1)
    for n, clip, causal in configs:
        q, k, v = (rng.standard_normal((n, HEADS * DHEAD), dtype=np.float32) for _ in range(3))
        rk, rv = (rng.standard_normal((2 * clip + 1, DHEAD), dtype=np.float32) for _ in range(2))
        tq, tk, tv, trk, trv = (torch.from_numpy(x) for x in (q, k, v, rk, rv))
        args = (q.tobytes(), k.tobytes(), v.tobytes(), rk.tobytes(), rv.tobytes(),
                f'{{"heads":{HEADS},"d_head":{DHEAD},"causal":{"true" if causal else "false"}}}')
        sql = "SELECT relattn_attention(?, ?, ?, ?, ?, ?)"
        ours = np.frombuffer(db.execute(sql, args).fetchone()[0], dtype=np.float32)
        with torch.no_grad():
            ref = torch_relative(tq, tk, tv, trk, trv, clip, causal).numpy().ravel()
        err = np.linalg.norm(ours.astype(np.float64) - ref) / np.linalg.norm(ref.astype(np.float64))
        rounds = 5 if n <= 1024 else 3
        t_ours, t_torch = [], []
        for r in range(rounds):
            for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                t0 = time.perf_counter()
                if which == 0:
                    db.execute(sql, args).fetchone()
                    t_ours.append(time.perf_counter() - t0)
                else:
                    with torch.no_grad():
                        torch_relative(tq, tk, tv, trk, trv, clip, causal)
                    t_torch.append(time.perf_counter() - t0)
        a, b = statistics.median(t_ours), statistics.median(t_torch)
        print(f"{n:>6} {clip:>3} {'yes' if causal else 'no':>6} | {a * 1e3:>10.1f} {b * 1e3:>10.1f} | "
              f"{a / b:>13.3f} | {err:>8.1e}", flush=True)


if __name__ == "__main__":
    main()
