/* resource.h: the resource table as the world's teardown and addons' bookkeeping use it. A
 * resource is a world-wide singleton stored per component id. */
#ifndef KILN_RESOURCE_H
#define KILN_RESOURCE_H

#include "world.h"

/* Frees every resource, running destroy hooks (at world destroy; components still live). */
KL_HIDDEN void kl_resources_free(kiln_world *world);

/* kiln_resource_get without the declared-access check: for an addon reading its own
 * bookkeeping on a system's behalf (the random seed), which the system never declares. */
KL_HIDDEN void *kl_resource_peek(const kiln_world *world, kiln_component type);

/* kiln_resource_set without the check hook: for a load or a snapshot restore putting back
 * values it checked itself, or the world held (a placeholder a load overwrites before it returns). */
KL_HIDDEN kiln_result kl_resource_put(kiln_world *world, kiln_component type, const void *value);

/* Debug builds (KILN_ACCESS_CHECKS) keep the value of a resource removed while a schedule
 * runs, filled with a poison byte, until the end of the outermost run after the one that
 * removed it, so a write through a pointer kiln_resource_get handed out before the removal
 * is caught. graves_check fails loudly (naming the resource and system, the system that just
 * ran) when a kept value is no longer all poison; graves_age (at the end of an outermost run)
 * checks, then frees those kept long enough. Release builds keep nothing. */
KL_HIDDEN void kl_resource_graves_check(kiln_world *world, const char *system);
KL_HIDDEN void kl_resource_graves_age(kiln_world *world);

#endif
