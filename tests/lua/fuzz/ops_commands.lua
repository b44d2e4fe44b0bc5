-- fuzz/ops_commands.lua: one command buffer per episode, recorded with random (often bad)
-- records and applied to either world; the model replays the applied records in order.
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
local O = require "fuzz.ops_world"
local predict_add, commit_add = O.predict_add, O.commit_add

-- Commands -----------------------------------------------------------------------------------

-- Placeholders are -(tag * 2^20 + k) for the k-th spawn of a batch (commands.c). A batch
-- takes its tag from the Lua state's one counter when it first spawns (other buffers' batches
-- take theirs meanwhile), so the model learns a batch's tag from its first spawn (nil until
-- then) and checks that it is above every tag seen before in this state, and below 2^33.
local SHIFT = 20
local highest_tag = 0
local function placeholder(c, k) return -(N.shl(c.batch or c.prev_batch or 0, SHIFT) + k) end
local function spawn_number(p) return N.low_bits(-p, SHIFT) end
local function batch_of(p) return N.shr(-p, SHIFT) end

local function new_batch(c)
    c.prev_batch = c.batch or c.prev_batch
    c.batch = nil
    c.spawns = 0
    c.complete = false
    c.resolved = {}
    c.home = nil -- the model of the world the batch's spawns landed in
end

-- The first spawn of a batch returned p: its number becomes the batch's.
local function learn_batch(c, p)
    local i = N.tointeger(p)
    if i == nil or i >= 0 or spawn_number(i) ~= 1 then
        fail("commands:spawn returned %s for a batch's first spawn", tostring(p))
        return
    end
    local b = batch_of(i)
    if b <= highest_tag or b >= 2 ^ 33 then
        fail("commands:spawn started a batch with tag %d, after tag %d was handed out", b, highest_tag)
    end
    highest_tag = b
    c.batch = b
end

-- check_target: an entity, or a placeholder of the current batch.
local function target_ok(c, v)
    local i = type(v) == "number" and N.tointeger(v) or nil -- numbers only, never strings
    if i == nil or i == 0 then return nil end
    if i < 0 and (c.complete or batch_of(i) ~= c.batch or spawn_number(i) == 0 or spawn_number(i) > c.spawns) then
        return nil
    end
    return i
end

local function cmd_target(m, c)
    local k = R(100)
    if c.spawns > 0 and k <= 30 then return placeholder(c, R(1, c.spawns)) end
    if k <= 34 then return placeholder(c, c.spawns + 1) end
    if k <= 37 and c.prev_batch then return -(N.shl(c.prev_batch, SHIFT) + 1) end
    return pick_entity(m, true)
end

