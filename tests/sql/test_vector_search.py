"""Vector search: relattn's embeddings in sqlite-vec's vec0 tables, with the sentence encoder
committed in models/embed-manuals (trained by models/train_embedder.py).

- A table embedded through relattn_scan's embedding column into vec0 tables (cosine and L2),
  queried with relattn_embed of a text: the k nearest rows and their distances are those of a
  float64 numpy brute force over the same embeddings.
- The committed model imports, and its embeddings in SQL are the PyTorch model's (float32 and
  float64) within a stated tolerance, its tokens sentencepiece's.
- On the committed held-out pairs (models/embed-manuals/heldout.csv), recall@10 of
  relattn_embed + vec0 KNN, computed here, is at least a floor well above chance.
- The vector search examples of README.md, docs/reference.md and models/embed-manuals/README.md
  (the blocks marked as run by this file) run in the sqlite3 shell with vec0 loaded.

sqlite-vec's vec0.so comes from npm (tests/node/package.json, `npm ci`; tests/sqlite_vec.py):
without node and npm these tests are skipped, saying why."""
import csv
import importlib.util
import os
import re
import sqlite3
import sys

import numpy as np
import pytest

import sqlite_vec
from conftest import ROOT, SO, from_f32, rel_err

MODEL_DIR = ROOT / "models" / "embed-manuals"
sys.path.insert(0, str(ROOT / "models"))
import embed_eval  # noqa: E402

# recall@10 and MRR@10 of the committed model on its 361 held-out pairs, measured through SQL
# with relattn's mean pooling: 0.8504 and 0.6413 (models/embed-manuals/README.md). The floors,
# 0.05 under, leave room for another BLAS's last bits moving a document across a rank, and are far
# above chance (recall@10 10 / 361 = 0.028).
RECALL_FLOOR, MRR_FLOOR = 0.80, 0.59


@pytest.fixture(scope="module")
def vec0():
    path, why = sqlite_vec.vec0()
    if why:
        pytest.skip(why)
    return path


def connect(vec0, path=":memory:"):
    return embed_eval.connect(SO, vec0, path)


def heldout():
    with open(MODEL_DIR / "heldout.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def db(vec0):
    db = connect(vec0)
    assert embed_eval.import_model(db, "manuals", MODEL_DIR) > 0
    embed_eval.load_heldout(db, MODEL_DIR / "heldout.csv")
    yield db
    db.close()


def test_the_model_imports_as_a_bare_deberta_encoder(db):
    cfg = db.execute("SELECT json_extract(config, '$.source.class'), json_extract(config, '$.head'), "
                     "json_extract(config, '$.d_model') FROM relattn_model WHERE name = 'manuals'").fetchone()
    assert cfg == ("DebertaV2Model", "none", 128)
    assert len(db.execute("SELECT relattn_embed('manuals', 'list directory contents')").fetchone()[0]) == 4 * 128


@pytest.mark.parametrize("metric", ["cosine", "L2"])
def test_knn_is_the_brute_force_knn(db, metric):
    """vec0's k nearest (MATCH relattn_embed(...) AND k = 10) are numpy's over the embeddings the
    scan put into it, in the same order, at the same distances."""
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='manuals', source='heldout', "
               "tokens='document')")
    db.execute(f"CREATE VIRTUAL TABLE temp.vec_{metric} USING vec0(embedding float[128] distance_metric={metric})")
    db.execute(f"INSERT INTO temp.vec_{metric}(rowid, embedding) SELECT id, embedding FROM temp.job")
    ids, blobs = zip(*db.execute("SELECT id, embedding FROM temp.job ORDER BY id").fetchall())
    # what vec0 holds is what the scan gave, and the scan gives relattn_embed's vectors
    assert [b for (b,) in db.execute(f"SELECT embedding FROM temp.vec_{metric} ORDER BY rowid")] == list(blobs)
    assert db.execute("SELECT count(*) FROM heldout WHERE relattn_embed('manuals', document) = "
                      "(SELECT embedding FROM temp.job j WHERE j.id = heldout.id)").fetchone()[0] == len(ids)
    E = np.stack([from_f32(b) for b in blobs]).astype(np.float64)
    ids = np.array(ids)
    queries = db.execute("SELECT query FROM heldout ORDER BY id LIMIT 40").fetchall()
    queries += [("compress files",), ("Wrap Input Lines",), ("ключ шифрования",)]
    for (q,) in queries:
        got = db.execute(f"SELECT rowid, distance FROM temp.vec_{metric} WHERE embedding MATCH "
                         "relattn_embed('manuals', ?) AND k = 10 ORDER BY distance", (q,)).fetchall()
        v = from_f32(db.execute("SELECT relattn_embed('manuals', ?)", (q,)).fetchone()[0]).astype(np.float64)
        if metric == "cosine":
            dist = 1 - E @ v / (np.linalg.norm(E, axis=1) * np.linalg.norm(v))
        else:
            dist = np.linalg.norm(E - v, axis=1)
        order = np.argsort(dist, kind="stable")[:10]
        assert [r for r, _ in got] == ids[order].tolist(), q
        np.testing.assert_allclose([d for _, d in got], dist[order], rtol=1e-5, atol=1e-6)
    # an empty query is refused by relattn_embed, with its message, not matched against anything
    with pytest.raises(sqlite3.OperationalError, match=r"^relattn_embed: tokens is empty$"):
        db.execute(f"SELECT rowid FROM temp.vec_{metric} WHERE embedding MATCH relattn_embed('manuals', '') "
                   "AND k = 10").fetchall()
    db.execute("DROP TABLE temp.job")


