/* test_mods_embed.c: the mod manager from a C host (lua/kiln_lua.h): load, log, a failing
 * mod system in the host's own kiln_schedule_run, reload, unload, load_dir, teardown, and
 * the desc's limits on a mod's queries and on its frame's wall clock, its readonly names (and
 * kiln_lua_mods_readonly's, misused too), and a desc's bad limits refused. */
#include <check.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln_lua.h"

typedef struct host {
    lua_State *L;
    kiln_world *world;
    int world_idx, mods_idx;
    char dir[64];
    char log[4096]; /* "mod: line\n" per printed line */
} host;

static void keep_line(void *user, const char *mod, const char *line) {
    host *h = user;
    size_t o = strlen(h->log);
    snprintf(h->log + o, sizeof h->log - o, "%s: %s\n", mod, line);
}

static void write_file(const host *h, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", h->dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static const char *path_of(const host *h, const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", h->dir, name);
    return path;
}

/* A host world with one C component and a mod manager over it (at h->mods_idx). */
static void start(host *h, const kiln_lua_mods_desc *desc) {
    memset(h, 0, sizeof *h);
    strcpy(h->dir, "/tmp/kiln-mods-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(h->dir));
    h->world = kiln_world_create(NULL);
    kiln_component hp;
    kiln_field f[] = {{.name = "hp", .type = KILN_TYPE_INT32, .offset = 0}};
    ck_assert_int_eq(kiln_component_register(h->world, &(kiln_component_desc){.name = "Health", .size = 4,
                                                                            .fields = f, .field_count = 1},
                                             &hp),
                     KILN_OK);
    h->L = luaL_newstate();
    luaL_openlibs(h->L);
    kiln_lua_push_world(h->L, h->world, 0);
    h->world_idx = lua_gettop(h->L);
    kiln_lua_mods_desc d = desc ? *desc : (kiln_lua_mods_desc){0};
    d.log = keep_line;
    d.log_user = h;
    kiln_lua_mods_push(h->L, h->world_idx, &d);
    h->mods_idx = lua_gettop(h->L);
}

static void stop(host *h) {
    lua_close(h->L); /* closes the mods' states first, then lets go of the world */
    kiln_world_destroy(h->world);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", h->dir);
    ck_assert_int_eq(system(cmd), 0);
}

static int push_again(lua_State *L) {
    kiln_lua_mods_push(L, 1, NULL);
    return 1;
}

START_TEST(a_c_host_loads_a_mod_hears_its_prints_and_runs_its_systems) {
    host h;
    start(&h, NULL);
    write_file(&h, "healer.lua",
               "print('healer here', mod.name)\n"
               "world:system{name = 'heal', writes = {'Health'}, query = {'Health'},\n"
               "  each = function(e, hp) hp.hp = hp.hp + 1 end}\n"
               "world:spawn{Health = {hp = 10}}\n");
    char err[512];
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "healer.lua"), err, sizeof err), "%s", err);
    ck_assert_str_eq(h.log, "healer: healer here\thealer\n");
    kiln_schedule *s = kiln_lua_schedule(h.L, h.world_idx);
    ck_assert_int_eq(kiln_schedule_run(s, 0.1), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.1), KILN_OK);
    kiln_component hp = kiln_component_lookup(h.world, "Health");
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(h.world, &(kiln_query_desc){.with = {hp}}, &q), KILN_OK);
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(it.count, 1);
    ck_assert_int_eq(*(int32_t *)it.columns[0], 12);
    kiln_iter_fini(&it);
    kiln_query_destroy(q);
    /* unloading despawns what the mod spawned */
    ck_assert_msg(kiln_lua_mods_unload(h.L, h.mods_idx, "healer", false, err, sizeof err), "%s", err);
    ck_assert_int_eq(kiln_entity_count(h.world), 0);
    ck_assert_int_eq(kiln_schedule_find(s, "heal"), -1);
    stop(&h);
}
END_TEST

