/* schedule.c: systems staged by declared access and run stage by stage on a job pool.
 * Invariant: after a successful build every system has a stage greater than that of each
 * system it must follow, and each stage's command buffers are applied in declaration order. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "component.h"
#include "defer.h"
#include "query.h"
#include "resource.h"
#include "schedule_order.h"
#include "spin.h"
#include "world.h"

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The lock is held only for short walks and edits of the system list: a worker system may
 * remove, enable or find systems while the running thread adds one. A waiter spins a little,
 * then yields (spin.h): with more threads than cores the holder may be off the processor. */
static void lock(const kiln_schedule *s) { kl_spin_lock((atomic_flag *)&s->lock); }

static void unlock(const kiln_schedule *s) { kl_spin_unlock((atomic_flag *)&s->lock); }

/* A name for a message: at most KILN_MAX_NAME bytes, then "..." (see quoted()). */
static int quote_len(const char *name) {
    int n = 0;
    while (n <= KILN_MAX_NAME && name[n] != '\0') n++;
    return n > KILN_MAX_NAME ? KILN_MAX_NAME : n;
}

static const char *quote_tail(const char *name) { return name[quote_len(name)] ? "..." : ""; }

kiln_schedule *kiln_schedule_create(kiln_world *world, const kiln_schedule_desc *desc) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_schedule *s = kl_alloc(&world->alloc, sizeof *s);
    if (!s) {
        kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_schedule_create: out of memory");
        return NULL;
    }
    memset(s, 0, sizeof *s);
    atomic_flag_clear(&s->lock);
    s->world = world;
    s->jobs = desc ? desc->jobs : NULL;
    /* One error slot per pool thread, and a few for other threads that help the pool. */
    int32_t threads = s->jobs ? kiln_jobs_worker_count(s->jobs) : 0;
    if (threads > 0) {
        s->errors.count = threads + KL_ERROR_SPARE_SLOTS;
        s->errors.slots = kl_alloc(&world->alloc, sizeof(kl_error_slot) * (size_t)s->errors.count);
        if (!s->errors.slots) {
            kl_free(&world->alloc, s, sizeof *s);
            kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_schedule_create: out of memory");
            return NULL;
        }
        for (int32_t i = 0; i < s->errors.count; i++) {
            atomic_init(&s->errors.slots[i].thread, 0);
            atomic_init(&s->errors.slots[i].token, 0);
            s->errors.slots[i].text[0] = '\0';
        }
    }
    world->schedules++; /* kiln_world_destroy asserts none is left */
    return s;
}

/* Routes the failures of threads other than this one to their own error slots until
 * errors_unpublish; returns the slots published before (a schedule run from an exclusive
 * system runs inside another's run). */
static kl_error_slots *errors_publish(kiln_schedule *s) {
    if (s->errors.count == 0) return atomic_load(&s->world->error_slots);
    s->errors.owner = kl_thread_self();
    return atomic_exchange(&s->world->error_slots, &s->errors);
}

/* Puts outer back and frees every slot: the threads that claimed one have finished. */
static void errors_unpublish(kiln_schedule *s, kl_error_slots *outer) {
    if (s->errors.count == 0) return;
    atomic_store(&s->world->error_slots, outer);
    for (int32_t i = 0; i < s->errors.count; i++)
        atomic_store_explicit(&s->errors.slots[i].thread, 0, memory_order_release);
}

static void free_record(kiln_schedule *s, kl_system *sys) {
    kl_commands_free(sys->commands);
    kl_free(&s->world->alloc, sys, sizeof *sys);
}

/* Runs sys's fini, counted, so a kiln_schedule_destroy from it is caught (in_fini). */
static void run_fini(kiln_schedule *s, kl_system *sys) {
    if (!sys->fini) return;
    s->in_fini++;
    sys->fini(s->world, sys->user);
    s->in_fini--;
}

/* A system has left the list: its fini runs (outside the lock, so it may use the schedule),
 * then its record and emptied buffer wait for the next add. */
