"""relattn_scan as SQL: the rows a query gets are the rows it asks for.

Each query on the scan is checked against the same query on a plain table
holding the scan's full results (ids exactly; scores within 2e-5 per token,
as rows may be packed into forward passes differently)."""
import sqlite3

import numpy as np
import pytest

import modelgen
from conftest import connect


def toks(ids):
    return np.asarray(ids, dtype="<i4").tobytes()


TEXTS = ["In the beginning", "And", "SELECT * FROM t WHERE x > 1", "xq zv",
         "the the the the the the", "ünïcode ✓ and more text here", None, "a"]


def make_job(db, rng, texts=TEXTS):
    modelgen.load(db, "m", modelgen.config(), rng)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO docs(body) VALUES (?)", [(t,) for t in texts])
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='docs', tokens='body')")
    db.execute("CREATE TEMP TABLE plain AS SELECT id, n_tokens, score, "
               "perplexity FROM temp.job")


def same(db, query):
    got = db.execute(query.format(t="temp.job")).fetchall()
    want = db.execute(query.format(t="plain")).fetchall()
    assert [r[0] for r in got] == [r[0] for r in want], query
    for g, w in zip(got, want):
        for a, b in zip(g[1:], w[1:]):
            if isinstance(b, float):
                assert a == pytest.approx(b, abs=2e-5 * 40), query
            else:
                assert a == b, query
    return got


def test_limit_only_when_nothing_is_left_to_filter_or_sort(db, rng):
    make_job(db, rng)
    scores = sorted(s for (s,) in db.execute("SELECT score FROM plain "
                                             "WHERE score IS NOT NULL"))
    cut = (scores[2] + scores[3]) / 2  # between two rows, so ties cannot flip
    queries = [
        "SELECT id FROM {t} ORDER BY id DESC LIMIT 2",
        "SELECT id, perplexity FROM {t} ORDER BY perplexity DESC LIMIT 2",
        "SELECT id, score FROM {t} ORDER BY score LIMIT 3 OFFSET 1",
        "SELECT id FROM {t} WHERE n_tokens > 2 LIMIT 1",
        "SELECT id FROM {t} WHERE n_tokens > 2 LIMIT 2 OFFSET 1",
        f"SELECT id, score FROM {{t}} WHERE score < {cut!r} LIMIT 2",
        "SELECT id FROM {t} WHERE id > 2 AND n_tokens < 6 LIMIT 2",
        "SELECT id FROM {t} WHERE perplexity IS NULL LIMIT 1",
        "SELECT id FROM {t} WHERE id != 1 LIMIT 2",
        "SELECT id FROM {t} WHERE id IN (3, 5, 7) LIMIT 2",
        "SELECT id FROM {t} ORDER BY id LIMIT 3",
        "SELECT id, score FROM {t} ORDER BY id DESC",
        "SELECT id, score FROM {t} WHERE id BETWEEN 2 AND 6 ORDER BY id DESC LIMIT 2 OFFSET 1",
        "SELECT id FROM {t} WHERE n_tokens > 3 ORDER BY id DESC LIMIT 2",
        "SELECT id FROM {t} WHERE id >= 2 ORDER BY id LIMIT 2 OFFSET 2",
        "SELECT id FROM {t} LIMIT 2 OFFSET 3",
        "SELECT id FROM {t} ORDER BY n_tokens DESC, id LIMIT 3",
        "SELECT id FROM {t} LIMIT 9223372036854775807 OFFSET 1",
        "SELECT id FROM {t} LIMIT 1 OFFSET 9223372036854775807",
        "SELECT id FROM {t} LIMIT -1 OFFSET 2",
    ]
    for q in queries:
        same(db, q)
    assert [r[0] for r in db.execute("SELECT id FROM temp.job ORDER BY id DESC "
                                     "LIMIT 2")] == [8, 7]


def test_limit_still_caps_the_rows_read_when_it_is_safe(db, rng):
    make_job(db, rng)
    touched = []

    def touch(i):
        touched.append(i)
        return 1

    db.create_function("touch", 1, touch)
    db.execute("CREATE TEMP VIEW v AS SELECT id AS doc_id, body FROM docs WHERE touch(id)")
    db.execute("CREATE VIRTUAL TABLE temp.vjob USING relattn_scan("
               "model='m', source='v', tokens='body', id='doc_id')")
    # the rows up to LIMIT + OFFSET are read, and at most a probe of the last id
    for q, want, read in [
            ("SELECT id, score FROM temp.vjob WHERE id > 1 LIMIT 2", [2, 3], {2, 3}),
            ("SELECT id FROM temp.vjob ORDER BY id LIMIT 1 OFFSET 2", [3], {1, 2, 3}),
            # ORDER BY id DESC is read backwards: the newest rows, and no others
            ("SELECT id, score FROM temp.vjob ORDER BY id DESC LIMIT 2", [8, 7], {8, 7}),
            ("SELECT id, score FROM temp.vjob WHERE id < 6 ORDER BY id DESC LIMIT 2",
             [5, 4], {5, 4})]:
        touched.clear()
        assert [r[0] for r in db.execute(q)] == want
        assert read <= set(touched) <= read | {8, max(want)}, (q, touched)
    plan = db.execute("EXPLAIN QUERY PLAN SELECT id FROM temp.vjob ORDER BY id DESC").fetchall()
    assert not any("ORDER BY" in r[-1] for r in plan)


