/* names.c: unique entity names: the Name component, its check hook, and a hash index from name
 * to entity. Invariant: every live entity with a Name has an entry (hash of its name, entity)
 * once the index has caught up (catch_up); entries left by renames, removals and despawns may
 * stay, as a look-up verifies each candidate against the entity's Name. Catching up reads only
 * what changed: rows appended to an archetype since it was last read, an archetype whose rows
 * were also taken out read by row tick, and (from the next tick on) values written in place. */
#include <stdio.h>
#include <string.h>
/* the header-only form, as hash.c: nothing to link */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "access.h"
#include "component.h" /* kl_component_set_check_rows */
#include "defer.h"
#include "follow.h"
#include "guard.h"
#include "spin.h"
#include "persist_internal.h"
#include "query.h"

typedef struct name_slot {
    uint64_t hash;       /* 0: empty */
    kiln_entity entity;
} name_slot;

typedef struct name_state {
    kiln_world *world;
    kiln_component id;
    /* Entities with a Name; set (release) last by kiln_name_init, when the state is whole: a
     * worker system reading it (acquire) beside a main-thread system finishing a retried init
     * sees either no index yet or all of it. */
    _Atomic(kiln_query *) query;
    name_slot *slots;
    int64_t cap, used;      /* cap: a power of two, at most half used */
    int64_t slots_read;     /* by every probe, ever (kiln_name_slots_read) */
    kl_follow follow;       /* what the index last read */
    atomic_flag lock;       /* held by whoever reads or changes the index: systems that read
                             * Name may look names up on several threads at once */
} name_state;

/* Seeded per world: a mod naming entities cannot pick names that share a slot (never 0). */
static uint64_t hash_name(const name_state *st, const char *s) {
    return XXH3_64bits_withSeed(s, strlen(s), st->world->hash_seed) | 1;
}

static void names_fini(kiln_world *world, void *ctx) {
    name_state *st = ctx;
    kiln_query_destroy(atomic_load_explicit(&st->query, memory_order_relaxed));
    kl_free(&world->alloc, st->slots, sizeof(name_slot) * (size_t)st->cap);
    kl_follow_fini(world, &st->follow);
    kl_free(&world->alloc, st, sizeof *st);
}

/* The index's query, or NULL while kiln_name_init has not finished. */
static kiln_query *names_query(const name_state *st) {
    return atomic_load_explicit(&((name_state *)st)->query, memory_order_acquire);
}

/* The state kiln_name_init left, done or not (see there). */
static name_state *state_found(const kiln_world *world) {
    return kiln_world_atfini_get(world, names_fini);
}

/* The state once kiln_name_init has finished (its query made), else NULL: until then the
 * world has no names. */
static name_state *state_of(const kiln_world *world) {
    name_state *st = state_found(world);
    return st && names_query(st) ? st : NULL;
}

static const char *name_of(const kiln_world *world, const name_state *st, kiln_entity e) {
    const kiln_name *n = kiln_get(world, e, st->id);
    /* a text without its end got past the check (kiln_get_mut): it is no name */
    return n && n->text[0] && memchr(n->text, 0, sizeof n->text) ? n->text : NULL;
}

/* Inserts (hash, e); the table must have room. */
static void insert(name_state *st, uint64_t h, kiln_entity e) {
    uint64_t i = h & (uint64_t)(st->cap - 1);
    for (st->slots_read++; st->slots[i].hash; st->slots_read++) i = (i + 1) & (uint64_t)(st->cap - 1);
    st->slots[i] = (name_slot){h, e};
    st->used++;
}

