"""models/deberta_classifier.py and models/train_deberta.py: the PyTorch DeBERTa-v3-style
classifier in Hugging Face's layout, and the training run that writes Hugging Face's file set.

- The PyTorch forward pass against a float64 numpy port of Hugging Face's DebertaV2 classes,
  written here from the algorithm of transformers' src/transformers/models/deberta_v2/
  modeling_deberta_v2.py (make_log_bucket_position, build_relative_position,
  DisentangledSelfAttention.disentangled_attention_bias, ContextPooler), element by element
  (loops over query and key, no gathers), on fresh random weights and a padded batch.
- A short training run (tiny sizes) on the licences of /usr/share/common-licenses: the loss
  falls, and the directory holds exactly Hugging Face's files with its tensor names and
  shapes, config keys, the tokenizer's special pieces and [MASK] as the last id.

Not run under the sanitizers: this is PyTorch's code, not the extension's."""
import csv
import json
import math
import os
import pathlib
import struct
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "models"))

if os.environ.get("RELATTN_SANITIZED"):   # before torch is imported: its own leaks at exit
    pytest.skip("PyTorch is not run under the sanitizer preload", allow_module_level=True)

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------------------------------------
# float64 port (modeling_deberta_v2.py), independent of models/deberta_classifier.py


def port_bucket(rel, bucket_size, max_position):
    """make_log_bucket_position for one distance; the logarithm in float32 as the reference's
    torch code computes it."""
    mid = bucket_size // 2
    if -mid < rel < mid:
        return rel
    a = abs(rel)
    if a <= mid:
        return rel
    f = np.float32
    lp = np.ceil(np.log(f(a) / f(mid)) / np.log(f((max_position - 1) / mid)) * f(mid - 1)) + mid
    return int(lp) * (1 if rel > 0 else -1)


