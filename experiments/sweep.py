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

The plan (PLAN below) is every run in the committed results, each with its steps and seed: the
Shaw sweep at 250 steps (clip k, with and without rel_v, two seeds for some), and at 1000 steps
some of those k, the position schemes at their usual settings (learned absolute positions, none,
T5, ALiBi, RoPE, Transformer-XL) and 10% against 100% of the training text for Shaw k 16 and 64,
Transformer-XL and absolute positions.
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

# The schemes at their usual settings: the trainer's options (models/train_corpus.py --position).
# absolute: a learned row for each position up to bos + 4096 bytes (the longest window; rows past
# the training length are never trained); xl: clip 4095, no distance of a 4096-byte window clipped.
SCHEMES = {
    "absolute": {"position": "absolute", "max_len": 4097}, "none": {"position": "none"},
    "t5": {"position": "t5", "num_buckets": 32, "max_distance": 128}, "alibi": {"position": "alibi"},
    "rope": {"position": "rope", "rotary": "half", "base": 10000}, "xl": {"position": "xl", "clip": 4095},
}


def shaw(k, values=True):
    return {"position": "shaw", "clip": k, "values": values}


def plan_runs():
    """Every run: (name, trainer options, data fraction, steps, warm-up, seed), in the order run."""
    short, long = (250, 25), (1000, 100)
    runs = [("untrained", shaw(16), 1.0, 0, 0, 1)]
    runs += [(f"shaw-k{k}{'' if v else '-nov'}", shaw(k, v), 1.0, *short, 1)
             for k in (0, 2, 8, 16, 64, 256) for v in (True, False)]
    runs += [(f"shaw-k{k}-data10", shaw(k), 0.1, *short, 1) for k in (16, 64)]
    runs += [(f"shaw-k{k}-seed2", shaw(k), 1.0, *short, 2) for k in (0, 2, 16, 64, 256)]
    runs += [(f"shaw-k{k}-1000steps", shaw(k), 1.0, *long, 1) for k in (0, 2, 16, 256)]
    runs += [(f"{name}-1000steps", opts, 1.0, *long, 1) for name, opts in SCHEMES.items()]
    runs += [("shaw-k64-1000steps", shaw(64), 1.0, *long, 1)]
    runs += [(f"{name}-data10-1000steps", opts, 0.1, *long, 1)
             for name, opts in (("shaw-k16", shaw(16)), ("shaw-k64", shaw(64)), ("xl", SCHEMES["xl"]),
                                ("absolute", SCHEMES["absolute"]))]
    runs += [("shaw-k16-1000steps-seed2", shaw(16), 1.0, *long, 2),
             ("xl-1000steps-seed2", SCHEMES["xl"], 1.0, *long, 2)]
    return runs


def trainer_options(opts):
    out = []
    for k, v in opts.items():
        if k == "values":
            out.append("--values" if v else "--no-values")
        else:
            out += ["--" + k.replace("_", "-"), str(v)]
    return out

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


def train_query(fraction):
    if fraction < 1:
        return f"SELECT body FROM train WHERE id % {round(1 / fraction)} = 0 ORDER BY id"
    return "SELECT body FROM train ORDER BY id"


