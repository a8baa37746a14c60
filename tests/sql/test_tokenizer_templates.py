"""The tokenizer's template (docs/reference.md, Running a model): the model's
input is [bos] + tokens + [append] (BERT's [CLS] ... [SEP], T5's ... </s>),
checked against the float64 reference (tests/sql/reference_model.py) on
random models; the config keys tokenizer.append, .sep, .mask and .unk and
their errors."""
import json
import sqlite3
import sys
import pathlib

import numpy as np
import pytest

from conftest import from_f32, rel_err

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import reference_model as ref  # noqa: E402


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


def load(db, name, cfg, params):
    return db.execute("SELECT relattn_import(?, ?)",
                      (name, ref.safetensors_bytes(params, cfg))).fetchone()[0]


def random_tokens(rng, n, cfg):
    t = [int(x) for x in rng.integers(0, 256, n)]
    return t


def model(rng, db, arch, bos=True, append=257, **kw):
    cfg = ref.random_config(rng, arch=arch, bos=bos, **kw)
    cfg["tokenizer"]["append"] = append
    params = ref.random_params(rng, cfg)
    load(db, "m", cfg, params)
    return cfg, params


@pytest.mark.parametrize("bos", [True, False])
def test_decoder_scores_the_appended_token(db, rng, bos):
    """A decoder with append (eos): the appended token is scored last, at
    the sequence position after the last token."""
    cfg, params = model(rng, db, "decoder", bos=bos)
    tokens = random_tokens(rng, 7, cfg)
    want = ref.logprob_rows(cfg, params, tokens)
    got = db.execute("SELECT pos, token, logprob, top_logprob FROM "
                     "relattn_logprobs('m', ?)", (toks(tokens),)).fetchall()
    assert len(got) == len(want) == (8 if bos else 7)
    assert [r[:2] for r in got] == [r[:2] for r in want]
    assert got[-1][:2] == (7, 257)
    assert np.abs(np.array([r[2] for r in got]) -
                  [r[2] for r in want]).max() < 1e-4
    score = db.execute("SELECT relattn_score('m', ?)",
                       (toks(tokens),)).fetchone()[0]
    assert abs(score - ref.score(cfg, params, tokens)) < 1e-4 * len(want)
    # without the key, one row fewer and another score
    del cfg["tokenizer"]["append"]
    load(db, "plain", cfg, params)
    plain = db.execute("SELECT count(*), sum(logprob) FROM "
                       "relattn_logprobs('plain', ?)",
                       (toks(tokens),)).fetchone()
    assert plain[0] == len(got) - 1
    assert abs(plain[1] - ref.score(cfg, params, tokens)) < 1e-4 * len(want)
    assert abs(plain[1] - score) > 1e-3


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_embedding_keeps_the_appended_token(db, rng, arch):
    """The mean is over every input row, bos and the appended one too (as
    sentence-transformers' mean over the attention mask keeps [CLS], [SEP]
    and </s>)."""
    cfg, params = model(rng, db, arch, norm="post")
    tokens = random_tokens(rng, 6, cfg)
    got = from_f32(db.execute("SELECT relattn_embed('m', ?)",
                              (toks(tokens),)).fetchone()[0])
    hidden = ref.forward(cfg, params, ref.model_input(cfg, tokens))["hidden"]
    assert hidden.shape[0] == 8
    assert rel_err(got, hidden.mean(0)) < 1e-5
    assert rel_err(got, hidden[:-1].mean(0)) > 1e-3
    # the appended token is in the attention maps too: 8 positions
    n, last = db.execute("SELECT count(DISTINCT qpos), max(kpos) FROM "
                         "relattn_attention_weights('m', ?) WHERE layer = 0 "
                         "AND head = 0", (toks(tokens),)).fetchone()
    assert (n, last) == (8, 7)


def test_scan_uses_the_template(db, rng):
    cfg, params = model(rng, db, "encoder")
    db.execute("CREATE TABLE docs(body BLOB)")
    rows = [random_tokens(rng, int(rng.integers(1, 9)), cfg) for _ in range(5)]
    db.executemany("INSERT INTO docs VALUES (?)", [(toks(t),) for t in rows])
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', "
               "source='docs', tokens='body')")
    got = db.execute("SELECT n_tokens, embedding FROM temp.job ORDER BY id"
                     ).fetchall()
    assert [r[0] for r in got] == [len(t) for t in rows]  # the user's tokens
    for (_, emb), t in zip(got, rows):
        assert rel_err(from_f32(emb), ref.embedding(cfg, params, t)) < 1e-5


