"""The examples of docs/reference.md (relattn_classify's pairs,
relattn_zero_shot, relattn_token_labels) and of README.md that need
Hugging Face checkpoints, run as printed in the sqlite3 shell
(tests/shell/test_doc_examples.py's checker: every "-- =>" output and
"-- Error:" text exact) on tiny checkpoints written here in HF's layout
(tests/hf/checkpoints.py): hf-nli/, a DeBERTa-v3-style
DebertaV2ForSequenceClassification with the labels entailment, neutral,
contradiction, and hf-ner/, a BertForTokenClassification with NER tags.
Weights are random (fixed seed); the examples show nothing that depends
on their values."""
import pathlib
import re
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "hf"))
sys.path.insert(0, str(ROOT / "tests" / "shell"))
import checkpoints  # noqa: E402
from test_doc_examples import run_sql  # noqa: E402

MARK = "<!-- run by tests/hf/test_heads_doc.py"
FILES = {"reference": ROOT / "docs" / "reference.md", "readme": ROOT / "README.md"}


def doc_blocks(path):
    """(code, first line) of each sql block after this test's comments."""
    text = path.read_text()
    out = []
    for m in re.finditer(re.escape(MARK), text):
        start = text.index("```sql\n", m.start()) + len("```sql\n")
        out.append((text[start:text.index("```", start)], text.count("\n", 0, start) + 1))
    return out


@pytest.mark.parametrize("doc", sorted(FILES))
def test_examples(tmp_path, doc):
    rng = np.random.default_rng(24)
    checkpoints.deberta(tmp_path / "hf-nli", rng, "DebertaV2ForSequenceClassification")
    checkpoints.bert(tmp_path / "hf-ner", rng, "BertForTokenClassification", n_labels=6)
    blocks = doc_blocks(FILES[doc])
    assert blocks, doc
    # one script: later blocks use the models the first imports
    code = "\n".join(b[0] for b in blocks)
    stmts = run_sql(code, blocks[0][1], tmp_path, f"{FILES[doc].name}, Hugging Face heads")
    assert sum(bool(s.want_out) for s in stmts) >= (8 if doc == "reference" else 2)
    assert sum(s.want_err is not None for s in stmts) >= (6 if doc == "reference" else 1)
