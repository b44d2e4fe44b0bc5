/* commands.c: command buffers. Invariant: commands [head, count) are pending and each owns
 * its value (in blocks that never move, so values with hooks are never relocated bytewise;
 * small hook-free ones in the command); commands before head were applied and own nothing. */
#include "commands.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "access.h"
#include "archetype.h"
#include "component.h"
#include "entity.h"
#include "events.h"

#define KL_BLOCK_SIZE (64 * 1024)
#define KL_MAX_COALESCE 64
#define KL_RUN_CHUNK 256 /* spawns a batch takes at most (see apply_spawn_run) */

/* A command: 32 bytes. A value of at most KL_INLINE bytes of a component with no hooks is
 * held in the command itself (such a value may move bytewise with the array); any other in
 * the value blocks. */
#define KL_INLINE 16

typedef struct kl_cmd {
    uint8_t op;
    uint8_t has_value;
    uint8_t hooks_known; /* the component was registered when recorded: hooks apply */
    uint8_t inline_size; /* the value's size when held in bytes, else 0 */
    kiln_component component;
    kiln_entity target;
    union {
        struct {
            void *value;   /* in the value blocks */
            uint32_t size; /* the value's size (recorded even when no value is stored) */
        } out;
        unsigned char bytes[KL_INLINE];
    } v;
} kl_cmd;

static inline void *cmd_value(kl_cmd *c) { return c->inline_size ? c->v.bytes : c->v.out.value; }
static inline uint32_t cmd_size(const kl_cmd *c) {
    return c->inline_size ? c->inline_size : c->v.out.size;
}

/* Whether a value of comp (size bytes) is held in its command. */
static inline bool inline_value(kl_op op, const kl_component *comp, size_t size) {
    return (op == KL_OP_ADD || op == KL_OP_SET) && comp && size <= KL_INLINE && !comp->move &&
           !comp->destroy && !comp->check;
}

typedef struct kl_block {
    struct kl_block *next;
    size_t size; /* bytes of data */
    size_t used;
    size_t alloc_size;
} kl_block;

struct kiln_commands {
    kiln_world *world;      /* NULL once the world was destroyed (the buffer is detached) */
    kiln_commands *next, *prev; /* the world's list of user buffers */
    bool listed;            /* in that list (internal queues are not) */
    const char *call;       /* the public function applying the buffer, for messages */
    kl_allocator own_alloc; /* accounting of a buffer that may be filled on any thread */
    kl_allocator *alloc;    /* own_alloc, or the world's for its own (main-thread) queue */
    uint64_t tag;           /* the current batch's placeholder tag, 0 until it spawns */
    bool lenient;
    bool complete; /* the last apply consumed everything: the next record starts a batch */
    kl_cmd *cmds;
    int64_t cap, head, count;
    kiln_entity *placeholders; /* per placeholder index: its entity once spawned, else 0 */
    int64_t ph_cap;
    uint32_t ph_count;
    kl_block *first, *current;
    char error[KL_ERROR_SIZE];
};

static kiln_result record_fail(kiln_commands *cmd, kiln_result code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static kiln_result record_fail(kiln_commands *cmd, kiln_result code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd->error, sizeof cmd->error, fmt, ap);
    va_end(ap);
    return code;
}

kiln_commands *kl_commands_create(kiln_world *world, bool lenient, bool world_accounting) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_allocator own = {world->alloc.fn, world->alloc.ud, 0, 0};
    kl_allocator *alloc = world_accounting ? &world->alloc : &own;
    kiln_commands *cmd = kl_alloc(alloc, sizeof *cmd);
    if (!cmd) return NULL;
    memset(cmd, 0, sizeof *cmd);
    cmd->own_alloc = own;
    cmd->alloc = world_accounting ? &world->alloc : &cmd->own_alloc;
    cmd->world = world;
    cmd->lenient = lenient;
    return cmd;
}

kiln_commands *kiln_commands_create(kiln_world *world) {
    kiln_commands *cmd = kl_commands_create(world, false, false);
    if (!cmd) return NULL;
    /* Listed, so a world destroyed first can detach the buffer instead of leaving it a
     * dangling world pointer. */
    cmd->listed = true;
    cmd->next = world->buffers;
    if (world->buffers) world->buffers->prev = cmd;
    world->buffers = cmd;
    return cmd;
}

static void unlist(kiln_commands *cmd) {
    if (!cmd->listed) return;
    if (cmd->prev) cmd->prev->next = cmd->next;
    else cmd->world->buffers = cmd->next;
    if (cmd->next) cmd->next->prev = cmd->prev;
    cmd->next = cmd->prev = NULL;
    cmd->listed = false;
}

/* Destroys the values of pending commands whose hooks were known when recorded, and gives
 * back the entity slots that pending materialisations reserved. */
