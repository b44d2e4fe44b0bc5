/* test_schedule_order_model.c: Check suite driving kiln_schedule_add, _replace and _remove
 * with random before/after over a small pool of names, against a model of our own: every
 * name of the pool is a node whether a system holds it or not, an add or replace is refused
 * exactly when its system's constraints would close a cycle among them, the reported cycle
 * is a shortest one through the system, and a build puts every system after those it must
 * follow; with random access too, a build gives each system the stage a plain model of the
 * staging rule gives it. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "schedule_fixture.h"
#include "test_registry.h"
#include "test_support.h"

#define POOL 9

static const char *const pool[POOL] = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};

/* A present system's constraints: bit j of before/after names pool[j]. */
typedef struct model {
    bool present[POOL];
    uint32_t before[POOL], after[POOL];
} model;

static schedule_fixture F;

static void setup(void) { schedule_fixture_setup(&F); }

static void teardown(void) { schedule_fixture_teardown(&F); }

KILN_TEST_GROUP_WITH(model, .setup = setup, .teardown = teardown, .timeout = 60);

static uint64_t next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* edge[u] bit v: u runs before v, from the present systems' constraints, with system k's
 * replaced by (before, after) when k >= 0. */
static void edges(const model *m, int k, uint32_t before, uint32_t after, uint32_t edge[POOL]) {
    memset(edge, 0, sizeof(uint32_t) * POOL);
    for (int u = 0; u < POOL; u++) {
        if (!m->present[u] && u != k) continue;
        uint32_t b = u == k ? before : m->before[u], a = u == k ? after : m->after[u];
        edge[u] |= b;
        for (int v = 0; v < POOL; v++)
            if (a & (1u << v)) edge[v] |= 1u << u;
    }
}

/* The length of the shortest cycle through k (in edges), or 0 when there is none. */
static int shortest_cycle(const uint32_t edge[POOL], int k) {
    uint32_t seen = 1u << k, frontier = 1u << k;
    for (int length = 1; length <= POOL; length++) {
        uint32_t reach = 0;
        for (int u = 0; u < POOL; u++)
            if (frontier & (1u << u)) reach |= edge[u];
        if (reach & (1u << k)) return length;
        frontier = reach & ~seen;
        seen |= reach;
    }
    return 0;
}

static int index_of(const char *name, size_t len) {
    for (int j = 0; j < POOL; j++)
        if (strlen(pool[j]) == len && strncmp(pool[j], name, len) == 0) return j;
    return -1;
}

/* Checks "fn: 'k' -> 'x' -> ... -> 'k' would form a cycle": it starts and ends at k, each
 * step is an edge, and it is length edges long. */
static void check_message(const char *fn, const uint32_t edge[POOL], int k, int length) {
    const char *err = kiln_world_error(F.world);
    size_t n = strlen(fn);
    ck_assert_msg(strncmp(err, fn, n) == 0 && strncmp(err + n, ": ", 2) == 0, "error: %s", err);
    const char *p = err + n + 2;
    int path[POOL + 2], count = 0;
    while (*p == '\'' && count < POOL + 2) {
        const char *end = strchr(p + 1, '\'');
        ck_assert_ptr_nonnull(end);
        path[count] = index_of(p + 1, (size_t)(end - p - 1));
        ck_assert_msg(path[count] >= 0, "error: %s", err);
        count++;
        p = end + 1;
        if (strncmp(p, " -> ", 4) != 0) break;
        p += 4;
    }
    ck_assert_msg(strcmp(p, " would form a cycle") == 0, "error: %s", err);
    ck_assert_msg(count == length + 1 && path[0] == k && path[count - 1] == k,
                  "error: %s (a shortest cycle has %d steps)", err, length);
    for (int s = 0; s + 1 < count; s++)
        ck_assert_msg(edge[path[s]] & (1u << path[s + 1]), "error: %s ('%s' is not before '%s')", err,
                      pool[path[s]], pool[path[s + 1]]);
}

/* A random set of up to three pool names other than none. */
static uint32_t names(uint64_t *x) {
    uint32_t set = 0;
    int count = (int)(next(x) % 4);
    for (int i = 0; i < count; i++) set |= 1u << (next(x) % POOL);
    return set;
}

static void fill(kiln_system_desc *d, int k, uint32_t before, uint32_t after) {
    memset(d, 0, sizeof *d);
    d->name = pool[k];
    d->run = noop;
    int nb = 0, na = 0;
    for (int j = 0; j < POOL; j++) {
        if (before & (1u << j)) d->before[nb++] = pool[j];
        if (after & (1u << j)) d->after[na++] = pool[j];
    }
}

