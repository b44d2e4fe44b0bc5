/* test_persist_defaults.c: Check suite for saves loaded into a world whose components changed
 * since: fields the file lacks take the registered defaults, the file's own fields keep its values. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"

static kiln_component reg(kiln_world *w, const char *name, size_t size, const kiln_field *f, int32_t n,
                          const void *defaults) {
    kiln_component id;
    kiln_component_desc d = {.name = name, .size = size, .fields = f, .field_count = n, .defaults = defaults};
    ck_assert_int_eq(kiln_component_register(w, &d, &id), KILN_OK);
    return id;
}

static const kiln_persist_format formats[] = {KILN_PERSIST_BINARY, KILN_PERSIST_JSON};

/* ---- Stats: hp and name at the save; speed, tags and title added since, in between ---- */
typedef struct { int32_t hp; char name[8]; } old_stats;
static const kiln_field old_stats_fields[] = {{"hp", KILN_TYPE_INT32, 0, 1}, {"name", KILN_TYPE_CHAR, 4, 8}};

typedef struct { float speed; char name[8]; int16_t tags[3]; char title[6]; int32_t hp; } new_stats;
static const kiln_field new_stats_fields[] = {
    {"speed", KILN_TYPE_FLOAT, offsetof(new_stats, speed), 1},
    {"name", KILN_TYPE_CHAR, offsetof(new_stats, name), 8},
    {"tags", KILN_TYPE_INT16, offsetof(new_stats, tags), 3},
    {"title", KILN_TYPE_CHAR, offsetof(new_stats, title), 6},
    {"hp", KILN_TYPE_INT32, offsetof(new_stats, hp), 1},
};
static const new_stats stats_defaults = {2.5f, "nobody", {7, -8, 9}, "anon", 100};

/* A save of three entities holding the old Stats (hp 0 on the second: a zero the file says). */
static void save_old_stats(kiln_persist_format format, pf_bytes *saved, kiln_entity *e) {
    kiln_world *a = kiln_world_create(NULL);
    kiln_component id = reg(a, "Stats", sizeof(old_stats), old_stats_fields, 2, NULL);
    old_stats v[3] = {{5, "ab"}, {0, ""}, {-3, "seven77"}};
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_spawn_with(a, &id, (const void *[]){&v[i]}, 1, &e[i]), KILN_OK);
    pf_save(a, format, saved);
    kiln_world_destroy(a);
}

static void assert_new_stats(const new_stats *got, int32_t hp, const char *name) {
    ck_assert_int_eq(got->hp, hp);
    char want[8] = {0};
    memcpy(want, name, strlen(name));
    ck_assert_int_eq(memcmp(got->name, want, 8), 0); /* the file's, not "nobody" behind it */
    ck_assert_float_eq(got->speed, 2.5f);
    ck_assert_int_eq(got->tags[0], 7);
    ck_assert_int_eq(got->tags[1], -8);
    ck_assert_int_eq(got->tags[2], 9);
    ck_assert_int_eq(memcmp(got->title, "anon\0", 6), 0);
}

/* Where each saved handle of a save_old_stats file landed. */
typedef struct saved_map {
    const kiln_entity *old;
    kiln_entity *now;
} saved_map;

static void note_mapped(void *ud, kiln_entity old_e, kiln_entity new_e) {
    saved_map *m = ud;
    for (int i = 0; i < 3; i++)
        if (m->old[i] == old_e) m->now[i] = new_e;
}

KILN_TEST_GROUP(gained);

KILN_TEST(gained, fields_added_since_the_save_load_as_the_defaults_and_the_files_fields_as_saved) {
    for (int f = 0; f < 2; f++) {
        pf_bytes saved;
        kiln_entity e[3];
        save_old_stats(formats[f], &saved, e);
        /* a fresh world (rows placed at the saved handles) and one already holding entities */
        for (int busy = 0; busy < 2; busy++) {
            kiln_world *b = kiln_world_create(NULL);
            kiln_component id = reg(b, "Stats", sizeof(new_stats), new_stats_fields, 5, &stats_defaults);
            kiln_entity other = KILN_NULL_ENTITY;
            if (busy) ck_assert_int_eq(kiln_spawn_with(b, &id, NULL, 1, &other), KILN_OK);
            kiln_entity map[3] = {0};
            saved_map sm = {e, map};
            kiln_load_desc desc = {.mapped = note_mapped, .ud = &sm};
            ck_assert_int_eq(kiln_load(b, saved.data, saved.size, &desc), KILN_OK);
            ck_assert_int_eq(kiln_entity_count(b), 3 + busy);
            for (int i = 0; i < 3; i++) ck_assert(map[i] != KILN_NULL_ENTITY && map[i] != other);
            assert_new_stats(kiln_get(b, map[0], id), 5, "ab");
            assert_new_stats(kiln_get(b, map[1], id), 0, "");
            assert_new_stats(kiln_get(b, map[2], id), -3, "seven77");
            kiln_world_destroy(b);
        }
        pf_bytes_free(&saved);
    }
}

