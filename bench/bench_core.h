/* bench_core.h: the kiln core benchmark cases, each timed against a plain-C baseline.
 * A case reports medians per entity (or per operation) and whether kiln matched the baseline.
 *
 * Functions in this header:
 *   bench_cases, bench_case_find.
 */
#ifndef BENCH_CORE_H
#define BENCH_CORE_H

#include <stdbool.h>
#include <stdint.h>

#define BENCH_MAX_REPS 64

typedef struct bench_config {
    int64_t entities;       /* entities for the 1M cases */
    int64_t small_entities; /* entities for add_remove */
    int reps;               /* timed repetitions of each side, alternating kiln and baseline */
    bool verbose;           /* print every sample to stderr */
    bool cold;              /* allocating samples pay first-touch page faults (see main.c) */
} bench_config;

typedef enum bench_unit {
    BENCH_NS_PER_ENTITY,
    BENCH_NS_PER_OP,
    BENCH_BYTES_PER_ENTITY
} bench_unit;

typedef struct bench_result {
    double ns;            /* median kiln time per unit (bytes per entity for bytes_per_entity) */
    double baseline_ns;   /* median baseline time per unit (16 for bytes_per_entity) */
    double ratio;         /* ns / baseline_ns */
    double spread;        /* (max - min) / median of the kiln samples */
    double baseline_spread;
    double alloc_bytes;   /* bytes_per_entity only: the allocator accounting per entity */
    bool ok;              /* every kiln call succeeded and kiln agreed with the baseline */
    char failure[200];    /* why ok is false */
} bench_result;

typedef struct bench_case {
    const char *name;
    bench_unit unit;
    double goal;          /* the largest acceptable ratio, or bytes when goal_is_bytes; 0:
                           * information only, neither met nor missed */
    bool goal_is_bytes;
    const char *about;    /* one line: what is timed on each side */
    void (*run)(const bench_config *config, bench_result *dest);
} bench_case;

/* All cases in report order; writes their number to count. */
const bench_case *bench_cases(int *count);

/* The case named name, or NULL. */
const bench_case *bench_case_find(const char *name);

#endif /* BENCH_CORE_H */
