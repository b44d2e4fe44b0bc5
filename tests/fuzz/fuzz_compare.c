/* fuzz_compare.c: the world-against-model comparison run after every fuzzed operation, and
 * the query operations (create, destroy, iterate with row ranges, marks and in-loop changes),
 * whose every visited row is checked against the model. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_ops.h"

static void check_value(fz_ctx *c, const fz_ent *e, int slot, const void *got) {
    const unsigned char *want = e->val[slot];
    if (slot == FZ_O) {
        fz_owned o, w;
        memcpy(&o, got, sizeof o);
        memcpy(&w, want, sizeof w);
        if (o.id != w.id) fuzz_fail(c, "entity %llx: owned id %d, the model %d", (unsigned long long)e->h, o.id, w.id);
        if (w.id > 0 && (!o.payload || *o.payload != w.id))
            fuzz_fail(c, "entity %llx: owned value %d lost its payload", (unsigned long long)e->h, w.id);
        return;
    }
    if (slot == FZ_WORLD) {
        float g[16], m[16];
        memcpy(g, got, sizeof g);
        memcpy(m, want, sizeof m);
        for (int i = 0; i < 16; i++)
            if (fabsf(g[i] - m[i]) > 1e-3f * (1.0f + fabsf(m[i])))
                fuzz_fail(c, "entity %llx: WorldTransform[%d] is %g, the model %g", (unsigned long long)e->h,
                          i, (double)g[i], (double)m[i]);
        return;
    }
    if (memcmp(got, want, model_size(slot)) != 0)
        fuzz_fail(c, "entity %llx: component slot %d holds other bytes than the model", (unsigned long long)e->h, slot);
}

static bool query_matches(const fz_query *q, const fz_ent *e) {
    if (e->state != FZ_ALIVE) return false;
    for (int32_t i = 0; i < q->nwith; i++)
        if (!((e->mask >> q->with[i]) & 1u)) return false;
    for (int32_t i = 0; i < q->nwithout; i++)
        if ((e->mask >> q->without[i]) & 1u) return false;
    return true;
}

void fuzz_check_query(fz_ctx *c, fz_query *q) {
    int64_t want = 0;
    for (int32_t i = 0; i < c->m.n_ents; i++) want += query_matches(q, &c->m.ents[i]);
    int64_t got = kiln_query_count(q->q);
    if (got != want) fuzz_fail(c, "kiln_query_count is %lld, the model %lld", (long long)got, (long long)want);
}

static int compare_ids(const void *a, const void *b) {
    kiln_component x = *(const kiln_component *)a, y = *(const kiln_component *)b;
    return (x > y) - (x < y);
}

static void compare_entity(fz_ctx *c, fz_ent *e) {
    bool alive = kiln_is_alive(c->w, e->h);
    if (alive != (e->state == FZ_ALIVE))
        fuzz_fail(c, "entity %uv%u: kiln_is_alive %d, the model's state %d", kiln_entity_index(e->h),
                  kiln_entity_generation(e->h), alive, e->state);
    if (!alive) {
        if (kiln_entity_components(c->w, e->h, NULL, 0) != -1 || kiln_has(c->w, e->h, c->id[FZ_A]) ||
            kiln_get(c->w, e->h, c->id[FZ_B]) || kiln_changed_tick(c->w, e->h, c->id[FZ_B]))
            fuzz_fail(c, "a dead entity still shows components");
        return;
    }
    kiln_component got[FZ_NC + 1], want[FZ_NC];
    int32_t n = kiln_entity_components(c->w, e->h, got, FZ_NC + 1), nw = 0;
    for (int k = 0; k < FZ_NC; k++)
        if ((e->mask >> k) & 1u) want[nw++] = c->id[k];
    qsort(want, (size_t)nw, sizeof want[0], compare_ids);
    if (n != nw || memcmp(got, want, sizeof(kiln_component) * (size_t)nw) != 0)
    {
        uint32_t world_mask = 0;
        for (int32_t i = 0; i < n && i <= FZ_NC; i++)
            for (int k = 0; k < FZ_NC; k++)
                if (got[i] == c->id[k]) world_mask |= 1u << k;
        fuzz_fail(c, "entity %uv%u has components (by slot) %#x, the model %#x", kiln_entity_index(e->h),
                  kiln_entity_generation(e->h), world_mask, e->mask);
    }
    /* The list above covers presence; each present component is read back through every
     * getter, and one absent one (rotating) through all of them too. */
    int absent = (int)((uint64_t)(c->op_index + (int64_t)(e - c->m.ents)) % FZ_NC);
    for (int k = 0; k < FZ_NC; k++) {
        bool has = (e->mask >> k) & 1u;
        if (!has && k != absent) continue;
        if (kiln_has(c->w, e->h, c->id[k]) != has)
            fuzz_fail(c, "entity %llx: kiln_has(slot %d) disagrees with the model (%d)", (unsigned long long)e->h, k, has);
        const void *p = kiln_get(c->w, e->h, c->id[k]);
        if (!has || model_size(k) == 0) {
            if (p) fuzz_fail(c, "entity %llx: kiln_get(slot %d) gave a pointer, the model has no value", (unsigned long long)e->h, k);
        } else {
            if (!p) fuzz_fail(c, "entity %llx: kiln_get(slot %d) gave NULL", (unsigned long long)e->h, k);
            check_value(c, e, k, p);
        }
        kiln_tick t = kiln_changed_tick(c->w, e->h, c->id[k]);
        if (!e->tick_unknown[k] && t != e->tick[k])
            fuzz_fail(c, "entity %uv%u slot %d: changed tick %" PRIu64 ", the model %" PRIu64, kiln_entity_index(e->h),
                      kiln_entity_generation(e->h), k, t, e->tick[k]);
    }
}

