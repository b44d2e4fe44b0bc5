// cxx_suite.h: how each C++ suite (tests/cxx) runs: one test case of the named tests, every
// failure printed, the exit status 0 only when all passed.
#ifndef KILN_CXX_SUITE_H
#define KILN_CXX_SUITE_H

#include <check.h>

#include <cstddef>

static inline int cxx_run_suite(const char *name, const TTest *const *tests, std::size_t count) {
    Suite *suite = suite_create(name);
    TCase *tc = tcase_create("core");
    for (std::size_t i = 0; i < count; i++) {
        tcase_add_test(tc, tests[i]);
    }
    suite_add_tcase(suite, tc);
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}

#endif
