/* bench_util.h: timing, statistics, RSS and JSON helpers shared by the kiln benchmarks.
 * Nothing here knows about kiln; times are nanoseconds from CLOCK_MONOTONIC.
 *
 * Functions in this header:
 *   bench_now_ns, bench_median, bench_rss_bytes, bench_memory_policy, bench_trim_heap,
 *   bench_consume,
 *   bench_rng_next, bench_shuffle_u64, bench_json_open, bench_json_write, bench_json_close.
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Keeps a function out of line, so the kiln and baseline variants of a case call the very
 * same machine code and a profiler sees each timed region as one function. */
#if defined(__GNUC__) || defined(__clang__)
#define BENCH_NOINLINE __attribute__((noinline))
#else
#define BENCH_NOINLINE
#endif

/* Nanoseconds from CLOCK_MONOTONIC. */
double bench_now_ns(void);

/* Median of count samples; sorts values in place. 0 for count 0. */
double bench_median(double *values, int count);

/* Resident set size of this process in bytes (from /proc/self/statm), or -1 when unknown. */
int64_t bench_rss_bytes(void);

/* Sets the C library allocator's policy for the whole process (glibc; elsewhere a no-op).
 * warm: every block comes from the heap and freed memory stays resident, so after a warm-up
 * run an allocating sample reuses pages that are already mapped and times only CPU work.
 * cold: blocks of 128 KiB and more are mapped fresh and unmapped on free (a fixed threshold,
 * not glibc's dynamic one), so after bench_trim_heap a sample pays first-touch page faults
 * for all the memory it uses, independent of what ran before. */
void bench_memory_policy(bool warm);

/* Hands free heap memory back to the system where the C library allows it (glibc
 * malloc_trim), so an RSS delta measures new pages rather than reused ones. */
void bench_trim_heap(void);

/* Folds a value into a volatile sink so the compiler must compute it. */
void bench_consume(uint64_t value);

/* splitmix64: a small deterministic generator; state is advanced in place. */
uint64_t bench_rng_next(uint64_t *state);

/* Fisher-Yates shuffle of count values with a generator seeded by seed. */
void bench_shuffle_u64(uint64_t *values, size_t count, uint64_t seed);

/* Opens path for writing one JSON object per line (truncating it). NULL on failure. */
FILE *bench_json_open(const char *path);

/* Writes {"case": name, "ns": ns, "baseline_ns": baseline_ns, "ratio": ratio} and a
 * newline. name must not need escaping (case names are [a-z0-9_]). */
void bench_json_write(FILE *out, const char *name, double ns, double baseline_ns, double ratio);

/* Closes the file; returns false when any write failed. NULL is a no-op returning true. */
bool bench_json_close(FILE *out);

#endif /* BENCH_UTIL_H */
