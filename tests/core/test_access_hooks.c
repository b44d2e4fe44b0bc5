/* test_access_hooks.c: Check suite for destroy hooks that call the world's structural API. A
 * hook runs in the middle of a change, so such a call fails and the change completes intact;
 * resource calls, which touch nothing the change holds, land. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

typedef struct owned {
    int id;
} owned;

/* What the Own destroy hook does when it destroys the value with id trigger. */
typedef enum hook_action {
    DO_NOTHING, REMOVE_POS, DESPAWN_TARGET, SPAWN, APPLY_BUFFER, DEFER_DESPAWN, SET_RESOURCE, REMOVE_RESOURCE,
    READ_ROWS, CLEAR_BUFFER, CLEAR_QUEUE, RECORD_SPAWNS, DEFER_SPAWNS
} hook_action;

#define HOOK_SPAWNS 300 /* RECORD_SPAWNS and DEFER_SPAWNS: past the room a buffer starts with */

typedef struct hook_probe {
    kiln_world *world;
    kiln_component pos, own;
    kiln_entity target;
    kiln_commands *buffer;
    hook_action action;
    int trigger;
    int calls;             /* times the action ran */
    kiln_result result;    /* what the world call returned */
    char message[256];     /* the world's message then */
    kiln_query *with_pos;  /* READ_ROWS: what kiln_world_entities, kiln_query_count and a loop
                              over with_pos give from the hook */
    int64_t listed, queried, visited;
    kiln_entity list[8];
    bool target_read;      /* READ_ROWS: kiln_get of target's Pos gave a value */
    int destroyed[16];     /* times the value with each id (below 16) was destroyed */
} hook_probe;

static hook_probe P;

static void act(hook_probe *p) {
    kiln_entity e;
    switch (p->action) {
    case DO_NOTHING: return;
    case REMOVE_POS: p->result = kiln_remove(p->world, p->target, p->pos, NULL); break;
    case DESPAWN_TARGET: p->result = kiln_despawn(p->world, p->target); break;
    case SPAWN: p->result = kiln_spawn(p->world, &e); break;
    case APPLY_BUFFER: p->result = kiln_commands_apply(p->buffer, p->world, NULL); break;
    case DEFER_DESPAWN:
        kiln_defer_begin(p->world);
        ck_assert_int_eq(kiln_despawn(p->world, p->target), KILN_OK); /* queued */
        p->result = kiln_defer_end(p->world);
        break;
    case SET_RESOURCE: p->result = kiln_resource_set(p->world, p->pos, &(int64_t){42}); break;
    case REMOVE_RESOURCE: p->result = kiln_resource_remove(p->world, p->pos, NULL); break;
    case CLEAR_BUFFER: kiln_commands_clear(p->buffer); break;
    case CLEAR_QUEUE: kiln_defer_clear(p->world); break;
    case RECORD_SPAWNS:
        for (int i = 0; i < HOOK_SPAWNS; i++) ck_assert_int_eq(kiln_commands_spawn(p->buffer, &e), KILN_OK);
        break;
    case DEFER_SPAWNS:
        kiln_defer_begin(p->world);
        for (int i = 0; i < HOOK_SPAWNS; i++) ck_assert_int_eq(kiln_spawn(p->world, &e), KILN_OK);
        p->result = kiln_defer_end(p->world);
        break;
    case READ_ROWS: {
        p->listed = kiln_world_entities(p->world, p->list, 8);
        p->queried = kiln_query_count(p->with_pos);
        kiln_iter it;
        kiln_query_iter(p->with_pos, &it);
        while (kiln_query_next(&it)) p->visited += it.count;
        p->target_read = p->target != KILN_NULL_ENTITY && kiln_get(p->world, p->target, p->pos) != NULL;
        break;
    }
    }
    p->calls++;
    snprintf(p->message, sizeof p->message, "%s", kiln_world_error(p->world));
}

static void destroy_owned(void *ptr, int32_t count, void *ctx) {
    hook_probe *p = ctx;
    const owned *o = ptr;
    for (int32_t i = 0; i < count; i++) {
        if (o[i].id >= 0 && o[i].id < 16) p->destroyed[o[i].id]++;
        if (o[i].id == p->trigger) act(p);
    }
}

static kiln_entity ents[3];

