"""relattn_svg_attention, relattn_svg_surprise and relattn_svg_profile: the SVG
parses (Python's XML parser), has the expected elements in the expected
numbers, escapes hostile text, and shows the values of relattn_attention_weights
and relattn_logprobs: a cell's title gives its weight to 4 decimals and its fill
is the documented colour of that weight (within 1 per channel). Errors are
asserted with their exact text. The browser test is test_svg_browser.py."""
import math
import os
import pathlib
import re
import sqlite3
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
import modelgen  # noqa: E402
import svgcheck as sc  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "tiny.safetensors"
LETTERS = "abcdefghijklmnopqrstuvwxyz      ,.;:ETAOIN'"


@pytest.fixture
def tiny(db):
    db.execute("SELECT relattn_import('tiny', ?)", (MODEL.read_bytes(),))
    return db


def random_text(rng, n):
    return "".join(LETTERS[i] for i in rng.integers(0, len(LETTERS), n))


def label(ch):
    return "\u2423" if ch == " " else ch


def weights(db, text, layer, head):
    rows = db.execute("SELECT qpos, kpos, weight FROM relattn_attention_weights('tiny', ?) "
                      "WHERE layer = ? AND head = ?", (text, layer, head)).fetchall()
    n = max(q for q, _, _ in rows) + 1
    w = np.zeros((n, n))
    for q, k, x in rows:
        w[q, k] = x
    return w


def test_map_cells_are_the_attention_weights(tiny, rng):
    text = random_text(rng, int(rng.integers(20, 50)))
    layer, head = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    (svg,) = tiny.execute("SELECT relattn_svg_attention('tiny', ?, ?, ?)",
                          (text, layer, head)).fetchone()
    root = sc.parse(svg)
    w = weights(tiny, text, layer, head)
    n = len(text) + 1  # bos first
    cells = [r for r in sc.group(root, "cells") if sc.title_of(r)]
    assert len(cells) == n * (n + 1) // 2  # causal: keys up to the query
    seen = set()
    for r in cells:
        q, k, d, x = re.fullmatch(r"query (\d+), key (\d+), distance (-?\d+): ([0-9.]+)",
                                  sc.title_of(r)).groups()
        q, k, d, x = int(q), int(k), int(d), float(x)
        assert k <= q and d == k - q and (q, k) not in seen
        seen.add((q, k))
        assert abs(x - w[q, k]) <= 0.00005 + 1e-7, (q, k, x, w[q, k])
        assert sc.close_rgb(sc.hex_rgb(r.get("fill")), sc.weight_rgb(w[q, k])), (q, k)
        cell = float(r.get("width"))
        assert float(r.get("height")) == cell
    # the tokens on both axes, bos first, spaces shown as U+2423
    want = ["<bos>"] + [label(c) for c in text]
    assert [t.text for t in sc.group(root, "ylabels")] == want
    assert [t.text for t in sc.group(root, "xlabels")] == want
    assert "layer %d, head %d" % (layer, head) in root.find(sc.NS + "title").text


def test_map_band_lies_between_distance_k_minus_1_and_k(tiny, rng):
    clip = 16
    text = random_text(rng, 40)
    root = sc.parse(tiny.execute("SELECT relattn_svg_attention('tiny', ?, 0, 0)",
                                 (text,)).fetchone()[0])
    cells = list(sc.group(root, "cells"))
    ground = cells[0]
    x0, y0 = float(ground.get("x")), float(ground.get("y"))
    cell = float(cells[1].get("width"))
    lines = list(sc.group(root, "band"))
    assert len(lines) == 1  # a decoder: only the band's lower edge is unmasked
    ln = lines[0]
    for x, y in ((ln.get("x1"), ln.get("y1")), (ln.get("x2"), ln.get("y2"))):
        key, query = (float(x) - x0) / cell, (float(y) - y0) / cell
        assert abs((key - query) - (-clip + 0.5)) < 0.01
    # the legend says so
    legend = " ".join(t.text for t in sc.group(root, "legend").iter(sc.NS + "text"))
    assert "|key - query| < 16 inside" in legend


