#!/bin/sh
# Runs each named libFuzzer target (build-fuzz/fuzz_<name>) for FUZZ_SECONDS,
# starting from its committed seeds (tests/fuzz/corpus/<name>) plus what
# earlier runs found (build-fuzz/corpus/<name>), and prints executions and
# findings per target. Findings (crash-*, leak-*, timeout-*, oom-*) are kept
# in build-fuzz/findings/; the exit status is 1 when there is any. Inputs
# slower than 10 s (slow-unit-*) are kept there too and counted apart.
#
# Each run: -malloc_limit_mb=256 (the harness sets relattn_max_memory to
# 64 MB, so a bigger allocation means a size escaped the per-call bound),
# -timeout=20 s per input, -rss_limit_mb=2048.
secs=${FUZZ_SECONDS:-60}
out=build-fuzz
mkdir -p "$out/findings" "$out/logs"
total=0
summary=""
for t in "$@"; do
  bin="$out/fuzz_$t"
  seeds="tests/fuzz/corpus/$t"
  work="$out/corpus/$t"
  mkdir -p "$work" "$seeds"
  dict=""
  [ -f "tests/fuzz/$t.dict" ] && dict="-dict=tests/fuzz/$t.dict"
  log="$out/logs/$t.log"
  before=$(ls "$out/findings" | grep "^$t-" | grep -vc "slow-unit")
  slow0=$(ls "$out/findings" | grep "^$t-" | grep -c "slow-unit")
  echo "fuzz: $t for ${secs}s (log: $log)"
  "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
    -malloc_limit_mb=256 -max_len=16384 -print_final_stats=1 \
    -artifact_prefix="$out/findings/$t-" $dict "$work" "$seeds" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
  after=$(ls "$out/findings" | grep "^$t-" | grep -vc "slow-unit")
  slow=$(( $(ls "$out/findings" | grep "^$t-" | grep -c "slow-unit") - slow0 ))
  found=$((after - before))
  if [ "$rc" != 0 ] && [ "$found" = 0 ]; then found=1; fi
  [ "$found" != 0 ] && grep -m1 -E 'ERROR|FUZZ_CHECK|runtime error' "$log"
  total=$((total + found))
  summary="$summary$(printf '%-14s %12s  %8d  %d' "$t" "${execs:-0}" "$found" "$slow")
"
done
echo
printf '%-14s %12s  %8s  %s\n' target executions findings "slow (>10 s)"
printf '%s' "$summary"
[ "$total" = 0 ]
