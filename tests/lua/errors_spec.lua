-- errors_spec.lua: the two message shapes of the binding (argument errors and runtime
-- failures), each naming its call once, bounded quotes, and the exact input rules for
-- vectors, quaternions, matrices, arrays and descriptors, in values, views and bulk.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- The message of fn's error, which must match the Lua pattern exactly (anchored).
local function shape(pattern, fn)
    local msg = H.raises(fn)
    assert.is_truthy(msg:find("^" .. pattern .. "$"), string.format("%q does not have the shape %q", msg, pattern))
    return msg
end

-- No call name appears twice ("world:despawn: despawn: ...") and no C name leaks through.
local function named_once(msg, call)
    local short = call:match("[:.](.*)$")
    local _, n = msg:gsub(short:gsub("%p", "%%%0"), "")
    assert.are.equal(1, n, string.format("%q names %s more than once", msg, short))
    assert.is_falsy(msg:find("kiln_", 1, true), msg)
end

describe("argument errors", function()
    it("take Lua's shape with the Lua call name, counting arguments after self", function()
        local w = H.world()
        shape("bad argument #1 to 'world:despawn' %(entity expected, got string%)", function() w:despawn("x") end)
        shape("bad argument #1 to 'world:despawn' %(entity expected, got a negative number%)", function() w:despawn(-1) end)
        shape("bad argument #2 to 'world:get' %(unknown component 'Velocityy'%)", function() w:get(w:spawn(), "Velocityy") end)
        shape("bad argument #2 to 'world:get' %(component name expected, got boolean%)", function() w:get(w:spawn(), true) end)
        shape("bad argument #1 to 'world:query' %(table expected, got number%)", function() w:query(5) end)
        shape("bad argument #1 to 'world:query' %(Position appears twice in the terms%)",
              function() w:query{"Position", without = {"Position"}} end)
        shape("bad argument #1 to 'world:spawn' %(unknown component 'Nope'%)", function() w:spawn{Nope = {}} end)
        shape("bad argument #1 to 'world:emit' %(unknown event 'Boom'%)", function() w:emit("Boom") end)
        shape("bad argument #1 to 'kiln.world' %(table expected, got string%)", function() kiln.world("x") end)
        shape("bad argument #1 to 'world:progress' %(number expected, got table%)", function() w:progress({}) end)
        shape("bad argument #1 to 'commands:despawn' %(entity or placeholder expected, got string%)",
              function() kiln.commands():despawn("7") end)
    end)

    it("name the method when self is not the object", function()
        local w = H.world()
        shape("calling 'world:count' on bad self %(kiln.World expected, got table%)", function() w.count({}) end)
        shape("calling 'world:spawn' on bad self %(kiln.World expected, got no value%)", function() w.spawn() end)
        local q = w:query{"Position"}
        shape("calling 'query:count' on bad self %(kiln.Query expected, got kiln.World%)", function() q.count(w) end)
        local c = kiln.commands()
        shape("calling 'commands:apply' on bad self %(kiln.Commands expected, got number%)", function() c.apply(1, w) end)
        -- these three named no method ("bad argument #1 to '?'", or the caller's local)
        local snap, inst = w:snapshot(), w:instantiate(w:export())
        shape("calling 'snapshot:bytes' on bad self %(kiln.Snapshot expected, got number%)", function() snap.bytes(5) end)
        shape("calling 'instance:entity' on bad self %(kiln.Instance expected, got kiln.World%)",
              function() inst.entity(w, "x") end)
        shape("calling 'instance:despawn' on bad self %(kiln.Instance expected, got number%)", function() inst.despawn(5) end)
    end)

    it("reject unknown keys in descriptors instead of ignoring them", function()
        local w = H.world()
        shape("bad argument #1 to 'world:query' %(unknown key 'exclude' %(expected optional, without and a list%)%)",
              function() w:query{"Position", exclude = {"Velocity"}} end)
        shape("bad argument #1 to 'world:query' %(unknown key 'x' %(expected a list%)%)",
              function() w:query{"Position", optional = {x = "Velocity"}} end)
        shape("bad argument #1 to 'world:system' %(unknown key 'read' %(expected name, reads, writes, before, after, " ..
              "exclusive, run, each, query%)%)", function() w:system{name = "s", read = {"Position"}, run = print} end)
        shape("bad argument #1 to 'world:system' %(unknown key %[7%] %(expected a list%)%)",
              function() w:system{name = "s", reads = {[7] = "Position"}, run = print} end)
        shape("bad argument #1 to 'kiln.world' %(unknown key 'worker' %(expected workers, max_failures, instructions, transforms%)%)",
              function() kiln.world{worker = 2} end)
        shape("bad argument #1 to 'kiln.world' %(unknown boolean key %(expected workers, max_failures, instructions, transforms%)%)",
              function() kiln.world{[true] = 1} end)
        assert.are.equal(0, #w:systems())
    end)
end)

describe("runtime failures", function()
    it("read 'call: detail', naming the call once even when the core failed", function()
        local w = H.world({transforms = true})
        local e = w:spawn()
        w:despawn(e)
        local msg = shape("world:despawn: entity 0v1 is not alive", function() w:despawn(e) end)
        named_once(msg, "world:despawn")
        msg = shape("world:component: .+", function() w:component("Position", "int32_t a;") end)
        named_once(msg, "world:component")
        local a, b = w:spawn(), w:spawn()
        w:set_parent(b, a)
        msg = shape("world:set_parent: .+", function() w:set_parent(a, b) end)
        named_once(msg, "world:set_parent")
        msg = shape("world:set: entity %d+v%d+ has no Health", function() w:set(a, "Health", {hp = 1}) end)
        named_once(msg, "world:set")
    end)

    -- a number past every handle (they are below 2^53) was named by its low bits: world:get of
    -- 2^53 + e read "entity 0v1 is not alive" while 0v1 was alive
    it("name a number that is no handle as that number, not as the entity of its low bits", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1}}
        assert.are.equal("0v1", kiln.handle(e))
        for _, call in ipairs{function(n) return w:get(n, "Position") end, function(n) w:despawn(n) end,
                              function(n) w:set(n, "Position", {x = 2}) end} do
            shape("world:%a+: entity 9007203549708288 is not alive", function() call(e + 2 ^ 53) end)
        end
        assert.is_true(w:is_alive(e) and w:get(e, "Position").x == 1)
    end)

    it("name the query method, the component and the field in loops", function()
        local w = H.world()
        w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        if H.ffi_each then -- an FFI view: LuaJIT converts, and names the C types
            H.raises(function() for _, p in q:each() do p.x = "left" end end, "cannot convert 'string' to 'float'")
        else
            shape("query:each: field 'x' of Position on entity 0v1: expected a number, got string", function()
                for _, p in q:each() do p.x = "left" end
            end)
        end
        shape("query:bulk: Position.x%[1%] %(entity 0v1%): expected a number, got boolean", function()
            q:bulk(function(n, ents, p) p.x[1] = true end)
        end)
        shape("query:each: this query is already being iterated %(use a second query for a nested loop%)", function()
            for _ in q:each() do for _ in q:each() do end end
        end)
        assert.is_true(H.not_deferred(w))
    end)

    it("say a schema's field name is too long, not missing", function()
        local w = H.world()
        H.unchanged(w, nil, function() w:component("Long", "float " .. string.rep("n", 64) .. ";") end,
                    "world:component", "Long: field name too long (1 to 63 bytes) at position 7")
        H.unchanged(w, nil, function() w:component("None", "float ;") end, "None: expected a field name at position 7")
        w:component("Longest", "float " .. string.rep("n", 63) .. ";")
        assert.are.equal(4, w:component_info("Longest").size)
    end)

    it("say a schema's type name is too long past 63 bytes, and unknown at 63", function()
        local w = H.world()
        H.unchanged(w, nil, function() w:component("T63", string.rep("t", 63) .. " x;") end,
                    "world:component", "T63: unknown type '" .. string.rep("t", 63) .. "' at position 64")
        for _, n in ipairs{64, 65} do
            H.unchanged(w, nil, function() w:component("T" .. n, string.rep("t", n) .. " x;") end,
                        "world:component", "T" .. n .. ": type name too long (1 to 63 bytes) at position 1")
        end
        H.unchanged(w, nil, function() w:component("Digit", "3d x;") end, "Digit: expected a type at position 1")
    end)

    it("are bounded when they quote what the caller gave", function()
        local w = H.world()
        local huge = string.rep("f", 10 * 1024 * 1024)
        local msg = H.unchanged(w, nil, function() w:component("Big", huge .. " x;") end, "world:component", "Big")
        assert.is_true(#msg < 400, "a 10 MB schema gave a message of " .. #msg .. " bytes")
        msg = H.raises(function() w:get(w:spawn(), huge) end, "unknown component", "...")
        assert.is_true(#msg < 400)
        msg = H.raises(function() w:query{"Position", [huge] = 1} end, "unknown key", "...")
        assert.is_true(#msg < 400)
        msg = H.raises(function() w:spawn{Position = {[huge] = 1}} end, "has no field", "...")
        assert.is_true(#msg < 400)
        assert.is_nil(w:component_info("Big"))
    end)
end)

describe("exact input rules", function()
    local function world()
        local w = kiln.world()
        w:component("Body", "vec3 dir; quat rot; mat4 m; int32_t ids[3]; vec2 path[2];")
        return w
    end

    it("accept vectors and quaternions as {x =, ...} or as arrays", function()
        local w = world()
        local e = w:spawn{Body = {dir = {1, 2, 3}, rot = {0, 0, 0, 1}}}
        local b = w:get(e, "Body")
        assert.are.same({x = 1, y = 2, z = 3}, b.dir)
        assert.are.same({x = 0, y = 0, z = 0, w = 1}, b.rot)
        w:set(e, "Body", {dir = {z = 9}, path = {{5, 6}, {x = 7}}})
        b = w:get(e, "Body")
        assert.are.same({x = 1, y = 2, z = 9}, b.dir)
        assert.are.same({{x = 5, y = 6}, {x = 7, y = 0}}, b.path)
    end)

    it("raise for every key that is not a field or an element, at every depth, changing nothing", function()
        local w = world()
        local e = w:spawn{Body = {dir = {1, 2, 3}}}
        local names = {"Body"}
        H.unchanged(w, names, function() w:set(e, "Body", {dir = {x = 1, bogus = 9}}) end, "world:set", "'bogus'", "vec3")
        H.unchanged(w, names, function() w:set(e, "Body", {dir = {1, 2, 3, 4}}) end, "vec3", "[4]")
        H.unchanged(w, names, function() w:set(e, "Body", {dir = {1, x = 2}}) end, "given twice")
        H.unchanged(w, names, function() w:set(e, "Body", {rot = {0, 0, 0, 1, 0}}) end, "quat", "[5]")
        local seventeen = {}
        for i = 1, 17 do seventeen[i] = i end
        H.unchanged(w, names, function() w:set(e, "Body", {m = seventeen}) end, "mat4", "[17]")
        H.unchanged(w, names, function() w:set(e, "Body", {m = {x = 1}}) end, "mat4", "'x'")
        H.unchanged(w, names, function() w:set(e, "Body", {ids = {1, 2, 3, 4}}) end, "does not fit 3")
        H.unchanged(w, names, function() w:set(e, "Body", {ids = {1, n = 2}}) end, "key 'n'")
        H.unchanged(w, names, function() w:set(e, "Body", {path = {{1, 2}, {1, 2, 3}}}) end, "element 2", "[3]")
        H.unchanged(w, names, function() w:set(e, "Body", {dirr = {}}) end, "has no field 'dirr'")
        H.unchanged(w, names, function() w:spawn{Body = {dir = {x = 1, q = 2}}} end, "world:spawn", "'q'")
        H.unchanged(w, names, function() w:add(e, "Body", {rot = {a = 1}}) end, "world:add", "'a'")
    end)

    it("raise for numbers beyond float range in vectors, views and the bulk path", function()
        local w = world()
        w:component("P", "float x;")
        local e = w:spawn{Body = {}, P = {x = 1}}
        local names = {"Body", "P"}
        H.unchanged(w, names, function() w:set(e, "Body", {dir = {x = 1e39}}) end, "out of range for float")
        H.unchanged(w, names, function() w:set(e, "Body", {m = {1e300}}) end, "out of range for float")
        local q = w:query{"P"}
        if H.ffi_each then -- an FFI view converts as C does: past float range is an infinity
            for _, p in q:each() do p.x = -1e39 end
            assert.are.equal(-math.huge, w:get(e, "P").x)
            w:set(e, "P", {x = 1})
        else
            H.unchanged(w, names, function() for _, p in q:each() do p.x = -1e39 end end, "query:each", "out of range")
        end
        H.unchanged(w, names, function() q:bulk(function(n, ents, p) p.x[1] = 1e39 end) end, "query:bulk",
                    "out of range")
        -- infinities are values a float holds: they pass on every path
        q:bulk(function(n, ents, p) p.x[1] = math.huge end)
        assert.are.equal(math.huge, w:get(e, "P").x)
    end)

    it("write the numbers in their messages with a '.' whatever the host's decimal comma", function()
        local w = world()
        w:component("N", "int32_t i; float f;")
        local e = w:spawn{N = {i = 1, f = 1}}
        local ran = H.in_comma_locale(function()
            H.unchanged(w, {"N"}, function() w:set(e, "N", {i = 1.5}) end, "expected an integer, got 1.5")
            H.unchanged(w, {"N"}, function() w:set(e, "N", {f = 3.5e38}) end, "number 3.5e+38 is out of range")
        end)
        if not ran then pending(H.COMMA_LOCALE_MISSING) end
    end)

    it("raise in views and bulk term tables for keys that are not fields", function()
        local w = world()
        w:component("P", "float x, y;")
        w:spawn{P = {x = 1}}
        local q = w:query{"P"}
        H.unchanged(w, {"P"}, function() for _, p in q:each() do p.z = 1 end end, "P has no field 'z'")
        H.unchanged(w, {"P"}, function() q:bulk(function(n, ents, p) p.vx = {5} end) end, "query:bulk",
                    "P has no field 'vx'")
        assert.is_true(H.not_deferred(w))
    end)
end)

describe("a stop raised by a budget", function()
    it("names no line of the script, however deep the loop it stopped runs", function()
        local w = H.world({instructions = 100000})
        local function spin() while true do end end
        w:system{name = "flat", run = function() while true do end end}
        w:system{name = "deep", run = function() local function inner() spin() end inner() end}
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.are.equal(2, #failures)
        for _, f in ipairs(failures) do
            assert.are.equal("system '" .. f.system .. "' ran past its budget of 100000 instructions", f.message)
        end
    end)

    it("names no line of a mod's manifest either", function()
        local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")
        local dir = M.folder()
        for name, body in pairs({flat = "while true do end",
                                 deep = "local function s() while true do end end local function f() s() end f()"}) do
            M.write(dir, name .. "/manifest.lua", body)
            M.write(dir, name .. "/init.lua", "\n")
            local _, mods = M.host()
            local info, err = mods:load(dir .. "/" .. name)
            assert.is_nil(info)
            assert.truthy(err:find(": bad manifest: the manifest ran past 100000 instructions$"), err)
            assert.falsy(err:find("manifest.lua:", 1, true), err)
        end
        M.cleanup()
    end)
end)

-- docs/lua-api.md ("Errors have two shapes"): where a message starts, for each kind of raise.
-- Each call is made from a Lua function, so a message that carries the caller's chunk:line:
-- shows it (pcall calling a C function directly would hide it).
describe("where a message starts", function()
    local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")
    local function starts(prefix, fn)
        local msg = H.raises(fn)
        assert.are.equal(prefix, msg:sub(1, #prefix), msg)
        return msg
    end

    it("is the mod manager's call, for what it returns and what it raises, with no chunk:line:", function()
        local w, mods = M.host()
        for _, call in ipairs({"reload", "unload", "log"}) do
            local ok, err = mods[call](mods, "ghost")
            assert.is_nil(ok, call)
            assert.are.equal("mods:" .. call .. ": no mod named 'ghost' is loaded", err)
        end
        local _, err = mods:load_dir("/nonexistent/kiln-mods")
        assert.are.equal("mods:load_dir: cannot open folder /nonexistent/kiln-mods", err)
        local dir = M.folder()
        _, err = mods:load(M.write(dir, "failer.lua", "error('boom', 0)"))
        assert.are.equal("mods:load: mod 'failer': boom", err)
        starts("kiln.mods: the world has a mod manager already", function() kiln.mods(w) end)
        starts("bad argument #1 to 'mods:log' (mod name expected, got number)", function() mods:log(7) end)
        mods:close()
        starts("mods:list: the mod manager is closed", function() mods:list() end)
        M.cleanup()
    end)

    it("is the stop itself when a budget or a limit stops a charged call, with no chunk:line:", function()
        local _, mods = M.host{instructions = 100000}
        local dir = M.folder()
        local _, err = mods:load(M.write(dir, "big.lua", "local s = string.rep('x', 1e9)"))
        assert.are.equal("mods:load: mod 'big': string.rep could build 1e+09 bytes, more than one call may in a mod "
                         .. "(67108864)", err)
        _, err = mods:load(M.write(dir, "long.lua", "local s = string.rep('x', 6e7)"))
        assert.are.equal("mods:load: mod 'long': string.rep could take 7.5e+06 steps, past what is left of the budget "
                         .. "of the top level of mod 'long'", err)
        M.cleanup()
    end)

    it("is the limit, or the call then the limit, when a mod's limit refuses a call, with no chunk:line:", function()
        local w, mods = M.host{entities = 1, queries = 1}
        w:component("Position", "float x, y;")
        local dir = M.folder()
        local _, err = mods:load(M.write(dir, "many.lua", "world:spawn{} local function f() world:spawn{} end f()"))
        assert.are.equal("mods:load: mod 'many': mod 'many' has 1 live entities, its limit", err)
        _, err = mods:load(M.write(dir, "qs.lua", "local a = world:query{'Position'}\n"
                                                  .. "local function f() local q = world:query{'Position'} end f()"))
        assert.are.equal("mods:load: mod 'qs': world:query: mod 'qs' holds 1 live queries, its limit (queries)", err)
        M.cleanup()
    end)

    it("is the mod's chunk:line: for what stands in for one of Lua's own functions, as Lua's would", function()
        local _, mods = M.host()
        local dir = M.folder()
        local path = M.write(dir, "rq.lua", "\nrequire('nope')")
        local _, err = mods:load(path)
        assert.are.equal("mods:load: mod 'rq': " .. path .. ":2: require 'nope': a single-file mod has no folder to "
                         .. "require from", err)
        M.cleanup()
    end)

    it("is the caller's chunk:line: for a closed world, and the call for other failures", function()
        local w = H.world()
        local e = w:spawn()
        w:despawn(e)
        starts("world:despawn: entity 0v1 is not alive", function() w:despawn(e) end)
        local alive = w:spawn()
        starts("bad argument #2 to 'world:get' (unknown component 'Nope')", function() w:get(alive, "Nope") end)
        local q = w:query{"Position"}
        w:close()
        local msg = H.raises(function() w:count() end)
        assert.is_truthy(msg:find("^[^:]+:%d+: attempt to use a closed world$"), msg)
        msg = H.raises(function() q:count() end)
        assert.is_truthy(msg:find("^[^:]+:%d+: attempt to use a query of a closed world$"), msg)
    end)
end)
