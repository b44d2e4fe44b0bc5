/* fuzz_ops.c: the fuzzed operations on entities, components, deferred sections, command
 * buffers, resources and events. Each predicts its result from the model, calls the world,
 * compares, and applies itself to the model only when the world says it took effect. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_ops.h"

/* ---- shared helpers --------------------------------------------------------------------- */

bool fz_oom_partial_ok(fz_ctx *c, kiln_result r, int64_t failures0) {
    if (r != KILN_ERR_OUT_OF_MEMORY) return false;
    if (fuzz_alloc_failures() == failures0)
        fuzz_fail(c, "out of memory reported without any refused allocation");
    return true;
}

bool fz_oom_ok(fz_ctx *c, kiln_result r, int64_t failures0) {
    if (!fz_oom_partial_ok(c, r, failures0)) return false;
    /* No trace in the world's counts either (a slot taken and not given back, ...). */
    kiln_world_stats now;
    kiln_world_stats_get(c->w, &now);
    if (now.entities != c->before.entities || now.entity_slots != c->before.entity_slots ||
        now.components != c->before.components || now.queries != c->before.queries)
        fuzz_fail(c, "a call that ran out of memory changed the world's counts (entities %lld -> %lld, "
                  "slots %lld -> %lld, components %d -> %d, queries %d -> %d)",
                  (long long)c->before.entities, (long long)now.entities, (long long)c->before.entity_slots,
                  (long long)now.entity_slots, c->before.components, now.components, c->before.queries,
                  now.queries);
    return true;
}

void fz_expect(fz_ctx *c, kiln_result got, kiln_result want, const char *call) {
    if (got != want)
        fuzz_fail(c, "%s returned '%s', the model expects '%s'", call, kiln_result_name(got),
                  kiln_result_name(want));
    if (got == KILN_OK) return;
    const char *msg = kiln_world_error(c->w);
    size_t n = strlen(call);
    if (strncmp(msg, call, n) != 0 || msg[n] != ':')
        fuzz_fail(c, "%s failed with a message not naming it: '%s'", call, msg);
}

static void expect_buffer(fz_ctx *c, kiln_commands *cmd, kiln_result got, kiln_result want,
                          const char *call) {
    if (got != want)
        fuzz_fail(c, "%s returned '%s', the model expects '%s' (%s)", call, kiln_result_name(got),
                  kiln_result_name(want), kiln_commands_error(cmd));
    if (got == KILN_OK) return;
    const char *msg = kiln_commands_error(cmd);
    size_t n = strlen(call);
    if (strncmp(msg, call, n) != 0 || msg[n] != ':')
        fuzz_fail(c, "%s failed with a message not naming it: '%s'", call, msg);
}

int fz_pick_comp(fz_ctx *c, int limit) {
    uint8_t b = fz_byte(c);
    if (b % 32 == 31) return -1;
    return b % limit;
}

kiln_component fz_comp_id(const fz_ctx *c, int slot) {
    return slot < 0 ? (kiln_component)999 : c->id[slot];
}

kiln_entity fz_pick_entity(fz_ctx *c) {
    uint8_t b = fz_byte(c);
    fz_model *m = &c->m;
    if (m->n_ents == 0 || b < 12) {
        switch (b % 4) {
        case 0: return KILN_NULL_ENTITY;
        case 1: return kiln_entity_make(70000, 1); /* beyond every slot */
        case 2: /* a known slot with a generation it never had */
            return m->n_ents ? kiln_entity_make(kiln_entity_index(m->ents[b % m->n_ents].h),
                                                kiln_entity_generation(m->ents[b % m->n_ents].h) + 7)
                             : kiln_entity_make(0, 1);
        default: return kiln_entity_make(0, KILN_ENTITY_GENERATION_MAX);
        }
    }
    int32_t i = b % m->n_ents;
    if (b & 0x80) { /* prefer a live (or reserved) entity */
        for (int32_t k = 0; k < m->n_ents; k++) {
            const fz_ent *e = &m->ents[(i + k) % m->n_ents];
            if (e->state != FZ_DEAD) return e->h;
        }
    }
    return m->ents[i].h;
}

void fz_model_value(fz_ctx *c, int comp, unsigned char dest[FZ_VAL]) {
    memset(dest, 0, FZ_VAL);
    switch (comp) {
    case FZ_A: {
        int32_t v[2] = {(int8_t)fz_byte(c), (int8_t)fz_byte(c)};
        memcpy(dest, v, sizeof v);
        break;
    }
    case FZ_B: case FZ_K: {
        int32_t v = (int8_t)fz_byte(c);
        memcpy(dest, &v, sizeof v);
        break;
    }
    case FZ_O: {
        fz_owned o = {.id = (fz_byte(c) % 8 == 0) ? 0 : c->next_owned_id++};
        memcpy(dest, &o, sizeof o);
        break;
    }
    case FZ_W: {
        uint8_t b = fz_byte(c);
        for (int i = 0; i < 32; i++) dest[i] = (unsigned char)(b + i * 3);
        break;
    }
    case FZ_LOCAL: {
        kiln_local_transform t = kiln_transform_local_identity();
        t.position[0] = (float)(int8_t)fz_byte(c);
        t.position[1] = (float)(fz_byte(c) % 16);
        t.scale[2] = 1.0f + (float)(fz_byte(c) % 4);
        memcpy(dest, &t, sizeof t);
        break;
    }
    default: break;
    }
}