static void setup(void) {
    memset(&P, 0, sizeof P);
    P.world = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_component_register(P.world, &(kiln_component_desc){.name = "Pos", .size = 8}, &P.pos),
                     KILN_OK);
    ck_assert_int_eq(kiln_component_register(P.world, &(kiln_component_desc){.name = "Own", .size = sizeof(owned),
                                                                             .destroy = destroy_owned,
                                                                             .hook_ctx = &P}, &P.own),
                     KILN_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(kiln_spawn_with(P.world, (kiln_component[]){P.own, P.pos},
                                         (const void *[]){&(owned){i + 1}, NULL}, 2, &ents[i]), KILN_OK);
    P.trigger = 1;
}

static void teardown(void) {
    P.action = DO_NOTHING;
    kiln_world_destroy(P.world);
}

static int id_of(kiln_entity e) {
    const owned *o = kiln_get(P.world, e, P.own);
    ck_assert_ptr_nonnull(o);
    return o->id;
}

/* The hook's call failed, naming itself and the hook. */
static void assert_refused_in_hook(const char *call) {
    ck_assert_int_eq(P.calls, 1);
    ck_assert_int_eq(P.result, KILN_ERR_INVALID_ARGUMENT);
    char want[96];
    snprintf(want, sizeof want, "%s: called from a component's destroy or move hook", call);
    ck_assert_msg(strncmp(P.message, want, strlen(want)) == 0, "message \"%s\"", P.message);
}

KILN_TEST_GROUP_WITH(hooks, .setup = setup, .teardown = teardown);

/* kiln_set computed the row, ran the hook, then wrote: a remove from the hook moved the entity
 * and the write landed in another entity's row. */
KILN_TEST(hooks, a_remove_from_the_hook_of_a_replaced_value_fails_and_the_set_lands_on_its_entity) {
    P.action = REMOVE_POS, P.target = ents[0];
    ck_assert_int_eq(kiln_set(P.world, ents[0], P.own, &(owned){11}), KILN_OK);
    assert_refused_in_hook("kiln_remove");
    ck_assert_int_eq(id_of(ents[0]), 11);
    ck_assert_int_eq(id_of(ents[1]), 2);
    ck_assert_int_eq(id_of(ents[2]), 3);
    ck_assert(kiln_has(P.world, ents[0], P.pos));
}

/* A hook despawning its own entity recursed without end (each despawn ran the hook again). */
KILN_TEST(hooks, a_despawn_of_the_entity_from_its_own_hook_fails_instead_of_recursing) {
    P.action = DESPAWN_TARGET, P.target = ents[0];
    ck_assert_int_eq(kiln_set(P.world, ents[0], P.own, &(owned){11}), KILN_OK);
    assert_refused_in_hook("kiln_despawn");
    ck_assert(kiln_is_alive(P.world, ents[0]));
    P.calls = 0, P.trigger = 11;
    ck_assert_int_eq(kiln_despawn(P.world, ents[0]), KILN_OK);
    assert_refused_in_hook("kiln_despawn");
    ck_assert(!kiln_is_alive(P.world, ents[0]));
    ck_assert_int_eq(id_of(ents[1]), 2);
    ck_assert_int_eq(id_of(ents[2]), 3);
    ck_assert_int_eq(kiln_entity_count(P.world), 2);
}

/* kiln_world_destroy runs the hooks of every live value as it frees the rows: a despawn from
 * one read freed memory. */
KILN_TEST(hooks, a_despawn_from_a_hook_during_world_destroy_fails) {
    P.action = DESPAWN_TARGET, P.target = ents[1];
    kiln_world_destroy(P.world);
    P.world = NULL;
    ck_assert_int_eq(P.calls, 1);
    ck_assert_int_eq(P.result, KILN_ERR_INVALID_ARGUMENT);
}

/* kiln_world_destroy: a hook of the archetype freed last read the archetypes freed before
 * its own (their rows, their records), and the queries were gone before any hook ran. */
KILN_TEST(hooks, a_hook_during_world_destroy_reads_a_whole_world) {
    ck_assert_int_eq(kiln_query_create(P.world, &(kiln_query_desc){.with = {P.pos}}, &P.with_pos), KILN_OK);
    ck_assert_int_eq(kiln_remove(P.world, ents[2], P.pos, NULL), KILN_OK); /* {Own}: made last */
    P.action = READ_ROWS, P.trigger = 3, P.target = ents[0];
    kiln_world_destroy(P.world);
    P.world = NULL;
    ck_assert_int_eq(P.calls, 1);
    ck_assert_int_eq(P.listed, 3);
    ck_assert_int_eq(P.queried, 2);
    ck_assert_int_eq(P.visited, 2);
    ck_assert(P.target_read);
}

