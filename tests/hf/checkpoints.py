"""Tiny random Hugging Face checkpoints in HF's own layout, for the import
tests: a directory with config.json (the keys HF's config classes write),
model.safetensors (HF's tensor names: the module attribute paths of the
class, with or without the base model's prefix, tied copies left out as
save_pretrained leaves them out) and the tokenizer's files (vocab.txt, or a
SentencePiece spm.model / spiece.model trained here, and
tokenizer_config.json).

    ck = bert(tmp_path, rng, "BertForSequenceClassification", "relative_key")
    ck.config, ck.params        # the config.json dict, {HF name: float32 array}
                                # (F16 / BF16 files: the rounded values they hold)
    ck.path("weights")          # model.safetensors; "config", "tokenizer", "tokenizer_config"
    ck.special                  # {"cls": id, "sep": id, "mask": id, ...}
    ck.n_pieces                 # the tokenizer's own ids are 0 .. n_pieces - 1
    ck.encode(text)             # the text's own ids, as HF's tokenizer gives them

The names are those of transformers' modeling_bert.py (BertEmbeddings,
BertSelfAttention, BertPooler, BertOnlyMLMHead), modeling_deberta_v2.py
(DebertaV2Embeddings, DisentangledSelfAttention, DebertaV2Encoder,
ContextPooler, LegacyDebertaV2OnlyMLMHead / DebertaV2OnlyMLMHead) and
modeling_t5.py (T5Stack, T5Attention, T5LayerFF). Weights are random with
scales that keep activations O(1): attention neither flat nor one-hot,
LayerNorm gains near 1, biases small, never zeros.
"""
import io
import json
import math
import pathlib
import random
import re
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tok"))
import safetensors_py  # noqa: E402
import bert_ref  # noqa: E402

WORDS = """the a an of to in and or is was be are were it this that these those
on at by for with from as into over under after before between through about
cat dog bird fish horse house tree river stone road city village table chair
book page letter word line paper sound light water fire earth wind cloud rain
snow sun moon star night day morning evening year week hour minute
small large old new long short high low good bad warm cold dark bright quick
slow green blue red white black yellow happy quiet loud early late
run walk read write sing speak listen open close build carry bring take give
make find keep hold turn move play work learn teach think know see hear
package system kernel file module driver server client network socket thread
debian linux manual license copyright version release install remove update
configure option value default error warning message output input data table
query index column row model token vector matrix layer head weight bias
""".split()