/* After a build, every present system runs in a later stage than each it must follow. */
static void check_stages(kiln_schedule *s, const model *m) {
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    uint32_t edge[POOL];
    edges(m, -1, 0, 0, edge);
    int stage[POOL];
    for (int u = 0; u < POOL; u++) {
        int32_t i = kiln_schedule_find(s, pool[u]);
        ck_assert_int_eq(i >= 0, m->present[u]);
        kiln_system_info info;
        stage[u] = i >= 0 && kiln_schedule_system_info_get(s, i, &info) ? info.stage : -1;
    }
    for (int u = 0; u < POOL; u++)
        for (int v = 0; v < POOL; v++)
            if (m->present[u] && m->present[v] && (edge[u] & (1u << v)))
                ck_assert_msg(stage[u] < stage[v], "'%s' (stage %d) must run before '%s' (stage %d)",
                              pool[u], stage[u], pool[v], stage[v]);
}

KILN_TEST(model, random_adds_replaces_and_removes_agree_with_the_model) {
    int refused = 0, accepted = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        uint64_t x = seed * 0x9e3779b97f4a7c15u;
        kiln_schedule *s = kiln_schedule_create(F.world, NULL);
        model m = {0};
        for (int op = 0; op < 300; op++) {
            int k = (int)(next(&x) % POOL), kind = (int)(next(&x) % 10);
            kiln_world_clear_error(F.world);
            if (kind < 2) { /* remove */
                kiln_result r = kiln_schedule_remove(s, pool[k]);
                ck_assert_int_eq(r, m.present[k] ? KILN_OK : KILN_ERR_INVALID_ARGUMENT);
                m.present[k] = false;
                continue;
            }
            uint32_t before = names(&x), after = names(&x);
            kiln_system_desc d;
            fill(&d, k, before, after);
            bool replace = kind < 5;
            const char *fn = replace ? "kiln_schedule_replace" : "kiln_schedule_add";
            kiln_result r = replace ? kiln_schedule_replace(s, &d) : kiln_schedule_add(s, &d);
            if (replace != m.present[k]) { /* replacing an absent name, adding a present one */
                ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
                continue;
            }
            uint32_t edge[POOL];
            edges(&m, k, before, after, edge);
            int length = shortest_cycle(edge, k);
            if (length > 0) {
                ck_assert_msg(r == KILN_ERR_INVALID_ARGUMENT, "seed %d op %d: %s of '%s' closes a cycle",
                              (int)seed, op, fn, pool[k]);
                check_message(fn, edge, k, length);
                refused++;
            } else {
                ck_assert_msg(r == KILN_OK, "seed %d op %d: %s", (int)seed, op, kiln_world_error(F.world));
                m.present[k] = true;
                m.before[k] = before;
                m.after[k] = after;
                accepted++;
            }
            if (op % 25 == 0) check_stages(s, &m);
        }
        check_stages(s, &m);
        kiln_schedule_destroy(s);
    }
    /* both outcomes were met often */
    ck_assert_int_gt(refused, 500);
    ck_assert_int_gt(accepted, 500);
}

/* ------------------------------------------------------------------------------------------ */
/* stages against a plain model of the staging rule                                           */
/* ------------------------------------------------------------------------------------------ */

#define STAGED 32

/* A system of the staging model: its access over F's three components (bit 0 p, 1 q, 2 r). */
typedef struct staged {
    char name[16];
    unsigned reads, writes;
    bool exclusive;
    int before[2], after[2]; /* names s<k>, or -1 */
} staged;

static bool conflicts(const staged *a, const staged *b) {
    return a->exclusive || b->exclusive || (a->writes & (b->writes | b->reads)) || (b->writes & a->reads);
}

static int present_index(const staged *list, int n, int name) {
    char text[16];
    snprintf(text, sizeof text, "s%d", name);
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].name, text) == 0) return i;
    return -1;
}

/* The staging rule, plainly: the closure of the before/after edges among the systems (in
 * declaration order); then, pair by pair (b ascending, a ascending below it), a conflicting
 * pair that nothing orders yet runs in declaration order; a stage is one past the latest
 * stage of all that must run before. */
