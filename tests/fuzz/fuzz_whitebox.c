/* fuzz_whitebox.c: the one thing the fuzz harness reads from inside the world: how many
 * commands its deferred queue still holds after an end that ran out of memory. */
#include "fuzz.h"
#include "world.h"

int64_t fuzz_deferred_pending(const kiln_world *world) {
    return kiln_commands_count(world->deferred);
}
