/* test_commands_lua_memory.c: Lua command buffers (kiln.commands()) whose Lua state runs out
 * of memory at every allocation in turn, as a mod at its memory limit does. A record or a
 * clear that fails leaves the buffer as it was (its count, its batch's numbering, an applied
 * batch still resolving); an apply that fails leaves every landed record taken and every other
 * pending, so applying again lands each exactly once. */
#include "lua_host.h"

/* The world's components: Position and Target (an entity field). */
static const char *const components = "w:component('Position', 'float x, y;') w:component('Target', 'entity who;')";

/* The states a record may find its buffer in: c = the buffer, last = its last placeholder,
 * applied = an applied batch's placeholder (and e its entity) that must keep resolving. */
static const char *const states[] = {
    /* new */
    "c = kiln.commands() last = nil applied = nil",
    /* four records pending: the fifth grows the records table (16 -> 32 slots) */
    "c = kiln.commands() for i = 1, 3 do last = c:spawn{Position = {x = i}} end c:add(last, 'Target', {who = last})\n"
    "applied = nil",
    /* an applied batch: the next record starts a batch */
    "c = kiln.commands() applied = c:spawn{Position = {x = 7}} assert(c:apply(w) == 1) e = c:resolved(applied)\n"
    "last = nil",
};

/* Each kind of record, from the state above. */
static const char *const records[] = {
    "got = c:spawn{Position = {x = 5}}",
    "got = c:despawn(last or e or 1)",
    "got = c:add(last or e or 1, 'Position', {x = 6})",
    "got = c:set(last or e or 1, 'Position', {y = 6})",
    "got = c:remove(last or e or 1, 'Position')",
};

/* What the buffer looks like from Lua: the record count, the batch's next placeholder after
 * `last` and `applied` still resolving to e. */
static const char *const same_buffer =
    "assert(c:count() == count0, 'count ' .. c:count() .. ' after a failed record, was ' .. count0)\n"
    "if applied then assert(c:resolved(applied) == e, 'the applied batch stopped resolving') end\n"
    "if last then local p = c:spawn{} assert(p == last - 1, 'after a failed record the batch went on at ' .. p) end\n";

START_TEST(a_record_out_of_memory_anywhere_leaves_the_buffer_as_it_was) {
    int state = _i / 5, record = _i % 5;
    host h;
    start(&h, components);
    int64_t n = 0;
    for (;; n++) {
        run(h.L, states[state]);
        run(h.L, "count0 = c:count() collectgarbage() collectgarbage()");
        if (run_failing_after(&h, records[record], n)) break;
        run(h.L, same_buffer);
    }
    ck_assert_int_gt(n, 0);
    /* It landed once: one more record, and a spawn numbered next in its batch. */
    run(h.L, "assert(c:count() == count0 + 1)\n"
             "if last and got then assert(got == last - 1) end");
    if (record == 0) run(h.L, "local ok, msg = c:apply(w) assert(ok, msg) assert(w:get(c:resolved(got), 'Position').x == 5)");
    stop(&h);
}
END_TEST

START_TEST(a_spawn_after_failed_ones_takes_the_next_number_and_its_batch_applies_whole) {
    /* failing spawns at every allocation in turn on the same buffer, one in every 3 records */
    host h;
    start(&h, components);
    run(h.L, "c = kiln.commands() ps = {} for i = 1, 1000 do ps[i] = false end np = 1 ps[1] = c:spawn{Position = {x = 1}}");
    int64_t failed = 0;
    for (int64_t n = 0; n < 400; n++) { /* ps has its slots: nothing fails after the spawn returns */
        if (run_failing_after(&h, "local p = c:spawn{Position = {x = np + 1}} np = np + 1 ps[np] = p", n % 7)) continue;
        failed++;
        if (n % 3 == 0) run(h.L, "c:add(ps[np], 'Target', {who = ps[1]})");
    }
    ck_assert_int_gt(failed, 0);
    run(h.L, "for i = 1, np do assert(ps[i] == ps[1] - (i - 1), 'placeholder ' .. i .. ' is ' .. ps[i]) end\n"
             "local ok, msg = c:apply(w) assert(ok, msg)\n"
             "assert(#w:entities() == np, #w:entities() .. ' entities for ' .. np .. ' spawns')\n"
             "for i = 1, np do assert(w:get(c:resolved(ps[i]), 'Position').x == i) end");
    stop(&h);
}
END_TEST

