"""A DeBERTa-v3-style sequence classifier in PyTorch, laid out as Hugging Face lays it out.

The modules, their attribute names and so the state_dict keys are those of Hugging Face's
DebertaV2ForSequenceClassification (transformers, src/transformers/models/deberta_v2/
modeling_deberta_v2.py: DebertaV2Embeddings, DisentangledSelfAttention, DebertaV2SelfOutput,
DebertaV2Intermediate, DebertaV2Output, DebertaV2Layer, DebertaV2Encoder, DebertaV2Model,
ContextPooler, DebertaV2ForSequenceClassification), written here from that algorithm for the
configuration DeBERTa-v3 checkpoints use:

    relative_attention true, position_biased_input false, type_vocab_size 0,
    pos_att_type "p2c|c2p", share_att_key true, norm_rel_ebd "layer_norm",
    position_buckets 256 (log buckets), max_relative_positions -1 (= max_position_embeddings),
    post-norm layers, hidden_act gelu (erf), ContextPooler with pooler_hidden_act gelu.

So a directory written by save_pretrained() (config.json, model.safetensors) is what
`DebertaV2ForSequenceClassification.from_pretrained(dir)` reads, and what relattn_import takes:

    deberta.embeddings.word_embeddings.weight          [vocab, d]
    deberta.embeddings.LayerNorm.weight, .bias         [d]
    deberta.encoder.layer.{i}.attention.self.query_proj.weight [d, d], .bias [d]  (key_proj, value_proj)
    deberta.encoder.layer.{i}.attention.output.dense.weight [d, d], .bias; .output.LayerNorm.weight, .bias
    deberta.encoder.layer.{i}.intermediate.dense.weight [d_ff, d], .bias [d_ff]
    deberta.encoder.layer.{i}.output.dense.weight [d, d_ff], .bias [d]; output.LayerNorm.weight, .bias
    deberta.encoder.rel_embeddings.weight              [2 * position_buckets, d]
    deberta.encoder.LayerNorm.weight, .bias            [d]   (norm_rel_ebd layer_norm)
    pooler.dense.weight [d, d], .bias [d]
    classifier.weight [labels, d], .bias [labels]

The forward pass (no dropout in eval mode), for head h with d = d_head, s = 1 / sqrt(3 d):
    x    = LayerNorm(word_embeddings[ids]) * mask
    R    = LayerNorm_rel(rel_embeddings)                       shared by all layers
    per layer: q, k, v = x Wq^T + bq, ...;  Rk = R Wk^T + bk, Rq = R Wq^T + bq   (share_att_key)
        b(i, j) = clamp(logbucket(i - j) + S, 0, 2S - 1)
        e_ij = s (q_i . k_j + q_i . Rk[b(i, j)] + k_j . Rq[b(i, j)])     (c2p and p2c)
        a    = softmax_j(e) over unmasked keys;  z = a v
        x    = LN(x + z Wo^T + bo);  x = LN(x + gelu(x W1^T + b1) W2^T + b2)
    pooled = gelu(x[0] P^T + p);  logits = pooled C^T + c
"""
import json
import math
import pathlib
import struct

import torch
from torch import nn
from torch.nn import functional as F


def hf_config(vocab_size, labels, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=None, position_buckets=256, max_position_embeddings=512,
              layer_norm_eps=1e-7, dropout=0.1):
    """config.json of a DebertaV2ForSequenceClassification with DeBERTa-v3's settings."""
    return {
        "architectures": ["DebertaV2ForSequenceClassification"],
        "model_type": "deberta-v2",
        "attention_probs_dropout_prob": dropout,
        "hidden_act": "gelu",
        "hidden_dropout_prob": dropout,
        "hidden_size": hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": intermediate_size or 4 * hidden_size,
        "layer_norm_eps": layer_norm_eps,
        "max_position_embeddings": max_position_embeddings,
        "max_relative_positions": -1,
        "norm_rel_ebd": "layer_norm",
        "num_attention_heads": num_attention_heads,
        "num_hidden_layers": num_hidden_layers,
        "pad_token_id": 0,
        "pooler_dropout": 0,
        "pooler_hidden_act": "gelu",
        "pooler_hidden_size": hidden_size,
        "pos_att_type": "p2c|c2p",
        "position_biased_input": False,
        "position_buckets": position_buckets,
        "relative_attention": True,
        "share_att_key": True,
        "type_vocab_size": 0,
        "vocab_size": vocab_size,
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        "problem_type": "single_label_classification",
        "torch_dtype": "float32",
    }


# ---------------------------------------------------------------------------------------------
# Relative positions: modeling_deberta_v2.py, make_log_bucket_position and build_relative_position


