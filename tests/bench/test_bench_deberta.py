"""make bench-deberta's script runs: tests/bench/bench_deberta.py on 2 rows, one round, one
thread, the demo and t5 shapes, PyTorch float32 as the only peer (ONNX Runtime and torch-int8 are
left out: the first needs Node and npm packages, both cost time); and, where onnxruntime-node is
installed, the ONNX Runtime peer on six rows of the demo shape. It prints relattn's float32,
int8 and bf16 sides, the ratio table and the targets, each PASS or FAIL with a ratio, and says
which targets it could not measure. Nothing here judges a time: the bench reports, it does not
assert.

Not run under the sanitizers: it runs PyTorch."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, SO

if os.environ.get("RELATTN_SANITIZED"):
    pytest.skip("PyTorch is not run under the sanitizer preload", allow_module_level=True)
pytest.importorskip("torch")

SCRIPT = ROOT / "tests" / "bench" / "bench_deberta.py"


def run(**env):
    e = dict(os.environ, BENCH_DEBERTA_ROWS="2", BENCH_DEBERTA_ROUNDS="1",
             BENCH_DEBERTA_THREADS="1", BENCH_DEBERTA_PEERS="torch")
    e.update(env)
    return subprocess.run([sys.executable, str(SCRIPT), SO], env=e, capture_output=True,
                          text=True, timeout=600)


def test_bench_runs_and_reports_the_targets():
    r = run(BENCH_DEBERTA_SHAPES="demo t5")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    ratio = r"\s*\d+\.\d\dx \(\s*\d+\.\d\dx\)"
    for shape, job in (("demo", "embed"), ("demo", "classify"), ("t5", "embed")):
        for variant in ("relattn-int8", "relattn-bf16"):
            # the ratio table: the variant against relattn float32 and torch
            assert re.search(rf"^{shape}\s+{job}\s+1 {variant}\s+\|{ratio} \|{ratio}$", out, re.M), \
                (shape, job, variant, out)
            assert re.search(rf"^#   {shape} {job} {variant}: stored [\d,]+ bytes \(\d+\.\d%", out, re.M)
        assert re.search(rf"^  (PASS|FAIL) relattn-int8 >= 2\.0x relattn: {shape} {job} 1 thread "
                         rf"\d+\.\d\dx \(\d+\.\d\dx\)$", out, re.M), out
        assert re.search(rf"^  (PASS|FAIL) int8 cached weights <= 30% of float32: {shape} {job} "
                         rf"\d+\.\d%$", out, re.M), out
    assert "# t5 classify: skipped (a T5 encoder has no classifier head)" in out
    assert "  relattn-int8 >= 1.5x ort: not measured (ort not run)" in out
    assert "  relattn-int8 >= 1.3x torch-int8: not measured (torch-int8 not run)" in out
    assert "  relattn >= 1.3x ort: not measured (ort not run)" in out
    assert re.search(r"^# \d+ of 9 targets met$", out, re.M), out
    # the quantized copies agree with float32 relattn (the bench prints it)
    assert re.search(r"relattn-int8 cosine mean 0\.99\d+ min 0\.99\d+", out), out


def test_bench_refuses_an_unknown_setting():
    r = run(BENCH_DEBERTA_QUANT="int4")
    assert r.returncode != 0
    assert r.stderr.strip().endswith("BENCH_DEBERTA_QUANT: unknown value 'int4' (known: int8 bf16)")


def test_bench_onnx_runtime_peer_runs_rows_longer_than_the_export():
    """ONNX Runtime runs the exported DeBERTa on rows longer than the batch it was traced on
    (the two shortest of six, padded to the fourth): the relative rows' range of
    models/deberta_classifier.py is traced, not frozen into the graph (with Python ints there,
    ORT fails on the longer rows), and its outputs equal torch's. Skipped without Node >= 20 and
    onnxruntime-node (make deps-bench)."""
    sys.path.insert(0, str(ROOT / "tests" / "bench"))
    import bench_deberta
    why = bench_deberta.ort_missing()
    if why:
        pytest.skip(why)
    r = run(BENCH_DEBERTA_ROWS="6", BENCH_DEBERTA_SHAPES="demo", BENCH_DEBERTA_JOBS="embed",
            BENCH_DEBERTA_PEERS="torch ort", BENCH_DEBERTA_QUANT="int8")
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"ort vs torch \(raw outputs\) max abs (\S+)", r.stdout)
    assert m and float(m.group(1)) < 1e-4, r.stdout
    assert re.search(r"^  (PASS|FAIL) relattn >= 1\.3x ort: demo embed 1 thread", r.stdout, re.M)
