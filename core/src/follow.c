/* follow.c: catching an index over a query's column up with what changed (see follow.h). */
#include <string.h>

#include "follow.h"
#include "query.h"

typedef enum read_result { READ_FAILED, READ_DONE, READ_REBUILD } read_result;

/* Makes room to remember archetype id (new marks zeroed: empty); false when out of memory. */
static bool seen_room(kiln_world *world, kl_follow *f, uint32_t id) {
    return kl_grow_zeroed(&world->alloc, (void **)&f->seen, &f->seen_cap, (int64_t)id + 1, sizeof(kl_rows_mark), 16);
}

/* The first row in [r, end) stamped at since or later (as rows store ticks), else end; rows
 * go 64 at a time through a maximum of fixed count, which the compiler turns into vector code
 * (a tenth faster than 16 at a time counting each, 2026-12-05). */
static int32_t next_stamped(const kiln_row_tick *ticks, int32_t r, int32_t end, kiln_row_tick since) {
    for (; r + 64 <= end; r += 64) {
        kiln_row_tick top = 0;
        for (int k = 0; k < 64; k++) top = ticks[r + k] > top ? ticks[r + k] : top;
        if (top >= since) break;
    }
    while (r < end && ticks[r] < since) r++;
    return r;
}

/* Reads archetype a (its followed column col): every row when all, else the rows whose entity
 * may have changed since it was last read (appended, or past the lowest row taken out since),
 * and, when the archetype no longer knows where rows were taken out (another index read it
 * since) or values were written in place (scan), every row stamped since the last catch-up. */
static read_result read_archetype(kiln_world *world, kl_follow *f, const kl_follow_desc *d, kl_archetype *a,
                                  const kl_column *col, bool all, bool scan) {
    if (!seen_room(world, f, a->id)) return READ_FAILED;
    kl_rows_mark *s = &f->seen[a->id];
    int32_t from = a->count; /* rows from here on are read */
    if (all) from = 0;
    else if (kl_rows_came_since(a, *s) > 0) {
        int32_t changed = kl_rows_changed_from(a, *s);
        if (changed >= 0 && changed < from) from = changed;
        else if (changed < 0) scan = true; /* another index read it since */
    }
    /* a row's tick at least the last catch-up's, as rows store it (tick - base); a tick older
     * than the base reads as the base (kiln_row_tick), so every row then qualifies */
    kiln_tick base = world->tick_base;
    kiln_row_tick since = f->caught > base ? (kiln_row_tick)(f->caught - base) : 0;
    int64_t stamped = 0;
    int32_t r = scan ? next_stamped(col->ticks, 0, from, since) : from;
    for (; r < a->count; r = r + 1 < from ? next_stamped(col->ticks, r + 1, from, since) : r + 1) {
        /* most rows stamped since (all written this tick, say): a rebuild costs less */
        if (r < from && ++stamped > d->rebuild_over) return READ_REBUILD;
        f->rows_read++;
        if (!d->take(d->ctx, a, col, r, all)) return READ_FAILED;
    }
    *s = kl_rows_read(a);
    return READ_DONE;
}

/* Reads the archetypes directly: an iteration would land what the world has queued when it
 * ended, and indexes catch up inside check hooks. */
bool kl_follow_catch_up(kiln_world *world, kl_follow *f, const kl_follow_desc *d) {
    if (kl_follow_current(world, f) && !d->all) return true;
    bool all = !f->valid || d->all;
    bool new_tick = world->tick != f->caught;
    f->valid = false;
again:
    if (all && !d->clear(d->ctx)) return false;
    for (int32_t i = 0, n = kl_query_match_count(d->query); i < n; i++) {
        kl_column *col;
        kl_archetype *a = kl_query_match_at(d->query, i, 0, &col);
        if (a->count == 0) continue; /* its mark may go stale: read_archetype allows it */
        /* appended rows are read anyway: only rows written where they were need the scan */
        bool scan = !all && new_tick && kl_column_written_since(col, world->tick, f->caught);
        read_result r = read_archetype(world, f, d, a, col, all, scan);
        if (r == READ_FAILED) return false;
        if (r == READ_REBUILD) {
            all = true;
            goto again;
        }
    }
    f->caught = world->tick;
    f->caught_version = world->structure_version;
    f->valid = true;
    return true;
}

void kl_follow_fini(kiln_world *world, kl_follow *f) {
    kl_free(&world->alloc, f->seen, sizeof(kl_rows_mark) * (size_t)f->seen_cap);
    memset(f, 0, sizeof *f);
}
