/* console.c: a REPL console inside a running game: non-blocking TCP clients that prove the
 * token, then have their lines evaluated by kiln.session between frames. Invariant: a poll
 * never blocks and never serves past its bytes and time; every call into Lua is protected. */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "console.h"
#include "refs.h"

#define OUT_MAX_BYTES (16 << 20) /* answers queued for one client; past it the client goes */
#define OUT_PAUSE_BYTES (1 << 20) /* a client this far behind reading gets no new answers */
/* The text one answer queues; past it the rest is cut and counted. A statement runs only while
 * at most OUT_PAUSE_BYTES wait for its client, so its answer always fits under OUT_MAX_BYTES:
 * a statement printing more (print(("x"):rep(20 << 20))) no longer drops its client. The
 * session cuts a statement's answer itself (its answer_bytes), so what is printed past the
 * cut is counted, never built; the cut here is for the rest. */
#define ANSWER_MAX_BYTES (14 << 20)
#define CUT_NOTE_BYTES 64 /* "\n... (N bytes not shown)" */
_Static_assert(OUT_PAUSE_BYTES + ANSWER_MAX_BYTES + CUT_NOTE_BYTES + 64 <= OUT_MAX_BYTES,
               "an answer made while OUT_PAUSE_BYTES wait must fit under OUT_MAX_BYTES");
#define READ_CHUNK 4096
#define ACCEPT_PER_POLL 64
#define LINGER_SECONDS 1.0 /* a closing client's input is drained this long, so it reads why */

typedef struct client {
    int fd;
    int session_ref;  /* LUA_NOREF until the token was sent */
    bool authed;
    bool eof;         /* the client shut its side: answer what came, then close */
    bool closing;     /* answer queued last; close once it is sent */
    bool shut;        /* our side is shut: draining until the client closes */
    double last_line; /* when it connected or sent its last complete line */
    double closing_at;
    char *in;
    size_t in_len, scanned; /* in[0..scanned) holds no newline */
    char *out;
    size_t out_len, out_cap;
    size_t out_sent;  /* out[0..out_sent) went out: a slow reader costs no copy of the rest */
    char peer[64];
} client;

struct kiln_console {
    lua_State *L;
    int fd;
    int port;
    int max_clients;
    int frame_bytes, frame_us, max_line, idle_ms, auth_ms;
    kiln_console_log_fn log;
    void *log_user;
    klua_budget budget;
    int session_fn_ref, feed_ref;
    char token[KLUA_TOKEN_MAX + 1];
    char *token_path; /* NULL when the host gave the token */
    pid_t owner;      /* the process that wrote it: a child forked since leaves it be */
    client *clients;
    int client_count;
    int next_first; /* the client served first in the next poll (round robin) */
    bool polling;       /* a poll runs (a statement may call back into the host) */
    bool close_pending; /* closed from inside that poll: it closes when the poll ends */
    bool at_fd_limit;   /* accept failed for want of descriptors, reported once until one comes */
    size_t moved;       /* bytes moved down within answer queues: a slow reader must not cost
                         * a copy of its queue per send (klua_console_moved) */
};

static void report(kiln_console *c, const char *fmt, ...) {
    if (!c->log) return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->log(c->log_user, msg);
}

/* ---- opening ------------------------------------------------------------------------------ */

/* Protected: registers the budget, finds kiln.session and the feed method of its sessions. */
static int setup(lua_State *L) {
    kiln_console *c = lua_touserdata(L, 1);
    lua_pushcfunction(L, klua_budget_register);
    lua_pushlightuserdata(L, &c->budget);
    lua_call(L, 1, 0);
    lua_pushcfunction(L, klua_budget_feed); /* LuaJIT: made in the registry now, not by a statement */
    lua_pop(L, 1);
    luaL_requiref(L, "kiln", luaopen_kiln, 0);
    lua_getfield(L, -1, "session");
    lua_pushvalue(L, -1);
    lua_pushglobaltable(L);
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "feed");
    luaL_checktype(L, -1, LUA_TFUNCTION);
    c->feed_ref = klua_ref(L, LUA_REGISTRYINDEX);
    lua_pop(L, 1);
    c->session_fn_ref = klua_ref(L, LUA_REGISTRYINDEX);
    return 0;
}

