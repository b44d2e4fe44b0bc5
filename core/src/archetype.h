/* archetype.h: archetype storage: one table per component set, columns of 16-byte-aligned
 * values with per-row ticks, swap-remove rows, and the cached add/remove graph edges. */
#ifndef KILN_ARCHETYPE_H
#define KILN_ARCHETYPE_H

#include <string.h>

#include "world.h"

/* The archetype with exactly these types (sorted ascending, no duplicates), created when
 * missing. Returns NULL with the world error set when out of memory or past a limit
 * (KL_ARCHETYPES_MAX archetypes, KL_TYPES_MAX types). */
KL_HIDDEN kl_archetype *kl_archetype_ensure(kiln_world *world, const kiln_component *types,
                                            int32_t count, const char *call);

/* The archetype with exactly these types (sorted ascending, no duplicates), or NULL when the
 * world has none yet; creates nothing. */
KL_HIDDEN kl_archetype *kl_archetype_find(const kiln_world *world, const kiln_component *types,
                                          int32_t count);

/* Why kl_archetype_ensure or kl_archetype_traverse returned NULL for an archetype of types
 * types (the world error says it). */
static inline kiln_result kl_archetype_failure(const kiln_world *world, int32_t types) {
    return (uint32_t)world->archetype_count >= KL_ARCHETYPES_MAX || types > KL_TYPES_MAX ? KILN_ERR_LIMIT
                                                                                        : KILN_ERR_OUT_OF_MEMORY;
}

/* The neighbour of arch with component added (absent from arch) / removed (present),
 * following or caching the edge. NULL with the world error set when out of memory. */
KL_HIDDEN kl_archetype *kl_archetype_traverse(kiln_world *world, kl_archetype *arch,
                                              kiln_component component, const char *call);

static inline kl_archetype *kl_archetype_neighbour(kiln_world *world, kl_archetype *arch,
                                                   kiln_component component, const char *call) {
    uint32_t i = component - arch->slot_base; /* below the window: wraps past slot_count */
    if (KL_LIKELY(i < arch->slot_count && arch->slots[i].edge != 0))
        return world->archetypes[arch->slots[i].edge - 1];
    return kl_archetype_traverse(world, arch, component, call);
}

/* Makes room for rows more rows; false when out of memory: the rows, their values and the
 * capacity are unchanged, though some columns may have grown (and moved: the structure
 * version is bumped for every column that grew). */
KL_HIDDEN bool kl_archetype_reserve(kiln_world *world, kl_archetype *arch, int64_t rows);

/* Like kl_archetype_reserve; each of the ptr_count (at most 256) pointers in ptrs that points
 * into one of arch's live values is moved along with its column, on failure too. */
KL_HIDDEN bool kl_archetype_reserve_rebase(kiln_world *world, kl_archetype *arch, int64_t rows,
                                           void **ptrs, int32_t ptr_count);

/* Index of component in arch->types, or -1 (binary search). */
KL_HIDDEN int32_t kl_archetype_type_index(const kl_archetype *arch, kiln_component component);

/* kl_archetype_slot for ids beyond the archetype's direct slots. */
KL_HIDDEN int32_t kl_archetype_slot_search(const kl_archetype *arch, kiln_component component);

/* Where component lives in arch: its column (>= 0), KL_SLOT_TAG or KL_SLOT_ABSENT. */
static inline int32_t kl_archetype_slot(const kl_archetype *arch, kiln_component component) {
    uint32_t i = component - arch->slot_base;
    if (KL_LIKELY(i < arch->slot_count)) return arch->slots[i].column;
    return kl_archetype_slot_search(arch, component);
}

/* An archetype's rows as an index over it last read them (see kl_archetype.removed). */
typedef struct kl_rows_mark {
    int32_t count;
    uint64_t removed;
} kl_rows_mark;

