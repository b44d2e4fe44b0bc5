-- bulk_spec.lua: q:bulk's arrays of float-only terms, kept from call to call: every call sees
-- what the columns hold, whatever changed between calls, whatever fn kept, whenever a call raised.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- Asserts that a call of q (Position, Velocity) hands fn exactly the world's values, row by row.
local function sees_world(w, q)
    local rows = 0
    q:bulk(function(n, ents, p, v)
        for i = 1, n do
            local wp, wv = w:get(ents[i], "Position"), w:get(ents[i], "Velocity")
            local want, got = {wp.x, wp.y, wv.x, wv.y}, {p.x[i], p.y[i], v.x[i], v.y[i]}
            for k = 1, 4 do -- NaN for NaN; -0 and 0 told apart
                if want[k] == want[k] or got[k] == got[k] then
                    assert.are.equal(want[k], got[k], "row " .. i .. ", value " .. k)
                    assert.are.equal(1 / want[k] < 0, 1 / got[k] < 0, "row " .. i .. ", value " .. k)
                end
            end
            if not H.luajit then assert.are.equal("float", math.type(p.x[i])) end
        end
        rows = rows + n
    end)
    assert.are.equal(q:count(), rows)
end

local function move(n, _, p, v, dt)
    for i = 1, n do
        p.x[i] = p.x[i] + v.x[i] * dt
        p.y[i] = p.y[i] + v.y[i] * dt
    end
end

