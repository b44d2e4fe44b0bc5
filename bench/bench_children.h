/* bench_children.h: the benchmark case for the children index: spawns of small trees, each
 * root's children looked up at once, in a world of 100k entities in trees.
 *
 * Functions in this header:
 *   run_tree_spawn.
 */
#ifndef BENCH_CHILDREN_H
#define BENCH_CHILDREN_H

#include "bench_core.h"

void run_tree_spawn(const bench_config *config, bench_result *dest);

#endif /* BENCH_CHILDREN_H */