static void model_stages(const staged *list, int n, int stage[STAGED]) {
    bool reach[STAGED][STAGED] = {{false}};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            int b = list[i].before[k] < 0 ? -1 : present_index(list, n, list[i].before[k]);
            int a = list[i].after[k] < 0 ? -1 : present_index(list, n, list[i].after[k]);
            if (b >= 0) reach[i][b] = true;
            if (a >= 0) reach[a][i] = true;
        }
    for (int k = 0; k < n; k++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                if (reach[i][k] && reach[k][j]) reach[i][j] = true;
    for (int b = 0; b < n; b++)
        for (int a = 0; a < b; a++) {
            if (reach[a][b] || reach[b][a] || !conflicts(&list[a], &list[b])) continue;
            for (int x = 0; x < n; x++)
                for (int y = 0; y < n; y++)
                    if ((x == a || reach[x][a]) && (y == b || reach[b][y])) reach[x][y] = true;
        }
    for (int i = 0; i < n; i++) stage[i] = 0;
    for (int round = 0; round < n; round++)
        for (int b = 0; b < n; b++)
            for (int a = 0; a < n; a++)
                if (reach[a][b] && stage[b] < stage[a] + 1) stage[b] = stage[a] + 1;
}

/* Removes s<name> from kiln and the list alike (the rest move up, as kiln's list does). */
static void remove_staged(kiln_schedule *s, staged *list, int *n, int name) {
    int i = present_index(list, *n, name);
    char text[16];
    snprintf(text, sizeof text, "s%d", name);
    ck_assert_int_eq(kiln_schedule_remove(s, text), i >= 0 ? KILN_OK : KILN_ERR_INVALID_ARGUMENT);
    if (i < 0) return;
    memmove(list + i, list + i + 1, sizeof *list * (size_t)(*n - i - 1));
    (*n)--;
}

/* Adds s<name> with random access and up to two before and two after names; the list takes it
 * when kiln does (a refusal is a cycle, which the other test checks). */
static void add_staged(kiln_schedule *s, staged *list, int *n, int name, uint64_t *x) {
    const kiln_component comps[3] = {F.p, F.q, F.r};
    staged t = {.reads = (unsigned)(next(x) % 8), .writes = (unsigned)(next(x) % 8), .exclusive = next(x) % 16 == 0};
    snprintf(t.name, sizeof t.name, "s%d", name);
    kiln_system_desc d = {.name = t.name, .run = noop, .exclusive = t.exclusive};
    char before[2][16], after[2][16];
    for (int k = 0, r = 0, w = 0; k < 3; k++) {
        if (t.reads & (1u << k)) d.reads[r++] = comps[k];
        if (t.writes & (1u << k)) d.writes[w++] = comps[k];
    }
    for (int k = 0, nb = 0, na = 0; k < 2; k++) {
        t.before[k] = next(x) % 3 == 0 ? (int)(next(x) % STAGED) : -1;
        t.after[k] = next(x) % 3 == 0 ? (int)(next(x) % STAGED) : -1;
        if (t.before[k] == name) t.before[k] = -1;
        if (t.after[k] == name) t.after[k] = -1;
        if (t.before[k] >= 0) {
            snprintf(before[k], sizeof before[k], "s%d", t.before[k]);
            d.before[nb++] = before[k];
        }
        if (t.after[k] >= 0) {
            snprintf(after[k], sizeof after[k], "s%d", t.after[k]);
            d.after[na++] = after[k];
        }
    }
    kiln_world_clear_error(F.world);
    kiln_result r = kiln_schedule_add(s, &d);
    ck_assert_msg(r == KILN_OK || r == KILN_ERR_INVALID_ARGUMENT, "%s", kiln_world_error(F.world));
    if (r == KILN_OK) list[(*n)++] = t;
}

KILN_TEST(model, random_access_and_constraints_build_the_stages_of_the_staging_rule) {
    int builds = 0, ordered = 0;
    for (uint64_t seed = 1; seed <= 150; seed++) {
        uint64_t x = seed * 0xd1b54a32d192ed03u;
        kiln_schedule *s = kiln_schedule_create(F.world, NULL);
        staged list[STAGED];
        int n = 0;
        for (int op = 0; op < 60; op++) {
            int name = (int)(next(&x) % STAGED);
            if (next(&x) % 6 == 0) remove_staged(s, list, &n, name);
            else if (present_index(list, n, name) < 0) add_staged(s, list, &n, name, &x);
            if (op % 10 != 9) continue;
            ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
            int stage[STAGED];
            model_stages(list, n, stage);
            ck_assert_int_eq(kiln_schedule_system_count(s), n);
            for (int i = 0; i < n; i++) {
                kiln_system_info info;
                ck_assert(kiln_schedule_system_info_get(s, i, &info));
                ck_assert_str_eq(info.name, list[i].name);
                ck_assert_msg(info.stage == stage[i], "seed %d op %d: '%s' in stage %d, the model's %d",
                              (int)seed, op, list[i].name, (int)info.stage, stage[i]);
                if (stage[i] > 0) ordered++;
            }
            builds++;
        }
        kiln_schedule_destroy(s);
    }
    ck_assert_int_eq(builds, 150 * 6);
    ck_assert_int_gt(ordered, 3000); /* the stages were not all 0 */
}
