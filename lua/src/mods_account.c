/* mods_account.c: what a mod holds in the world, counted against its limits (world_memory,
 * entities, systems) and its share of the archetypes and schedule slots the mods may take. */
#include "mods.h"

/* Spawns made while the world is deferred (a frame, a query loop) land only when the section
 * ends, so the tag query does not count them yet: they are counted as pending until the tick
 * changes or the world is seen undeferred (a frame is one deferred section, its tick one). */
int64_t klua_mod_pending_spawns(klua_mod *mod, kiln_world *world) {
    kiln_tick now = klua_frame_key(world);
    if (!kiln_is_deferred(world) || mod->pending_tick != now) {
        mod->pending_spawns = mod->pending_bytes = 0;
        mod->pending_tick = now;
    }
    return mod->pending_spawns;
}

int64_t klua_mod_query_bytes(const klua_mod *mod) {
    /* the queries kiln keeps over its components on others' entities (one per component,
     * matching every archetype that holds it) grow as its queries do */
    int64_t n = 0;
    for (int k = 0; k < mod->declared_count; k++)
        if (mod->foreign[k]) n += kiln_query_memory(mod->foreign[k]);
    for (const klua_query_link *l = mod->L && mod->kw && !mod->kw->closed ? mod->kw->queries : NULL; l; l = l->next)
        n += kiln_query_memory(l->query);
    return n;
}

/* Brings mod->rows up to date: counted again only when rows moved, it declared a component or
 * it made a query over others' entities since they were counted. */
static void count_rows(klua_mod *mod, kiln_world *world) {
    kiln_world_stats st;
    kiln_world_stats_get(world, &st);
    int foreign = 0;
    for (int k = 0; k < mod->declared_count; k++) foreign += mod->foreign[k] != NULL;
    if (mod->rows.valid && mod->rows.changes == st.changes && mod->rows.declared == mod->declared_count &&
        mod->rows.foreign == foreign)
        return;
    int64_t bytes = mod->spawned ? kiln_query_bytes(mod->spawned) : 0;
    for (int k = 0; k < mod->declared_count; k++) {
        kiln_component_info info;
        if (mod->declared_event[k] || !mod->declared_first[k] || !mod->foreign[k] ||
            !kiln_component_info_get(world, mod->declared[k], &info))
            continue;
        bytes += kiln_query_count(mod->foreign[k]) * ((int64_t)info.stride + (int64_t)sizeof(kiln_row_tick));
    }
    mod->rows.live = mod->spawned ? kiln_query_count(mod->spawned) : 0;
    mod->rows.bytes = bytes;
    mod->rows.changes = st.changes;
    mod->rows.declared = mod->declared_count;
    mod->rows.foreign = foreign;
    mod->rows.valid = true;
}

bool klua_mod_kept_fit(klua_mod *mod, kiln_world *world) {
    int64_t kept = klua_mod_live(mod, world), limit = mod->mods->entities;
    if (kept <= limit) return true;
    snprintf(mod->error, sizeof mod->error, "the world keeps %lld entities of it from an unload's keep, past its limit of "
             "%lld (entities)", (long long)kept, (long long)limit);
    return false;
}

void klua_mod_count_spawn(klua_mod *mod, kiln_world *world) {
    /* counted just before (the spawn's checks), and nothing recounted since: one row more */
    if (!mod->rows.valid || mod->rows.changes != mod->rows.spawn_at) return;
    kiln_world_stats st;
    kiln_world_stats_get(world, &st);
    mod->rows.live++;
    mod->rows.bytes += mod->spawn_bytes; /* its archetype's row, as kiln_query_bytes counts it */
    mod->rows.changes = st.changes;
}

int64_t klua_mod_live(klua_mod *mod, kiln_world *world) {
    count_rows(mod, world);
    return mod->rows.live;
}

