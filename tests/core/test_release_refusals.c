/* test_release_refusals.c: Check suite linked with the library built as a release build builds it (NDEBUG):
 * misuse a debug build aborts on (declared access, destroying what is in use) is refused there, changing nothing. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "refusal_fixture.h"
#include "test_registry.h"
#include "test_support.h"

static refusal_fixture F;

static void setup(void) { refusal_fixture_setup(&F); }
static void teardown(void) { refusal_fixture_teardown(&F); }

static void idle(const kiln_system_ctx *ctx) { (void)ctx; }

enum { CALLS = 7 };
static const char *const calls[CALLS] = {"kiln_component_register", "kiln_event_register", "kiln_query_create",
                                         "kiln_query_destroy", "kiln_random_init", "kiln_spawn", "kiln_add"};
static kiln_result got[CALLS];
static char messages[CALLS][320];

static void keep(int i, kiln_result r) {
    got[i] = r;
    snprintf(messages[i], sizeof messages[i], "%s", kiln_world_error(F.world));
}

/* A worker system (declaring A written: no debug check would pass it either way) registering,
 * making and destroying a query, initialising an addon and changing the world through it. */
static void misbehave(const kiln_system_ctx *ctx) {
    kiln_world *w = ctx->world;
    kiln_component c = 0;
    kiln_event_type ev = {0};
    kiln_query *q = NULL;
    kiln_entity e = KILN_NULL_ENTITY;
    keep(0, kiln_component_register(w, &(kiln_component_desc){.name = "Late", .size = 4}, &c));
    keep(1, kiln_event_register(w, &(kiln_component_desc){.name = "Late", .size = 4}, &ev));
    keep(2, kiln_query_create(w, &(kiln_query_desc){.with = {F.a}}, &q));
    kiln_query_destroy(F.query);
    keep(3, strstr(kiln_world_error(w), "kiln_query_destroy: ") ? KILN_ERR_INVALID_ARGUMENT : KILN_OK);
    keep(4, kiln_random_init(w));
    keep(5, kiln_spawn(w, &e));
    keep(6, kiln_add(w, F.e, F.a, &(int32_t){9}));
}

KILN_TEST_GROUP_WITH(release, .setup = setup, .teardown = teardown, .timeout = 60);

KILN_TEST(release, a_worker_system_registering_or_changing_the_world_is_refused_changing_nothing) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "mod", .run = misbehave, .writes = {F.a}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "idle", .run = idle}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    for (int i = 0; i < CALLS; i++) {
        char want[128];
        snprintf(want, sizeof want, "%s: called from a worker system, job or thread while a schedule runs a stage",
                 calls[i]);
        ck_assert_msg(got[i] == KILN_ERR_INVALID_ARGUMENT, "%s gave %d", calls[i], got[i]);
        ck_assert_msg(strncmp(messages[i], want, strlen(want)) == 0, "%s", messages[i]);
    }
    refusal_fixture_unchanged(&F);
}

/* What another thread's kiln_defer_end calls gave, with the messages, and its own section's. */
typedef struct stray_ender {
    kiln_result stray, own_begin_end;
    bool deferred_after;
    char message[320];
} stray_ender;

static void *end_from_another_thread(void *arg) {
    stray_ender *s = arg;
    s->stray = kiln_defer_end(F.world);
    snprintf(s->message, sizeof s->message, "%s", kiln_world_error(F.world));
    kiln_defer_begin(F.world); /* its own section nests in the other's: its end lands nothing */
    s->own_begin_end = kiln_defer_end(F.world);
    s->deferred_after = kiln_is_deferred(F.world);
    return NULL;
}

