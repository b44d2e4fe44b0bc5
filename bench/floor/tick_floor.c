/* floor/tick_floor.c: what a per-row change tick costs a plain C loop on this machine, with no kiln
 * code: the bound under the iter2_mark case (`make bench-floor`, results on stdout only). */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The iter2_mark kernel (x and y of a position plus a velocity), each loop out of line and
 * compiled with the benchmark's flags, so the only difference between them is the stores. */
typedef struct vec2 { float x, y; } vec2;

#define ROWS 1000000
#define SAMPLES 21

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* The plain loop: iter2_mark's baseline. */
__attribute__((noinline)) static void loop_plain(vec2 *restrict p, const vec2 *restrict v, int n) {
    for (int i = 0; i < n; i++) { p[i].x += v[i].x; p[i].y += v[i].y; }
}

/* A 4-byte tick stored per row: what marking every row writes. */
__attribute__((noinline)) static void loop_tick32(vec2 *restrict p, const vec2 *restrict v,
                                                  uint32_t *restrict t, uint32_t tick, int n) {
    for (int i = 0; i < n; i++) { p[i].x += v[i].x; p[i].y += v[i].y; t[i] = tick; }
}

/* A 2-byte tick per row: half the stream (not kiln's layout; the bound of a smaller tick). */
__attribute__((noinline)) static void loop_tick16(vec2 *restrict p, const vec2 *restrict v,
                                                  uint16_t *restrict t, uint32_t tick, int n) {
    for (int i = 0; i < n; i++) { p[i].x += v[i].x; p[i].y += v[i].y; t[i] = (uint16_t)tick; }
}

/* The ticks written by a second loop after the first: a mark kept aside and filled later. */
__attribute__((noinline)) static void loop_fill_after(vec2 *restrict p, const vec2 *restrict v,
                                                      uint32_t *restrict t, uint32_t tick, int n) {
    for (int i = 0; i < n; i++) { p[i].x += v[i].x; p[i].y += v[i].y; }
    for (int i = 0; i < n; i++) t[i] = tick;
}

/* The 4-byte tick stored around the caches (no read for ownership). */
__attribute__((noinline)) static void loop_tick_stream(vec2 *restrict p, const vec2 *restrict v,
                                                       uint32_t *restrict t, uint32_t tick, int n) {
    for (int i = 0; i < n; i++) {
        p[i].x += v[i].x;
        p[i].y += v[i].y;
        _mm_stream_si32((int *)&t[i], (int)tick);
    }
    _mm_sfence();
}

enum { PLAIN, TICK32, TICK16, FILL_AFTER, TICK_STREAM, LOOPS };
static const char *const names[LOOPS] = {"plain", "tick32", "tick16", "fill_after", "tick_stream"};
static const char *const about[LOOPS] = {
    "the plain loop (iter2_mark's baseline)", "a 4-byte tick stored per row (kiln's mark)",
    "a 2-byte tick stored per row", "4-byte ticks filled by a second loop",
    "a 4-byte tick per row, non-temporal store"};

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    vec2 *p = aligned_alloc(64, ROWS * sizeof *p), *v = aligned_alloc(64, ROWS * sizeof *v);
    uint32_t *t32 = aligned_alloc(64, ROWS * sizeof *t32);
    uint16_t *t16 = aligned_alloc(64, ROWS * sizeof *t16);
    if (!p || !v || !t32 || !t16) return fprintf(stderr, "tick_floor: out of memory\n"), 1;
    for (int i = 0; i < ROWS; i++) {
        p[i] = (vec2){(float)i, (float)-i};
        v[i] = (vec2){1.0f, 0.5f};
    }
    memset(t32, 0, ROWS * sizeof *t32);
    memset(t16, 0, ROWS * sizeof *t16);
    /* The row count is read at run time, as the benchmark's chunk counts are, so the loops
     * compile as its loops do: GCC's -O2 vectorises a loop only when it knows the count, and
     * a constant here (propagated into the loops) once made them vector code, which neither
     * iter2_mark's side nor its baseline is. */
    static volatile int rows_at_run_time = ROWS;
    const int rows = rows_at_run_time;
    static double samples[LOOPS][SAMPLES];
    for (int s = 0; s < SAMPLES; s++) { /* the loops alternate, so noise hits each alike */
        for (int k = 0; k < LOOPS; k++) {
            uint32_t tick = (uint32_t)(s * LOOPS + k + 1);
            double t0 = now_ns();
            switch (k) {
            case PLAIN: loop_plain(p, v, rows); break;
            case TICK32: loop_tick32(p, v, t32, tick, rows); break;
            case TICK16: loop_tick16(p, v, t16, tick, rows); break;
            case FILL_AFTER: loop_fill_after(p, v, t32, tick, rows); break;
            case TICK_STREAM: loop_tick_stream(p, v, t32, tick, rows); break;
            }
            samples[k][s] = (now_ns() - t0) / ROWS;
        }
    }
    if (t32[ROWS - 1] == 0 || t16[ROWS - 1] == 0) return fprintf(stderr, "tick_floor: no ticks\n"), 1;
    printf("tick_floor: %d rows of two 8-byte values, median of %d alternating samples\n", ROWS,
           SAMPLES);
    double plain = 0;
    for (int k = 0; k < LOOPS; k++) {
        qsort(samples[k], SAMPLES, sizeof samples[k][0], by_value);
        double median = samples[k][SAMPLES / 2];
        if (k == PLAIN) plain = median;
        printf("%-12s %7.3f ns/row %6.2fx  %s\n", names[k], median, median / plain, about[k]);
    }
    free(p), free(v), free(t32), free(t16);
    return 0;
}
