/* links.c: placeholders inside values. A value's entity fields are found through its
 * component's reflection; components without any (entity_slots 0) never come here. */
#include "links.h"

#include <stdio.h>
#include <string.h>

bool kl_links_resolve(const kl_component *comp, void *value, kl_link_fn find, const void *ctx,
                      char *why, size_t why_size) {
    uint8_t *v = value;
    for (int pass = 0; pass < 2; pass++) { /* check every slot, then write */
        for (int32_t f = 0; f < comp->field_count; f++) {
            const kiln_field *field = &comp->fields[f];
            if (field->type != KILN_TYPE_ENTITY) continue;
            for (uint32_t k = 0; k < field->count; k++) {
                uint8_t *slot = v + field->offset + (size_t)k * sizeof(kiln_entity);
                kiln_entity e;
                memcpy(&e, slot, sizeof e);
                if (!kiln_is_placeholder(e)) continue;
                kl_link_state state = KL_LINK_FOREIGN;
                kiln_entity to = find(ctx, e, &state);
                if (pass == 1) {
                    memcpy(slot, &to, sizeof to);
                    continue;
                }
                if (to != KILN_NULL_ENTITY) continue;
                if (!why) return false;
                char name[KILN_MAX_NAME + 16];
                if (field->count > 1) snprintf(name, sizeof name, "%s[%u]", field->name, (unsigned)k);
                else snprintf(name, sizeof name, "%s", field->name);
                unsigned index = (unsigned)(e & ((UINT64_C(1) << 24) - 1));
                if (state == KL_LINK_PENDING)
                    snprintf(why, why_size,
                             "field '%s' holds placeholder %u whose spawn comes later in the buffer",
                             name, index);
                else if (state == KL_LINK_GONE)
                    snprintf(why, why_size, "field '%s' holds placeholder %u, whose spawn did not land",
                             name, index);
                else
                    snprintf(why, why_size,
                             "field '%s' holds placeholder %u, which is not from this buffer's "
                             "current batch", name, index);
                return false;
            }
        }
    }
    return true;
}