KILN_TEST(release, a_deferred_end_from_a_thread_that_began_no_section_is_refused_leaving_the_others_open) {
    kiln_defer_begin(F.world);
    kiln_defer_begin(F.world); /* nested: the stray end must not take the inner one either */
    kiln_entity queued;
    ck_assert_int_eq(kiln_spawn_with(F.world, &F.a, (const void *[]){&(int32_t){3}}, 1, &queued), KILN_OK);
    stray_ender s = {0};
    pthread_t other;
    ck_assert_int_eq(pthread_create(&other, NULL, end_from_another_thread, &s), 0);
    ck_assert_int_eq(pthread_join(other, NULL), 0);
    ck_assert_int_eq(s.stray, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(s.message, "kiln_defer_end: the calling thread has no deferred section open (an end without "
                                "its kiln_defer_begin; the open one is another thread's, or a loop's); nothing was "
                                "changed");
    ck_assert_int_eq(s.own_begin_end, KILN_OK);
    ck_assert(s.deferred_after);
    ck_assert(!kiln_is_alive(F.world, queued));
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK); /* both of this thread's ends are its own */
    ck_assert(kiln_is_deferred(F.world));
    ck_assert(!kiln_is_alive(F.world, queued));
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert(!kiln_is_deferred(F.world));
    ck_assert_int_eq(*(const int32_t *)kiln_get(F.world, queued, F.a), 3);
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_ERR_INVALID_ARGUMENT); /* one too many */
    ck_assert_int_eq(kiln_despawn(F.world, queued), KILN_OK);
    refusal_fixture_unchanged(&F);
}

static void leave_open(const kiln_system_ctx *ctx) { kiln_defer_begin(ctx->world); }

typedef struct section_holder {
    pthread_barrier_t opened, ended;
} section_holder;

static void *hold_a_section(void *arg) {
    section_holder *h = arg;
    kiln_defer_begin(F.world);
    pthread_barrier_wait(&h->opened);
    pthread_barrier_wait(&h->ended);
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    return NULL;
}

/* The section a system left open is ended by its schedule: no later end of the thread it ran
 * on may count it as its own, as the end of another thread's section. */
KILN_TEST(release, a_section_a_system_left_open_is_no_later_end_s_own) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "leaky", .run = leave_open,
                                                              .main_thread = true}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_ERR_INVALID_ARGUMENT); /* ended, named */
    kiln_schedule_destroy(s);
    ck_assert(!kiln_is_deferred(F.world));
    section_holder h;
    pthread_barrier_init(&h.opened, NULL, 2);
    pthread_barrier_init(&h.ended, NULL, 2);
    pthread_t other;
    ck_assert_int_eq(pthread_create(&other, NULL, hold_a_section, &h), 0);
    pthread_barrier_wait(&h.opened);
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_ERR_INVALID_ARGUMENT);
    ck_assert(kiln_is_deferred(F.world));
    pthread_barrier_wait(&h.ended);
    ck_assert_int_eq(pthread_join(other, NULL), 0);
    pthread_barrier_destroy(&h.opened);
    pthread_barrier_destroy(&h.ended);
    ck_assert(!kiln_is_deferred(F.world));
    refusal_fixture_unchanged(&F);
}

/* ---- deferred sections of many threads, and of threads that exit -------------------------- */

enum { HOLDERS = 64 }; /* twice the 32 slots a world keeps for threads' sections without a lock */

typedef struct holder {
    struct holders *all;
    pthread_t thread;
    kiln_result begin, own_end, second_end;
} holder;

/* Threads that each open a section, wait, then end it and try once more, one at a time (a
 * refusal writes the world's one message). */
typedef struct holders {
    kiln_world *world;
    int count;
    pthread_barrier_t opened, go;
    pthread_mutex_t turn;
    holder each[HOLDERS];
} holders;

static void *hold_then_end(void *arg) {
    holder *me = arg;
    holders *h = me->all;
    me->begin = kiln_defer_begin(h->world);
    pthread_barrier_wait(&h->opened);
    pthread_barrier_wait(&h->go);
    pthread_mutex_lock(&h->turn);
    me->own_end = kiln_defer_end(h->world);
    me->second_end = kiln_defer_end(h->world);
    pthread_mutex_unlock(&h->turn);
    return NULL;
}

/* Starts count holders on world and returns once every one has its section open. */
static void holders_open(holders *h, kiln_world *world, int count) {
    memset(h, 0, sizeof *h);
    h->world = world;
    h->count = count;
    pthread_barrier_init(&h->opened, NULL, (unsigned)count + 1);
    pthread_barrier_init(&h->go, NULL, (unsigned)count + 1);
    pthread_mutex_init(&h->turn, NULL);
    for (int i = 0; i < count; i++) {
        h->each[i].all = h;
        ck_assert_int_eq(pthread_create(&h->each[i].thread, NULL, hold_then_end, &h->each[i]), 0);
    }
    pthread_barrier_wait(&h->opened);
    for (int i = 0; i < count; i++) ck_assert_int_eq(h->each[i].begin, KILN_OK);
}

