"""The rules every function shares (ext/util.c), checked on each function that
applies them: a token argument becomes model input one way (limit before
decoding, bos, the vocabulary), errors are valid UTF-8 with input bytes
escaped, and the same input gets the same message everywhere."""
import json
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import modelgen
from conftest import SO, connect


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


def err(db, sql, *args):
    with pytest.raises(Exception) as e:
        db.execute(sql, args).fetchall()
    assert isinstance(e.value, Exception)
    # sqlite3.Error, never UnicodeDecodeError: the message is valid UTF-8
    assert e.value.__class__.__module__ == "sqlite3", repr(e.value)
    return str(e.value), getattr(e.value, "sqlite_errorname", None)


@pytest.fixture
def model_db(db, rng):
    modelgen.load(db, "m", modelgen.config(), rng)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body)")
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='docs', tokens='body')")
    return db


def scan_err(db, body):
    db.execute("DELETE FROM docs")
    db.execute("INSERT INTO docs VALUES (7, ?)", (body,))
    return err(db, "SELECT score FROM temp.job")


SCALARS = ("relattn_score", "relattn_perplexity", "relattn_embed")


def test_leading_bos_refused_everywhere(model_db):
    """A token BLOB that starts with bos would get a second one in front:
    every model function refuses it, with one wording."""
    db = model_db
    body = toks([256, 72, 105])
    for fn in SCALARS:
        assert err(db, f"SELECT {fn}('m', ?)", body)[0] == (
            f"{fn}: tokens starts with bos (256); leave it out: the model puts "
            "bos in front itself")
    assert err(db, "SELECT * FROM relattn_logprobs('m', ?)", body)[0] == (
        "relattn_logprobs: tokens starts with bos (256); leave it out: the "
        "model puts bos in front itself")
    assert err(db, "SELECT * FROM relattn_attention_weights('m', ?)", body)[0] \
        .startswith("relattn_attention_weights: tokens starts with bos (256)")
    assert scan_err(db, body)[0] == (
        "relattn_scan: body of id 7 starts with bos (256); leave it out: the "
        "model puts bos in front itself")
    # bos elsewhere is an ordinary id, and a model without bos takes 256 first
    assert db.execute("SELECT relattn_score('m', ?)", (toks([72, 256]),)).fetchone()[0] < 0
    modelgen.load(db, "nobos", modelgen.config(bos=None), np.random.default_rng(1))
    assert db.execute("SELECT relattn_score('nobos', ?)", (body,)).fetchone()[0] < 0


def test_text_stored_as_blob_gets_a_hint(model_db):
    db = model_db
    body = b"DESC"  # 1129530692 as an int32
    hint = ("tokens has token 1129530692 at position 0, outside the model's "
            "vocabulary [0, 259); if the BLOB holds text, pass CAST(... AS "
            "TEXT) to tokenize it")
    for fn in SCALARS:
        assert err(db, f"SELECT {fn}('m', ?)", body)[0] == f"{fn}: {hint}"
    assert scan_err(db, body)[0] == "relattn_scan: body of id 7 " + hint[7:]
    # the cast it suggests works
    assert db.execute("SELECT relattn_score('m', CAST(? AS TEXT))", (body,)).fetchone()[0] < 0
    # ids that are not text get no hint
    assert err(db, "SELECT relattn_score('m', ?)", toks([300]))[0] == (
        "relattn_score: tokens has token 300 at position 0, outside the "
        "model's vocabulary [0, 259)")
    assert err(db, "SELECT relattn_score('m', ?)", toks([-1]))[0].endswith("[0, 259)")


HINT = "; if the BLOB holds text, pass CAST(... AS TEXT) to tokenize it"


@pytest.mark.parametrize("body", [
    b"DESC\nASC\n",                 # 12 bytes: its first id has a newline in it
    "caf\u00e9, au lait\t\n".encode(),  # 16 bytes, two of them one character
    b"select",                        # 6 bytes: not a whole number of ids
    "na\u00efve text".encode(),       # 11 bytes
])
def test_text_blob_of_any_size_gets_the_hint(model_db, body):
    """The hint follows from the BLOB being text (valid UTF-8, no control
    character but tab and newline), whatever its size."""
    db = model_db
    if len(body) % 4:
        want = f"tokens has {len(body)} bytes, not a multiple of 4"
    else:
        first = struct.unpack("<i", body[:4])[0]
        want = (f"tokens has token {first} at position 0, outside the "
                "model's vocabulary [0, 259)")
    for fn in SCALARS:
        assert err(db, f"SELECT {fn}('m', ?)", body)[0] == f"{fn}: {want}{HINT}"
    assert scan_err(db, body)[0] == f"relattn_scan: body of id 7 {want[7:]}{HINT}"
    assert db.execute("SELECT relattn_score('m', CAST(? AS TEXT))", (body,)).fetchone()[0] < 0
    # past the token limit, before any decoding: the same hint
    db.execute("SELECT relattn_max_tokens(2)")
    n = len(body) // 4
    if n > 2:
        assert err(db, "SELECT relattn_score('m', ?)", body)[0] == (
            f"relattn_score: tokens has {n} tokens, over relattn_max_tokens() = 2{HINT}")


