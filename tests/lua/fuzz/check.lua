-- fuzz/check.lua: the invariant checker: counts, entities(), a query per component, has/get
-- agreement and the model, after every error (quickly) and regularly (fully).
local N = require "fuzz.num"
local X = require "fuzz.context"
local gen = require "fuzz.gen"
local M = require "fuzz.model"

local R = math.random
local chance, pick = gen.chance, gen.pick
local S, ops = X.S, X.ops
local UNSAFE, TRACE = X.UNSAFE, X.TRACE
local fail, known, note, call, expect, ccall = X.fail, X.known, X.note, X.call, X.expect, X.ccall

local C = {}

---------------------------------------------------------------------------------------------
-- The checker.
---------------------------------------------------------------------------------------------

-- The checker samples with its own generator, so checking more or less often never changes
-- the sequence of calls a seed makes.
local crng
local function CR(n)
    crng = N.lcg(crng)
    return crng % n + 1
end

-- Verifies one entity against the model (alive, has, get, change ticks).
local function check_entity(m, e, why)
    local W = m.world
    if N.mtype(e) ~= "integer" then return end
    local rec = m.alive[e]
    local alive = ccall("is_alive", W.is_alive, W, e)
    if alive ~= (rec ~= nil) then
        fail("%s: %s: is_alive(%s) is %s, model says %s", why, m.label, e, tostring(alive), tostring(rec ~= nil))
        return
    end
    for _, name in ipairs(m.comp_names) do
        local comp = m.comps[name]
        if not comp.internal then
            local has = ccall("has", W.has, W, e, name)
            local want = rec and rec.comps[name]
            if has ~= (want ~= nil) then
                fail("%s: %s: has(%s, %s) is %s, model says %s", why, m.label, e, name, tostring(has), tostring(want ~= nil))
            elseif rec and not rec.volatile then
                -- get and changed_tick raise for dead entities; for live ones they must agree with has
                local v = ccall("get", W.get, W, e, name)
                local expected = M.visible(comp, want)
                if want == M.NIL then expected = nil end
                if want == nil then
                    if v ~= nil then fail("%s: get(%s, %s) returned a value for an absent component", why, e, name) end
                elseif not M.same(v, expected) then
                    fail("%s: %s: get(%s, %s) differs from the model at %s", why, m.label, e, name, M.diff(v, expected))
                end
                local tick = ccall("changed_tick", W.changed_tick, W, e, name)
                local want_tick = (want == nil or comp.kind == "tag") and 0 or rec.ticks[name]
                if tick ~= want_tick then
                    fail("%s: %s: changed_tick(%s, %s) = %s, model has %s", why, m.label, e, name, tostring(tick), tostring(want_tick))
                end
            end
        end
    end
end

-- After every error: the counts agree (count, entities, a query per component), every
-- listed entity is alive, and the entities the call named plus a sample match the model.
local function sample_check(m, involved, why, restricted)
    S.quick_checks = S.quick_checks + 1
    local W = m.world
    local n = ccall("count", W.count, W)
    if n ~= m:count() then fail("%s: %s: count() = %s, model has %d", why, m.label, tostring(n), m:count()) end
    local ents = ccall("entities", W.entities, W) or {}
    if #ents ~= n then fail("%s: %s: #entities() = %d but count() = %s", why, m.label, #ents, tostring(n)) end
    for _, e in ipairs(ents) do
        if not m.alive[e] then fail("%s: %s: entities() lists %s, which the model thinks is dead", why, m.label, e) end
        if not ccall("is_alive", W.is_alive, W, e) then fail("%s: entities() lists %s but it is not alive", why, e) end
    end
    for _, name in ipairs(m.comp_names) do
        local q = m.check_queries[name]
        if q then
            local want = 0
            for _, e in ipairs(m.alive_list) do
                if m.alive[e].comps[name] ~= nil then want = want + 1 end
            end
            local qc = ccall("q:count", q.count, q)
            if qc ~= want then fail("%s: %s: query{%s}:count() = %s, model %d", why, m.label, name, tostring(qc), want) end
        end
    end
    local t = ccall("tick", W.tick, W)
    if t ~= m.tick then fail("%s: %s: tick() = %s, model has %d", why, m.label, tostring(t), m.tick) end
    if restricted then return end -- has and get are access-checked inside a system
    for _, e in ipairs(involved or {}) do check_entity(m, e, why) end
    if #m.alive_list > 0 then check_entity(m, m.alive_list[CR(#m.alive_list)], why) end
    if #m.alive_list > 0 then check_entity(m, m.alive_list[CR(#m.alive_list)], why) end
    if #m.dead > 0 then check_entity(m, m.dead[CR(#m.dead)], why) end
end

local function same_list(a, b)
    if #a ~= #b then return false end
    for i = 1, #a do
        if not M.same(a[i], b[i]) then return false end
    end
    return true
end

