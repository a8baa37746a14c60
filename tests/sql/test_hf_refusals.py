"""relattn_import of Hugging Face checkpoints (docs/reference.md, Hugging
Face checkpoints): what it refuses, with the exact messages, before it
stores anything; the tiny HF-layout checkpoints come from
tests/hf/checkpoints.py (HF's tensor names and config.json keys)."""
import json
import pathlib
import sqlite3
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "hf"))
import checkpoints  # noqa: E402
from conftest import connect  # noqa: E402
import safetensors_py  # noqa: E402


def weights(ck, params=None, buffers=None):
    tensors = dict(ck.params if params is None else params)
    for k, v in (ck.buffers if buffers is None else buffers).items():
        tensors[k] = checkpoints.i64(v)
    return safetensors_py.write(tensors, metadata={"format": "pt"})


def run(db, ck, config=None, params=None, tok=..., tok_config=...,
        buffers=None):
    cfg = dict(ck.config) if config is None else config
    return db.execute(
        "SELECT relattn_import('m', ?, ?, ?, ?)",
        (weights(ck, params, buffers), json.dumps(cfg),
         ck.tok_bytes if tok is ... else tok,
         json.dumps(ck.tok_config) if tok_config is ... else tok_config)
    ).fetchone()[0]


def refused(db, ck, message, **kw):
    with pytest.raises(sqlite3.OperationalError) as e:
        run(db, ck, **kw)
    assert str(e.value) == message
    # nothing stored: no tables, or no row
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = "
                      "'relattn_model'").fetchone()[0] == 0


@pytest.fixture
def bert(tmp_path, rng):
    return checkpoints.bert(tmp_path / "bert", rng,
                            "BertForSequenceClassification", "relative_key")


@pytest.fixture
def deberta(tmp_path, rng):
    return checkpoints.deberta(tmp_path / "deberta", rng,
                               "DebertaV2ForSequenceClassification")


@pytest.fixture
def t5(tmp_path, rng):
    return checkpoints.t5(tmp_path / "t5", rng, "T5EncoderModel")


def with_keys(ck, **kw):
    cfg = json.loads(json.dumps(ck.config))
    for k, v in kw.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def test_unknown_model_type(db, bert):
    refused(db, bert, "relattn_import: model_type 'roberta' is not "
            "supported; the known ones are bert (relative_key, "
            "relative_key_query), deberta-v2, t5 and mt5",
            config=with_keys(bert, model_type="roberta"))


@pytest.mark.parametrize("value", ["absolute", None])
def test_bert_absolute_positions(db, bert, value):
    """absent is HF's default, absolute"""
    refused(db, bert, "relattn_import: BERT with absolute positions is not "
            "a relative-position model",
            config=with_keys(bert, position_embedding_type=value))


def test_bert_other_refusals(db, bert):
    refused(db, bert, "relattn_import: position_embedding_type 'rotary' is "
            "not supported (relative_key, relative_key_query)",
            config=with_keys(bert, position_embedding_type="rotary"))
    refused(db, bert, "relattn_import: hidden_act 'silu' is not supported "
            "(gelu, gelu_new, gelu_pytorch_tanh, relu)",
            config=with_keys(bert, hidden_act="silu"))
    refused(db, bert, "relattn_import: architectures[0] "
            "'BertForQuestionAnswering' is not supported; the known ones "
            "are BertModel, BertForMaskedLM, BertForSequenceClassification and "
            "BertForTokenClassification",
            config=with_keys(bert, architectures=["BertForQuestionAnswering"]))
    refused(db, bert, "relattn_import: is_decoder true (a causal BERT) is "
            "not supported", config=with_keys(bert, is_decoder=True))
    refused(db, bert, "relattn_import: config_json: 'hidden_size' must be an "
            "integer, not text", config=with_keys(bert, hidden_size="32"))
    refused(db, bert, "relattn_import: config_json: id2label must map the "
            "ids 0 to 2 to strings, not '7'",
            config=with_keys(bert, id2label={"0": "a", "1": "b", "7": "c"}))


