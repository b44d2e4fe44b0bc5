/* bench_util.c: timing, statistics, RSS and JSON helpers shared by the kiln benchmarks.
 * No global state except the volatile sink, which exists only to defeat dead-code removal. */
#include "bench_util.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

static volatile uint64_t sink;

double bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *values, int count) {
    if (count <= 0) return 0.0;
    qsort(values, (size_t)count, sizeof *values, compare_double);
    if (count % 2 == 1) return values[count / 2];
    return 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

int64_t bench_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL) return -1;
    long long size = 0, resident = 0;
    int got = fscanf(f, "%lld %lld", &size, &resident);
    fclose(f);
    if (got != 2) return -1;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return -1;
    return (int64_t)resident * (int64_t)page;
}

void bench_memory_policy(bool warm) {
#if defined(__GLIBC__)
    if (warm) {
        mallopt(M_MMAP_MAX, 0);
        mallopt(M_TRIM_THRESHOLD, -1);
    } else {
        mallopt(M_MMAP_MAX, 65536);
        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        mallopt(M_TRIM_THRESHOLD, 128 * 1024);
        malloc_trim(0);
    }
#else
    (void)warm;
#endif
}

void bench_trim_heap(void) {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

void bench_consume(uint64_t value) {
    sink ^= value;
}

uint64_t bench_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

void bench_shuffle_u64(uint64_t *values, size_t count, uint64_t seed) {
    uint64_t state = seed;
    for (size_t i = count; i > 1; i--) {
        size_t j = (size_t)(bench_rng_next(&state) % i);
        uint64_t t = values[i - 1];
        values[i - 1] = values[j];
        values[j] = t;
    }
}

FILE *bench_json_open(const char *path) {
    return fopen(path, "w");
}

void bench_json_write(FILE *out, const char *name, double ns, double baseline_ns, double ratio) {
    if (out == NULL) return;
    fprintf(out, "{\"case\": \"%s\", \"ns\": %.4f, \"baseline_ns\": %.4f, \"ratio\": %.4f}\n",
            name, ns, baseline_ns, ratio);
}

bool bench_json_close(FILE *out) {
    if (out == NULL) return true;
    bool ok = !ferror(out);
    return fclose(out) == 0 && ok;
}