static void destroy_pending(kiln_commands *cmd) {
    if (!cmd->world) return; /* detached: nothing is pending any more */
    for (int64_t i = cmd->head; i < cmd->count; i++) {
        kl_cmd *c = &cmd->cmds[i];
        if (c->op == KL_OP_MATERIALIZE && kl_record_reserved(cmd->world, c->target))
            kl_entity_release(cmd->world, c->target);
        if (!c->has_value || !c->hooks_known) continue;
        const kl_component *comp = kl_component_get(cmd->world, c->component);
        if (comp && comp->destroy) comp->destroy(cmd_value(c), 1, comp->hook_ctx);
    }
}

static void reset_values(kiln_commands *cmd) {
    for (kl_block *b = cmd->first; b; b = b->next) b->used = 0;
    cmd->current = cmd->first;
}

static void reset_batch(kiln_commands *cmd) {
    cmd->ph_count = 0;
    cmd->tag = 0;
    cmd->complete = false;
}

void kiln_commands_clear(kiln_commands *cmd) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    destroy_pending(cmd);
    cmd->head = cmd->count = 0;
    reset_values(cmd);
    reset_batch(cmd);
    cmd->error[0] = '\0';
}

/* Frees what the buffer holds (not the buffer itself). */
static void free_contents(kiln_commands *cmd, kl_allocator *alloc) {
    for (kl_block *b = cmd->first, *next; b; b = next) {
        next = b->next;
        kl_free(alloc, b, b->alloc_size);
    }
    kl_free(alloc, cmd->cmds, sizeof(kl_cmd) * (size_t)cmd->cap);
    kl_free(alloc, cmd->placeholders, sizeof(kiln_entity) * (size_t)cmd->ph_cap);
    cmd->first = cmd->current = NULL;
    cmd->cmds = NULL;
    cmd->placeholders = NULL;
    cmd->cap = cmd->head = cmd->count = cmd->ph_cap = 0;
    cmd->ph_count = 0;
}

void kl_commands_detach(kiln_commands *cmd) {
    destroy_pending(cmd);
    unlist(cmd);
    free_contents(cmd, cmd->alloc); /* listed buffers keep their own accounting */
    cmd->world = NULL;
}

void kiln_commands_destroy(kiln_commands *cmd) {
    if (cmd == NULL) return;
    destroy_pending(cmd);
    if (cmd->world) unlist(cmd);
    kl_allocator own = cmd->own_alloc;
    kl_allocator *alloc = cmd->alloc == &cmd->own_alloc ? &own : cmd->alloc;
    free_contents(cmd, alloc);
    kl_free(alloc, cmd, sizeof *cmd);
}

/* Recording into a buffer whose world was destroyed fails (the registry is gone). */
static kiln_result check_world(kiln_commands *cmd, const char *call);

int64_t kiln_commands_count(const kiln_commands *cmd) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    return cmd->count - cmd->head;
}

const char *kiln_commands_error(const kiln_commands *cmd) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    return cmd->error;
}

/* The start of the value blocks' data (16-byte aligned). */
static inline uint8_t *block_data(kl_block *b) {
    return (uint8_t *)(((uintptr_t)(b + 1) + 15) & ~(uintptr_t)15);
}

/* 16-byte-aligned room for size bytes in the value blocks, or NULL when out of memory. */
static void *value_room(kiln_commands *cmd, size_t size) {
    size_t need = (size + 15) & ~(size_t)15;
    for (kl_block *b = cmd->current; b; b = b->next) {
        if (b->size - b->used >= need) {
            cmd->current = b;
            void *p = block_data(b) + b->used;
            b->used += need;
            return p;
        }
        if (b->next == NULL) break;
    }
    size_t data_size = need > KL_BLOCK_SIZE ? need : KL_BLOCK_SIZE;
    size_t alloc_size = sizeof(kl_block) + 15 + data_size;
    kl_block *b = kl_alloc(cmd->alloc, alloc_size);
    if (!b) return NULL;
    b->next = NULL;
    b->size = data_size;
    b->used = need;
    b->alloc_size = alloc_size;
    /* Append at the end of the chain so blocks are reused in order after a reset. */
    kl_block **link = &cmd->first;
    while (*link) link = &(*link)->next;
    *link = b;
    cmd->current = b;
    return block_data(b);
}

static const char *op_name(uint8_t op) {
    switch (op) {
    case KL_OP_SPAWN: return "spawn";
    case KL_OP_MATERIALIZE: return "spawn";
    case KL_OP_DESPAWN: return "despawn";
    case KL_OP_ADD: return "add";
    case KL_OP_SET: return "set";
    case KL_OP_REMOVE: return "remove";
    case KL_OP_EMIT: return "emit";
    }
    return "?";
}

/* The usual record in one pass, inline in the recording calls: the command array and the
 * current value block have room, the batch goes on, and a value of at most 64 bytes is copied
 * bytewise. False, with nothing done, otherwise; push_slow then takes the general path. */
