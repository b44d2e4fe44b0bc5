/* session.h: what the kiln command hands lines to: the Lua session in this process, or a
 * game's console; one struct, passed to every file that talks to it. */
#ifndef KCMD_SESSION_H
#define KCMD_SESSION_H

#include <stdbool.h>

#include <lua.h>

/* The command's one piece of shared state. L always exists (scripts run in it); with
 * remote_fd >= 0 the lines go to the console instead of L's _KILN_SESSION. */
typedef struct kcmd_session {
    lua_State *L;
    int remote_fd; /* connected console, or -1 */
} kcmd_session;

/* The answer to one line: status ("ok", "more", "run", ...) and the text the session gave. */
typedef struct kcmd_answer {
    char status[32];
    char *text; /* malloc'd, the caller frees it; for "run" the frame rate; NUL-terminated,
                 * and may hold NUL bytes of its own (what a statement printed) */
    size_t len; /* the bytes of text */
} kcmd_answer;

/* Sends line to the session and fills out; false when the console connection is gone (out
 * then holds nothing to free). A local Lua error becomes status "error" and resets the
 * statement being continued, unless line is a request of the driver's own (":complete ...",
 * ":poll"), which comes between the lines of a statement and leaves it as it is. Ctrl-C
 * stops local code. */
bool kcmd_session_ask(kcmd_session *session, const char *line, kcmd_answer *out);

/* Drops a statement being continued (after Ctrl-C at a ">>" prompt). */
void kcmd_session_reset(kcmd_session *session);

#endif