/* A value for the world: either NULL (the defaults) or a fresh one; model gets the bytes the
 * component will hold. */
typedef struct fz_value {
    _Alignas(16) unsigned char bytes[FZ_VAL];
    bool given;
    int comp;
} fz_value;

static const void *make_value(fz_ctx *c, int comp, bool given, fz_value *v, unsigned char model[FZ_VAL]) {
    v->given = given;
    v->comp = comp;
    if (comp < 0 || model_size(comp) == 0 || !given) {
        if (comp >= 0) model_default(comp, model);
        v->given = given && comp >= 0;
        if (!given) return NULL;
        memset(v->bytes, 0, FZ_VAL);
        return v->bytes;
    }
    fz_model_value(c, comp, model);
    fuzz_value_from_model(comp, model, v->bytes);
    return v->bytes;
}

/* A value borrowed from the world itself (kiln_get of another live entity, or the same one):
 * the call must read it before any storage it lives in moves. NULL when none is at hand. */
static const void *borrowed_value(fz_ctx *c, int slot, uint8_t pick, unsigned char model[FZ_VAL]) {
    if (slot < 0 || slot == FZ_O || model_size(slot) == 0 || c->m.n_ents == 0) return NULL;
    for (int32_t k = 0; k < c->m.n_ents; k++) {
        fz_ent *e = &c->m.ents[(pick + k) % c->m.n_ents];
        if (e->state != FZ_ALIVE || !((e->mask >> slot) & 1u)) continue;
        memcpy(model, e->val[slot], FZ_VAL);
        return kiln_get(c->w, e->h, c->id[slot]);
    }
    return NULL;
}

/* Gives back an owned payload the world did not take. */
static void release_value(fz_value *v) {
    if (v->given && v->comp == FZ_O) fuzz_owned_release((fz_owned *)(void *)v->bytes);
}

fz_cmd *fz_queue_push(fz_ctx *c, fz_buf *buf, uint8_t op, kiln_entity target, int comp,
                      const unsigned char *value) {
    if (buf->count == buf->cap) fuzz_fail(c, "harness: model queue full");
    fz_cmd *cmd = &buf->cmds[buf->count++];
    memset(cmd, 0, sizeof *cmd);
    cmd->op = op;
    cmd->target = target;
    cmd->comp = (uint8_t)(comp < 0 ? 0 : comp);
    if (value) {
        cmd->has_value = true;
        memcpy(cmd->value, value, FZ_VAL);
    }
    return cmd;
}

static bool deferred(const fz_ctx *c) { return c->m.defer_depth > 0; }

/* Room for an operation that may queue up to n commands and spawn up to n entities. */
static bool room(const fz_ctx *c, int n) {
    return c->m.n_ents + n <= FZ_MAX_ENT && c->queue.count + n + 8 <= c->queue.cap;
}

/* Applies the first n commands of the queue to the model. A propagation queues its
 * WorldTransform adds in an order of its own: when the world stopped (out of memory) inside
 * such a group, the ones it applied are those whose target now holds the queued value, then
 * any that change nothing; they move to the front of the group so the model applies the
 * same. */
static void apply_split(fz_ctx *c, int32_t n) {
    fz_buf *q = &c->queue;
    if (n <= 0 || n >= q->count || q->cmds[n].group == 0 || q->cmds[n - 1].group != q->cmds[n].group) {
        model_apply_queue(c, q, n, NULL);
        return;
    }
    uint32_t g = q->cmds[n].group;
    int32_t begin = n, end = n;
    while (begin > 0 && q->cmds[begin - 1].group == g) begin--;
    while (end < q->count && q->cmds[end].group == g) end++;
    /* What comes before the group first, so the model's state is the one the group met. */
    model_apply_queue(c, q, begin, NULL);
    n -= begin;
    end -= begin;
    begin = 0;
    int32_t front = begin;
    for (int32_t i = begin; i < end; i++) {
        fz_cmd *cmd = &q->cmds[i];
        fz_ent *e = model_find(&c->m, cmd->target);
        const void *now = kiln_get(c->w, cmd->target, c->id[FZ_WORLD]);
        size_t size = sizeof(kiln_world_transform);
        /* Applied: the world holds the queued value where the model holds none or another
         * (one the model already holds is the same either way). */
        bool applied = e && e->state == FZ_ALIVE && now && memcmp(now, cmd->value, size) == 0 &&
                       (!(e->mask & (1u << FZ_WORLD)) || memcmp(e->val[FZ_WORLD], cmd->value, size) != 0);
        if (!applied) continue;
        fz_cmd tmp = *cmd;
        memmove(&q->cmds[front + 1], &q->cmds[front], sizeof(fz_cmd) * (size_t)(i - front));
        q->cmds[front++] = tmp;
    }
    /* Then the ones that change nothing (a dead target: dropped; the value already held):
     * the world may have spent its count on those. */
    for (int32_t i = front; i < end; i++) {
        fz_cmd *cmd = &q->cmds[i];
        fz_ent *e = model_find(&c->m, cmd->target);
        bool inert = !e || e->state != FZ_ALIVE ||
                     ((e->mask & (1u << FZ_WORLD)) &&
                      memcmp(e->val[FZ_WORLD], cmd->value, sizeof(kiln_world_transform)) == 0);
        if (!inert) continue;
        fz_cmd tmp = *cmd;
        memmove(&q->cmds[front + 1], &q->cmds[front], sizeof(fz_cmd) * (size_t)(i - front));
        q->cmds[front++] = tmp;
    }
    model_apply_queue(c, q, n, NULL);
}

