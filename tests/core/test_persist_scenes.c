/* test_persist_scenes.c: Check suite for prefabs (from a desc and from JSON) and scenes
 * (instantiate, instances, export): references remapped, hostile documents refused saying where
 * with the world untouched, and export read back by instantiate. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

typedef struct fingerprint {
    uint64_t hash;
    int64_t count;
} fingerprint;

static fingerprint take(kiln_world *w) { return (fingerprint){kiln_world_hash(w), kiln_entity_count(w)}; }

static void assert_same(kiln_world *w, fingerprint f, const char *context) {
    ck_assert_msg(kiln_world_hash(w) == f.hash, "%s: the world changed", context);
    ck_assert_msg(kiln_entity_count(w) == f.count, "%s: the entity count changed", context);
}

static kiln_entity parent_of(pf_world *w, kiln_entity e) {
    const kiln_parent *p = kiln_get(w->world, e, w->tf.parent);
    return p ? p->entity : KILN_NULL_ENTITY;
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(prefab);

KILN_TEST(prefab, a_desc_prefab_spawns_its_tree_count_times_with_references_inside_each_copy) {
    pf_world w;
    pf_open(&w, false);
    kiln_entity outside;
    ck_assert_int_eq(kiln_spawn(w.world, &outside), KILN_OK);
    pf_pos root_pos = {1, 2, 3};
    pf_target aim = {1, {2, outside}, 7}; /* node 1 (the root), node 2 (the child), a live entity */
    pf_pos child_pos = {4, 5, 6};
    kiln_component child_comps[] = {w.pos, w.target};
    const void *child_vals[] = {&child_pos, &aim};
    kiln_prefab_desc child = {.components = child_comps, .values = child_vals, .component_count = 2};
    kiln_component root_comps[] = {w.pos, w.tag};
    const void *root_vals[] = {&root_pos, NULL};
    kiln_prefab_desc root = {.components = root_comps, .values = root_vals, .component_count = 2,
                             .children = &child, .child_count = 1};
    kiln_prefab *p;
    ck_assert_int_eq(kiln_prefab_create(w.world, &root, &p), KILN_OK);
    ck_assert_int_eq(kiln_prefab_nodes(p), 2);
    kiln_entity roots[3];
    ck_assert_int_eq(kiln_prefab_spawn(w.world, p, 3, NULL, roots), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w.world), 1 + 6);
    for (int i = 0; i < 3; i++) {
        kiln_entity kids[2];
        ck_assert_int_eq(kiln_transform_children(w.world, roots[i], kids, 2), 1);
        ck_assert(kiln_has(w.world, roots[i], w.tag));
        const pf_target *t = kiln_get(w.world, kids[0], w.target);
        ck_assert_uint_eq(t->target, roots[i]);
        ck_assert_uint_eq(t->pair[0], kids[0]);
        ck_assert_uint_eq(t->pair[1], outside);
        ck_assert_int_eq(t->weight, 7);
        ck_assert_float_eq(((const pf_pos *)kiln_get(w.world, kids[0], w.pos))->y, 5);
    }
    kiln_prefab_destroy(p);
    pf_close(&w);
}

KILN_TEST(prefab, a_desc_with_hooks_parent_duplicates_or_unknown_ids_is_refused_naming_the_node) {
    pf_world w;
    pf_open(&w, false);
    test_hook_log log;
    memset(&log, 0, sizeof log);
    kiln_component owned = test_register_owned(w.world, &log);
    kiln_component bad[] = {w.pos, owned};
    kiln_prefab_desc kid = {.components = bad, .component_count = 2};
    kiln_prefab_desc root = {.children = &kid, .child_count = 1};
    kiln_prefab *p = NULL;
    ck_assert_int_eq(kiln_prefab_create(w.world, &root, &p), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w.world),
                     "kiln_prefab_create: node 2 component 'Owned' has hooks (it owns something) and cannot be copied");
    kiln_component twice[] = {w.pos, w.pos};
    root = (kiln_prefab_desc){.components = twice, .component_count = 2};
    ck_assert_int_eq(kiln_prefab_create(w.world, &root, &p), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w.world), "kiln_prefab_create: node 1: component 'Position' is given twice");
    kiln_component parent[] = {w.tf.parent};
    root = (kiln_prefab_desc){.components = parent, .component_count = 1};
    ck_assert_int_eq(kiln_prefab_create(w.world, &root, &p), KILN_ERR_INVALID_ARGUMENT);
    kiln_component unknown[] = {999};
    root = (kiln_prefab_desc){.components = unknown, .component_count = 1};
    ck_assert_int_eq(kiln_prefab_create(w.world, &root, &p), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_ptr_null(p);
    pf_close(&w);
}

static const char ship_json[] =
    "{\"components\": {\"Position\": {\"x\": 1.5}, \"Label\": {\"text\": \"ship\"}, \"Frozen\": true},\n"
    " \"children\": [{\"components\": {\"Target\": {\"target\": 1, \"pair\": [2, null], \"weight\": 3}}},\n"
    "                {\"components\": {\"Velocity\": {\"dx\": \"inf\"}}}]}";