def log_bucket_position(rel, bucket_size, max_position):
    """rel (a long tensor of query - key distances) -> its bucket: distances under bucket_size / 2
    are kept, longer ones go to logarithmically wider buckets up to max_position. Computed in
    float32 as the reference does (the ceil is taken of a float32 logarithm)."""
    mid = bucket_size // 2
    sign = torch.sign(rel)
    near = (rel < mid) & (rel > -mid)
    abs_pos = torch.where(near, torch.full_like(rel, mid - 1), rel.abs()).to(torch.float32)
    log_pos = torch.ceil(torch.log(abs_pos / mid)
                         / torch.log(torch.tensor((max_position - 1) / mid, dtype=torch.float32))
                         * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, rel.to(torch.float32), log_pos * sign).to(torch.long)


def bucket_index(n, bucket_size, max_position):
    """[n, n] long: the row of the relative table that query i and key j use,
    clamp(bucket(i - j) + span, 0, 2 span - 1), span = bucket_size (or max_position)."""
    pos = torch.arange(n)
    rel = pos[:, None] - pos[None, :]
    span = bucket_size if bucket_size > 0 else max_position
    if bucket_size > 0 and max_position > 0:
        rel = log_bucket_position(rel, bucket_size, max_position)
    return (rel + span).clamp(0, 2 * span - 1)


# ---------------------------------------------------------------------------------------------
# The modules. Attribute names are Hugging Face's, so state_dict() keys are its tensor names.


class DebertaV2Embeddings(nn.Module):
    """Word embeddings, then LayerNorm, then the padding mask (no absolute positions, no token
    types: position_biased_input false, type_vocab_size 0)."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], d, padding_idx=cfg["pad_token_id"])
        self.LayerNorm = nn.LayerNorm(d, eps=cfg["layer_norm_eps"])
        self.dropout = nn.Dropout(cfg["hidden_dropout_prob"])

    def forward(self, ids, mask):
        x = self.LayerNorm(self.word_embeddings(ids))
        return self.dropout(x * mask[..., None].to(x.dtype))


class DisentangledSelfAttention(nn.Module):
    """Content-to-content, content-to-position and position-to-content terms, the position
    projections sharing the content ones (share_att_key), all scaled by 1 / sqrt(3 d_head)."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.d_head = d // self.heads
        self.query_proj = nn.Linear(d, d)
        self.key_proj = nn.Linear(d, d)
        self.value_proj = nn.Linear(d, d)
        self.span = cfg["position_buckets"] if cfg["position_buckets"] > 0 else cfg["max_position_embeddings"]
        self.dropout = nn.Dropout(cfg["attention_probs_dropout_prob"])
        self.pos_dropout = nn.Dropout(cfg["hidden_dropout_prob"])

    def split(self, x):
        """[..., n, d] -> [..., heads, n, d_head]"""
        return x.view(*x.shape[:-1], self.heads, self.d_head).transpose(-3, -2)

    def forward(self, x, mask2d, rel, idx):
        # x [b, n, d]; mask2d [b, 1, n, n] bool (True: attend); rel [2 span, d]; idx [n, n]
        b, n, d = x.shape
        q, k, v = self.split(self.query_proj(x)), self.split(self.key_proj(x)), self.split(self.value_proj(x))
        rel = self.pos_dropout(rel)
        rq = self.split(self.query_proj(rel))   # [heads, 2 span, d_head]: the p2c table
        rk = self.split(self.key_proj(rel))     # the c2p table
        scale = 1.0 / math.sqrt(self.d_head * 3)
        e = q @ k.transpose(-1, -2)
        g = idx.expand(b, self.heads, n, n)
        e = e + torch.gather(q @ rk.transpose(-1, -2), -1, g)                 # q_i . Rk[b(i,j)]
        # k_j . Rq[b(i,j)]: gather row j of K Rq^T at b(i, j), i.e. at idx^T[j, i], then transpose
        e = e + torch.gather(k @ rq.transpose(-1, -2), -1, g.transpose(-1, -2)).transpose(-1, -2)
        e = (e * scale).masked_fill(~mask2d, torch.finfo(e.dtype).min)
        a = torch.softmax(e, dim=-1).masked_fill(~mask2d, 0.0)
        z = self.dropout(a) @ v
        return z.transpose(1, 2).reshape(b, n, d)


class DebertaV2SelfOutput(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.dense = nn.Linear(d, d)
        self.LayerNorm = nn.LayerNorm(d, eps=cfg["layer_norm_eps"])
        self.dropout = nn.Dropout(cfg["hidden_dropout_prob"])

    def forward(self, z, x):
        return self.LayerNorm(x + self.dropout(self.dense(z)))


class DebertaV2Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self = DisentangledSelfAttention(cfg)
        self.output = DebertaV2SelfOutput(cfg)

    def forward(self, x, mask2d, rel, idx):
        return self.output(self.self(x, mask2d, rel, idx), x)


class DebertaV2Intermediate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg["hidden_size"], cfg["intermediate_size"])

    def forward(self, x):
        return F.gelu(self.dense(x))  # hidden_act gelu: the erf form


