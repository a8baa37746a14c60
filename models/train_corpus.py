#!/usr/bin/python3
"""Trains a byte-level relattn model on your own text: any table or query of a SQLite database.

    /usr/bin/python3 models/train_corpus.py --db corpus.db \\
        --query "SELECT body FROM docs WHERE lang = 'en'" --into corpus.db --name mine

Each row the query returns (its first column, TEXT or BLOB; NULL and empty rows are skipped) is one
unit of text. A fraction of the rows (--heldout, drawn with --seed) is held out: training never
sees them, nor any held-out row whose exact text is also a training row. The model is a decoder
with the byte tokenizer (ids 0-255, bos 256, eos 257, pad 258), any of the native position schemes
(--position: shaw, none, absolute, t5, alibi, rope, xl), and every option of the native model's
config on the command line. Its forward pass is the native one, so the extension computes exactly
what was trained.

While it trains it prints progress with an ETA and, every --eval-every steps, the held-out bits per
byte on a fixed sample of the held-out rows. At the end it scores every held-out row whole, as
relattn_score does (bos, then every byte given the bytes before it), prints the curve as a table
and draws it as an SVG, and writes:

    OUT                 the weights (safetensors, --dtype F32 or F16) with the config in
                        __metadata__["relattn.config"]; the config's "training" object holds the
                        run's facts (query, rows, bytes, steps, time, held-out bits/byte, curve)
    OUT.curve.svg       the held-out curve
    OUT.ckpt            the checkpoint, every --checkpoint-minutes and on Ctrl-C; running the
                        same command again resumes from it (deleted when the run completes)

With --into DB the model is imported into that database as --name (relattn_import, through the
extension in this checkout, or --so), so `SELECT json_extract(config, '$.training') FROM
relattn_model WHERE name = 'mine'` shows the facts; --heldout-table also stores the held-out rows
there, for scoring them in SQL. Needs python3-torch (make deps-model).
"""
import argparse
import json
import math
import os
import pathlib
import random
import signal
import sqlite3
import struct
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
BOS, EOS, PAD, VOCAB = 256, 257, 258, 259
POSITIONS = ("shaw", "none", "absolute", "t5", "alibi", "rope", "xl")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = ap.add_argument_group("data")
    d.add_argument("--db", required=True, help="the SQLite database to read")
    d.add_argument("--query", required=True, help="SQL whose first column is the text, one unit per row")
    d.add_argument("--heldout", type=float, default=0.05, help="fraction of the rows held out")
    m = ap.add_argument_group("model (the config keys of the native model)")
    m.add_argument("--layers", type=int, default=4, help="n_layers")
    m.add_argument("--d-model", type=int, default=160, help="d_model, the width")
    m.add_argument("--heads", type=int, default=4, help="n_heads (d_model must be divisible by it)")
    m.add_argument("--d-ff", type=int, default=None, help="d_ff (default 4 * d_model)")
    m.add_argument("--position", choices=POSITIONS, default="shaw", help="position.type, the position scheme")
    m.add_argument("--clip", type=int, default=None,
                   help="position.clip (shaw, xl; default 16): relative distances past it share a row")
    m.add_argument("--values", action=argparse.BooleanOptionalAction, default=None,
                   help="position.values (shaw; default values): a relative value table (rel_v) as well as rel_k")
    m.add_argument("--per-head", action=argparse.BooleanOptionalAction, default=None,
                   help="position.per_head (shaw; default shared): one relative table per head")
    m.add_argument("--max-len", type=int, default=None,
                   help="position.max_len (absolute; default --seq-len): rows of pos_emb, the longest input")
    m.add_argument("--num-buckets", type=int, default=None, help="position.num_buckets (t5; default 32)")
    m.add_argument("--max-distance", type=int, default=None, help="position.max_distance (t5; default 128)")
    m.add_argument("--rotary", choices=("half", "interleaved"), default=None,
                   help="position.rotary (rope; default half)")
    m.add_argument("--rotary-dim", type=int, default=None, help="position.rotary_dim (rope; default d_model/heads)")
    m.add_argument("--base", type=float, default=None, help="position.base (rope; default 10000)")
    m.add_argument("--norm", choices=("pre", "post"), default="pre")
    m.add_argument("--norm-eps", type=float, default=1e-5)
    m.add_argument("--activation", choices=("gelu", "relu"), default="gelu")
    m.add_argument("--tie", action=argparse.BooleanOptionalAction, default=True,
                   help="tie_embeddings: the LM head is tok_emb")
    t = ap.add_argument_group("training")
    t.add_argument("--steps", type=int, default=2000)
    t.add_argument("--minutes", type=float, default=None,
                   help="instead of --steps: set the step count after 20 steps so the run takes about this long")
    t.add_argument("--seq-len", type=int, default=256, help="positions per example (rows are cut at spaces)")
    t.add_argument("--batch-tokens", type=int, default=4096)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--eval-every", type=int, default=None, help="steps between held-out points (default steps/10)")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--checkpoint-minutes", type=float, default=3.0)
    t.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    o = ap.add_argument_group("output")
    o.add_argument("--out", default=None, help="the safetensors file (default NAME.safetensors)")
    o.add_argument("--name", default="mine", help="the model's name in --into")
    o.add_argument("--dtype", choices=("F32", "F16"), default="F32")
    o.add_argument("--into", default=None, help="import the model into this database")
    o.add_argument("--heldout-table", default=None, help="with --into: store the held-out rows in this table")
    o.add_argument("--so", default=None, help="the extension to import with (default: this checkout's)")
    o.add_argument("--log-every", type=int, default=None, help="steps between progress lines (default: ~every 10 s)")
    args = ap.parse_args(argv)
    if args.d_ff is None:
        args.d_ff = 4 * args.d_model
    if args.d_model % args.heads:
        ap.error(f"--d-model {args.d_model} is not divisible by --heads {args.heads}")
    if not 0 < args.heldout < 1:
        ap.error("--heldout must be between 0 and 1")
    if args.heldout_table and not args.into:
        ap.error("--heldout-table needs --into")
    takes = {"clip": ("shaw", "xl"), "values": ("shaw",), "per_head": ("shaw",), "max_len": ("absolute",),
             "num_buckets": ("t5",), "max_distance": ("t5",), "rotary": ("rope",), "rotary_dim": ("rope",),
             "base": ("rope",)}
    for key, types in takes.items():
        if getattr(args, key) is not None and args.position not in types:
            opt = "--" + key.replace("_", "-")
            ap.error(f"{opt} is an option of --position {' and '.join(types)}, not {args.position}")
    defaults = {"shaw": {"clip": 16, "values": True, "per_head": False}, "xl": {"clip": 16},
                "absolute": {"max_len": args.seq_len}, "t5": {"num_buckets": 32, "max_distance": 128},
                "rope": {"rotary": "half", "base": 10000.0}}
    for key, v in defaults.get(args.position, {}).items():
        if getattr(args, key) is None:
            setattr(args, key, v)
    dh = args.d_model // args.heads
    if args.clip is not None and args.clip < 0:
        ap.error(f"--clip must be at least 0, not {args.clip}")
    if args.position == "absolute" and args.max_len < args.seq_len:
        ap.error(f"--max-len {args.max_len} is shorter than --seq-len {args.seq_len}")
    if args.position == "t5" and (args.num_buckets < 4 or args.max_distance <= args.num_buckets // 2):
        ap.error(f"--num-buckets must be at least 4 and --max-distance over num_buckets/2, "
                 f"not {args.num_buckets} and {args.max_distance}")
    if args.position == "rope" and args.rotary_dim is not None and not (
            2 <= args.rotary_dim <= dh and args.rotary_dim % 2 == 0):
        ap.error(f"--rotary-dim must be even, at least 2 and at most d_model/heads = {dh}, not {args.rotary_dim}")
    if args.position == "rope" and not args.base > 1:
        ap.error(f"--base must be over 1, not {args.base}")
    if args.position == "xl" and args.d_model % 2:
        ap.error(f"--position xl needs an even --d-model, not {args.d_model}")
    if args.out is None:
        args.out = f"{args.name}.safetensors"
    return args


def position_config(args):
    """The config's position object: the type and the keys of that type (docs/reference.md)."""
    keys = {"shaw": ("clip", "values", "per_head"), "xl": ("clip",), "absolute": ("max_len",),
            "t5": ("num_buckets", "max_distance"), "rope": ("rotary", "rotary_dim", "base")}
    pos = {"type": args.position}
    for k in keys.get(args.position, ()):
        if getattr(args, k) is not None:
            pos[k] = getattr(args, k)
    return pos


def describe_position(pos):
    return ", ".join([f"position {pos['type']}"] + [f"{k} {v}" for k, v in pos.items() if k != "type"])


def model_config(args):
    return {
        "arch": "decoder", "vocab_size": VOCAB, "d_model": args.d_model, "n_layers": args.layers,
        "n_heads": args.heads, "d_ff": args.d_ff, "norm": args.norm, "norm_eps": args.norm_eps,
        "activation": args.activation, "tie_embeddings": args.tie,
        "position": position_config(args),
        "tokenizer": {"type": "bytes", "bos": BOS, "eos": EOS, "pad": PAD},
    }


# ---------------------------------------------------------------------------------------------
# Data: rows of a query, a held-out split by whole rows


def read_rows(db, query):
    """The query's first column as bytes, one per row; NULL and empty values are skipped."""
    con = sqlite3.connect(f"file:{pathlib.Path(db).resolve()}?mode=ro", uri=True)
    con.text_factory = bytes
    try:
        rows = []
        for (v, *_) in con.execute(query):
            if v is None:
                continue
            b = v if isinstance(v, bytes) else str(v).encode()
            if b:
                rows.append(b)
        return rows
    finally:
        con.close()


def split_rows(rows, frac, seed):
    """(train, heldout): a seeded sample of whole rows is held out; held-out rows whose text also
    occurs in training are dropped, so training never sees held-out text."""
    idx = list(range(len(rows)))
    held = set(random.Random(seed).sample(idx, max(1, round(frac * len(rows)))))
    train = [rows[i] for i in idx if i not in held]
    seen = set(train)
    heldout = [rows[i] for i in sorted(held) if rows[i] not in seen]
    return train, heldout


def pieces(b, max_bytes):
    """b cut at spaces into pieces of at most max_bytes; [(piece, is_last)]."""
    out, start = [], 0
    while len(b) - start > max_bytes:
        cut = b.rfind(b" ", start + 1, start + max_bytes)
        cut = start + max_bytes if cut <= start else cut + 1
        out.append(b[start:cut])
        start = cut
    out.append(b[start:])
    return [(p, i == len(out) - 1) for i, p in enumerate(out)]


def examples(rows, seq_len):
    """Training examples: input bos + bytes, targets the bytes and then eos after a row's last
    piece (pad elsewhere, which the loss ignores)."""
    return [(p, last) for r in rows for p, last in pieces(r, seq_len - 1)]


def epoch_order(exs, tokens_per_batch, rng):
    """One epoch of batches (lists of example indexes): shuffled, sorted by length within pools so
    batches pad little, then the batches shuffled."""
    order = rng.permutation(len(exs))
    pool = max(1, 64 * tokens_per_batch // 160)
    out = []
    for p in range(0, len(order), pool):
        idx = sorted(order[p:p + pool].tolist(), key=lambda i: len(exs[i][0]))
        cur = []
        for i in idx:
            if cur and (len(exs[i][0]) + 1) * (len(cur) + 1) > tokens_per_batch:
                out.append(cur)
                cur = []
            cur.append(i)
        if cur:
            out.append(cur)
    rng.shuffle(out)
    return out


def tensors_of(torch, exs, idx):
    n = max(len(exs[i][0]) for i in idx) + 1
    x = torch.full((len(idx), n), PAD, dtype=torch.long)
    y = torch.full((len(idx), n), PAD, dtype=torch.long)
    for r, i in enumerate(idx):
        b, last = exs[i]
        ids = torch.tensor(list(b), dtype=torch.long)
        x[r, 0] = BOS
        x[r, 1:len(b) + 1] = ids
        y[r, :len(b)] = ids
        y[r, len(b)] = EOS if last else PAD
    return x, y


# ---------------------------------------------------------------------------------------------
# The model: the native model's forward pass in PyTorch, for every config option. Parameter names
# are the tensor names relattn_import expects.


def t5_buckets(np, n, num_buckets, max_distance):
    """T5's bucket of each (query i, key j) of a causal decoder: unidirectional, only j <= i has one
    of its own (HF modeling_t5.py, T5Attention._relative_position_bucket; the log in float32, as
    there and in src/schemes.c)."""
    delta = np.arange(n)[None, :] - np.arange(n)[:, None]
    dist = -np.minimum(delta, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):
        x = (np.log(dist.astype(np.float32) / np.float32(max_exact)) / np.float32(math.log(max_distance / max_exact))
             * np.float32(num_buckets - max_exact))
    large = np.minimum(max_exact + np.where(dist < max_exact, 0, x).astype(np.int64), num_buckets - 1)
    return np.where(dist < max_exact, dist, large)


def alibi_slopes(heads):
    """BLOOM's build_alibi_tensor slopes, as src/schemes.c computes them: for the largest power of
    two c <= heads, base^1 .. base^c with base = 2^(-8/c); the heads past c take the odd powers of
    2^(-4/c). Float32."""
    c = 1
    while c * 2 <= heads:
        c *= 2
    base = 2.0 ** -(2.0 ** -(math.log2(c) - 3.0))
    out = [float(_f32(_f32(base) ** i)) for i in range(1, c + 1)]
    if c != heads:
        extra = 2.0 ** -(2.0 ** -(math.log2(2.0 * c) - 3.0))
        out += [float(_f32(_f32(extra) ** (2 * i + 1))) for i in range(min(heads - c, c))]
    return out


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def xl_sinusoid(torch, c, d_model):
    """Transformer-XL's PositionalEmbedding (mem_transformer.py) of -delta for delta = -c .. c:
    row delta + c is [sin(-delta f_i), cos(-delta f_i)], f_i = 10000^(-2i/d_model); float64 angles."""
    pos = -torch.arange(-c, c + 1, dtype=torch.float64)
    inv = 1.0 / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    a = pos[:, None] * inv[None, :]
    return torch.cat([torch.sin(a), torch.cos(a)], -1).float()


def build_model(torch, cfg):
    """The native model's forward pass (docs/reference.md, "The forward pass" and "Position
    schemes"; src/schemes.c) for every position type the script trains. For head h, query i, key j,
    delta = j - i:

        e_ij = s ((q^_i + u_h) . k^_j + (q_i + w_h) . R[b]) + beta_h[b] - m_h |delta|   (causal)
        z_i  = sum_j softmax_j(e_ij) (v_j + Rv[b])

    shaw: R = rel_k, Rv = rel_v, b = clip(delta, -k, k) + k; t5: beta = rel_bias (shared by the
    layers), b its causal bucket, s = 1 (unscaled); alibi: BLOOM's slopes m_h; rope: q^, k^ rotated
    by position; xl: u, w and R = W_r sinusoid(-delta), b = clip(delta, -c, c) + c; absolute:
    pos_emb added to the input, plain attention; none: plain attention. s = 1/sqrt(dh) but for t5."""
    import numpy as np
    nn, F = torch.nn, torch.nn.functional
    pos = cfg["position"]
    kind = pos["type"]
    d, h = cfg["d_model"], cfg["n_heads"]
    dh = d // h
    clip = pos.get("clip", 0)
    per_head, values = pos.get("per_head", False), pos.get("values", False)
    act = F.gelu if cfg["activation"] == "gelu" else F.relu  # gelu: the erf form
    eps = cfg["norm_eps"]
    scale = 1.0 if kind == "t5" else 1.0 / math.sqrt(dh)

    class LayerNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))
            self.bias = nn.Parameter(torch.zeros(d))

        def forward(self, x):
            return F.layer_norm(x, (d,), self.weight, self.bias, eps)

    def rotate(x, cos, sin):
        """RoPE over the first rd dims of x [b, h, n, dh]: GPT-NeoX's halves (t, t + rd/2) or
        RoFormer's / GPT-J's interleaved pairs (2t, 2t+1), pair t of position p turned by
        p base^(-2t/rd)."""
        rd = 2 * cos.shape[-1]
        xr, rest = x[..., :rd], x[..., rd:]
        if pos["rotary"] == "half":
            x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
            out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
        else:
            x1, x2 = xr[..., 0::2], xr[..., 1::2]
            out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)
        return torch.cat([out, rest], -1)

    class Attention(nn.Module):
        """Shaw, Uszkoreit & Vaswani 2018, eq. 3-4; T5 (Raffel et al. 2020); ALiBi (Press et al.
        2022, BLOOM's slopes); RoPE (Su et al. 2021); Transformer-XL (Dai et al. 2019, sec. 3.3):
        the terms above, causal."""

        def __init__(self):
            super().__init__()
            for w in ("wq", "wk", "wv", "wo"):
                setattr(self, w, nn.Parameter(torch.empty(d, d)))
            for b in ("bq", "bk", "bv", "bo"):
                setattr(self, b, nn.Parameter(torch.zeros(d)))
            if kind == "shaw":
                shape = (h, 2 * clip + 1, dh) if per_head else (2 * clip + 1, dh)
                self.rel_k = nn.Parameter(torch.empty(*shape))
                if values:
                    self.rel_v = nn.Parameter(torch.empty(*shape))
            if kind == "xl":
                self.wr = nn.Parameter(torch.empty(d, d))
                self.u = nn.Parameter(torch.empty(h, dh))
                self.w = nn.Parameter(torch.empty(h, dh))

        def forward(self, x, ctx):
            b, n, _ = x.shape
            heads = lambda t: t.view(b, n, h, dh).transpose(1, 2)  # [b, h, n, dh]
            q = heads(F.linear(x, self.wq, self.bq))
            k = heads(F.linear(x, self.wk, self.bk))
            v = heads(F.linear(x, self.wv, self.bv))
            if kind == "rope":
                q, k = rotate(q, *ctx["rope"]), rotate(k, *ctx["rope"])
            if kind == "xl":
                e = (q + self.u[:, None, :]) @ k.transpose(-1, -2)
                c, pe = ctx["xl"]  # R[t] = W_r sinusoid(c - t), per head: [h, 2c+1, dh]
                R = F.linear(pe, self.wr).view(2 * c + 1, h, dh).transpose(0, 1)
                rel = (q + self.w[:, None, :]) @ R.transpose(-1, -2)
                e = e + torch.gather(rel, -1, ctx["index"].expand(b, h, n, n))
            else:
                e = q @ k.transpose(-1, -2)
            if kind == "shaw":
                r = ctx["index"].expand(b, h, n, n)
                e = e + torch.gather(q @ self.rel_k.transpose(-1, -2), -1, r)
            e = e * scale
            if "bias" in ctx:  # t5's bucket bias, alibi's -m_h |delta|: [h, n, n]
                e = e + ctx["bias"]
            e = e.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
            a = torch.softmax(e, dim=-1)
            z = a @ v
            if kind == "shaw" and values:
                r = ctx["index"].expand(b, h, n, n)
                z = z + torch.zeros(b, h, n, 2 * clip + 1, dtype=a.dtype).scatter_add_(-1, r, a) @ self.rel_v
            return F.linear(z.transpose(1, 2).reshape(b, n, d), self.wo, self.bo)

    class FFN(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Parameter(torch.empty(cfg["d_ff"], d))
            self.b1 = nn.Parameter(torch.zeros(cfg["d_ff"]))
            self.w2 = nn.Parameter(torch.empty(d, cfg["d_ff"]))
            self.b2 = nn.Parameter(torch.zeros(d))

        def forward(self, x):
            return F.linear(act(F.linear(x, self.w1, self.b1)), self.w2, self.b2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2, self.ffn = LayerNorm(), Attention(), LayerNorm(), FFN()

        def forward(self, x, ctx):
            if cfg["norm"] == "pre":
                x = x + self.attn(self.ln1(x), ctx)
                return x + self.ffn(self.ln2(x))
            x = self.ln1(x + self.attn(x, ctx))
            return self.ln2(x + self.ffn(x))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb = nn.Parameter(torch.empty(VOCAB, d))
            if kind == "absolute":
                self.pos_emb = nn.Parameter(torch.empty(pos["max_len"], d))
            self.layers = nn.ModuleList(Block() for _ in range(cfg["n_layers"]))
            if cfg["norm"] == "pre":
                self.ln_f = LayerNorm()
            if not cfg["tie_embeddings"]:
                self.lm_head = nn.Parameter(torch.empty(VOCAB, d))
            if kind == "t5":
                self.rel_bias = nn.Parameter(torch.empty(h, pos["num_buckets"]))

        @torch.no_grad()
        def init_weights(self, gen):
            depth = math.sqrt(2 * cfg["n_layers"])
            for name, p in self.named_parameters():
                if name.endswith(("wo", "w2")):  # residual outputs, scaled with depth (GPT-2)
                    p.normal_(0.0, 0.02 / depth, generator=gen)
                elif p.dim() >= 2:
                    p.normal_(0.0, 0.02, generator=gen)

        def terms(self, n):
            """What every layer shares for an input of n positions."""
            ctx = {}
            delta = torch.arange(n)[None, :] - torch.arange(n)[:, None]
            if kind == "shaw":
                ctx["index"] = delta.clamp(-clip, clip) + clip
            if kind == "xl":  # only the rows an input of n positions reaches
                c = min(clip, n - 1)
                ctx["index"] = delta.clamp(-c, c) + c
                ctx["xl"] = (c, xl_sinusoid(torch, c, d))
            if kind == "t5":
                b = torch.from_numpy(t5_buckets(np, n, pos["num_buckets"], pos["max_distance"]))
                ctx["bias"] = self.rel_bias[:, b]
            if kind == "alibi":
                m = torch.tensor(alibi_slopes(h), dtype=torch.float32)
                ctx["bias"] = -m[:, None, None] * delta.abs().float()
            if kind == "rope":
                rd = pos.get("rotary_dim") or dh
                inv = pos["base"] ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
                a = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
                ctx["rope"] = (torch.cos(a).float(), torch.sin(a).float())
            return ctx

        def forward(self, ids):
            n = ids.shape[1]
            x = self.tok_emb[ids]
            if kind == "absolute":
                if n > pos["max_len"]:
                    raise ValueError(f"an input of {n} positions is longer than max_len {pos['max_len']}")
                x = x + self.pos_emb[:n]
            ctx = self.terms(n)
            for layer in self.layers:
                x = layer(x, ctx)
            if cfg["norm"] == "pre":
                x = self.ln_f(x)
            return F.linear(x, self.tok_emb if cfg["tie_embeddings"] else self.lm_head)

    return Decoder()


# ---------------------------------------------------------------------------------------------
# Evaluation


def monitor_bits(torch, model, exs, batch_tokens=8192):
    """Bits per byte over held-out pieces (eos targets left out), for the curve."""
    F = torch.nn.functional
    nats, nbytes = 0.0, 0
    order = sorted(range(len(exs)), key=lambda i: len(exs[i][0]))
    batch = []
    with torch.no_grad():
        for j, i in enumerate(order + [None]):
            if i is not None and (not batch or (len(exs[i][0]) + 1) * (len(batch) + 1) <= batch_tokens):
                batch.append(i)
                continue
            if batch:
                x, y = tensors_of(torch, exs, batch)
                y = torch.where(y == EOS, PAD, y)
                lp = torch.log_softmax(model(x), dim=-1)
                mask = y != PAD
                nats -= lp.gather(-1, y.clamp(max=VOCAB - 1)[..., None])[..., 0][mask].sum().item()
                nbytes += int(mask.sum())
            batch = [i] if i is not None else []
    return nats / math.log(2) / max(1, nbytes)


def heldout_bits(torch, model, rows, max_bytes=4096):
    """Bits per byte of the held-out rows scored as relattn_score scores them: bos, then every byte
    given bos and the bytes before it, eos not counted. Rows over max_bytes are scored in pieces."""
    nats, nbytes = 0.0, 0
    with torch.no_grad():
        for r in rows:
            for start in range(0, len(r), max_bytes):
                b = r[start:start + max_bytes]
                ids = torch.tensor([BOS] + list(b[:-1]), dtype=torch.long)[None]
                lp = torch.log_softmax(model(ids)[0].double(), dim=-1)
                nats -= lp[torch.arange(len(b)), torch.tensor(list(b))].sum().item()
                nbytes += len(b)
    return nats / math.log(2) / max(1, nbytes), nbytes


# ---------------------------------------------------------------------------------------------
# Output: safetensors, the curve, import


def write_safetensors(path, state, config, dtype):
    import numpy as np
    header, blobs, off = {"__metadata__": {"relattn.config": json.dumps(config, separators=(",", ":")),
                                           "relattn.trained_by": "models/train_corpus.py"}}, [], 0
    np_dtype = "<f4" if dtype == "F32" else "<f2"
    for name, a in state.items():
        a = a.detach().float().numpy()
        if dtype == "F16" and float(np.abs(a).max(initial=0)) >= 65504:
            sys.exit(f"train_corpus.py: tensor {name} does not fit F16; use --dtype F32")
        raw = np.ascontiguousarray(a, dtype=np_dtype).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = pathlib.Path(str(path) + ".tmp")
    tmp.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    tmp.replace(path)


def curve_table(curve):
    lines = ["step   minutes  train bits/token  held-out bits/byte",
             "-----  -------  ----------------  ------------------"]
    for p in curve:
        lines.append(f"{p['step']:5d}  {p['minutes']:7.2f}  {p['train_bits_per_token']:16.3f}  "
                     f"{p['heldout_bits_per_byte']:18.3f}")
    return "\n".join(lines)


def curve_svg(curve, title):
    """A line chart of train and held-out bits per byte against steps, as SVG text."""
    W, H, L, R, T, B = 640, 360, 60, 20, 40, 50
    steps = [p["step"] for p in curve] or [0]
    ys = [p[k] for p in curve for k in ("train_bits_per_token", "heldout_bits_per_byte")] or [0, 8]
    x0, x1 = 0, max(steps) or 1
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys)) if max(ys) > math.floor(min(ys)) else math.floor(min(ys)) + 1
    sx = lambda s: L + (W - L - R) * (s - x0) / (x1 - x0)
    sy = lambda v: H - B - (H - T - B) * (v - y0) / (y1 - y0)
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{esc(title)}</text>']
    for i in range(6):  # grid and labels
        v = y0 + (y1 - y0) * i / 5
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        s = x0 + (x1 - x0) * i / 5
        out.append(f'<text x="{sx(s):.1f}" y="{H - B + 16}" text-anchor="middle">{s:.0f}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">step</text>')
    out.append(f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(T + H - B) / 2})">bits per byte</text>')
    out.append(f'<path d="M{L},{T} V{H - B} H{W - R}" fill="none" stroke="black"/>')
    for key, colour, label, dy in (("train_bits_per_token", "#1f77b4", "train (bits/token)", 0),
                                   ("heldout_bits_per_byte", "#d62728", "held out", 16)):
        pts = " ".join(f"{sx(p['step']):.1f},{sy(p[key]):.1f}" for p in curve)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in curve:
            out.append(f'<circle cx="{sx(p["step"]):.1f}" cy="{sy(p[key]):.1f}" r="3" fill="{colour}"/>')
        out.append(f'<line x1="{W - R - 180}" x2="{W - R - 160}" y1="{T + 8 + dy}" y2="{T + 8 + dy}" '
                   f'stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{W - R - 154}" y="{T + 12 + dy}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def import_into(args, path, heldout):
    sys.path.insert(0, str(ROOT / "python"))
    import relattn
    so = args.so[:-3] if args.so and args.so.endswith(".so") else args.so
    con = sqlite3.connect(args.into)
    try:
        con.enable_load_extension(True)
        con.load_extension(so) if so else relattn.load(con)
        con.enable_load_extension(False)
        with con:
            n = con.execute("SELECT relattn_import(?, ?)", (args.name, pathlib.Path(path).read_bytes())).fetchone()[0]
            if args.heldout_table:
                t = '"' + args.heldout_table.replace('"', '""') + '"'
                con.execute(f"DROP TABLE IF EXISTS {t}")
                con.execute(f"CREATE TABLE {t}(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
                con.executemany(f"INSERT INTO {t}(body) VALUES (CAST(? AS TEXT))", [(r,) for r in heldout])
        return n
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# Training, resumable


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def signature(args, config, n_rows):
    """What a checkpoint must agree on to be resumed."""
    keep = ("db", "query", "heldout", "minutes", "seq_len", "batch_tokens", "lr", "warmup", "seed", "eval_every")
    sig = {k: getattr(args, k) for k in keep}
    sig["db"] = str(pathlib.Path(args.db).resolve())
    if args.minutes is None:
        sig["steps"] = args.steps
    sig.update(config=config, rows=n_rows)
    return sig


def main(argv=None):
    args = parse_args(argv)
    # Threads before torch loads: OpenBLAS and OpenMP read these once.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(args.threads))
    # OpenBLAS's own choice of kernels on AVX-512 machines runs these GEMM shapes at half the
    # speed of its Haswell (AVX2) ones (measured for models/train.py).
    if "avx2" in pathlib.Path("/proc/cpuinfo").read_text():
        os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    F = torch.nn.functional

    def log(msg):
        print(time.strftime("%H:%M:%S"), msg, flush=True)

    config = model_config(args)
    rows = read_rows(args.db, args.query)
    if len(rows) < 2:
        sys.exit(f"train_corpus.py: the query gave {len(rows)} non-empty rows; at least 2 are needed")
    train_rows, held_rows = split_rows(rows, args.heldout, args.seed)
    if not held_rows:
        sys.exit("train_corpus.py: every held-out row also occurs in training; use more rows or --heldout")
    train_ex, held_ex = examples(train_rows, args.seq_len), examples(held_rows, args.seq_len)
    monitor = [held_ex[i] for i in sorted(random.Random(args.seed + 1).sample(range(len(held_ex)), min(200, len(held_ex))))]
    facts = {"db": os.path.basename(args.db), "query": args.query, "seed": args.seed, "threads": args.threads,
             "rows": {"train": len(train_rows), "heldout": len(held_rows)},
             "bytes": {"train": sum(map(len, train_rows)), "heldout": sum(map(len, held_rows))}}
    log(f"data: {len(rows)} rows from {args.db}: {len(train_rows)} for training "
        f"({facts['bytes']['train']} bytes, {len(train_ex)} examples), {len(held_rows)} held out "
        f"({facts['bytes']['heldout']} bytes)")

    torch.manual_seed(args.seed)
    model = build_model(torch, config)
    model.init_weights(torch.Generator().manual_seed(args.seed))
    n_params = sum(p.numel() for p in model.parameters())
    decay_names = ("wq", "wk", "wv", "wo", "wr", "w1", "w2")
    groups = [{"params": [p for n, p in model.named_parameters() if n.rsplit(".", 1)[-1] in decay_names],
               "weight_decay": 0.1},
              {"params": [p for n, p in model.named_parameters() if n.rsplit(".", 1)[-1] not in decay_names],
               "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    ckpt = pathlib.Path(args.out + ".ckpt")
    sig = signature(args, config, len(rows))
    rng = np.random.default_rng(args.seed)
    st = {"step": 0, "steps": args.steps if args.minutes is None else None, "epoch": 0, "pos": 0,
          "epoch_rng": rng.bit_generator.state, "seconds": 0.0, "bytes_seen": 0, "ema": None, "curve": []}
    if ckpt.exists() and not args.fresh:
        saved = torch.load(ckpt)
        if saved["signature"] != sig:
            sys.exit(f"train_corpus.py: {ckpt} was made with other data or settings; delete it or pass --fresh")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        st = saved["state"]
        log(f"resuming from {ckpt} at step {st['step']}")
    steps_txt = st["steps"] if st["steps"] else f"~{args.minutes} min"
    log(f"model: {n_params} parameters, {args.layers} layers, d_model {args.d_model}, {args.heads} heads, "
        f"{describe_position(config['position'])}; {steps_txt} steps on {args.threads} thread(s)")

    def save_checkpoint():
        tmp = pathlib.Path(str(ckpt) + ".tmp")
        torch.save({"signature": sig, "model": model.state_dict(), "opt": opt.state_dict(), "state": st}, tmp)
        tmp.replace(ckpt)

    stop = {"asked": False}

    def on_sigint(signum, frame):
        if stop["asked"]:
            raise KeyboardInterrupt
        stop["asked"] = True
        print("\ninterrupted: saving a checkpoint after this step (Ctrl-C again to quit now)",
              file=sys.stderr, flush=True)

    old_handler = signal.signal(signal.SIGINT, on_sigint)
    rng.bit_generator.state = st["epoch_rng"]
    order = epoch_order(train_ex, args.batch_tokens, rng)
    t_session, step0, last_log, last_ckpt = time.time(), st["step"], time.time(), time.time()
    secs0 = st["seconds"]
    while st["steps"] is None or st["step"] < st["steps"]:
        if st["pos"] >= len(order):
            st["epoch"] += 1
            st["pos"] = 0
            st["epoch_rng"] = rng.bit_generator.state
            order = epoch_order(train_ex, args.batch_tokens, rng)
        x, y = tensors_of(torch, train_ex, order[st["pos"]])
        st["pos"] += 1
        total = st["steps"] or max(st["step"] + 1, 20)
        for g in opt.param_groups:
            g["lr"] = lr_at(st["step"], total, args.lr, min(args.warmup, total // 10 + 1))
        model.train()
        loss = F.cross_entropy(model(x).view(-1, VOCAB), y.view(-1), ignore_index=PAD)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        st["step"] += 1
        st["bytes_seen"] += int((y != PAD).sum())
        st["ema"] = loss.item() if st["ema"] is None else 0.95 * st["ema"] + 0.05 * loss.item()
        st["seconds"] = secs0 + time.time() - t_session
        if st["steps"] is None and st["step"] == 20:
            st["steps"] = max(20, int(args.minutes * 60 / (st["seconds"] / 20)))
            log(f"{st['steps']} steps fit in about {args.minutes} minutes at this speed")
        done = st["steps"] is not None and st["step"] >= st["steps"]
        every = args.eval_every or max(1, (st["steps"] or 100) // 10)
        if st["steps"] is not None and (st["step"] % every == 0 or done):
            model.eval()
            hb = monitor_bits(torch, model, monitor)
            st["curve"].append({"step": st["step"], "minutes": round(st["seconds"] / 60, 2),
                                "train_bits_per_token": round(st["ema"] / math.log(2), 4),
                                "heldout_bits_per_byte": round(hb, 4)})
            log(f"step {st['step']}: held-out {hb:.3f} bits/byte (sample of {len(monitor)} pieces)")
        now = time.time()
        if (args.log_every and st["step"] % args.log_every == 0) or (not args.log_every and now - last_log >= 10) or done:
            last_log = now
            rate = (st["step"] - step0) / max(1e-9, now - t_session)
            left = ((st["steps"] or st["step"]) - st["step"]) / max(rate, 1e-9)
            log(f"step {st['step']}/{st['steps'] or '?'}  loss {st['ema'] / math.log(2):.3f} bits/token  "
                f"{st['bytes_seen'] / max(st['seconds'], 1e-9):.0f} bytes/s  elapsed {st['seconds'] / 60:.1f} min  " +
                (f"ETA {int(left // 60)}:{int(left % 60):02d}" if st["steps"] else "ETA after step 20"))
        if stop["asked"]:
            save_checkpoint()
            log(f"checkpoint saved to {ckpt} at step {st['step']}; run the same command again to resume")
            signal.signal(signal.SIGINT, old_handler)
            return 130
        if now - last_ckpt >= args.checkpoint_minutes * 60 and not done:
            save_checkpoint()
            last_ckpt = now
    signal.signal(signal.SIGINT, old_handler)

    model.eval()
    t_eval = time.time()
    bpb, hbytes = heldout_bits(torch, model, held_rows, min(4096, args.max_len - 1 if args.max_len else 4096))
    facts.update({"params": n_params, "steps": st["step"], "epochs": round(st["bytes_seen"] / max(1, facts["bytes"]["train"]), 3),
                  "seconds": round(st["seconds"], 1), "heldout_bits_per_byte": round(bpb, 4),
                  "curve": st["curve"], "torch": torch.__version__,
                  "settings": {"seq_len": args.seq_len, "batch_tokens": args.batch_tokens, "lr": args.lr,
                               "warmup": args.warmup, "dtype": args.dtype}})
    log(f"held-out rows scored whole: {bpb:.4f} bits/byte over {hbytes} bytes ({time.time() - t_eval:.0f} s)")
    print("\nheld-out curve (bits per byte; held out: a fixed sample of the held-out rows):\n" + curve_table(st["curve"]))
    config["training"] = facts
    write_safetensors(args.out, model.state_dict(), config, args.dtype)
    svg = pathlib.Path(args.out + ".curve.svg")
    svg.write_text(curve_svg(st["curve"], f"{args.name}: {len(train_rows)} rows, {st['step']} steps, "
                                          f"held out {bpb:.3f} bits/byte"))
    log(f"wrote {args.out} and {svg}")
    if args.into:
        n = import_into(args, args.out, held_rows)
        log(f"imported {n} tensors into {args.into} as '{args.name}'"
            + (f"; held-out rows in table {args.heldout_table}" if args.heldout_table else ""))
    if ckpt.exists():
        ckpt.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
