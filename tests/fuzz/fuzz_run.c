/* fuzz_run.c: one fuzz run: the failure-injecting allocator (the suites' counting test
 * allocator underneath), the fuzzed components and their hooks, world setup and the op loop.
 * Invariant: after every operation the world equals the model, else the run aborts. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_ops.h"
#include "test_support.h"

/* ---- allocator -------------------------------------------------------------------------- */

/* Refusable requests (new blocks and growth) are numbered from the end of setup; the
 * fail_at-th is refused, and in persistent mode every later one until the operation ends.
 * Locked: command buffers of systems on workers allocate through the same hook. */
static struct {
    pthread_mutex_t lock;
    test_allocator base;
    int64_t requests, failures, fail_at;
    int paused;
    bool armed, persistent, failing;
} inject = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *inject_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    (void)ud;
    pthread_mutex_lock(&inject.lock);
    bool refusable = nsize > 0 && (ptr == NULL || nsize > osize);
    /* In persistent mode every shrink from the failure on is refused too, for the rest of
     * the run (uncounted: a refused shrink must change nothing anyone sees, so it may never
     * surface as out of memory). */
    if (nsize > 0 && ptr != NULL && nsize < osize && inject.armed && inject.paused == 0 &&
        inject.persistent && inject.fail_at >= 0 && inject.requests > inject.fail_at) {
        pthread_mutex_unlock(&inject.lock);
        return NULL;
    }
    if (refusable && inject.armed && inject.paused == 0) {
        int64_t index = inject.requests++;
        if (inject.fail_at >= 0 && (index == inject.fail_at || (inject.persistent && inject.failing))) {
            inject.failing = true;
            inject.failures++;
            pthread_mutex_unlock(&inject.lock);
            return NULL;
        }
    }
    void *p = test_allocator_fn(&inject.base, ptr, osize, nsize);
    pthread_mutex_unlock(&inject.lock);
    return p;
}

int64_t fuzz_alloc_failures(void) {
    pthread_mutex_lock(&inject.lock);
    int64_t n = inject.failures;
    pthread_mutex_unlock(&inject.lock);
    return n;
}

/* Pauses injection and counting (schedule runs: workers allocate in no fixed order). */
void fuzz_alloc_pause(bool paused) {
    pthread_mutex_lock(&inject.lock);
    inject.paused += paused ? 1 : -1;
    pthread_mutex_unlock(&inject.lock);
}

/* ---- owned values ----------------------------------------------------------------------- */

static atomic_llong live_payloads;
static const fz_ctx *current_ctx;

static void owned_destroy(void *ptr, int32_t count, void *ctx) {
    (void)ctx;
    fz_owned *v = ptr;
    for (int32_t i = 0; i < count; i++) {
        if (v[i].payload) {
            if (v[i].id <= 0 || *v[i].payload != v[i].id)
                fuzz_fail(current_ctx, "destroy hook got a bad owned value (id %d)", v[i].id);
            free(v[i].payload);
            atomic_fetch_sub(&live_payloads, 1);
        } else if (v[i].id != 0) {
            fuzz_fail(current_ctx, "destroy hook got a destroyed or moved-from value (id %d)", v[i].id);
        }
        v[i].payload = NULL;
        v[i].id = -1;
    }
}

static void owned_move(void *dst, void *src, int32_t count, void *ctx) {
    (void)ctx;
    fz_owned *d = dst, *s = src;
    for (int32_t i = 0; i < count; i++) {
        if (s[i].id < 0) fuzz_fail(current_ctx, "move hook got a dead value (id %d)", s[i].id);
        d[i] = s[i];
        s[i].payload = NULL;
        s[i].id = -2;
    }
}

void fuzz_value_from_model(int comp, const unsigned char *model, void *dest) {
    size_t size = model_size(comp);
    memcpy(dest, model, size);
    if (comp != FZ_O) return;
    fz_owned *o = dest;
    o->payload = NULL;
    if (o->id > 0) {
        o->payload = malloc(sizeof *o->payload);
        if (!o->payload) abort();
        *o->payload = o->id;
        atomic_fetch_add(&live_payloads, 1);
    }
}

void fuzz_owned_release(fz_owned *v) {
    if (!v->payload) return;
    free(v->payload);
    v->payload = NULL;
    atomic_fetch_sub(&live_payloads, 1);
}

