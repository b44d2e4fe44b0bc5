/* bench_named_load.h: the benchmark case for a load of named entities into a world that never
 * had Name (the load registers it last) against the same load into a world that has it.
 *
 * Functions in this header:
 *   run_load_named_first.
 */
#ifndef BENCH_NAMED_LOAD_H
#define BENCH_NAMED_LOAD_H

#include "bench_core.h"

void run_load_named_first(const bench_config *config, bench_result *dest);

#endif /* BENCH_NAMED_LOAD_H */
