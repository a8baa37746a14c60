"""A float64 port of Hugging Face's generate for the tests, written from the
algorithm in transformers' generation/utils.py (greedy_search, sample,
beam_search), generation/beam_search.py (BeamSearchScorer.process and
finalize, BeamHypotheses.add and is_done) and generation/logits_process.py
(NoRepeatNGramLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper), the 4.3x versions; the model is any function from a
token list to the next token's log-probabilities (reference_model.py's
float64 decoder).

    lp = next_logprobs(cfg, params)          # ids -> (V,) log-softmax
    new = greedy(lp, prompt, 20, eos=[257])
    new, score = beam_search(lp, prompt, 20, num_beams=3, eos=[257])

Ties: torch.topk and argmax break them their own way; here the lower
index wins (flat index over (beam, token)), as src/generate.c does.
"""
import numpy as np

import reference_model as ref


def next_logprobs(cfg, params):
    """ids (the model's input, bos in front) -> log p(next token), float64."""
    def f(ids):
        return ref.forward(cfg, params, list(ids))["logprobs"][-1]
    return f


def banned_ngrams(seq, n):
    """NoRepeatNGramLogitsProcessor: tokens that would repeat an n-gram of
    seq (its _get_ngrams / _get_generated_ngrams)."""
    if n <= 0 or len(seq) + 1 < n:
        return set()
    grams = {}
    for s in range(len(seq) - n + 1):
        grams.setdefault(tuple(seq[s:s + n - 1]), []).append(seq[s + n - 1])
    return set(grams.get(tuple(seq[len(seq) - n + 1:]), []))


def greedy(lp, prompt, max_new, eos=(), no_repeat=0):
    """greedy_search: the argmax (lowest id on a tie) after the processor;
    stops at eos (kept) or max_new."""
    seq, new = list(prompt), []
    for _ in range(max_new):
        s = lp(seq).copy()
        for t in banned_ngrams(seq, no_repeat):
            s[t] = -np.inf
        t = int(np.argmax(s))
        seq.append(t)
        new.append(t)
        if t in eos:
            break
    return new


def warp(logits, temperature=1.0, top_k=0, top_p=1.0):
    """The sampling warpers in HF's order, min_tokens_to_keep 1: the scores
    a softmax then draws from (-inf for removed tokens)."""
    s = np.asarray(logits, dtype=np.float64) / temperature
    V = len(s)
    if 0 < top_k < V:
        kth = np.sort(s)[::-1][top_k - 1]
        s = np.where(s < kth, -np.inf, s)
    if top_p < 1.0:
        order = np.lexsort((np.arange(V), s))          # ascending (value, id)
        p = np.exp(s[order] - s.max())
        cum = np.cumsum(p / p.sum())
        remove = cum <= 1 - top_p
        remove[-1] = False
        s = s.copy()
        s[order[remove]] = -np.inf
    return s


def softmax(s):
    e = np.exp(s - s.max())
    return e / e.sum()


# ---- the generator src/generate.c draws from --------------------------------
# xoshiro256** (Blackman & Vigna 2018), seeded by splitmix64, from their
# published descriptions.

M64 = (1 << 64) - 1


class Rng:
    def __init__(self, seed):
        x = seed & M64
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def next(self):
        s = self.s
        out = (self._rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return out

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53


def draw(p, u):
    """The first token (in id order) whose cumulative probability passes u."""
    return int(np.searchsorted(np.cumsum(p), u * p.sum(), side="right"))


def beam_search(lp, prompt, max_new, num_beams, eos=(), length_penalty=1.0,
                early_stopping=False, no_repeat=0):
    """beam_search with BeamSearchScorer (batch 1, one hypothesis kept).
    Returns (the best hypothesis' new tokens, its eos appended when one
    ended it, and its score)."""
    K = num_beams
    max_length = len(prompt) + max_new
    beams = [list(prompt) for _ in range(K)]
    scores = np.array([0.0] + [-1e9] * (K - 1))
    hyps = []            # [(score, tokens, eos or None)], BeamHypotheses.beams
    worst = [1e9]

    def add(hyp, sum_logprobs, end):
        score = sum_logprobs / (len(hyp) ** length_penalty)
        if len(hyps) < K or score > worst[0]:
            hyps.append((score, hyp, end))
            if len(hyps) > K:
                ranked = sorted((s, i) for i, (s, _, _) in enumerate(hyps))
                del hyps[ranked[0][1]]
                worst[0] = ranked[1][0]
            else:
                worst[0] = min(score, worst[0])

    def is_done(best, cur_len):
        if len(hyps) < K:
            return False
        if early_stopping is True:
            return True
        if early_stopping == "never" and length_penalty > 0:
            high = best / max_length ** length_penalty
        else:
            high = best / cur_len ** length_penalty
        return worst[0] >= high

    cur_len, done = len(prompt), False
    while True:
        rows = []
        for b in range(K):
            s = lp(beams[b]).copy()
            for t in banned_ngrams(beams[b], no_repeat):
                s[t] = -np.inf
            rows.append(s + scores[b])
        flat = np.concatenate(rows)
        V = len(rows[0])
        n_cand = max(2, 1 + len(eos)) * K
        order = np.lexsort((np.arange(len(flat)), -flat))[:n_cand]
        new = []
        for rank, idx in enumerate(order):
            b, t = divmod(int(idx), V)
            if t in eos:
                if rank >= K:
                    continue
                add(list(beams[b]), flat[idx], t)
            else:
                new.append((flat[idx], b, t))
            if len(new) == K:
                break
        done = done or is_done(flat[order[0]], cur_len)
        beams = [beams[b] + [t] for _, b, t in new]
        scores = np.array([s for s, _, _ in new])
        cur_len += 1
        if done or cur_len >= max_length:
            break
    if not done:
        for b in range(K):
            add(beams[b], scores[b], None)
    best = sorted(hyps, key=lambda h: h[0])[-1]
    tokens = best[1][len(prompt):] + ([best[2]] if best[2] is not None else [])
    return tokens, best[0]
