"""Tokenizers stored with their model (docs/reference.md, Tokenizers): the
file as a U8 tensor row, imported, exported byte for byte, parsed once per
load; and the wordpiece tokenizer exact against a port of Hugging Face's
slow BertTokenizer (tests/tok/bert_ref.py) on a multilingual corpus of
10,000 lines built from text on the machine (tests/tok/corpus.py)."""
import collections
import json
import pathlib
import sqlite3
import sys

import numpy as np
import pytest

from conftest import connect

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tok"))
import bert_ref  # noqa: E402
import corpus  # noqa: E402
import modelgen  # noqa: E402
import safetensors_py  # noqa: E402


def ids_of(blob):
    return np.frombuffer(blob, "<i4").tolist()


@pytest.fixture(scope="module")
def lines():
    return corpus.lines(10000)


def texts(lines):
    """The corpus as Python sees TEXT with invalid UTF-8: U+FFFD."""
    return [b.decode("utf-8", "replace") for b in lines]


@pytest.fixture(scope="module")
def vocab(lines):
    """A vocabulary learned from the corpus: special tokens, every
    character (plain and ##), the frequent words and word pieces, cased and
    lower-cased. Some words are left out so [UNK] and ## pieces are used."""
    words = collections.Counter()
    for lower in (True, False):
        ref = bert_ref.Bert(b"[UNK]\n", do_lower_case=lower)
        for t in texts(lines[::3]):
            words.update(ref.basic(t))
    chars = sorted({c for w in words for c in w})
    pieces = collections.Counter()
    for w, n in words.items():
        for k in (2, 3, 4):
            if len(w) > k:
                pieces[w[:k]] += n
                pieces["##" + w[-k:]] += n
    top = [w for w, _ in sorted(words.items(), key=lambda x: (-x[1], x[0]))]
    top = [w for i, w in enumerate(top[:3000]) if i % 7]
    ptop = [p for p, _ in sorted(pieces.items(), key=lambda x: (-x[1], x[0]))]
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    toks += [c for c in chars if ord(c) % 11] + ["##" + c for c in chars]
    toks += ptop[:2000] + top
    seen, out = set(), []
    for t in toks:
        if t not in seen:
            seen.add(t)
            out.append(t)
    out.append("hello")  # a repeated token: its later line is its id
    return ("\r\n".join(out[:40]) + "\n" + "\n".join(out[40:]) + "\n").encode()


def wp_config(n_vocab, **tok):
    cfg = modelgen.config(vocab_size=n_vocab + 3, bos=None, eos=None,
                          pad=None)
    cfg["tokenizer"] = {"type": "wordpiece", "bos": 2, "eos": 3, "pad": 0,
                        **tok}
    return cfg


def import_wp(db, name, vocab, rng, **tok):
    n = len(bert_ref.load_vocab(vocab)[0]) + 1
    cfg = wp_config(n + 5, **tok)
    blob = modelgen.safetensors(cfg, rng)
    return db.execute("SELECT relattn_import(?, ?, NULL, ?)",
                      (name, blob, vocab)).fetchone()[0], cfg, blob


def corpus_table(db, lines):
    db.execute("CREATE TABLE corpus(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO corpus VALUES (?, CAST(? AS TEXT))",
                   enumerate(lines))


OPTIONS = [
    ("lower", {}),
    ("cased", {"do_lower_case": False}),
    ("lower_keep_accents", {"do_lower_case": True, "strip_accents": False}),
    ("cased_strip_accents", {"do_lower_case": False, "strip_accents": True}),
    ("no_cjk_split", {"tokenize_chinese_chars": False}),
    ("no_clean_up", {"clean_up_tokenization_spaces": False}),
]


