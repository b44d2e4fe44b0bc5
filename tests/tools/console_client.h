/* console_client.h: the client side of the console suites (test_console*.c): a loopback
 * connection to a console's port, whole sends, short pauses, the answer frames received.
 * Test code only. */
#ifndef KILN_TESTS_CONSOLE_CLIENT_H
#define KILN_TESTS_CONSOLE_CLIENT_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static inline void pause_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* A non-blocking connection to 127.0.0.1:port that has sent nothing yet, or -1. */
static inline int connect_port(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Sends all of s, retrying while the socket is full; stops when the console closed it. */
static inline void send_text(int fd, const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w > 0) {
            s += w;
            n -= (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            return;
        }
    }
}

/* What a connection received: answer frames, "status length\n" then length bytes of text. */
typedef struct frames {
    char buf[1 << 16];
    size_t have;  /* bytes of buf not yet taken as a frame */
    bool closed;  /* the console closed the connection */
} frames;

/* Adds what fd holds now, without waiting. */
static inline void frames_recv(frames *f, int fd) {
    ssize_t r = recv(fd, f->buf + f->have, sizeof f->buf - f->have - 1, 0);
    if (r > 0) f->have += (size_t)r;
    else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) f->closed = true;
    f->buf[f->have] = '\0';
}

/* Takes the first frame off f when it is complete, appending "status:text" and sep to out. */
static inline bool frames_take(frames *f, char *out, size_t size, const char *sep) {
    char st[32];
    size_t len;
    char *nl = memchr(f->buf, '\n', f->have);
    if (!nl || sscanf(f->buf, "%31s %zu", st, &len) != 2) return false;
    size_t head = (size_t)(nl - f->buf) + 1;
    if (f->have < head + len) return false;
    size_t o = strlen(out);
    snprintf(out + o, size - o, "%s:%.*s%s", st, (int)len, f->buf + head, sep);
    memmove(f->buf, f->buf + head + len, f->have - head - len);
    f->have -= head + len;
    f->buf[f->have] = '\0';
    return true;
}

#endif