@pytest.mark.parametrize("key,value,message", [
    ("conv_kernel_size", 3, "DeBERTa's ConvLayer (conv_kernel_size 3) is not "
     "supported"),
    ("embedding_size", 16, "DeBERTa with embedding_size (16) other than "
     "hidden_size (32) is not supported (its embed_proj)"),
    ("pos_att_type", ["c2p"], "DeBERTa with pos_att_type 'c2p' is not "
     "supported (only c2p and p2c together)"),
    ("pos_att_type", "p2c|c2p|p2p", "DeBERTa with pos_att_type 'p2c|c2p|p2p' "
     "is not supported (only c2p and p2c together)"),
    ("share_att_key", False, "DeBERTa with share_att_key false (its "
     "pos_key_proj and pos_query_proj) is not supported"),
    ("share_att_key", None, "DeBERTa with share_att_key false (its "
     "pos_key_proj and pos_query_proj) is not supported"),
    ("position_biased_input", True, "DeBERTa with position_biased_input (its "
     "absolute positions) is not supported"),
    ("relative_attention", False, "DeBERTa without relative_attention is not "
     "a relative-position model"),
    ("norm_rel_ebd", "layer_norm|batch", "DeBERTa with norm_rel_ebd "
     "'layer_norm|batch' is not supported (none, layer_norm)"),
    ("pooler_hidden_act", "mish", "pooler_hidden_act 'mish' is not supported "
     "(gelu, gelu_new, gelu_pytorch_tanh, relu, tanh)"),
])
def test_deberta_refusals(db, deberta, key, value, message):
    refused(db, deberta, "relattn_import: " + message,
            config=with_keys(deberta, **{key: value}))


def test_t5_refusals(db, t5, tmp_path, rng):
    # d_kv * num_heads other than d_model is the native d_head
    # (tests/hf/test_hf_import.py): the tensors must follow it
    refused(db, t5, "relattn_import: tensor 'encoder.block.0.layer.0."
            "SelfAttention.q.weight' has shape [32,32]; the config needs [64,32]",
            config=with_keys(t5, d_kv=16))
    refused(db, t5, "relattn_import: config_json: 'd_kv' must be between 1 and "
            "16777216, not 0", config=with_keys(t5, d_kv=0))
    refused(db, t5, "relattn_import: config_json: 'd_kv' * 'num_heads' "
            "(8388608 * 4) must be at most 16777216",
            config=with_keys(t5, d_kv=1 << 23))
    refused(db, t5, "relattn_import: feed_forward_proj 'gated-silu' is not "
            "supported (relu, gated-gelu, gated-relu, gelu_new)",
            config=with_keys(t5, feed_forward_proj="gated-silu"))
    refused(db, t5, "relattn_import: architectures[0] 'T5ForQuestionAnswering'"
            " is not supported; the known ones are T5EncoderModel, "
            "T5ForConditionalGeneration and T5Model (its encoder)",
            config=with_keys(t5, architectures=["T5ForQuestionAnswering"]))
    # the decoder's tensors are left out only for the whole model's class
    whole = checkpoints.t5(tmp_path / "whole", rng, "T5ForConditionalGeneration")
    refused(db, whole, "relattn_import: tensor 'decoder.block.0.layer.0."
            "SelfAttention.q.weight' is not part of a t5 checkpoint that "
            "relattn knows (T5EncoderModel)",
            config=with_keys(whole, architectures=["T5EncoderModel"]))


