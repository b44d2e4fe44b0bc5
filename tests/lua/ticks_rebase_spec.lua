-- ticks_rebase_spec.lua: change ticks across the world's tick rebases (rows keep 2-byte ticks
-- counted from a base the world moves forward): exact inside the window, never older outside.
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local H = dofile(here .. "helpers.lua")

-- kiln.h (kiln_row_tick): a rebase happens when the tick is REBASE_AT past the base, and moves
-- the base to WINDOW ticks behind the tick; a row written before the base reads as the base.
local WINDOW, REBASE_AT = 32768, 49152

-- A world of movers (Position, Velocity) and of "old" entities with only Position, the ticks
-- the test wrote their Positions at, and the base the world must hold.
local function scene()
    local w, q, movers = H.movers(24)
    local s = {w = w, q = q, movers = movers, old = {}, truth = {}, base = 0}
    for i = 1, 12 do s.old[i] = w:spawn{Position = {x = i}} end
    for _, e in ipairs(movers) do s.truth[e] = 1 end
    for _, e in ipairs(s.old) do s.truth[e] = 1 end
    return s
end

local function advance(s, n)
    for _ = 1, n do
        local t = s.w:advance_tick()
        if t - s.base >= REBASE_AT then s.base = t - WINDOW end
    end
end

-- Every Position reads the tick it was written at, or the base when that is older.
local function check(s, why)
    local now = s.w:tick()
    for e, t in pairs(s.truth) do
        local got = s.w:changed_tick(e, "Position")
        local want = math.max(t, s.base)
        if got ~= want or (t + WINDOW >= now and got ~= t) then
            error(string.format("%s, tick %d: %s reads %d, written at %d, base %d", why, now,
                                H.entity_str(e), got, t, s.base), 2)
        end
    end
end

-- Writes every mover's Position at the current tick through one of the loop paths.
local writers = {
    each = function(s)
        for _, p in s.q:each() do p.x = p.x + 1 end
    end,
    each_ffi = function(s)
        for _, p in s.q:each_ffi() do p.x = p.x + 1 end
    end,
    bulk = function(s)
        s.q:bulk(function(n, _, p)
            for i = 1, n do p.x[i] = p.x[i] + 1 end
        end)
    end,
}
if H.luajit then
    writers.bulk_ffi = function(s)
        s.q:bulk_ffi(function(n, _, p)
            for i = 0, n - 1 do p[i].x = p[i].x + 1 end
        end)
    end
end
local order = {"each", "each_ffi", "bulk", "bulk_ffi"}

describe("change ticks across tick rebases", function()
    it("read exact inside the window and never older outside it, through loops and set", function()
        local s = scene()
        local step, rebases, last_base = 0, 0, 0
        while s.w:tick() < 240000 do
            step = step + 1
            local name = order[step % #order + 1]
            if writers[name] and step % 5 ~= 0 then
                writers[name](s)
                for _, e in ipairs(s.movers) do s.truth[e] = s.w:tick() end
            end
            -- some old entities are written now and then, the others only at tick 1
            if step % 3 == 0 then
                local e = s.old[step % 6 + 1]
                s.w:set(e, "Position", {x = step})
                s.truth[e] = s.w:tick()
            end
            advance(s, step % 4 == 0 and 9001 or 1 + (step * 37) % 2500)
            if s.base ~= last_base then rebases, last_base = rebases + 1, s.base end
            check(s, "step " .. step .. " after " .. name)
        end
        assert.is_true(rebases >= 10)
        -- the old entities never written again read as the base, newer than they are
        assert.are.equal(s.base, s.w:changed_tick(s.old[12], "Position"))
    end)

    it("give back a snapshot's ticks on restore, after more rebases", function()
        local s = scene()
        advance(s, 70000)
        writers.each(s)
        for _, e in ipairs(s.movers) do s.truth[e] = s.w:tick() end
        advance(s, 300)
        s.w:set(s.old[2], "Position", {x = 5})
        s.truth[s.old[2]] = s.w:tick()
        check(s, "before the snapshot")
        local snap = s.w:snapshot()
        local truth, base, tick = {}, s.base, s.w:tick()
        for e, t in pairs(s.truth) do truth[e] = t end
        advance(s, 130000)
        writers.bulk(s)
        for _, e in ipairs(s.movers) do s.truth[e] = s.w:tick() end
        check(s, "after more rebases")
        s.w:restore(snap)
        s.truth, s.base = truth, base
        assert.are.equal(tick, s.w:tick())
        check(s, "restored")
        advance(s, 60000)
        writers.each_ffi(s)
        for _, e in ipairs(s.movers) do s.truth[e] = s.w:tick() end
        check(s, "restored, then on")
    end)
end)
