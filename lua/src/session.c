/* session.c: the C half of a REPL session (lua/kiln/repl.lua): the ends of session:feed and
 * of the commands that change something, made here as the method's tail call so that no Lua
 * code of the session runs after the change. Invariant: a stop that raises at every
 * instruction (a spent budget, a console statement's time limit) or once (Ctrl-C) neither
 * leaves the print capture in place nor answers an error for a call that was made. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "klua.h"

/* An answer made after its change landed must not fail for memory: its fixed parts (the
 * status, a short text) are pushed before the change, with room on the stack, and the long
 * text is made protected, the short one answering when that finds no memory. */
enum { ANSWER_ROOM = 12 }; /* stack slots an answer uses after its change */

/* Pushes the status and the short text (both allocated now, before the change): their
 * indices at *status_idx and *short_idx. */
static void prepare_answer(lua_State *L, const char *status, const char *short_text, int *status_idx,
                           int *short_idx) {
    luaL_checkstack(L, ANSWER_ROOM, NULL);
    lua_pushstring(L, status);
    *status_idx = lua_gettop(L);
    lua_pushstring(L, short_text);
    *short_idx = lua_gettop(L);
}

/* klua_pcall_c of fn, which runs no Lua code, with the state's hook off: a console statement's
 * spent budget (its hook fires at calls too) would stop the answer of a call that was made. */
static int pcall_text(lua_State *L, lua_CFunction fn, int nargs, int nresults) {
    lua_Hook hook = lua_gethook(L);
    int mask = lua_gethookmask(L), count = lua_gethookcount(L);
    lua_sethook(L, NULL, 0, 0);
    int status = klua_pcall_c(L, fn, nargs, nresults, 0);
    lua_sethook(L, hook, mask, count);
    return status;
}

/* The C string at the light userdata 1 as a Lua string (allocates: run protected). */
static int push_text(lua_State *L) {
    lua_pushstring(L, lua_touserdata(L, 1));
    return 1;
}

/* Answers the status at status_idx and text, or the short text at short_idx when there is no
 * memory for text (a C string, or NULL: text is on top, made by the caller's protected call
 * whose result was ok). Allocates nothing. */
static int landed_answer(lua_State *L, int status_idx, int short_idx, const char *text, bool made) {
    if (text) {
        lua_pushlightuserdata(L, (void *)text);
        made = pcall_text(L, push_text, 1, 1) == LUA_OK;
    }
    if (!made) {
        lua_pop(L, 1); /* the error (the memory error's message: no allocation) */
        lua_pushvalue(L, short_idx);
    }
    lua_pushvalue(L, status_idx);
    lua_insert(L, -2);
    return 2;
}

/* layer.ran(fn, box, ...) -> fn(...): sets box[1] true once fn has returned, before any Lua
 * instruction runs after it (box[1] exists: nothing allocated), unless a budget was spent by
 * then (a console statement's, also inside a coroutine it resumed, or a mod's): that
 * statement was stopped, though its last call returned. What layer.run_answer reads to tell
 * a statement stopped from one that ran. */
static int layer_ran(lua_State *L) {
    luaL_checktype(L, 2, LUA_TTABLE);
    int top = lua_gettop(L);
    lua_pushvalue(L, 1);
    for (int i = 3; i <= top; i++) lua_pushvalue(L, i);
    lua_call(L, top - 2, LUA_MULTRET);
    if (!klua_console_overdue(L) && klua_budget_left(L) != 0 && lua_checkstack(L, 1)) {
        lua_pushboolean(L, 1);
        lua_rawseti(L, 2, 1);
    }
    return lua_gettop(L) - top;
}

/* The text of a statement whose values or error could not be shown: 1 what it printed (a
 * list of strings, out.cut the bytes past the answer's limit), 2 why, 3 whether it ran. The
 * kept lines and the count end as answer_text (lua/kiln/repl.lua) ends them. Allocates: run
 * protected. */
