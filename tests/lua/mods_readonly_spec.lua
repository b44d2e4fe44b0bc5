-- mods_readonly_spec.lua: kiln.mods' readonly. What the host lists there every mod may read but
-- none may write, add, remove, set or clear, nor despawn an entity holding it, by any path (its
-- top level, its systems exclusive or not, views, command buffers, prefabs, exports); each
-- attempt is refused and the world's hash stays what it was.
local kiln = require "kiln"
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local M = dofile(here .. "mods_helpers.lua")

local READONLY = {"Score", "Waves", "Hull"}
local unpack = table.unpack or unpack -- (LuaJIT)

-- The host: resources Score and Waves, a ship with a Hull under a root without one, a rock
-- without one. A manager over it with opts (default: READONLY read-only); no manager for false.
local function host(opts)
    local w = kiln.world{transforms = true}
    w:component("Score", "int32_t points;")
    w:component("Waves", "int32_t wave; float timer;")
    w:component("Hull", "float hp;")
    w:component("Position", "float x, y;")
    w:resource("Score", {points = 7})
    w:resource("Waves", {wave = 3, timer = 0.5})
    local root = w:spawn{Position = {x = 0, y = 0}}
    local ship = w:spawn{Hull = {hp = 10}, Position = {x = 1, y = 1}}
    local rock = w:spawn{Position = {x = 2, y = 2}}
    w:set_parent(ship, root)
    local mods
    if opts ~= false then mods = kiln.mods(w, opts or {readonly = READONLY}) end
    return w, mods, {root = root, ship = ship, rock = rock}
end

-- Mod code: try(what, fn, ...) runs fn protected and prints "refused what: message" or
-- "done what"; a method answering nil, message (commands:apply) is refused too.
local PRELUDE = [[
local ROOT, SHIP, ROCK = %d, %d, %d
local function try(what, fn, ...)
    local ok, r, msg = pcall(fn, ...)
    if not ok then print("refused " .. what .. ": " .. tostring(r))
    elseif r == nil and msg then print("refused " .. what .. ": " .. tostring(msg))
    else print("done " .. what) end
end
local function reads(w)
    local q = w:query{"Hull"}
    local seen = 0
    for _, h in q:each() do seen = seen + h.hp end
    print(("read %%d %%d %%g %%g"):format(w:resource("Score").points, w:resource("Waves").wave,
                                       w:get(SHIP, "Hull").hp, seen))
end
]]

local function prelude(ids) return PRELUDE:format(ids.root, ids.ship, ids.rock) end

