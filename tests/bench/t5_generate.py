"""T5ForConditionalGeneration's greedy generation in PyTorch with a key/value cache, in Hugging
Face's tensor names, for tests/bench/bench_generate_t5.py (Debian has no python3-transformers).

Written from the algorithm of transformers' T5ForConditionalGeneration (src/transformers/models/
t5/modeling_t5.py; Raffel et al. 2020, sec. 2.1) and of generate's greedy search
(generation/utils.py): the source is encoded once by tests/bench/t5_encoder.py's encoder (its
</s> included); the decoder starts from decoder_start_token_id and runs one token per step, each
block
  x += o(self-attention(layer_norm(x)))   scores q k^T + the decoder's own causal relative bias
  x += o(cross-attention(layer_norm(x)))  over the encoder's final states, no bias
  x += wo(relu(wi x')) or wo(gelu_new(wi_0 x') * wi_1 x')           x' = layer_norm(x)
then the decoder's final layer norm and the head: lm_head, or with tied embeddings the shared
embedding on the output scaled by d_model**-0.5. The self-attention bias is block 0's
relative_attention_bias at the unidirectional bucket of the distance i - j of query i to key j
(all buckets for the past, the smaller distances exact, the rest log-spaced up to max_distance),
shared by every block; no 1/sqrt(d) scaling anywhere.

The cache: each block's self-attention keys and values, preallocated for the whole output, one
row written per step; the cross-attention keys and values computed once from the encoder's states
for every block (HF's past_key_values do the same). Per step the bias row is one gather of a
table precomputed by distance. q, k and v of the self-attention are one product (their weights
stacked at load), as are the cross-attention's k and v of all the blocks. A row's products are
torch.mv (a matrix-vector product: at batch 1 about 4x faster here than F.linear on a [1, d]
row, which PyTorch runs as a matrix product).

    gen = T5Generator(config, tensors)          # config: a T5 config.json as a dict
    tokens, logprobs = gen.greedy(src_ids, max_new_tokens, eos=1)   # src_ids with its </s>

Run it under torch.inference_mode() (greedy does) with torch.set_num_threads as wanted."""
import math

import torch
import torch.nn.functional as F

import t5_encoder


