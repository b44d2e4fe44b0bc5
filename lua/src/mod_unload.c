/* mod_unload.c: what a going mod takes out of the world: its entities, and its components off
 * every entity. Invariant: the queries it needs are made before the first change, nothing is
 * allocated in the host's Lua state, and the only change that can fail (a removal moving an
 * entity to an archetype not made yet) comes before the despawns: a failure says what is
 * left, and a second call finishes. */
#include <stdio.h>

#include "mods.h"

enum { BATCH = 256 }; /* entities taken out of a loop at once: no allocation, few loops */

/* Up to BATCH entities of q, into dest (the loop ended before any change): how many. */
static int32_t take_batch(const kiln_query *q, kiln_entity *dest) {
    kiln_iter it;
    kiln_query_iter(q, &it);
    int32_t n = 0;
    while (n < BATCH && kiln_query_next(&it))
        for (int32_t r = 0; r < it.count && n < BATCH; r++) dest[n++] = it.entities[r];
    kiln_iter_fini(&it); /* nothing queued: nothing to land or to refuse */
    return n;
}

static void fail_with(kiln_world *world, char *err, size_t size, const char *what, kiln_component c) {
    if (!err || !size) return;
    kiln_component_info info;
    const char *name = kiln_component_info_get(world, c, &info) ? info.name : "?";
    snprintf(err, size, "%s %s (%s)", what, name, kiln_world_error(world));
}

/* Takes c off the entities of q (over c, without the tag of those despawned next) until none
 * is left, or one's removal is refused (an archetype to make): false then. */
static bool take_off(kiln_world *world, const kiln_query *q, kiln_component c, char *err, size_t size) {
    kiln_entity batch[BATCH];
    for (int32_t n; (n = take_batch(q, batch)) > 0;)
        for (int32_t k = 0; k < n; k++)
            if (kiln_remove(world, batch[k], c, NULL) != KILN_OK) {
                fail_with(world, err, size, "no memory to take off its entities its component", c);
                return false;
            }
    return true;
}

bool klua_mod_clear(klua_mods *mods, kiln_query *spawned, kiln_component tag, const kiln_component *drop,
                    int count, char *err, size_t size) {
    kiln_world *world = mods->kw->world;
    kiln_query *queries[KLUA_MOD_MAX_COMPONENTS];
    bool ok = true;
    int made = 0;
    for (; made < count; made++) {
        kiln_query_desc d = {.with = {drop[made]}};
        if (tag != KILN_NO_COMPONENT) d.without[0] = tag; /* despawned anyway: no move to fail */
        if (kiln_query_create(world, &d, &queries[made]) != KILN_OK) {
            fail_with(world, err, size, "out of memory for a query over its component", drop[made]);
            ok = false;
            break;
        }
    }
    for (int i = 0; ok && i < count; i++) ok = take_off(world, queries[i], drop[i], err, size);
    for (int i = 0; i < made; i++) kiln_query_destroy(queries[i]);
    if (!ok) return false;
    for (int i = 0; i < count; i++) kiln_resource_remove(world, drop[i], NULL);
    kiln_entity batch[BATCH];
    for (int32_t n; spawned && (n = take_batch(spawned, batch)) > 0;)
        for (int32_t k = 0; k < n; k++)
            if (kiln_despawn(world, batch[k]) != KILN_OK) { /* not deferred: no record to refuse */
                if (err && size) snprintf(err, size, "its entities stay (%s)", kiln_world_error(world));
                return false;
            }
    return true;
}

/* Left to no one, such a component's values on the host's entities (or a third mod's) counted
 * against no mod's world_memory and stayed through every later unload, the heir's included. */
void klua_mod_hand_over(klua_mods *mods, const klua_mod *mod) {
    for (int i = 0; i < mod->declared_count; i++) {
        kiln_component c = mod->declared[i];
        if (mod->declared_event[i] || !mod->declared_first[i] || klua_host_declared(mods->kw, c)) continue;
        for (int k = 0; k < mods->count; k++) {
            klua_mod *heir = mods->list[k];
            int j = 0;
            while (heir != mod && j < heir->declared_count && (heir->declared[j] != c || heir->declared_event[j])) j++;
            if (heir == mod || j == heir->declared_count) continue;
            heir->declared_first[j] = heir->declared_adopted[j] = true; /* a failed reload keeps it */
            /* its values on entities not the heir's count from now (refused: from its next add) */
            kiln_query_desc others = {.with = {c}, .without = {heir->tag}};
            if (!heir->foreign[j]) (void)kiln_query_create(mods->kw->world, &others, &heir->foreign[j]);
            break;
        }
    }
}
