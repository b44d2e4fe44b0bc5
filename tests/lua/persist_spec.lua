-- persist_spec.lua: world:save / world:load in both formats, "lua"-valued data, the old -> new
-- map, refusals that leave the world untouched, world:hash, world:snapshot / world:restore.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

local function scene()
    local w = H.world()
    w:component("Script", "lua")
    w:component("Link", "entity target; entity pair[2];")
    local root = w:spawn{Position = {x = 1, y = 2}, Script = {name = "ship", hp = 3, tags = {"a", "b"}, [1] = true}}
    local child = w:spawn{Position = {x = 4}, Velocity = {x = -1}, Health = {hp = 7, max = 9}}
    local other = w:spawn{Frozen = true, Link = {target = root, pair = {child, root}}}
    w:set_parent(child, root)
    w:resource("config", {level = 2, name = "moon"})
    w:resource("Health", {hp = 1, max = 2}) -- a data resource
    return w, root, child, other
end

local function fresh()
    local w = H.world()
    w:component("Link", "entity target; entity pair[2];") -- another registration order
    w:component("Script", "lua")
    return w
end

describe("persist", function()
    for _, format in ipairs{"binary", "json"} do
        it("a " .. format .. " save loads into a fresh world as the same world, saving to the same bytes", function()
            local w, root, child, other = scene()
            local data = w:save{format = format}
            assert.are.equal("string", type(data))
            local w2 = fresh()
            local map = w2:load(data)
            assert.are.same({[root] = root, [child] = child, [other] = other}, map)
            assert.are.equal(w:hash(), w2:hash())
            assert.are.equal(data, w2:save{format = format})
            assert.are.same({name = "ship", hp = 3, tags = {"a", "b"}, [1] = true}, w2:get(root, "Script"))
            assert.are.equal(root, w2:get(child, "Parent").entity)
            assert.are.same({target = root, pair = {child, root}}, w2:get(other, "Link"))
            assert.are.same({level = 2, name = "moon"}, w2:resource("config"))
            assert.are.same({hp = 1, max = 2}, w2:resource("Health"))
        end)

        it("a " .. format .. " save loaded into a used world remaps every handle and reference", function()
            local w, root, child, other = scene()
            local data = w:save{format = format}
            local w2 = fresh()
            w2:spawn() w2:spawn() -- take the saved handles
            local map = w2:load(data)
            assert.are_not.equal(root, map[root])
            assert.are.equal(map[root], w2:get(map[child], "Parent").entity)
            assert.are.same({target = map[root], pair = {map[child], map[root]}}, w2:get(map[other], "Link"))
        end)
    end

    it("a JSON save keeps a NaN's payload and sign, hashing as the binary save does", function()
        local w = H.world()
        w:component("Sample", "double v;")
        local bits = string.pack("<I8", 0xfff4000000000abc) -- a signalling NaN with a payload
        local e = w:spawn{Sample = {v = string.unpack("<d", bits)}}
        assert.are.equal(bits, string.pack("<d", w:get(e, "Sample").v))
        local data = w:save{format = "json"}
        assert.truthy(data:find('"-nan(0x4000000000abc)"', 1, true))
        for _, saved in ipairs{data, w:save()} do
            local w2 = H.world()
            w2:component("Sample", "double v;")
            w2:load(saved)
            assert.are.equal(bits, string.pack("<d", w2:get(e, "Sample").v))
            assert.are.equal(w:hash(), w2:hash())
        end
    end)

    it("a reference to an entity the file does not hold raises naming it, the world untouched", function()
        local w, root, child = scene()
        local data = w:save{format = "json"}
        local edited = data:gsub('"entity": ' .. root, '"entity": 1099511627776', 1) -- child's Parent
        assert.are_not.equal(data, edited)
        local w2 = fresh()
        H.unchanged(w2, nil, function() w2:load(edited) end,
                    ("world:load: entity %s component 'Parent' field 'entity' points to 0v256, an entity the file "
                     .. "does not hold"):format(("%dv%d"):format(child % 4294967296, math.floor(child / 4294967296))))
    end)

    it("writes and reads files, and tells a path from saved data", function()
        local w, root = scene()
        local path = os.tmpname()
        w:save(path, {format = "json"})
        local f = assert(io.open(path, "rb"))
        local text = f:read("a")
        f:close()
        assert.truthy(text:match('^{\n "kiln": 2'))
        local w2 = fresh()
        local map = w2:load(path)
        assert.are.equal(root, map[root])
        os.remove(path)
        local msg = H.unchanged(w2, nil, function() w2:load(path .. ".missing") end, "world:load", "cannot open")
        assert.truthy(msg:match("^world:load: cannot open"))
    end)

    it("refuses Lua values that are not plain data, naming entity and component", function()
        local w = H.world()
        w:component("Script", "lua")
        local e = w:spawn{Script = {callback = print}}
        H.raises(function() w:save() end, "world:save: entity " .. H.entity_str(e) .. " component 'Script': function cannot be saved")
        local t = {}
        t.self = t
        w:set(e, "Script", t)
        H.raises(function() w:save() end, "a table that contains itself")
        w:set(e, "Script", {ok = true})
        w:resource("bad", coroutine.create(print))
        H.raises(function() w:save() end, "world:save: Lua resource: thread cannot be saved")
    end)

    it("a refused load raises the reason and leaves the world untouched", function()
        local w = scene()
        local data = w:save()
        local w2 = H.world() -- no Script, no Link
        local msg = H.unchanged(w2, nil, function() w2:load(data) end, "world:load", "Link", "skip_unknown")
        assert.truthy(msg:match("^world:load: component 'Link' is not registered"))
        H.unchanged(w2, nil, function() w2:load(data:sub(1, 100)) end, "world:load: at byte")
        H.unchanged(w2, nil, function() w2:load('{"kiln": 1, "tick": "x"}') end, "world:load: at tick: an integer expected")
        H.raises(function() w2:load(data, {skip = true}) end, "bad argument #2 to 'world:load'")
        H.raises(function() w2:load(42) end, "bad argument #1 to 'world:load'")
        local map = w2:load(data, {skip_unknown = true})
        assert.are.equal(3, #(function() local t = {} for k in pairs(map) do t[#t + 1] = k end return t end)())
    end)

    it("hash ignores how the world is stored, and changes with its content", function()
        local a, b = H.world(), H.world()
        local a1, a2 = a:spawn(), a:spawn()
        local b1, b2 = b:spawn(), b:spawn()
        a:add(a1, "Position", {x = 1}); a:add(a1, "Velocity", {x = 2}); a:add(a2, "Velocity", {x = 3})
        b:add(b2, "Velocity", {x = 3}); b:add(b1, "Velocity", {x = 2}); b:add(b1, "Position", {x = 1})
        assert.are.equal(a:hash(), b:hash())
        b:set(b2, "Velocity", {x = 4})
        assert.are_not.equal(a:hash(), b:hash())
    end)

    it("hash takes in data resources' values, not Lua resources nor the values of Lua components", function()
        -- a Lua resource lives in a Lua state (a mod's in its own), not in the world, and a
        -- "lua" component's value is a Lua value the world holds a reference to (by presence)
        local w = H.world()
        w:component("Score", "int32_t points;")
        w:component("Script", "lua")
        local e = w:spawn{Script = {a = 1}}
        local function unchanged(change)
            local hash, content = w:hash("hex"), w:content_hash("hex")
            change()
            return hash == w:hash("hex") and content == w:content_hash("hex")
        end
        assert.is_false(unchanged(function() w:resource("Score", {points = 1}) end))
        assert.is_false(unchanged(function() w:resource("Score", {points = 2}) end))
        assert.is_true(unchanged(function() w:resource("level", {name = "asteroids"}) end))
        assert.is_true(unchanged(function() w:resource("level", function() end) end))
        assert.is_true(unchanged(function() w:set(e, "Script", {a = 2}) end))
        assert.is_false(unchanged(function() w:remove(e, "Script") end))
    end)

    it("a world loaded at the last tick a save holds refuses to advance, and saves a loadable tick", function()
        local w = H.world()
        local last = '{"kiln": 2, "tick": 9007199254740991, "slots": 0, "free": [], "components": [], ' ..
                     '"entities": [], "resources": {}}'
        w:load(last)
        H.raises(function() w:advance_tick() end,
                 "world:advance_tick: the world tick is at its last, 2^53 - 1")
        local ran = 0
        w:system{name = "count", run = function() ran = ran + 1 end}
        H.raises(function() w:progress(1 / 60) end, "world:progress: the world tick is at its last, 2^53 - 1")
        assert.are.equal(0, ran)
        assert.are.equal(9007199254740991, w:tick())
        local again = H.world()
        again:load(w:save())
        assert.are.equal(9007199254740991, again:tick())
    end)

    it("restore puts back the same entities, values and tick, and the same next handles", function()
        local w = H.world()
        local es = {}
        for i = 1, 10 do es[i] = w:spawn{Position = {x = i}} end
        w:despawn(es[3])
        local snap = w:snapshot()
        local h = w:hash()
        local next1 = w:spawn()
        w:restore(snap)
        for i = 1, 5 do w:despawn(es[i + 5]) end
        w:spawn{Velocity = {}}
        w:set(es[1], "Position", {x = 100})
        w:progress(0.1)
        w:restore(snap)
        assert.are.equal(h, w:hash())
        assert.are.equal(1, w:get(es[1], "Position").x)
        assert.is_false(w:is_alive(es[3]))
        assert.are.equal(next1, w:spawn())
        assert.truthy(snap:bytes() > 0)
        H.raises(function() H.world():restore(snap) end, "bad argument #1 to 'world:restore'", "another world")
        H.raises(function() w:restore({}) end, "bad argument #1 to 'world:restore' (snapshot expected")
    end)

    it("a snapshot refuses Lua-valued components, naming entity and component", function()
        local w = H.world()
        w:component("Script", "lua")
        local e = w:spawn{Script = {}}
        H.raises(function() w:snapshot() end, "world:snapshot: entity " .. H.entity_str(e) .. " component 'Script'")
    end)

    it("names are unique, found by lookup, saved and loaded; clone copies a tree", function()
        local w = H.world()
        w:component("Link", "entity target;")
        local ship = w:spawn{Position = {x = 1}}
        local gun = w:spawn{Position = {x = 2}, Link = {target = ship}}
        w:set_parent(gun, ship)
        w:name(ship, "ship")
        assert.are.equal("ship", w:name(ship))
        assert.are.equal(ship, w:lookup("ship"))
        assert.is_nil(w:lookup("nothing"))
        H.raises(function() w:name(gun, "ship") end, "world:name: name 'ship' is taken by entity " .. H.entity_str(ship))
        H.raises(function() w:name(gun, string.rep("x", 64)) end, "world:name: a name has at most 63 bytes")
        H.raises(function() w:name(gun, 5) end, "bad argument #2 to 'world:name'")
        local copy = w:clone(ship, {tree = true})
        assert.is_nil(w:name(copy))
        local kids = w:children(copy)
        assert.are.equal(1, #kids)
        assert.are.equal(copy, w:get(kids[1], "Link").target)
        assert.are.equal(2, w:get(kids[1], "Position").x)
        local w2 = H.world()
        w2:component("Link", "entity target;")
        w2:load(w:save())
        assert.are.equal(ship, w2:lookup("ship"))
        w:name(ship, nil)
        assert.is_nil(w:lookup("ship"))
        H.raises(function() w:clone(ship, {deep = true}) end, "bad argument #2 to 'world:clone'")
    end)

    it("world:random follows math.random's contract over seeded, per-system streams", function()
        local a, b = H.world(), H.world()
        a:seed(99) b:seed(99)
        assert.are.equal(99, a:seed())
        for _ = 1, 20 do assert.are.equal(a:random(1, 6), b:random(1, 6)) end
        local f = a:random()
        assert.truthy(f >= 0 and f < 1 and H.number_type(f) == "float")
        for _ = 1, 200 do
            local v = a:random(3)
            assert.truthy(v >= 1 and v <= 3 and H.number_type(v) == "integer")
        end
        H.raises(function() a:random(0) end, "bad argument #1 to 'world:random' (interval is empty)")
        H.raises(function() a:random(5, 1) end, "bad argument #2 to 'world:random' (interval is empty)")
        H.raises(function() a:random("x") end, "bad argument #1 to 'world:random'")
        -- a system's stream depends on (seed, system, tick), not on what ran before it
        local function run(w, extra)
            local seen = {}
            w:system{name = "roll", run = function(world) seen[#seen + 1] = world:random(1000000) end}
            if extra then w:random() end
            w:progress(0.1) w:progress(0.1)
            return seen
        end
        local c, d = H.world(), H.world()
        c:seed(5) d:seed(5)
        assert.are.same(run(c, false), run(d, true))
    end)

    it("a prefab keeps its def as it was made: changes to the caller's tables do not reach it", function()
        local w = H.world()
        w:component("Link", "entity to; entity pair[2];")
        local pos, link = {x = 1, y = 2}, {to = 2, pair = {1, 2}}
        local def = {components = {Position = pos, Link = link}, children = {{components = {Position = {x = 3}}}}}
        local p = w:prefab(def)
        pos.x, link.to, link.pair[2] = 99, 1, 1
        def.children[1].components.Position.x = 98
        local root = p:spawn()
        local kid = w:children(root)[1]
        assert.are.equal(1, w:get(root, "Position").x)
        assert.are.equal(3, w:get(kid, "Position").x)
        local l = w:get(root, "Link")
        assert.are.equal(kid, l.to)
        assert.are.same({root, kid}, l.pair)
    end)

    it("a prefab spawns its tree count times; a bad def raises before anything spawns", function()
        local w = H.world()
        local ship = w:prefab{components = {Position = {x = 1}, Health = {hp = 5, max = 5}},
                              children = {{components = {Position = {x = 2}}}, {components = {Frozen = true}}}}
        local root = ship:spawn()
        local kids = w:children(root)
        assert.are.equal(2, #kids)
        assert.are.equal(5, w:get(root, "Health").hp)
        local roots = ship:spawn(3)
        assert.are.equal(3, #roots)
        assert.are.equal(12, w:count())
        H.raises(function() w:prefab{components = {Nope = {}}} end, "world:prefab: def.components: unknown component 'Nope'")
        H.raises(function() w:prefab{children = {{comps = {}}}} end, "world:prefab: def.children[1]: unknown key 'comps'")
        -- a field the component lacks (renamed by an update) was taken, and raised at each spawn only
        H.raises(function() w:prefab{children = {{components = {Health = {health = 5}}}}} end,
                 "world:prefab: def.children[1].components.Health: Health has no field 'health'")
        local key = setmetatable({}, {__tostring = function() error("the key's tostring ran") end})
        H.raises(function() w:prefab{components = {Health = {[key] = 1}}} end,
                 "world:prefab: def.components.Health: Health has no field of type table")
        H.raises(function() w:prefab{components = {Health = 5}} end,
                 "world:prefab: def.components.Health: a table of fields expected, got number")
        H.raises(function() w:prefab{components = {Frozen = {}}} end,
                 "world:prefab: def.components.Frozen: Frozen is a tag: give true, not table")
        H.raises(function() w:prefab(3) end, "bad argument #1 to 'world:prefab'")
        local bad = w:prefab{components = {Position = {}}, children = {{components = {Health = {hp = "x"}}}}}
        local before = w:count()
        H.raises(function() bad:spawn(2) end, "prefab:spawn: ")
        assert.are.equal(before, w:count())
        H.raises(function() ship:spawn(-1) end, "bad argument #1 to 'prefab:spawn'")
    end)
    -- A Lua system shares its stage with C worker systems that may write any column: a save,
    -- snapshot or restore there said only "the world is deferred or iterating".
    it("saves and snapshots from an exclusive system only, the save being the one between frames", function()
        local w = H.world()
        local first = w:spawn{Position = {x = 0}}
        for i = 1, 4 do w:spawn{Position = {x = i}} end
        local snap = w:snapshot()
        local refusal = "called while a schedule runs systems that are not exclusive (they may write any column"
        local inside
        w:system{name = "plain", writes = {"Position"}, run = function(world)
            for _, call in ipairs{"save", "snapshot"} do
                H.raises(function() world[call](world) end, "world:" .. call .. ": " .. refusal)
            end
            H.raises(function() world:restore(snap) end, "world:restore: " .. refusal)
            H.raises(function() world:hash() end, "world:hash: system 'plain' is not exclusive")
            world:set(first, "Position", {x = 42})
        end}
        w:system{name = "autosave", exclusive = true, after = {"plain"}, run = function(world)
            inside = world:save{format = "json"}
        end}
        w:progress(0.016)
        assert.are.equal(w:save{format = "json"}, inside)
        assert.are.equal(42, w:get(first, "Position").x)
    end)
end)
