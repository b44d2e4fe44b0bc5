/* guard.h: the declared access of C systems, checked in debug builds: while a schedule runs a
 * system, its calls on the world must stay within its reads, writes and thread. */
#ifndef KILN_GUARD_H
#define KILN_GUARD_H

#include "world.h"

/* KILN_ACCESS_CHECKS 1 checks, 0 compiles every check away; by default on unless NDEBUG. */
#ifndef KILN_ACCESS_CHECKS
#ifdef NDEBUG
#define KILN_ACCESS_CHECKS 0
#else
#define KILN_ACCESS_CHECKS 1
#endif
#endif

/* A thread running a system of the schedule that runs on the world now. */
typedef struct kl_guard_slot {
    _Atomic(uintptr_t) thread; /* the thread (kl_thread_self), 0 when the slot is free */
    _Atomic(uint64_t) token;   /* its token: a later thread given the same address has another */
    const struct kl_system *system; /* read and written only by that thread */
    bool range; /* system's kiln_parallel_for range runs: it may not change the world */
} kl_guard_slot;

#define KL_GUARD_SLOTS 32

/* What kl_guard_enter saved, for kl_guard_leave to put back (a system may run another's job
 * on its thread while it waits for its own). */
typedef struct kl_guard_frame {
    kl_guard_slot *slot;
    const struct kl_system *previous;
    bool previous_range;
} kl_guard_frame;

typedef enum kl_access {
    KL_READ,       /* a value read: needs reads or writes */
    KL_WRITE,      /* a value written in place: needs writes */
    KL_STRUCTURAL, /* a change queued through the deferred world: not from a worker thread */
    KL_EMIT,       /* an event emitted through the world (component: the event type) */
    KL_REGISTER,   /* a component or event type registered: not from a worker thread */
    KL_QUERIES,    /* a query created or destroyed (the world's query list): not from a worker */
} kl_access;

#if KILN_ACCESS_CHECKS
/* Marks the calling thread as running sys (of the schedule running on world), or when range
 * is set one of the kiln_parallel_for ranges sys started, until kl_guard_leave; a thread
 * beyond KL_GUARD_SLOTS of them runs unchecked. */
KL_HIDDEN void kl_guard_enter(const kiln_world *world, const struct kl_system *sys, bool range,
                              kl_guard_frame *frame);
KL_HIDDEN void kl_guard_leave(const kl_guard_frame *frame);

/* The system the calling thread runs for the schedule running on world, or NULL. */
KL_HIDDEN const struct kl_system *kl_guard_system(const kiln_world *world);

/* Fails loudly (the message kept as the world error, then KILN_PANIC) naming call, the system
 * and the component when the system the calling thread runs may not make this access of
 * component (0 for none: then entity, or a spawn, is named). Exclusive systems (but for the
 * changes their ranges make), code outside any system and threads the schedule did not start
 * a system on are not checked. */
KL_HIDDEN void kl_guard_check_slow(const kiln_world *world, const char *call, kl_access access,
                                   kiln_component component, kiln_entity entity);

static inline void kl_guard_check(const kiln_world *world, const char *call, kl_access access,
                                  kiln_component component, kiln_entity entity) {
    if (atomic_load_explicit(&((kiln_world *)world)->guard, memory_order_acquire) != NULL)
        kl_guard_check_slow(world, call, access, component, entity);
}

/* Fails loudly with the world's error as the message (KILN_PANIC): for checks kept elsewhere
 * (the stale resource pointers of resource.c). */
KL_HIDDEN void kl_guard_panic(const kiln_world *world);
#else
static inline void kl_guard_enter(const kiln_world *world, const struct kl_system *sys,
                                  bool range, kl_guard_frame *frame) {
    (void)world, (void)sys, (void)range, (void)frame;
}
static inline void kl_guard_leave(const kl_guard_frame *frame) { (void)frame; }
static inline const struct kl_system *kl_guard_system(const kiln_world *world) {
    (void)world;
    return NULL;
}
static inline void kl_guard_check(const kiln_world *world, const char *call, kl_access access,
                                  kiln_component component, kiln_entity entity) {
    (void)world, (void)call, (void)access, (void)component, (void)entity;
}
#endif

#endif
