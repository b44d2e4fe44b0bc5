/* children.c: the transform addon's children index and recursive despawn. The index links each
 * entity with a Parent into its parent's list of children (transform_state.h's kl_child_node),
 * catching up with what changed since it last read (kl_follow: rows that came into the linked
 * archetypes, rows stamped since) and with values set in place (the Parent check hook notes
 * them). A link the index holds may have gone since (a despawn, a Parent removed or changed):
 * the reads that meet it check it against the child's Parent and take it out. Moving between
 * archetypes changes no link: reading a moved row again finds it linked already. Each listed
 * entity keeps a bound of its children's subtrees' heights, raised up the chain by every link
 * of a child with children, so the depth check of a new link reads it instead of walking the
 * subtree. */
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "component.h"
#include "defer.h"
#include "guard.h"
#include "query.h"
#include "transform_links.h"
#include "transform_state.h"

/* ---- the lists ------------------------------------------------------------------------------ */

/* Makes room for entity slot i; new nodes are empty (zero). False when out of memory. */
static bool links_room(kiln_world *world, kl_transform_state *st, uint32_t i) {
    return kl_grow_zeroed(&world->alloc, (void **)&st->links, &st->link_cap, (int64_t)i + 1, sizeof(kl_child_node), 64);
}

/* Takes the link of the child at slot i (stored plus one) out of its list. */
static void unlink_child(kl_transform_state *st, uint32_t i) {
    kl_child_node *n = &st->links[i - 1];
    if (n->prev) st->links[n->prev - 1].next = n->next;
    else {
        kl_child_node *h = &st->links[kiln_entity_index(n->parent)];
        if (h->listed == n->parent && h->first == i) h->first = n->next;
    }
    if (n->next) st->links[n->next - 1].prev = n->prev;
    n->child = n->parent = KILN_NULL_ENTITY;
    n->next = n->prev = 0;
    st->link_count--;
}

/* The height bound of the subtree listed at slot node n (one more than its children's). */
static int32_t listed_height(const kl_child_node *n) { return n->first ? n->child_height + 1 : 0; }

/* The height bound of e's subtree (0 when its slot lists no children of e). */
static int32_t height_of(const kl_transform_state *st, kiln_entity e) {
    uint32_t i = kiln_entity_index(e);
    return (int64_t)i < st->link_cap && st->links[i].listed == e ? listed_height(&st->links[i]) : 0;
}

/* A child_height of at least below (capped at KL_MAX_DEPTH - 1: a subtree bound of
 * KL_MAX_DEPTH, more than any check's limit, means that many or more). */
static uint16_t capped_height(int32_t below) {
    return (uint16_t)(below < KL_MAX_DEPTH - 1 ? below : KL_MAX_DEPTH - 1);
}

/* A child of parent has a subtree grown to below links tall: raises the bounds up the chain
 * from parent so each listed entity's stays one more than each of its children's. Stops at
 * the first already high enough; a cycle (links written through pointers) stops at the cap,
 * and every chain longer than that is one. */
static void raise_heights(kl_transform_state *st, kiln_entity parent, int32_t below) {
    for (int32_t step = 0; parent && step <= KL_MAX_DEPTH; step++) {
        uint32_t pi = kiln_entity_index(parent);
        if ((int64_t)pi >= st->link_cap) return;
        kl_child_node *n = &st->links[pi];
        uint16_t want = capped_height(below);
        if (n->listed != parent || n->child_height >= want) return;
        n->child_height = want;
        below = want + 1;
        parent = n->child == parent ? n->parent : KILN_NULL_ENTITY;
    }
}

/* 2 for a live entity, 1 for a handle reserved by a deferred spawn, else 0. */
static int handle_rank(const kiln_world *world, kiln_entity e) {
    return !e ? 0 : kl_record_of(world, e) ? 2 : kl_record_reserved(world, e) ? 1 : 0;
}

