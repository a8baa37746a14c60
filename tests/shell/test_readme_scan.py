"""The README's relattn_scan examples, run as written in the sqlite3 shell
(on a random model made by tests/modelgen.py, saved where the README reads the
bundled one), and its score_corpus.sql command."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "shell"))
from test_readme_store import SO, make_model, run, section_sql  # noqa: E402

TITLE = "Batch jobs over a corpus: relattn_scan"


def test_readme_scan(tmp_path, rng):
    make_model(tmp_path, rng)
    out = run(section_sql(TITLE), tmp_path)
    assert out[1:6] == ["1|16|1|1", "2|12|1|1", "3|15|1|1", "4|8|1|1", "5|||"]
    assert out[6:8] == ["2", "3"]
    assert out[8] == "1|16"
    assert out[9] == "5"
    assert out[10:] == ["6||relattn_scan: body of id 6 is empty", "7|13|"]


def test_readme_score_corpus_command(tmp_path, rng):
    make_model(tmp_path, rng)
    run(".load " + SO[:-3] + "\nSELECT relattn_import('tiny', readfile('models/tiny.safetensors'));\n"
        "CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT);\n"
        "INSERT INTO docs(body) VALUES ('a'), ('bc'), (NULL), ('def');\n", tmp_path)
    text = (ROOT / "README.md").read_text()
    line = next(l for l in text.splitlines() if l.startswith("sqlite3 corpus.db"))
    so = SO[:-3] if SO.endswith(".so") else SO
    cmd = line.replace("corpus.db", "readme.db").replace(".load ./relattn", f".load {so}")
    cmd = cmd.replace("sql/score_corpus.sql", str(ROOT / "sql" / "score_corpus.sql"))
    r = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == 'score_corpus: done, 4 rows in "docs_scores"'


def test_readme_score_corpus_columns_command(tmp_path, rng):
    """The README's third score_corpus command: a classifier's labels."""
    sys.path.insert(0, str(ROOT / "tests" / "sql"))
    import reference_model as ref
    from conftest import connect
    cfg = ref.with_head(ref.random_config(rng, arch="encoder"), "classifier", labels=["a", "b"])
    db = connect(str(tmp_path / "readme.db"))
    db.execute("SELECT relattn_import('clf', ?)",
               (ref.safetensors_bytes(ref.random_params(rng, cfg), cfg),))
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO docs(body) VALUES (?)", [("a",), ("bc",), (None,), ("def",)])
    db.commit()
    text = (ROOT / "README.md").read_text().replace("\\\n", "")
    line = next(l for l in text.splitlines() if "@columns label,prob" in l)
    so = SO[:-3] if SO.endswith(".so") else SO
    cmd = line.replace("corpus.db", "readme.db").replace(".load ./relattn", f".load {so}")
    cmd = cmd.replace("sql/score_corpus.sql", str(ROOT / "sql" / "score_corpus.sql"))
    r = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert (r.returncode, r.stdout) == (0, 'score_corpus: done, 4 rows in "docs_scores"\n'), \
        r.stderr
    assert db.execute("SELECT s.id, s.label IS relattn_classify('clf', d.body), s.prob "
                      "IS NULL FROM docs_scores s JOIN docs d USING (id)").fetchall() == \
        [(1, 1, 0), (2, 1, 0), (3, 1, 1), (4, 1, 0)]
    assert [c[1] for c in db.execute("PRAGMA table_info(docs_scores)")] == \
        ["id", "label", "prob", "error"]
    db.close()
