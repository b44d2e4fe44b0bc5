-- frame_sweep_spec.lua: frames attacked from inside their systems: event floods, events
-- emitted while a loop reads them, resources set and removed within one frame, and a frame's
-- own steps (progress, close) called from a system.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

describe("a frame attacked from inside", function()
    it("visits, in the same loop, events emitted outside a system while it reads", function()
        local w = H.world()
        w:event("Hit", "int32_t n;")
        w:emit("Hit", {n = 1})
        local seen = {}
        for ev in w:events("Hit") do
            seen[#seen + 1] = ev.n
            if ev.n < 5 then w:emit("Hit", {n = ev.n + 1}) end
        end
        assert.are.same({1, 2, 3, 4, 5}, seen)
    end)

    it("lands a flood of 200000 events a system emitted at the end of its stage, all readable", function()
        local w = H.world()
        w:event("Tick", "int32_t n;")
        local during, after = nil, nil
        w:system{name = "flood", run = function(world)
            for i = 1, 200000 do world:emit("Tick", {n = i}) end
            local n = 0
            for _ in world:events("Tick") do n = n + 1 end
            during = n -- still queued in the system's buffer
        end}
        w:system{name = "count", after = {"flood"}, run = function(world)
            local n, last = 0, nil
            for ev in world:events("Tick") do n, last = n + 1, ev.n end
            after = {n, last}
        end}
        assert.is_true(w:progress())
        assert.are.equal(0, during)
        assert.are.same({200000, 200000}, after)
    end)

    it("drops the events of a system that raised after emitting, the frame goes on", function()
        local w = H.world()
        w:event("Hit", "int32_t n;")
        local later = nil
        w:system{name = "emitter", run = function(world)
            world:emit("Hit", {n = 1})
            error("boom", 0)
        end}
        w:system{name = "reader", after = {"emitter"}, run = function(world)
            local n = 0
            for _ in world:events("Hit") do n = n + 1 end
            later = n
        end}
        local ok, failures = w:progress()
        assert.is_false(ok)
        assert.are.equal("emitter", failures[1].system)
        assert.are.equal(0, later)
        local n = 0
        for _ in w:events("Hit") do n = n + 1 end
        assert.are.equal(0, n)
    end)

    it("sets a new resource in one system and removes it in a later one of the same frame", function()
        local w = H.world()
        w:component("Score", "int32_t points;")
        local seen = {}
        w:system{name = "set", writes = {"Score"}, run = function(world)
            world:resource("Score", {points = 7})
            seen[#seen + 1] = world:resource("Score").points
        end}
        w:system{name = "drop", writes = {"Score"}, after = {"set"}, run = function(world)
            seen[#seen + 1] = world:resource("Score").points
            world:resource("Score", nil)
        end}
        w:system{name = "look", reads = {"Score"}, after = {"drop"}, run = function(world)
            seen[#seen + 1] = world:resource("Score") == nil
        end}
        assert.is_true(w:progress())
        assert.are.same({7, 7, true}, seen)
        assert.is_nil(w:resource("Score"))
    end)

    it("refuses a resource a system did not declare, naming the system and the resource", function()
        local w = H.world()
        w:component("Score", "int32_t points;")
        w:system{name = "sneak", reads = {"Score"}, run = function(world)
            world:resource("Score", {points = 1})
        end}
        w:system{name = "peek", run = function(world) return world:resource("Score") end}
        local ok, failures = w:progress()
        assert.is_false(ok)
        assert.are.equal(2, #failures)
        local text = failures[1].message .. "\n" .. failures[2].message
        assert.is_truthy(text:find("world:resource: system 'sneak' writes Score without declaring it in writes", 1, true))
        assert.is_truthy(text:find("world:resource: system 'peek' reads Score without declaring it in reads or writes", 1, true))
        assert.is_nil(w:resource("Score"))
    end)

    it("fails an exclusive system that runs the frame again or closes the world; the rest runs", function()
        local w = H.world()
        local ran = 0
        w:system{name = "again", exclusive = true, run = function(world) world:progress() end}
        w:system{name = "closer", exclusive = true, run = function(world) world:close() end}
        w:system{name = "after", after = {"again", "closer"}, run = function() ran = ran + 1 end}
        local ok, failures = w:progress()
        assert.is_false(ok)
        assert.are.equal(2, #failures)
        assert.is_truthy(failures[1].message:find("world:progress: cannot run the schedule from inside a system", 1, true))
        assert.is_truthy(failures[2].message:find("world:close: cannot close the world while a query iterates or a system runs", 1, true))
        assert.are.equal(1, ran)
        assert.is_true(w:is_alive(w:spawn())) -- still open
        w:close()
    end)
end)

describe("the tick inside a frame", function()
    it("may be advanced by an exclusive system only; the others fail naming themselves", function()
        local w = kiln.world()
        local ticks = {}
        w:system{name = "move", run = function(world) world:advance_tick() end}
        w:system{name = "boss", exclusive = true, after = {"move"}, run = function(world)
            ticks[#ticks + 1] = world:advance_tick()
        end}
        local before = w:tick()
        local ok, failures = w:progress()
        assert.is_false(ok)
        assert.are.equal(1, #failures)
        assert.are.equal("move", failures[1].system)
        assert.is_truthy(failures[1].message:find(
            "world:advance_tick: system 'move' is not exclusive; only an exclusive system may advance the tick", 1, true))
        assert.are.same({before + 2}, ticks) -- the frame's advance, then the boss's
        assert.are.equal(before + 2, w:tick())
    end)
end)
