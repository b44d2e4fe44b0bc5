-- mods_proxies_spec.lua: what a proxy (a function crossing between Lua states) holds in the
-- state that gave it, and that it lets go. Every folder made is removed at the end.
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

-- The host's Lua heap in KiB after full collections.
local function heap()
    collectgarbage()
    collectgarbage()
    return collectgarbage("count")
end

-- The keys of a table (a weak one: what its values' holders still hold).
local function count(t)
    local n = 0
    for _ in pairs(t) do n = n + 1 end
    return n
end

-- Runs n frames, each of which must succeed.
local function frames(w, n)
    for _ = 1, n do
        local ok, failures = w:progress(1 / 60)
        assert(ok, failures and failures[1] and failures[1].message)
    end
end

describe("a proxy", function()
    after_each(M.cleanup)

    it("of a fresh closure a granted function returns is let go by the host, and none is left after unload", function()
        -- every closure handed to a mod was kept in the host's registry for good: an iterator
        -- factory called 100k times grew the host by 15 MiB, charged to no mod, kept after unload
        local handed = setmetatable({}, {__mode = "k"})
        local players = {1, 2, 3}
        local game = {players = function()
            local i = 0
            local f = function()
                i = i + 1
                return players[i]
            end
            handed[f] = true
            return f
        end}
        local w, mods = M.host{allow = {game = game}}
        local dir = M.folder()
        M.write(dir, "walker.lua", [[
            world:system{name = "walker", run = function()
                for _ = 1, 2000 do
                    local n = 0
                    for _ in game.players() do n = n + 1 end
                    assert(n == 3)
                end
            end}
        ]])
        assert(mods:load(dir .. "/walker.lua"))
        -- measured from a steady state: what the walker's own collector has not reached yet is
        -- held in both readings (a few thousand closures, more or less from run to run)
        frames(w, 50)
        local h0 = heap()
        frames(w, 50) -- 100k calls
        local grown = heap() - h0
        assert.is_true(grown < 2048, string.format("the host grew by %.0f KiB", grown))
        assert(mods:unload("walker"))
        heap()
        assert.are.equal(0, count(handed))
    end)

    it("of a fresh closure another mod exports is let go by that mod, and none is left after unload", function()
        -- the exporting mod kept every closure it handed out: its caller filled its memory to
        -- the limit and left it out of memory for good (one mod breaking another)
        local live
        local w, mods = M.host_with_folder_mods({
            {"lib", init = [[
                local items = {1, 2, 3}
                local handed = setmetatable({}, {__mode = "k"})
                mod.exports.each = function()
                    local i = 0
                    local f = function()
                        i = i + 1
                        return items[i]
                    end
                    handed[f] = true
                    return f
                end
                world:system{name = "lib_count", run = function()
                    collectgarbage()
                    local n = 0
                    for _ in pairs(handed) do n = n + 1 end
                    report(n)
                end}
            ]]},
            {"user", depends = {"lib"}, init = [[
                local lib = mod.import("lib")
                world:system{name = "user_walk", run = function()
                    for _ = 1, 5000 do
                        local n = 0
                        for _ in lib.each() do n = n + 1 end
                        assert(n == 3)
                    end
                end}
            ]]},
        }, {memory = 16 * 1024 * 1024, allow = {report = function(n) live = n end}})
        frames(w, 1)
        local m0 = M.info(mods, "lib").memory
        frames(w, 20) -- 100k calls
        local lib = M.info(mods, "lib")
        assert.are.equal("running", lib.state)
        assert.is_true(lib.memory - m0 < 1048576, string.format("lib grew by %d bytes", lib.memory - m0))
        assert.is_true(live < 20000, "lib still holds " .. live .. " closures it handed out")
        assert(mods:unload("user"))
        frames(w, 1)
        assert.are.equal(0, live)
    end)

    it("of one function handed out again and again holds it while any copy lives, in any mod", function()
        -- one function handed out many times is kept once, counted: proxies of it collected
        -- in one mod, or a whole mod unloaded, never let it go under another's live proxy
        local function ping() return "pong" end
        local w, mods = M.host{allow = {get = function() return ping end}}
        local dir = M.folder()
        local text = [[
            local keep = get()
            for _ = 1, 20000 do local p = get() end
            collectgarbage()
            for _ = 1, 20000 do assert(get()() == "pong") end
            collectgarbage()
            world:system{name = "%s_s", run = function()
                for _ = 1, 2000 do local p = get() end
                assert(keep() == "pong")
            end}
            -- nothing of what the proxy holds shows
            assert(getmetatable(keep) == nil)
            assert(debug == nil)
            assert(keep() == "pong")
        ]]
        M.write(dir, "one.lua", text:format("one"))
        M.write(dir, "two.lua", text:format("two"))
        assert(mods:load(dir .. "/one.lua"))
        assert(mods:load(dir .. "/two.lua"))
        frames(w, 5)
        assert(mods:unload("one"))
        frames(w, 5)
        assert(mods:unload("two"))
        assert(mods:load(dir .. "/one.lua"))
        frames(w, 2)
    end)

    it("held by a state that reloads, or closes with its manager, lets go of what it held", function()
        local handed = setmetatable({}, {__mode = "k"})
        local function make()
            local f = function() return 1 end
            handed[f] = true
            return f
        end
        local w, mods = M.host_with_folder_mods({
            {"lib", init = [[mod.exports.make = function() return function() return 2 end end]]},
            {"user", depends = {"lib"}, init = [[
                local lib = mod.import("lib")
                local held = {}
                for i = 1, 1000 do held[i], held[-i] = make(), lib.make() end
                world:system{name = "user_s", run = function()
                    assert(held[1]() == 1 and held[-1]() == 2)
                end}
            ]]},
        }, {allow = {make = make}})
        frames(w, 1)
        assert.are.equal(1000, count(handed))
        -- a reload of lib reloads user: the old states close with their proxies, the new
        -- user's hold their own (into the new lib)
        assert(mods:reload("lib"))
        frames(w, 2)
        heap()
        assert.are.equal(1000, count(handed))
        mods:close()
        heap()
        assert.are.equal(0, count(handed))
    end)

    it("is never made in the host's state: a function passed to a granted function is refused", function()
        -- proxies hold their manager by a bare pointer, safe only while mods' states (closed
        -- before their manager is freed) are the only ones holding them
        local got = {}
        local game = {take = function(...) got[#got + 1] = select("#", ...) end}
        local w, mods = M.host{allow = {game = game}}
        local dir = M.folder()
        M.write(dir, "giver.lua", [[
            print(pcall(game.take, function() end))
            print(pcall(game.take, {f = function() end}))
            print(pcall(game.take, 1))
        ]])
        assert(mods:load(dir .. "/giver.lua"))
        local log = mods:log("giver")
        assert.matches("^false\tthe host: an argument is a function, which cannot be passed", log[1])
        assert.matches("^false\t.*function, which cannot be passed", log[2])
        assert.are.equal("true", log[3])
        assert.are.same({1}, got)
        w:progress(1 / 60)
    end)

    it("held by a mod whose giver's anchor a host script replaced fails with a message that says so", function()
        local REG = debug.getregistry()
        -- the anchor: a userdata whose hidden metatable holds only __gc and __metatable
        local function is_anchor(v)
            local mt = type(v) == "userdata" and debug.getmetatable(v)
            if type(mt) ~= "table" or mt.__metatable ~= false or type(mt.__gc) ~= "function" then return false end
            return count(mt) == 2
        end
        local w, mods = M.host{allow = {get = function() return function() return "pong" end end}}
        local dir = M.folder()
        M.write(dir, "holder.lua", [[
            local keep = get()
            world:system{name = "holder", run = function() print(pcall(keep)) end}
        ]])
        assert(mods:load(dir .. "/holder.lua"))
        frames(w, 1)
        local replaced = 0
        for k, v in pairs(REG) do
            if is_anchor(v) then
                REG[k] = io.stdout
                replaced = replaced + 1
            end
        end
        assert.are.equal(1, replaced)
        heap()
        frames(w, 1)
        local log = mods:log("holder")
        assert.are.equal("true\tpong", log[1])
        assert.matches("^false\tthe host: the function this proxy calls is gone %(a script replaced", log[2])
        mods:close()
    end)

    it("holds on while a host script replaces the registry's entries (debug.getregistry)", function()
        -- the giving state's book of links was a userdata in the registry, trusted by its type:
        -- debug_hostile_spec puts io.stdout in place of every bare userdata under a light key,
        -- and the next settle read stdout's FILE as a link (a SEGV in the next spec's mods:list)
        local REG = debug.getregistry()
        local game = {make = function()
            return function() return 1 end
        end}
        for round = 1, 3 do
            local w, mods = M.host{allow = {game = game}}
            local dir = M.folder()
            M.write(dir, "keeper.lua", [[
                local kept = {}
                world:system{name = "keeper", run = function()
                    for i = 1, 20 do kept[i] = game.make() end
                    for i = 1, 20 do assert(kept[i]() == 1) end
                end}
            ]])
            assert(mods:load(dir .. "/keeper.lua"))
            frames(w, 2)
            for k, v in pairs(REG) do
                if type(k) == "userdata" and type(v) == "userdata" and debug.getmetatable(v) == nil then
                    REG[k] = io.stdout
                end
            end
            frames(w, 2) -- the proxies made now, and those collected, meet the replaced entries
            if round == 2 then mods:close() end
            mods, w = nil, nil
            collectgarbage()
            collectgarbage()
        end
        local w, mods = M.host{allow = {game = game}}
        collectgarbage()
        assert.are.same({}, mods:list())
        frames(w, 1)
        mods:close()
        collectgarbage()
    end)
    it("holds on while a host script rewrites the table of kept functions (debug.getuservalue)", function()
        -- the table mapped a function to its link by a light userdata, trusted as a pointer: a
        -- host script put a registry key there (push_proxy counted a holder in read-only
        -- memory, a SEGV), or moved a function so that its link was freed with the table still
        -- naming it (a use after free at the next hand-out)
        local REG = debug.getregistry()
        local function ping() return "pong" end
        local function ping2() return "pong2" end
        local function other() return "other" end
        local w, mods = M.host{allow = {get = function() return ping end, get2 = function() return ping2 end}}
        local dir = M.folder()
        M.write(dir, "holder.lua", [[
            keep, keep2 = get(), get2()
            world:system{name = "holder", run = function()
                keep2 = nil
                collectgarbage()
                assert(get()() == "pong" and keep() == "pong")
            end}
        ]])
        assert(mods:load(dir .. "/holder.lua"))
        local found = 0
        for k, v in pairs(REG) do
            if type(k) == "userdata" and type(v) == "userdata" then
                local kept
                if debug.getuservalue then
                    kept = debug.getuservalue(v, 1)
                else -- LuaJIT: the user value is the first slot of the environment
                    local env = debug.getfenv(v)
                    kept = type(env) == "table" and rawget(env, 1) or nil
                end
                if type(kept) == "table" and rawget(kept, ping) ~= nil then
                    found = found + 1
                    for k2, v2 in pairs(kept) do
                        if v2 == ping2 then kept[k2] = other end -- ping2's link: not ping2's any more
                    end
                    kept[ping] = k -- a light userdata that is no link
                end
            end
        end
        assert.are.equal(1, found)
        frames(w, 3) -- ping handed out again; ping2's link let go
        assert(mods:load(M.write(dir, "again.lua", [[assert(get2()() == "pong2")]])))
        frames(w, 1)
        mods:close()
        collectgarbage()
    end)
    it("closes nothing under a mod's call when the host calls the manager's __gc early", function()
        -- a granted function reaching md_gc through debug.getmetatable closed every mod state,
        -- the calling mod's included, under its own call (a use after free when it returned)
        local mods
        local said = {}
        local game = {kill = function()
            said[#said + 1] = select("#", debug.getmetatable(mods).__gc(mods))
            return function() return "inner" end
        end}
        local w
        w, mods = M.host{allow = {game = game}}
        local dir = M.folder()
        M.write(dir, "victim.lua", [[
            world:system{name = "victim", run = function()
                assert(game.kill()() == "inner")
            end}
        ]])
        assert(mods:load(dir .. "/victim.lua"))
        frames(w, 2)
        assert.are.same({0, 0}, said)
        assert.are.equal("running", M.info(mods, "victim").state)
        debug.getmetatable(mods).__gc(mods) -- between frames: it closes them
        assert.matches("closed", tostring(mods))
        frames(w, 1)
    end)
end)

describe("a proxy's failure", function()
    after_each(M.cleanup)

    -- Each proxy is called from a Lua function, not straight from pcall: luaL_error put that
    -- function's chunk:line: in front then, and only then; and a refused result named no one.
    it("reads 'callee: detail' however it is called, a refused result included", function()
        local _, mods = M.host{allow = {host_meta = function() return setmetatable({}, {}) end}}
        local dir = M.folder()
        assert(mods:load(M.folder_mod(dir, "lib", {name = "lib"}, {["init.lua"] = [[
            mod.exports.boom = function() error("boom", 0) end
            mod.exports.meta = function() return setmetatable({}, {}) end
            mod.exports.id = function(x) return x end
        ]]})))
        assert(mods:load(M.folder_mod(dir, "user", {name = "user", depends = {"lib"}}, {["init.lua"] = [[
            local lib = mod.import("lib")
            local function try(f) print(select(2, pcall(f))) end
            try(function() return lib.boom() end)
            try(function() return lib.meta() end)
            try(function() return lib.id(setmetatable({}, {})) end)
            try(function() return host_meta() end)
        ]]})))
        assert.are.same({
            "mod 'lib': boom",
            "mod 'lib': a result holds a table with a metatable, which cannot be copied",
            "mod 'lib': an argument holds a table with a metatable, which cannot be copied",
            "the host: a result holds a table with a metatable, which cannot be copied",
        }, mods:log("user"))
        mods:close()
    end)
end)
