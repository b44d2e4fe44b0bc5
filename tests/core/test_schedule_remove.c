/* test_schedule_remove.c: Check suite for removing systems (at once, or deferred when a run is
 * under way), before/after names that wait for their system, and cycles refused at add. */
#include <check.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_fixture.h"
#include "kiln.h"
#include "schedule_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* What a counted system saw: its runs, and its fini calls (once it left the schedule). */
typedef struct counter {
    atomic_int runs;
    atomic_int fini;
} counter;

static void counted_run(const kiln_system_ctx *ctx) { atomic_fetch_add(&((counter *)ctx->user)->runs, 1); }

static void counted_fini(kiln_world *world, void *user) {
    (void)world;
    atomic_fetch_add(&((counter *)user)->fini, 1);
}

static kiln_system_info info_of(kiln_schedule *s, const char *name) {
    int32_t i = kiln_schedule_find(s, name);
    ck_assert_msg(i >= 0, "no system %s", name);
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, i, &info));
    return info;
}

/* The names of the systems in declaration order, comma-separated (static storage). */
static const char *names(kiln_schedule *s) {
    static char buf[512];
    size_t len = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < kiln_schedule_system_count(s); i++) {
        kiln_system_info info;
        ck_assert(kiln_schedule_system_info_get(s, i, &info));
        ck_assert_int_eq(info.index, i);
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i ? "," : "", info.name);
    }
    return buf;
}

/* Systems append their letter to a shared log, to see the order they ran in. */
typedef struct run_log {
    char text[64];
    int len;
} run_log;

typedef struct logged {
    run_log *log;
    char letter;
} logged;

static void log_run(const kiln_system_ctx *ctx) {
    logged *l = ctx->user;
    if (l->log->len < (int)sizeof l->log->text - 1) l->log->text[l->log->len++] = l->letter;
}

/* The fixture world (schedule_fixture.h), made afresh around every test of a group using it. */
static schedule_fixture F;

static void setup(void) { schedule_fixture_setup(&F); }

static void teardown(void) { schedule_fixture_teardown(&F); }

KILN_TEST_GROUP_WITH(removing, .setup = setup, .teardown = teardown, .timeout = 30);
KILN_TEST_GROUP_WITH(ordering, .setup = setup, .teardown = teardown);
KILN_TEST_GROUP_WITH(memory, .timeout = 60);

/* ------------------------------------------------------------------------------------------ */
/* removing between runs                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST(removing, removing_c_and_main_thread_systems_keeps_the_others_in_declaration_order) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    counter a = {0}, b = {0}, c = {0}, d = {0};
    add_system(s, (kiln_system_desc){.name = "a", .run = counted_run, .user = &a, .writes = {F.p},
                                     .fini = counted_fini});
    add_system(s, (kiln_system_desc){.name = "b", .run = counted_run, .user = &b, .reads = {F.p},
                                     .fini = counted_fini});
    add_system(s, (kiln_system_desc){.name = "c", .run = counted_run, .user = &c, .reads = {F.p},
                                     .main_thread = true, .fini = counted_fini});
    add_system(s, (kiln_system_desc){.name = "d", .run = counted_run, .user = &d, .reads = {F.q}});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: a, d\nstage 1: b, c\n");
    int64_t a_runs = info_of(s, "a").runs;

    ck_assert_int_eq(kiln_schedule_remove(s, "b"), KILN_OK); /* a worker system */
    ck_assert_int_eq(loaded(&b.fini), 1);
    ck_assert_int_eq(kiln_schedule_system_count(s), 3);
    ck_assert_int_eq(kiln_schedule_find(s, "b"), -1);
    ck_assert_str_eq(names(s), "a,c,d");
    ck_assert_int_eq(kiln_schedule_find(s, "c"), 1);
    ck_assert_int_eq(info_of(s, "c").stage, -1); /* stages wait for the next build */

    ck_assert_int_eq(kiln_schedule_remove(s, "c"), KILN_OK); /* a main-thread system */
    ck_assert_int_eq(loaded(&c.fini), 1);
    ck_assert_str_eq(names(s), "a,d");
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: a, d\n");
    /* the others keep their statistics; the removed ran no more */
    ck_assert_int_eq(info_of(s, "a").runs, a_runs + 1);
    ck_assert_int_eq(loaded(&a.runs), 2);
    ck_assert_int_eq(loaded(&d.runs), 2);
    ck_assert_int_eq(loaded(&b.runs), 1);
    ck_assert_int_eq(loaded(&c.runs), 1);
    ck_assert_int_eq(loaded(&b.fini), 1);
    ck_assert_int_eq(loaded(&c.fini), 1);

    /* removing every system leaves an empty schedule that still runs */
    ck_assert_int_eq(kiln_schedule_remove(s, "a"), KILN_OK);
    ck_assert_int_eq(kiln_schedule_remove(s, "d"), KILN_OK);
    ck_assert_int_eq(kiln_schedule_system_count(s), 0);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 0);
    ck_assert_int_eq(loaded(&a.runs), 2);
    ck_assert_int_eq(loaded(&a.fini), 1);
    kiln_schedule_destroy(s);
    ck_assert_int_eq(loaded(&a.fini), 1); /* gone already: not called again */
    kiln_jobs_destroy(jobs);
}

