/* transform_state.h: the transform addon's state, shared by the hierarchy (transform.c) and
 * propagation (propagate.c). Invariant: nodes[] is valid only while nodes_valid is set. */
#ifndef KILN_TRANSFORM_STATE_H
#define KILN_TRANSFORM_STATE_H

#include "kiln_transform.h"

/* Core internals (the addon is built with -Icore/src): records, archetypes, query ticks. */
#include "archetype.h"
#include "follow.h"
#include "spin.h"
#include "query.h"
#include "world.h"

/* The most links above an entity (its depth) that a hierarchy may have: the Parent check
 * refuses a link that would put any entity deeper (kl_depth_refused), and propagation fails
 * on a chain deeper than this, so a link the check took always propagates. */
#define KL_MAX_DEPTH KILN_TRANSFORM_MAX_DEPTH

/* Whether a new link under a parent with parent_depth links above it is refused: the entity
 * linked would be parent_depth + 1 deep. The one test of the limit for every check. */
static inline bool kl_depth_refused(int64_t parent_depth) { return parent_depth + 1 > KL_MAX_DEPTH; }

/* Per entity slot, valid while epoch matches the state's: the levels build's bookkeeping,
 * never touched by a steady-state propagation. Only the propagation uses it (and the
 * scratch below): it may run on the pool while a main-thread system calls the others. */
typedef struct kl_memo {
    uint32_t epoch;
    int32_t depth;         /* links above the entity; -1: its chain failed (cycle, too deep) */
    kiln_entity entity;    /* whose entry this is (a slot may be reused by another entity) */
    int32_t node;          /* its index in nodes[], or -1 when it is not a node */
} kl_memo;

/* One entity of the level schedule: an entity with a Parent, or (deferred) one lacking its
 * WorldTransform. Pointers go into columns, so the schedule is rebuilt after any structural
 * change or Parent write. */
typedef struct kl_node {
    float *out;                        /* WorldTransform row, scratch slot, or NULL (no local) */
    const float *parent;               /* the parent's world matrix; NULL: identity */
    const kiln_local_transform *local; /* NULL: identity (a Parent without LocalTransform) */
    const kiln_row_tick *local_tick;   /* row ticks count from the world's tick base */
    const kiln_row_tick *link_tick;    /* the Parent row's tick, or NULL */
    kiln_row_tick *out_tick;           /* NULL for a scratch slot (always recomputed) */
    kl_column *out_column;
    const kiln_row_tick *parent_out_tick; /* a root parent's WorldTransform tick, or NULL */
    int32_t parent_node;               /* index of the parent's node, or -1 */
} kl_node;

/* The children index, per entity slot: the link it holds for the entity there as a child,
 * and where the children list of the entity there as a parent starts. Lists are doubly linked
 * through slots stored plus one (0: none). A list whose parent's slot went to another entity
 * loses its head but stays linked, so taking a node out of it stays exact. */
typedef struct kl_child_node {
    kiln_entity child;   /* the child linked at this slot, 0: none */
    kiln_entity parent;  /* the parent it is listed under */
    kiln_entity listed;  /* the parent whose list starts at first */
    uint32_t next, prev; /* siblings in the parent's list */
    uint32_t first;      /* listed's first child */
    uint16_t adopting;   /* the relink round in which a value set in place named an entity of
                          * this slot as parent: it may have children no list shows yet (a mark
                          * 65535 rounds old reads as new: one catch-up more, never a miss) */
    uint16_t child_height; /* while listed has a first child: at least the links from any of
                          * its listed children down to that child's deepest listed descendant
                          * (KL_MAX_DEPTH - 1: that many or more), so listed's subtree is at
                          * most one more; a check that finds that within its limit walks
                          * nothing (children.c, raise_heights). A new leaf needs no raise. */
} kl_child_node;

/* The children index is read on every link made; the height bound fits in the node's padding
 * (40 bytes: a node more costs tree_spawn instructions and cache lines). */
_Static_assert(sizeof(kl_child_node) == 40, "kl_child_node grew past 40 bytes");
_Static_assert(KL_MAX_DEPTH - 1 <= UINT16_MAX, "child_height cannot hold KL_MAX_DEPTH - 1");

