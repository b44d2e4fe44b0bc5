/* test_query_threads.c: Check suite for one query read on several threads at once right after
 * new archetypes it matches were made, so the reads settle its pending archetypes into their
 * order side by side. Every read is checked; under ThreadSanitizer (make test-tsan) the
 * settling must not race. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

enum { TAGS = 10, PER_ROUND = 32, ROUNDS = 16, READERS = 3, MOST = PER_ROUND * ROUNDS };

/* A world of Position and TAGS tags, one query over Position made before any archetype it
 * matches, and what each reader saw in the last round. */
typedef struct shared {
    kiln_world *world;
    kiln_component pos, tags[TAGS];
    kiln_query *query;
    int64_t made;                   /* archetypes (each one entity) made so far */
    kiln_entity seen[READERS][MOST]; /* per reader: the entities in the order it visited them */
    int64_t seen_count[READERS], counted[READERS], archetypes[READERS];
    atomic_int ready; /* readers at the start line (the threads case) */
} shared;

static void open_shared(shared *s) {
    memset(s, 0, sizeof *s);
    s->world = kiln_world_create(&(kiln_world_desc){0});
    ck_assert_ptr_nonnull(s->world);
    s->pos = test_register_position(s->world);
    for (int b = 0; b < TAGS; b++) {
        char name[16];
        snprintf(name, sizeof name, "T%d", b);
        s->tags[b] = test_register_tag(s->world, name);
    }
    ck_assert_int_eq(kiln_query_create(s->world, &(kiln_query_desc){.with = {s->pos}}, &s->query), KILN_OK);
}

/* Makes round's PER_ROUND archetypes {Position} + the tags of a mask, masks counting down, so
 * each orders before those made just before it and between those of earlier rounds. */
static void make_round(shared *s, int round) {
    for (int i = PER_ROUND - 1; i >= 0; i--) {
        int mask = round * PER_ROUND + i;
        kiln_component comps[TAGS + 1] = {s->pos};
        int32_t n = 1;
        for (int b = 0; b < TAGS; b++)
            if (mask & (1 << b)) comps[n++] = s->tags[b];
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_batch(s->world, comps, n, 1, &e), KILN_OK);
        s->made++;
    }
}

/* Reader r's reads, starting with one that settles: r 0 iterates first, r 1 counts first, r 2
 * counts the archetypes first; each then iterates, recording the order it visits. */
static void read_query(shared *s, int r) {
    if (r == 1) s->counted[r] = kiln_query_count(s->query);
    if (r == 2) s->archetypes[r] = kiln_query_archetype_count(s->query);
    int64_t n = 0;
    kiln_iter it;
    kiln_query_iter(s->query, &it);
    while (kiln_query_next(&it))
        for (int32_t i = 0; i < it.count && n < MOST; i++) s->seen[r][n++] = it.entities[i];
    s->seen_count[r] = n;
    if (r != 1) s->counted[r] = kiln_query_count(s->query);
    if (r != 2) s->archetypes[r] = kiln_query_archetype_count(s->query);
}

/* Every reader saw every archetype made, in the order a read on this thread now sees. */
static void check_readers(shared *s) {
    static kiln_entity want[MOST];
    ck_assert_int_eq(test_query_collect(s->query, want, MOST), s->made);
    for (int r = 0; r < READERS; r++) {
        ck_assert_int_eq(s->counted[r], s->made);
        ck_assert_int_eq(s->archetypes[r], s->made);
        ck_assert_int_eq(s->seen_count[r], s->made);
        for (int64_t i = 0; i < s->made; i++) ck_assert_uint_eq(s->seen[r][i], want[i]);
    }
}

typedef struct reader_arg {
    shared *s;
    int r;
} reader_arg;

static void *reader_thread(void *p) {
    reader_arg *a = p;
    atomic_fetch_add(&a->s->ready, 1);
    while (atomic_load(&a->s->ready) < READERS) sched_yield(); /* all start reading at once */
    read_query(a->s, a->r);
    return NULL;
}

KILN_TEST_GROUP_WITH(query_threads, .timeout = 120);

/* Threads of the embedder's own, started after each round: the first reads of every thread
 * race to settle the same round. */
KILN_TEST(query_threads, threads_reading_a_query_after_new_archetypes_all_see_them_in_one_order) {
    static shared s;
    open_shared(&s);
    for (int round = 0; round < ROUNDS; round++) {
        make_round(&s, round);
        atomic_store(&s.ready, 0);
        pthread_t threads[READERS];
        reader_arg args[READERS];
        for (int r = 0; r < READERS; r++) {
            args[r] = (reader_arg){&s, r};
            ck_assert_int_eq(pthread_create(&threads[r], NULL, reader_thread, &args[r]), 0);
        }
        for (int r = 0; r < READERS; r++) ck_assert_int_eq(pthread_join(threads[r], NULL), 0);
        check_readers(&s);
    }
    kiln_world_destroy(s.world);
}

static void reader_system(const kiln_system_ctx *ctx) {
    shared *s = ctx->user;
    read_query(s, ctx->name[0] - '0');
}

/* Systems that only read Position, run side by side on a pool: the frame's first reads settle
 * the archetypes made before the frame on several workers at once. */
KILN_TEST(query_threads, systems_side_by_side_reading_a_query_after_new_archetypes_all_see_them_in_one_order) {
    static shared s;
    open_shared(&s);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *sched = kiln_schedule_create(s.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(sched);
    for (int r = 0; r < READERS; r++) {
        char name[16];
        snprintf(name, sizeof name, "%d", r);
        ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = name, .run = reader_system,
                                                                     .user = &s, .reads = {s.pos}}),
                         KILN_OK);
    }
    for (int round = 0; round < ROUNDS; round++) {
        make_round(&s, round);
        ck_assert_int_eq(kiln_schedule_run(sched, 0.0), KILN_OK);
        check_readers(&s);
        kiln_tick_advance(s.world);
    }
    kiln_schedule_destroy(sched);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(s.world);
}
