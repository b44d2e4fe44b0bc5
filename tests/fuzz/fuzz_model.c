/* fuzz_model.c: the reference model of a world: entities as an array of handles with a mask
 * and values per component, command queues as arrays applied in order. Nothing here calls kiln
 * except to learn a handle the world chose (a placeholder's resolution). */
#include <string.h>

#include "fuzz.h"

static const size_t sizes[FZ_NC] = {
    [FZ_A] = 8, [FZ_B] = 4, [FZ_T] = 0, [FZ_U] = 0, [FZ_O] = sizeof(fz_owned), [FZ_K] = 4,
    [FZ_W] = 32, [FZ_LOCAL] = sizeof(kiln_local_transform), [FZ_PARENT] = sizeof(kiln_parent),
    [FZ_WORLD] = sizeof(kiln_world_transform),
};

size_t model_size(int comp) { return sizes[comp]; }

void model_default(int comp, unsigned char dest[FZ_VAL]) {
    memset(dest, 0, FZ_VAL);
    if (comp == FZ_A) {
        int32_t v[2] = {7, -1};
        memcpy(dest, v, sizeof v);
    } else if (comp == FZ_K) {
        int32_t v = 1;
        memcpy(dest, &v, sizeof v);
    } else if (comp == FZ_LOCAL) {
        kiln_local_transform t = kiln_transform_local_identity();
        memcpy(dest, &t, sizeof t);
    }
}

/* The entity's parent as propagation sees it: a live entity other than itself, else null. */
kiln_entity model_parent_of(fz_model *m, const fz_ent *e) {
    if (!(e->mask & (1u << FZ_PARENT))) return KILN_NULL_ENTITY;
    kiln_parent p;
    memcpy(&p, e->val[FZ_PARENT], sizeof p);
    fz_ent *pe = model_find(m, p.entity);
    if (p.entity == e->h || !pe || pe->state != FZ_ALIVE) return KILN_NULL_ENTITY;
    return p.entity;
}

/* The Parent check hook's rule: no self link, no cycle, no chain deeper than 256. */
static bool parent_accepts(fz_model *m, kiln_entity entity, kiln_entity parent) {
    if (parent == KILN_NULL_ENTITY || entity == KILN_NULL_ENTITY) return true;
    if (parent == entity) return false;
    kiln_entity cur = parent;
    for (int depth = 0; cur != KILN_NULL_ENTITY; depth++) {
        if (cur == entity || depth >= 256) return false;
        fz_ent *ce = model_find(m, cur);
        if (!ce || ce->state != FZ_ALIVE) break;
        cur = model_parent_of(m, ce);
    }
    return true;
}

bool model_check_accepts(fz_model *m, kiln_entity entity, int comp, const unsigned char *value) {
    if (comp == FZ_PARENT) {
        kiln_parent p;
        memcpy(&p, value, sizeof p);
        return parent_accepts(m, entity, p.entity);
    }
    if (comp != FZ_K) return true;
    int32_t v;
    memcpy(&v, value, sizeof v);
    return ((v % 5) + 5) % 5 != 4;
}

fz_ent *model_find(fz_model *m, kiln_entity h) {
    if (h == KILN_NULL_ENTITY || kiln_is_placeholder(h)) return NULL;
    for (int32_t i = 0; i < m->n_ents; i++)
        if (m->ents[i].h == h) return &m->ents[i];
    return NULL;
}

fz_ent *model_add_entity(fz_ctx *c, kiln_entity h, uint8_t state) {
    fz_model *m = &c->m;
    if (h == KILN_NULL_ENTITY || kiln_is_placeholder(h))
        fuzz_fail(c, "the world handed out an invalid handle %llx", (unsigned long long)h);
    if (model_find(m, h))
        fuzz_fail(c, "the world handed out handle %uv%u again", kiln_entity_index(h),
                  kiln_entity_generation(h));
    if (m->n_ents == FZ_MAX_ENT) fuzz_fail(c, "harness: model entity table full");
    fz_ent *e = &m->ents[m->n_ents++];
    memset(e, 0, sizeof *e);
    e->h = h;
    e->state = state;
    return e;
}

void model_write(fz_model *m, fz_ent *e, int comp, const unsigned char *value) {
    e->mask |= 1u << comp;
    memset(e->val[comp], 0, FZ_VAL);
    memcpy(e->val[comp], value, sizes[comp]);
    e->tick[comp] = sizes[comp] ? m->tick : 0; /* tags have no column, so no tick */
    e->tick_unknown[comp] = false;
}

void model_remove(fz_model *m, fz_ent *e, int comp) {
    (void)m;
    e->mask &= ~(1u << comp);
    memset(e->val[comp], 0, FZ_VAL);
    e->tick[comp] = 0;
    e->tick_unknown[comp] = false;
}

void model_despawn(fz_model *m, fz_ent *e) {
    for (int k = 0; k < FZ_NC; k++)
        if (e->mask & (1u << k)) model_remove(m, e, k);
    e->state = FZ_DEAD;
}

static int32_t owned_id(const unsigned char *value) {
    fz_owned o;
    memcpy(&o, value, sizeof o);
    return o.id;
}

int64_t model_expected_owned(const fz_ctx *c) {
    const fz_model *m = &c->m;
    int64_t n = 0;
    for (int32_t i = 0; i < m->n_ents; i++)
        if ((m->ents[i].mask & (1u << FZ_O)) && owned_id(m->ents[i].val[FZ_O]) > 0) n++;
    if (m->res_set[FZ_O] && owned_id(m->res_val[FZ_O]) > 0) n++;
    const fz_buf *bufs[3] = {&c->queue, &c->bufs[0], &c->bufs[1]};
    for (int b = 0; b < 3; b++)
        for (int32_t i = 0; i < bufs[b]->count; i++) {
            const fz_cmd *cmd = &bufs[b]->cmds[i];
            if (cmd->has_value && cmd->comp == FZ_O && cmd->op != OP_EMIT && owned_id(cmd->value) > 0)
                n++;
        }
    return n;
}

