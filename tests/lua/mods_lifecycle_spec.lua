-- mods_lifecycle_spec.lua: load, reload and unload interleaved with frames, dependencies and
-- the host's own systems, found by a red-team pass over the mod lifecycle. Every folder made is
-- removed at the end.
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

-- dep exports v = version; user imports it and requires version 1 at its top level.
local DEP_AND_USER = {
    {"dep", init = 'mod.exports.v = 1; mod.exports.f = function() return 1 end'},
    {"user", depends = {"dep"}, init = [[
        local d = mod.import("dep")
        assert(d.v == 1, "user needs dep version 1")
        world:system{name = "user_sys", run = function() return d.f() end}
    ]]},
}

describe("a reload whose dependents fail to reload", function()
    after_each(M.cleanup)

    it("says which dependent failed and why, from mods:reload", function()
        -- mods:reload("dep") returned dep's info alone: that user's reload failed, leaving its
        -- old version calling into a dep that is gone, was nowhere in the answer; the host saw
        -- it first as user's system failing at the next frame
        local w, mods, dir = M.host_with_folder_mods(DEP_AND_USER)
        assert.is_true(w:progress(1 / 60))
        M.write(dir, "dep/init.lua", 'mod.exports.v = 2; mod.exports.f = function() return 2 end')
        local info, failed = mods:reload("dep")
        assert.are.equal("dep", info.name)
        assert.is_table(failed)
        assert.truthy(failed.user and failed.user:find("user needs dep version 1", 1, true), tostring(failed.user))
        assert.truthy(failed.user:find("mod 'user'", 1, true), failed.user)
        assert.is_nil(next(failed, "user"))
        -- a reload whose dependents all reload has no second result
        M.write(dir, "user/init.lua", 'mod.import("dep")')
        local again, none = mods:reload("dep")
        assert.are.equal("dep", again.name)
        assert.is_nil(none)
    end)

    it("lists the dependent among the failures of mods:poll", function()
        -- mods:poll() listed dep as reloaded and had no failure: user's failed reload was lost
        local w, mods, dir = M.host_with_folder_mods(DEP_AND_USER)
        assert.is_true(w:progress(1 / 60))
        M.write(dir, "dep/init.lua", 'mod.exports.v = 2; mod.exports.f = function() return 2 end -- v2')
        local reloaded, failed = mods:poll()
        assert.are.same({"dep"}, reloaded)
        assert.truthy(failed.user and failed.user:find("user needs dep version 1", 1, true), tostring(failed.user))
        assert.is_nil(failed.dep)
    end)
end)

