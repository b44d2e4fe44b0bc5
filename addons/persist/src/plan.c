/* plan.c: what a save holds and in which order: the schemas it uses sorted by name, the
 * non-empty archetypes by id, the set resources. Invariant: the order depends only on
 * names and content, never on component ids, so a world built in another order saves alike. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist_internal.h"

static bool excluded(const kiln_save_desc *desc, kiln_component c) {
    for (int i = 0; i < KILN_PERSIST_MAX_EXCLUDE && desc->exclude[i]; i++)
        if (desc->exclude[i] == c) return true;
    return false;
}

static int by_name(const void *a, const void *b) {
    const kiln_component_info *x = a, *y = b;
    return strcmp(x->name, y->name);
}

static kiln_result oom(kiln_world *world, pz_plan *plan, const char *call) {
    pz_plan_free(plan);
    return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
}

/* Marks the components the save needs; returns how many. */
static int32_t mark_used(kiln_world *world, const kiln_save_desc *desc, uint8_t *used) {
    int32_t n = 0;
    for (int32_t a = 0; a < world->archetype_count; a++) {
        const kl_archetype *arch = world->archetypes[a];
        if (arch->count == 0) continue;
        for (int32_t t = 0; t < arch->type_count; t++) {
            kiln_component c = arch->types[t];
            if (!used[c] && !excluded(desc, c)) used[c] = 1, n++;
        }
    }
    int32_t count = kiln_component_count(world);
    for (kiln_component c = 1; c <= (kiln_component)count; c++)
        if (!used[c] && !excluded(desc, c) && kiln_resource_has(world, c)) used[c] = 1, n++;
    return n;
}

/* The first live entity holding c, for a message. */
static kiln_entity holder(const pz_plan *plan, kiln_component c) {
    for (int32_t g = 0; g < plan->group_count; g++)
        if (kl_archetype_type_index(plan->groups[g], c) >= 0) return plan->groups[g]->entities[0];
    return KILN_NULL_ENTITY;
}

kiln_result pz_plan_build(kiln_world *world, const kiln_save_desc *desc, pz_plan *plan,
                          const char *call) {
    memset(plan, 0, sizeof *plan);
    plan->arena.alloc = &world->alloc;
    int32_t ccount = kiln_component_count(world);
    uint8_t *used = pz_alloc(&plan->arena, (size_t)ccount + 1);
    plan->index_of = pz_alloc(&plan->arena, sizeof(uint32_t) * ((size_t)ccount + 1));
    plan->groups = pz_alloc(&plan->arena, sizeof(kl_archetype *) * ((size_t)world->archetype_count + 1));
    if (!used || !plan->index_of || !plan->groups) return oom(world, plan, call);
    int32_t n = mark_used(world, desc, used);
    plan->count = n;
    plan->order = pz_alloc(&plan->arena, sizeof(kiln_component) * ((size_t)n + 1));
    plan->info = pz_alloc(&plan->arena, sizeof(kiln_component_info) * ((size_t)n + 1));
    plan->codec = pz_alloc(&plan->arena, (size_t)n + 1);
    plan->resources = pz_alloc(&plan->arena, sizeof(int32_t) * ((size_t)n + 1));
    if (!plan->order || !plan->info || !plan->codec || !plan->resources) return oom(world, plan, call);
    int32_t k = 0;
    for (kiln_component c = 1; c <= (kiln_component)ccount; c++)
        if (used[c]) kiln_component_info_get(world, c, &plan->info[k++]);
    qsort(plan->info, (size_t)n, sizeof *plan->info, by_name);
    for (int32_t i = 0; i < n; i++) {
        plan->order[i] = plan->info[i].id;
        plan->index_of[plan->info[i].id] = (uint32_t)i + 1;
        plan->codec[i] = plan->info[i].size > 0 && (plan->info[i].has_destroy || plan->info[i].has_move);
    }
    for (int32_t a = 0; a < world->archetype_count; a++)
        if (world->archetypes[a]->count > 0) plan->groups[plan->group_count++] = world->archetypes[a];
    int32_t max_types = 1;
    for (int32_t g = 0; g < plan->group_count; g++)
        if (plan->groups[g]->type_count > max_types) max_types = plan->groups[g]->type_count;
    plan->max_types = max_types;
    plan->group_types = pz_alloc(&plan->arena, sizeof(int32_t) * (size_t)max_types * ((size_t)plan->group_count + 1));
    plan->group_type_count = pz_alloc(&plan->arena, sizeof(int32_t) * ((size_t)plan->group_count + 1));
    if (!plan->group_types || !plan->group_type_count) return oom(world, plan, call);
    for (int32_t g = 0; g < plan->group_count; g++) {
        const kl_archetype *arch = plan->groups[g];
        int32_t *types = plan->group_types + (size_t)g * (size_t)max_types, m = 0;
        for (int32_t t = 0; t < arch->type_count; t++) {
            uint32_t idx = plan->index_of[arch->types[t]];
            if (!idx) continue;
            /* insertion keeps them ascending by schema index (by name) */
            int32_t j = m++;
            while (j > 0 && types[j - 1] > (int32_t)idx - 1) types[j] = types[j - 1], j--;
            types[j] = (int32_t)idx - 1;
        }
        plan->group_type_count[g] = m;
    }
    for (int32_t i = 0; i < n; i++)
        if (kiln_resource_has(world, plan->order[i])) plan->resources[plan->resource_count++] = i;
    for (int32_t i = 0; i < n && !desc->codec; i++) {
        if (!plan->codec[i]) continue;
        kiln_entity e = holder(plan, plan->order[i]);
        char buf[24];
        kiln_result r;
        if (e)
            r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                        "%s: entity %s component '%s' has hooks (it owns something) and no codec "
                        "was given to save it", call, kiln_entity_format(e, buf, sizeof buf),
                        plan->info[i].name);
        else
            r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                        "%s: resource '%s' has hooks (it owns something) and no codec was given "
                        "to save it", call, plan->info[i].name);
        pz_plan_free(plan);
        return r;
    }
    return KILN_OK;
}

