"""A T5 encoder in PyTorch with Hugging Face's tensor names, for tests/bench/bench_deberta.py's t5
shape (Debian has no python3-transformers).

Written from the algorithm of transformers' T5EncoderModel (src/transformers/models/t5/
modeling_t5.py; Raffel et al. 2020, sec. 2.1): the shared embedding, then per block
  x += o(attention(layer_norm(x)))      scores q k^T + bias, no 1/sqrt(d) scaling
  x += wo(act(wi x'))  or  wo(gelu_new(wi_0 x') * wi_1 x')   x' = layer_norm(x)   (relu / gated-gelu)
and a final layer norm; layer_norm is T5's RMS norm (x / sqrt(mean(x^2) + eps) * weight, no mean,
no bias), and the bias is block 0's relative_attention_bias [buckets, heads] at the bucket of
j - i (half the buckets per direction, the smaller distances exact, the rest log-spaced up to
max_distance), shared by every block. The padded keys of a batch are masked out of the softmax.

    model = T5Encoder(config)                       # config: a T5 config.json as a dict
    model.load_state_dict(tensors, strict=False)    # HF's names: shared.weight, encoder.block.0...
    hidden = model(ids, mask)                       # [b, n, d_model]

The names are HF's, so the weights of tests/hf/checkpoints.py's t5() load as they are
(encoder.embed_tokens.weight, tied to shared.weight, may be absent)."""
import math

import torch
from torch import nn


def relative_bucket(rel, num_buckets, max_distance):
    """The bidirectional bucket of each distance rel = j - i (a long tensor): positive distances
    in the upper half; within a half, |rel| < half/2 its own bucket, then log-spaced (in float32,
    truncated) up to max_distance, capped at the half's last bucket."""
    half = num_buckets // 2
    bucket = (rel > 0).to(torch.long) * half
    a = rel.abs()
    exact = half // 2
    big = exact + (torch.log(a.float() / exact) / math.log(max_distance / exact)
                   * (half - exact)).to(torch.long)
    big = torch.minimum(big, torch.full_like(big, half - 1))
    return bucket + torch.where(a < exact, a, big)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, cfg, has_bias):
        super().__init__()
        d, self.h, self.dk = cfg["d_model"], cfg["num_heads"], cfg["d_kv"]
        inner = self.h * self.dk
        self.q = nn.Linear(d, inner, bias=False)
        self.k = nn.Linear(d, inner, bias=False)
        self.v = nn.Linear(d, inner, bias=False)
        self.o = nn.Linear(inner, d, bias=False)
        if has_bias:
            self.relative_attention_bias = nn.Embedding(cfg["relative_attention_num_buckets"], self.h)

    def forward(self, x, bias):
        b, n, _ = x.shape
        split = lambda t: t.view(b, n, self.h, self.dk).transpose(1, 2)   # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        w = torch.softmax(q @ k.transpose(-1, -2) + bias, dim=-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, n, self.h * self.dk))


class DenseReluDense(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, ff = cfg["d_model"], cfg["d_ff"]
        self.gated = cfg.get("feed_forward_proj", "relu") == "gated-gelu"
        if self.gated:
            self.wi_0 = nn.Linear(d, ff, bias=False)
            self.wi_1 = nn.Linear(d, ff, bias=False)
        else:
            self.wi = nn.Linear(d, ff, bias=False)
        self.wo = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        if self.gated:   # gelu_new: the tanh form
            return self.wo(nn.functional.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x))
        return self.wo(torch.relu(self.wi(x)))


class SelfAttentionLayer(nn.Module):   # T5LayerSelfAttention: layer.0
    def __init__(self, cfg, has_bias):
        super().__init__()
        self.SelfAttention = Attention(cfg, has_bias)
        self.layer_norm = RMSNorm(cfg["d_model"], cfg["layer_norm_epsilon"])


class FeedForwardLayer(nn.Module):    # T5LayerFF: layer.1
    def __init__(self, cfg):
        super().__init__()
        self.DenseReluDense = DenseReluDense(cfg)
        self.layer_norm = RMSNorm(cfg["d_model"], cfg["layer_norm_epsilon"])


class Block(nn.Module):
    def __init__(self, cfg, has_bias):
        super().__init__()
        self.layer = nn.ModuleList([SelfAttentionLayer(cfg, has_bias), FeedForwardLayer(cfg)])

    def forward(self, x, bias):
        a, f = self.layer
        x = x + a.SelfAttention(a.layer_norm(x), bias)
        return x + f.DenseReluDense(f.layer_norm(x))


class Stack(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.block = nn.ModuleList([Block(cfg, i == 0) for i in range(cfg["num_layers"])])
        self.final_layer_norm = RMSNorm(cfg["d_model"], cfg["layer_norm_epsilon"])

    def forward(self, x, mask):
        n = x.shape[1]
        pos = torch.arange(n, device=x.device)
        rel = pos[None, :] - pos[:, None]                                   # j - i
        bucket = relative_bucket(rel, self.cfg["relative_attention_num_buckets"],
                                 self.cfg["relative_attention_max_distance"])
        table = self.block[0].layer[0].SelfAttention.relative_attention_bias
        bias = table(bucket).permute(2, 0, 1)[None]                          # [1, h, n, n]
        keep = mask[:, None, None, :].to(x.dtype)                            # [b, 1, 1, n]
        bias = bias + (1.0 - keep) * torch.finfo(x.dtype).min
        for blk in self.block:
            x = blk(x, bias)
        return self.final_layer_norm(x)


class T5Encoder(nn.Module):
    """T5EncoderModel: forward(ids, mask) -> the final hidden states [b, n, d_model]."""

    def __init__(self, cfg):
        super().__init__()
        self.shared = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.encoder = Stack(cfg)

    def forward(self, ids, mask):
        return self.encoder(self.shared(ids), mask)


def from_tensors(cfg, tensors):
    """A T5Encoder in eval mode holding tensors (name -> array, HF's names)."""
    model = T5Encoder(cfg)
    sd = {k: torch.as_tensor(v) for k, v in tensors.items()
          if not k.startswith(("decoder.", "lm_head.")) and k != "encoder.embed_tokens.weight"}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ValueError(f"T5 tensors: missing {missing}, unexpected {unexpected}")
    return model.eval()