int64_t klua_mod_held_bytes(klua_mod *mod, kiln_world *world) {
    count_rows(mod, world);
    int64_t held = mod->rows.bytes + klua_mod_query_bytes(mod);
    for (int k = 0; k < mod->declared_count; k++) {
        kiln_component_info info;
        if (mod->declared_event[k] || !mod->declared_first[k] ||
            !kiln_component_info_get(world, mod->declared[k], &info))
            continue;
        if (info.size && kiln_resource_has(world, mod->declared[k])) held += (int64_t)info.stride;
    }
    klua_mod_pending_spawns(mod, world); /* (forgets what landed) */
    kiln_tick now = klua_frame_key(world);
    if (mod->event_tick != now) {
        mod->event_bytes = 0;
        mod->event_tick = now;
    }
    return held + mod->pending_bytes + mod->event_bytes;
}

void klua_mod_check_held(lua_State *L, klua_mod *mod, kiln_world *world, int64_t more, const char *what) {
    int64_t held = klua_mod_held_bytes(mod, world), limit = mod->mods->world_memory;
    if (more > limit - held)
        klua_raise(L, "mod '%s' holds %I bytes in the world; %s would take %I more, past its limit of %I "
                   "(world_memory)", mod->name, (lua_Integer)held, what, (lua_Integer)more, (lua_Integer)limit);
}

/* Whether e's reshape in this deferred section is mods' first (the world's state then says
 * where it lands); it is one now. False past KLUA_MOVED_SLOTS / 2 entities. */
static bool first_move(klua_mods *mods, kiln_entity e) {
    uint32_t mask = KLUA_MOVED_SLOTS - 1, i = (uint32_t)(e ^ (e >> 29)) * 2654435761u & mask;
    for (; mods->moved[i] != 0; i = (i + 1) & mask)
        if (mods->moved[i] == e) return false;
    if (mods->moved_count >= KLUA_MOVED_SLOTS / 2) return false;
    mods->moved[i] = e;
    mods->moved_count++;
    return true;
}

bool klua_mod_spawn_lands(klua_mod *mod, const kiln_component *comps, int32_t count) {
    kiln_component types[65];
    if (count > 64) return false; /* (a spawn takes at most 64) */
    int32_t n = 0;
    for (int32_t i = 0; i <= count; i++) { /* sorted, the tag last in line */
        kiln_component c = i < count ? comps[i] : mod->tag;
        int32_t j = n++;
        for (; j > 0 && types[j - 1] > c; j--) types[j] = types[j - 1];
        types[j] = c;
    }
    return kiln_archetype_exists(mod->mods->kw->world, types, n);
}

bool klua_mod_move_lands(klua_mod *mod, kiln_entity e, kiln_component c, bool add) {
    klua_mods *mods = mod->mods;
    kiln_world *world = mods->kw->world;
    kiln_component have[64], types[65];
    int32_t count = e == KILN_NULL_ENTITY ? -1 : kiln_entity_components(world, e, have, 64);
    if (count < 0 || count > 64) return false; /* reserved (spawned in this section), or unusual */
    klua_mod_check_archetypes(NULL, mod, false, NULL); /* the section's entities, for first_move */
    /* queued behind another of its reshapes, it lands where that one leaves it */
    if (kiln_is_deferred(world) && !first_move(mods, e)) return false;
    int32_t n = 0;
    bool placed = !add;
    for (int32_t i = 0; i < count; i++) {
        if (!placed && c < have[i]) types[n++] = c, placed = true;
        if (!add && have[i] == c) continue;
        types[n++] = have[i];
    }
    if (!placed) types[n++] = c;
    return kiln_archetype_exists(world, types, n);
}

/* Archetypes are never freed, and the world holds at most 65,472: a mod spawning and
 * despawning entities of every combination of its components made 20,000 (33 MiB) in 16
 * frames, and could leave the host none for its own new combinations. So a mod's spawn, add
 * or remove that may make an archetype (fresh: its archetype is not one the world holds, or
 * it is queued behind another reshape of the entity) is refused when the archetypes mods'
 * reshapes made, with one for each such call mods queued in the deferred section under way
 * (it lands later), reach opts.archetypes; reshapes into archetypes the world holds are never
 * refused, and archetypes the host made do not count (a host going through 8191 combinations
 * of buffs refused every mod's spawn for good). What mods made is brought up to date once
 * their reshapes landed: the world's new archetypes since, as many as those reshapes were, are
 * theirs. The room a frame leaves is shared out: each mod may queue its part of it (the room
 * when the frame's first was counted, over the mods loaded), so one mod reshaping all it
 * could, first in the frame, cannot leave the others none. L NULL: only brings the counts up
 * to date. */
