/* bench_measure.c: the measuring loop of the core benchmark cases and their failure
 * reporting. Invariant: both sides of a case run the same number of times, interleaved. */
#include "bench_measure.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

bool bench_fail(case_state *state, const char *format, ...) {
    if (!state->failed) {
        va_list args;
        va_start(args, format);
        vsnprintf(state->failure, sizeof state->failure, format, args);
        va_end(args);
        state->failed = true;
    }
    return false;
}

bool bench_check_call(case_state *state, const kiln_world *world, kiln_result result,
                       const char *call) {
    if (result == KILN_OK) return true;
    return bench_fail(state, "%s: %s (%s)", call, kiln_result_name(result),
                world != NULL ? kiln_world_error(world) : "no world");
}

void *bench_xcalloc(size_t count, size_t size) {
    void *p = calloc(count, size);
    if (p == NULL) {
        fprintf(stderr, "core_bench: out of memory\n");
        exit(2);
    }
    return p;
}

void *bench_xmalloc(size_t size) {
    void *p = malloc(size);
    if (p == NULL) {
        fprintf(stderr, "core_bench: out of memory\n");
        exit(2);
    }
    return p;
}

double bench_relative_spread(const double *sorted, int count, double median) {
    if (count < 2 || median <= 0.0) return 0.0;
    return (sorted[count - 1] - sorted[0]) / median;
}

void bench_measure(const bench_config *config, void *ctx, sample_fn kiln, sample_fn baseline,
                    check_fn check, int inner, double units, bench_result *dest) {
    case_state *state = ctx;
    double k[BENCH_MAX_REPS], b[BENCH_MAX_REPS];
    int reps = config->reps < 1 ? 1 : config->reps > BENCH_MAX_REPS ? BENCH_MAX_REPS : config->reps;

    state->verify = true;
    kiln(ctx);
    baseline(ctx);
    state->verify = false;
    if (!state->failed && check != NULL) check(ctx);

    int done = 0, turn = 0;
    for (int r = 0; r < reps && !state->failed; r++) {
        double kt = 0.0, bt = 0.0;
        for (int j = 0; j < inner; j++, turn++) {
            if (turn % 2 == 0) {
                kt += kiln(ctx);
                bt += baseline(ctx);
            } else {
                bt += baseline(ctx);
                kt += kiln(ctx);
            }
        }
        k[r] = kt / units;
        b[r] = bt / units;
        if (config->verbose)
            fprintf(stderr, "  rep %d: kiln %.3f baseline %.3f\n", r, k[r], b[r]);
        done++;
    }
    if (!state->failed && check != NULL) check(ctx);

    dest->ns = bench_median(k, done);
    dest->spread = bench_relative_spread(k, done, dest->ns);
    dest->baseline_ns = bench_median(b, done);
    dest->baseline_spread = bench_relative_spread(b, done, dest->baseline_ns);
    dest->ratio = dest->baseline_ns > 0.0 ? dest->ns / dest->baseline_ns : 0.0;
    dest->ok = !state->failed;
    snprintf(dest->failure, sizeof dest->failure, "%s", state->failure);
}

void bench_setup_failed(const case_state *state, bench_result *dest) {
    dest->ok = false;
    snprintf(dest->failure, sizeof dest->failure, "%s", state->failure);
}
