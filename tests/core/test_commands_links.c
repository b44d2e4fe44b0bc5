/* test_commands_links.c: Check suite for placeholders inside recorded values: a buffer's apply
 * rewrites its batch's placeholders in entity fields (Parent links, arrays, events) to the
 * entities spawned, and refuses forward or foreign ones at the command, resumably. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"
#include "transform_fixture.h"

static scene F;

/* A user component with an array of entities and a plain number between them. */
typedef struct squad {
    kiln_entity members[3];
    int32_t size;
    kiln_entity leader;
} squad;

static kiln_component squad_id;
static kiln_event_type hit_id;
typedef struct hit { kiln_entity by; float damage; } hit;

static void setup(void) {
    scene_open(&F);
    kiln_field sf[] = {{"members", KILN_TYPE_ENTITY, offsetof(squad, members), 3},
                       {"size", KILN_TYPE_INT32, offsetof(squad, size), 0},
                       {"leader", KILN_TYPE_ENTITY, offsetof(squad, leader), 0}};
    ck_assert_int_eq(kiln_component_register(F.world, &(kiln_component_desc){.name = "Squad", .size = sizeof(squad),
                         .align = _Alignof(squad), .fields = sf, .field_count = 3}, &squad_id), KILN_OK);
    kiln_field hf[] = {{"by", KILN_TYPE_ENTITY, offsetof(hit, by), 0}, {"damage", KILN_TYPE_FLOAT, offsetof(hit, damage), 0}};
    ck_assert_int_eq(kiln_event_register(F.world, &(kiln_component_desc){.name = "Hit", .size = sizeof(hit),
                         .align = _Alignof(hit), .fields = hf, .field_count = 2}, &hit_id), KILN_OK);
}

static void teardown(void) { scene_close(&F); }

static kiln_entity parent_of(kiln_entity child) {
    const kiln_parent *p = kiln_get(F.world, child, F.ids.parent);
    return p ? p->entity : KILN_NULL_ENTITY;
}

/* Records the tree parents first into cmd: each node a spawn with its LocalTransform (when
 * it has one) and a Parent naming its parent's placeholder. */
static void record_tree(kiln_commands *cmd, const node *nodes, int n, kiln_entity *ph) {
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(kiln_commands_spawn(cmd, &ph[i]), KILN_OK);
        if (nodes[i].has_local)
            ck_assert_int_eq(kiln_commands_add(cmd, ph[i], F.ids.local, (void *)&nodes[i].local), KILN_OK);
        if (nodes[i].parent >= 0)
            ck_assert_int_eq(kiln_commands_add(cmd, ph[i], F.ids.parent, &(kiln_parent){ph[nodes[i].parent]}), KILN_OK);
    }
}

/* Every node's Parent names the entity its parent's placeholder became, and propagation
 * matches the model. */
static void assert_tree_landed(kiln_commands *cmd, const node *nodes, int n, const kiln_entity *ph) {
    kiln_entity handles[64];
    for (int i = 0; i < n; i++) {
        handles[i] = kiln_commands_resolve(cmd, ph[i]);
        ck_assert(kiln_is_alive(F.world, handles[i]));
        kiln_entity want = nodes[i].parent >= 0 ? handles[nodes[i].parent] : KILN_NULL_ENTITY;
        ck_assert_msg(parent_of(handles[i]) == want, "node %d has the wrong parent", i);
    }
    propagate_ok(&F, NULL);
    assert_scene_matches_model(&F, nodes, n, handles);
}

static void assert_message(const char *start, const char *what) {
    const char *msg = kiln_world_error(F.world);
    ck_assert_msg(strncmp(msg, start, strlen(start)) == 0 && strstr(msg, what) != NULL,
                  "message \"%s\" is not \"%s ... %s ...\"", msg, start, what);
}

KILN_TEST_GROUP_WITH(links, .setup = setup, .teardown = teardown, .timeout = 60);