static inline __attribute__((always_inline)) bool push_fast(kiln_commands *cmd, kl_op op,
                                                            kiln_entity target,
                                                            kiln_component component,
                                                            const void *value, size_t size,
                                                            bool move, const kl_component *comp) {
    if (cmd->count == cmd->cap || cmd->complete || (cmd->head == cmd->count && cmd->head != 0))
        return false;
    void *room = NULL;
    if (size > 0 && value && inline_value(op, comp, size)) {
        kl_cmd *c = &cmd->cmds[cmd->count++];
        *c = (kl_cmd){.op = (uint8_t)op, .has_value = 1, .hooks_known = 1,
                      .inline_size = (uint8_t)size, .component = component, .target = target};
        kl_copy_small(c->v.bytes, value, size);
        return true;
    }
    if ((op == KL_OP_ADD || op == KL_OP_SET || op == KL_OP_EMIT) && size > 0 && value) {
        kl_block *b = cmd->current;
        size_t need = (size + 15) & ~(size_t)15;
        if ((move && comp && comp->move) || !b || b->size - b->used < need || size > 64)
            return false;
        room = block_data(b) + b->used;
        b->used += need;
        kl_copy_small(room, value, size);
    }
    cmd->cmds[cmd->count++] = (kl_cmd){.op = (uint8_t)op, .has_value = room != NULL,
                                       .hooks_known = comp != NULL, .component = component,
                                       .target = target, .v.out = {room, (uint32_t)size}};
    return true;
}

