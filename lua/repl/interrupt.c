/* interrupt.c: Ctrl-C in the kiln command: while Lua runs under kcmd_interrupt_pcall a hook
 * stops it; otherwise it sets a flag, and a wait in progress returns at once. */
#include "interrupt.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>
#if LUA_VERSION_NUM == 501
#include <luajit.h>
#endif
/* LuaJIT: compat.h, put in front of this file, maps lua_sethook to the binding's, which first
 * reads and writes the registry (and flushes traces): from a signal handler, in the middle of
 * an instruction, that crashed the command. LuaJIT's own only stores the hook, as 5.4's does. */
#undef lua_sethook

/* All the handler touches: a signal handler gets no user pointer, so this is file state. */
static volatile sig_atomic_t interrupted;
static volatile sig_atomic_t lua_running; /* Ctrl-C stops Lua code rather than the line */
static lua_State *volatile running_state;  /* the state to stop while lua_running */

/* Raises at every instruction until the interrupted call returns (kcmd_interrupt_pcall takes
 * it off): removed at its first error, a pcall in a loop swallowed that one and ran on with no
 * hook at all, not even a world's instruction budget, whose hook this one had replaced. Left
 * in a coroutine made meanwhile, it removes itself once that call is over. */
static void stop_hook(lua_State *L, lua_Debug *ar) {
    if (!interrupted || !lua_running) {
        lua_sethook(L, NULL, 0, 0);
        return;
    }
    /* A C function runs: as the error unwinds, a loop's closing value (the binding's, in C)
     * ends its iteration, which left unended kept the world deferred; and the message handler
     * writes its traceback. Lua code it calls meets the hook at its first instruction. */
    if (ar->event == LUA_HOOKCALL && lua_getinfo(L, "S", ar) && ar->what[0] == 'C') return;
    luaL_error(L, "interrupted");
}

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
    /* at calls and instructions, not returns: the shape of a console statement's spent budget,
     * which the binding's C code that calls Lua is made to meet at every one of them */
    if (lua_running && running_state) lua_sethook(running_state, stop_hook, LUA_MASKCALL | LUA_MASKCOUNT, 1);
}

/* No SA_RESTART: a wait at the prompt returns EINTR, so Ctrl-C is seen at once. */
void kcmd_interrupt_catch(bool on) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on ? on_sigint : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* LuaJIT: compiled code calls no hook, so a loop compiled before Ctrl-C (`while true do end`
 * is, within a few dozen rounds) could never be stopped. Each call starts with the traces
 * dropped and the compiler off, as a world's budget does; a jit.on() lasts until the next. */
static void jit_off(lua_State *L) {
#if LUA_VERSION_NUM == 501
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_FLUSH);
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
#else
    (void)L;
#endif
}

/* ---- the thread Ctrl-C stops (Lua 5.4) --------------------------------------------------- */
#if LUA_VERSION_NUM >= 504
/* Lua 5.4 keeps a hook per thread: the handler hooking the thread that called
 * kcmd_interrupt_pcall, which waits in a resume, left a loop in the coroutine it resumed
 * running. coroutine.resume and the functions coroutine.wrap makes are replaced with
 * closures that point running_state at the coroutine while it runs and back where it pointed
 * after (errors included), each hooked at once when Ctrl-C came before. The price: each
 * nesting level takes one C call more, so coroutines resuming coroutines reach Lua's C stack
 * limit about half as deep (98 resumes, not 198). A hook set in each coroutine as it is made
 * cost nothing so, but one already there (a world budget's, inherited) would have kept it
 * out, and it would have run in every coroutine all the time. */
/* the upvalues of a function wrap made: its coroutine first (where a console's budget looks
 * for it), then the library's function; of resume and wrap themselves: the library's */
enum { UP_THREAD = 1, UP_WRAPPED, WRAPPED_UPVALUES = UP_WRAPPED };
enum { UP_LIBRARY = 1 };

/* Points the handler at L, hooking it when Ctrl-C already came. */
static void run_on(lua_State *L) {
    running_state = L;
    if (interrupted && lua_running) lua_sethook(L, stop_hook, LUA_MASKCALL | LUA_MASKCOUNT, 1);
}

