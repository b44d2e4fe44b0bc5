/* test_registry.c: the registry KILN_TEST fills before main, and the one main of every C suite.
 * Groups run in declaration order and tests in file order, whatever order registration ran in. */
#define KILN_TEST_REGISTRY_MAIN
#include "test_registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static test_group *groups;
static test_case *cases;
static int group_count, case_count;

void test_registry_add_group(test_group *group) {
    group->next = groups;
    groups = group;
    group_count++;
}

void test_registry_add_case(test_case *test) {
    test->next = cases;
    cases = test;
    case_count++;
}

static int compare_places(const char *file_a, int line_a, const char *file_b, int line_b) {
    int by_file = strcmp(file_a, file_b);
    if (by_file != 0) return by_file;
    return (line_a > line_b) - (line_a < line_b);
}

static int compare_groups(const void *a, const void *b) {
    const test_group *x = *(test_group *const *)a, *y = *(test_group *const *)b;
    return compare_places(x->file, x->line, y->file, y->line);
}

static int compare_cases(const void *a, const void *b) {
    const test_case *x = *(test_case *const *)a, *y = *(test_case *const *)b;
    return compare_places(x->test->file, x->test->line, y->test->file, y->test->line);
}

/* "build/tests/test_commands_apply" -> "commands_apply". */
static const char *suite_name(const char *argv0) {
    const char *base = strrchr(argv0, '/');
    base = base != NULL ? base + 1 : argv0;
    return strncmp(base, "test_", 5) == 0 && base[5] != '\0' ? base + 5 : base;
}

int main(int argc, char **argv) {
    test_group **group_list = calloc((size_t)group_count + 1, sizeof *group_list);
    test_case **case_list = calloc((size_t)case_count + 1, sizeof *case_list);
    TCase **tcases = calloc((size_t)group_count + 1, sizeof *tcases);
    if (group_list == NULL || case_list == NULL || tcases == NULL) {
        fprintf(stderr, "test registry: out of memory\n");
        return EXIT_FAILURE;
    }
    int n = 0;
    for (test_group *g = groups; g != NULL; g = g->next) group_list[n++] = g;
    qsort(group_list, (size_t)group_count, sizeof *group_list, compare_groups);
    n = 0;
    for (test_case *c = cases; c != NULL; c = c->next) case_list[n++] = c;
    qsort(case_list, (size_t)case_count, sizeof *case_list, compare_cases);

    Suite *suite = suite_create(suite_name(argc > 0 ? argv[0] : "kiln"));
    for (int i = 0; i < group_count; i++) {
        test_group *g = group_list[i];
        tcases[i] = tcase_create(g->name);
        if (g->setup != NULL || g->teardown != NULL)
            tcase_add_checked_fixture(tcases[i], g->setup, g->teardown);
        if (g->timeout > 0) tcase_set_timeout(tcases[i], g->timeout);
    }
    for (int i = 0; i < case_count; i++) {
        test_case *c = case_list[i];
        int g = 0;
        while (g < group_count && group_list[g] != c->group) g++;
        if (g == group_count) {
            fprintf(stderr, "%s:%d: test %s names a group that was never declared\n",
                    c->test->file, c->test->line, c->test->name);
            return EXIT_FAILURE;
        }
        c->group->test_count++;
        _tcase_add_test(tcases[g], c->test, c->signal, 0, c->loop_start, c->loop_end);
    }
    /* A declared group left empty is a test that went missing when a file was split. */
    for (int i = 0; i < group_count; i++) {
        if (group_list[i]->test_count == 0) {
            fprintf(stderr, "%s:%d: test group %s has no tests\n", group_list[i]->file,
                    group_list[i]->line, group_list[i]->name);
            return EXIT_FAILURE;
        }
        suite_add_tcase(suite, tcases[i]);
    }
    if (case_count == 0) {
        fprintf(stderr, "no tests registered\n");
        return EXIT_FAILURE;
    }

    SRunner *runner = srunner_create(suite);
    /* CK_ENV: CK_VERBOSITY=verbose lists every test; the default prints the summary line. */
    srunner_run_all(runner, CK_ENV);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    free(group_list);
    free(case_list);
    free(tcases);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
