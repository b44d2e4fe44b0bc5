/* test_mods_lua_memory.c: the mod manager's load, load_dir, reload, poll and unload with the
 * host's Lua state out of memory at every allocation in turn (a mod's own state has its own
 * allocator and limit: what runs out is what the call does in the host's state, its records,
 * lists, systems and failures). A call that raises has changed nothing: no mod half loaded,
 * none stopped by a reload that failed, the world as it was. */
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln_persist.h"
#include "lua_host.h"

/* Two mod files in a fresh folder: m.lua declares a component, spawns and adds a system;
 * n.lua declares and spawns. */
static void write_mod(char *dir, size_t size) {
    snprintf(dir, size, "/tmp/kiln-mods-mem-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/m.lua", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("world:component('Junk', 'int32_t v;')\n"
          "world:spawn{Junk = {v = 1}}\n"
          "world:system{name = 'junk', writes = {'Junk'}, run = function(w) end}\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/n.lua", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("world:component('Junk2', 'int32_t v;')\n"
          "world:spawn{Junk2 = {v = 2}}\n", f);
    fclose(f);
}

static void remove_mod(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/m.lua", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/n.lua", dir);
    unlink(path);
    rmdir(dir);
}

/* Makes a fresh folder from template dir (dir_size bytes, ending XXXXXX) holding the one file
 * name with text; its path goes to path. */
static void write_one(char *dir, size_t dir_size, const char *template, char *path, size_t path_size,
                      const char *name, const char *text) {
    snprintf(dir, dir_size, "%s", template);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, path_size, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* The calls, each from a manager with m.lua loaded (want = 1), it and n.lua
 * (want = 2) or none (want = 0); the files edited after their load when edited is set. */
static const struct {
    const char *call;
    int loaded;
    bool allocates; /* unloading allocates nothing: a host out of memory can still unload */
    bool edited;
    bool kept; /* m.lua loaded and unloaded with keep first: the world keeps its entity */
} calls[] = {
    {"ok, err = mods:load(path) assert(ok, err)", 0, true, false, false},
    /* taken back, the load leaves the entity kept before it as it was (not despawned) */
    {"ok, err = mods:load(path) assert(ok, err)", 0, true, false, true},
    /* the new version runs and its info found no memory: the call says so with true alone;
     * the sweep goes on until the info comes back too */
    {"ok, err = mods:reload('m') assert(ok, err) partial = ok == true", 1, true, false, false},
    {"ok, err = mods:unload('m') assert(ok, err)", 1, false, false, false},
    /* a reload that failed in the mod's own state is a failure poll returns, not a raise */
    {"local done, failed = mods:poll() partial = #done < 1 last_failed = failed", 1, true, true, false},
    /* both edited: poll's lists must hold both before either reloads */
    {"local done, failed = mods:poll() partial = #done < 2 last_failed = failed", 2, true, true, false},
    /* a mod whose own state ran out of memory is a failure it returns, not a raise: the
     * call is tried again until both load */
    {"local ok = mods:load_dir(dir) partial = #ok < 2", 0, true, false, false},
};
enum { CALLS = sizeof calls / sizeof *calls };

/* After a poll that reloaded fewer than it found edited: each not reloaded has a failure, its
 * message or, when no memory was left for that, a pointer to mods:list(), which has it. */
static const char *const poll_failures =
    "if not last_failed then return end\n"
    "local info = {} for _, m in ipairs(mods:list()) do info[m.name] = m end\n"
    "local n = 0\n"
    "for name, msg in pairs(last_failed) do n = n + 1\n"
    "  assert(type(msg) == 'string' and #msg > 0, name)\n"
    "  if msg:find('mods:list() has it', 1, true) then\n"
    "    fallbacks = fallbacks + 1\n"
    "    assert(info[name].error and info[name].error:find('reload failed', 1, true), tostring(info[name].error))\n"
    "  end\n"
    "end\n"
    "assert(n >= 1, 'poll reloaded fewer mods than it found edited and gave no failure')";

/* After a failed call: the mods there were, each running. */
static const char *const same =
    "local n = 0\n"
    "for _, m in ipairs(mods:list()) do n = n + 1 assert(m.state == 'running', m.name .. ' ' .. m.state .. ': ' .. tostring(m.error)) end\n"
    "assert(n == want, n .. ' mods loaded, not ' .. want)";

START_TEST(a_manager_call_out_of_lua_memory_anywhere_raises_before_it_changes_anything) {
    char dir[64];
    write_mod(dir, sizeof dir);
    char setup[1024];
    snprintf(setup, sizeof setup,
             "dir = '%s' path = dir .. '/m.lua' mods = kiln.mods(w, {memory = 1048576}) partial = false\n"
             "last_failed = false fallbacks = 0\n"
             "if %s then assert(mods:load(path)) assert(mods:unload('m', {keep = true})) end\n"
             "want = %d if want >= 1 then assert(mods:load(path)) end\n"
             "if want >= 2 then assert(mods:load(dir .. '/n.lua')) end\n"
             "if %s then for _, f in ipairs{'m', 'n'} do\n"
             "  local file = assert(io.open(dir .. '/' .. f .. '.lua', 'a')) file:write('-- edited\\n') file:close() end end",
             dir, calls[_i].kept ? "true" : "false", calls[_i].loaded, calls[_i].edited ? "true" : "false");
    int64_t n = 0, partial = 0, fallbacks = 0;
    for (;; n++) {
        host h;
        start(&h, setup);
        run(h.L, "collectgarbage() collectgarbage()");
        /* the slots too: a load taken back gives its spawns' slots back (kiln_unspawn) */
        uint64_t hash = kiln_world_hash(h.world);
        int64_t count = kiln_entity_count(h.world);
        int rc = call_failing_after(&h, calls[_i].call, n);
        if (rc != LUA_OK) {
            ck_assert_msg(kiln_world_hash(h.world) == hash && kiln_entity_count(h.world) == count,
                          "%s, refused after %lld grants, changed the world (%s)", calls[_i].call, (long long)n,
                          lua_tostring(h.L, -1));
            lua_pop(h.L, 1);
            run(h.L, same);
        }
        bool whole = rc == LUA_OK && luaL_dostring(h.L, "return not partial") == LUA_OK && lua_toboolean(h.L, -1);
        if (rc == LUA_OK && !whole && calls[_i].loaded) {
            partial++;
            run(h.L, same);
            run(h.L, poll_failures);
            if (luaL_dostring(h.L, "return fallbacks") == LUA_OK) fallbacks += lua_tointeger(h.L, -1);
        }
        run(h.L, "mods:close()");
        stop(&h);
        if (whole) break;
    }
    if (calls[_i].allocates) ck_assert_int_gt(n, 1);
    else ck_assert_int_eq(n, 0);
    /* reload's true, poll's returned failures: each was met on the way, not only the raise */
    if (calls[_i].loaded && calls[_i].allocates) ck_assert_int_gt(partial, 0);
    if (calls[_i].edited) ck_assert_int_gt(fallbacks, 0);
    remove_mod(dir);
}
END_TEST

/* A reload turning the order of the mod's two systems around, with the world's allocator
 * refusing after each number of grants in turn: it reloads, or fails leaving the old version
 * running, or (refused for memory once the old systems were replaced) stops the mod; never a
 * crash, and the world gives back every byte (stop). The new version's systems go into place
 * without their constraints first and are put back whole (mods.c, commit_systems); a refusal
 * between the two must release them. */
START_TEST(a_reload_reordering_its_systems_out_of_world_memory_anywhere_leaves_a_clean_world) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/kiln-mods-order-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], setup[2048];
    snprintf(path, sizeof path, "%s/o.lua", dir);
    const char *v1 = "world:system{name = 's1', before = {'s2'}, run = function() end}\n"
                     "world:system{name = 's2', run = function() end}\n";
    const char *v2 = "world:system{name = 's2', before = {'s1'}, run = function() end}\n"
                     "world:system{name = 's1', run = function() end}\n";
    snprintf(setup, sizeof setup,
             "mods = kiln.mods(w) local f = assert(io.open('%s', 'w')) f:write([[%s]]) f:close()\n"
             "assert(mods:load('%s'))\n"
             "f = assert(io.open('%s', 'w')) f:write([[%s]]) f:close()",
             path, v1, path, path, v2);
    for (int which = 0; which < 2; which++) { /* the world's allocator, then the host's Lua */
        bool done = false;
        for (int64_t n = 0; !done && n < 10000; n++) {
            host h;
            start(&h, setup);
            budget *b = which ? &h.lua_mem : &h.world_mem;
            b->left = n;
            int rc = luaL_dostring(h.L, "ok, err = mods:reload('o') return ok ~= nil");
            b->left = -1;
            done = rc == LUA_OK && lua_toboolean(h.L, -1);
            lua_settop(h.L, 0);
            run(h.L, "assert(w:progress(1 / 60)) local m = mods:list()[1]\n"
                     "assert(ok or m.state == 'running' or m.error:find('stopped', 1, true), m.error)");
            run(h.L, "mods:close()");
            stop(&h);
        }
        ck_assert(done);
    }
    unlink(path);
    rmdir(dir);
}
END_TEST

