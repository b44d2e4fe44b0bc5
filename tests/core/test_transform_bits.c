/* test_transform_bits.c: Check suite for the bits propagation writes: a fixed forest's world
 * matrices hash to one known value, which every build must give (tests/scripts/test_fp_builds.sh). */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"

/* What gcc -O0/-O2/-O3 -march=x86-64-v3, clang -O2 (with and without FMA) and the portable
 * (non-SSE2) path give: lockstep peers and recorded replays compare hashes across builds. */
#define KNOWN_BITS 0xd7075595a78db925ull

#define NODES 600

/* Awkward values from integers (a division is rounded alike by every IEEE build): unnormalised
 * quaternions, non-uniform scales, translations with long mantissas. */
static float awkward(uint32_t *state, float scale) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(int32_t)(*state >> 8) / 8388607.0f * scale;
}

KILN_TEST_GROUP(bits);

KILN_TEST(bits, propagated_matrices_have_the_same_bits_in_every_build) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_transform_ids ids;
    ck_assert_int_eq(kiln_transform_init(world, &ids), KILN_OK);
    kiln_entity e[NODES];
    uint32_t state = 2026;
    for (int i = 0; i < NODES; i++) {
        kiln_local_transform t;
        for (int k = 0; k < 3; k++) t.position[k] = awkward(&state, 1000.0f);
        for (int k = 0; k < 4; k++) t.rotation[k] = awkward(&state, 1.0f);
        for (int k = 0; k < 3; k++) t.scale[k] = 0.1f + awkward(&state, 3.0f);
        ck_assert_int_eq(kiln_spawn(world, &e[i]), KILN_OK);
        ck_assert_int_eq(kiln_add(world, e[i], ids.local, &t), KILN_OK);
        if (i % 6 != 0) { /* chains several levels deep */
            kiln_parent p = {e[i - 1 - (int)(state % (uint32_t)(i % 6))]};
            ck_assert_int_eq(kiln_add(world, e[i], ids.parent, &p), KILN_OK);
        }
    }
    ck_assert_int_eq(kiln_transform_propagate(world, NULL), KILN_OK);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of every matrix, in spawn order */
    for (int i = 0; i < NODES; i++) {
        const kiln_world_transform *w = kiln_get(world, e[i], ids.world);
        ck_assert_ptr_nonnull(w);
        const unsigned char *b = (const unsigned char *)w->matrix;
        for (size_t k = 0; k < sizeof w->matrix; k++) h = (h ^ b[k]) * 0x100000001b3ull;
    }
    ck_assert_msg(h == KNOWN_BITS, "the matrices hash %016llx, every build gave %016llx",
                  (unsigned long long)h, KNOWN_BITS);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}
