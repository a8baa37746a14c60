"""T5ForConditionalGeneration imported whole and run as an encoder-decoder
(docs/reference.md, Encoder-decoder models): tiny random checkpoints
written as Hugging Face writes them (tests/hf/checkpoints.py) of t5 (relu,
lm_head tied to shared: the d_model^-0.5 scaling), t5-v1_1 / flan-t5
(gated-gelu, untied lm_head), flan-t5-small's shape (d_kv * heads apart from
d_model) and mt5, against the float64 port of
T5ForConditionalGeneration.forward (tests/hf/ports.py, from modeling_t5.py)
on fresh random sources and targets:

- relattn_logprobs(model, target, source): each target token's log-prob
  given the source and the target before it (labels shifted right behind
  decoder_start_token_id), the top token and its log-prob;
  relattn_score / relattn_perplexity(model, target, source);
- TEXT arguments through the checkpoint's SentencePiece tokenizer, </s>
  appended to both as T5Tokenizer does;
- export -> import: the same sha256 and the same scores;
- relattn_quantize int8 / bf16 covers the decoder's linear weights (cross-
  attention included), close to the float model;
- the 2-argument forms refuse an encoder-decoder, the 3-argument forms any
  other model, with their exact text; NULL gives NULL.

Tolerance: 1e-4 absolute on log-probs and scores per token (float32 against
float64; measured errors are around 1e-6). Quantized, against the float
model's log-probs per token on these tiny random models: int8 mean under 0.1
and max under 0.5 (measured means 0.03-0.05, maxima 0.10-0.23), bf16 mean
under 0.03 and max under 0.15 (measured 0.01-0.015, 0.03-0.08).
"""
import json
import os
import pathlib
import re
import sqlite3
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import checkpoints  # noqa: E402
import ports  # noqa: E402

TOL = 1e-4

CASES = {
    "t5-relu-tied": dict(ffn="relu", decoder_layers=2),
    "t5-v1_1-gated-gelu-untied": dict(ffn="gated-gelu", decoder_layers=3),
    "flan-t5-small-shaped": dict(ffn="gated-gelu", d=48, heads=3, d_kv=8, ff=80,
                                 decoder_layers=2),
    "t5-relu-wide-kv-one-layer": dict(ffn="relu", d=32, heads=4, d_kv=16,
                                      decoder_layers=1),
    "mt5-gated-gelu": dict(ffn="gated-gelu", model_type="mt5", decoder_layers=2),
}


def make(case, root, rng):
    kw = dict(CASES[case])
    cls = ("MT5" if kw.get("model_type") == "mt5" else "T5") + "ForConditionalGeneration"
    return checkpoints.t5(root, rng, cls, **kw)


def import_checkpoint(db, ck, name="m"):
    return db.execute("SELECT relattn_import(?, ?, ?, ?, ?)",
                      (name, ck.read("weights"), ck.path("config").read_text(),
                       ck.read("tokenizer"), ck.path("tokenizer_config").read_text())
                      ).fetchone()[0]


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


def random_ids(rng, ck, n):
    # ordinary pieces: past the specials (pad, eos, unk) and the extra ids
    return [int(t) for t in rng.integers(3, ck.config["vocab_size"] - 8, n)]


def reference(ck, src, tgt):
    """The port's log-probs of tgt + </s> given src + </s>: (logprob of each
    label, top token, top log-prob)."""
    eos = ck.special["eos"]
    labels = list(tgt) + [eos]
    out = ports.t5_conditional_generation_forward(
        ck.config, ck.params, list(src) + [eos], ports.t5_shift_right(ck.config, labels))
    lp = ports.log_softmax(out["logits"])
    return (lp[np.arange(len(labels)), labels], lp.argmax(-1), lp.max(-1), labels)


