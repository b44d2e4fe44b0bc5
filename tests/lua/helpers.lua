-- helpers.lua: fixtures shared by the kiln busted specs: worlds with the usual components,
-- deterministic world snapshots, error matching, garbage measurement and child interpreters.
-- Load with dofile (busted's globals such as `it` and `pending` are not visible here).
local kiln = require "kiln"
local assert = require "luassert"

local H = {}

-- A world with the components most specs use.
function H.world(options)
    local w = kiln.world(options)
    w:component("Position", "float x, y;")
    w:component("Velocity", "float x, y;")
    w:component("Health", "int32_t hp, max;")
    w:component("Frozen")
    return w
end

-- A world of n movers (Position and Velocity), its query over both, and its entities.
function H.movers(n)
    local w = H.world()
    local es = {}
    for i = 1, n do es[i] = w:spawn{Position = {x = i, y = -i}, Velocity = {x = 1, y = 0.5}} end
    return w, w:query{"Position", "Velocity"}, es
end

-- A world of n movers (Position, Velocity), plus a frozen one and one with Position only:
-- the world, the movers' entities, the frozen one and the still one.
function H.movers_mixed(n)
    local w = H.world()
    local es = {}
    for i = 1, n do es[i] = w:spawn{Position = {x = i, y = -i}, Velocity = {x = 1, y = 2}} end
    local frozen = w:spawn{Position = {x = 100}, Velocity = {x = 1}, Frozen = true}
    local still = w:spawn{Position = {x = 200}}
    return w, es, frozen, still
end

-- "12v3": how the binding names an entity in messages (slot index v generation).
function H.entity_str(e)
    return string.format("%dv%d", e % 2 ^ 32, math.floor(e / 2 ^ 32) % 2 ^ 21)
end

-- The float nearest to x, as a float32 field stores it.
if string.pack then
    function H.f32(x)
        return (string.unpack("f", string.pack("f", x)))
    end
else -- LuaJIT
    local box = require("ffi").new("float[1]")
    function H.f32(x)
        box[0] = x
        return box[0]
    end
end

-- True under LuaJIT, whose numbers are all floats (docs/lua-api.md, LuaJIT).
H.luajit = type(jit) == "table"

-- The text of a file of the repository, path relative to its root (docs/kiln.d.lua).
function H.read_repo_file(path)
    local root = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "../../"
    local f = assert(io.open(root .. path, "rb"))
    local text = f:read("*a")
    f:close()
    return text
end

-- math.type where there is one; under LuaJIT an integral number below 2^53 is an integer.
function H.number_type(v)
    if math.type then return math.type(v) end
    if type(v) ~= "number" then return nil end
    return (v == math.floor(v) and math.abs(v) < 2 ^ 53) and "integer" or "float"
end
-- Makes garbage whose finalizer calls fn (LuaJIT runs __gc of userdata only).
function H.finalizer(fn)
    if not H.luajit then return setmetatable({}, {__gc = fn}) end
    local proxy = newproxy(true)
    getmetatable(proxy).__gc = fn
    return proxy
end

H.tointeger = math.tointeger or function(v)
    if H.number_type(v) == "integer" then return v end
    return nil
end

-- A deterministic text form of any value (tables with keys in sorted order).
local function dump(v, out)
    local t = type(v)
    if t == "table" then
        local keys = {}
        for k in pairs(v) do keys[#keys + 1] = k end
        table.sort(keys, function(a, b)
            if type(a) == type(b) and (type(a) == "number" or type(a) == "string") then return a < b end
            return tostring(a) < tostring(b)
        end)
        out[#out + 1] = "{"
        for _, k in ipairs(keys) do
            dump(k, out)
            out[#out + 1] = "="
            dump(v[k], out)
            out[#out + 1] = ","
        end
        out[#out + 1] = "}"
    elseif t == "number" then
        out[#out + 1] = H.number_type(v) == "integer" and string.format("%d", v) or string.format("%.17g", v)
    elseif t == "string" then
        out[#out + 1] = string.format("%q", v)
    else
        out[#out + 1] = tostring(v)
    end
end

function H.dump(v)
    local out = {}
    dump(v, out)
    return table.concat(out)
end

-- Everything a failed call could have touched: entity count, tick, and for every live entity
-- the value and change tick of each named component.
function H.snapshot(w, names)
    local parts = {"count=" .. w:count(), "tick=" .. w:tick()}
    local entities = w:entities()
    table.sort(entities)
    for _, e in ipairs(entities) do
        local row = {H.entity_str(e)}
        for _, name in ipairs(names) do
            if w:has(e, name) then
                row[#row + 1] = name .. "@" .. w:changed_tick(e, name) .. "=" .. H.dump(w:get(e, name))
            end
        end
        parts[#parts + 1] = table.concat(row, " ")
    end
    return table.concat(parts, "\n")
end

H.NAMES = {"Position", "Velocity", "Health", "Frozen"}

-- Calls fn, which must raise; every further argument must appear (plainly) in the message.
-- Returns the message.
function H.raises(fn, ...)
    local ok, err = pcall(fn)
    assert.is_false(ok, "expected an error, but the call returned normally")
    local msg = tostring(err)
    for i = 1, select("#", ...) do
        local want = select(i, ...)
        assert.is_truthy(msg:find(want, 1, true),
                         string.format("error message %q does not mention %q", msg, want))
    end
    return msg
end

-- Like H.raises, and the world (seen through the components in names, H.NAMES when nil)
-- must be exactly as it was before the call.
function H.unchanged(w, names, fn, ...)
    names = names or H.NAMES
    local before = H.snapshot(w, names)
    local msg = H.raises(fn, ...)
    assert.are.equal(before, H.snapshot(w, names), "the failed call changed the world: " .. msg)
    return msg
end

-- True when structural changes land at once, i.e. no iteration was left running.
function H.not_deferred(w)
    local e = w:spawn()
    local alive = w:is_alive(e)
    w:despawn(e)
    return alive
end

-- Under LuaJIT q:each() hands out FFI views (lua/kiln/ffi.lua) where every field reads as
-- its table view does: views are cdata, writes land at once unchecked, every visited row of
-- a writable term is stamped, and a view kept after its loop is caught only with
-- kiln.ffi_debug (docs/lua-api.md, LuaJIT).
H.ffi_each = H.luajit

-- Asserts that got holds the entities of want, in any order (both lists are sorted in place).
function H.same_entities(want, got)
    table.sort(want)
    table.sort(got)
    assert.are.same(want, got)
end

-- Runs fn with kiln.ffi_debug set (under LuaJIT: checked views, which catch a view used
-- after its loop as the table views do), then clears it.
function H.ffi_debug(kiln, fn)
    kiln.ffi_debug = true
    local ok, err = pcall(fn)
    kiln.ffi_debug = nil
    if not ok then error(err, 0) end
end

-- KiB of garbage made by `frames` calls of frame after a warm-up, with the collector stopped.
-- compiled (LuaJIT): measured with the JIT on after a longer warm-up, as FFI views are
-- garbage-free only in compiled code (the interpreter boxes every pointer); on also where an
-- instruction budget armed earlier in the process (another spec file) turned it off for good.
function H.garbage_kib(frame, frames, compiled)
    -- LuaJIT's trace compiler allocates on the Lua heap while it records (and aborts on)
    -- loops that call C functions: what kiln makes is measured with the interpreter
    if H.luajit and not compiled then jit.off() jit.flush() end
    local jit_was = H.luajit and compiled and jit.status()
    if H.luajit and compiled then jit.on() end
    for _ = 1, compiled and 60 or 10 do frame() end
    collectgarbage()
    collectgarbage()
    collectgarbage("stop")
    local before = collectgarbage("count")
    for _ = 1, frames do frame() end
    local after = collectgarbage("count")
    collectgarbage("restart")
    if H.luajit and not compiled then jit.on() end
    if H.luajit and compiled and not jit_was then jit.off() end
    return after - before
end

-- Whether the collector, as it is set now, finishes a cycle while step(i) runs for i = 1, 2, ...:
-- a weakly held table, garbage from the start, must be gone before the heap has grown by three
-- times its size at the start plus 8 MiB (what a stopped collector reaches). The bound scales
-- with the heap because both collectors let it grow to about twice the live data before a
-- cycle starts and then take about as much again to finish it: a fixed bound fails whenever
-- other spec files of the same process left a large heap live (busted keeps every file's
-- tests, and what they hold, until the run ends). No full collection here: under LuaJIT one
-- restarts a stopped collector, which would hide a hold a World method failed to release.
-- Returns the result and the number of calls made.
function H.collector_runs(step)
    local canary = setmetatable({{}}, {__mode = "v"})
    local bound = 4 * collectgarbage("count") + 8192
    local calls = 0
    while canary[1] ~= nil do
        if collectgarbage("count") > bound then return false, calls end
        calls = calls + 1
        step(calls)
    end
    return true, calls
end

-- Runs a chunk in a separate interpreter (same module path, same environment, so the
-- sanitizer preload carries over). Returns whether it exited with status 0, and its output.
-- For behaviour that may abort, crash or hang the process (seconds: killed after that long;
-- stack_kib: the C stack of its main thread, in KiB, as `ulimit -s` sets it).
function H.run_isolated(code, seconds, stack_kib)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(string.format("package.cpath = %q\n", package.cpath), code)
    f:close()
    local lua = os.getenv("KILN_LUA") or "lua5.4"
    local limit = seconds and string.format("timeout %d ", seconds) or ""
    local stack = stack_kib and string.format("ulimit -s %d && ", stack_kib) or ""
    local p = io.popen(stack .. limit .. lua .. " " .. path .. " 2>&1")
    local out = p:read("a")
    local ok = p:close()
    os.remove(path)
    return ok == true, out
end

-- How many of fn's spawns on w took world:spawn's FFI path (kiln.ffi_spawns: 0 under Lua 5.4).
function H.ffi_spawn_count(kiln, w, fn)
    local before = kiln.ffi_spawns(w)
    fn()
    return kiln.ffi_spawns(w) - before
end

-- Calls fn with a count hook that raises once, at fn's n-th instruction, for n = 1, 2, ...
-- (at most limit) until fn runs to its end; after each raise check(n) must hold. Interpreted
-- under LuaJIT (compiled code calls no hooks), as a budget runs: a spent budget's hook raises
-- this way.
function H.every_raise(fn, check, limit)
    local jit_was = H.luajit and jit.status()
    if H.luajit then jit.off() end
    local n, finished = 0, false
    while not finished and n < limit do
        n = n + 1
        local count = 0
        finished = pcall(function()
            debug.sethook(function()
                count = count + 1
                if count == n then error("raised by the hook", 0) end
            end, "", 1)
            fn()
            debug.sethook()
        end)
        debug.sethook()
        check(n)
    end
    if H.luajit and jit_was then jit.on() end
    assert(finished, "fn never ran to its end")
    assert(n > 3, "the hook raised nowhere")
end

-- H.every_stop(fn, check, limit): runs fn under a hook that, from its n-th instruction on,
-- raises at every one, for n = 1, 2, ... until fn runs to its end (at most limit times), then
-- check(n, ok, err) after each: what a spent budget or a console statement's time limit does
-- (no pcall inside swallows it). Lines of the calling spec and of this file are spared, so
-- that they can look afterwards; keep only locals in fn (busted's globals are found by Lua
-- code of its own, which the hook would stop). A callback meant to stand for a user's code
-- must come from a chunk of another name (load with "=user").
function H.every_stop(fn, check, limit)
    local spec, mine = debug.getinfo(2, "S").source, debug.getinfo(1, "S").source
    local sethook, getinfo, pcall, error = debug.sethook, debug.getinfo, pcall, error
    local jit_was = H.luajit and jit.status()
    if H.luajit then jit.off() end -- compiled code calls no hooks
    local n, ok, err = 0, false, nil
    while not ok and n < limit do
        n = n + 1
        local count = 0
        sethook(function()
            count = count + 1
            if count < n then return end
            local source = getinfo(2, "S").source
            if source ~= spec and source ~= mine then error("stopped", 0) end
        end, "", 1)
        ok, err = pcall(fn)
        sethook()
        check(n, ok, err)
    end
    if H.luajit and jit_was then jit.on() end
    assert(ok, "fn never ran to its end")
    assert(n > 3, "the hook stopped nothing")
end

-- H.instructions(fn) -> the VM instructions fn() ran (counted by a hook in hundreds: the
-- work, never the time) and fn's first result.
function H.instructions(fn)
    local jit_was = H.luajit and jit.status()
    if H.luajit then jit.off() end -- compiled code calls no hooks
    local count = 0
    debug.sethook(function() count = count + 1 end, "", 100)
    local result = fn()
    debug.sethook()
    if H.luajit and jit_was then jit.on() end
    return count * 100, result
end


-- H.in_locale(category, names, probe, fn) runs fn with the C locale's category ("numeric",
-- "ctype") set to the first of names that is installed and passes probe() (as a host that
-- called setlocale(LC_ALL, "") on a player's machine has it), puts the locale back and
-- raises what fn raised; false when none is installed (the caller marks its test pending).
-- LuaJIT formats numbers and matches patterns by itself, so there probe is not asked.
local function in_locale(category, names, probe, fn)
    local was = os.setlocale(nil, category)
    local got
    for _, name in ipairs(names) do
        if os.setlocale(name, category) and (H.luajit or probe()) then
            got = name
            break
        end
    end
    if not got then
        os.setlocale(was, category)
        return false
    end
    local ok, err = pcall(fn)
    os.setlocale(was, category)
    if not ok then error(err, 0) end
    return true
end

-- H.in_comma_locale(fn): fn where the C library writes 1.5 as "1,5" (de_DE, fr_FR).
H.COMMA_LOCALE_MISSING = "no decimal-comma locale is installed (as root: localedef -i de_DE -f UTF-8 de_DE.UTF-8)"
function H.in_comma_locale(fn)
    return in_locale("numeric", {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "de_DE", "fr_FR"},
        function() return string.format("%.1f", 0.5) == "0,5" end, fn)
end

-- H.in_latin1_locale(fn): fn where the C library's isalpha(0xE4) is true (a Latin-1 locale).
H.LATIN1_LOCALE_MISSING = "no Latin-1 locale is installed (as root: localedef -i de_DE -f ISO-8859-1 de_DE.ISO-8859-1)"
function H.in_latin1_locale(fn)
    return in_locale("ctype", {"de_DE.ISO-8859-1", "de_DE.iso88591", "fr_FR.ISO-8859-1", "fr_FR.iso88591"},
        function() return ("\228"):find("%a") ~= nil end, fn)
end

return H