KILN_TEST(links, a_parent_and_its_child_spawned_by_one_buffer_are_linked_and_propagate) {
    node nodes[2] = {{-1, true, sample_local(1)}, {0, true, sample_local(2)}};
    kiln_commands *cmd = kiln_commands_create(F.world);
    kiln_entity ph[2];
    record_tree(cmd, nodes, 2, ph);
    int64_t applied = -1;
    ck_assert_int_eq(kiln_commands_apply(cmd, F.world, &applied), KILN_OK);
    ck_assert_int_eq(applied, 5);
    assert_tree_landed(cmd, nodes, 2, ph);
    ck_assert_int_eq(kiln_transform_children(F.world, kiln_commands_resolve(cmd, ph[0]), NULL, 0), 1);
    kiln_commands_destroy(cmd);
}

KILN_TEST(links, chains_and_random_trees_recorded_in_one_buffer_match_the_model) {
    for (uint32_t seed = 1; seed <= 12; seed++) {
        node nodes[48];
        int n = make_tree(nodes, 48, seed);
        kiln_commands *cmd = kiln_commands_create(F.world);
        kiln_entity ph[48];
        record_tree(cmd, nodes, n, ph);
        ck_assert_int_eq(kiln_commands_apply(cmd, F.world, NULL), KILN_OK);
        assert_tree_landed(cmd, nodes, n, ph);
        kiln_commands_destroy(cmd);
    }
    /* a chain 40 deep, each link to the placeholder recorded just before */
    node chain[40];
    for (int i = 0; i < 40; i++) chain[i] = (node){i - 1, true, sample_local(i)};
    kiln_commands *cmd = kiln_commands_create(F.world);
    kiln_entity ph[40];
    record_tree(cmd, chain, 40, ph);
    ck_assert_int_eq(kiln_commands_apply(cmd, F.world, NULL), KILN_OK);
    assert_tree_landed(cmd, chain, 40, ph);
    kiln_commands_destroy(cmd);
}

KILN_TEST(links, set_and_add_on_existing_entities_take_placeholders_too) {
    kiln_local_transform l = sample_local(3);
    kiln_entity old = spawn_node(&F, KILN_NULL_ENTITY, &l), other = spawn_node(&F, KILN_NULL_ENTITY, &l);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, old, other), KILN_OK);
    kiln_commands *cmd = kiln_commands_create(F.world);
    kiln_entity top, lone;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &top), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, top, F.ids.local, &l), KILN_OK);
    ck_assert_int_eq(kiln_commands_set(cmd, old, F.ids.parent, &(kiln_parent){top}), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(cmd, &lone), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, other, F.ids.parent, &(kiln_parent){lone}), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(cmd, F.world, NULL), KILN_OK);
    ck_assert(parent_of(old) == kiln_commands_resolve(cmd, top));
    ck_assert(parent_of(other) == kiln_commands_resolve(cmd, lone));
    propagate_ok(&F, NULL);
    kiln_commands_destroy(cmd);
}

