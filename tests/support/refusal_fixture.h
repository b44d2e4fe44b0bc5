/* refusal_fixture.h: the small world the refusal suites misuse: component A on one entity, event
 * type Hit and a query of A, and the check that a refused call left all of it as it was. */
#ifndef KILN_REFUSAL_FIXTURE_H
#define KILN_REFUSAL_FIXTURE_H

#include "kiln.h"

/*
 * Functions in this header:
 *   refusal_fixture_setup, refusal_fixture_teardown, refusal_fixture_unchanged.
 */

typedef struct refusal_fixture {
    kiln_world *world;
    kiln_component a;   /* "A", 4 bytes */
    kiln_event_type hit; /* "Hit", 4 bytes */
    kiln_query *query;  /* with A */
    kiln_entity e;      /* A = 7 */
} refusal_fixture;

void refusal_fixture_setup(refusal_fixture *f);
void refusal_fixture_teardown(refusal_fixture *f);

/* One type, one event type (no "Late" of either), the query finding the one entity, A still 7. */
void refusal_fixture_unchanged(const refusal_fixture *f);

#endif
