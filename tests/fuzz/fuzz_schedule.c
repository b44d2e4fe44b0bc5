/* fuzz_schedule.c: a schedule of C systems on a two-worker pool under the fuzzer: the model
 * replays each frame stage by stage (tick, event swap, systems, buffers in declaration order).
 * Injection is paused while a frame runs: workers allocate in no fixed order. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_ops.h"

enum { SYS_BUMP, SYS_GROW, SYS_NOTE, SYS_WIPE, SYS_PROPAGATE, SYS_COUNT };

static const char *const sys_names[SYS_COUNT] = {"bump", "grow", "note", "wipe", "propagate_transforms"};

struct fz_sched {
    kiln_schedule *s;
    kiln_query *with_a, *with_b, *with_k, *with_ub;
    bool enabled[SYS_COUNT];
    bool note_present;   /* note can leave the schedule and come back */
    int32_t next_b;      /* the B value grow's next spawn gets (only grow writes it) */
    int32_t note_runs;   /* runs of note (only note writes it) */
    fz_ctx *c;
};

static pthread_once_t jobs_once = PTHREAD_ONCE_INIT;
static kiln_jobs *shared_jobs;

static void make_jobs(void) {
    kiln_jobs_desc d = {.workers = 2};
    shared_jobs = kiln_jobs_create(&d);
    if (!shared_jobs) abort();
}

kiln_jobs *fuzz_jobs(void) {
    pthread_once(&jobs_once, make_jobs);
    return shared_jobs;
}

/* bump (worker, writes A): A.x += 1 on every row, marked changed. */
static void sys_bump(const kiln_system_ctx *ctx) {
    fz_sched *s = ctx->user;
    kiln_iter it;
    kiln_query_iter(s->with_a, &it);
    while (kiln_query_next(&it)) {
        int32_t *a = it.columns[0];
        for (int32_t r = 0; r < it.count; r++) {
            a[2 * r] += 1;
            kiln_iter_mark_changed(&it, 0, r);
        }
    }
}

/* grow (worker, reads B): tags T on every B divisible by 3 and spawns one entity with a new
 * B, all through its own buffer. */
static void sys_grow(const kiln_system_ctx *ctx) {
    fz_sched *s = ctx->user;
    kiln_iter it;
    kiln_query_iter(s->with_b, &it);
    while (kiln_query_next(&it)) {
        const int32_t *b = it.columns[0];
        for (int32_t r = 0; r < it.count; r++)
            if (b[r] % 3 == 0 && kiln_commands_add(ctx->commands, it.entities[r], s->c->id[FZ_T], NULL) != KILN_OK)
                abort();
    }
    kiln_entity ph;
    int32_t v = s->next_b++;
    if (kiln_commands_spawn(ctx->commands, &ph) != KILN_OK ||
        kiln_commands_add(ctx->commands, ph, s->c->id[FZ_B], &v) != KILN_OK)
        abort();
}

/* note (main thread, reads K): emits {runs, entities with K}; lands at the end of its stage. */
static void sys_note(const kiln_system_ctx *ctx) {
    fz_sched *s = ctx->user;
    fz_event ev = {++s->note_runs, (int32_t)kiln_query_count(s->with_k)};
    if (kiln_event_emit(ctx->world, s->c->ev, &ev) != KILN_OK) abort();
}

/* wipe (exclusive): removes U from every entity with U and B, directly. */
static void sys_wipe(const kiln_system_ctx *ctx) {
    fz_sched *s = ctx->user;
    kiln_entity list[FZ_MAX_ENT];
    int32_t n = 0;
    kiln_iter it;
    kiln_query_iter(s->with_ub, &it);
    while (kiln_query_next(&it))
        for (int32_t r = 0; r < it.count && n < FZ_MAX_ENT; r++) list[n++] = it.entities[r];
    for (int32_t i = 0; i < n; i++)
        if (kiln_remove(ctx->world, list[i], s->c->id[FZ_U], NULL) != KILN_OK) abort();
}

static kiln_query *must_query(fz_ctx *c, kiln_query_desc d) {
    kiln_query *q = NULL;
    if (kiln_query_create(c->w, &d, &q) != KILN_OK) fuzz_fail(c, "setup: schedule query");
    return q;
}

