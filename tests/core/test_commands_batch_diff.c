/* test_commands_batch_diff.c: Check suite pitting a buffer's apply (batched spawn runs, values
 * held in commands) against the same commands made one by one through the direct API. */
#include <check.h>
#include <signal.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "test_registry.h"
#include "test_support.h"

/* The components both worlds register, in this order (so their ids agree). LATE is registered
 * in the buffer's world only after the commands naming it were recorded (kiln_commands_add_sized). */
enum { POS, VEL, W12, V16, P12, B24, TAG, OWNED, CHECKED, DEF, LATE, NCOMP };

typedef struct vec16 { alignas(16) float v[4]; } vec16;            /* 16 bytes, 16-aligned */
typedef struct pad12 { alignas(16) int32_t v[3]; } pad12;          /* 12 bytes, stride 16 */

static const int32_t def_value[2] = {7, 9}, late_value[2] = {5, 6};

static kiln_result accept_all(const kiln_world *world, kiln_entity entity, const void *value,
                              void *ctx, char *why, size_t why_size) {
    (void)world, (void)entity, (void)value, (void)ctx, (void)why, (void)why_size;
    return KILN_OK;
}

static kiln_component_desc desc_of(int c, test_hook_log *log) {
    switch (c) {
    case POS: return test_position_desc();
    case VEL: return test_velocity_desc();
    case W12: return (kiln_component_desc){.name = "W12", .size = 12, .align = 4};
    case V16: return (kiln_component_desc){.name = "V16", .size = 16, .align = 16};
    case P12: return (kiln_component_desc){.name = "P12", .size = 12, .align = 16};
    case B24: return (kiln_component_desc){.name = "B24", .size = 24, .align = 8};
    case TAG: return (kiln_component_desc){.name = "Tag"};
    case OWNED: return test_owned_desc(log);
    case CHECKED: return (kiln_component_desc){.name = "Checked", .size = 4, .check = accept_all};
    case DEF: return (kiln_component_desc){.name = "Def", .size = 8, .defaults = def_value};
    default: return (kiln_component_desc){.name = "Late", .size = 8, .defaults = late_value};
    }
}

static size_t size_of(int c) { return desc_of(c, NULL).size; }

/* One world of the pair: 0 gets the buffer, 1 the direct calls. */
typedef struct side {
    test_allocator alloc;
    test_hook_log log;
    kiln_world *w;
    kiln_component comp[NCOMP];
    kiln_event_type hit;
} side;

typedef enum { OP_SPAWN, OP_ADD, OP_ADD_SIZED, OP_SET, OP_REMOVE, OP_DESPAWN, OP_EMIT } op_kind;

/* A command of a program: target indexes the entity table (real entities first, then one
 * entry per spawn); value bytes, or for OWNED the id of a fresh value. */
typedef struct op {
    op_kind kind;
    int32_t target, comp, owned_id;
    bool has_value;
    alignas(16) unsigned char value[32];
} op;

typedef struct program {
    op *ops;
    int64_t count, cap;
    kiln_entity *ent[2]; /* per side: the handle of each table entry (a placeholder on side 0) */
    bool *alive;         /* the model: alive once the commands so far have applied */
    uint32_t *has;       /* and its components (bit per enum value) */
    int32_t ents, ents_cap, reals;
    uint64_t rng;
} program;

static uint64_t next_rand(program *p) {
    p->rng ^= p->rng << 13;
    p->rng ^= p->rng >> 7;
    p->rng ^= p->rng << 17;
    return p->rng;
}

static int32_t pick(program *p, int32_t n) { return (int32_t)(next_rand(p) % (uint64_t)n); }

/* Check's assertions mark their place through a pipe even when they pass (a system call
 * each); these test first, so the millions of comparisons here stay cheap. */
#define ASSERT_OK_IN(w, call)                                                                \
    do {                                                                                     \
        kiln_result r_ = (call);                                                             \
        if (r_ != KILN_OK)                                                                   \
            ck_abort_msg("line %d: %s returned \"%s\" (%s)", __LINE__, #call,                \
                         kiln_result_name(r_), kiln_world_error(w));                         \
    } while (0)
