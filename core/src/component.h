/* component.h: the component registry of a world (types, layouts, hooks, reflection).
 * Ids are dense from 1 and never reused; a record never moves once registered. */
#ifndef KILN_COMPONENT_H
#define KILN_COMPONENT_H

#include "world.h"

/* Registers a type in reg (components or event types); call names the API for messages. */
KL_HIDDEN kiln_result kl_registry_add(kiln_world *world, kl_registry *reg,
                                      const kiln_component_desc *desc, uint32_t *dest,
                                      const char *call);

/* The id registered under name in reg, or 0. */
KL_HIDDEN uint32_t kl_registry_lookup(const kl_registry *reg, const char *name);

/* Frees every record of reg (at world destroy). */
KL_HIDDEN void kl_registry_free(kiln_world *world, kl_registry *reg);

/* Fills a kiln_component_info from a record. */
KL_HIDDEN void kl_component_describe(const kl_component *c, kiln_component_info *dest);

/* "Position", or "component #N" for an id that is not registered: for error messages. */
KL_HIDDEN const char *kl_component_name(const kiln_world *world, kiln_component id, char *buf,
                                        size_t size);

/* Frees every resource, running destroy hooks (at world destroy; components still live). */
KL_HIDDEN void kl_resources_free(kiln_world *world);

#endif
