/* bench_access.h: benchmark cases for single-entity access (random gets and sets, despawns) and the
 * memory an entity costs, each against its plain-C counterpart.
 *
 * Functions in this header:
 *   run_get_random, run_get_single, run_set_single, run_get_prepared, run_get_prepared_many, run_despawn,
 *   run_bytes_per_entity.
 */
#ifndef BENCH_ACCESS_H
#define BENCH_ACCESS_H

#include "bench_core.h"

void run_get_random(const bench_config *config, bench_result *dest);
void run_get_single(const bench_config *config, bench_result *dest);
void run_set_single(const bench_config *config, bench_result *dest);
void run_get_prepared(const bench_config *config, bench_result *dest);
void run_get_prepared_many(const bench_config *config, bench_result *dest);
void run_despawn(const bench_config *config, bench_result *dest);
void run_bytes_per_entity(const bench_config *config, bench_result *dest);

#endif /* BENCH_ACCESS_H */
