/* c_stack.c: how much of the running thread's C stack is left, asked before a call crosses
 * from one Lua state into another. Invariant: a stack it cannot measure is never short. */
#define _GNU_SOURCE /* pthread_getattr_np */
#include "mods.h"

#if defined(__GLIBC__)
/* Each state counts only its own nested C calls (Lua 5.4 stops one at 200: 190 __tostring calls
 * through string.format took some 330 KiB), so calls nesting states add up what no state sees.
 * The reserve is what the callee may use; on a thread of under 4 MiB, a quarter of its stack
 * but never under STATE_C_STACK (a quarter of 512 KiB let the third of a chain of such mods run
 * the process out of stack), so a thread of 512 KiB or less refuses every crossing. The bounds
 * are kept by the manager (measuring the main thread reads /proc/self/maps), per the thread. */
#define STATE_C_STACK ((size_t)512 << 10)

bool klua_c_stack_short(klua_c_stack *stack, size_t reserve) {
    if (!stack->measured || !pthread_equal(stack->thread, pthread_self())) {
        pthread_attr_t attr;
        void *addr = NULL;
        stack->size = 0;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &addr, &stack->size) != 0) stack->size = 0;
            pthread_attr_destroy(&attr);
        }
        stack->low = addr;
        if (!stack->low) stack->size = 0;
        stack->thread = pthread_self();
        stack->measured = true;
    }
    if (stack->size == 0) return false;
    size_t size = stack->size;
    size_t most = size / 4 > STATE_C_STACK ? size / 4 : STATE_C_STACK;
    if (reserve > most) reserve = most;
    char here;
    return (size_t)(&here - stack->low) < reserve;
}
#else
bool klua_c_stack_short(klua_c_stack *stack, size_t reserve) {
    (void)stack;
    (void)reserve;
    return false;
}
#endif