KILN_TEST(prefab, a_json_prefab_reads_fields_by_name_and_node_numbers) {
    pf_world w;
    pf_open(&w, true);
    kiln_prefab *p;
    ck_assert_msg(kiln_prefab_load(w.world, ship_json, sizeof ship_json - 1, NULL, &p) == KILN_OK, "%s",
                  kiln_world_error(w.world));
    ck_assert_int_eq(kiln_prefab_nodes(p), 3);
    kiln_entity a, b;
    ck_assert_int_eq(kiln_prefab_spawn(w.world, p, 1, NULL, &a), KILN_OK);
    ck_assert_int_eq(kiln_prefab_spawn(w.world, p, 1, NULL, &b), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w.world), 6);
    ck_assert_str_eq(((const pf_label *)kiln_get(w.world, b, w.label))->text, "ship");
    ck_assert_float_eq(((const pf_pos *)kiln_get(w.world, b, w.pos))->x, 1.5f);
    kiln_entity kids[2];
    ck_assert_int_eq(kiln_transform_children(w.world, b, kids, 2), 2);
    kiln_entity gun = kiln_has(w.world, kids[0], w.target) ? kids[0] : kids[1];
    const pf_target *t = kiln_get(w.world, gun, w.target);
    ck_assert_uint_eq(t->target, b);
    ck_assert_uint_eq(t->pair[0], gun);
    ck_assert_uint_eq(t->pair[1], KILN_NULL_ENTITY);
    ck_assert_uint_eq(parent_of(&w, gun), b);
    kiln_prefab_destroy(p);
    pf_close(&w);
}

static const struct {
    const char *doc, *message;
    kiln_result code;
} bad_prefabs[] = {
    {"[1]", "kiln_prefab_load: an object at the top level expected, got an array", KILN_ERR_INVALID_ARGUMENT},
    {"{\"components\": {\"Position\": {\"x\": \"far\"}}}",
     "kiln_prefab_load: at components.Position.x: a number expected, got a string", KILN_ERR_INVALID_ARGUMENT},
    {"{\"components\": {\"Nope\": {}}}",
     "kiln_prefab_load: at components.Nope: unknown component (not registered in this world)", KILN_ERR_UNKNOWN_COMPONENT},
    {"{\"components\": {\"Position\": {\"w\": 1}}}",
     "kiln_prefab_load: at components.Position.w: component 'Position' has no such field", KILN_ERR_UNKNOWN_COMPONENT},
    {"{\"children\": [{\"components\": {\"Target\": {\"target\": 3}}}]}",
     "kiln_prefab_load: at children[0].components.Target.target: entity 3 is not in the prefab (1..2, or null)",
     KILN_ERR_INVALID_ARGUMENT},
    {"{\"children\": {}}", "kiln_prefab_load: at children: an array of prefabs expected, got an object", KILN_ERR_INVALID_ARGUMENT},
    {"{\"kids\": []}", "kiln_prefab_load: at kids: unknown key (expected components, children)", KILN_ERR_INVALID_ARGUMENT},
    {"{\"components\": {\"Parent\": {\"entity\": null}}}",
     "kiln_prefab_load: at components.Parent: component 'Parent' is given by the tree (children, parent), not as a component",
     KILN_ERR_INVALID_ARGUMENT},
    {"{\"components\": {\"Frozen\": false}}", "kiln_prefab_load: at components.Frozen: true (a tag) expected, got a boolean",
     KILN_ERR_INVALID_ARGUMENT},
    {"{\"components\": {\"Label\": {\"text\": \"a label far too long\"}}}",
     "kiln_prefab_load: at components.Label.text: a string of at most 16 bytes expected", KILN_ERR_INVALID_ARGUMENT},
    {"{\"components\": {\"Position\": {\"x\": 1}}", "kiln_prefab_load: at line 1 column 37 (byte 37): '}' expected near end of file",
     KILN_ERR_INVALID_ARGUMENT},
};

KILN_TEST(prefab, json_of_the_wrong_shape_is_refused_naming_the_path) {
    pf_world w;
    pf_open(&w, false);
    for (size_t i = 0; i < sizeof bad_prefabs / sizeof bad_prefabs[0]; i++) {
        kiln_prefab *p = NULL;
        kiln_result r = kiln_prefab_load(w.world, bad_prefabs[i].doc, strlen(bad_prefabs[i].doc), NULL, &p);
        ck_assert_msg(r == bad_prefabs[i].code, "document %zu: %s", i, kiln_world_error(w.world));
        ck_assert_str_eq(kiln_world_error(w.world), bad_prefabs[i].message);
        ck_assert_ptr_null(p);
    }
    pf_close(&w);
}

KILN_TEST(prefab, a_prefab_nested_too_deep_is_refused_with_the_limit) {
    pf_world w;
    pf_open(&w, false);
    char doc[2048] = "";
    for (int i = 0; i < 70; i++) strcat(doc, "{\"children\":[");
    for (int i = 0; i < 70; i++) strcat(doc, "]}");
    kiln_prefab *p = NULL;
    ck_assert_int_eq(kiln_prefab_load(w.world, doc, strlen(doc), NULL, &p), KILN_ERR_LIMIT);
    ck_assert_msg(strstr(kiln_world_error(w.world), "prefabs nest at most 64 deep") != NULL, "%s", kiln_world_error(w.world));
    pf_close(&w);
}

KILN_TEST(prefab, a_prefab_cut_at_any_byte_is_refused) {
    pf_world w;
    pf_open(&w, false);
    for (size_t len = 0; len < sizeof ship_json - 1; len++) {
        kiln_prefab *p = NULL;
        kiln_result r = kiln_prefab_load(w.world, ship_json, len, NULL, &p);
        ck_assert_msg(r == KILN_ERR_INVALID_ARGUMENT, "cut at %zu loaded", len);
        ck_assert_msg(strncmp(kiln_world_error(w.world), "kiln_prefab_load: at line", 25) == 0, "cut at %zu: %s", len,
                      kiln_world_error(w.world));
        ck_assert_ptr_null(p);
    }
    pf_close(&w);
}

