/* transform_links.h: what the transform addon's children index needs from the callers that
 * change links without a row coming in or a check (the Parent check hook, persist's restores
 * and loads), and what it read, for tests. */
#ifndef KILN_TRANSFORM_LINKS_H
#define KILN_TRANSFORM_LINKS_H

#include "internal.h"
#include "kiln.h"

/* Rows came back with the ticks they had (a snapshot restore, a load): the next look-up of
 * children rebuilds the index from every link. */
KL_HIDDEN void kl_transform_links_invalidate(kiln_world *world);

/* Rows of Parent the children index has read since the addon began (0 without it): what its
 * catch-ups cost, counted for tests, which bound it instead of timing look-ups. */
KL_HIDDEN int64_t kl_transform_links_read(kiln_world *world);

#endif /* KILN_TRANSFORM_LINKS_H */
