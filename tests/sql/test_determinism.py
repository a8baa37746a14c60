"""Results are a function of the inputs alone: the same bits on every run,
for every relattn_threads() value, however fast relattn_scan is read (and so
however it packs rows into forward passes), and the scan the same bits as
the scalar functions. Within one OpenBLAS kernel set this is exact equality,
never a tolerance (across kernel sets see test_kernel_sets.py).

The rows mix short sequences (packed several to a pass by the scan) with long
ones (several row blocks and attention query blocks each), so both the
packing and the split of a sequence into tasks are exercised."""
import ctypes
import os
import sqlite3
import time

import numpy as np
import pytest

import modelgen
import reference_model as ref_model
from conftest import connect

THREADS = (1, 2, 4, 8)


def corpus(db, rng, short=60, long=6):
    """docs(id, body): token BLOBs of 1-40 and 130-600 tokens, shuffled."""
    lens = [int(n) for n in rng.integers(1, 41, short)]
    lens += [int(n) for n in rng.integers(130, 601, long)]
    rng.shuffle(lens)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.executemany("INSERT INTO docs(body) VALUES (?)",
                   [(rng.integers(0, 256, n).astype("<i4").tobytes(),) for n in lens])
    return lens


def model(db, rng, **kw):
    # Big enough that OpenBLAS takes both its small-matrix and its blocked
    # paths (M N K around 10^6 and over).
    cfg = modelgen.config(d_model=64, n_heads=4, d_ff=256, n_layers=2, clip=8, **kw)
    modelgen.load(db, "m", cfg, rng)
    return cfg


def scalar(db):
    return db.execute(
        "SELECT id, relattn_score('m', body), relattn_perplexity('m', body), "
        "relattn_embed('m', body) FROM docs ORDER BY id").fetchall()


def scan_fast(db):
    return db.execute("SELECT id, score, perplexity, embedding FROM temp.job").fetchall()


def scan_slow(db):
    # A few rows, a pause (the workers run ahead of the reader), the rest.
    cur = db.execute("SELECT id, score, perplexity, embedding FROM temp.job")
    head = cur.fetchmany(3)
    time.sleep(0.2)
    mid = cur.fetchmany(7)
    time.sleep(0.1)
    return head + mid + cur.fetchall()


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"row {i}: {x[:3]} != {y[:3]}"
    return f"lengths {len(a)} != {len(b)}" if len(a) != len(b) else None


def test_scalar_functions_same_bits_for_any_thread_count(db, rng):
    model(db, rng)
    corpus(db, rng)
    ref = None
    for t in THREADS + (1,):
        db.execute("SELECT relattn_threads(?)", (t,))
        got = scalar(db)
        assert all(r[1] is not None and np.isfinite(r[1]) for r in got)
        if ref is None:
            ref = got
        assert got == ref, f"threads={t}: {first_difference(got, ref)}"


def test_table_functions_same_bits_for_any_thread_count(db, rng):
    model(db, rng)
    # 393 tokens + BOS: 6 blocks of 64 rows and a tail of 10 when a sequence
    # is split by thread count (small tails take OpenBLAS's small-matrix path).
    body = rng.integers(0, 256, 393).astype("<i4").tobytes()
    ref = None
    for t in THREADS + (1,):
        db.execute("SELECT relattn_threads(?)", (t,))
        lp = db.execute("SELECT * FROM relattn_logprobs('m', ?)", (body,)).fetchall()
        aw = db.execute("SELECT * FROM relattn_attention_weights('m', ?) "
                        "WHERE layer = 1 AND head = 2", (body,)).fetchall()
        assert len(lp) == 393 and len(aw) == 394 * 395 // 2
        if ref is None:
            ref = (lp, aw)
        assert lp == ref[0], f"logprobs, threads={t}: {first_difference(lp, ref[0])}"
        assert aw == ref[1], f"attention_weights, threads={t}"


def test_scan_same_bits_as_scalar_any_threads_and_pace(db, rng):
    model(db, rng)
    corpus(db, rng)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', "
               "source='docs', tokens='body')")
    db.execute("SELECT relattn_threads(1)")
    ref = scalar(db)
    for t in THREADS:
        db.execute("SELECT relattn_threads(?)", (t,))
        for read in (scan_fast, scan_slow):
            got = read(db)
            assert got == ref, f"threads={t} {read.__name__}: {first_difference(got, ref)}"


def test_scan_same_bits_for_embedding_alone_and_encoder(db, rng):
    # Without the LM head (embedding only) and for an encoder (no mask): the
    # same rule, other code paths.
    model(db, rng, arch="encoder", bos=None)
    corpus(db, rng, short=30, long=3)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', "
               "source='docs', tokens='body')")
    db.execute("SELECT relattn_threads(1)")
    ref = db.execute("SELECT id, relattn_embed('m', body) FROM docs ORDER BY id").fetchall()
    for t in (2, 8):
        db.execute("SELECT relattn_threads(?)", (t,))
        got = db.execute("SELECT id, embedding FROM temp.job").fetchall()
        assert got == ref, f"threads={t}: {first_difference(got, ref)}"
        got = db.execute("SELECT id, relattn_embed('m', body) FROM docs ORDER BY id").fetchall()
        assert got == ref, f"scalar, threads={t}: {first_difference(got, ref)}"