#define EXPECT(cond)                                                                         \
    do {                                                                                     \
        if (!(cond)) ck_abort_msg("line %d: %s", __LINE__, #cond);                           \
    } while (0)
#define EXPECT_EQ(a, b)                                                                      \
    do {                                                                                     \
        long long a_ = (long long)(a), b_ = (long long)(b);                                  \
        if (a_ != b_) ck_abort_msg("line %d: %s == %s (%lld, %lld)", __LINE__, #a, #b, a_, b_); \
    } while (0)

/* ---- the two worlds ------------------------------------------------------------------- */

#define HIGH_SLOTS 2

/* history: 0 nothing; 1 scattered despawns on the free list and the spawn cache holding the
 * commonest shape; 2 the slots a few short of a page (4096); 3 a slot at its last generation
 * on the free list and a retired one. Both worlds stand at tick 3. late: register LATE now. */
static void side_make(side *s, int history, bool late, kiln_entity *reals, int32_t *real_count) {
    memset(s, 0, sizeof *s);
    test_allocator_init(&s->alloc);
    s->w = test_world_create(&s->alloc);
    for (int c = 0; c < NCOMP; c++) {
        if (c == LATE && !late) {
            s->comp[c] = (kiln_component)(kiln_component_count(s->w) + 1);
            continue;
        }
        kiln_component_desc d = desc_of(c, &s->log);
        ASSERT_OK_IN(s->w, kiln_component_register(s->w, &d, &s->comp[c]));
    }
    ASSERT_OK_IN(s->w, kiln_event_register(s->w, &(kiln_component_desc){.name = "Hit", .size = 8}, &s->hit));
    kiln_tick_advance(s->w);
    kiln_tick_advance(s->w);
    int32_t n = 0;
    kiln_component pv[2] = {s->comp[POS], s->comp[VEL]};
    if (history == 1) {
        kiln_entity e[300];
        for (int i = 0; i < 300; i++) ASSERT_OK_IN(s->w, kiln_spawn_with(s->w, pv, NULL, 2, &e[i]));
        for (int i = 0; i < 300; i++)
            if (i % 3 != 1) ASSERT_OK_IN(s->w, kiln_despawn(s->w, e[(i * 37) % 300]));
            else if (n < 64) reals[n++] = e[(i * 37) % 300];
    } else if (history == 2) {
        for (int i = 0; i < 4096 - 40; i++) {
            kiln_entity e;
            ASSERT_OK_IN(s->w, kiln_spawn(s->w, &e));
            if (i % 97 == 0 && n < 64) reals[n++] = e;
        }
    } else if (history == 3) {
        for (int i = 0; i < 8; i++) ASSERT_OK_IN(s->w, kiln_spawn_with(s->w, pv, NULL, 2, &reals[n++]));
        kiln_entity e[HIGH_SLOTS], anchor;
        ASSERT_OK_IN(s->w, kiln_spawn(s->w, &anchor)); /* the empty archetype never empties */
        for (int k = 0; k < HIGH_SLOTS; k++) ASSERT_OK_IN(s->w, kiln_spawn(s->w, &e[k]));
        /* slot 0 ends retired (despawned at the last generation), slot 1 free at the last */
        for (int k = 0; k < HIGH_SLOTS; k++) {
            uint32_t last = KILN_ENTITY_GENERATION_MAX - (uint32_t)k;
            while (kiln_entity_generation(e[k]) < last) {
                ASSERT_OK_IN(s->w, kiln_despawn(s->w, e[k]));
                ASSERT_OK_IN(s->w, kiln_spawn(s->w, &e[k]));
            }
            ASSERT_OK_IN(s->w, kiln_despawn(s->w, e[k]));
        }
    }
    *real_count = n;
}

static void side_free(side *s) {
    kiln_world_destroy(s->w);
    EXPECT_EQ(s->alloc.live_bytes, 0);
    EXPECT_EQ(s->alloc.bad_osize, 0);
    EXPECT_EQ(s->log.bad_payload, 0);
    for (int32_t i = 0; i < s->log.id_count; i++) EXPECT(s->log.ids[i] >= 0);
}

/* ---- comparing --------------------------------------------------------------------------- */

/* Per component: the chunks a query visits, each with its first entity, rows and column tick. */
static void assert_same_column_ticks(side *s) {
    for (kiln_component c = 1; c <= (kiln_component)kiln_component_count(s[0].w); c++) {
        kiln_query *q[2];
        kiln_iter it[2];
        for (int k = 0; k < 2; k++) {
            ASSERT_OK_IN(s[k].w, kiln_query_create(s[k].w, &(kiln_query_desc){.with = {c}}, &q[k]));
            kiln_query_iter(q[k], &it[k]);
        }
        for (;;) {
            bool more = kiln_query_next(&it[0]);
            EXPECT_EQ(more, kiln_query_next(&it[1]));
            if (!more) break;
            EXPECT_EQ(it[0].count, it[1].count);
            EXPECT_EQ(it[0].entities[0], it[1].entities[0]);
            EXPECT_EQ(kiln_iter_column_tick(&it[0], 0), kiln_iter_column_tick(&it[1], 0));
        }
        for (int k = 0; k < 2; k++) kiln_query_destroy(q[k]);
    }
}

/* The worlds are equal: entities in row order, each component's presence, change tick and
 * value (all stride bytes, padding included; an Owned value by its id and payload), the world
 * hash, slots, archetypes and memory, every column's latest tick, and the events. */
static void assert_same_worlds(side *s) {
    int64_t n = kiln_world_entities(s[0].w, NULL, 0);
    EXPECT_EQ(n, kiln_world_entities(s[1].w, NULL, 0));
    kiln_entity *list[2];
    for (int k = 0; k < 2; k++) {
        list[k] = malloc(sizeof(kiln_entity) * (size_t)(n + 1));
        EXPECT(NULL != list[k]);
        EXPECT_EQ(kiln_world_entities(s[k].w, list[k], n), n);
    }
    int32_t comps = kiln_component_count(s[0].w);
    EXPECT_EQ(comps, kiln_component_count(s[1].w));
    for (int64_t i = 0; i < n; i++) {
        kiln_entity e = list[0][i];
        EXPECT_EQ(e, list[1][i]);
        for (kiln_component c = 1; c <= (kiln_component)comps; c++) {
            bool has = kiln_has(s[0].w, e, c);
            EXPECT_EQ(has, kiln_has(s[1].w, e, c));
            if (!has) continue;
            EXPECT_EQ(kiln_changed_tick(s[0].w, e, c), kiln_changed_tick(s[1].w, e, c));
            kiln_component_info info;
            EXPECT(kiln_component_info_get(s[0].w, c, &info));
            if (info.size == 0) continue;
            const void *a = kiln_get(s[0].w, e, c), *b = kiln_get(s[1].w, e, c);
            EXPECT(a && b);
            if (info.has_destroy) {
                const test_owned *oa = a, *ob = b;
                EXPECT_EQ(oa->id, ob->id);
                EXPECT_EQ(oa->payload != NULL, ob->payload != NULL);
                if (oa->payload) EXPECT_EQ(*oa->payload, *ob->payload);
            } else {
                if (memcmp(a, b, info.stride) != 0)
                    ck_abort_msg("entity %llu component %u differs", (unsigned long long)e, (unsigned)c);
            }
        }
    }
    for (int k = 0; k < 2; k++) free(list[k]);
    EXPECT_EQ(kiln_world_hash(s[0].w), kiln_world_hash(s[1].w));
    kiln_world_stats st[2];
    for (int k = 0; k < 2; k++) kiln_world_stats_get(s[k].w, &st[k]);
    EXPECT_EQ(st[0].entities, st[1].entities);
    EXPECT_EQ(st[0].entity_slots, st[1].entity_slots);
    EXPECT_EQ(st[0].archetypes, st[1].archetypes);
    EXPECT_EQ(st[0].bytes, st[1].bytes);
    EXPECT_EQ(st[0].allocations, st[1].allocations);
    int64_t events = kiln_event_count(s[0].w, s[0].hit);
    EXPECT_EQ(events, kiln_event_count(s[1].w, s[1].hit));
    for (int64_t i = 0; i < events; i++)
        EXPECT(memcmp(kiln_event_get(s[0].w, s[0].hit, i), kiln_event_get(s[1].w, s[1].hit, i), 8) == 0);
    assert_same_column_ticks(s);
}

/* ---- programs ---------------------------------------------------------------------------- */

static op *push_op(program *p, op_kind kind, int32_t target, int32_t comp) {
    if (p->count == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->ops = realloc(p->ops, sizeof(op) * (size_t)p->cap);
        EXPECT(NULL != p->ops);
    }
    op *o = &p->ops[p->count++];
    memset(o, 0, sizeof *o);
    *o = (op){.kind = kind, .target = target, .comp = comp};
    return o;
}

static int32_t new_entry(program *p) {
    if (p->ents == p->ents_cap) {
        p->ents_cap = p->ents_cap ? 2 * p->ents_cap : 256;
        for (int k = 0; k < 2; k++) {
            p->ent[k] = realloc(p->ent[k], sizeof(kiln_entity) * (size_t)p->ents_cap);
            EXPECT(NULL != p->ent[k]);
        }
        p->alive = realloc(p->alive, sizeof(bool) * (size_t)p->ents_cap);
        p->has = realloc(p->has, sizeof(uint32_t) * (size_t)p->ents_cap);
        EXPECT(p->alive && p->has);
    }
    p->ent[0][p->ents] = p->ent[1][p->ents] = KILN_NULL_ENTITY;
    p->alive[p->ents] = true;
    p->has[p->ents] = 0;
    return p->ents++;
}

static int32_t owned_ids; /* fresh Owned ids, unique across a test */

/* A value for comp, or none (its defaults) about one time in eight. */
static void give_value(program *p, op *o) {
    o->has_value = pick(p, 8) != 0;
    if (o->comp == OWNED) o->owned_id = ++owned_ids;
    for (size_t i = 0; i < sizeof o->value; i++) o->value[i] = (unsigned char)next_rand(p);
}

/* Adds comp to entry t in the model, as an add (add_sized for LATE, sometimes for others). */
static void gen_add(program *p, int32_t t, int32_t comp) {
    op_kind kind = comp == LATE || pick(p, 6) == 0 ? OP_ADD_SIZED : OP_ADD;
    give_value(p, push_op(p, kind, t, comp));
    p->has[t] |= 1u << comp;
}

/* The shapes runs are made of (component lists in recording order, -1 ends). */
static const int8_t shapes[][10] = {
    {POS, VEL, -1},
    {POS, VEL, V16, -1},
    {W12, TAG, B24, -1},
    {V16, -1},
    {TAG, -1},
    {VEL, POS, -1},                   /* the first shape's archetype, another cache key */
    {POS, VEL, LATE, -1},             /* LATE recorded before it is registered */
    {DEF, POS, W12, V16, -1},
    {POS, VEL, POS, -1},              /* a repeat: the second add lands after the spawn */
    {-1},                             /* a bare spawn */
    {POS, VEL, W12, V16, B24, DEF, TAG, LATE, -1},      /* the spawn cache's most */
    {POS, VEL, W12, V16, B24, DEF, TAG, LATE, P12, -1}, /* past the spawn cache */
    {V16, P12, -1},                   /* padded: a spawn cache that is not plain */
    {POS, VEL, OWNED, -1},            /* hooks */
    {POS, CHECKED, -1},               /* a check hook */
};
#define SHAPES ((int32_t)(sizeof shapes / sizeof shapes[0]))

static void gen_unit(program *p, int32_t shape) {
    int32_t t = new_entry(p);
    push_op(p, OP_SPAWN, t, 0);
    for (int m = 0; shapes[shape][m] >= 0; m++) gen_add(p, t, shapes[shape][m]);
}

/* A live entry, most often the latest one (a placeholder just spawned), or -1. */
static int32_t live_entry(program *p) {
    for (int tries = 0; tries < 8; tries++) {
        int32_t t = pick(p, 3) == 0 && p->ents > 0 ? p->ents - 1 : (p->ents ? pick(p, p->ents) : -1);
        if (t >= 0 && p->alive[t]) return t;
    }
    return -1;
}

static void gen_single(program *p) {
    int32_t t = live_entry(p), comp = pick(p, NCOMP), kind = pick(p, 6);
    if (kind == 5) { /* an emit between spawns */
        op *o = push_op(p, OP_EMIT, -1, 0);
        give_value(p, o);
        return;
    }
    if (t < 0) return;
    if (kind == 0) {
        gen_add(p, t, comp);
    } else if (kind == 1) { /* a set of a component it has (not LATE: unknown when recorded) */
        for (int c = 0; c < NCOMP; c++, comp = (comp + 1) % NCOMP)
            if (comp != LATE && comp != TAG && (p->has[t] >> comp & 1)) {
                give_value(p, push_op(p, OP_SET, t, comp));
                break;
            }
    } else if (kind == 2) {
        if (comp == LATE) return;
        push_op(p, OP_REMOVE, t, comp);
        p->has[t] &= ~(1u << comp);
    } else {
        /* a despawn, sometimes of an entity dead already (skipped) */
        int32_t d = pick(p, 4) == 0 ? pick(p, p->ents) : t;
        push_op(p, OP_DESPAWN, d, 0);
        p->alive[d] = false;
    }
}

/* A program of about length commands: runs of one shape (mostly the first, up to a few
 * hundred long) with single commands between them. */
static void gen_program(program *p, int64_t length) {
    while (p->count < length) {
        if (pick(p, 3) != 0) {
            int32_t shape = pick(p, 2) ? 0 : pick(p, SHAPES);
            int32_t len = 1 + (pick(p, 3) == 0 ? pick(p, 400) : pick(p, 6));
            for (int32_t i = 0; i < len; i++) {
                gen_unit(p, shape);
                if (pick(p, 40) == 0) gen_single(p);
            }
        } else {
            gen_single(p);
        }
    }
}

static void program_free(program *p) {
    free(p->ops);
    for (int k = 0; k < 2; k++) free(p->ent[k]);
    free(p->alive);
    free(p->has);
}

/* The value pointer for o, on either side (an Owned value made now: the callee takes it over). */
static void *value_for(const op *o, test_owned *owned) {
    if (!o->has_value) return NULL;
    if (o->comp == OWNED) {
        *owned = test_owned_make(o->owned_id);
        return owned;
    }
    return (void *)o->value;
}

/* Records ops [from, to) into cmd (side 0). */
static void record(program *p, side *s, kiln_commands *cmd, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i++) {
        op *o = &p->ops[i];
        kiln_entity e = o->target >= 0 ? p->ent[0][o->target] : KILN_NULL_ENTITY;
        kiln_component c = s->comp[o->comp];
        test_owned owned;
        void *v = value_for(o, &owned);
        kiln_result r = KILN_OK;
        switch (o->kind) {
        case OP_SPAWN: r = kiln_commands_spawn(cmd, &p->ent[0][o->target]); break;
        case OP_ADD: r = kiln_commands_add(cmd, e, c, v); break;
        case OP_ADD_SIZED: r = kiln_commands_add_sized(cmd, e, c, v, size_of(o->comp)); break;
        case OP_SET: r = kiln_commands_set(cmd, e, c, v); break;
        case OP_REMOVE: r = kiln_commands_remove(cmd, e, c); break;
        case OP_DESPAWN: r = kiln_commands_despawn(cmd, e); break;
        case OP_EMIT: r = kiln_commands_emit(cmd, s->hit, v); break;
        }
        if (r != KILN_OK)
            ck_abort_msg("recording command %lld: %s", (long long)i, kiln_commands_error(cmd));
    }
}

/* Applies the step at i on side 1 as the buffer's apply takes it one by one: a spawn with the
 * adds to it that follow up to a repeated component (kiln_spawn_with), any other command
 * alone. Writes the commands the step covers to used; the call's result. */
static kiln_result direct_step(program *p, side *s, int64_t i, int64_t *used) {
    op *o = &p->ops[i];
    kiln_world *w = s->w;
    kiln_entity e = o->target >= 0 ? p->ent[1][o->target] : KILN_NULL_ENTITY;
    test_owned owned[64];
    *used = 1;
    if (o->kind == OP_SPAWN) {
        kiln_component comps[64] = {0};
        const void *values[64] = {0};
        int32_t n = 0;
        for (int64_t j = i + 1; j < p->count && n < 64; j++) {
            op *a = &p->ops[j];
            if ((a->kind != OP_ADD && a->kind != OP_ADD_SIZED) || a->target != o->target) break;
            bool repeat = false;
            for (int32_t m = 0; m < n; m++) repeat |= comps[m] == s->comp[a->comp];
            if (repeat) break;
            comps[n] = s->comp[a->comp];
            values[n] = value_for(a, &owned[n]);
            n++;
        }
        kiln_entity made = KILN_NULL_ENTITY;
        kiln_result r = kiln_spawn_with(w, comps, values, n, &made);
        if (r == KILN_OK) {
            p->ent[1][o->target] = made;
            *used = 1 + n;
        } else {
            for (int32_t m = 0; m < n; m++)
                if (values[m] == &owned[m]) test_owned_release(&owned[m]);
        }
        return r;
    }
    void *v = value_for(o, &owned[0]);
    kiln_result r = KILN_OK;
    switch (o->kind) {
    case OP_ADD:
    case OP_ADD_SIZED: r = kiln_add(w, e, s->comp[o->comp], v); break;
    case OP_SET: r = kiln_set(w, e, s->comp[o->comp], v); break;
    case OP_REMOVE: r = kiln_remove(w, e, s->comp[o->comp], NULL); break;
    case OP_DESPAWN: r = kiln_is_alive(w, e) ? kiln_despawn(w, e) : KILN_OK; break;
    case OP_EMIT: r = kiln_event_emit(w, s->hit, v); break;
    default: break;
    }
    if (r != KILN_OK && v == &owned[0]) test_owned_release(&owned[0]);
    return r;
}

/* Runs direct steps from *at until the end of the program or a failure. */
static kiln_result direct_run(program *p, side *s, int64_t *at) {
    while (*at < p->count) {
        int64_t used = 0;
        kiln_result r = direct_step(p, s, *at, &used);
        if (r != KILN_OK) return r;
        *at += used;
    }
    return KILN_OK;
}

/* Both sides, their real entities, and a program over them. */
static void pair_make(side *s, program *p, int history, bool late_known, uint64_t seed) {
    kiln_entity reals[2][64];
    int32_t n[2];
    side_make(&s[0], history, late_known, reals[0], &n[0]);
    side_make(&s[1], history, true, reals[1], &n[1]);
    EXPECT_EQ(n[0], n[1]);
    memset(p, 0, sizeof *p);
    p->rng = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int32_t i = 0; i < n[0]; i++) {
        EXPECT_EQ(reals[0][i], reals[1][i]);
        int32_t t = new_entry(p);
        p->ent[0][t] = p->ent[1][t] = reals[0][i];
        p->has[t] = history == 2 ? 0 : (1u << POS | 1u << VEL);
    }
    p->reals = n[0];
}