KILN_TEST(prefab, a_spawn_a_check_hook_refuses_takes_back_every_copy) {
    pf_world w;
    pf_open(&w, false);
    static const char named[] = "{\"components\": {\"Name\": {\"text\": \"boss\"}}, \"children\": [{}]}";
    kiln_component name_id;
    ck_assert_int_eq(kiln_name_init(w.world, &name_id), KILN_OK);
    kiln_prefab *p;
    ck_assert_int_eq(kiln_prefab_load(w.world, named, sizeof named - 1, NULL, &p), KILN_OK);
    fingerprint f = take(w.world);
    kiln_entity roots[2];
    ck_assert_int_eq(kiln_prefab_spawn(w.world, p, 2, NULL, roots), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strncmp(kiln_world_error(w.world), "kiln_prefab_spawn: name 'boss' is taken", 39) == 0, "%s",
                  kiln_world_error(w.world));
    assert_same(w.world, f, "a refused second copy");
    ck_assert_int_eq(kiln_prefab_spawn(w.world, p, -1, NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
    pf_world other;
    pf_open(&other, false);
    ck_assert_int_eq(kiln_prefab_spawn(other.world, p, 1, NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(other.world), "kiln_prefab_spawn: the prefab was made for another world");
    pf_close(&other);
    kiln_prefab_destroy(p);
    pf_close(&w);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP_WITH(scene, .timeout = 60);

static const char level_json[] =
    "{\"version\": 1, \"name\": \"level 1\", \"properties\": {\"gravity\": -9.5, \"music\": \"calm\"},\n"
    " \"entities\": [\n"
    "  {\"name\": \"base\", \"components\": {\"Position\": {\"x\": 10}}},\n"
    "  {\"name\": \"hero\", \"parent\": 1, \"prefab\": \"ship\", \"components\": {\"Position\": {\"y\": 2},"
    " \"Score\": {\"points\": 5, \"best\": 4}}},\n"
    "  {\"parent\": 4, \"components\": {\"Target\": {\"target\": 2, \"pair\": [1, 3], \"weight\": 1}}},\n"
    "  {\"name\": \"tower\", \"parent\": 1}\n"
    " ]}";

static kiln_instance *instantiate_level(pf_world *w, kiln_prefab **ship, kiln_entity parent) {
    if (!*ship)
        ck_assert_msg(kiln_prefab_load(w->world, ship_json, sizeof ship_json - 1, NULL, ship) == KILN_OK, "%s",
                      kiln_world_error(w->world));
    const char *names[] = {"ship"};
    const kiln_prefab *prefabs[] = {*ship};
    kiln_instantiate_desc d = {.prefab_names = names, .prefabs = prefabs, .prefab_count = 1, .parent = parent};
    kiln_instance *inst = NULL;
    kiln_result r = kiln_instantiate(w->world, level_json, sizeof level_json - 1, &d, &inst);
    ck_assert_msg(r == KILN_OK, "%s", kiln_world_error(w->world));
    return inst;
}

KILN_TEST(scene, instantiate_spawns_prefabs_links_parents_and_remaps_entity_numbers) {
    pf_world w;
    pf_open(&w, false);
    kiln_prefab *ship = NULL;
    kiln_instance *inst = instantiate_level(&w, &ship, KILN_NULL_ENTITY);
    ck_assert_str_eq(kiln_instance_name(inst), "level 1");
    ck_assert_str_eq(kiln_instance_properties(inst), "{\"gravity\":-9.5,\"music\":\"calm\"}");
    ck_assert_int_eq(kiln_instance_spawned(inst, NULL, 0), 6); /* 4 entities, the ship's 2 children */
    kiln_entity roots[4];
    ck_assert_int_eq(kiln_instance_roots(inst, roots, 4), 1);
    kiln_entity base = kiln_instance_entity(inst, "base"), hero = kiln_instance_entity(inst, "hero");
    kiln_entity tower = kiln_instance_entity(inst, "tower");
    ck_assert_uint_eq(roots[0], base);
    ck_assert_uint_eq(kiln_instance_entity(inst, "nobody"), KILN_NULL_ENTITY);
    ck_assert_uint_eq(parent_of(&w, hero), base);
    ck_assert_uint_eq(parent_of(&w, tower), base);
    /* the prefab's values with the scene's fields merged over them */
    const pf_pos *hp = kiln_get(w.world, hero, w.pos);
    ck_assert_float_eq(hp->x, 1.5f);
    ck_assert_float_eq(hp->y, 2);
    ck_assert(kiln_has(w.world, hero, w.tag));
    const pf_score *score = kiln_get(w.world, hero, w.score);
    ck_assert_uint_eq(score->best, tower);
    kiln_entity kids[3];
    ck_assert_int_eq(kiln_transform_children(w.world, hero, kids, 3), 2);
    /* entity 3's parent is entity 4 (a forward reference) */
    kiln_entity spawned[6];
    kiln_instance_spawned(inst, spawned, 6);
    kiln_entity third = spawned[4]; /* base, hero, hero's two children, then entity 3 */
    ck_assert_uint_eq(parent_of(&w, third), tower);
    const pf_target *t = kiln_get(w.world, third, w.target);
    ck_assert_uint_eq(t->target, hero);
    ck_assert_uint_eq(t->pair[0], base);
    ck_assert_uint_eq(t->pair[1], third);
    kiln_instance_destroy(inst);
    kiln_prefab_destroy(ship);
    pf_close(&w);
}

/* It despawned b's entities that had the handles a's instance spawned, and said KILN_OK. */
KILN_TEST(scene, an_instance_despawned_with_another_world_is_refused_and_that_world_kept) {
    pf_world a, b;
    pf_open(&a, false);
    pf_open(&b, false);
    const char *scene = "{\"version\": 1, \"entities\": [{\"name\": \"x\"}, {\"name\": \"y\"}]}";
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_instantiate(a.world, scene, strlen(scene), NULL, &inst), KILN_OK);
    pf_populate(&b);
    int64_t count = kiln_entity_count(b.world);
    ck_assert(kiln_is_alive(b.world, kiln_instance_entity(inst, "x"))); /* the same handles */
    ck_assert_int_eq(kiln_instance_despawn(b.world, inst), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(b.world), "kiln_instance_despawn: the instance is of another world");
    ck_assert_int_eq(kiln_entity_count(b.world), count);
    ck_assert_int_eq(kiln_instance_despawn(a.world, inst), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(a.world), 0);
    kiln_instance_destroy(inst);
    pf_close(&a);
    pf_close(&b);
}

KILN_TEST(scene, instances_coexist_under_a_parent_and_each_despawns_only_its_own) {
    pf_world w;
    pf_open(&w, false);
    kiln_entity holder;
    ck_assert_int_eq(kiln_spawn(w.world, &holder), KILN_OK);
    kiln_prefab *ship = NULL;
    kiln_instance *a = instantiate_level(&w, &ship, holder);
    kiln_instance *b = instantiate_level(&w, &ship, holder);
    ck_assert_int_eq(kiln_entity_count(w.world), 13);
    ck_assert_uint_ne(kiln_instance_entity(a, "hero"), kiln_instance_entity(b, "hero"));
    ck_assert_int_eq(kiln_transform_children(w.world, holder, NULL, 0), 2);
    ck_assert_int_eq(kiln_instance_despawn(w.world, a), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w.world), 7);
    ck_assert(kiln_is_alive(w.world, kiln_instance_entity(b, "tower")));
    ck_assert_int_eq(kiln_instance_despawn(w.world, a), KILN_OK); /* nothing left: no error */
    kiln_instance_destroy(a);
    kiln_instance_destroy(b);
    kiln_prefab_destroy(ship);
    pf_close(&w);
}

#define ENTS(list) "{\"version\": 1, \"entities\": [" list "]}"

static const struct {
    const char *doc, *message;
    kiln_result code;
} bad_scenes[] = {
    {"{\"version\": 2, \"entities\": []}",
     "kiln_instantiate: at version: version 2 is not supported (this build reads version 1)", KILN_ERR_INVALID_ARGUMENT},
    {"{\"entities\": []}", "kiln_instantiate: at version: an integer expected, got nothing", KILN_ERR_INVALID_ARGUMENT},
    {"{\"version\": 1}", "kiln_instantiate: at entities: an array of entities expected, got nothing", KILN_ERR_INVALID_ARGUMENT},
    {"{\"version\": 1, \"entities\": [], \"extra\": 0}",
     "kiln_instantiate: at extra: unknown key (expected version, name, properties, entities)", KILN_ERR_INVALID_ARGUMENT},
    {"{\"version\": 1, \"properties\": [], \"entities\": []}",
     "kiln_instantiate: at properties: an object expected, got an array", KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{}, {\"parent\": 3}"), "kiln_instantiate: at entities[1].parent: entity 3 is not in the scene (1..2)",
     KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{\"parent\": 1}"), "kiln_instantiate: at entities[0].parent: an entity cannot be its own parent",
     KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{\"parent\": 3}, {\"parent\": 1}, {\"parent\": 2}"),
     "kiln_instantiate: at entities[0].parent: parent links form a cycle through entity 1", KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{}, {\"parent\": \"1\"}"),
     "kiln_instantiate: at entities[1].parent: an entity number (integer) or null expected, got a string",
     KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{\"prefab\": \"tank\"}"), "kiln_instantiate: at entities[0].prefab: unknown prefab 'tank'", KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{\"components\": {\"Laser\": {}}}"),
     "kiln_instantiate: at entities[0].components.Laser: unknown component (not registered in this world)",
     KILN_ERR_UNKNOWN_COMPONENT},
    {ENTS("{\"components\": {\"Target\": {\"target\": 2}}}"),
     "kiln_instantiate: at entities[0].components.Target.target: entity 2 is not in the scene (1..1, or null)",
     KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{\"name\": \"a\"}, {\"name\": \"a\"}"), "kiln_instantiate: at entities[1].name: name 'a' is given twice in the scene",
     KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{\"name\": \"\"}"), "kiln_instantiate: at entities[0].name: a name of 1..63 bytes without NUL expected",
     KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{\"components\": {\"Velocity\": {\"dx\": [1]}}}"),
     "kiln_instantiate: at entities[0].components.Velocity.dx: a number expected, got an array", KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{\"components\": {\"Target\": {\"pair\": [1]}}}"),
     "kiln_instantiate: at entities[0].components.Target.pair: an array of 2 elements expected, got one of 1",
     KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{\"components\": {\"Target\": {\"weight\": 3000000000}}}"),
     "kiln_instantiate: at entities[0].components.Target.weight: 3000000000 is out of range", KILN_ERR_INVALID_ARGUMENT},
    {ENTS("7"), "kiln_instantiate: at entities[0]: an entity object expected, got an integer", KILN_ERR_INVALID_ARGUMENT},
    {ENTS("{\"children\": []}"),
     "kiln_instantiate: at entities[0].children: unknown key (expected name, parent, prefab, components)",
     KILN_ERR_INVALID_ARGUMENT},
    {"{\"version\": 1, \"entities\": [{}, {}", "kiln_instantiate: at line 1 column 34 (byte 34): ']' expected near end of file",
     KILN_ERR_INVALID_ARGUMENT},
};

KILN_TEST(scene, a_hostile_scene_is_refused_saying_where_and_the_world_is_untouched) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    fingerprint f = take(w.world);
    for (size_t i = 0; i < sizeof bad_scenes / sizeof bad_scenes[0]; i++) {
        kiln_instance *inst = NULL;
        kiln_result r = kiln_instantiate(w.world, bad_scenes[i].doc, strlen(bad_scenes[i].doc), NULL, &inst);
        ck_assert_msg(r == bad_scenes[i].code, "scene %zu gave %d: %s", i, (int)r, kiln_world_error(w.world));
        ck_assert_str_eq(kiln_world_error(w.world), bad_scenes[i].message);
        ck_assert_ptr_null(inst);
        assert_same(w.world, f, bad_scenes[i].doc);
    }
    pf_close(&w);
}

KILN_TEST(scene, a_scene_cut_at_any_byte_or_with_flipped_bits_never_half_lands) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    kiln_prefab *ship;
    ck_assert_int_eq(kiln_prefab_load(w.world, ship_json, sizeof ship_json - 1, NULL, &ship), KILN_OK);
    const char *names[] = {"ship"};
    const kiln_prefab *prefabs[] = {ship};
    kiln_instantiate_desc d = {.prefab_names = names, .prefabs = prefabs, .prefab_count = 1};
    fingerprint f = take(w.world);
    for (size_t len = 0; len < sizeof level_json - 1; len++) {
        kiln_instance *inst = NULL;
        ck_assert_int_eq(kiln_instantiate(w.world, level_json, len, &d, &inst), KILN_ERR_INVALID_ARGUMENT);
        ck_assert_msg(strncmp(kiln_world_error(w.world), "kiln_instantiate: at line", 25) == 0, "cut at %zu: %s", len,
                      kiln_world_error(w.world));
        assert_same(w.world, f, "a cut scene");
    }
    char copy[sizeof level_json];
    uint64_t state = 0x5ce7e;
    int refused = 0;
    for (int round = 0; round < 1500; round++) {
        memcpy(copy, level_json, sizeof level_json);
        for (int flips = 0; flips < 1 + round % 3; flips++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            size_t bit = (size_t)(state >> 33) % ((sizeof level_json - 1) * 8);
            copy[bit / 8] ^= (char)(1u << (bit % 8));
        }
        kiln_instance *inst = NULL;
        kiln_result r = kiln_instantiate(w.world, copy, sizeof level_json - 1, &d, &inst);
        if (r != KILN_OK) {
            refused++;
            ck_assert_msg(strncmp(kiln_world_error(w.world), "kiln_instantiate: ", 18) == 0, "%s", kiln_world_error(w.world));
            ck_assert_ptr_null(inst);
            assert_same(w.world, f, "a refused flip");
        } else {
            ck_assert_int_le(kiln_instance_spawned(inst, NULL, 0), 6);
            ck_assert_int_eq(kiln_instance_despawn(w.world, inst), KILN_OK);
            kiln_instance_destroy(inst);
            ck_assert_int_eq(kiln_entity_count(w.world), f.count);
            f = take(w.world); /* the despawns spent generations: the next spawns' handles moved */
        }
    }
    ck_assert_int_gt(refused, 0);
    kiln_prefab_destroy(ship);
    pf_close(&w);
}

