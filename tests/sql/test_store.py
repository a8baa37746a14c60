"""relattn_import / relattn_export, the model tables, the weight cache.

Files are built by tests/safetensors_py.py (json + struct + numpy), which
shares no code with the extension."""
import hashlib
import json
import pathlib
import struct

import numpy as np
import pytest

import modelgen
import safetensors_py as sp
from conftest import ROOT, SO, connect


def counts(db):
    try:
        return db.execute("SELECT (SELECT count(*) FROM relattn_model), "
                          "(SELECT count(*) FROM relattn_tensor), "
                          "(SELECT group_concat(name || ':' || version || ':' || "
                          "coalesce(sha256, ''), ',') FROM relattn_model)").fetchone()
    except Exception:
        return None  # no tables yet


def snapshot(db):
    """Everything about the stored models, to assert 'unchanged'."""
    c = counts(db)
    if c is None:
        return None
    return c, db.execute("SELECT model, name, dtype, shape, hex(data) FROM "
                         "relattn_tensor ORDER BY rowid").fetchall()


def test_round_trip_bit_for_bit(db, rng):
    cfg = modelgen.config(n_layers=2, tie_embeddings=False, norm="pre")
    w = modelgen.tensors(cfg, rng)
    blob = modelgen.safetensors(cfg, weights=w)
    n = db.execute("SELECT relattn_import('m', ?)", (blob,)).fetchone()[0]
    assert n == len(w) == len(modelgen.shapes(cfg))
    out = db.execute("SELECT relattn_export('m')").fetchone()[0]
    got, meta = sp.read(out)
    assert list(got) == [name for name, _ in modelgen.shapes(cfg)]
    for name, a in w.items():
        assert got[name] == ("F32", list(a.shape), a.tobytes())
    assert json.loads(meta["relattn.config"]) == cfg
    # import(export(m)) gives back the same tensors, and the same sha256
    db.execute("SELECT relattn_import('m2', ?)", (out,))
    rows = db.execute("SELECT a.name, a.data = b.data, a.dtype = b.dtype, "
                      "a.shape = b.shape FROM relattn_tensor a JOIN "
                      "relattn_tensor b ON a.name = b.name "
                      "WHERE a.model = 'm' AND b.model = 'm2'").fetchall()
    assert len(rows) == len(w) and all(r[1] and r[2] and r[3] for r in rows)
    sha = db.execute("SELECT DISTINCT sha256 FROM relattn_model").fetchall()
    assert len(sha) == 1
    # the sha256 is of the tensor data in the stored order
    data = b"".join(w[name].tobytes() for name, _ in modelgen.shapes(cfg))
    assert sha[0][0] == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
def test_round_trip_half(db, rng, dtype):
    cfg = modelgen.config(n_layers=1)
    blob = modelgen.safetensors(cfg, rng, dtype=dtype)
    db.execute("SELECT relattn_import('h', ?)", (blob,))
    assert db.execute("SELECT DISTINCT dtype FROM relattn_tensor").fetchall() == [(dtype,)]
    out = db.execute("SELECT relattn_export('h')").fetchone()[0]
    a, _ = sp.read(blob)
    b, _ = sp.read(out)
    assert a == b


# ---- malformed files: each its own error, the database unchanged ----------

CFG = modelgen.config(d_model=16, n_heads=2, n_layers=1, d_ff=8, clip=2)


def good_parts(rng, cfg=CFG):
    w = modelgen.tensors(cfg, rng)
    return {k: ("F32", list(a.shape), a.tobytes()) for k, a in w.items()}


def meta(cfg=CFG):
    return {"relattn.config": json.dumps(cfg)}


def header_of(parts, cfg=CFG):
    """The header write() would make, as a dict to tamper with."""
    blob = sp.write(parts, metadata=meta(cfg))
    (n,) = struct.unpack_from("<Q", blob)
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def raw(header, data):
    text = json.dumps(header).encode() if isinstance(header, dict) else header
    return struct.pack("<Q", len(text)) + text + data


def case_truncated(rng):
    return sp.write(good_parts(rng), metadata=meta())[:5], (
        "relattn_import: safetensors_blob has 5 bytes, too short for a "
        "safetensors file (an 8-byte header length comes first)")


def case_header_past_end(rng):
    return struct.pack("<Q", 1000) + b'{"a":1}', (
        "relattn_import: safetensors_blob: header length 1000 runs past the "
        "end of the file (15 bytes)")


def case_header_length_huge(rng):
    return struct.pack("<Q", 2**64 - 1) + b"{}", (
        "relattn_import: safetensors_blob: header length 18446744073709551615 "
        "runs past the end of the file (10 bytes)")


def case_not_json(rng):
    return raw(b'{"tok_emb": {"dtype": "F32",', b""), (
        "relattn_import: safetensors header is not valid JSON")


def case_nul_in_header(rng):
    return raw(b'{}\x00{"x":1}', b""), (
        "relattn_import: safetensors header is not valid JSON")


def case_not_object(rng):
    return raw(b"[1, 2, 3]", b""), (
        "relattn_import: safetensors header is not a JSON object")


def tamper(rng, fn):
    h, data = header_of(good_parts(rng))
    r = fn(h, data)
    if r is not None:
        h, data = r
    return raw(h, data)


def case_unknown_dtype(rng):
    def f(h, d):
        h["layers.0.ln1.bias"]["dtype"] = "I32"
    return tamper(rng, f), (
        "relattn_import: tensor 'layers.0.ln1.bias' has dtype 'I32'; expected "
        "F32, F16 or BF16")


def case_negative_shape(rng):
    def f(h, d):
        h["layers.0.ln1.bias"]["shape"] = [-16]
    return tamper(rng, f), (
        "relattn_import: tensor 'layers.0.ln1.bias' has a negative dimension "
        "(-16) in its shape")


def case_overflowing_shape(rng):
    def f(h, d):
        h["layers.0.ln1.bias"]["shape"] = [2**40, 2**40]
    return tamper(rng, f), (
        "relattn_import: tensor 'layers.0.ln1.bias' has a shape whose size "
        "overflows")


def case_shape_beyond_int64(rng):
    def f(h, d):
        h["layers.0.ln1.bias"]["shape"] = [10**20]
    return tamper(rng, f), (
        "relattn_import: tensor 'layers.0.ln1.bias' has a shape whose size "
        "overflows")


def case_shape_not_integers(rng):
    def f(h, d):
        h["layers.0.ln1.bias"]["shape"] = [16.5]
    return tamper(rng, f), (
        "relattn_import: tensor 'layers.0.ln1.bias' has a shape that is not "
        "an array of integers")


def case_offsets_out_of_range(rng):
    def f(h, d):
        b, e = h["ln_f.bias"]["data_offsets"]
        h["ln_f.bias"]["data_offsets"] = [b + 8, e + 8]
    h, data = header_of(good_parts(rng))
    return tamper(rng, f), (
        f"relattn_import: tensor 'ln_f.bias' has data_offsets "
        f"[{len(data) - 64 + 8},{len(data) + 8}] outside the data "
        f"({len(data)} bytes)")


