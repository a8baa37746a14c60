"""tests/run_sanitized.py, the runner of the sanitized pass, on a fake pytest:
a file whose process's LeakSanitizer tracer dies once is run again, alone, and
the run passes; a tracer that keeps dying, a leak report, an ASan or UBSan
error or a failing test fail it, unretried; the closing line adds up every
file's counts in pytest's words and is the last line printed."""
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
RUNNER = ROOT / "tests" / "run_sanitized.py"

pytestmark = pytest.mark.skipif(bool(os.environ.get("RELATTN_SANITIZED")),
                                reason="the runner loads no C code of ours: the normal pass tests it")

TRACER_CRASH = ("Tracer caught signal 11: addr=0x0 pc=0x7f3a1c2b4e60 sp=0x7f3a0f7fed30\n"
                "==4242==LeakSanitizer has encountered a fatal error.\n"
                "==4242==HINT: For debugging, try setting environment variable "
                "LSAN_OPTIONS=verbosity=1:log_threads=1\n"
                "==4242==HINT: LeakSanitizer does not work under ptrace (strace, gdb, etc)\n")
LEAK = ("\n=================================================================\n"
        "==4242==ERROR: LeakSanitizer: detected memory leaks\n\n"
        "Direct leak of 64 byte(s) in 1 object(s) allocated from:\n"
        "    #0 0x7f3a1c2b4e60 in malloc (/usr/lib/x86_64-linux-gnu/libasan.so.8+0xbd9f7)\n"
        "    #1 0x7f3a1a0c1234 in relattn_alloc src/mem.c:20\n\n"
        "SUMMARY: AddressSanitizer: 64 byte(s) leaked in 1 allocation(s).\n")
UBSAN = "src/attention.c:88:14: runtime error: signed integer overflow\n"

# The fake pytest: what it prints and its exit status are given per file name,
# by the number of the run (the last entry repeats); every run is logged.
FAKE = textwrap.dedent("""
    import json, os, sys
    plan, log, f = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
    name = os.path.basename(f)
    with open(log, "a") as out:
        out.write(name + "\\n")
    runs = open(log).read().split().count(name)
    text, rc = plan[name][min(runs, len(plan[name])) - 1]
    sys.stdout.write(text)
    sys.exit(rc)
""")


def run(tmp_path, plan, jobs=2, sizes={}, first=()):
    """The runner over one fake test file per plan entry (of sizes[name]
    bytes, files `first` named before the directory): (exit status, output
    lines, how often each file ran)."""
    import json
    tests = tmp_path / "tests"
    tests.mkdir()
    for name in plan:
        (tests / name).write_text("#" * sizes.get(name, 0))
    (tests / "helper.py").write_text("")              # not a test file: never run
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "fake.py").write_text(FAKE)
    log = tmp_path / "runs.log"
    log.write_text("")
    r = subprocess.run([sys.executable, str(RUNNER), "-j", str(jobs),
                        *[str(tests / n) for n in first], str(tests), "--",
                        sys.executable, str(tmp_path / "fake.py"), str(tmp_path / "plan.json"),
                        str(log)], capture_output=True, text=True, timeout=120)
    assert r.stderr == ""
    run.order = log.read_text().split()
    return r.returncode, r.stdout.splitlines(), {n: run.order.count(n) for n in plan}


def closing(lines):
    m = re.fullmatch(r"(.*) in \d+\.\d\ds \(\d:\d\d:\d\d\)", lines[-1])
    assert m, lines[-1]
    return m.group(1)


def test_a_tracer_crash_reruns_only_that_file(tmp_path):
    rc, lines, ran = run(tmp_path, {
        "test_a.py": [(".." + "\n2 passed, 1 skipped in 0.40s\n" + TRACER_CRASH, 1),
                      ("..\n2 passed, 1 skipped in 0.38s\n", 0)],
        "test_b.py": [("...\n3 passed, 1 warning in 0.20s\n", 0)],
        "test_c.py": [("s\n1 skipped in 0.01s\n", 0)],
    })
    assert rc == 0, lines
    assert ran == {"test_a.py": 2, "test_b.py": 1, "test_c.py": 1}
    assert any(re.fullmatch(r"== .*test_a\.py: LeakSanitizer's own tracer died at exit "
                            r"\(not a finding\); running this file again", x) for x in lines)
    assert closing(lines) == "5 passed, 2 skipped, 1 warning"


