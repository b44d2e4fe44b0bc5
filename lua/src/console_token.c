/* console_token.c: the console's secret: made from the system's randomness, written to a file
 * only the user can read, compared in constant time. Invariant: a token file is never opened
 * for writing in place: a fresh 0600 file is renamed over the path. */
#define _GNU_SOURCE /* mkostemp */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "console.h"

bool klua_token_make(char *hex) {
    unsigned char bytes[16];
    size_t have = 0;
    while (have < sizeof bytes) {
        ssize_t n = getrandom(bytes + have, sizeof bytes - have, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        have += (size_t)n;
    }
    if (have < sizeof bytes) {
        /* getrandom missing (old kernel, seccomp): the device gives the same bits */
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return false;
        have = 0;
        while (have < sizeof bytes) {
            ssize_t n = read(fd, bytes + have, sizeof bytes - have);
            if (n <= 0) {
                if (n < 0 && errno == EINTR) continue;
                close(fd);
                return false;
            }
            have += (size_t)n;
        }
        close(fd);
    }
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof bytes; i++) {
        hex[2 * i] = digits[bytes[i] >> 4];
        hex[2 * i + 1] = digits[bytes[i] & 15];
    }
    hex[32] = '\0';
    memset(bytes, 0, sizeof bytes);
    return true;
}

bool klua_token_valid(const char *token) {
    size_t n = strlen(token);
    if (n < 16 || n > KLUA_TOKEN_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        if (token[i] <= ' ' || token[i] > '~') return false;
    }
    return true;
}

int klua_token_write(const char *path, const char *token) {
    size_t n = strlen(path);
    char *tmp = malloc(n + 8);
    if (!tmp) return ENOMEM;
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".XXXXXX", 8);
    int fd = mkostemp(tmp, O_CLOEXEC); /* O_EXCL, mode 0600; no program a fork runs inherits it */
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return e;
    }
    int e = 0;
    size_t len = strlen(token);
    if (fchmod(fd, S_IRUSR | S_IWUSR) != 0) e = errno;
    if (!e) {
        size_t off = 0;
        while (off < len) {
            ssize_t w = write(fd, token + off, len - off);
            if (w < 0) {
                if (errno == EINTR) continue;
                e = errno;
                break;
            }
            off += (size_t)w;
        }
    }
    if (!e && write(fd, "\n", 1) != 1) e = errno ? errno : EIO;
    if (close(fd) != 0 && !e) e = errno;
    /* rename replaces a symlink at path, never the file it points to */
    if (!e && rename(tmp, path) != 0) e = errno;
    if (e) unlink(tmp);
    free(tmp);
    return e;
}

void klua_token_default_path(char *path, size_t size, int port) {
    const char *dir = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (dir && dir[0] == '/' && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid())
        snprintf(path, size, "%s/kiln-console-%d.token", dir, port);
    else
        snprintf(path, size, "/tmp/kiln-console-%d-%u.token", port, (unsigned)getuid());
}

bool klua_token_equal(const char *given, size_t n, const char *token) {
    size_t len = strlen(token);
    /* the time depends on the token's length only, never on where the bytes differ */
    unsigned diff = (unsigned)(n != len);
    for (size_t i = 0; i < len; i++) {
        unsigned char g = i < n ? (unsigned char)given[i] : 0;
        diff |= (unsigned)(g ^ (unsigned char)token[i]);
    }
    return diff == 0;
}
