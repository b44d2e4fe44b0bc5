-- shield.lua: a mod for the asteroid game: every ship gets an energy shield that absorbs the
-- damage of its collisions until drained, then recharges. Uses only the public Lua API.
--
-- Load it with `asteroids --mod examples/mods/shield.lua` (or all of examples/mods with
-- --mods). It runs in a sandbox of its own (docs/modding.md); the game grants it a copy of
-- `game`. It brings its own component (Shield) and one system, ordered by name between the
-- rules' impacts (which turns Collision events into Ship.incoming damage) and hull (which
-- takes incoming off the hull). Other mods that depend on it read mod.exports.

local world = world

local CAPACITY = 40   -- damage a full shield absorbs
local RECHARGE = 8    -- per second
local REPORT_EVERY = 2 * game.rate

world:component("Shield", "float charge; float capacity; float recharge;")

local unshielded = world:query{"Ship", without = {"Shield"}}
local shields = world:query{"Shield"}

local frame, hits, absorbed = 0, 0, 0

world:system{
    name = "shields",
    after = {"impacts"},
    before = {"hull"},
    writes = {"Ship", "Shield"},
    run = function(world, dt)
        frame = frame + 1
        -- Absorb: only this frame's collisions (events stay readable for a second frame), and
        -- each ship once, since impacts already summed its hits into incoming.
        local tick, seen = world:tick(), {}
        for hit in world:events("Collision") do
            -- world:is_alive: another mod may have despawned the ship since collide
            if hit.tick == tick and not seen[hit.ship] and world:is_alive(hit.ship) then
                seen[hit.ship] = true
                local shield = world:get(hit.ship, "Shield") -- nil: fitted this frame, or removed
                local ship = world:get(hit.ship, "Ship")
                local taken = shield and ship and math.min(ship.incoming, shield.charge) or 0
                if taken > 0 then
                    world:set(hit.ship, "Ship", {incoming = ship.incoming - taken})
                    world:set(hit.ship, "Shield", {charge = shield.charge - taken})
                    hits, absorbed = hits + 1, absorbed + taken
                end
            end
        end
        -- Recharge every shield.
        local up = 0
        for _, shield in shields:each() do
            shield.charge = math.min(shield.capacity, shield.charge + shield.recharge * dt)
            if shield.charge > 0 then up = up + 1 end
        end
        -- Fit new ships; the adds land when this system's stage ends.
        for e in unshielded:each() do
            world:add(e, "Shield", {charge = CAPACITY, capacity = CAPACITY, recharge = RECHARGE})
        end
        if frame % REPORT_EVERY == 0 then
            print(string.format("[shield] %ds: %d shields up, %d hits absorbed (%.0f damage)",
                                math.floor(frame / game.rate), up, hits, absorbed))
        end
    end,
}

-- What mods depending on this one can read (mod.import "shield"): plain values are copied,
-- functions are called across, in this mod's state and under its budget.
mod.exports.capacity = CAPACITY
mod.exports.recharge = RECHARGE
function mod.exports.stats() return {hits = hits, absorbed = absorbed} end

print(string.format("[shield] loaded: ships get shields of %d that recharge %d per second",
                    CAPACITY, RECHARGE))
