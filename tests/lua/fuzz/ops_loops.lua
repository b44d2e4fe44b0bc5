-- fuzz/ops_loops.lua: queries and iteration: q:each loops (views checked and scribbled on,
-- break, raise, nesting), hand-stepped iterators, and loops in coroutines (q:bulk chunks are
-- fuzz/ops_bulk.lua).
local N = require "fuzz.num"
local X = require "fuzz.context"
local gen = require "fuzz.gen"
local M = require "fuzz.model"

local R = math.random
local chance, pick = gen.chance, gen.pick
local S, ops = X.S, X.ops
local UNSAFE, TRACE = X.UNSAFE, X.TRACE
local fail, known, note, call, expect, ccall = X.fail, X.known, X.note, X.call, X.expect, X.ccall
local W = require "fuzz.worlds"
local pick_entity, pick_comp, pick_fields, user_comp_names = W.pick_entity, W.pick_comp, W.pick_fields, W.user_comp_names
local valid_field_value, invalid_field_value, random_float = W.valid_field_value, W.invalid_field_value, W.random_float
local extras, other_world, access_ok, wcall = W.extras, W.other_world, W.access_ok, W.wcall
local C = require "fuzz.check"
local after_error, same_list = C.after_error, C.same_list

local L = {}

-- Queries ----------------------------------------------------------------------------------

local MAX_ITER_TERMS = 32

local function random_query_desc(m)
    local names = user_comp_names(m)
    local desc = {}
    local k = R(100)
    local nwith = k <= 90 and R(1, 3) or R(0, 18)
    for i = 1, nwith do desc[i] = R(100) <= 93 and pick(names) or pick_comp(m) end
    if chance(0.3) then
        desc.optional = {}
        for i = 1, R(1, k <= 95 and 2 or 18) do desc.optional[i] = R(100) <= 93 and pick(names) or pick_comp(m) end
    end
    if chance(0.3) then
        desc.without = {}
        for i = 1, R(1, 2) do desc.without[i] = R(100) <= 93 and pick(names) or pick_comp(m) end
    end
    if chance(0.03) then desc.optional = gen.garbage() end
    if chance(0.03) then desc = gen.garbage(extras()) end
    return desc
end

-- Predicts world:query(desc): the term lists, or nil when it must raise.
local function predict_query(m, desc)
    if type(desc) ~= "table" then return nil end
    local with, optional, without = {}, {}, {}
    local n = N.rawlen(desc)
    if n == 0 or n > 16 then return nil end
    -- only a list and the keys optional and without (klua_check_keys); in those, only a list
    local function list_only(t, extra)
        local len = N.rawlen(t)
        for k in next, t do
            if not (N.mtype(k) == "integer" and k >= 1 and k <= len) and not (extra and extra[k]) then return false end
        end
        return true
    end
    if not list_only(desc, {optional = true, without = true}) then return nil end
    for _, key in ipairs({"optional", "without"}) do
        local list = rawget(desc, key)
        if type(list) == "table" and not list_only(list) then return nil end
    end
    local used = {}
    for i = 1, n do
        local comp = m:resolve(rawget(desc, i))
        if not comp then return nil end
        with[i] = comp
    end
    for _, key in ipairs({"optional", "without"}) do
        local list = rawget(desc, key) -- read raw: no metamethod runs
        local out = key == "optional" and optional or without
        if list ~= nil then
            if type(list) ~= "table" then return nil end
            if N.rawlen(list) > 16 then return nil end
            for i = 1, N.rawlen(list) do
                local comp = m:resolve(rawget(list, i))
                if not comp then return nil end
                out[i] = comp
            end
        end
    end
    -- the core rejects a component listed twice anywhere in the desc
    for _, list in ipairs({with, optional, without}) do
        for _, comp in ipairs(list) do
            if used[comp.id] then return "either" end
            used[comp.id] = true
        end
    end
    return {with = with, optional = optional, without = without}
end

