#!/usr/bin/env bash
# test_fp_builds.sh: propagation gives the same bits however it is compiled. Builds
# test_transform_bits against BUILD's libkiln.a with propagate.c compiled as other builds compile
# it (a host's GNU C mode with FMA, the portable path aarch64 takes, under gcc and clang, which
# fuse a * b + c by default) and runs it: its known hash must hold in each. Then the sample
# game's C systems, built with the Makefile's flags by clang for an FMA target, must hold no
# fused instruction.
# Usage: tests/scripts/test_fp_builds.sh [BUILD] (default build).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
build=${1:-build}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! grep -qw fma /proc/cpuinfo 2>/dev/null; then echo "skipped: this CPU runs no FMA code"; exit 0; fi
if [ ! -f "$build/libkiln.a" ]; then echo "FAILED: no $build/libkiln.a (build it first)"; exit 1; fi
inc="-Icore/include -Icore/src -Iaddons/transform/include -Iaddons/persist/include"
check="$(pkg-config --cflags check 2>/dev/null) -Itests/support"
libs="$(pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lrt -lm) -ljansson -lm -lpthread"
status=0
variant() { # NAME CC FLAGS...
    local name=$1 cc=$2; shift 2
    if ! command -v "$cc" >/dev/null; then echo "skipped: $name (no $cc)"; return; fi
    if ! "$cc" -O2 "$@" $inc -c addons/transform/src/propagate.c -o "$tmp/propagate.o" 2>"$tmp/err" ||
       ! "$cc" -O2 $inc $check tests/core/test_transform_bits.c tests/support/*.c "$tmp/propagate.o" \
             "$build/libkiln.a" $libs -o "$tmp/bits" 2>>"$tmp/err"; then
        status=1; echo "FAILED: $name does not build:"; head -n 5 "$tmp/err"; return
    fi
    if out=$(CK_FORK=no "$tmp/bits" 2>&1); then echo "ok: $name gives the known bits"
    else status=1; echo "FAILED: $name:"; grep -E ':F:|:E:' <<<"$out" | head -n 3; fi
}
variant "gcc GNU C with FMA" gcc -std=gnu11 -mfma
variant "gcc GNU C with FMA, portable path" gcc -std=gnu11 -mfma -U__SSE2__
variant "clang with FMA, portable path" clang -std=c11 -mfma -U__SSE2__

# The game's systems (a host's code, with kiln's build flags): make's own command, by clang.
if command -v clang >/dev/null; then
    cmd=$(make -n -B --no-print-directory BUILD="$tmp/game" CC=clang "$tmp/game/examples/asteroids" 2>/dev/null |
          grep -E ' -c examples/asteroids/systems\.c( |$)' | tail -n 1)
    flags=$(sed -E -e 's/^clang //' -e 's/ -MMD -MP//' -e 's/ -c [^ ]+//' -e 's/ -o [^ ]+//' <<<"$cmd")
    if [ -z "$cmd" ] || ! eval "clang $flags -mfma -c examples/asteroids/systems.c -o $tmp/systems.o" 2>"$tmp/err"; then
        status=1; echo "FAILED: the game's systems do not build with the Makefile's flags:"; head -n 5 "$tmp/err"
    elif n=$(objdump -d "$tmp/systems.o" | grep -cE 'vfn?m(add|sub)'); [ "$n" != 0 ]; then
        status=1; echo "FAILED: clang fused $n multiply-adds in the game's systems (kiln's flags allow contraction)"
    else echo "ok: the Makefile's flags keep clang from fusing the game's multiply-adds"; fi
fi
exit $status
