/* pending.c: the addon's own components (Name, RandomSeed, RandomState) a load registers when
 * the world lacks them. Invariant: they are registered last, once everything else landed and
 * passed its checks, so a load refused for its input leaves the registry as it was. */
#include <stdio.h>
#include <string.h>

#include "access.h"
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

/* land_group's way when the group's entities are no longer where they landed (a check hook of
 * the load's values changed the world): one kiln_add per entity and component, each asking the
 * check hook. */
static kiln_result add_each(kiln_world *world, pz_doc *doc, const pz_group *gr) {
    kiln_result r = KILN_OK;
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
    return r;
}

/* The group's entities, where they landed (spawned together: consecutive rows of one
 * archetype), move to the archetype with the pending components too, in one run per column
 * (kl_archetype_move_rows), and the file's values of those are written into the new rows. No
 * check hook is asked: the values passed theirs (check_values, pz_names_check_file) and no live
 * entity holds a component the world lacked. Fails, naming kiln_load, only for want of memory
 * or at an archetype limit, before anything moved (or as add_each does). */
static kiln_result land_group(kiln_world *world, pz_doc *doc, const pz_group *gr) {
    const kl_record *rec = kl_record_of(world, gr->spawned[0]);
    kl_archetype *src = rec ? world->archetypes[kl_record_archetype(rec)] : NULL;
    int32_t first = rec ? (int32_t)kl_record_row(rec) : 0, count = (int32_t)gr->count;
    if (!src || first + count > src->count ||
        memcmp(src->entities + first, gr->spawned, sizeof(kiln_entity) * (size_t)count) != 0)
        return add_each(world, doc, gr); /* a check hook changed the world meanwhile */
    int32_t n = src->type_count;
    kiln_component *types = pz_alloc_raw(&doc->arena, sizeof(kiln_component) * ((size_t)n + (size_t)gr->type_count));
    if (!types) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    memcpy(types, src->types, sizeof(kiln_component) * (size_t)n);
    for (int32_t t = 0; t < gr->type_count; t++) { /* sorted in: ids above src's come last */
        kiln_component id = doc->schemas[gr->types[t]].id;
        if (!doc->schemas[gr->types[t]].pending) continue;
        int32_t at = n++;
        for (; at > 0 && types[at - 1] > id; at--) types[at] = types[at - 1];
        types[at] = id;
    }
    kl_archetype *dst = kl_archetype_ensure(world, types, n, "kiln_load");
    if (!dst) return kl_archetype_failure(world, n);
    if (!kl_archetype_reserve(world, dst, count)) return kl_fail_no_room(world, "kiln_load", dst, count);
    int32_t row = kl_archetype_move_rows(world, src, first, count, dst);
    kiln_row_tick stamp = kl_row_tick_now(world);
    for (int32_t t = 0; t < gr->type_count; t++) {
        const pz_schema *s = &doc->schemas[gr->types[t]];
        kl_column *col = s->pending ? kl_archetype_column(dst, s->id) : NULL;
        if (!col) continue; /* not pending, or a tag */
        for (int32_t r = 0; r < count; r++) {
            uint8_t *v = col->data + (size_t)(row + r) * col->stride;
            const uint8_t *from = gr->values[t] + (size_t)r * s->size;
            memset(v, 0, col->stride);
            if (s->same) memcpy(v, from, s->info.size);
            else pz_convert_row(s, from, v);
        }
        kl_fill_row_ticks(col->ticks, row, (int64_t)row + count, stamp);
        kl_column_touch_appended(col, world->tick);
    }
    return KILN_OK;
}

/* Registers the pending components, then gives the loaded entities their
 * values (land_group) and makes their resources, noted
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
        bool pending = false;
        for (int32_t t = 0; t < gr->type_count; t++) pending |= doc->schemas[gr->types[t]].pending;
        if (pending && gr->count) r = land_group(world, doc, gr);
    }
    return r;
}
