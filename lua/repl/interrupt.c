/* interrupt.c: Ctrl-C in the kiln command: while Lua runs under kcmd_interrupt_pcall a hook
 * stops it; otherwise it sets a flag, and a wait in progress returns at once. */
#include "interrupt.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include <lauxlib.h>
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
