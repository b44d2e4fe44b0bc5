/* test_fork_mark.c: Check suite for kl_fork_mark, which tells a job pool's process from a child
 * forked since: through a page the kernel wipes in the child, or getpid where there is none. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/src/fork_mark.h"
#include "test_registry.h"

/* The exit code of a child asking mark (1: forked, 0: not), and of a grandchild asking it too
 * (+2 when the grandchild says forked). */
static int child_says(const kl_fork_mark *mark) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int code = kl_fork_mark_forked(mark) ? 1 : 0;
        pid_t grandchild = fork();
        if (grandchild == 0) _exit(kl_fork_mark_forked(mark) ? 2 : 0);
        int status = 0;
        if (grandchild < 0 || waitpid(grandchild, &status, 0) != grandchild || !WIFEXITED(status)) _exit(9);
        _exit(code + WEXITSTATUS(status));
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "the child was ended by signal %d", WTERMSIG(status));
    return WEXITSTATUS(status);
}

KILN_TEST_GROUP(fork_mark);

KILN_TEST(fork_mark, a_child_and_its_child_are_told_from_the_process_that_made_the_mark) {
    kl_fork_mark mark;
    kl_fork_mark_init(&mark);
    ck_assert(!kl_fork_mark_forked(&mark));
    ck_assert_int_eq(child_says(&mark), 3);
    ck_assert(!kl_fork_mark_forked(&mark)); /* the parent's page is not wiped by the fork */
    kl_fork_mark_free(&mark);
}

/* Where the kernel cannot wipe a page the mark asks getpid: the same answers. */
KILN_TEST(fork_mark, without_a_page_to_wipe_the_mark_asks_getpid) {
    kl_fork_mark mark;
    kl_fork_mark_init(&mark);
    kl_fork_mark_free(&mark); /* leaves the owner: the fallback's state */
    ck_assert_ptr_null(mark.page);
    ck_assert(!kl_fork_mark_forked(&mark));
    ck_assert_int_eq(child_says(&mark), 3);
}

/* The point of the page: a pool asks on every submit and wait, and a system call there cost
 * microseconds on virtual machines. Linux has had MADV_WIPEONFORK since 4.14. */
KILN_TEST(fork_mark, linux_since_4_14_answers_from_the_page_without_a_system_call) {
#ifdef __linux__
    struct utsname u;
    int major = 0, minor = 0;
    ck_assert_int_eq(uname(&u), 0);
    if (sscanf(u.release, "%d.%d", &major, &minor) != 2 || major < 4 || (major == 4 && minor < 14)) {
        fprintf(stderr, "skipped: kernel %s has no MADV_WIPEONFORK\n", u.release);
        return;
    }
    kl_fork_mark mark;
    kl_fork_mark_init(&mark);
    ck_assert_msg(mark.page != NULL, "no wiped page on kernel %s: every ask is a getpid", u.release);
    kl_fork_mark_free(&mark);
#endif
}