static void release(kiln_schedule *s, kl_system *sys) {
    run_fini(s, sys);
    kiln_commands_clear(sys->commands);
    kl_commands_give_back(sys->commands); /* a spare keeps no burst's room until it is reused */
    lock(s);
    sys->next_spare = s->spares;
    s->spares = sys;
    unlock(s);
}

void kiln_schedule_destroy(kiln_schedule *s) {
    if (s == NULL) return;
    KILN_ASSERT(!s->running, "kiln_schedule_destroy while the schedule runs");
    if (s->running) { /* (release builds: refused, the schedule stays: the run goes on with it) */
        kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT,
                "kiln_schedule_destroy: the schedule is running (a call from one of its systems); nothing was destroyed");
        return;
    }
    /* from a fini of its own: the remove, replace or destroy that runs it goes on using the schedule */
    KILN_ASSERT(s->in_fini == 0, "kiln_schedule_destroy from a fini of one of its systems (the schedule is "
                                 "releasing that system); destroy it once the call that ran the fini returns");
    if (s->in_fini) return; /* (release builds: refused, the schedule stays) */
    kl_allocator *a = &s->world->alloc;
    /* A fini may use the schedule (remove, find or add systems): the list leaves the schedule
     * before the finis run, so none meets a freed record; systems a fini adds go next round. */
    while (s->system_count > 0) {
        kl_system **list = s->systems;
        int32_t count = s->system_count;
        int64_t cap = s->system_cap;
        s->systems = NULL;
        s->system_count = 0;
        s->system_cap = 0;
        kl_map_clear(&s->names);
        kl_map_clear(&s->afters.chains);
        s->afters.head_count = s->afters.link_count = 0;
        s->constraint_total = 0;
        for (int32_t i = 0; i < count; i++) {
            run_fini(s, list[i]);
            free_record(s, list[i]);
        }
        kl_free(a, list, sizeof(kl_system *) * (size_t)cap);
    }
    while (s->spares) {
        kl_system *next = s->spares->next_spare;
        free_record(s, s->spares);
        s->spares = next;
    }
    kl_free(a, s->systems, sizeof(kl_system *) * (size_t)s->system_cap);
    kl_map_free(a, &s->names);
    kl_map_free(a, &s->afters.chains);
    kl_free(a, s->afters.heads, sizeof(int32_t) * (size_t)s->afters.head_cap);
    kl_free(a, s->afters.links, sizeof(kl_after_link) * (size_t)s->afters.link_cap);
    kl_free(a, s->waiting, sizeof *s->waiting * s->waiting_cap);
    kl_free(a, s->order, sizeof(int32_t) * (size_t)s->order_cap);
    kl_free(a, s->stage_start, sizeof(int32_t) * (size_t)s->stage_cap);
    kl_free(a, s->job_list, sizeof(kiln_job) * (size_t)s->job_cap);
    kl_free(a, s->scratch, s->scratch_size);
    kl_free(a, s->errors.slots, sizeof(kl_error_slot) * (size_t)s->errors.count);
    s->world->schedules--;
    kl_free(a, s, sizeof *s);
}

int32_t kiln_schedule_find(const kiln_schedule *s, const char *name) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    lock(s);
    int32_t i = kl_schedule_lookup(s, name, s->system_count);
    unlock(s);
    return i;
}

static bool valid_name(const char *name) {
    if (name == NULL || name[0] == '\0') return false;
    for (size_t i = 0; i <= KILN_MAX_NAME; i++)
        if (name[i] == '\0') return true;
    return false;
}

/* Copies a zero-terminated component list, checking each id. */
static kiln_result copy_access(kiln_world *world, const char *fn, const char *sys, const char *list,
                               const kiln_component *src, kiln_component *dst, int32_t *count) {
    int32_t n = 0;
    for (int32_t i = 0; i < KILN_SYSTEM_MAX_ACCESS && src[i] != KILN_NO_COMPONENT; i++) {
        if (!kl_component_get(world, src[i]))
            return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT,
                           "%s: system '%s' %s component #%u, which is not registered", fn, sys, list,
                           (unsigned)src[i]);
        dst[n++] = src[i];
    }
    *count = n;
    return KILN_OK;
}

