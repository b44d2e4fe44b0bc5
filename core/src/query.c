/* query.c: cached queries and chunk iteration. Invariant: a query's match list and its pending
 * list hold every archetype of its world that has all with-terms and no without-terms, each
 * exactly once, the match list in the canonical order of order_types; every read settles the
 * pending ones into their places first. */
#include "query.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archetype.h"
#include "component.h"
#include "defer.h"
#include "guard.h"
#include "spin.h"

#define KL_MAX_COLUMNS (KILN_QUERY_MAX_TERMS * 2)

typedef struct kl_match {
    kl_archetype *arch;
    int16_t column[KL_MAX_COLUMNS]; /* per term: column index in arch, or -1 */
} kl_match;

struct kiln_query {
    kiln_world *world;
    atomic_int iterating; /* active iterations of this query */
    int32_t with_count, without_count, optional_count;
    kiln_component terms[KL_MAX_COLUMNS]; /* with then optional */
    kiln_component without[KILN_QUERY_MAX_TERMS];
    kl_match *matches;
    int64_t match_cap;
    int32_t match_count;
    /* Archetypes made since the last read, not yet in the order: placing each at once moved
     * the whole tail of matches per archetype (quadratic in a burst of new archetypes); they
     * wait here until a read merges them in, and the count is published last (release), so a
     * reader that sees none pending sees the settled list. */
    kl_match *pending;
    int64_t pending_cap;
    atomic_int pending_count;
    atomic_flag settle_lock; /* readers on several threads may settle the same query */
    int64_t order_work; /* match entries written to keep the order (kl_query_order_work) */
};

static bool matches(const kiln_query *q, const kl_archetype *a) {
    for (int32_t i = 0; i < q->with_count; i++)
        if (!kl_archetype_has(a, q->terms[i])) return false;
    for (int32_t i = 0; i < q->without_count; i++)
        if (kl_archetype_has(a, q->without[i])) return false;
    return true;
}

/* The canonical order of a query's archetypes: by their sorted component ids (the shorter
 * list first where one begins the other), not by when they were made. Two worlds holding the
 * same rows then visit them in the same order though one made an archetype the other never
 * did: a save loaded into a fresh world makes only those that hold entities, and a restore
 * keeps the ones made after its snapshot. Ids follow registration order. */
static int order_types(const kl_archetype *a, const kl_archetype *b) {
    int32_t n = a->type_count < b->type_count ? a->type_count : b->type_count;
    for (int32_t i = 0; i < n; i++)
        if (a->types[i] != b->types[i]) return a->types[i] < b->types[i] ? -1 : 1;
    return (a->type_count > b->type_count) - (a->type_count < b->type_count);
}

static int order_matches(const void *a, const void *b) {
    return order_types(((const kl_match *)a)->arch, ((const kl_match *)b)->arch);
}

/* Fills a match for archetype a; pending: on the pending list (archetypes made later than the
 * query, settled in order before the next read), else at the end of matches (kiln_query_create
 * sorts once after them all). A pending entry is filled before the count that shows it. */
static void add_match(kiln_query *q, kl_archetype *a, bool pending) {
    int32_t n = atomic_load_explicit(&q->pending_count, memory_order_relaxed);
    kl_match *m = pending ? &q->pending[n] : &q->matches[q->match_count++];
    m->arch = a;
    int32_t terms = q->with_count + q->optional_count;
    for (int32_t t = 0; t < KL_MAX_COLUMNS; t++) {
        int32_t ti = t < terms ? kl_archetype_type_index(a, q->terms[t]) : -1;
        m->column[t] = (int16_t)(ti < 0 ? -1 : a->column_of[ti]);
    }
    if (pending) atomic_store_explicit(&q->pending_count, n + 1, memory_order_release);
}

bool kl_queries_reserve(kiln_world *world) {
    for (int32_t i = 0; i < world->query_count; i++) {
        kiln_query *q = world->queries[i];
        int32_t pending = atomic_load_explicit(&q->pending_count, memory_order_relaxed);
        if (!kl_grow(&world->alloc, (void **)&q->matches, &q->match_cap, q->match_count + pending + 1,
                     sizeof(kl_match), 8) ||
            !kl_grow(&world->alloc, (void **)&q->pending, &q->pending_cap, pending + 1, sizeof(kl_match), 8))
            return false;
    }
    return true;
}

