/* bench_systems.h: benchmark cases for the layers above storage: command buffers, the
 * schedule and job pool, each against its plain counterpart (propagation: bench_transform.h).
 *
 * Functions in this header:
 *   run_cmd_spawn, run_cmd_spawn_calls, run_cmd_add_remove, run_sched_overhead, run_sched_parallel,
 *   run_parallel_for.
 */
#ifndef BENCH_SYSTEMS_H
#define BENCH_SYSTEMS_H

#include "bench_core.h"

void run_cmd_spawn(const bench_config *config, bench_result *dest);
void run_cmd_spawn_calls(const bench_config *config, bench_result *dest);
void run_cmd_add_remove(const bench_config *config, bench_result *dest);
void run_sched_overhead(const bench_config *config, bench_result *dest);
void run_sched_parallel(const bench_config *config, bench_result *dest);
void run_parallel_for(const bench_config *config, bench_result *dest);

#endif /* BENCH_SYSTEMS_H */