/* Lets the holders end their sections; each own end is accepted, each second end refused. */
static void holders_end(holders *h) {
    pthread_barrier_wait(&h->go);
    for (int i = 0; i < h->count; i++) ck_assert_int_eq(pthread_join(h->each[i].thread, NULL), 0);
    for (int i = 0; i < h->count; i++) {
        ck_assert_msg(h->each[i].own_end == KILN_OK, "holder %d: own end gave %d", i, h->each[i].own_end);
        ck_assert_int_eq(h->each[i].second_end, KILN_ERR_INVALID_ARGUMENT);
    }
    pthread_barrier_destroy(&h->opened);
    pthread_barrier_destroy(&h->go);
    pthread_mutex_destroy(&h->turn);
    ck_assert(!kiln_is_deferred(h->world));
}

typedef struct stray_end {
    kiln_world *world;
    kiln_result got;
    char message[320];
} stray_end;

static void *end_stray(void *arg) {
    stray_end *s = arg;
    s->got = kiln_defer_end(s->world);
    snprintf(s->message, sizeof s->message, "%s", kiln_world_error(s->world));
    return NULL;
}

static const char *const no_section_of_its_own =
    "kiln_defer_end: the calling thread has no deferred section open (an end without its kiln_defer_begin; the "
    "open one is another thread's, or a loop's); nothing was changed";

KILN_TEST(release, past_the_fast_slots_each_thread_ends_only_its_own_section) {
    static holders h;
    holders_open(&h, F.world, HOLDERS);
    kiln_entity queued;
    ck_assert_int_eq(kiln_spawn(F.world, &queued), KILN_OK); /* lands with the last holder's end */
    for (int i = 0; i < HOLDERS; i++) { /* one at a time: a refusal writes the world's one message */
        stray_end s = {.world = F.world};
        pthread_t stray;
        ck_assert_int_eq(pthread_create(&stray, NULL, end_stray, &s), 0);
        ck_assert_int_eq(pthread_join(stray, NULL), 0);
        ck_assert_msg(s.got == KILN_ERR_INVALID_ARGUMENT, "stray end %d gave %d", i, s.got);
        ck_assert_str_eq(s.message, no_section_of_its_own);
    }
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_ERR_INVALID_ARGUMENT); /* this thread has none either */
    ck_assert(kiln_is_deferred(F.world));
    ck_assert(!kiln_is_alive(F.world, queued));
    holders_end(&h);
    ck_assert(kiln_is_alive(F.world, queued));
    ck_assert_int_eq(kiln_despawn(F.world, queued), KILN_OK);
    refusal_fixture_unchanged(&F);
}

KILN_TEST(release, a_thread_past_the_slots_whose_entry_cannot_grow_has_its_begin_refused_changing_nothing) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *w = test_world_create(&alloc);
    static holders h;
    holders_open(&h, w, HOLDERS); /* the 32 slots and a table of 32 entries, all held */
    test_allocator_fail_after(&alloc, 0);
    ck_assert_int_eq(kiln_defer_begin(w), KILN_ERR_OUT_OF_MEMORY);
    ck_assert_str_eq(kiln_world_error(w), "kiln_defer_begin: out of memory for the calling thread's entry (32 "
                                          "threads beyond the first 32 hold sections); nothing was changed, no "
                                          "section opened");
    ck_assert_int_eq(alloc.failures, 1);
    ck_assert_int_eq(kiln_defer_end(w), KILN_ERR_INVALID_ARGUMENT); /* no section of its own was opened */
    test_allocator_fail_never(&alloc);
    ck_assert_int_eq(kiln_defer_begin(w), KILN_OK); /* the table grows now */
    ck_assert_int_eq(kiln_defer_end(w), KILN_OK);
    holders_end(&h); /* every entry kept through the refused growth */
    kiln_world_destroy(w);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

typedef struct reused_id {
    pthread_t self;
    kiln_result stray, own_begin, own_end;
    bool deferred_after;
    char message[320];
} reused_id;

static void *begin_and_exit(void *arg) {
    *(pthread_t *)arg = pthread_self();
    kiln_defer_begin(F.world);
    return NULL;
}

static void *end_on_a_reused_id(void *arg) {
    reused_id *r = arg;
    r->self = pthread_self();
    r->stray = kiln_defer_end(F.world);
    snprintf(r->message, sizeof r->message, "%s", kiln_world_error(F.world));
    r->own_begin = kiln_defer_begin(F.world);
    r->own_end = kiln_defer_end(F.world);
    r->deferred_after = kiln_is_deferred(F.world);
    return NULL;
}