/* Appends a command; the value (size bytes, or none) is copied or moved in. */
__attribute__((noinline)) static kiln_result push_slow(kiln_commands *cmd, const char *call,
                                                       kl_op op, kiln_entity target,
                                                       kiln_component component,
                                                       const void *value, size_t size, bool move,
                                                       const kl_component *comp) {
    if (cmd->head == cmd->count && cmd->head != 0) {
        cmd->head = cmd->count = 0;
        reset_values(cmd);
    }
    if (cmd->count == cmd->cap &&
        !kl_grow(cmd->alloc, (void **)&cmd->cmds, &cmd->cap, cmd->count + 1, sizeof(kl_cmd), 64))
        return record_fail(cmd, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory recording a command",
                           call);
    kl_cmd *c = &cmd->cmds[cmd->count];
    *c = (kl_cmd){.op = (uint8_t)op, .hooks_known = comp != NULL, .component = component,
                  .target = target, .v.out.size = (uint32_t)size};
    /* No value: none is stored, and the apply gives the defaults the world has then. */
    if (size > 0 && value && inline_value(op, comp, size)) {
        kl_copy_value(c->v.bytes, value, size);
        c->inline_size = (uint8_t)size;
        c->has_value = 1;
    } else if ((op == KL_OP_ADD || op == KL_OP_SET || op == KL_OP_EMIT) && size > 0 && value) {
        void *room = value_room(cmd, size);
        if (!room)
            return record_fail(cmd, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for a value", call);
        if (move && comp && comp->move) comp->move(room, (void *)(uintptr_t)value, 1, comp->hook_ctx);
        else kl_copy_value(room, value, size);
        c->v.out.value = room;
        c->has_value = 1;
    }
    /* Only a record that succeeds starts a new batch: a failed one leaves the last batch's
     * placeholders resolving. */
    if (cmd->complete) reset_batch(cmd);
    cmd->count++;
    return KILN_OK;
}

static inline __attribute__((always_inline)) kiln_result push(kiln_commands *cmd, const char *call,
                                                             kl_op op, kiln_entity target,
                                                             kiln_component component,
                                                             const void *value, size_t size,
                                                             bool move, const kl_component *comp) {
    if (KL_LIKELY(push_fast(cmd, op, target, component, value, size, move, comp))) return KILN_OK;
    return push_slow(cmd, call, op, target, component, value, size, move, comp);
}

kiln_result kl_commands_record(kiln_commands *cmd, const char *call, kl_op op, kiln_entity target,
                               kiln_component component, const void *value, bool move) {
    const kl_component *comp = component ? kl_component_get(cmd->world, component) : NULL;
    return push(cmd, call, op, target, component, value, comp ? comp->size : 0, move, comp);
}

static kiln_result check_world(kiln_commands *cmd, const char *call) {
    if (cmd->world) return KILN_OK;
    return record_fail(cmd, KILN_ERR_INVALID_ARGUMENT, "%s: the buffer's world was destroyed", call);
}

/* Placeholders: bit 62, a batch tag in bits 24..61 and the spawn's index in the batch in
 * bits 0..23. A batch takes its tag from the world's counter when it first spawns, so no
 * two batches of any buffers of one world ever share a tag: a placeholder can only name a
 * spawn of the batch that made it. When the tags run out, spawning fails instead. */
#define KL_PH_INDEX_BITS 24
#define KL_PH_INDEX_MASK ((UINT64_C(1) << KL_PH_INDEX_BITS) - 1)
#define KL_PH_TAG_LIMIT (UINT64_C(1) << (62 - KL_PH_INDEX_BITS))

/* Whether e is a placeholder of the batch cmd holds now (applied or not). */
static bool is_current(const kiln_commands *cmd, kiln_entity e) {
    if ((e & ~(KILN_PLACEHOLDER_BIT | (KILN_PLACEHOLDER_BIT - 1))) != 0) return false;
    uint64_t tag = (e & (KILN_PLACEHOLDER_BIT - 1)) >> KL_PH_INDEX_BITS;
    return cmd->tag != 0 && tag == cmd->tag && (e & KL_PH_INDEX_MASK) < cmd->ph_count;
}

/* Checks an entity argument of a recording call: a placeholder must be from this batch. */
__attribute__((noinline)) static kiln_result check_target_slow(kiln_commands *cmd, const char *call,
                                                               kiln_entity e) {
    kiln_result r = check_world(cmd, call);
    if (r != KILN_OK) return r;
    if (!kiln_is_placeholder(e)) {
        if (e == KILN_NULL_ENTITY)
            return record_fail(cmd, KILN_ERR_DEAD_ENTITY, "%s: entity is null", call);
        return KILN_OK; /* liveness is checked when applied */
    }
    if (cmd->complete || !is_current(cmd, e))
        return record_fail(cmd, KILN_ERR_INVALID_ARGUMENT,
                           "%s: placeholder %u is not from this buffer's current batch", call,
                           (unsigned)(e & KL_PH_INDEX_MASK));
    return KILN_OK;
}

/* check_target_slow's answer for the usual arguments, inline: a live world and a real
 * entity or a placeholder of the current batch; the slow path makes every error. */
static inline bool target_fine(const kiln_commands *cmd, kiln_entity e) {
    return KL_LIKELY(cmd->world != NULL) &&
           (kiln_is_placeholder(e) ? !cmd->complete && is_current(cmd, e) : e != KILN_NULL_ENTITY);
}

static inline kiln_result check_target(kiln_commands *cmd, const char *call, kiln_entity e) {
    if (target_fine(cmd, e)) return KILN_OK;
    return check_target_slow(cmd, call, e);
}

/* A spawn into a batch that has its tag already, with room for the placeholder and the
 * command, in one pass: true when recorded; false, with nothing done, where spawn_slow must
 * decide (and report any error). */
static inline __attribute__((always_inline)) bool spawn_fast(kiln_commands *cmd, kiln_entity *dest) {
    uint32_t index = cmd->ph_count;
    if (cmd->world == NULL || cmd->complete || cmd->tag == 0 || index >= cmd->ph_cap ||
        index > KL_PH_INDEX_MASK)
        return false;
    kiln_entity ph = KILN_PLACEHOLDER_BIT | (cmd->tag << KL_PH_INDEX_BITS) | index;
    if (!push_fast(cmd, KL_OP_SPAWN, ph, 0, NULL, 0, false, NULL)) return false;
    cmd->placeholders[cmd->ph_count++] = KILN_NULL_ENTITY;
    *dest = ph;
    return true;
}

__attribute__((noinline)) static kiln_result spawn_slow(kiln_commands *cmd, kiln_entity *dest);

kiln_result kiln_commands_spawn(kiln_commands *cmd, kiln_entity *dest) {
    KILN_ASSERT(cmd != NULL && dest != NULL, "cmd and dest are required");
    if (KL_LIKELY(spawn_fast(cmd, dest))) return KILN_OK;
    return spawn_slow(cmd, dest);
}

static kiln_result spawn_slow(kiln_commands *cmd, kiln_entity *dest) {
    const char *call = "kiln_commands_spawn";
    kiln_result r = check_world(cmd, call);
    if (r != KILN_OK) return r;
    /* The placeholder of the batch this spawn lands in: a new batch after a complete apply,
     * which push starts only once the record succeeded (a failed record leaves the last
     * batch's placeholders resolving). A batch takes its tag at its first spawn. */
    bool fresh = cmd->complete;
    uint32_t index = fresh ? 0 : cmd->ph_count;
    if (index >= KL_PH_INDEX_MASK + 1)
        return record_fail(cmd, KILN_ERR_LIMIT,
                           "%s: too many placeholders in one batch (at most %llu)", call,
                           (unsigned long long)(KL_PH_INDEX_MASK + 1));
    uint64_t tag = fresh ? 0 : cmd->tag;
    if (tag == 0) {
        tag = atomic_fetch_add_explicit(&cmd->world->placeholder_tags, 1, memory_order_relaxed) + 1;
        if (tag >= KL_PH_TAG_LIMIT)
            return record_fail(cmd, KILN_ERR_LIMIT,
                               "%s: the world's placeholder tags are used up (2^%d batches)",
                               call, 62 - KL_PH_INDEX_BITS);
    }
    if (index >= cmd->ph_cap &&
        !kl_grow(cmd->alloc, (void **)&cmd->placeholders, &cmd->ph_cap, (int64_t)index + 1,
                 sizeof(kiln_entity), 64))
        return record_fail(cmd, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for a placeholder", call);
    kiln_entity ph = KILN_PLACEHOLDER_BIT | (tag << KL_PH_INDEX_BITS) | index;
    r = push(cmd, call, KL_OP_SPAWN, ph, 0, NULL, 0, false, NULL);
    if (r != KILN_OK) return r;
    cmd->tag = tag;
    cmd->placeholders[cmd->ph_count++] = KILN_NULL_ENTITY;
    *dest = ph;
    return KILN_OK;
}

kiln_result kiln_commands_despawn(kiln_commands *cmd, kiln_entity entity) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    kiln_result r = check_target(cmd, "kiln_commands_despawn", entity);
    if (r != KILN_OK) return r;
    return push(cmd, "kiln_commands_despawn", KL_OP_DESPAWN, entity, 0, NULL, 0, false, NULL);
}

/* An add or set of a registered component in one pass (see push_fast): true when recorded;
 * false, with nothing done, where record_value must decide (and report any error). Its only
 * call is record_value's, a tail call, so the usual record sets up no frame. */
static inline __attribute__((always_inline)) bool record_fast(kiln_commands *cmd, kl_op op,
                                                              kiln_entity e, kiln_component c,
                                                              const void *value) {
    if (!target_fine(cmd, e)) return false;
    const kl_component *comp = kl_component_get(cmd->world, c);
    return comp && push_fast(cmd, op, e, c, value, comp->size, true, comp);
}

__attribute__((noinline)) static kiln_result record_value(kiln_commands *cmd, const char *call,
                                                          kl_op op, kiln_entity e,
                                kiln_component c, void *value, size_t size, bool sized) {
    kiln_result r = check_target(cmd, call, e);
    if (r != KILN_OK) return r;
    const kl_component *comp = kl_component_get(cmd->world, c);
    if (!comp && !sized)
        return record_fail(cmd, KILN_ERR_UNKNOWN_COMPONENT,
                           "%s: component #%u is not registered (record it with its size "
                           "through kiln_commands_add_sized)",
                           call, (unsigned)c);
    if (c == KILN_NO_COMPONENT)
        return record_fail(cmd, KILN_ERR_UNKNOWN_COMPONENT, "%s: component is 0", call);
    if (comp && sized && comp->size != size)
        return record_fail(cmd, KILN_ERR_INVALID_ARGUMENT, "%s: %s is %u bytes, not %zu", call,
                           comp->names, (unsigned)comp->size, size);
    return push(cmd, call, op, e, c, value, comp ? comp->size : size, true, comp);
}

kiln_result kiln_commands_add(kiln_commands *cmd, kiln_entity entity, kiln_component component,
                              void *value) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    if (KL_LIKELY(record_fast(cmd, KL_OP_ADD, entity, component, value))) return KILN_OK;
    return record_value(cmd, "kiln_commands_add", KL_OP_ADD, entity, component, value, 0, false);
}

