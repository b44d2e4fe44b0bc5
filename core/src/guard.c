/* guard.c: debug-build checks that a C system keeps to its declared access. Invariant: a slot's
 * system is only read and written by the thread whose id the slot holds. */
#include "guard.h"

#if KILN_ACCESS_CHECKS

#include <stdio.h>
#include <stdlib.h>

#include "component.h"
#include "schedule_order.h"

/* How a failed check ends; define KILN_PANIC(msg) when building kiln to route it elsewhere
 * (like KILN_ASSERT). The message is also the world's error. */
#ifndef KILN_PANIC
#define KILN_PANIC(msg) (fprintf(stderr, "%s\n", (msg)), fflush(stderr), abort())
#endif

static kl_guard_slot *own_slot(kl_guard_slot *slots) {
    kl_thread_id me = kl_thread_me();
    for (int32_t i = 0; i < KL_GUARD_SLOTS; i++)
        if (kl_thread_owns(me, atomic_load_explicit(&slots[i].thread, memory_order_acquire),
                           atomic_load_explicit(&slots[i].token, memory_order_relaxed)))
            return &slots[i];
    return NULL;
}

void kl_guard_enter(const kiln_world *world, const kl_system *sys, bool range,
                    kl_guard_frame *frame) {
    frame->slot = NULL;
    frame->previous = NULL;
    frame->previous_range = false;
    kl_guard_slot *slots = atomic_load_explicit(&((kiln_world *)world)->guard, memory_order_acquire);
    if (!slots) return;
    kl_guard_slot *slot = own_slot(slots);
    if (slot) { /* a job of another system, run while this thread waits */
        frame->previous = slot->system;
        frame->previous_range = slot->range;
    } else {
        uint64_t token = kl_thread_claim();
        uintptr_t self = kl_thread_self();
        for (int32_t i = 0; i < KL_GUARD_SLOTS && !slot; i++) {
            uintptr_t free_id = 0;
            if (atomic_compare_exchange_strong_explicit(&slots[i].thread, &free_id, self,
                                                        memory_order_acq_rel,
                                                        memory_order_relaxed))
                slot = &slots[i];
        }
        if (!slot) return;
        atomic_store_explicit(&slot->token, token, memory_order_relaxed);
    }
    slot->system = sys;
    slot->range = range;
    frame->slot = slot;
}

void kl_guard_leave(const kl_guard_frame *frame) {
    if (!frame->slot) return;
    frame->slot->system = frame->previous;
    frame->slot->range = frame->previous_range;
    if (!frame->previous) atomic_store_explicit(&frame->slot->thread, 0, memory_order_release);
}

const kl_system *kl_guard_system(const kiln_world *world) {
    kl_guard_slot *slots = atomic_load_explicit(&((kiln_world *)world)->guard, memory_order_acquire);
    kl_guard_slot *slot = slots ? own_slot(slots) : NULL;
    return slot ? slot->system : NULL;
}

static bool listed(const kiln_component *list, int32_t count, kiln_component c) {
    for (int32_t i = 0; i < count; i++)
        if (list[i] == c) return true;
    return false;
}

void kl_guard_check_slow(const kiln_world *cworld, const char *call, kl_access access,
                         kiln_component component, kiln_entity entity) {
    kiln_world *world = (kiln_world *)cworld;
    kl_guard_slot *slots = atomic_load_explicit(&world->guard, memory_order_acquire);
    kl_guard_slot *slot = slots ? own_slot(slots) : NULL;
    const kl_system *sys = slot ? slot->system : NULL;
    bool changes = access != KL_READ && access != KL_WRITE;
    /* An exclusive system may do anything on its thread; its ranges run on any thread. */
    if (!sys || (sys->exclusive && !(slot->range && changes))) return;
    char buf[32], what[128];
    const char *name = kl_component_name(world, component, buf, sizeof buf);
    /* An unregistered component holds no values to race on (the call itself reports it), and
     * one registered after the system was added could not have been declared. */
    if ((access == KL_READ || access == KL_WRITE) &&
        (!kl_component_get(world, component) || component > sys->known_components))
        return;
    switch (access) {
    case KL_READ:
        if (listed(sys->reads, sys->read_count, component) ||
            listed(sys->writes, sys->write_count, component))
            return;
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                "%s: system '%s' reads %s without declaring it in reads or writes", call,
                sys->name, name);
        break;
    case KL_WRITE:
        if (listed(sys->writes, sys->write_count, component)) return;
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                "%s: system '%s' writes %s without declaring it in writes", call, sys->name, name);
        break;
    case KL_STRUCTURAL:
    case KL_EMIT:
    case KL_REGISTER:
    case KL_QUERIES:
        if (sys->main_thread && !slot->range) return;
        if (access == KL_REGISTER) {
            snprintf(what, sizeof what, "a type registered");
        } else if (access == KL_QUERIES) {
            snprintf(what, sizeof what, "its list of queries");
        } else if (access == KL_EMIT) {
            const kl_component *ev = kl_registry_get(&world->event_types, component);
            snprintf(what, sizeof what, "event %s", ev ? ev->names : "(unknown)");
        } else if (component) {
            snprintf(what, sizeof what, "%s", name);
        } else if (entity) {
            char eb[24];
            snprintf(what, sizeof what, "entity %s", kiln_entity_format(entity, eb, sizeof eb));
        } else {
            snprintf(what, sizeof what, "a spawn");
        }
        if (slot->range)
            kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                    "%s: system '%s' changes the world (%s) from a kiln_parallel_for range, "
                    "which may run on any thread; record it into a command buffer of its own thread",
                    call, sys->name, what);
        else
            kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                    "%s: system '%s' changes the world (%s) from a worker thread; record it "
                    "into ctx->commands",
                    call, sys->name, what);
        break;
    }
    KILN_PANIC(kiln_world_error(world));
}

void kl_guard_panic(const kiln_world *world) { KILN_PANIC(kiln_world_error(world)); }

#endif
