/* test_api_messages.c: Check suite for rules every public C call that takes an entity or a
 * component keeps, table-driven: a stale or null handle, or an unknown component, fails with its
 * code, leaves "kiln_<call>: ..." naming it, and changes nothing. A new call joins the table. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"
#include "test_registry.h"

typedef struct fixture {
    kiln_world *w;
    kiln_component pos;
    kiln_entity live, stale;
} fixture;

static fixture F;
static bool refuse; /* the allocator hook refuses every allocation while set */

static void *alloc_hook(void *ud, void *ptr, size_t osize, size_t nsize) {
    (void)ud, (void)osize;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    return refuse ? NULL : realloc(ptr, nsize);
}

static void setup(void) {
    refuse = false;
    F.w = kiln_world_create(&(kiln_world_desc){.alloc = alloc_hook});
    ck_assert_ptr_nonnull(F.w);
    kiln_component_desc d = {.name = "Position", .size = 8};
    ck_assert_int_eq(kiln_component_register(F.w, &d, &F.pos), KILN_OK);
    ck_assert_int_eq(kiln_transform_init(F.w, NULL), KILN_OK);
    ck_assert_int_eq(kiln_name_init(F.w, NULL), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.w, &F.stale), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, F.stale), KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(F.w, &F.pos, NULL, 1, &F.live), KILN_OK);
}

static void teardown(void) {
    refuse = false;
    kiln_world_destroy(F.w);
}

KILN_TEST_GROUP_WITH(api_messages, .setup = setup, .teardown = teardown);

/* One call: its public name, the role its entity argument plays in messages, and a wrapper
 * running it on entity e with component c (calls without a component ignore c). */
typedef struct entity_call {
    const char *name;
    const char *role;
    kiln_result (*run)(kiln_entity e, kiln_component c);
    bool takes_component;
} entity_call;

static const float value[2] = {1, 2};

static kiln_result run_despawn(kiln_entity e, kiln_component c) { (void)c; return kiln_despawn(F.w, e); }
static kiln_result run_unspawn(kiln_entity e, kiln_component c) { (void)c; return kiln_unspawn(F.w, e); }
static kiln_result run_add(kiln_entity e, kiln_component c) { return kiln_add(F.w, e, c, value); }
static kiln_result run_remove(kiln_entity e, kiln_component c) { return kiln_remove(F.w, e, c, NULL); }
static kiln_result run_set(kiln_entity e, kiln_component c) { return kiln_set(F.w, e, c, value); }
static kiln_result run_get_mut(kiln_entity e, kiln_component c) {
    return kiln_get_mut(F.w, e, c) ? KILN_OK : (kiln_result)-1; /* the message carries the why */
}
static kiln_result run_name_set(kiln_entity e, kiln_component c) { (void)c; return kiln_name_set(F.w, e, "n"); }
static kiln_result run_clone(kiln_entity e, kiln_component c) { (void)c; return kiln_clone(F.w, e, NULL, NULL); }
static kiln_result run_set_parent_child(kiln_entity e, kiln_component c) {
    (void)c;
    return kiln_transform_set_parent(F.w, e, F.live);
}
static kiln_result run_set_parent_parent(kiln_entity e, kiln_component c) {
    (void)c;
    return e == KILN_NULL_ENTITY ? KILN_ERR_DEAD_ENTITY : kiln_transform_set_parent(F.w, F.live, e);
}
static kiln_result run_despawn_recursive(kiln_entity e, kiln_component c) {
    (void)c;
    return kiln_transform_despawn_recursive(F.w, e);
}
static kiln_result run_despawn_unless(kiln_entity e, kiln_component c) {
    return kiln_despawn_unless(F.w, e, &c, 1);
}
static kiln_result run_despawn_recursive_unless(kiln_entity e, kiln_component c) {
    return kiln_transform_despawn_recursive_unless(F.w, e, &c, 1);
}
static bool write_nothing(void *ud, const void *data, size_t size) {
    (void)ud, (void)data, (void)size;
    return true;
}
static kiln_result run_export(kiln_entity e, kiln_component c) {
    (void)c;
    kiln_export_desc desc = {.roots = &e, .root_count = 1};
    return kiln_export(F.w, &desc, write_nothing, NULL);
}

