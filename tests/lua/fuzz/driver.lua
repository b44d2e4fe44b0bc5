-- fuzz/driver.lua: drives random, often malformed calls through the whole kiln Lua API and
-- checks after each error (and regularly) that every world still agrees with its model.
local kiln = require "kiln"
local gen = require "fuzz.gen"
local M = require "fuzz.model"

local R = math.random
local chance, pick = gen.chance, gen.pick

local D = {}

-- Patterns that crash the process or break an invariant today (see the report in
-- fuzz_spec.lua). The fuzzer steers around them unless KILN_FUZZ_UNSAFE=1 asks it not to,
-- which is how the bugs were found: run that way in a child process, it crashes.
local UNSAFE = os.getenv("KILN_FUZZ_UNSAFE") == "1"

local KNOWN_FLOAT_FIELDS = {x = true, y = true}

---------------------------------------------------------------------------------------------
-- Run state.
---------------------------------------------------------------------------------------------

local S -- the current run: stats, worlds, failures

local function fail(fmt, ...)
    local msg = string.format(fmt, ...)
    S.failure_count = S.failure_count + 1
    if #S.failures < 30 then
        S.failures[#S.failures + 1] = string.format("[call %d, op %s] %s", S.calls, S.op or "?", msg)
    end
end

local function note_message(method, msg)
    if type(msg) ~= "string" then return end
    if msg:find(method, 1, true) then return end
    if msg:find("closed world", 1, true) or msg:find("fuzz-raise", 1, true) then return end
    local key = method .. ": " .. msg:gsub("[%d]+", "N"):sub(1, 90)
    if not S.unnamed[key] then
        S.unnamed[key] = true
        S.unnamed_list[#S.unnamed_list + 1] = key
    end
end

-- Calls f(...) under pcall, counting it; returns the packed results.
local TRACE = os.getenv("KILN_FUZZ_TRACE")
local PARANOID = os.getenv("KILN_FUZZ_PARANOID")

local function call(method, f, ...)
    S.calls = S.calls + 1
    if TRACE then
        local parts = {}
        for i = 1, select("#", ...) do parts[i] = M.describe((select(i, ...))) end
        io.stderr:write(string.format("%d %s %s(%s)\n", S.calls, S.op or "?", method, table.concat(parts, ", ")))
    end
    S.by_method[method] = (S.by_method[method] or 0) + 1
    local r = table.pack(pcall(f, ...))
    if not r[1] then
        S.errors = S.errors + 1
        if type(r[2]) ~= "string" then
            fail("%s raised a %s instead of a message", method, type(r[2]))
        else
            note_message(method, r[2])
        end
    end
    return r
end

-- Compares the outcome with the prediction (nil: either is fine).
local function expect(method, want, r, what)
    if want == nil or want == r[1] then return true end
    if want then
        fail("%s should have succeeded (%s) but raised: %s", method, what or "", tostring(r[2]))
    else
        fail("%s should have raised (%s) but succeeded", method, what or "")
    end
    return false
end

-- Checker calls go through here: they must never raise.
local function ccall(what, f, ...)
    S.check_calls = S.check_calls + 1
    local r = table.pack(pcall(f, ...))
    if not r[1] then
        fail("checker: %s raised: %s", what, tostring(r[2]))
        return nil
    end
    return table.unpack(r, 2, r.n)
end

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
    local mt = getmetatable(w)
    return mt.__index, getmetatable(q).__index, getmetatable(c).__index, mt, getmetatable(q), getmetatable(c), q
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
    local index, generation = e & 0xffffffff, e >> 32
    return ((generation + R(1, 3)) << 32) | index
end

-- An entity argument: usually one that exists, often one that does not.
local function pick_entity(m, for_commands)
    local k = R(100)
    local n = #m.alive_list
    if k <= 55 and n > 0 then return m.alive_list[R(n)] end
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
    local edge = pick({0, -1, 1, 2 ^ 53, 2 ^ 53 + 0.0, math.maxinteger, math.mininteger, 4294967296,
                       4294967295, 1.5, -0.0, 1 / 0, 0 / 0, "7", "x", nil, true, {}, R(1, 100),
                       (R(1, 5) << 32) | R(0, 60)})
    if for_commands and not UNSAFE and edge == math.mininteger then edge = -1 end
    if chance(0.1) then return gen.garbage(extras()) end
    return edge
end

local function user_comp_names(m)
    local list = {}
    for _, name in ipairs(m.comp_names) do
        if not m.comps[name].internal then list[#list + 1] = name end
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
        return pick({t = 0, f.type.hi + 1 <= math.maxinteger and f.type.hi + 1 or 1.5, f.type.lo - 1,
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
local function pick_fields(comp, m, for_set)
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

---------------------------------------------------------------------------------------------
-- The checker.
---------------------------------------------------------------------------------------------

-- The checker samples with its own generator, so checking more or less often never changes
-- the sequence of calls a seed makes.
local crng = 0x2545F491
local function CR(n)
    crng = (crng * 1103515245 + 12345) & 0x7fffffff
    return crng % n + 1
end

-- Verifies one entity against the model (alive, has, get, change ticks).
local function check_entity(m, e, why)
    local W = m.world
    if math.type(e) ~= "integer" then return end
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
            elseif rec then
                -- get and changed_tick raise for dead entities; for live ones they must agree with has
                local v = ccall("get", W.get, W, e, name)
                local expected = want
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

local function sample_check(m, involved, why)
    S.quick_checks = S.quick_checks + 1
    local W = m.world
    local n = ccall("count", W.count, W)
    if n ~= m:count() then fail("%s: %s: count() = %s, model has %d", why, m.label, tostring(n), m:count()) end
    local t = ccall("tick", W.tick, W)
    if t ~= m.tick then fail("%s: %s: tick() = %s, model has %d", why, m.label, tostring(t), m.tick) end
    for _, e in ipairs(involved or {}) do check_entity(m, e, why) end
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
                for e in q:each() do
                    if found[e] then fail("%s: query{%s} visits %s twice", why, name, e) end
                    found[e] = true
                    k = k + 1
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
        for _, v in ipairs(ev.prev) do want[#want + 1] = v end
        for _, v in ipairs(ev.cur) do want[#want + 1] = v end
        if not same_list(got, want) then
            fail("%s: %s: events(%s) = %d events %s, model has %d %s", why, m.label, name, #got,
                 M.describe(got[1]), #want, M.describe(want[1]))
        end
    end
    -- resources
    for name, v in pairs(m.comp_resources) do
        local got = ccall("resource", W.resource, W, name)
        if not M.same(got, v) then fail("%s: resource(%s) = %s, model has %s", why, name, M.describe(got), M.describe(v)) end
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
    if m.cur_sys and not m.cur_sys.exclusive then return end -- reads are access-checked there
    if S.pending_error_checks % 16 == 0 and m.defer_depth == 0 and not m.cur_sys then
        full_check(m, why)
    else
        sample_check(m, involved, why)
    end
    S.pending_error_checks = S.pending_error_checks + 1
end

---------------------------------------------------------------------------------------------
-- Operations. Each picks arguments, predicts the outcome from the model, calls, compares,
-- and updates the model only when the call succeeded.
---------------------------------------------------------------------------------------------

local ops = {}
local weights_top, weights_nested = {}, {}

local function access_ok(m, comp, write)
    local s = m.cur_sys
    if not s or s.exclusive then return true end
    if write then return s.writes_set[comp.name] == true end
    return s.reads_set[comp.name] == true or s.writes_set[comp.name] == true
end

local function W_(m) return m.world end

-- Calls a World method with the world (or, rarely, something else) as self.
local function wcall(m, method, ...)
    local f = S.WM[method]
    return call("world:" .. method, f, m.world, ...)
end

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
    local ok, comps = true, {}
    if init ~= nil and type(init) ~= "table" then ok = false end
    local ids, n = {}, 0
    if ok and init then
        for key in next, init do
            n = n + 1
            local comp = m:resolve(key)
            if not comp or n > 64 then
                ok = false
                break
            end
            if not access_ok(m, comp, true) then ok = false end
            if ids[comp.id] then ok = false end
            ids[comp.id] = true
            local vok, v = M.build(comp, rawget(init, comp.name))
            if not vok then ok = false end
            comps[comp.name] = v
        end
    end
    local r = wcall(m, "spawn", init)
    expect("world:spawn", ok, r, "init " .. M.describe(init))
    if r[1] and ok then
        local e = r[2]
        if math.type(e) ~= "integer" or e <= 0 then return fail("spawn returned %s", tostring(e)) end
        if m:deferred() then
            if m.alive[e] or m.reserved[e] then return fail("deferred spawn returned a used handle %s", e) end
            m.reserved[e] = true
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
    local i = type(e) == "number" and math.tointeger(e)
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
    if not ok then return false end
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
    local i = type(e) == "number" and math.tointeger(e) or nil
    local ok = i ~= nil and comp and access_ok(m, comp, false)
    local r = wcall(m, "has", e, c)
    expect("world:has", ok, r, tostring(e) .. " " .. tostring(c))
    if r[1] and ok then
        local want = i > 0 and m.alive[i] ~= nil and m.alive[i].comps[comp.name] ~= nil
        if r[2] ~= want then fail("has(%s, %s) = %s, model says %s", tostring(e), comp.name, tostring(r[2]), tostring(want)) end
    end
end

function ops.get(m)
    local e, c = pick_entity(m), pick_comp(m)
    local comp = m:resolve(c)
    local ei = m:entity_arg(e)
    local ok = ei ~= nil and comp and access_ok(m, comp, false) and m.alive[ei] ~= nil
    local r = wcall(m, "get", e, c)
    expect("world:get", ok, r, tostring(e) .. " " .. tostring(c))
    if r[1] and ok then
        local rec = m.alive[ei]
        local want = rec and rec.comps[comp.name]
        if want == M.NIL then want = nil end
        if not (rec and rec.unknown and rec.unknown[comp.name]) and not M.same(r[2], want) then
            fail("get(%s, %s) = %s, model has %s", ei, comp.name, M.describe(r[2]), M.describe(want))
        end
        -- a copy: changing it changes nothing
        if type(r[2]) == "table" and comp.kind == "data" then
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
    if expect("world:advance_tick", true, r) then
        m.tick = m.tick + 1
        if r[2] ~= m.tick then fail("advance_tick() = %s, model %d", tostring(r[2]), m.tick) end
    end
end

function ops.changed_tick(m)
    local e, c = pick_entity(m), pick_comp(m)
    local comp = m:resolve(c)
    local ei = m:entity_arg(e)
    local ok = ei ~= nil and comp ~= nil and m.alive[ei] ~= nil
    local r = wcall(m, "changed_tick", e, c)
    expect("world:changed_tick", ok, r, tostring(e) .. " " .. tostring(c))
    if r[1] and ok and comp then
        local rec = m.alive[ei]
        local want = 0
        if rec and rec.comps[comp.name] ~= nil and comp.kind ~= "tag" then want = rec.ticks[comp.name] end
        if r[2] ~= want then fail("changed_tick(%s, %s) = %s, model %s", ei, comp.name, tostring(r[2]), tostring(want)) end
    end
end

-- Queries ----------------------------------------------------------------------------------

local MAX_ITER_TERMS = UNSAFE and 32 or 12

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
    local n = rawlen(desc)
    if n == 0 or n > 16 then return nil end
    local used = {}
    for i = 1, n do
        local comp = m:resolve(rawget(desc, i))
        if not comp then return nil end
        with[i] = comp
    end
    for _, key in ipairs({"optional", "without"}) do
        local list = desc[key]
        local out = key == "optional" and optional or without
        if list ~= nil then
            if type(list) ~= "table" then return nil end
            if rawlen(list) > 16 then return nil end
            for i = 1, rawlen(list) do
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
        -- every query stays referenced: a query collected while another one iterates aborts
        -- the process today (bug 1 of the report)
        m.queries[#m.queries + 1] = entry
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
        elseif not M.same(v, want[f.name]) then
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

-- Predicts the write-back of one row's writable views (query.c write_back): each field is
-- converted over the value the view was filled with (snap); fields that differ from it are
-- stored over the row's current value, in term order; a bad value ends the write-back
-- (terms before it are written, its own term is not) and raises.
local function predict_write_back(m, e, terms, views, present, writable, snaps)
    local out = {e = e, terms = {}, fails = false}
    for t, comp in ipairs(terms) do
        if comp.kind == "data" and writable[t] and present[t] and type(views[t]) == "table" then
            local snap = snaps[t]
            local changed = {}
            for _, f in ipairs(comp.fields) do
                local fok, x = M.convert_field(f, rawget(views[t], f.name), snap[f.name])
                if not fok then
                    out.fails = true
                    -- fields changed before the bad one: the binding stores them anyway (bug 9)
                    out.partial = next(changed) and {view = views[t], changed = changed, snap = snap} or nil
                    return out
                end
                if M.field_bytes(f, x) ~= M.field_bytes(f, snap[f.name]) then changed[f.name] = x end
            end
            if next(changed) then out.terms[#out.terms + 1] = {comp = comp, changed = changed} end
        end
    end
    return out
end

-- Known bugs the fuzzer steers around are counted here, so the report can say how often.
local function known(id)
    S.known[id] = (S.known[id] or 0) + 1
end

-- Steers around bug 9: puts the fields changed before a bad one back to what the view was
-- filled with, so the failing write-back has nothing to half-do. The bad value still raises.
local function predict_write_back_safe(m, e, terms, views, present, writable, snaps)
    local wb = predict_write_back(m, e, terms, views, present, writable, snaps)
    if wb.partial and not UNSAFE then
        known("view write-back stores the fields before a bad one")
        for name in pairs(wb.partial.changed) do rawset(wb.partial.view, name, M.copy(wb.partial.snap[name])) end
        wb = predict_write_back(m, e, terms, views, present, writable, snaps)
    end
    return wb
end

local function commit_write_back(m, wb)
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

local run_nested -- forward: a few random operations inside a loop or a system

local function loop_body(m, entry, e, views, writable, where, state)
    local present, snaps = {}, {}
    for t, comp in ipairs(entry.terms) do
        present[t] = m.alive[e] ~= nil and m.alive[e].comps[comp.name] ~= nil
        snaps[t] = present[t] and comp.kind == "data" and M.copy(m.alive[e].comps[comp.name]) or nil
        check_view(m, comp, present[t], views[t], e, where)
    end
    if not matches(m, entry, e) then fail("%s: visits %s which does not match (model)", where, tostring(e)) end
    if state.seen[e] then fail("%s: visits %s twice", where, tostring(e)) end
    state.seen[e] = true
    for t, comp in ipairs(entry.terms) do
        if chance(0.5) then scribble_view(m, comp, views[t], writable[t]) end
    end
    if chance(0.3) and S.depth < 3 then run_nested(m, R(1, 3)) end
    return present, snaps
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
    local body = function()
        local f, s, c, guard = S.QM.each(q)
        began = true
        entry.active = true
        m.iterating = m.iterating + 1
        m:enter_loop()
        -- the generic for closes the guard on break and error
        for e, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12 in f, s, c, guard do
            commit_write_back(m, pending)
            pending = nil
            S.calls = S.calls + 1
            local views = {v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12}
            local present, snaps = loop_body(m, entry, e, views, writable, "each", state)
            local wb = predict_write_back_safe(m, e, entry.terms, views, present, writable, snaps)
            if mode <= 8 and chance(0.3) then
                pending = wb -- break writes the row back
                state.broke = true
                break
            end
            if mode > 8 and mode <= 14 and chance(0.3) then
                state.raised = true -- an error does not
                error("fuzz-raise in each", 0)
            end
            pending = wb
        end
    end
    S.calls = S.calls + 1
    S.by_method["q:each"] = (S.by_method["q:each"] or 0) + 1
    local ok, err = pcall(body)
    if not ok then S.errors = S.errors + 1 end
    S.depth = depth
    if began then
        entry.active = false
        m.iterating = m.iterating - 1
        local bad = pending and pending.fails
        if ok then
            commit_write_back(m, pending)
            if bad then fail("each: a bad view value should have raised") end
        elseif state.raised then
            -- the row the body raised on is not written back
        elseif bad then
            commit_write_back(m, pending) -- the terms before the bad one were written
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

-- The write-back of one bulk chunk, as bulk_body does it: term, field, row order; the first
-- bad element raises, after the elements before it were written.
local function bulk_write_back(m, entry, writable, chunk)
    for t, comp in ipairs(entry.terms) do
        local tt = chunk.args[t]
        if comp.kind == "data" and writable[t] and type(tt) == "table" then
            for _, f in ipairs(comp.fields) do
                local arr = tt[f.name]
                for ri = 1, chunk.n do
                    local e = chunk.rows[ri]
                    if not m.alive[e] then
                        fail("bulk write-back: %s is not alive in the model", tostring(e))
                        return true
                    end
                    local old = m.alive[e].comps[comp.name]
                    local v = arr[ri]
                    local nv = M.copy(old)
                    if f.type.kind == "f32" and f.count == 1 and type(v) == "number" then
                        nv[f.name] = M.f32(v) -- no range check on this fast path
                    else
                        local fok, x = M.convert_field(f, v, old[f.name])
                        if not fok then return false end
                        nv[f.name] = x
                    end
                    local changed = M.value_bytes(comp, old) ~= M.value_bytes(comp, nv)
                    m:set_value(e, comp.name, nv, changed)
                end
            end
        end
    end
    return true
end

-- q:bulk(fn, ...) with array checks and writes.
function ops.bulk(m)
    local list = iterable_queries(m)
    if #list == 0 then return ops.query(m) end
    local entry = pick(list)
    if #entry.terms > (UNSAFE and 32 or 8) then return end
    local lua_term, access = false, true
    local writable = {}
    for t, comp in ipairs(entry.terms) do
        if comp.kind == "lua" then lua_term = true end
        if comp.kind == "data" and comp.layout and comp.layout.size > 256 then lua_term = true end -- too large
        if not access_ok(m, comp, false) then access = false end
        writable[t] = m.cur_sys == nil or m.cur_sys.exclusive or m.cur_sys.writes_set[comp.name] == true
    end
    local nextra = UNSAFE and chance(0.01) and 600000 or R(0, 3)
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
        local args = table.pack(...)
        if math.type(n) ~= "integer" or type(ents) ~= "table" then
            fail("bulk: fn got n=%s ents=%s", tostring(n), type(ents))
            return
        end
        local chunk = {n = n, rows = {}, args = args}
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
                if comp.kind == "data" then
                    if has and type(tt) == "table" then
                        for _, f in ipairs(comp.fields) do
                            local arr = tt[f.name]
                            local want = m.alive[e].comps[comp.name][f.name]
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
        if chance(0.2) and S.depth < 3 then run_nested(m, R(1, 2)) end
        if mode <= 10 and chance(0.4) then
            state.raised = true
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
    local r = call("q:bulk", S.QM.bulk, entry.q, passed, table.unpack(extra_args, 1, nextra))
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
    local cr = call("guard __close", getmetatable(guard).__close, guard)
    expect("guard __close", true, cr)
    call("guard __close", getmetatable(guard).__close, guard) -- twice is harmless
    call("guard __close", getmetatable(guard).__close, gen.garbage())
    entry.active = false
    m.iterating = m.iterating - 1
    m:leave_loop()
end

-- Hierarchy ---------------------------------------------------------------------------------

function ops.set_parent(m)
    local child = pick_entity(m)
    local parent = chance(0.15) and nil or pick_entity(m)
    if chance(0.05) then parent = 0 end
    local ci = m:entity_arg(child)
    local pi = parent == nil and 0 or m:entity_arg(parent)
    local comp = m.comps.Parent
    local ok = ci ~= nil and pi ~= nil and access_ok(m, comp, true) and m.alive[ci] ~= nil
    if ok and pi ~= 0 then ok = m.alive[pi] ~= nil and m:parent_ok(ci, pi) end
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
    local ok = ei ~= nil and m.alive[ei] ~= nil
    local doomed = ok and m:descendants(ei)
    if ok and not doomed then
        -- a Parent cycle below e: the call despawns part of the tree and then raises (bug)
        if not UNSAFE then return end
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
    local nm = (type(name) == "string" or type(name) == "number") and M.cname(tostring(name))
    local sc = schema == nil and "" or ((type(schema) == "string" or type(schema) == "number") and M.cname(tostring(schema)))
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
        for _, x in ipairs(ev.prev) do want[#want + 1] = x end
        for _, x in ipairs(ev.cur) do want[#want + 1] = x end
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
    local nm = (type(name) == "string" or type(name) == "number") and M.cname(tostring(name))
    local comp = nm and m.comps[nm]
    if comp and (comp.internal or comp.kind == "lua") then comp = nil end
    if setting then
        if comp and comp.kind == "data" and chance(0.85) then value = pick_fields(comp, m) else value = gen.garbage(extras()) end
        if chance(0.1) then value = nil end
    end
    local ok, v = nm ~= nil and nm ~= false, nil
    if ok and comp then
        ok = access_ok(m, comp, setting)
        if ok and setting and value ~= nil and comp.kind == "data" then
            ok, v = M.read_fields(comp, value, m.comp_resources[nm] or M.zero_value(comp))
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
            elseif not M.same(r[2], m.comp_resources[nm]) then
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
    local nm = (type(name) == "string" or type(name) == "number") and M.cname(tostring(name))
    local sc = schema == nil and "" or ((type(schema) == "string" or type(schema) == "number") and M.cname(tostring(schema)))
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

-- Systems ------------------------------------------------------------------------------------

local function list_set(list)
    local set = {}
    for _, c in ipairs(list) do set[c.name] = true end
    return set
end

local function system_enter(m, s)
    -- buffers of finished stages land before a later stage starts
    if s.stage then
        local due = {}
        for _, other in ipairs(m.systems) do
            if other.pending_queue and other.stage and other.stage < s.stage then due[#due + 1] = other end
        end
        table.sort(due, function(a, b)
            if a.stage ~= b.stage then return a.stage < b.stage end
            return a.index < b.index
        end)
        for _, other in ipairs(due) do
            local q = other.pending_queue
            other.pending_queue = nil
            m:apply_queue(q)
        end
    end
    s.queue = {}
    s.runs = s.runs + 1
    s.raised_in_body = false
    s.pending = nil
    s.state = {seen = {}}
    m.cur_sys = s
    if s.exclusive then m.defer_depth = m.defer_depth - 1 end
    -- an each-system's own iteration defers the world too (which matters when exclusive)
    if s.kind == "each" then
        m:enter_loop()
        m.iterating = m.iterating + 1
    end
end

local function system_leave(m, s, ok)
    if s.kind == "each" then
        m.iterating = m.iterating - 1
        m:leave_loop()
    end
    if s.exclusive then m.defer_depth = m.defer_depth + 1 end
    m.cur_sys = nil
    if ok then
        s.failures = 0
        s.pending_queue = s.queue
    else
        s.failures = s.failures + 1
        m:drop_queue(s.queue)
        local disable = m.max_failures > 0 and s.failures >= m.max_failures
        if TRACE then io.stderr:write(string.format("  %s fails (%d in a row, max %d)\n", s.name, s.failures, m.max_failures)) end
        if disable then s.enabled = false end
        m.unreported[#m.unreported + 1] = {system = s.name, disabled = disable}
    end
    s.queue = nil
end

-- An each-system learns that its run ended only when the next system starts (or the frame
-- ends): its last row's write-back has happened by then.
local function leave_current(m)
    local s = m.cur_sys
    if s and s.kind == "each" then
        local wb = s.pending
        s.pending = nil
        commit_write_back(m, wb) -- all of it, or the terms before a bad one
        system_leave(m, s, not s.raised_in_body and not (wb and wb.fails))
    end
end

-- Systems of this frame that come before s and never showed up ran with no rows.
local function begin_system(m, s)
    leave_current(m)
    while m.frame_pos < #m.frame_order do
        local t = m.frame_order[m.frame_pos + 1]
        m.frame_pos = m.frame_pos + 1
        if t == s then break end
        if t.enabled then
            system_enter(m, t)
            system_leave(m, t, true)
        end
    end
    system_enter(m, s)
end

local function end_frame(m)
    leave_current(m)
    while m.frame_pos < #m.frame_order do
        local t = m.frame_order[m.frame_pos + 1]
        m.frame_pos = m.frame_pos + 1
        if t.enabled then
            system_enter(m, t)
            system_leave(m, t, true)
        end
    end
    local pending = {}
    for _, s in ipairs(m.systems) do
        if s.pending_queue then pending[#pending + 1] = s end
    end
    table.sort(pending, function(a, b)
        if a.stage ~= b.stage then return (a.stage or 0) < (b.stage or 0) end
        return a.index < b.index
    end)
    for _, s in ipairs(pending) do
        local q = s.pending_queue
        s.pending_queue = nil
        m:apply_queue(q)
    end
end

local function make_run(m, s)
    return function(world, dt)
        if not rawequal(world, m.world) then fail("system %s got world %s", s.name, tostring(world)) end
        if dt ~= m.frame_dt then fail("system %s got dt %s, expected %s", s.name, tostring(dt), tostring(m.frame_dt)) end
        begin_system(m, s)
        local depth = S.depth
        local ok, err = pcall(run_nested, m, R(0, s.nops))
        S.depth = depth
        if not ok then fail("harness error inside system %s: %s", s.name, tostring(err)) end
        local raise = chance(s.raise_p)
        system_leave(m, s, not raise)
        if raise then
            if chance(0.2) then error({"a table error"}) end
            error("fuzz-raise in system " .. s.name, 0)
        end
    end
end

local function make_each(m, s)
    return function(e, ...)
        local args = table.pack(...)
        local dt = args[#s.entry.terms + 1]
        if dt ~= m.frame_dt then fail("each system %s got dt %s", s.name, tostring(dt)) end
        if m.cur_sys ~= s then begin_system(m, s) end
        commit_write_back(m, s.pending)
        s.pending = nil
        local views = {}
        for t = 1, #s.entry.terms do views[t] = args[t] end
        local writable = {}
        for t, comp in ipairs(s.entry.terms) do writable[t] = s.exclusive or s.writes_set[comp.name] == true end
        local depth = S.depth
        S.depth = S.depth + 1
        local present, snaps = loop_body(m, s.entry, e, views, writable, "each system " .. s.name, s.state)
        S.depth = depth
        if chance(s.raise_p / 4) then
            s.raised_in_body = true
            error("fuzz-raise in each system " .. s.name, 0)
        end
        s.pending = predict_write_back_safe(m, e, s.entry.terms, views, present, writable, snaps)
    end
end

function ops.system(m)
    if #m.systems >= 8 then return end
    local k = R(100)
    local desc = {}
    local name = "sys" .. R(1, 12)
    if k <= 8 then name = pick({"", string.rep("s", 64), 5, {}, nil}) end
    if m.system_by_name[name] and chance(0.7) then name = name .. "b" end
    desc.name = name
    local names = user_comp_names(m)
    local reads, writes = {}, {}
    for _ = 1, R(0, 3) do reads[#reads + 1] = chance(0.95) and pick(names) or pick_comp(m) end
    for _ = 1, R(0, 3) do writes[#writes + 1] = chance(0.95) and pick(names) or pick_comp(m) end
    desc.reads, desc.writes = reads, writes
    if chance(0.03) then desc.reads = "Pos" end
    desc.exclusive = chance(0.15)
    if #m.systems > 0 and chance(0.2) then desc.after = {m.systems[R(#m.systems)].name} end
    if chance(0.005) then desc.before = {"no_such_system"} end
    if chance(0.02) then desc.after = {5} end
    local s = {name = name, exclusive = desc.exclusive == true, nops = R(0, 5),
               raise_p = pick({0, 0, 0.1, 0.5, 1}), enabled = true, runs = 0, failures = 0,
               index = #m.systems + 1}
    local each = chance(0.4)
    local entry
    if each then
        local qdesc = random_query_desc(m)
        if type(qdesc) == "table" then
            while rawlen(qdesc) > 10 do qdesc[rawlen(qdesc)] = nil end
            qdesc.optional = nil
        end
        desc.query = qdesc
        local want = predict_query(m, qdesc)
        if type(want) == "table" then
            entry = {with = want.with, optional = {}, without = want.without, terms = {}}
            for _, c in ipairs(want.with) do entry.terms[#entry.terms + 1] = c end
        elseif want == "either" then
            entry = "either"
        end
        desc.each = make_each(m, s)
        if chance(0.03) then desc.run = function() end end
    else
        desc.run = make_run(m, s)
        if chance(0.03) then desc.run = "not a function" end
        if chance(0.02) then desc.query = {"Pos"} end
    end
    -- predict, in the order world:system checks
    local ok = type(name) == "string" and #name >= 1 and #name <= 63 and not m.system_by_name[name]
    local rc, wc = {}, {}
    for _, pair in ipairs({{desc.reads, rc}, {desc.writes, wc}}) do
        local list, out = pair[1], pair[2]
        if type(list) ~= "table" then
            ok = false
        else
            for _, c in ipairs(list) do
                local comp = m:resolve(c)
                if not comp then ok = false else out[#out + 1] = comp end
            end
        end
    end
    if desc.after and type(desc.after[1]) ~= "string" then ok = false end
    if type(desc.run) == "string" then ok = false end
    if desc.run and desc.each then ok = false end
    if desc.run and desc.query then ok = false end
    if each and entry == nil then ok = false end
    if entry == "either" and ok then ok = nil end
    local r = wcall(m, "system", desc)
    expect("world:system", ok, r, M.describe(desc))
    if r[1] then
        s.reads_set, s.writes_set = list_set(rc), list_set(wc)
        if type(entry) == "table" then
            for _, c in ipairs(entry.terms) do
                if not s.writes_set[c.name] then s.reads_set[c.name] = true end
            end
            s.entry = entry
        elseif each then
            m.uncertain_systems = true
        end
        s.kind = each and "each" or "run"
        m.systems[#m.systems + 1] = s
        m.system_by_name[name] = s
        if desc.before then m.build = nil end
    else
        after_error(m, {}, "system")
    end
end

function ops.progress(m)
    if m.iterating > 0 and not UNSAFE then return end -- aborts the process today (bug 2)
    if m.uncertain_systems then return end
    local dt = pick({0.016, 0, 1, -1, 1e300, "0.5", nil, 1 / 0})
    if chance(0.05) then dt = gen.garbage() end
    local dtn = dt == nil and 0.0 or ((type(dt) == "number" or type(dt) == "string") and tonumber(dt)) or nil
    local inside = m.cur_sys ~= nil or m.in_progress
    if dtn and not inside and m.build ~= false then
        -- stages, from the schedule itself (this also builds it)
        local list = ccall("systems", S.WM.systems, m.world) or {}
        local built = true
        for _, info in ipairs(list) do
            local s = m.system_by_name[info.name]
            if s then s.stage = info.stage end
            if info.stage < 0 then built = false end
        end
        m.build = built
    end
    local ok = dtn ~= nil and not inside and m.build ~= false
    if ok then
        m.tick = m.tick + 1
        for _, name in ipairs(m.event_names) do
            local ev = m.events[name]
            ev.prev, ev.cur = ev.cur, {}
        end
        m.frame_dt = dtn + 0.0
        m.in_progress = true
        m.defer_depth = m.defer_depth + 1
        m.frame_order = {}
        for _, s in ipairs(m.systems) do m.frame_order[#m.frame_order + 1] = s end
        table.sort(m.frame_order, function(a, b)
            if a.stage ~= b.stage then return a.stage < b.stage end
            return a.index < b.index
        end)
        m.frame_pos = 0
    end
    local depth = S.depth
    S.depth = S.depth + 1
    local r = wcall(m, "progress", dt)
    S.depth = depth
    if ok then
        end_frame(m)
        m.in_progress = false
        m.defer_depth = m.defer_depth - 1
        if m.defer_depth == 0 then
            local q = m.world_queue
            m.world_queue = {}
            m:apply_queue(q)
        end
    end
    expect("world:progress", ok, r, "dt " .. tostring(dt))
    if TRACE and ok then
        local got, want = {}, {}
        for _, f in ipairs(type(r[3]) == "table" and r[3] or {}) do got[#got + 1] = f.system .. (f.disabled and "!" or "") end
        for _, f in ipairs(m.unreported) do want[#want + 1] = f.system .. (f.disabled and "!" or "") end
        io.stderr:write(string.format("  progress %s: failures %s, model %s\n", m.label, table.concat(got, " "), table.concat(want, " ")))
    end
    if r[1] and ok then
        local failures = m.unreported
        m.unreported = {}
        if #failures == 0 then
            if r[2] ~= true then fail("progress returned %s with no failures", tostring(r[2])) end
        elseif r[2] ~= false or type(r[3]) ~= "table" then
            fail("progress returned %s, %s with %d failures", tostring(r[2]), tostring(r[3]), #failures)
        else
            local got = r[3]
            if #got ~= #failures then fail("progress reported %d failures, model %d", #got, #failures) end
            for i = 1, math.min(#got, #failures) do
                local g, w = got[i], failures[i]
                if g.system ~= w.system or g.disabled ~= w.disabled or type(g.message) ~= "string"
                    or type(g.traceback) ~= "string" then
                    fail("failure %d = {%s, %s, disabled=%s}, model {%s, disabled=%s}", i, tostring(g.system),
                         tostring(g.message), tostring(g.disabled), w.system, tostring(w.disabled))
                elseif not g.message:find("fuzz-raise", 1, true) and not g.message:find("error object is a table", 1, true)
                    and not g.message:find("each:", 1, true) then
                    fail("system %s failed with an unexpected message: %s", g.system, g.message)
                end
            end
        end
    end
    if not r[1] then after_error(m, {}, "progress") end
end

function ops.systems(m)
    local r = wcall(m, "systems")
    expect("world:systems", not m.cur_sys or nil, r)
end

function ops.enable(m)
    local name = #m.systems > 0 and chance(0.85) and m.systems[R(#m.systems)].name or pick({"nope", 3, {}, nil})
    local with_flag = chance(0.8)
    local on = pick({true, false, nil, 0, "off"})
    -- enabling a disabled system from inside a system of the same stage runs it with a
    -- context that was never prepared: a crash today (bug 5)
    if m.in_progress and not UNSAFE then with_flag, on = true, false end
    local s = type(name) == "string" and m.system_by_name[M.cname(name)]
    local r = with_flag and wcall(m, "enable", name, on) or wcall(m, "enable", name)
    local ok = s and true or false
    if type(name) == "number" then ok = m.system_by_name[tostring(name)] ~= nil end
    expect("world:enable", ok, r, tostring(name))
    if r[1] and s then
        if with_flag then s.enabled = (on ~= nil and on ~= false) else s.enabled = true end
        -- the binding resets the failure count when it enables (the docs say it does not)
        if s.enabled then s.failures = 0 end
    end
end

-- Commands -----------------------------------------------------------------------------------

function ops.failures(m)
    local r = wcall(m, "failures")
    if expect("world:failures", true, r) then
        local got, want = r[2], m.unreported
        m.unreported = {}
        if type(got) ~= "table" or #got ~= #want then
            fail("failures() = %s, model %d", M.describe(got), #want)
        else
            for i, w in ipairs(want) do
                if got[i].system ~= w.system or got[i].disabled ~= w.disabled then
                    fail("failures()[%d] = %s, model %s", i, tostring(got[i].system), w.system)
                end
            end
        end
    end
end

function ops.max_failures(m)
    local n = pick({0, 1, 2, 3, -1, 2 ^ 31, 2.0, 1.5, "2", {}, nil})
    local ni = (type(n) == "number" or type(n) == "string") and math.tointeger(n) or nil
    local ok = ni ~= nil and ni >= 0 and ni <= 2147483647
    local r = wcall(m, "max_failures", n)
    expect("world:max_failures", ok, r, tostring(n))
    if r[1] and ok then m.max_failures = ni end
end

-- Placeholders are -(batch * 2^24 + k) for the k-th spawn of a batch (commands.c).
local function placeholder(c, k) return -((c.batch << 24) + k) end
local function spawn_number(p) return (-p) & ((1 << 24) - 1) end
local function batch_of(p) return (-p) >> 24 end

local function new_batch(c)
    c.batch = (c.batch + 1) & ((1 << 28) - 1)
    c.spawns = 0
    c.complete = false
    c.resolved = {}
end

-- check_target: an entity, or a placeholder of the current batch.
local function target_ok(c, v)
    local i = (type(v) == "number" or type(v) == "string") and math.tointeger(v) or nil
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
    if k <= 37 and c.batch > 0 then return -(((c.batch - 1) << 24) + 1) end
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
                local bok, v = M.build(comp, rawget(init, comp.name))
                if not bok then
                    ok = false
                    break
                end
                comps[comp.name] = v
            end
        end
        return ok, function(e)
            if tm:deferred() then
                tm.reserved[e] = true
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
        if not valid then
            expect("commands:apply", false, r, "not an open world")
        elseif expect("commands:apply", true, r) then
            local n = r[2] == nil and r[4] or r[2]
            n = math.tointeger(n) or -1
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
                    if rr[1] and math.type(rr[2]) == "integer" then
                        c.resolved[spawn_number(rec.target)] = rr[2]
                        commit(rr[2])
                    else
                        fail("resolved(%d) = %s after its spawn was applied", rec.target, tostring(rr[2]))
                    end
                else
                    commit()
                end
                applied = i
            end
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
        else p = pick({0, 1, 2.5, "x", math.maxinteger, "-1", -1.0, -(2 ^ 40)}) end
        if UNSAFE and chance(0.2) then p = math.mininteger end
        local pi = (type(p) == "number" or type(p) == "string") and math.tointeger(p) or nil
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
    if t[1] == "q:" and type(self) == "userdata" and getmetatable(self) == S.Qmt and self ~= S.closed_query then self = m.world end
    if t[1] == "commands:" and self == S.commands then self = m.world end
    local allowed = (t[1] == "world:" and method == "close" and self == S.closed_world)
    local args = {}
    for i = 1, R(0, 3) do args[i] = gen.garbage(extras()) end
    local r = call(t[1] .. method, t[2][method], self, table.unpack(args, 1, 3))
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
local MODULE_FUNCS = {"handle", "pretty", "table_text", "systems_text"}

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
        r = call("world:" .. name, S.WM[name], m.world, table.unpack(args, 1, 3))
    elseif k == 2 then
        name = pick(MODULE_FUNCS)
        if not kiln[name] then return end
        r = call("kiln." .. name, kiln[name], table.unpack(args, 1, 3))
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
    local ok = opts == nil or (type(opts) == "table" and (opts.workers == nil or (math.type(opts.workers) == "integer"
        and opts.workers >= 0 and opts.workers <= 64)) and (opts.max_failures == nil or (math.tointeger(opts.max_failures) and math.tointeger(opts.max_failures) >= 0)))
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

---------------------------------------------------------------------------------------------
-- Nested contexts.
---------------------------------------------------------------------------------------------

local NESTED_OPS = {
    spawn = 10, despawn = 5, is_alive = 2, count = 1, add = 10, remove = 6, has = 4, get = 5,
    set = 10, changed_tick = 2, query = 1, each = 1.5, bulk = 1, qcount = 1, set_parent = 2,
    children = 1, despawn_recursive = 1, emit = 2, events = 1, resource = 2, commands = 4,
    systems = 0.3, enable = 0.3, progress = 0.5, confused = 1, other_world = 2, system = 0.2,
    failures = 0.2, max_failures = 0.1, tools = 0.3,
}

run_nested = function(m, n)
    for _ = 1, n do
        local name = gen.weighted(NESTED_OPS)
        if name == "other_world" then
            local o = other_world(m)
            if o ~= m and not o.closed and o.cur_sys == nil then
                local pick_op = gen.pick({"spawn", "add", "set", "get", "despawn", "each", "progress"})
                S.op = "nested " .. pick_op
                ops[pick_op](o)
            end
        else
            S.op = "nested " .. name
            ops[name](m)
        end
    end
end

---------------------------------------------------------------------------------------------
-- The run.
---------------------------------------------------------------------------------------------

local TOP_OPS = {
    spawn = 9, despawn = 4, is_alive = 3, count = 1, entities = 1, add = 10, remove = 6, has = 5,
    get = 6, set = 10, tick = 1, advance_tick = 1, changed_tick = 3, query = 2, each = 4, bulk = 2,
    manual_each = 1, qcount = 1, system = 1.2, progress = 3, systems = 0.5, enable = 0.6,
    set_parent = 3, children = 2, despawn_recursive = 1.5, define_event = 0.5, emit = 2,
    events = 1.5, resource = 3, component = 1, commands = 5, confused = 3, tostrings = 0.3,
    tools = 1, failures = 0.3, max_failures = 0.2, new_world = 0.2,
}

local function closed_world_round(m)
    -- every method of a closed world raises, and so does every method of its queries
    local W = m.world
    local names = {}
    for name in pairs(S.WM) do names[#names + 1] = name end
    table.sort(names)
    for _ = 1, 40 do
        local method = pick(names)
        local args = {}
        for i = 1, R(0, 3) do args[i] = pick({pick_entity(m), pick_comp(m), gen.garbage(extras())}) end
        local r = call("world:" .. method, S.WM[method], W, table.unpack(args, 1, 3))
        if method ~= "close" then
            if r[1] then fail("closed world: %s succeeded", method)
            elseif type(r[2]) == "string" and not r[2]:find("closed world", 1, true) and method ~= "component" then
                -- argument checks may come first for some methods; the world must still raise
            end
        end
    end
    for _, entry in ipairs(m.queries) do
        for _, method in ipairs({"each", "bulk", "count", "terms"}) do
            local r = call("q:" .. method, S.QM[method], entry.q, function() end)
            expect("q:" .. method .. " on a closed world", false, r)
        end
    end
    local r = call("commands:apply", S.CM.apply, S.commands, W)
    expect("commands:apply on a closed world", false, r)
end

-- opts: {seed, calls (at least this many), episode_calls}
function D.run(opts)
    opts = opts or {}
    math.randomseed(opts.seed or 12345)
    crng = 0x2545F491
    S = {calls = 0, errors = 0, check_calls = 0, failures = {}, failure_count = 0, by_method = {},
         unnamed = {}, unnamed_list = {}, quick_checks = 0, full_checks = 0, pending_error_checks = 0,
         depth = 0, extra_comps = 0, tools_used = {}, episodes = 0, known = {}}
    local t0 = os.clock()
    -- a closed world and one of its queries, for misuse
    local cw = kiln.world()
    cw:component("Pos", "float x, y;")
    S.closed_query = cw:query{"Pos"}
    cw:close()
    S.closed_world = cw
    S.WM, S.QM, S.CM, S.Wmt, S.Qmt, S.Cmt = method_tables(kiln.world())
    S.known_world_methods = {}
    for _, name in ipairs({"close", "component", "spawn", "despawn", "is_alive", "count", "entities", "add",
                           "remove", "has", "get", "set", "tick", "advance_tick", "changed_tick", "query",
                           "system", "progress", "systems", "enable", "set_parent", "children",
                           "despawn_recursive", "event", "emit", "events", "resource", "failures",
                           "max_failures", "components", "component_info", "stats", "inspect", "schema"}) do
        S.known_world_methods[name] = true
    end
    -- methods added after this test was written are reported, not called
    S.unfuzzed = {}
    local known_q = {each = true, bulk = true, count = true, terms = true, format = true}
    local known_c = {spawn = true, add = true, set = true, remove = true, despawn = true, apply = true,
                     clear = true, resolved = true, count = true}
    for _, group in ipairs({{"world:", S.WM, S.known_world_methods}, {"q:", S.QM, known_q}, {"commands:", S.CM, known_c}}) do
        for name in pairs(group[2]) do
            if not group[3][name] then S.unfuzzed[#S.unfuzzed + 1] = group[1] .. name end
        end
    end
    table.sort(S.unfuzzed)
    local target = opts.calls or 100000
    local episode_calls = opts.episode_calls or 4000
    -- a hang shows up as a Lua-side instruction budget running out
    local budget = 0
    debug.sethook(function()
        budget = budget + 1
        if budget > 4000 then
            budget = 0
            fail("an operation ran for more than 4e9 instructions: a hang")
            error("fuzz watchdog", 0)
        end
    end, "", 1000000)
    while S.calls < target do
        S.episodes = S.episodes + 1
        S.extra_comps = 0
        local A = new_world("A", pick({false, {max_failures = 2}, {workers = 1}, {max_failures = 1, workers = 2}}) or nil)
        local B = new_world("B", nil)
        S.worlds = {A, B}
        S.commands = kiln.commands()
        S.cmd_model = {records = {}, spawns = 0, complete = false, resolved = {}, batch = 0}
        local stop = math.min(target, S.calls + episode_calls)
        local ops_done = 0
        while S.calls < stop do
            budget = 0
            local m = chance(0.85) and A or B
            -- keep the population between a handful and a few dozen
            local name = gen.weighted(TOP_OPS)
            if m:count() > 60 and (name == "spawn") then name = "despawn_recursive" end
            if m:count() < 5 and chance(0.5) then name = "spawn" end
            S.op = name
            ops[name](m)
            ops_done = ops_done + 1
            if PARANOID then
                full_check(A, "paranoid after " .. name)
                full_check(B, "paranoid after " .. name)
                if S.failure_count > 0 then
                    S.seconds = os.clock() - t0
                    debug.sethook()
                    return S
                end
            end
            if ops_done % 300 == 0 then
                full_check(A, "periodic")
                full_check(B, "periodic")
            end
        end
        full_check(A, "episode end")
        full_check(B, "episode end")
        -- close A and keep using it; B goes to the garbage collector
        local r = call("world:close", S.WM.close, A.world)
        expect("world:close", true, r)
        A.closed = true
        closed_world_round(A)
        call("world:close", S.WM.close, A.world) -- closing twice is harmless
        if chance(0.5) then
            local r2 = call("world:close", S.WM.close, B.world)
            expect("world:close", true, r2)
        end
        S.worlds = nil
        collectgarbage()
    end
    debug.sethook()
    collectgarbage()
    S.seconds = os.clock() - t0
    return S
end

return D
