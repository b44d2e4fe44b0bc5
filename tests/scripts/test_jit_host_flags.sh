#!/usr/bin/env bash
# test_jit_host_flags.sh: the binding's own files build alike whichever target makes them. The
# LuaJIT hosts (test-jit-tools, asteroids-jit, bench-jit-build) put compat.h in front of their
# text; a lua/src file built with it saw the system headers before its feature-test macros.
# From make's commands for those targets (make -n -B: nothing is built), checks that no
# lua/src file is compiled with a forced include, and compiles compat.c and mod_files.c as
# those commands do with implicit declarations as errors. The same for the kiln command's and
# the game's files: only one calling a lua_/luaL_ function gets the include, and each setting
# a feature-test macro (histfile.c: realpath) is compiled so. Exits non-zero on a failure.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
status=0
cmds=$(make -n -B --no-print-directory test-jit-tools asteroids-jit bench-jit-build 2>&1 |
       grep -E ' -c lua/src/[a-z_]+\.c( |$)' | sort -u)
if [ -z "$cmds" ]; then echo "FAILED: make -n printed no command compiling lua/src"; exit 1; fi
forced=$(grep -e '-include' <<<"$cmds" | grep -oE 'lua/src/[a-z_]+\.c' | sort -u | tr '\n' ' ')
if [ -n "$forced" ]; then echo "FAILED: compiled with a host's forced include: $forced"; status=1
else echo "ok: $(wc -l <<<"$cmds") commands compile lua/src files without a forced include"; fi
n=0
while IFS= read -r cmd; do
    n=$((n + 1))
    cmd=$(sed -E -e 's/ -MMD -MP//' -e "s| -o [^ ]+| -o $tmp/$n.o|" <<<"$cmd")
    file=$(grep -oE 'lua/src/[a-z_]+\.c' <<<"$cmd")
    if out=$(eval "$cmd -Werror=implicit-function-declaration" 2>&1); then
        echo "ok: $file declares what it calls (command $n)"
    else
        status=1; echo "FAILED: $file (command $n):"; printf '%s\n' "$out" | head -n 5
    fi
done < <(grep -E ' -c lua/src/(compat|mod_files)\.c( |$)' <<<"$cmds")
host=$(make -n -B --no-print-directory test-jit-tools asteroids-jit 2>&1 |
       grep -E ' -c (lua/repl|examples/asteroids)/[a-z_]+\.c( |$)' | sort -u)
if [ -z "$host" ]; then echo "FAILED: make -n printed no command compiling lua/repl"; exit 1; fi
while IFS= read -r cmd; do
    n=$((n + 1))
    file=$(grep -oE '(lua/repl|examples/asteroids)/[a-z_]+\.c' <<<"$cmd")
    calls=$(grep -cE '\<luaL?_[a-z]+ *[(]' "$file")
    if grep -qe '-include' <<<"$cmd"; then
        if [ "$calls" -eq 0 ]; then status=1; echo "FAILED: $file makes no Lua call but has a forced include"; fi
    elif [ "$calls" -gt 0 ]; then
        status=1; echo "FAILED: $file makes Lua calls without the host's forced include"
    fi
    grep -qE '^#define _[A-Z_]*SOURCE' "$file" || continue
    cmd=$(sed -E -e 's/ -MMD -MP//' -e "s| -o [^ ]+| -o $tmp/$n.o|" <<<"$cmd")
    if out=$(eval "$cmd -Werror=implicit-function-declaration" 2>&1); then
        echo "ok: $file declares what it calls (command $n)"
    else
        status=1; echo "FAILED: $file (command $n):"; printf '%s\n' "$out" | head -n 5
    fi
done <<<"$host"
[ $status -eq 0 ] && echo "ok: $(wc -l <<<"$host") host files: the forced include exactly where Lua is called"
exit $status
