#!/usr/bin/env bash
# test-jit.sh BUILD: runs the busted specs under luajit against BUILD/lua/kiln.so (the LuaJIT
# build), leaving out what tests/lua/jit_exclusions.txt lists: each entry is printed with its
# reason, and an entry naming a test that no longer exists fails the run (no silent skips).
# Ends with "N passed, N failed" like the other groups. With --one-process as the second
# argument, every spec file runs in one luajit process instead of one each, the way a game
# keeps one state: what one file leaves behind (garbage, compiled traces, a large live heap)
# then meets the others.
set -u
build=${1:-build-jit}
one=${2:-}
list=tests/lua/jit_exclusions.txt
if ! command -v luajit >/dev/null 2>&1; then
  echo "luajit is not installed (scripts/deps.sh installs it)"; echo "0 passed, 1 failed"; exit 1
fi
export LUA_CPATH="$build/lua/?.so;;" KILN_BUILD="$build" KILN_LUA=luajit
busted=(luajit /usr/bin/busted)
# Lua pattern of a literal test name (busted matches --filter-out as a pattern).
pattern() { printf '%s' "$1" | sed -e 's/[][().%+*?^$-]/%&/g'; }
passed=0; failed=0; stale=0
declare -A whole=()
declare -A names=()
while IFS='|' read -r file name why; do
  file=$(echo "$file" | xargs); name=$(echo "$name" | sed 's/^ *//; s/ *$//'); why=$(echo "$why" | sed 's/^ *//')
  case "$file" in ''|'#'*) continue ;; esac
  if [ "$name" = "*" ]; then
    whole[$file]=1; echo "excluded under LuaJIT: $file (all of it): $why"
  else
    names[$file]+="$name"$'\n'; echo "excluded under LuaJIT: $file: $name: $why"
  fi
done < "$list"
if [ "$one" = "--one-process" ]; then
  files=(); args=()
  for spec in tests/lua/*_spec.lua; do
    file=$(basename "$spec")
    [ -n "${whole[$file]:-}" ] && continue
    files+=("$spec")
    while IFS= read -r name; do
      [ -n "$name" ] && args+=("--filter-out=$(pattern "$name")")
    done <<<"${names[$file]:-}"
  done
  out=$("${busted[@]}" -o plainTerminal "${args[@]}" "${files[@]}" 2>&1); rc=$?
  line=$(grep -E '^[0-9]+ success' <<<"$out" | tail -n 1)
  if [ -z "$line" ]; then printf '%s\n' "$out" | tail -n 20; echo "0 passed, 1 failed"; exit 1; fi
  printf '%s\n' "$out" | sed -n '/^\(Failure\|Error\) ->/,/^$/p'
  echo "all files in one process: $line"
  passed=$(sed -E 's/^([0-9]+) success.*/\1/' <<<"$line")
  failed=$(sed -E 's/.* ([0-9]+) failures? \/ ([0-9]+) errors?.*/\1 \2/' <<<"$line" | awk '{print $1 + $2}')
  [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
fi
for spec in tests/lua/*_spec.lua; do
  file=$(basename "$spec")
  [ -n "${whole[$file]:-}" ] && continue
  args=()
  if [ -n "${names[$file]:-}" ]; then
    listed=$("${busted[@]}" --list "$spec" 2>&1)
    while IFS= read -r name; do
      [ -z "$name" ] && continue
      if ! grep -qF ": $name" <<<"$listed"; then
        echo "FAILED: $list names '$name' in $file, which has no such test"; stale=$((stale + 1))
      fi
      args+=("--filter-out=$(pattern "$name")")
    done <<<"${names[$file]}"
  fi
  out=$("${busted[@]}" -o plainTerminal "${args[@]}" "$spec" 2>&1); rc=$?
  line=$(grep -E '^[0-9]+ success' <<<"$out" | tail -n 1)
  if [ -z "$line" ]; then
    printf '%s\n' "$out" | tail -n 20; echo "FAILED: $file did not run"; failed=$((failed + 1)); continue
  fi
  ok=$(sed -E 's/^([0-9]+) success.*/\1/' <<<"$line")
  bad=$(sed -E 's/.* ([0-9]+) failures? \/ ([0-9]+) errors?.*/\1 \2/' <<<"$line" | awk '{print $1 + $2}')
  passed=$((passed + ok)); failed=$((failed + bad))
  if [ "$rc" -ne 0 ] || [ "$bad" -ne 0 ]; then
    printf '%s\n' "$out" | sed -n '/^\(Failure\|Error\) ->/,/^$/p'
    [ "$bad" -eq 0 ] && failed=$((failed + 1))
  fi
  echo "$file: $line"
done
# compat.h's registry key (klua_compat_push_slot) is defined once, in compat.c: declared
# static in the header, every file of the binding pushing a long string had its own (22).
if command -v nm >/dev/null 2>&1; then
  slots=$(nm "$build/lua/kiln.so" | grep -c ' klua_compat_push_slot$')
  if [ "$slots" -eq 1 ]; then passed=$((passed + 1)); else
    echo "FAILED: $build/lua/kiln.so holds $slots klua_compat_push_slot (one expected)"; failed=$((failed + 1))
  fi
fi
failed=$((failed + stale))
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