/* A top level adding a component to 40 of the host's entities (past the first block of its
 * records of them) and emitting, then failing or not, loaded by mods:load and by
 * mods:load_dir, with the world's allocator and then the host's Lua refusing after each
 * number of grants in turn (mod_undo.c): a load that fails for memory or for its error
 * leaves the host's entities and events as they were, also when the top level ran but the
 * call ran out of memory after it; one that succeeds leaves every add in place. */
START_TEST(a_top_level_out_of_memory_anywhere_is_taken_back_whole_or_kept_whole) {
    char dir[64], path[256], setup[1024];
    snprintf(dir, sizeof dir, "/tmp/kiln-mods-undo-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/u.lua", dir);
    static const char *const loads[] = {
        "ok, err = mods:load(dir_path) return ok ~= nil",
        "local got, failed = mods:load_dir(dir) ok = #got == 1 or nil err = failed.u return ok ~= nil",
    };
    /* the error each reports: mods:load names itself, a failure by name of load_dir only the mod */
    static const char *const booms[] = {"done = err == \"mods:load: mod 'u': boom\"",
                                        "done = err == \"mod 'u': boom\""};
    for (int fails = 0; fails < 4; fails++) {
        snprintf(setup, sizeof setup,
                 "w:component('Health', 'int32_t hp;') w:event('Hit', 'int32_t n;')\n"
                 "hosts = {} for i = 1, 40 do hosts[i] = w:spawn{} end\n"
                 "dir = '%s' dir_path = dir .. '/u.lua' local f = assert(io.open(dir_path, 'w'))\n"
                 "f:write('for _, e in ipairs{', table.concat(hosts, ', '), '} do world:add(e, \"Health\", {hp = 1}) end\\n',\n"
                 "        'world:emit(\"Hit\", {n = 1})\\n', %s) f:close()\n"
                 "mods = kiln.mods(w)\n"
                 "function hits() local n = 0 for hit in w:events('Hit') do n = n + hit.n end return n end",
                 dir, fails & 1 ? "'error(\"boom\", 0)'" : "''");
        for (int which = 0; which < 2; which++) { /* the world's allocator, then the host's Lua */
            bool done = false;
            int64_t n = 0;
            for (; !done && n < 20000; n++) {
                host h;
                start(&h, setup);
                uint64_t hash = kiln_world_hash(h.world);
                int64_t count = kiln_entity_count(h.world);
                budget *b = which ? &h.lua_mem : &h.world_mem;
                b->left = n;
                int rc = luaL_dostring(h.L, loads[fails >> 1]);
                b->left = -1;
                bool loaded = rc == LUA_OK && lua_toboolean(h.L, -1);
                if (rc != LUA_OK || !loaded) {
                    ck_assert_msg(kiln_world_hash(h.world) == hash && kiln_entity_count(h.world) == count,
                                  "a failed top level (%s after %lld grants) changed the world (%lld entities, %lld before): %s",
                                  which ? "Lua" : "world", (long long)n, (long long)kiln_entity_count(h.world),
                                  (long long)count, lua_tostring(h.L, -1));
                    run(h.L, "assert(hits() == 0, 'a failed top level emitted')");
                    if (rc == LUA_OK && (fails & 1)) {
                        run(h.L, booms[fails >> 1]);
                        (void)luaL_dostring(h.L, "return done");
                        done = lua_toboolean(h.L, -1);
                    }
                } else {
                    ck_assert(!(fails & 1));
                    run(h.L, "for i, e in ipairs(hosts) do assert(w:get(e, 'Health').hp == 1, i) end\n"
                             "assert(hits() <= 1)");
                    done = true;
                }
                lua_settop(h.L, 0);
                run(h.L, "mods:close()");
                stop(&h);
            }
            ck_assert_msg(done, "the load never ran to its end");
            ck_assert_int_gt(n, 2);
        }
    }
    unlink(path);
    rmdir(dir);
}
END_TEST

