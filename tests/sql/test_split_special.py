"""tokenizer.split_special: special tokens written in a text are cut out
first, each its id, and the parts between encoded by the sentencepiece
tokenizer as they are, as Hugging Face's slow tokenizers do
(PreTrainedTokenizer.tokenize in transformers' tokenization_utils.py: the
added tokens' Trie.split, then each token's lstrip / rstrip takes the
whitespace beside it, then _tokenize on each part left). The reference below
is tests/hf/checkpoints.py's hf_tokenize, written from that rule on
Python's re and str.strip, with python3-sentencepiece's encode for the
parts; the texts are fresh each run,
with the specials at the start, the end, side by side and repeated."""
import io
import json
import re
import sqlite3
import sys
import pathlib

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "hf"))
import modelgen  # noqa: E402
import checkpoints  # noqa: E402

spm = pytest.importorskip("sentencepiece")

# two models: the usual normalizer (spaces collapsed, so the strip flags
# change nothing), and one that keeps every space (so they do)
MODELS = {"nfkc": dict(),
          "keep_spaces": dict(remove_extra_whitespaces=False)}
_TRAINED = {}


def model(kind):
    if kind not in _TRAINED:
        f = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(checkpoints.training_text(800, seed=3)),
            model_writer=f, vocab_size=300, model_type="unigram",
            character_coverage=1.0, minloglevel=2, num_threads=1,
            unk_id=0, bos_id=1, eos_id=2, pad_id=3, pad_piece="<pad>",
            **MODELS[kind])
        _TRAINED[kind] = f.getvalue()
    return _TRAINED[kind]


def specials_of(n, flags):
    """{text: (id, lstrip, rstrip)}: the model's <s> (bos), </s> (eos,
    appended), <pad>, <unk>, and two added tokens past its n pieces: [MASK]
    (the config's mask) and [MASK]!! (longer, from the same start)."""
    out = {"<s>": (1, False, False), "</s>": (2, False, flags),
           "<pad>": (3, False, False), "<unk>": (0, False, False),
           "[MASK]": (n, flags, False), "[MASK]!!": (n + 1, False, flags)}
    return out


def native_config(n, flags, split=True):
    cfg = modelgen.config(vocab_size=n + 4, bos=None, eos=None, pad=None)
    cfg["tokenizer"] = {"type": "sentencepiece", "bos": 1, "eos": 2, "pad": 3,
                        "unk": 0, "mask": n}
    if split:
        cfg["tokenizer"]["split_special"] = True
        cfg["tokenizer"]["added_tokens"] = {
            str(n): {"content": "[MASK]", "lstrip": flags, "rstrip": False,
                     "single_word": False},
            str(n + 1): "[MASK]!!" if not flags else
            {"content": "[MASK]!!", "rstrip": True},
            "2": {"content": "</s>", "lstrip": False, "rstrip": flags}}
    return cfg


def load(db, name, kind, flags, rng, split=True):
    data = model(kind)
    sp = spm.SentencePieceProcessor(model_proto=data)
    n = sp.get_piece_size()
    cfg = native_config(n, flags, split)
    db.execute("SELECT relattn_import(?, ?, NULL, ?)",
               (name, modelgen.safetensors(cfg, rng), data))
    return sp, specials_of(n, flags)


def hf_encode(sp, specials, text):
    """The HF rule (tests/hf/checkpoints.py hf_tokenize), sp.encode on the
    parts."""
    return checkpoints.hf_tokenize(sp.encode, specials, text)


def hf_decode(sp, specials, ids):
    """The documented decode: each special id its text, the runs between
    through sp.decode, the non-empty parts joined by a space."""
    text_of = {v[0]: t for t, v in specials.items()}
    parts, run = [], []
    for i in ids + [None]:
        if i is None or i in text_of:
            if run and sp.decode(run):
                parts.append(sp.decode(run))
            run = []
            if i is not None:
                parts.append(text_of[i])
        else:
            run.append(i)
    return " ".join(parts)


SPACES = ["", " ", "  ", "\t", " \u3000", "\n ", "\u00a0"]