/* A remove moves the entity to another archetype; the removed value's hook runs half way. */
KILN_TEST(hooks, a_spawn_or_an_apply_from_the_hook_of_a_removed_value_fails) {
    P.action = SPAWN;
    ck_assert_int_eq(kiln_remove(P.world, ents[0], P.own, NULL), KILN_OK);
    assert_refused_in_hook("kiln_spawn");
    ck_assert_int_eq(kiln_entity_count(P.world), 3);
    ck_assert(kiln_has(P.world, ents[0], P.pos) && !kiln_has(P.world, ents[0], P.own));
    P.calls = 0, P.trigger = 2, P.action = APPLY_BUFFER;
    P.buffer = kiln_commands_create(P.world);
    kiln_entity ph;
    ck_assert_int_eq(kiln_commands_spawn(P.buffer, &ph), KILN_OK);
    ck_assert_int_eq(kiln_despawn(P.world, ents[1]), KILN_OK);
    assert_refused_in_hook("kiln_commands_apply");
    ck_assert_int_eq(kiln_commands_count(P.buffer), 1); /* kept for a later apply */
    ck_assert_int_eq(kiln_commands_apply(P.buffer, P.world, NULL), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(P.world), 3);
    kiln_commands_destroy(P.buffer);
}

/* A section opened in the hook queues; its end does not apply the queue under the hook, and
 * the next outermost end lands it. */
KILN_TEST(hooks, a_deferred_despawn_from_a_hook_waits_for_the_next_section_end) {
    P.action = DEFER_DESPAWN, P.target = ents[2];
    ck_assert_int_eq(kiln_set(P.world, ents[0], P.own, &(owned){11}), KILN_OK);
    assert_refused_in_hook("kiln_defer_end");
    ck_assert(kiln_is_alive(P.world, ents[2]));
    ck_assert(!kiln_is_deferred(P.world));
    kiln_defer_begin(P.world);
    ck_assert_int_eq(kiln_defer_end(P.world), KILN_OK);
    ck_assert(!kiln_is_alive(P.world, ents[2]));
    ck_assert_int_eq(id_of(ents[0]), 11);
}

/* Resources live apart from the archetype tables, and no change holds one across the hooks it
 * runs: a destroy hook run by a despawn, a remove or a replacing set may set and remove them. */
KILN_TEST(hooks, resource_calls_from_a_hook_mid_change_land_and_the_change_completes) {
    P.action = SET_RESOURCE;
    ck_assert_int_eq(kiln_despawn(P.world, ents[0]), KILN_OK);
    ck_assert_int_eq(P.calls, 1);
    ck_assert_int_eq(P.result, KILN_OK);
    ck_assert_int_eq(*(const int64_t *)kiln_resource_get(P.world, P.pos), 42);
    P.calls = 0, P.trigger = 2, P.action = REMOVE_RESOURCE;
    ck_assert_int_eq(kiln_remove(P.world, ents[1], P.own, NULL), KILN_OK);
    ck_assert_int_eq(P.calls, 1);
    ck_assert_int_eq(P.result, KILN_OK);
    ck_assert(!kiln_resource_has(P.world, P.pos));
    P.calls = 0, P.trigger = 3, P.action = SET_RESOURCE;
    ck_assert_int_eq(kiln_set(P.world, ents[2], P.own, &(owned){13}), KILN_OK);
    ck_assert_int_eq(P.result, KILN_OK);
    ck_assert(kiln_resource_has(P.world, P.pos));
    ck_assert(!kiln_is_alive(P.world, ents[0]));
    ck_assert(kiln_has(P.world, ents[1], P.pos) && !kiln_has(P.world, ents[1], P.own));
    ck_assert_int_eq(id_of(ents[2]), 13);
    ck_assert_int_eq(kiln_entity_count(P.world), 2);
}

/* A remove of Own moves the entity to {Pos}, running Own's destroy hook while the entity sits in
 * its old row and its new one: the calls that read every row counted it twice (4 of 3). */
