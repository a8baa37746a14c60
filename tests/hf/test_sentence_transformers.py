"""sentence-transformers model directories end to end: a tiny random
checkpoint (BERT relative_key, DeBERTa-v3, T5 encoder; tests/hf/
checkpoints.py) wrapped in the directory SentenceTransformer.save writes
(modules.json, sentence_bert_config.json, 1_Pooling/config.json, Dense
modules with their model.safetensors, Normalize), imported by
relattn_import from its files, then relattn_embed compared with a float64
port of SentenceTransformer.encode (tests/hf/ports.py: the family's forward,
then st_encode, written from sentence-transformers' Pooling.py, Dense.py
and Normalize.py) on fresh random weights and texts.

Tolerance: 1e-5 on the largest element's scale, max|got - want| /
max(1, max|want|) (a float32 encoder against float64 ports; the pooling,
Dense and Normalize run in double). Refusals are checked by their exact
text, and leave no model behind."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import checkpoints  # noqa: E402
import ports  # noqa: E402
from conftest import from_f32  # noqa: E402

TOL = 1e-5
ERRORS = {}

FAMILIES = {
    "bert": lambda root, rng, **kw: checkpoints.bert(root, rng, "BertModel",
                                                     position="relative_key", **kw),
    "deberta": lambda root, rng, **kw: checkpoints.deberta(root, rng, "DebertaV2Model",
                                                           style="v3", **kw),
    "t5": lambda root, rng, **kw: checkpoints.t5(root, rng, "T5EncoderModel",
                                                 ffn="gated-gelu", **kw),
}


def st_import(db, ck, sd, name="st", extra=None, only=None):
    args = [name, ck.read("weights"), ck.path("config").read_text(),
            ck.read("tokenizer"), ck.path("tokenizer_config").read_text()]
    args += sd.args(only) if extra is None else extra
    marks = ", ".join("?" * len(args))
    return db.execute(f"SELECT relattn_import({marks})", args).fetchone()[0]


def model_input(ck, ids, max_seq_length=None):
    """Transformer.tokenize: the tokenizer with truncation to max_seq_length
    rows, special ones included ([CLS] X [SEP]; T5: X </s>)."""
    ids = list(ids)
    special = 1 if ck.family == "t5" else 2
    if max_seq_length is not None:
        ids = ids[:max_seq_length - special]
    if ck.family == "t5":
        return ids + [ck.special["eos"]]
    return [ck.special["cls"]] + ids + [ck.special["sep"]]


def want(ck, sd, ids):
    hidden = ports.forward(ck.config, ck.params, model_input(ck, ids, sd.max_seq_length))["hidden"]
    return ports.st_encode(hidden, sd)


def got(db, text, name="st", pooling=None):
    if pooling is None:
        b = db.execute("SELECT relattn_embed(?, ?)", (name, text)).fetchone()[0]
    else:
        b = db.execute("SELECT relattn_embed(?, ?, ?)", (name, text, pooling)).fetchone()[0]
    return from_f32(b).astype(np.float64)


def check(what, g, w):
    g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
    assert g.shape == w.shape, (what, g.shape, w.shape)
    err = float(np.abs(g - w).max()) / max(1.0, float(np.abs(w).max()))
    ERRORS[what] = max(err, ERRORS.get(what, 0.0))
    print(f"{what}: max error {err:.2e}")
    assert err < TOL, (what, err)


def texts(rng, ck, count=3):
    out = []
    for k in range(count):
        t = checkpoints.sample_text(rng, int(rng.integers(1, 25)))
        out.append((t, ck.encode(t)))
    return out


MODES = ["cls", "max", "mean", "mean_sqrt_len", "weightedmean", "lasttoken"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("pooling", [[m] for m in MODES] + [["cls", "mean", "max"], MODES])
def test_pooling_modes(db, rng, tmp_path, family, pooling):
    ck = FAMILIES[family](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=pooling)
    st_import(db, ck, sd)
    for text, ids in texts(rng, ck):
        check(f"{family} {'+'.join(pooling)}", got(db, text), want(ck, sd, ids))


DENSES = {
    "tanh": [dict(out=24)],
    "identity-no-bias": [dict(out=16, bias=False, act="identity")],
    "relu-gelu": [dict(out=40, act="relu"), dict(out=12, act="gelu")],
    "sigmoid": [dict(out=8, act="sigmoid")],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("dense", sorted(DENSES))
@pytest.mark.parametrize("normalize", [False, True])
def test_dense_normalize(db, rng, tmp_path, family, dense, normalize):
    ck = FAMILIES[family](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["mean", "cls"], dense=DENSES[dense],
                                 normalize=normalize)
    st_import(db, ck, sd)
    cfg = json.loads(db.execute("SELECT config FROM relattn_model WHERE name = 'st'").fetchone()[0])
    assert cfg["sentence"]["normalize"] is normalize
    assert [d["out_features"] for d in cfg["sentence"]["dense"]] == [d["out"] for d in DENSES[dense]]
    for text, ids in texts(rng, ck):
        g = got(db, text)
        check(f"{family} dense {dense} normalize {normalize}", g, want(ck, sd, ids))
        if normalize:
            assert abs(np.linalg.norm(g) - 1) < 1e-6


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_normalize_alone_and_raw_poolings(db, rng, tmp_path, family):
    """Normalize straight after the pooling; a pooling named in the call is
    the encoder's own (no Dense, no Normalize), as before."""
    ck = FAMILIES[family](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["mean"], normalize=True)
    st_import(db, ck, sd)
    text, ids = texts(rng, ck, 1)[0]
    check(f"{family} normalize", got(db, text), want(ck, sd, ids))
    hidden = ports.forward(ck.config, ck.params, model_input(ck, ids))["hidden"]
    check(f"{family} raw mean", got(db, text, pooling="mean"), ports.mean_pooling(hidden))
    check(f"{family} raw cls", got(db, text, pooling="cls"), hidden[0])


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_max_seq_length_truncates(db, rng, tmp_path, family):
    ck = FAMILIES[family](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["mean", "lasttoken"], max_seq_length=9,
                                 dense=[dict(out=20)], normalize=True)
    st_import(db, ck, sd)
    text = checkpoints.sample_text(rng, 30)
    ids = ck.encode(text)
    assert len(ids) > 9
    check(f"{family} truncated", got(db, text), want(ck, sd, ids))
    # the first 9 - specials tokens decide it: what follows them does not
    special = 1 if family == "t5" else 2
    kept = np.asarray(ids[:9 - special] + ids[:3], dtype="<i4").tobytes()
    assert np.array_equal(got(db, kept), got(db, text))