def random_text(rng, specials):
    """Words and specials with whitespace of several kinds around them."""
    names = sorted(specials)
    out = []
    if rng.random() < 0.4:
        out.append(names[int(rng.integers(len(names)))])
    for _ in range(int(rng.integers(1, 7))):
        out.append(SPACES[int(rng.integers(len(SPACES)))])
        r = rng.random()
        if r < 0.45:
            out.append(checkpoints.sample_text(rng, int(rng.integers(1, 6))))
        elif r < 0.75:
            out.append(names[int(rng.integers(len(names)))])
        else:   # side by side, or repeated
            a = names[int(rng.integers(len(names)))]
            out.append(a + (a if rng.random() < 0.5 else
                            names[int(rng.integers(len(names)))]))
        out.append(SPACES[int(rng.integers(len(SPACES)))])
    if rng.random() < 0.4:
        out.append(names[int(rng.integers(len(names)))])
    return "".join(out)


def tokenize_all(db, name, texts):
    db.execute("DROP TABLE IF EXISTS t")
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO t(body) VALUES (?)", [(x,) for x in texts])
    rows = db.execute("SELECT relattn_tokenize(?, body), relattn_detokenize(?, "
                      "relattn_tokenize(?, body)) FROM t ORDER BY id",
                      (name, name, name)).fetchall()
    return [(np.frombuffer(b, "<i4").tolist(), d) for b, d in rows]


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("flags", [False, True])
def test_split_special_ids_and_decode(db, rng, kind, flags):
    sp, specials = load(db, "m", kind, flags, rng)
    texts = [random_text(rng, specials) for _ in range(300)]
    got = tokenize_all(db, "m", texts)
    bad = [t for t, (ids, _) in zip(texts, got) if ids != hf_encode(sp, specials, t)]
    assert not bad, (kind, flags, len(bad), bad[:3])
    bad = [t for t, (ids, dec) in zip(texts, got) if dec != hf_decode(sp, specials, ids)]
    assert not bad, (kind, flags, len(bad), bad[:3])
    ids_all = [i for ids, _ in got for i in ids]
    for t, (i, _, _) in specials.items():    # every special was met
        assert i in ids_all, t
    if kind == "keep_spaces" and flags:
        # the flags matter here: without them, other ids
        plain = {t: (i, False, False) for t, (i, _, _) in specials.items()}
        assert sum(hf_encode(sp, plain, t) != ids for t, (ids, _) in zip(texts, got)) > 10


def test_split_special_off_is_sentencepiece(db, rng):
    """Without the key (the default) the text is sentencepiece's alone:
    '[MASK]' and '</s>' are ordinary characters, as sp.encode has them."""
    sp, specials = load(db, "m", "nfkc", False, rng, split=False)
    texts = [random_text(rng, specials) for _ in range(100)]
    got = tokenize_all(db, "m", texts)
    assert [ids for ids, _ in got] == [sp.encode(t) for t in texts]
    assert any(hf_encode(sp, specials, t) != ids for t, (ids, _) in zip(texts, got))


def test_split_special_limit(db, rng):
    """relattn_max_tokens counts the special ids with the others, and the
    encoding stops when it is passed."""
    sp, specials = load(db, "m", "nfkc", False, rng)
    n = sp.get_piece_size()
    text = " ".join(["[MASK]"] * 3 + ["<s>"] * 2)
    assert json.loads(db.execute("SELECT relattn_tokens_json(relattn_tokenize('m', ?))",
                                 (text,)).fetchone()[0]) == [n] * 3 + [1] * 2
    db.execute("SELECT relattn_max_tokens(5)")
    assert db.execute("SELECT length(relattn_embed('m', ?))", (text,)).fetchone()[0] > 0
    for longer in (text + "[MASK]", text + " a", "a" + text, text + " " + text * 100000):
        with pytest.raises(sqlite3.DataError) as e:
            db.execute("SELECT relattn_embed('m', ?)", (longer,))
        assert str(e.value) == ("relattn_embed: tokens has more tokens than "
                                "relattn_max_tokens() = 5")


def import_error(db, cfg, data, rng):
    with pytest.raises(sqlite3.Error) as e:
        db.execute("SELECT relattn_import('x', ?, NULL, ?)",
                   (modelgen.safetensors(cfg, rng), data))
    assert db.execute("SELECT count(*) FROM relattn_model WHERE name = 'x'").fetchone()[0] == 0
    return str(e.value)


