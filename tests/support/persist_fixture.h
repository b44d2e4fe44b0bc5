/* persist_fixture.h: the world the persistence suites save and load: data components with
 * entity fields, a tag, a char array, Parent links and a resource, registered in either order.
 * Helpers assert; a saved world is a byte buffer the test owns. */
#ifndef KILN_PERSIST_FIXTURE_H
#define KILN_PERSIST_FIXTURE_H

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"

/*
 * Functions in this header:
 *   pf_open, pf_open_on, pf_close, pf_populate, pf_save, pf_save_named, pf_bytes_free, pf_bytes_write.
 */

typedef struct pf_pos { float x, y, z; } pf_pos;
typedef struct pf_vel { double dx, dy; } pf_vel;
typedef struct pf_target { kiln_entity target; kiln_entity pair[2]; int32_t weight; } pf_target;
typedef struct pf_label { char text[16]; } pf_label;
typedef struct pf_score { int64_t points; kiln_entity best; } pf_score;

typedef struct pf_world {
    kiln_world *world;
    kiln_component pos, vel, target, label, tag, score;
    kiln_transform_ids tf;
    kiln_entity e[8];      /* what pf_populate spawned */
} pf_world;

/* Opens a world with the components (reversed: registered in the opposite order), on the
 * C library's allocator or (pf_open_on) on a test allocator (test_support.h). */
void pf_open(pf_world *w, bool reversed);
struct test_allocator;
void pf_open_on(pf_world *w, bool reversed, struct test_allocator *alloc);
void pf_close(pf_world *w);
/* Spawns a small scene: values, a tree of Parent links, entity fields, a despawned target,
 * the Score resource, and advances the tick to 7. */
void pf_populate(pf_world *w);

typedef struct pf_bytes {
    unsigned char *data;
    size_t size, cap;
} pf_bytes;

/* Saves w in format into dest (asserting success). */
void pf_save(kiln_world *world, kiln_persist_format format, pf_bytes *dest);
/* Saves pf_populate's scene with the addon's own components too (entities 0 and 3 named "hero"
 * and "sidekick", the RandomSeed and RandomState resources), for worlds that have never
 * registered them. */
void pf_save_named(kiln_persist_format format, pf_bytes *dest);
void pf_bytes_free(pf_bytes *b);
/* A kiln_write_fn appending to a pf_bytes. */
bool pf_bytes_write(void *ud, const void *data, size_t size);

/* Registers component name (size bytes, n fields), asserting success; returns its id. */
kiln_component pf_register(kiln_world *w, const char *name, size_t size, const kiln_field *f,
                           int32_t n);
/* kiln_load of a NUL-terminated text (JSON or anything else) with default options. */
kiln_result pf_load_text(kiln_world *w, const char *text);

#endif /* KILN_PERSIST_FIXTURE_H */
