/* session.c: feeds one line to the session, local (_KILN_SESSION:feed in L) or the console,
 * and returns its answer; a local error is an "error" answer (statement reset), never a lost line. */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interrupt.h"
#include "remote.h"

bool kcmd_session_ask(kcmd_session *session, const char *line, kcmd_answer *out) {
    lua_State *L = session->L;
    out->text = NULL;
    if (session->remote_fd >= 0) {
        char *st, *text;
        if (!kcmd_remote_ask(session->remote_fd, line, &st, &text)) return false;
        snprintf(out->status, sizeof out->status, "%s", st);
        out->text = text;
        free(st);
        return true;
    }
    int top = lua_gettop(L);
    lua_getglobal(L, "_KILN_SESSION");
    lua_getfield(L, -1, "feed");
    lua_insert(L, -2);
    lua_pushstring(L, line);
    if (kcmd_interrupt_pcall(L, 2, 2, 0) != LUA_OK) {
        snprintf(out->status, sizeof out->status, "error");
        out->text = strdup(lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
        lua_getglobal(L, "_KILN_SESSION");
        lua_getfield(L, -1, "reset");
        lua_insert(L, -2);
        lua_pcall(L, 1, 0, 0);
    } else {
        snprintf(out->status, sizeof out->status, "%s", lua_tostring(L, -2) ? lua_tostring(L, -2) : "error");
        out->text = strdup(lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
    }
    lua_settop(L, top);
    return true;
}

void kcmd_session_reset(kcmd_session *session) {
    lua_State *L = session->L;
    if (session->remote_fd >= 0) {
        kcmd_answer a;
        if (kcmd_session_ask(session, ":reset", &a)) free(a.text);
        return;
    }
    lua_getglobal(L, "_KILN_SESSION");
    lua_getfield(L, -1, "reset");
    lua_insert(L, -2);
    lua_pcall(L, 1, 0, 0);
}