def test_a_tracer_that_keeps_dying_fails_after_three_runs(tmp_path):
    crash = ("..\n2 passed in 0.40s\n" + TRACER_CRASH, 1)
    rc, lines, ran = run(tmp_path, {"test_a.py": [crash],
                                    "test_b.py": [(".\n1 passed in 0.10s\n", 0)]})
    assert rc == 1
    assert ran == {"test_a.py": 3, "test_b.py": 1}
    assert "==4242==LeakSanitizer has encountered a fatal error." in lines
    assert any(x.startswith("== failed: ") and x.endswith("test_a.py") for x in lines)
    assert closing(lines) == "3 passed, 1 error"


@pytest.mark.parametrize("finding, rc", [(LEAK, 23), (LEAK + TRACER_CRASH, 1), (UBSAN, 0)],
                         ids=["leak", "leak-and-tracer-crash", "ubsan-exit-0"])
def test_a_finding_fails_and_is_not_rerun(tmp_path, finding, rc):
    rc_run, lines, ran = run(tmp_path, {
        "test_a.py": [("..\n2 passed in 0.40s\n" + finding, rc)],
        "test_b.py": [(".\n1 passed in 0.10s\n", 0)],
    })
    assert rc_run == 1
    assert ran == {"test_a.py": 1, "test_b.py": 1}
    for line in finding.splitlines():
        assert line in lines                   # the report is shown whole
    assert closing(lines) == "3 passed, 1 error"


def test_a_failing_test_is_not_rerun_after_a_tracer_crash(tmp_path):
    rc, lines, ran = run(tmp_path, {
        "test_a.py": [("F.\nFAILED test_a.py::test_x - assert 1 == 2\n"
                       "1 failed, 1 passed in 0.40s\n" + TRACER_CRASH, 1)],
        "test_b.py": [(".\n1 passed in 0.10s\n", 0)],
    })
    assert rc == 1
    assert ran == {"test_a.py": 1, "test_b.py": 1}
    assert "FAILED test_a.py::test_x - assert 1 == 2" in lines
    assert closing(lines) == "1 failed, 2 passed"


def test_an_asan_error_that_ends_the_process_fails(tmp_path):
    # halt: no pytest summary at all, only ASan's report
    report = ("==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000014\n"
              "SUMMARY: AddressSanitizer: heap-buffer-overflow src/attention.c:88 in relattn_attention\n")
    rc, lines, ran = run(tmp_path, {"test_a.py": [("..\n" + report, 1)],
                                    "test_b.py": [(".\n1 passed in 0.10s\n", 0)]}, jobs=1)
    assert rc == 1
    assert ran == {"test_a.py": 1, "test_b.py": 1}
    assert closing(lines) == "1 passed, 1 error"


def test_success_ends_with_the_summed_summary(tmp_path):
    rc, lines, ran = run(tmp_path, {
        "test_a.py": [("..\n2 passed in 0.40s\n", 0)],
        "test_b.py": [(".x\n1 passed, 1 xfailed, 2 warnings in 0.10s\n", 0)],
    }, jobs=1)
    assert rc == 0
    assert ran == {"test_a.py": 1, "test_b.py": 1}
    assert closing(lines) == "3 passed, 1 xfailed, 2 warnings"
    assert lines[-2] == "== sanitized run: 2 files, 1 at a time"


def test_named_files_start_first_then_the_largest(tmp_path):
    ok = [(".\n1 passed in 0.10s\n", 0)]
    rc, lines, ran = run(tmp_path, {n: ok for n in ("test_a.py", "test_b.py", "test_c.py", "test_d.py")},
                         jobs=1, sizes={"test_a.py": 10, "test_b.py": 300, "test_c.py": 20},
                         first=["test_d.py"])
    assert rc == 0
    assert run.order == ["test_d.py", "test_b.py", "test_c.py", "test_a.py"]   # each once
    assert closing(lines) == "4 passed"
