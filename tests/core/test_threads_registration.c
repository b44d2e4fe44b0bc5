/* test_threads_registration.c: Check suite for a main-thread system registering types while worker
 * systems read them (run it under ThreadSanitizer), and for registry growth out of memory. */
#include <check.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* A thread-safe allocator hook that counts the bytes it has handed out, to compare with what
 * the world reports. */
typedef struct counting_allocator {
    _Atomic(int64_t) live_bytes;
} counting_allocator;

static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    counting_allocator *a = ud;
    if (ptr == NULL) osize = 0;
    if (nsize == 0) {
        free(ptr);
        atomic_fetch_sub(&a->live_bytes, (int64_t)osize);
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (p) atomic_fetch_add(&a->live_bytes, (int64_t)nsize - (int64_t)osize);
    return p;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define BASE_ENTITIES 32
#define EVENTS_PER_FRAME 8
#define FRAMES 40
#define TYPES_PER_FRAME 16
#define SPAWNS_PER_FRAME 48
#define MAX_TYPES (FRAMES * TYPES_PER_FRAME)

typedef struct { float x, y; } position;
typedef struct { int32_t v; } hit;

/* What the systems share. The main thread writes frame before each run (the job hand-off
 * orders it); the registrar publishes its progress through the atomics. */
typedef struct shared {
    kiln_world *world;
    kiln_component pos, gravity, local;
    kiln_event_type hit;
    kiln_entity base[BASE_ENTITIES];
    int32_t frame;

    /* written by the registrar, published by `published` (release) */
    kiln_component dyn[MAX_TYPES + 1];
    kiln_event_type dyn_event[MAX_TYPES + 1];
    kiln_query *dyn_query[MAX_TYPES + 1];
    atomic_int published;   /* dynamic types registered so far (all of them complete) */
    atomic_int started, done;
    atomic_int reading;     /* the reader has taken its count and reads until done */

    /* written by the reader */
    int32_t added[FRAMES + 1];   /* per frame: the dynamic type the reader added, or 0 */
    atomic_int errors;
    atomic_int overlaps;         /* frames in which the reader saw registrations land */
    atomic_int reads;
    char first_error[256];
    atomic_flag error_taken;
} shared;

/* Worker systems count failures instead of asserting (Check is not thread-safe); the first
 * message is kept for the assertion afterwards. */
static void fail_at(shared *s, const char *what, int32_t n) {
    if (atomic_fetch_add(&s->errors, 1) == 0 && !atomic_flag_test_and_set(&s->error_taken))
        snprintf(s->first_error, sizeof s->first_error, "frame %d: %s (%d)", (int)s->frame,
                 what, (int)n);
}

static size_t dyn_size(int32_t n) { return (size_t)(4 * (1 + n % 4)); }

static void dyn_name(char *buf, size_t size, const char *prefix, int32_t n) {
    snprintf(buf, size, "%s%d", prefix, (int)n);
}

/* ------------------------------------------------------------------------------------------ */
/* systems                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Stage 0, main thread: emits this frame's Hit events (they land at the end of the stage). */
static void emitter(const kiln_system_ctx *ctx) {
    shared *s = ctx->user;
    for (int32_t i = 0; i < EVENTS_PER_FRAME; i++) {
        hit h = {s->frame * 1000 + i};
        kiln_event_emit(ctx->world, s->hit, &h);
    }
}

/* Checks what was registered before this frame and what the registrar has published. */
static void read_once(shared *s, const kiln_system_ctx *ctx, int32_t iteration) {
    kiln_world *w = ctx->world;
    for (int32_t i = 0; i < BASE_ENTITIES; i += 7) {
        const position *p = kiln_get(w, s->base[i], s->pos);
        if (!p || p->x != (float)i || p->y != (float)-i) fail_at(s, "base Position value", i);
    }
    if (kiln_component_lookup(w, "Position") != s->pos) fail_at(s, "Position lookup", 0);
    kiln_component_info info;
    if (!kiln_component_info_get(w, s->pos, &info) || info.size != sizeof(position) ||
        strcmp(info.name, "Position") != 0)
        fail_at(s, "Position info", 0);
    const float *g = kiln_resource_get(w, s->gravity);
    if (!g || *g != 9.81f) fail_at(s, "Gravity resource", 0);
    if (kiln_event_lookup(w, "Hit").id != s->hit.id) fail_at(s, "Hit lookup", 0);

    int64_t expected = s->frame > 1 ? 2 * EVENTS_PER_FRAME : EVENTS_PER_FRAME;
    int64_t count = kiln_event_count(w, s->hit);
    if (count != expected) fail_at(s, "Hit count", (int32_t)count);
    for (int64_t j = 0; j < count; j++) {
        const hit *h = kiln_event_get(w, s->hit, j);
        int32_t from = expected > EVENTS_PER_FRAME && j < EVENTS_PER_FRAME ? s->frame - 1 : s->frame;
        int32_t want = from * 1000 + (int32_t)(j % EVENTS_PER_FRAME);
        if (!h || h->v != want) fail_at(s, "Hit value", (int32_t)j);
    }

    /* The newest published type and one older one, whose records may sit in replaced
     * tables. */
    int32_t n = atomic_load_explicit(&s->published, memory_order_acquire);
    int32_t picks[2] = {n, n > 1 ? 1 + iteration % n : 0};
    for (int k = 0; k < 2; k++) {
        int32_t m = picks[k];
        if (m == 0) continue;
        char name[32];
        dyn_name(name, sizeof name, "Dyn", m);
        kiln_component id = s->dyn[m];
        if (!kiln_component_info_get(w, id, &info) || info.size != dyn_size(m) ||
            strcmp(info.name, name) != 0 || info.field_count != 1 ||
            strcmp(info.fields[0].name, "v") != 0)
            fail_at(s, "dynamic component info", m);
        if (kiln_component_lookup(w, name) != id) fail_at(s, "dynamic component lookup", m);
        const int32_t *value = kiln_resource_get(w, id);
        if (!value || *value != m) fail_at(s, "dynamic resource", m);
        dyn_name(name, sizeof name, "Ev", m);
        kiln_event_type ev = s->dyn_event[m];
        if (!kiln_event_info_get(w, ev, &info) || strcmp(info.name, name) != 0)
            fail_at(s, "dynamic event info", m);
        if (kiln_event_lookup(w, name).id != ev.id) fail_at(s, "dynamic event lookup", m);
        if (kiln_event_count(w, ev) != 0 || kiln_event_get(w, ev, 0) != NULL)
            fail_at(s, "dynamic event is empty", m);
    }
    /* Unknown ids stay unknown, whatever the tables hold beyond the count. */
    kiln_component beyond = (kiln_component)(s->dyn[0] + MAX_TYPES + 100);
    if (kiln_component_info_get(w, beyond, &info) || kiln_resource_get(w, beyond))
        fail_at(s, "an id beyond the registry is unknown", 0);
    atomic_fetch_add(&s->reads, 1);
}

/* Stage 1, worker: reads in a loop for as long as the registrar runs, and records a set and
 * an add of a just-registered type into its own buffer. */
static void reader(const kiln_system_ctx *ctx) {
    shared *s = ctx->user;
    int64_t deadline = now_ns() + 2000000000;
    /* Wait (bounded: the pool may have run this job inline first) for the registrar. */
    while (!atomic_load(&s->started) && now_ns() < deadline) sched_yield();
    int32_t seen_at_start = atomic_load_explicit(&s->published, memory_order_acquire);
    atomic_store(&s->reading, 1);
    int32_t iteration = 0;
    deadline = now_ns() + 5000000000;
    while ((iteration < 50 || !atomic_load(&s->done)) && now_ns() < deadline) {
        read_once(s, ctx, iteration);
        if (iteration < 16) {
            kiln_entity e = s->base[iteration % BASE_ENTITIES];
            position p = {(float)(iteration % BASE_ENTITIES), (float)-(iteration % BASE_ENTITIES)};
            if (kiln_commands_set(ctx->commands, e, s->pos, &p) != KILN_OK)
                fail_at(s, "recording a set", iteration);
        }
        iteration++;
    }
    int32_t n = atomic_load_explicit(&s->published, memory_order_acquire);
    if (n != seen_at_start) atomic_fetch_add(&s->overlaps, 1);
    if (n > 0) {
        int32_t value[4] = {n, 0, 0, 0};
        if (kiln_commands_add(ctx->commands, s->base[s->frame % BASE_ENTITIES], s->dyn[n],
                              value) != KILN_OK)
            fail_at(s, "recording an add of a new type", n);
        else
            s->added[s->frame] = n;
    }
}

/* Stage 1, main thread: registers types, makes queries, sets resources and spawns. */
static void registrar(const kiln_system_ctx *ctx) {
    shared *s = ctx->user;
    kiln_world *w = ctx->world;
    atomic_store(&s->started, 1);
    /* Publish only once the reader reads (bounded: it may have run inline before, or be
     * late on a loaded machine), so that its reads overlap the registrations whatever the
     * scheduler does; without this wait a busy machine could run every frame's reader
     * after the registrar and the overlap check below would fail. */
    int64_t deadline = now_ns() + 2000000000;
    while (!atomic_load(&s->reading) && now_ns() < deadline) sched_yield();
    int32_t n = atomic_load(&s->published);
    for (int32_t k = 0; k < TYPES_PER_FRAME; k++) {
        n++;
        char name[32];
        dyn_name(name, sizeof name, "Dyn", n);
        kiln_field field = {.name = "v", .type = KILN_TYPE_INT32, .offset = 0};
        kiln_component_desc desc = {.name = name, .size = dyn_size(n), .fields = &field,
                                    .field_count = 1};
        if (kiln_component_register(w, &desc, &s->dyn[n]) != KILN_OK)
            fail_at(s, kiln_world_error(w), n);
        dyn_name(name, sizeof name, "Ev", n);
        desc.name = name;
        if (kiln_event_register(w, &desc, &s->dyn_event[n]) != KILN_OK)
            fail_at(s, kiln_world_error(w), n);
        kiln_query_desc q = {.with = {s->pos, s->dyn[n]}};
        if (kiln_query_create(w, &q, &s->dyn_query[n]) != KILN_OK)
            fail_at(s, kiln_world_error(w), n);
        int32_t value[4] = {n, 0, 0, 0};
        if (kiln_resource_set(w, s->dyn[n], value) != KILN_OK)
            fail_at(s, kiln_world_error(w), n);
        kiln_world_stats stats;
        kiln_world_stats_get(w, &stats);
        atomic_store_explicit(&s->published, n, memory_order_release);
        sched_yield(); /* let the reader run between registrations */
    }
    for (int32_t i = 0; i < SPAWNS_PER_FRAME; i++) {
        kiln_entity e;
        kiln_local_transform t = {{(float)i, 0, 0}, {0, 0, 0, 1}, {1, 1, 1}};
        if (kiln_commands_spawn(ctx->commands, &e) != KILN_OK ||
            kiln_commands_add(ctx->commands, e, s->local, &t) != KILN_OK)
            fail_at(s, "spawning", i);
    }
    atomic_store(&s->done, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* the scenario                                                                               */
/* ------------------------------------------------------------------------------------------ */

static shared S; /* large: kept off the stack; each test runs in its own process */
static counting_allocator A;
static int32_t components_before;

/* Builds the world and a schedule of emitter (stage 0), then reader and propagation on
 * workers beside the registrar on the main thread (stage 1), and runs FRAMES frames. The
 * schedule and pool are gone afterwards; the world stays for the test to inspect. */
static kiln_world *run_scenario(void) {
    memset(&S, 0, sizeof S);
    atomic_store(&A.live_bytes, 0);
    kiln_world *w = kiln_world_create(&(kiln_world_desc){.alloc = counting_alloc, .alloc_ud = &A});
    ck_assert_ptr_nonnull(w);
    S.world = w;
    kiln_transform_ids tids;
    ck_assert_int_eq(kiln_transform_init(w, &tids), KILN_OK);
    S.local = tids.local;
    kiln_field pos_fields[] = {{.name = "x", .type = KILN_TYPE_FLOAT, .offset = 0},
                               {.name = "y", .type = KILN_TYPE_FLOAT, .offset = 4}};
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "Position",
                         .size = sizeof(position), .fields = pos_fields, .field_count = 2},
                                             &S.pos), KILN_OK);
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "Gravity",
                         .size = sizeof(float)}, &S.gravity), KILN_OK);
    float g = 9.81f;
    ck_assert_int_eq(kiln_resource_set(w, S.gravity, &g), KILN_OK);
    kiln_field hit_field = {.name = "v", .type = KILN_TYPE_INT32, .offset = 0};
    ck_assert_int_eq(kiln_event_register(w, &(kiln_component_desc){.name = "Hit",
                         .size = sizeof(hit), .fields = &hit_field, .field_count = 1},
                                         &S.hit), KILN_OK);
    for (int32_t i = 0; i < BASE_ENTITIES; i++) {
        position p = {(float)i, (float)-i};
        ck_assert_int_eq(kiln_spawn(w, &S.base[i]), KILN_OK);
        ck_assert_int_eq(kiln_add(w, S.base[i], S.pos, &p), KILN_OK);
    }
    components_before = kiln_component_count(w);
    S.dyn[0] = (kiln_component)components_before;

    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *sched = kiln_schedule_create(w, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(sched);
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "emitter",
                         .run = emitter, .user = &S, .main_thread = true}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "reader",
                         .run = reader, .user = &S, .reads = {S.pos, S.gravity},
                         .after = {"emitter"}}), KILN_OK);
    kiln_system_desc propagate;
    kiln_transform_system_desc(w, &propagate);
    propagate.after[0] = "emitter";
    ck_assert_int_eq(kiln_schedule_add(sched, &propagate), KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "registrar",
                         .run = registrar, .user = &S, .main_thread = true,
                         .after = {"emitter"}}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(sched), 2);

    for (int32_t f = 1; f <= FRAMES; f++) {
        S.frame = f;
        atomic_store(&S.started, 0);
        atomic_store(&S.done, 0);
        atomic_store(&S.reading, 0);
        kiln_result r = kiln_schedule_run(sched, 1.0 / 60);
        ck_assert_msg(r == KILN_OK, "frame %d: %s", (int)f, kiln_world_error(w));
    }
    kiln_schedule_destroy(sched);
    kiln_jobs_destroy(jobs);
    return w;
}