def test_unknown_tensors_are_named(db, bert):
    p = dict(bert.params)
    p["bert.encoder.layer.0.attention.self.rotary.weight"] = np.ones((2, 2), np.float32)
    refused(db, bert, "relattn_import: tensor 'bert.encoder.layer.0.attention."
            "self.rotary.weight' is not part of a bert checkpoint that "
            "relattn knows (BertForSequenceClassification)", params=p)
    # a layer the config does not have
    p = dict(bert.params)
    p["bert.encoder.layer.2.output.dense.bias"] = np.ones(32, np.float32)
    refused(db, bert, "relattn_import: tensor 'bert.encoder.layer.2.output."
            "dense.bias' is not part of a bert checkpoint that relattn knows "
            "(BertForSequenceClassification)", params=p)
    # one tensor under two names
    p = dict(bert.params)
    p["embeddings.word_embeddings.weight"] = p["bert.embeddings.word_embeddings.weight"]
    refused(db, bert, "relattn_import: tensors 'bert.embeddings.word_"
            "embeddings.weight' and 'embeddings.word_embeddings.weight' are "
            "both 'tok_emb'", params=p)
    # an integer tensor where a weight goes
    p = dict(bert.params)
    name = "bert.encoder.layer.1.output.dense.bias"
    del p[name]
    refused(db, bert, f"relattn_import: tensor '{name}' has dtype 'I64'; "
            "expected F32, F16 or BF16", params=p,
            buffers={name: np.arange(32)})


def test_tokenizer_refusals(db, bert, deberta, t5):
    refused(db, bert, "relattn_import: a bert checkpoint needs its "
            "tokenizer's file (vocab.txt) as tokenizer_blob", tok=None)
    refused(db, deberta, "relattn_import: a deberta-v2 checkpoint needs its "
            "tokenizer's file (spm.model) as tokenizer_blob", tok=None)
    vocab = bert.tok_bytes.replace(b"[CLS]\n", b"[CLX]\n")
    tc = {k: v for k, v in bert.tok_config.items() if k != "added_tokens_decoder"}
    refused(db, bert, "relattn_import: the tokenizer has no '[CLS]' token "
            "(cls_token)", tok=vocab, tok_config=json.dumps(tc))
    tc = dict(bert.tok_config, cls_token="<cls>")
    refused(db, bert, "relattn_import: the tokenizer has no '<cls>' token "
            "(cls_token)", tok_config=json.dumps(tc))
    # (DeBERTa's converter lower-cases: tests/sql/test_tokenizer_spm_hf.py)
    tc = dict(t5.tok_config, do_lower_case=True)
    refused(db, t5, "relattn_import: tokenizer_config_json: "
            "do_lower_case true is not supported with a SentencePiece "
            "tokenizer", tok_config=json.dumps(tc))
    refused(db, deberta, "relattn_import: tokenizer_config_json is not a "
            "JSON object", tok_config="[1]")
    # the shipped deberta-v3 tokenizer_config: the tokenizer adds [MASK]
    # after the spm.model's pieces, a row the embeddings must have
    n = deberta.n_pieces
    p = dict(deberta.params)
    p["deberta.embeddings.word_embeddings.weight"] = \
        p["deberta.embeddings.word_embeddings.weight"][:n]
    refused(db, deberta, "relattn_import: the tokenizer adds '[MASK]' "
            f"(mask_token) at id {n}, past the model's vocab_size {n}",
            config=with_keys(deberta, vocab_size=n), params=p,
            tok_config='{"do_lower_case": false, "vocab_type": "spm"}')
    tc = dict(deberta.tok_config, split_by_punct=True)
    refused(db, deberta, "relattn_import: tokenizer_config_json: "
            "split_by_punct true is not supported", tok_config=json.dumps(tc))
    tc = dict(bert.tok_config, do_basic_tokenize=False)
    refused(db, bert, "relattn_import: tokenizer_config_json: "
            "do_basic_tokenize false is not supported",
            tok_config=json.dumps(tc))
    # split_by_punct false, Hugging Face's default, imports
    tc = dict(deberta.tok_config, split_by_punct=False)
    assert run(db, deberta, tok_config=json.dumps(tc)) > 0


NUL = " holds a NUL character (\\u0000), which relattn does not accept"


