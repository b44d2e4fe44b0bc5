/* access.h: the immediate structural operations behind the public calls, shared with command
 * buffers and the deferred world. Each checks its inputs, reserves memory first and changes
 * nothing on failure. move: relocate values through the component's move hook (values that
 * a buffer owns) instead of copying them bytewise (values the caller keeps). */
#ifndef KILN_ACCESS_H
#define KILN_ACCESS_H

#include "world.h"

/* Spawns an entity with count components; reserved, when not null, is a handle handed out
 * by a deferred spawn that becomes alive here instead of a fresh slot. */
KL_HIDDEN kiln_result kl_spawn_values(kiln_world *world, const char *call,
                                      const kiln_component *components, void *const *values,
                                      int32_t count, bool move, kiln_entity reserved,
                                      kiln_entity *dest);
KL_HIDDEN kiln_result kl_despawn_entity(kiln_world *world, const char *call, kiln_entity e);
KL_HIDDEN kiln_result kl_add_value(kiln_world *world, const char *call, kiln_entity e,
                                   kiln_component c, void *value, bool move);
KL_HIDDEN kiln_result kl_set_value(kiln_world *world, const char *call, kiln_entity e,
                                   kiln_component c, void *value, bool move);
KL_HIDDEN kiln_result kl_remove_component(kiln_world *world, const char *call, kiln_entity e,
                                          kiln_component c, bool *removed);

#endif
