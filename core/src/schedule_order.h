/* schedule_order.h: a schedule's stored systems and how they are ordered into stages.
 * Invariant: the before/after constraints between live systems never form a cycle. */
#ifndef KILN_SCHEDULE_ORDER_H
#define KILN_SCHEDULE_ORDER_H

#include <pthread.h>
#include <stdatomic.h>

#include "guard.h"
#include "hashmap.h"
#include "internal.h"

#define KL_NAME_SIZE (KILN_MAX_NAME + 1)

typedef struct kl_system {
    char name[KL_NAME_SIZE];
    kiln_system_fn run;
    kiln_fini_fn fini;      /* called with (world, user) once the system has left */
    void *user;
    kiln_component reads[KILN_SYSTEM_MAX_ACCESS];
    kiln_component writes[KILN_SYSTEM_MAX_ACCESS];
    int32_t read_count, write_count;
    uint32_t known_components; /* registered when it was added: the ones it could declare */
    char before[KILN_SYSTEM_MAX_ORDER][KL_NAME_SIZE];
    char after[KILN_SYSTEM_MAX_ORDER][KL_NAME_SIZE];
    int32_t before_count, after_count;
    bool exclusive, main_thread, enabled;
    bool run_now;           /* enabled when its stage started: a toggle mid-stage counts next frame */
    int32_t defer_left;     /* deferred sections its last run left open (see close_left_sections) */
    int32_t iter_left;      /* iterations its last run left open (the same) */
    atomic_bool removing;   /* removed during a run: skipped, unfindable, gone when the run ends */
    int32_t stage;
    uint32_t reached;       /* the cycle check that reached it last (kiln_schedule.check) */
    kiln_commands *commands;
    kiln_system_ctx ctx;
    /* Written by the thread that ran the system, read by info on any thread (relaxed). */
    _Atomic(int64_t) runs, last_ns, total_ns;
    struct kl_system *next_spare; /* the schedule's list of records kept for reuse */
} kl_system;

/* For each after name, the counted systems whose after list holds it: chains of links, one link
 * per after name of a system, reached by the name's hash (names of one hash share a chain, so
 * readers check the system's list; so they do while a replace is checked, when the old
 * system's links stand for the new one). Many systems after one name cost one map entry. */
typedef struct kl_after_link {
    int32_t sys;  /* the system's index */
    int32_t next; /* the next link of the chain, or -1 */
} kl_after_link;

typedef struct kl_after_index {
    kl_map chains;        /* kl_schedule_key(name) -> index + 1 into heads */
    int32_t *heads;       /* a chain's first link */
    int64_t head_cap;
    int32_t head_count;
    kl_after_link *links;
    int64_t link_cap;
    int32_t link_count;
} kl_after_index;

/* A slot of a schedule's table of waiting names a cycle check reached: its name counts while
 * check is the check under way. The table outlives a check, so none clears it. */
typedef struct kl_waiting {
    const char *name;
    uint32_t check;
} kl_waiting;