static int unshown_text(lua_State *L) {
    bool ran = lua_toboolean(L, 3);
    const char *why = lua_tostring(L, 2) ? lua_tostring(L, 2) : "not a string";
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 1, i) != LUA_TSTRING) {
            lua_pop(L, 1);
            continue;
        }
        luaL_addvalue(&b);
        luaL_addchar(&b, '\n');
    }
    lua_pushliteral(L, "cut");
    lua_rawget(L, 1);
    lua_Integer cut = lua_tointeger(L, -1); /* 0 when absent or not an integer */
    lua_pop(L, 1);
    if (cut > 0) {
        char note[64];
        snprintf(note, sizeof note, "... (%lld bytes not shown)\n", (long long)cut);
        luaL_addstring(&b, note);
    }
    luaL_addstring(&b, ran ? "(the statement ran; its values were not shown: "
                           : "(the statement raised; its error was not shown: ");
    luaL_addstring(&b, why);
    luaL_addchar(&b, ')');
    luaL_pushresult(&b);
    return 1;
}

/* layer.run_answer(env, printer, run, describe, session, out, box, fn, ...) -> status, text:
 * a session's statement (lua/kiln/repl.lua), as the tail call that ends session:feed. With
 * env.print (read and set raw) the printer, runs run(fn, box, ...) (xpcall's results, packed,
 * fn called through layer.ran); env.print is its own value again however run ends. Then the
 * answer: describe(session, results, out) -> status, text, run protected. Both were Lua
 * code: a stop between the lines (Ctrl-C in the kiln command raises once wherever it lands,
 * a spent budget at every instruction) left the capture in place for good, and a stop after
 * the statement ended (its values shown by kiln.pretty, or just the return to the session)
 * answered "the statement ran past its budget" for a statement whose changes stayed. A stop
 * before fn ended goes on as an error; after, the answer is made here: what the statement
 * printed (out, a list of strings), and that its values or its error were not shown, and why. */
