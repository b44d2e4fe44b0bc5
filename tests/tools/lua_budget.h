/* lua_budget.h: a counting allocator for the suites that run a Lua state (and a world) out of
 * memory at every allocation in turn (test_persist_lua_memory.c, test_commands_lua_memory.c).
 * Test code only. */
#ifndef KILN_TESTS_LUA_BUDGET_H
#define KILN_TESTS_LUA_BUDGET_H

#include <stdint.h>
#include <stdlib.h>

/* A lua_Alloc / kiln_alloc_fn counting live bytes that refuses growth once `left` reaches 0
 * (left < 0: never). */
typedef struct budget {
    int64_t left;
    int64_t live, peak;
} budget;

static inline void *budget_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    budget *b = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        b->live -= (int64_t)old;
        free(ptr);
        return NULL;
    }
    if (nsize > old && b->left == 0) return NULL;
    if (nsize > old && b->left > 0) b->left--;
    void *p = realloc(ptr, nsize);
    if (!p) return NULL;
    b->live += (int64_t)nsize - (int64_t)old;
    if (b->live > b->peak) b->peak = b->live;
    return p;
}

#endif
