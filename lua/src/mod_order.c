/* mod_order.c: whether a reload's systems, put in place of the running version's, leave the
 * schedule's before/after free of cycles. The schedule checks each replace against the systems
 * as they are, the others of the old version among them, so a new version turning its own
 * order around met its old self in a cycle; and a replace refused part way had replaced the
 * old version's first ones for good. The whole new order is checked first: a topological sort
 * over the names (the systems and the names they wait for), one pass whatever the schedule
 * holds. Only when that finds a cycle is the order laid out on a scratch schedule of the same
 * world, whose refusal names the cycle as the core would (an add, and a check, per system). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mods.h"

static void order_only(const kiln_system_ctx *ctx) { (void)ctx; }

/* The staged system of mod replacing name, or NULL. */
static klua_mod_staged *replacing(klua_mod *mod, const char *name) {
    for (int i = 0; i < mod->staged_count; i++)
        if (mod->staged[i].replace && strcmp(mod->staged[i].name, name) == 0) return &mod->staged[i];
    return NULL;
}

/* System i of sched as the new order has it (a replaced one's constraints from its staged
 * copy): its name, before and after names and their counts; false for one that leaves. */
typedef struct order_entry {
    const char *name, *before[KILN_SYSTEM_MAX_ORDER], *after[KILN_SYSTEM_MAX_ORDER];
    int before_count, after_count;
} order_entry;

static bool entry_of(klua_mod *mod, int32_t i, order_entry *out) {
    kiln_system_info info;
    if (!kiln_schedule_system_info_get(mod->kw->schedule, i, &info) || info.removing) return false;
    klua_mod_staged *st = replacing(mod, info.name);
    if (!st && mod->previous && klua_mod_runs(mod->previous, info.name)) return false; /* leaves */
    out->name = info.name;
    out->before_count = out->after_count = 0;
    for (int k = 0; k < KILN_SYSTEM_MAX_ORDER; k++) {
        const char *b = st ? (st->before[k][0] ? st->before[k] : NULL) : k < info.before_count ? info.before[k] : NULL;
        const char *a = st ? (st->after[k][0] ? st->after[k] : NULL) : k < info.after_count ? info.after[k] : NULL;
        if (b) out->before[out->before_count++] = b;
        if (a) out->after[out->after_count++] = a;
    }
    return true;
}