void fz_defer_end_model(fz_ctx *c, bool oom) {
    if (!oom) {
        int32_t consumed;
        kiln_result r = model_apply_queue(c, &c->queue, -1, &consumed);
        if (r != KILN_OK || c->queue.count != 0) fuzz_fail(c, "harness: the model's queue did not drain");
        return;
    }
    int64_t pending = fuzz_deferred_pending(c->w);
    if (getenv("KILN_FUZZ_VERBOSE")) {
        fprintf(stderr, "  out of memory applying the queue: %lld of %d left:", (long long)pending, c->queue.count);
        for (int32_t i = 0; i < c->queue.count; i++)
            fprintf(stderr, " %d:%llx/%d", c->queue.cmds[i].op, (unsigned long long)c->queue.cmds[i].target,
                    c->queue.cmds[i].comp);
        fprintf(stderr, "\n");
    }
    if (pending > c->queue.count) fuzz_fail(c, "the deferred queue grew while applying");
    apply_split(c, c->queue.count - (int32_t)pending);
}

/* ---- entities --------------------------------------------------------------------------- */

static kiln_result list_check(const fz_ctx *c, const int *slots, int n) {
    for (int i = 0; i < n; i++)
        if (slots[i] < 0) return KILN_ERR_UNKNOWN_COMPONENT;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (slots[i] == slots[j]) return KILN_ERR_INVALID_ARGUMENT;
    (void)c;
    return KILN_OK;
}

static void op_spawn(fz_ctx *c) {
    c->op_name = "kiln_spawn";
    if (!room(c, 1)) return;
    int64_t f0 = fuzz_alloc_failures();
    kiln_entity e = KILN_NULL_ENTITY;
    kiln_result r = kiln_spawn(c->w, &e);
    if (fz_oom_ok(c, r, f0)) return;
    fz_expect(c, r, KILN_OK, "kiln_spawn");
    if (deferred(c)) {
        model_add_entity(c, e, FZ_RESERVED);
        fz_queue_push(c, &c->queue, OP_MATERIALIZE, e, 0, NULL);
    } else {
        model_add_entity(c, e, FZ_ALIVE);
    }
}

static void op_spawn_with(fz_ctx *c) {
    c->op_name = "kiln_spawn_with";
    if (!room(c, 8)) return;
    int n = fz_byte(c) % 5;
    int slots[4] = {0};
    kiln_component ids[4];
    fz_value vals[4];
    const void *ptrs[4];
    unsigned char model[4][FZ_VAL];
    bool any_value = false;
    kiln_result want = KILN_OK;
    for (int i = 0; i < n; i++) {
        slots[i] = fz_pick_comp(c, FZ_GENERIC);
        ids[i] = fz_comp_id(c, slots[i]);
        uint8_t how = fz_byte(c);
        vals[i].given = false;
        ptrs[i] = (how & 6) == 6 ? borrowed_value(c, slots[i], fz_byte(c), model[i]) : NULL;
        if (!ptrs[i]) ptrs[i] = make_value(c, slots[i], how & 1, &vals[i], model[i]);
        any_value |= ptrs[i] != NULL;
    }
    want = list_check(c, slots, n);
    for (int i = 0; i < n && want == KILN_OK; i++)
        if (!model_check_accepts(&c->m, KILN_NULL_ENTITY, slots[i], model[i])) want = KILN_ERR_INVALID_ARGUMENT;
    int64_t f0 = fuzz_alloc_failures();
    kiln_entity e = KILN_NULL_ENTITY;
    kiln_result r = kiln_spawn_with(c->w, ids, any_value ? ptrs : NULL, n, &e);
    if (fz_oom_ok(c, r, f0) || r != KILN_OK) {
        for (int i = 0; i < n; i++) release_value(&vals[i]);
        if (r == KILN_ERR_OUT_OF_MEMORY) return;
    }
    fz_expect(c, r, want, "kiln_spawn_with");
    if (r != KILN_OK) return;
    if (deferred(c)) {
        model_add_entity(c, e, FZ_RESERVED);
        fz_queue_push(c, &c->queue, OP_MATERIALIZE, e, 0, NULL);
        for (int i = 0; i < n; i++)
            fz_queue_push(c, &c->queue, OP_ADD, e, slots[i], ptrs[i] ? model[i] : NULL);
    } else {
        fz_ent *ent = model_add_entity(c, e, FZ_ALIVE);
        for (int i = 0; i < n; i++) model_write(&c->m, ent, slots[i], model[i]);
    }
}

