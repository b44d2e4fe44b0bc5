-- mods_queue_spec.lua: the despawns and removals a mod queues in a frame count against its
-- world_memory as the records the core keeps for them: one a despawn of each entity of a tree,
-- one a removal of a component the entity lacks (it is queued all the same), none for a call
-- that failed.
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

-- The mod's log after frames frames of the host.
local function run(mods, name, text, frames, w)
    assert(mods:load(M.write(M.folder(), name .. ".lua", text)))
    assert.are.same({}, M.frames(w, frames))
    return mods:log(name)
end

describe("a mod's queued despawns and removals", function()
    after_each(M.cleanup)

    -- The core queues a tree's despawn as one despawn an entity (deepest first), each 32 bytes
    -- and its copy of the read-only list (4 bytes a name, in blocks of 16): a tree of 3001 was
    -- counted as one record, 36 bytes.
    it("count a tree's despawn as one record an entity of the tree", function()
        local w, mods = M.host({world_memory = 131072, readonly = {"Position"}})
        local log = run(mods, "forester", [[
local function tree(n)
    local root = world:spawn{}
    for _ = 1, n do world:set_parent(world:spawn{}, root) end
    return root
end
local big, small = tree(3000), tree(1000)
world:system{name = "fell", reads = {"Parent"}, run = function()
    print(pcall(world.despawn_recursive, world, big))
    print(pcall(world.despawn_recursive, world, small))
end}
]], 1, w)
        assert.are.equal(2, #log)
        assert.truthy(log[1]:find("world:despawn_recursive: mod 'forester' queued 0 bytes of despawns and removals "
                                  .. "this frame; another would take 144048 more, past its limit of 131072 "
                                  .. "(world_memory)", 1, true), log[1])
        assert.are.equal("true", log[2]) -- 1001 records: 48048 bytes
        assert.are.equal(3001, M.info(mods, "forester").entities)
    end)

    -- A despawn the core refuses (the entity is dead) queued nothing: it was counted all the
    -- same, so a mod's failed calls used up the frame's room for the ones that queue.
    it("count nothing for a call that failed", function()
        local w, mods = M.host({world_memory = 65536})
        local log = run(mods, "misser", [[
local gone, live = world:spawn{}, world:spawn{}
world:despawn(gone)
world:system{name = "miss", writes = {}, run = function()
    local refused, other = 0, nil
    for _ = 1, 3000 do
        local ok, why = pcall(world.despawn, world, gone)
        if ok then other = "landed"
        elseif why:find("is not alive", 1, true) then refused = refused + 1
        else other = other or why end
    end
    print(refused, other, (pcall(world.despawn, world, live)))
end}
]], 1, w)
        assert.are.same({"3000\tnil\ttrue"}, log)
    end)

    -- kiln_remove of a component the entity lacks queues a record in a deferred world (a change
    -- queued before may give it the component): it was counted nowhere, so a mod could queue
    -- them by the million, frame after frame, bounded only by its time.
    it("count a removal of a component the entity lacks, every frame anew", function()
        local w, mods = M.host({world_memory = 65536})
        local log = run(mods, "flooder", [[
world:component("Mark", "int32_t v;")
world:component("Other", "int32_t v;")
local e = world:spawn{Other = {v = 1}}
world:system{name = "flood", writes = {"Mark"}, run = function()
    local queued, err = 0, nil
    for _ = 1, 3000 do
        local ok, why = pcall(world.remove, world, e, "Mark")
        if ok then queued = queued + 1 else err = err or why end
    end
    print(queued, err)
end}
]], 3, w)
        -- the world's memory stays where the first frames left it, however many frames flood
        local bytes = w:stats().bytes
        assert.are.same({}, M.frames(w, 20))
        assert.is_true(w:stats().bytes <= bytes, w:stats().bytes .. " > " .. bytes)
        log = mods:log("flooder")
        assert.are.equal(23, #log)
        for i = 1, 23 do
            local queued, err = log[i]:match("^(%d+)\t(.*)$")
            assert.are.equal("2048", queued, log[i])
            assert.truthy(err:find("world:remove: mod 'flooder' queued 65536 bytes of despawns and removals this "
                                   .. "frame; another would take 32 more, past its limit of 65536 (world_memory)",
                                   1, true), err)
        end
    end)
end)
