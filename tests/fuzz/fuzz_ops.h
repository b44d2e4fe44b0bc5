/* fuzz_ops.h: the operation decoder of the fuzz harness and what the run loop shares with it.
 * Each operation reads its arguments from the input and applies itself to world and model. */
#ifndef KILN_FUZZ_OPS_H
#define KILN_FUZZ_OPS_H

#include "fuzz.h"

/*
 * Functions in this header:
 *   fuzz_op, fuzz_jobs, fuzz_alloc_pause, model_propagate, fuzz_live_payloads, fz_oom_ok, fz_oom_partial_ok,
 *   fz_expect, fz_pick_comp, fz_comp_id, fz_queue_push, fz_defer_end_model.
 */

/* Runs the operation opcode selects (its arguments follow in the input). */
void fuzz_op(fz_ctx *c, uint8_t opcode);

/* The job pool shared by every run (two workers), made on first use. */
kiln_jobs *fuzz_jobs(void);

/* Pauses (true) or resumes allocation-failure injection and request counting. */
void fuzz_alloc_pause(bool paused);

/* Owned payloads alive now (made by fuzz_value_from_model, freed by the destroy hook). */
int64_t fuzz_live_payloads(void);

/* True when r is an out-of-memory failure caused by an injected refusal since failures0
 * (the operation then must have had no effect: the world's counts are checked here, the rest
 * by the comparison that follows); false otherwise. */
bool fz_oom_ok(fz_ctx *c, kiln_result r, int64_t failures0);

/* The same for the calls documented to stop part-way (an apply, a section's end, a
 * propagation): their counts may change. */
bool fz_oom_partial_ok(fz_ctx *c, kiln_result r, int64_t failures0);

/* Fails unless got == want; a failure must leave a message naming call. */
void fz_expect(fz_ctx *c, kiln_result got, kiln_result want, const char *call);

/* A component pick: a model slot in [0, FZ_GENERIC) or -1 for an unregistered id. */
int fz_pick_comp(fz_ctx *c, int limit);

/* The world id of a model slot (-1: an unregistered id). */
kiln_component fz_comp_id(const fz_ctx *c, int slot);

/* Appends a command to a model buffer. */
fz_cmd *fz_queue_push(fz_ctx *c, fz_buf *buf, uint8_t op, kiln_entity target, int comp,
                      const unsigned char *value);

/* The model's side of the end of an outermost deferred section (or iteration): applies the
 * queue; when the world ran out of memory (oom), only what the world applied. */
void fz_defer_end_model(fz_ctx *c, bool oom);

/* Propagation in the model: every live entity with a LocalTransform gets its world matrix,
 * written in place, or added (queued on the model's deferred queue when deferred). */
void model_propagate(fz_ctx *c, bool deferred);

#endif /* KILN_FUZZ_OPS_H */
