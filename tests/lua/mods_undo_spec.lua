-- mods_undo_spec.lua: a mod load or reload that fails gives back the slots of what its top level
-- spawned, so world:hash (which sees the free list) is what it was; only handles that may have
-- left the mod (a call out of it, an entity field of the world) stay spent.
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local M = dofile(here .. "mods_helpers.lua")
local kiln = require "kiln"

-- Loads src as mod name into w's manager; it must fail with a message holding want.
local function fails(mods, dir, name, src, want)
    M.write(dir, name .. ".lua", src)
    local ok, err = mods:load(dir .. "/" .. name .. ".lua")
    assert.is_nil(ok)
    assert.matches(want, err, 1, true)
end

-- Twenty spawns, some of them with a Target pointing at the one before, some despawned by the host
-- first, so the free list has an order of its own.
local function used_world(opts)
    local w, mods, host = M.host(opts)
    w:component("Target", "entity who;")
    local made = {}
    for i = 1, 20 do made[i] = w:spawn{Position = {x = i, y = 0}} end
    for _, i in ipairs{4, 17, 9} do w:despawn(made[i]) end
    return w, mods, host, made
end

describe("a failed mod load", function()
    after_each(M.cleanup)

    it("gives back the slots of what its top level spawned: the hash and the next handles are as before", function()
        local dir = M.folder()
        local w, mods = used_world()
        local twin = used_world()
        local hash, content, count = w:hash("hex"), w:content_hash("hex"), w:count()
        fails(mods, dir, "spender", [[
            world:component("Mine", "entity other; int32_t n;")
            local last
            for i = 1, 40 do last = world:spawn{Position = {x = i, y = i}, Mine = {other = last, n = i}} end
            error("changed my mind")
        ]], "changed my mind")
        assert.are.equal(count, w:count())
        assert.are.equal(content, w:content_hash("hex"))
        assert.are.equal(hash, w:hash("hex"))
        for _ = 1, 5 do assert.are.equal(twin:spawn{}, w:spawn{}) end
        assert.are.same({}, M.frames(w, 1))
    end)

    it("past its instruction budget or its memory gives its slots back too", function()
        local dir = M.folder()
        local w, mods = used_world{instructions = 200000, memory = 1024 * 1024}
        local hash = w:hash()
        fails(mods, dir, "looper", [[
            for i = 1, 10 do world:spawn{Position = {x = i, y = i}} end
            while true do end
        ]], "mod 'looper'")
        assert.are.equal(hash, w:hash())
        fails(mods, dir, "hog", [[
            for i = 1, 10 do world:spawn{Position = {x = i, y = i}} end
            local t = {}
            for i = 1, 1e8 do t[i] = {i} end
        ]], "mod 'hog'")
        assert.are.equal(hash, w:hash())
    end)

    it("after calling out of the mod gives back only what it spawned after the call", function()
        local dir = M.folder()
        local held
        local w, mods = used_world{allow = {keep = function(e) held = e end}}
        local twin = used_world()
        local hash = w:hash("hex")
        fails(mods, dir, "early", [[
            keep(0)
            for i = 1, 3 do world:spawn{Position = {x = i, y = i}} end
            error("changed my mind")
        ]], "changed my mind")
        assert.are.equal(hash, w:hash("hex")) -- the call came before any spawn: nothing to show
        -- the host was handed the second handle: it and the one before stay spent, the third not
        fails(mods, dir, "leaky", [[
            local a = world:spawn{Position = {x = 1, y = 1}}
            keep(world:spawn{Position = {x = 2, y = 2}})
            world:spawn{Position = {x = 3, y = 3}}
            error("changed my mind")
        ]], "changed my mind")
        assert.is_false(w:is_alive(held))
        assert.are_not.equal(hash, w:hash("hex"))
        local a, b = twin:spawn{}, twin:spawn{}
        twin:despawn(b)
        twin:despawn(a)
        assert.are.equal(twin:hash("hex"), w:hash("hex"))
        assert.are_not.equal(held, w:spawn{}) -- the handle the host holds never names another
    end)

    it("keeps spent the slots of handles an entity field of the world still holds", function()
        local dir = M.folder()
        local w, mods, _, made = used_world()
        local twin, _, _, twin_made = used_world()
        local hash = w:hash("hex")
        fails(mods, dir, "pointer", string.format([[
            local a = world:spawn{Position = {x = 1, y = 1}}
            local b = world:spawn{Position = {x = 2, y = 2}}
            world:add(%d, "Target", {who = b}) -- taken off again: no trace
            world:spawn{Position = {x = 3, y = 3}}
            error("changed my mind")
        ]], made[1]), "changed my mind")
        assert.are.equal(hash, w:hash("hex"))
        assert.is_nil(w:get(made[1], "Target"))
        w:add(made[2], "Target", {who = made[3]})
        twin:add(twin_made[2], "Target", {who = twin_made[3]})
        hash = w:hash("hex")
        fails(mods, dir, "writer", string.format([[
            world:spawn{Position = {x = 1, y = 1}}
            local b = world:spawn{Position = {x = 2, y = 2}}
            world:set(%d, "Target", {who = b}) -- an in-place write: it stays, and b with it
            world:spawn{Position = {x = 3, y = 3}}
            error("changed my mind")
        ]], made[2]), "changed my mind")
        local held = w:get(made[2], "Target").who
        assert.is_false(w:is_alive(held))
        local a, b = twin:spawn{}, twin:spawn{}
        twin:set(twin_made[2], "Target", {who = b})
        twin:despawn(b)
        twin:despawn(a)
        assert.are.equal(twin:hash("hex"), w:hash("hex"))
        assert.are_not.equal(hash, w:hash("hex"))
    end)
end)

