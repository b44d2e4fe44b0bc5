/* commands.c: command buffers: creating, recording and clearing them (the layout and its
 * invariant: command_buffer.h; applying: commands_apply.c). */
#include "commands.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "archetype.h"
#include "command_buffer.h"
#include "component.h"
#include "entity.h"

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
    cmd->internal = true; /* until kiln_commands_create hands it to a user */
    cmd->hold = KL_NO_HOLD;
    return cmd;
}

void kl_commands_set_owner(kiln_commands *cmd, const char *system) { cmd->owner = system; }

kiln_commands *kiln_commands_create(kiln_world *world) {
    kiln_commands *cmd = kl_commands_create(world, false, false);
    if (!cmd) { /* a NULL says why as a failed result does */
        kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_commands_create: out of memory");
        return NULL;
    }
    cmd->internal = false;
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

/* Gives up the pending slot c: destroys its value when its hooks were known when recorded,
 * and gives back the entity slot a materialisation reserved (its generation spent). */
static void destroy_slot(kiln_commands *cmd, kl_cmd *c) {
    if (c->op == KL_OP_SPAWN) return; /* its held values have no hooks */
    if (c->op == KL_OP_MATERIALIZE && kl_record_reserved(cmd->world, c->target))
        kl_entity_release(cmd->world, c->target);
    if (!c->has_value || !c->hooks_known) return;
    const kl_component *comp = kl_component_get(cmd->world, c->component);
    if (comp && comp->destroy) comp->destroy(cmd_value(c), 1, comp->hook_ctx);
    c->has_value = 0;
}

/* Destroys the values of pending commands and gives back the slots they reserved. */
static void destroy_pending(kiln_commands *cmd) {
    if (!cmd->world) return; /* detached: nothing is pending any more */
    for (int64_t i = cmd->head; i < cmd->count; i++) destroy_slot(cmd, &cmd->cmds[i]);
}


static void reset_batch(kiln_commands *cmd) {
    cmd->ph_count = 0;
    cmd->tag = 0;
    cmd->spawned_last = KILN_NULL_ENTITY;
    cmd->complete = false;
}

void kiln_commands_clear(kiln_commands *cmd) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    /* A hook its apply runs: the apply still lands the value at head, which the clear would destroy (a value
     * destroyed twice), as kiln_commands_skip is refused in every build. */
    if (cmd->applying) {
        kl_fail(cmd->world, KILN_ERR_INVALID_ARGUMENT, "%s: the %s is being applied (called from a hook its apply "
                "runs); nothing was dropped: clear after the apply returns",
                cmd == cmd->world->deferred ? "kiln_defer_clear" : "kiln_commands_clear",
                cmd == cmd->world->deferred ? "world's queue" : "buffer");
        return;
    }
    destroy_pending(cmd);
    cmd->head = cmd->count = cmd->held = cmd->held_end = 0;
    cmd->hold = KL_NO_HOLD;
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
    cmd->cap = cmd->head = cmd->count = cmd->held = cmd->held_end = cmd->ph_cap = 0;
    cmd->hold = KL_NO_HOLD;
    cmd->ph_count = 0;
    cmd->spawned_last = KILN_NULL_ENTITY;
}

void kl_commands_detach(kiln_commands *cmd) {
    destroy_pending(cmd);
    unlist(cmd);
    free_contents(cmd, cmd->alloc); /* listed buffers keep their own accounting */
    cmd->world = NULL;
}

void kiln_commands_destroy(kiln_commands *cmd) {
    if (cmd == NULL) return;
    /* its owner would apply (or free) it again */
    KILN_ASSERT(!cmd->internal, "kiln_commands_destroy: the buffer is a system's own (ctx->commands), "
                                "which its schedule destroys");
    KILN_ASSERT(!cmd->applying, "kiln_commands_destroy: the buffer is being applied (called from a "
                                "hook its apply runs); destroy it after kiln_commands_apply returns");
    if (cmd->internal || cmd->applying) { /* release builds: refused, the buffer stays */
        if (cmd->world)
            kl_fail(cmd->world, KILN_ERR_INVALID_ARGUMENT, "kiln_commands_destroy: %s; nothing was destroyed",
                    cmd->internal ? "the buffer is a system's own (ctx->commands), which its schedule destroys"
                                  : "the buffer is being applied (called from a hook its apply runs)");
        return;
    }
    kl_commands_free(cmd);
}

