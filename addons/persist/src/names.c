/* names.c: unique entity names: the Name component, its check hook, and a hash index from name
 * to entity. Invariant: every live entity with a Name has an entry (hash of its name, entity)
 * once the index has caught up (catch_up); entries left by renames, removals and despawns may
 * stay, as a look-up verifies each candidate against the entity's Name. Catching up reads only
 * what changed: rows appended to an archetype since it was last read, an archetype whose rows
 * were also taken out read by row tick, and (from the next tick on) values written in place. */
#include <stdio.h>
#include <string.h>

#include "archetype.h"
#include "persist_internal.h"
#include "query.h"

typedef struct name_slot {
    uint64_t hash;       /* 0: empty */
    kiln_entity entity;
} name_slot;

typedef struct name_state {
    kiln_world *world;
    kiln_component id;
    kiln_query *query;      /* entities with a Name */
    name_slot *slots;
    int64_t cap, used;      /* cap: a power of two, at most half used */
    kl_rows_mark *seen;     /* by archetype id: each as last read */
    int64_t seen_cap;
    /* the world tick and structure version at the last catch-up: a name that entered since
     * was stamped at that tick or later */
    kiln_tick caught;
    uint64_t caught_version;
    bool valid;
} name_state;

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a, never 0 below */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h | 1;
}

static void names_fini(kiln_world *world, void *ctx) {
    name_state *st = ctx;
    kiln_query_destroy(st->query);
    kl_free(&world->alloc, st->slots, sizeof(name_slot) * (size_t)st->cap);
    kl_free(&world->alloc, st->seen, sizeof(kl_rows_mark) * (size_t)st->seen_cap);
    kl_free(&world->alloc, st, sizeof *st);
}

static name_state *state_of(const kiln_world *world) {
    return kiln_world_atfini_get(world, names_fini);
}

static const char *name_of(const kiln_world *world, const name_state *st, kiln_entity e) {
    const kiln_name *n = kiln_get(world, e, st->id);
    /* a text without its end got past the check (kiln_get_mut): it is no name */
    return n && n->text[0] && memchr(n->text, 0, sizeof n->text) ? n->text : NULL;
}

/* Inserts (hash, e); the table must have room. */
static void insert(name_state *st, uint64_t h, kiln_entity e) {
    uint64_t i = h & (uint64_t)(st->cap - 1);
    while (st->slots[i].hash) i = (i + 1) & (uint64_t)(st->cap - 1);
    st->slots[i] = (name_slot){h, e};
    st->used++;
}

/* Inserts (hash, e) unless there; the table must have room. */
static void insert_new(name_state *st, uint64_t h, kiln_entity e) {
    uint64_t mask = (uint64_t)(st->cap - 1), i = h & mask;
    for (; st->slots[i].hash; i = (i + 1) & mask)
        if (st->slots[i].hash == h && st->slots[i].entity == e) return;
    st->slots[i] = (name_slot){h, e};
    st->used++;
}

/* The name in a Name value, ended ("" when the value has none). */
static void text_of(const kiln_name *n, char text[KILN_NAME_MAX + 1]) {
    memcpy(text, n->text, KILN_NAME_MAX);
    text[KILN_NAME_MAX] = 0;
}

/* Takes (hash, e) out, when there, shifting the entries after it back (linear probing keeps
 * no tombstones), so renaming an entity leaves one entry for it, not one per name it had. */
