"""Float64 numpy ports of the Hugging Face classes' forward passes, for the
import tests: written from transformers' own source (each function names
the file and class it follows), on the tensors of a checkpoint under HF's
names, for one unpadded sequence (batch 1, no attention mask: every mask
in those forwards is then all ones, and dropout is off at inference).

    out = forward(ck.config, ck.params, ids, token_types)
    out["hidden"]       (n, d) last_hidden_state
    out["pooled"]       (d,)   BertPooler / ContextPooler output, when the class has one
    out["logits"]       (L,)   *ForSequenceClassification logits
    out["mlm_logits"]   (n, V) *ForMaskedLM prediction scores
    out["token_logits"] (n, L) *ForTokenClassification logits

Shares no code with relattn's C nor with tests/sql's reference model.
"""
import math

import numpy as np


# ---- shared pieces ---------------------------------------------------------

def _gelu_erf(x):
    # transformers/activations.py GELUActivation: x * Phi(x), the erf form
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    # transformers/activations.py NewGELUActivation ("gelu_new"; also
    # PytorchGELUTanh "gelu_pytorch_tanh"): the tanh approximation
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


ACT2FN = {"gelu": _gelu_erf, "gelu_new": _gelu_tanh,
          "gelu_pytorch_tanh": _gelu_tanh, "relu": lambda x: np.maximum(x, 0.0),
          "tanh": np.tanh}


def layer_norm(x, w, b, eps):
    # torch.nn.LayerNorm: biased variance over the last dimension
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


class Params:
    """The checkpoint's tensors in float64, looked up under the base
    model's prefix (what from_pretrained does when a file's names carry
    'bert.' / 'deberta.' or not)."""

    def __init__(self, params, prefix):
        self.p = {k: np.asarray(v, np.float64) for k, v in params.items()}
        names = list(self.p)
        self.pre = prefix if any(n.startswith(prefix) for n in names) else ""

    def __getitem__(self, name):           # a tensor of the base model
        return self.p[self.pre + name]

    def head(self, name):                  # a tensor of the head (no prefix)
        return self.p[name]

    def has(self, name):
        return self.pre + name in self.p

    def has_head(self, name):
        return name in self.p

    def linear(self, x, name, bias=True, head=False):
        get = self.head if head else self.__getitem__
        y = x @ get(name + ".weight").T
        return y + get(name + ".bias") if bias else y


def heads_split(x, h):
    """(n, h*dh) -> (h, n, dh), as transpose_for_scores."""
    n = x.shape[0]
    return x.reshape(n, h, -1).transpose(1, 0, 2)


def heads_merge(x):
    h, n, dh = x.shape
    return x.transpose(1, 0, 2).reshape(n, h * dh)


# ---- BERT: transformers/models/bert/modeling_bert.py ------------------------

def bert_embeddings(cfg, P, ids, types):
    # BertEmbeddings.forward: word + token_type (+ position only when
    # position_embedding_type is "absolute"), then LayerNorm
    x = P["embeddings.word_embeddings.weight"][ids]
    x = x + P["embeddings.token_type_embeddings.weight"][types]
    if cfg.get("position_embedding_type", "absolute") == "absolute":
        x = x + P["embeddings.position_embeddings.weight"][np.arange(len(ids))]
    return layer_norm(x, P["embeddings.LayerNorm.weight"],
                      P["embeddings.LayerNorm.bias"], cfg["layer_norm_eps"])


def bert_self_attention(cfg, P, L, x):
    # BertSelfAttention.forward, position_embedding_type relative_key /
    # relative_key_query: distance l - r looked up at distance + M - 1 in the
    # layer's distance_embedding; scores / sqrt(head size) after the terms
    h = cfg["num_attention_heads"]
    kind = cfg.get("position_embedding_type", "absolute")
    q = heads_split(P.linear(x, L + "attention.self.query"), h)
    k = heads_split(P.linear(x, L + "attention.self.key"), h)
    v = heads_split(P.linear(x, L + "attention.self.value"), h)
    dh = q.shape[-1]
    n = x.shape[0]
    scores = q @ k.transpose(0, 2, 1)
    if kind in ("relative_key", "relative_key_query"):
        M = cfg["max_position_embeddings"]
        dist = np.arange(n)[:, None] - np.arange(n)[None, :]
        pos = P[L + "attention.self.distance_embedding.weight"][dist + M - 1]  # (l, r, dh)
        scores = scores + np.einsum("hld,lrd->hlr", q, pos)
        if kind == "relative_key_query":
            scores = scores + np.einsum("hrd,lrd->hlr", k, pos)
    probs = softmax(scores / math.sqrt(dh))
    return heads_merge(probs @ v)