def training_text(n=1500, seed=1):
    """Sentences of WORDS (fixed seed: the tokenizer is the same every run;
    the weights are what is fresh), with capitals, digits and punctuation."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        words = [r.choice(WORDS) for _ in range(r.randint(4, 14))]
        if r.random() < 0.3:
            words[0] = words[0].capitalize()
        if r.random() < 0.2:
            words.insert(r.randint(0, len(words)), str(r.randint(0, 999)))
        out.append(" ".join(words) + r.choice([".", ".", "?", "!", ",", ";"]))
    return out


def sample_text(rng, n_words):
    """A fresh sentence for a test (words the tokenizers know, and a few
    they split into pieces or do not know)."""
    extra = ["Relattn", "untokenizable", "Zürich", "naïve", "42", "x-ray"]
    words = [WORDS[int(i)] for i in rng.integers(0, len(WORDS), n_words)]
    for _ in range(max(1, n_words // 8)):
        words.insert(int(rng.integers(0, len(words) + 1)),
                     extra[int(rng.integers(0, len(extra)))])
    words[0] = words[0].capitalize()
    return " ".join(words) + "."


# ---- tokenizers ------------------------------------------------------------

BERT_SPECIALS = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]",
                 "[MASK]"]


def wordpiece_vocab():
    """A vocab.txt in BERT's layout: specials first ([PAD] 0, [UNK], [CLS],
    [SEP], [MASK] after two unused rows, as bert-base's 0 / 100-103 spread
    out), single characters, '##' continuations, then whole words and a few
    word pieces."""
    toks = list(BERT_SPECIALS)
    chars = "abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"-()"
    toks += list(chars)
    toks += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    toks += sorted(set(WORDS))
    toks += ["##s", "##ed", "##ing", "##er", "##ly", "un", "##able", "##ize"]
    seen, out = set(), []
    for t in toks:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return ("\n".join(out) + "\n").encode("utf-8")


def bert_tokenizer_json(vocab_bytes, lower=True, strip=None, chinese=True,
                        cls="[CLS]", sep="[SEP]", unk="[UNK]"):
    """The tokenizer.json transformers' BertConverter (convert_slow_tokenizer.py)
    writes for a BertTokenizer of this vocab.txt and these options, as the
    Rust library serializes it: BertNormalizer, BertPreTokenizer, WordPiece,
    TemplateProcessing "[CLS]:0 $A:0 [SEP]:0" / "... $B:1 [SEP]:1", the
    WordPiece decoder, and the special tokens among added_tokens. Returns
    the document (a dict)."""
    lines = vocab_bytes.decode("utf-8").split("\n")[:-1]
    vocab = {}
    for i, t in enumerate(lines):       # load_vocab: a later line wins
        vocab[t.rstrip("\r")] = i
    added = [{"id": vocab[t], "content": t, "single_word": False,
              "lstrip": False, "rstrip": False, "normalized": False,
              "special": True}
             for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] if t in vocab]
    added.sort(key=lambda a: a["id"])

    def special(t, type_id):
        return {"SpecialToken": {"id": t, "type_id": type_id}}

    def seq(a, type_id):
        return {"Sequence": {"id": a, "type_id": type_id}}

    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": chinese, "strip_accents": strip,
                       "lowercase": lower},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(cls, 0), seq("A", 0), special(sep, 0)],
            "pair": [special(cls, 0), seq("A", 0), special(sep, 0), seq("B", 1),
                     special(sep, 1)],
            "special_tokens": {t: {"id": t, "ids": [vocab[t]], "tokens": [t]}
                               for t in (cls, sep)}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": unk,
                  "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }


_SPM = {}


def spm_model(kind):
    """A SentencePiece unigram model trained here (python3-sentencepiece)
    on training_text(), once per process. kind 'deberta': DeBERTa-v3's
    spm.model ids ([PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3); 't5': T5's
    spiece.model ids (<pad> 0, </s> 1, <unk> 2, no bos)."""
    if kind in _SPM:
        return _SPM[kind]
    import sentencepiece as spm
    if kind == "deberta":
        ids = dict(pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]",
                   bos_piece="[CLS]", eos_piece="[SEP]", unk_piece="[UNK]")
    else:
        ids = dict(pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>",
                   eos_piece="</s>", unk_piece="<unk>")
    f = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_text()), model_writer=f,
        vocab_size=400, model_type="unigram", character_coverage=1.0,
        minloglevel=2, num_threads=1, **ids)
    _SPM[kind] = f.getvalue()
    return _SPM[kind]


def hf_tokenize(encode, added, text):
    """transformers' PreTrainedTokenizer.tokenize (tokenization_utils.py) on
    its added tokens, written here from the rule: the text is cut at them
    (Trie.split: at each place the earliest match, of those the longest;
    re tries the alternatives in order, longest first), a token's rstrip
    strips the whitespace (str.isspace) at the start of the part after it,
    its lstrip that at the end of the part before it, empty parts are
    dropped and the others encoded (_tokenize). added: {text: (id, lstrip,
    rstrip)}. single_word is not modelled (none of these files sets it)."""
    if not added:
        return list(encode(text))
    pat = "(%s)" % "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True))
    parts = re.split(pat, text)
    for i in range(1, len(parts), 2):
        _, lstrip, rstrip = added[parts[i]]
        if rstrip:
            parts[i + 1] = parts[i + 1].lstrip()
        if lstrip:
            parts[i - 1] = parts[i - 1].rstrip()
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(added[part][0])
        elif part:
            out += encode(part)
    return out


def hf_special_tokens(vocab, added, specials):
    """transformers' PreTrainedTokenizer.__init__ (tokenization_utils.py,
    4.34 on), step 4: "If some of the special tokens are not part of the
    vocab, we add them, at the end", in SPECIAL_TOKENS_ATTRIBUTES order
    (bos, eos, unk, sep, pad, cls, mask), through _add_tokens: new_idx =
    len(get_vocab()) once, a token already in the vocab keeps its id, the
    others take new_idx, new_idx + 1, ...; a str becomes AddedToken(lstrip=
    False, rstrip=False). vocab: the file's {piece: id}; added: the
    added_tokens_decoder's {text: id}. Returns {text: (id, lstrip, rstrip)}."""
    current = dict(vocab)
    current.update(added)
    new_idx = len(current)
    out = {}
    for t in specials:
        if t in out:
            continue
        if t not in current:
            current[t] = new_idx
            new_idx += 1
        out[t] = (current[t], False, False)
    return out


