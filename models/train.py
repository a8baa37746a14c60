#!/usr/bin/python3
"""Trains the bundled model: a byte-level decoder with Shaw relative attention.

The PyTorch model below is written from docs/reference.md (model config, tensor names, forward pass),
not from the C code, so it doubles as a second, independent reference implementation of the forward
pass. Export writes, next to this script:

    tiny.safetensors       weights (F16) with the config in __metadata__["relattn.config"]
    tiny.reference.json    float64 per-token log-probs of held-out sequences, from the weights as stored
    tiny.heldout.csv       the bundled held-out set (source,ref,text) and, in the reference file, its
                           bits per byte, which SQL recomputes with relattn_score
    tiny.train.json        what the run did: data sizes, steps, timings, losses (the model card quotes it)
    ../sql/demo_corpus.sql the corpus `make demo` ranks

Data (public domain, from Debian packages): the King James Bible (bible-kjv-text, printed verse by
verse by the `bible` program of bible-kjv) and the prose of SQLite's documentation (sqlite3-doc, HTML
with the tags stripped). The held-out split is whole chapters and whole documentation pages, chosen
with a fixed seed; training never sees them, nor any held-out text that also occurs in training.

Usage (`make model` runs the first; needs python3-torch, bible-kjv, sqlite3-doc):
    /usr/bin/python3 models/train.py               # data, train, export
    /usr/bin/python3 models/train.py --measure 20  # time 20 training steps and stop
    /usr/bin/python3 models/train.py --export-only # export again from models/build/tiny.pt
"""
import argparse
import collections
import csv
import hashlib
import html.parser
import io
import json
import math
import os
import pathlib
import random
import re
import struct
import subprocess
import sys
import time

# One thread: the machine is shared. OpenBLAS and OpenMP read these when torch loads.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# On these AVX-512 machines OpenBLAS's auto-detected kernels run the training's GEMM shapes at
# ~30 GFLOP/s on one thread, its Haswell (AVX2) kernels at ~75-90: the training runs 2x faster.
if "avx2" in pathlib.Path("/proc/cpuinfo").read_text():
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
SEED = 20181  # every random choice below derives from it
NAME = "tiny"

BOS, EOS, PAD = 256, 257, 258
VOCAB = 259

CONFIG = {
    "arch": "decoder", "vocab_size": VOCAB, "d_model": 160, "n_layers": 4, "n_heads": 4, "d_ff": 640,
    "norm": "pre", "norm_eps": 1e-5, "activation": "gelu", "tie_embeddings": True,
    "position": {"type": "shaw", "clip": 16, "values": True, "per_head": False},
    "tokenizer": {"type": "bytes", "bos": BOS, "eos": EOS, "pad": PAD},
}

# ---------------------------------------------------------------------------------------------
# Data