def err(db, sql, *args):
    with pytest.raises(sqlite3.Error) as e:
        db.execute(sql, args).fetchall()
    return str(e.value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_logprobs_equal_the_port(db, rng, tmp_path, case):
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    cfg = json.loads(db.execute("SELECT config FROM relattn_model").fetchone()[0])
    assert cfg["decoder"] == {"n_layers": CASES[case]["decoder_layers"], "start": 0}
    assert cfg["tie_embeddings"] == (CASES[case]["ffn"] == "relu")
    for n_src, n_tgt in ((1, 1), (int(rng.integers(2, 12)), int(rng.integers(2, 12))),
                         (int(rng.integers(20, 40)), int(rng.integers(12, 30))),
                         # over 256 target rows: the FFN's second block of rows
                         (int(rng.integers(2, 8)), int(rng.integers(257, 330)))):
        src, tgt = random_ids(rng, ck, n_src), random_ids(rng, ck, n_tgt)
        lp, top, top_lp, labels = reference(ck, src, tgt)
        rows = db.execute("SELECT pos, token, logprob, top_token, top_logprob "
                          "FROM relattn_logprobs('m', ?, ?)",
                          (toks(tgt), toks(src))).fetchall()
        assert [r[0] for r in rows] == list(range(n_tgt + 1))
        assert [r[1] for r in rows] == labels
        got = np.array([r[2] for r in rows])
        assert np.abs(got - lp).max() < TOL, (case, np.abs(got - lp).max())
        assert np.abs(np.array([r[4] for r in rows]) - top_lp).max() < TOL
        # the top token, where the port's is clear of the runner-up
        assert [r[3] for r in rows] == list(top)
        score = db.execute("SELECT relattn_score('m', ?, ?)",
                           (toks(tgt), toks(src))).fetchone()[0]
        assert abs(score - lp.sum()) < TOL * len(labels)
        ppl = db.execute("SELECT relattn_perplexity('m', ?, ?)",
                         (toks(tgt), toks(src))).fetchone()[0]
        assert abs(np.log(ppl) + lp.mean()) < TOL


def test_the_scaling_of_the_tied_head_matters(db, rng, tmp_path):
    """The relu checkpoint's head is shared.weight times d_model^-0.5: the
    same logits unscaled give other log-probs (the test would pass without
    the scaling otherwise)."""
    ck = make("t5-relu-tied", tmp_path, rng)
    import_checkpoint(db, ck)
    src, tgt = random_ids(rng, ck, 7), random_ids(rng, ck, 5)
    eos = ck.special["eos"]
    out = ports.t5_conditional_generation_forward(
        ck.config, ck.params, src + [eos], ports.t5_shift_right(ck.config, tgt + [eos]))
    unscaled = ports.log_softmax(out["logits"] * ck.config["d_model"] ** 0.5)
    got = db.execute("SELECT relattn_score('m', ?, ?)", (toks(tgt), toks(src))).fetchone()[0]
    scaled_sum = reference(ck, src, tgt)[0].sum()
    assert abs(got - scaled_sum) < 6 * TOL
    assert abs(got - unscaled[np.arange(6), tgt + [eos]].sum()) > 100 * TOL


def test_text_arguments_use_the_tokenizer(db, rng, tmp_path):
    """TEXT target and source: T5Tokenizer's ids, </s> after each."""
    ck = make("t5-v1_1-gated-gelu-untied", tmp_path, rng)
    import_checkpoint(db, ck)
    source, target = "the quick brown fox jumps over the dog", "a lazy dog"
    src = ck.encode(source)
    tgt = ck.encode(target)
    assert db.execute("SELECT relattn_tokenize('m', ?)", (target,)).fetchone()[0] == toks(tgt)
    lp = reference(ck, src, tgt)[0]
    got = [r[0] for r in db.execute("SELECT logprob FROM relattn_logprobs('m', ?, ?)",
                                    (target, source))]
    assert np.abs(np.array(got) - lp).max() < TOL
    assert (db.execute("SELECT relattn_score('m', ?1, ?2) = relattn_score('m', "
                       "relattn_tokenize('m', ?1), relattn_tokenize('m', ?2))",
                       (target, source)).fetchone()[0] == 1)


def test_encoder_of_the_whole_model_still_embeds(db, rng, tmp_path):
    """relattn_embed on the encoder-decoder: the encoder's mean, as
    T5EncoderModel's (the decoder changes nothing there)."""
    ck = make("flan-t5-small-shaped", tmp_path, rng)
    import_checkpoint(db, ck)
    ids = random_ids(rng, ck, 13)
    want = ports.mean_pooling(ports.t5_encoder_forward(
        ck.config, ck.params, ids + [ck.special["eos"]])["hidden"])
    got = np.frombuffer(db.execute("SELECT relattn_embed('m', ?)", (toks(ids),)
                                   ).fetchone()[0], "<f4")
    assert np.abs(got - want).max() < TOL


def test_export_import_same_sha256_and_scores(db, rng, tmp_path):
    ck = make("t5-v1_1-gated-gelu-untied", tmp_path, rng)
    n = import_checkpoint(db, ck)
    assert db.execute("SELECT relattn_import('m2', relattn_export('m'))").fetchone()[0] == n
    sha = db.execute("SELECT name, sha256 FROM relattn_model ORDER BY name").fetchall()
    assert sha[0][1] == sha[1][1] and sha[0][1]
    src, tgt = toks(random_ids(rng, ck, 9)), toks(random_ids(rng, ck, 6))
    assert (db.execute("SELECT relattn_score('m', ?1, ?2) = relattn_score('m2', ?1, ?2)",
                       (tgt, src)).fetchone()[0] == 1)
    names = {r[0] for r in db.execute("SELECT name FROM relattn_tensor WHERE model = 'm2'")}
    assert {"dec.layers.2.xattn.wq", "dec.ln_f.weight", "dec.rel_bias", "lm_head"} <= names


@pytest.mark.parametrize("kind", ["t5-v1_1-gated-gelu-untied", "t5-relu-tied"])
@pytest.mark.parametrize("mode,tol", [("int8", (0.1, 0.5)), ("bf16", (0.03, 0.15))])
def test_quantized_close_to_float(db, rng, tmp_path, mode, tol, kind):
    """The tied checkpoint's output is the shared embedding (int8: an int8
    product over it) times d_model^-0.5."""
    ck = make(kind, tmp_path, rng)
    import_checkpoint(db, ck)
    db.execute("SELECT relattn_quantize('m', 'q', ?)", (mode,))
    dtype = "I8" if mode == "int8" else "BF16"
    rows = dict(db.execute("SELECT name, dtype FROM relattn_tensor WHERE model = 'q'"))
    tables = ("tok_emb",) + (("lm_head",) if "untied" in kind else ())
    for name in ("dec.layers.0.attn.wq", "dec.layers.1.xattn.wk",
                 "dec.layers.1.xattn.wo", "layers.1.ffn.w2") + tables:
        assert rows[name] == dtype, name
    assert ("lm_head" in rows) == ("untied" in kind)
    if mode == "int8":
        assert rows["dec.layers.1.xattn.wv.scale"] == "F32"
        assert all(rows[t + ".scale"] == "F32" for t in tables)
    diffs = []
    for _ in range(4):
        src, tgt = toks(random_ids(rng, ck, 10)), toks(random_ids(rng, ck, 8))
        q = "SELECT logprob FROM relattn_logprobs(?, ?, ?)"
        a = np.array([r[0] for r in db.execute(q, ("m", tgt, src))])
        b = np.array([r[0] for r in db.execute(q, ("q", tgt, src))])
        assert not np.array_equal(a, b)      # quantized: not the same numbers
        diffs.extend(np.abs(a - b))
    print(mode, "mean", np.mean(diffs), "max", np.max(diffs))
    assert np.mean(diffs) < tol[0] and np.max(diffs) < tol[1], (np.mean(diffs), np.max(diffs))


def test_refusals(db, rng, tmp_path):
    ck = make("t5-relu-tied", tmp_path, rng)
    import_checkpoint(db, ck)
    enc = checkpoints.t5(tmp_path / "enc", rng, "T5EncoderModel")
    import_checkpoint(db, enc, "enc")
    src, tgt = toks(random_ids(rng, ck, 4)), toks(random_ids(rng, ck, 3))
    for fn in ("relattn_score", "relattn_perplexity"):
        assert err(db, f"SELECT {fn}('m', ?)", tgt) == (
            f"{fn}: model 'm' is an encoder-decoder: give the source as the third "
            f"argument, {fn}(model, target, source)")
        assert err(db, f"SELECT {fn}('enc', ?, ?)", tgt, src) == (
            f"{fn}: model 'enc' is not an encoder-decoder; a source (the third "
            "argument) is for encoder-decoder models, such as "
            "T5ForConditionalGeneration")
    assert err(db, "SELECT * FROM relattn_logprobs('m', ?)", tgt) == (
        "relattn_logprobs: model 'm' is an encoder-decoder: give the source as "
        "the third argument, relattn_logprobs(model, target, source)")
    assert err(db, "SELECT * FROM relattn_logprobs('enc', ?, ?)", tgt, src) == (
        "relattn_logprobs: model 'enc' is not an encoder-decoder; a source (the "
        "third argument) is for encoder-decoder models, such as "
        "T5ForConditionalGeneration")
    V = ck.config["vocab_size"]
    assert err(db, "SELECT relattn_score('m', ?, ?)", tgt, toks([3, 5000])) == (
        "relattn_score: source has token 5000 at position 1, outside the model's "
        f"vocabulary [0, {V})")
    assert err(db, "SELECT * FROM relattn_logprobs('m', ?, ?)", toks([9999]), src) == (
        "relattn_logprobs: target has token 9999 at position 0, outside the "
        f"model's vocabulary [0, {V})")
    assert err(db, "SELECT relattn_score('m', ?, ?)", tgt, b"") == (
        "relattn_score: source is empty")
    assert err(db, "SELECT relattn_score('m', ?, ?)", "", src) == (
        "relattn_score: target is empty")
    assert err(db, "SELECT relattn_score('nope', ?, ?)", tgt, src).startswith(
        "relattn_score: no model named 'nope'")
    # a function without a 3-argument form says the model is not for it
    assert err(db, "SELECT relattn_svg_surprise('m', ?)", tgt) == (
        "relattn_svg_surprise: model 'm' is an encoder-decoder; only decoder "
        "models give next-token probabilities here")
    # the memory of the encoder pass and the decoder is checked first
    long = toks(np.arange(3000) % 300 + 3)
    db.execute("SELECT relattn_max_memory(1048576)")
    assert re.fullmatch(r"relattn_score: needs \d+ bytes, over the limit of 1048576 per "
                        r"call \(relattn_max_memory\)",
                        err(db, "SELECT relattn_score('m', ?, ?)", long, long))
    db.execute("SELECT relattn_max_memory(1 << 31)")
    # relattn_scan embeds with the encoder, and says how to score
    db.execute("CREATE TABLE docs(body TEXT)")
    db.execute("INSERT INTO docs VALUES ('the quick brown fox'), ('a lazy dog')")
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', source='docs', "
               "tokens='body')")
    assert [len(r[0]) for r in db.execute("SELECT embedding FROM temp.job")] == [4 * 32] * 2
    assert err(db, "SELECT score FROM temp.job") == (
        "relattn_scan: model 'm' is an encoder-decoder; score a target given a source with "
        "relattn_score(model, target, source) (embedding works: its encoder's)")
    # NULL target or source: NULL
    assert db.execute("SELECT relattn_score('m', NULL, ?), relattn_score('m', ?, NULL)",
                      (src, tgt)).fetchone() == (None, None)
    assert db.execute("SELECT count(*) FROM relattn_logprobs('m', ?, NULL)",
                      (tgt,)).fetchone()[0] == 0


