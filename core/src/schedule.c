/* schedule.c: systems staged by declared access and run stage by stage on a job pool.
 * Invariant: after a successful build every system has a stage greater than that of each
 * system it must follow, and each stage's command buffers are applied in declaration order. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "component.h"
#include "defer.h"
#include "world.h"

#define KL_NAME_SIZE (KILN_MAX_NAME + 1)

typedef struct kl_system {
    char name[KL_NAME_SIZE];
    kiln_system_fn run;
    void *user;
    kiln_component reads[KILN_SYSTEM_MAX_ACCESS];
    kiln_component writes[KILN_SYSTEM_MAX_ACCESS];
    int32_t read_count, write_count;
    char before[KILN_SYSTEM_MAX_ORDER][KL_NAME_SIZE];
    char after[KILN_SYSTEM_MAX_ORDER][KL_NAME_SIZE];
    int32_t before_count, after_count;
    bool exclusive, main_thread, enabled;
    bool run_now; /* enabled when its stage started: a toggle mid-stage counts next frame */
    int32_t index, stage;
    kiln_commands *commands;
    kiln_system_ctx ctx;
    int64_t runs, last_ns, total_ns;
} kl_system;

struct kiln_schedule {
    kiln_world *world;
    kiln_jobs *jobs;
    kl_system **systems;
    int64_t system_cap;
    int32_t system_count;
    bool built;
    int32_t stage_count;
    int32_t *order;        /* system indices sorted by (stage, declaration) */
    int64_t order_cap;
    int32_t *stage_start;  /* stage s runs order[stage_start[s] .. stage_start[s + 1]) */
    int64_t stage_cap;
    kiln_job *job_list;
    int64_t job_cap;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

kiln_schedule *kiln_schedule_create(kiln_world *world, const kiln_schedule_desc *desc) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_schedule *s = kl_alloc(&world->alloc, sizeof *s);
    if (!s) {
        kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_schedule_create: out of memory");
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->world = world;
    s->jobs = desc ? desc->jobs : NULL;
    return s;
}

void kiln_schedule_destroy(kiln_schedule *s) {
    if (s == NULL) return;
    kl_allocator *a = &s->world->alloc;
    for (int32_t i = 0; i < s->system_count; i++) {
        kiln_commands_destroy(s->systems[i]->commands);
        kl_free(a, s->systems[i], sizeof(kl_system));
    }
    kl_free(a, s->systems, sizeof(kl_system *) * (size_t)s->system_cap);
    kl_free(a, s->order, sizeof(int32_t) * (size_t)s->order_cap);
    kl_free(a, s->stage_start, sizeof(int32_t) * (size_t)s->stage_cap);
    kl_free(a, s->job_list, sizeof(kiln_job) * (size_t)s->job_cap);
    kl_free(a, s, sizeof *s);
}

int32_t kiln_schedule_find(const kiln_schedule *s, const char *name) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    if (name == NULL) return -1;
    for (int32_t i = 0; i < s->system_count; i++)
        if (strcmp(s->systems[i]->name, name) == 0) return i;
    return -1;
}

static bool valid_name(const char *name) {
    if (name == NULL || name[0] == '\0') return false;
    for (size_t i = 0; i <= KILN_MAX_NAME; i++)
        if (name[i] == '\0') return true;
    return false;
}

/* Copies a zero-terminated component list, checking each id. */
static kiln_result copy_access(kiln_world *world, const char *sys, const char *list,
                               const kiln_component *src, kiln_component *dst, int32_t *count) {
    int32_t n = 0;
    for (int32_t i = 0; i < KILN_SYSTEM_MAX_ACCESS && src[i] != KILN_NO_COMPONENT; i++) {
        if (!kl_component_get(world, src[i]))
            return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT,
                           "kiln_schedule_add: system %s %s component #%u is not registered", sys, list,
                           (unsigned)src[i]);
        dst[n++] = src[i];
    }
    *count = n;
    return KILN_OK;
}

static kiln_result copy_names(kiln_world *world, const char *sys, const char *list,
                              const char *const *src, char (*dst)[KL_NAME_SIZE], int32_t *count) {
    int32_t n = 0;
    for (int32_t i = 0; i < KILN_SYSTEM_MAX_ORDER && src[i] != NULL; i++) {
        if (!valid_name(src[i]))
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "kiln_schedule_add: system %s %s[%d] must be a name of 1 to %d bytes", sys,
                           list, (int)i, KILN_MAX_NAME);
        strcpy(dst[n++], src[i]);
    }
    *count = n;
    return KILN_OK;
}

