-- persist_redteam_spec.lua: cases found by red-teaming the persistence and world-building
-- paths reached from Lua (saves, loads, snapshots, clones, prefabs, scenes); each names what
-- used to go wrong.
local kiln = require "kiln"
local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local H = dofile(here .. "helpers.lua")
local M = dofile(here .. "mods_helpers.lua")

describe("persist red team", function()
    -- A prefab made from a table whose entity fields name its own nodes is deferred inside a
    -- system like world:spawn. It used to spawn each copy and then world:set the node
    -- references on it, which refuses a spawned-but-reserved entity: every such spawn inside
    -- a system raised "prefab:spawn: entity 2v1 is not alive".
    it("a prefab from a table with node references spawns inside a system", function()
        local w = H.world()
        w:component("Link", "entity target; entity pair[2];")
        local p = w:prefab{components = {Position = {x = 1}, Link = {target = 2, pair = {1, 0}}},
                           children = {{components = {Link = {target = 1}}}}}
        local result
        w:system{name = "spawner", writes = {"Position", "Link", "Parent"}, run = function()
            if result == nil then result = {pcall(p.spawn, p, 2)} end
        end}
        w:progress(0.1)
        assert.is_true(result[1], result[2])
        assert.are.equal(2, #result[2])
        for _, root in ipairs(result[2]) do
            local link = w:get(root, "Link")
            local child = w:children(root)[1]
            assert.are.equal(child, link.target)
            assert.are.same({root, 0}, link.pair)
            assert.are.equal(1, w:get(root, "Position").x)
            assert.are.equal(root, w:get(child, "Link").target)
        end
        assert.are.equal(4, w:count())
    end)
    -- The options of save, load, clone, instantiate and export were read with lua_getfield,
    -- so an __index on the options table ran Lua inside the method, after the world was
    -- checked open: one that closed the world made the C call run on a freed world (an
    -- assertion abort, a NULL dereference without asserts). Options are read raw now, as
    -- every other method reads them: the metamethod never runs. world:export took its list
    -- of roots' length with luaL_len, whose __len could close the world the same way.
    it("options and lists are read raw: an __index or __len closing the world never runs mid-call", function()
        local calls = {
            "w:load(data, evil)", "w:save(evil)", "w:clone(e, evil)",
            "w:instantiate('{\"version\": 1, \"entities\": [{}]}', evil)", "w:export(nil, evil)",
            "w:export(evil_len)",
        }
        for _, call in ipairs(calls) do
            local ok, out = H.run_isolated([[
                local kiln = require "kiln"
                local w = kiln.world()
                w:component("Position", "float x, y;")
                local e = w:spawn{Position = {x = 1}}
                local data = w:save()
                local evil = setmetatable({}, {__index = function() w:close() end})
                local evil_len = setmetatable({}, {__len = function() w:close() return 1 end})
                local ok, err = pcall(function() return ]] .. call .. [[ end)
                print(ok, err, pcall(w.count, w))
            ]])
            assert.is_true(ok, call .. ": " .. out)
            assert.matches("^true\t.*\ttrue\t", out, nil, call)
        end
    end)
    -- world:instantiate converts a table-made prefab from its def, which a script reached as
    -- prefab.def. The conversion read it with lua_getfield and luaL_len (metamethods ran:
    -- an __index or __len closing the world crashed the C calls that followed) and named a
    -- component by lua_tostring of any key ("unknown component '(null)'" for a table key).
    -- A prefab's parts are now out of a script's reach: what it sets on the prefab is not read.
    it("a prefab's def is out of a script's reach, and a table that looks like a prefab is refused", function()
        local ok, out = H.run_isolated([[
            local kiln = require "kiln"
            local w = kiln.world()
            w:component("Position", "float x, y;")
            local scene = '{"version": 1, "entities": [{"prefab": "p"}]}'
            local function try(p)
                local ok, err = pcall(w.instantiate, w, scene, {prefabs = {p = p}})
                print(ok, err, pcall(w.count, w))
            end
            local p = w:prefab{components = {Position = {x = 1}}}
            print(p.def, p.world, p.native, next(p))
            p.def = {components = {[{}] = true}}
            p.world, p.native = kiln.world(), setmetatable({}, {__index = function() w:close() end})
            try(p)
            local forged = setmetatable({}, {__name = "kiln.Prefab", __index = function(_, k)
                if k == "world" then return w end
                w:close()
            end})
            try(forged)
        ]])
        assert.is_true(ok, out)
        local lines = {}
        for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
        assert.are.equal(3, #lines, out)
        assert.are.equal("nil\tnil\tnil\tnil", lines[1])
        assert.matches("^true\tkiln%.Instance.*\ttrue\t1$", lines[2])
        assert.matches("^false\tbad argument #2 to 'world:instantiate' %(prefabs%.p: kiln%.Prefab expected, got table%)\ttrue\t1$", lines[3])
    end)
    -- An array field given the wrong number of elements in JSON (a load, a prefab, a scene)
    -- was refused with "an array of the field's count expected, got an array", which names
    -- neither count: the message now says both.
    it("a JSON array field of the wrong length is refused naming both lengths", function()
        local w = H.world()
        w:component("Vec", "float v[3];")
        w:spawn{Vec = {v = {1, 2, 3}}}
        local text = w:save{format = "json"}
        local cut = text:gsub('("v": )%b[]', '%1[1, 2]')
        assert.are_not.equal(text, cut)
        local fresh = H.world()
        fresh:component("Vec", "float v[3];")
        local h = fresh:hash()
        local ok, err = pcall(fresh.load, fresh, cut)
        assert.is_false(ok)
        assert.are.equal("world:load: at entities[0].components.Vec.v: an array of 3 elements expected, got one of 2", err)
        assert.are.equal(h, fresh:hash())
        ok, err = pcall(w.prefab, w, '{"components": {"Vec": {"v": "abc"}}}')
        assert.is_false(ok)
        assert.matches("world:prefab: at components.Vec.v: an array of 3 elements expected, got a string$", err)
        ok, err = pcall(w.instantiate, w, '{"version": 1, "entities": [{"components": {"Vec": {"v": [1, 2, 3, 4]}}}]}')
        assert.is_false(ok)
        assert.matches("world:instantiate: at entities%[0%]%.components%.Vec%.v: an array of 3 elements expected, got one of 4$", err)
    end)
    -- The decoder of Lua values took more than the encoder writes: a table keyed by a table,
    -- a table nested 101 deep, Lua resources keyed by something other than a name. A crafted
    -- save holding one loaded, and the world then failed every save ("a table used as a key
    -- cannot be saved"). Such a value is refused as corrupt, the world untouched.
    it("a Lua value the encoder would refuse does not load from a crafted save", function()
        local w = kiln.world()
        w:component("Script", "lua")
        w:spawn{Script = {x = true}}
        local text = w:save{format = "json"}
        local value = text:match('"Script": "(%x+)"')
        assert.are.equal("060100000005010000007802", value)
        local deep = string.rep("060100000005010000007" .. "8", 100) .. "0600000000"
        local crafted = {
            text:gsub(value, "06010000000600000000" .. "02"), -- {[{}] = true}
            text:gsub(value, deep),                               -- 101 tables
            (text:gsub('"host": "0600000000"', '"host": "06010000000201"')), -- resources {[true] = false}
        }
        for i, bad in ipairs(crafted) do
            local into = kiln.world()
            into:component("Script", "lua")
            local keep = into:spawn{Script = {kept = 1}}
            into:resource("config", {level = 2})
            local h = into:hash()
            local ok, err = pcall(into.load, into, bad)
            assert.is_false(ok, "crafted save " .. i .. " loaded")
            assert.matches(i == 3 and "the Lua resources are corrupt" or "its Lua value is corrupt", err)
            assert.are.equal(h, into:hash())
            assert.are.equal(1, into:count())
            assert.are.same({kept = 1}, into:get(keep, "Script"))
            assert.are.same({level = 2}, into:resource("config"))
            into:save() -- still saves
        end
        -- 100 deep is the limit both ways
        local ok100 = kiln.world()
        ok100:component("Script", "lua")
        ok100:load((text:gsub(value, string.rep("060100000005010000007" .. "8", 99) .. "0600000000")))
        ok100:save()
    end)
    -- A path holding a NUL byte reached fopen cut at the NUL: world:save("dir/a\0b") wrote
    -- dir/a and world:load read it, where world:prefab and world:instantiate refuse such a path.
    it("a path with a NUL byte is refused by save and load, no file written", function()
        local dir = os.tmpname()
        os.remove(dir)
        local w = H.world()
        w:spawn{Position = {x = 1}}
        local ok, err = pcall(w.save, w, dir .. "\0.other")
        assert.is_false(ok)
        assert.are.equal("bad argument #1 to 'world:save' (a path without NUL bytes expected)", err)
        assert.is_nil(io.open(dir, "rb"))
        w:save(dir)
        local fresh = H.world()
        ok, err = pcall(fresh.load, fresh, dir .. "\0.other")
        os.remove(dir)
        assert.is_false(ok)
        assert.are.equal("bad argument #1 to 'world:load' (a path without NUL bytes expected)", err)
        assert.are.equal(0, fresh:count())
    end)
    -- A scene's properties may hold a string with a NUL ("\u0000"), which the scene's reader
    -- accepts; instance.properties re-read the kept text without allowing NULs and raised
    -- "instance.properties: out of memory", so the properties could never be read.
    it("scene properties holding a NUL in a string read back whole", function()
        local w = H.world()
        local inst = w:instantiate('{"version": 1, "properties": {"s": "x\\u0000y", "n": [1, "a\\u0000"]}, "entities": []}')
        local props = inst.properties
        assert.are.equal("x\0y", props.s)
        assert.are.same({1, "a\0"}, props.n)
    end)
    -- world:name refuses a name holding a NUL, but world:lookup passed its string to C, which
    -- read up to the NUL: lookup("hero\0anything") found the entity named "hero".
    it("lookup of a string holding a NUL finds nothing", function()
        local w = H.world()
        local e = w:spawn{}
        w:name(e, "hero")
        assert.are.equal(e, w:lookup("hero"))
        assert.is_nil(w:lookup("hero\0anything"))
        assert.is_nil(w:lookup("hero\0"))
    end)
    -- Names given to scenes from Lua were handed to C cut at a NUL byte: instance:entity
    -- ("hero\0x") found "hero", a prefab keyed "ship\0x" served a scene asking for "ship",
    -- and world:export{name = "a\0b"} wrote a scene named "a". Each is refused or finds nothing.
    it("scene names holding a NUL are refused or find nothing, not cut", function()
        local w = H.world()
        local inst = w:instantiate('{"version": 1, "entities": [{"name": "hero"}]}')
        assert.is_not_nil(inst:entity("hero"))
        assert.is_nil(inst:entity("hero\0x"))
        local p = w:prefab{components = {Position = {x = 1}}}
        local count = w:count()
        local ok, err = pcall(w.instantiate, w, '{"version": 1, "entities": [{"prefab": "ship"}]}',
                              {prefabs = {["ship\0x"] = p}})
        assert.is_false(ok)
        assert.matches("prefabs are named by strings without NUL bytes", err, 1, true)
        assert.are.equal(count, w:count())
        ok, err = pcall(w.export, w, nil, {name = "a\0b"})
        assert.is_false(ok)
        assert.matches("name must be a string without NUL bytes", err, 1, true)
    end)
    -- A mod may save without a path, under its memory limit. When the buffer the save is
    -- collected in could not grow, kiln reported its writer's refusal and the mod read
    -- "world:save: the writer refused the data" instead of running out of memory.
    it("a mod's save that runs out of memory for its data says so", function()
        local dir = M.folder()
        local w, mods = M.host{memory = 262144}
        for i = 1, 300 do w:spawn{Position = {x = i}} end
        local seen, failed = {}, 0
        for pad = 0, 160 do
            M.write(dir, "saver.lua", string.format([[
                local junk = {}
                for i = 1, %d do junk[i] = string.rep("y", 1000) .. i end
                local ok, err = pcall(world.save, world, {format = "json"})
                junk = nil
                error(ok and "saved" or err, 0)
            ]], pad))
            local _, err = mods:load(dir .. "/saver.lua")
            local msg = err:gsub("^mods:load: mod 'saver': ", "")
            seen[msg] = true
            if msg == "world:save: out of memory" then failed = failed + 1 end
        end
        mods:close()
        w:close()
        M.cleanup()
        assert.is_nil(seen["world:save: the writer refused the data"])
        assert.is_true(failed > 0, "no save ran out of memory: the sweep missed")
    end)
    -- world:load tells data from a path by its first bytes: "KILNSAVE" or a '{'. A binary
    -- save cut to under 8 bytes ("KILNS") was taken for a path and raised "cannot open
    -- KILNS...", as if the caller had named a file. A non-empty start of the magic is data
    -- now: the load says the save is truncated, and the world is left as it was.
    it("a binary save cut to under 8 bytes is refused as truncated, not opened as a path", function()
        local w = H.world()
        for i = 1, 3 do w:spawn{Position = {x = i}, Health = {hp = i}} end
        local data = w:save()
        assert.are.equal("KILNSAVE", data:sub(1, 8))
        for n = 1, 7 do
            local cut = data:sub(1, n)
            local msg = H.unchanged(w, nil, function() return w:load(cut) end, "world:load: ")
            assert.is_nil(msg:find("cannot open", 1, true), n .. " bytes: " .. msg)
            assert.is_truthy(msg:find("truncated", 1, true), n .. " bytes: " .. msg)
        end
    end)
    -- A host's Lua system under an instruction budget (kiln.world{instructions = N}) pays for
    -- a JSON save's C work as a mod does: 1024 steps a unit of the writer's progress. The save
    -- stops part way, returns nothing and writes no file; a binary save, charged nothing, runs.
    it("a JSON save inside a budgeted host system is charged, and stops with no file left", function()
        local w = H.world({instructions = 200000})
        for i = 1, 20000 do w:spawn{Position = {x = i, y = -i}, Health = {hp = i, max = i}} end
        local path = os.tmpname()
        os.remove(path)
        local saved = {}
        w:system{name = "saver", exclusive = true, run = function(world)
            saved.binary = #world:save()
            saved.ok, saved.err = pcall(world.save, world, {format = "json"})
            saved.file_ok, saved.file_err = pcall(world.save, world, path, {format = "json"})
        end}
        local ok, failures = w:progress(0)
        assert.is_true(ok, failures and failures[1] and failures[1].message)
        assert.is_true(saved.binary > 20000 * 16)
        for _, key in ipairs{"", "file_"} do
            assert.is_false(saved[key .. "ok"])
            assert.matches("world:save could take [%d.e+]+ steps, past what is left of the budget of system " ..
                           "'saver'", saved[key .. "err"])
        end
        assert.is_nil(io.open(path, "rb"), "a stopped save left a file")
        local json = w:save{format = "json"} -- outside the system, unbudgeted, it runs whole
        local w2 = H.world()
        w2:load(json)
        assert.are.equal(20000, w2:count())
    end)
end)