static inline kl_rows_mark kl_rows_mark_of(const kl_archetype *arch) {
    return (kl_rows_mark){arch->count, arch->removed};
}

/* Rows that came into arch since mark (0: none); when none left either (arch->removed ==
 * mark.removed), they are the rows from mark.count on. A zeroed mark is an empty archetype. */
static inline int64_t kl_rows_came_since(const kl_archetype *arch, kl_rows_mark mark) {
    return (int64_t)arch->count - mark.count + (int64_t)(arch->removed - mark.removed);
}

/* The first row whose entity may differ from when mark was taken (rows came and left: the
 * last row's entity fills each hole), or -1 when arch no longer knows (another index read it
 * after mark was taken, and rows were taken out before that): the caller finds them another
 * way. */
static inline int32_t kl_rows_changed_from(const kl_archetype *arch, kl_rows_mark mark) {
    if (arch->removed == mark.removed) return mark.count;
    if (mark.removed < arch->low_from) return -1;
    int32_t low = atomic_load_explicit(&arch->low_row, memory_order_relaxed); /* -1: unknown */
    return mark.count < low ? mark.count : low;
}

/* An index read arch's rows: its mark; the next row taken out starts the lowest over. */
static inline kl_rows_mark kl_rows_read(kl_archetype *arch) {
    atomic_store_explicit(&arch->low_row, -1, memory_order_relaxed);
    return kl_rows_mark_of(arch);
}

/* Counts the row taken out of arch at row (the last row's entity takes it, or it was last):
 * one compare when it is not the lowest (-1 reads as above every row). */
static inline void kl_rows_taken(kl_archetype *arch, size_t row) {
    int32_t low = atomic_load_explicit(&arch->low_row, memory_order_relaxed);
    if ((uint32_t)row < (uint32_t)low) {
        if (low < 0) arch->low_from = arch->removed; /* the first since an index read */
        atomic_store_explicit(&arch->low_row, (int32_t)row, memory_order_relaxed);
    }
    arch->removed++;
}

static inline bool kl_archetype_has(const kl_archetype *arch, kiln_component component) {
    return kl_archetype_slot(arch, component) != KL_SLOT_ABSENT;
}

/* Copies 1..16 bytes with fixed-size moves: the usual 8 and 4 bytes in one move each (as two
 * overlapping moves they cost a recorded spawn's adds 0.6 ns, 2026-12-02), other sizes in
 * two overlapping ones. */
static inline __attribute__((always_inline)) void kl_copy_upto16(void *to, const void *from,
                                                                 uint32_t size) {
    uint8_t *dst = to;
    const uint8_t *src = from;
    if (size == 8) {
        memcpy(dst, src, 8);
    } else if (size == 4) {
        memcpy(dst, src, 4);
    } else if (size >= 8) {
        memcpy(dst, src, 8);
        memcpy(dst + size - 8, src + size - 8, 8);
    } else if (size >= 4) {
        memcpy(dst, src, 4);
        memcpy(dst + size - 4, src + size - 4, 4);
    } else if (size >= 2) {
        memcpy(dst, src, 2);
        memcpy(dst + size - 2, src + size - 2, 2);
    } else {
        dst[0] = src[0];
    }
}

/* Copies a value of at most 64 bytes with fixed-size moves (overlapping for odd sizes), so
 * its caller makes no library call (a command record then sets up no frame); false, with
 * nothing copied, for a larger one. */
static inline __attribute__((always_inline)) bool kl_copy_small(void *to, const void *from,
                                                                size_t size) {
    uint8_t *dst = to;
    const uint8_t *src = from;
    if (size > 64) return false;
    if (size == 0) return true;
    if (size >= 16) {
        memcpy(dst, src, 16);
        if (size > 32) {
            memcpy(dst + 16, src + 16, 16);
            memcpy(dst + size - 32, src + size - 32, 16);
        }
        memcpy(dst + size - 16, src + size - 16, 16);
    } else {
        kl_copy_upto16(dst, src, (uint32_t)size);
    }
    return true;
}

