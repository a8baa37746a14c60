#!/usr/bin/python3
"""Score a corpus stored in SQLite files with relattn_scan on Dask distributed,
merging the results into one table exactly once.

    /usr/bin/python3 cluster/relattn_dask.py corpus.db --results scores.db
    /usr/bin/python3 cluster/relattn_dask.py shard1.db shard2.db shard3.db \\
        --model-file models/tiny.safetensors --results scores.db --workers 2
    /usr/bin/python3 cluster/relattn_dask.py /shared/shard*.db --results scores.db \\
        --scheduler tcp://host:8786

HOW IT WORKS
The corpus is one SQLite file or several shard files, each with a table (or
view) of token sequences. Each shard is cut into ranges of --range-rows rows in
id order (by default, enough ranges for four per worker, of at most 10000
rows); the plan, with each range's rows and tokens (relattn_scan's n_tokens,
counted here: no model run), is stored in the results database, so every run,
and a rerun after a crash, works on the same ranges. A range is one Dask task. Each worker
process holds one connection, set up once by a worker plugin: the extension
loaded, the model imported into an in-memory database. A task attaches its shard
read-only, copies the range's rows next to the model (relattn_scan reads its
source and the model from one schema) and reads relattn_scan over them, with
its error column (a row the model cannot take is stored with its message), on
relattn_threads() threads (the worker's cores; OpenBLAS runs single-threaded
inside them, as the extension always does). Its results come back to this
program, the only writer of the results database, which commits each range's
rows and its done-marker in one transaction. So a range counts as done exactly
when its results are committed: a rerun skips done ranges and plans new ones
only for ids past the last planned one; a worker killed mid-range loses only
that range, which Dask runs again elsewhere, and a range can never be committed
twice (the marker is set only where it was not set yet, in the transaction that
inserts the rows, and the results' id is their primary key).

Another connection may hold the results database's write lock (a reader's
long transaction is no bother: it is in WAL mode). Past SQLite's busy timeout
of a second, the program keeps the scored ranges in memory, goes on collecting
results, and tries again with a growing pause, for up to --lock-wait seconds
(default 600) of the lock held; then it stops with one line that names the
database. What it committed stays committed, so a rerun does only the rest.

The source and its columns are looked up in every shard, and the model is
asked for the --columns (a scan over no row), before the results database is
opened: a misspelt --source, --tokens or --id, or a column the model cannot
give, writes nothing. Without --columns the model's config chooses: a decoder
n_tokens, score, perplexity; a classifier n_tokens, label, prob, logit (a
regression model n_tokens, logit); another encoder n_tokens, embedding.
The results table belongs to one job: its model (name and sha256), source,
tokens, id, columns and, with the generated column, --generate's options (their
keys sorted, so the same options spelt in another order are the same job). A
rerun that changes any of them is refused with what differs, as rows made with
other options would mix with the first run's.

Progress goes to stderr: the whole job's rows and tokens done of its total,
tokens/s of this run and the ETA, redrawn in place on a terminal, else a line
a second while work runs; and a last line. Rows a worker has scored in a range
not committed yet count too: each task reports its rows and tokens as they come
out of its scan (a Dask event, at most twice a second). stdout gets the plan's
and the end's lines only. Dask does the scheduling, the retries
after a lost worker and the dashboard (its address is printed when the
scheduler has bokeh). By default
the program starts a LocalCluster of --workers worker processes on this
machine; with --scheduler it uses a running cluster, whose workers must see the
same paths (shared storage) for the extension and the shards. docs/cluster.md
has the measurements and what a real cluster changes.
"""
import argparse
import json
import logging
import os
import pathlib
import sqlite3
import sys
import threading
import time
import uuid

from distributed import Client, LocalCluster, as_completed, get_worker
from distributed.diagnostics.plugin import WorkerPlugin

# relattn_scan's columns; error is always kept
COLUMNS = ("n_tokens", "score", "perplexity", "embedding", "label", "prob", "logit",
           "generated", "error")
COLUMN_TYPES = {"n_tokens": "INTEGER", "score": "REAL", "perplexity": "REAL",
                "embedding": "BLOB", "label": "TEXT", "prob": "REAL", "logit": "REAL",
                "generated": "TEXT", "error": "TEXT"}
# the columns kept without --columns, by the model's kind (default_columns)
DEFAULT_COLUMNS = {"decoder": ["n_tokens", "score", "perplexity"],
                   "classifier": ["n_tokens", "label", "prob", "logit"],
                   "regression": ["n_tokens", "logit"],
                   "encoder": ["n_tokens", "embedding"]}
