/* refusal_fixture.c: the world of refusal_fixture.h. Invariant: setup leaves exactly one type,
 * one event type, one query and one entity, which refusal_fixture_unchanged checks. */
#include "refusal_fixture.h"

#include <check.h>
#include <string.h>

void refusal_fixture_setup(refusal_fixture *f) {
    memset(f, 0, sizeof *f);
    f->world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(f->world);
    ck_assert_int_eq(kiln_component_register(f->world, &(kiln_component_desc){.name = "A", .size = 4}, &f->a),
                     KILN_OK);
    ck_assert_int_eq(kiln_event_register(f->world, &(kiln_component_desc){.name = "Hit", .size = 4}, &f->hit),
                     KILN_OK);
    ck_assert_int_eq(kiln_query_create(f->world, &(kiln_query_desc){.with = {f->a}}, &f->query), KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(f->world, &f->a, (const void *[]){&(int32_t){7}}, 1, &f->e), KILN_OK);
}

void refusal_fixture_teardown(refusal_fixture *f) {
    kiln_query_destroy(f->query);
    kiln_world_destroy(f->world);
}

void refusal_fixture_unchanged(const refusal_fixture *f) {
    ck_assert_int_eq(kiln_component_count(f->world), 1);
    ck_assert_uint_eq(kiln_component_lookup(f->world, "Late"), 0);
    ck_assert_uint_eq(kiln_event_lookup(f->world, "Late").id, 0);
    ck_assert_int_eq(kiln_query_count(f->query), 1);
    ck_assert_int_eq(kiln_entity_count(f->world), 1);
    ck_assert_int_eq(*(const int32_t *)kiln_get(f->world, f->e, f->a), 7);
}