kiln_result kiln_schedule_add(kiln_schedule *s, const kiln_system_desc *desc) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    kiln_world *world = s->world;
    if (desc == NULL) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_add: desc is NULL");
    if (!valid_name(desc->name))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_add: a system needs a name of 1 to %d bytes", KILN_MAX_NAME);
    if (kiln_schedule_find(s, desc->name) >= 0)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_add: a system named %s already exists", desc->name);
    if (desc->run == NULL)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_add: system %s has no run callback",
                       desc->name);
    kl_system tmp;
    memset(&tmp, 0, sizeof tmp);
    kiln_result r;
    if ((r = copy_access(world, desc->name, "reads", desc->reads, tmp.reads, &tmp.read_count)) ||
        (r = copy_access(world, desc->name, "writes", desc->writes, tmp.writes, &tmp.write_count)) ||
        (r = copy_names(world, desc->name, "before", desc->before, tmp.before, &tmp.before_count)) ||
        (r = copy_names(world, desc->name, "after", desc->after, tmp.after, &tmp.after_count)))
        return r;

    kl_system *sys = NULL;
    kiln_commands *cmd = NULL;
    if (!kl_grow(&world->alloc, (void **)&s->systems, &s->system_cap, s->system_count + 1,
                 sizeof(kl_system *), 16) ||
        (sys = kl_alloc(&world->alloc, sizeof *sys)) == NULL ||
        (cmd = kl_commands_create(world, true, false)) == NULL) {
        kl_free(&world->alloc, sys, sizeof *sys);
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_schedule_add: out of memory for %s", desc->name);
    }
    *sys = tmp;
    strcpy(sys->name, desc->name);
    sys->run = desc->run;
    sys->user = desc->user;
    sys->exclusive = desc->exclusive;
    sys->main_thread = desc->main_thread;
    sys->enabled = !desc->disabled;
    sys->index = s->system_count;
    sys->stage = -1;
    sys->commands = cmd;
    s->systems[s->system_count++] = sys;
    s->built = false;
    return KILN_OK;
}

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

/* The ordering graph of one build: edge[a * n + b] means a runs before b. */
typedef struct build_graph {
    int32_t n;
    size_t matrix;     /* bytes of edge, rounded up so the int arrays after it stay aligned */
    uint8_t *edge;
    int32_t *indegree; /* per system: unprocessed predecessors, -1 once processed */
    int32_t *stage;    /* per system: its stage */
} build_graph;

static size_t graph_bytes(const build_graph *g) {
    return g->matrix + sizeof(int32_t) * (size_t)g->n * 2;
}

/* Phase 1: memory for the graph and for the schedule's stage tables, all or nothing. */
static kiln_result reserve_build(kiln_schedule *s, build_graph *g) {
    kl_allocator *al = &s->world->alloc;
    int32_t n = s->system_count;
    *g = (build_graph){.n = n, .matrix = ((size_t)n * (size_t)n + 7) & ~(size_t)7};
    if (n > 0) g->edge = kl_alloc(al, graph_bytes(g));
    if ((n > 0 && !g->edge) ||
        !kl_grow(al, (void **)&s->order, &s->order_cap, n, sizeof(int32_t), 16) ||
        !kl_grow(al, (void **)&s->stage_start, &s->stage_cap, n + 1, sizeof(int32_t), 16) ||
        !kl_grow(al, (void **)&s->job_list, &s->job_cap, n, sizeof(kiln_job), 16)) {
        if (g->edge) kl_free(al, g->edge, graph_bytes(g));
        g->edge = NULL;
        return kl_fail(s->world, KILN_ERR_OUT_OF_MEMORY, "kiln_schedule_build: out of memory");
    }
    if (n == 0) return KILN_OK;
    memset(g->edge, 0, g->matrix);
    g->indegree = (int32_t *)(g->edge + g->matrix);
    g->stage = g->indegree + n;
    return KILN_OK;
}

/* Resolves one before/after name of system i into an edge; after: the named system first. */
static kiln_result link_named(kiln_schedule *s, build_graph *g, int32_t i, const char *name,
                              bool after) {
    const char *how = after ? "after" : "before";
    int32_t x = kiln_schedule_find(s, name);
    if (x < 0)
        return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_build: system %s runs %s unknown system %s",
                       s->systems[i]->name, how, name);
    if (x == i)
        return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_schedule_build: system %s runs %s itself", s->systems[i]->name, how);
    if (after) g->edge[(size_t)x * g->n + i] = 1;
    else g->edge[(size_t)i * g->n + x] = 1;
    return KILN_OK;
}

