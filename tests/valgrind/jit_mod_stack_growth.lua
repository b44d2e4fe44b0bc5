-- jit_mod_stack_growth.lua: run under valgrind against the LuaJIT build by
-- scripts/test-valgrind.sh (ASan cannot see into libluajit, where the bad access was).
-- A mod's allocator charges every byte to its budget and, once the budget is spent, sets the
-- count hook to fire at the next instruction. Under LuaJIT the hook setter it called pushed
-- onto the Lua stack, also when the allocation was LuaJIT growing that stack, whose old block
-- realloc had already freed: a write into freed host memory ("Invalid write ... charge_bytes").
-- The mod moves where its budget runs out frame by frame across the stack growth for 7990
-- unpacked values; each frame first shrinks the stack with full collections.
local kiln = require "kiln"
local w = kiln.world()
local mods = kiln.mods(w, {instructions = 1000000, milliseconds = -1})
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir))
local path = dir .. "/sweeper.lua"
local f = assert(io.open(path, "w"))
f:write([[
local START, STEP, frame = 790000, 5000, 0
world:system{name = "sweep", run = function()
    frame = frame + 1
    for _ = 1, 8 do collectgarbage() end
    for _ = 1, START + frame * STEP do end
    local ok = pcall(table.unpack, {}, 1, 7990)
    print(frame, ok)
end}
]])
f:close()
assert(mods:load(path))
local spent, whole = 0, 0
for _ = 1, 40 do
    if w:progress(1 / 60) then whole = whole + 1 else spent = spent + 1 end
end
os.remove(path)
os.remove(dir)
-- the sweep crossed the budget: its first frames ran whole, its last ran out
assert(whole > 0 and spent > 0, string.format("%d frames whole, %d spent", whole, spent))
print(string.format("ok: %d frames whole, %d ran out of budget", whole, spent))