describe("a reload changing the order of the mod's systems", function()
    after_each(M.cleanup)

    it("may turn the order between its own systems around", function()
        -- the new version's systems replaced the old ones one at a time, each checked against
        -- the others still old: s2 "before s1" met the old s1 "before s2" and was taken for a
        -- cycle; the reload was refused and the running version stopped (state "disabled")
        local w = require("kiln").world()
        local dir = M.folder()
        local lines = {}
        local mods = require("kiln").mods(w, {log = function(_, line) lines[#lines + 1] = line end})
        M.write(dir, "m.lua", [[
            world:system{name = "s1", before = {"s2"}, run = function() print("s1 v1") end}
            world:system{name = "s2", run = function() print("s2 v1") end}
        ]])
        assert(mods:load(dir .. "/m.lua"))
        assert.is_true(w:progress(1 / 60))
        assert.are.same({"s1 v1", "s2 v1"}, lines)
        M.write(dir, "m.lua", [[
            world:system{name = "s2", before = {"s1"}, run = function() print("s2 v2") end}
            world:system{name = "s1", run = function() print("s1 v2") end}
        ]])
        assert.are.equal("m", assert(mods:reload("m")).name)
        lines = {}
        assert.is_true(w:progress(1 / 60))
        assert.are.same({"s2 v2", "s1 v2"}, lines)
        assert.are.equal("running", M.info(mods, "m").state)
    end)

    it("closing a cycle with the host's systems is refused, and the old version runs on", function()
        -- the replace that closed the cycle came after others had replaced the old version's
        -- systems: the reload stopped the old version ("stopped: the reload's ..."), though a
        -- failed reload is to leave it running
        local w, mods, host = M.host()
        w:system{name = "host_late", after = {"host_tick"}, run = function() end}
        local dir = M.folder()
        M.write(dir, "m.lua", [[
            world:system{name = "s1", run = function() end}
            world:system{name = "s2", after = {"host_tick"}, run = function() end}
        ]])
        assert(mods:load(dir .. "/m.lua"))
        M.write(dir, "m.lua", [[
            world:system{name = "s1", run = function() end}
            world:system{name = "s2", after = {"host_late"}, before = {"host_tick"}, run = function() end}
        ]])
        local ok, err = mods:reload("m")
        assert.is_nil(ok)
        assert.truthy(err:find("mod 'm': its system 's2' was refused: .*cycle"), err)
        local info = M.info(mods, "m")
        assert.are.equal("running", info.state)
        assert.truthy(info.error:find("reload failed, the old version runs on", 1, true), info.error)
        assert.are.same({"host_tick", "host_late", "s1", "s2"}, M.system_names(w))
        local runs = host.runs
        assert.is_true(w:progress(1 / 60))
        assert.are.equal(runs + 1, host.runs)
        for _, s in ipairs(w:systems()) do assert.is_true(s.enabled, s.name) end
    end)
end)

describe("a reload dropping a system", function()
    after_each(M.cleanup)

    it("may order its others against the name it drops", function()
        -- the old version's x ("before s1") was removed only after the new version's systems
        -- were in place: the new s1 "before x" met it in a cycle, the reload was refused and
        -- the running version stopped
        local w, mods = M.host()
        local dir = M.folder()
        M.write(dir, "m.lua", [[
            world:system{name = "x", before = {"s1"}, run = function() end}
            world:system{name = "s1", run = function() end}
        ]])
        assert(mods:load(dir .. "/m.lua"))
        M.write(dir, "m.lua", 'world:system{name = "s1", before = {"x"}, run = function() end}')
        assert.are.equal("m", assert(mods:reload("m")).name)
        assert.are.same({"host_tick", "s1"}, M.system_names(w))
        assert.is_true(w:progress(1 / 60))
        assert.are.equal("running", M.info(mods, "m").state)
    end)
end)

describe("the host's log function, called while a mod's system prints", function()
    after_each(M.cleanup)

    it("is held to that system's access, as a granted function is, instead of aborting the host", function()
        -- the log ran host code inside the mod's system with no system of the host's world
        -- current: its query over a component the system did not declare passed the Lua
        -- checks and met kiln's own access guard, which aborted the process
        local kiln = require "kiln"
        local w = kiln.world()
        w:component("Position", "float x, y;")
        w:spawn{Position = {x = 1, y = 2}}
        local seen, errors = {}, {}
        local mods = kiln.mods(w, {log = function(_, line)
            seen[#seen + 1] = line
            local ok, err = pcall(function()
                local n = 0
                for _ in w:query{"Position"}:each() do n = n + 1 end
                return n
            end)
            if not ok then errors[#errors + 1] = err end
        end})
        local dir = M.folder()
        M.write(dir, "m.lua", 'print("top") world:system{name = "m_sys", run = function() print("tick") end}')
        assert(mods:load(dir .. "/m.lua"))
        assert.is_true(w:progress(1 / 60))
        assert.are.same({"top", "tick"}, seen)
        assert.are.equal(1, #errors)
        assert.truthy(errors[1]:find("system 'm_sys' reads Position without declaring it", 1, true), errors[1])
        -- between frames (the top level) the log may do anything, and the frames go on
        assert.is_true(w:progress(1 / 60))
        assert.are.equal(3, #seen)
    end)
end)

describe("a world's mod manager", function()
    it("is one at a time: a second is refused until the first is closed", function()
        local w, mods = M.host()
        local ok, err = pcall(require("kiln").mods, w)
        assert.is_false(ok)
        assert.are.equal("kiln.mods: the world has a mod manager already", err)
        mods:close()
        local again = require("kiln").mods(w)
        assert.are.equal(0, #again:list())
        again:close()
    end)
end)

describe("a mod loaded again after an unload", function()
    after_each(M.cleanup)

    -- Its components stayed registered, and a second load declaring them registered nothing,
    -- so they were no one's: its values on the host's entities counted against no world_memory
    -- (400 values of 64 KiB under a 1 MiB limit) and stayed after every unload after the first.
    local HOG = [[
        world:component("Big", "uint8_t data[65536];")
        local list = {}
        for e in world:query{"Position"}:each() do list[#list + 1] = e end
        local n = 0
        for _, e in ipairs(list) do
            if not pcall(world.add, world, e, "Big", {}) then break end
            n = n + 1
        end
        print(n)
    ]]

    local function host()
        local kiln = require "kiln"
        local w = kiln.world()
        w:component("Position", "float x, y;")
        for i = 1, 40 do w:spawn{Position = {x = i}} end
        local with = function()
            local n = 0
            for _ in w:query{"Big"}:each() do n = n + 1 end
            return n
        end
        return w, with
    end

    it("owns the components it registered before: they count against it and go with its unload", function()
        local w, with = host()
        local mods = require("kiln").mods(w, {world_memory = 1048576})
        local path = M.write(M.folder(), "hog.lua", HOG)
        for round = 1, 3 do
            assert(mods:load(path))
            assert.are.equal("15", mods:log("hog")[1], "round " .. round)
            assert(mods:unload("hog"))
            assert.are.equal(0, with(), "round " .. round)
        end
        -- a manager made after the first is closed takes the world's mods' components over too
        assert(mods:load(path))
        mods:close()
        local again = require("kiln").mods(w, {world_memory = 1048576})
        assert(again:load(M.write(M.folder(), "hog.lua", 'world:component("Big", "uint8_t data[65536];")\n'
                                                            .. 'world:resource("Big", {})\n' .. HOG)))
        assert(again:unload("hog"))
        assert.are.equal(0, with())
        assert.is_nil(w:resource("Big"))
        again:close()
    end)

    it("takes back its kept values at the next unload, and never the host's own components", function()
        local w, with = host()
        local mods = require("kiln").mods(w, {world_memory = 1048576})
        local dir = M.folder()
        assert(mods:load(M.write(dir, "hog.lua", HOG)))
        assert(mods:unload("hog", {keep = true}))
        assert.are.equal(15, with())
        -- declaring the host's Position makes it no mod's; a failed top level leaves kept values
        assert.is_nil(mods:load(M.write(dir, "hog.lua", 'world:component("Big", "uint8_t data[65536];")\n'
                                        .. 'world:component("Position", "float x, y;") error("no")')))
        assert.are.equal(15, with())
        local info, err = mods:load(M.write(dir, "hog.lua", 'world:component("Position", "float x, y;")\n' .. HOG))
        assert(info, err)
        assert.are.equal("0", mods:log("hog")[1]) -- the 15 kept values count: no room for more
        assert(mods:unload("hog"))
        assert.are.equal(0, with())
        assert.are.equal(40, w:count())
        for e in w:query{"Position"}:each() do assert.is_true(w:has(e, "Position")) end
    end)
end)

describe("a reload whose new version changes a component's schema", function()
    after_each(M.cleanup)

    it("is refused naming what differs, the old version running and the world as it was", function()
        -- the refusal said only "defined by mod 'm' with another schema": a mod author whose
        -- update added, renamed or retyped a field learned nothing of which one
        local w, mods, dir = M.host_with_folder_mods({{"m", init = [[
            world:component("Shield", "int32_t hp; float regen;")
            world:spawn{Shield = {hp = 5, regen = 1.5}}
        ]]}})
        local hash = w:hash()
        for schema, why in pairs{["int32_t hp; float regen; int32_t armor;"] = "(registered with 2 fields, given 3)",
                                 ["int32_t hp; float regen_rate;"] =
                                     "(field 1 is 'regen' float[1] at offset 4, given 'regen_rate' float[1] at offset 4)",
                                 ["int64_t hp; float regen;"] =
                                     "(field 0 is 'hp' int32[1] at offset 0, given 'hp' int64[1] at offset 0)"} do
            M.write(dir, "m/init.lua", string.format("world:component('Shield', %q)", schema))
            local info, err = mods:reload("m")
            assert.is_nil(info)
            assert.truthy(err:find("component 'Shield' is defined by mod 'm' with another schema; mod 'm' cannot redefine it "
                                   .. why, 1, true), err)
            assert.are.equal(hash, w:hash())
        end
        assert.are.equal("running", mods:list()[1].state)
    end)

    it("names a mod no longer loaded as the one that defined it, not the host", function()
        -- after an unload the refusal said "defined by the host", which never declared it
        local w, mods, dir = M.host_with_folder_mods({{"m", init = 'world:component("Shield", "int32_t hp;")'}})
        assert(mods:unload("m", {keep = true}))
        local hash = w:hash()
        M.write(dir, "m/init.lua", 'world:component("Shield", "int32_t hp; int32_t armor;")')
        local info, err = mods:load(dir .. "/m")
        assert.is_nil(info)
        assert.truthy(err:find("component 'Shield' is defined by a mod no longer loaded with another schema", 1, true), err)
        assert.are.equal(hash, w:hash())
        w:component("Shield", "int32_t hp;") -- the host's own now
        info, err = mods:load(dir .. "/m")
        assert.truthy(err:find("component 'Shield' is defined by the host with another schema", 1, true), err)
    end)
end)