KILN_TEST(gained, a_component_without_defaults_still_loads_its_new_fields_as_zero) {
    for (int f = 0; f < 2; f++) {
        pf_bytes saved;
        kiln_entity e[3];
        save_old_stats(formats[f], &saved, e);
        kiln_world *b = kiln_world_create(NULL);
        kiln_component id = reg(b, "Stats", sizeof(new_stats), new_stats_fields, 5, NULL);
        ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_OK);
        const new_stats *got = kiln_get(b, e[2], id);
        ck_assert_int_eq(got->hp, -3);
        ck_assert_str_eq(got->name, "seven77");
        ck_assert_float_eq(got->speed, 0);
        ck_assert_int_eq(got->tags[0] | got->tags[1] | got->tags[2], 0);
        ck_assert_int_eq(memcmp(got->title, "\0\0\0\0\0\0", 6), 0);
        kiln_world_destroy(b);
        pf_bytes_free(&saved);
    }
}

KILN_TEST(gained, a_component_the_file_holds_whole_keeps_the_files_bytes_zeroes_included) {
    for (int f = 0; f < 2; f++) {
        kiln_world *a = kiln_world_create(NULL);
        kiln_component id = reg(a, "Stats", sizeof(new_stats), new_stats_fields, 5, &stats_defaults);
        new_stats zero = {0};
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(a, &id, (const void *[]){&zero}, 1, &e), KILN_OK);
        pf_bytes saved;
        pf_save(a, formats[f], &saved);
        kiln_world *b = kiln_world_create(NULL);
        reg(b, "Stats", sizeof(new_stats), new_stats_fields, 5, &stats_defaults);
        ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_OK);
        ck_assert_int_eq(memcmp(kiln_get(b, e, id), &zero, sizeof zero), 0);
        ck_assert_uint_eq(kiln_world_hash(a), kiln_world_hash(b));
        pf_bytes_free(&saved);
        kiln_world_destroy(a);
        kiln_world_destroy(b);
    }
}

KILN_TEST(gained, a_tag_saved_and_loaded_beside_a_changed_component_stays_a_tag) {
    for (int f = 0; f < 2; f++) {
        kiln_world *a = kiln_world_create(NULL);
        kiln_component stats = reg(a, "Stats", sizeof(old_stats), old_stats_fields, 2, NULL), tag;
        ck_assert_int_eq(kiln_component_register(a, &(kiln_component_desc){.name = "Frozen"}, &tag), KILN_OK);
        old_stats v = {4, "x"};
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(a, (kiln_component[]){stats, tag}, (const void *[]){&v, NULL}, 2, &e), KILN_OK);
        pf_bytes saved;
        pf_save(a, formats[f], &saved);
        kiln_world *b = kiln_world_create(NULL);
        kiln_component id = reg(b, "Stats", sizeof(new_stats), new_stats_fields, 5, &stats_defaults);
        ck_assert_int_eq(kiln_component_register(b, &(kiln_component_desc){.name = "Frozen"}, &tag), KILN_OK);
        ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_OK);
        ck_assert(kiln_has(b, e, tag));
        assert_new_stats(kiln_get(b, e, id), 4, "x");
        pf_bytes_free(&saved);
        kiln_world_destroy(a);
        kiln_world_destroy(b);
    }
}

/* ---- Clock: a resource that gained fields ---- */
typedef struct { int64_t ticks; } old_clock;
typedef struct { double scale; int64_t ticks; kiln_entity owner; uint8_t flags[2]; } new_clock;
static const kiln_field old_clock_fields[] = {{"ticks", KILN_TYPE_INT64, 0, 1}};
static const kiln_field new_clock_fields[] = {
    {"scale", KILN_TYPE_DOUBLE, offsetof(new_clock, scale), 1},
    {"ticks", KILN_TYPE_INT64, offsetof(new_clock, ticks), 1},
    {"owner", KILN_TYPE_ENTITY, offsetof(new_clock, owner), 1},
    {"flags", KILN_TYPE_UINT8, offsetof(new_clock, flags), 2},
};