describe("q:bulk's kept arrays", function()
    it("hand every call the columns' values when rows, archetypes and values change between calls", function()
        local w = H.world()
        local es = {}
        for i = 1, 1200 do es[i] = w:spawn{Position = {x = i, y = -i}, Velocity = {x = i / 3, y = 0.25}} end
        local q = w:query{"Position", "Velocity"}
        q:bulk(move, 0.1)
        sees_world(w, q)
        for i = 1, 1200, 7 do w:despawn(es[i]) end                       -- rows move up
        for i = 2, 1200, 5 do if w:is_alive(es[i]) then w:add(es[i], "Frozen") end end -- a new archetype
        for i = 1, 50 do w:spawn{Position = {x = -i}, Velocity = {x = 1}} end
        w:set(es[3], "Position", {x = 12345.5})                          -- a value set between calls
        sees_world(w, q)
        q:bulk(move, 0.5)
        sees_world(w, q)
        w:query{"Position"}:bulk(function(n, _, p) for i = 1, n do p.y[i] = 7.25 end end) -- another query
        sees_world(w, q)
    end)

    it("hand the columns' values to calls that start and stop writing a term, with changes between", function()
        local w = H.world()
        local es = {}
        for i = 1, 900 do es[i] = w:spawn{Position = {x = i / 7, y = i}, Velocity = {x = i / 9, y = -1}} end
        local q = w:query{"Position", "Velocity"}
        for round = 1, 8 do
            if round % 3 == 1 then q:bulk(move, 0.25) end             -- writes Position
            if round % 4 == 2 then                                    -- writes Velocity
                q:bulk(function(n, _, _, v) for i = 1, n do v.y[i] = v.y[i] * 2 + 0.1 end end)
            end
            w:set(es[round * 50], "Position", {x = -round - 0.5})     -- between calls
            w:set(es[round * 60], "Velocity", {y = round + 0.5})
            sees_world(w, q)
        end
    end)

    it("give fn the float the column stores, not the double or integer fn wrote", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1.5, y = 2}, Velocity = {}}
        local q = w:query{"Position", "Velocity"}
        q:bulk(function() end) -- writes nothing: the next call has kept arrays
        q:bulk(function(_, _, p) p.x[1] = 0.1; p.y[1] = 2 end) -- 0.1 is no float; 2 an integer
        for _ = 1, 2 do -- the first call after a write fills afresh, the second has the kept arrays
            local x, y
            q:bulk(function(_, _, p) x, y = p.x[1], p.y[1] end)
            assert.are.equal(w:get(e, "Position").x, x)
            assert.are_not.equal(0.1, x)
            assert.are.equal(2, y)
            if not H.luajit then assert.are.equal("float", math.type(y)) end
        end
    end)

    it("store NaN, -0, infinities and integral doubles as floats, and refuse a float out of range", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1.5, y = 2.5}, Velocity = {x = 0.5, y = 0.5}}
        local q = w:query{"Position", "Velocity"}
        local cases = {{0 / 0, 0.5}, {-0.0, 1 / 0}, {-1 / 0, 2 ^ 24 + 1}, {0.0, 3}}
        for _, c in ipairs(cases) do
            q:bulk(function(_, _, p, v) p.x[1], p.y[1] = c[1], c[2]; v.x[1] = c[2] end)
            sees_world(w, q)
            local p = w:get(e, "Position")
            if c[1] ~= c[1] then assert.is_true(p.x ~= p.x) else assert.are.equal(c[1], p.x) end
            assert.are.equal(1 / c[1] < 0, 1 / p.x < 0) -- -0 stays -0, 0 stays 0
            if c[2] == 2 ^ 24 + 1 then assert.are.equal(16777216.0, w:get(e, "Velocity").x) end
        end
        H.unchanged(w, {"Position"}, function()
            q:bulk(function(_, _, p) p.y[1] = 3.5e38 end)
        end, "bulk", "Position.y", "out of range for float")
        sees_world(w, q)
    end)

    it("keep a world:set made inside fn, and show it to the next call", function()
        local w = H.world()
        local a = w:spawn{Position = {x = 1}, Velocity = {x = 1}}
        local b = w:spawn{Position = {x = 2}, Velocity = {x = 1}}
        local q = w:query{"Position", "Velocity"}
        local first, other
        q:bulk(function(_, ents, p)
            first = ents[1]
            other = first == a and b or a
            w:set(other, "Position", {x = 40}) -- on a row whose arrays fn leaves alone
            p.y[1] = 3
        end)
        assert.are.equal(40.0, w:get(other, "Position").x)
        assert.are.equal(3.0, w:get(first, "Position").y)
        sees_world(w, q)
    end)

    it("hand the next call the columns after fn raised halfway, and write nothing of that block", function()
        local w = H.world()
        for i = 1, 700 do w:spawn{Position = {x = i}, Velocity = {x = 1}} end
        local q = w:query{"Position", "Velocity"}
        q:bulk(move, 1)
        local before = H.snapshot(w, {"Position"})
        H.raises(function()
            q:bulk(function(n, _, p) for i = 1, n do p.x[i] = -1 end error("halfway") end)
        end, "halfway")
        sees_world(w, q)
        H.unchanged(w, {"Position"}, function()
            q:bulk(function(n, _, p) for i = 1, n do p.x[i] = -1 end p.y[n] = "bad" end)
        end, "bulk", "Position.y")
        assert.are.equal(before, H.snapshot(w, {"Position"}))
        sees_world(w, q)
    end)

    it("check what a caller stores into an array it kept past its call, as the next call's write", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1}, Velocity = {x = 1}}
        local q = w:query{"Position", "Velocity"}
        local kept
        q:bulk(function() end) -- a call that writes nothing: from the next call on the arrays are kept
        q:bulk(function(_, _, p) kept = p.x end)
        kept[1] = "bad"                       -- after the call: misuse, caught by the next one
        H.unchanged(w, {"Position"}, function() q:bulk(function() end) end, "bulk", "Position.x", H.entity_str(e))
        sees_world(w, q)                      -- refilled after the error
        q:bulk(function(_, _, p) kept = p.x end)
        kept[1] = 1e300
        H.unchanged(w, {"Position"}, function() q:bulk(function() end) end, "out of range for float")
        sees_world(w, q)
    end)

    it("refill a read-only term's arrays, so what fn wrote into them never reaches a later call", function()
        local w = H.world()
        for i = 1, 3 do w:spawn{Position = {x = i}, Velocity = {x = i}} end
        local q = w:query{"Position", "Velocity"}
        w:system{name = "scribble", reads = {"Velocity"}, writes = {"Position"}, run = function()
            q:bulk(function(n, _, _, v) for i = 1, n do v.x[i] = 999 end end)
        end}
        assert(w:progress(0))
        assert(w:progress(0))
        sees_world(w, q)
        for _, e in ipairs(w:entities()) do assert.are_not.equal(999.0, w:get(e, "Velocity").x) end
    end)

    it("serve more blocks than it keeps (past 256 blocks of 512 rows) with the right values", function()
        local w = H.world()
        for i = 1, 257 * 512 + 3 do w:spawn{Position = {x = i % 1000}, Velocity = {x = 0.5}} end
        local q = w:query{"Position", "Velocity"}
        q:bulk(move, 1)
        q:bulk(move, 1)
        local bad = 0
        q:bulk(function(n, ents, p)
            for i = 1, n do
                if p.x[i] ~= w:get(ents[i], "Position").x then bad = bad + 1 end
            end
        end)
        assert.are.equal(0, bad)
    end)
end)

describe("q:bulk's hold on the thread that called it", function()
    -- Runs fn in a coroutine to its end and returns the (weakly held) coroutine.
    local function ran_in(threads, fn)
        local co = coroutine.create(fn)
        coroutine.resume(co)
        assert.are.equal("dead", coroutine.status(co))
        threads[co] = true
    end

    it("ends with the call: a coroutine that called it and ended is collected, returned or raised", function()
        local w = H.world()
        for i = 1, 5 do w:spawn{Position = {x = i}, Velocity = {x = 1}} end
        local q = w:query{"Position", "Velocity"}
        for _, fn in ipairs{function() q:bulk(move, 1) end, function() q:bulk(function() error("boom") end) end} do
            local threads = setmetatable({}, {__mode = "k"})
            ran_in(threads, fn)
            collectgarbage("collect")
            collectgarbage("collect")
            assert.is_nil(next(threads), "a coroutine that ran q:bulk is still held")
            assert.is_true(H.not_deferred(w))
            sees_world(w, q) -- and the query runs on
        end
    end)
end)
