"""The worked example of docs/reference.md's "Hugging Face checkpoints",
run as printed in the sqlite3 shell (tests/shell/test_doc_examples.py's
checker: every "-- =>" output and "-- Error:" text exact) on tiny
checkpoints written here in HF's layout (tests/hf/checkpoints.py): hf-t5/,
a T5EncoderModel with a gated-gelu FFN, and hf-deberta/, a DeBERTa-v3-style
DebertaV2ForSequenceClassification. Weights are random (fixed seed);
the example shows nothing that depends on their values."""
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "hf"))
sys.path.insert(0, str(ROOT / "tests" / "shell"))
import checkpoints  # noqa: E402
from test_doc_examples import run_sql  # noqa: E402

DOC = ROOT / "docs" / "reference.md"
MARK = "<!-- run by tests/sql/test_hf_doc.py"


def doc_block():
    """(code, first line) of the sql block after this test's comment."""
    text = DOC.read_text()
    at = text.index(MARK)
    start = text.index("```sql\n", at) + len("```sql\n")
    return text[start:text.index("```", start)], text.count("\n", 0, start) + 1


def test_reference_example(tmp_path):
    rng = np.random.default_rng(14)
    checkpoints.t5(tmp_path / "hf-t5", rng, "T5EncoderModel", ffn="gated-gelu")
    checkpoints.deberta(tmp_path / "hf-deberta", rng,
                        "DebertaV2ForSequenceClassification")
    code, line = doc_block()
    stmts = run_sql(code, line, tmp_path, "docs/reference.md, Hugging Face checkpoints")
    # the example shows results and refusals, not only statements that run
    assert sum(bool(s.want_out) for s in stmts) >= 5
    assert sum(s.want_err is not None for s in stmts) >= 3