def case_offsets_negative(rng):
    def f(h, d):
        h["tok_emb"]["data_offsets"] = [-4, 10]
    return tamper(rng, f), (
        "relattn_import: tensor 'tok_emb' has data_offsets [-4,10] outside "
        "the data")


def case_offsets_reversed(rng):
    def f(h, d):
        b, e = h["layers.0.ln1.bias"]["data_offsets"]
        h["layers.0.ln1.bias"]["data_offsets"] = [e, b]
    h, _ = header_of(good_parts(rng))
    b, e = h["layers.0.ln1.bias"]["data_offsets"]
    return tamper(rng, f), (
        f"relattn_import: tensor 'layers.0.ln1.bias' has reversed "
        f"data_offsets [{e},{b}]")


def case_offsets_overlap(rng):
    def f(h, d):
        h["layers.0.ln1.bias"]["data_offsets"] = h["layers.0.ln1.weight"]["data_offsets"]
    return tamper(rng, f), (
        "relattn_import: tensors 'layers.0.ln1.weight' and 'layers.0.ln1.bias' "
        "overlap in the data")


def case_offsets_two_element(rng):
    def f(h, d):
        h["tok_emb"]["data_offsets"] = [0]
    return tamper(rng, f), (
        "relattn_import: tensor 'tok_emb' has data_offsets that are not two "
        "integers")


def case_size_mismatch(rng):
    def f(h, d):
        h["ln_f.bias"]["shape"] = [15]
    return tamper(rng, f), (
        "relattn_import: tensor 'ln_f.bias' has 64 bytes of data, but dtype "
        "F32 and its shape need 60")


def case_uncovered_bytes(rng):
    h, data = header_of(good_parts(rng))
    return raw(h, data + b"\0" * 8), (
        f"relattn_import: the safetensors data has bytes not covered by any "
        f"tensor (from offset {len(data)})")


def case_missing_tensor(rng):
    p = good_parts(rng)
    del p["ln_f.bias"]
    return sp.write(p, metadata=meta()), (
        "relattn_import: tensor 'ln_f.bias' is missing (the config needs it)")


def case_misshaped_tensor(rng):
    p = good_parts(rng)
    a = rng.standard_normal((259, 17)).astype(np.float32)
    p["tok_emb"] = ("F32", [259, 17], a.tobytes())
    return sp.write(p, metadata=meta()), (
        "relattn_import: tensor 'tok_emb' has shape [259,17]; the config "
        "needs [259,16]")


def case_unexpected_tensor(rng):
    p = good_parts(rng)
    p["extra"] = ("F32", [2], b"\0" * 8)
    return sp.write(p, metadata=meta()), (
        "relattn_import: unexpected tensor 'extra' (not part of the config)")


def case_unexpected_lm_head_when_tied(rng):
    p = good_parts(rng)
    p["lm_head"] = p["tok_emb"]
    return sp.write(p, metadata=meta()), (
        "relattn_import: unexpected tensor 'lm_head' (not part of the config)")


def case_layer_out_of_range(rng):
    p = good_parts(rng)
    p["layers.1.ln1.bias"] = p["layers.0.ln1.bias"]
    return sp.write(p, metadata=meta()), (
        "relattn_import: unexpected tensor 'layers.1.ln1.bias' (not part of "
        "the config)")


def case_duplicate_tensor(rng):
    h, data = header_of(good_parts(rng))
    text = json.dumps(h)
    entry = json.dumps(h["ln_f.bias"])
    text = text[:-1] + ', "ln_f.bias": ' + entry + "}"
    return raw(text.encode(), data), (
        "relattn_import: tensors 'ln_f.bias' and 'ln_f.bias' overlap in the data")


def case_nan_weight(rng):
    p = good_parts(rng)
    a = np.frombuffer(p["layers.0.attn.wq"][2], np.float32).copy()
    a[5] = np.nan
    p["layers.0.attn.wq"] = ("F32", [16, 16], a.tobytes())
    return sp.write(p, metadata=meta()), (
        "relattn_import: tensor 'layers.0.attn.wq' has NaN or Inf at element 5")


def case_inf_f16(rng):
    p = good_parts(rng)
    a = np.full(16, 0.5, np.float16)
    a[3] = np.inf
    p["ln_f.weight"] = a
    return sp.write(p, metadata=meta()), (
        "relattn_import: tensor 'ln_f.weight' has NaN or Inf at element 3")


def case_nan_bf16(rng):
    p = good_parts(rng)
    raw_bf = bytearray(sp.bf16_bytes(np.full(16, 0.25, np.float32)))
    raw_bf[14:16] = struct.pack("<H", 0x7FC1)
    p["ln_f.weight"] = ("BF16", [16], bytes(raw_bf))
    return sp.write(p, metadata=meta()), (
        "relattn_import: tensor 'ln_f.weight' has NaN or Inf at element 7")


def with_config(rng, cfg):
    return sp.write(good_parts(rng), metadata={"relattn.config": json.dumps(cfg)})


def config_without(*path):
    c = json.loads(json.dumps(CFG))
    d = c
    for k in path[:-1]:
        d = d[k]
    del d[path[-1]]
    return c


def config_with(value, *path):
    c = json.loads(json.dumps(CFG))
    d = c
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    return c


def case_config_missing_key(rng):
    return with_config(rng, config_without("d_ff")), (
        "relattn_import: config: missing key 'd_ff'")


def case_config_missing_nested(rng):
    return with_config(rng, config_without("position", "clip")), (
        "relattn_import: config: missing key 'position.clip'")


def case_config_wrong_type(rng):
    return with_config(rng, config_with("8", "d_ff")), (
        "relattn_import: config: 'd_ff' must be an integer, not text")


def case_config_float_size(rng):
    return with_config(rng, config_with(8.5, "d_model")), (
        "relattn_import: config: 'd_model' must be an integer, not real")


def case_config_bool_type(rng):
    return with_config(rng, config_with(1, "tie_embeddings")), (
        "relattn_import: config: 'tie_embeddings' must be true or false, not "
        "integer")


def case_config_position_not_object(rng):
    return with_config(rng, config_with(4, "position")), (
        "relattn_import: config: 'position' must be an object, not integer")


def case_config_not_divisible(rng):
    return with_config(rng, config_with(3, "n_heads")), (
        "relattn_import: config: 'd_model' (16) is not divisible by 'n_heads' "
        "(3)")


def case_config_negative_clip(rng):
    return with_config(rng, config_with(-1, "position", "clip")), (
        "relattn_import: config: 'position.clip' must be between 0 and "
        "16777216, not -1")


def case_config_unknown_arch(rng):
    return with_config(rng, config_with("gpt", "arch")), (
        "relattn_import: config: 'arch' must be one of decoder,encoder, not "
        "'gpt'")


def case_config_unknown_norm(rng):
    return with_config(rng, config_with("sandwich", "norm")), (
        "relattn_import: config: 'norm' must be one of pre,post, not "
        "'sandwich'")


def case_config_unknown_activation(rng):
    return with_config(rng, config_with("swish", "activation")), (
        "relattn_import: config: 'activation' must be one of gelu,gelu_tanh,relu, not "
        "'swish'")


