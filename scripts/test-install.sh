#!/usr/bin/env bash
# test-install.sh: stages `make install DESTDIR=... PREFIX=/usr/local` in a scratch directory and
# uses it only through pkg-config (a C host, an embedding host) and LUA_CPATH (`require "kiln"`).
# usage: scripts/test-install.sh [BUILD]   (BUILD: the build folder to install from, default build)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
prefix=/usr/local
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
stage="$scratch/root"
passed=0; failed=0

# check NAME COMMAND...: runs the command, counts it, and shows its output when it fails.
check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then
    passed=$((passed + 1)); echo "ok: $name"
  else
    failed=$((failed + 1)); echo "FAILED: $name"
    [ -n "$out" ] && printf '%s\n' "$out" | sed 's/^/    /'
  fi
}

version=$(sed -n 's/^#define KILN_VERSION_STRING "\(.*\)"/\1/p' "$root/core/include/kiln.h")
major=${version%%.*}

check "make install DESTDIR=... PREFIX=$prefix" \
  make --no-print-directory -C "$root" install BUILD="$build" DESTDIR="$stage" PREFIX="$prefix"

installed_files() {
  local f missing=0
  for f in include/kiln.h include/kiln_transform.h include/kiln_lua.h lib/libkiln.a \
           lib/libkiln_lua.a "lib/libkiln.so.$version" lib/pkgconfig/kiln.pc \
           lib/pkgconfig/kiln-lua.pc lib/lua/5.4/kiln.so bin/kiln; do
    [ -f "$stage$prefix/$f" ] || { echo "missing: $prefix/$f"; missing=1; }
  done
  [ "$(readlink "$stage$prefix/lib/libkiln.so.$major")" = "libkiln.so.$version" ] ||
    { echo "libkiln.so.$major does not point at libkiln.so.$version"; missing=1; }
  [ "$(readlink "$stage$prefix/lib/libkiln.so")" = "libkiln.so.$major" ] ||
    { echo "libkiln.so does not point at libkiln.so.$major"; missing=1; }
  return $missing
}
check "every header, library, .pc file, the module and the command are installed" installed_files

# The .pc files name the real prefix, never the staging directory.
pc_prefix() {
  grep -qx "prefix=$prefix" "$stage$prefix/lib/pkgconfig/kiln.pc" &&
    grep -qx "prefix=$prefix" "$stage$prefix/lib/pkgconfig/kiln-lua.pc" &&
    ! grep -q "$scratch" "$stage$prefix/lib/pkgconfig/"*.pc
}
check "the .pc files say prefix=$prefix" pc_prefix

# A sysroot is the target's whole file system: the staged install plus, linked in, the
# system directories the Debian .pc files of lua5.4 and cglm point at.
for dir in $(pkg-config --cflags-only-I --libs-only-L lua5.4 cglm 2>/dev/null | tr ' ' '\n' |
             sed -nE 's/^-[IL]//p' | sort -u); do
  [ -e "$stage$dir" ] && continue  # staged, or inside a directory linked in already
  mkdir -p "$stage$(dirname "$dir")" && ln -s "$dir" "$stage$dir"
done
export PKG_CONFIG_SYSROOT_DIR="$stage"
export PKG_CONFIG_PATH="$stage$prefix/lib/pkgconfig"
pc() { pkg-config "$@"; }

check "pkg-config --modversion kiln and kiln-lua give kiln.h's version ($version)" \
  bash -c '[ "$(pkg-config --modversion kiln)" = "$1" ] && [ "$(pkg-config --modversion kiln-lua)" = "$1" ]' _ "$version"

# cglm's headers sit on the default include path on Debian, so compiling alone would not
# notice a kiln.pc that forgets it: ask pkg-config directly.
check "kiln.pc requires cglm (privately: its headers, not a library)" bash -c \
  'pkg-config --print-requires-private kiln | grep -qx cglm && ! pkg-config --libs kiln | grep -q cglm'
check "kiln-lua.pc requires kiln and lua5.4" bash -c \
  'r=$(pkg-config --print-requires kiln-lua) && grep -q "^kiln = " <<<"$r" && grep -qx lua5.4 <<<"$r"'

cat > "$scratch/host.c" <<'EOF'
/* A C host of the installed kiln: the core and the transform header (which needs cglm). */
#include <stdio.h>
#include <string.h>
#include "kiln_transform.h"

