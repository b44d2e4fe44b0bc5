#!/usr/bin/env bash
# Instructions per entity of one Lua benchmark loop under callgrind, split by function: the
# run.lua --profile loop for FRAMES frames minus the same run for BASE frames (setup cancels).
# Usage: bench/lua/profile.sh CASE [FRAMES] [BASE]   (CASE: a run.lua --profile loop: bulk,
#        each, each_system, arrays, tables, get, get_plain, get_plain_table, spawn,
#        spawn_tables, add_remove...; the per-op loops run one operation per entity per frame)
#        KILN_BENCH_ENTITIES=N divides by N entities (20000 runs five times faster);
#        KILN_SO_DIR=folder loads kiln.so from there (to compare two builds; build-bench/lua)
# The stock lua5.4 is stripped, so this links a bare interpreter against liblua5.4.a, whose
# symbols name the VM's functions, and loads the module from build-bench/lua.
set -euo pipefail
case_name=${1:?usage: bench/lua/profile.sh CASE [FRAMES] [BASE]}
frames=${2:-13}
base=${3:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
interp=$root/build-bench/bench/lua_prof
liblua=$(find /usr/lib /usr/local/lib -name 'liblua5.4.a' 2>/dev/null | head -n 1)
[ -n "$liblua" ] || { echo "profile.sh: liblua5.4.a not found (install liblua5.4-dev)" >&2; exit 1; }
mkdir -p "$(dirname "$interp")"
if [ ! -x "$interp" ]; then
    src=$(mktemp /tmp/kiln-lua-prof.XXXXXX.c)
    cat >"$src" <<'EOF'
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
int main(int argc, char **argv) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_createtable(L, argc, 0);
    for (int i = 0; i < argc; i++) { lua_pushstring(L, argv[i]); lua_rawseti(L, -2, i - 1); }
    lua_setglobal(L, "arg");
    if (argc < 2) {
        fprintf(stderr, "usage: lua_prof script [args]\n");
        return 2;
    }
    if (luaL_loadfile(L, argv[1]) != LUA_OK) {
        fprintf(stderr, "%s\n", lua_tostring(L, -1));
        return 1;
    }
    for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
    if (lua_pcall(L, argc - 2, 0, 0) != LUA_OK) {
        fprintf(stderr, "%s\n", lua_tostring(L, -1));
        return 1;
    }
    lua_close(L);
    return 0;
}
EOF
    cc -O2 -g $(pkg-config --cflags lua5.4) "$src" -o "$interp" -Wl,-E "$liblua" -lm -ldl
    rm -f "$src"
fi

out=$(mktemp -d /tmp/kiln-lua-callgrind.XXXXXX)
trap 'rm -rf "$out"' EXIT
for f in "$frames" "$base"; do
    (cd "$root" && LUA_CPATH="${KILN_SO_DIR:-build-bench/lua}/?.so" valgrind --tool=callgrind \
        --callgrind-out-file="$out/cg.$f" "$interp" bench/lua/run.lua --profile "$case_name" \
        --frames "$f" >/dev/null 2>&1)
    callgrind_annotate --auto=no --threshold=100 "$out/cg.$f" 2>/dev/null |
        awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print "TOTAL", $1; next }
             /^ *[0-9][0-9,]* +\( *[0-9.]+%\) +[^ ]/ {
                 n = $1; gsub(",", "", n); sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "");
                 sub(/ \[.*$/, ""); sub(/^.*:/, ""); s[$0] += n }
             END { for (k in s) print k, s[k] }' >"$out/fn.$f"
done
echo "callgrind: $case_name, instructions per entity per frame ($frames minus $base frames)"
awk -v ents="${KILN_BENCH_ENTITIES:-100000}" -v frames=$((frames - base)) '
    NR == FNR { a[$1] = $2; next }
    { b[$1] = $2 }
    END {
        total = (a["TOTAL"] - b["TOTAL"]) / frames / ents
        printf "%10.1f  total\n", total
        for (k in a) if (k != "TOTAL") { d = (a[k] - b[k]) / frames / ents; if (d >= 0.02 * total) printf "%10.1f  %5.1f%%  %s\n", d, 100 * d / total, k }
    }' "$out/fn.$frames" "$out/fn.$base" | sort -k1,1 -gr
