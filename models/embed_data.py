"""Query-document pairs from this machine's own text, for training a sentence encoder for retrieval.

Two kinds of pairs, both written by the people who package and document the software:

  package  a Debian package's one-line summary (the first line of its Description, from
           `dpkg-query`) as the query, the start of its long description as the document;
  manual   a manual page's NAME line, the part after "\\-" ("ls \\- list directory contents" gives
           "list directory contents"), as the query, the start of its DESCRIPTION as the document
           (/usr/share/man/man{1,3,5,7,8}, pages in the man macros; mdoc pages, `.so` redirections
           and symbolic links left out, and the pages of google-cloud-cli, thousands of
           generated near-copies of one another).

A document is the text's first paragraphs, whitespace collapsed, up to max_chars (a first paragraph
longer than that is cut after a sentence end). Pairs whose query or document text occurs more than
once are dropped (the query has no single answer), as are documents under 40 characters.

The held-out split is by Debian source package, so that the pages and packages of one project
(libfoo1, libfoo-dev, foo, foo.1, foo.5) are on one side: a seeded share of the source packages.
A collection of many pages (the Linux man-pages) is split page by page instead.
"""
import gzip
import pathlib
import random
import re
import subprocess

MAN = pathlib.Path("/usr/share/man")
SECTIONS = ("man1", "man3", "man5", "man7", "man8")
DPKG_INFO = pathlib.Path("/var/lib/dpkg/info")
SKIP_PACKAGES = {"google-cloud-cli"}


def packages():
    """{package: (source package, description)} of the installed packages."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\x1f${source:Package}\x1f${Description}\x1e"],
                         capture_output=True, text=True, check=True).stdout
    res = {}
    for rec in out.split("\x1e"):
        if rec.strip():
            name, source, desc = rec.split("\x1f")
            res.setdefault(name.strip(), (source.strip() or name.strip(), desc))
    return res


def owners():
    """{path: package} for the manual pages, from dpkg's file lists."""
    res = {}
    for lst in sorted(DPKG_INFO.glob("*.list")):
        pkg = lst.name[:-len(".list")].split(":")[0]
        for line in lst.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("/usr/share/man/man"):
                res.setdefault(line, pkg)
    return res


def head_passage(paragraphs, max_chars, min_chars=40):
    """The first paragraphs, whitespace collapsed, while they fit in max_chars; a first one longer
    than that cut after its last sentence end that fits (or at a space)."""
    out = ""
    for p in paragraphs:
        p = re.sub(r"\s+", " ", p).strip()
        if not p:
            continue
        if not out and len(p) > max_chars:
            cut = max((m.end() for m in re.finditer(r"[.;:](?=\s)", p[:max_chars])), default=0)
            if cut < min_chars:
                cut = p.rfind(" ", 0, max_chars)
            return p[:cut].strip()
        if out and len(out) + 1 + len(p) > max_chars:
            break
        out = f"{out} {p}" if out else p
    return out


def package_pairs(pkgs, max_chars):
    """[(kind, name, group, query, document)] from Debian package descriptions."""
    res = []
    for name, (source, desc) in sorted(pkgs.items()):
        summary, _, long = desc.partition("\n")
        paras = [""]
        for line in long.split("\n"):
            line = line[1:] if line.startswith(" ") else line
            if line.strip() == ".":
                paras.append("")
            elif line.startswith(" "):   # a verbatim line (a list item): its own line
                paras[-1] += "\n" + line
            else:
                paras[-1] += " " + line
        res.append(("package", name, source, summary.strip(), head_passage(paras, max_chars)))
    return res


ESCAPES = [
    (r"\\f(\[[^\]]*\]|\(..|.)", ""),             # font changes
    (r"\\\*(\[[^\]]*\]|\(..|.)", ""),            # strings
    (r"\\\((em|en)", "-"), (r"\\\((aq|cq|oq)", "'"), (r"\\\((lq|rq|dq)", '"'),
    (r"\\\((bu|co|rg|tm|de|mu|>=|<=|ra|la|->|<-)", " "),
    (r"\\\(..", ""), (r"\\\[[^\]]*\]", ""),
    (r"\\[-]", "-"), (r"\\e", "\\\\"), (r"\\[&|^%c:),/]", ""), (r"\\[ 0~]", " "),
    (r"\\s[-+]?\d", ""), (r"\\[nk](\(..|.)", ""), (r"\\[hvwHSLDlo]'[^']*'", ""),
]
ESCAPE_RE = [(re.compile(a), b) for a, b in ESCAPES]
TEXT_MACROS = {"B", "I", "BI", "IB", "BR", "RB", "IR", "RI", "SM", "SB", "UR", "MT"}
BREAK_MACROS = {"PP", "P", "LP", "IP", "TP", "HP", "sp", "SS", "RS", "RE", "nf", "fi", "EX", "EE", "TQ"}


