-- fuzz/worlds.lua: the worlds a fuzz run makes (fixed components, events, checker queries)
-- and the random arguments it throws at them: entities, component names, field values.
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

local W = {}

---------------------------------------------------------------------------------------------
-- Worlds and their fixed components.
---------------------------------------------------------------------------------------------

local BASE_COMPONENTS = {
    {"Pos", "float x, y;"},
    {"Vel", "float x, y;"},
    {"Hp", "int32_t hp, max; entity target;"},
    {"Mix", "bool on; int8_t i8; uint8_t u8; int16_t i16; uint16_t u16; uint32_t u32; int64_t i64; " ..
        "uint64_t u64; double d; char tag[8]; vec3 dir; int32_t arr[3]; quat q; vec2 pts[2];"},
    {"Tag", nil},
    {"Flag", nil},
    {"Script", "lua"},
    {"Mat", "mat4 m; uint8 bytes[5];"},
    -- over 1 KiB of array: converting it allocates, so the collector (and finalizers) can
    -- run in the middle of a call
    {"Big", "vec3 b[86];"},
}

-- Components only garbage-collector finalizers touch (see ops.gc_bomb): on one entity per
-- world, the "volatile" one, whose values the checker does not compare.
local RESERVED = {
    {"Scratch", "vec3 s[86];"},
    {"Huge", "vec3 h[2000];"},
}

local TRANSFORM = {
    Parent = {size = 8, align = 8, schema = "entity entity;"},
    LocalTransform = {size = 40, align = 8, schema = "vec3 position; quat rotation; vec3 scale;"},
    WorldTransform = {size = 64, align = 16, schema = "mat4 matrix;"},
}

local EVENTS = {
    {"Hit", "entity who; int32_t dmg;"},
    {"Ping", nil},
    {"Note", "char text[12]; float at;"},
}

local function layout_of(schema)
    local layout = assert(M.parse_schema(schema or ""))
    return layout
end

local function method_tables(w)
    w:component("Pos", "float x, y;")
    local q = w:query{"Pos"}
    local c = kiln.commands()
    -- the real metatables (scripts see a public view without __gc/__close): the fuzzer
    -- calls raw metamethods with garbage on purpose
    local gm = debug.getmetatable
    local mt = gm(w)
    return mt.__index, gm(q).__index, gm(c).__index, mt, gm(q), gm(c), q
end

