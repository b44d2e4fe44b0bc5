-- jit_views_spec.lua: q:each_ffi(), whose views are FFI pointers into the columns under
-- LuaJIT (lua/kiln/ffi.lua, lua/src/jit_views.c) and q:each()'s table views under Lua 5.4.
local kiln = require "kiln"
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local H = dofile(here .. "helpers.lua")

local function jit_only()
    if not H.luajit then pending("FFI views exist only under LuaJIT") end
    return H.luajit
end

describe("q:each_ffi()", function()
    after_each(function() kiln.ffi_debug = nil end)

    it("writes through a view into the column", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1, y = 2}, Velocity = {x = 10, y = 20}}
        local b = w:spawn{Position = {x = 3}, Velocity = {x = 1}, Frozen = true} -- a second chunk
        local seen = {}
        for e, p, v in w:query{"Position", "Velocity"}:each_ffi() do
            seen[#seen + 1] = e
            p.x = p.x + v.x
            p.y = p.y + v.y
        end
        table.sort(seen)
        local want = {a, b}
        table.sort(want)
        assert.are.same(want, seen)
        assert.are.equal(11, w:get(a, "Position").x)
        assert.are.equal(22, w:get(a, "Position").y)
        assert.are.equal(4, w:get(b, "Position").x)
    end)

    it("hands out pointers typed after the schema: vec3 a struct, arrays and char arrays", function()
        if not jit_only() then return end
        local ffi = require "ffi"
        local w = kiln.world()
        w:component("Body", "vec3 p; int16_t k[3]; char name[8]; double d; bool alive; entity target;")
        local e = w:spawn{Body = {p = {x = 1, y = 2, z = 3}, k = {7, 8, 9}, name = "ship", d = 2.5,
                                  alive = true, target = 42}}
        for _, b in w:query{"Body"}:each_ffi() do
            assert.are.equal("cdata", type(b))
            assert.are.equal(3, b.p.z)
            assert.are.equal(9, b.k[2]) -- FFI arrays count from 0
            assert.are.equal("ship", ffi.string(b.name))
            assert.are.equal(2.5, b.d)
            assert.is_true(b.alive)
            assert.are.equal(42, tonumber(b.target))
            b.p.y = -4
            b.k[0] = -7
            ffi.copy(b.name, "boat")
        end
        local got = w:get(e, "Body")
        assert.are.equal(-4, got.p.y)
        assert.are.same({-7, 8, 9}, got.k)
        assert.are.equal("boat", got.name)
    end)

    it("marks every row of a writable term it visits changed at the world's tick", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1}, Velocity = {}}
        assert(w:progress(0))
        assert(w:progress(0))
        local before = w:changed_tick(e, "Velocity")
        assert.is_true(w:changed_tick(e, "Position") < w:tick())
        for _, p in w:query{"Position", "Velocity"}:each_ffi() do p.x = 5 end
        assert.are.equal(w:tick(), w:changed_tick(e, "Position"))
        if H.luajit then -- views cannot tell reads from writes: every visited row is stamped
            assert.are.equal(w:tick(), w:changed_tick(e, "Velocity"))
        else
            assert.are.equal(before, w:changed_tick(e, "Velocity"))
        end
    end)

    it("makes a term declared only in reads read-only, and leaves its rows unmarked", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1}, Velocity = {x = 2}}
        assert(w:progress(0))
        local vel_tick = w:changed_tick(e, "Velocity")
        local q = w:query{"Position", "Velocity"}
        local msg
        w:system{name = "move", reads = {"Velocity"}, writes = {"Position"}, run = function()
            for _, p, v in q:each_ffi() do
                p.x = p.x + v.x
                msg = H.raises(function() v.x = 100 end)
            end
        end}
        assert(w:progress(0))
        assert.is_truthy(msg:find("constant", 1, true) or msg:find("read-only", 1, true), msg)
        assert.are.equal(3, w:get(e, "Position").x)
        assert.are.equal(2, w:get(e, "Velocity").x)
        assert.are.equal(vel_tick, w:changed_tick(e, "Velocity"))
        assert.are.equal(w:tick(), w:changed_tick(e, "Position"))
    end)

    it("raises in debug mode when a view is used after its loop ended", function()
        kiln.ffi_debug = true
        local w = H.world()
        w:spawn{Position = {x = 1}}
        local kept
        for _, p in w:query{"Position"}:each_ffi() do
            kept = p
            p.x = 2
        end
        H.raises(function() return kept.x end, "a Position view was used after its loop ended")
        H.raises(function() kept.x = 3 end, "a Position view was used after its loop ended")
        assert.are.equal(2, w:get(w:entities()[1], "Position").x)
    end)

    it("raises in debug mode for a view kept from a loop left by break", function()
        kiln.ffi_debug = true
        local w = H.world()
        w:spawn{Position = {x = 1}}
        w:spawn{Position = {x = 2}}
        local kept
        for _, p in w:query{"Position"}:each_ffi() do
            kept = p
            break
        end
        H.raises(function() return kept.x end, "after its loop ended")
    end)

    it("defers structural changes made inside the loop until it ends", function()
        local w = H.world()
        for i = 1, 3 do w:spawn{Position = {x = i}} end
        local q = w:query{"Position"}
        local rows = 0
        for e in q:each_ffi() do
            rows = rows + 1
            w:spawn{Position = {x = 100}}
            w:despawn(e)
            assert.is_true(w:is_alive(e))
        end
        assert.are.equal(3, rows)
        assert.are.equal(3, #w:entities())
        for _, p in q:each_ffi() do assert.are.equal(100, p.x) end
    end)

    it("lands the deferred changes of a loop left by break at the next world call", function()
        local w = H.world()
        w:spawn{Position = {x = 1}}
        w:spawn{Position = {x = 2}}
        local q = w:query{"Position"}
        for e in q:each_ffi() do
            w:despawn(e)
            break
        end
        assert.are.equal(1, #w:entities())
        local n = 0
        for _ in q:each_ffi() do n = n + 1 end -- the query can loop again
        assert.are.equal(1, n)
    end)

    it("lets a query left by break loop again inside another query's loop of the same shape", function()
        local w = H.world()
        w:spawn{Position = {x = 1}, Velocity = {x = 1}}
        w:spawn{Position = {x = 2}, Velocity = {x = 2}}
        local outer, inner = w:query{"Velocity"}, w:query{"Position"}
        local rows = 0
        for _ in outer:each_ffi() do
            for _ in inner:each_ffi() do break end
            for _ in inner:each_ffi() do rows = rows + 1 end
        end
        assert.are.equal(4, rows)
    end)

    it("ends a loop an error left in a system, which then fails", function()
        local w = H.world()
        w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        w:system{name = "bad", writes = {"Position"}, run = function()
            for _ in q:each_ffi() do
                w:spawn{Position = {}}
                error("boom")
            end
        end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.is_truthy(tostring(failures[1].message):find("boom", 1, true))
        assert.are.equal(1, #w:entities()) -- as after q:each, the failed run's spawn is dropped
        local n = 0
        for _ in q:each_ffi() do n = n + 1 end -- and the loop no longer holds the query
        assert.are.equal(1, n)
    end)

    it("refuses a component whose values it cannot map, naming it", function()
        if not jit_only() then return end
        local w = kiln.world()
        w:component("Script", "lua")
        w:spawn{Script = {}}
        H.raises(function() for _ in w:query{"Script"}:each_ffi() do end end,
            "query:each_ffi: Script cannot be mapped to an FFI type: it holds Lua values")
        assert.is_false(w:query{"Script"}:each()() == nil) -- the query itself still works
    end)

    it("runs the table path where an instruction budget is armed", function()
        if not jit_only() then return end
        local w = H.world{instructions = 1000000}
        w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local kind
        w:system{name = "budgeted", writes = {"Position"}, run = function()
            for _, p in q:each_ffi() do
                kind = type(p)
                p.x = 7
            end
        end}
        assert(w:progress(0))
        assert.are.equal("table", kind)
        assert.are.equal(7, w:get(w:entities()[1], "Position").x)
    end)

    it("hands a mod table views, in its top level and in its systems", function()
        local M = dofile(here .. "mods_helpers.lua")
        local dir = M.folder()
        local w, mods = M.host()
        M.write(dir, "movers.lua", [[
            world:component("Speed", "float v;")
            for i = 1, 3 do world:spawn{Speed = {v = i}} end
            local q = world:query{"Speed"}
            for _, s in q:each_ffi() do s.v = s.v * 2 end
            for _, s in q:each_ffi() do print(type(s)) break end
            world:system{name = "speed_up", writes = {"Speed"}, run = function()
                q:bulk_ffi(function(n, _, s) s[0].v = s[0].v + n end)
            end}
        ]])
        assert(mods:load(dir .. "/movers.lua"))
        assert.are.same({}, M.frames(w, 1))
        local total = 0
        for _, e in ipairs(M.entities_with(w, "Speed")) do total = total + w:get(e, "Speed").v end
        assert.are.equal(2 + 4 + 6 + 3, total)
        assert.are.same({"table"}, mods:log("movers"))
        M.cleanup()
    end)

    it("checks the declared access of a system before the loop begins", function()
        local w = H.world()
        w:spawn{Position = {x = 1}, Health = {hp = 1}}
        local q = w:query{"Position", "Health"}
        local msg
        w:system{name = "sneaky", writes = {"Position"}, run = function()
            msg = H.raises(function() for _ in q:each_ffi() do end end)
        end}
        assert(w:progress(0))
        assert.is_truthy(msg:find("Health", 1, true), msg)
    end)
end)

describe("q:bulk_ffi()", function()
    it("calls its function once per chunk with the rows and the extra arguments", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}, Velocity = {x = 2}}
        local b = w:spawn{Position = {x = 10}, Velocity = {x = 3}, Frozen = true}
        local rows, seen = 0, {}
        w:query{"Position", "Velocity"}:bulk_ffi(function(n, entities, p, v, dt)
            for i = 0, n - 1 do
                seen[#seen + 1] = tonumber(entities[i])
                p[i].x = p[i].x + v[i].x * dt
            end
            rows = rows + n
        end, 0.5)
        assert.are.equal(2, rows)
        table.sort(seen)
        local want = {a, b}
        table.sort(want)
        assert.are.same(want, seen)
        assert.are.equal(2, w:get(a, "Position").x)
        assert.are.equal(11.5, w:get(b, "Position").x)
        assert.are.equal(w:tick(), w:changed_tick(a, "Position"))
    end)

    it("ends its loop when the function raises, so the query loops again", function()
        local w = H.world()
        w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        H.raises(function() q:bulk_ffi(function() error("stop here") end) end, "stop here")
        local n = 0
        q:bulk_ffi(function(count) n = n + count end)
        assert.are.equal(1, n)
        H.raises(function() q:bulk_ffi(42) end, "bad argument #1 to 'query:bulk_ffi' (function expected, got number)")
    end)

    it("hands read-only terms of a system out const", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1}, Velocity = {x = 2}}
        local q = w:query{"Position", "Velocity"}
        local msg
        w:system{name = "move", reads = {"Velocity"}, writes = {"Position"}, run = function()
            q:bulk_ffi(function(n, _, p, v)
                p[0].x = p[0].x + v[0].x
                msg = H.raises(function() v[0].x = 9 end)
            end)
        end}
        assert(w:progress(0))
        assert.is_truthy(msg:find("constant", 1, true) or msg:find("read-only", 1, true), msg)
        assert.are.equal(3, w:get(e, "Position").x)
        assert.are.equal(2, w:get(e, "Velocity").x)
    end)
end)
