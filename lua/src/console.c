/* console.c: a REPL console inside a running game: non-blocking TCP clients whose lines are
 * evaluated by kiln.session between frames. Invariant: nothing here blocks; a client that
 * misbehaves (garbage, huge lines, vanishing) is answered or dropped, never the game. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "klua.h"

#define LINE_MAX_BYTES 65536
#define OUT_MAX_BYTES (16 << 20)

typedef struct client {
    int fd;
    int session_ref;
    char *in;
    size_t in_len, in_cap;
    bool discarding;     /* skipping the rest of an over-long line */
    char *out;
    size_t out_len, out_cap;
} client;

struct kiln_console {
    lua_State *L;
    int fd;
    int port;
    int max_clients;
    int64_t budget;
    client *clients;
    int client_count;
};

/* Messages follow the core's shape: "kiln_console_open: detail". */
static void set_err(char *err, size_t size, const char *what, const char *addr, int port) {
    if (err && size) snprintf(err, size, "kiln_console_open: %s %s:%d: %s", what, addr, port, strerror(errno));
}

kiln_console *kiln_console_open(lua_State *L, const kiln_console_desc *desc, char *err, size_t err_size) {
    kiln_console_desc d = desc ? *desc : (kiln_console_desc){0};
    if (!d.bind_address) d.bind_address = "127.0.0.1";
    if (d.max_clients <= 0) d.max_clients = 8;
    if (d.budget <= 0) d.budget = 100000000;
    if (d.port < 0 || d.port > 65535) {
        if (err && err_size) snprintf(err, err_size, "kiln_console_open: port %d is out of range 0-65535", d.port);
        return NULL;
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)d.port);
    if (inet_pton(AF_INET, d.bind_address, &addr.sin_addr) != 1) {
        if (err && err_size) snprintf(err, err_size, "kiln_console_open: '%.64s' is not an IPv4 address", d.bind_address);
        return NULL;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        set_err(err, err_size, "cannot open a socket for", d.bind_address, d.port);
        return NULL;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 8) != 0 ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
        set_err(err, err_size, "cannot listen on", d.bind_address, d.port);
        close(fd);
        return NULL;
    }
    socklen_t len = sizeof addr;
    getsockname(fd, (struct sockaddr *)&addr, &len);
    kiln_console *c = calloc(1, sizeof *c);
    client *clients = calloc((size_t)d.max_clients, sizeof *clients);
    if (!c || !clients) {
        free(c);
        free(clients);
        close(fd);
        if (err && err_size) snprintf(err, err_size, "kiln_console_open: out of memory");
        return NULL;
    }
    c->L = L;
    c->fd = fd;
    c->port = ntohs(addr.sin_port);
    c->max_clients = d.max_clients;
    c->budget = d.budget;
    c->clients = clients;
    return c;
}

int kiln_console_port(const kiln_console *c) { return c->port; }

static void drop(kiln_console *c, int i) {
    client *cl = &c->clients[i];
    close(cl->fd);
    luaL_unref(c->L, LUA_REGISTRYINDEX, cl->session_ref);
    free(cl->in);
    free(cl->out);
    c->clients[i] = c->clients[--c->client_count];
    memset(&c->clients[c->client_count], 0, sizeof(client));
}

void kiln_console_close(kiln_console *c) {
    if (!c) return;
    while (c->client_count > 0) drop(c, c->client_count - 1);
    close(c->fd);
    free(c->clients);
    free(c);
}

static bool append(char **buf, size_t *len, size_t *cap, const char *data, size_t n) {
    if (*len + n > *cap) {
        size_t ncap = *cap ? *cap : 1024;
        while (ncap < *len + n) ncap *= 2;
        char *p = realloc(*buf, ncap);
        if (!p) return false;
        *buf = p;
        *cap = ncap;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    return true;
}

/* Queues one answer frame: "<status> <length>\n<text>". */
static bool answer(client *cl, const char *status, const char *text, size_t n) {
    char head[64];
    int h = snprintf(head, sizeof head, "%s %zu\n", status, n);
    if (cl->out_len + (size_t)h + n > OUT_MAX_BYTES) return false;
    return append(&cl->out, &cl->out_len, &cl->out_cap, head, (size_t)h) &&
           append(&cl->out, &cl->out_len, &cl->out_cap, text, n);
}

static const char BUDGET_KEY = 0;

static void budget_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
    lua_Integer left = lua_tointeger(L, -1) - 1000;
    lua_pop(L, 1);
    lua_pushinteger(L, left);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
    if (left <= 0) luaL_error(L, "console: the statement ran past its instruction budget");
}

