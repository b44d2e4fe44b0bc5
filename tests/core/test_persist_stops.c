/* test_persist_stops.c: Check suite for the caller's word inside long persistence calls:
 * instantiate, prefab loads, clone (keep_going) and export (progress) stop when asked, with
 * KILN_ERR_LIMIT and the world exactly as it was, and go on to the end otherwise; a load past
 * the caller's max_bytes is refused unread. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* A keep_going that says yes asks times, then no (stop_at 0: always yes). */
typedef struct asker {
    int64_t asks, stop_at;
} asker;

static bool ask(void *ud) {
    asker *a = ud;
    a->asks++;
    return a->stop_at == 0 || a->asks < a->stop_at;
}

/* A scene of n entities, each with a Position (text on the heap). */
static char *scene_of(int64_t n) {
    size_t cap = (size_t)n * 64 + 64, at = 0;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    at += (size_t)snprintf(s, cap, "{\"version\": 1, \"entities\": [");
    for (int64_t i = 0; i < n; i++)
        at += (size_t)snprintf(s + at, cap - at, "%s{\"components\": {\"Position\": {\"x\": %lld}}}", i ? ", " : "",
                               (long long)i);
    snprintf(s + at, cap - at, "]}");
    return s;
}

/* A prefab of one root with n - 1 children. */
static char *prefab_of(int64_t n) {
    size_t cap = (size_t)n * 48 + 64, at = 0;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    at += (size_t)snprintf(s, cap, "{\"components\": {\"Position\": {\"x\": 1}}, \"children\": [");
    for (int64_t i = 1; i < n; i++)
        at += (size_t)snprintf(s + at, cap - at, "%s{\"components\": {\"Position\": {\"y\": 2}}}", i > 1 ? ", " : "");
    snprintf(s + at, cap - at, "]}");
    return s;
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP_WITH(stops, .timeout = 60);

KILN_TEST(stops, instantiate_asks_while_reading_and_stops_with_the_world_as_it_was) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    char *text = scene_of(20000); /* > 64 KiB of text and > 4096 entities: asked in both */
    asker count = {0, 0};
    kiln_instantiate_desc d = {.keep_going = ask, .ud = &count};
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_instantiate(w.world, text, strlen(text), &d, &inst), KILN_OK);
    int64_t asks = count.asks;
    ck_assert_int_gt(asks, 10);
    kiln_instance_destroy(inst);
    pf_close(&w);
    /* at every ask in turn, including the last, made after the spawns: taken back, slots too */
    pf_open(&w, false);
    pf_populate(&w);
    uint64_t h0 = kiln_world_hash(w.world);
    const int64_t at[] = {1, asks / 2, asks - 1, asks};
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
        asker stop = {0, at[k]};
        d.ud = &stop;
        inst = NULL;
        ck_assert_int_eq(kiln_instantiate(w.world, text, strlen(text), &d, &inst), KILN_ERR_LIMIT);
        ck_assert_ptr_null(inst);
        ck_assert_msg(strstr(kiln_world_error(w.world), "kiln_instantiate: stopped by the caller after"),
                      "%s", kiln_world_error(w.world));
        ck_assert_msg(kiln_world_hash(w.world) == h0, "ask %lld: the world changed", (long long)at[k]);
    }
    ck_assert_msg(strstr(kiln_world_error(w.world), "entities spawned"), "%s", kiln_world_error(w.world));
    free(text);
    pf_close(&w);
}

KILN_TEST(stops, instantiate_file_asks_while_reading_the_file) {
    pf_world w;
    pf_open(&w, false);
    char *text = scene_of(40000); /* over a MiB */
    char path[] = "/tmp/kiln_stops_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "wb");
    fputs(text, f);
    fclose(f);
    asker stop = {0, 1};
    kiln_instantiate_desc d = {.keep_going = ask, .ud = &stop};
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_instantiate_file(w.world, path, &d, &inst), KILN_ERR_LIMIT);
    ck_assert_msg(strstr(kiln_world_error(w.world), "bytes read"), "%s", kiln_world_error(w.world));
    ck_assert_int_eq(kiln_entity_count(w.world), 0);
    unlink(path);
    free(text);
    pf_close(&w);
}

