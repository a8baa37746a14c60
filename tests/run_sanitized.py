"""Runs the sanitized test suite (make test, make asan): one pytest process per
test file, JOBS of them at a time, and ends with one summary line that adds up
theirs, in pytest's own words.

  python3 tests/run_sanitized.py [-j JOBS] PATH... -- COMMAND...

COMMAND (env with the sanitizer settings, then python3 -m pytest -q) is run
once per test file found under the PATHs, with the file appended. It runs
from here, unsanitized: the sanitizer environment goes to COMMAND only.

Why one process per file: LeakSanitizer checks at each process's exit, and
that check stops every thread with a ptrace tracer that now and then dies
itself ("LeakSanitizer has encountered a fatal error", no report), which says
nothing about the code under test. Such a file, and only that file, is run
again, twice at most. A leak report, an ASan or UBSan error or a failing test
is never retried: it fails the run.

Files named as PATHs start first, in their order, then the rest by the size
of their source, largest first: a rough guide to the time they take, so that
the slowest do not start last and run alone."""
import os
import re
import subprocess
import sys
import threading
import time

TRACER_CRASH = "LeakSanitizer has encountered a fatal error"
# What a sanitizer says when it has found something in the code.
FINDING = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer: detected)|runtime error:"
                     r"|SUMMARY: (AddressSanitizer|UndefinedBehaviorSanitizer)")
# pytest's closing line: "3 failed, 80 passed, 2 skipped, 1 warning in 12.34s (0:00:12)"
SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in [\d.]+s(?: \([\d:]+\))?\s*=*$")
TRIES = 3
# pytest's order and words; counts of 1 take the singular.
WORDS = ["failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "warnings", "errors"]
SINGULAR = {"warning": "warnings", "error": "errors"}
SKIP_DIRS = {"node_modules", "build", "dist", "venv", "__pycache__"}


def test_files(paths):
    """The test files pytest would collect under the paths (test_*.py),
    skipping the directories it skips by default."""
    named, found = [], []
    for p in paths:
        if os.path.isfile(p):
            named.append(os.path.normpath(p))
            continue
        for d, dirs, files in os.walk(p):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("."))
            found += [os.path.normpath(os.path.join(d, f)) for f in sorted(files)
                      if f.startswith("test_") and f.endswith(".py")]
    rest = sorted(set(found) - set(named), key=lambda f: (-os.path.getsize(f), f))
    return list(dict.fromkeys(named)) + rest


def counts(output):
    """pytest's closing counts in one file's output, {} when it has none."""
    for line in reversed(output.splitlines()):
        m = SUMMARY.match(line.strip())
        if m:
            got = {}
            for part in m.group(1).split(", "):
                n, word = part.split(" ", 1)
                word = SINGULAR.get(word, word)
                got[word] = got.get(word, 0) + int(n)
            return got
    return {}


def verdict(rc, output):
    """'pass', 'retry' (only the leak checker's tracer died) or 'fail'."""
    found = FINDING.search(output) is not None
    c = counts(output)
    tests_failed = c.get("failed", 0) or c.get("errors", 0)
    if rc in (0, 5) and not found and not tests_failed:   # 5: pytest found no test
        return "pass"
    if rc != 0 and TRACER_CRASH in output and not found and not tests_failed and c:
        return "retry"
    return "fail"


def summary_line(total, seconds):
    parts = []
    for w in WORDS:
        n = total.get(w, 0)
        if n:
            word = w[:-1] if n == 1 and w in ("warnings", "errors") else w
            parts.append(f"{n} {word}")
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{', '.join(parts) or 'no tests ran'} in {seconds:.2f}s ({h}:{m:02d}:{s:02d})"


def main(argv):
    jobs = os.cpu_count() or 1
    if argv[:1] == ["-j"]:
        jobs, argv = max(1, int(argv[1])), argv[2:]
    if "--" not in argv:
        sys.exit("usage: run_sanitized.py [-j JOBS] PATH... -- COMMAND...")
    cut = argv.index("--")
    paths, command = argv[:cut], argv[cut + 1:]
    files = test_files(paths)
    start = time.monotonic()
    lock = threading.Lock()
    total, failed, retried = {}, [], []

    def run(f):
        for attempt in range(1, TRIES + 1):
            p = subprocess.run(command + [f], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace")
            v = verdict(p.returncode, p.stdout)
            if v != "retry" or attempt == TRIES:
                break
            with lock:
                retried.append(f)
                print(f"== {f}: LeakSanitizer's own tracer died at exit (not a finding); "
                      "running this file again", flush=True)
        c = counts(p.stdout)
        with lock:
            if v == "pass":
                last = [x for x in p.stdout.splitlines() if SUMMARY.match(x.strip())]
                print(f"{f}: {last[-1].strip() if last else 'no tests'}", flush=True)
            else:
                failed.append(f)
                # A finding at exit, with every test passed, counts as one error.
                if not (c.get("failed", 0) or c.get("errors", 0)):
                    c["errors"] = c.get("errors", 0) + 1
                print(f"== {f}: exit status {p.returncode}\n{p.stdout.rstrip()}", flush=True)
            for k, n in c.items():
                total[k] = total.get(k, 0) + n

    queue = list(files)

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                f = queue.pop(0)
            run(f)

    threads = [threading.Thread(target=worker) for _ in range(min(jobs, len(files)) or 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    note = f"{len(files)} files, {jobs} at a time"
    if retried:
        note += f"; run again after a tracer crash: {' '.join(sorted(set(retried)))}"
    print(f"== sanitized run: {note}")
    if failed:
        print(f"== failed: {' '.join(sorted(failed))}")
    print(summary_line(total, time.monotonic() - start), flush=True)
    return 1 if failed or not files else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
