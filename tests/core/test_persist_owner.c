/* test_persist_owner.c: Check suite for owner marks (kiln_component_desc.owner): copies
 * (clone, prefabs, scenes) leave them off, a load gives them back unless desc.owned says no. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

static const kiln_persist_format formats[] = {KILN_PERSIST_BINARY, KILN_PERSIST_JSON};

typedef struct marked {
    kiln_world *world;
    kiln_component hp, mark;
    kiln_entity e[3];
} marked;

/* A world with Hp and the owner mark Mine on three entities, one more with Hp alone. */
static void marked_open(marked *m) {
    static const kiln_field hp[] = {{"v", KILN_TYPE_INT32, 0, 0}};
    m->world = kiln_world_create(NULL);
    m->hp = pf_register(m->world, "Hp", sizeof(int32_t), hp, 1);
    ck_assert_int_eq(kiln_component_register(m->world, &(kiln_component_desc){.name = "Mine", .owner = true}, &m->mark),
                     KILN_OK);
    for (int32_t i = 0; i < 3; i++) {
        kiln_component both[2] = {m->hp, m->mark};
        ck_assert_int_eq(kiln_spawn_with(m->world, both, (const void *[]){&i, NULL}, 2, &m->e[i]), KILN_OK);
    }
    ck_assert_int_eq(kiln_spawn_with(m->world, &m->hp, NULL, 1, NULL), KILN_OK);
}

KILN_TEST_GROUP(owner);

KILN_TEST(owner, an_owner_mark_is_a_tag_registered_again_only_as_one) {
    marked m;
    marked_open(&m);
    kiln_component id;
    kiln_component_info info;
    ck_assert(kiln_component_info_get(m.world, m.mark, &info) && info.owner);
    ck_assert(kiln_component_info_get(m.world, m.hp, &info) && !info.owner);
    ck_assert_int_eq(kiln_component_register(m.world, &(kiln_component_desc){.name = "Mine", .owner = true}, &id),
                     KILN_OK);
    ck_assert_uint_eq(id, m.mark);
    ck_assert_int_eq(kiln_component_register(m.world, &(kiln_component_desc){.name = "Mine"}, &id),
                     KILN_ERR_LAYOUT_MISMATCH);
    kiln_component_desc sized = {.name = "Big", .size = 4, .owner = true};
    ck_assert_int_eq(kiln_component_register(m.world, &sized, &id), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kiln_world_error(m.world), "Big is an owner mark and must be a tag"));
    kiln_world_destroy(m.world);
}

KILN_TEST(owner, a_clone_a_prefab_and_a_scene_leave_owner_marks_off) {
    marked m;
    marked_open(&m);
    kiln_entity copy;
    ck_assert_int_eq(kiln_clone(m.world, m.e[1], NULL, &copy), KILN_OK);
    ck_assert(kiln_has(m.world, copy, m.hp) && !kiln_has(m.world, copy, m.mark));
    ck_assert_int_eq(*(const int32_t *)kiln_get(m.world, copy, m.hp), 1);
    /* from a desc, from JSON, and a scene's own entities */
    kiln_prefab *made = NULL, *read = NULL;
    kiln_component both[2] = {m.hp, m.mark};
    ck_assert_int_eq(kiln_prefab_create(m.world, &(kiln_prefab_desc){.components = both, .component_count = 2}, &made),
                     KILN_OK);
    static const char json[] = "{\"components\": {\"Hp\": {\"v\": 7}, \"Mine\": true}}";
    ck_assert_int_eq(kiln_prefab_load(m.world, json, sizeof json - 1, NULL, &read), KILN_OK);
    kiln_entity spawned[2];
    ck_assert_int_eq(kiln_prefab_spawn(m.world, made, 1, NULL, &spawned[0]), KILN_OK);
    ck_assert_int_eq(kiln_prefab_spawn(m.world, read, 1, NULL, &spawned[1]), KILN_OK);
    static const char scene[] = "{\"version\": 1, \"entities\": [{\"components\": {\"Hp\": {\"v\": 8}, \"Mine\": true}}]}";
    kiln_instance *inst = NULL;
    ck_assert_msg(kiln_instantiate(m.world, scene, sizeof scene - 1, NULL, &inst) == KILN_OK, "%s",
                  kiln_world_error(m.world));
    kiln_entity placed;
    ck_assert_int_eq(kiln_instance_spawned(inst, &placed, 1), 1);
    kiln_entity all[3] = {spawned[0], spawned[1], placed};
    for (int i = 0; i < 3; i++) ck_assert(kiln_has(m.world, all[i], m.hp) && !kiln_has(m.world, all[i], m.mark));
    ck_assert_int_eq(*(const int32_t *)kiln_get(m.world, spawned[1], m.hp), 7);
    /* left off, but its value is still checked as a tag's */
    kiln_prefab *bad = NULL;
    static const char wrong[] = "{\"components\": {\"Mine\": 5}}";
    ck_assert_int_eq(kiln_prefab_load(m.world, wrong, sizeof wrong - 1, NULL, &bad), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kiln_world_error(m.world), "true (a tag)"));
    kiln_instance_destroy(inst);
    kiln_prefab_destroy(made);
    kiln_prefab_destroy(read);
    kiln_world_destroy(m.world);
}

typedef struct asked {
    int calls;
    kiln_component mark;
    int64_t entities;
    int answer; /* 0 keep, 1 drop, 2 refuse */
} asked;