static void end_scenario(kiln_world *w) {
    for (int32_t n = 1; n <= MAX_TYPES; n++) kiln_query_destroy(S.dyn_query[n]);
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* tests                                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(registration, .timeout = 120);

KILN_TEST(registration, worker_systems_read_right_values_while_a_main_thread_system_registers) {
    kiln_world *w = run_scenario();
    ck_assert_msg(atomic_load(&S.errors) == 0, "%d failed reads, first: %s",
                  atomic_load(&S.errors), S.first_error);
    ck_assert_int_ge(atomic_load(&S.reads), FRAMES * 50);
    /* the reads really overlapped registrations */
    ck_assert_int_gt(atomic_load(&S.overlaps), 0);
    end_scenario(w);
}

KILN_TEST(registration, every_type_registered_mid_frame_is_whole_after_the_frames) {
    kiln_world *w = run_scenario();
    ck_assert_int_eq(atomic_load(&S.published), MAX_TYPES);
    ck_assert_int_eq(kiln_component_count(w), components_before + MAX_TYPES);
    for (int32_t n = 1; n <= MAX_TYPES; n++) {
        char name[32];
        dyn_name(name, sizeof name, "Dyn", n);
        ck_assert_uint_eq(S.dyn[n], (kiln_component)(components_before + n));
        ck_assert_uint_eq(kiln_component_lookup(w, name), S.dyn[n]);
        kiln_component_info info;
        ck_assert(kiln_component_info_get(w, S.dyn[n], &info));
        ck_assert_str_eq(info.name, name);
        ck_assert_uint_eq(info.size, dyn_size(n));
        const int32_t *value = kiln_resource_get(w, S.dyn[n]);
        ck_assert_ptr_nonnull(value);
        ck_assert_int_eq(*value, n);
        dyn_name(name, sizeof name, "Ev", n);
        ck_assert_uint_eq(kiln_event_lookup(w, name).id, S.dyn_event[n].id);
        ck_assert(kiln_event_info_get(w, S.dyn_event[n], &info));
        ck_assert_str_eq(info.name, name);
    }
    /* names registered before the frames still resolve */
    ck_assert_uint_eq(kiln_component_lookup(w, "Position"), S.pos);
    ck_assert_uint_eq(kiln_event_lookup(w, "Hit").id, S.hit.id);
    end_scenario(w);
}

KILN_TEST(registration, a_query_made_mid_frame_matches_what_a_worker_buffer_adds_later) {
    kiln_world *w = run_scenario();
    for (int32_t f = 1; f <= FRAMES; f++) {
        ck_assert_int_ne(S.added[f], 0);
        const int32_t *v = kiln_get(w, S.base[f % BASE_ENTITIES], S.dyn[S.added[f]]);
        ck_assert_ptr_nonnull(v);
        ck_assert_int_eq(*v, S.added[f]);
    }
    for (int32_t n = 1; n <= MAX_TYPES; n++) {
        int64_t expected = 0;
        for (int32_t f = 1; f <= FRAMES; f++)
            if (S.added[f] == n) expected++;
        ck_assert_msg(kiln_query_count(S.dyn_query[n]) == expected, "query of Dyn%d", (int)n);
    }
    /* and the registrar's spawns all landed */
    ck_assert_int_eq(kiln_entity_count(w), BASE_ENTITIES + FRAMES * SPAWNS_PER_FRAME);
    end_scenario(w);
}

KILN_TEST(registration, the_world_byte_count_loses_no_update_made_on_worker_threads) {
    kiln_world *w = run_scenario();
    /* Propagation allocated through the world on a worker while the registrar did on the
     * main thread. (System buffers keep their own count; they are gone by now.) */
    kiln_world_stats stats;
    kiln_world_stats_get(w, &stats);
    ck_assert_int_eq(stats.bytes, atomic_load(&A.live_bytes));
    end_scenario(w);
    ck_assert_int_eq(atomic_load(&A.live_bytes), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* memory: the tables registration grows are replaced, not resized; out of memory at any step  */
/* of that leaves the world as it was                                                          */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(memory);

/* Registers name as a component (or an event type), refusing memory after 0, 1, 2, ...
 * grants until it succeeds; every refusal must change nothing and keep no byte. */
static uint32_t register_under_failures(kiln_world *w, test_allocator *alloc, const char *name,
                                        bool event) {
    kiln_field field = {.name = "v", .type = KILN_TYPE_INT32, .offset = 0};
    kiln_component_desc desc = {.name = name, .size = 8, .fields = &field, .field_count = 1};
    int32_t components = kiln_component_count(w);
    for (int64_t k = 0;; k++) {
        ck_assert_int_lt(k, 20);
        int64_t live = alloc->live_bytes;
        test_allocator_fail_after(alloc, k);
        uint32_t id = 0;
        kiln_event_type type = {0};
        kiln_result r = event ? kiln_event_register(w, &desc, &type)
                              : kiln_component_register(w, &desc, &id);
        test_allocator_fail_never(alloc);
        if (r == KILN_OK) return event ? type.id : id;
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ck_assert_int_eq(kiln_component_count(w), components);
        if (event) {
            ck_assert_uint_eq(kiln_event_lookup(w, name).id, 0);
            /* an event type's queue table may have grown: capacity only, kept for later */
            ck_assert_int_ge(alloc->live_bytes, live);
        } else {
            ck_assert_uint_eq(kiln_component_lookup(w, name), 0);
            ck_assert_int_eq(alloc->live_bytes, live);
        }
    }
}

KILN_TEST(memory, registration_out_of_memory_at_any_step_changes_nothing_across_table_growth) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *w = test_world_create(&alloc);
    enum { TYPES = 70 }; /* crosses several growths of the record and name tables */
    uint32_t ids[TYPES + 1], events[TYPES + 1];
    for (int32_t n = 1; n <= TYPES; n++) {
        char name[32];
        dyn_name(name, sizeof name, "T", n);
        ids[n] = register_under_failures(w, &alloc, name, false);
        events[n] = register_under_failures(w, &alloc, name, true);
        ck_assert_uint_eq(ids[n], (uint32_t)n);
        ck_assert_uint_eq(events[n], (uint32_t)n);
    }
    ck_assert_int_gt(alloc.failures, 0);
    for (int32_t n = 1; n <= TYPES; n++) {
        char name[32];
        dyn_name(name, sizeof name, "T", n);
        ck_assert_uint_eq(kiln_component_lookup(w, name), ids[n]);
        ck_assert_uint_eq(kiln_event_lookup(w, name).id, events[n]);
        kiln_component_info info;
        ck_assert(kiln_component_info_get(w, ids[n], &info));
        ck_assert_str_eq(info.name, name);
    }
    kiln_world_stats stats;
    kiln_world_stats_get(w, &stats);
    ck_assert_int_eq(stats.bytes, alloc.live_bytes);
    kiln_world_destroy(w);
    ck_assert_int_eq(alloc.live_bytes, 0);
    ck_assert_int_eq(alloc.bad_osize, 0);
}
