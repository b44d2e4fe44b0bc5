/* fuzz_target.c: the libFuzzer entry point: each input runs once as is, then once more with an
 * allocation failure injected at an index (and mode) chosen from the input's hash. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t requests = fuzz_run(data, size, -1, false);
    if (requests == 0) return 0;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
    fuzz_run(data, size, (int64_t)(h % (uint64_t)requests), (h >> 40) & 1);
    return 0;
}
