/* query.h: what the storage layer tells cached queries: a new archetype exists. Queries keep
 * their matched archetypes, so iteration never scans archetypes that cannot match. */
#ifndef KILN_QUERY_H
#define KILN_QUERY_H

#include "world.h"

/* Makes sure every live query can record one more match without allocating. */
KL_HIDDEN bool kl_queries_reserve(kiln_world *world);

/* Offers a newly created archetype to every live query (room reserved beforehand). */
KL_HIDDEN void kl_queries_match(kiln_world *world, kl_archetype *arch);

/* Frees every live query (at world destroy). */
KL_HIDDEN void kl_queries_free(kiln_world *world);

/* Number of non-empty archetypes the query matches now (the chunks an iteration visits). */
KL_HIDDEN int32_t kl_query_chunk_count(const kiln_query *query);

/* The latest structure tick (row added or removed) over the archetypes the query matches,
 * and the latest tick written in term's column over them. */
KL_HIDDEN kiln_tick kl_query_structure_tick(const kiln_query *query);
KL_HIDDEN kiln_tick kl_query_column_tick(const kiln_query *query, int32_t term);

/* kiln_query_iter without the debug check of the running system's declared access: for
 * layers whose helpers read on the caller's behalf (an addon's own indexes). */
KL_HIDDEN void kl_query_iter_unchecked(const kiln_query *query, kiln_iter *it);

/* The archetypes query matches (empty ones included) and, for match i, term's column (NULL
 * for a tag or an absent optional): for an addon's index that reads rows outside any
 * iteration (an iteration defers the world and lands what was queued when it ends). */
KL_HIDDEN int32_t kl_query_match_count(const kiln_query *query);
KL_HIDDEN kl_archetype *kl_query_match_at(const kiln_query *query, int32_t i, int32_t term,
                                          kl_column **column);

/* Ends, by their counts, the iterations left open above keep (world->iterating when the
 * caller's section began) by code that can no longer finish them: a system that returned
 * without kiln_iter_fini, its iterator gone with its stack. Returns how many it ended, and
 * writes to what the terms of a query left iterating ("[Position, optional Tag, without
 * Dead]"). With keep 0 (nothing else iterating) the queries' own counts go back to 0 too,
 * and the world's iter_era moves on, so the ended iterators can tell (kiln_iter_fini). */
KL_HIDDEN int32_t kl_queries_end_open(kiln_world *world, int keep, char *what, size_t what_size);

/* The world a query belongs to. */
KL_HIDDEN kiln_world *kl_query_world(const kiln_query *query);

/* The match entries written so far to keep the query's matches in order (each entry moved, and
 * each new one placed, by an archetype made after the query): what ordering the matches cost,
 * counted for the tests that bound it (the entries written at kiln_query_create, in one sort,
 * are not counted). */
KL_HIDDEN int64_t kl_query_order_work(const kiln_query *query);

#endif