void kl_queries_match(kiln_world *world, kl_archetype *arch) {
    for (int32_t i = 0; i < world->query_count; i++) {
        kiln_query *q = world->queries[i];
        if (matches(q, arch)) add_match(q, arch, true);
    }
}

/* Merges the pending matches into their places: sorted among themselves, then merged from the
 * back (room for them all was reserved with them), so a burst of k new archetypes costs
 * k log k plus one pass over the matches after the first of them, once. The order is total
 * (no two archetypes hold the same types), so it is the one placing each at once gave. No
 * iteration of the query is open here (archetypes are made only while nothing iterates, and an
 * iteration settles at its start), so no walk sees its matches move. */
__attribute__((noinline)) static void settle_pending(kiln_query *q) {
    kl_spin_lock(&q->settle_lock);
    int32_t k = atomic_load_explicit(&q->pending_count, memory_order_relaxed);
    if (k > 0) {
        KILN_ASSERT(atomic_load_explicit(&q->iterating, memory_order_relaxed) == 0,
                    "a query's matches settle while it iterates");
        if (k > 1) qsort(q->pending, (size_t)k, sizeof(kl_match), order_matches);
        int32_t i = q->match_count - 1, j = k - 1, out = q->match_count + k - 1;
        while (j >= 0)
            q->matches[out--] = i >= 0 && order_types(q->matches[i].arch, q->pending[j].arch) > 0
                                    ? q->matches[i--] : q->pending[j--];
        q->order_work += q->match_count + k - 1 - out; /* the merged tail and the pending */
        q->match_count += k;
        atomic_store_explicit(&q->pending_count, 0, memory_order_release);
    }
    kl_spin_unlock(&q->settle_lock);
}

/* Settles before a read of the matches; what the reads pay when nothing is pending (every
 * iteration start) is one load, the merge stays out of line. */
static inline void settle(const kiln_query *query) {
    kiln_query *q = (kiln_query *)(uintptr_t)query; /* the order is the same; only its layout moves */
    if (KL_UNLIKELY(atomic_load_explicit(&q->pending_count, memory_order_acquire) != 0))
        settle_pending(q);
}

static void query_free(kiln_world *world, kiln_query *q) {
    kl_free(&world->alloc, q->matches, sizeof(kl_match) * (size_t)q->match_cap);
    kl_free(&world->alloc, q->pending, sizeof(kl_match) * (size_t)q->pending_cap);
    kl_free(&world->alloc, q, sizeof *q);
}

void kl_queries_free(kiln_world *world) {
    for (int32_t i = 0; i < world->query_count; i++) query_free(world, world->queries[i]);
    kl_free(&world->alloc, world->queries, sizeof(kiln_query *) * (size_t)world->query_cap);
    world->queries = NULL;
    world->query_count = 0;
    world->query_cap = 0;
}

/* Copies a zero-terminated term list; fails on an unknown or repeated component. */
static kiln_result copy_terms(kiln_world *world, const kiln_component *src, kiln_component *dst,
                              int32_t *count, const kiln_component *seen, int32_t seen_count,
                              const char *list) {
    int32_t n = 0;
    char buf[32];
    for (int32_t i = 0; i < KILN_QUERY_MAX_TERMS && src[i] != KILN_NO_COMPONENT; i++) {
        if (!kl_component_get(world, src[i]))
            return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT,
                           "kiln_query_create: %s term %d is an unknown %s", list, (int)i,
                           kl_component_name(world, src[i], buf, sizeof buf));
        for (int32_t j = 0; j < seen_count + n; j++) {
            kiln_component other = j < seen_count ? seen[j] : dst[j - seen_count];
            if (other == src[i])
                return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                               "kiln_query_create: %s appears twice in the terms",
                               kl_component_name(world, src[i], buf, sizeof buf));
        }
        dst[n++] = src[i];
    }
    *count = n;
    return KILN_OK;
}