/* The host's allocator, as the manager's books use (mods.c calls this file, not the reverse). */
static void *host_alloc(klua_mod *mod, void *p, size_t old, size_t size) {
    void *ud;
    lua_Alloc fa = lua_getallocf(mod->mods->host, &ud);
    return fa(ud, p, old, size);
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int32_t node_of(const char **names, int32_t count, const char *name) {
    const char **hit = bsearch(&name, names, (size_t)count, sizeof *names, cmp_name);
    return (int32_t)(hit - names);
}

/* Whether the new order closes a cycle: 1 yes, 0 no, -1 out of memory. */
static int has_cycle(klua_mod *mod) {
    int32_t n = kiln_schedule_system_count(mod->kw->schedule);
    size_t links = (size_t)n * 2 * KILN_SYSTEM_MAX_ORDER, most = links + (size_t)n;
    size_t bytes = most * sizeof(const char *) + (3 * links + 3 * most + 1) * sizeof(int32_t);
    const char **names = host_alloc(mod, NULL, 0, bytes);
    if (!names) return -1;
    int32_t *from = (int32_t *)(names + most), *to = from + links, *next = to + links;
    int32_t *first = next + links, *degree = first + most + 1, *queue = degree + most;
    int32_t count = 0, edges = 0;
    order_entry en;
    for (int32_t i = 0; i < n; i++) {
        if (!entry_of(mod, i, &en)) continue;
        names[count++] = en.name;
        for (int k = 0; k < en.before_count; k++) names[count++] = en.before[k];
        for (int k = 0; k < en.after_count; k++) names[count++] = en.after[k];
    }
    qsort(names, (size_t)count, sizeof *names, cmp_name);
    int32_t nodes = 0;
    for (int32_t i = 0; i < count; i++)
        if (nodes == 0 || strcmp(names[nodes - 1], names[i]) != 0) names[nodes++] = names[i];
    /* before x: self -> x; after x: x -> self */
    for (int32_t i = 0; i < n; i++) {
        if (!entry_of(mod, i, &en)) continue;
        int32_t self = node_of(names, nodes, en.name);
        for (int k = 0; k < en.before_count; k++, edges++) {
            from[edges] = self;
            to[edges] = node_of(names, nodes, en.before[k]);
        }
        for (int k = 0; k < en.after_count; k++, edges++) {
            from[edges] = node_of(names, nodes, en.after[k]);
            to[edges] = self;
        }
    }
    /* successor lists by source (first[u] .. first[u + 1] in next), and the edges into each */
    memset(first, 0, (size_t)(nodes + 1) * sizeof *first);
    for (int32_t e = 0; e < edges; e++) first[from[e] + 1]++;
    for (int32_t u = 0; u < nodes; u++) first[u + 1] += first[u];
    for (int32_t u = 0; u < nodes; u++) degree[u] = first[u];
    for (int32_t e = 0; e < edges; e++) next[degree[from[e]]++] = to[e];
    memset(degree, 0, (size_t)nodes * sizeof *degree);
    for (int32_t e = 0; e < edges; e++) degree[to[e]]++;
    /* Kahn: a node goes once every edge into it has; a cycle's nodes never do */
    int32_t head = 0, tail = 0;
    for (int32_t u = 0; u < nodes; u++)
        if (degree[u] == 0) queue[tail++] = u;
    while (head < tail) {
        int32_t u = queue[head++];
        for (int32_t e = first[u]; e < first[u + 1]; e++)
            if (--degree[next[e]] == 0) queue[tail++] = next[e];
    }
    host_alloc(mod, names, bytes, 0);
    return tail < nodes;
}

/* Lays the new order out on a scratch schedule: false, naming the cycle in mod->error. */
static bool scratch_check(klua_mod *mod) {
    kiln_schedule *sched = mod->kw->schedule;
    kiln_world *world = mod->kw->world;
    kiln_schedule *scratch = kiln_schedule_create(world, NULL);
    if (!scratch) {
        snprintf(mod->error, sizeof mod->error, "not enough memory");
        return false;
    }
    bool ok = true;
    int32_t n = kiln_schedule_system_count(sched);
    for (int32_t i = 0; i < n && ok; i++) {
        kiln_system_info info;
        if (!kiln_schedule_system_info_get(sched, i, &info) || info.removing) continue;
        kiln_system_desc d = {.name = info.name, .run = order_only};
        klua_mod_staged *st = replacing(mod, info.name);
        if (!st && mod->previous && klua_mod_runs(mod->previous, info.name)) continue; /* leaves */
        for (int k = 0; k < KILN_SYSTEM_MAX_ORDER; k++) {
            d.before[k] = st ? (st->before[k][0] ? st->before[k] : NULL) : k < info.before_count ? info.before[k] : NULL;
            d.after[k] = st ? (st->after[k][0] ? st->after[k] : NULL) : k < info.after_count ? info.after[k] : NULL;
        }
        if (kiln_schedule_add(scratch, &d) == KILN_OK) continue;
        /* named after the mod's system in the cycle (the add closing it may be another's) */
        const char *detail = klua_core_detail(kiln_world_error(world)), *who = st ? st->name : NULL;
        for (int s = 0; s < mod->staged_count && !who; s++) {
            char quoted[KILN_MAX_NAME + 3];
            snprintf(quoted, sizeof quoted, "'%s'", mod->staged[s].name);
            if (mod->staged[s].replace && strstr(detail, quoted)) who = mod->staged[s].name;
        }
        if (who) snprintf(mod->error, sizeof mod->error, "its system '%s' was refused: %s", who, detail);
        else snprintf(mod->error, sizeof mod->error, "its systems' order was refused: %s", detail);
        ok = false;
    }
    kiln_schedule_destroy(scratch);
    return ok;
}

bool klua_mod_order_check(klua_mod *mod) {
    /* without constraints of their own the replaced systems close nothing: the rest is a part
     * of the schedule as it is, new names included, which the core has checked */
    bool constrained = false;
    for (int i = 0; i < mod->staged_count && !constrained; i++)
        constrained = mod->staged[i].replace && (mod->staged[i].before[0][0] || mod->staged[i].after[0][0]);
    if (!constrained) return true;
    /* the sort costs what the system infos cost, a lookup per constraint: less than the build
     * of the stages that any reload makes the next frame pay */
    int cycle = has_cycle(mod);
    if (cycle < 0) snprintf(mod->error, sizeof mod->error, "not enough memory");
    return cycle == 0 || (cycle > 0 && scratch_check(mod));
}
