"""The libFuzzer targets still build, and run clean over their committed seed
corpora (tests/fuzz/corpus/<target>): a quick replay, not a fuzzing run
(make fuzz is that). Runs once, in the sanitized run of make test, and only
where clang and its fuzzer runtime are installed (make deps-fuzz)."""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TARGETS = sorted(p.stem[len("fuzz_"):] for p in (ROOT / "tests" / "fuzz").glob("fuzz_*.c"))
RUNTIME = pathlib.Path("/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a")

pytestmark = [
    pytest.mark.skipif(not os.environ.get("RELATTN_SANITIZED"),
                       reason="runs once, in the sanitized run of make test"),
    pytest.mark.skipif(shutil.which("clang") is None or not RUNTIME.exists(),
                       reason="clang and libclang-rt-14-dev not installed (make deps-fuzz)"),
]


def clean_env():
    # The sanitized run preloads GCC's ASan runtime; neither make, clang nor
    # the clang-built targets may inherit it.
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS")}
    return env


@pytest.fixture(scope="module")
def built():
    r = subprocess.run(["make", "-s", "fuzz-build"], cwd=ROOT, env=clean_env(),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.mark.parametrize("target", TARGETS)
def test_seeds_replay_clean(built, target):
    seeds = ROOT / "tests" / "fuzz" / "corpus" / target
    assert any(seeds.iterdir()), f"no seeds for {target}"
    r = subprocess.run([str(ROOT / "build-fuzz" / f"fuzz_{target}"), "-runs=0",
                        "-malloc_limit_mb=256", "-rss_limit_mb=2048", str(seeds)],
                       cwd=ROOT, env=clean_env(), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "Done" in r.stderr or "INITED" in r.stderr, r.stderr[-2000:]