kiln_result kiln_query_create(kiln_world *world, const kiln_query_desc *desc, kiln_query **dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    if (desc == NULL)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_query_create: desc is NULL");
    kl_guard_check(world, "kiln_query_create", KL_QUERIES, 0, 0);
    if (kl_off_stage_thread(world)) return kl_fail_register_off_stage(world, "kiln_query_create");
    kiln_query tmp;
    memset(&tmp, 0, sizeof tmp);
    kiln_component all[KL_MAX_COLUMNS + KILN_QUERY_MAX_TERMS] = {0};
    kiln_result r = copy_terms(world, desc->with, tmp.terms, &tmp.with_count, all, 0, "with");
    if (r != KILN_OK) return r;
    if (tmp.with_count == 0)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_query_create: no with terms");
    memcpy(all, tmp.terms, sizeof(kiln_component) * (size_t)tmp.with_count);
    int32_t seen = tmp.with_count;
    r = copy_terms(world, desc->optional, tmp.terms + tmp.with_count, &tmp.optional_count, all,
                   seen, "optional");
    if (r != KILN_OK) return r;
    memcpy(all + seen, tmp.terms + tmp.with_count, sizeof(kiln_component) * (size_t)tmp.optional_count);
    seen += tmp.optional_count;
    r = copy_terms(world, desc->without, tmp.without, &tmp.without_count, all, seen, "without");
    if (r != KILN_OK) return r;

    int32_t found = 0;
    for (int32_t a = 0; a < world->archetype_count; a++)
        if (matches(&tmp, world->archetypes[a])) found++;
    kiln_query *q = NULL;
    if (!kl_grow(&world->alloc, (void **)&world->queries, &world->query_cap,
                 world->query_count + 1, sizeof(kiln_query *), 8) ||
        (q = kl_alloc(&world->alloc, sizeof *q)) == NULL)
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_query_create: out of memory");
    *q = tmp;
    q->world = world;
    atomic_flag_clear(&q->settle_lock);
    if (!kl_grow(&world->alloc, (void **)&q->matches, &q->match_cap, found, sizeof(kl_match), 8)) {
        kl_free(&world->alloc, q, sizeof *q);
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_query_create: out of memory");
    }
    for (int32_t a = 0; a < world->archetype_count; a++)
        if (matches(q, world->archetypes[a])) add_match(q, world->archetypes[a], false);
    if (q->match_count > 1) qsort(q->matches, (size_t)q->match_count, sizeof(kl_match), order_matches);
    world->queries[world->query_count++] = q;
    *dest = q;
    return KILN_OK;
}

void kiln_query_destroy(kiln_query *query) {
    if (query == NULL) return;
    kiln_world *world = query->world;
    /* Refused in every build: its iteration would read freed memory, a worker's look-up the
     * world's list of queries as it shrinks. */
    if (atomic_load(&query->iterating) != 0) {
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                "kiln_query_destroy: the query is iterating (finish the loop, or kiln_iter_fini, first); "
                "nothing was destroyed");
        return;
    }
    kl_guard_check(world, "kiln_query_destroy", KL_QUERIES, 0, 0);
    if (kl_off_stage_thread(world)) {
        kl_fail_register_off_stage(world, "kiln_query_destroy");
        return;
    }
    for (int32_t i = 0; i < world->query_count; i++) {
        if (world->queries[i] == query) {
            world->queries[i] = world->queries[--world->query_count];
            break;
        }
    }
    query_free(world, query);
}

/* Appends ", "-separated component names of ids to buf, each after label. */
static size_t describe_terms(const kiln_world *world, const kiln_component *ids, int32_t count,
                             const char *label, char *buf, size_t size, size_t at) {
    for (int32_t i = 0; i < count && at < size; i++) {
        const kl_component *c = kl_component_get(world, ids[i]);
        int n = snprintf(buf + at, size - at, "%s%s%s", at > 1 ? ", " : "", label, c ? c->names : "?");
        at = n < 0 ? size : at + (size_t)n;
    }
    return at;
}