/* max_bytes: a save or file larger is refused before it is read, one of that size loads. */
KILN_TEST(stops, a_load_larger_than_max_bytes_is_refused_unread_and_one_that_fits_loads) {
    pf_world src, w;
    pf_open(&src, false);
    pf_populate(&src);
    pf_open(&w, false);
    pf_bytes saved;
    pf_save(src.world, KILN_PERSIST_JSON, &saved);
    char path[] = "/tmp/kiln_stops_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, saved.data, saved.size), (ssize_t)saved.size);
    close(fd);
    uint64_t hash = kiln_world_hash(w.world);
    kiln_load_desc d = {.max_bytes = saved.size - 1};
    char want[256];
    ck_assert_int_eq(kiln_load(w.world, saved.data, saved.size, &d), KILN_ERR_LIMIT);
    snprintf(want, sizeof want, "kiln_load: the save is larger than %zu bytes (%zu bytes)", saved.size - 1,
             saved.size);
    ck_assert_str_eq(kiln_world_error(w.world), want);
    ck_assert_int_eq(kiln_load_file(w.world, path, &d), KILN_ERR_LIMIT);
    snprintf(want, sizeof want, "kiln_load_file: the save at %s is larger than %zu bytes (%zu bytes)", path,
             saved.size - 1, saved.size);
    ck_assert_str_eq(kiln_world_error(w.world), want);
    kiln_prefab *prefab = NULL;
    ck_assert_int_eq(kiln_prefab_load_file(w.world, path, &(kiln_prefab_load_desc){.max_bytes = 1}, &prefab),
                     KILN_ERR_LIMIT);
    ck_assert_ptr_nonnull(strstr(kiln_world_error(w.world), ": the file at "));
    ck_assert_ptr_null(prefab);
    ck_assert_uint_eq(kiln_world_hash(w.world), hash);
    d.max_bytes = saved.size;
    ck_assert_int_eq(kiln_load_file(w.world, path, &d), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w.world), kiln_entity_count(src.world));
    unlink(path);
    pf_bytes_free(&saved);
    pf_close(&src);
    pf_close(&w);
}

/* max_json_bytes: a JSON save larger is refused before its parse, the world as it was; a binary
 * save of any size (up to max_bytes) and a JSON one that fits load. */
KILN_TEST(stops, a_json_load_larger_than_max_json_bytes_is_refused_and_a_binary_one_loads) {
    pf_world src, w;
    pf_open(&src, false);
    pf_populate(&src);
    pf_open(&w, false);
    pf_bytes json, binary;
    pf_save(src.world, KILN_PERSIST_JSON, &json);
    pf_save(src.world, KILN_PERSIST_BINARY, &binary);
    uint64_t hash = kiln_world_hash(w.world);
    kiln_load_desc d = {.max_json_bytes = json.size - 1};
    ck_assert_int_eq(kiln_load(w.world, json.data, json.size, &d), KILN_ERR_LIMIT);
    char want[256];
    snprintf(want, sizeof want, "kiln_load: the JSON save is larger than %zu bytes (%zu bytes)", json.size - 1,
             json.size);
    ck_assert_str_eq(kiln_world_error(w.world), want);
    ck_assert_uint_eq(kiln_world_hash(w.world), hash);
    d.max_json_bytes = 1;
    ck_assert_int_eq(kiln_load(w.world, binary.data, binary.size, &d), KILN_OK);
    d.max_json_bytes = json.size;
    ck_assert_int_eq(kiln_load(w.world, json.data, json.size, &d), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w.world), 2 * kiln_entity_count(src.world));
    pf_bytes_free(&json);
    pf_bytes_free(&binary);
    pf_close(&src);
    pf_close(&w);
}

KILN_TEST(stops, prefab_load_asks_while_reading_and_makes_nothing_when_stopped) {
    pf_world w;
    pf_open(&w, false);
    char *text = prefab_of(10000);
    asker count = {0, 0};
    kiln_prefab_load_desc d = {.keep_going = ask, .ud = &count};
    kiln_prefab *p = NULL;
    ck_assert_int_eq(kiln_prefab_load(w.world, text, strlen(text), &d, &p), KILN_OK);
    ck_assert_int_eq(kiln_prefab_nodes(p), 10000);
    kiln_prefab_destroy(p);
    ck_assert_int_gt(count.asks, 2);
    const int64_t at[] = {1, count.asks};
    for (size_t k = 0; k < 2; k++) {
        asker stop = {0, at[k]};
        d.ud = &stop;
        p = NULL;
        ck_assert_int_eq(kiln_prefab_load(w.world, text, strlen(text), &d, &p), KILN_ERR_LIMIT);
        ck_assert_ptr_null(p);
        ck_assert_msg(strstr(kiln_world_error(w.world), "kiln_prefab_load: stopped by the caller after"), "%s",
                      kiln_world_error(w.world));
    }
    ck_assert_msg(strstr(kiln_world_error(w.world), "nodes"), "%s", kiln_world_error(w.world));
    free(text);
    pf_close(&w);
}