void fuzz_schedule_setup(fz_ctx *c) {
    fz_sched *s = calloc(1, sizeof *s);
    if (!s) abort();
    c->sched = s;
    s->c = c;
    s->next_b = 1000;
    s->with_a = must_query(c, (kiln_query_desc){.with = {c->id[FZ_A]}});
    s->with_b = must_query(c, (kiln_query_desc){.with = {c->id[FZ_B]}});
    s->with_k = must_query(c, (kiln_query_desc){.with = {c->id[FZ_K]}});
    s->with_ub = must_query(c, (kiln_query_desc){.with = {c->id[FZ_U], c->id[FZ_B]}});
    s->s = kiln_schedule_create(c->w, &(kiln_schedule_desc){.jobs = fuzz_jobs()});
    if (!s->s) fuzz_fail(c, "setup: kiln_schedule_create");
    kiln_system_desc d[SYS_COUNT] = {
        [SYS_BUMP] = {.name = "bump", .run = sys_bump, .writes = {c->id[FZ_A]}},
        [SYS_GROW] = {.name = "grow", .run = sys_grow, .reads = {c->id[FZ_B]}},
        [SYS_NOTE] = {.name = "note", .run = sys_note, .reads = {c->id[FZ_K]}, .main_thread = true},
        [SYS_WIPE] = {.name = "wipe", .run = sys_wipe, .exclusive = true},
    };
    kiln_transform_system_desc(c->w, &d[SYS_PROPAGATE]);
    for (int i = 0; i < SYS_COUNT; i++) {
        if (i != SYS_PROPAGATE) d[i].user = s;
        if (kiln_schedule_add(s->s, &d[i]) != KILN_OK) fuzz_fail(c, "setup: kiln_schedule_add %s", sys_names[i]);
        s->enabled[i] = true;
    }
    s->note_present = true;
}

void fuzz_schedule_teardown(fz_ctx *c) {
    fz_sched *s = c->sched;
    if (!s) return;
    kiln_schedule_destroy(s->s);
    kiln_query_destroy(s->with_a);
    kiln_query_destroy(s->with_b);
    kiln_query_destroy(s->with_k);
    kiln_query_destroy(s->with_ub);
    free(s);
    c->sched = NULL;
}

static bool has(const fz_ent *e, int slot) { return e->state == FZ_ALIVE && ((e->mask >> slot) & 1u); }

/* One frame in the model, stage by stage. */
static void model_frame(fz_ctx *c, fz_sched *s, int32_t new_b[2], int32_t *n_new) {
    fz_model *m = &c->m;
    m->tick++;
    memcpy(m->ev_prev, m->ev_cur, sizeof(fz_event) * (size_t)m->n_cur);
    m->n_prev = m->n_cur;
    m->n_cur = 0;
    /* stage 0: bump, grow and note together; then grow's and note's buffers, in that order */
    unsigned char tag[FZ_VAL] = {0};
    int32_t tagged[FZ_MAX_ENT], nt = 0, with_k = 0;
    for (int32_t i = 0; i < m->n_ents; i++) {
        fz_ent *e = &m->ents[i];
        if (s->enabled[SYS_BUMP] && has(e, FZ_A)) {
            int32_t x;
            memcpy(&x, e->val[FZ_A], 4);
            x += 1;
            memcpy(e->val[FZ_A], &x, 4);
            e->tick[FZ_A] = m->tick;
        }
        if (has(e, FZ_B)) {
            int32_t b;
            memcpy(&b, e->val[FZ_B], 4);
            if (b % 3 == 0) tagged[nt++] = i;
        }
        with_k += has(e, FZ_K);
    }
    *n_new = 0;
    if (s->enabled[SYS_GROW]) {
        for (int32_t k = 0; k < nt; k++) model_write(m, &m->ents[tagged[k]], FZ_T, tag);
        new_b[(*n_new)++] = s->next_b - 1; /* the system already ran */
    }
    if (s->enabled[SYS_NOTE] && s->note_present) m->ev_cur[m->n_cur++] = (fz_event){s->note_runs, with_k};
}

/* Learns the entity grow spawned: the one live entity the model does not know. */
static void learn_spawned(fz_ctx *c, int32_t n_new, const int32_t *new_b) {
    kiln_entity list[FZ_MAX_ENT + 2];
    int64_t n = kiln_world_entities(c->w, list, FZ_MAX_ENT + 2);
    int32_t found = 0;
    for (int64_t i = 0; i < n && i < FZ_MAX_ENT + 2; i++) {
        fz_ent *e = model_find(&c->m, list[i]);
        if (e && e->state == FZ_ALIVE) continue;
        if (e) fuzz_fail(c, "a frame revived an entity the model has dead or reserved");
        if (found == n_new) fuzz_fail(c, "a frame spawned more entities than the model expects");
        fz_ent *ne = model_add_entity(c, list[i], FZ_ALIVE);
        unsigned char v[FZ_VAL] = {0};
        memcpy(v, &new_b[found], 4);
        model_write(&c->m, ne, FZ_B, v);
        found++;
    }
    if (found != n_new) fuzz_fail(c, "a frame spawned %d entities, the model expects %d", found, n_new);
}