/* The entity a command targets now: placeholders resolve through the buffer. */
static fz_ent *target_of(fz_ctx *c, fz_buf *buf, const fz_cmd *cmd) {
    kiln_entity h = cmd->target;
    if (kiln_is_placeholder(h)) {
        h = KILN_NULL_ENTITY;
        for (int32_t i = 0; i < buf->ph_count; i++)
            if (buf->ph[i].handle == cmd->target) h = buf->ph[i].resolved;
    }
    return model_find(&c->m, h);
}

static void push_event(fz_ctx *c, const fz_cmd *cmd) {
    fz_model *m = &c->m;
    fz_event ev = {5, 6};
    if (cmd->has_value) memcpy(&ev, cmd->value, sizeof ev);
    if (m->n_cur == FZ_MAX_EVENTS * 4) fuzz_fail(c, "harness: model event buffer full");
    m->ev_cur[m->n_cur++] = ev;
}

/* Applies one command; returns KILN_OK when it was consumed (applied or dropped). */
static kiln_result apply_one(fz_ctx *c, fz_buf *buf, fz_cmd *cmd) {
    fz_model *m = &c->m;
    if (cmd->op == OP_SPAWN) {
        for (int32_t i = 0; i < buf->ph_count; i++) {
            if (buf->ph[i].handle != cmd->target) continue;
            kiln_entity h = kiln_commands_resolve(buf->cmd, cmd->target);
            model_add_entity(c, h, FZ_ALIVE);
            buf->ph[i].resolved = h;
            return KILN_OK;
        }
        fuzz_fail(c, "harness: spawn of an unknown placeholder");
    }
    if (cmd->op == OP_EMIT) {
        push_event(c, cmd);
        return KILN_OK;
    }
    fz_ent *e = target_of(c, buf, cmd);
    if (cmd->op == OP_MATERIALIZE) {
        if (!e || e->state != FZ_RESERVED) fuzz_fail(c, "harness: materialising a non-reserved entity");
        e->state = FZ_ALIVE;
        return KILN_OK;
    }
    bool alive = e && e->state == FZ_ALIVE;
    if (cmd->op == OP_DESPAWN) {
        if (alive) model_despawn(m, e);
        return KILN_OK;
    }
    if (!alive) return buf->lenient ? KILN_OK : KILN_ERR_DEAD_ENTITY;
    /* A Parent holding a placeholder, after the target is found alive: this batch's, once
     * spawned, becomes its entity; any other fails the command (a lenient queue drops it; the
     * deferred queue never records one). */
    if (cmd->comp == FZ_PARENT && cmd->has_value && (cmd->op == OP_ADD || cmd->op == OP_SET)) {
        kiln_parent p;
        memcpy(&p, cmd->value, sizeof p);
        if (kiln_is_placeholder(p.entity)) {
            kiln_entity to = KILN_NULL_ENTITY;
            for (int32_t i = 0; i < buf->ph_count; i++)
                if (buf->ph[i].handle == p.entity) to = buf->ph[i].resolved;
            if (to == KILN_NULL_ENTITY) return buf->lenient ? KILN_OK : KILN_ERR_INVALID_ARGUMENT;
            p.entity = to;
            memcpy(cmd->value, &p, sizeof p);
        }
    }
    if (cmd->comp >= FZ_NC) return KILN_ERR_UNKNOWN_COMPONENT; /* recorded with its size only */
    unsigned char value[FZ_VAL];
    if (cmd->has_value) memcpy(value, cmd->value, FZ_VAL);
    else model_default(cmd->comp, value);
    bool has = (e->mask >> cmd->comp) & 1u;
    switch (cmd->op) {
    case OP_ADD:
        if (!model_check_accepts(m, e->h, cmd->comp, value))
            return buf->lenient ? KILN_OK : KILN_ERR_INVALID_ARGUMENT;
        model_write(m, e, cmd->comp, value);
        return KILN_OK;
    case OP_SET:
        if (!has) return buf->lenient ? KILN_OK : KILN_ERR_MISSING_COMPONENT;
        if (!model_check_accepts(m, e->h, cmd->comp, value))
            return buf->lenient ? KILN_OK : KILN_ERR_INVALID_ARGUMENT;
        model_write(m, e, cmd->comp, value);
        return KILN_OK;
    case OP_REMOVE:
        if (has) model_remove(m, e, cmd->comp);
        return KILN_OK;
    default:
        fuzz_fail(c, "harness: unknown command op %d", cmd->op);
    }
}

kiln_result model_apply_queue(fz_ctx *c, fz_buf *buf, int32_t n, int32_t *consumed) {
    int32_t i = 0;
    kiln_result r = KILN_OK;
    int32_t limit = n < 0 ? buf->count : n;
    for (; i < limit; i++) {
        r = apply_one(c, buf, &buf->cmds[i]);
        if (r != KILN_OK) {
            if (n >= 0)
                fuzz_fail(c, "the world applied command %d of %d, which the model refuses (%s)",
                          i + 1, buf->count, kiln_result_name(r));
            break;
        }
    }
    memmove(buf->cmds, buf->cmds + i, sizeof(fz_cmd) * (size_t)(buf->count - i));
    buf->count -= i;
    if (consumed) *consumed = i;
    if (buf->count == 0 && !buf->lenient) buf->complete = true;
    return r;
}
