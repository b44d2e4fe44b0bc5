-- mods_isolation_spec.lua: what a hostile mod can do to the other parties of the world (the
-- host, other mods) rather than to the host's CPU, found by a second red-team pass. Each case
-- is a mod that got past a per-frame or per-mod book before its fix.
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

describe("an isolated mod", function()
    after_each(M.cleanup)

    it("cannot advance the world's tick, which its per-frame books are kept by", function()
        -- its events were counted against world_memory per tick: emitting up to the limit,
        -- advancing the tick and emitting again held 256 MiB for a 1 MiB limit; an exclusive
        -- system advancing it got a fresh frame_instructions budget each time
        local w, mods = M.host{world_memory = 1 << 20}
        local before = w:stats().bytes
        assert(mods:load(M.write(M.folder(), "ticker.lua", [[
world:event("Big", "uint8_t pad[65536];")
local emitted, advanced = 0, 0
for _ = 1, 40 do
    for _ = 1, 15 do
        if pcall(world.emit, world, "Big") then emitted = emitted + 1 end
    end
    if pcall(world.advance_tick, world) then advanced = advanced + 1 end
end
print(emitted, advanced, select(2, pcall(world.advance_tick, world)))
world:system{name = "ticker_sys", exclusive = true, run = function()
    print("system", pcall(world.advance_tick, world))
end}
]])))
        local log = mods:log("ticker")
        assert.are.equal("16\t0\tworld:advance_tick: the host advances the tick", log[1]) -- 16 x 64 KiB: 1 MiB
        assert.is_true(w:stats().bytes - before < (1 << 20) + (256 << 10), tostring(w:stats().bytes - before))
        assert.are.equal(1, w:tick())
        M.frames(w, 1)
        assert.are.equal(2, w:tick())
        assert.are.equal("system\tfalse\tworld:advance_tick: the host advances the tick", mods:log("ticker")[2])
    end)
end)
