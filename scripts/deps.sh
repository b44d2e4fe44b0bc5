#!/bin/sh
# deps.sh: installs the Debian packages kiln builds and tests with, only those missing.
# Safe to run repeatedly; needs root (or sudo) only when something is missing.
set -eu
# clang and libclang-rt-14-dev (libFuzzer, the sanitizer runtimes) serve the fuzz groups only.
# luajit and libluajit-5.1-dev serve the LuaJIT build of the binding (make lua-jit, test-jit);
# valgrind serves test-jit-valgrind (memory errors inside libluajit, which ASan cannot see);
# g++ serves test-cxx (the public headers compiled, and the libraries linked, by a C++ host).
PACKAGES="make gcc g++ libc6-dev pkg-config liblua5.4-dev lua5.4 libcglm-dev check lua-busted libedit-dev libjansson-dev libxxhash-dev clang libclang-rt-14-dev luajit libluajit-5.1-dev valgrind"
missing=""
for p in $PACKAGES; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$status" in
    *"install ok installed"*) ;;
    *) missing="$missing $p" ;;
  esac
done
[ -z "$missing" ] && exit 0
echo "kiln: installing missing Debian packages:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
