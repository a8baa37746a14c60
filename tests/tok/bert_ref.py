"""A Python port of Hugging Face's slow BertTokenizer, the reference the
wordpiece tokenizer is tested against.

Written from transformers' models/bert/tokenization_bert.py (BasicTokenizer,
WordpieceTokenizer, load_vocab, convert_tokens_to_string) and
tokenization_utils.py (_is_whitespace, _is_control, _is_punctuation), for a
text: the special tokens in it split off first, case-sensitively, as
PreTrainedTokenizer.tokenize does with its no-split tokens (the whitespace
it strips around them the basic tokenizer drops anyway), then
BertTokenizer._tokenize on each piece between them. Only Python's standard
library: unicodedata is the source of every character property.
"""
import re
import unicodedata

SPECIALS = ["[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"]


def load_vocab(data):
    """vocab.txt bytes -> (token -> id, id -> token). Python's text mode
    reads \\n, \\r\\n and \\r as line ends; a repeated token keeps its
    last line."""
    lines = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    lines = lines.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    vocab = {}
    for i, tok in enumerate(lines):
        vocab[tok] = i
    return vocab, {i: t for t, i in vocab.items()}


def is_whitespace(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch):
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


def is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_chinese(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF
            or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class Bert:
    def __init__(self, vocab_bytes, do_lower_case=True, strip_accents=None,
                 tokenize_chinese_chars=True, unk="[UNK]"):
        self.vocab, self.inv = load_vocab(vocab_bytes)
        self.lower = do_lower_case
        self.strip = strip_accents
        self.chinese = tokenize_chinese_chars
        self.unk = unk

    def basic(self, text):
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or is_control(ch):
                continue
            out.append(" " if is_whitespace(ch) else ch)
        text = "".join(out)
        if self.chinese:
            text = "".join(" %s " % c if is_chinese(ord(c)) else c
                           for c in text)
        words = []
        for tok in text.strip().split():
            if self.lower:
                tok = tok.lower()
                if self.strip is not False:
                    tok = self.strip_accents(tok)
            elif self.strip:
                tok = self.strip_accents(tok)
            words.extend(self.split_punc(tok))
        return " ".join(words).strip().split()

    @staticmethod
    def strip_accents(tok):
        return "".join(c for c in unicodedata.normalize("NFD", tok)
                       if unicodedata.category(c) != "Mn")

    @staticmethod
    def split_punc(tok):
        out, new = [], True
        for ch in tok:
            if is_punctuation(ch):
                out.append([ch])
                new = True
            else:
                if new:
                    out.append([])
                new = False
                out[-1].append(ch)
        return ["".join(x) for x in out]

    def wordpiece(self, word):
        if len(word) > 100:
            return [self.unk]
        pieces, start = [], 0
        while start < len(word):
            end, cur = len(word), None
            while start < end:
                sub = word[start:end]
                if start > 0:
                    sub = "##" + sub
                if sub in self.vocab:
                    cur = sub
                    break
                end -= 1
            if cur is None:
                return [self.unk]
            pieces.append(cur)
            start = end
        return pieces

    def tokenize(self, text):
        specials = [t for t in SPECIALS if t in self.vocab]
        parts = (re.split("(%s)" % "|".join(map(re.escape, specials)), text)
                 if specials else [text])
        out = []
        for i, part in enumerate(parts):
            if i % 2:
                out.append(part)
            else:
                out += [p for w in self.basic(part) for p in self.wordpiece(w)]
        return out

    def encode(self, text):
        return [self.vocab.get(t, self.vocab.get(self.unk))
                for t in self.tokenize(text)]

    def decode(self, ids, skip=(), clean_up_tokenization_spaces=True):
        """PreTrainedTokenizer._decode (tokenization_utils.py) for
        BertTokenizer, whose special tokens are vocabulary tokens: the ids
        in skip left out (skip_special_tokens, for those ids), the tokens
        through convert_tokens_to_string, then clean_up_tokenization
        (tokenization_utils_base.py) when clean_up_tokenization_spaces
        (BertTokenizer's default, True)."""
        toks = [self.inv.get(i, self.unk) for i in ids if i not in skip]
        text = " ".join(toks).replace(" ##", "").strip()
        if clean_up_tokenization_spaces:
            text = clean_up_tokenization(text)
        return text


def clean_up_tokenization(out_string):
    """transformers' PreTrainedTokenizerBase.clean_up_tokenization."""
    return (out_string.replace(" .", ".").replace(" ?", "?").replace(" !", "!")
            .replace(" ,", ",").replace(" ' ", "'").replace(" n't", "n't")
            .replace(" 'm", "'m").replace(" 's", "'s").replace(" 've", "'ve")
            .replace(" 're", "'re"))
