/* fuzz_load.c: a libFuzzer harness for one loader (FUZZ_JSON picks JSON, else binary): every
 * input either loads or is refused with a message, and a refused one leaves the world as it was. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kiln_component reg(kiln_world *w, const char *name, size_t size, const kiln_field *f, int32_t n) {
    kiln_component id = 0;
    kiln_component_desc d = {.name = name, .size = size, .fields = f, .field_count = n};
    if (kiln_component_register(w, &d, &id) != KILN_OK) abort();
    return id;
}

/* The components tests/persist/make_corpus.lua saves (the Lua specs' usual world plus Link). */
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
    kiln_spawn(w, &e); /* a used world: loads remap */
    return w;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* Steer every input to the loader under test. */
    uint8_t *buf = malloc(size + 8);
    if (!buf) return 0;
#ifdef FUZZ_JSON
    size_t lead = size > 0 && data[0] == '{' ? 0 : 1;
    buf[0] = '{';
    memcpy(buf + lead, data, size);
    size_t n = size + lead;
#else
    memcpy(buf, "KILNSAVE", 8);
    size_t n = size > 8 ? size : 8;
    if (size > 8) memcpy(buf + 8, data + 8, size - 8);
#endif
    kiln_world *w = open_world();
    uint64_t before = kiln_world_hash(w);
    int64_t count = kiln_entity_count(w);
    kiln_load_desc d = {.skip_unknown = size % 2 == 1};
    kiln_result r = kiln_load(w, buf, n, &d);
    if (r != KILN_OK) {
        if (strncmp(kiln_world_error(w), "kiln_load: ", 11) != 0) abort();
        if (kiln_world_hash(w) != before || kiln_entity_count(w) != count) abort();
    } else {
        (void)kiln_world_hash(w);
        kiln_transform_propagate(w, NULL); /* loaded Parent links must be safe to walk */
    }
    kiln_world_destroy(w);
    free(buf);
    return 0;
}
