-- systems_refused_spec.lua: a world:system call that is refused (by the schedule, or by the mod
-- manager for a mod) leaves nothing behind: the world holds neither its function nor its query.
-- Proved with weak tables and full collections while the world lives, under Lua 5.4 and LuaJIT.
local kiln = require "kiln"
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

-- Whether the values in the weak table survive two full collections.
local function kept(weak)
    collectgarbage()
    collectgarbage()
    return next(weak) ~= nil
end

-- Calls world:system with desc (its run or each given by make, so no local keeps it) and
-- returns the error and a weak table holding the function.
local function refuse(w, desc, key)
    local weak = setmetatable({}, {__mode = "k"})
    desc[key or "run"] = function() end
    weak[desc[key or "run"]] = true
    local ok, err = pcall(w.system, w, desc)
    assert.is_false(ok)
    return err, weak
end

describe("a refused world:system", function()
    after_each(M.cleanup)

    it("lets the world drop its function when the schedule refuses a cycle", function()
        local w = kiln.world()
        w:system{name = "a", run = function() end}
        local err, weak = refuse(w, {name = "b", before = {"a"}, after = {"a"}})
        assert.truthy(err:find("world:system: 'b' -> 'a' -> 'b' would form a cycle", 1, true), err)
        assert.is_false(kept(weak))
        assert.are.equal(1, #w:systems())
        assert.is_true(w:progress(0)) -- and the world goes on
    end)

    it("names the schedule's limit of systems when it is full, and leaves the world as it was", function()
        local w = kiln.world()
        local runs = 0
        for i = 1, 4096 do w:system{name = "s" .. i, run = function() runs = runs + 1 end} end
        local err, weak = refuse(w, {name = "extra"})
        assert.truthy(err:find("world:system: the schedule holds 4096 systems, its limit " ..
            "(KILN_SCHEDULE_MAX_SYSTEMS); 'extra' is not added", 1, true), err)
        assert.is_false(kept(weak))
        assert.are.equal(4096, #w:systems())
        assert.is_true(w:progress(0))
        assert.are.equal(4096, runs)
    end)

    it("lets the world drop an each-system's function and query when refused", function()
        local w = kiln.world()
        w:component("P", "float x;")
        local err, weak = refuse(w, {name = "loop", after = {"loop"}, query = {"P"}}, "each")
        assert.truthy(err:find("would form a cycle", 1, true), err)
        assert.is_false(kept(weak))
        w:spawn{P = {x = 1}}
        assert.is_true(w:progress(0))
    end)

    it("gives a refused name back: a system of that name can be added after", function()
        local w = kiln.world()
        local err = refuse(w, {name = "self", before = {"self"}})
        assert.truthy(err:find("would form a cycle", 1, true), err)
        local runs = 0
        w:system{name = "self", run = function() runs = runs + 1 end}
        assert.is_true(w:progress(0))
        assert.are.equal(1, runs)
        assert.are.equal("lua", w:systems()[1].kind)
    end)

    it("keeps a system removed during the frame alive until it leaves, when its name is used again", function()
        local w = kiln.world()
        local frames = 0
        w:system{name = "a", run = function(world)
            frames = frames + 1
            if frames == 1 then
                world:remove_system("a") -- leaves at the end of this frame
                world:system{name = "a", run = function() end}
                collectgarbage()
                collectgarbage()
            end
        end}
        w:system{name = "b", after = {"a"}, run = function() collectgarbage() end}
        assert.is_true(w:progress(0))
        collectgarbage()
        assert.is_true(w:progress(0))
        assert.are.equal(1, frames)
        assert.are.equal(2, #w:systems())
    end)

    it("of a loading mod (a name the host uses) leaves the mod's world nothing to hold", function()
        local dir = M.folder()
        local w, mods = M.host()
        assert(mods:load(M.write(dir, "taken.lua", [[
local weak = setmetatable({}, {__mode = "k"})
local f = function() end
weak[f] = true
local ok, err = pcall(world.system, world, {name = "host_tick", run = f})
assert(not ok and err:find("already exists %(of the host%)"), err)
f = nil
collectgarbage()
collectgarbage()
assert(next(weak) == nil, "the refused system's function is still held")
]])))
        assert.are.equal(1, #w:systems())
    end)

    it("of a running mod (a cycle) leaves the mod's world nothing to hold", function()
        local dir = M.folder()
        local w, mods = M.host()
        assert(mods:load(M.write(dir, "cycler.lua", [[
world:system{name = "cycler", run = function(world)
    local weak = setmetatable({}, {__mode = "k"})
    local f = function() end
    weak[f] = true
    local ok, err = pcall(world.system, world, {name = "loop", before = {"loop"}, run = f})
    assert(not ok and err:find("would form a cycle"), err)
    f = nil
    collectgarbage()
    collectgarbage()
    assert(next(weak) == nil, "the refused system's function is still held")
end}
]])))
        local failures = M.frames(w, 2)
        assert.are.same({}, failures)
        assert.are.equal(2, #w:systems())
    end)

    it("of a mod at its limit of systems leaves the mod's world nothing to hold", function()
        local dir = M.folder()
        local w, mods = M.host()
        assert(mods:load(M.write(dir, "full.lua", [[
for i = 1, 256 do world:system{name = "full" .. i, run = function() end} end
local weak = setmetatable({}, {__mode = "k"})
local f = function() end
weak[f] = true
local ok, err = pcall(world.system, world, {name = "one_more", run = f})
assert(not ok and err:find("its limit"), err)
f = nil
collectgarbage()
collectgarbage()
assert(next(weak) == nil, "the refused system's function is still held")
]])))
        assert.are.equal(257, #w:systems())
    end)
end)