static int layer_run_answer(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    luaL_checktype(L, 6, LUA_TTABLE);
    luaL_checktype(L, 7, LUA_TTABLE);
    int top = lua_gettop(L), ok_idx, ran_idx, error_idx, raised_idx;
    prepare_answer(L, "ok", "(the statement ran; its values were not shown: not enough memory)", &ok_idx, &ran_idx);
    prepare_answer(L, "error", "(the statement raised; its error was not shown: not enough memory)", &error_idx,
                   &raised_idx);
    lua_pushliteral(L, "print");
    lua_rawget(L, 1); /* the environment's own print */
    int print_idx = lua_gettop(L);
    lua_pushliteral(L, "print");
    lua_pushvalue(L, 2);
    lua_rawset(L, 1); /* a memory error here leaves env as it was */
    lua_pushvalue(L, 3);
    lua_pushvalue(L, 8);
    lua_pushvalue(L, 7);
    for (int i = 9; i <= top; i++) lua_pushvalue(L, i);
    int status = lua_pcall(L, top - 6, 1, 0);
    lua_pushliteral(L, "print");
    lua_pushvalue(L, print_idx);
    lua_rawset(L, 1); /* the key is there: no allocation */
    int results = lua_gettop(L);
    bool ran;
    if (status == LUA_OK) {
        lua_pushvalue(L, 4);
        lua_pushvalue(L, 5);
        lua_pushvalue(L, results);
        lua_pushvalue(L, 6);
        if (lua_pcall(L, 3, 2, 0) == LUA_OK && lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TSTRING)
            return 2;
        lua_settop(L, results + 1); /* describe's error */
        ran = false;
        if (lua_istable(L, results)) {
            lua_rawgeti(L, results, 1);
            ran = lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
    } else {
        lua_rawgeti(L, 7, 1);
        bool ended = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (!ended) return lua_error(L); /* stopped inside the statement */
        ran = true;
    }
    lua_pushvalue(L, 6);
    lua_insert(L, -2);
    lua_pushboolean(L, ran);
    bool made = pcall_text(L, unshown_text, 3, 1) == LUA_OK;
    return landed_answer(L, ran ? ok_idx : error_idx, ran ? ran_idx : raised_idx, NULL, made);
}

/* The answer of a session command whose call failed: "error" and its message. */
static int error_answer(lua_State *L) {
    const char *msg = lua_tostring(L, -1);
    lua_pushliteral(L, "error");
    if (msg) lua_pushstring(L, msg);
    else lua_pushfstring(L, "error (a %s)", luaL_typename(L, -2));
    return 2;
}

/* layer.answer(text, fn, ...) -> "ok", text when fn(...) ran, else "error", its message. The
 * end of a session command that changes something (lua/kiln/repl.lua), as its tail call: no
 * Lua code runs after fn, so a stop that raises at every instruction (a spent budget, a
 * console statement's time limit) cannot report a failure for a call that was made. */
static int layer_answer(lua_State *L) {
    luaL_checkstring(L, 1);
    int args = lua_gettop(L) - 2;
    luaL_checkstack(L, ANSWER_ROOM, NULL);
    lua_pushliteral(L, "ok"); /* before the call: nothing allocates after it */
    lua_insert(L, 2);
    if (lua_pcall(L, args, 2, 0) != LUA_OK) return error_answer(L);
    if (!lua_toboolean(L, -2) && lua_type(L, -1) == LUA_TSTRING) return error_answer(L); /* nil, why */
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 1);
    return 2;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The answer of a reload made: 1 the name asked for, 2 the info it returned, 3 the table of
 * dependents whose reload failed (or nil). Allocates: run protected. */
static int reload_text(lua_State *L) {
    const char *name = lua_tostring(L, 1);
    int info = 2, failed = 3;
    const char *who = NULL;
    if (lua_istable(L, info)) {
        lua_getfield(L, info, "name");
        if (lua_type(L, -1) == LUA_TSTRING) who = lua_tostring(L, -1); /* info's own table keeps it */
        lua_pop(L, 1);
    }
    if (who) {
        lua_getfield(L, info, "systems");
        int systems = lua_istable(L, -1) ? (int)lua_rawlen(L, -1) : 0;
        lua_pop(L, 1);
        lua_pushfstring(L, "reloaded %s (%d systems)", who, systems);
    } else {
        lua_pushfstring(L, "reloaded %s", name);
    }
    if (!lua_istable(L, failed)) {
        lua_pushliteral(L, "ok");
        lua_insert(L, -2);
        return 2;
    }
    /* the dependents whose reload failed run on in their old versions: an error, naming each */
    int text = lua_gettop(L);
    size_t n = 0;
    for (lua_pushnil(L); lua_next(L, failed); lua_pop(L, 1)) n += lua_type(L, -2) == LUA_TSTRING;
    const char **deps = lua_newuserdatauv(L, (n ? n : 1) * sizeof *deps, 0);
    size_t k = 0;
    for (lua_pushnil(L); lua_next(L, failed); lua_pop(L, 1))
        if (lua_type(L, -2) == LUA_TSTRING && k < n) deps[k++] = lua_tostring(L, -2); /* the table keeps it */
    qsort(deps, k, sizeof *deps, compare_names);
    for (size_t i = 0; i < k; i++) {
        lua_getfield(L, failed, deps[i]);
        size_t len = 0;
        const char *why = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
        lua_pushvalue(L, text);
        lua_pushfstring(L, "; its dependent %s failed to reload: ", deps[i]);
        if (why) lua_pushlstring(L, why, len > 300 ? 300 : len);
        else lua_pushstring(L, luaL_typename(L, -3));
        lua_pushstring(L, len > 300 ? "..." : "");
        lua_concat(L, 4);
        lua_replace(L, text);
        lua_pop(L, 1);
    }
    lua_settop(L, text);
    lua_pushliteral(L, "error");
    lua_insert(L, -2);
    return 2;
}

/* layer.reload_answer(reload, mods, name): as layer.answer for mods:reload(name) (reload),
 * the answer made here: "ok", "reloaded NAME (N systems)", or "error" and why, naming each
 * dependent whose reload failed (its message cut at 300 bytes), by name; with no memory left
 * for that answer, "ok" and a short one (the reload was made). */
static int layer_reload_answer(lua_State *L) {
    luaL_checkstring(L, 3);
    lua_settop(L, 3);
    int ok_idx, short_idx;
    prepare_answer(L, "ok", "reloaded (no memory was left to say more: :mods lists the mods)", &ok_idx, &short_idx);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    if (lua_pcall(L, 2, 2, 0) != LUA_OK) return error_answer(L);
    if (!lua_toboolean(L, -2)) return error_answer(L);
    lua_pushvalue(L, 3);
    lua_insert(L, -3); /* name, info, failed */
    if (pcall_text(L, reload_text, 3, 2) == LUA_OK) return 2;
    return landed_answer(L, ok_idx, short_idx, NULL, false);
}

/* layer.load_answer(load, world, path) -> "ok", "loaded N entities from path" when
 * load(world, path) (world.load) returned its map of N entities, else "error", its message;
 * as layer.answer, with the count made here. */
static int layer_load_answer(lua_State *L) {
    const char *path = luaL_checkstring(L, 3);
    int ok_idx, short_idx;
    prepare_answer(L, "ok", "loaded (no memory was left to say how many entities)", &ok_idx, &short_idx);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) return error_answer(L);
    int n = 0;
    if (lua_istable(L, -1))
        for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) n++;
    char text[4200];
    snprintf(text, sizeof text, "loaded %d entities from %s", n, path);
    return landed_answer(L, ok_idx, short_idx, text, false);
}

