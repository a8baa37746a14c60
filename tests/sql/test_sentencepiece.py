"""The sentencepiece tokenizer exact against Debian's python3-sentencepiece
(0.1.97, its C++ core): models trained here on the corpus (unigram and BPE,
several vocabulary sizes, with and without byte fallback, nmt_nfkc and
identity normalization, user-defined pieces, whitespace options), then
identical ids to sp.encode on the 10,000-line multilingual corpus
(tests/tok/corpus.py), and decode equal to sp.decode."""
import io
import json
import sqlite3
import sys
import pathlib

import numpy as np
import pytest

from conftest import connect

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tok"))
import corpus  # noqa: E402
import modelgen  # noqa: E402

spm = pytest.importorskip("sentencepiece")

MODELS = {
    "unigram_nfkc_1000": dict(model_type="unigram", vocab_size=1000),
    "unigram_identity_bytes_1500": dict(model_type="unigram", vocab_size=1500,
                                        byte_fallback=True,
                                        normalization_rule_name="identity"),
    "unigram_user_bytes_1100": dict(model_type="unigram", vocab_size=1100,
                                   byte_fallback=True,
                                   user_defined_symbols=["<sep>", "foo", "▁the"],
                                   control_symbols=["<cls>"]),
    "unigram_keep_spaces_800": dict(model_type="unigram", vocab_size=800,
                                    remove_extra_whitespaces=False,
                                    add_dummy_prefix=False),
    "bpe_nfkc_800": dict(model_type="bpe", vocab_size=800),
    "bpe_identity_bytes_1200": dict(model_type="bpe", vocab_size=1200,
                                    byte_fallback=True,
                                    normalization_rule_name="identity"),
    "bpe_user_600": dict(model_type="bpe", vocab_size=600,
                         user_defined_symbols=["<sep>", "foo"],
                         remove_extra_whitespaces=False),
}


@pytest.fixture(scope="session")
def lines():
    return corpus.lines(10000)


@pytest.fixture(scope="session")
def models(lines):
    """Each model trained once per session, on a quarter of the corpus."""
    train = [b.decode("utf-8", "replace") for b in lines[::4]]
    out = {}
    for name, opts in MODELS.items():
        f = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(train), model_writer=f, minloglevel=2,
            character_coverage=0.98, num_threads=1, **opts)
        out[name] = f.getvalue()
    return out


def sp_config(n):
    cfg = modelgen.config(vocab_size=n + 2, bos=None, eos=None, pad=None)
    cfg["tokenizer"] = {"type": "sentencepiece", "bos": 1, "eos": 2}
    return cfg


def load(db, name, model, rng):
    sp = spm.SentencePieceProcessor(model_proto=model)
    cfg = sp_config(sp.get_piece_size())
    db.execute("SELECT relattn_import(?, ?, NULL, ?)",
               (name, modelgen.safetensors(cfg, rng), model))
    return sp


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sentencepiece_exact_on_corpus(name, models, lines, rng):
    db = connect()
    db.text_factory = bytes
    sp = load(db, "s", models[name], rng)
    db.execute("CREATE TABLE corpus(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO corpus VALUES (?, CAST(? AS TEXT))",
                   enumerate(lines))
    got = db.execute("SELECT relattn_tokenize('s', body) FROM corpus "
                     "ORDER BY id").fetchall()
    assert len(got) == len(lines) >= 10000
    bad = []
    used = set()
    for i, ((g,), line) in enumerate(zip(got, lines)):
        ids = np.frombuffer(g, "<i4").tolist()
        used.update(ids)
        if ids != sp.encode(line):
            bad.append(i)
    assert not bad, (name, len(bad), [lines[i][:60] for i in bad[:3]])
    # the corpus reaches what the model has: unknown or byte pieces
    opts = MODELS[name]
    if opts.get("byte_fallback"):
        assert any(sp.is_byte(i) for i in used)
    else:
        assert sp.unk_id() in used
    # decode as sp.decode, every line (it inverts encode where sp's does)
    dec = db.execute("SELECT relattn_detokenize('s', relattn_tokenize('s', "
                     "body)) FROM corpus ORDER BY id").fetchall()
    for (d,), (g,), line in zip(dec, got, lines):
        assert d == sp.decode(np.frombuffer(g, "<i4").tolist()).encode(), line
    db.close()


