/* transform.c: the transform addon's setup and Parent links (their checks, set_parent); the
 * state lives behind kiln_world_atfini. The children index and recursive despawn are
 * children.c; propagation is propagate.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "component.h"
#include "defer.h"
#include "guard.h"
#include "query.h"
#include "transform_links.h"
#include "transform_state.h"

static const kiln_field parent_fields[] = {
    {.name = "entity", .type = KILN_TYPE_ENTITY, .offset = offsetof(kiln_parent, entity)},
};
static const kiln_field local_fields[] = {
    {.name = "position", .type = KILN_TYPE_VEC3, .offset = offsetof(kiln_local_transform, position)},
    {.name = "rotation", .type = KILN_TYPE_QUAT, .offset = offsetof(kiln_local_transform, rotation)},
    {.name = "scale", .type = KILN_TYPE_VEC3, .offset = offsetof(kiln_local_transform, scale)},
};
static const kiln_field world_fields[] = {
    {.name = "matrix", .type = KILN_TYPE_MAT4, .offset = offsetof(kiln_world_transform, matrix)},
};

/* The teardown hook; also the key under which the state is found again. */
static void transform_fini(kiln_world *world, void *ctx) {
    kl_transform_state *st = ctx;
    kl_allocator *a = &world->alloc;
    kiln_query_destroy(st->compute);
    kiln_query_destroy(st->roots);
    kiln_query_destroy(st->missing);
    kiln_query_destroy(st->linked);
    kl_free(a, st->memo, sizeof(kl_memo) * (size_t)st->memo_cap);
    kl_free(a, st->nodes, sizeof(kl_node) * (size_t)st->node_cap);
    kl_free(a, st->node_dirty, (size_t)st->dirty_cap);
    kl_free(a, st->order, sizeof(kiln_entity) * (size_t)st->order_cap);
    kl_free(a, st->order_depth, sizeof(int32_t) * (size_t)st->order_depth_cap);
    kl_free(a, st->jobs_mem, (size_t)st->jobs_mem_cap);
    kl_free(a, st->scratch, sizeof(float[16]) * (size_t)st->scratch_cap);
    kl_free(a, st->pending, sizeof(kiln_entity) * (size_t)st->pending_cap);
    kl_free(a, st->links, sizeof(kl_child_node) * (size_t)st->link_cap);
    kl_follow_fini(world, &st->links_follow);
    kl_free(a, st->relink, sizeof(kiln_entity) * (size_t)st->relink_cap);
    kl_free(a, st, sizeof *st);
}

kl_transform_state *kl_transform_state_of(const kiln_world *world) {
    return kiln_world_atfini_get(world, transform_fini);
}

/* Why parent, not alive, may not be linked to; NULL when the link is merely dead (a root).
 * A stale handle (its slot's generation moved past it, or the slot was retired) can never
 * name an entity again, and one reserved by a deferred spawn names what that spawn makes.
 * Anything else would be stored as is: a placeholder or a stray bit pattern is no entity at
 * all, and a handle of a slot or generation the world has not handed out yet would come
 * alive as whatever entity the world spawns there next, a link no check ever saw. */
static const char *unissued_parent(const kiln_world *world, kiln_entity parent) {
    if (kiln_is_placeholder(parent)) return "is a command buffer placeholder, not an entity";
    uint32_t generation = kiln_entity_generation(parent);
    if ((parent >> 32) != generation || generation == 0) return "is not an entity handle";
    uint32_t index = kiln_entity_index(parent);
    if (index >= kl_slot_count(world)) return "was never spawned in this world";
    if (kl_record_reserved(world, parent)) return NULL;
    const kl_record *rec = kl_record_at(world, index);
    /* a live or reserved slot holds its generation, a dead one the next it hands out */
    uint64_t bits = kl_record_load(rec);
    uint32_t reached = (uint32_t)(bits >> KL_PLACE_BITS) +
                       (kl_bits_archetype(bits) < KL_ARCHETYPES_MAX || (bits & KL_PLACE_MASK) == KL_PLACE_RESERVED);
    return generation >= reached ? "was never spawned in this world" : NULL;
}