-- Every line of mod name's log that starts with "done" or "refused", and its "read" lines.
local function outcomes(mods, name)
    local tried, read = {}, {}
    for _, line in ipairs(mods:log(name)) do
        local verdict, what, rest = line:match("^(%a+) ([%w_ ]+)(.*)$")
        if verdict == "done" or verdict == "refused" then tried[#tried + 1] = {verdict, what, rest}
        elseif verdict == "read" then read[#read + 1] = line end
    end
    return tried, read
end

-- Asserts that mod name logged n attempts, each refused with the option's message, and that
-- each read line saw the host's values.
local function all_refused(mods, name, n)
    local tried, read = outcomes(mods, name)
    assert.are.equal(n, #tried, "attempts logged")
    for _, t in ipairs(tried) do
        assert.are.equal("refused", t[1], t[2] .. " was let through")
        assert.truthy(t[3]:find("read-only to mods (the host lists it in kiln.mods' readonly)", 1, true),
                      t[2] .. ": " .. t[3])
    end
    assert.is_true(#read > 0, "the mod read")
    for _, line in ipairs(read) do assert.are.equal("read 7 3 10 10", line) end
end

describe("kiln.mods readonly", function()
    after_each(M.cleanup)

    it("refuses a value that is not a list of registered component names, and opens no manager", function()
        local w = host(false)
        local cases = {
            {"Score", "readonly must be a list of component names"},
            {{"Score", 3}, "readonly must be a list of component names"},
            {{"Score", x = "Hull"}, "readonly must be a list of component names"},
            {{"Score", nil, "Hull"}, "readonly must be a list of component names"},
            {{"Nope"}, "readonly names 'Nope', which is not a component of the world; register it before the mod manager opens"},
        }
        local many = {}
        for i = 1, 65 do many[i] = "Score" end
        cases[#cases + 1] = {many, "readonly lists more than 64 names"}
        for _, case in ipairs(cases) do
            local ok, err = pcall(kiln.mods, w, {readonly = case[1]})
            assert.is_false(ok)
            assert.truthy(err:find(case[2], 1, true), err)
        end
        local mods = kiln.mods(w, {readonly = {"Score"}}) -- none of those was left open
        mods:close()
    end)

    -- a name a mod of an earlier manager registered is the mod's schema, as under mods:readonly:
    -- the option refuses it until the host declares it itself
    it("refuses a name a mod of a closed manager registered, until the host declares it", function()
        local w, mods = host{}
        local dir = M.folder()
        M.write(dir, "owner.lua", "world:component('Loot', 'int32_t n;')")
        assert(mods:load(dir .. "/owner.lua"))
        mods:close()
        local ok, err = pcall(kiln.mods, w, {readonly = {"Score", "Loot"}})
        assert.is_false(ok)
        assert.truthy(err:find("kiln.mods: readonly names 'Loot', which was registered by a mod, not the host", 1,
                               true), err)
        w:component("Loot", "int32_t n;") -- the host's now
        mods = kiln.mods(w, {readonly = {"Score", "Loot"}})
        M.write(dir, "looter.lua", "print(pcall(world.resource, world, 'Loot', {n = 1}))")
        assert(mods:load(dir .. "/looter.lua"))
        assert.truthy(mods:log("looter")[1]:find("Loot is read-only to mods", 1, true), mods:log("looter")[1])
        assert.is_nil(w:resource("Loot"))
    end)

    it("refuses a mod system that lists one in writes, naming it and the option", function()
        local w, mods, ids = host()
        local dir = M.folder()
        local hash = w:hash()
        M.write(dir, "greedy.lua", "world:system{name = 'greedy', reads = {'Score'}, writes = {'Waves'}, run = function() end}")
        local ok, err = mods:load(dir .. "/greedy.lua")
        assert.is_nil(ok)
        assert.truthy(err:find("writes lists Waves, which is read-only to mods (the host lists it in kiln.mods' readonly)",
                               1, true), err)
        assert.are.equal(hash, w:hash())
        -- reads are fine, exclusive or not
        M.write(dir, "reader.lua", prelude(ids) .. [[
world:system{name = "reader", reads = {"Score", "Waves", "Hull"}, run = reads}
world:system{name = "reader_x", exclusive = true, run = reads}
]])
        assert(mods:load(dir .. "/reader.lua"))
        assert.are.same({}, M.frames(w, 2))
        local _, read = outcomes(mods, "reader")
        assert.are.same({"read 7 3 10 10", "read 7 3 10 10", "read 7 3 10 10", "read 7 3 10 10"}, read)
    end)

    it("refuses every write of a mod's top level; the mod still reads, and the world stays as it was", function()
        local w, mods, ids = host()
        local dir = M.folder()
        -- another mod's export that writes: called by the hostile one, it runs as its own code
        M.write(dir, "poker.lua", "mod.exports.poke = function() world:resource('Score', {points = 1}) return true end")
        assert(mods:load(dir .. "/poker.lua"))
        local hash = w:hash()
        M.folder_mod(dir, "hostile", {name = "hostile", version = "1", depends = {"poker"}}, {["init.lua"] = prelude(ids) .. [[
try("set", world.set, world, SHIP, "Hull", {hp = 0})
try("add", world.add, world, ROCK, "Hull", {hp = 1})
try("remove", world.remove, world, SHIP, "Hull")
try("resource set", world.resource, world, "Score", {points = 1000000})
try("resource clear", world.resource, world, "Score", nil)
try("resource waves", world.resource, world, "Waves", {wave = 99})
try("spawn hull", world.spawn, world, {Hull = {hp = 1}})
try("spawn score", world.spawn, world, {Position = {x = 5}, Score = {points = 1}})
try("despawn", world.despawn, world, SHIP)
try("system writes", world.system, world, {name = "w1", writes = {"Score"}, run = function() end})
try("exclusive writes", world.system, world, {name = "w2", exclusive = true, writes = {"Hull"}, run = function() end})
try("each system", world.system, world, {name = "w3", query = {"Hull"}, writes = {"Hull"}, each = function() end})
local q = world:query{"Hull"}
try("each view", function() for _, h in q:each() do h.hp = 0 end end)
try("each_ffi view", function() for _, h in q:each_ffi() do h.hp = 0 end end)
-- q:bulk hands out copies of what it may not write back: the host's value must stay
pcall(q.bulk, q, function(n, _, h) for i = 1, n do h.hp[i] = 0 end end)
pcall(q.bulk_ffi, q, function(n, _, h) for i = 0, n - 1 do h[i].hp = 0 end end)
for _, op in ipairs{"set", "add", "remove", "despawn"} do
    local c = kiln.commands()
    if op == "despawn" then c:despawn(SHIP)
    elseif op == "remove" then c:remove(SHIP, "Hull")
    else c[op](c, op == "add" and ROCK or SHIP, "Hull", {hp = 0}) end
    try("commands " .. op, c.apply, c, world)
end
try("prefab", function() world:prefab{components = {Hull = {hp = 3}}}:spawn() end)
local poker = mod.import("poker")
try("export", poker.poke)
reads(world)
]]})
        assert(mods:load(dir .. "/hostile"))
        all_refused(mods, "hostile", 20)
        assert.are.equal(hash, w:hash())
        assert.are.equal(10, w:get(ids.ship, "Hull").hp)
    end)

    it("refuses every write of a mod's systems, exclusive ones too, frame after frame", function()
        local w, mods, ids = host()
        local twin = host() -- the same frames without the mod
        local dir = M.folder()
        M.write(dir, "hostile.lua", prelude(ids) .. [[
local q = world:query{"Hull"}
local function attack(w, tag)
    try(tag .. " set", w.set, w, SHIP, "Hull", {hp = 0})
    try(tag .. " add", w.add, w, ROCK, "Hull", {hp = 1})
    try(tag .. " remove", w.remove, w, SHIP, "Hull")
    try(tag .. " resource", w.resource, w, "Waves", {wave = 0})
    try(tag .. " clear", w.resource, w, "Score", nil)
    try(tag .. " spawn", w.spawn, w, {Hull = {hp = 1}})
    try(tag .. " despawn", w.despawn, w, SHIP)
    try(tag .. " view", function() for _, h in q:each() do h.hp = 0 end end)
    local c = kiln.commands()
    c:set(SHIP, "Hull", {hp = 0})
    try(tag .. " commands", c.apply, c, w)
    reads(w)
end
world:system{name = "plain", reads = {"Score", "Waves", "Hull"}, writes = {"Position"},
             run = function(w) attack(w, "plain") end}
world:system{name = "alone", exclusive = true, run = function(w)
    attack(w, "alone")
    try("alone despawn_recursive", w.despawn_recursive, w, ROOT)
end}
]])
        assert(mods:load(dir .. "/hostile.lua"))
        assert.are.same({}, M.frames(w, 2))
        M.frames(twin, 2)
        all_refused(mods, "hostile", 2 * 19)
        assert.are.equal(twin:hash(), w:hash())
    end)

    -- a mod's despawn in a frame is queued: checked when made and again as it lands, after the
    -- host's changes queued before it (here a host system earlier in the frame adds a Hull, and
    -- spawns one whose handle the mod guessed)
    it("drops a mod's queued despawn whose entity gained one before it landed", function()
        local w, mods, ids = host()
        local kid = w:spawn{Position = {x = 3, y = 3}}
        w:set_parent(kid, ids.rock)
        local loner = w:spawn{Position = {x = 4, y = 4}}
        -- the handle the host's next spawn takes (a slot comes back a generation on), which a
        -- mod can guess: reserved by the host's queued spawn, it is alive to a despawn
        local spent = w:spawn{}
        w:despawn(spent)
        local guess, made = spent + 2 ^ 32, nil
        w:system{name = "armer", writes = {"Hull"}, run = function(ww)
            for _, e in ipairs{kid, loner} do
                if ww:is_alive(e) and not ww:has(e, "Hull") then ww:add(e, "Hull", {hp = 2}) end
            end
            made = made or ww:spawn{Hull = {hp = 3}}
        end}
        local dir = M.folder()
        M.write(dir, "killer.lua", prelude(ids) .. ([[
world:system{name = "killer", reads = {"Parent"}, writes = {"Position"}, run = function(w)
    try("despawn", w.despawn, w, %d)
    try("despawn tree", w.despawn_recursive, w, ROCK)
    try("despawn guessed", w.despawn, w, %.0f)
end}
]]):format(loner, guess))
        assert(mods:load(dir .. "/killer.lua"))
        assert.are.same({}, M.frames(w, 1))
        assert.are.equal(guess, made)
        assert.is_true(w:is_alive(made))
        local tried = outcomes(mods, "killer")
        assert.are.same({{"done", "despawn", ""}, {"done", "despawn tree", ""}, {"done", "despawn guessed", ""}},
                        tried) -- queued
        assert.is_true(w:is_alive(loner))
        assert.are.equal(2, w:get(loner, "Hull").hp)
        assert.is_true(w:is_alive(kid))
        assert.are.equal(2, w:get(kid, "Hull").hp)
        assert.is_false(w:is_alive(ids.rock)) -- it held none: its own despawn landed
        local info = M.info(mods, "killer")
        assert.are.equal(3, info.dropped)
        assert.truthy(info.dropped_error:find("system 'killer': command %d+ %(despawn%) on entity .*: entity holds "
                                              .. "Hull, which this despawn must keep; dropped"), info.dropped_error)
    end)

    -- paths the lists above leave out: a coroutine's body (in a system, resumed frame after
    -- frame), a value that raises while converted, an error raised inside a pcall'd write
    it("counts a frame's queued despawns against world_memory, however many drop as they land", function()
        local w = kiln.world()
        w:component("Hull", "float hp;")
        w:component("Position", "float x, y;")
        local targets = {}
        for i = 1, 3 do targets[i] = w:spawn{Position = {x = i, y = 0}} end
        local frame = 0
        w:system{name = "armer", writes = {"Hull"}, run = function(ww)
            frame = frame + 1
            ww:add(targets[frame], "Hull", {hp = 1}) -- lands after the flood is queued
        end}
        -- 48 bytes a despawn (its record, the read-only list in 16): 1000 fit in 64 KiB, 3000 do not
        local mods = kiln.mods(w, {readonly = {"Hull"}, world_memory = 65536})
        local dir = M.folder()
        M.write(dir, "flood.lua", string.format([[
local targets, counts, frame = {%d, %d, %d}, {1000, 3000, 1000}, 0
world:system{name = "flood", writes = {"Position"}, run = function(w)
    frame = frame + 1
    for _ = 1, counts[frame] do w:despawn(targets[frame]) end
end}
]], targets[1], targets[2], targets[3]))
        assert(mods:load(dir .. "/flood.lua"))
        assert.are.same({}, M.frames(w, 1))
        assert.are.equal(1000, M.info(mods, "flood").dropped)
        local failures = M.frames(w, 1)
        assert.are.equal(1, #failures)
        assert.truthy(failures[1].message:find("world:despawn: mod 'flood' queued 65520 bytes of despawns and "
                                             .. "removals this frame; another would take 48 more, past its limit "
                                             .. "of 65536 (world_memory)", 1, true), failures[1].message)
        -- the next frame counts from nothing again
        assert.are.same({}, M.frames(w, 1))
        assert.are.equal(2000, M.info(mods, "flood").dropped)
        for i = 1, 3 do assert.is_true(w:is_alive(targets[i])) end
    end)

    it("refuses writes from a mod's coroutines and its erroring values alike", function()
        local w, mods, ids = host()
        local twin = host()
        local dir = M.folder()
        M.write(dir, "sly.lua", prelude(ids) .. [[
local bad = setmetatable({}, {__index = function() error("mid-conversion") end})
local co = coroutine.wrap(function(w)
    while true do
        try("co set", w.set, w, SHIP, "Hull", {hp = 0})
        try("co despawn", w.despawn, w, SHIP)
        w = coroutine.yield()
    end
end)
world:system{name = "sly", reads = {"Score", "Waves", "Hull"}, writes = {"Position"}, run = function(w)
    co(w)
    try("bad value", w.set, w, SHIP, "Hull", bad)
    try("nested", function() -- swallowed inside, the refusal passed on: nothing was written
        local ok, err = pcall(w.resource, w, "Score", {points = 0})
        if not ok then error(err, 0) end
    end)
    reads(w)
end}
]])
        assert(mods:load(dir .. "/sly.lua"))
        assert.are.same({}, M.frames(w, 2))
        M.frames(twin, 2)
        all_refused(mods, "sly", 2 * 4)
        assert.are.equal(twin:hash(), w:hash())
    end)

    it("leaves the host free to write them, and mods free to write the rest", function()
        local w, mods, ids = host()
        local dir = M.folder()
        M.write(dir, "mover.lua", ("world:set(%d, 'Position', {x = 9, y = 9})"):format(ids.ship))
        assert(mods:load(dir .. "/mover.lua"))
        assert.are.equal(9, w:get(ids.ship, "Position").x)
        w:resource("Score", {points = 8})
        w:set(ids.ship, "Hull", {hp = 4})
        w:system{name = "scorer", writes = {"Score"}, run = function(ww) ww:resource("Score", {points = 9}) end}
        assert.are.same({}, M.frames(w, 1))
        assert.are.equal(9, w:resource("Score").points)
        w:despawn(ids.ship)
    end)
    -- mods:readonly adds names once the manager is open (a host whose rules register them
    -- after kiln.mods, as the sample game's do); a mod loaded before is bound from then on.
    it("mods:readonly binds the mods already loaded from the call on", function()
        local w, mods, ids = host{}
        local dir = M.folder()
        M.write(dir, "poker.lua", "mod.exports.poke = function() world:resource('Score', {points = 1}) return true end")
        M.folder_mod(dir, "early", {name = "early", version = "1", depends = {"poker"}}, {["init.lua"] = prelude(ids) .. [[
local poker = mod.import("poker")
local n = 0
world:system{name = "early", exclusive = true, run = function(w)
    n = n + 1
    try("resource " .. n, w.resource, w, "Score", {points = 7 + n})
    try("set " .. n, w.set, w, SHIP, "Hull", {hp = 10 + n})
    if n > 1 then try("export " .. n, poker.poke) try("despawn " .. n, w.despawn, w, SHIP) end
end}
]]})
        assert(mods:load(dir .. "/poker.lua"))
        assert(mods:load(dir .. "/early"))
        assert.are.same({}, M.frames(w, 1))
        assert.are.equal(8, w:resource("Score").points) -- not read-only yet: the mod wrote
        w:resource("Score", {points = 7})
        w:set(ids.ship, "Hull", {hp = 10})
        assert.is_true(mods:readonly("Score", "Hull"))
        assert.is_true(mods:readonly("Score")) -- listed already: nothing more
        assert.are.same({}, M.frames(w, 1))
        assert.are.equal(7, w:resource("Score").points)
        assert.are.equal(10, w:get(ids.ship, "Hull").hp)
        local tried = outcomes(mods, "early")
        assert.are.same({{"done", "resource 1", ""}, {"done", "set 1", ""}}, {tried[1], tried[2]})
        assert.are.equal(6, #tried)
        for i = 3, 6 do
            assert.are.equal("refused", tried[i][1], tried[i][2] .. " was let through")
            assert.truthy(tried[i][3]:find("read-only to mods (the host lists it in kiln.mods' readonly)", 1, true),
                          tried[i][3])
        end
        -- a mod loaded after the call is refused its writes as with the option
        M.write(dir, "late.lua", "world:system{name = 'late', writes = {'Hull'}, run = function() end}")
        local ok, err = mods:load(dir .. "/late.lua")
        assert.is_nil(ok)
        assert.truthy(err:find("writes lists Hull, which is read-only to mods", 1, true), err)
    end)

    it("mods:readonly refuses a name a loaded mod's system writes, naming both, and adds none", function()
        local w, mods, ids = host{}
        local dir = M.folder()
        M.write(dir, "greedy.lua", "world:system{name = 'greed', reads = {'Score'}, writes = {'Waves'}, run = function() end}")
        assert(mods:load(dir .. "/greedy.lua"))
        local ok, err = mods:readonly("Score", "Waves")
        assert.is_nil(ok)
        assert.are.equal("mods:readonly: system 'greed' of mod 'greedy' lists Waves in writes; unload the mod, or make "
                         .. "Waves read-only before loading it (nothing was made read-only)", err)
        -- nothing was added: Score, named before Waves, is still the mods' to write
        M.write(dir, "writer.lua", "world:resource('Score', {points = 1})")
        assert(mods:load(dir .. "/writer.lua"))
        assert.are.equal(1, w:resource("Score").points)
        assert(mods:unload("greedy"))
        assert.is_true(mods:readonly("Waves"))
        ok, err = mods:load(dir .. "/greedy.lua")
        assert.is_nil(ok)
        assert.truthy(err:find("writes lists Waves, which is read-only to mods", 1, true), err)
        assert.is_truthy(ids)
    end)

    it("mods:readonly refuses a bad name, and adds none of the call's", function()
        local w, mods = host{}
        local dir = M.folder()
        M.write(dir, "owner.lua", "world:component('Loot', 'int32_t n;')")
        assert(mods:load(dir .. "/owner.lua"))
        local many = {}
        for i = 1, 64 do many[i] = "Score" end
        local cases = {
            {{}, "bad argument #1 to 'mods:readonly' (string expected, got no value)"},
            {{"Score", 3}, "bad argument #2 to 'mods:readonly' (string expected, got number)"},
            {{"Score", "Nope"}, "bad argument #2 to 'mods:readonly' ('Nope' is not a component of the world)"},
            {{"Score", "Loot"}, "bad argument #2 to 'mods:readonly' ('Loot' was registered by a mod, not the host)"},
        }
        for _, case in ipairs(cases) do
            local ok, err = pcall(mods.readonly, mods, unpack(case[1]))
            assert.is_false(ok)
            assert.truthy(err:find(case[2], 1, true), err)
        end
        M.write(dir, "writer.lua", "world:resource('Score', {points = 2})")
        assert(mods:load(dir .. "/writer.lua"))
        assert.are.equal(2, w:resource("Score").points)
        -- past the most: 64 names at most, counted without repeats
        for i = 1, 61 do w:component("C" .. i, "int32_t v;") many[i] = "C" .. i end
        many[62], many[63], many[64] = "Score", "Waves", "Hull"
        assert.is_true(mods:readonly(unpack(many)))
        assert.is_true(mods:readonly("Score"))
        w:component("C65", "int32_t v;")
        local ok, err = pcall(mods.readonly, mods, "C65")
        assert.is_false(ok)
        assert.truthy(err:find("more than 64 names would be read-only to mods", 1, true), err)
    end)

    it("mods:readonly is refused from a mod's code and during a frame", function()
        local w = host(false)
        local mods
        mods = kiln.mods(w, {allow = {protect = function() return mods:readonly("Score") end}})
        local dir = M.folder()
        M.write(dir, "asker.lua", "print(pcall(protect))")
        assert(mods:load(dir .. "/asker.lua"))
        assert.truthy(mods:log("asker")[1]:find("mods:readonly: not while a mod's code runs", 1, true),
                      mods:log("asker")[1])
        local during
        w:system{name = "host", run = function() during = {pcall(mods.readonly, mods, "Score")} end}
        assert.are.same({}, M.frames(w, 1))
        assert.is_false(during[1])
        assert.truthy(during[2]:find("mods:readonly: not during a frame", 1, true), during[2])
        M.write(dir, "writer.lua", "world:resource('Score', {points = 3})")
        assert(mods:load(dir .. "/writer.lua"))
        assert.are.equal(3, w:resource("Score").points)
    end)
end)