def test_learned_positions_count_the_appended_token(db, rng):
    cfg = ref.random_config(rng, arch="encoder", position={
        "type": "rel_key", "max_position_embeddings": 8})
    cfg["tokenizer"]["append"] = 257
    load(db, "m", cfg, ref.random_params(rng, cfg))
    assert db.execute("SELECT length(relattn_embed('m', ?))",
                      (toks([65] * 6),)).fetchone()[0] == 4 * cfg["d_model"]
    with pytest.raises(sqlite3.DataError) as e:
        db.execute("SELECT relattn_embed('m', ?)", (toks([65] * 7),))
    assert str(e.value) == (
        "relattn_embed: tokens makes 9 input rows (7 tokens with bos and the "
        "appended token), over the model's position.max_position_embeddings = "
        "8 (its rel_k tables cover distances up to 7)")
    cfg["tokenizer"]["bos"] = None
    load(db, "m", cfg, ref.random_params(rng, cfg))
    with pytest.raises(sqlite3.DataError) as e:
        db.execute("SELECT relattn_embed('m', ?)", (toks([65] * 8),))
    assert str(e.value) == (
        "relattn_embed: tokens makes 9 input rows (8 tokens with the appended "
        "token), over the model's position.max_position_embeddings = 8 (its "
        "rel_k tables cover distances up to 7)")


def test_wordpiece_template_exact(db, rng):
    """BERT's [CLS] text [SEP] for a wordpiece model: the ids in front and
    after, hand-checked on a small vocabulary."""
    vocab = "[PAD] [CLS] [SEP] [UNK] [MASK] hello world ##s , !"
    cfg = ref.random_config(rng, arch="decoder", vocab_size=12)
    cfg["tokenizer"] = {"type": "wordpiece", "bos": 1, "append": 2, "sep": 2,
                        "pad": 0, "mask": 4, "unk": 3}
    params = ref.random_params(rng, cfg)
    assert db.execute("SELECT relattn_import('wp', ?, NULL, ?)",
                      (ref.safetensors_bytes(params, cfg),
                       vocab.replace(" ", "\n").encode())).fetchone()[0] \
        == len(params) + 1
    got = db.execute("SELECT pos, token FROM relattn_logprobs('wp', "
                     "'Hello, worlds!')").fetchall()
    # [CLS] hello , world ##s ! [SEP]: each token after [CLS] is scored
    assert got == [(0, 5), (1, 8), (2, 6), (3, 7), (4, 9), (5, 2)]
    assert db.execute("SELECT relattn_tokens_json(relattn_tokenize('wp', "
                      "'Hello, worlds!'))").fetchone()[0] == "[5,8,6,7,9]"
    want = ref.logprob_rows(cfg, params, [5, 8, 6, 7, 9])
    lp = db.execute("SELECT logprob FROM relattn_logprobs('wp', "
                    "'Hello, worlds!')").fetchall()
    assert np.abs(np.array(lp)[:, 0] - [r[2] for r in want]).max() < 1e-4
    # the keys are kept in the stored config and through export
    assert db.execute("SELECT relattn_import('wp2', relattn_export('wp'))"
                      ).fetchone()[0] == len(params) + 1
    stored = json.loads(db.execute("SELECT config FROM relattn_model WHERE "
                                   "name = 'wp2'").fetchone()[0])
    assert stored["tokenizer"] == cfg["tokenizer"]


@pytest.mark.parametrize("key", ["append", "sep", "mask", "unk"])
def test_config_errors(db, rng, key):
    cfg = ref.random_config(rng)
    params = ref.random_params(rng, cfg)
    blob = ref.safetensors_bytes(params)

    def fails(value, message):
        c = json.loads(json.dumps(cfg))
        c["tokenizer"][key] = value
        with pytest.raises(sqlite3.OperationalError) as e:
            db.execute("SELECT relattn_import('m', ?, ?)", (blob, json.dumps(c)))
        assert str(e.value) == message

    fails(12, f"relattn_import: config: 'tokenizer.{key}' must be at least "
          "256 and below vocab_size (260), not 12")
    fails(260, f"relattn_import: config: 'tokenizer.{key}' must be at least "
          "256 and below vocab_size (260), not 260")
    fails("[SEP]", f"relattn_import: config: 'tokenizer.{key}' must be an "
          "integer or null, not text")
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = "
                      "'relattn_model'").fetchone()[0] == 0
    c = json.loads(json.dumps(cfg))
    c["tokenizer"][key] = None
    assert db.execute("SELECT relattn_import('m', ?, ?)",
                      (blob, json.dumps(c))).fetchone()[0] == len(params)
