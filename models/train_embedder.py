#!/usr/bin/python3
"""Trains a small sentence encoder for retrieval: a query finds the paragraph it describes.

    /usr/bin/python3 models/train_embedder.py [--out models/embed-manuals]

The pairs come from this machine's own text (models/embed_data.py): a Debian package's one-line
summary against the start of its long description, and a manual page's NAME line against the
start of its DESCRIPTION. A seeded share of the source packages is held out whole.

The encoder is a bare DeBERTa-v3-style encoder, Hugging Face's DebertaV2Model (the modules of
models/deberta_classifier.py without the pooler and classifier), with a SentencePiece unigram
tokenizer trained on the training pairs (case folded: nmt_nfkc_cf). A text's vector is the mean
of its final hidden rows over every input row, [CLS] and [SEP] included: what
relattn_embed(model, text) computes. It is trained with InfoNCE and in-batch negatives (van den
Oord et al. 2018; as in DPR, Karpukhin et al. 2020, and SimCSE, Gao et al. 2021): in a batch of
B pairs, each query's own document is the answer among the B documents and each document's
query among the B queries, on cosine similarity over a temperature.

It writes into --out what Hugging Face's save_pretrained writes for a DebertaV2Model and its
DebertaV2Tokenizer (config.json, model.safetensors, spm.model, tokenizer_config.json,
special_tokens_map.json, added_tokens.json), and:

    heldout.csv  the held-out pairs: id, kind, name, query, document
    train.json   what the run did: data sizes, settings, time, the held-out curve (PyTorch)
"""
import argparse
import csv
import json
import math
import os
import pathlib
import random
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import embed_data  # noqa: E402
import train_deberta as td  # noqa: E402

PAD, CLS, SEP = td.PAD, td.CLS, td.SEP


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default=str(HERE / "embed-manuals"), help="the output directory")
    ap.add_argument("--vocab", type=int, default=2000, help="SentencePiece pieces ([MASK] comes after them)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=256)
    ap.add_argument("--max-chars", type=int, default=400, help="a document's length, at most")
    ap.add_argument("--heldout", type=float, default=0.12, help="the share of source packages held out")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=None, help="stop after this many steps (a quick run)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--temperature", type=float, default=0.05)
    ap.add_argument("--crop", type=float, default=0.3,
                    help="the share of documents cut to a random window of their tokens each epoch")
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--threads", type=int, default=2)
    return ap.parse_args(argv)


def encoder_config(dc, vocab_size, args):
    """config.json of a bare DebertaV2Model with DeBERTa-v3's settings."""
    cfg = dc.hf_config(vocab_size, ["x"], hidden_size=args.hidden, num_hidden_layers=args.layers,
                       num_attention_heads=args.heads, intermediate_size=args.intermediate)
    for k in ("id2label", "label2id", "problem_type", "pooler_dropout", "pooler_hidden_act",
              "pooler_hidden_size"):
        del cfg[k]
    cfg["architectures"] = ["DebertaV2Model"]
    return cfg


def mean_pool(torch, x, mask):
    """x [b, n, d], mask [b, n] -> [b, d]: the mean over every token of the attention mask,
    [CLS] and [SEP] included: sentence-transformers' mean, and relattn_embed's. (The committed
    model was trained when relattn's mean left [CLS] out; its card gives the figures with this
    one.)"""
    m = mask.to(x.dtype)
    return (x * m[..., None]).sum(1) / m.sum(1, keepdim=True)


def embed(torch, model, seqs, size=64):
    """[n, d] float32 mean-pooled vectors of token id lists (each [CLS] ... [SEP]), in eval mode."""
    model.eval()
    out = [None] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    with torch.inference_mode():
        for s in range(0, len(order), size):
            idx = order[s:s + size]
            ids, mask = collate(torch, [seqs[i] for i in idx])
            v = mean_pool(torch, model(ids, mask), mask)
            for i, row in zip(idx, v):
                out[i] = row
    return torch.stack(out)


def collate(torch, seqs):
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), PAD, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, :len(s)] = torch.tensor(s)
        mask[r, :len(s)] = 1
    return ids, mask


def retrieval(torch, q, d, k=10):
    """(recall@k, MRR@k) of queries q [n, dim] against documents d [n, dim], pair i the answer of
    query i, by cosine similarity."""
    q = torch.nn.functional.normalize(q.double(), dim=-1)
    d = torch.nn.functional.normalize(d.double(), dim=-1)
    sim = q @ d.T
    rank = (sim > sim.diagonal()[:, None]).sum(1) + 1
    hit = rank <= k
    return hit.double().mean().item(), torch.where(hit, 1.0 / rank.double(), 0.0).mean().item()