def shards(blob, n):
    """A safetensors file split as transformers' save_pretrained splits a
    state dict (modeling_utils.py, with huggingface_hub's
    split_torch_state_dict_into_shards): the tensors in file order, in n
    consecutive runs of about equal bytes (max_shard_size does the same
    greedily), each model-0000K-of-0000N.safetensors with metadata
    {"format": "pt"}; and model.safetensors.index.json, {"metadata":
    {"total_size": bytes}, "weight_map": {tensor: file}}, written with
    sort_keys=True as save_pretrained writes it. Returns (index text,
    [shard BLOBs], {tensor: shard number from 1})."""
    tensors, _ = safetensors_py.read(blob)
    total = sum(len(raw) for _, _, raw in tensors.values())
    parts = [{} for _ in range(n)]
    done = 0
    for name, t in tensors.items():
        parts[min(n - 1, done * n // max(total, 1))][name] = t
        done += len(t[2])
    assert all(parts), "a shard would be empty"
    files = [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    where = {name: k + 1 for k, part in enumerate(parts) for name in part}
    index = {"metadata": {"total_size": total},
             "weight_map": {name: files[k - 1] for name, k in where.items()}}
    return (json.dumps(index, indent=2, sort_keys=True),
            [safetensors_py.write(part, metadata={"format": "pt"}) for part in parts],
            where)


# ---- random weights --------------------------------------------------------

class Weights:
    def __init__(self, rng):
        self.rng = rng

    def u(self, *shape, scale=1.0, offset=0.0):
        return (offset + scale * self.rng.uniform(-1, 1, shape)).astype(np.float32)

    def linear(self, p, name, n_out, n_in, bias=True, gain=1.0):
        p[name + ".weight"] = self.u(n_out, n_in, scale=gain / math.sqrt(n_in))
        if bias:
            p[name + ".bias"] = self.u(n_out, scale=0.1)

    def norm(self, p, name, d, bias=True):
        p[name + ".weight"] = self.u(d, scale=0.3, offset=1.0)
        if bias:
            p[name + ".bias"] = self.u(d, scale=0.1)


def i64(a):
    a = np.ascontiguousarray(a, dtype="<i8")
    return ("I64", list(a.shape), a.tobytes())


class Checkpoint:
    """One checkpoint directory. params holds the float tensors written
    (name -> float32 array); buffers the integer ones (position_ids)."""

    FILES = {"config": "config.json", "weights": "model.safetensors",
             "tokenizer_config": "tokenizer_config.json"}

    def __init__(self, root, family, cls, config, params, tok_file, tok_bytes,
                 tok_config, special, buffers=None, added_tokens=None,
                 dtype="F32", hf_added=None):
        self.dir = pathlib.Path(root)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.family, self.cls = family, cls
        self.config, self.params = config, params
        self.buffers = buffers or {}
        self.special = special
        self.tok_name = tok_file
        self.tok_bytes = tok_bytes
        self.tok_config = tok_config
        self.hf_added = hf_added            # {text: (id, lstrip, rstrip)}
        self._sp = None
        self._wp = None
        self.n_pieces = (len(tok_bytes.decode("utf-8").split("\n")) - 1
                         if tok_file == "vocab.txt" else self._spm().get_piece_size())
        if dtype != "F32":
            config["torch_dtype"] = {"F16": "float16", "BF16": "bfloat16"}[dtype]
        tensors = {}
        for k, v in params.items():         # params: what the file holds
            if dtype == "F16":
                tensors[k] = v.astype(np.float16)
                params[k] = tensors[k].astype(np.float32)
            elif dtype == "BF16":
                raw = safetensors_py.bf16_bytes(v)
                tensors[k] = ("BF16", list(v.shape), raw)
                params[k] = safetensors_py.bf16_to_f32(raw).reshape(v.shape).copy()
            else:
                tensors[k] = v
        for k, v in self.buffers.items():
            tensors[k] = i64(v)
        (self.dir / "config.json").write_text(json.dumps(config, indent=2))
        (self.dir / "model.safetensors").write_bytes(
            safetensors_py.write(tensors, metadata={"format": "pt"}))
        (self.dir / tok_file).write_bytes(tok_bytes)
        (self.dir / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
        if added_tokens:
            (self.dir / "added_tokens.json").write_text(json.dumps(added_tokens))

    def path(self, kind):
        if kind == "tokenizer":
            return self.dir / self.tok_name
        return self.dir / self.FILES[kind]

    def read(self, kind):
        return self.path(kind).read_bytes()

    def encode(self, text):
        """The ids HF's tokenizer gives the text, without special tokens
        (BertTokenizer: tests/tok/bert_ref.py; DebertaV2Tokenizer and
        T5Tokenizer: the SentencePiece model's encode)."""
        if self.tok_name == "vocab.txt":
            if self._wp is None:
                self._wp = bert_ref.Bert(
                    self.tok_bytes,
                    do_lower_case=self.tok_config.get("do_lower_case", True))
            return self._wp.encode(text)
        # DebertaV2Tokenizer / T5Tokenizer: PreTrainedTokenizer.tokenize
        # splits the added tokens out first ([CLS], [SEP], [MASK] past the
        # model's pieces, T5's sentinels), with their lstrip / rstrip
        added = self.hf_added or {
            v["content"]: (int(k), bool(v.get("lstrip")), bool(v.get("rstrip")))
            for k, v in self.tok_config.get("added_tokens_decoder", {}).items()}
        return hf_tokenize(self._spm().encode, added, text)

    def _spm(self):
        if self._sp is None:
            import sentencepiece as spm
            self._sp = spm.SentencePieceProcessor(model_proto=self.tok_bytes)
        return self._sp

    @property
    def vocab_size(self):
        return self.config["vocab_size"]


NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "MISC"]


def labels_config(cfg, n_labels, problem_type, token=False):
    names = ["entailment", "neutral", "contradiction", "other", "maybe",
             "spam"][:n_labels] if n_labels > 1 else ["score"]
    if token:  # a token classifier's tags (the last one without B-/I-)
        names = NER_LABELS[:n_labels]
    cfg["id2label"] = {str(i): n for i, n in enumerate(names)}
    cfg["label2id"] = {n: i for i, n in enumerate(names)}
    if problem_type is not None:
        cfg["problem_type"] = problem_type


# ---- BERT ------------------------------------------------------------------

def post_attention(W, p, L, d, ff):
    """A layer's modules after its self-attention, as BertLayer and
    DebertaV2Layer both name them: attention.output (dense, LayerNorm),
    intermediate.dense, output (dense, LayerNorm)."""
    W.linear(p, L + "attention.output.dense", d, d)
    W.norm(p, L + "attention.output.LayerNorm", d)
    W.linear(p, L + "intermediate.dense", ff, d)
    W.linear(p, L + "output.dense", d, ff)
    W.norm(p, L + "output.LayerNorm", d)


def cls_predictions(W, p, pre, d, V, tied_copy):
    """BertOnlyMLMHead's names (DeBERTa-v2's legacy head uses them too):
    transform dense + LayerNorm and the output bias; with tied_copy also the
    decoder weight (a copy of the word embeddings) and bias, as older files
    hold them."""
    W.linear(p, "cls.predictions.transform.dense", d, d, gain=2.0)
    W.norm(p, "cls.predictions.transform.LayerNorm", d)
    p["cls.predictions.bias"] = W.u(V, scale=0.5)
    if tied_copy:
        p["cls.predictions.decoder.weight"] = p[pre + "embeddings.word_embeddings.weight"].copy()
        p["cls.predictions.decoder.bias"] = p["cls.predictions.bias"].copy()


def bert(root, rng, cls, position="relative_key", prefix=None, n_labels=3,
         problem_type="single_label_classification", hidden_act="gelu",
         tied_copy=False, position_ids=False, extra_heads=False, d=32,
         heads=4, layers=2, ff=48, max_pos=64, type_vocab=2,
         do_lower_case=True, dtype="F32", vocab=None):
    """modeling_bert.py: BertModel (prefix none, pooler), BertForMaskedLM
    ('bert.' prefix, no pooler, cls.predictions.*), BertForSequenceClassification
    ('bert.' prefix, pooler, classifier). prefix overrides the class's own
    (a BertModel saved from a bigger class keeps 'bert.'). tied_copy writes
    cls.predictions.decoder.weight / .bias (the tied copies older files
    keep); position_ids the persistent int64 buffer older files keep;
    extra_heads the pre-training cls.seq_relationship head. vocab: the
    vocab.txt's bytes (wordpiece_vocab() by default)."""
    vocab = wordpiece_vocab() if vocab is None else vocab
    toks = vocab.decode().split("\n")[:-1]
    V = len(toks)
    W = Weights(rng)
    pre = prefix if prefix is not None else ("" if cls == "BertModel" else "bert.")
    p = {}
    p[pre + "embeddings.word_embeddings.weight"] = W.u(V, d)
    p[pre + "embeddings.position_embeddings.weight"] = W.u(max_pos, d, scale=0.5)
    p[pre + "embeddings.token_type_embeddings.weight"] = W.u(type_vocab, d, scale=0.5)
    W.norm(p, pre + "embeddings.LayerNorm", d)
    dh = d // heads
    for i in range(layers):
        L = f"{pre}encoder.layer.{i}."
        W.linear(p, L + "attention.self.query", d, d, gain=2.0)
        W.linear(p, L + "attention.self.key", d, d, gain=2.0)
        W.linear(p, L + "attention.self.value", d, d)
        if position in ("relative_key", "relative_key_query"):
            p[L + "attention.self.distance_embedding.weight"] = W.u(2 * max_pos - 1, dh)
        post_attention(W, p, L, d, ff)
    if cls not in ("BertForMaskedLM", "BertForTokenClassification"):
        W.linear(p, pre + "pooler.dense", d, d, gain=2.0)
    if cls == "BertForMaskedLM" or extra_heads:
        cls_predictions(W, p, pre, d, V, tied_copy)
    if extra_heads:
        W.linear(p, "cls.seq_relationship", 2, d)
    if cls in ("BertForSequenceClassification", "BertForTokenClassification"):
        n = n_labels
        W.linear(p, "classifier", n, d, gain=2.0)
    cfg = {
        "_name_or_path": "tiny-bert-" + position.replace("_", "-"),
        "architectures": [cls], "model_type": "bert",
        "attention_probs_dropout_prob": 0.1, "classifier_dropout": None,
        "gradient_checkpointing": False, "hidden_act": hidden_act,
        "hidden_dropout_prob": 0.1, "hidden_size": d,
        "initializer_range": 0.02, "intermediate_size": ff,
        "layer_norm_eps": 1e-12, "max_position_embeddings": max_pos,
        "num_attention_heads": heads, "num_hidden_layers": layers,
        "pad_token_id": 0, "position_embedding_type": position,
        "torch_dtype": "float32", "transformers_version": "4.40.0",
        "type_vocab_size": type_vocab, "use_cache": True, "vocab_size": V,
    }
    if cls == "BertForSequenceClassification":
        labels_config(cfg, n_labels, problem_type)
    if cls == "BertForTokenClassification":
        labels_config(cfg, n_labels, None, token=True)
    buffers = {}
    if position_ids:
        buffers[pre + "embeddings.position_ids"] = np.arange(max_pos)[None, :]
    special = {"pad": toks.index("[PAD]"), "unk": toks.index("[UNK]"),
               "cls": toks.index("[CLS]"), "sep": toks.index("[SEP]"),
               "mask": toks.index("[MASK]")}
    tok_config = {
        "clean_up_tokenization_spaces": True, "cls_token": "[CLS]",
        "do_basic_tokenize": True, "do_lower_case": do_lower_case,
        "mask_token": "[MASK]", "model_max_length": max_pos,
        "never_split": None, "pad_token": "[PAD]", "sep_token": "[SEP]",
        "strip_accents": None, "tokenize_chinese_chars": True,
        "tokenizer_class": "BertTokenizer", "unk_token": "[UNK]",
        "added_tokens_decoder": {
            str(special[k]): {"content": t, "lstrip": False, "normalized": False,
                              "rstrip": False, "single_word": False, "special": True}
            for k, t in (("pad", "[PAD]"), ("unk", "[UNK]"), ("cls", "[CLS]"),
                         ("sep", "[SEP]"), ("mask", "[MASK]"))},
    }
    return Checkpoint(root, "bert", cls, cfg, p, "vocab.txt", vocab,
                      tok_config, special, buffers, dtype=dtype)


# ---- DeBERTa-v2 / v3 -------------------------------------------------------

def deberta(root, rng, cls, style="v3", prefix=None, n_labels=3,
            problem_type="single_label_classification", legacy=True,
            tied_copy=False, share_att_key=True, d=32, heads=4, layers=2,
            ff=48, dtype="F32", tok_config_kind="saved", **over):
    """modeling_deberta_v2.py: DebertaV2Model (no prefix), DebertaV2ForMaskedLM
    ('deberta.' prefix; legacy (HF's default): cls.predictions.transform.*,
    cls.predictions.bias; legacy false (and Microsoft's own files):
    lm_predictions.lm_head.dense / .LayerNorm / .bias),
    DebertaV2ForSequenceClassification ('deberta.' prefix, pooler.dense,
    classifier). style 'v3': deberta-v3-base's config shape (position_buckets,
    max_relative_positions -1 so max_position_embeddings is the span,
    norm_rel_ebd layer_norm, pos_att_type a list, no token types, the
    spm.model with [MASK] an added token past its pieces); 'v2': no buckets,
    an explicit max_relative_positions, no rel LayerNorm, pos_att_type
    'p2c|c2p' as a string, two token types. tok_config_kind 'saved': the
    tokenizer_config.json save_pretrained writes today (added_tokens_decoder
    with [MASK] past the pieces); 'shipped': deberta-v3-base's own,
    {"do_lower_case": false, "vocab_type": "spm"}, where the tokenizer adds
    [MASK] itself (hf_special_tokens). over: config keys to override."""
    sp_bytes = spm_model("deberta")
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    n_pieces = sp.get_piece_size()
    mask_id = n_pieces                      # added token, as deberta-v3's 128000
    V = n_pieces + 8                        # padded rows, as its 128100
    if style == "v3":
        cfg_pos = {"relative_attention": True, "position_buckets": 16,
                   "max_relative_positions": -1, "max_position_embeddings": 64,
                   "norm_rel_ebd": "layer_norm", "pos_att_type": ["p2c", "c2p"],
                   "share_att_key": share_att_key, "type_vocab_size": 0,
                   "position_biased_input": False}
    else:
        cfg_pos = {"relative_attention": True, "position_buckets": -1,
                   "max_relative_positions": 24, "max_position_embeddings": 512,
                   "norm_rel_ebd": "none", "pos_att_type": "p2c|c2p",
                   "share_att_key": share_att_key, "type_vocab_size": 2,
                   "position_biased_input": False}
    cfg_pos.update(over)
    W = Weights(rng)
    pre = prefix if prefix is not None else ("" if cls == "DebertaV2Model" else "deberta.")
    p = {}
    p[pre + "embeddings.word_embeddings.weight"] = W.u(V, d)
    if cfg_pos["type_vocab_size"] > 0:
        p[pre + "embeddings.token_type_embeddings.weight"] = W.u(cfg_pos["type_vocab_size"], d, scale=0.5)
    if cfg_pos.get("position_biased_input"):
        p[pre + "embeddings.position_embeddings.weight"] = W.u(cfg_pos["max_position_embeddings"], d, scale=0.5)
    W.norm(p, pre + "embeddings.LayerNorm", d)
    mrp = cfg_pos["max_relative_positions"]
    if mrp < 1:
        mrp = cfg_pos["max_position_embeddings"]
    span = cfg_pos["position_buckets"] if cfg_pos["position_buckets"] > 0 else mrp
    for i in range(layers):
        L = f"{pre}encoder.layer.{i}."
        W.linear(p, L + "attention.self.query_proj", d, d, gain=2.0)
        W.linear(p, L + "attention.self.key_proj", d, d, gain=2.0)
        W.linear(p, L + "attention.self.value_proj", d, d)
        if not share_att_key:
            W.linear(p, L + "attention.self.pos_key_proj", d, d, gain=2.0)
            W.linear(p, L + "attention.self.pos_query_proj", d, d, gain=2.0)
        post_attention(W, p, L, d, ff)
    p[pre + "encoder.rel_embeddings.weight"] = W.u(2 * span, d)
    if "layer_norm" in str(cfg_pos["norm_rel_ebd"]):
        W.norm(p, pre + "encoder.LayerNorm", d)
    if cls == "DebertaV2ForSequenceClassification":
        W.linear(p, "pooler.dense", d, d, gain=2.0)
        W.linear(p, "classifier", n_labels, d, gain=2.0)
    if cls == "DebertaV2ForTokenClassification":
        W.linear(p, "classifier", n_labels, d, gain=2.0)
    if cls == "DebertaV2ForMaskedLM":
        if legacy:
            cls_predictions(W, p, pre, d, V, tied_copy)
        else:
            W.linear(p, "lm_predictions.lm_head.dense", d, d, gain=2.0)
            W.norm(p, "lm_predictions.lm_head.LayerNorm", d)
            p["lm_predictions.lm_head.bias"] = W.u(V, scale=0.5)
    cfg = {
        "_name_or_path": f"tiny-deberta-{style}",
        "architectures": [cls], "model_type": "deberta-v2",
        "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": d,
        "initializer_range": 0.02, "intermediate_size": ff,
        "layer_norm_eps": 1e-7, "num_attention_heads": heads,
        "num_hidden_layers": layers, "pad_token_id": 0,
        "pooler_dropout": 0, "pooler_hidden_act": "gelu",
        "pooler_hidden_size": d, "torch_dtype": "float32",
        "transformers_version": "4.40.0", "vocab_size": V,
    }
    cfg.update(cfg_pos)
    if cls == "DebertaV2ForMaskedLM" and not legacy:
        cfg["legacy"] = False
    if cls == "DebertaV2ForSequenceClassification":
        labels_config(cfg, n_labels, problem_type)
    if cls == "DebertaV2ForTokenClassification":
        labels_config(cfg, n_labels, None, token=True)
    special = {"pad": 0, "cls": 1, "sep": 2, "unk": 3, "mask": mask_id}
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False,
                        "rstrip": False, "single_word": False, "special": True}
               for i, t in ((0, "[PAD]"), (1, "[CLS]"), (2, "[SEP]"),
                            (3, "[UNK]"), (mask_id, "[MASK]"))}
    tok_config = {
        "added_tokens_decoder": decoder, "bos_token": "[CLS]",
        "clean_up_tokenization_spaces": True, "cls_token": "[CLS]",
        "do_lower_case": False, "eos_token": "[SEP]", "mask_token": "[MASK]",
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "[PAD]", "sep_token": "[SEP]", "sp_model_kwargs": {},
        "split_by_punct": False, "tokenizer_class": "DebertaV2Tokenizer",
        "unk_token": "[UNK]", "vocab_type": "spm",
    }
    hf_added = None
    if tok_config_kind == "shipped":
        tok_config = {"do_lower_case": False, "vocab_type": "spm"}
        # DebertaV2Tokenizer's defaults, in SPECIAL_TOKENS_ATTRIBUTES order
        hf_added = hf_special_tokens(
            {sp.id_to_piece(i): i for i in range(n_pieces)}, {},
            ["[CLS]", "[SEP]", "[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"])
        assert {t: v[0] for t, v in hf_added.items()} == {
            "[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3, "[MASK]": mask_id}
    return Checkpoint(root, "deberta-v2", cls, cfg, p, "spm.model", sp_bytes,
                      tok_config, special,
                      added_tokens=None if hf_added else {"[MASK]": mask_id},
                      dtype=dtype, hf_added=hf_added)


# ---- T5 --------------------------------------------------------------------

def t5(root, rng, cls, ffn="relu", embed_copy=False, write_derived=False,
       d=32, heads=4, d_kv=8, layers=2, ff=48, num_buckets=8,
       max_distance=20, decoder_layers=1, dtype="F32", model_type="t5", vocab=None):
    """modeling_t5.py: T5EncoderModel (shared.weight; encoder.embed_tokens
    tied to it and left out unless embed_copy) or T5ForConditionalGeneration
    (the same encoder, plus decoder.* and, untied as v1.1, lm_head.weight).
    Encoder: encoder.block.{i}.layer.0.SelfAttention.q/k/v/o.weight (no
    biases), layer 0's relative_attention_bias.weight [num_buckets, heads],
    .layer.0.layer_norm.weight, .layer.1.DenseReluDense.wi/wo (relu) or
    wi_0/wi_1/wo (gated-gelu, v1.1 / flan), .layer.1.layer_norm.weight,
    encoder.final_layer_norm.weight. write_derived puts dense_act_fn and
    is_gated_act in config.json as newer T5Config saves do. model_type
    "mt5" with the MT5 classes (modeling_mt5.py: the same modules and
    names) is an mT5 checkpoint. vocab: the embedding's rows (default the
    pieces, the extra ids and 4 of padding), more padding rows past them."""
    sp_bytes = spm_model("t5")
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    n_pieces = sp.get_piece_size()
    extra_ids = 4
    V = vocab or n_pieces + extra_ids + 4    # padded, as 32100 -> 32128
    gated = ffn.startswith("gated")
    W = Weights(rng)
    p = {"shared.weight": W.u(V, d)}
    if embed_copy:
        p["encoder.embed_tokens.weight"] = p["shared.weight"].copy()
    inner = heads * d_kv

    def stack(name, n_layers, decoder):
        for i in range(n_layers):
            B = f"{name}.block.{i}.layer."
            for w, g in (("q", 1.0), ("k", 1.0), ("v", 1.0)):
                W.linear(p, B + "0.SelfAttention." + w, inner, d, bias=False, gain=g)
            W.linear(p, B + "0.SelfAttention.o", d, inner, bias=False)
            if i == 0:
                p[B + "0.SelfAttention.relative_attention_bias.weight"] = \
                    W.u(num_buckets, heads, scale=2.0)
            W.norm(p, B + "0.layer_norm", d, bias=False)
            f = "1"
            if decoder:
                for w in ("q", "k", "v"):
                    W.linear(p, B + "1.EncDecAttention." + w, inner, d, bias=False)
                W.linear(p, B + "1.EncDecAttention.o", d, inner, bias=False)
                W.norm(p, B + "1.layer_norm", d, bias=False)
                f = "2"
            if gated:
                W.linear(p, B + f + ".DenseReluDense.wi_0", ff, d, bias=False, gain=1.5)
                W.linear(p, B + f + ".DenseReluDense.wi_1", ff, d, bias=False, gain=1.5)
            else:
                W.linear(p, B + f + ".DenseReluDense.wi", ff, d, bias=False, gain=1.5)
            W.linear(p, B + f + ".DenseReluDense.wo", d, ff, bias=False)
            W.norm(p, B + f + ".layer_norm", d, bias=False)
        W.norm(p, name + ".final_layer_norm", d, bias=False)

    stack("encoder", layers, False)
    if cls.endswith("ForConditionalGeneration"):
        stack("decoder", decoder_layers, True)
        if gated:
            p["lm_head.weight"] = W.u(V, d)
    cfg = {
        "_name_or_path": "tiny-t5-" + ffn, "architectures": [cls],
        "model_type": model_type, "d_ff": ff, "d_kv": d_kv, "d_model": d,
        "decoder_start_token_id": 0, "dropout_rate": 0.1,
        "eos_token_id": 1, "feed_forward_proj": ffn,
        "initializer_factor": 1.0, "is_encoder_decoder": True,
        "layer_norm_epsilon": 1e-6, "num_decoder_layers": decoder_layers,
        "num_heads": heads, "num_layers": layers, "pad_token_id": 0,
        "relative_attention_max_distance": max_distance,
        "relative_attention_num_buckets": num_buckets,
        "tie_word_embeddings": not gated, "torch_dtype": "float32",
        "transformers_version": "4.40.0", "use_cache": True, "vocab_size": V,
    }
    if write_derived:
        cfg["dense_act_fn"] = "gelu_new" if ffn == "gated-gelu" else ffn.split("-")[-1]
        cfg["is_gated_act"] = gated
    extra = [f"<extra_id_{i}>" for i in range(extra_ids)]
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False,
                        "rstrip": False, "single_word": False, "special": True}
               for i, t in ((0, "<pad>"), (1, "</s>"), (2, "<unk>"))}
    for i, t in enumerate(extra):            # <extra_id_0> is the last id
        decoder[str(n_pieces + extra_ids - 1 - i)] = {
            "content": t, "lstrip": False, "normalized": False,
            "rstrip": True, "single_word": False, "special": True}
    tok_config = {
        "added_tokens_decoder": decoder, "additional_special_tokens": extra,
        "clean_up_tokenization_spaces": True, "eos_token": "</s>",
        "extra_ids": extra_ids, "legacy": True, "model_max_length": 512,
        "pad_token": "<pad>", "sp_model_kwargs": {},
        "tokenizer_class": "T5Tokenizer", "unk_token": "<unk>",
    }
    special = {"pad": 0, "eos": 1, "unk": 2}
    return Checkpoint(root, "t5", cls, cfg, p, "spiece.model", sp_bytes,
                      tok_config, special, dtype=dtype)


