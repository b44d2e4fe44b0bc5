-- harness.lua: the prelude of every program gen.lua writes: prints one transcript line per
-- operation, in a form equal under Lua 5.4 and LuaJIT unless the binding behaves differently.
-- Normalised, and only these, as docs/lua-api.md (LuaJIT) documents them unavoidable:
-- numbers (one number type in LuaJIT: every number prints as the double it converts to, so
-- 3 and 3.0 print alike and a 64-bit value beyond 2^53 prints rounded), numbers inside
-- world:inspect and q:format text (H.pretty: "kiln.pretty prints 5.0 as 5"), the traceback
-- of a system failure (the interpreter's own text), the change ticks of rows FFI views may
-- have stamped without a write (H.reach, "~"), and from mods (H.modmsg, H.modres) the scratch
-- folder's name, the interpreter's wording of runtime errors and mods:list()'s memory figures.
-- Nothing else is rewritten.
local kiln = require "kiln"
local H = {}
local fmt, concat, sort = string.format, table.concat, table.sort

-- A number as the double it is: "%.17g" converts a Lua 5.4 integer to a double first, as
-- LuaJIT's lua_pushinteger does. NaN prints without its sign (printf's sign of a NaN is
-- the platform's, not kiln's).
function H.num(n)
    if n ~= n then return "nan" end
    return fmt("%.17g", n)
end

local function str(s)
    return '"' .. s:gsub('[%c"\\\128-\255]', function(c) return fmt("\\%03d", c:byte()) end) .. '"'
end

-- Any value the binding returns, tables by sorted keys; views are read by H.R readers.
function H.show(v, depth)
    local t = type(v)
    if t == "number" then return H.num(v)
    elseif t == "string" then return str(v)
    elseif t == "table" then
        depth = (depth or 0) + 1
        if depth > 6 then return "{...}" end
        local keys = {}
        for k in next, v do keys[#keys + 1] = k end -- raw: LuaJIT's pairs ignores __pairs
        local shown = {}
        for i, k in ipairs(keys) do shown[i] = {H.show(k, depth), k} end
        sort(shown, function(a, b) return a[1] < b[1] end)
        local parts = {}
        for i, p in ipairs(shown) do parts[i] = p[1] .. "=" .. H.show(rawget(v, p[2]), depth) end
        return "{" .. concat(parts, ",") .. "}"
    elseif t == "nil" or t == "boolean" then return tostring(v)
    else return "<" .. t .. ">" end
end

-- A pcall's outcome: "ok v1 v2 ..." or "err message".
function H.res(ok, ...)
    if not ok then return "err " .. H.show((...)) end
    local parts = {"ok"}
    for i = 1, select("#", ...) do parts[#parts + 1] = H.show((select(i, ...))) end
    return concat(parts, " ")
end

-- Text from a mod (its log, a load's or a failure's message): the mods' scratch folder (a
-- name of the run's own) as MODS, and the interpreter's wording of a runtime error in
-- LuaJIT's form ("attempt to index global 'io' (a nil value)", which Lua 5.4 words
-- "attempt to index a nil value (global 'io')"): docs/lua-api.md (LuaJIT, Messages).
function H.modmsg(s)
    if type(s) ~= "string" then return s end
    if H.dir then
        local at = 1
        while true do
            local i, j = s:find(H.dir, at, true)
            if not i then break end
            s = s:sub(1, i - 1) .. "MODS" .. s:sub(j + 1)
            at = i + 4
        end
    end
    return (s:gsub("attempt to ([%a ]-) an? (%a+) value %((%a+) '([^']*)'%)", "attempt to %1 %3 '%4' (a %2 value)"))
end

-- A mod manager's answer: an info table (without memory and memory_peak: each interpreter's
-- state allocates its own way) or nil and a message; a list of such tables, of lines.
local function modinfo(v)
    if type(v) ~= "table" then return H.modmsg(v) end
    local t = {}
    for k, x in next, v do
        if k ~= "memory" and k ~= "memory_peak" then t[k] = type(x) == "table" and modinfo(x) or H.modmsg(x) end
    end
    return t
end
function H.modres(...)
    local t = {}
    for i = 1, select("#", ...) do t[i] = modinfo((select(i, ...))) end
    return t
end
function H.modlist(list)
    return H.modres(list)
end
function H.write(name, text)
    local f = assert(io.open(H.dir .. "/" .. name, "w"))
    f:write(text)
    f:close()
end

-- world:progress's failures without their tracebacks (a mod's message normalised).
function H.failures(list)
    if type(list) ~= "table" then return H.show(list) end
    local parts = {}
    for i, f in ipairs(list) do
        local m = f.mod and H.modmsg(f.message) or f.message
        parts[i] = fmt("{%s %s%s}", tostring(f.system), H.show(m), f.disabled and " disabled" or "")
    end
    return concat(parts, ",")
end