def test_map_of_a_long_text_is_pooled_into_bins(tiny, rng):
    text = random_text(rng, 700)
    (svg,) = tiny.execute("SELECT relattn_svg_attention('tiny', ?, 1, 2)", (text,)).fetchone()
    assert len(svg.encode()) < 2 << 20
    root = sc.parse(svg)
    n, per = 701, 6
    bins = (n + per - 1) // per
    cells = [r for r in sc.group(root, "cells") if sc.title_of(r)]
    assert len(cells) == bins * (bins + 1) // 2
    w = weights(tiny, text, 1, 2)
    for r in cells[:: max(1, len(cells) // 300)]:
        qa, qb, ka, kb, x = re.fullmatch(r"queries (\d+)-(\d+), keys (\d+)-(\d+): ([0-9.]+)",
                                         sc.title_of(r)).groups()
        qa, qb, ka, kb, x = int(qa), int(qb), int(ka), int(kb), float(x)
        assert qa % per == 0 and ka % per == 0 and qb == min(qa + per, n) - 1
        mass = w[qa:qb + 1, ka:kb + 1].sum(axis=1).mean()
        assert abs(x - mass) <= 0.00005 + 1e-6
        assert sc.close_rgb(sc.hex_rgb(r.get("fill")), sc.weight_rgb(mass))
    note = root.find(f".//{sc.NS}text[@id='note']").text
    assert note.startswith("701 positions in all, pooled in bins of 6")
    # ticks instead of every token
    assert [t.text for t in sc.group(root, "ylabels")][:2] == ["0", "50"]


def hostile_ids():
    # controls, DEL, C1 and stray bytes, XML specials, ']]>', a bidi override
    # (U+202E), a lone surrogate's bytes, an overlong '/', and valid é
    return (list(range(0, 32)) + [127, 128, 159, 255, ord("<"), ord("&"), ord('"'),
            ord("'"), ord("\\"), 93, 93, 62, 0xE2, 0x80, 0xAE, 0xED, 0xA0, 0x80, 0xC0,
            0xAF, 0xC3, 0xA9, ord("x")])


def test_hostile_token_text_is_escaped(tiny):
    ids = hostile_ids()
    blob = np.asarray(ids, "<i4").tobytes()
    for sql in ("SELECT relattn_svg_attention('tiny', ?, 0, 0)",
                "SELECT relattn_svg_surprise('tiny', ?)"):
        (svg,) = tiny.execute(sql, (blob,)).fetchone()
        root = sc.parse(svg)  # well-formed, no control characters
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", svg)
        assert "]]>" not in svg
    # the map's labels say what each byte is
    (svg,) = tiny.execute("SELECT relattn_svg_attention('tiny', ?, 0, 0)", (blob,)).fetchone()
    labels = [t.text for t in sc.group(sc.parse(svg), "ylabels")]
    want = (["<bos>"] + ["\\x%02X" % i for i in range(32)] + ["\\x7F", "\\x80", "\\x9F",
            "\\xFF", "<", "&", '"', "'", "\\\\", "]", "]", ">", "\\xE2", "\\x80", "\\xAE",
            "\\xED", "\\xA0", "\\x80", "\\xC0", "\\xAF", "\\xC3", "\\xA9", "x"])
    assert labels == want
    # in the strip, é (two byte tokens) is one label over two boxes
    (svg,) = tiny.execute("SELECT relattn_svg_surprise('tiny', ?)", (blob,)).fetchone()
    g = sc.group(sc.parse(svg), "tokens")
    texts = [t.text for t in g.iter(sc.NS + "text")]
    assert "\u00e9" in texts and texts.count("\\xA0") == 1 and "\\x00" in texts
    assert len([r for r in g.iter(sc.NS + "rect")]) == len(ids)


def test_surprise_shades_the_logprobs(tiny, rng):
    text = random_text(rng, 80) + " caf\u00e9"
    (svg,) = tiny.execute("SELECT relattn_svg_surprise('tiny', ?)", (text,)).fetchone()
    root = sc.parse(svg)
    rows = tiny.execute("SELECT pos, logprob, top_token, top_logprob "
                        "FROM relattn_logprobs('tiny', ?) ORDER BY pos", (text,)).fetchall()
    raw = text.encode()
    rects = list(sc.group(root, "tokens").iter(sc.NS + "rect"))
    assert len(rects) == len(raw) == len(rows)
    total = 0
    for r, (pos, lp, top, top_lp) in zip(rects, rows):
        bits, top_bits = -lp / math.log(2), -top_lp / math.log(2)
        total += bits
        m = re.fullmatch(r"token (\d+) \u201c(.*)\u201d: ([0-9.]+) bits; the model expected "
                         r"\u201c(.*)\u201d \(([0-9.]+) bits\)", sc.title_of(r), re.S)
        assert m, sc.title_of(r)
        assert int(m.group(1)) == pos
        assert abs(float(m.group(3)) - bits) <= 0.005 + 1e-6
        assert abs(float(m.group(5)) - top_bits) <= 0.005 + 1e-6
        if top < 128:
            assert m.group(4) == (label(chr(top)) if top >= 32 and top != 127
                                  else "\\x%02X" % top)
        assert sc.close_rgb(sc.hex_rgb(r.get("fill")), sc.bits_rgb(bits)), (pos, bits)
    legend = " ".join(t.text for t in sc.group(root, "legend").iter(sc.NS + "text"))
    assert "mean %.2f bits over %d scored tokens" % (total / len(rows), len(rows)) in legend
    assert "16+" in legend and "not scored" not in legend
    # the text, word by word (spaces have no label)
    shown = "".join(t.text for t in sc.group(root, "tokens").iter(sc.NS + "text"))
    assert shown == text.replace(" ", "")


def test_surprise_without_bos_leaves_the_first_token_unscored(db, rng):
    cfg = modelgen.config(bos=None)
    modelgen.load(db, "m", cfg, rng)
    (svg,) = db.execute("SELECT relattn_svg_surprise('m', 'hello')").fetchone()
    root = sc.parse(svg)
    rects = list(sc.group(root, "tokens").iter(sc.NS + "rect"))
    assert len(rects) == 5
    assert sc.title_of(rects[0]) == "token 0 \u201ch\u201d: not scored (no token before it)"
    assert rects[0].get("fill") == "#dddddd"
    lps = [r[0] for r in db.execute("SELECT logprob FROM relattn_logprobs('m', 'hello') "
                                    "ORDER BY pos")]
    for r, lp in zip(rects[1:], lps):
        assert sc.close_rgb(sc.hex_rgb(r.get("fill")), sc.bits_rgb(-lp / math.log(2)))
    legend = " ".join(t.text for t in sc.group(root, "legend").iter(sc.NS + "text"))
    assert "not scored" in legend and "over 4 scored tokens" in legend


def test_profile_is_the_mean_weight_by_distance_over_a_corpus(tiny, rng):
    tiny.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    for _ in range(3):
        tiny.execute("INSERT INTO docs(body) VALUES (?)",
                     (random_text(rng, int(rng.integers(40, 90))),))
    (svg,) = tiny.execute(
        "SELECT relattn_svg_profile(w.distance, w.weight, 'head ' || w.head, 16) "
        "FROM docs, relattn_attention_weights('tiny', docs.body) AS w "
        "WHERE w.layer = 0").fetchone()
    root = sc.parse(svg)
    panels = [g for g in sc.group(root, "panels") if g.get("class") == "panel"]
    assert [p.find(sc.NS + "text").text for p in panels] == ["head %d" % h for h in range(4)]
    ref = {}
    for head, d, mean, count in tiny.execute(
            "SELECT w.head, CASE WHEN w.distance < -48 THEN -49 ELSE w.distance END AS d, "
            "avg(w.weight), count(*) FROM docs, relattn_attention_weights('tiny', docs.body) AS w "
            "WHERE w.layer = 0 GROUP BY 1, 2"):
        ref[head, d] = (mean, count)
    for h, p in enumerate(panels):
        bars = list(p.find(f"{sc.NS}g[@class='bars']"))
        assert len(bars) == len([k for k in ref if k[0] == h])
        for r in bars:
            m = re.fullmatch(r"(?:distance (-?\d+)|distances < -48 \(pooled\)): mean weight "
                             r"([0-9.]+) over (\d+) pairs", sc.title_of(r))
            d = int(m.group(1)) if m.group(1) else -49
            mean, count = ref[h, d]
            assert abs(float(m.group(2)) - mean) <= 0.00005 + 1e-7 and int(m.group(3)) == count
        # the band: distances -15..0 shaded, its edge dashed between -16 and -15
        assert len(p.findall(f"{sc.NS}rect[@class='band']")) == 1
        assert len(p.findall(f"{sc.NS}line[@class='edge']")) == 1
    # bar heights: proportional to the means, on one axis for every panel
    heights = {}
    for h, p in enumerate(panels):
        for r in p.find(f"{sc.NS}g[@class='bars']"):
            d = re.match(r"distance (-?\d+)", sc.title_of(r))
            if d:
                heights[h, int(d.group(1))] = float(r.get("height"))
    (h, d), top = max(heights.items(), key=lambda kv: kv[1])
    for (h2, d2), hh in heights.items():
        assert abs(hh / top - ref[h2, d2][0] / ref[h, d][0]) < 0.01


def test_profile_with_one_series_and_no_clip(db):
    db.execute("CREATE TABLE r(d INTEGER, w REAL)")
    db.executemany("INSERT INTO r VALUES (?, ?)",
                   [(d, 0.5 / (1 + abs(d))) for d in range(-40, 41)] + [(None, 1.0), (3, None)])
    (svg,) = db.execute("SELECT relattn_svg_profile(d, w) FROM r").fetchone()
    root = sc.parse(svg)
    titles = [sc.title_of(r) for r in root.iter(sc.NS + "rect") if sc.title_of(r)]
    # no clip: distances -32..32 and one pooled bar each side; NULLs skipped
    assert len(titles) == 65 + 2
    assert "distance 0: mean weight 0.5000 over 1 pairs" in titles
    assert "distances > 32 (pooled): mean weight %.4f over 8 pairs" % (
        np.mean([0.5 / (1 + d) for d in range(33, 41)])) in titles
    assert root.find(f".//{sc.NS}rect[@class='band']") is None
    assert db.execute("SELECT relattn_svg_profile(d, w) FROM r WHERE 0").fetchone() == (None,)


def err(db, sql, args=()):
    with pytest.raises(sqlite3.Error) as e:
        db.execute(sql, args).fetchall()
    return str(e.value)


def test_errors_name_the_function_and_argument(tiny):
    f = "SELECT relattn_svg_attention(?, ?, ?, ?)"
    assert err(tiny, f, ("tiny", "abc", 4, 0)) == \
        "relattn_svg_attention: layer must be in [0, 4), not 4"
    assert err(tiny, f, ("tiny", "abc", 0, -1)) == \
        "relattn_svg_attention: head must be in [0, 4), not -1"
    assert err(tiny, f, ("tiny", "abc", "0", 0)) == \
        "relattn_svg_attention: layer must be an integer"
    assert err(tiny, f, ("tiny", "abc", 0, 1.5)) == \
        "relattn_svg_attention: head must be an integer"
    assert err(tiny, f, ("nope", "abc", 0, 0)) == "relattn_svg_attention: no model named 'nope'"
    assert err(tiny, f, ("tiny", "", 0, 0)) == "relattn_svg_attention: tokens is empty"
    assert err(tiny, f, ("tiny", b"abc", 0, 0)) == (
        "relattn_svg_attention: tokens has 3 bytes, not a multiple of 4; if the "
        "BLOB holds text, pass CAST(... AS TEXT) to tokenize it")
    assert tiny.execute(f, ("tiny", None, 0, 0)).fetchone() == (None,)
    assert tiny.execute("SELECT relattn_svg_surprise('tiny', NULL)").fetchone() == (None,)
    assert err(tiny, "SELECT relattn_svg_surprise('tiny', ?)", ("x" * 4097,)) == \
        "relattn_svg_surprise: tokens has 4097 tokens, over the 4096 one picture shows " \
        "(draw a part of it)"
    assert err(tiny, "SELECT relattn_svg_surprise(1, 'x')") == \
        "relattn_svg_surprise: model must be a model name (TEXT)"
    p = "SELECT relattn_svg_profile(?, ?, 'a', ?) FROM (SELECT 1 UNION ALL SELECT 2)"
    assert err(tiny, p, ("x", 0.5, 16)) == "relattn_svg_profile: distance must be an integer"
    assert err(tiny, p, (1, "x", 16)) == "relattn_svg_profile: weight must be a number"
    assert err(tiny, "SELECT relattn_svg_profile(1, 1e999)") == \
        "relattn_svg_profile: weight must be finite"
    assert err(tiny, p, (1, 0.5, -1)) == \
        "relattn_svg_profile: clip must be an integer from 0 to 1000000"
    assert err(tiny, "SELECT relattn_svg_profile(1, 0.5, 'a', value) FROM json_each('[4,5]')") \
        == "relattn_svg_profile: clip must be the same in every row"
    assert err(tiny, "SELECT relattn_svg_profile(0, 0.5, value) FROM json_each(?)",
               (str(list(range(65))),)) == \
        "relattn_svg_profile: series has more than 64 distinct values"


def test_encoder_has_a_map_but_no_surprise(db, rng):
    cfg = modelgen.config(arch="encoder", clip=2)
    modelgen.load(db, "enc", cfg, rng)
    assert err(db, "SELECT relattn_svg_surprise('enc', 'abc')") == \
        "relattn_svg_surprise: model 'enc' is an encoder; only decoder models give " \
        "next-token probabilities"
    (svg,) = db.execute("SELECT relattn_svg_attention('enc', 'abcdefgh', 1, 1)").fetchone()
    root = sc.parse(svg)
    n = 9
    assert len([r for r in sc.group(root, "cells") if sc.title_of(r)]) == n * n
    assert len(list(sc.group(root, "band"))) == 2  # both edges: nothing is masked


def test_a_65536_token_map_is_refused_before_anything_is_allocated(tiny):
    # 65536 tokens + bos: the map alone would be 65537^2 floats (16 GiB)
    msg = err(tiny, "SELECT relattn_svg_attention('tiny', ?, 0, 0)", ("a" * 65536,))
    m = re.fullmatch(r"relattn_svg_attention: needs (\d+) bytes, over the limit of "
                     r"2147483648 per call \(relattn_max_memory\)", msg)
    assert m and int(m.group(1)) > 4 * 65537 ** 2
    tiny.execute("SELECT relattn_max_memory(1048576)")
    msg = err(tiny, "SELECT relattn_svg_attention('tiny', ?, 0, 0)", ("a" * 300,))
    assert re.fullmatch(r"relattn_svg_attention: needs \d+ bytes, over the limit of 1048576 "
                        r"per call \(relattn_max_memory\)", msg)