int32_t kl_queries_end_open(kiln_world *world, int keep, char *what, size_t what_size) {
    int open = atomic_load_explicit(&world->iterating, memory_order_relaxed) - keep;
    if (open <= 0) return 0;
    atomic_store_explicit(&world->iterating, keep, memory_order_relaxed);
    /* every iterator that started so far is ended (with keep above 0, which a schedule run never
     * passes, some are not and none can tell) */
    if (keep == 0) atomic_fetch_add_explicit(&world->iter_era, 1, memory_order_relaxed);
    snprintf(what, what_size, "a query");
    bool named = false;
    for (int32_t i = 0; i < world->query_count && keep == 0; i++) {
        kiln_query *q = world->queries[i];
        if (atomic_exchange_explicit(&q->iterating, 0, memory_order_relaxed) == 0 || named) continue;
        named = true;
        size_t at = (size_t)snprintf(what, what_size, "[");
        at = describe_terms(world, q->terms, q->with_count, "", what, what_size, at);
        at = describe_terms(world, q->terms + q->with_count, q->optional_count, "optional ", what, what_size, at);
        at = describe_terms(world, q->without, q->without_count, "without ", what, what_size, at);
        if (at + 1 < what_size) snprintf(what + at, what_size - at, "]");
    }
    return open;
}

int64_t kiln_query_count(const kiln_query *query) {
    KILN_ASSERT(query != NULL, "query is NULL");
    settle(query);
    int64_t n = 0;
    for (int32_t i = 0; i < query->match_count; i++) /* a move's hooks: the entity once */
        n += kl_archetype_rows(query->world, query->matches[i].arch);
    return n;
}

int32_t kiln_query_archetype_count(const kiln_query *query) {
    KILN_ASSERT(query != NULL, "query is NULL");
    settle(query);
    return query->match_count;
}

int64_t kiln_query_bytes(const kiln_query *query) {
    KILN_ASSERT(query != NULL, "query is NULL");
    settle(query);
    int64_t n = 0;
    for (int32_t i = 0; i < query->match_count; i++) {
        const kl_archetype *a = query->matches[i].arch;
        n += (int64_t)kl_archetype_rows(query->world, a) * (int64_t)a->row_bytes;
    }
    return n;
}

int64_t kiln_query_memory(const kiln_query *query) {
    KILN_ASSERT(query != NULL, "query is NULL");
    /* its struct, its matches (settled and pending) and its place in the world's list of queries */
    return (int64_t)(sizeof *query + sizeof query) + (query->match_cap + query->pending_cap) * (int64_t)sizeof(kl_match);
}

int32_t kl_query_chunk_count(const kiln_query *query) {
    settle(query);
    int32_t n = 0;
    for (int32_t i = 0; i < query->match_count; i++) n += query->matches[i].arch->count > 0;
    return n;
}

int32_t kl_query_match_count(const kiln_query *query) {
    settle(query);
    return query->match_count;
}

kl_archetype *kl_query_match_at(const kiln_query *query, int32_t i, int32_t term, kl_column **column) {
    settle(query);
    const kl_match *m = &query->matches[i];
    *column = m->column[term] >= 0 ? &m->arch->columns[m->column[term]] : NULL;
    return m->arch;
}

kiln_tick kl_query_structure_tick(const kiln_query *query) {
    settle(query);
    kiln_tick t = 0;
    for (int32_t i = 0; i < query->match_count; i++)
        if (query->matches[i].arch->structure_tick > t) t = query->matches[i].arch->structure_tick;
    return t;
}

kiln_tick kl_query_column_tick(const kiln_query *query, int32_t term) {
    settle(query);
    kiln_tick t = 0;
    for (int32_t i = 0; i < query->match_count; i++) {
        int16_t c = query->matches[i].column[term];
        if (c < 0) continue;
        kiln_tick latest = atomic_load_explicit(&query->matches[i].arch->columns[c].latest,
                                                memory_order_relaxed);
        if (latest > t) t = latest;
    }
    return t;
}

kiln_world *kl_query_world(const kiln_query *query) { return query->world; }

int64_t kl_query_order_work(const kiln_query *query) { return query->order_work; }

/* The world's iteration era as an iterator keeps it: its low 48 bits (kiln_iter has room for
 * no more without growing). The era moves on only when a schedule run fails because a system
 * left an iteration open, so an iterator ended then could read as current again only after
 * 2^48 such runs: 8.9 years of them at a million a second (at 32 bits, 2^32 runs were 72
 * minutes at that rate, or 2.3 years at 60 a second, and next on the stale iterator would walk
 * rows no count guards and lower the counts a second time). */
