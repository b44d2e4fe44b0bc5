-- holders_hostile_spec.lua: what kiln holds by address (the manager, a mod, its view, the
-- host's world) against hosts and mods that free it while it is held: lifecycle calls from
-- host code a mod's code reached, kept objects used after world:close or mods:unload.
local kiln = require "kiln"
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local H = dofile(here .. "helpers.lua")
local M = dofile(here .. "mods_helpers.lua")

local BUSY = "not while a mod's code runs"

-- A mod printing at its top level, so that the host's log function runs inside it.
local CHATTY = [[
print("hello from " .. mod.name)
world:component("Mark_" .. mod.name, "int32_t n;")
world:spawn{["Mark_" .. mod.name] = {n = 1}}
world:system{name = mod.name .. "_sys", writes = {"Mark_" .. mod.name}, query = {"Mark_" .. mod.name},
             each = function(_, m) m.n = m.n + 1 end}
]]

-- A host whose log function runs act(mods, mod, line) and keeps what it returned (in a
-- pcall: what it tried must come back as an error, not unwind the mod's print).
local function logging_host(act)
    local tries = {}
    local mods
    local w, m, host = M.host{log = function(mod, line)
        if mods and act then tries[#tries + 1] = {pcall(act, mods, mod, line)} end
    end}
    mods = m
    return w, mods, host, tries
end

-- The only try must have failed naming fname and why.
local function refused(tries, fname, why)
    assert.are.equal(1, #tries)
    assert.is_false(tries[1][1], "the call inside the mod's code was allowed")
    assert.matches(fname .. ": " .. why, tostring(tries[1][2]), 1, true)
end

-- Frames run, every mod's system with them: each listed mod's Mark counter moves.
local function all_run(w, mods, host, frames)
    frames = frames or 2
    local runs = host.runs
    assert.are.same({}, M.frames(w, frames))
    assert.are.equal(runs + frames, host.runs)
    for _, info in ipairs(mods:list()) do
        assert.are.equal("running", info.state, info.name .. ": " .. tostring(info.error))
        assert.are.same({info.name .. "_sys"}, info.systems)
    end
end

-- Runs call() with the collector finishing a whole cycle at every allocation, after making
-- garbage whose finalizers form a chain n long: the last runs attack() (protected) about at
-- the nth allocation of call. The collector's settings (and 5.4's mode) are set back after.
-- Returns what call returned (packed, from a pcall) and what attack returned, or nil when the
-- chain had not reached it by the time call returned.
local function finalizer_at(n, attack, call)
    local tried
    local function chain(k)
        H.finalizer(function()
            if k == 1 then tried = {pcall(attack)} else chain(k - 1) end
        end)
    end
    collectgarbage()
    local pause = collectgarbage("setpause", 1)
    local stepmul = collectgarbage("setstepmul", H.luajit and 100000000 or 1000) -- 5.4 keeps it in a byte, /4
    local mode = not H.luajit and collectgarbage("incremental", 0, 0, 40)
    collectgarbage()
    chain(n)
    local result = {pcall(call)}
    local reached = tried
    collectgarbage("setpause", pause)
    collectgarbage("setstepmul", stepmul)
    if mode then
        collectgarbage("incremental", 0, 0, 13)
        collectgarbage(mode)
    end
    collectgarbage()
    return result, reached
end

describe("what kiln holds by address", function()
    after_each(M.cleanup)

    describe("the manager, while a mod's top level runs host code", function()
        it("refuses mods:close from the host's log (the load would write to a freed list)", function()
            local dir = M.folder()
            local w, mods, host, tries = logging_host(function(m) m:close() end)
            M.write(dir, "a.lua", CHATTY)
            assert(mods:load(dir .. "/a.lua"))
            refused(tries, "mods:close", BUSY)
            assert.are.equal("running", M.info(mods, "a").state)
            all_run(w, mods, host)
            assert.are.equal(3, w:get(M.entities_with(w, "Mark_a")[1], "Mark_a").n)
        end)

        it("refuses a nested mods:load from the host's log (one list slot was grown for two)", function()
            local dir = M.folder()
            local nested = false
            local w, mods, host, tries = logging_host(function(m, mod)
                if mod == "g" then
                    nested = true
                    return assert(m:load(dir .. "/h.lua"))
                end
            end)
            -- seven mods fill all but one slot of the list's first eight
            for i = 1, 7 do
                M.write(dir, "m" .. i .. ".lua", CHATTY)
                assert(mods:load(dir .. "/m" .. i .. ".lua"))
            end
            for k in pairs(tries) do tries[k] = nil end
            M.write(dir, "g.lua", CHATTY)
            M.write(dir, "h.lua", CHATTY)
            assert(mods:load(dir .. "/g.lua"))
            assert.is_true(nested)
            refused(tries, "mods:load", BUSY)
            assert.are.equal(8, #mods:list())
            assert.is_nil(M.info(mods, "h"))
            all_run(w, mods, host)
            -- the nested one loads fine afterwards, between frames
            assert(mods:load(dir .. "/h.lua"))
            assert.are.equal(9, #mods:list())
        end)

        it("refuses mods:load_dir from the host's log", function()
            local dir, other = M.folder(), M.folder()
            M.write(other, "x.lua", CHATTY)
            local w, mods, host, tries = logging_host(function(m, mod)
                if mod == "a" then return m:load_dir(other) end
            end)
            M.write(dir, "a.lua", CHATTY)
            assert(mods:load(dir .. "/a.lua"))
            refused(tries, "mods:load_dir", BUSY)
            assert.is_nil(M.info(mods, "x"))
            all_run(w, mods, host)
        end)

        it("refuses to unload the version a reload replaces, from the reload's own print", function()
            local dir = M.folder()
            local armed = false
            local w, mods, host, tries = logging_host(function(m, mod)
                if armed and mod == "a" then return m:unload("a") end
            end)
            M.write(dir, "a.lua", CHATTY)
            assert(mods:load(dir .. "/a.lua"))
            for k in pairs(tries) do tries[k] = nil end
            armed = true
            local info = assert(mods:reload("a"))
            armed = false
            refused(tries, "mods:unload", BUSY)
            assert.are.equal("running", info.state)
            assert.are.same({"a_sys"}, info.systems)
            all_run(w, mods, host)
        end)

        it("refuses to reload the version a reload replaces, from the reload's own print", function()
            local dir = M.folder()
            local armed = false
            local w, mods, host, tries = logging_host(function(m, mod)
                if armed and mod == "a" then
                    armed = false
                    return m:reload("a")
                end
            end)
            M.write(dir, "a.lua", CHATTY)
            assert(mods:load(dir .. "/a.lua"))
            for k in pairs(tries) do tries[k] = nil end
            armed = true
            assert(mods:reload("a"))
            refused(tries, "mods:reload", BUSY)
            all_run(w, mods, host)
            assert.are.equal(2, #mods:log("a")) -- one line per top level that ran
        end)

        it("refuses, from a granted function, to unload a dependency of the mod loading", function()
            local dir = M.folder()
            local tries, mods = {}, nil
            local w, m, host = M.host{allow = {meddle = function(what, name)
                tries[#tries + 1] = {pcall(mods[what], mods, name)}
            end}}
            mods = m
            M.folder_mod(dir, "base", {name = "base"}, {["init.lua"] = CHATTY .. [[
mod.exports.twice = function(n) return 2 * n end
]]})
            M.folder_mod(dir, "user", {name = "user", depends = {"base"}}, {["init.lua"] = CHATTY .. [[
local base = mod.import("base")
meddle("unload", "base")
meddle("reload", "base")
assert(base.twice(21) == 42)
]]})
            assert(mods:load(dir .. "/base"))
            assert(mods:load(dir .. "/user"))
            assert.are.equal(2, #tries)
            assert.is_false(tries[1][1])
            assert.matches("mods:unload: " .. BUSY, tries[1][2], 1, true)
            assert.is_false(tries[2][1])
            assert.matches("mods:reload: " .. BUSY, tries[2][2], 1, true)
            assert.are.equal("running", M.info(mods, "base").state)
            all_run(w, mods, host)
        end)

        it("refuses world:close from a granted function called by a top level", function()
            local dir = M.folder()
            local tries, w = {}, nil
            local w_, mods, host = M.host{allow = {shut = function() tries[#tries + 1] = {pcall(w.close, w)} end}}
            w = w_
            M.write(dir, "a.lua", CHATTY .. "shut()\n")
            assert(mods:load(dir .. "/a.lua"))
            assert.are.equal(1, #tries)
            assert.is_false(tries[1][1])
            assert.matches("world:close: cannot close the world while a mod's code or a mods call runs", tries[1][2], 1, true)
            all_run(w, mods, host)
        end)

        it("makes mods:poll from a granted function a no-op (nothing reloads under the mod)", function()
            local dir = M.folder()
            local polls, mods = {}, nil
            local w, m, host = M.host{allow = {poke = function()
                local reloaded, failed = mods:poll()
                polls[#polls + 1] = {#reloaded, next(failed)}
            end}}
            mods = m
            M.write(dir, "a.lua", CHATTY)
            assert(mods:load(dir .. "/a.lua"))
            -- a's file changes, then b's top level polls: a must not reload under b
            M.write(dir, "a.lua", CHATTY .. "-- changed, and longer\n")
            M.write(dir, "b.lua", CHATTY .. "poke()\n")
            assert(mods:load(dir .. "/b.lua"))
            assert.are.same({{0, nil}}, polls)
            local reloaded = mods:poll() -- between frames it does
            assert.are.same({"a"}, reloaded)
            all_run(w, mods, host)
        end)
    end)

    describe("the manager, while its own method runs a finalizer", function()
        -- the attacks a host's finalizer may try, and the methods it may interrupt
        local attacks = {
            unload = function(a) return a.mods:unload("a") end,
            close_manager = function(a) return a.mods:close() end,
            close_world = function(a) return a.w:close() end,
        }
        local methods = {
            log = function(a) return a.mods:log("a") end,
            list = function(a) return a.mods:list() end,
            poll = function(a) return a.mods:poll() end,
            load = function(a) return a.mods:load(a.dir .. "/b.lua") end,
            reload = function(a) return a.mods:reload("a") end,
        } -- (mods:unload allocates nothing of the host's: no finalizer of the host can run inside)
        for mname, method in pairs(methods) do
            for aname, act in pairs(attacks) do
                it("refuses " .. aname .. " from a finalizer run inside mods:" .. mname, function()
                    local inside = 0
                    for n = 1, 8 do
                        local a = {dir = M.folder()}
                        a.w, a.mods, a.host = M.host()
                        M.write(a.dir, "a.lua", CHATTY)
                        M.write(a.dir, "b.lua", CHATTY)
                        assert(a.mods:load(a.dir .. "/a.lua"))
                        local result, tried = finalizer_at(n, function() return act(a) end,
                                                           function() return method(a) end)
                        if tried and tried[1] then
                            -- it ran before the method looked: the method finds the manager
                            -- or the world closed, or mod a gone, and says so
                            local msg = tostring(result[2])
                            assert.is_truthy(result[1] or msg:find("closed", 1, true) or
                                             msg:find("no mod named 'a'", 1, true), msg)
                        else
                            assert.is_true(result[1], "mods:" .. mname .. " raised: " .. tostring(result[2]))
                        end
                        if tried and not tried[1] then
                            inside = inside + 1
                            local msg = tostring(tried[2])
                            assert.is_truthy(msg:find("not from inside another mods call", 1, true) or
                                             msg:find("world:close: cannot close the world while a mod's code or a mods call runs",
                                                      1, true), msg)
                        end
                        if not tostring(a.w):find("closed") and not tostring(a.mods):find("closed") then
                            local runs = a.host.runs
                            M.frames(a.w, 1)
                            assert.are.equal(runs + 1, a.host.runs)
                        end
                        a.w:close()
                    end
                    -- some finalizer of the chain ran inside the method (else this tried nothing)
                    assert.is_true(inside > 0, "no finalizer ran inside mods:" .. mname)
                end)
            end
        end
    end)

    describe("the manager, during a frame", function()
        it("refuses unload, reload and close from a mod's system through a granted function", function()
            local dir = M.folder()
            local tries, mods = {}, nil
            local w, m, host = M.host{allow = {meddle = function(what)
                tries[#tries + 1] = {pcall(mods[what], mods, "a")}
            end}}
            mods = m
            M.write(dir, "a.lua", CHATTY .. [[
world:system{name = "meddler", run = function()
    meddle("unload"); meddle("reload"); meddle("close")
end}
]])
            assert(mods:load(dir .. "/a.lua"))
            assert.are.same({}, M.frames(w, 1))
            assert.are.equal(3, #tries)
            for i, fname in ipairs{"mods:unload", "mods:reload", "mods:close"} do
                assert.is_false(tries[i][1], fname .. " was allowed")
                assert.matches(fname .. ": not during a frame", tries[i][2], 1, true)
            end
            assert.are.equal("running", M.info(mods, "a").state)
        end)
    end)

    describe("kept objects after the world or the mod is gone", function()
        it("a manager kept past world:close raises, and closing it again is a no-op", function()
            local dir = M.folder()
            local w, mods = M.host()
            M.write(dir, "a.lua", CHATTY)
            assert(mods:load(dir .. "/a.lua"))
            w:close()
            H.raises(function() mods:list() end, "mods:list", "closed")
            H.raises(function() mods:load(dir .. "/a.lua") end, "mods:load", "closed")
            H.raises(function() mods:reload("a") end, "mods:reload", "closed")
            H.raises(function() mods:unload("a") end, "mods:unload", "closed")
            H.raises(function() mods:log("a") end, "mods:log", "closed")
            H.raises(function() mods:poll() end, "mods:poll", "closed")
            mods:close()
            assert.matches("closed", tostring(mods))
        end)

        it("a manager the host dropped keeps running its mods' systems (the world holds it)", function()
            local dir = M.folder()
            local w, mods, host = M.host()
            M.write(dir, "a.lua", CHATTY)
            assert(mods:load(dir .. "/a.lua"))
            mods = nil
            collectgarbage()
            collectgarbage()
            assert.are.same({}, M.frames(w, 3))
            assert.are.equal(4, w:get(M.entities_with(w, "Mark_a")[1], "Mark_a").n)
            assert.are.equal(3, host.runs)
        end)

        it("after mods:close the world runs on without the mods' systems, keeping their entities", function()
            local dir = M.folder()
            local w, mods, host = M.host()
            M.write(dir, "a.lua", CHATTY)
            assert(mods:load(dir .. "/a.lua"))
            assert.are.same({}, M.frames(w, 1))
            mods:close()
            assert.are.same({}, M.frames(w, 2))
            assert.are.same({"host_tick"}, M.system_names(w))
            assert.are.equal(2, w:get(M.entities_with(w, "Mark_a")[1], "Mark_a").n)
            assert.are.equal(3, host.runs)
            H.raises(function() mods:list() end, "mods:list", "the mod manager is closed")
        end)

        it("a coroutine a system made under its budget runs harmlessly after world:close", function()
            local w = kiln.world()
            local co
            w:system{name = "maker", run = function()
                co = co or coroutine.create(function()
                    local n = 0
                    while true do
                        for _ = 1, 5000 do n = n + 1 end -- past the budget's hook interval
                        coroutine.yield(n)
                    end
                end)
                assert(coroutine.resume(co))
            end}
            assert(w:progress(1 / 60))
            w:close()
            w = nil
            collectgarbage()
            collectgarbage()
            local ok, n = coroutine.resume(co)
            assert.is_true(ok, tostring(n))
            assert.are.equal(10000, n)
        end)

        it("a manager whose world the host dropped keeps the world alive", function()
            local dir = M.folder()
            local mods = kiln.mods(kiln.world())
            collectgarbage()
            collectgarbage()
            M.write(dir, "a.lua", CHATTY)
            assert(mods:load(dir .. "/a.lua"))
            assert.are.equal("running", M.info(mods, "a").state)
            mods = nil
            collectgarbage() -- the world and its manager go together
            collectgarbage()
        end)

        it("a dependent whose reload failed gets an error from a function it kept of the old dependency", function()
            local dir = M.folder()
            local w, mods, host = M.host()
            M.folder_mod(dir, "base", {name = "base"}, {["init.lua"] = CHATTY .. [[
mod.exports.twice = function(n) return 2 * n end
]]})
            local user = M.folder_mod(dir, "user", {name = "user", depends = {"base"}}, {["init.lua"] = CHATTY .. [[
local twice = mod.import("base").twice
world:system{name = "caller", run = function() assert(twice(2) == 4) end}
]]})
            assert(mods:load(dir .. "/base"))
            assert(mods:load(user))
            assert.are.same({}, M.frames(w, 1))
            M.write(user, "init.lua", "error('broken on purpose')\n")
            assert(mods:reload("base")) -- base reloads; user's reload fails, its old version runs on
            assert.matches("broken on purpose", tostring(M.info(mods, "user").error), 1, true)
            local failures = M.failures_of(M.frames(w, 2), "user")
            assert.are.equal(2, #failures)
            assert.matches("mod 'base' is no longer loaded", failures[1].message, 1, true)
            assert.are.equal(host.runs, 3)
        end)
    end)
end)