static void op_spawn_batch(fz_ctx *c) {
    c->op_name = "kiln_spawn_batch";
    uint8_t b = fz_byte(c);
    int32_t count = b % 4;
    int32_t n = (b >> 2) % 7 - 1; /* -1 .. 5 */
    if (!room(c, (n + 1) * (count + 1))) return;
    int slots[3];
    kiln_component ids[3];
    for (int i = 0; i < count; i++) {
        slots[i] = fz_pick_comp(c, FZ_GENERIC);
        ids[i] = fz_comp_id(c, slots[i]);
    }
    kiln_result want = n < 0 ? KILN_ERR_INVALID_ARGUMENT : list_check(c, slots, count);
    kiln_entity dest[8] = {0};
    int64_t f0 = fuzz_alloc_failures();
    kiln_result r = kiln_spawn_batch(c->w, ids, count, n, dest);
    if (fz_oom_ok(c, r, f0)) return;
    fz_expect(c, r, want, "kiln_spawn_batch");
    if (r != KILN_OK) return;
    for (int32_t k = 0; k < n; k++) {
        if (deferred(c)) {
            model_add_entity(c, dest[k], FZ_RESERVED);
            fz_queue_push(c, &c->queue, OP_MATERIALIZE, dest[k], 0, NULL);
            for (int i = 0; i < count; i++) fz_queue_push(c, &c->queue, OP_ADD, dest[k], slots[i], NULL);
        } else {
            fz_ent *ent = model_add_entity(c, dest[k], FZ_ALIVE);
            unsigned char v[FZ_VAL];
            for (int i = 0; i < count; i++) {
                model_default(slots[i], v);
                model_write(&c->m, ent, slots[i], v);
            }
        }
    }
}

/* Whether a call on h may target it: alive, or (while deferred) reserved. */
static bool targetable(fz_ctx *c, kiln_entity h) {
    fz_ent *e = model_find(&c->m, h);
    if (!e) return false;
    return e->state == FZ_ALIVE || (deferred(c) && e->state == FZ_RESERVED);
}

static void op_despawn(fz_ctx *c) {
    c->op_name = "kiln_despawn";
    if (!room(c, 1)) return;
    kiln_entity h = fz_pick_entity(c);
    kiln_result want = targetable(c, h) ? KILN_OK : KILN_ERR_DEAD_ENTITY;
    int64_t f0 = fuzz_alloc_failures();
    kiln_result r = kiln_despawn(c->w, h);
    if (fz_oom_ok(c, r, f0)) return;
    fz_expect(c, r, want, "kiln_despawn");
    if (r != KILN_OK) return;
    if (deferred(c)) fz_queue_push(c, &c->queue, OP_DESPAWN, h, 0, NULL);
    else model_despawn(&c->m, model_find(&c->m, h));
}

/* add, set or remove through the plain API (queued while deferred). */
static void op_write(fz_ctx *c, uint8_t op) {
    static const char *names[] = {[OP_ADD] = "kiln_add", [OP_SET] = "kiln_set", [OP_REMOVE] = "kiln_remove"};
    const char *call = names[op];
    c->op_name = call;
    if (!room(c, 1)) return;
    kiln_entity h = fz_pick_entity(c);
    int slot = fz_pick_comp(c, op == OP_REMOVE ? FZ_GENERIC + 1 : FZ_GENERIC);
    kiln_component id = fz_comp_id(c, slot);
    fz_value v = {0};
    unsigned char model[FZ_VAL];
    uint8_t how = op == OP_REMOVE ? 0 : fz_byte(c);
    const void *value = NULL;
    if (op != OP_REMOVE && (how & 6) == 6) value = borrowed_value(c, slot, fz_byte(c), model);
    if (op != OP_REMOVE && !value) value = make_value(c, slot, how & 1, &v, model);
    fz_ent *e = model_find(&c->m, h);
    bool has = e && e->state == FZ_ALIVE && slot >= 0 && ((e->mask >> slot) & 1u);
    kiln_result want = KILN_OK;
    if (!targetable(c, h)) want = KILN_ERR_DEAD_ENTITY;
    else if (slot < 0) want = KILN_ERR_UNKNOWN_COMPONENT;
    else if (op == OP_SET && !deferred(c) && !has) want = KILN_ERR_MISSING_COMPONENT;
    else if (op != OP_REMOVE && !model_check_accepts(&c->m, h, slot, model)) want = KILN_ERR_INVALID_ARGUMENT;
    int64_t f0 = fuzz_alloc_failures();
    bool removed = !has;
    kiln_result r;
    if (op == OP_ADD) r = kiln_add(c->w, h, id, value);
    else if (op == OP_SET) r = kiln_set(c->w, h, id, value);
    else r = kiln_remove(c->w, h, id, &removed);
    if (r != KILN_OK) release_value(&v);
    if (fz_oom_ok(c, r, f0)) return;
    fz_expect(c, r, want, call);
    if (r != KILN_OK) return;
    if (op == OP_REMOVE && removed != has)
        fuzz_fail(c, "kiln_remove reported removed=%d, the model says %d", removed, has);
    if (deferred(c)) {
        fz_queue_push(c, &c->queue, op, h, slot, value ? model : NULL);
    } else if (op == OP_REMOVE) {
        if (has) model_remove(&c->m, e, slot);
    } else if (op == OP_ADD || model_size(slot) > 0) {
        model_write(&c->m, e, slot, model);
    }
}