def test_strings_with_nul_are_refused(db, bert, deberta):
    """JSON's \\u0000 in a string of config.json or tokenizer_config.json:
    SQLite before 3.45 cuts the string there ('a\\u0000b' would be the
    label 'a', '[CLS]\\u0000x' the token [CLS]), so it is refused, named."""
    pre = "relattn_import: config_json: "
    labels = {"0": "x", "1": "a\0b", "2": "y"}
    refused(db, bert, pre + "label 1 of id2label" + NUL,
            config=with_keys(bert, id2label=labels))
    refused(db, bert, pre + "'model_type'" + NUL,
            config=with_keys(bert, model_type="bert\0x"))
    refused(db, bert, pre + "'architectures[0]'" + NUL,
            config=with_keys(bert, architectures=["BertForSequenceClassification\0"]))
    refused(db, bert, pre + "'position_embedding_type'" + NUL,
            config=with_keys(bert, position_embedding_type="relative_key\0"))
    refused(db, bert, pre + "'hidden_act'" + NUL,
            config=with_keys(bert, hidden_act="gelu\0"))
    refused(db, bert, pre + "'problem_type'" + NUL,
            config=with_keys(bert, problem_type="regression\0"))
    refused(db, deberta, pre + "'pos_att_type'" + NUL,
            config=with_keys(deberta, pos_att_type="p2c|c2p\0"))
    refused(db, deberta, pre + "'pos_att_type'" + NUL,
            config=with_keys(deberta, pos_att_type=["p2c", "c2p\0"]))
    tpre = "relattn_import: tokenizer_config_json: "
    tc = dict(bert.tok_config, cls_token="[CLS]\0x")
    refused(db, bert, tpre + "'cls_token'" + NUL, tok_config=json.dumps(tc))
    tc = dict(deberta.tok_config, sep_token={"content": "[SEP]\0"})
    refused(db, deberta, tpre + "'sep_token'" + NUL, tok_config=json.dumps(tc))
    # [PAD] is id 0 of spm.model; its added_tokens_decoder entry gives the text
    tc = json.loads(json.dumps(deberta.tok_config))
    tc["added_tokens_decoder"]["0"]["content"] = "[PAD]\0"
    refused(db, deberta, tpre + "the content of added_tokens_decoder '0'" + NUL,
            tok_config=json.dumps(tc))
    # a backslash before u0000 is text, kept whole
    names = ["a\\u0000b", "\\", "\\\\u0000"]
    assert run(db, bert, config=with_keys(
        bert, id2label={str(i): n for i, n in enumerate(names)})) > 0
    assert [r[0] for r in db.execute(
        "SELECT label FROM relattn_labels('m', 'x')")] == names


def test_tokenizer_file_kind(db, bert, deberta):
    """The tokenizer_blob's kind comes from its structure: a vocab.txt
    whose first line is empty is a vocab.txt (BertTokenizer's load_vocab
    reads that line as the token '' at id 0), not a SentencePiece model
    for its first byte 0x0a; a tokenizer.json is read as one (its model
    named when relattn has none like it: tests/sql/test_tokenizer_json.py); bytes
    of no kind are read as the family's own file, whose parser says where
    they break."""
    sys.path.insert(0, str(HERE.parent / "tok"))
    import bert_ref
    vocab = b"\n" + bert.tok_bytes.split(b"\n", 1)[1]  # [PAD]'s line empty
    assert run(db, bert, tok=vocab) > 0
    cfg = json.loads(db.execute("SELECT config FROM relattn_model").fetchone()[0])
    assert cfg["tokenizer"]["type"] == "wordpiece"
    assert cfg["tokenizer"]["do_lower_case"] is True
    ref = bert_ref.Bert(vocab)
    assert ref.vocab[""] == 0
    for text in ["Hello, worlds!", "the CAT sat [MASK] on", "un able"]:
        got = db.execute("SELECT relattn_tokens_json(relattn_tokenize('m', ?))",
                         (text,)).fetchone()[0]
        assert json.loads(got) == ref.encode(text), text
    db = connect()  # the refusals: nothing stored
    tj = json.dumps({"version": "1.0", "truncation": None, "padding": None,
                     "model": {"type": "BPE"}}, indent=2).encode()
    for ck in (bert, deberta):
        refused(db, ck, "relattn_import: tokenizer.json: model 'BPE' is not "
                "supported (supported: WordPiece, Unigram)",
                tok=b"\xef\xbb\xbf" + tj + b"\n")
    refused(db, bert, "relattn_import: tokenizer.wordpiece is not valid "
            "UTF-8 at byte 1", tok=b"\n\xff")
    refused(db, deberta, "relattn_import: tokenizer.sentencepiece is not a "
            "SentencePiece model (malformed protobuf at byte 2)",
            tok=b"\n\xff")
    db.close()


