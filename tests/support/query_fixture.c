/* query_fixture.c: the world the query suites iterate, built the same way for every test, and
 * the helpers both query suites use. Teardown asserts the world gave every byte back. */
#include "query_fixture.h"

#include <check.h>

void query_fixture_setup(query_fixture *f) {
    test_allocator_init(&f->alloc);
    f->world = test_world_create(&f->alloc);
    f->pos = test_register_position(f->world);
    f->vel = test_register_velocity(f->world);
    f->tag = test_register_tag(f->world, "Frozen");
    kiln_world *w = f->world;
    float n = 0.0f;
    for (int i = 0; i < 3; i++, n++)
        ck_assert_int_eq(kiln_spawn_with(w, &f->pos, (const void *[]){&(test_position){n, -n}}, 1,
                                         &f->p_only[i]),
                         KILN_OK);
    for (int i = 0; i < 4; i++, n++)
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){f->pos, f->vel},
                                         (const void *[]){&(test_position){n, -n},
                                                          &(test_velocity){n, n}},
                                         2, &f->pv[i]),
                         KILN_OK);
    for (int i = 0; i < 2; i++, n++)
        ck_assert_int_eq(kiln_spawn_with(w, &f->vel, (const void *[]){&(test_velocity){n, n}}, 1,
                                         &f->v_only[i]),
                         KILN_OK);
    for (int i = 0; i < 2; i++, n++)
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){f->pos, f->vel, f->tag},
                                         (const void *[]){&(test_position){n, -n},
                                                          &(test_velocity){n, n}, NULL},
                                         3, &f->pvt[i]),
                         KILN_OK);
    ck_assert_int_eq(kiln_spawn(w, &f->bare), KILN_OK);
}

void query_fixture_teardown(query_fixture *f) {
    kiln_world_destroy(f->world);
    ck_assert_int_eq(f->alloc.live_bytes, 0);
}

kiln_query *make_query(kiln_world *world, kiln_query_desc desc) {
    kiln_query *q = NULL;
    kiln_result r = kiln_query_create(world, &desc, &q);
    ck_assert_msg(r == KILN_OK, "query_create failed: %s", kiln_world_error(world));
    ck_assert_ptr_nonnull(q);
    return q;
}

bool same_set(const kiln_entity *got, int64_t n, const kiln_entity *want, int64_t m) {
    if (n != m) return false;
    for (int64_t i = 0; i < m; i++)
        if (!test_contains(got, n, want[i])) return false;
    return true;
}
