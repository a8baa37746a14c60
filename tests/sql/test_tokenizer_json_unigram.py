"""A Unigram tokenizer.json (DeBERTa-v3, T5) as relattn_import's
tokenizer_blob (docs/reference.md, "A Unigram tokenizer.json"): the file
transformers' DebertaV2Converter and T5Converter write (built here by
tests/hf/checkpoints.py's unigram_tokenizer_json from the tests' own
spm models) is stored as a SentencePiece model carrying the file's
pipeline, and relattn_tokenize gives the ids Hugging Face's Rust
`tokenizers` gives (its Node binding, npm `tokenizers` 0.23.2, run by
tests/node/hf_tokenize.mjs) on every line of a multilingual corpus
(tests/tok/corpus.py) and hostile strings; relattn_detokenize gives its
tokenizer.decode(ids, skip_special_tokens). A checkpoint with no other
tokenizer file imports and runs; what relattn does not run is refused by
the component's name, the database unchanged.

The comparisons need Node 20 or newer and npm (skipped, saying why,
without them); the refusals, the worked example and the end-to-end
import do not. Lines of invalid UTF-8 go to relattn as they are and to the
library decoded with U+FFFD in place of each bad sequence."""
import json
import pathlib
import sqlite3
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "hf"))
sys.path.insert(0, str(HERE.parent / "tok"))
sys.path.insert(0, str(HERE.parent / "shell"))
import checkpoints  # noqa: E402
import corpus  # noqa: E402
from conftest import ROOT, connect  # noqa: E402
from test_tokenizer_json import (HOSTILE, NODE_DIR, library_ids,  # noqa: E402
                                 node_ready, weights)

import os  # noqa: E402
import subprocess  # noqa: E402

EXTRA = HOSTILE + [
    "-------------------", "  a  b  ", "   ", "\u3000x\u3000", "[MASK]x [CLS]y[SEP]",
    "<extra_id_0>  hi </s> <pad><unk>", "</s></s>", "\r\n x\u0301 \uff21\u0301 \u00b5\u0301",
    "a\u200d\u0301b \t\u200d\t", "\ufffd\ufffd x", "\u2581\u2581 \u2581x", "<0x41> <unk>",
    # grapheme clusters: prepended marks, spacing marks, jamo, flags, ZWJ
    "\u06001 \u0600 1 \u06dd2 \u070f3 \U000110bd4 \u08e2x", "\u0e01\u0e33 \u0915\u093f",
    "\u1100\u1161 \uac00\u11a8 \U0001f1eb\U0001f1f7 \u263a\u200d\u2764",
    "\u00b5\u0301 \u2460\u0301 \ufb01\u0301 \u00bd\u0301 \u3000\u0301",
]


def checkpoint(tmp_path, rng, family, cls=None):
    if family == "deberta":
        return checkpoints.deberta(tmp_path / family, rng, cls or "DebertaV2Model")
    return checkpoints.t5(tmp_path / family, rng, cls or "T5EncoderModel")


def import_json(db, ck, doc, name="m"):
    return db.execute("SELECT relattn_import(?, ?, ?, ?)",
                      (name, weights(ck), json.dumps(ck.config), json.dumps(doc).encode())
                      ).fetchone()[0]


def library_decode(tmp_path, doc, ids):
    """tokenizer.decode(ids, skip_special_tokens=True) of the Rust library."""
    tj = tmp_path / "tokenizer.json"
    tj.write_text(json.dumps(doc))
    src = tmp_path / "ids.json"
    src.write_text(json.dumps(ids))
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run(["node", str(NODE_DIR / "hf_tokenize.mjs"), str(tj), str(src),
                        "decode"], capture_output=True, text=True, timeout=1800, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def model_ids(db, raw):
    return [json.loads(db.execute(
        "SELECT relattn_tokens_json(relattn_tokenize('m', CAST(? AS TEXT)))",
        (b,)).fetchone()[0]) for b in raw]


def hub_t5(doc):
    """T5's files on the hub, written by older converters: Precompiled
    alone, WhitespaceSplit then Metaspace with add_prefix_space (no
    prepend_scheme, no split), the decoder likewise."""
    meta = {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True,
            "str_rep": "\u2581"}
    doc["normalizer"] = doc["normalizer"]["normalizers"][0]
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, meta]}
    doc["decoder"] = dict(meta)