/* Links child under parent (KILN_NULL_ENTITY: under none), replacing the link its slot held.
 * False when out of memory, the index unchanged. */
static bool link_child(kiln_world *world, kl_transform_state *st, kiln_entity child, kiln_entity parent) {
    uint32_t ci = kiln_entity_index(child), pi = kiln_entity_index(parent);
    if ((int64_t)ci < st->link_cap && st->links[ci].child == child && st->links[ci].parent == parent)
        return true; /* linked already (a row read again) */
    if (!links_room(world, st, parent && pi > ci ? pi : ci)) return false;
    kl_child_node *n = &st->links[ci];
    if (n->child) unlink_child(st, ci + 1);
    /* a self link (written through a pointer) is a root, as everything else reads it: listed
     * as its own child, a walk of children would never end */
    if (!parent || parent == child) return true;
    kl_child_node *h = &st->links[pi];
    n->child = child;
    n->parent = parent;
    n->prev = n->next = 0;
    st->link_count++;
    if (h->listed != parent) {
        /* The slot's list is for the one of its handles that is or will be alive: a link to
         * a dead parent (or a handle never issued) is listed nowhere then, as no one asks for
         * that parent's children; else the list of the handle there before loses its head. */
        int held = handle_rank(world, h->listed);
        if (held > 0 && handle_rank(world, parent) < held) return true;
        h->listed = parent;
        h->first = 0;
        h->child_height = 0;
    }
    bool grew = !h->first; /* parent was a leaf: its subtree is one link tall or more now */
    n->next = h->first;
    if (h->first) st->links[h->first - 1].prev = ci + 1;
    h->first = ci + 1;
    int32_t below = n->listed == child ? listed_height(n) : 0; /* the usual new leaf: 0 */
    if (below > h->child_height) {
        h->child_height = capped_height(below);
        grew = true;
    }
    if (grew && h->child == parent) raise_heights(st, h->parent, h->child_height + 1);
    return true;
}

/* The Parent value of a live entity, KILN_NULL_ENTITY when it has none; false when dead. */
static bool parent_value(const kiln_world *world, const kl_transform_state *st, kiln_entity e,
                         kiln_entity *dest) {
    const kl_record *rec = kl_record_of(world, e);
    *dest = KILN_NULL_ENTITY;
    if (!rec) return false;
    const kl_column *pc = kl_archetype_column(world->archetypes[kl_record_archetype(rec)], st->ids.parent);
    if (pc) *dest = ((const kiln_parent *)(pc->data + (size_t)kl_record_row(rec) * pc->stride))->entity;
    return true;
}

/* Whether the link at slot i (plus one) still stands: its child alive and linking to its
 * parent. One that does not is taken out (a link written since comes back through a catch-up). */
static bool link_stands(const kiln_world *world, kl_transform_state *st, uint32_t i) {
    const kl_child_node *n = &st->links[i - 1];
    kiln_entity now;
    if (parent_value(world, st, n->child, &now) && now == n->parent) return true;
    unlink_child(st, i);
    return false;
}

/* ---- catching up ---------------------------------------------------------------------------- */

static bool clear_links(void *ctx) {
    kl_transform_state *st = ctx;
    if (st->link_cap) memset(st->links, 0, sizeof(kl_child_node) * (size_t)st->link_cap);
    st->link_count = 0;
    return true;
}

static bool take_link(void *ctx, const kl_archetype *a, const kl_column *col, int32_t r, bool all) {
    kl_transform_state *st = ctx;
    (void)all;
    return link_child(st->world, st, a->entities[r], ((const kiln_parent *)col->data)[r].entity);
}

/* Links the entities set in place since the last catch-up under the parents they hold now;
 * their adopting marks expire. False when out of memory (the caller gives up the index). */
