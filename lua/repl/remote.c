/* remote.c: the console client: connects by "HOST:PORT" and trades a line for an answer frame,
 * read whole and bounded (64 MiB); a short or malformed frame counts as a closed connection. */
#include "remote.h"

#include "interrupt.h"
#include "kiln_lua.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int kcmd_remote_connect(const char *spec) {
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof host) return -1;
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    struct addrinfo hints = {0}, *res;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static bool send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* One recv that Ctrl-C ends: a game that stopped answering (stalled, or hostile and
 * trickling an endless frame) cannot hold the user in the read. The answer still owed makes
 * the connection useless then, so an interrupted read counts as a closed one (-1). */
static ssize_t recv_or_interrupt(int fd, void *buf, size_t n) {
    for (;;) {
        /* (the wait is a select: a descriptor past FD_SETSIZE only reads) */
        if (fd < FD_SETSIZE && kcmd_wait_readable(fd, -1) < 0) return -1;
        ssize_t r = recv(fd, buf, n, 0);
        if (r < 0 && errno == EINTR) continue;
        return r;
    }
}

/* Reads one answer frame "<status> <len>\n<text>"; status and text are malloc'd, text
 * NUL-terminated after its *text_len bytes (which may hold NUL bytes). */
static bool read_frame(int fd, char **status, char **text, size_t *text_len) {
    char head[64];
    size_t h = 0;
    while (h < sizeof head - 1) {
        if (recv_or_interrupt(fd, head + h, 1) <= 0) return false;
        if (head[h] == '\n') break;
        h++;
    }
    head[h] = '\0';
    char st[32];
    size_t len;
    if (sscanf(head, "%31s %zu", st, &len) != 2 || len > (64u << 20)) return false;
    char *body = malloc(len + 1);
    if (!body) return false;
    size_t got = 0;
    while (got < len) {
        ssize_t r = recv_or_interrupt(fd, body + got, len - got);
        if (r <= 0) {
            free(body);
            return false;
        }
        got += (size_t)r;
    }
    body[len] = '\0';
    if (!(*status = strdup(st))) {
        free(body);
        return false;
    }
    *text = body;
    *text_len = len;
    return true;
}

bool kcmd_remote_ask(int fd, const char *line, char **status, char **text, size_t *text_len) {
    return send_all(fd, line, strlen(line)) && send_all(fd, "\n", 1) && read_frame(fd, status, text, text_len);
}

bool kcmd_remote_login(int fd, const char *token, char **why) {
    char *status = NULL, *text = NULL;
    size_t len;
    bool sent = send_all(fd, "token ", 6) && send_all(fd, token, strlen(token)) && send_all(fd, "\n", 1);
    if (!sent || !read_frame(fd, &status, &text, &len)) {
        *why = strdup("the console closed the connection");
        return false;
    }
    bool ok = strcmp(status, "ok") == 0;
    free(status);
    if (ok) free(text);
    else *why = text;
    return ok;
}

char *kcmd_remote_token(const char *spec, const char *given, char *why, size_t size) {
    if (given) return strdup(given);
    const char *colon = strrchr(spec, ':');
    int port = colon ? atoi(colon + 1) : 0;
    char path[512];
    kiln_console_default_token_path(port, path, sizeof path);
    /* The file may lie in /tmp, where anyone can put something at its name first: only a
     * regular file of this user's that no one else can read or write is the game's (which
     * writes it 0600), and opening never follows a link or waits on a pipe. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, size, "no token: pass --token, or run as the game's user on its machine (%s: %s)", path,
                 strerror(errno));
        return NULL;
    }
    struct stat st;
    const char *refused = fstat(fd, &st) != 0               ? strerror(errno)
                          : !S_ISREG(st.st_mode)            ? "not a regular file"
                          : st.st_uid != getuid()           ? "owned by another user"
                          : (st.st_mode & (S_IRWXG | S_IRWXO)) ? "open to other users (the game writes it 0600)"
                                                            : NULL;
    char line[300];
    ssize_t got = refused ? 0 : read(fd, line, sizeof line - 1);
    close(fd);
    if (refused) {
        snprintf(why, size, "token file %s refused: %s; pass --token", path, refused);
        return NULL;
    }
    line[got > 0 ? got : 0] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    if (!line[0]) {
        snprintf(why, size, "no token in %s", path);
        return NULL;
    }
    return strdup(line);
}