def test_reference_example(tmp_path):
    """docs/reference.md's encoder-decoder example, as printed, in the
    sqlite3 shell (tests/shell/test_doc_examples.py's checker), on a
    T5ForConditionalGeneration (relu, tied, 2 decoder layers) written in
    hf-t5cg/ with a fixed seed; it shows nothing that depends on the
    weights' values."""
    root = pathlib.Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "tests" / "shell"))
    from test_doc_examples import run_sql
    doc = root / "docs" / "reference.md"
    text = doc.read_text()
    at = text.index("<!-- run by tests/hf/test_t5_generation.py")
    start = text.index("```sql\n", at) + len("```sql\n")
    code, line = text[start:text.index("```", start)], text.count("\n", 0, start) + 1
    checkpoints.t5(tmp_path / "hf-t5cg", np.random.default_rng(27),
                   "T5ForConditionalGeneration", ffn="relu", decoder_layers=2)
    stmts = run_sql(code, line, tmp_path, "docs/reference.md, Encoder-decoder models")
    assert sum(bool(s.want_out) for s in stmts) >= 5
    assert sum(s.want_err is not None for s in stmts) >= 2


def test_decoder_config_refusals(db, rng, tmp_path):
    """The native config's decoder keys, checked with their message; a
    refused import writes nothing."""
    ck = make("t5-relu-tied", tmp_path, rng)
    import_checkpoint(db, ck)
    V = ck.config["vocab_size"]
    before = db.execute("SELECT name, sha256 FROM relattn_model").fetchall()
    q = ("SELECT relattn_import('m2', relattn_export('m'), json_set((SELECT config FROM "
         "relattn_model WHERE name = 'm'), ?, json(?)))")
    for path, value, msg in [
            ("$.decoder.n_layers", 0, "'decoder.n_layers' must be between 1 and 65536, not 0"),
            ("$.decoder.start", V, f"'decoder.start' must be a token id below vocab_size ({V})"),
            ("$.decoder.start", None, f"'decoder.start' must be a token id below vocab_size ({V})"),
            ("$.arch", "decoder", "'decoder' needs arch 'encoder', head 'lm' and norm 'pre'"),
            ("$.head", "none", "'decoder' needs arch 'encoder', head 'lm' and norm 'pre'"),
            ("$.decoder", "x", "'decoder' must be an object or null, not text"),
            ("$.position", {"type": "alibi"}, "'decoder' needs position type 't5', not 'alibi'")]:
        assert err(db, q, path, json.dumps(value)) == "relattn_import: config: " + msg, path
    assert err(db, q, "$.decoder.n_layers", "3") == (
        "relattn_import: tensor 'dec.layers.2.ln1.weight' is missing (the config needs it)")
    assert db.execute("SELECT name, sha256 FROM relattn_model").fetchall() == before


