/* schedule_order.c: stage assignment for a schedule: before/after chains, then conflicting
 * access in declaration order, then stages as longest chains.
 * Invariant: a build never meets a cycle (kiln_schedule_add refuses the system closing one). */
#include "schedule_order.h"

#include <stdlib.h>
#include <string.h>

#include "world.h"

kiln_result kl_schedule_scratch(kiln_schedule *s, size_t bytes, void **mem, const char *call) {
    /* Never NULL, even for an empty schedule: callers offset into it (NULL + 0 is undefined). */
    if (bytes < sizeof(uint64_t)) bytes = sizeof(uint64_t);
    if (bytes > s->scratch_size) {
        kl_free(&s->world->alloc, s->scratch, s->scratch_size);
        s->scratch_size = 0;
        s->scratch = kl_alloc(&s->world->alloc, bytes);
        if (s->scratch == NULL) return kl_fail(s->world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
        s->scratch_size = bytes;
    }
    *mem = s->scratch;
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Bit matrices: row a, bit b set means a runs before b (directly or, once closed, through a  */
/* chain). Rows are words wide words of 64 bits.                                              */
/* ------------------------------------------------------------------------------------------ */

typedef struct bit_matrix {
    int32_t n;
    int32_t words;  /* per row */
    uint64_t *bits;
} bit_matrix;

static uint64_t *row_of(const bit_matrix *m, int32_t a) { return m->bits + (size_t)a * (size_t)m->words; }

static bool has_bit(const bit_matrix *m, int32_t a, int32_t b) {
    return (row_of(m, a)[b >> 6] >> (b & 63)) & 1u;
}

static void set_bit(bit_matrix *m, int32_t a, int32_t b) { row_of(m, a)[b >> 6] |= (uint64_t)1 << (b & 63); }

static void or_row(bit_matrix *m, int32_t dst, int32_t src) {
    uint64_t *d = row_of(m, dst);
    const uint64_t *r = row_of(m, src);
    for (int32_t w = 0; w < m->words; w++) d[w] |= r[w];
}


/* A build's memory, all in scratch: the closure as rows (m: what a system runs before) and as
 * columns (t: row b holds what runs before b), two rows of scratch bits, and ints int32
 * arrays of n. */
typedef struct build_memory {
    bit_matrix m, t;
    uint64_t *xs, *ys;
    int32_t *ints;
} build_memory;

static kiln_result reserve(kiln_schedule *s, build_memory *b, int32_t n, int32_t ints, const char *call) {
    int32_t words = (n + 63) / 64;
    b->m = b->t = (bit_matrix){.n = n, .words = words};
    size_t matrix = kl_mul(sizeof(uint64_t), kl_mul((size_t)n, (size_t)words));
    size_t rows = sizeof(uint64_t) * 2 * (size_t)words, rest = rows + sizeof(int32_t) * (size_t)n * (size_t)ints;
    size_t bytes = matrix < SIZE_MAX / 4 ? 2 * matrix + rest : SIZE_MAX;
    void *mem;
    kiln_result r = kl_schedule_scratch(s, bytes, &mem, call);
    if (r != KILN_OK) return r;
    b->m.bits = mem;
    b->t.bits = b->m.bits + matrix / sizeof(uint64_t);
    b->xs = b->t.bits + matrix / sizeof(uint64_t);
    b->ys = b->xs + words;
    b->ints = (int32_t *)(b->ys + words);
    if (n > 0) memset(b->m.bits, 0, 2 * matrix);
    return KILN_OK;
}

/* The explicit edges among the first n systems; names of no live system are left out (they
 * wait for a system of that name). after: the named system first. */
static void link_explicit(const kiln_schedule *s, bit_matrix *m) {
    for (int32_t i = 0; i < m->n; i++) {
        const kl_system *sys = s->systems[i];
        if (atomic_load_explicit(&sys->removing, memory_order_relaxed)) continue;
        for (int32_t k = 0; k < sys->after_count; k++) {
            int32_t x = kl_schedule_lookup(s, sys->after[k], m->n);
            if (x >= 0) set_bit(m, x, i);
        }
        for (int32_t k = 0; k < sys->before_count; k++) {
            int32_t x = kl_schedule_lookup(s, sys->before[k], m->n);
            if (x >= 0) set_bit(m, i, x);
        }
    }
}


/* ------------------------------------------------------------------------------------------ */
/* Build                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static bool shares(const kiln_component *a, int32_t na, const kiln_component *b, int32_t nb) {
    for (int32_t i = 0; i < na; i++)
        for (int32_t j = 0; j < nb; j++)
            if (a[i] == b[j]) return true;
    return false;
}

static bool conflict(const kl_system *a, const kl_system *b) {
    if (a->exclusive || b->exclusive) return true;
    return shares(a->writes, a->write_count, b->writes, b->write_count) ||
           shares(a->writes, a->write_count, b->reads, b->read_count) ||
           shares(b->writes, b->write_count, a->reads, a->read_count);
}

/* Phase 2: the transitive closure of the explicit edges (Warshall, a row at a time), then its
 * columns: row b of t holds what runs before b. */
static void close_edges(bit_matrix *m, bit_matrix *t) {
    for (int32_t k = 0; k < m->n; k++)
        for (int32_t i = 0; i < m->n; i++)
            if (has_bit(m, i, k)) or_row(m, i, k);
    for (int32_t a = 0; a < m->n; a++)
        for (int32_t w = 0; w < m->words; w++)
            for (uint64_t bits = row_of(m, a)[w]; bits; bits &= bits - 1)
                set_bit(t, w * 64 + __builtin_ctzll(bits), a);
}

/* Adds a -> b to a closure held both ways (neither reaches the other yet): whatever reaches a
 * (or is a) and did not reach b now reaches b and all b reaches; whatever b reaches (or is b)
 * and a did not reach now follows a and all that reaches a. Rows already holding it are left
 * alone, so each pair is made reachable once: O(n^3 / 64) for a whole build at worst. */
static void add_edge(build_memory *g, int32_t a, int32_t b) {
    bit_matrix *m = &g->m, *t = &g->t;
    const uint64_t *before_a = row_of(t, a), *before_b = row_of(t, b), *after_a = row_of(m, a),
                   *after_b = row_of(m, b);
    for (int32_t w = 0; w < m->words; w++) {
        g->xs[w] = before_a[w] & ~before_b[w];
        g->ys[w] = after_b[w] & ~after_a[w];
    }
    g->xs[a >> 6] |= (uint64_t)1 << (a & 63);
    g->ys[b >> 6] |= (uint64_t)1 << (b & 63);
    /* b is not among xs and a not among ys, so the rows read below do not change here */
    for (int32_t w = 0; w < m->words; w++)
        for (uint64_t bits = g->xs[w]; bits; bits &= bits - 1) {
            int32_t x = w * 64 + __builtin_ctzll(bits);
            or_row(m, x, b);
            set_bit(m, x, b);
        }
    for (int32_t w = 0; w < m->words; w++)
        for (uint64_t bits = g->ys[w]; bits; bits &= bits - 1) {
            int32_t y = w * 64 + __builtin_ctzll(bits);
            or_row(t, y, a);
            set_bit(t, y, a);
        }
}

/* Phase 3: each conflicting pair not yet ordered by a chain of constraints runs in
 * declaration order. Adding a -> b only when nothing already orders b before a keeps the
 * graph acyclic, so conflicts never make a cycle, and when declaration order agrees with
 * every chain the result is plain declaration order. */
static void order_conflicts(const kiln_schedule *s, build_memory *g) {
    for (int32_t b = 0; b < g->m.n; b++)
        for (int32_t a = 0; a < b; a++) {
            if (has_bit(&g->m, a, b) || has_bit(&g->m, b, a) || !conflict(s->systems[a], s->systems[b])) continue;
            add_edge(g, a, b);
        }
}

/* Phase 4: stages as longest chains: a system's stage is one past the latest of the systems
 * that reach it. Those have fewer predecessors, so ordering by predecessor count (a counting
 * sort) is a topological order. */
static void assign_stages(const bit_matrix *t, int32_t *before_count, int32_t *topo, int32_t *stage) {
    int32_t n = t->n;
    for (int32_t b = 0; b < n; b++) {
        before_count[b] = 0;
        for (int32_t w = 0; w < t->words; w++) before_count[b] += __builtin_popcountll(row_of(t, b)[w]);
        KILN_ASSERT(!has_bit(t, b, b), "before/after cycle in a schedule build");
        stage[b] = 0; /* the count of each level first, for the sort */
    }
    for (int32_t b = 0; b < n; b++) stage[before_count[b]]++;
    for (int32_t level = 0, at = 0; level < n; level++) {
        int32_t c = stage[level];
        stage[level] = at;
        at += c;
    }
    for (int32_t b = 0; b < n; b++) topo[stage[before_count[b]]++] = b;
    for (int32_t k = 0; k < n; k++) {
        int32_t b = topo[k];
        stage[b] = 0;
        for (int32_t w = 0; w < t->words; w++)
            for (uint64_t bits = row_of(t, b)[w]; bits; bits &= bits - 1) {
                int32_t a = w * 64 + __builtin_ctzll(bits);
                if (stage[b] < stage[a] + 1) stage[b] = stage[a] + 1;
            }
    }
}

/* Phase 5: the run order, stage by stage and by declaration within a stage. */
static void lay_out(kiln_schedule *s, int32_t n, const int32_t *stage) {
    int32_t stages = 0;
    for (int32_t i = 0; i < n; i++) {
        s->systems[i]->stage = stage[i];
        if (stage[i] + 1 > stages) stages = stage[i] + 1;
    }
    int32_t k = 0;
    for (int32_t st = 0; st < stages; st++) {
        s->stage_start[st] = k;
        for (int32_t i = 0; i < n; i++)
            if (stage[i] == st) s->order[k++] = i;
    }
    s->stage_start[stages] = k;
    s->stage_count = stages;
    s->built = true;
}

kiln_result kl_schedule_order(kiln_schedule *s) {
    kl_allocator *al = &s->world->alloc;
    int32_t n = s->system_count;
    /* Phase 1: all the memory, before anything changes. */
    build_memory g;
    kiln_result r = reserve(s, &g, n, 3, "kiln_schedule_build");
    if (r != KILN_OK) return r;
    if (!kl_grow(al, (void **)&s->order, &s->order_cap, n, sizeof(int32_t), 16) ||
        !kl_grow(al, (void **)&s->stage_start, &s->stage_cap, n + 1, sizeof(int32_t), 16) ||
        !kl_grow(al, (void **)&s->job_list, &s->job_cap, n, sizeof(kiln_job), 16))
        return kl_fail(s->world, KILN_ERR_OUT_OF_MEMORY, "kiln_schedule_build: out of memory");
    int32_t *ints = g.ints;
    link_explicit(s, &g.m);
    close_edges(&g.m, &g.t);
    order_conflicts(s, &g);
    assign_stages(&g.t, ints, ints + n, ints + 2 * n);
    lay_out(s, n, ints + 2 * n);
    return KILN_OK;
}
