/* bench_transform.h: benchmark cases for transform propagation, each against a plain cglm
 * compose loop over arrays (or, for the parallel case, the same propagation run inline).
 *
 * Functions in this header:
 *   run_propagate_roots, run_propagate_changed, run_propagate_parallel, run_propagate_unchanged.
 */
#ifndef BENCH_TRANSFORM_H
#define BENCH_TRANSFORM_H

#include "bench_core.h"

void run_propagate_roots(const bench_config *config, bench_result *dest);
void run_propagate_changed(const bench_config *config, bench_result *dest);
void run_propagate_parallel(const bench_config *config, bench_result *dest);
void run_propagate_unchanged(const bench_config *config, bench_result *dest);

#endif /* BENCH_TRANSFORM_H */