/* glibc gives a joined thread's id to the next thread it starts: that thread's end is a stray
 * one, the exited thread's section stays open (the world deferred) rather than being its. */
KILN_TEST(release, a_section_of_a_thread_that_exited_is_no_end_s_own_of_the_next_thread_given_its_id) {
    pthread_t first, t;
    ck_assert_int_eq(pthread_create(&t, NULL, begin_and_exit, &first), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    reused_id r = {0};
    ck_assert_int_eq(pthread_create(&t, NULL, end_on_a_reused_id, &r), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(pthread_equal(r.self, first), "the second thread was given another id: nothing to check");
    ck_assert_int_eq(r.stray, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(r.message, no_section_of_its_own);
    ck_assert_int_eq(r.own_begin, KILN_OK);
    ck_assert_int_eq(r.own_end, KILN_OK);
    ck_assert(r.deferred_after);
    ck_assert(kiln_is_deferred(F.world)); /* for good: the exited thread's section has no owner left */
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_ERR_INVALID_ARGUMENT);
    refusal_fixture_unchanged(&F);
}

typedef struct short_lived {
    kiln_world *world;
    bool end;         /* end the section before exiting */
    kiln_result begun, ended;
} short_lived;

static void *section_and_exit(void *arg) {
    short_lived *s = arg;
    s->begun = kiln_defer_begin(s->world);
    if (s->end) s->ended = kiln_defer_end(s->world);
    return NULL;
}

/* Runs n threads one after another, each opening a section (and ending it when end is set). */
static void run_short_lived(kiln_world *world, int n, bool end) {
    for (int i = 0; i < n; i++) {
        short_lived s = {world, end, KILN_ERR_INVALID_ARGUMENT, KILN_ERR_INVALID_ARGUMENT};
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, section_and_exit, &s), 0);
        ck_assert_int_eq(pthread_join(t, NULL), 0);
        ck_assert_int_eq(s.begun, KILN_OK);
        if (end) ck_assert_int_eq(s.ended, KILN_OK);
    }
}

/* A server's short-lived threads: the slot of one that exited goes to the next given its address,
 * even one that exited with its section open (the world deferred for good, as above), so a
 * thousand of them took a slot each for good and grew the table past the 32 fast slots. */
KILN_TEST(release, slots_of_exited_threads_are_reused_so_short_lived_threads_do_not_grow_the_world) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    run_short_lived(world, 1000, true);
    ck_assert(!kiln_is_deferred(world));
    int64_t before = alloc.live_bytes;
    run_short_lived(world, 1000, false);
    ck_assert_int_eq(alloc.live_bytes, before);
    run_short_lived(world, 1000, true);
    ck_assert_int_eq(alloc.live_bytes, before);
    ck_assert(kiln_is_deferred(world)); /* for good: no thread is left to end the exited ones' */
    ck_assert_int_eq(kiln_defer_end(world), KILN_ERR_INVALID_ARGUMENT);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* A loop's section is its own: a kiln_defer_end inside it would land the queue under the loop. */
KILN_TEST(release, a_deferred_end_inside_a_loop_without_its_begin_is_refused) {
    kiln_iter it;
    kiln_query_iter(F.query, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_ERR_INVALID_ARGUMENT);
    ck_assert(kiln_is_deferred(F.world));
    ck_assert(!kiln_query_next(&it));
    ck_assert_int_eq(kiln_iter_fini(&it), KILN_OK);
    ck_assert(!kiln_is_deferred(F.world));
    refusal_fixture_unchanged(&F);
}

/* ------------------------------------------------------------------------------------------ */
/* destroying what is still in use (a debug build asserts)                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct destroyer {
    kiln_schedule *schedule;
    char messages[3][256];
} destroyer;

/* A system destroying its own buffer, its schedule and its world mid-run: each refused, so the
 * run goes on with them (the buffer lands at the end of the stage). */