RECURSE = r"""
import sys
sys.path.insert(0, {tests!r})
from conftest import connect
db = connect({path!r})
for q in ("SELECT id, score FROM job", "SELECT count(*) FROM a", "SELECT id FROM job"):
    try:
        print("rows", db.execute(q).fetchall())
    except Exception as e:
        print(type(e).__name__, e)
"""


def test_a_source_that_reads_the_scan_itself_fails(tmp_path, rng):
    # A database file can ship a view that makes a scan read itself: it must
    # fail with an error, not recurse until the stack overflows (run in a
    # child process, so a crash fails this test and not the whole run).
    import os
    import subprocess
    import sys
    path = str(tmp_path / "hostile.db")
    db = connect(path)
    modelgen.load(db, "m", modelgen.config(), rng)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.execute("INSERT INTO docs(body) VALUES ('abc'), ('de')")
    db.execute("CREATE VIEW v AS SELECT id, body FROM docs")
    db.execute("CREATE VIRTUAL TABLE job USING relattn_scan("
               "model='m', source='v', tokens='body', id='id')")
    db.execute("DROP VIEW v")
    db.execute("CREATE VIEW v AS SELECT id, CAST(n_tokens AS TEXT) AS body FROM job")
    # two scans through each other
    db.execute("CREATE VIEW va AS SELECT id, body FROM docs")
    db.execute("CREATE VIEW vb AS SELECT id, body FROM docs")
    db.execute("CREATE VIRTUAL TABLE a USING relattn_scan("
               "model='m', source='va', tokens='body', id='id')")
    db.execute("CREATE VIRTUAL TABLE b USING relattn_scan("
               "model='m', source='vb', tokens='body', id='id')")
    db.execute("DROP VIEW va")
    db.execute("DROP VIEW vb")
    db.execute("CREATE VIEW va AS SELECT id, CAST(score AS TEXT) AS body FROM b")
    db.execute("CREATE VIEW vb AS SELECT id, CAST(score AS TEXT) AS body FROM a")
    db.commit()
    db.close()
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", RECURSE.format(tests=tests, path=path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.splitlines() == [
        "OperationalError relattn_scan: 'job' reads itself: its source 'v' or a "
        "model table selects from it",
        "OperationalError relattn_scan: 'a' reads itself: its source 'va' or a "
        "model table selects from it",
        "OperationalError relattn_scan: 'job' reads itself: its source 'v' or a "
        "model table selects from it",
    ]


def test_inserting_into_the_source_while_scanning_it_ends(db, rng):
    # The scan reads the rows that existed when it began: a statement that
    # inserts into the source as it reads the scan used to feed it forever.
    # The progress handler ends a runaway statement after ~1M VM steps
    # (a correct run takes far fewer), so the test fails instead of hanging.
    make_job(db, rng)
    n = len(TEXTS)
    calls = [0]

    def runaway():
        calls[0] += 1
        return calls[0] > 1000

    db.set_progress_handler(runaway, 1000)
    db.execute("INSERT INTO docs(body) SELECT 'x' FROM temp.job")
    db.execute("INSERT INTO docs(body) SELECT CAST(score AS TEXT) FROM temp.job "
               "WHERE id > 2")
    db.set_progress_handler(None, 0)
    bodies = [b for (b,) in db.execute("SELECT body FROM docs ORDER BY id")]
    assert bodies[:n] == TEXTS
    assert bodies[n:2 * n] == ["x"] * n
    assert len(bodies) == 2 * n + (2 * n - 2)
    scores = dict(db.execute("SELECT id, score FROM plain"))
    for i, b in enumerate(bodies[2 * n:]):
        want = scores.get(3 + i)  # the rows after id 2, the first n of them
        if i < n - 2:
            assert (b is None) if want is None else float(b) == pytest.approx(want, abs=1e-3)