@pytest.mark.parametrize("body", [
    toks([300]), toks([-1]), toks([70000, 5]),   # ids: a zero byte, or 0xff
    b"\x00\x01\x02",                            # not a multiple of 4, not text
    b"ab\xffc",                                   # not UTF-8
    b"abc\x01defg",                               # a control character
])
def test_blob_that_is_not_text_gets_no_hint(model_db, body):
    msg = err(model_db, "SELECT relattn_score('m', ?)", body)[0]
    assert msg.startswith("relattn_score: tokens has ") and "CAST" not in msg


def test_token_limit_same_everywhere(model_db):
    db = model_db
    db.execute("SELECT relattn_max_tokens(10)")
    for body, n in (("x" * 11, 11), (toks(range(1, 12)), 11)):
        for fn in SCALARS:
            assert err(db, f"SELECT {fn}('m', ?)", body) == (
                f"{fn}: tokens has {n} tokens, over relattn_max_tokens() = 10",
                "SQLITE_TOOBIG")
        assert scan_err(db, body) == (
            f"relattn_scan: body of id 7 has {n} tokens, over "
            "relattn_max_tokens() = 10", "SQLITE_TOOBIG")
    for body in (b"", ""):
        assert scan_err(db, body)[0] == "relattn_scan: body of id 7 is empty"
        assert err(db, "SELECT relattn_score('m', ?)", body)[0] == \
            "relattn_score: tokens is empty"



def test_token_limit_tokenize_and_detokenize(model_db):
    """relattn_tokenize and relattn_detokenize take a model and a token
    sequence: relattn_max_tokens() holds for them as for the model
    functions (the byte tokenizer's count is known before encoding), and
    the table-valued model functions refuse TEXT over it too."""
    db = model_db
    db.execute("SELECT relattn_max_tokens(10)")
    assert err(db, "SELECT relattn_tokenize('m', ?)", "x" * 11) == (
        "relattn_tokenize: text has 11 tokens, over relattn_max_tokens() = 10",
        "SQLITE_TOOBIG")
    for body in (toks(range(65, 76)), "x" * 11):
        assert err(db, "SELECT relattn_detokenize('m', ?)", body) == (
            "relattn_detokenize: tokens has 11 tokens, over "
            "relattn_max_tokens() = 10", "SQLITE_TOOBIG")
    for vt in ("relattn_logprobs", "relattn_attention_weights"):
        assert err(db, f"SELECT * FROM {vt}('m', ?)", "x" * 11) == (
            f"{vt}: tokens has 11 tokens, over relattn_max_tokens() = 10",
            "SQLITE_TOOBIG")
    # just under: as before
    assert db.execute("SELECT length(relattn_tokenize('m', ?))",
                      ("x" * 10,)).fetchone()[0] == 40
    assert db.execute("SELECT relattn_detokenize('m', ?)",
                      (toks(range(65, 75)),)).fetchone()[0] == "ABCDEFGHIJ"
    # a 10 MB text under the default limit: refused before it is encoded
    db.execute("SELECT relattn_max_tokens(65536)")
    assert err(db, "SELECT relattn_tokenize('m', ?)", "x" * 10_000_000) == (
        "relattn_tokenize: text has 10000000 tokens, over "
        "relattn_max_tokens() = 65536", "SQLITE_TOOBIG")


