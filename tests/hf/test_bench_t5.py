"""tests/bench/t5_encoder.py, the PyTorch T5 encoder make bench-deberta times (and exports to
ONNX) on its t5 shape: on a random tiny checkpoint of tests/hf/checkpoints.py's t5() (HF's
tensor names, 8 buckets, max_distance 20, so rows of 40 reach the log buckets and the cap),
relu and gated-gelu, a padded batch of two rows, it computes what relattn computes for the
imported checkpoint (relattn_embed's mean over the row, </s> included) and what the float64 port
of modeling_t5.py (tests/hf/ports.py) computes for its hidden states.

Tolerance: 1e-4 absolute (float32 against float32 and against float64; measured about 1e-6).

Not run under the sanitizers: this is PyTorch's code, not the extension's."""
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import checkpoints  # noqa: E402
import ports  # noqa: E402
from conftest import from_f32  # noqa: E402

if os.environ.get("RELATTN_SANITIZED"):   # before torch is imported: its own leaks at exit
    pytest.skip("PyTorch is not run under the sanitizer preload", allow_module_level=True)

torch = pytest.importorskip("torch")
import t5_encoder  # noqa: E402

TOL = 1e-4


@pytest.mark.parametrize("ffn", ["relu", "gated-gelu"])
def test_torch_t5_encoder_is_relattns(db, rng, tmp_path, ffn):
    ck = checkpoints.t5(tmp_path, rng, "T5EncoderModel", ffn=ffn)
    db.execute("SELECT relattn_import('m', ?, ?, ?, ?)",
               (ck.read("weights"), ck.path("config").read_text(), ck.read("tokenizer"),
                ck.path("tokenizer_config").read_text()))
    model = t5_encoder.from_tensors(ck.config, ck.params)
    eos = ck.special["eos"]
    rows = [rng.integers(3, ck.n_pieces, n).tolist() for n in (7, 40)]
    n = max(len(r) for r in rows) + 1
    ids = torch.zeros((len(rows), n), dtype=torch.long)
    mask = torch.zeros((len(rows), n), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, :len(r) + 1] = torch.tensor(r + [eos])
        mask[b, :len(r) + 1] = 1
    with torch.inference_mode():
        hidden = model(ids, mask).double().numpy()
    for b, r in enumerate(rows):
        m = len(r) + 1
        want = ports.t5_encoder_forward(ck.config, ck.params, r + [eos])["hidden"]
        err = np.abs(hidden[b, :m] - want).max()
        assert err < TOL, ("hidden vs float64 port", b, err)
        got = from_f32(db.execute("SELECT relattn_embed('m', ?)",
                                  (np.asarray(r, "<i4").tobytes(),)).fetchone()[0])
        err = np.abs(hidden[b, :m].mean(0) - got).max()
        assert err < TOL, ("mean vs relattn_embed", b, err)
        assert np.abs(got).max() > 0.1   # not a trivial output


def test_relative_bucket_is_hfs():
    """The buckets against the port's (T5Attention._relative_position_bucket), both directions,
    past max_distance."""
    rel = torch.arange(-300, 301)
    for nb, md in ((8, 20), (32, 128)):
        got = t5_encoder.relative_bucket(rel, nb, md).numpy()
        want = ports.t5_relative_position_bucket(rel.numpy(), True, nb, md)
        assert (got == want).all(), (nb, md)
