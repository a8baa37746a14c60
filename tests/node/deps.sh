#!/bin/sh
# tests/node's packages, from the lockfile with `npm ci`: better-sqlite3 12
# (the Node client test), sqlite-vec (its vec0 library, loaded by the
# vector search tests and docs' examples through Python's sqlite3 and the
# sqlite3 shell) and Hugging Face's tokenizers (the reference of
# tests/sql/test_tokenizer_json.py). They need Node >= 20 and npm; Debian 12's own nodejs is 18,
# too old for better-sqlite3 12, so no node is installed here: without a
# suitable one the tests are skipped, and this says so. When node and npm are
# there and a package is missing, it runs `npm ci` (the tests do too, when
# run alone). With the argument "bench" (make deps-bench) it also installs
# tests/bench/node's onnxruntime-node, the DeBERTa bench's ONNX Runtime peer,
# from that directory's own lockfile (kept apart: its 300 MB are for the
# bench, not the tests). Never fails the build.
dir=$(dirname "$0")
v=$(node --version 2>/dev/null)
major=$(echo "$v" | sed -n 's/^v\([0-9]*\)\..*/\1/p')
if [ -z "$v" ]; then
  echo "deps: node not found: the better-sqlite3 and sqlite-vec tests will be skipped (needs Node >= 20, e.g. from NodeSource; Debian 12's nodejs is 18)"
elif [ "${major:-0}" -lt 20 ]; then
  echo "deps: node $v is too old for better-sqlite3 12 (needs >= 20): its test and the sqlite-vec ones will be skipped"
elif ! command -v npm >/dev/null 2>&1; then
  echo "deps: npm not found: the better-sqlite3 and sqlite-vec tests will be skipped"
elif [ ! -d "$dir/node_modules/better-sqlite3/build/Release" ] || [ ! -d "$dir/node_modules/sqlite-vec" ] ||
     [ ! -d "$dir/node_modules/tokenizers" ]; then
  if [ ! -d "$dir/node_modules/better-sqlite3/build/Release" ] && ! command -v c++ >/dev/null 2>&1; then
    echo "deps: no C++ compiler: npm ci can only use a prebuilt better-sqlite3 binary (install g++ if it must build one)"
  fi
  echo "deps: npm ci in tests/node (better-sqlite3, sqlite-vec, tokenizers)"
  (cd "$dir" && npm ci --no-audit --no-fund) || echo "deps: npm ci in tests/node failed: the tests that need it will say why"
fi
bench=$dir/../bench/node
if [ "${1:-}" = bench ] && [ "${major:-0}" -ge 20 ] && command -v npm >/dev/null 2>&1 &&
   [ ! -f "$bench/node_modules/onnxruntime-node/package.json" ]; then
  echo "deps: npm ci in tests/bench/node (onnxruntime-node, the bench's ONNX Runtime peer)"
  (cd "$bench" && npm ci --no-audit --no-fund) ||
    echo "deps: npm ci in tests/bench/node failed: the bench's ONNX Runtime peer will be skipped"
fi
exit 0