def test_scan_and_export(db, rng, tmp_path):
    ck = FAMILIES["bert"](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["max", "mean"], dense=[dict(out=24)],
                                 normalize=True, max_seq_length=20)
    n = st_import(db, ck, sd)
    rows = [(i, checkpoints.sample_text(rng, int(rng.integers(2, 30)))) for i in range(1, 8)]
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO docs VALUES (?, ?)", rows)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='st', source='docs', "
               "tokens='body')")
    scanned = dict(db.execute("SELECT id, embedding FROM temp.job").fetchall())
    for i, body in rows:
        assert scanned[i] == db.execute("SELECT relattn_embed('st', ?)", (body,)).fetchone()[0]
        check("scan", from_f32(scanned[i]), want(ck, sd, ck.encode(body)))
    # export, import: the same tensors, sha256, config and vectors
    assert db.execute("SELECT relattn_import('copy', relattn_export('st'))").fetchone()[0] == n
    a, b = (db.execute("SELECT sha256, config FROM relattn_model WHERE name = ?", (m,)).fetchone()
            for m in ("st", "copy"))
    assert a[0] == b[0] and a[0]
    assert json.loads(a[1]) == json.loads(b[1])
    names = [r[0] for r in db.execute("SELECT name FROM relattn_tensor WHERE model = 'copy' "
                                      "AND name LIKE 'sentence.%' ORDER BY rowid")]
    assert names == ["sentence.dense.0.weight", "sentence.dense.0.bias"]
    for _, body in rows[:3]:
        assert got(db, body, "copy").tobytes() == got(db, body).tobytes()


# ---- refusals ------------------------------------------------------------------

def refused(db, ck, sd, msg, extra=None, only=None):
    with pytest.raises(Exception) as e:
        st_import(db, ck, sd, name="bad", extra=extra, only=only)
    assert str(e.value) == msg
    if db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'relattn_model'").fetchone()[0]:
        assert db.execute("SELECT count(*) FROM relattn_model WHERE name = 'bad'"
                          ).fetchone()[0] == 0


def edited(sd, name, change):
    """sd's arguments with one file's JSON changed by change(obj)."""
    out = []
    for n, path in sd.files:
        data = path.read_bytes()
        if n == name:
            obj = json.loads(data)
            obj = change(obj) or obj
            data = json.dumps(obj).encode()
        out += [n, data]
    return out


