-- systems_access_spec.lua: what world:system's reads and writes lists take: each component at
-- most once a list, and one in both lists as written.
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

describe("world:system's reads and writes", function()
    it("refuses a component listed twice in reads or in writes, as a query refuses a repeated term", function()
        local w = H.world()
        local count = #w:systems()
        local f = function() end
        local pos = w:component_info("Position").id
        H.raises(function() w:system{name = "x", run = f, reads = {"Position", "Position"}} end,
                 "bad argument #1 to 'world:system' (reads lists Position twice)")
        H.raises(function() w:system{name = "x", run = f, writes = {"Velocity", "Position", pos}} end,
                 "bad argument #1 to 'world:system' (writes lists Position twice)")
        assert.are.equal(count, #w:systems())
    end)

    it("takes a component in both reads and writes as written, writing implies reading", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1, y = 0}}
        w:system{name = "both", reads = {"Position"}, writes = {"Position"}, run = function(world)
            world:set(e, "Position", {x = world:get(e, "Position").x + 1})
        end}
        assert.is_true(w:progress(0))
        assert.are.equal(2, w:get(e, "Position").x)
    end)
end)