KILN_TEST(stops, clone_of_a_tree_stopped_takes_every_copy_back) {
    pf_world w;
    pf_open(&w, false);
    kiln_entity root, e, copy;
    ck_assert_int_eq(kiln_spawn(w.world, &root), KILN_OK);
    for (int i = 0; i < 9000; i++) {
        ck_assert_int_eq(kiln_spawn(w.world, &e), KILN_OK);
        ck_assert_int_eq(kiln_transform_set_parent(w.world, e, root), KILN_OK);
    }
    kiln_clone_desc d = {.tree = true, .keep_going = ask};
    uint64_t h0 = kiln_world_hash(w.world);
    int64_t before = kiln_entity_count(w.world);
    /* at each of its five asks (two while reading, two while spawning, one at the end) */
    for (int64_t at = 1; at <= 5; at++) {
        asker stop = {0, at};
        d.ud = &stop;
        ck_assert_int_eq(kiln_clone(w.world, root, &d, &copy), KILN_ERR_LIMIT);
        ck_assert_msg(strstr(kiln_world_error(w.world), "kiln_clone: stopped by the caller after"), "%s",
                      kiln_world_error(w.world));
        ck_assert_msg(kiln_world_hash(w.world) == h0, "ask %lld: the world changed", (long long)at);
    }
    asker count = {0, 0};
    d.ud = &count;
    ck_assert_int_eq(kiln_clone(w.world, root, &d, &copy), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w.world), before + 9001);
    ck_assert_int_eq(count.asks, 5);
    pf_close(&w);
}

/* A progress that stops once it was told of more than limit units (0: never). */
typedef struct meter {
    int64_t units, calls, limit;
} meter;

static bool measure(void *ud, int64_t units) {
    meter *m = ud;
    m->units += units;
    m->calls++;
    return m->limit == 0 || m->units <= m->limit;
}

/* Goes on while the entities are reported, stops at the first report of text written (0
 * units once an entity was reported: 0 before the first is the indexing's). */
static bool stop_writing(void *ud, int64_t units) {
    bool *reported = ud;
    *reported = *reported || units != 0;
    return units != 0 || !*reported;
}

KILN_TEST(stops, export_reports_its_entities_and_stops_when_progress_says_so) {
    pf_world w;
    pf_open(&w, false);
    for (int i = 0; i < 3000; i++) {
        pf_pos p = {(float)i, 0, 0};
        ck_assert_int_eq(kiln_spawn_with(w.world, &w.pos, (const void *const[]){&p}, 1, NULL), KILN_OK);
    }
    uint64_t h0 = kiln_world_hash(w.world);
    meter all = {0, 0, 0};
    pf_bytes out = {0};
    kiln_export_desc d = {.progress = measure, .progress_ud = &all};
    ck_assert_int_eq(kiln_export(w.world, &d, pf_bytes_write, &out), KILN_OK);
    ck_assert_int_eq(all.units, 3000); /* one an entity */
    ck_assert_int_gt(all.calls, 12);   /* every 256 entities, and as the text is written */
    pf_bytes_free(&out);
    meter early = {0, 0, 1000};
    d.progress_ud = &early;
    memset(&out, 0, sizeof out);
    ck_assert_int_eq(kiln_export(w.world, &d, pf_bytes_write, &out), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(w.world), "kiln_export: stopped by desc.progress");
    pf_bytes_free(&out);
    /* stopped while writing the text (every entity reported by then) */
    bool reported = false;
    d.progress = stop_writing;
    d.progress_ud = &reported;
    memset(&out, 0, sizeof out);
    ck_assert_int_eq(kiln_export(w.world, &d, pf_bytes_write, &out), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(w.world), "kiln_export: stopped by desc.progress");
    ck_assert_int_gt(out.size, 0); /* a prefix written */
    pf_bytes_free(&out);
    ck_assert_msg(kiln_world_hash(w.world) == h0, "the world changed");
    pf_close(&w);
}

/* A progress that counts its calls before the first report of entities, and stops at call
 * stop_at (0: never). */
typedef struct first_units {
    int64_t calls, calls_before_units, units, stop_at;
} first_units;

static bool count_to_units(void *ud, int64_t units) {
    first_units *f = ud;
    f->calls++;
    if (units && !f->units) f->calls_before_units = f->calls - 1;
    f->units += units;
    return f->stop_at == 0 || f->calls < f->stop_at;
}