/* Copies one value of size bytes: the common small sizes without a library call. */
static inline void kl_copy_value(void *dst, const void *src, size_t size) {
    switch (size) {
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    case 12: memcpy(dst, src, 12); break;
    case 16: memcpy(dst, src, 16); break;
    default:
        if (!kl_copy_small(dst, src, size)) memcpy(dst, src, size);
        break;
    }
}

/* The column holding component in arch, or NULL (absent, or a tag). */
static inline kl_column *kl_archetype_column(const kl_archetype *arch, kiln_component component) {
    int32_t c = kl_archetype_slot(arch, component);
    return c >= 0 ? &arch->columns[c] : NULL;
}

/* Appends a row for entity (room must be reserved); values are left uninitialised. */
static inline int32_t kl_archetype_push(kiln_world *world, kl_archetype *arch, kiln_entity entity) {
    KILN_ASSERT(arch->count < arch->capacity, "row reserved before push");
    int32_t row = arch->count++;
    arch->entities[row] = entity;
    arch->structure_tick = world->tick;
    world->structure_version++;
    return row;
}

/* Moves rows [first, first + count) of src to count new rows of dst (room reserved), whose
 * types are src's and more: each of src's columns moves in one run (through its component's
 * move hook when it has one, the world in a hook meanwhile) with its ticks, the entities'
 * records follow, and dst's other columns are left unwritten for the caller to fill; src's last
 * rows fill the hole. What a load does to give many entities a component at once instead of
 * one kiln_add each. Returns dst's first new row; cannot fail. */
KL_HIDDEN int32_t kl_archetype_move_rows(kiln_world *world, kl_archetype *src, int32_t first,
                                         int32_t count, kl_archetype *dst);

/* Runs the destroy hooks of every value in row. */
KL_HIDDEN void kl_archetype_destroy_row(kl_archetype *arch, int32_t row);

/* Removes row whose values are already destroyed or moved out: the last row moves into it
 * and its entity's record is updated. */
KL_HIDDEN void kl_archetype_remove_row(kiln_world *world, kl_archetype *arch, int32_t row);

/* Gives back the room of an archetype that holds fewer than a quarter of the rows its largest
 * array has room for (arch->trim_below): its arrays shrink to twice its rows, or to none once
 * it is empty when its rows are large. An array the allocator cannot shrink stays as it was.
 * Only between operations, the world not iterating (kiln_world_trim). */
KL_HIDDEN void kl_archetype_trim(kiln_world *world, kl_archetype *arch);

/* kl_archetype_trim of every archetype under its threshold. */
KL_HIDDEN void kl_archetypes_trim(kiln_world *world);

/* Copies the plain value and tick of row from into row to in each column of [col, end). */
KL_HIDDEN void kl_columns_copy_row(kl_column *col, const kl_column *end, size_t to, size_t from);

/* Copies the value and tick of row from into row to of col when its width is 8 or 16 bytes
 * (rows addressed at a constant stride: a scaled index, no multiply); false, with nothing
 * copied, for another width. */
static inline __attribute__((always_inline)) bool kl_column_copy_row_sized(kl_column *col,
                                                                          size_t to,
                                                                          size_t from) {
    size_t stride = col->stride;
    uint8_t *data = col->data;
    if (stride == 8) memcpy(data + to * 8, data + from * 8, 8);
    else if (stride == 16) memcpy(data + to * 16, data + from * 16, 16);
    else return false;
    col->ticks[to] = col->ticks[from];
    return true;
}

/* kl_column_copy_row_sized for a column known to be 8 bytes wide. */
static inline __attribute__((always_inline)) void kl_column_copy_row_8(kl_column *col, size_t to,
                                                                       size_t from) {
    memcpy(col->data + to * 8, col->data + from * 8, 8);
    col->ticks[to] = col->ticks[from];
}

