/* fuzz_replay.c: the replay command (no libFuzzer needed): replays inputs, files or whole
 * directories, with the allocation-failure sweep (e.g. a crash file libFuzzer wrote), or runs
 * random inputs (--random COUNT SEED), writing a failing one to fuzz-random-failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

/* xorshift64*: inputs that depend only on the seed. */
static uint64_t next_random(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 2685821657736338717ull;
}

/* Random inputs: each one is written to fuzz-random-failure before it runs, so the file left
 * behind after an abort is the failing input. */
static int random_inputs(char **argv, int i, int64_t sweep) {
    long count = strtol(argv[i + 1], NULL, 10);
    uint64_t state = strtoull(argv[i + 2], NULL, 10) * 0x9e3779b97f4a7c15ull + 1;
    static uint8_t data[1024];
    fuzz_replay_stats stats = {0, 0, 0};
    for (long n = 0; n < count; n++) {
        size_t size = 16 + next_random(&state) % (sizeof data - 16);
        for (size_t k = 0; k < size; k++) data[k] = (uint8_t)(next_random(&state) >> 56);
        data[0] &= 1;
        FILE *f = fopen("fuzz-random-failure", "wb");
        if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) return 2;
        int64_t requests = fuzz_run(data, size, -1, false);
        stats.runs++;
        if (requests <= sweep) {
            for (int64_t k = 0; k < requests; k++) {
                fuzz_run(data, size, k, false);
                fuzz_run(data, size, k, true);
                stats.runs += 2;
            }
            stats.swept++;
        }
        stats.inputs++;
    }
    remove("fuzz-random-failure");
    printf("kiln fuzz random: %lld inputs (%lld swept), %lld runs: the world equalled the model\n",
           (long long)stats.inputs, (long long)stats.swept, (long long)stats.runs);
    return 0;
}

int main(int argc, char **argv) {
    int64_t sweep = 1500;
    int i = 1;
    if (i + 1 < argc && strcmp(argv[i], "--sweep") == 0) {
        sweep = strtoll(argv[i + 1], NULL, 10);
        i += 2;
    }
    if (i + 2 < argc && strcmp(argv[i], "--random") == 0) return random_inputs(argv, i, sweep);
    if (i >= argc) {
        fprintf(stderr, "usage: %s [--sweep MAX_REQUESTS] FILE_OR_DIR... | --random COUNT SEED\n", argv[0]);
        return 2;
    }
    fuzz_replay_stats stats = {0, 0, 0};
    for (; i < argc; i++) {
        if (!fuzz_replay_path(argv[i], sweep, &stats)) {
            fprintf(stderr, "kiln fuzz replay: no such file or directory: %s\n", argv[i]);
            return 2;
        }
    }
    printf("kiln fuzz replay: %lld inputs (%lld swept), %lld runs: the world equalled the model\n",
           (long long)stats.inputs, (long long)stats.swept, (long long)stats.runs);
    return 0;
}