static void compare_buffers(fz_ctx *c) {
    if (c->m.defer_depth > 0 || c->queue.count > 0) {
        int64_t pending = fuzz_deferred_pending(c->w);
        if (pending != c->queue.count)
            fuzz_fail(c, "the deferred queue holds %lld commands, the model %d", (long long)pending, c->queue.count);
    }
    for (int b = 0; b < 2; b++) {
        fz_buf *buf = &c->bufs[b];
        if (kiln_commands_count(buf->cmd) != buf->count)
            fuzz_fail(c, "buffer %d holds %lld commands, the model %d", b,
                      (long long)kiln_commands_count(buf->cmd), buf->count);
    }
    for (int32_t i = 0; i < c->n_phs; i++) {
        const fz_ph *ph = &c->phs[i];
        const fz_buf *buf = &c->bufs[ph->buf];
        kiln_entity want = KILN_NULL_ENTITY;
        if (ph->batch == buf->batch && ph->index < buf->ph_count) want = buf->ph[ph->index].resolved;
        kiln_entity got = kiln_commands_resolve(buf->cmd, ph->handle);
        if (got != want)
            fuzz_fail(c, "placeholder %d of buffer %d (batch %d) resolves to %llx, the model %llx", ph->index,
                      ph->buf, ph->batch, (unsigned long long)got, (unsigned long long)want);
    }
}

static void compare_resources(fz_ctx *c) {
    const fz_model *m = &c->m;
    static const int pool[] = {FZ_A, FZ_B, FZ_T, FZ_O, FZ_W};
    for (int i = 0; i < 5; i++) {
        int k = pool[i];
        if (kiln_resource_has(c->w, c->id[k]) != m->res_set[k])
            fuzz_fail(c, "resource slot %d: kiln_resource_has disagrees with the model (%d)", k, m->res_set[k]);
        const void *p = kiln_resource_get(c->w, c->id[k]);
        if (!m->res_set[k] || model_size(k) == 0) {
            if (p) fuzz_fail(c, "resource slot %d: kiln_resource_get gave a pointer", k);
            continue;
        }
        if (!p) fuzz_fail(c, "resource slot %d: kiln_resource_get gave NULL", k);
        fz_ent tmp;
        memcpy(tmp.val[k], m->res_val[k], FZ_VAL);
        tmp.h = 0;
        check_value(c, &tmp, k, p);
    }
}