def case_config_unknown_position(rng):
    return with_config(rng, config_with("sinus", "position", "type")), (
        "relattn_import: config: 'position.type' must be one of shaw,none,t5,"
        "alibi,rope,absolute,rel_key,rel_key_query,xl,deberta, not 'sinus'")


def case_config_unknown_tokenizer(rng):
    return with_config(rng, config_with("bpe", "tokenizer", "type")), (
        "relattn_import: config: 'tokenizer.type' must be one of bytes,wordpiece,"
        "sentencepiece, not "
        "'bpe'")


def case_config_bos_is_byte(rng):
    return with_config(rng, config_with(65, "tokenizer", "bos")), (
        "relattn_import: config: 'tokenizer.bos' must be at least 256 and "
        "below vocab_size (259), not 65")


def case_config_pad_past_vocab(rng):
    return with_config(rng, config_with(259, "tokenizer", "pad")), (
        "relattn_import: config: 'tokenizer.pad' must be at least 256 and "
        "below vocab_size (259), not 259")


def case_config_huge_integer(rng):
    return with_config(rng, config_with(2**40, "d_ff")), (
        "relattn_import: config: 'd_ff' is out of range")


def case_config_vocab_too_small(rng):
    return with_config(rng, config_with(100, "vocab_size")), (
        "relattn_import: config: 'vocab_size' must be at least 256 (the byte "
        "tokenizer), not 100")


def case_config_not_json(rng):
    return sp.write(good_parts(rng), metadata={"relattn.config": "{arch:"}), (
        "relattn_import: config: not valid JSON")


def case_config_not_string(rng):
    h, data = header_of(good_parts(rng))
    h["__metadata__"]["relattn.config"] = CFG
    return raw(h, data), (
        'relattn_import: __metadata__["relattn.config"] is not a string')


def case_no_config(rng):
    return sp.write(good_parts(rng)), (
        'relattn_import: no config: pass config_json, or put it in the '
        'file\'s __metadata__["relattn.config"]')


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}


@pytest.fixture
def stored(db, rng):
    """db with a model 'm' already stored, to check it survives."""
    cfg = modelgen.config(n_layers=1, d_model=8, n_heads=2, d_ff=4, clip=1)
    db.execute("SELECT relattn_import('m', ?)", (modelgen.safetensors(cfg, rng),))
    return db


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_file(stored, rng, case):
    db = stored
    blob, error = CASES[case](rng)
    before = snapshot(db)
    for name in ("m", "new"):  # replacing a model, and a new name
        with pytest.raises(Exception) as e:
            db.execute("SELECT relattn_import(?, ?)", (name, blob))
        assert str(e.value).startswith(error), str(e.value)
        assert snapshot(db) == before
    # the old model still loads and exports as before
    out = db.execute("SELECT relattn_export('m')").fetchone()[0]
    assert len(sp.read(out)[0]) == before[0][1]


@pytest.mark.parametrize("case", ["truncated", "offsets_overlap", "missing_tensor",
                                  "config_missing_key", "nan_weight"])
def test_malformed_file_creates_no_tables(db, rng, case):
    blob, error = CASES[case](rng)
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_import('m', ?)", (blob,))
    assert str(e.value).startswith(error)
    assert db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0


def test_bad_arguments(db, rng):
    blob = modelgen.safetensors(CFG, rng)
    for sql, args, error in [
        ("SELECT relattn_import(?, ?)", ("m", "text"),
         "relattn_import: safetensors_blob must be a BLOB"),
        ("SELECT relattn_import(?, ?)", ("m", None),
         "relattn_import: safetensors_blob is NULL (file not found?)"),
        ("SELECT relattn_import(?, ?)", ("", blob),
         "relattn_import: model must be a non-empty name (TEXT)"),
        ("SELECT relattn_import(?, ?)", (None, blob),
         "relattn_import: model must be a non-empty name (TEXT)"),
        ("SELECT relattn_import(?, ?, ?)", ("m", blob, 5),
         "relattn_import: config_json must be TEXT (JSON) or NULL"),
        ("SELECT relattn_export(?)", ("nope",), "relattn_export: no model named 'nope'"),
        ("SELECT relattn_export(?)", (3,), "relattn_export: model must be a model name (TEXT)"),
        ("SELECT relattn_weights('nope', 'tok_emb')", (),
         "relattn_weights: no model named 'nope'"),
    ]:
        with pytest.raises(Exception) as e:
            db.execute(sql, args)
        assert str(e.value) == error


def test_config_argument_overrides_metadata(db, rng):
    cfg = modelgen.config(n_layers=1, clip=3, tie_embeddings=False)
    w = modelgen.tensors(cfg, rng)
    plain = modelgen.safetensors(cfg, weights=w, metadata=False)
    assert db.execute("SELECT relattn_import('a', ?, ?)",
                      (plain, json.dumps(cfg))).fetchone()[0] == len(w)
    # a file whose metadata names another config: the argument wins
    other = modelgen.config(n_layers=3, clip=3, tie_embeddings=False)
    blob = sp.write({k: v for k, v in w.items()},
                    metadata={"relattn.config": json.dumps(other)})
    db.execute("SELECT relattn_import('b', ?, ?)", (blob, json.dumps(cfg)))
    stored = db.execute("SELECT config FROM relattn_model WHERE name = 'b'").fetchone()[0]
    assert json.loads(stored) == cfg
    # and without it, the metadata's config rejects these tensors
    with pytest.raises(Exception, match="tensor 'layers.1.ln1.weight' is missing"):
        db.execute("SELECT relattn_import('b', ?)", (blob,))


@pytest.mark.parametrize("variant", [
    dict(norm="post"), dict(values=False), dict(per_head=True),
    dict(tie_embeddings=False), dict(arch="encoder", bos=None, eos=None, pad=None),
    dict(clip=0, activation="relu"),
])
def test_config_variants(db, rng, variant):
    cfg = modelgen.config(n_layers=2, **variant)
    w = modelgen.tensors(cfg, rng)
    n = db.execute("SELECT relattn_import('v', ?)",
                   (modelgen.safetensors(cfg, weights=w),)).fetchone()[0]
    assert n == len(w)
    names = [r[0] for r in db.execute("SELECT name FROM relattn_tensor ORDER BY rowid")]
    assert names == [k for k, _ in modelgen.shapes(cfg)]
    # the cache builds the model: every tensor reads back as stored
    for name, a in w.items():
        got = np.frombuffer(db.execute("SELECT relattn_weights('v', ?)",
                                       (name,)).fetchone()[0], np.float32)
        assert np.array_equal(got, a.ravel()), name


def test_replace_is_atomic_and_bumps_version(db, rng):
    cfg = modelgen.config(n_layers=1)
    a = modelgen.tensors(cfg, rng)
    b = modelgen.tensors(modelgen.config(n_layers=2), rng)
    db.execute("SELECT relattn_import('m', ?)", (modelgen.safetensors(cfg, weights=a),))
    v1, sha1 = db.execute("SELECT version, sha256 FROM relattn_model").fetchone()
    assert v1 == 1
    db.execute("SELECT relattn_import('m', ?)",
               (modelgen.safetensors(modelgen.config(n_layers=2), weights=b),))
    v2, sha2 = db.execute("SELECT version, sha256 FROM relattn_model").fetchone()
    assert v2 == 2 and sha2 != sha1
    names = {r[0] for r in db.execute("SELECT name FROM relattn_tensor WHERE model = 'm'")}
    assert names == set(b)