/* kl_archetype_remove_row for an archetype without hooks (every value moves bytewise),
 * inline for despawn, of the row at place (the record bits' archetype and row, which the last
 * row's entity takes): the bookkeeping first, from values loaded before any copy (a byte copy
 * may alias every field), then one sized copy and one tick per column, the first two written
 * out; from the first column of another width on, the rest is copied out of line. */
static inline __attribute__((always_inline)) void
kl_archetype_remove_row_plain(kiln_world *world, kl_archetype *arch, uint64_t place) {
    KILN_ASSERT(!arch->has_hooks, "a plain swap-remove of an archetype with hooks");
    KILN_ASSERT(place >> KL_ROW_BITS == arch->id, "place is in arch");
    size_t row = (size_t)(place & (KL_ROWS_MAX - 1));
    size_t last = (size_t)arch->count - 1;
    /* the written-out columns test the count, not an end pointer (which cost three
     * instructions to make before the first copy): the end is made only for the rest */
    kl_column *col = arch->columns;
    int32_t columns = arch->column_count;
    arch->count = (int32_t)last;
    kl_rows_taken(arch, row);
    arch->structure_tick = world->tick;
    world->structure_version++;
    if (row == last) return;
    kiln_entity moved = arch->entities[last];
    arch->entities[row] = moved;
    kl_record_put(world, moved, place);
    if (KL_LIKELY(arch->eight)) { /* the usual rows: no stride to dispatch on, no loop */
        kl_column_copy_row_8(col, row, last); /* eight: at least one column */
        if (columns == 1) return;
        kl_column_copy_row_8(col + 1, row, last);
        if (columns == 2) return;
        col += 2;
        goto rest;
    }
    if (columns == 0) return;
    if (!kl_column_copy_row_sized(col, row, last)) goto rest;
    if (columns == 1) return;
    if (!kl_column_copy_row_sized(++col, row, last)) goto rest;
    if (columns == 2) return;
    col++;
rest:
    kl_columns_copy_row(col, arch->columns + columns, row, last);
}

/* Writes value (or zeroes when NULL) into column at row, destroying nothing; stamps the row
 * with stamp (tick as a row stores it, see kl_row_tick_now) and the column with tick (as a
 * row appended when appended, else as written in place). move: relocate value through the
 * component's move hook when it has one, else copy. */
KL_HIDDEN void kl_column_write_slow(kl_column *col, int32_t row, void *value, bool move,
                                    kiln_tick tick, kiln_row_tick stamp, bool appended);

/* ticks[begin, end) = stamp, eight at a time from a register (a plain loop stays scalar at
 * -O2, where GCC vectorises only loops of a known count). */
static inline void kl_fill_row_ticks(kiln_row_tick *ticks, int64_t begin, int64_t end,
                                     kiln_row_tick stamp) {
    const kiln_row_tick eight[8] = {stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp};
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) memcpy(ticks + i, eight, sizeof eight);
    for (; i < end; i++) ticks[i] = stamp;
}

/* Records that rows appended to column (spawned, moved in) were written at tick. */
static inline void kl_column_touch_appended(kl_column *col, kiln_tick tick) {
    if (atomic_load_explicit(&col->latest, memory_order_relaxed) < tick)
        atomic_store_explicit(&col->latest, tick, memory_order_relaxed);
}

/* Records that rows col already held were written at tick, the world's tick now (a tick
 * older than one recorded before would hide that one). */
static inline void kl_column_mark_in_place(kl_column *col, kiln_tick tick) {
    if (atomic_load_explicit(&col->in_place, memory_order_relaxed) != (uint32_t)tick)
        atomic_store_explicit(&col->in_place, (uint32_t)tick, memory_order_relaxed);
}

/* Records that column was written at tick, rows it already held perhaps (a set, a pointer, an
 * iteration's marks): the form for any write not known to be an append. */
