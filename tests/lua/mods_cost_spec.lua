-- mods_cost_spec.lua: kiln's own C work a mod's one call makes, charged to its budget by what
-- the work walks (a red-team pass on cost: each call ran far past what it was charged).
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

-- A host world holding n + 2 archetypes (the empty one, and Position with each subset of 12 tags up to n).
local function fragmented(opts, n)
    local w, mods = M.host(opts)
    for b = 1, 12 do w:component("Tag" .. b, "") end
    for i = 1, n do
        local init = {Position = {x = i, y = 0}}
        for b = 1, 12 do
            if math.floor(i / 2 ^ (b - 1)) % 2 == 1 then init["Tag" .. b] = true end
        end
        w:spawn(init)
    end
    return w, mods
end

describe("a mod's call into kiln", function()
    after_each(M.cleanup)

    it("pays for the archetypes a query walks and sorts", function()
        -- kiln_query_create tests every archetype and sorts those that match: 7 ms a query
        -- over 20,000, and a mod's loop of them, a few instructions each, held the host 0.2 s
        -- on a budget of 10,000 instructions
        local dir = M.folder()
        local w, mods = fragmented({instructions = 1000000, milliseconds = 60000}, 2046)
        assert.are.equal(2048, w:stats().archetypes)
        assert(mods:load(M.write(dir, "asker.lua", [[
            local qs = {}
            print(pcall(function() for i = 1, 100 do qs[i] = world:query{"Position"} end end))
            print(#qs)
        ]])))
        -- 2048 archetypes at 128 steps each: three queries fit in the budget, the fourth not
        assert.matches("^false\t.*world:query could take 2.62e%+05 steps, past what is left of the budget of " ..
                       "the top level of mod 'asker'", mods:log("asker")[1])
        assert.are.equal("3", mods:log("asker")[2])
    end)
end)

describe("a mod's read over many archetypes", function()
    after_each(M.cleanup)

    -- q:count, q:each, q:entities and world:entities walk every archetype they cover, empty
    -- ones too: 135 to 285 us a call over 20,000 mostly empty, charged a few instructions
    for _, case in ipairs{
        {"query:count", "q:count()"},
        {"query:each", "for _ in q:each() do end"},
        {"query:entities", "q:entities()"},
        {"world:entities", "world:entities()"},
    } do
        it("pays for each archetype past a few: " .. case[1], function()
            local dir = M.folder()
            local w, mods = fragmented({instructions = 1000000, milliseconds = 60000}, 2046)
            for e in w:query{"Position"}:each() do w:despawn(e) end -- the archetypes stay, empty
            w:component("Lone", "float x")
            w:spawn{Lone = {x = 1}}
            assert(mods:load(M.write(dir, "reader.lua", ([[
                local q, few, calls = world:query{"Position"}, world:query{"Lone"}, 0
                for i = 1, 2000 do few:count() for _ in few:each() do end end -- one archetype: free
                print(pcall(function() for i = 1, 100 do %s calls = i end end))
                print(calls)
            ]]):format(case[2]))))
            local log = mods:log("reader")
            -- about 2000 archetypes past the 64 free at 16 steps each: some 15 calls fit in what
            -- making the two queries (128 steps an archetype of the world) left of the budget
            assert.matches("^false\t.*" .. case[1]:gsub("%p", "%%%0") .. " could take 3%.1%de%+04 steps, past what is " ..
                           "left of the budget of the top level of mod 'reader'", log[1])
            local calls = tonumber(log[2])
            assert.is_true(calls >= 10 and calls <= 30, log[2])
        end)
    end
end)

describe("a mod's Parent writes", function()
    after_each(M.cleanup)

    it("pay for the links a depth check walks", function()
        -- linking an entity with descendants checks how deep they go: a walk of its subtree
        -- when that is not known (here once a tall branch came and went), 1.6 ms a call over
        -- 100k children, and charged as the call's few instructions
        local dir = M.folder()
        local w, mods = M.host({instructions = 1000000, milliseconds = 60000})
        local info, err = mods:load(M.write(dir, "mover.lua", [[
            local root, leaves, deep, tall = world:spawn{}, {}, world:spawn{}, {world:spawn{}}
            for i = 1, 2000 do leaves[i] = world:spawn{} world:set_parent(leaves[i], root) end
            for i = 1, 200 do local e = world:spawn{} world:set_parent(e, deep) deep = e end
            for i = 2, 60 do tall[i] = world:spawn{} world:set_parent(tall[i], tall[i - 1]) end
            for k = 1, 100 do
                world:set_parent(root, nil)
                world:set_parent(tall[1], leaves[k])  -- root's branch 61 links tall,
                world:children(leaves[k])             -- seen by the index,
                world:set_parent(tall[1], nil)        -- and gone: the next check walks
                world:set_parent(root, deep)          -- 201 deep: may its subtree be 56 tall?
            end
        ]]))
        -- each round walks the 2000 children: past 8 steps a link, the budget ends the top
        -- level (charged after the link landed, so at the next instruction, not in the call)
        assert.is_nil(info)
        assert.matches("the top level of mod 'mover' ran past its budget of 1000000 instructions", err, 1, true)
        assert.are.equal(1, w:count()) -- taken back whole: the host's own entity
    end)
end)

describe("a mod's library call with infinite arguments", function()
    after_each(M.cleanup)

    -- math.huge - math.huge + 1 and math.huge * 0 made a NaN charge: it passed the budget's
    -- comparisons and, converted to an integer, took the budget far below zero, so the loop
    -- after it ran on until the wall clock stopped it (or forever with no time limit)
    for _, case in ipairs{
        {"string.rep", 'string.rep, "", math.huge', "could build inf bytes"},
        {"table.move", "table.move, {}, math.huge, math.huge, 1", "could take inf steps"},
        {"table.concat", 'table.concat, {}, "", math.huge, math.huge', "could take inf steps"},
    } do
        it("is refused, and the budget still holds: " .. case[1], function()
            local dir = M.folder()
            local w, mods = M.host({instructions = 200000, milliseconds = 60000})
            local info, err = mods:load(M.write(dir, "huge.lua", ([[
                local ok, e = pcall(%s)
                if ok or not e:find("%s %s", 1, true) then error("not refused: " .. tostring(e)) end
                for i = 1, 1e9 do end
            ]]):format(case[2], case[1], case[3])))
            assert.is_nil(info)
            assert.truthy(err:find("the top level of mod 'huge' ran past its budget of 200000 instructions", 1, true),
                          err)
        end)
    end
end)
