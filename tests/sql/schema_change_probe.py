"""Run by test_schema_change.py in a process of its own, so that a crash is a
failed test rather than a dead pytest.

    schema_change_probe.py SO DB CASE ROUNDS

Each round, another connection changes the schema of DB (CREATE TABLE), and
then this connection, which loaded main's schema before, uses relattn as
CASE says. Prints one line a round and "ok" at the end.

SQLite's lookaside allocator is turned off first: freed schema objects then
go back to malloc, where a later write into one corrupts the heap in a way
glibc's checks stop at (instead of passing silently inside SQLite's own pool).
With the SQLite built with SQLITE_DEBUG (tests/sqlite_debug.sh), SQLite's own
assertions check each call the extension makes, and fail on the first misuse.
"""
import ctypes
import sqlite3
import sys

lib = ctypes.CDLL("libsqlite3.so.0")   # the one Python's sqlite3 module uses
lib.sqlite3_shutdown()
SQLITE_CONFIG_LOOKASIDE = 13
assert lib.sqlite3_config(SQLITE_CONFIG_LOOKASIDE, ctypes.c_int(0), ctypes.c_int(0)) == 0
assert lib.sqlite3_initialize() == 0

so, path, case, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

CASES = {
    # a scan made after the change, in temp and in main
    "temp_scan": ["CREATE VIRTUAL TABLE temp.job{r} USING relattn_scan("
                  "model='m', source='docs', tokens='body')",
                  "SELECT id, score FROM temp.job{r}"],
    "main_scan": ["CREATE VIRTUAL TABLE main.job{r} USING relattn_scan("
                  "model='m', source='docs', tokens='body')",
                  "SELECT id, score FROM main.job{r}"],
    # a temp scan whose CREATE fails (its model is not there): the error,
    # and nothing left behind
    "temp_scan_error": ["CREATE VIRTUAL TABLE temp.bad{r} USING relattn_scan("
                        "model='nope', source='docs', tokens='body')"],
    # ... inside a transaction: BEGIN IMMEDIATE takes main's write lock
    # without reading its schema, so the CREATE's first read of main met the
    # change; and a source made in that transaction, which only this
    # connection sees
    "temp_scan_in_immediate": ["BEGIN IMMEDIATE",
                               "CREATE VIRTUAL TABLE temp.job{r} USING relattn_scan("
                               "model='m', source='docs', tokens='body')",
                               "SELECT id, score FROM temp.job{r}", "COMMIT"],
    "temp_scan_in_exclusive": ["BEGIN EXCLUSIVE",
                               "CREATE VIRTUAL TABLE temp.job{r} USING relattn_scan("
                               "model='m', source='docs', tokens='body')",
                               "SELECT id, score FROM temp.job{r}", "COMMIT"],
    "main_scan_in_immediate": ["BEGIN IMMEDIATE",
                               "CREATE VIRTUAL TABLE main.job{r} USING relattn_scan("
                               "model='m', source='docs', tokens='body')",
                               "SELECT id, score FROM main.job{r}", "COMMIT"],
    "temp_scan_of_new_table": ["BEGIN",
                               "CREATE TABLE fresh{r} AS SELECT * FROM docs",
                               "CREATE VIRTUAL TABLE temp.job{r} USING relattn_scan("
                               "model='m', source='fresh{r}', tokens='body')",
                               "SELECT id, score FROM temp.job{r}", "COMMIT"],
    # scans made before the change, read after it
    "stored_temp_scan": ["SELECT id, score FROM temp.stored"],
    "stored_main_scan": ["SELECT id, score FROM main.stored"],
    "temp_scan_of_temp": ["CREATE VIRTUAL TABLE temp.tjob{r} USING relattn_scan("
                          "model='m', source='tdocs', tokens='body')",
                          "SELECT id, score FROM temp.tjob{r}"],
    # a statement that reads temp alone and writes a STRICT temp table: the
    # extension's reads of main inside it (the scan's source, the model)
    # were its first of main, and SQLite, meeting the change, freed temp's
    # schema under it (SQLITE_DEBUG: "Assertion `pTab->tabFlags & TF_Strict'")
    "strict_temp_from_scan": ["CREATE TEMP TABLE s{r}(id INTEGER, score REAL) STRICT",
                              "CREATE VIRTUAL TABLE temp.sj{r} USING relattn_scan("
                              "model='m', source='docs', tokens='body')",
                              "INSERT INTO temp.s{r} SELECT id, score FROM temp.sj{r}",
                              "SELECT * FROM temp.s{r}"],
    "strict_temp_from_temp_scan": ["CREATE TEMP TABLE s{r}(id INTEGER, score REAL) STRICT",
                                   "CREATE VIRTUAL TABLE temp.sj{r} USING relattn_scan("
                                   "model='m', source='tdocs', tokens='body')",
                                   "INSERT INTO temp.s{r} SELECT id, score FROM temp.sj{r}",
                                   "SELECT * FROM temp.s{r}"],
    "strict_temp_from_score": ["CREATE TEMP TABLE v{r}(x REAL) STRICT",
                               "INSERT INTO temp.v{r} VALUES (relattn_score('m', 'some text'))",
                               "SELECT * FROM temp.v{r}"],
    # JSON arguments, read with json_each (which opens main)
    "strict_temp_from_json": ["CREATE TEMP TABLE j{r}(x BLOB, y BLOB) STRICT",
                              "INSERT INTO temp.j{r} VALUES (relattn_tokens('[1, 2, 3]'), "
                              "relattn_attention('[[1.5, 2.5]]', '[[1.0, 2.0]]', "
                              "'[[3.0, 4.0]]', NULL, NULL, '{{\"heads\": 1, \"d_head\": 2}}'))",
                              "SELECT * FROM temp.j{r}"],
    # the table-valued functions and a scalar one
    "logprobs": ["SELECT * FROM relattn_logprobs('m', 'some text')"],
    "attention_weights": ["SELECT count(*) FROM relattn_attention_weights('m', 'some text')"],
    "labels": ["SELECT label, prob FROM relattn_labels('clf', 'some text')"],
    "tokens_each": ["SELECT token FROM relattn_tokens_each(relattn_tokenize('m', 'abc'))"],
    "generate_tokens": ["SELECT step, token FROM relattn_generate_tokens('m', 'some text', "
                        "'{{\"max_new_tokens\": 4, \"do_sample\": false, "
                        "\"eos_token_id\": null}}')"],   # {{ }}: the SQL goes through format
    "zero_shot": ["SELECT label, score FROM relattn_zero_shot('nli', 'some text', "
                  "'[\"sports\", \"politics\", \"cooking\"]')"],
    "token_labels": ["SELECT entity, word FROM relattn_token_labels('ner', 'some text', 'none', '[]')"],
    "score": ["SELECT relattn_score('m', 'some text')"],
    "score_in_temp_insert": ["INSERT INTO temp.out SELECT relattn_score('m', body) FROM docs"],
}