static inline void kl_column_touch(kl_column *col, kiln_tick tick) {
    kl_column_touch_appended(col, tick);
    kl_column_mark_in_place(col, tick);
}

/* Whether rows col already held may have been written at since or later, now being the world's
 * tick: the latest such tick is taken as the latest one at or before now with the recorded low
 * 32 bits, never earlier than the real one (a write 2^32 ticks old reads as newer: a scan more,
 * nothing missed). */
static inline bool kl_column_written_since(const kl_column *col, kiln_tick now, kiln_tick since) {
    uint32_t low = atomic_load_explicit(&col->in_place, memory_order_relaxed);
    kiln_tick at = now - (uint32_t)((uint32_t)now - low);
    return at >= since;
}

/* Inline everywhere: set, add and the spawns write through it (GCC 12 kept one out-of-line
 * copy per file once access.c had fewer callers, ten instructions more a kiln_set). */
static inline __attribute__((always_inline)) void kl_column_write(kl_column *col, int32_t row,
                                                                  void *value, bool move,
                                                                  kiln_tick tick,
                                                                  kiln_row_tick stamp,
                                                                  bool appended) {
    uint8_t *dst = col->data + (size_t)row * col->stride;
    size_t size = col->stride;
    /* the usual case: plain bytes from distinct memory, no padding to clear */
    if (value && col->plain && col->component->size == size &&
        ((const uint8_t *)value + size <= dst || dst + size <= (const uint8_t *)value)) {
        kl_copy_value(dst, value, size);
        col->ticks[row] = stamp;
        if (appended) kl_column_touch_appended(col, tick);
        else kl_column_touch(col, tick);
        return;
    }
    kl_column_write_slow(col, row, value, move, tick, stamp, appended);
}

/* kl_move_sized for the sizes it does not name (out of line: keeps the move's registers). */
KL_HIDDEN void kl_move_bytes(uint8_t *to, uint8_t *from, const uint8_t *tail, size_t size);

/* Copies one plain value of size bytes out of from into to, then the value at tail into
 * from (tail may be from: it is then rewritten unchanged). Both are read before either is
 * written; the usual sizes copy through registers. */
static inline __attribute__((always_inline)) void kl_move_sized(uint8_t *to, uint8_t *from,
                                                                const uint8_t *tail, size_t size) {
#define KL_MOVE_SIZED(N)                                                                        \
    do {                                                                                        \
        uint8_t out[N], in[N];                                                                  \
        memcpy(out, from, N);                                                                   \
        memcpy(in, tail, N);                                                                    \
        memcpy(to, out, N);                                                                     \
        memcpy(from, in, N);                                                                    \
    } while (0)
    if (size == 8) KL_MOVE_SIZED(8);
    else if (size == 4) KL_MOVE_SIZED(4);
    else if (size == 16) KL_MOVE_SIZED(16);
    else if (size == 12) { /* as 8 + 4: a 12-byte buffer would go through the stack */
        uint64_t out0, in0;
        uint32_t out1, in1;
        memcpy(&out0, from, 8);
        memcpy(&out1, from + 8, 4);
        memcpy(&in0, tail, 8);
        memcpy(&in1, tail + 8, 4);
        memcpy(to, &out0, 8);
        memcpy(to + 8, &out1, 4);
        memcpy(from, &in0, 8);
        memcpy(from + 8, &in1, 4);
    } else kl_move_bytes(to, from, tail, size);
#undef KL_MOVE_SIZED
}

/* Copies size bytes from from to to, which may be the same row (never partly overlapping). */
static inline __attribute__((always_inline)) void kl_copy_over(uint8_t *to, const uint8_t *from,
                                                               size_t size) {
    if (size == 8) memmove(to, from, 8);
    else if (size == 4) memmove(to, from, 4);
    else if (size == 16) memmove(to, from, 16);
    else memmove(to, from, size);
}

