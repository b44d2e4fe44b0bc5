/* command_buffer.h: the layout of a command buffer, shared by its recording (commands.c)
 * and its apply (commands_apply.c). Invariant: slots [head, count) are pending and each owns
 * its value (in blocks that never move, so values with hooks are never relocated bytewise;
 * small hook-free ones in the slot); slots before head were applied and own nothing. A slot is
 * one command, or a spawn with the adds it holds; a slot is applied whole. */
#ifndef KILN_COMMAND_BUFFER_H
#define KILN_COMMAND_BUFFER_H

#include <string.h>

#include "commands.h"
#include "component.h"

#define KL_BLOCK_SIZE (64 * 1024)
#define KL_RUN_CHUNK 256 /* spawns a batch takes at most (see apply_spawn_run) */

/* A command: 32 bytes. A value of at most KL_INLINE bytes of a component with no hooks is
 * held in the command itself (such a value may move bytewise with the array); any other in
 * the value blocks. A spawn is laid out as kl_spawn_cmd (the same size, op first). */
#define KL_INLINE 16
#define KL_SPAWN_HELD 2 /* adds a spawn command holds at most */
#define KL_NO_HOLD (-2)  /* kiln_commands.hold when no slot takes a held add (never count - 1) */

/* A spawn, and up to KL_SPAWN_HELD adds to its placeholder recorded right after it, held in
 * the spawn's own slot (a component with no hooks and no entity fields, its value given, each
 * component once, the values together at most KL_INLINE bytes, one after the other): one slot
 * for what were three, and still 1 + adds commands for counts, `applied`, truncation and
 * messages. Its placeholder's tag is the buffer's (pending commands are all of its batch). */
typedef struct kl_spawn_cmd {
    uint8_t op;                          /* KL_OP_SPAWN */
    uint8_t adds;                        /* adds held */
    uint8_t size[KL_SPAWN_HELD];         /* their values' sizes (0 past adds) */
    kiln_component held[KL_SPAWN_HELD];  /* their components (0 past adds) */
    uint32_t index;                      /* the placeholder's index in the batch */
    unsigned char bytes[KL_INLINE];      /* their values */
} kl_spawn_cmd;

typedef struct kl_cmd {
    union {
        struct {
            uint8_t op;
            uint8_t has_value;
            uint8_t hooks_known; /* the component was registered when recorded: hooks apply;
                                  * with KL_LINKS, its value has entity fields (placeholders
                                  * resolved) */
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
        };
        kl_spawn_cmd spawn; /* op KL_OP_SPAWN */
    };
} kl_cmd;

/* Writes a spawn of the placeholder at index holding nothing yet into c: its first 16 bytes
 * only (the held values' bytes are written as adds arrive), in scalar stores (a compound
 * literal went through the stack first). */
static inline void spawn_write(kl_cmd *c, uint32_t index) {
    kl_spawn_cmd *s = &c->spawn;
    s->op = KL_OP_SPAWN;
    s->adds = 0;
    s->size[0] = s->size[1] = 0;
    s->held[0] = s->held[1] = 0;
    s->index = index;
}

/* The commands a slot stands for: a spawn and the adds it holds, else 1. */
static inline int64_t cmd_parts(const kl_cmd *c) {
    return c->op == KL_OP_SPAWN ? 1 + c->spawn.adds : 1;
}

/* The value of the spawn's held add k. */
static inline unsigned char *held_value(kl_spawn_cmd *s, int32_t k) {
    return s->bytes + (k ? s->size[0] : 0);
}

#define KL_LINKS 2 /* in hooks_known: the value has entity fields (component.c: cmd_known) */

/* hooks_known for a command of comp (NULL: not registered when recorded). */
static inline uint8_t known_flags(const kl_component *comp) { return comp ? comp->cmd_known : 0; }

static inline void *cmd_value(kl_cmd *c) { return c->inline_size ? c->v.bytes : c->v.out.value; }
static inline uint32_t cmd_size(const kl_cmd *c) {
    return c->inline_size ? c->inline_size : c->v.out.size;
}

/* Whether a value of comp (size bytes) is held in its command (never one with entity fields,
 * so inline commands need no KL_LINKS). */
static inline bool inline_value(kl_op op, const kl_component *comp, size_t size) {
    return (op == KL_OP_ADD || op == KL_OP_SET) && comp && size <= KL_INLINE && comp->cmd_inline;
}

typedef struct kl_block {
    struct kl_block *next;
    size_t size; /* bytes of data */
    size_t used;
    size_t alloc_size;
} kl_block;

/* A command array an apply may still read, kept until it ends (see kiln_commands.retired). */
typedef struct kl_retired {
    struct kl_retired *next;
    kl_cmd *cmds;
    int64_t cap;
} kl_retired;