static void compare_events(fz_ctx *c) {
    const fz_model *m = &c->m;
    int64_t n = kiln_event_count(c->w, c->ev);
    if (n != m->n_prev + m->n_cur)
        fuzz_fail(c, "kiln_event_count is %lld, the model %d", (long long)n, m->n_prev + m->n_cur);
    for (int32_t i = 0; i < n; i++) {
        const fz_event *got = kiln_event_get(c->w, c->ev, i);
        const fz_event *want = i < m->n_prev ? &m->ev_prev[i] : &m->ev_cur[i - m->n_prev];
        if (!got || got->a != want->a || got->b != want->b)
            fuzz_fail(c, "event %d differs from the model", i);
    }
    if (kiln_event_get(c->w, c->ev, n) != NULL) fuzz_fail(c, "kiln_event_get past the end gave a pointer");
}

/* kiln_get_many and a getter's reads of every handle the model knows (dead and reserved ones
 * too), for one slot in turn, answer what kiln_get answers handle by handle (checked against
 * the model above). */
static void compare_get_many(fz_ctx *c) {
    kiln_entity handles[FZ_MAX_ENT];
    const void *values[FZ_MAX_ENT];
    int32_t n = c->m.n_ents, found = 0;
    int slot = (int)((uint64_t)c->op_index % FZ_NC);
    for (int32_t i = 0; i < n; i++) handles[i] = c->m.ents[i].h;
    int32_t got = kiln_get_many(c->w, handles, n, c->id[slot], values);
    for (int32_t i = 0; i < n; i++) {
        if (values[i] != kiln_get(c->w, handles[i], c->id[slot]))
            fuzz_fail(c, "kiln_get_many(slot %d) of entity %llx disagrees with kiln_get", slot,
                      (unsigned long long)handles[i]);
        found += values[i] != NULL;
    }
    if (got != found) fuzz_fail(c, "kiln_get_many(slot %d) counted %d values, it wrote %d", slot, got, found);
    /* the same handles through a prepared getter, one by one and as a list (made with injection
     * paused, so that the comparison does not move the allocation indices of the operations) */
    kiln_getter g;
    fuzz_alloc_pause(true);
    kiln_result r = kiln_getter_init(c->w, c->id[slot], &g);
    fuzz_alloc_pause(false);
    if (r != KILN_OK) fuzz_fail(c, "kiln_getter_init(slot %d) failed: %s", slot, kiln_result_name(r));
    const void *listed[FZ_MAX_ENT];
    got = kiln_getter_get_many(&g, handles, n, listed);
    for (int32_t i = 0; i < n; i++)
        if (listed[i] != values[i] || kiln_getter_get(&g, handles[i]) != values[i])
            fuzz_fail(c, "the getter (slot %d) of entity %llx disagrees with kiln_get", slot,
                      (unsigned long long)handles[i]);
    if (got != found) fuzz_fail(c, "kiln_getter_get_many(slot %d) counted %d values, not %d", slot, got, found);
    kiln_getter_fini(&g);
}

void fuzz_compare(fz_ctx *c) {
    fz_model *m = &c->m;
    if (kiln_tick_current(c->w) != m->tick)
        fuzz_fail(c, "world tick %" PRIu64 ", the model %" PRIu64, kiln_tick_current(c->w), m->tick);
    if (kiln_is_deferred(c->w) != (m->defer_depth > 0))
        fuzz_fail(c, "kiln_is_deferred disagrees with the model (depth %d)", m->defer_depth);
    int64_t alive = 0;
    for (int32_t i = 0; i < m->n_ents; i++) {
        compare_entity(c, &m->ents[i]);
        alive += m->ents[i].state == FZ_ALIVE;
    }
    compare_get_many(c);
    if (kiln_entity_count(c->w) != alive)
        fuzz_fail(c, "kiln_entity_count is %lld, the model %lld", (long long)kiln_entity_count(c->w), (long long)alive);
    kiln_entity list[FZ_MAX_ENT + 1];
    int64_t n = kiln_world_entities(c->w, list, FZ_MAX_ENT + 1);
    if (n != alive) fuzz_fail(c, "kiln_world_entities lists %lld, the model %lld", (long long)n, (long long)alive);
    for (int64_t i = 0; i < n && i <= FZ_MAX_ENT; i++) {
        fz_ent *e = model_find(m, list[i]);
        if (!e || e->state != FZ_ALIVE) fuzz_fail(c, "kiln_world_entities lists an entity the model has not alive");
    }
    compare_resources(c);
    compare_events(c);
    for (int q = 0; q < FZ_MAX_QUERIES; q++)
        if (c->queries[q].q) fuzz_check_query(c, &c->queries[q]);
    compare_buffers(c);
    int64_t owned = model_expected_owned(c);
    if (fuzz_live_payloads() != owned)
        fuzz_fail(c, "%lld owned values are alive, the model expects %lld (leak or double destroy)",
                  (long long)fuzz_live_payloads(), (long long)owned);
    fuzz_hierarchy_check(c);
}

