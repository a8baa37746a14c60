"""SentencePiece encoding: relattn's tokenizer against python3-sentencepiece
(its C++ core), single thread, on the tests' 10,000-line multilingual
corpus (tests/tok/corpus.py), interleaved, medians of the rounds.

  /usr/bin/python3 tests/bench/bench_tokenize.py relattn.so

relattn: SELECT relattn_tokenize(model, body) FROM corpus (one statement,
SQLite's per-row work and the per-call model lookup included), and the
same query on empty texts (the per-call cost alone); their difference is
the encoding. sentencepiece: sp.encode(lines, num_threads=1) (one batch
call into C++). Ratios above 1 mean relattn is faster."""
import io
import json
import pathlib
import statistics
import sqlite3
import sys
import time

import numpy as np
import sentencepiece as spm

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "tok"))
import corpus  # noqa: E402
import modelgen  # noqa: E402

ROUNDS = 7


def main(so):
    lines = corpus.lines(10000)
    texts = [b.decode("utf-8", "replace") for b in lines]
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    db.load_extension(so)
    db.execute("SELECT relattn_threads(1)")
    db.execute("CREATE TABLE corpus(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO corpus VALUES (?, ?)", enumerate(texts))
    print(f"{len(lines)} lines, {sum(len(b) for b in lines)} bytes; "
          f"medians of {ROUNDS} interleaved rounds, one thread")
    print(f"{'model':<14} {'relattn ms':>11} {'per-call ms':>12} "
          f"{'encode ms':>10} {'sp ms':>8} {'encode ratio':>13} "
          f"{'SQL ratio':>10}")
    for kind, size in (("unigram", 8000), ("bpe", 8000)):
        f = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts[::2]), model_writer=f, minloglevel=2,
            vocab_size=size, model_type=kind, character_coverage=0.9995,
            num_threads=1, byte_fallback=True)
        sp = spm.SentencePieceProcessor(model_proto=f.getvalue())
        cfg = modelgen.config(vocab_size=size, bos=None, eos=None, pad=None)
        cfg["tokenizer"] = {"type": "sentencepiece"}
        db.execute("SELECT relattn_import('s', ?, ?, ?)",
                   (modelgen.safetensors(cfg, np.random.default_rng(0)),
                    json.dumps(cfg), f.getvalue()))
        q = "SELECT relattn_tokenize('s', body) FROM corpus"
        q0 = "SELECT relattn_tokenize('s', '') FROM corpus"
        mine = [np.frombuffer(b, "<i4").tolist() for (b,) in db.execute(q)]
        assert mine == sp.encode(texts, num_threads=1), "ids differ"
        t_r, t_0, t_b = [], [], []
        for _ in range(ROUNDS):
            t = time.perf_counter()
            for _ in db.execute(q):
                pass
            t_r.append(time.perf_counter() - t)
            t = time.perf_counter()
            for _ in db.execute(q0):
                pass
            t_0.append(time.perf_counter() - t)
            t = time.perf_counter()
            sp.encode(texts, num_threads=1)
            t_b.append(time.perf_counter() - t)
        r, z, b = (statistics.median(x) * 1e3 for x in (t_r, t_0, t_b))
        print(f"{kind + ' ' + str(size):<14} {r:11.1f} {z:12.1f} {r - z:10.1f} "
              f"{b:8.1f} {b / (r - z):13.2f} {b / r:10.2f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "relattn.so"))