RANGE_ROWS = 10000      # the most rows a range is given by default
RANGES_PER_WORKER = 4
PROGRESS_TTY = 0.25     # seconds between progress lines: redrawn on a terminal,
PROGRESS_LOG = 1.0      # and written to a file or a pipe
PROGRESS_REPORT = 0.5   # seconds between a task's reports of its rows so far
ROWS_TABLE = "relattn_cluster_rows"   # a range's rows, in each worker's memory
SQLITE_MAGIC = b"SQLite format 3\0"
BUSY_MS = 1000          # SQLite's own wait for the results database's lock
LOCK_WAIT = 600         # default --lock-wait: seconds, in all, past that
ROWID = ("rowid", "oid", "_rowid_")


def quote(name):
    """An SQL identifier, double-quoted."""
    return '"' + name.replace('"', '""') + '"'


def sql_string(value):
    """An SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def connect(path, extension=None, **kw):
    db = sqlite3.connect(path, isolation_level=None, **kw)
    if extension:
        db.enable_load_extension(True)
        db.load_extension(extension)
        db.enable_load_extension(False)
    return db


def shard_uri(path):
    """The shard as a read-only URI: workers never write to it."""
    return pathlib.Path(path).as_uri() + "?mode=ro"


# ---------------------------------------------------------------- the workers

class ScanPlugin(WorkerPlugin):
    """Set up once per worker process (and again on a worker that replaces a
    lost one): one in-memory connection with the extension loaded and the model
    imported. A lock lets one task at a time use it, should a worker run
    several threads."""

    def __init__(self, name, extension, model, weights, threads):
        self.name = name
        self.extension = extension
        self.model = model
        self.weights = weights
        self.threads = threads

    def setup(self, worker):
        cores = len(os.sched_getaffinity(0))
        threads = self.threads or max(1, cores // max(1, worker.nthreads))
        db = connect(":memory:", self.extension, uri=True, check_same_thread=False)
        db.execute("SELECT relattn_import(?, ?)", (self.model, self.weights))
        db.execute("SELECT relattn_threads(?)", (threads,))
        self.db, self.lock, self.weights = db, threading.Lock(), None

    def teardown(self, worker):
        self.db.close()


def scan_arguments(model, source, tokens, generate):
    """relattn_scan's arguments: generate= (the generated column's options,
    as relattn_generate's JSON) when given."""
    args = "model={}, source={}, tokens={}".format(
        *(sql_string(v) for v in (model, source, tokens)))
    return args + (f", generate={sql_string(generate)}" if generate is not None else "")


def scan_range(db, model, shard, source, tokens, id_col, lo, hi, select, generate=None,
               report=None):
    """SELECT select FROM relattn_scan over ids lo..hi of one shard, copied
    next to the model in db's main schema (relattn_scan reads its source and
    the model from one schema). report(rows so far), when given, is called
    every PROGRESS_REPORT seconds at most while the rows come."""
    # The rows' column keeps its name, so relattn_scan's errors name it.
    db.execute(f"CREATE TABLE {ROWS_TABLE}(id INTEGER PRIMARY KEY, {quote(tokens)})")
    try:
        db.execute("ATTACH ? AS corpus", (shard_uri(shard),))
        try:
            db.execute(f"INSERT INTO {ROWS_TABLE} SELECT {quote(id_col)}, {quote(tokens)} "
                       f"FROM corpus.{quote(source)} WHERE {quote(id_col)} "
                       "BETWEEN ? AND ?", (lo, hi))
        finally:
            db.execute("DETACH corpus")
        db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan({})".format(
            scan_arguments(model, ROWS_TABLE, tokens, generate)))
        rows, shown = [], time.monotonic()
        for row in db.execute(f"SELECT {select} FROM temp.job"):
            rows.append(row)
            if report and time.monotonic() - shown >= PROGRESS_REPORT:
                report(rows)
                shown = time.monotonic()
        return rows
    finally:
        db.execute("DROP TABLE IF EXISTS temp.job")
        db.execute(f"DROP TABLE {ROWS_TABLE}")


def score_range(plugin_name, shard, source, tokens, id_col, lo, hi, columns, generate=None,
                topic=None):
    """One task: relattn_scan over ids lo..hi of one shard. Returns the rows
    (id, the columns, error), their token count, how many have an error, the
    worker and the time. With topic, it reports the rows and tokens scored so
    far as Dask events: {"shard", "lo", "rows", "tokens"}."""
    worker = get_worker()
    plugin = worker.plugins[plugin_name]
    t = time.perf_counter()
    # Naming the hidden error column makes a bad row a row with its message,
    # not the end of the scan.
    select = ", ".join(["id", "n_tokens"] + list(columns) + ["error"])
    def report(rows):
        worker.log_event(topic, {"shard": shard, "lo": lo, "rows": len(rows),
                                 "tokens": sum(r[1] or 0 for r in rows)})

    with plugin.lock:
        rows = scan_range(plugin.db, plugin.model, shard, source, tokens, id_col, lo, hi,
                          select, generate, report if topic else None)
    return {"rows": [(r[0],) + r[2:] for r in rows], "tokens": sum(r[1] or 0 for r in rows),
            "errors": sum(r[-1] is not None for r in rows), "worker": worker.address,
            "seconds": time.perf_counter() - t}