KILN_TEST(scene, a_scene_beyond_the_entity_limit_is_refused_before_anything_spawns) {
    pf_world w;
    pf_open(&w, false);
    /* 1100 entities each spawning a prefab of 1000 nodes */
    kiln_prefab_desc leaf = {0};
    kiln_prefab_desc *kids = calloc(999, sizeof *kids);
    for (int i = 0; i < 999; i++) kids[i] = leaf;
    kiln_prefab_desc big = {.children = kids, .child_count = 999};
    kiln_prefab *p;
    ck_assert_int_eq(kiln_prefab_create(w.world, &big, &p), KILN_OK);
    size_t cap = 1100 * 20 + 64;
    char *doc = malloc(cap);
    strcpy(doc, "{\"version\": 1, \"entities\": [");
    for (int i = 0; i < 1100; i++) strcat(doc, i ? ",{\"prefab\":\"big\"}" : "{\"prefab\":\"big\"}");
    strcat(doc, "]}");
    const char *names[] = {"big"};
    const kiln_prefab *prefabs[] = {p};
    kiln_instantiate_desc d = {.prefab_names = names, .prefabs = prefabs, .prefab_count = 1};
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_instantiate(w.world, doc, strlen(doc), &d, &inst), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(w.world),
                     "kiln_instantiate: at entities[1048]: the scene would spawn more than 1048576 entities");
    ck_assert_int_eq(kiln_entity_count(w.world), 0);
    free(doc);
    free(kids);
    kiln_prefab_destroy(p);
    pf_close(&w);
}