static const entity_call calls[] = {
    {"kiln_despawn", "entity", run_despawn, false},
    {"kiln_unspawn", "entity", run_unspawn, false},
    {"kiln_add", "entity", run_add, true},
    {"kiln_remove", "entity", run_remove, true},
    {"kiln_set", "entity", run_set, true},
    {"kiln_get_mut", "entity", run_get_mut, true},
    {"kiln_name_set", "entity", run_name_set, false},
    {"kiln_clone", "entity", run_clone, false},
    {"kiln_transform_set_parent", "child", run_set_parent_child, false},
    {"kiln_transform_set_parent", "parent", run_set_parent_parent, false},
    {"kiln_transform_despawn_recursive", "entity", run_despawn_recursive, false},
    {"kiln_despawn_unless", "entity", run_despawn_unless, false},
    {"kiln_transform_despawn_recursive_unless", "entity", run_despawn_recursive_unless, false},
    {"kiln_export", "root", run_export, false},
};
#define CALL_COUNT ((int)(sizeof calls / sizeof calls[0]))

/* What the world looks like from outside: entities, rows moved, and the live entity's value. */
typedef struct picture {
    int64_t entities;
    uint64_t changes;
    float value[2];
} picture;

static picture take_picture(void) {
    kiln_world_stats st;
    kiln_world_stats_get(F.w, &st);
    picture p = {.entities = st.entities, .changes = st.changes};
    memcpy(p.value, kiln_get(F.w, F.live, F.pos), sizeof p.value);
    return p;
}

static void assert_unchanged(const picture *before, const char *name) {
    picture now = take_picture();
    ck_assert_msg(now.entities == before->entities && now.changes == before->changes &&
                  memcmp(now.value, before->value, sizeof now.value) == 0, "%s changed the world", name);
}

KILN_TEST_LOOP(api_messages, a_stale_handle_fails_naming_the_call_the_role_and_the_handle, 0, CALL_COUNT) {
    const entity_call *call = &calls[_i];
    char handle[24], want[160];
    kiln_entity_format(F.stale, handle, sizeof handle);
    snprintf(want, sizeof want, "%s: %s %s is not alive", call->name, call->role, handle);
    picture before = take_picture();
    kiln_world_clear_error(F.w);
    kiln_result r = call->run(F.stale, F.pos);
    ck_assert_msg(r == KILN_ERR_DEAD_ENTITY || (r == (kiln_result)-1 && strcmp(call->name, "kiln_get_mut") == 0),
                  "%s: %s", call->name, kiln_result_name(r));
    ck_assert_msg(strcmp(kiln_world_error(F.w), want) == 0, "%s left \"%s\", not \"%s\"", call->name,
                  kiln_world_error(F.w), want);
    assert_unchanged(&before, call->name);
}

KILN_TEST_LOOP(api_messages, the_null_handle_fails_naming_the_call_and_the_role_as_null, 0, CALL_COUNT) {
    const entity_call *call = &calls[_i];
    if (strcmp(call->role, "parent") == 0) return; /* a null parent unlinks: no failure */
    char want[160];
    snprintf(want, sizeof want, "%s: %s is null", call->name, call->role);
    picture before = take_picture();
    kiln_world_clear_error(F.w);
    kiln_result r = call->run(KILN_NULL_ENTITY, F.pos);
    ck_assert_msg(r != KILN_OK, "%s accepted the null handle", call->name);
    ck_assert_msg(strcmp(kiln_world_error(F.w), want) == 0, "%s left \"%s\", not \"%s\"", call->name,
                  kiln_world_error(F.w), want);
    assert_unchanged(&before, call->name);
}

KILN_TEST_LOOP(api_messages, an_unknown_component_fails_naming_the_call_and_the_id, 0, CALL_COUNT) {
    const entity_call *call = &calls[_i];
    if (!call->takes_component) return;
    picture before = take_picture();
    kiln_world_clear_error(F.w);
    kiln_result r = call->run(F.live, 99);
    ck_assert_msg(r == KILN_ERR_UNKNOWN_COMPONENT || r == (kiln_result)-1, "%s: %s", call->name, kiln_result_name(r));
    const char *msg = kiln_world_error(F.w);
    ck_assert_msg(strncmp(msg, call->name, strlen(call->name)) == 0 && msg[strlen(call->name)] == ':' &&
                  strstr(msg, "#99") != NULL, "%s left \"%s\"", call->name, msg);
    assert_unchanged(&before, call->name);
}

