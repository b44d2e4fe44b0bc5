-- writeback_spec.lua: a row of q:each() and a block of q:bulk are written back whole or not at
-- all: a bad value anywhere in them leaves every term as it was, values and stamps alike.
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

local movers = H.movers_mixed -- n movers, a frozen one, one with Position only

-- Asserts that a call of q (Position, Velocity) hands fn exactly the world's values.
local function sees_world(w, q)
    local rows = 0
    q:bulk(function(n, ents, p, v)
        for i = 1, n do
            local wp, wv = w:get(ents[i], "Position"), w:get(ents[i], "Velocity")
            assert.are.same({wp.x, wp.y, wv.x, wv.y}, {p.x[i], p.y[i], v.x[i], v.y[i]}, "row " .. i)
        end
        rows = rows + n
    end)
    assert.are.equal(q:count(), rows)
end

describe("q:each()'s write-back of a row", function()
    -- A row is written back whole or not at all: a bad value in a later term keeps an earlier
    -- term's change out, values and stamps alike (FFI views write each field at once).
    it("a bad value in a later term writes nothing of the row, the earlier term's change included", function()
        if H.ffi_each then return end
        local w, es = movers(2)
        w:component("Label", "char s[8];")
        w:add(es[2], "Label", {s = "a"})
        w:advance_tick()
        local q = w:query{"Position", "Velocity", without = {"Frozen"}} -- the float-only step
        for _, bad in ipairs{"3", 1e39, false} do
            H.unchanged(w, nil, function()
                for _, p, v in q:each() do
                    p.x = 50
                    v.y = bad
                end
            end, "query:each", "'y'", "Velocity", H.entity_str(es[1]))
        end
        local wide = w:query{"Position", "Label"} -- the general step: a char field
        H.unchanged(w, nil, function()
            for _, p, l in wide:each() do
                p.y = 60
                l.s = 12
            end
        end, "query:each", "'s'", "Label", H.entity_str(es[2]))
        H.unchanged(w, nil, function() -- left by break: the write-back at the guard's close
            for _, p, v in q:each() do
                p.x = 70
                v.x = "no"
                break
            end
        end, "'x'", "Velocity")
        assert.is_true(H.not_deferred(w))
        w:system{name = "rows", writes = {"Position", "Velocity"}, query = {"Position", "Velocity"},
            each = function(_, p, v) p.x = 80 v.y = {} end}
        local function rows() -- values and stamps (progress moves the world's tick)
            local out = {}
            for _, e in ipairs(es) do
                out[#out + 1] = H.dump(w:get(e, "Position")) .. w:changed_tick(e, "Position") ..
                    H.dump(w:get(e, "Velocity")) .. w:changed_tick(e, "Velocity")
            end
            return table.concat(out, " ")
        end
        local before = rows()
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        local err = failures[1].message
        assert.truthy(err:find("'y' of Velocity", 1, true), err)
        assert.are.equal(before, rows(), err)
    end)


    it("a loop closed with its coroutine, or ended by an inner loop's bad row, writes nothing of its row", function()
        if H.ffi_each then return end
        local w, es = movers(2)
        w:advance_tick()
        local q, inner = w:query{"Position", "Velocity", without = {"Frozen"}}, w:query{"Velocity", "Position"}
        local co = coroutine.create(function()
            for _, p, v in q:each() do
                p.x = 5
                v.x = "oops"
                coroutine.yield()
            end
        end)
        assert.is_true(coroutine.resume(co))
        local before = H.snapshot(w, H.NAMES)
        local ok, err = coroutine.close(co) -- the guard writes the row back: it raises
        assert.is_false(ok)
        assert.truthy(tostring(err):find("'x' of Velocity", 1, true), tostring(err))
        assert.are.equal(before, H.snapshot(w, H.NAMES))
        assert.is_true(H.not_deferred(w))
        H.unchanged(w, nil, function()
            for e, p in q:each() do
                p.y = 40
                for f, v, p2 in inner:each() do
                    if f ~= e then
                        v.y = 41
                        p2.x = {} -- this row's write-back raises: no row of either loop lands
                    end
                end
            end
        end, "query:each", "'x'", "Position")
        assert.is_true(H.not_deferred(w))
    end)
end)

describe("q:bulk's write-back of a block", function()
    -- 700 movers: two blocks (512 rows, then 188), each stamped at tick 1.
    local function blocks()
        local w = H.world()
        local es = {}
        for i = 1, 700 do
            es[i] = w:spawn{Position = {x = i, y = -i}, Velocity = {x = 1, y = 0.5}, Health = {hp = i}}
        end
        w:advance_tick()
        return w, es
    end

    -- The state of rows [from, to]: values and stamps of every component the specs use.
    local function rows(w, es, from, to)
        local out = {}
        for i = from, to do
            for _, name in ipairs{"Position", "Velocity", "Health"} do
                out[#out + 1] = name .. "@" .. w:changed_tick(es[i], name) .. "=" .. H.dump(w:get(es[i], name))
            end
        end
        return table.concat(out, "\n")
    end

    it("writes nothing of a block, values or stamps, when a later term, field or row holds a bad value", function()
        for _, case in ipairs{
            {terms = {"Position", "Velocity"}, bad = function(_, v, n) v.y[n] = "bad" end, want = "Velocity.y[188]"},
            {terms = {"Position", "Velocity"}, bad = function(_, v, n) v.x[n] = 1e39 end, want = "Velocity.x[188]"},
            {terms = {"Position", "Velocity"}, bad = function(p, _, n) p.y[n] = {} end, want = "Position.y[188]"},
            {terms = {"Position", "Health"}, bad = function(_, h, n) h.hp[n] = 0.5 end, want = "Health.hp[188]"},
            {terms = {"Health", "Position"}, bad = function(_, p, n) p.x[n] = false end, want = "Position.x[188]"},
        } do for _, prime in ipairs{false, true} do
            local w, es = blocks()
            local q = w:query(case.terms)
            -- a call that writes nothing: the next keeps its float-only arrays (else shared ones)
            if prime then q:bulk(function() end) end
            local first_block, second_block = rows(w, es, 1, 512), rows(w, es, 513, 700)
            local calls = 0
            H.raises(function()
                q:bulk(function(n, _, a, b)
                    calls = calls + 1
                    for _, term in ipairs{a, b} do -- every float of the block changed, then one bad value
                        for _, arr in pairs(term) do
                            for i = 1, n do arr[i] = arr[i] + 1 end
                        end
                    end
                    if calls == 2 then case.bad(a, b, n) end
                end)
            end, "query:bulk", case.want)
            assert.are_not.equal(first_block, rows(w, es, 1, 512), "the first block was written")
            assert.are.equal(second_block, rows(w, es, 513, 700), "the block that raised changed the world")
            assert.is_true(H.not_deferred(w))
            sees_world(w, w:query{"Position", "Velocity"})
        end end
    end)

    it("stamps only the rows fn changed, and writes only the fields it changed", function()
        local w, es = blocks()
        local at = {}
        for k, e in ipairs(es) do at[e] = k end
        local q = w:query{"Position", "Velocity"}
        q:bulk(function() end)
        w:set(es[600], "Position", {y = 7}) -- between calls: kept arrays see it
        w:advance_tick()
        local now = w:tick()
        q:bulk(function(n, ents, p, v)
            for i = 1, n do
                local k = at[ents[i]]
                if k % 3 == 0 then p.x[i] = p.x[i] + 1 end -- changed
                if k % 3 == 1 then p.x[i] = p.x[i] + 1e-12 end -- the same float: unchanged
                if k == 600 then v.y[i] = 9 end
            end
        end)
        for k, e in ipairs(es) do
            local want = k % 3 == 0 and k + 1 or k
            assert.are.equal(want, w:get(e, "Position").x, "entity " .. k)
            assert.are.equal(k == 600 and 7 or -k, w:get(e, "Position").y, "entity " .. k)
            assert.are.equal(k % 3 == 0 and now or (k == 600 and now - 1 or 1), w:changed_tick(e, "Position"),
                "entity " .. k)
            assert.are.equal(k == 600 and now or 1, w:changed_tick(e, "Velocity"), "entity " .. k)
        end
        assert.are.equal(9, w:get(es[600], "Velocity").y)
    end)

    it("writes nothing of the block when fn yields across the call", function()
        local w, es = blocks()
        local q = w:query{"Position", "Velocity"}
        local before = rows(w, es, 1, 700)
        local co = coroutine.create(function()
            q:bulk(function(n, _, p) for i = 1, n do p.x[i] = -1 end coroutine.yield() end)
        end)
        local ok, err = coroutine.resume(co)
        assert.is_false(ok)
        assert.truthy(tostring(err):find("yield", 1, true), tostring(err))
        assert.are.equal(before, rows(w, es, 1, 700))
        assert.is_true(H.not_deferred(w))
        sees_world(w, q)
    end)
end)

describe("a write-back of 64-bit integer fields", function()
    -- Values a Lua number cannot hand back as they are: a uint64 past 2^63 - 1 (it reads as
    -- negative, as set takes it), an int64 past 2^53 (LuaJIT reads it rounded) and a
    -- NaN's payload (a read quiets a float's, LuaJIT drops any). A loop that leaves them alone
    -- must leave their bits and stamps alone.
    local schema = "uint64_t u; int64_t i; int64_t a[2]; float x; vec3 v; float f[2]; double d"
    local function loaded(values)
        local w = H.world()
        w:component("Big", schema)
        w:spawn{Big = {}}
        local text = w:save(nil, {format = "json"})
        for field, value in pairs(values) do -- a zero, or an array of zeros, replaced
            local zero = value:sub(1, 1) == "[" and "%[[%s0.,]*%]" or "0[.0]*"
            text = text:gsub('("' .. field .. '": )' .. zero, "%1" .. value, 1)
        end
        local loaded_world = H.world()
        loaded_world:component("Big", schema)
        loaded_world:load(text)
        loaded_world:advance_tick()
        return loaded_world, loaded_world:query{"Big"}:entities()[1]
    end
    local function bits(w) return w:save(nil, {format = "json"}):match('"Big": %b{}') end

    -- Loops that change nothing, then loops that change x only: the other fields stay as loaded.
    local function loops_keep(w, e, wanted)
        local want = bits(w)
        for _, text in ipairs(wanted) do assert.truthy(want:find(text, 1, true), want) end
        local q = w:query{"Big"}
        for _ in q:each() do end
        for _, b in q:each() do local _ = b.u + b.i + b.a[1] end
        q:bulk(function() end)
        assert.are.equal(want, bits(w))
        assert.are.equal(1, w:changed_tick(e, "Big"), "a loop that changed nothing stamped the row")
        for _, b in q:each() do b.x = 2 end
        q:bulk(function(_, _, b) b.x[1] = b.x[1] + 1 end)
        assert.are.equal(want:gsub('"x": [%d.]+', '"x": 3.0'), bits(w))
    end

    it("keeps a uint64 past 2^63 - 1 that q:each() and q:bulk were filled with", function()
        local w, e = loaded{u = '"18446744073709551615"'}
        loops_keep(w, e, {'"u": "18446744073709551615"'})
    end)

    it("keeps an int64 past 2^53 that q:each() and q:bulk were filled with", function()
        local w, e = loaded{i = "9007199254740993", a = "[-9007199254740995, 1]"}
        loops_keep(w, e, {'"i": 9007199254740993', "-9007199254740995"})
    end)

    it("keeps the NaN payloads of vector, array and double fields, signalling ones too", function()
        local w, e = loaded{v = '["nan(0x1)", "-nan(0x7fffff)", 0.0]', f = '["-nan(0x2)", "nan(0x400003)"]',
                            d = '"nan(0x4)"'}
        loops_keep(w, e, {'"nan(0x1)"', '"-nan(0x7fffff)"', '"-nan(0x2)"', '"nan(0x400003)"', '"d": "nan(0x4)"'})
    end)
end)
