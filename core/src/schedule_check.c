/* schedule_check.c: a schedule's name and after indexes, and the cycle check at add, a search
 * from the candidate over what runs after it. Invariant: the before/after constraints between
 * live systems never form a cycle (an add or replace closing one is refused). */
#include "schedule_order.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.h"

/* ------------------------------------------------------------------------------------------ */
/* Indexes: names to systems, and after names to the systems whose after lists hold them      */
/* ------------------------------------------------------------------------------------------ */

static bool live_named(const kl_system *sys, const char *name) {
    return !atomic_load_explicit(&sys->removing, memory_order_relaxed) && strcmp(sys->name, name) == 0;
}

/* At most one live system holds a name (add refuses a second), but one removed during a run
 * may share it with its successor until the run ends: every entry under the hash is looked at. */
int32_t kl_schedule_lookup(const kiln_schedule *s, const char *name, int32_t count) {
    if (name == NULL) return -1;
    uint32_t key = kl_schedule_key(s, name), cursor = 0, value;
    while ((value = kl_map_next(&s->names, key, &cursor)) != 0) {
        int32_t i = (int32_t)value - 1;
        if (i < count && live_named(s->systems[i], name)) return i;
    }
    for (int32_t i = s->system_count; i < count; i++)
        if (live_named(s->systems[i], name)) return i;
    return -1;
}

uint32_t kl_schedule_key(const kiln_schedule *s, const char *name) {
    return kl_hash_name(name, strlen(name), s->world->hash_seed);
}

uint32_t kl_schedule_name_slots(const kiln_schedule *s, const char *name) {
    return kl_map_run(&s->names, kl_schedule_key(s, name));
}

bool kl_schedule_reserve_afters(kiln_schedule *s, int32_t extra) {
    kl_after_index *x = &s->afters;
    kl_allocator *a = &s->world->alloc;
    return kl_map_reserve(a, &x->chains, (uint32_t)extra) &&
           kl_grow(a, (void **)&x->heads, &x->head_cap, (int64_t)x->head_count + extra, sizeof *x->heads, 16) &&
           kl_grow(a, (void **)&x->links, &x->link_cap, (int64_t)x->link_count + extra, sizeof *x->links, 16);
}

void kl_schedule_index_afters(kiln_schedule *s, int32_t i) {
    kl_after_index *x = &s->afters;
    const kl_system *sys = s->systems[i];
    for (int32_t k = 0; k < sys->after_count; k++) {
        uint32_t key = kl_schedule_key(s, sys->after[k]), chain = kl_map_get(&x->chains, key);
        if (chain == 0) {
            KILN_ASSERT(x->head_count < x->head_cap, "the afters index was reserved");
            x->heads[x->head_count++] = -1;
            chain = (uint32_t)x->head_count;
            bool put = kl_map_put(&s->world->alloc, &x->chains, key, chain);
            KILN_ASSERT(put, "the afters index was reserved");
            (void)put;
        }
        KILN_ASSERT(x->link_count < x->link_cap, "the afters index was reserved");
        x->links[x->link_count] = (kl_after_link){i, x->heads[chain - 1]};
        x->heads[chain - 1] = x->link_count++;
    }
}