int main(void) {
    kiln_world *world = kiln_world_create(NULL);
    kiln_entity e = KILN_NULL_ENTITY;
    if (world == NULL || kiln_spawn(world, &e) != KILN_OK || !kiln_is_alive(world, e)) return 1;
    vec3 v = {1, 2, 3};
    glm_vec3_scale(v, 2.0f, v);
    printf("kiln %s: %lld entity, v.z = %g\n", KILN_VERSION_STRING,
           (long long)kiln_entity_count(world), (double)v[2]);
    kiln_world_destroy(world);
    return 0;
}
EOF
cat > "$scratch/embed.c" <<'EOF'
/* A host that embeds Lua with the installed binding: kiln is preloaded, not searched for. */
#include <stdio.h>
#include <lauxlib.h>
#include <lualib.h>
#include "kiln_lua.h"

int main(void) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    luaL_requiref(L, "kiln", luaopen_kiln, 1);
    lua_pop(L, 1);
    const char *chunk =
        "local w = kiln.world()\n"
        "w:component('Position', 'float x, y;')\n"
        "local e = w:spawn{Position = {x = 3, y = 4}}\n"
        "print('embedded kiln ' .. kiln.version .. ': x = ' .. w:get(e, 'Position').x)\n"
        "w:close()\n";
    int status = luaL_dostring(L, chunk);
    if (status != LUA_OK) fprintf(stderr, "%s\n", lua_tostring(L, -1));
    lua_close(L);
    return status == LUA_OK ? 0 : 1;
}
EOF

libdir="$stage$prefix/lib"
# shellcheck disable=SC2046
check "a C host compiles and links with \$(pkg-config --cflags --libs kiln)" \
  cc -std=c11 -Wall -Werror "$scratch/host.c" -o "$scratch/host" $(pc --cflags --libs kiln)
check "the C host needs libkiln.so.$major (the soname) and runs" bash -c '
  readelf -d "$1" | grep -q "NEEDED.*\[libkiln.so.$2\]" || { echo "not linked against libkiln.so.$2"; exit 1; }
  out=$(LD_LIBRARY_PATH="$3" "$1") || exit 1
  [ "$out" = "kiln $4: 1 entity, v.z = 6" ] || { echo "unexpected output: $out"; exit 1; }' _ \
  "$scratch/host" "$major" "$libdir" "$version"
# shellcheck disable=SC2046
check "an embedding host compiles and links with \$(pkg-config --cflags --libs kiln-lua)" \
  cc -std=c11 -Wall -Werror "$scratch/embed.c" -o "$scratch/embed" $(pc --cflags --libs kiln-lua)
check "the embedding host runs a chunk with kiln preloaded" bash -c '
  out=$(LD_LIBRARY_PATH="$2" "$1") || exit 1
  [ "$out" = "embedded kiln $3: x = 3.0" ] || { echo "unexpected output: $out"; exit 1; }' _ \
  "$scratch/embed" "$libdir" "$version"

# The module: the stock lua5.4 finds it on LUA_CPATH at kiln-lua.pc's cmoddir (a default
# Lua path when PREFIX is /usr/local), from any directory.
cmoddir=$(pc --variable=cmoddir kiln-lua)
cmoddir=${cmoddir#"$stage"}  # pkgconf puts the sysroot in front of path variables
check "kiln-lua.pc's cmoddir is $prefix/lib/lua/5.4" test "$cmoddir" = "$prefix/lib/lua/5.4"
check "require \"kiln\" loads the installed module" bash -c '
  cd "$1" && out=$(LUA_CPATH="$2/?.so" lua5.4 -e "
    local kiln = require \"kiln\"
    assert(package.searchpath(\"kiln\", package.cpath) == \"$2/kiln.so\")
    local w = kiln.world(); w:component(\"P\", \"float x;\"); w:spawn{P = {x = 1}}
    print(kiln.version, #w:entities())") || exit 1
  [ "$out" = "$3	1" ] || { echo "unexpected output: $out"; exit 1; }' _ \
  "$scratch" "$stage$cmoddir" "$version"
check "the installed kiln command runs a script" bash -c '
  printf "local kiln = require \"kiln\"\nprint(\"script \" .. kiln.version)\n" > "$1/s.lua"
  out=$(cd "$1" && "$2" s.lua) || exit 1
  [ "$out" = "script $3" ] || { echo "unexpected output: $out"; exit 1; }' _ \
  "$scratch" "$stage$prefix/bin/kiln" "$version"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
