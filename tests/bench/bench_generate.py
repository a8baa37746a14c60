"""Generation speed: relattn_generate (greedy, batch 1, its key/value cache)
against the same decoder written in PyTorch with a key/value cache, same
threads; and relattn's cost per new token at 16 and at 512 new tokens (the
cache keeps it flat: a token costs O(n) attention, not a rerun of the
prefix).

    python3 tests/bench/bench_generate.py relattn.so [--threads 1]

Models: the bundled byte model (d_model 160, 4 layers, Shaw's clipped
tables with values) and a random decoder of the same kind at d_model 512,
8 layers, 8 heads (tests/modelgen.py). The PyTorch module is written here
from the model's definition (docs/reference.md, The forward pass): pre-norm
layers, Shaw et al. 2018's relative keys and values clipped at k, GELU,
tied LM head; torch.inference_mode, the cache preallocated, the relative
rows gathered once per step and shared by the layers. Both decode the same
prompt greedily for N tokens (eos ignored); the tokens must agree (float32
on both sides, near ties aside: the first 16 are checked). Timings are the
best of 5 runs."""
import argparse
import json
import math
import pathlib
import sqlite3
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import modelgen  # noqa: E402
import safetensors_py  # noqa: E402

PROMPT = "In the beginning God created the heaven and the earth. And the earth"


def connect(so, threads):
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    db.load_extension(so)
    db.execute(f"SELECT relattn_threads({threads})")
    return db


def relattn_run(db, model, new):
    opts = json.dumps({"max_new_tokens": new, "eos_token_id": None})
    t = time.perf_counter()
    rows = db.execute("SELECT token FROM relattn_generate_tokens(?, ?, ?)",
                      (model, PROMPT, opts)).fetchall()
    return time.perf_counter() - t, [r[0] for r in rows]


def torch_model(blob, cfg):
    import torch
    tensors, _ = safetensors_py.read(blob)
    w = {k: torch.from_numpy(np.array(safetensors_py.to_array(*v), dtype=np.float32))
         for k, v in tensors.items()}
    d, H, L = cfg["d_model"], cfg["n_heads"], cfg["n_layers"]
    dh, k = d // H, cfg["position"]["clip"]
    eps = cfg["norm_eps"]
    F = torch.nn.functional

    class Decoder(torch.nn.Module):
        """The model with a key/value cache: one new token per call."""

        def __init__(self, max_len):
            super().__init__()
            self.kc = torch.zeros(L, H, max_len, dh)
            self.vc = torch.zeros(L, H, max_len, dh)
            self.n = 0

        def step(self, tok):
            # one row: each product a matrix-vector one (torch.addmv, BLAS's
            # gemv), the tuned batch-1 path: F.linear on a (1, d) row takes
            # about 4 times as long at these shapes
            x = w["tok_emb"][tok]                                  # (d,)
            i = self.n
            idx = (torch.arange(i + 1) - i).clamp(-k, k) + k       # rows of key j
            for l in range(L):
                p = f"layers.{l}."
                h = F.layer_norm(x, (d,), w[p + "ln1.weight"], w[p + "ln1.bias"], eps)
                q = torch.addmv(w[p + "attn.bq"], w[p + "attn.wq"], h).view(H, 1, dh)
                kk = torch.addmv(w[p + "attn.bk"], w[p + "attn.wk"], h).view(H, dh)
                vv = torch.addmv(w[p + "attn.bv"], w[p + "attn.wv"], h).view(H, dh)
                self.kc[l, :, i] = kk
                self.vc[l, :, i] = vv
                K, V = self.kc[l, :, :i + 1], self.vc[l, :, :i + 1]
                rk = w[p + "attn.rel_k"][idx]                      # (i+1, dh)
                rv = w[p + "attn.rel_v"][idx]
                e = (q @ K.transpose(1, 2) + q @ rk.T) / math.sqrt(dh)   # (H, 1, i+1)
                a = torch.softmax(e, -1)
                z = (a @ V + a @ rv).reshape(d)
                x = x + torch.addmv(w[p + "attn.bo"], w[p + "attn.wo"], z)
                h = F.layer_norm(x, (d,), w[p + "ln2.weight"], w[p + "ln2.bias"], eps)
                f = F.gelu(torch.addmv(w[p + "ffn.b1"], w[p + "ffn.w1"], h))
                x = x + torch.addmv(w[p + "ffn.b2"], w[p + "ffn.w2"], f)
            x = F.layer_norm(x, (d,), w["ln_f.weight"], w["ln_f.bias"], eps)
            self.n += 1
            return torch.mv(w["tok_emb"], x)

    return Decoder


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


