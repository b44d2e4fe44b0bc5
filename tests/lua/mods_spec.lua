-- mods_spec.lua: the mod manager's lifecycle: load, exports and imports, load_dir's order,
-- poll, unload with and without keep, reload in place, and what mods:list() reports.
local kiln = require "kiln"
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local H = dofile(here .. "helpers.lua")
local M = dofile(here .. "mods_helpers.lua")

local SPAWNER = [[
world:component("Crate", "int32_t n;")
for i = 1, 3 do world:spawn{Crate = {n = i}} end
world:system{name = "crate_a", writes = {"Crate"}, query = {"Crate"},
             each = function(e, c) c.n = c.n + 1 end}
world:system{name = "crate_b", reads = {"Crate"}, after = {"crate_a"}, run = function() end}
world:system{name = "crate_c", reads = {"Crate"}, after = {"crate_b"}, run = function() end}
]]

describe("kiln.mods", function()
    after_each(M.cleanup)

    it("loads a single-file mod whose systems run in the host's frames", function()
        local dir = M.folder()
        local w, mods, host = M.host()
        M.write(dir, "counter.lua", [[
            world:component("Count", "int32_t n;")
            local e = world:spawn{Count = {n = 0}}
            world:system{name = "count", writes = {"Count"}, query = {"Count"},
                         each = function(_, c) c.n = c.n + 1 end}
            print("loaded", mod.name)
        ]])
        local info = assert(mods:load(dir .. "/counter.lua"))
        assert.are.equal("counter", info.name)
        assert.are.equal("running", info.state)
        assert.are.same({}, M.frames(w, 3))
        local e = M.entities_with(w, "Count")[1]
        assert.are.equal(3, w:get(e, "Count").n)
        assert.are.equal(3, host.runs)
        assert.are.same({"loaded\tcounter"}, mods:log("counter"))
    end)

    it("loads a folder mod named by its manifest, with require inside its folder", function()
        local dir = M.folder()
        local _, mods = M.host()
        M.folder_mod(dir, "folder", {name = "tools", version = "2.1", entry = "main.lua"}, {
            ["main.lua"] = 'local u = require "lib.util"; print(u.answer, require "lib.util" == u)',
            ["lib/util.lua"] = "return {answer = 42}",
        })
        local info = assert(mods:load(dir .. "/folder"))
        assert.are.equal("tools", info.name)
        assert.are.equal("2.1", info.version)
        assert.are.same({"42\ttrue"}, mods:log("tools"))
    end)

    it("adds every system its top level declares, up to its limit, in their order", function()
        local dir = M.folder()
        local w, mods = M.host()
        M.write(dir, "many.lua", [[
            world:system{name = "many_1", run = function() end}
            for i = 2, 250 do
                world:system{name = "many_" .. i, after = {"many_" .. (i - 1)}, run = function() end}
            end
        ]])
        local info = assert(mods:load(dir .. "/many.lua"))
        assert.are.equal(250, #info.systems)
        local names = M.system_names(w)
        assert.are.equal(251, #names)
        for i = 1, 250 do assert.are.equal("many_" .. i, names[i + 1]) end
        assert.are.same({}, M.frames(w, 1))
    end)

    it("refuses a second mod of the same name, naming it", function()
        local dir = M.folder()
        local _, mods = M.host()
        M.write(dir, "twice.lua", "")
        assert(mods:load(dir .. "/twice.lua"))
        local ok, err = mods:load(dir .. "/twice.lua")
        assert.is_nil(ok)
        assert.matches("mod 'twice': a mod named 'twice' is already loaded", err, 1, true)
    end)

    it("reports a missing path or a bad manifest as nil and a message, loading nothing", function()
        local dir = M.folder()
        local w, mods = M.host()
        local ok, err = mods:load(dir .. "/nothere.lua")
        assert.is_nil(ok)
        assert.matches("cannot open", err, 1, true)
        M.write(dir, "badman/manifest.lua", "return {name = 'x y'}")
        ok, err = mods:load(dir .. "/badman")
        assert.is_nil(ok)
        assert.matches("bad manifest", err, 1, true)
        M.write(dir, "unknown/manifest.lua", "return {name = 'u', colour = 'red'}")
        ok, err = mods:load(dir .. "/unknown")
        assert.is_nil(ok)
        assert.matches("unknown key (colour)", err, 1, true)
        assert.are.same({}, mods:list())
        assert.are.same({"host_tick"}, M.system_names(w))
    end)

    it("undoes a top level that fails: its systems never join, its entities are despawned", function()
        local dir = M.folder()
        local w, mods = M.host()
        local before = w:count()
        M.write(dir, "halfway.lua", [[
            world:component("Half", "int32_t v;")
            world:spawn{Half = {v = 1}}
            world:system{name = "half_sys", run = function() end}
            error("changed my mind")
        ]])
        local ok, err = mods:load(dir .. "/halfway.lua")
        assert.is_nil(ok)
        assert.matches("mod 'halfway': .*changed my mind", err)
        assert.are.equal(before, w:count())
        assert.are.same({"host_tick"}, M.system_names(w))
        assert.are.same({}, mods:list())
    end)

    it("a top level that fails leaves the content hash and the hash (its slots given back) as they were", function()
        local dir = M.folder()
        local seen
        local w, mods = M.host{allow = {report = function(hex) seen = hex end}}
        local untouched = M.host() -- the same world, never met by the mod
        local content, hash = w:content_hash("hex"), w:hash("hex")
        assert.are.equal(untouched:content_hash("hex"), content)
        assert.are.equal(untouched:hash("hex"), hash)
        M.write(dir, "spender.lua", [[
            report(world:content_hash("hex"))
            for i = 1, 3 do world:spawn{Position = {x = i, y = i}} end
            error("changed my mind")
        ]])
        local ok, err = mods:load(dir .. "/spender.lua")
        assert.is_nil(ok)
        assert.matches("changed my mind", err)
        assert.are.equal(content, seen) -- a mod reads it as the host does
        assert.are.equal(content, w:content_hash("hex"))
        assert.are.equal(untouched:content_hash("hex"), w:content_hash("hex"))
        assert.are.equal(hash, w:hash("hex")) -- the call out came before the spawns: none was shown
        assert.are.equal(untouched:hash("hex"), w:hash("hex"))
    end)

    it("undoes a top level that fails: what it registered leaves the host's entities and resources", function()
        local dir = M.folder()
        local w, mods = M.host()
        local host_e = w:spawn{Position = {x = 5, y = 5}}
        M.write(dir, "smear.lua", [[
            world:component("Smear", "char blob[65536];")
            for e in world:query{"Position"}:each() do world:add(e, "Smear", {}) end
            world:resource("Smear", {})
            world:add(]] .. host_e .. [[, "Position", {x = 6, y = 6}) -- the host's: stays changed
            error("changed my mind")
        ]])
        local ok, err = mods:load(dir .. "/smear.lua")
        assert.is_nil(ok)
        assert.matches("changed my mind", err)
        assert.are.same({}, M.entities_with(w, "Smear"))
        assert.is_nil(w:resource("Smear"))
        assert.are.equal(6, w:get(host_e, "Position").x)
        -- a failed reload takes back the new version's components, not the old version's
        M.write(dir, "crates.lua", SPAWNER .. 'world:resource("Crate", {n = 1})\n')
        assert(mods:load(dir .. "/crates.lua"))
        M.write(dir, "crates.lua", SPAWNER .. [[
            world:component("Fresh", "int32_t v;")
            world:add(]] .. host_e .. [[, "Fresh", {v = 1})
            world:add(]] .. host_e .. [[, "Crate", {n = 9})
            world:resource("Fresh", {v = 2})
            error("typo")
        ]])
        assert.is_nil(mods:reload("crates"))
        assert.is_false(w:has(host_e, "Fresh"))
        assert.is_nil(w:resource("Fresh"))
        -- Crate is the running version's, and stays; the failed reload's add of it to the
        -- host's entity is taken back like its other adds to entities not its own
        assert.is_false(w:has(host_e, "Crate"))
        assert.are.equal(1, w:resource("Crate").n)
    end)

    describe("exports", function()
        it("are read by a mod that depends on the exporter, values copied and functions proxied", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.folder_mod(dir, "base", {name = "base"}, {["init.lua"] = [[
                mod.exports.limit = 10
                mod.exports.list = {1, 2, {deep = "yes"}}
                mod.exports.twice = function(x) return x * 2, "from " .. mod.name end
                local secret = 0
                mod.exports.bump = function() secret = secret + 1; return secret end
            ]]})
            M.folder_mod(dir, "user", {name = "user", depends = {"base"}}, {["init.lua"] = [[
                local base = mod.import("base")
                base.list[1] = 99 -- a copy: the exporter's table is not changed
                local again = mod.import("base")
                print(base.limit, again.list[1], base.list[3].deep, base.twice(21))
                print(base.bump(), base.bump())
            ]]})
            assert(mods:load(dir .. "/base"))
            assert(mods:load(dir .. "/user"))
            assert.are.same({"10\t1\tyes\t42\tfrom base", "1\t2"}, mods:log("user"))
        end)

        it("are refused to a mod that does not depend on the exporter", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.write(dir, "base.lua", "mod.exports.x = 1")
            M.write(dir, "nosy.lua", 'print(pcall(mod.import, "base"))')
            assert(mods:load(dir .. "/base.lua"))
            assert(mods:load(dir .. "/nosy.lua"))
            assert.matches("'base' is not among the depends of mod 'nosy'", mods:log("nosy")[1], 1, true)
        end)

        it("carry errors back to the caller naming the exporting mod", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.folder_mod(dir, "thrower", {name = "thrower"},
                         {["init.lua"] = 'mod.exports.fail = function() error("no way") end'})
            M.folder_mod(dir, "catcher", {name = "catcher", depends = {"thrower"}},
                         {["init.lua"] = 'print(pcall(mod.import("thrower").fail))'})
            assert(mods:load(dir .. "/thrower"))
            assert(mods:load(dir .. "/catcher"))
            local line = mods:log("catcher")[1]
            assert.matches("^false\tmod 'thrower': .*no way", line)
        end)
    end)

    describe("load_dir", function()
        it("loads every mod after the mods it depends on, whatever their names", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.folder_mod(dir, "a_top", {name = "top", depends = {"middle"}}, {["init.lua"] = 'print(mod.import("middle").v)'})
            M.folder_mod(dir, "b_middle", {name = "middle", depends = {"root"}},
                         {["init.lua"] = 'mod.exports.v = mod.import("root").v + 1'})
            M.write(dir, "z_root.lua", "mod.exports.v = 1")
            M.write(dir, "notes.txt", "not a mod")
            -- z_root.lua names the mod z_root; the manifests depend on "root": give it one
            os.remove(dir .. "/z_root.lua")
            M.folder_mod(dir, "z_root", {name = "root"}, {["init.lua"] = "mod.exports.v = 1"})
            local loaded, failed = mods:load_dir(dir)
            assert.are.same({"root", "middle", "top"}, loaded)
            assert.are.same({}, failed)
            assert.are.same({"2"}, mods:log("top"))
        end)

        it("fails a mod whose dependency is missing, naming both, and loads the others", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.folder_mod(dir, "orphan", {name = "orphan", depends = {"ghost"}}, {["init.lua"] = ""})
            M.folder_mod(dir, "child", {name = "child", depends = {"orphan"}}, {["init.lua"] = ""})
            M.write(dir, "fine.lua", "")
            local loaded, failed = mods:load_dir(dir)
            assert.are.same({"fine"}, loaded)
            assert.matches("mod 'orphan': it depends on 'ghost', which is not there", failed.orphan, 1, true)
            assert.matches("mod 'child': it depends on 'orphan', which failed to load", failed.child, 1, true)
        end)

        it("fails the mods of a depends cycle, naming each, and loads the others", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.folder_mod(dir, "ping", {name = "ping", depends = {"pong"}}, {["init.lua"] = ""})
            M.folder_mod(dir, "pong", {name = "pong", depends = {"ping"}}, {["init.lua"] = ""})
            M.write(dir, "solo.lua", "")
            local loaded, failed = mods:load_dir(dir)
            assert.are.same({"solo"}, loaded)
            assert.are.equal("mod 'ping': its depends form a cycle", failed.ping)
            assert.are.equal("mod 'pong': its depends form a cycle", failed.pong)
        end)

        it("fails a mod whose top level fails and the mods depending on it, loading the rest", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.write(dir, "broken.lua", "error('bad start')")
            M.folder_mod(dir, "needs", {name = "needs", depends = {"broken"}}, {["init.lua"] = ""})
            M.write(dir, "other.lua", "")
            local loaded, failed = mods:load_dir(dir)
            assert.are.same({"other"}, loaded)
            assert.matches("mod 'broken': .*bad start", failed.broken)
            assert.matches("mod 'needs': it depends on 'broken', which failed to load", failed.needs, 1, true)
        end)
    end)

    describe("unload", function()
        it("removes its systems, despawns its entities and removes its components everywhere", function()
            local dir = M.folder()
            local w, mods, host = M.host()
            M.write(dir, "crates.lua", SPAWNER)
            assert(mods:load(dir .. "/crates.lua"))
            local host_e = w:spawn{Position = {x = 5}}
            w:add(host_e, "Crate", {n = 7})
            assert.are.equal(3, M.info(mods, "crates").entities)
            assert.is_true(mods:unload("crates"))
            assert.are.same({"host_tick"}, M.system_names(w))
            assert.are.same({}, M.entities_with(w, "Crate"))
            assert.is_true(w:is_alive(host_e))
            assert.is_false(w:has(host_e, "Crate"))
            assert.is_nil(M.info(mods, "crates"))
            M.frames(w, 2)
            assert.are.equal(2, host.runs)
        end)

        it("takes the resources of its components out of the world, unless keep = true", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.write(dir, "stash.lua", [[
                world:component("Stash", "char blob[65536];")
                world:resource("Stash", {})
                world:resource("Position", {x = 3, y = 4}) -- the host's component: the host's resource
            ]])
            local bytes = w:stats().bytes
            assert(mods:load(dir .. "/stash.lua"))
            assert.is_table(w:resource("Stash"))
            assert.is_true(mods:unload("stash"))
            assert.is_nil(w:resource("Stash"))
            assert.are.equal(3, w:resource("Position").x)
            assert.is_true(w:stats().bytes < bytes + 65536, tostring(w:stats().bytes - bytes))
            assert(mods:load(dir .. "/stash.lua"))
            assert.is_true(mods:unload("stash", {keep = true}))
            assert.is_table(w:resource("Stash"))
        end)

        it("keeps its entities and their data with keep = true", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.write(dir, "crates.lua", SPAWNER)
            assert(mods:load(dir .. "/crates.lua"))
            M.frames(w, 1)
            assert.is_true(mods:unload("crates", {keep = true}))
            assert.are.same({"host_tick"}, M.system_names(w))
            local es = M.entities_with(w, "Crate")
            assert.are.equal(3, #es)
            local sum = 0
            for _, e in ipairs(es) do sum = sum + w:get(e, "Crate").n end
            assert.are.equal(1 + 2 + 3 + 3, sum)
        end)

        it("refuses to unload a mod another mod depends on, and an unknown name", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.write(dir, "base.lua", "")
            M.folder_mod(dir, "user", {name = "user", depends = {"base"}}, {["init.lua"] = ""})
            assert(mods:load(dir .. "/base.lua"))
            assert(mods:load(dir .. "/user"))
            local ok, err = mods:unload("base")
            assert.is_nil(ok)
            assert.are.equal("mods:unload: mod 'user' depends on 'base'; unload it first", err)
            ok, err = mods:unload("nobody")
            assert.is_nil(ok)
            assert.are.equal("mods:unload: no mod named 'nobody' is loaded", err)
            H.raises(function() mods:unload("base", {kept = true}) end, "mods:unload")
        end)

        it("refuses lifecycle calls during a frame", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.write(dir, "quiet.lua", "")
            assert(mods:load(dir .. "/quiet.lua"))
            local msg
            w:system{name = "meddler", run = function()
                msg = select(2, pcall(mods.unload, mods, "quiet"))
            end}
            assert.are.same({}, M.frames(w, 1))
            assert.matches("mods:unload: not during a frame", msg, 1, true)
            assert.is_not_nil(M.info(mods, "quiet"))
        end)
    end)

    describe("reload", function()
        it("runs the new code with its systems in their places and its entities kept", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.write(dir, "crates.lua", SPAWNER)
            assert(mods:load(dir .. "/crates.lua"))
            w:system{name = "host_after", reads = {"Crate"}, after = {"crate_b"}, before = {"crate_c"},
                     run = function() end}
            M.frames(w, 2)
            local order = M.system_names(w)
            local before = {}
            for _, e in ipairs(M.entities_with(w, "Crate")) do before[e] = w:get(e, "Crate").n end
            -- the new version no longer spawns (the old entities stay) and counts by 10
            M.write(dir, "crates.lua", (SPAWNER:gsub("for i = 1, 3 do.-end\n", ""):gsub("c.n %+ 1", "c.n + 10")))
            local info = assert(mods:reload("crates"))
            assert.are.same(order, M.system_names(w))
            assert.are.equal(3, info.entities)
            M.frames(w, 1)
            for e, n in pairs(before) do assert.are.equal(n + 10, w:get(e, "Crate").n) end
        end)

        it("leaves the old version running when the new code fails, and says why", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.write(dir, "crates.lua", SPAWNER)
            assert(mods:load(dir .. "/crates.lua"))
            M.write(dir, "crates.lua", "world:system{name = 'crate_a', run = function() end}\nerror('typo')")
            local ok, err = mods:reload("crates")
            assert.is_nil(ok)
            assert.matches("mod 'crates': .*typo", err)
            local info = M.info(mods, "crates")
            assert.are.equal("running", info.state)
            assert.matches("reload failed, the old version runs on", info.error, 1, true)
            assert.are.same({"crate_a", "crate_b", "crate_c"}, info.systems)
            assert.are.same({}, M.frames(w, 1))
            local sum = 0
            for _, e in ipairs(M.entities_with(w, "Crate")) do sum = sum + w:get(e, "Crate").n end
            assert.are.equal(1 + 2 + 3 + 3, sum)
        end)

        it("drops the systems the new version no longer declares and adds its new ones", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.write(dir, "shifty.lua", "world:system{name = 'old_one', run = function() end}")
            assert(mods:load(dir .. "/shifty.lua"))
            M.write(dir, "shifty.lua", "world:system{name = 'new_one', run = function() print('new ran') end}")
            assert(mods:reload("shifty"))
            assert.are.same({"host_tick", "new_one"}, M.system_names(w))
            assert.are.same({"new_one"}, M.info(mods, "shifty").systems)
            assert.are.same({}, M.frames(w, 2))
            assert.are.same({"new ran", "new ran"}, mods:log("shifty"))
        end)

        it("runs both the kept and the added systems of the new version", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.write(dir, "grower.lua", "world:system{name = 'kept', run = function() print('kept v1') end}")
            assert(mods:load(dir .. "/grower.lua"))
            M.write(dir, "grower.lua", [[
                world:system{name = 'kept', run = function() print('kept v2') end}
                world:system{name = 'added', after = {'kept'}, run = function() print('added v2') end}
            ]])
            assert(mods:reload("grower"))
            assert.are.same({}, M.frames(w, 1))
            assert.are.same({"kept v2", "added v2"}, mods:log("grower"))
        end)

        it("brings a mod disabled for memory back with its systems running", function()
            local dir = M.folder()
            local w, mods = M.host{memory = 1048576}
            M.write(dir, "hungry.lua", "world:system{name = 'hungry', run = function() local t = {} for i = 1, 1e8 do t[i] = i end end}")
            assert(mods:load(dir .. "/hungry.lua"))
            M.frames(w, 3)
            assert.are.equal("disabled", M.info(mods, "hungry").state)
            M.write(dir, "hungry.lua", "world:system{name = 'hungry', run = function() print('fed') end}")
            local info = assert(mods:reload("hungry"))
            assert.are.equal("running", info.state)
            assert.are.same({}, M.frames(w, 1))
            assert.are.same({"fed"}, mods:log("hungry"))
        end)

        it("reloads the mods depending on the reloaded one, so their imports are current", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.write(dir, "base.lua", "mod.exports.v = 1")
            M.folder_mod(dir, "user", {name = "user", depends = {"base"}}, {["init.lua"] = 'print(mod.import("base").v)'})
            assert(mods:load(dir .. "/base.lua"))
            assert(mods:load(dir .. "/user"))
            M.write(dir, "base.lua", "mod.exports.v = 2")
            assert(mods:reload("base"))
            assert.are.same({"1", "2"}, mods:log("user"))
        end)
    end)

    describe("poll", function()
        it("reloads the mods whose files changed, and only those", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.write(dir, "edited.lua", "print('v1')")
            M.write(dir, "same.lua", "print('same')")
            M.folder_mod(dir, "deep", {name = "deep"}, {["init.lua"] = 'print(require "part")', ["part.lua"] = "return 'p1'"})
            assert(mods:load(dir .. "/edited.lua"))
            assert(mods:load(dir .. "/same.lua"))
            assert(mods:load(dir .. "/deep"))
            local reloaded, failed = mods:poll()
            assert.are.same({}, reloaded)
            assert.are.same({}, failed)
            M.write(dir, "edited.lua", "print('v2, longer')")
            M.write(dir, "deep/part.lua", "return 'p2, longer'")
            reloaded, failed = mods:poll()
            table.sort(reloaded)
            assert.are.same({"deep", "edited"}, reloaded)
            assert.are.same({}, failed)
            assert.are.same({"v1", "v2, longer"}, mods:log("edited"))
            assert.are.same({"p1", "p2, longer"}, mods:log("deep"))
            assert.are.same({"same"}, mods:log("same"))
        end)

        it("reports a mod file gone missing once, and reloads it when it comes back", function()
            local dir = M.folder()
            local _, mods = M.host()
            M.write(dir, "moved.lua", "print('v1')")
            assert(mods:load(dir .. "/moved.lua"))
            os.remove(dir .. "/moved.lua")
            local reloaded, failed = mods:poll()
            assert.are.same({}, reloaded)
            assert.matches("mod 'moved'", failed.moved, 1, true)
            reloaded, failed = mods:poll()
            assert.are.same({}, reloaded)
            assert.are.same({}, failed)
            M.write(dir, "moved.lua", "print('v2, back')")
            reloaded, failed = mods:poll()
            assert.are.same({"moved"}, reloaded)
            assert.are.same({}, failed)
            assert.are.same({"v1", "v2, back"}, mods:log("moved"))
        end)

        it("reports a broken save once and keeps the old version running", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.write(dir, "saved.lua", "world:system{name = 'saved_sys', run = function() end}")
            assert(mods:load(dir .. "/saved.lua"))
            M.write(dir, "saved.lua", "this is not lua")
            local reloaded, failed = mods:poll()
            assert.are.same({}, reloaded)
            assert.matches("mod 'saved'", failed.saved, 1, true)
            reloaded, failed = mods:poll()
            assert.are.same({}, reloaded)
            assert.are.same({}, failed)
            assert.are.same({"host_tick", "saved_sys"}, M.system_names(w))
        end)
    end)

    describe("list", function()
        it("reports name, version, path, state, memory, systems, components, entities, failures, depends", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.folder_mod(dir, "base", {name = "base", version = "1.0"}, {["init.lua"] = ""})
            local path = M.folder_mod(dir, "listed", {name = "listed", version = "3.2", depends = {"base"}}, {["init.lua"] = [[
                world:component("Mark", "int32_t v;")
                world:event("Ping", "int32_t v;")
                world:spawn{Mark = {v = 1}}
                world:spawn{Mark = {v = 2}}
                world:system{name = "listed_ok", run = function() end}
                world:system{name = "listed_bad", run = function() error("always") end}
            ]]})
            assert(mods:load(dir .. "/base"))
            assert(mods:load(path))
            M.frames(w, 2)
            local info = M.info(mods, "listed")
            assert.are.equal("listed", info.name)
            assert.are.equal("3.2", info.version)
            assert.are.equal(path, info.path)
            assert.are.equal("running", info.state)
            assert.is_true(info.memory > 0 and info.memory <= info.memory_peak)
            table.sort(info.systems)
            assert.are.same({"listed_bad", "listed_ok"}, info.systems)
            table.sort(info.components)
            assert.are.same({"Mark", "Ping"}, info.components)
            assert.are.equal(2, info.entities)
            assert.are.equal(2, info.failures)
            assert.are.same({"base"}, info.depends)
            assert.matches("system 'listed_bad': .*always", info.error)
            local names = {}
            for i, m in ipairs(mods:list()) do names[i] = m.name end
            assert.are.same({"base", "listed"}, names)
        end)
    end)

    describe("close", function()
        it("closes every mod's state; their systems leave and the host plays on", function()
            local dir = M.folder()
            local w, mods, host = M.host()
            M.write(dir, "crates.lua", SPAWNER)
            assert(mods:load(dir .. "/crates.lua"))
            mods:close()
            assert.are.same({"host_tick"}, M.system_names(w))
            H.raises(function() mods:list() end, "mods:list", "closed")
            M.frames(w, 2)
            assert.are.equal(2, host.runs)
            assert.are.equal(3, #M.entities_with(w, "Crate"))
        end)

        it("goes with the world: closing the world first leaves nothing dangling", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.write(dir, "crates.lua", SPAWNER)
            assert(mods:load(dir .. "/crates.lua"))
            w:close()
            H.raises(function() mods:list() end, "mods:list")
            mods:close()
            collectgarbage()
        end)
    end)

    it("refuses a manager for a world that has one, and bad options, naming kiln.mods", function()
        local w = kiln.world()
        kiln.mods(w)
        H.raises(function() kiln.mods(w) end, "kiln.mods", "already")
        H.raises(function() kiln.mods(kiln.world(), {memory = 10}) end, "kiln.mods", "memory")
        H.raises(function() kiln.mods(kiln.world(), {instructions = -1}) end, "kiln.mods", "instructions")
        H.raises(function() kiln.mods(kiln.world(), {colour = 1}) end, "kiln.mods")
        H.raises(function() kiln.mods({}) end, "kiln.mods")
    end)
end)
