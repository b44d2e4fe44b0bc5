/* test_world_teardown.c: Check suite for the calls back into the world that kiln_world_destroy's
 * teardown and destroy hooks make: an addon's state is gone once its teardown hook ran, never freed. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "test_registry.h"
#include "test_support.h"

typedef struct teardown_probe {
    kiln_world *world;
    int late_runs;
    kiln_result registered;
    char message[256];
    bool named;     /* kiln_name_get gave a name from the value's destroy hook */
    bool hook_ran;
} teardown_probe;

static teardown_probe T;

KILN_TEST_GROUP(teardown);

static void late_fini(kiln_world *world, void *ctx) { T.late_runs++; }

static void registering_fini(kiln_world *world, void *ctx) {
    T.registered = kiln_world_atfini(world, late_fini, NULL);
}

/* A teardown hook registering another (an addon it initialises) had it never run: the addon's
 * state leaked. */
KILN_TEST(teardown, a_teardown_hook_registered_by_another_during_destroy_runs_too) {
    memset(&T, 0, sizeof T);
    kiln_world *world = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_world_atfini(world, registering_fini, NULL), KILN_OK);
    kiln_world_destroy(world);
    ck_assert_int_eq(T.registered, KILN_OK);
    ck_assert_int_eq(T.late_runs, 1);
}

static void reading_destroy(void *ptr, int32_t count, void *ctx) {
    const kiln_entity *self = ptr;
    for (int32_t i = 0; i < count; i++) {
        T.hook_ran = true;
        T.named |= kiln_name_get(T.world, self[i]) != NULL;
        T.registered = kiln_world_atfini(T.world, late_fini, NULL);
        snprintf(T.message, sizeof T.message, "%s", kiln_world_error(T.world));
    }
}

/* The teardown table was freed before the values' destroy hooks ran and still counted its
 * hooks: kiln_name_get there read the Name addon's freed state through it, and kiln_world_atfini
 * grew the freed table. Now the names are gone and the registration is refused. */
KILN_TEST(teardown, a_destroy_hook_during_world_destroy_finds_no_addon_state_and_cannot_register) {
    memset(&T, 0, sizeof T);
    T.world = kiln_world_create(NULL);
    kiln_component self, name;
    ck_assert_int_eq(kiln_component_register(T.world, &(kiln_component_desc){.name = "Self",
                                                                              .size = sizeof(kiln_entity),
                                                                              .destroy = reading_destroy},
                                             &self), KILN_OK);
    ck_assert_int_eq(kiln_name_init(T.world, &name), KILN_OK);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(T.world, &e), KILN_OK);
    ck_assert_int_eq(kiln_add(T.world, e, self, &e), KILN_OK);
    ck_assert_int_eq(kiln_name_set(T.world, e, "hero"), KILN_OK);
    kiln_world_destroy(T.world);
    ck_assert(T.hook_ran);
    ck_assert(!T.named);
    ck_assert_int_eq(T.registered, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(T.message, "kiln_world_atfini: the world is being destroyed and its teardown hooks have run "
                                "(a call from a value's destroy hook)");
    ck_assert_int_eq(T.late_runs, 0);
}

static void looking_fini(kiln_world *world, void *ctx) {
    T.named |= kiln_name_lookup(world, "hero") != KILN_NULL_ENTITY;
    T.hook_ran = true;
}

/* A host teardown hook registered before kiln_name_init runs after the addon's: its lookup read
 * the addon's freed state. */
KILN_TEST(teardown, a_teardown_hook_running_after_an_addons_finds_its_names_gone) {
    memset(&T, 0, sizeof T);
    kiln_world *world = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_world_atfini(world, looking_fini, NULL), KILN_OK);
    kiln_component name;
    ck_assert_int_eq(kiln_name_init(world, &name), KILN_OK);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(world, &e), KILN_OK);
    ck_assert_int_eq(kiln_name_set(world, e, "hero"), KILN_OK);
    ck_assert_int_eq(kiln_name_lookup(world, "hero"), e);
    kiln_world_destroy(world);
    ck_assert(T.hook_ran);
    ck_assert(!T.named);
}

static void scheduling_fini(kiln_world *world, void *ctx) { (void)kiln_schedule_create(world, NULL); }

/* A schedule a teardown hook created was left pointing at the freed world. */
KILN_TEST_SIGNAL(teardown, a_teardown_hook_creating_a_schedule_aborts_the_destroy, SIGABRT) {
    kiln_world *world = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_world_atfini(world, scheduling_fini, NULL), KILN_OK);
    test_expect_abort("kiln_world_destroy: a teardown hook created a schedule of the world");
    kiln_world_destroy(world);
}