KILN_TEST(removing, a_removed_name_can_be_added_again_as_a_fresh_system_at_the_end) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    counter old_x = {0}, new_x = {0};
    add_system(s, (kiln_system_desc){.name = "x", .run = counted_run, .user = &old_x,
                                     .writes = {F.p}, .fini = counted_fini});
    add_system(s, (kiln_system_desc){.name = "y", .run = noop, .reads = {F.p}});
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: x\nstage 1: y\n");
    ck_assert_int_eq(kiln_schedule_remove(s, "x"), KILN_OK);
    add_system(s, (kiln_system_desc){.name = "x", .run = counted_run, .user = &new_x,
                                     .writes = {F.p}, .fini = counted_fini});
    ck_assert_str_eq(names(s), "y,x");
    kiln_system_info info = info_of(s, "x");
    ck_assert_int_eq(info.runs, 0);
    ck_assert_int_eq(info.total_ns, 0);
    ck_assert(info.enabled);
    ck_assert(!info.removing);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    /* declaration order now puts y first */
    ck_assert_str_eq(describe(s), "stage 0: y\nstage 1: x\n");
    ck_assert_int_eq(loaded(&old_x.runs), 3);
    ck_assert_int_eq(loaded(&new_x.runs), 1);
    ck_assert_int_eq(info_of(s, "x").runs, 1);
    ck_assert_int_eq(loaded(&old_x.fini), 1);
    ck_assert_int_eq(loaded(&new_x.fini), 0);
    /* destroying the schedule is how the new x leaves: its fini runs once */
    kiln_schedule_destroy(s);
    ck_assert_int_eq(loaded(&new_x.fini), 1);
    ck_assert_int_eq(loaded(&old_x.fini), 1);
}

KILN_TEST(removing, removing_a_system_others_are_ordered_against_recomputes_the_stages) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    run_log log = {0};
    logged la = {&log, 'a'}, lb = {&log, 'b'}, lc = {&log, 'c'}, lm = {&log, 'm'};
    add_system(s, (kiln_system_desc){.name = "after_m", .run = log_run, .user = &la, .after = {"m"}});
    add_system(s, (kiln_system_desc){.name = "before_m", .run = log_run, .user = &lb, .before = {"m"}});
    add_system(s, (kiln_system_desc){.name = "m", .run = log_run, .user = &lm});
    add_system(s, (kiln_system_desc){.name = "free", .run = log_run, .user = &lc});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: before_m, free\nstage 1: m\nstage 2: after_m\n");
    ck_assert_str_eq(log.text, "bcma");

    ck_assert_int_eq(kiln_schedule_remove(s, "m"), KILN_OK);
    log = (run_log){0};
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: after_m, before_m, free\n");
    ck_assert_str_eq(log.text, "abc");
    /* the constraints naming m stay, waiting for a system called m */
    kiln_system_info info = info_of(s, "after_m");
    ck_assert_int_eq(info.after_count, 1);
    ck_assert_str_eq(info.after[0], "m");
    ck_assert_int_eq(info.unresolved, 1);
    ck_assert_int_eq(info_of(s, "before_m").unresolved, 1);
    ck_assert_int_eq(info_of(s, "free").unresolved, 0);

    /* a new m puts them back in force */
    add_system(s, (kiln_system_desc){.name = "m", .run = log_run, .user = &lm});
    log = (run_log){0};
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: before_m, free\nstage 1: m\nstage 2: after_m\n");
    ck_assert_str_eq(log.text, "bcma");
    ck_assert_int_eq(info_of(s, "after_m").unresolved, 0);
    kiln_schedule_destroy(s);
}

