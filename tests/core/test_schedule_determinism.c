/* test_schedule_determinism.c: Check suite for determinism: a simulation run by a schedule
 * gives byte-identical worlds whatever the number of worker threads. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "schedule_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* determinism                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef struct life {
    int32_t hp;
    int32_t age;
} life;

typedef struct serial {
    uint32_t id;
    uint32_t origin;
} serial;

typedef struct sim {
    kiln_world *world;
    kiln_component pos, vel, life, serial, far, tagged;
    kiln_query *moving;   /* Position, Velocity */
    kiln_query *vels;     /* Velocity */
    kiln_query *lives;    /* Life */
    kiln_query *near;     /* Position, without Far */
    kiln_query *far_away; /* Position, Far */
    kiln_query *serials;  /* Serial */
    uint32_t serial_a, serial_b, frame;
    kiln_entity *scratch;
    int64_t scratch_cap;
    int64_t spawned, despawned;
    int64_t far_seen;
    atomic_int errors;
} sim;

static void sim_spawn_a(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    for (int i = 0; i < 4; i++) {
        uint32_t n = m->serial_a++;
        kiln_entity ph;
        EXPECT_OK(&m->errors, kiln_commands_spawn(ctx->commands, &ph));
        test_position p = {(float)(n % 17) - 8.0f, (float)(n % 5)};
        test_velocity v = {((float)(n % 7) - 3.0f) * 0.5f, ((float)(n % 3) - 1.0f) * 0.25f};
        life l = {20 + (int32_t)(n % 30), 0};
        serial s = {n, 1};
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->pos, &p));
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->vel, &v));
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->life, &l));
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->serial, &s));
    }
}

static void sim_spawn_b(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    for (int i = 0; i < 2; i++) {
        uint32_t n = m->serial_b++;
        kiln_entity ph;
        EXPECT_OK(&m->errors, kiln_commands_spawn(ctx->commands, &ph));
        test_position p = {(float)(n % 9) - 4.0f, -(float)(n % 4)};
        life l = {10 + (int32_t)(n % 40), 0};
        serial s = {n, 2};
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->pos, &p));
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->life, &l));
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->serial, &s));
    }
}

static void move_rows(kiln_iter *view, void *user) {
    const double *dt = user;
    test_position *p = kiln_iter_column(view, 0);
    const test_velocity *v = kiln_iter_column(view, 1);
    for (int32_t r = 0; r < view->count; r++) {
        p[r].x += v[r].x * (float)*dt;
        p[r].y += v[r].y * (float)*dt;
        kiln_iter_mark_changed(view, 0, r);
    }
}

static void sim_move(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    double dt = ctx->dt;
    EXPECT_OK(&m->errors, kiln_parallel_for(ctx->jobs, m->moving, 8, move_rows, &dt));
}

static void gravity_rows(kiln_iter *view, void *user) {
    (void)user;
    test_velocity *v = kiln_iter_column(view, 0);
    for (int32_t r = 0; r < view->count; r++) {
        v[r].y -= 0.125f;
        if (v[r].y < -2.0f) v[r].y = 2.0f;
        kiln_iter_mark_changed(view, 0, r);
    }
}

static void sim_gravity(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    EXPECT_OK(&m->errors, kiln_parallel_for(ctx->jobs, m->vels, 8, gravity_rows, NULL));
}

static void age_rows(kiln_iter *view, void *user) {
    (void)user;
    life *l = kiln_iter_column(view, 0);
    for (int32_t r = 0; r < view->count; r++) {
        l[r].age++;
        if (l[r].age % 3 == 0) l[r].hp -= 1 + (int32_t)(kiln_entity_index(view->entities[r]) % 2);
        kiln_iter_mark_changed(view, 0, r);
    }
}

static void sim_age(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    EXPECT_OK(&m->errors, kiln_parallel_for(ctx->jobs, m->lives, 8, age_rows, NULL));
}

/* Despawns the dead through the buffer. */
static void sim_reap(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    kiln_iter it;
    kiln_query_iter(m->lives, &it);
    while (kiln_query_next(&it)) {
        const life *l = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++)
            if (l[r].hp <= 0 || l[r].age > 45) {
                EXPECT_OK(&m->errors, kiln_commands_despawn(ctx->commands, it.entities[r]));
                m->despawned++;
            }
    }
}

/* Tags entities that wandered far and takes their velocity away. */
static void sim_far(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    kiln_iter it;
    kiln_query_iter(m->near, &it);
    while (kiln_query_next(&it)) {
        const test_position *p = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++)
            if (p[r].x > 6.0f || p[r].x < -6.0f) {
                EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, it.entities[r], m->far, NULL));
                EXPECT_OK(&m->errors, kiln_commands_remove(ctx->commands, it.entities[r], m->vel));
            }
    }
}