static bool drain_relinks(kiln_world *world, kl_transform_state *st) {
    if (st->relink_count > 0 && ++st->relink_round == 0) st->relink_round = 1;
    for (; st->relink_count > 0; st->relink_count--) {
        kiln_entity e = st->relink[st->relink_count - 1], parent;
        if (parent_value(world, st, e, &parent) && !link_child(world, st, e, parent)) return false;
    }
    return true;
}

void kl_transform_note_relink(kl_transform_state *st, kiln_entity child, kiln_entity parent) {
    kl_spin_lock(&st->links_lock);
    kiln_world *world = st->world;
    uint32_t pi = kiln_entity_index(parent);
    /* Many more than the links held: a world the checks read the index of (see
     * kl_transform_height) links them now (the values before this one landed, or did not),
     * sparing the next check a rebuild; a smaller one reads every row at the next look-up. */
    if (st->links_follow.valid && st->relink_count >= 1024 + st->link_count &&
        (world->alive < KL_MAX_DEPTH || !drain_relinks(world, st)))
        st->links_follow.valid = false;
    if (!st->links_follow.valid) {
        st->relink_count = 0; /* the next catch-up reads every row */
    } else if ((st->relink_count == st->relink_cap &&
                !kl_grow(&world->alloc, (void **)&st->relink, &st->relink_cap, st->relink_count + 1,
                         sizeof(kiln_entity), 16)) ||
               (parent && (int64_t)pi >= st->link_cap && !links_room(world, st, pi))) {
        st->links_follow.valid = false; /* no memory: reading every row again instead */
        st->relink_count = 0;
    } else {
        st->relink[st->relink_count++] = child;
        if (parent) st->links[pi].adopting = st->relink_round;
    }
    kl_spin_unlock(&st->links_lock);
}

void kl_transform_links_invalidate(kiln_world *world) {
    kl_transform_state *st = kl_transform_state_of(world);
    if (!st) return;
    kl_spin_lock(&st->links_lock);
    st->links_follow.valid = false;
    kl_spin_unlock(&st->links_lock);
}

int64_t kl_transform_links_read(kiln_world *world) {
    kl_transform_state *st = kl_transform_state_of(world);
    if (!st) return 0;
    kl_spin_lock(&st->links_lock);
    int64_t n = st->links_follow.rows_read;
    kl_spin_unlock(&st->links_lock);
    return n;
}

/* Brings the children index up to date: the rows the linked archetypes took in or had
 * stamped (see kl_follow), and the values set in place since the last catch-up. False when
 * out of memory, the next catch-up then reading every row. */
static bool catch_up(kiln_world *world, kl_transform_state *st) {
    kl_follow_desc d = {.query = st->linked, .clear = clear_links, .take = take_link, .ctx = st,
                        .rebuild_over = 64 + st->link_count / 2};
    if (kl_follow_catch_up(world, &st->links_follow, &d) && drain_relinks(world, st)) return true;
    st->links_follow.valid = false;
    st->relink_count = 0;
    return false;
}