def best(f, runs=5):
    """The fastest of runs (the machine is shared: the others wait on it)."""
    got = [f() for _ in range(runs)]
    return min(g[0] for g in got), got[0][1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("so")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import ctypes
    import torch
    torch.set_num_threads(args.threads)
    # Debian's PyTorch runs its matrix-vector products in the OpenBLAS relattn
    # loads, whose own thread count torch.set_num_threads leaves alone
    blas = ctypes.CDLL("libopenblas.so.0")
    blas.openblas_set_num_threads(args.threads)
    rng = np.random.default_rng(7)
    tiny = (ROOT / "models" / "tiny.safetensors").read_bytes()
    db = connect(args.so, args.threads)
    db.execute("SELECT relattn_import('tiny', ?)", (tiny,))
    tiny_cfg = json.loads(db.execute("SELECT config FROM relattn_model WHERE name = 'tiny'"
                                     ).fetchone()[0])
    big_cfg = modelgen.config(d_model=512, n_layers=8, n_heads=8, d_ff=2048, clip=16,
                              values=True)
    big = modelgen.safetensors(big_cfg, rng)
    db.execute("SELECT relattn_import('big', ?)", (big,))
    print(f"threads {args.threads}; greedy, batch 1, the best of 5 runs; a new token's "
          "cost is (T(N) - T(1)) / (N - 1), T(N) the time to N new tokens after a prompt "
          f"of {len(PROMPT) + 1} tokens (the prompt's own cost left out on both sides)")
    print(f"{'model':<26} {'N':>4} {'relattn ms/tok':>15} {'torch ms/tok':>13} "
          f"{'relattn tok/s':>14} {'torch tok/s':>12} {'ratio':>6}")
    flat = {}
    for name, blob, cfg in [("tiny", tiny, tiny_cfg), ("big", big, big_cfg)]:
        Decoder = torch_model(blob, cfg)
        bos = cfg["tokenizer"]["bos"]
        r1, _ = best(lambda: relattn_run(db, name, 1))
        t1, _ = best(lambda: torch_run(Decoder, bos, 1))
        for new in (16, 512):
            tr, rt = best(lambda: relattn_run(db, name, new))
            tt, tt_tok = best(lambda: torch_run(Decoder, bos, new))
            a, b = (tr - r1) / (new - 1), (tt - t1) / (new - 1)
            flat[name, new] = a
            agree = rt[:16] == tt_tok[:16]
            label = f"{name} (d {cfg['d_model']}, {cfg['n_layers']} layers)"
            print(f"{label:<26} {new:>4} {1e3 * a:>15.3f} {1e3 * b:>13.3f} {1 / a:>14.0f} "
                  f"{1 / b:>12.0f} {b / a:>5.1f}x{'' if agree else '  (tokens differ)'}")
    for name in ("tiny", "big"):
        print(f"relattn per token, {name}: 512 new / 16 new = "
              f"{flat[name, 512] / flat[name, 16]:.2f}")
    cache = db.execute("SELECT 2 * json_extract(config, '$.n_layers') * "
                       "json_extract(config, '$.d_model') * 4 FROM relattn_model "
                       "WHERE name = 'tiny'").fetchone()[0]
    print(f"\ncache per token (one beam): tiny {cache} bytes, big "
          f"{2 * big_cfg['n_layers'] * big_cfg['d_model'] * 4} bytes")


if __name__ == "__main__":
    main()