/* Writes the refusal of an unissued parent (see unissued_parent) to why. */
static kiln_result refuse_unissued(kiln_entity parent, const char *detail, char *why, size_t why_size) {
    char pb[40];
    if (kiln_is_placeholder(parent))
        snprintf(pb, sizeof pb, "placeholder %u", (unsigned)(parent & ((UINT64_C(1) << 24) - 1)));
    else if ((parent >> 32) != kiln_entity_generation(parent))
        snprintf(pb, sizeof pb, "0x%016llx", (unsigned long long)parent);
    else
        kiln_entity_format(parent, pb, sizeof pb);
    snprintf(why, why_size, "parent %s %s", pb, detail);
    return KILN_ERR_INVALID_ARGUMENT;
}

/* Whether linking entity (alive, reserved or null: a spawn) under parent, parent_depth links
 * deep, would put an entity of entity's subtree deeper than the limit: the walk up from
 * parent saw only where entity itself lands. Writes why when refused. */
static kiln_result subtree_refused(const kiln_world *world, kl_transform_state *st, kiln_entity entity,
                                   kiln_entity parent, int32_t parent_depth, char *why, size_t why_size) {
    if (!entity || world->alive < KL_MAX_DEPTH || /* (kl_transform_height's bound, before the look-ups) */
        (!kl_record_of(world, entity) && !kl_record_reserved(world, entity)))
        return KILN_OK;
    /* the index catches up for a check: counted, not a change of the world */
    int32_t height = kl_transform_height((kiln_world *)(uintptr_t)world, st, entity,
                                         KL_MAX_DEPTH - 1 - parent_depth);
    if (!kl_depth_refused((int64_t)parent_depth + height)) return KILN_OK;
    char cb[24], pb[24];
    snprintf(why, why_size, "making %s a child of %s would put it %d deep, with descendants %d or more "
             "links below it: its subtree would end deeper than %d",
             kiln_entity_format(entity, cb, sizeof cb), kiln_entity_format(parent, pb, sizeof pb),
             parent_depth + 1, height, KL_MAX_DEPTH);
    return KILN_ERR_INVALID_ARGUMENT;
}

/* What a walk up that reached KL_MAX_DEPTH links met: a chain that loops (a cycle written
 * through a pointer: every way kiln writes a link refuses one) or one that is that long. Past
 * the limit a looping walk is on its loop, so it comes back to where it is within
 * KL_MAX_DEPTH + 1 more links, unless the loop itself is longer (named a deep chain then,
 * which it is). Only a refusal's message reads it. */
static const char *long_chain(const kiln_world *world, const kl_transform_state *st, kiln_entity at) {
    kiln_entity cur = at;
    for (int32_t i = 0; i <= KL_MAX_DEPTH; i++) {
        const kl_record *rec = kl_record_of(world, cur);
        bool dead;
        if (!rec || !(cur = kl_transform_parent_of(world, st, cur, rec, &dead))) break;
        if (cur == at) return "parent chain that loops (a cycle written through a pointer)";
    }
    return "parent chain deeper than 256";
}

/* The Parent check hook: the rules of kiln_transform_set_parent for every way a Parent value
 * is written (kiln_add, kiln_set, spawns, command buffers). A null or dead parent is a root
 * (a parent may still be a handle reserved by a deferred spawn); a parent the world never
 * handed out (a placeholder, a future handle) is refused, since no later check would see the
 * link it becomes. */
static kiln_result check_parent(const kiln_world *world, kiln_entity entity, const void *value,
                                void *ctx, char *why, size_t why_size) {
    (void)ctx;
    kl_transform_state *st = kl_transform_state_of(world);
    kiln_entity parent = value ? ((const kiln_parent *)value)->entity : KILN_NULL_ENTITY;
    if (!st || parent == KILN_NULL_ENTITY) return KILN_OK;
    char cb[24], pb[24];
    if (parent == entity) {
        snprintf(why, why_size, "entity %s cannot be its own parent",
                 kiln_entity_format(entity, cb, sizeof cb));
        return KILN_ERR_INVALID_ARGUMENT;
    }
    const kl_record *rec = kl_record_of(world, parent);
    if (!rec) { /* a dead link, unless the world never handed the parent out */
        const char *detail = unissued_parent(world, parent);
        return detail ? refuse_unissued(parent, detail, why, why_size) : KILN_OK;
    }
    kl_guard_check(world, "Parent's check", KL_READ, st->ids.parent, 0);
    /* Walk up from the new parent (cur is depth links above it): meeting entity means the
     * link would close a cycle; a spawn (entity null: nothing links to it yet) can only make
     * a chain too deep. */
    kiln_entity cur = parent;
    int32_t depth = 0;
    for (;; depth++) {
        if ((cur == entity && entity) || kl_depth_refused(depth)) {
            snprintf(why, why_size, "making %s a child of %s would create a %s",
                     entity ? kiln_entity_format(entity, cb, sizeof cb) : "a new entity",
                     kiln_entity_format(parent, pb, sizeof pb),
                     cur == entity ? "cycle" : long_chain(world, st, cur));
            return KILN_ERR_INVALID_ARGUMENT;
        }
        bool dead;
        cur = kl_transform_parent_of(world, st, cur, rec, &dead);
        if (cur == KILN_NULL_ENTITY || !(rec = kl_record_of(world, cur))) break;
    }
    kiln_result r = subtree_refused(world, st, entity, parent, depth, why, why_size);
    if (r != KILN_OK) return r;
    /* a set in place moves no row: the children index reads the entity again */
    if (entity) kl_transform_note_relink(st, entity, parent);
    return KILN_OK;
}