class DebertaV2Output(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.dense = nn.Linear(cfg["intermediate_size"], d)
        self.LayerNorm = nn.LayerNorm(d, eps=cfg["layer_norm_eps"])
        self.dropout = nn.Dropout(cfg["hidden_dropout_prob"])

    def forward(self, h, x):
        return self.LayerNorm(x + self.dropout(self.dense(h)))


class DebertaV2Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = DebertaV2Attention(cfg)
        self.intermediate = DebertaV2Intermediate(cfg)
        self.output = DebertaV2Output(cfg)

    def forward(self, x, mask2d, rel, idx):
        x = self.attention(x, mask2d, rel, idx)
        return self.output(self.intermediate(x), x)


class DebertaV2Encoder(nn.Module):
    """The layers, and the relative embeddings they share, through their LayerNorm."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.layer = nn.ModuleList(DebertaV2Layer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.buckets = cfg["position_buckets"]
        self.max_rel = cfg["max_relative_positions"]
        if self.max_rel < 1:
            self.max_rel = cfg["max_position_embeddings"]
        span = self.buckets if self.buckets > 0 else self.max_rel
        self.rel_embeddings = nn.Embedding(2 * span, d)
        self.LayerNorm = nn.LayerNorm(d, eps=cfg["layer_norm_eps"])

    def forward(self, x, mask):
        n = x.shape[1]
        m = mask.bool()
        mask2d = (m[:, None, :, None] & m[:, None, None, :])  # [b, 1, n, n]
        idx = bucket_index(n, self.buckets, self.max_rel)
        # only the rows idx reaches: the same numbers, without the [b, heads, n, 2 span] products
        # of rows no pair of positions uses (most of them, for short inputs); the range stays a
        # tensor, so torch.onnx.export traces it for every length (Python ints would freeze the
        # traced input's range into the graph)
        lo = idx.min()
        rel = self.LayerNorm(self.rel_embeddings(torch.arange(lo, idx.max() + 1)))
        idx = idx - lo
        for layer in self.layer:
            x = layer(x, mask2d, rel, idx)
        return x


class DebertaV2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = DebertaV2Embeddings(cfg)
        self.encoder = DebertaV2Encoder(cfg)

    def forward(self, ids, mask):
        return self.encoder(self.embeddings(ids, mask), mask)


class ContextPooler(nn.Module):
    """The final hidden state of the first token ([CLS]) through a dense layer and gelu."""

    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg["pooler_hidden_size"], cfg["pooler_hidden_size"])
        self.dropout = nn.Dropout(cfg["pooler_dropout"])

    def forward(self, x):
        return F.gelu(self.dense(self.dropout(x[:, 0])))


class DebertaV2ForSequenceClassification(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.deberta = DebertaV2Model(cfg)
        self.pooler = ContextPooler(cfg)
        self.dropout = nn.Dropout(cfg["hidden_dropout_prob"])
        self.classifier = nn.Linear(cfg["pooler_hidden_size"], len(cfg["id2label"]))

    @torch.no_grad()
    def init_weights(self, gen):
        """DebertaV2PreTrainedModel._init_weights: N(0, initializer_range) for linear and embedding
        weights, zero biases and padding row, LayerNorm 1 and 0."""
        std = self.config["initializer_range"]
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                mod.weight.normal_(0.0, std, generator=gen)
            if isinstance(mod, nn.Linear):
                mod.bias.zero_()
            if isinstance(mod, nn.Embedding) and mod.padding_idx is not None:
                mod.weight[mod.padding_idx].zero_()
            if isinstance(mod, nn.LayerNorm):
                mod.weight.fill_(1.0)
                mod.bias.zero_()

    def forward(self, ids, mask=None):
        """ids [b, n] long (each row [CLS] ... [SEP] [PAD]...), mask [b, n] (1 real, 0 padding)
        -> logits [b, labels]"""
        if mask is None:
            mask = torch.ones_like(ids)
        x = self.deberta(ids, mask)
        return self.classifier(self.dropout(self.pooler(x)))


# ---------------------------------------------------------------------------------------------
# Files: config.json and model.safetensors (float32, Hugging Face's names, no metadata needed)


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: float tensor}, written as F32 in the given order."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        raw = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    pathlib.Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """-> {name: float32 tensor} (F32, F16 and BF16)."""
    import numpy as np
    blob = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data, out = blob[8 + n:], {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        raw = data[b:end]
        if e["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view("<f4")
        else:
            a = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2"}[e["dtype"]]).astype(np.float32)
        out[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return out


def save_pretrained(model, directory):
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(model.config, indent=2) + "\n")
    write_safetensors(d / "model.safetensors", model.state_dict(), {"format": "pt"})


def from_pretrained(directory):
    d = pathlib.Path(directory)
    cfg = json.loads((d / "config.json").read_text())
    model = DebertaV2ForSequenceClassification(cfg)
    model.load_state_dict(read_safetensors(d / "model.safetensors"))
    return model.eval()
