/* schedule_order.c: before/after resolution, cycle checks and stage assignment for a schedule.
 * Invariant: a build never meets a cycle (kiln_schedule_add refuses the system closing one). */
#include "schedule_order.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.h"

static bool live_named(const kl_system *sys, const char *name) {
    return !atomic_load_explicit(&sys->removing, memory_order_relaxed) && strcmp(sys->name, name) == 0;
}

/* At most one live system holds a name (add refuses a second), but one removed during a run
 * may share it with its successor until the run ends: every entry under the hash is looked at. */
int32_t kl_schedule_lookup(const kiln_schedule *s, const char *name, int32_t count) {
    if (name == NULL) return -1;
    uint32_t key = kl_hash_str(name), cursor = 0, value;
    while ((value = kl_map_next(&s->names, key, &cursor)) != 0) {
        int32_t i = (int32_t)value - 1;
        if (i < count && live_named(s->systems[i], name)) return i;
    }
    for (int32_t i = s->system_count; i < count; i++)
        if (live_named(s->systems[i], name)) return i;
    return -1;
}

void kl_schedule_index_names(kiln_schedule *s) {
    kl_map_clear(&s->names);
    for (int32_t i = 0; i < s->system_count; i++) {
        bool put = kl_map_put(&s->world->alloc, &s->names, kl_hash_str(s->systems[i]->name), (uint32_t)i + 1);
        KILN_ASSERT(put, "a cleared index has room for what it held");
        (void)put;
    }
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

/* Points *mem at the schedule's scratch memory, at least bytes of it, kept between calls so a
 * schedule that changes and rebuilds in a steady state allocates nothing. */
static kiln_result scratch(kiln_schedule *s, size_t bytes, void **mem, const char *call) {
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

/* Scratch for a matrix of n rows plus ints int32 arrays of n. */
static kiln_result reserve(kiln_schedule *s, bit_matrix *m, int32_t n, int32_t ints, int32_t **extra,
                           const char *call) {
    m->n = n;
    m->words = (n + 63) / 64;
    size_t matrix = kl_mul(sizeof(uint64_t), kl_mul((size_t)n, (size_t)m->words));
    size_t bytes = matrix == SIZE_MAX ? SIZE_MAX : matrix + sizeof(int32_t) * (size_t)n * (size_t)ints;
    void *mem;
    kiln_result r = scratch(s, bytes, &mem, call);
    if (r != KILN_OK) return r;
    m->bits = mem;
    if (n > 0) memset(m->bits, 0, matrix);
    *extra = (int32_t *)((char *)s->scratch + matrix);
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
/* Cycle check at add                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* Appends "'name'" to buf at *len, if it fits. */
static bool append_name(char *buf, size_t size, size_t *len, const char *name, const char *sep) {
    size_t need = strlen(sep) + strlen(name) + 2;
    if (*len + need >= size) return false;
    *len += (size_t)snprintf(buf + *len, size - *len, "%s'%s'", sep, name);
    return true;
}

/* The graph of the cycle check. Nodes 0 .. count - 1 are the systems (one being removed has no
 * edges); nodes count .. nodes - 1 are the names that others' before/after name and no live
 * system holds, which wait for a system of that name. A cycle through waiting names can never
 * be satisfied, so the add whose own constraints close it is refused there: a later system
 * of such a name brings no edge into the graph but its own, and one that declares no
 * before/after is never refused for a cycle. */
typedef struct order_graph {
    int32_t count, nodes;
    const char **waiting; /* sorted, distinct */
    int32_t *first;       /* node u's successors: to[first[u] .. first[u + 1]) */
    int32_t *to;
} order_graph;

static const char *node_name(const kiln_schedule *s, const order_graph *g, int32_t u) {
    return u < g->count ? s->systems[u]->name : g->waiting[u - g->count];
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Writes the cycle c -> path... -> c into the world error, eliding the middle when long. */
static kiln_result report_cycle(kiln_schedule *s, const order_graph *g, const char *fn, int32_t c,
                                const int32_t *path, int32_t length) {
    char text[KL_ERROR_SIZE - 40]; /* with the call's name and " would form a cycle" */
    size_t len = 0, room = sizeof text - (KILN_MAX_NAME + 6) - 8; /* keeps " -> ... -> 'c'" */
    text[0] = '\0';
    append_name(text, sizeof text, &len, node_name(s, g, c), "");
    int32_t k = 0;
    for (; k < length; k++)
        if (!append_name(text, room, &len, node_name(s, g, path[k]), " -> ")) break;
    if (k < length) len += (size_t)snprintf(text + len, sizeof text - len, " -> ...");
    append_name(text, sizeof text, &len, node_name(s, g, c), " -> ");
    return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT, "%s: %s would form a cycle", fn, text);
}

/* A live system's j-th before/after name, its afters first; *after tells which. */
static const char *constraint(const kl_system *sys, int32_t j, bool *after) {
    *after = j < sys->after_count;
    return *after ? sys->after[j] : sys->before[j - sys->after_count];
}

static int32_t constraints(const kl_system *sys) {
    return atomic_load_explicit(&sys->removing, memory_order_relaxed) ? 0
                                                                      : sys->after_count + sys->before_count;
}

kiln_result kl_schedule_check_cycle(kiln_schedule *s, int32_t count, int32_t candidate, const char *fn) {
    /* Only the candidate's own edges are new (its name had the others' edges as a waiting
     * node, or as the system it replaces): without any, the graph stays acyclic. So adding
     * systems without before/after costs no graph at all. */
    if (constraints(s->systems[candidate]) == 0) return KILN_OK;
    size_t edges = 0;
    for (int32_t i = 0; i < count; i++) edges += (size_t)constraints(s->systems[i]);
    /* At most one waiting name per edge: the nodes fit count + edges. */
    size_t most = (size_t)count + edges;
    size_t slots = 2; /* the table that keeps each waiting name once: at most half full */
    while (slots < 2 * edges) slots <<= 1;
    size_t bytes = sizeof(const char *) * edges + sizeof(int32_t) * (edges * 4 + most * 3 + 1 + slots);
    void *mem;
    kiln_result r = scratch(s, bytes, &mem, fn);
    if (r != KILN_OK) return r;
    order_graph g = {.count = count, .waiting = mem};
    int32_t *target = (int32_t *)(g.waiting + edges), *from = target + edges, *by_target = from + edges;
    g.to = by_target + edges;
    g.first = g.to + edges;
    int32_t *queue = g.first + most + 1, *parent = queue + most, *seen = parent + most;

    /* Resolve every name: a live system (through the index), or a waiting name, taken once
     * (seen holds its place in waiting, open-addressed by its hash) and sorted below, so that
     * many systems naming one absent system cost no sort of them all. */
    uint32_t mask = (uint32_t)(slots - 1);
    for (size_t t = 0; t < slots; t++) seen[t] = -1;
    int32_t distinct = 0;
    bool after;
    for (int32_t i = 0, k = 0; i < count; i++)
        for (int32_t j = 0; j < constraints(s->systems[i]); j++, k++) {
            const char *name = constraint(s->systems[i], j, &after);
            target[k] = kl_schedule_lookup(s, name, count);
            if (target[k] >= 0) continue;
            uint32_t t = kl_hash_str(name) & mask;
            while (seen[t] >= 0 && strcmp(g.waiting[seen[t]], name) != 0) t = (t + 1) & mask;
            if (seen[t] < 0) {
                seen[t] = distinct;
                g.waiting[distinct++] = name;
            }
        }
    qsort(g.waiting, (size_t)distinct, sizeof *g.waiting, compare_names);
    g.nodes = count + distinct;

    /* The edges, after x as x -> i and before x as i -> x, then successor lists by source. */
    for (int32_t u = 0; u <= g.nodes; u++) g.first[u] = 0;
    for (int32_t i = 0, k = 0; i < count; i++)
        for (int32_t j = 0; j < constraints(s->systems[i]); j++, k++) {
            const char *name = constraint(s->systems[i], j, &after);
            int32_t x = target[k];
            if (x < 0) {
                const char **hit = bsearch(&name, g.waiting, (size_t)distinct, sizeof *g.waiting,
                                           compare_names);
                x = count + (int32_t)(hit - g.waiting);
            }
            from[k] = after ? x : i;
            target[k] = after ? i : x;
            g.first[from[k] + 1]++;
        }
    /* Each list in target order, as a scan of a matrix row meets them (the reported cycle
     * among the shortest ones does not depend on declaration order): edges counting-sorted
     * by target, then placed stably by source, parent serving as the cursors. */
    for (int32_t u = 0; u < g.nodes; u++) parent[u] = 0;
    for (size_t e = 0; e < edges; e++) parent[target[e]]++;
    for (int32_t u = 0, sum = 0; u < g.nodes; u++) {
        int32_t n = parent[u];
        parent[u] = sum;
        sum += n;
    }
    for (size_t e = 0; e < edges; e++) by_target[parent[target[e]]++] = (int32_t)e;
    for (int32_t u = 0; u < g.nodes; u++) g.first[u + 1] += g.first[u];
    for (int32_t u = 0; u < g.nodes; u++) parent[u] = g.first[u];
    for (size_t i = 0; i < edges; i++) {
        int32_t e = by_target[i];
        g.to[parent[from[e]]++] = target[e];
    }

    /* Breadth first from the candidate: the first edge back to it closes a shortest cycle. */
    int32_t c = candidate;
    for (int32_t u = 0; u < g.nodes; u++) parent[u] = -2;
    int32_t head = 0, tail = 0;
    queue[tail++] = c;
    parent[c] = -1;
    while (head < tail) {
        int32_t u = queue[head++];
        for (int32_t e = g.first[u]; e < g.first[u + 1]; e++) {
            int32_t v = g.to[e];
            if (v == c) {
                /* The path c -> ... -> u, written backwards into queue's consumed front. */
                int32_t length = 0;
                for (int32_t x = u; x != c; x = parent[x]) length++;
                int32_t k = length;
                for (int32_t x = u; x != c; x = parent[x]) queue[--k] = x;
                return report_cycle(s, &g, fn, c, queue, length);
            }
            if (parent[v] != -2) continue;
            parent[v] = u;
            queue[tail++] = v;
        }
    }
    return KILN_OK;
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

/* Phase 2: the transitive closure of the explicit edges (Warshall, a row at a time). */
static void close_edges(bit_matrix *m) {
    for (int32_t k = 0; k < m->n; k++)
        for (int32_t i = 0; i < m->n; i++)
            if (has_bit(m, i, k)) or_row(m, i, k);
}

/* Phase 3: each conflicting pair not yet ordered by a chain of constraints runs in
 * declaration order. Adding a -> b only when nothing already orders b before a keeps the
 * graph acyclic, so conflicts never make a cycle, and when declaration order agrees with
 * every chain the result is plain declaration order. */
static void order_conflicts(const kiln_schedule *s, bit_matrix *m) {
    for (int32_t b = 0; b < m->n; b++)
        for (int32_t a = 0; a < b; a++) {
            if (has_bit(m, a, b) || has_bit(m, b, a) || !conflict(s->systems[a], s->systems[b])) continue;
            for (int32_t x = 0; x < m->n; x++)
                if (x == a || has_bit(m, x, a)) {
                    or_row(m, x, b);
                    set_bit(m, x, b);
                }
        }
}

/* Phase 4: stages as longest chains: a system's stage is one past the latest of the systems
 * that reach it. Those have fewer predecessors, so ordering by predecessor count is a
 * topological order. */
static void assign_stages(bit_matrix *m, int32_t *before_count, int32_t *topo, int32_t *stage) {
    int32_t n = m->n;
    for (int32_t b = 0; b < n; b++) {
        before_count[b] = 0;
        for (int32_t a = 0; a < n; a++) before_count[b] += has_bit(m, a, b);
        KILN_ASSERT(!has_bit(m, b, b), "before/after cycle in a schedule build");
    }
    int32_t k = 0;
    for (int32_t level = 0; level < n && k < n; level++)
        for (int32_t b = 0; b < n; b++)
            if (before_count[b] == level) topo[k++] = b;
    for (int32_t t = 0; t < n; t++) {
        int32_t b = topo[t];
        stage[b] = 0;
        for (int32_t a = 0; a < n; a++)
            if (has_bit(m, a, b) && stage[b] < stage[a] + 1) stage[b] = stage[a] + 1;
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
    bit_matrix m;
    int32_t *ints;
    kiln_result r = reserve(s, &m, n, 3, &ints, "kiln_schedule_build");
    if (r != KILN_OK) return r;
    if (!kl_grow(al, (void **)&s->order, &s->order_cap, n, sizeof(int32_t), 16) ||
        !kl_grow(al, (void **)&s->stage_start, &s->stage_cap, n + 1, sizeof(int32_t), 16) ||
        !kl_grow(al, (void **)&s->job_list, &s->job_cap, n, sizeof(kiln_job), 16))
        return kl_fail(s->world, KILN_ERR_OUT_OF_MEMORY, "kiln_schedule_build: out of memory");
    link_explicit(s, &m);
    close_edges(&m);
    order_conflicts(s, &m);
    assign_stages(&m, ints, ints + n, ints + 2 * n);
    lay_out(s, n, ints + 2 * n);
    return KILN_OK;
}
