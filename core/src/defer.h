/* defer.h: the deferred world as access.c uses it: while a section (or an iteration) is
 * open, structural calls are checked at once and queued, to be applied at the outermost end. */
#ifndef KILN_DEFER_H
#define KILN_DEFER_H

#include "commands.h"
#include "world.h"

/* True inside a deferred section or an iteration. */
static inline bool kl_deferred(const kiln_world *world) {
    return atomic_load_explicit(&((kiln_world *)world)->defer_depth, memory_order_relaxed) > 0;
}

/* True, while a schedule runs a shared stage on world, on a thread other than the stage's (a
 * worker), where a deferred call would append to a queue, or take an entity slot, while that
 * thread and other workers do the same (queue_of reads a target the stage thread rewrites); and
 * on the stage's thread unless a main_thread system runs there, itself: not a worker system run
 * there (a stage of one, no room on the pool), nor a job of the pool that thread took up while
 * waiting (for its stage, or in a main_thread system's kiln_jobs_wait or kiln_parallel_for), so
 * a worker system or a job is refused whichever thread runs it. One load and a branch, paid by
 * deferred calls only: an immediate call never runs during such a stage. */
static inline bool kl_off_stage_thread(const kiln_world *world) {
    return atomic_load_explicit(&((kiln_world *)world)->in_stage, memory_order_relaxed) &&
           (!pthread_equal(pthread_self(), world->stage_thread) || !world->stage_main ||
            world->stage_watch.inline_jobs > 0);
}

/* Fails with KILN_ERR_INVALID_ARGUMENT for call made on such a thread, naming the component c (0:
 * none) and entity e (KILN_NULL_ENTITY: a spawn), or the event type when event is set. */
KL_HIDDEN kiln_result kl_fail_off_stage(kiln_world *world, const char *call, kiln_entity e,
                                        kiln_component c, bool event);

/* Fails with KILN_ERR_INVALID_ARGUMENT for call, which registers a teardown hook (kiln_world_atfini,
 * an addon's init), made on such a thread: the hook table has one writer, the stage's thread. */
KL_HIDDEN kiln_result kl_fail_atfini_off_stage(kiln_world *world, const char *call);

/* Fails with KILN_ERR_INVALID_ARGUMENT for call, which registers a component or event type or
 * makes or destroys a query, made on such a thread: those registries, read by every thread
 * without a lock, have one writer, the stage's thread. Checked in every build. */
KL_HIDDEN kiln_result kl_fail_register_off_stage(kiln_world *world, const char *call);

/* Queues a spawn: checks the list and values, reserves a handle (written to dest, may be
 * NULL) that becomes alive when the queue lands. */
KL_HIDDEN kiln_result kl_defer_spawn(kiln_world *world, const char *call,
                                     const kiln_component *components, const void *const *values,
                                     int32_t count, kiln_entity *dest);

/* Queues n spawns with the components' defaults, all or nothing. */
KL_HIDDEN kiln_result kl_defer_spawn_batch(kiln_world *world, const char *call,
                                           const kiln_component *components, int32_t count,
                                           int32_t n, kiln_entity *dest);

/* Opens a section no thread owns, for a caller that ends it itself with kl_defer_end (a loop, a
 * schedule run, a save): unlike kiln_defer_begin, no kiln_defer_end of the thread may end it. */
static inline void kl_defer_open(kiln_world *world) {
    atomic_fetch_add_explicit(&world->defer_depth, 1, memory_order_relaxed);
}

/* Ends a section kl_defer_open opened (or one a system left open), with call naming the public
 * function in messages: kiln_defer_end without the check of whose section it is. */
KL_HIDDEN kiln_result kl_defer_end(kiln_world *world, const char *call);

/* Frees the table of the threads beyond the fast slots (world destroy). */
KL_HIDDEN void kl_defer_free(kiln_world *world);

/* How many kiln_defer_begin sections of the calling thread are open on world (slotless: 0), and
 * forgetting those above keep: a schedule ends what a system left open, on its own thread. */
KL_HIDDEN int32_t kl_defer_owned(const kiln_world *world);
KL_HIDDEN void kl_defer_disown(kiln_world *world, int32_t keep);

/* Queues a despawn of a live or reserved entity; with keep (count > 0, copied), one that
 * kiln_despawn_unless refuses as it lands while the entity holds one of them. */
KL_HIDDEN kiln_result kl_defer_despawn(kiln_world *world, const char *call, kiln_entity e);
KL_HIDDEN kiln_result kl_defer_despawn_unless(kiln_world *world, const char *call, kiln_entity e,
                                              const kiln_component *keep, int32_t count);

/* Queues an add, set or remove (op) on a live or reserved entity; add and set run the
 * component's check hook on value now (and again when the queue lands). */
KL_HIDDEN kiln_result kl_defer_write(kiln_world *world, const char *call, kl_op op, kiln_entity e,
                                     kiln_component c, const void *value);

/* The length of the queue deferred calls go to, and dropping what was queued after such a
 * mark: for a call that queues several despawns and must leave nothing when one fails. */
KL_HIDDEN int64_t kl_defer_mark(const kiln_world *world);
KL_HIDDEN void kl_defer_rollback(kiln_world *world, int64_t mark);

/* The queue deferred calls go to now (the running main-thread system's buffer, or the
 * world's), for a caller that fills queued values in afterwards (kl_commands_value_at). */
KL_HIDDEN kiln_commands *kl_defer_queue(const kiln_world *world);

#endif
