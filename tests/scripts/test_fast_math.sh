#!/usr/bin/env bash
# test_fast_math.sh: kiln's sources refuse -ffast-math and -ffinite-math-only. Under them the
# compiler assumes no NaN or infinity and drops kiln's tests of one: a clang -ffast-math build
# stored 1.5 for a NaN written back through q:bulk, took inf for out of float range, and charged
# a NaN cost as it came. Preprocesses every core, addon and binding source with -ffast-math (gcc)
# and -ffinite-math-only (clang), either if installed, and expects the refusal; without them, none.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
inc="-Icore/include -Icore/src -Iaddons/transform/include -Iaddons/persist/include -Ilua $(pkg-config --cflags lua5.4)"
refusal="needs IEEE NaN and infinities"
status=0
for pair in "gcc -ffast-math" "clang -ffinite-math-only"; do
    read -r cc flag <<<"$pair"
    if ! command -v "$cc" >/dev/null; then echo "skipped: $cc is not installed"; continue; fi
    if out=$("$cc" -std=c11 $inc -E core/src/world.c -o /dev/null 2>&1); then :
    else status=1; echo "FAILED: $cc refuses core/src/world.c without -ffast-math:"; head -n 3 <<<"$out"; fi
    accepted=""
    for f in core/src/*.c addons/*/src/*.c lua/src/*.c; do
        "$cc" -std=c11 "$flag" $inc -E "$f" -o /dev/null 2>&1 | grep -q "$refusal" || accepted="$accepted $f"
    done
    if [ -n "$accepted" ]; then status=1; echo "FAILED: $cc $flag builds:$accepted"
    else echo "ok: $cc $flag is refused by every source"; fi
done
exit $status
