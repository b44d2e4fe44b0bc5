/* fuzz.h: the model-checking fuzz harness: a reference model of a kiln world in plain arrays,
 * the operations that drive a world and the model in step, and the comparison between them. */
#ifndef KILN_FUZZ_H
#define KILN_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.h"
#include "kiln_transform.h"

/*
 * Functions in this header:
 *   fuzz_run, fuzz_replay_path, fuzz_set_input_name, fuzz_fail, fuzz_alloc_failures, fz_byte,
 *   model_find, model_add_entity, model_default, model_write, model_remove, model_despawn,
 *   model_size, model_check_accepts, model_parent_of, model_expected_owned, model_apply_queue,
 *   fuzz_deferred_pending, fuzz_compare, fuzz_check_query, fuzz_op_query_iterate, fuzz_op_query,
 *   fuzz_op_parallel_for, fuzz_schedule_setup, fuzz_schedule_teardown, fuzz_op_schedule,
 *   fuzz_op_hierarchy, fuzz_op_register, fuzz_op_event_register, fuzz_hierarchy_check,
 *   fuzz_value_from_model, fuzz_owned_release, fz_pick_entity, fz_model_value.
 *
 * An input is a byte string: a header byte (flags), then operations, each an opcode byte and
 * its argument bytes; running out of bytes reads zeroes and ends the run. Every operation is
 * applied to the world and to the model; the two are compared after each one and any
 * difference aborts with a description (fuzz_fail).
 */

/* The fuzzed components, in registration order (model slot = index here). */
enum {
    FZ_A,      /* 8 bytes {x, y}, defaults {7, -1} */
    FZ_B,      /* int32, zero defaults */
    FZ_T,      /* tag */
    FZ_U,      /* tag */
    FZ_O,      /* owns a heap payload: destroy and move hooks */
    FZ_K,      /* int32 with a check hook refusing v % 5 == 4; defaults 1 */
    FZ_W,      /* 32 bytes, 16-aligned */
    FZ_LOCAL,  /* the transform addon's LocalTransform */
    FZ_PARENT, /* the transform addon's Parent (written through kiln_transform_set_parent) */
    FZ_WORLD,  /* WorldTransform (written by propagation) */
    FZ_NC
};
#define FZ_GENERIC 8 /* components the generic add/set/remove/spawn ops pick from (A..LOCAL) */
#define FZ_VAL 64     /* bytes of a model value (the largest component) */

#define FZ_MAX_ENT 192   /* handles the model tracks (spawns beyond are skipped) */
#define FZ_MAX_CMD 96    /* commands per model buffer */
#define FZ_MAX_QUEUE 512 /* commands in the deferred queue */
#define FZ_MAX_EVENTS 64
#define FZ_MAX_QUERIES 4
#define FZ_MAX_PH 48

typedef struct fz_owned {
    int32_t *payload; /* malloc'd, *payload == id; NULL for a zero value */
    int32_t id;
    int32_t pad;
} fz_owned;

enum { FZ_DEAD, FZ_ALIVE, FZ_RESERVED };

typedef struct fz_ent {
    kiln_entity h;
    uint8_t state;
    uint32_t mask;             /* components it has */
    kiln_tick tick[FZ_NC];
    bool tick_unknown[FZ_NC];  /* propagation writes only changed values: tick not modelled */
    unsigned char val[FZ_NC][FZ_VAL];
} fz_ent;

enum { OP_SPAWN, OP_MATERIALIZE, OP_DESPAWN, OP_ADD, OP_SET, OP_REMOVE, OP_EMIT };

typedef struct fz_cmd {
    uint8_t op;
    uint8_t comp;
    bool has_value;
    uint32_t group;     /* nonzero: queued by one propagation, in an order the model cannot know */
    kiln_entity target; /* a handle, or a placeholder of the buffer */
    unsigned char value[FZ_VAL];
} fz_cmd;

typedef struct fz_ph {
    kiln_entity handle;   /* as the world returned it */
    int32_t buf;          /* which of the two user buffers made it */
    int32_t batch;
    int32_t index;
    kiln_entity resolved; /* KILN_NULL_ENTITY until its spawn applied */
} fz_ph;

typedef struct fz_buf {
    kiln_commands *cmd;
    bool lenient;              /* the deferred queue */
    fz_cmd *cmds;              /* capacity FZ_MAX_CMD, or FZ_MAX_QUEUE for the queue */
    int32_t cap, count;
    int32_t batch;             /* current batch number */
    bool complete;             /* last apply consumed everything */
    fz_ph ph[FZ_MAX_PH];       /* placeholders of the current batch */
    int32_t ph_count;
} fz_buf;

typedef struct fz_event {
    int32_t a, b;
} fz_event;

typedef struct fz_query {
    kiln_query *q;
    uint8_t with[8], without[8], optional[8]; /* model slots */
    int32_t nwith, nwithout, noptional;
} fz_query;

typedef struct fz_model {
    fz_ent ents[FZ_MAX_ENT];
    int32_t n_ents;
    kiln_tick tick;
    int32_t defer_depth;
    bool res_set[FZ_NC];
    unsigned char res_val[FZ_NC][FZ_VAL];
    fz_event ev_prev[FZ_MAX_EVENTS * 4], ev_cur[FZ_MAX_EVENTS * 4];
    int32_t n_prev, n_cur;
} fz_model;

/* The schedule part of a run (fuzz_schedule.c). */
typedef struct fz_sched fz_sched;