kiln_result kiln_commands_add_sized(kiln_commands *cmd, kiln_entity entity,
                                    kiln_component component, void *value, size_t size) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    if (size > UINT32_MAX / 2)
        return record_fail(cmd, KILN_ERR_INVALID_ARGUMENT, "kiln_commands_add_sized: size %zu too large",
                           size);
    return record_value(cmd, "kiln_commands_add_sized", KL_OP_ADD, entity, component, value, size, true);
}

kiln_result kiln_commands_set(kiln_commands *cmd, kiln_entity entity, kiln_component component,
                              void *value) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    if (KL_LIKELY(record_fast(cmd, KL_OP_SET, entity, component, value))) return KILN_OK;
    return record_value(cmd, "kiln_commands_set", KL_OP_SET, entity, component, value, 0, false);
}

kiln_result kiln_commands_remove(kiln_commands *cmd, kiln_entity entity, kiln_component component) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    const char *call = "kiln_commands_remove";
    kiln_result r = check_target(cmd, call, entity);
    if (r != KILN_OK) return r;
    if (!kl_component_get(cmd->world, component))
        return record_fail(cmd, KILN_ERR_UNKNOWN_COMPONENT, "%s: component #%u is not registered",
                           call, (unsigned)component);
    return push(cmd, call, KL_OP_REMOVE, entity, component, NULL, 0, false, NULL);
}

void kl_commands_truncate(kiln_commands *cmd, int64_t keep) {
    if (cmd->head + keep < cmd->count) cmd->count = cmd->head + keep;
}

void *kl_commands_value_at(kiln_commands *cmd, int64_t index) {
    if (index < 0 || cmd->head + index >= cmd->count) return NULL;
    kl_cmd *c = &cmd->cmds[cmd->head + index];
    return c->has_value ? cmd_value(c) : NULL;
}

void kl_commands_unreserve_since(kiln_commands *cmd, int64_t keep) {
    /* Latest first, so every slot goes back exactly as it was taken. */
    for (int64_t i = cmd->count - 1; i >= cmd->head + keep; i--)
        if (cmd->cmds[i].op == KL_OP_MATERIALIZE) kl_entity_untake(cmd->world, cmd->cmds[i].target);
    kl_commands_truncate(cmd, keep);
}