static kiln_console *fail(char *err, size_t size, const char *fmt, ...) {
    if (err && size) {
        int n = snprintf(err, size, "kiln_console_open: ");
        va_list ap;
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < size) vsnprintf(err + n, size - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

/* Connections the kernel holds for the console between polls; a poll takes ACCEPT_PER_POLL of
 * them, so a burst of connections that never sign in is taken, and pushed out, before the
 * connection behind it (the system's somaxconn may cap it lower). */
#define LISTEN_BACKLOG 128

/* fd moved above 0, 1 and 2, or -1 (fd closed) when it cannot be. A game started with stdout
 * or stderr closed (by a launcher, a daemon wrapper) has those numbers free, and a socket given
 * one took the game's printing: into the listener, a write failed with EPIPE and SIGPIPE ended
 * the game; into a client, the game's output went to whoever connected, signed in or not. */
static int above_stdio(int fd) {
    if (fd < 0 || fd > STDERR_FILENO) return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    int e = errno;
    close(fd);
    errno = e;
    return moved;
}

static int listen_on(const kiln_console_desc *d, struct sockaddr_in *addr, char *err, size_t size) {
    int fd = above_stdio(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd < 0) {
        fail(err, size, "cannot open a socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)addr, sizeof *addr) != 0 || listen(fd, LISTEN_BACKLOG) != 0 ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
        fail(err, size, "cannot listen on %s:%d: %s", d->bind_address, d->port, strerror(errno));
        close(fd);
        return -1;
    }
    socklen_t len = sizeof *addr;
    getsockname(fd, (struct sockaddr *)addr, &len);
    return fd;
}

/* Makes or copies the token; writes a made one to its file. */
static bool take_token(kiln_console *c, const kiln_console_desc *d, char *err, size_t size) {
    if (d->token) {
        snprintf(c->token, sizeof c->token, "%s", d->token);
        return true;
    }
    if (!klua_token_make(c->token)) {
        fail(err, size, "no randomness to make a token from: %s", strerror(errno));
        return false;
    }
    char path[4096];
    if (d->token_path) snprintf(path, sizeof path, "%s", d->token_path);
    else klua_token_default_path(path, sizeof path, c->port);
    int e = klua_token_write(path, c->token);
    if (e) {
        fail(err, size, "cannot write the token file %.200s: %s", path, strerror(e));
        return false;
    }
    c->token_path = strdup(path);
    if (!c->token_path) {
        unlink(path);
        fail(err, size, "out of memory");
        return false;
    }
    return true;
}

kiln_console *kiln_console_open(lua_State *L, const kiln_console_desc *desc, char *err, size_t err_size) {
    kiln_console_desc d = desc ? *desc : (kiln_console_desc){0};
    if (!d.bind_address) d.bind_address = "127.0.0.1";
    if (d.max_clients <= 0) d.max_clients = 8;
    if (d.instructions <= 0) d.instructions = 100000000;
    if (d.statement_ms <= 0) d.statement_ms = 1000;
    if (d.statement_bytes <= 0) d.statement_bytes = (int64_t)256 << 20;
    if (d.frame_bytes <= 0) d.frame_bytes = 65536;
    if (d.frame_us <= 0) d.frame_us = 2000;
    if (d.max_line <= 0) d.max_line = 65536;
    if (d.idle_ms <= 0) d.idle_ms = 1800000;
    if (d.auth_ms <= 0) d.auth_ms = 5000;
    if (d.port < 0 || d.port > 65535) return fail(err, err_size, "port %d is out of range 0-65535", d.port);
    if (d.token && !klua_token_valid(d.token))
        return fail(err, err_size, "the token must be 16 to %d printable characters without spaces",
                    KLUA_TOKEN_MAX);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)d.port);
    if (inet_pton(AF_INET, d.bind_address, &addr.sin_addr) != 1)
        return fail(err, err_size, "'%.64s' is not an IPv4 address", d.bind_address);
    if ((ntohl(addr.sin_addr.s_addr) >> 24) != 127 && !d.token)
        return fail(err, err_size, "%.64s is reachable from other machines: give the console a token "
                    "in its desc to bind it", d.bind_address);
    kiln_console *c = calloc(1, sizeof *c);
    client *clients = calloc((size_t)d.max_clients, sizeof *clients);
    if (!c || !clients) {
        free(c);
        free(clients);
        return fail(err, err_size, "out of memory");
    }
    c->fd = listen_on(&d, &addr, err, err_size);
    if (c->fd < 0 || (c->port = ntohs(addr.sin_port), !take_token(c, &d, err, err_size))) {
        if (c->fd >= 0) close(c->fd);
        free(c);
        free(clients);
        return NULL;
    }
    c->L = L;
    c->owner = getpid();
    c->max_clients = d.max_clients;
    c->frame_bytes = d.frame_bytes;
    c->frame_us = d.frame_us;
    c->max_line = d.max_line;
    c->idle_ms = d.idle_ms;
    c->auth_ms = d.auth_ms;
    c->log = d.log;
    c->log_user = d.log_user;
    c->budget.limit = d.instructions;
    c->budget.statement_ms = d.statement_ms;
    c->budget.growth_max = d.statement_bytes;
    c->clients = clients;
    c->session_fn_ref = c->feed_ref = LUA_NOREF;
    lua_pushlightuserdata(L, c);
    if (klua_pcall_c(L, setup, 1, 0, 0) != LUA_OK) {
        fail(err, err_size, "cannot make a kiln.session: %.200s",
             lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error");
        lua_pop(L, 1);
        kiln_console_close(c);
        return NULL;
    }
    return c;
}

int kiln_console_port(const kiln_console *c) { return c->port; }

const char *kiln_console_token(const kiln_console *c) { return c->token; }

const char *kiln_console_token_path(const kiln_console *c) { return c->token_path; }

void kiln_console_default_token_path(int port, char *dest, size_t size) {
    if (dest && size) klua_token_default_path(dest, size, port);
}

static void drop(kiln_console *c, int i) {
    client *cl = &c->clients[i];
    close(cl->fd);
    klua_unref(c->L, LUA_REGISTRYINDEX, cl->session_ref); /* cannot raise */
    free(cl->in);
    free(cl->out);
    c->clients[i] = c->clients[--c->client_count];
    memset(&c->clients[c->client_count], 0, sizeof(client));
}

static void close_now(kiln_console *c) {
    while (c->client_count > 0) drop(c, c->client_count - 1);
    if (c->fd >= 0) close(c->fd);
    if (c->L) {
        klua_unref(c->L, LUA_REGISTRYINDEX, c->session_fn_ref);
        klua_unref(c->L, LUA_REGISTRYINDEX, c->feed_ref);
        /* no budget: hooks left in coroutines remove themselves (unless the budget registered
         * is another console's, whose statement may be running: this is called from it) */
        lua_pushlightuserdata(c->L, &c->budget);
        if (klua_pcall_c(c->L, klua_budget_unregister, 1, 0, 0) != LUA_OK) lua_pop(c->L, 1);
    }
    /* a forked helper (a crash reporter) tidying up as the game does would have taken the file
     * from under the game's console, which still serves: clients read it to sign in */
    if (c->token_path && getpid() == c->owner) unlink(c->token_path);
    free(c->token_path);
    memset(c->token, 0, sizeof c->token);
    free(c->clients);
    free(c);
}

/* Closed from inside its own poll (a statement called the host, which closed it), the console
 * stops serving and closes when that poll returns: the poll still holds it and its client. */
void kiln_console_close(kiln_console *c) {
    if (!c) return;
    if (c->polling) {
        c->close_pending = true;
        return;
    }
    close_now(c);
}

/* ---- answers ------------------------------------------------------------------------------ */

size_t klua_console_moved(const kiln_console *c) { return c->moved; }

static bool append(kiln_console *c, client *cl, const char *data, size_t n) {
    if (cl->out_sent && cl->out_len + n > cl->out_cap) { /* the room sent bytes left */
        memmove(cl->out, cl->out + cl->out_sent, cl->out_len - cl->out_sent);
        c->moved += cl->out_len - cl->out_sent;
        cl->out_len -= cl->out_sent;
        cl->out_sent = 0;
    }
    if (cl->out_len + n > cl->out_cap) {
        size_t ncap = cl->out_cap ? cl->out_cap : 1024;
        while (ncap < cl->out_len + n) ncap *= 2;
        char *p = realloc(cl->out, ncap);
        if (!p) return false;
        cl->out = p;
        cl->out_cap = ncap;
    }
    memcpy(cl->out + cl->out_len, data, n);
    cl->out_len += n;
    return true;
}

/* Queues one answer frame: "<status> <length>\n<text>", a text past ANSWER_MAX_BYTES cut
 * there and followed by a line saying how many bytes were not shown. A text the session cut
 * at ANSWER_MAX_BYTES and noted so (no longer than CUT_NOTE_BYTES more) goes as it is. */
static bool answer(kiln_console *c, client *cl, const char *status, const char *text, size_t n) {
    char head[64], note[CUT_NOTE_BYTES];
    size_t shown = n, noted = 0;
    if (n > ANSWER_MAX_BYTES + CUT_NOTE_BYTES) {
        shown = ANSWER_MAX_BYTES;
        noted = (size_t)snprintf(note, sizeof note, "\n... (%zu bytes not shown)", n - shown);
    }
    int h = snprintf(head, sizeof head, "%s %zu\n", status, shown + noted);
    if (cl->out_len - cl->out_sent + (size_t)h + shown + noted > OUT_MAX_BYTES) return false;
    return append(c, cl, head, (size_t)h) && append(c, cl, text, shown) && append(c, cl, note, noted);
}

/* Queues the reason and closes the client once it is sent. */
static void close_with(kiln_console *c, client *cl, const char *reason) {
    answer(c, cl, "error", reason, strlen(reason));
    const char *why = strncmp(reason, "console: ", 9) == 0 ? reason + 9 : reason;
    report(c, "console: %s: %s; closed", cl->peer, why);
    cl->closing = true;
    cl->closing_at = klua_console_now();
}

/* ---- lines --------------------------------------------------------------------------------- */

static bool starts_with(const char *s, size_t n, const char *prefix) {
    size_t k = strlen(prefix);
    return n >= k && memcmp(s, prefix, k) == 0;
}

/* A request line ("GET /x HTTP/1.1") or a header a browser sends. Lua code is neither: a
 * request line is never a Lua statement, and the headers are matched with their exact
 * spelling and the space after the colon. */
static bool looks_like_http(const char *s, size_t n) {
    static const char *const methods[] = {"GET ", "POST ", "PUT ", "HEAD ", "OPTIONS ", "DELETE ",
                                          "PATCH ", "CONNECT ", "TRACE "};
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
        if (!starts_with(s, n, methods[i])) continue;
        for (size_t k = 0; k + 6 <= n; k++)
            if (memcmp(s + k, " HTTP/", 6) == 0) return true;
    }
    static const char *const headers[] = {"Host: ", "User-Agent: ", "Accept: ", "Accept-", "Content-Type: ",
                                          "Content-Length: ", "Origin: ", "Referer: ", "Connection: ",
                                          "Cookie: ", "Upgrade: ", "Sec-Fetch-", "Transfer-Encoding: "};
    for (size_t i = 0; i < sizeof headers / sizeof *headers; i++)
        if (starts_with(s, n, headers[i])) return true;
    return false;
}

/* Protected: a new session for an authenticated client; returns its registry reference. */
static int new_session(lua_State *L) {
    kiln_console *c = lua_touserdata(L, 1);
    klua_getref(L, LUA_REGISTRYINDEX, c->session_fn_ref);
    lua_pushglobaltable(L);
    lua_createtable(L, 0, 2);
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "remote");
    lua_pushinteger(L, ANSWER_MAX_BYTES);
    lua_setfield(L, -2, "answer_bytes");
    lua_call(L, 2, 1);
    lua_pushinteger(L, klua_ref(L, LUA_REGISTRYINDEX));
    return 1;
}

