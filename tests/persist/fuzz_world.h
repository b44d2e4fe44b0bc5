/* fuzz_world.h: the world both loader fuzzers load into: the components of the seed corpus
 * in tests/persist/corpus (tests/persist/make_corpus.lua writes the binary and JSON seeds). */
#ifndef KILN_FUZZ_WORLD_H
#define KILN_FUZZ_WORLD_H

#include <stdlib.h>

#include "kiln.h"
#include "kiln_transform.h"

static void fuzz_register(kiln_world *w, const char *name, size_t size, const kiln_field *f, int32_t n) {
    kiln_component id = 0;
    kiln_component_desc d = {.name = name, .size = size, .fields = f, .field_count = n};
    if (kiln_component_register(w, &d, &id) != KILN_OK) abort();
}

/* A fresh world with the corpus' components and one entity already spawned (loads remap). */
static kiln_world *fuzz_open_world(void) {
    static const kiln_field xy[] = {{"x", KILN_TYPE_FLOAT, 0, 0}, {"y", KILN_TYPE_FLOAT, 4, 0}};
    static const kiln_field health[] = {{"hp", KILN_TYPE_INT32, 0, 0}, {"max", KILN_TYPE_INT32, 4, 0}};
    static const kiln_field link[] = {{"target", KILN_TYPE_ENTITY, 0, 0}, {"pair", KILN_TYPE_ENTITY, 8, 2}};
    kiln_world *w = kiln_world_create(NULL);
    if (!w) abort();
    fuzz_register(w, "Position", 8, xy, 2);
    fuzz_register(w, "Velocity", 8, xy, 2);
    fuzz_register(w, "Health", 8, health, 2);
    fuzz_register(w, "Frozen", 0, NULL, 0);
    fuzz_register(w, "Link", 24, link, 2);
    if (kiln_transform_init(w, NULL) != KILN_OK) abort();
    kiln_entity e;
    kiln_spawn(w, &e);
    return w;
}

#endif