void klua_mod_check_archetypes(lua_State *L, klua_mod *mod, bool fresh, const char *what) {
    klua_mods *mods = mod->mods;
    kiln_world *world = mods->kw->world;
    kiln_tick now = klua_frame_key(world);
    bool deferred = kiln_is_deferred(world);
    kiln_world_stats st;
    kiln_world_stats_get(world, &st);
    /* Rows that go leave their room to their archetype until a trim, which a schedule run
     * makes after a frame that grew the world; a mod's top level or export runs between frames,
     * where spawning into one archetype after another could hold room far past world_memory:
     * mods trim once the world grew by world_memory since they last did. */
    if (L && !deferred && st.bytes > mods->trim_at) {
        (void)kiln_world_trim(world);
        kiln_world_stats_get(world, &st);
        mods->trim_at = st.bytes + mods->world_memory;
    }
    if (!deferred || mods->reshape_tick != now) {
        int64_t grew = (int64_t)st.archetypes - mods->seen;
        mods->made += grew < mods->reshapes ? (grew > 0 ? grew : 0) : mods->reshapes;
        mods->seen = st.archetypes;
        mods->reshapes = 0;
        mods->reshape_tick = now;
        mods->reshape_base = mods->made;
        if (mods->moved_count) memset(mods->moved, 0, sizeof mods->moved);
        mods->moved_count = 0;
    }
    if (!deferred || mod->reshape_tick != now) {
        mod->reshapes = 0;
        mod->reshape_tick = now;
    }
    if (!L || !fresh) return;
    if (mods->made + mods->reshapes >= mods->archetypes)
        klua_fail(L, what, "mod '%s' may not reshape entities into a new archetype: mods made %I archetypes and "
                   "queued %I spawns, adds and removes that may make one this frame, the mods' limit is %d "
                   "(archetypes)", mod->name, (lua_Integer)mods->made, (lua_Integer)mods->reshapes,
                   (int)mods->archetypes);
    if (deferred) {
        int64_t sharers = mods->count + (mods->loading ? 1 : 0); /* a top level's query loop defers */
        int64_t room = (int64_t)mods->archetypes - mods->reshape_base;
        int64_t share = room / (sharers > 0 ? sharers : 1);
        if (mod->reshapes >= (share > 1 ? share : 1))
            klua_fail(L, what, "mod '%s' may not reshape entities into a new archetype: it queued %I spawns, adds "
                       "and removes that may make one this frame, its part of the %I the mods' limit left room for "
                       "(archetypes)", mod->name, (lua_Integer)mod->reshapes, (lua_Integer)room);
    }
    mods->reshapes++;
    mod->reshapes++;
}

bool klua_mods_load_owned(klua_world *kw, kiln_component mark, int64_t entities, bool replacing, bool *mine,
                          char *why, size_t why_size) {
    klua_mods *mods = kw->on_release_ud; /* (set with this hook: the manager) */
    klua_mod *mod = NULL;
    for (int i = 0; i < mods->count && !mod; i++)
        if (mods->list[i]->tag == mark) mod = mods->list[i];
    *mine = mod != NULL;
    if (!mod) return true;
    /* (the host's world: a disabled mod's state, and its view, may be gone) */
    int64_t live = (replacing ? 0 : klua_mod_live(mod, kw->world)) + klua_mod_pending_spawns(mod, kw->world);
    if (entities <= mods->entities - live) return true;
    snprintf(why, why_size, "the %s holds %lld entities of mod '%s', which has %lld of its limit of %lld (entities)",
             replacing ? "snapshot" : "save", (long long)entities, mod->name, (long long)live, (long long)mods->entities);
    return false;
}

/* What the core keeps for a queued change (core/src/commands.c): a 32-byte record, and for a
 * despawn its own copy of the read-only list (kiln_despawn_unless), in blocks of 16 bytes.
 * A tree's despawn (kiln_transform_despawn_recursive_unless) queues one such despawn an
 * entity of the tree, deepest first. */