def test_import_in_a_transaction_rolls_back(db, rng):
    blob = modelgen.safetensors(CFG, rng)
    db.execute("BEGIN")
    db.execute("SELECT relattn_import('m', ?)", (blob,))
    assert db.execute("SELECT count(*) FROM relattn_model").fetchone()[0] == 1
    db.execute("ROLLBACK")
    assert db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0


@pytest.mark.parametrize("case", ["truncated", "missing_tensor", "config_missing_key",
                                  "nan_weight", "write_fails"])
def test_failed_import_inside_a_transaction(rng, case):
    # BEGIN; the user's own write; an import of 'm' that fails (checked
    # before writing, or refused half-way through writing its tensors by a
    # trigger): the previous 'm' is intact, the user's write is still
    # there, the transaction still open, and COMMIT keeps exactly that.
    db = connect(isolation_level=None)
    cfg = modelgen.config(n_layers=1, d_model=8, n_heads=2, d_ff=4, clip=1)
    w = modelgen.load(db, "m", cfg, rng)
    db.execute("CREATE TABLE notes(x)")
    before = snapshot(db)
    if case == "write_fails":
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON relattn_tensor "
                   "WHEN new.name = 'ln_f.bias' BEGIN SELECT RAISE(ABORT, 'refused'); END")
        blob, error = modelgen.safetensors(cfg, rng), "relattn_import: refused"
    else:
        blob, error = CASES[case](rng)
    db.execute("BEGIN")
    db.execute("INSERT INTO notes VALUES ('mine')")
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_import('m', ?)", (blob,))
    assert str(e.value).startswith(error), str(e.value)
    assert db.in_transaction
    assert snapshot(db) == before
    assert db.execute("SELECT x FROM notes").fetchall() == [("mine",)]
    assert np.array_equal(weights(db, "tok_emb"), w["tok_emb"].ravel())
    db.execute("COMMIT")
    assert snapshot(db) == before
    assert db.execute("SELECT x FROM notes").fetchall() == [("mine",)]
    db.close()


def test_import_is_direct_only(db, rng):
    db.execute("CREATE TABLE files(name, blob)")
    db.execute("INSERT INTO files VALUES ('m', ?)", (modelgen.safetensors(CFG, rng),))
    # from plain SQL over a table: fine
    assert db.execute("SELECT relattn_import(name, blob) FROM files").fetchone()[0] > 0
    db.execute("CREATE VIEW v AS SELECT relattn_import(name, blob) FROM files")
    with pytest.raises(Exception, match=r"unsafe use of relattn_import\(\)"):
        db.execute("SELECT * FROM v").fetchall()


def test_schema_matches_sql_file(db, rng, tmp_path):
    db.execute("SELECT relattn_import('m', ?)", (modelgen.safetensors(CFG, rng),))
    other = connect()
    other.executescript((ROOT / "sql" / "schema.sql").read_text())
    q = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    assert db.execute(q).fetchall() == other.execute(q).fetchall()
    assert len(db.execute(q).fetchall()) >= 6  # 2 tables, 4 triggers (+ indexes)
    other.close()


def test_schema_is_the_sql_file():
    # sql/schema.sql is built into the extension as it is, byte for byte: the
    # string the import runs is the file (the Makefile's schema_sql.h rule)
    text = (ROOT / "sql" / "schema.sql").read_bytes()
    assert b"CREATE TABLE IF NOT EXISTS relattn_model(" in text
    assert text + b"\0" in pathlib.Path(SO).read_bytes()


def test_trusted_schema_off(tmp_path, rng):
    # the schema calls nothing that trusted_schema=OFF refuses: a client
    # without the extension reads an unrelated table, the models, and its
    # edits still run the triggers; the extension works there too
    import sqlite3
    path = str(tmp_path / "t.db")
    db = connect(path)
    db.execute("CREATE TABLE notes(x)")
    db.execute("INSERT INTO notes VALUES ('hello')")
    modelgen.load(db, "m", CFG, rng)
    db.commit()
    db.close()
    plain = sqlite3.connect(path)
    plain.execute("PRAGMA trusted_schema = OFF")
    assert plain.execute("SELECT x FROM notes").fetchall() == [("hello",)]
    assert plain.execute("SELECT name, version FROM relattn_model").fetchall() == [("m", 1)]
    x = rng.standard_normal(CFG["d_model"]).astype(np.float32)
    plain.execute("UPDATE relattn_tensor SET data = ? WHERE name = 'ln_f.bias'", (x.tobytes(),))
    plain.commit()
    assert plain.execute("SELECT version > 1, sha256 FROM relattn_model").fetchone() == (1, None)
    plain.close()
    ext = connect(path)
    ext.execute("PRAGMA trusted_schema = OFF")
    assert np.array_equal(weights(ext, "ln_f.bias"), x)
    w = modelgen.load(ext, "m", CFG, rng)
    ext.commit()
    assert np.array_equal(weights(ext, "ln_f.bias"), w["ln_f.bias"])
    ext.close()


@pytest.mark.parametrize("existing", [False, True])
def test_interrupted_import(rng, existing):
    # sqlite3_interrupt at every k-th VM step of an import (all of its
    # statements, header to RELEASE): it fails with "interrupted" and
    # SQLITE_INTERRUPT, leaves the database as it was, no transaction open,
    # and leaks nothing (the sanitized run; every prepare used to fail in a
    # row and overwrite the message of the one before).
    import sqlite3
    db = connect(isolation_level=None)
    blob = modelgen.safetensors(CFG, rng)
    steps = [0]

    def count():
        steps[0] += 1
        return 0

    if existing:
        db.execute("SELECT relattn_import('m', ?)", (modelgen.safetensors(CFG, rng),))
    db.set_progress_handler(count, 1)
    db.execute("SAVEPOINT measure")
    db.execute("SELECT relattn_import('m', ?)", (blob,))
    db.execute("ROLLBACK TO measure")
    db.execute("RELEASE measure")
    db.set_progress_handler(None, 1)
    outcomes = {}
    for k in range(1 + int(rng.integers(0, 5)), steps[0], 5):
        before = snapshot(db)
        seen = [0]

        def interrupt_at_k():
            seen[0] += 1
            if seen[0] == k:
                db.interrupt()
            return 0

        db.set_progress_handler(interrupt_at_k, 1)
        try:
            db.execute("SELECT relattn_import('m', ?)", (blob,))
            outcome = "ok"
        except sqlite3.OperationalError as e:
            outcome = str(e)
            if hasattr(e, "sqlite_errorcode"):
                assert e.sqlite_errorcode == sqlite3.SQLITE_INTERRUPT, (k, outcome)
        db.set_progress_handler(None, 1)
        assert not db.in_transaction, (k, outcome)
        if outcome == "ok":  # the interrupt came after the import's last step
            if existing:
                db.execute("SELECT relattn_import('m', ?)", (modelgen.safetensors(CFG, rng),))
            else:
                db.execute("DROP TABLE relattn_tensor")
                db.execute("DROP TABLE relattn_model")
        else:
            assert snapshot(db) == before, (k, outcome)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert set(outcomes) <= {"relattn_import: interrupted", "ok"}, outcomes
    assert outcomes["relattn_import: interrupted"] > 300, outcomes
    db.close()


