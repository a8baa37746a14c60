"""tests/bench/t5_generate.py, the PyTorch T5ForConditionalGeneration with a key/value cache that
make bench-generate times relattn_generate against: on tiny random checkpoints of
tests/hf/checkpoints.py's t5() (HF's tensor names; relu with lm_head tied to shared, so the
d_model**-0.5 scaling; gated-gelu with an untied lm_head, as t5-v1_1 / flan-t5; 8 buckets,
max_distance 20, so 24 new tokens reach the log buckets and the cap) and fresh random sources,
its greedy tokens are relattn_generate_tokens' and its per-step log-probs are relattn's and the
float64 port's (tests/hf/ports.py, T5ForConditionalGeneration.forward over the whole prefix, so
the cached path is checked against a rerun too).

Tolerance: 1e-4 absolute on each log-prob (float32 against float32 and against float64; measured
5e-7 to 5e-6 over 24 steps). A source whose path has a near tie (the top two log-probs within 1e-3) is drawn
again: float32 sides may part there.

Not run under the sanitizers: this is PyTorch's code, not the extension's."""
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import checkpoints  # noqa: E402
import ports  # noqa: E402

if os.environ.get("RELATTN_SANITIZED"):   # before torch is imported: its own leaks at exit
    pytest.skip("PyTorch is not run under the sanitizer preload", allow_module_level=True)

torch = pytest.importorskip("torch")
import t5_generate  # noqa: E402

TOL = 1e-4
CASES = {
    "relu-tied": dict(ffn="relu", decoder_layers=2),
    "gated-gelu-untied": dict(ffn="gated-gelu", decoder_layers=3, layers=1),
}


def relattn_tokens(db, src, options):
    rows = db.execute("SELECT token, logprob FROM relattn_generate_tokens('m', ?, ?)",
                      (np.asarray(src, "<i4").tobytes(), json.dumps(options))).fetchall()
    return [r[0] for r in rows], np.array([r[1] for r in rows])


def port_logprobs(ck, enc, seq):
    out = ports.t5_conditional_generation_forward(ck.config, ck.params, enc, seq)
    return ports.log_softmax(out["logits"])[-1]


@pytest.mark.parametrize("case", sorted(CASES))
def test_torch_greedy_with_cache_is_relattns(db, rng, tmp_path, case):
    ck = checkpoints.t5(tmp_path, rng, "T5ForConditionalGeneration", **CASES[case])
    db.execute("SELECT relattn_import('m', ?, ?, ?, ?)",
               (ck.read("weights"), ck.path("config").read_text(), ck.read("tokenizer"),
                ck.path("tokenizer_config").read_text()))
    gen = t5_generate.T5Generator(ck.config, ck.params)
    eos, start = ck.special["eos"], ck.config["decoder_start_token_id"]
    checked = 0
    for _ in range(10):
        src = [int(t) for t in rng.integers(3, ck.config["vocab_size"] - 8,
                                            int(rng.integers(3, 30)))]
        enc = src + [eos]
        new = 24
        got, got_lp = gen.greedy(enc, new)                 # eos ignored: the full length
        assert len(got) == new
        # the float64 port over the whole prefix at each step of the path
        seq, clear, want_lp = [start], True, []
        for t in got:
            lp = port_logprobs(ck, enc, seq)
            top = np.sort(lp)
            clear &= top[-1] - top[-2] > 1e-3
            assert t == int(np.argmax(lp)) or not clear, (case, src, seq)
            want_lp.append(lp[t])
            seq.append(t)
        if not clear:
            continue
        err = np.abs(np.array(got_lp) - want_lp).max()
        assert err < TOL, ("torch vs float64 port", case, err)
        rt, rt_lp = relattn_tokens(db, src, {"max_new_tokens": new, "eos_token_id": None})
        assert rt == got, (case, src)
        err = np.abs(rt_lp - got_lp).max()
        assert err < TOL, ("torch vs relattn", case, err)
        # with the model's eos: both stop at it, eos included in the tokens
        rt, rt_lp = relattn_tokens(db, src, {"max_new_tokens": new})
        got, got_lp = gen.greedy(enc, new, eos=eos)
        assert rt == got and np.abs(rt_lp - got_lp).max() < TOL, (case, src)
        checked += 1
    assert checked >= 4, checked
    assert np.abs(np.array(got_lp)).max() > 0.1       # not a trivial output


def test_causal_bucket_is_hfs():
    """The decoder's buckets against the port's (T5Attention._relative_position_bucket,
    bidirectional False), past max_distance."""
    dist = torch.arange(0, 400)
    for nb, md in ((8, 20), (32, 128)):
        got = t5_generate.causal_bucket(dist, nb, md).numpy()
        want = ports.t5_relative_position_bucket(-dist.numpy(), False, nb, md)
        assert (got == want).all(), (nb, md)