# ---- relattn_generate on an encoder-decoder -------------------------------------

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sql"))
import generate_ref  # noqa: E402


def port_next_logprobs(ck, src):
    """decoder ids (the start token first) -> log p(next token), float64:
    the port of T5ForConditionalGeneration.forward given src + </s>."""
    enc = list(src) + [ck.special["eos"]]

    def f(seq):
        out = ports.t5_conditional_generation_forward(ck.config, ck.params, enc, list(seq))
        return ports.log_softmax(out["logits"])[-1]
    return f


def generated_ids(db, src, options):
    """relattn_generate_tokens' tokens (eos included) and log-probs."""
    rows = db.execute("SELECT step, token, logprob FROM relattn_generate_tokens('m', ?, ?)",
                      (toks(src), json.dumps(options))).fetchall()
    assert [r[0] for r in rows] == list(range(len(rows)))
    return [r[1] for r in rows], np.array([r[2] for r in rows])


@pytest.mark.parametrize("case", ["t5-relu-tied", "t5-v1_1-gated-gelu-untied"])
def test_generation_equals_hf_generate_on_the_port(db, rng, tmp_path, case):
    """Greedy and beam search (Hugging Face's generate, ported to float64 in
    tests/sql/generate_ref.py) over the port's decoder: the decoder starts
    from decoder_start_token_id, the source is encoded with its </s>, the
    length penalty counts the decoder's tokens, the start token included,
    as generate counts decoder_input_ids. Random sources; where two
    candidates are within the tolerance of each other the paths may part,
    so a source whose path has such a near-tie is drawn again."""
    ck = make(case, tmp_path, rng)
    import_checkpoint(db, ck)
    eos, start = ck.special["eos"], 0
    checked = {"greedy": 0, "beam": 0}
    for _ in range(12):
        src = random_ids(rng, ck, int(rng.integers(3, 20)))
        lp = port_next_logprobs(ck, src)
        want = generate_ref.greedy(lp, [start], 12, eos=[eos])
        # a clear argmax at each step of the reference path
        seq, clear = [start], True
        for t in want:
            s = np.sort(lp(seq))
            clear &= s[-1] - s[-2] > 1e-3
            seq.append(t)
        if not clear:
            continue
        got, got_lp = generated_ids(db, src, {"max_new_tokens": 12})
        assert got == want, (case, src)
        ref_lp = [lp([start] + want[:i])[t] for i, t in enumerate(want)]
        assert np.abs(got_lp - ref_lp).max() < TOL
        text = db.execute("SELECT relattn_generate('m', ?, ?)",
                          (toks(src), json.dumps({"max_new_tokens": 12}))).fetchone()[0]
        # the text leaves out eos and the ids past the pieces (the sentinels
        # <extra_id_N> and the padding of the vocabulary, 8 ids here), as
        # decode with skip_special_tokens does
        ids = [t for t in want if t != eos and t < ck.config["vocab_size"] - 8]
        assert text == db.execute("SELECT relattn_detokenize('m', ?)",
                                  (toks(ids),)).fetchone()[0]
        checked["greedy"] += 1

        opts = {"num_beams": 3, "max_new_tokens": 8, "length_penalty": 0.7,
                "no_repeat_ngram_size": 2}
        bw, bscore = generate_ref.beam_search(lp, [start], 8, num_beams=3, eos=[eos],
                                              length_penalty=0.7, no_repeat=2)
        bg, _ = generated_ids(db, src, opts)
        assert bg == bw, (case, src, bscore)
        checked["beam"] += 1
    assert checked["greedy"] >= 4 and checked["beam"] >= 4, checked


