/* query_fixture.h: the world the query suites iterate: Position, Velocity and a Frozen tag on
 * eleven entities in five archetypes (and one bare entity), on the counting allocator. */
#ifndef KILN_QUERY_FIXTURE_H
#define KILN_QUERY_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln.h"
#include "test_support.h"

/*
 * Functions in this header:
 *   query_fixture_setup, query_fixture_teardown, make_query, same_set.
 */

typedef struct query_fixture {
    test_allocator alloc;
    kiln_world *world;
    kiln_component pos, vel, tag;
    kiln_entity p_only[3];   /* Position */
    kiln_entity pv[4];       /* Position, Velocity */
    kiln_entity v_only[2];   /* Velocity */
    kiln_entity pvt[2];      /* Position, Velocity, Frozen */
    kiln_entity bare;        /* nothing */
} query_fixture;

/* Builds the world into f (asserting every step). Position values are (n, -n) and Velocity
 * values (n, n), n counting up from 0 in the order of the fields above. */
void query_fixture_setup(query_fixture *f);
/* Destroys the world (a test may have destroyed it already and set world NULL) and asserts
 * every byte came back. */
void query_fixture_teardown(query_fixture *f);

/* A query on world, asserting creation succeeded. */
kiln_query *make_query(kiln_world *world, kiln_query_desc desc);
/* got[0..n) and want[0..m) hold the same entities, in any order. */
bool same_set(const kiln_entity *got, int64_t n, const kiln_entity *want, int64_t m);

#endif /* KILN_QUERY_FIXTURE_H */