static void destroy_everything(const kiln_system_ctx *ctx) {
    destroyer *d = ctx->user;
    kiln_entity placeholder;
    ck_assert_int_eq(kiln_commands_spawn(ctx->commands, &placeholder), KILN_OK);
    kiln_commands_destroy(ctx->commands);
    snprintf(d->messages[0], sizeof d->messages[0], "%s", kiln_world_error(ctx->world));
    kiln_schedule_destroy(d->schedule);
    snprintf(d->messages[1], sizeof d->messages[1], "%s", kiln_world_error(ctx->world));
    kiln_world_destroy(ctx->world);
    snprintf(d->messages[2], sizeof d->messages[2], "%s", kiln_world_error(ctx->world));
}

KILN_TEST(release, a_system_destroying_its_buffer_schedule_or_world_is_refused_and_the_run_goes_on) {
    static destroyer d;
    memset(&d, 0, sizeof d);
    d.schedule = kiln_schedule_create(F.world, NULL);
    ck_assert_int_eq(kiln_schedule_add(d.schedule, &(kiln_system_desc){.name = "wrecker", .run = destroy_everything,
                                                                       .user = &d, .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(d.schedule, 0.0), KILN_OK);
    ck_assert_str_eq(d.messages[0], "kiln_commands_destroy: the buffer is a system's own (ctx->commands), which its "
                                    "schedule destroys; nothing was destroyed");
    ck_assert_str_eq(d.messages[1], "kiln_schedule_destroy: the schedule is running (a call from one of its "
                                    "systems); nothing was destroyed");
    ck_assert_str_eq(d.messages[2], "kiln_world_destroy: a schedule of the world is running (a call from a system); "
                                    "nothing was destroyed");
    ck_assert_int_eq(kiln_entity_count(F.world), 2);
    ck_assert_int_eq(kiln_schedule_run(d.schedule, 0.0), KILN_OK); /* all still whole */
    ck_assert_int_eq(kiln_entity_count(F.world), 3);
    kiln_schedule_destroy(d.schedule);
}

/* A world's teardown hook and a value's destroy hook each destroying the world again. */
typedef struct redestroyer {
    kiln_world *world;
    char messages[2][256];
    int destroyed;
} redestroyer;

static void destroy_again(redestroyer *r, int i) {
    kiln_world_clear_error(r->world);
    kiln_world_destroy(r->world);
    snprintf(r->messages[i], sizeof r->messages[i], "%s", kiln_world_error(r->world));
}

static void destroy_from_fini(kiln_world *world, void *ctx) {
    (void)world;
    destroy_again(ctx, 0);
}

static void destroy_from_value(void *ptr, int32_t count, void *ctx) {
    (void)ptr;
    redestroyer *r = ctx;
    r->destroyed += count;
    destroy_again(r, 1);
}

KILN_TEST(release, destroying_a_world_from_its_own_teardown_or_destroy_hook_is_refused_with_a_message) {
    static redestroyer r;
    memset(&r, 0, sizeof r);
    r.world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(r.world);
    kiln_component held;
    ck_assert_int_eq(kiln_component_register(r.world, &(kiln_component_desc){.name = "Held", .size = 4,
                                                 .destroy = destroy_from_value, .hook_ctx = &r}, &held),
                     KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(r.world, &held, (const void *[]){&(int32_t){1}}, 1, NULL), KILN_OK);
    ck_assert_int_eq(kiln_world_atfini(r.world, destroy_from_fini, &r), KILN_OK);
    kiln_world_destroy(r.world); /* one destroy, whole: the value's hook ran once */
    const char *want = "kiln_world_destroy: the world is already being destroyed (a call from one of its teardown "
                       "or destroy hooks); this call did nothing, the destroy under way goes on";
    ck_assert_str_eq(r.messages[0], want);
    ck_assert_str_eq(r.messages[1], want);
    ck_assert_int_eq(r.destroyed, 1);
}

KILN_TEST(release, destroying_a_world_that_has_a_schedule_or_a_loop_is_refused_keeping_it) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    ck_assert_ptr_nonnull(s);
    kiln_world_destroy(F.world);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_world_destroy: the world still has schedules "
                                                "(kiln_schedule_destroy them first); nothing was destroyed");
    kiln_schedule_destroy(s);
    kiln_iter it;
    kiln_query_iter(F.query, &it);
    ck_assert(kiln_query_next(&it));
    kiln_world_destroy(F.world);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_world_destroy: a query of the world iterates; nothing was "
                                                "destroyed");
    ck_assert(!kiln_query_next(&it));
    ck_assert_int_eq(*(const int32_t *)kiln_get(F.world, F.e, F.a), 7); /* teardown destroys it */
}