/* mods:load_dir loading a.lua (two spawns) and then b.lua, whose top level hands a's first
 * spawn to a granted host function, with the host's Lua refusing after each number of grants
 * in turn. When the call raises after b's call out, a's load is taken back with every spawn
 * of it counting as shown (mod_undo.c: a call out since its top level ended): despawned, its
 * slot spent, so the handle the host kept never names another entity. Given back as it was,
 * the next spawn took the kept handle. */
START_TEST(a_load_dir_taken_back_after_a_later_mod_called_out_keeps_the_first_mods_handles_spent) {
    char dir[64], setup[1024];
    snprintf(dir, sizeof dir, "/tmp/kiln-mods-shown-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(setup, sizeof setup,
             "dir = '%s' local function put(name, text)\n"
             "  local f = assert(io.open(dir .. '/' .. name, 'w')) f:write(text) f:close() end\n"
             "put('a.lua', [[world:component('Junk', 'int32_t v;') for i = 1, 2 do world:spawn{Junk = {v = i}} end]])\n"
             "put('b.lua', [[world:component('Junk', 'int32_t v;')\n"
             "  for e, j in world:query{'Junk'}:each() do if j.v == 1 then keep(e) end end]])\n"
             "kept = nil mods = kiln.mods(w, {allow = {keep = function(e) kept = e end}})",
             dir);
    int64_t n = 0, shown = 0;
    for (bool whole = false; !whole; n++) {
        host h;
        start(&h, setup);
        run(h.L, "collectgarbage() collectgarbage()");
        uint64_t content = kiln_world_content_hash(h.world);
        int64_t count = kiln_entity_count(h.world);
        int rc = call_failing_after(&h, "local got = mods:load_dir(dir) whole = #got == 2", n);
        if (rc != LUA_OK) {
            lua_pop(h.L, 1);
            ck_assert_msg(kiln_world_content_hash(h.world) == content && kiln_entity_count(h.world) == count,
                          "refused after %lld grants, the world changed", (long long)n);
            run(h.L, "assert(#mods:list() == 0)");
            (void)luaL_dostring(h.L, "return kept ~= nil");
            if (lua_toboolean(h.L, -1)) {
                shown++;
                run(h.L, "assert(not w:is_alive(kept), 'the kept handle names a live entity')\n"
                         "assert(w:spawn{} ~= kept, 'the next spawn took the handle the host kept')");
            }
            lua_settop(h.L, 0);
        } else {
            (void)luaL_dostring(h.L, "return whole");
            whole = lua_toboolean(h.L, -1);
            lua_settop(h.L, 0);
        }
        run(h.L, "mods:close()");
        stop(&h);
    }
    ck_assert_int_gt(shown, 0); /* the raise after b's call out was met, not only before it */
    char path[256];
    snprintf(path, sizeof path, "%s/a.lua", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/b.lua", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* A mod with entities of its own and its component on the host's, unloaded with the world's
 * allocator refusing after each number of grants in turn: the unload is done whole (its
 * entities gone, its component off every host entity), or it says it was not and the mod
 * stays loaded and running, and a second unload finishes. (A refused despawn record and a
 * refused query were ignored: true came back with the mod's entities and components there.) */
START_TEST(an_unload_out_of_world_memory_anywhere_is_done_whole_or_says_so_and_can_be_done_again) {
    char dir[64], setup[1024];
    snprintf(dir, sizeof dir, "/tmp/kiln-mods-unload-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(setup, sizeof setup,
             "w:component('Position', 'float x, y;') w:component('Velocity', 'float x, y;')\n"
             "hosts = {} for i = 1, 4 do hosts[i] = w:spawn{Position = {x = i}} end w:add(hosts[4], 'Velocity', {})\n"
             "path = '%s/h.lua' local f = assert(io.open(path, 'w'))\n"
             "f:write([[world:component('Heat', 'float t;')\n"
             "for e in world:query{'Position'}:each() do world:add(e, 'Heat', {t = 1}) end\n"
             "for i = 1, 3 do world:spawn{Heat = {t = 2}} end world:spawn{}\n"
             "world:system{name = 'heat', writes = {'Heat'}, run = function() end}]]) f:close()\n"
             "mods = kiln.mods(w) assert(mods:load(path)) assert(w:count() == 8)\n"
             "function cleared()\n"
             "  assert(w:count() == 4, w:count() .. ' entities, not 4')\n"
             "  for i, e in ipairs(hosts) do assert(not w:has(e, 'Heat'), 'host entity ' .. i .. ' kept Heat') end\n"
             "  assert(#mods:list() == 0)\n"
             "end",
             dir);
    int64_t n = 0, refused = 0;
    for (bool done = false; !done; n++) {
        host h;
        start(&h, setup);
        h.world_mem.left = n;
        int rc = luaL_dostring(h.L, "ok, err = mods:unload('h')");
        h.world_mem.left = -1;
        ck_assert_msg(rc == LUA_OK, "refused after %lld grants, unload raised: %s", (long long)n, lua_tostring(h.L, -1));
        run(h.L, "if not ok then\n"
                 "  assert(err:find(\"mod 'h' stays loaded\", 1, true), err)\n"
                 "  local m = mods:list()[1] assert(m and m.name == 'h' and m.state == 'running')\n"
                 "  assert(w:progress(0.1)) assert(mods:unload('h'))\n"
                 "end\n"
                 "cleared()");
        (void)luaL_dostring(h.L, "return ok");
        done = lua_toboolean(h.L, -1);
        if (!done) refused++;
        lua_settop(h.L, 0);
        run(h.L, "mods:close()");
        stop(&h);
    }
    ck_assert_int_gt(refused, 0);
    char path[256];
    snprintf(path, sizeof path, "%s/h.lua", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* A mod adding and removing systems by fresh names, 300 a frame: what the host holds for it
 * (its list of names is the host state's memory) is the same at frame 50 as at frame 10. The
 * list kept every name a mod ever added and scanned them all at each add, each frame slower
 * than the last: counted in bytes here, not timed. */
START_TEST(a_mod_churning_systems_by_fresh_names_holds_no_more_host_memory_frame_after_frame) {
    char dir[64], path[128];
    write_one(dir, sizeof dir, "/tmp/kiln-mods-churn-XXXXXX", path, sizeof path, "churn.lua",
              "local n, f = 0, function() end\n"
              "world:system{name = 'churn', run = function()\n"
              "  for _ = 1, 300 do\n"
              "    n = n + 1\n"
              "    if not pcall(world.system, world, {name = 'c' .. n, run = f}) then break end\n"
              "    world:remove_system('c' .. n)\n"
              "  end\n"
              "end}\n");
    host h;
    start(&h, "mods = kiln.mods(w)\n"
              "function frames(k)\n"
              "  for _ = 1, k do assert(w:progress(1 / 60)) end\n"
              "  collectgarbage() collectgarbage()\n"
              "end");
    lua_pushstring(h.L, path);
    lua_setglobal(h.L, "path");
    run(h.L, "assert(mods:load(path)) frames(10)");
    int64_t first = h.lua_mem.live;
    run(h.L, "frames(40)");
    int64_t last = h.lua_mem.live;
    ck_assert_msg(last - first < 1024, "the host held %lld bytes at frame 10, %lld at frame 50", (long long)first,
                  (long long)last);
    run(h.L, "mods:close()");
    stop(&h);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- a load whose deferred section cannot open ------------------------------------------- */

enum { HOLDERS = 64 }; /* the 32 fast slots a world keeps for threads' sections and a table of 32 */

/* Threads that each open a deferred section on world and hold it until go. */
typedef struct holders {
    kiln_world *world;
    pthread_t thread[HOLDERS];
    pthread_barrier_t opened, go;
    pthread_mutex_t lock;
    int refused; /* begins and ends refused (checked on the test's thread) */
} holders;

static void *hold_section(void *arg) {
    holders *h = arg;
    bool began = kiln_defer_begin(h->world) == KILN_OK;
    pthread_barrier_wait(&h->opened);
    pthread_barrier_wait(&h->go);
    bool ended = began && kiln_defer_end(h->world) == KILN_OK;
    pthread_mutex_lock(&h->lock);
    h->refused += !began + !ended;
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* The host's Lua allocator while armed: at the first request of 64 KiB or more (the mod's
 * record, klua_mods_load's first), HOLDERS threads open sections and the world's allocator
 * then refuses, so the load's own kiln_defer_begin finds no slot and no memory for one. */
typedef struct section_trap {
    host *h;
    holders hold;
    bool armed, sprung;
} section_trap;

static void *trap_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    section_trap *t = ud;
    if (t->armed && nsize >= 65536) {
        t->armed = false;
        t->sprung = true;
        t->hold.world = t->h->world;
        pthread_barrier_init(&t->hold.opened, NULL, HOLDERS + 1);
        pthread_barrier_init(&t->hold.go, NULL, HOLDERS + 1);
        pthread_mutex_init(&t->hold.lock, NULL);
        for (int i = 0; i < HOLDERS; i++)
            ck_assert_int_eq(pthread_create(&t->hold.thread[i], NULL, hold_section, &t->hold), 0);
        pthread_barrier_wait(&t->hold.opened);
        t->h->world_mem.left = 0;
    }
    return budget_alloc(&t->h->lua_mem, ptr, osize, nsize);
}

/* A reload (its tag and query made by the first load: the first thing of the world's it asks
 * for is the section) whose kiln_defer_begin is refused for memory says that no section could
 * be opened, where it said the world's queued changes could not land; the old version runs on,
 * and a reload once the threads' sections end goes through. */
START_TEST(a_load_whose_deferred_section_cannot_open_says_so_and_changes_nothing) {
    char dir[64], path[256], setup[512];
    write_one(dir, sizeof dir, "/tmp/kiln-mods-defer-XXXXXX", path, sizeof path, "d.lua",
              "world:component('Tick', 'int32_t n;') world:spawn{Tick = {n = 0}}\n"
              "world:system{name = 'tick', writes = {'Tick'}, query = {'Tick'},\n"
              "             each = function(_, t) t.n = t.n + 1 end}\n");
    snprintf(setup, sizeof setup, "mods = kiln.mods(w) assert(mods:load('%s'))", path);
    host h;
    start(&h, setup);
    uint64_t hash = kiln_world_hash(h.world);
    static section_trap trap;
    memset(&trap, 0, sizeof trap);
    trap.h = &h;
    lua_setallocf(h.L, trap_alloc, &trap);
    trap.armed = true;
    ck_assert_int_eq(luaL_dostring(h.L, "return select(2, mods:reload('d'))"), LUA_OK);
    trap.armed = false;
    h.world_mem.left = -1;
    ck_assert(trap.sprung);
    const char *err = lua_tostring(h.L, -1);
    ck_assert_msg(err && strstr(err, "mods:reload: mod 'd': the world could not open a deferred section: out of "
                                     "memory for the calling thread's entry"), "%s", err ? err : "(nil)");
    ck_assert_msg(!strstr(err, "could not land"), "%s", err);
    lua_settop(h.L, 0);
    pthread_barrier_wait(&trap.hold.go);
    for (int i = 0; i < HOLDERS; i++) ck_assert_int_eq(pthread_join(trap.hold.thread[i], NULL), 0);
    pthread_barrier_destroy(&trap.hold.opened);
    pthread_barrier_destroy(&trap.hold.go);
    pthread_mutex_destroy(&trap.hold.lock);
    ck_assert_int_eq(trap.hold.refused, 0);
    ck_assert(!kiln_is_deferred(h.world));
    ck_assert(kiln_world_hash(h.world) == hash);
    lua_setallocf(h.L, budget_alloc, &h.lua_mem);
    run(h.L, "local m = mods:list()[1] assert(m.state == 'running', m.state)\n"
             "assert(m.error:find('reload failed, the old version runs on', 1, true), m.error)\n"
             "assert(w:progress(1 / 60)) assert(mods:reload('d')) assert(w:progress(1 / 60))\n"
             "local n = 0 for _, t in w:query{'Tick'}:each() do n = math.max(n, t.n) end assert(n == 2, n)");
    run(h.L, "mods:close()");
    stop(&h);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("mods_lua_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, a_manager_call_out_of_lua_memory_anywhere_raises_before_it_changes_anything, 0, CALLS);
    tcase_add_test(tc, a_reload_reordering_its_systems_out_of_world_memory_anywhere_leaves_a_clean_world);
    tcase_add_test(tc, a_top_level_out_of_memory_anywhere_is_taken_back_whole_or_kept_whole);
    tcase_add_test(tc, a_load_dir_taken_back_after_a_later_mod_called_out_keeps_the_first_mods_handles_spent);
    tcase_add_test(tc, an_unload_out_of_world_memory_anywhere_is_done_whole_or_says_so_and_can_be_done_again);
    tcase_add_test(tc, a_mod_churning_systems_by_fresh_names_holds_no_more_host_memory_frame_after_frame);
    tcase_add_test(tc, a_load_whose_deferred_section_cannot_open_says_so_and_changes_nothing);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
