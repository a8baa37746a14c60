"""Model heads (config keys head, head_activation, pooler, labels,
problem_type, tokenizer.mask) and their SQL surface: relattn_classify,
relattn_labels, relattn_embed's pooling, relattn_logprobs on a masked-LM
model, against reference_model.heads (float64 numpy, written from Hugging
Face's BERT / DeBERTa-v2 head classes) on fresh random models.

Tolerances: logits and log-probs 1e-4 absolute; probabilities 1e-5
absolute; embeddings (mean, cls, pooler) 1e-5 relative (L2)."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import reference_model as ref  # noqa: E402
from conftest import SO, connect, from_f32, interrupted, rel_err  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]

LABELS = ["negative", "positive", "neutral", "mixed", "other"]


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


def load(db, name, cfg, params):
    db.execute("SELECT relattn_import(?, ?)",
               (name, ref.safetensors_bytes(params, cfg)))


def err(db, sql, *args):
    with pytest.raises(Exception) as e:
        db.execute(sql, args).fetchall()
    return str(e.value)


def random_tokens(rng, n):
    return [int(t) for t in rng.integers(0, 256, n)]


def encoder(rng, **kw):
    return ref.random_config(rng, arch="encoder", **kw)


# pooler activation, problem_type, labels, norm, bos, n
CLASSIFIERS = [
    ("tanh", None, 3, "pre", True, 1),
    (None, "single_label_classification", 2, "post", False, 37),
    ("gelu", "multi_label_classification", 5, "pre", True, 130),
    ("gelu_tanh", "regression", 1, "post", True, 9),
    ("relu", None, 4, "pre", False, 300),
]


@pytest.mark.parametrize("case", CLASSIFIERS,
                         ids=["-".join(str(x) for x in c) for c in CLASSIFIERS])
def test_classifier_matches_reference(db, rng, case):
    pooler, problem, n_labels, norm, bos, n = case
    cfg = ref.with_head(encoder(rng, norm=norm, bos=bos), "classifier",
                        pooler=pooler, labels=LABELS[:n_labels],
                        problem_type=problem)
    params = ref.random_params(rng, cfg)
    load(db, "c", cfg, params)
    tokens = random_tokens(rng, n)
    want = ref.heads(cfg, params, ref.model_input(cfg, tokens))
    got = db.execute("SELECT label, logit, prob FROM relattn_labels('c', ?)",
                     (toks(tokens),)).fetchall()
    assert [r[0] for r in got] == LABELS[:n_labels]
    assert np.abs(np.array([r[1] for r in got]) - want["logits"]).max() < 1e-4
    if problem == "regression":
        assert all(r[2] is None for r in got)
        assert err(db, "SELECT relattn_classify('c', ?)", toks(tokens)) == (
            "relattn_classify: model 'c' is a regression model (problem_type "
            "regression): its value is the logit of relattn_labels")
        return
    probs = np.array([r[2] for r in got])
    assert np.abs(probs - want["probs"]).max() < 1e-5
    if problem != "multi_label_classification":
        assert abs(probs.sum() - 1) < 1e-12
    best = db.execute("SELECT relattn_classify('c', ?)", (toks(tokens),)).fetchone()[0]
    # the reference's best label, up to a near-tie
    assert want["logits"][LABELS.index(best)] > want["logits"].max() - 1e-4
    # relattn_classify is relattn_labels' largest logit
    assert best == max(got, key=lambda r: r[1])[0]


def test_labels_are_the_config_labels_and_text_tokens(db, rng):
    # Labels of any text (quotes, non-ASCII), in id order; TEXT tokens go
    # through the byte tokenizer as for every model function.
    names = ["it's", "naïve", "日本", "", "a\"b"]
    cfg = ref.with_head(encoder(rng), "classifier", labels=names)
    params = ref.random_params(rng, cfg)
    load(db, "c", cfg, params)
    got = db.execute("SELECT rowid, label FROM relattn_labels('c', 'héllo')").fetchall()
    assert got == list(enumerate(names))
    want = ref.heads(cfg, params, ref.model_input(cfg, list("héllo".encode())))
    assert db.execute("SELECT relattn_classify('c', 'héllo')").fetchone()[0] == \
        names[int(np.argmax(want["logits"]))]
    assert db.execute("SELECT relattn_classify('c', NULL)").fetchone() == (None,)
    assert db.execute("SELECT count(*) FROM relattn_labels('c', NULL)").fetchone() == (0,)


NUL = " holds a NUL character (\\u0000), which relattn does not accept"


def test_strings_with_nul_are_refused(db, rng):
    """JSON's \\u0000 in a config string: SQLite before 3.45 cuts the string
    there when it decodes it ('a\\u0000b' would be the label 'a'), so a
    label, a choice or an added token's text holding one is refused, named;
    the database is left as it was."""
    cfg = ref.with_head(encoder(rng), "classifier", labels=["x", "a\0b", "y"])
    params = ref.random_params(rng, cfg)
    blob = ref.safetensors_bytes(params)

    def imp(c):
        return err(db, "SELECT relattn_import('c', ?, ?)", blob, json.dumps(c))

    pre = "relattn_import: config: "
    assert imp(cfg) == pre + "label 1 of 'labels'" + NUL
    assert imp(dict(cfg, labels=["\0"] * 3)) == pre + "label 0 of 'labels'" + NUL
    assert imp(dict(cfg, labels=["x", "y", "a\0b"], activation="gelu\0x")) == \
        pre + "'activation'" + NUL
    assert imp(dict(cfg, labels=["x", "y", "z"],
                    problem_type="regression\0")) == pre + "'problem_type'" + NUL
    tok = dict(cfg["tokenizer"], split_special=True,
               added_tokens={"259": "<sep>\0"})
    assert imp(dict(cfg, labels=["x", "y", "z"], tokenizer=tok)) == \
        pre + "'tokenizer.added_tokens' entry '259'" + NUL
    tok["added_tokens"] = {"259": {"content": "<s\0ep>"}}
    assert imp(dict(cfg, labels=["x", "y", "z"], tokenizer=tok)) == \
        pre + "'tokenizer.added_tokens' entry '259'" + NUL
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = "
                      "'relattn_model'").fetchone()[0] == 0
    # a backslash before u0000 is text: kept whole
    names = ["a\\u0000b", "\\\\", "c"]
    load(db, "c", ref.with_head(encoder(rng), "classifier", labels=names), params)
    assert [r[0] for r in db.execute(
        "SELECT label FROM relattn_labels('c', 'x')")] == names


# head_activation, tie, bos, n, masks
MLMS = [
    (None, True, True, 12, [0, 5]),
    ("gelu_tanh", False, True, 70, [3, 4, 69]),
    ("relu", True, False, 1, [0]),
    ("tanh", False, False, 200, list(range(0, 200, 3))),
]


@pytest.mark.parametrize("case", MLMS, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}" for c in MLMS])
def test_mlm_fills_masks_as_reference(db, rng, case):
    act, tie, bos, n, masks = case
    mask = 259
    cfg = ref.with_head(encoder(rng, tie=tie, bos=bos), "mlm", mask=mask,
                        head_activation=act)
    params = ref.random_params(rng, cfg)
    load(db, "m", cfg, params)
    tokens = random_tokens(rng, n)
    for i in masks:
        tokens[i] = mask
    ids = ref.model_input(cfg, tokens)
    want = ref.heads(cfg, params, ids)["mlm"]
    got = db.execute("SELECT pos, token, logprob, top_token, top_logprob "
                     "FROM relattn_logprobs('m', ?)", (toks(tokens),)).fetchall()
    assert [r[0] for r in got] == masks
    assert all(r[1] == mask and r[2] is None for r in got)
    off = 1 if bos else 0
    for pos, _, _, top, top_lp in got:
        row = want[pos + off]
        assert abs(top_lp - row.max()) < 1e-4
        assert row[top] > row.max() - 1e-4   # the argmax, up to a near-tie
    # k best fills per [MASK] (the hidden k argument), best first: the
    # reference's k largest, up to near-ties; rank 1 is the row above
    k = 5
    got_k = db.execute("SELECT pos, rank, top_token, top_logprob FROM "
                       "relattn_logprobs('m', ?, ?)", (toks(tokens), k)).fetchall()
    assert [(r[0], r[1]) for r in got_k] == [(p, j) for p in masks for j in range(1, k + 1)]
    for i, pos in enumerate(masks):
        rows = got_k[i * k:(i + 1) * k]
        assert (rows[0][2], rows[0][3]) == (got[i][3], got[i][4])
        row = want[pos + off]
        kth = np.sort(row)[::-1][:k]
        assert np.abs(np.array([r[3] for r in rows]) - kth).max() < 1e-4
        assert all(row[r[2]] > kth[j] - 1e-4 for j, r in enumerate(rows))
        assert len({r[2] for r in rows}) == k
    assert db.execute("SELECT count(*) FROM relattn_logprobs('m', ?) WHERE k = 3",
                      (toks(tokens),)).fetchone() == (3 * len(masks),)
    # no [MASK]: no rows
    plain = [t for t in tokens if t != mask]
    if plain:
        assert db.execute("SELECT count(*) FROM relattn_logprobs('m', ?)",
                          (toks(plain),)).fetchone() == (0,)


@pytest.mark.parametrize("head", ["mlm", "classifier"])
def test_heads_under_rmsnorm_without_biases(db, rng, head):
    # T5-style options: rmsnorm drops every norm's bias (mlm.norm's too),
    # biases false drops the layers' linear biases; the heads keep theirs.
    cfg = encoder(rng, bos=False)
    cfg.update(norm_kind="rmsnorm", biases=False)
    cfg = ref.with_head(cfg, head, mask=259, labels=LABELS[:3],
                        pooler="relu" if head == "classifier" else None)
    if head == "mlm":
        del cfg["labels"]
    params = ref.random_params(rng, cfg)
    assert "mlm.norm.bias" not in params and "layers.0.attn.bq" not in params
    assert ("mlm.dense.bias" in params) == (head == "mlm")
    load(db, "h", cfg, params)
    tokens = random_tokens(rng, 50)
    tokens[7] = 259
    want = ref.heads(cfg, params, ref.model_input(cfg, tokens))
    if head == "mlm":
        (pos, top, lp), = db.execute("SELECT pos, top_token, top_logprob FROM "
                                     "relattn_logprobs('h', ?)", (toks(tokens),)).fetchall()
        assert pos == 7 and abs(lp - want["mlm"][7].max()) < 1e-4
        assert want["mlm"][7][top] > want["mlm"][7].max() - 1e-4
    else:
        got = db.execute("SELECT logit, prob FROM relattn_labels('h', ?)",
                         (toks(tokens),)).fetchall()
        assert np.abs(np.array(got) - np.stack([want["logits"], want["probs"]], 1)).max() < 1e-4


@pytest.mark.parametrize("pooler,bos", [("tanh", True), ("gelu", False), (None, True)])
def test_embed_pooling_matches_reference(db, rng, pooler, bos):
    cfg = ref.with_head(encoder(rng, bos=bos), "none", pooler=pooler)
    params = ref.random_params(rng, cfg)
    load(db, "e", cfg, params)
    tokens = random_tokens(rng, int(rng.integers(1, 90)))
    want = ref.heads(cfg, params, ref.model_input(cfg, tokens))
    t = toks(tokens)
    mean = from_f32(db.execute("SELECT relattn_embed('e', ?)", (t,)).fetchone()[0])
    assert rel_err(mean, want["hidden"].mean(0)) < 1e-5
    assert db.execute("SELECT relattn_embed('e', ?) = relattn_embed('e', ?, 'mean')",
                      (t, t)).fetchone() == (1,)
    cls, sub = db.execute("SELECT relattn_embed('e', ?, 'cls'), "
                          "subtype(relattn_embed('e', ?, 'cls'))", (t, t)).fetchone()
    assert sub == 223
    assert rel_err(from_f32(cls), want["cls"]) < 1e-5
    if pooler:
        pooled = from_f32(db.execute("SELECT relattn_embed('e', ?, 'pooler')",
                                     (t,)).fetchone()[0])
        assert rel_err(pooled, want["pooled"]) < 1e-5
    else:
        assert err(db, "SELECT relattn_embed('e', ?, 'pooler')", t) == \
            "relattn_embed: model 'e' has no pooler (pooling 'pooler')"


def test_export_round_trip_keeps_heads_and_source(db, rng):
    cfg = ref.with_head(encoder(rng), "classifier", pooler="gelu",
                        labels=LABELS[:3], problem_type="multi_label_classification")
    cfg["source"] = {"family": "deberta-v2", "class": "DebertaV2ForSequenceClassification",
                     "model_type": "deberta-v2"}
    params = ref.random_params(rng, cfg)
    load(db, "a", cfg, params)
    blob = db.execute("SELECT relattn_export('a')").fetchone()[0]
    assert db.execute("SELECT relattn_import('b', ?)", (blob,)).fetchone()[0] == len(params)
    conf = json.loads(db.execute("SELECT config FROM relattn_model WHERE name = 'b'").fetchone()[0])
    assert conf["source"] == cfg["source"] and conf["labels"] == LABELS[:3]
    t = toks(random_tokens(rng, 40))
    q = "SELECT label, logit, prob FROM relattn_labels(?, ?)"
    a = db.execute(q, ("a", t)).fetchall()
    assert a == db.execute(q, ("b", t)).fetchall()
    assert db.execute("SELECT relattn_embed('a', ?, 'pooler') = relattn_embed('b', ?, 'pooler')",
                      (t, t)).fetchone() == (1,)
    names = [r[0] for r in db.execute("SELECT name FROM relattn_tensor WHERE model = 'b' "
                                      "ORDER BY rowid")]
    assert names[-4:] == ["pooler.weight", "pooler.bias", "classifier.weight",
                          "classifier.bias"]
    assert "lm_head" not in names


def test_same_bits_for_any_thread_count(db, rng):
    cls = ref.with_head(encoder(rng, d_model=64, n_heads=4, d_ff=128), "classifier",
                        pooler="tanh", labels=LABELS)
    load(db, "c", cls, ref.random_params(rng, cls))
    mlm = ref.with_head(encoder(rng, d_model=64, n_heads=4, d_ff=128), "mlm", mask=259)
    load(db, "m", mlm, ref.random_params(rng, mlm))
    tokens = random_tokens(rng, 393)
    for i in range(0, 393, 5):
        tokens[i] = 259
    t = toks(tokens)
    first = None
    for threads in (1, 2, 4, 1):
        db.execute("SELECT relattn_threads(?)", (threads,))
        got = (db.execute("SELECT * FROM relattn_labels('c', ?)", (t[:400],)).fetchall(),
               db.execute("SELECT relattn_classify('c', ?), relattn_embed('c', ?, 'pooler'), "
                          "relattn_embed('c', ?, 'cls')", (t[:400],) * 3).fetchall(),
               db.execute("SELECT * FROM relattn_logprobs('m', ?)", (t,)).fetchall(),
               db.execute("SELECT rank, top_token, top_logprob FROM relattn_logprobs('m', ?, 4)",
                          (t,)).fetchall())
        assert len(got[2]) == 79 and len(got[3]) == 4 * 79
        if first is None:
            first = got
        assert got == first, f"threads={threads}"


def test_errors(db, rng):
    base = encoder(rng)
    lm = ref.random_config(rng)
    load(db, "lm", lm, ref.random_params(rng, lm))
    none = ref.with_head(base, "none")
    load(db, "none", none, ref.random_params(rng, none))
    mlm = ref.with_head(base, "mlm")
    load(db, "mlm", mlm, ref.random_params(rng, mlm))
    t = toks([1, 2, 3])
    assert err(db, "SELECT relattn_classify('lm', ?)", t) == (
        "relattn_classify: model 'lm' has no classifier head (its head is 'lm')")
    assert err(db, "SELECT * FROM relattn_labels('none', ?)", t) == (
        "relattn_labels: model 'none' has no classifier head (its head is 'none')")
    assert err(db, "SELECT * FROM relattn_labels('none')") == (
        "relattn_labels: model and tokens arguments are required")
    assert err(db, "SELECT relattn_classify('nope', ?)", t) == (
        "relattn_classify: no model named 'nope'")
    cls = ref.with_head(base, "classifier", labels=["x"])
    load(db, "c", cls, ref.random_params(rng, cls))
    assert err(db, "SELECT relattn_classify('c', x'0100')") == (
        "relattn_classify: tokens has 2 bytes, not a multiple of 4")
    assert err(db, "SELECT relattn_embed('lm', ?, 'max')", t) == (
        "relattn_embed: pooling must be 'mean', 'cls' or 'pooler', not 'max'")
    assert err(db, "SELECT relattn_embed('lm', ?, 1)", t) == (
        "relattn_embed: pooling must be 'mean', 'cls' or 'pooler' (TEXT)")
    assert err(db, "SELECT relattn_embed('lm', ?, 'pooler')", t) == (
        "relattn_embed: model 'lm' has no pooler (pooling 'pooler')")
    assert err(db, "SELECT * FROM relattn_logprobs('mlm', ?)", t) == (
        "relattn_logprobs: model 'mlm' has no tokenizer.mask: no [MASK] "
        "positions to fill")
    fill = ref.with_head(base, "mlm", mask=259)
    load(db, "fill", fill, ref.random_params(rng, fill))
    for k, shown in ((0, "0"), (261, "261"), ("two", "two"), (1.5, "1.5"), (None, "NULL")):
        assert err(db, "SELECT * FROM relattn_logprobs('fill', ?, ?)", t, k) == (
            f"relattn_logprobs: k must be an integer from 1 to vocab_size (260), not {shown}")
    assert err(db, "SELECT * FROM relattn_logprobs('lm', ?, 2)", t) == (
        "relattn_logprobs: k (the best fills per [MASK]) needs a masked-LM model; "
        "model 'lm' has head 'lm'")
    # k = 1 is every model's rows as they are
    assert db.execute("SELECT * FROM relattn_logprobs('lm', ?, 1)", (t,)).fetchall() == \
        db.execute("SELECT * FROM relattn_logprobs('lm', ?)", (t,)).fetchall()
    assert err(db, "SELECT relattn_score('mlm', ?)", t) == (
        "relattn_score: model 'mlm' is an encoder; only decoder models give "
        "next-token probabilities")
    dec = dict(lm, head="none", tie_embeddings=True)
    load(db, "dec", dec, ref.random_params(rng, dec))
    for fn in ("relattn_score", "relattn_perplexity"):
        assert err(db, f"SELECT {fn}('dec', ?)", t) == (
            f"{fn}: model 'dec' has no LM head (its head is 'none')")
    assert err(db, "SELECT * FROM relattn_logprobs('dec', ?)", t) == (
        "relattn_logprobs: model 'dec' has no LM head (its head is 'none')")


def test_config_errors_leave_the_database_unchanged(db, rng):
    base = encoder(rng)
    good = ref.with_head(base, "classifier", labels=["a", "b"], pooler="tanh")
    params = ref.random_params(rng, good)
    load(db, "c", good, params)
    before = db.execute("SELECT * FROM relattn_model").fetchall()

    def imp(cfg, p=params):
        return err(db, "SELECT relattn_import('c', ?, ?)",
                   ref.safetensors_bytes(p), json.dumps(cfg))

    pre = "relattn_import: config: "
    c = dict(good)
    del c["labels"]
    assert imp(c) == pre + "head 'classifier' needs 'labels' (an array of names, one per class)"
    assert imp(dict(good, labels=[])) == pre + (
        "head 'classifier' needs 'labels' (an array of names, one per class)")
    assert imp(dict(good, labels="a,b")) == pre + "'labels' must be an array of strings, not text"
    assert imp(dict(good, labels=["a", 2])) == pre + (
        "'labels' must be an array of strings, not with integer at 1")
    assert imp(dict(good, head="lm")) == pre + "'labels' is not a key of head 'lm'"
    assert imp(dict(good, head="tagger")) == pre + (
        "'head' must be one of lm,mlm,classifier,none,token_classifier, not 'tagger'")
    assert imp(dict(good, problem_type="ordinal")) == pre + (
        "'problem_type' must be one of single_label_classification,"
        "multi_label_classification,regression, not 'ordinal'")
    assert imp(dict(good, head_activation="gelu")) == pre + (
        "'head_activation' is not a key of head 'classifier'")
    assert imp(dict(good, pooler="tanh")) == pre + "'pooler' must be an object or null, not text"
    assert imp(dict(good, pooler={"activation": "swish"})) == pre + (
        "'pooler.activation' must be one of gelu,gelu_tanh,relu,tanh, not 'swish'")
    assert imp(dict(good, arch="decoder")) == pre + "head 'classifier' needs arch 'encoder'"
    mlm = ref.with_head(base, "mlm")
    assert imp(dict(mlm, arch="decoder")) == pre + "head 'mlm' needs arch 'encoder'"
    assert imp(dict(mlm, tokenizer=dict(mlm["tokenizer"], mask=3))) == pre + (
        "'tokenizer.mask' must be at least 256 and below vocab_size (260), not 3")
    # tensors that do not match the head
    assert imp(dict(good, pooler=None)) == (
        "relattn_import: unexpected tensor 'pooler.weight' (not part of the config)")
    assert imp(dict(good, labels=["a", "b", "c"])) == (
        "relattn_import: tensor 'classifier.weight' has shape [2,32]; the config "
        "needs [3,32]")
    assert db.execute("SELECT * FROM relattn_model").fetchall() == before
    # null pooler is no pooler
    c = dict(good, pooler=None)
    p = {k: v for k, v in params.items() if not k.startswith("pooler.")}
    assert db.execute("SELECT relattn_import('d', ?, ?)",
                      (ref.safetensors_bytes(p), json.dumps(c))).fetchone() == (len(p),)


# ---- the examples of docs/reference.md that need a head model -------------

def doc_blocks():
    """The sql blocks after the "run by tests/sql/test_heads.py" comments of
    docs/reference.md, in order."""
    text = (ROOT / "docs" / "reference.md").read_text()
    parts = text.split("<!-- run by tests/sql/test_heads.py")[1:]
    return [p.split("```sql\n", 1)[1].split("```", 1)[0] for p in parts]


def shell(cwd, db_name, sql):
    so = SO[:-3] if SO.endswith(".so") else SO
    r = subprocess.run(["sqlite3", "-bail", db_name], input=f".load {so}\n{sql}", cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_doc_examples_on_head_models(tmp_path, rng):
    path = tmp_path / "heads.db"
    db = connect(str(path))
    base = encoder(rng)
    clf = ref.with_head(base, "classifier", pooler="tanh",
                        labels=["negative", "positive", "neutral"])
    clf_p = ref.random_params(rng, clf)
    load(db, "clf", clf, clf_p)
    fill = ref.with_head(base, "mlm", mask=259)
    fill_p = ref.random_params(rng, fill)
    load(db, "fill", fill, fill_p)
    bodies = ["A fine day.", "Rain again.", "Nothing to say."]
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO docs(body) VALUES (?)", [(b,) for b in bodies])
    db.commit()
    db.close()

    def best(text):
        ids = ref.model_input(clf, list(text.encode()))
        return clf["labels"][int(np.argmax(ref.heads(clf, clf_p, ids)["logits"]))]

    logprobs, classify, labels, scan = doc_blocks()
    out = shell(tmp_path, "heads.db", logprobs)
    assert out == ["1|259|1|1|1", "4|259|1|1|1", "0", "1|1|1", "1|2|1", "1|3|1"]
    out = shell(tmp_path, "heads.db", classify)
    assert out == [best("A fine day.")] + [f"{b}|{best(b)}" for b in bodies]
    out = shell(tmp_path, "heads.db", labels)
    want = ref.heads(clf, clf_p, ref.model_input(clf, list(b"A fine day.")))
    assert out == [f"{i}|{name}|{round(p, 3)}" for i, (name, p) in
                   enumerate(zip(clf["labels"], want["probs"]))] + ["1.0", best("A fine day.")]
    out = shell(tmp_path, "heads.db", scan)
    probs = {b: ref.heads(clf, clf_p, ref.model_input(clf, list(b.encode())))["probs"]
             for b in bodies}
    assert out[:3] == [f"{i + 1}|{best(b)}|{round(probs[b].max(), 3)}" for i, b in enumerate(bodies)]
    counts = {}
    for b in bodies:
        counts[best(b)] = counts.get(best(b), 0) + 1
    assert out[3:] == [f"{k}|{v}" for k, v in sorted(counts.items())]


# ---- relattn_scan: label, logit, prob and pooling= --------------------------

def corpus(db, rng, rows=40):
    """docs(id, body): token BLOBs of 1-40 tokens and a few of 130-300, one
    NULL."""
    lens = [int(n) for n in rng.integers(1, 41, rows)] + [int(n) for n in rng.integers(130, 301, 3)]
    rng.shuffle(lens)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.executemany("INSERT INTO docs(body) VALUES (?)",
                   [(toks(random_tokens(rng, n)),) for n in lens] + [(None,)])


@pytest.mark.parametrize("problem", ["single_label_classification",
                                     "multi_label_classification", "regression"])
def test_scan_label_prob_same_bits_as_scalar(db, rng, problem):
    labels = LABELS[:1] if problem == "regression" else LABELS[:4]
    cfg = ref.with_head(encoder(rng, bos=problem != "regression"), "classifier",
                        pooler="tanh", labels=labels, problem_type=problem)
    load(db, "c", cfg, ref.random_params(rng, cfg))
    corpus(db, rng)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='c', "
               "source='docs', tokens='body', pooling='pooler')")
    # what relattn_labels gives for the best label, and the pooled vector
    want = []
    for i, body in db.execute("SELECT id, body FROM docs ORDER BY id").fetchall():
        rows = db.execute("SELECT label, logit, prob FROM relattn_labels('c', ?)", (body,)).fetchall()
        best = max(rows, key=lambda r: r[1]) if rows else (None, None, None)
        emb = db.execute("SELECT relattn_embed('c', ?, 'pooler')", (body,)).fetchone()[0]
        want.append((i, best[0], best[1], best[2], emb))
    assert want[-1] == (len(want), None, None, None, None)
    classify = db.execute("SELECT relattn_classify('c', body) FROM docs ORDER BY id").fetchall() \
        if problem != "regression" else None
    for threads in (1, 3):
        db.execute("SELECT relattn_threads(?)", (threads,))
        if problem == "regression":
            got = db.execute("SELECT id, logit, prob, embedding FROM temp.job").fetchall()
            assert got == [(w[0], w[2], None, w[4]) for w in want]
            with pytest.raises(Exception) as e:
                db.execute("SELECT label FROM temp.job").fetchall()
            assert str(e.value) == ("relattn_scan: model 'c' is a regression model "
                                    "(problem_type regression): its value is logit; it has no label")
            continue
        got = db.execute("SELECT id, label, logit, prob, embedding FROM temp.job").fetchall()
        assert got == want, f"threads={threads}"
        assert [(g[1],) for g in got] == classify
        # label alone, prob alone: the same
        assert db.execute("SELECT id, prob FROM temp.job").fetchall() == [(w[0], w[3]) for w in want]
    # SELECT * is what it was: the classifier's columns are hidden
    assert db.execute("SELECT name, hidden FROM pragma_table_xinfo('job', 'temp')").fetchall() == [
        ("id", 0), ("n_tokens", 0), ("score", 0), ("perplexity", 0), ("embedding", 0),
        ("error", 1), ("label", 1), ("logit", 1), ("prob", 1),
        ("generated", 1)]


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_scan_pooling_same_bits_as_embed(db, rng, pooling):
    cfg = ref.with_head(encoder(rng), "mlm", mask=259)
    load(db, "m", cfg, ref.random_params(rng, cfg))
    corpus(db, rng, rows=20)
    db.execute(f"CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', "
               f"source='docs', tokens='body', pooling={pooling})")
    want = db.execute("SELECT id, relattn_embed('m', body, ?) FROM docs ORDER BY id",
                      (pooling,)).fetchall()
    for threads in (1, 2):
        db.execute("SELECT relattn_threads(?)", (threads,))
        assert db.execute("SELECT id, embedding FROM temp.job").fetchall() == want
    if pooling == "cls":   # not the mean: the argument is used
        mean = db.execute("SELECT relattn_embed('m', body) FROM docs WHERE id = 1").fetchone()
        assert mean[0] != want[0][1]


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_scan_label_with_mean_embedding_same_bits_as_scalar(db, rng, norm):
    # label, logit and prob read the final row 0 alone, which has a path of
    # its own through the last layer; a mean embedding reads every row, so
    # the scan runs both. Each must be the bits of the scalar function that
    # asks for it alone (relattn_classify, relattn_labels: row 0 only;
    # relattn_embed: every row), at 1 and 2 threads; and near the float64
    # reference (a wrong row 0 or a wrong mean would not be).
    cfg = ref.with_head(encoder(rng, norm=norm, d_model=64, n_heads=4, d_ff=128),
                        "classifier", pooler="tanh", labels=LABELS[:4])
    params = ref.random_params(rng, cfg)
    load(db, "c", cfg, params)
    corpus(db, rng, rows=20)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='c', "
               "source='docs', tokens='body')")
    bodies = db.execute("SELECT id, body FROM docs ORDER BY id").fetchall()
    ref_rows = []
    for _, body in bodies:
        if body is None:
            ref_rows.append(None)
            continue
        want = ref.heads(cfg, params, ref.model_input(cfg, np.frombuffer(body, "<i4")))
        ref_rows.append((want["logits"], want["hidden"].mean(0)))
    first = None
    for threads in (1, 2):
        db.execute("SELECT relattn_threads(?)", (threads,))
        scalar = []
        for i, body in bodies:
            rows = db.execute("SELECT label, logit, prob FROM relattn_labels('c', ?)",
                              (body,)).fetchall()
            best = max(rows, key=lambda r: r[1]) if rows else (None, None, None)
            scalar.append((i, *best, db.execute("SELECT relattn_embed('c', ?)",
                                                (body,)).fetchone()[0]))
        classify = db.execute("SELECT id, relattn_classify('c', body) FROM docs "
                              "ORDER BY id").fetchall()
        got = db.execute("SELECT id, label, logit, prob, embedding FROM temp.job").fetchall()
        for g, w in zip(got, scalar):
            assert g == w, f"threads={threads}, row {g[0]}"
        assert len(got) == len(scalar) == len(bodies)
        assert [(g[0], g[1]) for g in got] == classify
        # the label columns alone: the same bits as with the embedding
        assert db.execute("SELECT id, label, logit, prob FROM temp.job").fetchall() == \
            [g[:4] for g in got]
        if first is None:
            first = got
        assert got == first, f"threads={threads}"
    for g, r in zip(first, ref_rows):
        if r is None:
            assert g[1:] == (None, None, None, None)
            continue
        logits, mean = r
        assert abs(g[2] - logits.max()) < 1e-4
        assert rel_err(from_f32(g[4]), mean) < 1e-5


def test_scan_head_errors(db, rng):
    lm = ref.random_config(rng)
    load(db, "lm", lm, ref.random_params(rng, lm))
    none = ref.with_head(encoder(rng), "none")
    load(db, "none", none, ref.random_params(rng, none))
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.execute("INSERT INTO docs(body) VALUES (?)", (toks([1, 2, 3]),))

    def create(args):
        return err(db, f"CREATE VIRTUAL TABLE temp.j USING relattn_scan({args})")

    assert create("model='lm', source='docs', tokens='body', pooling='max'") == (
        "relattn_scan: pooling must be 'mean', 'cls' or 'pooler', not 'max'")
    assert create("model='lm', source='docs', tokens='body', pooling='pooler'") == (
        "relattn_scan: model 'lm' has no pooler (pooling 'pooler')")
    assert create("model='lm', source='docs', tokens='body', pool='cls'") == (
        "relattn_scan: unknown argument 'pool' (expected model, source, tokens, id, pooling, text_b, generate)")
    db.execute("CREATE VIRTUAL TABLE temp.a USING relattn_scan(model='lm', source='docs', tokens='body')")
    db.execute("CREATE VIRTUAL TABLE temp.b USING relattn_scan(model='none', source='docs', tokens='body')")
    assert err(db, "SELECT label FROM temp.a") == (
        "relattn_scan: model 'lm' has no classifier head (its head is 'lm'): no label, logit or prob")
    assert err(db, "SELECT prob FROM temp.b") == (
        "relattn_scan: model 'none' has no classifier head (its head is 'none'): no label, logit or prob")
    dec = dict(lm, head="none")
    load(db, "dec", dec, {k: v for k, v in ref.random_params(rng, dec).items()})
    db.execute("CREATE VIRTUAL TABLE temp.c USING relattn_scan(model='dec', source='docs', tokens='body')")
    assert err(db, "SELECT score FROM temp.c") == (
        "relattn_scan: model 'dec' has no LM head (its head is 'none'): no score or perplexity")
    assert db.execute("SELECT length(embedding) FROM temp.c").fetchall() == [(4 * lm["d_model"],)]


# ---- interrupt: the heads' calls stop like the others ------------------------

def tiny_with_heads():
    """The bundled model's weights as an encoder classifier ('clf') and a
    masked-LM model ('fill', [MASK] = its pad id 258), with random heads."""
    import safetensors_py
    blob = (ROOT / "models" / "tiny.safetensors").read_bytes()
    got, meta = safetensors_py.read(blob)
    weights = {k: safetensors_py.to_array(*v) for k, v in got.items()}
    cfg = json.loads(meta["relattn.config"])
    d, v = cfg["d_model"], cfg["vocab_size"]
    rng = np.random.default_rng(7)
    out = {}
    clf = dict(cfg, arch="encoder", head="classifier", labels=["a", "b"])
    out["clf"] = (clf, dict(weights, **{
        "classifier.weight": rng.standard_normal((2, d)).astype(np.float32),
        "classifier.bias": np.zeros(2, np.float32)}))
    fill = dict(cfg, arch="encoder", head="mlm", tokenizer=dict(cfg["tokenizer"], mask=258))
    out["fill"] = (fill, dict(weights, **{
        "mlm.dense.weight": (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32),
        "mlm.dense.bias": np.zeros(d, np.float32), "mlm.norm.weight": np.ones(d, np.float32),
        "mlm.norm.bias": np.zeros(d, np.float32), "mlm.bias": np.zeros(v, np.float32)}))
    return out


@pytest.mark.parametrize("fn,sql", [
    ("relattn_classify", "SELECT relattn_classify('clf', ?)"),
    ("relattn_labels", "SELECT count(*) FROM relattn_labels('clf', ?)"),
    ("relattn_embed", "SELECT relattn_embed('clf', ?, 'cls')"),
    ("relattn_logprobs", "SELECT count(*) FROM relattn_logprobs('fill', ?)"),
])
def test_heads_stop_on_interrupt(fn, sql):
    # 20000 tokens: 10-25 s a call here uninterrupted; the bound is generous
    # (test_interrupt.py says why)
    db = connect(check_same_thread=False)
    for name, (cfg, weights) in tiny_with_heads().items():
        db.execute("SELECT relattn_import(?, ?, ?)",
                   (name, ref.safetensors_bytes(weights), json.dumps(cfg)))
    db.execute("SELECT relattn_threads(2)")
    arg = "".join(chr(97 + i % 26) for i in range(20000))
    if fn == "relattn_logprobs":
        ids = np.frombuffer(arg.encode(), np.uint8).astype("<i4")
        ids[::100] = 258   # [MASK]
        arg = ids.tobytes()
    took, msg, name = interrupted(db, sql, (arg,))
    assert (msg, name) == (f"{fn}: interrupted", "SQLITE_INTERRUPT")
    assert took < 5.0
    # and the connection goes on working
    assert db.execute("SELECT relattn_classify('clf', 'ab') IN ('a', 'b')").fetchone() == (1,)
    db.close()


# ---- the token classifier on a native model ------------------------------------

@pytest.mark.parametrize("norm", ["pre", "post"])
def test_token_classifier_native(db, rng, norm):
    """head token_classifier on a native config (byte tokenizer): each
    row of relattn_token_labels('none', nothing ignored) is its byte's
    softmax over x classifier.weight^T + classifier.bias of the final row
    (the reference forward in float64), at the byte's offsets."""
    names = ["O", "B-X", "I-X", "Y"]
    cfg = ref.with_head(encoder(rng, norm=norm, bos=True), "token_classifier", labels=names)
    params = ref.random_params(rng, cfg)
    load(db, "t", cfg, params)
    text = "".join(chr(int(c)) for c in rng.integers(97, 123, 23))
    tokens = list(text.encode())
    ids = ref.model_input(cfg, tokens)
    x = ref.forward(cfg, params, ids)["hidden"]
    z = x @ params["classifier.weight"].astype(np.float64).T + params["classifier.bias"]
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    rows = db.execute("SELECT entity, score, word, start, \"end\", token_index "
                      "FROM relattn_token_labels('t', ?, 'none', '[]')", (text,)).fetchall()
    bos = 1
    assert len(rows) == len(tokens)
    for k, r in enumerate(rows):
        j = int(p[k + bos].argmax())
        assert r[0] == names[j] and abs(r[1] - p[k + bos, j]) < 1e-4, (k, r)
        assert r[2:] == (text[k], k, k + 1, k + bos)
    # the classifier's functions and the token classifier's refuse each other
    assert err(db, "SELECT relattn_classify('t', 'abc')") == (
        "relattn_classify: model 't' has no classifier head (its head is 'token_classifier')")
    assert err(db, "SELECT relattn_import('x', ?)", ref.safetensors_bytes(
        params, dict(cfg, arch="decoder"))) == (
        "relattn_import: config: head 'token_classifier' needs arch 'encoder'")
    assert err(db, "SELECT relattn_import('x', ?)", ref.safetensors_bytes(
        params, dict(cfg, problem_type="regression"))) == (
        "relattn_import: config: 'problem_type' is not a key of head 'token_classifier'")
    assert db.execute("SELECT count(*) FROM relattn_model WHERE name = 'x'").fetchone()[0] == 0
