"""Token classification: BertForTokenClassification and
DebertaV2ForTokenClassification imported from their files, then
relattn_token_labels against float64 references written here:

- the logits: the float64 port of the class's forward (tests/hf/ports.py),
  classifier over every row of [CLS] tokens [SEP];
- the ids and offsets: for SentencePiece, the fast tokenizer's (Hugging
  Face's tokenizers library, npm, on the tokenizer.json the converter
  builds from spm.model: offset_mapping in characters);
  for WordPiece, each word of BERT's basic splitting
  (whitespace, punctuation, CJK) with its normalized characters traced back
  to the text's, each piece covering the characters it spells, [UNK] the
  whole word (what the fast tokenizer's offset_mapping gives);
- the post-processing: a port of transformers' TokenClassificationPipeline
  (pipelines/token_classification.py: gather_pre_entities, aggregate,
  aggregate_word(s), group_entities, group_sub_entities, with the fast
  tokenizers' decoders as convert_tokens_to_string), for each of the
  aggregation strategies none, simple, first, average, max.

Fresh random weights and texts. Words, labels, offsets and token indices
are compared exactly; scores within 1e-4 (float32 forward against
float64)."""
import json
import os
import sys
import unicodedata

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tok"))
import bert_ref  # noqa: E402
import checkpoints  # noqa: E402
import ports  # noqa: E402
from test_hf_import import import_checkpoint, toks  # noqa: E402
from test_pairs import error  # noqa: E402

TOL = 1e-4
STRATEGIES = ["none", "simple", "first", "average", "max"]
CASES = {
    "bert-rk": ("bert", dict(position="relative_key")),
    "bert-rkq-cased": ("bert", dict(position="relative_key_query", do_lower_case=False)),
    "deberta-v3": ("deberta", dict(style="v3")),
    "deberta-v2": ("deberta", dict(style="v2")),
}


def make(case, root, rng, n_labels=6):
    family, kw = CASES[case]
    if family == "bert":
        return checkpoints.bert(root, rng, "BertForTokenClassification", n_labels=n_labels, **kw)
    return checkpoints.deberta(root, rng, "DebertaV2ForTokenClassification",
                               n_labels=n_labels, **kw)


def sample(rng):
    """Words with capitals, punctuation, accents, a CJK pair and, now and
    then, a character the vocabulary lacks."""
    words = checkpoints.sample_text(rng, int(rng.integers(5, 12))).split()
    extra = ["Zürich", "Café", "東京", "well-known", "(x)", "O'Neil", "naïve", "☃",
             "a\ua66eb"]   # U+A66E: in no vocabulary here, an [UNK] word
    for w in rng.choice(extra, 3, replace=False):
        words.insert(int(rng.integers(0, len(words) + 1)), str(w))
    return " ".join(words)


# ---- the offsets a fast tokenizer gives ---------------------------------------

def wordpiece_spans(ck, text):
    """(ids, spans in characters) of the text's WordPiece tokens."""
    lower = ck.tok_config.get("do_lower_case", True)
    words, cur = [], []
    for i, ch in enumerate(text):
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or bert_ref.is_control(ch):
            continue
        if bert_ref.is_whitespace(ch):
            if cur:
                words.append(cur)
            cur = []
        elif bert_ref.is_chinese(cp):
            if cur:
                words.append(cur)
            words.append([i])
            cur = []
        else:
            cur.append(i)
    if cur:
        words.append(cur)
    ids, spans = [], []
    for w in words:
        # normalized characters, each traced to its text character
        norm = []
        for i in w:
            s = text[i]
            if lower:
                s = "".join(c for c in unicodedata.normalize("NFD", s.lower())
                            if unicodedata.category(c) != "Mn")
            norm += [(c, i) for c in s]
        # punctuation splits the word further
        parts, part = [], []
        for c, i in norm:
            if bert_ref.is_punctuation(c):
                if part:
                    parts.append(part)
                parts.append([(c, i)])
                part = []
            else:
                part.append((c, i))
        if part:
            parts.append(part)
        for part in parts:
            word = "".join(c for c, _ in part)
            pieces = ck.encode(word)
            if pieces == [ck.special["unk"]]:
                ids.append(pieces[0])
                spans.append((part[0][1], part[-1][1] + 1))
                continue
            at = 0
            inv = ck._wp.inv
            for p in pieces:
                t = inv[p]
                k = len(t[2:] if t.startswith("##") and at > 0 else t)
                ids.append(p)
                spans.append((part[at][1], part[at + k - 1][1] + 1))
                at += k
    return ids, spans


