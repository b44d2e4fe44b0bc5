/* defer.c: deferred sections. Invariant: a deferred call is checked like an immediate one
 * before anything is queued, and a failing call leaves neither commands nor reserved handles
 * behind; the outermost end applies the queue in order. */
#include "defer.h"

#include <stdio.h>

#include "access.h"
#include "component.h"
#include "entity.h"
#include "spin.h"

/* Where deferred calls are queued: the running main-thread system's buffer, or the world's. */
static kiln_commands *queue_of(const kiln_world *world) {
    return world->defer_target ? world->defer_target : world->deferred;
}

/* Queues a command; a failure (out of memory) is reported through the world like any other. */
static kiln_result record(kiln_world *world, const char *call, kiln_commands *q, kl_op op,
                          kiln_entity e, kiln_component c, const void *value) {
    kiln_result r = kl_commands_record(q, call, op, e, c, value, false);
    if (r != KILN_OK) kl_fail(world, r, "%s", kiln_commands_error(q));
    return r;
}

kiln_result kl_fail_off_stage(kiln_world *world, const char *call, kiln_entity e, kiln_component c,
                              bool event) {
    char what[128], cb[32], eb[24];
    if (event) {
        const kl_component *ev = kl_registry_get(&world->event_types, c);
        snprintf(what, sizeof what, "event %s", ev ? ev->names : "(unknown)");
    } else if (c) {
        snprintf(what, sizeof what, "%s on entity %s", kl_component_name(world, c, cb, sizeof cb),
                 kiln_entity_format(e, eb, sizeof eb));
    } else if (e) {
        snprintf(what, sizeof what, "entity %s", kiln_entity_format(e, eb, sizeof eb));
    } else {
        snprintf(what, sizeof what, "a spawn");
    }
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                   "%s: called from a worker system, job or thread while a schedule runs a stage (%s); "
                   "nothing was changed: record it into ctx->commands, or a command buffer of the "
                   "thread's own",
                   call, what);
}

kiln_result kl_fail_atfini_off_stage(kiln_world *world, const char *call) {
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                   "%s: called from a worker system, job or thread while a schedule runs a stage; nothing was "
                   "registered: initialise addons before the run or from a main_thread system", call);
}

kiln_result kl_fail_register_off_stage(kiln_world *world, const char *call) {
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                   "%s: called from a worker system, job or thread while a schedule runs a stage; nothing was "
                   "changed: register types and make or destroy queries before the run or from a main_thread "
                   "system", call);
}

/* A deferred call's entity must be alive, or reserved by a deferred spawn. */
static kiln_result check_target(kiln_world *world, const char *call, kiln_entity e) {
    if (kl_record_of(world, e) || kl_record_reserved(world, e)) return KILN_OK;
    return kl_fail_dead(world, call, e);
}

kiln_result kl_defer_spawn(kiln_world *world, const char *call, const kiln_component *components,
                           const void *const *values, int32_t count, kiln_entity *dest) {
    if (kl_off_stage_thread(world)) return kl_fail_off_stage(world, call, KILN_NULL_ENTITY, 0, false);
    kiln_result r = kl_spawn_check(world, call, components, values, count, KILN_NULL_ENTITY);
    if (r != KILN_OK) return r;
    r = kl_entities_reserve(world, 1, call);
    if (r != KILN_OK) return r;
    kiln_commands *q = queue_of(world);
    int64_t before = kiln_commands_count(q);
    kiln_entity e = kl_entity_take(world);
    r = record(world, call, q, KL_OP_MATERIALIZE, e, 0, NULL);
    for (int32_t i = 0; i < count && r == KILN_OK; i++)
        r = record(world, call, q, KL_OP_ADD, e, components[i], values ? values[i] : NULL);
    if (r != KILN_OK) {
        /* Out of memory part-way: drop what this call queued and give the slot back as it
         * was (its generation unspent), so the call leaves no trace. */
        kl_commands_truncate(q, before);
        kl_entity_untake(world, e);
        return r;
    }
    if (dest) *dest = e;
    return KILN_OK;
}

kiln_result kl_defer_spawn_batch(kiln_world *world, const char *call,
                                 const kiln_component *components, int32_t count, int32_t n,
                                 kiln_entity *dest) {
    if (kl_off_stage_thread(world)) return kl_fail_off_stage(world, call, KILN_NULL_ENTITY, 0, false);
    /* Nothing to queue, but the list is checked as the immediate call checks it. */
    if (n == 0) return kl_spawn_check(world, call, components, NULL, count, KILN_NULL_ENTITY);
    kiln_commands *q = queue_of(world);
    int64_t before = kiln_commands_count(q);
    for (int32_t i = 0; i < n; i++) {
        kiln_result r = kl_defer_spawn(world, call, components, NULL, count, dest ? &dest[i] : NULL);
        if (r != KILN_OK) {
            /* All or nothing: give back every handle this call reserved. */
            kl_commands_unreserve_since(q, before);
            return r;
        }
    }
    return KILN_OK;
}

