/* schedule_fixture.h: what the schedule suites share: a world with three components to declare
 * access on, and helpers that add systems and read stages, asserting as they go. */
#ifndef KILN_SCHEDULE_FIXTURE_H
#define KILN_SCHEDULE_FIXTURE_H

#include <stdatomic.h>
#include <stdint.h>

#include "kiln.h"

/*
 * Functions in this header:
 *   schedule_fixture_setup, schedule_fixture_teardown, noop, count_run, add_system, describe,
 *   stage_of, runs_of.
 */

/* A world (default allocator) with Position (p), Velocity (q) and Rotation (r). */
typedef struct schedule_fixture {
    kiln_world *world;
    kiln_component p, q, r;
} schedule_fixture;

void schedule_fixture_setup(schedule_fixture *f);
void schedule_fixture_teardown(schedule_fixture *f);

/* Systems on worker threads count failures instead of asserting (Check is not thread-safe);
 * the test asserts the count afterwards. */
#define EXPECT_OK(errors, ...)                                                                   \
    do {                                                                                         \
        if ((__VA_ARGS__) != KILN_OK) atomic_fetch_add((errors), 1);                             \
    } while (0)

/* A system that does nothing; one that increments the int its user pointer points to. */
void noop(const kiln_system_ctx *ctx);
void count_run(const kiln_system_ctx *ctx);

/* kiln_schedule_add, asserting it succeeded. */
void add_system(kiln_schedule *s, kiln_system_desc desc);
/* The schedule's describe text (static storage: one at a time). */
const char *describe(kiln_schedule *s);
/* The stage / run count of the system named name, asserting it exists. */
int32_t stage_of(kiln_schedule *s, const char *name);
int64_t runs_of(kiln_schedule *s, const char *name);

#endif /* KILN_SCHEDULE_FIXTURE_H */
