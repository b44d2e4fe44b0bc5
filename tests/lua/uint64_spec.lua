-- uint64_spec.lua: a uint64 field past 2^63 - 1 reads as the integer of the same 64 bits (a
-- negative one), and every path that takes a value back (set, spawn, saves, printing) keeps them.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- The JSON text of each value, the integer world:get reads it as (under LuaJIT, a double:
-- 2^63 - 1 rounds to 2^63 there, as any int64 past 2^53 does, so no number names it: it is
-- only loaded and read) and what kiln.pretty shows.
local cases = {
    {json = "9223372036854775807", int = H.luajit and 2^63 or math.maxinteger,
     shown = not H.luajit and "9223372036854775807" or nil, unnamed = H.luajit},
    {json = '"9223372036854775808"', int = -2^63, shown = not H.luajit and "math.mininteger" or nil},
    {json = '"18446744073709551615"', int = -1, shown = "-1"},
}

local function world()
    local w = H.world()
    w:component("Big", "uint64_t u;")
    return w
end

local function json_of(w) return w:save(nil, {format = "json"}):match('"u": ([^,}%s]+)') end

describe("a uint64 field past 2^63 - 1", function()
    for _, case in ipairs(cases) do
        it("round-trips " .. case.json .. " through get, set, spawn, printing and both saves", function()
            local w = world()
            local e = w:spawn{Big = {u = case.unnamed and 0 or case.int}}
            if not case.unnamed then
                assert.are.equal(case.int, w:get(e, "Big").u)
                assert.are.equal(case.json, json_of(w))
                w:set(e, "Big", {u = 0})
                w:set(e, "Big", {u = case.int})
                assert.are.equal(case.int, w:get(e, "Big").u)
                w:set(e, "Big", w:get(e, "Big")) -- what get read, set takes back as the same bits
                assert.are.equal(case.int, w:get(e, "Big").u)
            end
            -- loaded from JSON text that holds the exact value, then saved both ways and loaded again
            local text = w:save(nil, {format = "json"}):gsub('("u": )[^,}%s]+', "%1" .. case.json, 1)
            local loaded = world()
            loaded:load(text)
            local le = loaded:query{"Big"}:entities()[1]
            assert.are.equal(case.int, loaded:get(le, "Big").u)
            if case.shown then
                assert.are.equal(case.shown, kiln.pretty(loaded:get(le, "Big").u))
                assert.truthy(loaded:inspect(le):find("u = " .. case.shown, 1, true), loaded:inspect(le))
            end
            assert.are.equal(case.json, json_of(loaded))
            local again = world()
            again:load(loaded:save())
            assert.are.equal(case.json, json_of(again))
            assert.are.equal(case.int, again:get(again:query{"Big"}:entities()[1], "Big").u)
        end)
    end

    it("may be given as a float from 2^63 to below 2^64, and no float past it", function()
        local w = world()
        local e = w:spawn{Big = {u = 2^63}}
        assert.are.equal('"9223372036854775808"', json_of(w))
        w:set(e, "Big", {u = 2^64 - 2^11}) -- the largest double below 2^64
        assert.are.equal('"18446744073709549568"', json_of(w))
        H.unchanged(w, {"Big"}, function() w:set(e, "Big", {u = 2^64}) end, "world:set", "'u'", "integer")
        assert.are.equal('"18446744073709549568"', json_of(w))
    end)
end)