KILN_TEST(hooks, calls_reading_every_row_from_a_hook_mid_move_see_the_moving_entity_once) {
    ck_assert_int_eq(kiln_query_create(P.world, &(kiln_query_desc){.with = {P.pos}}, &P.with_pos), KILN_OK);
    P.action = READ_ROWS;
    ck_assert_int_eq(kiln_remove(P.world, ents[0], P.own, NULL), KILN_OK);
    ck_assert_int_eq(P.calls, 1);
    ck_assert_int_eq(P.listed, 3);
    ck_assert_int_eq(P.queried, 3);
    ck_assert_int_eq(P.visited, 3);
    int seen[3] = {0};
    for (int64_t i = 0; i < P.listed && i < 8; i++)
        for (int k = 0; k < 3; k++) seen[k] += P.list[i] == ents[k];
    ck_assert(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
    /* and once the move is done, in its new row */
    ck_assert_int_eq(kiln_world_entities(P.world, NULL, 0), 3);
    ck_assert_int_eq(kiln_query_count(P.with_pos), 3);
    kiln_query_destroy(P.with_pos);
}

/* Replaces Own 1 (whose hook runs action) by 11 and Own 2 by 12 through a buffer (P.buffer, applied) or the
 * world's queue (a section's end): the hook ran once and both landed. Returns how many the apply applied. */
static int64_t land_two_sets(hook_action action, bool queue) {
    P.action = action;
    int64_t applied = 0;
    if (queue) {
        ck_assert_int_eq(kiln_defer_begin(P.world), KILN_OK);
        ck_assert_int_eq(kiln_set(P.world, ents[0], P.own, &(owned){11}), KILN_OK);
        ck_assert_int_eq(kiln_set(P.world, ents[1], P.own, &(owned){12}), KILN_OK);
        ck_assert_int_eq(kiln_defer_end(P.world), KILN_OK);
    } else {
        P.buffer = kiln_commands_create(P.world);
        ck_assert_int_eq(kiln_commands_set(P.buffer, ents[0], P.own, &(owned){11}), KILN_OK);
        ck_assert_int_eq(kiln_commands_set(P.buffer, ents[1], P.own, &(owned){12}), KILN_OK);
        ck_assert_int_eq(kiln_commands_apply(P.buffer, P.world, &applied), KILN_OK);
    }
    ck_assert_int_eq(P.calls, 1);
    ck_assert_int_eq(id_of(ents[0]), 11);
    ck_assert_int_eq(id_of(ents[1]), 12);
    return applied;
}

/* A clear from a hook of the apply destroyed the values still pending, the one being landed
 * among them, which the world then held: destroyed again as it was replaced or freed. */
KILN_TEST(hooks, a_clear_of_the_buffer_from_a_hook_its_apply_runs_is_refused_and_every_value_lands) {
    ck_assert_int_eq(land_two_sets(CLEAR_BUFFER, false), 2);
    test_assert_names(P.message, "kiln_commands_clear: the buffer is being applied (called from a hook");
    ck_assert_int_eq(P.destroyed[11] + P.destroyed[12], 0);
    kiln_commands_destroy(P.buffer);
}

/* The same through the world's queue: kiln_defer_clear from a hook the outermost end runs. */
KILN_TEST(hooks, a_clear_of_the_queue_from_a_hook_its_end_runs_is_refused_and_every_change_lands) {
    land_two_sets(CLEAR_QUEUE, true);
    test_assert_names(P.message, "kiln_defer_clear: the world's queue is being applied (called from a hook");
    ck_assert_int_eq(P.destroyed[11] + P.destroyed[12], 0);
}

/* A hook recording into the buffer its apply runs grew the command array under the apply,
 * which then wrote into the freed one (ASan: heap-use-after-free). Its records land in that
 * apply, after the others. */
KILN_TEST(hooks, records_into_the_buffer_from_a_hook_its_apply_runs_land_in_that_apply) {
    ck_assert_int_eq(land_two_sets(RECORD_SPAWNS, false), 2 + HOOK_SPAWNS);
    ck_assert_int_eq(kiln_commands_count(P.buffer), 0);
    ck_assert_int_eq(kiln_entity_count(P.world), 3 + HOOK_SPAWNS);
    kiln_commands_destroy(P.buffer);
}

/* The same through the world's queue: a section the hook opens while the outermost end lands
 * the queue queues into it (its own end is refused), and the end lands those spawns too. */
KILN_TEST(hooks, deferred_spawns_from_a_hook_the_outermost_end_runs_land_in_that_end) {
    land_two_sets(DEFER_SPAWNS, true);
    assert_refused_in_hook("kiln_defer_end");
    ck_assert(!kiln_is_deferred(P.world));
    ck_assert_int_eq(kiln_entity_count(P.world), 3 + HOOK_SPAWNS);
}