static void op_get_mut(fz_ctx *c) {
    c->op_name = "kiln_get_mut";
    kiln_entity h = fz_pick_entity(c);
    int slot = fz_pick_comp(c, FZ_GENERIC + 1);
    uint8_t how = fz_byte(c);
    fz_ent *e = model_find(&c->m, h);
    bool has = e && e->state == FZ_ALIVE && slot >= 0 && ((e->mask >> slot) & 1u);
    void *p = kiln_get_mut(c->w, h, fz_comp_id(c, slot));
    if (!has || model_size(slot) == 0) {
        if (p) fuzz_fail(c, "kiln_get_mut gave a pointer for a component the entity lacks");
        const char *msg = kiln_world_error(c->w);
        if (strncmp(msg, "kiln_get_mut:", 13) != 0) fuzz_fail(c, "kiln_get_mut: no message ('%s')", msg);
        return;
    }
    if (!p) fuzz_fail(c, "kiln_get_mut gave NULL for a present component");
    e->tick[slot] = c->m.tick;
    if (slot == FZ_O || !(how & 1)) return;
    unsigned char model[FZ_VAL];
    fz_model_value(c, slot, model); /* written in place: no check hook (documented) */
    if (slot == FZ_PARENT) {
        /* Unlinked through the pointer (null, or a dead handle: a root either way, no cycle
         * possible); the children index must notice. */
        kiln_parent none = {KILN_NULL_ENTITY};
        for (int32_t k = 0; k < c->m.n_ents && (how & 2); k++)
            if (c->m.ents[k].state == FZ_DEAD) none.entity = c->m.ents[k].h;
        memcpy(model, &none, sizeof none);
    }
    memcpy(p, model, model_size(slot));
    memcpy(e->val[slot], model, model_size(slot));
}

/* ---- deferred sections ------------------------------------------------------------------ */

static void op_defer(fz_ctx *c, uint8_t b) {
    if (b & 1) {
        c->op_name = "kiln_defer_begin";
        if (c->m.defer_depth >= 3) return;
        kiln_defer_begin(c->w);
        c->m.defer_depth++;
        return;
    }
    c->op_name = "kiln_defer_end";
    if (c->m.defer_depth == 0 && c->queue.count == 0) return;
    if (c->m.defer_depth == 0) { /* a queue left by a failed end: a new section retries it */
        kiln_defer_begin(c->w);
        c->m.defer_depth++;
    }
    int64_t f0 = fuzz_alloc_failures();
    kiln_result r = kiln_defer_end(c->w);
    c->m.defer_depth--;
    if (c->m.defer_depth > 0) {
        fz_expect(c, r, KILN_OK, "kiln_defer_end");
        return;
    }
    bool oom = fz_oom_partial_ok(c, r, f0);
    if (!oom) fz_expect(c, r, KILN_OK, "kiln_defer_end");
    fz_defer_end_model(c, oom);
}

/* ---- command buffers -------------------------------------------------------------------- */

static fz_ph *find_ph(fz_ctx *c, kiln_entity handle) {
    for (int32_t i = 0; i < c->n_phs; i++)
        if (c->phs[i].handle == handle) return &c->phs[i];
    return NULL;
}

/* A target for a recording call: a placeholder seen before (of any buffer or batch, maybe
 * corrupted), or an entity pick. */
static kiln_entity pick_target(fz_ctx *c) {
    uint8_t b = fz_byte(c);
    if (c->n_phs == 0 || b % 3 != 0) return fz_pick_entity(c);
    kiln_entity ph = c->phs[(b / 3) % c->n_phs].handle;
    if (b == 99) ph |= (uint64_t)1 << 63;
    return ph;
}

/* The model's verdict on a recording call's target. */
static kiln_result target_check(fz_ctx *c, fz_buf *buf, int32_t which, kiln_entity h) {
    if (h == KILN_NULL_ENTITY) return KILN_ERR_DEAD_ENTITY;
    if (!kiln_is_placeholder(h)) return KILN_OK;
    fz_ph *ph = find_ph(c, h);
    if (!ph || ph->buf != which || buf->complete || ph->batch != buf->batch || ph->index >= buf->ph_count)
        return KILN_ERR_INVALID_ARGUMENT;
    return KILN_OK;
}

/* A successful record starts a new batch after a complete apply. */
static void record_done(fz_buf *buf) {
    if (!buf->complete) return;
    buf->complete = false;
    buf->batch++;
    buf->ph_count = 0;
}