# ------------------------------------------------------- the results database

SCHEMA = ("""
CREATE TABLE IF NOT EXISTS relattn_cluster_job(
  results TEXT PRIMARY KEY,      -- the results table this job fills
  model TEXT, model_sha256 TEXT, source TEXT, tokens TEXT, id TEXT, columns TEXT,
  generate TEXT)                 -- the generated column's options (NULL: none kept)""", """
CREATE TABLE IF NOT EXISTS relattn_cluster_range(
  results TEXT, shard TEXT, lo INTEGER, hi INTEGER,   -- ids lo..hi of the shard file
  planned_rows INTEGER, planned_tokens INTEGER,
  rows INTEGER, tokens INTEGER, worker TEXT, seconds REAL,
  done_at TEXT,                  -- set in the transaction that commits its rows
  PRIMARY KEY (results, shard, lo))""")


class JobError(Exception):
    pass


def prepare(db, args, job, model_db):
    """The job's tables and its plan, in one transaction: a rerun must be the
    same job, and two runs at once plan each range once. Adds ranges of
    --range-rows rows for each shard's ids past the last range planned, and
    counts the tokens of each range not done that has no count (with
    model_db, which holds the model)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for sql in SCHEMA:
            db.execute(sql)
        # a plan made before ranges had a token count
        if "planned_tokens" not in [c for (_, c, *_) in db.execute(
                "PRAGMA table_info(relattn_cluster_range)")]:
            db.execute("ALTER TABLE relattn_cluster_range ADD COLUMN planned_tokens INTEGER")
        # a job recorded before the generated column's options were
        if "generate" not in [c for (_, c, *_) in db.execute(
                "PRAGMA table_info(relattn_cluster_job)")]:
            db.execute("ALTER TABLE relattn_cluster_job ADD COLUMN generate TEXT")
        table = args.table
        cols = ", ".join(f"{c} {COLUMN_TYPES[c]}" for c in args.columns + ["error"])
        db.execute(f"CREATE TABLE IF NOT EXISTS {quote(table)}(id INTEGER PRIMARY KEY, {cols})")
        keys = ("model", "model_sha256", "source", "tokens", "id", "columns", "generate")
        new = tuple(job[k] for k in keys)
        old = db.execute(f"SELECT {', '.join(keys)} FROM relattn_cluster_job "
                         "WHERE results = ?", (table,)).fetchone()
        if old is None:
            db.execute(f"INSERT INTO relattn_cluster_job(results, {', '.join(keys)}) "
                       f"VALUES (?{', ?' * len(keys)})", (table,) + new)
        elif old != new:
            diff = "; ".join(f"{k.replace('_', ' ')} {o!r}, not {v!r}"
                             for k, o, v in zip(keys, old, new) if o != v)
            raise JobError(f"results table {table!r} belongs to another job ({diff}): "
                           "name another --table or --results")
        lasts = [db.execute("SELECT max(hi) FROM relattn_cluster_range WHERE results = ? "
                            "AND shard = ?", (table, shard)).fetchone()[0]
                 for shard in args.shards]
        range_rows = args.range_rows or auto_range_rows(args, lasts)
        for shard, last in zip(args.shards, lasts):
            db.executemany("INSERT INTO relattn_cluster_range(results, shard, lo, hi, "
                           "planned_rows) VALUES (?, ?, ?, ?, ?)",
                           [(table, shard) + r for r in split(args, shard, last, range_rows)])
        for shard, lo, hi in db.execute(
                "SELECT shard, lo, hi FROM relattn_cluster_range WHERE results = ? AND "
                "done_at IS NULL AND planned_tokens IS NULL", (table,)).fetchall():
            # n_tokens and error alone run no model (error: a bad row is a row).
            # A range that cannot be read keeps no count: its task says why.
            try:
                ((tokens, _),) = scan_range(model_db, args.model, shard, args.source,
                                            args.tokens, args.id, lo, hi,
                                            "coalesce(sum(n_tokens), 0), count(error)")
            except sqlite3.Error:
                continue
            db.execute("UPDATE relattn_cluster_range SET planned_tokens = ? WHERE results = ? "
                       "AND shard = ? AND lo = ?", (tokens, table, shard, lo))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:       # not after a COMMIT that found the database busy
            db.execute("ROLLBACK")
        raise


def rows_past(args, shard, last):
    """How many rows of the shard have an id past last."""
    src = connect(shard_uri(shard), uri=True)
    try:
        (n,) = src.execute(f"SELECT count(*) FROM {quote(args.source)} WHERE {quote(args.id)} > ?",
                           (last if last is not None else -(1 << 63),)).fetchone()
    except sqlite3.Error as e:
        raise JobError(f"cannot read {args.source!r} in {shard}: {e}") from None
    finally:
        src.close()
    return n


def auto_range_rows(args, lasts):
    """Rows per range when --range-rows is not given: the rows to plan cut
    into RANGES_PER_WORKER ranges per worker, so that every worker gets work,
    of RANGE_ROWS rows at most (a task's memory and what a lost worker
    loses)."""
    rows = sum(rows_past(args, shard, last) for shard, last in zip(args.shards, lasts))
    per = RANGES_PER_WORKER * max(1, args.n_workers)
    return max(1, min(RANGE_ROWS, -(-rows // per)))


def split(args, shard, last, range_rows):
    """(first id, last id, rows) of each range of the shard's ids past last."""
    src = connect(shard_uri(shard), uri=True)
    idq = quote(args.id)
    try:
        return src.execute(
            f"SELECT min(id), max(id), count(*) FROM (SELECT {idq} AS id, "
            f"(row_number() OVER (ORDER BY {idq}) - 1) / ? AS part FROM {quote(args.source)} "
            f"WHERE {idq} > ?) GROUP BY part ORDER BY part",
            (range_rows, last if last is not None else -(1 << 63))).fetchall()
    except sqlite3.Error as e:
        raise JobError(f"cannot read {args.source!r} in {shard}: {e}") from None
    finally:
        src.close()


