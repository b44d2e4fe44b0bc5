/* test_persist_snapshot.c: Check suite for snapshots (rollback gives back the same handles,
 * values, ticks and future handles) and the world hash (content, not storage order). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(hash);

KILN_TEST(hash, storage_order_and_registration_order_do_not_change_the_hash) {
    pf_world a, b;
    pf_open(&a, false);
    pf_open(&b, true);
    /* the same three entities with the same handles, reached through other archetype paths */
    kiln_entity ea[3], eb[3];
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_spawn(a.world, &ea[i]), KILN_OK);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_spawn(b.world, &eb[i]), KILN_OK);
    pf_pos p = {1, 2, 3};
    pf_vel v = {4, 5};
    ck_assert_int_eq(kiln_add(a.world, ea[0], a.pos, &p), KILN_OK);
    ck_assert_int_eq(kiln_add(a.world, ea[0], a.vel, &v), KILN_OK);
    ck_assert_int_eq(kiln_add(a.world, ea[2], a.pos, &p), KILN_OK);
    ck_assert_int_eq(kiln_add(b.world, eb[2], b.pos, &p), KILN_OK);
    ck_assert_int_eq(kiln_add(b.world, eb[0], b.vel, &v), KILN_OK);
    ck_assert_int_eq(kiln_add(b.world, eb[0], b.pos, &p), KILN_OK);
    ck_assert_uint_eq(kiln_world_hash(a.world), kiln_world_hash(b.world));
    /* a value, a tick or a tag each change it */
    uint64_t h = kiln_world_hash(a.world);
    ((pf_pos *)kiln_get_mut(a.world, ea[2], a.pos))->y = 2.5f;
    ck_assert_uint_ne(kiln_world_hash(a.world), h);
    ((pf_pos *)kiln_get_mut(a.world, ea[2], a.pos))->y = 2.0f;
    ck_assert_uint_eq(kiln_world_hash(a.world), h);
    kiln_tick_advance(a.world);
    ck_assert_uint_ne(kiln_world_hash(a.world), h);
    kiln_tick_advance(b.world);
    ck_assert_int_eq(kiln_add(b.world, eb[1], b.tag, NULL), KILN_OK);
    ck_assert_uint_ne(kiln_world_hash(a.world), kiln_world_hash(b.world));
    pf_close(&a);
    pf_close(&b);
}

/* n entities with Position and Score (whose best names another entity, some of them
 * despawned); with shuffled, the Score rows are moved into reverse order afterwards. */
static void hash_world(pf_world *w, test_allocator *alloc, int n, bool shuffled) {
    if (alloc) pf_open_on(w, false, alloc);
    else pf_open(w, false);
    kiln_entity *e = malloc(sizeof *e * (size_t)n);
    for (int i = 0; i < n; i++) {
        pf_pos p = {(float)i, 1, 2};
        ck_assert_int_eq(kiln_spawn_with(w->world, &w->pos, (const void *[]){&p}, 1, &e[i]), KILN_OK);
    }
    for (int i = 0; i < n; i++) {
        pf_score s = {i, e[(i * 7 + 3) % n]};
        ck_assert_int_eq(kiln_add(w->world, e[i], w->score, &s), KILN_OK);
    }
    for (int i = 0; i < n; i += 10) ck_assert_int_eq(kiln_despawn(w->world, e[i]), KILN_OK);
    for (int i = n - 1; shuffled && i >= 0; i--) {
        if (i % 10 == 0) continue;
        pf_score s = *(const pf_score *)kiln_get(w->world, e[i], w->score);
        ck_assert_int_eq(kiln_remove(w->world, e[i], w->score, NULL), KILN_OK);
        ck_assert_int_eq(kiln_add(w->world, e[i], w->score, &s), KILN_OK);
    }
    free(e);
}

KILN_TEST(hash, rows_in_any_order_and_dead_references_hash_as_in_slot_order_even_without_memory) {
    for (int n = 20; n <= 5000; n += 4980) {
        pf_world a, b, c;
        hash_world(&a, NULL, n, false);
        hash_world(&b, NULL, n, true);
        test_allocator alloc;
        test_allocator_init(&alloc);
        hash_world(&c, &alloc, n, true);
        uint64_t h = kiln_world_hash(a.world);
        ck_assert_uint_eq(kiln_world_hash(b.world), h);
        test_allocator_fail_after(&alloc, 0); /* no permutation, no table: the slow paths */
        ck_assert_uint_eq(kiln_world_hash(c.world), h);
        test_allocator_fail_never(&alloc);
        ck_assert_uint_eq(kiln_world_hash(c.world), h);
        /* a dead reference counts as null: nulling it by hand changes nothing */
        pf_score *s = NULL;
        for (uint32_t i = 1; !s && i < (uint32_t)n; i++) {
            pf_score *v = kiln_get_mut(a.world, kiln_entity_make(i, 1), a.score);
            if (v && !kiln_is_alive(a.world, v->best)) s = v;
        }
        ck_assert_ptr_nonnull(s);
        s->best = KILN_NULL_ENTITY;
        ck_assert_uint_eq(kiln_world_hash(a.world), h);
        s->points++;
        ck_assert_uint_ne(kiln_world_hash(a.world), h);
        pf_close(&a);
        pf_close(&b);
        pf_close(&c);
    }
}

