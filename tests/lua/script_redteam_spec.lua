-- script_redteam_spec.lua: a host script calling kiln back from finalizers while a method of
-- kiln runs, found by a red-team pass over the Lua binding. Each case runs in a child
-- interpreter (H.run_isolated) with a small heap, so the collector, stepping at every
-- allocation, finishes a cycle inside the call within a few trials; a crash, an abort or a
-- sanitizer report fails the case.
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- What every child chunk starts with: trials(setup, hit, call, check[, ready]) runs call 60
-- times, each with a finalizer pending that runs hit at the collector's first step (once
-- ready(s) holds, when given), that step coming at a different point of the call each trial;
-- it prints "fired N" and "ok" at the end.
local prelude = [[
local kiln = require "kiln"
local function finalizer(fn)
    if not jit then return setmetatable({}, {__gc = fn}) end
    local proxy = newproxy(true)
    getmetatable(proxy).__gc = fn
    return proxy
end
local function aggressive()
    if not jit then collectgarbage("incremental") end
    collectgarbage("setpause", 1)
    collectgarbage("setstepmul", 1000)
end
local function trials(setup, hit, call, check, ready)
    local fired = 0
    for trial = 1, 60 do
        local s = setup()
        local armed = true
        aggressive()
        local sink = {} -- garbage that escapes (LuaJIT sinks a table no one reads)
        for i = 1, trial * 53 do sink[i % 16 + 1] = {i} end
        local function arm() -- pcall: LuaJIT raises a finalizer's error out of the collection step
            finalizer(function()
                if not armed then return end
                if ready and not ready(s) then return arm() end -- not yet: one more pending
                armed = false
                fired = fired + 1
                pcall(hit, s)
            end)
        end
        arm()
        local ok, r = pcall(call, s)
        armed = false
        collectgarbage("setpause", 200)
        check(s, ok, r)
        s.w:close()
    end
    print("fired " .. fired)
    -- LuaJIT's collector, on a heap this small, finishes no cycle inside so short a call:
    -- there the cases only check that nothing breaks
    assert(fired > 0 or jit)
end
local function raises_closed(s, ok, r)
    assert(ok or tostring(r):find("attempt to use a .*closed world"), r)
end
]]

local function run(body)
    local ok, out = H.run_isolated(prelude .. body .. "\nprint('ok')\n", 300)
    assert(ok and out:find("ok\n$"), out)
end

describe("cmd:apply called again from a finalizer while it applies", function()
    -- The nested apply landed the record in flight, then the outer one landed it again.
    it("is refused, so no record lands twice and none after a clear", function()
        run([==[
for _, nested in ipairs{"apply", "clear"} do
    trials(function()
        local s = {w = kiln.world(), cmd = kiln.commands()}
        s.w:component("Brain", "lua")
        for i = 1, 200 do s.cmd:spawn{Brain = {i}} end
        return s
    end, function(s)
        s.nested = {pcall(s.cmd[nested], s.cmd, s.w)}
    end, function(s) return s.cmd:apply(s.w) end, function(s, ok, r)
        assert(ok, r)
        -- each record lands once: all of them, or none when a clear came before the apply
        local n = s.w:count()
        assert(n == 200 or (nested == "clear" and n == 0), "spawned " .. n)
        assert(s.cmd:count() == 0)
        -- and the apply reports what it landed: all, or none when the finalizer came first
        assert(r == 200 or r == 0, "applied " .. tostring(r))
    end, function(s) return s.w:count() > 5 end) -- once the apply is under way
end
]==])
    end)
end)

describe("a finalizer closing the world while cmd:apply resolves placeholders", function()
    -- The apply read the component's fields after making tables and strings, which may run
    -- a finalizer: one that closed the world freed them (heap-use-after-free under ASan).
    it("fails the record as a closed world, reading nothing freed", function()
        run([==[
local names = {}
for i = 1, 60 do names[i] = "e" .. i end
trials(function()
    local s = {w = kiln.world(), cmd = kiln.commands()}
    s.w:component("Link", "entity " .. table.concat(names, ", ") .. ";")
    local t = s.w:spawn{Link = {}}
    for _ = 1, 100 do
        local ph = s.cmd:spawn{}
        local v = {}
        for k = 1, 60 do v[names[k]] = ph end
        s.cmd:set(t, "Link", v)
    end
    return s
end, function(s) s.w:close() end, function(s)
    local r, msg = s.cmd:apply(s.w)
    if not r then error(msg) end
end, raises_closed)
]==])
    end)
end)

