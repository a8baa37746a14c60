"""Hugging Face checkpoints end to end: each family x class written as HF
writes it (tests/hf/checkpoints.py), imported with relattn_import from its
three files, then run in SQL and compared with the float64 port of the
class's own forward (tests/hf/ports.py) on fresh random weights and inputs:

- relattn_embed(model, tokens, pooling): mean (sentence-transformers' mean
  over the attention mask: [CLS], the tokens and [SEP] / </s>), cls (final
  row 0),
  pooler (BertPooler / ContextPooler);
- relattn_labels / relattn_classify (softmax, sigmoid or the regression
  value, labels from id2label in id order);
- relattn_logprobs at [MASK] positions (the best fill and its log-prob),
  also with deberta-v3-base's tokenizer_config.json as shipped ([MASK]
  added by the tokenizer);
- text through the checkpoint's own tokenizer and template ([CLS] ... [SEP],
  ... </s>), and token types after the first [SEP] of a pair;
- export -> reimport gives the same tensors and the same outputs.

Tolerance: 1e-4 absolute on embeddings, pooled outputs, logits,
probabilities and log-probs (float32 forward against float64 ports; the
measured errors are around 1e-6)."""
import json
import os
import sqlite3
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import checkpoints  # noqa: E402
import ports  # noqa: E402
import safetensors_py  # noqa: E402
from conftest import from_f32  # noqa: E402

TOL = 1e-4

# id -> (writer, class, keyword arguments)
CASES = {
    "bert-model-rk": ("bert", "BertModel", dict(position="relative_key")),
    "bert-model-rkq-prefixed": ("bert", "BertModel", dict(position="relative_key_query",
                                                          prefix="bert.")),
    "bert-mlm-rk": ("bert", "BertForMaskedLM", dict(position="relative_key")),
    "bert-mlm-rkq-tied-copy": ("bert", "BertForMaskedLM", dict(position="relative_key_query",
                                                               tied_copy=True)),
    "bert-mlm-rk-gelu-new": ("bert", "BertForMaskedLM", dict(position="relative_key",
                                                             hidden_act="gelu_new")),
    # BertModel's pooler kept beside the masked-LM head
    "bert-pretraining-rk": ("bert", "BertForPreTraining", dict(position="relative_key",
                                                              extra_heads=True)),
    "bert-cls-rk": ("bert", "BertForSequenceClassification", dict(position="relative_key")),
    "bert-cls-rk-cased": ("bert", "BertForSequenceClassification",
                          dict(position="relative_key", do_lower_case=False)),
    "bert-cls-rkq": ("bert", "BertForSequenceClassification",
                     dict(position="relative_key_query", n_labels=4,
                          problem_type="multi_label_classification")),
    "bert-cls-rk-position-ids": ("bert", "BertForSequenceClassification",
                                 dict(position="relative_key", position_ids=True)),
    "bert-cls-rk-regression": ("bert", "BertForSequenceClassification",
                               dict(position="relative_key", n_labels=1,
                                    problem_type="regression")),
    # no problem_type: HF's forward decides by the label count (1: regression)
    "bert-cls-rkq-one-label": ("bert", "BertForSequenceClassification",
                               dict(position="relative_key_query", n_labels=1,
                                    problem_type=None)),
    "deberta-v3-model": ("deberta", "DebertaV2Model", dict(style="v3")),
    "deberta-v2-model": ("deberta", "DebertaV2Model", dict(style="v2")),
    "deberta-v3-mlm-legacy": ("deberta", "DebertaV2ForMaskedLM", dict(style="v3")),
    "deberta-v3-mlm-lm_predictions": ("deberta", "DebertaV2ForMaskedLM",
                                      dict(style="v3", legacy=False)),
    "deberta-v2-mlm": ("deberta", "DebertaV2ForMaskedLM", dict(style="v2")),
    # deberta-v3-base's tokenizer_config.json: no [MASK] anywhere in the files
    "deberta-v3-mlm-shipped-tokenizer-config": ("deberta", "DebertaV2ForMaskedLM",
                                                dict(style="v3", tok_config_kind="shipped")),
    "deberta-v3-mlm-tied-copy": ("deberta", "DebertaV2ForMaskedLM",
                                 dict(style="v3", tied_copy=True)),
    "deberta-v3-cls": ("deberta", "DebertaV2ForSequenceClassification", dict(style="v3")),
    "deberta-v2-cls": ("deberta", "DebertaV2ForSequenceClassification",
                       dict(style="v2", n_labels=2, problem_type=None)),
    "deberta-v3-cls-f16": ("deberta", "DebertaV2ForSequenceClassification",
                           dict(style="v3", dtype="F16")),
    "deberta-v2-cls-relu-tanh-pooler": ("deberta", "DebertaV2ForSequenceClassification",
                                        dict(style="v2", hidden_act="relu",
                                             pooler_hidden_act="tanh")),
    "t5-encoder-relu": ("t5", "T5EncoderModel", dict(ffn="relu")),
    "t5-encoder-relu-embed-copy": ("t5", "T5EncoderModel", dict(ffn="relu", embed_copy=True)),
    "t5-encoder-gated-gelu": ("t5", "T5EncoderModel", dict(ffn="gated-gelu",
                                                           write_derived=True)),
    "t5-cg-relu": ("t5", "T5ForConditionalGeneration", dict(ffn="relu")),
    "t5-cg-gated-gelu": ("t5", "T5ForConditionalGeneration", dict(ffn="gated-gelu")),
    "t5-cg-gated-gelu-bf16": ("t5", "T5ForConditionalGeneration",
                              dict(ffn="gated-gelu", dtype="BF16")),
    # d_kv * num_heads other than d_model (the native d_head): shaped as
    # flan-t5-small / t5-v1_1-small / mt5-small (512 wide, 6 heads of 64),
    # attention narrower than the model; and wider
    "t5-encoder-flan-small-shaped": ("t5", "T5EncoderModel",
                                     dict(ffn="gated-gelu", d=48, heads=3, d_kv=8,
                                          ff=80, write_derived=True)),
    "t5-cg-flan-small-shaped": ("t5", "T5ForConditionalGeneration",
                                dict(ffn="gated-gelu", d=48, heads=3, d_kv=8, ff=80)),
    "t5-encoder-relu-wide-kv": ("t5", "T5EncoderModel",
                                dict(ffn="relu", d=32, heads=4, d_kv=16)),
    "mt5-cg-small-shaped": ("t5", "MT5ForConditionalGeneration",
                            dict(ffn="gated-gelu", d=48, heads=3, d_kv=8, ff=80,
                                 model_type="mt5")),
}
WRITERS = {"bert": checkpoints.bert, "deberta": checkpoints.deberta, "t5": checkpoints.t5}