/* Evaluates one line in the client's session; queues the answer. */
static bool evaluate(kiln_console *c, client *cl, const char *line, size_t n) {
    lua_State *L = c->L;
    int top = lua_gettop(L);
    lua_Hook old_hook = lua_gethook(L);
    int old_mask = lua_gethookmask(L), old_count = lua_gethookcount(L);
    lua_pushinteger(L, c->budget);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1000);
    lua_rawgeti(L, LUA_REGISTRYINDEX, cl->session_ref);
    lua_getfield(L, -1, "feed");
    lua_insert(L, -2);
    lua_pushlstring(L, line, n);
    int status = lua_pcall(L, 2, 2, 0);
    lua_sethook(L, old_hook, old_mask, old_count);
    bool ok;
    if (status != LUA_OK) {
        size_t len;
        const char *msg = lua_tolstring(L, -1, &len);
        ok = answer(cl, "error", msg ? msg : "error", msg ? len : 5);
        /* an interrupted statement must not leave a half-typed one behind */
        lua_rawgeti(L, LUA_REGISTRYINDEX, cl->session_ref);
        lua_getfield(L, -1, "reset");
        lua_insert(L, -2);
        lua_pcall(L, 1, 0, 0);
    } else {
        size_t len;
        const char *st = lua_tostring(L, -2);
        const char *text = lua_tolstring(L, -1, &len);
        ok = answer(cl, st ? st : "error", text ? text : "", text ? len : 0);
    }
    lua_settop(L, top);
    return ok;
}

static void accept_clients(kiln_console *c) {
    for (;;) {
        int fd = accept(c->fd, NULL, NULL);
        if (fd < 0) return;
        if (c->client_count == c->max_clients ||
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
            static const char busy[] = "error 28\nconsole: too many clients\n";
            ssize_t w = send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL);
            (void)w;
            close(fd);
            continue;
        }
        lua_State *L = c->L;
        lua_getglobal(L, "require");
        lua_pushstring(L, "kiln");
        if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
            lua_pop(L, 1);
            close(fd);
            continue;
        }
        lua_getfield(L, -1, "session");
        lua_remove(L, -2);
        lua_pushglobaltable(L);
        lua_createtable(L, 0, 1);
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "remote");
        if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
            lua_pop(L, 1);
            close(fd);
            continue;
        }
        client *cl = &c->clients[c->client_count++];
        memset(cl, 0, sizeof *cl);
        cl->fd = fd;
        cl->session_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
}

/* Reads what arrived and evaluates complete lines; false when the client must go. */
static bool serve(kiln_console *c, client *cl, int *evaluated) {
    char buf[4096];
    for (;;) {
        ssize_t n = read(cl->fd, buf, sizeof buf);
        if (n == 0) return false;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == EINTR) continue;
            return false;
        }
        for (ssize_t i = 0; i < n; i++) {
            char ch = buf[i];
            if (ch == '\n') {
                if (cl->discarding) {
                    cl->discarding = false;
                } else {
                    size_t len = cl->in_len;
                    if (len && cl->in[len - 1] == '\r') len--;
                    if (!evaluate(c, cl, cl->in ? cl->in : "", len)) return false;
                    (*evaluated)++;
                }
                cl->in_len = 0;
                continue;
            }
            if (cl->discarding) continue;
            if (cl->in_len == LINE_MAX_BYTES) {
                static const char msg[] = "console: line longer than 65536 bytes dropped";
                if (!answer(cl, "error", msg, sizeof msg - 1)) return false;
                cl->discarding = true;
                cl->in_len = 0;
                continue;
            }
            if (!append(&cl->in, &cl->in_len, &cl->in_cap, &ch, 1)) return false;
        }
    }
    while (cl->out_len > 0) {
        ssize_t w = send(cl->fd, cl->out, cl->out_len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == EINTR) continue;
            return false;
        }
        memmove(cl->out, cl->out + w, cl->out_len - (size_t)w);
        cl->out_len -= (size_t)w;
    }
    return true;
}

int kiln_console_poll(kiln_console *c) {
    if (!c) return 0;
    accept_clients(c);
    int evaluated = 0;
    for (int i = 0; i < c->client_count;) {
        if (!serve(c, &c->clients[i], &evaluated)) drop(c, i);
        else i++;
    }
    return evaluated;
}