def test_sentencepiece_pieces_by_hand(models, db, rng):
    sp = load(db, "s", models["unigram_user_bytes_1100"], rng)

    def tok(text):
        return np.frombuffer(db.execute("SELECT relattn_tokenize('s', ?)",
                                        (text,)).fetchone()[0], "<i4").tolist()
    sep = sp.piece_to_id("<sep>")
    assert sep in tok("a<sep>b")                 # user-defined: whole
    assert tok("  ") == [] and tok("") == []
    b = tok("\U0001F99C")                        # a parrot: four bytes
    assert [sp.id_to_piece(i) for i in b[-4:]] == ["<0xF0>", "<0x9F>", "<0xA6>",
                                                   "<0x9C>"]
    assert db.execute("SELECT relattn_detokenize('s', relattn_tokens(?))",
                      (json.dumps([sp.piece_to_id("<cls>")] + b),)
                      ).fetchone()[0] == "\U0001F99C"  # control: invisible


def test_sentencepiece_file_errors(db, rng, models):
    cfg = sp_config(2000)
    blob = modelgen.safetensors(cfg, rng)

    def err(model):
        with pytest.raises(sqlite3.OperationalError) as e:
            db.execute("SELECT relattn_import('s', ?, NULL, ?)", (blob, model))
        return str(e.value)
    assert err(b"\x0a\xff") == (
        "relattn_import: tokenizer.sentencepiece is not a SentencePiece model "
        "(malformed protobuf at byte 2)")
    assert err(b"") == "relattn_import: tokenizer.sentencepiece has no pieces"
    assert err(b"\x0a\x00") == (
        "relattn_import: tokenizer.sentencepiece: piece 0 is empty")
    assert err(b"\x0a\x03\x0a\x01a") == (
        "relattn_import: tokenizer.sentencepiece has no unknown piece")
    assert err(b"\x0a\x03\x0a\x01a\x0a\x03\x0a\x01a") == (
        "relattn_import: tokenizer.sentencepiece: piece 1 is defined twice")
    assert err(b"\x0a\x05\x0a\x01a\x18\x02\x12\x02\x18\x03") == (
        "relattn_import: tokenizer.sentencepiece: model_type 3 is not "
        "supported (only unigram and bpe)")
    assert err(b"\x0a\x05\x0a\x01a\x18\x09") == (
        "relattn_import: tokenizer.sentencepiece: piece 0 has an unknown "
        "type 9")
    m = models["unigram_nfkc_1000"]
    assert err(m[:len(m) // 2]).startswith(
        "relattn_import: tokenizer.sentencepiece is not a SentencePiece model")
    small = sp_config(10)
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_import('s', ?, NULL, ?)",
                   (modelgen.safetensors(small, rng), m))
    assert str(e.value) == ("relattn_import: the tokenizer has 1000 tokens, "
                            "more than vocab_size (12)")
    assert db.execute("SELECT count(*) FROM sqlite_schema WHERE name = "
                      "'relattn_model'").fetchone()[0] == 0


def varint(b, i):
    """(value, next index) of the protobuf varint at b[i]."""
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def put_varint(v):
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        out.append(c | (0x80 if v else 0))
        if not v:
            return bytes(out)