KILN_TEST(removing, removing_an_unknown_name_fails_and_changes_nothing) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "w", .run = noop, .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "r", .run = noop, .reads = {F.p}});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    const char *stages = "stage 0: w\nstage 1: r\n";

    ck_assert_int_eq(kiln_schedule_remove(s, "ghost"), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_schedule_remove: no system named 'ghost'");
    ck_assert_int_eq(kiln_schedule_remove(s, ""), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_schedule_remove(s, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_schedule_remove: name is NULL");
    /* a name quoted back is bounded */
    char long_name[300];
    memset(long_name, 'z', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    ck_assert_int_eq(kiln_schedule_remove(s, long_name), KILN_ERR_INVALID_ARGUMENT);
    const char *err = kiln_world_error(F.world);
    ck_assert_uint_eq(strlen(err), strlen("kiln_schedule_remove: no system named '...'") + KILN_MAX_NAME);
    ck_assert_str_eq(err + strlen(err) - 5, "z...'");

    /* removing twice: the second finds nothing */
    ck_assert_int_eq(kiln_schedule_remove(s, "r"), KILN_OK);
    ck_assert_int_eq(kiln_schedule_remove(s, "r"), KILN_ERR_INVALID_ARGUMENT);
    add_system(s, (kiln_system_desc){.name = "r", .run = noop, .reads = {F.p}});
    ck_assert_int_eq(kiln_schedule_system_count(s), 2);
    ck_assert_str_eq(names(s), "w,r");
    ck_assert_str_eq(describe(s), stages);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_schedule_destroy(s);
}

/* ------------------------------------------------------------------------------------------ */
/* removing during a run                                                                      */
/* ------------------------------------------------------------------------------------------ */

typedef struct frame_probe {
    kiln_schedule *schedule;
    kiln_component spawn_with;
    atomic_int runs;
    atomic_int fini;
    kiln_result first, second;   /* the self-removal, then removing again */
    int32_t found_after;         /* kiln_schedule_find of itself after removing */
    int32_t count_during;        /* kiln_schedule_system_count seen by the observer */
    bool saw_removing;           /* the observer saw "self" with removing set */
    kiln_result nested_run, nested_build;
} frame_probe;

static void probe_fini(kiln_world *world, void *user) {
    (void)world;
    atomic_fetch_add(&((frame_probe *)user)->fini, 1);
}

/* Records a spawn into its buffer, then removes itself. */
static void remove_self(const kiln_system_ctx *ctx) {
    frame_probe *p = ctx->user;
    atomic_fetch_add(&p->runs, 1);
    kiln_entity e;
    ck_assert_int_eq(kiln_commands_spawn(ctx->commands, &e), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(ctx->commands, e, p->spawn_with, NULL), KILN_OK);
    p->first = kiln_schedule_remove(p->schedule, ctx->name);
    p->second = kiln_schedule_remove(p->schedule, ctx->name);
    p->found_after = kiln_schedule_find(p->schedule, ctx->name);
}

static void remove_late(const kiln_system_ctx *ctx) {
    frame_probe *p = ctx->user;
    atomic_fetch_add(&p->runs, 1);
    p->first = kiln_schedule_remove(p->schedule, "late");
}

static void observe(const kiln_system_ctx *ctx) {
    frame_probe *p = ctx->user;
    atomic_fetch_add(&p->runs, 1);
    p->count_during = kiln_schedule_system_count(p->schedule);
    for (int32_t i = 0; i < p->count_during; i++) {
        kiln_system_info info;
        ck_assert(kiln_schedule_system_info_get(p->schedule, i, &info));
        if (strcmp(info.name, "self") == 0) p->saw_removing = info.removing;
    }
    p->nested_run = kiln_schedule_run(p->schedule, 0.0);
    p->nested_build = kiln_schedule_build(p->schedule);
}

KILN_TEST(removing, a_system_removing_itself_during_a_run_finishes_the_frame_and_leaves_at_its_end) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    frame_probe self = {.schedule = s, .spawn_with = F.q}, killer = {.schedule = s},
                observer = {.schedule = s};
    counter late = {0};
    add_system(s, (kiln_system_desc){.name = "self", .run = remove_self, .user = &self,
                                     .writes = {F.p}, .fini = probe_fini});
    add_system(s, (kiln_system_desc){.name = "killer", .run = remove_late, .user = &killer,
                                     .reads = {F.q}, .fini = probe_fini});
    add_system(s, (kiln_system_desc){.name = "late", .run = counted_run, .user = &late,
                                     .reads = {F.p}, .fini = counted_fini});
    add_system(s, (kiln_system_desc){.name = "observer", .run = observe, .user = &observer,
                                     .after = {"late"}, .main_thread = true});
    ck_assert_str_eq(describe(s), "stage 0: self, killer\nstage 1: late\nstage 2: observer\n");

    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    /* self ran once; removing returned at once; the second removal found no such system */
    ck_assert_int_eq(loaded(&self.runs), 1);
    ck_assert_int_eq(self.first, KILN_OK);
    ck_assert_int_eq(self.second, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(self.found_after, -1);
    /* during the frame both were still listed, with removing set */
    ck_assert_int_eq(observer.count_during, 4);
    ck_assert(observer.saw_removing);
    ck_assert_int_eq(observer.nested_run, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(observer.nested_build, KILN_ERR_INVALID_ARGUMENT);
    /* late was removed before its stage started: it never ran */
    ck_assert_int_eq(killer.first, KILN_OK);
    ck_assert_int_eq(loaded(&late.runs), 0);
    /* what self recorded before removing itself was applied */
    ck_assert_int_eq(kiln_entity_count(F.world), 1);
    /* both left when the run ended, each fini once */
    ck_assert_int_eq(loaded(&self.fini), 1);
    ck_assert_int_eq(loaded(&late.fini), 1);
    ck_assert_str_eq(names(s), "killer,observer");
    ck_assert_int_eq(info_of(s, "observer").unresolved, 1);

    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(loaded(&self.runs), 1);
    ck_assert_int_eq(loaded(&observer.runs), 2);
    ck_assert_int_eq(killer.first, KILN_ERR_INVALID_ARGUMENT); /* late is gone */
    ck_assert_int_eq(kiln_entity_count(F.world), 1);
    ck_assert_str_eq(describe(s), "stage 0: killer, observer\n");
    kiln_schedule_destroy(s);
    ck_assert_int_eq(loaded(&self.fini), 1);
    ck_assert_int_eq(loaded(&killer.fini), 1);
}

typedef struct reloader {
    kiln_schedule *schedule;
    counter *new_target;
    kiln_component reads;
    int calls;
    kiln_result removed, added;
    int32_t index_of_new;
} reloader;

/* On its first run, replaces "target" by a system of the same name with another callback. */
static void reload_target(const kiln_system_ctx *ctx) {
    reloader *r = ctx->user;
    if (r->calls++) return;
    r->removed = kiln_schedule_remove(r->schedule, "target");
    kiln_system_desc d = {.name = "target", .run = counted_run, .user = r->new_target,
                          .reads = {r->reads}};
    r->added = kiln_schedule_add(r->schedule, &d);
    r->index_of_new = kiln_schedule_find(r->schedule, "target");
}

KILN_TEST(removing, a_system_can_replace_another_by_name_during_a_run_for_the_next_frame) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    counter old_target = {0}, new_target = {0};
    reloader r = {.schedule = s, .new_target = &new_target, .reads = F.p};
    add_system(s, (kiln_system_desc){.name = "reloader", .run = reload_target, .user = &r,
                                     .writes = {F.p}, .main_thread = true});
    add_system(s, (kiln_system_desc){.name = "target", .run = counted_run, .user = &old_target,
                                     .reads = {F.p}});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(r.removed, KILN_OK);
    ck_assert_int_eq(r.added, KILN_OK);
    ck_assert_int_eq(r.index_of_new, 2); /* after the old one, still listed during the run */
    ck_assert_int_eq(loaded(&old_target.runs), 0);
    ck_assert_int_eq(loaded(&new_target.runs), 0);
    ck_assert_str_eq(names(s), "reloader,target");
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(loaded(&old_target.runs), 0);
    ck_assert_int_eq(loaded(&new_target.runs), 1);
    ck_assert_str_eq(describe(s), "stage 0: reloader\nstage 1: target\n");
    kiln_schedule_destroy(s);
}

typedef struct worker_case {
    kiln_schedule *schedule;
    atomic_int runs;
    atomic_int failures;
    kiln_result worker_add;
} worker_case;

/* A worker system that removes itself on its first run. */
static void worker_once(const kiln_system_ctx *ctx) {
    worker_case *w = ctx->user;
    atomic_fetch_add(&w->runs, 1);
    if (kiln_schedule_remove(w->schedule, ctx->name) != KILN_OK) atomic_fetch_add(&w->failures, 1);
}

/* A worker system that may not add (it is not on the schedule's thread). */
static void worker_adds(const kiln_system_ctx *ctx) {
    worker_case *w = ctx->user;
    atomic_fetch_add(&w->runs, 1);
    kiln_system_desc d = {.name = "from_worker", .run = noop};
    w->worker_add = kiln_schedule_add(w->schedule, &d);
    if (kiln_schedule_remove(w->schedule, ctx->name) != KILN_OK) atomic_fetch_add(&w->failures, 1);
}

/* A main-thread system adding systems while workers remove theirs. */
static void main_adds(const kiln_system_ctx *ctx) {
    worker_case *w = ctx->user;
    int n = atomic_fetch_add(&w->runs, 1);
    for (int i = 0; i < 20; i++) {
        char name[32];
        snprintf(name, sizeof name, "added_%d_%d", n, i);
        kiln_system_desc d = {.name = name, .run = noop};
        if (kiln_schedule_add(w->schedule, &d) != KILN_OK) atomic_fetch_add(&w->failures, 1);
        if (kiln_schedule_find(w->schedule, name) < 0) atomic_fetch_add(&w->failures, 1);
    }
}

KILN_TEST(removing, worker_systems_remove_themselves_while_the_main_thread_adds) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    worker_case once = {.schedule = s}, adder = {.schedule = s}, on_main = {.schedule = s};
    for (int i = 0; i < 6; i++) {
        char name[32];
        snprintf(name, sizeof name, "once_%d", i);
        add_system(s, (kiln_system_desc){.name = name, .run = worker_once, .user = &once,
                                         .reads = {F.p}});
    }
    add_system(s, (kiln_system_desc){.name = "adder", .run = worker_adds, .user = &adder});
    add_system(s, (kiln_system_desc){.name = "main", .run = main_adds, .user = &on_main,
                                     .main_thread = true});
    for (int frame = 0; frame < 3; frame++) ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(loaded(&once.runs), 6);
    ck_assert_int_eq(loaded(&once.failures), 0);
    ck_assert_int_eq(loaded(&adder.runs), 1);
    ck_assert_int_eq(adder.worker_add, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(loaded(&adder.failures), 0);
    ck_assert_int_eq(loaded(&on_main.runs), 3);
    ck_assert_int_eq(loaded(&on_main.failures), 0);
    ck_assert_int_eq(kiln_schedule_find(s, "from_worker"), -1);
    ck_assert_int_eq(kiln_schedule_find(s, "once_0"), -1);
    ck_assert_int_eq(kiln_schedule_system_count(s), 1 + 3 * 20);
    ck_assert_int_eq(kiln_schedule_find(s, "main"), 0);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
}

/* ------------------------------------------------------------------------------------------ */
/* before/after names and cycles                                                              */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST(ordering, unknown_before_and_after_names_are_honoured_once_the_named_system_arrives) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    run_log log = {0};
    logged la = {&log, 'a'}, lb = {&log, 'b'}, lg = {&log, 'g'};
    /* a mod loaded before the one it orders itself against */
    add_system(s, (kiln_system_desc){.name = "after_ghost", .run = log_run, .user = &la,
                                     .after = {"ghost", "nobody"}});
    add_system(s, (kiln_system_desc){.name = "before_ghost", .run = log_run, .user = &lb,
                                     .before = {"ghost"}});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(log.text, "ab");
    ck_assert_int_eq(info_of(s, "after_ghost").unresolved, 2);
    ck_assert_int_eq(info_of(s, "before_ghost").unresolved, 1);
    kiln_system_info info = info_of(s, "after_ghost");
    ck_assert_int_eq(info.after_count, 2);
    ck_assert_str_eq(info.after[0], "ghost");
    ck_assert_str_eq(info.after[1], "nobody");
    ck_assert_ptr_null(info.after[2]);
    ck_assert_int_eq(info.before_count, 0);
    ck_assert_ptr_null(info.before[0]);

    add_system(s, (kiln_system_desc){.name = "ghost", .run = log_run, .user = &lg});
    log = (run_log){0};
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(log.text, "bga");
    ck_assert_str_eq(describe(s), "stage 0: before_ghost\nstage 1: ghost\nstage 2: after_ghost\n");
    ck_assert_int_eq(info_of(s, "after_ghost").unresolved, 1); /* nobody is still missing */
    ck_assert_int_eq(info_of(s, "before_ghost").unresolved, 0);
    kiln_schedule_destroy(s);
}

KILN_TEST(ordering, cycles_of_two_and_three_systems_are_refused_naming_only_the_cycle) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    run_log log = {0};
    logged lx = {&log, 'x'}, la = {&log, 'a'}, lb = {&log, 'b'}, ly = {&log, 'y'};
    add_system(s, (kiln_system_desc){.name = "x", .run = log_run, .user = &lx});
    add_system(s, (kiln_system_desc){.name = "a", .run = log_run, .user = &la, .before = {"b"}});
    add_system(s, (kiln_system_desc){.name = "b", .run = log_run, .user = &lb, .after = {"x"}});
    add_system(s, (kiln_system_desc){.name = "y", .run = log_run, .user = &ly, .after = {"b"}});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    const char *stages = "stage 0: x, a\nstage 1: b\nstage 2: y\n";
    ck_assert_str_eq(describe(s), stages);
    ck_assert_str_eq(log.text, "xaby");

    const struct {
        kiln_system_desc desc;
        const char *message;
    } bad[] = {
        /* two systems: c before a and c after a */
        {{.name = "c", .run = noop, .before = {"a"}, .after = {"a"}},
         "kiln_schedule_add: 'c' -> 'a' -> 'c' would form a cycle"},
        /* three systems: b -> c -> a -> b */
        {{.name = "c", .run = noop, .after = {"b"}, .before = {"a"}},
         "kiln_schedule_add: 'c' -> 'a' -> 'b' -> 'c' would form a cycle"},
        /* through others' constraints naming the newcomer: y -> c -> x -> b -> y */
        {{.name = "c", .run = noop, .after = {"y"}, .before = {"x"}},
         "kiln_schedule_add: 'c' -> 'x' -> 'b' -> 'y' -> 'c' would form a cycle"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_world_clear_error(F.world);
        ck_assert_int_eq(kiln_schedule_add(s, &bad[i].desc), KILN_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(kiln_world_error(F.world), bad[i].message);
        /* the schedule is as it was, and runs as before */
        ck_assert_int_eq(kiln_schedule_system_count(s), 4);
        ck_assert_int_eq(kiln_schedule_find(s, "c"), -1);
        ck_assert_str_eq(names(s), "x,a,b,y");
        log = (run_log){0};
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert_str_eq(describe(s), stages);
        ck_assert_str_eq(log.text, "xaby");
    }
    kiln_schedule_destroy(s);
}

KILN_TEST(ordering, the_add_that_closes_a_cycle_through_waiting_names_is_the_one_refused) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    /* p after r and q after p wait for r; r after q would close r -> p -> q -> r */
    add_system(s, (kiln_system_desc){.name = "p", .run = noop, .after = {"r"}});
    add_system(s, (kiln_system_desc){.name = "q", .run = noop, .after = {"p"}});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_system_desc r = {.name = "r", .run = noop, .after = {"q"}};
    ck_assert_int_eq(kiln_schedule_add(s, &r), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world),
                     "kiln_schedule_add: 'r' -> 'p' -> 'q' -> 'r' would form a cycle");
    ck_assert_str_eq(names(s), "p,q");
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: p\nstage 1: q\n");
    /* without the closing constraint r is welcome */
    r.after[0] = NULL;
    ck_assert_int_eq(kiln_schedule_add(s, &r), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: r\nstage 1: p\nstage 2: q\n");
    /* removing r and re-adding it with the closing constraint is still refused */
    ck_assert_int_eq(kiln_schedule_remove(s, "r"), KILN_OK);
    r.after[0] = "q";
    ck_assert_int_eq(kiln_schedule_add(s, &r), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(names(s), "p,q");
    kiln_schedule_destroy(s);
}

KILN_TEST(ordering, a_long_cycle_is_named_within_the_message_bound) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    char name[8][KILN_MAX_NAME + 1];
    for (int i = 0; i < 8; i++) {
        memset(name[i], 'a' + i, KILN_MAX_NAME);
        name[i][KILN_MAX_NAME] = '\0';
    }
    /* a chain 0 -> 1 -> ... -> 7; then 7 before 0 closes it */
    for (int i = 0; i < 7; i++)
        add_system(s, (kiln_system_desc){.name = name[i], .run = noop, .before = {name[i + 1]}});
    kiln_system_desc last = {.name = name[7], .run = noop, .before = {name[0]}};
    ck_assert_int_eq(kiln_schedule_add(s, &last), KILN_ERR_INVALID_ARGUMENT);
    const char *err = kiln_world_error(F.world);
    char want_start[256], want_end[256];
    snprintf(want_start, sizeof want_start, "kiln_schedule_add: '%s' -> '%s'", name[7], name[0]);
    snprintf(want_end, sizeof want_end, " -> ... -> '%s' would form a cycle", name[7]);
    ck_assert_msg(strncmp(err, want_start, strlen(want_start)) == 0, "error: %s", err);
    ck_assert_msg(strlen(err) > strlen(want_end) &&
                      strcmp(err + strlen(err) - strlen(want_end), want_end) == 0,
                  "error: %s", err);
    ck_assert_int_eq(kiln_schedule_system_count(s), 7);
    kiln_schedule_destroy(s);
}

KILN_TEST(ordering, conflicting_systems_ordered_through_a_chain_of_constraints_never_form_a_cycle) {
    /* Declaration order alone would give a -> d (a conflicts with d) and b -> c, while the
     * constraints give d -> b and c -> a: the chains win and the schedule runs. */
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    run_log log = {0};
    logged la = {&log, 'a'}, lb = {&log, 'b'}, lc = {&log, 'c'}, ld = {&log, 'd'};
    add_system(s, (kiln_system_desc){.name = "a", .run = log_run, .user = &la, .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "b", .run = log_run, .user = &lb, .writes = {F.q}});
    add_system(s, (kiln_system_desc){.name = "c", .run = log_run, .user = &lc, .reads = {F.q},
                                     .before = {"a"}});
    add_system(s, (kiln_system_desc){.name = "d", .run = log_run, .user = &ld, .reads = {F.p},
                                     .before = {"b"}});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: d\nstage 1: b\nstage 2: c\nstage 3: a\n");
    ck_assert_str_eq(log.text, "dbca");
    kiln_schedule_destroy(s);
}

/* ------------------------------------------------------------------------------------------ */
/* memory                                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct churn {
    kiln_schedule *schedule;
    int frame;
    int failures;
} churn;

/* Every other frame, replaces "victim" from inside the run. */
static void churn_victim(const kiln_system_ctx *ctx) {
    churn *c = ctx->user;
    if (c->frame++ % 2) return;
    kiln_system_desc d = {.name = "victim", .run = noop, .after = {"churn"}};
    if (kiln_schedule_remove(c->schedule, "victim") != KILN_OK) c->failures++;
    if (kiln_schedule_add(c->schedule, &d) != KILN_OK) c->failures++;
}

KILN_TEST(memory, a_thousand_add_remove_cycles_neither_leak_nor_grow) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component p = test_register_position(world);
    kiln_schedule *s = kiln_schedule_create(world, NULL);
    churn c = {.schedule = s};
    add_system(s, (kiln_system_desc){.name = "churn", .run = churn_victim, .user = &c,
                                     .main_thread = true});
    add_system(s, (kiln_system_desc){.name = "victim", .run = noop, .after = {"churn"}});
    add_system(s, (kiln_system_desc){.name = "reader", .run = noop, .reads = {p},
                                     .after = {"mover"}});
    kiln_system_desc mover = {.name = "mover", .run = noop, .writes = {p}};
    /* warm up: every record, buffer and table reaches its steady size */
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(kiln_schedule_add(s, &mover), KILN_OK);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert_int_eq(kiln_schedule_remove(s, "mover"), KILN_OK);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    }
    int64_t calls = alloc.calls, live = alloc.live_bytes;
    kiln_world_stats stats, after;
    kiln_world_stats_get(world, &stats);
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(kiln_schedule_add(s, &mover), KILN_OK);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert_int_eq(kiln_schedule_remove(s, "mover"), KILN_OK);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    }
    ck_assert_int_eq(c.failures, 0);
    ck_assert_int_eq(c.frame, 8 + 2000);
    ck_assert_str_eq(names(s), "churn,reader,victim");
    ck_assert_int_eq(alloc.live_bytes, live);
    ck_assert_int_eq(alloc.calls, calls); /* nothing allocated in the steady state */
    kiln_world_stats_get(world, &after);
    ck_assert_int_eq(after.bytes, stats.bytes);
    ck_assert_int_eq(after.allocations, stats.allocations);
    kiln_schedule_destroy(s);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
    ck_assert_int_eq(alloc.bad_osize, 0);
}

