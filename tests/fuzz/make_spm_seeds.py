"""Writes the seeds of tests/fuzz/fuzz_spm.c (run from the repository root:
/usr/bin/python3 tests/fuzz/make_spm_seeds.py; needs python3-sentencepiece):
small unigram and BPE models, with and without byte fallback and
user-defined pieces, with a small normalization map of their own (the
nmt_nfkc one is too big for a fuzzer input), each with a short text; and
the unigram ones as a Unigram tokenizer.json is stored (ext/hf_tokjson.c:
extension field 777, every normalizer, pre-tokenizer and decoder kind,
added tokens)."""
import io
import pathlib
import re
import struct
import tempfile

import sentencepiece as spm

OUT = pathlib.Path(__file__).resolve().parent / "corpus" / "spm"
TEXTS = ["Hello wörld  ｆｕｌｌ width", "  Ωμέγα и кириллица 中文 🎉\t",
         "ABC<sep>def foo\x00\x7f", "\xff"]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*"):
        old.unlink()
    train = (pathlib.Path("/usr/share/common-licenses/GPL-3").read_text()
             .splitlines()[:300] + TEXTS * 3)
    with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
        f.write("41\t61\n42\t62\nFF21\t41\n3000\t20\n2460\t31\n")  # A>a, B>b, ...
        rules = f.name
    k = 0
    for model_type in ("unigram", "bpe"):
        for bf in (False, True):
            for norm in ("identity", "rules"):
                m = io.BytesIO()
                kw = ({"normalization_rule_tsv": rules} if norm == "rules"
                      else {"normalization_rule_name": "identity"})
                spm.SentencePieceTrainer.train(
                    sentence_iterator=iter(train), model_writer=m,
                    vocab_size=400 if bf else 200, model_type=model_type,
                    byte_fallback=bf, minloglevel=2, character_coverage=1.0,
                    user_defined_symbols=["<sep>", "foo"], **kw)
                text = TEXTS[k % len(TEXTS)].encode("utf-8", "surrogateescape")
                if TEXTS[k % len(TEXTS)] == "\xff":
                    text = b"ab\xff\xc3"
                blob = struct.pack("<H", len(text)) + text + m.getvalue()
                (OUT / f"{model_type}_{'bytes' if bf else 'nobytes'}_{norm}").write_bytes(blob)
                if model_type == "unigram":
                    hf = hf_model(m.getvalue(), bf)
                    blob = struct.pack("<H", len(text)) + text + hf
                    (OUT / f"hf_{'bytes' if bf else 'nobytes'}_{norm}").write_bytes(blob)
                k += 1


def _var(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def _int(num, v):
    return _var(num << 3) + _var(v)


def _bytes(num, b):
    return _var(num << 3 | 2) + _var(len(b)) + b


def _step(kind, a=None, b=None, x=0, y=0):
    m = _int(1, kind)
    if a is not None:
        m += _bytes(2, a)
    if b is not None:
        m += _bytes(3, b)
    if x:
        m += _int(4, x)
    if y:
        m += _int(5, y)
    return m


def _charsmap(model):
    """normalizer_spec (3).precompiled_charsmap (2) of a ModelProto."""
    i = 0
    while i < len(model):
        key, i = _read_var(model, i)
        if key & 7 == 0:
            _, i = _read_var(model, i)
        elif key & 7 == 2:
            n, i = _read_var(model, i)
            if key >> 3 == 3:
                sub, j = model[i:i + n], 0
                while j < len(sub):
                    k2, j = _read_var(sub, j)
                    if k2 & 7 == 2:
                        n2, j = _read_var(sub, j)
                        if k2 >> 3 == 2:
                            return sub[j:j + n2]
                        j += n2
                    elif k2 & 7 == 0:
                        _, j = _read_var(sub, j)
                    elif k2 & 7 == 5:
                        j += 4
                    else:
                        j += 8
            i += n
        elif key & 7 == 5:
            i += 4
        else:
            i += 8
    return b""


def _read_var(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def hf_model(model, bf):
    """The ModelProto ext/hf_tokjson.c stores for a Unigram tokenizer.json
    of this model's pieces: pieces, trainer_spec, field 777."""
    sp = spm.SentencePieceProcessor(model_proto=model)
    n = sp.get_piece_size()
    out = b""
    for i in range(n):
        p = _bytes(1, sp.id_to_piece(i).encode()) + _var(2 << 3 | 5) + \
            struct.pack("<f", sp.get_score(i)) + _int(3, 2 if i == sp.unk_id() else 1)
        out += _bytes(1, p)
    out += _bytes(2, _int(3, 1) + (_int(35, 1) if bf else b""))
    meta = "\u2581".encode()
    pipe = b"".join(_bytes(1, s) for s in (
        _step(1, _charsmap(model)), _step(6), _step(7), _step(4, x=1, y=1),
        _step(3, b" ", b" ", x=2), _step(2, b"a", b"b"), _step(5)))
    pipe += b"".join(_bytes(2, s) for s in (_step(2), _step(1, meta, x=1, y=1)))
    pipe += b"".join(_bytes(3, s) for s in (
        _step(3), _step(1, meta, x=2), _step(2, meta, b" "), _step(4),
        _step(5, b" ", x=1, y=1)))
    pipe += _bytes(4, b"".join(struct.pack("<d", sp.get_score(i)) for i in range(n)))
    pipe += _bytes(5, _int(1, 0) + _bytes(2, sp.id_to_piece(0).encode()) + _int(3, 5))
    pipe += _bytes(5, _int(1, n) + _bytes(2, b"<new>") + _int(3, 2))
    pipe += _int(6, sp.unk_id())
    return out + _bytes(777, pipe)


if __name__ == "__main__":
    main()
