#!/usr/bin/python3
"""Trains a small T5 (T5ForConditionalGeneration's layout) to put shuffled words back in order.

    /usr/bin/python3 models/train_t5.py [--out models/t5-unshuffle]

The text is this machine's own: the one-line summaries of the installed Debian packages (the
first line of each Description in /var/lib/dpkg/status), each once, of 3 to 12 words. A seeded
fifth is held out. The source is a summary's words in a random order (a new order each time a
training summary is seen), the target the summary itself.

It trains a SentencePiece unigram tokenizer on the training summaries (python3-sentencepiece,
T5's special pieces: <pad> 0, </s> 1, <unk> 2, no bos), then a small T5 (relu FFN, lm_head tied
to the shared embedding with T5's d_model^-0.5 scaling: the t5 config, not v1.1) written here in
PyTorch from the algorithm of transformers' modeling_t5.py, with Hugging Face's module names, so
its state_dict is what save_pretrained writes. It writes into --out what Hugging Face writes for
T5ForConditionalGeneration and its T5Tokenizer:

    config.json  model.safetensors (F16)  spiece.model  tokenizer_config.json

and, for the SQL demo (sql/unshuffle_demo.sql) and its test (tests/shell/test_t5_demo.py):

    heldout.csv  held-out summaries: id, shuffled, candidate, is_original (four candidate
                 orders per summary, the original among them, in a seeded order)
    train.json   what the run did: data sizes, settings, time, the held-out results

Held-out results, computed here in PyTorch on the weights as stored (rounded to F16): how often
the model's score ranks the original order first among the four candidates, and how often greedy
decoding gives the summary back.
"""
import argparse
import csv
import io
import json
import math
import pathlib
import random
import struct
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
STATUS = pathlib.Path("/var/lib/dpkg/status")
PAD, EOS, UNK = 0, 1, 2


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default=str(HERE / "t5-unshuffle"), help="the output directory")
    ap.add_argument("--vocab", type=int, default=800, help="SentencePiece pieces")
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2, help="encoder layers (the decoder's too)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-kv", type=int, default=32)
    ap.add_argument("--d-ff", type=int, default=256)
    ap.add_argument("--buckets", type=int, default=16)
    ap.add_argument("--max-distance", type=int, default=32)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=27)
    return ap.parse_args(argv)


def summaries():
    """The first Description line of every package, each text once, 3 to 12 words."""
    out = set()
    for line in STATUS.read_text(errors="replace").splitlines():
        if line.startswith("Description: "):
            text = " ".join(line[len("Description: "):].split())
            if 3 <= len(text.split()) <= 12:
                out.add(text)
    return sorted(out)


def shuffled(words, rng):
    """A random order of the words other than their own (when there is one)."""
    for _ in range(20):
        w = list(words)
        rng.shuffle(w)
        if w != list(words):
            return w
    return list(words)


# ---- the model: transformers' modeling_t5.py, its module names ----------------