static void fz_sched_toggle_note(fz_ctx *c, fz_sched *s, bool twice) {
    if (s->note_present) {
        c->op_name = "kiln_schedule_remove";
        fz_expect(c, kiln_schedule_remove(s->s, "note"), KILN_OK, "kiln_schedule_remove");
        s->note_present = false;
        if (kiln_schedule_find(s->s, "note") != -1) fuzz_fail(c, "a removed system is still found");
        if (twice) fz_expect(c, kiln_schedule_remove(s->s, "note"), KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_remove");
        return;
    }
    c->op_name = "kiln_schedule_add";
    kiln_system_desc d = {.name = "note", .run = sys_note, .reads = {c->id[FZ_K]}, .main_thread = true, .user = s};
    int32_t before = kiln_schedule_system_count(s->s);
    int64_t f0 = fuzz_alloc_failures();
    kiln_result r = kiln_schedule_add(s->s, &d);
    if (fz_oom_ok(c, r, f0)) {
        if (kiln_schedule_system_count(s->s) != before || kiln_schedule_find(s->s, "note") != -1)
            fuzz_fail(c, "a failed kiln_schedule_add left the system behind");
        return;
    }
    fz_expect(c, r, KILN_OK, "kiln_schedule_add");
    s->note_present = true;
    s->enabled[SYS_NOTE] = true;
    if (twice) fz_expect(c, kiln_schedule_add(s->s, &d), KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_add");
    if (kiln_schedule_system_count(s->s) != before + 1) fuzz_fail(c, "kiln_schedule_add did not add one system");
}

void fuzz_op_schedule(fz_ctx *c, uint8_t sub) {
    fz_sched *s = c->sched;
    if (!s) return;
    if (sub % 4 == 1) {
        c->op_name = "kiln_schedule_enable";
        int i = (sub >> 2) % SYS_COUNT;
        bool on = (sub >> 5) & 1;
        bool known = i != SYS_NOTE || s->note_present;
        fz_expect(c, kiln_schedule_enable(s->s, sys_names[i], on), known ? KILN_OK : KILN_ERR_INVALID_ARGUMENT,
                  "kiln_schedule_enable");
        if (known) s->enabled[i] = on;
        return;
    }
    if (sub % 8 == 3) { /* note leaves, or comes back (declared last: it then runs later) */
        fz_sched_toggle_note(c, s, (sub >> 3) & 1);
        return;
    }
    if (sub % 4 == 2) {
        c->op_name = "kiln_schedule_build";
        int64_t f0 = fuzz_alloc_failures();
        kiln_result r = kiln_schedule_build(s->s);
        if (!fz_oom_ok(c, r, f0)) fz_expect(c, r, KILN_OK, "kiln_schedule_build");
        if (r == KILN_OK && kiln_schedule_stage_count(s->s) != 3)
            fuzz_fail(c, "the schedule has %d stages, the model 3", kiln_schedule_stage_count(s->s));
        return;
    }
    c->op_name = "kiln_schedule_run";
    /* A frame runs outside deferred sections, with room for what it spawns. */
    if (c->m.defer_depth > 0 || c->queue.count > 0 || c->m.n_ents + 1 > FZ_MAX_ENT ||
        c->m.n_cur + 1 >= FZ_MAX_EVENTS * 4)
        return;
    fuzz_alloc_pause(true);
    kiln_result r = kiln_schedule_run(s->s, 1.0 / 60.0);
    fuzz_alloc_pause(false);
    fz_expect(c, r, KILN_OK, "kiln_schedule_run");
    int32_t new_b[2], n_new;
    model_frame(c, s, new_b, &n_new);
    learn_spawned(c, n_new, new_b);
    /* stage 1: wipe, alone and undeferred */
    if (s->enabled[SYS_WIPE])
        for (int32_t i = 0; i < c->m.n_ents; i++)
            if (has(&c->m.ents[i], FZ_U) && has(&c->m.ents[i], FZ_B)) model_remove(&c->m, &c->m.ents[i], FZ_U);
    /* stage 2: propagation, missing WorldTransforms through its buffer at the stage's end */
    if (s->enabled[SYS_PROPAGATE]) model_propagate(c, false);
}
