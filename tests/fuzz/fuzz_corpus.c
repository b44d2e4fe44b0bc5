/* fuzz_corpus.c: replays stored fuzz inputs without libFuzzer: each input once as is, then
 * with an allocation failure injected at every allocation index (one-shot, then persistent)
 * while the input makes at most sweep_limit requests. Any mismatch aborts (fuzz_fail). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static void replay_file(const char *path, int64_t sweep_limit, fuzz_replay_stats *stats) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kiln fuzz: cannot open %s\n", path);
        abort();
    }
    static uint8_t data[1 << 16];
    size_t size = fread(data, 1, sizeof data, f);
    fclose(f);
    fuzz_set_input_name(path);
    int64_t requests = fuzz_run(data, size, -1, false);
    stats->runs++;
    if (requests <= sweep_limit) {
        for (int64_t k = 0; k < requests; k++) {
            fuzz_run(data, size, k, false);
            fuzz_run(data, size, k, true);
            stats->runs += 2;
        }
        stats->swept++;
    }
    stats->inputs++;
    fuzz_set_input_name(NULL);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

bool fuzz_replay_path(const char *path, int64_t sweep_limit, fuzz_replay_stats *stats) {
    struct stat st;
    if (stat(path, &st) != 0) return false;
    if (!S_ISDIR(st.st_mode)) {
        replay_file(path, sweep_limit, stats);
        return true;
    }
    DIR *d = opendir(path);
    if (!d) return false;
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, cap * sizeof *names);
            if (!names) abort();
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        if (!names[n]) abort();
        snprintf(names[n], len, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    if (n > 1) qsort(names, n, sizeof names[0], by_name);
    for (size_t i = 0; i < n; i++) {
        replay_file(names[i], sweep_limit, stats);
        free(names[i]);
    }
    free(names);
    return true;
}
