-- shield_hud: a mod that depends on shield and reads its exports: every three simulated
-- seconds it reports how much damage the shields absorbed, asking shield's own code.
local shield = mod.import("shield") -- a copy of shield's mod.exports
local format = require("format")    -- format.lua, beside this file in the mod's folder

local frame = 0
world:system{
    name = "shield_hud",
    after = {"shields"},
    run = function(world, dt)
        frame = frame + 1
        if frame % (3 * game.rate) == 0 then
            local s = shield.stats() -- runs in shield's state, under shield's budget
            print(format.report(math.floor(frame / game.rate), s.hits, s.absorbed, shield.capacity))
        end
    end,
}
print(string.format("[shield_hud] loaded: watching shields of %d", shield.capacity))
