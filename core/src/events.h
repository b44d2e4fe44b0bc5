/* events.h: event buffers as command buffers and the world's teardown use them. */
#ifndef KILN_EVENTS_H
#define KILN_EVENTS_H

#include "world.h"

/* Appends an event (type: a known id; value of the type's size, or NULL for the defaults); fails only when out of
 * memory, with the world error naming call. */
KL_HIDDEN kiln_result kl_event_push(kiln_world *world, uint32_t type, const void *value,
                                    const char *call);

/* Frees every event buffer (at world destroy). */
KL_HIDDEN void kl_events_free(kiln_world *world);

/* Frees the blocks of event buffers holding no event (kiln_world_trim): a buffer keeps the
 * room its busiest frame took until then. No pointer into an empty buffer is valid. */
KL_HIDDEN void kl_events_trim(kiln_world *world);

#endif
