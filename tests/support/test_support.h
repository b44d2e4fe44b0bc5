/* test_support.h: fixtures shared by the kiln C suites: a counting, failure-injecting allocator
 * and the test components (Position, Velocity, heap-owning Owned, tags). Helpers assert. */
#ifndef KILN_TEST_SUPPORT_H
#define KILN_TEST_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

#ifdef __cplusplus
extern "C" { /* C++ suites (tests/cxx) link the C fixtures */
#endif

/*
 * Functions in this header:
 *   test_allocator_init, test_allocator_fn, test_allocator_fail_after, test_allocator_fail_never,
 *   test_world_create, test_world_fixture_setup, test_world_fixture_teardown,
 *   test_position_desc, test_velocity_desc, test_owned_desc,
 *   test_register_position, test_register_velocity, test_register_owned, test_register_tag,
 *   test_spawn_tag_sets,
 *   test_owned_make, test_owned_release, test_hook_log_count,
 *   test_entity_string, test_contains, test_query_collect, test_assert_position,
 *   test_assert_velocity, test_assert_names, test_world_digest, test_now_ns, test_spin_ns,
 *   test_expect_abort.
 */

/* ------------------------------------------------------------------------------------------ */
/* Allocator                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* A kiln_alloc_fn (lua_Alloc contract) that counts every call and byte, checks that osize
 * matches the block it describes, fills fresh bytes with garbage (so "zero-initialised" is
 * really tested) and can refuse requests. Only requests that need new memory (ptr NULL or
 * growth) are refused; frees and shrinks always succeed. */
typedef struct test_allocator {
    int64_t calls;        /* every call, frees and failures included */
    int64_t allocations;  /* successful calls that allocated or resized */
    int64_t frees;        /* calls that freed a block */
    int64_t failures;     /* refused requests */
    int64_t live_blocks;
    int64_t live_bytes;
    int64_t peak_bytes;
    int64_t bad_osize;    /* calls whose osize did not match the block's size */
    int64_t fail_after;   /* < 0: never refuse; else requests still granted before refusing */
} test_allocator;

void test_allocator_init(test_allocator *a);
void *test_allocator_fn(void *ud, void *ptr, size_t osize, size_t nsize);

/* Grants n more requests for memory, then refuses every one until test_allocator_fail_never.
 * n == 0 refuses from the next request on. */
void test_allocator_fail_after(test_allocator *a, int64_t n);
void test_allocator_fail_never(test_allocator *a);

/* A world whose every byte goes through a (asserted non-NULL). */
kiln_world *test_world_create(test_allocator *a);

/* The plainest fixture: an empty world on its own counting allocator. Teardown destroys the
 * world (unless a test already did and set w NULL) and asserts every byte came back through
 * the right sizes. */
typedef struct test_world_fixture {
    test_allocator alloc;
    kiln_world *w;
} test_world_fixture;

void test_world_fixture_setup(test_world_fixture *f);
void test_world_fixture_teardown(test_world_fixture *f);

/* ------------------------------------------------------------------------------------------ */
/* Components                                                                                 */
/* ------------------------------------------------------------------------------------------ */

typedef struct test_position { float x, y; } test_position;
typedef struct test_velocity { float x, y; } test_velocity;

/* A value that owns a heap block holding its id. The destroy hook frees it and poisons the
 * value (id -1); the move hook poisons the source (id -2), so a double destroy or a destroy
 * of a moved-from value shows up in the log as id -1 or -2. */
typedef struct test_owned {
    int32_t *payload;  /* malloc'd, *payload == id; NULL for a zero value */
    int32_t id;
} test_owned;

#define TEST_HOOK_LOG_MAX 4096

/* What the Owned hooks saw. Zero it before registering. */
typedef struct test_hook_log {
    int64_t destroyed;      /* values destroyed (sum of counts) */
    int64_t destroy_calls;
    int64_t moved;          /* values moved (sum of counts) */
    int64_t move_calls;
    int64_t bad_payload;    /* values whose payload did not hold their id */
    int32_t ids[TEST_HOOK_LOG_MAX]; /* ids of destroyed values, in order */
    int32_t id_count;
} test_hook_log;

/* The descriptors the register helpers use: "Position" and "Velocity" (8 bytes, two float
 * fields x and y) and "Owned" (with destroy and move hooks reporting to log). */
kiln_component_desc test_position_desc(void);
kiln_component_desc test_velocity_desc(void);
kiln_component_desc test_owned_desc(test_hook_log *log);

kiln_component test_register_position(kiln_world *world);
kiln_component test_register_velocity(kiln_world *world);
kiln_component test_register_owned(kiln_world *world, test_hook_log *log);
kiln_component test_register_tag(kiln_world *world, const char *name);

/* Spawns one entity per non-empty set of the count (<= 31) tags, by bit mask from 1 up, until a
 * spawn fails (the archetype limit: 16 tags reach it); returns its result and writes the mask of
 * the set tried last to last (may be NULL). */
kiln_result test_spawn_tag_sets(kiln_world *world, const kiln_component *tags, int32_t count, uint32_t *last);

/* An Owned value with a fresh payload holding id (id > 0). */
test_owned test_owned_make(int32_t id);
/* Frees a value the world never took over. */
void test_owned_release(test_owned *value);
/* How many times a value with id was destroyed. */
int64_t test_hook_log_count(const test_hook_log *log, int32_t id);

/* ------------------------------------------------------------------------------------------ */
/* Misc                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* kiln_entity_format into a 32-byte buffer. */
const char *test_entity_string(kiln_entity entity, char buf[32]);
bool test_contains(const kiln_entity *list, int64_t count, kiln_entity entity);

/* Iterates query to the end, writing up to capacity entity handles to dest; returns the
 * number of rows seen. Asserts every chunk is non-empty. */
int64_t test_query_collect(const kiln_query *query, kiln_entity *dest, int64_t capacity);

/* Check assertions: the entity's Position / Velocity equal (x, y); msg contains what. */
void test_assert_position(kiln_world *w, kiln_entity e, kiln_component pos, float x, float y);
void test_assert_velocity(kiln_world *w, kiln_entity e, kiln_component vel, float x, float y);
void test_assert_names(const char *msg, const char *what);

/* A hash of every live entity (in kiln_world_entities order) with, per component, whether
 * it has it, its change tick and its value bytes: equal worlds hash equal. */
uint64_t test_world_digest(const kiln_world *w);

/* The monotonic clock in nanoseconds, and a busy wait of ns on it (a job or system that takes
 * time without sleeping, so the scheduler cannot tell it from work). */
int64_t test_now_ns(void);
void test_spin_ns(int64_t ns);

/* For a KILN_TEST_SIGNAL(..., SIGABRT) test of an assertion: from here on stderr goes to a
 * file, and an abort whose output does not contain needle (a crash of another kind, another
 * assertion) is turned into SIGSEGV, so the test fails unless the abort is the one meant. */
void test_expect_abort(const char *needle);

#ifdef __cplusplus
}
#endif

#endif /* KILN_TEST_SUPPORT_H */