KILN_TEST(hash, a_save_loaded_into_a_fresh_world_hashes_the_same) {
    for (int f = 0; f < 2; f++) {
        pf_world a, b;
        pf_open(&a, false);
        pf_populate(&a);
        pf_bytes saved;
        pf_save(a.world, f ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
        pf_open(&b, true);
        ck_assert_int_eq(kiln_load(b.world, saved.data, saved.size, NULL), KILN_OK);
        ck_assert_uint_eq(kiln_world_hash(a.world), kiln_world_hash(b.world));
        pf_bytes_free(&saved);
        pf_close(&a);
        pf_close(&b);
    }
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(snapshot);

KILN_TEST(snapshot, restore_gives_back_handles_values_ticks_resources_and_future_handles) {
    pf_world a;
    pf_open(&a, false);
    pf_populate(&a);
    uint64_t before = kiln_world_hash(a.world);
    kiln_snapshot *snap = NULL;
    ck_assert_int_eq(kiln_snapshot_create(a.world, &snap), KILN_OK);
    kiln_entity next_before;
    /* what would be spawned next, seen through a second snapshot taken and restored at once */
    ck_assert_int_eq(kiln_spawn(a.world, &next_before), KILN_OK);
    ck_assert_uint_eq(kiln_tick_epoch(a.world), 0);
    ck_assert_int_eq(kiln_snapshot_restore(a.world, snap), KILN_OK);
    ck_assert_uint_eq(kiln_tick_epoch(a.world), 1); /* a tick seen again is a new frame */
    ck_assert_uint_eq(kiln_world_hash(a.world), before);
    /* mess the world up: despawn, spawn, change values, resources and the tick */
    ck_assert_int_eq(kiln_despawn(a.world, a.e[2]), KILN_OK);
    for (int i = 0; i < 50; i++) ck_assert_int_eq(kiln_spawn(a.world, NULL), KILN_OK);
    ((pf_pos *)kiln_get_mut(a.world, a.e[0], a.pos))->x = 99;
    ck_assert_int_eq(kiln_remove(a.world, a.e[4], a.tag, NULL), KILN_OK);
    ck_assert_int_eq(kiln_resource_remove(a.world, a.score, NULL), KILN_OK);
    for (int i = 0; i < 5; i++) kiln_tick_advance(a.world);
    ck_assert_int_eq(kiln_snapshot_restore(a.world, snap), KILN_OK);
    ck_assert_uint_eq(kiln_world_hash(a.world), before);
    ck_assert_uint_eq(kiln_tick_current(a.world), 7);
    ck_assert_int_eq(kiln_entity_count(a.world), 7);
    ck_assert(kiln_is_alive(a.world, a.e[2]));
    ck_assert(kiln_has(a.world, a.e[4], a.tag));
    ck_assert(((const pf_pos *)kiln_get(a.world, a.e[0], a.pos))->x == 0.5f);
    ck_assert_ptr_nonnull(kiln_resource_get(a.world, a.score));
    kiln_entity next_after;
    ck_assert_int_eq(kiln_spawn(a.world, &next_after), KILN_OK);
    ck_assert_uint_eq(next_after, next_before);
    /* the parent links still work through the transform addon */
    kiln_entity kids[8];
    ck_assert_int_eq(kiln_transform_children(a.world, a.e[0], kids, 8), 2);
    kiln_snapshot_destroy(snap);
    pf_close(&a);
}

KILN_TEST(snapshot, a_restore_makes_transform_propagation_recompute) {
    pf_world a;
    pf_open(&a, false);
    pf_populate(&a);
    kiln_local_transform lt = kiln_transform_local_identity();
    ck_assert_int_eq(kiln_add(a.world, a.e[1], a.tf.local, &lt), KILN_OK);
    ck_assert_int_eq(kiln_transform_propagate(a.world, NULL), KILN_OK);
    kiln_snapshot *snap = NULL;
    ck_assert_int_eq(kiln_snapshot_create(a.world, &snap), KILN_OK);
    kiln_tick_advance(a.world);
    ((kiln_local_transform *)kiln_get_mut(a.world, a.e[0], a.tf.local))->position[0] = 10;
    ck_assert_int_eq(kiln_transform_propagate(a.world, NULL), KILN_OK);
    ck_assert(((const kiln_world_transform *)kiln_get(a.world, a.e[1], a.tf.world))->matrix[3][0] == 10);
    ck_assert_int_eq(kiln_snapshot_restore(a.world, snap), KILN_OK);
    ck_assert(((const kiln_world_transform *)kiln_get(a.world, a.e[1], a.tf.world))->matrix[3][0] == 0);
    ((kiln_local_transform *)kiln_get_mut(a.world, a.e[0], a.tf.local))->position[0] = 3;
    ck_assert_int_eq(kiln_transform_propagate(a.world, NULL), KILN_OK);
    ck_assert(((const kiln_world_transform *)kiln_get(a.world, a.e[1], a.tf.world))->matrix[3][0] == 3);
    kiln_snapshot_destroy(snap);
    pf_close(&a);
}

KILN_TEST(snapshot, values_with_hooks_are_refused_naming_entity_and_component) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log;
    memset(&log, 0, sizeof log);
    kiln_component owned = test_register_owned(w, &log);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(w, &e), KILN_OK);
    ck_assert_int_eq(kiln_add(w, e, owned, NULL), KILN_OK);
    kiln_snapshot *snap = NULL;
    ck_assert_int_eq(kiln_snapshot_create(w, &snap), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(snap);
    char expected[160], buf[24];
    snprintf(expected, sizeof expected, "kiln_snapshot_create: entity %s component 'Owned' has hooks "
             "(it owns something) and cannot be copied", kiln_entity_format(e, buf, sizeof buf));
    ck_assert_str_eq(kiln_world_error(w), expected);
    kiln_world_destroy(w);
}

KILN_TEST(snapshot, a_snapshot_of_another_world_is_refused_and_changes_nothing) {
    pf_world a, b;
    pf_open(&a, false);
    pf_open(&b, false);
    pf_populate(&a);
    pf_populate(&b);
    kiln_snapshot *snap = NULL;
    ck_assert_int_eq(kiln_snapshot_create(a.world, &snap), KILN_OK);
    uint64_t h = kiln_world_hash(b.world);
    ck_assert_int_eq(kiln_snapshot_restore(b.world, snap), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(b.world), "kiln_snapshot_restore: the snapshot is of another world");
    ck_assert_int_eq(kiln_snapshot_update(b.world, snap), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(b.world), "kiln_snapshot_update: the snapshot is of another world");
    /* a real refusal, not an assertion: under NDEBUG it read a's archetype indexes in b */
    ck_assert_int_eq(kiln_snapshot_count(b.world, snap, b.pos), -1);
    ck_assert_str_eq(kiln_world_error(b.world), "kiln_snapshot_count: the snapshot is of another world");
    ck_assert_uint_eq(kiln_world_hash(b.world), h);
    kiln_snapshot_destroy(snap);
    pf_close(&a);
    pf_close(&b);
}

/* An allocator that hands a freed block out again for the next request of its size, as
 * malloc often does: a world made after another was destroyed sits at its address. */
typedef struct reuse_pool { void *blocks[256]; size_t sizes[256]; int n; } reuse_pool;

static void *reuse_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    reuse_pool *p = ud;
    if (nsize == 0) {
        if (p->n < 256) p->blocks[p->n] = ptr, p->sizes[p->n++] = osize;
        else free(ptr);
        return NULL;
    }
    if (!ptr)
        for (int i = p->n; i-- > 0;)
            if (p->sizes[i] == nsize) {
                void *b = p->blocks[i];
                p->blocks[i] = p->blocks[--p->n], p->sizes[i] = p->sizes[p->n];
                return b;
            }
    return realloc(ptr, nsize);
}