static void op_record(fz_ctx *c) {
    uint8_t b = fz_byte(c);
    int32_t which = b & 1;
    fz_buf *buf = &c->bufs[which];
    if (buf->count + 2 >= buf->cap) return;
    uint8_t sub = (b >> 1) % 8;
    int64_t f0 = fuzz_alloc_failures();
    kiln_result r, want = KILN_OK;
    if (sub == 0 && b >= 0xe0) { /* 0xe0, 0xe1, 0xf0, 0xf1: were plain spawns */
        /* a spawn with up to two components (maybe unknown, maybe the same twice): all or
         * nothing, and what it records is a spawn and an add per component */
        c->op_name = "kiln_commands_spawn_with";
        if (buf->ph_count == FZ_MAX_PH || c->n_phs == FZ_MAX_PH || !room(c, 1) || buf->count + 4 >= buf->cap)
            return;
        int32_t n = fz_byte(c) % 3;
        int slot[2] = {0, 0};
        kiln_component ids[2] = {0, 0};
        fz_value v[2];
        memset(v, 0, sizeof v);
        unsigned char model[2][FZ_VAL];
        void *values[2] = {NULL, NULL};
        for (int32_t i = 0; i < n; i++) {
            slot[i] = fz_pick_comp(c, FZ_GENERIC);
            ids[i] = fz_comp_id(c, slot[i]);
            values[i] = (void *)(uintptr_t)make_value(c, slot[i], fz_byte(c) & 1, &v[i], model[i]);
            if (slot[i] < 0 && want == KILN_OK) want = KILN_ERR_UNKNOWN_COMPONENT;
        }
        if (n == 2 && ids[0] == ids[1] && want == KILN_OK) want = KILN_ERR_INVALID_ARGUMENT;
        kiln_entity ph = 0;
        r = kiln_commands_spawn_with(buf->cmd, ids, values, n, &ph);
        if (r != KILN_OK)
            for (int32_t i = 0; i < n; i++) release_value(&v[i]);
        if (fz_oom_ok(c, r, f0)) return;
        expect_buffer(c, buf->cmd, r, want, "kiln_commands_spawn_with");
        if (r != KILN_OK) return;
        record_done(buf);
        fz_ph p = {.handle = ph, .buf = which, .batch = buf->batch, .index = buf->ph_count};
        buf->ph[buf->ph_count++] = p;
        c->phs[c->n_phs++] = p;
        fz_queue_push(c, buf, OP_SPAWN, ph, 0, NULL);
        for (int32_t i = 0; i < n; i++) fz_queue_push(c, buf, OP_ADD, ph, slot[i], values[i] ? model[i] : NULL);
        return;
    }
    if (sub == 0) {
        c->op_name = "kiln_commands_spawn";
        if (buf->ph_count == FZ_MAX_PH || c->n_phs == FZ_MAX_PH || !room(c, 1)) return;
        kiln_entity ph = 0;
        r = kiln_commands_spawn(buf->cmd, &ph);
        if (fz_oom_ok(c, r, f0)) return;
        expect_buffer(c, buf->cmd, r, KILN_OK, "kiln_commands_spawn");
        record_done(buf);
        fz_ph p = {.handle = ph, .buf = which, .batch = buf->batch, .index = buf->ph_count};
        buf->ph[buf->ph_count++] = p;
        c->phs[c->n_phs++] = p;
        fz_queue_push(c, buf, OP_SPAWN, ph, 0, NULL);
        return;
    }
    if (sub == 1) {
        c->op_name = "kiln_commands_emit";
        bool bad = fz_byte(c) == 7;
        kiln_event_type type = bad ? (kiln_event_type){42} : c->ev;
        fz_event ev = {(int8_t)fz_byte(c), (int8_t)fz_byte(c)};
        bool given = fz_byte(c) & 1;
        r = kiln_commands_emit(buf->cmd, type, given ? &ev : NULL);
        if (fz_oom_ok(c, r, f0)) return;
        expect_buffer(c, buf->cmd, r, bad ? KILN_ERR_UNKNOWN_EVENT : KILN_OK, "kiln_commands_emit");
        if (r != KILN_OK) return;
        record_done(buf);
        unsigned char v[FZ_VAL] = {0};
        memcpy(v, &ev, sizeof ev);
        fz_queue_push(c, buf, OP_EMIT, KILN_NULL_ENTITY, 0, given ? v : NULL);
        return;
    }
    kiln_entity h = pick_target(c);
    want = target_check(c, buf, which, h);
    if (sub == 2) {
        c->op_name = "kiln_commands_despawn";
        r = kiln_commands_despawn(buf->cmd, h);
        if (fz_oom_ok(c, r, f0)) return;
        expect_buffer(c, buf->cmd, r, want, "kiln_commands_despawn");
        if (r != KILN_OK) return;
        record_done(buf);
        fz_queue_push(c, buf, OP_DESPAWN, h, 0, NULL);
        return;
    }
    if (sub == 3 && b >= 0xf6) { /* 0xf6, 0xf7: were adds; other bytes read as before */
        /* a Parent naming a placeholder seen before (this batch's, an older one's, the other
         * buffer's, maybe corrupted): the apply rewrites only this batch's spawned ones */
        c->op_name = "kiln_commands_add";
        if (c->n_phs == 0 || want != KILN_OK) return;
        uint8_t pick = fz_byte(c);
        kiln_parent p = {c->phs[pick % c->n_phs].handle | (pick == 0xff ? (uint64_t)1 << 63 : 0)};
        r = kiln_commands_add(buf->cmd, h, c->id[FZ_PARENT], &p);
        if (fz_oom_ok(c, r, f0)) return;
        expect_buffer(c, buf->cmd, r, KILN_OK, "kiln_commands_add");
        record_done(buf);
        unsigned char model[FZ_VAL] = {0};
        memcpy(model, &p, sizeof p);
        fz_queue_push(c, buf, OP_ADD, h, FZ_PARENT, model);
        return;
    }
    int slot = fz_pick_comp(c, sub == 5 ? FZ_GENERIC + 1 : FZ_GENERIC);
    if (want == KILN_OK && slot < 0) want = KILN_ERR_UNKNOWN_COMPONENT;
    if (sub == 5) {
        c->op_name = "kiln_commands_remove";
        r = kiln_commands_remove(buf->cmd, h, fz_comp_id(c, slot));
        if (fz_oom_ok(c, r, f0)) return;
        expect_buffer(c, buf->cmd, r, want, "kiln_commands_remove");
        if (r != KILN_OK) return;
        record_done(buf);
        fz_queue_push(c, buf, OP_REMOVE, h, slot, NULL);
        return;
    }
    /* add, set, add_sized (right or wrong size) */
    uint8_t op = sub == 4 ? OP_SET : OP_ADD;
    bool sized = sub >= 6;
    const char *call = op == OP_SET ? "kiln_commands_set" : sized ? "kiln_commands_add_sized" : "kiln_commands_add";
    c->op_name = call;
    fz_value v = {0};
    unsigned char model[FZ_VAL];
    void *value = (void *)(uintptr_t)make_value(c, slot, fz_byte(c) & 1, &v, model);
    size_t size = slot < 0 ? 4 : model_size(slot) + (sub == 7 ? 4 : 0);
    if (sized && slot < 0 && want == KILN_ERR_UNKNOWN_COMPONENT && target_check(c, buf, which, h) == KILN_OK)
        want = KILN_OK; /* a sized add may name a component registered later */
    if (sized && slot >= 0 && sub == 7 && want == KILN_OK) want = KILN_ERR_INVALID_ARGUMENT;
    if (op == OP_SET) r = kiln_commands_set(buf->cmd, h, fz_comp_id(c, slot), value);
    else if (sized) r = kiln_commands_add_sized(buf->cmd, h, fz_comp_id(c, slot), value, size);
    else r = kiln_commands_add(buf->cmd, h, fz_comp_id(c, slot), value);
    if (r != KILN_OK) release_value(&v);
    if (fz_oom_ok(c, r, f0)) return;
    expect_buffer(c, buf->cmd, r, want, call);
    if (r != KILN_OK) return;
    record_done(buf);
    fz_cmd *cmd = fz_queue_push(c, buf, op, h, slot, value ? model : NULL);
    if (slot < 0) cmd->comp = 0xff; /* the world does not know it: an apply fails on it */
}

