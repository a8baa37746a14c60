#!/usr/bin/python3
"""Trains a small DeBERTa-v3-style classifier: which licence a paragraph comes from.

    /usr/bin/python3 models/train_deberta.py [--out models/deberta-licenses]

The labelled table is built from this machine's own text: the paragraphs of six licences in
/usr/share/common-licenses (Debian's base-files: Apache-2.0, Artistic, GFDL-1.3, GPL-3,
LGPL-2.1, MPL-2.0), whitespace collapsed, paragraphs under 40 characters dropped, long ones cut
at sentence ends into passages of at most 600 characters. A passage whose text occurs in more
than one of the documents is dropped (it has no single answer). A seeded fifth of each
document's paragraphs is held out, whole (all of a paragraph's passages on the same side).

It trains a SentencePiece unigram tokenizer on the training passages (python3-sentencepiece,
DeBERTa-v3's special pieces: [PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3; [MASK] an added token, the last
id), then the model of models/deberta_classifier.py (Hugging Face's DebertaV2ForSequenceClassification
layout) on one thread with PyTorch, and writes into --out what Hugging Face's save_pretrained
writes for such a model and its DebertaV2Tokenizer:

    config.json  model.safetensors  spm.model  tokenizer_config.json
    special_tokens_map.json  added_tokens.json

and, for the SQL demo (sql/classify_demo.sql) and its test:

    heldout.csv  the held-out passages: id, label (the document), text
    train.json   what the run did: data sizes, settings, time, held-out accuracy per document

Input ids are Hugging Face's for one sequence: [CLS] + spm ids + [SEP].
"""
import argparse
import csv
import json
import math
import os
import pathlib
import random
import re
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
LICENSES = pathlib.Path("/usr/share/common-licenses")
DOCS = ("Apache-2.0", "Artistic", "GFDL-1.3", "GPL-3", "LGPL-2.1", "MPL-2.0")
PAD, CLS, SEP, UNK = 0, 1, 2, 3
SPECIAL = ("[PAD]", "[CLS]", "[SEP]", "[UNK]")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default=str(HERE / "deberta-licenses"), help="the output directory")
    ap.add_argument("--vocab", type=int, default=1000, help="SentencePiece pieces ([MASK] comes after them)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--steps", type=int, default=None, help="stop after this many steps (a quick run)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--max-chars", type=int, default=600, help="passages longer than this are cut")
    ap.add_argument("--crop", type=float, default=0.5,
                    help="the share of training examples cut to a random window of their tokens each epoch")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--threads", type=int, default=1)
    return ap.parse_args(argv)


# ---------------------------------------------------------------------------------------------
# Data


def passages(text, max_chars=600, min_chars=40):
    """[[passage, ...] per paragraph]: paragraphs (blank-line separated, whitespace collapsed, at
    least min_chars), long ones cut after sentence ends into pieces of at most max_chars."""
    out = []
    for p in re.split(r"\n[ \t]*\n", text):
        p = re.sub(r"\s+", " ", p).strip()
        if len(p) < min_chars:
            continue
        pieces, cur = [], ""
        for s in re.split(r"(?<=[.;:])\s+", p):
            if cur and len(cur) + 1 + len(s) > max_chars:
                pieces.append(cur)
                cur = s
            else:
                cur = f"{cur} {s}" if cur else s
        pieces.append(cur)
        if len(pieces) > 1 and len(pieces[-1]) < min_chars:
            last = pieces.pop()
            pieces[-1] += " " + last
        out.append(pieces)
    return out


def dataset(seed, max_chars, heldout=0.2):
    """(train, held) lists of (text, label index), and the document of each label."""
    per_doc = {doc: passages((LICENSES / doc).read_text(encoding="utf-8"), max_chars) for doc in DOCS}
    owners = {}
    for doc, paras in per_doc.items():
        for p in paras:
            for s in p:
                owners.setdefault(s, set()).add(doc)
    rng = random.Random(seed)
    train, held = [], []
    for label, doc in enumerate(DOCS):
        paras = per_doc[doc]
        out = set(rng.sample(range(len(paras)), max(1, round(heldout * len(paras)))))
        for i, p in enumerate(paras):
            for s in p:
                if len(owners[s]) == 1:
                    (held if i in out else train).append((s, label))
    train = list(dict.fromkeys(train))
    seen = {t for t, _ in train}
    held = [x for x in dict.fromkeys(held) if x[0] not in seen]
    return train, held


