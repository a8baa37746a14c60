"""The README's "Limits" example, run in the sqlite3 shell as printed."""
import pathlib
import re

from test_shell import shell

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_readme_limits_example():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Limits", 1)[1].split("\n## ", 1)[0]
    sql = re.search(r"```sql\n(.*?)```", section, re.S).group(1)
    r = shell(sql.replace("\n-- Error", "\n--"))
    lines = r.stdout.split()
    assert lines[:4] == ["65536|2147483648", "536870912", "4096", "268435456"], \
        r.stdout + r.stderr
    want = re.search(r"-- Error: (.*)", sql).group(1)
    assert want in r.stderr
