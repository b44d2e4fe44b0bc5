/* commands_apply.c: applying a command buffer in order: spawns with their adds in one move,
 * runs of like spawns as one batch, placeholders (targets and inside values) resolved. */
#include <stdio.h>
#include <string.h>

#include "access.h"
#include "archetype.h"
#include "command_buffer.h"
#include "component.h"
#include "entity.h"
#include "events.h"
#include "links.h"

/* ---- apply ---------------------------------------------------------------------------- */

/* "command N (op component) on entity E" for the command c, into buf. */
static void describe_command(const kiln_commands *cmd, int64_t number, const kl_cmd *c, kiln_entity e,
                             char *buf, size_t size) {
    char eb[24], cb[32];
    kiln_component id = c->op == KL_OP_SPAWN ? 0 : c->component; /* a spawn names none */
    const kl_component *ev = c->op == KL_OP_EMIT ? kl_registry_get(&cmd->world->event_types, id) : NULL;
    const char *cname = ev ? ev->names : id ? kl_component_name(cmd->world, id, cb, sizeof cb) : "";
    if (kiln_is_placeholder(e)) /* a spawn's that did not land: as links.c names one */
        snprintf(eb, sizeof eb, "%u", (unsigned)(e & KL_PH_INDEX_MASK));
    int at = snprintf(buf, size, "command %lld (%s%s%s)", (long long)number, op_name(c->op), id ? " " : "", cname);
    if (c->op == KL_OP_EMIT || at < 0 || (size_t)at >= size) return; /* an emit is aimed at no entity */
    snprintf(buf + at, size - (size_t)at, " on %s %s", kiln_is_placeholder(e) ? "placeholder" : "entity",
             kiln_is_placeholder(e) ? eb : kiln_entity_format(e, eb, sizeof eb));
}

static kiln_result apply_fail(kiln_commands *cmd, int64_t index, const kl_cmd *c,
                              kiln_entity e, kiln_result code, const char *why) {
    char what[KILN_MAX_NAME + 128];
    describe_command(cmd, index - cmd->head + 1, c, e, what, sizeof what);
    return kl_fail(cmd->world, code, "%s: %s: %s", cmd->call, what, why);
}

/* The entity a command targets now (placeholders resolved), or null; not a spawn's. */
static kiln_entity target_of(const kiln_commands *cmd, const kl_cmd *c) {
    if (!kiln_is_placeholder(c->target)) return c->target;
    return cmd->placeholders[c->target & KL_PH_INDEX_MASK];
}

/* kl_link_fn over a buffer: what a placeholder of its current batch became. */
static kiln_entity find_spawned(const void *ctx, kiln_entity e, kl_link_state *state) {
    const kiln_commands *cmd = ctx;
    if (!is_current(cmd, e)) return KILN_NULL_ENTITY;
    kiln_entity to = cmd->placeholders[e & KL_PH_INDEX_MASK];
    if (to == KILN_NULL_ENTITY) *state = KL_LINK_PENDING;
    if (!kiln_is_placeholder(to)) return to;
    *state = KL_LINK_GONE; /* spawn_gone */
    return KILN_NULL_ENTITY;
}

/* find_spawned for an add merged into the spawn of own (apply_spawn): own stands for itself,
 * noted in *own_seen, as the value is rewritten after the spawn (apply_one). */
typedef struct spawn_links {
    const kiln_commands *cmd;
    kiln_entity own;
    bool *own_seen;
} spawn_links;

static kiln_entity find_for_spawn(const void *ctx, kiln_entity e, kl_link_state *state) {
    const spawn_links *links = ctx;
    if (e != links->own) return find_spawned(links->cmd, e, state);
    *links->own_seen = true;
    return e;
}

/* Drops the command c, the number-th of the apply, which a lenient buffer refuses (code,
 * why): destroys its value, and makes the drop known, as the world's count and last message
 * (bounded however many drop: a count and one message) and through the drop hook, run as a
 * destroy hook is. Out of line, so the apply loop carries none of it. */
__attribute__((noinline)) static void drop_command(kiln_commands *cmd, int64_t number, kl_cmd *c, kiln_entity e,
                                                   kiln_result code, const char *why) {
    kiln_world *world = cmd->world;
    /* c is read before the hook runs: one recording into the buffer moves its commands (grow_cmds) */
    char what[KILN_MAX_NAME + 128];
    describe_command(cmd, number, c, e, what, sizeof what);
    const kl_component *comp = c->has_value && c->hooks_known ? kl_component_get(world, c->component) : NULL;
    void *value = cmd_value(c);
    c->has_value = 0;
    if (comp && comp->destroy) {
        world->in_hook++; /* mid-apply (kl_in_hook) */
        comp->destroy(value, 1, comp->hook_ctx);
        world->in_hook--;
    }
    world->dropped++;
    world->dropped_code = code;
    snprintf(world->dropped_error, sizeof world->dropped_error, "%s: %s%s%s%s: %s; dropped", cmd->call,
             cmd->owner ? "system '" : "", cmd->owner ? cmd->owner : "", cmd->owner ? "': " : "", what, why);
    if (world->drop_fn) {
        world->in_hook++;
        world->drop_fn(world, cmd->owner, code, world->dropped_error, world->drop_ctx);
        world->in_hook--;
    }
}

