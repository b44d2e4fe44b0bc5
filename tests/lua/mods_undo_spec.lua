-- mods_undo_spec.lua: a mod load or reload that fails gives back the slots of what its top level
-- spawned, so world:hash (which sees the free list) is what it was; only handles that may have
-- left the mod (a call out of it, an entity field of the world) stay spent.
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local M = dofile(here .. "mods_helpers.lua")

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
end)
