/* main.c: the core_bench command line: parses options, runs the cases, prints the table and
 * writes one JSON object per case. Exits non-zero only when a case failed to run or check. */
#include "bench_core.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: core_bench [--quick] [--case NAME] [--json PATH] [--reps N] [--entities N]\n"
            "                  [--cold] [--list] [--verbose]\n"
            "  --quick       100k entities (10k for add_remove), 3 repetitions: a smoke run\n"
            "  --case NAME   run one case (repeatable)\n"
            "  --json PATH   write one JSON object per case to PATH, one per line\n"
            "  --reps N      timed repetitions of each side (default 11, at most %d)\n"
            "  --entities N  entities for the large cases (add_remove uses a tenth)\n"
            "  --list        print the cases and what each times, then exit\n"
            "  --cold        spawn samples start from a trimmed heap and pay page faults\n"
            "  --verbose     print every timed sample to stderr\n",
            BENCH_MAX_REPS);
}

static const char *unit_name(bench_unit unit) {
    switch (unit) {
    case BENCH_NS_PER_ENTITY: return "ns/entity";
    case BENCH_NS_PER_OP: return "ns/op";
    case BENCH_BYTES_PER_ENTITY: return "B/entity";
    }
    return "?";
}

static bool parse_count(const char *text, long long low, long long high, long long *dest) {
    char *end = NULL;
    long long value = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || value < low || value > high) return false;
    *dest = value;
    return true;
}

/* Bytes are compared at 0.1 B, the precision printed: page granularity alone adds about
 * 0.02 B per entity at 1M entities (a partly used 4 KiB page per array). */
static bool goal_met(const bench_case *c, const bench_result *r) {
    if (c->goal_is_bytes) return (double)(long long)(r->ns * 10.0 + 0.5) / 10.0 <= c->goal;
    return r->ratio <= c->goal;
}

static void print_header(void) {
    printf("%-17s %10s %10s %-10s %7s %9s %-6s %s\n", "case", "kiln", "baseline", "unit",
           "ratio", "goal", "status", "spread kiln/base");
}

static void print_row(const bench_case *c, const bench_result *r) {
    if (!r->ok) {
        printf("%-17s %10s %10s %-10s %7s %9s %-6s %s\n", c->name, "-", "-", unit_name(c->unit),
               "-", "", "FAIL", r->failure);
        return;
    }
    char goal[16];
    if (c->goal <= 0.0)
        snprintf(goal, sizeof goal, "-");
    else if (c->goal_is_bytes)
        snprintf(goal, sizeof goal, "<=%.0f B", c->goal);
    else
        snprintf(goal, sizeof goal, "<=%.2f", c->goal);
    printf("%-17s %10.3f %10.3f %-10s %7.2f %9s %-6s ", c->name, r->ns, r->baseline_ns,
           unit_name(c->unit), r->ratio, goal,
           c->goal <= 0.0 ? "info" : goal_met(c, r) ? "PASS" : "MISS");
    if (c->unit == BENCH_BYTES_PER_ENTITY)
        printf("RSS %.3f B/entity, allocator %.3f B/entity\n", r->ns, r->alloc_bytes);
    else
        printf("%.0f%%/%.0f%%\n", 100.0 * r->spread, 100.0 * r->baseline_spread);
}