START_TEST(a_clear_out_of_memory_anywhere_leaves_the_buffer_as_it_was) {
    host h;
    start(&h, components);
    int64_t n = 0;
    for (;; n++) {
        run(h.L, "c = kiln.commands() applied = c:spawn{Position = {}} c:apply(w) e = c:resolved(applied)\n"
                 "last = c:spawn{Position = {}} applied = nil count0 = c:count() collectgarbage()");
        if (run_failing_after(&h, "c:clear()", n)) break;
        run(h.L, same_buffer);
    }
    ck_assert_int_gt(n, 0);
    run(h.L, "assert(c:count() == 0) local ok = pcall(c.despawn, c, last) assert(not ok)");
    stop(&h);
}
END_TEST

/* A buffer of spawns, placeholders in values, sets and a despawn, applied with the Lua state
 * refusing after n grants, then again until it is done: each record lands exactly once. */
static const char *const buffer =
    "c = kiln.commands()\n"
    "local a = c:spawn{Position = {x = 1}}\n"
    "local b = c:spawn{Position = {x = 2}, Target = {who = a}}\n"
    "c:set(a, 'Position', {x = 10, y = 1})\n"
    "c:add(a, 'Target', {who = b})\n"
    "local d = c:spawn{Position = {x = 3}}\n"
    "c:despawn(d)\n"
    "for i = 4, 40 do c:spawn{Position = {x = i}} end\n"
    "ph = {a = a, b = b, d = d} collectgarbage()";

START_TEST(an_apply_out_of_memory_anywhere_lands_each_record_once) {
    host h;
    start(&h, components);
    int64_t n = 0, partial = 0;
    for (;; n++) {
        run(h.L, "for _, e in ipairs(w:entities()) do w:despawn(e) end");
        run(h.L, buffer);
        if (run_failing_after(&h, "local ok, msg = c:apply(w) assert(ok, msg)", n)) break;
        partial += kiln_entity_count(h.world) > 0;
        /* memory back: the rest lands, and the world is the buffer's, each record once */
        run(h.L, "local ok, msg = c:apply(w) assert(ok, msg)\n"
                 "local n, sum = 0, 0\n"
                 "for _, e in ipairs(w:entities()) do n = n + 1 sum = sum + w:get(e, 'Position').x end\n"
                 "assert(n == 39, n .. ' entities, not 39')\n"
                 "assert(sum == 10 + 2 + (4 + 40) * 37 / 2, 'sum ' .. sum)\n"
                 "local a, b = c:resolved(ph.a), c:resolved(ph.b)\n"
                 "assert(w:get(a, 'Target').who == b and w:get(b, 'Target').who == a)\n"
                 "assert(w:get(a, 'Position').y == 1 and not w:is_alive(c:resolved(ph.d)))");
    }
    ck_assert_int_gt(n, 10);
    ck_assert_int_gt(partial, 0); /* some failed part way, with records landed */
    stop(&h);
}
END_TEST

int main(void) {
    Suite *s = suite_create("commands_lua_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, a_record_out_of_memory_anywhere_leaves_the_buffer_as_it_was, 0, 15);
    tcase_add_test(tc, a_spawn_after_failed_ones_takes_the_next_number_and_its_batch_applies_whole);
    tcase_add_test(tc, a_clear_out_of_memory_anywhere_leaves_the_buffer_as_it_was);
    tcase_add_test(tc, an_apply_out_of_memory_anywhere_lands_each_record_once);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