static uint64_t iteration_era(const kiln_world *world) {
    return atomic_load_explicit(&((kiln_world *)world)->iter_era, memory_order_relaxed) &
           ((UINT64_C(1) << 48) - 1);
}

void kiln_query_iter(const kiln_query *query, kiln_iter *it) {
    KILN_ASSERT(query != NULL && it != NULL, "query and it are required");
#if KILN_ACCESS_CHECKS
    /* Each valued term is read (or written: the iterator cannot tell); tags hold no values. */
    for (int32_t t = 0; t < query->with_count + query->optional_count; t++) {
        const kl_component *c = kl_component_get(query->world, query->terms[t]);
        if (c && c->size > 0) kl_guard_check(query->world, "kiln_query_iter", KL_READ, c->id, 0);
    }
#endif
    kl_query_iter_unchecked(query, it);
}

void kl_query_iter_unchecked(const kiln_query *query, kiln_iter *it) {
    KILN_ASSERT(query != NULL && it != NULL, "query and it are required");
    settle(query);
    memset(it, 0, sizeof *it);
    it->world = query->world;
    it->query = query;
    it->term_count = query->with_count + query->optional_count;
    it->tick = query->world->tick;
    it->tick_base = &query->world->tick_base;
    it->mark_tick = it->tick;
    it->active = true;
    it->owns_lock = true;
    uint64_t era = iteration_era(query->world);
    it->era = (uint32_t)era;
    it->era_high = (uint16_t)(era >> 32);
    atomic_fetch_add_explicit(&query->world->iterating, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&((kiln_query *)query)->iterating, 1, memory_order_relaxed);
    kl_defer_open(query->world);
}

/* Publishes the latest tick of every column the chunk marked. */
static void flush_marks(kiln_iter *it) {
    if (!it->marked || !it->archetype) return;
    kl_archetype *a = it->archetype;
    const kl_match *m = &it->query->matches[it->next_index - 1];
    for (int32_t t = 0; t < it->term_count; t++)
        if ((it->marked >> t) & 1u && m->column[t] >= 0) {
            kl_column *col = &a->columns[m->column[t]];
            /* the rows' ticks are the iteration's; what was written in place, the world's now
             * (an iteration kept open across a tick advance must not hide a newer write) */
            kl_column_touch_appended(col, it->tick);
            kl_column_mark_in_place(col, it->world->tick);
        }
    it->marked = 0;
}

/* Whether a schedule run ended the iteration it belongs to (kl_queries_end_open): its counts
 * were lowered then, and lowering them again would end another iteration or go below zero. */
static bool ended_by_schedule(const kiln_iter *it) {
    uint64_t era = (uint64_t)it->era_high << 32 | it->era;
    return era != iteration_era(it->world);
}

/* Ends an active iteration and keeps how the end went in it->ended (kiln_iter_fini returns it). */
static void end_iteration(kiln_iter *it, const char *call) {
    if (KL_UNLIKELY(ended_by_schedule(it))) { /* its marks go too: its rows may have moved since */
        it->active = false;
        it->archetype = NULL;
        it->count = 0;
        it->marked = 0;
        return;
    }
    flush_marks(it);
    it->active = false;
    it->archetype = NULL;
    it->count = 0;
    if (it->owns_lock) {
        atomic_fetch_sub_explicit(&it->world->iterating, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&((kiln_query *)it->query)->iterating, 1, memory_order_relaxed);
        /* The changes the loop made land now (when this is the outermost section); what a
         * failure (out of memory) leaves stays queued for the next outermost end, as with
         * kiln_defer_end, and the caller learns of it from kiln_iter_fini. */
        it->ended = kl_defer_end(it->world, call);
    }
}