void kl_schedule_reindex(kiln_schedule *s) {
    kl_map_clear(&s->names);
    kl_map_clear(&s->afters.chains);
    s->afters.head_count = s->afters.link_count = 0;
    s->constraint_total = 0;
    for (int32_t i = 0; i < s->system_count; i++) {
        const kl_system *sys = s->systems[i];
        bool put = kl_map_put(&s->world->alloc, &s->names, kl_schedule_key(s, sys->name), (uint32_t)i + 1);
        KILN_ASSERT(put, "a cleared index has room for what it held");
        (void)put;
        kl_schedule_index_afters(s, i);
        s->constraint_total += sys->before_count + sys->after_count;
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

/* The cycle check is a breadth-first search from the candidate over what runs after it,
 * reaching only what the candidate reaches: its cost does not grow with the systems it
 * cannot reach. Nodes are the live systems among the first count and the waiting names:
 * names that before/after lists hold and no live system does, which wait for a system of
 * that name. A cycle through waiting names can never be satisfied, so the add whose own
 * constraints close it is refused there: a later system of such a name brings no edge into
 * the graph but its own, and one that declares no before/after is never refused for a cycle.
 * A node's successors are its system's before names, and the systems whose after names it
 * (found through the schedule's afters index, the candidate's own list read directly). */
typedef struct reach {
    int32_t sys;      /* the system's index, or -1 for a waiting name */
    int32_t from;     /* the entry it was reached from; -1 for the candidate */
    const char *name; /* the node's name (a system's own, or the waiting name) */
} reach;

typedef struct search {
    kiln_schedule *s;
    int32_t count, candidate;
    reach *queue;        /* every node reached, in the order reached */
    int32_t tail;
    bool closed;         /* the node being expanded runs before the candidate */
} search;

/* Successors in the order a scan of an adjacency matrix row meets them (systems by index, then
 * waiting names by name): the reported cycle among the shortest ones does not depend on the
 * order in which systems were declared or indexed. */
static int compare_reach(const void *a, const void *b) {
    const reach *x = a, *y = b;
    if ((x->sys < 0) != (y->sys < 0)) return x->sys < 0 ? 1 : -1;
    if (x->sys >= 0) return (x->sys > y->sys) - (x->sys < y->sys);
    return strcmp(x->name, y->name);
}

/* How many before/after names a system declares; none while it is being removed. */
static int32_t constraints(const kl_system *sys) {
    return atomic_load_explicit(&sys->removing, memory_order_relaxed) ? 0
                                                                      : sys->after_count + sys->before_count;
}

static bool names_after(const kl_system *sys, const char *name) {
    for (int32_t k = 0; k < sys->after_count; k++)
        if (strcmp(sys->after[k], name) == 0) return true;
    return false;
}

/* Queues the node (system sys, or the waiting name when sys is -1) reached from entry from,
 * unless it was reached before; reaching the candidate closes a cycle. */
static void reach_node(search *q, int32_t sys, const char *name, int32_t from) {
    if (sys == q->candidate) {
        q->closed = true;
        return;
    }
    kiln_schedule *s = q->s;
    if (sys >= 0) {
        if (s->systems[sys]->reached == s->check) return;
        s->systems[sys]->reached = s->check;
    } else {
        uint32_t mask = s->waiting_cap - 1, t = kl_schedule_key(s, name) & mask;
        kl_waiting *w = s->waiting;
        while (w[t].check == s->check && strcmp(w[t].name, name) != 0) t = (t + 1) & mask;
        if (w[t].check == s->check) return;
        w[t] = (kl_waiting){name, s->check};
    }
    q->queue[q->tail++] = (reach){sys, from, name};
}

/* Queues what entry h runs before, in successor order. */
static void expand(search *q, int32_t h) {
    const kiln_schedule *s = q->s;
    reach u = q->queue[h];
    int32_t first = q->tail;
    if (u.sys >= 0) {
        const kl_system *sys = s->systems[u.sys];
        for (int32_t k = 0; k < sys->before_count; k++) {
            int32_t x = kl_schedule_lookup(s, sys->before[k], q->count);
            reach_node(q, x, x >= 0 ? s->systems[x]->name : sys->before[k], h);
        }
    }
    uint32_t chain = kl_map_get(&s->afters.chains, kl_schedule_key(s, u.name));
    for (int32_t l = chain ? s->afters.heads[chain - 1] : -1; l >= 0; l = s->afters.links[l].next) {
        int32_t j = s->afters.links[l].sys;
        const kl_system *t = j < q->count ? s->systems[j] : NULL;
        if (t && constraints(t) > 0 && names_after(t, u.name)) reach_node(q, j, t->name, h);
    }
    /* the candidate's after names are not in the index (a replacing one's may differ) */
    if (names_after(s->systems[q->candidate], u.name)) reach_node(q, q->candidate, NULL, h);
    if (q->tail - first > 1) qsort(q->queue + first, (size_t)(q->tail - first), sizeof *q->queue, compare_reach);
}

/* Writes the cycle c -> path... -> c into the world error, eliding the middle when long. */
static kiln_result report_cycle(kiln_schedule *s, const char *fn, const char *c, const char **path,
                                int32_t length) {
    char text[KL_ERROR_SIZE - 40]; /* with the call's name and " would form a cycle" */
    size_t len = 0, room = sizeof text - (KILN_MAX_NAME + 6) - 8; /* keeps " -> ... -> 'c'" */
    text[0] = '\0';
    append_name(text, sizeof text, &len, c, "");
    int32_t k = 0;
    for (; k < length; k++)
        if (!append_name(text, room, &len, path[k], " -> ")) break;
    if (k < length) len += (size_t)snprintf(text + len, sizeof text - len, " -> ...");
    append_name(text, sizeof text, &len, c, " -> ");
    return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT, "%s: %s would form a cycle", fn, text);
}

/* Grows the table of waiting names to hold names distinct ones at most half full. */
static kiln_result reserve_waiting(kiln_schedule *s, size_t names, const char *fn) {
    if (names <= s->waiting_cap / 2) return KILN_OK;
    size_t cap = s->waiting_cap ? s->waiting_cap : 64;
    while (cap / 2 < names && cap <= UINT32_MAX / 2) cap *= 2;
    kl_waiting *w = cap / 2 >= names ? kl_alloc(&s->world->alloc, kl_mul(sizeof *w, cap)) : NULL;
    if (w == NULL) return kl_fail(s->world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    memset(w, 0, sizeof *w * cap);
    kl_free(&s->world->alloc, s->waiting, sizeof *s->waiting * s->waiting_cap);
    s->waiting = w;
    s->waiting_cap = (uint32_t)cap;
    return KILN_OK;
}

kiln_result kl_schedule_check_cycle(kiln_schedule *s, int32_t count, int32_t candidate, const char *fn) {
    /* Only the candidate's own edges are new (its name had the others' edges as a waiting
     * node, or as the system it replaces): without any, the graph stays acyclic. So adding
     * systems without before/after costs no search at all. */
    const kl_system *c = s->systems[candidate];
    if (constraints(c) == 0) return KILN_OK;
    /* Nodes: the systems, and at most one waiting name per before/after name. */
    size_t names = (size_t)s->constraint_total + (size_t)constraints(c), most = (size_t)count + names;
    kiln_result r = reserve_waiting(s, names, fn);
    if (r != KILN_OK) return r;
    /* queue and path, in scratch sized by powers of two: a schedule built one add at a time
     * does not allocate it again at every add */
    size_t room = 64;
    while (room < most && room < SIZE_MAX / 2) room *= 2;
    void *mem;
    r = kl_schedule_scratch(s, kl_mul(sizeof(reach) + sizeof(const char *), room), &mem, fn);
    if (r != KILN_OK) return r;
    if (++s->check == 0) { /* once in 2^32 checks: no mark may look current */
        for (int32_t i = 0; i < s->system_count; i++) s->systems[i]->reached = 0;
        for (uint32_t t = 0; t < s->waiting_cap; t++) s->waiting[t].check = 0;
        s->check = 1;
    }
    search q = {.s = s, .count = count, .candidate = candidate, .queue = mem};
    const char **path = (const char **)(q.queue + room);
    s->systems[candidate]->reached = s->check;
    q.queue[q.tail++] = (reach){candidate, -1, c->name};

    /* The first node met that runs before the candidate closes a shortest cycle. */
    for (int32_t h = 0; h < q.tail; h++) {
        expand(&q, h);
        if (!q.closed) continue;
        int32_t length = 0;
        for (int32_t e = h; e > 0; e = q.queue[e].from) length++;
        int32_t k = length;
        for (int32_t e = h; e > 0; e = q.queue[e].from) path[--k] = q.queue[e].name;
        return report_cycle(s, fn, c->name, path, length);
    }
    return KILN_OK;
}
