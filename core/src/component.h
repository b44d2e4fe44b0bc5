/* component.h: the component registry of a world (types, layouts, hooks, reflection).
 * Ids are dense from 1 and never reused; a record never moves once registered. */
#ifndef KILN_COMPONENT_H
#define KILN_COMPONENT_H

#include "world.h"

/* Registers a type in reg (components or event types); call names the API for messages. */
KL_HIDDEN kiln_result kl_registry_add(kiln_world *world, kl_registry *reg,
                                      const kiln_component_desc *desc, uint32_t *dest,
                                      const char *call);

/* The id registered under name in reg (a registry of world, whose seed hashes its names),
 * or 0. */
KL_HIDDEN uint32_t kl_registry_lookup(const kiln_world *world, const kl_registry *reg, const char *name);

/* kl_registry_lookup, adding the slots of the name index it read to *slots_read: tests count
 * what names picked to collide cost (a registration walks the same run). */
KL_HIDDEN uint32_t kl_registry_find(const kiln_world *world, const kl_registry *reg, const char *name,
                                    int64_t *slots_read);

/* Frees every record of reg (at world destroy). */
KL_HIDDEN void kl_registry_free(kiln_world *world, kl_registry *reg);

/* Fills a kiln_component_info from a record. */
KL_HIDDEN void kl_component_describe(const kl_component *c, kiln_component_info *dest);

/* "Position", or "component #N" for an id that is not registered: for error messages. */
KL_HIDDEN const char *kl_component_name(const kiln_world *world, kiln_component id, char *buf,
                                        size_t size);

/* Asks c's check hook (there is one) about value for entity, for call: a change the hook makes is refused. */
KL_HIDDEN kiln_result kl_component_ask(kiln_world *world, const kl_component *c, kiln_entity entity,
                                       const void *value, const char *call, char *why, size_t why_size);

/* Runs c's check hook (if any) on value (NULL: the defaults) for entity; on refusal fails
 * with the hook's code and "call: why". */
KL_HIDDEN kiln_result kl_component_check(kiln_world *world, const kl_component *c,
                                         kiln_entity entity, const void *value, const char *call);

/* Gives component id (registered with its check hook) a check over many stored values that
 * refuses exactly the values check refuses (see kl_check_rows_fn). Main thread, at setup. */
KL_HIDDEN void kl_component_set_check_rows(kiln_world *world, kiln_component id, kl_check_rows_fn fn);

/* The value a component gets when none is given: its defaults, or NULL for zeroes. */
static inline const void *kl_component_initial(const kl_component *c) { return c->defaults; }

#endif
