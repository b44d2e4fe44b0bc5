-- mods_lifecycle_spec.lua: load, reload and unload interleaved with frames, dependencies and
-- the host's own systems, found by a red-team pass over the mod lifecycle. Every folder made is
-- removed at the end.
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

-- dep exports v = version; user imports it and requires version 1 at its top level.
local function dep_and_user(dir)
    M.folder_mod(dir, "dep", {name = "dep", version = "1"},
                 {["init.lua"] = 'mod.exports.v = 1; mod.exports.f = function() return 1 end'})
    M.folder_mod(dir, "user", {name = "user", version = "1", depends = {"dep"}}, {["init.lua"] = [[
        local d = mod.import("dep")
        assert(d.v == 1, "user needs dep version 1")
        world:system{name = "user_sys", run = function() return d.f() end}
    ]]})
end

describe("a reload whose dependents fail to reload", function()
    after_each(M.cleanup)

    it("says which dependent failed and why, from mods:reload", function()
        -- mods:reload("dep") returned dep's info alone: that user's reload failed, leaving its
        -- old version calling into a dep that is gone, was nowhere in the answer; the host saw
        -- it first as user's system failing at the next frame
        local w, mods = M.host()
        local dir = M.folder()
        dep_and_user(dir)
        assert(mods:load(dir .. "/dep"))
        assert(mods:load(dir .. "/user"))
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
        local w, mods = M.host()
        local dir = M.folder()
        dep_and_user(dir)
        assert(mods:load(dir .. "/dep"))
        assert(mods:load(dir .. "/user"))
        assert.is_true(w:progress(1 / 60))
        M.write(dir, "dep/init.lua", 'mod.exports.v = 2; mod.exports.f = function() return 2 end -- v2')
        local reloaded, failed = mods:poll()
        assert.are.same({"dep"}, reloaded)
        assert.truthy(failed.user and failed.user:find("user needs dep version 1", 1, true), tostring(failed.user))
        assert.is_nil(failed.dep)
    end)
end)
