/* fuzz_load.c: a libFuzzer harness for one loader (FUZZ_JSON picks JSON, else binary): every
 * input either loads or is refused with a message, and a refused one leaves the world as it was. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"

#include "fuzz_world.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    kiln_world *w = fuzz_open_world();
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