-- Every invariant: counts, entities(), per-component queries, has/get, ticks, hierarchy,
-- events, resources and the system list.
local function full_check(m, why)
    S.full_checks = S.full_checks + 1
    local W = m.world
    local n = ccall("count", W.count, W)
    if n ~= m:count() then fail("%s: %s: count() = %s, model has %d", why, m.label, tostring(n), m:count()) end
    local ents = ccall("entities", W.entities, W) or {}
    if #ents ~= n then fail("%s: %s: #entities() = %d but count() = %s", why, m.label, #ents, tostring(n)) end
    local seen = {}
    for _, e in ipairs(ents) do
        if seen[e] then fail("%s: entities() lists %s twice", why, e) end
        seen[e] = true
        if not ccall("is_alive", W.is_alive, W, e) then fail("%s: entities() lists %s but it is not alive", why, e) end
        if not m.alive[e] then fail("%s: %s: entities() lists %s, which the model thinks is dead", why, m.label, e) end
    end
    for _, e in ipairs(m.alive_list) do
        if not seen[e] then fail("%s: %s: model entity %s is missing from entities()", why, m.label, e) end
    end
    -- a query per component finds exactly the entities that have it; together with the
    -- entities that have nothing, they cover entities()
    local covered = {}
    for _, name in ipairs(m.comp_names) do
        local q = m.check_queries[name]
        if q then
            local found, k = {}, 0
            local ok, err = pcall(function()
                for e, view in q:each() do
                    if found[e] then fail("%s: query{%s} visits %s twice", why, name, e) end
                    found[e] = true
                    k = k + 1
                    -- an FFI view (LuaJIT) stamps each row its loop reaches, where it may write
                    local rec = m.alive[e]
                    if type(view) == "cdata" and rec and rec.comps[name] ~= nil and name ~= "Parent"
                        and (m.cur_sys == nil or m.cur_sys.exclusive or m.cur_sys.writes_set[name]) then
                        rec.ticks[name] = m.tick
                    end
                end
            end)
            if not ok then fail("%s: iterating query{%s} raised: %s", why, name, tostring(err)) end
            local qc = ccall("q:count", q.count, q)
            if qc ~= k then fail("%s: query{%s}:count() = %s but iteration found %d", why, name, tostring(qc), k) end
            for e in pairs(found) do
                covered[e] = true
                if not (m.alive[e] and m.alive[e].comps[name] ~= nil) then
                    fail("%s: %s: query{%s} finds %s, the model says it lacks it", why, m.label, name, e)
                end
            end
            for _, e in ipairs(m.alive_list) do
                if m.alive[e].comps[name] ~= nil and not found[e] then
                    fail("%s: %s: query{%s} misses %s", why, m.label, name, e)
                end
            end
        end
    end
    for _, e in ipairs(ents) do
        if not covered[e] and next(m.alive[e] and m.alive[e].comps or {}) ~= nil then
            fail("%s: %s has components but no query found it", why, e)
        end
    end
    for _, e in ipairs(m.alive_list) do check_entity(m, e, why) end
    local t = ccall("tick", W.tick, W)
    if t ~= m.tick then fail("%s: %s: tick() = %s, model has %d", why, m.label, tostring(t), m.tick) end
    -- hierarchy
    for i = 1, math.min(6, #m.alive_list) do
        local e = m.alive_list[CR(#m.alive_list)]
        local kids = ccall("children", W.children, W, e) or {}
        local want = m:children(e)
        if not same_list(kids, want) then
            fail("%s: %s: children(%s) = %s, model has %s", why, m.label, e, M.describe(kids), M.describe(want))
        end
    end
    -- events
    for _, name in ipairs(m.event_names) do
        local ev = m.events[name]
        local got = {}
        local it = ccall("events", W.events, W, name)
        if it then
            local ok, err = pcall(function() for v in it do got[#got + 1] = v end end)
            if not ok then fail("%s: iterating events(%s) raised: %s", why, name, tostring(err)) end
        end
        local want = {}
        for _, v in ipairs(ev.prev) do want[#want + 1] = M.visible(ev, v) end
        for _, v in ipairs(ev.cur) do want[#want + 1] = M.visible(ev, v) end
        if not same_list(got, want) then
            fail("%s: %s: events(%s) = %d events %s, model has %d %s", why, m.label, name, #got,
                 M.describe(got[1]), #want, M.describe(want[1]))
        end
    end
    -- resources
    for name, v in pairs(m.comp_resources) do
        local got = ccall("resource", W.resource, W, name)
        if not M.same(got, M.visible(m.comps[name], v)) then fail("%s: resource(%s) = %s, model has %s", why, name, M.describe(got), M.describe(v)) end
    end
    for name, v in pairs(m.lua_resources) do
        local got = ccall("resource", W.resource, W, name)
        if m.comps[name] == nil and not rawequal(got, v) and not (got ~= got and v ~= v) then
            fail("%s: resource(%s) = %s, model has %s", why, name, M.describe(got), M.describe(v))
        end
    end
    -- systems
    if m.build and #m.systems > 0 and not m.uncertain_systems then
        local list = ccall("systems", W.systems, W) or {}
        if #list ~= #m.systems then
            fail("%s: systems() lists %d systems, model has %d", why, #list, #m.systems)
        else
            for i, s in ipairs(m.systems) do
                local got = list[i]
                if got.name ~= s.name or got.kind ~= "lua" or got.enabled ~= s.enabled or got.runs ~= s.runs
                    or got.exclusive ~= s.exclusive then
                    fail("%s: systems()[%d] = {%s, %s, enabled=%s, runs=%s}, model has {%s, enabled=%s, runs=%d}",
                         why, i, tostring(got.name), tostring(got.kind), tostring(got.enabled), tostring(got.runs),
                         s.name, tostring(s.enabled), s.runs)
                end
            end
        end
    end
end

-- After an error: the world must be exactly what it was, as far as the model can tell.
local function after_error(m, involved, why)
    if m.closed then return end
    if m.cur_sys and not m.cur_sys.exclusive then return sample_check(m, involved, why, true) end
    if S.pending_error_checks % 8 == 0 and m.defer_depth == 0 and not m.cur_sys then
        full_check(m, why)
    else
        sample_check(m, involved, why)
    end
    S.pending_error_checks = S.pending_error_checks + 1
end


function C.reset() crng = 0x2545F491 end

C.check_entity, C.sample_check, C.same_list, C.full_check, C.after_error =
    check_entity, sample_check, same_list, full_check, after_error
return C
