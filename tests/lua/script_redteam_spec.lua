-- script_redteam_spec.lua: a host script calling kiln back from finalizers and metamethods
-- while kiln runs a loop of its own, found by a red-team pass over the Lua binding.
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")
local kiln = require "kiln"

-- Runs fn with the collector stepping at every allocation and a finalizer always pending
-- that calls hit() once when ready() says so; returns whether it was called.
local function with_finalizer(ready, hit, fn)
    local armed, fired = true, false
    local function arm()
        setmetatable({}, {__gc = function()
            if not armed or fired then return end
            if ready() then fired = true; hit() else arm() end
        end})
    end
    local mode = not jit and collectgarbage("incremental") -- the mode it was in (5.4)
    local pause, stepmul = collectgarbage("setpause", 1), collectgarbage("setstepmul", 1000)
    for i = 1, 20000 do local _ = {i} end -- a cycle under way, so fn's allocations finish it
    arm()
    local ok, err = pcall(fn)
    armed = false
    collectgarbage("setpause", pause)
    collectgarbage("setstepmul", stepmul)
    if mode then collectgarbage(mode) end
    collectgarbage()
    assert(ok, err)
    return fired
end

describe("cmd:apply called again from a finalizer while it applies", function()
    it("is refused, so no record lands twice and none after a clear", function()
        for _, nested in ipairs{"apply", "clear"} do
            local w = kiln.world()
            w:component("Brain", "lua")
            local cmd = kiln.commands()
            for i = 1, 200 do cmd:spawn{Brain = {i}} end
            local nested_ok
            local fired = with_finalizer(function() return w:count() > 5 end, function()
                nested_ok = pcall(cmd[nested], cmd, w)
            end, function() cmd:apply(w) end)
            assert.is_true(fired)
            assert.is_false(nested_ok)
            assert.are.equal(200, w:count())
            assert.are.equal(0, cmd:count())
            w:close()
        end
    end)
end)

describe("a finalizer closing the world while cmd:apply resolves placeholders", function()
    -- The apply read the component's fields after making tables and strings, which may run
    -- a finalizer: one that closed the world freed them (heap-use-after-free under ASan).
    it("fails the record as a closed world, reading nothing freed", function()
        local names = {}
        for i = 1, 60 do names[i] = "e" .. i end
        local w = kiln.world()
        w:component("Link", "entity " .. table.concat(names, ", ") .. ";")
        local t = w:spawn{Link = {}}
        local cmd = kiln.commands()
        for _ = 1, 300 do
            local ph = cmd:spawn{}
            local v = {}
            for k = 1, 60 do v[names[k]] = ph end
            cmd:set(t, "Link", v)
        end
        local r, msg, applied
        local fired = with_finalizer(function() return cmd:count() < 560 end, function() w:close() end,
            function() r, msg, applied = cmd:apply(w) end)
        assert.is_true(fired)
        assert.is_nil(r)
        assert.matches("attempt to use a closed world", msg, 1, true)
        assert.is_true(applied > 0)
    end)
end)