START_TEST(a_failing_mod_system_in_the_hosts_own_run_is_reported_to_the_host) {
    host h;
    start(&h, &(kiln_lua_mods_desc){.instructions = 100000});
    write_file(&h, "spin.lua", "world:system{name = 'spin', run = function() while true do end end}\n");
    char err[512];
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "spin.lua"), err, sizeof err), "%s", err);
    kiln_schedule *s = kiln_lua_schedule(h.L, h.world_idx);
    ck_assert_int_eq(kiln_schedule_run(s, 0.1), KILN_OK); /* returns: the budget stops the loop */
    lua_getfield(h.L, h.world_idx, "failures");
    lua_pushvalue(h.L, h.world_idx);
    lua_call(h.L, 1, 1);
    ck_assert_int_eq((int)lua_rawlen(h.L, -1), 1);
    lua_rawgeti(h.L, -1, 1);
    lua_getfield(h.L, -1, "message");
    ck_assert_msg(strstr(lua_tostring(h.L, -1), "mod 'spin': ") &&
                      strstr(lua_tostring(h.L, -1), "system 'spin' ran past its budget of 100000 instructions"),
                  "%s", lua_tostring(h.L, -1));
    lua_pop(h.L, 3);
    stop(&h);
}
END_TEST

/* desc.frame_milliseconds is the mod's clock for a whole frame: once its first system spent
 * it, the second is refused at once, where it took its own 50 ms before. */
START_TEST(the_desc_bounds_a_mods_whole_frame_by_its_frame_milliseconds) {
    host h;
    start(&h, &(kiln_lua_mods_desc){.instructions = 100000000000, .frame_instructions = 10000000000000,
                                    .milliseconds = 50, .frame_milliseconds = 30});
    write_file(&h, "spin.lua",
               "world:system{name = 'one', run = function() while true do end end}\n"
               "world:system{name = 'two', after = {'one'}, run = function() while true do end end}\n");
    char err[512];
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "spin.lua"), err, sizeof err), "%s", err);
    kiln_schedule *s = kiln_lua_schedule(h.L, h.world_idx);
    ck_assert_int_eq(kiln_schedule_run(s, 0.1), KILN_OK);
    lua_getfield(h.L, h.world_idx, "failures");
    lua_pushvalue(h.L, h.world_idx);
    lua_call(h.L, 1, 1);
    ck_assert_int_eq((int)lua_rawlen(h.L, -1), 2);
    for (int i = 1; i <= 2; i++) {
        lua_rawgeti(h.L, -1, i);
        lua_getfield(h.L, -1, "message");
        ck_assert_msg(strstr(lua_tostring(h.L, -1), "ran past what was left of its mod's 30 ms for this frame"), "%s",
                      lua_tostring(h.L, -1));
        lua_pop(h.L, 2);
    }
    lua_pop(h.L, 1);
    stop(&h);
}
END_TEST

START_TEST(reload_unload_and_load_dir_report_their_failures_in_err) {
    host h;
    start(&h, NULL);
    char err[1024];
    ck_assert(!kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "missing.lua"), err, sizeof err));
    ck_assert_msg(strstr(err, "cannot open") != NULL, "%s", err);
    write_file(&h, "a.lua", "world:system{name = 'a_sys', run = function() end}\n");
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "a.lua"), err, sizeof err), "%s", err);
    write_file(&h, "a.lua", "error('broken on purpose')\n");
    ck_assert(!kiln_lua_mods_reload(h.L, h.mods_idx, "a", err, sizeof err));
    ck_assert_msg(strstr(err, "broken on purpose") != NULL, "%s", err);
    kiln_schedule *s = kiln_lua_schedule(h.L, h.world_idx);
    ck_assert_int_ge(kiln_schedule_find(s, "a_sys"), 0); /* the old version runs on */
    ck_assert_int_eq(kiln_lua_mods_poll(h.L, h.mods_idx, err, sizeof err), -1); /* the change is seen... */
    ck_assert_int_eq(kiln_lua_mods_poll(h.L, h.mods_idx, err, sizeof err), 0);  /* ...and not retried */
    ck_assert(!kiln_lua_mods_load_dir(h.L, h.mods_idx, path_of(&h, "no-such-folder"), err, sizeof err));
    ck_assert_msg(strstr(err, "mods:load_dir: cannot open folder ") == err, "%s", err);
    ck_assert(!kiln_lua_mods_unload(h.L, h.mods_idx, "nobody", false, err, sizeof err));
    ck_assert_str_eq(err, "mods:unload: no mod named 'nobody' is loaded");
    ck_assert_msg(kiln_lua_mods_unload(h.L, h.mods_idx, "a", true, err, sizeof err), "%s", err);
    /* load_dir: b depends on a missing mod, the others load */
    write_file(&h, "a.lua", "mod.exports.n = 7\n");
    char sub[256];
    snprintf(sub, sizeof sub, "%s/b", h.dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    write_file(&h, "b/manifest.lua", "return {name = 'b', depends = {'zzz'}}\n");
    write_file(&h, "b/init.lua", "\n");
    ck_assert(!kiln_lua_mods_load_dir(h.L, h.mods_idx, h.dir, err, sizeof err));
    ck_assert_msg(strstr(err, "mod 'b': it depends on 'zzz', which is not there") != NULL, "%s", err);
    ck_assert(!kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "a.lua"), err, sizeof err)); /* loaded */
    ck_assert_msg(strstr(err, "a mod named 'a' is already loaded") != NULL, "%s", err);
    stop(&h);
}
END_TEST