# ---- sentence-transformers -------------------------------------------------

DENSE_ACTS = {"tanh": "torch.nn.modules.activation.Tanh",
              "identity": "torch.nn.modules.linear.Identity",
              "relu": "torch.nn.modules.activation.ReLU",
              "gelu": "torch.nn.modules.activation.GELU",
              "sigmoid": "torch.nn.modules.activation.Sigmoid"}
POOLING_KEYS = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens",
                "mean": "pooling_mode_mean_tokens",
                "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
                "weightedmean": "pooling_mode_weightedmean_tokens",
                "lasttoken": "pooling_mode_lasttoken"}


class SentenceDir:
    """A sentence-transformers model directory around a checkpoint, as
    SentenceTransformer.save writes it: modules.json ({idx, name, path,
    type} per module, path f"{idx}_{ClassName}" past the Transformer's ""),
    the Transformer's sentence_bert_config.json, config_sentence_transformers
    .json, 1_Pooling/config.json (Pooling.get_config_dict: every
    pooling_mode_* flag, word_embedding_dimension, include_prompt), each
    Dense's config.json (in_features, out_features, bias,
    activation_function as util.fullname writes it) and model.safetensors
    (linear.weight [out, in], linear.bias), and an empty k_Normalize.
    files: [(name relattn_import takes, path on disk)]; dense: [(W, b or
    None, act)] for the port."""

    def __init__(self, ck, rng, pooling=("mean",), dense=(), normalize=False,
                 max_seq_length=None, do_lower_case=False, include_prompt=True):
        self.ck = ck
        d = ck.config.get("hidden_size", ck.config.get("d_model"))
        self.pooling, self.normalize = tuple(pooling), normalize
        self.max_seq_length = max_seq_length
        root = ck.dir
        types = ["sentence_transformers.models.Transformer",
                 "sentence_transformers.models.Pooling"]
        paths = ["", "1_Pooling"]
        self.files = []
        sbc = {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case}
        (root / "sentence_bert_config.json").write_text(json.dumps(sbc, indent=2))
        self.files.append(("sentence_bert_config.json", root / "sentence_bert_config.json"))
        (root / "config_sentence_transformers.json").write_text(json.dumps(
            {"__version__": {"sentence_transformers": "3.0.1", "transformers": "4.40.0",
                             "pytorch": "2.1.0"},
             "prompts": {}, "default_prompt_name": None, "similarity_fn_name": None},
            indent=2))
        self.files.append(("config_sentence_transformers.json",
                           root / "config_sentence_transformers.json"))
        pool = {"word_embedding_dimension": d}
        for mode, key in POOLING_KEYS.items():
            pool[key] = mode in pooling
        pool["include_prompt"] = include_prompt
        (root / "1_Pooling").mkdir(exist_ok=True)
        (root / "1_Pooling" / "config.json").write_text(json.dumps(pool, indent=2))
        self.files.append(("1_Pooling/config.json", root / "1_Pooling" / "config.json"))
        width = d * len(pooling)
        W = Weights(rng)
        self.dense = []
        for spec in dense:
            idx = len(types)
            path = f"{idx}_Dense"
            out, bias, act = spec["out"], spec.get("bias", True), spec.get("act", "tanh")
            p = {}
            W.linear(p, "linear", out, width, bias=bias, gain=2.0)
            (root / path).mkdir(exist_ok=True)
            cfg = {"in_features": width, "out_features": out, "bias": bias,
                   "activation_function": DENSE_ACTS.get(act, act)}
            (root / path / "config.json").write_text(json.dumps(cfg))
            (root / path / "model.safetensors").write_bytes(safetensors_py.write(p))
            self.files.append((f"{path}/config.json", root / path / "config.json"))
            self.files.append((f"{path}/model.safetensors", root / path / "model.safetensors"))
            self.dense.append((p["linear.weight"], p.get("linear.bias"), act))
            types.append("sentence_transformers.models.Dense")
            paths.append(path)
            width = out
        if normalize:
            idx = len(types)
            (root / f"{idx}_Normalize").mkdir(exist_ok=True)
            types.append("sentence_transformers.models.Normalize")
            paths.append(f"{idx}_Normalize")
        modules = [{"idx": i, "name": str(i), "path": p, "type": t}
                   for i, (p, t) in enumerate(zip(paths, types))]
        (root / "modules.json").write_text(json.dumps(modules, indent=2))
        self.files.insert(0, ("modules.json", root / "modules.json"))

    def args(self, only=None):
        """The (name, file) argument pairs after the checkpoint's five."""
        out = []
        for name, path in self.files:
            if only is None or name in only:
                out += [name, path.read_bytes()]
        return out