describe("a finalizer closing the world inside a method that does not hold the collector", function()
    -- Each read the world, or the query, after making a table, a string or a userdata.
    local calls = {
        ["world:entities"] = "s.w:entities()", -- asserted a NULL world
        ["q:entities"] = "s.q:entities()", -- heap-use-after-free
        ["q:terms"] = "s.q:terms()", -- heap-use-after-free
        ["world:getter"] = "s.w:getter('P', 'v')(s.es[1])", -- heap-use-after-free
        ["q:each"] = "for _, p in s.q:each() do p.name = 'x' end", -- heap-use-after-free
    }
    for name, call in pairs(calls) do
        it("raises the closed-world error from " .. name .. ", touching nothing freed", function()
            run([==[
trials(function()
    local s = {w = kiln.world(), es = {}}
    s.w:component("P", "vec3 v; char name[8];")
    for i = 1, 50 do s.es[i] = s.w:spawn{P = {name = "n" .. i}} end
    s.q = s.w:query{"P"}
    return s
end, function(s) s.w:close() end, function(s) ]==] .. call .. [==[ end, raises_closed)
]==])
        end)
    end
end)

describe("world:entities() when a finalizer despawns while it makes its list", function()
    it("lists only live entities, never bytes it did not write", function()
        run([==[
trials(function()
    local s = {w = kiln.world(), es = {}}
    for i = 1, 50 do s.es[i] = s.w:spawn() end
    return s
end, function(s) for i = 1, #s.es do s.w:despawn(s.es[i]) end end, function(s)
    return s.w:entities()
end, function(s, ok, list)
    assert(ok, list)
    for _, e in ipairs(list) do assert(s.w:is_alive(e), "listed " .. tostring(e)) end
end)
]==])
    end)
end)

describe("a finalizer run while world:close releases the world", function()
    -- release() freed the core world, then made a string (a collector step) before marking the
    -- world closed: a finalizer run there found the world open and read it freed (ASan:
    -- heap-use-after-free), and a dropped query's __gc destroyed its freed query (met by a
    -- fuzzer mixing loops in coroutines, dropped queries and closes).
    it("finds the world closed, or runs after the close", function()
        run([==[
local w = kiln.world()
w:component("P", "float x;")
w:component("L", "lua")
w:spawn{P = {}, L = {}}
local closing, seen = false, nil
for _ = 1, 10 do w:query{"P"} end
local t = {}
finalizer(function() if closing then seen = {pcall(w.count, w)} end end)
for i = 1, 1000000 do t[i] = i end -- grows the debt with no collector step
closing = true
w:close()
closing = false
assert(not seen or (not seen[1] and seen[2]:find("closed world")), "counted " .. tostring(seen and seen[2]))
]==])
    end)
end)

describe("tostring of a query while a finalizer closes its world", function()
    -- q's __tostring copied the terms' names (the world's) into a growing buffer: the growth
    -- may run a finalizer, and one that closed the world freed the names mid-copy (ASan:
    -- heap-use-after-free). The debt of a grown table makes that growth the first step.
    it("reads no name the close freed", function()
        run([==[
local w = kiln.world()
local terms, optional = {}, {}
for i = 1, 16 do terms[i] = string.rep(string.char(64 + i), 63); w:component(terms[i], "float x;") end
for i = 1, 16 do optional[i] = string.rep(string.char(96 + i), 63); w:component(optional[i], "float x;") end
terms.optional = optional
local q = w:query(terms)
local to_string = debug.getmetatable(q).__tostring -- tostring() would make a string first
local t = {}
finalizer(function() pcall(w.close, w) end)
for i = 1, 1000000 do t[i] = i end -- grows the debt with no collector step
local s = to_string(q)
assert(s == "kiln.Query (closed)" or #s > 2000, s)
]==])
    end)
end)

describe("world:name renaming one entity again and again", function()
    -- Each rename added an entry to the name index and none went: the index doubled without
    -- bound (about 50 bytes a rename) while the world held one name.
    it("keeps the world's memory flat", function()
        local w = H.world()
        local e = w:spawn()
        for k = 1, 2000 do w:name(e, "n" .. k) end
        local before = w:stats().bytes
        for k = 2001, 40000 do w:name(e, "n" .. k) end
        assert.is_true(w:stats().bytes - before < 4096, w:stats().bytes - before)
        assert.are.equal(e, w:lookup("n40000"))
        assert.is_nil(w:lookup("n39999"))
    end)
end)
