/* c_stack.c: how much of the running thread's C stack is left, asked before a call crosses
 * from one Lua state into another. Invariant: a stack it cannot measure is never short. */
#define _GNU_SOURCE /* pthread_getattr_np */
#include "mods.h"

#if defined(__GLIBC__)
/* Each state counts only its own nested C calls (Lua 5.4 stops one at 200, some 200 KiB of C
 * stack at worst), so calls nesting states add up what no state sees. The reserve is what the
 * callee may use; on a thread of under 4 MiB, a quarter of its stack. The bounds are kept by
 * the manager (measuring the main thread reads /proc/self/maps), per the thread that asked. */
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
    if (size < ((size_t)4 << 20) && reserve > size / 4) reserve = size / 4;
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