static void erase(name_state *st, uint64_t h, kiln_entity e) {
    if (!st->cap) return;
    uint64_t mask = (uint64_t)(st->cap - 1), i = h & mask;
    while (st->slots[i].hash && !(st->slots[i].hash == h && st->slots[i].entity == e)) i = (i + 1) & mask;
    if (!st->slots[i].hash) return;
    for (uint64_t j = (i + 1) & mask; st->slots[j].hash; j = (j + 1) & mask) {
        uint64_t home = st->slots[j].hash & mask;
        /* the entry at j may move to i unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            st->slots[i] = st->slots[j];
            i = j;
        }
    }
    st->slots[i] = (name_slot){0, 0};
    st->used--;
}

/* Makes room for need entries at half load; false when out of memory (index invalid). */
static bool reserve(name_state *st, int64_t need) {
    if (need * 2 <= st->cap) return true;
    int64_t cap = 64;
    while (cap < need * 2) cap *= 2;
    name_slot *slots = kl_alloc(&st->world->alloc, sizeof(name_slot) * (size_t)cap);
    if (!slots) return false;
    memset(slots, 0, sizeof(name_slot) * (size_t)cap);
    name_slot *old = st->slots;
    int64_t old_cap = st->cap;
    st->slots = slots, st->cap = cap, st->used = 0;
    for (int64_t i = 0; i < old_cap; i++)
        if (old[i].hash) insert(st, old[i].hash, old[i].entity);
    kl_free(&st->world->alloc, old, sizeof(name_slot) * (size_t)old_cap);
    return true;
}

/* Makes room to remember archetype id (new marks zeroed: empty); false when out of memory. */
static bool seen_room(name_state *st, uint32_t id) {
    int64_t old = st->seen_cap;
    if ((int64_t)id < old) return true;
    if (!kl_grow(&st->world->alloc, (void **)&st->seen, &st->seen_cap, (int64_t)id + 1, sizeof(kl_rows_mark), 16))
        return false;
    memset(st->seen + old, 0, sizeof(kl_rows_mark) * (size_t)(st->seen_cap - old));
    return true;
}

/* Reads archetype a (its Name column col) into the index: every row when all, else the rows
 * appended since it was last read, or, when rows were also taken out (an appended row may
 * have moved into a hole) or values were written in place (scan), every row stamped since the
 * last catch-up. */
typedef enum read_result { READ_FAILED, READ_DONE, READ_REBUILD } read_result;

/* The first row in [r, end) stamped at since or later (as rows store ticks), else end; rows
 * go 16 at a time through a loop of fixed count, which the compiler turns into vector code. */
static int32_t next_stamped(const kiln_row_tick *ticks, int32_t r, int32_t end, kiln_row_tick since) {
    for (; r + 16 <= end; r += 16) {
        int any = 0;
        for (int k = 0; k < 16; k++) any |= ticks[r + k] >= since;
        if (any) break;
    }
    while (r < end && ticks[r] < since) r++;
    return r;
}

static read_result read_archetype(name_state *st, const kl_archetype *a, const kl_column *col, bool all,
                                  bool scan) {
    if (!seen_room(st, a->id)) return READ_FAILED;
    kl_rows_mark *s = &st->seen[a->id];
    int32_t from = a->count;                     /* rows from here on are taken in */
    int64_t pushed = kl_rows_came_since(a, *s);
    if (all) from = 0;
    else if (pushed > 0 && a->removed == s->removed) from = s->count;
    else if (pushed > 0) scan = true;
    const kiln_name *names = (const kiln_name *)col->data;
    /* a row's tick at least the last catch-up's, as rows store it (tick - base); a tick older
     * than the base reads as the base (kiln_row_tick), so every row then qualifies */
    kiln_tick base = st->world->tick_base;
    kiln_row_tick since = st->caught > base ? (kiln_row_tick)(st->caught - base) : 0;
    if (scan) { /* most names stamped since (all written this tick, say): a rebuild is cheaper */
        int64_t stamped = 0;
        for (int32_t r = 0; r < from; r = next_stamped(col->ticks, r + 1, from, since))
            stamped += col->ticks[r] >= since; /* r = 0 may not be stamped */
        if (stamped > 64 + st->used / 2) return READ_REBUILD;
    }
    int32_t r = scan ? next_stamped(col->ticks, 0, from, since) : from;
    for (; r < a->count; r = r + 1 < from ? next_stamped(col->ticks, r + 1, from, since) : r + 1) {
        char text[KILN_NAME_MAX + 1];
        text_of(&names[r], text);
        if (!text[0]) continue;
        if (!reserve(st, st->used + 1)) return READ_FAILED;
        if (all) insert(st, hash_name(text), a->entities[r]); /* each entity once, table cleared */
        else insert_new(st, hash_name(text), a->entities[r]);
    }
    *s = kl_rows_mark_of(a);
    return READ_DONE;
}

/* Brings the index up to date (see the invariant at the top): from scratch when it is not
 * valid or holds more stale entries than live ones, else reading only what changed. Reads
 * the archetypes directly: an iteration would land what the world has queued when it ended,
 * and this runs inside check hooks. False when out of memory (the index is then invalid). */
static bool catch_up(name_state *st) {
    kiln_world *world = st->world;
    if (st->valid && world->tick == st->caught && world->structure_version == st->caught_version)
        return true; /* nothing moved; values written in place this tick wait for the next */
    bool all = !st->valid || st->used > 2 * kiln_query_count(st->query) + 64;
    bool new_tick = world->tick != st->caught;
    st->valid = false;
again:
    if (all) {
        if (!reserve(st, kiln_query_count(st->query) + 1)) return false;
        if (st->cap) memset(st->slots, 0, sizeof(name_slot) * (size_t)st->cap);
        st->used = 0;
    }
    for (int32_t i = 0, n = kl_query_match_count(st->query); i < n; i++) {
        kl_column *col;
        const kl_archetype *a = kl_query_match_at(st->query, i, 0, &col);
        if (a->count == 0) continue; /* its seen record may go stale: read_archetype allows it */
        bool scan = !all && new_tick &&
                    atomic_load_explicit(&col->latest, memory_order_relaxed) >= st->caught;
        read_result r = read_archetype(st, a, col, all, scan);
        if (r == READ_FAILED) return false;
        if (r == READ_REBUILD) {
            all = true;
            goto again;
        }
    }
    st->caught = world->tick;
    st->caught_version = world->structure_version;
    st->valid = true;
    return true;
}

/* The live entity other than self named name, or KILN_NULL_ENTITY; false when the index
 * could not catch up (out of memory). */
static bool find(kiln_world *world, name_state *st, const char *name, kiln_entity self, kiln_entity *dest) {
    *dest = KILN_NULL_ENTITY;
    if (!catch_up(st)) return false;
    uint64_t h = hash_name(name);
    for (uint64_t i = h & (uint64_t)(st->cap - 1); st->cap && st->slots[i].hash; i = (i + 1) & (uint64_t)(st->cap - 1)) {
        if (st->slots[i].hash != h || st->slots[i].entity == self) continue;
        const char *have = name_of(world, st, st->slots[i].entity); /* stale entries fail here */
        if (have && strcmp(have, name) == 0) {
            *dest = st->slots[i].entity;
            break;
        }
    }
    return true;
}

static kiln_result check_name(const kiln_world *cworld, kiln_entity entity, const void *value, void *ctx,
                              char *why, size_t why_size) {
    name_state *st = ctx;
    kiln_world *world = st->world;
    (void)cworld;
    if (!value) return KILN_OK;
    if (!memchr(((const kiln_name *)value)->text, 0, sizeof ((const kiln_name *)value)->text)) {
        snprintf(why, why_size, "a name has at most 63 bytes (this one has no end)");
        return KILN_ERR_INVALID_ARGUMENT;
    }
    char text[KILN_NAME_MAX + 1];
    text_of(value, text);
    if (!text[0]) return KILN_OK;
    kiln_entity other;
    if (!find(world, st, text, entity, &other)) {
        snprintf(why, why_size, "out of memory (the name index)");
        return KILN_ERR_OUT_OF_MEMORY;
    }
    if (!other) {
        /* A value written in place (a set) moves no row, so catching up would take it in
         * only next tick: it goes in now. For a spawn the entity is not known yet (null);
         * its row is appended, which the next catch-up reads. A value that does not land
         * leaves a stale entry. */
        if (entity && reserve(st, st->used + 1)) insert_new(st, hash_name(text), entity);
        else if (entity) st->valid = false;
        return KILN_OK;
    }
    char buf[24];
    snprintf(why, why_size, "name '%s' is taken by entity %s", text, kiln_entity_format(other, buf, sizeof buf));
    return KILN_ERR_INVALID_ARGUMENT;
}

kiln_result kiln_name_init(kiln_world *world, kiln_component *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    name_state *st = state_of(world);
    if (st) {
        if (dest) *dest = st->id;
        return KILN_OK;
    }
    st = kl_alloc(&world->alloc, sizeof *st);
    if (!st) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_name_init: out of memory");
    memset(st, 0, sizeof *st);
    st->world = world;
    static const kiln_field fields[] = {{"text", KILN_TYPE_CHAR, 0, KILN_NAME_MAX + 1}};
    kiln_component_desc d = {.name = "Name", .size = sizeof(kiln_name), .fields = fields, .field_count = 1,
                             .check = check_name, .hook_ctx = st};
    kiln_result r = kiln_component_register(world, &d, &st->id);
    if (r == KILN_OK) r = kiln_query_create(world, &(kiln_query_desc){.with = {st->id}}, &st->query);
    if (r == KILN_OK) r = kiln_world_atfini(world, names_fini, st);
    if (r != KILN_OK) {
        kiln_query_destroy(st->query);
        kl_free(&world->alloc, st, sizeof *st);
        return r;
    }
    if (dest) *dest = st->id;
    return KILN_OK;
}

kiln_result kiln_name_set(kiln_world *world, kiln_entity entity, const char *name) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_result r = kiln_name_init(world, NULL);
    if (r != KILN_OK) return r;
    name_state *st = state_of(world);
    char buf[24];
    if (!kiln_is_alive(world, entity))
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "kiln_name_set: entity %s is not alive",
                       kiln_entity_format(entity, buf, sizeof buf));
    if (!name || !name[0]) return kiln_remove(world, entity, st->id, NULL);
    size_t n = strlen(name);
    if (n > KILN_NAME_MAX)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_name_set: a name has at most 63 bytes (got %zu)", n);
    kiln_name value;
    memset(&value, 0, sizeof value);
    memcpy(value.text, name, n);
    char old[KILN_NAME_MAX + 1] = "";
    const char *had = name_of(world, st, entity);
    if (had) memcpy(old, had, strlen(had) + 1);
    r = kiln_add(world, entity, st->id, &value);
    if (r != KILN_OK) {
        /* the check hook's message names kiln_add: name this call instead */
        char msg[KL_ERROR_SIZE];
        snprintf(msg, sizeof msg, "%s", kiln_world_error(world));
        const char *detail = strstr(msg, ": ");
        return kl_fail(world, r, "kiln_name_set: %s", detail ? detail + 2 : msg);
    }
    /* The check hook entered the new name; a rename that landed (not queued) drops the old
     * entry now rather than leave it for the next rebuild. */
    if (!kiln_is_deferred(world) && old[0] && strcmp(old, name) != 0) erase(st, hash_name(old), entity);
    return KILN_OK;
}

void pz_names_invalidate(kiln_world *world) {
    name_state *st = state_of(world);
    if (st) st->valid = false;
}

const char *kiln_name_get(const kiln_world *world, kiln_entity entity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const name_state *st = state_of(world);
    return st ? name_of(world, st, entity) : NULL;
}

kiln_entity kiln_name_lookup(kiln_world *world, const char *name) {
    KILN_ASSERT(world != NULL, "world is NULL");
    name_state *st = state_of(world);
    if (!st || !name || !name[0] || strlen(name) > KILN_NAME_MAX) return KILN_NULL_ENTITY;
    kiln_entity e;
    find(world, st, name, KILN_NULL_ENTITY, &e); /* out of memory: none found */
    return e;
}