def train_tokenizer(texts, vocab, normalization="nmt_nfkc"):
    """A SentencePiece unigram model (bytes of spm.model) trained on texts, with DeBERTa-v3's
    special pieces at ids 0-3; normalization is SentencePiece's rule (nmt_nfkc_cf also folds case)."""
    import io
    import sentencepiece as spm
    f = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=f, vocab_size=vocab, model_type="unigram",
        pad_id=PAD, pad_piece=SPECIAL[PAD], bos_id=CLS, bos_piece=SPECIAL[CLS],
        eos_id=SEP, eos_piece=SPECIAL[SEP], unk_id=UNK, unk_piece=SPECIAL[UNK],
        character_coverage=1.0, num_threads=1, minloglevel=2, normalization_rule_name=normalization)
    return f.getvalue()


def tokenizer_files(vocab):
    """tokenizer_config.json, special_tokens_map.json, added_tokens.json as Hugging Face's
    DebertaV2Tokenizer.save_pretrained writes them; [MASK] is the added token at id vocab."""
    def tok(content):
        return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True}
    names = dict(enumerate(SPECIAL))
    names[vocab] = "[MASK]"
    config = {
        "added_tokens_decoder": {str(i): tok(c) for i, c in names.items()},
        "bos_token": "[CLS]", "clean_up_tokenization_spaces": True, "cls_token": "[CLS]",
        "do_lower_case": False, "eos_token": "[SEP]", "mask_token": "[MASK]",
        "model_max_length": 512, "pad_token": "[PAD]", "sep_token": "[SEP]",
        "sp_model_kwargs": {}, "split_by_punct": False, "tokenizer_class": "DebertaV2Tokenizer",
        "unk_token": "[UNK]", "vocab_type": "spm",
    }
    special = {"bos_token": "[CLS]", "cls_token": "[CLS]", "eos_token": "[SEP]", "mask_token": "[MASK]",
               "pad_token": "[PAD]", "sep_token": "[SEP]", "unk_token": "[UNK]"}
    return {"tokenizer_config.json": config, "special_tokens_map.json": special,
            "added_tokens.json": {"[MASK]": vocab}}


# ---------------------------------------------------------------------------------------------
# Training


def crop(exs, share, rng):
    """exs with a random share of them cut to a random window (at least 8 tokens) of their own
    tokens, [CLS] and [SEP] kept: a new view of the few passages there are, every epoch."""
    out = []
    for ids, y in exs:
        inner = ids[1:-1]
        if len(inner) > 8 and rng.random() < share:
            n = rng.randint(8, len(inner))
            s = rng.randint(0, len(inner) - n)
            ids = [CLS] + inner[s:s + n] + [SEP]
        out.append((ids, y))
    return out


def batches(torch, exs, size, rng):
    """Shuffled batches of examples of similar length: (ids [b, n], mask [b, n], labels [b])."""
    order = sorted(rng.sample(range(len(exs)), len(exs)), key=lambda i: len(exs[i][0]))
    groups = [order[i:i + size] for i in range(0, len(order), size)]
    rng.shuffle(groups)
    return [collate(torch, [exs[i] for i in g]) for g in groups]


def collate(torch, exs):
    n = max(len(ids) for ids, _ in exs)
    ids = torch.full((len(exs), n), PAD, dtype=torch.long)
    mask = torch.zeros((len(exs), n), dtype=torch.long)
    for r, (x, _) in enumerate(exs):
        ids[r, :len(x)] = torch.tensor(x)
        mask[r, :len(x)] = 1
    return ids, mask, torch.tensor([y for _, y in exs])