KILN_TEST(memory, an_add_refused_for_lack_of_memory_leaves_the_schedule_unchanged) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_schedule *s = kiln_schedule_create(world, NULL);
    add_system(s, (kiln_system_desc){.name = "one", .run = noop});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_system_desc two = {.name = "two", .run = noop, .after = {"one"}};
    bool added = false;
    for (int64_t grant = 0; !added && grant < 20; grant++) {
        test_allocator_fail_after(&alloc, grant);
        kiln_result r = kiln_schedule_add(s, &two);
        test_allocator_fail_never(&alloc);
        if (r == KILN_OK) {
            added = true;
            break;
        }
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ck_assert_str_eq(names(s), "one");
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert_str_eq(describe(s), "stage 0: one\n");
    }
    ck_assert(added);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: one\nstage 1: two\n");
    /* a replace that turns the order around, with more after names than the old one: refused
     * for memory at every step before it lands, the old system and its order kept */
    kiln_system_desc turned = {.name = "two", .run = noop, .before = {"one"}, .after = {"x", "y", "z"}};
    bool replaced = false;
    int64_t refusals = 0;
    for (int64_t grant = 0; !replaced && grant < 20; grant++) {
        test_allocator_fail_after(&alloc, grant);
        kiln_result r = kiln_schedule_replace(s, &turned);
        test_allocator_fail_never(&alloc);
        replaced = r == KILN_OK;
        if (replaced) break;
        refusals++;
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert_str_eq(describe(s), "stage 0: one\nstage 1: two\n");
    }
    ck_assert(replaced);
    ck_assert_int_ge(refusals, 2); /* the record and its buffer at least */
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: two\nstage 1: one\n");
    /* the index knows two's new after names: a system before two and after one closes a cycle */
    kiln_system_desc closing = {.name = "x", .run = noop, .after = {"one"}};
    ck_assert_int_eq(kiln_schedule_add(s, &closing), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(world), "kiln_schedule_add: 'x' -> 'two' -> 'one' -> 'x' would form a cycle");
    /* removing never needs memory */
    test_allocator_fail_after(&alloc, 0);
    ck_assert_int_eq(kiln_schedule_remove(s, "two"), KILN_OK);
    test_allocator_fail_never(&alloc);
    kiln_schedule_destroy(s);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* Each add brings eight after names, so the index of who names whom grows as they come: an
 * add refused for memory at any step, the growth included, leaves the schedule as it was, and
 * the names the adds brought still close cycles. */
