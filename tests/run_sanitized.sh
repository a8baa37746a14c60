#!/bin/bash
# Runs a command (the sanitized test suite; its environment comes from make).
# LeakSanitizer's exit-time check stops every thread with ptrace; on a loaded
# machine that step itself sometimes dies ("LeakSanitizer has encountered a
# fatal error"), which says nothing about the code under test. Such a run is
# repeated once. A real finding (a leak report, an ASan or UBSan error) is not
# retried: it fails the run.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for attempt in 1 2; do
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] && exit 0
  if grep -q "LeakSanitizer has encountered a fatal error" "$log" &&
     ! grep -q -E "ERROR: (AddressSanitizer|LeakSanitizer: detected)|runtime error:" "$log"; then
    [ "$attempt" = 1 ] && echo "== LeakSanitizer's own tracer failed (not a finding); running once more"
    continue
  fi
  exit "$rc"
done
exit "$rc"