def build_model(torch, V, a):
    nn = torch.nn
    F = torch.nn.functional

    def bucket(rel, bidirectional, nb, md):
        # T5Attention._relative_position_bucket
        b = torch.zeros_like(rel)
        if bidirectional:
            nb //= 2
            b = b + (rel > 0).long() * nb
            rel = rel.abs()
        else:
            rel = -torch.clamp(rel, max=0)
        exact = nb // 2
        small = rel < exact
        large = exact + (torch.log(rel.float().clamp(min=1) / exact) / math.log(md / exact)
                         * (nb - exact)).long()
        large = torch.clamp(large, max=nb - 1)
        return b + torch.where(small, rel, large)

    class Norm(nn.Module):          # T5LayerNorm: RMS, no bias, no mean
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class Attention(nn.Module):     # T5Attention: no biases, no 1/sqrt(d) scaling
        def __init__(self, bias, decoder):
            super().__init__()
            inner = a.heads * a.d_kv
            self.q = nn.Linear(a.d_model, inner, bias=False)
            self.k = nn.Linear(a.d_model, inner, bias=False)
            self.v = nn.Linear(a.d_model, inner, bias=False)
            self.o = nn.Linear(inner, a.d_model, bias=False)
            self.decoder = decoder
            if bias:
                self.relative_attention_bias = nn.Embedding(a.buckets, a.heads)

        def split(self, x):
            return x.view(x.shape[0], x.shape[1], a.heads, a.d_kv).transpose(1, 2)

        def forward(self, x, kv, position_bias):
            q, k, v = self.split(self.q(x)), self.split(self.k(kv)), self.split(self.v(kv))
            w = F.softmax((q @ k.transpose(-1, -2) + position_bias).float(), -1)
            z = (w @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
            return self.o(z)

        def bias(self, n, decoder):
            rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]
            b = bucket(rel, not decoder, a.buckets, a.max_distance)
            return self.relative_attention_bias(b).permute(2, 0, 1)[None]

    class SelfLayer(nn.Module):     # T5LayerSelfAttention
        def __init__(self, has_bias, decoder):
            super().__init__()
            self.SelfAttention = Attention(has_bias, decoder)
            self.layer_norm = Norm(a.d_model)

        def forward(self, x, bias):
            y = self.layer_norm(x)
            return x + self.SelfAttention(y, y, bias)

    class CrossLayer(nn.Module):    # T5LayerCrossAttention
        def __init__(self):
            super().__init__()
            self.EncDecAttention = Attention(False, True)
            self.layer_norm = Norm(a.d_model)

        def forward(self, x, enc, mask):
            return x + self.EncDecAttention(self.layer_norm(x), enc, mask)

    class Dense(nn.Module):         # T5DenseActDense (relu)
        def __init__(self):
            super().__init__()
            self.wi = nn.Linear(a.d_model, a.d_ff, bias=False)
            self.wo = nn.Linear(a.d_ff, a.d_model, bias=False)

        def forward(self, x):
            return self.wo(F.relu(self.wi(x)))

    class FFLayer(nn.Module):       # T5LayerFF
        def __init__(self):
            super().__init__()
            self.DenseReluDense = Dense()
            self.layer_norm = Norm(a.d_model)

        def forward(self, x):
            return x + self.DenseReluDense(self.layer_norm(x))

    class Block(nn.Module):
        def __init__(self, i, decoder):
            super().__init__()
            layers = [SelfLayer(i == 0, decoder)]
            if decoder:
                layers.append(CrossLayer())
            layers.append(FFLayer())
            self.layer = nn.ModuleList(layers)

    class Stack(nn.Module):
        def __init__(self, decoder):
            super().__init__()
            self.block = nn.ModuleList(Block(i, decoder) for i in range(a.layers))
            self.final_layer_norm = Norm(a.d_model)
            self.decoder = decoder

        def forward(self, x, self_mask, enc=None, cross_mask=None):
            n = x.shape[1]
            bias = self.block[0].layer[0].SelfAttention.bias(n, self.decoder) + self_mask
            for blk in self.block:
                x = blk.layer[0](x, bias)
                if self.decoder:
                    x = blk.layer[1](x, enc, cross_mask)
                x = blk.layer[-1](x)
            return self.final_layer_norm(x)

    class T5(nn.Module):            # T5ForConditionalGeneration, tied head
        def __init__(self):
            super().__init__()
            self.shared = nn.Embedding(V, a.d_model)
            self.encoder = Stack(False)
            self.decoder = Stack(True)

        def forward(self, src, dec_in):
            neg = torch.finfo(torch.float32).min
            keymask = (src == PAD)[:, None, None, :].float() * neg
            enc = self.encoder(self.shared(src), keymask)
            n = dec_in.shape[1]
            causal = torch.triu(torch.full((n, n), neg), 1)[None, None]
            x = self.decoder(self.shared(dec_in), causal, enc, keymask)
            return (x * a.d_model ** -0.5) @ self.shared.weight.T

    model = T5()
    # T5PreTrainedModel._init_weights (factor 1.0)
    with torch.no_grad():
        d, inner = a.d_model, a.heads * a.d_kv
        for name, p in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                continue
            if name == "shared.weight":
                std = 1.0
            elif name.endswith(".q.weight"):
                std = (d * a.d_kv) ** -0.5
            elif name.endswith((".k.weight", ".v.weight", "wi.weight", "relative_attention_bias.weight")):
                std = d ** -0.5
            elif name.endswith(".o.weight"):
                std = inner ** -0.5
            elif name.endswith("wo.weight"):
                std = a.d_ff ** -0.5
            else:
                raise ValueError(name)
            p.normal_(0.0, std)
    return model