def test_delete_cascades_without_foreign_keys(db, rng):
    db.execute("SELECT relattn_import('m', ?)", (modelgen.safetensors(CFG, rng),))
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 0
    db.execute("DELETE FROM relattn_model WHERE name = 'm'")
    assert db.execute("SELECT count(*) FROM relattn_tensor").fetchone()[0] == 0


def test_foreign_keys_on(db, rng):
    db.execute("PRAGMA foreign_keys = ON")
    blob = modelgen.safetensors(CFG, rng)
    db.execute("SELECT relattn_import('m', ?)", (blob,))
    db.execute("SELECT relattn_import('m', ?)", (blob,))
    db.execute("DELETE FROM relattn_model WHERE name = 'm'")
    assert db.execute("SELECT count(*) FROM relattn_tensor").fetchone()[0] == 0


# ---- F16 / BF16 through the cache --------------------------------------------

HALF_CFG = modelgen.config(d_model=256, n_heads=4, d_ff=4, n_layers=1, clip=1)


def import_tok_emb(db, rng, dtype, bits):
    """A model whose tok_emb holds the given 16-bit patterns (rest zero-padded
    with random finite values), stored as dtype."""
    w = modelgen.tensors(HALF_CFG, rng)
    parts = {k: ("F32", list(a.shape), a.tobytes()) for k, a in w.items()}
    n = 259 * 256
    pad = rng.integers(0x3000, 0x3C00, n - len(bits)).astype(np.uint16)  # finite
    allbits = np.concatenate([bits.astype(np.uint16), pad])
    parts["tok_emb"] = (dtype, [259, 256], allbits.astype("<u2").tobytes())
    db.execute("SELECT relattn_import('h', ?)", (sp.write(parts, metadata=meta(HALF_CFG)),))
    got = np.frombuffer(db.execute("SELECT relattn_weights('h', 'tok_emb')").fetchone()[0],
                        np.float32)
    return allbits, got


def test_f16_every_finite_value_against_numpy(db, rng):
    bits = np.arange(65536, dtype=np.uint32)
    bits = bits[(bits & 0x7C00) != 0x7C00]          # NaN and Inf are rejected
    allbits, got = import_tok_emb(db, rng, "F16", bits)
    ref = allbits.view(np.float16).astype(np.float32)  # numpy's conversion
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    # subnormals and signed zero made it through exactly
    sub = (allbits & 0x7C00) == 0
    assert sub.sum() >= 2048 and np.array_equal(got[sub], ref[sub])
    assert np.signbit(got[allbits == 0x8000]).all()


def test_bf16_every_finite_value(db, rng):
    bits = np.arange(65536, dtype=np.uint32)
    bits = bits[(bits & 0x7F80) != 0x7F80]
    allbits, got = import_tok_emb(db, rng, "BF16", bits)
    # independent reference from the fields, in float64: (-1)^s 2^(e-127) 1.m
    b = allbits.astype(np.int64)
    s, e, m = b >> 15, (b >> 7) & 0xFF, b & 0x7F
    val = np.where(e == 0, np.ldexp(m / 128.0, -126), np.ldexp(1 + m / 128.0, e - 127))
    val = np.where(s == 1, -val, val)
    assert np.array_equal(got.astype(np.float64), val)
    assert np.signbit(got[allbits == 0x8000]).all()


@pytest.mark.parametrize("dtype,bits,index", [
    ("F16", 0x7C00, 7), ("F16", 0xFC00, 0), ("F16", 0x7E00, 300),
    ("BF16", 0x7F80, 7), ("BF16", 0xFFC0, 0), ("BF16", 0x7F81, 65000),
])
def test_half_nan_inf_rejected(stored, rng, dtype, bits, index):
    before = snapshot(stored)
    w = modelgen.tensors(HALF_CFG, rng)
    parts = {k: ("F32", list(a.shape), a.tobytes()) for k, a in w.items()}
    raw16 = np.full(259 * 256, 0x3C00 if dtype == "F16" else 0x3F80, np.uint16)
    raw16[index] = bits
    parts["tok_emb"] = (dtype, [259, 256], raw16.astype("<u2").tobytes())
    with pytest.raises(Exception) as e:
        stored.execute("SELECT relattn_import('m', ?)", (sp.write(parts, metadata=meta(HALF_CFG)),))
    assert str(e.value) == f"relattn_import: tensor 'tok_emb' has NaN or Inf at element {index}"
    assert snapshot(stored) == before


# ---- the weight cache across connections --------------------------------------

def weights(db, tensor, model="m"):
    return np.frombuffer(db.execute("SELECT relattn_weights(?, ?)", (model, tensor)).fetchone()[0],
                         np.float32)


@pytest.fixture
def two(tmp_path):
    path = str(tmp_path / "models.db")
    a, b = connect(path), connect(path)
    yield a, b
    a.close()
    b.close()


def test_cache_sees_reimport_from_another_connection(two, rng):
    a, b = two
    cfg = modelgen.config(n_layers=1)
    w1 = modelgen.load(a, "m", cfg, rng)
    a.commit()
    assert np.array_equal(weights(b, "layers.0.attn.wq"), w1["layers.0.attn.wq"].ravel())
    assert np.array_equal(weights(a, "layers.0.attn.wq"), w1["layers.0.attn.wq"].ravel())
    w2 = modelgen.load(a, "m", cfg, rng, dtype="F16")
    a.commit()
    assert np.array_equal(weights(b, "layers.0.attn.wq"), w2["layers.0.attn.wq"].ravel())
    assert not np.array_equal(w1["layers.0.attn.wq"], w2["layers.0.attn.wq"])


