/* component.h: the component registry of a world (types, layouts, hooks, reflection).
 * Ids are dense from 1 and never reused; a record never moves once registered. */
#ifndef KILN_COMPONENT_H
#define KILN_COMPONENT_H

#include "world.h"

/* Frees every component record (at world destroy). */
KL_HIDDEN void kl_components_free(kiln_world *world);

/* "Position", or "component #N" for an id that is not registered: for error messages. */
KL_HIDDEN const char *kl_component_name(const kiln_world *world, kiln_component id, char *buf,
                                        size_t size);

#endif
