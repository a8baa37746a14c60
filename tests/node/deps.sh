#!/bin/sh
# The Node client test (tests/node, better-sqlite3 12) needs Node >= 20 and
# npm; its node_modules comes from the lockfile with `npm ci` when the test
# first runs. Debian 12's own nodejs is 18, too old for better-sqlite3 12, so
# nothing is installed here: without a suitable node the test is skipped,
# and this says so. Never fails the build.
v=$(node --version 2>/dev/null)
major=$(echo "$v" | sed -n 's/^v\([0-9]*\)\..*/\1/p')
if [ -z "$v" ]; then
  echo "deps: node not found: the better-sqlite3 test will be skipped (needs Node >= 20, e.g. from NodeSource; Debian 12's nodejs is 18)"
elif [ "${major:-0}" -lt 20 ]; then
  echo "deps: node $v is too old for better-sqlite3 12 (needs >= 20): its test will be skipped"
elif ! command -v npm >/dev/null 2>&1; then
  echo "deps: npm not found: the better-sqlite3 test will be skipped"
elif [ ! -d "$(dirname "$0")/node_modules/better-sqlite3" ] && ! command -v c++ >/dev/null 2>&1; then
  echo "deps: no C++ compiler: npm ci can only use a prebuilt better-sqlite3 binary (install g++ if it must build one)"
fi
exit 0