static void register_late(side *s) {
    kiln_component id;
    kiln_component_desc d = desc_of(LATE, NULL);
    ASSERT_OK_IN(s->w, kiln_component_register(s->w, &d, &id));
    EXPECT_EQ(id, s->comp[LATE]);
}

/* Every placeholder resolves to the entity its direct twin became. */
static void assert_same_handles(program *p, kiln_commands *cmd) {
    for (int32_t t = p->reals; t < p->ents; t++)
        EXPECT_EQ(kiln_commands_resolve(cmd, p->ent[0][t]), p->ent[1][t]);
}

static void assert_same_next_handles(side *s) {
    kiln_entity next[2];
    for (int k = 0; k < 2; k++) ASSERT_OK_IN(s[k].w, kiln_spawn(s[k].w, &next[k]));
    EXPECT_EQ(next[0], next[1]);
}

/* ---- the differential runs --------------------------------------------------------------- */

KILN_TEST_GROUP_WITH(differential, .timeout = 120);

/* A run of shape 0 alone, every value given, at a new tick, with the spawn cache already on
 * it (a direct spawn of that shape, despawned), so the batch makes the rows it has room for. */
static void gen_pure_run(program *p, side *s, int32_t units) {
    for (int k = 0; k < 2; k++) {
        kiln_world *w = s[k].w;
        kiln_entity e;
        ASSERT_OK_IN(w, kiln_spawn_with(w, (kiln_component[]){s[k].comp[POS], s[k].comp[VEL]}, NULL, 2, &e));
        ASSERT_OK_IN(w, kiln_despawn(w, e));
        kiln_tick_advance(w);
    }
    int64_t from = p->count;
    for (int32_t i = 0; i < units; i++) gen_unit(p, 0);
    for (int64_t i = from; i < p->count; i++) p->ops[i].has_value = true; /* no defaults written */
}

