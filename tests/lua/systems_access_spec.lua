-- systems_access_spec.lua: what world:system's reads and writes lists take: each component at
-- most once a list, one in both lists as written, and at most 32 reads with the query's terms.
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

    it("names reads as the list the query's terms overflow, since the terms count as reads", function()
        local w = H.world()
        local reads = {}
        for i = 1, 30 do
            w:component("K" .. i, "float x;")
            reads[i] = "K" .. i
        end
        local count = #w:systems()
        -- K1 is in reads already and Position in writes: two terms of five add nothing
        local desc = {name = "x", each = function() end, reads = reads, writes = {"Position"},
                      query = {"K1", "Position", "Velocity", "Health", "Frozen"}}
        H.raises(function() w:system(desc) end, "bad argument #1 to 'world:system' (at most 32 components in "
                 .. "reads, which lists 30 and gets 3 more from the query's terms (a term counts as a read "
                 .. "unless reads or writes lists it))")
        assert.are.equal(count, #w:systems())
        desc.query = {"K1", "Position", "Velocity", "Health"} -- 32: taken
        w:system(desc)
        assert.are.equal(count + 1, #w:systems())
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
