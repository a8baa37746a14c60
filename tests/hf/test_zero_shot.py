"""relattn_zero_shot against a float64 port of transformers'
ZeroShotClassificationPipeline (pipelines/zero_shot_classification.py):
each candidate label makes the pair (text, hypothesis_template.format(label))
([CLS] text [SEP] hypothesis [SEP], tests/hf/test_pairs.py), the
classifier's logits of every pair come from the float64 port of its forward
(tests/hf/ports.py), and postprocess turns them into scores:
- multi_label, or a single candidate: per pair, the softmax over
  (contradiction, entailment) logits, contradiction being class 0, or the
  last class when entailment is class 0, and its entailment part;
- else the softmax of the pairs' entailment logits over the candidates;
- the entailment class: the first label starting with "entail" (any case);
- the order: reversed(scores.argsort()).
Fresh random weights and texts; tolerance 1e-4 absolute on scores and
logits (float32 forward against float64)."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import checkpoints  # noqa: E402
import ports  # noqa: E402
from test_hf_import import check, import_checkpoint, make  # noqa: E402
from test_pairs import error, pair_logits  # noqa: E402


def entailment_id(names):
    # ZeroShotClassificationPipeline.entailment_id over label2id
    for i, label in enumerate(names):
        if label.lower().startswith("entail"):
            return i
    return -1


def pipeline_scores(logits, names, multi_label):
    """ZeroShotClassificationPipeline.postprocess for one sequence: logits
    (n candidates, classes) -> (labels in order, scores in order)."""
    logits = np.asarray(logits, np.float64)
    entail = entailment_id(names)
    if multi_label or logits.shape[0] == 1:
        contradiction = -1 if entail == 0 else 0
        ec = logits[:, [contradiction, entail]]
        scores = (np.exp(ec) / np.exp(ec).sum(-1, keepdims=True))[:, 1]
    else:
        e = logits[:, entail]
        scores = np.exp(e) / np.exp(e).sum()
    top = list(reversed(scores.argsort()))
    return top, scores[top]


def relabel(db, ck, names, name):
    """The same weights under other label names (id2label rewritten)."""
    cfg = dict(ck.config)
    cfg["id2label"] = {str(i): n for i, n in enumerate(names)}
    cfg["label2id"] = {n: i for i, n in enumerate(names)}
    db.execute("SELECT relattn_import(?, ?, ?, ?, ?)",
               (name, ck.read("weights"), json.dumps(cfg), ck.read("tokenizer"),
                ck.path("tokenizer_config").read_text())).fetchone()


def zero_shot(db, model, text, labels, options=None):
    if options is None:
        return db.execute("SELECT rowid, label, score, logit FROM relattn_zero_shot(?, ?, ?)",
                          (model, text, json.dumps(labels))).fetchall()
    return db.execute("SELECT rowid, label, score, logit FROM relattn_zero_shot(?, ?, ?, ?)",
                      (model, text, json.dumps(labels), json.dumps(options))).fetchall()


@pytest.mark.parametrize("case", ["bert-cls-rk", "deberta-v3-cls", "deberta-v2-cls-relu-tanh-pooler"])
@pytest.mark.parametrize("names", [["entailment", "neutral", "contradiction"],
                                   ["CONTRADICTION", "Neutral", "Entailment"],
                                   ["contradiction", "entails", "neutral"]])
def test_zero_shot_matches_the_pipeline(db, rng, tmp_path, case, names):
    ck = make(case, tmp_path, rng)
    relabel(db, ck, names, "nli")
    text = checkpoints.sample_text(rng, int(rng.integers(4, 10)))
    words = checkpoints.WORDS
    labels = [str(words[i]) for i in rng.choice(len(words), 5, replace=False)]
    template = "This example is {}."
    logits = np.stack([pair_logits(ck, ck.encode(text), ck.encode(template.format(l)))
                       for l in labels])
    for multi in (False, True):
        rows = zero_shot(db, "nli", text, labels, {"multi_label": multi})
        top, scores = pipeline_scores(logits, names, multi)
        assert [r[0] for r in rows] == list(range(len(labels)))
        assert [r[1] for r in rows] == [labels[i] for i in top]
        check(case, f"zero-shot scores multi={multi}", [r[2] for r in rows], scores)
        check(case, "zero-shot entailment logits", [r[3] for r in rows],
              logits[top, entailment_id(names)])
    # the default options are single-label with the default template
    assert zero_shot(db, "nli", text, labels) == zero_shot(db, "nli", text, labels,
                                                           {"multi_label": False})


def test_template_and_one_label(db, rng, tmp_path):
    """A template of the user's, braces escaped as str.format escapes them;
    one candidate is scored as multi_label (the pipeline's rule)."""
    ck = make("deberta-v3-cls", tmp_path, rng)
    relabel(db, ck, ["entailment", "neutral", "contradiction"], "nli")
    text = checkpoints.sample_text(rng, 7)
    template = "{{Topic}}: {0} and {}"
    hyp = lambda l: "{Topic}: %s and %s" % (l, l)  # noqa: E731
    labels = ["river", "city", "music"]
    logits = np.stack([pair_logits(ck, ck.encode(text), ck.encode(hyp(l))) for l in labels])
    rows = zero_shot(db, "nli", text, labels, {"hypothesis_template": template})
    top, scores = pipeline_scores(logits, ["entailment", "neutral", "contradiction"], False)
    assert [r[1] for r in rows] == [labels[i] for i in top]
    check("template", "scores", [r[2] for r in rows], scores)
    one = zero_shot(db, "nli", text, ["river"], {"hypothesis_template": template})
    _, s1 = pipeline_scores(logits[:1], ["entailment", "neutral", "contradiction"], False)
    check("one label", "scores", [one[0][2]], s1)
    assert 0 < one[0][2] < 1 and abs(one[0][2] - 1.0) > 1e-6   # not a softmax over one


def test_long_text_is_cut_only_first(db, rng, tmp_path):
    """Over max_position_embeddings the text loses its last tokens and the
    hypothesis stays whole (truncation 'only_first')."""
    ck = make("bert-cls-rk", tmp_path, rng)
    relabel(db, ck, ["entailment", "neutral", "contradiction"], "nli")
    text = checkpoints.sample_text(rng, 80)
    a = ck.encode(text)
    assert len(a) > 64
    labels = ["stone", "water"]
    hyps = [ck.encode("This example is %s." % l) for l in labels]
    logits = np.stack([pair_logits(ck, a[:64 - 3 - len(h)], h) for h in hyps])
    rows = zero_shot(db, "nli", text, labels)
    top, scores = pipeline_scores(logits, ["entailment", "neutral", "contradiction"], False)
    assert [r[1] for r in rows] == [labels[i] for i in top]
    check("only_first", "scores", [r[2] for r in rows], scores)
    # a hypothesis that leaves no room for the text is an error
    big = " ".join(["dog"] * 70)
    n_h = len(ck.encode("This example is %s." % big))
    assert error(db, "SELECT * FROM relattn_zero_shot('nli', 'a cat', ?)",
                 json.dumps([big])) == (
        "relattn_zero_shot: text and hypothesis make %d input rows (2 + %d tokens and 3 "
        "special), over the model's position.max_position_embeddings = 64; shorten "
        "the texts" % (n_h + 5, n_h))


def test_same_label_twice(db, rng, tmp_path):
    """The same label twice: two rows of the same score, half each."""
    ck = make("deberta-v3-cls", tmp_path, rng)
    relabel(db, ck, ["entailment", "neutral", "contradiction"], "nli")
    rows = db.execute("SELECT rowid, label, score FROM relattn_zero_shot('nli', 'a cat sat', "
                      "'[\"dog\", \"dog\"]')").fetchall()
    assert rows[0][2] == rows[1][2] == 0.5


def test_zero_shot_refusals(db, rng, tmp_path):
    ck = make("deberta-v3-cls", tmp_path, rng)
    relabel(db, ck, ["entailment", "neutral", "contradiction"], "nli")
    relabel(db, ck, ["positive", "negative", "neutral"], "sent")
    q = "SELECT * FROM relattn_zero_shot(?, ?, ?)"
    q4 = "SELECT * FROM relattn_zero_shot(?, ?, ?, ?)"
    assert error(db, q, "sent", "a cat", '["x"]') == (
        "relattn_zero_shot: model 'sent' has no entailment label (none of its labels "
        "starts with 'entail'): zero-shot classification needs an NLI model")
    assert error(db, q, "nli", "a cat", "sports, politics") == (
        "relattn_zero_shot: labels must be a JSON array of label texts, not "
        "'sports, politics'")
    assert error(db, q, "nli", "a cat", '"sports"') == (
        "relattn_zero_shot: labels must be a JSON array of label texts, not '\"sports\"'")
    assert error(db, q, "nli", "a cat", 7) == (
        "relattn_zero_shot: labels must be a JSON array of label texts (TEXT)")
    assert error(db, q, "nli", "a cat", '["a", 3]') == (
        "relattn_zero_shot: labels[1] must be a string, not integer")
    assert error(db, q, "nli", "a cat", "[]") == (
        "relattn_zero_shot: labels is empty: give at least one label")
    assert error(db, q4, "nli", "a cat", '["a"]', "[1]") == (
        "relattn_zero_shot: options must be a JSON object, not '[1]'")
    assert error(db, q4, "nli", "a cat", '["a"]', '{"multi_class": true}') == (
        "relattn_zero_shot: options: unknown key 'multi_class' (the keys are "
        "hypothesis_template and multi_label)")
    assert error(db, q4, "nli", "a cat", '["a"]', '{"multi_label": 1}') == (
        "relattn_zero_shot: options: multi_label must be true or false, not integer")
    assert error(db, q4, "nli", "a cat", '["a"]', '{"hypothesis_template": 5}') == (
        "relattn_zero_shot: options: hypothesis_template must be a string, not integer")
    assert error(db, q4, "nli", "a cat", '["a"]', '{"hypothesis_template": "About it."}') == (
        "relattn_zero_shot: hypothesis_template 'About it.' has no {} where the label goes")
    assert error(db, q4, "nli", "a cat", '["a"]', '{"hypothesis_template": "About {x}."}') == (
        "relattn_zero_shot: hypothesis_template 'About {x}.' has a field other than {} "
        "(the label), or a lone brace (write {{ or }})")
    assert error(db, q, "nli", "", '["a"]') == "relattn_zero_shot: text is empty"
    assert error(db, q, "nope", "a cat", '["a"]') == "relattn_zero_shot: no model named 'nope'"
    assert error(db, "SELECT * FROM relattn_zero_shot('nli', 'a cat')") == (
        "relattn_zero_shot: model, text and labels arguments are required")
    assert db.execute(q, ("nli", None, '["a"]')).fetchall() == []


def test_over_a_table(db, rng, tmp_path):
    """In a join each row of a table gets its own answer (the text argument
    pushed down from the outer table), the same as one call per row; and
    relattn_labels takes the pair's second text from a column."""
    ck = make("deberta-v3-cls", tmp_path, rng)
    relabel(db, ck, ["entailment", "neutral", "contradiction"], "nli")
    db.execute("CREATE TABLE d(id INTEGER PRIMARY KEY, body TEXT, hyp TEXT)")
    rows = [(checkpoints.sample_text(rng, 6), checkpoints.sample_text(rng, 4)) for _ in range(4)]
    db.executemany("INSERT INTO d(body, hyp) VALUES (?, ?)", rows)
    labels = '["river", "music", "stone"]'
    joined = db.execute("SELECT d.id, z.rowid, z.label, z.score FROM d, "
                        "relattn_zero_shot('nli', d.body, ?) AS z ORDER BY d.id, z.rowid",
                        (labels,)).fetchall()
    single = [(i + 1,) + r for i, (body, _) in enumerate(rows)
              for r in db.execute("SELECT rowid, label, score FROM relattn_zero_shot('nli', ?, ?)",
                                  (body, labels))]
    assert joined == single and len(joined) == 12
    pairs = db.execute("SELECT d.id, l.logit FROM d, relattn_labels('nli', d.body, d.hyp) AS l "
                       "ORDER BY d.id, l.rowid").fetchall()
    for i, (body, hyp) in enumerate(rows):
        want = pair_logits(ck, ck.encode(body), ck.encode(hyp))
        check("table", "pair logits", [p[1] for p in pairs if p[0] == i + 1], want)