def kjv_verses():
    """[(chapter, ref, text)] for the 31102 verses, in order. `bible -f` prints `Ge1:1 In the ...`."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}).stdout
    verses = []
    for line in out.decode("utf-8").splitlines():
        m = re.match(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.+)$", line)
        if not m:
            continue
        book, chap, verse, text = m.groups()
        verses.append((f"{book} {chap}", f"{book} {chap}:{verse}", text.strip()))
    if len(verses) != 31102:
        sys.exit(f"train.py: expected 31102 verses from `bible`, got {len(verses)}")
    return verses


class _Paragraphs(html.parser.HTMLParser):
    """Text of <p>, <li>, <dd>, <td> and <blockquote> elements, whitespace collapsed; code (<pre>),
    diagrams (<svg>), scripts and styles dropped."""
    BLOCK = {"p", "li", "div", "h1", "h2", "h3", "h4", "h5", "h6", "table", "tr", "td", "th", "ul",
             "ol", "dl", "dt", "dd", "blockquote", "br", "hr", "body", "form", "center"}
    SKIP = {"script", "style", "svg", "pre", "head", "title"}
    KEEP = {"p", "li", "dd", "blockquote", "td"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.buf, self.skip = [], None, 0

    def flush(self):
        if self.buf is not None:
            text = re.sub(r"\s+", " ", "".join(self.buf)).strip()
            if text:
                self.out.append(text)
        self.buf = None

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
            self.flush()
        elif tag in self.BLOCK:
            self.flush()
            if tag in self.KEEP:
                self.buf = []

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in self.BLOCK:
            self.flush()

    def handle_data(self, data):
        if self.skip == 0 and self.buf is not None:
            self.buf.append(data)


def sqlite_paragraphs(root=pathlib.Path("/usr/share/doc/sqlite3")):
    """[(page, ref, text)]: prose paragraphs of SQLite's documentation, each kept once (the first page
    it appears on). Index and cross-reference pages, the requirements list and the per-release logs
    (changes.html has them all) are left out."""
    def wanted(p):
        rel = p.relative_to(root)
        return not (rel.parts[0] in ("search.d", "syntax", "releaselog")
                    or "crossref" in p.name or p.name in ("requirements.html", "toc.html"))
    pages = sorted(p for p in root.rglob("*.html") if wanted(p))
    if len(pages) < 300:
        sys.exit(f"train.py: found {len(pages)} pages under {root}; is sqlite3-doc installed?")
    seen, out = set(), []
    for page in pages:
        parser = _Paragraphs()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        parser.close()
        parser.flush()
        rel = str(page.relative_to(root))
        for i, text in enumerate(parser.out):
            if len(text) < 40 or " " not in text or text in seen:
                continue
            seen.add(text)
            out.append((rel, f"{rel}#{i}", text))
    return out


def split(units, frac, rng):
    """Held-out groups (chapters, pages) drawn with rng; returns (train, heldout) lists of units."""
    groups = sorted({g for g, _, _ in units})
    held = set(rng.sample(groups, max(1, round(frac * len(groups)))))
    train = [u for u in units if u[0] not in held]
    seen = {t for _, _, t in train}
    heldout = [u for u in units if u[0] in held and u[2] not in seen]
    return train, heldout


def load_data():
    rng = random.Random(SEED)
    kjv_train, kjv_held = split(kjv_verses(), 0.03, rng)
    doc_train, doc_held = split(sqlite_paragraphs(), 0.05, rng)
    train = [("kjv", r, t) for _, r, t in kjv_train] + [("sqlite-doc", r, t) for _, r, t in doc_train]
    held = [("kjv", r, t) for _, r, t in kjv_held] + [("sqlite-doc", r, t) for _, r, t in doc_held]
    return train, held


def chunks(text, max_bytes):
    """UTF-8 bytes of text cut at spaces into pieces of at most max_bytes (a single longer word is cut
    where it must). Returns [(bytes, is_last)]."""
    b = text.encode("utf-8")
    pieces, start = [], 0
    while len(b) - start > max_bytes:
        cut = b.rfind(b" ", start + 1, start + max_bytes)
        cut = start + max_bytes if cut <= start else cut + 1
        pieces.append(b[start:cut])
        start = cut
    pieces.append(b[start:])
    return [(p, i == len(pieces) - 1) for i, p in enumerate(pieces)]


def to_examples(units, seq_len):
    """Training examples: input [BOS] + bytes, target bytes + [EOS] (EOS only after a unit's last
    piece; elsewhere the final target is PAD, which the loss ignores)."""
    ex = []
    for _, _, text in units:
        for piece, last in chunks(text, seq_len - 1):
            ids = np.frombuffer(piece, dtype=np.uint8).astype(np.int64)
            ex.append((ids, last))
    return ex


def batches(examples, tokens_per_batch, rng):
    """One epoch of batches: examples shuffled, then sorted by length within pools of ~64 batches so
    a batch pads little, then the batches shuffled. Each batch is (inputs, targets) int64 [b, n]."""
    order = rng.permutation(len(examples))
    pool = 64 * tokens_per_batch // 160
    out = []
    for p in range(0, len(order), pool):
        idx = sorted(order[p:p + pool], key=lambda i: len(examples[i][0]))
        cur = []
        for i in idx:
            n = len(examples[i][0]) + 1
            if cur and n * (len(cur) + 1) > tokens_per_batch:
                out.append(cur)
                cur = []
            cur.append(i)
        if cur:
            out.append(cur)
    rng.shuffle(out)
    for idx in out:
        n = max(len(examples[i][0]) for i in idx) + 1
        x = torch.full((len(idx), n), PAD, dtype=torch.long)
        y = torch.full((len(idx), n), PAD, dtype=torch.long)
        for r, i in enumerate(idx):
            ids, last = examples[i]
            x[r, 0] = BOS
            x[r, 1:len(ids) + 1] = torch.from_numpy(ids)
            y[r, :len(ids)] = torch.from_numpy(ids)
            y[r, len(ids)] = EOS if last else PAD
        yield x, y

# ---------------------------------------------------------------------------------------------
# The model (docs/reference.md, "The forward pass"). Parameter names are the tensor names there.


class LayerNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class RelAttention(nn.Module):
    """Shaw, Uszkoreit & Vaswani 2018, eq. 3-4, relative tables shared across heads:
        e_ij = s q_i.(k_j + rel_k[r(i,j)]),  z_i = sum_j softmax_j(e_ij) (v_j + rel_v[r(i,j)]),
        r(i,j) = clip(j - i, -k, k) + k.
    Training-sized sequences, so it does build the [n, n] logits; the C kernel must not."""

    def __init__(self, d, h, clip):
        super().__init__()
        self.h, self.dh, self.clip = h, d // h, clip
        for w in ("wq", "wk", "wv", "wo"):
            setattr(self, w, nn.Parameter(torch.empty(d, d)))  # [out, in]: y = x W^T + b
        for b in ("bq", "bk", "bv", "bo"):
            setattr(self, b, nn.Parameter(torch.zeros(d)))
        self.rel_k = nn.Parameter(torch.empty(2 * clip + 1, self.dh))
        self.rel_v = nn.Parameter(torch.empty(2 * clip + 1, self.dh))

    def forward(self, x):  # x [b, n, d]
        b, n, d = x.shape
        heads = lambda t: t.view(b, n, self.h, self.dh).transpose(1, 2)  # [b, h, n, dh]
        q = heads(F.linear(x, self.wq, self.bq))
        k = heads(F.linear(x, self.wk, self.bk))
        v = heads(F.linear(x, self.wv, self.bv))
        pos = torch.arange(n, device=x.device)
        r = (pos[None, :] - pos[:, None]).clamp(-self.clip, self.clip) + self.clip  # [n, n]: r(i, j)
        r = r.expand(b, self.h, n, n)
        s = 1.0 / math.sqrt(self.dh)
        e = (q @ k.transpose(-1, -2) + torch.gather(q @ self.rel_k.T, -1, r)) * s
        e = e.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        a = torch.softmax(e, dim=-1)
        # Value term: the weight each query puts on each relative row, then one product with rel_v.
        a_rel = torch.zeros(b, self.h, n, 2 * self.clip + 1, dtype=a.dtype).scatter_add_(-1, r, a)
        z = a @ v + a_rel @ self.rel_v
        return F.linear(z.transpose(1, 2).reshape(b, n, d), self.wo, self.bo)


class FFN(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(d_ff, d))
        self.b1 = nn.Parameter(torch.zeros(d_ff))
        self.w2 = nn.Parameter(torch.empty(d, d_ff))
        self.b2 = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return F.linear(F.gelu(F.linear(x, self.w1, self.b1)), self.w2, self.b2)  # erf GELU


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.ln1 = LayerNorm(d, c["norm_eps"])
        self.attn = RelAttention(d, c["n_heads"], c["position"]["clip"])
        self.ln2 = LayerNorm(d, c["norm_eps"])
        self.ffn = FFN(d, c["d_ff"])

    def forward(self, x):  # pre-norm
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok_emb = nn.Parameter(torch.empty(c["vocab_size"], c["d_model"]))
        self.layers = nn.ModuleList(Block(c) for _ in range(c["n_layers"]))
        self.ln_f = LayerNorm(c["d_model"], c["norm_eps"])

    @torch.no_grad()
    def init_weights(self, gen):
        n_layers = len(self.layers)
        for name, p in self.named_parameters():
            if name.endswith(("wo", "w2")):  # residual outputs, scaled down with depth (GPT-2)
                p.normal_(0.0, 0.02 / math.sqrt(2 * n_layers), generator=gen)
            elif p.dim() == 2:
                p.normal_(0.0, 0.02, generator=gen)

    def forward(self, ids):  # ids [b, n] -> logits [b, n, vocab]
        x = self.tok_emb[ids]
        for layer in self.layers:
            x = layer(x)
        return F.linear(self.ln_f(x), self.tok_emb)  # tied: lm_head is tok_emb

# ---------------------------------------------------------------------------------------------
# safetensors, written and read with json + struct (8-byte little-endian header length, JSON header,
# raw little-endian data; the header is padded with spaces to a multiple of 8).


def write_safetensors(path, tensors, metadata):
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a, dtype="<f2").tobytes()
        header[name] = {"dtype": "F16", "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    dtypes = {"F16": "<f2", "F32": "<f4"}
    tensors = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        tensors[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return tensors, meta


def model_from_file(path, dtype):
    tensors, meta = read_safetensors(path)
    config = json.loads(meta["relattn.config"])
    model = Decoder(config).to(dtype)
    state = {k: torch.from_numpy(v.astype(np.float64)).to(dtype) for k, v in tensors.items()}
    model.load_state_dict(state, strict=True)
    return model.eval(), config

# ---------------------------------------------------------------------------------------------
# Scoring, as relattn_score defines it: input [BOS] + bytes; every byte is scored, EOS is not.


@torch.no_grad()
def logprobs(model, texts, dtype):
    """Per text: (log p of each byte given BOS and the bytes before it, top token, its log p)."""
    out = []
    for text in texts:
        ids = list(text.encode("utf-8"))
        x = torch.tensor([[BOS] + ids[:-1]])
        lp = torch.log_softmax(model(x).to(dtype)[0], dim=-1)
        tgt = torch.tensor(ids)
        top = lp.max(dim=-1)
        out.append((lp[torch.arange(len(ids)), tgt].tolist(), top.indices.tolist(), top.values.tolist()))
    return out


@torch.no_grad()
def heldout_bits(model, examples, dtype, batch_tokens=8192):
    """(bits, bytes) over held-out examples (EOS targets excluded: bits per byte of text)."""
    nats, nbytes = 0.0, 0
    for x, y in batches(examples, batch_tokens, np.random.default_rng(0)):
        y = torch.where(y == EOS, PAD, y)
        lp = torch.log_softmax(model(x.to(torch.long)).to(dtype), dim=-1)
        mask = y != PAD
        nats -= lp.gather(-1, y.clamp(max=VOCAB - 1)[..., None])[..., 0][mask].sum().item()
        nbytes += int(mask.sum())
    return nats / math.log(2), nbytes

# ---------------------------------------------------------------------------------------------
# Training


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train(args, train_units, held_units, log):
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = Decoder(CONFIG)
    model.init_weights(gen)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if n.rsplit(".", 1)[-1] in ("wq", "wk", "wv", "wo", "w1", "w2")]
    other = [p for n, p in model.named_parameters() if n.rsplit(".", 1)[-1] not in ("wq", "wk", "wv", "wo", "w1", "w2")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    examples = to_examples(train_units, args.seq_len)
    held_ex = to_examples(held_units, args.seq_len)
    monitor = [held_ex[i] for i in np.random.default_rng(SEED).choice(len(held_ex), 300, replace=False)]
    log(f"params {n_params}  train examples {len(examples)} ({sum(len(e[0]) for e in examples)} bytes)"
        f"  held-out examples {len(held_ex)}")
    rng = np.random.default_rng(SEED)
    step, epoch, t0, seen_tokens, history = 0, 0, time.time(), 0, []
    stream = batches(examples, args.batch_tokens, rng)
    ema = None
    while step < args.steps:
        try:
            x, y = next(stream)
        except StopIteration:
            epoch += 1
            stream = batches(examples, args.batch_tokens, rng)
            continue
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        model.train()
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1), ignore_index=PAD)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen_tokens += int((y != PAD).sum())
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 50 == 0 or step == args.steps:
            el = time.time() - t0
            log(f"step {step}/{args.steps} epoch {epoch} loss {ema / math.log(2):.3f} bits/token "
                f"tok/s {seen_tokens / el:.0f} elapsed {el / 60:.1f} min "
                f"eta {(args.steps - step) * el / step / 60:.1f} min")
        if args.measure and step >= args.measure:
            log(f"measure: {args.measure} steps in {time.time() - t0:.1f} s "
                f"({seen_tokens / (time.time() - t0):.0f} tokens/s)")
            return None
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            bits, nb = heldout_bits(model, monitor, torch.float32)
            history.append({"step": step, "minutes": round((time.time() - t0) / 60, 2),
                            "train_bits_per_token": round(ema / math.log(2), 4),
                            "heldout_bits_per_byte": round(bits / nb, 4)})
            log(f"eval step {step}: held-out (monitor subset) {bits / nb:.4f} bits/byte")
    minutes = (time.time() - t0) / 60
    return model, {"params": n_params, "steps": step, "epochs": round(seen_tokens / sum(len(e[0]) + 1 for e in examples), 3),
                   "tokens_seen": seen_tokens, "train_minutes": round(minutes, 1), "history": history}

# ---------------------------------------------------------------------------------------------
# Export: weights, reference, held-out set, demo corpus


def pick_reference(held, rng):
    """20 held-out sequences of varied lengths: short, typical, two longer than the training window,
    and one with non-ASCII bytes if the split has one (else one more paragraph)."""
    kjv = [u for u in held if u[0] == "kjv"]
    doc = [u for u in held if u[0] == "sqlite-doc"]
    picks = rng.sample([u for u in kjv if len(u[2]) < 60], 3)
    picks += rng.sample([u for u in kjv if 60 <= len(u[2]) < 250], 9)
    picks += rng.sample([u for u in doc if len(u[2]) < 250], 5)
    long = [u for u in held if 300 <= len(u[2].encode()) <= 700]
    picks += rng.sample(long, 2)
    utf8 = [u for u in held if len(u[2].encode()) != len(u[2]) and len(u[2].encode()) < 300 and u not in picks]
    picks.append(utf8[0] if utf8 else rng.choice([u for u in doc if len(u[2]) < 250 and u not in picks]))
    return picks


def heldout_set(held, rng):
    """The bundled held-out set SQL recomputes: 150 verses and 50 documentation paragraphs, each at
    most 255 bytes (the training window), drawn with rng from the held-out split. Small, so a test
    scores it in seconds; the model card gives the whole split's figure too."""
    fits = [u for u in held if len(u[2].encode()) <= 255]
    kjv = [u for u in fits if u[0] == "kjv"]
    doc = [u for u in fits if u[0] == "sqlite-doc"]
    picked = rng.sample(kjv, min(150, len(kjv))) + rng.sample(doc, min(50, len(doc)))
    return sorted(picked, key=lambda u: (u[0], u[1]))


