#!/usr/bin/python3
"""The position experiments: a sweep of small byte-level decoders, evaluated in SQL.

    /usr/bin/python3 experiments/sweep.py            # the sweep (make experiments)
    /usr/bin/python3 experiments/sweep.py --report   # the tables and pictures, from experiments/results.db

Every model is trained by models/train_corpus.py on the bundled corpus (the King James Bible and the
prose of SQLite's documentation, read and split exactly as models/train.py does), with the same
data, steps, width and seed; only the position settings and the data fraction change. Each is
trained on sequences of 256 bytes and imported into a database, and then scored through
relattn_scan on held-out text (whole chapters and documentation pages training never saw, laid end
to end) cut into windows of 64, 256, 1024 and 4096 bytes: the same bytes at every length, each
window read from its own bos.

Every run is a row of the results database (default experiments/results.db): its config, data
fraction, steps, training time, held-out bits per byte at each length, inference tokens/s
(relattn_scan, one thread) and the time of the model's relative attention against plain attention
at 1024 positions (relattn_attention, the model's own layer-0 tables). A run already in the
results with the same settings is skipped, so the sweep resumes where it stopped.

The plan lists the position schemes beyond Shaw's (absolute, none, T5, ALiBi, RoPE,
Transformer-XL) too: relattn_attention computes them and native models take them, but the
trainer makes Shaw models only, so the sweep records them as not yet runnable and
skips them.
"""
import argparse
import array
import importlib.util
import json
import math
import os
import pathlib
import random
import sqlite3
import statistics
import struct
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
LENGTHS = (64, 256, 1024, 4096)