static void op_apply(fz_ctx *c) {
    c->op_name = "kiln_commands_apply";
    fz_buf *buf = &c->bufs[fz_byte(c) & 1];
    if (!room(c, buf->count)) return;
    int64_t applied = -1;
    int64_t f0 = fuzz_alloc_failures();
    kiln_result r = kiln_commands_apply(buf->cmd, c->w, &applied);
    if (fz_oom_partial_ok(c, r, f0)) {
        model_apply_queue(c, buf, (int32_t)applied, NULL);
        if (kiln_commands_count(buf->cmd) != buf->count)
            fuzz_fail(c, "after a failed apply the buffer holds %lld commands, the model %d",
                      (long long)kiln_commands_count(buf->cmd), buf->count);
        return;
    }
    int32_t consumed = 0;
    kiln_result want = model_apply_queue(c, buf, -1, &consumed);
    fz_expect(c, r, want, "kiln_commands_apply");
    if (applied != consumed)
        fuzz_fail(c, "kiln_commands_apply applied %lld commands, the model %d", (long long)applied, consumed);
}

static void op_clear(fz_ctx *c) {
    c->op_name = "kiln_commands_clear";
    fz_buf *buf = &c->bufs[fz_byte(c) & 1];
    kiln_commands_clear(buf->cmd);
    buf->count = 0;
    buf->batch++;
    buf->ph_count = 0;
    buf->complete = false;
}

/* ---- resources and events --------------------------------------------------------------- */

