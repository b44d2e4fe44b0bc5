/* systems.h: the asteroid game's native side: generating the field and the C systems that
 * move, orbit and collide. C systems join the schedule Lua systems run in. */
#ifndef ASTEROIDS_SYSTEMS_H
#define ASTEROIDS_SYSTEMS_H

#include "components.h"

/* Radius of an asteroid of size 1, 2 or 3 (also handed to the Lua rules). */
float game_asteroid_radius(int32_t size);

/* Fills the field with count asteroids (sizes, positions and velocities drawn from seed) and
 * gives each of the first `moons` large ones a moon (Parent, Orbit, LocalTransform).
 * Deterministic for a given seed. */
kiln_result game_field_populate(kiln_world *world, const game_ids *ids, uint64_t seed,
                                int32_t count, int32_t moons);

/* The state of the C systems (their queries and the collision grid). */
typedef struct game_systems game_systems;

/* Creates the systems' state; NULL with the world error set when a query cannot be made.
 * alloc (NULL: realloc/free; called from the collide system's thread) takes the state's own
 * memory: the collision grid and the hit list, which grow with the ships and the hits. */
game_systems *game_systems_create(kiln_world *world, const game_ids *ids, kiln_alloc_fn alloc,
                                  void *alloc_ud);

/* How many times collide found no memory for its grid or its hits and dropped that frame's
 * collisions (none are emitted then; the next frame tries again). The host reports a rise. */
int64_t game_systems_dropped(const game_systems *systems);

/* Adds move, orbit, propagate_transforms and collide to schedule, in that order. */
kiln_result game_systems_add(game_systems *systems, kiln_schedule *schedule);

/* Frees the state; the schedule holding the systems must be gone or never run again. */
void game_systems_destroy(game_systems *systems);

#endif