static void authenticate(kiln_console *c, client *cl, const char *line, size_t n) {
    if (!starts_with(line, n, "token ")) {
        close_with(c, cl, "console: send \"token HEX\" first (the token is in the game's token file)");
        return;
    }
    if (!klua_token_equal(line + 6, n - 6, c->token)) {
        close_with(c, cl, "console: wrong token");
        return;
    }
    lua_State *L = c->L;
    lua_pushlightuserdata(L, c);
    if (klua_pcall_c(L, new_session, 1, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        close_with(c, cl, "console: the game cannot make a session (kiln.session failed)");
        return;
    }
    cl->session_ref = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    cl->authed = true;
    report(c, "console: %s: signed in", cl->peer);
    answer(c, cl, "ok", "", 0);
}

/* A status word fit for a frame header, or "error". */
static const char *frame_status(const char *s, size_t n) {
    if (!s || n == 0 || n > 16) return "error";
    for (size_t i = 0; i < n; i++)
        if (s[i] < 'a' || s[i] > 'z') return "error";
    return s;
}

/* Evaluates one line in the client's session under the statement budget. */
static bool evaluate(kiln_console *c, client *cl, const char *line, size_t n) {
    lua_State *L = c->L;
    int top = lua_gettop(L);
    klua_getref(L, LUA_REGISTRYINDEX, c->feed_ref);
    klua_getref(L, LUA_REGISTRYINDEX, cl->session_ref);
    lua_pushlightuserdata(L, (void *)line);
    lua_pushinteger(L, (lua_Integer)n);
    lua_pushlightuserdata(L, &c->budget);
    bool ok;
    if (klua_pcall_c(L, klua_budget_feed, 5, 2, 0) != LUA_OK) {
        const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "console: error";
        ok = answer(c, cl, "error", msg, strlen(msg));
    } else {
        size_t sn, tn;
        const char *st = lua_tolstring(L, -2, &sn);
        const char *text = lua_tolstring(L, -1, &tn);
        ok = answer(c, cl, frame_status(st, sn), text ? text : "", text ? tn : 0);
    }
    lua_settop(L, top);
    return ok;
}

/* Handles the complete line at the front of the client's input; false when nothing was. */
static void close_too_long(kiln_console *c, client *cl) {
    char reason[96];
    snprintf(reason, sizeof reason, "console: a line longer than %d bytes", c->max_line);
    close_with(c, cl, reason);
}

static bool take_line(kiln_console *c, client *cl, int *evaluated) {
    char *nl = cl->in_len > cl->scanned ? memchr(cl->in + cl->scanned, '\n', cl->in_len - cl->scanned) : NULL;
    if (!nl) {
        cl->scanned = cl->in_len;
        return false;
    }
    size_t used = (size_t)(nl - cl->in) + 1, n = used - 1;
    if (n && cl->in[n - 1] == '\r') n--;
    cl->last_line = klua_console_now();
    if (n > (size_t)c->max_line) { /* (read_some sees only lines that have not ended yet) */
        close_too_long(c, cl);
    } else if (looks_like_http(cl->in, n)) {
        close_with(c, cl, "console: this is not an HTTP server");
    } else if (!cl->authed) {
        authenticate(c, cl, cl->in, n);
    } else {
        if (!evaluate(c, cl, cl->in, n)) {
            close_with(c, cl, "console: too many answers waiting to be read");
        }
        (*evaluated)++;
    }
    memmove(cl->in, cl->in + used, cl->in_len - used);
    cl->in_len -= used;
    cl->scanned = 0;
    return true;
}

/* ---- serving ------------------------------------------------------------------------------ */

/* Sends a closing reason frame on fd and shuts our side. What the client already sent is read
 * first: unread input makes the close a reset, which can destroy the reason before the client
 * reads it. */
static void send_reason(int fd, const char *reason) {
    char frame[160];
    int f = snprintf(frame, sizeof frame, "error %zu\n%s", strlen(reason), reason);
    char sink[READ_CHUNK];
    for (int drained = 0; drained < 16 && recv(fd, sink, sizeof sink, 0) > 0; drained++) {}
    ssize_t w = send(fd, frame, (size_t)f, MSG_NOSIGNAL);
    (void)w;
    shutdown(fd, SHUT_WR);
}

/* Reads one chunk, at most *budget bytes; false when nothing came. */
static bool read_some(kiln_console *c, client *cl, long *budget) {
    size_t cap = (size_t)c->max_line + 2 + READ_CHUNK;
    if (!cl->in && !(cl->in = malloc(cap))) {
        close_with(c, cl, "console: out of memory");
        return false;
    }
    size_t want = READ_CHUNK;
    if ((long)want > *budget) want = (size_t)*budget;
    if (want > cap - cl->in_len) want = cap - cl->in_len;
    if (want == 0) return false;
    ssize_t n = recv(cl->fd, cl->in + cl->in_len, want, 0);
    if (n == 0) {
        cl->eof = true;
        return true;
    }
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            cl->eof = true;
            cl->closing = true; /* the connection is gone: nothing can be answered */
            cl->out_len = cl->out_sent = 0;
        }
        return false;
    }
    cl->in_len += (size_t)n;
    *budget -= n;
    if (!memchr(cl->in + cl->scanned, '\n', cl->in_len - cl->scanned) &&
        cl->in_len > (size_t)c->max_line + 1)
        close_too_long(c, cl);
    return true;
}