KILN_TEST(scene, a_check_hook_refusal_while_spawning_takes_everything_back) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    ck_assert_int_eq(kiln_name_set(w.world, w.e[0], "taken"), KILN_OK);
    static const char doc[] = ENTS("{}, {\"parent\": 1}, {\"components\": {\"Name\": {\"text\": \"taken\"}}}");
    fingerprint f = take(w.world);
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_instantiate(w.world, doc, sizeof doc - 1, NULL, &inst), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strncmp(kiln_world_error(w.world), "kiln_instantiate: name 'taken' is taken", 39) == 0, "%s",
                  kiln_world_error(w.world));
    assert_same(w.world, f, "a refused name");
    kiln_instantiate_desc d = {.parent = kiln_entity_make(40, 3)};
    ck_assert_int_eq(kiln_instantiate(w.world, doc, sizeof doc - 1, &d, &inst), KILN_ERR_DEAD_ENTITY);
    assert_same(w.world, f, "a dead parent");
    pf_close(&w);
}

/* A scene of count entities in one chain: entity k's parent is k + 1 when reversed (the last
 * is the root), else k - 1; the first (or last) names prefab 'deep' when prefab is set. */
static char *chain_scene(int count, bool reversed, bool prefab) {
    char *doc = malloc((size_t)count * 40 + 64);
    char *at = doc + sprintf(doc, "{\"version\": 1, \"entities\": [");
    for (int k = 1; k <= count; k++) {
        int parent = reversed ? (k < count ? k + 1 : 0) : k - 1;
        bool tip = prefab && k == (reversed ? 1 : count);
        at += sprintf(at, "%s{", k > 1 ? ", " : "");
        if (parent) at += sprintf(at, "\"parent\": %d%s", parent, tip ? ", " : "");
        at += sprintf(at, "%s}", tip ? "\"prefab\": \"deep\"" : "");
    }
    strcpy(at, "]}");
    return doc;
}

