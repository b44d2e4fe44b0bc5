/* test_console_persist.c: crafted saves fed to world:load, and long single calls (scenes,
 * prefabs, clones, exports, loadfile, world:progress), through a signed-in console client: each
 * refused or stopped with a clear message, the game running, its world as it was. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "console_fixture.h"

typedef struct game {
    lua_State *L;
    kiln_console *console;
} game;

/* fstat is wrapped at link time (-Wl,--wrap): the fstat of the file armed below grows it by
 * grow_by bytes of white space once it returned, as another process appending to it between a
 * statement's charge for the file (which stats it) and the read would; or, with swap_from,
 * renames that file over it, as another save to the path would (the charge reads on from the
 * file it opened, the read opens the new one). */
int __real_fstat(int fd, struct stat *st);
int __wrap_fstat(int fd, struct stat *st);
static struct {
    bool armed;
    dev_t dev;
    ino_t ino;
    const char *path, *swap_from;
    int grow_by;
    int grown; /* times it grew */
} grow;

int __wrap_fstat(int fd, struct stat *st) {
    int r = __real_fstat(fd, st);
    if (r != 0 || !grow.armed || st->st_dev != grow.dev || st->st_ino != grow.ino) return r;
    grow.armed = false;
    grow.grown++;
    if (grow.swap_from) {
        ck_assert_int_eq(rename(grow.swap_from, grow.path), 0);
        return r;
    }
    int out = open(grow.path, O_WRONLY | O_APPEND | O_CLOEXEC);
    ck_assert_int_ge(out, 0);
    char pad[256];
    memset(pad, ' ', sizeof pad);
    for (int left = grow.grow_by; left > 0; left -= (int)sizeof pad)
        ck_assert_int_gt(write(out, pad, left < (int)sizeof pad ? (size_t)left : sizeof pad), 0);
    close(out);
    return r;
}

static void grow_at_next_fstat(const char *path, int by) {
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    grow.dev = st.st_dev, grow.ino = st.st_ino, grow.path = path, grow.grow_by = by, grow.swap_from = NULL;
    grow.armed = true;
}

static void swap_at_next_fstat(const char *path, const char *from) {
    grow_at_next_fstat(path, 0);
    grow.swap_from = from;
}

/* A game whose world holds 5 entities: positions, and links from each to the first (some
 * entity fields for a tampered file to point elsewhere). */
static game *start_game(kiln_console_desc desc) {
    game *g = calloc(1, sizeof *g);
    g->L = game_state("world = kiln.world()\n"
                      "world:component('Position', 'float x, y;')\n"
                      "world:component('Link', 'entity to;')\n"
                      "local first = world:spawn{Position = {x = 1, y = 0}}\n"
                      "for i = 2, 5 do world:spawn{Position = {x = i, y = 0.5}, Link = {to = first}} end\n"
                      "frames = 0\n");
    g->console = must_open_console(g->L, desc);
    return g;
}

static void stop_game(game *g) {
    kiln_console_close(g->console);
    lua_close(g->L);
    free(g);
}

/* One game frame: the console is served (the world does not advance: its hash holds the
 * tick, and the tests compare hashes across statements). */
static void frame(void *game_) {
    game *g = game_;
    ck_assert_int_eq(luaL_dostring(g->L, "frames = frames + 1"), LUA_OK);
    kiln_console_poll(g->console);
}

/* Runs frames until one answer frame arrived on fd; returns it as "status:text" (static). */
static const char *answer(game *g, int fd) {
    static frames f;
    static char out[1 << 14];
    int got = wait_answers(frame, g, fd, 1, 60000, &f, out, sizeof out, "");
    ck_assert_msg(got == 1 && f.have == 0, "%d answers, then '%s': %.300s", got, f.buf, out);
    return out;
}

/* Sends one statement line and returns its answer. */
static const char *run(game *g, int fd, const char *line) {
    char text[4096];
    snprintf(text, sizeof text, "%s\n", line);
    send_text(fd, text);
    return answer(g, fd);
}

static int sign_in(game *g) {
    int fd = connect_with_token(g->console);
    ck_assert_str_eq(answer(g, fd), "ok:");
    return fd;
}

/* The world as the game sees it: its hash and entity count, as text. */
static const char *world_state(game *g) {
    static char text[128];
    ck_assert_int_eq(luaL_dostring(g->L, "return string.format('%x %d', world:hash(), world:count())"), LUA_OK);
    snprintf(text, sizeof text, "%s", lua_tostring(g->L, -1));
    lua_pop(g->L, 1);
    return text;
}