def test_cache_sees_update_and_delete_from_another_connection(two, rng):
    a, b = two
    cfg = modelgen.config(n_layers=1)
    w = modelgen.load(a, "m", cfg, rng)
    a.commit()
    assert np.array_equal(weights(b, "ln_f.bias"), w["ln_f.bias"])
    # UPDATE of a tensor's data by plain SQL: version bumped, sha256 cleared
    new = rng.standard_normal(cfg["d_model"]).astype(np.float32)
    a.execute("UPDATE relattn_tensor SET data = ? WHERE model = 'm' AND name = 'ln_f.bias'",
              (new.tobytes(),))
    a.commit()
    assert a.execute("SELECT version > 1, sha256 FROM relattn_model").fetchone() == (1, None)
    assert np.array_equal(weights(b, "ln_f.bias"), new)
    # an UPDATE from a connection without the extension: the triggers still run
    import sqlite3
    plain = sqlite3.connect(a.execute("PRAGMA database_list").fetchone()[2])
    new2 = rng.standard_normal(cfg["d_model"]).astype(np.float32)
    plain.execute("UPDATE relattn_tensor SET data = ? WHERE name = 'ln_f.bias'", (new2.tobytes(),))
    plain.commit()
    assert np.array_equal(weights(b, "ln_f.bias"), new2)
    # a mis-shaped UPDATE is reported by the next call
    plain.execute("UPDATE relattn_tensor SET data = x'00000000' WHERE name = 'ln_f.bias'")
    plain.commit()
    with pytest.raises(Exception) as e:
        weights(b, "ln_f.bias")
    assert str(e.value) == ("relattn_weights: model 'm': tensor 'ln_f.bias' has 4 bytes of "
                            "data, but dtype F32 and shape [16] need 64")
    # DELETE of one tensor
    plain.execute("DELETE FROM relattn_tensor WHERE name = 'ln_f.bias'")
    plain.commit()
    with pytest.raises(Exception) as e:
        weights(b, "tok_emb")
    assert str(e.value) == "relattn_weights: model 'm': tensor 'ln_f.bias' is missing (the config needs it)"
    # DELETE of the model
    plain.execute("DELETE FROM relattn_model WHERE name = 'm'")
    plain.commit()
    plain.close()
    with pytest.raises(Exception) as e:
        weights(b, "tok_emb")
    assert str(e.value) == "relattn_weights: no model named 'm'"


def test_cache_delete_then_reimport(two, rng):
    a, b = two
    cfg = modelgen.config(n_layers=1)
    w1 = modelgen.load(a, "m", cfg, rng)
    a.commit()
    assert np.array_equal(weights(b, "tok_emb"), w1["tok_emb"].ravel())
    # deleted and imported again: the version starts at 1 again, as b cached;
    # the sha256 tells the models apart
    a.execute("DELETE FROM relattn_model WHERE name = 'm'")
    w2 = modelgen.load(a, "m", cfg, rng)
    a.commit()
    assert a.execute("SELECT version FROM relattn_model").fetchone()[0] == 1
    assert np.array_equal(weights(b, "tok_emb"), w2["tok_emb"].ravel())
    # the same again after an UPDATE in b (version 2, no sha256 in b's cache)
    x = rng.standard_normal(cfg["d_model"]).astype(np.float32)
    b.execute("UPDATE relattn_tensor SET data = ? WHERE name = 'ln_f.bias'", (x.tobytes(),))
    b.commit()
    assert np.array_equal(weights(b, "ln_f.bias"), x)
    a.execute("DELETE FROM relattn_model WHERE name = 'm'")
    w3 = modelgen.load(a, "m", cfg, rng)
    a.commit()
    assert np.array_equal(weights(b, "ln_f.bias"), w3["ln_f.bias"])


def test_cache_sees_config_change(db, rng):
    cfg = modelgen.config(n_layers=1)
    modelgen.load(db, "m", cfg, rng)
    assert db.execute("SELECT relattn_detokenize('m', relattn_tokens('[104,256,105]'))").fetchone()[0] == "hi"
    db.execute("UPDATE relattn_model SET config = json_set(config, '$.tokenizer.bos', 258)")
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_detokenize('m', relattn_tokens('[104,256,105]'))").fetchone()
    assert str(e.value) == ("relattn_detokenize: token 256 at position 1 is not a byte (0-255) "
                            "nor the tokenizer's bos, eos or pad")


def score(db, tokens, model="m"):
    return db.execute("SELECT relattn_score(?, ?)", (model, tokens)).fetchone()[0]


@pytest.mark.parametrize("undo", ["ROLLBACK", "ROLLBACK TO s"])
def test_rollback_leaves_no_stale_weights(tmp_path, rng, undo):
    # A call inside a transaction loads the edited weights; the edit is
    # rolled back and another one made: the versions must differ, and every
    # call computes with the weights it can see (once with 1 bumps, the
    # second edit gave the cached version back and the old weights stayed).
    path = str(tmp_path / "m.db")
    db = connect(path, isolation_level=None)
    cfg = modelgen.config(n_layers=1)
    w = modelgen.load(db, "m", cfg, rng)
    toks = rng.integers(0, 256, 20).astype("<i4").tobytes()
    v0 = db.execute("SELECT version FROM relattn_model").fetchone()[0]
    db.execute("BEGIN")
    if undo == "ROLLBACK TO s":
        db.execute("SAVEPOINT s")
    x = rng.standard_normal(cfg["d_model"]).astype(np.float32)
    db.execute("UPDATE relattn_tensor SET data = ? WHERE name = 'ln_f.bias'", (x.tobytes(),))
    v1 = db.execute("SELECT version FROM relattn_model").fetchone()[0]
    assert v1 > v0
    assert np.array_equal(weights(db, "ln_f.bias"), x)
    score(db, toks)
    db.execute(undo)
    assert np.array_equal(weights(db, "ln_f.bias"), w["ln_f.bias"])
    y = rng.standard_normal(cfg["d_model"]).astype(np.float32)
    db.execute("UPDATE relattn_tensor SET data = ? WHERE name = 'ln_f.bias'", (y.tobytes(),))
    v2 = db.execute("SELECT version FROM relattn_model").fetchone()[0]
    assert v2 > v0 and v2 != v1
    if undo == "ROLLBACK TO s":
        db.execute("COMMIT")
    assert np.array_equal(weights(db, "ln_f.bias"), y)
    fresh = connect(path)
    assert score(db, toks) == score(fresh, toks)
    assert np.array_equal(weights(fresh, "ln_f.bias"), y)
    fresh.close()
    db.close()


def test_rollback_of_an_import_then_the_same_bytes_as_another_dtype(db, rng):
    # An import rolled back after a call loaded it, then an import of the
    # very same bytes labelled F16 instead of BF16: the same version (old +
    # 1), sha256 (of the bytes) and config as the cached copy; only the
    # model row's new rowid tells them apart.
    db.isolation_level = None
    modelgen.load(db, "m", HALF_CFG, rng)
    w = modelgen.tensors(HALF_CFG, rng)
    bits = {k: (rng.integers(0x3000, 0x3C00, a.size).astype("<u2"), list(a.shape))
            for k, a in w.items()}

    def as_dtype(dtype):
        return sp.write({k: (dtype, shape, b.tobytes()) for k, (b, shape) in bits.items()},
                        metadata=meta(HALF_CFG))

    db.execute("BEGIN")
    db.execute("SELECT relattn_import('m', ?)", (as_dtype("BF16"),))
    key = db.execute("SELECT version, sha256 FROM relattn_model").fetchone()
    bf16 = weights(db, "tok_emb")
    db.execute("ROLLBACK")
    db.execute("SELECT relattn_import('m', ?)", (as_dtype("F16"),))
    assert db.execute("SELECT version, sha256 FROM relattn_model").fetchone() == key
    f16 = bits["tok_emb"][0].view(np.float16).astype(np.float32)
    assert not np.array_equal(bf16, f16)
    assert np.array_equal(weights(db, "tok_emb"), f16)


WRITER = r"""
import sqlite3, sys
path, so, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
blobs = [open(f, "rb").read() for f in sys.argv[4:]]
db = sqlite3.connect(path, isolation_level=None, timeout=60)
db.enable_load_extension(True)
db.load_extension(so)
for i in range(rounds):
    db.execute("SELECT relattn_import('m', ?)", (blobs[i % len(blobs)],))
db.close()
"""


