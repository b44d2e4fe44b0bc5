/* fuzz_scene.c: a libFuzzer harness for the prefab loader (FUZZ_PREFAB) or the scene loader:
 * every input is refused with a message and the world as it was, or lands whole; a landed scene
 * exports to a document that instantiates again in a fresh world. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void reg(kiln_world *w, const char *name, size_t size, const kiln_field *f, int32_t n) {
    kiln_component id = 0;
    kiln_component_desc d = {.name = name, .size = size, .fields = f, .field_count = n};
    if (kiln_component_register(w, &d, &id) != KILN_OK) abort();
}

/* The components of the seed corpus in tests/persist/corpus/{prefab,scene}. */
static kiln_world *open_world(void) {
    static const kiln_field xy[] = {{"x", KILN_TYPE_FLOAT, 0, 0}, {"y", KILN_TYPE_FLOAT, 4, 0}};
    static const kiln_field health[] = {{"hp", KILN_TYPE_INT32, 0, 0}, {"max", KILN_TYPE_INT32, 4, 0}};
    static const kiln_field link[] = {{"target", KILN_TYPE_ENTITY, 0, 0}, {"pair", KILN_TYPE_ENTITY, 8, 2}};
    kiln_world *w = kiln_world_create(NULL);
    reg(w, "Position", 8, xy, 2);
    reg(w, "Velocity", 8, xy, 2);
    reg(w, "Health", 8, health, 2);
    reg(w, "Frozen", 0, NULL, 0);
    reg(w, "Link", 24, link, 2);
    if (kiln_transform_init(w, NULL) != KILN_OK) abort();
    kiln_entity e;
    kiln_spawn(w, &e);
    return w;
}

static const char ship[] = "{\"components\": {\"Position\": {\"x\": 1}}, \"children\": "
                           "[{\"components\": {\"Link\": {\"target\": 1}}}]}";

typedef struct text {
    char *data;
    size_t size;
} text;

static bool append(void *ud, const void *data, size_t size) {
    text *t = ud;
    char *p = realloc(t->data, t->size + size);
    if (!p) return false;
    memcpy(p + t->size, data, size);
    t->data = p;
    t->size += size;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_world *w = open_world();
    uint64_t before = kiln_world_hash(w);
    int64_t count = kiln_entity_count(w);
#ifdef FUZZ_PREFAB
    kiln_prefab *p = NULL;
    kiln_result r = kiln_prefab_load(w, data, size, &p);
    if (r != KILN_OK) {
        if (p || strncmp(kiln_world_error(w), "kiln_prefab_load: ", 18) != 0) abort();
    } else {
        kiln_entity roots[2];
        if (kiln_prefab_spawn(w, p, 2, roots) == KILN_OK) kiln_transform_propagate(w, NULL);
        else if (kiln_world_hash(w) != before || kiln_entity_count(w) != count) abort();
        kiln_prefab_destroy(p);
    }
#else
    kiln_prefab *p = NULL;
    if (kiln_prefab_load(w, ship, sizeof ship - 1, &p) != KILN_OK) abort();
    const char *names[] = {"ship"};
    const kiln_prefab *prefabs[] = {p};
    kiln_instantiate_desc d = {.prefab_names = names, .prefabs = prefabs, .prefab_count = 1};
    kiln_instance *inst = NULL;
    kiln_result r = kiln_instantiate(w, data, size, &d, &inst);
    if (r != KILN_OK) {
        if (inst || strncmp(kiln_world_error(w), "kiln_instantiate: ", 18) != 0) abort();
        if (kiln_world_hash(w) != before || kiln_entity_count(w) != count) abort();
    } else {
        kiln_transform_propagate(w, NULL);
        int64_t n = kiln_instance_roots(inst, NULL, 0);
        kiln_entity *roots = calloc((size_t)n + 1, sizeof *roots);
        kiln_instance_roots(inst, roots, n);
        if (n > 0) { /* no roots would export every parentless entity of the world */
            kiln_export_desc e = {.roots = roots, .root_count = (int32_t)n};
            text out = {NULL, 0};
            if (kiln_export(w, &e, append, &out) != KILN_OK) abort();
            kiln_world *again = open_world();
            kiln_instance *copy = NULL;
            if (kiln_instantiate(again, out.data, out.size, NULL, &copy) != KILN_OK) abort();
            if (kiln_instance_spawned(copy, NULL, 0) != kiln_instance_spawned(inst, NULL, 0)) abort();
            kiln_instance_destroy(copy);
            kiln_world_destroy(again);
            free(out.data);
        }
        free(roots);
        if (kiln_instance_despawn(w, inst) != KILN_OK || kiln_entity_count(w) != count) abort();
        kiln_instance_destroy(inst);
    }
    kiln_prefab_destroy(p);
#endif
    kiln_world_destroy(w);
    return 0;
}