def train(args, name, opts, fraction, steps, warmup, seed):
    query = train_query(fraction)
    out = args.work / f"{name}.safetensors"
    cmd = [sys.executable, str(ROOT / "models" / "train_corpus.py"), "--db", str(args.corpus),
           "--query", query, "--heldout", str(args.trainer_heldout),
           "--layers", str(args.layers), "--d-model", str(args.d_model), "--heads", str(args.heads),
           *trainer_options(opts),
           "--steps", str(steps), "--seq-len", "256", "--batch-tokens", str(args.batch_tokens),
           "--warmup", str(warmup), "--eval-every", str(max(1, steps)), "--seed", str(seed),
           "--threads", "1", "--fresh", "--out", str(out), "--name", name, "--into", str(args.models),
           "--so", args.so, "--log-every", str(max(1, steps // 4))]
    log(f"{name}: training ({steps} steps)")
    r = subprocess.run(cmd, capture_output=True, text=True)
    (args.work / f"{name}.log").write_text(r.stdout + r.stderr)
    if r.returncode:
        sys.exit(f"sweep.py: training {name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    for f in (out, pathlib.Path(str(out) + ".curve.svg")):
        f.unlink(missing_ok=True)


def trained(args, name, opts, fraction, steps, seed):
    """Whether models.db holds this run's model, trained with these settings (a sweep stopped
    between training and recording)."""
    if not args.models.exists():
        return False
    con = sqlite3.connect(args.models)
    try:
        row = con.execute("SELECT config FROM relattn_model WHERE name = ?", (name,)).fetchone()
    except sqlite3.OperationalError:
        return False
    finally:
        con.close()
    if not row:
        return False
    cfg = json.loads(row[0])
    t = cfg.get("training", {})
    want = {"--" + k.replace("_", "-"): v for k, v in opts.items() if k != "position"}
    pos = cfg["position"]
    return (pos["type"] == opts["position"] and all(pos.get(k[2:].replace("-", "_")) == v for k, v in want.items())
            and (t.get("steps"), t.get("seed"), cfg["d_model"], cfg["n_layers"], cfg["n_heads"]) ==
            (steps, seed, args.d_model, args.layers, args.heads)
            and t.get("query") == train_query(fraction) and t.get("db") == args.corpus.name)


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


def xl_table(wr, d_model, heads, c):
    """A Transformer-XL layer's relative table as relattn_attention takes it (per head): row
    delta + c of head h is W_r sinusoid(-delta), head h's slice; float32 (src/schemes.c's)."""
    import numpy as np
    pos = -np.arange(-c, c + 1, dtype=np.float64)
    inv = 1.0 / 10000.0 ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    a = np.outer(pos, inv)
    pe = np.concatenate([np.sin(a), np.cos(a)], -1).astype(np.float32)
    w = np.frombuffer(wr, "<f4").reshape(d_model, d_model)
    r = pe @ w.T
    return np.ascontiguousarray(r.reshape(2 * c + 1, heads, d_model // heads).transpose(1, 0, 2), "<f4").tobytes()


def attention_call(con, name, cfg, n):
    """The model's layer-0 position terms as one relattn_attention call at n positions: (rel_k,
    rel_v, options' position, the arguments after options)."""
    pos = dict(cfg["position"])
    kind = pos["type"]
    w = lambda t: con.execute("SELECT relattn_weights(?, ?)", (name, t)).fetchone()[0]
    if kind == "shaw":
        return (w("layers.0.attn.rel_k"), w("layers.0.attn.rel_v") if pos["values"] else None,
                {"type": "shaw"}, [])
    if kind in ("none", "absolute"):  # absolute: the positions are in the input, attention is plain
        return None, None, {"type": "none"}, []
    if kind == "t5":
        return None, None, pos, [w("rel_bias")]
    if kind == "xl":
        c = min(pos["clip"], n - 1)
        return (xl_table(w("layers.0.attn.wr"), cfg["d_model"], cfg["n_heads"], c), None,
                {"type": "xl"}, [w("layers.0.attn.u"), w("layers.0.attn.w")])
    return None, None, pos, []  # alibi, rope: no tensor


def attention_times(con, name, cfg, n=1024, rounds=9):
    """Milliseconds of one causal relattn_attention call at n positions with the model's layer-0
    position terms, and of the same call with plain attention; medians of interleaved rounds."""
    h, dh = cfg["n_heads"], cfg["d_model"] // cfg["n_heads"]
    rng = random.Random(7)
    q, k, v = (struct.pack(f"<{n * h * dh}f", *(rng.gauss(0, 1) for _ in range(n * h * dh))) for _ in range(3))
    rk, rv, position, extra = attention_call(con, name, cfg, n)
    rel = json.dumps({"heads": h, "d_head": dh, "causal": True, "position": position,
                      **({"per_head": True} if position["type"] == "xl" else {})})
    plain = json.dumps({"heads": h, "d_head": dh, "causal": True, "position": {"type": "none"}})
    sql_rel = f"SELECT length(relattn_attention(?, ?, ?, ?, ?, ?{', ?' * len(extra)}))"
    sql = "SELECT length(relattn_attention(?, ?, ?, ?, ?, ?))"
    times = {"rel": [], "plain": []}
    for _ in range(rounds):
        for kind, stmt, params in (("rel", sql_rel, (q, k, v, rk, rv, rel, *extra)),
                                   ("plain", sql, (q, k, v, None, None, plain))):
            t = time.perf_counter()
            con.execute(stmt, params).fetchone()
            times[kind].append(1000 * (time.perf_counter() - t))
    return statistics.median(times["rel"]), statistics.median(times["plain"])


# ---------------------------------------------------------------------------------------------
# Results and pictures


def record(path, row):
    """One run's row, in a connection of its own: the file may have been replaced (a checkout)
    while the run trained."""
    res = sqlite3.connect(path)
    cols = ", ".join(row)
    with res:
        res.execute(f"INSERT OR REPLACE INTO runs({cols}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    res.close()


def nice_ticks(lo, hi, n=8):
    """At most n + 1 ticks between lo and hi at round values: the multiples of a step of 1, 2, 2.5
    or 5 x 10^k, the smallest such step at least (hi - lo) / n. Returns (ticks, decimals): the
    step's own decimals (0.25 has two, 0.5 one, 20 none), enough to write every tick exactly."""
    if not hi > lo:
        lo, hi = lo - 0.5, hi + 0.5
    raw = (hi - lo) / n
    exp = math.floor(math.log10(raw))
    step, mult, e = None, None, exp
    for e in (exp, exp + 1):
        for m in (1, 2, 2.5, 5):
            if m * 10.0 ** e >= raw * (1 - 1e-9):
                mult, step = m, m * 10.0 ** e
                break
        if step:
            break
    decimals = max(0, -e + (1 if mult == 2.5 else 0))
    first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return [round(i * step, decimals + 1) for i in range(first, last + 1)], decimals


def text_width(s, size=12):
    """A generous width of s in DejaVu Sans (what sans-serif is on Debian) at size px: the legend
    is sized from it, so a long label never runs off the picture."""
    em = lambda c: 0.34 if c in " ,.:;'|!ijlft()[]" else 0.98 if c in "mwMW%" else 0.76 if c.isupper() else 0.65
    return sum(em(c) for c in str(s)) * size


def svg_lines(title, xlabel, series, xs, logx=True, plot_w=410, plot_h=290):
    """A line chart: series is [(label, colour, dash, [y or None per x])]. The y axis has round
    ticks (nice_ticks); the legend, right of the plot, is as wide and the picture as tall as
    its labels need."""
    L, T, B = 60, 40, 50
    R = 10 + 30 + 6 + math.ceil(max([text_width(label) for label, _, _, _ in series] or [0])) + 12
    W = L + plot_w + R
    H = max(T + plot_h + B, T + 16 * len(series) + 8)
    ys = [y for _, _, _, vals in series for y in vals if y is not None]
    if not ys:
        ys = [0, 1]
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.08 or 0.1
    y0, y1 = y0 - pad, y1 + pad
    ticks, decimals = nice_ticks(y0, y1)
    fx = (lambda x: math.log2(x + 1)) if logx else (lambda x: x)
    x0, x1 = fx(min(xs)), fx(max(xs))
    sx = lambda x: L + plot_w * (fx(x) - x0) / ((x1 - x0) or 1)
    sy = lambda y: T + plot_h - plot_h * (y - y0) / (y1 - y0)
    esc = lambda s: str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="12">', f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{esc(title)}</text>',
           f'<path d="M{L},{T} V{T + plot_h} H{L + plot_w}" fill="none" stroke="black"/>',
           f'<text x="{L + plot_w / 2}" y="{T + plot_h + B - 12}" text-anchor="middle">{esc(xlabel)}</text>',
           f'<text x="16" y="{T + plot_h / 2}" text-anchor="middle" '
           f'transform="rotate(-90 16 {T + plot_h / 2})">held-out bits per byte</text>']
    for x in xs:
        out.append(f'<text x="{sx(x):.1f}" y="{T + plot_h + 16}" text-anchor="middle">{x}</text>')
    for y in ticks:
        out.append(f'<text x="{L - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.{decimals}f}</text>')
        out.append(f'<line x1="{L}" x2="{L + plot_w}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#ddd"/>')
    legend = ['<g id="legend">']
    for j, (label, colour, dash, vals) in enumerate(series):
        pts = [(sx(x), sy(y)) for x, y in zip(xs, vals) if y is not None]
        if len(pts) > 1:
            out.append(f'<polyline points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" fill="none" '
                       f'stroke="{colour}" stroke-width="2"{f" stroke-dasharray={chr(34)}{dash}{chr(34)}" if dash else ""}/>')
        for a, b in pts:
            out.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{colour}"/>')
        ly = T + 8 + 16 * j
        legend.append(f'<line x1="{L + plot_w + 10}" x2="{L + plot_w + 40}" y1="{ly}" y2="{ly}" stroke="{colour}" '
                      f'stroke-width="2"{f" stroke-dasharray={chr(34)}{dash}{chr(34)}" if dash else ""}/>')
        legend.append(f'<text x="{L + plot_w + 46}" y="{ly + 4}">{esc(label)}</text>')
    out += legend + ["</g>", "</svg>"]
    return "\n".join(out) + "\n"


COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#000000", "#aec7e8"]


def settings(cfg):
    """A run's position settings, from its config: 'clip 16, values true', 'rotary half, base 10000.0'."""
    pos = json.loads(cfg)["position"]
    show = lambda v: v if isinstance(v, str) else json.dumps(v)
    return ", ".join(f"{k} {show(v)}" for k, v in pos.items() if k not in ("type", "per_head")) or "-"


def pictures(res, outdir):
    """From the results table: bits/byte vs Shaw's clip k (one line per evaluation length and step
    count); vs the evaluation length, one line per scheme (the longest runs, all the data); and
    vs the data fraction, learned against fixed (the runs made at both 10% and 100%)."""
    outdir.mkdir(parents=True, exist_ok=True)
    q = lambda sql, args=(): res.execute(sql, args).fetchall()
    written = []
    rows = q("SELECT steps, clip, bpb_64, bpb_256, bpb_1024, bpb_4096 FROM runs WHERE status = 'done' "
             "AND scheme = 'shaw' AND rel_v = 1 AND data_fraction = 1 AND seed = 1 AND steps > 0 ORDER BY clip")
    ks = sorted({r[1] for r in rows})
    if ks:
        get = {(r[0], r[1]): r[2:] for r in rows}
        steps = sorted({r[0] for r in rows}, reverse=True)
        series = [(f"{n} bytes, {s} steps", COLOURS[i], None if j == 0 else "5,4",
                   [get[(s, k)][i] if (s, k) in get else None for k in ks])
                  for j, s in enumerate(steps) for i, n in enumerate(LENGTHS)]
        p = outdir / "experiments_bpb_vs_k.svg"
        p.write_text(svg_lines("Shaw clip k: held-out bits per byte (trained at 256)", "clip k (log scale)",
                               series, ks))
        written.append(p)
    top = q("SELECT max(steps) FROM runs WHERE status = 'done' AND data_fraction = 1 AND seed = 1")[0][0]
    rows = q("SELECT name, bpb_64, bpb_256, bpb_1024, bpb_4096 FROM runs WHERE status = 'done' AND steps = ? "
             "AND data_fraction = 1 AND seed = 1 AND (rel_v IS NULL OR rel_v = 1) "
             "ORDER BY scheme <> 'shaw', scheme, clip", (top,))
    if rows:
        series = [(r[0], COLOURS[i % len(COLOURS)], "5,4" if i >= len(COLOURS) else None, list(r[1:]))
                  for i, r in enumerate(rows)]
        p = outdir / "experiments_bpb_vs_length.svg"
        p.write_text(svg_lines(f"Length generalization: trained on 256-byte sequences, {top} steps",
                               "evaluation window, bytes (log scale)", series, list(LENGTHS)))
        written.append(p)
    rows = q("SELECT a.name, a.bpb_256, b.bpb_256, a.bpb_4096, b.bpb_4096 FROM runs a JOIN runs b "
             "ON b.status = 'done' AND b.scheme = a.scheme AND b.clip IS a.clip AND b.rel_v IS a.rel_v "
             "AND b.steps = a.steps AND b.seed = a.seed AND b.data_fraction = 1 "
             "WHERE a.status = 'done' AND a.data_fraction < 1 AND a.steps = (SELECT max(steps) FROM runs "
             "WHERE status = 'done' AND data_fraction < 1) ORDER BY a.scheme <> 'shaw', a.scheme, a.clip")
    if rows:
        series = []
        for i, r in enumerate(rows):
            label = r[0].split("-data")[0]
            series.append((f"{label}, 256 bytes", COLOURS[i], None, [r[1], r[2]]))
            series.append((f"{label}, 4096 bytes", COLOURS[i], "5,4", [r[3], r[4]]))
        p = outdir / "experiments_data_fraction.svg"
        p.write_text(svg_lines("Learned vs fixed: 10% and 100% of the training text",
                               "training text, percent (log scale)", series, [10, 100]))
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
    """The results as Markdown tables (docs/experiments.md quotes them): the longest runs, every
    scheme; the shorter runs (Shaw's); each run repeated with a suffix beside its original."""
    q = lambda sql, args=(): res.execute(sql, args).fetchall()
    top = q("SELECT max(steps) FROM runs WHERE status = 'done'")[0][0]
    cols = ("bpb_64, bpb_256, bpb_1024, bpb_4096, params, train_seconds, tokens_per_s, rel_plain")
    tail = lambda r: (" | ".join(f"{x:.3f}" for x in r[:4]) + f" | {r[4]:,} | {r[5]:.0f} | {r[6]:,.0f} | {r[7]:.2f} |")
    out = [f"| run | scheme | settings | data | 64 B | 256 B | 1024 B | 4096 B | params | train s | tokens/s | "
           "relative/plain |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in q(f"SELECT name, scheme, config, data_fraction, {cols} FROM runs WHERE status = 'done' AND steps = ? "
               "ORDER BY data_fraction DESC, scheme <> 'shaw', scheme, clip, name", (top,)):
        out.append(f"| {r[0]} | {r[1]} | {settings(r[2])} | {r[3]:.0%} | " + tail(r[4:]))
    out += ["", "| run | clip k | rel_v | data | steps | 64 B | 256 B | 1024 B | 4096 B | params | train s | tokens/s | "
            "relative/plain |", "| --- | ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in q(f"SELECT name, clip, rel_v, data_fraction, steps, {cols} FROM runs WHERE status = 'done' AND steps < ? "
               "ORDER BY name = 'untrained' DESC, name LIKE '%-seed%', data_fraction DESC, rel_v DESC, clip, name",
               (top,)):
        out.append(f"| {r[0]} | {r[1]} | {'yes' if r[2] else 'no'} | {r[3]:.0%} | {r[4]} | " + tail(r[5:]))
    for suffix in ("-seed2", "-1000steps"):  # the runs repeated with a suffix, beside the originals
        pairs = q("SELECT a.name, a.seed, b.seed, a.steps, b.steps, a.bpb_256, b.bpb_256, a.bpb_4096, b.bpb_4096 "
                  "FROM runs a JOIN runs b ON b.name = a.name || ? AND b.status = 'done' "
                  "WHERE a.status = 'done' ORDER BY a.clip", (suffix,))
        if pairs:
            out += ["", "| run | seeds | steps | 256 B | 4096 B |", "| --- | --- | --- | ---: | ---: |"]
        for r in pairs:
            out.append(f"| {r[0]} | {r[1]}, {r[2]} | {r[3]}, {r[4]} | {r[5]:.3f}, {r[6]:.3f} | {r[7]:.3f}, {r[8]:.3f} |")
    other = q("SELECT name, scheme, data_fraction, status FROM runs WHERE status <> 'done' ORDER BY name")
    if other:
        out += ["", "| run | scheme | data | status |", "| --- | --- | ---: | --- |"]
        out += [f"| {r[0]} | {r[1]} | {r[2]:.0%} | {r[3]} |" for r in other]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=str(HERE / "results.db"),
                    help="the results database, a row per run; a run already in it is skipped "
                         "(default: experiments/results.db)")
    ap.add_argument("--work", default=str(HERE / "build"), help="corpus, models and logs (not committed)")
    ap.add_argument("--corpus", default=None,
                    help="a corpus database with train(id, source, body) and heldout(id, source, body) "
                         "(default: the bundled corpus, built into --work)")
    ap.add_argument("--only", default=None, help="comma-separated run names (default: the whole sweep)")
    ap.add_argument("--steps", type=int, default=None, help="every trained run's steps (default: the plan's)")
    ap.add_argument("--d-model", type=int, default=64, help="every model's width (default: %(default)s)")
    ap.add_argument("--layers", type=int, default=2, help="every model's layers (default: %(default)s)")
    ap.add_argument("--heads", type=int, default=4, help="every model's attention heads (default: %(default)s)")
    ap.add_argument("--batch-tokens", type=int, default=4096, help="tokens in a training batch (default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=None, help="every trained run's warm-up (default: the plan's)")
    ap.add_argument("--seed", type=int, default=None, help="every run's seed (default: the plan's)")
    ap.add_argument("--suffix", default="", help="appended to the run names (another seed: --seed 3 --suffix=-seed3)")
    ap.add_argument("--windows", type=int, default=8, help="4096-byte stretches of held-out text per source")
    ap.add_argument("--trainer-heldout", type=float, default=0.002,
                    help="the trainer's own held-out fraction of the training rows (its curve)")
    ap.add_argument("--so", default=str(ROOT / "relattn.so"),
                    help="the relattn library the runs are scored with (default: relattn.so at the repository root)")
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
    plan = plan_runs()
    only = set(args.only.split(",")) if args.only else None
    if only:
        unknown = only - {p[0] for p in plan}
        if unknown:
            sys.exit(f"sweep.py: no run named {', '.join(sorted(unknown))} in the sweep")
        plan = [p for p in plan if p[0] in only]
    plan = [(name + args.suffix, opts, fraction,
             steps if args.steps is None or not steps else args.steps,
             warmup if args.warmup is None or not steps else args.warmup,
             seed if args.seed is None else args.seed) for name, opts, fraction, steps, warmup, seed in plan]
    for name, opts, fraction, steps, warmup, seed in plan:
        res.close()  # opened again for each run: the file may have been replaced meanwhile (a checkout)
        res = sqlite3.connect(args.results)
        old = res.execute("SELECT steps, d_model, layers, seed, corpus FROM runs WHERE name = ? AND status = 'done'",
                          (name,)).fetchone()
        if old == (steps, args.d_model, args.layers, seed, corpus_name):
            log(f"{name}: already in {args.results}; skipped")
            continue
        if trained(args, name, opts, fraction, steps, seed):
            log(f"{name}: already trained in {args.models}, not in the results; evaluating it")
        else:
            train(args, name, opts, fraction, steps, warmup, seed)
        bpb, tps, rel_ms, plain_ms, cfg = evaluate(args, name, wins)
        t = cfg["training"]
        scheme = opts["position"]
        record(args.results, {"name": name, "scheme": scheme, "clip": opts.get("clip"),
                     "rel_v": int(opts["values"]) if scheme == "shaw" else None, "data_fraction": fraction,
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
    res.close()
    res = sqlite3.connect(args.results)
    for p in pictures(res, outdir) + profiles(args, res, [n for n in args.profiles.split(",") if n], outdir):
        log(f"wrote {p}")
    res.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
