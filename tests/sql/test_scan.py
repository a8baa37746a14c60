"""relattn_scan, the batch virtual table, through Python's sqlite3.

Scan results are compared with the scalar functions on the same rows
(relattn_score / relattn_perplexity / relattn_embed: the same forward pass,
packed differently, so float32 rounding differs slightly) and, on a few rows,
with the float64 numpy reference (tests/sql/reference_model.py).
Tolerances: score 2e-5 per token absolute against the scalar function, 1e-4
per token against numpy; embeddings 1e-5 relative (L2)."""
import math
import os
import sys
import threading
import time

import numpy as np
import pytest

import modelgen
from conftest import connect, from_f32, rel_err

sys.path.insert(0, os.path.dirname(__file__))
import reference_model as ref  # noqa: E402


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


def make_docs(db, rng, ids, lo, hi, table="docs", nulls=()):
    """A table (id INTEGER PRIMARY KEY, body BLOB) of random byte tokens."""
    db.execute(f"CREATE TABLE {table}(id INTEGER PRIMARY KEY, body BLOB)")
    rows = []
    for i in ids:
        body = None if i in nulls else toks(rng.integers(0, 256, int(rng.integers(lo, hi + 1))))
        rows.append((i, body))
    db.executemany(f"INSERT INTO {table} VALUES (?, ?)", rows)
    return rows


def scalar(db, model, body):
    return db.execute("SELECT relattn_score(?1, ?2), relattn_perplexity(?1, ?2), "
                      "relattn_embed(?1, ?2)", (model, body)).fetchone()


@pytest.mark.parametrize("bos,threads", [(True, 1), (True, 3), (False, 2)])
def test_scan_equals_scalar_functions(db, rng, bos, threads):
    cfg = modelgen.config(d_model=16, n_heads=2, d_ff=32, bos=256 if bos else None)
    modelgen.load(db, "m", cfg, rng)
    ids = [5 + 7 * i for i in range(30)]
    rows = make_docs(db, rng, ids, 1, 70, nulls={ids[4]})
    db.execute(f"SELECT relattn_threads({threads})")
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='docs', tokens='body')")
    got = db.execute("SELECT id, n_tokens, score, perplexity, embedding "
                     "FROM temp.job").fetchall()
    assert [r[0] for r in got] == ids
    one_token_seen = False
    for (i, body), (gid, n, score, ppl, emb) in zip(rows, got):
        if body is None:
            assert (n, score, ppl, emb) == (None, None, None, None)
            continue
        want = scalar(db, "m", body)
        assert n == len(body) // 4
        assert abs(score - want[0]) <= 2e-5 * (n + 1), (gid, score, want[0])
        if want[1] is None:  # one token, no BOS: nothing scored
            one_token_seen = True
            assert ppl is None and score == 0.0
        else:
            assert ppl == pytest.approx(want[1], rel=2e-5)
        assert rel_err(from_f32(emb), from_f32(want[2])) < 1e-5
    if not bos:
        assert one_token_seen or min(len(b) for _, b in rows if b) > 4


def test_scan_equals_numpy_reference(db, rng):
    cfg = modelgen.config(d_model=16, n_heads=2, d_ff=32, clip=3)
    weights = modelgen.load(db, "m", cfg, rng)
    rows = make_docs(db, rng, range(1, 5), 2, 40)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='docs', tokens='body')")
    got = db.execute("SELECT id, score, embedding FROM temp.job").fetchall()
    for (i, body), (gid, score, emb) in zip(rows, got):
        tokens = list(np.frombuffer(body, dtype="<i4"))
        assert gid == i
        assert abs(score - ref.score(cfg, weights, tokens)) < 1e-4 * len(tokens)
        assert rel_err(from_f32(emb), ref.embedding(cfg, weights, tokens)) < 1e-5


def test_text_tokens_and_named_id_on_a_view(db, rng):
    cfg = modelgen.config()
    modelgen.load(db, "m", cfg, rng)
    db.execute("CREATE TABLE notes(doc_id INTEGER, txt TEXT)")
    texts = ["hello", "relative positions", "ünïcode ✓", "x"]
    db.executemany("INSERT INTO notes VALUES (?, ?)",
                   [(10 * (i + 1), t) for i, t in enumerate(texts)])
    db.execute("CREATE VIEW v AS SELECT doc_id, txt FROM notes")
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='v', tokens='txt', id='doc_id')")
    got = db.execute("SELECT id, n_tokens, score FROM temp.job").fetchall()
    assert [g[0] for g in got] == [10, 20, 30, 40]
    for t, (i, n, score) in zip(texts, got):
        assert n == len(t.encode())
        assert score == pytest.approx(
            db.execute("SELECT relattn_score('m', ?)", (t,)).fetchone()[0],
            abs=2e-5 * (n + 1))


