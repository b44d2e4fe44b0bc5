#!/usr/bin/env bash
# Counts instructions per entity of a persistence case under callgrind: the kiln call the case
# times (kiln_save, kiln_load, kiln_world_hash, ...), averaged over its calls.
# Usage: bench/callgrind_persist.sh [core_bench binary] [entities (100000)] [case ...]
# (a memcpy baseline has no meaningful count: callgrind counts a rep movsb as one instruction)
set -euo pipefail
bin=${1:-build-bench/bench/core_bench}
entities=${2:-100000}
shift $(($# > 2 ? 2 : $#))
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(save_binary load_binary world_hash snapshot restore)
out=$(mktemp /tmp/kiln-callgrind.XXXXXX)
trap 'rm -f "$out"' EXIT

function_of() {
    case $1 in
    save_binary | save_json) echo kiln_save ;;
    load_binary | load_json) echo kiln_load ;;
    world_hash) echo kiln_world_hash ;;
    snapshot) echo kiln_snapshot_update ;;
    restore) echo kiln_snapshot_restore ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
    esac
}

for c in "${cases[@]}"; do
    fn=$(function_of "$c")
    # the persistence cases use a tenth of --entities
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" --case "$c" \
        --entities $((entities * 10)) --reps 2 >/dev/null 2>&1
    ir=$(callgrind_annotate --inclusive=yes --auto=no "$out" 2>/dev/null |
        awk -v f=":$fn " '!done && index($0, f) { gsub(",", "", $1); print $1; done = 1 }')
    calls=$(awk -v f="$fn" '
        /^c?fn=\(/ { id = $0; sub(/^c?fn=/, "", id); name = id; sub(/^\([0-9]+\) ?/, "", name)
            sub(/\).*/, ")", id); if (name != "") names[id] = name
            cfn = ($0 ~ /^cfn=/) ? names[id] : ""; next }
        /^calls=/ && cfn == f { split($0, a, /[= ]/); n += a[2] }
        END { print n + 0 }' "$out")
    awk -v c="$c" -v f="$fn" -v ir="$ir" -v calls="$calls" -v n="$entities" 'BEGIN {
        printf "%-12s %-22s %8.1f instructions/entity (%d calls, %d entities)\n", c, f, ir / calls / n, calls, n }'
done