# The sweep. name: (clip, rel_v, data fraction).
SHAW = [(f"shaw-k{k}{'' if v else '-nov'}", k, v, 1.0) for k in (0, 2, 8, 16, 64, 256) for v in (True, False)]
DATA = [(f"shaw-k{k}-data10", k, True, 0.1) for k in (16, 64)]
NOT_YET = [  # scheme, settings, fraction, whether native models take it
    ("absolute", "learned absolute positions", 1.0, True), ("none", "no position information", 1.0, True),
    ("t5", "num_buckets 32, max_distance 128", 1.0, True), ("alibi", "BLOOM's slopes", 1.0, True),
    ("rope", "half rotation, base 10000", 1.0, True), ("xl", "Transformer-XL sinusoids, u and w", 1.0, True),
    ("xl", "Transformer-XL sinusoids, u and w", 0.1, True), ("absolute", "learned absolute positions", 0.1, True),
]
NOT_YET_REASON = {True: "not yet runnable: native models take it, models/train_corpus.py trains Shaw models only",
                  False: "not yet runnable: native models do not take it, and models/train_corpus.py trains "
                         "Shaw models only"}

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs(
  name TEXT PRIMARY KEY,
  scheme TEXT NOT NULL,
  clip INTEGER,
  rel_v INTEGER,
  data_fraction REAL NOT NULL,
  status TEXT NOT NULL,            -- 'done' or why it did not run
  steps INTEGER, d_model INTEGER, layers INTEGER, heads INTEGER, seq_len INTEGER, seed INTEGER,
  params INTEGER, train_rows INTEGER, train_bytes INTEGER, bytes_seen INTEGER,
  train_seconds REAL, threads INTEGER,
  bpb_64 REAL, bpb_256 REAL, bpb_1024 REAL, bpb_4096 REAL,
  eval_bytes INTEGER,              -- held-out bytes scored at each length
  tokens_per_s REAL,               -- relattn_scan, one thread, all four lengths
  rel_ms REAL, plain_ms REAL, rel_plain REAL,  -- relattn_attention at 1024 positions, causal
  config TEXT,                     -- the model's config JSON, with the trainer's facts
  corpus TEXT, finished TEXT
);
"""


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


# ---------------------------------------------------------------------------------------------
# The corpus: models/train.py's data and split


def build_corpus(path):
    """A corpus database: train(id, source, body), one unit a row, and heldout(id, source, body) in
    reading order. The units and the split are models/train.py's."""
    if path.exists():
        return path
    spec = importlib.util.spec_from_file_location("relattn_train", ROOT / "models" / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    tr, held = train.load_data()
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    with con:
        con.execute("CREATE TABLE train(id INTEGER PRIMARY KEY, source TEXT, body TEXT)")
        con.execute("CREATE TABLE heldout(id INTEGER PRIMARY KEY, source TEXT, body TEXT)")
        con.executemany("INSERT INTO train(source, body) VALUES (?, ?)", [(s, t) for s, _, t in tr])
        con.executemany("INSERT INTO heldout(source, body) VALUES (?, ?)", [(s, t) for s, _, t in held])
    con.close()
    tmp.replace(path)
    return path


def windows(corpus, windows_per_source):
    """Evaluation windows [(length, source, bytes)]: each source's held-out units joined by a space
    into one stream; its first windows_per_source * 4096 bytes cut into windows of each length."""
    con = sqlite3.connect(corpus)
    streams = {}
    for source, body in con.execute("SELECT source, body FROM heldout ORDER BY id"):
        streams.setdefault(source, []).append(body)
    con.close()
    out = []
    budget = windows_per_source * max(LENGTHS)
    for source in sorted(streams):
        b = " ".join(streams[source]).encode()
        if len(b) < budget:
            sys.exit(f"sweep.py: held-out text of {source} has {len(b)} bytes, fewer than {budget}")
        for n in LENGTHS:
            out += [(n, source, b[i:i + n]) for i in range(0, budget, n)]
    return out


# ---------------------------------------------------------------------------------------------
# One run: train, import, evaluate in SQL


def connect(db, so):
    con = sqlite3.connect(db)
    con.enable_load_extension(True)
    con.load_extension(so[:-3] if so.endswith(".so") else so)
    con.enable_load_extension(False)
    return con


def train(args, name, clip, rel_v, fraction, steps):
    query = "SELECT body FROM train ORDER BY id"
    if fraction < 1:
        every = round(1 / fraction)
        query = f"SELECT body FROM train WHERE id % {every} = 0 ORDER BY id"
    out = args.work / f"{name}.safetensors"
    cmd = [sys.executable, str(ROOT / "models" / "train_corpus.py"), "--db", str(args.corpus),
           "--query", query, "--heldout", str(args.trainer_heldout),
           "--layers", str(args.layers), "--d-model", str(args.d_model), "--heads", str(args.heads),
           "--clip", str(clip), "--values" if rel_v else "--no-values",
           "--steps", str(steps), "--seq-len", "256", "--batch-tokens", str(args.batch_tokens),
           "--warmup", str(args.warmup), "--eval-every", str(max(1, steps)), "--seed", str(args.seed),
           "--threads", "1", "--fresh", "--out", str(out), "--name", name, "--into", str(args.models),
           "--so", args.so, "--log-every", str(max(1, steps // 4))]
    log(f"{name}: training ({steps} steps)")
    r = subprocess.run(cmd, capture_output=True, text=True)
    (args.work / f"{name}.log").write_text(r.stdout + r.stderr)
    if r.returncode:
        sys.exit(f"sweep.py: training {name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    for f in (out, pathlib.Path(str(out) + ".curve.svg")):
        f.unlink(missing_ok=True)


def evaluate(args, name, wins):
    """Bits per byte per length through relattn_scan (one thread), tokens/s, and relative vs plain
    attention time at 1024 positions."""
    con = connect(args.models, args.so)
    con.execute("SELECT relattn_threads(1)")
    con.execute("DROP TABLE IF EXISTS temp.win")
    con.execute("CREATE TEMP TABLE win(id INTEGER PRIMARY KEY, length INTEGER, tokens BLOB)")
    con.executemany("INSERT INTO temp.win(length, tokens) VALUES (?, ?)",
                    [(n, array.array("i", list(b)).tobytes()) for n, _, b in wins])
    bpb, tokens, seconds = {}, 0, 0.0
    for n in LENGTHS:
        con.execute("DROP VIEW IF EXISTS temp.w")
        con.execute(f"CREATE TEMP VIEW w AS SELECT id, tokens FROM temp.win WHERE length = {n}")
        con.execute("DROP TABLE IF EXISTS temp.job")
        con.execute(f"CREATE VIRTUAL TABLE temp.job USING relattn_scan(model='{name}', source='w', "
                    "tokens='tokens', id='id')")
        t = time.perf_counter()
        score, ntok, rows = con.execute("SELECT sum(score), sum(n_tokens), count(*) FROM temp.job").fetchone()
        seconds += time.perf_counter() - t
        tokens += ntok
        bpb[n] = -score / math.log(2) / ntok
        con.execute("DROP TABLE temp.job")
    cfg = json.loads(con.execute("SELECT config FROM relattn_model WHERE name = ?", (name,)).fetchone()[0])
    rel_ms, plain_ms = attention_times(con, name, cfg)
    con.close()
    return bpb, tokens / seconds, rel_ms, plain_ms, cfg


def attention_times(con, name, cfg, n=1024, rounds=9):
    """Milliseconds of one causal relattn_attention call at n positions with the model's layer-0
    relative tables, and of the same call with plain attention; medians of interleaved rounds."""
    h, dh = cfg["n_heads"], cfg["d_model"] // cfg["n_heads"]
    rng = random.Random(7)
    q, k, v = (struct.pack(f"<{n * h * dh}f", *(rng.gauss(0, 1) for _ in range(n * h * dh))) for _ in range(3))
    rk = con.execute("SELECT relattn_weights(?, 'layers.0.attn.rel_k')", (name,)).fetchone()[0]
    rv = (con.execute("SELECT relattn_weights(?, 'layers.0.attn.rel_v')", (name,)).fetchone()[0]
          if cfg["position"]["values"] else None)
    rel = json.dumps({"heads": h, "d_head": dh, "causal": True})
    plain = json.dumps({"heads": h, "d_head": dh, "causal": True, "position": {"type": "none"}})
    sql = "SELECT length(relattn_attention(?, ?, ?, ?, ?, ?))"
    times = {"rel": [], "plain": []}
    for _ in range(rounds):
        for kind, params in (("rel", (q, k, v, rk, rv, rel)), ("plain", (q, k, v, None, None, plain))):
            t = time.perf_counter()
            con.execute(sql, params).fetchone()
            times[kind].append(1000 * (time.perf_counter() - t))
    return statistics.median(times["rel"]), statistics.median(times["plain"])


# ---------------------------------------------------------------------------------------------
# Results and pictures


def record(res, row):
    cols = ", ".join(row)
    res.execute(f"INSERT OR REPLACE INTO runs({cols}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    res.commit()


def svg_lines(title, xlabel, series, xs, logx=True, W=640, H=380):
    """A line chart: series is [(label, colour, dash, [y or None per x])]."""
    L, R, T, B = 60, 170, 40, 50
    ys = [y for _, _, _, vals in series for y in vals if y is not None]
    if not ys:
        ys = [0, 1]
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.08 or 0.1
    y0, y1 = y0 - pad, y1 + pad
    fx = (lambda x: math.log2(x + 1)) if logx else (lambda x: x)
    x0, x1 = fx(min(xs)), fx(max(xs))
    sx = lambda x: L + (W - L - R) * (fx(x) - x0) / ((x1 - x0) or 1)
    sy = lambda y: H - B - (H - T - B) * (y - y0) / (y1 - y0)
    esc = lambda s: str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="12">', f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{esc(title)}</text>',
           f'<path d="M{L},{T} V{H - B} H{W - R}" fill="none" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">{esc(xlabel)}</text>',
           f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" '
           f'transform="rotate(-90 16 {(T + H - B) / 2})">held-out bits per byte</text>']
    for x in xs:
        out.append(f'<text x="{sx(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x}</text>')
    for i in range(5):
        y = y0 + (y1 - y0) * (i + 0.5) / 5
        out.append(f'<text x="{L - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.3f}</text>')
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#ddd"/>')
    for j, (label, colour, dash, vals) in enumerate(series):
        pts = [(sx(x), sy(y)) for x, y in zip(xs, vals) if y is not None]
        if len(pts) > 1:
            out.append(f'<polyline points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" fill="none" '
                       f'stroke="{colour}" stroke-width="2"{f" stroke-dasharray={chr(34)}{dash}{chr(34)}" if dash else ""}/>')
        for a, b in pts:
            out.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{colour}"/>')
        ly = T + 8 + 16 * j
        out.append(f'<line x1="{W - R + 10}" x2="{W - R + 30}" y1="{ly}" y2="{ly}" stroke="{colour}" '
                   f'stroke-width="2"{f" stroke-dasharray={chr(34)}{dash}{chr(34)}" if dash else ""}/>')
        out.append(f'<text x="{W - R + 36}" y="{ly + 4}">{esc(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def pictures(res, outdir):
    """bits/byte vs k (one line per evaluation length, with and without rel_v) and bits/byte vs
    evaluation length (one line per k), from the results table."""
    outdir.mkdir(parents=True, exist_ok=True)
    rows = res.execute("SELECT clip, rel_v, bpb_64, bpb_256, bpb_1024, bpb_4096 FROM runs "
                       "WHERE status = 'done' AND scheme = 'shaw' AND data_fraction = 1 AND name NOT LIKE '%-seed%' "
                       "AND name NOT LIKE '%steps' ORDER BY clip").fetchall()
    ks = sorted({r[0] for r in rows})
    if not ks:
        return []
    get = {(r[0], r[1]): r[2:] for r in rows}
    series = []
    for i, n in enumerate(LENGTHS):
        for v, dash in ((1, None), (0, "5,4")):
            series.append((f"{n} bytes{'' if v else ', no rel_v'}", COLOURS[i], dash,
                           [get[(k, v)][i] if (k, v) in get else None for k in ks]))
    written = []
    p = outdir / "experiments_bpb_vs_k.svg"
    p.write_text(svg_lines("Shaw clip k: held-out bits per byte (trained at 256)", "clip k (log scale)",
                           series, ks))
    written.append(p)
    series = [(f"k {k}{'' if v else ', no rel_v'}", COLOURS[i % len(COLOURS)], None if v else "5,4",
               list(get[(k, v)]))
              for i, k in enumerate(ks) for v in (1, 0) if (k, v) in get]
    p = outdir / "experiments_bpb_vs_length.svg"
    p.write_text(svg_lines("Length generalization: trained on 256-byte sequences",
                           "evaluation window, bytes (log scale)", series, list(LENGTHS)))
    written.append(p)
    return written


def profiles(args, res, names, outdir):
    """The attention-by-distance profile (mean weight by distance, per layer and head) of each
    named model on the first 1024-byte held-out window, its clip band shaded."""
    if not args.models.exists():
        return []  # no model trained here (every run was already in the results)
    con = connect(args.models, args.so)
    if not con.execute("SELECT 1 FROM sqlite_schema WHERE name = 'relattn_model'").fetchone():
        con.close()
        return []
    wins = [b for n, _, b in windows(args.corpus, args.windows) if n == 1024]
    tokens = array.array("i", list(wins[0])).tobytes()
    written = []
    for name in names:
        row = con.execute("SELECT json_extract(config, '$.position.clip') FROM relattn_model WHERE name = ?",
                          (name,)).fetchone()
        if not row:
            continue
        svg = con.execute("SELECT relattn_svg_profile(w.distance, w.weight, "
                          "'layer ' || w.layer || ' head ' || w.head, ?) "
                          "FROM relattn_attention_weights(?, ?) AS w", (max(1, row[0]), name, tokens)).fetchone()[0]
        p = outdir / f"experiments_profile_{name}.svg"
        p.write_text(svg)
        written.append(p)
    con.close()
    return written


def tables(res):
    """The results as Markdown tables (docs/experiments.md quotes them)."""
    q = lambda sql, args=(): res.execute(sql, args).fetchall()
    out = ["| run | clip k | rel_v | data | steps | 64 B | 256 B | 1024 B | 4096 B | params | train s | tokens/s | relative/plain |",
           "| --- | ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in q("SELECT name, clip, rel_v, data_fraction, steps, bpb_64, bpb_256, bpb_1024, bpb_4096, params, "
               "train_seconds, tokens_per_s, rel_plain FROM runs WHERE status = 'done' "
               "ORDER BY name = 'untrained' DESC, name LIKE '%-seed%', name LIKE '%steps', data_fraction DESC, rel_v DESC, clip, name"):
        out.append(f"| {r[0]} | {r[1]} | {'yes' if r[2] else 'no'} | {r[3]:.0%} | {r[4]} | " +
                   " | ".join(f"{x:.3f}" for x in r[5:9]) + f" | {r[9]:,} | {r[10]:.0f} | {r[11]:,.0f} | {r[12]:.2f} |")
    for suffix in ("-seed2", "-1000steps"):  # the runs repeated with --suffix, beside the originals
        pairs = q("SELECT a.name, a.seed, b.seed, a.steps, b.steps, a.bpb_256, b.bpb_256, a.bpb_4096, b.bpb_4096 "
                  "FROM runs a JOIN runs b ON b.name = a.name || ? AND b.status = 'done' "
                  "WHERE a.status = 'done' ORDER BY a.clip", (suffix,))
        if pairs:
            out += ["", "| run | seeds | steps | 256 B | 4096 B |", "| --- | --- | --- | ---: | ---: |"]
        for r in pairs:
            out.append(f"| {r[0]} | {r[1]}, {r[2]} | {r[3]}, {r[4]} | {r[5]:.3f}, {r[6]:.3f} | {r[7]:.3f}, {r[8]:.3f} |")
    out += ["", "| run | scheme | data | status |", "| --- | --- | ---: | --- |"]
    for r in q("SELECT name, scheme, data_fraction, status FROM runs WHERE status <> 'done' ORDER BY data_fraction DESC, name"):
        out.append(f"| {r[0]} | {r[1]} | {r[2]:.0%} | {r[3]} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=str(HERE / "results.db"))
    ap.add_argument("--work", default=str(HERE / "build"), help="corpus, models and logs (not committed)")
    ap.add_argument("--corpus", default=None,
                    help="a corpus database with train(id, source, body) and heldout(id, source, body) "
                         "(default: the bundled corpus, built into --work)")
    ap.add_argument("--only", default=None, help="comma-separated run names (default: the whole sweep)")
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--warmup", type=int, default=25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--suffix", default="", help="appended to the run names (another seed: --seed 2 --suffix=-seed2)")
    ap.add_argument("--windows", type=int, default=8, help="4096-byte stretches of held-out text per source")
    ap.add_argument("--trainer-heldout", type=float, default=0.002,
                    help="the trainer's own held-out fraction of the training rows (its curve)")
    ap.add_argument("--so", default=str(ROOT / "relattn.so"))
    ap.add_argument("--pictures", default=str(ROOT / "docs" / "img" / "experiments"), help="where the SVG pictures go")
    ap.add_argument("--profiles", default="shaw-k16,shaw-k256", help="models whose distance profile is drawn")
    ap.add_argument("--report", action="store_true", help="only print the tables and draw the pictures, from the results")
    args = ap.parse_args(argv)
    args.work = pathlib.Path(args.work)
    args.work.mkdir(parents=True, exist_ok=True)
    args.models = args.work / "models.db"
    outdir = pathlib.Path(args.pictures)

    res = sqlite3.connect(args.results)
    res.executescript(SCHEMA)
    if args.report:
        for p in pictures(res, outdir):
            log(f"wrote {p}")
        print(tables(res))
        return 0

    args.corpus = pathlib.Path(args.corpus) if args.corpus else build_corpus(args.work / "corpus.db")
    corpus_name = args.corpus.name
    wins = windows(args.corpus, args.windows)
    plan = [("untrained", 16, True, 1.0, 0)] + [(n, k, v, f, args.steps) for n, k, v, f in SHAW + DATA]
    only = set(args.only.split(",")) if args.only else None
    if only:
        unknown = only - {p[0] for p in plan}
        if unknown:
            sys.exit(f"sweep.py: no run named {', '.join(sorted(unknown))} in the sweep")
        plan = [p for p in plan if p[0] in only]
    for scheme, what, f, native in NOT_YET:
        name = f"{scheme}{'' if f == 1 else '-data10'}"
        log(f"{name} ({what}): {NOT_YET_REASON[native]}; skipped")
        record(res, {"name": name, "scheme": scheme, "data_fraction": f,
                     "status": f"{NOT_YET_REASON[native]} ({what})"})
    plan = [(name + args.suffix, *rest) for name, *rest in plan]
    for name, clip, rel_v, fraction, steps in plan:
        old = res.execute("SELECT steps, d_model, layers, seed, corpus FROM runs WHERE name = ? AND status = 'done'",
                          (name,)).fetchone()
        if old == (steps, args.d_model, args.layers, args.seed, corpus_name):
            log(f"{name}: already in {args.results}; skipped")
            continue
        train(args, name, clip, rel_v, fraction, steps)
        bpb, tps, rel_ms, plain_ms, cfg = evaluate(args, name, wins)
        t = cfg["training"]
        record(res, {"name": name, "scheme": "shaw", "clip": clip, "rel_v": int(rel_v), "data_fraction": fraction,
                     "status": "done", "steps": t["steps"], "d_model": cfg["d_model"], "layers": cfg["n_layers"],
                     "heads": cfg["n_heads"], "seq_len": t["settings"]["seq_len"], "seed": t["seed"],
                     "params": t["params"], "train_rows": t["rows"]["train"], "train_bytes": t["bytes"]["train"],
                     "bytes_seen": round(t["epochs"] * t["bytes"]["train"]), "train_seconds": t["seconds"],
                     "threads": t["threads"], "bpb_64": bpb[64], "bpb_256": bpb[256], "bpb_1024": bpb[1024],
                     "bpb_4096": bpb[4096], "eval_bytes": sum(len(b) for n, _, b in wins if n == 64),
                     "tokens_per_s": tps, "rel_ms": rel_ms, "plain_ms": plain_ms, "rel_plain": rel_ms / plain_ms,
                     "config": json.dumps(cfg, separators=(",", ":")), "corpus": corpus_name,
                     "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        log(f"{name}: bits/byte " + ", ".join(f"{n}: {bpb[n]:.3f}" for n in LENGTHS) +
            f"; {t['seconds']:.0f} s training, {tps:.0f} tokens/s, relative/plain {rel_ms / plain_ms:.2f}")
    for p in pictures(res, outdir) + profiles(args, res, [n for n in args.profiles.split(",") if n], outdir):
        log(f"wrote {p}")
    res.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