describe("a failed mod reload", function()
    after_each(M.cleanup)

    it("gives back the slots of what the new version spawned; the old version's entities stay", function()
        local dir = M.folder()
        local w, mods = used_world()
        M.write(dir, "grower.lua", [[for i = 1, 4 do world:spawn{Position = {x = i, y = i}} end]])
        assert(mods:load(dir .. "/grower.lua"))
        local hash, count = w:hash("hex"), w:count()
        M.write(dir, "grower.lua", [[
            for i = 1, 30 do world:spawn{Position = {x = i, y = i}} end
            error("version two is broken")
        ]])
        local ok, err = mods:reload("grower")
        assert.is_nil(ok)
        assert.matches("version two is broken", err, 1, true)
        assert.are.equal(count, w:count())
        assert.are.equal(hash, w:hash("hex"))
        assert.are.equal(4, mods:list()[1].entities)
        assert.are.same({}, M.frames(w, 1))
    end)

    it("adds its top level's drops to the old version's, as a reload that succeeds does", function()
        local dir = M.folder()
        local w, mods = M.host()
        w:component("Velocity", "float x, y;")
        -- a loop queuing an add after a despawn of the same entity: the add drops as it lands
        -- (under LuaJIT the break leaves the loop open, for kiln to end after the top level)
        local drops = [[
            local e = world:spawn{Position = {x = 7, y = 0}}
            for _ in world:query{"Position"}:each() do
                world:despawn(e); world:add(e, "Velocity", {x = 1, y = 1}); break
            end
        ]]
        M.write(dir, "dropper.lua", drops)
        assert(mods:load(dir .. "/dropper.lua"))
        local first = M.info(mods, "dropper")
        assert.are.equal(1, first.dropped)
        M.write(dir, "dropper.lua", drops .. "error('version two is broken')")
        assert.is_nil(mods:reload("dropper"))
        assert.are.equal(2, (w:dropped()))
        local info = M.info(mods, "dropper")
        assert.are.equal(2, info.dropped)
        assert.matches("command 2 (add Velocity)", info.dropped_error, 1, true)
        assert.are_not.equal(first.dropped_error, info.dropped_error) -- the latest: the failed top level's
    end)
end)

