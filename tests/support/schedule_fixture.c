/* schedule_fixture.c: the schedule suites' world and helpers. Every helper asserts, so a test
 * reads as the schedule it builds and the stages it expects. */
#include "schedule_fixture.h"

#include <check.h>
#include <string.h>

#include "test_support.h"

void schedule_fixture_setup(schedule_fixture *f) {
    f->world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(f->world);
    f->p = test_register_position(f->world);
    f->q = test_register_velocity(f->world);
    kiln_component_desc rd = test_position_desc();
    rd.name = "Rotation";
    ck_assert_int_eq(kiln_component_register(f->world, &rd, &f->r), KILN_OK);
}

void schedule_fixture_teardown(schedule_fixture *f) {
    kiln_world_destroy(f->world);
    f->world = NULL;
}

void noop(const kiln_system_ctx *ctx) { (void)ctx; }

void count_run(const kiln_system_ctx *ctx) { (*(int *)ctx->user)++; }

void add_system(kiln_schedule *s, kiln_system_desc desc) {
    kiln_result r = kiln_schedule_add(s, &desc);
    ck_assert_msg(r == KILN_OK, "adding %s: %s", desc.name ? desc.name : "(null)",
                  kiln_result_name(r));
}

const char *describe(kiln_schedule *s) {
    static char buf[1024];
    size_t n = kiln_schedule_describe(s, buf, sizeof buf);
    ck_assert_uint_lt(n, sizeof buf);
    ck_assert_uint_eq(n, strlen(buf));
    return buf;
}

int32_t stage_of(kiln_schedule *s, const char *name) {
    int32_t i = kiln_schedule_find(s, name);
    ck_assert_msg(i >= 0, "no system %s", name);
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, i, &info));
    return info.stage;
}

int64_t runs_of(kiln_schedule *s, const char *name) {
    int32_t i = kiln_schedule_find(s, name);
    ck_assert_msg(i >= 0, "no system %s", name);
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, i, &info));
    return info.runs;
}
