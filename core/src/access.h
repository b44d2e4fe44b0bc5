/* access.h: the immediate structural operations behind the public calls (access.c, spawn.c),
 * shared with command buffers and the deferred world (defer.c). Each checks its inputs,
 * reserves memory first and changes nothing on failure. move: relocate values through the
 * component's move hook (values that a buffer owns) instead of copying them bytewise (values
 * the caller keeps). */
#ifndef KILN_ACCESS_H
#define KILN_ACCESS_H

#include "world.h"

/* The most components one spawn may list: all an entity may hold. */
#define KL_SPAWN_MAX KL_TYPES_MAX

/* "call: entity 5v1 is not alive" (or "entity is null"); returns KILN_ERR_DEAD_ENTITY. _as names
 * the argument's role instead ("child 5v1 is not alive", "root is null"), for addons too. */
KL_HIDDEN kiln_result kl_fail_dead(kiln_world *world, const char *call, kiln_entity e);
KL_HIDDEN kiln_result kl_fail_dead_as(kiln_world *world, const char *call, const char *role, kiln_entity e);

/* A component's destroy or move hook runs in the middle of a change (a row computed, a move
 * half done): an immediate structural call from it would work on a stale picture. Such calls
 * check this after the deferred test and fail with kl_fail_in_hook; deferred ones queue. */
static inline bool kl_in_hook(const kiln_world *world) { return KL_UNLIKELY(world->in_hook != 0); }

/* "call: called from a component's destroy or move hook ..." (or, with world->in_check_of set,
 * "... from a component's check hook while kiln_load checks ..."); KILN_ERR_INVALID_ARGUMENT. */
KL_HIDDEN kiln_result kl_fail_in_hook(kiln_world *world, const char *call);

/* Why rows more rows do not fit in arch: the row limit (KILN_ERR_LIMIT), else memory. */
KL_HIDDEN kiln_result kl_fail_no_room(kiln_world *world, const char *call,
                                      const kl_archetype *arch, int64_t rows);

/* Immediate structural changes must not run under an active iteration; iteration defers the
 * world, so reaching this with one active means raw misuse (e.g. a buffer applied in a loop). */
static inline void kl_assert_not_iterating(const kiln_world *world) {
    KILN_ASSERT(atomic_load_explicit(&world->iterating, memory_order_relaxed) == 0,
                "structural change while a query iterates");
    (void)world;
}

/* "call: entity 5v1: component #9 is not registered"; returns KILN_ERR_UNKNOWN_COMPONENT. */
KL_HIDDEN kiln_result kl_fail_unknown_on(kiln_world *world, const char *call, kiln_entity e,
                                         kiln_component c);

/* Checks a spawn's component list (range, known ids, no repeats) and runs the check hooks of
 * its values (values may be NULL) for entity (null: a fresh one). Changes nothing. */
KL_HIDDEN kiln_result kl_spawn_check(kiln_world *world, const char *call,
                                     const kiln_component *components, const void *const *values,
                                     int32_t count, kiln_entity entity);

/* Spawns an entity with count components; reserved, when not null, is a handle handed out
 * by a deferred spawn that becomes alive here instead of a fresh slot. The caller has asked
 * every value's check hook (a command apply does as it merges a spawn's adds): they are not
 * asked again. */
KL_HIDDEN kiln_result kl_spawn_values(kiln_world *world, const char *call,
                                      const kiln_component *components, void *const *values,
                                      int32_t count, bool move, kiln_entity reserved,
                                      kiln_entity *dest);
KL_HIDDEN kiln_result kl_despawn_entity(kiln_world *world, const char *call, kiln_entity e);
/* add and set run the component's check hook on value before anything changes. */
KL_HIDDEN kiln_result kl_add_value(kiln_world *world, const char *call, kiln_entity e,
                                   kiln_component c, void *value, bool move);
KL_HIDDEN kiln_result kl_set_value(kiln_world *world, const char *call, kiln_entity e,
                                   kiln_component c, void *value, bool move);
KL_HIDDEN kiln_result kl_remove_component(kiln_world *world, const char *call, kiln_entity e,
                                          kiln_component c, bool *removed);
/* The add of value (not NULL, copied bytewise) or the remove of c along a cached plain edge
 * (no move or destroy hooks, no check on an add, room in the neighbour), when e is alive and
 * has one: true when done; false, with nothing changed, when kl_add_value or
 * kl_remove_component must decide (and report any error). Those two take the general path
 * only: their caller, the command buffers' apply, tries these first. */
KL_HIDDEN bool kl_add_plain(kiln_world *world, kiln_entity e, kiln_component c, const void *value);
KL_HIDDEN bool kl_remove_plain(kiln_world *world, kiln_entity e, kiln_component c);

#endif
