-- commands_spawn.lua: records N spawn commands of three plain components (none with entity
-- fields; "linked" adds one to the world, unused) and applies them; for callgrind counts.
-- Usage: LUA_CPATH="build/lua/?.so;;" valgrind --tool=callgrind lua5.4 bench/lua/commands_spawn.lua [N] [linked]
-- Instructions per spawn record: (count at N - count at 0) / N.
local kiln = require "kiln"
local n = tonumber(arg[1]) or 100000
local w = kiln.world()
w:component("Position", "float x, y;")
w:component("Velocity", "float x, y;")
w:component("Health", "int32_t hp;")
if arg[2] == "linked" then w:component("Target", "entity who; float range;") end
local cmd = kiln.commands()
for i = 1, n do
    cmd:spawn{Position = {x = i, y = 1}, Velocity = {x = 0, y = 1}, Health = {hp = 3}}
end
assert(cmd:apply(w) == n)
