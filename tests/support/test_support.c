/* test_support.c: the counting allocator and the test components shared by every suite.
 * Each block carries a header with its size, so a wrong osize from the world is counted. */
#include "test_support.h"

#include <check.h>
#include <signal.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Allocator                                                                                  */
/* ------------------------------------------------------------------------------------------ */

#define BLOCK_MAGIC 0x6b696c6e626c6b31ull /* "kilnblk1" */
#define FRESH_BYTE 0xa5
#define DEAD_BYTE 0xdd

/* Called through a volatile pointer so the compiler cannot drop the poisoning of a block it
 * sees freed right after (a dead store to it). */
static void *(*volatile poison)(void *, int, size_t) = memset;

/* Keeps the user block max_align_t aligned, as the hook contract promises. */
typedef union block_header {
    struct {
        size_t size;
        uint64_t magic;
    } info;
    max_align_t align;
} block_header;

void test_allocator_init(test_allocator *a) {
    memset(a, 0, sizeof *a);
    a->fail_after = -1;
}

void test_allocator_fail_after(test_allocator *a, int64_t n) {
    a->fail_after = n;
}

void test_allocator_fail_never(test_allocator *a) {
    a->fail_after = -1;
}

static bool refuse(test_allocator *a) {
    if (a->fail_after < 0) return false;
    if (a->fail_after > 0) {
        a->fail_after--;
        return false;
    }
    a->failures++;
    return true;
}

/* Aborts rather than asserting through Check, so the allocator also serves programs that
 * are not Check suites (the fuzz harness); a Check test reports the abort as its failure. */
static block_header *header_of(void *ptr) {
    block_header *h = (block_header *)ptr - 1;
    if (h->info.magic != BLOCK_MAGIC) {
        fprintf(stderr, "test allocator: a pointer it never handed out (or freed twice)\n");
        abort();
    }
    return h;
}

void *test_allocator_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    test_allocator *a = ud;
    a->calls++;
    if (nsize == 0) {
        if (ptr == NULL) return NULL;
        block_header *h = header_of(ptr);
        if (h->info.size != osize) a->bad_osize++;
        a->frees++;
        a->live_blocks--;
        a->live_bytes -= (int64_t)h->info.size;
        poison(h + 1, DEAD_BYTE, h->info.size);
        h->info.magic = 0;
        free(h);
        return NULL;
    }
    if (ptr == NULL) {
        if (refuse(a)) return NULL;
        block_header *h = malloc(sizeof *h + nsize);
        if (h == NULL) return NULL;
        h->info.size = nsize;
        h->info.magic = BLOCK_MAGIC;
        memset(h + 1, FRESH_BYTE, nsize);
        a->allocations++;
        a->live_blocks++;
        a->live_bytes += (int64_t)nsize;
        if (a->live_bytes > a->peak_bytes) a->peak_bytes = a->live_bytes;
        return h + 1;
    }
    block_header *old = header_of(ptr);
    size_t old_size = old->info.size;
    if (old_size != osize) a->bad_osize++;
    if (nsize > old_size && refuse(a)) return NULL;
    block_header *h = realloc(old, sizeof *h + nsize);
    if (h == NULL) return NULL;
    if (nsize > old_size) memset((unsigned char *)(h + 1) + old_size, FRESH_BYTE, nsize - old_size);
    h->info.size = nsize;
    a->allocations++;
    a->live_bytes += (int64_t)nsize - (int64_t)old_size;
    if (a->live_bytes > a->peak_bytes) a->peak_bytes = a->live_bytes;
    return h + 1;
}

kiln_world *test_world_create(test_allocator *a) {
    kiln_world_desc desc = {.alloc = test_allocator_fn, .alloc_ud = a};
    kiln_world *world = kiln_world_create(&desc);
    ck_assert_ptr_nonnull(world);
    return world;
}

void test_world_fixture_setup(test_world_fixture *f) {
    test_allocator_init(&f->alloc);
    f->w = test_world_create(&f->alloc);
}

