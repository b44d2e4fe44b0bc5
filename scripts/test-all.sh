#!/usr/bin/env bash
# test-all.sh: runs every test group of `make test` in order, shows their output, and ends
# with one line "N passed, N failed" over all groups; exits non-zero when any group failed.
# Before that line, for each failing group, the lines of its output that name what failed.
# A group whose last line is "skipped: WHY" counts neither way and is listed before that line.
# usage: scripts/test-all.sh GROUP... (make targets)
set -u
passed=0; failed=0; bad=(); skipped=(); digests=()
# The lines of a group's output that say what failed, at most 30 of them: repeated after all
# groups, so that the end of the log (all a CI summary may keep) names the failing tests.
what_failed() {
  { printf '%s\n' "$1" | grep -E -A2 '^(Failure|Error) -> ' | grep -v '^--$'
    printf '%s\n' "$1" | grep -E ':[0-9]+:[FE]:|^(FAIL|FAILED|not ok)\b|^failing suites: |SUMMARY: [A-Za-z]*Sanitizer|^==[0-9]+==ERROR: |: error: |Segmentation fault|Aborted|core dumped|_spec\.lua: [0-9]+ successes? / [0-9]+ failures? / [0-9]+ errors?' |
      grep -vE ' / 0 failures? / 0 errors?'
  } | head -n 30
}
for group in "$@"; do
  echo "=== $group"
  out=$(make --no-print-directory "$group" 2>&1); rc=$?
  printf '%s\n' "$out"
  why=$(printf '%s\n' "$out" | tail -n 1 | sed -nE 's/^skipped: (.*)/\1/p')
  if [ "$rc" -eq 0 ] && [ -n "$why" ]; then
    skipped+=("$group ($why)")
    continue
  fi
  # run-tests.sh and the docs/examples runners end with "N passed, N failed";
  # busted ends with "N successes / N failures / N errors / N pending".
  line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
  if [ -n "$line" ]; then
    p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
  else
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ successes? / [0-9]+ failures? / [0-9]+ errors?' | tail -n 1)
    if [ -n "$line" ]; then
      p=$(sed -E 's/^([0-9]+) success.*/\1/' <<<"$line")
      f=$(( $(sed -E 's/.* ([0-9]+) failures?.*/\1/' <<<"$line") + $(sed -E 's/.* ([0-9]+) errors?.*/\1/' <<<"$line") ))
    else
      p=0; f=1
    fi
  fi
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then
    bad+=("$group")
    lines=$(what_failed "$out")
    [ -z "$lines" ] && lines=$(printf '%s\n' "$out" | tail -n 10) # nothing named: its last lines
    digests+=("--- what failed in $group"$'\n'"$lines")
  fi
done
for d in "${digests[@]}"; do printf '%s\n' "$d"; done
for s in "${skipped[@]}"; do echo "SKIPPED group: $s"; done
[ ${#bad[@]} -gt 0 ] && echo "failing groups: ${bad[*]}"
echo "$passed passed, $failed failed"
[ ${#bad[@]} -eq 0 ]
