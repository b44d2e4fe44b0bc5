/* kiln_transform.h: the transform addon (parent/child hierarchy and transform propagation),
 * built on kiln.h alone and the only kiln header that includes cglm. Every function starts
 * with kiln_transform_; the state lives behind the world's teardown hook (kiln_world_atfini). */
#ifndef KILN_TRANSFORM_H
#define KILN_TRANSFORM_H

#include <string.h>

#include <cglm/cglm.h>

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Functions in this header:
 *   kiln_transform_init, kiln_transform_ids_get, kiln_transform_propagate,
 *   kiln_transform_propagate_parallel, kiln_transform_set_parent, kiln_transform_children, kiln_transform_despawn_recursive,
 *   kiln_transform_despawn_recursive_unless, kiln_transform_links_walked,
 *   kiln_transform_system_desc, kiln_transform_system_result,
 *   kiln_transform_local_identity, kiln_transform_local_to_mat4,
 *   kiln_transform_world_to_mat4.
 * Components keep plain float arrays (cglm's element order), so their layout never depends
 * on the compiler's SIMD alignment settings.
 */

/* "Parent": the entity's parent. A null or dead parent makes the entity a root. Every write
 * of a Parent value (kiln_add, kiln_set, spawns, command buffers) goes through a check hook
 * with kiln_transform_set_parent's rules: a link to itself or one that would close a cycle
 * is refused with KILN_ERR_INVALID_ARGUMENT, the world unchanged, and so is one that would
 * break the depth limit. An entity's depth is the count of Parent links above it (a root is
 * 0), and no entity may be deeper than 256: a link is refused when the parent's depth + 1
 * (where the entity lands) is over 256 ("would create a parent chain deeper than 256"), and
 * when the entity has descendants, when its depth + the links down to its deepest descendant
 * is ("its subtree would end deeper than 256"). A link exactly at 256 is taken. So is a parent the world never handed out, which would otherwise be stored as
 * is: a placeholder a command buffer could not rewrite (its apply rewrites its own batch's
 * placeholders in a recorded Parent to the entities spawned, so a parent and its children
 * spawn from one buffer; a placeholder written any other way stays no entity), a handle with
 * stray high bits, and a handle of a slot or generation the world has not reached (it would come alive
 * as some later spawn). A stale handle stays a dead link; a handle reserved by a deferred
 * spawn is the entity it becomes. Writes through pointers (kiln_get_mut, query columns) are
 * not checked, and the subtree part of the check sees them from the next tick on, as
 * kiln_transform_children does: in the tick of such a write, a checked link above the entities
 * it moved can end a chain past 256 (propagation then refuses that chain). The check, kiln_transform_set_parent, kiln_transform_children and
 * kiln_transform_despawn_recursive read the Parent values of other entities, which a worker
 * system may be writing meanwhile: a system making them declares reads (or writes) Parent, and
 * debug builds abort naming the system otherwise, as for any undeclared read. */
typedef struct kiln_parent {
    kiln_entity entity;
} kiln_parent;

/* The deepest an entity may be: the count of Parent links above it (a root is 0). */
#define KILN_TRANSFORM_MAX_DEPTH 256

/* "LocalTransform": what scripts edit. Relative to the parent (or the world for roots). Its
 * registered defaults are the identity (rotation (0, 0, 0, 1), scale (1, 1, 1)), so a value
 * added without one, or from a partial value a binding fills over the defaults, is sane. */
typedef struct kiln_local_transform {
    float position[3];
    float rotation[4]; /* unit quaternion x, y, z, w (cglm versor order) */
    float scale[3];
} kiln_local_transform;

/* "WorldTransform": parent's world matrix * local matrix; column-major 4x4 (cglm mat4
 * element order), right-handed, Y up. Written by propagation. */
typedef struct kiln_world_transform {
    float matrix[4][4]; /* matrix[column][row] */
} kiln_world_transform;

typedef struct kiln_transform_ids {
    kiln_component parent;
    kiln_component local;
    kiln_component world;
} kiln_transform_ids;

/* Registers Parent (with its check hook), LocalTransform (with identity defaults) and
 * WorldTransform, all with reflected fields, and keeps the propagation state as the context
 * of a teardown hook registered with kiln_world_atfini (freed with the world). Idempotent;
 * writes the ids to dest (may be NULL). A main-thread system may call it while worker systems
 * run (they see no transforms, or all); from a worker system, job or thread while a stage runs
 * it is KILN_ERR_INVALID_ARGUMENT, nothing registered. */
kiln_result kiln_transform_init(kiln_world *world, kiln_transform_ids *dest);

/* The ids, or false when kiln_transform_init has not run on world. */
bool kiln_transform_ids_get(const kiln_world *world, kiln_transform_ids *dest);

typedef struct kiln_transform_propagate_stats {
    int64_t updated;   /* WorldTransform values actually rewritten (changed) */
    int64_t computed;  /* entities whose world matrix was recomputed */
    int64_t added;     /* WorldTransform components added (or queued, when deferred) */
} kiln_transform_propagate_stats;

/* Propagates transforms. Every entity with a LocalTransform gets WorldTransform = parent's
 * world matrix * local matrix (a root's is its local matrix), the component being added when
 * missing (queued when the world is deferred, with its computed value). An entity with a
 * Parent but no LocalTransform counts as identity for its children and gets no
 * WorldTransform itself. Roots are composed chunk by chunk straight from their columns;
 * entities with a Parent level by level (depth 1, 2, ...) from a schedule kept in the world
 * and rebuilt only after a structural change or a Parent write, so archetype order does not
 * matter and each entity is computed at most once per call. Only entities whose
 * LocalTransform, Parent or ancestors changed since the previous call (at or after its tick:
 * an edit in the same tick as a propagation is seen again by the next one, though not
 * rewritten) are recomputed (all of them after any entity gains or loses one of these
 * components), and only values that actually changed are written, so WorldTransform change
 * ticks are meaningful. Scratch memory lives in the world and is reused: a steady-state call
 * allocates nothing. A parent chain deeper than 256, which only unchecked writes through
 * pointers can make, or a cycle (the same), fails with KILN_ERR_INVALID_ARGUMENT naming the
 * entity, the entities past it left without a computed WorldTransform; entities outside it
 * are still updated. Out of
 * memory (KILN_ERR_OUT_OF_MEMORY) or a WorldTransform past a limit (KILN_ERR_LIMIT: a 257th
 * component, a 65,473rd archetype) leaves the world as it was: nothing added, queued or
 * written. dest may be NULL. */
kiln_result kiln_transform_propagate(kiln_world *world, kiln_transform_propagate_stats *dest);

/* kiln_transform_propagate with the work split over jobs (roots by row ranges, then each
 * level), the calling thread taking part: the same matrices, bit for bit, the same ticks and
 * stats. jobs NULL or without workers runs inline. The world is deferred while the jobs run;
 * call it where kiln_parallel_for may be called. */
kiln_result kiln_transform_propagate_parallel(kiln_world *world, kiln_jobs *jobs,
                                              kiln_transform_propagate_stats *dest);

/* Makes parent the parent of child (adds or sets Parent); KILN_NULL_ENTITY removes the link.
 * Rejects dead entities (KILN_ERR_DEAD_ENTITY), a self link, and a link that would make a
 * cycle or put child or any of its descendants deeper than 256 (KILN_ERR_INVALID_ARGUMENT;
 * see "Parent" for the limit), changing nothing. Deferred like any add when
 * the world is deferred; there, an entity spawned earlier in the section counts as alive, and
 * a cycle that only the queued links close is dropped when the queue lands. */
kiln_result kiln_transform_set_parent(kiln_world *world, kiln_entity child, kiln_entity parent);

/* The children of parent (entities whose Parent is parent; never parent itself: a self link
 * written through a pointer is a root, as propagation reads it): writes up to capacity of them to
 * dest, the smallest by handle, in order, and returns how many there are (0 for a parent that
 * is not alive). Uses an index kept in the world (a list of children per entity slot), so it
 * does not scan the world: it follows at once every Parent written through its check (spawns,
 * adds, sets, command buffers, kiln_transform_set_parent), despawns, removes, kiln_load and
 * snapshot restores; a Parent written through a pointer (kiln_get_mut, or a query's column
 * with the row marked changed) is seen from the next tick on. Keeping up costs the links that
 * changed and the children read, but a call after both a despawn and a linked spawn in one
 * archetype reads that archetype's row ticks and relinks the rows stamped this tick (all of
 * them, when most are), as does the first call of a tick after Parents were written through
 * a pointer. -1 when catching up runs out of memory (the world error says so, dest untouched;
 * the next call reads every link), never a count that looks like no children; -1 too for dest NULL
 * with capacity > 0. */
int32_t kiln_transform_children(kiln_world *world, kiln_entity parent, kiln_entity *dest, int32_t capacity);

/* Despawns root and all its descendants (each once, even where links written through a
 * pointer close a cycle), through the index kiln_transform_children uses (so a link written
 * through a pointer this tick is not followed yet; one call after another cost what they
 * despawn, as the index keeps up). Plain kiln_despawn of a parent leaves its children in
 * place as roots (their Parent link is dead). Deferred like any despawn when the world is deferred;
 * there, an entity spawned earlier in the section is taken too (alone: its links are still
 * queued). KILN_ERR_DEAD_ENTITY for any other root that is not alive. */
kiln_result kiln_transform_despawn_recursive(kiln_world *world, kiln_entity root);

/* kiln_transform_despawn_recursive through kiln_despawn_unless(keep, count): refused whole (nothing despawned)
 * while one of the entities holds one of keep; deferred, each despawn is checked again as it lands. */
kiln_result kiln_transform_despawn_recursive_unless(kiln_world *world, kiln_entity root, const kiln_component *keep,
                                                    int32_t count);

/* How many Parent links the checks of new links have read in this world, ever (0 before
 * kiln_transform_init). Linking an entity with descendants under a parent checks how deep
 * they go, which may walk the entity's whole subtree: a host that lets scripts link entities
 * reads this before and after their calls to charge them for that work. */
int64_t kiln_transform_links_walked(const kiln_world *world);

/* Fills dest with a ready system for a schedule: name "propagate_transforms", reads Parent
 * and LocalTransform, writes WorldTransform, runs kiln_transform_propagate_parallel on the
 * schedule's pool (missing WorldTransforms queued into the system's own buffer). Needs
 * kiln_transform_init first. A run out of memory leaves the world error saying so and writes
 * no WorldTransform but finished ones; where the buffer's apply ran out, each missing
 * WorldTransform landed with its computed value or not at all, and the next run completes
 * the propagation. A run that fails (out of memory, or a chain deeper than 256 that
 * unchecked writes made) is kept for kiln_transform_system_result. */
void kiln_transform_system_desc(const kiln_world *world, kiln_system_desc *dest);

/* The first failure of the system kiln_transform_system_desc describes since the last call,
 * so a schedule's host hears of it (a system returns nothing, and the world error it left
 * belongs to the thread that ran it): its result, KILN_OK when every run since succeeded (or
 * before kiln_transform_init), with its message copied to dest ("" for none; dest_size bytes,
 * truncated; dest NULL with dest_size > 0: KILN_ERR_INVALID_ARGUMENT, the result kept for a later
 * call). The read clears it. Call it between
 * schedule runs, not during one. */
kiln_result kiln_transform_system_result(kiln_world *world, char *dest, size_t dest_size);

static inline kiln_local_transform kiln_transform_local_identity(void) {
    kiln_local_transform t = {{0, 0, 0}, {0, 0, 0, 1}, {1, 1, 1}};
    return t;
}

/* The local matrix translate * rotate * scale. */
static inline void kiln_transform_local_to_mat4(const kiln_local_transform *t, mat4 dest) {
    versor q = {t->rotation[0], t->rotation[1], t->rotation[2], t->rotation[3]};
    glm_quat_mat4(q, dest);
    for (int r = 0; r < 3; r++) {
        dest[0][r] *= t->scale[0];
        dest[1][r] *= t->scale[1];
        dest[2][r] *= t->scale[2];
    }
    dest[3][0] = t->position[0];
    dest[3][1] = t->position[1];
    dest[3][2] = t->position[2];
    dest[3][3] = 1.0f;
}

static inline void kiln_transform_world_to_mat4(const kiln_world_transform *t, mat4 dest) {
    memcpy(dest, t->matrix, sizeof(float) * 16);
}

#ifdef __cplusplus
}
#endif
#endif /* KILN_TRANSFORM_H */
