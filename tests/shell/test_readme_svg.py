"""The SQL examples of the README's "Pictures" section and of docs/pictures.md,
run as written in the sqlite3 shell (in a scratch directory, where writefile
puts the pictures): each picture is written, its byte count is what the shell
prints, and it parses as the SVG of its kind."""
import os
import pathlib
import re
import subprocess
import xml.etree.ElementTree as ET

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
MODEL = ROOT / "models" / "tiny.safetensors"
NS = "{http://www.w3.org/2000/svg}"


def sql_block(path, title=None):
    text = path.read_text()
    if title:
        text = text[text.index(title):]
    return re.search(r"```sql\n(.*?)```", text, re.S).group(1)


def run(sql, cwd):
    so = SO[:-3] if SO.endswith(".so") else SO
    assert ".load ./relattn\n" in sql and "readfile('models/tiny.safetensors')" in sql
    sql = sql.replace(".load ./relattn\n", f".load {so}\n")
    sql = sql.replace("readfile('models/tiny.safetensors')", f"readfile('{MODEL}')")
    r = subprocess.run(["sqlite3", "-bail", ":memory:"], input=sql, cwd=cwd,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout.split()


def panels(path):
    root = ET.parse(path).getroot()
    return [g.find(NS + "text").text for g in root.iter(NS + "g") if g.get("class") == "panel"]


@pytest.mark.skipif(not MODEL.exists(), reason="no bundled model")
def test_readme_pictures_example(tmp_path):
    out = run(sql_block(ROOT / "README.md", "## Pictures"), tmp_path)
    files = ["map.svg", "surprise.svg", "profile.svg"]
    assert out == ["75"] + [str((tmp_path / f).stat().st_size) for f in files]
    root = ET.parse(tmp_path / "map.svg").getroot()
    ylabels = root.find(f".//{NS}g[@id='ylabels']")
    assert len(ylabels) == 1 + len("And God said, Let there be light")
    surprise = ET.parse(tmp_path / "surprise.svg").getroot()
    assert len(list(surprise.find(f".//{NS}g[@id='tokens']").iter(NS + "rect"))) == \
        len("In the beginning God created the heaven")
    assert panels(tmp_path / "profile.svg") == ["head 0", "head 1", "head 2", "head 3"]


@pytest.mark.skipif(not MODEL.exists(), reason="no bundled model")
def test_docs_pictures_example(tmp_path):
    out = run(sql_block(ROOT / "docs" / "pictures.md"), tmp_path)
    files = ["map.svg", "surprise.svg", "profile.svg", "profile_all.svg"]
    assert out == ["75"] + [str((tmp_path / f).stat().st_size) for f in files]
    assert panels(tmp_path / "profile_all.svg") == [
        f"layer {l}, head {h}" for l in range(4) for h in range(4)]
    # the clip came from the config: the band is shaded in every panel
    root = ET.parse(tmp_path / "profile_all.svg").getroot()
    assert len(root.findall(f".//{NS}rect[@class='band']")) == 16


def test_docs_images_exist():
    # every picture the README and docs/pictures.md show is in the repository
    for doc in (ROOT / "README.md", ROOT / "docs" / "pictures.md"):
        for src in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", doc.read_text()):
            assert (doc.parent / src).is_file(), (doc, src)


def test_every_picture_the_docs_show_fits_a_1000px_window():
    # each SVG a page links: a viewBox, and a width that is the window's
    # (100%, up to its own size) or a fixed one of at most 1000 px
    shown = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+\.svg)\)", page.read_text()):
            shown.add((page.parent / target).resolve())
    assert ROOT / "docs" / "img" / "distance_profile.svg" in shown and len(shown) >= 8
    for path in sorted(shown):
        root = ET.parse(path).getroot()
        m = re.fullmatch(r"0 0 (\d+(?:\.\d+)?) (\d+(?:\.\d+)?)", root.get("viewBox") or "")
        assert m, (path, root.get("viewBox"))
        width = root.get("width")
        if width == "100%":
            assert root.get("height") is None, path
            assert re.search(r"max-width:\s*%spx" % m[1], root.get("style") or ""), path
        else:
            assert float(width) <= 1000, (path, width)
