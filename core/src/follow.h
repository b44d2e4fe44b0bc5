/* follow.h: an index kept over one column of a query (the name index, the children index)
 * that reads, each time it catches up, only what changed since the last time: rows appended to
 * an archetype; when rows were also taken out of it (an appended row may have moved into a
 * hole), the rows from the lowest taken out since on (or, when another index read the
 * archetype since, the rows stamped since); once per tick, the rows stamped since in
 * archetypes whose column had rows written where they were (values written through a pointer;
 * appends, spawns and moves in, do not count). The index keyed by entity holds an entry for
 * every row read and may hold stale ones, which its reads verify. Entities that moved between
 * archetypes keep their values and ticks: reading them again changes nothing. */
#ifndef KILN_FOLLOW_H
#define KILN_FOLLOW_H

#include "archetype.h"

typedef struct kl_follow {
    kl_rows_mark *seen;   /* by archetype id: each as last read */
    int64_t seen_cap;
    /* the world tick and structure version at the last catch-up: a value that entered since
     * was stamped at that tick or later */
    kiln_tick caught;
    uint64_t caught_version;
    bool valid;           /* false: the next catch-up reads every row, from scratch */
    int64_t rows_read;    /* rows taken since the index began: what its catch-ups cost, which a
                           * test bounds (counted, not timed) */
} kl_follow;

typedef struct kl_follow_desc {
    kiln_query *query;    /* term 0's column is the one followed */
    /* Empties the index before every row is read again; false when out of memory. */
    bool (*clear)(void *ctx);
    /* Takes row r of a (col: its followed column) in; with all, the index was cleared and
     * each entity comes once. False when out of memory. */
    bool (*take)(void *ctx, const kl_archetype *a, const kl_column *col, int32_t r, bool all);
    /* A scan that would meet more stamped rows than this reads every row instead. */
    int64_t rebuild_over;
    bool all;             /* read every row even when the index is valid (too many stale) */
    void *ctx;
} kl_follow_desc;

/* Whether nothing moved since the last catch-up in this tick (values written through a
 * pointer this tick are seen from the next). */
static inline bool kl_follow_current(const kiln_world *world, const kl_follow *f) {
    return f->valid && world->tick == f->caught && world->structure_version == f->caught_version;
}

/* Brings the index up to date (see the top); false when out of memory, the index then not
 * valid (the next catch-up starts from scratch). */
KL_HIDDEN bool kl_follow_catch_up(kiln_world *world, kl_follow *f, const kl_follow_desc *desc);

KL_HIDDEN void kl_follow_fini(kiln_world *world, kl_follow *f);

#endif
