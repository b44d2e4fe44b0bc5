/* test_persist.c: Check suite for save and load (binary and JSON): what a load gives back,
 * matching by name, conversions, remapping, and that a refused load leaves the world as it was. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

static const kiln_persist_format formats[] = {KILN_PERSIST_BINARY, KILN_PERSIST_JSON};

static void load_ok(kiln_world *world, const pf_bytes *b, const kiln_load_desc *desc) {
    kiln_result r = kiln_load(world, b->data, b->size, desc);
    ck_assert_msg(r == KILN_OK, "kiln_load failed: %s", kiln_world_error(world));
}

static kiln_entity parent_of(const pf_world *w, kiln_entity e) {
    const kiln_parent *p = kiln_get(w->world, e, w->tf.parent);
    return p ? p->entity : KILN_NULL_ENTITY;
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(round_trip);

KILN_TEST_LOOP(round_trip, a_fresh_world_gets_the_same_handles_values_parents_resources_and_tick, 0, 2) {
    pf_world a, b;
    pf_open(&a, false);
    pf_populate(&a);
    pf_bytes saved;
    pf_save(a.world, formats[_i], &saved);
    pf_open(&b, false);
    load_ok(b.world, &saved, NULL);
    ck_assert_int_eq(kiln_entity_count(b.world), kiln_entity_count(a.world));
    ck_assert_uint_eq(kiln_tick_current(b.world), 7);
    for (int i = 0; i < 7; i++) ck_assert(kiln_is_alive(b.world, a.e[i]));
    const pf_pos *p = kiln_get(b.world, a.e[5], b.pos);
    ck_assert_ptr_nonnull(p);
    ck_assert(p->x == 5.5f && p->y == 5 * 2.25f && p->z == -1.0f / 8.0f);
    const pf_vel *v = kiln_get(b.world, a.e[1], b.vel);
    ck_assert(v->dx == 1e-300 && v->dy == -3.5);
    v = kiln_get(b.world, a.e[2], b.vel);
    uint64_t bits;
    memcpy(&bits, &v->dy, 8);
    ck_assert_uint_eq(bits, 0xfff4000000000abcu); /* a NaN's payload and sign, in either format */
    const pf_target *t = kiln_get(b.world, a.e[2], b.target);
    ck_assert_uint_eq(t->target, a.e[0]);
    ck_assert_uint_eq(t->pair[0], a.e[3]);
    ck_assert_uint_eq(t->pair[1], KILN_NULL_ENTITY); /* it pointed at an entity not saved */
    ck_assert_int_eq(t->weight, -42);
    ck_assert(memcmp(((const pf_label *)kiln_get(b.world, a.e[3], b.label))->text, "ship\0\0x\0", 8) == 0);
    ck_assert(kiln_has(b.world, a.e[4], b.tag));
    ck_assert_uint_eq(parent_of(&b, a.e[2]), a.e[1]);
    ck_assert_uint_eq(parent_of(&b, a.e[1]), a.e[0]);
    const pf_score *s = kiln_resource_get(b.world, b.score);
    ck_assert(s->points == 123456789012345 && s->best == a.e[3]);
    const kiln_local_transform *lt = kiln_get(b.world, a.e[0], b.tf.local);
    ck_assert(lt->position[1] == 4.0f && lt->rotation[3] == 1.0f);
    pf_bytes_free(&saved);
    pf_close(&a);
    pf_close(&b);
}

KILN_TEST_LOOP(round_trip, saving_a_loaded_world_again_gives_identical_bytes, 0, 2) {
    pf_world a, b;
    pf_open(&a, false);
    pf_populate(&a);
    pf_bytes first, second;
    pf_save(a.world, formats[_i], &first);
    pf_open(&b, true); /* registered in the other order: ids differ, the file does not */
    load_ok(b.world, &first, NULL);
    pf_save(b.world, formats[_i], &second);
    ck_assert_uint_eq(first.size, second.size);
    ck_assert(memcmp(first.data, second.data, first.size) == 0);
    pf_bytes_free(&first);
    pf_bytes_free(&second);
    pf_close(&a);
    pf_close(&b);
}

KILN_TEST_LOOP(round_trip, a_used_world_gets_new_handles_and_every_reference_follows, 0, 2) {
    pf_world a, b;
    pf_open(&a, false);
    pf_populate(&a);
    pf_bytes saved;
    pf_save(a.world, formats[_i], &saved);
    pf_open(&b, true);
    pf_populate(&b); /* b holds its own scene: the loaded one must not collide with it */
    int64_t before = kiln_entity_count(b.world);
    load_ok(b.world, &saved, NULL);
    ck_assert_int_eq(kiln_entity_count(b.world), before + kiln_entity_count(a.world));
    /* find the loaded copy of a.e[2]: the entity with a Target whose weight is -42 and that is
     * not b's own e[2] */
    kiln_entity all[64];
    int64_t n = kiln_world_entities(b.world, all, 64);
    kiln_entity copy = KILN_NULL_ENTITY;
    for (int64_t i = 0; i < n; i++)
        if (all[i] != b.e[2] && kiln_has(b.world, all[i], b.target)) copy = all[i];
    ck_assert_uint_ne(copy, KILN_NULL_ENTITY);
    const pf_target *t = kiln_get(b.world, copy, b.target);
    ck_assert(kiln_is_alive(b.world, t->target));
    ck_assert_uint_ne(t->target, b.e[0]);
    ck_assert(kiln_has(b.world, t->target, b.tf.local)); /* the copy of a.e[0] */
    kiln_entity parent = parent_of(&b, copy);
    ck_assert_uint_eq(parent_of(&b, parent), t->target);
    const pf_score *s = kiln_resource_get(b.world, b.score);
    ck_assert_str_eq(((const pf_label *)kiln_get(b.world, s->best, b.label))->text, "ship");
    ck_assert_uint_ne(s->best, b.e[3]);
    pf_bytes_free(&saved);
    pf_close(&a);
    pf_close(&b);
}