def connect():
    c = sqlite3.connect(path, isolation_level=None, timeout=60)
    c.enable_load_extension(True)
    c.load_extension(so)
    return c


c = connect()
c.execute("SELECT count(*) FROM docs").fetchall()    # main's schema is loaded
c.execute("CREATE TEMP TABLE tdocs AS SELECT * FROM docs")
c.execute("CREATE TEMP TABLE out(x)")
if case.startswith("stored_"):
    where = case.split("_")[1]
    c.execute(f"CREATE VIRTUAL TABLE {where}.stored USING relattn_scan("
              "model='m', source='docs', tokens='body')")
for r in range(rounds):
    other = sqlite3.connect(path, timeout=60)
    for attempt in range(100):   # a writer of the loop test may race it
        try:
            other.execute(f"CREATE TABLE changed_{case}_{r}(x)")
            other.commit()
            break
        except sqlite3.OperationalError as e:
            if "schema has changed" not in str(e):
                raise
    other.close()
    rows = None
    for sql in CASES[case]:
        try:
            got = c.execute(sql.format(r=r)).fetchall()
            if sql != "COMMIT":   # a transaction's end: the rows before it
                rows = got
        except sqlite3.Error as e:
            rows = str(e)
    print(case, r, rows if isinstance(rows, str) else len(rows), flush=True)
print("ok")