/* ---- the Parent check over many stored links at once (bulk loads) ---- */

/* chain lengths are counted up to this many nodes: a parent with such a chain (or a cycle)
 * is KL_MAX_DEPTH deep or more, which kl_depth_refused refuses */
#define CHAIN_CAP (KL_MAX_DEPTH + 1)
#define MEMO_GENERATION ((1u << KILN_ENTITY_GENERATION_BITS) - 1u)
#define MEMO_IN_PROGRESS 511u            /* the length part of a slot on the walk now */

/* A slot's memo: the generation of the live entity it was seen with, and the length of that
 * entity's chain (1..CHAIN_CAP) above it; 0: not seen. The generation lets a memo answer for
 * a handle without reading its record. */
static inline uint32_t memo_make(kiln_entity e, uint32_t length) {
    return kiln_entity_generation(e) | length << KILN_ENTITY_GENERATION_BITS;
}

/* The memo of e's slot when it was seen as e, else 0. */
static inline uint32_t memo_of(const uint32_t *memo, uint32_t slots, kiln_entity e) {
    uint32_t idx = kiln_entity_index(e);
    uint32_t m = idx < slots ? memo[idx] : 0;
    return (m & MEMO_GENERATION) == (uint32_t)(e >> 32) ? m >> KILN_ENTITY_GENERATION_BITS : 0;
}

#if defined(__GNUC__)
#define CHAIN_COLD __attribute__((noinline))
#else
#define CHAIN_COLD
#endif

/* What a walk up the links reads, loaded once per check. */
typedef struct chain_walk {
    const kiln_world *world;
    kl_record *const *pages;
    kl_archetype *const *archetypes;
    kiln_component parent;
    uint32_t *memo;
    uint32_t slots;
} chain_walk;

/* Nodes in the chain from x (x itself, then its live parents, as kl_transform_parent_of walks
 * them: a dead or self link ends it), CHAIN_CAP for CHAIN_CAP or more or for a chain that runs
 * into a cycle; 0 when x is not alive. Off the check's hot loop: only a slot not yet
 * remembered gets here (each live entity once). */
static CHAIN_COLD uint32_t chain_length(const chain_walk *w, kiln_entity x) {
    uint32_t path[CHAIN_CAP];
    uint32_t *memo = w->memo;
    uint32_t depth = 0, base = 0;
    kiln_entity cur = x;
    for (;;) {
        uint32_t known = memo_of(memo, w->slots, cur);
        if (known == MEMO_IN_PROGRESS) return CHAIN_CAP; /* a cycle */
        if (known) {
            base = known;
            break;
        }
        /* kl_record_of, on the loaded pointers */
        uint32_t idx = kiln_entity_index(cur);
        if (idx >= w->slots) break;
        const kl_record *rec = &w->pages[idx >> KL_PAGE_BITS][idx & (KL_PAGE_SIZE - 1)];
        /* the whole high half of the handle against the generation: stray bits never match */
        uint64_t bits = kl_record_load(rec);
        if ((bits >> KL_PLACE_BITS) != (cur >> 32) || kl_bits_archetype(bits) >= KL_ARCHETYPES_MAX) break;
        const kl_archetype *arch = w->archetypes[kl_bits_archetype(bits)];
        if (depth == CHAIN_CAP) return CHAIN_CAP; /* too deep */
        memo[idx] = memo_make(cur, MEMO_IN_PROGRESS);
        path[depth++] = idx;
        const kl_column *pc = kl_archetype_column(arch, w->parent);
        if (!pc) break;
        kiln_entity next = ((const kiln_parent *)(pc->data + (size_t)kl_bits_row(bits) * pc->stride))->entity;
        if (next == cur) break;
        cur = next;
    }
    for (uint32_t k = depth; k-- > 0;) {
        base = base + 1 < CHAIN_CAP ? base + 1 : CHAIN_CAP;
        memo[path[k]] = (memo[path[k]] & MEMO_GENERATION) | base << KILN_ENTITY_GENERATION_BITS;
    }
    return base;
}