/* Phase 2: the explicit before/after edges. */
static kiln_result link_explicit(kiln_schedule *s, build_graph *g) {
    for (int32_t i = 0; i < g->n; i++) {
        const kl_system *sys = s->systems[i];
        for (int32_t k = 0; k < sys->after_count; k++) {
            kiln_result r = link_named(s, g, i, sys->after[k], true);
            if (r != KILN_OK) return r;
        }
        for (int32_t k = 0; k < sys->before_count; k++) {
            kiln_result r = link_named(s, g, i, sys->before[k], false);
            if (r != KILN_OK) return r;
        }
    }
    return KILN_OK;
}

/* Phase 3: conflicting pairs follow declaration order unless an explicit edge orders them. */
static void link_conflicts(kiln_schedule *s, build_graph *g) {
    for (int32_t i = 0; i < g->n; i++)
        for (int32_t j = i + 1; j < g->n; j++)
            if (conflict(s->systems[i], s->systems[j]) && !g->edge[(size_t)j * g->n + i])
                g->edge[(size_t)i * g->n + j] = 1;
}

/* Phase 4: stages as longest paths, by Kahn's algorithm (a system's stage is one past its
 * latest predecessor); systems left unprocessed sit on a cycle, which is reported. */
static kiln_result assign_stages(kiln_schedule *s, build_graph *g) {
    int32_t n = g->n;
    for (int32_t b = 0; b < n; b++) {
        g->indegree[b] = 0;
        g->stage[b] = 0;
        for (int32_t a = 0; a < n; a++) g->indegree[b] += g->edge[(size_t)a * n + b];
    }
    int32_t done = 0;
    bool progress = true;
    while (progress) {
        progress = false;
        for (int32_t a = 0; a < n; a++) {
            if (g->indegree[a] != 0) continue;
            g->indegree[a] = -1;
            done++;
            progress = true;
            for (int32_t b = 0; b < n; b++) {
                if (!g->edge[(size_t)a * n + b]) continue;
                if (g->stage[b] < g->stage[a] + 1) g->stage[b] = g->stage[a] + 1;
                g->indegree[b]--;
            }
        }
    }
    if (done == n) return KILN_OK;
    char names[200];
    size_t len = 0;
    names[0] = '\0';
    for (int32_t a = 0; a < n && len < sizeof names - 1; a++)
        if (g->indegree[a] > 0)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "",
                                    s->systems[a]->name);
    return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT,
                   "kiln_schedule_build: before/after cycle among systems %s", names);
}

/* Phase 5: the run order, stage by stage and by declaration within a stage. */
static void lay_out(kiln_schedule *s, const build_graph *g) {
    int32_t stages = 0;
    for (int32_t i = 0; i < g->n; i++) {
        s->systems[i]->stage = g->stage[i];
        if (g->stage[i] + 1 > stages) stages = g->stage[i] + 1;
    }
    int32_t k = 0;
    for (int32_t st = 0; st < stages; st++) {
        s->stage_start[st] = k;
        for (int32_t i = 0; i < g->n; i++)
            if (g->stage[i] == st) s->order[k++] = i;
    }
    s->stage_start[stages] = k;
    s->stage_count = stages;
    s->built = true;
}

kiln_result kiln_schedule_build(kiln_schedule *s) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    build_graph g;
    kiln_result r = reserve_build(s, &g);
    if (r != KILN_OK) return r;
    if ((r = link_explicit(s, &g)) == KILN_OK) {
        link_conflicts(s, &g);
        if ((r = assign_stages(s, &g)) == KILN_OK) lay_out(s, &g);
    }
    if (g.edge) kl_free(&s->world->alloc, g.edge, graph_bytes(&g));
    return r;
}

static void run_system(void *arg) {
    kl_system *sys = arg;
    int64_t t0 = now_ns();
    sys->run(&sys->ctx);
    int64_t dt = now_ns() - t0;
    sys->last_ns = dt;
    sys->total_ns += dt;
    sys->runs++;
}

/* Runs a system on the calling thread with the world's deferred calls going to its buffer. */
static void run_here(kiln_world *world, kl_system *sys) {
    world->defer_target = sys->commands;
    run_system(sys);
    world->defer_target = NULL;
}

