-- ffi_spawn.lua: world:spawn under LuaJIT as code the JIT compiles: init tables read raw, values
-- written through FFI pointers, the core's spawn called through FFI (C half: lua/src/jit_spawn.c).
local kiln, World, _, layer = ...
local S = layer.spawn
local worlds = setmetatable({}, {__mode = "k"}) -- World -> {kw, comps = {name -> rec}, spawns}

-- kiln.ffi_spawns(world): how many entities world:spawn made on world through the FFI path (0
-- where there is none: Lua 5.4, a mod's state). For tests and profiling.
function kiln.ffi_spawns(w)
    local wc = worlds[w]
    if not wc and layer.typename(w) ~= "kiln.World" then -- (inspect.lua, loaded later, sets it)
        error(layer.bad_argument(1, "kiln.ffi_spawns", "kiln.World expected, got " .. layer.typename(w)), 2)
    end
    return wc and wc.spawns or 0
end
if not S then return end -- Lua 5.4, or a state without the ffi library: the C path only

-- Every input the FFI path does not take, and every error, goes to the C path, which raises as
-- it always did: the FFI path changes nothing before its one call into the core, which spawns
-- or refuses whole. So the messages and the rules (access, deferral, hooks) are the C path's.
local ffi = layer.views.ffi
local next, type, tonumber, floor, format = next, type, tonumber, math.floor, string.format
-- held at load, as everything this file calls at run time: a script that later replaces a
-- global or a library function changes nothing here (ffi.lua does the same)
local assert, ipairs, load, pcall, setmetatable, concat = assert, ipairs, load, pcall, setmetatable, table.concat
local cast, copy, fill = ffi.cast, ffi.copy, ffi.fill
local band, bor, lshift = bit.band, bit.bor, bit.lshift
-- What guards memory is held where debug.setupvalue cannot reach it: the arrays' bound is a
-- literal (see add), the scratch's pointer and size one FFI struct, the budgets named fields.
assert(S.max == 64, "lua/kiln/ffi_spawn.lua: the C half spawns a different number of components")
local MAX = S.max
local FLT_MAX, HUGE = 3.4028234663852886e38, math.huge
-- A World's klua_world as the FFI path sees it: its two budgets (int64_t) as named fields. Its
-- own type, which the core's spawn takes: no other cdata converts to it.
local I, B = S.instructions_at, S.budget_limit_at
assert(I % 8 == 0 and B > I and (B - I) % 8 == 0, "lua/kiln/ffi_spawn.lua: a budget field is not 8-aligned")
local KW = ffi.typeof(format("const struct { int64_t pad0[%d]; int64_t instructions; int64_t pad1[%d]; " ..
    "int64_t budget_limit; } *", I / 8, (B - I) / 8 - 1))
local API = ffi.typeof([[const struct { double (*spawn)($, void *, const uint32_t *, const void *const *,
  int32_t, const double *, double); } *]], KW)
local core_spawn = cast(API, S.api).spawn
local STATE = cast("void *", S.state) -- the core's spawn refuses while a debug hook is set on it

-- The scratch a spawn converts its values into (one 16-byte-aligned slot per component), and
-- the arrays handed to the core: one set per Lua state, with no flag that says a spawn is
-- filling them (a raise between setting and clearing it would leave it set). Instead each
-- spawn takes a number of its own (its ticket) and writes it to owner[0] before it fills
-- anything, and the core spawns only for the ticket owner[0] holds: a spawn that starts while
-- another fills the scratch (a finalizer the collector runs mid-spawn) takes owner[0], and the
-- one it interrupted goes to the C path when the core refuses its ticket.
local comps = ffi.new("uint32_t[?]", MAX)
local values = ffi.new("const void *[?]", MAX)
local owner = ffi.new("double[1]")
local tickets = 0 -- spawns begun in this state: the last ticket handed out
-- buf (aligned) in the last and largest of blocks. A block is never let go: a spawn that a
-- nested spawn's grow interrupted may still write into the block it had (its ticket is then
-- refused, but its writes must land in live memory). The blocks double: all of them together
-- stay under twice the last.
local blocks = {}
local scratch = ffi.new("struct { uint8_t *buf; double cap; }") -- buf, and the bytes it holds