/* Whether a lenient buffer drops a command refused with code instead of stopping there: any
 * refusal but out of memory, which may pass (the command then waits for the next apply, with
 * those after it); an archetype or slot limit, a size that differs, an unknown component
 * would hold every later command of the buffer back for good. */
static inline bool drops(const kiln_commands *cmd, kiln_result code) {
    return cmd->lenient && code != KILN_ERR_OUT_OF_MEMORY;
}

/* The reason in the world's message "<call>: <why>" that a failed call of the apply left. */
static const char *reason_of(const kiln_commands *cmd) {
    const char *msg = kiln_world_error(cmd->world);
    size_t n = strlen(cmd->call);
    return strncmp(msg, cmd->call, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ' ? msg + n + 2 : NULL;
}

/* kiln_despawn_unless's despawn at i, of e (alive), as it lands: refused (refuse) while e holds one of the
 * components its value lists, which an add queued before it may have brought since the call. */
__attribute__((noinline)) static int64_t despawn_kept(kiln_commands *cmd, int64_t i, kl_cmd *c, kiln_entity e,
                                                      kiln_result *result);

/* The command at i cannot land (code, why): a lenient buffer drops it (drops) and the apply
 * goes on past it (returns 1, *result KILN_OK); otherwise the apply fails there (returns 0,
 * *result code, the world's message naming the command). Out of line, as the failures are. */
__attribute__((noinline)) static int64_t refuse(kiln_commands *cmd, int64_t i, kl_cmd *c, kiln_entity e,
                                                kiln_result code, const char *why, kiln_result *result) {
    if (drops(cmd, code)) {
        drop_command(cmd, i - cmd->apply_head + 1, c, e, code, why);
        *result = KILN_OK;
        return 1;
    }
    *result = apply_fail(cmd, i, c, e, code, why);
    return 0;
}

/* Rewrites the placeholders in the value of the command at i (comp: its component or event
 * type). True when none is left; else the command is refused (refuse): a lenient buffer drops
 * it (*used 1), so a placeholder never lands as raw bits, and a buffer's apply fails there
 * (*used 0), the value left as recorded. */
static bool resolved(kiln_commands *cmd, int64_t i, kl_cmd *c, const kl_component *comp, int64_t *used,
                     kiln_result *result) {
    if (!c->has_value || !comp || comp->entity_slots == 0 || comp->size != cmd_size(c)) return true;
    char why[KILN_MAX_NAME + 128];
    if (kl_links_resolve(comp, cmd_value(c), find_spawned, cmd, why, sizeof why)) return true;
    *used = refuse(cmd, i, c, target_of(cmd, c), KILN_ERR_INVALID_ARGUMENT, why, result);
    return false;
}

/* The reason of the failure the world's message holds, into why: after "<call>: " when the
 * message starts so. */
static const char *failure_reason(const kiln_commands *cmd, char *why, size_t size) {
    const char *reason = reason_of(cmd);
    snprintf(why, size, "%s", reason ? reason : kiln_world_error(cmd->world));
    return why;
}

/* refuse for the command at i whose own call failed (*result): the world's message ("<call>:
 * <why>", a check hook's refusal say) then names the command and its entity too, as every
 * other failure of an apply does. Out of line: the apply loop's fast paths never fail. */
__attribute__((noinline)) static int64_t refuse_failed(kiln_commands *cmd, int64_t i, kl_cmd *c,
                                                       kiln_entity e, kiln_result *result) {
    if (!reason_of(cmd) && !drops(cmd, *result)) return 0; /* a message of another shape stays */
    char why[KL_ERROR_SIZE];
    return refuse(cmd, i, c, e, *result, failure_reason(cmd, why, sizeof why), result);
}

static int64_t despawn_kept(kiln_commands *cmd, int64_t i, kl_cmd *c, kiln_entity e, kiln_result *result) {
    const kiln_component *keep = cmd_value(c);
    for (uint32_t k = 0, n = cmd_size(c) / (uint32_t)sizeof *keep; k < n; k++) {
        if (!kiln_has(cmd->world, e, keep[k])) continue;
        char why[KILN_MAX_NAME + 64], cb[32];
        snprintf(why, sizeof why, "entity holds %s, which this despawn must keep",
                 kl_component_name(cmd->world, keep[k], cb, sizeof cb));
        return refuse(cmd, i, c, e, KILN_ERR_INVALID_ARGUMENT, why, result);
    }
    *result = kl_despawn_entity(cmd->world, cmd->call, e);
    return *result == KILN_OK ? 1 : drops(cmd, *result) ? refuse_failed(cmd, i, c, e, result) : 0;
}

/* A lenient buffer's spawn at i that cannot land (code, why; NULL: the world's failure
 * message): dropped whole, each add it holds too (a hook-free value: nothing to destroy), and
 * a materialisation's reserved slot let go, its generation spent, so its handle never names a
 * later spawn. Its placeholder is marked gone (spawn_gone): the commands after it naming it,
 * as their entity or in a value, are dropped in turn. Out of line. */
__attribute__((noinline)) static void drop_spawn(kiln_commands *cmd, int64_t i, kiln_result code,
                                                 const char *why) {
    char failure[KL_ERROR_SIZE];
    if (!why) why = failure_reason(cmd, failure, sizeof failure);
    kl_cmd *c = &cmd->cmds[i];
    int64_t number = i - cmd->apply_head + 1;
    if (c->op == KL_OP_MATERIALIZE) {
        if (kl_record_reserved(cmd->world, c->target)) kl_entity_release(cmd->world, c->target);
        drop_command(cmd, number, c, c->target, code, why);
        return;
    }
    kl_spawn_cmd s = c->spawn;
    kiln_entity target = spawn_target(cmd, c);
    spawn_gone(cmd, c);
    kl_cmd spawn = {.op = KL_OP_SPAWN};
    drop_command(cmd, number, &spawn, target, code, why);
    for (int32_t k = 0; k < s.adds; k++) {
        kl_cmd add = {.op = KL_OP_ADD, .component = s.held[k]};
        drop_command(cmd, number, &add, target, KILN_ERR_DEAD_ENTITY, "its spawn did not land");
    }
}

/* Why the command c of comp (NULL: not registered) cannot land with its recorded size, into
 * why; KILN_OK when it can. */
static kiln_result size_refusal(const kl_cmd *c, const kl_component *comp, char *why, size_t size) {
    if (!comp) {
        snprintf(why, size, "component is not registered");
        return KILN_ERR_UNKNOWN_COMPONENT;
    }
    if (c->op == KL_OP_REMOVE || comp->size == cmd_size(c)) return KILN_OK;
    snprintf(why, size, "recorded with %u bytes, registered with %u bytes", (unsigned)cmd_size(c),
             (unsigned)comp->size);
    return KILN_ERR_INVALID_ARGUMENT;
}

/* Why the add a, directly after the spawn c for its target, cannot land with it, into why:
 * an unknown component or another size, a value naming a placeholder that cannot be rewritten
 * (the spawn's own stands for itself: *own, the value rewritten after the spawn by apply_one, so
 * its check runs then), its check's refusal (asked once, here: *checked); KILN_OK when it can. */
static inline kiln_result add_unfit(kiln_commands *cmd, const kl_cmd *c, kl_cmd *a, kiln_entity target,
                                    bool *own, bool *checked, char *why, size_t size) {
    const kl_component *comp = kl_component_get(cmd->world, a->component);
    kiln_result code = size_refusal(a, comp, why, size);
    if (code != KILN_OK) return code;
    if (comp->entity_slots && a->has_value &&
        !kl_links_resolve(comp, cmd_value(a), find_for_spawn, &(spawn_links){cmd, target, own}, why, size))
        return KILN_ERR_INVALID_ARGUMENT;
    if (*own || !comp->check) return KILN_OK;
    why[0] = '\0';
    *checked = true;
    code = kl_component_ask(cmd->world, comp, c->op == KL_OP_MATERIALIZE ? c->target : KILN_NULL_ENTITY,
                            a->has_value ? cmd_value(a) : comp->defaults, cmd->call, why, size);
    if (code != KILN_OK && !why[0]) snprintf(why, size, "its check refused the value");
    return code;
}

static bool lists(const kiln_component *ids, int32_t n, kiln_component id) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

/* For a lenient buffer's spawn c, whose merge into one move of the n components comps stopped
 * at *j (KL_SPAWN_MAX adds, a repeated component, a value naming its own placeholder) while
 * adds for its target still follow: the first of those that cannot land (add_unfit, or one
 * more component than an entity holds; *j moves to it), so that the spawn is dropped whole
 * rather than landing without it, else KILN_OK. Out of line. */
__attribute__((noinline)) static kiln_result rest_unfit(kiln_commands *cmd, const kl_cmd *c, int64_t *j,
                                                        kiln_entity target, const kiln_component *comps,
                                                        int32_t n, char *why, size_t size) {
    kiln_component more[KL_TYPES_MAX]; /* those past the move: n + extra stays at most KL_TYPES_MAX */
    int32_t extra = 0;
    for (int64_t k = *j; k < cmd->count; k++) {
        kl_cmd *a = &cmd->cmds[k];
        if (a->op != KL_OP_ADD || a->target != target) break;
        bool own = false, checked = false;
        kiln_result code = add_unfit(cmd, c, a, target, &own, &checked, why, size);
        if (code == KILN_OK && !lists(comps, n, a->component) && !lists(more, extra, a->component)) {
            if (n + extra < KL_TYPES_MAX) {
                more[extra++] = a->component;
                continue;
            }
            snprintf(why, size, "an entity holds at most %d components", KL_TYPES_MAX);
            code = KILN_ERR_LIMIT;
        }
        if (code == KILN_OK) continue;
        *j = k;
        return code;
    }
    return KILN_OK;
}

/* A lenient buffer's spawn at i whose add at j, which directly follows it for its entity,
 * cannot land (code, why: add_unfit): the spawn is dropped whole (drop_spawn) rather than
 * landing without it, and that add and the others aimed at it are dropped after it as aimed
 * at a spawn that did not land. Returns 1, the spawn's slot. Out of line. */
__attribute__((noinline)) static int64_t drop_unfit(kiln_commands *cmd, int64_t i, int64_t j, kiln_result code,
                                                    const char *reason, kiln_result *result) {
    char why[2 * KL_ERROR_SIZE], name[32];
    snprintf(why, sizeof why, "its add of %s cannot land: %s",
             kl_component_name(cmd->world, cmd->cmds[j].component, name, sizeof name), reason);
    drop_spawn(cmd, i, code, why);
    *result = KILN_OK;
    return 1;
}

/* Spawns (or materialises) the entity of the command at i together with the adds it holds
 * and those that directly follow it for the same target (up to KL_SPAWN_MAX), in one
 * archetype move. Returns how many slots it consumed (with every add the spawn holds), or 0
 * with *result set on failure; a lenient buffer drops a spawn refused for good (drop_spawn):
 * 1, its slot alone, and so a spawn one of whose directly following adds cannot land, those
 * past the move too (rest_unfit). A buffer's spawn that landed short of an add its check
 * refused returns what it consumed with *result set: the apply stops at that add. */
static int64_t apply_spawn(kiln_commands *cmd, int64_t i, kiln_result *result) {
    kl_cmd *c = &cmd->cmds[i];
    kiln_component comps[KL_SPAWN_MAX];
    void *values[KL_SPAWN_MAX];
    int32_t n = 0, held = 0;
    kiln_entity target = c->target;
    if (c->op == KL_OP_SPAWN) {
        /* Held adds are of registered components with no hooks or entity fields, each once,
         * at their registered sizes (kl_spawn_cmd): nothing below would stop at them. */
        kl_spawn_cmd *s = &c->spawn;
        for (; held < s->adds; held++) {
            comps[held] = s->held[held];
            values[held] = held_value(s, held);
        }
        n = held;
        target = spawn_target(cmd, c);
    }
    kiln_result unfit = KILN_OK; /* an add at j that cannot land: a lenient buffer drops the spawn */
    bool checked = false;        /* unfit is its check's refusal */
    char why[KL_ERROR_SIZE];
    int64_t j = i + 1;
    for (; j < cmd->count && n < KL_SPAWN_MAX; j++) {
        kl_cmd *a = &cmd->cmds[j];
        if (a->op != KL_OP_ADD || a->target != target) break;
        bool repeat = false; /* a replace, applied after the spawn (rest_unfit looks at it first) */
        for (int32_t k = 0; k < n; k++) repeat |= comps[k] == a->component;
        if (repeat) break;
        bool own = false; /* a value naming this spawn's own placeholder: applied after it */
        if ((unfit = add_unfit(cmd, c, a, target, &own, &checked, why, sizeof why)) != KILN_OK || own) break;
        comps[n] = a->component;
        values[n] = a->has_value ? cmd_value(a) : NULL;
        n++;
    }
    if (KL_UNLIKELY(unfit == KILN_OK && cmd->lenient && j < cmd->count && cmd->cmds[j].op == KL_OP_ADD &&
                    cmd->cmds[j].target == target))
        unfit = rest_unfit(cmd, c, &j, target, comps, n, why, sizeof why);
    /* A buffer's apply lands the spawn and then fails at that add (apply_one). */
    if (KL_UNLIKELY(unfit != KILN_OK) && cmd->lenient) return drop_unfit(cmd, i, j, unfit, why, result);
    kiln_entity reserved = c->op == KL_OP_MATERIALIZE ? c->target : KILN_NULL_ENTITY;
    kiln_entity e;
    *result = kl_spawn_values(cmd->world, cmd->call, comps, values, n, true, reserved, &e);
    if (*result != KILN_OK) {
        if (!drops(cmd, *result)) return 0;
        drop_spawn(cmd, i, *result, NULL);
        *result = KILN_OK;
        return 1;
    }
    if (c->op == KL_OP_SPAWN) cmd->placeholders[c->spawn.index] = e;
    for (int32_t k = held; k < n; k++) cmd->cmds[i + 1 + k - held].has_value = 0;
    /* A buffer's apply fails at the add its check refused, without asking the check again (as
     * applying it alone would): numbered 1, from where the apply stops (cmd->head moves to it). */
    if (KL_UNLIKELY(unfit != KILN_OK) && checked)
        *result = apply_fail(cmd, cmd->head, &cmd->cmds[j], e, unfit, why);
    return 1 + n - held;
}

/* What a run expects of its units (apply_spawn_run): the spawn cache's k components, each
 * unit a spawn holding the first a of them followed by adds of the others. */
typedef struct run_shape {
    int32_t k, a;
    uint64_t spawn_head;   /* the first 8 bytes of a unit's spawn (op, adds, sizes, first) */
    kiln_component second; /* the second held component when a == 2 */
    kiln_entity base;      /* the batch's placeholder bits, less the index */
    const kiln_component *key;
    uint32_t sizes[KL_SPAWN_CACHE];
    uint64_t head[KL_SPAWN_CACHE]; /* the first 8 bytes an add of key[m] holding its value
                                    * inline begins with, so the usual add is told by one
                                    * comparison (the others field by field) */
} run_shape;

/* Whether the slots at i are one unit of shape and no further add to the same placeholder
 * follows, which apply_spawn would coalesce into the spawn or apply before the next: 2 when
 * every add after the spawn holds its value inline, 1 otherwise, 0 when not. i may be count
 * (a run reaching the buffer's end): the bound is checked before any read. */
static inline int cached_unit(const kl_cmd *cmds, int64_t count, int64_t i, const run_shape *shape) {
    int32_t a = shape->a, k = shape->k;
    if (i + (k - a) >= count) return 0; /* covers i == count, one past the array */
    const kl_cmd *c = &cmds[i];
    uint64_t first;
    memcpy(&first, &c->spawn, sizeof first);
    if (first != shape->spawn_head || c->spawn.held[1] != shape->second) return 0;
    kiln_entity target = shape->base | c->spawn.index;
    int held = 2; /* 2 while every add holds its value inline */
    for (int32_t m = a; m < k; m++) {
        const kl_cmd *add = &c[1 + m - a];
        memcpy(&first, add, sizeof first);
        if (add->target != target) return 0;
        if (first == shape->head[m]) continue;
        if (add->op != KL_OP_ADD || add->component != shape->key[m] || cmd_size(add) != shape->sizes[m])
            return 0;
        held = 1;
    }
    int64_t next = i + 1 + (k - a);
    return next == count || cmds[next].op != KL_OP_ADD || cmds[next].target != target ? held : 0;
}

/* The expected unit of a run from the spawn at i, or false when its held adds are not the
 * first of the spawn cache's list (or a component has entity fields: apply_spawn resolves). */
static bool run_shape_of(const kiln_commands *cmd, const kl_spawn_cmd *s, run_shape *shape) {
    kiln_world *world = cmd->world;
    int32_t k = world->spawn_key_count, a = s->adds;
    if (a > k) return false;
    *shape = (run_shape){.k = k, .a = a, .key = world->spawn_key,
                         .base = KILN_PLACEHOLDER_BIT | (cmd->tag << KL_PH_INDEX_BITS)};
    for (int32_t m = 0; m < k; m++) {
        const kl_component *comp = kl_component_get(world, world->spawn_key[m]);
        if (comp->entity_slots) return false;
        shape->sizes[m] = (uint32_t)comp->size;
        kl_cmd add = {.op = KL_OP_ADD, .has_value = 1, .hooks_known = 1, .inline_size = (uint8_t)comp->size,
                      .component = world->spawn_key[m]};
        memcpy(&shape->head[m], &add, sizeof shape->head[m]);
        if (comp->size > KL_INLINE) shape->head[m] = ~(uint64_t)0; /* in a block: no op is 0xFF */
    }
    kl_spawn_cmd spawn = {.op = KL_OP_SPAWN, .adds = (uint8_t)a};
    for (int32_t m = 0; m < a; m++) spawn.size[m] = (uint8_t)shape->sizes[m];
    if (a > 0) spawn.held[0] = world->spawn_key[0];
    if (a > 1) shape->second = world->spawn_key[1];
    memcpy(&shape->spawn_head, &spawn, sizeof shape->spawn_head);
    return true;
}

/* Applies a run of spawns from i as one batch, leaving the world as apply_spawn would one by
 * one: each spawn with its adds of the spawn cache's list, into the cached archetype when it
 * is plain (no hooks, no check: nothing can observe the order), as far as it has room and
 * slots are free without allocating; slots are taken as one by one (free list first, then
 * fresh ones), rows, ticks and versions likewise. Allocates nothing and cannot fail, so a
 * failure happens where the one-by-one path fails: apply_one goes on where the run stops.
 * Applied commands own nothing (see the invariant), so their values are not marked.
 * Returns the slots consumed and the adds their spawns held (in registers, not through a
 * pointer that would keep the apply loop's count in memory). */
typedef struct run_used {
    int64_t slots, held;
} run_used;

__attribute__((noinline)) static run_used apply_spawn_run(kiln_commands *cmd, int64_t i) {
    kiln_world *world = cmd->world;
    kl_archetype *arch = world->spawn_arch;
    run_shape shape;
    if (world->spawn_key_count <= 0 || !world->spawn_plain || arch->has_check ||
        arch->count == arch->capacity || !run_shape_of(cmd, &cmd->cmds[i].spawn, &shape))
        return (run_used){0, 0};
    int32_t k = shape.k, a = shape.a;
    const kl_cmd *cmds = cmd->cmds;
    int64_t count = cmd->count, unit = 1 + k - a, room = arch->capacity - arch->count, n = 0;
    int64_t fresh = (int64_t)world->page_count * KL_PAGE_SIZE - kl_slot_count(world);
    if (world->free_head == KL_NONE && fresh < room) room = fresh;
    if (room > KL_RUN_CHUNK) room = KL_RUN_CHUNK; /* its commands stay cached for the values */
    bool held = true; /* every value after the spawn inline in its add */
    if (a == k) { /* the usual run: every add held in its spawn, a unit a slot */
        for (int64_t j = i; n < room && j < count; j++, n++) {
            const kl_cmd *c = &cmds[j];
            uint64_t first;
            memcpy(&first, c, sizeof first);
            if (first != shape.spawn_head || c->spawn.held[1] != shape.second) break;
            if (j + 1 < count && c[1].op == KL_OP_ADD && c[1].target == (shape.base | c->spawn.index))
                break; /* a further add to it: apply_spawn takes it with the spawn */
        }
    } else {
        for (int64_t j = i; n < room; j += unit, n++) {
            int unit_kind = cached_unit(cmds, count, j, &shape);
            if (unit_kind == 0) break;
            held &= unit_kind == 2;
        }
    }
    kiln_tick tick = world->tick;
    kiln_row_tick stamp = kl_row_tick_now(world);
    int32_t first = arch->count, row = first;
    int64_t u = 0;
    for (; u < n && world->free_head != KL_NONE; u++, row++) { /* freed slots, in order */
        kiln_entity e = kl_entity_take(world);
        kl_record_set_alive(kl_record_at(world, kiln_entity_index(e)), kiln_entity_generation(e),
                            arch->id, (uint32_t)row);
        arch->entities[row] = e;
        cmd->placeholders[cmds[i + u * unit].spawn.index] = e;
    }
    uint32_t index = kl_slot_count(world);
    fresh = (int64_t)world->page_count * KL_PAGE_SIZE - index;
    if (n - u > fresh) n = u + fresh; /* the rest waits for apply_one to add a page */
    kl_record **pages = world->pages;
    for (; u < n; u++, row++, index++) { /* then fresh slots, at their first generation */
        kiln_entity e = kiln_entity_make(index, 1);
        kl_record_set_alive(&pages[index >> KL_PAGE_BITS][index & (KL_PAGE_SIZE - 1)], 1,
                            arch->id, (uint32_t)row);
        arch->entities[row] = e;
        cmd->placeholders[cmds[i + u * unit].spawn.index] = e;
    }
    if (n == 0) return (run_used){0, 0};
    atomic_store_explicit(&world->slot_count, index, memory_order_release);
    arch->count = row;
    arch->structure_tick = tick;
    world->structure_version += (uint64_t)n;
    world->alive += n;
    for (int32_t m = 0; m < k; m++) { /* then the values, column by column */
        if (world->spawn_column[m] < 0) continue; /* a tag */
        kl_column *col = &arch->columns[world->spawn_column[m]];
        size_t stride = col->stride;
        if (m < a) { /* held in the spawns, at their registered sizes, one after the other */
            const kl_cmd *c = &cmds[i];
            size_t at = m ? shape.sizes[0] : 0;
            if (stride == 8) {
                for (int32_t r = first; r < row; r++, c += unit) {
                    memcpy(col->data + (size_t)r * 8, c->spawn.bytes + at, 8);
                    col->ticks[r] = stamp;
                }
            } else {
                for (int32_t r = first; r < row; r++, c += unit) {
                    kl_copy_small(col->data + (size_t)r * stride, c->spawn.bytes + at, stride);
                    col->ticks[r] = stamp;
                }
            }
            kl_column_touch_appended(col, tick);
            continue;
        }
        kl_cmd *add = &cmd->cmds[i + 1 + m - a];
        if (held && stride == 8) { /* the usual run: each value in its add, of a known size */
            for (int32_t r = first; r < row; r++, add += unit) {
                memcpy(col->data + (size_t)r * 8, add->v.bytes, 8);
                col->ticks[r] = stamp;
            }
            kl_column_touch_appended(col, tick);
            continue;
        }
        for (int32_t r = first; r < row; r++, add += unit) {
            uint8_t *dst = col->data + (size_t)r * stride;
            if (!add->has_value) kl_column_write(col, r, NULL, true, tick, stamp, true); /* the defaults */
            else if (stride == 8) memcpy(dst, cmd_value(add), 8);
            else if (stride == 16) memcpy(dst, cmd_value(add), 16);
            else kl_copy_value(dst, cmd_value(add), stride);
            col->ticks[r] = stamp;
        }
        kl_column_touch_appended(col, tick);
    }
    return (run_used){n * unit, n * a};
}

/* Applies the command at i; returns the number of commands consumed (0 on failure). */
static inline __attribute__((always_inline)) int64_t apply_one(kiln_commands *cmd, int64_t i,
                                                               kiln_result *result) {
    kiln_world *world = cmd->world;
    kl_cmd *c = &cmd->cmds[i];
    *result = KILN_OK;
    if (c->op == KL_OP_SPAWN || c->op == KL_OP_MATERIALIZE) return apply_spawn(cmd, i, result);
    if (c->op == KL_OP_EMIT) {
        int64_t used;
        if (!resolved(cmd, i, c, kl_registry_get(&world->event_types, c->component), &used, result)) return used;
        *result = kl_event_push(world, c->component, c->has_value ? cmd_value(c) : NULL, cmd->call);
        return *result == KILN_OK ? 1 : 0; /* out of memory only: it waits */
    }
    kiln_entity e = target_of(cmd, c);
    /* An add or remove along a plain edge first: it implies what the checks below ask (a
     * live entity, a registered component with no hooks and, for an add, no check hook, so
     * a lenient queue has no refusal to drop), and the size too when the component was
     * registered when recorded (sizes never change). Not a value with entity fields
     * (KL_LINKS): its placeholders are rewritten first, below. */
    if (c->op == KL_OP_ADD && c->hooks_known == 1 &&
        kl_add_plain(world, e, c->component, c->has_value ? cmd_value(c) : NULL)) {
        c->has_value = 0; /* the world owns it now */
        return 1;
    }
    if (c->op == KL_OP_REMOVE && kl_remove_plain(world, e, c->component)) return 1;
    bool alive = kl_record_of(world, e) != NULL;
    if (c->op == KL_OP_DESPAWN) {
        if (KL_UNLIKELY(alive && c->has_value)) return despawn_kept(cmd, i, c, e, result);
        if (alive) *result = kl_despawn_entity(world, cmd->call, e);
        return *result == KILN_OK ? 1 : drops(cmd, *result) ? refuse_failed(cmd, i, c, e, result) : 0;
    }
    if (!alive) {
        /* A placeholder still unresolved at its turn: its spawn was dropped or skipped. */
        if (kiln_is_placeholder(c->target) && (e == KILN_NULL_ENTITY || kiln_is_placeholder(e)))
            return refuse(cmd, i, c, c->target, KILN_ERR_DEAD_ENTITY, "its spawn did not land", result);
        return refuse(cmd, i, c, e, KILN_ERR_DEAD_ENTITY, "entity is not alive", result);
    }
    /* Its value's placeholders after its entity: one aimed at a dropped spawn says so. */
    const kl_component *comp = kl_component_get(world, c->component);
    int64_t used;
    if (KL_UNLIKELY(c->hooks_known & KL_LINKS) && !resolved(cmd, i, c, comp, &used, result)) return used;
    char why[96];
    kiln_result unsized = size_refusal(c, comp, why, sizeof why);
    if (unsized == KILN_ERR_UNKNOWN_COMPONENT) return refuse(cmd, i, c, e, unsized, why, result);
    /* A lenient queue drops a value the component's check refuses now (the world moved on
     * since the call was queued); a buffer reports it. */
    kiln_result refused;
    if (cmd->lenient && c->op != KL_OP_REMOVE && comp->check &&
        (refused = kl_component_check(world, comp, e, c->has_value ? cmd_value(c) : NULL, cmd->call)) != KILN_OK) {
        const char *reason = reason_of(cmd);
        drop_command(cmd, i - cmd->apply_head + 1, &cmd->cmds[i], e, refused, /* the check may have recorded */
                     reason ? reason : "its check refused the value");
        return 1;
    }
    if (unsized != KILN_OK) return refuse(cmd, i, c, e, unsized, why, result);
    /* A component registered only after the record: its entity fields are known now. */
    if (!c->hooks_known && !resolved(cmd, i, c, comp, &used, result)) return used;
    void *value = c->has_value ? cmd_value(c) : NULL;
    switch (c->op) {
    case KL_OP_ADD:
        *result = kl_add_value(world, cmd->call, e, c->component, value, true);
        break;
    case KL_OP_SET:
        if (!kiln_has(world, e, c->component)) {
            snprintf(why, sizeof why, "entity has no %s", comp->names);
            return refuse(cmd, i, c, e, KILN_ERR_MISSING_COMPONENT, why, result);
        }
        *result = kl_set_value(world, cmd->call, e, c->component, value, true);
        break;
    case KL_OP_REMOVE:
        *result = kl_remove_component(world, cmd->call, e, c->component, NULL);
        break;
    default:
        break;
    }
    c = &cmd->cmds[i]; /* a hook of the change may have recorded into the buffer, moving its commands */
    if (*result != KILN_OK) return refuse_failed(cmd, i, c, e, result);
    c->has_value = 0; /* the world owns it now */
    return 1;
}

/* Slots and placeholders a buffer keeps room for however little it used (stress builds keep
 * none past their use, so tests and the fuzzer meet the shrinks). */
#ifdef KL_TRIM_STRESS
#define KL_CMD_KEEP 1
#else
#define KL_CMD_KEEP 64
#endif

/* After a complete apply, before the reset: a buffer keeps the room its busiest batch took,
 * so one burst (a mod's system queuing up to its limit once) would hold it for good. Room
 * far past what this batch used goes back: the command array and the placeholders shrink to
 * twice what it used (at least 64), and the value blocks beyond twice the bytes it used and
 * 64 KiB are freed. A buffer used alike frame after frame keeps its room (the arrays shrink
 * only when used under a quarter, and the blocks cover twice what it uses). */
static void give_back_room(kiln_commands *cmd) {
    kl_allocator *al = cmd->alloc;
    int64_t slots = cmd->count < KL_CMD_KEEP ? KL_CMD_KEEP : cmd->count;
    int64_t ph = cmd->ph_count < KL_CMD_KEEP ? KL_CMD_KEEP : (int64_t)cmd->ph_count;
    if (cmd->cap > 4 * slots) kl_shrink(al, (void **)&cmd->cmds, &cmd->cap, 2 * slots, sizeof(kl_cmd));
    if (cmd->ph_cap > 4 * ph) /* (the batch's placeholders stay: resolve still reads them) */
        kl_shrink(al, (void **)&cmd->placeholders, &cmd->ph_cap, 2 * ph, sizeof(kiln_entity));
    size_t used = 0, kept = 0;
    for (kl_block *b = cmd->first; b; b = b->next) used += b->used;
    for (kl_block **link = &cmd->first; *link;) {
        kl_block *b = *link;
        if (kept + b->size <= 2 * used + KL_BLOCK_SIZE) {
            kept += b->size;
            link = &b->next;
            continue;
        }
        *link = b->next;
        kl_free(al, b, b->alloc_size);
    }
}

void kl_commands_give_back(kiln_commands *cmd) {
    bool roomy = cmd->cap > 4 * KL_CMD_KEEP || cmd->ph_cap > 4 * KL_CMD_KEEP ||
                 (cmd->first && (cmd->first->next || cmd->first->size > KL_BLOCK_SIZE));
    if (!roomy || cmd->count != 0 || cmd->applying) return;
    give_back_room(cmd);
    reset_values(cmd); /* nothing pending holds a value: current may have been a freed block */
}

kiln_result kiln_commands_apply(kiln_commands *cmd, kiln_world *world, int64_t *applied) {
    KILN_ASSERT(cmd != NULL && world != NULL, "cmd and world are required");
    /* Refused in every build. Not deferred like the plain API: it would change the world under
     * the systems beside, or move rows under a loop. */
    if (atomic_load_explicit(&world->in_stage, memory_order_relaxed))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_commands_apply: called from a running system "
                       "that is not exclusive (systems beside it read the world); nothing was applied: record "
                       "into ctx->commands");
    if (atomic_load(&world->iterating) != 0 && !cmd->lenient)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_commands_apply: a query of the world is "
                       "iterating (its rows would move under it); nothing was applied: apply after the loop");
    if (kl_in_hook(world)) return kl_fail_in_hook(world, "kiln_commands_apply");
    return kl_commands_apply(cmd, world, applied, "kiln_commands_apply");
}

