"""A Hugging Face DeBERTa-v3 or T5 checkpoint imported with its
SentencePiece spm.model / spiece.model and tokenizer_config.json
(docs/reference.md, "SentencePiece") gives the ids AutoTokenizer gives:
Hugging Face's Rust `tokenizers` running the tokenizer.json transformers'
DebertaV2Converter / T5Converter builds from those files. The library side
here is npm `tokenizers` 0.23.2 (tests/node/hf_tokenize.mjs) given that
tokenizer.json, written by tests/hf/checkpoints.py's unigram_tokenizer_json
from convert_slow_tokenizer.py's rules; the relattn side never sees it.
0 differing lines on a multilingual corpus (tests/tok/corpus.py) and
hostile strings, and relattn_detokenize equals the library's
decode(ids, skip_special_tokens=True). A line where python3-sentencepiece and
the library part (a unigram tie the library breaks in double) shows the
import follows the library.

The comparisons need Node 20 or newer and npm (skipped, saying why,
without them); the tie, the refusals and the stored pipeline do not."""
import copy
import json
import pathlib
import sqlite3
import struct
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "hf"))
sys.path.insert(0, str(HERE.parent / "tok"))
import checkpoints  # noqa: E402
import corpus  # noqa: E402
from conftest import connect  # noqa: E402
from test_tokenizer_json import library_ids, node_ready, weights  # noqa: E402
from test_tokenizer_json_unigram import EXTRA, library_decode, lower_deberta  # noqa: E402


def import_spm(db, ck, tok_bytes=None, tok_config=None, name="m"):
    conf = ck.tok_config if tok_config is None else tok_config
    return db.execute("SELECT relattn_import(?, ?, ?, ?, ?)",
                      (name, weights(ck), json.dumps(ck.config),
                       ck.tok_bytes if tok_bytes is None else tok_bytes,
                       None if conf == "none" else json.dumps(conf))).fetchone()[0]


def model_ids(db, raw, name="m"):
    return [json.loads(db.execute(
        "SELECT relattn_tokens_json(relattn_tokenize(?, CAST(? AS TEXT)))",
        (name, b)).fetchone()[0]) for b in raw]


def t5_without_decoder(tok_config):
    """An older T5 tokenizer_config.json (no added_tokens_decoder):
    T5Tokenizer then makes each <extra_id_N> an AddedToken with lstrip and
    rstrip true (tokenization_t5.py), which is what the converter's file
    then carries."""
    conf = {k: v for k, v in tok_config.items() if k != "added_tokens_decoder"}
    lib = copy.deepcopy(tok_config)
    for v in lib["added_tokens_decoder"].values():
        if v["content"].startswith("<extra_id_"):
            v["lstrip"] = v["rstrip"] = True
    return conf, lib


def shipped_deberta(tok_config):
    """deberta-v3-base's own tokenizer_config.json: [MASK] is added by the
    tokenizer at the number of the pieces (400 here), special, no strip."""
    return ({"do_lower_case": False, "vocab_type": "spm"},
            {"added_tokens_decoder": {"400": {"content": "[MASK]"}}})


def lower(tok_config):
    conf = dict(tok_config, do_lower_case=True)
    return conf, conf


# variant: (family, legacy for the converter, edit of tokenizer_config
# -> (relattn's config, the converter's config), edit of the library's file)
VARIANTS = {
    "deberta-saved": ("deberta", True, None, None),
    "deberta-shipped": ("deberta", True, shipped_deberta, None),
    "deberta-lower": ("deberta", True, lower, lower_deberta),
    "t5-legacy": ("t5", True, None, None),
    "t5-not-legacy": ("t5", False, lambda c: (dict(c, legacy=False),) * 2, None),
    "t5-no-decoder": ("t5", True, t5_without_decoder, None),
}


def checkpoint(tmp_path, rng, family):
    if family == "deberta":
        return checkpoints.deberta(tmp_path / family, rng, "DebertaV2Model")
    return checkpoints.t5(tmp_path / family, rng, "T5EncoderModel")