struct kiln_commands {
    kiln_world *world;      /* NULL once the world was destroyed (the buffer is detached) */
    kiln_commands *next, *prev; /* the world's list of user buffers */
    bool listed;            /* in that list (internal queues are not) */
    const char *call;       /* the public function applying the buffer, for messages */
    kl_allocator own_alloc; /* accounting of a buffer that may be filled on any thread */
    kl_allocator *alloc;    /* own_alloc, or the world's for its own (main-thread) queue */
    uint64_t tag;           /* the current batch's placeholder tag, 0 until it spawns */
    int64_t hold; /* the slot of the latest spawn while it is the last slot, pending and can
                   * hold another add (see add_to_spawned), else KL_NO_HOLD; set only with
                   * spawned_last. Not beside a field a spawn also writes, which GCC would
                   * store with it in one 16-byte move for the add to load back from */
    bool lenient;
    bool internal; /* a system's buffer or the world's queue: its owner frees it (kl_commands_free) */
    bool complete; /* the last apply consumed everything: the next record starts a batch */
    bool applying; /* an apply runs: a nested one (a hook ending an iteration) leaves it the rest */
    kl_cmd *cmds;
    int64_t cap, head, count; /* slots: [head, count) pending */
    int64_t held;     /* adds held in pending spawn slots: pending commands are
                       * count - head + held */
    int64_t held_end; /* every slot holding adds lies before it (past the latest spawn) */
    kiln_entity *placeholders; /* per placeholder index: its entity once spawned, the
                                * placeholder when gone (spawn_gone), else 0 */
    kiln_entity spawned_last;  /* the latest spawn's placeholder while its batch goes on (the
                                * buffer attached, no apply completed since), else 0 */
    int64_t ph_cap;
    uint32_t ph_count;
    kl_block *first, *current;
    char error[KL_ERROR_SIZE];
    /* for the messages of dropped commands (after the fields the apply loop reads) */
    const char *owner;  /* a system's buffer: the system's name; else NULL */
    int64_t apply_head; /* head when the apply under way began: a dropped slot's place in it */
    /* arrays the command array grew out of while applied (a hook of the apply recording into the buffer: the
     * apply holds pointers into the slot it lands, and the values a spawn takes), freed as the apply ends */
    kl_retired *retired;
};

/* Placeholders: bit 62, a batch tag in bits 24..61 and the spawn's index in the batch in
 * bits 0..23. A batch takes its tag from the world's counter when it first spawns, so no
 * two batches of any buffers of one world ever share a tag: a placeholder can only name a
 * spawn of the batch that made it. When the tags run out, spawning fails instead. */
#define KL_PH_INDEX_BITS 24
#define KL_PH_INDEX_MASK ((UINT64_C(1) << KL_PH_INDEX_BITS) - 1)
#define KL_PH_TAG_LIMIT (UINT64_C(1) << (62 - KL_PH_INDEX_BITS))

/* The placeholder a pending spawn command stands for. */
static inline kiln_entity spawn_target(const kiln_commands *cmd, const kl_cmd *c) {
    return KILN_PLACEHOLDER_BIT | (cmd->tag << KL_PH_INDEX_BITS) | c->spawn.index;
}

/* Marks the placeholder of the spawn c, passed without landing (dropped, skipped), as gone:
 * its entry holds the placeholder itself, which is no live entity (target_of then finds
 * none) and tells it from a spawn not applied yet (0). */
static inline void spawn_gone(kiln_commands *cmd, const kl_cmd *c) {
    cmd->placeholders[c->spawn.index] = spawn_target(cmd, c);
}

/* Whether e is a placeholder of the batch cmd holds now (applied or not). */
static inline bool is_current(const kiln_commands *cmd, kiln_entity e) {
    if ((e & ~(KILN_PLACEHOLDER_BIT | (KILN_PLACEHOLDER_BIT - 1))) != 0) return false;
    uint64_t tag = (e & (KILN_PLACEHOLDER_BIT - 1)) >> KL_PH_INDEX_BITS;
    return cmd->tag != 0 && tag == cmd->tag && (e & KL_PH_INDEX_MASK) < cmd->ph_count;
}

static inline const char *op_name(uint8_t op) {
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

/* Empties the value blocks (kept for reuse). */
static inline void reset_values(kiln_commands *cmd) {
    for (kl_block *b = cmd->first; b; b = b->next) b->used = 0;
    cmd->current = cmd->first;
}

/* The start of the value blocks' data (16-byte aligned). */
static inline uint8_t *block_data(kl_block *b) {
    return (uint8_t *)(((uintptr_t)(b + 1) + 15) & ~(uintptr_t)15);
}

#endif