def test_id_constraints_read_only_their_rows(db, rng):
    cfg = modelgen.config()
    modelgen.load(db, "m", cfg, rng)
    make_docs(db, rng, range(1, 51), 3, 20)
    touched = []

    def touch(i):
        touched.append(i)
        return 1

    db.create_function("touch", 1, touch)
    db.execute("CREATE TEMP VIEW v AS SELECT id AS doc_id, body FROM docs WHERE touch(id)")
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='v', tokens='body', id='doc_id')")
    cases = [
        ("id > 20 AND id <= 30", list(range(21, 31))),
        ("id >= 45", list(range(45, 51))),
        ("id < 4", [1, 2, 3]),
        ("id = 17", [17]),
        ("rowid BETWEEN 8 AND 9", [8, 9]),
    ]
    for where, want in cases:
        for cols in ("id, n_tokens", "id, score"):
            touched.clear()
            got = [r[0] for r in db.execute(f"SELECT {cols} FROM temp.job WHERE {where}")]
            assert got == want, where
            # (the last id is read twice: once to fix where the scan ends)
            assert sorted(set(touched)) == want, (where, cols)
    # ORDER BY id is the scan's own order; LIMIT caps what is read ahead
    touched.clear()
    got = [r[0] for r in db.execute("SELECT id, score FROM temp.job WHERE id > 10 "
                                    "ORDER BY id LIMIT 3")]
    assert got == [11, 12, 13]
    assert sorted(set(touched) - {50}) == [11, 12, 13]
    plan = db.execute("EXPLAIN QUERY PLAN SELECT id FROM temp.job ORDER BY id").fetchall()
    assert not any("ORDER BY" in r[-1] for r in plan)


def test_encoder_embeds_and_has_no_score(db, rng):
    # Only the columns read are computed: an encoder has no LM head, so
    # embedding alone must not ask for one.
    cfg = modelgen.config(arch="encoder")
    modelgen.load(db, "enc", cfg, rng)
    rows = make_docs(db, rng, range(1, 6), 2, 30)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='enc', source='docs', tokens='body')")
    got = db.execute("SELECT id, embedding FROM temp.job").fetchall()
    for (i, body), (gid, emb) in zip(rows, got):
        want = db.execute("SELECT relattn_embed('enc', ?)", (body,)).fetchone()[0]
        assert rel_err(from_f32(emb), from_f32(want)) < 1e-5
    with pytest.raises(Exception) as e:
        db.execute("SELECT score FROM temp.job").fetchall()
    assert str(e.value) == ("relattn_scan: model 'enc' is an encoder; only decoder "
                            "models give score and perplexity (embedding works)")


def test_create_errors(db, rng):
    modelgen.load(db, "m", modelgen.config(), rng)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body BLOB, label TEXT)")
    db.execute("CREATE VIEW v AS SELECT id, body FROM docs")
    cases = [
        ("model='nope', source='docs', tokens='body'", "relattn_scan: no model named 'nope'"),
        ("model='m', source='nope', tokens='body'",
         "relattn_scan: source 'nope' is not a table or view in temp or main"),
        ("model='m', source='docs', tokens='bdy'",
         "relattn_scan: source 'docs' has no column 'bdy' (tokens=)"),
        ("model='m', source='docs', tokens='body', id='x'",
         "relattn_scan: source 'docs' has no column 'x' (id=)"),
        ("model='m', source='docs', tokens='body', id='label'",
         "relattn_scan: id column 'label' of 'docs' is TEXT, not INTEGER"),
        ("model='m', source='v', tokens='body'",
         "relattn_scan: source 'v' is a view: name its INTEGER id column with id="),
        ("model='m', source='docs'",
         "relattn_scan: tokens= is required, as in relattn_scan(model='m', "
         "source='docs', tokens='body')"),
        ("model='m', source='docs', tokens='body', foo=1",
         "relattn_scan: unknown argument 'foo' (expected model, source, tokens, id, pooling, text_b, generate)"),
        ("model='m', model='m', source='docs', tokens='body'",
         "relattn_scan: argument 'model' given twice"),
        ("model='m', docs", "relattn_scan: argument 2 (docs) is not key=value"),
    ]
    for args, msg in cases:
        with pytest.raises(Exception) as e:
            db.execute(f"CREATE VIRTUAL TABLE temp.j USING relattn_scan({args})")
        assert str(e.value) == msg
    assert db.execute("SELECT count(*) FROM temp.sqlite_master").fetchone()[0] == 0
    # a view works with its id named
    db.execute("CREATE VIRTUAL TABLE temp.j USING relattn_scan("
               "model=\"m\", source=v, tokens='body', id = 'id')")