def post_norm_layer(cfg, P, L, context, x):
    # What follows the self-attention in BertLayer, and in DebertaV2Layer,
    # which has the same modules: BertSelfOutput (dense, LayerNorm of the
    # residual sum), BertIntermediate (dense, hidden_act), BertOutput (dense,
    # LayerNorm of the residual sum). context is the attention's output.
    eps = cfg["layer_norm_eps"]
    a = P.linear(context, L + "attention.output.dense")
    x = layer_norm(a + x, P[L + "attention.output.LayerNorm.weight"],
                   P[L + "attention.output.LayerNorm.bias"], eps)
    f = ACT2FN[cfg["hidden_act"]](P.linear(x, L + "intermediate.dense"))
    f = P.linear(f, L + "output.dense")
    return layer_norm(f + x, P[L + "output.LayerNorm.weight"],
                      P[L + "output.LayerNorm.bias"], eps)


def bert_layer(cfg, P, i, x):
    # BertLayer: BertAttention (self + BertSelfOutput), BertIntermediate,
    # BertOutput
    L = f"encoder.layer.{i}."
    return post_norm_layer(cfg, P, L, bert_self_attention(cfg, P, L, x), x)


def bert_forward(cfg, params, ids, types):
    cls = cfg["architectures"][0]
    P = Params(params, "bert.")
    x = bert_embeddings(cfg, P, ids, types)
    for i in range(cfg["num_hidden_layers"]):
        x = bert_layer(cfg, P, i, x)
    out = {"hidden": x}
    if P.has("pooler.dense.weight") and cls != "BertForMaskedLM":
        # BertPooler: tanh(dense(first token))
        out["pooled"] = np.tanh(P.linear(x[0], "pooler.dense"))
    if cls == "BertForSequenceClassification":
        # BertForSequenceClassification: classifier(dropout(pooled_output))
        out["logits"] = P.linear(out["pooled"], "classifier", head=True)
    if cls == "BertForTokenClassification":
        # BertForTokenClassification (BertModel without its pooler):
        # classifier(dropout(sequence_output)) on every row
        out.pop("pooled", None)
        out["token_logits"] = P.linear(x, "classifier", head=True)
    if cls in ("BertForMaskedLM", "BertForPreTraining"):
        # BertOnlyMLMHead (BertForPreTraining: BertPreTrainingHeads, whose
        # .predictions is the same; its seq_relationship is not ported)
        # -> BertLMPredictionHead: transform (dense,
        # hidden_act, LayerNorm), decoder tied to the word embeddings, + bias
        t = P.linear(x, "cls.predictions.transform.dense", head=True)
        t = ACT2FN[cfg["hidden_act"]](t)
        t = layer_norm(t, P.head("cls.predictions.transform.LayerNorm.weight"),
                       P.head("cls.predictions.transform.LayerNorm.bias"),
                       cfg["layer_norm_eps"])
        out["mlm_logits"] = (t @ P["embeddings.word_embeddings.weight"].T
                             + P.head("cls.predictions.bias"))
    return out


# ---- DeBERTa-v2: transformers/models/deberta_v2/modeling_deberta_v2.py -----