int main(int argc, char **argv) {
    bench_config config = {.entities = 1000000, .small_entities = 100000, .reps = 11};
    const char *json_path = NULL;
    const bench_case *selected[64];
    int selected_count = 0;
    bool quick = false, verbose = false, cold = false;
    long long entities = 0, reps = 0;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--quick") == 0) {
            quick = true;
        } else if (strcmp(arg, "--cold") == 0) {
            cold = true;
        } else if (strcmp(arg, "--verbose") == 0 || strcmp(arg, "-v") == 0) {
            verbose = true;
        } else if (strcmp(arg, "--list") == 0) {
            int count;
            const bench_case *cases = bench_cases(&count);
            for (int k = 0; k < count; k++) printf("%-17s %s\n", cases[k].name, cases[k].about);
            return 0;
        } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (value == NULL) {
            fprintf(stderr, "core_bench: unknown option or missing value: %s\n", arg);
            usage(stderr);
            return 2;
        } else if (strcmp(arg, "--json") == 0) {
            json_path = value;
            i++;
        } else if (strcmp(arg, "--case") == 0) {
            const bench_case *c = bench_case_find(value);
            if (c == NULL) {
                fprintf(stderr, "core_bench: unknown case '%s' (see --list)\n", value);
                return 2;
            }
            if (selected_count < (int)(sizeof selected / sizeof selected[0]))
                selected[selected_count++] = c;
            i++;
        } else if (strcmp(arg, "--reps") == 0) {
            if (!parse_count(value, 1, BENCH_MAX_REPS, &reps)) {
                fprintf(stderr, "core_bench: --reps wants 1..%d, got '%s'\n", BENCH_MAX_REPS,
                        value);
                return 2;
            }
            i++;
        } else if (strcmp(arg, "--entities") == 0) {
            if (!parse_count(value, 640, 100000000, &entities)) {
                fprintf(stderr, "core_bench: --entities wants 640..100000000, got '%s'\n",
                        value);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "core_bench: unknown option: %s\n", arg);
            usage(stderr);
            return 2;
        }
    }
    if (quick) config = (bench_config){.entities = 100000, .small_entities = 10000, .reps = 3};
    if (entities > 0) {
        config.entities = entities;
        config.small_entities = entities / 10;
    }
    if (reps > 0) config.reps = (int)reps;
    config.verbose = verbose;
    config.cold = cold;
    if (selected_count == 0) {
        /* The resident-bytes cases first, on a heap no other case has used: their RSS delta
         * would otherwise count the free pages earlier cases leave in it (0.1-0.6 B/entity
         * more, depending on which cases ran before), which are not the world's. */
        int count;
        const bench_case *cases = bench_cases(&count);
        for (int k = 0; k < count; k++)
            if (cases[k].goal_is_bytes) selected[selected_count++] = &cases[k];
        for (int k = 0; k < count; k++)
            if (!cases[k].goal_is_bytes) selected[selected_count++] = &cases[k];
    }

    /* By default allocating cases reuse warm heap pages, so they time the work of spawning
     * rather than the kernel's page faults (about 3 us each on a loaded VM, which would swamp
     * both sides). --cold makes every spawn sample fault in its memory fresh instead. */
    bench_memory_policy(!config.cold);
    FILE *json = NULL;
    if (json_path != NULL && (json = bench_json_open(json_path)) == NULL) {
        fprintf(stderr, "core_bench: cannot write %s\n", json_path);
        return 2;
    }

    printf("kiln core_bench: %lld entities (%lld for add_remove), median of %d alternating "
           "repetitions, %s memory\n",
           (long long)config.entities, (long long)config.small_entities, config.reps,
           config.cold ? "cold" : "warm");
    print_header();
    fflush(stdout);

    int met = 0, missed = 0, failed = 0;
    for (int k = 0; k < selected_count; k++) {
        const bench_case *c = selected[k];
        bench_result result = {0};
        c->run(&config, &result);
        print_row(c, &result);
        fflush(stdout);
        if (!result.ok) {
            failed++;
            continue;
        }
        if (c->goal <= 0.0)
            ; /* information only */
        else if (goal_met(c, &result))
            met++;
        else
            missed++;
        bench_json_write(json, c->name, result.ns, result.baseline_ns, result.ratio);
    }
    printf("ratio = kiln median / baseline median; spread = (max - min) / median of the "
           "samples\n%d met, %d missed, %d failed\n",
           met, missed, failed);

    if (!bench_json_close(json)) {
        fprintf(stderr, "core_bench: writing %s failed\n", json_path);
        return 2;
    }
    return failed == 0 ? 0 : 1;
}
