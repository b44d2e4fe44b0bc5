-- scene_spec.lua: prefabs read from JSON, world:instantiate with prefabs and a parent, the
-- kiln.Instance it returns, world:export read back by instantiate, and hostile scenes refused
-- with the world untouched.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

local function world()
    local w = H.world()
    w:component("Link", "entity target; entity pair[2];")
    w:component("Label", "char text[16];")
    return w
end

local SHIP = [[{"components": {"Position": {"x": 1}, "Health": {"hp": 5, "max": 5}},
 "children": [{"components": {"Link": {"target": 1}, "Position": {"y": 2}}}]}]]

local LEVEL = [[{"version": 1, "name": "moon", "properties": {"gravity": 1.5, "tags": ["a", "b"]},
 "entities": [
  {"name": "base", "components": {"Label": {"text": "base"}}},
  {"name": "hero", "parent": 1, "prefab": "ship", "components": {"Health": {"hp": 9}}},
  {"parent": 2, "components": {"Link": {"target": 1, "pair": [2, 3]}}}
 ]}]]

describe("scenes", function()
    it("a prefab read from JSON spawns its tree with references inside each copy", function()
        local w = world()
        local ship = w:prefab(SHIP)
        local a, b = ship:spawn(), ship:spawn()
        assert.are.equal(4, w:count())
        for _, root in ipairs{a, b} do
            local kids = w:children(root)
            assert.are.equal(1, #kids)
            assert.are.equal(root, w:get(kids[1], "Link").target)
            assert.are.equal(2, w:get(kids[1], "Position").y)
            assert.are.same({hp = 5, max = 5}, w:get(root, "Health"))
        end
        local roots = ship:spawn(3)
        assert.are.equal(3, #roots)
        assert.are.equal(10, w:count())
        H.raises(function() w:prefab('{"components": {"Nope": {}}}') end,
                 "world:prefab: at components.Nope: unknown component")
        H.raises(function() w:prefab('{"children": [{"components": {"Link": {"target": 7}}}]}') end,
                 "world:prefab: at children[0].components.Link.target: entity 7 is not in the prefab (1..2, or null)")
        H.raises(function() w:prefab("/no/such/prefab.json") end, "world:prefab: cannot open /no/such/prefab.json")
        H.raises(function() w:prefab(5) end, "bad argument #1 to 'world:prefab'")
        -- a table def refuses Parent as the JSON form does (it moved every copy under that parent)
        local count = w:count()
        for _, def in ipairs{{components = {Position = {}, Parent = {entity = a}}},
                             {children = {{components = {Parent = {entity = 1}}}}}} do
            H.raises(function() w:prefab(def) end, "component 'Parent' is given by the tree (children, parent), " ..
                     "not as a component")
        end
        assert.are.equal(count, w:count())
    end)

    it("instantiate spawns the scene, its prefabs and links, and returns an instance", function()
        local w = world()
        local ship = w:prefab(SHIP)
        local holder = w:spawn()
        local inst = w:instantiate(LEVEL, {prefabs = {ship = ship}, parent = holder})
        assert.are.equal("moon", inst.name)
        assert.are.same({gravity = 1.5, tags = {"a", "b"}}, inst.properties)
        assert.are.equal(4, #inst.spawned)
        assert.are.same({inst:entity("base")}, inst.roots)
        local base, hero = inst:entity("base"), inst:entity("hero")
        assert.is_nil(inst:entity("nobody"))
        assert.are.equal(holder, w:get(base, "Parent").entity)
        assert.are.equal(base, w:get(hero, "Parent").entity)
        assert.are.same({hp = 9, max = 5}, w:get(hero, "Health")) -- merged over the prefab's
        assert.are.equal("base", w:get(base, "Label").text)
        local third = inst.spawned[4]
        assert.are.same({target = base, pair = {hero, third}}, w:get(third, "Link"))
        -- a second instance coexists; each despawns its own
        local again = w:instantiate(LEVEL, {prefabs = {ship = ship}})
        assert.are_not.equal(again:entity("hero"), hero)
        assert.are.equal(9, w:count())
        inst:despawn()
        assert.are.equal(5, w:count())
        assert.is_true(w:is_alive(again:entity("hero")))
        assert.truthy(tostring(again):match("^kiln.Instance %(moon, 4 entities%)"))
    end)

    it("an instance of a scene without a name prints its count alone", function()
        local w = world()
        local inst = w:instantiate('{"version": 1, "entities": [{"name": "t"}]}')
        assert.are.equal("", inst.name)
        assert.are.equal("kiln.Instance (1 entities)", tostring(inst))
    end)

    it("a prefab made from a table serves a scene too, unless it holds Lua values", function()
        local w = world()
        local tower = w:prefab{components = {Position = {x = 3}}, children = {{components = {Frozen = true}}}}
        local inst = w:instantiate('{"version": 1, "entities": [{"name": "t", "prefab": "tower"}]}',
                                   {prefabs = {tower = tower}})
        assert.are.equal(3, w:get(inst:entity("t"), "Position").x)
        assert.are.equal(2, #inst.spawned)
        w:component("Script", "lua")
        local scripted = w:prefab{components = {Script = {on = true}}}
        H.unchanged(w, nil, function()
            w:instantiate('{"version": 1, "entities": [{"prefab": "s"}]}', {prefabs = {s = scripted}})
        end, "world:instantiate: prefab 's': component 'Script' holds Lua values")
        H.raises(function() w:instantiate('{"version": 1, "entities": []}', {prefabs = {s = 5}}) end,
                 "bad argument #2 to 'world:instantiate' (prefabs.s: kiln.Prefab expected, got number)")
        H.raises(function() w:instantiate('{"version": 1, "entities": []}', {parent = 99}) end,
                 "world:instantiate: entity 99v0 is not alive")
        H.raises(function() w:instantiate('{"version": 1, "entities": []}', {prefab = {}}) end,
                 "bad argument #2 to 'world:instantiate'")
    end)

    it("a table-made prefab's spawn stopped at any instruction takes back all that call spawned", function()
        -- as a spent budget or a console statement's time limit stops Lua code: from the n-th
        -- instruction on every one raises, pcall or not (this spec's own lines excepted, so
        -- that it can look afterwards); the spawn is Lua code, its taking back is not
        local w = world()
        local p = w:prefab{components = {Position = {x = 1}}, children = {
            {components = {Frozen = true}, children = {{components = {Link = {target = 1}}}}}}}
        w:spawn{Position = {x = 9}}
        local me = debug.getinfo(1, "S").source
        local jit_was = H.luajit and jit.status()
        if H.luajit then jit.off() end -- compiled code calls no hooks
        local before, hash = w:count(), w:hash()
        -- locals only while the hook is set: busted's globals are found by Lua code of its own
        local sethook, getinfo, pcall, error = debug.sethook, debug.getinfo, pcall, error
        local n, ok, err = 0, false, nil
        while not ok and n < 50000 do
            n = n + 1
            local count = 0
            sethook(function()
                count = count + 1
                if count >= n and getinfo(2, "S").source ~= me then error("stopped", 0) end
            end, "", 1)
            ok, err = pcall(p.spawn, p, 4)
            sethook()
            if not ok then
                -- stopped in the method's own checks, or in its spawns (named for the method)
                assert.is_true(err == "stopped" or err:find("prefab:spawn: stopped", 1, true) ~= nil, err)
                assert.are.equal(before, w:count(), "stray entities after a stop at instruction " .. n)
                assert.are.equal(hash, w:hash(), "the world changed after a stop at instruction " .. n)
            end
        end
        if H.luajit and jit_was then jit.on() end
        assert.is_true(ok, "the spawn never ran to its end")
        assert.is_true(n > 100, "the hook stopped nothing")
        assert.are.equal(before + 12, w:count())
    end)

    it("a table-made prefab's spawn whose world is closed mid-way fails without touching it", function()
        -- the world closed by Lua code between the spawns (a finalizer or a hook can), then the
        -- spawn raised: the taking back must stop at the closed world, whose entities went
        -- with it (under ASan a despawn there would read freed memory)
        local me = debug.getinfo(1, "S").source
        local jit_was = H.luajit and jit.status()
        if H.luajit then jit.off() end
        local sethook, getinfo, pcall, error = debug.sethook, debug.getinfo, pcall, error
        local closed_mid_spawn, n = 0, 0
        repeat
            n = n + 1
            local w = world()
            local p = w:prefab{components = {Position = {x = 1}}, children = {{components = {Frozen = true}}}}
            local count, fired = 0, false
            sethook(function()
                count = count + 1
                if count >= n and not fired and getinfo(2, "S").source ~= me then
                    fired = true
                    w:close()
                    error("closed", 0)
                end
            end, "", 1)
            local ok, err = pcall(p.spawn, p, 3)
            sethook()
            if not ok and err:find("prefab:spawn: closed", 1, true) then
                closed_mid_spawn = closed_mid_spawn + 1
                H.raises(function() w:count() end, "closed")
            end
        until ok
        if H.luajit and jit_was then jit.on() end
        assert.is_true(closed_mid_spawn > 5, "no close came between the spawns")
    end)

    it("a prefab's spawn on a closed world names the method, not kiln's source", function()
        -- a table-made prefab raised "lua/kiln/prefab.lua:188: attempt to use a closed world"
        local w = world()
        local made = w:prefab{components = {Position = {x = 1}}}
        local read = w:prefab(SHIP)
        w:close()
        for _, p in ipairs{made, read} do
            for _, n in ipairs{0, 3} do
                local ok, err = pcall(p.spawn, p, n)
                assert.is_false(ok)
                assert.are.equal("prefab:spawn: the world is closed", err)
            end
        end
    end)

    it("a prefab made from a table reads it raw: no __pairs, __index or __len runs", function()
        -- a __pairs returning a number reached kiln's own loop ("world:prefab:
        -- lua/kiln/prefab.lua:65: attempt to call a number value")
        local w = world()
        local odd = {__pairs = function() return 1, 2, 3 end, __index = function() error("index") end,
                     __len = function() return 5 end}
        local def = setmetatable({components = setmetatable({Position = {x = 4}}, odd),
                                  children = setmetatable({{components = {Frozen = true}}}, odd)}, odd)
        local root = w:prefab(def):spawn()
        assert.are.equal(4, w:get(root, "Position").x)
        assert.are.equal(1, #w:children(root))
        H.raises(function() w:prefab(setmetatable({components = {Nope = {}}}, odd)) end,
                 "world:prefab: def.components: unknown component 'Nope'")
    end)

    it("a prefab keeps what it spawns out of a script's reach", function()
        -- a prefab was a table holding world, def, refs, held and native as fields: a script
        -- could swap them after world:prefab checked the def (an unchecked Parent, another
        -- world, a native of its own spawn called)
        for _, def in ipairs{{components = {Position = {x = 1}}, children = {{components = {Link = {target = 1}}}}},
                             SHIP} do
            local w = world()
            local p = w:prefab(def)
            assert.is_nil(next(p))
            for _, k in ipairs{"world", "def", "refs", "held", "native"} do assert.is_nil(p[k], k) end
            local other = world()
            p.world, p.native, p.refs, p.held = other, {spawn = function() return "fake" end}, {{5, "Link", "target", nil, 1}}, {}
            p.def = {components = {Parent = {parent = w:spawn()}}, children = {}, nodes = 0}
            local before = w:count()
            local roots = p:spawn(2)
            assert.are.equal(2, #roots)
            assert.are.equal(before + 4, w:count())
            assert.are.equal(0, other:count())
            local child = w:children(roots[2])[1]
            assert.are.equal(roots[2], w:get(child, "Link").target)
            assert.is_nil(w:get(roots[2], "Parent"))
        end
    end)

    local hostile = {
        {'{"version": 3, "entities": []}', "world:instantiate: at version: version 3 is not supported (this build reads version 1)"},
        {'{"version": 1, "entities": [{"prefab": "nope"}]}', "world:instantiate: at entities[0].prefab: unknown prefab 'nope'"},
        {'{"version": 1, "entities": [{"components": {"Laser": {}}}]}', "world:instantiate: at entities[0].components.Laser: unknown component"},
        {'{"version": 1, "entities": [{"parent": 2}, {"parent": 1}]}', "world:instantiate: at entities[0].parent: parent links form a cycle"},
        {'{"version": 1, "entities": [{"components": {"Link": {"target": 5}}}]}', "entity 5 is not in the scene (1..1, or null)"},
        {'{"version": 1, "entities": [{"components": {"Position": {"x": "far"}}}]}', "at entities[0].components.Position.x: a number expected, got a string"},
        {'{"version": 1, "entities": [{}', "world:instantiate: at line 1"},
    }
    for i, case in ipairs(hostile) do
        it("refuses hostile scene " .. i .. " saying where, the world untouched", function()
            local w = world()
            w:spawn{Position = {x = 1}}
            H.unchanged(w, nil, function() w:instantiate(case[1]) end, case[2])
        end)
    end

    it("a scene cut at any byte is refused and the world is untouched", function()
        local w = world()
        local ship = w:prefab(SHIP)
        w:spawn{Position = {x = 1}}
        local before = w:hash()
        for n = 0, #LEVEL - 1 do
            local ok, err = pcall(w.instantiate, w, LEVEL:sub(1, n), {prefabs = {ship = ship}})
            assert.is_false(ok, "a cut at " .. n .. " landed")
            assert.truthy(tostring(err):match("^world:instantiate: "), err)
            assert.are.equal(before, w:hash())
        end
    end)

    -- export reads every component through the core: from a system that did not declare them,
    -- the access guard aborted the process (a pcall could not catch it)
    it("export is refused inside a system that is not exclusive, and runs in an exclusive one", function()
        local w = world()
        w:instantiate(LEVEL, {prefabs = {ship = w:prefab(SHIP)}})
        local got = {}
        w:system{name = "reader", reads = {"Position"}, run = function(world)
            got.ok, got.err = pcall(world.export, world)
        end}
        w:system{name = "whole", exclusive = true, run = function(world) got.text = world:export() end}
        assert.is_true((w:progress(0)))
        assert.is_false(got.ok)
        assert.are.equal("world:export: system 'reader' is not exclusive: an export reads every component", got.err)
        assert.are.equal(w:export(), got.text)
    end)

    it("export writes what instantiate reads, and exporting the copy gives the same text", function()
        local w = world()
        local ship = w:prefab(SHIP)
        local inst = w:instantiate(LEVEL, {prefabs = {ship = ship}})
        w:name(inst:entity("hero"), "hero")
        local text = w:export(nil, {name = "copy"})
        assert.truthy(text:match('^{\n "version": 1,\n "name": "copy"'))
        local w2 = world()
        w2:spawn() -- handles differ from the first world's
        local copy = w2:instantiate(text)
        assert.are.equal(#inst.spawned, #copy.spawned)
        assert.are.equal(copy:entity("hero"), w2:lookup("hero"))
        w2:despawn(4294967296) -- the filler (0v1)
        assert.are.equal(text, w2:export(nil, {name = "copy"}))
        -- some roots only: references outside become null
        local part = w:export({inst:entity("hero")})
        local w3 = world()
        local sub = w3:instantiate(part)
        assert.are.equal(3, #sub.spawned)
        local link = w3:get(sub.spawned[3], "Link")
        assert.are.same({target = nil, pair = {sub.spawned[1], sub.spawned[3]}}, {target = link.target ~= 0 and link.target or nil, pair = link.pair})
        H.raises(function() w:export({12345}) end, "world:export: entity")
        H.raises(function() w:export(5) end, "bad argument #1 to 'world:export'")
        w:component("Script", "lua")
        w:spawn{Script = {}}
        H.raises(function() w:export() end, "component 'Script' has hooks")
        local w4 = world()
        w4:spawn{Label = {text = "\xff"}}
        H.raises(function() w4:export() end, "world:export: entity 0v1 component 'Label' field 'text' is not UTF-8 text")
    end)

    it("a large forest built in one tick exports in order and round-trips", function()
        -- (how its time grows with the forest is the benchmark lua_export_forest, not a timed test)
        local w = world()
        local prev
        for i = 1, 5000 do
            local e = w:spawn{Position = {x = i}, Link = {target = prev or 0}}
            if prev and i % 10 ~= 0 then w:set_parent(e, prev) end
            prev = e
        end
        local text = w:export()
        local w2 = world()
        local inst = w2:instantiate(text)
        assert.are.equal(5000, #inst.spawned)
        assert.are.equal(501, #inst.roots) -- entity 1, then every tenth
        assert.are.equal(text, w2:export())
    end)

    it("a parent chain too deep is refused at its scene entity before anything spawns", function()
        local w = world()
        local holder = w:spawn()
        for _ = 1, 250 do
            local e = w:spawn()
            w:set_parent(e, holder)
            holder = e
        end
        -- a chain of 7 under a parent 250 deep ends 257 deep: entity 7 is the one over
        local list = {"{}"}
        for k = 2, 7 do list[k] = '{"parent": ' .. (k - 1) .. '}' end
        local doc = '{"version": 1, "entities": [' .. table.concat(list, ", ") .. ']}'
        local want = "world:instantiate: at entities[6].parent: entity 7 would be 257 deep (the scene under parent "
        local hash, count = w:hash(), w:count()
        local path = os.tmpname()
        local f = assert(io.open(path, "w"))
        f:write(doc)
        f:close()
        for _, scene in ipairs{doc, path} do
            H.unchanged(w, nil, function() w:instantiate(scene, {parent = holder}) end, want,
                        "v1): a parent chain deeper than 256")
            assert.are.equal(hash, w:hash()) -- no slot was taken and given back either
            assert.are.equal(count, w:count())
        end
        os.remove(path)
        assert.are.equal(7, #w:instantiate(doc).spawned)
    end)

    it("reads scenes and prefabs from files", function()
        local w = world()
        local dir = os.tmpname()
        local f = assert(io.open(dir, "w"))
        f:write(LEVEL)
        f:close()
        local pf = os.tmpname()
        f = assert(io.open(pf, "w"))
        f:write(SHIP)
        f:close()
        local inst = w:instantiate(dir, {prefabs = {ship = w:prefab(pf)}})
        assert.are.equal(4, #inst.spawned)
        os.remove(dir)
        os.remove(pf)
        H.raises(function() w:instantiate(dir) end, "world:instantiate: cannot open")
    end)
end)
