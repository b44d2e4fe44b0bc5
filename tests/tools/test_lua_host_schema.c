/* test_lua_host_schema.c: types a C host registered, declared again from Lua by the schema
 * world:schema prints for them. The declaration takes C's stricter alignment, for events as for
 * components, since the values already have it. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "lua_host.h"

static const kiln_field quad_fields[] = {
    {"x", KILN_TYPE_FLOAT, 0, 0}, {"y", KILN_TYPE_FLOAT, 4, 0},
    {"z", KILN_TYPE_FLOAT, 8, 0}, {"w", KILN_TYPE_FLOAT, 12, 0},
};

/* Four floats with align left 0 take 16 (the largest power of two dividing the size), while
 * the schema "float x; float y; float z; float w;" asks for 4: the event was refused as "a
 * different layout" unless the declaration takes the alignment registered. */
START_TEST(an_event_c_registered_with_a_stricter_alignment_is_declared_by_its_schema) {
    host h;
    open_host(&h);
    kiln_world *world = h.world;
    kiln_event_type impact, aligned8;
    ck_assert_int_eq(kiln_event_register(world, &(kiln_component_desc){.name = "Impact", .size = 16,
                                                                       .fields = quad_fields, .field_count = 4},
                                         &impact),
                     KILN_OK);
    ck_assert_int_eq(kiln_event_register(world, &(kiln_component_desc){.name = "Pair", .size = 8, .align = 8,
                                                                       .fields = quad_fields, .field_count = 2},
                                         &aligned8),
                     KILN_OK);
    kiln_component_info info;
    ck_assert(kiln_event_info_get(world, impact, &info));
    ck_assert_uint_eq(info.align, 16);
    lua_State *L = h.L;
    ck_assert_int_eq(kiln_lua_push_world(L, world, 0), 1);
    lua_setglobal(L, "w");
    const char *chunk =
        "local a = w:event('Impact', 'float x; float y; float z; float w;')\n"
        "local b = w:event('Pair', 'float x, y;')\n"
        "w:emit('Impact', {x = 1, y = 2, z = 3, w = 4})\n"
        "local got\n"
        "for e in w:events('Impact') do got = e.z end\n"
        "return a .. ' ' .. b .. ' ' .. string.format('%g', got)";
    ck_assert_msg(luaL_dostring(L, chunk) == LUA_OK, "%s", lua_tostring(L, -1));
    char want[64];
    snprintf(want, sizeof want, "%u %u 3", (unsigned)impact.id, (unsigned)aligned8.id);
    ck_assert_str_eq(lua_tostring(L, -1), want);
    ck_assert(kiln_event_info_get(world, impact, &info));
    ck_assert_uint_eq(info.align, 16); /* still C's */
    stop(&h);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_host_schema");
    TCase *tc = tcase_create("schema");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, an_event_c_registered_with_a_stricter_alignment_is_declared_by_its_schema);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
