-- fuzz/ops_world.lua: operations on entities and their components, ticks, the hierarchy,
-- events, resources, definitions, tools, and misuse (wrong self, closed worlds).
local N = require "fuzz.num"
local kiln = require "kiln"
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

local BASE_COMPONENTS, TRANSFORM, EVENTS = W.BASE_COMPONENTS, W.TRANSFORM, W.EVENTS
local O = {}

function ops.spawn(m)
    local init
    local k = R(100)
    local names = user_comp_names(m)
    if k <= 10 then
        init = nil
    elseif k <= 15 then
        init = gen.garbage(extras())
    else
        init = {}
        for _ = 1, R(0, 4) do
            local c = R(100) <= 90 and pick(names) or pick_comp(m)
            local comp = m:resolve(c)
            if c ~= nil and c == c then init[c] = comp and pick_fields(comp, m) or gen.garbage(extras()) end
        end
        if chance(0.01) then
            for i = 1, 70 do init["Nope" .. i] = true end
        end
    end
    -- predict
    local ok, comps, why = true, {}, "init is not a table"
    if init ~= nil and type(init) ~= "table" then ok = false end
    local ids, n = {}, 0
    if ok and init then
        for key in next, init do
            n = n + 1
            local comp = m:resolve(key)
            if not comp or n > 64 then
                ok, why = false, "bad key " .. tostring(key)
                break
            end
            if not access_ok(m, comp, true) then ok, why = false, "no access to " .. comp.name end
            if ids[comp.id] then ok, why = false, "twice: " .. comp.name end
            ids[comp.id] = true
            local vok, v = M.build(comp, rawget(init, key)) -- by name or by id, as keyed
            if not vok then ok, why = false, "bad value for " .. comp.name end
            if vok and not m:value_ok(nil, comp, v) then ok, why = false, comp.name .. " refused by its check" end
            comps[comp.name] = v
        end
    end
    local r = wcall(m, "spawn", init)
    expect("world:spawn", ok, r, (ok and "" or why) .. " init " .. M.describe(init))
    if r[1] and ok then
        local e = r[2]
        if N.mtype(e) ~= "integer" or e <= 0 then return fail("spawn returned %s", tostring(e)) end
        if m:deferred() then
            if m.alive[e] or m.reserved[e] then return fail("deferred spawn returned a used handle %s", e) end
            m.reserved[e] = true
            m:saw(e)
            local q = m:queue()
            q[#q + 1] = {op = "spawn", e = e, comps = comps}
        else
            if m.alive[e] then return fail("spawn returned live handle %s", e) end
            m:make_alive(e, comps)
        end
        return {e}
    end
    if not r[1] then after_error(m, {}, "spawn") end
end

function ops.despawn(m)
    local e = pick_entity(m)
    local ei = m:entity_arg(e)
    local ok
    if ei == nil then ok = false
    elseif m:deferred() then ok = m:deferred_target_ok(ei)
    else ok = m.alive[ei] ~= nil end
    local r = wcall(m, "despawn", e)
    expect("world:despawn", ok, r, tostring(e))
    if r[1] and ok then
        if m:deferred() then
            local q = m:queue()
            q[#q + 1] = {op = "despawn", e = ei}
        else
            m:kill(ei)
        end
    end
    if not r[1] then after_error(m, {ei}, "despawn") end
end

function ops.is_alive(m)
    local e = pick_entity(m)
    local r = wcall(m, "is_alive", e)
    local i = type(e) == "number" and N.tointeger(e)
    local want = i and i > 0 and m.alive[i] ~= nil or false
    if expect("world:is_alive", true, r) and r[2] ~= want then
        fail("is_alive(%s) = %s, model says %s", tostring(e), tostring(r[2]), tostring(want))
    end
end

function ops.count(m)
    local r = wcall(m, "count", chance(0.1) and gen.garbage() or nil)
    if expect("world:count", true, r) and r[2] ~= m:count() then
        fail("count() = %s, model has %d", tostring(r[2]), m:count())
    end
end

function ops.entities(m)
    local r = wcall(m, "entities")
    if expect("world:entities", true, r) and #r[2] ~= m:count() then
        fail("#entities() = %d, model has %d", #r[2], m:count())
    end
end

-- The model side of add (also used by commands and set_parent).
local function predict_add(m, ei, comp, value, present)
    if ei == nil or not comp then return false end
    if not access_ok(m, comp, true) then return false end
    if m:deferred() then
        if not m:deferred_target_ok(ei) then return false end
    elseif not m.alive[ei] then
        return false
    end
    local ok, v = M.build(comp, value)
    if not ok or not m:value_ok(ei, comp, v) then return false end
    return true, v
end

local function commit_add(m, ei, comp, v)
    if m:deferred() then
        local q = m:queue()
        q[#q + 1] = {op = "add", e = ei, name = comp.name, value = v}
    else
        m:set_value(ei, comp.name, v, true)
    end
end

function ops.add(m)
    local e, c = pick_entity(m), pick_comp(m)
    local comp = m:resolve(c)
    local value = comp and pick_fields(comp, m) or gen.garbage(extras())
    local omit = chance(0.05)
    if omit then value = nil end
    local ei = m:entity_arg(e)
    local ok, v = predict_add(m, ei, comp, value)
    local r
    if omit then r = wcall(m, "add", e, c) else r = wcall(m, "add", e, c, value) end
    expect("world:add", ok, r, string.format("%s %s %s", tostring(e), tostring(c), M.describe(value)))
    if r[1] and ok then commit_add(m, ei, comp, v) end
    if not r[1] then after_error(m, {ei}, "add") end
end

function ops.remove(m)
    local e, c = pick_entity(m), pick_comp(m)
    local comp = m:resolve(c)
    local ei = m:entity_arg(e)
    local ok = ei ~= nil and comp and access_ok(m, comp, true)
    if ok then
        if m:deferred() then ok = m:deferred_target_ok(ei) else ok = m.alive[ei] ~= nil end
    end
    local r = wcall(m, "remove", e, c)
    expect("world:remove", ok, r, tostring(e) .. " " .. tostring(c))
    if r[1] and ok then
        local had = m.alive[ei] ~= nil and m.alive[ei].comps[comp.name] ~= nil
        if r[2] ~= had then fail("remove(%s, %s) returned %s, model says %s", ei, comp.name, tostring(r[2]), tostring(had)) end
        if m:deferred() then
            local q = m:queue()
            q[#q + 1] = {op = "remove", e = ei, name = comp.name}
        elseif had then
            m:remove_value(ei, comp.name)
        end
    end
    if not r[1] then after_error(m, {ei}, "remove") end
end

function ops.has(m)
    local e, c = pick_entity(m), pick_comp(m)
    local comp = m:resolve(c)
    local i = type(e) == "number" and N.tointeger(e) or nil
    local ok = i ~= nil and comp and access_ok(m, comp, false)
    local r = wcall(m, "has", e, c)
    expect("world:has", ok, r, tostring(e) .. " " .. tostring(c))
    if r[1] and ok then
        local want = i > 0 and m.alive[i] ~= nil and m.alive[i].comps[comp.name] ~= nil
        if r[2] ~= want then fail("has(%s, %s) = %s, model says %s", tostring(e), comp.name, tostring(r[2]), tostring(want)) end
    end
end

-- world:getter(name, field): a closure that must read what world:get reads.
function ops.getter(m)
    local e, c = pick_entity(m), pick_comp(m)
    local comp = m:resolve(c)
    local field = comp and comp.fields and #comp.fields > 0 and gen.pick(comp.fields).name or gen.pick({"x", "nope"})
    local r = wcall(m, "getter", c, field)
    local known = comp and comp.kind == "data" and comp.fields
    local has_field = false
    for _, f in ipairs(known or {}) do has_field = has_field or f.name == field end
    expect("world:getter", comp ~= nil and has_field, r, tostring(c) .. "." .. tostring(field))
    if not r[1] then return end
    local ei = m:entity_arg(e)
    local ok = ei ~= nil and access_ok(m, comp, false) and m.alive[ei] ~= nil
    local got = N.pack(pcall(r[2], e))
    if got[1] ~= (ok and true or false) then
        fail("getter %s.%s(%s): %s, expected %s", comp.name, field, tostring(e), tostring(got[2]),
            ok and "a value" or "an error")
    end
    if got[1] then
        local rec = m.alive[ei]
        local want = rec and rec.comps[comp.name]
        if want == M.NIL then want = nil end
        want = M.visible(comp, want)
        if not M.same(got[2], want and want[field]) then
            fail("getter %s.%s(%s) = %s, model has %s", comp.name, field, ei, M.describe(got[2]),
                M.describe(want and want[field]))
        end
    end
end

function ops.get(m)
    local e, c = pick_entity(m), pick_comp(m)
    local comp = m:resolve(c)
    local ei = m:entity_arg(e)
    local ok = ei ~= nil and comp and access_ok(m, comp, false) and m.alive[ei] ~= nil
    -- now and then into a table kept per component name (refilled in place, no garbage)
    local into = comp and comp.kind == "data" and gen.chance(0.3) or nil
    if into then
        m.intos = m.intos or {}
        m.intos[comp.name] = m.intos[comp.name] or {}
        into = m.intos[comp.name]
    end
    local r = wcall(m, "get", e, c, into)
    if into and r[1] and r[2] ~= nil and r[2] ~= into then
        fail("get(%s, %s, into) returned another table than into", tostring(e), comp.name)
    end
    expect("world:get", ok, r, tostring(e) .. " " .. tostring(c))
    if r[1] and ok then
        local rec = m.alive[ei]
        local want = rec and rec.comps[comp.name]
        if want == M.NIL then want = nil end
        want = M.visible(comp, want)
        if not M.same(r[2], want) then
            fail("get(%s, %s) = %s, model has %s", ei, comp.name, M.describe(r[2]), M.describe(want))
        end
        -- a copy: changing it changes nothing
        if type(r[2]) == "table" and comp.kind == "data" and not into then
            for k in pairs(r[2]) do r[2][k] = "scribble" end
        end
    end
end

function ops.set(m)
    local e, c = pick_entity(m), pick_comp(m)
    local comp = m:resolve(c)
    local fields = comp and pick_fields(comp, m, true) or gen.garbage(extras())
    local ei = m:entity_arg(e)
    local ok = ei ~= nil and comp and access_ok(m, comp, true) and m.alive[ei] ~= nil
        and m.alive[ei].comps[comp.name] ~= nil
    local v
    if ok then
        if comp.kind == "lua" then
            v = fields == nil and M.NIL or fields
        elseif comp.kind == "tag" then
            v = true
        else
            ok, v = M.read_fields(comp, fields, m.alive[ei].comps[comp.name])
            if ok then ok = m:value_ok(ei, comp, v) end
        end
    end
    local r = wcall(m, "set", e, c, fields)
    expect("world:set", ok, r, string.format("%s %s %s", tostring(e), tostring(c), M.describe(fields)))
    if r[1] and ok then
        m:set_value(ei, comp.name, v, comp.kind ~= "tag")
    end
    if not r[1] then after_error(m, {ei}, "set") end
end

function ops.tick(m)
    local r = wcall(m, "tick")
    if expect("world:tick", true, r) and r[2] ~= m.tick then fail("tick() = %s, model %d", tostring(r[2]), m.tick) end
end

function ops.advance_tick(m)
    local r = wcall(m, "advance_tick")
    -- only an exclusive system may advance the tick (C systems on the pool stamp with it)
    local refused = m.cur_sys ~= nil and not m.cur_sys.exclusive
    if expect("world:advance_tick", not refused, r, refused and "in a system that is not exclusive" or nil) and not refused then
        m.tick = m.tick + 1
        if r[2] ~= m.tick then fail("advance_tick() = %s, model %d", tostring(r[2]), m.tick) end
    end
end

-- world:trim gives back room only: the world (checked against the model after every call)
-- is unchanged, it answers a byte count, and inside a frame it trims nothing.
function ops.trim(m)
    local r = wcall(m, "trim")
    if expect("world:trim", true, r) then
        if N.mtype(r[2]) ~= "integer" or r[2] < 0 then fail("trim() = %s", tostring(r[2])) end
        if m.cur_sys ~= nil and not m.cur_sys.exclusive and r[2] ~= 0 then
            fail("trim() in a system that is not exclusive gave back %d bytes", r[2])
        end
    end
end

function ops.changed_tick(m)
    local e, c = pick_entity(m), pick_comp(m)
    local comp = m:resolve(c)
    local ei = m:entity_arg(e)
    -- a read: a running system must have declared it
    local ok = ei ~= nil and comp ~= nil and access_ok(m, comp, false) and m.alive[ei] ~= nil
    local r = wcall(m, "changed_tick", e, c)
    expect("world:changed_tick", ok, r, tostring(e) .. " " .. tostring(c))
    if r[1] and ok and comp then
        local rec = m.alive[ei]
        local want = 0
        if rec and rec.comps[comp.name] ~= nil and comp.kind ~= "tag" then want = rec.ticks[comp.name] end
        if r[2] ~= want then fail("changed_tick(%s, %s) = %s, model %s", ei, comp.name, tostring(r[2]), tostring(want)) end
    end
end


-- Hierarchy ---------------------------------------------------------------------------------

function ops.set_parent(m)
    local child = pick_entity(m)
    local parent = chance(0.15) and nil or pick_entity(m)
    if chance(0.05) then parent = 0 end
    local ci = m:entity_arg(child)
    local pi = parent == nil and 0 or m:entity_arg(parent)
    local comp = m.comps.Parent
    -- deferred, an entity spawned earlier in the section (reserved) takes links too
    local function linkable(e) return m.alive[e] ~= nil or (m:deferred() and m.reserved[e] ~= nil) end
    local ok = ci ~= nil and pi ~= nil and access_ok(m, comp, true) and linkable(ci)
    if ok and pi ~= 0 then ok = linkable(pi) and m:parent_ok(ci, pi) end
    local r = wcall(m, "set_parent", child, parent)
    expect("world:set_parent", ok, r, tostring(child) .. " -> " .. tostring(parent))
    if r[1] and ok then
        if pi == 0 then
            if m:deferred() then
                local q = m:queue()
                q[#q + 1] = {op = "remove", e = ci, name = "Parent"}
            elseif m.alive[ci].comps.Parent then
                m:remove_value(ci, "Parent")
            end
        else
            commit_add(m, ci, comp, {entity = pi})
        end
    end
    if not r[1] then after_error(m, {ci, pi}, "set_parent") end
end

function ops.children(m)
    local e = pick_entity(m)
    local ei = m:entity_arg(e)
    local r = wcall(m, "children", e)
    expect("world:children", ei ~= nil and m.alive[ei] ~= nil and access_ok(m, m.comps.Parent, false), r, tostring(e))
    if r[1] and ei then
        local want = m:children(ei)
        if not same_list(r[2], want) then fail("children(%s) = %s, model %s", ei, M.describe(r[2]), M.describe(want)) end
    end
end

function ops.despawn_recursive(m)
    local e = pick_entity(m)
    local ei = m:entity_arg(e)
    local ok = ei ~= nil and access_ok(m, m.comps.Parent, false) -- the walk reads Parent
        and (m.alive[ei] ~= nil or (m:deferred() and m.reserved[ei] ~= nil))
    local doomed = ok and m:descendants(ei)
    if ok and not doomed then
        fail("the model's hierarchy walk failed")
        ok = nil
    end
    local r = wcall(m, "despawn_recursive", e)
    expect("world:despawn_recursive", ok, r, tostring(e))
    if r[1] and doomed then
        if m:deferred() then
            local q = m:queue()
            for i = #doomed, 1, -1 do q[#q + 1] = {op = "despawn", e = doomed[i]} end
        else
            for i = #doomed, 1, -1 do m:kill(doomed[i]) end
        end
    end
    if not r[1] then after_error(m, {ei}, "despawn_recursive") end
end

-- Events and resources -----------------------------------------------------------------------

local function random_schema(valid)
    local parts = {}
    local used = {}
    for _ = 1, R(1, 4) do
        local tname = pick(M.type_names)
        local name
        repeat name = "f" .. R(1, 99) until not used[name]
        used[name] = true
        local decl = tname .. " " .. name
        if tname == "char" or chance(0.15) then decl = decl .. "[" .. R(1, 6) .. "]" end
        parts[#parts + 1] = decl
    end
    local s = table.concat(parts, "; ") .. ";"
    if not valid then
        local k = R(8)
        if k == 1 then s = s .. " float" end
        if k == 2 then s = "float x y;" end
        if k == 3 then s = "char name;" end
        if k == 4 then s = "vec9 v;" end
        if k == 5 then s = "float x[0];" end
        if k == 6 then s = "mat4 m[65536]; mat4 n[2];" end
        if k == 7 then s = "int x, x;" end
        if k == 8 then s = string.rep("float a" .. R(1, 9) .. "; ", 3) end
    end
    if chance(0.1) then s = s:gsub(";", " ;\n\t") end
    return s
end

function ops.define_event(m)
    local name = chance(0.7) and pick(m.event_names) or pick({"Boom", "E" .. R(1, 5), "", string.rep("e", 70), 5, {}, nil})
    local schema
    local ev = type(name) == "string" and m.events[name]
    if ev and chance(0.6) then
        schema = pick(EVENTS)[2]
    else
        schema = chance(0.2) and pick({"lua", 7, {}, false}) or random_schema(chance(0.7))
    end
    local r = wcall(m, "event", name, schema)
    -- names: checkstring; schemas: optstring
    -- names and schemas are strings without zero bytes
    local nm = type(name) == "string" and not name:find("\0", 1, true) and name
    local sc = schema == nil and "" or (type(schema) == "string" and not schema:find("\0", 1, true) and schema)
    local ok, layout = false, nil
    if nm and sc and sc ~= "lua" and #nm >= 1 and #nm <= 63 then
        layout = M.parse_schema(sc)
        ok = layout ~= nil
        if ok and m.events[nm] then ok = M.signature(layout) == m.events[nm].sig end
    end
    expect("world:event", ok, r, tostring(name) .. " " .. tostring(schema))
    if r[1] and ok and not m.events[nm] then
        m.events[nm] = {layout = layout, fields = layout.fields, sig = M.signature(layout), prev = {}, cur = {}}
        m.event_names[#m.event_names + 1] = nm
    end
end

function ops.emit(m)
    local name = chance(0.9) and pick(m.event_names) or pick({"Nope", 3, {}, nil, "Pos"})
    local ev = type(name) == "string" and m.events[name]
    local value
    if ev and #ev.fields > 0 then
        value = pick_fields({kind = "data", fields = ev.fields, name = name}, m)
    else
        value = chance(0.8) and nil or gen.garbage()
    end
    local ok, v = false, nil
    if ev then
        if value == nil then
            ok, v = true, M.zero_value({kind = "data", fields = ev.fields})
        elseif #ev.fields == 0 then
            ok = false
        else
            ok, v = M.read_fields({fields = ev.fields}, value, M.zero_value({kind = "data", fields = ev.fields}))
        end
    end
    local r = wcall(m, "emit", name, value)
    expect("world:emit", ok, r, tostring(name) .. " " .. M.describe(value))
    if r[1] and ok then
        if m.cur_sys and not m.cur_sys.exclusive then
            local q = m.cur_sys.queue
            q[#q + 1] = {op = "emit", name = name, value = v}
        else
            ev.cur[#ev.cur + 1] = v
        end
    end
    if not r[1] then after_error(m, {}, "emit") end
end

function ops.events(m)
    local name = chance(0.9) and pick(m.event_names) or pick({"Nope", {}, nil})
    local ev = type(name) == "string" and m.events[name]
    local r = wcall(m, "events", name)
    expect("world:events", ev and true or false, r, tostring(name))
    if r[1] and ev then
        local got = {}
        local ok, err = pcall(function() for x in r[2] do got[#got + 1] = x end end)
        if not ok then fail("events iterator raised: %s", tostring(err)) end
        local want = {}
        for _, x in ipairs(ev.prev) do want[#want + 1] = M.visible(ev, x) end
        for _, x in ipairs(ev.cur) do want[#want + 1] = M.visible(ev, x) end
        if not same_list(got, want) then
            fail("events(%s): %d events, model %d (%s vs %s)", name, #got, #want, M.describe(got[1]), M.describe(want[1]))
        end
        call("events step", r[2], gen.garbage()) -- extra steps after the end are harmless
    end
end

function ops.resource(m)
    local k = R(100)
    local name
    if k <= 50 then name = pick(user_comp_names(m))
    elseif k <= 85 then name = pick({"score", "config", "level", "Pos\0x", "kiln.lua", "7"})
    else name = pick({5, {}, nil, true}) end
    local setting = chance(0.5)
    local value
    local nm = type(name) == "string" and name
    local comp = nm and not nm:find("\0", 1, true) and m.comps[nm]
    if comp and (comp.internal or comp.kind == "lua") then comp = nil end
    if setting then
        if comp and comp.kind == "data" and chance(0.85) then value = pick_fields(comp, m) else value = gen.garbage(extras()) end
        if chance(0.1) then value = nil end
    end
    local ok, v = type(name) == "string", nil -- a resource is named by a string
    if ok and comp then
        ok = access_ok(m, comp, setting)
        -- a tag resource is set to true (or removed with nil), nothing else
        if ok and setting and comp.kind == "tag" and value ~= nil and value ~= true then ok = false end
        if ok and setting and value ~= nil and comp.kind == "data" then
            ok, v = M.read_fields(comp, value, m.comp_resources[nm] or M.zero_value(comp))
            -- kiln_resource_set runs the component's check hook, with no entity (as a spawn's)
            if ok then ok = m:value_ok(nil, comp, v) end
        elseif setting and value ~= nil then
            v = true
        end
    end
    local r
    if setting then r = wcall(m, "resource", name, value) else r = wcall(m, "resource", name) end
    expect("world:resource", ok, r, tostring(name) .. " " .. M.describe(value))
    if r[1] and ok then
        if comp then
            if setting then
                m.comp_resources[nm] = value ~= nil and v or nil
            elseif not M.same(r[2], M.visible(comp, m.comp_resources[nm])) then
                fail("resource(%s) = %s, model %s", nm, M.describe(r[2]), M.describe(m.comp_resources[nm]))
            end
        else
            if setting then
                m.lua_resources[nm] = value
            elseif not rawequal(r[2], m.lua_resources[nm]) and not (r[2] ~= r[2]) then
                fail("resource(%s) = %s, model %s", nm, M.describe(r[2]), M.describe(m.lua_resources[nm]))
            end
        end
    end
    if not r[1] then after_error(m, {}, "resource") end
end

function ops.component(m)
    local k = R(100)
    local name, schema
    if k <= 40 then
        local def = pick(BASE_COMPONENTS)
        name = def[1]
        schema = chance(0.6) and def[2] or (chance(0.5) and random_schema(true) or pick({"lua", nil, "float x;"}))
        if schema == def[2] and def[2] and def[2] ~= "lua" and chance(0.5) then
            schema = def[2]:gsub(", ", " ,  "):gsub(";", " ;\n")
        end
    elseif k <= 55 then
        name = pick({"Parent", "LocalTransform", "WorldTransform", "kiln.lua"})
        schema = TRANSFORM[name] and TRANSFORM[name].schema or "int32_t ref;"
    elseif k <= 80 and S.extra_comps < 4 then
        name = "R" .. R(1, 6)
        schema = random_schema(chance(0.7))
        if chance(0.2) then schema = pick({false, "lua"}) or nil end
    else
        name = pick({"", string.rep("L", 64), string.rep("L", 63), 12, {}, nil, "Pos\0tail", "Hit"})
        schema = chance(0.5) and random_schema(true) or gen.garbage()
    end
    -- names and schemas are strings without zero bytes
    local nm = type(name) == "string" and not name:find("\0", 1, true) and name
    local sc = schema == nil and "" or (type(schema) == "string" and not schema:find("\0", 1, true) and schema)
    local ok, layout, sig, kind = false, nil, nil, nil
    if nm and sc and #nm >= 1 and #nm <= 63 then
        if sc == "lua" then
            ok, sig, kind = true, "lua", "lua"
        else
            layout = M.parse_schema(sc)
            if layout then
                ok, sig = true, M.signature(layout)
                kind = layout.size == 0 and "tag" or "data"
            end
        end
        local old = m.comps[nm]
        if ok and old then
            -- a declaration of the size registered takes a stricter alignment registered (schema.c)
            local was = old.layout
            if layout and was and layout.size > 0 and layout.size == was.size and was.align > layout.align then
                sig = M.signature({fields = layout.fields, size = layout.size, align = was.align})
            end
            if old.internal then ok = false else ok = old.sig == sig end
        end
    end
    local r = wcall(m, "component", name, schema)
    expect("world:component", ok, r, tostring(name) .. " " .. tostring(schema))
    if r[1] and ok then
        local old = m.comps[nm]
        if old then
            if r[2] ~= old.id then fail("component(%s) again returned id %s, first %d", nm, tostring(r[2]), old.id) end
        else
            if r[2] ~= m.ncomps + 1 then fail("new component %s got id %s, expected %d", nm, tostring(r[2]), m.ncomps + 1) end
            m:add_comp(nm, r[2], kind, layout)
            m.check_queries[nm] = m.world:query{nm}
            S.extra_comps = S.extra_comps + 1
        end
    end
    if not r[1] then after_error(m, {}, "component") end
end


-- Misuse: methods called on the wrong kind of object, on closed worlds, metamethods ---------

function ops.confused(m)
    local tables = {
        {"world:", S.WM}, {"q:", S.QM}, {"commands:", S.CM},
    }
    local t = pick(tables)
    local names = {}
    for name in pairs(t[2]) do names[#names + 1] = name end
    table.sort(names)
    local method = pick(names)
    local selfs = {nil, 1, "w", {}, io.stdout, coroutine.create(function() end), S.closed_world,
                   S.closed_query, S.commands, m.world, m.queries[1] and m.queries[1].q}
    local self = selfs[R(#selfs)]
    -- only wrong selves here: the right one is what the other operations do
    if t[1] == "world:" and (self == m.world or self == other_world(m).world) then self = S.commands end
    if t[1] == "q:" and type(self) == "userdata" and debug.getmetatable(self) == S.Qmt and self ~= S.closed_query then self = m.world end
    if t[1] == "commands:" and self == S.commands then self = m.world end
    local allowed = (t[1] == "world:" and method == "close" and self == S.closed_world)
    local args = {}
    for i = 1, R(0, 3) do args[i] = gen.garbage(extras()) end
    local r = call(t[1] .. method, t[2][method], self, N.unpack(args, 1, 3))
    note("wrong object as self")
    if not allowed then expect(t[1] .. method, false, r, "self " .. tostring(self)) end
end

function ops.tostrings(m)
    for _, v in ipairs({m.world, S.closed_world, S.commands, S.closed_query, m.queries[1] and m.queries[1].q}) do
        local r = call("tostring", tostring, v)
        expect("tostring", true, r)
    end
    local r = call("__tostring", S.Wmt.__tostring, gen.garbage(extras()))
    call("__gc", S.Qmt.__gc, gen.garbage())
    call("__gc", S.Wmt.__gc, S.commands)
    if r then end
end

-- Read-only tool methods (introspection) and the module's helper functions: any arguments,
-- and the world must be unchanged, whether they raise or not.
local READ_ONLY_WORLD = {"components", "component_info", "stats", "inspect", "schema"}
local MODULE_FUNCS = {"handle", "pretty", "table_text", "systems_text", "entity"}

function ops.tools(m)
    local args = {}
    for i = 1, R(0, 3) do
        args[i] = pick({pick_entity(m), pick_comp(m), gen.garbage(extras()), m.world})
    end
    local k = R(3)
    local name, r
    if k == 1 then
        name = pick(READ_ONLY_WORLD)
        if not S.WM[name] then return end
        r = call("world:" .. name, S.WM[name], m.world, N.unpack(args, 1, 3))
    elseif k == 2 then
        name = pick(MODULE_FUNCS)
        if not kiln[name] then return end
        r = call("kiln." .. name, kiln[name], N.unpack(args, 1, 3))
    else
        name = "format"
        if not S.QM.format or #m.queries == 0 then return end
        r = call("q:format", S.QM.format, pick(m.queries).q, pick({m.world, args[1]}), args[2])
    end
    S.tools_used[name] = true
    if not r[1] then after_error(m, {}, name) end
end

-- kiln.world with odd options; closed at once.
function ops.new_world(m)
    local opts = pick({false, {}, {workers = 0}, {workers = 1}, {workers = -1}, {workers = 65},
                       {workers = 1.5}, {max_failures = -1}, {max_failures = "2"}, 5, "x", {workers = {}}}) or nil
    local ok = opts == nil or (type(opts) == "table" and (opts.workers == nil or (N.mtype(opts.workers) == "integer"
        and opts.workers >= 0 and opts.workers <= 64)) and (opts.max_failures == nil or (N.tointeger(opts.max_failures) and N.tointeger(opts.max_failures) >= 0)))
    local r = call("kiln.world", kiln.world, opts)
    expect("kiln.world", ok, r, M.describe(opts))
    if r[1] then
        local w = r[2]
        if chance(0.5) then
            local cr = call("world:close", w.close, w)
            expect("world:close", true, cr)
        end
        -- otherwise left to the garbage collector
    end
end


-- Leaves garbage whose finalizers call the world: the collector runs them at its own
-- moments, often inside another binding call that allocates (converting Big, say). They
-- only read here, so the model needs no news of them and the call sequence stays the same.
-- They also write (the volatile entity's Scratch, the Huge resource): World methods hold the
-- collector while they run, so these finalizers run between calls, never inside one.
function ops.gc_bomb(m)
    local WM, world, v = S.WM, m.world, m.volatile
    for _ = 1, R(1, 4) do
        local payload = {s = {{x = R(100)}, {y = R(100)}}}
        setmetatable({}, {__gc = function()
            S.finalizers = (S.finalizers or 0) + 1
            pcall(WM.count, world)
            pcall(WM.get, world, v, "Scratch")
            pcall(WM.resource, world, "Huge")
            pcall(WM.query, world, {"Pos"}) -- made and dropped: collected later, whenever
            if UNSAFE then
                pcall(WM.set, world, v, "Scratch", payload)
                pcall(WM.resource, world, "Huge", {})
            end
        end})
    end
    if not UNSAFE then known("finalizers that only read (writing ones hit the scratch bug)") end
    note("finalizers left to the collector")
end

-- world:close where the world is busy (a loop, a system, progress): it must raise.
function ops.close_busy(m)
    local busy = m.iterating > 0 or m.defer_depth > 0 or m.cur_sys ~= nil or m.in_progress
    if not busy then return end
    local r = wcall(m, "close")
    expect("world:close", false, r, "inside a loop or a system")
end


O.predict_add, O.commit_add = predict_add, commit_add
return O
