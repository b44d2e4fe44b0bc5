/* world.c: world lifetime, the error message, ticks and introspection. Invariant: a world
 * owns every byte it allocated, and destroy returns all of them through the same hook. */
#include "world.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "archetype.h"
#include "commands.h"
#include "entity.h"
#include "component.h"
#include "events.h"
#include "query.h"
#include "defer.h"
#include "guard.h"
#include "resource.h"
#include "spin.h"

_Thread_local uint64_t kl_thread_token;

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The monotonic clock's reading, handed out once the clock has moved past it, so any thread
 * started later reads more. Two live threads may share one; their addresses differ. Once a
 * thread: a tick at most, most often nothing (1 ns steps). Plus one: never 0. */
__attribute__((cold, noinline)) uint64_t kl_thread_token_take(void) {
    uint64_t first = monotonic_ns();
    while (monotonic_ns() <= first) kl_spin_pause();
    return kl_thread_token = first + 1;
}

char *kl_error_text(const kiln_world *world, bool claim) {
    kl_error_slots *errors =
        atomic_load_explicit(&((kiln_world *)world)->error_slots, memory_order_acquire);
    kl_thread_id me = kl_thread_me();
    if (!errors || errors->owner == me.self) return (char *)world->error;
    for (int32_t i = 0; i < errors->count; i++) {
        kl_error_slot *slot = &errors->slots[i];
        if (kl_thread_owns(me, atomic_load_explicit(&slot->thread, memory_order_relaxed),
                           atomic_load_explicit(&slot->token, memory_order_relaxed)))
            return slot->text;
    }
    uint64_t token = claim ? kl_thread_claim() : 0;
    for (int32_t i = 0; claim && i < errors->count; i++) {
        uintptr_t free_id = 0;
        if (!atomic_compare_exchange_strong_explicit(&errors->slots[i].thread, &free_id, me.self,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        /* an exited thread's message stays behind: the slot starts empty for this one */
        atomic_store_explicit(&errors->slots[i].token, token, memory_order_relaxed);
        errors->slots[i].text[0] = '\0';
        return errors->slots[i].text;
    }
    return NULL;
}

void kl_error_set_aside(const kiln_world *world, kl_error_kept *dest) {
    dest->text = kl_error_text(world, true);
    dest->len = dest->text ? strnlen(dest->text, KL_ERROR_SIZE - 1) : 0;
    if (!dest->text) return;
    memcpy(dest->kept, dest->text, dest->len);
    dest->text[0] = '\0';
}

void kl_error_put_back(const kl_error_kept *kept) {
    if (!kept->text) return;
    memcpy(kept->text, kept->kept, kept->len);
    kept->text[kept->len] = '\0';
}

kiln_result kl_fail(kiln_world *world, kiln_result code, const char *fmt, ...) {
    char *text = kl_error_text(world, true);
    if (!text) return code; /* more threads than slots: this one's message is lost */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, KL_ERROR_SIZE, fmt, ap);
    va_end(ap);
    return code;
}

const char *kiln_result_name(kiln_result result) {
    switch (result) {
    case KILN_OK: return "ok";
    case KILN_ERR_INVALID_ARGUMENT: return "invalid argument";
    case KILN_ERR_DEAD_ENTITY: return "dead entity";
    case KILN_ERR_MISSING_COMPONENT: return "missing component";
    case KILN_ERR_UNKNOWN_COMPONENT: return "unknown component";
    case KILN_ERR_LAYOUT_MISMATCH: return "layout mismatch";
    case KILN_ERR_OUT_OF_MEMORY: return "out of memory";
    case KILN_ERR_LIMIT: return "limit reached";
    case KILN_ERR_UNKNOWN_EVENT: return "unknown event type";
    }
    return "unknown result";
}

kiln_world *kiln_world_create(const kiln_world_desc *desc) {
    kl_allocator alloc = {kl_default_alloc, NULL, 0, 0};
    if (desc && desc->alloc) {
        alloc.fn = desc->alloc;
        alloc.ud = desc->alloc_ud;
    }
    kiln_world *world = kl_alloc(&alloc, sizeof *world);
    if (!world) return NULL;
    if (!kl_aligned(world)) { /* builds without assertions: refused, not undefined behaviour */
        kl_free(&alloc, world, sizeof *world);
        return NULL;
    }
    memset(world, 0, sizeof *world);
    world->alloc = alloc;
    world->tick = 1;
    world->free_head = KL_NONE;
    world->spawn_key_count = -1;
    world->hash_seed = kl_hash_seed(world);
    atomic_flag_clear(&world->resource_lock);
    atomic_flag_clear(&world->defer_lock);
    /* The empty archetype always exists, as id 0, so a bare spawn cannot fail on it later. */
    world->deferred = kl_commands_create(world, true, true);
    if (!world->deferred || !kl_archetype_ensure(world, NULL, 0, "kiln_world_create")) {
        kiln_world_destroy(world);
        return NULL;
    }
    return world;
}

/* The teardown table's entries, as published (acquire: each one below the count read before is
 * whole), or NULL when none was ever registered. */
static kl_fini *fini_entries(const kiln_world *world) {
    kl_table *t = atomic_load_explicit(&((kiln_world *)world)->finis, memory_order_acquire);
    return t ? kl_table_entries(t) : NULL;
}

/* Takes fn's entry out of the teardown table, keeping the others' order. Only the destroy does,
 * when no schedule runs: no reader can hold the table. */
static void drop_fini(kiln_world *world, kiln_fini_fn fn) {
    kl_fini *finis = fini_entries(world);
    int32_t count = atomic_load_explicit(&world->fini_count, memory_order_relaxed);
    for (int32_t i = count - 1; i >= 0; i--)
        if (finis[i].fn == fn) {
            memmove(&finis[i], &finis[i + 1], sizeof(kl_fini) * (size_t)(count - i - 1));
            atomic_store_explicit(&world->fini_count, count - 1, memory_order_relaxed);
            return;
        }
}

void kiln_world_destroy(kiln_world *world) {
    if (world == NULL) return;
    KILN_ASSERT(!world->destroying, "kiln_world_destroy: the world is already being destroyed "
                                    "(a call from one of its teardown or destroy hooks)");
    KILN_ASSERT(world->schedule_runs == 0, "kiln_world_destroy: a schedule of the world is running "
                                           "(a call from a system); destroy it after the run");
    KILN_ASSERT(world->schedules == 0, "kiln_world_destroy: the world still has schedules; "
                                       "kiln_schedule_destroy them first");
    KILN_ASSERT(world->iterating == 0, "kiln_world_destroy while a query iterates");
    /* Release builds refuse each (the world stays): what runs, iterates or holds the world
     * would go on using freed memory. */
    if (world->destroying) {
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_world_destroy: the world is already being destroyed (a call "
                "from one of its teardown or destroy hooks); this call did nothing, the destroy under way goes on");
        return;
    }
    if (world->schedule_runs != 0 || world->schedules != 0 || atomic_load(&world->iterating) != 0) {
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_world_destroy: %s; nothing was destroyed",
                world->schedule_runs ? "a schedule of the world is running (a call from a system)"
                : world->schedules   ? "the world still has schedules (kiln_schedule_destroy them first)"
                                     : "a query of the world iterates");
        return;
    }
    world->destroying = true;
    /* Addons first, with the world whole: they may destroy their queries and read values. Each
     * hook leaves the table once it ran, so what runs after it (an earlier hook, a value's
     * destroy hook) no longer finds the state it freed (kiln_world_atfini_get); one a hook
     * registers (an addon it initialises) runs in turn. */
    int32_t left;
    while ((left = atomic_load_explicit(&world->fini_count, memory_order_relaxed)) > 0) {
        kl_fini f = fini_entries(world)[left - 1];
        f.fn(world, f.ctx);
        drop_fini(world, f.fn);
    }
    kl_table_free(&world->alloc, atomic_load_explicit(&world->finis, memory_order_relaxed), sizeof(kl_fini));
    atomic_store_explicit(&world->finis, NULL, memory_order_relaxed);
    world->finis_run = true;
    KILN_ASSERT(world->schedules == 0, "kiln_world_destroy: a teardown hook created a schedule of the world, "
                                       "which would outlive it");
    while (world->buffers) kl_commands_detach(world->buffers);
    /* Values' destroy hooks may read the world (a loop defers it, to the world's queue): every
     * hook runs before the archetypes, the queries or the queue are freed. The rows' and the
     * queued values' before the resources': a binding keeps what their hooks need in one. */
    kl_archetypes_destroy_values(world);
    world->in_hook++; /* a queued value's hook neither applies the queue nor changes the world */
    if (world->deferred) kiln_commands_clear(world->deferred); /* destroys the queued values */
    world->in_hook--;
    kl_resources_free(world);
    world->in_hook++;
    kl_commands_free(world->deferred); /* what a resource's hook queued, if anything */
    world->deferred = NULL;
    world->in_hook--;
    kl_archetypes_free(world);
    kl_queries_free(world);
    kl_map_free(&world->alloc, &world->archetype_index);
    kl_events_free(world);
    kl_registry_free(world, &world->event_types);
    kl_registry_free(world, &world->components);
    kl_entities_free(world);
    kl_defer_free(world);
    kl_allocator alloc = world->alloc;
    kl_free(&alloc, world, sizeof *world);
}