kiln_result kiln_commands_emit(kiln_commands *cmd, kiln_event_type type, const void *value) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    const char *call = "kiln_commands_emit";
    kiln_result r = check_world(cmd, call);
    if (r != KILN_OK) return r;
    const kl_component *ev = kl_registry_get(&cmd->world->event_types, type.id);
    if (!ev)
        return record_fail(cmd, KILN_ERR_UNKNOWN_EVENT, "%s: event type #%u is not registered", call,
                           (unsigned)type.id);
    /* Events carry no hooks, so the value is simply copied. */
    return push(cmd, call, KL_OP_EMIT, KILN_NULL_ENTITY, type.id, value, ev->size, false, NULL);
}

kiln_entity kiln_commands_resolve(const kiln_commands *cmd, kiln_entity placeholder) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    if (!kiln_is_placeholder(placeholder)) return KILN_NULL_ENTITY;
    if (!is_current(cmd, placeholder)) return KILN_NULL_ENTITY;
    return cmd->placeholders[placeholder & KL_PH_INDEX_MASK];
}

/* ---- apply ---------------------------------------------------------------------------- */

static kiln_result apply_fail(kiln_commands *cmd, int64_t index, const kl_cmd *c,
                              kiln_entity e, kiln_result code, const char *why) {
    char eb[24], cb[32];
    const char *cname = c->component ? kl_component_name(cmd->world, c->component, cb, sizeof cb) : "";
    return kl_fail(cmd->world, code, "%s: command %lld (%s%s%s) on entity %s: %s", cmd->call,
                   (long long)(index - cmd->head + 1), op_name(c->op), c->component ? " " : "", cname,
                   kiln_entity_format(e, eb, sizeof eb), why);
}

/* The entity a command targets now (placeholders resolved), or null. */
static kiln_entity target_of(const kiln_commands *cmd, const kl_cmd *c) {
    if (!kiln_is_placeholder(c->target)) return c->target;
    return cmd->placeholders[c->target & KL_PH_INDEX_MASK];
}

/* Destroys the value of a command that is dropped rather than applied. */
static void drop_value(kiln_commands *cmd, kl_cmd *c) {
    if (!c->has_value || !c->hooks_known) return;
    const kl_component *comp = kl_component_get(cmd->world, c->component);
    if (comp && comp->destroy) comp->destroy(cmd_value(c), 1, comp->hook_ctx);
    c->has_value = 0;
}

/* Spawns (or materialises) the entity of the command at i together with the adds that
 * directly follow it for the same target, in one archetype move. Returns how many commands
 * it consumed, or 0 with *result set on failure. */
static int64_t apply_spawn(kiln_commands *cmd, int64_t i, kiln_result *result) {
    kl_cmd *c = &cmd->cmds[i];
    kiln_component comps[KL_MAX_COALESCE];
    void *values[KL_MAX_COALESCE];
    int32_t n = 0;
    for (int64_t j = i + 1; j < cmd->count && n < KL_MAX_COALESCE; j++) {
        kl_cmd *a = &cmd->cmds[j];
        if (a->op != KL_OP_ADD || a->target != c->target) break;
        const kl_component *comp = kl_component_get(cmd->world, a->component);
        if (!comp || comp->size != cmd_size(a)) break;
        /* A value the component refuses is left to apply_one, which reports or drops it. */
        char why[2];
        if (comp->check && comp->check(cmd->world, c->op == KL_OP_MATERIALIZE ? c->target : KILN_NULL_ENTITY,
                                       a->has_value ? cmd_value(a) : comp->defaults, comp->hook_ctx,
                                       why, sizeof why) != KILN_OK)
            break;
        bool repeat = false;
        for (int32_t k = 0; k < n; k++) repeat |= comps[k] == a->component;
        if (repeat) break;
        comps[n] = a->component;
        values[n] = a->has_value ? cmd_value(a) : NULL;
        n++;
    }
    kiln_entity reserved = c->op == KL_OP_MATERIALIZE ? c->target : KILN_NULL_ENTITY;
    kiln_entity e;
    *result = kl_spawn_values(cmd->world, cmd->call, comps, values, n, true, reserved, &e);
    if (*result != KILN_OK) return 0;
    if (c->op == KL_OP_SPAWN) cmd->placeholders[c->target & KL_PH_INDEX_MASK] = e;
    for (int32_t k = 0; k < n; k++) cmd->cmds[i + 1 + k].has_value = 0;
    return 1 + n;
}

/* Whether the commands at i are a spawn followed by exactly the adds of the spawn cache's
 * list (k components, in its order, sizes as registered), and no further add to the same
 * placeholder, which apply_spawn would coalesce into the spawn or apply before the next.
 * i may be count (a run reaching the buffer's end): the bound is checked before any read. */
static inline bool cached_unit(const kl_cmd *cmds, int64_t count, int64_t i, int32_t k,
                               const kiln_component *key, const uint32_t *sizes) {
    if (i + k >= count) return false; /* k >= 1: covers i == count, one past the array */
    const kl_cmd *c = &cmds[i];
    if (c->op != KL_OP_SPAWN) return false;
    for (int32_t m = 0; m < k; m++) {
        const kl_cmd *a = &c[1 + m];
        if (a->op != KL_OP_ADD || a->target != c->target || a->component != key[m] ||
            cmd_size(a) != sizes[m])
            return false;
    }
    return i + k + 1 == count || c[k + 1].op != KL_OP_ADD || c[k + 1].target != c->target;
}