def crop(seqs, share, rng):
    out = []
    for s in seqs:
        inner = s[1:-1]
        if len(inner) > 16 and rng.random() < share:
            n = rng.randint(16, len(inner))
            b = rng.randint(0, len(inner) - n)
            s = [CLS] + inner[b:b + n] + [SEP]
        out.append(s)
    return out


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    import deberta_classifier as dc
    import sentencepiece as spm

    torch.set_num_threads(args.threads)
    t0 = time.time()
    train, held = embed_data.split(embed_data.pairs(args.max_chars), args.seed, args.heldout)
    model_proto = td.train_tokenizer([t for p in train for t in (p[3], p[4])], args.vocab,
                                     normalization="nmt_nfkc_cf")
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    encode = lambda t: [CLS] + sp.encode(t) + [SEP]
    tq, td_ = [encode(p[3]) for p in train], [encode(p[4]) for p in train]
    hq, hd = [encode(p[3]) for p in held], [encode(p[4]) for p in held]
    longest = max(len(x) for x in tq + td_ + hq + hd)
    kinds = {k: sum(p[0] == k for p in train) for k in ("package", "manual")}
    print(f"{len(train)} training pairs ({kinds}), {len(held)} held out; longest {longest} tokens",
          flush=True)

    cfg = encoder_config(dc, sp.get_piece_size() + 1, args)
    torch.manual_seed(args.seed)
    model = dc.DebertaV2Model(cfg)
    dc.DebertaV2ForSequenceClassification.init_weights(model_with_config(model, cfg),
                                                        torch.Generator().manual_seed(args.seed))

    rng = random.Random(args.seed)
    per_epoch = len(train) // args.batch
    total = args.steps or args.epochs * per_epoch
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embeddings" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embeddings" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-6)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / args.warmup, max(0.0, (total - s) / max(1, total - args.warmup))))
    labels = torch.arange(args.batch)
    step, curve = 0, []
    while step < total:
        model.train()
        order = rng.sample(range(len(train)), len(train))
        docs = crop(td_, args.crop, rng)
        tot = 0.0
        for b in range(per_epoch):
            idx = order[b * args.batch:(b + 1) * args.batch]
            qi, qm = collate(torch, [tq[i] for i in idx])
            di, dm = collate(torch, [docs[i] for i in idx])
            q = torch.nn.functional.normalize(mean_pool(torch, model(qi, qm), qm), dim=-1)
            d = torch.nn.functional.normalize(mean_pool(torch, model(di, dm), dm), dim=-1)
            sim = q @ d.T / args.temperature
            loss = (torch.nn.functional.cross_entropy(sim, labels)
                    + torch.nn.functional.cross_entropy(sim.T, labels)) / 2
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            tot += loss.item()
            step += 1
            if step >= total:
                break
        r10, mrr = retrieval(torch, embed(torch, model, hq), embed(torch, model, hd))
        curve.append({"step": step, "minutes": round((time.time() - t0) / 60, 2),
                      "train_loss": round(tot / (b + 1), 4), "heldout_recall_at_10": round(r10, 4),
                      "heldout_mrr_at_10": round(mrr, 4)})
        print(f"step {step:5d}/{total}  {curve[-1]['minutes']:5.2f} min  loss {tot / (b + 1):.4f}  "
              f"held-out recall@10 {r10:.4f}  MRR@10 {mrr:.4f}", flush=True)

    model.eval()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    dc.write_safetensors(out / "model.safetensors", model.state_dict(), {"format": "pt"})
    (out / "spm.model").write_bytes(model_proto)
    for name, obj in td.tokenizer_files(sp.get_piece_size()).items():
        (out / name).write_text(json.dumps(obj, indent=2) + "\n")
    with open(out / "heldout.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "kind", "name", "query", "document"])
        for i, p in enumerate(held, 1):
            w.writerow([i, p[0], p[1], p[3], p[4]])

    again = load(out)
    r10, mrr = retrieval(torch, embed(torch, again, hq), embed(torch, again, hd))
    facts = {
        "source": "dpkg-query (Debian package descriptions) and /usr/share/man (" +
                  ", ".join(embed_data.SECTIONS) + ")",
        "pairs": {"train": len(train), "heldout": len(held),
                  "train_by_kind": kinds,
                  "heldout_by_kind": {k: sum(p[0] == k for p in held) for k in ("package", "manual")}},
        "tokens": {"train": sum(map(len, tq + td_)), "heldout": sum(map(len, hq + hd)), "longest": longest},
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": step, "minutes": round((time.time() - t0) / 60, 2),
        "torch": torch.__version__, "sentencepiece": spm.__version__,
        "heldout_recall_at_10": round(r10, 4), "heldout_mrr_at_10": round(mrr, 4),
        "curve": curve,
    }
    (out / "train.json").write_text(json.dumps(facts, indent=2) + "\n")
    print(f"held-out recall@10 {r10:.4f}, MRR@10 {mrr:.4f} (PyTorch); wrote {out}", flush=True)
    return facts


def model_with_config(model, cfg):
    """init_weights reads .config and .modules() only."""
    model.config = cfg
    return model


def load(directory):
    """The DebertaV2Model of a directory this script wrote, in eval mode."""
    import deberta_classifier as dc
    d = pathlib.Path(directory)
    model = dc.DebertaV2Model(json.loads((d / "config.json").read_text()))
    model.load_state_dict(dc.read_safetensors(d / "model.safetensors"))
    return model.eval()


if __name__ == "__main__":
    main()