static kiln_result copy_names(kiln_world *world, const char *fn, const char *sys, const char *list,
                              const char *const *src, char (*dst)[KL_NAME_SIZE], int32_t *count) {
    int32_t n = 0;
    for (int32_t i = 0; i < KILN_SYSTEM_MAX_ORDER && src[i] != NULL; i++) {
        if (!valid_name(src[i]))
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "%s: system '%s' %s[%d] must be a name of 1 to %d bytes", fn, sys, list,
                           (int)i, KILN_MAX_NAME);
        strcpy(dst[n++], src[i]);
    }
    *count = n;
    return KILN_OK;
}

/* A record for a new system: a spare one (its buffer empty) or a fresh one (*fresh). */
static kl_system *take_record(kiln_schedule *s, bool *fresh) {
    kl_system *sys = s->spares;
    *fresh = sys == NULL;
    if (sys) {
        s->spares = sys->next_spare;
        return sys;
    }
    kiln_commands *cmd = kl_commands_create(s->world, true, false);
    if (cmd == NULL) return NULL;
    sys = kl_alloc(&s->world->alloc, sizeof *sys);
    if (sys == NULL) {
        kl_commands_free(cmd);
        return NULL;
    }
    sys->commands = cmd;
    return sys;
}

/* Checks desc (all but the name's uniqueness) and copies its lists into tmp. */
static kiln_result check_desc(kiln_schedule *s, const kiln_system_desc *desc, const char *fn, kl_system *tmp) {
    kiln_world *world = s->world;
    if (desc == NULL) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
    if (!valid_name(desc->name))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: a system needs a name of 1 to %d bytes", fn,
                       KILN_MAX_NAME);
    if (desc->run == NULL)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: system '%s' has no run callback", fn, desc->name);
    memset(tmp, 0, sizeof *tmp);
    tmp->known_components = (uint32_t)kl_registry_count(&world->components);
    kiln_result r;
    if ((r = copy_access(world, fn, desc->name, "reads", desc->reads, tmp->reads, &tmp->read_count)) ||
        (r = copy_access(world, fn, desc->name, "writes", desc->writes, tmp->writes, &tmp->write_count)) ||
        (r = copy_names(world, fn, desc->name, "before", desc->before, tmp->before, &tmp->before_count)) ||
        (r = copy_names(world, fn, desc->name, "after", desc->after, tmp->after, &tmp->after_count)))
        return r;
    return KILN_OK;
}

/* Fills a taken record from the checked tmp and desc. */
static void fill_record(kl_system *sys, const kl_system *tmp, const kiln_system_desc *desc) {
    kiln_commands *cmd = sys->commands;
    *sys = *tmp;
    strcpy(sys->name, desc->name);
    sys->run = desc->run;
    sys->fini = desc->fini;
    sys->user = desc->user;
    sys->exclusive = desc->exclusive;
    sys->main_thread = desc->main_thread;
    sys->enabled = !desc->disabled;
    atomic_init(&sys->removing, false);
    sys->stage = -1;
    sys->commands = cmd;
    kl_commands_set_owner(cmd, sys->name); /* the record's own array: as long as the buffer */
}

/* Gives back a record that never joined the list. */
static void drop_record(kiln_schedule *s, kl_system *sys, bool fresh) {
    if (fresh) {
        free_record(s, sys);
    } else {
        sys->next_spare = s->spares;
        s->spares = sys;
    }
}