def mark_unused(model, pick):
    """The model with the pieces pick(index, piece) chooses made UNUSED
    (type 5): a protobuf rewrite of ModelProto's field 1 (SentencePiece:
    1 piece, 2 score, 3 type), the other fields copied as they are."""
    out, i, k = bytearray(), 0, 0
    while i < len(model):
        start = i
        key, i = varint(model, i)
        wire = key & 7
        if wire == 0:
            _, i = varint(model, i)
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            n, i = varint(model, i)
            body = model[i:i + n]
            i += n
            if key >> 3 == 1:
                fields, j, piece, typ = bytearray(), 0, b"", b""
                while j < len(body):
                    s0 = j
                    fk, j = varint(body, j)
                    if fk & 7 == 0:
                        _, j = varint(body, j)
                    elif fk & 7 == 5:
                        j += 4
                    else:
                        m, j = varint(body, j)
                        if fk >> 3 == 1:
                            piece = body[j:j + m]
                        j += m
                    if fk >> 3 != 3:
                        fields += body[s0:j]
                    else:
                        typ = body[s0:j]
                fields += b"\x18\x05" if pick(k, piece.decode()) else typ
                k += 1
                out += b"\x0a" + put_varint(len(fields)) + fields
                continue
        out += model[start:i]
    return bytes(out)


@pytest.mark.parametrize("name", ["bpe_nfkc_800", "unigram_nfkc_1000"])
def test_sentencepiece_unused_pieces(name, models, lines, rng):
    """Pieces marked unused: unigram never picks them, BPE splits them back
    into the pair it merged them from (resegment), as sp.encode does."""
    sp0 = spm.SentencePieceProcessor(model_proto=models[name])
    model = mark_unused(models[name], lambda k, p: (
        len(p) >= 2 and not sp0.is_control(k) and not sp0.is_unknown(k)
        and k % 3 == 0))
    db = connect()
    db.text_factory = bytes
    sp = load(db, "s", model, rng)
    assert sum(sp.is_unused(i) for i in range(sp.get_piece_size())) > 50
    assert sp.get_piece_size() == sp0.get_piece_size()
    db.execute("CREATE TABLE corpus(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO corpus VALUES (?, CAST(? AS TEXT))",
                   enumerate(lines[::3]))
    got = db.execute("SELECT relattn_tokenize('s', body) FROM corpus "
                     "ORDER BY id").fetchall()
    bad = [i for i, ((g,), line) in enumerate(zip(got, lines[::3]))
           if np.frombuffer(g, "<i4").tolist() != sp.encode(line)]
    assert not bad, (name, len(bad))
    db.close()


@pytest.mark.parametrize("name", ["unigram_nfkc_1000",
                                  "unigram_user_bytes_1100",
                                  "unigram_keep_spaces_800", "bpe_user_600"])
def test_sentencepiece_decode_leading_spaces(name, models, rng):
    """relattn_detokenize equal to sp.decode on random id sequences that
    start with runs of '▁' (and pieces starting with it, control, unknown
    and byte pieces among them): the leading '▁'s sp.decode drops depend
    on remove_extra_whitespaces (all of them until the text is non-empty)
    and add_dummy_prefix (the first one); the models cover both on, only
    add_dummy_prefix (bpe_user_600) and neither (unigram_keep_spaces_800)."""
    db = connect()
    db.text_factory = bytes
    sp = load(db, "s", models[name], rng)
    n = sp.get_piece_size()
    ws = sp.piece_to_id("▁")
    assert not sp.is_unknown(ws)
    lead = [i for i in range(n) if sp.id_to_piece(i).startswith("▁")]
    odd = [i for i in range(n) if sp.is_control(i) or sp.is_unknown(i)
           or sp.is_byte(i)]
    seqs = [[ws, ws, sp.piece_to_id("▁the")]]
    for _ in range(3000):
        seq = []
        for _ in range(int(rng.integers(0, 8))):
            r = rng.random()
            seq.append(ws if r < 0.45 else
                       int(rng.choice(odd)) if r < 0.6 else
                       int(rng.choice(lead)) if r < 0.85 else
                       int(rng.integers(0, n)))
        seqs.append(seq)
    got = [db.execute("SELECT relattn_detokenize('s', ?)",
                      (np.asarray(s, "<i4").tobytes(),)).fetchone()[0]
           for s in seqs]
    bad = [(s, g, sp.decode(s)) for s, g in zip(seqs, got)
           if g != sp.decode(s).encode()]
    assert not bad, (len(bad), bad[:3])
    if name == "unigram_nfkc_1000":  # both on: every leading '▁' dropped
        assert got[0] == b"the"
    db.close()