kiln_result kiln_world_atfini(kiln_world *world, kiln_fini_fn fn, void *ctx) {
    KILN_ASSERT(world != NULL && fn != NULL, "world and fn are required");
    if (world->finis_run)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_world_atfini: the world is being destroyed and "
                       "its teardown hooks have run (a call from a value's destroy hook)");
    /* One writer: the table is read without a lock, never written beside another writer. */
    if (kl_off_stage_thread(world)) return kl_fail_atfini_off_stage(world, "kiln_world_atfini");
    int32_t count = atomic_load_explicit(&world->fini_count, memory_order_relaxed);
    kl_fini *finis = fini_entries(world);
    for (int32_t i = 0; i < count; i++)
        if (finis[i].fn == fn)
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "kiln_world_atfini: this teardown hook is already registered");
    kl_table *old = atomic_load_explicit(&world->finis, memory_order_relaxed);
    kl_table *t = kl_table_reserve(&world->alloc, old, count + 1, sizeof(kl_fini), 4);
    if (!t) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_world_atfini: out of memory");
    /* The entry past the count is read by no one yet; then the table, then the count. */
    ((kl_fini *)kl_table_entries(t))[count] = (kl_fini){fn, ctx};
    if (t != old) atomic_store_explicit(&world->finis, t, memory_order_release);
    atomic_store_explicit(&world->fini_count, count + 1, memory_order_release);
    return KILN_OK;
}