-- The mod's tag is on the previous version's entities and on those an unload kept, but a failed
-- load cannot bring those back: its top level may despawn, and remove from, only what this load
-- spawned, and what it adds to the others comes off again.
describe("a mod's top level, on its mod's entities this load did not spawn", function()
    after_each(M.cleanup)

    -- A world with Position and Velocity, and mod m loaded from dir with three entities of its
    -- own, each with a Position and its Hp. Returns world, mods, dir, the three entities.
    local function loaded()
        local dir = M.folder()
        local w, mods = M.host()
        w:component("Velocity", "float x, y;")
        M.write(dir, "m.lua", [[
            world:component("Hp", "int32_t hp")
            for i = 1, 3 do world:spawn{Hp = {hp = i}, Position = {x = i, y = 0}} end
        ]])
        assert(mods:load(dir .. "/m.lua"))
        return w, mods, dir, M.entities_with(w, "Hp")
    end

    -- What a failed load must leave as it was.
    local function state(w)
        return {w:hash("hex"), w:content_hash(), w:count(), w:query{"Position"}:count(), w:query{"Velocity"}:count()}
    end

    it("cannot despawn, or remove from, the previous version's: a failed reload leaves them", function()
        local w, mods, dir, old = loaded()
        local before = state(w)
        M.write(dir, "m.lua", [[
            world:component("Hp", "int32_t hp")
            local mine = {}
            for e in world:query{"Hp"}:each() do mine[#mine + 1] = e end
            print(pcall(world.despawn, world, mine[2]))
            print(pcall(world.despawn, world, mine[3]))
            world:remove(mine[1], "Position")
            error("the new version fails")
        ]])
        local ok, err = mods:reload("m")
        assert.is_nil(ok)
        assert.matches("world:remove: a mod's top level may remove from the entities there before it ran only " ..
            "the components it registers (entity " .. kiln.handle(old[1]) .. " is one, and a failed load of mod " ..
            "'m' could not put the value back); do it from a system", err, 1, true)
        assert.are.same(before, state(w))
        assert.are.equal(3, M.info(mods, "m").entities)
        assert.are.equal("running", M.info(mods, "m").state)
        for _, e in ipairs(old) do assert.is_true(w:has(e, "Position")) end
    end)

    it("takes its adds to the previous version's entities off again when the reload fails", function()
        local w, mods, dir = loaded()
        local before = state(w)
        M.write(dir, "m.lua", [[
            world:component("Hp", "int32_t hp")
            for e in world:query{"Hp"}:each() do world:add(e, "Velocity", {x = 9, y = 0}) end
            error("fails")
        ]])
        assert.is_nil(mods:reload("m"))
        assert.are.same(before, state(w))
    end)

    it("cannot despawn the entities an unload kept: a failed load leaves them", function()
        local w, mods, dir, kept = loaded()
        assert(mods:unload("m", {keep = true}))
        local before = state(w)
        M.write(dir, "m.lua", [[
            world:component("Hp", "int32_t hp")
            local kept = {}
            for e in world:query{"Hp"}:each() do kept[#kept + 1] = e end
            for _, e in ipairs(kept) do world:despawn(e) end
            error("fails")
        ]])
        local ok, err = mods:load(dir .. "/m.lua")
        assert.is_nil(ok)
        assert.matches("world:despawn: a mod's top level may despawn only the entities spawned while it runs " ..
            "(entity " .. kiln.handle(kept[1]) .. " was there before, and a failed load of mod 'm' could not " ..
            "bring it back); do it from a system", err, 1, true)
        assert.are.same(before, state(w))
        -- loaded without the error, they are its own again
        M.write(dir, "m.lua", "")
        assert(mods:load(dir .. "/m.lua"))
        assert.are.equal(3, M.info(mods, "m").entities)
    end)

    it("cannot despawn through another mod's export what that mod spawned before, only what it spawns now", function()
        local w, mods, dir = M.host_with_folder_mods{{"lib", init = [[
            local mine = world:spawn{Position = {x = 5, y = 5}}
            mod.exports.drop = function() world:despawn(mine) end
            mod.exports.make = function() return world:spawn{Position = {x = 6, y = 6}} end
        ]]}}
        local before = {w:content_hash(), w:count()}
        local path = M.folder_mod(dir, "user", {name = "user", version = "1", depends = {"lib"}}, {["init.lua"] = [[
            local lib = mod.import("lib")
            world:despawn(lib.make()) -- spawned while the top level runs
            lib.drop()
            error("fails")
        ]]})
        local ok, err = mods:load(path)
        assert.is_nil(ok)
        assert.matches("world:despawn: a mod's top level may despawn only the entities spawned while it runs", err,
            1, true)
        assert.matches("was there before, and a failed load of mod 'user' could not", err, 1, true)
        assert.are.same(before, {w:content_hash(), w:count()})
    end)

    it("may still despawn and reshape what this reload spawned, and add to the old ones", function()
        local w, mods, dir, old = loaded()
        M.write(dir, "m.lua", [[
            world:component("Hp", "int32_t hp")
            local made = {}
            for i = 1, 200 do made[i] = world:spawn{Hp = {hp = 10 + i}, Position = {x = i, y = 0}} end
            for i = 1, 200, 2 do world:despawn(made[i]) end
            for i = 2, 200, 2 do world:remove(made[i], "Position"); world:add(made[i], "Velocity", {x = i, y = 0}) end
            for e in world:query{"Hp", without = {"Velocity"}}:each() do world:add(e, "Velocity", {x = 0, y = 0}) end
        ]])
        assert(mods:reload("m"))
        assert.are.equal(103, M.info(mods, "m").entities)
        assert.are.equal(103, w:query{"Velocity"}:count())
        for _, e in ipairs(old) do assert.is_true(w:has(e, "Position") and w:has(e, "Velocity")) end
    end)
end)

-- A failed load cannot put back a resource's value either: its top level may remove only the
-- resources set while it runs (or of the components it registers), and those it set where there
-- were none go again.
describe("a mod's top level, on the world's resources", function()
    after_each(M.cleanup)

    local refused = "world:resource: a mod's top level may remove only the resources set while it runs and those " ..
        "of the components it registers (resource %s was there before, and a failed load of mod 'm' could not " ..
        "put the value back); do it from a system"

    -- A host with Cfg (set to v = 7) and Flag, a tag, both unset unless set says so.
    local function host(set)
        local w, mods = M.host()
        w:component("Cfg", "int32_t v;")
        w:component("Flag")
        if set then
            w:resource("Cfg", {v = 7})
            w:resource("Flag", true)
        end
        return w, mods, M.folder()
    end

    it("cannot remove one the host set: a failed load leaves it, its value and the hash", function()
        local w, mods, dir = host(true)
        local hash = w:hash("hex")
        fails(mods, dir, "m", [[
            world:component("Cfg", "int32_t v;")
            world:resource("Cfg", nil)
            error("not reached")
        ]], refused:format("Cfg"))
        fails(mods, dir, "m", [[ -- the refusal caught, then the load fails
            world:component("Flag")
            assert(not pcall(world.resource, world, "Flag", nil))
            error("fails")
        ]], "fails")
        assert.are.equal(7, w:resource("Cfg").v)
        assert.is_true(w:resource("Flag"))
        assert.are.equal(hash, w:hash("hex"))
    end)

    it("takes back the ones it set where there were none when the load fails", function()
        local w, mods, dir = host(false)
        local hash = w:hash("hex")
        fails(mods, dir, "m", [[
            world:component("Cfg", "int32_t v;")
            world:component("Flag")
            world:resource("Cfg", {v = 9})
            world:resource("Flag", true)
            world:resource("Cfg", nil) -- its own: it may remove it, and set it again
            world:resource("Cfg", {v = 10})
            error("fails")
        ]], "fails")
        assert.is_nil(w:resource("Cfg"))
        assert.is_nil(w:resource("Flag"))
        assert.are.equal(hash, w:hash("hex"))
    end)

    it("cannot remove the previous version's, and takes back what a failed reload set", function()
        local w, mods, dir = host(false)
        M.write(dir, "m.lua", [[
            world:component("R", "int32_t v;")
            world:component("S", "int32_t v;")
            world:resource("R", {v = 1})
        ]])
        assert(mods:load(dir .. "/m.lua"))
        local hash = w:hash("hex")
        M.write(dir, "m.lua", [[
            world:component("R", "int32_t v;")
            world:component("S", "int32_t v;")
            world:resource("S", {v = 2})
            world:resource("R", nil)
        ]])
        local ok, err = mods:reload("m")
        assert.is_nil(ok)
        assert.matches(refused:format("R"), err, 1, true)
        assert.are.equal(1, w:resource("R").v)
        assert.is_nil(w:resource("S"))
        assert.are.equal(hash, w:hash("hex"))
    end)

    it("may set, remove and write resources in a load that succeeds", function()
        local w, mods, dir = host(false)
        w:component("Other", "int32_t v;")
        w:resource("Other", {v = 1})
        M.write(dir, "m.lua", [[
            world:component("Cfg", "int32_t v;")
            world:component("Mine", "int32_t v;")
            world:component("Other", "int32_t v;")
            world:resource("Cfg", {v = 9})
            world:resource("Mine", {v = 3})
            world:resource("Mine", nil) -- of a component it registers
            world:resource("Mine", {v = 4})
            world:resource("Other", {v = 5}) -- in place
        ]])
        assert(mods:load(dir .. "/m.lua"))
        assert.are.equal(9, w:resource("Cfg").v)
        assert.are.equal(4, w:resource("Mine").v)
        assert.are.equal(5, w:resource("Other").v)
        -- what a load that succeeded set was there before a later load: its top level may not remove it
        M.write(dir, "n.lua", [[
            world:component("Cfg", "int32_t v;")
            world:resource("Cfg", nil)
        ]])
        local ok, err = mods:load(dir .. "/n.lua")
        assert.is_nil(ok)
        assert.matches(refused:gsub("mod 'm'", "mod 'n'"):format("Cfg"), err, 1, true)
    end)
end)

-- A name is unique and the world indexes names and links: a failed load could not give an old
-- name back (another may hold it by then), so a top level may change the name or the parent of
-- only what was spawned while it runs, as it may despawn only that. A first name or parent is an
-- add, taken back when the load fails.
describe("a mod's top level, on the names and parents of entities there before it", function()
    after_each(M.cleanup)

    it("cannot rename or reparent them, by any call: a failed load or reload leaves the hash", function()
        local dir = M.folder()
        local w = kiln.world{transforms = true}
        local mods = kiln.mods(w)
        local a, b, c = w:spawn{}, w:spawn{}, w:spawn{}
        w:name(a, "hero")
        w:set_parent(c, a)
        M.write(dir, "m.lua", "own = world:spawn{} world:name(own, 'own') world:set_parent(own, " .. a .. ")")
        assert(mods:load(dir .. "/m.lua"))
        local own = w:lookup("own")
        local function refused(what, e)
            return "a mod's top level may change the " .. what .. " of only the entities spawned while it " ..
                "runs (entity " .. kiln.handle(e) .. " had one before, and a failed load of mod 'm' could not " ..
                "give it back); do it from a system"
        end
        local calls = {
            {"world:name(%d, 'villain')", a, "world:name: " .. refused("name", a)},
            {"world:set(%d, 'Name', {text = 'villain'})", a, "world:set: " .. refused("name", a)},
            {"world:add(%d, 'Name', {text = 'villain'})", own, "world:add: " .. refused("name", own)},
            {"world:set_parent(%d, " .. b .. ")", c, "world:set_parent: " .. refused("parent", c)},
            {"world:set(%d, 'Parent', {entity = " .. b .. "})", own, "world:set: " .. refused("parent", own)},
            {"world:add(%d, 'Parent', {entity = " .. b .. "})", c, "world:add: " .. refused("parent", c)},
        }
        for _, call in ipairs(calls) do
            local before = w:hash("hex")
            M.write(dir, "m.lua", "local e = world:spawn{} world:name(e, 'fresh') world:set_parent(e, " .. b ..
                ") world:name(e, 'fresher') world:set_parent(e, " .. c .. ") world:name(" .. a .. ", 'hero') " ..
                call[1]:format(call[2]) .. " error('unreached')")
            local ok, err = mods:reload("m")
            assert.is_nil(ok)
            assert.matches(call[3], err, 1, true)
            assert.are.equal(before, w:hash("hex"))
        end
        assert.are.equal(a, w:lookup("hero"))
        assert.are.equal(own, w:lookup("own"))
        -- a system may: a frame's writes stay, as every system's
        M.write(dir, "m.lua", "world:system{name = 'rename', writes = {'Name'}, run = function(w) w:name(" .. a .. ", 'villain') end}")
        assert(mods:reload("m"))
        assert.is_true(w:progress(1 / 60))
        assert.are.equal(a, w:lookup("villain"))
    end)
end)
