"""Token sequences: relattn_tokens, relattn_tokens_json, relattn_tokens_each,
relattn_tokens_agg, relattn_tokenize, relattn_detokenize."""
import json
import struct

import numpy as np
import pytest

import modelgen


def err(db, sql, *args):
    with pytest.raises(Exception) as e:
        db.execute(sql, args).fetchall()
    return str(e.value)


def test_tokens_round_trip(db, rng):
    ids = rng.integers(-2**31, 2**31, 500).astype(np.int32)
    ids[:2] = [-2**31, 2**31 - 1]
    blob = db.execute("SELECT relattn_tokens(?)", (json.dumps(ids.tolist()),)).fetchone()[0]
    assert blob == ids.astype("<i4").tobytes()
    text = db.execute("SELECT relattn_tokens_json(?)", (blob,)).fetchone()[0]
    assert json.loads(text) == ids.tolist()
    assert db.execute("SELECT relattn_tokens('[]'), relattn_tokens_json(x'')").fetchone() == (b"", "[]")
    assert db.execute("SELECT relattn_tokens(NULL), relattn_tokens_json(NULL)").fetchone() == (None, None)


@pytest.mark.parametrize("arg,error", [
    ("[1, 2.5]", "relattn_tokens: element 1 of json_array is not an integer"),
    ('[1, "2"]', "relattn_tokens: element 1 of json_array is not an integer"),
    ("[[1]]", "relattn_tokens: element 0 of json_array is not an integer"),
    ("[2147483648]", "relattn_tokens: element 0 of json_array is outside the int32 range"),
    ("[0, -2147483649]", "relattn_tokens: element 1 of json_array is outside the int32 range"),
    ("[100000000000000000000]", "relattn_tokens: element 0 of json_array is outside the int32 range"),
    ('{"a": 1}', "relattn_tokens: json_array is not a JSON array"),
    ("[1,", "relattn_tokens: json_array is not a JSON array"),
])
def test_tokens_errors(db, arg, error):
    assert err(db, "SELECT relattn_tokens(?)", arg) == error


def test_tokens_not_text(db):
    assert err(db, "SELECT relattn_tokens(x'01000000')") == (
        "relattn_tokens: json_array must be TEXT, a JSON array of integers")


def test_tokens_json_errors(db):
    assert err(db, "SELECT relattn_tokens_json(x'01020304ff')") == (
        "relattn_tokens_json: tokens has 5 bytes, not a multiple of 4")
    assert err(db, "SELECT relattn_tokens_json('[1,2]')") == (
        "relattn_tokens_json: tokens is TEXT, but there is no model to tokenize "
        "it: pass a token BLOB, e.g. relattn_tokens('[1,2,3]')")
    assert err(db, "SELECT relattn_tokens_json(5)") == (
        "relattn_tokens_json: tokens must be a token BLOB (int32 ids) or TEXT")


def test_tokens_each(db, rng):
    ids = rng.integers(-1000, 1000, 37).astype(np.int32)
    rows = db.execute("SELECT pos, token FROM relattn_tokens_each(?)",
                      (ids.astype("<i4").tobytes(),)).fetchall()
    assert rows == list(enumerate(ids.tolist()))
    # joined against a table, one sequence per row
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, toks BLOB)")
    db.executemany("INSERT INTO docs VALUES (?, relattn_tokens(?))",
                   [(1, "[5,6]"), (2, "[7]"), (3, "[]")])
    assert db.execute("SELECT id, pos, token FROM docs, relattn_tokens_each(docs.toks) "
                      "ORDER BY id, pos").fetchall() == [(1, 0, 5), (1, 1, 6), (2, 0, 7)]
    assert db.execute("SELECT count(*) FROM relattn_tokens_each(NULL)").fetchone()[0] == 0
    assert err(db, "SELECT * FROM relattn_tokens_each(x'010203')") == (
        "relattn_tokens_each: tokens has 3 bytes, not a multiple of 4")
    assert err(db, "SELECT * FROM relattn_tokens_each") == (
        "relattn_tokens_each: the tokens argument is missing")