/* The column moves of kl_archetype_move when some column of src has a move or destroy hook;
 * base is the world's tick base (the rows' ticks count from it). */
KL_HIDDEN void kl_archetype_move_hooked(kl_archetype *src, kl_archetype *dst, int32_t added,
                                        int32_t gone, size_t at, size_t to, size_t tail,
                                        kiln_tick base);

/* Destroys the value at row at of src's column gone and fills the hole from row tail. */
KL_HIDDEN void kl_archetype_drop_value(kl_archetype *src, int32_t gone, size_t at, size_t tail);

/* Moves the plain value and tick at row at of column s to row to of column d (the same
 * component, another archetype), then, when swap (at is not tail), the tail row's value and
 * tick into row at (when at is tail that row leaves and no hole is left), and raises d's
 * latest tick. width: the columns' stride when the caller knows it (a constant: rows are then
 * addressed by scaled indexing, with no stride read and no size test), else 0. */
static inline __attribute__((always_inline)) void kl_move_plain_column(kl_column *s, kl_column *d,
                                                                       size_t at, size_t to,
                                                                       size_t tail, kiln_tick base,
                                                                       bool swap, size_t width) {
    size_t stride = width ? width : s->stride;
    uint8_t *data = s->data;
    kiln_row_tick *ticks = s->ticks;
    kiln_row_tick tick = ticks[at];
    if (swap) {
        kl_move_sized(d->data + to * stride, data + at * stride, data + tail * stride, stride);
        ticks[at] = ticks[tail];
    } else kl_copy_over(d->data + to * stride, data + at * stride, stride);
    d->ticks[to] = tick;
    kl_column_touch_appended(d, base + tick);
}

/* The row bookkeeping of a move out of src: src's last row (tail, read before anything was
 * pushed) takes row at's place (its entity's record follows), src shrinks by one and notes
 * the structural change, and the moving entity's record points at row of archetype dst_id. */
static inline __attribute__((always_inline)) void
kl_archetype_unlink(kiln_world *world, kl_archetype *src, size_t at, size_t tail,
                    kl_record *record, uint32_t dst_id, int32_t row) {
    if (at != tail) {
        kiln_entity moved = src->entities[tail];
        src->entities[at] = moved;
        kl_record_put(world, moved, kl_record_bits(0, src->id, (uint32_t)at));
    }
    src->count = (int32_t)tail;
    kl_rows_taken(src, at);
    src->structure_tick = world->tick;
    kl_record_set_place(record, dst_id, (uint32_t)row);
}

/* The columns moved together (see kl_move_plain_columns) up to this many; beyond, a loop. */
#define KL_MOVE_UNROLLED 3

/* Moves every column of src but gone to its column of dst (every one but added) with
 * kl_move_plain_column. The two lists follow one sorted order and differ at most by gone
 * and added; up to KL_MOVE_UNROLLED shared columns move without a loop (no per-column skip
 * tests, no loop registers: the usual small archetypes). */