KILN_TEST(links, entity_arrays_and_event_fields_are_rewritten_slot_by_slot) {
    kiln_entity real;
    ck_assert_int_eq(kiln_spawn(F.world, &real), KILN_OK);
    kiln_commands *cmd = kiln_commands_create(F.world);
    kiln_entity a, b, holder;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &a), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(cmd, &b), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(cmd, &holder), KILN_OK);
    squad s = {{b, real, KILN_NULL_ENTITY}, 0x40000000, a}; /* size: a bit pattern left alone */
    ck_assert_int_eq(kiln_commands_add(cmd, holder, squad_id, &s), KILN_OK);
    /* a squad naming its own holder: the spawn lands first, then the add */
    ck_assert_int_eq(kiln_commands_add(cmd, a, squad_id, &(squad){{a, holder, a}, 3, holder}), KILN_OK);
    ck_assert_int_eq(kiln_commands_emit(cmd, hit_id, &(hit){b, 2.5f}), KILN_OK);
    /* on an entity that exists (a plain add), and sized before its component is registered */
    ck_assert_int_eq(kiln_commands_add(cmd, real, squad_id, &(squad){{holder, b, a}, 1, b}), KILN_OK);
    kiln_component late = (kiln_component)kiln_component_count(F.world) + 1; /* the next id */
    ck_assert_int_eq(kiln_commands_add_sized(cmd, real, late, &(kiln_entity[2]){a, holder}, 16), KILN_OK);
    kiln_field lf[] = {{"pair", KILN_TYPE_ENTITY, 0, 2}};
    kiln_component got_id = 0;
    ck_assert_int_eq(kiln_component_register(F.world, &(kiln_component_desc){.name = "Pair", .size = 16,
                         .fields = lf, .field_count = 1}, &got_id), KILN_OK);
    ck_assert_uint_eq(got_id, late);
    ck_assert_int_eq(kiln_commands_apply(cmd, F.world, NULL), KILN_OK);
    kiln_entity ea = kiln_commands_resolve(cmd, a), eb = kiln_commands_resolve(cmd, b),
                eh = kiln_commands_resolve(cmd, holder);
    const squad *got = kiln_get(F.world, eh, squad_id);
    ck_assert_ptr_nonnull(got);
    ck_assert(got->members[0] == eb && got->members[1] == real && got->members[2] == KILN_NULL_ENTITY);
    ck_assert(got->leader == ea && got->size == 0x40000000);
    const squad *own = kiln_get(F.world, ea, squad_id);
    ck_assert(own->members[0] == ea && own->members[1] == eh && own->members[2] == ea && own->leader == eh);
    const squad *on_real = kiln_get(F.world, real, squad_id);
    ck_assert(on_real->members[0] == eh && on_real->members[1] == eb && on_real->members[2] == ea && on_real->leader == eb);
    const kiln_entity *pair = kiln_get(F.world, real, late);
    ck_assert(pair[0] == ea && pair[1] == eh);
    ck_assert_int_eq(kiln_event_count(F.world, hit_id), 1);
    const hit *h = kiln_event_get(F.world, hit_id, 0);
    ck_assert(h->by == eb && h->damage == 2.5f);
    kiln_commands_destroy(cmd);
}

/* A placeholder whose spawn comes later can only be guessed (a spawn hands its placeholder
 * out when recorded): the apply stops at that command, and since a buffer cannot reorder its
 * commands it stops there again every time, until the buffer is cleared. */
KILN_TEST(links, a_forward_reference_stops_the_apply_at_its_command_every_time) {
    kiln_local_transform l = sample_local(4);
    kiln_commands *cmd = kiln_commands_create(F.world);
    kiln_entity a, b;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &a), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, a, F.ids.local, &l), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, a, F.ids.parent, &(kiln_parent){a + 1}), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(cmd, &b), KILN_OK);
    ck_assert(b == a + 1);
    uint64_t hash = 0;
    for (int round = 0; round < 3; round++) {
        int64_t applied = -1;
        ck_assert_int_eq(kiln_commands_apply(cmd, F.world, &applied), KILN_ERR_INVALID_ARGUMENT);
        /* commands count from the first pending one */
        assert_message("kiln_commands_apply: command 1 (add Parent) on entity ",
                       "field 'entity' holds placeholder 1 whose spawn comes later in the buffer");
        ck_assert_int_eq(applied, round == 0 ? 2 : 0);
        ck_assert_int_eq(kiln_commands_count(cmd), 2);
        if (round == 0) hash = kiln_world_hash(F.world);
        ck_assert_uint_eq(kiln_world_hash(F.world), hash);
    }
    kiln_entity ea = kiln_commands_resolve(cmd, a);
    ck_assert(kiln_is_alive(F.world, ea) && !kiln_has(F.world, ea, F.ids.parent));
    ck_assert(kiln_commands_resolve(cmd, b) == KILN_NULL_ENTITY);
    kiln_commands_clear(cmd);
    ck_assert_int_eq(kiln_commands_count(cmd), 0);
    ck_assert_int_eq(kiln_entity_count(F.world), 1);
    kiln_commands_destroy(cmd);
}