enum { QUEUED_RECORD_BYTES = 32, QUEUED_VALUE_ALIGN = 16 };

/* A despawn or removal queued (a frame, a query loop) holds its record, and a despawn its copy
 * of the read-only list, until it lands. Those of a tick count against world_memory on their
 * own, so a mod queuing millions (each dropped as it lands, say) meets its limit instead of
 * taking the host's memory, while one holding its limit in rows may still despawn them. The
 * check is made before the call queues anything; the count once it did (klua_mod_queued), so
 * a call that fails after it counts nothing. */
static void charge_queued(lua_State *L, klua_world *kw, int64_t records, bool despawn, const char *fname) {
    klua_mod *mod = kw->mod;
    mod->queued_asked = 0;
    if (!kiln_is_deferred(kw->world)) return;
    kiln_tick now = klua_frame_key(kw->world);
    if (mod->queued_tick != now) mod->queued_bytes = 0, mod->queued_tick = now;
    int64_t keep = despawn ? mod->mods->readonly_count * (int64_t)sizeof(kiln_component) : 0;
    int64_t each = QUEUED_RECORD_BYTES + (keep + QUEUED_VALUE_ALIGN - 1) / QUEUED_VALUE_ALIGN * QUEUED_VALUE_ALIGN;
    int64_t left = mod->mods->world_memory - mod->queued_bytes;
    if (records > left / each) /* (records times each may not fit in 64 bits: a count of live entities does) */
        klua_fail(L, fname, "mod '%s' queued %I bytes of despawns and removals this frame; another would take %I more, "
                   "past its limit of %I (world_memory)", mod->name, (lua_Integer)mod->queued_bytes,
                   (lua_Integer)(records * each), (lua_Integer)mod->mods->world_memory);
    mod->queued_asked = records * each;
}

void klua_mod_queued(klua_world *kw) {
    klua_mod *mod = kw->mod;
    if (mod->queued_tick == klua_frame_key(kw->world)) mod->queued_bytes += mod->queued_asked;
    mod->queued_asked = 0;
}

void klua_mod_queue_remove(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, const char *fname) {
    klua_mod_before_remove(L, kw, e, c, fname);
    charge_queued(L, kw, 1, c == KILN_NO_COMPONENT, fname);
}

void klua_mod_queue_despawn_tree(lua_State *L, klua_world *kw, kiln_entity root, const char *fname) {
    int64_t entities = klua_mod_before_despawn_tree(L, kw, root, fname);
    charge_queued(L, kw, entities, true, fname);
}

void klua_mod_queue_plain_remove(lua_State *L, klua_world *kw, const char *fname) {
    charge_queued(L, kw, 1, false, fname);
}

/* The systems of mod's state: in the schedule, staged by its top level, or leaving at the
 * frame's end (skip left out); none once its state is closed. */
static int state_systems(const klua_mod *mod, const void *skip) {
    int n = 0;
    for (const klua_system *s = mod->L && mod->kw ? mod->kw->systems : NULL; s; s = s->next) n += s != skip;
    return n;
}

/* The schedule holds KILN_SCHEDULE_MAX_SYSTEMS: 16 mods at their 256 filled it, and the host's
 * own systems added later were refused. So the mods together may hold opts.systems of it. A
 * reload's running version is left out (its systems leave or are replaced at the commit), so
 * a mod at the limit reloads; an unload, or a disabled mod's systems leaving, gives room back. */
void klua_mod_check_systems(lua_State *L, klua_mod *mod, const kiln_system_desc *d, const char *fname) {
    klua_mods *mods = mod->mods;
    int own = state_systems(mod, d->user), all = own;
    if (own >= KLUA_MOD_MAX_SYSTEMS)
        klua_fail(L, fname, "mod '%s' has %d systems, its limit", mod->name, KLUA_MOD_MAX_SYSTEMS);
    for (int i = 0; i < mods->count; i++)
        if (mods->list[i] != mod && mods->list[i] != mod->previous) all += state_systems(mods->list[i], NULL);
    if (all >= mods->systems)
        klua_fail(L, fname, "mod '%s' may not add system '%s': mods have %d systems, the mods' limit is %d (systems)",
                  mod->name, d->name, all, (int)mods->systems);
}