/* Sends far entities home: a velocity towards the origin, the tag removed. */
static void sim_home(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    kiln_iter it;
    kiln_query_iter(m->far_away, &it);
    while (kiln_query_next(&it)) {
        const test_position *p = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++) {
            m->far_seen++;
            test_velocity v = {p[r].x > 0.0f ? -1.5f : 1.5f, 0.5f};
            EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, it.entities[r], m->vel, &v));
            EXPECT_OK(&m->errors, kiln_commands_remove(ctx->commands, it.entities[r], m->far));
        }
    }
}

/* The plain world API from the main thread: spawns, tags, untags and despawns. */
static void sim_main(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    kiln_world *w = ctx->world;
    m->frame++;
    if (m->frame % 3 == 0) {
        kiln_entity e;
        EXPECT_OK(&m->errors, kiln_spawn(w, &e));
        EXPECT_OK(&m->errors, kiln_add(w, e, m->pos, &(test_position){0.5f, (float)m->frame}));
        EXPECT_OK(&m->errors, kiln_add(w, e, m->tagged, NULL));
        m->spawned++;
    }
    kiln_iter it;
    kiln_query_iter(m->serials, &it);
    while (kiln_query_next(&it)) {
        const serial *s = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++) {
            kiln_entity e = it.entities[r];
            if (s[r].id % 11 == m->frame % 11) {
                EXPECT_OK(&m->errors, kiln_add(w, e, m->tagged, NULL));
            } else if (s[r].id % 7 == m->frame % 7) {
                EXPECT_OK(&m->errors, kiln_remove(w, e, m->tagged, NULL));
            }
            if (s[r].origin == 2 && s[r].id % 13 == m->frame % 13) {
                EXPECT_OK(&m->errors, kiln_despawn(w, e));
                m->despawned++;
            }
        }
    }
}

/* Exclusive: despawns old tagged entities directly. */
static void sim_cull(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    kiln_world *w = ctx->world;
    int64_t n = 0;
    kiln_iter it;
    kiln_query_iter(m->lives, &it);
    while (kiln_query_next(&it)) {
        const life *l = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++)
            if (l[r].age > 30 && kiln_has(w, it.entities[r], m->tagged)) {
                if (n == m->scratch_cap) {
                    m->scratch_cap = m->scratch_cap ? m->scratch_cap * 2 : 64;
                    m->scratch = realloc(m->scratch, sizeof(kiln_entity) * (size_t)m->scratch_cap);
                    if (m->scratch == NULL) abort();
                }
                m->scratch[n++] = it.entities[r];
            }
    }
    for (int64_t i = 0; i < n; i++) EXPECT_OK(&m->errors, kiln_despawn(w, m->scratch[i]));
    m->despawned += n;
}

static kiln_component register_plain(kiln_world *w, const char *name, size_t size) {
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = name, .size = size},
                                             &id),
                     KILN_OK);
    return id;
}

static kiln_query *query_make(kiln_world *w, kiln_query_desc desc) {
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(w, &desc, &q), KILN_OK);
    return q;
}