@pytest.mark.parametrize("label,opts", OPTIONS, ids=[o[0] for o in OPTIONS])
def test_wordpiece_exact_on_corpus(label, opts, lines, vocab, rng):
    db = connect()
    import_wp(db, "w", vocab, rng, **opts)
    corpus_table(db, lines)
    ref = bert_ref.Bert(
        vocab, do_lower_case=opts.get("do_lower_case", True),
        strip_accents=opts.get("strip_accents"),
        tokenize_chinese_chars=opts.get("tokenize_chinese_chars", True))
    got = db.execute("SELECT id, relattn_tokenize('w', body) FROM corpus "
                     "ORDER BY id").fetchall()
    bad = [(i, t) for (i, g), t in zip(got, texts(lines))
           if ids_of(g) != ref.encode(t)]
    assert len(got) == len(lines) >= 10000
    assert not bad, (label, len(bad), bad[:3])
    # the corpus exercises what the tokenizer does
    all_ids = [x for _, g in got for x in ids_of(g)]
    assert ref.vocab["[UNK]"] in all_ids
    assert any(ref.inv[x].startswith("##") for x in set(all_ids))
    # decode, as BertTokenizer.decode: convert_tokens_to_string, then
    # clean_up_tokenization unless the config turns it off; with [CLS] and
    # [SEP] around the text, which it leaves out (the config's bos, eos, pad)
    clean = opts.get("clean_up_tokenization_spaces", True)
    markers = {2, 3, 0}
    changed = 0
    for (i, g), t in list(zip(got, texts(lines)))[::5]:
        ids = [2] + ids_of(g) + [3, 0]
        d = db.execute("SELECT relattn_detokenize('w', ?)",
                       (np.asarray(ids, "<i4").tobytes(),)).fetchone()[0]
        want = ref.decode(ids, skip=markers, clean_up_tokenization_spaces=clean)
        assert d == want, i
        changed += want != ref.decode(ids, skip=markers, clean_up_tokenization_spaces=False)
    assert (changed > 0) == clean
    db.close()


def test_wordpiece_hand_checked(db, rng):
    # what BertTokenizer gives, worked out by hand from its rules
    vocab = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world",
                       "##s", ",", "!", "cafe", "café", "中", "σας", "un",
                       "##aff", "##able"]).encode()
    import_wp(db, "w", vocab, rng)
    import_wp(db, "c", vocab, rng, do_lower_case=False)

    def tok(m, text):
        return ids_of(db.execute("SELECT relattn_tokenize(?, ?)",
                                 (m, text)).fetchone()[0])
    assert tok("w", "Hello, WORLDS! unaffable") == [4, 7, 5, 6, 8, 13, 14, 15]
    assert tok("w", "Café") == [9]           # accents stripped
    assert tok("c", "café") == [10]          # kept when cased
    assert tok("w", "中文") == [11, 1]        # CJK split, unknown is [UNK]
    assert tok("w", "ΣΑΣ") == [12]            # str.lower's final sigma
    assert tok("w", "a" * 101) == [1]         # [UNK] past 100 characters
    assert tok("w", "he\x00llo\u200b") == [4]  # control characters dropped
    assert tok("w", " \t\n") == []
    # special tokens written in the text: their own ids, case-sensitive
    # ([MASK] is not in this vocabulary: text, three [UNK])
    assert tok("w", "[CLS] hello[SEP]worlds [MASK]") == [2, 4, 3, 5, 6, 1, 1, 1]
    assert tok("w", "[cls]") == [1, 1, 1]
    assert db.execute("SELECT relattn_detokenize('w', relattn_tokens("
                      "'[4,7,13,14,15]'))").fetchone()[0] == "hello, unaffable"
    # [CLS] [SEP] [PAD] (the config's bos, eos, pad) are left out, [UNK] is not
    assert db.execute("SELECT relattn_detokenize('w', relattn_tokens("
                      "'[2,4,7,1,8,3,0,0]'))").fetchone()[0] == "hello, [UNK]!"
    import_wp(db, "k", vocab, rng, clean_up_tokenization_spaces=False)
    assert db.execute("SELECT relattn_detokenize('k', relattn_tokens("
                      "'[2,4,7,1,8,3]'))").fetchone()[0] == "hello , [UNK] !"


