/* transform_links.h: the transform addon's children index as a sorted array, for callers in
 * other addons that look many entities up at once (kiln_clone). Valid until a Parent write. */
#ifndef KILN_TRANSFORM_LINKS_H
#define KILN_TRANSFORM_LINKS_H

#include "internal.h"
#include "kiln.h"

/* kiln_transform_children rebuilds the index per call while a Parent was written this tick,
 * so a caller walking a tree uses this instead: 2 * count handles, (parent, child) pairs
 * sorted by parent then child, every one standing (rebuilt here when links went since the
 * last build); valid until the next Parent write or structural change. Fails (naming call)
 * only when out of memory; without the addon, count is 0. */
KL_HIDDEN kiln_result kl_transform_links(kiln_world *world, const kiln_entity **pairs, int64_t *count,
                                         const char *call);

#endif /* KILN_TRANSFORM_LINKS_H */