def predict(torch, model, exs, size=32):
    model.eval()
    out = []
    with torch.inference_mode():
        order = sorted(range(len(exs)), key=lambda i: len(exs[i][0]))
        pred = {}
        for s in range(0, len(order), size):
            idx = order[s:s + size]
            ids, mask, _ = collate(torch, [exs[i] for i in idx])
            for i, p in zip(idx, model(ids, mask).argmax(-1).tolist()):
                pred[i] = p
        out = [pred[i] for i in range(len(exs))]
    return out


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    sys.path.insert(0, str(HERE))
    import deberta_classifier as dc
    import sentencepiece as spm

    torch.set_num_threads(args.threads)
    t0 = time.time()
    train, held = dataset(args.seed, args.max_chars)
    model_proto = train_tokenizer([t for t, _ in train], args.vocab)
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    encode = lambda t: [CLS] + sp.encode(t) + [SEP]
    tr = [(encode(t), y) for t, y in train]
    he = [(encode(t), y) for t, y in held]
    longest = max(len(x) for x, _ in tr + he)
    print(f"{len(train)} training and {len(held)} held-out passages of {len(DOCS)} documents; "
          f"longest {longest} tokens", flush=True)

    cfg = dc.hf_config(sp.get_piece_size() + 1, list(DOCS), hidden_size=args.hidden,
                       num_hidden_layers=args.layers, num_attention_heads=args.heads,
                       intermediate_size=args.intermediate)
    torch.manual_seed(args.seed)
    model = dc.DebertaV2ForSequenceClassification(cfg)
    model.init_weights(torch.Generator().manual_seed(args.seed))

    rng = random.Random(args.seed)
    per_epoch = math.ceil(len(tr) / args.batch)
    total = args.steps or args.epochs * per_epoch
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embeddings" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embeddings" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-6)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / args.warmup, max(0.0, (total - s) / max(1, total - args.warmup))))
    step, curve = 0, []
    while step < total:
        model.train()
        tot_loss, seen = 0.0, 0
        for ids, mask, y in batches(torch, crop(tr, args.crop, rng), args.batch, rng):
            loss = torch.nn.functional.cross_entropy(model(ids, mask), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            tot_loss += loss.item() * len(y)
            seen += len(y)
            step += 1
            if step >= total:
                break
        acc = sum(p == y for p, (_, y) in zip(predict(torch, model, he), he)) / len(he)
        curve.append({"step": step, "minutes": round((time.time() - t0) / 60, 2),
                      "train_loss": round(tot_loss / seen, 4), "heldout_accuracy": round(acc, 4)})
        print(f"step {step:5d}/{total}  {curve[-1]['minutes']:5.2f} min  train loss "
              f"{tot_loss / seen:.4f}  held-out accuracy {acc:.4f}", flush=True)

    model.eval()
    out = pathlib.Path(args.out)
    dc.save_pretrained(model, out)
    (out / "spm.model").write_bytes(model_proto)
    for name, obj in tokenizer_files(sp.get_piece_size()).items():
        (out / name).write_text(json.dumps(obj, indent=2) + "\n")

    # the held-out accuracy of the weights as written (read back)
    again = dc.from_pretrained(out)
    pred = predict(torch, again, he)
    per_doc = {}
    for p, (_, y) in zip(pred, he):
        c = per_doc.setdefault(DOCS[y], [0, 0])
        c[0] += p == y
        c[1] += 1
    acc = sum(c[0] for c in per_doc.values()) / len(he)
    with open(out / "heldout.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "label", "text"])
        for i, (t, y) in enumerate(held, 1):
            w.writerow([i, DOCS[y], t])
    facts = {
        "documents": list(DOCS), "source": str(LICENSES),
        "passages": {"train": len(train), "heldout": len(held)},
        "tokens": {"train": sum(len(x) for x, _ in tr), "heldout": sum(len(x) for x, _ in he),
                   "longest": longest},
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": step, "minutes": round((time.time() - t0) / 60, 2),
        "torch": torch.__version__, "sentencepiece": spm.__version__,
        "heldout_accuracy": round(acc, 4),
        "heldout_accuracy_per_document": {d: f"{c[0]}/{c[1]}" for d, c in per_doc.items()},
        "curve": curve,
    }
    (out / "train.json").write_text(json.dumps(facts, indent=2) + "\n")
    print(f"held-out accuracy {acc:.4f} ({sum(c[0] for c in per_doc.values())}/{len(he)}); "
          f"wrote {out}", flush=True)
    return facts


if __name__ == "__main__":
    main()