def test_tokenizer_file_round_trip(db, rng, vocab):
    n, cfg, blob = import_wp(db, "w", vocab, rng)
    assert n == len(modelgen.shapes(cfg)) + 1
    row = db.execute("SELECT dtype, shape, data FROM relattn_tensor WHERE "
                     "model = 'w' AND name = 'tokenizer.wordpiece'").fetchone()
    assert row == ("U8", f"[{len(vocab)}]", vocab)
    out = db.execute("SELECT relattn_export('w')").fetchone()[0]
    tensors, meta = safetensors_py.read(out)
    assert tensors["tokenizer.wordpiece"] == ("U8", [len(vocab)], vocab)
    # the exported file imports alone, with the same hash
    assert db.execute("SELECT relattn_import('w2', ?)", (out,)).fetchone()[0] == n
    h = db.execute("SELECT name, sha256 FROM relattn_model").fetchall()
    assert h[0][1] == h[1][1]
    text = "Hello wörld, 中文 — naïve"
    a, b = (db.execute("SELECT relattn_tokenize(?, ?)", (m, text)).fetchone()[0]
            for m in ("w", "w2"))
    assert a == b and len(a) > 0
    # the hash covers the tokenizer: another file, another hash
    db.execute("SELECT relattn_import('w3', ?, NULL, ?)",
               (blob, vocab.replace(b"[PAD]", b"[pad]")))
    assert db.execute("SELECT sha256 FROM relattn_model WHERE name = 'w3'"
                      ).fetchone()[0] != h[0][1]


def test_tokenizer_edit_seen_by_cache(db, rng):
    vocab = b"[UNK]\nab\na\nb\n"
    import_wp(db, "w", vocab, rng)
    q = "SELECT relattn_tokenize('w', 'ab')"
    assert ids_of(db.execute(q).fetchone()[0]) == [1]
    db.execute("UPDATE relattn_tensor SET data = ?, shape = '[10]' WHERE "
               "name = 'tokenizer.wordpiece'", (b"[UNK]\na\nb\n",))
    assert ids_of(db.execute(q).fetchone()[0]) == [0]  # 'ab' is no token now
    db.execute("UPDATE relattn_tensor SET dtype = 'F32' WHERE name = "
               "'tokenizer.wordpiece'")
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute(q)
    assert str(e.value) == ("relattn_tokenize: model 'w': tensor "
                            "'tokenizer.wordpiece' must have dtype U8")
    db.execute("DELETE FROM relattn_tensor WHERE name = 'tokenizer.wordpiece'")
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute(q)
    assert str(e.value) == ("relattn_tokenize: model 'w': tensor "
                            "'tokenizer.wordpiece' is missing (the config's "
                            "tokenizer.type needs its file)")


def bad_import(db, args):
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_import(%s)" % ", ".join("?" * len(args)),
                   args)
    assert db.execute("SELECT count(*) FROM sqlite_schema WHERE name = "
                      "'relattn_model'").fetchone()[0] == 0
    return str(e.value)


def test_tokenizer_import_errors(db, rng):
    cfg = wp_config(20)
    blob = modelgen.safetensors(cfg, rng)
    byte_blob = modelgen.safetensors(modelgen.config(), rng)
    assert bad_import(db, ("w", blob)) == (
        "relattn_import: the config's tokenizer.type (wordpiece) needs its "
        "file: pass tokenizer_blob, or put tensor 'tokenizer.wordpiece' "
        "(dtype U8) in the file")
    assert bad_import(db, ("w", blob, None, "[UNK]")) == (
        "relattn_import: tokenizer_blob must be a BLOB or NULL")
    assert bad_import(db, ("w", blob, None, b"[UNK]\n\xc3(\n")) == (
        "relattn_import: tokenizer.wordpiece is not valid UTF-8 at byte 6")
    assert bad_import(db, ("w", blob, None, b"a\nb\n")) == (
        "relattn_import: tokenizer.wordpiece has no [UNK] token")
    assert bad_import(db, ("w", blob, None, b"")) == (
        "relattn_import: tokenizer.wordpiece has no tokens")
    assert bad_import(db, ("w", blob, None, b"[UNK]\n" * 24)) == (
        "relattn_import: the tokenizer has 24 tokens, more than vocab_size (23)")
    assert bad_import(db, ("b", byte_blob, None, b"[UNK]\n")) == (
        "relattn_import: tensor 'tokenizer.bytes' is a tokenizer file, but "
        "the config's tokenizer.type is bytes, which has none")
    # in the file: the kind must match, dtype U8, and not given twice
    w = {k: v.astype(np.float32) for k, v in modelgen.tensors(cfg, rng).items()}
    meta = {"relattn.config": json.dumps(cfg)}
    for name, entry, msg in [
            ("tokenizer.sentencepiece", ("U8", [6], b"[UNK]\n"),
             "relattn_import: tensor 'tokenizer.sentencepiece' does not match "
             "the config's tokenizer.type (wordpiece): expected "
             "'tokenizer.wordpiece'"),
            ("tokenizer.wordpiece", ("F32", [1], b"[UN"  b"K"),
             "relattn_import: tensor 'tokenizer.wordpiece' must have dtype U8 "
             "and one dimension"),
            ("ln_f.weight", ("U8", [16], b"x" * 16),
             "relattn_import: tensor 'ln_f.weight' has dtype 'U8'; expected "
             "F32, F16 or BF16")]:
        t = dict(w)
        t[name] = entry
        assert bad_import(db, ("w", safetensors_py.write(t, meta))) == msg
    t = dict(w)
    t["tokenizer.wordpiece"] = ("U8", [6], b"[UNK]\n")
    f = safetensors_py.write(t, meta)
    assert bad_import(db, ("w", f, None, b"[UNK]\n")) == (
        "relattn_import: tokenizer_blob is given, and the file has tensor "
        "'tokenizer.wordpiece' too")
    assert db.execute("SELECT relattn_import('w', ?)", (f,)).fetchone()[0] == \
        len(w) + 1