static inline __attribute__((always_inline)) void
kl_move_plain_columns(const kl_archetype *src, const kl_archetype *dst, const kl_column *added,
                      const kl_column *gone, size_t at, size_t to, size_t tail, kiln_tick base,
                      bool swap, size_t width) {
    kl_column *s = src->columns, *d = dst->columns;
    /* the shorter list: dst's when a column is gone, else src's (equal when a tag moves) */
    int32_t shared = gone ? dst->column_count : src->column_count;
    if (shared <= KL_MOVE_UNROLLED) {
        /* the next shared column from p on: p, or the one after when p is the changed one
         * (only ever stepped to a column that exists); a changed column that is a constant
         * NULL (an add's gone, a remove's added) folds away, where p == NULL would not (GCC
         * cannot tell that columns are never NULL): 2.5 to 3 instructions a move (2026-12-07) */
#define KL_SHARED(p, changed) \
        (__builtin_constant_p((changed) == NULL) && (changed) == NULL ? (p) : (p) + ((p) == (changed)))
        if (shared == 2) {
            kl_column *s0 = KL_SHARED(s, gone), *d0 = KL_SHARED(d, added);
            kl_move_plain_column(s0, d0, at, to, tail, base, swap, width);
            kl_move_plain_column(KL_SHARED(s0 + 1, gone), KL_SHARED(d0 + 1, added), at, to,
                                 tail, base, swap, width);
        } else if (shared == 1) {
            kl_move_plain_column(KL_SHARED(s, gone), KL_SHARED(d, added), at, to, tail, base,
                                 swap, width);
        } else if (shared == 3) {
            kl_column *s0 = KL_SHARED(s, gone), *d0 = KL_SHARED(d, added);
            kl_column *s1 = KL_SHARED(s0 + 1, gone), *d1 = KL_SHARED(d0 + 1, added);
            kl_move_plain_column(s0, d0, at, to, tail, base, swap, width);
            kl_move_plain_column(s1, d1, at, to, tail, base, swap, width);
            kl_move_plain_column(KL_SHARED(s1 + 1, gone), KL_SHARED(d1 + 1, added), at, to,
                                 tail, base, swap, width);
        }
#undef KL_SHARED
        return;
    }
    /* past the written-out forms only: computed before the branch, GCC kept it across them */
    kl_column *end = s + src->column_count;
    for (; s < end; s++, d++) {
        if (s == gone && ++s == end) break;
        if (d == added) d++;
        kl_move_plain_column(s, d, at, to, tail, base, swap, width);
    }
}

/* kl_archetype_move_plain's body with swap (at is not tail: src's last row fills the hole)
 * known, so each of its two forms carries no per-column test of it. */
static inline __attribute__((always_inline)) void
kl_move_plain_rows(kiln_world *world, kl_archetype *src, kl_record *record, uint64_t bits,
                   kl_archetype *dst, size_t to, kiln_tick tick, const kl_column *added,
                   kl_column *gone, size_t at, size_t tail, bool swap, size_t width) {
    kiln_entity *rows = src->entities;
    /* the record first: bits then need not stay live across the rows' work */
    kl_record_store(record, (bits & ~KL_PLACE_MASK) | (uint64_t)dst->id << KL_ROW_BITS | to);
    dst->entities[to] = rows[at];
    dst->count = (int32_t)to + 1;
    dst->structure_tick = tick;
    world->structure_version++;
    if (swap) { /* the tail's entity takes the place the moving one left (bits') */
        kiln_entity moved = rows[tail];
        rows[at] = moved;
        kl_record_put(world, moved, bits & KL_PLACE_MASK);
    }
    src->count = (int32_t)tail;
    kl_rows_taken(src, at);
    src->structure_tick = tick;
    if (gone && swap) { /* a plain value: nothing to destroy, the tail fills its hole */
        kl_copy_over(gone->data + at * gone->stride, gone->data + tail * gone->stride,
                     gone->stride);
        gone->ticks[at] = gone->ticks[tail];
    }
    kl_move_plain_columns(src, dst, added, gone, at, to, tail, world->tick_base, swap, width);
}

/* kl_archetype_move when no column of src has a move or destroy hook, with the changed
 * column as a pointer (added: into dst's columns; gone: into src's; NULL for none), from what
 * the caller read already (so nothing is read twice, nor again after an added value's
 * write): record and its bits place the entity at row at of src; it goes to row to of dst
 * (dst's count, room reserved) at tick (the world's). The rows and records first, then the
 * values, column by column, skipping the changed one; when the entity is src's last row no
 * hole is filled. */