START_TEST(closing_the_host_state_with_mods_loaded_releases_everything) {
    host h;
    start(&h, NULL);
    write_file(&h, "m.lua",
               "local q = world:query{'Health'}\n"
               "for i = 1, 100 do world:spawn{Health = {hp = i}} end\n"
               "world:system{name = 'm_sys', reads = {'Health'}, run = function() for e in q:each() do end end}\n");
    char err[512];
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "m.lua"), err, sizeof err), "%s", err);
    ck_assert_int_eq(kiln_schedule_run(kiln_lua_schedule(h.L, h.world_idx), 0.1), KILN_OK);
    stop(&h); /* ASan: no leak, no use after free; the entities stay the host's */
}
END_TEST

START_TEST(the_c_calls_refuse_what_is_not_a_mod_manager_and_push_refuses_a_second_manager) {
    host h;
    start(&h, NULL);
    char err[256];
    ck_assert(!kiln_lua_mods_load(h.L, h.world_idx, "/nowhere.lua", err, sizeof err));
    ck_assert_str_eq(err, "kiln.Mods expected");
    ck_assert_int_eq(kiln_lua_mods_poll(h.L, h.world_idx, err, sizeof err), -1);
    ck_assert_str_eq(err, "kiln.Mods expected");
    int top = lua_gettop(h.L);
    lua_pushcfunction(h.L, push_again);
    lua_pushvalue(h.L, h.world_idx);
    ck_assert_int_ne(lua_pcall(h.L, 1, 0, 0), LUA_OK);
    ck_assert_str_eq(lua_tostring(h.L, -1), "kiln.mods: the world has a mod manager already");
    lua_settop(h.L, top);
    stop(&h);
}
END_TEST

/* A mod's placeholder tags are counted in the host's registry, reached through the host's
 * main thread with two slots of its stack. Loaded from a coroutine while the main thread's
 * stack is full to Lua's limit, a mod's first spawn into a buffer is refused with a message,
 * the buffer as it was, and nothing is written past the stack. */
START_TEST(a_mod_buffer_spawn_is_refused_while_the_host_main_thread_stack_is_full) {
    host h;
    start(&h, NULL);
    write_file(&h, "tags.lua",
               "local c = kiln.commands()\n"
               "local ok, err = pcall(c.spawn, c, {})\n"
               "print(tostring(ok) .. '|' .. tostring(err) .. '|' .. c:count())\n");
    lua_State *co = lua_newthread(h.L);
    lua_pushvalue(h.L, h.mods_idx);
    lua_xmove(h.L, co, 1);
    int base = lua_gettop(h.L);
    int filled = 0;
    while (lua_checkstack(h.L, 1)) {
        lua_pushboolean(h.L, 1);
        filled++;
    }
    ck_assert_int_gt(filled, 4000); /* Lua 5.4: its limit, 1M slots; LuaJIT: 8000 a C call */
    char err[512];
    ck_assert_msg(kiln_lua_mods_load(co, 1, path_of(&h, "tags.lua"), err, sizeof err), "%s", err);
    lua_settop(h.L, base);
    ck_assert_msg(strstr(h.log, "tags: false|") && strstr(h.log, "the host's stack is full|0\n"), "%s", h.log);
    /* with room again, the same mod spawns through a buffer */
    h.log[0] = 0;
    ck_assert_msg(kiln_lua_mods_reload(h.L, h.mods_idx, "tags", err, sizeof err), "%s", err);
    ck_assert_msg(strstr(h.log, "tags: true|-"), "%s", h.log);
    stop(&h);
}
END_TEST

