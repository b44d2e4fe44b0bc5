-- rules.lua: the asteroid game's rules as Lua systems: waves of mining ships, collision
-- damage, scoring and wrecks. Changes a system makes land at the end of its stage, in order.
--
-- The host (main.c) defines these globals before running this file:
--   world  the kiln.World; the C systems move, orbit, propagate_transforms and collide
--          are already in its schedule
--   mods   the mod manager (kiln.Mods); mods load after this file has run
--   game   constants shared with C: seed, rate (frames per second), field_size,
--          asteroid_radius[size], max_ships (the population cap, --max-ships)
-- Frame order: move, then orbit and collide (which emits Collision events),
-- propagate_transforms and waves, impacts, hull. Each system declares what it runs after:
-- left to declaration order, a mod's before/after could turn it around (a mod system after
-- hull and before waves ran hull first); declared, such a mod system closes a cycle and is
-- refused.

local world, game = world, game

-- A deterministic generator of our own (an LCG), so a mod calling math.random cannot change
-- the waves: state = (state * A + C) mod 2^63, the result the top 52 bits. The state is four
-- 16-bit limbs (lowest first) and every partial sum stays below 2^53, so Lua 5.4's integers
-- and LuaJIT's doubles compute the same sequence.
local LIMB = 65536
local A = {0x7f2d, 0x4c95, 0xf42d, 0x5851} -- 6364136223846793005
local C = {0x814f, 0xf767, 0x7b7e, 0x1405} -- 1442695040888963407
local function limbs(n) -- n below 2^53 (a seed)
    local out = {}
    for i = 1, 4 do
        out[i] = n % LIMB
        n = (n - out[i]) / LIMB
    end
    return out
end
local function next_random(state) -- steps state (four limbs) in place
    local carry, new = 0, {}
    for i = 1, 4 do
        local sum = carry + C[i]
        for j = 1, i do sum = sum + state[j] * A[i - j + 1] end -- below 2^35: exact
        new[i] = sum % LIMB
        carry = (sum - new[i]) / LIMB
    end
    new[4] = new[4] % (LIMB / 2) -- mod 2^63
    for i = 1, 4 do state[i] = new[i] end
    -- the state's top 52 bits (state >> 11), scaled to [0, 1)
    local top = ((new[4] * LIMB + new[3]) * LIMB + new[2]) * 32 + math.floor(new[1] / 2048)
    return top / 4503599627370496
end

-- The waves' frame count and the generator's state live in the world, in a data resource,
-- not in locals of this file: a save (world:save) holds them and world:hash covers them, so
-- a game that loads a save plays on with the waves the saved game would have played.
world:component("Waves", "int32_t frame; int32_t rng[4];")
world:resource("Waves", {frame = 0, rng = limbs(game.seed)})
mods:readonly("Waves") -- mods read it, never change it (the host made Score so)

local FIELD = game.field_size
local RADIUS = game.asteroid_radius
local POINTS = {100, 50, 20}     -- by size: small asteroids are worth more
local DAMAGE = {5, 10, 18}       -- by size: what hitting one does to a ship's hull
local HULL = 150
local SHIP_RADIUS = 2
local SHIP_SPEED = 45
local WAVE_EVERY = 2 * game.rate -- frames between waves
local FRAGMENT_SPEED = 12
-- The population cap: a wave launches only as many ships as keep those alive at max_ships
-- (without it, waves of 20 + 10 * wave ships grew the fleet without bound: 42,750 ships and
-- 7 fps after 12,000 frames). Asteroids need none: a break spawns two of the next size down,
-- so a field never holds more than four times the asteroids it started with.
local MAX_SHIPS = game.max_ships
local INT32_MAX = 2147483647
local SCORE_MAX = {points = 2 ^ 53, damage = math.huge} -- the int32 counts: INT32_MAX

-- Mods cannot change Score and Waves, but the player can from a console (remove them, or
-- write values the rules never make): the rules then skip what they cannot do rather than
-- fail (a failing system is disabled for the rest of the game).
local function add_score(changes)
    local score = world:resource("Score")
    if not score then return end
    for k, v in pairs(changes) do
        local sum = score[k] + v
        if not (sum >= 0 and sum <= (SCORE_MAX[k] or INT32_MAX)) then return end
        score[k] = sum
    end
    world:resource("Score", score)
end