void pz_plan_free(pz_plan *plan) { pz_arena_free(&plan->arena); }

kiln_result pz_encode(kiln_world *world, const kiln_save_desc *desc, kiln_component c,
                      kiln_entity e, const void *value, pz_bytes *bytes, const char *call) {
    char why[160] = "";
    bytes->size = 0;
    kiln_result r = desc->codec->encode(desc->codec->ud, c, e, value, pz_bytes_write, bytes, why,
                                        sizeof why);
    if (r == KILN_OK && bytes->failed) r = KILN_ERR_OUT_OF_MEMORY, snprintf(why, sizeof why, "out of memory");
    if (r == KILN_OK && bytes->size > UINT32_MAX)
        r = KILN_ERR_LIMIT, snprintf(why, sizeof why, "encoded value over 4 GiB");
    if (r == KILN_OK) return KILN_OK;
    kiln_component_info info;
    kiln_component_info_get(world, c, &info);
    char buf[24];
    if (e)
        return kl_fail(world, r, "%s: entity %s component '%s': %s", call,
                       kiln_entity_format(e, buf, sizeof buf), info.name, why[0] ? why : "refused");
    return kl_fail(world, r, "%s: resource '%s': %s", call, info.name, why[0] ? why : "refused");
}

bool pz_has_entity_fields(const kiln_component_info *info) {
    for (int32_t f = 0; f < info->field_count; f++)
        if (info->fields[f].type == KILN_TYPE_ENTITY) return true;
    return false;
}

void pz_null_dead(const kiln_world *world, const kiln_component_info *info, uint8_t *value) {
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        if (fd->type != KILN_TYPE_ENTITY) continue;
        for (uint32_t k = 0; k < (fd->count ? fd->count : 1); k++) {
            kiln_entity e;
            memcpy(&e, value + fd->offset + 8 * (size_t)k, 8);
            if (e && !kl_record_of(world, e)) memset(value + fd->offset + 8 * (size_t)k, 0, 8);
        }
    }
}