@pytest.mark.parametrize("position", [
    {"type": "t5", "num_buckets": 16, "max_distance": 64},
    {"type": "rope", "rotary_dim": 8},
    {"type": "rel_key_query", "max_position_embeddings": 700},
    {"type": "xl", "clip": 24}])
def test_scan_same_bits_for_other_position_schemes(db, rng, position):
    # The terms of a scheme other than shaw are built per sequence (t5's
    # bucket map, RoPE's angles): packed or alone, any thread count, the
    # same bits.
    model(db, rng, position=position)
    corpus(db, rng, short=30, long=3)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', "
               "source='docs', tokens='body')")
    db.execute("SELECT relattn_threads(1)")
    ref = scalar(db)
    for t in (2, 8):
        db.execute("SELECT relattn_threads(?)", (t,))
        got = scan_fast(db)
        assert got == ref, f"threads={t}: {first_difference(got, ref)}"
        got = scalar(db)
        assert got == ref, f"scalar, threads={t}: {first_difference(got, ref)}"


@pytest.mark.parametrize("options", [
    {"norm_kind": "rmsnorm", "biases": False, "ffn": "gated",
     "activation": "gelu_tanh"},
    {"norm": "post", "embedding": {"norm": True, "token_types": 2},
     "vocab_size": 260, "sep": 259}])
def test_scan_same_bits_with_forward_options(db, rng, options):
    # The forward pass's options (T5-like, BERT-like): the gate's rows share
    # the block buffer, the embedding's type switches per sequence; packed
    # or alone, any thread count, the same bits.
    model(db, rng, **options)
    corpus(db, rng, short=30, long=3)
    rows = db.execute("SELECT id, body FROM docs").fetchall()
    for i, body in rows[::2] if "sep" in options else []:  # a sep in every other row
        t = np.frombuffer(body, "<i4").copy()
        t[int(rng.integers(0, len(t)))] = 259
        db.execute("UPDATE docs SET body = ? WHERE id = ?", (t.tobytes(), i))
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', "
               "source='docs', tokens='body')")
    db.execute("SELECT relattn_threads(1)")
    ref = scalar(db)
    for t in (2, 8):
        db.execute("SELECT relattn_threads(?)", (t,))
        got = scan_fast(db)
        assert got == ref, f"threads={t}: {first_difference(got, ref)}"
        got = scalar(db)
        assert got == ref, f"scalar, threads={t}: {first_difference(got, ref)}"


@pytest.mark.parametrize("mode", ["float32", "int8", "bf16"])
def test_scan_same_bits_for_a_classifier_packed_or_alone(db, rng, mode):
    # Short rows share the layers' products when every row's product is its
    # own (src/forward.c, TILES: the float32 kernel and the int8 and bf16
    # ones), the final row 0 of every classified row too; the scan reads
    # labels alone (the row-0 path alone), then with the embedding (every
    # final row besides), and gives the scalar functions' bits either way.
    cfg = ref_model.with_head(ref_model.random_config(rng, arch="encoder", bos=False, d_model=64,
                                                      n_heads=4, d_ff=256),
                              "classifier", pooler="tanh", labels=["a", "b", "c"])
    params = ref_model.random_params(rng, cfg)
    # logits four times as far apart: a random classifier's rows are then
    # clear of the uniform third (once in CI a max prob was under 0.34)
    params["classifier.weight"] = params["classifier.weight"] * 4
    db.execute("SELECT relattn_import(?, ?)", ("m" if mode == "float32" else "f",
               ref_model.safetensors_bytes(params, cfg)))
    if mode != "float32":
        db.execute("SELECT relattn_quantize('f', 'm', ?)", (mode,))
    corpus(db, rng, short=40, long=3)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', "
               "source='docs', tokens='body')")
    db.execute("SELECT relattn_threads(1)")
    labels = db.execute(
        "SELECT id, relattn_classify('m', body), (SELECT max(prob) FROM relattn_labels('m', body)) "
        "FROM docs ORDER BY id").fetchall()
    embeddings = db.execute("SELECT id, relattn_embed('m', body) FROM docs ORDER BY id").fetchall()
    assert len({r[1] for r in labels}) > 1 and all(0.34 < r[2] < 1 for r in labels)
    both = [a + b[1:] for a, b in zip(labels, embeddings)]
    for t in (1, 2, 8):
        db.execute("SELECT relattn_threads(?)", (t,))
        got = db.execute("SELECT id, label, prob FROM temp.job").fetchall()
        assert got == labels, f"threads={t}: {first_difference(got, labels)}"
        got = db.execute("SELECT id, label, prob, embedding FROM temp.job").fetchall()
        assert got == both, f"threads={t}: {first_difference(got, both)}"


