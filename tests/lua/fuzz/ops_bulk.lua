-- fuzz/ops_bulk.lua: q:bulk chunks (array checks, writes and their check hooks, raises inside
-- fn, extra arguments), against the model's rows; the loops' shared helpers are fuzz.ops_loops'.
local N = require "fuzz.num"
local X = require "fuzz.context"
local gen = require "fuzz.gen"
local M = require "fuzz.model"

local R = math.random
local chance, pick = gen.chance, gen.pick
local S, ops = X.S, X.ops
local fail, note, call = X.fail, X.note, X.call
local W = require "fuzz.worlds"
local valid_field_value, invalid_field_value, access_ok = W.valid_field_value, W.invalid_field_value, W.access_ok
local C = require "fuzz.check"
local after_error = C.after_error
local L = require "fuzz.ops_loops"
local matches, iterable_queries = L.matches, L.iterable_queries

-- The write-back of one bulk chunk, as bulk_body does it: every element is converted first
-- (the first bad one raises and nothing is written), then each field the arrays changed
-- against what they were filled with is written (a world:set inside fn stays otherwise).
local function bulk_write_back(m, entry, writable, chunk)
    local plans = {}
    for t, comp in ipairs(entry.terms) do
        local tt = chunk.args[t]
        if comp.kind == "data" and writable[t] and type(tt) == "table" then
            for ri = 1, chunk.n do
                local e = chunk.rows[ri]
                local filled = chunk.snap[t] and chunk.snap[t][ri]
                if not m.alive[e] or not filled then
                    fail("bulk write-back: %s is not alive in the model", tostring(e))
                    return true
                end
                local writes = {}
                for _, f in ipairs(comp.fields) do
                    local v = tt[f.name][ri]
                    local x
                    local old_text = f.type.kind == "char" and type(filled[f.name]) == "string" and filled[f.name]
                    if old_text and type(v) == "string" and v == (old_text:match("^[^%z]*")) then
                        -- unchanged text keeps its bytes, even those past its NUL (as in each)
                        x = filled[f.name]
                    elseif f.type.kind == "f32" and f.count == 1 and type(v) == "number" then
                        -- the fast path checks the float range as every other path does
                        if v == v and math.abs(v) ~= math.huge and math.abs(v) > 3.4028234663852886e38 then
                            return false
                        end
                        x = M.f32(v)
                    else
                        local fok
                        fok, x = M.convert_field(f, v, filled[f.name])
                        if not fok then return false end
                    end
                    local probe_old, probe_new = M.copy(filled), M.copy(filled)
                    probe_new[f.name] = x
                    if M.value_bytes(comp, probe_old) ~= M.value_bytes(comp, probe_new) then
                        writes[#writes + 1] = {f.name, x}
                    end
                end
                plans[#plans + 1] = {e = e, comp = comp, writes = writes}
            end
        end
    end
    for _, p in ipairs(plans) do -- the check hooks (Parent) see every changed row first
        if #p.writes > 0 and not m:write_ok(p.e, p.comp, p.writes) then return false end
    end
    for _, p in ipairs(plans) do
        if #p.writes > 0 then
            local nv = M.copy(m.alive[p.e].comps[p.comp.name])
            for _, w in ipairs(p.writes) do nv[w[1]] = w[2] end
            m:set_value(p.e, p.comp.name, nv, true)
        end
    end
    return true
end

-- q:bulk(fn, ...) with array checks and writes.
function ops.bulk(m)
    local list = iterable_queries(m)
    if #list == 0 then return ops.query(m) end
    local entry = pick(list)

    local lua_term, access = false, true
    local writable = {}
    for t, comp in ipairs(entry.terms) do
        if comp.kind == "lua" then lua_term = true end
        if comp.kind == "data" and comp.layout and comp.layout.size > 256 then lua_term = true end -- too large
        if not access_ok(m, comp, false) then access = false end
        writable[t] = m.cur_sys == nil or m.cur_sys.exclusive or m.cur_sys.writes_set[comp.name] == true
    end
    -- extra arguments to q:bulk: a few, now and then hundreds (more than the Lua stack
    -- guarantees a C function)
    local nextra = chance(0.02) and R(100, 400) or R(0, 3)
    local extra_args = {}
    for i = 1, nextra do extra_args[i] = i end
    local state = {seen = {}, raised = false, failed = false}
    local pending -- the previous chunk, written back by now
    local mode = R(100)
    local fn = function(n, ents, ...)
        if pending then
            bulk_write_back(m, entry, writable, pending)
            pending = nil
        end
        local args = N.pack(...)
        if N.mtype(n) ~= "integer" or type(ents) ~= "table" then
            fail("bulk: fn got n=%s ents=%s", tostring(n), type(ents))
            return
        end
        local chunk = {n = n, rows = {}, args = args, snap = {}}
        for i = 1, nextra do
            if args[#entry.terms + i] ~= i then fail("bulk: extra argument %d is %s", i, tostring(args[#entry.terms + i])) end
        end
        for r = 1, n do
            local e = ents[r]
            chunk.rows[r] = e
            if not matches(m, entry, e) then fail("bulk visits %s which does not match", tostring(e)) end
            if state.seen[e] then fail("bulk visits %s twice", tostring(e)) end
            state.seen[e] = true
            for t, comp in ipairs(entry.terms) do
                local tt = args[t]
                local has = m.alive[e] ~= nil and m.alive[e].comps[comp.name] ~= nil
                if has and comp.kind == "data" then
                    chunk.snap[t] = chunk.snap[t] or {}
                    chunk.snap[t][r] = M.copy(m.alive[e].comps[comp.name])
                end
                if comp.kind == "data" then
                    if has and type(tt) == "table" then
                        for _, f in ipairs(comp.fields) do
                            local arr = tt[f.name]
                            local want = M.visible_field(f, m.alive[e].comps[comp.name][f.name])
                            if type(arr) ~= "table" or not M.same(arr[r], want) then
                                fail("bulk: %s.%s[%d] of %s = %s, model %s", comp.name, f.name, r, e,
                                     M.describe(type(arr) == "table" and arr[r]), M.describe(want))
                            end
                        end
                    elseif has ~= (tt ~= false) then
                        fail("bulk: term %s for %s is %s, model has=%s", comp.name, e, tostring(tt), tostring(has))
                    end
                end
            end
        end
        for t, comp in ipairs(entry.terms) do
            local tt = args[t]
            if comp.kind == "data" and type(tt) == "table" and n > 0 and chance(0.5) then
                for _ = 1, R(1, 3) do
                    local f = pick(comp.fields)
                    tt[f.name][R(1, n)] = chance(0.85) and valid_field_value(f) or invalid_field_value(f)
                end
            end
        end
        if chance(0.2) and S.depth < 3 then X.run_nested(m, R(1, 2)) end
        if mode <= 10 and chance(0.4) then
            state.raised = true
            note("raise inside q:bulk")
            error("fuzz-raise in bulk", 0)
        end
        -- the arrays are reused for the next chunk: keep what this one holds now
        local saved = {}
        for t, comp in ipairs(entry.terms) do
            local tt = args[t]
            if comp.kind == "data" and type(tt) == "table" then
                saved[t] = {}
                for _, f in ipairs(comp.fields) do
                    local arr, copy = tt[f.name], {}
                    for r = 1, n do copy[r] = arr[r] end
                    saved[t][f.name] = copy
                end
            else
                saved[t] = tt
            end
        end
        chunk.args = saved
        pending = chunk
    end
    local passed = fn
    if chance(0.03) then passed = pick({"fn", 5, nil, {}}) end
    local began = access and not lua_term and type(passed) == "function"
    if began then
        entry.active = true
        m.iterating = m.iterating + 1
        m:enter_loop()
    end
    local depth = S.depth
    S.depth = S.depth + 1
    local r = call("q:bulk", S.QM.bulk, entry.q, passed, N.unpack(extra_args, 1, nextra))
    S.depth = depth
    if began then
        entry.active = false
        m.iterating = m.iterating - 1
        local wrote = true
        if pending then wrote = bulk_write_back(m, entry, writable, pending) end
        if r[1] and (not wrote or state.raised) then fail("bulk should have raised (bad element=%s)", tostring(not wrote)) end
        if not r[1] and wrote and not state.raised then fail("bulk raised unexpectedly: %s", tostring(r[2])) end
        m:leave_loop()
    elseif r[1] then
        fail("bulk should have raised (access %s, lua term %s, fn %s)", tostring(access), tostring(lua_term), type(passed))
    end
    if not r[1] then after_error(m, {}, "bulk") end
end

