#!/usr/bin/env bash
# Runs each test binary given, prints its output, and ends with one summary line
# "N passed, N failed" over all suites; exits non-zero when any suite failed.
set -u
passed=0; failed=0; bad_suites=()
for bin in "$@"; do
  out=$("$bin" 2>&1); rc=$?
  printf '%s\n' "$out"
  # Check prints "NN%: Checks: N, Failures: N, Errors: N"
  line=$(printf '%s\n' "$out" | grep -E '^[0-9]+%: Checks: ' | tail -n 1)
  if [ -n "$line" ]; then
    checks=$(sed -E 's/.*Checks: ([0-9]+).*/\1/' <<<"$line")
    fails=$(sed -E 's/.*Failures: ([0-9]+).*/\1/' <<<"$line")
    errs=$(sed -E 's/.*Errors: ([0-9]+).*/\1/' <<<"$line")
    passed=$((passed + checks - fails - errs)); failed=$((failed + fails + errs))
  fi
  if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
    bad_suites+=("$bin"); [ -z "$line" ] && failed=$((failed + 1))
  fi
done
[ ${#bad_suites[@]} -gt 0 ] && echo "failing suites: ${bad_suites[*]}"
echo "$passed passed, $failed failed"
[ ${#bad_suites[@]} -eq 0 ]