def spm_spans(ck, text):
    """The ids and offset_mapping (in characters) the fast tokenizer gives:
    Hugging Face's tokenizers library (npm, tests/node) running the
    tokenizer.json transformers' DebertaV2Converter builds from the
    checkpoint's spm.model (checkpoints.unigram_tokenizer_json); [CLS]
    and [SEP] left out."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sql"))
    from test_tokenizer_json import library_ids, node_ready
    from test_tokenizer_spm_hf import library_offsets
    reason = node_ready()
    if reason:
        pytest.skip(reason)
    doc = checkpoints.unigram_tokenizer_json(ck.tok_bytes, "deberta", ck.tok_config)
    tmp = ck.dir / "lib"
    tmp.mkdir(exist_ok=True)
    ids = library_ids(tmp, doc, [text])[0][1:-1]
    offsets = library_offsets(tmp, doc, [text])[0][1:-1]
    return ids, [tuple(o) for o in offsets]


def spans_of(ck, text):
    return wordpiece_spans(ck, text) if ck.family == "bert" else spm_spans(ck, text)


def token_text(ck, i):
    """convert_ids_to_tokens"""
    if ck.family == "bert":
        return ck._wp.inv[i]
    return ck._spm().id_to_piece(i)


# ---- transformers' TokenClassificationPipeline, ported ------------------------

def decoder(ck, tokens):
    """convert_tokens_to_string of the fast tokenizer: the WordPiece decoder
    (prefix ##, cleanup on each token) or the Metaspace decoder."""
    if ck.family == "bert":
        out = []
        for i, t in enumerate(tokens):
            if i:
                t = t[2:] if t.startswith("##") else " " + t
            for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                         (" n't", "n't"), (" 'm", "'m"), (" do not", " don't"),
                         (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
                t = t.replace(a, b)
            out.append(t)
        return "".join(out)
    out = []
    for i, t in enumerate(tokens):
        t = t.replace("\u2581", " ")
        if i == 0 and t.startswith(" "):
            t = t[1:]
        out.append(t)
    return "".join(out)


def pipeline(ck, text, ids, spans, logits, labels, strategy, ignore=("O",)):
    """postprocess for one text: logits (n, L) of the model's input rows
    [CLS] ids [SEP]; rows of (entity, score, word, start, end, index)."""
    logits = np.asarray(logits, np.float64)
    scores = np.exp(logits - logits.max(-1, keepdims=True))
    scores /= scores.sum(-1, keepdims=True)
    unk = ck.special["unk"]
    pre = []
    for k, (i, (s, e)) in enumerate(zip(ids, spans)):
        idx = k + 1                                   # [CLS] is row 0
        word, ref = token_text(ck, i), text[s:e]
        if ck.family == "bert":                       # continuing_subword_prefix
            sub = len(word) != len(ref)
        else:
            sub = s > 0 and " " not in text[s - 1:s + 1]
        if i == unk:
            word, sub = ref, False
        pre.append(dict(word=word, scores=scores[idx], start=s, end=e, index=idx,
                        is_subword=sub))
    if strategy in ("none", "simple"):
        ents = []
        for p in pre:
            j = int(p["scores"].argmax())
            ents.append(dict(entity=labels[j], score=p["scores"][j], index=p["index"],
                             word=p["word"], start=p["start"], end=p["end"]))
    else:
        def aggregate_word(group):
            word = decoder(ck, [g["word"] for g in group])
            if strategy == "first":
                sc = group[0]["scores"]
            elif strategy == "max":
                sc = max(group, key=lambda g: g["scores"].max())["scores"]
            else:
                sc = np.nanmean(np.stack([g["scores"] for g in group]), axis=0)
            j = int(sc.argmax())
            return dict(entity=labels[j], score=sc[j], word=word,
                        start=group[0]["start"], end=group[-1]["end"])
        ents, group = [], None
        for p in pre:
            if group is None:
                group = [p]
            elif p["is_subword"]:
                group.append(p)
            else:
                ents.append(aggregate_word(group))
                group = [p]
        if group is not None:
            ents.append(aggregate_word(group))
    if strategy != "none":
        def tag(name):
            if name.startswith("B-"):
                return "B", name[2:]
            if name.startswith("I-"):
                return "I", name[2:]
            return "I", name

        def sub_group(es):
            return dict(entity=es[0]["entity"].split("-", 1)[-1],
                        score=float(np.mean([e["score"] for e in es])),
                        word=decoder(ck, [e["word"] for e in es]),
                        start=es[0]["start"], end=es[-1]["end"], index=None)
        groups, cur = [], []
        for e in ents:
            if not cur:
                cur.append(e)
                continue
            bi, t = tag(e["entity"])
            _, lt = tag(cur[-1]["entity"])
            if t == lt and bi != "B":
                cur.append(e)
            else:
                groups.append(sub_group(cur))
                cur = [e]
        if cur:
            groups.append(sub_group(cur))
        ents = groups
    return [(e["entity"], float(e["score"]), e["word"], e["start"], e["end"], e.get("index"))
            for e in ents if e["entity"] not in ignore]


def check_rows(got, want, what):
    assert [g[0] for g in got] == [w[0] for w in want], what
    assert [g[2:] for g in got] == [w[2:] for w in want], what
    if want:
        err = max(abs(g[1] - w[1]) for g, w in zip(got, want))
        print(f"{what[0]} scores: max abs error {err:.2e}")
        assert err < TOL, (what, err)


# ---- the tests ------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_spans_and_logits(db, rng, tmp_path, case):
    """aggregation none with nothing ignored: a row per token, its label,
    score, token text, offsets and index, as the pipeline reports them."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    labels = [ck.config["id2label"][str(i)] for i in range(len(ck.config["id2label"]))]
    cfg = json.loads(db.execute("SELECT config FROM relattn_model WHERE name = 'm'").fetchone()[0])
    assert cfg["head"] == "token_classifier" and cfg["labels"] == labels
    assert "pooler" not in cfg
    for _ in range(3):
        text = sample(rng)
        ids, spans = spans_of(ck, text)
        assert ids == json.loads(db.execute(
            "SELECT relattn_tokens_json(relattn_tokenize('m', ?))", (text,)).fetchone()[0])
        out = ports.forward(ck.config, ck.params, [ck.special["cls"]] + ids + [ck.special["sep"]])
        got = db.execute("SELECT entity, score, word, start, \"end\", token_index "
                         "FROM relattn_token_labels('m', ?, 'none', '[]')", (text,)).fetchall()
        want = pipeline(ck, text, ids, spans, out["token_logits"], labels, "none", ())
        check_rows(got, want, (case, text))
        # each row's offsets cut its text out of the column
        for g, (s, e) in zip(got, spans):
            assert db.execute("SELECT substr(?, ? + 1, ? - ?)",
                              (text, g[3], g[4], g[3])).fetchone()[0] == text[s:e]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_aggregation_strategies(db, rng, tmp_path, case, strategy):
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    labels = [ck.config["id2label"][str(i)] for i in range(len(ck.config["id2label"]))]
    for _ in range(3):
        text = sample(rng)
        ids, spans = spans_of(ck, text)
        out = ports.forward(ck.config, ck.params, [ck.special["cls"]] + ids + [ck.special["sep"]])
        want = pipeline(ck, text, ids, spans, out["token_logits"], labels, strategy)
        got = db.execute("SELECT entity, score, word, start, \"end\", token_index "
                         "FROM relattn_token_labels('m', ?, ?)", (text, strategy)).fetchall()
        check_rows(got, want, (case, strategy, text))
        # the ignored labels are the caller's
        keep = ["I-PER", "MISC"]
        want = pipeline(ck, text, ids, spans, out["token_logits"], labels, strategy, keep)
        got = db.execute("SELECT entity, score, word, start, \"end\", token_index "
                         "FROM relattn_token_labels('m', ?, ?, ?)",
                         (text, strategy, json.dumps(keep))).fetchall()
        check_rows(got, want, (case, strategy, "ignore", text))


def test_refusals(db, rng, tmp_path):
    ck = make("bert-rk", tmp_path / "t", rng)
    import_checkpoint(db, ck)
    q = "SELECT * FROM relattn_token_labels(?, ?, ?)"
    assert error(db, q, "m", "a cat", "grouped") == (
        "relattn_token_labels: aggregation must be 'none', 'simple', 'first', 'average' "
        "or 'max', not 'grouped'")
    assert error(db, "SELECT * FROM relattn_token_labels('m', 'a cat', 'first', 'O')") == (
        "relattn_token_labels: ignore_labels must be a JSON array of label names, not 'O'")
    assert error(db, "SELECT * FROM relattn_token_labels('m', 'a cat', 'first', '[1]')") == (
        "relattn_token_labels: ignore_labels[0] must be a string, not integer")
    assert error(db, "SELECT * FROM relattn_token_labels('m', ?)", toks([5, 6])) == (
        "relattn_token_labels: text must be TEXT (the offsets are into the text), not a "
        "token BLOB")
    assert error(db, "SELECT * FROM relattn_token_labels('m')") == (
        "relattn_token_labels: model and text arguments are required")
    assert error(db, "SELECT * FROM relattn_token_labels('m', '')") == (
        "relattn_token_labels: text is empty")
    assert error(db, "SELECT * FROM relattn_token_labels('nope', 'a')") == (
        "relattn_token_labels: no model named 'nope'")
    assert db.execute("SELECT count(*) FROM relattn_token_labels('m', NULL)").fetchone()[0] == 0
    long = " ".join(["cat"] * 70)
    assert error(db, "SELECT * FROM relattn_token_labels('m', ?)", long) == (
        "relattn_token_labels: text makes 72 input rows (70 tokens with bos and the "
        "appended token), over the model's position.max_position_embeddings = 64 (its "
        "rel_k tables cover distances up to 63)")
    seq = checkpoints.bert(tmp_path / "s", rng, "BertForSequenceClassification")
    import_checkpoint(db, seq, "seq")
    assert error(db, "SELECT * FROM relattn_token_labels('seq', 'a cat')") == (
        "relattn_token_labels: model 'seq' has no token classifier head (its head is "
        "'classifier')")
    # the sequence classifier's functions refuse a token classifier
    assert error(db, "SELECT relattn_classify('m', 'a cat')") == (
        "relattn_classify: model 'm' has no classifier head (its head is 'token_classifier')")
    # a native config names the head
    assert error(db, "SELECT relattn_import('x', relattn_export('m'), json_set((SELECT config "
                     "FROM relattn_model WHERE name = 'm'), '$.labels', json('[]')))") == (
        "relattn_import: config: head 'token_classifier' needs 'labels' (an array of names, "
        "one per class)")


def test_export_round_trip(db, rng, tmp_path):
    ck = make("deberta-v3", tmp_path, rng)
    import_checkpoint(db, ck)
    db.execute("SELECT relattn_import('copy', relattn_export('m'))").fetchone()
    text = sample(rng)
    q = "SELECT * FROM relattn_token_labels(?, ?, 'simple')"
    assert db.execute(q, ("copy", text)).fetchall() == db.execute(q, ("m", text)).fetchall()


@pytest.mark.parametrize("case", ["deberta-v3", "bert-rk"])
def test_special_token_typed_in_the_text(db, rng, tmp_path, case):
    """A [SEP] written in the text is its id and has no row (the
    pipeline's special_tokens_mask); the rows after it keep their offsets
    in the whole text."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    labels = [ck.config["id2label"][str(i)] for i in range(len(ck.config["id2label"]))]
    while True:   # within BERT's 64 positions
        a, b = sample(rng), sample(rng)
        ids_a, spans_a = spans_of(ck, a)
        ids_b, spans_b = spans_of(ck, b)
        if len(ids_a) + len(ids_b) + 3 <= 64:
            break
    text = a + " [SEP] " + b
    at = len(a) + len(" [SEP] ")
    ids = ids_a + [ck.special["sep"]] + ids_b
    assert ck.encode(text) == ids
    out = ports.forward(ck.config, ck.params,
                        [ck.special["cls"]] + ids + [ck.special["sep"]],
                        [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
                        if ck.config.get("type_vocab_size", 0) >= 2 else None)
    logits = np.delete(out["token_logits"], len(ids_a) + 1, axis=0)   # the [SEP] row
    want = pipeline(ck, text, ids_a + ids_b,
                    spans_a + [(s + at, e + at) for s, e in spans_b], logits, labels,
                    "none", ())
    # the pipeline's index counts the [SEP]: the rows after it are one further on
    want = [w[:5] + (w[5] + (1 if k >= len(ids_a) else 0),) for k, w in enumerate(want)]
    got = db.execute("SELECT entity, score, word, start, \"end\", token_index "
                     "FROM relattn_token_labels('m', ?, 'none', '[]')", (text,)).fetchall()
    check_rows(got, want, (case, text))
