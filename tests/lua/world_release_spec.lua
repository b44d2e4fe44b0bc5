-- world_release_spec.lua: a world the script dropped or closed is freed, C memory and all, by a
-- full collection, also after LuaJIT compiled the loops that used it (their traces live on).
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- Bytes malloc holds now (glibc's mallinfo2 through FFI, under LuaJIT), or nil where it cannot
-- tell: the worlds' columns and tables are malloc's (kiln.world uses the default allocator).
local malloc_bytes = function() return nil end
if H.luajit then
    local ffi = require "ffi"
    local ok = pcall(ffi.cdef, [[struct kiln_spec_mallinfo2 { size_t arena, ordblks, smblks, hblks, hblkhd,
        usmblks, fsmblks, uordblks, fordblks, keepcost; };
        struct kiln_spec_mallinfo2 mallinfo2(void);]])
    if ok and pcall(function() return ffi.C.mallinfo2 end) then
        malloc_bytes = function()
            local m = ffi.C.mallinfo2()
            return tonumber(m.uordblks) + tonumber(m.hblkhd)
        end
    end
end

-- The loops a game runs on its world, each in a function of its own that outlives the worlds
-- (as a game's code does), so that its compiled traces do too. Each returns a number read.
local ENTITIES = 400
local function make(w)
    w:component("Position", "float x, y;")
    w:component("Velocity", "float x, y;")
    w:component("Big", "int64_t id; float m[16];") -- read through table views, not FFI
    w:event("Hit", "int32_t n;")
    local es = {}
    for i = 1, ENTITIES do es[i] = w:spawn{Position = {x = i}, Velocity = {x = 1}, Big = {id = i}} end
    return es
end
local function read_big(_, b) return b.id end
local USES = {
    ["world:events"] = function(w)
        for i = 1, ENTITIES do w:emit("Hit", {n = i}) end
        local s = 0
        for ev in w:events("Hit") do s = s + ev.n end
        return s
    end,
    ["world:getter"] = function(w, es)
        local x, s = w:getter("Position", "x"), 0
        for i = 1, #es do s = s + x(es[i]) end
        return s
    end,
    ["world:get and world:set"] = function(w, es)
        local s = 0
        for i = 1, #es do
            local p = w:get(es[i], "Position")
            w:set(es[i], "Position", {y = p.x})
            s = s + p.x
        end
        return s
    end,
    ["q:each() over table views"] = function(w)
        local s = 0
        for _, b in w:query{"Big"}:each() do s = s + b.id + b.m[1] end
        return s
    end,
    ["q:each() over views it may write"] = function(w)
        local s = 0
        for _, p, v in w:query{"Position", "Velocity"}:each() do
            p.x = p.x + v.x
            s = s + p.x
        end
        return s
    end,
    ["q:bulk_ffi()"] = function(w)
        local s = 0
        w:query{"Position", "Velocity"}:bulk_ffi(function(n, _, p, v)
            for i = 0, n - 1 do s = s + p[i].x + v[i].x end
        end)
        return s
    end,
    ["an each-system reading read-only table views"] = function(w)
        w:system{name = "read", query = {"Big"}, reads = {"Big"}, each = read_big}
        w:system{name = "move", query = {"Position", "Velocity"}, writes = {"Position"}, reads = {"Velocity"},
                 each = function(_, p, v, dt) p.x = p.x + v.x * dt end}
        for _ = 1, 3 do assert(w:progress(1)) end
        return w:count()
    end,
}

-- Runs use on `rounds` new worlds, each dropped (or closed, then dropped) after, and returns
-- how many of them a full collection left alive, and what the Lua heap (KiB) and malloc
-- (bytes, or nil) grew by from the end of a warm-up of 20 rounds.
local function worlds_left(use, rounds, close)
    local alive = setmetatable({}, {__mode = "k"})
    local function round()
        local w = kiln.world()
        local es = make(w)
        assert.is_true(use(w, es) > 0)
        alive[w] = true
        if close then w:close() end
    end
    local jit_was = H.luajit and jit.status()
    if H.luajit then jit.on() end -- an instruction budget armed by an earlier spec file turns it off
    for _ = 1, 20 do round() end
    collectgarbage()
    collectgarbage()
    local heap, bytes = collectgarbage("count"), malloc_bytes()
    for _ = 1, rounds do round() end
    collectgarbage()
    collectgarbage()
    if H.luajit and not jit_was then jit.off() end
    local left = 0
    for _ in pairs(alive) do left = left + 1 end
    local grown = malloc_bytes()
    return left, collectgarbage("count") - heap, grown and bytes and grown - bytes
end

for name, use in pairs(USES) do
    describe("a world whose " .. name .. " loops were compiled", function()
        for _, close in ipairs({false, true}) do
            it(close and "is freed once closed and dropped" or "is freed once dropped", function()
                -- each world of the 200 holds ~100 KiB of columns; before, the side traces a
                -- loop site grew for new closures (up to ~100) each kept one alive until jit.flush
                local left, heap_kib, malloc = worlds_left(use, 200, close)
                assert.are.equal(0, left, left .. " of 200 worlds are still alive")
                assert.is_true(heap_kib < 1024, string.format("the Lua heap grew by %.0f KiB", heap_kib))
                if malloc then
                    assert.is_true(malloc < 4 * 2 ^ 20, string.format("malloc holds %.1f MiB more", malloc / 2 ^ 20))
                end
            end)
        end
    end)
end

describe("the interpreter closing", function()
    it("a finalizer that calls kiln as the state closes gets an error, not a jump into an unloaded module", function()
        -- LuaJIT's lua_close finalizes the package library's handle of kiln.so before objects
        -- made earlier, and finalizes what finalizers make while it closes: the module stays loaded
        local ok, out = H.run_isolated([[
io.stdout:setvbuf("no")
local function finalizer(fn)
    if newproxy then
        local u = newproxy(true)
        getmetatable(u).__gc = fn
        return u
    end
    return setmetatable({}, {__gc = fn})
end
local keeper = finalizer(function() print("keeper", pcall(function() return W:count() end)) end)
local kiln = require "kiln"
W = kiln.world()
W:component("Position", "float x, y;")
Q = W:query{"Position"}
local maker = finalizer(function()
    LATE = finalizer(function() print("late", pcall(function() return Q:count() end)) end)
end)
print("ran")
]], 60)
        assert.is_true(ok, out)
        assert.is_truthy(out:find("ran\n", 1, true), out)
        assert.is_truthy(out:find("keeper\tfalse\t[^\n]*attempt to use a closed world"), out)
    end)
end)

describe("a query kept past its finalizer", function()
    it("a query its finalizer released says so when a finalizer kept it, not that its world closed", function()
        local w = kiln.world()
        w:component("Position", "float x, y;")
        w:spawn{Position = {}}
        local kept
        do -- the keeper is marked first, so it runs after the query's own __gc and keeps it
            local bag = {}
            H.finalizer(function() kept = bag end)
            bag.q = w:query{"Position"}
        end
        for _ = 1, 4 do collectgarbage() end
        local q = kept and kept.q
        if not q then -- an order the interpreter chose otherwise: what a host's early __gc call does
            q = w:query{"Position"}
            debug.getmetatable(q).__gc(q)
        end
        H.raises(function() q:count() end, "attempt to use a query that was released (its finalizer ran")
        H.raises(function() for _ in q:each() do end end, "attempt to use a query that was released")
        H.raises(function() q:entities() end, "attempt to use a query that was released")
        assert.are.equal("kiln.Query (released)", tostring(q))
        assert.are.equal(1, w:count())
        w:close()
        H.raises(function() q:count() end, "attempt to use a query of a closed world")
        assert.are.equal("kiln.Query (closed)", tostring(q))
    end)
end)

describe("a scene instance kept past its finalizer", function()
    it("raises that it was released, not reads as an empty scene", function()
        local w = kiln.world()
        w:component("Position", "float x, y;")
        local scene = '{"version": 1, "entities": [{"name": "a", "components": {"Position": {"x": 1}}}]}'
        local kept
        do -- the keeper is marked first, so it runs after the instance's own __gc and keeps it
            local bag = {}
            H.finalizer(function() kept = bag end)
            bag.inst = w:instantiate(scene)
        end
        for _ = 1, 4 do collectgarbage() end
        local inst = kept and kept.inst
        if not inst then -- an order the interpreter chose otherwise: what a host's early __gc call does
            inst = w:instantiate(scene)
            debug.getmetatable(inst).__gc(inst)
        end
        local gone = "attempt to use a scene instance that was released (its finalizer ran)"
        H.raises(function() return inst.roots end, gone)
        H.raises(function() return inst.spawned end, gone)
        H.raises(function() return inst.name end, gone)
        H.raises(function() return inst.properties end, gone)
        H.raises(function() inst:entity("a") end, gone)
        H.raises(function() inst:despawn() end, gone)
        local live = w:instantiate(scene) -- the methods, taken from an instance that lives
        H.raises(function() live.entity(inst, "a") end, gone)
        H.raises(function() live.despawn(inst) end, gone)
        assert.are.equal("kiln.Instance (released)", tostring(inst))
        assert.are.equal(1, #live.roots)
        assert.are.equal(live.roots[1], live:entity("a"))
        w:close()
    end)
end)

describe("a finalizer that closes the world", function()
    it("waits for world:spawn, add and set to convert a bad value (under ASan: no read of freed memory)", function()
        -- the message a bad value makes is an allocation: its collector step ran a finalizer that
        -- closed the world while the conversion still read the component's fields. A small heap
        -- of its own, where a collection cycle ends often, so the finalizers land inside calls.
        local ok, out = H.run_isolated([[
local kiln = require "kiln"
collectgarbage("setpause", 0)
collectgarbage("setstepmul", 10000)
local closed, odd = 0, nil
for round = 1, 100 do
    local w = kiln.world()
    w:component("P", "float x, y;")
    w:component("N", "char s[16]; int32_t k;")
    local trigger, count = round % 60 + 1, 0
    local function arm() -- re-armed until its trigger-th run, which closes the world
        local u = newproxy and newproxy(true) or setmetatable({}, {})
        local function fin()
            count = count + 1
            if count < trigger then return arm() end
            if pcall(w.close, w) then closed = closed + 1 end
        end
        if newproxy then getmetatable(u).__gc = fin else setmetatable(u, {__gc = fin}) end
    end
    arm()
    for i = 1, 300 do
        local ok, err = pcall(w.spawn, w, {P = {x = i, y = {}}, N = {s = "name" .. i, k = i}})
        if ok or not (err:find("field 'y' of P", 1, true) or err:find("closed world", 1, true)) then odd = err end
        ok, err = pcall(w.add, w, i, "P", {x = i, y = {}})
        ok, err = pcall(w.set, w, i, "P", {x = i, y = {}})
        ok, err = pcall(w.spawn, w, {P = {x = i}, N = {s = "n", k = i}})
    end
end
print("closed", closed > 0, "odd", odd)
]], 300)
        assert.is_true(ok, out)
        assert.is_truthy(out:find("closed\ttrue\todd\tnil", 1, true), out)
    end)
end)

-- The start of a script in which world:add and world:set meet a finalizer: faulty and good
-- values of P, and a finalizer that runs again each cycle, whose due-th run hands act to the
-- script's global run_act.
local FINALIZER_SCRIPT = [[
local kiln = require "kiln"
collectgarbage("setpause", 0)
collectgarbage("setstepmul", 10000)
local bad = { {x = 1, y = {}}, {x = 1e39}, {[1] = 2}, {z = 1}, {v = {x = "a"}}, {v = {9, 9, 9, 9}},
    {s = "far too long a name"}, {a = {1, 2, 3, 4, 5}}, {a = {x = 1}}, {big = {"no"}}, {big = {[81] = 1}},
    {k = 2^40}, {k = 1.5}, 5, {[true] = 1}, {x = 1, y = 2, z = 3, v = {w = 1}} }
local good = { {x = 1, y = 2}, {big = {[70] = 7}}, {v = {1, 2, 3}}, {s = "ok", a = {1, 2}} }
local due, act = 0, nil
local function arm()
    local u = newproxy and newproxy(true) or setmetatable({}, {})
    local function fin()
        if act then
            due = due - 1
            if due == 0 then
                local a = act
                act = nil
                run_act(a)
            end
        end
        arm()
    end
    if newproxy then getmetatable(u).__gc = fin else setmetatable(u, {__gc = fin}) end
end
arm()
]]

describe("a finalizer run while world:add or world:set works", function()
    it("runs at no point of a good value, and at any point of a fault's message without harm", function()
        -- A good value converts creating nothing, so no finalizer runs inside it; a fault's
        -- messages allocate, and the conversion that makes them holds the collector. Each fault
        -- meets a finalizer due at its k-th allocation that closes the world, or grows the
        -- world's scratch and despawns the entity: under ASan, no read of freed memory. (With no
        -- pause and the collector restarted just before the call, so with no debt, a whole cycle
        -- and its finalizers run at the call's first allocations.)
        local ok, out = H.run_isolated(FINALIZER_SCRIPT .. [[
local acted, odd = 0, nil
function run_act(a)
    acted = acted + 1
    a()
end
local function world()
    local w = kiln.world()
    w:component("P", "float x, y; vec3 v; char s[8]; int32_t a[4]; int32_t k; int16_t big[80];")
    w:component("Huge", "float m[4000];")
    local e = w:spawn{}
    w:add(e, "P", {}) -- (the component's cache is made: that allocates)
    return w, e
end
for _, m in ipairs({"add", "set"}) do
    for vi, v in ipairs(bad) do
        for k = 1, 6 do
            for a = 1, 2 do
                local w, e = world()
                local actions = {function() w:close() end,
                    function() w:spawn{Huge = {}}; w:despawn(e) end}
                due, act = k, actions[a]
                collectgarbage("restart") -- (no debt: the call's first allocation runs a step)
                local ok, err = pcall(w[m], w, e, "P", v)
                act = nil
                if ok or not (err:find("world:" .. m, 1, true) or err:find("closed world", 1, true)) then
                    odd = m .. " bad " .. vi .. ": " .. tostring(err)
                end
                pcall(w.close, w)
            end
        end
    end
    for vi, v in ipairs(good) do
        local w, e = world()
        due, act = 1, function() w:close() end
        collectgarbage("restart")
        local ok, err = pcall(w[m], w, e, "P", v)
        act = nil
        local got, p = pcall(w.get, w, e, "P") -- (raises when the world was closed)
        if not ok or not got or v.big and p.big[70] ~= 7 or v.s and p.s ~= "ok" or v.y and p.y ~= 2 then
            odd = m .. " good " .. vi .. ": " .. tostring(err)
        end
        w:close()
    end
end
print("acted", acted > 0, "odd", odd)
]], 300)
        assert.is_true(ok, out)
        assert.is_truthy(out:find("acted\ttrue\todd\tnil", 1, true), out)
    end)

    it("lets a finalizer register, spawn and despawn, or reload and unload a mod, at any point", function()
        -- As above, each fault meets a finalizer due at its k-th allocation, which now changes
        -- the world without closing it: registers 40 components (the schema cache, the names
        -- table and the core's component table grow), spawns 300 entities over two new
        -- archetypes (the tables move) or despawns the entity, or reloads or unloads a mod that
        -- registered a component and spawned entities of it (the manager despawns them and takes
        -- the component off every entity). Each action runs at least once; a fault is still
        -- told, naming the method; a good value (which allocates nothing) lands whole.
        local ok, out = H.run_isolated(FINALIZER_SCRIPT .. [=[
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))
local f = assert(io.open(dir .. "/m.lua", "w"))
f:write("world:component('M', 'float m[16];') for i = 1, 50 do world:spawn{M = {}} end")
f:close()
local odd = nil
local acted = {}
function run_act(a)
    local done, err = pcall(a)
    if not done then odd = "action: " .. tostring(err) end
end
local registered = 0
local function world(with_mods)
    local w = kiln.world()
    w:component("P", "float x, y; vec3 v; char s[8]; int32_t a[4]; int32_t k; int16_t big[80];")
    w:component("Huge", "float m[4000];")
    local e = w:spawn{}
    w:add(e, "P", {}) -- (the component's cache is made: that allocates)
    local mods = with_mods and kiln.mods(w) or nil
    if mods then assert(mods:load(dir .. "/m.lua")) end
    return w, e, mods
end
local names = {"register", "spawn", "despawn", "reload", "unload"}
local function action(a, w, e, mods)
    local function did() acted[names[a]] = (acted[names[a]] or 0) + 1 end
    return ({
        function() did() for _ = 1, 40 do registered = registered + 1
            w:component("R" .. registered, "float r[3]; int32_t n;") end end,
        function() did() for i = 1, 150 do w:spawn{Huge = {}}; w:spawn{P = {x = i}, Huge = {}} end end,
        function() did() w:spawn{Huge = {}}; w:despawn(e) end,
        function() did() assert(mods:reload("m")) end,
        function() did() assert(mods:unload("m")) end,
    })[a]
end
local function finish(w, mods)
    if mods then pcall(mods.close, mods) end
    pcall(w.close, w)
end
for _, m in ipairs({"add", "set"}) do
    for vi, v in ipairs(bad) do
        for k = 1, 6 do
            for a = 1, #names do
                local w, e, mods = world(a >= 4)
                due, act = k, action(a, w, e, mods)
                collectgarbage("restart") -- (no debt: the call's first allocation runs a step)
                local ok, err = pcall(w[m], w, e, "P", v)
                act = nil
                if ok or not err:find("world:" .. m, 1, true) then
                    odd = odd or (m .. " bad " .. vi .. " " .. names[a] .. ": " .. tostring(err))
                end
                finish(w, mods)
            end
        end
    end
    for vi, v in ipairs(good) do
        for a = 1, #names do
            if a ~= 3 then
                local w, e, mods = world(a >= 4)
                due, act = 1, action(a, w, e, mods)
                collectgarbage("restart")
                local ok, err = pcall(w[m], w, e, "P", v)
                act = nil
                local p = w:get(e, "P")
                if not ok or v.big and p.big[70] ~= 7 or v.s and p.s ~= "ok" or v.y and p.y ~= 2 then
                    odd = odd or (m .. " good " .. vi .. " " .. names[a] .. ": " .. tostring(err))
                end
                finish(w, mods)
            end
        end
    end
end
os.execute("rm -rf '" .. dir .. "'")
local list = {}
for _, n in ipairs(names) do list[#list + 1] = n .. "=" .. tostring((acted[n] or 0) > 0) end
print("acted " .. table.concat(list, " "), "odd", odd)
]=], 600)
        assert.is_true(ok, out)
        assert.is_truthy(out:find("acted register=true spawn=true despawn=true reload=true unload=true\todd\tnil",
            1, true), out)
    end)
end)