def make_log_bucket_position(relative_pos, bucket_size, max_position):
    # make_log_bucket_position: |r| < mid kept; farther on a log scale,
    # ceil(log(|r| / mid) / log((max_position - 1) / mid) * (mid - 1)) + mid,
    # signed. torch computes the log part in float32 (long / int -> float32,
    # the python scalar as a float32 tensor): so does this port.
    rel = np.asarray(relative_pos, np.int64)
    sign = np.sign(rel)
    mid = bucket_size // 2
    abs_pos = np.where((rel < mid) & (rel > -mid), mid - 1, np.abs(rel))
    ratio = abs_pos.astype(np.float32) / np.float32(mid)
    denom = np.log(np.float32((max_position - 1) / mid))
    log_pos = np.ceil(np.log(ratio) / denom * np.float32(mid - 1)) + np.float32(mid)
    bucket = np.where(abs_pos <= mid, rel.astype(np.float32), log_pos * sign)
    return bucket.astype(np.int64)


def build_relative_position(query_size, key_size, bucket_size=-1, max_position=-1):
    # build_relative_position: q_ids[:, None] - k_ids[None, :], log-bucketed
    # when both sizes are positive
    rel = np.arange(query_size)[:, None] - np.arange(key_size)[None, :]
    if bucket_size > 0 and max_position > 0:
        rel = make_log_bucket_position(rel, bucket_size, max_position)
    return rel.astype(np.int64)


def _pos_att_type(cfg):
    # DebertaV2Config: a string "p2c|c2p" is split on '|'
    t = cfg.get("pos_att_type")
    if t is None:
        return []
    if isinstance(t, str):
        return [x.strip() for x in t.lower().split("|")]
    return list(t)


def _deberta_spans(cfg):
    # DebertaV2Encoder / DisentangledSelfAttention: max_relative_positions < 1
    # falls back to max_position_embeddings; the span is position_buckets
    # when over 0
    mrp = cfg.get("max_relative_positions", -1)
    if mrp < 1:
        mrp = cfg["max_position_embeddings"]
    buckets = cfg.get("position_buckets", -1)
    return buckets, mrp, (buckets if buckets > 0 else mrp)


def deberta_embeddings(cfg, P, ids, types):
    # DebertaV2Embeddings.forward: word (+ position when position_biased_input)
    # (+ token_type when type_vocab_size > 0), LayerNorm, times the all-ones mask
    x = P["embeddings.word_embeddings.weight"][ids]
    if cfg.get("position_biased_input", True):
        x = x + P["embeddings.position_embeddings.weight"][np.arange(len(ids))]
    if cfg.get("type_vocab_size", 0) > 0:
        x = x + P["embeddings.token_type_embeddings.weight"][types]
    return layer_norm(x, P["embeddings.LayerNorm.weight"],
                      P["embeddings.LayerNorm.bias"], cfg["layer_norm_eps"])


def deberta_rel_embeddings(cfg, P):
    # DebertaV2Encoder.get_rel_embedding: rel_embeddings.weight, through the
    # encoder's LayerNorm when norm_rel_ebd has "layer_norm"
    E = P["encoder.rel_embeddings.weight"]
    norm = [x.strip() for x in str(cfg.get("norm_rel_ebd", "none")).lower().split("|")]
    if "layer_norm" in norm:
        E = layer_norm(E, P["encoder.LayerNorm.weight"], P["encoder.LayerNorm.bias"],
                       cfg["layer_norm_eps"])
    return E