/* Inserts (hash, e) unless there; the table must have room. */
static void insert_new(name_state *st, uint64_t h, kiln_entity e) {
    uint64_t mask = (uint64_t)(st->cap - 1), i = h & mask;
    for (st->slots_read++; st->slots[i].hash; i = (i + 1) & mask, st->slots_read++)
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
    for (st->slots_read++; st->slots[i].hash && !(st->slots[i].hash == h && st->slots[i].entity == e);
         st->slots_read++)
        i = (i + 1) & mask;
    if (!st->slots[i].hash) return;
    for (uint64_t j = (i + 1) & mask; st->slots[j].hash; j = (j + 1) & mask, st->slots_read++) {
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

/* kl_follow's clear: empties the table, sized for every named entity. */
static bool clear_names(void *ctx) {
    name_state *st = ctx;
    if (!reserve(st, kiln_query_count(names_query(st)) + 1)) return false;
    if (st->cap) memset(st->slots, 0, sizeof(name_slot) * (size_t)st->cap);
    st->used = 0;
    return true;
}

/* kl_follow's take: enters the row's name, if it has one. */
static bool take_name(void *ctx, const kl_archetype *a, const kl_column *col, int32_t r, bool all) {
    name_state *st = ctx;
    char text[KILN_NAME_MAX + 1];
    text_of(&((const kiln_name *)col->data)[r], text);
    if (!text[0]) return true;
    if (!reserve(st, st->used + 1)) return false;
    if (all) insert(st, hash_name(st, text), a->entities[r]); /* each entity once, table cleared */
    else insert_new(st, hash_name(st, text), a->entities[r]);
    return true;
}

/* Brings the index up to date (see the invariant at the top): from scratch when it is not
 * valid or holds more stale entries than live ones, else reading only what changed. False
 * when out of memory (the index is then invalid). */
static bool catch_up(name_state *st) {
    kiln_world *world = st->world;
    if (kl_follow_current(world, &st->follow)) return true;
    kl_follow_desc d = {.query = names_query(st), .clear = clear_names, .take = take_name,
                        .rebuild_over = 64 + st->used / 2, .ctx = st,
                        .all = st->used > 2 * kiln_query_count(names_query(st)) + 64};
    return kl_follow_catch_up(world, &st->follow, &d);
}

/* The live entity other than self named name (of hash h) in the index as it is, or
 * KILN_NULL_ENTITY. */
static kiln_entity holder_of(kiln_world *world, name_state *st, const char *name, uint64_t h, kiln_entity self) {
    for (uint64_t i = h & (uint64_t)(st->cap - 1); st->cap && st->slots[i].hash; i = (i + 1) & (uint64_t)(st->cap - 1)) {
        st->slots_read++;
        if (st->slots[i].hash != h || st->slots[i].entity == self) continue;
        const char *have = name_of(world, st, st->slots[i].entity); /* stale entries fail here */
        if (have && strcmp(have, name) == 0) return st->slots[i].entity;
    }
    return KILN_NULL_ENTITY;
}

/* The live entity other than self named name, or KILN_NULL_ENTITY; false when the index
 * could not catch up (out of memory). */
static bool find_locked(kiln_world *world, name_state *st, const char *name, kiln_entity self, kiln_entity *dest) {
    *dest = KILN_NULL_ENTITY;
    if (!catch_up(st)) return false;
    *dest = holder_of(world, st, name, hash_name(st, name), self);
    return true;
}

static bool find(kiln_world *world, name_state *st, const char *name, kiln_entity self, kiln_entity *dest) {
    kl_spin_lock(&st->lock);
    bool ok = find_locked(world, st, name, self, dest);
    kl_spin_unlock(&st->lock);
    return ok;
}

static kiln_result check_name(const kiln_world *cworld, kiln_entity entity, const void *value, void *ctx,
                              char *why, size_t why_size) {
    name_state *st = ctx;
    kiln_world *world = st->world;
    (void)cworld;
    if (!value) return KILN_OK;
    if (!names_query(st)) {
        /* Name was registered by a kiln_name_init that failed after it: no index to ask */
        snprintf(why, why_size, "out of memory (the name index; kiln_name_init did not finish)");
        return KILN_ERR_OUT_OF_MEMORY;
    }
    if (!memchr(((const kiln_name *)value)->text, 0, sizeof ((const kiln_name *)value)->text)) {
        snprintf(why, why_size, "a name has at most 63 bytes (this one has no end)");
        return KILN_ERR_INVALID_ARGUMENT;
    }
    char text[KILN_NAME_MAX + 1];
    text_of(value, text);
    if (!text[0]) return KILN_OK;
    /* The index catches up by reading the Name column: a system (a main-thread one queuing an
     * add needs no declaration for the add itself) must declare Name, or run beside its writers. */
    kl_guard_check(world, "Name's check", KL_READ, st->id, 0);
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
        kl_spin_lock(&st->lock);
        if (entity && reserve(st, st->used + 1)) insert_new(st, hash_name(st, text), entity);
        else if (entity) st->follow.valid = false;
        kl_spin_unlock(&st->lock);
        return KILN_OK;
    }
    char buf[24];
    snprintf(why, why_size, "name '%s' is taken by entity %s", text, kiln_entity_format(other, buf, sizeof buf));
    return KILN_ERR_INVALID_ARGUMENT;
}

/* check_name over count stored values at once, for a load (kl_check_rows_fn): the index caught
 * up once, under one hold of its lock, each row then refused as check_name refuses it and
 * entered as check_name enters it. Returns the first refused row, for check_name to word the
 * refusal; -1 (out of memory) leaves the rows to check_name one by one. */
static int64_t check_name_rows(const kiln_world *cworld, const kiln_entity *entities, const uint8_t *values,
                               size_t stride, int64_t count, void *ctx) {
    name_state *st = ctx;
    kiln_world *world = st->world;
    (void)cworld;
    if (!names_query(st)) return 0;
    kl_guard_check(world, "Name's check", KL_READ, st->id, 0);
    kl_spin_lock(&st->lock);
    int64_t i = catch_up(st) ? 0 : -1;
    for (; i >= 0 && i < count; i++) {
        const char *text = ((const kiln_name *)(values + (size_t)i * stride))->text;
        if (!memchr(text, 0, KILN_NAME_MAX + 1)) break;
        if (!text[0]) continue;
        uint64_t h = hash_name(st, text);
        if (holder_of(world, st, text, h, entities[i])) break;
        if (!reserve(st, st->used + 1)) {
            st->follow.valid = false;
            i = -1;
            break;
        }
        insert_new(st, h, entities[i]);
    }
    kl_spin_unlock(&st->lock);
    return i;
}

static const kiln_field name_fields[] = {{"text", KILN_TYPE_CHAR, 0, KILN_NAME_MAX + 1}};

void pz_names_layout(kiln_component_info *dest) {
    *dest = (kiln_component_info){.name = "Name", .size = sizeof(kiln_name), .fields = name_fields,
                                  .field_count = 1, .has_check = true};
}

/* All or nothing, and retryable: the state is attached to the world (atfini) before Name
 * is registered with it as hook_ctx, so no registration ever points at freed memory. A
 * failure after that leaves the state attached but unfinished (no query): the world has no
 * names yet, a Name value is refused by check_name, and the next call finishes the work
 * (registering Name again with the same hooks is a no-op). */
kiln_result kiln_name_init(kiln_world *world, kiln_component *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    name_state *st = state_found(world);
    if (st && names_query(st)) {
        if (dest) *dest = st->id;
        return KILN_OK;
    }
    /* a retry too: it would register Name and make the query beside the stage's thread */
    if (kl_off_stage_thread(world)) return kl_fail_atfini_off_stage(world, "kiln_name_init");
    if (!st) {
        st = kl_alloc(&world->alloc, sizeof *st);
        if (!st) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_name_init: out of memory");
        memset(st, 0, sizeof *st);
        atomic_flag_clear(&st->lock);
        st->world = world;
        kiln_result r = kiln_world_atfini(world, names_fini, st);
        if (r != KILN_OK) {
            kl_free(&world->alloc, st, sizeof *st);
            return r;
        }
    }
    kiln_component_desc d = {.name = "Name", .size = sizeof(kiln_name), .fields = name_fields, .field_count = 1,
                             .check = check_name, .hook_ctx = st};
    kiln_result r = kiln_component_register(world, &d, &st->id);
    if (r == KILN_OK) kl_component_set_check_rows(world, st->id, check_name_rows);
    kiln_query *query = NULL;
    if (r == KILN_OK) r = kiln_query_create(world, &(kiln_query_desc){.with = {st->id}}, &query);
    if (r != KILN_OK) return r;
    atomic_store_explicit(&st->query, query, memory_order_release);
    if (dest) *dest = st->id;
    return KILN_OK;
}

kiln_result kiln_name_set(kiln_world *world, kiln_entity entity, const char *name) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_result r = kiln_name_init(world, NULL);
    if (r != KILN_OK) return r;
    name_state *st = state_of(world);
    if (!kiln_is_alive(world, entity)) return kl_fail_dead(world, "kiln_name_set", entity);
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
    if (!kiln_is_deferred(world) && old[0] && strcmp(old, name) != 0) {
        kl_spin_lock(&st->lock);
        erase(st, hash_name(st, old), entity);
        kl_spin_unlock(&st->lock);
    }
    return KILN_OK;
}

