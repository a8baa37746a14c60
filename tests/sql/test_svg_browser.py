"""The pictures in a real browser: Debian's chromium, headless, renders each
SVG of the bundled model to PNG, and the PNG is checked against what the SVG
says and what the model does: cells painted in their fill at their place, the
band of a locally attending head (layer 0, head 0) darker than cells far off,
the dashed band edge drawn, bars as tall as their means, a shuffled text
darker than a verse in the surprise strip, legends drawn from light to dark.

Skipped where chromium is absent, and in the sanitized run (the ASan runtime
preloaded into a browser is not a test of the extension)."""
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import svgcheck as sc  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "tiny.safetensors"
CHROMIUM = shutil.which("chromium")

pytestmark = [
    pytest.mark.skipif(bool(os.environ.get("RELATTN_SANITIZED")),
                       reason="no browser under the ASan preload of the sanitized run"),
    pytest.mark.skipif(CHROMIUM is None,
                       reason="chromium is not installed (make deps installs it)"),
]

VERSE = "And God said, Let there be light: and there was light."
# held out from training (sql/demo_corpus.sql), and the same characters shuffled
HELD_OUT = "We know that we have passed from death unto life, because we love the brethren."


def render(tmp_path, name, svg):
    """The SVG as the browser paints it: (height, width, 3) uint8."""
    path = tmp_path / (name + ".svg")
    path.write_text(svg, encoding="utf-8")
    root = sc.parse(svg)
    w, h = sc.size(root)
    png = tmp_path / (name + ".png")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    # the headless window's viewport is shorter than the window: ask for more
    # height than the picture needs and check the rest stayed empty
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp_path / ('profile-' + name)}",
           "--hide-scrollbars", "--force-device-scale-factor=1", f"--screenshot={png}",
           f"--window-size={w},{h + 200}", path.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and png.exists(), r.stderr[-2000:]
    img = sc.read_png(png)
    assert img.shape[1] == w and img.shape[0] >= h + 50, img.shape
    assert (img[h:h + 50] == 255).all(), "the picture does not fit its own size"
    img = img[:h]
    # not blank: many colours, a good share of ink
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 40
    assert (img.min(axis=2) < 240).mean() > 0.03
    return root, img


def lum(px):
    px = np.asarray(px, dtype=np.float64)
    return 0.2126 * px[..., 0] + 0.7152 * px[..., 1] + 0.0722 * px[..., 2]


def centre(r):
    return (int(float(r.get("y")) + float(r.get("height")) / 2),
            int(float(r.get("x")) + float(r.get("width")) / 2))


@pytest.fixture
def tiny(db):
    db.execute("SELECT relattn_import('tiny', ?)", (MODEL.read_bytes(),))
    return db


def test_attention_map_in_the_browser(tiny, tmp_path):
    (svg,) = tiny.execute("SELECT relattn_svg_attention('tiny', ?, 0, 0)", (VERSE,)).fetchone()
    root, img = render(tmp_path, "map", svg)
    ground, *cells = list(sc.group(root, "cells"))
    band = list(sc.group(root, "band"))[0]
    x1, y1, x2, y2 = (float(band.get(a)) for a in ("x1", "y1", "x2", "y2"))
    # every cell painted in its fill at its place (cells under the dashed
    # band edge left out)
    painted, near, dist, = 0, [], []
    for r in cells:
        y, x = centre(r)
        off = abs((x - x1) * (y2 - y1) - (y - y1) * (x2 - x1)) / np.hypot(x2 - x1, y2 - y1)
        if off < 4:
            continue
        if sc.close_rgb(img[y, x], sc.hex_rgb(r.get("fill")), tol=3):
            painted += 1
        d = int(sc.title_of(r).split("distance ")[1].split(":")[0])
        if d == -1:
            near.append(img[y, x])
        elif d <= -20:
            dist.append(img[y, x])
    assert painted >= 0.98 * (len(cells) - 60), painted
    # layer 0, head 0 attends to the previous position: the band is dark
    assert lum(near).mean() < lum(dist).mean() - 80, (lum(near).mean(), lum(dist).mean())
    # the masked triangle is the grey ground
    gx, gy, side = float(ground.get("x")), float(ground.get("y")), float(ground.get("width"))
    assert sc.close_rgb(img[int(gy + side * 0.1), int(gx + side * 0.9)], (238, 238, 238), 2)
    # the dashed band edge: orange along the line
    t = np.linspace(0.05, 0.95, 200)
    px = img[(y1 + t * (y2 - y1)).astype(int), (x1 + t * (x2 - x1)).astype(int)].astype(int)
    orange = (px[:, 0] > 170) & (px[:, 0] - px[:, 2] > 90) & (px[:, 1] < 170)
    assert orange.mean() > 0.25, orange.mean()
    # the token labels are drawn: dark glyph pixels left of the map
    assert (lum(img[int(gy):int(gy + side), 20:int(gx) - 2]) < 100).sum() > 100