def test_tokenizer_config_needs_an_hf_config(db):
    sys.path.insert(0, str(HERE))
    import reference_model as ref
    rng = np.random.default_rng(0)
    cfg = ref.random_config(rng)
    blob = ref.safetensors_bytes(ref.random_params(rng, cfg), cfg)
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_import('m', ?, NULL, NULL, '{}')", (blob,))
    assert str(e.value) == ("relattn_import: tokenizer_config_json goes with "
                            "a Hugging Face config.json (one with model_type) "
                            "as config_json")
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_import('m', ?, NULL, NULL, 3)", (blob,))
    assert str(e.value) == ("relattn_import: tokenizer_config_json must be "
                            "TEXT (JSON) or NULL")


@pytest.mark.parametrize("cls", ["T5EncoderModel", "T5ForConditionalGeneration"])
def test_t5_mapping(db, tmp_path, rng, cls):
    """What the T5 mapping stores: the bias table transposed, the tied
    embed_tokens copy left out, T5ForConditionalGeneration's decoder (its
    own bias table transposed too) and untied lm_head kept, the native
    config with its source, the files passed as readfile gives them
    (BLOBs); and the export imports again to the same tensors."""
    ck = checkpoints.t5(tmp_path / "t5", rng, cls, ffn="gated-gelu",
                        embed_copy=True)
    n = db.execute("SELECT relattn_import('m', ?, ?, ?, ?)",
                   (ck.read("weights"), ck.read("config"), ck.tok_bytes,
                    ck.read("tokenizer_config"))).fetchone()[0]
    # tok_emb, ln_f, rel_bias; ln1, wq wk wv wo, ln2, w1 w3 w2 a layer; the
    # tokenizer's file; the decoder: ln1, wq wk wv wo, lnx, xattn wq wk wv
    # wo, ln2, w1 w3 w2 a layer, dec.ln_f, dec.rel_bias, lm_head
    whole = cls == "T5ForConditionalGeneration"
    assert n == 3 + 9 * 2 + 1 + (14 * 1 + 3 if whole else 0)
    if whole:
        got = np.frombuffer(db.execute("SELECT relattn_weights('m', 'dec.rel_bias')"
                                       ).fetchone()[0], "<f4").reshape(4, 8)
        want = ck.params["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
        assert np.array_equal(got, want.T)
    got = np.frombuffer(db.execute("SELECT relattn_weights('m', 'rel_bias')"
                                   ).fetchone()[0], "<f4").reshape(4, 8)
    want = ck.params["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    assert np.array_equal(got, want.T)
    w3 = np.frombuffer(db.execute("SELECT data FROM relattn_tensor WHERE "
                                  "model = 'm' AND name = 'layers.1.ffn.w3'"
                                  ).fetchone()[0], "<f4").reshape(48, 32)
    assert np.array_equal(w3, ck.params["encoder.block.1.layer.1.DenseReluDense.wi_1.weight"])
    cfg = json.loads(db.execute("SELECT config FROM relattn_model").fetchone()[0])
    assert cfg["source"] == {"family": "t5", "class": cls, "model_type": "t5"}
    assert cfg.get("decoder") == ({"n_layers": 1, "start": 0} if whole else None)
    assert (cfg["head"], cfg["tie_embeddings"]) == (("lm", False) if whole else ("none", True))
    assert (cfg["norm"], cfg["norm_kind"], cfg["biases"], cfg["ffn"],
            cfg["activation"]) == ("pre", "rmsnorm", False, "gated", "gelu_tanh")
    assert cfg["position"] == {"type": "t5", "num_buckets": 8, "max_distance": 20}
    # the special tokens are the stored pipeline's added tokens (the fast
    # tokenizer's: tests/sql/test_tokenizer_spm_hf.py), not config keys
    assert cfg["tokenizer"] == {"type": "sentencepiece", "bos": None, "eos": 1,
                                "pad": 0, "append": 1, "sep": None,
                                "mask": None, "unk": 2}
    assert db.execute("SELECT relattn_import('m2', relattn_export('m'))"
                      ).fetchone()[0] == n
    assert db.execute("SELECT count(DISTINCT sha256), count(DISTINCT config) "
                      "FROM relattn_model").fetchone() == (1, 1)


def test_deberta_model_leaves_out_what_hf_leaves_out(db, tmp_path, rng):
    """DebertaV2Model from a file that also holds Microsoft's replaced-token
    detector (mask_predictions.*) and an int64 position_ids buffer: both
    left out, the rest stored under native names."""
    ck = checkpoints.deberta(tmp_path / "d", rng, "DebertaV2Model")
    p = dict(ck.params)
    for name, shape in (("dense.weight", (32, 32)), ("dense.bias", (32,)),
                        ("LayerNorm.weight", (32,)), ("LayerNorm.bias", (32,)),
                        ("classifier.weight", (1, 32)), ("classifier.bias", (1,))):
        p["mask_predictions." + name] = np.full(shape, 0.5, np.float32)
    n = run(db, ck, params=p,
            buffers={"embeddings.position_ids": np.arange(64)[None, :]})
    names = [r[0] for r in db.execute("SELECT name FROM relattn_tensor WHERE "
                                      "model = 'm' ORDER BY rowid")]
    assert n == len(names) == len(ck.params) + 1
    assert names[0] == "tok_emb" and "rel_emb" in names and \
        "rel_emb_norm.weight" in names and names[-1] == "tokenizer.sentencepiece"
    cfg = json.loads(db.execute("SELECT config FROM relattn_model").fetchone()[0])
    assert cfg["position"] == {"type": "deberta", "position_buckets": 16,
                               "max_relative_positions": 64,
                               "norm_rel_ebd": "layer_norm"}
    assert cfg["tokenizer"]["mask"] == ck.special["mask"]  # an added token
    assert (cfg["tokenizer"]["bos"], cfg["tokenizer"]["append"]) == (1, 2)


def test_mutated_checkpoints_never_crash(db, tmp_path, rng):
    """Random damage to real-looking checkpoints (a key dropped or of
    another type or value, a tensor renamed, dropped or reshaped, another
    dtype): each import either succeeds or fails with a relattn_import
    message, and a failure stores nothing (the sanitized run of make test
    checks the memory side)."""
    cks = [checkpoints.bert(tmp_path / "b", rng, "BertForMaskedLM",
                            "relative_key_query", position_ids=True),
           checkpoints.bert(tmp_path / "c", rng, "BertForSequenceClassification"),
           checkpoints.deberta(tmp_path / "d", rng, "DebertaV2ForMaskedLM",
                               style="v2"),
           checkpoints.deberta(tmp_path / "e", rng,
                               "DebertaV2ForSequenceClassification"),
           checkpoints.t5(tmp_path / "t", rng, "T5ForConditionalGeneration",
                          ffn="gated-gelu")]
    values = [None, -1, 0, 1, 3, 2 ** 40, 1.5, "", "gelu", "relu", "[SEP]",
              [], ["c2p"], {}, {"0": "x"}, True, False]
    outcomes = {"ok": 0, "refused": 0}
    for trial in range(150):
        ck = cks[trial % len(cks)]
        cfg = json.loads(json.dumps(ck.config))
        params = dict(ck.params)
        buffers = dict(ck.buffers)
        tok_config = json.loads(json.dumps(ck.tok_config))
        for _ in range(int(rng.integers(1, 3))):
            what = int(rng.integers(0, 6))
            if what <= 1:
                doc = cfg if what == 0 else tok_config
                key = sorted(doc)[int(rng.integers(0, len(doc)))]
                v = values[int(rng.integers(0, len(values)))]
                if v is None:
                    del doc[key]
                else:
                    doc[key] = v
            else:
                name = sorted(params)[int(rng.integers(0, len(params)))]
                a = params.pop(name)
                if what == 3:
                    params[name.replace(".", "_", 1)] = a
                elif what == 4:
                    params[name] = a.reshape(-1)[: max(1, a.size - 1)]
                elif what == 5:
                    params[name] = a.astype(np.float16)
        try:
            n = run(db, ck, config=cfg, params=params, buffers=buffers,
                    tok_config=json.dumps(tok_config))
        except sqlite3.DatabaseError as e:
            assert str(e).startswith("relattn_import: "), str(e)
            outcomes["refused"] += 1
            assert db.execute("SELECT count(*) FROM sqlite_master WHERE name "
                              "= 'relattn_model'").fetchone()[0] == 0 or \
                db.execute("SELECT count(*) FROM relattn_model").fetchone()[0] == 0
            continue
        outcomes["ok"] += 1
        assert n == db.execute("SELECT count(*) FROM relattn_tensor WHERE "
                               "model = 'm'").fetchone()[0]
        db.execute("DELETE FROM relattn_model")
    assert outcomes["ok"] > 5 and outcomes["refused"] > 50, outcomes


def test_messages_name_the_files_tensors(db, tmp_path, rng, bert):
    """A tensor missing or of the wrong shape is named as the file names it
    (with the file's prefix, the checkpoint's style of names), and as the
    native tensor it would be."""
    p = dict(bert.params)
    del p["bert.encoder.layer.1.output.dense.bias"]
    refused(db, bert, "relattn_import: tensor 'bert.encoder.layer.1.output."
            "dense.bias' is missing (the config needs it, as "
            "'layers.1.ffn.b2')", params=p)
    p = dict(bert.params)
    p["bert.encoder.layer.0.attention.self.query.weight"] = np.ones((16, 32), np.float32)
    refused(db, bert, "relattn_import: tensor 'bert.encoder.layer.0.attention."
            "self.query.weight' has shape [16,32]; the config needs [32,32]",
            params=p)
    model = checkpoints.bert(tmp_path / "bm", rng, "BertModel", "relative_key")
    p = {k: v for k, v in model.params.items() if not k.startswith("pooler.")}
    p.pop("embeddings.token_type_embeddings.weight")
    refused(db, model, "relattn_import: tensor 'embeddings.token_type_"
            "embeddings.weight' is missing (the config needs it, as "
            "'type_emb')", params=p)
    deb = checkpoints.deberta(tmp_path / "d", rng, "DebertaV2ForMaskedLM",
                              legacy=False)
    p = dict(deb.params)
    del p["lm_predictions.lm_head.bias"]
    refused(db, deb, "relattn_import: tensor 'lm_predictions.lm_head.bias' "
            "is missing (the config needs it, as 'mlm.bias')", params=p)
    t5 = checkpoints.t5(tmp_path / "t", rng, "T5EncoderModel", ffn="gated-gelu")
    p = dict(t5.params)
    del p["encoder.block.1.layer.1.DenseReluDense.wi_0.weight"]
    refused(db, t5, "relattn_import: tensor 'encoder.block.1.layer.1."
            "DenseReluDense.wi_0.weight' is missing (the config needs it, as "
            "'layers.1.ffn.w1')", params=p)
    del p["shared.weight"]
    refused(db, t5, "relattn_import: tensor 'shared.weight' is missing (the "
            "config needs it, as 'tok_emb')", params=p)
    refused(db, bert, "relattn_import: config_json: 'num_hidden_layers' must "
            "be between 1 and 65536, not 0",
            config=with_keys(bert, num_hidden_layers=0))