def by_kind(pred):
    return sorted(k for k, (w, c, kw) in CASES.items() if pred(w, c))


def make(case, root, rng):
    writer, cls, kw = CASES[case]
    return WRITERS[writer](root, rng, cls, **kw)


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


def import_checkpoint(db, ck, name="m"):
    """relattn_import with the checkpoint's files as they are on disk."""
    return db.execute("SELECT relattn_import(?, ?, ?, ?, ?)",
                      (name, ck.read("weights"), ck.path("config").read_text(),
                       ck.read("tokenizer"), ck.path("tokenizer_config").read_text())
                      ).fetchone()[0]


# ---- what HF computes for the model's input ----------------------------------

def model_input(ck, tokens):
    """HF's template for one sequence: BertTokenizer / DebertaV2Tokenizer
    build_inputs_with_special_tokens [CLS] X [SEP]; T5Tokenizer X </s>."""
    if ck.family == "t5":
        return list(tokens) + [ck.special["eos"]]
    return [ck.special["cls"]] + list(tokens) + [ck.special["sep"]]


def token_types(ck, ids):
    """create_token_type_ids_from_sequences: 0 through the first [SEP], 1
    after it (a pair [CLS] A [SEP] B [SEP])."""
    if ck.family == "t5" or ck.config.get("type_vocab_size", 0) < 2:
        return [0] * len(ids)
    first = ids.index(ck.special["sep"])
    return [0 if i <= first else 1 for i in range(len(ids))]


def port(ck, tokens):
    ids = model_input(ck, tokens)
    return ports.forward(ck.config, ck.params, ids, token_types(ck, ids))


def mean_pooled(ck, hidden):
    """relattn_embed's mean (docs/reference.md, relattn_embed):
    sentence-transformers' mean over the attention mask, every input row
    ([CLS], the tokens, [SEP] / </s>)."""
    return ports.mean_pooling(hidden)


def random_tokens(rng, ck, n):
    """Ordinary ids (no special token, no [MASK], inside the tokenizer's
    own pieces)."""
    specials = set(ck.special.values())
    pool = [i for i in range(ck.n_pieces) if i not in specials]
    return [int(pool[i]) for i in rng.integers(0, len(pool), n)]


