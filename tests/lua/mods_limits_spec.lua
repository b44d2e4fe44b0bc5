-- mods_limits_spec.lua: the limits a mod runs into besides instructions and memory (component
-- and system counts, full collections charged, its source files, the bytes it holds in the
-- world), host functions granted to mods running under the calling system's declared access,
-- and a manager the host dropped mid-frame (the archetypes mods make: mods_archetypes_spec.lua).
local kiln = require "kiln"
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

describe("a mod's limits", function()
    after_each(M.cleanup)

    it("stop a mod declaring component after component before the registry grows", function()
        local dir = M.folder()
        local w, mods = M.host()
        local before = #w:components()
        local info, err = mods:load(M.write(dir, "hoarder.lua",
            "for i = 1, 100000 do world:component('C' .. i, 'int32_t v') end\n"))
        assert.is_nil(info)
        assert.truthy(err:find("mod 'hoarder': .*declares more than 256 components and event types"), err)
        assert.are.equal(256 + 1, #w:components() - before) -- and its tag, kiln.mod.hoarder
    end)

    it("let a mod at its limit of components declare its own again, so it can be reloaded", function()
        -- the limit was checked before the name was looked up: a mod holding 256 components
        -- raised "declares more than 256" at its first declaration again, and so could never
        -- be reloaded, not even unchanged
        local dir = M.folder()
        local w, mods = M.host()
        local path = M.write(dir, "full.lua", "for i = 1, 256 do world:component('C' .. i, 'int32_t v') end\n" ..
            "assert(world:component('C1', 'int32_t v') == world:component('C1', 'int32_t v'))\n")
        assert(mods:load(path))
        assert.are.equal("full", assert(mods:reload("full")).name)
        M.write(dir, "full.lua", "world:component('C257', 'int32_t v')\n") -- a new one is still refused
        local info, err = mods:reload("full")
        assert.is_nil(info)
        assert.truthy(err:find("declares more than 256 components and event types", 1, true), err)
    end)

    it("stop a mod adding system after system", function()
        local dir = M.folder()
        local w, mods = M.host()
        local info, err = mods:load(M.write(dir, "swarm.lua",
            "for i = 1, 100000 do world:system{name = 'swarm' .. i, run = function() end} end\n"))
        assert.is_nil(info)
        assert.truthy(err:find("mod 'swarm': .*has 256 systems, its limit"), err)
        assert.are.equal(1, #w:systems()) -- none joined: the load failed as a whole
    end)

    it("charge a full collection by the size of the mod's heap", function()
        local dir = M.folder()
        local w, mods = M.host({instructions = 2000000})
        local info, err = mods:load(M.write(dir, "collector.lua", [[
local keep = {}
for i = 1, 20000 do keep[i] = {i} end
for i = 1, 1e9 do collectgarbage() end
]]))
        assert.is_nil(info)
        assert.truthy(err:find("collectgarbage could take .* steps, past what is left of the budget"), err)
    end)
end)

describe("a mod's C library calls", function()
    after_each(M.cleanup)

    it("are charged a count given as text as the number the library reads", function()
        -- 50 MB fits the memory limit and the one-call cap: only the charge refuses it, before it runs
        local dir = M.folder()
        local w, mods = M.host({instructions = 200000, memory = 268435456})
        local info, err = mods:load(M.write(dir, "texty.lua", 'big = #string.rep("x", "50000000")\n'))
        assert.is_nil(info)
        assert.truthy(err:find("mod 'texty': .*string.rep could take .* steps, past what is left of the budget"), err)
        assert.is_nil(next(mods:list()))
    end)
end)

describe("a host function granted to mods", function()
    after_each(M.cleanup)

    it("runs under the declared access of the mod system calling it", function()
        local dir = M.folder()
        local w = kiln.world()
        w:component("Secret", "int32_t v")
        local e = w:spawn{Secret = {v = 1}}
        local results = {}
        local mods = kiln.mods(w, {allow = {poke = function(n) w:set(e, "Secret", {v = n}) return n end}})
        assert(mods:load(M.write(dir, "poker.lua", [[
world:system{name = "poker", run = function() poke(7) end}
world:system{name = "poker_ok", writes = {"Secret"}, after = {"poker"}, run = function() poke(9) end}
]])))
        local ok, failures = w:progress(0.1)
        assert.is_false(ok)
        assert.are.equal(1, #failures)
        assert.are.equal("poker", failures[1].system)
        assert.truthy(failures[1].message:find("Secret"), failures[1].message)
        assert.are.equal(9, w:get(e, "Secret").v) -- the system that declared it wrote it
    end)
end)

describe("a manager the host lets go of", function()
    after_each(M.cleanup)

    it("lives as long as its world, even when collected in the middle of a frame", function()
        local dir = M.folder()
        local w = kiln.world()
        local runs = 0
        w:system{name = "dropper", run = function() collectgarbage() collectgarbage() end}
        local mods = kiln.mods(w)
        assert(mods:load(M.write(dir, "late.lua",
            "world:system{name = 'late', after = {'dropper'}, run = function() count = (count or 0) + 1 end}\n")))
        mods = nil
        for _ = 1, 3 do assert.is_true((w:progress(0.1))) end
        assert.are.equal(3, (function()
            for _, s in ipairs(w:systems()) do if s.name == "late" then return s.runs end end
        end)())
        w:close() -- closes the mods' states first
    end)
end)

describe("a mod's budget for a frame", function()
    after_each(M.cleanup)

    it("is shared by all its system runs, so many systems cannot add up", function()
        local dir = M.folder()
        local w, mods = M.host({instructions = 100000, frame_instructions = 250000})
        assert(mods:load(M.write(dir, "crowd.lua", [[
for i = 1, 5 do
    world:system{name = "crowd" .. i, run = function() while true do end end}
end
]])))
        local ok, failures = w:progress(0.1)
        assert.is_false(ok)
        assert.are.equal(5, #failures)
        -- two runs spend 100000 each, the third what is left of 250000, the others nothing
        for i = 1, 2 do
            assert.truthy(failures[i].message:find("system 'crowd" .. i .. "' ran past its budget of 100000 instructions"),
                          failures[i].message)
        end
        for i = 3, 5 do
            assert.truthy(failures[i].message:find("ran past what was left of its mod's 250000 instructions for this frame"),
                          failures[i].message)
        end
        -- the next frame starts with a full budget again
        local _, again = w:progress(0.1)
        assert.truthy(again[1].message:find("ran past its budget of 100000 instructions"), again[1].message)
    end)

    it("has a wall-clock backstop for instructions that cost far more than others", function()
        local dir = M.folder()
        local w, mods = M.host({instructions = 1e12, frame_instructions = 1e12, milliseconds = 50,
                                memory = 67108864})
        assert(mods:load(M.write(dir, "slow.lua", [[
local a, b = string.rep("x", 4000000), string.rep("x", 4000000) .. "y"
world:system{name = "slow", run = function() while true do local _ = a < b end end}
]])))
        local ok, failures = w:progress(0.1)
        assert.is_false(ok)
        assert.truthy(failures[1].message:find("system 'slow' ran past its time limit of 50 ms"), failures[1].message)
    end)
end)

describe("the manager's own inputs", function()
    after_each(M.cleanup)

    it("refuse what cannot be granted to mods when the manager is made, not at every load", function()
        local w = kiln.world()
        local cyclic = {}
        cyclic.self = cyclic
        for _, case in ipairs{
            {{x = io.stdout}, "allow holds a userdata, which cannot be granted to mods"},
            {{x = coroutine.create(print)}, "allow holds a thread, which cannot be granted to mods"},
            {{x = cyclic}, "allow nests tables deeper than 32 %(a cycle%?%)"},
            {{x = setmetatable({}, {})}, "allow holds a table with a metatable"},
            {{[1] = true}, "allow's keys must be global names"},
        } do
            local ok, err = pcall(kiln.mods, w, {allow = case[1]})
            assert.is_false(ok)
            assert.truthy(err:find("bad argument #2 to 'kiln.mods' %(" .. case[2]), err)
        end
    end)

    it("refuse a folder with more entries than load_dir looks at, loading none of it", function()
        local dir = M.folder()
        for i = 1, 257 do M.write(dir, string.format("m%03d.lua", i), "\n") end
        local w, mods = M.host()
        local ok, err = mods:load_dir(dir)
        assert.is_nil(ok)
        assert.truthy(err:find("holds more than 256 entries; keep mods in a folder of their own"), err)
        assert.are.equal(0, #mods:list())
    end)
end)

describe("a mod's provenance", function()
    after_each(M.cleanup)

    it("counts the queries it made, which leave with its state", function()
        local dir = M.folder()
        local w, mods = M.host()
        local before = w:stats().queries
        assert(mods:load(M.write(dir, "asker.lua",
            "world:component('Position2', 'float z')\n" ..
            "kept = {world:query{'Position'}, world:query{'Position', without = {'Position2'}}}\n")))
        local info = mods:list()[1]
        assert.are.equal(2, info.queries)
        assert.are.equal(before + 2, w:stats().queries - 1) -- and the query over its tag
        assert(mods:unload("asker"))
        assert.are.equal(before, w:stats().queries)
    end)
end)

describe("a hostile manifest", function()
    after_each(M.cleanup)

    local function refused(manifest, pattern)
        local dir = M.folder()
        local w, mods = M.host()
        M.write(dir, "m/manifest.lua", manifest)
        M.write(dir, "m/init.lua", "world:system{name = 'never', run = function() end}\n")
        local before = #w:systems()
        local info, err = mods:load(dir .. "/m")
        assert.is_nil(info)
        assert.truthy(err:find(pattern), err)
        assert.are.equal(before, #w:systems())
        assert.are.equal(0, #mods:list())
    end

    it("that loops is stopped by its instruction limit", function()
        refused("while true do end", "bad manifest: the manifest ran past 100000 instructions")
    end)

    it("that fills memory is stopped by its memory limit", function()
        refused("local t = {} for i = 1, 1e7 do t[i] = {i} end return t", "bad manifest: .*not enough memory")
    end)

    it("that is huge is refused without reading it all into the host", function()
        refused("return {name = '" .. string.rep("x", 1048576) .. "'}", "bad manifest: .*not enough memory")
    end)

    it("that reaches for the library finds none", function()
        refused("return {name = string.rep('a', 3)}", "bad manifest: .*attempt to index") -- the wording differs under LuaJIT
        refused("return {name = 'ok', depends = {" .. string.rep("'d', ", 17) .. "}}", "more than 16 depends")
    end)
end)

describe("a mod's files", function()
    after_each(M.cleanup)

    -- A pipe no one writes to: opening it to read would wait for a writer for good.
    local function fifo(path)
        assert(os.execute("mkfifo '" .. path .. "'"))
        return path
    end

    it("that are pipes are refused without waiting on them", function()
        local dir = M.folder()
        local w, mods = M.host()
        M.write(dir, "pipe/manifest.lua", 'return {name = "pipe"}')
        fifo(dir .. "/pipe/init.lua")
        local info, err = mods:load(dir .. "/pipe")
        assert.is_nil(info)
        assert.truthy(err:find("mod 'pipe': .*/pipe/init.lua is not a regular file"), err)
        M.folder_mod(dir, "req", {name = "req"}, {["init.lua"] = 'print(pcall(require, "piped"))'})
        fifo(dir .. "/req/piped.lua")
        assert(mods:load(dir .. "/req"))
        local log = mods:log("req")
        assert.are.equal(1, #log)
        assert.truthy(log[1]:find("^false	.*/req/piped.lua is not a regular file"), log[1])
        fifo(dir .. "/manifested")
        assert(os.execute("mkdir '" .. dir .. "/m' && ln -s ../manifested '" .. dir .. "/m/manifest.lua'"))
        info, err = mods:load(dir .. "/m")
        assert.is_nil(info)
        assert.truthy(err:find("has no manifest.lua"), err)
        assert.are.equal(1, #mods:list())
        assert.is_true(w:progress(1 / 60))
    end)

    it("past 16 MiB are refused before they are read", function()
        local dir = M.folder()
        local w, mods = M.host()
        local big = "-- " .. string.rep("x", 16 * 1048576) .. "\nprint('ran')\n"
        local info, err = mods:load(M.write(dir, "big.lua", big))
        assert.is_nil(info)
        assert.truthy(err:find("mod 'big': .*/big.lua holds 16777233 bytes, past the 16777216 a mod's source file may hold"), err)
        M.folder_mod(dir, "req", {name = "req"}, {["init.lua"] = 'print(pcall(require, "big"))', ["big.lua"] = big})
        assert(mods:load(dir .. "/req"))
        assert.truthy(mods:log("req")[1]:find("^false	.*past the 16777216"), mods:log("req")[1])
        assert.is_true(w:progress(1 / 60))
    end)

    it("are read as luaL_loadfile reads them: a byte-order mark and a #! line skipped", function()
        local dir = M.folder()
        local w, mods = M.host()
        local info, err = mods:load(M.write(dir, "marked.lua", "\239\187\191#!/usr/bin/env kiln\nprint('one')\nerror('on line three')\n"))
        assert.is_nil(info)
        assert.truthy(err:find("mod 'marked': .*/marked.lua:3: on line three"), err)
        assert(mods:load(M.write(dir, "plain.lua", "#\nprint(debug == nil)")))
        assert.are.same({"true"}, mods:log("plain"))
        assert.is_true(w:progress(1 / 60))
    end)
end)

describe("a mod's world memory", function()
    after_each(M.cleanup)

    -- A row of one Blob: its 1000 bytes and change tick, the handle and its record.
    local ROW = 1000 + 2 + 16

    -- A host whose mods may hold limit bytes, with the single-file mod name (src) loaded.
    local function budgeted(limit, name, src, before)
        local w, mods = M.host({world_memory = limit})
        if before then before(w) end
        assert(mods:load(M.write(M.folder(), name .. ".lua", src)))
        return w, mods
    end

    it("bounds the rows of the entities it spawns, and a despawn gives the room back", function()
        local w, mods = budgeted(100000, "hoard", [[
world:component("Blob", "char data[1000];")
local mine, err = {}, nil
while true do
    local ok, e = pcall(world.spawn, world, {Blob = {}})
    if not ok then err = e break end
    mine[#mine + 1] = e
end
print(#mine, err)
for i = 1, 10 do world:despawn(mine[i]) end
local again = 0
while pcall(world.spawn, world, {Blob = {}}) do again = again + 1 end
print(again)
]])
        local log = mods:log("hoard")
        assert.are.equal(math.floor(100000 / ROW) .. "\tmod 'hoard' holds " .. math.floor(100000 / ROW) * ROW ..
                         " bytes in the world; a spawn would take " .. ROW .. " more, past its limit of 100000 (world_memory)", log[1])
        assert.are.equal("10", log[2])
        assert.are.equal(math.floor(100000 / ROW) * ROW, M.info(mods, "hoard").world_bytes)
        assert.is_true(w:progress(1 / 60))
    end)

    it("counts its rows spawn by spawn as a count over every archetype does", function()
        -- Its rows are counted over the archetypes they match only when rows moved since; a
        -- spawn at its top level adds its archetype's row to the count instead. A host spawn
        -- and despawn makes the next count start over: both must agree, here and after
        -- frames whose spawns were queued.
        local w, mods = budgeted(16 * 1024 * 1024, "rows", [[
world:component("A", "float x;")
world:component("B", "double y[3];")
world:component("C", "")
for i = 1, 600 do
    local def = {}
    if i % 2 == 0 then def.A = {x = i} end
    if i % 3 == 0 then def.B = {} end
    if i % 5 == 0 then def.C = true end
    local e = world:spawn(def)
    if i % 7 == 0 then world:despawn(e) end
end
world:system{name = "more", writes = {"B"}, run = function(w) for i = 1, 25 do w:spawn{B = {}} end end}
]])
        local function counted_anew()
            w:despawn(w:spawn{Position = {x = 0, y = 0}}) -- rows moved: the mod counts again
            return M.info(mods, "rows")
        end
        for frame = 0, 2 do
            local kept = M.info(mods, "rows")
            local again = counted_anew()
            assert.are.equal(600 - 85 + 25 * frame, kept.entities)
            assert.are.equal(again.entities, kept.entities)
            assert.are.equal(again.world_bytes, kept.world_bytes)
            assert.is_true(w:progress(1 / 60))
        end
    end)

    it("counts the names it gives its entities: a name is a 64-byte component", function()
        local w, mods = budgeted(10000, "namer", [[
world:component("Dot", "uint8_t v;")
local mine = {}
for i = 1, 200 do mine[i] = world:spawn{Dot = {v = 1}} end -- 200 x 19 bytes
local named, err = 0, nil
for i, e in ipairs(mine) do
    local ok, why = pcall(world.name, world, e, "dot" .. i)
    if not ok then err = why break end
    named = named + 1
end
print(named, err)
world:name(mine[1], nil) -- the name goes, and its room with it
print(pcall(world.name, world, mine[named + 1], "late"), world:lookup("late") == mine[named + 1])
]])
        local held = 200 * 19 + 93 * 66
        assert.are.same({"93\tmod 'namer' holds " .. held .. " bytes in the world; world:name would take 66 more, " ..
                         "past its limit of 10000 (world_memory)", "true\ttrue"}, mods:log("namer"))
        assert.are.equal(held, M.info(mods, "namer").world_bytes)
        assert.is_true(w:progress(1 / 60))
    end)

    it("counts the Parent links it gives its entities, at its top level and queued in a frame", function()
        -- set_parent added Parent without asking: the mod ended 790 bytes past its limit
        local w, mods = budgeted(5000, "linker", [[
world:component("Dot", "uint8_t v;")
local mine = {}
for i = 1, 200 do mine[i] = world:spawn{Dot = {v = 1}} end -- 200 x 19 bytes
local linked, err = 0, nil
for i = 2, 200 do
    local ok, why = pcall(world.set_parent, world, mine[i], mine[1])
    if not ok then err = why break end
    linked = linked + 1
end
print(linked, err)
world:set_parent(mine[2], mine[3]) -- a new parent for a linked entity takes no room
world:set_parent(mine[2], nil)
world:system{name = "link", writes = {"Parent"}, run = function()
    print(pcall(world.set_parent, world, mine[2], mine[1]))
    print(pcall(world.set_parent, world, mine[200], mine[1]))
end}
]])
        local full = "mod 'linker' holds 5000 bytes in the world; world:set_parent would take 10 more, past its " ..
                     "limit of 5000 (world_memory)"
        assert.is_true(w:progress(1 / 60))
        assert.are.same({"120\t" .. full, "true", "false\t" .. full}, mods:log("linker"))
        assert.are.equal(5000, M.info(mods, "linker").world_bytes)
    end)

    it("counts its components on entities it did not spawn, not the host's", function()
        local w, mods = budgeted(60000, "stick", [[
world:component("Blob", "char data[1000];")
local host = {}
held = world:query{"Position"} -- kept: what it holds counts too
for e in held:each() do host[#host + 1] = e end
for _, e in ipairs(host) do world:add(e, "Big", {}) end -- the host's: not the mod's to count
for _, e in ipairs(host) do world:add(e, "Blob", {}) end -- 50 x 1002 bytes
local spawned = 0
while pcall(world.spawn, world, {Blob = {}}) do spawned = spawned + 1 end
print(#host, spawned)
]], function(host)
            host:component("Big", "char data[1000];")
            for _ = 1, 49 do host:spawn{Position = {x = 0, y = 0}} end -- 50 host entities with M.host's
        end)
        local q = M.info(mods, "stick").query_bytes
        assert.is_true(q > 0)
        local rows = math.floor((60000 - 50 * 1002 - q) / ROW) * ROW
        assert.are.same({"50\t" .. math.floor(rows / ROW)}, mods:log("stick"))
        assert.are.equal(50 * 1002 + rows + q, M.info(mods, "stick").world_bytes)
        -- the host takes Blob off its entities: the room comes back
        for _, e in ipairs(M.entities_with(w, "Position")) do w:remove(e, "Blob") end
        assert.are.equal(rows + q, M.info(mods, "stick").world_bytes)
        assert.is_true(w:progress(1 / 60))
    end)

    it("counts the events it emits in a frame, and each frame starts afresh", function()
        local w, mods = budgeted(100000, "chatter", [[
world:event("Ping", "char data[1000];")
world:system{name = "fits", run = function() for _ = 1, 90 do world:emit("Ping", {}) end end}
world:system{name = "floods", after = {"fits"}, run = function()
    local n = 0
    local ok, err = pcall(function() for _ = 1, 1000 do world:emit("Ping", {}) n = n + 1 end end)
    assert(not ok and err:find("world:emit would take 1032 more, past its limit of 100000"), err)
    print(n)
end}
]])
        local failures = M.frames(w, 3)
        assert.are.same({}, M.failures_of(failures, "chatter")) -- "fits" found its room each frame
        assert.are.same({"6", "6", "6"}, mods:log("chatter")) -- 90 + 6 events of 1000 bytes and a 32-byte record
    end)

    it("counts the queries kiln keeps over its components on others' entities", function()
        -- a host of 2048 archetypes (one entity each): the query over Mark on them matches
        -- every archetype Mark makes, 72 bytes each, against 6 bytes a value
        local w, mods = budgeted(65536, "marker", [[
world:component("Mark", "int32_t n;")
local host = world:entities() -- (a query over them all would take 147 KB itself)
local added = 0
for _, e in ipairs(host) do
    local ok, err = pcall(world.add, world, e, "Mark", {n = 1})
    if not ok then print(#host, added, err) break end
    added = added + 1
end
if added == #host then print(#host, added, "all added") end
]], function(host)
            for t = 1, 11 do host:component("T" .. t) end
            for mask = 1, 2047 do
                local init = {Position = {x = 0, y = 0}}
                for t = 1, 11 do if math.floor(mask / 2 ^ (t - 1)) % 2 == 1 then init["T" .. t] = true end end
                host:spawn(init)
            end
        end)
        local total, added, err = mods:log("marker")[1]:match("^(%d+)\t(%d+)\t(.*)$")
        assert.are.equal("2048", total)
        assert.is_true(tonumber(added) > 100 and tonumber(added) < 1000, added) -- 6 bytes each would fit 10,000
        assert.truthy(err:find("^mod 'marker' holds %d+ bytes in the world; world:add would take 6 more"), err)
        local info = M.info(mods, "marker")
        assert.is_true(info.query_bytes >= 72 * tonumber(added), tostring(info.query_bytes))
        -- the add that passed last may have doubled the list's room: counted, not refusable
        assert.is_true(info.world_bytes <= 2 * 65536, tostring(info.world_bytes))
        assert.is_true(w:progress(1 / 60))
    end)

    it("counts spawns queued in a frame before they land", function()
        local w, mods = budgeted(100000, "queue", [[
world:component("Blob", "char data[1000];")
world:system{name = "queue", writes = {"Blob"}, run = function()
    local n = 0
    while pcall(world.spawn, world, {Blob = {}}) do n = n + 1 end
    print(n)
end}
]])
        M.frames(w, 2)
        assert.are.same({tostring(math.floor(100000 / ROW)), "0"}, mods:log("queue"))
        assert.are.equal(math.floor(100000 / ROW), #M.entities_with(w, "Blob"))
    end)

    it("counts the resources of its own components", function()
        local w, mods = budgeted(100000, "store", [[
world:component("Store", "char data[60000];")
world:component("Shelf", "char data[60000];")
world:resource("Store", {})
print(pcall(world.resource, world, "Shelf", {}))
world:resource("Store", nil)
print(pcall(world.resource, world, "Shelf", {}))
]])
        local log = mods:log("store")
        assert.truthy(log[1]:find("^false\t.*mod 'store' holds 60000 bytes in the world; world:resource would take " ..
                                  "60000 more, past its limit of 100000"), log[1])
        assert.are.equal("true", log[2])
        assert.are.equal(60000, M.info(mods, "store").world_bytes)
        assert.is_true(w:progress(1 / 60))
    end)

    -- Spawns entities with Position and every combination of bits tags: 2^bits archetypes.
    local function archetypes(w, bits, first)
        for b = first or 1, bits do w:component("Tag" .. b) end
        for i = 0, 2 ^ bits - 1 do
            local e = w:spawn{Position = {x = 0, y = 0}}
            for b = 1, bits do if math.floor(i / 2 ^ (b - 1)) % 2 == 1 then w:add(e, "Tag" .. b) end end
        end
    end

    it("counts what its queries hold, which grows with the archetypes they match", function()
        local LIMIT = 1048576
        local w, mods = budgeted(LIMIT, "seeker", [[
kept = {}
while true do
    local ok, q = pcall(world.query, world, {"Position"})
    if not ok then print(#kept, q) break end
    kept[#kept + 1] = q
end
]], function(host)
            archetypes(host, 6)
        end)
        local function check(info, fits)
            local n, err = mods:log("seeker")[#mods:log("seeker")]:match("^(%d+)\t(.*)$")
            assert.are.equal(tonumber(n), info.queries)
            assert.truthy(err:find("^mod 'seeker' holds %d+ bytes in the world; world:query would take %d+ more, " ..
                                   "past its limit of " .. LIMIT .. " %(world_memory%)$"), err)
            local one = tonumber(err:match("would take (%d+) more"))
            assert.are.equal(info.query_bytes, info.world_bytes) -- it spawned nothing
            assert.is_true(info.query_bytes <= LIMIT and info.query_bytes + one > LIMIT)
            assert.is_true(one >= fits * 16, one .. " bytes for a query matching " .. fits .. " archetypes")
            return info.queries
        end
        local first = check(M.info(mods, "seeker"), 64)
        assert.is_true(first > 10 and first < 256, tostring(first))
        -- the host makes archetypes the mod's queries match: they grow past the budget, which
        -- only its next query or spawn meets
        archetypes(w, 12, 7)
        local grown = M.info(mods, "seeker")
        assert.are.equal(first, grown.queries)
        assert.is_true(grown.query_bytes > 4 * LIMIT, tostring(grown.query_bytes))
        assert.is_true(w:progress(1 / 60))
        -- a new version meets the budget at once
        assert(mods:reload("seeker"))
        local again = check(M.info(mods, "seeker"), 4096)
        assert.is_true(again >= 1 and again < first, tostring(again))
    end)

    -- Rows that go leave their room to their archetype: a mod filling one archetype after
    -- another up to its limit, emptying each, held 20 times its limit before trims (a frame's
    -- growth triggers one after the frame, a mod's own spawn between frames).
    local CHURN_ROOM = [==[
world:component("Slab", "char data[65536];")
for k = 1, 40 do world:component("Room" .. k) end
function fill(k)
    local mine = {}
    while true do
        local ok, e = pcall(world.spawn, world, {Slab = {}, ["Room" .. k] = true})
        if not ok then break end
        mine[#mine + 1] = e
    end
    for _, e in ipairs(mine) do world:despawn(e) end
    return #mine
end
]==]
    local ROOM_LIMIT = 4 * 1048576

    -- Runs frames; the mod's system (name) must have printed 30 counts, the last above least.
    -- Returns how many MiB the world grew since before.
    local function churn_frames(w, mods, name, frames, least, before)
        assert.are.same({}, M.frames(w, frames))
        local log = mods:log(name)
        assert.are.equal(30, #log)
        assert.is_true(tonumber(log[30]) > least, log[30])
        return (w:stats().bytes - before) / 1048576
    end

    it("cannot hold room past it by filling one archetype after another, between frames", function()
        -- (a generous wall clock: under ASan the 1200 spawns of 64 KiB take most of a second of
        -- CPU, and on a loaded machine more than 10 s of the wall)
        local w, mods = M.host({world_memory = ROOM_LIMIT, milliseconds = 60000})
        local before = w:stats().bytes
        assert(mods:load(M.write(M.folder(), "rooms.lua", CHURN_ROOM .. [[
local total = 0
for k = 1, 20 do total = total + fill(k) end
print(total)
]])))
        local spawned = tonumber(mods:log("rooms")[1])
        assert.is_true(spawned > 20 * 50, tostring(spawned)) -- about 60 rows of 64 KiB a room
        local grown = w:stats().bytes - before
        assert.is_true(grown < 6 * ROOM_LIMIT, string.format("%.1f MiB", grown / 1048576))
    end)

    it("cannot hold room past it by filling one archetype after another, frame after frame", function()
        local w, mods = M.host({world_memory = ROOM_LIMIT, milliseconds = 60000})
        local before = w:stats().bytes
        assert(mods:load(M.write(M.folder(), "rooms.lua", CHURN_ROOM .. [[
local k, names = 0, {"Slab"}
for i = 1, 30 do names[#names + 1] = "Room" .. i end -- (a system writes at most 32)
world:system{name = "rooms", writes = names, run = function()
    k = k + 1
    if k <= 30 then print(fill(k)) end
end}
]])))
        local grown = churn_frames(w, mods, "rooms", 30, 50, before)
        -- without trims: 30 rooms of 4 MiB; the schedule trims once the world grew by half and 16 MiB
        assert.is_true(grown < 40, string.format("%.1f MiB", grown))
    end)

    it("cannot hold room past it by emitting into one event type after another", function()
        -- each frame fills a fresh event type's buffer to the limit (room for 8 MiB); the
        -- buffers keep it once empty until a trim: 30 frames held 220 MiB without one
        local w, mods = M.host({world_memory = ROOM_LIMIT, milliseconds = 60000})
        local before = w:stats().bytes
        assert(mods:load(M.write(M.folder(), "bursts.lua", [[
for k = 1, 30 do world:event("Burst" .. k, "char data[60000];") end
local k = 0
world:system{name = "bursts", run = function()
    k = k + 1
    if k > 30 then return end
    local n = 0
    while pcall(world.emit, world, "Burst" .. k, {}) do n = n + 1 end
    print(n)
end}
]])))
        local grown = churn_frames(w, mods, "bursts", 32, 60, before)
        assert.is_true(grown < 64, string.format("%.1f MiB", grown))
    end)

    it("bounds the queries it holds; dropped ones are collected before a query is refused", function()
        local w, mods = M.host({queries = 8})
        assert(mods:load(M.write(M.folder(), "many.lua", [[
local qs = {}
for i = 1, 9 do
    local ok, q = pcall(world.query, world, {"Position"})
    if not ok then print(i, q) break end
    qs[i] = q
end
qs = nil -- dropped, not yet collected: the next query collects them first
for _ = 1, 100 do assert(world:query{"Position"}) end
kept = world:query{"Position"}
]])))
        assert.are.same({"9\tworld:query: mod 'many' holds 8 live queries, its limit (queries)"}, mods:log("many"))
        assert.is_true(M.info(mods, "many").queries <= 8)
        for _, bad in ipairs{0, -1, 2^31, 1.5, "8"} do
            local ok, err = pcall(kiln.mods, kiln.world(), {queries = bad})
            assert.is_false(ok)
            assert.truthy(err:find("queries must be"), err)
        end
        assert.is_true(w:progress(1 / 60))
    end)

    it("is an option of at least one byte", function()
        local w = kiln.world()
        local ok, err = pcall(kiln.mods, w, {world_memory = 0})
        assert.is_false(ok)
        assert.truthy(err:find("world_memory must be an integer of at least 1", 1, true), err)
    end)
end)

describe("the components and event types mods register", function()
    after_each(M.cleanup)

    -- The world never frees a registration, so a mod that names its components after the
    -- tick registers new ones at every load. Each load: Shared and Position (the host's)
    -- once, then 7 components and an event type named after the tick.
    local SALTED = [==[
local salt = world:tick()
world:component("Shared", "float x;")
world:component("Position", "float x, y;")
for i = 1, 7 do world:component("C" .. salt .. "_" .. i, "float x;") end
world:event("E" .. salt, "float x;")
]==]

    local function cycle(w, mods, path, name)
        local info, err = mods:load(path)
        if info then
            assert.is_true(w:progress(1 / 60))
            assert(mods:unload(name))
        end
        return info, err
    end

    it("stop at the mods' limit over loads and unloads; known names still declare", function()
        local w, mods = M.host({components = 30})
        local dir = M.folder()
        local path = M.write(dir, "salted.lua", SALTED)
        local before = #w:components()
        local loads, err = 0, nil
        for _ = 1, 10 do
            local info, e = cycle(w, mods, path, "salted")
            if not info then err = e break end
            loads = loads + 1
        end
        assert.are.equal(3, loads) -- 9, then 8 and 8 new: 25; the fourth stops at 30
        assert.truthy(err:find("world:component: mod 'salted' may not register component 'C%d+_6': mods have " ..
                               "registered 30 new components and event types in this world, the mods' limit " ..
                               "%(components%)"), err)
        -- its tag, Shared, 3 x 7 components, and 5 of the fourth load's; 3 event types
        assert.are.equal(before + 1 + 1 + 21 + 5, #w:components())
        -- names the world knows still declare, and the host is not bound
        assert(mods:load(M.write(dir, "steady.lua", 'world:component("Shared", "float x;")\n' ..
                                 'world:component("Position", "float x, y;")\n')))
        w:component("HostOnly", "float x;")
        local info, e = mods:load(M.write(dir, "eventful.lua", 'world:event("Fresh", "int32_t n;")\n'))
        assert.is_nil(info)
        assert.truthy(e:find("world:event: mod 'eventful' may not register event type 'Fresh': mods have " ..
                             "registered 30 new", 1, true), e)
        assert.is_true(w:progress(1 / 60))
    end)

    it("are counted for the world, not the manager: a new manager goes on from there", function()
        local w, mods = M.host({components = 12})
        local dir = M.folder()
        local path = M.write(dir, "salted.lua", SALTED)
        assert(cycle(w, mods, path, "salted")) -- 9
        mods:close()
        local again = kiln.mods(w, {components = 12})
        local info, err = cycle(w, again, path, "salted")
        assert.is_nil(info)
        assert.truthy(err:find("mods have registered 12 new components", 1, true), err)
    end)

    it("is an option of at least one", function() M.refuses_below_one("components") end)
end)

describe("the manager's paths and names", function()
    after_each(M.cleanup)

    it("refuse a zero byte, which would make a C call see another file", function()
        local dir = M.folder()
        local w, mods = M.host()
        M.write(dir, "good.lua", "\n")
        for _, call in ipairs{
            {"load", dir .. "/good.lua\0/../evil.lua", "bad argument #1 to 'mods:load' %(path contains a zero byte%)"},
            {"load_dir", dir .. "\0x", "bad argument #1 to 'mods:load_dir' %(folder contains a zero byte%)"},
            {"reload", "good\0x", "bad argument #1 to 'mods:reload' %(mod name contains a zero byte%)"},
        } do
            local ok, err = pcall(mods[call[1]], mods, call[2])
            assert.is_false(ok)
            assert.truthy(err:find(call[3]), err)
        end
        assert.are.equal(0, #mods:list())
    end)
end)

describe("math.random at a mod's top level", function()
    after_each(M.cleanup)

    local ROLLER = [[
        local out = {}
        for _ = 1, 6 do out[#out + 1] = math.random(1, 6) end
        local f = math.random()
        assert(f >= 0 and f < 1 and f % 1 ~= 0 or f == 0)
        out[#out + 1] = string.format("%.17g", f)
        out[#out + 1] = math.random(0) -- all 64 bits
        out[#out + 1] = math.mininteger and math.random(math.mininteger, math.maxinteger) or 0 -- (Lua 5.4)
        out[#out + 1] = math.random(-3, -3)
        math.randomseed(7)
        local a = math.random(1, 1000000)
        math.randomseed(7)
        out[#out + 1] = a == math.random(1, 1000000) and "reseeded" or "not reseeded"
        print(table.concat(out, " "))
        print(select(2, pcall(math.random, 5, 1)))
        print(select(2, pcall(math.random, 1, 2, 3)))
    ]]

    local function rolls(seed, name)
        local dir = M.folder()
        local _, mods = M.host({seed = seed})
        M.write(dir, name .. ".lua", ROLLER)
        assert(mods:load(dir .. "/" .. name .. ".lua"))
        return mods:log(name)
    end

    it("draws from the mod's own stream: the same for a seed and a name, in range, refusing empty intervals", function()
        local a, again = rolls(42, "roller"), rolls(42, "roller")
        assert.are.same(a, again)
        assert.are_not.same(a[1], rolls(43, "roller")[1])
        assert.are_not.same(a[1], rolls(42, "other")[1])
        local fields = {}
        for v in a[1]:gmatch("%S+") do fields[#fields + 1] = v end
        for i = 1, 6 do
            local d = tonumber(fields[i])
            assert.is_true(d >= 1 and d <= 6 and d % 1 == 0, a[1])
        end
        assert.are.equal("-3", fields[10])
        assert.are.equal("reseeded", fields[11])
        assert.matches("interval is empty", a[2], 1, true)
        assert.matches("wrong number of arguments", a[3], 1, true)
    end)
end)

describe("math.random in a mod's system", function()
    after_each(M.cleanup)

    -- math.random(0) (all 64 bits) drew from the mod's top-level stream, which no snapshot
    -- holds: a frame run again after a restore drew other bits
    it("draws math.random(0) from the system's stream too, so a restored frame draws the same", function()
        local w, mods = M.host{seed = 7}
        assert(mods:load(M.write(M.folder(), "roller.lua", [[
world:component("Roll", "int64_t bits; int32_t die")
world:spawn{Roll = {}}
world:system{name = "roll", writes = {"Roll"}, query = {"Roll"},
             each = function(e, r) r.bits = math.random(0); r.die = math.random(6) end}
]])))
        local q = w:query{"Roll"}
        local function rolled() for _, r in q:each() do return r.bits .. " " .. r.die end end
        w:progress(0)
        local snap = w:snapshot()
        w:progress(0)
        local first = rolled()
        w:restore(snap)
        w:progress(0)
        assert.are.equal(first, rolled())
    end)
end)