/* _i: the seed; its history (see side_make) is _i % 4. Four programs through one buffer
 * (each a new batch): random; a pure run of one spawn (the row the despawn left is room for
 * it, so the batch alone writes its columns at the new tick); a pure run of 700 (archetype
 * growths in between); random again. Each is compared with the direct world after its apply. */
KILN_TEST_LOOP(differential, random_programs_land_exactly_as_their_commands_one_by_one, 0, 12) {
    side s[2];
    program p;
    pair_make(s, &p, _i % 4, false, (uint64_t)_i + 1);
    kiln_commands *cmd = kiln_commands_create(s[0].w);
    EXPECT(NULL != cmd);
    for (int round = 0; round < 4; round++) {
        int64_t from = p.count;
        if (round == 1 || round == 2) gen_pure_run(&p, s, round == 1 ? 1 : 700);
        else gen_program(&p, from + 3000);
        record(&p, &s[0], cmd, from, p.count);
        if (round == 0) register_late(&s[0]); /* after the commands naming it */
        int64_t applied = -1, at = from;
        ASSERT_OK_IN(s[0].w, kiln_commands_apply(cmd, s[0].w, &applied));
        EXPECT_EQ(applied, p.count - from);
        ASSERT_OK_IN(s[1].w, direct_run(&p, &s[1], &at));
        assert_same_handles(&p, cmd);
        assert_same_worlds(s);
        /* the next batch names these entities by handle (its placeholders are its own) */
        for (int32_t t = p.reals; t < p.ents; t++) p.ent[0][t] = kiln_commands_resolve(cmd, p.ent[0][t]);
        p.reals = p.ents;
        for (int k = 0; k < 2; k++) kiln_tick_advance(s[k].w);
    }
    assert_same_next_handles(s);
    kiln_commands_destroy(cmd);
    for (int k = 0; k < 2; k++) side_free(&s[k]);
    EXPECT_EQ(s[0].log.destroyed, s[1].log.destroyed);
    program_free(&p);
}

