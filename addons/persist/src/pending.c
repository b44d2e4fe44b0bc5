/* pending.c: the addon's own components (Name, RandomSeed, RandomState) a load registers when
 * the world lacks them. Invariant: they are registered last, once everything else landed and
 * passed its checks, so a load refused for its input leaves the registry as it was. */
#include <stdio.h>
#include <string.h>

#include "persist_internal.h"
#include "resource.h"

bool pz_addon_component(const char *name) {
    return strcmp(name, "Name") == 0 || strcmp(name, "RandomSeed") == 0 || strcmp(name, "RandomState") == 0;
}

/* Checks an addon component the world lacks against the layout it would be registered with,
 * so a save of another layout is refused with nothing registered. */
kiln_result pz_pending_match(kiln_world *world, pz_schema *s, const kiln_load_desc *desc) {
    if (strcmp(s->name, "Name") == 0) pz_names_layout(&s->info);
    else pz_random_layout(s->name, &s->info);
    return pz_match_info(world, s, desc);
}

/* Registers the addon components resolve left pending (their layouts matched), once
 * everything else of the load has landed and passed its checks (pz_pending_land): a refused
 * load registers nothing, since the core never takes a registration back (archetypes made
 * for it stay in the graph naming its id, and other threads read the registry without a
 * lock). Only running out of memory (or an archetype limit) after this leaves them
 * registered, with no entity and no value. */
static kiln_result register_pending(kiln_world *world, pz_doc *doc, const kiln_load_desc *desc) {
    for (uint32_t i = 0; i < doc->schema_count; i++) {
        pz_schema *s = &doc->schemas[i];
        if (!s->pending) continue; /* (it stays set: pz_pending_land adds its values) */
        if (strcmp(s->name, "Name") == 0 ? kiln_name_init(world, &s->id) != KILN_OK
                                         : !(s->id = pz_random_register(world, s->name)))
            return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
        kiln_component_info_get(world, s->id, &s->info);
        kiln_result r = pz_match_info(world, s, desc);
        if (r != KILN_OK) return r;
    }
    return KILN_OK;
}

/* Registers the pending components, then gives the loaded entities their
 * values (moved to the archetypes with them, in row order) and makes their resources, noted
 * in created for a failure to take back: the last step of a load that can fail, and only for
 * want of memory (their values passed stage_resources, and the names their own check below). */
kiln_result pz_pending_land(kiln_world *world, pz_doc *doc, const kiln_load_desc *desc, kiln_component *created,
                           uint32_t *created_count) {
    bool any = false;
    for (uint32_t i = 0; i < doc->schema_count; i++) any |= doc->schemas[i].pending;
    if (!any) return KILN_OK;
    kiln_result r = KILN_OK;
    for (uint32_t i = 0; i < doc->schema_count && r == KILN_OK; i++)
        if (doc->schemas[i].pending && doc->schemas[i].size && strcmp(doc->schemas[i].name, "Name") == 0)
            r = pz_names_check_file(world, doc, i);
    if (r == KILN_OK) r = register_pending(world, doc, desc);
    for (uint32_t k = 0; k < doc->resource_count && r == KILN_OK; k++) {
        const pz_schema *s = &doc->schemas[doc->resources[k].schema];
        if (!s->pending || kiln_resource_has(world, s->id)) continue;
        kiln_component id = s->id;
        /* a placeholder the file's value replaces (set_resources): unchecked */
        if ((r = kl_resource_put(world, id, NULL)) == KILN_OK) created[(*created_count)++] = id;
        else r = kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    }
    for (uint32_t g = 0; g < doc->group_count && r == KILN_OK; g++) {
        const pz_group *gr = &doc->groups[g];
        for (int32_t t = 0; t < gr->type_count && r == KILN_OK; t++) {
            const pz_schema *s = &doc->schemas[gr->types[t]];
            if (!s->pending) continue;
            uint8_t *v = s->size ? pz_alloc(&doc->arena, s->info.size) : NULL;
            if (s->size && !v) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
            for (int64_t row = 0; row < gr->count && r == KILN_OK; row++) {
                const uint8_t *src = v ? gr->values[t] + (size_t)row * s->size : NULL;
                if (v && s->same) memcpy(v, src, s->info.size);
                else if (v) pz_convert_row(s, src, v);
                if ((r = kiln_add(world, gr->spawned[row], s->id, v)) != KILN_OK) {
                    char why[KL_ERROR_SIZE];
                    snprintf(why, sizeof why, "%s", kiln_world_error(world));
                    const char *detail = strstr(why, ": ");
                    kl_fail(world, r, "kiln_load: %s", detail ? detail + 2 : why);
                }
            }
        }
    }
    return r;
}

