/* internal.h: what every core source file shares: the internal prefix, visibility and the
 * assertion macro an embedder can redirect. Nothing here is public API. */
#ifndef KILN_INTERNAL_H
#define KILN_INTERNAL_H

#include <assert.h>

#include "kiln.h"

/* kiln reads NaNs and infinities (a save's floats, a float's range, a Lua value's bits): under
 * -ffast-math the compiler drops those tests, so a NaN was stored as another number. */
#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "kiln needs IEEE NaN and infinities: build its sources without -ffast-math and -ffinite-math-only"
#endif

/* Functions shared between core files but not exported from libkiln.so. */
#if defined(__GNUC__)
#define KL_HIDDEN __attribute__((visibility("hidden")))
#else
#define KL_HIDDEN
#endif

/* Programmer errors (misuse that a correct program never does) are checked with
 * KILN_ASSERT. Define it when building kiln to route failures elsewhere; by default it is
 * the C assert, active unless NDEBUG is defined. */
#ifndef KILN_ASSERT
#define KILN_ASSERT(cond, msg) assert((cond) && (msg))
#endif

#define KL_LIKELY(x) __builtin_expect(!!(x), 1)
#define KL_UNLIKELY(x) __builtin_expect(!!(x), 0)

#endif