KILN_TEST(links, placeholders_of_an_earlier_batch_or_another_buffer_are_refused_at_their_command) {
    kiln_local_transform l = sample_local(5);
    kiln_commands *cmd = kiln_commands_create(F.world), *other = kiln_commands_create(F.world);
    kiln_entity old, theirs, fresh;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &old), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(cmd, F.world, NULL), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(other, &theirs), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(cmd, &fresh), KILN_OK); /* a new batch */
    ck_assert_int_eq(kiln_commands_add(cmd, fresh, F.ids.local, &l), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, fresh, F.ids.parent, &(kiln_parent){old}), KILN_OK);
    int64_t applied = -1;
    ck_assert_int_eq(kiln_commands_apply(cmd, F.world, &applied), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(applied, 2);
    assert_message("kiln_commands_apply: command 1 (add Parent) on entity ",
                   "field 'entity' holds placeholder 0, which is not from this buffer's current batch");
    kiln_commands_clear(cmd);
    kiln_entity real;
    ck_assert_int_eq(kiln_spawn(F.world, &real), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, real, squad_id, &(squad){{theirs}, 1, KILN_NULL_ENTITY}), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(cmd, F.world, &applied), KILN_ERR_INVALID_ARGUMENT);
    assert_message("kiln_commands_apply: command 1 (add Squad) on entity ",
                   "field 'members[0]' holds placeholder 0, which is not from this buffer's current batch");
    ck_assert_int_eq(kiln_commands_count(cmd), 1);
    ck_assert(!kiln_has(F.world, real, squad_id));
    kiln_commands_destroy(other);
    kiln_commands_destroy(cmd);
}

KILN_TEST(links, running_out_of_memory_at_every_allocation_of_an_apply_resumes_to_the_same_tree) {
    node nodes[24];
    int n = make_tree(nodes, 24, 7);
    int failures = 0;
    for (int64_t k = 0;; k++) {
        kiln_commands *cmd = kiln_commands_create(F.world);
        kiln_entity ph[24];
        record_tree(cmd, nodes, n, ph);
        int64_t total = kiln_commands_count(cmd), applied = -1;
        test_allocator_fail_after(&F.alloc, k);
        kiln_result r = kiln_commands_apply(cmd, F.world, &applied);
        test_allocator_fail_never(&F.alloc);
        if (r != KILN_OK) {
            failures++;
            ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_int_eq(kiln_commands_count(cmd), total - applied);
            int64_t rest = -1;
            ck_assert_int_eq(kiln_commands_apply(cmd, F.world, &rest), KILN_OK);
            ck_assert_int_eq(applied + rest, total);
        }
        assert_tree_landed(cmd, nodes, n, ph);
        kiln_entity roots[24];
        for (int i = 0; i < n; i++) roots[i] = kiln_commands_resolve(cmd, ph[i]);
        for (int i = 0; i < n; i++)
            if (nodes[i].parent < 0) ck_assert_int_eq(kiln_transform_despawn_recursive(F.world, roots[i]), KILN_OK);
        ck_assert_int_eq(kiln_entity_count(F.world), 0);
        kiln_commands_destroy(cmd);
        if (r == KILN_OK) break;
    }
    ck_assert_int_ge(failures, 1);
}

