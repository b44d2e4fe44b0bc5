/* commands_fixture.c: the command buffer suites' world, buffer and spawn helpers. Teardown is
 * where every test of those suites proves it leaked nothing and destroyed each value once. */
#include "commands_fixture.h"

#include <check.h>
#include <string.h>

void commands_fixture_setup(commands_fixture *f) {
    memset(f, 0, sizeof *f);
    test_allocator_init(&f->alloc);
    f->w = test_world_create(&f->alloc);
    f->pos = test_register_position(f->w);
    f->vel = test_register_velocity(f->w);
    f->owned = test_register_owned(f->w, &f->log);
    f->cmd = kiln_commands_create(f->w);
    ck_assert_ptr_nonnull(f->cmd);
}

void commands_fixture_teardown(commands_fixture *f) {
    kiln_commands_destroy(f->cmd);
    kiln_world_destroy(f->w);
    ck_assert_int_eq(f->alloc.live_blocks, 0);
    ck_assert_int_eq(f->alloc.live_bytes, 0);
    ck_assert_int_eq(f->alloc.bad_osize, 0);
    ck_assert_int_eq(f->log.bad_payload, 0);
    /* -1: a value destroyed twice; -2: a moved-from value destroyed */
    ck_assert_int_eq(test_hook_log_count(&f->log, -1), 0);
    ck_assert_int_eq(test_hook_log_count(&f->log, -2), 0);
}

static kiln_entity spawn_checked(commands_fixture *f, kiln_result r, kiln_entity e) {
    ck_assert_msg(r == KILN_OK, "spawning returned \"%s\" (world: \"%s\")", kiln_result_name(r),
                  kiln_world_error(f->w));
    return e;
}

kiln_entity spawn_pos(commands_fixture *f, float x, float y) {
    kiln_entity e = KILN_NULL_ENTITY;
    kiln_result r =
        kiln_spawn_with(f->w, &f->pos, (const void *[]){&(test_position){x, y}}, 1, &e);
    return spawn_checked(f, r, e);
}

kiln_entity spawn_bare(commands_fixture *f) {
    kiln_entity e = KILN_NULL_ENTITY;
    kiln_result r = kiln_spawn(f->w, &e);
    return spawn_checked(f, r, e);
}

kiln_entity spawn_owned(commands_fixture *f, int32_t id) {
    test_owned v = test_owned_make(id);
    kiln_entity e = KILN_NULL_ENTITY;
    kiln_result r = kiln_spawn_with(f->w, &f->owned, (const void *[]){&v}, 1, &e);
    return spawn_checked(f, r, e);
}

kiln_component register_health(kiln_world *w) {
    kiln_component_desc desc = {.name = "Health", .size = sizeof(int32_t)};
    kiln_component id = KILN_NO_COMPONENT;
    ck_assert_int_eq(kiln_component_register(w, &desc, &id), KILN_OK);
    return id;
}

bool apply_failing_at(commands_fixture *f, int64_t n, int64_t total, int64_t *applied) {
    *applied = -1;
    test_allocator_fail_after(&f->alloc, n);
    kiln_result r = kiln_commands_apply(f->cmd, f->w, applied);
    test_allocator_fail_never(&f->alloc);
    if (r == KILN_OK) {
        ck_assert_int_eq(*applied, total);
        return false;
    }
    ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
    ck_assert_str_ne(kiln_world_error(f->w), "");
    ck_assert_int_ge(*applied, 0);
    ck_assert_int_eq(kiln_commands_count(f->cmd), total - *applied);
    return true;
}

void apply_rest(commands_fixture *f, int64_t total, int64_t applied) {
    int64_t rest = -1;
    ck_assert_int_eq(kiln_commands_apply(f->cmd, f->w, &rest), KILN_OK);
    ck_assert_int_eq(applied + rest, total);
    ck_assert_int_eq(kiln_commands_count(f->cmd), 0);
}