/* 1 when x is a live entity without a Parent (its chain is itself, now remembered), else 0:
 * the step most walks take (a parent that is a root), without chain_length's bookkeeping. */
static inline uint32_t root_length(const chain_walk *w, kiln_entity x) {
    uint32_t idx = kiln_entity_index(x);
    if (idx >= w->slots) return 0;
    const kl_record *rec = &w->pages[idx >> KL_PAGE_BITS][idx & (KL_PAGE_SIZE - 1)];
    uint64_t bits = kl_record_load(rec);
    if ((bits >> KL_PLACE_BITS) != (x >> 32) || kl_bits_archetype(bits) >= KL_ARCHETYPES_MAX) return 0;
    if (kl_archetype_slot(w->archetypes[kl_bits_archetype(bits)], w->parent) >= 0) return 0;
    w->memo[idx] = memo_make(x, 1);
    return 1;
}

/* Whether check_parent refuses parent for not being alive (see unissued_parent). */
static CHAIN_COLD bool dead_refused(const chain_walk *w, kiln_entity parent) {
    return !kl_record_of(w->world, parent) && unissued_parent(w->world, parent) != NULL;
}

/* check_parent over stored links: the walk up from each parent is remembered per slot, so
 * every chain is walked once. check_parent refuses a link when the chain from the parent
 * holds the entity (a cycle) or has more than KL_MAX_DEPTH nodes (a chain through the entity
 * is a cycle, so both come down to the chain's length), or when the entity's subtree would
 * end too deep. That last needs no look here: the rows checked are stored already, so the
 * deepest row of such a subtree is itself a row whose chain is too long, refused by both
 * (a load checks every row it brings, and only it can link under them). */
static int64_t check_parent_rows(const kiln_world *world, const kiln_entity *entities,
                                 const uint8_t *values, size_t stride, int64_t count, void *ctx) {
    (void)ctx;
    const kl_transform_state *st = kl_transform_state_of(world);
    if (!st) return count;
    kl_allocator *alloc = &((kiln_world *)(uintptr_t)world)->alloc; /* counted, not a change */
    uint32_t slots = kl_slot_count(world);
    size_t bytes = sizeof(uint32_t) * ((size_t)slots + 1);
    uint32_t *memo = kl_alloc(alloc, bytes);
    if (!memo) return -1;
    memset(memo, 0, bytes);
    chain_walk w = {world, atomic_load_explicit(&((kiln_world *)(uintptr_t)world)->pages, memory_order_acquire),
                    world->archetypes, st->ids.parent, memo, slots};
    /* the row before's entity and its chain length, kept in registers: a parent in the row
     * just before (a hierarchy stored depth first) is answered without reading back the memo
     * just written, which would chain every row to the one before through memory (at first
     * no handle: a value that met it would stop the pass, leaving its row to the hook) */
    kiln_entity last = ~(kiln_entity)0;
    uint32_t last_length = CHAIN_CAP;
    int64_t i = 0;
    for (; i < count; i++) {
        kiln_entity e = entities[i], parent;
        memcpy(&parent, values + (size_t)i * stride + offsetof(kiln_parent, entity), sizeof parent);
        uint32_t above;
        if (parent == last && e != parent && e != KILN_NULL_ENTITY) {
            above = last_length;
        } else {
            if (parent == KILN_NULL_ENTITY) continue;
            if (parent == e) break; /* (a spawn's null e goes on: its parent may be too deep) */
            /* the usual case: the parent's chain is remembered (it was a row before, or walked) */
            above = memo_of(memo, slots, parent);
            if (above == 0) above = root_length(&w, parent);
            if (above == 0 || above == MEMO_IN_PROGRESS) above = chain_length(&w, parent);
            if (above == 0 && dead_refused(&w, parent)) break;
        }
        if (kl_depth_refused((int64_t)above - 1)) break; /* above nodes: the parent is above - 1 deep */
        /* e (alive: its row is being checked) has a chain one longer: its children stop at it */
        if (e != KILN_NULL_ENTITY && kiln_entity_index(e) < slots) {
            memo[kiln_entity_index(e)] = memo_make(e, above + 1);
            last = e, last_length = above + 1;
        }
    }
    kl_free(alloc, memo, bytes);
    return i;
}

