-- mods_systems_spec.lua: the mods together hold at most opts.systems of the schedule's 4096
-- systems (default 2048), so mods filling theirs never keep the host from adding its own; a
-- refused system fails its mod's load whole, and an unload or a reload gives the room back.
local kiln = require "kiln"
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

-- The text of a mod adding n systems named prefix .. 1 to prefix .. n.
local function adder(prefix, n)
    return string.format("for i = 1, %d do world:system{name = %q .. i, run = function() end} end\n", n, prefix)
end

-- The refusal of system name of mod, as world:system raises it, with the mods' limit.
local function refusal(mod, name, limit)
    return string.format("world:system: mod '%s' may not add system '%s': mods have %d systems, the mods' limit " ..
        "is %d (systems)", mod, name, limit, limit)
end

describe("the mods' limit of systems", function()
    after_each(M.cleanup)

    it("keeps room for the host's systems when 16 mods each try to add their 256", function()
        local w, mods = M.host() -- the host's host_tick
        local dir = M.folder()
        local loaded = 0
        for k = 1, 16 do
            local name = "filler" .. k
            local info, err = mods:load(M.write(dir, name .. ".lua", adder(name .. "_", 256)))
            if info then
                loaded = loaded + 1
            else
                assert.are.equal("mods:load: mod '" .. name .. "': " .. refusal(name, name .. "_1", 2048), err)
            end
        end
        assert.are.equal(8, loaded)
        assert.are.equal(1 + 2048, #w:systems())
        local runs = 0
        for i = 1, 4096 - 1 - 2048 do w:system{name = "host" .. i, run = function() runs = runs + 1 end} end
        assert.are.equal(4096, #w:systems())
        assert.is_true(w:progress(0))
        assert.are.equal(4096 - 1 - 2048, runs)
    end)

    it("refuses a running mod's system past it, naming the mod and the limit, and the frames go on", function()
        local w, mods = M.host{systems = 2}
        local dir = M.folder()
        assert(mods:load(M.write(dir, "grower.lua", [[
world:system{name = "grow", run = function(world)
    world:system{name = "grown", run = function() end}
end}
]])))
        assert(mods:load(M.write(dir, "other.lua", adder("other", 1))))
        local failures = M.frames(w, 2)
        assert.are.equal(2, #failures)
        assert.are.equal("grow", failures[1].system)
        assert.are.equal("grower", failures[1].mod)
        assert.truthy(failures[1].message:find(refusal("grower", "grown", 2), 1, true), failures[1].message)
        assert.are.same({"host_tick", "grow", "other1"}, M.system_names(w))
    end)

    it("takes a load refused at it back whole: systems, entities, components", function()
        local w, mods = M.host{systems = 3}
        local dir = M.folder()
        assert(mods:load(M.write(dir, "first.lua", adder("first", 2))))
        local host_entity = w:entities()[1]
        local names, hash, count = M.system_names(w), w:hash(), #w:entities()
        local info, err = mods:load(M.write(dir, "late.lua", [[
world:component("Late", "int32_t v;")
for i = 1, 5 do world:spawn{Late = {v = i}} end
world:add(]] .. host_entity .. [[, "Late", {v = 9})
world:system{name = "late1", run = function() end}
world:system{name = "late2", run = function() end}
]]))
        assert.is_nil(info)
        assert.are.equal("mods:load: mod 'late': " .. refusal("late", "late2", 3), err)
        assert.are.same(names, M.system_names(w))
        assert.are.equal(count, #w:entities())
        assert.is_false(w:has(host_entity, "Late"))
        assert.are.equal(hash, w:hash())
        assert.are.equal(1, #mods:list())
        -- its staged system holds no room: a mod of one loads
        assert(mods:load(M.write(dir, "one.lua", adder("one", 1))))
        assert.is_true(w:progress(0))
    end)

    it("gets its room back from an unload, and counts a reloading mod's systems once", function()
        local w, mods = M.host{systems = 4}
        local dir = M.folder()
        local a = M.write(dir, "a.lua", adder("a", 2))
        assert(mods:load(a))
        assert(mods:load(M.write(dir, "b.lua", adder("b", 2))))
        local c = M.write(dir, "c.lua", adder("c", 1))
        local info, err = mods:load(c)
        assert.is_nil(info)
        assert.are.equal("mods:load: mod 'c': " .. refusal("c", "c1", 4), err)
        assert.are.equal("a", assert(mods:reload("a")).name) -- its running version's 2 are not counted
        M.write(dir, "a.lua", adder("a", 3))
        info, err = mods:reload("a")
        assert.is_nil(info)
        assert.are.equal("mods:reload: mod 'a': " .. refusal("a", "a3", 4), err)
        assert.are.same({"host_tick", "a1", "a2", "b1", "b2"}, M.system_names(w)) -- the old version runs on
        assert(mods:unload("b"))
        assert(mods:load(c))
        assert.are.equal("a", assert(mods:reload("a")).name)
        assert.are.same({"host_tick", "a1", "a2", "c1", "a3"}, M.system_names(w))
        assert.are.same({}, M.frames(w, 1))
    end)

    it("is an option from 1 to the schedule's 4096", function()
        M.refuses_below_one("systems")
        local ok, err = pcall(kiln.mods, kiln.world(), {systems = 4097})
        assert.is_false(ok)
        assert.truthy(err:find("systems must be at most 4096", 1, true), err)
        assert.truthy(kiln.mods(kiln.world(), {systems = 4096}))
    end)
end)
