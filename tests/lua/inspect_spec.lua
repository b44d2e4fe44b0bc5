-- inspect_spec.lua: how kiln shows values (kiln.pretty, world:inspect, query:format, the
-- table helpers): numbers that read back exactly, entities only where they are entities,
-- handles that parse back, and argument errors that name the function.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- The message of a failed call.
local function message(f, ...)
    local ok, err = pcall(f, ...)
    assert.is_false(ok, "expected an error")
    return err
end

-- Calls f from a Lua function of this file, so a level-2 error names this file's line.
local function raised_here(f, ...)
    local args = table.pack(...)
    local ok, err = pcall(function()
        local r = f(table.unpack(args, 1, args.n)) -- not a tail call: this line is the caller
        return r
    end)
    assert.is_false(ok, "expected an error")
    return err
end

describe("kiln.pretty numbers", function()
    it("print the shortest text that reads back as the same value", function()
        for _, x in ipairs{12345.678, 0.1, 0.1 + 0.2, 1 / 3, 2 ^ 53, 2 ^ 53 + 2, 1e300, 5e-324, -1.5e-7,
                           123456789.123, 2 ^ 63, -0.0} do
            local text = kiln.pretty(x)
            assert.are.equal(x, load("return " .. text)(), text)
        end
        assert.are.equal("12345.678", kiln.pretty(12345.678))
        assert.are.equal("0.30000000000000004", kiln.pretty(0.1 + 0.2))
    end)

    it("keep integers integers and mark integral floats with .0, as Lua does", function()
        assert.are.equal("5000000000", kiln.pretty(5000000000))
        assert.are.equal("9007199254740992.0", kiln.pretty(2 ^ 53))
        assert.are.equal("5.0", kiln.pretty(10 / 2))
        assert.are.equal("-0.0", kiln.pretty(-0.0))
        assert.are.equal("math.mininteger", kiln.pretty(math.mininteger))
        assert.are.equal(math.mininteger, load("return " .. kiln.pretty(math.mininteger), "=t", "t", {math = math})())
        assert.are.equal(H.number_type(2 ^ 53), H.number_type(load("return " .. kiln.pretty(2 ^ 53))()))
    end)

    it("show infinities and NaN as Lua expressions for them", function()
        assert.are.equal("math.huge", kiln.pretty(1 / 0))
        assert.are.equal("-math.huge", kiln.pretty(-1 / 0))
        assert.are.equal("0/0", kiln.pretty(0 / 0))
        assert.are.equal("{math.huge, 1}", kiln.pretty({1 / 0, 1}))
    end)

    it("show float fields with the digits that read back into the float", function()
        local w = H.world()
        w:component("Body", "float mass; double exact; vec3 dir;")
        local e = w:spawn{Body = {mass = 1.1, exact = 0.1, dir = {x = 0.3, y = 2, z = -1e-3}}}
        assert.are.equal("entity " .. H.entity_str(e) .. " (alive, 1 components)\n" ..
                         "  Body { mass = 1.1, exact = 0.1, dir = (0.3, 2, -0.001) }", w:inspect(e))
        local mass = w:get(e, "Body").mass
        assert.are.equal(H.f32(1.1), mass)
        assert.are.equal(mass, H.f32(tonumber("1.1")))
    end)
end)