def causal_bucket(dist, num_buckets, max_distance):
    """The unidirectional bucket (is_decoder: bidirectional False) of a distance dist = i - j >= 0
    back from the query: dist < num_buckets/2 its own bucket, then log-spaced (in float32,
    truncated) up to max_distance, capped at the last bucket."""
    exact = num_buckets // 2
    big = exact + (torch.log(dist.float() / exact) / math.log(max_distance / exact)
                   * (num_buckets - exact)).to(torch.long)
    big = torch.minimum(big, torch.full_like(big, num_buckets - 1))
    return torch.where(dist < exact, dist, big)


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class T5Generator:
    """The encoder (t5_encoder.T5Encoder) and the decoder's weights as plain float32 tensors."""

    def __init__(self, cfg, tensors):
        self.cfg = cfg
        self.encoder = t5_encoder.from_tensors(cfg, tensors)
        t = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in tensors.items()}
        self.h, self.dk, self.d = cfg["num_heads"], cfg["d_kv"], cfg["d_model"]
        self.eps = cfg["layer_norm_epsilon"]
        self.gated = cfg.get("feed_forward_proj", "relu") == "gated-gelu"
        self.n_layers = cfg.get("num_decoder_layers", cfg["num_layers"])
        self.start = cfg.get("decoder_start_token_id", 0)
        self.emb = t["shared.weight"]
        if cfg.get("tie_word_embeddings", True):
            self.head = self.emb * self.d ** -0.5          # scaling the output = scaling the head
        else:
            self.head = t["lm_head.weight"]
        self.final_norm = t["decoder.final_layer_norm.weight"]
        self.table = t["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
        self.blocks = []
        cross_kv = []
        for i in range(self.n_layers):
            B = f"decoder.block.{i}.layer."
            S, C, D = B + "0.SelfAttention.", B + "1.EncDecAttention.", B + "2.DenseReluDense."
            blk = {
                "ln0": t[B + "0.layer_norm.weight"], "ln1": t[B + "1.layer_norm.weight"],
                "ln2": t[B + "2.layer_norm.weight"],
                "qkv": torch.cat([t[S + "q.weight"], t[S + "k.weight"], t[S + "v.weight"]]),
                "o": t[S + "o.weight"], "cq": t[C + "q.weight"], "co": t[C + "o.weight"],
                "wo": t[D + "wo.weight"],
            }
            if self.gated:
                blk["wi"] = torch.cat([t[D + "wi_0.weight"], t[D + "wi_1.weight"]])
            else:
                blk["wi"] = t[D + "wi.weight"]
            cross_kv += [t[C + "k.weight"], t[C + "v.weight"]]
            self.blocks.append(blk)
        self.cross_kv = torch.cat(cross_kv)                  # [2 * layers * inner, d]

    def bias_by_distance(self, n):
        """[heads, n]: the self-attention bias of a key at distance 0..n-1 back."""
        b = causal_bucket(torch.arange(n), self.cfg["relative_attention_num_buckets"],
                          self.cfg["relative_attention_max_distance"])
        return self.table[b].T.contiguous()

    def greedy(self, src, max_new_tokens, eos=None):
        """Greedy search from decoder_start_token_id: (new tokens, eos included if it came; the
        log-softmax of each chosen token). src: the source ids with its </s>."""
        with torch.inference_mode():
            return self._greedy(src, max_new_tokens, eos)

    def _greedy(self, src, new, eos):
        h, dk, L = self.h, self.dk, self.n_layers
        inner = h * dk
        ids = torch.as_tensor([src], dtype=torch.long)
        enc = self.encoder(ids, torch.ones_like(ids))[0]                  # [m, d]
        m = enc.shape[0]
        ckv = F.linear(enc, self.cross_kv).view(m, 2 * L, h, dk).permute(1, 2, 0, 3)
        ck = [ckv[2 * l].transpose(1, 2).contiguous() for l in range(L)]  # [h, dk, m]
        cv = [ckv[2 * l + 1].contiguous() for l in range(L)]               # [h, m, dk]
        n = new + 1
        kc = torch.zeros(L, h, dk, n)       # keys stored transposed: q @ K is one bmm
        vc = torch.zeros(L, h, n, dk)
        rev = self.bias_by_distance(n).flip(-1).contiguous()   # [h, n]: distance n-1 .. 0
        tok, out, lps = self.start, [], []
        mv = torch.mv
        for i in range(new):
            x = self.emb[tok]                                              # [d]
            bias = rev[:, n - 1 - i:].unsqueeze(1)                         # [h, 1, i+1]
            for l, b in enumerate(self.blocks):
                y = rms(x, b["ln0"], self.eps)
                qkv = mv(b["qkv"], y).view(3, h, dk)
                kc[l, :, :, i] = qkv[1]
                vc[l, :, i] = qkv[2]
                s = torch.baddbmm(bias, qkv[0].unsqueeze(1), kc[l, :, :, :i + 1])
                z = torch.bmm(torch.softmax(s, -1), vc[l, :, :i + 1])      # [h, 1, dk]
                x = x + mv(b["o"], z.view(inner))
                y = rms(x, b["ln1"], self.eps)
                q = mv(b["cq"], y).view(h, 1, dk)
                z = torch.bmm(torch.softmax(torch.bmm(q, ck[l]), -1), cv[l])
                x = x + mv(b["co"], z.view(inner))
                y = rms(x, b["ln2"], self.eps)
                f = mv(b["wi"], y)
                if self.gated:
                    a, g = f.chunk(2)
                    f = F.gelu(a, approximate="tanh") * g
                else:
                    f = torch.relu(f)
                x = x + mv(b["wo"], f)
            x = rms(x, self.final_norm, self.eps)
            logits = mv(self.head, x)
            tok = int(torch.argmax(logits))            # the first of equal maxima: the lower id
            out.append(tok)
            lps.append(float(logits[tok] - torch.logsumexp(logits, 0)))
            if eos is not None and tok == eos:
                break
        return out, lps