/* ---- queries ---------------------------------------------------------------------------- */

/* Checks a term list the way kiln_query_create does (unknown, then repeated). */
static kiln_result terms_check(const int *slots, int n, const int *seen, int nseen) {
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0) return KILN_ERR_UNKNOWN_COMPONENT;
        for (int j = 0; j < nseen; j++)
            if (seen[j] == slots[i]) return KILN_ERR_INVALID_ARGUMENT;
        for (int j = 0; j < i; j++)
            if (slots[j] == slots[i]) return KILN_ERR_INVALID_ARGUMENT;
    }
    return KILN_OK;
}

void fuzz_op_query(fz_ctx *c, uint8_t sub) {
    fz_query *q = &c->queries[sub % FZ_MAX_QUERIES];
    if (q->q) {
        c->op_name = "kiln_query_destroy";
        kiln_query_destroy(q->q);
        memset(q, 0, sizeof *q);
        if (sub & 0x80) return;
        kiln_world_stats_get(c->w, &c->before);
    }
    c->op_name = "kiln_query_create";
    uint8_t b = fz_byte(c);
    int nw = b % 4, no = (b >> 2) % 3, nx = (b >> 4) % 3;
    int with[4], opt[3], without[3], seen[12], nseen = 0;
    kiln_query_desc desc;
    memset(&desc, 0, sizeof desc);
    for (int i = 0; i < nw; i++) desc.with[i] = fz_comp_id(c, with[i] = fz_pick_comp(c, FZ_NC));
    for (int i = 0; i < no; i++) desc.optional[i] = fz_comp_id(c, opt[i] = fz_pick_comp(c, FZ_NC));
    for (int i = 0; i < nx; i++) desc.without[i] = fz_comp_id(c, without[i] = fz_pick_comp(c, FZ_NC));
    kiln_result want = terms_check(with, nw, seen, 0);
    if (want == KILN_OK && nw == 0) want = KILN_ERR_INVALID_ARGUMENT;
    for (int i = 0; i < nw; i++) seen[nseen++] = with[i];
    if (want == KILN_OK) want = terms_check(opt, no, seen, nseen);
    for (int i = 0; i < no; i++) seen[nseen++] = opt[i];
    if (want == KILN_OK) want = terms_check(without, nx, seen, nseen);
    int64_t f0 = fuzz_alloc_failures();
    kiln_query *made = NULL;
    kiln_result r = kiln_query_create(c->w, &desc, &made);
    if (fz_oom_ok(c, r, f0)) return;
    fz_expect(c, r, want, "kiln_query_create");
    if (r != KILN_OK) return;
    q->q = made;
    q->nwith = nw;
    q->noptional = no;
    q->nwithout = nx;
    for (int i = 0; i < nw; i++) q->with[i] = (uint8_t)with[i];
    for (int i = 0; i < no; i++) q->optional[i] = (uint8_t)opt[i];
    for (int i = 0; i < nx; i++) q->without[i] = (uint8_t)without[i];
}

