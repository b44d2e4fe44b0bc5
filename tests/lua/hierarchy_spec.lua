-- hierarchy_spec.lua: world:set_parent, children and despawn_recursive from Lua, and the
-- transform rules they follow (cycles refused, identity defaults, propagation).
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

describe("hierarchy", function()
    it("set_parent links, children lists by handle, nil unlinks", function()
        local w = H.world()
        local p = w:spawn()
        local a, b = w:spawn(), w:spawn()
        w:set_parent(b, p)
        w:set_parent(a, p)
        assert.are.same({a, b}, w:children(p))
        assert.are.same({}, w:children(a))
        w:set_parent(a, nil)
        assert.are.same({b}, w:children(p))
        w:set_parent(b, a) -- moving a child
        assert.are.same({}, w:children(p))
        assert.are.same({b}, w:children(a))
    end)

    it("rejects cycles and self links, naming the entities, and changes nothing", function()
        local w = H.world()
        local root, mid, leaf = w:spawn(), w:spawn(), w:spawn()
        w:set_parent(mid, root)
        w:set_parent(leaf, mid)
        local names = {"Parent"}
        H.unchanged(w, names, function() w:set_parent(root, leaf) end, "world:set_parent", "cycle",
                    H.entity_str(root), H.entity_str(leaf))
        H.unchanged(w, names, function() w:set_parent(mid, mid) end, "world:set_parent", H.entity_str(mid))
        assert.are.same({mid}, w:children(root))
        assert.are.same({}, w:children(leaf))
    end)

    it("dead entities in set_parent raise naming them", function()
        local w = H.world()
        local a, dead = w:spawn(), w:spawn()
        w:despawn(dead)
        H.unchanged(w, {"Parent"}, function() w:set_parent(a, dead) end, "world:set_parent", H.entity_str(dead))
        H.unchanged(w, {"Parent"}, function() w:set_parent(dead, a) end, "world:set_parent", H.entity_str(dead))
        H.unchanged(w, {"Parent"}, function() w:set_parent("a", a) end, "world:set_parent", "entity")
    end)

    it("despawn_recursive removes a subtree and nothing else; despawn leaves children", function()
        local w = H.world()
        local root, a, b, aa, other = w:spawn(), w:spawn(), w:spawn(), w:spawn(), w:spawn()
        w:set_parent(a, root)
        w:set_parent(b, root)
        w:set_parent(aa, a)
        w:despawn_recursive(a)
        assert.is_false(w:is_alive(a))
        assert.is_false(w:is_alive(aa))
        assert.is_true(w:is_alive(root))
        assert.is_true(w:is_alive(b))
        assert.is_true(w:is_alive(other))
        assert.are.same({b}, w:children(root))
        w:despawn(root)
        assert.is_true(w:is_alive(b))
        H.unchanged(w, nil, function() w:despawn_recursive(root) end, "world:despawn_recursive", H.entity_str(root))
    end)

    it("gives a LocalTransform with fields left out the identity rotation and scale", function()
        local w = kiln.world{transforms = true}
        local parent = w:spawn{LocalTransform = {position = {x = 10}}}
        local child = w:spawn{LocalTransform = {position = {x = 1}}}
        w:set_parent(child, parent)
        local l = w:get(child, "LocalTransform")
        assert.are.same({x = 0, y = 0, z = 0, w = 1}, l.rotation)
        assert.are.same({x = 1, y = 1, z = 1}, l.scale)
        w:progress(0)
        assert.are.equal(11, w:get(child, "WorldTransform").matrix[13])
        local e = w:spawn()
        w:add(e, "LocalTransform")
        assert.are.equal(1, w:get(e, "LocalTransform").rotation.w)
    end)

    it("refuses self links and cycles made through add, set, views and bulk, changing nothing", function()
        local w = H.world()
        local root, mid, leaf = w:spawn(), w:spawn(), w:spawn()
        w:set_parent(mid, root)
        w:set_parent(leaf, mid)
        local names = {"Parent"}
        H.unchanged(w, names, function() w:add(root, "Parent", {entity = root}) end, "world:add", "own parent")
        H.unchanged(w, names, function() w:add(root, "Parent", {entity = leaf}) end, "world:add", "cycle")
        H.unchanged(w, names, function() w:set(mid, "Parent", {entity = leaf}) end, "world:set", "cycle")
        local q = w:query{"Parent"}
        H.unchanged(w, names, function()
            for e, p in q:each() do if e == mid then p.entity = leaf end end
        end, "query:each", "cycle")
        H.unchanged(w, names, function()
            q:bulk(function(n, ents, p)
                for i = 1, n do if ents[i] == mid then p.entity[i] = mid end end
            end)
        end, "query:bulk", "own parent")
        assert.is_true(H.not_deferred(w))
        w:set(leaf, "Parent", {entity = root}) -- a legal move still works
        assert.are.same({mid, leaf}, w:children(root))
    end)

    it("links entities spawned earlier in the same loop", function()
        local w = H.world()
        local root = w:spawn()
        local q = w:query{"Position"}
        w:spawn{Position = {x = 1}}
        local made = {}
        for e in q:each() do
            local a = w:spawn()
            local b = w:spawn()
            w:set_parent(a, root)
            w:set_parent(b, a)
            made[#made + 1] = {a, b}
        end
        assert.are.same({made[1][1]}, w:children(root))
        assert.are.same({made[1][2]}, w:children(made[1][1]))
    end)

    it("despawn_recursive in a system needs Parent declared, as children does", function()
        local w = H.world()
        local root = w:spawn()
        local kid = w:spawn()
        w:set_parent(kid, root)
        local got
        w:system{name = "prune", reads = {"Position"}, run = function(world)
            got = H.raises(function() world:despawn_recursive(root) end)
        end}
        assert(w:progress(0))
        assert.are.equal("world:despawn_recursive: system 'prune' reads Parent without declaring it in reads or writes", got)
        assert.is_true(w:is_alive(root) and w:is_alive(kid))
        w:remove_system("prune")
        w:system{name = "prune2", reads = {"Parent"}, run = function(world) world:despawn_recursive(root) end}
        assert(w:progress(0))
        assert.is_false(w:is_alive(root) or w:is_alive(kid))
    end)

    it("refuses a parent the world never handed out, through add, set, views and set_parent", function()
        local w = H.world()
        local root, child, gone = w:spawn(), w:spawn(), w:spawn()
        w:despawn(gone)
        local names = {"Parent"}
        -- (integer arithmetic, not bit operators, so LuaJIT reads the spec too)
        local unspawned = 4294967296 + 100000         -- slot 100000, generation 1
        local next_in_slot = gone + 4294967296        -- what the next spawn there will be
        for _, bad in ipairs{unspawned, next_in_slot} do
            H.unchanged(w, names, function() w:add(child, "Parent", {entity = bad}) end, "world:add", "parent")
            H.unchanged(w, names, function() w:set_parent(child, bad) end, "world:set_parent")
        end
        if not H.luajit then -- 2^62 + a handle is beyond a double's 53 bits
            local placeholder = root + 4611686018427387904 -- a C buffer's placeholder bit
            H.unchanged(w, names, function() w:add(child, "Parent", {entity = placeholder}) end, "world:add",
                        "placeholder, not an entity")
            H.unchanged(w, names, function() w:set_parent(child, placeholder) end, "world:set_parent", "placeholder")
        end
        H.unchanged(w, names, function() w:add(child, "Parent", {entity = unspawned}) end, "world:add",
                    "was never spawned in this world")
        w:set_parent(child, root)
        local q = w:query{"Parent"}
        H.unchanged(w, names, function()
            for e, p in q:each() do if e == child then p.entity = next_in_slot end end
        end, "query:each", "never spawned")
        assert.are.equal(next_in_slot, w:spawn()) -- the link would have named this entity
        assert.are.same({child}, w:children(root))
        w:add(child, "Parent", {entity = gone}) -- a stale handle stays a dead link: a root
        assert.are.same({}, w:children(root))
    end)
end)

    it("refuses moving a subtree whose leaf would end deeper than 256, through set, add and set_parent", function()
        local w = kiln.world{transforms = true}
        local function chain(n)
            local c = {}
            for i = 1, n do
                c[i] = w:spawn{LocalTransform = {position = {x = 1}}}
                if i > 1 then w:set_parent(c[i], c[i - 1]) end
            end
            return c
        end
        local a, b = chain(200), chain(200)
        local root = w:spawn()
        local names = {"Parent", "LocalTransform"}
        local what = "subtree would end deeper than 256"
        -- a[200] is 199 deep, b[200] 199 below b[1]: 399
        H.unchanged(w, names, function() w:set_parent(b[1], a[200]) end, "world:set_parent", what)
        H.unchanged(w, names, function() w:add(b[1], "Parent", {entity = a[200]}) end, "world:add", what)
        w:set_parent(b[1], root)
        H.unchanged(w, names, function() w:set(b[1], "Parent", {entity = a[200]}) end, "world:set", what,
                    H.entity_str(b[1]))
        -- at the limit: b[101]'s subtree is 99 deep; under a[157] (156 deep) its leaf is 256
        H.unchanged(w, names, function() w:set_parent(b[101], a[158]) end, "world:set_parent", what)
        w:set(b[101], "Parent", {entity = a[157]})
        local ok = w:progress(0)
        assert.is_true(ok)
        assert.are.equal(257, w:get(b[200], "WorldTransform").matrix[13])
        assert.are.same({a[158], b[101]}, w:children(a[157]))
    end)

    it("reports a chain past 256 that one bulk call's rows make together as a failed frame", function()
        local w = kiln.world{transforms = true}
        local function chain(n, top)
            local c = {}
            for i = 1, n do
                c[i] = w:spawn{LocalTransform = {position = {x = 1}}}
                if i > 1 or top then w:set_parent(c[i], i > 1 and c[i - 1] or top) end
            end
            return c
        end
        local a = chain(150)
        local b, c = chain(100, w:spawn()), chain(100, w:spawn())
        assert.is_true(w:progress(0))
        -- each row alone fits (b[100] 249 deep, c[100] 200), together c[100] is 349 deep:
        -- every row is checked against the world before the call writes any
        local q = w:query{"Parent"}
        q:bulk(function(n, ents, p)
            for i = 1, n do
                if ents[i] == b[1] then p.entity[i] = a[150] elseif ents[i] == c[1] then p.entity[i] = b[100] end
            end
        end)
        local ok, failures = w:progress(0)
        assert.is_false(ok)
        assert.are.equal(1, #failures)
        assert.are.equal("propagate_transforms", failures[1].system)
        assert.is_truthy(failures[1].message:find("deeper than 256", 1, true))
        assert.is_true(w:progress(0) == false) -- still too deep: reported again
        w:set_parent(c[1], nil)
        assert.is_true(w:progress(0))
        assert.are.equal(100, w:get(c[100], "WorldTransform").matrix[13])
    end)