bool kiln_query_next(kiln_iter *it) {
    KILN_ASSERT(it != NULL, "it is NULL");
    if (!it->active) return false;
    if (KL_UNLIKELY(ended_by_schedule(it))) {
        end_iteration(it, "kiln_query_next");
        return false;
    }
    KILN_ASSERT(it->owns_lock, "kiln_query_next on a range view");
    flush_marks(it);
    const kiln_query *q = it->query;
    while (it->next_index < q->match_count) {
        const kl_match *m = &q->matches[it->next_index++];
        kl_archetype *a = m->arch;
        int32_t rows = kl_archetype_rows(it->world, a);
        if (rows == 0) continue;
        it->archetype = a;
        it->count = rows;
        it->offset = 0;
        it->entities = a->entities;
        for (int32_t t = 0; t < it->term_count; t++) {
            int16_t c = m->column[t];
            it->columns[t] = c >= 0 ? a->columns[c].data : NULL;
            it->ticks[t] = c >= 0 ? a->columns[c].ticks : NULL;
        }
        return true;
    }
    end_iteration(it, "kiln_query_next");
    return false;
}

kiln_result kiln_iter_fini(kiln_iter *it) {
    KILN_ASSERT(it != NULL, "it is NULL");
    if (it->active) end_iteration(it, "kiln_iter_fini");
    return it->ended;
}

void kiln_iter_range(const kiln_iter *it, int32_t begin, int32_t end, kiln_iter *dest) {
    KILN_ASSERT(it != NULL && dest != NULL, "it and dest are required");
    *dest = *it;
    dest->owns_lock = false;
    dest->marked = 0;
    if (KL_UNLIKELY(!it->archetype || begin < 0 || begin > end || end > it->count)) { /* an empty view */
        dest->count = 0;
        if (!it->archetype)
            kl_fail(it->world, KILN_ERR_INVALID_ARGUMENT, "kiln_iter_range: it has no current chunk");
        else
            kl_fail(it->world, KILN_ERR_INVALID_ARGUMENT, "kiln_iter_range: rows [%d, %d) are not within the chunk "
                    "(%d rows)", (int)begin, (int)end, (int)it->count);
        return;
    }
    dest->offset = it->offset + begin;
    dest->count = end - begin;
    dest->entities = it->entities + begin;
    const kl_archetype *a = it->archetype;
    const kl_match *m = &it->query->matches[it->next_index - 1];
    for (int32_t t = 0; t < it->term_count; t++) {
        if (m->column[t] < 0) continue;
        dest->columns[t] = (uint8_t *)it->columns[t] + (size_t)begin * a->columns[m->column[t]].stride;
        dest->ticks[t] = it->ticks[t] + begin;
    }
}

/* True for a term of the iteration's query; otherwise sets the world error for call. */
static bool term_within(const kiln_iter *it, const char *call, int32_t term) {
    if (term >= 0 && term < it->term_count) return true;
    kl_fail(it->world, KILN_ERR_INVALID_ARGUMENT, "%s: term %d is not within the query's %d", call, (int)term,
            (int)it->term_count);
    return false;
}

kiln_tick kiln_iter_column_tick(const kiln_iter *it, int32_t term) {
    KILN_ASSERT(it != NULL, "it is NULL");
    if (KL_UNLIKELY(!term_within(it, "kiln_iter_column_tick", term))) return 0;
    if (!it->archetype) return 0;
    const kl_archetype *a = it->archetype;
    int16_t c = it->query->matches[it->next_index - 1].column[term];
    if (c < 0) return 0;
    kiln_tick latest = atomic_load_explicit(&a->columns[c].latest, memory_order_relaxed);
    if ((it->marked >> term) & 1u && it->tick > latest) latest = it->tick;
    return latest;
}

void kiln_iter_mark_rows(kiln_iter *it, int32_t term, int32_t begin, int32_t end) {
    /* asserts only: a check here costs every chunk's call 9 instructions (callgrind), a fifth of it */
    KILN_ASSERT(it != NULL && term >= 0 && term < it->term_count, "term within the query");
    KILN_ASSERT(it->ticks[term] != NULL, "the term has a column (not a tag or an absent optional)");
    KILN_ASSERT(0 <= begin && begin <= end && end <= it->count, "rows within the chunk");
    uint64_t base = *it->tick_base;
    kl_fill_row_ticks(it->ticks[term], begin, end,
                      (kiln_row_tick)(it->mark_tick > base ? it->mark_tick - base : 0));
    it->marked |= (uint64_t)1 << term;
}