def unroff(s):
    for rx, rep in ESCAPE_RE:
        s = rx.sub(rep, s)
    return s


def macro_args(rest):
    """The words of a macro line, quotes removed."""
    return " ".join(a.strip('"') for a in re.findall(r'"[^"]*"|\S+', rest))


def man_sections(text):
    """{SECTION NAME: [paragraph, ...]} of a page in the man macros (None for mdoc or .so)."""
    if re.search(r"^\.(Dd|Sh|so)\b", text, re.M):
        return None
    secs, cur = {}, None
    for line in text.split("\n"):
        if line.startswith(".\\\"") or line.startswith("'\\\"") or line.startswith('.\\"'):
            continue
        m = re.match(r"[.'](\S+)\s*(.*)$", line)
        if m:
            mac, rest = m.group(1), m.group(2)
            if mac in ("SH", "Sh"):
                cur = unroff(macro_args(rest)).strip().upper()
                secs.setdefault(cur, [""])
                continue
            if cur is None:
                continue
            if mac in TEXT_MACROS:
                secs[cur][-1] += " " + unroff(macro_args(rest))
            elif mac in BREAK_MACROS:
                secs[cur].append("")
            continue
        if cur is not None:
            secs[cur][-1] += " " + unroff(line)
    return secs


def manual_pairs(own, pkgs, max_chars):
    res = []
    for sec in SECTIONS:
        d = MAN / sec
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if f.is_symlink() or not f.name.endswith(".gz"):
                continue
            pkg = own.get(str(f))
            if pkg in SKIP_PACKAGES:
                continue
            try:
                text = gzip.decompress(f.read_bytes()).decode("utf-8", errors="replace")
            except (OSError, EOFError):
                continue
            secs = man_sections(text)
            if not secs or "NAME" not in secs or "DESCRIPTION" not in secs:
                continue
            name = re.sub(r"\s+", " ", " ".join(secs["NAME"])).strip()
            m = re.match(r".*?\s-+\s+(.*)$", name)
            if not m:
                continue
            query = m.group(1).strip()
            doc = head_passage(secs["DESCRIPTION"], max_chars)
            group = pkgs[pkg][0] if pkg in pkgs else f.name
            res.append(("manual", f"{sec}/{f.name[:-3]}", group, query, doc))
    return res


def pairs(max_chars=500, min_chars=40):
    """All the pairs, duplicates and short ones dropped: [(kind, name, group, query, document)]."""
    pkgs = packages()
    allp = package_pairs(pkgs, max_chars) + manual_pairs(owners(), pkgs, max_chars)
    allp = [p for p in allp if len(p[4]) >= min_chars and len(p[3]) >= 3 and len(p[3].split()) <= 40]
    nq, nd = {}, {}
    for p in allp:
        nq[p[3]] = nq.get(p[3], 0) + 1
        nd[p[4]] = nd.get(p[4], 0) + 1
    return [p for p in allp if nq[p[3]] == 1 and nd[p[4]] == 1]


def split(ps, seed, heldout, big=40):
    """(train, held): a seeded share of the source packages (the groups) held out whole. A source
    package with more than `big` pairs is a collection (the Linux man-pages, Perl's modules): each
    of its pairs is a group of its own."""
    size = {}
    for p in ps:
        size[p[2]] = size.get(p[2], 0) + 1
    ps = [p if size[p[2]] <= big else (*p[:2], p[2] + "/" + p[1], *p[3:]) for p in ps]
    groups = sorted({p[2] for p in ps})
    out = set(random.Random(seed).sample(groups, round(heldout * len(groups))))
    return [p for p in ps if p[2] not in out], [p for p in ps if p[2] in out]