/* catch_up for call, which reads Parent: the world error names it when out of memory. */
static kiln_result refresh_children(kiln_world *world, kl_transform_state *st, const char *call) {
    kl_guard_check(world, call, KL_READ, st->ids.parent, 0);
    if (catch_up(world, st)) return KILN_OK;
    return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Sifts dest[at] down the max-heap dest[0, n). */
static void sift_down(kiln_entity *dest, int32_t n, int32_t at) {
    for (;;) {
        int32_t big = at, l = 2 * at + 1, r = l + 1;
        if (l < n && dest[l] > dest[big]) big = l;
        if (r < n && dest[r] > dest[big]) big = r;
        if (big == at) return;
        kiln_entity t = dest[at];
        dest[at] = dest[big], dest[big] = t;
        at = big;
    }
}

static int compare_entities(const void *a, const void *b) {
    kiln_entity x = *(const kiln_entity *)a, y = *(const kiln_entity *)b;
    return (x > y) - (x < y);
}

/* The children parent's list holds that still stand (the others taken out): how many, with
 * the capacity smallest by handle written to dest in order. No memory: a heap in dest keeps
 * the smallest while the list holds more. */
static int64_t gather(kiln_world *world, kl_transform_state *st, kiln_entity parent, kiln_entity *dest,
                      int32_t capacity) {
    uint32_t pi = kiln_entity_index(parent);
    if ((int64_t)pi >= st->link_cap || st->links[pi].listed != parent) return 0;
    int64_t n = 0;
    for (uint32_t i = st->links[pi].first, next; i; i = next) {
        next = st->links[i - 1].next; /* before link_stands may take i out */
        if (!link_stands(world, st, i)) continue;
        kiln_entity c = st->links[i - 1].child;
        if (n < capacity) {
            dest[n] = c;
            if (n + 1 == capacity) /* full: a max-heap from here on */
                for (int32_t k = capacity / 2 - 1; k >= 0; k--) sift_down(dest, capacity, k);
        } else if (capacity > 0 && c < dest[0]) {
            dest[0] = c;
            sift_down(dest, capacity, 0);
        }
        n++;
    }
    int64_t kept = n < capacity ? n : capacity;
    if (kept > 16) qsort(dest, (size_t)kept, sizeof(kiln_entity), compare_entities);
    else /* the usual few: an insertion sort costs less than qsort's calls */
        for (int64_t i = 1; i < kept; i++)
            for (int64_t k = i; k > 0 && dest[k - 1] > dest[k]; k--) {
                kiln_entity t = dest[k];
                dest[k] = dest[k - 1], dest[k - 1] = t;
            }
    return n;
}

/* The first link (slot plus one) in e's list of children, 0: none. */
static uint32_t first_link(const kl_transform_state *st, kiln_entity e) {
    uint32_t i = kiln_entity_index(e);
    return (int64_t)i < st->link_cap && st->links[i].listed == e ? st->links[i].first : 0;
}

/* How many links below root its deepest descendant is, limit + 1 when more, from the caught
 * up index. Depth first, keeping the next link to read at each level: no memory but those
 * limit + 1 slots, and a leaf costs one look at its slot. A child that is root (a cycle
 * closed by writes through pointers, which root's new link breaks) is not followed; every
 * other descendant's chain then leads up to root, so each is met once. Each entity whose list
 * the walk reads to its end gets its exact height as its bound (the links that no longer
 * stand are out of its list by then), unless the walk met a cycle. */
static int32_t height_below(const kiln_world *world, kl_transform_state *st, kiln_entity root, int32_t limit) {
    uint32_t next[KL_MAX_DEPTH + 1]; /* next[k]: the next link to read k + 1 links below root */
    uint32_t at[KL_MAX_DEPTH + 1];   /* at[k]: the slot of the entity whose list next[k] reads */
    int32_t tall[KL_MAX_DEPTH + 1];  /* tall[k]: the height found so far below that entity */
    int32_t top = 0, height = 0;
    bool cycle = false;
    if (!(next[0] = first_link(st, root))) return 0;
    at[0] = kiln_entity_index(root);
    tall[0] = 0;
    while (top >= 0) {
        uint32_t i = next[top];
        if (!i) { /* at[top]'s list read to its end: its height is known */
            if (!cycle) st->links[at[top]].child_height = (uint16_t)(tall[top] > 0 ? tall[top] - 1 : 0);
            if (top == 0) height = tall[0];
            else if (tall[top] + 1 > tall[top - 1]) tall[top - 1] = tall[top] + 1;
            top--;
            continue;
        }
        next[top] = st->links[i - 1].next; /* before link_stands may take i out */
        st->links_walked++;
        if (!link_stands(world, st, i)) continue;
        kiln_entity child = st->links[i - 1].child;
        if (child == root) {
            cycle = true;
            continue;
        }
        if (top + 1 > limit) return limit + 1;
        if (tall[top] < 1) tall[top] = 1;
        uint32_t first = first_link(st, child);
        if (first) { /* top + 1 <= limit < KL_MAX_DEPTH + 1 */
            next[++top] = first;
            at[top] = kiln_entity_index(child);
            tall[top] = 0;
        }
    }
    return height;
}

/* height_below without the index (no memory to catch it up): from every entity with a
 * Parent, the walk up to root, limit + 1 links at most. Slower, but it needs nothing. */
static int32_t height_by_walks(const kiln_world *world, kl_transform_state *st, kiln_entity root, int32_t limit) {
    int32_t height = 0;
    kl_column *col;
    for (int32_t m = 0, n = kl_query_match_count(st->linked); m < n; m++) {
        const kl_archetype *a = kl_query_match_at(st->linked, m, 0, &col);
        for (int32_t r = 0; r < a->count; r++) {
            kiln_entity cur = a->entities[r], up;
            for (int32_t d = 0; d <= limit + 1 && cur != root; d++) {
                st->links_walked++;
                if (!parent_value(world, st, cur, &up) || up == cur || !kl_record_of(world, up)) break;
                cur = up;
                if (d + 1 > height && up == root && (height = d + 1) > limit) return limit + 1;
            }
        }
    }
    return height;
}

int32_t kl_transform_height(kiln_world *world, kl_transform_state *st, kiln_entity e, int32_t limit) {
    KILN_ASSERT(limit >= 0 && limit < KL_MAX_DEPTH, "limit out of range");
    /* An entity n deep ends a chain of n + 1: with e (perhaps reserved, not counted) no more
     * than the limit past the live ones, no chain can pass it (the usual small world). */
    if (world->alive < KL_MAX_DEPTH) return 0;
    kl_spin_lock(&st->links_lock);
    /* A leaf (the usual case) is known without a catch-up when nothing moved since the last:
     * its children are listed, or named by a value set in place since (adopting). */
    uint32_t i = kiln_entity_index(e);
    const kl_child_node *n = (int64_t)i < st->link_cap ? &st->links[i] : NULL;
    int32_t height = 0;
    if (kl_follow_current(world, &st->links_follow) &&
        (!n || ((n->listed != e || !n->first) && n->adopting != st->relink_round)))
        height = 0;
    else if (!catch_up(world, st)) height = height_by_walks(world, st, e, limit);
    else if ((height = height_of(st, e)) > limit) height = height_below(world, st, e, limit);
    kl_spin_unlock(&st->links_lock);
    return height;
}

int64_t kiln_transform_links_walked(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_transform_state *st = kl_transform_state_of(world);
    if (!st) return 0;
    kl_spin_lock(&st->links_lock); /* a system's check may be walking on another thread */
    int64_t n = st->links_walked;
    kl_spin_unlock(&st->links_lock);
    return n;
}

int32_t kiln_transform_children(kiln_world *world, kiln_entity parent, kiln_entity *dest, int32_t capacity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (KL_UNLIKELY(dest == NULL && capacity > 0)) {
        kl_refuse_dest(world, "kiln_transform_children", capacity);
        return -1;
    }
    kl_transform_state *st = kl_transform_state_of(world);
    if (!st || !kl_record_of(world, parent)) return 0;
    kl_spin_lock(&st->links_lock);
    int64_t n = refresh_children(world, st, "kiln_transform_children") == KILN_OK
                    ? gather(world, st, parent, dest, capacity) : -1;
    kl_spin_unlock(&st->links_lock);
    return n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

/* Root and its descendants, breadth first, into a list of the call's own (*dest, bytes long):
 * how many, or -1 out of memory (the world error says so). Every entity has one link, so the
 * walk meets it once; only root can come back (Parent links written through a pointer closing
 * a cycle through it). Own memory: a main-thread system may run this while the propagation
 * system uses the addon's scratch on the pool. */
static int64_t subtree(kiln_world *world, kl_transform_state *st, kiln_entity root, kiln_entity **dest,
                       size_t *bytes) {
    const char *call = "kiln_transform_despawn_recursive";
    if (refresh_children(world, st, call) != KILN_OK) return -1;
    int64_t total = st->link_count + 1;
    *bytes = sizeof(kiln_entity) * (size_t)total;
    kiln_entity *list = *dest = kl_alloc(&world->alloc, *bytes);
    if (!list) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call), -1;
    int64_t head = 0, n = 0;
    list[n++] = root;
    while (head < n) {
        kiln_entity e = list[head++];
        uint32_t pi = kiln_entity_index(e);
        if ((int64_t)pi >= st->link_cap || st->links[pi].listed != e) continue;
        for (uint32_t i = st->links[pi].first, next; i && n < total; i = next) {
            next = st->links[i - 1].next;
            if (link_stands(world, st, i) && st->links[i - 1].child != root) list[n++] = st->links[i - 1].child;
        }
    }
    return n;
}

/* The refusal, naming call, for the first of list (n) that holds one of keep (count). */
static kiln_result kept(kiln_world *world, const char *call, const kiln_entity *list, int64_t n,
                        const kiln_component *keep, int32_t count) {
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = 0; k < count; k++)
            if (kiln_has(world, list[i], keep[k])) {
                char eb[24], cb[32];
                return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: entity %s holds %s", call,
                               kiln_entity_format(list[i], eb, sizeof eb),
                               kl_component_name(world, keep[k], cb, sizeof cb));
            }
    return KILN_OK;
}

