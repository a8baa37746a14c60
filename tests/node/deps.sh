#!/bin/sh
# Node packages of tests/node, from its lockfile: better-sqlite3 12 for the
# Node client test (tests/node/test_scan.mjs) and onnxruntime-node, the ONNX
# Runtime peer of the DeBERTa bench (tests/bench/ort_run.mjs). Both need
# Node >= 20 and npm; Debian 12's own nodejs is 18, too old, so without a
# suitable node nothing is installed, the test and the peer are skipped, and
# this says so. `make deps` installs nothing (the test runs `npm ci` when it
# first runs); `make deps-bench` (argument "bench") runs `npm ci` when
# onnxruntime-node is missing. Never fails the build.
dir=$(dirname "$0")
v=$(node --version 2>/dev/null)
major=$(echo "$v" | sed -n 's/^v\([0-9]*\)\..*/\1/p')
if [ -z "$v" ]; then
  echo "deps: node not found: the better-sqlite3 test and the bench's ONNX Runtime peer will be skipped (need Node >= 20, e.g. from NodeSource; Debian 12's nodejs is 18)"
elif [ "${major:-0}" -lt 20 ]; then
  echo "deps: node $v is too old for better-sqlite3 12 and onnxruntime-node (need >= 20): the test and the bench's ONNX Runtime peer will be skipped"
elif ! command -v npm >/dev/null 2>&1; then
  echo "deps: npm not found: the better-sqlite3 test and the bench's ONNX Runtime peer will be skipped"
else
  if [ ! -d "$dir/node_modules/better-sqlite3" ] && ! command -v c++ >/dev/null 2>&1; then
    echo "deps: no C++ compiler: npm ci can only use a prebuilt better-sqlite3 binary (install g++ if it must build one)"
  fi
  if [ "$1" = bench ] && [ ! -f "$dir/node_modules/onnxruntime-node/package.json" ]; then
    echo "deps: npm ci in tests/node (onnxruntime-node, the bench's ONNX Runtime peer)"
    (cd "$dir" && npm ci --no-audit --no-fund) \
      || echo "deps: npm ci in tests/node failed: the bench's ONNX Runtime peer will be skipped"
  fi
fi
exit 0
