"""Cross-encoder pairs: relattn_classify(model, text_a, text_b) and
relattn_labels(model, text_a, text_b) against the float64 port of the
class's forward (tests/hf/ports.py) on the input Hugging Face's tokenizers
build for a pair (PreTrainedTokenizer.__call__(text, text_pair):
build_inputs_with_special_tokens gives [CLS] A [SEP] B [SEP] for BertTokenizer
and DebertaV2Tokenizer, create_token_type_ids_from_sequences 0 over
[CLS] A [SEP] and 1 over B [SEP]), fresh random weights and texts.

Tolerance: 1e-4 absolute on logits and probabilities (float32 forward
against float64; measured errors are around 1e-6)."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import checkpoints  # noqa: E402
import ports  # noqa: E402
from test_hf_import import check, import_checkpoint, make, toks  # noqa: E402

PAIR_CASES = ["bert-cls-rk", "bert-cls-rkq", "deberta-v3-cls", "deberta-v2-cls"]


def pair_input(ck, a_ids, b_ids):
    """[CLS] A [SEP] B [SEP] and its token types (all 0 when the model has
    no token type embeddings: DeBERTa-v3's type_vocab_size 0)."""
    ids = [ck.special["cls"]] + list(a_ids) + [ck.special["sep"]]
    types = [0] * len(ids)
    ids += list(b_ids) + [ck.special["sep"]]
    types += [1] * (len(b_ids) + 1)
    if ck.config.get("type_vocab_size", 0) < 2:
        types = [0] * len(ids)
    return ids, types


def pair_logits(ck, a_ids, b_ids):
    ids, types = pair_input(ck, a_ids, b_ids)
    return ports.forward(ck.config, ck.params, ids, types)["logits"]


@pytest.mark.parametrize("case", PAIR_CASES)
def test_pair_labels_and_classify(db, rng, tmp_path, case):
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    multi = ck.config.get("problem_type") == "multi_label_classification"
    names = [ck.config["id2label"][str(i)] for i in range(len(ck.config["id2label"]))]
    for _ in range(3):
        a = checkpoints.sample_text(rng, int(rng.integers(3, 9)))
        b = checkpoints.sample_text(rng, int(rng.integers(3, 9)))
        want = pair_logits(ck, ck.encode(a), ck.encode(b))
        rows = db.execute("SELECT label, logit, prob FROM relattn_labels('m', ?, ?)",
                          (a, b)).fetchall()
        assert [r[0] for r in rows] == names
        check(case, "pair logits", [r[1] for r in rows], want)
        probs = 1 / (1 + np.exp(-want)) if multi else ports.softmax(want)
        check(case, "pair probs", [r[2] for r in rows], probs)
        best = db.execute("SELECT relattn_classify('m', ?, ?)", (a, b)).fetchone()[0]
        assert best == names[int(np.argmax(want))]
        # a pair is not the two texts run together: the separator and, with
        # token types, the second segment change the logits
        alone = [r[0] for r in db.execute(
            "SELECT logit FROM relattn_labels('m', ?)", (a + " " + b,))]
        assert np.abs(np.asarray(alone) - want).max() > 1e-3


@pytest.mark.parametrize("case", ["bert-cls-rk", "deberta-v2-cls"])
def test_pair_of_token_blobs_and_swapped(db, rng, tmp_path, case):
    """Token BLOBs make the same pair; the order of the texts matters."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    a = checkpoints.sample_text(rng, 5)
    b = checkpoints.sample_text(rng, 7)
    ea, eb = ck.encode(a), ck.encode(b)
    got = [r[0] for r in db.execute("SELECT logit FROM relattn_labels('m', ?, ?)",
                                    (toks(ea), toks(eb)))]
    check(case, "pair logits (blobs)", got, pair_logits(ck, ea, eb))
    swapped = [r[0] for r in db.execute("SELECT logit FROM relattn_labels('m', ?, ?)",
                                        (b, a))]
    check(case, "pair logits (swapped)", swapped, pair_logits(ck, eb, ea))
    # hidden column text_b, as a WHERE constraint
    again = [r[0] for r in db.execute(
        "SELECT logit FROM relattn_labels WHERE model = 'm' AND tokens = ? AND text_b = ?",
        (a, b))]
    assert again == [r[0] for r in db.execute(
        "SELECT logit FROM relattn_labels('m', ?, ?)", (a, b))]


def error(db, sql, *args):
    with pytest.raises(Exception) as e:
        db.execute(sql, args).fetchall()
    return str(e.value)


def test_pair_refusals(db, rng, tmp_path):
    ck = make("bert-cls-rk", tmp_path / "b", rng)
    import_checkpoint(db, ck)
    assert error(db, "SELECT relattn_classify('m', '', 'a cat')") == \
        "relattn_classify: text_a is empty"
    assert error(db, "SELECT relattn_classify('m', 'a cat', '')") == \
        "relattn_classify: text_b is empty"
    assert error(db, "SELECT * FROM relattn_labels('m', 'a cat', 3.5)") == \
        "relattn_labels: text_b must be a token BLOB (int32 ids) or TEXT"
    # the separator inside text_a would move the segment boundary
    assert error(db, "SELECT relattn_classify('m', 'a cat [SEP] a dog', 'the end')") == (
        "relattn_classify: text_a holds the separator (token %d at position 2); a pair "
        "puts it between text_a and text_b itself" % ck.special["sep"])
    # over max_position_embeddings (64): no truncation, a clear error
    long_a = " ".join(["cat"] * 40)
    long_b = " ".join(["dog"] * 30)
    assert error(db, "SELECT relattn_classify('m', ?, ?)", long_a, long_b) == (
        "relattn_classify: text_a and text_b make 73 input rows (40 + 30 tokens and 3 "
        "special), over the model's position.max_position_embeddings = 64; shorten "
        "the texts")
    assert db.execute("SELECT relattn_classify('m', NULL, 'a')").fetchone()[0] is None
    assert db.execute("SELECT relattn_classify('m', 'a', NULL)").fetchone()[0] is None
    assert db.execute("SELECT count(*) FROM relattn_labels('m', 'a', NULL)").fetchone()[0] == 0
    # the model is checked before the texts
    t5 = make("t5-encoder-relu", tmp_path / "t", rng)
    import_checkpoint(db, t5, "t5")
    assert error(db, "SELECT relattn_classify('t5', 'a', 'b')") == \
        "relattn_classify: model 't5' has no classifier head (its head is 'none')"


def test_pair_needs_a_separator(db, rng, tmp_path):
    """A classifier whose tokenizer has no sep (a native model) refuses a
    pair with the reason."""
    ck = make("bert-cls-rk", tmp_path, rng)
    import_checkpoint(db, ck)
    cfg = json.loads(db.execute("SELECT config FROM relattn_model WHERE name='m'").fetchone()[0])
    del cfg["tokenizer"]["sep"]
    db.execute("UPDATE relattn_model SET config = ? WHERE name = 'm'", (json.dumps(cfg),))
    assert error(db, "SELECT relattn_classify('m', 'a cat', 'a dog')") == ("relattn_classify: model 'm' has no tokenizer.sep: it takes "
                            "one text, not a pair")


@pytest.mark.parametrize("case", ["bert-cls-rk", "deberta-v2-cls"])
def test_scan_over_pairs(db, rng, tmp_path, case):
    """relattn_scan with text_b=: each row's pair as relattn_classify and
    relattn_labels give it (the same bits: one forward pass each way), a
    NULL in either column NULL results, a bad pair the row's error."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    db.execute("CREATE TABLE p(id INTEGER PRIMARY KEY, a TEXT, b TEXT)")
    rows = [(checkpoints.sample_text(rng, 5), checkpoints.sample_text(rng, 4)) for _ in range(6)]
    rows += [("a cat sat", None), (None, "a dog"), ("a cat", "")]
    db.executemany("INSERT INTO p(a, b) VALUES (?, ?)", rows)
    db.execute("CREATE VIRTUAL TABLE temp.j USING relattn_scan(model='m', source='p', "
               "tokens='a', text_b='b')")
    got = db.execute("SELECT id, n_tokens, label, logit, prob, error FROM temp.j").fetchall()
    assert len(got) == len(rows)
    for (i, n_tokens, label, logit, prob, error), (a, b) in zip(got, rows):
        if a is None or b is None:
            assert (n_tokens, label, logit, error) == (None, None, None, None)
            continue
        if b == "":
            assert error == "relattn_scan: b of id %d is empty" % i
            continue
        want = pair_logits(ck, ck.encode(a), ck.encode(b))
        assert n_tokens == len(ck.encode(a)) + 1 + len(ck.encode(b))
        assert label == db.execute("SELECT relattn_classify('m', ?, ?)", (a, b)).fetchone()[0]
        assert abs(logit - float(want.max())) < 1e-4
        best = db.execute("SELECT logit, prob FROM relattn_labels('m', ?, ?) "
                          "ORDER BY logit DESC LIMIT 1", (a, b)).fetchone()
        assert (logit, prob) == best
    assert error_of(db, "CREATE VIRTUAL TABLE temp.k USING relattn_scan(model='m', "
                        "source='p', tokens='a', text_b='c')") == (
        "relattn_scan: source 'p' has no column 'c' (text_b=)")


def error_of(db, sql):
    with pytest.raises(Exception) as e:
        db.execute(sql)
    return str(e.value)


def test_scan_pair_needs_a_separator(db, rng, tmp_path):
    t5 = make("t5-encoder-relu", tmp_path, rng)
    import_checkpoint(db, t5, "t5")
    db.execute("CREATE TABLE p(a TEXT, b TEXT)")
    assert error_of(db, "CREATE VIRTUAL TABLE temp.k USING relattn_scan(model='t5', "
                        "source='p', tokens='a', text_b='b')") == (
        "relattn_scan: model 't5' has no tokenizer.sep: it takes one text, not a pair "
        "(text_b=)")