/* Applies a run of spawns from i as one batch, leaving the world as apply_spawn would one by
 * one: each spawn with its adds of the spawn cache's list, into the cached archetype when it
 * is plain (no hooks, no check: nothing can observe the order), as far as it has room and
 * slots are free without allocating; slots are taken as one by one (free list first, then
 * fresh ones), rows, ticks and versions likewise. Allocates nothing and cannot fail, so a
 * failure happens where the one-by-one path fails: apply_one goes on where the run stops.
 * Applied commands own nothing (see the invariant), so their values are not marked.
 * Returns the commands consumed. */
static int64_t apply_spawn_run(kiln_commands *cmd, int64_t i) {
    kiln_world *world = cmd->world;
    int32_t k = world->spawn_key_count;
    kl_archetype *arch = world->spawn_arch;
    if (k <= 0 || !world->spawn_plain || arch->has_check || arch->count == arch->capacity)
        return 0;
    uint32_t sizes[KL_SPAWN_CACHE];
    for (int32_t m = 0; m < k; m++)
        sizes[m] = (uint32_t)kl_component_get(world, world->spawn_key[m])->size;
    const kl_cmd *cmds = cmd->cmds;
    int64_t count = cmd->count, unit = 1 + k, room = arch->capacity - arch->count, n = 0;
    int64_t fresh = (int64_t)world->page_count * KL_PAGE_SIZE - kl_slot_count(world);
    if (world->free_head == KL_NONE && fresh < room) room = fresh;
    if (room > KL_RUN_CHUNK) room = KL_RUN_CHUNK; /* its commands stay cached for the values */
    for (int64_t j = i; n < room && cached_unit(cmds, count, j, k, world->spawn_key, sizes); j += unit)
        n++;
    kiln_tick tick = world->tick;
    int32_t first = arch->count, row = first;
    int64_t u = 0;
    for (; u < n && world->free_head != KL_NONE; u++, row++) { /* freed slots, in order */
        kiln_entity e = kl_entity_take(world);
        kl_record_set_alive(kl_record_at(world, kiln_entity_index(e)), kiln_entity_generation(e),
                            arch->id, (uint32_t)row);
        arch->entities[row] = e;
        cmd->placeholders[cmds[i + u * unit].target & KL_PH_INDEX_MASK] = e;
    }
    uint32_t index = kl_slot_count(world);
    fresh = (int64_t)world->page_count * KL_PAGE_SIZE - index;
    if (n - u > fresh) n = u + fresh; /* the rest waits for apply_one to add a page */
    kl_record **pages = world->pages;
    for (; u < n; u++, row++, index++) { /* then fresh slots, at their first generation */
        kiln_entity e = kiln_entity_make(index, 1);
        kl_record_set_alive(&pages[index >> KL_PAGE_BITS][index & (KL_PAGE_SIZE - 1)], 1,
                            arch->id, (uint32_t)row);
        arch->entities[row] = e;
        cmd->placeholders[cmds[i + u * unit].target & KL_PH_INDEX_MASK] = e;
    }
    if (n == 0) return 0;
    atomic_store_explicit(&world->slot_count, index, memory_order_release);
    arch->count = row;
    arch->structure_tick = tick;
    world->structure_version += (uint64_t)n;
    world->alive += n;
    for (int32_t m = 0; m < k; m++) { /* then the values, column by column */
        if (world->spawn_column[m] < 0) continue; /* a tag */
        kl_column *col = &arch->columns[world->spawn_column[m]];
        size_t stride = col->stride;
        kl_cmd *a = &cmd->cmds[i + 1 + m];
        for (int32_t r = first; r < row; r++, a += unit) {
            uint8_t *dst = col->data + (size_t)r * stride;
            if (!a->has_value) kl_column_write(col, r, NULL, true, tick); /* the defaults */
            else if (stride == 8) memcpy(dst, cmd_value(a), 8);
            else if (stride == 16) memcpy(dst, cmd_value(a), 16);
            else kl_copy_value(dst, cmd_value(a), stride);
            col->ticks[r] = tick;
        }
        kl_column_touch(col, tick);
    }
    return n * unit;
}

