/* bench_names.h: the benchmark case for entity names: spawns with a Name, each checked unique
 * through the world's name index, in a world of 100k named entities.
 *
 * Functions in this header:
 *   run_name_spawn.
 */
#ifndef BENCH_NAMES_H
#define BENCH_NAMES_H

#include "bench_core.h"

void run_name_spawn(const bench_config *config, bench_result *dest);

#endif /* BENCH_NAMES_H */
