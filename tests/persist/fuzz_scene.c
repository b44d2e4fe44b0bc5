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

#include "fuzz_world.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    kiln_world *w = fuzz_open_world();
    uint64_t before = kiln_world_hash(w);
    int64_t count = kiln_entity_count(w);
#ifdef FUZZ_PREFAB
    kiln_prefab *p = NULL;
    kiln_result r = kiln_prefab_load(w, data, size, NULL, &p);
    if (r != KILN_OK) {
        if (p || strncmp(kiln_world_error(w), "kiln_prefab_load: ", 18) != 0) abort();
    } else {
        kiln_entity roots[2];
        if (kiln_prefab_spawn(w, p, 2, NULL, roots) == KILN_OK) kiln_transform_propagate(w, NULL);
        else if (kiln_world_hash(w) != before || kiln_entity_count(w) != count) abort();
        kiln_prefab_destroy(p);
    }
#else
    kiln_prefab *p = NULL;
    if (kiln_prefab_load(w, ship, sizeof ship - 1, NULL, &p) != KILN_OK) abort();
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
            kiln_world *again = fuzz_open_world();
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
