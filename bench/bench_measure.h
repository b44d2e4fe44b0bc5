/* bench_measure.h: how a core benchmark case is measured: the case state every context
 * starts with, failure reporting, and the loop that interleaves kiln and baseline samples.
 *
 * Functions in this header:
 *   bench_fail, bench_check_call, bench_xcalloc, bench_xmalloc, bench_measure,
 *   bench_relative_spread, bench_setup_failed.
 */
#ifndef BENCH_MEASURE_H
#define BENCH_MEASURE_H

#include <stdbool.h>
#include <stddef.h>

#include "bench_core.h"
#include "kiln.h"

/* The first member of every case context. */
typedef struct case_state {
    bool verify;   /* this run is the untimed warm-up: record what check() compares */
    bool failed;
    char failure[200];
} case_state;

/* Records the first failure of a case (printf-style); returns false. */
bool bench_fail(case_state *state, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* True for KILN_OK; otherwise records "call: result (world error)" and returns false. */
bool bench_check_call(case_state *state, const kiln_world *world, kiln_result result,
                      const char *call);

/* calloc and malloc that end the program when memory runs out. */
void *bench_xcalloc(size_t count, size_t size);
void *bench_xmalloc(size_t size);

typedef double (*sample_fn)(void *ctx);
typedef bool (*check_fn)(void *ctx);

/* Runs each side once untimed (the warm-up, with verify set, then check), then
 * config->reps timed samples of each side. A sample is the sum of `inner` timed runs, and
 * the runs of the two sides interleave one by one, swapping which goes first each time, so
 * noise and cache state on the shared machine hit both sides alike. Samples are divided by
 * units (entities or operations per sample). ctx starts with a case_state. */
void bench_measure(const bench_config *config, void *ctx, sample_fn kiln, sample_fn baseline,
                   check_fn check, int inner, double units, bench_result *dest);

/* (max - min) / median of count sorted samples; 0 for fewer than two. */
double bench_relative_spread(const double *sorted, int count, double median);

/* A case whose setup failed reports why and no numbers. */
void bench_setup_failed(const case_state *state, bench_result *dest);

#endif /* BENCH_MEASURE_H */