@pytest.mark.parametrize("variant", VARIANTS)
def test_ids_and_text_equal_the_librarys(tmp_path, rng, variant):
    reason = node_ready()
    if reason:
        pytest.skip(reason)
    family, legacy, conf_edit, doc_edit = VARIANTS[variant]
    ck = checkpoint(tmp_path, rng, family)
    conf, lib_conf = conf_edit(ck.tok_config) if conf_edit else (ck.tok_config,) * 2
    doc = checkpoints.unigram_tokenizer_json(ck.tok_bytes, family, lib_conf,
                                             legacy=legacy)
    if doc_edit:
        doc_edit(doc)
    lines = corpus.lines(4000, generated=1500)
    texts = [b.decode("utf-8", "replace") for b in lines] + EXTRA + ["[mask] [MASK]"]
    raw = lines + [t.encode("utf-8") for t in EXTRA + ["[mask] [MASK]"]]
    db = connect()
    assert import_spm(db, ck, tok_config=conf) > 0
    tok = json.loads(db.execute("SELECT config FROM relattn_model").fetchone()[0])["tokenizer"]
    assert tok["type"] == "sentencepiece" and "split_special" not in tok
    pre = [] if family == "t5" else [tok["bos"]]
    want = library_ids(tmp_path, doc, texts)
    got = [pre + ids + [tok["append"]] for ids in model_ids(db, raw)]
    differ = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    print(f"{variant}: {len(differ)} of {len(texts)} lines differ")
    assert differ == [], differ[:5]
    want_text = library_decode(tmp_path, doc, got)
    got_text = [db.execute("SELECT relattn_detokenize('m', relattn_tokens(?))",
                           (json.dumps(ids),)).fetchone()[0] for ids in got]
    differ = [(g, w) for g, w in zip(got_text, want_text) if g != w]
    print(f"decode: {len(differ)} of {len(got)} differ")
    assert differ == [], differ[:5]
    db.close()


def _pb_piece(piece, score):
    """A ModelProto's SentencePiece message (field 1): piece, score."""
    body = b"\x0a" + bytes([len(piece)]) + piece + b"\x15" + struct.pack("<f", score)
    return b"\x0a" + bytes([len(body)]) + body


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def test_a_unigram_tie_follows_the_library(tmp_path, rng):
    """Where python3-sentencepiece and the library differ, the import gives
    the library's ids. Pieces 'ǫ' (-1), 'ǭ' (c) and 'ǫǭ' (the float32 of
    -1 + c) appended to the T5 model tie in float32, and sentencepiece
    keeps 'ǫǭ'; in double, -1 + c is the higher, and the library (models/
    unigram/model.rs sums in f64) takes 'ǫ' 'ǭ'. A T5 checkpoint's vocab
    grows by the three pieces, its sentinels after them."""
    import numpy as np
    import sentencepiece as spm
    ck = checkpoints.t5(tmp_path / "t5", rng, "T5EncoderModel")
    n = ck._spm().get_piece_size()
    a, b = "\u01eb", "\u01ed"
    s0 = ck._spm().get_score(ck._spm().piece_to_id("\u2581"))

    def with_pieces(c):
        return (ck.tok_bytes + _pb_piece(a.encode(), -1.0) + _pb_piece(b.encode(), c)
                + _pb_piece((a + b).encode(), _f32(-1.0 + c)))
    # the first c whose tie sentencepiece gives to 'ǫǭ' and the library's
    # double sums (the '▁' in front included) to 'ǫ' 'ǭ'
    for k in range(1, 1000):
        c = _f32(-1.1 - k * 1e-7)
        if s0 + -1.0 + c > s0 + _f32(-1.0 + c):
            model = with_pieces(c)
            sp_ids = spm.SentencePieceProcessor(model_proto=model).encode(a + b)
            if sp_ids[-1] == n + 2:
                break
    assert sp_ids[-1] == n + 2, sp_ids        # sentencepiece: 'ǫǭ'
    ck.config["vocab_size"] += 3
    emb = ck.params["shared.weight"]
    ck.params["shared.weight"] = np.concatenate(
        [emb, rng.uniform(-1, 1, (3, emb.shape[1])).astype(np.float32)])
    conf = dict(ck.tok_config)
    conf["added_tokens_decoder"] = {
        str(int(k) + 3 if int(k) >= n else int(k)): v
        for k, v in ck.tok_config["added_tokens_decoder"].items()}
    db = connect()
    assert import_spm(db, ck, tok_bytes=model, tok_config=conf) > 0
    got = model_ids(db, [(a + b).encode()])[0]
    assert got == sp_ids[:-1] + [n, n + 1], (got, sp_ids)
    if node_ready() is None:
        doc = checkpoints.unigram_tokenizer_json(model, "t5", conf)
        assert library_ids(tmp_path, doc, [a + b]) == [got + [1]]
    db.close()


