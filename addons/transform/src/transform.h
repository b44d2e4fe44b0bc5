/* transform.h: the world's transform state, as world teardown sees it. */
#ifndef KILN_TRANSFORM_INTERNAL_H
#define KILN_TRANSFORM_INTERNAL_H

#include "../../../core/src/world.h"

/* Frees the transform state and its queries (at world destroy, before the queries go). */
KL_HIDDEN void kl_transform_free(kiln_world *world);

#endif