local function new_world(label, opts)
    local w = kiln.world(opts)
    local m = M.new(w, label)
    -- kiln.lua is registered first, then the transform components, in this order
    local internal = m:add_comp("kiln.lua", 1, "data", {fields = {}, size = 0, align = 1})
    internal.internal = true
    local id = 2
    for _, name in ipairs({"Parent", "LocalTransform", "WorldTransform"}) do
        local t = TRANSFORM[name]
        local layout = layout_of(t.schema)
        layout.size, layout.align = t.size, t.align
        m:add_comp(name, id, "data", layout)
        id = id + 1
    end
    for _, def in ipairs(BASE_COMPONENTS) do
        local name, schema = def[1], def[2]
        local cid = w:component(name, schema)
        if schema == "lua" then
            m:add_comp(name, cid, "lua", nil)
        else
            local layout = layout_of(schema)
            m:add_comp(name, cid, layout.size == 0 and "tag" or "data", layout)
        end
    end
    for _, def in ipairs(RESERVED) do
        local cid = w:component(def[1], def[2])
        m:add_comp(def[1], cid, "data", layout_of(def[2])).reserved = true
    end
    m.volatile = w:spawn{Scratch = {}}
    m:make_alive(m.volatile, {Scratch = M.zero_value(m.comps.Scratch)}).volatile = true
    for _, def in ipairs(EVENTS) do
        w:event(def[1], def[2])
        local layout = layout_of(def[2])
        m.events[def[1]] = {layout = layout, fields = layout.fields, sig = M.signature(layout), prev = {}, cur = {}}
        m.event_names[#m.event_names + 1] = def[1]
    end
    -- one query per component for the checker
    m.check_queries = {}
    for _, name in ipairs(m.comp_names) do
        if not m.comps[name].internal then m.check_queries[name] = w:query{name} end
    end
    m.max_failures = opts and opts.max_failures or 0
    m.unreported = {}
    m.iterating = 0
    m.in_progress = false
    m.build = true -- the schedule builds (nil: unknown, false: broken)
    return m
end

---------------------------------------------------------------------------------------------
-- Random arguments.
---------------------------------------------------------------------------------------------

local function extras()
    local list = {}
    for _, m in ipairs(S.worlds) do
        list[#list + 1] = m.world
        if m.queries[1] then list[#list + 1] = m.queries[1].q end
    end
    list[#list + 1] = S.commands
    list[#list + 1] = S.closed_world
    list[#list + 1] = S.closed_query
    return list
end

local function other_world(m)
    for _, o in ipairs(S.worlds) do
        if o ~= m then return o end
    end
    return m
end

local function stale_of(e)
    local index, generation = N.low_bits(e, 32), N.shr(e, 32)
    return N.shl(generation + R(1, 3), 32) + index
end

-- An entity argument: usually one that exists, often one that does not.
local function pick_entity(m, for_commands)
    local k = R(100)
    local n = #m.alive_list
    if k <= 55 and n > 0 then
        local e = m.alive_list[R(n)]
        if e == m.volatile then return m.dead[1] or 0 end -- left to the finalizers
        return e
    end
    if k <= 65 and #m.dead > 0 then return m.dead[R(#m.dead)] end
    if k <= 70 and n > 0 then return stale_of(m.alive_list[R(n)]) end
    if k <= 75 then
        local o = other_world(m)
        if #o.alive_list > 0 then return o.alive_list[R(#o.alive_list)] end
    end
    if k <= 77 then
        local list = {}
        for e in pairs(m.reserved) do list[#list + 1] = e end
        for e in pairs(m.zombies) do list[#list + 1] = e end
        if #list > 0 then
            table.sort(list)
            return list[R(#list)]
        end
    end
    if k <= 80 and n > 0 then
        local e = m.alive_list[R(n)]
        return chance(0.5) and tostring(e) or e + 0.0
    end
    local edge = pick({0, -1, 1, 2 ^ 53, 2 ^ 53 + 0.0, N.maxinteger, N.mininteger, 4294967296,
                       4294967295, 1.5, -0.0, 1 / 0, 0 / 0, "7", "x", nil, true, {}, R(1, 100),
                       N.shl(R(1, 5), 32) + R(0, 60)})
    if chance(0.1) then return gen.garbage(extras()) end
    return edge
end

local function user_comp_names(m)
    local list = {}
    for _, name in ipairs(m.comp_names) do
        if not m.comps[name].internal and not m.comps[name].reserved then list[#list + 1] = name end
    end
    return list
end

-- A component argument: a name the world knows, mostly.
local function pick_comp(m)
    local k = R(100)
    local names = user_comp_names(m)
    if k <= 78 then return pick(names) end
    if k <= 82 then return m.comps[pick(names)].id end
    if k <= 84 then return pick(names) .. "\0junk" end
    return pick({"Nope", "", "kiln.lua", 1, 0, -1, m.ncomps + 1, 99999, 2.5, "pos", "Pos ",
                 string.rep("N", 80), true, {}, nil, "Hit"})
end

local function random_float()
    local k = R(10)
    if k <= 6 then return (R() - 0.5) * 200 end
    if k == 7 then return R(-100, 100) end
    if k == 8 then return pick({0.0, -0.0, 1 / 0, -1 / 0, 0 / 0, 3.4028234663852886e38, 1e-40, 0.1}) end
    return (R() - 0.5) * 10 ^ R(-10, 30)
end

local function valid_element(t)
    local kind = t.kind
    if kind == "bool" then return chance(0.5) end
    if kind == "int" then
        local k = R(10)
        local v
        if k <= 5 then v = R(math.max(t.lo, -1000), math.min(t.hi, 1000))
        elseif k <= 7 then v = pick({t.lo, t.hi, 0})
        else v = R(math.max(t.lo, -2 ^ 31), math.min(t.hi, 2 ^ 31)) end
        if chance(0.05) then return v + 0.0 end
        if chance(0.03) then return tostring(v) end
        return v
    end
    if kind == "f32" or kind == "f64" then
        if kind == "f64" and chance(0.1) then return R(-10 ^ 9, 10 ^ 9) end
        return random_float()
    end
    if kind == "vec" then
        local v = {}
        for _, key in ipairs(t.keys) do
            if chance(0.8) then v[key] = random_float() end
        end
        return v
    end
    if kind == "mat" then
        local v = {}
        for i = 1, R(0, 16) do v[i] = random_float() end
        return v
    end
end

local function valid_field_value(f)
    if f.type.kind == "char" then
        local s = string.rep(string.char(R(97, 122)), R(0, f.count - 1))
        if chance(0.05) and #s > 1 then s = s:sub(1, 1) .. "\0" .. s:sub(3) end
        return s
    end
    if f.count == 1 then return valid_element(f.type) end
    local a = {}
    for i = 1, R(0, f.count) do a[i] = valid_element(f.type) end
    return a
end

local function invalid_field_value(f)
    local kind = f.type.kind
    local k = R(6)
    if k == 1 then return gen.garbage(extras()) end
    if f.type.kind == "char" then return chance(0.5) and string.rep("c", f.count + R(0, 3)) or R(10) end
    if f.count > 1 then
        local a = {}
        for i = 1, f.count + R(1, 2) do a[i] = valid_element(f.type) end
        if chance(0.5) then a = {valid_element(f.type), "bad"} end
        return a
    end
    if kind == "int" then
        return pick({t = 0, f.type.hi + 1 <= N.maxinteger and f.type.hi + 1 or 1.5, f.type.lo - 1,
                     1.5, "abc", true, {}, 2 ^ 63, -(2 ^ 63) - 1025.0})
    end
    if kind == "f32" then return pick({1e39, -1e300, "1", true, {}, 3.4028235677973366e38}) end
    if kind == "f64" then return pick({"1", true, {}, nil}) end
    if kind == "bool" then return pick({0, 1, "true", {}}) end
    if kind == "vec" then return pick({{x = "a"}, 5, "v", {y = true}, {z = {}}}) end
    if kind == "mat" then return pick({{1, 2, "x"}, 7, {[1] = {}}}) end
    return nil
end

-- A fields table for comp: valid, partly invalid, or not a table at all.
local raw_pick_fields

local function pick_fields(comp, m, for_set)
    return raw_pick_fields(comp, m, for_set)
end

raw_pick_fields = function(comp, m, for_set)
    if comp.kind == "lua" then return gen.garbage(extras()) end
    if comp.kind == "tag" then
        return pick({true, false, nil, nil, 1, {}, "yes"})
    end
    local k = R(100)
    if k <= 6 then return nil end
    if k <= 12 then return gen.garbage(extras()) end
    local t = {}
    for _, f in ipairs(comp.fields) do
        if chance(for_set and 0.4 or 0.6) then t[f.name] = valid_field_value(f) end
    end
    if k <= 30 then
        local r = R(4)
        if r == 1 then
            t[pick({"nope", "X", "hp ", "", "entity", "matrix"})] = 1
        elseif r == 2 then
            t[R(1, 3)] = 1
        else
            local f = pick(comp.fields)
            t[f.name] = invalid_field_value(f)
        end
    end
    -- a live entity in entity fields now and then, so Parent links form trees (and cycles)
    if comp.name == "Parent" and #m.alive_list > 0 and chance(0.7) then
        t.entity = m.alive_list[R(#m.alive_list)]
    end
    if comp.name == "Hp" and #m.alive_list > 0 and chance(0.5) then
        t.target = m.alive_list[R(#m.alive_list)]
    end
    return t
end

local function access_ok(m, comp, write)
    local s = m.cur_sys
    if not s or s.exclusive then return true end
    if write then return s.writes_set[comp.name] == true end
    return s.reads_set[comp.name] == true or s.writes_set[comp.name] == true
end

-- Calls a World method with the world (or, rarely, something else) as self.
local function wcall(m, method, ...)
    local f = S.WM[method]
    S.label = m.label
    local r = call("world:" .. method, f, m.world, ...)
    S.label = nil
    return r
end


W.BASE_COMPONENTS, W.TRANSFORM, W.EVENTS = BASE_COMPONENTS, TRANSFORM, EVENTS
W.method_tables, W.new_world, W.extras, W.other_world = method_tables, new_world, extras, other_world
W.pick_entity, W.user_comp_names, W.pick_comp, W.random_float = pick_entity, user_comp_names, pick_comp, random_float
W.valid_element, W.valid_field_value, W.invalid_field_value = valid_element, valid_field_value, invalid_field_value
W.pick_fields, W.access_ok, W.wcall = pick_fields, access_ok, wcall
return W