def disentangled_self_attention(cfg, P, L, x, rel_pos, rel_emb):
    # DisentangledSelfAttention.forward and .disentangled_attention_bias:
    # scale = sqrt(head size * (1 + number of c2p/p2c terms)) divides the
    # content score and each position term; c2p = q . pos_key at
    # clamp(rel + span, 0, 2 span - 1), p2c = k . pos_query gathered at
    # clamp(-rel + span, ...) on the key side, then transposed. pos_key /
    # pos_query are the rel embeddings (first 2 span rows) through key_proj /
    # query_proj (share_att_key) or pos_key_proj / pos_query_proj.
    h = cfg["num_attention_heads"]
    A = L + "attention.self."
    q = heads_split(P.linear(x, A + "query_proj"), h)
    k = heads_split(P.linear(x, A + "key_proj"), h)
    v = heads_split(P.linear(x, A + "value_proj"), h)
    dh = q.shape[-1]
    types = _pos_att_type(cfg)
    scale_factor = 1 + ("c2p" in types) + ("p2c" in types)
    scale = math.sqrt(dh * scale_factor)
    scores = q @ k.transpose(0, 2, 1) / scale
    if cfg.get("relative_attention", False):
        _, _, span = _deberta_spans(cfg)
        E = rel_emb[:2 * span]
        share = cfg.get("share_att_key", False)
        if "c2p" in types:
            pk = heads_split(P.linear(E, A + ("key_proj" if share else "pos_key_proj")), h)
            c2p = q @ pk.transpose(0, 2, 1)                          # (h, n, 2 span)
            idx = np.clip(rel_pos + span, 0, 2 * span - 1)           # (n, n)
            scores = scores + np.take_along_axis(
                c2p, np.broadcast_to(idx, (h,) + idx.shape), -1) / scale
        if "p2c" in types:
            pq = heads_split(P.linear(E, A + ("query_proj" if share else "pos_query_proj")), h)
            p2c = k @ pq.transpose(0, 2, 1)                          # (h, n_key, 2 span)
            idx = np.clip(-rel_pos + span, 0, 2 * span - 1)
            g = np.take_along_axis(p2c, np.broadcast_to(idx, (h,) + idx.shape), -1)
            scores = scores + g.transpose(0, 2, 1) / scale
    return heads_merge(softmax(scores) @ v)


def deberta_layer(cfg, P, i, x, rel_pos, rel_emb):
    # DebertaV2Layer: DebertaV2Attention (self + DebertaV2SelfOutput),
    # DebertaV2Intermediate, DebertaV2Output
    L = f"encoder.layer.{i}."
    context = disentangled_self_attention(cfg, P, L, x, rel_pos, rel_emb)
    return post_norm_layer(cfg, P, L, context, x)


def deberta_forward(cfg, params, ids, types):
    cls = cfg["architectures"][0]
    P = Params(params, "deberta.")
    if cfg.get("conv_kernel_size", 0) > 0:
        raise NotImplementedError("ConvLayer is not ported")
    x = deberta_embeddings(cfg, P, ids, types)
    buckets, mrp, _ = _deberta_spans(cfg)
    n = len(ids)
    # DebertaV2Encoder.get_rel_pos / forward: one relative_pos for all layers
    rel_pos = build_relative_position(n, n, buckets, mrp)
    rel_emb = deberta_rel_embeddings(cfg, P) if cfg.get("relative_attention") else None
    for i in range(cfg["num_hidden_layers"]):
        x = deberta_layer(cfg, P, i, x, rel_pos, rel_emb)
    out = {"hidden": x}
    eps = cfg["layer_norm_eps"]
    if cls == "DebertaV2ForSequenceClassification":
        # ContextPooler: pooler_hidden_act(dense(first token)); classifier
        act = ACT2FN[cfg.get("pooler_hidden_act", "gelu")]
        out["pooled"] = act(P.linear(x[0], "pooler.dense", head=True))
        out["logits"] = P.linear(out["pooled"], "classifier", head=True)
    if cls == "DebertaV2ForTokenClassification":
        # DebertaV2ForTokenClassification: classifier(dropout(sequence_output))
        out["token_logits"] = P.linear(x, "classifier", head=True)
    if cls == "DebertaV2ForMaskedLM":
        act = ACT2FN[cfg["hidden_act"]]
        E = P["embeddings.word_embeddings.weight"]
        if P.has_head("lm_predictions.lm_head.dense.weight"):
            # DebertaV2OnlyMLMHead -> DebertaV2LMPredictionHead (legacy false):
            # dense, act, LayerNorm, @ word_embeddings^T + bias
            H = "lm_predictions.lm_head."
            t = act(P.linear(x, H + "dense", head=True))
            t = layer_norm(t, P.head(H + "LayerNorm.weight"), P.head(H + "LayerNorm.bias"), eps)
            out["mlm_logits"] = t @ E.T + P.head(H + "bias")
        else:
            # LegacyDebertaV2OnlyMLMHead -> LegacyDebertaV2LMPredictionHead:
            # transform (dense, act, LayerNorm), decoder tied to the word
            # embeddings, + bias
            H = "cls.predictions."
            t = act(P.linear(x, H + "transform.dense", head=True))
            t = layer_norm(t, P.head(H + "transform.LayerNorm.weight"),
                           P.head(H + "transform.LayerNorm.bias"), eps)
            out["mlm_logits"] = t @ E.T + P.head(H + "bias")
    return out


