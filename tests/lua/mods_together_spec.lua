-- mods_together_spec.lua: many mods loaded at once that call and use one another: a chain of
-- them must not take the host down together where none of them could alone.
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

-- The text of mod i of a chain: its export nests `nest` string.gsub callbacks (C calls of its
-- state, under Lua 5.4 and LuaJIT alike) and then calls mod i-1's export. A failure anywhere comes back as "DEEP" when it says
-- the calls nest too deep, so the message does not grow with every mod it crosses.
local function chain_link(i, nest)
    local prev = i > 1 and string.format('mod.import("c%d").f', i - 1) or "function() return 0 end"
    return string.format([[
local prev = %s
local function down(n)
    if n == 0 then
        local ok, v = pcall(prev)
        if ok then return v + 1 end
        if v:find("nest too deep", 1, true) or v:find("DEEP", 1, true) then error("DEEP", 0) end
        error(v, 0)
    end
    local v
    string.gsub("x", "x", function() v = down(n - 1) end)
    return v
end
mod.exports.f = function() return down(%d) end
]], prev, nest)
end

describe("mods together", function()
    after_each(M.cleanup)

    it("calling down a chain of 60 mods, each nesting C calls, fail with a message instead of crashing", function()
        local w, mods = M.host()
        local dir = M.folder()
        local n = 60
        for i = 1, n do
            local path = M.folder_mod(dir, "c" .. i, {name = "c" .. i, version = "1",
                                                     depends = i > 1 and {"c" .. (i - 1)} or nil},
                                      {["init.lua"] = chain_link(i, 90)})
            assert(mods:load(path))
        end
        -- each state stops at its own limit of nested C calls (200 under Lua 5.4); 60 of them together passed the
        -- host's C stack and the process died
        local top = M.folder_mod(dir, "top", {name = "top", version = "1", depends = {"c" .. n}},
                                 {["init.lua"] = 'result = {pcall(mod.import("c' .. n .. '").f)}\n' ..
                                                 'print(tostring(result[1]) .. " " .. tostring(result[2]))'})
        assert(mods:load(top))
        local line = mods:log("top")[1]
        assert.are.equal("false mod 'c" .. n .. "': DEEP", line)
        -- the mods are whole and a short chain still runs
        local short = M.folder_mod(dir, "short", {name = "short", version = "1", depends = {"c3"}},
                                   {["init.lua"] = 'print(mod.import("c3").f())'})
        assert(mods:load(short))
        assert.are.equal("3", mods:log("short")[1])
        assert.is_true(w:progress(1 / 60))
    end)
end)