def test_generation_in_a_scan_and_its_refusals(db, rng, tmp_path):
    """The scan's generated column on an encoder-decoder equals
    relattn_generate row by row; an encoder without a decoder generates
    nothing, with the message saying which models do."""
    ck = make("t5-relu-tied", tmp_path, rng)
    import_checkpoint(db, ck)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB)")
    for i in range(1, 7):
        db.execute("INSERT INTO docs VALUES (?, ?)",
                   (i, toks(random_ids(rng, ck, int(rng.integers(2, 15))))))
    opts = json.dumps({"max_new_tokens": 6})
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='m', source='docs', "
               f"tokens='body', generate='{opts}')")
    got = db.execute("SELECT id, generated FROM temp.job ORDER BY id").fetchall()
    want = db.execute("SELECT id, relattn_generate('m', body, ?) FROM docs ORDER BY id",
                      (opts,)).fetchall()
    assert got == want and all(isinstance(g, str) for _, g in got)
    enc = checkpoints.t5(tmp_path / "enc", rng, "T5EncoderModel")
    import_checkpoint(db, enc, name="enc")
    assert err(db, "SELECT relattn_generate('enc', 'x')") == (
        "relattn_generate: model 'enc' is an encoder; only decoder and "
        "encoder-decoder models generate text")


