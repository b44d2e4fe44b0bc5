-- mods_tags_spec.lua: placeholder tags over a long run. A mod spending its buffers' tags as
-- fast as it can, or a host spawning through buffers for days, must never leave the host (or
-- anyone) unable to spawn; the counters are jumped to their last tags through the registry,
-- standing in for the elapsed time.
local kiln = require "kiln"
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local H = dofile(here .. "helpers.lua")
local M = dofile(here .. "mods_helpers.lua")

local SHIFT = 2 ^ 20
local LAST_HOST, LAST_MOD = 2 ^ 33 - 1, 2 ^ 33 - 2 -- the last tags (lua/src/commands.c)

local function tag_of(p) return math.floor(-p / SHIFT) end

-- Runs f with the registry's counters set as given ({key = value}), then puts them back.
local function with_counters(values, f)
    local reg = debug.getregistry()
    local saved = {}
    for k, v in pairs(values) do saved[k], reg[k] = reg[k], v end
    local ok, err = pcall(f)
    for k in pairs(values) do reg[k] = saved[k] end
    if not ok then error(err, 0) end
end

describe("placeholder tags over a long run", function()
    after_each(M.cleanup)

    it("a mod spending tags without end leaves the host's spawns working", function()
        with_counters({["kiln.tags"] = LAST_HOST - 4, ["kiln.mod_tags"] = LAST_MOD - 4}, function()
            local dir = M.folder()
            local w, mods = M.host{instructions = 10000000, memory = 4 * 1024 * 1024}
            M.write(dir, "burn.lua", [[
local c = kiln.commands()
world:system{name = "burn", run = function()
    for _ = 1, 2000 do c:spawn() c:clear() end
end}
]])
            assert(mods:load(dir .. "/burn.lua"))
            -- the mod's own tags go round instead of running out
            assert.are.same({}, M.frames(w, 3))
            assert.is_true(debug.getregistry()["kiln.mod_tags"] < 2 ^ 20, "the mods' tags went round")
            assert(mods:unload("burn"))
            -- the host's buffers, old and new, spawn into this world and a new one
            for _, world in ipairs{w, H.world()} do
                local cmd = kiln.commands()
                local p = cmd:spawn{Position = {x = 7}}
                assert.are.equal(1, tag_of(p) % 2, "a host tag is odd, a mod's even")
                assert.are.equal(1, cmd:apply(world))
                assert.is_true(world:is_alive(cmd:resolved(p)))
            end
        end)
    end)

    it("a host spawning past its last tag goes round, old placeholders still refused", function()
        with_counters({["kiln.tags"] = LAST_HOST - 4}, function()
            local w = H.world()
            local cmd = kiln.commands()
            local seen, last = {}, nil
            for round = 1, 6 do -- takes LAST_HOST - 2, LAST_HOST, then 1, 3, 5, 7
                local p = cmd:spawn{Position = {x = round}}
                assert.is_nil(seen[tag_of(p)], "tag " .. tag_of(p) .. " twice")
                seen[tag_of(p)] = true
                assert.are.equal(1, tag_of(p) % 2)
                assert.is_true(-p < 2 ^ 53, "exact as a LuaJIT number")
                if last then
                    H.raises(function() cmd:despawn(last) end, "is not from this buffer's current batch")
                    H.raises(function() cmd:resolved(last) end, "is not a placeholder of this batch")
                end
                assert.are.equal(1, cmd:apply(w))
                assert.is_true(w:is_alive(cmd:resolved(p)))
                last = p
            end
            assert.is_true(seen[LAST_HOST] and seen[1], "went round")
        end)
    end)
end)