/* A batched run is a structural change like any spawn: a getter made before the apply is
 * stale after it (debug builds abort when it is read). */
KILN_TEST_SIGNAL(differential, a_getter_made_before_a_batched_run_is_stale_after_it, SIGABRT) {
    side s[2];
    program p;
    pair_make(s, &p, 1, true, 5);
    gen_pure_run(&p, s, 50);
    kiln_commands *cmd = kiln_commands_create(s[0].w);
    EXPECT(NULL != cmd);
    record(&p, &s[0], cmd, 0, p.count);
    kiln_getter g;
    ASSERT_OK_IN(s[0].w, kiln_getter_init(s[0].w, s[0].comp[POS], &g));
    ASSERT_OK_IN(s[0].w, kiln_commands_apply(cmd, s[0].w, NULL));
    kiln_getter_check(&g);
}

/* Refusing the n-th allocation of the apply and of the direct calls alike: both stop at the
 * same command with the same world, and an apply resumed after each of three such failures
 * ends where the direct calls end. _i: the history (not the last generations: too slow to
 * build hundreds of times). */
KILN_TEST_LOOP(differential, out_of_memory_stops_and_resumes_where_one_by_one_does, 0, 3) {
    int64_t failures = 0;
    for (int64_t n = 0;; n++) {
        EXPECT(n < 400);
        side s[2];
        program p;
        pair_make(s, &p, _i, true, (uint64_t)n + 100);
        gen_program(&p, 700);
        kiln_commands *cmd = kiln_commands_create(s[0].w);
        EXPECT(NULL != cmd);
        record(&p, &s[0], cmd, 0, p.count);
        int64_t done = 0, at = 0;
        int tries = 0;
        kiln_result r;
        do {
            bool inject = tries++ < 3;
            for (int k = 0; k < 2; k++) {
                if (inject) test_allocator_fail_after(&s[k].alloc, n);
                else test_allocator_fail_never(&s[k].alloc);
            }
            int64_t applied = -1;
            r = kiln_commands_apply(cmd, s[0].w, &applied);
            kiln_result direct = direct_run(&p, &s[1], &at);
            for (int k = 0; k < 2; k++) test_allocator_fail_never(&s[k].alloc);
            done += applied;
            EXPECT_EQ(r, direct);
            EXPECT_EQ(done, at);
            EXPECT_EQ(kiln_commands_count(cmd), p.count - done);
            if (r != KILN_OK) {
                failures++;
                EXPECT_EQ(r, KILN_ERR_OUT_OF_MEMORY);
            }
            assert_same_worlds(s);
        } while (r != KILN_OK);
        assert_same_handles(&p, cmd);
        assert_same_next_handles(s);
        kiln_commands_destroy(cmd);
        for (int k = 0; k < 2; k++) side_free(&s[k]);
        program_free(&p);
        if (tries == 1) break; /* n past every allocation the program makes */
    }
    ck_assert_int_ge(failures, 10);
}

