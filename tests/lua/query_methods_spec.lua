-- query_methods_spec.lua: every Query and World method names itself in its errors, however
-- it is called (q:m(x), q.m(x), q[m](x), a local copy), so a mistake points at the method.
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- A world with n entities of Position.
local function movers(n)
    local w = H.world()
    for i = 1, n do w:spawn{Position = {x = i, y = -i}} end
    return w
end

describe("Query methods", function()
    -- Every method of the class, read from its metatable (LuaJIT's pairs ignores the public
    -- view's __pairs, so the real table is read through the debug library).
    local function methods(q)
        local names = {}
        for name, fn in pairs(debug.getmetatable(q).__index) do
            if type(fn) == "function" then names[#names + 1] = name end
        end
        table.sort(names)
        return names
    end

    it("name themselves on a bad self however they are called: q.m(x), q[m](x), a local copy", function()
        local w = movers(1)
        local q = w:query{"Position"}
        local names = methods(q)
        local has = {}
        for _, m in ipairs(names) do has[m] = true end
        for _, m in ipairs{"bulk", "count", "each", "entities", "terms"} do assert.is_true(has[m], "no method " .. m) end
        for _, m in ipairs(names) do
            local want = "calling 'query:" .. m .. "' on bad self (kiln.Query expected, got "
            H.raises(function() q[m](5) end, want .. "number)")
            H.raises(function() local f = q[m]; f({}) end, want .. "table)")
            H.raises(function() local f = q[m]; f(w) end, want .. "kiln.World)")
        end
        assert.is_true(H.not_deferred(w))
    end)

    it("name themselves on a bad argument however they are called", function()
        local w = movers(1)
        local q = w:query{"Position"}
        local bad = {entities = {"x", "limit (integer >= 0) expected, got string"},
                     bulk = {5, "function expected, got number"}}
        for m, case in pairs(bad) do
            local want = "bad argument #1 to 'query:" .. m .. "' (" .. case[2] .. ")"
            H.raises(function() q[m](q, case[1]) end, want)
            H.raises(function() local f = q[m]; f(q, case[1]) end, want)
        end
        assert.is_true(H.not_deferred(w))
    end)

    it("refuse an argument to the loops, which visited nothing given q:each(fn)", function()
        local w = movers(2)
        local q = w:query{"Position"}
        for _, m in ipairs{"each", "each_ffi"} do
            local want = "bad argument #1 to 'query:" .. m .. "' (no argument expected, got function: " ..
                "a function run per row is an each system's, or q:bulk(fn)'s)"
            H.raises(function() q[m](q, function() end) end, want)
            H.raises(function() for _ in q[m](q, 5) do end end, "bad argument #1 to 'query:" .. m .. "'")
            local n = 0
            for _ in q[m](q, nil) do n = n + 1 end -- nil is no argument
            assert.are.equal(2, n)
        end
        assert.is_true(H.not_deferred(w))
    end)
end)

describe("World methods", function()
    it("name themselves on a bad self however they are called: w.m(x), w[m](x), a local copy", function()
        local w = movers(1)
        local names = {}
        for name, fn in pairs(debug.getmetatable(w).__index) do
            -- the C methods (those written in Lua, e.g. world:inspect, check self their own way)
            if type(fn) == "function" and debug.getinfo(fn, "S").what == "C" then names[#names + 1] = name end
        end
        table.sort(names)
        assert.is_true(#names > 30, "only " .. #names .. " C methods found")
        for _, m in ipairs(names) do
            local want = "calling 'world:" .. m .. "' on bad self (kiln.World expected, got "
            H.raises(function() w[m](5) end, want .. "number)")
            H.raises(function() local f = w[m]; f({}) end, want .. "table)")
        end
        assert.is_true(H.not_deferred(w))
    end)
end)