static uint64_t fnv(uint64_t h, const void *data, size_t size) {
    const uint8_t *b = data;
    for (size_t i = 0; i < size; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Hashes every live entity handle and, per registered component, presence, value bytes and
 * change tick, in the world's own listing order. */
static uint64_t world_checksum(const kiln_world *w) {
    int64_t n = kiln_world_entities(w, NULL, 0);
    kiln_entity *list = malloc(sizeof(kiln_entity) * (size_t)(n ? n : 1));
    ck_assert_ptr_nonnull(list);
    ck_assert_int_eq(kiln_world_entities(w, list, n), n);
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &n, sizeof n);
    int32_t components = kiln_component_count(w);
    size_t sizes[16];
    ck_assert_int_lt(components, 16);
    for (kiln_component c = 1; c <= (kiln_component)components; c++) {
        kiln_component_info info;
        ck_assert(kiln_component_info_get(w, c, &info));
        sizes[c] = info.size;
    }
    for (int64_t i = 0; i < n; i++) {
        h = fnv(h, &list[i], sizeof list[i]);
        for (kiln_component c = 1; c <= (kiln_component)components; c++) {
            if (!kiln_has(w, list[i], c)) continue;
            h = fnv(h, &c, sizeof c);
            const void *value = kiln_get(w, list[i], c);
            if (value) h = fnv(h, value, sizes[c]);
            kiln_tick t = kiln_changed_tick(w, list[i], c);
            h = fnv(h, &t, sizeof t);
        }
    }
    free(list);
    return h;
}

#define SIM_FRAMES 200

typedef struct sim_result {
    uint64_t checksums[SIM_FRAMES];
    int64_t entities, spawned, despawned, far_seen, errors;
    int32_t stages;
    char stages_text[512];
} sim_result;

static void simulate(int32_t workers, sim_result *out) {
    kiln_jobs *jobs = workers < 0 ? NULL : kiln_jobs_create(&(kiln_jobs_desc){.workers = workers});
    sim m;
    memset(&m, 0, sizeof m);
    kiln_world *w = m.world = kiln_world_create(NULL);
    m.pos = test_register_position(w);
    m.vel = test_register_velocity(w);
    m.life = register_plain(w, "Life", sizeof(life));
    m.serial = register_plain(w, "Serial", sizeof(serial));
    m.far = test_register_tag(w, "Far");
    m.tagged = test_register_tag(w, "Tagged");
    m.moving = query_make(w, (kiln_query_desc){.with = {m.pos, m.vel}});
    m.vels = query_make(w, (kiln_query_desc){.with = {m.vel}});
    m.lives = query_make(w, (kiln_query_desc){.with = {m.life}});
    m.near = query_make(w, (kiln_query_desc){.with = {m.pos}, .without = {m.far}});
    m.far_away = query_make(w, (kiln_query_desc){.with = {m.pos, m.far}});
    m.serials = query_make(w, (kiln_query_desc){.with = {m.serial}});

    kiln_schedule *s = kiln_schedule_create(w, &(kiln_schedule_desc){.jobs = jobs});
    add_system(s, (kiln_system_desc){.name = "spawn_a", .run = sim_spawn_a, .user = &m});
    add_system(s, (kiln_system_desc){.name = "spawn_b", .run = sim_spawn_b, .user = &m});
    add_system(s, (kiln_system_desc){.name = "move", .run = sim_move, .user = &m,
                                     .reads = {m.vel}, .writes = {m.pos}});
    add_system(s, (kiln_system_desc){.name = "gravity", .run = sim_gravity, .user = &m,
                                     .writes = {m.vel}});
    add_system(s, (kiln_system_desc){.name = "age", .run = sim_age, .user = &m,
                                     .writes = {m.life}});
    add_system(s, (kiln_system_desc){.name = "reap", .run = sim_reap, .user = &m,
                                     .reads = {m.life}});
    add_system(s, (kiln_system_desc){.name = "far", .run = sim_far, .user = &m,
                                     .reads = {m.pos}});
    add_system(s, (kiln_system_desc){.name = "home", .run = sim_home, .user = &m,
                                     .reads = {m.pos}});
    add_system(s, (kiln_system_desc){.name = "main", .run = sim_main, .user = &m,
                                     .reads = {m.serial}, .main_thread = true});
    add_system(s, (kiln_system_desc){.name = "cull", .run = sim_cull, .user = &m,
                                     .exclusive = true, .before = {"spawn_a"}});
    out->stages = kiln_schedule_stage_count(s);
    snprintf(out->stages_text, sizeof out->stages_text, "%s", describe(s));
    for (int frame = 0; frame < SIM_FRAMES; frame++) {
        ck_assert_int_eq(kiln_schedule_run(s, 0.5), KILN_OK);
        out->checksums[frame] = world_checksum(w);
    }
    out->entities = kiln_entity_count(w);
    out->spawned = m.spawned + m.serial_a + m.serial_b;
    out->despawned = m.despawned;
    out->far_seen = m.far_seen;
    out->errors = atomic_load(&m.errors);
    kiln_schedule_destroy(s);
    kiln_query_destroy(m.moving);
    kiln_query_destroy(m.vels);
    kiln_query_destroy(m.lives);
    kiln_query_destroy(m.near);
    kiln_query_destroy(m.far_away);
    kiln_query_destroy(m.serials);
    kiln_world_destroy(w);
    kiln_jobs_destroy(jobs);
    free(m.scratch);
}

KILN_TEST_GROUP_WITH(determinism, .timeout = 120);

KILN_TEST(determinism, a_schedule_gives_byte_identical_worlds_whatever_the_worker_count) {
    static sim_result base, other;
    simulate(0, &base);
    /* the run did real work: spawns, despawns, far trips, several multi-system stages */
    ck_assert_int_ge(base.stages, 4);
    ck_assert_int_gt(base.entities, 100);
    ck_assert_int_gt(base.despawned, 200);
    ck_assert_int_gt(base.far_seen, 0);
    ck_assert_int_eq(base.errors, 0);
    const int32_t counts[] = {2, 3, -1};
    for (int k = 0; k < 3; k++) {
        simulate(counts[k], &other);
        ck_assert_str_eq(other.stages_text, base.stages_text);
        for (int frame = 0; frame < SIM_FRAMES; frame++)
            ck_assert_msg(other.checksums[frame] == base.checksums[frame],
                          "workers %d: the world differs from the inline one at frame %d",
                          (int)counts[k], frame);
        ck_assert_int_eq(other.errors, 0);
        ck_assert_int_eq(other.entities, base.entities);
        ck_assert_int_eq(other.despawned, base.despawned);
    }
}