kiln_result kiln_schedule_add(kiln_schedule *s, const kiln_system_desc *desc) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    kiln_world *world = s->world;
    /* may_add is only written on the running thread: read it only there. */
    if (s->running && (!pthread_equal(pthread_self(), s->run_thread) || !s->may_add))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_add: during a run only a main_thread or exclusive system may add "
                       "systems");
    kl_system tmp;
    kiln_result r = check_desc(s, desc, "kiln_schedule_add", &tmp);
    if (r != KILN_OK) return r;
    if (kiln_schedule_find(s, desc->name) >= 0)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_add: a system named '%s' already exists", desc->name);

    if (s->system_count >= KILN_SCHEDULE_MAX_SYSTEMS) /* only the adding thread changes the count */
        return kl_fail(world, KILN_ERR_LIMIT, "kiln_schedule_add: the schedule holds %d systems, its limit "
                       "(KILN_SCHEDULE_MAX_SYSTEMS); '%s' is not added", KILN_SCHEDULE_MAX_SYSTEMS, desc->name);
    lock(s);
    kl_system *sys = NULL;
    bool fresh = false;
    if (!kl_grow(&world->alloc, (void **)&s->systems, &s->system_cap, s->system_count + 1,
                 sizeof(kl_system *), 16) ||
        !kl_map_reserve(&world->alloc, &s->names, 1) ||
        !kl_schedule_reserve_afters(s, tmp.after_count) ||
        (sys = take_record(s, &fresh)) == NULL) {
        unlock(s);
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_schedule_add: out of memory for %s", desc->name);
    }
    fill_record(sys, &tmp, desc);
    /* Stored past the end, uncounted, while the constraints are checked for a cycle. */
    s->systems[s->system_count] = sys;
    r = kl_schedule_check_cycle(s, s->system_count + 1, s->system_count, "kiln_schedule_add");
    if (r != KILN_OK) {
        drop_record(s, sys, fresh);
    } else {
        bool put = kl_map_put(&world->alloc, &s->names, kl_schedule_key(s, sys->name), (uint32_t)s->system_count + 1);
        KILN_ASSERT(put, "the index was reserved above");
        (void)put;
        kl_schedule_index_afters(s, s->system_count);
        s->constraint_total += sys->before_count + sys->after_count;
        s->system_count++;
        s->built = false;
    }
    unlock(s);
    return r;
}

kiln_result kiln_schedule_replace(kiln_schedule *s, const kiln_system_desc *desc) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    kiln_world *world = s->world;
    if (s->running)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_replace: the schedule is running; replace systems between runs");
    kl_system tmp;
    kiln_result r = check_desc(s, desc, "kiln_schedule_replace", &tmp);
    if (r != KILN_OK) return r;
    lock(s);
    int32_t i = kl_schedule_lookup(s, desc->name, s->system_count);
    if (i < 0) {
        unlock(s);
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_replace: no system named '%.*s%s'",
                       quote_len(desc->name), desc->name, quote_tail(desc->name));
    }
    bool fresh = false;
    kl_system *sys = NULL;
    if (!kl_schedule_reserve_afters(s, tmp.after_count) ||
        (sys = take_record(s, &fresh)) == NULL) {
        unlock(s);
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_schedule_replace: out of memory for %s", desc->name);
    }
    fill_record(sys, &tmp, desc);
    kl_system *old = s->systems[i];
    /* The new system is checked in the old one's place: it keeps the name, so the name index
     * holds while it stands there, and after. */
    s->systems[i] = sys;
    r = kl_schedule_check_cycle(s, s->system_count, i, "kiln_schedule_replace");
    if (r != KILN_OK) {
        s->systems[i] = old;
        drop_record(s, sys, fresh);
        unlock(s);
        return r;
    }
    kl_schedule_reindex(s); /* the new after names, in room reserved above */
    s->built = false;
    unlock(s);
    release(s, old);
    return KILN_OK;
}

kiln_result kiln_schedule_remove(kiln_schedule *s, const char *name) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    if (name == NULL)
        return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_remove: name is NULL");
    lock(s);
    int32_t i = kl_schedule_lookup(s, name, s->system_count);
    if (i < 0) {
        unlock(s);
        return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_remove: no system named '%.*s%s'",
                       quote_len(name), name, quote_tail(name));
    }
    kl_system *sys = s->systems[i];
    if (s->running) {
        /* Deferred: the running stage layout keeps its indices until the frame ends. */
        atomic_store(&sys->removing, true);
        s->removals++;
        unlock(s);
        return KILN_OK;
    }
    memmove(s->systems + i, s->systems + i + 1, sizeof(kl_system *) * (size_t)(s->system_count - i - 1));
    s->system_count--;
    kl_schedule_reindex(s);
    s->built = false;
    unlock(s);
    release(s, sys);
    return KILN_OK;
}