def test_bad_rows_fail_in_turn(db, rng):
    modelgen.load(db, "m", modelgen.config(vocab_size=259), rng)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body)")
    good = toks([1, 2, 3])
    returned = []
    db.create_function("record", 1, lambda i: returned.append(i) or i)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='docs', tokens='body')")
    cases = [
        (b"\x01\x02\x03\x04\x05", "relattn_scan: body of id 3 has 5 bytes, not a multiple of 4"),
        (toks([1, 300]), "relattn_scan: body of id 3 has token 300 at position 1, "
                         "outside the model's vocabulary [0, 259)"),
        (b"", "relattn_scan: body of id 3 is empty"),
        (42, "relattn_scan: body of id 3 must be a token BLOB (int32 ids) or TEXT"),
    ]
    for bad, msg in cases:
        db.execute("DELETE FROM docs")
        db.executemany("INSERT INTO docs VALUES (?, ?)",
                       [(1, good), (2, good), (3, bad), (4, good)])
        for threads in (1, 2):
            db.execute(f"SELECT relattn_threads({threads})")
            returned.clear()
            with pytest.raises(Exception) as e:
                db.execute("SELECT record(id), score FROM temp.job").fetchall()
            assert str(e.value) == msg
            assert returned == [1, 2]  # the rows before it, whatever the read-ahead
    # limits: tokens, then memory per row
    db.execute("DELETE FROM docs")
    db.executemany("INSERT INTO docs VALUES (?, ?)", [(1, good), (3, toks([5] * 40))])
    db.execute("SELECT relattn_max_tokens(39)")
    with pytest.raises(Exception) as e:
        db.execute("SELECT score FROM temp.job").fetchall()
    assert str(e.value) == "relattn_scan: body of id 3 has 40 tokens, over relattn_max_tokens() = 39"
    db.execute("SELECT relattn_max_tokens(100000)")
    db.execute("DELETE FROM docs")
    db.execute("INSERT INTO docs VALUES (7, ?)", (toks([5] * 100000),))
    db.execute("SELECT relattn_max_memory(1048576)")
    with pytest.raises(Exception) as e:
        db.execute("SELECT score FROM temp.job").fetchall()
    assert str(e.value).startswith("relattn_scan: body of id 7: needs ")
    assert str(e.value).endswith(" bytes, over the limit of 1048576 per call (relattn_max_memory)")
    # n_tokens alone runs no model, so no memory is needed
    assert db.execute("SELECT n_tokens FROM temp.job").fetchall() == [(100000,)]


def long_corpus(db, rng, n_rows=200, lo=150, hi=400):
    cfg = modelgen.config(d_model=64, n_heads=4, d_ff=128, n_layers=2)
    modelgen.load(db, "m", cfg, rng)
    make_docs(db, rng, range(1, n_rows + 1), lo, hi)
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='docs', tokens='body')")


def test_interrupt_stops_within_a_batch(rng, tmp_path):
    db = connect(str(tmp_path / "t.db"), check_same_thread=False)
    long_corpus(db, rng)
    db.execute("SELECT relattn_threads(2)")
    # how long one row takes here (sanitizers make everything slower), the
    # model loaded
    db.execute("SELECT score FROM temp.job WHERE id <= 2").fetchall()
    t = time.perf_counter()
    db.execute("SELECT score FROM temp.job WHERE id <= 4").fetchall()
    per_row = (time.perf_counter() - t) / 4
    for _ in range(2):
        # interrupted from another thread once 10 rows are out, so that it
        # lands while the scan runs whatever the machine's load (a timer
        # from the start could fire after the last row)
        seen, timer = [], None
        with pytest.raises(Exception) as e:
            for row in db.execute("SELECT id, score FROM temp.job"):
                seen.append(row[0])
                if len(seen) == 10:
                    timer = threading.Timer(2 * per_row, db.interrupt)
                    t = time.perf_counter()
                    timer.start()
        stopped = time.perf_counter() - t
        timer.join()
        # ours while a worker computes, SQLite's own between rows
        assert str(e.value) in ("relattn_scan: interrupted", "interrupted")
        assert type(e.value).__name__ == "OperationalError"
        assert 10 <= len(seen) < 200 and seen == list(range(1, len(seen) + 1))
        # the rows in flight finish; nothing waits for the rest of the corpus
        assert stopped < 2 * per_row + 0.5 + 30 * per_row, (stopped, per_row)
    # the connection goes on working
    assert db.execute("SELECT count(*) FROM temp.job WHERE id <= 3 AND score < 0").fetchone() == (3,)
    db.close()