/* Reads what a client without a token sent since the last poll and takes its first line. */
static void take_waiting_token(kiln_console *c, client *cl) {
    long budget = (long)c->max_line + 2;
    int evaluated = 0; /* (a client without a token has nothing evaluated) */
    if (!cl->eof && !cl->closing) read_some(c, cl, &budget);
    if (!cl->closing) take_line(c, cl, &evaluated);
}

/* Makes room for a new client when every place is taken: the client without a token that
 * came first goes, whatever poll accepted it (else places held by connections that never
 * sign in, which anyone who can reach the port can open, would lock out the token's holder,
 * for good or for a whole burst). Before it goes, what it sent is read: one whose token came
 * signs in instead, and the next comes up, so a storm of connections cannot push out a client
 * whose token came. Each read either signs a client in or ends in its going, so a poll reads
 * at most once per client it accepts or signs in. False when every client has signed in. */
static bool make_room(kiln_console *c) {
    for (;;) {
        int oldest = -1;
        for (int i = 0; i < c->client_count; i++) {
            const client *cl = &c->clients[i];
            if (!cl->authed && (oldest < 0 || cl->last_line < c->clients[oldest].last_line)) oldest = i;
        }
        if (oldest < 0) return false;
        client *cl = &c->clients[oldest];
        take_waiting_token(c, cl);
        if (cl->authed) continue;
        char reason[96];
        snprintf(reason, sizeof reason, "console: too many clients (%d): one without a token made room", c->max_clients);
        send_reason(cl->fd, reason);
        report(c, "console: %s: dropped without a token: a new client needed its place", cl->peer);
        drop(c, oldest);
        return true;
    }
}