kiln_result kl_commands_apply(kiln_commands *cmd, kiln_world *world, int64_t *applied,
                              const char *call) {
    if (applied) *applied = 0;
    if (world != cmd->world)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: the command buffer belongs to another world%s", call,
                       cmd->world ? "" : " (destroyed)");
    KILN_ASSERT(atomic_load(&world->iterating) == 0 || cmd->lenient,
                "kiln_commands_apply while a query of the world iterates");
    /* A check hook run by a record may iterate a query, whose end applies the world's queue
     * again: this very buffer, mid-apply. That apply does nothing; this one goes on. */
    if (cmd->applying) return KILN_OK;
    cmd->applying = true;
    cmd->call = call;
    cmd->apply_head = cmd->head;
    cmd->hold = KL_NO_HOLD; /* its slot may be applied: the next spawn takes adds again */
    int64_t n = 0;
    kiln_result r = KILN_OK;
    while (cmd->head < cmd->count) {
        const kl_cmd *c = &cmd->cmds[cmd->head];
        if (c->op == KL_OP_SPAWN) { /* with its held adds: the commands it stands for */
            run_used run = apply_spawn_run(cmd, cmd->head);
            if (run.slots == 0) {
                run.held = c->spawn.adds; /* apply_spawn takes them all with it */
                if ((run.slots = apply_spawn(cmd, cmd->head, &r)) == 0) break;
            }
            cmd->head += run.slots;
            cmd->held -= run.held;
            n += run.slots + run.held;
            if (r != KILN_OK) break; /* landed, and stopped at the add after it (apply_spawn) */
            continue;
        }
        int64_t used = apply_one(cmd, cmd->head, &r);
        if (used == 0) break;
        cmd->head += used;
        n += used;
        if (r != KILN_OK) break;
    }
    cmd->applying = false;
    for (kl_retired *old = cmd->retired, *next; old; old = next) { /* nothing points into them now */
        next = old->next;
        kl_free(cmd->alloc, old->cmds, sizeof(kl_cmd) * (size_t)old->cap);
        kl_free(cmd->alloc, old, sizeof *old);
    }
    cmd->retired = NULL;
    if (applied) *applied = n;
    if (r != KILN_OK) return r;
    give_back_room(cmd);
    cmd->head = cmd->count = cmd->held = cmd->held_end = 0;
    reset_values(cmd);
    cmd->complete = true;
    cmd->spawned_last = KILN_NULL_ENTITY; /* its batch is over */
    return KILN_OK;
}