/* Instantiates chain_scene(count, reversed, prefab) under parent; refused with message (and
 * the world as it was, its slots too) when message is set, else taken and taken back. */
static void expect_chain(pf_world *w, const kiln_prefab *deep, int count, bool reversed, kiln_entity parent,
                         const char *message) {
    char *doc = chain_scene(count, reversed, deep != NULL);
    const char *names[] = {"deep"};
    kiln_instantiate_desc d = {.prefab_names = names, .prefabs = &deep, .prefab_count = deep ? 1 : 0, .parent = parent};
    fingerprint f = take(w->world);
    kiln_instance *inst = NULL;
    kiln_result r = kiln_instantiate(w->world, doc, strlen(doc), &d, &inst);
    if (message) {
        ck_assert_msg(r == KILN_ERR_INVALID_ARGUMENT, "%d: %s", (int)r, kiln_world_error(w->world));
        ck_assert_str_eq(kiln_world_error(w->world), message);
        ck_assert_ptr_null(inst);
        assert_same(w->world, f, message);
    } else {
        ck_assert_msg(r == KILN_OK, "%d entities: %s", count, kiln_world_error(w->world));
        ck_assert_int_eq(kiln_instance_despawn(w->world, inst), KILN_OK);
        kiln_instance_destroy(inst);
    }
    free(doc);
}

KILN_TEST(scene, a_chain_too_deep_is_refused_at_its_scene_entity_before_anything_spawns) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    /* the deepest entity may be 256 deep: 257 in a chain fit, and the root of 300 listed last
     * leaves entity 43 the first one over (the least deep past the limit) */
    expect_chain(&w, NULL, 257, false, KILN_NULL_ENTITY, NULL);
    expect_chain(&w, NULL, 258, false, KILN_NULL_ENTITY,
                 "kiln_instantiate: at entities[257].parent: entity 258 would be 257 deep: a parent chain deeper than 256");
    expect_chain(&w, NULL, 300, true, KILN_NULL_ENTITY,
                 "kiln_instantiate: at entities[42].parent: entity 43 would be 257 deep: a parent chain deeper than 256");
    /* under a parent 200 deep the scene's roots are 201 deep */
    kiln_entity holder = w.e[0];
    for (int i = 0; i < 200; i++) {
        kiln_entity next;
        ck_assert_int_eq(kiln_spawn(w.world, &next), KILN_OK);
        ck_assert_int_eq(kiln_transform_set_parent(w.world, next, holder), KILN_OK);
        holder = next;
    }
    char msg[200], hb[24];
    kiln_entity_format(holder, hb, sizeof hb);
    expect_chain(&w, NULL, 56, false, holder, NULL);
    snprintf(msg, sizeof msg, "kiln_instantiate: at entities[0].parent: entity 1 would be 257 deep (the scene under "
             "parent %s): a parent chain deeper than 256", hb);
    expect_chain(&w, NULL, 57, true, holder, msg);
    /* a prefab's nodes count below the entity that names it */
    kiln_prefab *deep;
    static const char deep_json[] = "{\"children\": [{\"children\": [{}]}]}";
    ck_assert_int_eq(kiln_prefab_load(w.world, deep_json, sizeof deep_json - 1, NULL, &deep), KILN_OK);
    expect_chain(&w, deep, 54, false, holder, NULL);
    snprintf(msg, sizeof msg, "kiln_instantiate: at entities[54].parent: entity 55 would be 255 deep (the scene under "
             "parent %s) and its prefab's nodes 257 deep: a parent chain deeper than 256", hb);
    expect_chain(&w, deep, 55, false, holder, msg);
    for (int i = 0; i < 56; i++) {
        kiln_entity next;
        ck_assert_int_eq(kiln_spawn(w.world, &next), KILN_OK);
        ck_assert_int_eq(kiln_transform_set_parent(w.world, next, holder), KILN_OK);
        holder = next;
    }
    kiln_entity_format(holder, hb, sizeof hb); /* 256 deep: nothing more fits under it */
    snprintf(msg, sizeof msg, "kiln_instantiate: at entities[0]: entity 1 would be 257 deep under parent %s: a "
             "parent chain deeper than 256", hb);
    expect_chain(&w, NULL, 1, false, holder, msg);
    kiln_prefab_destroy(deep);
    pf_close(&w);
}

KILN_TEST(scene, running_out_of_memory_anywhere_in_instantiate_leaves_the_world_untouched) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    pf_world w;
    pf_open_on(&w, false, &alloc);
    pf_populate(&w);
    kiln_prefab *ship;
    ck_assert_int_eq(kiln_prefab_load(w.world, ship_json, sizeof ship_json - 1, NULL, &ship), KILN_OK);
    const char *names[] = {"ship"};
    const kiln_prefab *prefabs[] = {ship};
    kiln_instantiate_desc d = {.prefab_names = names, .prefabs = prefabs, .prefab_count = 1};
    fingerprint f = take(w.world);
    int64_t n = 0;
    kiln_instance *inst = NULL;
    for (;; n++) {
        test_allocator_fail_after(&alloc, n);
        kiln_result r = kiln_instantiate(w.world, level_json, sizeof level_json - 1, &d, &inst);
        test_allocator_fail_never(&alloc);
        if (r == KILN_OK) break;
        ck_assert_msg(r == KILN_ERR_OUT_OF_MEMORY, "at allocation %lld: %s", (long long)n, kiln_world_error(w.world));
        ck_assert_ptr_null(inst);
        assert_same(w.world, f, kiln_world_error(w.world));
    }
    ck_assert_int_gt(n, 5);
    ck_assert_int_eq(kiln_entity_count(w.world), f.count + 6);
    kiln_instance_destroy(inst);
    kiln_prefab_destroy(ship);
    pf_close(&w);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(export);