/* Checks one row of a chunk against the model; marks and writes as the input says. */
static void visit_row(fz_ctx *c, fz_query *q, kiln_iter *it, int32_t row, uint8_t how) {
    fz_ent *e = model_find(&c->m, it->entities[row]);
    if (!e || !query_matches(q, e)) fuzz_fail(c, "iteration visited an entity the query does not match");
    for (int32_t t = 0; t < it->term_count; t++) {
        int slot = t < q->nwith ? q->with[t] : q->optional[t - q->nwith];
        bool has = (e->mask >> slot) & 1u;
        bool column = has && model_size(slot) > 0;
        if ((it->columns[t] != NULL) != column)
            fuzz_fail(c, "term %d of the chunk has %s column, the model %s one", t,
                      it->columns[t] ? "a" : "no", column ? "expects" : "does not expect");
        if (!column) continue;
        kiln_component_info info;
        kiln_component_info_get(c->w, c->id[slot], &info);
        const void *value = (const unsigned char *)it->columns[t] + (size_t)row * info.stride;
        if (value != kiln_get(c->w, e->h, c->id[slot]))
            fuzz_fail(c, "term %d row %d: the column points elsewhere than kiln_get", t, row);
        if (!e->tick_unknown[slot] && kiln_iter_row_tick(it, t, row) != e->tick[slot])
            fuzz_fail(c, "term %d row %d: tick %" PRIu64 ", the model %" PRIu64, t, row, kiln_iter_row_tick(it, t, row), e->tick[slot]);
        if (!e->tick_unknown[slot] && (!kiln_iter_changed_since(it, t, row, e->tick[slot] - 1) ||
                                       kiln_iter_changed_since(it, t, row, e->tick[slot])))
            fuzz_fail(c, "term %d row %d: kiln_iter_changed_since disagrees with tick %" PRIu64, t, row, e->tick[slot]);
        check_value(c, e, slot, value);
        if ((how & 1) && it->ticks[t]) {
            kiln_iter_mark_changed(it, t, row);
            e->tick[slot] = it->tick;
            e->tick_unknown[slot] = false;
        }
    }
}

/* A chunk's column tick is at least the latest tick of any of its rows (the model's). */
static void check_column_ticks(fz_ctx *c, fz_query *q, kiln_iter *it) {
    for (int32_t t = 0; t < it->term_count; t++) {
        if (!it->columns[t]) continue;
        int slot = t < q->nwith ? q->with[t] : q->optional[t - q->nwith];
        kiln_tick latest = 0;
        for (int32_t r = 0; r < it->count; r++) {
            const fz_ent *e = model_find(&c->m, it->entities[r]);
            if (e && !e->tick_unknown[slot] && e->tick[slot] > latest) latest = e->tick[slot];
        }
        if (kiln_iter_column_tick(it, t) < latest)
            fuzz_fail(c, "term %d: kiln_iter_column_tick %" PRIu64 " is older than a row's tick %" PRIu64, t,
                      kiln_iter_column_tick(it, t), latest);
    }
}

