/* test_persist_check_moves.c: Check suite for a load whose check hooks try to change the world
 * (a hook must not: it reads the world): each change is refused, and the load lands whole. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

typedef struct mover { int32_t v; } mover;

typedef struct mover_ctx {
    kiln_component tag, other, mover;
    int32_t asked, refused, resource_refused;
    int64_t sum; /* of the values the hook was asked about */
    kiln_result last;
    char add_error[256], resource_error[256], hash_error[256]; /* the refusals' messages */
} mover_ctx;

/* A check hook that breaks its contract: it adds a tag to the entity it is asked about,
 * moving it (and its neighbours' rows) to another archetype mid-check, and spawns into the
 * archetype the load is checking. The load walked rows that had moved, read values from
 * columns a spawn had reallocated, and kept the hook's changes. */
static kiln_result move_on_check(const kiln_world *cworld, kiln_entity e, const void *value, void *ctx, char *why,
                                 size_t why_size) {
    (void)why, (void)why_size;
    mover_ctx *m = ctx;
    kiln_world *world = (kiln_world *)cworld; /* (the breach) */
    kiln_entity spawned;
    if (!e && !value) return KILN_OK; /* kiln_spawn_batch's check of the defaults (core's own contract) */
    if (!e) { /* the resource's check */
        if (kiln_spawn_with(world, &m->other, NULL, 1, &spawned) != KILN_OK) m->resource_refused++;
        snprintf(m->resource_error, sizeof m->resource_error, "%s", kiln_world_error(world));
        return KILN_OK;
    }
    m->asked++;
    m->sum += ((const mover *)value)->v;
    m->last = kiln_add(world, e, m->tag, NULL);
    if (m->last != KILN_OK) m->refused++;
    snprintf(m->add_error, sizeof m->add_error, "%s", kiln_world_error(world));
    if (kiln_world_hash(world) == 0) snprintf(m->hash_error, sizeof m->hash_error, "%s", kiln_world_error(world));
    /* into the archetype of the rows the load checks: grown, its columns move */
    if (kiln_spawn_with(world, &m->mover, NULL, 1, &spawned) != KILN_OK) m->refused++;
    return KILN_OK;
}

static const kiln_field mover_fields[] = {{"v", KILN_TYPE_INT32, 0, 0}};

static kiln_component open_movers(pf_world *w, mover_ctx *m, bool hooked) {
    pf_open(w, false);
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(w->world, &(kiln_component_desc){.name = "Tagged"}, &m->tag), KILN_OK);
    ck_assert_int_eq(kiln_component_register(w->world, &(kiln_component_desc){.name = "Other"}, &m->other), KILN_OK);
    ck_assert_int_eq(kiln_component_register(w->world, &(kiln_component_desc){
        .name = "Mover", .size = sizeof(mover), .fields = mover_fields, .field_count = 1,
        .check = hooked ? move_on_check : NULL, .hook_ctx = m}, &id), KILN_OK);
    return m->mover = id;
}

KILN_TEST_GROUP_WITH(check_moves, .timeout = 60);

KILN_TEST_LOOP(check_moves, a_check_hook_that_changes_the_world_mid_load_is_refused_and_the_load_lands_whole, 0, 4) {
    bool json = _i & 1, fresh = _i & 2;
    pf_world src;
    mover_ctx sm = {0};
    kiln_component sid = open_movers(&src, &sm, false);
    pf_populate(&src);
    for (int i = 0; i < 300; i++) {
        mover v = {i};
        pf_pos p = {(float)i, 0, 0};
        kiln_component both[2] = {sid, src.pos};
        ck_assert_int_eq(kiln_spawn_with(src.world, i % 3 ? both : &sid, (const void *const[]){&v, &p}, i % 3 ? 2 : 1,
                                         NULL), KILN_OK);
    }
    mover res = {-1};
    ck_assert_int_eq(kiln_resource_set(src.world, sid, &res), KILN_OK);
    pf_bytes saved;
    pf_save(src.world, json ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
    /* the reference: the same load into a world whose Mover has no check */
    pf_world ref, hooked;
    mover_ctx rm = {0}, hm = {0};
    open_movers(&ref, &rm, false);
    open_movers(&hooked, &hm, true);
    if (!fresh) {
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(ref.world, NULL, NULL, 0, &e), KILN_OK);
        ck_assert_int_eq(kiln_spawn_with(hooked.world, NULL, NULL, 0, &e), KILN_OK);
    }
    ck_assert_int_eq(kiln_load(ref.world, saved.data, saved.size, NULL), KILN_OK);
    kiln_result r = kiln_load(hooked.world, saved.data, saved.size, NULL);
    ck_assert_msg(r == KILN_OK, "%s", kiln_world_error(hooked.world));
    ck_assert_int_eq(kiln_entity_count(hooked.world), kiln_entity_count(ref.world));
    ck_assert_uint_eq(kiln_world_hash(hooked.world), kiln_world_hash(ref.world));
    ck_assert_int_eq(hm.asked, 300);
    ck_assert_int_eq(hm.sum, 299 * 300 / 2); /* each loaded value, read where it lies */
    ck_assert_int_eq(hm.refused, 600); /* every add and every spawn */
    ck_assert_int_eq(hm.last, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(hm.resource_refused, 1);
    /* each refusal names the hook that made the call: a check hook, not a destroy or move hook */
    const char *tail = " while kiln_load checks the values it loads; a check hook reads the world and must not change it";
    char want[3][256];
    snprintf(want[0], sizeof want[0], "kiln_add: called from a component's check hook%s", tail);
    snprintf(want[1], sizeof want[1], "kiln_spawn_with: called from a component's check hook%s", tail);
    snprintf(want[2], sizeof want[2], "kiln_world_hash: called from a component's check hook%s", tail);
    ck_assert_str_eq(hm.add_error, want[0]);
    ck_assert_str_eq(hm.resource_error, want[1]);
    ck_assert_str_eq(hm.hash_error, want[2]);
    pf_bytes_free(&saved);
    pf_close(&src);
    pf_close(&ref);
    pf_close(&hooked);
}