static void export_to(kiln_world *world, const kiln_export_desc *d, pf_bytes *out) {
    memset(out, 0, sizeof *out);
    kiln_result r = kiln_export(world, d, pf_bytes_write, out);
    ck_assert_msg(r == KILN_OK, "%s", kiln_world_error(world));
    pf_bytes_write(out, "", 1); /* NUL-terminated for the string checks */
    out->size--;
}

KILN_TEST(export, export_writes_what_instantiate_reads_and_a_second_export_is_the_same_text) {
    pf_world a, b;
    pf_open(&a, false);
    pf_populate(&a);
    ck_assert_int_eq(kiln_name_set(a.world, a.e[1], "arm"), KILN_OK);
    pf_bytes first, second;
    kiln_export_desc d = {.name = "snapshot"};
    export_to(a.world, &d, &first);
    ck_assert_msg(strstr((char *)first.data, "\"version\": 1") != NULL, "%s", (char *)first.data);
    pf_open(&b, true); /* another registration order */
    kiln_entity filler;
    ck_assert_int_eq(kiln_spawn(b.world, &filler), KILN_OK);
    kiln_instance *inst = NULL;
    ck_assert_msg(kiln_instantiate(b.world, first.data, first.size, NULL, &inst) == KILN_OK, "%s", kiln_world_error(b.world));
    ck_assert_int_eq(kiln_instance_spawned(inst, NULL, 0), kiln_entity_count(a.world));
    kiln_entity arm = kiln_instance_entity(inst, "arm");
    ck_assert_uint_eq(kiln_name_lookup(b.world, "arm"), arm);
    ck_assert_int_eq(kiln_despawn(b.world, filler), KILN_OK);
    export_to(b.world, &d, &second);
    ck_assert_str_eq((char *)second.data, (char *)first.data);
    /* the reference to the despawned entity was written as null; inner ones as numbers */
    kiln_entity kids[2];
    ck_assert_int_eq(kiln_transform_children(b.world, arm, kids, 2), 1);
    const pf_target *t = kiln_get(b.world, kids[0], b.target);
    ck_assert_uint_eq(parent_of(&b, t->target), KILN_NULL_ENTITY);
    ck_assert_uint_eq(t->pair[1], KILN_NULL_ENTITY);
    kiln_instance_destroy(inst);
    pf_bytes_free(&first);
    pf_bytes_free(&second);
    pf_close(&a);
    pf_close(&b);
}

KILN_TEST(export, exporting_some_roots_writes_their_trees_and_nulls_references_outside) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    pf_bytes out;
    kiln_export_desc d = {.roots = &w.e[1], .root_count = 1}; /* e1 and its child e2 */
    export_to(w.world, &d, &out);
    kiln_world *fresh = NULL;
    pf_world b;
    pf_open(&b, false);
    fresh = b.world;
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_instantiate(fresh, out.data, out.size, NULL, &inst), KILN_OK);
    ck_assert_int_eq(kiln_instance_spawned(inst, NULL, 0), 2);
    kiln_entity spawned[2];
    kiln_instance_spawned(inst, spawned, 2);
    const pf_target *t = kiln_get(fresh, spawned[1], b.target);
    ck_assert_uint_eq(t->target, KILN_NULL_ENTITY); /* e0 was outside */
    ck_assert_uint_eq(parent_of(&b, spawned[1]), spawned[0]);
    ck_assert_uint_eq(parent_of(&b, spawned[0]), KILN_NULL_ENTITY);
    kiln_instance_destroy(inst);
    pf_bytes_free(&out);
    pf_close(&b);
    pf_close(&w);
}

KILN_TEST(export, export_refuses_values_with_hooks_dead_roots_and_roots_given_twice) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    pf_bytes out = {0};
    kiln_entity twice[] = {w.e[0], w.e[2]}; /* e2 is under e0 */
    kiln_export_desc d = {.roots = twice, .root_count = 2};
    ck_assert_int_eq(kiln_export(w.world, &d, pf_bytes_write, &out), KILN_ERR_INVALID_ARGUMENT);
    char expected[120], buf[24];
    snprintf(expected, sizeof expected, "kiln_export: entity %s is given twice (or is under another root)",
             kiln_entity_format(w.e[2], buf, sizeof buf));
    ck_assert_str_eq(kiln_world_error(w.world), expected);
    kiln_entity dead = kiln_entity_make(50, 1);
    d = (kiln_export_desc){.roots = &dead, .root_count = 1};
    ck_assert_int_eq(kiln_export(w.world, &d, pf_bytes_write, &out), KILN_ERR_DEAD_ENTITY);
    test_hook_log log;
    memset(&log, 0, sizeof log);
    kiln_component owned = test_register_owned(w.world, &log);
    ck_assert_int_eq(kiln_add(w.world, w.e[3], owned, NULL), KILN_OK);
    ck_assert_int_eq(kiln_export(w.world, NULL, pf_bytes_write, &out), KILN_ERR_INVALID_ARGUMENT);
    snprintf(expected, sizeof expected,
             "kiln_export: entity %s component 'Owned' has hooks (it owns something) and cannot be exported",
             kiln_entity_format(w.e[3], buf, sizeof buf));
    ck_assert_str_eq(kiln_world_error(w.world), expected);
    pf_bytes_free(&out);
    pf_close(&w);
}

