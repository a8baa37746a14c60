"""relattn_max_memory counts what a call may hold: the forward pass's
activations, and on every worker thread its block buffer (FFN hidden rows or
a block of logits) and the attention kernel's scratch, which grows with
min(clip, n) (an int8 DeBERTa's: with its tables' int8 products). The scalar functions run on relattn_threads() workers of the
connection's pool, relattn_scan on as many workers with a pool each.

The expected byte counts are written here from how src/forward.c and
src/attention.c lay out their buffers (the sizes in their comments): a call
over the bound is refused with the exact text and that count; a bound of
exactly that count lets it run."""
import sqlite3

import numpy as np
import pytest

import modelgen
import reference_model as ref

ROWS_MIN, ROWS_MAX = 64, 256     # src/forward.c: row blocks
BLOCK_Q, BLOCK_K = 256, 512      # src/attention.c: query and key blocks
BATCH_TOKENS, BATCH_ROWS = 256, 16  # ext/scan.c: rows per forward pass


def r16(x):
    return (x + 15) // 16 * 16


def activations(cfg, n, count):
    """Worker 0's buffers, bytes: x, h (n, d), qkv (n, 3d), sequence starts,
    the block list; the final row 0's x1, h1 (count, d) and its block list;
    the tiles the layers' row-wise steps run on (a block list with room for
    the row-0 path's)."""
    d = cfg["d_model"]
    blocks = n // ROWS_MIN + count
    return 4 * (5 * r16(n * d) + r16(count) + r16(3 * blocks)
                + 2 * r16(count * d) + r16(3 * count) + r16(3 * (blocks + count)))


def per_worker(cfg, n):
    """One worker's bytes: a block of min(n, 256) rows of max(d_ff, vocab)
    floats, and the attention kernel's scratch for a sequence of n rows."""
    block = 4 * r16(min(n, ROWS_MAX) * max(cfg["d_ff"], cfg["vocab_size"]))
    dh = cfg["d_model"] // cfg["n_heads"]
    bq = min(n, BLOCK_Q)
    rows = 2 * min(cfg["position"]["clip"], n - 1) + 1
    tables = 2 if cfg["position"]["values"] else 1
    # and a key block (or the table's rows) in the product kernel's panel order
    attn = 4 * (bq * BLOCK_K + bq * dh + tables * bq * rows + 5 * bq
                + (max(BLOCK_K, rows) + 32) * dh)
    return block + attn


def scalar_need(cfg, n_tokens, threads, extra):
    n = n_tokens + 1  # BOS
    return activations(cfg, n, 1) + threads * per_worker(cfg, n) + extra


def scan_need(cfg, n_tokens, threads):
    rows = max(n_tokens + 1, BATCH_TOKENS)
    one = activations(cfg, rows, BATCH_ROWS) + per_worker(cfg, rows) + 4 * rows
    return threads * one


def refused(db, sql, args=()):
    with pytest.raises(sqlite3.DataError) as e:
        db.execute(sql, args).fetchall()
    return str(e.value)


@pytest.fixture
def big_vocab(db, rng):
    # The block buffer dominates with a large vocabulary: 256 rows of 4096
    # floats is 4 MiB a worker.
    cfg = modelgen.config(vocab_size=4096, d_model=32, n_heads=2, d_ff=64,
                          n_layers=1, clip=40)
    modelgen.load(db, "m", cfg, rng)
    return cfg


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_scalar_bound_counts_every_worker_and_the_attention(db, rng, big_vocab, threads):
    cfg = big_vocab
    tokens = rng.integers(0, 256, 299).astype("<i4").tobytes()
    db.execute("SELECT relattn_threads(?)", (threads,))
    free = db.execute("SELECT relattn_score('m', ?)", (tokens,)).fetchone()[0]
    need = scalar_need(cfg, 299, threads, extra=4 * 300)  # + the log-probs
    db.execute("SELECT relattn_max_memory(?)", (need - 1,))
    assert refused(db, "SELECT relattn_score('m', ?)", (tokens,)) == (
        f"relattn_score: needs {need} bytes, over the limit of {need - 1} per call "
        "(relattn_max_memory)")
    db.execute("SELECT relattn_max_memory(?)", (need,))
    assert db.execute("SELECT relattn_score('m', ?)", (tokens,)).fetchone()[0] == free
    # the embedding's extra is its vector; the same scratch
    need = scalar_need(cfg, 299, threads, extra=4 * cfg["d_model"])
    db.execute("SELECT relattn_max_memory(?)", (need - 1,))
    assert refused(db, "SELECT relattn_embed('m', ?)", (tokens,)) == (
        f"relattn_embed: needs {need} bytes, over the limit of {need - 1} per call "
        "(relattn_max_memory)")
    db.execute("SELECT relattn_max_memory(?)", (need,))
    assert len(db.execute("SELECT relattn_embed('m', ?)", (tokens,)).fetchone()[0]) == 128