static bool ask(void *ud, kiln_component mark, int64_t entities, bool *drop, char *why, size_t why_size) {
    asked *a = ud;
    a->calls++;
    a->mark = mark;
    a->entities = entities;
    ck_assert(!*drop);
    if (a->answer == 2) {
        snprintf(why, why_size, "%lld are too many", (long long)entities);
        return false;
    }
    *drop = a->answer == 1;
    return true;
}

KILN_TEST_LOOP(owner, a_load_asks_owned_and_keeps_drops_or_refuses_the_marks, 0, 2) {
    marked m;
    marked_open(&m);
    pf_bytes saved;
    pf_save(m.world, formats[_i], &saved);
    for (int answer = 0; answer < 3; answer++) {
        asked a = {.answer = answer};
        kiln_load_desc d = {.owned = ask, .ud = &a};
        int64_t before = kiln_entity_count(m.world);
        uint64_t hash = kiln_world_content_hash(m.world);
        kiln_result r = kiln_load(m.world, saved.data, saved.size, &d);
        ck_assert_int_eq(a.calls, 1);
        ck_assert_uint_eq(a.mark, m.mark);
        ck_assert_int_eq(a.entities, 3);
        if (answer == 2) {
            ck_assert_int_eq(r, KILN_ERR_LIMIT);
            ck_assert_str_eq(kiln_world_error(m.world), "kiln_load: 3 are too many");
            ck_assert_int_eq(kiln_entity_count(m.world), before);
            ck_assert_uint_eq(kiln_world_content_hash(m.world), hash);
            continue;
        }
        ck_assert_msg(r == KILN_OK, "%s", kiln_world_error(m.world));
        ck_assert_int_eq(kiln_entity_count(m.world), before + 4);
        kiln_query *q;
        ck_assert_int_eq(kiln_query_create(m.world, &(kiln_query_desc){.with = {m.mark}}, &q), KILN_OK);
        ck_assert_int_eq(kiln_query_count(q), 6); /* the first kept 3 more, the second dropped them */
        kiln_query_destroy(q);
    }
    /* without owned, as saved */
    ck_assert_int_eq(kiln_load(m.world, saved.data, saved.size, NULL), KILN_OK);
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(m.world, &(kiln_query_desc){.with = {m.mark}}, &q), KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 9);
    kiln_query_destroy(q);
    /* into a world that never held an entity (the saved handles kept), dropped */
    marked fresh;
    fresh.world = kiln_world_create(NULL);
    static const kiln_field hp[] = {{"v", KILN_TYPE_INT32, 0, 0}};
    fresh.hp = pf_register(fresh.world, "Hp", sizeof(int32_t), hp, 1);
    ck_assert_int_eq(kiln_component_register(fresh.world, &(kiln_component_desc){.name = "Mine", .owner = true},
                                             &fresh.mark), KILN_OK);
    asked a = {.answer = 1};
    kiln_load_desc d = {.owned = ask, .ud = &a};
    ck_assert_int_eq(kiln_load(fresh.world, saved.data, saved.size, &d), KILN_OK);
    for (int i = 0; i < 3; i++) {
        ck_assert(kiln_has(fresh.world, m.e[i], fresh.hp) && !kiln_has(fresh.world, m.e[i], fresh.mark));
        ck_assert_int_eq(*(const int32_t *)kiln_get(fresh.world, m.e[i], fresh.hp), i);
    }
    kiln_world_destroy(fresh.world);
    pf_bytes_free(&saved);
    kiln_world_destroy(m.world);
}

static bool not_ready(void *ud, int64_t entities, char *why, size_t why_size) {
    (void)ud;
    snprintf(why, why_size, "no room for %lld", (long long)entities);
    return false;
}

KILN_TEST_LOOP(owner, a_refused_load_registers_none_of_the_addon_components, 0, 2) {
    marked m;
    marked_open(&m);
    ck_assert_int_eq(kiln_name_set(m.world, m.e[0], "boss"), KILN_OK);
    ck_assert_int_eq(kiln_random_seed(m.world, 7), KILN_OK);
    pf_bytes saved;
    pf_save(m.world, formats[_i], &saved);
    kiln_world *w = kiln_world_create(NULL);
    static const kiln_field hp[] = {{"v", KILN_TYPE_INT32, 0, 0}};
    pf_register(w, "Hp", sizeof(int32_t), hp, 1);
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "Mine", .owner = true}, NULL),
                     KILN_OK);
    asked a = {.answer = 2};
    kiln_load_desc refusing[2] = {{.owned = ask, .ud = &a}, {.ready = not_ready}};
    int32_t components = kiln_component_count(w);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_ne(kiln_load(w, saved.data, saved.size, &refusing[k]), KILN_OK);
        ck_assert_int_eq(kiln_component_count(w), components);
        ck_assert_uint_eq(kiln_component_lookup(w, "Name"), 0);
        ck_assert_uint_eq(kiln_component_lookup(w, "RandomSeed"), 0);
        ck_assert_int_eq(kiln_entity_count(w), 0);
    }
    ck_assert_msg(kiln_load(w, saved.data, saved.size, NULL) == KILN_OK, "%s", kiln_world_error(w));
    ck_assert_uint_ne(kiln_component_lookup(w, "Name"), 0);
    ck_assert_uint_ne(kiln_component_lookup(w, "RandomSeed"), 0);
    ck_assert_uint_eq(kiln_name_lookup(w, "boss"), m.e[0]);
    kiln_world_destroy(w);
    pf_bytes_free(&saved);
    kiln_world_destroy(m.world);
}