def test_scan_checks_the_limit_before_decoding(tmp_path):
    """With relattn_max_tokens(1000), a 48 MB TEXT row must be refused before
    it is decoded (4 bytes a token: 192 MB), under relattn_scan as under
    relattn_score. Peak memory of a child process, measured: the row itself
    is read once (48 MB); decoding it would add four times that."""
    if os.environ.get("RELATTN_SANITIZED"):
        pytest.skip("ASan's quarantine keeps freed memory: RSS is not ours")
    path = tmp_path / "big.db"
    script = textwrap.dedent(f"""
        import resource, sqlite3, sys
        sys.path.insert(0, {os.path.dirname(os.path.dirname(__file__))!r})
        import modelgen, numpy
        db = sqlite3.connect({str(path)!r})
        db.enable_load_extension(True)
        db.load_extension({SO!r})
        modelgen.load(db, "m", modelgen.config(), numpy.random.default_rng())
        db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
        db.execute("INSERT INTO docs VALUES (1, ?)", ("x" * (48 << 20),))
        db.commit()
        db.close()
        db = sqlite3.connect({str(path)!r})
        db.enable_load_extension(True)
        db.load_extension({SO!r})
        db.execute("SELECT relattn_max_tokens(1000)")
        db.execute("SELECT relattn_threads(1)")
        db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
                   "model='m', source='docs', tokens='body')")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            db.execute("SELECT score FROM temp.job").fetchall()
        except sqlite3.Error as e:
            print(e)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, env=os.environ, timeout=300)
    assert out.returncode == 0, out.stderr
    msg, grown = out.stdout.strip().splitlines()
    assert msg == ("relattn_scan: body of id 1 has 50331648 tokens, over "
                   "relattn_max_tokens() = 1000")
    # Over the peak the INSERT left (the row, twice): measured 0 MB with the
    # check before decoding, 96 MB without it.
    assert int(grown) < 40, f"peak memory grew by {grown} MB"


def test_errors_are_valid_utf8(model_db):
    """Input bytes echoed in a message are escaped (\\xNN), so clients get an
    sqlite3.Error, not a UnicodeDecodeError."""
    db = model_db
    bad = "CAST(x'41ff42' AS TEXT)"
    for fn in SCALARS:
        assert err(db, f"SELECT {fn}({bad}, 'abc')")[0] == \
            f"{fn}: no model named 'A\\xFFB'"
    assert err(db, f"SELECT relattn_tokenize({bad}, 'abc')")[0] == \
        "relattn_tokenize: no model named 'A\\xFFB'"
    assert err(db, f"SELECT * FROM relattn_logprobs({bad}, 'abc')")[0] == \
        "relattn_logprobs: no model named 'A\\xFFB'"
    # control characters too, and a long name is cut on a character boundary
    assert err(db, "SELECT relattn_score(?, 'abc')", "a\nb")[0] == \
        "relattn_score: no model named 'a\\x0Ab'"
    msg = err(db, "SELECT relattn_score(?, 'abc')", "é" * 200)[0]
    assert msg == "relattn_score: no model named '" + "é" * 48 + "...'"


def test_scan_error_cut_on_a_character_boundary(db, rng):
    """The scan keeps a row's error in a fixed buffer until its turn: a long
    column name of two-byte characters must not be cut inside one."""
    modelgen.load(db, "m", modelgen.config(), rng)
    col = "é" * 200
    db.execute(f'CREATE TABLE docs(id INTEGER PRIMARY KEY, "{col}")')
    db.execute("INSERT INTO docs VALUES (3, '')")
    db.execute(f"CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               f"model='m', source='docs', tokens='{col}')")
    msg = err(db, "SELECT score FROM temp.job")[0]
    assert msg.startswith("relattn_scan: " + "é" * 100)
    assert msg.endswith("é...")


def test_missing_tensor_one_wording(db, rng):
    """Import, a stored model with a row deleted and one with many rows
    deleted (fewer rows than tensors) name the missing tensor alike."""
    cfg = modelgen.config()
    weights = modelgen.tensors(cfg, rng)
    del weights["ln_f.bias"]
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_import('x', ?)",
                   (modelgen.safetensors(cfg, weights=weights),))
    assert str(e.value) == \
        "relattn_import: tensor 'ln_f.bias' is missing (the config needs it)"
    modelgen.load(db, "m", cfg, rng)
    db.execute("DELETE FROM relattn_tensor WHERE name = 'ln_f.bias'")
    assert err(db, "SELECT relattn_score('m', 'ab')")[0] == \
        "relattn_score: model 'm': tensor 'ln_f.bias' is missing (the config needs it)"
    db.execute("DELETE FROM relattn_tensor WHERE name LIKE 'layers.1.%'")
    assert err(db, "SELECT relattn_embed('m', 'ab')")[0] == (
        "relattn_embed: model 'm': tensor 'layers.1.ln1.weight' is missing "
        "(the config needs it)")


def test_non_finite_results_are_errors(db, rng):
    """Finite weights so large that float32 overflows gave NaN, which SQL
    shows as NULL: a score of NULL with no error. Now every function says
    which output is not finite."""
    cfg = modelgen.config()
    weights = {k: v * np.float32(1e30) for k, v in modelgen.tensors(cfg, rng).items()}
    modelgen.load(db, "big", cfg, weights=weights)
    why = "is not finite (NaN or Inf): the weights are too large for float32"
    for fn in ("relattn_score", "relattn_perplexity"):
        assert err(db, f"SELECT {fn}('big', 'abc')")[0] == \
            f"{fn}: the model's log-probability at position 1 {why}"
    assert err(db, "SELECT relattn_embed('big', 'abc')")[0] == \
        f"relattn_embed: the model's embedding (element 0) {why}"
    assert err(db, "SELECT * FROM relattn_logprobs('big', 'abc')")[0] == \
        f"relattn_logprobs: the model's log-probability at position 1 {why}"
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.execute("INSERT INTO docs VALUES (4, 'abc')")
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='big', source='docs', tokens='body')")
    assert err(db, "SELECT score FROM temp.job")[0] == \
        f"relattn_scan: id 4: the model's log-probability at position 1 {why}"


def test_attention_weights_layer_or_head_out_of_range(db, rng):
    """WHERE layer = 9 on a 2-layer model returned no rows and no error."""
    modelgen.load(db, "m", modelgen.config(n_layers=2, n_heads=2), rng)
    q = "SELECT count(*) FROM relattn_attention_weights('m', 'abc') WHERE "
    for where, msg in (
            ("layer = 9", "layer = 9 is out of range: the model has 2 layers (0 to 1)"),
            ("layer = -1", "layer = -1 is out of range: the model has 2 layers (0 to 1)"),
            ("layer = 2.0", "layer = 2.0 is out of range: the model has 2 layers (0 to 1)"),
            ("head = 2 AND layer = 0", "head = 2 is out of range: the model has 2 heads (0 to 1)")):
        assert err(db, q + where)[0] == "relattn_attention_weights: " + msg, where
    # values no row could equal still match nothing, as for a table
    for where in ("layer = 0.5", "layer = 'x'", "layer = NULL"):
        assert db.execute(q + where).fetchone() == (0,), where
    assert db.execute(q + "layer = 1 AND head = 1").fetchone() == (10,)


def st_file(header):
    """A safetensors file with this header (bytes) and 4 bytes of data."""
    return struct.pack("<Q", len(header)) + header + b"\0\0\0\0"


def with_extra_tensor(blob, name):
    """blob, a whole model's safetensors file, with one more 1-float tensor
    whose name is the bytes `name`."""
    n = struct.unpack("<Q", blob[:8])[0]
    header, data = json.loads(blob[8:8 + n]), blob[8 + n:]
    header["@NAME@"] = {"dtype": "F32", "shape": [1],
                        "data_offsets": [len(data), len(data) + 4]}
    h = json.dumps(header).encode().replace(b"@NAME@", name)
    return struct.pack("<Q", len(h)) + h + data + b"\0\0\0\0"


def test_echoed_input_is_escaped_and_cut(db):
    """Tensor names and dtypes from a safetensors header, config values and
    option names are input bytes: echoed escaped, long ones cut."""
    cfg = json.dumps(modelgen.config()).encode()
    imp = "SELECT relattn_import('x', ?, CAST(? AS TEXT))"
    t = b'{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    whole = modelgen.safetensors(modelgen.config(), np.random.default_rng(5))
    assert err(db, imp, with_extra_tensor(whole, b"A\xff\x7fB"), cfg)[0] == \
        "relattn_import: unexpected tensor 'A\\xFF\\x7FB' (not part of the config)"
    assert err(db, imp, with_extra_tensor(whole, "é".encode() * 300), cfg)[0] == \
        "relattn_import: unexpected tensor '" + "é" * 48 + "...' (not part of the config)"
    assert err(db, imp, st_file(b'{"tok_emb":{"dtype":"F\xff","shape":[1],'
                                b'"data_offsets":[0,4]}}'), cfg)[0] == \
        "relattn_import: tensor 'tok_emb' has dtype 'F\\xFF'; expected F32, F16 or BF16"
    bad_cfg = cfg.replace(b'"decoder"', b'"dec\xffoder"')
    assert err(db, imp, st_file(b'{"tok_emb":' + t + b'}'), bad_cfg)[0] == \
        "relattn_import: config: 'arch' must be one of decoder,encoder, not 'dec\\xFFoder'"
    assert err(db, "SELECT relattn_attention('[[1,0]]', '[[1,0]]', '[[1,0]]', NULL, "
                   "NULL, CAST(? AS TEXT))",
               b'{"heads":1,"d_head":2,"c\xffausel":1}')[0] == \
        "relattn_attention: unknown option 'c\\xFFausel' (known: heads, d_head, causal, per_head, position)"
    assert err(db, "SELECT relattn_attention('[[1,0]]', '[[1,0]]', '[[1,0]]', NULL, "
                   "NULL, CAST(? AS TEXT))",
               b'{"heads":"\xff","d_head":2}')[0] == \
        "relattn_attention: options.heads must be a positive integer, not \"\\xFF\""