def test_refusals(db, rng, tmp_path):
    ck = FAMILIES["bert"](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["mean"], dense=[dict(out=16)], normalize=True)
    pre = "relattn_import: "
    refused(db, ck, sd, pre + "1_Pooling/config.json: pooling mode 'pooling_mode_median_tokens' "
            "is not supported (pooling_mode_cls_token, _max_tokens, _mean_tokens, "
            "_mean_sqrt_len_tokens, _weightedmean_tokens, _lasttoken)",
            edited(sd, "1_Pooling/config.json",
                   lambda c: c.update(pooling_mode_median_tokens=True)))
    refused(db, ck, sd, pre + "1_Pooling/config.json: no pooling_mode_* is true",
            edited(sd, "1_Pooling/config.json", lambda c: c.update(pooling_mode_mean_tokens=False)))
    refused(db, ck, sd, pre + "1_Pooling/config.json: word_embedding_dimension 64 is not the "
            "model's hidden size 32",
            edited(sd, "1_Pooling/config.json", lambda c: c.update(word_embedding_dimension=64)))
    refused(db, ck, sd, pre + "2_Dense/config.json: activation_function "
            "'torch.nn.modules.activation.SiLU' is not supported (Tanh, Identity, ReLU, GELU, "
            "Sigmoid of torch.nn)",
            edited(sd, "2_Dense/config.json",
                   lambda c: c.update(activation_function="torch.nn.modules.activation.SiLU")))
    refused(db, ck, sd, pre + "2_Dense/config.json: in_features 48 is not the width of what "
            "comes before it, 32",
            edited(sd, "2_Dense/config.json", lambda c: c.update(in_features=48)))
    # the weights disagree with the module's config
    refused(db, ck, sd, pre + "tensor '2_Dense/linear.weight' has shape [16,32]; the config "
            "needs [12,32]",
            edited(sd, "2_Dense/config.json", lambda c: c.update(out_features=12)))
    refused(db, ck, sd, pre + "unexpected tensor '2_Dense/linear.bias' (not part of the config)",
            edited(sd, "2_Dense/config.json", lambda c: c.update(bias=False)))
    # missing files
    refused(db, ck, sd, pre + "the sentence-transformers directory's '1_Pooling/config.json' "
            "is missing: pass '1_Pooling/config.json', readfile('.../1_Pooling/config.json')",
            only={"modules.json", "2_Dense/config.json", "2_Dense/model.safetensors"})
    refused(db, ck, sd, pre + "the sentence-transformers directory's '2_Dense/model.safetensors' "
            "is missing: pass '2_Dense/model.safetensors', "
            "readfile('.../2_Dense/model.safetensors')",
            only={"modules.json", "1_Pooling/config.json", "2_Dense/config.json"})
    refused(db, ck, sd, pre + "the sentence-transformers directory's 'modules.json' is missing: "
            "pass 'modules.json', readfile('.../modules.json')",
            only={"1_Pooling/config.json"})
    refused(db, ck, sd, pre + "file '1_Pooling/config.json' (argument 9) is NULL (file not "
            "found?)", ["modules.json", b"[]", "1_Pooling/config.json", None, "x", b"y"])
    refused(db, ck, sd, pre + "2_Dense/pytorch_model.bin is a PyTorch pickle, which relattn "
            "does not read; save the module's weights as model.safetensors",
            sd.args(only={"modules.json", "1_Pooling/config.json", "2_Dense/config.json"})
            + ["2_Dense/pytorch_model.bin", b"PK\x03\x04"])
    refused(db, ck, sd, pre + "file 'README.md' (argument 18) is not a file of the modules "
            "modules.json lists", sd.args() + ["README.md", b"# a model"])
    refused(db, ck, sd, pre + "file 'modules.json' is given twice (arguments 6 and 18)",
            sd.args() + ["modules.json", b"[]"])
    # modules.json
    mods = json.loads((ck.dir / "modules.json").read_text())
    refused(db, ck, sd, pre + "modules.json: module 2 'sentence_transformers.models.LayerNorm' "
            "is not supported (Transformer, Pooling, Dense, Normalize of "
            "sentence_transformers.models)",
            edited(sd, "modules.json",
                   lambda m: m[2].update(type="sentence_transformers.models.LayerNorm")))
    refused(db, ck, sd, pre + "modules.json: module 3 (Dense) is out of order; relattn runs "
            "Transformer, Pooling, Dense modules, then Normalize",
            edited(sd, "modules.json", lambda m: [m[0], m[1], dict(m[3], idx=2),
                                                  dict(m[2], idx=3)]))
    refused(db, ck, sd, pre + "modules.json has no Pooling module",
            edited(sd, "modules.json", lambda m: [m[0]]))
    assert mods[0]["path"] == ""
    refused(db, ck, sd, pre + "modules.json is not a JSON array",
            ["modules.json", b"{\"a\": 1}"])
    refused(db, ck, sd, pre + "config_sentence_transformers.json: default_prompt_name 'query' "
            "is not supported (relattn_embed puts no prompt in front)",
            edited(sd, "config_sentence_transformers.json",
                   lambda c: c.update(default_prompt_name="query", prompts={"query": "q: "})))
    refused(db, ck, sd, pre + "2_Dense/model.safetensors: tensor 'dense.weight' is not a Dense "
            "module's (linear.weight, linear.bias)",
            sd.args(only={"modules.json", "1_Pooling/config.json", "2_Dense/config.json"})
            + ["2_Dense/model.safetensors", dense_file({"dense.weight": np.ones((16, 32), "f4")})])
    # a native config has no place for the directory's modules
    tiny = (checkpoints.HERE.parent.parent / "models" / "tiny.safetensors").read_bytes()
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_import('bad', ?, NULL, NULL, NULL, 'modules.json', '[]')",
                   (tiny,))
    assert str(e.value) == (pre + "a sentence-transformers directory's files (argument 6 and "
                            "on) go with a Hugging Face config.json (one with model_type) as "
                            "config_json")