def commit(db, table, columns, shard, lo, out):
    """A range's rows and its done-marker, in one transaction. False (and
    nothing written) when the range was already committed."""
    db.execute("BEGIN IMMEDIATE")
    try:
        cur = db.execute(
            "UPDATE relattn_cluster_range SET rows = ?, tokens = ?, worker = ?, seconds = ?, "
            "done_at = strftime('%Y-%m-%d %H:%M:%f', 'now') "
            "WHERE results = ? AND shard = ? AND lo = ? AND done_at IS NULL",
            (len(out["rows"]), out["tokens"], out["worker"], out["seconds"], table, shard, lo))
        if cur.rowcount != 1:
            db.execute("ROLLBACK")
            return False
        names = ", ".join(["id"] + list(columns) + ["error"])
        marks = ", ".join("?" * (2 + len(columns)))
        db.executemany(f"INSERT INTO {quote(table)}({names}) VALUES ({marks})", out["rows"])
        db.execute("COMMIT")
    except sqlite3.IntegrityError as e:
        db.execute("ROLLBACK")
        raise JobError(f"range from id {lo} of {shard}: {e}: an id of it is in {table!r} "
                       "already (ids must be unique across shards)") from None
    except BaseException:
        # A COMMIT that found the database busy leaves the transaction open.
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return True


def is_busy(e):
    """Whether an error is another connection holding the lock."""
    return (isinstance(e, sqlite3.OperationalError)
            and (e.sqlite_errorcode & 0xff) == sqlite3.SQLITE_BUSY)