kiln_result kl_defer_despawn(kiln_world *world, const char *call, kiln_entity e) {
    if (kl_off_stage_thread(world)) return kl_fail_off_stage(world, call, e, 0, false);
    kiln_result r = check_target(world, call, e);
    if (r != KILN_OK) return r;
    return record(world, call, queue_of(world), KL_OP_DESPAWN, e, 0, NULL);
}

kiln_result kl_defer_despawn_unless(kiln_world *world, const char *call, kiln_entity e,
                                    const kiln_component *keep, int32_t count) {
    if (count == 0) return kl_defer_despawn(world, call, e);
    if (kl_off_stage_thread(world)) return kl_fail_off_stage(world, call, e, 0, false);
    kiln_result r = check_target(world, call, e);
    if (r != KILN_OK) return r;
    r = kl_commands_record_keep(queue_of(world), call, e, keep, count);
    if (r != KILN_OK) kl_fail(world, r, "%s", kiln_commands_error(queue_of(world)));
    return r;
}

kiln_result kl_defer_write(kiln_world *world, const char *call, kl_op op, kiln_entity e,
                           kiln_component c, const void *value) {
    if (kl_off_stage_thread(world)) return kl_fail_off_stage(world, call, e, c, false);
    kiln_result r = check_target(world, call, e);
    if (r != KILN_OK) return r;
    const kl_component *comp = kl_component_get(world, c);
    if (!comp) return kl_fail_unknown_on(world, call, e, c);
    /* A set does not check presence here: an add queued earlier in this section may bring
     * the component; a set whose component is absent when the queue lands is dropped. */
    if (op != KL_OP_REMOVE && comp->check &&
        (r = kl_component_check(world, comp, e, value, call)) != KILN_OK)
        return r;
    return record(world, call, queue_of(world), op, e, c, value);
}

int64_t kl_defer_mark(const kiln_world *world) {
    return kiln_commands_count(queue_of(world));
}

kiln_commands *kl_defer_queue(const kiln_world *world) { return queue_of(world); }

void kl_defer_rollback(kiln_world *world, int64_t mark) {
    kl_commands_truncate(queue_of(world), mark);
}

/* ---- sections ------------------------------------------------------------------------- */

static inline bool is_own(const kl_defer_slot *slot, uintptr_t thread, kl_thread_id me) {
    return kl_thread_owns(me, thread, atomic_load_explicit(&slot->token, memory_order_relaxed));
}

/* The calling thread's slot, or NULL. Only the slots ever claimed are searched. */
static kl_defer_slot *own_slot(kiln_world *world) {
    kl_thread_id me = kl_thread_me();
    int used = atomic_load_explicit(&world->defer_slots_used, memory_order_relaxed);
    for (int i = 0; i < used; i++) {
        kl_defer_slot *slot = &world->defer_slots[i];
        if (is_own(slot, atomic_load_explicit(&slot->thread, memory_order_acquire), me)) return slot;
    }
    return NULL;
}

/* A slot holding the calling thread's address but another token is an exited thread's (no two
 * live threads share the address): one that exited with a section open, which stays open for
 * good (no thread is left to end it). The calling thread takes it over, its depth from 0, so
 * slots are held by at most as many threads as live at once, not by every thread that exited. */
static kl_defer_slot *take_over(kl_defer_slot *slot, uint64_t token) {
    slot->depth = 0;
    atomic_store_explicit(&slot->token, token, memory_order_relaxed);
    return slot;
}

/* The calling thread's slot, else an exited thread's with its address, else a free one it
 * takes (with its token, taken at its first claim), else NULL. A thread whose sections went to
 * the table while the slots were full may hold a slot as well: its ends take from either, its
 * count is the sum. */