def dense_file(tensors):
    import safetensors_py
    return safetensors_py.write(tensors)


def test_do_lower_case(db, rng, tmp_path):
    """Transformer.tokenize lower-cases the text itself when
    sentence_bert_config says so: the same ids as an uncased WordPiece;
    a tokenizer that keeps case is refused."""
    ck = FAMILIES["bert"](tmp_path / "b", rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["mean"], do_lower_case=True)
    st_import(db, ck, sd)
    text, ids = texts(rng, ck, 1)[0]
    check("bert do_lower_case", got(db, text.upper()), want(ck, sd, ids))
    t5 = FAMILIES["t5"](tmp_path / "t", rng)
    sd5 = checkpoints.SentenceDir(t5, rng, pooling=["mean"], do_lower_case=True)
    refused(db, t5, sd5, "relattn_import: sentence_bert_config.json: do_lower_case true is not "
            "supported with a tokenizer that keeps case")


def test_native_config_refusals(db, rng, tmp_path):
    """The config's sentence key, edited and imported again from the
    export: each fault named by its key."""
    ck = FAMILIES["bert"](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["mean"], dense=[dict(out=16)])
    st_import(db, ck, sd)
    blob = db.execute("SELECT relattn_export('st')").fetchone()[0]
    cfg = db.execute("SELECT config FROM relattn_model WHERE name = 'st'").fetchone()[0]
    pre = "relattn_import: config: "
    for path, value, msg in [
            ("$.sentence.dense[0].in_features", 48,
             "'sentence.dense[0].in_features' is 48; what comes before it is 32 wide "
             "(the pooling)"),
            ("$.sentence.max_seq_length", 2,
             "'sentence.max_seq_length' must be between 3 (a token and the special rows) and "
             "16777216, not 2"),
            ("$.sentence.pooling", '"mean"', "'sentence.pooling' must be an array of strings, "
             "not text"),
            ("$.sentence.pooling", '["mean", "median"]', "'sentence.pooling' has 'median'; the "
             "modes are cls, max, mean, mean_sqrt_len, weightedmean, lasttoken"),
            ("$.sentence.pooling", "[]", "'sentence.pooling' needs at least one mode"),
            ("$.sentence.dense[0].activation", '"swish"', "'sentence.dense[0].activation' must "
             "be one of identity,tanh,relu,gelu,sigmoid, not 'swish'"),
            ("$.sentence.dense[0].bias", "false",
             None),  # the file's bias is then a tensor the config has not
            ("$.sentence", "[]", "'sentence' must be an object, not array")]:
        edited_cfg = db.execute("SELECT json_set(?, ?, json(?))", (cfg, path, str(value))
                                ).fetchone()[0]
        with pytest.raises(Exception) as e:
            db.execute("SELECT relattn_import('bad', ?, ?)", (blob, edited_cfg))
        want_msg = (pre + msg if msg else
                    "relattn_import: unexpected tensor 'sentence.dense.0.bias' (not part of the "
                    "config)")
        assert str(e.value) == want_msg
    assert db.execute("SELECT count(*) FROM relattn_model WHERE name = 'bad'").fetchone()[0] == 0