class LockWait:
    """The wait for the results database's write lock, held by another
    connection past BUSY_MS: tries again after 0.1 s, doubling to 5 s, until
    the lock has been held for --lock-wait seconds since the first failed
    try. A try that succeeds ends the wait."""

    def __init__(self, path, seconds):
        self.path, self.seconds = path, seconds
        self.since = None
        self.delay, self.next = 0.1, 0.0
        self.progress = None    # the progress line, ended before a message

    def say(self, text):
        if self.progress:
            self.progress.break_line()
        print(text, flush=True)

    def ready(self):
        return self.since is None or time.monotonic() >= self.next

    def failed(self, what):
        """A try found the lock held: raises JobError once the wait is over."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
            if self.seconds > 0:
                self.say(f"the results database {self.path} is locked by another "
                         f"connection: waiting for up to {self.seconds:g} s (--lock-wait)")
        if now - self.since >= self.seconds:
            raise JobError(f"the results database {self.path} is locked: another connection "
                           f"has held its write lock for the {self.seconds:g} s of --lock-wait; "
                           f"{what}. Let that connection commit or close, then run the same "
                           "command again: it scores only the ranges not saved")
        self.next, self.delay = now + self.delay, min(2 * self.delay, 5.0)

    def succeeded(self):
        if self.since is not None:
            self.say(f"the results database is free again after "
                     f"{time.monotonic() - self.since:.1f} s")
        self.since, self.delay = None, 0.1

    def run(self, what, fn, *args):
        """fn(*args), tried until the lock is free or the wait is over."""
        while True:
            try:
                r = fn(*args)
            except sqlite3.OperationalError as e:
                if not is_busy(e):
                    raise
                self.failed(what)
                time.sleep(max(0.0, self.next - time.monotonic()))
                continue
            self.succeeded()
            return r


class Progress:
    """The whole job's rows and tokens done of its total, with this run's
    tokens/s and the ETA, on stderr: redrawn in place on a terminal (every
    PROGRESS_TTY seconds), else a line every PROGRESS_LOG seconds while work
    runs; and a last line. Done is what is committed plus what the workers
    have reported of the ranges they hold (running(), from their events)."""

    def __init__(self, rows, all_rows, tokens, all_tokens, stream=sys.stderr):
        self.rows, self.all_rows, self.tokens, self.all_tokens = rows, all_rows, tokens, all_tokens
        self.run_tokens, self.run_rows = 0, 0
        self.stream, self.tty = stream, stream.isatty()
        self.t0 = self.shown = time.monotonic()
        self.drawn = False      # a line drawn on the terminal, not ended yet
        self.lock = threading.Lock()
        self.partial = {}       # (shard, lo) -> (rows, tokens) scored, not committed
        self.ended = set()      # ranges committed or failed: late reports ignored

    def running(self, event):
        """A worker's report (a Dask event: (time, msg)) of a range it holds.
        Events come through the scheduler, so one may arrive after the
        range's result."""
        msg = event[1]
        with self.lock:
            if (msg["shard"], msg["lo"]) not in self.ended:
                self.partial[(msg["shard"], msg["lo"])] = (msg["rows"], msg["tokens"])

    def add(self, rows, tokens, shard=None, lo=None):
        """A range committed: its rows and tokens (its reports dropped)."""
        self.drop(shard, lo)
        self.rows += rows
        self.tokens += tokens
        self.run_rows += rows
        self.run_tokens += tokens
        self.tick()

    def drop(self, shard, lo):
        """A range ended: what its worker reported counts no more."""
        with self.lock:
            self.partial.pop((shard, lo), None)
            self.ended.add((shard, lo))

    def tick(self):
        if time.monotonic() - self.shown >= (PROGRESS_TTY if self.tty else PROGRESS_LOG):
            self.draw()

    def line(self):
        el = max(time.monotonic() - self.t0, 1e-3)
        with self.lock:
            held = list(self.partial.values())
        rows = self.rows + sum(r for r, _ in held)
        tokens = self.tokens + sum(t for _, t in held)
        run_rows = self.run_rows + sum(r for r, _ in held)
        run_tokens = self.run_tokens + sum(t for _, t in held)
        if run_tokens:
            eta = (self.all_tokens - tokens) * el / run_tokens
        else:
            eta = (self.all_rows - rows) * el / max(run_rows, 1)
        s = max(0, round(eta))
        pct = (100 * tokens / self.all_tokens if self.all_tokens
               else 100 * rows / max(self.all_rows, 1))
        return (f"relattn_dask: {rows}/{self.all_rows} rows, {tokens}/"
                f"{self.all_tokens} tokens ({pct:.1f}%), {run_tokens / el:.0f} tokens/s, "
                f"ETA {s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}")

    def draw(self, last=False):
        if self.tty:
            end = "\n" if last else ""
            self.stream.write(f"\r\033[K{self.line()}{end}")
            self.drawn = not last
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()
        self.shown = time.monotonic()

    def break_line(self):
        """Ends a line drawn on the terminal, before another message."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def check_source(args):
    """--source, --tokens and --id looked up in each shard, before the
    results database is opened, so that a misspelt name writes nothing (a
    results table and a plan made for it would pin the job to the typo)."""
    for shard in args.shards:
        src = connect(shard_uri(shard), uri=True)
        try:
            kinds = [k for (k,) in src.execute(
                "SELECT type FROM pragma_table_list WHERE schema = 'main' AND name = ? "
                "COLLATE NOCASE", (args.source,))]
            cols = {c.lower() for (c,) in src.execute(
                "SELECT name FROM pragma_table_xinfo(?, 'main')", (args.source,))}
        except sqlite3.Error as e:
            raise JobError(f"cannot read {args.source!r} in {shard}: {e}") from None
        finally:
            src.close()
        where = f"source {args.source!r} in {shard}"
        if not kinds:
            raise JobError(f"{where} is not a table or view (--source)")
        if args.tokens.lower() not in cols:
            raise JobError(f"{where} has no column {args.tokens!r} (--tokens)")
        if args.id.lower() in ROWID and args.id.lower() not in cols:
            if kinds[0] == "view":
                raise JobError(f"{where} is a view: name its INTEGER id column with --id")
        elif args.id.lower() not in cols:
            raise JobError(f"{where} has no column {args.id!r} (--id)")


# ------------------------------------------------------------------ the model

def load_model(args, extension):
    """The model's safetensors bytes (exported from a database, or the file
    itself), checked by importing it here; returns (bytes, sha256, config,
    an in-memory connection that holds the model)."""
    path = args.model_file or args.shards[0]
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    try:
        db = connect(shard_uri(path) if head == SQLITE_MAGIC else ":memory:", extension,
                     uri=True)
    except sqlite3.Error as e:
        raise JobError(f"cannot load the extension {extension}: {e}") from None
    try:
        if head == SQLITE_MAGIC:
            has = db.execute("SELECT 1 FROM sqlite_schema WHERE name = 'relattn_model'")
            (weights,) = (db.execute("SELECT relattn_export(name) FROM relattn_model "
                                     "WHERE name = ?", (args.model,)).fetchone()
                          if has.fetchone() else None) or (None,)
            db.close()
            db = connect(":memory:", extension)
        else:
            weights = pathlib.Path(path).read_bytes()
        if weights is None:
            raise JobError(f"no model named {args.model!r} in {path} (--model-file names "
                           "the file that holds it)")
        db.execute("SELECT relattn_import(?, ?)", (args.model, weights))
        sha, config = db.execute("SELECT sha256, config FROM relattn_model").fetchone()
    except sqlite3.Error as e:
        db.close()
        raise JobError(f"model {args.model!r} from {path}: {e}") from None
    except BaseException:
        db.close()
        raise
    return weights, sha, json.loads(config), db


def default_columns(config):
    """The columns kept without --columns, by the model's head and arch."""
    head = config.get("head", "lm")
    if head == "classifier":
        return DEFAULT_COLUMNS["regression" if config.get("problem_type") == "regression"
                               else "classifier"]
    if config.get("arch") == "decoder" and head == "lm":
        return DEFAULT_COLUMNS["decoder"]
    return DEFAULT_COLUMNS["encoder"]