/* The address check alone took the new world for the snapshot's: the restore wrote rows of
 * another layout over its columns and records past its pages (heap corruption). */
KILN_TEST(snapshot, a_snapshot_outliving_its_world_is_refused_by_a_world_made_at_its_address) {
    reuse_pool pool = {.n = 0};
    kiln_world_desc desc = {.alloc = reuse_alloc, .alloc_ud = &pool};
    kiln_world *a = kiln_world_create(&desc);
    kiln_component big, tag;
    ck_assert_int_eq(kiln_component_register(a, &(kiln_component_desc){.name = "Big", .size = 64}, &big), KILN_OK);
    ck_assert_int_eq(kiln_component_register(a, &(kiln_component_desc){.name = "Tag"}, &tag), KILN_OK);
    for (int i = 0; i < 100; i++) {
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(a, (kiln_component[]){big, tag}, NULL, 2, &e), KILN_OK);
    }
    kiln_snapshot *snap = NULL;
    ck_assert_int_eq(kiln_snapshot_create(a, &snap), KILN_OK);
    void *was = a;
    kiln_world_destroy(a);
    kiln_world *b = kiln_world_create(&desc);
    ck_assert_ptr_eq(b, was);
    kiln_component small;
    ck_assert_int_eq(kiln_component_register(b, &(kiln_component_desc){.name = "Small", .size = 1}, &small), KILN_OK);
    ck_assert_int_eq(kiln_component_register(b, &(kiln_component_desc){.name = "Tag"}, &tag), KILN_OK);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(b, (kiln_component[]){small, tag}, NULL, 2, &e), KILN_OK);
    uint64_t h = kiln_world_hash(b);
    ck_assert_int_eq(kiln_snapshot_restore(b, snap), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(b), "kiln_snapshot_restore: the snapshot is of another world");
    ck_assert_int_eq(kiln_snapshot_update(b, snap), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_snapshot_count(b, snap, tag), -1); /* not a's, though at its address */
    ck_assert_str_eq(kiln_world_error(b), "kiln_snapshot_count: the snapshot is of another world");
    ck_assert_uint_eq(kiln_world_hash(b), h);
    kiln_snapshot_destroy(snap);
    kiln_world_destroy(b);
    while (pool.n) free(pool.blocks[--pool.n]);
}