void test_world_fixture_teardown(test_world_fixture *f) {
    kiln_world_destroy(f->w);
    f->w = NULL;
    ck_assert_int_eq(f->alloc.live_blocks, 0);
    ck_assert_int_eq(f->alloc.live_bytes, 0);
    ck_assert_int_eq(f->alloc.bad_osize, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Components                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static const kiln_field xy_fields[] = {
    {.name = "x", .type = KILN_TYPE_FLOAT, .offset = 0, .count = 0},
    {.name = "y", .type = KILN_TYPE_FLOAT, .offset = 4, .count = 0},
};

static const kiln_field owned_fields[] = {
    {.name = "id", .type = KILN_TYPE_INT32, .offset = offsetof(test_owned, id), .count = 0},
};

kiln_component_desc test_position_desc(void) {
    return (kiln_component_desc){
        .name = "Position",
        .size = sizeof(test_position),
        .align = alignof(test_position),
        .fields = xy_fields,
        .field_count = 2,
    };
}

kiln_component_desc test_velocity_desc(void) {
    return (kiln_component_desc){
        .name = "Velocity",
        .size = sizeof(test_velocity),
        .align = alignof(test_velocity),
        .fields = xy_fields,
        .field_count = 2,
    };
}

static void log_destroyed(test_hook_log *log, int32_t id) {
    if (log->id_count < TEST_HOOK_LOG_MAX) log->ids[log->id_count++] = id;
}

static void owned_destroy(void *ptr, int32_t count, void *ctx) {
    test_hook_log *log = ctx;
    test_owned *values = ptr;
    log->destroy_calls++;
    for (int32_t i = 0; i < count; i++) {
        test_owned *v = &values[i];
        if (v->payload != NULL) {
            if (*v->payload != v->id) log->bad_payload++;
            free(v->payload);
        }
        log_destroyed(log, v->id);
        log->destroyed++;
        v->payload = NULL;
        v->id = -1;
    }
}

static void owned_move(void *dst, void *src, int32_t count, void *ctx) {
    test_hook_log *log = ctx;
    test_owned *to = dst;
    test_owned *from = src;
    log->move_calls++;
    for (int32_t i = 0; i < count; i++) {
        to[i] = from[i];
        from[i].payload = NULL;
        from[i].id = -2;
        log->moved++;
    }
}

kiln_component_desc test_owned_desc(test_hook_log *log) {
    return (kiln_component_desc){
        .name = "Owned",
        .size = sizeof(test_owned),
        .align = alignof(test_owned),
        .fields = owned_fields,
        .field_count = 1,
        .destroy = owned_destroy,
        .move = owned_move,
        .hook_ctx = log,
    };
}

static kiln_component register_or_fail(kiln_world *world, const kiln_component_desc *desc) {
    kiln_component id = KILN_NO_COMPONENT;
    kiln_result r = kiln_component_register(world, desc, &id);
    ck_assert_msg(r == KILN_OK, "registering %s failed: %s", desc->name, kiln_world_error(world));
    ck_assert_uint_ne(id, KILN_NO_COMPONENT);
    return id;
}

kiln_component test_register_position(kiln_world *world) {
    kiln_component_desc desc = test_position_desc();
    return register_or_fail(world, &desc);
}

kiln_component test_register_velocity(kiln_world *world) {
    kiln_component_desc desc = test_velocity_desc();
    return register_or_fail(world, &desc);
}

kiln_component test_register_owned(kiln_world *world, test_hook_log *log) {
    kiln_component_desc desc = test_owned_desc(log);
    return register_or_fail(world, &desc);
}

kiln_component test_register_tag(kiln_world *world, const char *name) {
    kiln_component_desc desc = {.name = name};
    return register_or_fail(world, &desc);
}

kiln_result test_spawn_tag_sets(kiln_world *world, const kiln_component *tags, int32_t count, uint32_t *last) {
    kiln_result r = KILN_OK;
    uint32_t mask = 1;
    for (; mask < (1u << count) && r == KILN_OK; mask++) {
        kiln_component list[31];
        int32_t n = 0;
        for (int32_t i = 0; i < count; i++)
            if (mask & (1u << i)) list[n++] = tags[i];
        kiln_entity e;
        r = kiln_spawn_with(world, list, NULL, n, &e);
    }
    if (last) *last = mask - 1;
    return r;
}

test_owned test_owned_make(int32_t id) {
    test_owned v = {.payload = malloc(sizeof(int32_t)), .id = id};
    ck_assert_ptr_nonnull(v.payload);
    *v.payload = id;
    return v;
}

void test_owned_release(test_owned *value) {
    free(value->payload);
    value->payload = NULL;
}

int64_t test_hook_log_count(const test_hook_log *log, int32_t id) {
    int64_t n = 0;
    for (int32_t i = 0; i < log->id_count; i++) n += log->ids[i] == id;
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Misc                                                                                       */
/* ------------------------------------------------------------------------------------------ */

const char *test_entity_string(kiln_entity entity, char buf[32]) {
    return kiln_entity_format(entity, buf, 32);
}

bool test_contains(const kiln_entity *list, int64_t count, kiln_entity entity) {
    for (int64_t i = 0; i < count; i++)
        if (list[i] == entity) return true;
    return false;
}

int64_t test_query_collect(const kiln_query *query, kiln_entity *dest, int64_t capacity) {
    kiln_iter it;
    int64_t seen = 0;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it)) {
        ck_assert_int_gt(it.count, 0);
        for (int32_t row = 0; row < it.count; row++, seen++)
            if (seen < capacity) dest[seen] = it.entities[row];
    }
    return seen;
}

static uint64_t digest_bytes(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* A hash of every live entity (in kiln_world_entities order) with, per component, whether it
 * has it, its change tick and its value bytes. */
uint64_t test_world_digest(const kiln_world *w) {
    int64_t n = kiln_world_entities(w, NULL, 0);
    kiln_entity *list = malloc(sizeof *list * (size_t)(n + 1));
    ck_assert_ptr_nonnull(list);
    ck_assert_int_eq(kiln_world_entities(w, list, n), n);
    uint64_t h = digest_bytes(1469598103934665603ull, &n, sizeof n);
    int32_t components = kiln_component_count(w);
    for (int64_t i = 0; i < n; i++) {
        h = digest_bytes(h, &list[i], sizeof list[i]);
        for (kiln_component c = 1; c <= (kiln_component)components; c++) {
            bool has = kiln_has(w, list[i], c);
            h = digest_bytes(h, &has, sizeof has);
            if (!has) continue;
            kiln_tick t = kiln_changed_tick(w, list[i], c);
            h = digest_bytes(h, &t, sizeof t);
            kiln_component_info info;
            ck_assert(kiln_component_info_get(w, c, &info));
            const void *v = kiln_get(w, list[i], c);
            if (info.size > 0 && v != NULL) h = digest_bytes(h, v, info.size);
        }
    }
    free(list);
    return h;
}

void test_assert_position(kiln_world *w, kiln_entity e, kiln_component pos, float x, float y) {
    const test_position *p = kiln_get(w, e, pos);
    ck_assert_msg(p != NULL, "entity has no Position");
    ck_assert_msg(p->x == x && p->y == y, "Position is (%g, %g), expected (%g, %g)", p->x, p->y,
                  x, y);
}

void test_assert_velocity(kiln_world *w, kiln_entity e, kiln_component vel, float x, float y) {
    const test_velocity *v = kiln_get(w, e, vel);
    ck_assert_msg(v != NULL, "entity has no Velocity");
    ck_assert_msg(v->x == x && v->y == y, "Velocity is (%g, %g), expected (%g, %g)", v->x, v->y,
                  x, y);
}

void test_assert_names(const char *msg, const char *what) {
    ck_assert_msg(strstr(msg, what) != NULL, "message \"%s\" does not name %s", msg, what);
}

int64_t test_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void test_spin_ns(int64_t ns) {
    int64_t end = test_now_ns() + ns;
    while (test_now_ns() < end) {
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Expected aborts                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* One expectation per test process (a signal test runs in a process of its own). */
static char abort_needle[256];
static int abort_log = -1, abort_stderr = -1;

static void write_all(int fd, const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

static void on_abort(int sig) {
    (void)sig;
    static char seen[8192];
    ssize_t n = pread(abort_log, seen, sizeof seen - 1, 0);
    seen[n > 0 ? n : 0] = '\0';
    dup2(abort_stderr, STDERR_FILENO);
    write_all(STDERR_FILENO, seen);
    int as = SIGABRT;
    if (!strstr(seen, abort_needle)) {
        write_all(STDERR_FILENO, "test_expect_abort: the abort did not say: ");
        write_all(STDERR_FILENO, abort_needle);
        write_all(STDERR_FILENO, "\n");
        as = SIGSEGV;
    }
    signal(as, SIG_DFL);
    raise(as);
}

void test_expect_abort(const char *needle) {
    snprintf(abort_needle, sizeof abort_needle, "%s", needle);
    FILE *log = tmpfile();
    ck_assert_ptr_nonnull(log);
    fflush(stderr);
    abort_log = dup(fileno(log));
    abort_stderr = dup(STDERR_FILENO);
    ck_assert(abort_log >= 0 && abort_stderr >= 0);
    dup2(abort_log, STDERR_FILENO);
    signal(SIGABRT, on_abort);
}
