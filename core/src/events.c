/* events.c: double-buffered event queues, one per event type. Invariant: buffer
 * [1 - current] holds the previous frame's events and [current] this frame's, each in emit
 * order; an update empties the previous one and swaps. */
#include "events.h"

#include <string.h>

#include "commands.h"
#include "component.h"
#include "defer.h"
#include "guard.h"

typedef struct kl_event_buffer {
    uint8_t *data;    /* 16-byte aligned, inside block */
    void *block;
    size_t block_size;
    int64_t count, cap;
} kl_event_buffer;

typedef struct kl_event_queue {
    kl_event_buffer buf[2];
    int32_t current;
} kl_event_queue;

/* The queue of a registered type. Queues change only on the main thread outside stages (emits
 * land through command buffers there), so a worker reading a replaced table's copy reads the
 * same values as the newest table holds. */
static kl_event_queue *queue(const kiln_world *world, uint32_t type) {
    kl_table *t = atomic_load_explicit(&((kiln_world *)world)->events, memory_order_acquire);
    return (kl_event_queue *)kl_table_entries(t) + (type - 1);
}

kiln_result kiln_event_register(kiln_world *world, const kiln_component_desc *desc,
                                kiln_event_type *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const char *call = "kiln_event_register";
    kl_guard_check(world, call, KL_REGISTER, 0, 0);
    if (kl_off_stage_thread(world)) return kl_fail_register_off_stage(world, call);
    if (desc && (desc->destroy || desc->move || desc->check))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: %s: events are plain data and take no hooks", call,
                       desc->name ? desc->name : "(null)");
    /* Room for the new type's queue first (zeroed, published before the type is counted, so
     * a worker that sees the type sees its queue), so a failure leaves nothing behind. */
    kl_table *events = atomic_load_explicit(&world->events, memory_order_relaxed);
    kl_table *grown = kl_table_reserve(&world->alloc, events,
                                       kl_registry_count(&world->event_types) + 1,
                                       sizeof(kl_event_queue), 8);
    if (!grown) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
    if (grown != events) atomic_store_explicit(&world->events, grown, memory_order_release);
    uint32_t id = 0;
    kiln_result r = kl_registry_add(world, &world->event_types, desc, &id, call);
    if (r == KILN_OK && dest) dest->id = id;
    return r;
}

kiln_event_type kiln_event_lookup(const kiln_world *world, const char *name) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return (kiln_event_type){kl_registry_lookup(world, &world->event_types, name)};
}

bool kiln_event_info_get(const kiln_world *world, kiln_event_type type, kiln_component_info *dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    const kl_component *c = kl_registry_get(&world->event_types, type.id);
    if (!c) return false;
    kl_component_describe(c, dest);
    return true;
}

kiln_result kl_event_push(kiln_world *world, uint32_t type, const void *value, const char *call) {
    const kl_component *c = kl_registry_get(&world->event_types, type);
    kl_event_queue *q = queue(world, type);
    kl_event_buffer *b = &q->buf[q->current];
    size_t stride = c->stride ? c->stride : 1;
    /* The old block is freed only after the value is copied: value may be an event of this
     * very buffer (kiln_event_get of this frame's events, emitted again). */
    void *old_block = NULL;
    size_t old_size = 0;
    if (b->count == b->cap) {
        int64_t ncap = b->cap ? b->cap * 2 : 16;
        size_t bytes = kl_mul(stride, (size_t)ncap);
        size_t size = bytes > SIZE_MAX - 15 ? SIZE_MAX : bytes + 15;
        void *block = kl_alloc(&world->alloc, size);
        if (!block) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %s", call, c->names);
        uint8_t *data = (uint8_t *)(((uintptr_t)block + 15) & ~(uintptr_t)15);
        if (b->count) memcpy(data, b->data, stride * (size_t)b->count);
        old_block = b->block;
        old_size = b->block_size;
        b->block = block;
        b->block_size = size;
        b->data = data;
        b->cap = ncap;
    }
    uint8_t *dst = b->data + stride * (size_t)b->count;
    if (!value) value = kl_component_initial(c);
    if (c->size) {
        if (value) memcpy(dst, value, c->size);
        else memset(dst, 0, c->size);
    }
    b->count++;
    kl_free(&world->alloc, old_block, old_size);
    return KILN_OK;
}

kiln_result kiln_event_emit(kiln_world *world, kiln_event_type type, const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_event_emit", KL_EMIT, type.id, 0);
    if (!kl_registry_get(&world->event_types, type.id))
        return kl_fail(world, KILN_ERR_UNKNOWN_EVENT, "kiln_event_emit: event type #%u is not registered",
                       (unsigned)type.id);
    if (kl_off_stage_thread(world)) return kl_fail_off_stage(world, "kiln_event_emit", 0, type.id, true);
    if (world->defer_target) {
        kiln_result r = kiln_commands_emit(world->defer_target, type, value);
        if (r != KILN_OK) kl_fail(world, r, "%s", kiln_commands_error(world->defer_target));
        return r;
    }
    return kl_event_push(world, type.id, value, "kiln_event_emit");
}

int64_t kiln_event_count(const kiln_world *world, kiln_event_type type) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (!kl_registry_get(&world->event_types, type.id)) return 0;
    const kl_event_queue *q = queue(world, type.id);
    return q->buf[0].count + q->buf[1].count;
}

const void *kiln_event_get(const kiln_world *world, kiln_event_type type, int64_t i) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const kl_component *c = kl_registry_get(&world->event_types, type.id);
    if (!c || i < 0) return NULL;
    const kl_event_queue *q = queue(world, type.id);
    const kl_event_buffer *prev = &q->buf[1 - q->current], *cur = &q->buf[q->current];
    size_t stride = c->stride ? c->stride : 1;
    if (i < prev->count) return prev->data + stride * (size_t)i;
    i -= prev->count;
    if (i < cur->count) return cur->data + stride * (size_t)i;
    return NULL;
}

void kiln_events_update(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (atomic_load_explicit(&world->in_stage, memory_order_relaxed)) { /* workers may read events */
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_events_update: called from a running system that is "
                "not exclusive (systems beside it read events); nothing was changed");
        return;
    }
    int32_t types = kl_registry_count(&world->event_types);
    for (int32_t t = 1; t <= types; t++) {
        kl_event_queue *q = queue(world, (uint32_t)t);
        q->current = 1 - q->current;
        q->buf[q->current].count = 0;
    }
}

void kl_events_trim(kiln_world *world) {
    int32_t types = kl_registry_count(&world->event_types);
    for (int32_t t = 1; t <= types; t++)
        for (int b = 0; b < 2; b++) {
            kl_event_buffer *buf = &queue(world, (uint32_t)t)->buf[b];
            if (buf->count > 0 || !buf->block) continue;
            kl_free(&world->alloc, buf->block, buf->block_size);
            *buf = (kl_event_buffer){0};
        }
}

void kl_events_free(kiln_world *world) {
    int32_t types = kl_registry_count(&world->event_types);
    for (int32_t t = 1; t <= types; t++)
        for (int b = 0; b < 2; b++) {
            kl_event_buffer *buf = &queue(world, (uint32_t)t)->buf[b];
            kl_free(&world->alloc, buf->block, buf->block_size);
        }
    kl_table_free(&world->alloc, atomic_load_explicit(&world->events, memory_order_relaxed),
                  sizeof(kl_event_queue));
    atomic_store_explicit(&world->events, NULL, memory_order_relaxed);
}