START_TEST(crafted_saves_through_the_console_are_refused_and_the_world_stays_as_it_was) {
    /* time enough for a sanitizer build to make and parse megabytes in one statement (the 3.8 MB
     * text's refusal took 10.6 s under ASan on a loaded machine), memory enough for its parse */
    game *g = start_game((kiln_console_desc){.budget = 0, .statement_ms = 60000, .statement_bytes = 1 << 30});
    int fd = sign_in(g);
    ck_assert_str_eq(run(g, fd, "good = world:save()"), "ok:");
    ck_assert_str_eq(run(g, fd, "goodj = world:save{format = 'json'}"), "ok:");
    ck_assert_str_eq(run(g, fd, "h0 = world:hash()"), "ok:");
    char before[128];
    snprintf(before, sizeof before, "%s", world_state(g));
    static const struct {
        const char *line, *error; /* the answer starts with "error:" then error */
    } cases[] = {
        /* truncated */
        {"world:load(good:sub(1, #good - 9))", "world:load: at byte "},
        {"world:load(goodj:sub(1, math.floor(#goodj / 2)))", "world:load: at line "},
        {"world:load('')", "world:load: "},
        /* tampered: version (99, little-endian), counts (2^40), a reference outside the file, a
         * NaN that is none (the bytes written out: LuaJIT has no string.pack or <<) */
        {"world:load(good:sub(1, 8) .. '\\99\\0\\0\\0' .. good:sub(13))", "world:load: "},
        {"world:load(good:sub(1, 32) .. '\\0\\0\\0\\0\\0\\1\\0\\0' .. good:sub(41))", "world:load: "},
        {"world:load((goodj:gsub('\"to\": %d+', '\"to\": 1099511627776', 1)))",
         "world:load: entity 1v1 component 'Link' field 'to' points to 0v256, an entity the file does not hold"},
        {"world:load((goodj:gsub('\"x\": [%d.]+', '\"x\": \"nan(0x0)\"', 1)))",
         "world:load: at entities[0].components.Position.x: \"nan(0x0)\" is not a float NaN"},
        {"world:load((goodj:gsub('\"x\": [%d.]+', '\"x\": \"nan\\\\u0000\"', 1)))",
         "world:load: at entities[0].components.Position.x: a number expected, got a string"},
        /* huge: a header claiming more than it holds, a body of noise, many entities, deep JSON */
        {"world:load(good:sub(1, 40) .. ('\\255'):rep(4194304))", "world:load: "},
        {"world:load('{\"kiln\": 1, \"tick\": 0, \"components\": [], \"entities\": [' .. "
         "('{\"id\": 4294967296, \"components\": {}}, '):rep(100000) .. '{\"id\": 4294967297, \"components\": {}}]}')",
         "world:load: entity 0v1 appears twice"},
        {"world:load('{' .. ('['):rep(1048576))", "world:load: at byte 256: arrays and objects nest more than 256 deep"},
        {"world:load(('{\"kiln\": 1, ') .. ('\"tick\": 0, '):rep(65536) .. '}')", "world:load: at line 1"},
        /* not a file the loader may read forever */
        {"world:load('/dev/zero')", "world:load: "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *a = run(g, fd, cases[i].line);
        char want[400];
        snprintf(want, sizeof want, "error:%s", cases[i].error);
        ck_assert_msg(strncmp(a, want, strlen(want)) == 0, "%s\n  answered %.300s", cases[i].line, a);
        ck_assert_msg(strlen(a) < 400, "%s: a long answer (%zu bytes): %.300s", cases[i].line, strlen(a), a);
        ck_assert_str_eq(run(g, fd, "return world:hash() == h0, world:count()"), "ok:true\n5");
        ck_assert_str_eq(world_state(g), before);
    }
    /* every prefix of a save, one statement: none loads, nothing lands */
    ck_assert_str_eq(run(g, fd, "local n = 0 for i = 0, #good - 1 do if pcall(world.load, world, good:sub(1, i)) "
                                "then n = n + 1 end end return n, world:hash() == h0"),
                     "ok:0\ntrue");
    ck_assert_str_eq(run(g, fd, "local n = 0 for i = 0, #goodj - 1, 7 do if pcall(world.load, world, goodj:sub(1, i)) "
                                "then n = n + 1 end end return n, world:hash() == h0"),
                     "ok:0\ntrue");
    ck_assert_str_eq(world_state(g), before);
    /* the session and the game go on: the budget still stops a runaway, the save still loads */
    const char *a = run(g, fd, "while true do end"); /* its instructions or its time, whichever ends first */
    ck_assert_msg(strncmp(a, "error:console: the statement ran past its", 41) == 0, "%s", a);
    ck_assert_str_eq(run(g, fd, "return #world:load(good) == 0, world:count()"), "ok:true\n10");
    close(fd);
    stop_game(g);
}
END_TEST

START_TEST(a_statement_loading_crafted_saves_in_a_loop_still_stops_at_its_limits) {
    game *g = start_game((kiln_console_desc){.budget = 2000000, .statement_ms = 300});
    int fd = sign_in(g);
    char before[128];
    snprintf(before, sizeof before, "%s", world_state(g));
    /* a megabyte of JSON refused late (its entities repeat one handle), loaded over and over */
    ck_assert_str_eq(run(g, fd, "big = '{\"kiln\": 1, \"tick\": 0, \"components\": [], \"entities\": [' .. "
                                "('{\"id\": 4294967296, \"components\": {}}, '):rep(30000) .. '{\"id\": 4294967297, \"components\": {}}]}'"),
                     "ok:");
    /* the load the limit stops is the last: no instruction runs after its pcall (a limit
     * each load reported without the statement stopping let the loop go on, every load
     * refused at its first ask, until the 2 million instructions were spent) */
    /* (the refusal to expect, read off a short save refused the same way: one load of the
     * megabyte can take longer than 300 ms under ASan on a busy machine) */
    ck_assert_str_eq(run(g, fd, "refused = select(2, pcall(world.load, world, '{\"kiln\": 1, \"tick\": 0, "
                                "\"components\": [], \"entities\": [{\"id\": 4294967296, \"components\": {}}, "
                                "{\"id\": 4294967296, \"components\": {}}]}')) return refused"),
                     "ok:\"world:load: entity 0v1 appears twice (or shares its slot)\"");
    const char *a = run(g, fd, "loads, late = 0, 0 while true do loads = loads + 1 local ok, e = "
                               "pcall(world.load, world, big) if not ok and e ~= refused then late = late + 1 end end");
    ck_assert_msg(strcmp(a, "error:console: the statement ran past its time limit (300 ms)") == 0 ||
                      strcmp(a, "error:console: the statement ran past its instruction budget") == 0,
                  "%s", a);
    a = run(g, fd, "return loads > 0, late");
    ck_assert_msg(strcmp(a, "ok:true\n0") == 0, "loads made, loads stopped by the limit that the loop saw: %s", a);
    /* pcall does not catch the spent budget for long, even around a load */
    a = run(g, fd, "while true do pcall(function() while true do pcall(world.load, world, 'KILNSAVE') end end) end");
    ck_assert_msg(strncmp(a, "error:console: the statement ran past its", 41) == 0, "%s", a);
    ck_assert_str_eq(run(g, fd, "return world:count()"), "ok:5");
    ck_assert_str_eq(world_state(g), before);
    close(fd);
    stop_game(g);
}
END_TEST

/* One world:load of tens of megabytes of JSON (seconds of reading) stops at the statement's
 * time limit inside the load, not after it: the load asks as it reads. */
START_TEST(one_long_load_stops_at_the_statements_time_limit) {
    /* (memory enough for the text's parse tree: the time limit is what this case meets) */
    game *g = start_game((kiln_console_desc){.statement_ms = 300, .statement_bytes = (int64_t)4 << 30});
    ck_assert_int_eq(luaL_dostring(g->L, "big = '{\"kiln\": 1, \"tick\": 0, \"components\": [], \"entities\": [' .. "
                                         "('{\"id\": 4294967296, \"components\": {}}, '):rep(1000000) .. "
                                         "'{\"id\": 4294967297, \"components\": {}}]}'"),
                     LUA_OK);
    int fd = sign_in(g);
    char before[128];
    snprintf(before, sizeof before, "%s", world_state(g));
    const char *a = run(g, fd, "world:load(big)");
    ck_assert_msg(strcmp(a, "error:console: the statement ran past its time limit (300 ms)") == 0, "%s", a);
    ck_assert_str_eq(world_state(g), before);
    /* the load stopped part way through the text (not after reading it all, then refusing):
     * the limit was seen by an ask inside the load */
    lua_getglobal(g->L, "world");
    const char *e = kiln_world_error(kiln_lua_check_world(g->L, -1));
    unsigned long long read = 0, size = 0;
    ck_assert_msg(sscanf(e, "kiln_load: stopped by the caller after %llu of %llu bytes", &read, &size) == 2, "%s", e);
    ck_assert_msg(read < size, "%s", e);
    lua_pop(g->L, 1);
    /* outside a statement the same load reads to its end, and refuses the repeated handle */
    ck_assert_int_eq(luaL_dostring(g->L, "local ok, e = pcall(world.load, world, big) return e"), LUA_OK);
    ck_assert_msg(strstr(lua_tostring(g->L, -1), "appears twice"), "%s", lua_tostring(g->L, -1));
    lua_pop(g->L, 1);
    ck_assert_str_eq(run(g, fd, "return world:count()"), "ok:5");
    close(fd);
    stop_game(g);
}
END_TEST

/* The tree jansson parses a JSON text into is made outside Lua's memory (about 80 bytes a
 * byte of text at worst): a console statement is charged it before a load, a scene or a prefab
 * reads anything, and a text (or a file) past what the statement may still grow memory by is
 * refused by name, the world as it was. A binary save, parsed in place, is not. */
START_TEST(a_json_load_whose_parse_would_pass_the_statements_memory_limit_is_refused) {
    game *g = start_game((kiln_console_desc){.statement_bytes = 8 << 20, .statement_ms = 20000});
    int fd = sign_in(g);
    char before[128];
    snprintf(before, sizeof before, "%s", world_state(g));
    ck_assert_str_eq(run(g, fd, "goodj, good = world:save{format = 'json'}, world:save()"), "ok:");
    /* white space after the document: 8 MiB / 80 is 104857 bytes of text */
    ck_assert_str_eq(run(g, fd, "pad = (' '):rep(110000)"), "ok:");
    const char *a = run(g, fd, "world:load(goodj .. pad)");
    ck_assert_msg(strncmp(a, "error:world:load: a JSON text of ", 33) == 0 &&
                      strstr(a, " bytes to read, past what the console statement may still grow memory by (") &&
                      strstr(a, " bytes, of its statement_bytes)"),
                  "%s", a);
    ck_assert_str_eq(world_state(g), before);
    char path[] = "/tmp/kiln-console-json-XXXXXX";
    int tmp = mkstemp(path);
    ck_assert_int_ge(tmp, 0);
    close(tmp);
    char line[256];
    snprintf(line, sizeof line, "local f = io.open('%s', 'wb') f:write(goodj, pad) f:close()", path);
    ck_assert_str_eq(run(g, fd, line), "ok:");
    snprintf(line, sizeof line, "world:load('%s')", path);
    a = run(g, fd, line);
    ck_assert_msg(strncmp(a, "error:world:load: a JSON text of ", 33) == 0, "%s", a);
    ck_assert_str_eq(world_state(g), before);
    /* a scene's and a prefab's JSON, text or file, alike */
    snprintf(line, sizeof line, "local f = io.open('%s', 'wb') f:write('{\"version\": 1, \"entities\": []}', pad) "
             "f:close()", path);
    ck_assert_str_eq(run(g, fd, line), "ok:");
    const char *more[] = {"world:instantiate('{\"version\": 1, \"entities\": [{}]}' .. pad)",
                          "world:prefab('{\"components\": {}}' .. pad)", NULL, NULL};
    char by_path[2][256];
    snprintf(by_path[0], sizeof by_path[0], "world:instantiate('%s')", path);
    snprintf(by_path[1], sizeof by_path[1], "world:prefab('%s')", path);
    more[2] = by_path[0], more[3] = by_path[1];
    for (int i = 0; i < 4; i++) {
        a = run(g, fd, more[i]);
        const char *want = i % 2 ? "error:world:prefab: a JSON text of " : "error:world:instantiate: a JSON text of ";
        ck_assert_msg(strncmp(a, want, strlen(want)) == 0, "%s: %s", more[i], a);
        ck_assert_str_eq(world_state(g), before);
    }
    unlink(path);
    ck_assert_str_eq(run(g, fd, "return #world:instantiate('{\"version\": 1, \"entities\": [{}]}').roots"),
                     "ok:1");
    ck_assert_str_eq(run(g, fd, "world:despawn(world:entities()[6]) return world:count()"), "ok:5");
    /* a text that fits loads (its 5 entities beside the world's), as does a binary save */
    ck_assert_str_eq(run(g, fd, "world:load(goodj .. (' '):rep(1000)) return world:count()"), "ok:10");
    ck_assert_str_eq(run(g, fd, "world:load(good) return world:count()"), "ok:15");
    /* outside a statement nothing is charged */
    ck_assert_int_eq(luaL_dostring(g->L, "world:load(goodj .. pad) return world:count()"), LUA_OK);
    ck_assert_int_eq(lua_tointeger(g->L, -1), 20);
    lua_pop(g->L, 1);
    close(fd);
    stop_game(g);
}
END_TEST

/* A statement is charged a file's size before the read; a file that grows in between (another
 * process appending to it) was read whole, past what was charged (up to the statement's memory
 * limit times the growth). The read now stops at the charged size: refused, the world as it was.
 * The file here grows by white space, which loads without complaint when not refused. */
START_TEST(a_file_that_grows_between_the_charge_and_the_read_is_refused) {
    game *g = start_game((kiln_console_desc){.statement_bytes = 64 << 20, .statement_ms = 20000});
    int fd = sign_in(g);
    char before[128];
    snprintf(before, sizeof before, "%s", world_state(g));
    char path[] = "/tmp/kiln-console-grow-XXXXXX";
    int tmp = mkstemp(path);
    ck_assert_int_ge(tmp, 0);
    close(tmp);
    const char *writes[] = {"world:save{format = 'json'}", "world:save()",
                            "'{\"version\": 1, \"entities\": [{}]}'", "'{\"components\": {}}'"};
    const char *calls[] = {"world:load", "world:load", "world:instantiate", "world:prefab"};
    const char *nouns[] = {"save", "save", "file", "file"};
    for (int i = 0; i < 4; i++) {
        char line[512];
        snprintf(line, sizeof line, "local s = %s local f = io.open('%s', 'wb') f:write(s) f:close() return #s",
                 writes[i], path);
        const char *a = run(g, fd, line);
        ck_assert_msg(strncmp(a, "ok:", 3) == 0, "%s", a);
        long long size = atoll(a + 3);
        grow_at_next_fstat(path, 4096);
        snprintf(line, sizeof line, "%s('%s')", calls[i], path);
        a = run(g, fd, line);
        ck_assert_int_eq(grow.grown, i + 1);
        char want[512];
        snprintf(want, sizeof want, "error:%s: the %s at %s is larger than %lld bytes (%lld bytes)", calls[i],
                 nouns[i], path, size, size + 4096);
        ck_assert_msg(strncmp(a, want, strlen(want)) == 0 && strchr("\n", a[strlen(want)]), "%s", a);
        ck_assert_str_eq(world_state(g), before);
    }
    unlink(path);
    close(fd);
    stop_game(g);
}
END_TEST

/* Makes the file path (from a mkstemp template) and names next beside it ("path.next"). */
static void swap_paths(char *path, char *next, size_t next_size) {
    int tmp = mkstemp(path);
    ck_assert_int_ge(tmp, 0);
    close(tmp);
    snprintf(next, next_size, "%s.next", path);
}

/* One statement: after prelude, writes the value of Lua expression first to path and of then
 * to next; sizes gets their lengths. */
static void write_two(game *g, int fd, const char *prelude, const char *first, const char *then, const char *path,
                      const char *next, long long sizes[2]) {
    char line[1024];
    snprintf(line, sizeof line, "%s local a, b = %s, %s for p, s in pairs{['%s'] = a, ['%s'] = b} do "
             "local f = io.open(p, 'wb') f:write(s) f:close() end return #a, #b", prelude, first, then, path, next);
    const char *a = run(g, fd, line);
    ck_assert_msg(sscanf(a, "ok:%lld\n%lld", &sizes[0], &sizes[1]) == 2, "%s", a);
}

/* A file charged in one format and replaced by another save (renamed over it) before the read:
 * a binary save by a larger JSON one, a JSON one by a larger binary one, a prefab or a scene by
 * a larger binary save. The read never passes the charged size, whatever the format: refused,
 * naming the file and both sizes, the world as it was. */
START_TEST(a_file_swapped_for_another_format_between_the_charge_and_the_read_is_refused) {
    game *g = start_game((kiln_console_desc){.statement_bytes = 64 << 20, .statement_ms = 20000});
    int fd = sign_in(g);
    char before[128];
    snprintf(before, sizeof before, "%s", world_state(g));
    char path[] = "/tmp/kiln-console-swap-XXXXXX", next[64];
    swap_paths(path, next, sizeof next);
    static const struct {
        const char *first, *then, *call, *noun;
    } cases[] = {
        {"world:save()", "world:save{format = 'json'} .. (' '):rep(4096)", "world:load", "save"},
        {"'{}'", "world:save()", "world:load", "save"},
        {"'{\"version\": 1, \"entities\": [{}]}'", "world:save()", "world:instantiate", "file"},
        {"'{\"components\": {}}'", "world:save()", "world:prefab", "file"},
    };
    for (int i = 0; i < 4; i++) {
        long long sizes[2];
        write_two(g, fd, "", cases[i].first, cases[i].then, path, next, sizes);
        long long size = sizes[0], bigger = sizes[1];
        ck_assert_int_gt(bigger, size);
        swap_at_next_fstat(path, next);
        char line[512];
        snprintf(line, sizeof line, "%s('%s')", cases[i].call, path);
        const char *a = run(g, fd, line);
        ck_assert_int_eq(grow.grown, i + 1);
        ck_assert_int_eq(access(next, F_OK), -1); /* (the swap was made) */
        char want[512];
        snprintf(want, sizeof want, "error:%s: the %s at %s is larger than %lld bytes (%lld bytes)", cases[i].call,
                 cases[i].noun, path, size, bigger);
        ck_assert_msg(strncmp(a, want, strlen(want)) == 0 && strchr("\n", a[strlen(want)]), "%s", a);
        ck_assert_str_eq(world_state(g), before);
    }
    grow.grown = 0;
    unlink(path);
    close(fd);
    stop_game(g);
}
END_TEST

/* A binary save is charged its size, a JSON one 81 times its size (its parse tree): a binary
 * save swapped for a JSON one no larger after the charge passed the size check, and its parse
 * (10 MB of tree for 120 KB of `{}`s) ran uncharged past the statement's 2 MiB. Refused now as
 * the JSON text would have been, the world as it was. */
START_TEST(a_binary_save_swapped_for_a_json_one_no_larger_is_charged_as_json) {
    game *g = start_game((kiln_console_desc){.statement_bytes = 2 << 20, .statement_ms = 20000});
    int fd = sign_in(g);
    char before[128];
    snprintf(before, sizeof before, "%s", world_state(g));
    char path[] = "/tmp/kiln-console-json-XXXXXX", next[64], line[512];
    swap_paths(path, next, sizeof next);
    long long sizes[2];
    write_two(g, fd, "local w = kiln.world() w:component('B', 'float b[4000];') "
              "for i = 1, 8 do w:spawn{B = {}} end local saved = w:save() w:close()",
              "saved", "'{\"version\": 1, \"entities\": [' .. ('{},'):rep(40000) .. '{}]}'", path, next, sizes);
    long long json = sizes[1];
    ck_assert_int_le(json, sizes[0]);
    swap_at_next_fstat(path, next);
    snprintf(line, sizeof line, "world:load('%s')", path);
    const char *a = run(g, fd, line);
    ck_assert_int_eq(grow.grown, 1);
    char want[512];
    snprintf(want, sizeof want, "error:world:load: the JSON save is larger than ");
    ck_assert_msg(strncmp(a, want, strlen(want)) == 0, "%s", a);
    snprintf(want, sizeof want, "bytes (%lld bytes)", json);
    ck_assert_msg(strstr(a, want), "%s", a);
    ck_assert_str_eq(world_state(g), before);
    unlink(path);
    close(fd);
    stop_game(g);
}
END_TEST

/* A table-made prefab's spawn is Lua code: a budget spent inside it raises at every
 * instruction, and what the call spawned is still taken back (in C), so that a statement
 * stopped part way through leaves no part of a tree behind. */
START_TEST(a_prefab_spawn_stopped_by_the_budget_leaves_no_part_of_a_tree) {
    /* (the budget is the subject: the stopped spawn of a million trees took over 5 s under ASan
     * on a loaded machine, so the time limit only bounds a runaway) */
    game *g = start_game((kiln_console_desc){.budget = 2000000, .statement_ms = 60000});
    int fd = sign_in(g);
    char before[128];
    snprintf(before, sizeof before, "%s", world_state(g));
    ck_assert_str_eq(run(g, fd, "p = world:prefab{components = {Position = {x = 1}}, children = {"
                                "{components = {Position = {y = 2}}, children = {{components = {Link = {to = 1}}}}}}}"),
                     "ok:");
    const char *a = run(g, fd, "p:spawn(1000000)");
    ck_assert_str_eq(a, "error:console: the statement ran past its instruction budget");
    ck_assert_str_eq(world_state(g), before);
    /* whole calls before the one stopped stay, whole: 5 + 3 per tree */
    a = run(g, fd, "while true do p:spawn() end");
    ck_assert_str_eq(a, "error:console: the statement ran past its instruction budget");
    ck_assert_str_eq(run(g, fd, "return world:count() % 3, world:count() > 5"), "ok:2\ntrue");
    ck_assert_str_eq(run(g, fd, "local n = 0 for _, e in ipairs(world:entities()) do "
                                "if world:has(e, 'Link') and not world:has(e, 'Parent') then n = n + 1 end end return n"),
                     "ok:4"); /* the game's own four links have no parent; every tree's has one */
    close(fd);
    stop_game(g);
}
END_TEST

/* :load of a save is one call: once the load has landed, no Lua code of the session runs (its
 * count of the entities loaded, Lua code before, spent the budget and answered an error for
 * a load that stayed). */
START_TEST(a_load_command_answers_ok_for_a_load_that_landed) {
    game *g = start_game((kiln_console_desc){.budget = 200000, .statement_ms = 20000});
    char path[] = "/tmp/kiln_console_loadXXXXXX";
    int tmp = mkstemp(path);
    ck_assert_int_ge(tmp, 0);
    close(tmp);
    lua_pushstring(g->L, path);
    lua_setglobal(g->L, "save_path");
    ck_assert_int_eq(luaL_dostring(g->L, "local w = kiln.world() w:component('Position', 'float x, y;') "
                                         "for i = 1, 100000 do w:spawn{Position = {x = i}} end "
                                         "w:save(save_path) w:close()"),
                     LUA_OK);
    int fd = sign_in(g);
    char line[128], want[160];
    snprintf(line, sizeof line, ":load %s", path);
    snprintf(want, sizeof want, "ok:loaded 100000 entities from %s", path);
    ck_assert_str_eq(run(g, fd, line), want);
    ck_assert_str_eq(run(g, fd, "return world:count()"), "ok:100005");
    unlink(path);
    close(fd);
    stop_game(g);
}
END_TEST

/* A statement that ran to its end is answered "ok", also when showing its values spends what
 * is left of the budget: "ran past its budget" read as a spawn that did not happen, and the
 * user spawned again. */
START_TEST(a_statement_that_ran_is_answered_ok_when_showing_its_values_is_stopped) {
    game *g = start_game((kiln_console_desc){.budget = 1000000, .statement_ms = 20000});
    int fd = sign_in(g);
    /* a JSON prefab spawns in C: a few instructions under Lua 5.4 and LuaJIT alike */
    ck_assert_str_eq(run(g, fd, "p = world:prefab('{\"components\": {\"Position\": {\"x\": 1}}}')"), "ok:");
    /* what spends the budget is showing a value: an __index that never returns, read for the
     * hole in a sequence (the 10000 entities show their first 30, in a few instructions) */
    const char *a = run(g, fd, "return p:spawn(10000), "
                               "setmetatable({1, nil, 3}, {__index = function() while true do end end})");
    ck_assert_msg(strncmp(a, "ok:", 3) == 0, "%.300s", a);
    ck_assert_msg(strstr(a, "(the statement ran; its values were not shown: console: the statement ran past its "
                            "instruction budget)"),
                  "%.300s", a);
    ck_assert_str_eq(run(g, fd, "return world:count()"), "ok:10005");
    close(fd);
    stop_game(g);
}
END_TEST

/* The world's last error, as the game sees it (static). */
static const char *world_error(game *g) {
    static char text[256];
    lua_getglobal(g->L, "world");
    snprintf(text, sizeof text, "%s", kiln_world_error(kiln_lua_check_world(g->L, -1)));
    lua_pop(g->L, 1);
    return text;
}

/* A game holding a prefab of 200,000 nodes (pf) and one copy of it (root: its root), made
 * outside any statement. */
static game *start_big_game(int statement_ms) {
    /* (memory enough for the 8 MB prefab text's parse tree: the time limit is what it meets) */
    game *g = start_game((kiln_console_desc){.statement_ms = statement_ms, .statement_bytes = (int64_t)4 << 30});
    ck_assert_int_eq(luaL_dostring(g->L, "local parts = {}\n"
                                         "for i = 1, 199999 do parts[i] = '{\"components\": {\"Position\": {\"y\": 2}}}' end\n"
                                         "pf_text = '{\"components\": {\"Position\": {\"x\": 1}}, \"children\": [' .. "
                                         "table.concat(parts, ', ') .. ']}'\n"
                                         "pf = world:prefab(pf_text)\n"
                                         "one = '{\"version\": 1, \"entities\": [{\"prefab\": \"big\"}]}'\n"
                                         "root = world:instantiate(one, {prefabs = {big = pf}}).roots[1]\n"),
                     LUA_OK);
    return g;
}

static bool stopped(const char *answer) {
    return strncmp(answer, "error:console: the statement ran past its time limit", 52) == 0;
}

/* One C call of a scene method (or a JSON prefab's spawn) stops at the statement's time limit
 * inside the call, the world as it was; a scene whose spawns end past the limit is taken back rather than kept without
 * its Instance (the raise at the next instruction lost it). A 10 ms limit: each call here
 * takes tens of milliseconds or more (no assertion on time). */
START_TEST(long_scene_calls_stop_at_the_statements_time_limit_with_the_world_as_it_was) {
    game *g = start_big_game(10);
    int fd = sign_in(g);
    char before[128];
    snprintf(before, sizeof before, "%s", world_state(g));
    /* a scene read in microseconds whose 200,000 spawns take tens of milliseconds */
    const char *a = run(g, fd, "inst = world:instantiate(one, {prefabs = {big = pf}})");
    ck_assert_msg(stopped(a), "%s", a);
    ck_assert_str_eq(world_state(g), before);
    /* (what is looked at or made between the long calls is done by the game, outside any
     * statement: a statement of one line ran past the 10 ms under ASan on a loaded machine) */
    ck_assert_str_eq(game_eval(g->L, "inst"), "nil");
    /* a prefab's JSON (8 MB), stopped while read */
    a = run(g, fd, "p2 = world:prefab(pf_text)");
    ck_assert_msg(stopped(a), "%s", a);
    ck_assert_msg(strstr(world_error(g), "kiln_prefab_load: stopped by the caller after"), "%s", world_error(g));
    /* a tree of 200,000 copied */
    a = run(g, fd, "c = world:clone(root, {tree = true})");
    ck_assert_msg(stopped(a), "%s", a);
    ck_assert_msg(strstr(world_error(g), "kiln_clone: stopped by the caller after"), "%s", world_error(g));
    ck_assert_str_eq(world_state(g), before);
    /* a JSON prefab's spawns: one copy of 200,000 nodes (taken back at the ask after it), and
     * a million copies of two (stopped between copies) */
    a = run(g, fd, "r = pf:spawn(1)");
    ck_assert_msg(stopped(a), "%s", a);
    ck_assert_msg(strstr(world_error(g), "kiln_prefab_spawn: stopped by the caller after"), "%s", world_error(g));
    ck_assert_str_eq(world_state(g), before);
    ck_assert_int_eq(luaL_dostring(g->L, "p = world:prefab('{\"components\": {\"Position\": {\"x\": 1}}, "
                                         "\"children\": [{\"components\": {\"Position\": {\"y\": 2}}}]}')"),
                     LUA_OK);
    a = run(g, fd, "r = p:spawn(1000000)");
    ck_assert_msg(stopped(a), "%s", a);
    ck_assert_msg(strstr(world_error(g), "kiln_prefab_spawn: stopped by the caller after"), "%s", world_error(g));
    ck_assert_str_eq(world_state(g), before);
    ck_assert_str_eq(game_eval(g->L, "r"), "nil");
    /* an export of the 200,005 entities */
    a = run(g, fd, "x = world:export()");
    ck_assert_msg(stopped(a), "%s", a);
    ck_assert_str_eq(world_error(g), "kiln_export: stopped by desc.progress");
    ck_assert_str_eq(world_state(g), before);
    close(fd);
    stop_game(g);
}
END_TEST

/* loadfile and dofile read and parse a file in one C call (no hook runs in it): in a statement
 * a file is charged as load charges its text, and one too long, not regular or standard input
 * is refused. */
START_TEST(loadfile_and_dofile_in_a_statement_are_charged_and_bounded) {
    game *g = start_game((kiln_console_desc){.budget = 1000000, .statement_ms = 20000});
    int fd = sign_in(g);
    char small[] = "/tmp/kiln_console_lf_XXXXXX", big[] = "/tmp/kiln_console_lf_XXXXXX";
    int f1 = mkstemp(small), f2 = mkstemp(big);
    ck_assert(f1 >= 0 && f2 >= 0);
    FILE *s = fdopen(f1, "w"), *b = fdopen(f2, "w");
    fputs("return 40 + 2\n", s);
    fclose(s);
    /* 300 KB of an and-chain: its parse is quadratic (charged as load's: past the budget) */
    fputs("return x", b);
    for (int i = 0; i < 50000; i++) fputs(" and x", b);
    fputs("\n", b);
    fclose(b);
    char line[256];
    snprintf(line, sizeof line, "return loadfile('%s')(), dofile('%s')", small, small);
    ck_assert_str_eq(run(g, fd, line), "ok:42\n42");
    snprintf(line, sizeof line, "return loadfile('%s')", big);
    const char *a = run(g, fd, line);
    ck_assert_msg(strstr(a, "console: _G.loadfile could take") && strstr(a, "past what is left of the statement's "
                                                                         "instruction budget"),
                  "%s", a);
    snprintf(line, sizeof line, "return dofile('%s')", big);
    a = run(g, fd, line);
    ck_assert_msg(strstr(a, "console: _G.dofile could take"), "%s", a);
    a = run(g, fd, "return loadfile('/dev/zero')");
    ck_assert_msg(strstr(a, "console: loadfile of /dev/zero refused: not a regular file"), "%s", a);
    a = run(g, fd, "return dofile()");
    ck_assert_msg(strstr(a, "console: dofile of standard input is not available"), "%s", a);
    /* past a MiB: refused before it is read */
    b = fopen(big, "w");
    for (int i = 0; i < 40000; i++) fputs("local a = 1 -- a line of text to fill the file\n", b);
    fclose(b);
    snprintf(line, sizeof line, "return loadfile('%s')", big);
    a = run(g, fd, line);
    ck_assert_msg(strstr(a, "refused: longer than 1024 KiB"), "%s", a);
    unlink(small);
    unlink(big);
    close(fd);
    stop_game(g);
}
END_TEST

/* A statement's world:progress stopped by the statement's own limits is the statement's stop,
 * not the game system's failure: with max_failures 1 it disabled the game's system, and the
 * failure was recorded nowhere. The run's queued changes are dropped, as a failed run's. */
START_TEST(a_progress_stopped_by_the_statements_budget_is_no_failure_of_the_games_system) {
    game *g = start_game((kiln_console_desc){.budget = 1000000, .statement_ms = 20000});
    ck_assert_int_eq(luaL_dostring(g->L, "world:max_failures(1)\n"
                                         "spin = false\n"
                                         "world:system{name = 'mover', run = function(w) w:spawn{} while spin do end end}\n"),
                     LUA_OK);
    int fd = sign_in(g);
    ck_assert_str_eq(run(g, fd, "spin = true return world:count()"), "ok:5");
    const char *a = run(g, fd, "world:progress(0)");
    ck_assert_str_eq(a, "error:console: the statement ran past its instruction budget");
    a = run(g, fd, "return world:systems()[1].enabled, #world:failures(), world:count()");
    ck_assert_str_eq(a, "ok:true\n0\n5");
    /* the game's own frames still run it, and its own failure still counts */
    ck_assert_int_eq(luaL_dostring(g->L, "spin = false world:progress(0) return world:count()"), LUA_OK);
    ck_assert_int_eq(lua_tointeger(g->L, -1), 6);
    lua_pop(g->L, 1);
    close(fd);
    stop_game(g);
}
END_TEST

/* A file whose size fstat reports as 0 but that reads on (a pipe, a FIFO, a /proc file such as
 * pagemap, hundreds of GiB long): the console charges a read for the file's size, so each
 * reader must read no more than that. world:load, world:prefab, world:instantiate and
 * loadfile refuse each by name, reading nothing from the pipe, the statement's limits never
 * reached and the world as it was. */
START_TEST(a_statement_reading_a_pipe_a_fifo_or_a_proc_file_is_refused_having_read_nothing) {
    game *g = start_game((kiln_console_desc){.statement_bytes = 1 << 20, .statement_ms = 20000});
    int fd = sign_in(g);
    char before[128];
    snprintf(before, sizeof before, "%s", world_state(g));
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    ck_assert_int_eq(write(pipefd[1], "{\"version\"", 10), 10);
    char dir[] = "/tmp/kiln-console-fifo-XXXXXX", fifo[64], piped[32];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    snprintf(piped, sizeof piped, "/proc/self/fd/%d", pipefd[0]);
    const char *paths[] = {piped, fifo, "/proc/self/pagemap", "/proc/self/maps"};
    const char *calls[] = {"world:load", "world:prefab", "world:instantiate"};
    for (int p = 0; p < 4; p++) {
        bool regular = p >= 2;
        for (int c = 0; c < 3; c++) {
            char line[256], want[256];
            snprintf(line, sizeof line, "%s('%s')", calls[c], paths[p]);
            const char *a = run(g, fd, line);
            snprintf(want, sizeof want, "error:%s: %s %s\n", calls[c], paths[p],
                     regular ? "reads on past its size (0 bytes): it is not a file of fixed size"
                             : "is not a regular file");
            ck_assert_msg(strncmp(a, want, strlen(want)) == 0, "%s: %s", line, a);
            ck_assert_str_eq(world_state(g), before);
        }
        char line[256], want[256];
        snprintf(line, sizeof line, "return loadfile('%s')", paths[p]);
        snprintf(want, sizeof want, "console: loadfile of %s refused: %s", paths[p],
                 regular ? "it grows while read" : "not a regular file (it might never end)");
        const char *a = run(g, fd, line);
        ck_assert_msg(strstr(a, want), "%s: %s", line, a);
    }
    char left[16];
    ck_assert_int_eq(read(pipefd[0], left, sizeof left), 10); /* the pipe's bytes, all still there */
    ck_assert_str_eq(run(g, fd, "return world:count()"), "ok:5");
    close(pipefd[0]);
    close(pipefd[1]);
    ck_assert_int_eq(unlink(fifo), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    close(fd);
    stop_game(g);
}
END_TEST

static Suite *console_persist_suite(void) {
    Suite *s = suite_create("console_persist");
    TCase *tc = tcase_create("core");
    /* (a bound on legitimate work: the long load's read to its end outside a statement is 8 s
     * of CPU under ASan, and a loaded machine stretched that case past 120 s of the wall) */
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, crafted_saves_through_the_console_are_refused_and_the_world_stays_as_it_was);
    tcase_add_test(tc, a_statement_loading_crafted_saves_in_a_loop_still_stops_at_its_limits);
    tcase_add_test(tc, one_long_load_stops_at_the_statements_time_limit);
    tcase_add_test(tc, a_json_load_whose_parse_would_pass_the_statements_memory_limit_is_refused);
    tcase_add_test(tc, a_prefab_spawn_stopped_by_the_budget_leaves_no_part_of_a_tree);
    tcase_add_test(tc, a_file_that_grows_between_the_charge_and_the_read_is_refused);
    tcase_add_test(tc, a_file_swapped_for_another_format_between_the_charge_and_the_read_is_refused);
    tcase_add_test(tc, a_binary_save_swapped_for_a_json_one_no_larger_is_charged_as_json);
    tcase_add_test(tc, a_load_command_answers_ok_for_a_load_that_landed);
    tcase_add_test(tc, a_statement_that_ran_is_answered_ok_when_showing_its_values_is_stopped);
    tcase_add_test(tc, long_scene_calls_stop_at_the_statements_time_limit_with_the_world_as_it_was);
    tcase_add_test(tc, loadfile_and_dofile_in_a_statement_are_charged_and_bounded);
    tcase_add_test(tc, a_progress_stopped_by_the_statements_budget_is_no_failure_of_the_games_system);
    tcase_add_test(tc, a_statement_reading_a_pipe_a_fifo_or_a_proc_file_is_refused_having_read_nothing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(console_persist_suite()); }
