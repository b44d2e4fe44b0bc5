/* commands.h: command buffers as the deferred world uses them: a lenient mode that drops
 * commands aimed at entities that died meanwhile, and recording of reserved entities. */
#ifndef KILN_COMMANDS_H
#define KILN_COMMANDS_H

#include "world.h"

/* Creates a buffer; lenient buffers drop commands whose entity died before the apply.
 * world_accounting: allocate through the world's own accounting (main-thread buffers only). */
KL_HIDDEN kiln_commands *kl_commands_create(kiln_world *world, bool lenient, bool world_accounting);

/* Names the system whose buffer cmd is, in the messages of the changes its apply drops. */
KL_HIDDEN void kl_commands_set_owner(kiln_commands *cmd, const char *system);

/* Destroys a buffer made by kl_commands_create, as kiln_commands_destroy does a user's (which
 * refuses these: their owner, a schedule or the world, still holds them). NULL: no-op. */
KL_HIDDEN void kl_commands_free(kiln_commands *cmd);

/* Records op on a real entity (no placeholder check); value is copied bytewise (move false)
 * or moved in through the component's move hook (NULL: none stored, the apply gives the
 * defaults). Fails only when out of memory, with the buffer's error naming call. */
typedef enum kl_op {
    KL_OP_SPAWN,       /* target: a placeholder */
    KL_OP_MATERIALIZE, /* target: a reserved entity that becomes alive */
    KL_OP_DESPAWN,
    KL_OP_ADD,
    KL_OP_SET,
    KL_OP_REMOVE,
    KL_OP_EMIT         /* component: the event type */
} kl_op;

KL_HIDDEN kiln_result kl_commands_record(kiln_commands *cmd, const char *call, kl_op op,
                                         kiln_entity target, kiln_component component,
                                         const void *value, bool move);

/* Records a despawn of target that lands only while target holds none of keep (count > 0,
 * copied into the buffer's values: kiln_despawn_unless deferred). */
KL_HIDDEN kiln_result kl_commands_record_keep(kiln_commands *cmd, const char *call, kiln_entity target,
                                              const kiln_component *keep, int32_t count);

/* kiln_commands_apply with call naming the public function in messages. */
KL_HIDDEN kiln_result kl_commands_apply(kiln_commands *cmd, kiln_world *world, int64_t *applied,
                                        const char *call);

/* A buffer holding nothing pending that keeps room for far more than its last batch used (a
 * burst long ago): gives that room back, as a complete apply does (commands_apply.c). The
 * schedule calls it for its systems' idle buffers, which no apply visits. */
KL_HIDDEN void kl_commands_give_back(kiln_commands *cmd);

/* Detaches a user buffer from its dying world: destroys its pending values, frees what it
 * holds and forgets the world; the buffer itself stays for kiln_commands_destroy. */
KL_HIDDEN void kl_commands_detach(kiln_commands *cmd);

/* Drops pending commands past the first keep, without destroying their values (they were
 * the caller's until the recording call succeeded). */
KL_HIDDEN void kl_commands_truncate(kiln_commands *cmd, int64_t keep);

/* The stored value of the pending command at index (0: the first pending), NULL when it has
 * none: for a caller that records first (so running out of memory changes nothing) and
 * fills the value in afterwards. Valid until the buffer records or applies again. */
KL_HIDDEN void *kl_commands_value_at(kiln_commands *cmd, int64_t index);

/* Like kl_commands_truncate, and first gives back the entity slots that the dropped
 * materialise commands reserved. */
KL_HIDDEN void kl_commands_unreserve_since(kiln_commands *cmd, int64_t keep);

#endif
