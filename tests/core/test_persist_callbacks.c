/* test_persist_callbacks.c: Check suite for kiln_save's callbacks (codec, progress, write) that
 * change the world mid-save: their changes land after the save, which holds the world as it was. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

typedef enum change { SPAWN_MANY, DESPAWN_LAST, REMOVE_RESOURCE } change;

typedef struct saver {
    kiln_world *world;
    kiln_component blob, pos;
    kiln_entity last;
    change what;
    bool done;
    kiln_result result;
} saver;

static void drop_blob(void *ptr, int32_t count, void *ctx) { (void)ptr, (void)count, (void)ctx; }

/* What the callback does, once. Enough spawns to grow the columns being saved. */
static void act(saver *s) {
    if (s->done) return;
    s->done = true;
    if (s->what == SPAWN_MANY)
        for (int i = 0; i < 4000 && s->result == KILN_OK; i++)
            s->result = kiln_spawn_with(s->world, (kiln_component[]){s->blob, s->pos}, NULL, 2, NULL);
    else if (s->what == DESPAWN_LAST)
        s->result = kiln_despawn(s->world, s->last);
    else
        s->result = kiln_resource_remove(s->world, s->pos, NULL);
}

static kiln_result encode(void *ud, kiln_component c, kiln_entity e, const void *value, kiln_write_fn write,
                          void *write_ud, char *why, size_t why_size) {
    act(ud);
    return write(write_ud, value, 4) ? KILN_OK : KILN_ERR_INVALID_ARGUMENT;
}

static kiln_result decode(void *ud, kiln_component c, const void *data, size_t size, void *dest, char *why,
                          size_t why_size) {
    memcpy(dest, data, 4);
    return KILN_OK;
}

static bool progress(void *ud, int64_t units) {
    act(ud);
    return true;
}

/* A world of 300 entities with a hooked Blob (saved through the codec) and Pos, and a Pos resource. */
static void open_saver(saver *s, change what) {
    memset(s, 0, sizeof *s);
    s->what = what;
    s->world = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_component_register(s->world, &(kiln_component_desc){.name = "Blob", .size = 4,
                                                                                .destroy = drop_blob}, &s->blob),
                     KILN_OK);
    s->pos = pf_register(s->world, "Pos", 8, NULL, 0);
    for (int i = 0; i < 300; i++)
        ck_assert_int_eq(kiln_spawn_with(s->world, (kiln_component[]){s->blob, s->pos},
                                         (const void *[]){&(int32_t){i}, &(int64_t){i}}, 2, &s->last), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(s->world, s->pos, &(int64_t){42}), KILN_OK);
}

static kiln_result save_with(saver *s, kiln_persist_format format, bool in_codec, pf_bytes *out) {
    kiln_persist_codec codec = {.encode = encode, .decode = decode, .ud = s};
    kiln_save_desc desc = {.format = format, .codec = &codec, .progress = in_codec ? NULL : progress,
                           .progress_ud = s};
    return kiln_save(s->world, &desc, pf_bytes_write, out);
}

/* The save loads into a fresh world as the 300 entities it held when called. */
static void assert_loads_as_it_was(const pf_bytes *b) {
    saver fresh = {.world = kiln_world_create(NULL), .done = true};
    kiln_component_register(fresh.world, &(kiln_component_desc){.name = "Blob", .size = 4, .destroy = drop_blob},
                            &fresh.blob);
    fresh.pos = pf_register(fresh.world, "Pos", 8, NULL, 0);
    kiln_persist_codec codec = {.encode = encode, .decode = decode, .ud = &fresh};
    kiln_result r = kiln_load(fresh.world, b->data, b->size, &(kiln_load_desc){.codec = &codec});
    ck_assert_msg(r == KILN_OK, "load: %s", kiln_world_error(fresh.world));
    ck_assert_int_eq(kiln_entity_count(fresh.world), 300);
    ck_assert_int_eq(*(const int64_t *)kiln_resource_get(fresh.world, fresh.pos), 42);
    kiln_world_destroy(fresh.world);
}

KILN_TEST_GROUP(callbacks);

/* A codec spawning 4000 rows into the archetype it was encoding grew its columns under the
 * save: the next row was read from freed memory, and the file claimed the wrong counts. */