def test_scalar_bound_grows_with_threads_and_clip(db, rng):
    # Each worker past the first adds its block buffer and attention scratch;
    # the scratch grows with min(clip, n), not with n past the clip.
    def need(clip, threads, n):
        cfg = modelgen.config(vocab_size=1024, d_model=32, n_heads=2, d_ff=64,
                              n_layers=1, clip=clip)
        modelgen.load(db, f"c{clip}", cfg, rng)
        db.execute("SELECT relattn_threads(?)", (threads,))
        db.execute("SELECT relattn_max_memory(1048576)")
        msg = refused(db, f"SELECT relattn_embed('c{clip}', ?)",
                      (rng.integers(0, 256, n).astype("<i4").tobytes(),))
        db.execute("SELECT relattn_max_memory(1 << 31)")
        return int(msg.split("needs ")[1].split()[0])
    one, eight = need(4, 1, 600), need(4, 8, 600)
    assert eight - one == 7 * (4 * 256 * 1024 + 4 * (256 * 512 + 256 * 16 + 2 * 256 * 9 + 5 * 256
                                                    + (512 + 32) * 16))
    # clip 4 -> 100 at n = 600: two tables of 256 x (2 clip + 1) floats more per worker
    assert need(100, 8, 600) - eight == 8 * 4 * 2 * 256 * (201 - 9)


@pytest.mark.parametrize("threads", [1, 3])
def test_scan_bound_counts_every_worker_and_the_attention(db, rng, big_vocab, threads):
    cfg = big_vocab
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.execute("INSERT INTO docs VALUES (1, ?)", (rng.integers(0, 256, 20).astype("<i4").tobytes(),))
    db.execute("INSERT INTO docs VALUES (2, ?)", (rng.integers(0, 256, 599).astype("<i4").tobytes(),))
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', source='docs', "
               "tokens='body')")
    db.execute("SELECT relattn_threads(?)", (threads,))
    free = db.execute("SELECT id, score FROM temp.job").fetchall()
    need = scan_need(cfg, 599, threads)
    db.execute("SELECT relattn_max_memory(?)", (need - 1,))
    assert refused(db, "SELECT id, score FROM temp.job") == (
        f"relattn_scan: body of id 2: needs {need} bytes, over the limit of {need - 1} "
        "per call (relattn_max_memory)")
    # the short row before it fits (it is charged a whole batch of tokens)
    assert db.execute("SELECT id, score FROM temp.job WHERE id = 1").fetchall() == free[:1]
    db.execute("SELECT relattn_max_memory(?)", (need,))
    assert db.execute("SELECT id, score FROM temp.job").fetchall() == free


def test_int8_deberta_counts_its_tables_products(db, rng):
    """An int8 DeBERTa against its float32 model, per worker: the int8
    linear layers' scratch (src/qgemm.c: a block of 256 rows of the widest
    input, bytes) and, in the attention kernel's, what the int8 c2p/p2c
    tables' products take instead of the float ones' (src/attention.c): P
    and each chunk's G up to 31 rows wider (a product starts at its panel),
    no chunk of float keys, and qgemm's scratch for max(bq, 64) rows of
    d_head, 64-byte aligned."""
    cfg = ref.random_config(rng, arch="encoder", norm="post", bos=False, d_model=64, n_heads=4,
                            d_ff=2048, n_layers=2,
                            position={"type": "deberta", "position_buckets": 64,
                                      "max_relative_positions": 256})
    db.execute("SELECT relattn_import('f', ?)",
               (ref.safetensors_bytes(ref.random_params(rng, cfg), cfg),))
    db.execute("SELECT relattn_quantize('f', 'q', 'int8')")

    def need(model, n, threads):
        db.execute("SELECT relattn_threads(?)", (threads,))
        db.execute("SELECT relattn_max_memory(1048576)")
        msg = refused(db, f"SELECT relattn_embed('{model}', ?)",
                      (rng.integers(0, 256, n).astype("<i4").tobytes(),))
        db.execute("SELECT relattn_max_memory(1 << 31)")
        return int(msg.split("needs ")[1].split()[0])

    def up(x, m):
        return (x + m - 1) // m * m

    def q8_scratch(rows, width):   # relattn_q8_scratch
        return up(rows, 8) * 8 + rows * up(width, 64)

    dh, chunks = 16, BLOCK_K // 64
    for n, threads in ((260, 1), (300, 2), (600, 3)):
        bq = min(n, BLOCK_Q)
        attn = 4 * (bq * 31 + chunks * 31 * 64 - 64 * dh
                    + q8_scratch(max(bq, 64), dh) // 4 + 16)
        assert need("q", n, threads) - need("f", n, threads) == \
            threads * (q8_scratch(ROWS_MAX, 2048) + attn)