def test_two_processes_see_one_consistent_model(tmp_path, rng):
    # One process imports two models of the same shapes but different
    # configs under one name, in turn; this one scores all the while. Every
    # score must be one model's: its config with its own weights, never one
    # model's config with the other's weights (model row and tensors read
    # in different snapshots), never a tensor missing half-way.
    import subprocess
    import sys
    cfg = {"a": modelgen.config(n_layers=2, activation="gelu"),
           "b": modelgen.config(n_layers=2, activation="relu", norm_eps=1e-3)}
    w = {k: modelgen.tensors(cfg[k], rng) for k in cfg}
    files = []
    for k in cfg:
        f = tmp_path / f"{k}.safetensors"
        f.write_bytes(modelgen.safetensors(cfg[k], weights=w[k]))
        files.append(str(f))
    toks = rng.integers(0, 256, 24).astype("<i4").tobytes()
    ref = connect()
    ref.execute("SELECT relattn_threads(1)")
    expect = {}
    for c in cfg:
        for k in cfg:
            blob = modelgen.safetensors(cfg[k], weights=w[k], metadata=False)
            ref.execute("SELECT relattn_import(?, ?, ?)", (c + k, blob, json.dumps(cfg[c])))
            expect[c + k] = score(ref, toks, c + k)
    ref.close()
    # the mixes are told apart from the models
    assert len(set(expect.values())) == 4, expect
    path = str(tmp_path / "wal.db")
    db = connect(path, isolation_level=None, timeout=60)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("SELECT relattn_threads(1)")
    db.execute("SELECT relattn_import('m', ?)", (pathlib.Path(files[0]).read_bytes(),))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, path, SO, "150"] + files,
                              stderr=subprocess.PIPE, text=True)
    seen = {}
    while True:
        done = writer.poll() is not None
        try:
            got = score(db, toks)
            key = next((k for k, v in expect.items() if v == got), repr(got))
        except Exception as e:
            key = str(e)
        seen[key] = seen.get(key, 0) + 1
        if done:
            break
    assert writer.wait() == 0, writer.stderr.read()
    db.close()
    assert set(seen) <= {"aa", "bb"}, seen
    assert seen.get("aa", 0) > 0 and seen.get("bb", 0) > 0, seen


def cached(db):
    """(models, bytes) in the connection's cache, from relattn_debug()."""
    debug = dict(line.split(": ", 1) for line in
                 db.execute("SELECT relattn_debug()").fetchone()[0].splitlines()[1:])
    return int(debug["cached_models"]), int(debug["cached_bytes"])


def model_bytes(db, cfg, rng):
    """The cache's bytes for a model of cfg: its float32 weights (and the
    tables the model builds from them)."""
    probe = connect()
    modelgen.load(probe, "probe", cfg, rng)
    weights(probe, "tok_emb", "probe")
    n, b = cached(probe)
    probe.close()
    assert n == 1 and b >= 4 * sum(int(np.prod(s)) for _, s in modelgen.shapes(cfg))
    return b


def test_cache_drops_deleted_models(db, rng):
    # import, use, delete, 150 times under new names: every model deleted
    # is dropped from the cache by the next load (it used to keep all 150)
    blob = modelgen.safetensors(CFG, rng)
    toks = rng.integers(0, 256, 8).astype("<i4").tobytes()
    b = model_bytes(db, CFG, rng)
    assert cached(db) == (0, 0)
    for i in range(150):
        db.execute("SELECT relattn_import(?, ?)", (f"m{i}", blob))
        score(db, toks, f"m{i}")
        db.execute("DELETE FROM relattn_model WHERE name = ?", (f"m{i}",))
        assert cached(db) == (1, b), i
    # a replaced model too (its old version)
    db.execute("SELECT relattn_import('a', ?)", (blob,))
    db.execute("SELECT relattn_import('b', ?)", (blob,))
    weights(db, "tok_emb", "a")
    weights(db, "tok_emb", "b")
    assert cached(db) == (2, 2 * b)
    db.execute("SELECT relattn_import('a', ?)", (modelgen.safetensors(CFG, rng),))
    db.execute("DELETE FROM relattn_model WHERE name = 'm149'")
    weights(db, "tok_emb", "b")                      # a hit: no sweep
    assert cached(db) == (2, 2 * b)
    db.execute("SELECT relattn_import('c', ?)", (blob,))
    weights(db, "tok_emb", "c")                      # a load: a's old copy goes
    assert cached(db) == (2, 2 * b)


def test_cache_drops_models_of_a_detached_database(tmp_path, rng):
    other = connect(str(tmp_path / "other.db"))
    modelgen.load(other, "x", CFG, rng)
    other.commit()
    other.close()
    db = connect()
    b = model_bytes(db, CFG, rng)
    db.execute("ATTACH ? AS aux", (str(tmp_path / "other.db"),))
    weights(db, "tok_emb", "x")                      # read from aux
    assert cached(db) == (1, b)
    db.execute("DETACH aux")
    modelgen.load(db, "y", CFG, rng)
    weights(db, "tok_emb", "y")                      # the load drops x
    assert cached(db) == (1, b)
    db.close()


def test_cache_size_bounds_the_cache(db, rng):
    b = model_bytes(db, CFG, rng)
    ws = {}
    for name in "abcd":
        ws[name] = modelgen.load(db, name, CFG, rng)
        weights(db, "tok_emb", name)
    assert db.execute("SELECT relattn_cache_size()").fetchone()[0] == 1 << 30
    assert cached(db) == (4, 4 * b)
    # a smaller bound drops the least recently used at once
    weights(db, "tok_emb", "b")                      # order of use: b d c a
    assert db.execute("SELECT relattn_cache_size(?)", (2 * b + b // 2,)).fetchone()[0] == 2 * b + b // 2
    assert cached(db) == (2, 2 * b)                  # b and d kept
    assert np.array_equal(weights(db, "tok_emb", "a"), ws["a"]["tok_emb"].ravel())
    assert cached(db) == (2, 2 * b)                  # a and b
    # 0: only the model used last, however big
    db.execute("SELECT relattn_cache_size(0)")
    assert cached(db) == (1, b)
    for name in "cdab":
        assert np.array_equal(weights(db, "tok_emb", name), ws[name]["tok_emb"].ravel())
        assert cached(db) == (1, b)
    for arg, error in [(-1, "relattn_cache_size: bytes must be at least 0, not -1"),
                       ("1", "relattn_cache_size: bytes must be an integer")]:
        with pytest.raises(Exception) as e:
            db.execute("SELECT relattn_cache_size(?)", (arg,))
        assert str(e.value) == error
    assert db.execute("SELECT relattn_cache_size()").fetchone()[0] == 0


def test_two_processes_export_one_consistent_model(tmp_path, rng):
    # the same writer; this process exports all the while: each file must
    # be one model's config with that model's tensors
    import subprocess
    import sys
    cfg = {"a": modelgen.config(n_layers=2, activation="gelu"),
           "b": modelgen.config(n_layers=2, activation="relu", norm_eps=1e-3)}
    w = {k: modelgen.tensors(cfg[k], rng) for k in cfg}
    files = []
    for k in cfg:
        f = tmp_path / f"{k}.safetensors"
        f.write_bytes(modelgen.safetensors(cfg[k], weights=w[k]))
        files.append(str(f))
    path = str(tmp_path / "wal.db")
    db = connect(path, isolation_level=None, timeout=60)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("SELECT relattn_import('m', ?)", (pathlib.Path(files[0]).read_bytes(),))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, path, SO, "150"] + files,
                              stderr=subprocess.PIPE, text=True)
    seen = {}
    while True:
        done = writer.poll() is not None
        try:
            got, meta = sp.read(db.execute("SELECT relattn_export('m')").fetchone()[0])
            c = next(k for k in cfg if json.loads(meta["relattn.config"]) == cfg[k])
            d = next((k for k in cfg if all(got[n][2] == a.tobytes() for n, a in w[k].items())),
                     "other")
            key = c + d
        except Exception as e:
            key = str(e)
        seen[key] = seen.get(key, 0) + 1
        if done:
            break
    assert writer.wait() == 0, writer.stderr.read()
    db.close()
    assert set(seen) <= {"aa", "bb"}, seen
    assert seen.get("aa", 0) > 0 and seen.get("bb", 0) > 0, seen


