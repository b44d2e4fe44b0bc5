/* test_asteroids_collide.c: Check suite for the sample game's collide system out of memory:
 * a frame whose grid or hit list cannot grow emits nothing and is counted as dropped. */
#include <check.h>
#include <stdlib.h>

#include "components.h"
#include "systems.h"

/* An allocator that refuses every allocation or growth of at least `refuse_from` bytes while
 * `refusing` is set; frees always work. */
typedef struct failing {
    bool refusing;
    size_t refuse_from;
    int64_t refused;
} failing;

static void *failing_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    failing *f = ud;
    (void)osize;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (f->refusing && nsize >= f->refuse_from) {
        f->refused++;
        return NULL;
    }
    return realloc(ptr, nsize);
}

typedef struct field {
    kiln_world *world;
    game_ids ids;
    game_systems *systems;
    kiln_schedule *schedule;
} field;

/* pairs ships, each on top of an asteroid of its own, 100 units apart: pairs collisions a frame. */
static void field_open(field *f, failing *alloc, int32_t pairs) {
    f->world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(f->world);
    ck_assert_int_eq(game_components_register(f->world, &f->ids), KILN_OK);
    for (int32_t i = 0; i < pairs; i++) {
        Position at = {(float)(i % 40) * 100.0f + 50.0f, (float)(i / 40) * 100.0f + 50.0f};
        Velocity still = {0, 0};
        Ship ship = {.radius = 2, .hull = 150};
        Asteroid rock = {.radius = game_asteroid_radius(1), .size = 1};
        kiln_component ship_types[] = {f->ids.position, f->ids.velocity, f->ids.ship};
        kiln_component rock_types[] = {f->ids.position, f->ids.velocity, f->ids.asteroid};
        ck_assert_int_eq(kiln_spawn_with(f->world, ship_types, (const void *[]){&at, &still, &ship}, 3, NULL), KILN_OK);
        ck_assert_int_eq(kiln_spawn_with(f->world, rock_types, (const void *[]){&at, &still, &rock}, 3, NULL), KILN_OK);
    }
    f->systems = game_systems_create(f->world, &f->ids, failing_alloc, alloc);
    ck_assert_ptr_nonnull(f->systems);
    f->schedule = kiln_schedule_create(f->world, NULL);
    ck_assert_ptr_nonnull(f->schedule);
    ck_assert_int_eq(game_systems_add(f->systems, f->schedule), KILN_OK);
}

static void field_close(field *f) {
    kiln_schedule_destroy(f->schedule);
    game_systems_destroy(f->systems);
    kiln_world_destroy(f->world);
}

/* Collision events collide emitted in the frame just run. */
static int64_t collisions_now(const field *f) {
    kiln_tick tick = kiln_tick_current(f->world);
    int64_t n = 0;
    for (int64_t i = 0; i < kiln_event_count(f->world, f->ids.collision); i++) {
        const Collision *c = kiln_event_get(f->world, f->ids.collision, i);
        if (c->tick == tick) n++;
    }
    return n;
}

START_TEST(collide_counts_a_frame_dropped_when_its_grid_cannot_grow) {
    failing alloc = {.refuse_from = 1};
    field f;
    field_open(&f, &alloc, 10);
    alloc.refusing = true; /* the grid of ships is made at the first frame */
    ck_assert_int_eq(kiln_schedule_run(f.schedule, 1.0 / FRAME_RATE), KILN_OK);
    ck_assert_int_gt(alloc.refused, 0);
    ck_assert_int_eq(collisions_now(&f), 0);
    ck_assert_int_eq(game_systems_dropped(f.systems), 1);
    alloc.refusing = false; /* the next frame tries again, and finds them */
    ck_assert_int_eq(kiln_schedule_run(f.schedule, 1.0 / FRAME_RATE), KILN_OK);
    ck_assert_int_eq(collisions_now(&f), 10);
    ck_assert_int_eq(game_systems_dropped(f.systems), 1);
    field_close(&f);
}
END_TEST

START_TEST(collide_counts_a_frame_dropped_when_its_hits_cannot_grow) {
    /* 1100 hits pass the 1024 the list starts with; the grid (1100 ships) is smaller than the
     * list grown to 2200 hits, so refusing from the grid's size up lets the grid through */
    failing alloc = {.refuse_from = sizeof(Collision) * 2048};
    field f;
    field_open(&f, &alloc, 1100);
    alloc.refusing = true;
    ck_assert_int_eq(kiln_schedule_run(f.schedule, 1.0 / FRAME_RATE), KILN_OK);
    ck_assert_int_gt(alloc.refused, 0);
    ck_assert_int_eq(collisions_now(&f), 0);
    ck_assert_int_eq(game_systems_dropped(f.systems), 1);
    alloc.refusing = false;
    ck_assert_int_eq(kiln_schedule_run(f.schedule, 1.0 / FRAME_RATE), KILN_OK);
    ck_assert_int_eq(collisions_now(&f), 1100);
    ck_assert_int_eq(game_systems_dropped(f.systems), 1);
    field_close(&f);
}
END_TEST

START_TEST(collide_drops_nothing_with_memory) {
    failing alloc = {0};
    field f;
    field_open(&f, &alloc, 1100);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_schedule_run(f.schedule, 1.0 / FRAME_RATE), KILN_OK);
    ck_assert_int_eq(collisions_now(&f), 1100);
    ck_assert_int_eq(game_systems_dropped(f.systems), 0);
    field_close(&f);
}
END_TEST

int main(void) {
    Suite *s = suite_create("asteroids_collide");
    TCase *tc = tcase_create("out_of_memory");
    tcase_add_test(tc, collide_counts_a_frame_dropped_when_its_grid_cannot_grow);
    tcase_add_test(tc, collide_counts_a_frame_dropped_when_its_hits_cannot_grow);
    tcase_add_test(tc, collide_drops_nothing_with_memory);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
