-- resources_spec.lua: world:resource for data components, tags and plain Lua values.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

describe("resources", function()
    it("a defined component name holds that layout", function()
        local w = H.world()
        assert.is_nil(w:resource("Health"))
        w:resource("Health", {hp = 3})
        assert.are.same({hp = 3, max = 0}, w:resource("Health"))
        w:resource("Health", {max = 8})
        assert.are.same({hp = 3, max = 8}, w:resource("Health"))
        local copy = w:resource("Health")
        copy.hp = 99
        assert.are.equal(3, w:resource("Health").hp)
        w:resource("Health", nil)
        assert.is_nil(w:resource("Health"))
    end)

    it("bad values for a component resource raise naming the field and change nothing", function()
        local w = H.world()
        w:resource("Health", {hp = 3, max = 4})
        H.raises(function() w:resource("Health", {hp = "x"}) end, "world:resource", "'hp'", "Health")
        H.raises(function() w:resource("Health", {armor = 1}) end, "world:resource", "'armor'", "Health")
        H.raises(function() w:resource("Health", {hp = 1, max = 2^40}) end, "world:resource", "'max'")
        H.raises(function() w:resource("Health", 7) end, "world:resource", "Health")
        H.raises(function() w:resource({}) end, "resource")
        assert.are.same({hp = 3, max = 4}, w:resource("Health"))
    end)

    it("any other name holds a Lua value; nil removes it", function()
        local w = H.world()
        local config = {difficulty = "hard"}
        assert.is_nil(w:resource("config"))
        w:resource("config", config)
        assert.are.equal(config, w:resource("config"))
        w:resource("score", 10)
        assert.are.equal(10, w:resource("score"))
        w:resource("config", nil)
        assert.is_nil(w:resource("config"))
        assert.are.equal(10, w:resource("score"))
    end)

    it("a tag name holds presence", function()
        local w = H.world()
        w:resource("Frozen", true)
        assert.is_true(w:resource("Frozen"))
        w:resource("Frozen", nil)
        assert.is_nil(w:resource("Frozen"))
    end)

    it("are per world", function()
        local a, b = H.world(), H.world()
        a:resource("Health", {hp = 1})
        a:resource("name", "a")
        assert.is_nil(b:resource("Health"))
        assert.is_nil(b:resource("name"))
    end)

    it("a component with a layout is not defined over a Lua resource of its name, which it would hide", function()
        local w = kiln.world()
        w:resource("Score", {points = 5})
        H.raises(function() w:component("Score", "int32_t points;") end,
                 "world:component: 'Score' names a Lua resource of this world, which a component of that name " ..
                 "would hide; remove the resource first (world:resource(name, nil))")
        H.raises(function() w:component("Score") end, "'Score' names a Lua resource") -- a tag too
        assert.are.same({points = 5}, w:resource("Score"))
        assert.is_nil(w:component_info("Score"))
        -- a script-only component holds Lua values: the resource stays a Lua value
        w:resource("Notes", {"a"})
        w:component("Notes", "lua")
        assert.are.same({"a"}, w:resource("Notes"))
        -- once the resource is gone, the name is free
        w:resource("Score", nil)
        w:component("Score", "int32_t points;")
        w:resource("Score", {points = 2})
        assert.are.same({points = 2}, w:resource("Score"))
    end)
end)
