/* histfile.c: the REPL's history: a list of entries, oldest first, no two equal, mirrored in
 * libedit's list and in the file; an accepted line reaches the file before it runs. */
#define _GNU_SOURCE /* realpath, mkostemp */
#include "histfile.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <history.h>

#define HISTORY_MAX 1000 /* entries kept in the history file */

/* The entries, oldest first, no two equal: what libedit's list holds, and the file after
 * a rewrite. A repeated entry moves to the end. File state, as libedit's list is global. */
static struct {
    char *path;
    char **lines;
    size_t count;
} hist;

static void history_drop(size_t i) {
    free(hist.lines[i]);
    memmove(hist.lines + i, hist.lines + i + 1, sizeof *hist.lines * (hist.count - i - 1));
    hist.count--;
}

/* Adds line as the newest entry; true when an older one went (a repeat, or the oldest). */
static bool history_add(const char *line) {
    bool reshaped = false;
    for (size_t i = 0; i < hist.count; i++)
        if (strcmp(hist.lines[i], line) == 0) {
            history_drop(i);
            reshaped = true;
            break;
        }
    if (hist.count == HISTORY_MAX) {
        history_drop(0);
        reshaped = true;
    }
    char **p = realloc(hist.lines, sizeof *p * (hist.count + 1));
    char *copy = strdup(line);
    if (!p || !copy) {
        free(copy);
        if (p) hist.lines = p;
        return reshaped;
    }
    hist.lines = p;
    hist.lines[hist.count++] = copy;
    return reshaped;
}

/* Undoes the octal escapes (\040) of the files older versions wrote through libedit. */
static void unescape_octal(char *s) {
    char *out = s;
    for (char *in = s; *in;) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' && in[3] >= '0' &&
            in[3] <= '7') {
            *out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 4;
        } else if (in[0] == '\\' && in[1] == '\\') {
            *out++ = '\\';
            in += 2;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
}

/* Rewrites the file as the list (a regular file only: never replace /dev/null). Written to a
 * new file beside it (beside the file a link names, so the link stays) and renamed over it:
 * truncated in place, a write that failed (a full disk, a file size limit, a kill) left the
 * history cut short or empty. The new file gets the old one's mode. */
static void history_rewrite(void) {
    struct stat st;
    char *target = hist.path ? realpath(hist.path, NULL) : NULL;
    if (!target || stat(target, &st) != 0 || !S_ISREG(st.st_mode)) {
        free(target);
        return;
    }
    size_t n = strlen(target) + sizeof ".XXXXXX";
    char *tmp = malloc(n);
    int fd = -1;
    if (tmp) {
        snprintf(tmp, n, "%s.XXXXXX", target);
        fd = mkostemp(tmp, O_CLOEXEC);
    }
    FILE *f = fd >= 0 && fchmod(fd, st.st_mode & 07777) == 0 ? fdopen(fd, "w") : NULL;
    bool ok = f != NULL;
    for (size_t i = 0; ok && i < hist.count; i++) ok = fprintf(f, "%s\n", hist.lines[i]) >= 0;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f) ok = fclose(f) == 0 && ok;
    else if (fd >= 0) close(fd);
    if (fd >= 0 && !(ok && rename(tmp, target) == 0)) unlink(tmp);
    free(tmp);
    free(target);
}

static void libedit_reload(void) {
    clear_history();
    for (size_t i = 0; i < hist.count; i++) add_history(hist.lines[i]);
}

/* Loads the file, dropping repeats (a killed session leaves its entries appended). */
static void history_load(const char *path) {
    hist.path = path ? strdup(path) : NULL;
    /* opened without waiting, and read only when a file: opening a pipe (KILN_HISTORY naming
     * one) waited for a writer before the first prompt, for good */
    int fd = hist.path ? open(hist.path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) : -1;
    struct stat st;
    FILE *f = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? fdopen(fd, "r") : NULL;
    if (!f && fd >= 0) close(fd);
    if (f) {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        bool first = true, legacy = false;
        while ((n = getline(&line, &cap, f)) >= 0) {
            if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
            if (first && strcmp(line, "_HiStOrY_V2_") == 0) {
                legacy = true;
                first = false;
                continue;
            }
            first = false;
            if (legacy) unescape_octal(line);
            if (line[0]) history_add(line);
        }
        free(line);
        fclose(f);
        history_rewrite();
    }
    libedit_reload();
}

/* KILN_HISTORY, else ~/.kiln_history; NULL without HOME (then nothing is written). A HOME
 * that is empty or relative counts as none: it would put the file at /.kiln_history, or in
 * whatever folder the REPL was started from. */
static char *history_path(void) {
    const char *env = getenv("KILN_HISTORY");
    if (env) return strdup(env);
    const char *home = getenv("HOME");
    if (!home || home[0] != '/') return NULL;
    size_t n = strlen(home) + 32;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/.kiln_history", home);
    return p;
}

void kcmd_history_open(void) {
    using_history();
    char *path = history_path();
    history_load(path);
    free(path);
}

/* Appends to the file unless the list was reshaped, which rewrites it whole. */
void kcmd_history_accept(const char *line) {
    if (!line[0]) return;
    if (history_add(line)) {
        libedit_reload();
        history_rewrite();
        return;
    }
    add_history(line);
    /* without waiting: a pipe no one reads is refused (ENXIO) instead of hanging the line */
    int fd = hist.path ? open(hist.path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666) : -1;
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!f && fd >= 0) close(fd);
    if (f) {
        fprintf(f, "%s\n", line);
        fclose(f);
    }
}

void kcmd_history_close(void) {
    history_rewrite();
    for (size_t i = 0; i < hist.count; i++) free(hist.lines[i]);
    free(hist.lines);
    free(hist.path);
    memset(&hist, 0, sizeof hist);
}
