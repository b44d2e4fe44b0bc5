/* fuzz_replay.c: the replay command (no libFuzzer needed): replays inputs, files or whole
 * directories, with the allocation-failure sweep, e.g. a crash file libFuzzer wrote. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int main(int argc, char **argv) {
    int64_t sweep = 1500;
    int i = 1;
    if (i + 1 < argc && strcmp(argv[i], "--sweep") == 0) {
        sweep = strtoll(argv[i + 1], NULL, 10);
        i += 2;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: %s [--sweep MAX_REQUESTS] FILE_OR_DIR...\n", argv[0]);
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