/* desc.queries bounds a mod's live queries; desc.world_memory counts what they hold in C. */
START_TEST(the_desc_bounds_a_mods_queries_by_count_and_by_the_bytes_they_hold) {
    host h;
    start(&h, &(kiln_lua_mods_desc){.queries = 3});
    write_file(&h, "three.lua",
               "local kept = {}\n"
               "for i = 1, 4 do local ok, q = pcall(world.query, world, {'Health'}) print(ok, ok or q) kept[i] = q end\n");
    char err[512];
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "three.lua"), err, sizeof err), "%s", err);
    ck_assert_str_eq(h.log, "three: true\ttrue\nthree: true\ttrue\nthree: true\ttrue\n"
                            "three: false\tworld:query: mod 'three' holds 3 live queries, its limit (queries)\n");
    stop(&h);
    /* a query of a C host's world holds sizeof(kiln_query) and more: 64 bytes are too few */
    start(&h, &(kiln_lua_mods_desc){.world_memory = 64});
    write_file(&h, "one.lua", "print(pcall(world.query, world, {'Health'}))\n");
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "one.lua"), err, sizeof err), "%s", err);
    ck_assert_msg(strstr(h.log, "one: false\tmod 'one' holds 0 bytes in the world; world:query would take ") &&
                      strstr(h.log, "more, past its limit of 64 (world_memory)"),
                  "%s", h.log);
    stop(&h);
}
END_TEST

/* Pushes a mod manager with the desc at upvalue 1 for the World at 1 (for a pcall). */
static int push_with_desc(lua_State *L) {
    kiln_lua_mods_push(L, 1, lua_touserdata(L, lua_upvalueindex(1)));
    return 1;
}

/* A desc whose limit is neither 0 (its default) nor one kiln.mods accepts is refused with a
 * message naming the field, and the world is left without a manager: a good desc then works. */
START_TEST(push_refuses_a_desc_limit_below_what_kiln_mods_accepts) {
    static const struct {
        kiln_lua_mods_desc desc;
        const char *message;
    } bad[] = {
        {{.memory = 1000}, "desc.memory must be 0 (the default) or at least 262144"},
        {{.instructions = -1}, "desc.instructions must be 0 (the default) or at least 1000"},
        {{.instructions = 999}, "desc.instructions must be 0 (the default) or at least 1000"},
        {{.frame_instructions = -5}, "desc.frame_instructions must be 0 (the default) or at least 1000"},
        {{.milliseconds = -2}, "desc.milliseconds must be -1 (none), 0 (the default) or positive"},
        {{.frame_milliseconds = -2}, "desc.frame_milliseconds must be -1 (none), 0 (the default) or positive"},
        {{.entities = -1}, "desc.entities must be 0 (the default) or positive"},
        {{.world_memory = INT64_MIN}, "desc.world_memory must be 0 (the default) or positive"},
        {{.queries = -3}, "desc.queries must be 0 (the default) or positive"},
        {{.archetypes = -1}, "desc.archetypes must be 0 (the default) or positive"},
        {{.components = -1}, "desc.components must be 0 (the default) or positive"},
        {{.systems = -1}, "desc.systems must be 0 (the default) or from 1 to 4096"},
        {{.systems = 4097}, "desc.systems must be 0 (the default) or from 1 to 4096"},
    };
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    kiln_world *world = kiln_world_create(NULL);
    kiln_lua_push_world(L, world, 0);
    int world_idx = lua_gettop(L);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lua_pushlightuserdata(L, (void *)&bad[i].desc);
        lua_pushcclosure(L, push_with_desc, 1);
        lua_pushvalue(L, world_idx);
        ck_assert_int_ne(lua_pcall(L, 1, 1, 0), LUA_OK);
        ck_assert_msg(strncmp(lua_tostring(L, -1), "kiln_lua_mods_push: ", 20) == 0 &&
                          strstr(lua_tostring(L, -1), bad[i].message),
                      "case %zu: %s", i, lua_tostring(L, -1));
        lua_settop(L, world_idx);
    }
    kiln_lua_mods_desc good = {.memory = 262144, .instructions = 1000, .milliseconds = -1, .queries = 1};
    lua_pushlightuserdata(L, &good);
    lua_pushcclosure(L, push_with_desc, 1);
    lua_pushvalue(L, world_idx);
    ck_assert_msg(lua_pcall(L, 1, 1, 0) == LUA_OK, "%s", lua_tostring(L, -1));
    lua_close(L);
    kiln_world_destroy(world);
}
END_TEST