def test_tokenizer_file_of_another_kind(db, rng):
    """A file that does not parse as the config's kind, but is another kind
    by its structure, is refused naming what it is."""
    spm = pytest.importorskip("sentencepiece")
    sys.path.insert(0, str(HERE.parent / "hf"))
    import checkpoints
    model = checkpoints.spm_model("deberta")
    wp = modelgen.safetensors(wp_config(400), rng)
    cfg = modelgen.config(vocab_size=402, bos=None, eos=None, pad=None)
    cfg["tokenizer"] = {"type": "sentencepiece"}
    sp = modelgen.safetensors(cfg, rng)
    tj = b'{"version": "1.0", "model": {"vocab": {"[UNK]": 0}}}'
    assert bad_import(db, ("w", wp, None, model)) == (
        "relattn_import: tokenizer.wordpiece is a SentencePiece model (a "
        "protobuf), not the vocab.txt the config's tokenizer.type "
        "(wordpiece) needs")
    assert bad_import(db, ("w", wp, None, tj)) == (
        "relattn_import: tokenizer.wordpiece is a tokenizer.json (a JSON "
        "object), not the vocab.txt the config's tokenizer.type (wordpiece) "
        "needs")
    assert bad_import(db, ("s", sp, None, b"[PAD]\n[UNK]\nhello\n")) == (
        "relattn_import: tokenizer.sentencepiece is a vocab.txt (lines of "
        "UTF-8 text), not the SentencePiece model the config's "
        "tokenizer.type (sentencepiece) needs")
    assert bad_import(db, ("s", sp, None, tj)) == (
        "relattn_import: tokenizer.sentencepiece is a tokenizer.json (a JSON "
        "object), not the SentencePiece model the config's tokenizer.type "
        "(sentencepiece) needs")
    # each file imports as its own kind; a vocab.txt may start with an
    # empty line, the token '' (id 0), as BertTokenizer's load_vocab reads it
    assert db.execute("SELECT relattn_import('s', ?, NULL, ?)",
                      (sp, model)).fetchone()[0] > 0
    assert spm.SentencePieceProcessor(model_proto=model).get_piece_size() == 400
    vocab = b"\n[UNK]\n[CLS]\n[SEP]\nhello\n"
    assert db.execute("SELECT relattn_import('w', ?, NULL, ?)",
                      (wp, vocab)).fetchone()[0] > 0
    assert db.execute("SELECT relattn_tokens_json(relattn_tokenize('w', "
                      "'hello x'))").fetchone()[0] == "[4,1]"


def test_tokenizer_config_errors(db, rng):
    cfg = wp_config(20, do_lower_case="yes")
    assert bad_import(db, ("w", modelgen.safetensors(cfg, rng), None,
                           b"[UNK]\n")) == (
        "relattn_import: config: 'tokenizer.do_lower_case' must be true, "
        "false or null, not text")


