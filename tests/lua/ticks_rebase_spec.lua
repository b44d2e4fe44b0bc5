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

-- The same writes, one row (or chunk) and then a yield: a loop a coroutine keeps open. q:bulk
-- calls its function from C, which cannot yield: the loop ends with an error there.
local function yielding(name)
    if name == "each" or name == "each_ffi" then
        return function(s)
            for _, p in s.q[name](s.q) do
                p.x = p.x + 1
                coroutine.yield()
            end
        end
    elseif name == "bulk" then
        return function(s)
            s.q:bulk(function(n, _, p)
                for i = 1, n do p.x[i] = p.x[i] + 1 end
                coroutine.yield()
            end)
        end
    end
    return function(s)
        s.q:bulk_ffi(function(n, _, p)
            for i = 0, n - 1 do p[i].x = p[i].x + 1 end
            coroutine.yield()
        end)
    end
end

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

    it("rebase under a loop a coroutine keeps open, and read its writes never older once it ends", function()
        -- the FFI step keeps the chunk's tick as rows store it: after a rebase its stamps read
        -- later than the loop's tick by the distance the base moved (below base + REBASE_AT);
        -- the other paths read the base through the world and are exact
        for _, name in ipairs(order) do
            local s = scene()
            advance(s, 40000) -- the loop's tick is 40,001 past a base it will not keep
            local t0, before = s.w:tick(), {}
            for e, t in pairs(s.truth) do before[e] = t end
            local co = coroutine.create(yielding(name))
            local ok, err = coroutine.resume(co, s)
            if name == "bulk" then
                assert.is_false(ok)
                assert.matches("yield across", err)
            else
                assert.is_true(ok, err)
                assert.are.equal("suspended", coroutine.status(co))
            end
            advance(s, 70000) -- four rebases: the host neither aborts nor waits
            assert.is_true(s.base > t0)
            while coroutine.status(co) == "suspended" do assert(coroutine.resume(co)) end
            local stale = H.luajit and (name == "each" or name == "each_ffi")
            for _, e in ipairs(s.movers) do
                local got = s.w:changed_tick(e, "Position")
                local low = name == "bulk" and before[e] or t0
                if got < low or got >= s.base + REBASE_AT or (not stale and name ~= "bulk" and got ~= s.base) then
                    error(string.format("%s: %s reads %d, written at %d, base %d", name, H.entity_str(e),
                                        got, t0, s.base))
                end
            end
            -- and the world goes on: the loop is closed, writes read exact
            writers.each(s)
            for _, e in ipairs(s.movers) do s.truth[e] = s.w:tick() end
            advance(s, 20000)
            check(s, name .. " after the suspended loop")
        end
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

    it("run past 2^32 ticks: every loop path and set write exact ticks, and saves keep the tick", function()
        -- the world tick is 64 bits: a load takes it to 2^32 - 3, and it runs on past 2^32
        local s = scene()
        s.w:load('{"kiln":1,"tick":4294967293,"components":[],"entities":[]}')
        assert.are.equal(4294967293, s.w:tick())
        s.base = s.w:tick() - WINDOW
        check(s, "loaded near 2^32")
        for k, name in ipairs(order) do
            if writers[name] then
                writers[name](s)
                for _, e in ipairs(s.movers) do s.truth[e] = s.w:tick() end
            end
            s.w:set(s.old[k], "Position", {x = k})
            s.truth[s.old[k]] = s.w:tick()
            advance(s, 2)
            check(s, name .. " at tick " .. s.w:tick())
        end
        assert.is_true(s.w:tick() > 4294967296)
        assert.are.equal(s.truth[s.old[4]], s.w:changed_tick(s.old[4], "Position"))
        assert.is_true(s.truth[s.old[4]] > 4294967295)
        for _, format in ipairs({"binary", "json"}) do
            local other = H.world()
            other:load(s.w:save{format = format})
            assert.are.equal(s.w:tick(), other:tick())
            assert.are.equal(s.w:hash(), other:hash())
        end
        advance(s, 70000)
        writers.each(s)
        for _, e in ipairs(s.movers) do s.truth[e] = s.w:tick() end
        check(s, "rebased past 2^32")
    end)
end)

