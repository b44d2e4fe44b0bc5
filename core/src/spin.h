/* spin.h: a lock held for short sections that threads rarely contend for (a world's resource
 * table, an index that readers on several threads catch up), and the processor's spin hint.
 * A waiter spins a little, then gives its time slice away: the holder may be a thread the
 * system took off the processor (more threads than cores), or an index rebuilding for
 * milliseconds, and a waiter that only spins would burn the slice the holder needs. */
#ifndef KILN_SPIN_H
#define KILN_SPIN_H

#include <sched.h>
#include <stdatomic.h>

enum { KL_SPIN_TRIES = 128 }; /* tries with the spin hint before a waiter yields */

/* Tells the processor this is a busy-wait loop (fewer memory-order stalls, the sibling
 * hyperthread gets the core); nothing where no such hint is known. */
static inline void kl_spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline void kl_spin_lock(atomic_flag *lock) {
    for (unsigned tries = 0; atomic_flag_test_and_set_explicit(lock, memory_order_acquire); tries++) {
        if (tries < KL_SPIN_TRIES) kl_spin_pause();
        else sched_yield();
    }
}

static inline void kl_spin_unlock(atomic_flag *lock) {
    atomic_flag_clear_explicit(lock, memory_order_release);
}

#endif
