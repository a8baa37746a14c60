"""experiments/sweep.py: its --help gives every option a text; its line charts
have round ticks on the y axis, and every text, the legend included, inside
the picture as Debian's chromium lays the text out, both in what the code
draws and in the committed pictures of docs/img/experiments. The sweep itself runs in tests/sql/test_experiments.py."""
import importlib.util
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "sweep.py"
COMMITTED = sorted((ROOT / "docs" / "img" / "experiments").glob("experiments_bpb_*.svg")) + \
    sorted((ROOT / "docs" / "img" / "experiments").glob("experiments_data_*.svg"))
CHROMIUM = shutil.which("chromium")
NS = "{http://www.w3.org/2000/svg}"

spec = importlib.util.spec_from_file_location("sweep", SCRIPT)
sweep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sweep)

no_browser = bool(os.environ.get("RELATTN_SANITIZED")) or CHROMIUM is None
browser = pytest.mark.skipif(no_browser, reason="chromium is not installed (make deps installs it), "
                             "or the ASan runtime is preloaded (the sanitized run)")


def test_help_gives_every_option_a_text():
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    entries = re.split(r"\n(?=  -)", r.stdout.split("\noptions:\n")[1])
    texts = {}
    for e in entries:
        m = re.match(r"  (-[\w-]+(?:, --[\w-]+)?)(?: [A-Z_]+)?(.*)", e, re.S)
        texts[m[1].split(", ")[-1]] = " ".join(m[2].split())
    # every option the usage line names has an entry
    usage = r.stdout.split("\n\n")[0]
    options = {"--help" if o == "-h" else o for o in re.findall(r"\[(--?[\w-]+)", usage)}
    assert set(texts) == options and len(options) == 19  # --help and 18 of its own
    assert all(len(t) >= 10 for t in texts.values()), {o: t for o, t in texts.items() if len(t) < 10}


def is_round_step(step):
    """step is 1, 2, 2.5 or 5 x 10^k."""
    k = math.floor(math.log10(step))
    return any(math.isclose(step, m * 10.0 ** k, rel_tol=1e-9) for m in (1, 2, 2.5, 5))


def check_ticks(ticks, lo, hi):
    assert 3 <= len(ticks) <= 9, ticks
    assert all(lo - 1e-9 <= t <= hi + 1e-9 for t in ticks), (ticks, lo, hi)
    step = float(f"{ticks[1] - ticks[0]:.9g}")
    assert is_round_step(step), ticks
    for t in ticks:  # each tick a multiple of the step, the next one step on
        assert math.isclose(t / step, round(t / step), abs_tol=1e-6), (t, step)
    assert all(math.isclose(b - a, step, rel_tol=1e-6) for a, b in zip(ticks, ticks[1:]))


@pytest.mark.parametrize("lo, hi", [(2.308, 3.769), (2.409, 3.668), (0.0, 97.0), (3.0, 3.4), (1.2, 1.26),
                                    (-0.37, 0.81), (120.0, 4100.0), (0.0101, 0.0129), (4.2, 4.2001)])
def test_ticks_are_round(lo, hi):
    ticks, decimals = sweep.nice_ticks(lo, hi)
    check_ticks(ticks, lo, hi)
    # written with the step's decimals, every label is its tick exactly, no digit more
    labels = [f"{t:.{decimals}f}" for t in ticks]
    assert all(float(s) == pytest.approx(t, abs=1e-12) for s, t in zip(labels, ticks))
    assert len(set(labels)) == len(labels)
    step = float(f"{ticks[1] - ticks[0]:.9g}")
    assert decimals == 0 or not math.isclose(float(f"{step:.{decimals - 1}f}"), step), (step, decimals)


def test_ticks_of_random_ranges_are_round(rng):
    for _ in range(500):
        scale = 10.0 ** rng.uniform(-4, 5)
        lo = rng.uniform(-2, 2) * scale
        hi = lo + rng.uniform(0.01, 5) * scale
        check_ticks(sweep.nice_ticks(lo, hi)[0], lo, hi)


def y_ticks(svg):
    """The y axis labels of a chart of sweep.svg_lines, as numbers."""
    root = ET.fromstring(svg)
    return [float(t.text) for t in root.iter(NS + "text") if t.get("text-anchor") == "end"]


def text_boxes(tmp_path, svg):
    """Every text element's box in the picture's own units as chromium lays it out, and the
    picture's viewBox: (viewBox, [(text, x0, y0, x1, y1)])."""
    page = tmp_path / "boxes.html"
    page.write_text(
        "<!DOCTYPE html><html><body style='margin:0'>" + svg.split("?>", 1)[-1] +
        "<pre id='out'></pre><script>const s = document.querySelector('svg'), r = s.getBoundingClientRect(),"
        " v = s.viewBox.baseVal, k = v.width / r.width;"
        "document.getElementById('out').textContent = JSON.stringify({vb: [v.x, v.y, v.width, v.height],"
        " boxes: [...s.querySelectorAll('text')].map(t => { const b = t.getBoundingClientRect();"
        " return [t.textContent, (b.left - r.left) * k, (b.top - r.top) * k, (b.right - r.left) * k,"
        " (b.bottom - r.top) * k]; })});</script></body></html>", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium'}",
                        "--window-size=1600,1200", "--dump-dom", page.as_uri()],
                       capture_output=True, text=True, timeout=180, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"<pre id=\"out\">(.*?)</pre>", r.stdout, re.S)
    got = json.loads(m[1].replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    return got["vb"], got["boxes"]


def assert_inside(vb, boxes):
    x, y, w, h = vb
    assert len(boxes) > 5
    out = [b for b in boxes if not (b[1] >= x and b[2] >= y and b[3] <= x + w and b[4] <= y + h)]
    assert not out, (vb, out)


@pytest.mark.parametrize("labels", [["64 bytes, 1000 steps", "4096 bytes, 1000 steps"],
                                    ["shaw-k256-1000steps-data10, 4096 bytes, WWW mmm %%%", "x"],
                                    [f"run {i}, 4096 bytes" for i in range(30)]])
@browser
def test_legend_lies_inside_the_picture(tmp_path, labels):
    series = [(label, sweep.COLOURS[i % len(sweep.COLOURS)], "5,4" if i % 2 else None,
               [3.1 + 0.01 * i, 2.4, None, 2.9 - 0.02 * i]) for i, label in enumerate(labels)]
    svg = sweep.svg_lines("a title", "clip k (log scale)", series, [0, 2, 16, 256])
    vb, boxes = text_boxes(tmp_path, svg)
    assert_inside(vb, boxes)
    legend = [b for b in boxes if b[0] in labels]
    assert sorted(b[0] for b in legend) == sorted(labels)
    check_ticks(y_ticks(svg), 2.4 - 0.02 * len(labels), 3.1 + 0.02 * len(labels))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_charts_have_round_ticks(path):
    ticks = y_ticks(path.read_text())
    check_ticks(ticks, min(ticks), max(ticks))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
@browser
def test_committed_charts_show_all_their_text(tmp_path, path):
    assert_inside(*text_boxes(tmp_path, path.read_text()))
