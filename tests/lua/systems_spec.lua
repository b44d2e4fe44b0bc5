-- systems_spec.lua: Lua systems in the world's schedule: run and each systems, progress,
-- listing and enabling, ordering, declared access, contained failures and worker threads.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")


local function by_name(w)
    local out = {}
    for _, s in ipairs(w:systems()) do out[s.name] = s end
    return out
end

-- A world with n movers and a system moving them.
local function moving_world(n, options)
    local w = H.world(options)
    local es = {}
    for i = 1, n do es[i] = w:spawn{Position = {x = i}, Velocity = {x = 1, y = 2}} end
    w:system{name = "move", query = {"Position", "Velocity"}, writes = {"Position"},
             each = function(e, p, v, dt)
                 p.x = p.x + v.x * dt
                 p.y = p.y + v.y * dt
             end}
    return w, es
end

describe("world:system and world:progress", function()
    it("runs run-systems with the world and dt", function()
        local w = H.world()
        local got = {}
        w:system{name = "tick", run = function(world, dt) got[#got + 1] = {world, dt} end}
        assert.is_true(w:progress(0.25))
        assert.is_true(w:progress(0.5))
        assert.are.equal(2, #got)
        assert.are.equal(w, got[1][1])
        assert.are.equal(0.25, got[1][2])
        assert.are.equal(0.5, got[2][2])
    end)

    it("runs each-systems over their query with the views and dt", function()
        local w, es = moving_world(3)
        assert.is_true(w:progress(0.5))
        for i, e in ipairs(es) do assert.are.same({x = i + 0.5, y = 1.0}, w:get(e, "Position")) end
        assert.is_true(w:progress(1))
        for i, e in ipairs(es) do assert.are.same({x = i + 1.5, y = 3.0}, w:get(e, "Position")) end
    end)

    it("advances the tick each frame and stamps what systems write", function()
        local w, es = moving_world(2)
        local t = w:tick()
        w:progress(1)
        assert.are.equal(t + 1, w:tick())
        assert.are.equal(w:tick(), w:changed_tick(es[1], "Position"))
        assert.are.equal(1, w:changed_tick(es[1], "Velocity"))
    end)

    it("rejects malformed descriptions, naming the problem, and adds nothing", function()
        local w = moving_world(1)
        local count = #w:systems()
        local f = function() end
        H.raises(function() w:system{name = "move", run = f} end, "world:system", "move", "already exists")
        H.raises(function() w:system{run = f} end, "world:system", "name")
        H.raises(function() w:system{name = "", run = f} end, "world:system", "name")
        H.raises(function() w:system{name = "x"} end, "world:system", "run")
        H.raises(function() w:system{name = "x", run = 5} end, "world:system", "run must be a function")
        H.raises(function() w:system{name = "x", run = f, each = f} end, "world:system", "exactly one")
        H.raises(function() w:system{name = "x", each = f} end, "world:system", "query")
        H.raises(function() w:system{name = "x", run = f, query = {"Position"}} end, "world:system", "query")
        H.raises(function() w:system{name = "x", run = f, reads = {"Nope"}} end, "world:system", "Nope")
        H.raises(function() w:system{name = "x", run = f, writes = "Position"} end, "world:system", "writes")
        H.raises(function() w:system{name = "x", each = f, query = {"Nope"}} end, "Nope")
        H.raises(function() w:system{name = "x", run = f, after = {5}} end, "world:system", "after")
        H.raises(function() w:system(5) end, "table expected")
        assert.are.equal(count, #w:systems())
        assert.is_true(w:progress(0))
    end)
end)

describe("world:systems and world:enable", function()
    it("lists every system with name, stage, kind, enabled, runs and timings", function()
        local w = moving_world(2)
        w:system{name = "log", reads = {"Position"}, run = function() end}
        local list = w:systems()
        assert.are.equal(2, #list)
        assert.are.equal("move", list[1].name)
        assert.are.equal("log", list[2].name)
        for _, s in ipairs(list) do
            assert.are.equal("lua", s.kind)
            assert.is_true(s.enabled)
            assert.are.equal(0, s.runs)
            assert.are.equal("integer", H.number_type(s.stage))
        end
        w:progress(0)
        w:progress(0)
        for _, s in ipairs(w:systems()) do
            assert.are.equal(2, s.runs)
            assert.is_number(s.last_ms)
            assert.is_number(s.avg_ms)
            assert.is_true(s.last_ms >= 0 and s.avg_ms >= 0)
        end
        local s = by_name(w)
        assert.is_true(s.log.stage > s.move.stage) -- log reads what move writes
    end)

    it("a disabled system is skipped until enabled again", function()
        local w, es = moving_world(1)
        w:enable("move", false)
        assert.is_false(by_name(w).move.enabled)
        w:progress(1)
        assert.are.equal(1.0, w:get(es[1], "Position").x)
        assert.are.equal(0, by_name(w).move.runs)
        w:enable("move", true)
        w:progress(1)
        assert.are.equal(2.0, w:get(es[1], "Position").x)
        assert.are.equal(1, by_name(w).move.runs)
        H.raises(function() w:enable("ghost", false) end, "world:enable", "ghost")
    end)
end)

describe("world:remove_system and waiting names", function()
    it("removes a system between frames; the name is free again and runs from then on", function()
        local w = H.world()
        local ran = {}
        w:system{name = "a", run = function() ran[#ran + 1] = "a" end}
        w:system{name = "b", run = function() ran[#ran + 1] = "b" end}
        w:remove_system("a")
        assert.are.same({"b"}, (function() local n = {} for _, s in ipairs(w:systems()) do n[#n + 1] = s.name end return n end)())
        w:progress(0)
        assert.are.same({"b"}, ran)
        w:system{name = "a", run = function() ran[#ran + 1] = "a2" end}
        w:progress(0)
        assert.are.same({"b", "b", "a2"}, ran)
        H.raises(function() w:remove_system("zz") end, "bad argument #1 to 'world:remove_system' (no system named 'zz')")
        H.raises(function() w:remove_system(7) end, "bad argument #1 to 'world:remove_system' (system name expected, got number)")
    end)

    it("a system removed during a frame (itself included) leaves at the frame's end, its queued work lands", function()
        local w = H.world()
        local runs = 0
        w:system{name = "once", writes = {"Position"}, run = function(world)
            runs = runs + 1
            world:spawn{Position = {x = 1}}
            world:remove_system("once")
            -- the name is free at once: a replacement runs from the next frame
            world:system{name = "once", run = function() runs = runs + 100 end}
        end}
        assert.is_true(w:progress(0))
        assert.are.equal(1, runs)
        assert.are.equal(1, w:count()) -- the spawn it queued landed
        assert.is_true(w:progress(0))
        assert.are.equal(101, runs)
        assert.are.equal(1, #w:systems())
        collectgarbage()
        assert.is_true(w:progress(0))
        assert.are.equal(201, runs)
    end)

    -- world:systems() resolves every entry's before/after names; it took time in the square
    -- of the systems. The listing of thousands must still be right entry by entry.
    it("lists thousands of systems, each with its own fields", function()
        local w = H.world()
        local n = 3000
        for i = 1, n do
            w:system{name = "s" .. i, run = function() end,
                     after = i > 1 and {"s" .. (i - 1)} or nil, before = i % 3 == 0 and {"ghost" .. i} or nil}
            if i % 4 == 1 then w:enable("s" .. i, false) end
        end
        for i = 5, n, 10 do w:remove_system("s" .. i) end
        local list = w:systems()
        local k = 0
        for i = 1, n do
            if i % 10 ~= 5 then
                k = k + 1
                local s = list[k]
                assert.are.equal("s" .. i, s.name)
                assert.are.equal("lua", s.kind)
                assert.are.equal(i % 4 ~= 1, s.enabled)
                assert.is_false(s.removing)
                assert.are.same(i > 1 and {"s" .. (i - 1)} or {}, s.after)
                assert.are.same(i % 3 == 0 and {"ghost" .. i} or {}, s.before)
                local waiting = (i % 3 == 0 and 1 or 0) + ((i - 1) % 10 == 5 and 1 or 0)
                assert.are.equal(waiting, s.unresolved, s.name)
                if k > 1 and (i - 1) % 10 ~= 5 then assert.is_true(s.stage > list[k - 1].stage, s.name) end
            end
        end
        assert.are.equal(k, #list)
    end)

    it("a before/after naming no system waits for it, and a cycle is refused naming only the cycle", function()
        local w = H.world()
        local order = {}
        w:system{name = "late", after = {"early"}, run = function() order[#order + 1] = "late" end}
        assert.is_true(w:progress(0)) -- an unknown name never stops the frame
        assert.are.equal(1, w:systems()[1].unresolved)
        assert.are.same({"early"}, w:systems()[1].after)
        w:system{name = "early", run = function() order[#order + 1] = "early" end}
        order = {}
        assert.is_true(w:progress(0))
        assert.are.same({"early", "late"}, order)
        assert.are.equal(0, w:systems()[1].unresolved)
        w:system{name = "x", run = function() end}
        local msg = H.raises(function()
            w:system{name = "y", after = {"late"}, before = {"early"}, run = function() end}
        end, "world:system: ", "would form a cycle")
        assert.is_truthy(msg:find("'y' -> 'early' -> 'late' -> 'y'", 1, true), msg)
        assert.is_falsy(msg:find("'x'", 1, true), msg) -- systems off the cycle are not named
        assert.are.equal(3, #w:systems()) -- the refused system was not added
        assert.is_true(w:progress(0))
    end)
end)

describe("a world its script dropped", function()
    -- The systems' functions and queries were registry references: a query leads back to its
    -- world, so a world dropped without world:close was never collected.
    it("is collected with its systems when a system's query or function leads back to it", function()
        local dropped = setmetatable({}, {__mode = "k"})
        for _, kind in ipairs{"each-system", "run keeps a query", "run keeps the world"} do
            local w = kiln.world()
            w:component("P", "float x;")
            w:spawn{P = {x = 1}}
            local keep = w -- an upvalue the run function keeps (a local of its own, not w)
            if kind == "each-system" then
                w:system{name = "s", query = {"P"}, writes = {"P"}, each = function(_, p) p.x = p.x + 1 end}
            elseif kind == "run keeps a query" then
                local q = w:query{"P"}
                w:system{name = "s", run = function() return q:count() end}
            else
                w:system{name = "s", run = function() return keep:count() end}
            end
            assert.is_true(w:progress(0))
            dropped[w] = kind
            w, keep = nil, nil
        end
        for _ = 1, 4 do collectgarbage() end
        assert.are.same({}, (function() local left = {} for _, k in pairs(dropped) do left[#left + 1] = k end return left end)())
    end)

    it("keeps its systems running while it is alive, whatever the collector does", function()
        local w = kiln.world()
        w:component("P", "float x;")
        local e = w:spawn{P = {x = 0}}
        w:system{name = "each", query = {"P"}, writes = {"P"}, each = function(_, p) p.x = p.x + 1 end}
        local counted = 0
        do -- the query's one reference is the function's
            local q = w:query{"P"}
            w:system{name = "run", run = function() counted = counted + q:count() end}
        end
        for _ = 1, 3 do
            collectgarbage()
            assert.is_true(w:progress(0))
        end
        assert.are.equal(3, w:get(e, "P").x)
        assert.are.equal(3, counted)
        w:remove_system("each")
        collectgarbage()
        assert.is_true(w:progress(0))
        assert.are.equal(3, w:get(e, "P").x)
        assert.are.equal(4, counted)
        w:close()
    end)
end)

describe("instruction budgets", function()
    it("a system past its budget fails under the failing-system rule, and pcall cannot swallow it", function()
        local w = H.world({instructions = 200000, max_failures = 2})
        for i = 1, 3 do w:spawn{Position = {x = i}} end
        local fine = 0
        w:system{name = "loop", run = function() while true do end end}
        w:system{name = "sneaky", run = function()
            while true do pcall(function() while true do end end) end
        end}
        w:system{name = "nested", run = function()
            local co = coroutine.wrap(function() while true do end end)
            pcall(co)
            while true do end
        end}
        w:system{name = "each", query = {"Position"}, each = function() while true do end end}
        w:system{name = "fine", run = function() fine = fine + 1 end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.are.equal(1, fine) -- the frame went on
        local names = {}
        for _, f in ipairs(failures) do
            names[#names + 1] = f.system
            assert.are.equal("system '" .. f.system .. "' ran past its budget of 200000 instructions", f.message)
        end
        assert.are.same({"loop", "sneaky", "nested", "each"}, names)
        assert.is_true(H.not_deferred(w))
        w:progress(0)
        local _, again = w:progress(0) -- disabled after two consecutive failures
        assert.is_true(again == nil or #again == 0)
        assert.are.equal(3, fine)
    end)

    it("is read and set with world:instructions; 0 means none", function()
        local w = H.world()
        assert.are.equal(0, w:instructions())
        local n = 0
        w:system{name = "busy", run = function() for i = 1, 300000 do n = n + 1 end end}
        assert.is_true(w:progress(0))
        assert.are.equal(1000, w:instructions(1000))
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.is_truthy(failures[1].message:find("budget of 1000 instructions", 1, true))
        w:instructions(0)
        assert.is_true(w:progress(0))
        H.raises(function() w:instructions(-1) end, "bad argument #1 to 'world:instructions'")
        H.raises(function() w:instructions("5") end, "integer expected, got string")
        H.raises(function() kiln.world{instructions = -5} end, "instructions must be a non-negative integer")
    end)
end)

describe("instruction budgets spent inside a reader given to load", function()
    -- LuaJIT left its hook marked active when the budget's error was caught by lua_load: no
    -- hook ran again in the state, so every later budget (and a console's) counted nothing
    it("count the runs after it", function()
        local w = H.world({instructions = 100000})
        local load_ = load
        w:system{name = "reader", run = function()
            local _ = load_(function() while true do end end)
            -- Lua 5.4 raises here (the budget is spent); LuaJIT's hook is off until the run ends
        end}
        w:system{name = "spinner", run = function()
            local n = 0 -- (nothing here calls the host: a charge would raise on its own)
            while n < 3e7 do n = n + 1 end
            error("escaped the budget", 0)
        end}
        for _ = 1, 2 do
            local ok, failures = w:progress(0)
            assert.is_false(ok)
            local last = failures[#failures]
            assert.are.equal("spinner", last.system)
            assert.are.equal("system 'spinner' ran past its budget of 100000 instructions", last.message)
        end
    end)
end)

describe("instruction budgets under LuaJIT", function()
    -- Compiled code calls no hooks: kiln turns the JIT off when a budget is armed. A host that
    -- turns it back on must not leave a later budget counting nothing (a runaway loop would
    -- then run compiled, unbudgeted, and freeze the game).
    it("hold after the host turns the JIT back on: compiled loops are flushed, the JIT is off again", function()
        if not H.luajit then return pending("LuaJIT only: Lua 5.4 has no JIT") end
        local ok, out = H.run_isolated([[
            local kiln = require "kiln"
            local w = kiln.world{instructions = 100000}
            w:system{name = "first", run = function() end}
            assert(w:progress(0)) -- a budget armed: the JIT goes off
            assert(not jit.status())
            jit.on() -- the host turns it back on
            local function spin(n) local s = 0 for i = 1, n do s = s + i end return s end
            for _ = 1, 200 do spin(1000) end -- compiled now
            w:system{name = "runaway", run = function() spin(1e15) end}
            local fine, failures = w:progress(0)
            print(fine, failures and failures[1] and failures[1].message, (jit.status()))
        ]], 20)
        assert.is_true(ok, "killed after 20 s: the runaway loop ran compiled, unbudgeted\n" .. out)
        assert.is_truthy(out:find("^false\t.*system 'runaway' ran past its budget of 100000 instructions\tfalse\n$"), out)
    end)
end)

describe("instruction budgets of each-systems whose callback has no loop and no call", function()
    -- Such a callback is charged its instruction count per row (budget.c's row mode) instead
    -- of being counted instruction by instruction; these are the rules that must still hold.
    local function movers(n, budget)
        local w = H.world({instructions = budget})
        for i = 1, n do w:spawn{Position = {x = i}} end
        return w
    end

    it("charges every row, so many rows still pass a budget", function()
        local w = movers(1000, 3000) -- 4 instructions run a row, 5 charged
        w:system{name = "shift", query = {"Position"}, writes = {"Position"}, each = function(_, p) p.x = p.x + 1 end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.are.equal("system 'shift' ran past its budget of 3000 instructions", failures[1].message)
        w:instructions(20000)
        assert.is_true(w:progress(0))
    end)

    it("counts every instruction of a metamethod the callback runs, however it gets there", function()
        local spin = function() while true do end end
        local escapes = {
            index = function(t) return function(_, p) p.x = t.y end end,
            newindex = function(t) return function(_, p) t.y = p.x end end,
            add = function(t) return function(_, p) p.x = t + 1 end end,
            concat = function(t) return function(_, p) local s = t .. "x" end end,
            len = function(t) return function(_, p) p.x = #t end end,
            lt = function(t) return function(_, p) local b = t < t end end,
            unm = function(t) return function(_, p) local v = -t end end,
        }
        if H.luajit then escapes.len = nil end -- LuaJIT calls no __len for tables: no way out there
        for kind, make in pairs(escapes) do
            local w = movers(3, 200000)
            local t = setmetatable({}, {["__" .. kind] = spin})
            w:system{name = "escape", query = {"Position"}, writes = {"Position"}, each = make(t)}
            w:system{name = "after", run = function() while true do end end}
            local ok, failures = w:progress(0)
            assert.is_false(ok, kind)
            assert.are.equal(2, #failures, kind)
            assert.matches("system 'escape' ran past its budget of 200000 instructions", failures[1].message, 1, true)
            assert.matches("system 'after' ran past its budget of 200000 instructions", failures[2].message, 1, true)
        end
    end)

    it("counts a global read through an environment whose __index loops", function()
        local w = movers(3, 200000)
        local env = setmetatable({}, {__index = function() while true do end end})
        local each = load("return function(_, p) p.x = missing end", "env", "t", env)()
        w:system{name = "env", query = {"Position"}, writes = {"Position"}, each = each}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.matches("system 'env' ran past its budget of 200000 instructions", failures[1].message, 1, true)
    end)

    it("leaves the budget armed for the next system after a callback's error", function()
        local w = movers(3, 200000)
        w:system{name = "bad", query = {"Position"}, writes = {"Position"}, each = function(_, p) p.x = p.x + nil end}
        w:system{name = "loop", run = function() while true do end end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.matches("arithmetic on a nil value", failures[1].message)
        assert.are.equal("system 'loop' ran past its budget of 200000 instructions", failures[2].message)
        assert.is_true(H.not_deferred(w))
    end)

    it("is charged the same when the schedule runs deep in the host's stack", function()
        local w = movers(1000, 3000)
        w:system{name = "shift", query = {"Position"}, writes = {"Position"}, each = function(_, p) p.x = p.x + 1 end}
        local function deep(n) if n == 0 then return w:progress(0) end return (deep(n - 1)) end
        local ok = deep(300) -- deeper than row mode walks: every instruction is counted instead
        assert.is_false(ok)
        w:instructions(20000)
        assert.is_true((deep(300)))
        assert.is_true(w:progress(0))
    end)
end)

describe("ordering", function()
    it("before and after override declaration order", function()
        local w = H.world()
        local order = {}
        local function rec(name) return function() order[#order + 1] = name end end
        w:system{name = "c", after = {"b"}, run = rec("c")}
        w:system{name = "b", run = rec("b")}
        w:system{name = "a", before = {"b"}, run = rec("a")}
        w:progress(0)
        assert.are.same({"a", "b", "c"}, order)
        local s = by_name(w)
        assert.is_true(s.a.stage < s.b.stage)
        assert.is_true(s.b.stage < s.c.stage)
    end)

    it("a writer runs before a later-declared reader, in the same frame", function()
        local w, es = moving_world(1)
        local seen
        w:system{name = "watch", reads = {"Position"}, run = function(world) seen = world:get(es[1], "Position").x end}
        w:progress(1)
        assert.are.equal(2.0, seen)
    end)
end)

describe("declared access", function()
    it("reading an undeclared component raises naming the system and the component", function()
        local w, es = moving_world(1)
        w:system{name = "peek", reads = {"Position"}, run = function(world)
            world:get(es[1], "Velocity")
        end}
        local q = w:query{"Velocity"}
        w:system{name = "scan", reads = {"Position"}, run = function()
            for _ in q:each() do end
        end}
        w:system{name = "probe", run = function(world) return world:has(es[1], "Health") end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        local by = {}
        for _, f in ipairs(failures) do by[f.system] = f.message end
        for name, comp in pairs{peek = "Velocity", scan = "Velocity", probe = "Health"} do
            assert.is_string(by[name], name)
            assert.is_truthy(by[name]:find("'" .. name .. "'", 1, true), by[name])
            assert.is_truthy(by[name]:find(comp, 1, true), by[name])
        end
        assert.is_true(H.not_deferred(w))
    end)

    it("writing a component declared only in reads raises through world:set and structural calls", function()
        local w, es = moving_world(1)
        local tries = {
            set = function(world) world:set(es[1], "Position", {x = 99}) end,
            add = function(world) world:add(es[1], "Velocity", {}) end,
            remove = function(world) world:remove(es[1], "Velocity") end,
            spawn = function(world) world:spawn{Position = {}} end,
        }
        for name, fn in pairs(tries) do
            w:system{name = "try_" .. name, reads = {"Position", "Velocity"}, run = fn}
        end
        local before = H.snapshot(w, H.NAMES)
        w:enable("move", false)
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.are.equal(4, #failures)
        for _, f in ipairs(failures) do
            assert.is_truthy(f.message:find("'" .. f.system .. "'", 1, true), f.message)
            assert.is_truthy(f.message:find("writes", 1, true), f.message)
        end
        local function untimed(snapshot) return (snapshot:gsub("tick=%d+", "")) end
        assert.are.equal(untimed(before), untimed(H.snapshot(w, H.NAMES)))
    end)

    it("views of components declared only in reads are read-only", function()
        local w, es = moving_world(1)
        w:enable("move", false)
        w:system{name = "bad_each", query = {"Position", "Velocity"}, writes = {"Position"},
                 each = function(e, p, v) v.x = 50 end}
        local q = w:query{"Velocity"}
        w:system{name = "bad_loop", reads = {"Velocity"}, run = function()
            for _, v in q:each() do v.y = 50 end
        end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.are.equal(2, #failures)
        for _, f in ipairs(failures) do
            assert.is_truthy(f.message:find("Velocity", 1, true), f.message)
            assert.is_truthy(f.message:find("read-only", 1, true), f.message)
        end
        assert.are.same({x = 1.0, y = 2.0}, w:get(es[1], "Velocity"))
        assert.is_true(H.not_deferred(w))
    end)

    it("a write to a read-only view names the system", function()
        local w = moving_world(1)
        w:enable("move", false)
        w:system{name = "bad_each", query = {"Position", "Velocity"}, writes = {"Position"},
                 each = function(e, p, v) v.x = 50 end}
        local _, failures = w:progress(0)
        assert.is_truthy(failures[1].message:find("bad_each", 1, true), failures[1].message)
    end)

    it("declared writes and each-system query terms give access", function()
        local w, es = moving_world(1)
        w:system{name = "heal", query = {"Position"}, writes = {"Health"}, each = function(e, p)
            if w:has(e, "Health") then w:set(e, "Health", {hp = 5}) else w:add(e, "Health", {hp = 1}) end
        end}
        assert.is_true(w:progress(1))
        assert.are.same({hp = 1, max = 0}, w:get(es[1], "Health"))
        assert.is_true(w:progress(1))
        assert.are.same({hp = 5, max = 0}, w:get(es[1], "Health"))
    end)

    it("an exclusive system may touch everything, undeferred", function()
        local w, es = moving_world(1)
        local seen = {}
        w:system{name = "admin", exclusive = true, run = function(world)
            world:set(es[1], "Velocity", {x = 0})
            world:add(es[1], "Health", {hp = 3})
            seen.has = world:has(es[1], "Health")
            local n = world:spawn{Frozen = true, Health = {}}
            seen.alive = world:is_alive(n)
            world:resource("Health", {hp = 1})
        end}
        local ok, failures = w:progress(1)
        assert.is_true(ok, failures and failures[1].message)
        assert.is_true(seen.has)
        assert.is_true(seen.alive)
        assert.are.equal(0.0, w:get(es[1], "Velocity").x)
        assert.are.equal(1, w:resource("Health").hp)
        assert.is_true(by_name(w).admin.exclusive)
    end)

    it("outside systems nothing is restricted", function()
        local w, es = moving_world(1)
        w:progress(0)
        w:set(es[1], "Velocity", {x = 3})
        assert.are.equal(3.0, w:get(es[1], "Velocity").x)
    end)
end)

describe("failures", function()
    it("a raising system does not stop the frame; progress reports system, message and traceback", function()
        local w, es = moving_world(1)
        local ran = {}
        w:system{name = "early", run = function() ran.early = true end}
        w:system{name = "broken", reads = {"Position"}, run = function() error("kaboom") end}
        w:system{name = "late", after = {"broken"}, run = function() ran.late = true end}
        local ok, failures = w:progress(1)
        assert.is_false(ok)
        assert.is_true(ran.early)
        assert.is_true(ran.late)
        assert.are.equal(2.0, w:get(es[1], "Position").x) -- move ran too
        assert.are.equal(1, #failures)
        local f = failures[1]
        assert.are.equal("broken", f.system)
        assert.is_truthy(f.message:find("kaboom", 1, true), f.message)
        assert.is_falsy(f.message:find("stack traceback", 1, true), f.message)
        assert.is_truthy(f.traceback:find("stack traceback", 1, true), f.traceback)
        assert.is_false(f.disabled)
        -- reported once: a clean frame of the others returns true again
        w:enable("broken", false)
        assert.is_true(w:progress(1))
    end)

    it("every failing system of a frame is reported", function()
        local w = H.world()
        for i = 1, 3 do w:system{name = "bad" .. i, run = function() error("e" .. i) end} end
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.are.equal(3, #failures)
        local names = {}
        for _, f in ipairs(failures) do names[#names + 1] = f.system end
        table.sort(names)
        assert.are.same({"bad1", "bad2", "bad3"}, names)
    end)

    it("non-string errors are reported too", function()
        local w = H.world()
        w:system{name = "odd", run = function() error({code = 1}) end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.are.equal("odd", failures[1].system)
        assert.is_string(failures[1].message)
    end)

    it("drop the failing system's deferred structural changes, keep its in-place writes", function()
        local w, es = moving_world(1)
        w:enable("move", false)
        local made
        w:system{name = "half", writes = {"Position", "Velocity", "Frozen"}, run = function(world)
            made = world:spawn{Position = {}}
            world:add(es[1], "Frozen", true)
            world:remove(es[1], "Velocity")
            world:set(es[1], "Position", {x = 42})
            error("after the changes")
        end}
        local count = w:count()
        local ok = w:progress(0)
        assert.is_false(ok)
        assert.are.equal(count, w:count())
        assert.is_false(w:is_alive(made))
        assert.is_false(w:has(es[1], "Frozen"))
        assert.is_true(w:has(es[1], "Velocity"))
        assert.are.equal(42.0, w:get(es[1], "Position").x)
        assert.is_true(H.not_deferred(w))
    end)

    it("an each-system that raises mid-query ends its iteration", function()
        local w, es = moving_world(3)
        w:enable("move", false)
        local visited = 0
        w:system{name = "stumble", query = {"Position"}, writes = {"Position"}, each = function(e, p)
            visited = visited + 1
            if visited == 2 then error("second row") end
            p.x = 0
        end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.are.equal(2, visited)
        assert.is_truthy(failures[1].message:find("second row", 1, true))
        assert.is_true(H.not_deferred(w))
        visited = 10
        assert.is_true(w:progress(0))
    end)

    it("with max_failures = 3 a system is disabled after 3 consecutive failures", function()
        local w = H.world{max_failures = 3}
        local calls = 0
        w:system{name = "flaky", run = function() calls = calls + 1 error("no") end}
        for frame = 1, 2 do
            local ok, failures = w:progress(0)
            assert.is_false(ok)
            assert.is_false(failures[1].disabled, "frame " .. frame)
            assert.is_true(by_name(w).flaky.enabled)
        end
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.is_true(failures[1].disabled)
        assert.is_false(by_name(w).flaky.enabled)
        assert.is_true(w:progress(0))
        assert.are.equal(3, calls)
        w:enable("flaky", true) -- a host may give it another chance
        w:progress(0)
        assert.are.equal(4, calls)
    end)

    it("only consecutive failures count toward max_failures", function()
        local w = H.world{max_failures = 3}
        local frame = 0
        w:system{name = "alternating", run = function()
            frame = frame + 1
            if frame % 3 ~= 0 then error("odd frame") end
        end}
        for _ = 1, 12 do w:progress(0) end
        assert.is_true(by_name(w).alternating.enabled)
        assert.are.equal(12, frame)
    end)

    it("without max_failures a failing system keeps running", function()
        local w = H.world()
        local calls = 0
        w:system{name = "stubborn", run = function() calls = calls + 1 error("no") end}
        for _ = 1, 10 do w:progress(0) end
        assert.are.equal(10, calls)
        assert.is_true(by_name(w).stubborn.enabled)
    end)

    it("progress from inside a system fails that system", function()
        local w = H.world()
        w:system{name = "recursive", run = function(world) world:progress(0) end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.is_truthy(failures[1].message:find("world:progress", 1, true), failures[1].message)
        assert.is_true(w:progress(0) == false) -- fails again, cleanly
    end)

    it("an each-system over a query with no rows runs without failing", function()
        local w = H.world()
        local runs = 0
        w:system{name = "idle", query = {"Velocity"}, each = function() runs = runs + 1 end}
        local ok, failures = w:progress(0)
        assert.is_true(ok, failures and failures[1].message)
    end)

    it("an each-system failing on a row without its optional term leaves the world usable", function()
        local w = H.world()
        w:spawn{Position = {x = 1}}
        w:system{name = "boom", query = {"Position", optional = {"Velocity"}}, each = function()
            error("boom")
        end}
        local ok, res = pcall(w.progress, w, 0)
        assert.is_true(ok, "progress raised: " .. tostring(res))
        assert.is_true(H.not_deferred(w))
        assert.is_false((w:progress(0)))
    end)

    it("closing the world from inside a system raises instead of crashing", function()
        local ok, out = H.run_isolated([[
            local kiln = require "kiln"
            local w = kiln.world()
            w:system{name = "closer", run = function(world) world:close() end}
            print(pcall(w.progress, w, 0))
            print("DONE")
        ]])
        assert.is_true(ok and out:find("DONE", 1, true) ~= nil, out)
    end)
end)

describe("structural changes in systems", function()
    it("land at the end of the stage", function()
        local w = H.world()
        local seen = {}
        local marked = w:spawn{Position = {}}
        w:system{name = "spawner", writes = {"Position", "Frozen"}, run = function(world)
            seen.made = world:spawn{Position = {x = 5}}
            seen.alive_inside = world:is_alive(seen.made)
            world:add(marked, "Frozen", true)
            seen.frozen_inside = world:has(marked, "Frozen")
        end}
        w:system{name = "sibling", run = function(world) -- same stage: no shared access
            seen.alive_sibling = world:is_alive(seen.made)
        end}
        w:system{name = "later", reads = {"Position", "Frozen"}, after = {"spawner"}, run = function(world)
            seen.alive_later = world:is_alive(seen.made)
            seen.frozen_later = world:has(marked, "Frozen")
        end}
        assert.is_true(w:progress(0))
        local s = by_name(w)
        assert.are.equal(s.spawner.stage, s.sibling.stage)
        assert.is_false(seen.alive_inside)
        assert.is_false(seen.frozen_inside)
        assert.is_false(seen.alive_sibling)
        assert.is_true(seen.alive_later)
        assert.is_true(seen.frozen_later)
        assert.are.same({x = 5.0, y = 0.0}, w:get(seen.made, "Position"))
    end)

    it("events emitted by a system are read by later stages and the next frame", function()
        local w = H.world()
        w:event("Hit", "int32_t damage;")
        local inside, later, next_frame = -1, -1, -1
        local frame = 0
        w:system{name = "shoot", writes = {"Health"}, run = function(world)
            frame = frame + 1
            if frame == 1 then world:emit("Hit", {damage = 3}) end
            local n = 0
            for _ in world:events("Hit") do n = n + 1 end
            if frame == 1 then inside = n end
        end}
        w:system{name = "hurt", reads = {"Health"}, after = {"shoot"}, run = function(world)
            local n = 0
            for ev in world:events("Hit") do n = n + ev.damage end
            if frame == 1 then later = n else next_frame = n end
        end}
        w:progress(0)
        w:progress(0)
        assert.are.equal(0, inside)
        assert.are.equal(3, later)
        assert.are.equal(3, next_frame)
    end)
end)

describe("worker threads", function()
    local function simulate(workers)
        local w = H.world{workers = workers}
        w:component("Dead")
        for i = 1, 300 do
            w:spawn{Position = {x = i, y = -i}, Velocity = {x = i % 7, y = 1}, Health = {hp = i % 13, max = 13}}
        end
        w:system{name = "move", query = {"Position", "Velocity"}, writes = {"Position"},
                 each = function(e, p, v, dt)
                     p.x = p.x + v.x * dt
                     p.y = p.y + v.y * dt
                 end}
        w:system{name = "decay", query = {"Health"}, writes = {"Health"}, each = function(e, h) h.hp = h.hp - 1 end}
        local living = w:query{"Health", without = {"Dead"}}
        w:system{name = "reap", reads = {"Health"}, writes = {"Dead"}, run = function(world)
            for e, h in living:each() do
                if h.hp <= 0 then world:add(e, "Dead", true) end
            end
        end}
        w:system{name = "bury", query = {"Dead", "Position"}, writes = {"Position"},
                 each = function(e, _, p) p.x = 0 end}
        w:system{name = "steer", query = {"Velocity"}, writes = {"Velocity"},
                 each = function(e, v) v.x, v.y = v.y, -v.x end}
        w:system{name = "spawn_more", writes = {"Position", "Velocity", "Health"}, run = function(world)
            world:spawn{Position = {x = 1}, Velocity = {x = 1}, Health = {hp = 5}}
        end}
        for _ = 1, 12 do
            local ok, failures = w:progress(0.5)
            assert.is_true(ok, failures and failures[1].message)
        end
        return H.snapshot(w, {"Position", "Velocity", "Health", "Dead"})
    end

    it("kiln.world{workers = 2} gives the same world as workers = 0", function()
        local inline = simulate(0)
        local threaded = simulate(2)
        assert.are.equal(inline, threaded)
        assert.are.equal(inline, simulate(2)) -- and again
    end)
end)