/* Whether accept failing with e failed the call, not the queue, so the next connection may
 * be taken at once: a signal came, or the connection at the queue's head was reset (BSD says
 * ECONNABORTED; Linux passes on its network error, which its accept(2) says to retry). */
static bool accept_again(int e) {
    switch (e) {
    case EINTR: case ECONNABORTED: case EPROTO: case ENOPROTOOPT: case ENETDOWN: case ENETUNREACH:
    case EHOSTUNREACH: case EOPNOTSUPP:
#ifdef EHOSTDOWN
    case EHOSTDOWN:
#endif
#ifdef ENONET
    case ENONET:
#endif
        return true;
    default:
        return false;
    }
}

static void accept_clients(kiln_console *c) {
    for (int k = 0; k < ACCEPT_PER_POLL; k++) {
        struct sockaddr_in peer;
        socklen_t plen = sizeof peer;
        /* close-on-exec as it is made: set after, a fork and exec by another thread of the game
         * (a shader compiler started) meanwhile kept the client connected in that program */
        int fd = accept4(c->fd, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0 && accept_again(errno)) continue; /* the tries stay bounded by the loop */
        if (fd < 0) {
            /* out of descriptors the client stays queued and the next poll tries again (no
             * retry here: that would spin); the host hears of it once a burst, not every poll */
            bool limit = errno == EMFILE || errno == ENFILE;
            if (limit && !c->at_fd_limit)
                report(c, "console: cannot accept a client: %s; it waits in the listen queue",
                       errno == EMFILE ? "the process has its most open files" : "the system has its most open files");
            c->at_fd_limit = limit;
            return;
        }
        c->at_fd_limit = false;
        if ((fd = above_stdio(fd)) < 0) continue;
        char name[64], ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
        snprintf(name, sizeof name, "%s:%d", ip, ntohs(peer.sin_port));
        if (c->client_count == c->max_clients && !make_room(c)) {
            char reason[80];
            snprintf(reason, sizeof reason, "console: too many clients (%d)", c->max_clients);
            send_reason(fd, reason);
            close(fd);
            report(c, "console: %s: refused: too many clients (%d)", name, c->max_clients);
            continue;
        }
        client *cl = &c->clients[c->client_count++];
        memset(cl, 0, sizeof *cl);
        cl->fd = fd;
        cl->session_ref = LUA_NOREF;
        cl->last_line = klua_console_now();
        snprintf(cl->peer, sizeof cl->peer, "%s", name);
    }
}

