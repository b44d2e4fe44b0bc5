/* resource.h: the resource table as the world's teardown uses it. A resource is a world-wide
 * singleton stored per component id; only world.c reaches in from outside resource.c. */
#ifndef KILN_RESOURCE_H
#define KILN_RESOURCE_H

#include "world.h"

/* Frees every resource, running destroy hooks (at world destroy; components still live). */
KL_HIDDEN void kl_resources_free(kiln_world *world);

#endif
