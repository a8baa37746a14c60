"""Helpers for the picture tests: parse an SVG from relattn_svg_*, the colour
scales as docs/pictures.md states them (written here from that text, not from
src/svg.c), and a PNG reader (python3 zlib/struct + numpy, no PIL)."""
import math
import re
import struct
import xml.etree.ElementTree as ET
import zlib

import numpy as np

NS = "{http://www.w3.org/2000/svg}"
# The elements an SVG 1.1 picture of relattn may use.
SVG11 = {"svg", "title", "desc", "g", "rect", "line", "text"}

# docs/pictures.md: weights are shaded ramp(sqrt(w)) through these stops,
# surprise ramp(bits / 16) through these.
WEIGHT_STOPS = [(0.0, (255, 255, 255)), (0.3, (170, 204, 232)), (0.65, (60, 122, 190)),
                (1.0, (10, 30, 80))]
BITS_STOPS = [(0.0, (255, 255, 255)), (0.25, (254, 224, 144)), (0.5, (249, 140, 60)),
              (0.75, (210, 40, 40)), (1.0, (90, 0, 40))]


def ramp(stops, t):
    t = min(max(t, 0.0), 1.0)
    for (t0, c0), (t1, c1) in zip(stops, stops[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return tuple(a + f * (b - a) for a, b in zip(c0, c1))
    return stops[-1][1]


def weight_rgb(w):
    return ramp(WEIGHT_STOPS, math.sqrt(max(min(w, 1.0), 0.0)))


def bits_rgb(bits):
    return ramp(BITS_STOPS, bits / 16)


def hex_rgb(s):
    assert re.fullmatch(r"#[0-9a-f]{6}", s), s
    return tuple(int(s[i:i + 2], 16) for i in (1, 3, 5))


def close_rgb(a, b, tol=1.0):
    return all(abs(x - y) <= tol for x, y in zip(a, b))


def parse(svg):
    """The root element; checks it is SVG 1.1 made of the expected elements."""
    assert svg.startswith('<?xml version="1.0" encoding="UTF-8"')
    root = ET.fromstring(svg.encode("utf-8"))
    assert root.tag == NS + "svg" and root.get("version") == "1.1"
    for el in root.iter():
        assert el.tag.startswith(NS) and el.tag[len(NS):] in SVG11, el.tag
    # the picture's size is its viewBox; it takes the window's width up to that
    # size (docs/pictures.md), no fixed width that runs off a narrow window
    w, h = size(root)
    assert w > 0 and h > 0
    assert root.get("width") == "100%" and root.get("height") is None
    assert root.get("style") == f"max-width:{w}px;height:auto"
    return root


def size(root):
    """(width, height) of the picture: its viewBox, from 0 0."""
    m = re.fullmatch(r"0 0 (\d+) (\d+)", root.get("viewBox") or "")
    assert m, root.get("viewBox")
    return int(m[1]), int(m[2])


def group(root, gid):
    g = root.find(f".//{NS}g[@id='{gid}']")
    assert g is not None, gid
    return g


def tag(el, name):
    return el.tag == NS + name


def title_of(el):
    t = el.find(NS + "title")
    return t.text if t is not None else None


def read_png(path):
    """(height, width, channels) uint8 array of an 8-bit, non-interlaced PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, inter = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    assert depth == 8 and inter == 0, (depth, inter)
    raw = zlib.decompress(b"".join(idat))
    stride = w * ch
    out = np.zeros((h, stride), np.uint8)
    prev = np.zeros(stride, np.int64)
    for y in range(h):  # the filters of the PNG specification, section 9
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int64)
        if f == 0:
            cur = line
        elif f == 1:
            cur = np.cumsum(line.reshape(w, ch), axis=0).reshape(-1) & 255
        elif f == 2:
            cur = (line + prev) & 255
        else:
            ln, p, c = line.tolist(), prev.tolist(), [0] * stride
            for x in range(stride):
                a = c[x - ch] if x >= ch else 0
                b = p[x]
                if f == 3:
                    c[x] = (ln[x] + ((a + b) >> 1)) & 255
                else:
                    cc = p[x - ch] if x >= ch else 0
                    pa, pb, pc = abs(b - cc), abs(a - cc), abs(a + b - 2 * cc)
                    c[x] = (ln[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else cc)) & 255
            cur = np.array(c, np.int64)
        out[y] = cur
        prev = cur
    return out.reshape(h, w, ch)[:, :, :3]
