"""make install / make uninstall into a temporary prefix: `.load relattn` by
bare name from another directory (with LD_LIBRARY_PATH, as the README says for
a prefix outside the loader's own directories), the installed Python module's
relattn.load(conn), the installed documentation whose every link resolves,
and nothing left behind by uninstall."""
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = os.environ.get("RELATTN_SO", str(ROOT / "relattn.so"))
PYVER = "%d.%d" % sys.version_info[:2]


def make(*args):
    # The library under test is installed as it is (-o: never rebuilt here).
    # make, sed and install run without the sanitizer preload of `make asan`.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run(["make", "-s", "-o", SO, f"SO={SO}", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def in_other_dir(cmd, cwd, stdin, **env):
    return subprocess.run(cmd, cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})


def test_install_load_by_bare_name_and_uninstall(tmp_path):
    prefix, elsewhere = tmp_path / "prefix", tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = make("install", f"PREFIX={prefix}")
    lib = prefix / "lib"
    assert f"export LD_LIBRARY_PATH={lib}" in out
    docs = [f"share/doc/relattn/{f}" for f in files(prefix / "share" / "doc" / "relattn")]
    assert {"share/doc/relattn/README.md", "share/doc/relattn/docs/reference.md",
            "share/doc/relattn/docs/img/distance_profile.svg"} <= set(docs)
    assert files(prefix) == sorted([
        "lib/relattn.so", f"lib/python{PYVER}/dist-packages/relattn/__init__.py",
        "share/relattn/schema.sql", "share/relattn/score_corpus.sql",
        "share/relattn/tiny.safetensors", *docs])
    assert (lib / "relattn.so").read_bytes() == pathlib.Path(SO).read_bytes()

    sql = (".load relattn\nSELECT relattn_version();\n"
           f"SELECT relattn_import('tiny', readfile('{prefix}/share/relattn/tiny.safetensors'));\n"
           "SELECT relattn_perplexity('tiny', 'And God said') < 10;\n")
    r = in_other_dir(["sqlite3", "-bail", ":memory:"], elsewhere, sql, LD_LIBRARY_PATH=str(lib))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0.1.0", "75", "1"]
    # without the setting the loader does not look there (unless a copy is
    # installed system-wide on this machine, which the bare name would find)
    system = [d for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib")
              if os.path.exists(os.path.join(d, "relattn.so"))]
    if not system:
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        r = subprocess.run(["sqlite3", "-bail", ":memory:"], cwd=elsewhere, input=".load relattn\n",
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode != 0 and "relattn.so: cannot open shared object file" in r.stderr

    # the installed module finds the installed library, from any directory
    code = ("import sqlite3, relattn\n"
            "db = sqlite3.connect(':memory:')\n"
            "db.enable_load_extension(True)\n"
            "relattn.load(db)\n"
            "db.enable_load_extension(False)\n"
            "print(relattn.loadable_path())\n"
            "print(db.execute('SELECT relattn_version()').fetchone()[0])\n")
    pydir = prefix / "lib" / f"python{PYVER}" / "dist-packages"
    r = in_other_dir([sys.executable, "-c", code], elsewhere, "", PYTHONPATH=str(pydir))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(lib / "relattn"), "0.1.0"]

    make("uninstall", f"PREFIX={prefix}")
    assert files(prefix) == []
    assert not (pydir / "relattn").exists() and not (prefix / "share" / "relattn").exists()


def test_install_destdir(tmp_path):
    """DESTDIR stages the files; the paths written into them are PREFIX's."""
    stage = tmp_path / "stage"
    make("install", f"DESTDIR={stage}", "PREFIX=/opt/relattn")
    root = stage / "opt" / "relattn"
    assert (root / "lib" / "relattn.so").is_file()
    module = (root / "lib" / f"python{PYVER}" / "dist-packages" / "relattn" / "__init__.py").read_text()
    assert '_LIBDIR = "/opt/relattn/lib"' in module and str(stage) not in module
    make("uninstall", f"DESTDIR={stage}", "PREFIX=/opt/relattn")
    assert files(stage) == []


def test_installed_docs_find_what_they_link(tmp_path):
    """Every local link and picture of the installed pages, the README first, names a file
    installed beside them (the pages the README links, theirs, and so on), and each page is
    the repository's."""
    stage = tmp_path / "stage"
    make("install", f"DESTDIR={stage}", "PREFIX=/opt/relattn")
    doc = stage / "opt" / "relattn" / "share" / "doc" / "relattn"
    seen, todo, targets = set(), [doc / "README.md"], 0
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        assert page.read_bytes() == (ROOT / page.relative_to(doc)).read_bytes(), page
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.split("#")[0]
            if not path or re.match(r"[a-z]+:", path):
                continue  # an anchor of the same page, or a web address
            found = (page.parent / path).resolve()
            assert found.is_file() and doc.resolve() in found.parents, (page, target)
            targets += 1
            if found.suffix == ".md":
                todo.append(found)
    names = {str(p.relative_to(doc)) for p in seen}
    assert {"README.md", "docs/reference.md", "docs/pictures.md", "models/README.md"} <= names
    assert targets > 20
    make("uninstall", f"DESTDIR={stage}", "PREFIX=/opt/relattn")
    assert files(stage) == []


def test_install_prefix_usr_goes_to_the_loader_directory():
    """PREFIX=/usr puts the library in a directory the loader always searches
    (dry run: nothing is written)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run(["make", "-n", "-o", SO, f"SO={SO}", "install", "PREFIX=/usr"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    multiarch = subprocess.run(["cc", "-print-multiarch"], capture_output=True, env=env,
                               text=True).stdout.strip()
    assert multiarch
    assert f"/usr/lib/{multiarch}/relattn.so" in r.stdout