def job_generate(args):
    """The generated column's options as the job records them: NULL unless
    the job keeps that column, else the JSON object with its keys sorted, so
    that a rerun spelling the same options differently is the same job and
    one with other options (another text for the rows left) is refused."""
    if "generated" not in args.columns:
        return None
    if args.generate is None:
        return "{}"
    try:
        return json.dumps(json.loads(args.generate), sort_keys=True, separators=(", ", ": "))
    except ValueError:   # relattn_scan took it (check_columns): keep its text
        return args.generate


def check_columns(db, model, columns, generate=None):
    """relattn_scan's own error when the model cannot give a column
    (score of an encoder, label of a decoder): a scan over no row."""
    db.execute(f"CREATE TABLE {ROWS_TABLE}(id INTEGER PRIMARY KEY, body)")
    try:
        db.execute("CREATE VIRTUAL TABLE temp.job USING relattn_scan({})".format(
            scan_arguments(model, ROWS_TABLE, "body", generate)))
        db.execute(f"SELECT {', '.join(columns + ['error'])} FROM temp.job").fetchall()
    except sqlite3.Error as e:
        raise JobError(f"--columns: {e}") from None
    finally:
        db.execute("DROP TABLE IF EXISTS temp.job")
        db.execute(f"DROP TABLE {ROWS_TABLE}")