/* After a run: the systems removed during it leave, in declaration order. */
static void sweep_removed(kiln_schedule *s) {
    kl_system *gone = NULL, **tail = &gone;
    lock(s);
    int32_t kept = 0;
    for (int32_t i = 0; i < s->system_count; i++) {
        kl_system *sys = s->systems[i];
        if (atomic_load(&sys->removing)) {
            sys->next_spare = NULL;
            *tail = sys;
            tail = &sys->next_spare;
        } else {
            s->systems[kept++] = sys;
        }
    }
    s->system_count = kept;
    kl_schedule_reindex(s);
    s->removals = 0;
    s->built = false;
    unlock(s);
    while (gone) {
        kl_system *next = gone->next_spare;
        release(s, gone);
        gone = next;
    }
}

kiln_result kiln_schedule_build(kiln_schedule *s) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    if (s->running)
        return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_build: the schedule is running; changes made during a run "
                       "take effect from the next run");
    return kl_schedule_order(s);
}

static void run_system(void *arg) {
    kl_system *sys = arg;
    kl_guard_frame frame;
    kl_guard_enter(sys->ctx.world, sys, false, &frame);
    int64_t t0 = now_ns();
    int depth = atomic_load_explicit(&sys->ctx.world->defer_depth, memory_order_relaxed);
    int iterating = atomic_load_explicit(&sys->ctx.world->iterating, memory_order_relaxed);
    int32_t owned = kl_defer_owned(sys->ctx.world);
    sys->run(&sys->ctx);
    /* what it left open the schedule ends (close_left_sections): no later end of this thread may */
    kl_defer_disown(sys->ctx.world, owned);
    /* exact when it ran alone; beside others, their iterations may count too */
    sys->defer_left = atomic_load_explicit(&sys->ctx.world->defer_depth, memory_order_relaxed) - depth;
    sys->iter_left = atomic_load_explicit(&sys->ctx.world->iterating, memory_order_relaxed) - iterating;
    int64_t dt = now_ns() - t0;
#if KILN_ACCESS_CHECKS
    kl_resource_graves_check(sys->ctx.world, sys->name);
#endif
    kl_guard_leave(&frame);
    atomic_store_explicit(&sys->last_ns, dt, memory_order_relaxed);
    atomic_store_explicit(&sys->total_ns, atomic_load_explicit(&sys->total_ns, memory_order_relaxed) + dt,
                          memory_order_relaxed);
    atomic_store_explicit(&sys->runs, atomic_load_explicit(&sys->runs, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* A system queued on the pool. Whatever thread takes it may be running another system that
 * waits for jobs of its own (kiln_parallel_for, kiln_jobs_wait) and has a message of its own in
 * the thread's buffer: the job sets that message aside, so this system reads only its own
 * failures and the waiting one finds its message as it left it. */
static void run_job(void *arg) {
    kl_system *sys = arg;
    kl_error_kept kept;
    kl_error_set_aside(sys->ctx.world, &kept);
    run_system(sys);
    kl_error_put_back(&kept);
}

/* Runs a system on the calling thread with the world's deferred calls going to its buffer. */
static void run_here(kiln_schedule *s, kl_system *sys) {
    s->world->defer_target = sys->commands;
    s->world->stage_main = sys->main_thread; /* a worker system run here is refused as on a worker */
    s->may_add = sys->main_thread;
    run_system(sys);
    s->may_add = false;
    s->world->stage_main = false;
    s->world->defer_target = NULL;
}

static void prepare(kiln_schedule *s, kl_system *sys, double dt) {
    sys->ctx = (kiln_system_ctx){s->world, dt, sys->commands, s->jobs, sys->user, sys->name};
}

/* Runs the systems of a stage that is not one exclusive system: on the pool when parallel
 * (main-thread ones here meanwhile, in declaration order), else each here in stage order. */
static void run_shared_stage(kiln_schedule *s, int32_t first, int32_t end, bool parallel) {
    if (!parallel) {
        for (int32_t k = first; k < end; k++) {
            kl_system *sys = s->systems[s->order[k]];
            if (sys->run_now) run_here(s, sys);
        }
        return;
    }
    int32_t jobs = 0;
    for (int32_t k = first; k < end; k++) {
        kl_system *sys = s->systems[s->order[k]];
        if (sys->run_now && !sys->main_thread) s->job_list[jobs++] = (kiln_job){run_job, sys};
    }
    kiln_counter counter = {0};
    kiln_result r = kiln_jobs_submit(s->jobs, s->job_list, jobs, &counter);
    if (r != KILN_OK) {
        /* No room to queue: run this stage's worker systems here instead. */
        for (int32_t j = 0; j < jobs; j++) run_here(s, s->job_list[j].arg);
    }
    for (int32_t k = first; k < end; k++) {
        kl_system *sys = s->systems[s->order[k]];
        if (sys->run_now && sys->main_thread) run_here(s, sys);
    }
    if (r == KILN_OK) kiln_jobs_wait(s->jobs, &counter);
}

/* A system must return with the world's deferred sections as it found them: one left open
 * (kiln_defer_begin without its end, an iteration not finished) would keep the world deferred
 * for good, nothing landing again, and an iteration's count would refuse every later run.
 * Ends the iterations the systems of [first, end) left above iterating and the sections above
 * depth (what the stage started with; the outermost end applies what was queued) and fails
 * naming the first system seen leaving one (beside others in a parallel stage, a guess). */
static kiln_result close_left_sections(kiln_schedule *s, int32_t first, int32_t end, int depth,
                                       int iterating) {
    kiln_world *world = s->world;
    char what[160];
    int open = kl_queries_end_open(world, iterating, what, sizeof what); /* before any apply */
    int left = atomic_load_explicit(&world->defer_depth, memory_order_relaxed) - depth;
    if (left <= 0 && open <= 0) return KILN_OK; /* fewer: kl_defer_end asserted */
    const char *name = NULL;
    for (int32_t k = first; k < end && !name; k++) {
        const kl_system *sys = s->systems[s->order[k]];
        if (sys->run_now && (open > 0 ? sys->iter_left : sys->defer_left) > 0) name = sys->name;
    }
    for (int i = 0; i < left; i++) kl_defer_end(world, "kiln_schedule_run");
    char who[KL_NAME_SIZE + 16];
    if (name) snprintf(who, sizeof who, "system '%s'", name);
    else snprintf(who, sizeof who, "a system of stage %d", (int)s->systems[s->order[first]]->stage);
    if (open > 0)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_run: %s returned with %d "
                       "iteration%s of %s not finished (kiln_query_next to false, or kiln_iter_fini); "
                       "ended now", who, open, open > 1 ? "s" : "", what);
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_run: %s returned with %d deferred "
                   "section%s left open (kiln_defer_begin without kiln_defer_end); ended now", who,
                   left, left > 1 ? "s" : "");
}

kiln_result kiln_schedule_run(kiln_schedule *s, double dt) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    kiln_world *world = s->world;
    if (s->running)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_run: the schedule is already running (called from one of its systems)");
    /* Another schedule's stage is running on this world: a run from one of its systems would
     * swap the event buffers, advance the tick and apply buffers under the others' feet. */
    if (atomic_load_explicit(&world->in_stage, memory_order_relaxed))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_run: called from a system of a schedule running on this "
                       "world; only an exclusive system may run another schedule");
    /* A loop a host's code or a script left open (one suspended in a coroutine): the frame's
     * changes would land under its rows. Refused, not asserted: a script can leave one. */
    if (atomic_load(&world->iterating) != 0)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_run: a query of the world iterates (a loop left open); end it first");
    if (!s->built) {
        kiln_result r = kiln_schedule_build(s);
        if (r != KILN_OK) return r;
    }
    /* a frame at the last tick would stamp its changes with the previous frame's tick, and
     * systems would not see them as changed (only an edited save gets a world there) */
    if (world->tick >= KILN_TICK_MAX)
        return kl_fail(world, KILN_ERR_LIMIT, "kiln_schedule_run: the world tick is at its last, 2^53 - 1");
    s->running = true;
    world->schedule_runs++; /* kiln_world_destroy asserts on it */
    s->run_thread = pthread_self();
    kl_error_slots *outer_errors = errors_publish(s);