def test_missing_dense_bias(db, rng, tmp_path):
    ck = FAMILIES["t5"](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["mean"], dense=[dict(out=16, bias=False)])
    refused(db, ck, sd, "relattn_import: tensor 'sentence.dense.0.bias' is missing (the config "
            "needs it)", edited(sd, "2_Dense/config.json", lambda c: c.update(bias=True)))


def test_quantized_copy(db, rng, tmp_path):
    """relattn_quantize keeps the sentence modules (float) beside the int8
    layers: the copy's vector stays close to the model's."""
    ck = FAMILIES["deberta"](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["cls", "mean"], dense=[dict(out=16)],
                                 normalize=True)
    st_import(db, ck, sd)
    db.execute("SELECT relattn_quantize('st', 'st8', 'int8')")
    text, ids = texts(rng, ck, 1)[0]
    a, b = got(db, text), got(db, text, "st8")
    assert a.shape == b.shape == (16,)
    assert abs(np.linalg.norm(b) - 1) < 1e-6
    assert float(np.abs(a - b).max()) < 0.05


def test_sharded_checkpoint(db, rng, tmp_path):
    """A sharded Transformer: its index as safetensors_blob, the shards
    (BLOBs) and the directory's (name, file) pairs after
    tokenizer_config_json, in any mix; the same model as the unsplit file."""
    ck = FAMILIES["bert"](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["mean", "max"], dense=[dict(out=8)],
                                 normalize=True)
    n = st_import(db, ck, sd)
    index, parts, _ = checkpoints.shards(ck.read("weights"), 2)
    pairs = sd.args()
    args = (["sharded", index, ck.path("config").read_text(), ck.read("tokenizer"),
             ck.path("tokenizer_config").read_text(), parts[0]] + pairs[:4] + [parts[1]]
            + pairs[4:])
    marks = ", ".join("?" * len(args))
    assert db.execute(f"SELECT relattn_import({marks})", args).fetchone()[0] == n
    a, b = (db.execute("SELECT sha256 FROM relattn_model WHERE name = ?", (m,)).fetchone()[0]
            for m in ("st", "sharded"))
    assert a == b
    text, ids = texts(rng, ck, 1)[0]
    check("bert sharded", got(db, text, "sharded"), want(ck, sd, ids))


def test_malformed_files(db, rng, tmp_path):
    """Files that are not what their names say: refused by name, nothing
    stored, nothing leaked (the sanitized pass runs this file)."""
    ck = FAMILIES["bert"](tmp_path, rng)
    sd = checkpoints.SentenceDir(ck, rng, pooling=["mean"], dense=[dict(out=16)])
    pre = "relattn_import: "
    head = sd.args(only={"modules.json", "1_Pooling/config.json", "2_Dense/config.json"})
    whole = (tmp_path / "2_Dense" / "model.safetensors").read_bytes()
    # a Dense file cut short: its header parsed, its data missing
    with pytest.raises(Exception) as e:
        st_import(db, ck, sd, name="bad", extra=head + ["2_Dense/model.safetensors", whole[:-8]])
    assert str(e.value).startswith(pre + "2_Dense/model.safetensors")
    refused(db, ck, sd, pre + "modules.json is not a JSON array",
            ["modules.json", b"{not json"])
    refused(db, ck, sd, pre + "modules.json: module 1's type or path holds a NUL character "
            "(\\u0000), which relattn does not accept",
            edited(sd, "modules.json", lambda m: m[1].update(
                type="sentence_transformers.models.Pooling\u0000x")))
    blob = None
    st_import(db, ck, sd)
    blob = db.execute("SELECT relattn_export('st')").fetchone()[0]
    cfg = json.loads(db.execute("SELECT config FROM relattn_model WHERE name = 'st'").fetchone()[0])
    cfg["sentence"]["pooling"] = ["mean\u0000x"]
    with pytest.raises(Exception) as e:
        db.execute("SELECT relattn_import('bad', ?, ?)", (blob, json.dumps(cfg)))
    assert str(e.value) == (pre + "config: 'sentence.pooling[0]' holds a NUL character "
                            "(\\u0000), which relattn does not accept")


def test_report():
    """The largest error of each comparison this run made (printed; -s)."""
    for k in sorted(ERRORS):
        print(f"{k}: {ERRORS[k]:.2e}")
