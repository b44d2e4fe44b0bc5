/* persist_fixture.c: the persistence suites' world (see persist_fixture.h). Every component
 * carries reflected fields so loads can match them by name. */
#include "persist_fixture.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static const kiln_field pos_fields[] = {
    {"x", KILN_TYPE_FLOAT, 0, 0}, {"y", KILN_TYPE_FLOAT, 4, 0}, {"z", KILN_TYPE_FLOAT, 8, 0}};
static const kiln_field vel_fields[] = {{"dx", KILN_TYPE_DOUBLE, 0, 0}, {"dy", KILN_TYPE_DOUBLE, 8, 0}};
static const kiln_field target_fields[] = {{"target", KILN_TYPE_ENTITY, 0, 0},
                                           {"pair", KILN_TYPE_ENTITY, 8, 2},
                                           {"weight", KILN_TYPE_INT32, 24, 0}};
static const kiln_field label_fields[] = {{"text", KILN_TYPE_CHAR, 0, 16}};
static const kiln_field score_fields[] = {{"points", KILN_TYPE_INT64, 0, 0}, {"best", KILN_TYPE_ENTITY, 8, 0}};

static kiln_component reg(kiln_world *world, const char *name, size_t size, const kiln_field *f, int32_t n) {
    kiln_component id;
    kiln_component_desc d = {.name = name, .size = size, .fields = f, .field_count = n};
    ck_assert_int_eq(kiln_component_register(world, &d, &id), KILN_OK);
    return id;
}

void pf_open(pf_world *w, bool reversed) { pf_open_on(w, reversed, NULL); }

void pf_open_on(pf_world *w, bool reversed, test_allocator *alloc) {
    memset(w, 0, sizeof *w);
    w->world = alloc ? test_world_create(alloc) : kiln_world_create(NULL);
    ck_assert_ptr_nonnull(w->world);
    if (reversed) {
        w->score = reg(w->world, "Score", sizeof(pf_score), score_fields, 2);
        w->tag = reg(w->world, "Frozen", 0, NULL, 0);
        w->label = reg(w->world, "Label", sizeof(pf_label), label_fields, 1);
        w->target = reg(w->world, "Target", sizeof(pf_target), target_fields, 3);
        ck_assert_int_eq(kiln_transform_init(w->world, &w->tf), KILN_OK);
        w->vel = reg(w->world, "Velocity", sizeof(pf_vel), vel_fields, 2);
        w->pos = reg(w->world, "Position", sizeof(pf_pos), pos_fields, 3);
    } else {
        w->pos = reg(w->world, "Position", sizeof(pf_pos), pos_fields, 3);
        w->vel = reg(w->world, "Velocity", sizeof(pf_vel), vel_fields, 2);
        ck_assert_int_eq(kiln_transform_init(w->world, &w->tf), KILN_OK);
        w->target = reg(w->world, "Target", sizeof(pf_target), target_fields, 3);
        w->label = reg(w->world, "Label", sizeof(pf_label), label_fields, 1);
        w->tag = reg(w->world, "Frozen", 0, NULL, 0);
        w->score = reg(w->world, "Score", sizeof(pf_score), score_fields, 2);
    }
}

void pf_close(pf_world *w) {
    kiln_world_destroy(w->world);
    w->world = NULL;
}

void pf_populate(pf_world *w) {
    kiln_world *world = w->world;
    for (int i = 0; i < 6; i++) {
        pf_pos p = {(float)i + 0.5f, (float)i * 2.25f, -1.0f / (float)(i + 3)};
        kiln_component comps[] = {w->pos};
        const void *vals[] = {&p};
        ck_assert_int_eq(kiln_spawn_with(world, comps, vals, 1, &w->e[i]), KILN_OK);
    }
    kiln_entity gone;
    ck_assert_int_eq(kiln_spawn(world, &gone), KILN_OK);
    pf_vel v = {1e-300, -3.5};
    ck_assert_int_eq(kiln_add(world, w->e[1], w->vel, &v), KILN_OK);
    uint64_t nan_bits = 0xfff4000000000abcu; /* a signalling NaN with a payload: every format keeps its bits */
    memcpy(&v.dy, &nan_bits, 8);
    ck_assert_int_eq(kiln_add(world, w->e[2], w->vel, &v), KILN_OK);
    pf_target t = {w->e[0], {w->e[3], gone}, -42};
    ck_assert_int_eq(kiln_add(world, w->e[2], w->target, &t), KILN_OK);
    pf_label l = {"ship\0\0x"}; /* bytes after the text's end are data too */
    ck_assert_int_eq(kiln_add(world, w->e[3], w->label, &l), KILN_OK);
    ck_assert_int_eq(kiln_add(world, w->e[4], w->tag, NULL), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(world, w->e[1], w->e[0]), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(world, w->e[2], w->e[1]), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(world, w->e[5], w->e[0]), KILN_OK);
    kiln_local_transform lt = kiln_transform_local_identity();
    lt.position[1] = 4.0f;
    ck_assert_int_eq(kiln_add(world, w->e[0], w->tf.local, &lt), KILN_OK);
    ck_assert_int_eq(kiln_despawn(world, gone), KILN_OK);
    pf_score s = {123456789012345, w->e[3]};
    ck_assert_int_eq(kiln_resource_set(world, w->score, &s), KILN_OK);
    kiln_entity lonely;
    ck_assert_int_eq(kiln_spawn(world, &lonely), KILN_OK); /* no components at all */
    w->e[6] = lonely;
    while (kiln_tick_current(world) < 7) kiln_tick_advance(world);
}

bool pf_bytes_write(void *ud, const void *data, size_t size) {
    pf_bytes *b = ud;
    if (b->size + size > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->size + size) cap *= 2;
        unsigned char *p = realloc(b->data, cap);
        if (!p) return false;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->size, data, size);
    b->size += size;
    return true;
}

void pf_save(kiln_world *world, kiln_persist_format format, pf_bytes *dest) {
    memset(dest, 0, sizeof *dest);
    kiln_save_desc d = {.format = format};
    kiln_result r = kiln_save(world, &d, pf_bytes_write, dest);
    ck_assert_msg(r == KILN_OK, "kiln_save failed: %s", kiln_world_error(world));
}

void pf_bytes_free(pf_bytes *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

kiln_component pf_register(kiln_world *w, const char *name, size_t size, const kiln_field *f,
                           int32_t n) {
    kiln_component id;
    kiln_component_desc d = {.name = name, .size = size, .fields = f, .field_count = n};
    ck_assert_int_eq(kiln_component_register(w, &d, &id), KILN_OK);
    return id;
}

kiln_result pf_load_text(kiln_world *w, const char *text) {
    return kiln_load(w, text, strlen(text), NULL);
}

void pf_save_named(kiln_persist_format format, pf_bytes *dest) {
    pf_world a;
    pf_open(&a, false);
    pf_populate(&a);
    ck_assert_int_eq(kiln_name_set(a.world, a.e[0], "hero"), KILN_OK);
    ck_assert_int_eq(kiln_name_set(a.world, a.e[3], "sidekick"), KILN_OK);
    ck_assert_int_eq(kiln_random_seed(a.world, 7), KILN_OK);
    pf_save(a.world, format, dest);
    pf_close(&a);
}