-- Text from kiln's pretty printers (world:inspect, q:format), which print a number as an
-- integer when its value is integral under LuaJIT and by its subtype under Lua 5.4 ("kiln.pretty
-- prints 5.0 as 5", so -0.0 prints as 0 and 1e10 without an exponent there): each number is
-- printed again by the LuaJIT rule, and the column padding that follows from its width is
-- collapsed to one space.
function H.pretty(s)
    if type(s) ~= "string" then return s end
    s = s:gsub("%-?%d+%.?%d*e?[%+%-]?%d*", function(t)
        local n = tonumber(t)
        if not n then return t end
        if n == math.floor(n) and math.abs(n) < 2^53 then return fmt("%.0f", n == 0 and 0 or n) end
        return fmt("%.14g", n)
    end)
    return (s:gsub(" +", " "):gsub("%-%-+", "-"))
end

-- A checksum of a string (saved data), exact in a double and a Lua 5.4 integer alike.
function H.sum(s)
    local h = 0
    for i = 1, #s do h = (h * 31 + s:byte(i)) % 2147483647 end
    return h
end

H.log = {}
function H.say(s) H.log[#H.log + 1] = s end
function H.take()
    local s = concat(H.log, ";")
    H.log = {}
    return s
end

-- Change ticks. Under LuaJIT an FFI view stamps every row of a writable term its loop
-- reaches, at the world's tick, even when the loop only read it (docs/lua-api.md, FFI views:
-- "Marking"); the table path stamps only rows whose bytes changed. So a loop that may have FFI
-- views calls H.reach(e, names...) for each row it reaches, and H.op taints every entity
-- holding a component H.systems_touch lists (the systems' loops) whenever a frame ran: a tainted pair's
-- tick prints as "~" while it is not past the taint's tick (both stamps are at most that
-- tick); a later write on both, at a later tick, prints again.
H.taint, H.names, H.mod_names, H.E, H.nE = {}, {}, {}, {}, 0
local function taint(name, e, t)
    local m = H.taint[name]
    if not m then m = {}; H.taint[name] = m end
    m[e] = t
end
function H.reach(e, ...)
    local t = H.now -- the operation's tick (set by H.op): no loop runs across a frame
    for i = 1, select("#", ...) do taint((select(i, ...)), e, t) end
end
-- Components a system's loop (whose views may be FFI views) may stamp: after a frame every
-- entity holding one is tainted (not only the loop's rows: the frame may have changed which
-- entities its query matches since).
H.watch, H.single = {}, {}
function H.systems_touch(...)
    for i = 1, select("#", ...) do H.watch[(select(i, ...))] = true end
end
local function taint_systems(w)
    local t = w:tick()
    for name in pairs(H.watch) do
        H.single[name] = H.single[name] or w:query{name}
        local ok, list = pcall(H.single[name].entities, H.single[name])
        if ok then
            for _, e in ipairs(list) do taint(name, e, t) end
        end
    end
end

-- The change ticks of every component (H.names) of the entities the program spawned one by
-- one (H.E) and of the last 16 H.more named (spawned in loops), "-" for absent.
function H.ticks(w)
    local out, seen = {}, {}
    local function one(e)
        if seen[e] or not w:is_alive(e) then return end
        seen[e] = true
        local row, has = {}, {}
        for _, name in ipairs(w:components(e)) do has[name] = true end
        for j, name in ipairs(H.names) do
            local t = has[name] and w:changed_tick(e, name) or 0
            local m = H.taint[name]
            if t == 0 then t = "-"
            elseif m and m[e] and t <= m[e] then t = "~"
            else t = H.num(t) end
            row[j] = t
        end
        for _, name in ipairs(H.mod_names) do -- the mods' components, once one defines them
            local t, m = has[name] and w:changed_tick(e, name) or 0, H.taint[name]
            row[#row + 1] = t == 0 and "-" or m and m[e] and t <= m[e] and "~" or H.num(t)
        end
        out[#out + 1] = H.num(e) .. "=" .. concat(row, ".")
    end
    for i = 1, H.nE do
        if type(H.E[i]) == "number" then one(H.E[i]) end
    end
    for _, e in ipairs(H.extra) do one(e) end
    return concat(out, " ")
end
-- An entity of a loop of spawns whose change ticks H.ticks prints too (the last 16 named).
H.extra = {}
function H.more(e)
    if #H.extra == 16 then table.remove(H.extra, 1) end
    H.extra[#H.extra + 1] = e
end

-- One operation: its outcome, then the world's count, tick and hash and the change ticks
-- (outside any loop).
function H.op(n, w, f)
    local before = w:tick()
    H.now = before
    local text = H.res(pcall(f))
    if w:tick() ~= before then taint_systems(w) end
    local after = H.res(pcall(function() return w:count(), w:tick(), w:hash(), H.ticks(w) end))
    io.write(fmt("%d %s | %s\n", n, text, after))
end

H.kiln = kiln
return H