def lower_deberta(doc):
    """DebertaV2Converter for do_lower_case true: Lowercase first."""
    doc["normalizer"]["normalizers"].insert(0, {"type": "Lowercase"})


VARIANTS = {"deberta-always": ("deberta", True, None), "deberta-first": ("deberta", False, None),
            "deberta-lower": ("deberta", True, lower_deberta),
            "t5-always": ("t5", True, None), "t5-first": ("t5", False, None),
            "t5-hub": ("t5", True, hub_t5)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_ids_and_text_equal_the_librarys(tmp_path, rng, variant):
    reason = node_ready()
    if reason:
        pytest.skip(reason)
    family, legacy, edit = VARIANTS[variant]
    lines = corpus.lines(4000, generated=1500)
    texts = [b.decode("utf-8", "replace") for b in lines] + EXTRA
    raw = lines + [t.encode("utf-8") for t in EXTRA]
    ck = checkpoint(tmp_path, rng, family)
    doc = checkpoints.unigram_tokenizer_json(ck.tok_bytes, family, ck.tok_config,
                                             legacy=legacy)
    if edit:
        edit(doc)
    db = connect()
    assert import_json(db, ck, doc) > 0
    tok = json.loads(db.execute("SELECT config FROM relattn_model").fetchone()[0])["tokenizer"]
    assert tok["type"] == "sentencepiece" and "split_special" not in tok
    pre = [] if family == "t5" else [tok["bos"]]
    want = library_ids(tmp_path, doc, texts)
    got = [pre + ids + [tok["append"]] for ids in model_ids(db, raw)]
    differ = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    print(f"{variant}: {len(differ)} of {len(texts)} lines differ")
    assert differ == [], differ[:5]
    # decode: the same ids, special tokens and all, to the library's text
    want_text = library_decode(tmp_path, doc, got)
    got_text = [db.execute("SELECT relattn_detokenize('m', relattn_tokens(?))",
                           (json.dumps(ids),)).fetchone()[0] for ids in got]
    differ = [(g, w) for g, w in zip(got_text, want_text) if g != w]
    print(f"decode: {len(differ)} of {len(got)} differ")
    assert differ == [], differ[:5]
    db.close()


def _tiny(vocab, **over):
    doc = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": 1, "content": "</s>", "single_word": False,
                             "lstrip": False, "rstrip": False, "normalized": False,
                             "special": True}],
           "normalizer": None, "pre_tokenizer": None,
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": "</s>", "type_id": 0}},
                                       {"Sequence": {"id": "B", "type_id": 0}},
                                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                              "special_tokens": {"</s>": {"id": "</s>", "ids": [1],
                                                          "tokens": ["</s>"]}}},
           "decoder": None,
           "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": False}}
    doc.update(over)
    return doc