static void op_resource(fz_ctx *c) {
    static const int pool[] = {FZ_A, FZ_B, FZ_T, FZ_O, FZ_W, -1};
    uint8_t b = fz_byte(c);
    int slot = pool[(b >> 2) % 6];
    kiln_component id = fz_comp_id(c, slot);
    fz_model *m = &c->m;
    int64_t f0 = fuzz_alloc_failures();
    if (b % 4 <= 1) {
        c->op_name = "kiln_resource_set";
        fz_value v = {0};
        unsigned char model[FZ_VAL];
        const void *value = make_value(c, slot, b & 1, &v, model);
        kiln_result r = kiln_resource_set(c->w, id, value);
        if (r != KILN_OK) release_value(&v);
        if (fz_oom_ok(c, r, f0)) return;
        fz_expect(c, r, slot < 0 ? KILN_ERR_UNKNOWN_COMPONENT : KILN_OK, "kiln_resource_set");
        if (r != KILN_OK) return;
        m->res_set[slot] = true;
        memcpy(m->res_val[slot], model, FZ_VAL);
    } else if (b % 4 == 2) {
        c->op_name = "kiln_resource_remove";
        bool removed = false;
        kiln_result r = kiln_resource_remove(c->w, id, &removed);
        fz_expect(c, r, slot < 0 ? KILN_ERR_UNKNOWN_COMPONENT : KILN_OK, "kiln_resource_remove");
        if (r != KILN_OK) return;
        if (removed != m->res_set[slot]) fuzz_fail(c, "kiln_resource_remove: removed=%d, model %d", removed, m->res_set[slot]);
        m->res_set[slot] = false;
    } else {
        c->op_name = "kiln_resource_get";
        void *p = kiln_resource_get(c->w, id);
        if (!p || slot < 0 || slot == FZ_O) return;
        unsigned char model[FZ_VAL];
        fz_model_value(c, slot, model); /* written through the pointer, as documented */
        memcpy(p, model, model_size(slot));
        memcpy(m->res_val[slot], model, FZ_VAL);
    }
}

static void op_event(fz_ctx *c) {
    uint8_t b = fz_byte(c);
    fz_model *m = &c->m;
    if (b % 3 == 2) {
        c->op_name = "kiln_events_update";
        kiln_events_update(c->w);
        memcpy(m->ev_prev, m->ev_cur, sizeof(fz_event) * (size_t)m->n_cur);
        m->n_prev = m->n_cur;
        m->n_cur = 0;
        return;
    }
    c->op_name = "kiln_event_emit";
    if (m->n_cur >= FZ_MAX_EVENTS) return;
    bool bad = b == 5;
    fz_event ev = {(int8_t)fz_byte(c), (int8_t)fz_byte(c)};
    bool given = b & 1;
    int64_t f0 = fuzz_alloc_failures();
    kiln_result r = kiln_event_emit(c->w, bad ? (kiln_event_type){0} : c->ev, given ? &ev : NULL);
    if (fz_oom_ok(c, r, f0)) return;
    fz_expect(c, r, bad ? KILN_ERR_UNKNOWN_EVENT : KILN_OK, "kiln_event_emit");
    if (r != KILN_OK) return;
    m->ev_cur[m->n_cur++] = given ? ev : (fz_event){5, 6};
}

/* ---- the decoder ------------------------------------------------------------------------ */

/* A tick, then a trim (which changes nothing the model sees; the fuzz build trims every
 * archetype under a quarter full, so rows move out of shrinking columns all the time). */
static void op_tick_and_trim(fz_ctx *c) {
    c->op_name = "kiln_tick_advance";
    if (kiln_tick_advance(c->w) != ++c->m.tick) fuzz_fail(c, "kiln_tick_advance returned another tick");
    c->op_name = "kiln_world_trim";
    int64_t freed = kiln_world_trim(c->w);
    if (freed < 0) fuzz_fail(c, "kiln_world_trim returned %lld", (long long)freed);
    if (freed != 0 && kiln_is_deferred(c->w)) fuzz_fail(c, "kiln_world_trim trimmed a deferred world");
}

void fuzz_op(fz_ctx *c, uint8_t opcode) {
    if (opcode >= 244) { /* the top opcodes, so older inputs keep their meaning */
        if (opcode < 248) fuzz_op_parallel_for(c);
        else if (opcode < 253) fuzz_op_register(c, fz_byte(c));
        else fuzz_op_event_register(c, fz_byte(c));
        return;
    }
    switch (opcode % 24) {
    case 0: case 1: op_spawn(c); break;
    case 2: op_spawn_with(c); break;
    case 3: op_spawn_batch(c); break;
    case 4: op_despawn(c); break;
    case 5: case 6: op_write(c, OP_ADD); break;
    case 7: op_write(c, OP_REMOVE); break;
    case 8: op_write(c, OP_SET); break;
    case 9: op_get_mut(c); break;
    case 10: op_tick_and_trim(c); break;
    case 11: op_defer(c, fz_byte(c)); break;
    case 12: case 13: op_record(c); break;
    case 14: op_apply(c); break;
    case 15: op_clear(c); break;
    case 16: op_resource(c); break;
    case 17: op_event(c); break;
    case 18: case 19: fuzz_op_query_iterate(c); break;
    case 20: fuzz_op_query(c, fz_byte(c)); break;
    case 21: fuzz_op_schedule(c, fz_byte(c)); break;
    case 22: case 23: fuzz_op_hierarchy(c, fz_byte(c)); break;
    }
}
