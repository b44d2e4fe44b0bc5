-- bench/lua/mixed_rules.lua: the Lua half of mixed_frame: gameplay rules on the entities with
-- Health as a Lua system, and the whole frame again over plain Lua tables, on the same numbers.
--
-- Run by bench/lua/mixed_host.c with the host's world as its argument; returns
-- { baseline = function(dt), entities = n, ruled = m }.
local world = ...

local ARENA2 = 150 * 150 -- squared radius of the arena

-- The rules: outside the arena an entity takes damage and counts the hit; inside it heals,
-- capped at 100. The same function serves the kiln system (views) and the baseline (tables).
local function rules(_, p, h, dt)
    if p.x * p.x + p.y * p.y > ARENA2 then
        h.hp = h.hp - 10 * dt
        h.hits = h.hits + 1
    elseif h.hp < 100 then
        h.hp = math.min(100, h.hp + dt)
    end
end

world:system {
    name = "rules",
    reads = { "Position" },
    writes = { "Health" },
    query = { "Position", "Health" },
    each = rules,
}

-- The baseline world as a pure-Lua program would hold it: a table per component value,
-- copied from the kiln world so both frames compute on the same numbers.
local P, V, RP, RH = {}, {}, {}, {}
do
    local pos, vel, ruled = {}, {}, {}
    local n = 0
    for _, p, v, h in world:query { "Position", "Velocity", optional = { "Health" } }:each() do
        n = n + 1
        pos[n], vel[n] = { p.x, p.y }, { v.x, v.y }
        if h then ruled[#ruled + 1] = { n, h.hp, h.hits } end
    end
    collectgarbage("collect")
    for i = 1, n do
        P[i] = { x = pos[i][1], y = pos[i][2] }
        V[i] = { x = vel[i][1], y = vel[i][2] }
    end
    for k, r in ipairs(ruled) do
        RP[k], RH[k] = P[r[1]], { hp = r[2], hits = r[3] }
    end
    pos, vel, ruled = nil, nil, nil
    collectgarbage("collect")
end

local n, m = #P, #RP

local function baseline(dt)
    for i = 1, n do
        local p, v = P[i], V[i]
        p.x = p.x + v.x * dt
        p.y = p.y + v.y * dt
    end
    for k = 1, m do rules(nil, RP[k], RH[k], dt) end
end

return { baseline = baseline, entities = n, ruled = m }