/* Calls the function below the arguments with co tracked; returns the pcall status. Back, the handler points
 * where it did before, not at L: L resumed by the library's own resume (a script keeps it from an upvalue here)
 * ended with it left on L, and once L was collected Ctrl-C hooked freed memory while the statement ran on. */
static int call_tracked(lua_State *L, lua_State *co) {
    lua_State *outer = running_state; /* L, or a thread a tracked call still runs under: alive */
    run_on(co);
    int status = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    run_on(outer);
    return status;
}

static int resume_tracked(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTHREAD); /* here, so the message names 'resume' */
    lua_pushvalue(L, lua_upvalueindex(UP_LIBRARY));
    lua_insert(L, 1);
    if (call_tracked(L, lua_tothread(L, 2)) != LUA_OK) return lua_error(L); /* out of memory */
    return lua_gettop(L);
}

static int wrapped_tracked(lua_State *L) {
    lua_pushvalue(L, lua_upvalueindex(UP_WRAPPED));
    lua_insert(L, 1);
    int status = call_tracked(L, lua_tothread(L, lua_upvalueindex(UP_THREAD)));
    if (status == LUA_OK) return lua_gettop(L);
    /* the library's function prefixed where its caller (this closure, so nothing) stood:
     * prefix where this one's caller stands, as it would have */
    if (status != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
        luaL_where(L, 1);
        lua_insert(L, -2);
        lua_concat(L, 2);
    }
    return lua_error(L);
}

static int wrap_tracked(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION); /* here, so the message names 'wrap' */
    lua_settop(L, 1);
    lua_pushvalue(L, lua_upvalueindex(UP_LIBRARY));
    lua_insert(L, 1);
    lua_call(L, 1, 1);
    if (!lua_getupvalue(L, 1, 1) || !lua_isthread(L, -1)) { /* not the library's shape: as it is */
        lua_settop(L, 1);
        return 1;
    }
    lua_pushvalue(L, 1);
    lua_pushcclosure(L, wrapped_tracked, WRAPPED_UPVALUES);
    return 1;
}
#endif

void kcmd_interrupt_track_coroutines(lua_State *L) {
#if LUA_VERSION_NUM >= 504
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    if (lua_getfield(L, -1, LUA_COLIBNAME) == LUA_TTABLE) {
        static const struct {
            const char *name;
            lua_CFunction fn;
        } tracked[] = {{"resume", resume_tracked}, {"wrap", wrap_tracked}};
        for (size_t i = 0; i < sizeof tracked / sizeof tracked[0]; i++) {
            lua_getfield(L, -1, tracked[i].name);
            lua_pushcclosure(L, tracked[i].fn, UP_LIBRARY);
            lua_setfield(L, -2, tracked[i].name);
        }
    }
    lua_pop(L, 2);
#else
    (void)L; /* LuaJIT's hook is the state's: every coroutine runs under the one handler sets */
#endif
}

int kcmd_interrupt_pcall(lua_State *L, int nargs, int nresults, int msgh) {
    jit_off(L);
    interrupted = 0;
    running_state = L; /* before lua_running: the handler never sees a stale state */
    lua_running = 1;
    int rc = lua_pcall(L, nargs, nresults, msgh);
    lua_running = 0;
    lua_sethook(L, NULL, 0, 0);
    return rc;
}

bool kcmd_interrupt_seen(void) { return interrupted != 0; }

void kcmd_interrupt_clear(void) { interrupted = 0; }

double kcmd_now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* SIGINT stays blocked from the flag check into pselect, which unblocks it atomically:
 * a Ctrl-C between the two cannot be lost. */
int kcmd_wait_readable(int fd, double seconds) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &old);
    if (interrupted) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return -1;
    }
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fd, &set);
    struct timespec ts, *pts = NULL;
    if (seconds >= 0) {
        ts.tv_sec = (time_t)seconds;
        ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
        pts = &ts;
    }
    int r = pselect(fd + 1, &set, NULL, NULL, pts, &old);
    int err = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (r < 0) return err == EINTR ? -1 : 1; /* other errors: let the read report them */
    return r > 0 ? 1 : 0;
}