def test_scores_in_double(tmp_path, rng):
    """The library sums the JSON's scores in double: 'ab' at -2.0000000001
    loses to 'a' + 'b' (-2), though in float32 (SentencePiece's) the two tie
    and the piece found first, 'ab', stays. Then with byte_fallback an
    unknown character is its bytes, and without it a run of them one unk."""
    ck = checkpoints.t5(tmp_path / "t5", rng, "T5EncoderModel")
    base = [["<unk>", 0.0], ["</s>", 0.0], ["a", -1.0], ["b", -1.0]]
    db = connect()
    cases = [(-2.0000000001, "ab", [2, 3]), (-1.9999999999, "ab", [4]),
             (-2.5, "abzzb", [2, 3, 0, 3])]
    docs = []
    for k, (score, text, want) in enumerate(cases):
        doc = _tiny(base + [["ab", score]])
        docs.append((doc, text, want))
        import_json(db, ck, doc, name="m")
        assert model_ids(db, [text.encode()]) == [want], (score, text)
    doc = _tiny(base + [["ab", -2.5]] + [[f"<0x{b:02X}>", -5.0] for b in range(256)],
                model={"type": "Unigram", "unk_id": 0, "byte_fallback": True,
                       "vocab": base + [["ab", -2.5]] + [[f"<0x{b:02X}>", -5.0]
                                                          for b in range(256)]})
    import_json(db, ck, doc, name="m")
    want_bytes = [2, 3, 5 + 0xC3, 5 + 0xA9, 3]
    assert model_ids(db, ["ab\u00e9b".encode()]) == [want_bytes]
    docs.append((doc, "ab\u00e9b", want_bytes))
    if node_ready() is None:
        for doc, text, want in docs:
            assert library_ids(tmp_path, doc, [text]) == [want + [1]]
    # decoders as SpmConverter writes them with byte_fallback: bytes back to
    # text, an invalid run one U+FFFD a byte, a leading space stripped
    doc["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    doc["model"]["vocab"].append(["\u2581", -1.0])
    doc["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    import_json(db, ck, doc, name="m")
    b = lambda x: 5 + x  # noqa: E731 (the id of <0xNN>)
    sp = len(doc["model"]["vocab"]) - 1
    lists = [[sp, 2, 3, b(0xC3), b(0xA9), 3, 1], [sp, 2, b(0xC3), sp, 3],
             [b(0xE2), b(0x82), sp, b(0xAC)], [1, sp, sp, 2, 1], [b(0x41), 2, b(0xFF)]]
    got = [db.execute("SELECT relattn_detokenize('m', relattn_tokens(?))",
                      (json.dumps(x),)).fetchone()[0] for x in lists]
    assert got[0] == "abéb" and got[1] == "a\ufffd b"
    if node_ready() is None:
        assert got == library_decode(tmp_path, doc, lists)
    db.close()


def test_end_to_end_without_spm_model(tmp_path, rng):
    """A DeBERTa-v3 classifier and a T5 encoder with tokenizer.json as their
    only tokenizer file: imported, their special ids (DeBERTa's [MASK] an
    added token past the pieces) as with spm.model, and the models compute
    what the same weights imported with spm.model compute on a text both
    tokenize alike."""
    text = "The cat sat on the mat. [MASK] it was."
    for family, cls in (("deberta", "DebertaV2ForSequenceClassification"),
                        ("t5", "T5EncoderModel")):
        ck = checkpoint(tmp_path, rng, family, cls)
        doc = checkpoints.unigram_tokenizer_json(ck.tok_bytes, family, ck.tok_config)
        db = connect()
        assert import_json(db, ck, doc, name="j") > 0
        db.execute("SELECT relattn_import('s', ?, ?, ?, ?)",
                   (weights(ck), json.dumps(ck.config), ck.tok_bytes,
                    json.dumps(ck.tok_config)))
        cj, cs = (json.loads(db.execute("SELECT config FROM relattn_model WHERE name = ?",
                                        (n,)).fetchone()[0])["tokenizer"] for n in "js")
        for key in ("bos", "eos", "pad", "append", "sep", "mask", "unk"):
            assert cj[key] == cs[key], key
        # exported and imported again: the stored file carries the pipeline
        assert db.execute("SELECT relattn_import('c', relattn_export('j'))").fetchone()[0] > 0
        ids = [db.execute("SELECT relattn_tokens_json(relattn_tokenize(?, ?))",
                          (n, text)).fetchone()[0] for n in "jsc"]
        assert ids[0] == ids[1] == ids[2]
        e = [np.frombuffer(db.execute("SELECT relattn_embed(?, ?)", (n, text)).fetchone()[0],
                           dtype=np.float32) for n in "js"]
        assert np.abs(e[0]).sum() > 0 and np.array_equal(e[0], e[1])
        if family == "deberta":
            assert cj["mask"] in json.loads(ids[0])
            probs = [db.execute("SELECT group_concat(label || ':' || prob) FROM "
                                "relattn_labels(?, ?)", (n, text)).fetchone()[0] for n in "js"]
            assert probs[0] == probs[1]
            # decode leaves the special tokens out, as skip_special_tokens
            assert db.execute("SELECT relattn_detokenize('j', relattn_tokenize('j', ?))",
                              (text,)).fetchone()[0] == "The cat sat on the mat. it was."
        db.close()


# ---- what is refused -----------------------------------------------------------

def _set(path, value):
    def edit(doc):
        d = doc
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return edit


def _norm(members):
    return _set(["normalizer"], {"type": "Sequence", "normalizers": members})


def _added(content, **flags):
    def edit(doc):
        for a in doc["added_tokens"]:
            if a["content"] == content:
                a.update(flags)
    return edit


def _added_gap(doc):
    doc["added_tokens"].append({"id": 500, "content": "<new>", "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": True})


T = "relattn_import: tokenizer.json: "
REFUSED = [
    ("model-bpe", _set(["model"], {"type": "BPE", "vocab": {}, "merges": []}),
     T + "model 'BPE' is not supported (supported: WordPiece, Unigram)"),
    ("nfkd", _norm([{"type": "NFKD"}, {"type": "Lowercase"}]),
     T + "normalizer 'NFKD+Lowercase' is not supported (supported: Precompiled, NFKC, NFC, "
     "Replace, Strip, Lowercase, a Sequence of them, null)"),
    ("replace-regex", _norm([{"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]),
     T + "normalizer Replace with pattern '\\s+' is not supported (supported: a String, or "
     "a Regex of one character repeated, as ' {2,}')"),
    ("two-precompiled", _norm([{"type": "Precompiled", "precompiled_charsmap": None}] * 2),
     T + "normalizer 'Precompiled+Precompiled' is not supported (one Precompiled at most)"),
    ("charsmap", _norm([{"type": "Precompiled", "precompiled_charsmap": "not base64!"}]),
     T + "normalizer Precompiled: precompiled_charsmap is not a base64 character map"),
    ("strip", _norm([{"type": "Strip", "strip_left": "yes", "strip_right": True}]),
     T + "normalizer Strip: strip_left and strip_right must be true or false"),
    ("punctuation", _set(["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
        {"type": "Punctuation", "behavior": "Isolated"},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]}),
     T + "pre_tokenizer 'Punctuation+Metaspace' is not supported (supported: Metaspace, "
     "WhitespaceSplit, a Sequence of them, null)"),
    ("metaspace-scheme", _set(["pre_tokenizer"], {"type": "Metaspace", "replacement": "\u2581",
                                                  "add_prefix_space": False}),
     T + "pre_tokenizer Metaspace: replacement must be one character, prepend_scheme first, "
     "always or never (never when add_prefix_space is false), split true or false"),
    ("decoder", _set(["decoder"], {"type": "ByteLevel"}),
     T + "decoder 'ByteLevel' is not supported (supported: Metaspace, Replace, ByteFallback, "
     "Fuse, Strip, a Sequence of them, null)"),
    ("post-processor-null", _set(["post_processor"], None),
     T + "post_processor 'null' is not supported (supported: TemplateProcessing)"),
    ("template", _set(["post_processor", "single"], [{"Sequence": {"id": "A", "type_id": 0}}]),
     T + "post_processor TemplateProcessing with single '$A:0' and pair '[CLS]:0 $A:0 [SEP]:0 "
     "$B:1 [SEP]:1' is not supported (supported: '[CLS]:0 $A:0 [SEP]:0' with '[CLS]:0 $A:0 "
     "[SEP]:0 $B:1 [SEP]:1', and '$A:0 </s>:0' with '$A:0 </s>:0 $B:0 </s>:0', any tokens "
     "for [CLS], [SEP] and </s>)"),
    ("template-ids", _set(["post_processor", "special_tokens", "[SEP]", "ids"], [7]),
     T + "post_processor: special token '[SEP]' must have the one id the tokenizer gives it"),
    ("added-single-word", _added("[MASK]", single_word=True),
     T + "added_tokens: '[MASK]' with single_word true is not supported"),
    ("added-normalized", _added("[CLS]", normalized=True),
     T + "added_tokens: '[CLS]' with normalized true is not supported"),
    ("added-id", _added("[CLS]", id=5),
     T + "added_tokens: '[CLS]' has id 5, whose piece in model.vocab is another"),
    ("added-gap", _added_gap,
     T + "added_tokens: '<new>' has id 500, not 401 (the ids past model.vocab follow it "
     "without a gap)"),
    ("unk-id", _set(["model", "unk_id"], None),
     T + "model Unigram: unk_id must be the id of a piece of model.vocab"),
    ("vocab-entry", _set(["model", "vocab", 7], ["x"]),
     T + "model.vocab[7] is not a [piece, score] pair with a piece of text"),
]


@pytest.mark.parametrize("name,edit,message", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused(tmp_path, rng, name, edit, message):
    ck = checkpoint(tmp_path, rng, "deberta")
    doc = checkpoints.unigram_tokenizer_json(ck.tok_bytes, "deberta", ck.tok_config)
    edit(doc)
    db = connect()
    with pytest.raises(sqlite3.OperationalError) as e:
        import_json(db, ck, doc)
    assert str(e.value) == message
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = "
                      "'relattn_model'").fetchone()[0] == 0
    db.close()


def test_template_must_fit_the_family(tmp_path, rng):
    """T5's template on a DeBERTa checkpoint and DeBERTa's on a T5 one."""
    ck_d = checkpoint(tmp_path, rng, "deberta")
    ck_t = checkpoint(tmp_path, rng, "t5")
    doc_d = checkpoints.unigram_tokenizer_json(ck_d.tok_bytes, "deberta", ck_d.tok_config)
    doc_t = checkpoints.unigram_tokenizer_json(ck_t.tok_bytes, "t5", ck_t.tok_config)
    db = connect()
    d_on_t = dict(doc_t, post_processor=doc_d["post_processor"])
    d_on_t["post_processor"] = json.loads(json.dumps(doc_d["post_processor"]).replace(
        "[CLS]", "<pad>").replace("[SEP]", "</s>").replace('"ids": [1]', '"ids": [0]')
        .replace('"ids": [2]', '"ids": [1]'))
    with pytest.raises(sqlite3.OperationalError) as e:
        import_json(db, ck_t, d_on_t)
    assert str(e.value) == ("relattn_import: tokenizer.json: post_processor: a t5 model's "
                            "input is the text and then '</s>', with nothing in front")
    t_on_d = dict(doc_d)
    t_on_d["post_processor"] = json.loads(json.dumps(doc_t["post_processor"]).replace(
        "</s>", "[SEP]").replace('"ids": [1]', '"ids": [2]'))
    with pytest.raises(sqlite3.OperationalError) as e:
        import_json(db, ck_d, t_on_d)
    assert str(e.value) == ("relattn_import: tokenizer.json: post_processor: a deberta-v2 "
                            "model's input starts with a token ([CLS]), not with the text, "
                            "as '$A:0 [SEP]:0' has it")
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = "
                      "'relattn_model'").fetchone()[0] == 0
    db.close()


def test_reference_example(tmp_path):
    """docs/reference.md's Unigram tokenizer.json example, run as printed in
    the sqlite3 shell (tests/shell/test_doc_examples.py's checker) on a tiny
    T5 checkpoint whose tokenizer.json is written here."""
    from test_doc_examples import run_sql
    rng = np.random.default_rng(14)
    ck = checkpoints.t5(tmp_path / "hf-t5", rng, "T5EncoderModel", ffn="gated-gelu")
    doc = checkpoints.unigram_tokenizer_json(ck.tok_bytes, "t5", ck.tok_config)
    (tmp_path / "hf-t5" / "tokenizer.json").write_text(json.dumps(doc))
    text = (ROOT / "docs" / "reference.md").read_text()
    at = text.index("<!-- run by tests/sql/test_tokenizer_json_unigram.py")
    start = text.index("```sql\n", at) + len("```sql\n")
    code, line = text[start:text.index("```", start)], text.count("\n", 0, start) + 1
    stmts = run_sql(code, line, tmp_path, "docs/reference.md, A Unigram tokenizer.json")
    assert sum(bool(s.want_out) for s in stmts) >= 4
    assert sum(s.want_err is not None for s in stmts) >= 1


@pytest.mark.parametrize("form", ["NFKC", "NFC"])
def test_nfkc_equals_the_librarys(tmp_path, rng, form):
    """The NFKC and NFC normalizers against the library on every code point
    the form changes (16 a line), each composition pair, Hangul jamo
    sequences and part of the corpus. Every character of the input and of
    its normalized form is made a piece of its own (low score), so a
    character normalized otherwise shows in the ids, not as an [UNK] on
    both sides. Where the library's Unicode version and this Python's
    differ, a line differs: the count must be 0."""
    import unicodedata
    reason = node_ready()
    if reason:
        pytest.skip(reason)
    changed = [chr(cp) for cp in range(0x110000) if not 0xD800 <= cp < 0xE000
               and unicodedata.normalize(form, chr(cp)) != chr(cp)]
    lines = [" ".join(changed[i:i + 16]) for i in range(0, len(changed), 16)]
    pairs = []
    for cp in range(0xC0, 0x30000):
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<") and len(d.split()) == 2:
            pairs.append("".join(chr(int(x, 16)) for x in d.split()))
    lines += [" ".join(pairs[i:i + 16]) for i in range(0, len(pairs), 16)]
    lines += ["\u1100\u1161\u11a8 \uac00\u11a8 a\u0301\u0323 a\u0323\u0301 \u0b47\u0b3e",
              "e\u0301\u0301 \u212b \u1e9b\u0323 \uff76\uff9e \u00c5\u0300", "x" + "\u0301" * 40]
    texts = lines + [b.decode("utf-8", "replace") for b in corpus.lines(1500, generated=800)]
    ck = checkpoints.t5(tmp_path / "t5", rng, "T5EncoderModel")
    doc = checkpoints.unigram_tokenizer_json(ck.tok_bytes, "t5", ck.tok_config)
    doc["normalizer"]["normalizers"][0] = {"type": form}
    vocab = doc["model"]["vocab"]
    have = {p for p, _ in vocab}
    chars = set()
    for t in texts:
        chars.update(t)
        chars.update(unicodedata.normalize(form, t))
    for c in sorted(chars):
        if c not in have and not c.isspace() and c != "\x00":
            vocab.append([c, -14.0])
    V = len(vocab) + 4
    ck.config["vocab_size"] = V
    ck.params["shared.weight"] = rng.standard_normal((V, ck.config["d_model"])).astype(np.float32)
    db = connect()
    assert import_json(db, ck, doc) > 0
    want = library_ids(tmp_path, doc, texts)
    got = [ids + [1] for ids in model_ids(db, [t.encode() for t in texts])]
    differ = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    print(f"{form}: {len(differ)} of {len(texts)} lines differ "
          f"({len(changed)} code points changed, {len(pairs)} pairs)")
    assert differ == [], differ[:3]
    db.close()