KILN_TEST(api_messages, a_success_leaves_the_last_failure_message_in_place) {
    ck_assert_int_eq(kiln_despawn(F.w, F.stale), KILN_ERR_DEAD_ENTITY);
    char kept[160];
    snprintf(kept, sizeof kept, "%s", kiln_world_error(F.w));
    kiln_entity child;
    ck_assert_int_eq(kiln_spawn(F.w, &child), KILN_OK);
    ck_assert_int_eq(kiln_set(F.w, F.live, F.pos, value), KILN_OK);
    ck_assert_ptr_nonnull(kiln_get_mut(F.w, F.live, F.pos));
    ck_assert_int_eq(kiln_name_set(F.w, F.live, "hero"), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.w, child, F.live), KILN_OK);
    ck_assert_int_eq(kiln_clone(F.w, F.live, NULL, NULL), KILN_OK);
    ck_assert_int_eq(kiln_remove(F.w, F.live, F.pos, NULL), KILN_OK);
    ck_assert_int_eq(kiln_add(F.w, F.live, F.pos, value), KILN_OK);
    ck_assert_int_eq(kiln_transform_despawn_recursive(F.w, F.live), KILN_OK);
    ck_assert_str_eq(kiln_world_error(F.w), kept);
}

/* What a creator that answers NULL for out of memory left as the world error. */
static const char *message_of_null(const char *name) {
    kiln_world_clear_error(F.w);
    refuse = true;
    void *made = NULL;
    if (strcmp(name, "kiln_commands_create") == 0) made = kiln_commands_create(F.w);
    else if (strcmp(name, "kiln_schedule_create") == 0) made = kiln_schedule_create(F.w, NULL);
    else if (strcmp(name, "kiln_random_world") == 0) made = kiln_random_world(F.w);
    refuse = false;
    ck_assert_msg(made == NULL, "%s made something with no memory to make it from", name);
    return kiln_world_error(F.w);
}

KILN_TEST(api_messages, a_creator_answering_null_for_out_of_memory_says_so_as_a_result_would) {
    static const char *const creators[] = {"kiln_commands_create", "kiln_schedule_create", "kiln_random_world"};
    for (size_t i = 0; i < sizeof creators / sizeof creators[0]; i++) {
        const char *msg = message_of_null(creators[i]);
        ck_assert_msg(strncmp(msg, creators[i], strlen(creators[i])) == 0 && strstr(msg, "out of memory"),
                      "%s left \"%s\"", creators[i], msg);
    }
}

static void run_nothing(const kiln_system_ctx *ctx) { (void)ctx; }

KILN_TEST(api_messages, a_refused_system_is_named_quoted_as_every_schedule_message_names_one) {
    kiln_schedule *s = kiln_schedule_create(F.w, NULL);
    ck_assert_ptr_nonnull(s);
    static const struct {
        kiln_system_desc desc;
        const char *want;
    } cases[] = {
        {{.name = "a", .run = run_nothing, .reads = {99}},
         "kiln_schedule_add: system 'a' reads component #99, which is not registered"},
        {{.name = "b"}, "kiln_schedule_add: system 'b' has no run callback"},
        {{.name = "c", .run = run_nothing, .after = {""}},
         "kiln_schedule_add: system 'c' after[0] must be a name of 1 to 63 bytes"},
        {{.name = "ok", .run = run_nothing}, ""},
        {{.name = "ok", .run = run_nothing}, "kiln_schedule_add: a system named 'ok' already exists"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_world_clear_error(F.w);
        kiln_schedule_add(s, &cases[i].desc);
        ck_assert_str_eq(kiln_world_error(F.w), cases[i].want);
    }
    ck_assert_str_eq(kiln_schedule_remove(s, "ghost") == KILN_OK ? "" : kiln_world_error(F.w),
                     "kiln_schedule_remove: no system named 'ghost'");
    kiln_schedule_destroy(s);
}
