/* session.c: feeds one line to the session, local (_KILN_SESSION:feed in L) or the console,
 * and returns its answer, bytes and length; a local error is an "error" answer (statement
 * reset), never a lost line. */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interrupt.h"
#include "remote.h"

/* A copy of the len bytes at s, NUL-terminated; NULL when out of memory. */
static char *copy_bytes(const char *s, size_t len) {
    char *p = malloc(len + 1);
    if (!p) return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* A request the driver makes between the lines of a statement (session:feed passes it to the
 * command handler whatever it holds): one that fails must not drop that statement. */
static bool driver_request(const char *line) {
    return strcmp(line, ":poll") == 0 || strncmp(line, ":complete ", 10) == 0;
}

bool kcmd_session_ask(kcmd_session *session, const char *line, kcmd_answer *out) {
    lua_State *L = session->L;
    out->text = NULL;
    out->len = 0;
    if (session->remote_fd >= 0) {
        char *st, *text;
        size_t len;
        if (!kcmd_remote_ask(session->remote_fd, line, &st, &text, &len)) return false;
        snprintf(out->status, sizeof out->status, "%s", st);
        out->text = text;
        out->len = len;
        free(st);
        return true;
    }
    int top = lua_gettop(L);
    lua_getglobal(L, "_KILN_SESSION");
    lua_getfield(L, -1, "feed");
    lua_insert(L, -2);
    lua_pushstring(L, line);
    size_t len = 0;
    const char *text;
    if (kcmd_interrupt_pcall(L, 2, 2, 0) != LUA_OK) {
        snprintf(out->status, sizeof out->status, "error");
        text = lua_tolstring(L, -1, &len);
        out->text = text ? copy_bytes(text, len) : copy_bytes("error", len = 5);
        if (!driver_request(line)) {
            lua_getglobal(L, "_KILN_SESSION");
            lua_getfield(L, -1, "reset");
            lua_insert(L, -2);
            lua_pcall(L, 1, 0, 0);
        }
    } else {
        snprintf(out->status, sizeof out->status, "%s", lua_tostring(L, -2) ? lua_tostring(L, -2) : "error");
        text = lua_tolstring(L, -1, &len);
        out->text = text ? copy_bytes(text, len) : copy_bytes("", len = 0);
    }
    if (out->text) out->len = len;
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