kiln_result kiln_transform_init(kiln_world *world, kiln_transform_ids *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_transform_state *found = kl_transform_state_of(world);
    if (found) {
        if (dest) *dest = found->ids;
        return KILN_OK;
    }
    if (kl_off_stage_thread(world)) return kl_fail_atfini_off_stage(world, "kiln_transform_init");
    kiln_transform_ids ids;
    kiln_result r;
    static const kiln_local_transform identity_local = {{0, 0, 0}, {0, 0, 0, 1}, {1, 1, 1}};
    if ((r = kiln_component_register(world, &(kiln_component_desc){
             .name = "Parent", .size = sizeof(kiln_parent), .fields = parent_fields,
             .field_count = 1, .check = check_parent}, &ids.parent)) != KILN_OK ||
        (r = kiln_component_register(world, &(kiln_component_desc){
             .name = "LocalTransform", .size = sizeof(kiln_local_transform),
             .fields = local_fields, .field_count = 3, .defaults = &identity_local},
             &ids.local)) != KILN_OK ||
        (r = kiln_component_register(world, &(kiln_component_desc){
             .name = "WorldTransform", .size = sizeof(kiln_world_transform), .align = 16,
             .fields = world_fields, .field_count = 1}, &ids.world)) != KILN_OK)
        return r;
    kl_component_set_check_rows(world, ids.parent, check_parent_rows);
    kl_transform_state *st = kl_alloc(&world->alloc, sizeof *st);
    if (!st) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_transform_init: out of memory");
    memset(st, 0, sizeof *st);
    st->relink_round = 1; /* zeroed slots are marked in no round */
    st->world = world;
    atomic_flag_clear(&st->links_lock);
    st->ids = ids;
    if ((r = kiln_query_create(world, &(kiln_query_desc){.with = {ids.local, ids.world},
                                                         .optional = {ids.parent}},
                               &st->compute)) != KILN_OK ||
        (r = kiln_query_create(world, &(kiln_query_desc){.with = {ids.local, ids.world},
                                                         .without = {ids.parent}},
                               &st->roots)) != KILN_OK ||
        (r = kiln_query_create(world, &(kiln_query_desc){.with = {ids.local}, .without = {ids.world}},
                               &st->missing)) != KILN_OK ||
        (r = kiln_query_create(world, &(kiln_query_desc){.with = {ids.parent}}, &st->linked)) !=
            KILN_OK ||
        (r = kiln_world_atfini(world, transform_fini, st)) != KILN_OK) {
        transform_fini(world, st);
        return r;
    }
    if (dest) *dest = ids;
    return KILN_OK;
}

bool kiln_transform_ids_get(const kiln_world *world, kiln_transform_ids *dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    const kl_transform_state *st = kl_transform_state_of(world);
    if (!st) return false;
    *dest = st->ids;
    return true;
}

kiln_entity kl_transform_parent_of(const kiln_world *world, const kl_transform_state *st,
                                   kiln_entity e, const kl_record *rec, bool *link_dead) {
    *link_dead = false;
    const kl_column *pc = kl_archetype_column(world->archetypes[kl_record_archetype(rec)], st->ids.parent);
    if (!pc) return KILN_NULL_ENTITY;
    kiln_entity p = ((const kiln_parent *)(pc->data + (size_t)kl_record_row(rec) * pc->stride))->entity;
    if (p == e || !kl_record_of(world, p)) {
        *link_dead = true;
        return KILN_NULL_ENTITY;
    }
    return p;
}

/* ---- hierarchy ------------------------------------------------------------------------- */

