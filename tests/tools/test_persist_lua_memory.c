/* test_persist_lua_memory.c: world:save and world:load from a C host: its Lua state runs out of
 * memory at every allocation in turn (each call lands whole or raises, leaving the world, its
 * memory and Lua resources as they were), a Lua value costs memory in proportion to its bytes,
 * and its C components with hooks are not Lua values. */
#include <stdio.h>

#include "kiln_persist.h"
#include "lua_host.h"

/* The scripts' components: a "lua" one and a data one. */
static const char *const components = "w:component('Script', 'lua') w:component('Position', 'float x, y;')";

/* The saved data of a world holding Lua values in components and a Lua resource (global data). */
static void make_save(host *h, const char *format) {
    char code[1024];
    snprintf(code, sizeof code,
             "local src = kiln.world() src:component('Script', 'lua') src:component('Position', 'float x, y;')\n"
             "for i = 1, 40 do src:spawn{Position = {x = i}, Script = {i = i, name = 'n' .. i, list = {i, i + 1}}} end\n"
             "src:resource('config', {level = 3, tags = {'a', 'b', 'c'}})\n"
             "data = src:save{format = '%s'} src:close()", format);
    run(h->L, code);
}

/* What a failed call must leave alone: the world's hash, count and memory (a load may keep the
 * archetypes and capacity it made; anything else it allocated and did not free shows when the
 * world is destroyed: stop() finds every byte back), and the Lua resources. */
typedef struct fingerprint {
    uint64_t hash;
    int64_t world_live, count;
} fingerprint;

static fingerprint take(const host *h) {
    return (fingerprint){kiln_world_hash(h->world), h->world_mem.live, kiln_entity_count(h->world)};
}

static void load_everywhere(const char *format, bool used) {
    host h;
    start(&h, components);
    make_save(&h, format);
    if (used) run(h.L, "w:spawn{Position = {x = -1}, Script = {held = true}} w:resource('config', {mine = 1})");
    run(h.L, "collectgarbage() collectgarbage()");
    fingerprint before = take(&h);
    int64_t n = 0;
    for (;; n++) {
        if (run_failing_after(&h, "map = w:load(data)", n)) break;
        fingerprint now = take(&h);
        ck_assert_msg(now.hash == before.hash && now.count == before.count,
                      "%s load granted %lld Lua allocations failed and changed the world", format, (long long)n);
        run(h.L, used ? "assert(w:resource('config').mine == 1 and w:resource('config').level == nil)"
                      : "assert(w:resource('config') == nil)");
    }
    ck_assert_int_gt(n, 3);
    run(h.L, "local n = 0 for _ in pairs(map) do n = n + 1 end assert(n == 40, n)\n"
             "assert(w:resource('config').level == 3)");
    stop(&h);
}

START_TEST(a_load_out_of_lua_memory_anywhere_raises_and_leaves_the_world_as_it_was) {
    load_everywhere(_i % 2 ? "json" : "binary", _i >= 2);
}
END_TEST

START_TEST(a_save_out_of_lua_memory_anywhere_raises_and_leaks_nothing) {
    host h;
    start(&h, components);
    run(h.L, "for i = 1, 40 do w:spawn{Position = {x = i}, Script = {i = i, list = {i, {deep = i}}}} end\n"
             "w:resource('config', {level = 3})");
    run(h.L, _i ? "want = w:save{format = 'json'}" : "want = w:save()");
    fingerprint before = take(&h);
    int64_t n = 0;
    const char *code = _i ? "got = w:save{format = 'json'}" : "got = w:save()";
    for (;; n++) {
        if (run_failing_after(&h, code, n)) break;
        fingerprint now = take(&h);
        ck_assert_msg(now.hash == before.hash && now.world_live == before.world_live,
                      "a save granted %lld Lua allocations changed the world or kept %lld bytes", (long long)n,
                      (long long)(now.world_live - before.world_live));
    }
    ck_assert_int_gt(n, 3);
    run(h.L, "assert(got == want)");
    stop(&h);
}
END_TEST

static void drop_block(void *values, int32_t count, void *ctx) {
    (void)ctx;
    for (int32_t i = 0; i < count; i++) free(((void **)values)[i]);
}

START_TEST(a_c_component_with_hooks_is_not_taken_for_a_lua_value) {
    host h;
    start(&h, components);
    kiln_component owned;
    kiln_component_desc d = {.name = "Owned", .size = sizeof(void *), .destroy = drop_block};
    ck_assert_int_eq(kiln_component_register(h.world, &d, &owned), KILN_OK);
    kiln_entity e;
    void *block = malloc(16);
    ck_assert_int_eq(kiln_spawn_with(h.world, &owned, (const void *[]){&block}, 1, &e), KILN_OK);
    /* its bytes are a pointer, not a ref into the Lua values: saving it as one wrote garbage */
    run(h.L, "local ok, err = pcall(w.save, w)\n"
             "assert(not ok and err == \"world:save: entity 0v1 component 'Owned': it is not a Lua-valued \""
             " .. \"component of this world\", err)");
    stop(&h);
}
END_TEST

START_TEST(a_lua_value_claiming_huge_tables_costs_memory_in_proportion_to_its_bytes) {
    /* 99 nested tables each claiming a count of half the bytes left: each was made with room
     * for that many entries before its first was read, 750 times the value's size in all */
    host h;
    start(&h, components);
    run(h.L, "local src = kiln.world() src:component('Script', 'lua') src:spawn{Script = {x = 1}}\n"
             "local base = src:save{format = 'json'} src:close()\n"
             "local size, parts = 200000, {}\n"
             "local function u32(n) return string.char(n % 256, math.floor(n / 256) % 256, math.floor(n / 65536) % 256, math.floor(n / 16777216)) end\n"
             "for i = 1, 99 do parts[i] = string.char(6) .. u32(math.floor((size - 6 * i) / 2)) .. string.char(2) end\n"
             "parts[100] = string.rep('\\0', size - #table.concat(parts))\n"
             "local hex = table.concat(parts):gsub('.', function(c) return string.format('%02x', c:byte()) end)\n"
             "data = base:gsub('\"Script\": \"[0-9a-f]*\"', '\"Script\": \"' .. hex .. '\"', 1)\n"
             "collectgarbage() collectgarbage()");
    int64_t before = h.lua_mem.live;
    h.lua_mem.peak = before;
    run(h.L, "local ok, err = pcall(w.load, w, data)\n"
             "assert(not ok and err == \"world:load: entity 0v1 component 'Script': its Lua value is corrupt\", err)");
    ck_assert_msg(h.lua_mem.peak - before < 16 * 400000, "a 200 KB value took %lld bytes to refuse",
                  (long long)(h.lua_mem.peak - before));
    stop(&h);
}
END_TEST

int main(void) {
    Suite *s = suite_create("persist_lua_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, a_load_out_of_lua_memory_anywhere_raises_and_leaves_the_world_as_it_was, 0, 4);
    tcase_add_loop_test(tc, a_save_out_of_lua_memory_anywhere_raises_and_leaks_nothing, 0, 2);
    tcase_add_test(tc, a_c_component_with_hooks_is_not_taken_for_a_lua_value);
    tcase_add_test(tc, a_lua_value_claiming_huge_tables_costs_memory_in_proportion_to_its_bytes);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