/* A failed apply leaves the rest pending; clearing it then destroys each pending Owned value
 * once and gives inline values back without a hook, and the world keeps what landed. */
KILN_TEST(differential, clearing_after_a_failed_apply_destroys_each_pending_value_once) {
    side s[2];
    program p;
    pair_make(s, &p, 1, true, 77);
    gen_program(&p, 1500);
    kiln_commands *cmd = kiln_commands_create(s[0].w);
    EXPECT(NULL != cmd);
    record(&p, &s[0], cmd, 0, p.count);
    int64_t recorded_owned = 0;
    for (int64_t i = 0; i < p.count; i++)
        recorded_owned += p.ops[i].comp == OWNED && p.ops[i].has_value &&
                          (p.ops[i].kind == OP_ADD || p.ops[i].kind == OP_ADD_SIZED || p.ops[i].kind == OP_SET);
    ck_assert_int_gt(recorded_owned, 0);
    int64_t applied = -1, at = 0;
    test_allocator_fail_after(&s[0].alloc, 6);
    test_allocator_fail_after(&s[1].alloc, 6);
    kiln_result r = kiln_commands_apply(cmd, s[0].w, &applied);
    EXPECT_EQ(r, direct_run(&p, &s[1], &at));
    for (int k = 0; k < 2; k++) test_allocator_fail_never(&s[k].alloc);
    EXPECT_EQ(r, KILN_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(applied, at);
    int64_t destroyed_before = s[0].log.destroyed;
    int64_t pending_owned = 0;
    for (int64_t i = applied; i < p.count; i++)
        pending_owned += p.ops[i].comp == OWNED && p.ops[i].has_value &&
                         (p.ops[i].kind == OP_ADD || p.ops[i].kind == OP_ADD_SIZED || p.ops[i].kind == OP_SET);
    kiln_commands_clear(cmd);
    EXPECT_EQ(s[0].log.destroyed - destroyed_before, pending_owned);
    assert_same_worlds(s);
    kiln_commands_destroy(cmd);
    for (int k = 0; k < 2; k++) side_free(&s[k]);
    program_free(&p);
}

/* A batched run that ends the buffer exactly where its command array ends (64 commands: 32
 * spawns, each with its one add, the array's first size) lands whole, reading no command past
 * the last (AddressSanitizer caught the run looking one past the array for a further spawn).
 * The archetype has room for more than the run, so only the buffer's end stops it. */
KILN_TEST(differential, a_run_that_fills_the_command_array_to_its_end_reads_nothing_past_it) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *w = test_world_create(&alloc);
    kiln_component pos = test_register_position(w);
    kiln_entity e[100], ph[32];
    for (int i = 0; i < 100; i++) ASSERT_OK_IN(w, kiln_spawn_with(w, &pos, NULL, 1, &e[i]));
    for (int i = 0; i < 60; i++) ASSERT_OK_IN(w, kiln_despawn(w, e[i]));
    kiln_commands *cmd = kiln_commands_create(w);
    EXPECT(NULL != cmd);
    for (int i = 0; i < 32; i++) {
        ASSERT_OK_IN(w, kiln_commands_spawn(cmd, &ph[i]));
        ASSERT_OK_IN(w, kiln_commands_add(cmd, ph[i], pos, &(test_position){(float)i, 1}));
    }
    EXPECT_EQ(kiln_commands_count(cmd), 64);
    int64_t applied = -1;
    ASSERT_OK_IN(w, kiln_commands_apply(cmd, w, &applied));
    EXPECT_EQ(applied, 64);
    for (int i = 0; i < 32; i++) {
        kiln_entity made = kiln_commands_resolve(cmd, ph[i]);
        EXPECT_EQ(kiln_entity_index(made), kiln_entity_index(e[59 - i])); /* the free list */
        test_assert_position(w, made, pos, (float)i, 1);
    }
    EXPECT_EQ(kiln_entity_count(w), 72);
    kiln_commands_destroy(cmd);
    kiln_world_destroy(w);
    EXPECT_EQ(alloc.live_bytes, 0);
}

