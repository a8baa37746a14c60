"""The sentence-transformers examples of docs/reference.md ("sentence-
transformers models") and of the README's model section, run as printed in
the sqlite3 shell (tests/shell/test_doc_examples.py's checker: every "-- =>"
output and "-- Error:" text exact) on a tiny model directory written here as
SentenceTransformer.save writes it (tests/hf/checkpoints.py): st-bert/, a
BertModel with relative_key positions, mean pooling, a Dense module (tanh)
and Normalize. Weights are random (fixed seed); the examples show nothing
that depends on their values."""
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "hf"))
sys.path.insert(0, str(ROOT / "tests" / "shell"))
import checkpoints  # noqa: E402
from test_doc_examples import run_sql  # noqa: E402

MARK = "<!-- run by tests/sql/test_st_doc.py"


def doc_block(path):
    """(code, first line) of the sql block after this test's comment."""
    text = path.read_text()
    at = text.index(MARK)
    start = text.index("```sql\n", at) + len("```sql\n")
    return text[start:text.index("```", start)], text.count("\n", 0, start) + 1


def write_dir(root):
    rng = np.random.default_rng(24)
    ck = checkpoints.bert(root / "st-bert", rng, "BertModel", position="relative_key")
    checkpoints.SentenceDir(ck, rng, pooling=["mean"], dense=[dict(out=16)], normalize=True,
                            max_seq_length=24)


@pytest.mark.parametrize("doc", ["docs/reference.md", "README.md"])
def test_doc_example(tmp_path, doc):
    write_dir(tmp_path)
    code, line = doc_block(ROOT / doc)
    stmts = run_sql(code, line, tmp_path, f"{doc}, sentence-transformers")
    assert sum(bool(s.want_out) for s in stmts) >= 2
    if doc.startswith("docs"):
        assert sum(s.want_err is not None for s in stmts) >= 3