def test_two_scanners_while_a_third_reimports(rng, tmp_path):
    path = str(tmp_path / "c.db")
    cfg = modelgen.config(d_model=32, n_heads=4, d_ff=64)
    wa, wb = modelgen.tensors(cfg, rng), modelgen.tensors(cfg, rng)
    blob = {"a": modelgen.safetensors(cfg, weights=wa), "b": modelgen.safetensors(cfg, weights=wb)}
    setup = connect(path)
    setup.execute("PRAGMA journal_mode=WAL")
    rows = make_docs(setup, rng, range(1, 41), 10, 60)
    setup.execute("SELECT relattn_import('m', ?)", (blob["a"],))
    setup.commit()
    # expected scores per version, row by row with the scalar function
    want = {}
    for v in ("a", "b"):
        ref_db = connect()
        ref_db.execute("SELECT relattn_import('m', ?)", (blob[v],))
        want[v] = np.array([ref_db.execute("SELECT relattn_score('m', ?)", (b,)).fetchone()[0]
                            for _, b in rows])
        ref_db.close()
    tol = 2e-5 * 61
    # rows whose score tells the versions apart (nearly all of them)
    apart = np.abs(want["a"] - want["b"]) > 20 * tol
    assert apart.sum() >= 30

    stop = threading.Event()
    errors, seen = [], {0: [], 1: []}

    def scanner(k):
        try:
            c = connect(path, check_same_thread=False, timeout=30)
            c.execute("SELECT relattn_threads(2)")
            c.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
                      "model='m', source='docs', tokens='body')")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                got = c.execute("SELECT id, score FROM temp.job").fetchall()
                assert [g[0] for g in got] == [r[0] for r in rows]
                s = np.array([g[1] for g in got])
                near = {v: np.abs(s - want[v]) < tol for v in ("a", "b")}
                # every row is one version's score; all rows the same version
                assert all(near["a"] | near["b"]), "a score from neither version"
                match = [v for v in ("a", "b") if near[v][apart].all()]
                assert len(match) == 1, "rows from more than one model version"
                seen[k].append(match[0])
                if len(set(seen[k])) == 2 and len(seen[k]) >= 4:
                    break
            c.close()
        except Exception as e:  # reported in the main thread
            errors.append(repr(e))

    def importer():
        try:
            c = connect(path, check_same_thread=False, timeout=30)
            v = "b"
            while not stop.is_set():
                c.execute("SELECT relattn_import('m', ?)", (blob[v],))
                c.commit()
                v = "a" if v == "b" else "b"
                time.sleep(0.01)
            c.close()
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=scanner, args=(k,)) for k in (0, 1)]
    imp = threading.Thread(target=importer)
    imp.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    imp.join()
    setup.close()
    assert not errors, errors
    for k in (0, 1):
        assert set(seen[k]) == {"a", "b"}, seen[k]


def test_next_scan_reuses_the_last_ones_scratch(db, rng, tmp_path):
    """A closed scan leaves its workers' scratch to the connection's next
    scan: in a fresh process (a warm heap would hide the first query's
    faults too), the second and third of three equal queries map few new
    pages where the first maps its scratch. A change of thread count
    between queries, which cannot take the last scan's workers, gives the
    same rows as ever, and they equal the scalar functions'."""
    import json
    import subprocess
    import textwrap
    from conftest import SO
    cfg = modelgen.config(d_model=64, n_heads=4, d_ff=256)
    modelgen.load(db, "m", cfg, rng)
    rows = make_docs(db, rng, range(1, 13), 300, 400)
    if not os.environ.get("RELATTN_SANITIZED"):   # ASan maps memory its own way
        path = tmp_path / "scan.db"
        db.commit()
        db.execute("VACUUM INTO ?", (str(path),))
        script = textwrap.dedent(f"""
            import json, resource, sqlite3
            db = sqlite3.connect({str(path)!r})
            db.enable_load_extension(True)
            db.load_extension({SO!r})
            db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
                       "model='m', source='docs', tokens='body')")
            faults = []
            for _ in range(3):
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                db.execute("SELECT id, score, embedding FROM temp.job").fetchall()
                faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
            print(json.dumps(faults))
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True,
                             text=True, env=os.environ, timeout=300)
        assert out.returncode == 0, out.stderr
        faults = json.loads(out.stdout)
        print("page faults per query:", faults)
        # the first query's scratch: 950-1,250 pages in a fresh process (a
        # 400-token row's attention and activations); the second's 250-300,
        # the third's 0 (when each scan made its own: 690-920, then 675-910)
        assert faults[0] > 500
        assert faults[1] < faults[0] / 2
        assert faults[2] < faults[0] / 4
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='docs', tokens='body')")
    sql = "SELECT id, score, embedding FROM temp.job"
    first = db.execute(sql).fetchall()
    for threads in (2, 1, 3):
        db.execute(f"SELECT relattn_threads({threads})")
        assert db.execute(sql).fetchall() == first
    for (_, body), (_, score, emb) in zip(rows, first):
        want = scalar(db, "m", body)
        n = len(body) // 4
        assert abs(score - want[0]) <= 2e-5 * n
        assert rel_err(from_f32(emb), from_f32(want[2])) < 1e-5
