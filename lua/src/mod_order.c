/* mod_order.c: whether a reload's systems, put in place of the running version's, leave the
 * schedule's before/after free of cycles. The schedule checks each replace against the systems
 * as they are, the others of the old version among them, so a new version turning its own
 * order around met its old self in a cycle; and a replace refused part way had replaced the
 * old version's first ones for good. The whole new order is checked first, on a scratch
 * schedule of the same world with the same names and constraints, which the core refuses as
 * it would refuse the real one. */
#include <stdio.h>
#include <string.h>

#include "mods.h"

static void order_only(const kiln_system_ctx *ctx) { (void)ctx; }

/* The staged system of mod replacing name, or NULL. */
static klua_mod_staged *replacing(klua_mod *mod, const char *name) {
    for (int i = 0; i < mod->staged_count; i++)
        if (mod->staged[i].replace && strcmp(mod->staged[i].name, name) == 0) return &mod->staged[i];
    return NULL;
}

bool klua_mod_order_check(klua_mod *mod) {
    kiln_schedule *sched = mod->kw->schedule;
    kiln_world *world = mod->kw->world;
    kiln_schedule *scratch = kiln_schedule_create(world, NULL);
    if (!scratch) {
        snprintf(mod->error, sizeof mod->error, "not enough memory");
        return false;
    }
    bool ok = true;
    int32_t n = kiln_schedule_system_count(sched);
    for (int32_t i = 0; i < n && ok; i++) {
        kiln_system_info info;
        if (!kiln_schedule_system_info_get(sched, i, &info) || info.removing) continue;
        kiln_system_desc d = {.name = info.name, .run = order_only};
        klua_mod_staged *st = replacing(mod, info.name);
        if (!st && mod->previous && klua_mod_runs(mod->previous, info.name)) continue; /* leaves */
        for (int k = 0; k < KILN_SYSTEM_MAX_ORDER; k++) {
            d.before[k] = st ? (st->before[k][0] ? st->before[k] : NULL) : k < info.before_count ? info.before[k] : NULL;
            d.after[k] = st ? (st->after[k][0] ? st->after[k] : NULL) : k < info.after_count ? info.after[k] : NULL;
        }
        if (kiln_schedule_add(scratch, &d) == KILN_OK) continue;
        /* named after the mod's system in the cycle (the add closing it may be another's) */
        const char *detail = klua_core_detail(kiln_world_error(world)), *who = st ? st->name : NULL;
        for (int s = 0; s < mod->staged_count && !who; s++) {
            char quoted[KILN_MAX_NAME + 3];
            snprintf(quoted, sizeof quoted, "'%s'", mod->staged[s].name);
            if (mod->staged[s].replace && strstr(detail, quoted)) who = mod->staged[s].name;
        }
        if (who) snprintf(mod->error, sizeof mod->error, "its system '%s' was refused: %s", who, detail);
        else snprintf(mod->error, sizeof mod->error, "its systems' order was refused: %s", detail);
        ok = false;
    }
    kiln_schedule_destroy(scratch);
    return ok;
}