KILN_TEST(gained, a_resource_that_gained_fields_loads_them_as_the_defaults) {
    /* a default entity field lands as given, not rewritten through the file's handles */
    static const new_clock clock_defaults = {0.5, 99, ((kiln_entity)3 << 32) | 1, {1, 2}};
    for (int f = 0; f < 2; f++) {
        kiln_world *a = kiln_world_create(NULL);
        kiln_component id = reg(a, "Clock", sizeof(old_clock), old_clock_fields, 1, NULL);
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(a, NULL, NULL, 0, &e), KILN_OK); /* 0v1: a handle in the file */
        ck_assert_int_eq(kiln_resource_set(a, id, &(old_clock){42}), KILN_OK);
        pf_bytes saved;
        pf_save(a, formats[f], &saved);
        for (int exists = 0; exists < 2; exists++) {
            kiln_world *b = kiln_world_create(NULL);
            kiln_component nid = reg(b, "Clock", sizeof(new_clock), new_clock_fields, 4, &clock_defaults);
            if (exists) ck_assert_int_eq(kiln_resource_set(b, nid, NULL), KILN_OK);
            ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_OK);
            const new_clock *got = kiln_resource_get(b, nid);
            ck_assert_ptr_nonnull(got);
            ck_assert_int_eq(got->ticks, 42);
            ck_assert_double_eq(got->scale, 0.5);
            ck_assert_uint_eq(got->owner, clock_defaults.owner);
            ck_assert_int_eq(got->flags[0], 1);
            ck_assert_int_eq(got->flags[1], 2);
            kiln_world_destroy(b);
        }
        pf_bytes_free(&saved);
        kiln_world_destroy(a);
    }
}

/* ---- the other way round, and retyped fields: as documented before defaults ---- */
typedef struct { int16_t hits[2]; char code[4]; int32_t gone; int16_t power; } old_shot;
static const kiln_field old_shot_fields[] = {{"hits", KILN_TYPE_INT16, 0, 2}, {"code", KILN_TYPE_CHAR, 4, 4},
                                             {"gone", KILN_TYPE_INT32, 8, 1}, {"power", KILN_TYPE_INT16, 12, 1}};
typedef struct { int16_t hits[3]; char code[8]; int32_t added; int64_t power; } new_shot;
static const kiln_field new_shot_fields[] = {
    {"power", KILN_TYPE_INT64, offsetof(new_shot, power), 1},
    {"hits", KILN_TYPE_INT16, offsetof(new_shot, hits), 3},
    {"code", KILN_TYPE_CHAR, offsetof(new_shot, code), 8},
    {"added", KILN_TYPE_INT32, offsetof(new_shot, added), 1},
};

KILN_TEST(gained, a_widened_or_lengthened_field_is_the_files_zero_filled_and_a_lost_field_is_skipped) {
    static const new_shot shot_defaults = {{5, 5, 5}, "zzzzzzz", 77, 1000};
    for (int f = 0; f < 2; f++) {
        kiln_world *a = kiln_world_create(NULL);
        kiln_component id = reg(a, "Shot", sizeof(old_shot), old_shot_fields, 4, NULL);
        old_shot v = {{-1, 2}, {'a', 'b', 'c', 'd'}, 9, -300};
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(a, &id, (const void *[]){&v}, 1, &e), KILN_OK);
        pf_bytes saved;
        pf_save(a, formats[f], &saved);
        kiln_world *b = kiln_world_create(NULL);
        kiln_component nid = reg(b, "Shot", sizeof(new_shot), new_shot_fields, 4, &shot_defaults);
        /* the world lost 'gone': refused naming it, unless skip_unknown */
        ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_ERR_UNKNOWN_COMPONENT);
        ck_assert_str_eq(kiln_world_error(b), "kiln_load: field 'Shot.gone' is not in this world's component");
        ck_assert_int_eq(kiln_entity_count(b), 0);
        ck_assert_int_eq(kiln_load(b, saved.data, saved.size, &(kiln_load_desc){.skip_unknown = true}), KILN_OK);
        const new_shot *got = kiln_get(b, e, nid);
        ck_assert_int_eq(got->hits[0], -1);
        ck_assert_int_eq(got->hits[1], 2);
        ck_assert_int_eq(got->hits[2], 0); /* the file's field, lengthened: not the default 5 */
        ck_assert_int_eq(memcmp(got->code, "abcd\0\0\0\0", 8), 0);
        ck_assert_int_eq(got->added, 77);
        ck_assert_int_eq(got->power, -300); /* retyped (widened): the file's, converted */
        pf_bytes_free(&saved);
        kiln_world_destroy(a);
        kiln_world_destroy(b);
    }
}