def test_split_special_config_errors(db, rng):
    load(db, "m", "nfkc", False, rng)
    data = model("nfkc")
    n = spm.SentencePieceProcessor(model_proto=data).get_piece_size()

    def cfg_with(**tok):
        cfg = native_config(n, False)
        cfg["tokenizer"].update(tok)
        return cfg
    # the mask past the pieces needs its text
    assert import_error(db, cfg_with(added_tokens={}), data, rng) == (
        f"relattn_import: tokenizer.split_special: token {n} (tokenizer.mask) "
        "has no text in the tokenizer's file; give it in tokenizer.added_tokens")
    assert import_error(db, cfg_with(added_tokens={"x1": "a"}), data, rng) == (
        "relattn_import: config: 'tokenizer.added_tokens' has key 'x1', not a "
        f"token id (0 to {n + 3})")
    assert import_error(db, cfg_with(added_tokens={str(n + 4): "a"}), data, rng) == (
        "relattn_import: config: 'tokenizer.added_tokens' has key "
        f"'{n + 4}', not a token id (0 to {n + 3})")
    for bad in ("", 5, {"content": ""}, {"text": "a"}, [1]):
        assert import_error(db, cfg_with(added_tokens={str(n): bad}), data, rng) == (
            f"relattn_import: config: 'tokenizer.added_tokens' entry '{n}' must "
            "be a non-empty string, or an object with a non-empty string 'content'")
    assert import_error(db, cfg_with(added_tokens={str(n): {"content": "[M]",
                                                            "lstrip": 1}}), data, rng) == (
        f"relattn_import: config: 'tokenizer.added_tokens' entry '{n}': "
        "'lstrip' must be true or false, not integer")
    assert import_error(db, cfg_with(added_tokens={str(n): "<s>"}), data, rng) == (
        f"relattn_import: tokenizer.split_special: tokens 1 (tokenizer.bos) and "
        f"{n} (tokenizer.added_tokens) have the same text")
    assert import_error(db, cfg_with(added_tokens=[1]), data, rng) == (
        "relattn_import: config: 'tokenizer.added_tokens' must be an object, not array")
    assert import_error(db, cfg_with(split_special="yes"), data, rng) == (
        "relattn_import: config: 'tokenizer.split_special' must be true or "
        "false, not text")
    # a config edited in the table is checked when the model loads
    db.execute("UPDATE relattn_model SET config = json_set(config, "
               "'$.tokenizer.added_tokens', json('{}')) WHERE name = 'm'")
    with pytest.raises(sqlite3.Error) as e:
        db.execute("SELECT relattn_tokenize('m', 'a')")
    assert str(e.value) == (
        f"relattn_tokenize: model 'm': tokenizer.split_special: token {n} "
        "(tokenizer.mask) has no text in the tokenizer's file; give it in "
        "tokenizer.added_tokens")


def test_split_special_bytes_limit(db, rng):
    """The byte tokenizer with split_special: a special text is one id, so
    the limit is not the text's length in bytes."""
    cfg = modelgen.config(vocab_size=260)
    cfg["tokenizer"] = {"type": "bytes", "bos": 256, "eos": 257, "pad": 258,
                        "mask": 259, "split_special": True,
                        "added_tokens": {"256": "<s>", "257": "</s>",
                                         "258": "<pad>", "259": "[MASK]"}}
    db.execute("SELECT relattn_import('b', ?)", (modelgen.safetensors(cfg, rng),))
    text = "[MASK]a\u00e9[MASK]"
    assert json.loads(db.execute("SELECT relattn_tokens_json(relattn_tokenize('b', ?))",
                                 (text,)).fetchone()[0]) == [259, 97, 0xC3, 0xA9, 259]
    assert db.execute("SELECT relattn_detokenize('b', relattn_tokenize('b', ?))",
                      (text,)).fetchone()[0] == "[MASK] a\u00e9 [MASK]"
    db.execute("SELECT relattn_max_tokens(5)")
    assert db.execute("SELECT relattn_score('b', ?) < 0", (text,)).fetchone()[0] == 1
    with pytest.raises(sqlite3.DataError) as e:
        db.execute("SELECT relattn_score('b', ?)", (text + "!",))
    assert str(e.value) == ("relattn_score: tokens has more tokens than "
                            "relattn_max_tokens() = 5")
