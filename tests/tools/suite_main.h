/* suite_main.h: a Check suite's main for the tool suites. Test code only. */
#ifndef KILN_TESTS_SUITE_MAIN_H
#define KILN_TESTS_SUITE_MAIN_H

#include <check.h>
#include <signal.h>
#include <stdlib.h>

/* Runs s with SIGPIPE ignored (a connection the other side closed fails a send, not the run);
 * the exit code of main. */
static inline int run_suite(Suite *s) {
    signal(SIGPIPE, SIG_IGN);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
