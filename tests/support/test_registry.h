/* test_registry.h: the one way a kiln C suite declares its tests: KILN_TEST defines a Check test
 * and registers it in the same breath, so no test can exist without running. */
#ifndef KILN_TEST_REGISTRY_H
#define KILN_TEST_REGISTRY_H

#include <check.h>

/*
 * Macros in this header:
 *   KILN_TEST_GROUP, KILN_TEST_GROUP_WITH, KILN_TEST, KILN_TEST_LOOP, KILN_TEST_SIGNAL.
 * Functions: test_registry_add_group, test_registry_add_case (called by the macros only).
 *
 * A suite file declares its groups (one Check TCase each), then its tests:
 *
 *     KILN_TEST_GROUP_WITH(apply, .setup = setup, .teardown = teardown, .timeout = 30);
 *     KILN_TEST(apply, apply_runs_commands_in_recording_order) { ... }
 *
 * The shared main (test_registry.c) builds one Suite named after the binary, one TCase per
 * group in declaration order with its tests in file order, and runs it with srunner.
 */

/* A group of tests: one TCase. Zero fields mean Check's defaults. setup and teardown run as a
 * checked fixture: in the test's own process, around every test of the group, and a failed
 * assertion in them fails that test. */
typedef struct test_group {
    const char *name;
    const char *file;
    int line;
    void (*setup)(void);
    void (*teardown)(void);
    double timeout;            /* seconds; 0: Check's default (CK_DEFAULT_TIMEOUT) */
    struct test_group *next;   /* registry links, filled at registration */
    int test_count;
} test_group;

/* One registered test. The ranges are those of Check's _tcase_add_test. */
typedef struct test_case {
    const TTest *test;
    test_group *group;
    int signal;                /* the signal the test must raise; 0: none */
    int loop_start, loop_end;  /* runs for _i in [start, end) */
    struct test_case *next;
} test_case;

void test_registry_add_group(test_group *group);
void test_registry_add_case(test_case *test);

/* Declares a group with Check's defaults / with options given as designated initializers
 * (.setup, .teardown, .timeout). A test naming an undeclared group does not compile. */
#define KILN_TEST_GROUP(group_) KILN_TEST_GROUP_WITH(group_, .timeout = 0)
#define KILN_TEST_GROUP_WITH(group_, ...)                                                     \
    static test_group group_##_test_group = {                                                 \
        .name = #group_, .file = __FILE__, .line = __LINE__, __VA_ARGS__};                    \
    __attribute__((constructor)) static void group_##_test_group_register(void) {            \
        test_registry_add_group(&group_##_test_group);                                        \
    }                                                                                         \
    struct test_group

/* The body follows the macro as a function body; `_i` is the loop index (0 outside loops). */
#define KILN_TEST_REGISTER_(group_, name_, signal_, start_, end_)                             \
    static void name_##_fn(int _i CK_ATTRIBUTE_UNUSED);                                        \
    static const TTest name_##_ttest = {#name_, name_##_fn, __FILE__, __LINE__};               \
    static test_case name_##_case = {                                                         \
        .test = &name_##_ttest, .group = &group_##_test_group, .signal = (signal_),           \
        .loop_start = (start_), .loop_end = (end_)};                                          \
    __attribute__((constructor)) static void name_##_register(void) {                        \
        test_registry_add_case(&name_##_case);                                                \
    }                                                                                         \
    static void name_##_fn(int _i CK_ATTRIBUTE_UNUSED)

/* A test that must pass. */
#define KILN_TEST(group_, name_) KILN_TEST_REGISTER_(group_, name_, 0, 0, 1)
/* A test run once for each _i in [start_, end_). */
#define KILN_TEST_LOOP(group_, name_, start_, end_)                                           \
    KILN_TEST_REGISTER_(group_, name_, 0, start_, end_)
/* A test that passes only if it dies of signal_ (an assertion that must abort). */
#define KILN_TEST_SIGNAL(group_, name_, signal_) KILN_TEST_REGISTER_(group_, name_, signal_, 0, 1)

/* Check's own registration would let a test exist without being run: suites may not use it. */
#ifndef KILN_TEST_REGISTRY_MAIN
#undef START_TEST
#define START_TEST(name_) _Static_assert(0, "declare tests with KILN_TEST(group, name)")
#undef tcase_add_test
#define tcase_add_test(tc_, name_) _Static_assert(0, "tests register themselves: KILN_TEST")
#endif

#endif /* KILN_TEST_REGISTRY_H */