def test_a_scan_reads_its_own_database(tmp_path, rng):
    # A scan stored in an attached database, fired by a trigger there, read
    # main.docs of the connection that attached it (and main's model): names
    # now resolve in the scan's own database, as FTS5's content= does.
    cfg = modelgen.config()
    aux = connect(str(tmp_path / "aux.db"))
    modelgen.load(aux, "m", cfg, rng)
    aux.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    aux.execute("INSERT INTO docs VALUES (1, 'decoy one'), (2, 'decoy two')")
    aux.execute("CREATE VIRTUAL TABLE job USING relattn_scan("
                "model='m', source='docs', tokens='body')")
    aux.execute("CREATE TABLE loot(id, n_tokens, score)")
    aux.execute("CREATE TABLE poke(x)")
    aux.execute("CREATE TRIGGER grab AFTER INSERT ON poke BEGIN "
                "INSERT INTO loot SELECT id, n_tokens, score FROM job; END")
    want = [(i, len(t.encode()), s) for i, t, s in aux.execute(
        "SELECT id, body, relattn_score('m', body) FROM docs ORDER BY id")]
    aux_secret = aux.execute("SELECT relattn_score('m', 'secret 0')").fetchone()[0]
    aux.commit()
    aux.close()

    db = connect()
    modelgen.load(db, "m", cfg, rng)  # another model of the same name
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO docs(body) VALUES (?)",
                   [("secret %d" % i,) for i in range(5)])
    db.execute("ATTACH ? AS aux", (str(tmp_path / "aux.db"),))
    db.execute("INSERT INTO aux.poke VALUES (1)")
    got = db.execute("SELECT id, n_tokens, score FROM aux.loot ORDER BY id").fetchall()
    assert [g[:2] for g in got] == [w[:2] for w in want]
    for g, w in zip(got, want):
        assert g[2] == pytest.approx(w[2], abs=2e-5 * 12)
    # a main scan does not switch to a temp table of the same name made later
    db.execute("CREATE VIRTUAL TABLE job USING relattn_scan("
               "model='m', source='docs', tokens='body')")
    db.execute("CREATE TEMP TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    db.execute("INSERT INTO temp.docs VALUES (1, 'temp')")
    assert [r[0] for r in db.execute("SELECT n_tokens FROM main.job")] == [8] * 5
    # nor to model tables made in temp later (which the bare names now reach)
    before = db.execute("SELECT id, score FROM main.job").fetchall()
    main_secret = db.execute("SELECT relattn_score('m', 'secret 0')").fetchone()[0]
    db.execute("CREATE TEMP TABLE relattn_model AS SELECT * FROM aux.relattn_model")
    db.execute("CREATE TEMP TABLE relattn_tensor AS SELECT * FROM aux.relattn_tensor")
    after = db.execute("SELECT id, score FROM main.job").fetchall()
    assert [a[0] for a in after] == [b[0] for b in before]
    for a, b in zip(after, before):
        assert a[1] == pytest.approx(b[1], abs=1e-9)
    # the bare name now reaches the temp copy, aux's model: the same bits as
    # aux gave, not main's (two random near-uniform models: their scores
    # differ, though by as little as 1e-4)
    temp_score = db.execute("SELECT relattn_score('m', 'secret 0')").fetchone()[0]
    assert temp_score == aux_secret and abs(aux_secret - main_secret) > 1e-7
    db.execute("DROP TABLE temp.relattn_model")
    db.execute("DROP TABLE temp.relattn_tensor")
    # a scan in temp reads temp when the name is there, else main
    db.execute("CREATE VIRTUAL TABLE temp.tjob USING relattn_scan("
               "model='m', source='docs', tokens='body')")
    assert [r[0] for r in db.execute("SELECT n_tokens FROM temp.tjob")] == [4]
    db.execute("DROP TABLE temp.docs")
    assert [r[0] for r in db.execute("SELECT n_tokens FROM temp.tjob")] == [8] * 5
    # the README's way to scan an attached database from temp
    db.execute("CREATE TEMP VIEW v AS SELECT * FROM aux.docs")
    db.execute("CREATE VIRTUAL TABLE temp.vjob USING relattn_scan("
               "model='m', source='v', tokens='body', id='id')")
    assert [r[0] for r in db.execute("SELECT n_tokens FROM temp.vjob")] == [9, 9]
    # never an attached database: a name only there is not found
    db.execute("CREATE TABLE aux.only_aux(id INTEGER PRIMARY KEY, body TEXT)")
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("CREATE VIRTUAL TABLE job2 USING relattn_scan("
                   "model='m', source='only_aux', tokens='body')")
    assert str(e.value) == ("relattn_scan: source 'only_aux' is not a table or "
                            "view in main")
    db.close()


def test_the_error_column_records_a_bad_row_and_goes_on(db, rng):
    # Naming the hidden error column makes a bad row a row: NULL results and
    # the message the statement would have failed with. Without it, a bad row
    # fails the statement as before; SELECT * leaves the column out.
    modelgen.load(db, "m", modelgen.config(vocab_size=259), rng)
    db.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body)")
    good = [np.asarray(rng.integers(0, 256, int(rng.integers(2, 30))), dtype="<i4").tobytes()
            for _ in range(4)]
    rows = [(1, good[0]), (2, ""), (3, good[1]), (4, toks([5, 300, 7])),
            (5, None), (6, toks(rng.integers(0, 256, 40))), (7, good[2]),
            (8, b"\x01\x00"), (9, good[3])]
    db.executemany("INSERT INTO docs VALUES (?, ?)", rows)
    db.execute("SELECT relattn_max_tokens(30)")
    db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan("
               "model='m', source='docs', tokens='body')")
    errors = {
        2: "relattn_scan: body of id 2 is empty",
        4: ("relattn_scan: body of id 4 has token 300 at position 1, outside the "
            "model's vocabulary [0, 259)"),
        6: "relattn_scan: body of id 6 has 40 tokens, over relattn_max_tokens() = 30",
        8: "relattn_scan: body of id 8 has 2 bytes, not a multiple of 4",
    }
    got = db.execute("SELECT id, n_tokens, score, perplexity, embedding, error "
                     "FROM temp.job").fetchall()
    assert [g[0] for g in got] == list(range(1, 10))
    for (i, body), (gid, n, score, ppl, emb, error) in zip(rows, got):
        if i in errors:
            assert (n, score, ppl, emb, error) == (None, None, None, None, errors[i])
        elif body is None:
            assert (n, score, ppl, emb, error) == (None, None, None, None, None)
        else:
            want = db.execute("SELECT relattn_score('m', ?)", (body,)).fetchone()[0]
            assert error is None and n == len(body) // 4
            assert score == pytest.approx(want, abs=2e-5 * (n + 1))
    # only the errors, or only the good rows
    assert db.execute("SELECT id, error FROM temp.job WHERE error IS NOT NULL "
                      "AND score IS NULL").fetchall() == sorted(errors.items())
    assert [r[0] for r in db.execute("SELECT id FROM temp.job WHERE error IS NULL "
                                     "AND score IS NOT NULL")] == [1, 3, 7, 9]
    # the error column alone checks the tokens (no model runs)
    assert db.execute("SELECT id, error FROM temp.job WHERE error IS NOT NULL"
                      ).fetchall() == sorted(errors.items())
    # not named: the first bad row fails the statement
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT id, score FROM temp.job").fetchall()
    assert str(e.value) == errors[2]
    assert [d[0] for d in db.execute("SELECT * FROM temp.job LIMIT 1").description] == [
        "id", "n_tokens", "score", "perplexity", "embedding"]
    # a row without an integer id has nowhere to file its error: it still fails
    db.execute("CREATE VIEW v AS SELECT CASE WHEN id = 3 THEN 'x' ELSE id END AS id, "
               "body FROM docs")
    db.execute("CREATE VIRTUAL TABLE temp.vjob USING relattn_scan("
               "model='m', source='v', tokens='body', id='id')")
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT id, error FROM temp.vjob").fetchall()
    assert str(e.value) == "relattn_scan: 'v' has a row whose id is TEXT, not an integer"