KILN_TEST(export, running_out_of_memory_in_a_prefab_load_spawn_or_export_fails_cleanly) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    pf_world w;
    pf_open_on(&w, false, &alloc);
    pf_populate(&w);
    fingerprint f = take(w.world);
    kiln_prefab *p = NULL;
    int64_t n = 0;
    for (;; n++) {
        test_allocator_fail_after(&alloc, n);
        kiln_result r = kiln_prefab_load(w.world, ship_json, sizeof ship_json - 1, NULL, &p);
        test_allocator_fail_never(&alloc);
        if (r == KILN_OK) break;
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ck_assert_ptr_null(p);
    }
    ck_assert_int_gt(n, 2);
    for (n = 0;; n++) {
        kiln_entity roots[2];
        test_allocator_fail_after(&alloc, n);
        kiln_result r = kiln_prefab_spawn(w.world, p, 2, NULL, roots);
        test_allocator_fail_never(&alloc);
        if (r == KILN_OK) break;
        ck_assert_msg(r == KILN_ERR_OUT_OF_MEMORY, "%s", kiln_world_error(w.world));
        assert_same(w.world, f, kiln_world_error(w.world));
    }
    for (n = 0;; n++) {
        pf_bytes out = {0};
        test_allocator_fail_after(&alloc, n);
        kiln_result r = kiln_export(w.world, NULL, pf_bytes_write, &out);
        test_allocator_fail_never(&alloc);
        pf_bytes_free(&out);
        if (r == KILN_OK) break;
        ck_assert_msg(r == KILN_ERR_OUT_OF_MEMORY, "%s", kiln_world_error(w.world));
    }
    ck_assert_int_gt(n, 2);
    kiln_prefab_destroy(p);
    pf_close(&w);
    ck_assert_int_eq(alloc.live_bytes, 0);
}
/* Counts past the row limit fail before the first copy: the world, its entity slots and its
 * bytes as they were (the count used to be found out 2^27 spawns in, then taken back). */
KILN_TEST(prefab, a_count_past_the_row_limit_is_refused_before_anything_is_spawned) {
    pf_world w;
    pf_open(&w, false);
    pf_pos at = {1, 2, 3};
    kiln_component comps[] = {w.pos};
    const void *vals[] = {&at};
    kiln_prefab_desc twins[2] = {{.components = comps, .values = vals, .component_count = 1},
                                 {.components = comps, .values = vals, .component_count = 1}};
    kiln_prefab_desc one = {.components = comps, .values = vals, .component_count = 1};
    kiln_prefab_desc pair = {.components = &w.tag, .component_count = 1, .children = twins, .child_count = 2};
    kiln_prefab *single, *family;
    ck_assert_int_eq(kiln_prefab_create(w.world, &one, &single), KILN_OK);
    ck_assert_int_eq(kiln_prefab_create(w.world, &pair, &family), KILN_OK);
    kiln_entity first;
    ck_assert_int_eq(kiln_prefab_spawn(w.world, single, 1, NULL, &first), KILN_OK);
    fingerprint f = take(w.world);
    kiln_world_stats before, after;
    kiln_world_stats_get(w.world, &before);
    ck_assert_int_eq(kiln_prefab_spawn(w.world, single, INT32_MAX, NULL, NULL), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(w.world),
                     "kiln_prefab_spawn: 2147483647 copies put 2147483647 entities in one archetype, which "
                     "holds 1 and has room for 134217728; nothing was spawned");
    /* 2^26 + 1 copies fit one per archetype but not the two alike children of each */
    ck_assert_int_eq(kiln_prefab_spawn(w.world, family, (1 << 26) + 1, NULL, NULL), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(w.world),
                     "kiln_prefab_spawn: 67108865 copies put 134217730 entities in one archetype, which "
                     "holds 0 and has room for 134217728; nothing was spawned");
    assert_same(w.world, f, "refused counts");
    kiln_world_stats_get(w.world, &after);
    ck_assert_int_eq(after.entity_slots, before.entity_slots);
    ck_assert_msg(after.bytes - before.bytes < (1 << 20), "a refused count allocated %lld bytes",
                  (long long)(after.bytes - before.bytes));
    ck_assert_int_eq(kiln_prefab_spawn(w.world, family, 2, NULL, NULL), KILN_OK); /* and a count that fits */
    ck_assert_int_eq(kiln_entity_count(w.world), 1 + 6);
    kiln_prefab_destroy(single);
    kiln_prefab_destroy(family);
    pf_close(&w);
}

KILN_TEST(scene, instantiate_and_spawn_refuse_a_deferred_world_changing_nothing) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    kiln_prefab *ship;
    ck_assert_int_eq(kiln_prefab_load(w.world, ship_json, sizeof ship_json - 1, NULL, &ship), KILN_OK);
    fingerprint f = take(w.world);
    kiln_defer_begin(w.world);
    static const char doc[] = ENTS("{}");
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_instantiate(w.world, doc, sizeof doc - 1, NULL, &inst), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w.world), "kiln_instantiate: the world is deferred or iterating");
    ck_assert_int_eq(kiln_prefab_spawn(w.world, ship, 1, NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_defer_end(w.world), KILN_OK);
    assert_same(w.world, f, "deferred");
    kiln_prefab_destroy(ship);
    pf_close(&w);
}

KILN_TEST(scene, a_prefab_of_another_world_is_refused_by_name) {
    pf_world w, other;
    pf_open(&w, false);
    pf_open(&other, false);
    kiln_prefab *ship;
    ck_assert_int_eq(kiln_prefab_load(other.world, ship_json, sizeof ship_json - 1, NULL, &ship), KILN_OK);
    const char *names[] = {"ship"};
    const kiln_prefab *prefabs[] = {ship};
    kiln_instantiate_desc d = {.prefab_names = names, .prefabs = prefabs, .prefab_count = 1};
    static const char doc[] = ENTS("{\"prefab\": \"ship\"}");
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_instantiate(w.world, doc, sizeof doc - 1, &d, &inst), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w.world),
                     "kiln_instantiate: at entities[0].prefab: prefab 'ship' was made for another world (or is NULL)");
    ck_assert_int_eq(kiln_instantiate_file(w.world, "/no/such/scene.json", &d, &inst), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w.world),
                     "kiln_instantiate_file: cannot open /no/such/scene.json: No such file or directory");
    ck_assert_int_eq(kiln_entity_count(w.world), 0);
    kiln_prefab_destroy(ship);
    pf_close(&other);
    pf_close(&w);
}