def test_tokens_agg(db, rng):
    ids = rng.integers(-2**31, 2**31, 1000).astype(np.int32)
    db.execute("CREATE TABLE t(pos INTEGER PRIMARY KEY, token INTEGER)")
    db.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(ids.tolist())))
    blob = db.execute("SELECT relattn_tokens_agg(token) FROM "
                      "(SELECT token FROM t ORDER BY pos)").fetchone()[0]
    assert blob == ids.astype("<i4").tobytes()
    # round trip through relattn_tokens_each
    back = db.execute("SELECT relattn_tokens_agg(token) FROM relattn_tokens_each(?)",
                      (blob,)).fetchone()[0]
    assert back == blob
    assert db.execute("SELECT relattn_tokens_agg(token) FROM t WHERE 0").fetchone()[0] == b""
    assert err(db, "SELECT relattn_tokens_agg(x) FROM (SELECT 1 AS x UNION ALL SELECT 2.5)") == (
        "relattn_tokens_agg: token 1 is not an integer in the int32 range")
    assert err(db, "SELECT relattn_tokens_agg(4294967296)") == (
        "relattn_tokens_agg: token 0 is not an integer in the int32 range")
    assert err(db, "SELECT relattn_tokens_agg(NULL)") == (
        "relattn_tokens_agg: token 0 is not an integer in the int32 range")


@pytest.fixture
def model(db, rng):
    modelgen.load(db, "m", modelgen.config(n_layers=1, vocab_size=300), rng)
    return db


def test_tokenize_bytes(model, rng):
    db = model
    text = "héllo, wörld ✓ 🙂 \x01" + "".join(chr(c) for c in rng.integers(32, 0x3000, 50))
    blob = db.execute("SELECT relattn_tokenize('m', ?)", (text,)).fetchone()[0]
    assert np.frombuffer(blob, "<i4").tolist() == list(text.encode("utf-8"))
    assert db.execute("SELECT relattn_detokenize('m', ?)", (blob,)).fetchone()[0] == text
    assert db.execute("SELECT relattn_tokenize('m', '')").fetchone()[0] == b""
    # bos/eos/pad are markers: left out of the text
    ids = [256] + list(b"ab") + [258, 258] + list(b"c") + [257]
    blob = struct.pack(f"<{len(ids)}i", *ids)
    assert db.execute("SELECT relattn_detokenize('m', ?)", (blob,)).fetchone()[0] == "abc"
    # TEXT is a token sequence too: run through the tokenizer
    assert db.execute("SELECT relattn_detokenize('m', 'xyz')").fetchone()[0] == "xyz"


def test_tokenize_errors(model):
    db = model
    assert err(db, "SELECT relattn_detokenize('m', relattn_tokens('[97, 300]'))") == (
        "relattn_detokenize: tokens has token 300 at position 1, outside the "
        "model's vocabulary [0, 300)")
    assert err(db, "SELECT relattn_detokenize('m', relattn_tokens('[-1]'))") == (
        "relattn_detokenize: tokens has token -1 at position 0, outside the "
        "model's vocabulary [0, 300)")
    assert err(db, "SELECT relattn_detokenize('m', relattn_tokens('[97, 98, 280]'))") == (
        "relattn_detokenize: token 280 at position 2 is not a byte (0-255) nor "
        "the tokenizer's bos, eos or pad")
    assert err(db, "SELECT relattn_detokenize('m', x'616263')") == (
        "relattn_detokenize: tokens has 3 bytes, not a multiple of 4; if the "
        "BLOB holds text, pass CAST(... AS TEXT) to tokenize it")
    assert err(db, "SELECT relattn_detokenize('m', x'610063')") == (
        "relattn_detokenize: tokens has 3 bytes, not a multiple of 4")
    assert err(db, "SELECT relattn_tokenize('m', x'6162')") == "relattn_tokenize: text must be TEXT"
    assert err(db, "SELECT relattn_tokenize('nope', 'a')") == "relattn_tokenize: no model named 'nope'"
    assert err(db, "SELECT relattn_tokenize(1, 'a')") == (
        "relattn_tokenize: model must be a model name (TEXT)")


def test_no_model_table_yet(db):
    assert err(db, "SELECT relattn_tokenize('m', 'a')") == "relattn_tokenize: no model named 'm'"


def test_detokenize_partial_character(model):
    # half of 'é': not valid UTF-8 as text, exact as bytes
    assert model.execute("SELECT CAST(relattn_detokenize('m', relattn_tokens('[104,195]')) "
                         "AS BLOB)").fetchone()[0] == b"h\xc3"
