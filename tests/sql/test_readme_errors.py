"""The error messages README.md quotes in its prose are the ones the functions
give: each is found in README.md verbatim and produced by an input made for
it. (The README's SQL blocks are run by tests/shell/test_doc_examples.py;
this covers the messages quoted in sentences, where "q has 1000 bytes, not a
multiple of 4" once stood: 1000 is a multiple of 4.)"""
import pathlib
import sqlite3

import numpy as np
import pytest

import modelgen

README = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
README_FLAT = " ".join(README.split())  # quotes may wrap across lines

OPT = "'{\"heads\": 2, \"d_head\": 4}'"


def f32(n, bad=None):
    a = np.ones(n, dtype="<f4")
    if bad is not None:
        a[bad] = np.nan
    return a.tobytes()


CASES = [
    ("relattn_attention: q has 1002 bytes, not a multiple of 4",
     f"SELECT relattn_attention(zeroblob(1002), zeroblob(1002), zeroblob(1002), NULL, NULL, {OPT})", ()),
    ("relattn_attention: k has 48 floats, q has 64 (q, k and v must have the same shape)",
     f"SELECT relattn_attention(?, ?, ?, NULL, NULL, {OPT})", (f32(64), f32(48), f32(64))),
    ("relattn_attention: rel_k has 4 rows, not an odd number (2k+1)",
     f"SELECT relattn_attention(?, ?, ?, ?, NULL, {OPT})", (f32(64), f32(64), f32(64), f32(16))),
    ("relattn_attention: options lack d_head",
     "SELECT relattn_attention(?, ?, ?, NULL, NULL, '{\"heads\": 2}')", (f32(64),) * 3),
    ("relattn_attention: unknown option 'causel' (known: heads, d_head, causal, per_head, position)",
     "SELECT relattn_attention(?, ?, ?, NULL, NULL, '{\"heads\": 2, \"d_head\": 4, \"causel\": 1}')",
     (f32(64),) * 3),
    ("relattn_attention: v has a NaN or Inf at float 7",
     f"SELECT relattn_attention(?, ?, ?, NULL, NULL, {OPT})", (f32(64), f32(64), f32(64, bad=7))),
    # the position schemes' section
    ("relattn_attention: position type 'xl' needs w (argument 8)",
     "SELECT relattn_attention(?, ?, ?, ?, NULL, '{\"heads\": 2, \"d_head\": 4, "
     "\"position\": {\"type\": \"xl\"}}', ?)", (f32(64), f32(64), f32(64), f32(12), f32(8))),
    ("relattn_attention: bias has 62 floats, position type 't5' needs heads*num_buckets = 64 "
     "([heads, num_buckets])",
     "SELECT relattn_attention(?, ?, ?, NULL, NULL, '{\"heads\": 2, \"d_head\": 4, "
     "\"position\": {\"type\": \"t5\"}}', ?)", (f32(64), f32(64), f32(64), f32(62))),
    ("relattn_attention: rel_k has 7 rows (max_position_embeddings 4), fewer than the 2n-1 = 9 "
     "that q's 5 rows reach (position type 'rel_key')",
     "SELECT relattn_attention(?, ?, ?, ?, NULL, '{\"heads\": 2, \"d_head\": 4, "
     "\"position\": {\"type\": \"rel_key\"}}')", (f32(40), f32(40), f32(40), f32(28))),
    ("relattn_attention: rel_k has 15 rows, position type 'deberta' needs 2*position_buckets = 16",
     "SELECT relattn_attention(?, ?, ?, ?, NULL, '{\"heads\": 2, \"d_head\": 4, \"position\": "
     "{\"type\": \"deberta\", \"position_buckets\": 8, \"max_relative_positions\": 20}}')",
     (f32(64), f32(64), f32(64), f32(60))),
    ("relattn_attention: options.position.rotary_dim must be even, at least 2 and at most "
     "d_head = 8, not 7",
     "SELECT relattn_attention(?, ?, ?, NULL, NULL, '{\"heads\": 2, \"d_head\": 8, "
     "\"position\": {\"type\": \"rope\", \"rotary_dim\": 7}}')", (f32(64),) * 3),
    ("relattn_score: tokens starts with bos (256); leave it out: the model puts bos in front itself",
     "SELECT relattn_score('m', ?)", (np.array([256, 72], dtype="<i4").tobytes(),)),
    ("relattn_score: no model named 'x'", "SELECT relattn_score('x', 'abc')", ()),
    ("relattn_score: tokens is empty", "SELECT relattn_score('m', '')", ()),
    ("relattn_attention_weights: layer = 9 is out of range: the model has 2 layers (0 to 1)",
     "SELECT * FROM relattn_attention_weights('m', 'abc') WHERE layer = 9", ()),
    ("relattn_classify: model 'm' has no classifier head (its head is 'lm')",
     "SELECT relattn_classify('m', 'abc')", ()),
]


@pytest.mark.parametrize("msg,sql,args", CASES, ids=[c[0][:60] for c in CASES])
def test_readme_error_is_real(db, msg, sql, args):
    modelgen.load(db, "m", modelgen.config(n_layers=2), np.random.default_rng(0))
    # the README's example for the layer uses the bundled model's 4 layers
    quoted = msg.replace("2 layers (0 to 1)", "4 layers (0 to 3)")
    quoted = quoted.replace("model 'm'", "model 'tiny'")  # and its name
    assert quoted in README_FLAT, f"README.md does not quote: {quoted}"
    with pytest.raises(sqlite3.Error) as e:
        db.execute(sql, args).fetchall()
    assert str(e.value) == msg