describe("entities in printed values", function()
    it("print as 12v3 only when they are live entities of the world", function()
        local w = H.world()
        local a = w:spawn{Frozen = true}
        local b = w:spawn{Frozen = true}
        local ha, hb = H.entity_str(a), H.entity_str(b)
        assert.are.equal("{" .. ha .. ", " .. hb .. "}", kiln.pretty(w:entities(), w))
        assert.are.equal("{target = " .. hb .. "}", kiln.pretty({target = b}, w))
        assert.are.equal("5000000000", kiln.pretty(5000000000, w))
        assert.are.equal(w:inspect(a), kiln.pretty(a, w))
        w:despawn(a)
        assert.are.equal(tostring(a), kiln.pretty(a, w))
        assert.are.equal(tostring(b), kiln.pretty(b)) -- no world: no entity
    end)

    it("in entity fields print as handles, marked when dead, and 0 as 0", function()
        local w = H.world()
        w:component("Link", "entity to; entity none;")
        local target = w:spawn{Frozen = true}
        local e = w:spawn{Link = {to = target}}
        local want = "  Link { to = " .. H.entity_str(target) .. ", none = 0 }"
        assert.truthy(w:inspect(e):find(want, 1, true))
        w:despawn(target)
        assert.truthy(w:inspect(e):find(H.entity_str(target) .. " (dead)", 1, true))
        assert.truthy(w:query{"Link"}:format(w):find(H.entity_str(target) .. " (dead)", 1, true))
    end)

    it("read back with kiln.entity, which also takes a handle", function()
        local w = H.world()
        w:spawn()
        w:despawn(w:spawn())
        local e = w:spawn()
        assert.are.equal(e, kiln.entity(kiln.handle(e)))
        assert.are.equal(e, kiln.entity(e))
        assert.are.equal(12884901900, kiln.entity("12v3"))
        assert.are.equal("12v3", kiln.handle(kiln.entity("12v3")))
        assert.are.equal(0, kiln.entity("0v0"))
        assert.are.equal(4294967296, kiln.entity(4294967296.0))
    end)

    it("that do not parse raise bad argument #1 to 'kiln.entity'", function()
        assert.are.equal([[bad argument #1 to 'kiln.entity' (handle text like "12v3" expected, got "12 v3")]],
                         message(kiln.entity, "12 v3"))
        assert.are.equal("bad argument #1 to 'kiln.entity' (handle \"4294967296v1\" out of range " ..
                         "(index up to 4294967295, generation up to 2097151))", message(kiln.entity, "4294967296v1"))
        assert.truthy(message(kiln.entity, "1v2097152"):find("out of range", 1, true))
        assert.are.equal("bad argument #1 to 'kiln.entity' (entity or handle text expected, got table)",
                         message(kiln.entity, {}))
        assert.are.equal("bad argument #1 to 'kiln.entity' (entity expected, got -1)", message(kiln.entity, -1))
        assert.are.equal("bad argument #1 to 'kiln.entity' (entity expected, got 1.5)", message(kiln.entity, 1.5))
        assert.truthy(message(kiln.entity, 2 ^ 53):find("entity expected", 1, true))
        local long = message(kiln.entity, string.rep("7", 10 * 1024 * 1024))
        assert.is_true(#long < 300, #long)
        assert.truthy(long:find('777..."', 1, true))
    end)
end)

describe("the Lua layer's errors", function()
    it("name the function and the argument, as the binding does", function()
        local w = H.world()
        local q = w:query{"Position"}
        local cases = {
            {"bad argument #1 to 'kiln.handle' (entity expected, got string)", kiln.handle, "1v1"},
            {"bad argument #1 to 'kiln.handle' (entity expected, got -3)", kiln.handle, -3},
            {"bad argument #1 to 'kiln.table_text' (table expected, got nil)", kiln.table_text},
            {"bad argument #2 to 'kiln.table_text' (table expected, got string)", kiln.table_text, {"a"}, "rows"},
            {"bad argument #2 to 'kiln.table_text' (row 2: table expected, got number)", kiln.table_text, {"a"}, {{"x"}, 5}},
            {"bad argument #2 to 'kiln.table_text' (row 1, cell 2: string expected, got table)",
             kiln.table_text, {"a", "b"}, {{"x", {}}}},
            {"bad argument #1 to 'kiln.table_text' (header cell 1: string expected, got boolean)", kiln.table_text, {true}, {}},
            {"bad argument #3 to 'kiln.table_text' (integer expected, got string)", kiln.table_text, {"a"}, {}, "3"},
            {"bad argument #1 to 'kiln.systems_text' (table expected, got nil)", kiln.systems_text},
            {"bad argument #1 to 'kiln.systems_text' (entry 1: a world:systems() entry expected (name, kind, stage, runs))",
             kiln.systems_text, {{name = "x"}}},
            {"bad argument #2 to 'kiln.pretty' (kiln.World expected, got number)", kiln.pretty, 1, 2},
            {"bad argument #1 to 'world:inspect' (entity expected, got string)", w.inspect, w, "0v1"},
            {"calling 'world:inspect' on bad self (kiln.World expected, got kiln.Query)", w.inspect, q, 1},
            {"bad argument #1 to 'world:schema' (component name expected, got nil)", w.schema, w},
            {"world:schema: unknown component 'Nope'", w.schema, w, "Nope"},
            {"bad argument #1 to 'query:format' (kiln.World expected, got nil)", q.format, q},
            {"bad argument #2 to 'query:format' (row limit (integer >= 0) expected, got -1)", q.format, q, w, -1},
            {"calling 'query:format' on bad self (kiln.Query expected, got kiln.World)", q.format, w, w},
        }
        for _, c in ipairs(cases) do
            assert.are.equal(c[1], message(c[2], table.unpack(c, 3, 5)))
        end
    end)

    it("point at the caller's line, not into the embedded code", function()
        local w = H.world()
        for _, err in ipairs{raised_here(kiln.handle, {}), raised_here(kiln.table_text, nil),
                             raised_here(w.inspect, w, "x"), raised_here(w.schema, w, "Nope"),
                             raised_here(w:query{"Position"}.format, w:query{"Position"}, 7),
                             raised_here(kiln.entity, "x")} do
            assert.truthy(err:find("^[^:]*inspect_spec%.lua:%d+: "), err)
            assert.falsy(err:find('lua/kiln/inspect.lua', 1, true), err)
        end
    end)

    it("report the binding's runtime failures under their own name", function()
        local w = H.world()
        local e = w:spawn{Health = {hp = 1, max = 2}}
        local q = w:query{"Health"}
        local got = {}
        w:system{name = "blind", run = function()
            got[1] = message(q.format, q, w)
            got[2] = message(w.inspect, w, e)
            got[3] = message(kiln.pretty, e, w)
        end}
        w:progress(1 / 60)
        -- the binding's own words after the tool's name, said once
        for i, name in ipairs{"query:format", "world:inspect", "kiln.pretty"} do
            assert.are.equal(name .. ": ", got[i]:sub(1, #name + 2), got[i])
            assert.truthy(got[i]:find("system 'blind' reads Health", 1, true), got[i])
            assert.falsy(got[i]:sub(#name + 3):find("^[%w_.:]+: "), got[i])
        end
        w:close()
        assert.are.equal("query:format: attempt to use a query of a closed world", message(q.format, q, w))
        assert.are.equal("world:schema: attempt to use a closed world", message(w.schema, w, "Health"))
    end)

    it("quote user text at most 200 bytes long", function()
        local w = H.world()
        local huge = string.rep("x", 10 * 1024 * 1024)
        local err = message(w.schema, w, huge)
        assert.is_true(#err < 300, #err)
        assert.truthy(err:find("^world:schema: unknown component 'x+%.%.%.'$"))
    end)

    it("leave the world as it was", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1, y = 2}}
        local before = H.snapshot(w, H.NAMES)
        pcall(w.inspect, w, {})
        pcall(w:query{"Position"}.format, w:query{"Position"}, w, "many")
        pcall(kiln.pretty, e, "not a world")
        assert.are.same(before, H.snapshot(w, H.NAMES))
    end)
end)

describe("showing a value costs what is shown", function()
    it("shows the start of a long string, its length and that it was cut", function()
        local long = string.rep("ab", 500000)
        local cut = '"' .. string.rep("ab", 128) .. '"... (1000000 bytes, cut)'
        local shown = {kiln.pretty(long), kiln.pretty({long}), kiln.pretty({[long] = 1})} -- (a name as key too)
        for _, text in ipairs(shown) do assert.is_true(#text < 300, #text) end
        assert.are.same({cut, "{" .. cut .. "}", "{[" .. cut .. "] = 1}"}, shown)
        -- cut before a UTF-8 character: byte 257 continues one, so 255 bytes show
        assert.are.equal('"a' .. string.rep("\195\169", 127) .. '"... (401 bytes, cut)',
                         kiln.pretty("a" .. string.rep("\195\169", 200)))
        assert.are.equal('"' .. string.rep("x", 256) .. '"', kiln.pretty(string.rep("x", 256)))
        -- a Lua component a tampered save brought: the entity shows, not the whole string
        local w = H.world()
        w:component("Note", "lua")
        local e = w:spawn{Note = {text = long}}
        assert.is_true(#w:inspect(e) < 400, #w:inspect(e))
        assert.are.equal("entity " .. H.entity_str(e) .. " (alive, 1 components)\n  Note = {text = " .. cut .. "}",
                         w:inspect(e))
    end)

    it("makes a bounded text whatever the value holds", function()
        local t = {}
        for i = 1, 30 do
            t[i] = {}
            for j = 1, 30 do t[i][j] = string.rep("x", 300) end
        end
        local text = kiln.pretty(t) -- 900 strings of 256 shown bytes: 270 KB, were it all shown
        assert.is_true(#text < 70000, #text)
        assert.truthy(text:find("more}$"), text:sub(-40))
    end)

    it("shows a table's sequence first, then its other keys in order, and counts what it left out", function()
        local seq = {}
        for i = 1, 100 do seq[i] = i end
        assert.are.equal("{" .. table.concat(seq, ", ", 1, 30) .. ", ... 70 more}", kiln.pretty(seq))
        assert.are.equal('{10, 20, 30, [true] = 1, [0] = 5, name = "x"}', -- by type name, then value
                         kiln.pretty({10, 20, 30, name = "x", [0] = 5, [true] = 1}))
        local named, want = {}, {}
        for i = 1, 100 do named[string.format("k%03d", i)] = i end
        for i = 1, 30 do want[i] = string.format("k%03d = %d", i, i) end
        assert.are.equal("{" .. table.concat(want, ", ") .. ", ... 70 more}", kiln.pretty(named))
    end)

    it("looks at a bounded number of keys however big the table", function()
        local big = {}
        for i = 1, 100000 do big[i] = i end
        for i = 1, 100000 do big["k" .. i] = i end
        -- every key collected and sorted: 22 million instructions before
        local spent, text = H.instructions(function() return kiln.pretty(big) end)
        assert.is_true(spent < 500000, spent)
        assert.truthy(text:find(", 30, %.%.%. at least 99970 more}$"), text:sub(-60))
        local w = H.world()
        for _ = 1, 20000 do w:spawn{Frozen = true} end
        local list = w:entities()
        spent, text = H.instructions(function() return kiln.pretty(list, w) end)
        assert.is_true(spent < 500000, spent)
        assert.truthy(text:find("%.%.%. at least 19970 more}$"), text:sub(-60))
    end)
end)

describe("a table shown by kiln.pretty", function()
    it("shows its own contents: no __pairs, __index or __len runs", function()
        -- a __pairs returning a number reached kiln's own loop: "kiln.pretty: attempt to call
        -- a number value"; a __len returning a table failed a comparison in kiln's code
        local t = setmetatable({1, 2, x = 3}, {__pairs = function() return 1, 2, 3 end,
            __index = function() error("index") end, __len = function() return {} end})
        assert.are.equal("{1, 2, x = 3}", kiln.pretty(t))
        local raising = setmetatable({}, {__pairs = function() error("pairs") end})
        assert.are.equal("{a = {}}", kiln.pretty({a = raising}))
    end)
end)

describe("kiln.systems_text", function()
    it("reads each entry once, so what it checked is what it formats", function()
        -- the check and the formatting read the list through __index apart: an entry fine
        -- the first time and a number the second reached kiln's own code ("attempt to index
        -- a number value (local 's')")
        local w = H.world()
        w:system{name = "a", run = function() end}
        local entry = w:systems()[1]
        local reads = 0
        local sneaky = setmetatable({}, {__index = function(_, i)
            if i ~= 1 then return nil end
            reads = reads + 1
            return reads == 1 and entry or 42
        end})
        local ok, text = pcall(kiln.systems_text, sneaky)
        assert.is_true(ok, text)
        assert.is_nil(text:find("\na ", 1, true), text) -- the list's own contents: none
        local listed = kiln.systems_text(setmetatable({entry}, {__index = function(_, i) if i == 2 then return 7 end end}))
        assert.truthy(listed:find("\na ", 1, true), listed)
        assert.are.equal(kiln.systems_text({entry}), kiln.pretty({entry}))
    end)
end)

describe("query:format", function()
    it("lays out rows with handles and fields, capped with a more line", function()
        local w = H.world()
        for i = 1, 5 do w:spawn{Health = {hp = i, max = 10}} end
        local text = w:query{"Health"}:format(w, 2)
        assert.are.equal("entity  Health.hp  Health.max\n------  ---------  ----------\n" ..
                         "0v1     1          10\n1v1     2          10\n... 3 more", text)
        assert.are.equal(w:query{"Health"}:format(w), kiln.pretty(w:query{"Health"}, w))
    end)

    -- the names and the handle matched, so it showed b's row as the query's
    it("refuses another world, even one with the same names and handles", function()
        local a, b = H.world(), H.world()
        a:spawn{Health = {hp = 1, max = 2}}
        b:spawn{Health = {hp = 99, max = 99}}
        local q = a:query{"Health"}
        local ok, err = pcall(q.format, q, b)
        assert.is_false(ok)
        assert.truthy(err:find("bad argument #1 to 'query:format' (the world of the query expected)", 1, true), err)
        assert.are.equal(tostring(q), kiln.pretty(q, b))
        assert.truthy(q:format(a):find("0v1     1          2", 1, true))
    end)
end)

describe("kiln.table_text", function()
    it("pads columns and takes numbers as cells", function()
        assert.are.equal("a    b\n---  ---\n1    2.5\nxyz\n... 4 more",
                         kiln.table_text({"a", "b"}, {{1, 2.5}, {"xyz"}}, 4))
    end)
end)

-- A host (a game, a tool) may have called setlocale(LC_ALL, "") on a player's machine whose
-- locale writes 1.5 as "1,5"; Lua 5.4 formats numbers through the C library, LuaJIT by itself.
describe("numbers shown in a decimal-comma locale", function()
    it("still print with a point and read back as the same value", function()
        local w = H.world()
        w:component("P", "float x, y; double d;")
        local e = w:spawn{P = {x = 1.5, y = -2.25, d = 0.1}}
        w:system{name = "a", run = function() end}
        w:progress(0)
        local ran = H.in_comma_locale(function()
            assert.are.equal("1.5", kiln.pretty(1.5))
            assert.are.equal("{0.25, -3.5, 0.125}", kiln.pretty({0.25, -3.5, 0.125}))
            for _, x in ipairs{0.1 + 0.2, 1 / 3, 1e300, 5e-324, -1.5e-7} do
                local text = kiln.pretty(x)
                assert.is_nil(text:find(",", 1, true), text)
                assert.are.equal(x, load("return " .. text)(), text)
            end
            local shown = w:inspect(e)
            assert.truthy(shown:find("P { x = 1.5, y = -2.25, d = 0.1 }", 1, true), shown)
            local listed = kiln.systems_text(w:systems())
            assert.truthy(listed:find("%d%.%d%d%d"), listed)
            assert.is_nil(listed:find("%d,%d"), listed)
        end)
        if not ran then pending(H.COMMA_LOCALE_MISSING) end
    end)
end)