kiln_result kiln_transform_set_parent(kiln_world *world, kiln_entity child, kiln_entity parent) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_transform_state *st = kl_transform_state_of(world);
    if (!st) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "kiln_transform_set_parent: call kiln_transform_init first");
    /* the walk below reads the Parent values up from parent */
    kl_guard_check(world, "kiln_transform_set_parent", KL_READ, st->ids.parent, 0);
    char cb[24], pb[24];
    /* Deferred, an entity spawned earlier in the section is reserved, not alive yet: it takes
     * links as kiln_add gives it components (the queue re-checks them when it lands). */
    bool deferred = kiln_is_deferred(world);
    if (!kl_record_of(world, child) && !(deferred && kl_record_reserved(world, child)))
        return kl_fail_dead_as(world, "kiln_transform_set_parent", "child", child);
    if (parent == KILN_NULL_ENTITY) return kiln_remove(world, child, st->ids.parent, NULL);
    const kl_record *rec = kl_record_of(world, parent);
    if (!rec && !(deferred && kl_record_reserved(world, parent))) {
        const char *detail = unissued_parent(world, parent);
        char why[96];
        if (detail) refuse_unissued(parent, detail, why, sizeof why);
        else snprintf(why, sizeof why, "parent %s is not alive", kiln_entity_format(parent, pb, sizeof pb));
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "kiln_transform_set_parent: %s", why);
    }
    /* Walk up from the new parent (a reserved one has no links yet): meeting child means the
     * link would close a cycle. */
    kiln_entity cur = parent;
    int32_t depth = 0;
    for (; rec; depth++) {
        if (cur == child || kl_depth_refused(depth))
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "kiln_transform_set_parent: making %s a child of %s would create a %s",
                           kiln_entity_format(child, cb, sizeof cb),
                           kiln_entity_format(parent, pb, sizeof pb),
                           cur == child ? "cycle" : long_chain(world, st, cur));
        bool dead;
        cur = kl_transform_parent_of(world, st, cur, rec, &dead);
        rec = cur ? kl_record_of(world, cur) : NULL;
    }
    if (cur == child) /* a reserved parent linked to itself */
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_transform_set_parent: entity %s cannot be its own parent",
                       kiln_entity_format(child, cb, sizeof cb));
    char why[KL_ERROR_SIZE - 64];
    /* the walk ended one past the parent's depth (a reserved parent: none, a root) */
    kiln_result r = subtree_refused(world, st, child, parent, depth > 0 ? depth - 1 : 0, why, sizeof why);
    if (r != KILN_OK) return kl_fail(world, r, "kiln_transform_set_parent: %s", why);
    kiln_parent value = {parent};
    return kiln_add(world, child, st->ids.parent, &value);
}

static void propagate_system(const kiln_system_ctx *ctx) {
    /* Missing WorldTransforms are queued into this system's own buffer, on any thread. */
    kiln_result r = kl_transform_propagate(ctx->world, ctx->commands, ctx->jobs, NULL);
    /* A system returns nothing: the failure waits for kiln_transform_system_result (the
     * world error is this thread's, which the caller of the schedule may not be). One run
     * at a time: the schedule runs a system once per frame. */
    kl_transform_state *st = kl_transform_state_of(ctx->world);
    if (r != KILN_OK && st->system_result == KILN_OK) {
        st->system_result = r;
        snprintf(st->system_error, sizeof st->system_error, "%s", kiln_world_error(ctx->world));
    }
}

kiln_result kiln_transform_system_result(kiln_world *world, char *dest, size_t dest_size) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (KL_UNLIKELY(dest == NULL && dest_size > 0))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_transform_system_result: dest is NULL with dest_size "
                       "%zu; the result stays for a later call", dest_size);
    kl_transform_state *st = kl_transform_state_of(world);
    kiln_result r = st ? st->system_result : KILN_OK;
    if (dest_size > 0) snprintf(dest, dest_size, "%s", r != KILN_OK ? st->system_error : "");
    if (st) st->system_result = KILN_OK;
    return r;
}

void kiln_transform_system_desc(const kiln_world *world, kiln_system_desc *dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    const kl_transform_state *st = kl_transform_state_of(world);
    KILN_ASSERT(st != NULL, "kiln_transform_init first");
    memset(dest, 0, sizeof *dest);
    dest->name = "propagate_transforms";
    dest->run = propagate_system;
    dest->reads[0] = st->ids.parent;
    dest->reads[1] = st->ids.local;
    dest->writes[0] = st->ids.world;
}