/* A system's own buffer (lenient, applied at the end of its stage while the schedule keeps
 * the world deferred) takes the same batched path: a random program recorded there lands as
 * the same commands made directly by an exclusive system of the other world's schedule. */
typedef struct system_run {
    program *p;
    side *s;
    int64_t at;
    kiln_result result;
} system_run;

static void record_system(const kiln_system_ctx *ctx) {
    system_run *run = ctx->user;
    record(run->p, run->s, ctx->commands, 0, run->p->count);
}

static void direct_system(const kiln_system_ctx *ctx) {
    system_run *run = ctx->user;
    run->result = direct_run(run->p, run->s, &run->at);
}

KILN_TEST_LOOP(differential, a_systems_buffer_lands_as_the_same_commands_made_directly, 0, 4) {
    side s[2];
    program p;
    pair_make(s, &p, _i, true, (uint64_t)_i + 500);
    gen_program(&p, 3000);
    system_run run[2] = {{&p, &s[0], 0, KILN_OK}, {&p, &s[1], 0, KILN_OK}};
    kiln_schedule *sched[2];
    for (int k = 0; k < 2; k++) {
        sched[k] = kiln_schedule_create(s[k].w, NULL);
        EXPECT(NULL != sched[k]);
        ASSERT_OK_IN(s[k].w, kiln_schedule_add(sched[k], &(kiln_system_desc){
                                 .name = "program", .run = k == 0 ? record_system : direct_system,
                                 .user = &run[k], .exclusive = k == 1, .main_thread = _i % 2 == 0}));
        ASSERT_OK_IN(s[k].w, kiln_schedule_run(sched[k], 1.0 / 60));
    }
    ASSERT_OK_IN(s[1].w, run[1].result);
    EXPECT_EQ(run[1].at, p.count);
    assert_same_worlds(s);
    for (int k = 0; k < 2; k++) kiln_schedule_destroy(sched[k]);
    assert_same_next_handles(s);
    for (int k = 0; k < 2; k++) side_free(&s[k]);
    program_free(&p);
}
