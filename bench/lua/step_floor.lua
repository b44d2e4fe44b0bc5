-- bench/lua/step_floor.lua: what the shapes of a q:each() step cost with no kiln work in them,
-- so the floor of a design can be told from its overheads. Plain Lua 5.4, no kiln.
--
-- Usage: lua5.4 bench/lua/step_floor.lua MODE [FRAMES]   (ms per frame of 100k rows on stderr)
--   tables  the lua_each baseline: a numeric for over a table per entity
--   closure a Lua iterator closure per row, no C call (the generic for's own price)
--   call    the closure calls a C function with 4 field values and gets 7 values back
--   fill    the same, then stores 4 fields into the views: q:each()'s step with an empty C side
--   cnext   the generic for calls a C iterator (next) directly, no Lua closure
-- Instructions: run it under valgrind --tool=callgrind for two frame counts and subtract
-- (bench/lua/profile.sh's method), as docs/performance.md does.
local N = tonumber(os.getenv("KILN_BENCH_ENTITIES") or "") or 100000
local mode, frames = arg[1], tonumber(arg[2] or "20")
local P, V = { x = 1, y = 2 }, { x = 3, y = 4 }
local T = {}
for i = 1, N do T[i] = P end
local dt = 1 / 60
local select = select

local function iterator()
    local i = 0
    if mode == "closure" then
        return function()
            i = i + 1
            if i > N then return nil end
            return i, P, V
        end
    elseif mode == "call" then
        return function()
            local e, _, _, _, _, _, _ = select(1, i + 1, P.x, P.y, V.x, V.y, 1, 2)
            i = e
            if i > N then return nil end
            return i, P, V
        end
    elseif mode == "fill" then
        return function()
            local e, a, b, c, d, _, _ = select(1, i + 1, P.x, P.y, V.x, V.y, 1, 2)
            i = e
            if i > N then return nil end
            P.x = a P.y = b V.x = c V.y = d
            return i, P, V
        end
    end
    error("step_floor.lua: unknown mode '" .. tostring(mode) .. "'")
end

local t0 = os.clock()
for _ = 1, frames do
    if mode == "tables" then
        for i = 1, N do
            local p, v = T[i], V
            p.x = p.x + v.x * dt
            p.y = p.y + v.y * dt
        end
    elseif mode == "cnext" then
        local v = V
        for _, p in next, T do
            p.x = p.x + v.x * dt
            p.y = p.y + v.y * dt
        end
    else
        for _, p, v in iterator() do
            p.x = p.x + v.x * dt
            p.y = p.y + v.y * dt
        end
    end
end
io.stderr:write(string.format("%s: %.3f ms/frame\n", mode, (os.clock() - t0) * 1e3 / frames))
