-- fuzz/model.lua: what the fuzz test believes a kiln world holds (entities, values, ticks,
-- hierarchy, events, resources), kept in plain Lua and changed only after a call succeeded.
local N = require "fuzz.num"
local M = {}
M.__index = M

local FLT_MAX = 3.4028234663852886e38
local INF = 1 / 0

-- A Lua-valued component holding nil: present (has is true) but get returns nil.
M.NIL = setmetatable({}, {__name = "model.NIL", __tostring = function() return "NIL" end})

---------------------------------------------------------------------------------------------
-- Field types, as schema.c spells them; kind drives conversion, enum the layout identity.
---------------------------------------------------------------------------------------------

local function int_type(enum, size, lo, hi) return {kind = "int", enum = enum, size = size, align = size, lo = lo, hi = hi} end

M.types = {
    bool = {kind = "bool", enum = "bool", size = 1, align = 1},
    int8_t = int_type("i8", 1, -128, 127), int8 = int_type("i8", 1, -128, 127),
    int16_t = int_type("i16", 2, -32768, 32767), int16 = int_type("i16", 2, -32768, 32767),
    int32_t = int_type("i32", 4, -2147483648, 2147483647), int32 = int_type("i32", 4, -2147483648, 2147483647),
    int = int_type("i32", 4, -2147483648, 2147483647),
    int64_t = int_type("i64", 8, N.mininteger, N.maxinteger),
    int64 = int_type("i64", 8, N.mininteger, N.maxinteger),
    uint8_t = int_type("u8", 1, 0, 255), uint8 = int_type("u8", 1, 0, 255),
    uint16_t = int_type("u16", 2, 0, 65535), uint16 = int_type("u16", 2, 0, 65535),
    uint32_t = int_type("u32", 4, 0, 4294967295), uint32 = int_type("u32", 4, 0, 4294967295),
    -- a uint64 takes any integer (a negative one as its bits: what get reads past 2^63 - 1)
    uint64_t = int_type("u64", 8, N.mininteger, N.maxinteger), uint64 = int_type("u64", 8, N.mininteger, N.maxinteger),
    entity = int_type("entity", 8, 0, N.maxinteger),
    float = {kind = "f32", enum = "f32", size = 4, align = 4},
    double = {kind = "f64", enum = "f64", size = 8, align = 8},
    char = {kind = "char", enum = "char", size = 1, align = 1},
    vec2 = {kind = "vec", enum = "vec2", size = 8, align = 4, keys = {"x", "y"}},
    vec3 = {kind = "vec", enum = "vec3", size = 12, align = 4, keys = {"x", "y", "z"}},
    vec4 = {kind = "vec", enum = "vec4", size = 16, align = 4, keys = {"x", "y", "z", "w"}},
    quat = {kind = "vec", enum = "quat", size = 16, align = 4, keys = {"x", "y", "z", "w"}},
    mat4 = {kind = "mat", enum = "mat4", size = 64, align = 4},
}
M.type_names = {}
for k in pairs(M.types) do M.type_names[#M.type_names + 1] = k end
table.sort(M.type_names)

local f32 = N.f32
-- A Lua 5.4 integer as the float it converts to; any other number as it is. Only the real
-- math.type asks: LuaJIT's numbers are floats already, and N.mtype calls -0.0 an integer
-- there, which -0.0 + 0.0 would turn into +0.0 (a double field written -0.0 is stamped).
local function tofloat(v) return math.type and math.type(v) == "integer" and v + 0.0 or v end
M.f32 = f32

---------------------------------------------------------------------------------------------
-- Schemas: a mirror of schema.c's grammar, so the test predicts which schemas are accepted
-- and what layout they give.
---------------------------------------------------------------------------------------------

local function is_space(c) return c == " " or c == "\t" or c == "\n" or c == "\v" or c == "\f" or c == "\r" end

-- Returns {fields = {...}, size, align} or nil, reason.
function M.parse_schema(s)
    local pos, n, offset, max_align = 1, 0, 0, 1
    local fields, seen = {}, {}
    local function skip()
        while is_space(s:sub(pos, pos)) do pos = pos + 1 end
    end
    local function ident()
        skip()
        local word = s:match("^[%a_][%w_]*", pos)
        if not word or #word >= 64 then return nil, word ~= nil end -- nil, true: a name too long
        pos = pos + #word
        return word
    end
    while true do
        skip()
        if pos > #s then break end
        local tname, type_too_long = ident()
        if type_too_long then return nil, "type name too long (1 to 63 bytes)" end
        if not tname then return nil, "expected a type" end
        local t = M.types[tname]
        if not t then return nil, "unknown type" end
        while true do
            local name, too_long = ident()
            if too_long then return nil, "field name too long (1 to 63 bytes)" end
            if not name then return nil, "expected a field name" end
            local count = 1
            skip()
            if s:sub(pos, pos) == "[" then
                pos = pos + 1
                skip()
                local digits = s:match("^%d+", pos)
                if not digits then return nil, "expected an array length" end
                -- schema.c reads every digit, holding the length at 1000000 once it gets there
                local len = 0
                for d in digits:gmatch("%d") do
                    if len < 1000000 then len = len * 10 + tonumber(d) end
                end
                pos = pos + #digits
                skip()
                if s:sub(pos, pos) ~= "]" then return nil, "expected ']'" end
                pos = pos + 1
                if len == 0 or len > 65536 then return nil, "bad array length" end
                count = len
            elseif t.kind == "char" then
                return nil, "char needs a length"
            end
            if n == 64 then return nil, "too many fields" end
            if seen[name] then return nil, "field declared twice" end
            seen[name] = true
            offset = N.idiv(offset + t.align - 1, t.align) * t.align
            fields[#fields + 1] = {name = name, type = t, tname = tname, offset = offset, count = count}
            offset = offset + t.size * count
            if t.align > max_align then max_align = t.align end
            if offset > 2 ^ 20 then return nil, "component larger than 1 MiB" end
            n = n + 1
            skip()
            local c = s:sub(pos, pos)
            if c == "," then
                pos = pos + 1
            elseif c == ";" then
                pos = pos + 1
                break
            elseif c == "" then
                break
            else
                return nil, "expected ',' or ';'"
            end
        end
    end
    local size = N.idiv(offset + max_align - 1, max_align) * max_align
    return {fields = fields, size = size, align = size > 0 and max_align or 1}
end

-- The layout identity the core compares when a name is registered again.
function M.signature(layout)
    local parts = {layout.size, layout.align}
    for _, f in ipairs(layout.fields) do
        parts[#parts + 1] = f.name .. ":" .. f.type.enum .. "@" .. f.offset .. "x" .. f.count
    end
    return table.concat(parts, " ")
end

---------------------------------------------------------------------------------------------
-- Values: zero values, conversion from Lua (mirroring values.c) and comparison.
---------------------------------------------------------------------------------------------

local function zero_element(t)
    if t.kind == "bool" then return false end
    if t.kind == "int" then return 0 end
    if t.kind == "f32" or t.kind == "f64" then return 0.0 end
    if t.kind == "vec" then
        local v = {}
        for _, k in ipairs(t.keys) do v[k] = 0.0 end
        return v
    end
    if t.kind == "mat" then
        local v = {}
        for i = 1, 16 do v[i] = 0.0 end
        return v
    end
end

function M.zero_field(f)
    if f.type.kind == "char" then return "" end
    if f.count == 1 then return zero_element(f.type) end
    local a = {}
    for i = 1, f.count do a[i] = zero_element(f.type) end
    return a
end

function M.copy(v)
    if type(v) ~= "table" or v == M.NIL then return v end
    local c = {}
    for k, x in next, v do c[k] = M.copy(x) end
    return c
end

local function convert_element(t, v, old)
    local kind = t.kind
    if kind == "bool" then
        if type(v) ~= "boolean" then return false end
        return true, v
    elseif kind == "f32" then
        if type(v) ~= "number" then return false end
        if v == v and v ~= INF and v ~= -INF and math.abs(v) > FLT_MAX then return false end
        return true, f32(v)
    elseif kind == "f64" then
        if type(v) ~= "number" then return false end
        return true, tofloat(v)
    elseif kind == "int" then
        -- numbers only (a float with an exact integer value counts), never strings
        local i = type(v) == "number" and N.tointeger(v) or nil
        -- a whole float past 2^63 - 1 in a uint64: its bits, read back negative
        local u64 = i == nil and t.enum == "u64" and type(v) == "number" and v == math.floor(v)
        if u64 and v >= 2 ^ 63 and v < 2 ^ 64 then return true, N.tointeger(v - 2 ^ 64) end
        if i == nil or i < t.lo or i > t.hi then return false end
        return true, i
    elseif kind == "vec" or kind == "mat" then
        -- vectors take {x =, y =, ...} or {1, 2, ...}; a mat4 16 positions; any other key,
        -- or one element given both ways, is an error (klua: to_element)
        if type(v) ~= "table" then return false end
        local width = kind == "mat" and 16 or #t.keys
        local out, seen = M.copy(old), {}
        for k, x in next, v do
            local i
            if N.mtype(k) == "integer" and k >= 1 and k <= width then i = k
            elseif kind == "vec" and type(k) == "string" then
                for j, name in ipairs(t.keys) do if name == k then i = j end end
            end
            if not i or seen[i] then return false end
            seen[i] = true
            if type(x) ~= "number" then return false end
            if x == x and x ~= INF and x ~= -INF and math.abs(x) > FLT_MAX then return false end
            if kind == "mat" then out[i] = f32(x) else out[t.keys[i]] = f32(x) end
        end
        return true, out
    end
    error("unknown kind " .. tostring(kind))
end

-- Converts v into field f whose current value is old: true, new value | false.
function M.convert_field(f, v, old)
    if f.type.kind == "char" then
        -- stored whole (bytes after a NUL included); reads stop at the first NUL
        if type(v) ~= "string" or #v >= f.count then return false end
        return true, v
    end
    if f.count == 1 then return convert_element(f.type, v, old) end
    if type(v) ~= "table" then return false end
    for k in next, v do -- every key a position [1] to [count] (klua_to_field)
        if N.mtype(k) ~= "integer" or k < 1 or k > f.count then return false end
    end
    local out = M.copy(old)
    for i = 1, f.count do
        local e = rawget(v, i)
        if e ~= nil then
            local ok, x = convert_element(f.type, e, old[i])
            if not ok then return false end
            out[i] = x
        end
    end
    return true, out
end

local function field_named(comp, name)
    for _, f in ipairs(comp.fields) do
        if f.name == name then return f end
    end
end
M.field_named = field_named

-- Writes the fields of table t over a copy of base (klua_read_fields): true, value | false.
function M.read_fields(comp, t, base)
    if type(t) ~= "table" then return false end
    local out = M.copy(base)
    for k, v in next, t do
        if type(k) ~= "string" then return false end
        local f = field_named(comp, k)
        if not f then return false end
        local ok, x = M.convert_field(f, v, out[k])
        if not ok then return false end
        out[k] = x
    end
    return true, out
end

-- Components registered with defaults (kiln_component_desc.defaults): what a value starts
-- from when none is given. LocalTransform starts as the identity.
local DEFAULTS = {
    LocalTransform = {rotation = {x = 0.0, y = 0.0, z = 0.0, w = 1.0}, scale = {x = 1.0, y = 1.0, z = 1.0}},
}

function M.zero_value(comp)
    if comp.kind == "tag" then return true end
    if comp.kind == "lua" then return M.NIL end
    local v = {}
    for _, f in ipairs(comp.fields) do v[f.name] = M.zero_field(f) end
    for k, d in pairs(DEFAULTS[comp.name] or {}) do v[k] = M.copy(d) end
    return v
end

-- The value a spawn or add stores for v (build_value in world.c): true, value | false.
function M.build(comp, v)
    if comp.kind == "lua" then
        if v == nil then return true, M.NIL end
        return true, v
    elseif comp.kind == "tag" then
        if v ~= nil and v ~= true then return false end
        return true, true
    end
    if v == nil then return true, M.zero_value(comp) end
    if comp.opaque then return false end
    return M.read_fields(comp, v, M.zero_value(comp))
end

-- Deep equality that treats NaN as equal to NaN and compares Lua values by identity.
function M.same(a, b)
    if a == b then return true end
    local ta, tb = type(a), type(b)
    if ta == "number" and tb == "number" then return a ~= a and b ~= b end
    if ta ~= "table" or tb ~= "table" then return false end
    for k, v in next, a do
        if not M.same(v, rawget(b, k)) then return false end
    end
    for k in next, b do
        if rawget(a, k) == nil then return false end
    end
    return true
end

-- What reading a stored value gives: char fields stop at their first NUL.
function M.visible_field(f, v)
    if f.type.kind == "char" and type(v) == "string" then
        local nul = v:find("\0", 1, true)
        return nul and v:sub(1, nul - 1) or v
    end
    return v
end

function M.visible(comp, v)
    if type(v) ~= "table" or v == M.NIL or comp.kind == "lua" or not comp.fields then return v end
    local out
    for _, f in ipairs(comp.fields) do
        if f.type.kind == "char" then
            out = out or M.copy(v)
            out[f.name] = M.visible_field(f, v[f.name])
        end
    end
    return out or v
end

-- Where two values first differ, as "path: a vs b" (for messages).
function M.diff(a, b, path)
    path = path or ""
    if M.same(a, b) then return nil end
    if type(a) == "table" and type(b) == "table" and a ~= M.NIL and b ~= M.NIL then
        local keys = {}
        for k in next, a do keys[#keys + 1] = k end
        for k in next, b do if rawget(a, k) == nil then keys[#keys + 1] = k end end
        table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
        for _, k in ipairs(keys) do
            local d = M.diff(rawget(a, k), rawget(b, k), path .. "." .. tostring(k))
            if d then return d end
        end
    end
    return string.format("%s: %s vs %s", path == "" and "value" or path:sub(2), M.describe(a), M.describe(b))
end

-- The bytes a value occupies, to tell whether a write changed a row (for change ticks).
local function element_bytes(t, v, out)
    local k = t.kind
    if k == "bool" then out[#out + 1] = v and "\1" or "\0"
    elseif k == "int" then out[#out + 1] = N.i8_bytes(v)
    elseif k == "f32" then out[#out + 1] = N.f32_bytes(v)
    elseif k == "f64" then out[#out + 1] = N.f64_bytes(v)
    elseif k == "vec" then for _, key in ipairs(t.keys) do out[#out + 1] = N.f32_bytes(v[key]) end
    elseif k == "mat" then for i = 1, 16 do out[#out + 1] = N.f32_bytes(v[i]) end
    end
end

function M.field_bytes(f, v)
    local out = {}
    if f.type.kind == "char" then
        out[1] = v .. string.rep("\0", f.count - #v)
    elseif f.count == 1 then
        element_bytes(f.type, v, out)
    else
        for i = 1, f.count do element_bytes(f.type, v[i], out) end
    end
    return table.concat(out)
end

function M.value_bytes(comp, value)
    if comp.kind ~= "data" then return tostring(value) end
    local out = {}
    for _, f in ipairs(comp.fields) do
        local v = value[f.name]
        if f.type.kind == "char" then
            out[#out + 1] = v .. string.rep("\0", f.count - #v)
        elseif f.count == 1 then
            element_bytes(f.type, v, out)
        else
            for i = 1, f.count do element_bytes(f.type, v[i], out) end
        end
    end
    return table.concat(out)
end

function M.describe(v, depth)
    depth = depth or 0
    if v == M.NIL then return "NIL" end
    if type(v) == "string" then return string.format("%q", #v > 40 and v:sub(1, 40) .. "..." or v) end
    if type(v) ~= "table" or depth > 2 then return tostring(v) end
    local keys = {}
    for k in next, v do keys[#keys + 1] = k end
    table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
    local parts = {}
    for i, k in ipairs(keys) do
        if i > 8 then
            parts[#parts + 1] = "..."
            break
        end
        parts[#parts + 1] = tostring(k) .. "=" .. M.describe(v[k], depth + 1)
    end
    return "{" .. table.concat(parts, ", ") .. "}"
end

---------------------------------------------------------------------------------------------
-- The world model.
---------------------------------------------------------------------------------------------

function M.new(world, label)
    local m = setmetatable({}, M)
    m.world = world
    m.label = label
    m.comps = {}          -- name -> {name, id, kind, fields, sig}
    m.comp_names = {}     -- sorted
    m.by_id = {}
    m.ncomps = 0          -- kiln_component_count
    m.alive = {}          -- entity -> {comps = {name -> value}, ticks = {name -> tick}}
    m.alive_list = {}
    m.alive_pos = {}
    m.dead = {}           -- recently despawned handles (ring)
    m.reserved = {}       -- deferred spawns not landed yet
    m.zombies = {}        -- handles a failing system spawned (its buffer dropped), see below
    m.maxgen = {}         -- slot index -> the highest generation the world handed out there
    m.tick = 1
    m.defer_depth = 0
    m.world_queue = {}
    m.cur_sys = nil
    m.events = {}         -- name -> {layout, prev = {}, cur = {}}
    m.event_names = {}
    m.lua_resources = {}  -- name -> value
    m.comp_resources = {} -- name -> value
    m.systems = {}        -- declaration order
    m.system_by_name = {}
    m.queries = {}
    m.closed = false
    return m
end

function M:add_comp(name, id, kind, layout)
    local c = {name = name, id = id, kind = kind, fields = layout and layout.fields or {},
               sig = kind == "lua" and "lua" or (layout and M.signature(layout)), layout = layout}
    self.comps[name] = c
    self.by_id[id] = c
    self.comp_names[#self.comp_names + 1] = name
    table.sort(self.comp_names)
    if id > self.ncomps then self.ncomps = id end
    return c
end

-- A name as the C side sees it: cut at the first NUL.
function M.cname(s)
    local nul = s:find("\0", 1, true)
    return nul and s:sub(1, nul - 1) or s
end

-- Resolves a component argument like klua_check_component: comp | nil (an error).
function M:resolve(arg)
    if type(arg) == "string" then
        if arg:find("\0", 1, true) then return nil end -- names never hold zero bytes
        local c = self.comps[arg]
        if not c or c.internal then return nil end
        return c
    elseif N.mtype(arg) == "integer" then
        if arg <= 0 or arg > self.ncomps then return nil end
        local c = self.by_id[arg]
        if c and c.internal then return nil end
        return c or false -- false: a valid id the model does not track
    end
    return nil
end

function M:entity_arg(v)
    -- klua_check_entity: a number with an integer value, not negative
    if type(v) ~= "number" then return nil end
    local i = N.tointeger(v)
    if i == nil or i < 0 then return nil end
    return i
end

function M:is_alive(e) return self.alive[e] ~= nil end

function M:count() return #self.alive_list end

-- Remembers that the world handed e out (spawned or reserved it).
function M:saw(e)
    local idx, gen = N.low_bits(e, 32), N.shr(e, 32)
    if (self.maxgen[idx] or 0) < gen then self.maxgen[idx] = gen end
end

-- Whether the world ever handed out p or a later handle of its slot: a handle with the
-- placeholder bit or stray bits, generation 0, or a slot or generation the world has not
-- reached is refused as a parent (it would come alive as some later spawn).
function M:issued(p)
    local gen = N.shr(p, 32)
    if gen == 0 or gen > 0x1FFFFF then return false end
    local g = self.maxgen[N.low_bits(p, 32)]
    return g ~= nil and gen <= g
end

function M:make_alive(e, comps)
    self:saw(e)
    local rec = {comps = {}, ticks = {}}
    self.alive[e] = rec
    self.alive_list[#self.alive_list + 1] = e
    self.alive_pos[e] = #self.alive_list
    self.reserved[e] = nil
    for name, v in pairs(comps or {}) do
        rec.comps[name] = v
        rec.ticks[name] = self.tick
    end
    return rec
end

function M:kill(e)
    local pos = self.alive_pos[e]
    local last = self.alive_list[#self.alive_list]
    self.alive_list[pos] = last
    self.alive_pos[last] = pos
    self.alive_list[#self.alive_list] = nil
    self.alive_pos[e] = nil
    self.alive[e] = nil
    self.dead[#self.dead + 1] = e
    if #self.dead > 64 then table.remove(self.dead, 1) end
end

function M:set_value(e, name, value, stamp)
    local rec = self.alive[e]
    rec.comps[name] = value
    if stamp then rec.ticks[name] = self.tick end
end

function M:remove_value(e, name)
    local rec = self.alive[e]
    rec.comps[name] = nil
    rec.ticks[name] = nil
end

-- The parent link of e (Parent.entity), or nil.
function M:parent_of(e)
    local rec = self.alive[e]
    local p = rec and rec.comps.Parent
    return p and p.entity
end

-- kiln_children: live entities whose Parent is e, by handle.
function M:children(e)
    local out = {}
    if not self.alive[e] then return out end
    for _, c in ipairs(self.alive_list) do
        if self:parent_of(c) == e then out[#out + 1] = c end
    end
    table.sort(out)
    return out
end

-- The entities despawn_recursive(root) removes: root and everything below it, each once
-- (Parent links written directly may form a cycle).
function M:descendants(root)
    local order, seen, head = {root}, {[root] = true}, 1
    local kids = {}
    for _, c in ipairs(self.alive_list) do
        local p = self:parent_of(c)
        if p then
            kids[p] = kids[p] or {}
            table.insert(kids[p], c)
        end
    end
    while head <= #order do
        local e = order[head]
        head = head + 1
        for _, c in ipairs(kids[e] or {}) do
            if not seen[c] then
                seen[c] = true
                order[#order + 1] = c
            end
        end
    end
    return order
end

-- The Parent check hook (transform addon): a value linking e to itself or into a cycle
-- through e is refused; any other value, and any other component, passes.
function M:value_ok(e, comp, v)
    if comp.name ~= "Parent" or type(v) ~= "table" then return true end
    local p = N.tointeger(v.entity)
    if p == nil or p == 0 then return true end
    if p == e then return false end
    -- a parent that is not alive: a dead link, unless the world never handed it out
    if not self.alive[p] and not self.reserved[p] and not self:issued(p) then return false end
    if e == nil or e == 0 then return true end
    return self:parent_ok(e, p)
end

-- Whether e's value of comp with some fields changed (name -> value, or a list of
-- {name, value}) passes the check hook, as a loop's write-back asks before writing it.
function M:write_ok(e, comp, changed)
    local cur = self.alive[e] and self.alive[e].comps[comp.name]
    if cur == nil then return true end
    local nv = M.copy(cur)
    for k, x in pairs(changed) do
        if type(k) == "number" then nv[x[1]] = x[2] else nv[k] = x end
    end
    return self:value_ok(e, comp, nv)
end

-- kiln_set_parent's cycle walk, on the model: true when child may take parent.
function M:parent_ok(child, parent)
    local cur, depth = parent, 0
    while cur ~= nil and cur ~= 0 do
        if cur == child or depth >= 256 then return false end
        local p = self:parent_of(cur)
        -- parent_of: a dead parent or a self link makes cur a root
        if p == nil or p == cur or not self.alive[p] then cur = nil else cur = p end
        depth = depth + 1
    end
    return true
end

---------------------------------------------------------------------------------------------
-- Deferred work: queued where the world queues it, landed when the world lands it.
---------------------------------------------------------------------------------------------

-- True when structural calls are queued rather than done now.
function M:deferred()
    return self.defer_depth > 0 or (self.cur_sys ~= nil and not self.cur_sys.exclusive)
end

function M:queue()
    if self.cur_sys and not self.cur_sys.exclusive then return self.cur_sys.queue end
    return self.world_queue
end

-- A deferred call's target must be alive or reserved (check_deferred_target).
function M:deferred_target_ok(e)
    return self.alive[e] ~= nil or self.reserved[e] ~= nil or self.zombies[e] ~= nil
end

-- Whether comp's value v holds, in an entity field, a handle with a placeholder's bit (2^62):
-- a system's buffer or the deferred queue drops such a change as it lands (kiln.h, placeholders).
function M.holds_placeholder(comp, v)
    if type(v) ~= "table" or not comp or not comp.fields then return false end
    for _, f in ipairs(comp.fields) do
        if f.type.enum == "entity" then
            local x = v[f.name]
            for _, y in ipairs(type(x) == "table" and x or {x}) do
                local i = N.tointeger(y)
                if i and i >= 4611686018427387904 then return true end
            end
        end
    end
    return false
end

function M:apply_queue(q)
    for _, op in ipairs(q) do
        local k = op.op
        if k == "spawn" then
            local dropped = false -- a spawn whole, with a value a placeholder's bit drops
            for name, v in pairs(op.comps) do dropped = dropped or M.holds_placeholder(self.comps[name], v) end
            if dropped then
                self.reserved[op.e] = nil
            elseif self.reserved[op.e] then
                self:make_alive(op.e, nil)
                for name, v in pairs(op.comps) do self:set_value(op.e, name, v, true) end
            end
        elseif k == "despawn" then
            if self.alive[op.e] then self:kill(op.e) end
        elseif k == "add" then
            -- the check hook runs again when the queue lands: a refused value is dropped
            if self.alive[op.e] and self:value_ok(op.e, self.comps[op.name], op.value)
                and not M.holds_placeholder(self.comps[op.name], op.value) then
                self:set_value(op.e, op.name, op.value, true)
            end
        elseif k == "remove" then
            if self.alive[op.e] then self:remove_value(op.e, op.name) end
        elseif k == "emit" then
            local ev = self.events[op.name]
            if not M.holds_placeholder(ev, op.value) then ev.cur[#ev.cur + 1] = op.value end
        end
    end
end

function M:enter_loop() self.defer_depth = self.defer_depth + 1 end

function M:leave_loop()
    self.defer_depth = self.defer_depth - 1
    if self.defer_depth == 0 then
        local q = self.world_queue
        self.world_queue = {}
        self:apply_queue(q)
    end
end

-- A system buffer that will never land: the slots its spawns reserved are given back, so
-- their handles are dead (a later call on one raises).
function M:drop_queue(q)
    for _, op in ipairs(q) do
        if op.op == "spawn" and self.reserved[op.e] then
            self.reserved[op.e] = nil
        end
    end
end

return M
