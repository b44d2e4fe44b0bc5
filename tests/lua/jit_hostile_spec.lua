-- jit_hostile_spec.lua: LuaJIT's fast paths (loop_sites.lua, ffi_spawn.lua, ffi.lua) fed what a
-- hostile script would feed them; under Lua 5.4 the same specs pin the table and C paths.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- The FFI spawn path exists under LuaJIT with its ffi library (busted's luajit has it).
local FFI = H.luajit and pcall(require, "ffi")

-- How many of fn's spawns on w took the FFI path.
local function ffi_count(w, fn)
    local before = kiln.ffi_spawns(w)
    fn()
    return kiln.ffi_spawns(w) - before
end

describe("a q:each() loop that seems not to read its entity", function()
    after_each(function() kiln.ffi_debug = nil end)

    it("keeps the entity for an iterator on its line that tail-calls q:each and hands the entity on", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local holder = {}
        -- the loop's own call is weird(); its ITERC calls it, and its first call tail-calls
        -- q:each, so the loop gets (step, state) and the iterator then runs the step itself
        local function weird()
            local phase = 0
            return function(_, step)
                if phase == 0 then
                    phase = 1
                    return q:each()
                end
                if phase == 1 then
                    phase = 2
                    local e = step(holder.state)
                    step(holder.state)
                    return "row", e
                end
            end
        end
        local got = {}
        for _, v in weird() do
            if holder.state == nil then holder.state = v else got[#got + 1] = v end
        end
        assert.are.same({a}, got)
    end)

    it("keeps the entity for q:each tail-called by a metamethod an instruction of the loop's line runs", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local _, state = q:each() -- a query's loop state is the same for all its loops
        local lazy = setmetatable({}, {__index = function() return q:each() end})
        local function rows(step)
            return function()
                local e = step(state)
                return e and "row", e
            end
        end
        local got = {}
        for _, e in rows(lazy.step) do
            got[#got + 1] = e
        end
        assert.are.same({a}, got)
    end)
end)

describe("world:spawn under LuaJIT, attacked", function()
    it("spawns once when a debug hook raises after the core spawned", function()
        local w = H.world()
        local before = w:count()
        local fired
        local jit_was = H.luajit and jit.status()
        if H.luajit then jit.off() end -- hooks run only in the interpreter
        -- raises once, at the first instruction after an entity came into being
        debug.sethook(function()
            if not fired and w:count() > before then
                fired = true
                error("the hook says no")
            end
        end, "", 1)
        local ok, e = pcall(w.spawn, w, {Position = {x = 3}})
        debug.sethook()
        if H.luajit and jit_was then jit.on() end
        assert.are.equal(before + 1, w:count())
        if ok then assert.are.equal(3, w:get(e, "Position").x) end
    end)

    it("spawns once when a finalizer raises after the core spawned", function()
        local w = H.world()
        local armed = false
        local function fin()
            if armed then
                armed = false
                error("the finalizer says no")
            end
        end
        local jit_was = H.luajit and jit.status()
        if H.luajit then jit.off() end -- interpreted, the FFI path makes cdata: collections run inside it
        local pause = collectgarbage("setpause", 50) -- cycles close together: many finalizers run mid-spawn
        local wrong
        for i = 1, 10000 do
            armed = false
            for _ = 1, 4 do H.finalizer(fin) end
            local before = w:count()
            local init = {Position = {x = i, y = i}, Velocity = {x = 1}}
            armed = true
            local ok, e = pcall(w.spawn, w, init)
            armed = false
            local made = w:count() - before
            if made ~= (ok and 1 or 0) then
                wrong = string.format("spawn %d %s and made %d entities", i, ok and "returned" or "raised", made)
                break
            end
            if ok then assert.are.same({x = i, y = i}, w:get(e, "Position")) end
        end
        collectgarbage("setpause", pause)
        if H.luajit and jit_was then jit.on() end
        collectgarbage()
        assert.is_nil(wrong)
    end)
end)
