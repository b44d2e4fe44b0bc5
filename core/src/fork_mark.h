/* fork_mark.h: tells the process that made a mark from a child forked since, without a system
 * call where the kernel can wipe a page in the child (getpid is one, and a pool asks on every
 * submit and wait). */
#ifndef KILN_FORK_MARK_H
#define KILN_FORK_MARK_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct kl_fork_mark {
    const pid_t *page; /* the owner's pid in a page the kernel zeroes in a forked child; or NULL */
    pid_t owner;       /* the process that made the mark, for getpid when there is no such page */
} kl_fork_mark;

/* Makes a mark for the calling process. Never fails: without a page to wipe (an old kernel, a
 * system with no MADV_WIPEONFORK, mmap refused) the mark asks getpid instead. */
void kl_fork_mark_init(kl_fork_mark *mark);
void kl_fork_mark_free(kl_fork_mark *mark);
/* True in a child forked since the mark was made (at any depth). */
bool kl_fork_mark_forked(const kl_fork_mark *mark);

#endif
