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

#endif