/* desc.readonly: a C host's component every mod reads but none writes, by any path tried here;
 * a name the world has no component of is refused, and no manager is left. */
START_TEST(a_c_hosts_desc_readonly_keeps_its_component_from_every_mod) {
    static const char *const readonly[] = {"Health", NULL};
    host h;
    start(&h, &(kiln_lua_mods_desc){.readonly = readonly});
    kiln_component hp = kiln_component_lookup(h.world, "Health");
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(h.world, &hp, (const void *[]){&(int32_t){50}}, 1, &e), KILN_OK);
    char src[512], err[512];
    snprintf(src, sizeof src,
             "print(pcall(world.set, world, %llu, 'Health', {hp = 0}))\n"
             "print(pcall(world.despawn, world, %llu))\n"
             "print('reads', world:get(%llu, 'Health').hp)\n",
             (unsigned long long)e, (unsigned long long)e, (unsigned long long)e);
    write_file(&h, "thief.lua", src);
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "thief.lua"), err, sizeof err), "%s", err);
    ck_assert_msg(strstr(h.log, "thief: false\tworld:set: Health is read-only to mods") &&
                      strstr(h.log, "thief: false\tworld:despawn: entity") && strstr(h.log, "thief: reads\t50\n"),
                  "log: %s", h.log);
    write_file(&h, "greedy.lua", "world:system{name = 'greedy', writes = {'Health'}, run = function() end}\n");
    ck_assert(!kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "greedy.lua"), err, sizeof err));
    ck_assert_msg(strstr(err, "writes lists Health, which is read-only to mods"), "%s", err);
    ck_assert_int_eq(*(const int32_t *)kiln_get(h.world, e, hp), 50);
    stop(&h);

    static const char *const unknown[] = {"Health", "Mana", NULL};
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    kiln_world *world = kiln_world_create(NULL);
    kiln_lua_push_world(L, world, 0);
    kiln_lua_mods_desc desc = {.readonly = unknown};
    lua_pushlightuserdata(L, &desc);
    lua_pushcclosure(L, push_with_desc, 1);
    lua_pushvalue(L, 1);
    ck_assert_int_ne(lua_pcall(L, 1, 1, 0), LUA_OK);
    ck_assert_msg(strstr(lua_tostring(L, -1), "readonly names 'Health', which is not a component of the world"),
                  "%s", lua_tostring(L, -1));
    lua_settop(L, 1);
    desc.readonly = NULL;
    lua_pushlightuserdata(L, &desc);
    lua_pushcclosure(L, push_with_desc, 1);
    lua_pushvalue(L, 1);
    ck_assert_msg(lua_pcall(L, 1, 1, 0) == LUA_OK, "%s", lua_tostring(L, -1));
    lua_close(L);
    kiln_world_destroy(world);
}
END_TEST

/* kiln_lua_mods_readonly: a name added once mods are loaded binds them from then on; a loaded
 * mod's system writing it fails the call, naming both, with nothing changed. */