void *kiln_world_atfini_get(const kiln_world *world, kiln_fini_fn fn) {
    KILN_ASSERT(world != NULL, "world is NULL");
    int32_t count = atomic_load_explicit(&((kiln_world *)world)->fini_count, memory_order_acquire);
    if (count <= 0) return NULL;
    /* a count above 0 was published after its table: no NULL to test */
    const kl_fini *f = kl_table_entries(atomic_load_explicit(&((kiln_world *)world)->finis, memory_order_acquire));
    const kl_fini *end = f + count;
    do
        if (f->fn == fn) return f->ctx;
    while (++f < end);
    return NULL;
}

const char *kiln_world_error(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const char *text = kl_error_text(world, false);
    return text ? text : "";
}

void kiln_world_clear_error(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    char *text = kl_error_text(world, false);
    if (text) text[0] = '\0';
}

kiln_result kiln_world_dropped(const kiln_world *world, int64_t *count, const char **message) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (count) *count = world->dropped;
    if (message) *message = world->dropped_error;
    return world->dropped_code;
}

void kiln_world_drop_hook_set(kiln_world *world, kiln_drop_fn fn, void *ctx, kiln_drop_fn *old_fn,
                              void **old_ctx) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (old_fn) *old_fn = world->drop_fn;
    if (old_ctx) *old_ctx = world->drop_ctx;
    world->drop_fn = fn;
    world->drop_ctx = ctx;
}

kiln_tick kiln_tick_current(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return world->tick;
}

uint64_t kiln_tick_epoch(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return world->tick_epoch;
}

/* d -> d - shift, or 0 for the rows older than the new base: a saturating subtract, eight
 * rows at a time so that -O2 makes it one vector instruction (a plain loop stays scalar). */
static void shift_ticks(kiln_row_tick *ticks, int32_t n, kiln_row_tick shift) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        kiln_row_tick eight[8];
        memcpy(eight, ticks + i, sizeof eight);
        for (int k = 0; k < 8; k++) eight[k] = (kiln_row_tick)(eight[k] > shift ? eight[k] - shift : 0);
        memcpy(ticks + i, eight, sizeof eight);
    }
    for (; i < n; i++) ticks[i] = (kiln_row_tick)(ticks[i] > shift ? ticks[i] - shift : 0);
}

void kl_ticks_rebase(kiln_world *world) {
    if (world->tick - world->tick_base <= KILN_TICK_WINDOW) return;
    kiln_tick base = world->tick - KILN_TICK_WINDOW;
    kiln_tick shift = base - world->tick_base; /* > UINT16_MAX: every row is older */
    for (int32_t a = 0; a < world->archetype_count; a++) {
        kl_archetype *arch = world->archetypes[a];
        for (int32_t c = 0; c < arch->column_count && arch->count > 0; c++) {
            kl_column *col = &arch->columns[c];
            if (shift > UINT16_MAX) memset(col->ticks, 0, sizeof(kiln_row_tick) * (size_t)arch->count);
            else shift_ticks(col->ticks, arch->count, (kiln_row_tick)shift);
        }
    }
    world->tick_base = base;
}

