-- mods_copies_spec.lua: whose are the copies of a mod's entities. A mod's entities carry its
-- tag, kiln.mod.NAME (an owner mark): a copy the host makes (world:clone, a prefab or scene
-- spawn) is the host's, and a save loaded into the world (or a snapshot restored) gives the
-- mark back only to a loaded mod, within its entity limit (docs/modding.md, "Copies and saves").
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local H = dofile(here .. "helpers.lua")
local M = dofile(here .. "mods_helpers.lua")
local kiln = require "kiln"

local MAKER = [[
world:component("Hp", "int32_t v;")
local root = world:spawn{Position = {x = 10}, Hp = {v = 3}}
world:set_parent(world:spawn{Position = {x = 11}, Hp = {v = 4}}, root)
]]

-- A host with mod 'maker' loaded (2 entities: a root and its child); opts for the manager.
local function with_maker(opts)
    local w, mods = M.host(opts)
    local dir = M.folder()
    assert(mods:load(M.write(dir, "maker.lua", MAKER)))
    local mine = M.entities_with(w, "kiln.mod.maker")
    assert.are.equal(2, #mine)
    return w, mods, dir, mine
end

local function count(w) return #w:entities() end

describe("copies of a mod's entities", function()
    after_each(M.cleanup)

    it("a host's clone is the host's: not counted, and it stays through the mod's unload", function()
        local w, mods, _, mine = with_maker{entities = 2}
        local copy = w:clone(mine[1])
        local tree = w:clone(mine[1], {tree = true})
        assert.is_false(w:has(copy, "kiln.mod.maker"))
        assert.is_false(w:has(tree, "kiln.mod.maker"))
        assert.are.equal(3, w:get(copy, "Hp").v, "the mod's own components are copied")
        -- three copies of a mod at its limit of 2 leave it at 2
        assert.are.equal(2, M.info(mods, "maker").entities)
        assert(mods:unload("maker", {keep = false}))
        assert.is_true(w:is_alive(copy) and w:is_alive(tree), "the host's copies stay")
        assert.are.equal(1, #w:children(tree))
        assert.is_false(w:is_alive(mine[1]) or w:is_alive(mine[2]))
    end)

    it("a host's prefab or scene spawn of a mod's entities is the host's", function()
        local w, mods, _, mine = with_maker{entities = 3}
        local scene = w:export{mine[1]}
        assert.truthy(scene:find("kiln.mod.maker", 1, true), "the export shows whose they were")
        local inst = w:instantiate(scene)
        local prefab = w:prefab([[{"components": {"Hp": {"v": 9}, "kiln.mod.maker": true}}]])
        local spawned = prefab:spawn(4)
        local tabled = w:prefab{components = {Hp = {v = 8}, ["kiln.mod.maker"] = true}}:spawn()
        local copies = {tabled}
        for _, e in ipairs(inst.spawned) do copies[#copies + 1] = e end
        for _, e in ipairs(spawned) do copies[#copies + 1] = e end
        assert.are.equal(7, #copies)
        for i, e in ipairs(copies) do assert.is_false(w:has(e, "kiln.mod.maker"), "copy " .. i) end
        assert.is_true(w:component_info("kiln.mod.maker").owner)
        assert.is_nil(w:component_info("Hp").owner)
        -- seven copies of a mod at 2 of its 3 would have taken it to 9: it stays at 2
        assert.are.equal(2, M.info(mods, "maker").entities)
        assert(mods:unload("maker"))
        for _, e in ipairs(copies) do assert.is_true(w:is_alive(e)) end
    end)

    it("a mod's own prefab spawns stay its own, counted against its limit", function()
        local w, mods = M.host{entities = 3}
        local dir = M.folder()
        assert(mods:load(M.write(dir, "stamp.lua", [[
local p = world:prefab{components = {Position = {x = 1}}, children = {{components = {Position = {}}}}}
p:spawn()
print(pcall(p.spawn, p))
]])))
        assert.are.equal(2, M.info(mods, "stamp").entities)
        local log = mods:log("stamp")[1]
        assert.truthy(log:find("^false\t") and log:find("mod 'stamp'", 1, true), log)
        assert(mods:unload("stamp"))
        assert.are.equal(1, #M.entities_with(w, "Position"), "the host's alone stays")
    end)
end)

describe("a save holding a mod's entities", function()
    after_each(M.cleanup)

    it("loaded while the mod runs, its entities are the mod's again, within its limit", function()
        local w, mods, _, mine = with_maker{entities = 3}
        local data = w:save()
        -- 2 more would take it to 4 of 3: refused, the world as it was
        local before, hash = count(w), w:content_hash()
        H.raises(function() w:load(data) end,
                 "world:load: the save holds 2 entities of mod 'maker', which has 2 of its limit of 3 (entities)")
        assert.are.equal(before, count(w))
        assert.are.equal(hash, w:content_hash())
        assert.are.equal(2, M.info(mods, "maker").entities)
        -- with room, they come back as its own: counted, and gone with its unload
        for _, e in ipairs(mine) do w:despawn(e) end
        local map = w:load(data)
        assert.is_true(w:has(map[mine[1]], "kiln.mod.maker"))
        assert.are.equal(2, M.info(mods, "maker").entities)
        assert(mods:unload("maker"))
        assert.is_false(w:is_alive(map[mine[1]]) or w:is_alive(map[mine[2]]))
    end)

    it("loaded while the mod is not loaded, its entities land as the host's", function()
        local w, mods, dir, mine = with_maker{entities = 2}
        local data = w:save()
        assert(mods:unload("maker"))
        local map = w:load(data) -- kiln.mod.maker is still registered: it is dropped, not refused
        local landed = {map[mine[1]], map[mine[2]]}
        for _, e in ipairs(landed) do
            assert.is_true(w:is_alive(e))
            assert.is_false(w:has(e, "kiln.mod.maker"))
        end
        assert.are.equal(3, w:get(landed[1], "Hp").v)
        -- the mod loaded again owns its new spawns only, and its unload leaves the loaded ones
        assert(mods:load(dir .. "/maker.lua"))
        assert.are.equal(2, M.info(mods, "maker").entities)
        assert(mods:unload("maker"))
        for _, e in ipairs(landed) do assert.is_true(w:is_alive(e)) end
    end)

    it("loaded into a world that never had the mod, the mark is an unknown component", function()
        local w = with_maker{entities = 2}
        local data = w:save()
        local fresh = H.world()
        fresh:component("Hp", "int32_t v;")
        H.raises(function() fresh:load(data) end, "component 'kiln.mod.maker' is not registered in this world")
        local map = fresh:load(data, {skip_unknown = true})
        local n = 0
        for _ in pairs(map) do n = n + 1 end
        assert.are.equal(count(w), n)
        H.raises(function() fresh:has(1, "kiln.mod.maker") end, "unknown component 'kiln.mod.maker'")
    end)
end)

describe("entities kept by a mod's unload", function()
    after_each(M.cleanup)

    it("are refused, the world unchanged, by a manager whose limit they pass, as a save is", function()
        local w, mods, dir = with_maker{entities = 2}
        assert(mods:unload("maker", {keep = true}))
        mods:close()
        local lower = require("kiln").mods(w, {entities = 1})
        local hash, path = w:hash(), M.write(dir, "maker.lua", "")
        local info, err = lower:load(path)
        assert.is_nil(info)
        assert.are.equal("mods:load: mod 'maker': the world keeps 2 entities of it from an unload's keep, past its "
                         .. "limit of 1 (entities)", err)
        assert.are.equal(hash, w:hash(), "the world as it was")
        assert.are.same({}, lower:list())
        lower:close()
        local enough = require("kiln").mods(w, {entities = 2})
        assert(enough:load(path))
        assert.are.equal(2, M.info(enough, "maker").entities)
    end)
end)

describe("a snapshot holding a mod's entities", function()
    after_each(M.cleanup)

    it("is refused while the mod is not loaded, unless they are kept; restored once it is", function()
        local w, mods, dir = with_maker{entities = 2}
        local snap = w:snapshot()
        assert(mods:unload("maker"))
        local hash = w:hash()
        -- the mod loaded later would take both, and its own two spawns went past its limit
        H.raises(function() w:restore(snap) end,
                 "world:restore: the snapshot holds 2 entities of mod 'maker', which is not loaded (0 kept by its unload); load the mod first")
        assert.are.equal(hash, w:hash(), "the world as it was")
        assert(mods:load(dir .. "/maker.lua"))
        w:restore(snap)
        assert.are.equal(2, M.info(mods, "maker").entities)
        assert.are.equal(2, #M.entities_with(w, "kiln.mod.maker"))
        -- kept by an unload, they stay kept through a restore: the mod loaded again takes them
        assert(mods:unload("maker", {keep = true}))
        local kept = w:snapshot()
        w:restore(kept)
        assert.are.equal(2, #M.entities_with(w, "kiln.mod.maker"))
    end)
end)

-- The tag says whose an entity is, and a mod's unload despawns what carries it: the host's
-- world:spawn and world:add put it on the host's own entities, which the mod then counted and
-- its unload despawned. Only the manager puts it on an entity; reading it stays open.
-- A world with only Position and a manager of default limits.
local function plain_host()
    local w = kiln.world()
    w:component("Position", "float x, y;")
    return w, kiln.mods(w)
end

describe("a mod's tag", function()
    after_each(M.cleanup)

    it("cannot be put on an entity by the host: the mod's unload leaves the host's entities", function()
        local w, mods = plain_host()
        assert(mods:load(M.write(M.folder(), "m.lua", "world:spawn{Position = {x = 9, y = 9}}")))
        local a = w:spawn{Position = {x = 1, y = 2}}
        local refused = "('kiln.mod.m' is a mod's tag, which only its mod manager puts on the mod's entities)"
        local ok, err = pcall(w.add, w, a, "kiln.mod.m")
        assert.is_false(ok)
        assert.matches("bad argument #2 to 'world:add' " .. refused, err, 1, true)
        for _, init in ipairs{{Position = {x = 3, y = 4}, ["kiln.mod.m"] = true}, {["kiln.mod.m"] = true}} do
            ok, err = pcall(w.spawn, w, init)
            assert.is_false(ok)
            assert.matches("bad argument #1 to 'world:spawn' " .. refused, err, 1, true)
        end
        -- a command buffer's add lands through world:add: the same rule (the component's owner
        -- flag), the same message, the record kept
        local c = kiln.commands()
        c:add(a, "kiln.mod.m")
        local n
        ok, err, n = c:apply(w)
        assert.is_nil(ok)
        assert.are.equal(0, n)
        assert.matches("commands:apply: command 1 (add kiln.mod.m) on entity " .. H.entity_str(a) ..
            ": bad argument #2 to 'world:add' " .. refused, err, 1, true)
        assert.are.equal(1, c:count(), "the refused record stays")
        c:clear()
        assert.is_false(w:has(a, "kiln.mod.m"))
        assert.are.equal(1, w:query{"kiln.mod.m"}:count()) -- the mod's own, read by the host
        assert.are.equal(1, M.info(mods, "m").entities)
        assert(mods:unload("m"))
        assert.is_true(w:is_alive(a))
        assert.are.equal(1, w:count())
    end)

    -- Taking the tag off made the mod's entity the host's: out of the mod's count, kept past
    -- its unload. Only the manager takes it off (through C, as its unload does).
    it("cannot be taken off the mod's entities by the host: the mod's unload still takes them", function()
        local w, mods = plain_host()
        assert(mods:load(M.write(M.folder(), "m.lua", "world:spawn{Position = {x = 9, y = 9}}")))
        local mine = M.entities_with(w, "kiln.mod.m")[1]
        local refused = "('kiln.mod.m' is a mod's tag, which only its mod manager puts on the mod's entities)"
        for _, name in ipairs{"kiln.mod.m", w:component_info("kiln.mod.m").id} do
            local ok, err = pcall(w.remove, w, mine, name)
            assert.is_false(ok)
            assert.matches("bad argument #2 to 'world:remove' " .. refused, err, 1, true)
        end
        local c = kiln.commands()
        c:remove(mine, "kiln.mod.m")
        local ok, err, n = c:apply(w)
        assert.is_nil(ok)
        assert.are.equal(0, n)
        assert.matches("commands:apply: command 1 (remove kiln.mod.m) on entity " .. H.entity_str(mine) ..
            ": bad argument #2 to 'world:remove' " .. refused, err, 1, true)
        assert.is_true(w:has(mine, "kiln.mod.m"))
        assert.are.equal(1, M.info(mods, "m").entities)
        assert(mods:unload("m"))
        assert.is_false(w:is_alive(mine))
        assert.are.equal(0, w:count())
    end)
end)

-- A mod's view refuses every kiln.* name (kiln's own): a mod can neither adopt entities (put
-- its own or another mod's tag on one) nor disown its own (take its tag off), by name or id,
-- directly or through a command buffer.
describe("a mod naming a mod's tag", function()
    after_each(M.cleanup)

    it("is refused: it cannot adopt or disown entities", function()
        local w, mods = plain_host()
        local dir = M.folder()
        assert(mods:load(M.write(dir, "a.lua", "world:spawn{Position = {x = 1, y = 1}}")))
        assert(mods:load(M.write(dir, "b.lua", "world:spawn{Position = {x = 2, y = 2}}")))
        local a_e, b_e = M.entities_with(w, "kiln.mod.a")[1], M.entities_with(w, "kiln.mod.b")[1]
        local host_e = w:spawn{Position = {x = 3, y = 3}}
        local code = string.format([[
local a_e, b_e, host_e = %d, %d, %d
local out = {}
for _, tag in ipairs{"kiln.mod.a", "kiln.mod.b", %d, %d} do
    for _, call in ipairs{
        function() world:remove(b_e, tag) end, -- disown its own
        function() world:remove(a_e, tag) end,
        function() world:add(host_e, tag) end, -- adopt the host's
        function() world:add(b_e, tag) end,
        function() world:spawn{[tag] = true, Position = {x = 4}} end,
        type(tag) == "string" and function()
            local c = kiln.commands()
            c:remove(b_e, tag)
            assert(c:apply(world))
        end,
        type(tag) == "string" and function()
            local c = kiln.commands()
            c:add(host_e, tag)
            assert(c:apply(world))
        end,
    } do -- (a buffer records names only)
        if call then
            local ok, err = pcall(call)
            out[#out + 1] = ok and "ALLOWED" or (tostring(err):find("kiln's own", 1, true) or
                tostring(err):find("a mod's tag", 1, true)) and "refused" or tostring(err)
        end
    end
end
print(table.concat(out, " "))
]], a_e, b_e, host_e, w:component_info("kiln.mod.a").id, w:component_info("kiln.mod.b").id)
        local before = w:hash()
        M.write(dir, "b.lua", code)
        assert(mods:reload("b")) -- its entity stays: the new top level runs over it
        assert.are.equal(("refused "):rep(24):sub(1, -2), mods:log("b")[1])
        assert.are.equal(before, w:hash())
        assert.are.equal(1, M.info(mods, "a").entities)
        assert.are.equal(1, M.info(mods, "b").entities)
        assert(mods:unload("b"))
        assert.is_false(w:is_alive(b_e))
        assert.is_true(w:is_alive(host_e) and w:is_alive(a_e))
    end)
end)
