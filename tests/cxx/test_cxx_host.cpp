// test_cxx_host.cpp: a C++ host of kiln: every public header in one translation unit, linked
// against the C libraries, written as docs/c-api.md "From C++" says (built as C++11 and C++20).
#include "kiln.h"
#include "kiln_lua.h" // before lua.hpp on purpose: it must give lua.h C linkage itself
#include "kiln_persist.h"
#include "kiln_transform.h"

#include <check.h>

#include "cxx_suite.h"
#include <lua.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace {

struct Pos { float x, y; };

const kiln_field pos_fields[] = {
    {"x", KILN_TYPE_FLOAT, offsetof(Pos, x), 0}, // positional: a C++11 host has no designators
    {"y", KILN_TYPE_FLOAT, offsetof(Pos, y), 0},
};

struct Fixture {
    kiln_world *world = kiln_world_create(nullptr);
    kiln_component pos = KILN_NO_COMPONENT;
    kiln_query *query = nullptr;
    Fixture() {
#if __cplusplus >= 202002L // designated initialisers: C++20, in declaration order
        const kiln_component_desc desc = {.name = "Pos", .size = sizeof(Pos), .fields = pos_fields,
                                          .field_count = 2};
#else // value-initialised (every field zero: the defaults), then the fields that differ
        kiln_component_desc desc{};
        desc.name = "Pos";
        desc.size = sizeof(Pos);
        desc.fields = pos_fields;
        desc.field_count = 2;
#endif
        ck_assert_int_eq(kiln_component_register(world, &desc, &pos), KILN_OK);
        kiln_query_desc qd{};
        qd.with[0] = pos;
        ck_assert_int_eq(kiln_query_create(world, &qd, &query), KILN_OK);
    }
    ~Fixture() {
        kiln_query_destroy(query);
        kiln_world_destroy(world);
    }
    kiln_entity spawn(float x) {
        kiln_entity e = KILN_NULL_ENTITY;
        const Pos p{x, 0};
        ck_assert_int_eq(kiln_spawn(world, &e), KILN_OK);
        ck_assert_int_eq(kiln_add(world, e, pos, &p), KILN_OK);
        return e;
    }
};

// Ends an iteration however its scope is left: an exception in a loop body must not leave
// the world deferred (kiln cannot see the exception; the guard's destructor can).
struct IterGuard {
    kiln_iter it;
    explicit IterGuard(const kiln_query *q) { kiln_query_iter(q, &it); }
    ~IterGuard() { kiln_iter_fini(&it); }
    IterGuard(const IterGuard &) = delete;
    IterGuard &operator=(const IterGuard &) = delete;
};

} // namespace

START_TEST(inline_helpers_compile_as_cxx_and_agree_with_the_library) {
    Fixture f;
    kiln_entity e = f.spawn(3.0f);
    ck_assert_uint_eq(kiln_entity_make(kiln_entity_index(e), kiln_entity_generation(e)), e);
    ck_assert(!kiln_is_placeholder(e));

    kiln_getter g;
    ck_assert_int_eq(kiln_getter_init(f.world, f.pos, &g), KILN_OK);
    const Pos *p = static_cast<const Pos *>(kiln_getter_get(&g, e));
    ck_assert_ptr_eq(p, kiln_get(f.world, e, f.pos));
    ck_assert(p->x == 3.0f);
    kiln_getter_fini(&g);

    kiln_tick before = kiln_tick_current(f.world);
    kiln_tick_advance(f.world);
    int rows = 0;
    {
        IterGuard guard(f.query);
        while (kiln_query_next(&guard.it)) {
            Pos *col = static_cast<Pos *>(kiln_iter_column(&guard.it, 0));
            for (int32_t i = 0; i < guard.it.count; i++, rows++) {
                col[i].x += 1;
                kiln_iter_mark_changed(&guard.it, 0, i);
                ck_assert(kiln_iter_changed_since(&guard.it, 0, i, before));
                ck_assert_uint_gt(kiln_iter_row_tick(&guard.it, 0, i), before);
            }
        }
    }
    ck_assert_int_eq(rows, 1);
    ck_assert(static_cast<const Pos *>(kiln_get(f.world, e, f.pos))->x == 4.0f);

    kiln_local_transform t = kiln_transform_local_identity();
    mat4 m;
    kiln_transform_local_to_mat4(&t, m);
    ck_assert(m[0][0] == 1.0f && m[3][0] == 0.0f);
}
END_TEST