def save_safetensors(path, tensors):
    """tensors: {name: float16 numpy array}, written as safetensors (header, then data)."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        b = tensors[name].astype("<f2").tobytes()
        header[name] = {"dtype": "F16", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main(argv=None):
    a = parse_args(argv)
    import numpy as np
    import sentencepiece as spm
    import torch
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = random.Random(a.seed)
    t0 = time.time()

    texts = summaries()
    order = list(range(len(texts)))
    rng.shuffle(order)
    n_held = len(texts) // 5
    held = sorted(texts[i] for i in order[:n_held])
    train = sorted(texts[i] for i in order[n_held:])

    f = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(train), model_writer=f, vocab_size=a.vocab,
        model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
        minloglevel=2, num_threads=1, pad_id=PAD, eos_id=EOS, unk_id=UNK, bos_id=-1,
        pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>")
    sp_bytes = f.getvalue()
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    V = sp.get_piece_size()

    def enc(text):
        return sp.encode(text) + [EOS]

    model = build_model(torch, V, a)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    words = [t.split() for t in train]

    def batch(items):
        src = [enc(" ".join(shuffled(w, rng))) for w in items]
        tgt = [enc(" ".join(w)) for w in items]
        S, T = max(map(len, src)), max(map(len, tgt))
        s = torch.full((len(items), S), PAD, dtype=torch.long)
        y = torch.full((len(items), T), -100, dtype=torch.long)
        d = torch.full((len(items), T), PAD, dtype=torch.long)
        for i, (x, t) in enumerate(zip(src, tgt)):
            s[i, :len(x)] = torch.tensor(x)
            y[i, :len(t)] = torch.tensor(t)
            d[i, 1:len(t)] = torch.tensor(t[:-1])   # _shift_right, start = pad
        return s, d, y

    history = []
    model.train()
    for step in range(1, a.steps + 1):
        lr = a.lr * min(1.0, step / a.warmup) * 0.5 * (1 + math.cos(math.pi * step / a.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        s, d, y = batch(rng.sample(words, a.batch))
        logits = model(s, d)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1),
                                                 ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 250 == 0:
            history.append({"step": step, "loss": round(loss.item(), 4)})
            print(f"step {step} loss {loss.item():.3f} {time.time() - t0:.0f}s", file=sys.stderr)

    # the weights as stored (F16), which the held-out results are of
    model.eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    # held out: four candidate orders each, the original among them
    hrng = random.Random(a.seed + 1)
    rows, ranked, exact = [], 0, 0

    def score(src_ids, tgt_ids):
        s = torch.tensor([src_ids])
        d = torch.tensor([[PAD] + tgt_ids[:-1]])
        lp = torch.log_softmax(model(s, d)[0].double(), -1)
        return lp[torch.arange(len(tgt_ids)), torch.tensor(tgt_ids)].sum().item()

    with torch.no_grad():
        for k, text in enumerate(held):
            w = text.split()
            src = " ".join(shuffled(w, hrng))
            cands = {text}
            for _ in range(40):
                if len(cands) == 4:
                    break
                cands.add(" ".join(shuffled(w, hrng)))
            cands = sorted(cands)
            hrng.shuffle(cands)
            scores = [score(enc(src), enc(c)) for c in cands]
            ranked += cands[int(np.argmax(scores))] == text
            for c in cands:
                rows.append((k + 1, src, c, int(c == text)))
            # greedy decoding
            s = torch.tensor([enc(src)])
            out = [PAD]
            for _ in range(3 * len(enc(text))):
                nxt = int(model(s, torch.tensor([out]))[0, -1].argmax())
                if nxt == EOS:
                    break
                out.append(nxt)
            exact += sp.decode(out[1:]) == text

    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().numpy().astype(np.float16) for k, v in model.state_dict().items()}
    save_safetensors(out / "model.safetensors", sd)
    (out / "spiece.model").write_bytes(sp_bytes)
    cfg = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5",
           "d_model": a.d_model, "d_kv": a.d_kv, "d_ff": a.d_ff, "num_layers": a.layers,
           "num_decoder_layers": a.layers, "num_heads": a.heads,
           "relative_attention_num_buckets": a.buckets,
           "relative_attention_max_distance": a.max_distance, "vocab_size": V,
           "feed_forward_proj": "relu", "layer_norm_epsilon": 1e-6,
           "decoder_start_token_id": PAD, "pad_token_id": PAD, "eos_token_id": EOS,
           "tie_word_embeddings": True, "is_encoder_decoder": True, "torch_dtype": "float16"}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tok_cfg = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>", "extra_ids": 0,
               "model_max_length": 512, "tokenizer_class": "T5Tokenizer", "legacy": True}
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    with open(out / "heldout.csv", "w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["id", "shuffled", "candidate", "is_original"])
        wr.writerows(rows)
    run = {"summaries": len(texts), "train": len(train), "heldout": len(held), "vocab": V,
           "settings": {k: v for k, v in vars(a).items() if k != "out"},
           "parameters": int(sum(p.numel() for p in model.parameters())),
           "seconds": round(time.time() - t0, 1), "history": history,
           "heldout_original_ranked_first": round(ranked / len(held), 4),
           "heldout_greedy_exact": round(exact / len(held), 4),
           "torch": torch.__version__}
    (out / "train.json").write_text(json.dumps(run, indent=2) + "\n")
    print(json.dumps({k: run[k] for k in ("train", "heldout", "vocab", "parameters", "seconds",
                                          "heldout_original_ranked_first",
                                          "heldout_greedy_exact")}))


if __name__ == "__main__":
    main()