/* Why check_name would refuse text n beside the file's names in texts (cap slots, open
 * addressing), into why (empty: taken); *slot is where n goes, or cap for an empty text. */
static void file_name_refused(const kiln_world *world, const kiln_name *const *texts, const kiln_entity *holders,
                              uint64_t cap, const kiln_name *n, uint64_t *slot, char *why, size_t why_size) {
    char buf[24];
    uint64_t i = cap;
    if (!memchr(n->text, 0, sizeof n->text)) {
        snprintf(why, why_size, "a name has at most 63 bytes (this one has no end)");
    } else if (n->text[0]) {
        i = XXH3_64bits_withSeed(n->text, strlen(n->text), world->hash_seed) & (cap - 1);
        for (; texts[i] && !why[0]; i = (i + 1) & (cap - 1))
            if (strcmp(texts[i]->text, n->text) == 0)
                snprintf(why, why_size, "name '%s' is taken by entity %s", n->text,
                         kiln_entity_format(holders[i], buf, sizeof buf));
    }
    *slot = i;
}

/* The file's value of s at src in the world's layout: src itself, or a copy; NULL: out of memory. */
static const kiln_name *file_name(pz_doc *doc, const pz_schema *s, const uint8_t *src) {
    if (s->same) return (const kiln_name *)src;
    kiln_name *copy = pz_alloc_raw(&doc->arena, sizeof *copy);
    if (copy) pz_convert_row(s, src, (uint8_t *)copy);
    return copy;
}