-- Makes the scratch hold at least size bytes, keeping its first used bytes and moving the n
-- value pointers already set into it. buf is set before cap, so a spawn interrupted between
-- the two never reads a cap larger than the buf it reads after it.
local function grow(size, used, n)
    local buf, cap = scratch.buf, scratch.cap
    local ncap = cap > 0 and cap or 256
    while ncap < size do ncap = ncap * 2 end
    local nblock = ffi.new("uint8_t[?]", ncap + 16)
    blocks[#blocks + 1] = nblock
    local nbuf = nblock + (16 - tonumber(cast("uintptr_t", nblock)) % 16) % 16
    if used > 0 then copy(nbuf, buf, used) end
    for i = 0, n - 1 do
        if values[i] ~= nil then values[i] = nbuf + (cast("const uint8_t *", values[i]) - buf) end
    end
    scratch.buf = nbuf
    scratch.cap = ncap
end

-- ---- writers: a component's value from its init table --------------------------------------

-- Whether the number x is a float field's value: in range, infinite or NaN (as klua_to_float).
local function float_ok(x)
    return (x <= FLT_MAX and x >= -FLT_MAX) or x ~= x or x == HUGE or x == -HUGE
end

local VEC_KEYS = {x = 0, y = 1, z = 2, w = 3}

-- Element k = x of a vector of width floats at fp, with seen (a bit per element) the ones
-- given so far; returns seen with k's bit, or nil for anything the C path would refuse.
local function vec_put(fp, width, seen, k, x)
    local i = VEC_KEYS[k]
    if i == nil then
        if type(k) ~= "number" or k < 1 or k > width or floor(k) ~= k then return nil end
        i = k - 1
    elseif i >= width then
        return nil
    end
    local b = lshift(1, i)
    if band(seen, b) ~= 0 or type(x) ~= "number" or not float_ok(x) then return nil end
    fp[i] = x
    return bor(seen, b)
end

-- Writes the vector v ({x =, y =, ...} or {1, 2, ...}) into the floats at fp; false for
-- anything the C path would refuse. Straight code, no loop (see writer_source): a fifth key
-- is one too many for any width.
local function write_vec(fp, v, width)
    local seen = 0
    local k, x = next(v)
    if k ~= nil then seen = vec_put(fp, width, seen, k, x); if not seen then return false end; k, x = next(v, k) end
    if k ~= nil then seen = vec_put(fp, width, seen, k, x); if not seen then return false end; k, x = next(v, k) end
    if k ~= nil then seen = vec_put(fp, width, seen, k, x); if not seen then return false end; k, x = next(v, k) end
    if k ~= nil then seen = vec_put(fp, width, seen, k, x); if not seen then return false end; k, x = next(v, k) end
    return k == nil
end

-- Integer types: the pointer written through and the range taken (the 64-bit ones only while
-- exact in a double; beyond, the C path decides).
local INTS = {
    int8 = {"int8_t", -128, 127}, int16 = {"int16_t", -32768, 32767},
    int32 = {"int32_t", -2147483648, 2147483647}, int64 = {"int64_t", -2 ^ 53, 2 ^ 53},
    uint8 = {"uint8_t", 0, 255}, uint16 = {"uint16_t", 0, 65535}, uint32 = {"uint32_t", 0, 4294967295},
    uint64 = {"uint64_t", 0, 2 ^ 53}, entity = {"uint64_t", 0, 2 ^ 53},
}
local PTR = {float = ffi.typeof("float *"), double = ffi.typeof("double *"), bool = ffi.typeof("bool *")}
for name, t in pairs(INTS) do PTR[name] = ffi.typeof(t[1] .. " *") end
local PTR_NAMES = {}
for name in pairs(PTR) do PTR_NAMES[#PTR_NAMES + 1] = name end
table.sort(PTR_NAMES)
local VEC_WIDTH = {vec2 = 2, vec3 = 3, vec4 = 4, quat = 4}
local FLOAT_BAD = format("(x > %.17g or x < -%.17g) and x ~= HUGE and x ~= -HUGE", FLT_MAX, FLT_MAX)

-- The Lua statements that check x and write it as field f of the value at p (false out of
-- the writer for anything the C path would refuse or the FFI path leaves to it); the pointer
-- types they name (P_<type>) are locals of the generated chunk.
local function field_code(f)
    local at = format("p + %d", f.offset)
    local one = f.count <= 1
    if f.type == "char" then
        return format("if type(x) ~= 'string' or #x >= %d then return false end\n    fill(%s, %d)\n    copy(%s, x, #x)",
                      f.count, at, f.count, at)
    elseif one and f.type == "float" then
        return format("if type(x) ~= 'number' or (%s) then return false end\n    cast(P_float, %s)[0] = x", FLOAT_BAD, at)
    elseif one and f.type == "double" then
        return format("if type(x) ~= 'number' then return false end\n    cast(P_double, %s)[0] = x", at)
    elseif one and f.type == "bool" then
        return format("if type(x) ~= 'boolean' then return false end\n    cast(P_bool, %s)[0] = x", at)
    elseif one and INTS[f.type] then
        local t = INTS[f.type]
        return format("if type(x) ~= 'number' or not (x >= %.17g and x <= %.17g) or floor(x) ~= x then return false end\n" ..
                      "    cast(P_%s, %s)[0] = x", t[2], t[3], f.type, at)
    elseif one and VEC_WIDTH[f.type] then
        return format("if type(x) ~= 'table' or not write_vec(cast(P_float, %s), x, %d) then return false end",
                      at, VEC_WIDTH[f.type])
    end
    return "return false" -- a mat4 or an array: the C path
end

-- The source of a component's writer, write(p, v): the value at p made from its defaults and
-- the fields the table v names, or false for anything the C path would refuse. It is straight
-- code: one next() per key, each key matched against the names in turn (LuaJIT cannot compile
-- a loop inside the caller's loop into the caller's trace, and a short one of its own is slow).
local function writer_source(d)
    local b = {"local next, type, floor, cast, fill, copy, write_vec, HUGE, PTR, D = ...\n"}
    for _, name in ipairs(PTR_NAMES) do b[#b + 1] = format("local P_%s = PTR.%s\n", name, name) end
    b[#b + 1] = "local function put(p, k, x)\n"
    for i, f in ipairs(d.fields) do
        b[#b + 1] = format("  %s k == %q then\n    %s\n", i == 1 and "if" or "elseif", f.name, field_code(f))
    end
    b[#b + 1] = "  else\n    return false\n  end\n  return true\nend\nreturn function(p, v)\n"
    if d.defaults then b[#b + 1] = format("  copy(p, D, %d)\n", d.size) else b[#b + 1] = format("  fill(p, %d)\n", d.size) end
    b[#b + 1] = "  local k, x = next(v)\n"
    for _ = 1, #d.fields do
        b[#b + 1] = "  if k == nil then return true end\n  if not put(p, k, x) then return false end\n  k, x = next(v, k)\n"
    end
    b[#b + 1] = "  return k == nil -- a key more than there are fields: one is unknown\nend\n"
    return concat(b)
end

local makers = {} -- writer source -> the compiled chunk that makes it
-- writer source and defaults -> the writer: one closure for every world and component of a
-- layout, so the trace of a spawn loop, which guards the writer it calls, holds for the next
-- world (with a closure per world, every spawn into a second world left that trace)
local writers = setmetatable({}, {__mode = "v"})

-- The writer of the component describe gave as d, or nil where the C path must run: Lua
-- values, a check hook, no reflected fields, or more fields than one straight writer takes
-- (KILN_MAX_FIELDS is 64; a writer covers at most 16 keys, the usual components).
local function make_writer(d)
    if d.lua or d.check or #d.fields == 0 or #d.fields > 16 then return nil end
    local src = writer_source(d)
    local key = src .. "\0" .. (d.defaults or "")
    local write = writers[key]
    if write then return write end
    local maker = makers[src]
    if not maker then
        maker = assert(load(src, "=lua/kiln/ffi_spawn.lua(generated)"))
        makers[src] = maker
    end
    write = maker(next, type, floor, cast, fill, copy, write_vec, HUGE, PTR, d.defaults)
    writers[key] = write
    return write
end

-- ---- the spawn ----------------------------------------------------------------------------

local WEAK = {__mode = "v"}

-- The record of World self, made on its first spawn; nil for anything but an open World. Its
-- pair {world = self, rec = the record} (weak: kept alive only by the World and worlds) is
-- what the last spawn's world is remembered by.
local function world_rec(self)
    local kw = S.world(self)
    if not kw then return nil end
    local wc = {kw = cast(KW, kw), comps = {}, spawns = 0}
    wc.pair = setmetatable({world = self, rec = wc}, WEAK)
    worlds[self] = wc
    return wc
end

local TAG, DATA, C_PATH = 1, 2, 3 -- what a component record's kind says
-- the pair of the World spawned into last, a look-up a compiled spawn loop makes with two
-- loads instead of hashing the World. One store changes it: a raise between two stores (the
-- World and its record apart) would hand a later spawn another world's record.
local last = setmetatable({}, WEAK)

-- The record {kind, id, slot, write} of component name on the world of wc, or nil when it
-- names none (the C path raises for it).
local function component(wc, self, name)
    if type(name) ~= "string" then return nil end -- a component id, or a number the C path refuses
    local d = S.describe(self, name)
    if not d then return nil end
    local rec = {id = d.id, slot = d.size + (16 - d.size % 16) % 16}
    if d.size == 0 then
        rec.kind = TAG
    else
        rec.write = make_writer(d)
        rec.kind = rec.write and DATA or C_PATH
    end
    wc.comps[name] = rec
    return rec
end

-- Converts the value v of component name into the scratch as the spawn's component n (from 0),
-- after used bytes. Returns the bytes used then, n + 1 and init's next key and value; or nil
-- where the C path must run.
local function add(wc, self, init, name, v, n, used)
    local rec = wc.comps[name] or component(wc, self, name)
    if not rec or n == 64 then return nil end -- MAX, as a literal
    local kind = rec.kind
    if kind == DATA then
        local slot = rec.slot
        if used + slot > scratch.cap then grow(used + slot, used, n) end
        local p = scratch.buf + used
        if type(v) ~= "table" or not rec.write(p, v) then return nil end
        values[n] = p
        used = used + slot
    elseif kind == TAG and v == true then
        values[n] = nil
    else
        return nil
    end
    comps[n] = rec.id
    return used, n + 1, next(init, name)
end

-- Spawns the entity init describes as the spawn holding ticket; returns the entity, or nil,
-- with nothing changed, where the C path must run.
local function try_spawn(self, init, ticket)
    local p = last
    local wc = p.world == self and p.rec
    if not wc then
        wc = worlds[self] or world_rec(self)
        if not wc then return nil end
        last = wc.pair
    end
    -- a world with an instruction budget: the C path, whose cost budgets are made for
    local kw = wc.kw
    if kw.instructions ~= 0 or kw.budget_limit ~= 0 then return nil end
    local used, n = 0, 0
    local k, v = next(init)
    -- the first components one by one, as straight code (see writer_source), the rest in a loop
    if k ~= nil then used, n, k, v = add(wc, self, init, k, v, n, used) end
    if k ~= nil then used, n, k, v = add(wc, self, init, k, v, n, used) end
    if k ~= nil then used, n, k, v = add(wc, self, init, k, v, n, used) end
    if k ~= nil then used, n, k, v = add(wc, self, init, k, v, n, used) end
    while k ~= nil do used, n, k, v = add(wc, self, init, k, v, n, used) end
    if not used then return nil end
    local e = core_spawn(kw, STATE, comps, values, n, owner, ticket)
    if e == 0 then return nil end -- no entity is 0 (generations start at 1)
    wc.spawns = wc.spawns + 1
    return e
end

local spawn = World.spawn -- the C path; so named, its bad-self message names world:spawn

-- try_spawn runs protected: it raises only where the collector ran a finalizer mid-spawn that
-- raised or changed init (next() then may refuse a key), a debug hook raised, or memory ran
-- out, and then the C path decides. Neither can happen once the core spawned: the core
-- refuses while a debug hook is set (every budget runs on one), and from its return to this
-- function's nothing allocates (no collection, so no finalizer runs), so the entity made is
-- always returned. A raise anywhere else leaves nothing set that a later spawn depends on.
function World.spawn(...)
    local self, init = ...
    if type(init) == "table" then
        local ticket = tickets + 1
        tickets = ticket -- before owner[0]: a spawn nested from here on takes a later ticket
        owner[0] = ticket
        local ok, e = pcall(try_spawn, self, init, ticket)
        if ok and e then return e end
    end
    return spawn(...) -- a tail call: the C path's errors name the caller's line, not this one
end