def test_limit_before_the_work(db, rng):
    import_wp(db, "w", b"[UNK]\na\n", rng)
    db.execute("SELECT relattn_max_tokens(5)")
    assert db.execute("SELECT relattn_embed('w', 'a a a a a') IS NOT NULL"
                      ).fetchone()[0] == 1
    with pytest.raises(sqlite3.DataError) as e:
        db.execute("SELECT relattn_embed('w', 'a a a a a a')")
    assert str(e.value) == ("relattn_embed: tokens has more tokens than "
                            "relattn_max_tokens() = 5")



def test_tokenize_stops_at_the_limit(db, rng):
    """relattn_tokenize with a tokenizer whose count is known only by
    encoding: refused as soon as it passes relattn_max_tokens(), a text of
    exactly the limit's tokens kept; the same for WordPiece and
    SentencePiece, and for relattn_detokenize given TEXT."""
    spm = pytest.importorskip("sentencepiece")
    sys.path.insert(0, str(HERE.parent / "hf"))
    import checkpoints
    import_wp(db, "w", b"[UNK]\na\n", rng)
    model = checkpoints.spm_model("deberta")
    cfg = modelgen.config(vocab_size=402, bos=None, eos=None, pad=None)
    cfg["tokenizer"] = {"type": "sentencepiece"}
    db.execute("SELECT relattn_import('s', ?, NULL, ?)",
               (modelgen.safetensors(cfg, rng), model))
    sp = spm.SentencePieceProcessor(model_proto=model)
    assert len(sp.encode("a " * 5)) == 5 and len(sp.encode("a " * 6)) == 6
    db.execute("SELECT relattn_max_tokens(5)")
    for name in ("w", "s"):
        assert db.execute("SELECT length(relattn_tokenize(?, ?)) / 4",
                          (name, "a " * 5)).fetchone()[0] == 5
        for fn, arg in (("relattn_tokenize", "text"),
                        ("relattn_detokenize", "tokens")):
            with pytest.raises(sqlite3.DataError) as e:
                db.execute(f"SELECT {fn}(?, ?)", (name, "a " * 6))
            assert str(e.value) == (f"{fn}: {arg} has more tokens than "
                                    "relattn_max_tokens() = 5")
            assert e.value.sqlite_errorname == "SQLITE_TOOBIG"
    # a 10 MB text: refused, not 5 million tokens
    db.execute("SELECT relattn_max_tokens(65536)")
    for name in ("w", "s"):
        with pytest.raises(sqlite3.DataError) as e:
            db.execute("SELECT relattn_tokenize(?, ?)", (name, "a " * 5_000_000))
        assert str(e.value) == ("relattn_tokenize: text has more tokens than "
                                "relattn_max_tokens() = 65536")


def test_scan_and_model_functions_use_the_tokenizer(db, rng, lines, vocab):
    """relattn_scan and the model functions tokenize TEXT with the model's
    tokenizer: as many tokens as the reference gives, bos ([CLS]) in front,
    the same embedding as relattn_embed over the tokenized BLOB."""
    import_wp(db, "w", vocab, rng)
    ref = bert_ref.Bert(vocab)
    docs = [t for t in texts(lines[::500]) if ref.encode(t)][:12]
    db.execute("CREATE TABLE docs(body TEXT)")
    db.executemany("INSERT INTO docs VALUES (?)", [(t,) for t in docs])
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='w', "
               "source='docs', tokens='body')")
    rows = db.execute("SELECT id, n_tokens, embedding FROM temp.job ORDER BY "
                      "id").fetchall()
    assert [r[1] for r in rows] == [len(ref.encode(t)) for t in docs]
    for (rowid, _, emb), t in zip(rows, docs):
        blob = db.execute("SELECT relattn_tokenize('w', ?)", (t,)).fetchone()[0]
        want = db.execute("SELECT relattn_embed('w', ?)", (blob,)).fetchone()[0]
        assert np.array_equal(np.frombuffer(emb, "<f4"),
                              np.frombuffer(want, "<f4"))
    # [CLS] (bos) goes in front: scoring the text scores every token
    t = docs[0]
    lp = db.execute("SELECT count(*) FROM relattn_logprobs('w', ?)",
                    (t,)).fetchone()[0]
    assert lp == len(ref.encode(t))
