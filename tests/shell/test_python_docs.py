"""Where the README, docs/reference.md and the Python module's own text first
use Python, they say which Python loads extensions: Debian's /usr/bin/python3,
whose sqlite3 module has enable_load_extension (a Python built without
--enable-loadable-sqlite-extensions has not)."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def says_which_python(text):
    return "/usr/bin/python3" in text and "enable_load_extension" in text \
        and "--enable-loadable-sqlite-extensions" in text


@pytest.mark.parametrize("page, first_use", [
    ("README.md", "```python\n"),
    ("docs/reference.md", "| Python's `sqlite3` |"),
    ("python/relattn/__init__.py", "    import sqlite3\n"),
])
def test_first_python_use_says_which_python(page, first_use):
    text = (ROOT / page).read_text()
    at = text.index(first_use)
    # the section (Markdown) or docstring where Python is first used
    start = max([m.end() for m in re.finditer(r"^#+ .*$", text[:at], re.M)] + [0])
    end = text.find("\n## ", at)
    section = text[start:end if end > 0 else len(text)]
    if page.endswith(".py"):
        section = text[:text.index('"""', 3)]
    assert says_which_python(section), page