/* Rebases when the tick is far enough from the base, iterations open or not: they read the
 * base through the world (kiln_iter.tick_base), so the tick never goes a row tick's range past
 * it. A delta computed before and stored after (an FFI loop's chunk stamp) reads later. */
static void rebase_when_due(kiln_world *world) {
    if (world->tick - world->tick_base >= KILN_TICK_REBASE_AT) kl_ticks_rebase(world);
}

void kl_tick_forward(kiln_world *world, kiln_tick tick) {
    if (tick <= world->tick) return;
    world->tick = tick;
    rebase_when_due(world);
}

kiln_tick kiln_tick_advance(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (atomic_load_explicit(&world->in_stage, memory_order_relaxed)) { /* workers stamp with the tick */
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_tick_advance: called from a running system that is not "
                "exclusive (systems beside it stamp their writes with the tick); the tick stays");
        return 0;
    }
    /* A save holds at most KILN_TICK_MAX (exact in a LuaJIT number): a later tick would be
     * written to a save no load accepts. */
    if (world->tick >= KILN_TICK_MAX) {
        kl_fail(world, KILN_ERR_LIMIT, "kiln_tick_advance: the world tick is at its last, 2^53 - 1");
        return 0;
    }
    ++world->tick;
    rebase_when_due(world);
    return world->tick;
}

void kiln_world_stats_get(const kiln_world *world, kiln_world_stats *dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    dest->entities = world->alive;
    dest->entity_slots = kl_slot_count(world);
    dest->archetypes = world->archetype_count;
    dest->components = kl_registry_count(&world->components);
    dest->queries = world->query_count;
    dest->bytes = atomic_load_explicit(&((kiln_world *)world)->alloc.bytes, memory_order_relaxed);
    dest->allocations =
        atomic_load_explicit(&((kiln_world *)world)->alloc.calls, memory_order_relaxed);
    dest->changes = world->structure_version;
}

static int64_t allocated(const kiln_world *world) {
    return atomic_load_explicit(&((kiln_world *)world)->alloc.bytes, memory_order_relaxed);
}

int64_t kiln_world_trim(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_world_trim", KL_STRUCTURAL, 0, 0);
    if (kl_deferred(world) || atomic_load_explicit(&world->iterating, memory_order_relaxed) > 0) return 0;
    int64_t before = allocated(world);
    kl_archetypes_trim(world);
    kl_events_trim(world);
    world->trim_mark = allocated(world);
    return before - world->trim_mark;
}

/* A world that grew by half again (and 16 MiB) since its last trim trims now: room a burst of
 * rows took and gave back returns within a frame of the world growing elsewhere, at the cost
 * of one pass over the archetypes per such growth. */
void kl_world_trim_due(kiln_world *world) {
#ifdef KL_TRIM_STRESS /* test builds: every schedule run trims, so every suite meets trims */
    (void)kiln_world_trim(world);
#else
    int64_t mark = world->trim_mark;
    if (allocated(world) > mark + mark / 2 + ((int64_t)16 << 20)) (void)kiln_world_trim(world);
#endif
}

void kl_refuse_dest(const kiln_world *world, const char *call, int64_t capacity) {
    /* the error buffer is the calling thread's, written as by any const call that fails */
    kl_fail((kiln_world *)world, KILN_ERR_INVALID_ARGUMENT, "%s: dest is NULL with capacity %lld; nothing was written",
            call, (long long)capacity);
}

int64_t kiln_world_entities(const kiln_world *world, kiln_entity *dest, int64_t capacity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (KL_UNLIKELY(dest == NULL && capacity > 0)) {
        kl_refuse_dest(world, "kiln_world_entities", capacity);
        return -1;
    }
    int64_t n = 0;
    for (int32_t a = 0; a < world->archetype_count; a++) {
        const kl_archetype *arch = world->archetypes[a];
        int32_t rows = kl_archetype_rows(world, arch); /* a move's hooks: the entity once */
        for (int32_t r = 0; r < rows; r++, n++)
            if (n < capacity) dest[n] = arch->entities[r];
    }
    return n;
}

int64_t kiln_entity_count(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return world->alive;
}

char *kiln_entity_format(kiln_entity entity, char *buf, size_t size) {
    if (buf && size && entity >> (KILN_ENTITY_INDEX_BITS + KILN_ENTITY_GENERATION_BITS))
        snprintf(buf, size, "%llu", (unsigned long long)entity); /* no handle: "IvG" would name another */
    else if (buf && size)
        snprintf(buf, size, "%uv%u", (unsigned)kiln_entity_index(entity), (unsigned)kiln_entity_generation(entity));
    return buf;
}