/* Before its first entity an export indexes every entity, sorts the handles and the Parent
 * links and numbers the trees: a third of a second on a million entities without an ask, so
 * a console statement's one-second limit was overrun. That work asks too: a 40,000-entity
 * export (half of them children) asks several times before its first entity, and one
 * stopped at its first ask stops there, no entity reported, nothing written, the world as it
 * was. */
KILN_TEST(stops, export_asks_while_it_indexes_and_sorts_before_its_first_entity) {
    pf_world w;
    pf_open(&w, false);
    for (int i = 0; i < 20000; i++) {
        pf_pos p = {(float)i, 0, 0};
        kiln_entity root, child;
        ck_assert_int_eq(kiln_spawn_with(w.world, &w.pos, (const void *const[]){&p}, 1, &root), KILN_OK);
        ck_assert_int_eq(kiln_spawn_with(w.world, &w.pos, (const void *const[]){&p}, 1, &child), KILN_OK);
        ck_assert_int_eq(kiln_transform_set_parent(w.world, child, root), KILN_OK);
    }
    uint64_t h0 = kiln_world_hash(w.world);
    first_units all = {0, 0, 0, 0};
    pf_bytes out = {0};
    kiln_export_desc d = {.progress = count_to_units, .progress_ud = &all};
    ck_assert_int_eq(kiln_export(w.world, &d, pf_bytes_write, &out), KILN_OK);
    ck_assert_int_eq(all.units, 40000);
    /* every 4096 of: 40,000 handles sorted (and merged 4 times), 40,000 entities read for
     * their Parent, 20,000 links sorted, 40,000 roots checked and 40,000 numbered */
    ck_assert_msg(all.calls_before_units >= 50, "%lld asks before the first entity",
                  (long long)all.calls_before_units);
    pf_bytes_free(&out);
    first_units first = {0, 0, 0, 1};
    d.progress_ud = &first;
    memset(&out, 0, sizeof out);
    ck_assert_int_eq(kiln_export(w.world, &d, pf_bytes_write, &out), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(w.world), "kiln_export: stopped by desc.progress");
    ck_assert_int_eq(first.calls, 1);
    ck_assert_int_eq(first.units, 0); /* stopped before any entity was reported */
    ck_assert_int_eq(out.size, 0);
    pf_bytes_free(&out);
    ck_assert_msg(kiln_world_hash(w.world) == h0, "the world changed");
    pf_close(&w);
}

/* A prefab's spawn of many copies ran to its end unasked, so a console statement's deadline
 * could not stop p:spawn(100000). kiln_prefab_spawn asks every 4096 entities and after
 * the last copy; a stop at any ask takes back every copy, slots too. */
KILN_TEST(stops, prefab_spawn_asks_and_stops_with_the_world_as_it_was) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    char *text = prefab_of(2);
    kiln_prefab *p = NULL;
    ck_assert_int_eq(kiln_prefab_load(w.world, text, strlen(text), NULL, &p), KILN_OK);
    int64_t n0 = kiln_entity_count(w.world);
    asker count = {0, 0};
    kiln_prefab_spawn_desc d = {.keep_going = ask, .ud = &count};
    ck_assert_int_eq(kiln_prefab_spawn(w.world, p, 10000, &d, NULL), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w.world), n0 + 20000);
    int64_t asks = count.asks;
    ck_assert_int_eq(asks, 20000 / 4096 + 1); /* every 4096 entities (2048 copies), and at the end */
    kiln_prefab_destroy(p);
    pf_close(&w);
    /* at the first ask, one halfway and the last (after every copy was made) */
    pf_open(&w, false);
    pf_populate(&w);
    ck_assert_int_eq(kiln_prefab_load(w.world, text, strlen(text), NULL, &p), KILN_OK);
    uint64_t h0 = kiln_world_hash(w.world);
    const int64_t at[] = {1, asks / 2, asks};
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
        asker stop = {0, at[k]};
        d.ud = &stop;
        ck_assert_int_eq(kiln_prefab_spawn(w.world, p, 10000, &d, NULL), KILN_ERR_LIMIT);
        ck_assert_msg(strstr(kiln_world_error(w.world), "kiln_prefab_spawn: stopped by the caller after"), "%s",
                      kiln_world_error(w.world));
        ck_assert_int_eq(stop.asks, at[k]); /* the stop came at that ask */
        ck_assert_int_eq(kiln_entity_count(w.world), n0);
        ck_assert_msg(kiln_world_hash(w.world) == h0, "ask %lld: the world changed", (long long)at[k]);
    }
    kiln_prefab_destroy(p);
    free(text);
    pf_close(&w);
}