# -------------------------------------------------------------------- the job

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Score SQLite corpus shards with relattn_scan on Dask distributed, "
                    "merging the results into one table exactly once.")
    p.add_argument("shards", nargs="+", help="the corpus: one SQLite file, or its shard files")
    p.add_argument("--results", required=True, help="SQLite database for the results")
    p.add_argument("--table", help="results table (default: <source>_scores)")
    p.add_argument("--model", default="tiny", help="model name (default: tiny)")
    p.add_argument("--model-file", help="the model in its own file: a safetensors file, or a "
                   "SQLite database holding it (default: the first shard holds it)")
    p.add_argument("--source", default="docs", help="table or view of the corpus (default: docs)")
    p.add_argument("--tokens", default="body", help="its column of token sequences (default: body)")
    p.add_argument("--id", default="rowid", help="its INTEGER id column (default: rowid)")
    p.add_argument("--columns",
                   help="relattn_scan's columns to keep, comma-separated, from " +
                   ", ".join(COLUMNS) + " (error is always kept; default: by the model: a "
                   "decoder n_tokens,score,perplexity, a classifier n_tokens,label,prob,logit, "
                   "a regression model n_tokens,logit, another encoder n_tokens,embedding)")
    p.add_argument("--generate",
                   help="the generated column's options, a JSON object as relattn_generate "
                   "takes, e.g. '{\"max_new_tokens\": 40}' (default: its defaults)")
    p.add_argument("--range-rows", type=int,
                   help=f"rows per task (default: the rows to plan cut into "
                   f"{RANGES_PER_WORKER} ranges per worker, of at most {RANGE_ROWS} rows)")
    p.add_argument("--lock-wait", type=float, default=LOCK_WAIT,
                   help="seconds to wait for another connection that holds the results "
                   "database's write lock, the scored ranges kept meanwhile "
                   f"(default: {LOCK_WAIT})")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                   help="worker processes of the LocalCluster (default: the cores)")
    p.add_argument("--scheduler", help="address of a running Dask scheduler, "
                   "e.g. tcp://host:8786, instead of a LocalCluster")
    p.add_argument("--threads", type=int, help="relattn_threads() per worker (default: its "
                   "cores divided by its Dask threads; on a LocalCluster, the cores divided "
                   "by --workers)")
    p.add_argument("--extension", default=str(pathlib.Path(__file__).resolve().parents[1] /
                                              "relattn.so"),
                   help="the relattn extension, as the workers see it (default: relattn.so "
                   "at the repository's root)")
    args = p.parse_args(argv)
    if args.columns is not None:
        names = [c.strip() for c in args.columns.split(",") if c.strip()]
        if not names:
            p.error(f"--columns is empty: name one or more of {', '.join(COLUMNS)}")
        bad = [c for c in names if c.lower() not in COLUMNS]
        if bad:
            p.error(f"--columns: relattn_scan has no column {bad[0]!r} (choose from "
                    f"{', '.join(COLUMNS)})")
        names = [c.lower() for c in names]
        twice = [c for i, c in enumerate(names) if c in names[:i]]
        if twice:
            p.error(f"--columns names {twice[0]!r} twice")
        args.columns = [c for c in names if c != "error"]
    if ((args.range_rows is not None and args.range_rows < 1) or args.workers < 1 or
            (args.threads is not None and args.threads < 1)):
        p.error("--range-rows, --workers and --threads must be at least 1")
    if not args.lock_wait >= 0:
        p.error("--lock-wait must be at least 0")
    args.table = args.table or f"{args.source}_scores"
    args.shards = [os.path.abspath(s) for s in args.shards]
    for s in args.shards + ([args.model_file] if args.model_file else []):
        if not os.path.isfile(s):
            p.error(f"no such file: {s}")
    return args


def has_bokeh():
    import importlib.util
    return importlib.util.find_spec("bokeh") is not None