def port_layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def port_gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def port_logits(sd, cfg, ids):
    """One unpadded sequence (ids: list) -> logits, float64."""
    W = {k: v.double().numpy() for k, v in sd.items()}
    d, H, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    dh, S = d // H, cfg["position_buckets"]
    M = cfg["max_relative_positions"] if cfg["max_relative_positions"] > 0 else cfg["max_position_embeddings"]
    lin = lambda x, p: x @ W[p + ".weight"].T + W[p + ".bias"]
    ln = lambda x, p: port_layer_norm(x, W[p + ".weight"], W[p + ".bias"], eps)
    n = len(ids)
    x = ln(W["deberta.embeddings.word_embeddings.weight"][ids], "deberta.embeddings.LayerNorm")
    R = ln(W["deberta.encoder.rel_embeddings.weight"], "deberta.encoder.LayerNorm")
    row = [[min(max(port_bucket(i - j, S, M) + S, 0), 2 * S - 1) for j in range(n)] for i in range(n)]
    for L in range(cfg["num_hidden_layers"]):
        p = f"deberta.encoder.layer.{L}."
        q, k, v = (lin(x, p + f"attention.self.{w}_proj") for w in ("query", "key", "value"))
        rq, rk = lin(R, p + "attention.self.query_proj"), lin(R, p + "attention.self.key_proj")
        z = np.zeros((n, d))
        for h in range(H):
            c = slice(h * dh, (h + 1) * dh)
            e = np.empty((n, n))
            for i in range(n):
                for j in range(n):
                    r = row[i][j]
                    e[i, j] = (q[i, c] @ k[j, c] + q[i, c] @ rk[r, c] + k[j, c] @ rq[r, c]) / math.sqrt(3 * dh)
            a = np.exp(e - e.max(1, keepdims=True))
            z[:, c] = (a / a.sum(1, keepdims=True)) @ v[:, c]
        x = ln(x + lin(z, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        f = lin(port_gelu(lin(x, p + "intermediate.dense")), p + "output.dense")
        x = ln(x + f, p + "output.LayerNorm")
    pooled = port_gelu(lin(x[0], "pooler.dense"))
    return lin(pooled, "classifier")


def test_bucket_matches_port():
    import deberta_classifier as dc
    for S, M in ((8, 32), (256, 512), (6, 100)):
        rel = torch.arange(-3 * M, 3 * M + 1)
        got = dc.log_bucket_position(rel, S, M).tolist()
        assert got == [port_bucket(r, S, M) for r in rel.tolist()], (S, M)
    # far distances are spread over log buckets, not clipped at S/2
    assert len(set(dc.log_bucket_position(torch.arange(0, 512), 256, 512).tolist())) == 256


def test_forward_matches_float64_port():
    import deberta_classifier as dc
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed={seed}")
    cfg = dc.hf_config(50, ["a", "b", "c"], hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=24, position_buckets=8, max_position_embeddings=32)
    model = dc.DebertaV2ForSequenceClassification(cfg)
    gen = torch.Generator().manual_seed(seed)
    model.init_weights(gen)
    with torch.no_grad():  # weights of realistic size, LayerNorms and biases not trivial
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if p.dim() > 1 else 0.5)
                    + (1.0 if p.dim() == 1 else 0.0) * (torch.rand(()) > 0.5))
    model.eval()
    rng = np.random.default_rng(seed)
    lens = [40, 7, 23]   # 40 > position_buckets / 2: the log buckets are used
    seqs = [[1] + rng.integers(4, 50, n - 2).tolist() + [2] for n in lens]
    ids = torch.zeros(len(seqs), max(lens), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, s in enumerate(seqs):
        ids[r, :len(s)] = torch.tensor(s)
        mask[r, :len(s)] = 1
    with torch.no_grad():
        got = model(ids, mask).double().numpy()
    sd = model.state_dict()
    for r, s in enumerate(seqs):
        ref = port_logits(sd, cfg, s)
        err = np.abs(got[r] - ref).max() / max(1.0, np.abs(ref).max())
        assert err < 1e-4, (r, got[r], ref)


# ---------------------------------------------------------------------------------------------
# The training run and its files


HF_FILES = {"config.json", "model.safetensors", "spm.model", "tokenizer_config.json",
            "special_tokens_map.json", "added_tokens.json"}


def hf_tensor_shapes(cfg):
    """Hugging Face's DebertaV2ForSequenceClassification state_dict for a DeBERTa-v3 config
    (relative_attention, position_biased_input false, type_vocab_size 0, share_att_key,
    norm_rel_ebd layer_norm), names and shapes, typed out from the module tree."""
    d, f, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    L = len(cfg["id2label"])
    out = {"deberta.embeddings.word_embeddings.weight": [V, d],
           "deberta.embeddings.LayerNorm.weight": [d], "deberta.embeddings.LayerNorm.bias": [d]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"deberta.encoder.layer.{i}."
        for m in ("attention.self.query_proj", "attention.self.key_proj", "attention.self.value_proj",
                  "attention.output.dense"):
            out[p + m + ".weight"], out[p + m + ".bias"] = [d, d], [d]
        for m in ("attention.output.LayerNorm", "output.LayerNorm"):
            out[p + m + ".weight"], out[p + m + ".bias"] = [d], [d]
        out[p + "intermediate.dense.weight"], out[p + "intermediate.dense.bias"] = [f, d], [f]
        out[p + "output.dense.weight"], out[p + "output.dense.bias"] = [d, f], [d]
    out["deberta.encoder.rel_embeddings.weight"] = [2 * cfg["position_buckets"], d]
    out["deberta.encoder.LayerNorm.weight"] = out["deberta.encoder.LayerNorm.bias"] = [d]
    out["pooler.dense.weight"], out["pooler.dense.bias"] = [d, d], [d]
    out["classifier.weight"], out["classifier.bias"] = [L, d], [L]
    return out


def read_header(path):
    blob = path.read_bytes()
    (n,) = struct.unpack_from("<Q", blob, 0)
    h = json.loads(blob[8:8 + n])
    h.pop("__metadata__", None)
    return h, len(blob) - 8 - n


def test_training_writes_hf_files(tmp_path):
    import sentencepiece as spm
    import train_deberta
    out = tmp_path / "ckpt"
    facts = train_deberta.main(["--out", str(out), "--vocab", "300", "--hidden", "32", "--heads", "2",
                                "--intermediate", "64", "--epochs", "5", "--lr", "5e-3",
                                "--warmup", "10", "--crop", "0"])
    # it trains: the loss falls from the first epoch (about ln 6 = 1.79) to the fifth (about 1.2)
    losses = [p["train_loss"] for p in facts["curve"]]
    assert len(losses) == 5 and losses[4] < losses[0] - 0.3, losses

    assert {p.name for p in out.iterdir()} == HF_FILES | {"heldout.csv", "train.json"}
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["DebertaV2ForSequenceClassification"]
    assert cfg["model_type"] == "deberta-v2"
    docs = list(train_deberta.DOCS)
    assert cfg["id2label"] == {str(i): d for i, d in enumerate(docs)}
    assert cfg["label2id"] == {d: i for i, d in enumerate(docs)}
    for key, want in (("relative_attention", True), ("position_biased_input", False),
                      ("type_vocab_size", 0), ("pos_att_type", "p2c|c2p"), ("share_att_key", True),
                      ("norm_rel_ebd", "layer_norm"), ("position_buckets", 256),
                      ("max_relative_positions", -1), ("max_position_embeddings", 512),
                      ("hidden_act", "gelu"), ("pooler_hidden_act", "gelu"), ("hidden_size", 32),
                      ("num_attention_heads", 2), ("intermediate_size", 64),
                      ("problem_type", "single_label_classification")):
        assert cfg[key] == want, key

    header, data_len = read_header(out / "model.safetensors")
    assert {k: v["shape"] for k, v in header.items()} == hf_tensor_shapes(cfg)
    assert {v["dtype"] for v in header.values()} == {"F32"}
    assert sum(4 * math.prod(v["shape"]) for v in header.values()) == data_len

    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    assert [sp.id_to_piece(i) for i in range(4)] == ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]
    assert sp.get_piece_size() == 300 and cfg["vocab_size"] == 301
    assert json.loads((out / "added_tokens.json").read_text()) == {"[MASK]": 300}
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["added_tokens_decoder"]["300"]["content"] == "[MASK]"
    assert (tc["cls_token"], tc["sep_token"], tc["pad_token"], tc["unk_token"], tc["mask_token"]) == \
        ("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]")

    with open(out / "heldout.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == facts["passages"]["heldout"] > 30
    assert {r["label"] for r in rows} == set(docs)
    train_texts = {t for t, _ in train_deberta.dataset(facts["settings"]["seed"],
                                                         facts["settings"]["max_chars"])[0]}
    assert not train_texts & {r["text"] for r in rows}


# ---------------------------------------------------------------------------------------------
# The committed checkpoint (models/deberta-licenses)

BUNDLED = ROOT / "models" / "deberta-licenses"


def test_bundled_run_used_the_script_defaults():
    import train_deberta
    run = json.loads((BUNDLED / "train.json").read_text())
    defaults = vars(train_deberta.parse_args([]))
    assert {k: defaults[k] for k in run["settings"]} == run["settings"]
    assert {p.name for p in BUNDLED.iterdir()} == HF_FILES | {"heldout.csv", "train.json"}


def test_bundled_checkpoint_gives_its_recorded_accuracy():
    """PyTorch, reading the committed files: the held-out accuracy train.json records."""
    import sentencepiece as spm
    import deberta_classifier as dc
    run = json.loads((BUNDLED / "train.json").read_text())
    model = dc.from_pretrained(BUNDLED)
    sp = spm.SentencePieceProcessor(model_file=str(BUNDLED / "spm.model"))
    labels = model.config["label2id"]
    with open(BUNDLED / "heldout.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    right = 0
    with torch.inference_mode():
        for r in rows:
            ids = torch.tensor([[1] + sp.encode(r["text"]) + [2]])
            right += int(model(ids).argmax(-1)) == labels[r["label"]]
    assert len(rows) == run["passages"]["heldout"]
    assert right / len(rows) == pytest.approx(run["heldout_accuracy"], abs=1e-4)
    assert right / len(rows) > 0.5    # six documents: chance is about 1/6


def test_sql_matches_pytorch():
    """relattn_import of the committed files as Hugging Face wrote them, then every held-out
    passage: the tokenizer's ids are sentencepiece's, relattn_labels' logits are PyTorch's in
    float64 within 1e-4, and the scan's label and prob are the argmax and its softmax."""
    import sentencepiece as spm
    import deberta_classifier as dc
    from conftest import connect
    model = dc.from_pretrained(BUNDLED).double()
    sp = spm.SentencePieceProcessor(model_file=str(BUNDLED / "spm.model"))
    labels = [model.config["id2label"][str(i)] for i in range(len(model.config["id2label"]))]
    db = connect()
    files = [(BUNDLED / f).read_bytes() for f in
             ("model.safetensors", "config.json", "spm.model", "tokenizer_config.json")]
    assert db.execute("SELECT relattn_import('lic', ?, ?, ?, ?)", files).fetchone()[0] == 43
    with open(BUNDLED / "heldout.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    db.execute("CREATE TABLE heldout(id INTEGER PRIMARY KEY, label TEXT, text TEXT)")
    db.executemany("INSERT INTO heldout VALUES (?, ?, ?)", [(int(r["id"]), r["label"], r["text"]) for r in rows])
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='lic', source='heldout', tokens='text')")
    scan = {i: (lab, p) for i, lab, p in db.execute("SELECT id, label, prob FROM temp.job")}
    worst = 0.0
    for r in rows:
        ids = sp.encode(r["text"])
        got_ids = np.frombuffer(db.execute("SELECT relattn_tokenize('lic', ?)", (r["text"],)).fetchone()[0], "<i4")
        assert got_ids.tolist() == ids
        with torch.inference_mode():
            ref = model(torch.tensor([[1] + ids + [2]]))[0].numpy()
        got = db.execute("SELECT label, logit, prob FROM relattn_labels('lic', ?)", (r["text"],)).fetchall()
        assert [g[0] for g in got] == labels
        logits = np.array([g[1] for g in got])
        worst = max(worst, np.abs(logits - ref).max() / max(1.0, np.abs(ref).max()))
        probs = np.exp(ref - ref.max()) / np.exp(ref - ref.max()).sum()
        assert np.abs(np.array([g[2] for g in got]) - probs).max() < 1e-5
        lab, p = scan[int(r["id"])]
        assert lab == labels[int(ref.argmax())] and abs(p - probs.max()) < 1e-5
    print(f"largest logit difference, relative: {worst:.1e}")
    assert worst < 1e-4, worst
    db.close()