KILN_TEST(links, a_buffer_applied_inside_a_deferred_section_links_when_the_section_ends) {
    node nodes[3] = {{-1, true, sample_local(1)}, {0, true, sample_local(2)}, {1, true, sample_local(3)}};
    kiln_commands *cmd = kiln_commands_create(F.world);
    kiln_entity ph[3];
    record_tree(cmd, nodes, 3, ph);
    kiln_defer_begin(F.world);
    kiln_result r = kiln_commands_apply(cmd, F.world, NULL);
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert_int_eq(r, KILN_OK);
    assert_tree_landed(cmd, nodes, 3, ph);
    kiln_commands_destroy(cmd);
}

/* A worker system spawns a parent and two children per frame through its own buffer. */
static void spawn_family(const kiln_system_ctx *ctx) {
    const scene *s = ctx->user;
    kiln_local_transform l = sample_local(6);
    kiln_entity top, kid;
    ck_assert_int_eq(kiln_commands_spawn(ctx->commands, &top), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(ctx->commands, top, s->ids.local, &l), KILN_OK);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(kiln_commands_spawn(ctx->commands, &kid), KILN_OK);
        ck_assert_int_eq(kiln_commands_add(ctx->commands, kid, s->ids.local, &l), KILN_OK);
        ck_assert_int_eq(kiln_commands_add(ctx->commands, kid, s->ids.parent, &(kiln_parent){top}), KILN_OK);
    }
}

KILN_TEST(links, system_buffers_on_workers_spawn_linked_families) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    const char *names[3] = {"fam_a", "fam_b", "fam_c"};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = names[i], .run = spawn_family, .user = &F,
                                                                   .writes = {F.ids.local, F.ids.parent}}), KILN_OK);
    for (int frame = 0; frame < 8; frame++) ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    ck_assert_int_eq(kiln_entity_count(F.world), 8 * 3 * 3);
    propagate_ok(&F, NULL);
    /* every child's parent is a live root with exactly two children */
    kiln_query *q = NULL;
    ck_assert_int_eq(kiln_query_create(F.world, &(kiln_query_desc){.with = {F.ids.parent}}, &q), KILN_OK);
    kiln_entity parents[64];
    int64_t kids = 0;
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
        const kiln_parent *p = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count && kids < 64; r++) parents[kids++] = p[r].entity;
    }
    kiln_query_destroy(q);
    ck_assert_int_eq(kids, 8 * 3 * 2);
    for (int64_t i = 0; i < kids; i++) {
        ck_assert(kiln_is_alive(F.world, parents[i]));
        ck_assert(!kiln_has(F.world, parents[i], F.ids.parent));
        ck_assert_int_eq(kiln_transform_children(F.world, parents[i], NULL, 0), 2);
    }
}

/* A system guesses the placeholder of a spawn it records later: its buffer (lenient, as every
 * system's) cannot rewrite that link at its turn, so the spawn it was recorded with is dropped
 * whole (before, the spawn landed without it), and the spawn whose link names the dropped one
 * in turn: no entity lands with half its components or a raw placeholder; the frame goes on. */
static void guess_forward(const kiln_system_ctx *ctx) {
    const scene *s = ctx->user;
    kiln_entity a, b;
    ck_assert_int_eq(kiln_commands_spawn(ctx->commands, &a), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(ctx->commands, a, s->ids.parent, &(kiln_parent){a + 1}), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(ctx->commands, &b), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(ctx->commands, b, s->ids.parent, &(kiln_parent){a}), KILN_OK);
}

KILN_TEST(links, a_system_buffer_drops_a_spawn_whose_link_it_cannot_resolve_whole) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "guess", .run = guess_forward, .user = &F,
                                                               .writes = {F.ids.parent}}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_schedule_destroy(s);
    ck_assert_int_eq(kiln_entity_count(F.world), 0);
    int64_t count = 0;
    const char *msg = NULL;
    ck_assert_int_eq(kiln_world_dropped(F.world, &count, &msg), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(count, 4); /* each spawn and its add */
    ck_assert_msg(strstr(msg, "command 4 (add Parent) on placeholder 1: its spawn did not land"), "%s", msg);
}