KILN_TEST(memory, adds_whose_after_names_outgrow_the_index_fail_whole_for_lack_of_memory) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_schedule *s = kiln_schedule_create(world, NULL);
    char sys[12][16], wait[12][KILN_SYSTEM_MAX_ORDER][32], want[128] = "";
    int64_t refusals = 0;
    for (int i = 0; i < 12; i++) {
        kiln_system_desc d = {.run = noop};
        snprintf(sys[i], sizeof sys[i], "s%d", i);
        d.name = sys[i];
        for (int k = 0; k < KILN_SYSTEM_MAX_ORDER; k++) {
            snprintf(wait[i][k], sizeof wait[i][k], "w%d_%d", i, k);
            d.after[k] = wait[i][k];
        }
        kiln_result r = KILN_ERR_OUT_OF_MEMORY;
        for (int64_t grant = 0; r != KILN_OK; grant++) {
            ck_assert_int_lt(grant, 40);
            test_allocator_fail_after(&alloc, grant);
            r = kiln_schedule_add(s, &d);
            test_allocator_fail_never(&alloc);
            if (r == KILN_OK) break;
            refusals++;
            ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_str_eq(names(s), want);
        }
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? "," : "", sys[i]);
        ck_assert_str_eq(names(s), want);
    }
    ck_assert_int_gt(refusals, 24); /* more than the two records of each add's own */
    /* s7 runs after w7_5: a system before w7_5 and after s7 closes a cycle */
    kiln_system_desc closing = {.name = "w7_5", .run = noop, .after = {"s7"}};
    ck_assert_int_eq(kiln_schedule_add(s, &closing), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(world), "kiln_schedule_add: 'w7_5' -> 's7' -> 'w7_5' would form a cycle");
    kiln_schedule_destroy(s);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* replacing a system in its place                                                            */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST(ordering, a_replaced_system_keeps_its_place_and_takes_the_new_access_and_callback) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    run_log log = {0};
    logged la = {&log, 'a'}, lc = {&log, 'c'}, lB = {&log, 'B'};
    counter old_b = {0};
    add_system(s, (kiln_system_desc){.name = "a", .run = log_run, .user = &la});
    add_system(s, (kiln_system_desc){.name = "b", .run = counted_run, .user = &old_b, .fini = counted_fini,
                                     .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "c", .run = log_run, .user = &lc, .after = {"b"}});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(kiln_schedule_replace(s, &(kiln_system_desc){.name = "b", .run = log_run, .user = &lB,
                                                                   .reads = {F.q}}),
                     KILN_OK);
    ck_assert_int_eq(loaded(&old_b.fini), 1); /* the old one left */
    ck_assert_str_eq(names(s), "a,b,c");     /* in its place */
    ck_assert_int_eq(info_of(s, "b").runs, 0);
    log = (run_log){0};
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(log.text, "aBc");
    ck_assert_int_eq(loaded(&old_b.runs), 1);
    kiln_schedule_destroy(s);
}