# ---- tokenizer.json for a SentencePiece model (Unigram) ----------------------

def _pb_fields(buf):
    """The (field number, wire type, value) of a protobuf message."""
    i, out = 0, []

    def varint():
        nonlocal i
        v = shift = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v
    while i < len(buf):
        key = varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            out.append((num, wire, varint()))
        elif wire == 1:
            out.append((num, wire, buf[i:i + 8]))
            i += 8
        elif wire == 2:
            n = varint()
            out.append((num, wire, buf[i:i + n]))
            i += n
        elif wire == 5:
            out.append((num, wire, buf[i:i + 4]))
            i += 4
        else:
            raise ValueError("wire type %d" % wire)
    return out


def spm_charsmap(sp_bytes):
    """normalizer_spec.precompiled_charsmap of a ModelProto (field 3, 2)."""
    for num, wire, v in _pb_fields(sp_bytes):
        if num == 3 and wire == 2:
            for n2, w2, v2 in _pb_fields(v):
                if n2 == 2 and w2 == 2:
                    return bytes(v2)
    return b""


def _added(id_, content, special=True, lstrip=False, rstrip=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": False, "special": special}


def unigram_tokenizer_json(sp_bytes, family, tok_config, legacy=True,
                           extra_ids=4):
    """What transformers' converters (convert_slow_tokenizer.py, 4.4x:
    SpmConverter and its DebertaV2Converter / T5Converter) and
    PreTrainedTokenizerFast then write as tokenizer.json for a SentencePiece
    unigram model, written here from their rules as the tokenizers library
    serializes them: model Unigram with [piece, score] in id order (T5:
    <extra_id_N> after the pieces, the last id first, score 0), unk_id;
    normalizers (DebertaV2: Strip both sides, Precompiled, Replace ' {2,}'
    by ' '; T5: Precompiled, Strip right, Replace ' {2,}' by '▁'); the
    Metaspace pre-tokenizer and decoder (prepend_scheme 'always', or 'first'
    when the tokenizer's legacy is false); the template ([CLS] $A [SEP] or
    $A </s>); added_tokens: the control pieces (special), then the
    tokenizer's special tokens with tokenizer_config's flags, new ones after
    the vocabulary."""
    import base64
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    n = sp.get_piece_size()
    vocab = [[sp.id_to_piece(i), float(sp.get_score(i))] for i in range(n)]
    if family == "t5":
        vocab += [[f"<extra_id_{i}>", 0.0] for i in range(extra_ids - 1, -1, -1)]
    unk = sp.unk_id()
    added = {}
    for i in range(n):
        if sp.is_control(i):
            added[i] = _added(i, sp.id_to_piece(i))
    pieces = {p: i for i, (p, _) in enumerate(vocab)}
    dec = tok_config.get("added_tokens_decoder", {})
    for k, a in sorted(dec.items(), key=lambda kv: int(kv[0])):
        added[int(k)] = _added(int(k), a["content"], a.get("special", True),
                               a.get("lstrip", False), a.get("rstrip", False))
    if unk not in added:
        added[unk] = _added(unk, sp.id_to_piece(unk))
    if family == "deberta" and "[MASK]" not in pieces and \
            all(a["content"] != "[MASK]" for a in added.values()):
        added[len(vocab)] = _added(len(vocab), "[MASK]")
    charsmap = base64.b64encode(spm_charsmap(sp_bytes)).decode()
    scheme = "always" if legacy else "first"
    meta = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme,
            "split": True}
    if family == "deberta":
        norm = [{"type": "Strip", "strip_left": True, "strip_right": True},
                {"type": "Precompiled", "precompiled_charsmap": charsmap},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]
        pre = {"type": "Sequence", "pretokenizers": [meta]}
        cls, sep = "[CLS]", "[SEP]"
        single = [{"SpecialToken": {"id": cls, "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": sep, "type_id": 0}}]
        pair = single + [{"Sequence": {"id": "B", "type_id": 1}},
                         {"SpecialToken": {"id": sep, "type_id": 1}}]
        specials = {t: {"id": t, "ids": [pieces[t]], "tokens": [t]} for t in (cls, sep)}
    else:
        norm = [{"type": "Precompiled", "precompiled_charsmap": charsmap},
                {"type": "Strip", "strip_left": False, "strip_right": True},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]
        pre = meta
        single = [{"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "</s>", "type_id": 0}}]
        pair = single + [{"Sequence": {"id": "B", "type_id": 0}},
                         {"SpecialToken": {"id": "</s>", "type_id": 0}}]
        specials = {"</s>": {"id": "</s>", "ids": [pieces["</s>"]], "tokens": ["</s>"]}}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added[i] for i in sorted(added)],
        "normalizer": {"type": "Sequence", "normalizers": norm},
        "pre_tokenizer": pre,
        "post_processor": {"type": "TemplateProcessing", "single": single,
                           "pair": pair, "special_tokens": specials},
        "decoder": dict(meta),
        "model": {"type": "Unigram", "unk_id": unk, "vocab": vocab,
                  "byte_fallback": False},
    }