/* Both despawn_recursive calls, named call in messages. */
static kiln_result despawn_tree(kiln_world *world, const char *call, kiln_entity root, const kiln_component *keep,
                                int32_t count) {
    KILN_ASSERT(world != NULL, "world is NULL");
    KILN_ASSERT(count >= 0 && (keep != NULL || count == 0), "keep is NULL or count negative");
    kl_transform_state *st = kl_transform_state_of(world);
    /* spawned earlier in this deferred section: nothing links to it yet but queued links */
    if (!kl_record_of(world, root) && kiln_is_deferred(world) && kl_record_reserved(world, root))
        return kl_defer_despawn_unless(world, call, root, keep, count);
    if (!kl_record_of(world, root)) return kl_fail_dead(world, call, root);
    if (!st) {
        kiln_result r = kept(world, call, &root, 1, keep, count);
        return r != KILN_OK ? r : kiln_despawn_unless(world, root, keep, count);
    }
    kiln_entity *list;
    size_t bytes;
    kl_spin_lock(&st->links_lock);
    int64_t n = subtree(world, st, root, &list, &bytes);
    kl_spin_unlock(&st->links_lock);
    if (n < 0) return KILN_ERR_OUT_OF_MEMORY; /* the world error says so */
    kiln_result r = kept(world, call, list, n, keep, count);
    /* Deepest first, so no child ever sees a dead parent while its subtree is still alive.
     * Deferred, the despawns are queued: one that runs out of memory takes back those queued
     * before it, so the call leaves nothing behind. */
    bool deferred = kiln_is_deferred(world);
    int64_t mark = deferred ? kl_defer_mark(world) : 0;
    for (int64_t i = n - 1; i >= 0 && r == KILN_OK; i--) {
        r = deferred ? kl_defer_despawn_unless(world, call, list[i], keep, count) : kiln_despawn(world, list[i]);
        if (r != KILN_OK && deferred) kl_defer_rollback(world, mark);
    }
    kl_free(&world->alloc, list, bytes);
    return r;
}

kiln_result kiln_transform_despawn_recursive(kiln_world *world, kiln_entity root) {
    return despawn_tree(world, "kiln_transform_despawn_recursive", root, NULL, 0);
}

kiln_result kiln_transform_despawn_recursive_unless(kiln_world *world, kiln_entity root, const kiln_component *keep,
                                                    int32_t count) {
    return despawn_tree(world, "kiln_transform_despawn_recursive_unless", root, keep, count);
}
