/* spin.h: a lock held for short sections that threads rarely contend for (a world's resource
 * table, an index that readers on several threads catch up). */
#ifndef KILN_SPIN_H
#define KILN_SPIN_H

#include <stdatomic.h>

static inline void kl_spin_lock(atomic_flag *lock) {
    while (atomic_flag_test_and_set_explicit(lock, memory_order_acquire)) {
    }
}

static inline void kl_spin_unlock(atomic_flag *lock) {
    atomic_flag_clear_explicit(lock, memory_order_release);
}

#endif