static kl_defer_slot *claim_slot(kiln_world *world) {
    kl_thread_id me = kl_thread_me();
    int used = atomic_load_explicit(&world->defer_slots_used, memory_order_relaxed), free_at = used;
    kl_defer_slot *exited = NULL;
    for (int i = 0; i < used; i++) {
        kl_defer_slot *slot = &world->defer_slots[i];
        uintptr_t t = atomic_load_explicit(&slot->thread, memory_order_acquire);
        if (is_own(slot, t, me)) return slot;
        if (t == me.self) exited = slot;
        if (t == 0 && free_at == used) free_at = i;
    }
    uint64_t token = KL_UNLIKELY(me.token == 0) ? kl_thread_token_take() : me.token;
    if (exited) return take_over(exited, token);
    for (int i = free_at; i < KL_DEFER_SLOTS; i++) {
        uintptr_t none = 0;
        if (!atomic_compare_exchange_strong_explicit(&world->defer_slots[i].thread, &none, me.self,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        atomic_store_explicit(&world->defer_slots[i].token, token, memory_order_relaxed);
        int seen = atomic_load_explicit(&world->defer_slots_used, memory_order_relaxed);
        while (seen <= i && !atomic_compare_exchange_weak_explicit(&world->defer_slots_used, &seen, i + 1,
                                                                   memory_order_relaxed, memory_order_relaxed)) {
        }
        return &world->defer_slots[i];
    }
    return NULL;
}

/* One of the calling thread's sections ended (or forgotten): its slot goes when none is left. */
static void unown(kl_defer_slot *slot) {
    if (--slot->depth == 0) atomic_store_explicit(&slot->thread, 0, memory_order_release);
}

/* ---- past the fast slots: a table grown with the world's allocator, searched under its lock */

/* The index of the calling thread's entry in the table, or -1: one load while none is held. */
static int32_t own_entry(kiln_world *world) {
    if (atomic_load_explicit(&world->defer_more_used, memory_order_relaxed) == 0) return -1;
    kl_thread_id me = kl_thread_me();
    int32_t found = -1;
    kl_spin_lock(&world->defer_lock);
    for (int64_t i = 0; i < world->defer_more_cap && found < 0; i++) {
        const kl_defer_slot *e = &world->defer_more[i];
        if (is_own(e, atomic_load_explicit(&e->thread, memory_order_relaxed), me)) found = (int32_t)i;
    }
    kl_spin_unlock(&world->defer_lock);
    return found;
}

/* Adds by (0: none) to the depth of the calling thread's entry i and returns it; the entry is
 * free again at 0. Under the lock: another thread growing the table moves it. */
static int32_t entry_add(kiln_world *world, int32_t i, int32_t by) {
    kl_spin_lock(&world->defer_lock);
    kl_defer_slot *e = &world->defer_more[i];
    int32_t depth = e->depth += by;
    if (depth == 0 && by != 0) {
        atomic_store_explicit(&e->thread, 0, memory_order_relaxed);
        atomic_fetch_sub_explicit(&world->defer_more_used, 1, memory_order_relaxed);
    }
    kl_spin_unlock(&world->defer_lock);
    return depth;
}

/* A section of a thread that found no fast slot: one more on its entry, taking a free one or
 * growing the table; out of memory, refused with nothing changed. */
__attribute__((cold, noinline)) static kiln_result begin_in_table(kiln_world *world) {
    int32_t i = own_entry(world);
    if (i >= 0) {
        entry_add(world, i, 1);
        return KILN_OK;
    }
    kl_spin_lock(&world->defer_lock);
    int64_t at = 0, cap = world->defer_more_cap;
    uintptr_t self = kl_thread_self(), t = 1; /* a free entry, or an exited thread's (take_over) */
    while (at < cap && (t = atomic_load_explicit(&world->defer_more[at].thread, memory_order_relaxed)) != 0 &&
           t != self)
        at++;
    if (at == cap && !kl_grow_zeroed(&world->alloc, (void **)&world->defer_more, &world->defer_more_cap, cap + 1,
                                     sizeof *world->defer_more, KL_DEFER_SLOTS)) {
        kl_spin_unlock(&world->defer_lock);
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY,
                       "kiln_defer_begin: out of memory for the calling thread's entry (%d threads beyond the "
                       "first %d hold sections); nothing was changed, no section opened",
                       atomic_load_explicit(&world->defer_more_used, memory_order_relaxed), KL_DEFER_SLOTS);
    }
    bool exited = at < cap && t == self; /* counted held already */
    kl_defer_slot *e = take_over(&world->defer_more[at], kl_thread_claim());
    e->depth = 1;
    atomic_store_explicit(&e->thread, self, memory_order_relaxed);
    if (!exited) atomic_fetch_add_explicit(&world->defer_more_used, 1, memory_order_relaxed);
    kl_spin_unlock(&world->defer_lock);
    return KILN_OK;
}

void kl_defer_free(kiln_world *world) {
    kl_free(&world->alloc, world->defer_more, kl_mul(sizeof *world->defer_more, (size_t)world->defer_more_cap));
    world->defer_more = NULL;
    world->defer_more_cap = 0;
}

kiln_result kiln_defer_begin(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_defer_slot *slot = claim_slot(world);
    if (slot) {
        slot->depth++;
    } else {
        kiln_result r = begin_in_table(world);
        if (r != KILN_OK) return r;
    }
    kl_defer_open(world);
    return KILN_OK;
}

/* Why an end finding depth sections open is refused; off the hot path. */
__attribute__((cold, noinline)) static kiln_result refuse_end(kiln_world *world, const char *call, int depth) {
    if (depth <= 0)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: no deferred section is open (an end without kiln_defer_begin); nothing was changed",
                       call);
    if (atomic_load_explicit(&world->in_stage, memory_order_relaxed))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: called without kiln_defer_begin from a running system that is not exclusive (the "
                       "open section is the schedule's); nothing was changed", call);
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                   "%s: the calling thread has no deferred section open (an end without its kiln_defer_begin; "
                   "the open one is another thread's, or a loop's); nothing was changed", call);
}

