/* test_fuzz_corpus.c: the fuzz inputs kept in the repository, replayed as a plain suite (no
 * libFuzzer): every seed and regression input keeps the world equal to the model, also with an
 * allocation failure injected at each of its allocation indexes. */
#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "test_registry.h"

#ifndef KILN_FUZZ_DIR
#define KILN_FUZZ_DIR "tests/fuzz"
#endif

/* Inputs making more allocation requests than this are replayed once, without the sweep. */
#define SWEEP_LIMIT 600

KILN_TEST_GROUP_WITH(corpus, .timeout = 600);

KILN_TEST(corpus, every_seed_input_keeps_the_world_equal_to_the_model) {
    fuzz_replay_stats stats = {0, 0, 0};
    ck_assert_msg(fuzz_replay_path(KILN_FUZZ_DIR "/corpus", SWEEP_LIMIT, &stats), "no seed corpus");
    ck_assert_int_ge(stats.inputs, 10);
    ck_assert_int_ge(stats.swept, 1);
}

KILN_TEST(corpus, every_regression_input_keeps_the_world_equal_to_the_model) {
    fuzz_replay_stats stats = {0, 0, 0};
    ck_assert_msg(fuzz_replay_path(KILN_FUZZ_DIR "/regressions", SWEEP_LIMIT, &stats),
                  "no regression inputs");
    ck_assert_int_ge(stats.inputs, 1);
}

/* The comparison is not vacuous: a model that drifts from the world aborts the run. */
KILN_TEST_SIGNAL(corpus, a_model_that_drifts_from_the_world_aborts_the_run, SIGABRT) {
    static const uint8_t input[] = {0, 0, 0, 10};
    fuzz_sabotage = true;
    if (!freopen("/dev/null", "w", stderr)) abort(); /* the expected report is noise here */
    fuzz_run(input, sizeof input, -1, false);
}