#if KILN_ACCESS_CHECKS
    kl_guard_slot *outer_guard = atomic_exchange(&world->guard, s->guard_slots);
#endif
    kiln_tick_advance(world);
    kiln_events_update(world);
    kiln_result result = KILN_OK;
    bool parallel = s->jobs != NULL && kiln_jobs_worker_count(s->jobs) > 0;
    kl_defer_open(world);
    for (int32_t st = 0; st < s->stage_count; st++) {
        int32_t first = s->stage_start[st], end = s->stage_start[st + 1];
        int32_t workers = 0, enabled = 0;
        for (int32_t k = first; k < end; k++) {
            kl_system *sys = s->systems[s->order[k]];
            prepare(s, sys, dt);
            sys->run_now = sys->enabled && !atomic_load(&sys->removing);
            if (!sys->run_now) continue;
            enabled++;
            if (!sys->main_thread && !sys->exclusive) workers++;
        }
        if (enabled == 0) continue;
        if (end - first == 1 && s->systems[s->order[first]]->exclusive) {
            /* An exclusive system runs alone on an undeferred world. */
            kl_system *sys = s->systems[s->order[first]];
            if (!sys->run_now) continue;
            kiln_result r = kl_defer_end(world, "kiln_schedule_run");
            if (r != KILN_OK && result == KILN_OK) result = r;
            s->may_add = true;
            int depth = atomic_load_explicit(&world->defer_depth, memory_order_relaxed);
            int iterating = atomic_load_explicit(&world->iterating, memory_order_relaxed);
            run_system(sys);
            s->may_add = false;
            r = close_left_sections(s, first, end, depth, iterating);
            if (r != KILN_OK && result == KILN_OK) result = r;
            kl_defer_open(world);
        } else {
            int depth = atomic_load_explicit(&world->defer_depth, memory_order_relaxed);
            int iterating = atomic_load_explicit(&world->iterating, memory_order_relaxed);
            world->stage_thread = pthread_self(); /* before the jobs that may read it are queued */
            world->stage_watch.inline_jobs = 0;
            if (s->jobs) kl_jobs_watch(s->jobs, &world->stage_watch);
            atomic_store_explicit(&world->in_stage, 1, memory_order_relaxed);
            run_shared_stage(s, first, end, parallel && workers > 0 && enabled > 1);
            atomic_store_explicit(&world->in_stage, 0, memory_order_relaxed);
            if (s->jobs) kl_jobs_unwatch(s->jobs, &world->stage_watch);
            kiln_result r = close_left_sections(s, first, end, depth, iterating);
            if (r != KILN_OK && result == KILN_OK) result = r;
        }
        /* Buffers land in declaration order, whatever thread finished first. */
        for (int32_t k = first; k < end; k++) {
            kl_system *sys = s->systems[s->order[k]];
            if (kiln_commands_count(sys->commands) == 0) {
                /* idle: a burst it recorded frames ago would hold its room for good */
                kl_commands_give_back(sys->commands);
                continue;
            }
            kiln_result r = kl_commands_apply(sys->commands, world, NULL, "kiln_schedule_run");
            if (r != KILN_OK && result == KILN_OK) result = r;
        }
    }
    kiln_result r = kl_defer_end(world, "kiln_schedule_run");