/* ------------------------------------------------------------------------------------------ */
/* arguments out of bounds (a debug build asserts on most; every build refuses them now)      */
/* ------------------------------------------------------------------------------------------ */

static void error_is(const char *want) { ck_assert_str_eq(kiln_world_error(F.world), want); }

KILN_TEST(release, a_range_or_column_tick_outside_the_chunk_or_query_is_refused_changing_nothing) {
    kiln_tick before = kiln_changed_tick(F.world, F.e, F.a);
    kiln_iter it, view;
    kiln_query_iter(F.query, &it);
    ck_assert(kiln_query_next(&it));
    kiln_iter_range(&it, 0, 5000, &view);
    error_is("kiln_iter_range: rows [0, 5000) are not within the chunk (1 rows)");
    ck_assert_int_eq(view.count, 0);
    kiln_iter_range(&it, -1, 1, &view);
    error_is("kiln_iter_range: rows [-1, 1) are not within the chunk (1 rows)");
    ck_assert_int_eq(view.count, 0);
    ck_assert_uint_eq(kiln_iter_column_tick(&it, -1000), 0);
    error_is("kiln_iter_column_tick: term -1000 is not within the query's 1");
    ck_assert_int_eq(kiln_iter_fini(&it), KILN_OK);
    kiln_iter_range(&it, 0, 1, &view);
    error_is("kiln_iter_range: it has no current chunk");
    ck_assert_int_eq(view.count, 0);
    ck_assert_uint_eq(kiln_changed_tick(F.world, F.e, F.a), before);
    refusal_fixture_unchanged(&F);
}

KILN_TEST(release, despawn_unless_with_a_negative_count_or_no_keep_list_is_refused_despawning_nothing) {
    ck_assert_int_eq(kiln_despawn_unless(F.world, F.e, &F.a, -100000), KILN_ERR_INVALID_ARGUMENT);
    error_is("kiln_despawn_unless: count -100000 is negative");
    kiln_defer_begin(F.world);
    ck_assert_int_eq(kiln_despawn_unless(F.world, F.e, NULL, 2), KILN_ERR_INVALID_ARGUMENT);
    error_is("kiln_despawn_unless: keep is NULL with count 2");
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    refusal_fixture_unchanged(&F);
}

KILN_TEST(release, a_null_dest_with_a_capacity_is_refused_writing_nothing) {
    ck_assert_int_eq(kiln_entity_components(F.world, F.e, NULL, 4), -1);
    error_is("kiln_entity_components: dest is NULL with capacity 4; nothing was written");
    ck_assert_int_eq(kiln_world_entities(F.world, NULL, 3), -1);
    error_is("kiln_world_entities: dest is NULL with capacity 3; nothing was written");
    ck_assert_int_eq(kiln_entity_components(F.world, F.e, NULL, 0), 1); /* sizing stays allowed */
    ck_assert_int_eq(kiln_world_entities(F.world, NULL, 0), 1);
    refusal_fixture_unchanged(&F);
}

KILN_TEST(release, submitting_a_negative_count_of_jobs_is_refused_leaving_the_counter) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = KILN_JOBS_INLINE});
    ck_assert_ptr_nonnull(jobs);
    kiln_counter counter = {0};
    ck_assert_int_eq(kiln_jobs_submit(jobs, NULL, -2, &counter), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_jobs_submit(jobs, NULL, 3, &counter), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(counter.pending, 0);
    kiln_jobs_destroy(jobs);
}

KILN_TEST(release, get_many_through_a_stale_getter_is_refused_writing_nulls) {
    kiln_getter g;
    ck_assert_int_eq(kiln_getter_init(F.world, F.a, &g), KILN_OK);
    kiln_entity other;
    ck_assert_int_eq(kiln_spawn_with(F.world, &F.a, (const void *[]){&(int32_t){1}}, 1, &other), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.world, other), KILN_OK);
    const void *dest[2] = {&g, &g};
    ck_assert_int_eq(kiln_getter_get_many(&g, (kiln_entity[]){F.e, F.e}, 2, dest), 0);
    ck_assert_ptr_null(dest[0]);
    ck_assert_ptr_null(dest[1]);
    error_is("kiln_getter_get_many: the getter is stale (its world changed structure since kiln_getter_init); "
             "every dest is NULL");
    kiln_getter_fini(&g);
    refusal_fixture_unchanged(&F);
}