def test_weights_errors(db, rng):
    modelgen.load(db, "m", modelgen.config(n_layers=1), rng)
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_weights('m', 'layers.1.ln1.weight')").fetchone()
    assert str(e.value) == "relattn_weights: model 'm' has no tensor 'layers.1.ln1.weight'"
    # tied: lm_head is not a stored tensor
    with pytest.raises(Exception, match="has no tensor 'lm_head'"):
        db.execute("SELECT relattn_weights('m', 'lm_head')").fetchone()


def test_import_busy_is_reported_as_busy(two, rng):
    import sqlite3
    a, b = two
    blob = modelgen.safetensors(CFG, rng)
    a.execute("SELECT relattn_import('m', ?)", (blob,))
    a.commit()
    b.execute("PRAGMA busy_timeout = 0")
    a.execute("BEGIN IMMEDIATE")
    a.execute("SELECT relattn_import('m', ?)", (blob,))
    before = b.execute("SELECT version FROM relattn_model").fetchone()
    with pytest.raises(sqlite3.OperationalError) as e:
        b.execute("SELECT relattn_import('m', ?)", (blob,))
    assert str(e.value) == "relattn_import: database is locked"
    if hasattr(e.value, "sqlite_errorcode"):
        assert e.value.sqlite_errorcode == sqlite3.SQLITE_BUSY
    a.rollback()
    assert b.execute("SELECT version FROM relattn_model").fetchone() == before


def test_cache_respects_max_memory(db, rng):
    cfg = modelgen.config(n_layers=2, d_model=128, n_heads=2, d_ff=512)
    modelgen.load(db, "m", cfg, rng)
    db.execute("SELECT relattn_max_memory(1048576)")
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_weights('m', 'tok_emb')").fetchone()
    assert str(e.value).startswith("relattn_weights: model 'm': needs ")
    assert str(e.value).endswith(" bytes, over the limit of 1048576 per call (relattn_max_memory)")
    need = int(str(e.value).split("needs ")[1].split()[0])
    params = sum(int(np.prod(s)) for _, s in modelgen.shapes(cfg))
    assert 4 * params <= need < 4 * params + 64 * 64 + 4096
    db.execute("SELECT relattn_max_memory(1 << 30)")
    assert len(db.execute("SELECT relattn_weights('m', 'tok_emb')").fetchone()[0]) == 4 * 259 * 128
    # a config edited to promise a huge model is refused before allocating
    db.execute("UPDATE relattn_model SET config = json_set(config, '$.d_model', 1 << 24, "
               "'$.vocab_size', 1 << 24)")
    with pytest.raises(Exception, match="relattn_weights: model 'm': needs .* over the limit"):
        db.execute("SELECT relattn_weights('m', 'tok_emb')").fetchone()


def test_cache_delete_reimport_then_same_number_of_edits(two, rng):
    # b caches a model that was edited once: (version v, sha256 NULL). a
    # deletes it, imports another, edits it and sets the version to v: the
    # same (version, sha256 NULL, config) as b cached. b must still see the
    # new weights (the model row is a new one).
    a, b = two
    cfg = modelgen.config(n_layers=1)
    modelgen.load(a, "m", cfg, rng)
    a.commit()
    x = rng.standard_normal(cfg["d_model"]).astype(np.float32)
    b.execute("UPDATE relattn_tensor SET data = ? WHERE name = 'ln_f.bias'", (x.tobytes(),))
    b.commit()
    assert np.array_equal(weights(b, "ln_f.bias"), x)
    v = b.execute("SELECT version FROM relattn_model").fetchone()[0]
    a.execute("DELETE FROM relattn_model WHERE name = 'm'")
    w = modelgen.load(a, "m", cfg, rng)
    y = rng.standard_normal(cfg["d_model"]).astype(np.float32)
    a.execute("UPDATE relattn_tensor SET data = ? WHERE name = 'ln_f.bias'", (y.tobytes(),))
    a.execute("UPDATE relattn_model SET version = ?", (v,))
    a.commit()
    assert a.execute("SELECT version, sha256 FROM relattn_model").fetchone() == (v, None)
    assert np.array_equal(weights(b, "ln_f.bias"), y)
    assert np.array_equal(weights(b, "tok_emb"), w["tok_emb"].ravel())


def test_models_keep_import_order(db, rng):
    names = ["zeta", "alpha", "mid"]
    for n in names:
        db.execute("SELECT relattn_import(?, ?)", (n, modelgen.safetensors(CFG, rng)))
    assert [r[0] for r in db.execute("SELECT name FROM relattn_model ORDER BY rowid")] == names


def test_held_model_survives_replacement(db, rng):
    # relattn_scan holds the model for the whole scan; a re-import in the
    # middle (and a call that loads the new version, replacing the cached
    # one) must not pull the old weights from under it.
    cfg = modelgen.config(n_layers=1)
    modelgen.load(db, "m", cfg, rng)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.executemany("INSERT INTO docs(body) VALUES (?)",
                   [(rng.integers(0, 256, int(rng.integers(3, 40))).astype("<i4").tobytes(),)
                    for _ in range(200)])
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', source='docs', "
               "tokens='body')")
    before = db.execute("SELECT id, score FROM temp.job").fetchall()
    cur = db.execute("SELECT id, score FROM temp.job")
    first = cur.fetchmany(10)
    modelgen.load(db, "m", cfg, rng)                      # new weights
    db.execute("SELECT relattn_weights('m', 'tok_emb')").fetchone()  # cache replaced
    rest = cur.fetchall()
    assert first + rest == before                         # the old model throughout
    after = db.execute("SELECT id, score FROM temp.job").fetchall()
    assert [r[0] for r in after] == [r[0] for r in before]
    assert all(a[1] != b[1] for a, b in zip(after, before))
