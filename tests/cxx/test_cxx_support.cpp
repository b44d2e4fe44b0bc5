// test_cxx_support.cpp: a C++ suite using the C suites' fixtures (tests/support/test_support.h),
// whose functions, compiled as C, a C++ file reaches only through the header's C linkage.
#include "test_support.h"

#include <check.h>

#include "cxx_suite.h"

#include <cstring>

START_TEST(a_world_on_the_counting_allocator_gives_every_byte_back) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *world = test_world_create(&a);
    kiln_component position = test_register_position(world);
    kiln_entity e = KILN_NULL_ENTITY;
    ck_assert_int_eq(kiln_spawn(world, &e), KILN_OK);
    ck_assert_int_eq(kiln_add(world, e, position, NULL), KILN_OK);
    char text[32];
    ck_assert_str_eq(test_entity_string(e, text), "0v1");
    kiln_world_destroy(world);
    ck_assert_int_eq(a.live_bytes, 0);
}
END_TEST

int main() {
    const TTest *const tests[] = {
        a_world_on_the_counting_allocator_gives_every_byte_back,
    };
    return cxx_run_suite("cxx_support", tests, sizeof tests / sizeof *tests);
}