/* Ends a section: one off the count, unless refused; then slot (when set) or the thread's table
 * entry (entry >= 0) loses one; the outermost end applies the queue. */
static kiln_result end_section(kiln_world *world, const char *call, kl_defer_slot *slot, int32_t entry) {
    /* Checked in every build before the count moves: more ends than begins would leave it
     * below zero (a later begin defers nothing), and the last end of a running stage's section
     * belongs to the schedule (a system's unmatched end would apply the world's queue while
     * other systems run, and let workers change the world at once). */
    int depth = atomic_load_explicit(&world->defer_depth, memory_order_relaxed);
    do {
        if (KL_UNLIKELY(depth <= 1) &&
            (depth <= 0 || atomic_load_explicit(&world->in_stage, memory_order_relaxed)))
            return refuse_end(world, call, depth);
    } while (!atomic_compare_exchange_weak_explicit(&world->defer_depth, &depth, depth - 1,
                                                    memory_order_relaxed, memory_order_relaxed));
    if (slot) unown(slot);
    if (entry >= 0) entry_add(world, entry, -1);
    if (depth > 1) return KILN_OK;
    if (kiln_commands_count(world->deferred) == 0) return KILN_OK;
    /* from a destroy or move hook: the queue waits for the next outermost end */
    if (kl_in_hook(world)) return kl_fail_in_hook(world, call);
    return kl_commands_apply(world->deferred, world, NULL, call);
}

kiln_result kiln_defer_end(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    /* Checked in every build: a thread ends only the sections it began. Another thread's end
     * would land the queue under that thread's section, whose own end would then be refused. */
    kl_defer_slot *slot = own_slot(world);
    if (slot) return end_section(world, "kiln_defer_end", slot, -1);
    int32_t entry = own_entry(world);
    if (entry >= 0) return end_section(world, "kiln_defer_end", NULL, entry);
    return refuse_end(world, "kiln_defer_end", atomic_load_explicit(&world->defer_depth, memory_order_relaxed));
}

kiln_result kl_defer_end(kiln_world *world, const char *call) { return end_section(world, call, NULL, -1); }

int32_t kl_defer_owned(const kiln_world *world) {
    kl_defer_slot *slot = own_slot((kiln_world *)world);
    int32_t entry = own_entry((kiln_world *)world);
    return (slot ? slot->depth : 0) + (entry >= 0 ? entry_add((kiln_world *)world, entry, 0) : 0);
}

void kl_defer_disown(kiln_world *world, int32_t keep) {
    kl_defer_slot *slot = own_slot(world);
    int32_t entry = own_entry(world), drop = kl_defer_owned(world) - keep;
    if (entry >= 0 && drop > 0) {
        int32_t in_entry = entry_add(world, entry, 0), taken = in_entry < drop ? in_entry : drop;
        entry_add(world, entry, -taken);
        drop -= taken;
    }
    while (slot && drop-- > 0) unown(slot);
}

void kiln_defer_clear(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    /* Checked in every build: while deferred the queue holds changes other calls (a loop, the
     * systems of a running stage) still count on. */
    if (kl_deferred(world)) {
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                "kiln_defer_clear: the world is deferred (a section, an iteration or a running stage is "
                "open); nothing was dropped");
        return;
    }
    kiln_commands_clear(world->deferred);
}

bool kiln_is_deferred(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return kl_deferred(world);
}