void fuzz_op_query_iterate(fz_ctx *c) {
    c->op_name = "kiln_query_iter";
    fz_query *q = &c->queries[fz_byte(c) % FZ_MAX_QUERIES];
    uint8_t flags = fz_byte(c);
    if (!q->q || c->queue.count + 64 > c->queue.cap) return;
    bool ranges = flags & 1, stop_early = (flags & 6) == 6;
    int64_t f0 = fuzz_alloc_failures();
    kiln_iter it;
    kiln_query_iter(q->q, &it);
    c->m.defer_depth++;
    int64_t seen = 0;
    bool stopped = false;
    while (kiln_query_next(&it)) {
        if (it.count <= 0) fuzz_fail(c, "kiln_query_next gave an empty chunk");
        if (it.term_count != q->nwith + q->noptional) fuzz_fail(c, "iterator term count differs");
        if (it.tick != c->m.tick) fuzz_fail(c, "iterator tick differs from the world tick");
        uint8_t how = fz_byte(c);
        if (ranges) {
            int32_t begin = fz_byte(c) % (it.count + 1);
            int32_t end = begin + fz_byte(c) % (it.count - begin + 1);
            kiln_iter view;
            kiln_iter_range(&it, begin, end, &view);
            if (view.count != end - begin || view.entities != it.entities + begin)
                fuzz_fail(c, "kiln_iter_range gave another view than rows [%d, %d)", begin, end);
            for (int32_t r = 0; r < view.count; r++) visit_row(c, q, &view, r, how);
            kiln_iter_fini(&view);
            for (int32_t r = 0; r < begin; r++) visit_row(c, q, &it, r, 0);
            for (int32_t r = end; r < it.count; r++) visit_row(c, q, &it, r, 0);
        } else {
            for (int32_t r = 0; r < it.count; r++) visit_row(c, q, &it, r, how);
        }
        seen += it.count;
        check_column_ticks(c, q, &it);
        /* A change made inside the loop is queued and lands when the iteration ends. */
        if (how & 2) {
            kiln_entity e = it.entities[fz_byte(c) % it.count];
            uint8_t what = fz_byte(c) % 3;
            kiln_result r;
            if (what == 0) {
                r = kiln_add(c->w, e, c->id[FZ_U], NULL);
                if (r == KILN_OK) fz_queue_push(c, &c->queue, OP_ADD, e, FZ_U, NULL);
            } else if (what == 1) {
                bool removed;
                r = kiln_remove(c->w, e, c->id[FZ_T], &removed);
                if (r == KILN_OK) fz_queue_push(c, &c->queue, OP_REMOVE, e, FZ_T, NULL);
            } else {
                r = kiln_despawn(c->w, e);
                if (r == KILN_OK) fz_queue_push(c, &c->queue, OP_DESPAWN, e, 0, NULL);
            }
            if (r != KILN_OK && r != KILN_ERR_OUT_OF_MEMORY)
                fuzz_fail(c, "a change inside an iteration failed: %s", kiln_world_error(c->w));
        }
        if (stop_early && (how & 4)) {
            stopped = true;
            break;
        }
    }
    kiln_iter_fini(&it);
    c->m.defer_depth--;
    if (!stopped) {
        int64_t want = 0;
        for (int32_t i = 0; i < c->m.n_ents; i++) want += query_matches(q, &c->m.ents[i]);
        if (seen != want) fuzz_fail(c, "the iteration visited %lld rows, the model matches %lld", (long long)seen, (long long)want);
    }
    if (c->m.defer_depth > 0) return;
    /* The last kiln_query_next already ended the iteration (and applied the queue). */
    bool oom = fuzz_deferred_pending(c->w) > 0;
    if (oom && fuzz_alloc_failures() == f0) fuzz_fail(c, "the queue was left unapplied without a failure");
    fz_defer_end_model(c, oom);
}

/* kiln_parallel_for on the shared pool: every row's first term gets its first int32 bumped
 * (plain values) and is marked changed, from whichever thread runs its range. */
typedef struct bump_job {
    size_t stride;
    bool bump;
} bump_job;

static void bump_rows(kiln_iter *view, void *user) {
    const bump_job *job = user;
    if (!view->columns[0]) return;
    for (int32_t r = 0; r < view->count; r++) {
        if (job->bump) {
            int32_t v;
            unsigned char *p = (unsigned char *)view->columns[0] + (size_t)r * job->stride;
            memcpy(&v, p, sizeof v);
            v += 1;
            memcpy(p, &v, sizeof v);
        }
        kiln_iter_mark_changed(view, 0, r);
    }
}

void fuzz_op_parallel_for(fz_ctx *c) {
    c->op_name = "kiln_parallel_for";
    fz_query *q = &c->queries[fz_byte(c) % FZ_MAX_QUERIES];
    int32_t min_rows = fz_byte(c) % 4;
    if (!q->q) return;
    int slot = q->with[0];
    kiln_component_info info;
    kiln_component_info_get(c->w, c->id[slot], &info);
    bump_job job = {.stride = info.stride, .bump = slot != FZ_O && slot != FZ_PARENT && model_size(slot) >= 4};
    int64_t f0 = fuzz_alloc_failures();
    kiln_result r = kiln_parallel_for(fuzz_jobs(), q->q, min_rows, bump_rows, &job);
    if (fz_oom_ok(c, r, f0)) return;
    fz_expect(c, r, KILN_OK, "kiln_parallel_for");
    if (model_size(slot) == 0) return;
    for (int32_t i = 0; i < c->m.n_ents; i++) {
        fz_ent *e = &c->m.ents[i];
        if (!query_matches(q, e)) continue;
        if (job.bump) {
            int32_t v;
            memcpy(&v, e->val[slot], sizeof v);
            v += 1;
            memcpy(e->val[slot], &v, sizeof v);
        }
        e->tick[slot] = c->m.tick;
        e->tick_unknown[slot] = false;
    }
}
