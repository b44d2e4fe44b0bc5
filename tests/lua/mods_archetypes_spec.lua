-- mods_archetypes_spec.lua: the archetypes mods make, counted against the mods' limit apart
-- from the host's, and reshapes into archetypes the world holds, which it never refuses.
local kiln = require "kiln"
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

describe("the archetypes mods make", function()
    after_each(M.cleanup)

    -- Archetypes are never freed and the world holds at most 65,472. 8 components make 256
    -- combinations; churn(from, to) spawns and despawns one entity of each combination in
    -- turn and returns where a spawn was refused, with the message.
    local CHURN = [==[
local names = {}
for i = 1, 8 do names[i] = "K" .. i; world:component(names[i], "float x;") end
world:component("Flag")
function churn(from, to)
    for mask = from, to do
        local init = {}
        for b = 1, 8 do if math.floor(mask / 2 ^ (b - 1)) % 2 == 1 then init[names[b]] = {x = 1} end end
        local ok, e = pcall(world.spawn, world, init)
        if not ok then return mask, e end
        world:despawn(e)
    end
end
]==]

    it("stop at the mods' limit: no spawn, add of a tag, removal, parenting or name past it", function()
        local w, mods = M.host({archetypes = 40})
        local before = w:stats().archetypes
        assert(mods:load(M.write(M.folder(), "churn.lua", CHURN .. [[
local a, b = world:spawn{K1 = {x = 1}}, world:spawn{K2 = {x = 2}}
print(churn(3, 255))
for _, call in ipairs{{world.add, a, "Flag"}, {world.remove, a, "K1"}, {world.set_parent, a, b},
                      {world.name, a, "named"}} do
    local ok, err = pcall(call[1], world, call[2], call[3])
    print(ok, err)
end
world:add(a, "K1", {x = 5}) -- it has K1: a new value reshapes nothing
print(world:get(a, "K1").x, pcall(world.despawn, world, b))
print(pcall(world.spawn, world, {K1 = {x = 3}})) -- into an archetype the world holds
world:remove(world:spawn{K1 = {x = 1}, K2 = {x = 1}}, "K2")
]])))
        local log = mods:log("churn")
        local refused = "mod 'churn' may not reshape entities into a new archetype: mods made 40 archetypes and " ..
                        "queued 0 spawns, adds and removes that may make one this frame, the mods' limit is 40 " ..
                        "(archetypes)"
        assert.truthy(log[1]:find("^%d+\tworld:spawn: " .. refused:gsub("%p", "%%%0") .. "$"), log[1])
        assert.are.same({"false\tworld:add: " .. refused, "false\tworld:remove: " .. refused,
                         "false\tworld:set_parent: " .. refused, "false\tworld:name: " .. refused, "5.0\ttrue"},
                        {log[2], log[3], log[4], log[5], (log[6]:gsub("^5\t", "5.0\t"))})
        assert.truthy(log[7]:find("^true\t%d+$"), log[7])
        assert.are.equal(before + 40, w:stats().archetypes)
        -- the host is not bound by it
        w:component("HostOnly", "float x;")
        w:spawn{HostOnly = {x = 1}, Position = {x = 1, y = 1}}
        assert.are.equal(before + 41, w:stats().archetypes)
        assert.is_true(w:progress(1 / 60))
    end)

    it("count what a system queues in a frame, so the world never passes the limit", function()
        local w, mods = M.host({archetypes = 40})
        assert(mods:load(M.write(M.folder(), "queue.lua", CHURN .. [[
local at = 1
world:system{name = "churner", writes = names, run = function()
    local stop, err = churn(at, 255)
    at = (stop or 255) + 1
    print(stop ~= nil, err and err:match("queued %d+"))
end}
]])))
        local before = w:stats().archetypes
        M.frames(w, 3)
        assert.is_true(w:stats().archetypes <= before + 40, tostring(w:stats().archetypes))
        local log = mods:log("queue")
        assert.are.equal("true\tqueued 40", log[1]) -- each queued spawn may make one
        assert.are.same({"true\tqueued 0", "true\tqueued 0"}, {log[2], log[3]})
    end)

    it("count only what mods make: past the limit they still reshape into archetypes the world holds", function()
        -- the world's archetypes were counted, the host's included: a host going through 8191
        -- combinations of buff tags refused every mod's spawn, add and remove for good
        local w = kiln.world()
        w:component("Hp", "float x;")
        for b = 1, 6 do w:component("Buff" .. b) end
        for mask = 0, 63 do -- 64 archetypes of the host's, past the mods' limit of 3
            local e = w:spawn{Hp = {x = 1}}
            for b = 1, 6 do if math.floor(mask / 2 ^ (b - 1)) % 2 == 1 then w:add(e, "Buff" .. b) end end
            w:despawn(e)
        end
        local h = w:spawn{Hp = {x = 1}}
        local mods = kiln.mods(w, {archetypes = 3, allow = {host_entity = function() return h end}})
        local before = w:stats().archetypes
        assert.is_true(before > 64)
        assert(mods:load(M.write(M.folder(), "player.lua", [[
world:component("Hp", "float x;")
world:component("Buff1")
for i = 1, 3 do world:component("Mine" .. i, "float x;") end
local h = host_entity()
local function try(f, ...) local ok, err = pcall(f, world, ...) print(ok and "ok" or err) end
try(world.spawn, {Hp = {x = 1}})                   -- three new archetypes: the limit
try(world.spawn, {Hp = {x = 1}, Mine1 = {x = 1}})
local e = world:spawn{Hp = {x = 1}, Mine2 = {x = 1}}
try(world.spawn, {Hp = {x = 1}, Mine3 = {x = 1}})  -- a fourth: refused
try(world.spawn, {Hp = {x = 1}})                   -- into those the world holds: never refused
try(world.add, h, "Buff1")                         -- the host's archetype {Hp, Buff1}
try(world.remove, e, "Mine2")
try(world.add, e, "Mine1", {x = 1})
try(world.add, e, "Mine3", {x = 1})                -- {Hp, Mine1, Mine3}: new, refused
local f = world:spawn{Hp = {x = 1}}
world:system{name = "play", writes = {"Hp", "Mine1", "Mine2", "Mine3", "Buff1"}, run = function()
    try(world.spawn, {Hp = {x = 2}, Mine1 = {x = 2}})
    try(world.remove, h, "Buff1")
    try(world.spawn, {Hp = {x = 2}, Mine3 = {x = 2}})
    try(world.add, f, "Mine1", {x = 2}) -- {Hp, Mine1}: held
    try(world.add, f, "Mine2", {x = 2}) -- behind the add queued above, into {Hp, Mine1, Mine2}: refused
end}
]])))
        M.frames(w, 2)
        local log = mods:log("player")
        local refused = "mod 'player' may not reshape entities into a new archetype: mods made 3 archetypes and " ..
                        "queued 0 spawns, adds and removes that may make one this frame, the mods' limit is 3 " ..
                        "(archetypes)"
        assert.are.same({"ok", "ok", "world:spawn: " .. refused, "ok", "ok", "ok", "ok", "world:add: " .. refused,
                         "ok", "ok", "world:spawn: " .. refused, "ok", "world:add: " .. refused,
                         "ok", "ok", "world:spawn: " .. refused, "ok", "world:add: " .. refused}, log)
        assert.are.equal(before + 3, w:stats().archetypes)
        assert.is_false(w:has(h, "Buff1"))
    end)

    it("count set_parent only when the child gains or loses Parent: a new parent reshapes nothing", function()
        -- set_parent was counted as a reshape that may make an archetype every time, so a mod
        -- moving 100 children between two parents in a system stopped at the 38th, its part
        -- of the frame's room, and at the limit could not move one
        local w, mods = M.host({archetypes = 40})
        assert(mods:load(M.write(M.folder(), "mover.lua", [[
local b, c = world:spawn{LocalTransform = {}}, world:spawn{LocalTransform = {}}
local kids = {}
for i = 1, 100 do kids[i] = world:spawn{LocalTransform = {}}; world:set_parent(kids[i], b) end
world:system{name = "move", writes = {"Parent"}, run = function()
    local held, moved, err = #world:children(c), 0, nil
    for i = 1, 100 do
        local ok, why = pcall(world.set_parent, world, kids[i], i % 2 == 0 and c or b)
        if ok then moved = moved + 1 else err = err or why end
    end
    print(held, moved, err)
end}
]])))
        M.frames(w, 2)
        -- the moves of a frame land after it: c holds the even children from the second on
        assert.are.same({"0\t100\tnil", "50\t100\tnil"}, mods:log("mover"))
    end)

    it("is an option of at least one", function() M.refuses_below_one("archetypes") end)
end)