#if KILN_ACCESS_CHECKS
    atomic_store(&world->guard, outer_guard);
    if (!outer_guard) kl_resource_graves_age(world);
#endif
    errors_unpublish(s, outer_errors);
    s->running = false;
    world->schedule_runs--;
    if (s->removals > 0) sweep_removed(s);
    kl_world_trim_due(world); /* the frame has landed: room its removals left may go back */
    return result != KILN_OK ? result : r;
}

int32_t kiln_schedule_stage_count(kiln_schedule *s) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    /* During a run: the stages being run (a change made meanwhile counts from the next). */
    if (s->running) return s->stage_count;
    if (!s->built && kiln_schedule_build(s) != KILN_OK) return 0;
    return s->stage_count;
}

int32_t kiln_schedule_system_count(const kiln_schedule *s) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    lock(s);
    int32_t n = s->system_count;
    unlock(s);
    return n;
}

/* Copies a system's before or after names into dest; counts those naming no live system. */
static int32_t list_names(const kiln_schedule *s, const char (*names)[KL_NAME_SIZE], int32_t count,
                          const char **dest) {
    int32_t unresolved = 0;
    for (int32_t k = 0; k < KILN_SYSTEM_MAX_ORDER; k++) {
        dest[k] = k < count ? names[k] : NULL;
        if (k < count && kl_schedule_lookup(s, names[k], s->system_count) < 0) unresolved++;
    }
    return unresolved;
}