struct kiln_schedule {
    kiln_world *world;
    kiln_jobs *jobs;
    kl_system **systems;   /* declaration order */
    int64_t system_cap;
    int32_t system_count;
    kl_map names;          /* kl_schedule_key(name) -> index + 1, one entry per counted system */
    kl_after_index afters; /* who names whom in an after list, for the cycle check */
    int64_t constraint_total; /* before and after names of the counted systems */
    uint32_t check;        /* the cycle check under way, or the last (marks reached nodes) */
    kl_waiting *waiting;   /* waiting names reached, open-addressed by hash */
    uint32_t waiting_cap;  /* a power of two, at least twice the names that could wait, or 0 */
    kl_system *spares;     /* removed records (with their empty buffers), reused by add */
    atomic_flag lock;      /* guards systems against calls from worker systems during a run */
    bool running;          /* inside kiln_schedule_run */
    int32_t in_fini;       /* > 0 while a system's fini runs: kiln_schedule_destroy then asserts */
    pthread_t run_thread;  /* the thread running it, while running */
    bool may_add;          /* a main_thread or exclusive system runs on run_thread */
    int32_t removals;      /* systems marked removing during this run */
    bool built;
    int32_t stage_count;
    int32_t *order;        /* system indices sorted by (stage, declaration) */
    int64_t order_cap;
    int32_t *stage_start;  /* stage s runs order[stage_start[s] .. stage_start[s + 1]) */
    int64_t stage_cap;
    kiln_job *job_list;
    int64_t job_cap;
    kl_error_slots errors; /* its pool threads' error messages while it runs (world.h) */
    void *scratch;         /* graph memory of builds and cycle checks, kept for the next one */
    size_t scratch_size;
#if KILN_ACCESS_CHECKS
    kl_guard_slot guard_slots[KL_GUARD_SLOTS]; /* threads running its systems (guard.c) */
#endif
};

/* The index of the live (not removing) system named name among the first count, or -1.
 * Expected O(1) through names (a candidate stored past system_count is looked at in turn). */
KL_HIDDEN int32_t kl_schedule_lookup(const kiln_schedule *s, const char *name, int32_t count);

/* The key of a system name in the schedule's maps and its table of waiting names: hashed with
 * the world's seed, so names a mod picked to share a slot under a fixed hash spread. Nothing
 * walks these tables into an order: systems keep declaration order. Never 0. */
KL_HIDDEN uint32_t kl_schedule_key(const kiln_schedule *s, const char *name);

/* The slots of the name index a look-up of name reads (the whole run under its hash): tests
 * count what names picked to collide cost. */
KL_HIDDEN uint32_t kl_schedule_name_slots(const kiln_schedule *s, const char *name);

/* Makes room for extra more after names in the schedule's afters index. False when out of
 * memory (nothing changed that matters). */
KL_HIDDEN bool kl_schedule_reserve_afters(kiln_schedule *s, int32_t extra);

/* Adds the after names of the system at index i to the afters index (room reserved). */
KL_HIDDEN void kl_schedule_index_afters(kiln_schedule *s, int32_t i);

/* Puts every counted system into names and afters again, and counts constraint_total, after
 * systems left or were replaced. Allocates nothing: the indexes have room for what they held
 * (a replace reserves its new after names first). */
KL_HIDDEN void kl_schedule_reindex(kiln_schedule *s);

/* With a candidate system stored at systems[candidate] (an add's past the counted ones, not
 * yet in the name index; a replace's in the place of the system of its name), fails with
 * KILN_ERR_INVALID_ARGUMENT when the before/after constraints among the first count live
 * systems form a cycle, naming the shortest cycle through the candidate as
 * "kiln_schedule_add: 'a' -> 'b' -> 'a' would form a cycle" (-> reads "runs before");
 * KILN_ERR_OUT_OF_MEMORY when scratch memory could not grow. Changes nothing else.
 * Searches only what the candidate reaches, names resolved through the indexes; nothing is
 * cleared per call (marks carry the check's number). */
KL_HIDDEN kiln_result kl_schedule_check_cycle(kiln_schedule *s, int32_t count, int32_t candidate, const char *fn);

/* Points *mem at the schedule's scratch memory, at least bytes of it, kept between calls so a
 * schedule that changes and rebuilds in a steady state allocates nothing (the build and the
 * cycle check share it); KILN_ERR_OUT_OF_MEMORY naming call otherwise. */
KL_HIDDEN kiln_result kl_schedule_scratch(kiln_schedule *s, size_t bytes, void **mem, const char *call);

/* Computes every system's stage and the run order; on failure (out of memory) the previous
 * layout is kept and the world error names kiln_schedule_build. */
KL_HIDDEN kiln_result kl_schedule_order(kiln_schedule *s);

#endif