-- Waves: every two seconds a larger wave of ships warps in at random places, up to the cap.
local ships = world:query{"Ship"}
world:system{
    name = "waves",
    after = {"collide"},
    writes = {"Position", "Velocity", "Ship", "Score", "Waves"},
    run = function(world)
        local clock = world:resource("Waves")
        if not clock or not (clock.frame >= 0 and clock.frame < INT32_MAX) then return end
        clock.frame = clock.frame + 1
        world:resource("Waves", {frame = clock.frame})
        if clock.frame % WAVE_EVERY ~= 1 then return end
        local rng = clock.rng
        local function random() return next_random(rng) end
        local score = world:resource("Score")
        if not score or not (score.wave >= 0 and score.wave < INT32_MAX) then return end
        local wave = score.wave + 1
        local count = math.max(0, math.min(20 + 10 * wave, MAX_SHIPS - ships:count()))
        for _ = 1, count do
            local heading = 2 * math.pi * random()
            -- world:spawn inside a system returns the entity now; it comes alive when the
            -- stage ends, together with this system's other changes.
            world:spawn{
                Position = {x = FIELD * random(), y = FIELD * random()},
                Velocity = {x = SHIP_SPEED * math.cos(heading), y = SHIP_SPEED * math.sin(heading)},
                Ship = {radius = SHIP_RADIUS, hull = HULL, incoming = 0, wave = wave},
            }
        end
        world:resource("Waves", {rng = rng})
        add_score{wave = 1, launched = count}
    end,
}

-- The shortest way from one coordinate to another across the wrapped edges.
local function shortest(d)
    if d > FIELD / 2 then return d - FIELD elseif d < -FIELD / 2 then return d + FIELD end
    return d
end

-- Two fragments of the given size flung sideways from the point of impact, clear of the
-- ship, so it does not plough straight into them.
local function spawn_fragments(world, ship_pos, rock_pos, rock_vel, size)
    local dx, dy = shortest(rock_pos.x - ship_pos.x), shortest(rock_pos.y - ship_pos.y)
    local len = math.sqrt(dx * dx + dy * dy)
    if len == 0 then dx, dy, len = 1, 0, 1 end
    local gap = SHIP_RADIUS + RADIUS[size] + 2
    for side = -1, 1, 2 do
        local ox, oy = -dy / len * side, dx / len * side
        local x, y = (ship_pos.x + ox * gap) % FIELD, (ship_pos.y + oy * gap) % FIELD
        world:spawn{
            Position = {x = x, y = y},
            Velocity = {x = rock_vel.x + ox * FRAGMENT_SPEED, y = rock_vel.y + oy * FRAGMENT_SPEED},
            Asteroid = {radius = RADIUS[size], size = size},
            LocalTransform = {position = {x = x, y = y, z = 0}, rotation = {x = 0, y = 0, z = 0, w = 1},
                              scale = {x = 1, y = 1, z = 1}},
        }
    end
end

-- Impacts: each Collision breaks the asteroid (large ones split in two, moons go with their
-- asteroid) and adds damage to the ship's incoming; hull applies it later in the frame.
world:system{
    name = "impacts",
    after = {"waves", "propagate_transforms"},
    reads = {"Parent"}, -- despawn_recursive walks the moons' links
    writes = {"Ship", "Asteroid", "Position", "Velocity", "LocalTransform", "Score"},
    run = function(world)
        -- Events stay readable for two frames; collide ran earlier in this one, so only the
        -- events stamped with this frame's tick are new.
        local tick = world:tick()
        local broken = {}
        local points, destroyed = 0, 0
        for hit in world:events("Collision") do
            -- A mod's system between collide and here may have despawned either one, taken a
            -- component off or written a size of its own: such a collision is skipped.
            local rock = hit.tick == tick and not broken[hit.asteroid] and
                         world:is_alive(hit.asteroid) and world:get(hit.asteroid, "Asteroid")
            local ship = rock and POINTS[rock.size] and world:is_alive(hit.ship) and
                         world:get(hit.ship, "Ship")
            if ship then
                broken[hit.asteroid] = true
                world:set(hit.ship, "Ship", {incoming = ship.incoming + DAMAGE[rock.size]})
                local at, from = world:get(hit.ship, "Position"), world:get(hit.asteroid, "Position")
                local velocity = world:get(hit.asteroid, "Velocity")
                if rock.size > 1 and at and from and velocity then
                    spawn_fragments(world, at, from, velocity, rock.size - 1)
                end
                world:despawn_recursive(hit.asteroid) -- deferred, like the spawns above
                points = points + POINTS[rock.size]
                destroyed = destroyed + 1
            end
        end
        if destroyed > 0 then add_score{points = points, destroyed = destroyed} end
    end,
}

-- Hull: incoming damage comes off the hull; a ship at zero is a wreck and leaves the field.
world:system{
    name = "hull",
    after = {"impacts"},
    writes = {"Ship", "Score"},
    run = function(world)
        local lost, damage = 0, 0
        for e, ship in ships:each() do
            if ship.incoming > 0 then
                ship.hull = ship.hull - ship.incoming
                damage = damage + ship.incoming
                ship.incoming = 0
                if ship.hull <= 0 then
                    world:despawn(e) -- deferred: the loop never sees rows move
                    lost = lost + 1
                end
            end
        end
        if damage > 0 then add_score{lost = lost, damage = damage} end
    end,
}