@pytest.mark.parametrize("mode", ["float32", "int8", "bf16"])
def test_generation_same_bits_on_any_thread_count(db, rng, tmp_path, mode):
    """A step's products, its cross keys and values and its head run on the
    connection's threads, cut by output columns (src/forward.c,
    relattn_fwd_rows and relattn_fwd_head); each output is computed by one
    thread in one order, so greedy and beam search give the same tokens and
    log-probs, bit for bit, on 1, 2 and 3 threads. The model is wide enough
    to be cut (rows x in x out x a weight's bytes of 1 MB and over: at
    d_model 320 float32 products of one row, int8 and bf16 ones of three
    beams and the cross keys and values; a vocabulary of 2100, the head in
    1024-column pieces); in float32 the
    threaded log-probs are the port's within TOL."""
    ck = checkpoints.t5(tmp_path, rng, "T5ForConditionalGeneration", ffn="gated-gelu",
                        d=320, heads=4, d_kv=80, ff=640, decoder_layers=2, vocab=2100)
    import_checkpoint(db, ck, name="f")
    name = "f"
    if mode != "float32":
        db.execute("SELECT relattn_quantize('f', 'm', ?)", (mode,))
        name = "m"
    src = random_ids(rng, ck, 12)
    runs = []
    for threads in (1, 2, 3, 1):
        db.execute("SELECT relattn_threads(?)", (threads,))
        runs.append([db.execute(
            "SELECT step, token, logprob FROM relattn_generate_tokens(?, ?, ?)",
            (name, toks(src), json.dumps({"max_new_tokens": 8, "num_beams": beams,
                                          "eos_token_id": None}))).fetchall()
            for beams in (1, 3)])
    assert all(r == runs[0] for r in runs[1:])
    assert len(runs[0][0]) == 8 and len(runs[0][1]) == 8
    if mode == "float32":
        lp = port_next_logprobs(ck, src)
        seq = [0]
        for _, token, logprob in runs[0][0]:
            assert abs(lp(seq)[token] - logprob) < TOL
            seq.append(token)
