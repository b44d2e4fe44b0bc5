-- ffi_spawn_spec.lua: world:spawn's FFI path under LuaJIT (lua/kiln/ffi_spawn.lua): which spawns
-- take it, that they give what the C path gives, and that every failure is the C path's.
-- Under Lua 5.4 the same specs pin the C path (kiln.ffi_spawns stays 0 there).
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- The FFI path exists under LuaJIT with its ffi library (busted's luajit has it).
local FFI = H.luajit and pcall(require, "ffi")

local function ffi_count(w, fn) return H.ffi_spawn_count(kiln, w, fn) end

-- Spawns init through the FFI path (raising unless it was taken where it exists).
local function fast(w, init)
    local e
    local n = ffi_count(w, function() e = w:spawn(init) end)
    assert.are.equal(FFI and 1 or 0, n, "the FFI path was not taken")
    return e
end

-- Spawns init through the C path (raising if the FFI path took it).
local function slow(w, init)
    local e
    local n = ffi_count(w, function() e = w:spawn(init) end)
    assert.are.equal(0, n, "the FFI path took a spawn the C path must make")
    return e
end

local function all_world()
    local w = H.world()
    w:component("All", [[bool b; int8_t i8; int16_t i16; int32_t i32; int64_t i64; uint8_t u8;
        uint16_t u16; uint32_t u32; uint64_t u64; float f; double d; entity target; char tag[8];
        vec2 v2; vec3 v3; quat q;]])
    w:component("Script", "lua") -- Lua values: the C path
    return w
end

local ALL = {b = true, i8 = -128, i16 = 32767, i32 = -2147483648, i64 = -2 ^ 53, u8 = 255, u16 = 65535,
             u32 = 4294967295, u64 = 2 ^ 53, f = 0.1, d = 0.1, target = 12345, tag = "seven77",
             v2 = {1, y = 2}, v3 = {x = -1, [2] = 0.5, z = 1e30}, q = {0, 0, 0, 1}}

describe("world:spawn's FFI path", function()
    it("is taken by data components and tags, and writes what the C path writes", function()
        local w = all_world()
        local a = fast(w, {All = ALL, Position = {x = 1, y = -1}, Frozen = true})
        local b = slow(w, {All = ALL, Position = {x = 1, y = -1}, Frozen = true, Script = {}})
        assert.are.equal(H.dump(w:get(b, "All")), H.dump(w:get(a, "All")))
        assert.are.same({x = 1, y = -1}, w:get(a, "Position"))
        assert.is_true(w:has(a, "Frozen"))
        assert.are.equal(-128, w:get(a, "All").i8)
        assert.are.equal(H.f32(0.1), w:get(a, "All").f)
        assert.are.equal(0.1, w:get(a, "All").d)
        assert.are.equal("seven77", w:get(a, "All").tag)
        assert.are.same({x = -1, y = 0.5, z = H.f32(1e30)}, w:get(a, "All").v3)
        assert.are.same({x = 0, y = 0, z = 0, w = 1}, w:get(a, "All").q)
        local t = fast(w, {Frozen = true}) -- tags only: no value at all
        assert.is_true(w:has(t, "Frozen"))
    end)

    it("starts left-out fields from the component's defaults or zeroes", function()
        local w = all_world()
        local e = fast(w, {LocalTransform = {position = {x = 2}}, All = {i8 = 3}})
        local l = w:get(e, "LocalTransform") -- registered in C, with the identity as defaults
        assert.are.same({x = 2, y = 0, z = 0}, l.position)
        assert.are.same({x = 0, y = 0, z = 0, w = 1}, l.rotation)
        assert.are.same({x = 1, y = 1, z = 1}, l.scale)
        assert.are.equal(0, w:get(e, "All").i32)
        assert.are.equal("", w:get(e, "All").tag)
        assert.is_false(w:get(e, "All").b)
    end)

    it("is taken in compiled loops: every spawn of a hot loop goes through it", function()
        local w = H.world()
        local n = ffi_count(w, function()
            for i = 1, 2000 do w:spawn{Position = {x = i, y = -i}, Velocity = {x = 1, y = 0.5}} end
        end)
        assert.are.equal(FFI and 2000 or 0, n)
        for _, e in ipairs(w:entities()) do
            local p = w:get(e, "Position")
            assert.are.equal(-p.x, p.y)
        end
    end)

    it("spawns into several worlds from one loop, each getting its own entities and values", function()
        local worlds = {H.world(), H.world(), H.world()}
        local made = {}
        local n = 0
        for i = 1, 900 do
            local w = worlds[i % 3 + 1]
            n = n + ffi_count(w, function() made[i] = w:spawn{Position = {x = i, y = -i}, Velocity = {x = i % 3}} end)
        end
        assert.are.equal(FFI and 900 or 0, n)
        for i = 1, 900 do
            local w = worlds[i % 3 + 1]
            assert.are.same({x = i, y = -i}, w:get(made[i], "Position"))
            assert.are.same({x = i % 3, y = 0}, w:get(made[i], "Velocity"))
        end
        for _, w in ipairs(worlds) do assert.are.equal(300, w:count()) end
    end)

    it("leaves Lua values, check hooks, mat4s, arrays, ids and 64-bit integers past 2^53 to the C path", function()
        local w = all_world()
        w:component("Grid", "float cells[3]; int32_t n;")
        local m = {}
        for i = 1, 16 do m[i] = i end
        local script = {}
        local parent = fast(w, {Position = {}})
        local es = {
            slow(w, {Script = script, Position = {x = 1}}),
            slow(w, {Parent = {entity = parent}, Position = {}}),
            slow(w, {WorldTransform = {matrix = m}}),
            slow(w, {Grid = {cells = {1, 2, 3}}}),
            slow(w, {[w:component("Position", "float x, y;")] = {x = 4}}), -- an id: the same component
            slow(w, {All = {i64 = 2 ^ 60}}),
        }
        assert.are.equal(script, w:get(es[1], "Script"))
        assert.are.equal(parent, w:get(es[2], "Parent").entity)
        assert.are.same(m, w:get(es[3], "WorldTransform").matrix)
        assert.are.same({1, 2, 3}, w:get(es[4], "Grid").cells)
        assert.are.equal(4, w:get(es[5], "Position").x)
        assert.are.equal(2 ^ 60, w:get(es[6], "All").i64)
        -- a mat4 or array component without its field named is the FFI path's
        assert.are.equal(3, w:get(fast(w, {Grid = {n = 3}}), "Grid").n)
    end)

    it("raises the C path's message for each bad input, and leaves the world as it was", function()
        local w = all_world()
        w:component("Grid", "float cells[3];")
        fast(w, {Position = {x = 1}, Velocity = {}})
        local names = {"Position", "Velocity", "Health", "Frozen", "All", "Grid"}
        local cases = {
            {{Nope = {}}, "bad argument #1 to 'world:spawn' (unknown component 'Nope')"},
            {{[true] = {}}, "bad argument #1 to 'world:spawn' (component name expected, got boolean)"},
            {{Position = {z = 1}}, "world:spawn: Position has no field 'z'"},
            {{Position = {x = 1, y = 2, z = 3}}, "world:spawn: Position has no field 'z'"},
            {{Position = {[1] = 5}}, "world:spawn: Position fields are named by strings, got a number key"},
            {{Position = {x = "a"}}, "world:spawn: field 'x' of Position: expected a number, got string"},
            {{Position = {x = 1e39}}, "world:spawn: field 'x' of Position: number 1e+39 is out of range for float"},
            {{Position = 7}, "world:spawn: value for Position must be a table of fields, got number"},
            {{Position = {}, Frozen = 1}, "world:spawn: Frozen is a tag: give true or nothing, not number"},
            {{Position = {}, Frozen = false}, "world:spawn: Frozen is a tag: give true or nothing, not false"},
            {{All = {i8 = 128}}, "world:spawn: field 'i8' of All: 128 is out of range for int8 [-128, 127]"},
            {{All = {u32 = -1}}, "world:spawn: field 'u32' of All: -1 is out of range for uint32 [0, 4294967295]"},
            {{All = {i32 = 1.5}}, "world:spawn: field 'i32' of All: expected an integer, got 1.5"},
            {{All = {i16 = "1"}}, "world:spawn: field 'i16' of All: expected an integer, got string"},
            {{All = {b = 1}}, "world:spawn: field 'b' of All: expected a boolean, got number"},
            {{All = {d = true}}, "world:spawn: field 'd' of All: expected a number, got boolean"},
            {{All = {tag = "eight888"}}, "world:spawn: field 'tag' of All: string of 8 bytes does not fit char[8]"},
            {{All = {tag = 5}}, "world:spawn: field 'tag' of All: expected a string, got number"},
            {{All = {v2 = {x = 1, [1] = 2}}}, "world:spawn: field 'v2' of All: vec2 element 1 given twice (by name and by position)"},
            {{All = {v2 = {z = 1}}}, "world:spawn: field 'v2' of All: vec2 takes x, y or [1] to [2], got 'z'"},
            {{All = {v3 = {x = "a"}}}, "world:spawn: field 'v3' of All: vec3.x: expected a number, got string"},
            {{All = {q = {1, 2, 3, 4, 5}}}, "world:spawn: field 'q' of All: quat takes x, y, z, w or [1] to [4], got [5]"},
            {{All = {v2 = 3}}, "world:spawn: field 'v2' of All: expected a table for vec2, got number"},
            {{Grid = {cells = {1, 2, 3, 4}}}, "world:spawn: field 'cells' of Grid: array of 4 elements does not fit 3"},
            -- a bad second component: the first, already converted, is not spawned either
            {{Position = {x = 1}, Velocity = {x = "bad"}}, "world:spawn: field 'x' of Velocity: expected a number, got string"},
        }
        for _, case in ipairs(cases) do
            local msg = H.unchanged(w, names, function() w:spawn(case[1]) end)
            assert.are.equal(case[2], msg)
        end
        assert.are.equal(1, w:count())
        assert.are.equal(FFI and 1 or 0, kiln.ffi_spawns(w))
    end)

    it("refuses more than 64 components at once, as the C path does", function()
        local w = kiln.world()
        local init = {}
        for i = 1, 65 do
            w:component("T" .. i, "int32_t v;")
            init["T" .. i] = {v = i}
        end
        H.unchanged(w, {}, function() w:spawn(init) end, "world:spawn", "at most 64 components")
        init.T65 = nil
        local e = fast(w, init)
        assert.are.equal(64, w:get(e, "T64").v)
    end)

    it("reads init tables raw, as the C path does: no metamethod runs", function()
        local w = H.world()
        local function boom() error("a metamethod ran") end
        local guarded = {__index = boom, __newindex = boom, __pairs = boom, __len = boom, __metatable = false}
        local init = setmetatable({Position = setmetatable({x = 3}, guarded)}, guarded)
        local e = fast(w, init)
        assert.are.same({x = 3, y = 0}, w:get(e, "Position"))
        -- a field only __index would give is left out, and an unknown one it hides still raises
        local hidden = setmetatable({x = 1, z = 2}, {__index = function() return 9 end})
        H.unchanged(w, nil, function() w:spawn{Position = hidden} end, "world:spawn: Position has no field 'z'")
        assert.are.equal(0, w:get(fast(w, {Position = setmetatable({x = 1}, {__index = {y = 9}})}), "Position").y)
    end)

    it("names world:spawn when called on a bad self, and raises on a closed world", function()
        local w = H.world()
        local spawn = w.spawn
        H.unchanged(w, nil, function() spawn() end,
                    "calling 'world:spawn' on bad self (kiln.World expected, got no value)")
        H.unchanged(w, nil, function() w.spawn(5, {Position = {}}) end,
                    "calling 'world:spawn' on bad self (kiln.World expected, got number)")
        -- called where no call site names it (by pcall, through a local copy): as Lua 5.4 says
        local ok, err = pcall(spawn, 5, {Position = {}})
        assert.is_false(ok)
        assert.are.equal("calling 'world:spawn' on bad self (kiln.World expected, got number)", err)
        local f = w.spawn
        H.unchanged(w, nil, function() f("w", {Position = {}}) end,
                    "calling 'world:spawn' on bad self (kiln.World expected, got string)")
        fast(w, {Position = {}})
        w:close()
        H.raises(function() w:spawn{Position = {}} end, "attempt to use a closed world")
        -- the message names the caller's line, as the C path's does (a tail call into it)
        local ok, err = pcall(function() w:spawn{Position = {}} end)
        assert.is_false(ok)
        assert.matches("ffi_spawn_spec%.lua:%d+: attempt to use a closed world", err)
    end)

    it("takes a number key for a component id, as the C path does, even where a name reads the same", function()
        local w = H.world()
        w:component("1", "float x;")
        H.unchanged(w, nil, function() w:spawn{{x = 3}} end,
                    "bad argument #1 to 'world:spawn' (unknown component #1)")
    end)

    it("keeps declared access in systems, and queues spawns where the world is deferred", function()
        local w = H.world()
        local made
        w:system{name = "maker", writes = {"Position"}, run = function(world)
            made = world:spawn{Position = {x = 5}}
        end}
        w:system{name = "sneak", writes = {"Position"}, run = function(world)
            world:spawn{Position = {}, Velocity = {x = 1}}
        end}
        local before = w:count()
        local n = ffi_count(w, function()
            local ok, failures = w:progress(0)
            assert.is_false(ok)
            assert.are.equal(1, #failures)
            assert.are.equal("sneak", failures[1].system)
            assert.is_truthy(failures[1].message:find(
                "world:spawn: system 'sneak' writes Velocity without declaring it in writes", 1, true), failures[1].message)
        end)
        assert.are.equal(FFI and 1 or 0, n)
        assert.are.equal(before + 1, w:count())
        assert.are.equal(5, w:get(made, "Position").x)
        -- in a loop outside systems the world is deferred: the spawn lands when the loop ends
        local q = w:query{"Position"}
        local inside
        for _ in q:each() do
            inside = w:spawn{Velocity = {x = 2}}
            assert.is_false(w:is_alive(inside))
            break
        end
        q:count() -- the loop left by break ends when its query is used again
        assert.is_true(w:is_alive(inside))
        assert.are.equal(2, w:get(inside, "Velocity").x)
    end)

    it("takes the C path on a world with an instruction budget", function()
        local w = H.world({instructions = 1000000})
        local e = slow(w, {Position = {x = 1}})
        assert.are.equal(1, w:get(e, "Position").x)
    end)

    it("leaves every entity whole when finalizers spawn in the middle of a spawn", function()
        local w = H.world()
        local from_gc = 0
        local function make_garbage()
            for _ = 1, 4 do
                H.finalizer(function()
                    from_gc = from_gc + 1
                    w:spawn{Velocity = {x = -7, y = -7}, Frozen = true}
                end)
            end
        end
        local jit_was = H.luajit and jit.status()
        if H.luajit then jit.off() end -- interpreted, the FFI path makes cdata: collections run inside it
        local ok, err = pcall(function()
            for i = 1, 3000 do
                make_garbage()
                w:spawn{Position = {x = i, y = -i}, Velocity = {x = i, y = i}}
            end
        end)
        if H.luajit and jit_was then jit.on() end
        assert(ok, err)
        collectgarbage("collect")
        collectgarbage("collect")
        assert.is_true(from_gc > 0)
        assert.are.equal(3000 + from_gc, w:count())
        for _, e in ipairs(w:entities()) do
            local v = w:get(e, "Velocity")
            if w:has(e, "Frozen") then
                assert.are.same({x = -7, y = -7}, v)
                assert.is_false(w:has(e, "Position"))
            else
                local p = w:get(e, "Position")
                assert.are.same({x = p.x, y = -p.x}, p)
                assert.are.same({x = p.x, y = p.x}, v)
            end
        end
    end)
end)

describe("world:spawn's FFI path under a hook that raises", function()
    local function every_raise(fn, check) H.every_raise(fn, check, 2000) end

    -- While a hook is set the FFI path spawns nothing (the hook could raise between the core's
    -- spawn and world:spawn's return): the C path does, as under Lua 5.4.
    it("leaves spawns to the C path while it is set, and takes them again once it is gone", function()
        local w = H.world()
        fast(w, {Position = {x = 1}, Velocity = {y = 2}}) -- the world's record and writers made
        local ffi_before = kiln.ffi_spawns(w)
        every_raise(function()
            local e = w:spawn{Position = {x = 3}, Velocity = {y = 4}}
            assert.are.equal(3, w:get(e, "Position").x)
        end, function(n)
            assert.are.equal(ffi_before, kiln.ffi_spawns(w), "the FFI path spawned under a hook raising at " .. n)
            w:despawn(fast(w, {Position = {x = 5}}))
            ffi_before = kiln.ffi_spawns(w)
        end)
    end)

    it("keeps each world's spawns in that world when the raise hits a switch between worlds", function()
        local a, b = H.world(), H.world()
        fast(a, {Position = {}})
        fast(b, {Position = {}})
        every_raise(function()
            a:spawn{Position = {x = 1}}
            b:spawn{Position = {x = 2}}
        end, function(n)
            for _, w in ipairs{a, b} do
                local count = w:count()
                local e = fast(w, {Velocity = {x = 9}})
                assert.are.equal(count + 1, w:count(), "a spawn went to another world after a raise at instruction " .. n)
                assert.are.equal(9, w:get(e, "Velocity").x)
                w:despawn(e)
            end
            for _, w in ipairs{a, b} do
                for _, e in ipairs(w:entities()) do
                    local p = w:get(e, "Position")
                    assert.is_true(p.x == 0 or p.x == (w == a and 1 or 2), "an entity of the other world")
                end
            end
        end)
    end)

    it("is left to the C path while a budget runs in any world, and taken again once it is spent", function()
        local a, b = H.world(), H.world()
        fast(b, {Position = {}})
        local made
        a:system{name = "seeder", run = function()
            made = nil
            made = b:spawn{Position = {x = 7}}
        end}
        local n, ok = 0, false
        while not ok and n < 2000 do -- a budget spent at each instruction of the run in turn
            n = n + 1
            a:instructions(n)
            local spawns = kiln.ffi_spawns(b)
            ok = a:progress(0)
            assert.are.equal(spawns, kiln.ffi_spawns(b), "the FFI path spawned under a budget of " .. n)
            b:despawn(fast(b, {Position = {x = 1}})) -- later spawns take the FFI path again
        end
        assert.is_true(ok)
        assert.are.equal(7, b:get(made, "Position").x)
    end)

    it("returns every entity it made when finalizers raise anywhere in it", function()
        local w = H.world()
        local init = {Position = {x = 1, y = 2}, Velocity = {x = 3}, Frozen = true}
        fast(w, init)
        local raised = 0
        local jit_was = H.luajit and jit.status()
        if H.luajit then jit.off() end -- interpreted, the FFI path makes cdata: collections run inside it
        local returned = 0
        local spawn = w.spawn
        local armed, spawning, raised_in_spawn = true, false, 0
        local function raising()
            if not armed then return end
            raised = raised + 1
            if spawning then raised_in_spawn = raised_in_spawn + 1 end
            error("a finalizer raised")
        end
        local function garbage() for _ = 1, 3 do H.finalizer(raising) end end
        -- 3000 rounds, and more until a finalizer raised in a spawn: a cycle finishes (and its
        -- finalizers run) only after about twice the live heap was allocated, which takes
        -- longer when other spec files of the process left much live. (With a large heap the
        -- raises inside spawns may all land in the FFI part, which leaves the spawn to the C
        -- path, so that none reaches the caller: that is no less a raise inside a spawn.)
        for round = 1, 300000 do
            if round > 3000 and (raised_in_spawn > 0 or not H.luajit) then break end
            pcall(garbage)
            spawning = true
            local ok = pcall(spawn, w, init) -- nothing here allocates once it returned
            spawning = false
            if ok then returned = returned + 1 end
        end
        armed = false -- (no allocation since the last pcall: no finalizer ran in between)
        if H.luajit and jit_was then jit.on() end
        -- (Lua 5.4 turns a finalizer's error into a warning: nothing raises there)
        assert.is_true(not H.luajit or raised_in_spawn > 0,
                       string.format("no finalizer raised inside a spawn (%d raised, %d spawns)", raised, returned))
        assert.are.equal(1 + returned, w:count())
        assert.is_true(FFI and kiln.ffi_spawns(w) > 1 or not FFI, "no spawn took the FFI path")
        w:despawn(fast(w, init)) -- and the FFI path goes on
    end)
end)

describe("world:spawn's FFI path against replaced globals", function()
    it("makes writers for new layouts after a script replaced ipairs, pcall, load and table.concat", function()
        if not FFI then return pending("LuaJIT only: Lua 5.4 has no FFI path") end
        local ok, out = H.run_isolated([[
            local kiln = require "kiln"
            local w = kiln.world()
            w:component("A", "float x, y;")
            w:component("B", "int32_t n; float v;")
            local function broken() error("replaced") end
            ipairs, pcall, load, assert, setmetatable = broken, broken, broken, broken, broken
            table.concat, table.sort = broken, broken
            local e = w:spawn{A = {x = 1, y = 2}, B = {n = 7, v = 3}} -- a layout never seen
            local w2 = kiln.world() -- and a world never seen
            w2:component("A", "float x, y;")
            local e2 = w2:spawn{A = {x = 3}}
            io.write(kiln.ffi_spawns(w), " ", kiln.ffi_spawns(w2), " ", w:get(e, "B").n, " ",
                     w:get(e, "B").v, " ", w2:get(e2, "A").x, "\n")
        ]], 20)
        assert.is_true(ok, out)
        assert.are.equal("1 1 7 3 3\n", out)
    end)
end)