void kl_commands_free(kiln_commands *cmd) {
    if (cmd == NULL) return;
    /* the apply still walks the buffer: freeing it under the apply is a use after free */
    KILN_ASSERT(!cmd->applying, "kiln_commands_destroy: the buffer is being applied (called from a "
                                "hook its apply runs); destroy it after kiln_commands_apply returns");
    destroy_pending(cmd);
    if (cmd->world) unlist(cmd);
    kl_allocator own = cmd->own_alloc;
    kl_allocator *alloc = cmd->alloc == &cmd->own_alloc ? &own : cmd->alloc;
    free_contents(cmd, alloc);
    kl_free(alloc, cmd, sizeof *cmd);
}

/* Recording into a buffer whose world was destroyed fails (the registry is gone). */
static kiln_result check_world(kiln_commands *cmd, const char *call);

kiln_result kiln_commands_skip(kiln_commands *cmd, int64_t *skipped) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    if (skipped) *skipped = 0;
    /* A hook its apply runs: the apply still walks the slot at head, and would apply past
     * the skipped one or read a freed value (a refusal in every build, not an assertion). */
    if (cmd->applying)
        return kl_fail(cmd->world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_commands_skip: the buffer is being applied (called from a hook its apply "
                       "runs); skip after kiln_commands_apply returns");
    if (!cmd->world || cmd->head == cmd->count) return KILN_OK;
    kl_cmd *c = &cmd->cmds[cmd->head];
    int64_t parts = cmd_parts(c);
    if (c->op == KL_OP_SPAWN) spawn_gone(cmd, c); /* values naming it are refused, not left raw */
    destroy_slot(cmd, c);
    cmd->held -= parts - 1;
    if (cmd->hold == cmd->head) cmd->hold = KL_NO_HOLD; /* no later add joins a skipped spawn */
    cmd->head++;
    if (skipped) *skipped = parts;
    return KILN_OK;
}

int64_t kiln_commands_count(const kiln_commands *cmd) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    return cmd->count - cmd->head + cmd->held;
}

const char *kiln_commands_error(const kiln_commands *cmd) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    return cmd->error;
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
        *c = (kl_cmd){.op = (uint8_t)op, .has_value = 1, .hooks_known = 1, /* no KL_LINKS */
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
                                       .hooks_known = known_flags(comp), .component = component,
                                       .target = target, .v.out = {room, (uint32_t)size}};
    return true;
}

/* Room for need commands. Out of a hook an apply of the buffer runs (a destroy hook recording what follows from
 * it, or a deferred call from a hook while the world's queue lands), the array is copied instead of resized: the
 * apply holds pointers into the old one, kept on cmd->retired until it ends. */
static bool grow_cmds(kiln_commands *cmd, int64_t need) {
    if (!cmd->applying) return kl_grow(cmd->alloc, (void **)&cmd->cmds, &cmd->cap, need, sizeof(kl_cmd), 64);
    if (need <= cmd->cap) return true;
    kl_retired *old = kl_alloc(cmd->alloc, sizeof *old);
    void *fresh = NULL;
    int64_t cap = 0;
    if (!old || !kl_grow(cmd->alloc, &fresh, &cap, need > 2 * cmd->cap ? need : 2 * cmd->cap, sizeof(kl_cmd), 64)) {
        kl_free(cmd->alloc, old, sizeof *old);
        return false;
    }
    if (cmd->count > 0) memcpy(fresh, cmd->cmds, sizeof(kl_cmd) * (size_t)cmd->count);
    *old = (kl_retired){cmd->retired, cmd->cmds, cmd->cap};
    cmd->retired = old;
    cmd->cmds = fresh;
    cmd->cap = cap;
    return true;
}