def test_distance_profile_in_the_browser(tiny, tmp_path):
    tiny.execute("CREATE TABLE docs(body TEXT)")
    tiny.executemany("INSERT INTO docs VALUES (?)", [(VERSE,), (HELD_OUT,)])
    (svg,) = tiny.execute(
        "SELECT relattn_svg_profile(w.distance, w.weight, 'head ' || w.head, 16) "
        "FROM docs, relattn_attention_weights('tiny', docs.body) AS w "
        "WHERE w.layer = 0").fetchone()
    root, img = render(tmp_path, "profile", svg)
    panels = [g for g in sc.group(root, "panels") if g.get("class") == "panel"]
    assert len(panels) == 4
    for p in panels:
        heights = {}
        for r in p.find(f"{sc.NS}g[@class='bars']"):
            x = int(float(r.get("x")) + float(r.get("width")) / 2)
            top, bottom = float(r.get("y")), float(r.get("y")) + float(r.get("height"))
            col = img[:, x].astype(int)
            blue = np.abs(col - np.array(sc.hex_rgb(r.get("fill")))).max(axis=1) <= 12
            ys = np.nonzero(blue[int(top) - 3:int(bottom) + 3])[0]
            measured = len(ys)
            assert abs(measured - (bottom - top)) <= 2.5, (sc.title_of(r), measured, bottom - top)
            d = sc.title_of(r).split(":")[0]
            heights[d] = measured
        # these heads look back a few positions, not far
        near = max(heights["distance %d" % d] for d in (-1, -2, -3))
        assert near > heights["distance -30"] + 20
        # the band is shaded
        b = p.find(f"{sc.NS}rect[@class='band']")
        by, bx = int(float(b.get("y"))) + 2, int(float(b.get("x"))) + 3
        assert sc.close_rgb(img[by, bx], sc.hex_rgb(b.get("fill")), 3)


def test_surprise_strip_in_the_browser(tiny, tmp_path, rng):
    shuffled = "".join(rng.permutation(list(HELD_OUT)))
    text = HELD_OUT + "\n" + shuffled
    (svg,) = tiny.execute("SELECT relattn_svg_surprise('tiny', ?)", (text,)).fetchone()
    root, img = render(tmp_path, "surprise", svg)
    rects = list(sc.group(root, "tokens").iter(sc.NS + "rect"))
    assert len(rects) == len(text.encode())
    fills, boxes = [], []
    for r in rects:
        # the box's corner, clear of its glyph, is its fill
        y, x = int(float(r.get("y"))) + 2, int(float(r.get("x"))) + 1
        assert sc.close_rgb(img[y, x], sc.hex_rgb(r.get("fill")), 3), sc.title_of(r)
        y, x = centre(r)
        boxes.append(img[int(float(r.get("y"))) + 1:int(float(r.get("y"))) + 21,
                         int(float(r.get("x"))):int(float(r.get("x")) + float(r.get("width")))])
    k = len(HELD_OUT)
    verse = np.mean([lum(b).mean() for b in boxes[:k]])
    mixed = np.mean([lum(b).mean() for b in boxes[k + 1:]])
    assert verse > mixed + 25, (verse, mixed)
    # the legend's colour bar darkens from left to right
    bar = [r for r in sc.group(root, "legend").iter(sc.NS + "rect") if r.get("fill") != "none"]
    xs = [centre(r) for r in bar[:64]]
    ls = [lum(img[y, x]) for y, x in xs]
    assert ls[0] > 240 and ls[-1] < 60 and all(a >= b - 2 for a, b in zip(ls, ls[1:]))
    # glyphs drawn: dark pixels inside the light boxes of the verse
    assert sum((lum(b) < 90).sum() for b in boxes[:k]) > 200


def test_wide_profile_fits_a_narrow_window(tiny, tmp_path):
    # every layer and head: 16 panels, four a row, about 1500 units wide; in a
    # 1000 px window the picture shrinks to the window's width, so the fourth
    # panel of each row is on screen, its clip band where the scale puts it
    tiny.execute("CREATE TABLE docs(body TEXT)")
    tiny.executemany("INSERT INTO docs VALUES (?)", [(VERSE,), (HELD_OUT,)])
    (svg,) = tiny.execute(
        "SELECT relattn_svg_profile(w.distance, w.weight, 'layer ' || w.layer || ' head ' || w.head, 16) "
        "FROM docs, relattn_attention_weights('tiny', docs.body) AS w").fetchone()
    root = sc.parse(svg)
    w, h = sc.size(root)
    assert w > 1200
    path, png = tmp_path / "wide.svg", tmp_path / "wide.png"
    path.write_text(svg, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
                        "--hide-scrollbars", "--force-device-scale-factor=1", f"--screenshot={png}",
                        f"--window-size=1000,{h}", path.as_uri()],
                       capture_output=True, text=True, timeout=180, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and png.exists(), r.stderr[-2000:]
    img = sc.read_png(png)
    assert img.shape[1] == 1000
    k = 1000 / w
    panels = [g for g in sc.group(root, "panels") if g.get("class") == "panel"]
    assert len(panels) == 16
    bands = [p.find(f"{sc.NS}rect[@class='band']") for p in panels]
    xs = sorted({float(b.get("x")) for b in bands})
    assert len(xs) == 4
    for b in bands:
        x, y = float(b.get("x")), float(b.get("y"))
        if x != xs[-1]:
            continue
        # a point inside the band, clear of its dashed edge and of the bars at its foot
        px, py = int((x + 0.6 * float(b.get("width"))) * k), int((y + 6) * k)
        assert px < 1000 and sc.close_rgb(img[py, px], sc.hex_rgb(b.get("fill")), 4), (px, py, img[py, px])
