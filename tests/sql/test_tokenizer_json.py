"""A Hugging Face tokenizer.json as relattn_import's tokenizer_blob
(docs/reference.md, Hugging Face checkpoints): the file BertConverter writes
is mapped onto the WordPiece tokenizer, and relattn_tokenize gives the ids
Hugging Face's Rust `tokenizers` gives (its Node binding, the npm package
`tokenizers` of tests/node, run by tests/node/hf_tokenize.mjs) on every
line of a multilingual corpus of this machine's text (tests/tok/corpus.py)
and on hostile strings; a file with a component relattn does not have is
refused by that component's name, the database unchanged.

Needs Node 20 or newer and npm (`npm ci` in tests/node when the package is
missing); without them the comparison is skipped, saying why. Lines of
invalid UTF-8 go to relattn as they are and to the library decoded with
U+FFFD in place of each bad sequence: both drop U+FFFD (clean_text)."""
import json
import os
import pathlib
import sqlite3
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "hf"))
sys.path.insert(0, str(HERE.parent / "tok"))
import checkpoints  # noqa: E402
import corpus  # noqa: E402
import nodedeps  # noqa: E402
import safetensors_py  # noqa: E402
from conftest import connect  # noqa: E402

NODE_DIR = nodedeps.NODE_DIR

HOSTILE = [
    "", " ", "\t\n\r", "Hello, World!", "[MASK]", "a[MASK]b", "[mask] [Mask]",
    "[CLS][SEP][PAD][UNK]", " [SEP] x [SEP] ", "[MASK", "MASK]", "[[MASK]]",
    "x" * 99, "x" * 100, "x" * 101, "é" * 101, "a" + "\u0301" * 120,
    "ΟΔΟΣ ΟΔΟΣ. Σ σς", "İstanbul DİYARBAKIR", "straße STRASSE ẞ", "ﬁne ﬂow",
    "Ǆemal ǅ", "\u0085a\u0085b", "soft\u00adhyphen", "zero\u200bwidth",
    "join\u200dme", "bom\ufeffhere", "nb\u00a0sp", "ideo\u3000space",
    "line\u2028sep\u2029para", "\x00nul\x01ctl\x7fdel", "\ufffdrepl",
    "unassigned \u0378 \u0380 \U000e0080 \U0010fffd", "private \ue000",
    "中文字符和日本語のかな", "한국어 텍스트", "emoji 👨‍👩‍👧 🇫🇷 ❤️",
    "Ａ Ｂ ｃ ＡＢＣ", "½ ² ① Ⅻ", "café cafe\u0301", "ÅNGSTRÖM Ångström",
    "ﾊﾝｶｸ", "a\tb\nc\rd", "...!!!???", "$100 + 5% = #1 @home ^_^ `~`",
    "«guillemets» „quotes“ — dash", "don't can't", "\U0001d400\U0001d41a",
    "\u0345\u0399", "Ϊ́ ΰ", "ǰ ẖ", "Ꙋ ꙋ",
    # assigned after Unicode 9 (Cf, So, Lu, Po), after 14 (this Python's
    # tables: Cn there), after 15
    "x\u0890y \U0001fae0 \ua7c0\ua7c1 \u2e5d", "a\U0001f6dcb \U00031350 \U0001e030",
    "\ua7cb\ua7cc \U00010d50 \u1c89",
]


def category_lines():
    """A line for each code point this Python calls punctuation (P*), a
    nonspacing mark (Mn) or other (Cc, Cf, Co of the BMP): where the
    library's Unicode 8.0 categories and these tables part (later code
    points, a few changed categories), the ids show it."""
    import unicodedata
    out = []
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat[0] == "P" or cat in ("Mn", "Cc", "Cf") or (cat == "Co" and cp < 0xF900):
            c = chr(cp)
            out.append(f"a{c}a A{c} {c}b")
    return out


def node_ready():
    return nodedeps.node_ready(NODE_DIR / "node_modules" / "tokenizers" / "package.json",
                               "the tokenizers package")