/* The file's Name values (schema, pending: the world has no Name, so none is taken yet) as
 * check_name would take them one by one, each text in the world's layout; their entities have
 * landed (gr->spawned), without the Name. Then a Name resource, as kiln_load asks a resource's
 * check once the entities landed (check_resources): beside every entity's name. */
kiln_result pz_names_check_file(kiln_world *world, pz_doc *doc, uint32_t schema) {
    const pz_schema *s = &doc->schemas[schema];
    int64_t rows = 0;
    for (uint32_t g = 0; g < doc->group_count; g++)
        for (int32_t t = 0; t < doc->groups[g].type_count; t++)
            rows += doc->groups[g].types[t] == schema ? doc->groups[g].count : 0;
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)rows) cap *= 2;
    const kiln_name **texts = pz_alloc(&doc->arena, sizeof(kiln_name *) * cap);
    kiln_entity *holders = pz_alloc_raw(&doc->arena, sizeof(kiln_entity) * cap);
    if (!texts || !holders) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    for (uint32_t g = 0; g < doc->group_count; g++)
        for (int32_t t = 0; t < doc->groups[g].type_count; t++) {
            const pz_group *gr = &doc->groups[g];
            if (gr->types[t] != schema) continue;
            for (int64_t r = 0; r < gr->count; r++) {
                const kiln_name *n = file_name(doc, s, gr->values[t] + (size_t)r * s->size);
                if (!n) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
                char buf[24], saved[24], why[KILN_NAME_MAX + 64] = "";
                uint64_t i;
                file_name_refused(world, texts, holders, cap, n, &i, why, sizeof why);
                if (why[0]) /* (check_values' words: the hook's own, once the entity has landed) */
                    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                                   "kiln_load: entity %s (%s in the file) component 'Name': %s",
                                   kiln_entity_format(gr->spawned[r], buf, sizeof buf),
                                   kiln_entity_format(gr->handles[r], saved, sizeof saved), why);
                if (i == cap) continue; /* no name */
                texts[i] = n;
                holders[i] = gr->spawned[r];
            }
        }
    for (uint32_t k = 0; k < doc->resource_count; k++) {
        if (doc->resources[k].schema != schema || !doc->resources[k].value) continue;
        const kiln_name *n = file_name(doc, s, doc->resources[k].value);
        if (!n) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
        char why[KILN_NAME_MAX + 64] = "";
        uint64_t i;
        file_name_refused(world, texts, holders, cap, n, &i, why, sizeof why);
        if (why[0]) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: %s", why); /* (check_resources' words) */
    }
    return KILN_OK;
}

void pz_names_invalidate(kiln_world *world) {
    name_state *st = state_of(world);
    if (!st) return;
    kl_spin_lock(&st->lock);
    st->follow.valid = false;
    kl_spin_unlock(&st->lock);
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
    kl_guard_check(world, "kiln_name_lookup", KL_READ, st->id, 0); /* catching up reads the column */
    kiln_entity e;
    find(world, st, name, KILN_NULL_ENTITY, &e); /* out of memory: none found */
    return e;
}

int64_t kiln_name_slots_read(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    name_state *st = state_of(world);
    if (!st) return 0;
    kl_spin_lock(&st->lock);
    int64_t n = st->slots_read;
    kl_spin_unlock(&st->lock);
    return n;
}