typedef struct fz_ctx {
    kiln_world *w;
    fz_model m;
    kiln_component id[FZ_NC];
    kiln_event_type ev;
    fz_buf queue;          /* the world's deferred queue, modelled */
    fz_buf bufs[2];
    fz_query queries[FZ_MAX_QUERIES];
    fz_ph phs[FZ_MAX_PH];  /* placeholders seen, current and stale, for hostile reuse */
    int32_t n_phs;
    fz_sched *sched;
    const uint8_t *data;
    size_t size, pos;
    int64_t op_index;
    const char *op_name;
    bool inject;           /* allocation failures are being injected in this run */
    int32_t next_owned_id;
    uint32_t groups;       /* propagations that queued WorldTransform adds */
    int32_t fresh;         /* components registered by the fuzzed registration op */
    kiln_world_stats before; /* the world's stats when the current operation started */
} fz_ctx;

/* ---- the run ---------------------------------------------------------------------------- */

/* Runs one input against a fresh world and model. fail_at < 0: no injected failure; else
 * the fail_at-th refusable allocation request after setup fails (and, when persistent, every
 * later one until the current operation ends, and every shrink for the rest of the run).
 * Returns the number of refusable requests the run made (so a driver can sweep fail_at over
 * them). Aborts on any mismatch. */
int64_t fuzz_run(const uint8_t *data, size_t size, int64_t fail_at, bool persistent);

/* Replays a stored input or every file of a directory (fuzz_corpus.c): each once, then with
 * a failure injected at every allocation index, both modes, when it makes at most
 * sweep_limit requests. False when path does not exist; aborts on a mismatch. */
typedef struct fuzz_replay_stats {
    int64_t inputs, swept, runs;
} fuzz_replay_stats;
bool fuzz_replay_path(const char *path, int64_t sweep_limit, fuzz_replay_stats *stats);

/* The input file a failure report names (NULL: none). */
void fuzz_set_input_name(const char *name);

/* Test hook: when set, the model's tick is made wrong after the first operation, so the run
 * must abort (proves the comparison can fail). */
extern bool fuzz_sabotage;

/* Reports a mismatch (with the operation that showed it) and aborts. */
void fuzz_fail(const fz_ctx *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3), noreturn))
#endif
    ;

/* Refusals of the injecting allocator so far in this run. */
int64_t fuzz_alloc_failures(void);

/* Input bytes (zeroes once the input is used up). */
uint8_t fz_byte(fz_ctx *c);

/* ---- model (fuzz_model.c) ----------------------------------------------------------------- */

/* The model entity with handle h, or NULL (null handles and handles never seen). */
fz_ent *model_find(fz_model *m, kiln_entity h);
fz_ent *model_add_entity(fz_ctx *c, kiln_entity h, uint8_t state);
/* The value a component gets when none is given. */
void model_default(int comp, unsigned char dest[FZ_VAL]);
/* Writes (adds or replaces) a value, stamping the current tick. */
void model_write(fz_model *m, fz_ent *e, int comp, const unsigned char *value);
void model_remove(fz_model *m, fz_ent *e, int comp);
void model_despawn(fz_model *m, fz_ent *e);
size_t model_size(int comp);
bool model_check_accepts(fz_model *m, kiln_entity entity, int comp, const unsigned char *value);
kiln_entity model_parent_of(fz_model *m, const fz_ent *e);
/* Owned values the model says exist (entities, resources, pending commands). */
int64_t model_expected_owned(const fz_ctx *c);

/* Applies commands [0, n) of buf to the model (commands the world reports as applied),
 * returning the result the model expects from the first command not applied when n is
 * less than the count, or from running to the end (n < 0: run until the model's own first
 * failure; *consumed gets how many were consumed). Consumed commands leave the buffer. */
kiln_result model_apply_queue(fz_ctx *c, fz_buf *buf, int32_t n, int32_t *consumed);

/* Pending commands of the world's deferred queue (white-box: read from the world). */
int64_t fuzz_deferred_pending(const kiln_world *world);

/* ---- comparison (fuzz_compare.c) --------------------------------------------------------- */

void fuzz_compare(fz_ctx *c);
void fuzz_check_query(fz_ctx *c, fz_query *q);
void fuzz_op_query_iterate(fz_ctx *c);
void fuzz_op_query(fz_ctx *c, uint8_t sub);
void fuzz_op_parallel_for(fz_ctx *c);

/* ---- schedule and hierarchy ------------------------------------------------------------- */

void fuzz_schedule_setup(fz_ctx *c);
void fuzz_schedule_teardown(fz_ctx *c);
void fuzz_op_schedule(fz_ctx *c, uint8_t sub);
void fuzz_op_hierarchy(fz_ctx *c, uint8_t sub);
void fuzz_op_register(fz_ctx *c, uint8_t sub);
void fuzz_op_event_register(fz_ctx *c, uint8_t sub);
void fuzz_hierarchy_check(fz_ctx *c);

/* The fuzzed components' values for the world from model bytes (owned payloads made here). */
void fuzz_value_from_model(int comp, const unsigned char *model, void *dest);
/* Frees an owned value the world did not take over. */
void fuzz_owned_release(fz_owned *v);
/* Entity pick: a model entity's handle (alive or not), or null, or a forged handle. */
kiln_entity fz_pick_entity(fz_ctx *c);
/* Fills a model value for comp from the input (owned ids are fresh). */
void fz_model_value(fz_ctx *c, int comp, unsigned char dest[FZ_VAL]);

#endif /* KILN_FUZZ_H */