def library_ids(tmp_path, doc, texts):
    """The ids the Rust library gives each text, specials added."""
    tj = tmp_path / "tokenizer.json"
    tj.write_text(json.dumps(doc))
    src = tmp_path / "texts.json"
    src.write_text(json.dumps(texts))
    # node itself is not built with the sanitizers the extension may be
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run(["node", str(NODE_DIR / "hf_tokenize.mjs"), str(tj), str(src)],
                       capture_output=True, text=True, timeout=1800, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def weights(ck):
    return safetensors_py.write(dict(ck.params), metadata={"format": "pt"})


def import_json(db, ck, doc, tok_config=None):
    return db.execute("SELECT relattn_import('m', ?, ?, ?, ?)",
                      (weights(ck), json.dumps(ck.config),
                       json.dumps(doc).encode(),
                       None if tok_config is None else json.dumps(tok_config))
                      ).fetchone()[0]


def corpus_vocab(texts):
    """The test vocabulary, then every character of the texts (as written,
    lowercased, and with its accents stripped), alone and as a '##'
    continuation: the corpus's words become pieces rather than [UNK], so
    the rules that differ show in the ids."""
    import unicodedata
    base = checkpoints.wordpiece_vocab().decode("utf-8").split("\n")[:-1]
    chars = set()
    for t in texts:
        for c in t:
            for form in (c, c.lower(), unicodedata.normalize("NFD", c.lower())):
                chars.update(form)
    out, seen = [], set(base)
    out += base
    for c in sorted(chars):
        if c in "\n\r" or unicodedata.category(c).startswith("C") or c.isspace():
            continue
        for t in (c, "##" + c):
            if t not in seen:
                seen.add(t)
                out.append(t)
    return ("\n".join(out) + "\n").encode("utf-8")


CASES = {
    "uncased": dict(lower=True, strip=None, chinese=True),
    "cased": dict(lower=False, strip=None, chinese=True),
    "lower-keep-accents-no-chinese": dict(lower=True, strip=False, chinese=False),
    "cased-strip-accents": dict(lower=False, strip=True, chinese=True),
}


@pytest.mark.parametrize("case", CASES)
def test_ids_equal_the_librarys(tmp_path, rng, case):
    reason = node_ready()
    if reason:
        pytest.skip(reason)
    lines = corpus.lines(4000, generated=1500)
    extra = HOSTILE + category_lines()
    texts = [b.decode("utf-8", "replace") for b in lines] + extra
    raw = lines + [t.encode("utf-8") for t in extra]
    vocab = corpus_vocab(texts)
    ck = checkpoints.bert(tmp_path / "bert", rng, "BertModel", "relative_key",
                          vocab=vocab)
    doc = checkpoints.bert_tokenizer_json(vocab, **CASES[case])
    db = connect()
    assert import_json(db, ck, doc) > 0
    cfg = json.loads(db.execute("SELECT config FROM relattn_model").fetchone()[0])
    tok = cfg["tokenizer"]
    vocab_ids = doc["model"]["vocab"]
    assert tok["type"] == "wordpiece"
    assert (tok["bos"], tok["append"], tok["unk"]) == (
        vocab_ids["[CLS]"], vocab_ids["[SEP]"], vocab_ids["[UNK]"])
    assert tok["do_lower_case"] is CASES[case]["lower"]
    # the stored file is the vocab.txt, not the JSON
    stored = db.execute("SELECT data FROM relattn_tensor WHERE name = "
                        "'tokenizer.wordpiece'").fetchone()[0]
    assert bytes(stored) == vocab
    want = library_ids(tmp_path, doc, texts)
    differ = []
    for text, b, w in zip(texts, raw, want):
        got = json.loads(db.execute(
            "SELECT relattn_tokens_json(relattn_tokenize('m', CAST(? AS TEXT)))",
            (b,)).fetchone()[0])
        if [tok["bos"]] + got + [tok["append"]] != w:
            differ.append((text, got, w))
    print(f"{case}: {len(differ)} of {len(texts)} lines differ")
    assert differ == [], differ[:5]
    db.close()


# ---- what is refused -----------------------------------------------------------

def _set(path, value):
    def edit(doc):
        d = doc
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return edit


def _added(**flags):
    def edit(doc):
        for a in doc["added_tokens"]:
            if a["content"] == "[MASK]":
                a.update(flags)
    return edit


def _vocab_gap(doc):
    v = doc["model"]["vocab"]
    v["zzz"] = len(v) + 1


def _vocab_newline(doc):
    v = doc["model"]["vocab"]
    v["a\nb"] = len(v)


def _added_extra(doc):
    v = doc["model"]["vocab"]
    v["<new>"] = len(v)
    doc["added_tokens"].append({"id": v["<new>"], "content": "<new>", "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": True})


def _no_mask(doc):
    doc["added_tokens"] = [a for a in doc["added_tokens"] if a["content"] != "[MASK]"]


T = "relattn_import: tokenizer.json: "
REFUSED = [
    ("model-bpe", _set(["model"], {"type": "BPE", "vocab": {}, "merges": []}),
     T + "model 'BPE' is not supported (supported: WordPiece, Unigram)"),
    ("model-wordlevel", _set(["model"], {"type": "WordLevel", "vocab": {}}),
     T + "model 'WordLevel' is not supported (supported: WordPiece, Unigram)"),
    ("normalizer-sequence", _set(["normalizer"], {"type": "Sequence", "normalizers": [
        {"type": "Lowercase"}, {"type": "Nmt"}]}),
     T + "normalizer 'Lowercase+Nmt' is not supported (supported: BertNormalizer)"),
    ("normalizer-null", _set(["normalizer"], None),
     T + "normalizer 'null' is not supported (supported: BertNormalizer)"),
    ("clean-text-false", _set(["normalizer", "clean_text"], False),
     T + "normalizer BertNormalizer with clean_text false is not supported"),
    ("lowercase-not-bool", _set(["normalizer", "lowercase"], "yes"),
     T + "normalizer BertNormalizer: clean_text, handle_chinese_chars and lowercase "
     "must be true or false, strip_accents true, false or null"),
    ("pre-tokenizer", _set(["pre_tokenizer"], {"type": "Whitespace"}),
     T + "pre_tokenizer 'Whitespace' is not supported (supported: BertPreTokenizer)"),
    ("pre-tokenizer-sequence", _set(["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
        {"type": "BertPreTokenizer"}, {"type": "Digits", "individual_digits": True}]}),
     T + "pre_tokenizer 'BertPreTokenizer+Digits' is not supported (supported: "
     "BertPreTokenizer)"),
    ("decoder", _set(["decoder"], {"type": "ByteLevel"}),
     T + "decoder 'ByteLevel' is not supported (supported: WordPiece, null)"),
    ("decoder-prefix", _set(["decoder", "prefix"], "@@"),
     T + "decoder WordPiece with prefix '@@' is not supported (supported: '##')"),
    ("post-processor-roberta", _set(["post_processor"], {"type": "RobertaProcessing",
                                                          "sep": ["[SEP]", 5], "cls": ["[CLS]", 4]}),
     T + "post_processor 'RobertaProcessing' is not supported (supported: "
     "TemplateProcessing, BertProcessing)"),
    ("post-processor-null", _set(["post_processor"], None),
     T + "post_processor 'null' is not supported (supported: TemplateProcessing, "
     "BertProcessing)"),
    ("template-single", _set(["post_processor", "single"], [
        {"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]),
     T + "post_processor TemplateProcessing with single '[CLS]:0 $A:0' and pair "
     "'[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1' is not supported (supported: "
     "'[CLS]:0 $A:0 [SEP]:0' and '[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1', any two "
     "tokens for [CLS] and [SEP])"),
    ("template-ids", _set(["post_processor", "special_tokens", "[SEP]", "ids"], [4]),
     T + "post_processor: special token '[SEP]' must have the one id model.vocab gives it"),
    ("truncation", _set(["truncation"], {"direction": "Right", "max_length": 512,
                                         "strategy": "LongestFirst", "stride": 0}),
     T + "truncation is not supported (it must be null)"),
    ("padding", _set(["padding"], {"strategy": "BatchLongest", "pad_id": 0}),
     T + "padding is not supported (it must be null)"),
    ("subword-prefix", _set(["model", "continuing_subword_prefix"], "@@"),
     T + "model WordPiece with continuing_subword_prefix '@@' is not supported "
     "(supported: '##')"),
    ("max-chars", _set(["model", "max_input_chars_per_word"], 200),
     T + "model WordPiece with max_input_chars_per_word 200 is not supported "
     "(supported: 100)"),
    ("unk", _set(["model", "unk_token"], "<unk>"),
     T + "model.unk_token '<unk>' is not in model.vocab"),
    ("added-lstrip", _added(lstrip=True),
     T + "added_tokens: '[MASK]' with lstrip true is not supported"),
    ("added-single-word", _added(single_word=True),
     T + "added_tokens: '[MASK]' with single_word true is not supported"),
    ("added-normalized", _added(normalized=True),
     T + "added_tokens: '[MASK]' with normalized true is not supported"),
    ("added-not-special", _added(special=False),
     T + "added_tokens: '[MASK]' with special false is not supported"),
    ("added-id", _added(id=3),
     T + "added_tokens: '[MASK]' has id 3, not its id in model.vocab"),
    ("added-other", _added_extra,
     T + "added_tokens: '<new>' is not supported (supported: [PAD], [UNK], [CLS], "
     "[SEP], [MASK], which WordPiece splits out itself)"),
    ("added-missing", _no_mask,
     T + "added_tokens lacks '[MASK]', which model.vocab has (WordPiece splits it "
     "out of a text)"),
    ("vocab-gap", _vocab_gap,
     T + "model.vocab has no token with id %d (its ids must run from 0 without a gap)"),
    ("vocab-newline", _vocab_newline,
     T + "model.vocab: token %d ('a\\x0Ab') holds a line break or U+0000, which a "
     "vocab.txt cannot"),
]


@pytest.mark.parametrize("name,edit,message", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused(tmp_path, rng, name, edit, message):
    ck = checkpoints.bert(tmp_path / "bert", rng, "BertModel", "relative_key")
    doc = checkpoints.bert_tokenizer_json(ck.tok_bytes)
    n = len(doc["model"]["vocab"])
    edit(doc)
    if "%d" in message:
        message = message % n
    db = connect()
    with pytest.raises(sqlite3.OperationalError) as e:
        import_json(db, ck, doc)
    assert str(e.value) == message
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = "
                      "'relattn_model'").fetchone()[0] == 0
    db.close()


def test_refused_text(tmp_path, rng):
    """Not JSON; options of tokenizer_config.json that BertTokenizerFast
    would put in place of the file's normalizer."""
    ck = checkpoints.bert(tmp_path / "bert", rng, "BertModel", "relative_key")
    doc = checkpoints.bert_tokenizer_json(ck.tok_bytes)
    db = connect()
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_import('m', ?, ?, ?)",
                   (weights(ck), json.dumps(ck.config), b'{"model": {,}}'))
    assert str(e.value) == "relattn_import: tokenizer.json is not valid JSON"
    with pytest.raises(sqlite3.OperationalError) as e:
        import_json(db, ck, doc, tok_config={"do_lower_case": False})
    assert str(e.value) == (
        "relattn_import: tokenizer_config_json: do_lower_case false differs from "
        "the tokenizer.json's normalizer (lowercase true)")
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = "
                      "'relattn_model'").fetchone()[0] == 0
    # agreeing options, and the roles it does not give ([PAD], [MASK]) from it
    assert import_json(db, ck, doc, tok_config={"do_lower_case": True,
                                                "mask_token": "[MASK]"}) > 0
    db.close()


def test_bert_processing(tmp_path, rng):
    """BertProcessing (older files) is the same template: the same config."""
    ck = checkpoints.bert(tmp_path / "bert", rng, "BertModel", "relative_key")
    doc = checkpoints.bert_tokenizer_json(ck.tok_bytes)
    v = doc["model"]["vocab"]
    configs = []
    for pp in (doc["post_processor"], {"type": "BertProcessing", "sep": ["[SEP]", v["[SEP]"]],
                                       "cls": ["[CLS]", v["[CLS]"]]}):
        doc["post_processor"] = pp
        db = connect()
        assert import_json(db, ck, doc) > 0
        configs.append(json.loads(db.execute("SELECT config FROM relattn_model").fetchone()[0]))
        db.close()
    assert configs[0] == configs[1]
    tok = configs[0]["tokenizer"]
    assert tok["rules"] == "tokenizers"
    assert (tok["bos"], tok["sep"], tok["append"], tok["pad"], tok["mask"], tok["unk"]) == (
        v["[CLS]"], v["[SEP]"], v["[SEP]"], v["[PAD]"], v["[MASK]"], v["[UNK]"])


def test_rules_config_key(tmp_path, rng):
    """tokenizer.rules in a native config: 'tokenizers' drops no code point
    assigned after Unicode 8.0 and lower-cases Σ to σ at a word's end too;
    'transformers' (the default) is BertTokenizer's; another value is
    refused by name."""
    sys.path.insert(0, str(HERE.parent))
    import modelgen
    vocab = ("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "ο", "##δ",
                        "##ο", "##σ", "##ς", "x", "##y", "\u2e5d"]) + "\n").encode()
    db = connect()
    for name, rules in (("t", None), ("r", "tokenizers")):
        cfg = modelgen.config(vocab_size=16, bos=None, eos=None, pad=None)
        cfg["tokenizer"] = {"type": "wordpiece", "bos": 2, "eos": 3}
        if rules:
            cfg["tokenizer"]["rules"] = rules
        db.execute("SELECT relattn_import(?, ?, NULL, ?)",
                   (name, modelgen.safetensors(cfg, rng), vocab))

    def ids(name, text):
        return json.loads(db.execute(
            "SELECT relattn_tokens_json(relattn_tokenize(?, ?))", (name, text)).fetchone()[0])
    assert ids("t", "ΟΔΟΣ") == [5, 6, 7, 9]
    assert ids("r", "ΟΔΟΣ") == [5, 6, 7, 8]
    assert ids("t", "x\u0890y") == [10, 11]   # U+0890 (Cf, Unicode 14) dropped
    assert ids("r", "x\u0890y") == [1]        # kept: the word is [UNK]
    assert ids("t", "x\u2e5dx") == [10, 12, 10]  # U+2E5D (Po, Unicode 14) split off
    assert ids("r", "x\u2e5dx") == [1]
    cfg = modelgen.config(vocab_size=16, bos=None, eos=None, pad=None)
    cfg["tokenizer"] = {"type": "wordpiece", "rules": "fast"}
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_import('x', ?, NULL, ?)",
                   (modelgen.safetensors(cfg, rng), vocab))
    assert str(e.value) == ("relattn_import: config: 'tokenizer.rules' must be one of "
                            "transformers,tokenizers, not 'fast'")
    db.close()