def start_dask(args, client):
    """A client of the given scheduler (client), or of a new LocalCluster."""
    if args.scheduler:
        cluster = None
    else:
        cores = len(os.sched_getaffinity(0))
        args.threads = args.threads or max(1, cores // args.workers)
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0")   # any free port
        client = Client(cluster)
    # The scheduler serves the dashboard only when it has bokeh (Debian 12 has not).
    if client.run_on_scheduler(has_bokeh):
        print(f"dashboard: {client.dashboard_link}", flush=True)
    return client, cluster


def close_dask(client, cluster=None):
    """Closes the job's client, and the cluster it started, once the job's
    outcome is known: nothing from here on changes what was scored or
    saved, so neither a slow close nor distributed's shutdown noise may
    replace the job's own last line. Under load, a connection attempt that
    times out while the client closes leaves an asyncio future holding a
    TimeoutError nobody retrieves; asyncio would log it at exit ("Future
    exception was never retrieved ... TimeoutError: Timeout"), after the
    message that says what to do."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    try:
        client.close()
    except TimeoutError:
        pass
    if cluster is not None:
        cluster.close()


def run(args):
    extension = os.path.abspath(args.extension)
    weights, sha, config, model_db = load_model(args, extension)
    try:
        return run_job(args, extension, weights, sha, config, model_db)
    finally:
        model_db.close()


def run_job(args, extension, weights, sha, config, model_db):
    if args.columns is None:
        args.columns = default_columns(config)
    check_columns(model_db, args.model, args.columns, args.generate)
    job = {"model": args.model, "model_sha256": sha, "source": args.source,
           "tokens": args.tokens, "id": args.id, "columns": ",".join(args.columns),
           "generate": job_generate(args)}
    check_source(args)
    # The workers that ranges are planned for (auto_range_rows)
    client = Client(args.scheduler) if args.scheduler else None
    try:
        args.n_workers = (len(client.scheduler_info()["workers"]) if client else args.workers)
        return run_dask(args, extension, weights, sha, job, model_db, client)
    finally:
        if client is not None:
            close_dask(client)


def run_dask(args, extension, weights, sha, job, model_db, client):
    db = connect(args.results)
    db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
    wait = LockWait(os.path.abspath(args.results), args.lock_wait)
    nothing = "nothing was scored"

    def plan():
        db.execute("PRAGMA journal_mode=WAL")   # readers see progress while it runs
        prepare(db, args, job, model_db)
        marks = ", ".join("?" * len(args.shards))
        todo = db.execute(f"SELECT shard, lo, hi, planned_rows FROM relattn_cluster_range "
                          f"WHERE results = ? AND shard IN ({marks}) AND done_at IS NULL "
                          f"ORDER BY shard, lo", [args.table] + args.shards).fetchall()
        (done,) = db.execute("SELECT count(*) FROM relattn_cluster_range WHERE results = ? "
                             "AND done_at IS NOT NULL", (args.table,)).fetchone()
        # the whole job: rows and tokens done, and in all
        totals = db.execute(
            "SELECT coalesce(sum(rows), 0), coalesce(sum(coalesce(rows, planned_rows)), 0), "
            "coalesce(sum(tokens), 0), coalesce(sum(coalesce(tokens, planned_tokens)), 0) "
            f"FROM relattn_cluster_range WHERE results = ? AND shard IN ({marks})",
            [args.table] + args.shards).fetchone()
        return todo, done, totals

    todo, done, totals = wait.run(nothing, plan)
    if not todo:
        print(f"nothing to do: all {done} ranges of {args.table!r} are done", flush=True)
        return 0
    print(f"{len(todo)} ranges to score ({sum(r[3] for r in todo)} rows), {done} done before",
          flush=True)

    client, cluster = start_dask(args, client)
    failed = skipped = 0
    topic = None        # the workers' reports, once subscribed
    try:
        name = f"relattn-scan-{args.model}-{sha[:16] if sha else 'unhashed'}"
        setup = client.register_worker_plugin(
            ScanPlugin(name, extension, args.model, weights, args.threads), name=name)
        for addr, r in setup.items():
            if r.get("status") != "OK":
                raise JobError(f"worker {addr} could not set up: {r.get('exception', r)}")
        futures, run_id = {}, uuid.uuid4().hex[:8]
        progress = Progress(*totals)
        wait.progress = progress
        client.subscribe_topic(f"relattn-progress-{run_id}", progress.running)
        topic = f"relattn-progress-{run_id}"
        for shard, lo, hi, _ in todo:
            key = f"relattn-scan-{args.shards.index(shard)}-{lo}-{hi}-{run_id}"
            fut = client.submit(score_range, name, shard, args.source, args.tokens, args.id,
                                lo, hi, args.columns, args.generate,
                                f"relattn-progress-{run_id}", key=key,
                                pure=False)
            futures[fut] = (shard, lo, hi)
        t, rows, tokens, errors = time.perf_counter(), 0, 0, 0
        # Scored ranges not committed yet: while another connection holds the
        # results database's lock, they wait here, and the loop goes on
        # taking results as they come.
        unsaved = []

        def save():
            nonlocal rows, tokens, errors, skipped
            while unsaved and wait.ready():
                shard, lo, out = unsaved[0]
                try:
                    saved = commit(db, args.table, args.columns, shard, lo, out)
                except sqlite3.OperationalError as e:
                    if not is_busy(e):
                        raise
                    wait.failed(f"{len(unsaved)} ranges scored in this run are not saved")
                    return
                wait.succeeded()
                unsaved.pop(0)
                if saved:
                    rows += len(out["rows"])
                    tokens += out["tokens"]
                    errors += out["errors"]
                    progress.add(len(out["rows"]), out["tokens"], shard, lo)
                else:
                    progress.drop(shard, lo)
                    skipped += 1

        # The loop polls, so that a progress line comes on time while ranges run.
        ready = as_completed(list(futures))
        while True:
            save()
            progress.tick()
            if ready.has_ready():
                batch = ready.next_batch(block=False)
            elif not unsaved and ready.is_empty():
                break
            else:
                time.sleep(0.05)
                continue
            for fut in batch:
                shard, lo, hi = futures.pop(fut)
                if fut.status != "finished":
                    progress.drop(shard, lo)
                    failed += 1
                    progress.break_line()
                    print(f"range {lo}..{hi} of {shard} failed: {fut.exception()}",
                          file=sys.stderr, flush=True)
                else:
                    unsaved.append((shard, lo, fut.result()))
                del fut
        progress.draw(last=True)
        dt = time.perf_counter() - t
        print(f"scored {rows} rows ({tokens} tokens) in {dt:.1f} s, {tokens / dt:.0f} "
              f"tokens/s, into {args.table!r} of {args.results}", flush=True)
        if errors:
            print(f"{errors} rows have an error instead of results: SELECT id, error FROM "
                  f"{quote(args.table)} WHERE error IS NOT NULL", flush=True)
        if skipped:
            print(f"{skipped} ranges were committed by another run meanwhile", flush=True)
    finally:
        if topic is not None:
            client.unsubscribe_topic(topic)
        if cluster is not None:     # a scheduler's client is closed by run_job
            close_dask(client, cluster)
    if failed:
        print(f"{failed} ranges failed; run the same command again to retry them",
              file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    args = parse_args(argv)
    try:
        return run(args)
    except JobError as e:
        print(f"relattn_dask: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