def embed(db, tokens, pooling=None, name="m"):
    if pooling is None:
        b = db.execute("SELECT relattn_embed(?, ?)", (name, tokens)).fetchone()[0]
    else:
        b = db.execute("SELECT relattn_embed(?, ?, ?)", (name, tokens, pooling)).fetchone()[0]
    return from_f32(b).astype(np.float64)


ERRORS = {}   # (case, quantity) -> max abs error seen, for the report


def check(case, what, got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    err = float(np.abs(got - want).max())
    ERRORS[(case, what)] = max(err, ERRORS.get((case, what), 0.0))
    print(f"{case} {what}: max abs error {err:.2e}")
    assert err < TOL, (what, err)


# ---- the tests -------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_embeddings(db, rng, tmp_path, case):
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    for n in (1, 13, 40):
        tokens = random_tokens(rng, ck, n)
        out = port(ck, tokens)
        want = mean_pooled(ck, out["hidden"])
        check(case, "embed mean", embed(db, toks(tokens)), want)
        check(case, "embed mean", embed(db, toks(tokens), "mean"), want)
        check(case, "embed cls", embed(db, toks(tokens), "cls"), out["hidden"][0])
        if "pooled" in out:
            check(case, "embed pooler", embed(db, toks(tokens), "pooler"), out["pooled"])


@pytest.mark.parametrize("case", by_kind(lambda w, c: c.endswith("ForSequenceClassification")))
def test_labels_and_classify(db, rng, tmp_path, case):
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    names = [ck.config["id2label"][str(i)] for i in range(len(ck.config["id2label"]))]
    multi = ck.config.get("problem_type") == "multi_label_classification"
    for n in (2, 30):
        tokens = random_tokens(rng, ck, n)
        logits = port(ck, tokens)["logits"]
        probs = 1 / (1 + np.exp(-logits)) if multi else ports.softmax(logits)
        rows = db.execute("SELECT label, logit, prob FROM relattn_labels('m', ?)",
                          (toks(tokens),)).fetchall()
        assert [r[0] for r in rows] == names
        check(case, "logits", [r[1] for r in rows], logits)
        if ck.config.get("problem_type", "regression" if len(names) == 1 else
                         "single_label_classification") == "regression":
            assert [r[2] for r in rows] == [None]      # the logit is the value
            with pytest.raises(sqlite3.OperationalError) as e:
                db.execute("SELECT relattn_classify('m', ?)", (toks(tokens),))
            assert str(e.value) == ("relattn_classify: model 'm' is a regression model "
                                    "(problem_type regression): its value is the logit "
                                    "of relattn_labels")
            continue
        check(case, "probs", [r[2] for r in rows], probs)
        best = db.execute("SELECT relattn_classify('m', ?)", (toks(tokens),)).fetchone()[0]
        assert best == names[int(np.argmax(logits))]


@pytest.mark.parametrize("case", by_kind(lambda w, c: c.endswith(("ForMaskedLM",
                                                                   "ForPreTraining"))))
def test_masked_lm(db, rng, tmp_path, case):
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    mask = ck.special["mask"]
    tokens = random_tokens(rng, ck, 25)
    where = sorted(int(i) for i in rng.choice(25, 4, replace=False))
    for i in where:
        tokens[i] = mask
    lp = ports.log_softmax(port(ck, tokens)["mlm_logits"])      # rows of the input
    rows = db.execute("SELECT pos, token, logprob, top_token, top_logprob "
                      "FROM relattn_logprobs('m', ?)", (toks(tokens),)).fetchall()
    assert [r[0] for r in rows] == where
    assert all(r[1] == mask and r[2] is None for r in rows)
    want = lp[[i + 1 for i in where]]                           # [CLS] is input row 0
    check(case, "mlm top logprob", [r[4] for r in rows], want.max(-1))
    # the best fill is the port's (ties closer than the tolerance excepted)
    for r, row in zip(rows, want):
        assert row[r[3]] > row.max() - TOL
    # the k best fills: k rows per [MASK], ranks 1..k, the port's k largest
    k = 5
    rows = db.execute("SELECT pos, rank, top_token, top_logprob FROM "
                      "relattn_logprobs('m', ?, ?)", (toks(tokens), k)).fetchall()
    assert [(r[0], r[1]) for r in rows] == [(i, j) for i in where for j in range(1, k + 1)]
    for n, row in enumerate(want):
        mine = rows[n * k:(n + 1) * k]
        check(case, "mlm top-k logprobs", [r[3] for r in mine], np.sort(row)[::-1][:k])
        check(case, "mlm top-k logprobs", [r[3] for r in mine], row[[r[2] for r in mine]])


@pytest.mark.parametrize("case", ["bert-model-rk", "bert-cls-rkq", "bert-cls-rk-cased",
                                  "deberta-v3-cls",
                                  "deberta-v2-model", "t5-encoder-gated-gelu",
                                  "t5-cg-relu", "t5-cg-flan-small-shaped"])
def test_text_through_the_checkpoints_tokenizer(db, rng, tmp_path, case):
    """TEXT is tokenized as HF's tokenizer does (BertTokenizer with the
    tokenizer_config's do_lower_case; the SentencePiece model), and the
    template added around it."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    text = checkpoints.sample_text(rng, 12)
    ids = ck.encode(text)
    got_ids = db.execute("SELECT relattn_tokens_json(relattn_tokenize('m', ?))",
                         (text,)).fetchone()[0]
    assert json.loads(got_ids) == ids
    out = port(ck, ids)
    check(case, "embed mean (text)", embed(db, text), mean_pooled(ck, out["hidden"]))
    if "logits" in out:
        rows = db.execute("SELECT logit FROM relattn_labels('m', ?)", (text,)).fetchall()
        check(case, "logits (text)", [r[0] for r in rows], out["logits"])


@pytest.mark.parametrize("case", ["bert-cls-rk", "bert-model-rkq-prefixed", "deberta-v2-cls"])
def test_pair_token_types(db, rng, tmp_path, case):
    """[CLS] A [SEP] B [SEP]: the tokens after the first [SEP] are segment
    1 (token_type_embeddings row 1), as HF's pair encoding."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    a, b = random_tokens(rng, ck, 9), random_tokens(rng, ck, 14)
    tokens = a + [ck.special["sep"]] + b
    out = port(ck, tokens)
    assert token_types(ck, model_input(ck, tokens)).count(1) == len(b) + 1
    check(case, "embed cls (pair)", embed(db, toks(tokens), "cls"), out["hidden"][0])
    if "logits" in out:
        rows = db.execute("SELECT logit FROM relattn_labels('m', ?)", (toks(tokens),)).fetchall()
        check(case, "logits (pair)", [r[0] for r in rows], out["logits"])
    # segment 1 matters: all-zero types give another answer
    zero = ports.forward(ck.config, ck.params, model_input(ck, tokens))
    assert np.abs(zero["hidden"][0] - out["hidden"][0]).max() > 10 * TOL


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_round_trip(db, rng, tmp_path, case):
    """relattn_export gives a safetensors file whose reimport is the same
    model: same tensors byte for byte, same config (source kept), same
    outputs bit for bit."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    blob = db.execute("SELECT relattn_export('m')").fetchone()[0]
    tensors, meta = safetensors_py.read(blob)
    cfg = json.loads(meta["relattn.config"])
    assert cfg["source"]["class"] == ck.cls
    assert cfg["source"]["model_type"] == ck.config["model_type"]
    db.execute("SELECT relattn_import('m2', ?)", (blob,))
    again, meta2 = safetensors_py.read(db.execute("SELECT relattn_export('m2')").fetchone()[0])
    assert again == tensors
    assert json.loads(meta2["relattn.config"]) == cfg
    tokens = toks(random_tokens(rng, ck, 21))
    for pooling in ("mean", "cls"):
        assert (db.execute("SELECT relattn_embed('m', ?1, ?2) = relattn_embed('m2', ?1, ?2)",
                           (tokens, pooling)).fetchone()[0] == 1)
    if ck.cls.endswith("ForSequenceClassification"):
        q = "SELECT label, logit, prob FROM relattn_labels(?, ?)"
        assert (db.execute(q, ("m", tokens)).fetchall()
                == db.execute(q, ("m2", tokens)).fetchall())


@pytest.mark.parametrize("case", ["t5-encoder-flan-small-shaped", "t5-encoder-relu-wide-kv",
                                  "t5-encoder-gated-gelu", "mt5-cg-small-shaped"])
def test_t5_d_kv_is_the_native_d_head(db, rng, tmp_path, case):
    """T5Attention's inner_dim = num_heads * d_kv: the native d_head when
    it is not d_model (absent when it is), q/k/v [inner, d], o [d, inner]."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    d, h, kv = ck.config["d_model"], ck.config["num_heads"], ck.config["d_kv"]
    cfg = json.loads(db.execute("SELECT config FROM relattn_model WHERE name = 'm'"
                                ).fetchone()[0])
    assert cfg.get("d_head") == (kv if kv * h != d else None)
    shapes = dict(db.execute("SELECT name, shape FROM relattn_tensor WHERE model = 'm'"))
    assert shapes["layers.1.attn.wv"] == f"[{h * kv},{d}]"
    assert shapes["layers.1.attn.wo"] == f"[{d},{h * kv}]"
    assert shapes["rel_bias"] == f"[{h},{ck.config['relative_attention_num_buckets']}]"
    tokens = random_tokens(rng, ck, 33)
    check(case, "embed mean", embed(db, toks(tokens)),
          mean_pooled(ck, port(ck, tokens)["hidden"]))


@pytest.mark.parametrize("case", ["bert-mlm-rk", "deberta-v3-mlm-legacy", "deberta-v2-mlm",
                                  "deberta-v3-mlm-shipped-tokenizer-config"])
def test_mask_in_text(db, rng, tmp_path, case):
    """'[MASK]' written in a text is the mask token, as HF's tokenizers
    split their special tokens out first (BertTokenizer's never_split;
    DeBERTa-v3's [MASK], an added token past the spm.model's pieces), and
    relattn_logprobs fills it."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    a, b = checkpoints.sample_text(rng, 5), checkpoints.sample_text(rng, 7)
    text = a + " [MASK] " + b
    ids = ck.encode(text)
    assert ids.count(ck.special["mask"]) == 1
    got = db.execute("SELECT relattn_tokens_json(relattn_tokenize('m', ?))", (text,)).fetchone()[0]
    assert json.loads(got) == ids
    lp = ports.log_softmax(port(ck, ids)["mlm_logits"])
    rows = db.execute("SELECT pos, top_logprob FROM relattn_logprobs('m', ?)", (text,)).fetchall()
    where = ids.index(ck.special["mask"])
    assert [r[0] for r in rows] == [where]
    check(case, "mlm top logprob (text)", [rows[0][1]], [lp[where + 1].max()])

@pytest.mark.parametrize("case", ["deberta-v3-mlm-legacy", "t5-encoder-gated-gelu"])
@pytest.mark.parametrize("strip", [False, True])
def test_special_tokens_in_random_texts(db, rng, tmp_path, case, strip):
    """A SentencePiece checkpoint imports as AutoTokenizer runs it: the
    tokenizer.json transformers' converter builds from its spm.model and
    tokenizer_config.json, special tokens with their added_tokens_decoder
    flags (strip: the file sets lstrip on [MASK] / </s> and rstrip on
    [SEP] / <pad>); fresh texts with the specials at the start, the end,
    side by side and repeated give the ids of Hugging Face's tokenizers
    library (npm, tests/node) for that tokenizer.json
    (checkpoints.unigram_tokenizer_json)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sql"))
    from test_tokenizer_json import library_ids, node_ready
    reason = node_ready()
    if reason:
        pytest.skip(reason)
    ck = make(case, tmp_path, rng)
    dec = ck.tok_config["added_tokens_decoder"]
    if strip:
        for k, v in dec.items():
            if v["content"] in ("[MASK]", "</s>"):
                v["lstrip"] = True
            if v["content"] in ("[SEP]", "<pad>"):
                v["rstrip"] = True
        ck.path("tokenizer_config").write_text(json.dumps(ck.tok_config))
    import_checkpoint(db, ck)
    tok = json.loads(db.execute("SELECT json_extract(config, '$.tokenizer') FROM "
                                "relattn_model WHERE name = 'm'").fetchone()[0])
    roles = {tok[r] for r in ("bos", "eos", "pad", "append", "sep", "mask", "unk")
             if tok.get(r) is not None}
    assert "split_special" not in tok and "added_tokens" not in tok
    family = "t5" if case.startswith("t5") else "deberta"
    doc = checkpoints.unigram_tokenizer_json(ck.tok_bytes, family, ck.tok_config)
    names = [dec[str(i)]["content"] for i in sorted(roles)]
    gaps = ["", " ", "  ", "\t", "\u3000 "]
    texts = []
    for _ in range(40):
        parts = []
        for _ in range(int(rng.integers(1, 6))):
            r = rng.random()
            if r < 0.5:
                parts.append(checkpoints.sample_text(rng, int(rng.integers(1, 5))))
            else:
                parts.append(names[int(rng.integers(len(names)))] * int(rng.integers(1, 3)))
            parts.append(gaps[int(rng.integers(len(gaps)))])
        if rng.random() < 0.5:
            parts.insert(0, names[int(rng.integers(len(names)))])
        texts.append("".join(parts))
    pre = [] if family == "t5" else [tok["bos"]]
    want = library_ids(tmp_path, doc, texts)
    for text, w in zip(texts, want):
        got = db.execute("SELECT relattn_tokens_json(relattn_tokenize('m', ?))",
                         (text,)).fetchone()[0]
        assert pre + json.loads(got) + [tok["append"]] == w, text
    assert any(set(w[len(pre):-1]) & roles for w in want)


@pytest.mark.parametrize("case", ["bert-cls-rk", "deberta-v3-cls", "deberta-v2-cls"])
def test_pair_written_in_text(db, rng, tmp_path, case):
    """'premise [SEP] hypothesis' as one text (an NLI pair in a table's
    column): HF's tokenizers split '[SEP]' out as the separator token, so
    the model sees [CLS] A [SEP] B [SEP] with B in segment 1."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    a, b = checkpoints.sample_text(rng, 6), checkpoints.sample_text(rng, 8)
    ids = ck.encode(a + " [SEP] " + b)
    assert ids.count(ck.special["sep"]) == 1
    got = db.execute("SELECT relattn_tokens_json(relattn_tokenize('m', ?))",
                     (a + " [SEP] " + b,)).fetchone()[0]
    assert json.loads(got) == ids
    rows = db.execute("SELECT logit FROM relattn_labels('m', ?)", (a + " [SEP] " + b,)).fetchall()
    check(case, "logits (pair text)", [r[0] for r in rows], port(ck, ids)["logits"])


# ---- long inputs under the checkpoints' real position settings -----------------

LONG = {
    # deberta-v3-base's: 256 log buckets, max_relative_positions -1 -> 512
    "deberta-v3-256-buckets": ("deberta", "DebertaV2ForSequenceClassification",
                               dict(style="v3", position_buckets=256,
                                    max_position_embeddings=512)),
    # T5's defaults: 32 buckets, max_distance 128
    "t5-32-buckets": ("t5", "T5EncoderModel", dict(ffn="gated-gelu", num_buckets=32,
                                                   max_distance=128)),
    # and flan-t5-small's shape (d_kv * num_heads under d_model): several
    # row blocks of the forward pass with the attention narrower than d_model
    "t5-32-buckets-flan-small-shaped": ("t5", "T5EncoderModel",
                                        dict(ffn="gated-gelu", num_buckets=32,
                                             max_distance=128, d=48, heads=3, d_kv=8,
                                             ff=80)),
}


@pytest.mark.parametrize("case", sorted(LONG))
def test_long_input_real_position_settings(db, rng, tmp_path, case):
    """600 tokens: distances past DeBERTa's 128 exact positions into its
    log buckets and past the clamp at 256 buckets, past T5's max_distance
    128; the kernel's far blocks (beyond the band) against the port."""
    writer, cls, kw = LONG[case]
    ck = WRITERS[writer](tmp_path, rng, cls, **kw)
    import_checkpoint(db, ck)
    tokens = random_tokens(rng, ck, 600)
    out = port(ck, tokens)
    check(case, "embed mean (600)", embed(db, toks(tokens)), mean_pooled(ck, out["hidden"]))
    check(case, "embed cls (600)", embed(db, toks(tokens), "cls"), out["hidden"][0])
    if "logits" in out:
        rows = db.execute("SELECT logit FROM relattn_labels('m', ?)", (toks(tokens),)).fetchall()
        check(case, "logits (600)", [r[0] for r in rows], out["logits"])


def cached_bytes(db):
    """The bytes relattn_debug() reports for the connection's cached models."""
    debug = dict(line.split(": ", 1) for line in
                 db.execute("SELECT relattn_debug()").fetchone()[0].splitlines()[1:])
    return int(debug["cached_bytes"])


def test_deberta_cost_follows_the_sequence_not_max_relative_positions(db, rng, tmp_path):
    """max_relative_positions at its bound, 2^24, with 256 buckets: the
    checkpoint is a few hundred KB, and so is the model the connection
    keeps: the stored tensors and each layer's two projections of rel_emb
    (plus its normed copy). The bucket map stops where a sequence's
    distances do (it was built out to 2^24 in every layer at load: 537 MB,
    seconds to load and a pass over it in every call). Up to 200 tokens
    (past the 128 exact distances into the log buckets) against the port."""
    ck = checkpoints.deberta(tmp_path, rng, "DebertaV2ForSequenceClassification",
                             style="v3", position_buckets=256,
                             max_relative_positions=1 << 24)
    import_checkpoint(db, ck)
    for n in (1, 13, 200):
        tokens = random_tokens(rng, ck, n)
        out = port(ck, tokens)
        check("deberta max_relative_positions 2^24", f"embed mean ({n})",
              embed(db, toks(tokens)), mean_pooled(ck, out["hidden"]))
        rows = db.execute("SELECT logit FROM relattn_labels('m', ?)", (toks(tokens),)).fetchall()
        check("deberta max_relative_positions 2^24", f"logits ({n})",
              [r[0] for r in rows], out["logits"])
    stored = 4 * sum(a.size for a in ck.params.values())
    rel = 4 * ck.params["deberta.encoder.rel_embeddings.weight"].size
    tables = stored + (2 * ck.config["num_hidden_layers"] + 1) * rel
    got = cached_bytes(db)
    assert tables <= got <= 2 * tables, (got, tables)


# ---- relative_key's table ends at max_position_embeddings ----------------------

@pytest.mark.parametrize("case", ["bert-cls-rk", "bert-mlm-rkq-tied-copy"])
def test_relative_key_up_to_max_position_embeddings(db, rng, tmp_path, case):
    """An input of exactly max_position_embeddings rows ([CLS] and [SEP]
    counted) reaches both ends of distance_embedding and matches the port;
    one token more is refused at run time (HF would index past the
    table)."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    M = ck.config["max_position_embeddings"]
    tokens = random_tokens(rng, ck, M - 2)
    out = port(ck, tokens)
    check(case, "embed cls (n = M)", embed(db, toks(tokens), "cls"), out["hidden"][0])
    with pytest.raises(sqlite3.DataError) as e:       # SQLITE_TOOBIG
        embed(db, toks(tokens + tokens[:1]), "cls")
    assert str(e.value) == (
        f"relattn_embed: tokens makes {M + 1} input rows ({M - 1} tokens with bos and "
        f"the appended token), over the model's position.max_position_embeddings = {M} "
        f"(its rel_k tables cover distances up to {M - 1})")


@pytest.mark.parametrize("case", ["bert-cls-rk", "deberta-v3-cls"])
def test_scan_label_prob_and_pooled_embedding(db, rng, tmp_path, case):
    """relattn_scan over a table of text: label and prob as
    relattn_labels' best row, embedding with pooling='cls' as the port's
    final row 0."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    texts = [checkpoints.sample_text(rng, int(n)) for n in rng.integers(3, 25, 7)]
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO docs(body) VALUES (?)", [(t,) for t in texts])
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='docs', tokens='body', pooling='cls')")
    rows = db.execute("SELECT id, label, prob, embedding FROM temp.job").fetchall()
    names = [ck.config["id2label"][str(i)] for i in range(len(ck.config["id2label"]))]
    assert [r[0] for r in rows] == list(range(1, len(texts) + 1))
    for (i, label, prob, emb), text in zip(rows, texts):
        out = port(ck, ck.encode(text))
        p = ports.softmax(out["logits"])
        assert label == names[int(np.argmax(p))]
        check(case, "scan prob", [prob], [p.max()])
        check(case, "scan embedding cls", from_f32(emb), out["hidden"][0])


