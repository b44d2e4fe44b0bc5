#!/usr/bin/env bash
# Counts instructions per entity of the iter2 case under callgrind: the kiln pass (query
# iteration around the shared kernel) against the baseline pass (the kernel over two arrays).
# Usage: bench/callgrind_iter2.sh [core_bench binary] [entities]
set -euo pipefail
bin=${1:-build-bench/bench/core_bench}
entities=${2:-100000}
out=$(mktemp /tmp/kiln-callgrind.XXXXXX)
trap 'rm -f "$out"' EXIT

valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" --case iter2 \
    --entities "$entities" --reps 3 >/dev/null 2>&1

# Inclusive instruction counts of the two pass functions.
incl=$(callgrind_annotate --inclusive=yes --auto=no "$out" 2>/dev/null)
ir_of() {
    printf '%s\n' "$incl" |
        awk -v f=":$1 " '!done && index($0, f) { gsub(",", "", $1); print $1; done = 1 }'
}
kiln_ir=$(ir_of iter2_kiln_pass)
base_ir=$(ir_of iter2_baseline_pass)

# Calls of each pass, summed from the profile's call records (names are compressed to ids
# after their first use).
calls_of() {
    awk -v f="$1" '
        /^c?fn=\(/ {
            id = $0; sub(/^c?fn=/, "", id); name = id; sub(/^\([0-9]+\) ?/, "", name)
            sub(/\).*/, ")", id)
            if (name != "") names[id] = name
            cfn = ($0 ~ /^cfn=/) ? names[id] : ""
            next
        }
        /^calls=/ && cfn == f { split($0, a, /[= ]/); n += a[2] }
        END { print n + 0 }' "$out"
}
kiln_calls=$(calls_of iter2_kiln_pass)
base_calls=$(calls_of iter2_baseline_pass)

awk -v ki="$kiln_ir" -v kc="$kiln_calls" -v bi="$base_ir" -v bc="$base_calls" -v n="$entities" '
    BEGIN {
        k = ki / (kc * n); b = bi / (bc * n)
        printf "iter2 under callgrind, %d entities, %d passes each\n", n, kc
        printf "  kiln     %.4f instructions/entity (%.0f per pass)\n", k, ki / kc
        printf "  baseline %.4f instructions/entity (%.0f per pass)\n", b, bi / bc
        printf "  kiln overhead %.0f instructions per pass, ratio %.4f\n", (ki / kc) - (bi / bc), k / b
    }'