def test_embeddings_are_the_pytorch_models():
    if os.environ.get("RELATTN_SANITIZED"):
        pytest.skip("PyTorch is not run under the sanitizer preload")
    torch = pytest.importorskip("torch")
    spm = pytest.importorskip("sentencepiece")
    import train_embedder as te
    sp = spm.SentencePieceProcessor(model_file=str(MODEL_DIR / "spm.model"))
    model = te.load(MODEL_DIR)
    rows = heldout()
    texts = [rows[0]["query"], rows[0]["document"], rows[-1]["document"], "Wrap INPUT lines, écrire",
             "x"]
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    db.load_extension(SO)
    embed_eval.import_model(db, "manuals", MODEL_DIR)
    seqs = [[te.CLS] + sp.encode(t) + [te.SEP] for t in texts]
    for t, s in zip(texts, seqs):
        tokens = db.execute("SELECT relattn_tokenize('manuals', ?)", (t,)).fetchone()[0]
        assert np.frombuffer(tokens, "<i4").tolist() == s[1:-1], t   # [CLS], [SEP] come with the model
    got = [from_f32(db.execute("SELECT relattn_embed('manuals', ?)", (t,)).fetchone()[0]) for t in texts]
    f32 = te.embed(torch, model, seqs).numpy()
    f64 = te.embed(torch, model.double(), seqs).numpy()
    for t, g, a, b in zip(texts, got, f32, f64):
        # the C forward pass is float32, as PyTorch's: within 1e-5 of either, relative
        assert rel_err(g, b) < 1e-5, (t, rel_err(g, b))
        assert rel_err(g, a) < 1e-5, (t, rel_err(g, a))


def test_heldout_recall_is_above_the_floor(vec0):
    db = connect(vec0)
    embed_eval.import_model(db, "manuals", MODEL_DIR)
    rows = embed_eval.load_heldout(db, MODEL_DIR / "heldout.csv")
    res, n = embed_eval.measure(db, "manuals", rows)
    recall, mrr = res["vector"]["all"]
    print(f"recall@10 {recall:.4f} MRR@10 {mrr:.4f} on {n['all']} pairs; BM25 {res['bm25']['all']}")
    assert n["all"] == 361 and 10 / n["all"] < 0.05 < RECALL_FLOOR <= recall
    assert MRR_FLOOR <= mrr
    db.close()


def doc_blocks():
    spec = importlib.util.spec_from_file_location("doc_examples", ROOT / "tests" / "shell" / "test_doc_examples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    files = [ROOT / "README.md", ROOT / "docs" / "reference.md", MODEL_DIR / "README.md"]
    out = []
    for f in files:
        for lang, code, line, run_by in mod.blocks(f):
            if run_by == "tests/sql/test_vector_search.py":
                out.append((f, lang, code, line))
    return mod, out


def test_doc_examples_with_vec0(vec0, tmp_path):
    mod, found = doc_blocks()
    assert {f.relative_to(ROOT).as_posix() for f, *_ in found} == \
        {"README.md", "docs/reference.md", "models/embed-manuals/README.md"}
    for f, lang, code, line in found:
        assert lang == "sql"
        assert re.search(r"^\.load \./vec0$", code, re.M), f"{f}:{line}: no .load ./vec0"
        code = re.sub(r"^\.load \./vec0$", f".load {vec0}", code, flags=re.M)
        # as tests/shell/test_doc_examples.py runs them: a file's blocks on one database
        run = tmp_path / f.relative_to(ROOT).as_posix().replace("/", "-")
        if not run.exists():
            run.mkdir()
            (run / "models").symlink_to(ROOT / "models")
        mod.run_sql(code, line + 1, run, f"{f.relative_to(ROOT)}, block at line {line}")


def test_the_card_quotes_the_run():
    """models/embed-manuals/README.md gives the sizes and the run of train.json, and make
    embed-model trains with the script's defaults, the settings train.json recorded."""
    import ast
    import json
    card = (MODEL_DIR / "README.md").read_text()
    run = json.loads((MODEL_DIR / "train.json").read_text())
    assert f"| parameters | {run['parameters']:,} " in card
    assert f"{run['steps']} steps" in card and f"{run['minutes']} minutes" in card
    p = run["pairs"]
    assert (f"{p['train']:,} training pairs ({p['train_by_kind']['package']} package, "
            f"{p['train_by_kind']['manual']:,} manual), {p['heldout']} held out") in card
    assert len(heldout()) == p["heldout"]
    tree = ast.parse((ROOT / "models" / "train_embedder.py").read_text())
    defaults = {n.args[0].value.lstrip("-").replace("-", "_"): ast.literal_eval(kw.value)
                for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "add_argument"
                for kw in n.keywords if kw.arg == "default" and n.args[0].value != "--out"}
    assert {k: v for k, v in run["settings"].items()} == defaults
    # the recipe as written (make -n would run its recursive $(MAKE) all)
    recipe = re.search(r"^embed-model:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    cmd = [line for line in recipe.splitlines() if "models/train_embedder.py" in line]
    assert cmd == ["\t$(PYTHON) models/train_embedder.py"], recipe
