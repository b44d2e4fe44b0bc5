-- fuzz/ops_persist.lua: world:save, load, hash, content_hash, snapshot and restore amid everything
-- else: a refused call changes nothing, a restore taken at once changes nothing, a save loads
-- elsewhere.
local N = require "fuzz.num"
local kiln = require "kiln"
local X = require "fuzz.context"
local gen = require "fuzz.gen"
local W = require "fuzz.worlds"

local R = math.random
local chance, pick = gen.chance, gen.pick
local S, ops = X.S, X.ops
local fail, note, call, expect = X.fail, X.note, X.call, X.expect
local wcall, extras = W.wcall, W.extras

local function busy(m)
    return m.iterating > 0 or m.defer_depth > 0 or m.cur_sys ~= nil or m.in_progress
end

-- True when a live entity holds a "lua"-valued component (its values have hooks).
local function holds_lua_values(m)
    for _, rec in pairs(m.alive) do
        for name in pairs(rec.comps) do
            local comp = m.comps[name]
            if comp and comp.kind == "lua" then return true end
        end
    end
    return false
end

-- Finalizers left by ops.gc_bomb may write to the world whenever a method returns (methods
-- pay the collector back in steps): two hashes are compared only when none ran between them.
local function finalizers() return S.finalizers or 0 end

