#!/usr/bin/env bash
# fuzz.sh: runs the kiln fuzz harness under libFuzzer (ASan+UBSan) from the seed corpus and the
# regression inputs for a bounded time; ends with "N passed, N failed" like the other groups.
# usage: scripts/fuzz.sh run|long SECONDS CC 'MAKE COMMAND BUILDING IN build-fuzz'
set -u
mode=$1; seconds=$2; cc=$3; build=$4
fuzzer=build-fuzz/tests/kiln_fuzzer

# libFuzzer ships with clang's runtime (Debian: clang and libclang-rt-14-dev).
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' >"$probe/p.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
  echo "skipped: $cc cannot build with -fsanitize=fuzzer (install clang and libclang-rt-14-dev: scripts/deps.sh); the corpus is still replayed by test-plain and test-asan"
  exit 0
fi

eval "$build $fuzzer" || { echo "0 passed, 1 failed"; exit 1; }

if [ "$mode" = long ]; then corpus=build-fuzz/corpus-long; else corpus=build-fuzz/corpus-run; rm -rf "$corpus"; fi
mkdir -p "$corpus" build-fuzz/artifacts
log=build-fuzz/fuzz-$mode.log
echo "libFuzzer for ${seconds}s from tests/fuzz/corpus and tests/fuzz/regressions (new inputs: $corpus, log: $log)"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
  "$fuzzer" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -max_len=2048 \
  -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/ \
  "$corpus" tests/fuzz/corpus tests/fuzz/regressions >"$log" 2>&1
rc=$?
grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)' "$log" | sed 's/^/  /'
if [ $rc -ne 0 ]; then
  grep -E 'kiln fuzz: mismatch|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log" | head -n 5
  tail -n 30 "$log"
  echo "the failing input is in build-fuzz/artifacts/: copy it to tests/fuzz/regressions/ (docs/testing.md)"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "1 passed, 0 failed"