START_TEST(kiln_lua_mods_readonly_binds_the_loaded_mods_or_names_the_system_in_the_way) {
    host h;
    start(&h, NULL);
    kiln_component hp = kiln_component_lookup(h.world, "Health");
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(h.world, &hp, (const void *[]){&(int32_t){50}}, 1, &e), KILN_OK);
    char src[256], err[512];
    snprintf(src, sizeof src, "world:system{name = 'drain', exclusive = true, run = function(w)\n"
                              "  print(pcall(w.set, w, %llu, 'Health', {hp = 0})) end}\n", (unsigned long long)e);
    write_file(&h, "drain.lua", src);
    write_file(&h, "healer.lua", "world:system{name = 'heal', writes = {'Health'}, run = function() end}\n");
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "drain.lua"), err, sizeof err), "%s", err);
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "healer.lua"), err, sizeof err), "%s", err);
    ck_assert(!kiln_lua_mods_readonly(h.L, h.mods_idx, "Health", err, sizeof err));
    ck_assert_str_eq(err, "mods:readonly: system 'heal' of mod 'healer' lists Health in writes; unload the mod, or "
                          "make Health read-only before loading it (nothing was made read-only)");
    ck_assert(!kiln_lua_mods_readonly(h.L, h.mods_idx, "Mana", err, sizeof err));
    ck_assert_msg(strstr(err, "'Mana' is not a component of the world"), "%s", err);
    kiln_schedule *s = kiln_lua_schedule(h.L, h.world_idx);
    ck_assert_int_eq(kiln_schedule_run(s, 0.1), KILN_OK); /* not read-only yet: drain writes */
    ck_assert_int_eq(*(const int32_t *)kiln_get(h.world, e, hp), 0);
    ck_assert_msg(kiln_lua_mods_unload(h.L, h.mods_idx, "healer", false, err, sizeof err), "%s", err);
    ck_assert_msg(kiln_lua_mods_readonly(h.L, h.mods_idx, "Health", err, sizeof err), "%s", err);
    ck_assert_int_eq(kiln_set(h.world, e, hp, &(int32_t){50}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.1), KILN_OK);
    ck_assert_int_eq(*(const int32_t *)kiln_get(h.world, e, hp), 50);
    ck_assert_msg(strstr(h.log, "drain: false\tworld:set: Health is read-only to mods"), "log: %s", h.log);
    ck_assert_int_eq(lua_gettop(h.L), h.mods_idx);
    stop(&h);
}
END_TEST

/* kiln_lua_mods_readonly misused from C: a NULL name, what is not a manager, a closed manager,
 * no room for the message; each refused with the stack as it was and nothing made read-only. */
START_TEST(kiln_lua_mods_readonly_refuses_a_null_name_and_what_is_not_an_open_manager) {
    host h;
    start(&h, NULL);
    char err[256];
    ck_assert(!kiln_lua_mods_readonly(h.L, h.mods_idx, NULL, err, sizeof err));
    ck_assert_str_eq(err, "bad argument #1 to 'mods:readonly' (string expected, got nil)");
    ck_assert(!kiln_lua_mods_readonly(h.L, h.mods_idx, NULL, NULL, 0)); /* no buffer: nothing written */
    err[0] = 'x';
    ck_assert(!kiln_lua_mods_readonly(h.L, h.mods_idx, "Mana", err, 1));
    ck_assert_str_eq(err, "");
    ck_assert(!kiln_lua_mods_readonly(h.L, h.world_idx, "Health", err, sizeof err));
    ck_assert_str_eq(err, "kiln.Mods expected");
    ck_assert_int_eq(lua_gettop(h.L), h.mods_idx);
    /* none of those made Health read-only: a mod still writes it */
    kiln_component hp = kiln_component_lookup(h.world, "Health");
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(h.world, &hp, (const void *[]){&(int32_t){50}}, 1, &e), KILN_OK);
    char src[128];
    snprintf(src, sizeof src, "world:set(%llu, 'Health', {hp = 7})\n", (unsigned long long)e);
    write_file(&h, "writer.lua", src);
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "writer.lua"), err, sizeof err), "%s", err);
    ck_assert_int_eq(*(const int32_t *)kiln_get(h.world, e, hp), 7);
    /* a closed manager */
    lua_getfield(h.L, h.mods_idx, "close");
    lua_pushvalue(h.L, h.mods_idx);
    ck_assert_int_eq(lua_pcall(h.L, 1, 0, 0), LUA_OK);
    ck_assert(!kiln_lua_mods_readonly(h.L, h.mods_idx, "Health", err, sizeof err));
    ck_assert_msg(strstr(err, "mods:readonly") && strstr(err, "closed"), "%s", err);
    ck_assert_int_eq(lua_gettop(h.L), h.mods_idx);
    stop(&h);
}
END_TEST