def test_long_messages_are_cut_on_a_character_boundary(db, rng):
    # A row's message is kept in a fixed buffer; it used to be cut in the
    # middle of a UTF-8 character (Python then raised UnicodeDecodeError).
    modelgen.load(db, "m", modelgen.config(), rng)
    name = "é" * 170  # 340 bytes: past the buffer whatever is around it
    db.execute(f'CREATE TABLE "{name}"(id INTEGER PRIMARY KEY, "{name}" TEXT)')
    db.execute(f'INSERT INTO "{name}" VALUES (1, \'\')')
    db.execute(f'CREATE VIEW v AS SELECT CASE id WHEN 1 THEN NULL END AS id, '
               f'"{name}" AS body FROM "{name}"')
    db.execute(f'CREATE VIEW "{name}v" AS SELECT * FROM v')
    cases = [
        (f"source='{name}', tokens='{name}'", f"relattn_scan: {name} of id 1 is empty"),
        (f"source='{name}v', tokens='body', id='id'",
         f"relattn_scan: '{name}v' has a row whose id is NULL, not an integer"),
    ]
    for i, (args, full) in enumerate(cases):
        db.execute(f"CREATE VIRTUAL TABLE temp.j{i} USING relattn_scan(model='m', {args})")
        for cols in ("id, score", "id, error"):
            try:
                got = db.execute(f"SELECT {cols} FROM temp.j{i}").fetchall()[0][1]
            except sqlite3.OperationalError as e:
                got = str(e)
            assert got.endswith("...") and full.startswith(got[:-3]), got
            assert len(got.encode()) < 320 and len(got) > 150