function ops.query(m)
    local desc = random_query_desc(m)
    local want = predict_query(m, desc)
    local r = wcall(m, "query", desc)
    if want ~= "either" then expect("world:query", want ~= nil, r, M.describe(desc)) end
    if r[1] and type(want) == "table" then
        local terms = {}
        for _, c in ipairs(want.with) do terms[#terms + 1] = c end
        for _, c in ipairs(want.optional) do terms[#terms + 1] = c end
        local entry = {q = r[2], with = want.with, optional = want.optional, without = want.without, terms = terms}
        -- most queries are kept for later loops; the rest become garbage at once, and are
        -- collected whenever (also while another query iterates)
        if chance(0.8) then m.queries[#m.queries + 1] = entry end
        local qc = call("q:count", S.QM.count, r[2])
        local expect_n = 0
        for _, e in ipairs(m.alive_list) do
            local rec = m.alive[e]
            local match = true
            for _, c in ipairs(want.with) do if rec.comps[c.name] == nil then match = false end end
            for _, c in ipairs(want.without) do if rec.comps[c.name] ~= nil then match = false end end
            if match then expect_n = expect_n + 1 end
        end
        if qc[1] and qc[2] ~= expect_n then fail("query %s count() = %s, model %d", M.describe(desc), tostring(qc[2]), expect_n) end
        local tr = call("q:terms", S.QM.terms, r[2])
        if tr[1] then
            for i, c in ipairs(terms) do
                if tr[2][i] ~= c.name then fail("q:terms()[%d] = %s, expected %s", i, tostring(tr[2][i]), c.name) end
            end
        end
    elseif r[1] then
        m.queries[#m.queries + 1] = {q = r[2], unknown = true}
    end
    if not r[1] then after_error(m, {}, "query") end
end

local function matches(m, entry, e)
    local rec = m.alive[e]
    if not rec then return false end
    for _, c in ipairs(entry.with) do if rec.comps[c.name] == nil then return false end end
    for _, c in ipairs(entry.without) do if rec.comps[c.name] ~= nil then return false end end
    return true
end

local function iterable_queries(m)
    local list = {}
    for _, entry in ipairs(m.queries) do
        if not entry.unknown and #entry.terms <= MAX_ITER_TERMS and not entry.active then list[#list + 1] = entry end
    end
    return list
end

function ops.qcount(m)
    if #m.queries == 0 then return ops.query(m) end
    local entry = pick(m.queries)
    local r = call("q:count", S.QM.count, entry.q)
    expect("q:count", true, r)
    if r[1] and not entry.unknown then
        local n = 0
        for _, e in ipairs(m.alive_list) do if matches(m, entry, e) then n = n + 1 end end
        if r[2] ~= n then fail("q:count() = %s, model %d", tostring(r[2]), n) end
    end
end

-- q:entities([limit]): the model's matches (any order), at most limit of them; a bad limit
-- or an undeclared term inside a system raises.
function ops.qentities(m)
    local list = iterable_queries(m)
    if #list == 0 then return ops.query(m) end
    local entry = pick(list)
    local limit
    if chance(0.5) then limit = R(0, 6) elseif chance(0.2) then limit = pick({-1, 1.5, "2", {}, true}) end
    local access = true
    for _, comp in ipairs(entry.terms) do if not access_ok(m, comp, false) then access = false end end
    local bad_limit = limit ~= nil and (type(limit) ~= "number" or limit < 0 or limit % 1 ~= 0)
    local r = call("q:entities", S.QM.entities, entry.q, limit)
    expect("q:entities", access and not bad_limit, r)
    if not r[1] then return end
    local n = 0
    for _, e in ipairs(m.alive_list) do if matches(m, entry, e) then n = n + 1 end end
    local want = limit and math.min(limit, n) or n
    if #r[2] ~= want then fail("q:entities(%s) listed %d, model %d", tostring(limit), #r[2], want) end
    local seen = {}
    for _, e in ipairs(r[2]) do
        if seen[e] or not matches(m, entry, e) then fail("q:entities listed %s, not a match or twice", tostring(e)) end
        seen[e] = true
    end
end

-- Under LuaJIT with FFI views, a query whose terms FFI cannot map: q:each_ffi and q:bulk_ffi
-- refuse it (docs/lua-api.md, FFI views), unless a budget makes them the table forms.
local C_WORDS = {}
for w in ([[auto break case char const continue default do double else enum extern float for
  goto if inline int long register restrict return short signed sizeof static struct switch
  typedef union unsigned void volatile while bool _Bool _Complex _Imaginary]]):gmatch("%S+") do
    C_WORDS[w] = true
end
local function ffi_unmappable(entry)
    if not N.luajit then return false end
    for t, comp in ipairs(entry.terms) do
        if comp.kind == "lua" or (comp.kind == "tag" and t > #entry.with) then return true end
        if comp.kind == "data" then
            if #comp.fields == 0 then return true end
            for _, f in ipairs(comp.fields) do
                if C_WORDS[f.name] or f.name:find("^__kiln_") then return true end
            end
        end
    end
    return false
end

-- q:each_ffi and q:bulk_ffi (lua/kiln/ffi.lua): the rows they visit are the query's, and under
-- LuaJIT, where a view is an FFI pointer, every visited row of a data term is stamped changed
-- at the world's tick. Views are only read here. Also misuse: a bad fn, bad self.
function ops.ffi_loops(m)
    local list = iterable_queries(m)
    if #list == 0 then return end
    local entry = pick(list)
    local access = true
    for _, comp in ipairs(entry.terms) do if not access_ok(m, comp, false) then access = false end end
    local want = 0
    for _, e in ipairs(m.alive_list) do if matches(m, entry, e) then want = want + 1 end end
    local rows, bad, stamped = 0, nil, {}
    local function visit(e, t, view)
        -- a term the running system only reads, and Parent (its check hook validates writes),
        -- get const views, which stamp nothing
        local comp = entry.terms[t]
        if type(view) == "cdata" and access_ok(m, comp, true) and comp.name ~= "Parent" then
            stamped[#stamped + 1] = {e, comp.name}
        end
    end
    entry.active = true
    m.iterating = m.iterating + 1
    m:enter_loop()
    local r
    if chance(0.5) then
        r = call("q:each_ffi", function(q)
            for e, v1, v2, v3, v4, v5, v6 in S.QM.each_ffi(q) do
                rows = rows + 1
                if not matches(m, entry, e) then bad = e end
                local vs = {v1, v2, v3, v4, v5, v6}
                for t = 1, math.min(#entry.terms, 6) do visit(e, t, vs[t]) end
            end
        end, entry.q)
    else
        r = call("q:bulk_ffi", S.QM.bulk_ffi, entry.q, function(n, entities, ...)
            for i = 0, n - 1 do
                local e = tonumber(entities[i])
                rows = rows + 1
                if not matches(m, entry, e) then bad = e end
                for t = 1, math.min(#entry.terms, 6) do
                    local col = select(t, ...)
                    if type(col) == "cdata" then visit(e, t, col) end
                end
            end
        end)
    end
    entry.active = false
    m.iterating = m.iterating - 1
    m:leave_loop()
    if not r[1] then
        local refused = ffi_unmappable(entry) and tostring(r[2]):find("cannot be mapped to an FFI type", 1, true)
        if access and not refused then fail("FFI loop raised: %s", tostring(r[2])) end
        return after_error(m, {}, "ffi loop")
    end
    if rows ~= want then fail("FFI loop visited %d rows, model %d", rows, want) end
    if bad then fail("FFI loop visited %s, which the query does not match", tostring(bad)) end
    for _, st in ipairs(stamped) do
        local rec = m.alive[st[1]]
        if rec and rec.comps[st[2]] ~= nil then rec.ticks[st[2]] = m.tick end
    end
    if chance(0.3) then
        local g = gen.garbage(extras())
        if type(g) ~= "function" then expect("q:bulk_ffi", false, call("q:bulk_ffi", S.QM.bulk_ffi, entry.q, g)) end
    end
end

-- Row views: check what they show, then scribble on them.
local function check_view(m, comp, present, view, e, where)
    if not present then
        if view ~= nil then fail("%s: optional %s absent from %s but its view is %s", where, comp.name, e, tostring(view)) end
        return
    end
    local want = m.alive[e].comps[comp.name]
    if comp.kind == "tag" then
        if view ~= true then fail("%s: tag view of %s for %s is %s", where, comp.name, e, tostring(view)) end
        return
    end
    if comp.kind == "lua" then
        local expected = want
        if want == M.NIL then expected = nil end
        if not rawequal(view, expected) and not (view ~= view and expected ~= expected) then
            fail("%s: Lua-valued view of %s on %s is %s, model %s", where, comp.name, e, M.describe(view), M.describe(expected))
        end
        return
    end
    if type(view) ~= "table" then return fail("%s: view of %s on %s is a %s", where, comp.name, e, type(view)) end
    for _, f in ipairs(comp.fields) do
        local ok, v = pcall(function() return view[f.name] end)
        if not ok then
            fail("%s: reading %s.%s of %s raised %s", where, comp.name, f.name, e, tostring(v))
        elseif not M.same(v, M.visible_field(f, want[f.name])) then
            fail("%s: view %s.%s of %s = %s, model %s", where, comp.name, f.name, e, M.describe(v), M.describe(want[f.name]))
        end
    end
end

-- Writes random values into a writable view; returns nothing. Errors are expected only for
-- unknown field names and read-only views.
local function scribble_view(m, comp, view, writable)
    if comp.kind ~= "data" or type(view) ~= "table" then return end
    for _ = 1, R(0, 2) do
        local f = pick(comp.fields)
        local k = R(100)
        local key, value = f.name, nil
        if k <= 75 then
            value = valid_field_value(f)
            if f.type.kind == "vec" and f.count == 1 and chance(0.3) then
                -- in place, through the table the view handed out
                local cur = rawget(view, f.name)
                if type(cur) == "table" then
                    cur[pick(f.type.keys)] = random_float()
                    value = cur
                end
            end
        elseif k <= 88 then
            value = invalid_field_value(f)
        elseif k <= 94 then
            key = pick({"nope", "X", 1})
            value = 1
        else
            value = nil
        end
        local unknown = M.field_named(comp, key) == nil
        local r = call("view write", function(_, k, v) view[k] = v end, comp.name, key, value)
        local ok = writable and not unknown
        expect("view write", ok, r, comp.name .. "." .. tostring(key))
        -- a field assigned nil is gone from the view: writing it again raises "has no field"
        if not ok or value == nil then return end
    end
end

-- Predicts the write-back of one row's writable views (query.c write_back): every field of
-- every term is converted over the value the view was filled with (snap) before any is
-- written; fields that differ from it are stored over the row's current value; a bad value
-- (or a check hook's refusal) raises with nothing of the row written.
local function predict_write_back(m, e, terms, views, present, writable, snaps)
    local out = {e = e, terms = {}, fails = false}
    for t, comp in ipairs(terms) do
        if comp.kind == "data" and writable[t] and present[t] and type(views[t]) == "table" then
            local snap = snaps[t]
            local changed = {}
            for _, f in ipairs(comp.fields) do
                local v = rawget(views[t], f.name)
                local fok, x
                if f.type.kind == "char" and type(v) == "string" and v == M.visible_field(f, snap[f.name]) then
                    fok, x = true, snap[f.name] -- unchanged text keeps its bytes, even past a NUL
                else
                    fok, x = M.convert_field(f, v, snap[f.name])
                end
                if not fok then
                    out.fails, out.terms = true, {}
                    out.bad = comp.name .. "." .. f.name .. "=" .. M.describe(v) .. " snap " .. M.describe(snap[f.name])
                    return out
                end
                if M.field_bytes(f, x) ~= M.field_bytes(f, snap[f.name]) then changed[f.name] = x end
            end
            if next(changed) and not m:write_ok(e, comp, changed) then -- its check hook (Parent)
                out.fails, out.terms, out.bad = true, {}, comp.name .. " refused by its check"
                return out
            end
            if next(changed) then out.terms[#out.terms + 1] = {comp = comp, changed = changed} end
        end
    end
    return out
end

local function commit_write_back(m, wb)
    if TRACE and wb then
        local parts = {}
        for _, t in ipairs(wb.terms) do
            local keys = {}
            for k in pairs(t.changed) do keys[#keys + 1] = k end
            table.sort(keys)
            parts[#parts + 1] = t.comp.name .. "{" .. table.concat(keys, ",") .. "}"
        end
        io.stderr:write(string.format("  write-back %s %s: %s%s\n", m.label, tostring(wb.e), table.concat(parts, " "),
                                      wb.fails and " (fails)" or ""))
    end
    if not wb or not m.alive[wb.e] then return end
    for _, t in ipairs(wb.terms) do
        local cur = m.alive[wb.e].comps[t.comp.name]
        if cur ~= nil then
            local value = M.copy(cur)
            for k, v in pairs(t.changed) do value[k] = v end
            m:set_value(wb.e, t.comp.name, value, true)
        end
    end
end


local function loop_body(m, entry, e, views, writable, where, state)
    local present, snaps = {}, {}
    for t, comp in ipairs(entry.terms) do
        present[t] = m.alive[e] ~= nil and m.alive[e].comps[comp.name] ~= nil
        snaps[t] = present[t] and comp.kind == "data" and M.copy(m.alive[e].comps[comp.name]) or nil
        check_view(m, comp, present[t], views[t], e, where)
    end
    if state.loop then state.loop.cur = {e = e, views = views, present = present, snaps = snaps} end
    if not matches(m, entry, e) then fail("%s: visits %s which does not match (model)", where, tostring(e)) end
    if state.seen[e] then fail("%s: visits %s twice", where, tostring(e)) end
    state.seen[e] = true
    for t, comp in ipairs(entry.terms) do
        if chance(0.5) then scribble_view(m, comp, views[t], writable[t]) end
    end
    if chance(0.3) and S.depth < 3 then
        note(m.cur_sys and "calls inside an each system" or "calls inside q:each")
        X.run_nested(m, R(1, 3))
    end
    return present, snaps
end

-- LuaJIT's generic for has no to-be-closed fourth value (a loop left early is closed later,
-- when its query or world is used next): there the guard is closed where Lua 5.4's loop closes
-- it, on break and on error, so the model's timing holds under both.
local TBC = _VERSION ~= "Lua 5.1"
local function close_guard(guard, err)
    if not TBC and guard ~= nil then debug.getmetatable(guard).__close(guard, err) end
end

-- coroutine.close(co) where Lua has it; under LuaJIT the same for the loops suspended in co
-- (S.loops above base, innermost first): their guards closed as coroutine.close closes them,
-- an error passed on to the ones outside. co stays suspended and is never resumed.
local function close_coroutine(co, base)
    if coroutine.close then return coroutine.close(co) end
    local ok, err = true, nil
    for i = #S.loops, base + 1, -1 do
        local cok, cerr = pcall(close_guard, S.loops[i].guard, err)
        if not cok then ok, err = false, cerr end
    end
    return ok, err
end

-- Under LuaJIT q:each hands out FFI views where every field reads alike (lua/kiln/ffi.lua):
-- each row a loop reaches is stamped changed for every term the running code may write.
-- These loops only read their views.
local function stamp_ffi_row(m, entry, e, views)
    local rec = m.alive[e]
    for t, comp in ipairs(entry.terms) do
        if type(views[t]) == "cdata" and rec and rec.comps[comp.name] ~= nil and access_ok(m, comp, true)
            and comp.name ~= "Parent" then
            rec.ticks[comp.name] = m.tick
        end
    end
end

-- for e, ... in q:each() with checks, scribbles, nested calls, break and raise.
function ops.each(m)
    local list = iterable_queries(m)
    if #list == 0 then return ops.query(m) end
    local entry = pick(list)
    local q = entry.q
    local writable, access = {}, true
    for t, comp in ipairs(entry.terms) do
        writable[t] = m.cur_sys == nil or m.cur_sys.exclusive or m.cur_sys.writes_set[comp.name] == true
        if not access_ok(m, comp, false) then access = false end
    end
    local expected = {}
    for _, e in ipairs(m.alive_list) do if matches(m, entry, e) then expected[e] = true end end
    local state = {seen = {}, raised = false, broke = false}
    local pending -- the write-back of the row the loop is on
    local mode = R(100)
    local began = false
    local depth = S.depth
    S.depth = S.depth + 1
    -- what a coroutine.close of a suspended coroutine needs to finish this loop's bookkeeping
    local loop = {m = m, entry = entry, writable = writable}
    state.loop = loop
    local body = function()
        local f, s, c, guard = S.QM.each(q)
        loop.guard = guard
        began = true
        if guard == nil and N.luajit then -- FFI views: visited to the end, each row stamped
            entry.active = true
            m.iterating = m.iterating + 1
            m:enter_loop()
            S.loops[#S.loops + 1] = loop
            for e, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12 in f, s, c do
                state.seen[e] = true
                stamp_ffi_row(m, entry, e, {v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12})
            end
            return
        end
        entry.active = true
        m.iterating = m.iterating + 1
        m:enter_loop()
        S.loops[#S.loops + 1] = loop
        -- the generic for closes the guard on break and error
        for e, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12 in f, s, c, guard do
            commit_write_back(m, pending)
            pending = nil
            S.calls = S.calls + 1
            local views = {v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12}
            local present, snaps = loop_body(m, entry, e, views, writable, "each", state)
            local wb = predict_write_back(m, e, entry.terms, views, present, writable, snaps)
            if mode <= 8 and chance(0.3) then
                pending = wb -- break writes the row back
                state.broke = true
                note("break out of q:each")
                break
            end
            if mode > 8 and mode <= 14 and chance(0.3) then
                state.raised = true -- an error does not
                note("raise inside q:each")
                error("fuzz-raise in each", 0)
            end
            pending = wb
            X.maybe_yield()
        end
        close_guard(guard) -- break (LuaJIT)
    end
    S.calls = S.calls + 1
    S.by_method["q:each"] = (S.by_method["q:each"] or 0) + 1
    local ok, err = pcall(body)
    if not ok and began then pcall(close_guard, loop.guard, err) end -- an error (LuaJIT)
    if not ok then S.errors = S.errors + 1 end
    S.depth = depth
    if began then
        assert(S.loops[#S.loops] == loop, "loop stack out of order")
        S.loops[#S.loops] = nil
        entry.active = false
        m.iterating = m.iterating - 1
        local bad = pending and pending.fails
        if ok then
            commit_write_back(m, pending)
            if bad then fail("each: a bad view value should have raised") end
        elseif state.raised then
            -- the row the body raised on is not written back
        elseif bad then
            note("bad view value ends q:each")
            commit_write_back(m, pending) -- writes nothing: the row is left whole
        else
            fail("each loop raised unexpectedly: %s", tostring(err))
        end
        m:leave_loop()
        if ok and not state.broke then
            for e in pairs(expected) do
                if not state.seen[e] then fail("each missed %s", e) end
            end
        end
    else
        -- raised before the loop began: access, or the query is already iterating
        if access and not entry.active then fail("q:each raised at start: %s", tostring(err)) end
    end
    if not ok then after_error(m, {}, "each") end
end

-- Manual stepping of an each iterator, with garbage thrown at the step function.
function ops.manual_each(m)
    local list = iterable_queries(m)
    if #list == 0 then return end
    local entry = pick(list)
    local access = true
    for _, comp in ipairs(entry.terms) do if not access_ok(m, comp, false) then access = false end end
    local r = call("q:each", S.QM.each, entry.q)
    if not r[1] then
        if access then fail("q:each raised: %s", tostring(r[2])) end
        return after_error(m, {}, "manual each")
    end
    local f, s, guard = r[2], r[3], r[5]
    entry.active = true
    m.iterating = m.iterating + 1
    m:enter_loop()
    if guard == nil and N.luajit then -- FFI views (no guard): stepped to the end, each row stamped
        while true do
            local sr = N.pack(pcall(f, s))
            if not sr[1] then
                fail("each step raised: %s", tostring(sr[2]))
                break
            end
            if sr[2] == nil then break end
            stamp_ffi_row(m, entry, sr[2], {N.unpack(sr, 3, sr.n)})
        end
        entry.active = false
        m.iterating = m.iterating - 1
        m:leave_loop()
        return
    end
    for _ = 1, R(0, 3) do
        local arg = pick({gen.garbage(extras()), S.closed_query, m.check_queries.Pos})
        if arg ~= s then call("each step", f, arg) end
    end
    -- step without touching views: no write-back differs from the row
    for _ = 1, R(0, 4) do
        local sr = call("each step", f, s)
        if not sr[1] then fail("each step raised: %s", tostring(sr[2])) end
        if sr[2] == nil then break end
    end
    local cr = call("guard __close", debug.getmetatable(guard).__close, guard)
    expect("guard __close", true, cr)
    call("guard __close", debug.getmetatable(guard).__close, guard) -- twice is harmless
    call("guard __close", debug.getmetatable(guard).__close, gen.garbage())
    entry.active = false
    m.iterating = m.iterating - 1
    m:leave_loop()
end


-- Inside ops.coroutine: yields now and then, where Lua allows it (not across a C call such
-- as a bulk fn or a system). The coroutine may be closed while suspended here.
local function maybe_yield()
    if not S.in_co or not coroutine.isyieldable() or not chance(0.25) then return end
    coroutine.yield()
end

-- Runs a few operations in a coroutine that yields inside loops, then resumes it to the end
-- or closes it while suspended (closing the loops, which write their current rows back).
function ops.coroutine(m)
    if S.in_co then return ops.spawn(m) end
    S.in_co, S.co_base = true, #S.loops
    local depth = S.depth
    local co = coroutine.create(function() X.run_nested(m, R(2, 8)) end)
    local closed = false
    while coroutine.status(co) == "suspended" do
        if closed then break end
        if chance(0.25) and #S.loops > S.co_base then
            closed = true
            -- predict before closing: closing ends the loops, which empties their views
            local wbs = {}
            for i = S.co_base + 1, #S.loops do
                local l = S.loops[i]
                wbs[i] = l.cur and predict_write_back(l.m, l.cur.e, l.entry.terms, l.cur.views, l.cur.present, l.writable, l.cur.snaps)
            end
            note("coroutine closed inside a loop")
            local ok, err = close_coroutine(co, S.co_base)
            -- innermost first: a failing write-back raises, and the loops outside it then see
            -- an error and do not write back
            local raised = false
            for i = #S.loops, S.co_base + 1, -1 do
                local l = S.loops[i]
                S.loops[i] = nil
                local wb = wbs[i]
                if TRACE then
                    io.stderr:write(string.format("  close loop %d (%s): row %s fails=%s %s\n", i, l.m.label,
                                                  tostring(l.cur and l.cur.e), tostring(wb and wb.fails), tostring(wb and wb.bad)))
                end
                if not raised and wb then
                    commit_write_back(l.m, wb)
                    if wb.fails then raised = true end
                end
                l.entry.active = false
                l.m.iterating = l.m.iterating - 1
                l.m:leave_loop()
            end
            if ok == raised then
                fail("coroutine.close returned %s (%s), the model expected %s", tostring(ok), tostring(err),
                     raised and "an error" or "success")
            end
        else
            local ok, err = coroutine.resume(co)
            if not ok then fail("harness error in a coroutine: %s", tostring(err)) end
        end
    end
    S.depth = depth
    S.in_co = false
end


X.maybe_yield = maybe_yield
L.random_query_desc, L.predict_query, L.matches, L.loop_body = random_query_desc, predict_query, matches, loop_body
L.predict_write_back, L.commit_write_back = predict_write_back, commit_write_back
L.MAX_ITER_TERMS = MAX_ITER_TERMS
L.iterable_queries = iterable_queries
return L
