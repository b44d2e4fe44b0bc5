/* components.h: the asteroid game's components, its Collision event and its Score resource,
 * as C structs with reflected fields so Lua rules and mods read and write them by name. */
#ifndef ASTEROIDS_COMPONENTS_H
#define ASTEROIDS_COMPONENTS_H

#include "kiln.h"
#include "kiln_transform.h"

/* The field is a torus: FIELD_SIZE x FIELD_SIZE units; whatever leaves one side comes back
 * on the other. The simulation runs at a fixed step of 1 / FRAME_RATE seconds. */
#define FIELD_SIZE 4096.0f
#define FRAME_RATE 60

/* "Position" and "Velocity": units and units per second, in the plane of the field. */
typedef struct Position { float x, y; } Position;
typedef struct Velocity { float x, y; } Velocity;

/* "Asteroid": size 3 (large), 2 or 1 (small); radius follows from size. */
typedef struct Asteroid {
    float radius;
    int32_t size;
} Asteroid;

/* "Ship": a mining ship of the player's fleet. Rules add collision damage to incoming and
 * take it off hull once per frame, so systems in between (a shield mod) can absorb it. */
typedef struct Ship {
    float radius;
    float hull;
    float incoming;
    int32_t wave;
} Ship;

/* "Orbit": a moon circling its Parent asteroid at radius, angle advancing by speed rad/s. */
typedef struct Orbit {
    float radius;
    float speed;
    float angle;
} Orbit;

/* "Score": a resource (a world-wide singleton) the Lua rules write and the host prints. */
typedef struct Score {
    int64_t points;
    double damage;      /* hull the fleet lost */
    int32_t destroyed;  /* asteroids broken */
    int32_t launched;   /* ships spawned */
    int32_t lost;       /* ships wrecked */
    int32_t wave;       /* waves launched */
} Score;

/* "Collision": an event emitted by the C collide system, read by the Lua rules. tick is the
 * world tick of the frame that found it: events stay readable for two frames, so readers
 * that run after the emitter handle only the events of the current tick. */
typedef struct Collision {
    kiln_entity ship;
    kiln_entity asteroid;
    uint32_t tick;
} Collision;

typedef struct game_ids {
    kiln_component position, velocity, asteroid, ship, orbit, score;
    kiln_event_type collision;
    kiln_transform_ids transform;
} game_ids;

/* Registers every component, the Collision event and the transform components, sets the
 * Score resource to zero, and writes the ids to dest. Returns the first failure. */
kiln_result game_components_register(kiln_world *world, game_ids *dest);

#endif
