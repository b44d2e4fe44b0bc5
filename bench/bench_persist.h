/* bench_persist.h: benchmark cases for the persistence addon (save, load, snapshot, restore,
 * hash) over 100k entities with four components, an entity field and Parent links among them.
 *
 * Functions in this header:
 *   run_save_binary, run_load_binary, run_save_json, run_load_json, run_snapshot, run_restore,
 *   run_world_hash.
 */
#ifndef BENCH_PERSIST_H
#define BENCH_PERSIST_H

#include "bench_core.h"

void run_save_binary(const bench_config *config, bench_result *dest);
void run_load_binary(const bench_config *config, bench_result *dest);
void run_save_json(const bench_config *config, bench_result *dest);
void run_load_json(const bench_config *config, bench_result *dest);
void run_snapshot(const bench_config *config, bench_result *dest);
void run_restore(const bench_config *config, bench_result *dest);
void run_world_hash(const bench_config *config, bench_result *dest);

#endif /* BENCH_PERSIST_H */