function ops.hash(m)
    local f = finalizers()
    -- world:hash or world:content_hash (the same without the free slots), with the same forms
    local method = chance(0.3) and "content_hash" or "hash"
    local what = "world:" .. method
    -- the form: none (an integer), "hex" (16 hex digits) or anything else (refused)
    local form = chance(0.2) and "hex" or chance(0.1) and gen.garbage(extras()) or nil
    local good = form == nil or form == "hex"
    local r1 = wcall(m, method, form)
    local r2 = wcall(m, method, good and form or nil)
    if expect(what, good, r1, tostring(form)) and good and expect(what, true, r2) then
        if form == "hex" and not (type(r1[2]) == "string" and r1[2]:match("^%x+$") and #r1[2] == 16) then
            fail("%s('hex') gave %s", what, tostring(r1[2]))
        elseif r1[2] ~= r2[2] and f == finalizers() then
            fail("%s changed between two calls with nothing in between", what)
        end
    end
end

function ops.save_load(m)
    local opts = pick({nil, {format = "binary"}, {format = "json"}, {format = "xml"}, {fmt = "json"}, 3})
    local good_opts = opts == nil or (type(opts) == "table" and (opts.format == "binary" or opts.format == "json"))
    local r = wcall(m, "save", opts)
    if busy(m) then
        note("saves inside loops and systems")
        return
    end
    if not good_opts then
        expect("world:save", false, r, "bad options")
        return
    end
    if not r[1] then
        -- only values that are not plain data may refuse a save
        if not tostring(r[2]):find("cannot be saved", 1, true) then fail("world:save raised: %s", tostring(r[2])) end
        note("saves refused for non-plain Lua values")
        return
    end
    local data = r[2]
    note("saves")
    local w2 = kiln.world()
    local lr = call("world:load", S.WM.load, w2, data, {skip_unknown = true})
    if expect("world:load", true, lr, "a save into a fresh world") then
        local cr = call("world:count", S.WM.count, w2)
        if cr[1] and cr[2] ~= m:count() then
            fail("a save of %d entities loaded %s", m:count(), tostring(cr[2]))
        end
    end
    call("world:close", S.WM.close, w2)
    -- a cut save into the fuzzed world: refused, the world unchanged (checked after the error)
    if #data > 2 then
        local cut = wcall(m, "load", data:sub(1, R(0, #data - 2)))
        expect("world:load", false, cut, "a cut save")
        note("cut saves refused")
    end
end

function ops.snapshot_restore(m)
    local f = finalizers() -- a finalizer's write after the snapshot is undone by the restore
    local r = wcall(m, "snapshot")
    if busy(m) then
        note("snapshots inside loops and systems")
        return
    end
    local want = not holds_lua_values(m)
    if not expect("world:snapshot", want, r, "Lua values present: " .. tostring(not want)) or not r[1] then
        return
    end
    local before = wcall(m, "hash")
    local rr = wcall(m, "restore", r[2])
    expect("world:restore", true, rr)
    local after = wcall(m, "hash")
    if before[1] and after[1] and before[2] ~= after[2] and f == finalizers() then
        fail("a restore taken at once changed the hash")
    end
    local bad = wcall(m, "restore", pick({{}, 1, "snap", m.world}))
    expect("world:restore", false, bad, "not a snapshot")
    note("snapshots restored")
end

-- Names and clones change what the model tracks, so the fuzzer only reads names and misuses
-- both: a name read on a live entity is nil (the model gives none), look-ups find nothing,
-- and clones of dead or malformed handles raise.
function ops.names_and_clone(m)
    local e = W.pick_entity(m)
    local i = type(e) == "number" and N.tointeger(e)
    local alive = i and i > 0 and m.alive[i] ~= nil
    local r = wcall(m, "name", e)
    if alive then
        if expect("world:name", true, r) and r[2] ~= nil then fail("world:name(%s) = %s", tostring(e), tostring(r[2])) end
    else
        expect("world:name", false, r, "not a live entity")
    end
    local l = wcall(m, "lookup", pick({"ship", "", gen.garbage(extras())}))
    if l[1] and l[2] ~= nil then fail("world:lookup found %s in a world without names", tostring(l[2])) end
    if not alive then
        expect("world:clone", false, wcall(m, "clone", e), "not a live entity")
    elseif chance(0.5) then
        expect("world:clone", false, wcall(m, "clone", e, pick({5, {tree = 1}, {deep = true}})), "bad options")
    end
    note("names read, clones misused")
end

-- world:random and world:seed register the RandomSeed/RandomState resources, which the model
-- does not track: the fuzzer only misuses them (each raises before touching the world).
function ops.random_misuse(m)
    expect("world:random", false, wcall(m, "random", pick({0, -5, "x", {}, 2.5})), "bad bounds")
    expect("world:random", false, wcall(m, "random", 5, pick({1, "y", 4.5})), "bad interval")
    expect("world:seed", false, wcall(m, "seed", pick({"x", {}, 1.5, true})), "not an integer")
    note("random misused")
end

-- world:prefab checks a def without spawning: garbage raises, a def of known components
-- makes a prefab (spawning it would change what the model tracks, so it is not spawned here).
function ops.prefab_defs(m)
    local r = wcall(m, "prefab", pick({5, "x", {comps = {}}, {components = {NoSuch = {}}}, {children = {3}}}))
    expect("world:prefab", false, r, "a bad def")
    local ok = wcall(m, "prefab", {components = {}, children = {{components = {}}}})
    expect("world:prefab", true, ok, "an empty def")
    note("prefab defs checked")
end

-- world:instantiate of hostile scenes raises, the world untouched (a scene that lands would
-- change what the model tracks); world:export only reads, and refuses "lua" values.
function ops.scenes(m)
    local bad = pick({'{"version": 2, "entities": []}', '{"version": 1, "entities": [{"parent": 1}]}',
                      '{"version": 1, "entities": [{"prefab": "none"}]}', '{"version": 1, "entities": [{"parent": 2}, {"parent": 1}]}',
                      '{"version": 1, "entities": [{"components": {"NoSuch": {}}}]}', '{"version": 1, "entities": [{}',
                      5, {}, gen.garbage(extras())})
    expect("world:instantiate", false, wcall(m, "instantiate", bad, chance(0.3) and {prefabs = {none = 5}} or nil), "a bad scene")
    if busy(m) then return end
    local r = wcall(m, "export", chance(0.2) and pick({5, {"x"}, {0}}) or nil)
    if r[1] and type(r[2]) ~= "string" then fail("world:export returned %s", type(r[2])) end
    if r[1] and holds_lua_values(m) then fail("world:export wrote \"lua\" values") end
    note("scenes refused, exports written")
end
