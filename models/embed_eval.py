#!/usr/bin/python3
"""Retrieval quality of models/embed-manuals through SQL: relattn's embeddings in a sqlite-vec
vec0 table against SQLite's own FTS5 BM25, on the held-out pairs.

    /usr/bin/python3 models/embed_eval.py [--so ./relattn.so] [--vec0 PATH] [--dir models/embed-manuals]

The documents of heldout.csv are the collection; each query should find its own document.
Vector search: every document embedded by relattn_scan into a vec0 table (cosine distance), each
query embedded by relattn_embed and its k nearest documents asked of vec0. BM25: an FTS5 table
over the same documents, each query's words (FTS5's unicode61 tokens) quoted and OR-ed, ranked
by bm25(). recall@k is the share of queries whose document is among the k first; MRR@k the mean
of 1/rank of it, 0 when it is not among them. Prints a Markdown table.
"""
import argparse
import csv
import pathlib
import re
import sqlite3

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
VEC0 = ROOT / "tests" / "node" / "node_modules" / "sqlite-vec-linux-x64" / "vec0"


def connect(so, vec0, path=":memory:"):
    db = sqlite3.connect(path)
    db.enable_load_extension(True)
    db.load_extension(str(so))
    db.load_extension(str(vec0))
    db.enable_load_extension(False)
    return db


def import_model(db, name, directory):
    d = pathlib.Path(directory)
    return db.execute("SELECT relattn_import(?, ?, ?, ?, ?)", (
        name, *((d / f).read_bytes() for f in
                ("model.safetensors", "config.json", "spm.model", "tokenizer_config.json")))).fetchone()[0]


def load_heldout(db, path, table="heldout"):
    """heldout.csv into table(id, kind, name, query, document); returns its rows."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = [(int(r["id"]), r["kind"], r["name"], r["query"], r["document"]) for r in csv.DictReader(f)]
    db.execute(f"CREATE TABLE {table}(id INTEGER PRIMARY KEY, kind TEXT, name TEXT, query TEXT, document TEXT)")
    db.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?)", rows)
    return rows


def fts_query(text):
    """A query's words, each quoted, OR-ed: any of them matches."""
    return " OR ".join('"%s"' % w for w in re.findall(r"\w+", text))


def ranks(db, model, table="heldout", k=10):
    """{method: {id: rank of the query's own document among the k first, or None}}."""
    dim = len(db.execute("SELECT relattn_embed(?, 'x')", (model,)).fetchone()[0]) // 4
    db.execute(f"CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='{model}', source='{table}', "
               "tokens='document')")
    db.execute(f"CREATE VIRTUAL TABLE vec_docs USING vec0(embedding float[{dim}] distance_metric=cosine)")
    db.execute("INSERT INTO vec_docs(rowid, embedding) SELECT id, embedding FROM temp.job")
    db.execute(f"CREATE VIRTUAL TABLE fts_docs USING fts5(document, content='{table}', content_rowid='id')")
    db.execute("INSERT INTO fts_docs(fts_docs) VALUES ('rebuild')")
    out = {"vector": {}, "bm25": {}}
    for qid, query in db.execute(f"SELECT id, query FROM {table} ORDER BY id").fetchall():
        got = [r for (r,) in db.execute(
            "SELECT rowid FROM vec_docs WHERE embedding MATCH relattn_embed(?, ?) AND k = ? ORDER BY distance",
            (model, query, k))]
        out["vector"][qid] = got.index(qid) + 1 if qid in got else None
        q = fts_query(query)
        got = [r for (r,) in db.execute(
            "SELECT rowid FROM fts_docs WHERE fts_docs MATCH ? ORDER BY bm25(fts_docs) LIMIT ?", (q, k))] if q else []
        out["bm25"][qid] = got.index(qid) + 1 if qid in got else None
    return out


def scores(rank_of, ids):
    """(recall@k, MRR@k) over ids."""
    r = [rank_of[i] for i in ids]
    return sum(x is not None for x in r) / len(r), sum(1 / x for x in r if x is not None) / len(r)


def measure(db, model, rows, k=10):
    """{method: {subset: (recall@k, MRR@k)}}, subsets 'all' and each kind, and the counts."""
    rk = ranks(db, model, k=k)
    subsets = {"all": [r[0] for r in rows]}
    for kind in sorted({r[1] for r in rows}):
        subsets[kind] = [r[0] for r in rows if r[1] == kind]
    return {m: {s: scores(rk[m], ids) for s, ids in subsets.items()} for m in rk}, \
        {s: len(ids) for s, ids in subsets.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--so", default=str(ROOT / "relattn"))
    ap.add_argument("--vec0", default=str(VEC0))
    ap.add_argument("--dir", default=str(HERE / "embed-manuals"))
    args = ap.parse_args()
    db = connect(args.so, args.vec0)
    import_model(db, "manuals", args.dir)
    rows = load_heldout(db, pathlib.Path(args.dir) / "heldout.csv")
    res, n = measure(db, "manuals", rows)
    print("| queries | | method | recall@10 | MRR@10 |")
    print("| --- | --- | --- | --- | --- |")
    for s in n:
        for m, label in (("vector", "relattn_embed + sqlite-vec (cosine)"), ("bm25", "FTS5 bm25()")):
            r, mrr = res[m][s]
            print(f"| {s} | {n[s]} | {label} | {r:.4f} | {mrr:.4f} |")
    print(f"chance: recall@10 = 10 / {n['all']} = {10 / n['all']:.4f}")


if __name__ == "__main__":
    main()