def test_stored_pipeline_and_refusals(tmp_path, rng):
    """The stored file is the spm.model with the converter's pipeline
    (field 777) and T5's sentinels as pieces; what the fast tokenizer
    would do otherwise is refused, naming the argument, nothing stored."""
    ck = checkpoints.t5(tmp_path / "t5", rng, "T5EncoderModel")
    db = connect()
    assert import_spm(db, ck) > 0
    blob = db.execute("SELECT data FROM relattn_tensor WHERE model = 'm' AND "
                      "name = 'tokenizer.sentencepiece'").fetchone()[0]
    assert blob[:len(ck.tok_bytes)] == ck.tok_bytes and len(blob) > len(ck.tok_bytes)
    fields = checkpoints._pb_fields(blob)
    assert any(num == 777 for num, _, _ in fields)
    pieces = [v for num, w, v in fields if num == 1]
    n = ck._spm().get_piece_size()
    assert len(pieces) == n + 4
    # <extra_id_0> is the last id, matched before the text is normalized
    ids = model_ids(db, ["a <extra_id_0> b".encode()])[0]
    assert n + 3 in ids
    cases = [
        (dict(ck.tok_config, extra_ids=99),
         f"relattn_import: the tokenizer's 99 <extra_id_N> pieces (extra_ids) end at id "
         f"{n + 98}, past the model's vocab_size {ck.config['vocab_size']}"),
        ({**ck.tok_config, "added_tokens_decoder": {
            **ck.tok_config["added_tokens_decoder"],
            "2": {"content": "<nope>", "special": True}}},
         "relattn_import: tokenizer_config_json: added_tokens_decoder '2' ('<nope>') is not "
         "the tokenizer's piece 2"),
        ({**ck.tok_config, "added_tokens_decoder": {
            **ck.tok_config["added_tokens_decoder"],
            "1": {"content": "</s>", "normalized": True}}},
         "relattn_import: tokenizer_config_json: added_tokens_decoder '1' ('</s>') with "
         "normalized true is not supported"),
        ({**ck.tok_config, "added_tokens_decoder": {
            **ck.tok_config["added_tokens_decoder"],
            "500": {"content": "<new>"}}},
         "relattn_import: tokenizer_config_json: added_tokens_decoder '500' ('<new>') is not "
         "at id 404, where the fast tokenizer adds it"),
    ] + [(dict(ck.tok_config, added_tokens_decoder=bad),
          "relattn_import: tokenizer_config_json: added_tokens_decoder must be an object "
          "of objects ({\"<id>\": {\"content\": ...}})")
         for bad in ({"0": "x"}, ["c2p"], 3)]
    for conf, msg in cases:
        with pytest.raises(sqlite3.OperationalError) as e:
            import_spm(db, ck, tok_config=conf, name="x")
        assert str(e.value) == msg
    assert db.execute("SELECT count(*) FROM relattn_model WHERE name = 'x'").fetchone()[0] == 0
    db.close()



def library_offsets(tmp_path, doc, texts):
    """Each text's tokens' offsets from the library (in characters)."""
    import os
    import subprocess
    from test_tokenizer_json import NODE_DIR
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc))
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run(["node", str(NODE_DIR / "hf_tokenize.mjs"),
                        str(tmp_path / "tokenizer.json"), str(tmp_path / "texts.json"),
                        "offsets"], capture_output=True, text=True, timeout=1800, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("lower_case", [False, True])
def test_offsets_equal_the_librarys(tmp_path, rng, lower_case):
    """relattn_token_labels' offsets (aggregation none, nothing ignored: a
    row a token) are the library's offset_mapping for each token: the
    alignments its normalizers, Metaspace and model carry (the prepended
    '▁' takes the first character's, a collapsed run of spaces its last
    space's, a grapheme Precompiled replaces its characters' in order)."""
    reason = node_ready()
    if reason:
        pytest.skip(reason)
    ck = checkpoints.deberta(tmp_path / "d", rng, "DebertaV2ForTokenClassification")
    conf = dict(ck.tok_config, do_lower_case=lower_case)
    doc = checkpoints.unigram_tokenizer_json(ck.tok_bytes, "deberta", conf)
    if lower_case:
        lower_deberta(doc)
    texts = []
    for b in corpus.lines(1500, generated=500):
        try:
            texts.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    texts += [t for t in EXTRA if "[" not in t and "<" not in t]
    texts = [t for t in texts if t.strip()]
    db = connect()
    assert import_spm(db, ck, tok_config=conf) > 0
    want = library_offsets(tmp_path, doc, texts)
    differ = []
    for text, w in zip(texts, want):
        rows = db.execute("SELECT token_index, start, \"end\" FROM "
                          "relattn_token_labels('m', ?, 'none', '[]')", (text,)).fetchall()
        got = [(i, s, e) for i, s, e in rows]
        exp = [(i, w[i][0], w[i][1]) for i, _, _ in rows]
        if got != exp or not rows:
            k = next((k for k, (g, x) in enumerate(zip(got, exp)) if g != x), 0)
            differ.append((text, got[max(0, k - 2):k + 3], exp[max(0, k - 2):k + 3]))
    print(f"offsets: {len(differ)} of {len(texts)} lines differ")
    assert differ == [], differ[:3]
    db.close()