/* One turn of a client: one line if one is complete, else one read. */
static bool serve_turn(kiln_console *c, client *cl, long *budget, int *evaluated) {
    if (cl->closing || cl->out_len - cl->out_sent > OUT_PAUSE_BYTES) return false;
    if (take_line(c, cl, evaluated)) return true;
    if (cl->eof || *budget <= 0) return false;
    return read_some(c, cl, budget);
}

/* Sends what is queued; false when the connection broke. What went out is only counted
 * (moving the rest down after each send cost a client reading a few KiB a frame a copy of up
 * to 16 MiB every poll); out_len is 0 once everything went. */
static bool flush(client *cl) {
    while (cl->out_sent < cl->out_len) {
        ssize_t w = send(cl->fd, cl->out + cl->out_sent, cl->out_len - cl->out_sent, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
            if (errno == EINTR) continue;
            return false;
        }
        cl->out_sent += (size_t)w;
    }
    cl->out_len = cl->out_sent = 0;
    return true;
}

/* After the frame's turns: send, time out, and say whether the client is done. */
static bool finished(kiln_console *c, client *cl, double now) {
    if (!flush(cl)) return true;
    if (cl->closing) {
        if (cl->out_len > 0) return now - cl->closing_at > LINGER_SECONDS;
        /* the reason is sent: shut our side and read until the client closes, so unread
         * input does not turn the close into a reset that loses the reason */
        if (!cl->shut) {
            shutdown(cl->fd, SHUT_WR);
            cl->shut = true;
        }
        char sink[READ_CHUNK];
        ssize_t n = 0;
        for (int k = 0; k < 16 && (n = recv(cl->fd, sink, sizeof sink, 0)) > 0; k++) {}
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
               now - cl->closing_at > LINGER_SECONDS;
    }
    if (cl->eof) {
        /* half-closed: every complete line gets its answer before the close */
        char *rest = cl->in ? memchr(cl->in, '\n', cl->in_len) : NULL;
        if (!rest && cl->out_len == 0) return true;
    }
    double limit = (cl->authed ? c->idle_ms : c->auth_ms) / 1000.0;
    if (now - cl->last_line > limit) { /* also a half-closed client that never reads */
        char reason[96];
        snprintf(reason, sizeof reason, "console: idle for %d ms%s", cl->authed ? c->idle_ms : c->auth_ms,
                 cl->authed ? "" : " without a token");
        close_with(c, cl, reason);
        flush(cl);
    }
    return false;
}

/* A poll from inside one of its own statements (the host called back) does nothing: the
 * outer poll holds a client and its input, and the statement's budget. */
int kiln_console_poll(kiln_console *c) {
    if (!c || c->polling) return 0;
    c->polling = true;
    double deadline = klua_console_now() + c->frame_us / 1e6;
    accept_clients(c);
    long budget = c->frame_bytes;
    int evaluated = 0;
    int count = c->client_count;
    bool progress = count > 0;
    /* round robin, one line or one read per client per turn, until the frame's bytes and
     * time are spent or nobody has anything */
    while (progress && !c->close_pending && klua_console_now() < deadline) {
        progress = false;
        for (int k = 0; k < count && !c->close_pending && klua_console_now() < deadline; k++) {
            client *cl = &c->clients[(c->next_first + k) % count];
            if (serve_turn(c, cl, &budget, &evaluated)) progress = true;
        }
    }
    c->polling = false;
    if (c->close_pending) {
        close_now(c);
        return evaluated;
    }
    if (count) c->next_first = (c->next_first + 1) % count;
    double now = klua_console_now();
    for (int i = 0; i < c->client_count;) {
        if (finished(c, &c->clients[i], now)) drop(c, i);
        else i++;
    }
    return evaluated;
}
