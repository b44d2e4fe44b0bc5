-- persist_redteam_spec.lua: cases found by red-teaming the persistence and world-building
-- paths reached from Lua (saves, loads, snapshots, clones, prefabs, scenes); each names what
-- used to go wrong.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

describe("persist red team", function()
    -- A prefab made from a table whose entity fields name its own nodes is deferred inside a
    -- system like world:spawn. It used to spawn each copy and then world:set the node
    -- references on it, which refuses a spawned-but-reserved entity: every such spawn inside
    -- a system raised "prefab:spawn: entity 2v1 is not alive".
    it("a prefab from a table with node references spawns inside a system", function()
        local w = H.world()
        w:component("Link", "entity target; entity pair[2];")
        local p = w:prefab{components = {Position = {x = 1}, Link = {target = 2, pair = {1, 0}}},
                           children = {{components = {Link = {target = 1}}}}}
        local result
        w:system{name = "spawner", writes = {"Position", "Link", "Parent"}, run = function()
            if result == nil then result = {pcall(p.spawn, p, 2)} end
        end}
        w:progress(0.1)
        assert.is_true(result[1], result[2])
        assert.are.equal(2, #result[2])
        for _, root in ipairs(result[2]) do
            local link = w:get(root, "Link")
            local child = w:children(root)[1]
            assert.are.equal(child, link.target)
            assert.are.same({root, 0}, link.pair)
            assert.are.equal(1, w:get(root, "Position").x)
            assert.are.equal(root, w:get(child, "Link").target)
        end
        assert.are.equal(4, w:count())
    end)
end)
