"""Writes the seeds of tests/fuzz/fuzz_spm.c (run from the repository root:
/usr/bin/python3 tests/fuzz/make_spm_seeds.py; needs python3-sentencepiece):
small unigram and BPE models, with and without byte fallback and
user-defined pieces, with a small normalization map of their own (the
nmt_nfkc one is too big for a fuzzer input), each with a short text."""
import io
import pathlib
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
                k += 1


if __name__ == "__main__":
    main()
