#!/usr/bin/env bash
# test_runner.sh: scripts/test-all.sh (what `make test` and CI run) counts each group's
# results and, after all groups, names what failed in each failing group, so the end of a
# log names the failing tests. Runs it over a scratch Makefile whose groups print what the
# real runners print. Ends with "N passed, N failed".
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/scripts" && cp "$root/scripts/test-all.sh" "$dir/scripts/"
cat >"$dir/Makefile" <<'MK'
good:
	@echo "10 passed, 0 failed"
busted:
	@printf '%s\n' "++-" "Failure -> tests/lua/x_spec.lua @ 12" "x does a thing" "x_spec.lua:14: Expected 1" "" \
	    "2 successes / 1 failure / 0 errors / 0 pending : 1 seconds"; exit 1
jit:
	@printf '%s\n' "a_spec.lua: 5 successes / 0 failures / 0 errors / 0 pending : 1 s" \
	    "b_spec.lua: 4 successes / 1 failure / 0 errors / 0 pending : 1 s" "9 passed, 1 failed"; exit 1
asan:
	@printf '%s\n' "noise" "SUMMARY: AddressSanitizer: heap-use-after-free q.c:475 in q_gc"; exit 2
check:
	@printf '%s\n' "t.c:44:F:tc:some_case:0: Assertion 'a == b' failed" "failing suites: build/t" "3 passed, 1 failed"; exit 1
crash:
	@printf '%s\n' "one" "two" "three"; exit 139
skip:
	@echo "skipped: no tool"
MK
out=$(cd "$dir" && bash scripts/test-all.sh good busted jit asan check crash skip 2>&1); rc=$?
passed=0; failed=0
expect() { # expect NAME TEXT: the runner's output holds TEXT as a whole line, after the groups
  if sed -n '/^--- what failed in busted$/,$p' <<<"$out" | grep -qxF -- "$2"; then passed=$((passed + 1))
  else failed=$((failed + 1)); echo "FAIL  $1: no line '$2'"; fi
}
expect "busted: the failing test's file" "Failure -> tests/lua/x_spec.lua @ 12"
expect "busted: its name" "x does a thing"
expect "busted: its message" "x_spec.lua:14: Expected 1"
expect "test-jit: the file with a failure" "b_spec.lua: 4 successes / 1 failure / 0 errors / 0 pending : 1 s"
expect "a sanitizer's summary" "SUMMARY: AddressSanitizer: heap-use-after-free q.c:475 in q_gc"
expect "a Check failure" "t.c:44:F:tc:some_case:0: Assertion 'a == b' failed"
expect "a group that names nothing: its last lines" "three"
expect "the groups in order" "--- what failed in crash"
expect "the failing groups" "failing groups: busted jit asan check crash"
expect "the skipped group" "SKIPPED group: skip (no tool)"
expect "the counts" "24 passed, 5 failed"
if grep -qF "a_spec.lua: 5 successes" <<<"$(sed -n '/^--- what failed in/,$p' <<<"$out")"; then
  failed=$((failed + 1)); echo "FAIL  a passing spec file is not named among the failures"
else passed=$((passed + 1)); fi
if [ "$rc" -ne 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL  the runner exited 0"; fi
[ "$failed" -ne 0 ] && printf '%s\n' "$out" | tail -n 30
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
