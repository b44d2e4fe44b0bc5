-- bench/lua/spawn_floor.lua: what `world:spawn{Position = {...}, Velocity = {...}}` costs a
-- script before kiln reads anything, so the spawn goals' floor can be told from kiln's work.
--
-- Usage: LUA_CPATH="build-bench/lua/?.so" lua5.4 bench/lua/spawn_floor.lua
--        LUA_CPATH="build-bench-jit/lua/?.so" luajit bench/lua/spawn_floor.lua
-- Each line is ns per operation, the median of 21 alternating samples of 100k operations:
--   empty       world:count(), the empty method call (the spawn cases' baseline)
--   tables      world:count(init): the three init tables made and handed to a C method that
--               ignores them (the collector's share included)
--   tables_next the same, and the nine next() calls that walk them (the walk a spawn needs
--               to refuse an unknown key; LuaJIT's FFI spawn makes exactly these calls)
--   spawn       world:spawn(init) itself, into a fresh world each sample, as lua_spawn does
local kiln = require "kiln"
local measure = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "measure.lua")

local N = tonumber(os.getenv("KILN_BENCH_ENTITIES") or "") or 100000
local REPEATS = 21
local clock, next = os.clock, next

local function new_world()
    local w = kiln.world()
    w:component("Position", "float x, y;")
    w:component("Velocity", "float x, y;")
    return w
end

local base = new_world()

local function empty()
    local t0 = clock()
    for _ = 1, N do base:count() end
    return clock() - t0
end

local function tables()
    local t0 = clock()
    for i = 1, N do base:count { Position = { x = i, y = -i }, Velocity = { x = 1, y = 0.5 } } end
    return clock() - t0
end

local walked = 0
local function tables_next()
    local t0 = clock()
    for i = 1, N do
        local init = { Position = { x = i, y = -i }, Velocity = { x = 1, y = 0.5 } }
        base:count(init)
        local name, value = next(init)
        while name ~= nil do
            local field = next(value)
            while field ~= nil do field = next(value, field) end
            walked = walked + 1
            name, value = next(init, name)
        end
    end
    return clock() - t0
end

local function spawn()
    local w = new_world()
    collectgarbage("collect")
    local t0 = clock()
    for i = 1, N do w:spawn { Position = { x = i, y = -i }, Velocity = { x = 1, y = 0.5 } } end
    local t1 = clock()
    assert(w:count() == N, "spawn_floor: wrong entity count")
    w:close()
    return t1 - t0
end

local scale = 1e9 / N
local cases = { { "tables", tables }, { "tables_next", tables_next }, { "spawn", spawn } }
print(string.format("spawn_floor: %s, %d operations a sample, medians of %d alternating samples",
    jit and jit.version or _VERSION, N, REPEATS))
for _, case in ipairs(cases) do
    local s, b = measure.compare(REPEATS, case[2], empty, scale)
    print(string.format("%-12s %8.1f ns  (empty call %.1f ns)", case[1], s, b))
end
assert(walked > 0)
base:close()
