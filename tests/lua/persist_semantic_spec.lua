-- persist_semantic_spec.lua: well-formed but hostile "lua" values and callers of world:save /
-- world:load: deep nesting, metatables, huge tables, saves from a mod, every Lua-side failure.
local kiln = require "kiln"
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local H = dofile(here .. "helpers.lua")
local M = dofile(here .. "mods_helpers.lua")

-- A chain of n tables, each padded so that building and walking it allocates (and collects).
local CHAIN = [[
local function chain(n)
    local t = {}
    local cur = t
    for i = 1, n do
        local nx = {pad = string.rep("x", i), [2] = {a = 1, b = 2, c = 3}}
        cur[1] = nx
        cur = nx
    end
    return t
end
]]

local function script_world()
    local w = H.world()
    w:component("Script", "lua")
    return w
end

describe("persist semantics", function()
    after_each(M.cleanup)

    it("a Lua value nested to the limit saves and loads under a collector that never pauses", function()
        -- the encoder pushes a few values per level: 100 levels outgrow the C function's
        -- guaranteed stack, and the collector shrinks the stack to what is in use
        local ok, out = H.run_isolated(CHAIN .. [[
local kiln = require "kiln"
if jit then collectgarbage("setpause", 0) else collectgarbage("incremental", 0, 100) end
local w = kiln.world()
w:component("Script", "lua")
for _ = 1, 30 do
    w:spawn{Script = chain(98)}
    local w2 = kiln.world()
    w2:component("Script", "lua")
    w2:load(w:save())
    assert(w2:count() == w:count())
end
io.write("survived")
]], 120)
        assert.is_true(ok, out)
        assert.are.equal("survived", out)
    end)

    it("a Lua value nested past the limit is refused naming entity and component", function()
        local w = script_world()
        local t, cur = {}, nil
        cur = t
        for _ = 1, 100 do
            cur[1] = {}
            cur = cur[1]
        end
        local e = w:spawn{Script = t}
        H.raises(function() w:save() end, "world:save: entity " .. H.entity_str(e) .. " component 'Script'",
                 "nested more than 100 deep")
    end)

    it("a table with a metatable is refused: its behaviour would not survive the load", function()
        local w = script_world()
        local e = w:spawn{Script = setmetatable({hp = 3}, {__index = function() return 1 end})}
        H.raises(function() w:save() end, "world:save: entity " .. H.entity_str(e) .. " component 'Script'",
                 "a table with a metatable cannot be saved")
        w:set(e, "Script", {inner = setmetatable({}, {})})
        H.raises(function() w:save() end, "a table with a metatable cannot be saved")
        w:set(e, "Script", {[{}] = true}) -- a key that is a table: its identity is its meaning
        H.raises(function() w:save() end, "a table used as a key cannot be saved")
        w:set(e, "Script", {plain = {1, 2}})
        w:resource("config", setmetatable({}, {__index = {level = 1}}))
        H.raises(function() w:save() end, "world:save: Lua resource: a table with a metatable cannot be saved")
    end)

    it("a Lua table of many keys saves its keys in one order, whatever order they were inserted in", function()
        -- (how its time grows with the keys is the benchmark lua_save_keys, not a timed test)
        local w = script_world()
        local n = 32000
        local big = {}
        for i = 1, n do big["k" .. i] = i end
        local e = w:spawn{Script = big}
        local data = w:save()
        local other = {}
        for i = n, 1, -1 do other["k" .. i] = i end
        w:set(e, "Script", other)
        assert.are.equal(data, w:save())
        local w2 = script_world()
        w2:load(data)
        local back = w2:get(e, "Script")
        local count = 0
        for k, v in pairs(back) do
            assert.are.equal("k" .. v, k)
            count = count + 1
        end
        assert.are.equal(n, count)
    end)

    it("a mod's save of a world holding the host's Lua values is refused, not a crash", function()
        local ok, out = H.run_isolated(string.format([[
local kiln = require "kiln"
local w = kiln.world()
w:component("Script", "lua")
w:component("Position", "float x, y;")
w:spawn{Script = {hp = 3}}
w:spawn{Position = {x = 1}}
local mods = kiln.mods(w)
local dir = %q
local f = assert(io.open(dir .. "/saver.lua", "w"))
f:write([==[
local ok, err = pcall(function() return world:save() end)
error(ok and "saved" or err, 0)
]==])
f:close()
local info, err = mods:load(dir .. "/saver.lua")
io.write(tostring(info), "|", err)
]], M.folder()), 60)
        assert.is_true(ok, out)
        assert.truthy(out:find("world:save: entity 0v1 component 'Script': its values live in the host's "
                               .. "Lua state (a mod cannot save them)", 1, true), out)
    end)

    it("a prefab from a table refuses a count beyond what one call may spawn, as a JSON prefab does", function()
        local ok, out = H.run_isolated([[
local kiln = require "kiln"
local w = kiln.world()
w:component("Position", "float x, y;")
local from_table = w:prefab{components = {Position = {x = 1}}, children = {{}}}
local from_json = w:prefab('{"components": {"Position": {"x": 1}}, "children": [{}]}')
for _, p in ipairs{from_json, from_table} do
    local ok, err = pcall(p.spawn, p, 2 ^ 40)
    io.write(tostring(ok), " ", tostring(err), " ", w:count(), "\n")
end
]], 20)
        assert.is_true(ok, out)
        local line = "false bad argument #1 to 'prefab:spawn' (a count from 0 to 1073741823 expected) 0\n"
        assert.are.equal(line .. line, out)
    end)

    it("a save naming kiln's own component is refused, not allowed to replace the binding's state", function()
        local ok, out = H.run_isolated([[
local kiln = require "kiln"
local w = kiln.world()
w:component("Script", "lua")
local e = w:spawn{Script = {a = 1}}
local before = w:hash()
for _, part in ipairs{'"entities": [{"id": 4294967297, "components": {"kiln.lua": "00"}}]',
                      '"entities": [], "resources": {"kiln.lua": "00"}'} do
    local data = '{"kiln": 1, "tick": 1, "components": [{"name": "kiln.lua", "size": 16, "codec": true}], '
                 .. part .. '}'
    local ok, err = pcall(w.load, w, data)
    io.write(tostring(ok), " ", tostring(err), "\n")
end
w:spawn{Script = {b = 2}}
collectgarbage()
io.write(tostring(w:hash() ~= before and w:get(e, "Script").a == 1), "\n")
]], 20)
        assert.is_true(ok, out)
        assert.are.equal("false world:load: entity 1v1 component 'kiln.lua': it is not a Lua-valued component of this world\n"
                         .. "false world:load: resource 'kiln.lua': it is not a Lua-valued component of this world\n"
                         .. "true\n", out)
    end)

    it("a table reached twice in one value is refused: it would come back as two tables", function()
        local w = script_world()
        local shared = {hp = 1}
        local e = w:spawn{Script = {a = shared, b = shared}}
        H.raises(function() w:save() end, "world:save: entity " .. H.entity_str(e) .. " component 'Script'",
                 "a table reached twice cannot be saved")
        -- the same table in two entities' values is two values: each saves a copy
        w:set(e, "Script", {a = shared})
        w:spawn{Script = {b = shared}}
        local data = w:save()
        local w2 = script_world()
        w2:load(data)
        assert.are.same({a = {hp = 1}}, w2:get(e, "Script"))
        -- a value whose tables double at each of 40 levels would have written 2^40 of them
        local ok, out = H.run_isolated([[
local kiln = require "kiln"
local w = kiln.world()
w:component("Script", "lua")
local t = {}
for _ = 1, 40 do t = {t, t} end
w:spawn{Script = t}
local ok, err = pcall(w.save, w)
io.write(tostring(ok), " ", tostring(err))
]], 20)
        assert.is_true(ok, out)
        assert.truthy(out:find("false world:save: entity 0v1 component 'Script': a table reached twice", 1, true), out)
    end)

    it("a prefab from a table points node numbers in entity fields at each copy, as in a scene", function()
        local w = script_world()
        w:component("Link", "entity target; entity pair[2];")
        local keep = w:spawn()
        local p = w:prefab{components = {Link = {target = 2, pair = {1, keep}}},
                           children = {{components = {Link = {target = 1}}}}}
        for _, root in ipairs(p:spawn(2)) do
            local child = w:children(root)[1]
            assert.are.same({target = child, pair = {root, keep}}, w:get(root, "Link"))
            assert.are.same({target = root, pair = {0, 0}}, w:get(child, "Link"))
        end
        local inst = w:instantiate('{"version": 1, "entities": [{"name": "x", "prefab": "p"}]}', {prefabs = {p = p}})
        local x = inst:entity("x")
        assert.are.same({target = w:children(x)[1], pair = {x, keep}}, w:get(x, "Link"))
        local count = w:count()
        H.raises(function() w:prefab{children = {{components = {Link = {pair = {0, 3}}}}}} end,
                 "world:prefab: def.children[1].components.Link.pair[2]: entity 3 is not in the prefab (1..2, or 0)")
        assert.are.equal(count, w:count())
    end)

    it("a load into a world whose state a host script replaced is refused before anything lands", function()
        local src = script_world()
        src:spawn{Script = {a = 1}}
        src:resource("config", {level = 1})
        local data = src:save()
        local w = script_world()
        w:spawn()
        -- the World's state table is its first user value (under LuaJIT, the first slot of its
        -- environment, where lua/src/compat.c keeps user values)
        if H.luajit then debug.getfenv(w)[1] = 42 else debug.setuservalue(w, 42, 1) end
        collectgarbage() -- the values table lived in the state: only a weak box holds it now
        collectgarbage()
        local count = w:count()
        -- refused by the codec (a Lua value needs the world's value store) or, without Lua
        -- values, where the Lua resources would be merged
        H.raises(function() w:load(data) end, "world:load: entity 0v1 component 'Script': the world's state was "
                 .. "changed through the debug library")
        src:despawn(src:entities()[1])
        H.raises(function() w:load(src:save()) end, "world:load: the world's state was changed through the debug library")
        collectgarbage()
        collectgarbage()
        assert.are.equal(count, w:count())
    end)

    it("a field the component gained since the save loads as its defaults, in either format", function()
        -- the save's LocalTransform had no scale yet: its component is written under a name of
        -- the same length and renamed in the saved bytes (every Lua world has the C one)
        for _, format in ipairs{"binary", "json"} do
            local old = kiln.world()
            old:component("LocalXransform", "vec3 position; quat rotation")
            local e = old:spawn{LocalXransform = {position = {x = 1, y = 2, z = 3}, rotation = {0, 0, 0, 0}}}
            local data = old:save(nil, {format = format}):gsub("LocalXransform", "LocalTransform")
            local w = kiln.world()
            w:load(data)
            local l = w:get(e, "LocalTransform")
            assert.are.same({x = 1, y = 2, z = 3}, l.position)
            assert.are.same({x = 0, y = 0, z = 0, w = 0}, l.rotation) -- the file's, not the identity
            assert.are.same({x = 1, y = 1, z = 1}, l.scale) -- the defaults, not zeroes
            -- a component with no defaults (defined in Lua) still gets zeroes
            local older = kiln.world()
            older:component("Health", "int32_t hp")
            local h = older:spawn{Health = {hp = 7}}
            local w2 = H.world()
            w2:load(older:save(nil, {format = format}))
            assert.are.same({hp = 7, max = 0}, w2:get(h, "Health"))
        end
    end)

    it("a saved Lua resource named like a component of the loading world is refused, not hidden", function()
        local src = kiln.world()
        src:resource("Score", {points = 5})
        src:resource("title", "moon")
        src:spawn()
        for _, format in ipairs{"binary", "json"} do
            local data = src:save(nil, {format = format})
            local w = kiln.world()
            w:component("Score", "int32_t points;")
            w:resource("title", "earth")
            w:spawn()
            local before = w:hash()
            H.raises(function() w:load(data) end, "world:load: host data: the saved Lua resource 'Score' is named "
                     .. "like a component of this world, which would hide it")
            assert.are.equal(before, w:hash())
            assert.are.equal(1, w:count())
            assert.are.equal("earth", w:resource("title"))
            assert.is_nil(w:resource("Score"))
            -- in a world where the name holds Lua values the same save loads whole
            local ok = kiln.world()
            ok:component("Score", "lua")
            ok:load(data)
            assert.are.same({points = 5}, ok:resource("Score"))
            assert.are.equal("moon", ok:resource("title"))
        end
    end)
end)
