/* commands_fixture.h: what the command buffer suites share: a world with Position, Velocity and
 * heap-owning Owned on the counting allocator, an empty buffer, and spawn helpers. */
#ifndef KILN_COMMANDS_FIXTURE_H
#define KILN_COMMANDS_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln.h"
#include "test_support.h"

/*
 * Functions in this header:
 *   commands_fixture_setup, commands_fixture_teardown, spawn_pos, spawn_bare, spawn_owned,
 *   register_health, apply_failing_at, apply_rest.
 */

typedef struct commands_fixture {
    test_allocator alloc;
    kiln_world *w;
    kiln_component pos, vel, owned;
    kiln_commands *cmd;
    test_hook_log log;
} commands_fixture;

/* Builds the world and the empty buffer into f. */
void commands_fixture_setup(commands_fixture *f);
/* Destroys the buffer and the world, then asserts every byte came back and no value was
 * destroyed twice or destroyed after being moved from. */
void commands_fixture_teardown(commands_fixture *f);

/* Asserts call returned KILN_OK, printing the world's and the buffer's messages otherwise.
 * Uses the including suite's fixture, which it names F. */
#define ASSERT_OK(call)                                                                      \
    do {                                                                                     \
        kiln_result r_ = (call);                                                             \
        ck_assert_msg(r_ == KILN_OK, "%s returned \"%s\" (world: \"%s\", buffer: \"%s\")", \
                      #call, kiln_result_name(r_), F.w ? kiln_world_error(F.w) : "",        \
                      F.cmd ? kiln_commands_error(F.cmd) : "");                              \
    } while (0)

/* A live entity spawned directly in f's world: with Position (x, y) / with nothing / with an
 * Owned value of id (whose payload the world then owns). */
kiln_entity spawn_pos(commands_fixture *f, float x, float y);
kiln_entity spawn_bare(commands_fixture *f);
kiln_entity spawn_owned(commands_fixture *f, int32_t id);

/* Registers a 4-byte "Health" component in w (no fields) and returns its id. */
kiln_component register_health(kiln_world *w);

/* Applies f's buffer (total commands pending) with f's allocations failing from the n-th on
 * (test_allocator_fail_after). Returns whether the apply failed, having asserted then that it
 * ran out of memory, left a message in the world and kept pending every command it did not
 * apply; *applied: the commands it applied. */
bool apply_failing_at(commands_fixture *f, int64_t n, int64_t total, int64_t *applied);
/* After apply_failing_at failed: applies the rest and asserts that all total commands landed,
 * each once. */
void apply_rest(commands_fixture *f, int64_t total, int64_t applied);

#endif /* KILN_COMMANDS_FIXTURE_H */