/* A reload whose dependent fails to reload: the named mod reloaded (true), and err names the
 * dependent and why (it was empty: the host saw the failure only as the dependent's system
 * failing at the next frame). */
START_TEST(a_c_reload_lists_the_dependents_whose_reload_failed) {
    host h;
    start(&h, NULL);
    char err[1024], sub[256];
    for (int i = 0; i < 2; i++) {
        snprintf(sub, sizeof sub, "%s/%s", h.dir, i ? "user" : "dep");
        ck_assert_int_eq(mkdir(sub, 0700), 0);
    }
    write_file(&h, "dep/manifest.lua", "return {name = 'dep', version = '1'}\n");
    write_file(&h, "dep/init.lua", "mod.exports.v = 1\n");
    write_file(&h, "user/manifest.lua", "return {name = 'user', version = '1', depends = {'dep'}}\n");
    write_file(&h, "user/init.lua", "assert(mod.import('dep').v == 1, 'user needs dep version 1')\n");
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "dep"), err, sizeof err), "%s", err);
    ck_assert_msg(kiln_lua_mods_load(h.L, h.mods_idx, path_of(&h, "user"), err, sizeof err), "%s", err);
    write_file(&h, "dep/init.lua", "mod.exports.v = 2\n");
    ck_assert_msg(kiln_lua_mods_reload(h.L, h.mods_idx, "dep", err, sizeof err), "%s", err);
    ck_assert_msg(strstr(err, "mod 'user'") && strstr(err, "user needs dep version 1"), "err: '%s'", err);
    /* all dependents reloaded: err is empty */
    write_file(&h, "user/init.lua", "mod.import('dep')\n");
    ck_assert_msg(kiln_lua_mods_reload(h.L, h.mods_idx, "dep", err, sizeof err), "%s", err);
    ck_assert_str_eq(err, "");
    ck_assert_int_eq(lua_gettop(h.L), h.mods_idx);
    stop(&h);
}
END_TEST

static Suite *mods_suite(void) {
    Suite *s = suite_create("mods_embed");
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, a_c_host_loads_a_mod_hears_its_prints_and_runs_its_systems);
    tcase_add_test(tc, a_failing_mod_system_in_the_hosts_own_run_is_reported_to_the_host);
    tcase_add_test(tc, the_desc_bounds_a_mods_whole_frame_by_its_frame_milliseconds);
    tcase_add_test(tc, reload_unload_and_load_dir_report_their_failures_in_err);
    tcase_add_test(tc, a_c_reload_lists_the_dependents_whose_reload_failed);
    tcase_add_test(tc, closing_the_host_state_with_mods_loaded_releases_everything);
    tcase_add_test(tc, the_c_calls_refuse_what_is_not_a_mod_manager_and_push_refuses_a_second_manager);
    tcase_add_test(tc, a_mod_buffer_spawn_is_refused_while_the_host_main_thread_stack_is_full);
    tcase_add_test(tc, the_desc_bounds_a_mods_queries_by_count_and_by_the_bytes_they_hold);
    tcase_add_test(tc, push_refuses_a_desc_limit_below_what_kiln_mods_accepts);
    tcase_add_test(tc, a_c_hosts_desc_readonly_keeps_its_component_from_every_mod);
    tcase_add_test(tc, kiln_lua_mods_readonly_binds_the_loaded_mods_or_names_the_system_in_the_way);
    tcase_add_test(tc, kiln_lua_mods_readonly_refuses_a_null_name_and_what_is_not_an_open_manager);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(mods_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