/* Appends a command; the value (size bytes, or none) is copied or moved in. */
__attribute__((noinline)) static kiln_result push_slow(kiln_commands *cmd, const char *call,
                                                       kl_op op, kiln_entity target,
                                                       kiln_component component,
                                                       const void *value, size_t size, bool move,
                                                       const kl_component *comp) {
    if (cmd->head == cmd->count && cmd->head != 0) {
        cmd->head = cmd->count = cmd->held = cmd->held_end = 0;
        cmd->hold = KL_NO_HOLD;
        reset_values(cmd);
    }
    if (cmd->count == cmd->cap && !grow_cmds(cmd, cmd->count + 1))
        return record_fail(cmd, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory recording a command",
                           call);
    kl_cmd *c = &cmd->cmds[cmd->count];
    *c = (kl_cmd){.op = (uint8_t)op, .hooks_known = known_flags(comp), .component = component,
                  .target = target, .v.out.size = (uint32_t)size};
    /* No value: none is stored, and the apply gives the defaults the world has then. */
    if (size > 0 && value && inline_value(op, comp, size)) {
        kl_copy_value(c->v.bytes, value, size);
        c->inline_size = (uint8_t)size;
        c->has_value = 1;
    } else if ((op == KL_OP_ADD || op == KL_OP_SET || op == KL_OP_EMIT || op == KL_OP_DESPAWN) && size > 0 &&
               value) { /* a despawn's: the components its kiln_despawn_unless keeps */
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

kiln_result kl_commands_record_keep(kiln_commands *cmd, const char *call, kiln_entity target,
                                    const kiln_component *keep, int32_t count) {
    return push_slow(cmd, call, KL_OP_DESPAWN, target, KILN_NO_COMPONENT, keep, sizeof *keep * (size_t)count, false,
                     NULL);
}

static kiln_result check_world(kiln_commands *cmd, const char *call) {
    if (cmd->world) return KILN_OK;
    return record_fail(cmd, KILN_ERR_INVALID_ARGUMENT, "%s: the buffer's world was destroyed", call);
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

/* A spawn into the batch of the buffer's latest spawn (so attached, not complete, its tag
 * taken), with room for the placeholder and the command, in one pass: true when recorded;
 * false, with nothing done, where spawn_slow must decide (and report any error). */
static inline __attribute__((always_inline)) bool spawn_fast(kiln_commands *cmd, kiln_entity *dest) {
    uint32_t index = cmd->ph_count;
    int64_t at = cmd->count;
    if (cmd->spawned_last == KILN_NULL_ENTITY || index >= cmd->ph_cap || index > KL_PH_INDEX_MASK ||
        at == cmd->cap || (cmd->head == at && at != 0))
        return false;
    kiln_entity ph = (cmd->spawned_last & ~KL_PH_INDEX_MASK) | index; /* the same tag */
    spawn_write(&cmd->cmds[at], index);
    cmd->count = at + 1;
    cmd->placeholders[index] = KILN_NULL_ENTITY;
    cmd->ph_count = index + 1;
    cmd->spawned_last = *dest = ph;
    cmd->hold = at;
    cmd->held_end = at + 1;
    return true;
}

__attribute__((noinline)) static kiln_result spawn_slow(kiln_commands *cmd, const char *call,
                                                        kiln_entity *dest);

kiln_result kiln_commands_spawn(kiln_commands *cmd, kiln_entity *dest) {
    KILN_ASSERT(cmd != NULL && dest != NULL, "cmd and dest are required");
    if (KL_LIKELY(spawn_fast(cmd, dest))) return KILN_OK;
    return spawn_slow(cmd, "kiln_commands_spawn", dest);
}

static kiln_result spawn_slow(kiln_commands *cmd, const char *call, kiln_entity *dest) {
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
    spawn_write(&cmd->cmds[cmd->count - 1], index);
    cmd->hold = cmd->count - 1;
    cmd->held_end = cmd->count;
    cmd->tag = tag;
    cmd->placeholders[cmd->ph_count++] = KILN_NULL_ENTITY;
    cmd->spawned_last = *dest = ph;
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

/* Holds an add of c (size bytes of value) in the spawn slot s, the buffer's last, which has
 * room for it (add_to_spawned checks; spawn_with_fast writes its one or two the same way). */
static inline __attribute__((always_inline)) void hold_add(kiln_commands *cmd, kl_spawn_cmd *s, kiln_component c,
                                                           const void *value, uint32_t size) {
    uint32_t adds = s->adds;
    kl_copy_upto16(s->bytes + s->size[0], value, size);
    s->held[adds] = c;
    s->size[adds] = (uint8_t)size;
    s->adds = (uint8_t)(adds + 1);
    if (adds + 1 == KL_SPAWN_HELD) cmd->hold = KL_NO_HOLD;
    cmd->held++; /* held_end is past the slot since its spawn */
}

/* The usual add, in one pass: to the placeholder the buffer spawned last (a current one, so
 * no other check), a small value of a component with no hooks (cmd_small). Held in that
 * spawn's slot while it can take one (cmd->hold: the slot is the last, pending, holds fewer
 * than KL_SPAWN_HELD adds) and the values fit, not a component it holds already; else in a
 * command of its own if the array has room: true when recorded. The second branch repeats
 * push_fast's inline branch on purpose (keep the two alike): going through push_fast costs
 * kiln_commands_add 16% more instructions in cmd_spawn (callgrind, 2026-12-02). */
static inline __attribute__((always_inline)) bool add_to_spawned(kiln_commands *cmd, kiln_entity e,
                                                                 kiln_component c, const void *value) {
    int64_t at = cmd->count;
    if (e != cmd->spawned_last || !value) return false;
    const kl_component *comp = kl_component_get(cmd->world, c);
    if (!comp) return false;
    uint32_t size = comp->cmd_small;
    if (cmd->hold == at - 1) { /* so e is a placeholder: hold is set only with spawned_last */
        kl_spawn_cmd *s = &cmd->cmds[at - 1].spawn;
        if (size + s->size[0] <= KL_INLINE && s->held[0] != c) { /* size[0]: 0 while none is held */
            hold_add(cmd, s, c, value, size);
            return true;
        }
    }
    if (e == KILN_NULL_ENTITY || size > KL_INLINE || at == cmd->cap || (cmd->head == at && at != 0))
        return false;
    kl_cmd *r = &cmd->cmds[at];
    *r = (kl_cmd){.op = KL_OP_ADD, .has_value = 1, .hooks_known = 1, /* no KL_LINKS */
                  .inline_size = (uint8_t)size, .component = c, .target = e};
    kl_copy_upto16(r->v.bytes, value, size);
    cmd->count = at + 1;
    return true;
}

/* Every add but add_to_spawned's, out of line: kiln_commands_add reaches it by a tail call,
 * so the usual add sets up no frame. */
__attribute__((noinline)) static kiln_result add_general(kiln_commands *cmd, kiln_entity entity,
                                                         kiln_component component, void *value) {
    if (KL_LIKELY(record_fast(cmd, KL_OP_ADD, entity, component, value))) return KILN_OK;
    return record_value(cmd, "kiln_commands_add", KL_OP_ADD, entity, component, value, 0, false);
}

kiln_result kiln_commands_add(kiln_commands *cmd, kiln_entity entity, kiln_component component,
                              void *value) {
    KILN_ASSERT(cmd != NULL, "cmd is NULL");
    if (KL_LIKELY(add_to_spawned(cmd, entity, component, value))) return KILN_OK;
    return add_general(cmd, entity, component, value);
}

#define SPAWN_WITH_MAX 256 /* components in one spawn, as kiln_spawn_with takes */

/* Everything kiln_commands_spawn_with's adds could fail on, checked before its spawn: the
 * components known, distinct and not 0, and room for its commands and its values made, so
 * that once the spawn is recorded its adds cannot fail (all or nothing). */
static kiln_result spawn_with_ready(kiln_commands *cmd, const char *call, const kiln_component *components,
                                    void *const *values, int32_t count) {
    if (count < 0 || count > SPAWN_WITH_MAX || (count > 0 && !components))
        return record_fail(cmd, KILN_ERR_INVALID_ARGUMENT,
                           "%s: count %d (0 to %d components, and the list when there are any)", call,
                           (int)count, SPAWN_WITH_MAX);
    size_t bytes = 0;
    for (int32_t i = 0; i < count; i++) {
        kiln_component c = components[i];
        const kl_component *comp = c ? kl_component_get(cmd->world, c) : NULL;
        if (!comp)
            return record_fail(cmd, KILN_ERR_UNKNOWN_COMPONENT, "%s: component #%u is not registered", call,
                               (unsigned)c);
        for (int32_t j = 0; j < i; j++)
            if (components[j] == c)
                return record_fail(cmd, KILN_ERR_INVALID_ARGUMENT, "%s: %s is listed twice", call, comp->names);
        if (values && values[i] && comp->size > 0 && !inline_value(KL_OP_ADD, comp, comp->size))
            bytes += ((size_t)comp->size + 15) & ~(size_t)15;
    }
    if (cmd->cap - cmd->count < (int64_t)count + 1 && !grow_cmds(cmd, cmd->count + count + 1))
        return record_fail(cmd, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory recording a command", call);
    if (bytes > 0) { /* a block with room for them all, taken and given back */
        if (!value_room(cmd, bytes))
            return record_fail(cmd, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for a value", call);
        cmd->current->used -= bytes;
    }
    return KILN_OK;
}

__attribute__((noinline)) static kiln_result spawn_with_general(kiln_commands *cmd,
                                                                const kiln_component *components,
                                                                void *const *values, int32_t count,
                                                                kiln_entity *dest);

/* The usual kiln_commands_spawn_with in one pass: a spawn spawn_fast records, holding its one
 * or two adds (values of distinct small hook-free components, KL_INLINE bytes in all, as
 * add_to_spawned would hold them), written out without loops. False, with nothing done,
 * otherwise. */
static inline __attribute__((always_inline)) bool spawn_with_fast(kiln_commands *cmd,
                                                                  const kiln_component *components,
                                                                  void *const *values, int32_t count,
                                                                  kiln_entity *dest) {
    if (count < 1 || count > KL_SPAWN_HELD || !values || !components || !values[0]) return false;
    kiln_component c0 = components[0], c1 = count == 2 ? components[1] : KILN_NO_COMPONENT;
    const kl_component *a = kl_component_get(cmd->world, c0); /* NULL for 0 */
    if (!a) return false;
    uint32_t s0 = a->cmd_small, s1 = 0; /* UINT8_MAX for any other component */
    if (count == 2) {
        const kl_component *b = kl_component_get(cmd->world, c1);
        if (!b || !values[1] || c1 == c0) return false;
        s1 = b->cmd_small;
    }
    if (s0 + s1 > KL_INLINE || !spawn_fast(cmd, dest)) return false;
    kl_spawn_cmd *s = &cmd->cmds[cmd->count - 1].spawn;
    kl_copy_upto16(s->bytes, values[0], s0);
    s->held[0] = c0;
    s->size[0] = (uint8_t)s0;
    if (count == 2) {
        kl_copy_upto16(s->bytes + s0, values[1], s1);
        s->held[1] = c1;
        s->size[1] = (uint8_t)s1;
        cmd->hold = KL_NO_HOLD; /* full */
    }
    s->adds = (uint8_t)count;
    cmd->held += count; /* held_end is past the slot since its spawn */
    return true;
}

kiln_result kiln_commands_spawn_with(kiln_commands *cmd, const kiln_component *components, void *const *values,
                                     int32_t count, kiln_entity *dest) {
    KILN_ASSERT(cmd != NULL && dest != NULL, "cmd and dest are required");
    if (KL_LIKELY(cmd->world != NULL && spawn_with_fast(cmd, components, values, count, dest))) return KILN_OK;
    return spawn_with_general(cmd, components, values, count, dest);
}

/* Every kiln_commands_spawn_with but spawn_with_fast's: checked and made room for first. */
static kiln_result spawn_with_general(kiln_commands *cmd, const kiln_component *components, void *const *values,
                                      int32_t count, kiln_entity *dest) {
    const char *call = "kiln_commands_spawn_with";
    kiln_result r = check_world(cmd, call);
    if (r == KILN_OK) r = spawn_with_ready(cmd, call, components, values, count);
    kiln_entity ph;
    if (r == KILN_OK && !spawn_fast(cmd, &ph)) r = spawn_slow(cmd, call, &ph);
    if (r != KILN_OK) return r;
    for (int32_t i = 0; i < count; i++) {
        void *value = values ? values[i] : NULL;
        if (KL_LIKELY(add_to_spawned(cmd, ph, components[i], value))) continue;
        r = add_general(cmd, ph, components[i], value);
        KILN_ASSERT(r == KILN_OK, "kiln_commands_spawn_with: an add failed after its checks");
        if (r != KILN_OK) return r;
    }
    *dest = ph;
    return KILN_OK;
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

/* The slot holding pending command index (0: the first pending; below the pending count)
 * and the command's part in it (0: the slot's own command, k: a spawn's held add k - 1).
 * Past the slots holding adds, slots and commands go one to one; before, a walk. */
static int64_t slot_of(const kiln_commands *cmd, int64_t index, int32_t *part) {
    *part = 0;
    int64_t tail = cmd->held_end - cmd->head + cmd->held; /* commands before held_end */
    if (cmd->held == 0) return cmd->head + index;
    if (index >= tail) return cmd->held_end + (index - tail);
    int64_t s = cmd->head;
    for (int64_t n = cmd_parts(&cmd->cmds[s]); index >= n; n = cmd_parts(&cmd->cmds[++s]))
        index -= n;
    *part = (int32_t)index;
    return s;
}

void kl_commands_truncate(kiln_commands *cmd, int64_t keep) {
    int64_t drop = kiln_commands_count(cmd) - keep;
    while (drop > 0) { /* from the end: the dropped commands are the latest */
        kl_cmd *c = &cmd->cmds[cmd->count - 1];
        int64_t parts = cmd_parts(c);
        if (parts > drop) { /* a cut inside a spawn's held adds: the first ones stay */
            kl_spawn_cmd *s = &c->spawn;
            for (int64_t k = s->adds - drop; k < s->adds; k++) s->held[k] = 0, s->size[k] = 0;
            s->adds = (uint8_t)(s->adds - drop);
            cmd->held -= drop;
            if (spawn_target(cmd, c) == cmd->spawned_last) cmd->hold = cmd->count - 1;
            break;
        }
        cmd->count--;
        cmd->held -= parts - 1;
        drop -= parts;
    }
    if (cmd->held_end > cmd->count) cmd->held_end = cmd->count;
    if (cmd->hold >= cmd->count) cmd->hold = KL_NO_HOLD;
}

void *kl_commands_value_at(kiln_commands *cmd, int64_t index) {
    if (index < 0 || index >= kiln_commands_count(cmd)) return NULL;
    int32_t part;
    kl_cmd *c = &cmd->cmds[slot_of(cmd, index, &part)];
    if (c->op == KL_OP_SPAWN) return part ? held_value(&c->spawn, part - 1) : NULL;
    return c->has_value ? cmd_value(c) : NULL;
}

void kl_commands_unreserve_since(kiln_commands *cmd, int64_t keep) {
    int64_t end = cmd->count;
    kl_commands_truncate(cmd, keep); /* the slots from count on are dropped whole */
    /* Latest first, so every slot goes back exactly as it was taken. */
    for (int64_t i = end - 1; i >= cmd->count; i--)
        if (cmd->cmds[i].op == KL_OP_MATERIALIZE) kl_entity_untake(cmd->world, cmd->cmds[i].target);
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
    kiln_entity e = cmd->placeholders[placeholder & KL_PH_INDEX_MASK];
    return kiln_is_placeholder(e) ? KILN_NULL_ENTITY : e; /* spawn_gone */
}