KILN_TEST(ordering, a_replace_that_is_unknown_or_closes_a_cycle_changes_nothing) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    run_log log = {0};
    logged la = {&log, 'a'}, lb = {&log, 'b'};
    add_system(s, (kiln_system_desc){.name = "a", .run = log_run, .user = &la, .before = {"b"}});
    add_system(s, (kiln_system_desc){.name = "b", .run = log_run, .user = &lb});
    ck_assert_int_eq(kiln_schedule_replace(s, &(kiln_system_desc){.name = "zz", .run = noop}),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_schedule_replace: no system named 'zz'");
    ck_assert_int_eq(kiln_schedule_replace(s, &(kiln_system_desc){.name = "b", .run = noop, .before = {"a"}}),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_schedule_replace: 'b' -> 'a' -> 'b' would form a cycle");
    ck_assert_str_eq(names(s), "a,b");
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_str_eq(log.text, "ab"); /* the old b still runs */
    kiln_schedule_destroy(s);
}

/* A fini destroying its own schedule freed it under the remove, replace, run or destroy that ran
 * the fini, which then went on through the freed records: now it aborts, naming the fini. */
static kiln_schedule *finis_schedule;

static void destroy_the_schedule(kiln_world *world, void *user) { kiln_schedule_destroy(finis_schedule); }

KILN_TEST_GROUP(fini_misuse);

KILN_TEST_SIGNAL(fini_misuse, a_fini_destroying_its_schedule_from_a_remove_aborts, SIGABRT) {
    kiln_world *w = kiln_world_create(NULL);
    finis_schedule = kiln_schedule_create(w, NULL);
    ck_assert_int_eq(kiln_schedule_add(finis_schedule, &(kiln_system_desc){.name = "a", .run = noop,
                                                                            .fini = destroy_the_schedule}), KILN_OK);
    test_expect_abort("kiln_schedule_destroy from a fini of one of its systems");
    kiln_schedule_remove(finis_schedule, "a");
}

KILN_TEST_SIGNAL(fini_misuse, a_fini_destroying_its_schedule_from_its_destroy_aborts, SIGABRT) {
    kiln_world *w = kiln_world_create(NULL);
    finis_schedule = kiln_schedule_create(w, NULL);
    ck_assert_int_eq(kiln_schedule_add(finis_schedule, &(kiln_system_desc){.name = "a", .run = noop,
                                                                            .fini = destroy_the_schedule}), KILN_OK);
    test_expect_abort("kiln_schedule_destroy from a fini of one of its systems");
    kiln_schedule_destroy(finis_schedule);
}