bool kiln_schedule_system_info_get(const kiln_schedule *s, int32_t index, kiln_system_info *dest) {
    KILN_ASSERT(s != NULL && dest != NULL, "schedule and dest are required");
    lock(s);
    if (index < 0 || index >= s->system_count) {
        unlock(s);
        return false;
    }
    const kl_system *sys = s->systems[index];
    dest->name = sys->name;
    dest->index = index;
    dest->stage = s->built || s->running ? sys->stage : -1;
    dest->enabled = sys->enabled;
    dest->exclusive = sys->exclusive;
    dest->main_thread = sys->main_thread;
    dest->removing = atomic_load(&sys->removing);
    dest->runs = atomic_load_explicit(&sys->runs, memory_order_relaxed);
    dest->last_ns = atomic_load_explicit(&sys->last_ns, memory_order_relaxed);
    dest->total_ns = atomic_load_explicit(&sys->total_ns, memory_order_relaxed);
    dest->before_count = sys->before_count;
    dest->after_count = sys->after_count;
    dest->unresolved = list_names(s, sys->before, sys->before_count, dest->before) +
                       list_names(s, sys->after, sys->after_count, dest->after);
    unlock(s);
    return true;
}

kiln_result kiln_schedule_enable(kiln_schedule *s, const char *name, bool enabled) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    if (name == NULL)
        return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_enable: name is NULL");
    lock(s);
    int32_t i = kl_schedule_lookup(s, name, s->system_count);
    if (i >= 0) s->systems[i]->enabled = enabled;
    unlock(s);
    if (i < 0)
        return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_enable: no system named '%.*s%s'",
                       quote_len(name), name, quote_tail(name));
    return KILN_OK;
}

size_t kiln_schedule_describe(kiln_schedule *s, char *buf, size_t size) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    size_t len = 0;
    char dummy[1];
    if (buf == NULL || size == 0) {
        buf = dummy;
        size = 1;
    }
    buf[0] = '\0';
    int32_t stages = kiln_schedule_stage_count(s);
    lock(s); /* a main-thread system may add one meanwhile, moving the list */
    for (int32_t st = 0; st < stages; st++) {
        for (int32_t k = s->stage_start[st]; k < s->stage_start[st + 1]; k++) {
            const kl_system *sys = s->systems[s->order[k]];
            const char *lead = k == s->stage_start[st] ? "stage " : ", ";
            int w;
            if (k == s->stage_start[st])
                w = snprintf(len < size ? buf + len : dummy, len < size ? size - len : 1,
                             "%s%d: %s", lead, (int)st, sys->name);
            else
                w = snprintf(len < size ? buf + len : dummy, len < size ? size - len : 1, "%s%s",
                             lead, sys->name);
            len += (size_t)w;
        }
        int w = snprintf(len < size ? buf + len : dummy, len < size ? size - len : 1, "\n");
        len += (size_t)w;
    }
    unlock(s);
    return len;
}