@pytest.mark.parametrize("mode", ["int8", "bf16"])
@pytest.mark.parametrize("tie", [True, False])
def test_quantized_output_embedding_same_bits_for_any_thread_count(db, rng, mode, tie):
    # The quantized embedding tables (int8: the output projection an int8
    # product over tok_emb or lm_head, each row of activations quantized on
    # its own): log-probs over row blocks split by thread count, the masked
    # LM's k best fills, generation's cached steps.
    cfg = modelgen.config(d_model=64, n_heads=4, d_ff=256, n_layers=2, clip=8,
                          tie_embeddings=tie)
    modelgen.load(db, "f", cfg, rng)
    db.execute("SELECT relattn_quantize('f', 'm', ?)", (mode,))
    fill = dict(cfg, arch="encoder", head="mlm", tokenizer=dict(cfg["tokenizer"], mask=258))
    modelgen.load(db, "ff", fill, rng)
    db.execute("SELECT relattn_quantize('ff', 'fm', ?)", (mode,))
    body = rng.integers(0, 256, 393).astype("<i4")
    masked = body.copy()
    masked[rng.integers(0, 393, 60)] = 258
    prompt = rng.integers(0, 256, 9).astype("<i4").tobytes()
    ref = None
    for t in THREADS + (1,):
        db.execute("SELECT relattn_threads(?)", (t,))
        got = (db.execute("SELECT * FROM relattn_logprobs('m', ?)", (body.tobytes(),)).fetchall(),
               db.execute("SELECT * FROM relattn_logprobs('fm', ?, 5)",
                          (masked.tobytes(),)).fetchall(),
               db.execute("SELECT token, logprob FROM relattn_generate_tokens('m', ?, "
                          "'{\"max_new_tokens\": 12, \"eos_token_id\": null, "
                          "\"num_beams\": 3}')", (prompt,)).fetchall())
        assert len(got[0]) == 393 and len(got[1]) > 5 * 40 and len(got[2]) == 12
        if ref is None:
            ref = got
        for a, b, what in zip(got, ref, ("logprobs", "fills", "generate")):
            assert a == b, f"{what}, threads={t}: {first_difference(a, b)}"


def test_same_bits_across_connections(tmp_path, rng):
    # A second connection (fresh cache, fresh pool, fresh scratch) gives the
    # same bits as the first: nothing carries over from earlier calls.
    path = str(tmp_path / "d.db")
    db = connect(path)
    model(db, rng)
    corpus(db, rng, short=20, long=2)
    db.commit()
    db.execute("SELECT relattn_threads(2)")
    a = scalar(db)
    db.close()
    db = connect(path)
    db.execute("SELECT relattn_threads(3)")
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', "
               "source='docs', tokens='body')")
    b = scan_slow(db)
    c = scalar(db)
    db.close()
    assert a == b == c


def test_openblas_threads_restored_around_scan(db, rng):
    # OpenBLAS's thread count is process-wide and may belong to the host
    # (numpy here): a scan sets it to 1 while it runs and puts the host's
    # value back when it ends, read here while the scan is open and after.
    blas = ctypes.CDLL("libopenblas.so.0")
    before = blas.openblas_get_num_threads()
    model(db, rng)
    corpus(db, rng, short=20, long=0)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', "
               "source='docs', tokens='body')")
    try:
        blas.openblas_set_num_threads(2)
        cur = db.execute("SELECT id, score FROM temp.job")
        assert len(cur.fetchmany(5)) == 5
        assert blas.openblas_get_num_threads() == 1        # while open
        rest = cur.fetchall()
        assert len(rest) == 15
        assert blas.openblas_get_num_threads() == 2        # after it ends
        cur = db.execute("SELECT id, score FROM temp.job")
        cur.fetchmany(2)
        assert blas.openblas_get_num_threads() == 1
        cur.close()                                        # closed early
        del cur
        db.execute("SELECT 1").fetchall()
        assert blas.openblas_get_num_threads() == 2
        db.execute("INSERT INTO docs(id, body) VALUES (1000, x'')")  # ends in an error
        with pytest.raises(sqlite3.OperationalError) as e:
            db.execute("SELECT id, score FROM temp.job").fetchall()
        assert str(e.value) == "relattn_scan: body of id 1000 is empty"
        assert blas.openblas_get_num_threads() == 2
    finally:
        blas.openblas_set_num_threads(before)


def test_debug_names_the_kernel_set(db):
    # relattn_debug() says which OpenBLAS kernel set this process runs (the
    # one make test forces with OPENBLAS_CORETYPE in its reruns).
    blas = ctypes.CDLL("libopenblas.so.0")
    blas.openblas_get_corename.restype = ctypes.c_char_p
    core = blas.openblas_get_corename().decode()
    line = [x for x in db.execute("SELECT relattn_debug()").fetchone()[0].split("\n")
            if x.startswith("blas: ")][0]
    assert f" {core} " in line, (core, line)
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if forced:
        assert core.lower() == forced.lower(), (core, forced)