/* layer.step_answer(body, box, short, ...) -> body(..., box)'s status and text; when it
 * raises after a frame ran (box[1], set by layer.ran once progress returned), "ok" and short
 * (made by the caller, before any frame): :step's frames stay, so no error is answered. */
static int layer_step_answer(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TSTRING);
    int top = lua_gettop(L);
    luaL_checkstack(L, ANSWER_ROOM + top, NULL);
    lua_pushliteral(L, "ok");
    int ok_idx = lua_gettop(L);
    lua_pushvalue(L, 1);
    for (int i = 4; i <= top; i++) lua_pushvalue(L, i);
    lua_pushvalue(L, 2);
    if (lua_pcall(L, top - 2, 2, 0) == LUA_OK) return 2;
    lua_rawgeti(L, 2, 1);
    bool ran = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (!ran) return error_answer(L);
    lua_pushvalue(L, ok_idx);
    lua_pushvalue(L, 3);
    return 2;
}

/* layer.regular_file(path) -> true, or nil and why: :load reads only regular files, found so
 * without blocking (opening a named pipe to read waits for a writer: it held the game). */
static int layer_regular_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    int e = errno;
    bool regular = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (fd >= 0) close(fd);
    if (regular) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    if (fd < 0) lua_pushfstring(L, "cannot open %s: %s", path, strerror(e));
    else lua_pushfstring(L, "%s is not a regular file", path);
    return 2;
}

void klua_open_session_layer(lua_State *L, int layer) {
    static const luaL_Reg fns[] = {{"run_answer", layer_run_answer}, {"ran", layer_ran}, {"answer", layer_answer},
                                   {"load_answer", layer_load_answer}, {"reload_answer", layer_reload_answer},
                                   {"regular_file", layer_regular_file}, {"step_answer", layer_step_answer},
                                   {NULL, NULL}};
    for (const luaL_Reg *f = fns; f->name; f++) {
        lua_pushcfunction(L, f->func);
        lua_setfield(L, layer, f->name);
    }
}