int64_t fuzz_live_payloads(void) { return atomic_load(&live_payloads); }

static kiln_result k_check(const kiln_world *world, kiln_entity entity, const void *value,
                           void *ctx, char *why, size_t why_size) {
    (void)world, (void)entity, (void)ctx;
    int32_t v = 1;
    if (value) memcpy(&v, value, sizeof v);
    if (((v % 5) + 5) % 5 != 4) return KILN_OK;
    snprintf(why, why_size, "K refuses %d", (int)v);
    return KILN_ERR_INVALID_ARGUMENT;
}

/* ---- failing ---------------------------------------------------------------------------- */

static const char *input_name;
bool fuzz_sabotage;

void fuzz_set_input_name(const char *name) { input_name = name; }

void fuzz_fail(const fz_ctx *c, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kiln fuzz: mismatch");
    if (input_name) fprintf(stderr, " in %s", input_name);
    if (c) fprintf(stderr, " at op %lld (%s)", (long long)c->op_index, c->op_name ? c->op_name : "setup");
    if (c && c->inject) fprintf(stderr, " [allocation failure injected at %lld%s]",
                                (long long)inject.fail_at, inject.persistent ? ", persistent" : "");
    fprintf(stderr, ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (c && c->w) fprintf(stderr, "\n  world error: %s", kiln_world_error(c->w));
    fprintf(stderr, "\n");
    abort();
}

uint8_t fz_byte(fz_ctx *c) {
    if (c->pos >= c->size) {
        c->pos = c->size + 1; /* marks the input as used up */
        return 0;
    }
    return c->data[c->pos++];
}

/* ---- setup ------------------------------------------------------------------------------ */

static void must(fz_ctx *c, kiln_result r, const char *what) {
    if (r != KILN_OK) fuzz_fail(c, "setup: %s failed (%s)", what, kiln_result_name(r));
}

static void register_components(fz_ctx *c) {
    static const int32_t a_defaults[2] = {7, -1};
    static const int32_t k_defaults = 1;
    kiln_component_desc descs[FZ_O + 3] = {
        [FZ_A] = {.name = "A", .size = 8, .defaults = a_defaults},
        [FZ_B] = {.name = "B", .size = 4},
        [FZ_T] = {.name = "T"},
        [FZ_U] = {.name = "U"},
        [FZ_O] = {.name = "O", .size = sizeof(fz_owned), .destroy = owned_destroy, .move = owned_move},
        [FZ_K] = {.name = "K", .size = 4, .check = k_check, .defaults = &k_defaults},
        [FZ_W] = {.name = "W", .size = 32, .align = 16},
    };
    for (int i = 0; i <= FZ_W; i++) must(c, kiln_component_register(c->w, &descs[i], &c->id[i]), descs[i].name);
    kiln_transform_ids ids;
    must(c, kiln_transform_init(c->w, &ids), "kiln_transform_init");
    c->id[FZ_LOCAL] = ids.local;
    c->id[FZ_PARENT] = ids.parent;
    c->id[FZ_WORLD] = ids.world;
    static const int32_t e_defaults[2] = {5, 6};
    kiln_component_desc ev = {.name = "E", .size = 8, .defaults = e_defaults};
    must(c, kiln_event_register(c->w, &ev, &c->ev), "kiln_event_register");
}

static fz_buf *buf_init(fz_buf *b, kiln_commands *cmd, bool lenient, int32_t cap) {
    memset(b, 0, sizeof *b);
    b->cmd = cmd;
    b->lenient = lenient;
    b->cap = cap;
    b->cmds = calloc((size_t)cap, sizeof(fz_cmd));
    if (!b->cmds) abort();
    return b;
}

/* An outermost end that ran out of memory left commands queued: as a host would, retry them
 * at once with a new section (memory available again), before any other call could apply
 * them as a side effect (every iteration's end does). */
static void retry_queue(fz_ctx *c) {
    c->op_name = "kiln_defer_end (retry)";
    fuzz_alloc_pause(true);
    kiln_defer_begin(c->w);
    kiln_result r = kiln_defer_end(c->w);
    fuzz_alloc_pause(false);
    fz_expect(c, r, KILN_OK, "kiln_defer_end");
    fz_defer_end_model(c, false);
    fuzz_compare(c);
}

int64_t fuzz_run(const uint8_t *data, size_t size, int64_t fail_at, bool persistent) {
    static fz_ctx ctx; /* large: kept off the stack */
    fz_ctx *c = &ctx;
    memset(c, 0, sizeof *c);
    current_ctx = c;
    c->data = data;
    c->size = size;
    c->m.tick = 1;
    c->next_owned_id = 1;

    pthread_mutex_lock(&inject.lock);
    test_allocator_init(&inject.base);
    inject.requests = inject.failures = 0;
    inject.fail_at = fail_at;
    inject.persistent = persistent;
    inject.failing = false;
    inject.armed = false;
    inject.paused = 0;
    pthread_mutex_unlock(&inject.lock);

    kiln_world_desc wd = {.alloc = inject_alloc};
    c->w = kiln_world_create(&wd);
    if (!c->w) fuzz_fail(c, "setup: kiln_world_create failed");
    register_components(c);
    buf_init(&c->queue, NULL, true, FZ_MAX_QUEUE);
    for (int b = 0; b < 2; b++) {
        kiln_commands *cmd = kiln_commands_create(c->w);
        if (!cmd) fuzz_fail(c, "setup: kiln_commands_create failed");
        buf_init(&c->bufs[b], cmd, false, FZ_MAX_CMD);
    }
    uint8_t flags = fz_byte(c);
    if (flags & 1) fuzz_schedule_setup(c);
    c->inject = fail_at >= 0;

    pthread_mutex_lock(&inject.lock);
    inject.armed = true;
    pthread_mutex_unlock(&inject.lock);

    const char *env = getenv("KILN_FUZZ_VERBOSE");
    int verbose = env ? atoi(env) : 0;
    fuzz_compare(c);
    while (c->pos < c->size && c->op_index < 4096) {
        c->op_index++;
        kiln_world_stats_get(c->w, &c->before);
        fuzz_op(c, fz_byte(c));
        if (fuzz_sabotage) c->m.tick++;
        pthread_mutex_lock(&inject.lock);
        inject.failing = false; /* a persistent failure ends with its operation */
        pthread_mutex_unlock(&inject.lock);
        fuzz_compare(c);
        if (verbose > 1)
            fprintf(stderr, "    op %lld %s: %lld alive, depth %d, queue %d, error '%s'\n", (long long)c->op_index,
                    c->op_name ? c->op_name : "-", (long long)kiln_entity_count(c->w), c->m.defer_depth,
                    c->queue.count, kiln_world_error(c->w));
        if (c->m.defer_depth == 0 && c->queue.count > 0) retry_queue(c);
    }
    if (verbose)
        fprintf(stderr, "  %lld ops, %d entities (%lld alive), %lld allocation requests\n",
                (long long)c->op_index, c->m.n_ents, (long long)kiln_entity_count(c->w),
                (long long)inject.requests);
    c->op_name = "teardown";
    pthread_mutex_lock(&inject.lock);
    inject.armed = false;
    int64_t requests = inject.requests;
    pthread_mutex_unlock(&inject.lock);

    /* Close what is open, as a host would, and check the world hands everything back. */
    while (c->m.defer_depth > 0) {
        c->m.defer_depth--;
        kiln_defer_end(c->w);
    }
    fuzz_schedule_teardown(c);
    for (int q = 0; q < FZ_MAX_QUERIES; q++) kiln_query_destroy(c->queries[q].q);
    kiln_commands_destroy(c->bufs[0].cmd);
    kiln_world_destroy(c->w);
    kiln_commands_destroy(c->bufs[1].cmd); /* after its world: detached, frees only itself */
    c->w = NULL;
    free(c->queue.cmds);
    free(c->bufs[0].cmds);
    free(c->bufs[1].cmds);
    if (inject.base.live_blocks != 0 || inject.base.live_bytes != 0)
        fuzz_fail(c, "the world leaked %lld blocks (%lld bytes) through its allocator",
                  (long long)inject.base.live_blocks, (long long)inject.base.live_bytes);
    if (inject.base.bad_osize != 0)
        fuzz_fail(c, "the world gave the allocator %lld wrong old sizes", (long long)inject.base.bad_osize);
    if (atomic_load(&live_payloads) != 0)
        fuzz_fail(c, "%lld owned values were never destroyed", (long long)atomic_load(&live_payloads));
    current_ctx = NULL;
    return requests;
}