typedef struct kl_transform_state {
    kiln_world *world;
    kiln_transform_ids ids;
    kiln_query *compute;   /* LocalTransform + WorldTransform, optional Parent */
    kiln_query *roots;     /* LocalTransform + WorldTransform without Parent */
    kiln_query *missing;   /* LocalTransform without WorldTransform */
    kiln_query *linked;    /* Parent */
    kiln_tick last_tick;   /* tick of the previous propagation, 0 before the first */
    uint32_t epoch;
    kl_memo *memo;         /* per entity slot */
    int64_t memo_cap;
    float (*scratch)[16];  /* world matrices of entities still lacking WorldTransform */
    int64_t scratch_cap;
    kiln_entity *pending;  /* entities lacking WorldTransform (scratch[i] is pending[i]'s) */
    int64_t pending_cap, pending_count;
    /* the level schedule: nodes sorted by depth, level d is [level_start[d], level_start[d+1]) */
    kl_node *nodes;
    int64_t node_count, node_cap;
    uint8_t *node_dirty;   /* per node: its matrix changed in this call */
    int64_t dirty_cap;
    kiln_entity *order;    /* scratch of the build: node entities, then their depths */
    int32_t *order_depth;
    int64_t order_cap, order_depth_cap;
    int32_t level_start[KL_MAX_DEPTH + 2];
    int32_t level_count;
    bool nodes_valid;
    void *jobs_mem;        /* job descriptions for the levels, reused */
    int64_t jobs_mem_cap;
    /* the children index (children.c): every live entity with a Parent is linked under that
     * parent once it caught up; links left by despawns and changed Parents are found stale
     * by the reads that meet them, and taken out */
    kl_child_node *links;  /* per entity slot */
    int64_t link_cap, link_count;
    kl_follow links_follow;
    kiln_entity *relink;   /* entities whose Parent was set in place since the last catch-up */
    int64_t relink_count, relink_cap;
    uint16_t relink_round; /* goes up as each catch-up drains relink (adopting marks expire);
                            * never 0, which zeroed slots hold */
    int64_t links_walked;  /* links the height checks read walking subtrees (ever): what a
                            * caller may charge for them (kiln_transform_links_walked) */
    atomic_flag links_lock; /* held by whoever reads or changes the index: systems that read
                             * Parent may look children up on several threads at once */
    /* the first failure of the propagation system since kiln_transform_system_result read it */
    kiln_result system_result;
    char system_error[KL_ERROR_SIZE];
} kl_transform_state;

/* The world's transform state, or NULL before kiln_transform_init. */
KL_HIDDEN kl_transform_state *kl_transform_state_of(const kiln_world *world);

/* The Parent check hook passed a value naming parent for child, to be set in place: the next
 * catch-up of the children index reads child's Parent again (a value that did not land
 * changes nothing), and until then parent's slot counts as maybe having children. */
KL_HIDDEN void kl_transform_note_relink(kl_transform_state *st, kiln_entity child, kiln_entity parent);

/* How many links below e (alive, or reserved by a deferred spawn) the deepest entity linked
 * under it is, limit + 1 when more (0 <= limit < KL_MAX_DEPTH); within the limit it may say
 * more than there are (a bound the index keeps: a branch taken away leaves it high until a
 * walk finds the truth), and 0 whenever the world holds too few entities for any chain to
 * pass the limit. Read from the children index, caught up first (without memory for that,
 * by walks up from every linked entity): it never fails. Takes the index's lock; the caller
 * has checked it may read Parent. */
KL_HIDDEN int32_t kl_transform_height(kiln_world *world, kl_transform_state *st, kiln_entity e, int32_t limit);

/* The live parent of a live entity's record, or null (no Parent, dead parent, self link);
 * *link_dead is set when a Parent exists but does not lead to a live parent. */
KL_HIDDEN kiln_entity kl_transform_parent_of(const kiln_world *world, const kl_transform_state *st,
                                             kiln_entity e, const kl_record *rec, bool *link_dead);

/* Grows one of the state's arrays to hold need items (no shrink); false when out of memory. */
static inline bool kl_transform_reserve(kiln_world *world, void **ptr, int64_t *cap, int64_t need,
                                        size_t elem) {
    return kl_grow(&world->alloc, ptr, cap, need, elem, 64);
}

/* Propagation with missing WorldTransforms queued into queue when given (else through
 * kiln_add), the work split over jobs when it has workers. */
KL_HIDDEN kiln_result kl_transform_propagate(kiln_world *world, kiln_commands *queue, kiln_jobs *jobs,
                                             kiln_transform_propagate_stats *dest);

#endif /* KILN_TRANSFORM_STATE_H */