/* Applies the command at i; returns the number of commands consumed (0 on failure). */
static inline __attribute__((always_inline)) int64_t apply_one(kiln_commands *cmd, int64_t i,
                                                               kiln_result *result) {
    kiln_world *world = cmd->world;
    kl_cmd *c = &cmd->cmds[i];
    *result = KILN_OK;
    if (c->op == KL_OP_SPAWN || c->op == KL_OP_MATERIALIZE) return apply_spawn(cmd, i, result);
    if (c->op == KL_OP_EMIT) {
        *result = kl_event_push(world, c->component, c->has_value ? cmd_value(c) : NULL, cmd->call);
        return *result == KILN_OK ? 1 : 0;
    }
    kiln_entity e = target_of(cmd, c);
    /* An add or remove along a plain edge first: it implies what the checks below ask (a
     * live entity, a registered component with no hooks and, for an add, no check hook, so
     * a lenient queue has no refusal to drop), and the size too when the component was
     * registered when recorded (sizes never change). */
    if (c->op == KL_OP_ADD && c->hooks_known && c->has_value &&
        kl_add_plain(world, e, c->component, cmd_value(c))) {
        c->has_value = 0; /* the world owns it now */
        return 1;
    }
    if (c->op == KL_OP_REMOVE && kl_remove_plain(world, e, c->component)) return 1;
    bool alive = kl_record_of(world, e) != NULL;
    if (c->op == KL_OP_DESPAWN) {
        if (alive) *result = kl_despawn_entity(world, cmd->call, e);
        return *result == KILN_OK ? 1 : 0;
    }
    if (!alive) {
        if (cmd->lenient) {
            drop_value(cmd, c);
            return 1;
        }
        *result = apply_fail(cmd, i, c, e, KILN_ERR_DEAD_ENTITY, "entity is not alive");
        return 0;
    }
    const kl_component *comp = kl_component_get(world, c->component);
    if (!comp) {
        *result = apply_fail(cmd, i, c, e, KILN_ERR_UNKNOWN_COMPONENT, "component is not registered");
        return 0;
    }
    /* A lenient queue drops a value the component's check refuses now (the world moved on
     * since the call was queued); a buffer reports it. */
    if (cmd->lenient && c->op != KL_OP_REMOVE && comp->check &&
        kl_component_check(world, comp, e, c->has_value ? cmd_value(c) : NULL, cmd->call) != KILN_OK) {
        drop_value(cmd, c);
        return 1;
    }
    if (c->op != KL_OP_REMOVE && comp->size != cmd_size(c)) {
        char why[96];
        snprintf(why, sizeof why, "recorded with %u bytes, registered with %u bytes",
                 (unsigned)cmd_size(c), (unsigned)comp->size);
        *result = apply_fail(cmd, i, c, e, KILN_ERR_INVALID_ARGUMENT, why);
        return 0;
    }
    void *value = c->has_value ? cmd_value(c) : NULL;
    switch (c->op) {
    case KL_OP_ADD:
        *result = kl_add_value(world, cmd->call, e, c->component, value, true);
        break;
    case KL_OP_SET:
        if (!kiln_has(world, e, c->component)) {
            if (cmd->lenient) {
                drop_value(cmd, c);
                return 1;
            }
            char why[96];
            snprintf(why, sizeof why, "entity has no %s", comp->names);
            *result = apply_fail(cmd, i, c, e, KILN_ERR_MISSING_COMPONENT, why);
            return 0;
        }
        *result = kl_set_value(world, cmd->call, e, c->component, value, true);
        break;
    case KL_OP_REMOVE:
        *result = kl_remove_component(world, cmd->call, e, c->component, NULL);
        break;
    default:
        break;
    }
    if (*result != KILN_OK) {
        /* The world's message ("<call>: <why>", a check hook's refusal say) names the command
         * and its entity too, as every other failure of an apply does. */
        const char *msg = kiln_world_error(world);
        size_t n = strlen(cmd->call);
        if (strncmp(msg, cmd->call, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') {
            char why[KL_ERROR_SIZE];
            snprintf(why, sizeof why, "%s", msg + n + 2);
            apply_fail(cmd, i, c, e, *result, why);
        }
        return 0;
    }
    c->has_value = 0; /* the world owns it now */
    return 1;
}

kiln_result kiln_commands_apply(kiln_commands *cmd, kiln_world *world, int64_t *applied) {
    KILN_ASSERT(cmd != NULL && world != NULL, "cmd and world are required");
    return kl_commands_apply(cmd, world, applied, "kiln_commands_apply");
}

kiln_result kl_commands_apply(kiln_commands *cmd, kiln_world *world, int64_t *applied,
                              const char *call) {
    if (applied) *applied = 0;
    if (world != cmd->world)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: the command buffer belongs to another world%s", call,
                       cmd->world ? "" : " (destroyed)");
    KILN_ASSERT(atomic_load(&world->iterating) == 0 || cmd->lenient,
                "kiln_commands_apply while a query of the world iterates");
    cmd->call = call;
    int64_t n = 0;
    kiln_result r = KILN_OK;
    while (cmd->head < cmd->count) {
        int64_t used = 0;
        if (cmd->cmds[cmd->head].op == KL_OP_SPAWN) used = apply_spawn_run(cmd, cmd->head);
        if (used == 0 && (used = apply_one(cmd, cmd->head, &r)) == 0) break;
        cmd->head += used;
        n += used;
    }
    if (applied) *applied = n;
    if (r != KILN_OK) return r;
    cmd->head = cmd->count = 0;
    reset_values(cmd);
    cmd->complete = true;
    return KILN_OK;
}
