-- repl_mods_spec.lua: the REPL's mod commands (:mods, :reload, :unload, :log) over the global
-- `mods`, and the host's failures log shown on :poll as failures happen.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

local function tmpdir()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    return dir
end

local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

describe("the REPL's mod commands", function()
    local dir, env, s
    before_each(function()
        dir = tmpdir()
        env = setmetatable({}, {__index = _G})
        env.world = kiln.world()
        env.mods = kiln.mods(env.world, {instructions = 100000})
        s = kiln.session(env, {remote = true})
    end)
    after_each(function()
        os.execute("rm -rf " .. dir)
    end)

    it("list the mods with their state, systems, entities and last error", function()
        assert.are.same({"ok", "no mods loaded"}, {s:feed(":mods")})
        write(dir .. "/spinner.lua", [[
world:component("Spin", "float a")
for i = 1, 3 do world:spawn{Spin = {a = i}} end
world:system{name = "spin", run = function() while true do end end}
print("spinner ready")
]])
        assert(env.mods:load(dir .. "/spinner.lua"))
        env.world:progress(0.1) -- spin runs past its budget
        local status, text = s:feed(":mods")
        assert.are.equal("ok", status)
        assert.truthy(text:find("^spinner +0 +running +[%d.]+ KiB  1 systems  3 entities  1 failures"), text)
        assert.truthy(text:find("last error: system 'spin': .*ran past its budget of 100000 instructions"), text)
        assert.are.same({"ok", "spinner ready"}, {s:feed(":log spinner")})
    end)

    it("reload a mod in place and unload it, with or without its data", function()
        write(dir .. "/keeper.lua", [[
world:component("Kept", "int32_t n")
if world:query{"Kept"}:count() == 0 then world:spawn{Kept = {n = 1}} end
world:system{name = "keep", writes = {"Kept"}, query = {"Kept"}, each = function(e, k) k.n = k.n + 1 end}
]])
        assert(env.mods:load(dir .. "/keeper.lua"))
        assert.are.same({"ok", "reloaded keeper (1 systems)"}, {s:feed(":reload keeper")})
        assert.are.equal(1, env.world:count())
        assert.are.same({"ok", "unloaded keeper (its entities and components kept)"}, {s:feed(":unload keeper keep")})
        assert.are.equal(1, env.world:count())
        assert(env.mods:load(dir .. "/keeper.lua"))
        assert.are.same({"ok", "unloaded keeper"}, {s:feed(":unload keeper")})
        assert.are.equal(0, env.world:count())
    end)

    it("say what went wrong", function()
        assert.are.same({"error", "mods:reload: no mod named 'ghost' is loaded"}, {s:feed(":reload ghost")})
        assert.are.same({"error", "mods:log: no mod named 'ghost' is loaded"}, {s:feed(":log ghost")})
        assert.are.same({"error", ":unload takes a mod name and, optionally, keep"}, {s:feed(":unload ghost please")})
        assert.are.same({"error", ":log takes a mod name"}, {s:feed(":log")})
        write(dir .. "/broken.lua", "world:system{name = 'b', run = function() end}\n")
        assert(env.mods:load(dir .. "/broken.lua"))
        write(dir .. "/broken.lua", "error('not today')\n")
        local status, text = s:feed(":reload broken")
        assert.are.equal("error", status)
        assert.truthy(text:find("mod 'broken': .*not today"), text)
        env.mods = 42
        assert.are.same({"error", "the global `mods` is a number, not a kiln.Mods"}, {s:feed(":mods")})
        env.mods = nil
        assert.are.same({"error", "no mods: the global `mods` holds no mod manager (kiln.mods(world))"}, {s:feed(":mods")})
    end)

    it("name the dependents whose reload failed after the mod's own", function()
        -- ":reload dep" answered "reloaded dep" alone though user, which depends on it, failed
        -- to reload and its old version was left calling into a dep that is gone
        assert(os.execute("mkdir -p " .. dir .. "/dep " .. dir .. "/user"))
        write(dir .. "/dep/manifest.lua", 'return {name = "dep", version = "1"}')
        write(dir .. "/dep/init.lua", "mod.exports.v = 1")
        write(dir .. "/user/manifest.lua", 'return {name = "user", version = "1", depends = {"dep"}}')
        write(dir .. "/user/init.lua", 'assert(mod.import("dep").v == 1, "user needs dep 1")')
        assert(env.mods:load(dir .. "/dep"))
        assert(env.mods:load(dir .. "/user"))
        write(dir .. "/dep/init.lua", "mod.exports.v = 2")
        local status, text = s:feed(":reload dep")
        assert.are.equal("error", status)
        assert.truthy(text:find("^reloaded dep %(0 systems%); its dependent user failed to reload: " ..
                                "reload failed, the old version runs on: mod 'user': .*user needs dep 1"), text)
    end)

    it("show the host's new failures on :poll, once each", function()
        env.failures = {n = 0}
        assert.are.same({"ok", ""}, {s:feed(":poll")})
        env.failures[1], env.failures.n = "frame 3: Lua system 'x' failed: boom", 1
        env.failures[2], env.failures.n = "frame 4: Lua system 'y' failed: bang", 2
        assert.are.same({"ok", "frame 3: Lua system 'x' failed: boom\nframe 4: Lua system 'y' failed: bang"}, {s:feed(":poll")})
        assert.are.same({"ok", ""}, {s:feed(":poll")})
        -- a session attached later starts from then, not from the game's start
        local late = kiln.session(env, {remote = true})
        assert.are.same({"ok", ""}, {late:feed(":poll")})
    end)

    it("show a failure on a later :poll when a :poll is stopped part way", function()
        -- a watch may spend a console statement's budget (every instruction raises then): the
        -- failures that :poll had not shown yet are shown by the next one, not lost
        local log = {n = 0}
        env.failures = log
        assert.are.same({"ok", ""}, {s:feed(":poll")})
        assert.are.equal("ok", (s:feed(":watch world:count()")))
        local feed, find, status, text = s.feed, string.find, nil, nil
        H.every_stop(function()
            log.n = log.n + 1
            log[log.n] = "failure " .. log.n
            status, text = feed(s, ":poll")
        end, function(n, ok)
            local want = "failure " .. log.n
            if not ok or status ~= "ok" then
                local _, later = feed(s, ":poll")
                assert.is_truthy(find(later, want, 1, true), want .. " lost after a stop at instruction " .. n)
            else
                assert.is_truthy(find(text, want, 1, true), text)
            end
        end, 20000)
    end)

    -- a spent budget or a console statement's time limit raises at every instruction: a
    -- command stopped part way says so with the mods as they were, and one that answers "ok"
    -- was made (no Lua code of the session may run after the unload or the reload)
    it("unload and reload whole or not at all when stopped part way", function()
        write(dir .. "/keeper.lua", [[
world:component("Kept", "int32_t n")
world:spawn{Kept = {n = 1}} -- one more on each load: a reload shows in the count
world:system{name = "keep", writes = {"Kept"}, query = {"Kept"}, each = function(e, k) k.n = k.n + 1 end}
]])
        local mods, feed, w = env.mods, s.feed, env.world
        assert(mods:load(dir .. "/keeper.lua"))
        local status, text, loads
        H.every_stop(function() status, text = feed(s, ":unload keeper") end, function(n, ok, err)
            local gone = #mods:list() == 0
            if ok and status == "ok" then
                assert.is_true(gone)
            else
                assert.is_false(gone, "unloaded, then reported " .. tostring(ok and text or err) .. " at stop " .. n)
            end
        end, 20000)
        assert(mods:load(dir .. "/keeper.lua"))
        H.every_stop(function()
            loads = w:count()
            status, text = feed(s, ":reload keeper")
        end, function(n, ok, err)
            local reloaded = w:count() ~= loads
            if ok and status == "ok" then
                assert.is_true(reloaded)
            else
                assert.is_false(reloaded, "reloaded, then reported " .. tostring(ok and text or err) .. " at stop " .. n)
            end
        end, 20000)
    end)
end)
