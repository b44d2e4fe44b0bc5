/* c_stack.c: how much of the running thread's C stack is left, asked before a call crosses
 * from one Lua state into another. Invariant: a stack it cannot measure is never short. */
#define _GNU_SOURCE /* pthread_getattr_np */
#include "mods.h"

#if defined(__GLIBC__)
#include <pthread.h>

/* Each state counts only its own nested C calls (Lua 5.4 stops one at 200, some 200 KiB of C
 * stack at worst), so calls nesting states add up what no state sees. The reserve is what the
 * callee may use; on a thread of under 4 MiB, a quarter of its stack. */
bool klua_c_stack_short(size_t reserve) {
    static _Thread_local char *low;     /* the lowest address of this thread's stack */
    static _Thread_local size_t size;   /* its size, 0 unknown */
    static _Thread_local bool measured;
    if (!measured) {
        pthread_attr_t attr;
        void *addr = NULL;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &addr, &size) != 0) size = 0;
            pthread_attr_destroy(&attr);
        }
        low = addr;
        if (!low) size = 0;
        measured = true;
    }
    if (size == 0) return false;
    if (size < ((size_t)4 << 20) && reserve > size / 4) reserve = size / 4;
    char here;
    return (size_t)(&here - low) < reserve;
}
#else
bool klua_c_stack_short(size_t reserve) {
    (void)reserve;
    return false;
}
#endif