/* The address check alone took the new world for the prefab's: its component ids name other
 * components there, of the same size, and the spawn wrote the old values into them. A scene
 * handed the prefab and an instance of the dead world are refused alike. */
KILN_TEST(snapshot, a_prefab_or_instance_outliving_its_world_is_refused_by_a_world_made_at_its_address) {
    reuse_pool pool = {.n = 0};
    kiln_world_desc desc = {.alloc = reuse_alloc, .alloc_ud = &pool};
    kiln_world *a = kiln_world_create(&desc);
    kiln_component health;
    ck_assert_int_eq(kiln_component_register(a, &(kiln_component_desc){.name = "Health", .size = 4}, &health), KILN_OK);
    kiln_prefab *p = NULL;
    int32_t full = 100;
    ck_assert_int_eq(kiln_prefab_create(a, &(kiln_prefab_desc){.components = &health, .values = (const void *[]){&full},
                                                               .component_count = 1}, &p), KILN_OK);
    static const char scene[] = "{\"version\": 1, \"entities\": [{\"prefab\": \"unit\"}]}";
    const char *names[] = {"unit"};
    kiln_instantiate_desc with = {.prefab_names = names, .prefabs = (const kiln_prefab *[]){p}, .prefab_count = 1};
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_instantiate(a, scene, sizeof scene - 1, &with, &inst), KILN_OK);
    void *was = a;
    kiln_world_destroy(a);
    kiln_world *b = kiln_world_create(&desc);
    ck_assert_ptr_eq(b, was);
    kiln_component poison;
    ck_assert_int_eq(kiln_component_register(b, &(kiln_component_desc){.name = "Poison", .size = 4}, &poison), KILN_OK);
    ck_assert_int_eq(poison, health);
    uint64_t h = kiln_world_hash(b);
    kiln_entity e;
    ck_assert_int_eq(kiln_prefab_spawn(b, p, 1, NULL, &e), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(b), "kiln_prefab_spawn: the prefab was made for another world");
    kiln_instance *other = NULL;
    ck_assert_int_eq(kiln_instantiate(b, scene, sizeof scene - 1, &with, &other), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kiln_world_error(b), "prefab 'unit' was made for another world"), "%s", kiln_world_error(b));
    ck_assert_int_eq(kiln_instance_despawn(b, inst), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(b), "kiln_instance_despawn: the instance is of another world");
    ck_assert_uint_eq(kiln_world_hash(b), h);
    ck_assert_int_eq(kiln_entity_count(b), 0);
    kiln_instance_destroy(inst);
    kiln_prefab_destroy(p);
    kiln_world_destroy(b);
    while (pool.n) free(pool.blocks[--pool.n]);
}

KILN_TEST(snapshot, update_reuses_the_block_and_restores_the_newer_state) {
    pf_world a;
    pf_open(&a, false);
    pf_populate(&a);
    kiln_snapshot *snap = NULL;
    ck_assert_int_eq(kiln_snapshot_create(a.world, &snap), KILN_OK);
    size_t bytes = kiln_snapshot_bytes(snap);
    ((pf_pos *)kiln_get_mut(a.world, a.e[0], a.pos))->x = 42;
    uint64_t h = kiln_world_hash(a.world);
    ck_assert_int_eq(kiln_snapshot_update(a.world, snap), KILN_OK);
    ck_assert_uint_eq(kiln_snapshot_bytes(snap), bytes);
    ((pf_pos *)kiln_get_mut(a.world, a.e[0], a.pos))->x = 43;
    ck_assert_int_eq(kiln_snapshot_restore(a.world, snap), KILN_OK);
    ck_assert_uint_eq(kiln_world_hash(a.world), h);
    kiln_snapshot_destroy(snap);
    pf_close(&a);
}
