/* interrupt.h: Ctrl-C in the kiln command, and the waits it cuts short: what the REPL, the
 * :run loop and the script runner may use. The signal handler's state stays in interrupt.c. */
#ifndef KCMD_INTERRUPT_H
#define KCMD_INTERRUPT_H

#include <stdbool.h>

#include <lua.h>

/* Installs the Ctrl-C handler (on) or restores the default action (off). */
void kcmd_interrupt_catch(bool on);

/* lua_pcall of the function below nargs arguments, with Ctrl-C armed to stop it: the code
 * then fails with "interrupted". Clears an earlier Ctrl-C first. */
int kcmd_interrupt_pcall(lua_State *L, int nargs, int nresults, int msgh);

/* Lets Ctrl-C stop a loop in any coroutine L's code resumes (made before the Ctrl-C, or
 * before the call, too): replaces coroutine.resume and coroutine.wrap (Lua 5.4, whose hooks
 * are per thread; LuaJIT's are the state's, and this does nothing). Call before code runs. */
void kcmd_interrupt_track_coroutines(lua_State *L);

/* Whether Ctrl-C came since the last kcmd_interrupt_clear (or kcmd_interrupt_pcall). */
bool kcmd_interrupt_seen(void);
void kcmd_interrupt_clear(void);

/* Seconds on the monotonic clock, for deadlines passed to kcmd_wait_readable. */
double kcmd_now_seconds(void);

/* Waits until fd is readable or seconds pass (< 0: no limit). 1 readable (or an error the
 * read will report), 0 timeout, -1 interrupted by Ctrl-C, also one that came just before. */
int kcmd_wait_readable(int fd, double seconds);

#endif
