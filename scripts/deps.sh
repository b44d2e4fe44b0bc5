#!/bin/sh
# deps.sh: installs the Debian packages kiln builds and tests with, only those missing.
# Safe to run repeatedly; needs root (or sudo) only when something is missing.
set -eu
# clang and libclang-rt-14-dev (libFuzzer, the sanitizer runtimes) serve the fuzz groups only.
# luajit and libluajit-5.1-dev serve the LuaJIT build of the binding (make lua-jit, test-jit);
# valgrind serves test-jit-valgrind (memory errors inside libluajit, which ASan cannot see);
# g++ serves test-cxx (the public headers compiled, and the libraries linked, by a C++ host).
# locales serves the specs of a host in a decimal-comma or Latin-1 C locale (generated below).
# strace serves the tool checks that see which flags kiln opens files with and how the game sleeps.
PACKAGES="make gcc g++ libc6-dev pkg-config liblua5.4-dev lua5.4 libcglm-dev check lua-busted libedit-dev libjansson-dev libxxhash-dev clang libclang-rt-14-dev luajit libluajit-5.1-dev valgrind locales strace"
missing=""
for p in $PACKAGES; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$status" in
    *"install ok installed"*) ;;
    *) missing="$missing $p" ;;
  esac
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ -n "$missing" ]; then
  echo "kiln: installing missing Debian packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
# The locales a player's machine may have (tests/lua/helpers.lua's H.in_comma_locale and
# H.in_latin1_locale): without them those specs are pending, not run.
have=$(locale -a 2>/dev/null | tr 'A-Z' 'a-z' | tr -d '-')
for want in "de_DE UTF-8 de_DE.UTF-8" "de_DE ISO-8859-1 de_DE.ISO-8859-1"; do
  set -- $want
  case "$have" in
    *"$(printf '%s' "$3" | tr 'A-Z' 'a-z' | tr -d '-')"*) ;;
    *) echo "kiln: generating the $3 locale"
       $SUDO localedef -i "$1" -f "$2" "$3" || echo "kiln: could not generate $3 (its specs stay pending)" ;;
  esac
done
