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
        H.same_entities({a, b}, seen)
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

    it("names q:bulk_ffi and the caller's line when bulk_ffi refuses a component", function()
        if not jit_only() then return end
        local w = kiln.world()
        w:component("Script", "lua")
        w:spawn{Script = {}}
        local ok, err = pcall(function() w:query{"Script"}:bulk_ffi(function() end) end)
        assert.is_false(ok)
        assert.matches("^[^:]*jit_views_spec%.lua:%d+: query:bulk_ffi: Script cannot be mapped to an FFI type: "
                       .. "it holds Lua values %(use q:bulk%)$", err)
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

    it("finds the loop slots a stop left behind once every slot was handed out", function()
        if not jit_only() then return end
        -- as if every slot a state can hold (2^20 - 1) had been taken, and those not in use
        -- now had been left by a stop between their take and their record (none freed)
        local slots = debug.getregistry()["kiln.ffi_shared"].slots
        local top, free = slots.top, {}
        for i = #slots.free, 1, -1 do free[i], slots.free[i] = slots.free[i], nil end
        slots.top = 2 ^ 20 - 1
        local w, q = H.movers(3)
        local kinds = {}
        for _, p in q:each_ffi() do
            kinds[#kinds + 1] = type(p)
            p.x = p.x + 10
        end
        assert.are.same({"cdata", "cdata", "cdata"}, kinds)
        assert.are.equal(11, w:get(w:entities()[1], "Position").x)
        -- two states at once take two slots: each loop number names one loop
        local q2 = w:query{"Position"}
        local n = 0
        for _, a in q:each_ffi() do
            for _, b in q2:each_ffi() do n = n + (type(a) == "cdata" and type(b) == "cdata" and 1 or 0) end
        end
        assert.are.equal(9, n)
        -- the state shared by every spec in this process as it was: the states collected
        -- (their finalizers free the slots they took), the free list and the top back
        w, q, q2 = nil, nil, nil
        collectgarbage()
        collectgarbage()
        for i = 1, #free do slots.free[#slots.free + 1] = free[i] end
        slots.top = top
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
        H.same_entities({a, b}, seen)
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

    it("ends its loop when stopped at any instruction, as a spent budget or a time limit stops it", function()
        -- from the n-th instruction on every one raises, pcall or not: the loop's end cannot
        -- be Lua code after a pcall (it left the query iterating and the world deferred, so
        -- world:progress refused every frame after)
        local w = H.world()
        for i = 1, 3 do w:spawn{Position = {x = i}} end
        w:spawn{Position = {x = 9}, Frozen = true} -- a second chunk
        local q = w:query{"Position"}
        local add = assert(load("local n, _, p = ... for i = 0, n - 1 do p[i].x = p[i].x + 1 end", "=user"))
        q:bulk_ffi(add) -- its state made and its loop compiled: every run below is the same
        local progress, each, pcall = w.progress, q.each, pcall
        H.every_stop(function() q:bulk_ffi(add) end, function(n, ok, err)
            if not ok then assert.are.equal("stopped", err) end
            local stepped, why = pcall(progress, w, 0)
            assert.is_true(stepped, "after a stop at instruction " .. n .. ": " .. tostring(why))
            local looped, lwhy = pcall(function() for _ in each(q) do end end)
            assert.is_true(looped, "after a stop at instruction " .. n .. ": " .. tostring(lwhy))
        end, 20000)
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

describe("q:each() under LuaJIT", function()
    after_each(function() kiln.ffi_debug = nil end)

    -- the type a loop's first view has, and the world after the loop
    local function view_type(w, terms)
        for _, v in w:query(terms):each() do return type(v) end
    end

    it("hands out FFI views for numbers, booleans and vectors, across chunks", function()
        local w = kiln.world()
        w:component("Body", "vec3 p; float m; int16_t k; bool alive;")
        w:component("Tag")
        local a = w:spawn{Body = {p = {x = 1, y = 2, z = 3}, m = 2, k = 5, alive = true}}
        local b = w:spawn{Body = {m = 4}, Tag = true} -- a second archetype: a second chunk
        local seen = {}
        for e, body in w:query{"Body"}:each() do
            seen[#seen + 1] = e
            assert.are.equal(H.ffi_each and "cdata" or "table", type(body))
            assert.are.equal("number", type(e))
            body.p.y = body.p.y + body.m -- a vector field changes in place on both paths
            body.k = body.k + 1
            body.alive = not body.alive
        end
        H.same_entities({a, b}, seen)
        assert.are.same({p = {x = 1, y = 4, z = 3}, m = 2, k = 6, alive = false}, w:get(a, "Body"))
        assert.are.same({p = {x = 0, y = 4, z = 0}, m = 4, k = 1, alive = true}, w:get(b, "Body"))
    end)

    it("keeps table views where a field would read differently through FFI, or a term has no FFI type", function()
        local w = kiln.world()
        w:component("Arr", "int16_t k[3];")
        w:component("Name", "char n[8];")
        w:component("Big", "int64_t n;")
        w:component("Link", "entity target;")
        w:component("M", "mat4 m;")
        w:component("Script", "lua")
        w:component("Plain", "float x;")
        w:component("Tag")
        local e = w:spawn{Arr = {k = {1, 2, 3}}, Name = {n = "ship"}, Big = {n = 7}, Link = {target = 3},
                          M = {}, Script = {hp = 1}, Plain = {x = 1}}
        for _, name in ipairs({"Arr", "Name", "Big", "Link", "M", "Script"}) do
            assert.are.equal("table", view_type(w, {name}), name)
            -- one such term keeps the whole loop on table views
            assert.are.equal("table", view_type(w, {"Plain", name}), name)
        end
        assert.are.equal("table", view_type(w, {"Plain", optional = {"Tag"}})) -- an optional tag
        assert.are.equal(H.ffi_each and "cdata" or "table", view_type(w, {"Plain"}))
        for _, arr, name in w:query{"Arr", "Name"}:each() do -- read and written as under Lua 5.4
            assert.are.equal(2, arr.k[2])
            assert.are.equal("ship", name.n)
            arr.k[1] = 9
            name.n = "boat"
        end
        assert.are.same({9, 2, 3}, w:get(e, "Arr").k)
        assert.are.equal("boat", w:get(e, "Name").n)
    end)

    it("runs each-systems over FFI views, their read terms read-only and named in the error", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1}, Velocity = {x = 2, y = 3}}
        local kinds = {}
        w:system{name = "move", query = {"Position", "Velocity"}, writes = {"Position"},
                 each = function(_, p, v, dt)
                     kinds[#kinds + 1] = type(p) .. "," .. type(v)
                     p.x = p.x + v.x * dt
                 end}
        assert(w:progress(0.5))
        assert.are.equal(2, w:get(e, "Position").x)
        assert.are.same({H.ffi_each and "cdata,cdata" or "table,table"}, kinds)
        w:system{name = "cheat", query = {"Velocity"}, each = function(_, v) v.x = 50 end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.is_truthy(failures[1].message:find(
            "system 'cheat' cannot write Velocity: it is read-only (declared only in reads)", 1, true),
            failures[1].message)
        assert.are.equal(2, w:get(e, "Velocity").x)
        assert.is_true(H.not_deferred(w))
    end)

    it("runs an each-system's rows across chunks with tags, optional terms and checked views", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}, Velocity = {x = 10}, Frozen = true}
        local b = w:spawn{Position = {x = 2}, Frozen = true} -- another archetype: another chunk
        w:spawn{Position = {x = 3}} -- not Frozen: not visited
        local seen = {}
        w:system{name = "thaw", query = {"Position", "Frozen", optional = {"Velocity"}}, writes = {"Position"},
                 each = function(e, p, frozen, v, dt)
                     seen[#seen + 1] = e
                     assert.is_true(frozen)
                     p.x = p.x + (v and v.x or 100) * dt
                 end}
        assert(w:progress(1))
        H.same_entities({a, b}, seen)
        assert.are.equal(11, w:get(a, "Position").x)
        assert.are.equal(102, w:get(b, "Position").x)
        assert.are.equal(w:tick(), w:changed_tick(b, "Position"))
        kiln.ffi_debug = true -- the same rows through checked views
        assert(w:progress(1))
        assert.are.equal(21, w:get(a, "Position").x)
        assert.are.equal(202, w:get(b, "Position").x)
    end)

    it("runs an each-system over table views where a term has no FFI type, or a budget is armed", function()
        local w = H.world{instructions = 1000000}
        w:component("Script", "lua")
        w:spawn{Position = {x = 1}, Script = {n = 1}}
        local kinds = {}
        w:system{name = "scripted", query = {"Position", "Script"}, writes = {"Script"},
                 each = function(_, p, s) kinds[#kinds + 1] = type(p); s.n = s.n + p.x end}
        w:system{name = "budgeted", query = {"Position"}, writes = {"Position"},
                 each = function(_, p) kinds[#kinds + 1] = type(p); p.x = p.x + 1 end}
        assert(w:progress(0))
        assert.are.same({"table", "table"}, kinds)
        assert.are.equal(2, w:get(w:entities()[1], "Position").x)
        assert.are.equal(2, w:get(w:entities()[1], "Script").n)
    end)

    it("sets every component of a vector assigned a table (keys left out are 0 through FFI)", function()
        local w = kiln.world()
        w:component("Body", "vec3 dir;")
        local e = w:spawn{Body = {dir = {x = 1, y = 2, z = 3}}}
        for _, b in w:query{"Body"}:each() do b.dir = {x = 7} end
        -- a table view keeps the keys the table leaves out; an FFI view initialises the vector
        -- from the table, as ffi.new would
        assert.are.same(H.ffi_each and {x = 7, y = 0, z = 0} or {x = 7, y = 2, z = 3}, w:get(e, "Body").dir)
        for _, b in w:query{"Body"}:each() do b.dir = {x = 1, y = 2, z = 3} end
        assert.are.same({x = 1, y = 2, z = 3}, w:get(e, "Body").dir)
    end)

    it("hands out views whose fields pairs() walks, and whose unknown fields raise", function()
        local w = H.world()
        w:spawn{Position = {x = 1, y = 2}}
        for _, p in w:query{"Position"}:each() do
            local keys = {}
            for k, value in pairs(p) do keys[#keys + 1] = k .. "=" .. string.format("%g", value) end
            table.sort(keys)
            assert.are.same({"x=1", "y=2"}, keys)
            assert.are.equal(3, p.x + p.y) -- what both paths do alike
            H.raises(function() return p.z end, "Position has no field 'z'")
            H.raises(function() p.z = 1 end, "Position has no field 'z'")
        end
    end)

    it("catches a view used after its loop in debug mode, also after break", function()
        local w = H.world()
        for i = 1, 2 do w:spawn{Position = {x = i}} end
        local q = w:query{"Position"}
        kiln.ffi_debug = true
        local kept
        for _, p in q:each() do kept = p end
        H.raises(function() return kept.x end, "a Position view was used after its loop ended")
        for _, p in q:each() do kept = p break end
        H.raises(function() kept.x = 1 end, "a Position view was used after its loop ended")
    end)

    it("stamps the rows it visits, and writes as C does (no range check), under LuaJIT", function()
        if not jit_only() then return end
        local w = kiln.world()
        w:component("S", "float f; int8_t small;")
        local e = w:spawn{S = {f = 1, small = 1}}
        assert(w:progress(0))
        assert(w:progress(0))
        for _, s in w:query{"S"}:each() do local _ = s.f end -- read only, outside systems
        assert.are.equal(w:tick(), w:changed_tick(e, "S"))
        for _, s in w:query{"S"}:each() do
            s.f = 1e39    -- past float range: infinity
            s.small = 300 -- wraps as C's conversion does
        end
        assert.are.same({f = math.huge, small = 44}, w:get(e, "S"))
        H.raises(function() for _, s in w:query{"S"}:each() do s.f = "1" end end, "cannot convert 'string' to 'float'")
    end)

    it("ends a loop a coroutine left when its system's run ends: resumed later, it finds no row", function()
        local w = H.world()
        for i = 1, 3 do w:spawn{Position = {x = i}} end
        local q = w:query{"Position"}
        local co, rows = nil, 0
        w:system{name = "opens", writes = {"Position"}, run = function()
            co = coroutine.create(function()
                for _, p in q:each() do rows = rows + 1; p.x = -1; coroutine.yield() end
            end)
            assert(coroutine.resume(co))
        end}
        assert(w:progress(0))
        assert.is_true(coroutine.resume(co)) -- the loop ended with the run: no more rows
        assert.are.equal("dead", coroutine.status(co))
        assert.are.equal(1, rows)
        local negative = 0
        for _, p in q:each() do if p.x < 0 then negative = negative + 1 end end
        -- an FFI view wrote at once; a table view's row is dropped with its loop
        assert.are.equal(H.ffi_each and 1 or 0, negative)
    end)

    -- the value of the local named e in the function level levels above the caller
    local function local_e(level)
        for i = 1, 200 do
            local name, value = debug.getlocal(level + 2, i)
            if name == nil then return "no local e" end
            if name == "e" then return value end
        end
    end

    it("hands the entity to a loop body that reads it in any way", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local got = {}
        for e in q:each() do got.stored = e end
        for e in q:each() do got.closure = (function() return e end)() end
        for e in q:each() do for _ = 1, 1 do got.nested = e end end
        for e in q:each() do if e == a then got.compared = a end end
        for e in q:each() do got.text = "entity " .. e end
        for e, p in q:each() do p.x = e end -- a store through the view
        local function first() for e in q:each() do return e end end
        got.returned = first()
        assert.are.same({stored = a, closure = a, nested = a, compared = a, text = "entity " .. a, returned = a}, got)
        assert.are.equal(a, w:get(a, "Position").x)
    end)

    it("gives a loop body that never reads its entity true in its place under LuaJIT, and still stamps its rows", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        assert(w:progress(0))
        local q = w:query{"Position"}
        local seen = {}
        for e, p in q:each() do
            p.x = p.x + 1
            seen[#seen + 1] = local_e(0) -- a call on the for's line would keep the entity
        end
        assert.are.same({H.ffi_each and true or a}, seen)
        assert.are.equal(2, w:get(a, "Position").x)
        assert.are.equal(w:tick(), w:changed_tick(a, "Position"))
        kiln.ffi_debug = true -- checked views keep every value as it is
        for e, p in q:each() do p.x = p.x + 1; seen[2] = local_e(0) end
        assert.are.equal(a, seen[2])
    end)

    it("hands the entity to both loops written on one line, which it cannot tell apart", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q, r = w:query{"Position"}, w:query{"Position"}
        local seen = {}
        for e in q:each() do seen[1] = local_e(0) end for e in r:each() do seen[2] = local_e(0) end
        assert.are.same({a, a}, seen)
    end)

    it("hands the entity to q:each called in the body of another loop written on its line", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local got = {}
        for _ in ipairs({1}) do local step, st = q:each(); got[1] = step(st); step(st) end
        assert.are.same({a}, got)
    end)

    it("hands the entity to a loop in a stripped chunk, whose lines it cannot read", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local function collect(step, st)
            local e = step(st)
            step(st)
            return e
        end
        local f = load(string.dump(function(query, gather)
            local got
            for _ in ipairs({1}) do
                got = gather(query:each())
            end
            return got
        end, true))
        assert.are.equal(a, f(q, collect))
    end)

    it("hands the entity to a wrapper of q:each called on the loop's line, whose body reads it elsewhere", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        -- hands the body (view, entity): the loop's first variable is the view; the iterator
        -- comes in a table, so the loop's own call takes one argument (a CALL, as q:each's is)
        local function swap(it)
            local f, s, c = it[1], it[2], it[3]
            return function()
                local e, p = f(s, c)
                c = e
                if e == nil then return nil end
                return p, e
            end
        end
        local got = {}
        for _, e in swap({q:each()}) do got[#got + 1] = e end
        assert.are.same({a}, got)
    end)

    it("hands the queries of one shape and view types one step, each loop still its own query's rows", function()
        if not jit_only() then return end
        local w = H.world()
        local a = w:spawn{Position = {x = 1}, Velocity = {x = 2}}
        local b = w:spawn{Position = {x = 3}, Velocity = {x = 4}, Frozen = true}
        local q1, q2 = w:query{"Position", "Velocity"}, w:query{"Position", "Velocity", without = {"Frozen"}}
        local step1, loop1 = q1:each()
        local step2, loop2 = q2:each()
        -- one closure for both: LuaJIT compiles one loop for it, its view types constants
        assert.are.equal(step1, step2)
        assert.are_not.equal(loop1, loop2)
        local got1, got2 = {}, {}
        for e, p in step2, loop2 do
            got2[#got2 + 1] = e
            p.x = p.x + 10
        end
        for e in step1, loop1 do got1[#got1 + 1] = e end
        H.same_entities({a, b}, got1)
        assert.are.same({a}, got2)
        assert.are.same({11, 3}, {w:get(a, "Position").x, w:get(b, "Position").x})
        -- the same terms in a system that declares Velocity only in reads: a const view type
        local step3
        w:system{name = "move", reads = {"Velocity"}, writes = {"Position"}, run = function()
            local step, loop = q1:each()
            step3 = step
            for _ in step, loop do end
        end}
        assert(w:progress(0))
        assert.is_function(step3)
        assert.are_not.equal(step1, step3)
    end)

    it("leaves q:bulk its table shape (field arrays from 1) on both interpreters", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1}, Velocity = {x = 2}}
        w:query{"Position", "Velocity"}:bulk(function(n, entities, p, v)
            assert.are.equal("table", type(p.x))
            assert.are.equal(e, entities[1])
            for i = 1, n do p.x[i] = p.x[i] + v.x[i] end
        end)
        assert.are.equal(3, w:get(e, "Position").x)
    end)
end)
