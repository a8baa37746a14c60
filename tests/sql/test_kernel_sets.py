"""OpenBLAS chooses a kernel set when it loads (Prescott: SSE3; Haswell:
AVX2; SkylakeX: AVX-512, with small-matrix kernels that sum in another
order); OPENBLAS_CORETYPE forces one. Each set the CPU can run is tried in a
fresh process (kernel_probe.py, every model function, relattn_scan and
relattn_attention on one random model and input):
- within a kernel set, results are bit-identical: at 1 and at 4 threads,
  and the scan equal to the scalar functions;
- across kernel sets they agree within the tolerances of the float64
  reference tests (measured here: scores 2e-7 relative, embeddings 4e-7,
  log-probs 9e-6 absolute):
    score        relative 1e-5
    embedding    relative L2 1e-5
    log-prob     absolute 1e-4
    attention    relative L2 1e-5
- where relattn's own product kernel runs (simd avx2 or avx512: the layers'
  and the attention's products, src/gemm.c), what uses no OpenBLAS product is
  the same bits under every set: the embeddings and relattn_attention's
  output (scores and log-probs go through the LM head's sgemm), and the
  scores and log-probs of the model's int8 copy (its LM head is an int8
  product over the int8 embedding table, src/qgemm.c);
- relattn_debug() names the kernel set the process used.

`make test` also reruns the numerical test files under each of these sets
(tests/coretypes.sh)."""
import json
import os
import pathlib
import platform
import subprocess
import sys

import numpy as np
import pytest

PROBE = pathlib.Path(__file__).resolve().parent / "kernel_probe.py"


def cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def kernel_sets():
    """The kernel sets this CPU can run: Prescott always, Haswell with AVX2,
    SkylakeX with AVX-512."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    flags = cpu_flags()
    sets = ["Prescott"]
    if "avx2" in flags and "fma" in flags:
        sets.append("Haswell")
    if "avx512f" in flags:
        sets.append("SkylakeX")
    return sets


def probe(coretype, seed, threads):
    env = dict(os.environ, OPENBLAS_CORETYPE=coretype)
    r = subprocess.run([sys.executable, str(PROBE), str(seed), str(threads)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    for key, val in out.items():
        if key not in ("blas", "simd"):
            out[key] = np.array([[float.fromhex(x) for x in row] for row in val]
                                if val and isinstance(val[0], list)
                                else [float.fromhex(x) for x in val])
    return out


def rel_l2(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.skipif(not kernel_sets(), reason="OPENBLAS_CORETYPE names x86 kernel sets")
@pytest.mark.skipif(bool(os.environ.get("RELATTN_SANITIZED")),
                    reason="numerics: the normal build's run covers it (six processes)")
def test_kernel_sets_bit_identical_within_and_close_across(rng):
    seed = int(rng.integers(0, 2**31))
    results = {}
    for ct in kernel_sets():
        one, four = probe(ct, seed, 1), probe(ct, seed, 4)
        assert f" {ct} " in one["blas"], (ct, one["blas"])   # relattn_debug names it
        for key in one:
            if key in ("blas", "simd"):
                continue
            assert np.array_equal(one[key], four[key]), f"{ct}: {key} differs between 1 and 4 threads"
        assert np.array_equal(one["scan_score"], one["score"]), ct
        assert np.array_equal(one["scan_embed"], one["embed"]), ct
        assert np.all(np.isfinite(one["score"])) and np.all(one["score"] < 0)
        results[ct] = one
    base = results[kernel_sets()[0]]
    for ct, r in results.items():
        assert np.max(np.abs(r["score"] - base["score"]) / np.abs(base["score"])) < 1e-5, ct
        assert max(rel_l2(a, b) for a, b in zip(r["embed"], base["embed"])) < 1e-5, ct
        assert np.max(np.abs(r["logprob"] - base["logprob"])) < 1e-4, ct
        assert rel_l2(r["attention"], base["attention"]) < 1e-5, ct
        if r["simd"] != "simd: scalar":
            assert np.array_equal(r["embed"], base["embed"]), ct
            assert np.array_equal(r["scan_embed"], base["embed"]), ct
            assert np.array_equal(r["attention"], base["attention"]), ct
            assert np.array_equal(r["q8_score"], base["q8_score"]), ct
            assert np.array_equal(r["q8_logprob"], base["q8_logprob"]), ct
