-- gen.lua SEED OPS [HARNESS]: writes to stdout a Lua program of OPS random operations on one
-- kiln world, the same text for a seed under Lua 5.4 and LuaJIT (its own PRNG, no math.random).
-- The program prints a transcript line per operation; run.lua runs it under both and diffs.
--
-- What it generates: components of many schema shapes, spawns (full, partial and bad inits,
-- ids as keys, metatables on values, hundreds in one loop), despawn/add/remove/set/get,
-- queries with with/without/optional terms, q:each/q:each_ffi loops and q:bulk/q:bulk_ffi
-- calls that read and write (bad values too), loops left by break, an error or a coroutine,
-- Lua systems with declared access run by world:progress, command buffers with placeholders,
-- events, resources, hierarchy, prefabs, scene export, snapshots, save/load round trips, mods
-- (gen_mods.lua) and q:bulk arrays kept past their call (gen_bulk_kept.lua), every call under
-- pcall; after every operation the harness prints the change ticks (harness.lua, H.ticks). Where docs/lua-api.md (LuaJIT, FFI views) documents that LuaJIT behaves
-- differently, it generates only what both must do alike:
--  * in a loop whose views may be FFI views (every term's fields float, double, bool,
--    integers up to 32 bits, vec2/3/4, quat, or a tag; no optional tag, no C keyword as a
--    field name), writes are values that convert alike unchecked (FFI) and checked (tables):
--    in-range numbers, booleans, whole vectors; bad values only go to loops that keep table
--    views on both; such a loop does not world:set its own row (an FFI write lands at once,
--    a table view's when the row ends), and reads come before writes;
--  * a loop left by break or an error leaves at the top of a row, before any assignment
--    (LuaJIT ends it later and writes back what the row assigned), and a loop suspended in a
--    coroutine only reads;
--  * a loop whose views may be FFI views names the rows it reaches (H.reach), and systems'
--    such loops their components (H.systems_touch): FFI views stamp rows they only read, so
--    those change ticks print as "~" until a later tick's write;
--  * no NaN is written (its sign bit would be the interpreter's arithmetic, not kiln's).
local SEED, OPS = tonumber(arg[1]) or 1, tonumber(arg[2]) or 120
local HERE = arg[0]:match("^(.*[/\\])") or "./"
local HARNESS = arg[3] or (HERE .. "harness.lua")

-- Park-Miller minimal standard generator: every product stays below 2^53, so it is exact in
-- a double and in a Lua 5.4 integer alike.
local state = (SEED % 2147483646) + 1
local function rand(n)
    state = (state * 48271) % 2147483647
    return state % n + 1
end
local function chance(p) return rand(1000) <= p * 1000 end
local function pick(list) return list[rand(#list)] end

local out = {}
local function emit(s) out[#out + 1] = s end

-- ---- schema shapes ------------------------------------------------------------------------
-- Each field: {name, type, count}. `ffi` says whether every field reads through FFI alike.
local SHAPES = {
    {schema = "float x, y;", fields = {{"x", "float"}, {"y", "float"}}},
    {schema = "double d; int32_t i; bool b;", fields = {{"d", "double"}, {"i", "int32"}, {"b", "bool"}}},
    {schema = "vec3 v; int16_t h;", fields = {{"v", "vec3"}, {"h", "int16"}}},
    {schema = "int8_t a; uint8_t u; uint16_t s; uint32_t n;",
     fields = {{"a", "int8"}, {"u", "uint8"}, {"s", "uint16"}, {"n", "uint32"}}},
    {schema = "int64_t big; entity t;", fields = {{"big", "int64"}, {"t", "entity"}}},
    {schema = "int32_t arr[3]; float f;", fields = {{"arr", "int32", 3}, {"f", "float"}}},
    {schema = "char name[8]; int32_t n;", fields = {{"name", "char", 8}, {"n", "int32"}}},
    {schema = "", tag = true, fields = {}},
    {schema = "lua", lua = true, fields = {}},
    {schema = "quat q; float s;", fields = {{"q", "quat"}, {"s", "float"}}},
    {schema = "vec2 p; double m; uint8_t flags;", fields = {{"p", "vec2"}, {"m", "double"}, {"flags", "uint8"}}},
    {schema = "double m; vec2 path[2];", fields = {{"m", "double"}, {"path", "vec2", 2}}},
    {schema = "mat4 m; vec4 c;", fields = {{"m", "mat4"}, {"c", "vec4"}}},
    {schema = "uint64_t id; uint16_t k;", fields = {{"id", "uint64"}, {"k", "uint16"}}},
    -- a field named like a C keyword keeps table views under LuaJIT (docs: FFI views)
    {schema = "float auto, y;", fields = {{"auto", "float"}, {"y", "float"}}, keyword = true},
    -- more than 16 fields: world:spawn's FFI path leaves it to the C binding
    {schema = "float a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q;", fields = {
        {"a", "float"}, {"b", "float"}, {"c", "float"}, {"d", "float"}, {"e", "float"}, {"f", "float"},
        {"g", "float"}, {"h", "float"}, {"i", "float"}, {"j", "float"}, {"k", "float"}, {"l", "float"},
        {"m", "float"}, {"n", "float"}, {"o", "float"}, {"p", "float"}, {"q", "float"}}},
}
local FFI_TYPES = {float = true, double = true, bool = true, int8 = true, int16 = true, int32 = true,
    uint8 = true, uint16 = true, uint32 = true, vec2 = true, vec3 = true, vec4 = true, quat = true}
for _, s in ipairs(SHAPES) do
    s.ffi = not s.lua and not s.keyword
    for _, f in ipairs(s.fields) do
        if f[3] or not FFI_TYPES[f[2]] then s.ffi = false end
    end
end

local RANGE = {int8 = {-128, 127}, int16 = {-32768, 32767}, int32 = {-2147483648, 2147483647},
    uint8 = {0, 255}, uint16 = {0, 65535}, uint32 = {0, 4294967295}}
local VEC = {vec2 = {"x", "y"}, vec3 = {"x", "y", "z"}, vec4 = {"x", "y", "z", "w"}, quat = {"x", "y", "z", "w"}}

-- ---- values -------------------------------------------------------------------------------
local spawned = 0 -- entities the program has tried to spawn: E[1 .. spawned] (nil when it failed)
local function entity_expr()
    if spawned == 0 or chance(0.05) then return pick({"0", "4294967296", "-1", "'x'", "1.5"}) end
    return "E[" .. rand(spawned) .. "]"
end

-- A scalar value of type t; `safe` keeps to values FFI converts as the checked path does.
local function scalar(t, safe, bad)
    if t == "float" or t == "double" then
        if bad then
            if t == "float" and chance(0.4) then return pick({"3.4028235677973366e38", "-1e39", "2^128"}) end
            return pick({"'1'", "true", "1e39", "{}", "nil"})
        end
        if t == "double" and not safe then return pick({"1e300", "-1e-300", "0.1", "2^60", "-0.0", "1/0"}) end
        if not safe and chance(0.3) then -- the edges of float's range and precision
            return pick({"3.4028234663852886e38", "-3.4028234663852886e38", "1/0", "-1/0", "2^-149", "2^-150",
                "16777217", "0.1", "1e-45"})
        end
        return pick({"0", "1", "-2.5", "0.5", "100", "-0.0", "3.0", "1e10", "0.25"})
    elseif RANGE[t] then
        local lo, hi = RANGE[t][1], RANGE[t][2]
        if bad then return pick({tostring(hi + 1), tostring(lo - 1), "2.5", "'3'", "true", tostring(hi) .. ".5", "1/0", "2^63"}) end
        return pick({"0", tostring(lo), tostring(hi), "7", tostring(math.floor((lo + hi) / 2)), "12.0", "-0.0",
            tostring(hi) .. ".0"})
    elseif t == "int64" then
        if bad then return pick({"2^63", "1e19", "0.5", "'1'"}) end
        return pick({"0", "-9007199254740992", "9007199254740992", "123456789012", "-1", "2^40"})
    elseif t == "uint64" then
        if bad then return pick({"-1", "2^63", "0.5", "{}"}) end
        return pick({"0", "9007199254740992", "123", "2^40"})
    elseif t == "entity" then
        if bad then return pick({"-1", "0.5", "'e'"}) end
        return pick({"0", entity_expr(), "4294967296"})
    elseif t == "bool" then
        if bad then return pick({"1", "'true'", "0"}) end
        return pick({"true", "false"})
    elseif t == "char" then
        if bad then return pick({"'much too long'", "5", "'12345678'"}) end
        return pick({"'abc'", "''", "'1234567'", "'a\\0b'"})
    end
    error("no scalar of " .. t)
end

local function vector(t, safe, bad)
    local keys = VEC[t]
    if bad then
        return pick({"{x = 1, 1}", "{q = 1}", "{x = 'a'}", "5", "{x = 1e39}", "{1, 2, 3, 4, 5}"})
    end
    local parts = {}
    if safe or chance(0.4) then
        for _, k in ipairs(keys) do parts[#parts + 1] = k .. " = " .. scalar("float", true) end
    elseif chance(0.5) then
        for i = 1, rand(#keys) do parts[#parts + 1] = scalar("float", true) end
    else
        parts[1] = pick(keys) .. " = " .. scalar("float", true)
    end
    return "{" .. table.concat(parts, ", ") .. "}"
end

local function field_value(f, safe, bad)
    local name, t, count = f[1], f[2], f[3]
    if t == "char" then return scalar("char", safe, bad) end
    if t == "mat4" then
        if bad then return pick({"{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}", "{x = 1}", "{'a'}", "3"}) end
        return pick({"{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 5, 6, 7, 1}", "{}", "{[13] = 2.5}", "{0.5, -0.0}"})
    end
    if count then
        if bad then return pick({"{1, 2, 3, 4}", "{x = 1}", "{" .. vector("vec2", false, true) .. "}", "7"}) end
        local parts = {}
        for i = 1, rand(count + 1) - 1 do
            parts[#parts + 1] = VEC[t] and vector(t, false) or scalar(t, false)
        end
        if chance(0.3) then return "{[" .. count .. "] = " .. (VEC[t] and vector(t) or scalar(t)) .. "}" end
        return "{" .. table.concat(parts, ", ") .. "}"
    end
    if VEC[t] then return vector(t, safe, bad) end
    return scalar(t, safe, bad)
end

-- A whole component value (for spawn, add, set, commands): `bad` lets it be refused.
local function comp_value(c, bad)
    local s = c.shape
    if s.tag then return bad and pick({"false", "1", "{}"}) or "true" end
    if s.lua then
        return pick({"{hp = 3}", "'text'", "42", "true", "{1, {2}}", "{hp = 3, name = 'orc', tags = {a = 1, b = {2.5, 'x'}}}"})
    end
    if bad and chance(0.2) then return pick({"5", "'x'", "true"}) end
    local parts = {}
    local which = rand(#s.fields)
    for i, f in ipairs(s.fields) do
        if chance(0.6) then
            parts[#parts + 1] = f[1] .. " = " .. field_value(f, false, bad and i == which)
        end
    end
    if bad and chance(0.2) then parts[#parts + 1] = "zz = 1" end
    return "{" .. table.concat(parts, ", ") .. "}"
end

-- ---- components ---------------------------------------------------------------------------
local comps = {}
local ncomp = 5 + rand(4)
for i = 1, ncomp do
    comps[i] = {name = "C" .. i, shape = SHAPES[rand(#SHAPES)]}
end
local function comp() return comps[rand(#comps)] end

-- The reader of a view or a value of component c: a string, equal for a table view and an
-- FFI view of the same row (fields read by name, never pairs).
local function reader(c)
    local s = c.shape
    if s.tag then return "function(v) return tostring(v) end" end
    if s.lua then return "function(v) return H.show(v) end" end
    local parts = {}
    for _, f in ipairs(s.fields) do
        local n, t, count = f[1], f[2], f[3]
        if t == "mat4" then
            for i = 1, 16 do parts[#parts + 1] = ("H.show(v.%s[%d])"):format(n, i) end
        elseif count and t ~= "char" then
            for i = 1, count do
                if VEC[t] then
                    for _, k in ipairs(VEC[t]) do parts[#parts + 1] = ("H.show(v.%s[%d].%s)"):format(n, i, k) end
                else parts[#parts + 1] = ("H.show(v.%s[%d])"):format(n, i) end
            end
        elseif VEC[t] then
            for _, k in ipairs(VEC[t]) do parts[#parts + 1] = ("H.show(v.%s.%s)"):format(n, k) end
        else parts[#parts + 1] = ("H.show(v.%s)"):format(n) end
    end
    return "function(v) if v == nil or v == true or v == false then return tostring(v) end return "
        .. table.concat(parts, " .. ',' .. ") .. " end"
end

-- The reader of row i of a bulk term: field arrays (vectors as tables, arrays as lists).
local function bulk_reader(c)
    local s = c.shape
    if s.tag or s.lua then return "function(t, i) return tostring(t) end" end
    local parts = {}
    for _, f in ipairs(s.fields) do parts[#parts + 1] = ("H.show(t.%s[i])"):format(f[1]) end
    return "function(t, i) if type(t) ~= 'table' then return tostring(t) end return "
        .. table.concat(parts, " .. ',' .. ") .. " end"
end

emit("local w = H.kiln.world{max_failures = 3}")
emit("local kiln = H.kiln")
emit("local E, Q, CMD, R, B, NAMES, SCHEMAS, SNAP = {}, {}, {}, {}, {}, {}, {}, nil")
emit("local function try(f, ...) return H.res(pcall(f, ...)) end")
for i, c in ipairs(comps) do
    emit(("NAMES[%d], SCHEMAS[%d] = %q, %q"):format(i, i, c.name, c.shape.schema))
    emit(("R[%q] = %s"):format(c.name, reader(c)))
    emit(("B[%q] = %s"):format(c.name, bulk_reader(c)))
    emit(("H.op(%d, w, function() return w:component(%q, %q), w:schema(%q) end)")
        :format(-i, c.name, c.shape.schema, c.name))
end
emit("H.w, H.E, H.names = w, E, NAMES")
emit("H.op(0, w, function() return w:event('Ev', 'float x; int32_t n; vec2 p'), w:event('Bare') end)")

-- ---- queries ------------------------------------------------------------------------------
local queries = {} -- {terms = {comp...}, ffi = bool, req = n, opt = {...}}
local function make_query()
    local used, terms, without, optional = {}, {}, {}, {}
    for _ = 1, rand(3) do
        local c = comp()
        if not used[c] then used[c] = true; terms[#terms + 1] = c end
    end
    if chance(0.4) then
        local c = comp()
        if not used[c] then used[c] = true; optional[#optional + 1] = c end
    end
    if chance(0.3) then
        local c = comp()
        if not used[c] then used[c] = true; without[#without + 1] = c end
    end
    local q = {terms = {}, ffi = true, without = without, optional = optional, req = terms}
    for _, c in ipairs(terms) do q.terms[#q.terms + 1] = c end
    for _, c in ipairs(optional) do q.terms[#q.terms + 1] = c end
    for _, c in ipairs(q.terms) do if not c.shape.ffi then q.ffi = false end end
    for _, c in ipairs(optional) do if c.shape.tag then q.ffi = false end end
    local function names(list)
        local n = {}
        for i, c in ipairs(list) do n[i] = ("%q"):format(c.name) end
        return table.concat(n, ", ")
    end
    local text = "{" .. names(terms)
    if #without > 0 then text = text .. ", without = {" .. names(without) .. "}" end
    if #optional > 0 then text = text .. ", optional = {" .. names(optional) .. "}" end
    q.text = text .. "}"
    return q
end

-- The names of query q's terms as Lua string literals, for H.reach and H.systems_touch.
local function term_names(q)
    local n = {}
    for i, c in ipairs(q.terms) do n[i] = ("%q"):format(c.name) end
    return table.concat(n, ", ")
end

-- The statements of a loop body over query q with views v1..vn: reads, writes, structural
-- calls. `ro` maps a component to true when the running system reads it only.
local function body(q, ro, indent, in_fn)
    local b = {}
    local function add(s) b[#b + 1] = indent .. s end
    local reads = {}
    for i, c in ipairs(q.terms) do reads[i] = ("R[%q](v%d)"):format(c.name, i) end
    if q.ffi and not in_fn then add(("H.reach(e, %s)"):format(term_names(q))) end
    add("row = row + 1")
    if chance(0.2) then add(("if row == %d then %s end"):format(rand(4), in_fn and "return" or "break")) end
    if chance(0.15) then add(("if row == %d then error('boom', 0) end"):format(rand(4))) end
    add("H.say(H.num(e) .. ':' .. " .. (#reads > 0 and table.concat(reads, " .. '|' .. ") or "''") .. ")")
    -- calls before the row's writes: w:get then sees the row as both paths left it
    if chance(0.3) then
        local c = comp()
        local call = pick({
            ("w:add(e, %q, %s)"):format(c.name, comp_value(c, chance(0.2))),
            ("w:remove(e, %q)"):format(c.name),
            "w:despawn(e)",
            ("w:spawn{%s = %s}"):format(c.name, comp_value(c, chance(0.2))),
            -- under FFI views a write lands at once, a table view's when the row ends
            -- (documented): a loop that may have FFI views does not set its own rows
            q.ffi and ("w:has(e, %q)"):format(c.name) or ("w:set(e, %q, %s)"):format(c.name, comp_value(c, chance(0.2))),
            ("w:get(e, %q)"):format(c.name),
        })
        add(("if row %% 2 == 1 then H.say(try(function() return %s end)) end"):format(call))
    end
    for i, c in ipairs(q.terms) do
        local s = c.shape
        if not s.tag and not s.lua and #s.fields > 0 and chance(0.6) then
            local f = s.fields[rand(#s.fields)]
            local guard = ("if v%d ~= nil and row %% %d == 0 then "):format(i, rand(2))
            if ro[c] then
                add(guard .. ("H.say(try(function() v%d.%s = %s end)) end"):format(i, f[1], field_value(f, true)))
            elseif q.ffi then
                if VEC[f[2]] and chance(0.5) then
                    local k = VEC[f[2]][rand(#VEC[f[2]])]
                    add(guard .. ("v%d.%s.%s = %s end"):format(i, f[1], k, scalar("float", true)))
                else
                    add(guard .. ("v%d.%s = %s end"):format(i, f[1], field_value(f, true)))
                end
            else
                add(guard .. ("v%d.%s = %s end"):format(i, f[1], field_value(f, false, chance(0.25))))
            end
        end
        if not s.tag and not s.lua and chance(0.1) then
            add(("if v%d ~= nil then H.say(try(function() v%d.nosuch = 1 end)) end"):format(i, i))
        end
    end
    return table.concat(b, "\n")
end

local function view_list(q)
    local v = {}
    for i = 1, #q.terms do v[i] = "v" .. i end
    return #v > 0 and ", " .. table.concat(v, ", ") or ""
end

-- ---- operations ---------------------------------------------------------------------------
local systems = 0
local ops = {}

function ops.spawn()
    local parts, used = {}, {}
    for _ = 1, rand(4) - 1 do
        local c = comp()
        if not used[c] then
            used[c] = true
            local v = comp_value(c, chance(0.15))
            if v:sub(1, 1) == "{" and not c.shape.lua and chance(0.1) then
                v = ("setmetatable(%s, {__index = {zz = 1}, __pairs = error})"):format(v) -- read raw
            end
            if chance(0.1) then
                parts[#parts + 1] = ("[w:component(%q)] = %s"):format(c.name, v) -- an id as the key
            else
                parts[#parts + 1] = c.name .. " = " .. v
            end
        end
    end
    if chance(0.05) then parts[#parts + 1] = "Nope = true" end
    spawned = spawned + 1
    return ("H.nE = %d; E[%d] = w:spawn{%s}; return E[%d]")
        :format(spawned, spawned, table.concat(parts, ", "), spawned)
end
-- Many entities of one shape in a loop: LuaJIT compiles the loop (and its FFI spawns), and
-- queries get several chunks (512 rows each) and archetypes.
function ops.spawn_many()
    local parts, used = {}, {}
    for _ = 1, rand(3) do
        local c = comp()
        if not used[c] and not c.shape.lua then
            used[c] = true
            local s = c.shape
            if s.tag then parts[#parts + 1] = c.name .. " = true"
            else
                local fields = {}
                for _, f in ipairs(s.fields) do
                    if not f[3] and chance(0.7) then
                        if f[2] == "float" or f[2] == "double" then fields[#fields + 1] = f[1] .. " = i * 0.25"
                        elseif RANGE[f[2]] then fields[#fields + 1] = f[1] .. " = i % 100"
                        elseif f[2] == "bool" then fields[#fields + 1] = f[1] .. " = i % 3 == 0"
                        elseif VEC[f[2]] then fields[#fields + 1] = f[1] .. " = {x = i, y = -i}"
                        elseif f[2] == "char" then fields[#fields + 1] = f[1] .. " = 'n' .. i % 1000"
                        end
                    end
                end
                parts[#parts + 1] = c.name .. " = {" .. table.concat(fields, ", ") .. "}"
            end
        end
    end
    if chance(0.1) then parts[#parts + 1] = "Nope = true" end
    return ("local n = 0\n  for i = 1, %d do local e = w:spawn{%s}; n = n + 1; if i %% 97 == 0 then w:despawn(e) elseif i %% 67 == 1 then H.more(e) end end\n"
        .. "  return n"):format(rand(700), table.concat(parts, ", "))
end
function ops.despawn() return ("w:despawn(%s)"):format(entity_expr()) end
function ops.add()
    local c = comp()
    return ("w:add(%s, %q, %s)"):format(entity_expr(), c.name, comp_value(c, chance(0.2)))
end
function ops.remove()
    local c = comp()
    return ("return w:remove(%s, %q)"):format(entity_expr(), c.name)
end
function ops.set()
    local c = comp()
    local e = entity_expr()
    return ("w:set(%s, %q, %s); return w:changed_tick(%s, %q) == w:tick()")
        :format(e, c.name, comp_value(c, chance(0.25)), e, c.name)
end
function ops.get()
    local c = comp()
    return ("local v = w:get(%s, %q); return R[%q](v), w:has(%s, %q)")
        :format(entity_expr(), c.name, c.name, entity_expr(), c.name)
end
function ops.alive()
    local e = entity_expr()
    return ("return w:is_alive(%s), w:components(%s)"):format(e, e)
end
function ops.entities() return "return w:entities()" end
function ops.tick() return "return w:advance_tick()" end
function ops.query()
    local q = make_query()
    queries[#queries + 1] = q
    return ("Q[%d] = w:query%s; return Q[%d]:count(), Q[%d]:terms(), Q[%d]:entities()")
        :format(#queries, q.text, #queries, #queries, #queries)
end
function ops.each()
    if #queries == 0 then return ops.query() end
    local j = rand(#queries)
    local q = queries[j]
    return ("local row = 0\n  local ok, err = pcall(function()\n    for e%s in Q[%d]:each() do\n%s\n    end\n  end)\n"
        .. "  return H.take(), H.res(ok, err), Q[%d]:count()"):format(view_list(q), j, body(q, {}, "      "), j)
end
function ops.bulk()
    if #queries == 0 then return ops.query() end
    local j = rand(#queries)
    local q = queries[j]
    local b = {}
    local args = {}
    for i, c in ipairs(q.terms) do
        args[i] = "t" .. i
        b[#b + 1] = ("H.say(B[%q](t%d, i))"):format(c.name, i)
    end
    local writes = {}
    for i, c in ipairs(q.terms) do
        local s = c.shape
        if not s.tag and not s.lua and #s.fields > 0 and chance(0.6) then
            local f = s.fields[rand(#s.fields)]
            local v = field_value(f, false, chance(0.2))
            if f[3] and f[2] ~= "char" then v = field_value(f, false, chance(0.2)) end
            writes[#writes + 1] = ("if type(t%d) == 'table' and i %% %d == 0 then t%d.%s[i] = %s end")
                :format(i, rand(2), i, f[1], v)
        end
    end
    local raise = chance(0.1) and "if n > 1 then error('bulk boom', 0) end" or ""
    local tail = ""
    for i, c in ipairs(q.terms) do -- a term table misspelt or an array replaced: raises after fn
        if #c.shape.fields > 1 and chance(0.05) then
            tail = tail .. (" if type(t%d) == 'table' then t%d.%s = {}; t%d.zz = %s; t%d.%s = nil end")
                :format(i, i, c.shape.fields[2][1], i, pick({"nil", "{}"}), i, pick({"zy", c.shape.fields[1][1]}))
        end
    end
    if chance(0.3) then
        local c = comp()
        raise = raise .. " " .. pick({
            ("H.say(try(function() return w:add(ents[1], %q, %s) end))"):format(c.name, comp_value(c, chance(0.2))),
            "H.say(try(function() return w:despawn(ents[n]) end))",
            ("H.say(try(function() return w:spawn{%s = %s} end))"):format(c.name, comp_value(c, chance(0.2))),
        })
    end
    return ("local ok, err = pcall(function()\n    Q[%d]:bulk(function(n, ents, %s)\n      %s\n"
        .. "      for i = 1, n do H.say(H.num(ents[i])); %s %s end\n     %s\n    end)\n  end)\n"
        .. "  return H.take(), H.res(ok, err)")
        :format(j, table.concat(args, ", "), raise, table.concat(b, "; "), table.concat(writes, " "), tail)
end
function ops.system()
    systems = systems + 1
    local name = "S" .. systems
    local reads, writes, ro = {}, {}, {}
    for _, c in ipairs(comps) do
        local r = rand(4)
        if r == 1 then reads[#reads + 1] = ("%q"):format(c.name); ro[c] = true
        elseif r == 2 then writes[#writes + 1] = ("%q"):format(c.name) end
    end
    local decl = ("name = %q, reads = {%s}, writes = {%s}"):format(name, table.concat(reads, ", "),
        table.concat(writes, ", "))
    if chance(0.1) then decl = decl .. ", exclusive = true"; ro = {} end
    if chance(0.5) then
        local q = make_query()
        local roq = {}
        local declared = {}
        for _, c in ipairs(comps) do if ro[c] then declared[c] = true end end
        for _, c in ipairs(q.terms) do
            -- a term not in reads or writes counts as read (docs: Systems)
            local inw = false
            for _, x in ipairs(writes) do if x == ("%q"):format(c.name) then inw = true end end
            if not inw and not decl:find("exclusive") then roq[c] = true end
        end
        local touch = q.ffi and ("H.systems_touch(%s)\n  "):format(term_names(q)) or ""
        return ("local row = 0\n  %sw:system{%s, query = %s,\n    each = function(e%s, dt)\n%s\n    end}")
            :format(touch, decl, q.text, view_list(q), body(q, roq, "      ", true))
    end
    local c = comp()
    local calls = {
        ("w:get(%s, %q)"):format(entity_expr(), c.name),
        ("w:set(%s, %q, %s)"):format(entity_expr(), c.name, comp_value(c, chance(0.2))),
        ("w:spawn{%s = %s}"):format(c.name, comp_value(c, chance(0.1))),
        ("w:add(%s, %q, %s)"):format(entity_expr(), c.name, comp_value(c, chance(0.1))),
        ("w:despawn(%s)"):format(entity_expr()),
        ("w:emit('Ev', {x = %s, n = %s})"):format(scalar("float", false, chance(0.1)), scalar("int32", false)),
    }
    local lines = {}
    for _ = 1, rand(3) do lines[#lines + 1] = ("H.say(%q .. try(function() return %s end))"):format(name .. ":", pick(calls)) end
    local touch = ""
    if #queries > 0 and chance(0.5) then
        local j = rand(#queries)
        if queries[j].ffi then touch = ("H.systems_touch(%s)\n  "):format(term_names(queries[j])) end
        lines[#lines + 1] = ("H.say(%q .. try(function() local n = 0; for e in Q[%d]:each() do n = n + 1 end; return n end))")
            :format(name .. ":", j)
    end
    if chance(0.2) then lines[#lines + 1] = "if dt > 0.3 then error('system boom', 0) end" end
    return ("%sw:system{%s,\n    run = function(w, dt)\n      %s\n    end}"):format(touch, decl, table.concat(lines, "\n      "))
end
function ops.progress()
    local dt = pick({"0", "0.25", "0.5"})
    return ("local ok, f = w:progress(%s); return ok, H.failures(f), H.take()"):format(dt)
end
function ops.systems_list()
    return "local t = {}; for i, s in ipairs(w:systems()) do t[i] = s.name .. ':' .. s.stage .. ':' .. tostring(s.enabled) .. ':' .. s.runs end; return t"
end
function ops.remove_system()
    return ("w:remove_system('S%d')"):format(rand(systems + 1))
end
function ops.commands()
    local lines = {"local cmd = CMD[1] or kiln.commands(); CMD[1] = cmd", "local p = {}"}
    for _ = 1, rand(5) do
        local c = comp()
        local target = chance(0.5) and ("p[%d] or -1"):format(rand(3)) or entity_expr()
        local rec = pick({
            ("p[#p + 1] = cmd:spawn{%s = %s}"):format(c.name, comp_value(c, chance(0.15))),
            ("cmd:add(%s, %q, %s)"):format(target, c.name, comp_value(c, chance(0.15))),
            ("cmd:set(%s, %q, %s)"):format(target, c.name, comp_value(c, chance(0.15))),
            ("cmd:remove(%s, %q)"):format(target, c.name),
            ("cmd:despawn(%s)"):format(target),
        })
        lines[#lines + 1] = ("H.say(try(function() %s end))"):format(rec)
    end
    lines[#lines + 1] = "local res = H.res(pcall(cmd.apply, cmd, w))"
    lines[#lines + 1] = "local got = {}; for i, ph in ipairs(p) do got[i] = H.res(pcall(cmd.resolved, cmd, ph)) end"
    if chance(0.3) then lines[#lines + 1] = "cmd:clear()" end
    lines[#lines + 1] = "return H.take(), res, got, cmd:count()"
    return table.concat(lines, "\n  ")
end
function ops.events()
    return ("w:emit('Ev', {x = %s, n = %s, p = %s}); local t = {}; for ev in w:events('Ev') do t[#t + 1] = ev end; return t")
        :format(scalar("float", false, chance(0.15)), scalar("int32", false, chance(0.15)), vector("vec2", false, chance(0.1)))
end
function ops.resource()
    local c = comp()
    if chance(0.5) then return ("w:resource('Lua', %s); return w:resource('Lua')"):format(comp_value(c)) end
    return ("w:resource(%q, %s); return R[%q](w:resource(%q))"):format(c.name, comp_value(c, chance(0.2)), c.name, c.name)
end
function ops.getter()
    local c = comp()
    local f = c.shape.fields[1]
    if not f then return ops.get() end
    return ("local g = w:getter(%q, %q); return H.show(g(%s))"):format(c.name, f[1], entity_expr())
end


-- q:each_ffi and q:bulk_ffi over a query whose views may be FFI views: the same script runs
-- on both (Lua 5.4 has their table forms); writes are values FFI converts as the checks do.
function ops.each_ffi()
    local j
    for _ = 1, 4 do
        local k = rand(math.max(#queries, 1))
        if queries[k] and queries[k].ffi then j = k end
    end
    if not j then return ops.each() end
    local q = queries[j]
    return ("local row = 0\n  local ok, err = pcall(function()\n    for e%s in Q[%d]:each_ffi() do\n%s\n    end\n  end)\n"
        .. "  return H.take(), H.res(ok, err), Q[%d]:count()"):format(view_list(q), j, body(q, {}, "      "), j)
end
function ops.bulk_ffi()
    local j
    for _ = 1, 4 do
        local k = rand(math.max(#queries, 1))
        if queries[k] and queries[k].ffi and #queries[k].optional == 0 then j = k end
    end
    if not j then return ops.bulk() end
    local q = queries[j]
    local args, reads, writes = {}, {}, {}
    for i, c in ipairs(q.terms) do
        args[i] = "t" .. i
        reads[i] = ("R[%q](t%d[i])"):format(c.name, i)
        local s = c.shape
        if s.tag then reads[i] = ("tostring(t%d)"):format(i) end
        if not s.tag and #s.fields > 0 and chance(0.7) then
            local f = s.fields[rand(#s.fields)]
            writes[#writes + 1] = ("t%d[i].%s = %s"):format(i, f[1], field_value(f, true))
        end
    end
    return ("local ok, err = pcall(function()\n    Q[%d]:bulk_ffi(function(n, ents, %s, k)\n"
        .. "      for i = 0, n - 1 do H.reach(tonumber(ents[i]), " .. term_names(q) .. ") end\n"
        .. "      for i = 0, n - 1 do H.say(H.num(tonumber(ents[i])) .. ':' .. %s .. k); %s end\n    end, 'k')\n  end)\n"
        .. "  return H.take(), H.res(ok, err)")
        :format(j, table.concat(args, ", "), table.concat(reads, " .. '|' .. "), table.concat(writes, "; "))
end
-- A loop suspended in a coroutine that is never resumed (world:progress ends it), or resumed
-- to its end; meanwhile the world is deferred. Rows are read, not written (an FFI view's write
-- lands at once, a table view's row is not written back: documented).
function ops.coroutine()
    if #queries == 0 then return ops.query() end
    local j = rand(#queries)
    local q = queries[j]
    local c = comp()
    return ("local co = coroutine.wrap(function()\n    for e%s in Q[%d]:each() do %sH.say(H.num(e)); coroutine.yield(true) end\n  end)\n"
        .. "  H.say(H.res(pcall(co)))\n  local e2 = w:spawn{%s = %s}\n"
        .. "  H.say(H.res(pcall(function() return w:is_alive(e2), w:has(e2, %q), w:count(), Q[%d]:count() end)))\n"
        .. "  %s\n  return H.take()")
        :format(view_list(q), j, q.ffi and ("H.reach(e, %s); "):format(term_names(q)) or "", c.name, comp_value(c), c.name, j,
            pick({"", "H.say(H.res(pcall(co)))", "H.say(H.res(pcall(function() for e in Q[" .. j .. "]:each() do end end)))",
                "H.say(H.res(pcall(function() local ok, f = w:progress(0); return ok, H.failures(f) end)))"}))
end
function ops.hierarchy()
    local a, b = entity_expr(), entity_expr()
    return pick({
        ("w:set_parent(%s, %s); return w:children(%s)"):format(a, b, b),
        ("w:set_parent(%s, nil); return w:get(%s, 'Parent')"):format(a, a),
        ("w:despawn_recursive(%s)"):format(a),
        ("local c = w:children(%s); table.sort(c); return c"):format(a),
    })
end
function ops.snapshot()
    if chance(0.5) then return "SNAP = w:snapshot(); return SNAP:bytes() > 0" end
    return "if SNAP then w:restore(SNAP) end; return w:entities()"
end
-- Saved bytes differ where Lua values hold integral floats (3.0 saves as an integer under
-- LuaJIT: the documented number difference), so a save is compared by what loads back: the
-- loaded world's hash, entities and Lua values (printed as numbers, -0 kept).
function ops.save()
    local c = comp()
    return ("local d = w:save%s; local w2 = kiln.world(); for i = 1, #NAMES do w2:component(NAMES[i], SCHEMAS[i]) end\n"
        .. "  local map = w2:load(d); local h, es, lua = w2:hash(), w2:entities(), w2:resource('Lua')\n"
        .. "  local v = {}; for i, e in ipairs(es) do v[i] = R[%q](w2:get(e, %q)) end\n"
        .. "  w2:close(); return h, es, lua, v"):format(pick({"()", "{format = 'json'}"}), c.name, c.name)
end
function ops.misc()
    local c = comp()
    local e = entity_expr()
    return pick({
        ("return w:clone(%s)"):format(e),
        ("w:name(%s, %q); return w:lookup(%q), w:name(%s)"):format(e, pick({"ship", "rock", ("x"):rep(70)}), "ship", e),
        ("local into = {keep = 1}; return R[%q](w:get(%s, %q, into)), into.keep"):format(c.name, e, c.name),
        ("return Q[1] and Q[1]:entities(%d)"):format(rand(4) - 1),
        ("w:enable('S%d', %s)"):format(rand(systems + 1), pick({"true", "false"})),
        ("w:seed(%d); return w:random(), w:random(6), w:random(-3, 3)"):format(rand(1000)),
        ("return w:components(%s)"):format(e),
        ("return tostring(Q[1] or 'none')"),
        ("return w:schema(%q), w:component_info(%q)"):format(c.name, c.name),
        ("return H.pretty(w:inspect(%s))"):format(e),
        ("return Q[1] and H.pretty(Q[1]:format(w, %d))"):format(rand(5)),
        ("return tostring(w)"),
    })
end
-- Prefabs (a table def, with children) and scenes exported as JSON text.
function ops.prefab()
    local function def(depth)
        local parts = {}
        local used = {}
        for _ = 1, rand(3) do
            local c = comp()
            if not used[c] then
                used[c] = true
                parts[#parts + 1] = c.name .. " = " .. comp_value(c, chance(0.1))
            end
        end
        local kids = ""
        if depth < 2 and chance(0.4) then kids = ", children = {" .. def(depth + 1) .. "}" end
        return "{components = {" .. table.concat(parts, ", ") .. "}" .. kids .. "}"
    end
    if chance(0.3) then
        return ("local text = w:export(%s); return #text, H.sum(text)"):format(pick({"", "{" .. entity_expr() .. "}", "nil, {name = 'dump'}"}))
    end
    return ("local p = w:prefab%s; local r = p:spawn(%s); return r, w:entities()"):format(def(0), pick({"", "2"}))
end

-- Mods (gen_mods.lua): a manager over the world, set up before the first operation.
local mods_setup, mods_weights, mod_names = dofile(HERE .. "gen_mods.lua")({rand = rand, chance = chance,
    pick = pick, comps = comps, queries = queries, comp_value = comp_value, ops = ops})
emit("local MODS")
emit(mods_setup)
emit(("H.mod_names = {%q, %q}"):format(mod_names[1], mod_names[2]))

local WEIGHTS = {
    {"spawn", 14}, {"despawn", 3}, {"add", 6}, {"remove", 4}, {"set", 6}, {"get", 6}, {"alive", 2},
    {"entities", 1}, {"tick", 1}, {"query", 5}, {"each", 10}, {"bulk", 6}, {"system", 3}, {"progress", 5},
    {"systems_list", 1}, {"remove_system", 1}, {"commands", 4}, {"events", 2}, {"resource", 2}, {"getter", 2},
    {"each_ffi", 4}, {"bulk_ffi", 4}, {"hierarchy", 3}, {"snapshot", 2}, {"save", 2}, {"misc", 5},
    {"prefab", 2}, {"spawn_many", 2}, {"coroutine", 3},
}
for _, wgt in ipairs(mods_weights) do WEIGHTS[#WEIGHTS + 1] = wgt end
-- q:bulk's arrays kept past their call (gen_bulk_kept.lua).
dofile(HERE .. "gen_bulk_kept.lua")({rand = rand, chance = chance, pick = pick, queries = queries, ops = ops})
WEIGHTS[#WEIGHTS + 1] = {"bulk_kept", 3}
local total = 0
for _, wgt in ipairs(WEIGHTS) do total = total + wgt[2] end

-- A few entities and a query first, so early loops have rows.
local plan = {"spawn", "spawn", "spawn", "query"}
for i = 1, OPS do
    local kind = plan[i]
    if not kind then
        local r = rand(total)
        for _, wgt in ipairs(WEIGHTS) do
            r = r - wgt[2]
            if r <= 0 then kind = wgt[1]; break end
        end
    end
    emit(("-- op %d: %s\nH.op(%d, w, function()\n  %s\nend)"):format(i, kind, i, ops[kind]()))
end
emit("pcall(w.progress, w, 0) -- ends a loop left suspended in a coroutine\nMODS:close()\nw:close()\nos.execute(\"rm -rf '\" .. H.dir .. \"'\")")

local f = assert(io.open(HARNESS, "r"))
local harness = f:read("*a"):gsub("\nreturn H%s*$", "\n")
f:close()
io.write(("-- generated by tests/diff/gen.lua, seed %d, %d operations\n"):format(SEED, OPS))
io.write("local H = (function()\n", harness, "return H\nend)()\n")
io.write(table.concat(out, "\n"), "\n")