static inline __attribute__((always_inline)) void
kl_archetype_move_plain(kiln_world *world, kl_archetype *src, kl_record *record, uint64_t bits,
                        kl_archetype *dst, size_t to, kiln_tick tick, const kl_column *added,
                        kl_column *gone, size_t width) {
    KILN_ASSERT(to == (size_t)dst->count && dst->count < dst->capacity, "row reserved before the move");
    size_t at = (size_t)(bits & (KL_ROWS_MAX - 1));
    size_t tail = (size_t)src->count - 1;
    if (at != tail)
        kl_move_plain_rows(world, src, record, bits, dst, to, tick, added, gone, at, tail, true,
                           width);
    else
        kl_move_plain_rows(world, src, record, bits, dst, to, tick, added, gone, at, tail, false,
                           width);
}

/* kl_archetype_move_plain out of line, for kl_archetype_move (the calls that found no plain
 * edge: one copy of the move there, not one in each caller). */
KL_HIDDEN void kl_archetype_move_plain_call(kiln_world *world, kl_archetype *src,
                                            kl_record *record, kl_archetype *dst,
                                            const kl_column *added, kl_column *gone);

/* Moves the entity at src_row of src into a new row of dst, its neighbour along one
 * component (room must be reserved). The columns of src and dst follow one sorted order and
 * differ at most by that component's column: added (dst's column, or -1), whose value is
 * written from value first (see kl_column_write), or gone (src's column, or -1), whose value
 * is destroyed. Every other value moves with its tick, and src's last row fills the hole.
 * Updates records (record: the moving entity's). Inlined into the add and remove paths,
 * which know added and gone already. */
static inline __attribute__((always_inline)) void
kl_archetype_move(kiln_world *world, kl_archetype *src, int32_t src_row, kl_archetype *dst,
                  int32_t added, int32_t gone, void *value, bool move, kl_record *record) {
    /* The added value first: it may point into the row about to be relocated or into the
     * last row, which the swap-remove moves. */
    if (added >= 0)
        kl_column_write(&dst->columns[added], dst->count, value, move, world->tick,
                        kl_row_tick_now(world), true);
    if (KL_LIKELY(!src->has_hooks)) {
        kl_archetype_move_plain_call(world, src, record, dst,
                                     added >= 0 ? &dst->columns[added] : NULL,
                                     gone >= 0 ? &src->columns[gone] : NULL);
        return;
    }
    kiln_entity e = src->entities[src_row];
    int32_t row = kl_archetype_push(world, dst, e);
    int32_t last = src->count - 1;
    size_t at = (size_t)src_row, tail = (size_t)last, to = (size_t)row;
    world->in_hook++; /* the entity is in both rows while the hooks run (kl_in_hook) */
    if (gone >= 0) kl_archetype_drop_value(src, gone, at, tail);
    kl_archetype_move_hooked(src, dst, added, gone, at, to, tail, world->tick_base);
    world->in_hook--;
    kl_archetype_unlink(world, src, at, tail, record, dst->id, row);
}

/* The rows of arch that hold its entities: count, less its last row while a move's hooks run
 * and that row is the moving entity's new one (kl_archetype_move pushes it there; the entity's
 * record names its old row until the hooks are done). What kiln_world_entities, kiln_query_count
 * and kiln_query_next read, so from a hook the moving entity is counted and visited once. */
static inline int32_t kl_archetype_rows(const kiln_world *world, const kl_archetype *arch) {
    int32_t n = arch->count;
    if (KL_LIKELY(world->in_hook == 0) || n == 0) return n;
    uint64_t bits;
    if (!kl_record_live(world, arch->entities[n - 1], &bits)) return n;
    return kl_bits_archetype(bits) == arch->id && kl_bits_row(bits) == (uint32_t)(n - 1) ? n : n - 1;
}

/* Runs the destroy hook of every live value, every archetype and record still whole: a hook
 * may read the world (list its entities, count or loop a query, get another entity's value). */
KL_HIDDEN void kl_archetypes_destroy_values(kiln_world *world);
/* Frees every archetype (its values destroyed by kl_archetypes_destroy_values before). */
KL_HIDDEN void kl_archetypes_free(kiln_world *world);

#endif