-- Predicts one record applied through the world's methods to model tm; returns ok and a
-- function that commits it (given the spawned entity for a spawn).
local function predict_record(tm, c, rec)
    local target = rec.target
    if rec.op ~= "spawn" and target < 0 then
        target = c.resolved[spawn_number(target)]
        if target == nil then return false end -- "whose spawn has not been applied"
    end
    if rec.op == "spawn" then
        local init = rec.value
        local comps, ok, ids = {}, init == nil or type(init) == "table", {}
        if ok and init then
            local n = 0
            for key in next, init do
                n = n + 1
                local comp = tm:resolve(key)
                if not comp or n > 64 or not access_ok(tm, comp, true) or ids[comp.id] then
                    ok = false
                    break
                end
                ids[comp.id] = true
                local bok, v = M.build(comp, rawget(init, key)) -- by name or by id, as keyed
                if not bok or not tm:value_ok(nil, comp, v) then
                    ok = false
                    break
                end
                comps[comp.name] = v
            end
        end
        return ok, function(e)
            if tm:deferred() then
                tm.reserved[e] = true
                tm:saw(e)
                local q = tm:queue()
                q[#q + 1] = {op = "spawn", e = e, comps = comps}
            else
                tm:make_alive(e, comps)
            end
        end
    elseif rec.op == "despawn" then
        -- skipped when the target is not alive (is_alive first)
        if not tm.alive[target] then return true, function() end end
        return true, function()
            if tm:deferred() then
                local q = tm:queue()
                q[#q + 1] = {op = "despawn", e = target}
            else
                tm:kill(target)
            end
        end
    end
    local comp = tm:resolve(rec.name)
    if rec.op == "add" then
        local ok, v = predict_add(tm, target, comp, rec.value)
        return ok, function() commit_add(tm, target, comp, v) end
    elseif rec.op == "remove" then
        local ok = comp and access_ok(tm, comp, true)
            and (tm:deferred() and tm:deferred_target_ok(target) or tm.alive[target] ~= nil)
        return ok, function()
            if tm:deferred() then
                local q = tm:queue()
                q[#q + 1] = {op = "remove", e = target, name = comp.name}
            elseif tm.alive[target].comps[comp.name] ~= nil then
                tm:remove_value(target, comp.name)
            end
        end
    end
    -- set
    local ok = comp and access_ok(tm, comp, true) and tm.alive[target] ~= nil
        and tm.alive[target].comps[comp.name] ~= nil
    local v
    if ok then
        if comp.kind == "lua" then v = rec.value == nil and M.NIL or rec.value
        elseif comp.kind == "tag" then v = true
        else ok, v = M.read_fields(comp, rec.value, tm.alive[target].comps[comp.name]) end
        -- the Parent check hook refuses a self link or a cycle, as world:set does
        if ok then ok = tm:value_ok(target, comp, v) end
    end
    return ok, function() tm:set_value(target, comp.name, v, comp.kind ~= "tag") end
end

function ops.commands(m)
    local c = S.cmd_model
    local buf = S.commands
    local k = R(100)
    if k <= 12 then
        local init = chance(0.8) and nil or gen.garbage()
        if chance(0.6) then
            init = {}
            for _ = 1, R(0, 2) do
                local name = pick(user_comp_names(m))
                init[name] = pick_fields(m.comps[name], m)
            end
        end
        local ok = init == nil or type(init) == "table"
        local r = call("commands:spawn", S.CM.spawn, buf, init)
        expect("commands:spawn", ok, r)
        if r[1] then
            if c.complete then new_batch(c) end
            c.spawns = c.spawns + 1
            if c.batch == nil then learn_batch(c, r[2]) end
            local p = placeholder(c, c.spawns)
            if r[2] ~= p then fail("commands:spawn returned %s, expected %d", tostring(r[2]), p) end
            c.records[#c.records + 1] = {op = "spawn", target = p, value = init}
        end
    elseif k <= 55 then
        local op = pick({"add", "set", "remove", "despawn"})
        local target = cmd_target(m, c)
        local name = chance(0.9) and pick(user_comp_names(m)) or pick({"Nope", 4, nil})
        local comp = type(name) == "string" and m.comps[name]
        local value = comp and pick_fields(comp, m, op == "set") or nil
        local ti = target_ok(c, target)
        local ok = ti ~= nil
        if op ~= "despawn" and type(name) ~= "string" then ok = false end
        local r
        if op == "despawn" then r = call("commands:despawn", S.CM.despawn, buf, target)
        elseif op == "remove" then r = call("commands:remove", S.CM.remove, buf, target, name)
        else r = call("commands:" .. op, S.CM[op], buf, target, name, value) end
        expect("commands:" .. op, ok, r, tostring(target) .. " " .. tostring(name))
        if r[1] and ok then
            if c.complete then new_batch(c) end
            c.records[#c.records + 1] = {op = op, target = ti, name = name, value = value}
        end
    elseif k <= 75 then
        -- apply: every record through the world's own methods, stopping at the first failure.
        -- The model replays the records in order afterwards (a record may depend on the ones
        -- before it, and a spawn's entity is known only once applied).
        local target_m = chance(0.9) and m or other_world(m)
        local world = target_m.world
        if chance(0.05) then world = pick({S.closed_world, gen.garbage(), m.queries[1] and m.queries[1].q}) end
        local valid = world == target_m.world and not target_m.closed
        local r = call("commands:apply", S.CM.apply, buf, world)
        -- a batch whose spawns landed in one world resumes only there: its placeholders name
        -- that world's entities (nil, a message and 0 elsewhere, or once that one is closed)
        local away = c.home ~= nil and #c.records > 0 and (c.home ~= target_m or c.home.closed)
        if not valid then
            expect("commands:apply", false, r, "not an open world")
        elseif away then
            if expect("commands:apply", true, r) and (r[2] ~= nil or r[4] ~= 0
                or not tostring(r[3]):find("the batch spawned into another world", 1, true)) then
                fail("commands:apply of a batch that spawned elsewhere returned %s, %s, %s", tostring(r[2]),
                     tostring(r[3]), tostring(r[4]))
            end
            note("commands:apply refuses a batch that spawned into another world")
        elseif expect("commands:apply", true, r) then
            local n = r[2] == nil and r[4] or r[2]
            n = N.tointeger(n) or -1
            if n < 0 or n > #c.records then fail("commands:apply returned %s", tostring(n)) end
            local applied = 0
            for i, rec in ipairs(c.records) do
                local ok, commit = predict_record(target_m, c, rec)
                if TRACE then
                    io.stderr:write(string.format("  record %s %s %s %s -> %s\n", rec.op, tostring(rec.target),
                                                  tostring(rec.name), M.describe(rec.value), tostring(ok)))
                end
                if i > n then
                    if ok then fail("commands:apply stopped at record %d (%s %s %s): %s, the model expects it to apply",
                                    i, rec.op, tostring(rec.target), tostring(rec.name), tostring(r[3])) end
                    break
                end
                if not ok then
                    fail("commands:apply applied record %d (%s %s %s), the model expects it to fail", i, rec.op,
                         tostring(rec.target), tostring(rec.name))
                    break
                end
                if rec.op == "spawn" then
                    local rr = call("commands:resolved", S.CM.resolved, buf, rec.target)
                    if rr[1] and N.mtype(rr[2]) == "integer" then
                        c.resolved[spawn_number(rec.target)] = rr[2]
                        c.home = target_m
                        commit(rr[2])
                    else
                        fail("resolved(%d) = %s after its spawn was applied", rec.target, tostring(rr[2]))
                    end
                else
                    commit()
                end
                applied = i
            end
            if r[2] == nil then note("commands:apply stops at a failing record") end
            if r[2] ~= nil and n ~= #c.records then fail("commands:apply returned %s with %d records", tostring(n), #c.records) end
            for _ = 1, math.max(applied, 0) do table.remove(c.records, 1) end
            if r[2] ~= nil then
                c.records = {}
                c.complete = true
            end
        end
        if not r[1] or r[2] == nil then after_error(target_m, {}, "commands:apply") end
    elseif k <= 82 then
        local r = call("commands:clear", S.CM.clear, buf)
        expect("commands:clear", true, r)
        c.records = {}
        new_batch(c)
    elseif k <= 92 then
        local p
        local j = R(100)
        if j <= 60 then p = placeholder(c, R(1, c.spawns + 1))
        elseif j <= 70 then p = -1
        else p = pick({0, 1, 2.5, "x", N.maxinteger, "-1", -1.0, -(2 ^ 40)}) end
        if chance(0.05) then p = N.mininteger end
        local pi = type(p) == "number" and N.tointeger(p) or nil
        local ok = pi ~= nil and pi < 0 and batch_of(pi) == c.batch and spawn_number(pi) ~= 0
            and spawn_number(pi) <= c.spawns
        local r = call("commands:resolved", S.CM.resolved, buf, p)
        expect("commands:resolved", ok, r, tostring(p))
        if r[1] and ok and r[2] ~= c.resolved[spawn_number(pi)] then
            fail("resolved(%d) = %s, model %s", pi, tostring(r[2]), tostring(c.resolved[spawn_number(pi)]))
        end
    else
        local r = call("commands:count", S.CM.count, buf)
        if expect("commands:count", true, r) and r[2] ~= #c.records then
            fail("commands:count() = %s, model %d", tostring(r[2]), #c.records)
        end
        call("tostring", tostring, buf)
    end
end


return {}