START_TEST(an_exception_in_a_loop_body_leaves_the_world_undeferred) {
    Fixture f;
    f.spawn(1.0f);
    bool caught = false;
    try {
        IterGuard guard(f.query);
        while (kiln_query_next(&guard.it)) throw std::runtime_error("host failure");
    } catch (const std::runtime_error &) {
        caught = true;
    }
    ck_assert(caught);
    ck_assert(!kiln_is_deferred(f.world));
    kiln_entity e = f.spawn(2.0f); // immediate again: alive and visible at once
    ck_assert(kiln_is_alive(f.world, e));
    ck_assert_int_eq(kiln_query_count(f.query), 2);
}
END_TEST

struct SystemState {
    int runs = 0;
    std::string failure;
};

// What a C++ system must do: catch everything before returning into kiln's C frames.
static void throwing_system(const kiln_system_ctx *ctx) noexcept {
    SystemState *s = static_cast<SystemState *>(ctx->user);
    try {
        s->runs++;
        if (s->runs == 1) throw std::runtime_error("first frame fails");
    } catch (const std::exception &e) {
        s->failure = e.what();
    }
}

START_TEST(a_system_that_catches_its_exceptions_keeps_the_schedule_usable) {
    Fixture f;
    SystemState state;
    kiln_schedule *s = kiln_schedule_create(f.world, nullptr);
    ck_assert_ptr_nonnull(s);
    kiln_system_desc sd{};
    sd.name = "guarded";
    sd.run = throwing_system;
    sd.user = &state;
    sd.writes[0] = f.pos;
    ck_assert_int_eq(kiln_schedule_add(s, &sd), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.016), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.016), KILN_OK);
    ck_assert_int_eq(state.runs, 2);
    ck_assert_str_eq(state.failure.c_str(), "first frame fails");
    f.spawn(5.0f); // the world is not left mid-run
    kiln_schedule_destroy(s);
}
END_TEST

START_TEST(the_lua_binding_runs_from_a_cxx_host) {
    Fixture f;
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    luaL_requiref(L, "kiln", luaopen_kiln, 0);
    lua_pop(L, 1);
    ck_assert_int_eq(kiln_lua_push_world(L, f.world, KILN_JOBS_INLINE), 1);
    lua_setglobal(L, "world");
    const char *chunk = "local e = world:spawn() world:add(e, 'Pos', {x = 7, y = 1}) return e";
    ck_assert_int_eq(luaL_dostring(L, chunk), LUA_OK);
    kiln_entity e = static_cast<kiln_entity>(lua_tointeger(L, -1));
    const Pos *p = static_cast<const Pos *>(kiln_get(f.world, e, f.pos));
    ck_assert_ptr_nonnull(p);
    ck_assert(p->x == 7.0f);
    lua_close(L);
}
END_TEST

// The read-only calls take a const world, so a C++ host holding one calls them without a cast
// (a non-const parameter there would not compile: C++ refuses to drop the qualifier).
START_TEST(read_only_calls_take_a_const_world) {
    Fixture f;
    kiln_entity e = f.spawn(3);
    ck_assert_int_eq(kiln_name_init(f.world, nullptr), KILN_OK);
    kiln_transform_ids ids;
    ck_assert_int_eq(kiln_transform_init(f.world, &ids), KILN_OK);
    const kiln_world *world = f.world;
    ck_assert(kiln_is_alive(world, e) && kiln_has(world, e, f.pos));
    ck_assert_int_eq(kiln_entity_count(world), 1);
    ck_assert_int_eq(kiln_name_slots_read(world), 0);
    ck_assert_int_eq(kiln_transform_links_walked(world), 0);
    ck_assert_ptr_null(kiln_name_get(world, e));
    ck_assert_uint_ne(kiln_world_hash(world), 0);
}
END_TEST

int main() {
    const TTest *const tests[] = {
        inline_helpers_compile_as_cxx_and_agree_with_the_library,
        an_exception_in_a_loop_body_leaves_the_world_undeferred,
        a_system_that_catches_its_exceptions_keeps_the_schedule_usable,
        the_lua_binding_runs_from_a_cxx_host,
        read_only_calls_take_a_const_world,
    };
    return cxx_run_suite("cxx_host", tests, sizeof tests / sizeof *tests);
}
