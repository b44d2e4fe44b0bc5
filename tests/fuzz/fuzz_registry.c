/* fuzz_registry.c: component and event registration while the world is in use: fresh types,
 * the same desc again (same id), conflicting layouts and malformed descs (refused, no trace). */
#include <stdio.h>
#include <string.h>

#include "fuzz_ops.h"

#define FRESH_MAX 24

static void check_count(fz_ctx *c, int32_t want) {
    if (kiln_component_count(c->w) != want)
        fuzz_fail(c, "kiln_component_count is %d, the model %d", kiln_component_count(c->w), want);
}

void fuzz_op_register(fz_ctx *c, uint8_t sub) {
    c->op_name = "kiln_component_register";
    int32_t before = kiln_component_count(c->w);
    kiln_component_desc d;
    memset(&d, 0, sizeof d);
    char name[80];
    kiln_result want = KILN_OK;
    kiln_component want_id = 0;
    static const int32_t other_defaults = 3;
    switch (sub % 8) {
    case 0: case 1: /* a fresh type: the next id */
        if (c->fresh == FRESH_MAX) return;
        snprintf(name, sizeof name, "Fresh%d", c->fresh);
        d.name = name;
        d.size = (size_t)(sub >> 3) % 3 * 4;
        want_id = (kiln_component)before + 1;
        break;
    case 2: /* A again, as registered: its id */
        d = (kiln_component_desc){.name = "A", .size = 8};
        want_id = c->id[FZ_A];
        break;
    case 3: /* A with another size */
        d = (kiln_component_desc){.name = "A", .size = 12};
        want = KILN_ERR_LAYOUT_MISMATCH;
        break;
    case 4: /* K with other defaults */
        d = (kiln_component_desc){.name = "K", .size = 4, .defaults = &other_defaults};
        want = KILN_ERR_LAYOUT_MISMATCH;
        break;
    case 5: /* a name too long */
        memset(name, 'n', 64);
        name[64] = '\0';
        d.name = name;
        want = KILN_ERR_INVALID_ARGUMENT;
        break;
    case 6: /* an alignment that is not a power of two */
        d = (kiln_component_desc){.name = "Odd", .size = 6, .align = 3};
        want = KILN_ERR_INVALID_ARGUMENT;
        break;
    default: /* a tag with defaults */
        d = (kiln_component_desc){.name = "BadTag", .defaults = &other_defaults};
        want = KILN_ERR_INVALID_ARGUMENT;
        break;
    }
    int64_t f0 = fuzz_alloc_failures();
    kiln_component id = 0;
    kiln_result r = kiln_component_register(c->w, &d, &id);
    if (fz_oom_ok(c, r, f0)) {
        check_count(c, before);
        if (kiln_component_lookup(c->w, d.name) != KILN_NO_COMPONENT && want_id == (kiln_component)before + 1)
            fuzz_fail(c, "a failed registration left its name behind");
        return;
    }
    fz_expect(c, r, want, "kiln_component_register");
    if (r != KILN_OK) {
        check_count(c, before);
        return;
    }
    if (id != want_id) fuzz_fail(c, "kiln_component_register gave id %u, the model %u", id, want_id);
    if (want_id == (kiln_component)before + 1) c->fresh++;
    check_count(c, before + (want_id == (kiln_component)before + 1));
    if (kiln_component_lookup(c->w, d.name) != id) fuzz_fail(c, "kiln_component_lookup disagrees");
}

void fuzz_op_event_register(fz_ctx *c, uint8_t sub) {
    c->op_name = "kiln_event_register";
    kiln_component_desc d = {.name = "E", .size = 8};
    static const int32_t e_defaults[2] = {5, 6};
    kiln_result want = KILN_OK;
    if (sub & 1) d.defaults = e_defaults;
    if (sub & 2) {
        d.size = 4;
        want = KILN_ERR_LAYOUT_MISMATCH;
    }
    kiln_event_type t = {0};
    kiln_result r = kiln_event_register(c->w, &d, &t);
    fz_expect(c, r, want, "kiln_event_register");
    if (r == KILN_OK && t.id != c->ev.id) fuzz_fail(c, "the event type registered again got another id");
}
