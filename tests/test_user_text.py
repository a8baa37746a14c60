"""What users read names nothing outside the repository: the README, docs/,
sql/, models/, python/, src/ and ext/ never point at a design file or a
directory beside the checkout (docs/reference.md is the reference)."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUFFIXES = {".md", ".c", ".h", ".sql", ".py", ".json", ".csv", ".svg"}
OUTSIDE = re.compile(r"DESIGN|\.\./shared|/work/")


def user_files():
    yield ROOT / "README.md"
    for d in ("docs", "sql", "models", "python", "src", "ext"):
        for p in sorted((ROOT / d).rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES and "build" not in p.relative_to(ROOT).parts:
                yield p


def test_user_text_names_nothing_outside_the_repository():
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for p in user_files()
             for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if OUTSIDE.search(line)]
    assert not found, "\n".join(found)


def test_the_check_sees_the_files():
    names = {str(p.relative_to(ROOT)) for p in user_files()}
    assert {"README.md", "docs/reference.md", "src/forward.c", "ext/scan.c", "sql/schema.sql",
            "models/train.py", "python/relattn/__init__.py"} <= names
