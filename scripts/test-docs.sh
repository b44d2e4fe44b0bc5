#!/usr/bin/env bash
# test-docs.sh: the docs group of `make test`: the C API page is current with the headers, the
# tests of tools/apidoc.lua, the callbacks' user pointers as the page's conventions say, and every
# doc sample; ends with one "N passed, N failed" line.
# usage: scripts/test-docs.sh BUILD PAGE HEADER...   (from the repository root)
set -u
build=$1; shift
passed=0; failed=0
# count OUTPUT: adds the last "N passed, N failed" line of OUTPUT (none: one failure).
count() {
  local line p f
  line=$(printf '%s\n' "$1" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
  if [ -z "$line" ]; then failed=$((failed + 1)); return; fi
  p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
  passed=$((passed + p)); failed=$((failed + f))
}

if out=$(lua5.4 tools/apidoc.lua --check "$@" 2>&1); then
  printf '%s\n' "$out"; passed=$((passed + 1))
else
  printf '%s\n' "$out"; failed=$((failed + 1))
fi
out=$(lua5.4 tests/docs/apidoc_test.lua 2>&1); printf '%s\n' "$out"; count "$out"
out=$(lua5.4 tests/docs/callbacks_test.lua "$@" 2>&1); printf '%s\n' "$out"; count "$out"
out=$(lua5.4 tests/docs/run_samples.lua "$build" README.md docs/*.md 2>&1); printf '%s\n' "$out"; count "$out"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