KILN_TEST(callbacks, spawns_from_a_codec_mid_save_land_after_it_and_the_save_loads_as_it_was) {
    for (int format = KILN_PERSIST_BINARY; format <= KILN_PERSIST_JSON; format++) {
        saver s;
        open_saver(&s, SPAWN_MANY);
        pf_bytes b = {0};
        kiln_result r = save_with(&s, (kiln_persist_format)format, true, &b);
        ck_assert_msg(r == KILN_OK, "save: %s", kiln_world_error(s.world));
        ck_assert_int_eq(s.result, KILN_OK);
        ck_assert_int_eq(kiln_entity_count(s.world), 4300); /* landed when the save returned */
        assert_loads_as_it_was(&b);
        pf_bytes_free(&b);
        kiln_world_destroy(s.world);
    }
}

/* A despawn from desc.progress before an archetype was written left the file one entity short
 * of its header: the save succeeded and its file did not load. */
KILN_TEST(callbacks, a_despawn_from_progress_mid_save_lands_after_it_and_the_save_loads_as_it_was) {
    for (int format = KILN_PERSIST_BINARY; format <= KILN_PERSIST_JSON; format++) {
        saver s;
        open_saver(&s, DESPAWN_LAST);
        pf_bytes b = {0};
        kiln_result r = save_with(&s, (kiln_persist_format)format, false, &b);
        ck_assert_msg(r == KILN_OK, "save: %s", kiln_world_error(s.world));
        ck_assert_int_eq(s.result, KILN_OK);
        ck_assert(!kiln_is_alive(s.world, s.last));
        assert_loads_as_it_was(&b);
        pf_bytes_free(&b);
        kiln_world_destroy(s.world);
    }
}

/* A resource the save had planned, removed by its codec, was then read through NULL. */
KILN_TEST(callbacks, a_resource_removed_by_a_codec_mid_save_fails_the_save_naming_it) {
    for (int format = KILN_PERSIST_BINARY; format <= KILN_PERSIST_JSON; format++) {
        saver s;
        open_saver(&s, REMOVE_RESOURCE);
        pf_bytes b = {0};
        ck_assert_int_eq(save_with(&s, (kiln_persist_format)format, true, &b), KILN_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(kiln_world_error(s.world),
                         "kiln_save: resource 'Pos' was removed while the save ran (by one of its callbacks)");
        ck_assert_int_eq(kiln_entity_count(s.world), 300);
        ck_assert(!kiln_resource_has(s.world, s.pos));
        pf_bytes_free(&b);
        kiln_world_destroy(s.world);
    }
}

static bool despawn_first(void *ud, int64_t units) {
    saver *s = ud;
    if (!s->done) s->done = true, s->result = kiln_despawn(s->world, s->last);
    return true;
}

static int64_t occurrences(const pf_bytes *b, const char *needle) {
    int64_t n = 0;
    size_t len = strlen(needle);
    for (size_t i = 0; i + len <= b->size; i++) n += memcmp(b->data + i, needle, len) == 0;
    return n;
}

/* kiln_export listed its entities, then asked progress: a despawn there left the dead entity in
 * the scene with no components, a row of nothing that kiln_instantiate would spawn. */
KILN_TEST(callbacks, a_despawn_from_export_progress_lands_after_it_and_the_scene_holds_the_entity_whole) {
    saver s = {.world = kiln_world_create(NULL)};
    s.pos = pf_register(s.world, "Pos", 8, (const kiln_field[]){{"v", KILN_TYPE_INT64, 0, 0}}, 1);
    for (int i = 0; i < 300; i++)
        ck_assert_int_eq(kiln_spawn_with(s.world, &s.pos, (const void *[]){&(int64_t){i}}, 1, &s.last), KILN_OK);
    pf_bytes b = {0};
    kiln_export_desc desc = {.progress = despawn_first, .progress_ud = &s};
    ck_assert_int_eq(kiln_export(s.world, &desc, pf_bytes_write, &b), KILN_OK);
    ck_assert_int_eq(s.result, KILN_OK);
    ck_assert(!kiln_is_alive(s.world, s.last));
    ck_assert_int_eq(occurrences(&b, "\"Pos\""), 300);
    ck_assert_int_eq(occurrences(&b, "\"v\": 299"), 1);
    pf_bytes_free(&b);
    kiln_world_destroy(s.world);
}