KILN_TEST(gained, a_prefab_and_a_scene_read_from_json_give_the_fields_they_leave_out_the_defaults) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component id = reg(w, "Stats", sizeof(new_stats), new_stats_fields, 5, &stats_defaults);
    static const char prefab_json[] = "{\"components\": {\"Stats\": {\"hp\": 5, \"name\": \"ab\"}}}";
    kiln_prefab *p;
    ck_assert_int_eq(kiln_prefab_load(w, prefab_json, sizeof prefab_json - 1, NULL, &p), KILN_OK);
    kiln_entity e;
    ck_assert_int_eq(kiln_prefab_spawn(w, p, 1, NULL, &e), KILN_OK);
    assert_new_stats(kiln_get(w, e, id), 5, "ab");
    static const char scene_json[] =
        "{\"version\": 1, \"entities\": [{\"name\": \"a\", \"components\": {\"Stats\": {\"name\": \"x\"}}}]}";
    kiln_instance *inst;
    ck_assert_int_eq(kiln_instantiate(w, scene_json, sizeof scene_json - 1, NULL, &inst), KILN_OK);
    assert_new_stats(kiln_get(w, kiln_instance_entity(inst, "a"), id), 100, "x");
    kiln_instance_destroy(inst);
    kiln_prefab_destroy(p);
    kiln_world_destroy(w);
}

KILN_TEST(gained, fields_a_json_save_leaves_out_of_a_value_load_as_the_defaults_like_those_it_lacks) {
    /* a hand-edited save: the schema lists every field, the values leave some out */
    static const new_clock clock_defaults = {0.5, 99, 0, {1, 2}};
    char text[2048];
    snprintf(text, sizeof text,
             "{\"kiln\": 1, \"tick\": 1, \"components\": ["
             "{\"name\": \"Stats\", \"size\": %zu, \"fields\": ["
             "{\"name\": \"speed\", \"type\": \"float\", \"offset\": %zu, \"count\": 1},"
             "{\"name\": \"name\", \"type\": \"char\", \"offset\": %zu, \"count\": 8},"
             "{\"name\": \"tags\", \"type\": \"int16\", \"offset\": %zu, \"count\": 3},"
             "{\"name\": \"title\", \"type\": \"char\", \"offset\": %zu, \"count\": 6},"
             "{\"name\": \"hp\", \"type\": \"int32\", \"offset\": %zu, \"count\": 1}]},"
             "{\"name\": \"Clock\", \"size\": %zu, \"fields\": ["
             "{\"name\": \"scale\", \"type\": \"double\", \"offset\": %zu, \"count\": 1},"
             "{\"name\": \"ticks\", \"type\": \"int64\", \"offset\": %zu, \"count\": 1}]}],"
             "\"entities\": ["
             "{\"id\": 4294967296, \"components\": {\"Stats\": {\"hp\": 5, \"name\": \"ab\"}}},"
             "{\"id\": 4294967297, \"components\": {\"Stats\": {\"hp\": 6, \"name\": \"cd\", \"speed\": 0,"
             " \"tags\": [0, 0, 0], \"title\": \"\"}}},"
             "{\"id\": 4294967298, \"components\": {\"Stats\": {}}}],"
             "\"resources\": {\"Clock\": {\"ticks\": 42}}}",
             sizeof(new_stats), offsetof(new_stats, speed), offsetof(new_stats, name), offsetof(new_stats, tags),
             offsetof(new_stats, title), offsetof(new_stats, hp), sizeof(new_clock), offsetof(new_clock, scale),
             offsetof(new_clock, ticks));
    for (int busy = 0; busy < 2; busy++) {
        kiln_world *b = kiln_world_create(NULL);
        kiln_component id = reg(b, "Stats", sizeof(new_stats), new_stats_fields, 5, &stats_defaults);
        kiln_component clock = reg(b, "Clock", sizeof(new_clock), new_clock_fields, 4, &clock_defaults);
        kiln_entity map[3] = {0}, other = KILN_NULL_ENTITY;
        if (busy) ck_assert_int_eq(kiln_spawn_with(b, &id, NULL, 1, &other), KILN_OK);
        saved_map sm = {(const kiln_entity[]){(kiln_entity)1 << 32, ((kiln_entity)1 << 32) | 1, ((kiln_entity)1 << 32) | 2}, map};
        kiln_load_desc desc = {.mapped = note_mapped, .ud = &sm};
        ck_assert_msg(kiln_load(b, text, strlen(text), &desc) == KILN_OK, "%s", kiln_world_error(b));
        assert_new_stats(kiln_get(b, map[0], id), 5, "ab");
        const new_stats *given = kiln_get(b, map[1], id); /* every field given: zeroes kept */
        ck_assert(given->hp == 6 && given->speed == 0 && given->tags[2] == 0 && given->title[0] == 0);
        assert_new_stats(kiln_get(b, map[2], id), 100, "nobody");
        const new_clock *c = kiln_resource_get(b, clock);
        ck_assert(c->ticks == 42 && c->scale == 0.5 && c->flags[1] == 2);
        kiln_world_destroy(b);
    }
}