def export(args, model, train_info, train_units, held_units, log):
    out = HERE / f"{NAME}.safetensors"
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    big = max(float(np.abs(v).max()) for v in state.values())
    if big >= 65504:
        sys.exit(f"train.py: a weight of magnitude {big} does not fit F16")
    metadata = {"relattn.config": json.dumps(CONFIG, separators=(",", ":")), "format": "pt",
                "relattn.trained_by": "models/train.py", "relattn.seed": str(SEED),
                "relattn.data": "KJV Bible (bible-kjv-text) + SQLite documentation prose (sqlite3-doc)"}
    write_safetensors(out, state, metadata)
    log(f"wrote {out} ({out.stat().st_size} bytes)")

    rng = random.Random(SEED + 1)
    # Everything below evaluates the weights as stored (F16, read back from the file).
    m64, _ = model_from_file(out, torch.float64)
    m32, _ = model_from_file(out, torch.float32)
    t0 = time.time()
    bits, nb = heldout_bits(m32, to_examples(held_units, args.seq_len), torch.float32)
    full_bpb = bits / nb
    log(f"held-out split (all of it, float32): {full_bpb:.4f} bits/byte over {nb} bytes ({time.time() - t0:.0f} s)")

    hs = heldout_set(held_units, rng)
    with open(HERE / f"{NAME}.heldout.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["source", "ref", "text"])
        w.writerows(hs)
    lps = logprobs(m64, [t for _, _, t in hs], torch.float64)
    nats = -sum(sum(lp) for lp, _, _ in lps)
    nbytes = sum(len(t.encode()) for _, _, t in hs)
    set_bpb = nats / math.log(2) / nbytes
    log(f"bundled held-out set (float64): {set_bpb:.6f} bits/byte over {nbytes} bytes, {len(hs)} sequences")

    refs = pick_reference(held_units, rng)
    seqs = []
    for (src, ref, text), (lp, top, top_lp) in zip(refs, logprobs(m64, [t for _, _, t in refs], torch.float64)):
        seqs.append({"source": src, "ref": ref, "text": text, "tokens": list(text.encode()),
                     "score": sum(lp), "logprobs": lp, "top_token": top, "top_logprob": top_lp})
    reference = {
        "model": NAME, "file": out.name, "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        "computed_with": f"PyTorch {torch.__version__}, float64, the F16 weights as stored in the file",
        "scoring": "input [BOS] + the text's UTF-8 bytes; every byte scored (ln p given BOS and the bytes before it); no EOS",
        "sequences": seqs,
        "heldout_set": {"file": f"{NAME}.heldout.csv", "sequences": len(hs), "bytes": nbytes,
                        "nats": nats, "bits_per_byte": set_bpb},
    }
    (HERE / f"{NAME}.reference.json").write_text(compact_json(reference))

    info = dict(train_info or {})
    info.update({
        "config": CONFIG, "seed": SEED, "seq_len": args.seq_len, "batch_tokens": args.batch_tokens,
        "lr": args.lr, "warmup": args.warmup, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "data": data_summary(train_units, held_units),
        "heldout_split_bits_per_byte": round(full_bpb, 4), "heldout_split_bytes": nb,
        "heldout_set_bits_per_byte": round(set_bpb, 6), "heldout_set_bytes": nbytes,
        "file_bytes": out.stat().st_size,
    })
    (HERE / f"{NAME}.train.json").write_text(json.dumps(info, indent=1) + "\n")
    write_demo_corpus(held_units, m64)
    log("export done")


def compact_json(obj):
    """Indented JSON with each list of numbers on one line; floats keep their full precision."""
    text = json.dumps(obj, indent=1)
    return re.sub(r"\[\s+([-+0-9.eE,\s]+?)\s+\]",
                  lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]", text) + "\n"


def data_summary(train_units, held_units):
    def count(units):
        c = collections.Counter()
        for src, _, t in units:
            c[src + " units"] += 1
            c[src + " bytes"] += len(t.encode())
        return dict(sorted(c.items()))
    return {"train": count(train_units), "heldout": count(held_units)}

# ---------------------------------------------------------------------------------------------
# The demo corpus: real text next to its corrupted versions.

MODERN = [  # written for this project
    "The train was late again, so we shared a taxi from the station to the office.",
    "Please remember to water the tomatoes while I am away next week.",
    "She opened her laptop, read the error message twice, and then laughed.",
    "Our neighbours painted their front door a bright shade of yellow.",
    "If the database is locked, wait a moment and try the query again.",
    "He forgot his umbrella, and of course it started to rain.",
]
OTHER_LANGUAGE = [  # written for this project
    ("French", "Le petit chat dort au soleil pendant que la pluie tombe sur la ville."),
    ("German", "Morgen fahren wir mit dem Zug an den See und essen dort zu Mittag."),
    ("Spanish", "Mi hermana prepara el desayuno mientras escuchamos la radio."),
]


def shuffled(text, rng):
    chars = list(text)
    rng.shuffle(chars)
    return "".join(chars)


def sql_text(s):
    return "'" + s.replace("'", "''") + "'"


def write_demo_corpus(held_units, m64):
    rng = random.Random(SEED + 2)
    verses = rng.sample([u for u in held_units if u[0] == "kjv" and 60 <= len(u[2]) <= 130], 4)
    rows = []  # (kind, label, body SQL expression)
    for _, ref, text in verses:
        rows.append(("held-out verse", ref, sql_text(text)))
    for i, text in enumerate(MODERN[:4]):
        rows.append(("modern English", f"sentence {i + 1}", sql_text(text)))
    for _, ref, text in verses[:2]:
        rows.append(("shuffled characters", ref, sql_text(shuffled(text, rng))))
    for i, text in enumerate(MODERN[:4]):
        rows.append(("shuffled characters", f"sentence {i + 1}", sql_text(shuffled(text, rng))))
    for lang, text in OTHER_LANGUAGE:
        rows.append(("other language", lang, sql_text(text)))
    for i in range(2):  # random bytes: as many as a typical sentence, 1..255 so the TEXT has no NUL
        blob = bytes(rng.randrange(1, 256) for _ in range(70))
        rows.append(("random bytes", f"random {i + 1}", f"CAST(x'{blob.hex()}' AS TEXT)"))
    lines = [
        "-- The demo corpus (sql/demo.sql ranks it). Written by models/train.py: held-out verses of the",
        "-- King James Bible (never seen in training), modern English sentences, the same texts with their",
        "-- characters shuffled (fixed seed), text in other languages, and random bytes.",
        "CREATE TABLE IF NOT EXISTS corpus(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, label TEXT NOT NULL, body TEXT NOT NULL);",
        "DELETE FROM corpus;",
        "INSERT INTO corpus(kind, label, body) VALUES",
    ]
    lines.append(",\n".join(f"  ({sql_text(k)}, {sql_text(l)}, {b})" for k, l, b in rows) + ";")
    (ROOT / "sql").mkdir(exist_ok=True)
    (ROOT / "sql" / "demo_corpus.sql").write_text("\n".join(lines) + "\n")

# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--measure", type=int, default=0, help="time this many steps, then stop")
    ap.add_argument("--export-only", action="store_true", help="export from models/build/tiny.pt")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    build = HERE / "build"
    build.mkdir(exist_ok=True)

    def log(msg):
        print(time.strftime("%H:%M:%S"), msg, flush=True)

    t0 = time.time()
    train_units, held_units = load_data()
    log(f"data: {data_summary(train_units, held_units)} ({time.time() - t0:.1f} s)")
    if args.export_only:
        ck = torch.load(build / f"{NAME}.pt")
        model = Decoder(CONFIG)
        model.load_state_dict(ck["state"])
        export(argparse.Namespace(**ck["args"]), model, ck["info"], train_units, held_units, log)
        return
    result = train(args, train_units, held_units, log)
    if result is None:
        return
    model, info = result
    torch.save({"state": model.state_dict(), "info": info, "args": vars(args)}, build / f"{NAME}.pt")
    export(args, model, info, train_units, held_units, log)


if __name__ == "__main__":
    main()