typedef struct map_log {
    kiln_entity old_e[16], new_e[16];
    int n;
} map_log;

static void log_map(void *ud, kiln_entity o, kiln_entity n) {
    map_log *m = ud;
    if (m->n < 16) m->old_e[m->n] = o, m->new_e[m->n] = n;
    m->n++;
}

KILN_TEST(round_trip, the_mapped_callback_tells_every_old_handle_and_its_new_one) {
    pf_world a, b;
    pf_open(&a, false);
    pf_populate(&a);
    pf_bytes saved;
    pf_save(a.world, KILN_PERSIST_BINARY, &saved);
    pf_open(&b, false);
    pf_populate(&b);
    map_log m = {0};
    kiln_load_desc d = {.mapped = log_map, .ud = &m};
    load_ok(b.world, &saved, &d);
    ck_assert_int_eq(m.n, (int)kiln_entity_count(a.world));
    for (int i = 0; i < m.n; i++) {
        ck_assert(kiln_is_alive(b.world, m.new_e[i]));
        if (m.old_e[i] == a.e[3])
            ck_assert_str_eq(((const pf_label *)kiln_get(b.world, m.new_e[i], b.label))->text, "ship");
    }
    pf_bytes_free(&saved);
    pf_close(&a);
    pf_close(&b);
}


/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(progress);

typedef struct progress_log {
    int64_t units, calls, stop_at; /* stop_at: the call that answers false (0: none) */
} progress_log;

static bool log_progress(void *ud, int64_t units) {
    progress_log *p = ud;
    p->units += units;
    return ++p->calls != p->stop_at;
}

/* 600 entities with P {x, y; a char[8] name; a float[3] arm} and 300 with the tag T. */
static kiln_world *progress_world(void) {
    kiln_world *world = kiln_world_create(NULL);
    static const kiln_field fields[] = {{"x", KILN_TYPE_FLOAT, 0, 0}, {"y", KILN_TYPE_FLOAT, 4, 0},
                                        {"name", KILN_TYPE_CHAR, 8, 8}, {"arm", KILN_TYPE_FLOAT, 16, 3}};
    kiln_component p = pf_register(world, "P", 28, fields, 4), t = pf_register(world, "T", 0, NULL, 0);
    float value[7] = {1, 2};
    for (int i = 0; i < 900; i++) {
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn(world, &e), KILN_OK);
        ck_assert_int_eq(i < 600 ? kiln_add(world, e, p, value) : kiln_add(world, e, t, NULL), KILN_OK);
    }
    return world;
}

/* JSON hears a unit an entity, a value and a field element (a char array is one: P's entity
 * is 1 + 1 + x + y + name + 3 arm = 8, T's 2), before every 256 entities; binary an entity
 * before each archetype. */
KILN_TEST_LOOP(progress, a_save_reports_its_work_before_it_does_it, 0, 2) {
    kiln_world *world = progress_world();
    progress_log log = {0};
    pf_bytes out = {0};
    kiln_save_desc d = {.format = formats[_i], .progress = log_progress, .progress_ud = &log};
    ck_assert_int_eq(kiln_save(world, &d, pf_bytes_write, &out), KILN_OK);
    ck_assert_int_eq(log.units, formats[_i] == KILN_PERSIST_JSON ? 600 * 8 + 300 * 2 : 900);
    ck_assert_int_eq(log.calls, formats[_i] == KILN_PERSIST_JSON ? 3 + 2 : 2);
    pf_bytes_free(&out);
    kiln_world_destroy(world);
}

/* A progress callback answering false stops the save there, with KILN_ERR_LIMIT and a
 * message saying so; what was written is no whole save, and the world is as it was. */
KILN_TEST_LOOP(progress, a_save_stops_where_its_progress_callback_says_no, 0, 2) {
    kiln_world *world = progress_world();
    uint64_t hash = kiln_world_hash(world);
    progress_log log = {.stop_at = 2};
    pf_bytes out = {0};
    kiln_save_desc d = {.format = formats[_i], .progress = log_progress, .progress_ud = &log};
    ck_assert_int_eq(kiln_save(world, &d, pf_bytes_write, &out), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(world), "kiln_save: stopped by desc.progress");
    ck_assert_int_eq(log.calls, 2);
    ck_assert_uint_eq(kiln_world_hash(world), hash);
    kiln_world *other = kiln_world_create(NULL);
    ck_assert_int_ne(kiln_load(other, out.data, out.size, NULL), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(other), 0);
    kiln_world_destroy(other);
    pf_bytes_free(&out);
    kiln_world_destroy(world);
}