static void prepare(kiln_schedule *s, kl_system *sys, double dt) {
    sys->ctx = (kiln_system_ctx){s->world, dt, sys->commands, s->jobs, sys->user, sys->name};
}

kiln_result kiln_schedule_run(kiln_schedule *s, double dt) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    kiln_world *world = s->world;
    KILN_ASSERT(atomic_load(&world->iterating) == 0, "schedule_run while a query iterates");
    if (!s->built) {
        kiln_result r = kiln_schedule_build(s);
        if (r != KILN_OK) return r;
    }
    kiln_tick_advance(world);
    kiln_events_update(world);
    kiln_result result = KILN_OK;
    bool parallel = s->jobs != NULL && kiln_jobs_worker_count(s->jobs) > 0;
    kiln_defer_begin(world);
    for (int32_t st = 0; st < s->stage_count; st++) {
        int32_t first = s->stage_start[st], end = s->stage_start[st + 1];
        int32_t workers = 0, enabled = 0;
        for (int32_t k = first; k < end; k++) {
            kl_system *sys = s->systems[s->order[k]];
            prepare(s, sys, dt);
            sys->run_now = sys->enabled;
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
            run_system(sys);
            kiln_defer_begin(world);
        } else if (parallel && workers > 0 && enabled > 1) {
            int32_t jobs = 0;
            for (int32_t k = first; k < end; k++) {
                kl_system *sys = s->systems[s->order[k]];
                if (sys->run_now && !sys->main_thread)
                    s->job_list[jobs++] = (kiln_job){run_system, sys};
            }
            kiln_counter counter = {0};
            kiln_result r = kiln_jobs_submit(s->jobs, s->job_list, jobs, &counter);
            if (r != KILN_OK) {
                /* No room to queue: run this stage's worker systems here instead. */
                for (int32_t j = 0; j < jobs; j++) run_here(world, s->job_list[j].arg);
            }
            for (int32_t k = first; k < end; k++) {
                kl_system *sys = s->systems[s->order[k]];
                if (sys->run_now && sys->main_thread) run_here(world, sys);
            }
            if (r == KILN_OK) kiln_jobs_wait(s->jobs, &counter);
        } else {
            for (int32_t k = first; k < end; k++) {
                kl_system *sys = s->systems[s->order[k]];
                if (sys->run_now) run_here(world, sys);
            }
        }
        /* Buffers land in declaration order, whatever thread finished first. */
        for (int32_t k = first; k < end; k++) {
            kl_system *sys = s->systems[s->order[k]];
            if (kiln_commands_count(sys->commands) == 0) continue;
            kiln_result r = kl_commands_apply(sys->commands, world, NULL, "kiln_schedule_run");
            if (r != KILN_OK && result == KILN_OK) result = r;
        }
    }
    kiln_result r = kl_defer_end(world, "kiln_schedule_run");
    return result != KILN_OK ? result : r;
}

int32_t kiln_schedule_stage_count(kiln_schedule *s) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    if (!s->built && kiln_schedule_build(s) != KILN_OK) return 0;
    return s->stage_count;
}

int32_t kiln_schedule_system_count(const kiln_schedule *s) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    return s->system_count;
}

bool kiln_schedule_system_info_get(const kiln_schedule *s, int32_t index, kiln_system_info *dest) {
    KILN_ASSERT(s != NULL && dest != NULL, "schedule and dest are required");
    if (index < 0 || index >= s->system_count) return false;
    const kl_system *sys = s->systems[index];
    dest->name = sys->name;
    dest->index = index;
    dest->stage = s->built ? sys->stage : -1;
    dest->enabled = sys->enabled;
    dest->exclusive = sys->exclusive;
    dest->main_thread = sys->main_thread;
    dest->runs = sys->runs;
    dest->last_ns = sys->last_ns;
    dest->total_ns = sys->total_ns;
    return true;
}

kiln_result kiln_schedule_enable(kiln_schedule *s, const char *name, bool enabled) {
    KILN_ASSERT(s != NULL, "schedule is NULL");
    int32_t i = kiln_schedule_find(s, name);
    if (i < 0)
        return kl_fail(s->world, KILN_ERR_INVALID_ARGUMENT, "kiln_schedule_enable: no system named %s",
                       name ? name : "(null)");
    s->systems[i]->enabled = enabled;
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
    return len;
}