@pytest.mark.parametrize("case", ["deberta-v3-cls", "bert-cls-rkq"])
def test_scan_label_with_mean_embedding_same_bits_as_scalar(db, rng, tmp_path, case):
    """label, logit and prob come from the final row 0 alone (its own path
    through the last layer), the mean embedding from every row: a scan
    selecting both gives, row by row, the bits of relattn_labels /
    relattn_classify and of relattn_embed asked alone, at 1 and 2 threads,
    and the port's values. DeBERTa's rows up to 300 tokens: several row
    blocks; BERT's up to its 64 positions."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    lens = [1, 4, 17, 60, 140, 300] if ck.family == "deberta" else [1, 4, 17, 40, 62]
    rows = [random_tokens(rng, ck, n) for n in lens]
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    db.executemany("INSERT INTO docs(body) VALUES (?)", [(toks(r),) for r in rows])
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='docs', tokens='body')")
    multi = ck.config.get("problem_type") == "multi_label_classification"
    first = None
    for threads in (1, 2):
        db.execute("SELECT relattn_threads(?)", (threads,))
        got = db.execute("SELECT id, label, logit, prob, embedding FROM temp.job").fetchall()
        want = []
        for i, r in enumerate(rows):
            lab = db.execute("SELECT label, logit, prob FROM relattn_labels('m', ?)",
                             (toks(r),)).fetchall()
            best = max(lab, key=lambda x: x[1])
            want.append((i + 1, *best, db.execute("SELECT relattn_embed('m', ?)",
                                                  (toks(r),)).fetchone()[0]))
            assert db.execute("SELECT relattn_classify('m', ?)",
                              (toks(r),)).fetchone()[0] == best[0]
        for g, w in zip(got, want):
            assert g == w, f"threads={threads}, row {g[0]}"
        assert len(got) == len(want)
        if first is None:
            first = got
        assert got == first, f"threads={threads}"
    for g, r in zip(first, rows):
        out = port(ck, r)
        p = 1 / (1 + np.exp(-out["logits"])) if multi else ports.softmax(out["logits"])
        check(case, "scan logit with mean", [g[2]], [out["logits"].max()])
        check(case, "scan prob with mean", [g[3]], [p[int(np.argmax(out["logits"]))]])
        check(case, "scan mean with label", from_f32(g[4]), mean_pooled(ck, out["hidden"]))


@pytest.mark.parametrize("case", ["bert-model-rk", "bert-mlm-rk", "deberta-v3-cls"])
def test_config_without_architectures(db, rng, tmp_path, case):
    """An older config.json without architectures: the head is the one
    whose tensors the file has (pooler, MLM head, classifier), and the
    outputs are the class's."""
    ck = make(case, tmp_path, rng)
    cfg = {k: v for k, v in ck.config.items() if k != "architectures"}
    db.execute("SELECT relattn_import('m', ?, ?, ?, ?)",
               (ck.read("weights"), json.dumps(cfg), ck.read("tokenizer"),
                ck.path("tokenizer_config").read_text()))
    tokens = random_tokens(rng, ck, 17)
    out = port(ck, tokens)
    check(case, "embed cls (no architectures)", embed(db, toks(tokens), "cls"), out["hidden"][0])
    if "pooled" in out:
        check(case, "embed pooler (no architectures)", embed(db, toks(tokens), "pooler"),
              out["pooled"])
    if "logits" in out:
        rows = db.execute("SELECT logit FROM relattn_labels('m', ?)", (toks(tokens),)).fetchall()
        check(case, "logits (no architectures)", [r[0] for r in rows], out["logits"])
    if "mlm_logits" in out:
        tokens[5] = ck.special["mask"]
        lp = ports.log_softmax(port(ck, tokens)["mlm_logits"])
        rows = db.execute("SELECT pos, top_logprob FROM relattn_logprobs('m', ?)",
                          (toks(tokens),)).fetchall()
        assert [r[0] for r in rows] == [5]
        check(case, "mlm (no architectures)", [rows[0][1]], [lp[6].max()])


@pytest.mark.parametrize("clean", [True, False])
def test_bert_detokenize_follows_clean_up_tokenization_spaces(db, rng, tmp_path, clean):
    """relattn_detokenize on a BERT checkpoint gives BertTokenizer.decode's
    text (tests/tok/bert_ref.py, a port of _decode and
    clean_up_tokenization) with [CLS], [SEP] and [PAD] skipped, and
    tokenizer_config.json's clean_up_tokenization_spaces followed."""
    ck = make("bert-model-rk", tmp_path, rng)
    ck.tok_config["clean_up_tokenization_spaces"] = clean
    ck.path("tokenizer_config").write_text(json.dumps(ck.tok_config))
    import_checkpoint(db, ck)
    text = "Hello, worlds! " + checkpoints.sample_text(rng, 9) + " ?"
    ids = model_input(ck, ck.encode(text)) + [ck.special["pad"]]
    got = db.execute("SELECT relattn_detokenize('m', ?)", (toks(ids),)).fetchone()[0]
    skip = {ck.special[k] for k in ("cls", "sep", "pad")}
    want = ck._wp.decode(ids, skip=skip, clean_up_tokenization_spaces=clean)
    assert got == want
    assert (" ," in got) == (not clean)
