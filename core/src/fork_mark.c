/* fork_mark.c: a mark telling its process from a forked child. The pid sits in a page advised
 * MADV_WIPEONFORK, which a child sees as zeroes, so asking costs a load, not a system call. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MADV_WIPEONFORK (before any system header) */
#include "fork_mark.h"

#include <sys/mman.h>
#include <unistd.h>

#include "internal.h" /* its build checks: -ffast-math refused */

void kl_fork_mark_init(kl_fork_mark *mark) {
    mark->owner = getpid();
    mark->page = NULL;
#if defined(MADV_WIPEONFORK) && defined(MAP_ANONYMOUS)
    long size = sysconf(_SC_PAGESIZE);
    if (size <= 0) return;
    void *page = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return;
    if (madvise(page, (size_t)size, MADV_WIPEONFORK) != 0) { /* a kernel before 4.14 */
        munmap(page, (size_t)size);
        return;
    }
    *(pid_t *)page = mark->owner;
    mark->page = page;
#endif
}

void kl_fork_mark_free(kl_fork_mark *mark) {
#if defined(MADV_WIPEONFORK) && defined(MAP_ANONYMOUS)
    if (mark->page) munmap((void *)mark->page, (size_t)sysconf(_SC_PAGESIZE));
#endif
    mark->page = NULL;
}

bool kl_fork_mark_forked(const kl_fork_mark *mark) {
    /* the owner's pid is never 0, and a child's copy of the page reads 0 */
    return mark->page ? *mark->page != mark->owner : getpid() != mark->owner;
}