# ---- T5: transformers/models/t5/modeling_t5.py -------------------------------

def t5_relative_position_bucket(relative_position, bidirectional=True,
                                num_buckets=32, max_distance=128):
    # T5Attention._relative_position_bucket: half the buckets per direction
    # when bidirectional (positive distances in the upper half); within a
    # half, distances below max_exact = half/2 exact, then log-spaced up to
    # max_distance, capped at the half's last bucket. The log part runs on a
    # float32 tensor (relative_position.float()), truncated by .to(long).
    rp = np.asarray(relative_position, np.int64)
    buckets = np.zeros_like(rp)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rp > 0).astype(np.int64) * num_buckets
        rp = np.abs(rp)
    else:
        rp = -np.minimum(rp, 0)
    max_exact = num_buckets // 2
    is_small = rp < max_exact
    with np.errstate(divide="ignore"):
        large = (np.log(rp.astype(np.float32) / np.float32(max_exact))
                 / np.float32(math.log(max_distance / max_exact))
                 * np.float32(num_buckets - max_exact))
    large = max_exact + np.where(is_small, 0, large).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(is_small, rp, large)


def t5_layer_norm(x, w, eps):
    # T5LayerNorm: x * rsqrt(mean(x^2) + eps) * weight; no mean, no bias
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def t5_feed_forward_act(cfg):
    # T5Config.__init__: feed_forward_proj "gated-ACT" or "ACT";
    # "gated-gelu" means gelu_new
    proj = cfg.get("feed_forward_proj", "relu")
    parts = proj.split("-")
    gated = parts[0] == "gated" and len(parts) == 2
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]
    return gated, act


