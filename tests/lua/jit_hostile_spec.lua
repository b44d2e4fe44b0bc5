-- jit_hostile_spec.lua: LuaJIT's fast paths (loop_sites.lua, ffi_spawn.lua, ffi.lua) fed what a
-- hostile script would feed them; under Lua 5.4 the same specs pin the table and C paths.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- The FFI spawn path exists under LuaJIT with its ffi library (busted's luajit has it).
local FFI = H.luajit and pcall(require, "ffi")

local function ffi_count(w, fn) return H.ffi_spawn_count(kiln, w, fn) end

describe("a q:each() loop that seems not to read its entity", function()
    after_each(function() kiln.ffi_debug = nil end)

    -- Lua 5.4's q:each returns a to-be-closed value as well, and a loop it began outside a for
    -- stays open there: these attacks drive LuaJIT's loop protocol.
    local function jit_only()
        if not H.luajit then pending("loop sites are read under LuaJIT only") end
        return H.luajit
    end

    it("keeps the entity for an iterator on its line that tail-calls q:each and hands the entity on", function()
        if not jit_only() then return end
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local holder = {}
        -- the loop's own call is weird(); its ITERC calls it, and its first call tail-calls
        -- q:each, so the loop gets (step, state) and the iterator then runs the step itself
        local function weird()
            local phase = 0
            return function(_, step)
                if phase == 0 then
                    phase = 1
                    return q:each()
                end
                if phase == 1 then
                    phase = 2
                    local e = step(holder.state)
                    step(holder.state)
                    return "row", e
                end
            end
        end
        local got = {}
        for _, v in weird() do
            if holder.state == nil then holder.state = v else got[#got + 1] = v end
        end
        assert.are.same({a}, got)
    end)

    it("keeps the entity for q:each tail-called by a metamethod an instruction of the loop's line runs", function()
        if not jit_only() then return end
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        -- a metamethod hands out one value, the step: the loop's state (its number) is guessed,
        -- that of the query's loop begun before plus 2^20 (ffi.lua: the next count of its slot)
        local _, state = q:each()
        local lazy = setmetatable({}, {__index = function() return q:each() end})
        local function rows(step)
            return function()
                local e = step(state + 2 ^ 20)
                return e and "row", e
            end
        end
        local got = {}
        for _, e in rows(lazy.step) do
            got[#got + 1] = e
        end
        assert.are.same({a}, got)
    end)
    it("hands the entity to bodies that read it in roundabout ways", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local got, outer = {}, nil
        local function pass(...) return ... end
        local function count(...) return select("#", ...) end
        for e in q:each() do
            if got.skip then goto done end -- a read behind a jump
            got.jumped = e
            ::done::
        end
        for e in q:each() do got.varargs = pass(1, e) and select(2, pass(1, e)) end
        for e in q:each() do got.counted = count(e, nil) end
        for e in q:each() do outer = e end -- an upvalue written
        got.upvalue = outer
        for e in q:each() do got.listed = ({e})[1] end
        for e in q:each() do got.keyed = next({[e] = true}) end
        for e in q:each() do local copy = e; got.copied = copy end
        for e in q:each() do got.negated = -(-e) end
        assert.are.same({jumped = a, varargs = a, counted = 2, upvalue = a, listed = a, keyed = a, copied = a,
                         negated = a}, got)
    end)

    it("hands the entity to loops of loaded chunks, each read from its own bytecode", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        -- the same lines in two chunks: one body reads e, the other does not
        local reads = assert((loadstring or load)("local q, out = ...\nfor e, p in q:each() do\n  out[1] = e\nend\n"))
        local ignores = assert((loadstring or load)("local q, out = ...\nfor e, p in q:each() do\n  out[1] = p.x\nend\n"))
        local out = {}
        for _ = 1, 3 do
            reads(q, out)
            assert.are.equal(a, out[1])
            ignores(q, out)
            assert.are.equal(1, out[1])
        end
        -- a chunk whose lines are all one
        local one = assert((loadstring or load)("local q, out = ... for e in q:each() do out[1] = e end"))
        one(q, out)
        assert.are.equal(a, out[1])
        -- stripped: no lines to read, so the entity is kept even for a body that ignores it
        local stripped = assert((loadstring or load)(string.dump(function(query, o)
            for e, p in query:each() do
                o[1] = p.x
                o[2] = debug.getlocal(1, 4) and select(2, debug.getlocal(1, 4))
            end
        end, true)))
        stripped(q, out)
        assert.are.equal(1, out[1])
    end)

    it("reads the same sites alike with the JIT compiler off and on again", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local jit_was = H.luajit and jit.status()
        if H.luajit then jit.off() end
        local function interpreted(out)
            for e in q:each() do out[#out + 1] = e end
        end
        local out = {}
        interpreted(out)
        if H.luajit and jit_was then jit.on() end
        for _ = 1, 200 do interpreted(out) end -- compiled once hot
        assert.are.equal(201, #out)
        for i = 1, #out do assert.are.equal(a, out[i]) end
    end)

    it("runs over odd bytecode without failing: loops with no body, loops in loops, huge functions", function()
        local w = H.world()
        for i = 1, 3 do w:spawn{Position = {x = i}} end
        local q = w:query{"Position"}
        for _ in q:each() do end
        local sum = 0
        local q2 = w:query{"Position"}
        for _, p in q:each() do for _, r in q2:each_ffi() do sum = sum + p.x * r.x end end
        assert.are.equal(36, sum)
        -- a function of more lines and constants than a small loop has
        local src = {"local q, out = ...", "local t = {}"}
        for i = 1, 300 do src[#src + 1] = string.format("t[%d] = %d", i, i) end
        src[#src + 1] = "for e, p in q:each() do"
        src[#src + 1] = "  out[#out + 1] = e"
        src[#src + 1] = "end"
        local f = assert((loadstring or load)(table.concat(src, "\n")))
        local out = {}
        f(q, out)
        H.same_entities(w:entities(), out)
    end)
end)

describe("world:spawn under LuaJIT, attacked", function()
    -- Spawns init through the FFI path where it exists (raising unless it was taken).
    local function fast(w, init)
        local e
        assert.are.equal(FFI and 1 or 0, ffi_count(w, function() e = w:spawn(init) end), "the FFI path was not taken")
        return e
    end

    it("takes components registered after the world's first spawn, and keeps refusing unknown ones", function()
        local w = H.world()
        fast(w, {Position = {x = 1}})
        H.unchanged(w, nil, function() w:spawn{Late = {v = 1}} end, "unknown component 'Late'")
        w:component("Late", "int16_t v; vec2 at;")
        local e = fast(w, {Late = {v = -3, at = {2, 3}}, Position = {y = 4}})
        assert.are.same({v = -3, at = {x = 2, y = 3}}, w:get(e, "Late"))
        assert.are.same({x = 0, y = 4}, w:get(e, "Position"))
    end)

    it("writes each world's layout when worlds share component names, spawned from one loop", function()
        local a, b = kiln.world(), kiln.world()
        a:component("Body", "float x, y; int8_t k;")
        b:component("Body", "int8_t k; double y; int32_t x;")
        b:component("Extra", "bool on;")
        local made = {}
        for i = 1, 400 do
            local w = i % 2 == 0 and a or b
            made[i] = w:spawn{Body = {x = i, y = -i, k = i % 100}}
        end
        for i = 1, 400 do
            local w = i % 2 == 0 and a or b
            assert.are.same({x = i, y = -i, k = i % 100}, w:get(made[i], "Body"))
        end
        assert.are.equal(FFI and 200 or 0, kiln.ffi_spawns(a))
        assert.are.equal(FFI and 200 or 0, kiln.ffi_spawns(b))
        -- a field one layout has and the other lacks
        H.unchanged(a, {"Body"}, function() a:spawn{Body = {on = true}} end, "Body has no field 'on'")
    end)

    it("raises on a closed world and spawns into the worlds made after it with their own layouts", function()
        for i = 1, 20 do
            local w = kiln.world()
            w:component("Body", i % 2 == 0 and "float x, y;" or "double y; int16_t x;")
            local e = fast(w, {Body = {x = i, y = 0.5}})
            assert.are.same({x = i, y = 0.5}, w:get(e, "Body"))
            w:close()
            H.raises(function() w:spawn{Body = {x = 1}} end, "attempt to use a closed world")
            assert.are.equal(FFI and 1 or 0, kiln.ffi_spawns(w))
            collectgarbage() -- the next world may take the closed one's memory
        end
    end)

    it("keeps a system's instruction budget: its spawns take the C path and count against it", function()
        local w = H.world({instructions = 20000})
        local spawned = 0
        w:system{name = "flood", writes = {"Position"}, run = function(world)
            for i = 1, 1000000 do
                world:spawn{Position = {x = i}}
                spawned = i
            end
        end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.matches("system 'flood' ran past its budget of 20000 instructions", failures[1].message, 1, true)
        assert.is_true(spawned > 0 and spawned < 20000)
        assert.are.equal(0, kiln.ffi_spawns(w))
        assert.are.equal(0, #w:query{"Position"}:entities()) -- a failed system's spawns are dropped
    end)

    it("keeps a mod's budget: a mod spawning without end fails, and its world takes no FFI spawn", function()
        local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")
        local dir = M.folder()
        local w, mods = M.host({instructions = 50000})
        local host_spawns = kiln.ffi_spawns(w) -- the host's own entity
        M.write(dir, "flood.lua", [[
            world:component("Speck", "float v;")
            world:system{name = "flood", writes = {"Speck"}, run = function()
                for i = 1, 1000000 do world:spawn{Speck = {v = i}} end
            end}
        ]])
        assert(mods:load(dir .. "/flood.lua"))
        local failures = M.failures_of(M.frames(w, 1), "flood")
        M.cleanup()
        assert.are.equal(1, #failures)
        assert.matches("ran past its budget", failures[1].message, 1, true)
        assert.are.same({}, M.entities_with(w, "Speck"))
        assert.are.equal(host_spawns, kiln.ffi_spawns(w))
    end)

    it("spawns once when a debug hook raises after the core spawned", function()
        local w = H.world()
        local before = w:count()
        local fired
        local jit_was = H.luajit and jit.status()
        if H.luajit then jit.off() end -- hooks run only in the interpreter
        -- raises once, at the first instruction of kiln's Lua code after an entity came into being
        debug.sethook(function()
            if not fired and debug.getinfo(2, "S").source:find("lua/kiln/", 1, true) and w:count() > before then
                fired = true
                error("the hook says no")
            end
        end, "", 1)
        local ok, e = pcall(w.spawn, w, {Position = {x = 3}})
        debug.sethook()
        if H.luajit and jit_was then jit.on() end
        assert.are.equal(before + 1, w:count())
        if ok then assert.are.equal(3, w:get(e, "Position").x) end
    end)

    it("spawns once when a finalizer raises after the core spawned", function()
        local w = H.world()
        local armed = false
        local function fin()
            if armed then
                armed = false
                error("the finalizer says no")
            end
        end
        local jit_was = H.luajit and jit.status()
        if H.luajit then jit.off() end -- interpreted, the FFI path makes cdata: collections run inside it
        local pause = collectgarbage("setpause", 50) -- cycles close together: many finalizers run mid-spawn
        local wrong
        for i = 1, 10000 do
            armed = false
            for _ = 1, 4 do H.finalizer(fin) end
            local before = w:count()
            local init = {Position = {x = i, y = i}, Velocity = {x = 1}}
            armed = true
            local ok, e = pcall(w.spawn, w, init)
            armed = false
            local made = w:count() - before
            if made ~= (ok and 1 or 0) then
                wrong = string.format("spawn %d %s and made %d entities", i, ok and "returned" or "raised", made)
                break
            end
            if ok then assert.are.same({x = i, y = i}, w:get(e, "Position")) end
        end
        collectgarbage("setpause", pause)
        if H.luajit and jit_was then jit.on() end
        collectgarbage()
        assert.is_nil(wrong)
    end)
end)

describe("world:spawn's FFI path and the C path, fed the same hostile inits", function()
    local SCHEMA = [[bool b; int8_t i8; int16_t i16; int32_t i32; int64_t i64; uint8_t u8; uint32_t u32;
        uint64_t u64; float f; double d; entity target; char tag[8]; vec2 v2; vec3 v3; quat q;]]
    local function world(options)
        local w = H.world(options)
        w:component("All", SCHEMA)
        return w
    end
    -- what a spawn of init gave: the entity's values, or the error (the world then unchanged)
    local function outcome(w, init)
        local before = H.snapshot(w, {"All", "Position", "Frozen"})
        local ok, e = pcall(w.spawn, w, init)
        if not ok then
            assert.are.equal(before, H.snapshot(w, {"All", "Position", "Frozen"}), "a failed spawn changed the world")
            return "error: " .. tostring(e)
        end
        return H.dump({w:get(e, "All"), w:get(e, "Position"), w:has(e, "Frozen")})
    end
    local huge = string.rep("x", 1000000)
    local nan, inf = 0 / 0, math.huge
    local CASES = {
        {All = {f = nan, d = nan}}, {All = {f = inf, d = -inf}}, {All = {f = -inf}},
        {All = {f = 3.4028234663852886e38}}, {All = {f = 3.4028235677973366e38}}, {All = {f = -1e39}},
        {All = {f = 1e-46, d = 4.9e-324}}, {All = {f = -0.0, i32 = -0.0}},
        {All = {i8 = nan}}, {All = {i32 = inf}}, {All = {u8 = -0.5}}, {All = {i32 = 2147483648}},
        {All = {i64 = 2 ^ 53}}, {All = {i64 = -2 ^ 53}}, {All = {u64 = 2 ^ 53 + 2}}, {All = {target = -1}},
        {All = {i16 = "12"}}, {All = {f = "1.5"}}, {All = {b = "true"}}, {All = {b = 0}}, {All = {b = false}},
        {All = {tag = huge}}, {All = {tag = "a\0b"}}, {All = {tag = "1234567"}}, {All = {tag = ""}},
        {All = {v2 = {x = nan, y = inf}}}, {All = {v2 = {1, 2, 3}}}, {All = {v2 = {[0] = 1}}},
        {All = {v2 = {[1.5] = 1}}}, {All = {v2 = {["1"] = 1}}}, {All = {v3 = {x = {1}}}},
        {All = {v3 = {X = 1}}}, {All = {q = {x = 1, [1] = 1}}}, {All = {q = {w = 1e39}}},
        {All = {v2 = {x = 1, y = 2}, v3 = {1, 2, 3}, q = {0, 0, 0, 1}}},
        {All = {[1] = 1}}, {All = {[true] = 1}}, {All = {X = 1}}, {All = {b = nil, i8 = 1}},
        {All = {}, Position = {x = 1}, position = {x = 1}}, {all = {}}, {ALL = {}},
        {All = {}, Frozen = 1}, {All = {}, Frozen = "true"}, {All = {}, Frozen = {}},
        {All = {v2 = {x = 1, y = 2}}, Position = {x = inf, y = nan}}, {All = true}, {All = "x"},
        {[1] = {}}, {[-1] = {}}, {[1.5] = {}}, {[nan == nan and 1 or 2] = {}}, {[{}] = {}},
        {[string.rep("P", 100)] = {}},
        {All = setmetatable({}, {__index = function() error("an __index ran") end})},
        {All = setmetatable({i8 = 1}, {__pairs = function() error("a __pairs ran") end, __len = error})},
        {All = {v2 = setmetatable({}, {__index = function() return 5 end})}},
    }
    if H.luajit then -- userdata and cdata where tables of fields belong
        local proxy = newproxy(true)
        getmetatable(proxy).__index = function() error("a proxy's __index ran") end
        local ffi = require "ffi"
        CASES[#CASES + 1] = {All = proxy}
        CASES[#CASES + 1] = {All = {v2 = proxy}}
        CASES[#CASES + 1] = {All = {v2 = ffi.new("float[2]", 1, 2)}}
        CASES[#CASES + 1] = {All = {i32 = ffi.new("int64_t", 5)}, Position = ffi.new("struct { float x, y; }", 1, 2)}
        CASES[#CASES + 1] = {All = {f = ffi.new("double", 1.5)}}
        CASES[#CASES + 1] = {[proxy] = {}}
    end

    it("spawns what the C path spawns and raises what it raises, leaving the world as it was", function()
        local fast, slow = world(), world({instructions = 1000000000}) -- a budget: the C path
        for i, init in ipairs(CASES) do
            local want = outcome(slow, init)
            assert.are.equal(want, outcome(fast, init), "case " .. i) -- (dumping it would run __pairs)
        end
        assert.are.equal(0, kiln.ffi_spawns(slow))
        assert.is_true(kiln.ffi_spawns(fast) > (FFI and 10 or -1))
        assert.are.equal(slow:count(), fast:count())
    end)

    it("bounds the quote of a huge string in its message", function()
        local w = world()
        local msg = H.unchanged(w, {"All"}, function() w:spawn{All = {tag = huge}} end)
        assert.is_true(#msg < 200, msg)
    end)
end)

describe("FFI views in debug mode, attacked", function()
    after_each(function() kiln.ffi_debug = nil end)

    -- The message of fn's error, which must not point into kiln's own Lua code.
    local function message(fn)
        local msg = H.raises(fn)
        assert.is_nil(msg:find("lua/kiln/", 1, true), "the error points into kiln: " .. msg)
        return msg
    end

    it("names the system when a view of a term it only reads is written, as without debug mode", function()
        for _, checked in ipairs({false, true}) do
            local w = H.world()
            local e = w:spawn{Position = {x = 1}, Velocity = {x = 2}}
            local msgs = {}
            w:system{name = "watch", reads = {"Position"}, writes = {"Velocity"}, run = function(world)
                for _, p in world:query{"Position", "Velocity"}:each() do
                    msgs[#msgs + 1] = message(function() p.x = 5 end)
                end
            end}
            w:system{name = "eacher", reads = {"Position"}, query = {"Position"}, each = function(_, p)
                msgs[#msgs + 1] = message(function() p.x = 6 end)
            end}
            kiln.ffi_debug = checked or nil
            assert(w:progress(0))
            assert.are.equal(2, #msgs)
            assert.matches("system 'watch' cannot write Position: it is read-only (declared only in reads)", msgs[1], 1, true)
            assert.matches("system 'eacher' cannot write Position: it is read-only (declared only in reads)", msgs[2], 1, true)
            assert.are.equal(1, w:get(e, "Position").x)
        end
    end)

    it("raises for an unknown field at the script's line, not inside kiln", function()
        kiln.ffi_debug = true
        local w = H.world()
        w:spawn{Position = {x = 1}}
        for _, p in w:query{"Position"}:each() do
            assert.matches("Position has no field 'zz'", message(function() return p.zz end), 1, true)
            assert.matches("Position has no field 'zz'", message(function() p.zz = 1 end), 1, true)
        end
    end)

    it("catches a view kept past world:close as one kept past its loop", function()
        kiln.ffi_debug = true
        local w = H.world()
        w:spawn{Position = {x = 1}}
        local kept
        for _, p in w:query{"Position"}:each() do kept = p end
        w:close()
        assert.matches("a Position view was used after its loop ended", message(function() return kept.x end), 1, true)
        assert.matches("a Position view was used after its loop ended", message(function() kept.x = 2 end), 1, true)
    end)

    it("catches a view kept from a loop while the same query runs its next loop", function()
        -- a table view is one table refilled for every row: kept, it is the next loop's view
        if not H.luajit then pending("FFI views exist only under LuaJIT") return end
        kiln.ffi_debug = true
        local w = H.world()
        w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local kept
        for _, p in q:each() do kept = p end
        for _, p in q:each() do
            assert.matches("a Position view was used after its loop ended", message(function() kept.x = 5 end), 1, true)
            assert.are.equal(1, p.x)
        end
    end)

    it("catches a view a suspended coroutine holds after world:progress ended its loop and moved the rows", function()
        kiln.ffi_debug = true
        local w = H.world()
        for i = 1, 5 do w:spawn{Position = {x = i}} end
        local q = w:query{"Position"}
        local errors = {}
        local co = coroutine.create(function()
            local n = 0
            for _, p in q:each() do
                n = n + 1
                coroutine.yield()
                errors[#errors + 1] = message(function() return p.x end)
                errors[#errors + 1] = message(function() p.x = 99 end)
            end
            return n
        end)
        assert(coroutine.resume(co))
        w:system{name = "wipe", writes = {"Position"}, run = function(world)
            for _, e in ipairs(world:entities()) do world:despawn(e) end
            for i = 1, 3 do world:spawn{Position = {x = -i}} end
        end}
        assert(w:progress(0))
        local ok, n = coroutine.resume(co)
        assert.is_true(ok, n)
        assert.are.equal(1, n) -- the ended loop found no more rows
        assert.are.equal(2, #errors)
        for _, msg in ipairs(errors) do assert.matches("a Position view was used after its loop ended", msg, 1, true) end
        local xs = {}
        for _, e in ipairs(w:entities()) do xs[#xs + 1] = w:get(e, "Position").x end
        table.sort(xs)
        assert.are.same({-3, -2, -1}, xs)
    end)

    it("names the check hook when q:each_ffi's read-only view of such a component is written", function()
        if not H.luajit then pending("q:each_ffi is q:each under Lua 5.4: table views, checked on write-back") return end
        local w = H.world()
        local parent = w:spawn{}
        local child = w:spawn{Parent = {entity = parent}}
        for _, checked in ipairs({false, true}) do
            kiln.ffi_debug = checked or nil
            for _, p in w:query{"Parent"}:each_ffi() do
                local msg = message(function() p.entity = child end)
                assert.matches("Parent is read-only in FFI views (a check hook validates its writes; use world:set)", msg, 1, true)
            end
        end
        assert.are.equal(parent, w:get(child, "Parent").entity)
    end)
end)

describe("FFI loops, attacked", function()
    it("names q:bulk_ffi when its loop cannot begin, as under Lua 5.4", function()
        local w = H.world()
        w:spawn{Position = {x = 1}, Velocity = {}}
        local q = w:query{"Position"}
        local msg = H.unchanged(w, nil, function()
            for _ in q:each() do q:bulk_ffi(function() end) end
        end)
        assert.matches("query:bulk_ffi: this query is already being iterated", msg, 1, true)
        w:system{name = "t", reads = {"Velocity"}, run = function(world)
            world:query{"Position"}:bulk_ffi(function() end)
        end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.matches("query:bulk_ffi: system 't' reads Position without declaring it in reads or writes",
                       failures[1].message, 1, true)
    end)
end)

describe("FFI view structs, attacked through field names", function()
    it("reads a field named like the read-only struct's own fields as a table view does", function()
        local w = kiln.world()
        w:component("Odd", "float x; float __kiln_ro_x;")
        local e = w:spawn{Odd = {x = 1, __kiln_ro_x = 2}}
        local seen = {}
        w:system{name = "look", reads = {"Odd"}, run = function(world)
            for _, o in world:query{"Odd"}:each() do seen[#seen + 1] = {o.x, o.__kiln_ro_x} end
        end}
        assert(w:progress(0))
        for _, o in w:query{"Odd"}:each() do seen[#seen + 1] = {o.x, o.__kiln_ro_x} end
        assert.are.same({{1, 2}, {1, 2}}, seen)
        if H.luajit then
            H.raises(function() for _ in w:query{"Odd"}:each_ffi() do end end,
                     "query:each_ffi: Odd cannot be mapped to an FFI type: field '__kiln_ro_x'")
        end
        assert.are.same({x = 1, __kiln_ro_x = 2}, w:get(e, "Odd"))
    end)
end)

describe("FFI loops on a closed world", function()
    it("raise the closed-query error at the script's line, not inside kiln", function()
        for _, looped in ipairs({false, true}) do -- a query's first loop, or one after others
            local w = H.world()
            w:spawn{Position = {x = 1}}
            local q = w:query{"Position"}
            if looped then
                for _ in q:each() do end
                for _ in q:each_ffi() do end
                q:bulk_ffi(function() end)
            end
            w:close()
            for _, call in ipairs({
                function() for _ in q:each() do end end,
                function() for _ in q:each_ffi() do end end,
                function() q:bulk_ffi(function() end) end,
            }) do
                local msg = H.raises(call, "attempt to use a query of a closed world")
                assert.is_nil(msg:find("lua/kiln/", 1, true), "the error points into kiln: " .. msg)
            end
        end
    end)
end)

describe("FFI loops whose body raises mid-row", function()
    it("keep the row's assignments made before the error under LuaJIT, none under Lua 5.4", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1}}
        w:system{name = "half", writes = {"Position"}, query = {"Position"}, each = function(_, p)
            p.x = 50
            error("boom")
        end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.matches("boom", failures[1].message, 1, true)
        assert.are.equal(H.ffi_each and 50 or 1, w:get(e, "Position").x)
        assert.is_false(pcall(function()
            for _, p in w:query{"Position"}:each() do
                p.y = 7
                error("boom")
            end
        end))
        assert.are.equal(H.ffi_each and 7 or 0, w:get(e, "Position").y)
    end)
end)

describe("read-only FFI views in nested system runs", function()
    it("name the system whose loop it is after another world's progress ran inside that loop", function()
        local w1, w2 = H.world(), H.world()
        local e = w1:spawn{Position = {x = 1}}
        w2:spawn{Position = {x = 1}}
        w2:system{name = "inner", writes = {"Position"}, run = function(world)
            for _, p in world:query{"Position"}:each() do p.x = 2 end
        end}
        w1:system{name = "outer", reads = {"Position"}, run = function(world)
            for _, p in world:query{"Position"}:each() do
                assert(w2:progress(0))
                p.x = 5
            end
        end}
        local ok, failures = w1:progress(0)
        assert.is_false(ok)
        assert.matches("system 'outer' cannot write Position: it is read-only (declared only in reads)",
                       failures[1].message, 1, true)
        assert.are.equal(1, w1:get(e, "Position").x)
    end)
end)

describe("a step kept from an earlier loop of a query", function()
    -- (step, state, ...) of q:each(), kept by the for that runs them, so the step and state of
    -- a loop left by break can be called again later
    local function keeper()
        local kept = {}
        return kept, function(step, state, ...)
            kept.step, kept.state = step, state
            return step, state, ...
        end
    end
    -- Position.x and its change tick of every entity of w
    local function positions(w, es)
        local out = {}
        for i, e in ipairs(es) do out[i] = {w:get(e, "Position").x, w:changed_tick(e, "Position")} end
        return out
    end

    it("gets no row inside a newer loop of the same query, which still visits every row", function()
        -- Lua 5.4's q:each hands out the query's one step: kept, it is the newer loop's step
        if not H.luajit then pending("under Lua 5.4 a kept step is the newer loop's step") return end
        for _, newer in ipairs({"each", "each_ffi"}) do -- the same state of the query, or its other one
            local w = H.world()
            for i = 1, 5 do w:spawn{Position = {x = i}} end
            local q = w:query{"Position"}
            local kept, keep = keeper()
            for _ in keep(q:each()) do break end
            local visited, taken = 0, {}
            for _, p in q[newer](q) do
                visited = visited + 1
                local e, v = kept.step(kept.state)
                taken[#taken + 1] = e
                assert.is_nil(v)
                p.x = p.x + 10
            end
            assert.are.equal(5, visited, newer)
            assert.are.same({}, taken, newer)
            local xs = {}
            for _, p in q:each() do xs[#xs + 1] = p.x end
            assert.are.same({11, 12, 13, 14, 15}, xs, newer)
        end
    end)

    it("writes and marks nothing, called in a system that declares the component read-only", function()
        for _, state in ipairs({"kept", "newer"}) do -- the kept loop's state, or the newer loop's
            local w = H.world()
            local es = {}
            for i = 1, 4 do es[i] = w:spawn{Position = {x = i}} end
            local q = w:query{"Position"}
            local kept, keep = keeper()
            for _ in keep(q:each()) do break end -- outside systems: Position writable
            assert(w:progress(0))
            local before = positions(w, es)
            w:system{name = "watch", reads = {"Position"}, run = function()
                local newer, keep_newer = keeper()
                for _ in keep_newer(q:each()) do
                    local _, p = kept.step(state == "kept" and kept.state or newer.state)
                    if p then pcall(function() p.x = 99 end) end
                end
            end}
            assert(w:progress(0))
            assert.are.same(before, positions(w, es), state)
        end
    end)

    it("gets no row inside a loop of a newer query that took its collected query's place", function()
        if not H.luajit then pending("under Lua 5.4 a kept step is its own query's step") return end
        collectgarbage()
        collectgarbage() -- the places of earlier tests' queries freed first
        local w = H.world()
        for i = 1, 3 do w:spawn{Position = {x = i}} end
        local kept, keep = keeper()
        do
            local q = w:query{"Position"}
            for _ in keep(q:each()) do break end
        end
        assert.are.equal(3, w:count()) -- ends the loop left by break
        collectgarbage()
        collectgarbage() -- the query and its loops' state are gone, their place freed
        local q = w:query{"Position"}
        local newer, keep_newer = keeper()
        local visited, taken = 0, {}
        for _, p in keep_newer(q:each()) do
            visited = visited + 1
            taken[#taken + 1] = kept.step(kept.state)
            p.x = p.x + 10
        end
        -- the same step (one per shape and view types) in the same place of the same table
        assert.are.equal(kept.step, newer.step)
        assert.are.equal(kept.state % 2 ^ 20, newer.state % 2 ^ 20)
        assert.are_not.equal(kept.state, newer.state)
        assert.are.equal(3, visited)
        assert.are.same({}, taken)
    end)

    it("gets nil for a state no loop has: nil, a string, a table, NaN, infinities, negative numbers", function()
        if not H.luajit then pending("under Lua 5.4 a kept step is its own query's step") return end
        local w = H.world()
        w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local kept, keep = keeper()
        for _ in keep(q:each()) do
            for _, state in ipairs({"1", tostring(kept.state), {}, 0 / 0, 1 / 0, -1 / 0, -kept.state,
                                    kept.state + 0.5, kept.state - 2 ^ 20, kept.state + 2 ^ 20}) do
                assert.is_nil(kept.step(state), tostring(state))
            end
            assert.is_nil((kept.step()))
        end
    end)

    it("writes and marks nothing when its coroutine is resumed in such a system's loop", function()
        local w = H.world()
        local es = {}
        for i = 1, 4 do es[i] = w:spawn{Position = {x = i}} end
        local q = w:query{"Position"}
        local co = coroutine.create(function()
            local rows = 0
            for _, p in q:each() do -- outside systems: Position writable
                rows = rows + 1
                if rows > 1 then p.x = 99 end
                coroutine.yield()
            end
            return rows
        end)
        assert(coroutine.resume(co))
        assert(w:progress(0)) -- ends the loop left suspended
        local before = positions(w, es)
        local results
        w:system{name = "watch", reads = {"Position"}, run = function()
            for _ in q:each() do
                if not results then results = {coroutine.resume(co)} end
            end
        end}
        assert(w:progress(0))
        assert.are.same({true, 1}, results)
        assert.are.same(before, positions(w, es))
    end)
end)

describe("FFI loops after a script replaced the string library", function()
    it("map new components, run and raise their own messages as before", function()
        local w, closed = H.world(), H.world()
        -- components no FFI loop has seen: their structs are declared under the attack
        w:component("Tampered", "float a; int32_t b;")
        w:component("Unmapped", "float __kiln_odd;")
        local e = w:spawn{Position = {x = 1}, Tampered = {a = 1, b = 2}, Unmapped = {__kiln_odd = 3}}
        w:system{name = "each", writes = {"Tampered"}, query = {"Tampered"}, each = function(_, t) t.b = t.b + 1 end}
        local closed_q = closed:query{"Position"}
        closed:close()
        -- a new loop site, which loop_sites.lua reads under the attack
        local run = assert(load([[
            local w, q, fn = ...
            local n = 0
            for _, t, p in q:each() do t.a = t.a + p.x n = n + 1 end
            for _, t in q:each_ffi() do t.a = t.a * 2 end
            q:bulk_ffi(fn)
            return n
        ]], "=tampered"))
        local meta = getmetatable("")
        local saved_index, saved_string, saved_table = meta.__index, {}, {}
        for k, v in pairs(string) do saved_string[k] = v end
        for k, v in pairs(table) do saved_table[k] = v end
        local results = {}
        local ok, err = pcall(function()
            local function boom() error("a replaced string or table function was called", 2) end
            meta.__index = boom
            for k in pairs(saved_string) do string[k] = boom end
            for k in pairs(saved_table) do table[k] = boom end
            results.rows = run(w, w:query{"Tampered", "Position"}, function(n, _, t) t[0].b = t[0].b + n * 10 end)
            assert(w:progress(0))
            results.unmapped = select(2, pcall(function() for _ in w:query{"Unmapped"}:each_ffi() do end end))
            results.closed = select(2, pcall(function() for _ in closed_q:each_ffi() do end end))
            kiln.ffi_debug = true
            results.field = select(2, pcall(function()
                for _, t in w:query{"Tampered"}:each() do return t.zz end
            end))
            kiln.ffi_debug = nil
        end)
        kiln.ffi_debug = nil
        meta.__index = saved_index
        for k, v in pairs(saved_string) do string[k] = v end
        for k, v in pairs(saved_table) do table[k] = v end
        assert(ok, err)
        assert.are.equal(1, results.rows)
        assert.are.same({a = 4, b = 13}, w:get(e, "Tampered"))
        if H.luajit then -- Lua 5.4's q:each_ffi is q:each, with table views
            assert.matches("query:each_ffi: Unmapped cannot be mapped to an FFI type: field '__kiln_odd'",
                           results.unmapped, 1, true)
        end
        assert.matches("attempt to use a query of a closed world", results.closed, 1, true)
        assert.is_nil(results.closed:find("lua/kiln/", 1, true), results.closed)
        assert.matches("Tampered has no field 'zz'", results.field, 1, true)
        assert.is_nil(results.field:find("lua/kiln/", 1, true), results.field)
    end)
end)
