/* links.h: entities held inside component and event values, as a command buffer's apply
 * rewrites them: the placeholders in KILN_TYPE_ENTITY fields become the entities spawned. */
#ifndef KILN_LINKS_H
#define KILN_LINKS_H

#include "world.h"

/* Why a placeholder became no entity (kl_link_fn): of no current batch, its spawn not applied
 * yet (later in the buffer), or its spawn dropped or skipped (it will never land). */
typedef enum kl_link_state { KL_LINK_FOREIGN, KL_LINK_PENDING, KL_LINK_GONE } kl_link_state;

/* What a placeholder became: its entity, or KILN_NULL_ENTITY with *state saying why. */
typedef kiln_entity (*kl_link_fn)(const void *ctx, kiln_entity placeholder, kl_link_state *state);

/* Rewrites every placeholder in value's entity fields (comp->entity_slots > 0; arrays too)
 * to what find says it became. Every slot is checked before any is written, so a refusal
 * leaves the value as it was: false, with why (when not NULL) naming the field, the
 * placeholder's index and its kl_link_state. */
KL_HIDDEN bool kl_links_resolve(const kl_component *comp, void *value, kl_link_fn find,
                                const void *ctx, char *why, size_t why_size);

#endif
