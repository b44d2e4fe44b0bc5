#!/usr/bin/env bash
# test-valgrind.sh BUILD: runs each host script tests/valgrind/jit_*.lua under valgrind with
# luajit against BUILD/lua/kiln.so (the LuaJIT build). These cover memory errors inside
# libluajit, which ASan cannot see (it is not instrumented): a script passes when it ends
# well and valgrind reports no error. Ends with "N passed, N failed" like the other groups.
set -u
build=${1:-build-jit}
for tool in valgrind luajit; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool is not installed (scripts/deps.sh installs it)"; echo "0 passed, 1 failed"; exit 1
  fi
done
passed=0; failed=0
for script in tests/valgrind/jit_*.lua; do
  out=$(LUA_CPATH="$build/lua/?.so;;" valgrind -q --error-exitcode=99 luajit "$script" 2>&1); rc=$?
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1)); echo "passed: $script: $(printf '%s\n' "$out" | tail -n 1)"
  else
    failed=$((failed + 1)); printf '%s\n' "$out" | grep -v -E '^[0-9]+\s+(true|false)$' | head -n 40
    echo "FAILED: $script (rc=$rc; 99: valgrind found errors)"
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