def t5_encoder_forward(cfg, params, ids):
    # T5Stack (encoder): embed_tokens (= shared); per T5Block: T5LayerSelfAttention
    # (x + SelfAttention(layer_norm(x)), position_bias from block 0's
    # relative_attention_bias reused by every block, scores q.k^T + bias, no
    # scaling) and T5LayerFF (x + DenseReluDense(layer_norm(x))); then
    # final_layer_norm
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    eps = cfg["layer_norm_epsilon"]
    h = cfg["num_heads"]
    gated, act_name = t5_feed_forward_act(cfg)
    act = ACT2FN[act_name]
    emb = p.get("encoder.embed_tokens.weight", p["shared.weight"])
    x = emb[np.asarray(ids)]
    n = len(ids)
    # T5Attention.compute_bias: relative_position = memory - context (j - i)
    rel = np.arange(n)[None, :] - np.arange(n)[:, None]
    b = t5_relative_position_bucket(rel, True, cfg["relative_attention_num_buckets"],
                                    cfg["relative_attention_max_distance"])
    table = p["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    bias = table[b].transpose(2, 0, 1)                              # (h, n, n)
    for i in range(cfg["num_layers"]):
        B = f"encoder.block.{i}.layer."
        y = t5_layer_norm(x, p[B + "0.layer_norm.weight"], eps)
        S = B + "0.SelfAttention."
        q = heads_split(y @ p[S + "q.weight"].T, h)
        k = heads_split(y @ p[S + "k.weight"].T, h)
        v = heads_split(y @ p[S + "v.weight"].T, h)
        a = softmax(q @ k.transpose(0, 2, 1) + bias) @ v
        x = x + heads_merge(a) @ p[S + "o.weight"].T
        y = t5_layer_norm(x, p[B + "1.layer_norm.weight"], eps)
        D = B + "1.DenseReluDense."
        if gated:   # T5DenseGatedActDense: act(wi_0 y) * (wi_1 y), then wo
            f = act(y @ p[D + "wi_0.weight"].T) * (y @ p[D + "wi_1.weight"].T)
        else:       # T5DenseActDense: act(wi y), then wo
            f = act(y @ p[D + "wi.weight"].T)
        x = x + f @ p[D + "wo.weight"].T
    x = t5_layer_norm(x, p["encoder.final_layer_norm.weight"], eps)
    return {"hidden": x}


def t5_shift_right(cfg, labels):
    # T5PreTrainedModel._shift_right: decoder_start_token_id in front, the
    # labels shifted one to the right (the last dropped)
    return np.concatenate([[cfg["decoder_start_token_id"]], np.asarray(labels)[:-1]])


def t5_conditional_generation_forward(cfg, params, ids, decoder_ids):
    # T5ForConditionalGeneration.forward: encoder (T5Stack above), then the
    # decoder T5Stack over decoder_input_ids (embed_tokens = shared). Each
    # decoder T5Block: T5LayerSelfAttention with the decoder's own block-0
    # relative_attention_bias, unidirectional buckets (is_decoder:
    # bidirectional=not self.is_decoder) and the causal mask; then
    # T5LayerCrossAttention (x + EncDecAttention(layer_norm(x), encoder
    # hidden states)), whose position_bias is zeros (no relative bias);
    # then T5LayerFF; final_layer_norm. Logits: lm_head(sequence_output),
    # sequence_output scaled by d_model**-0.5 when tie_word_embeddings
    # (lm_head then is shared).
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    enc = t5_encoder_forward(cfg, params, ids)["hidden"]
    eps = cfg["layer_norm_epsilon"]
    h = cfg["num_heads"]
    gated, act_name = t5_feed_forward_act(cfg)
    act = ACT2FN[act_name]
    tied = cfg.get("tie_word_embeddings", True)
    x = p["shared.weight"][np.asarray(decoder_ids)]
    n = len(decoder_ids)
    rel = np.arange(n)[None, :] - np.arange(n)[:, None]
    b = t5_relative_position_bucket(rel, False, cfg["relative_attention_num_buckets"],
                                    cfg["relative_attention_max_distance"])
    table = p["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    bias = table[b].transpose(2, 0, 1)                              # (h, n, n)
    bias = bias + np.where(rel > 0, -np.inf, 0.0)[None]             # causal mask
    for i in range(cfg.get("num_decoder_layers", cfg["num_layers"])):
        B = f"decoder.block.{i}.layer."
        y = t5_layer_norm(x, p[B + "0.layer_norm.weight"], eps)
        S = B + "0.SelfAttention."
        q = heads_split(y @ p[S + "q.weight"].T, h)
        k = heads_split(y @ p[S + "k.weight"].T, h)
        v = heads_split(y @ p[S + "v.weight"].T, h)
        a = softmax(q @ k.transpose(0, 2, 1) + bias) @ v
        x = x + heads_merge(a) @ p[S + "o.weight"].T
        y = t5_layer_norm(x, p[B + "1.layer_norm.weight"], eps)
        C = B + "1.EncDecAttention."
        q = heads_split(y @ p[C + "q.weight"].T, h)
        k = heads_split(enc @ p[C + "k.weight"].T, h)
        v = heads_split(enc @ p[C + "v.weight"].T, h)
        a = softmax(q @ k.transpose(0, 2, 1)) @ v
        x = x + heads_merge(a) @ p[C + "o.weight"].T
        y = t5_layer_norm(x, p[B + "2.layer_norm.weight"], eps)
        D = B + "2.DenseReluDense."
        if gated:
            f = act(y @ p[D + "wi_0.weight"].T) * (y @ p[D + "wi_1.weight"].T)
        else:
            f = act(y @ p[D + "wi.weight"].T)
        x = x + f @ p[D + "wo.weight"].T
    x = t5_layer_norm(x, p["decoder.final_layer_norm.weight"], eps)
    if tied:
        logits = (x * cfg["d_model"] ** -0.5) @ p["shared.weight"].T
    else:
        logits = x @ p["lm_head.weight"].T
    return {"encoder_hidden": enc, "decoder_hidden": x, "logits": logits}


# ---- dispatch ----------------------------------------------------------------

def mean_pooling(hidden, attention_mask=None):
    """sentence-transformers' Pooling.forward with pooling_mode_mean_tokens
    (sentence_transformers/models/Pooling.py): sum(token_embeddings *
    input_mask_expanded, 1) / clamp(input_mask_expanded.sum(1), min=1e-9).
    The tokenizer's attention_mask is 1 on every token of an unpadded
    input, [CLS] and [SEP] (T5's </s>) included."""
    hidden = np.asarray(hidden, np.float64)
    mask = (np.ones(hidden.shape[0]) if attention_mask is None
            else np.asarray(attention_mask, np.float64))
    return (hidden * mask[:, None]).sum(0) / max(mask.sum(), 1e-9)


def forward(cfg, params, ids, types=None):
    ids = np.asarray(ids, np.int64)
    if types is None:
        types = np.zeros_like(ids)
    types = np.asarray(types, np.int64)
    kind = cfg["model_type"]
    if kind == "bert":
        return bert_forward(cfg, params, ids, types)
    if kind == "deberta-v2":
        return deberta_forward(cfg, params, ids, types)
    if kind in ("t5", "mt5"):
        return t5_encoder_forward(cfg, params, ids)
    raise ValueError(kind)


# ---- sentence-transformers' modules after the encoder ----------------------

def st_pooling(hidden, modes, attention_mask=None):
    """sentence_transformers/models/Pooling.py, Pooling.forward, for one
    sequence: the modes it has, concatenated in its order (cls, max, mean,
    mean_sqrt_len, weightedmean, lasttoken). cls is token_embeddings[:, 0];
    max sets masked rows to -1e9 first; mean and mean_sqrt_len divide the
    masked sum by clamp(count, 1e-9) and its sqrt; weightedmean weights row
    i by i + 1 (torch.arange(1, seq_len + 1)) inside the mask; lasttoken
    takes the last row whose mask is 1."""
    x = np.asarray(hidden, np.float64)
    n = x.shape[0]
    mask = (np.ones(n) if attention_mask is None
            else np.asarray(attention_mask, np.float64))
    out = []
    if "cls" in modes:
        out.append(x[0])
    if "max" in modes:
        out.append(np.where(mask[:, None] == 0, -1e9, x).max(0))
    if "mean" in modes or "mean_sqrt_len" in modes:
        s = (x * mask[:, None]).sum(0)
        count = max(mask.sum(), 1e-9)
        if "mean" in modes:
            out.append(s / count)
        if "mean_sqrt_len" in modes:
            out.append(s / math.sqrt(count))
    if "weightedmean" in modes:
        w = mask * np.arange(1, n + 1)
        out.append((x * w[:, None]).sum(0) / max(w.sum(), 1e-9))
    if "lasttoken" in modes:
        last = int(np.nonzero(mask)[0].max()) if mask.any() else n - 1
        out.append(x[last] * mask[last])
    return np.concatenate(out)


def st_dense(v, W, b, act):
    """Dense.py: activation_function(linear(sentence_embedding)), torch's
    Tanh, Identity, ReLU, GELU (erf form, approximate='none'), Sigmoid."""
    y = np.asarray(W, np.float64) @ v
    if b is not None:
        y = y + np.asarray(b, np.float64)
    return {"tanh": np.tanh, "identity": lambda t: t,
            "relu": lambda t: np.maximum(t, 0), "gelu": _gelu_erf,
            "sigmoid": lambda t: 1 / (1 + np.exp(-t))}[act](y)


def st_encode(hidden, sd):
    """SentenceTransformer.encode's vector of one text: the Transformer's
    last_hidden_state through Pooling, each Dense, and Normalize
    (torch.nn.functional.normalize: v / max(||v||_2, 1e-12)); sd is a
    tests/hf/checkpoints.py SentenceDir."""
    v = st_pooling(hidden, sd.pooling)
    for W, b, act in sd.dense:
        v = st_dense(v, W, b, act)
    if sd.normalize:
        v = v / max(np.linalg.norm(v), 1e-12)
    return v
