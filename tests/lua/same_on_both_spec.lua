-- same_on_both_spec.lua: what must not depend on the interpreter (Lua 5.4 or LuaJIT), as the
-- differential test (tests/diff) found it did: which fault a value with several reports, views'
-- errors, what q:bulk_ffi passes for a tag, a saved -0, the mod manager after a loop left by
-- break, a query reused in the run of a system that left its loop, a mod after running out of
-- memory, a memory strike only for a run that failed for memory; and a crash it met on both.
local kiln = require "kiln"

local function message(fn, ...)
    local ok, err = pcall(fn, ...)
    assert.is_false(ok)
    return err
end

-- A fresh folder holding one mod file, name.lua with source; returns the folder and the path.
local function mod_folder(name, source)
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p '" .. dir .. "'"))
    local f = assert(io.open(dir .. "/" .. name .. ".lua", "w"))
    f:write(source)
    f:close()
    return dir, dir .. "/" .. name .. ".lua"
end

local function remove_folder(dir) os.execute("rm -rf '" .. dir .. "'") end

describe("a value with several faults", function()
    local w
    before_each(function()
        w = kiln.world()
        w:component("Body", "double m; int8_t a; vec2 p; int32_t arr[2]")
        w:component("Tag")
    end)
    after_each(function() w:close() end)

    it("reports a name the component lacks before any bad field", function()
        for _, zz in ipairs({"zz", "aa", "m2"}) do
            local value = {m = "heavy", a = 300, p = {q = 1}, arr = {x = 1}}
            value[zz] = 1
            assert.are.equal("world:spawn: Body has no field '" .. zz .. "'",
                message(w.spawn, w, {Body = value}))
        end
        assert.are.equal("world:spawn: Body has no field 'aa'",
            message(w.spawn, w, {Body = {zz = 1, aa = 2, m = "x"}}))
    end)

    it("reports the first bad field in schema order", function()
        local e = w:spawn{Body = {}}
        assert.are.equal("world:set: field 'a' of Body on entity 0v1: 300 is out of range for int8 [-128, 127]",
            message(w.set, w, e, "Body", {arr = 7, p = 5, a = 300}))
        assert.are.equal("world:set: field 'p' of Body on entity 0v1: vec2 takes x, y or [1] to [2], got [3]",
            message(w.set, w, e, "Body", {arr = 7, p = {z = 1, q = 2, [3] = 0}}))
        assert.are.equal("world:set: field 'arr' of Body on entity 0v1: an array of 2 takes positions [1] to [2], got key 'b'",
            message(w.set, w, e, "Body", {arr = {c = 1, b = 2, [0] = 3}}))
    end)

    it("names the bad component with the lowest id in a spawn", function()
        assert.are.equal("world:spawn: value for Body must be a table of fields, got number",
            message(w.spawn, w, {Tag = 1, Body = 5}))
        assert.are.equal(0, w:count())
    end)
end)

describe("a view's error", function()
    it("carries no position, as a table view's does, with FFI views too", function()
        local w = kiln.world()
        w:component("Position", "float x, y;")
        w:spawn{Position = {x = 1}}
        local q = w:query{"Position"}
        local got = {}
        for _, p in q:each() do
            got[#got + 1] = message(function() p.zz = 1 end)
            got[#got + 1] = message(function() return p.zz end)
        end
        assert.are.same({"Position has no field 'zz'", "Position has no field 'zz'"}, got)
        w:system{name = "watch", query = {"Position"}, each = function(_, p)
            got[#got + 1] = message(function() p.zz = 1 end)
        end}
        assert.is_true(w:progress())
        assert.are.equal("system 'watch' cannot write Position: it is read-only (declared only in reads)", got[3])
        w:close()
    end)
end)

describe("q:bulk_ffi", function()
    it("passes a tag term as true and an optional term the row lacks as nil", function()
        local w = kiln.world()
        w:component("Position", "float x, y;")
        w:component("Velocity", "float x, y;")
        w:component("Frozen")
        w:spawn{Position = {x = 1}, Frozen = true}
        local seen = {}
        w:query{"Position", "Frozen", optional = {"Velocity"}}:bulk_ffi(function(n, entities, p, frozen, v)
            for i = 0, n - 1 do seen[#seen + 1] = {p[i].x, frozen, v} end
        end)
        assert.are.same({{1, true, nil}}, seen)
        w:close()
    end)
end)

describe("q:bulk's check of a term table", function()
    it("names a misspelt key first, then the first field in schema order replaced or removed, and the next call works", function()
        local w = kiln.world()
        w:component("Body", "float x, y, z;")
        w:spawn{Body = {}}
        local q = w:query{"Body"}
        assert.are.equal("query:bulk: Body has no field 'aa'", message(q.bulk, q, function(n, e, b)
            b.zz, b.aa, b.mm = {}, {}, {}
            b.x = {}
        end))
        assert.are.equal("query:bulk: Body.x is not the array fn was given (write into it, do not replace it)",
            message(q.bulk, q, function(n, e, b) b.z, b.x = {}, nil end))
        assert.are.equal("query:bulk: Body.y is not the array fn was given (write into it, do not replace it)",
            message(q.bulk, q, function(n, e, b) b.z, b.y = nil, {} end))
        q:bulk(function(n, e, b) b.x[1] = 5 end) -- the raising calls left the term table as given
        assert.are.equal(5, w:get(w:entities()[1], "Body").x)
        w:close()
    end)
end)

describe("a saved Lua value", function()
    it("keeps the sign of -0", function()
        for _, format in ipairs({"binary", "json"}) do
            local w = kiln.world()
            w:resource("Notes", {zero = -0.0, list = {-0.0, 0}})
            local copy = kiln.world()
            copy:load(w:save{format = format})
            local notes = copy:resource("Notes")
            assert.are.equal(-math.huge, 1 / notes.zero)
            assert.are.equal(-math.huge, 1 / notes.list[1])
            assert.are.equal(math.huge, 1 / notes.list[2])
            w:close()
            copy:close()
        end
    end)
end)

describe("names given while a loop stuck in a coroutine keeps the world deferred", function()
    it("land at the next progress: a name's check, which iterates, does not apply the queue again", function()
        local w = kiln.world()
        w:component("Position", "float x, y;")
        local e = w:spawn{Position = {}}
        local q = w:query{"Position"}
        local co = coroutine.wrap(function()
            for _ in q:each() do coroutine.yield() end
        end)
        co() -- the loop never ends: the world stays deferred
        w:name(e, "rock")
        w:name(e, "rock") -- two queued adds of Name: the first one's check iterated, and its end applied the second, endlessly
        assert.is_nil(w:lookup("rock"))
        assert.is_true(w:progress())
        assert.are.equal(e, w:lookup("rock"))
        w:close()
    end)
end)

describe("the mod manager after a loop left by break", function()
    it("runs as between frames: the loop has ended on both interpreters", function()
        local dir, path = mod_folder("late", 'world:spawn{P = {x = 7}}\n')
        local w = kiln.world()
        w:component("P", "float x, y;")
        for i = 1, 3 do w:spawn{P = {x = i}} end
        local mods = kiln.mods(w, {instructions = 1e6})
        local q = w:query{"P"}
        for _, p in q:each() do
            p.y = 5
            w:spawn{P = {x = 9}} -- queued: lands when the loop ends
            break
        end
        local info, err = mods:load(path)
        assert.is_nil(err)
        assert.are.equal("late", info.name)
        assert.are.equal(5, w:count()) -- the queued spawn landed, then the mod's
        local ys = 0
        for _, p in q:each() do ys = ys + p.y end
        assert.are.equal(5, ys) -- the row the loop left was written back
        assert.is_true(mods:unload("late"))
        assert.are.equal(4, w:count())
        mods:close()
        w:close()
        remove_folder(dir)
    end)
end)

describe("a query whose loop a system left by break", function()
    it("runs again in the same run, table and FFI views alike, and in a mod's system", function()
        local w = kiln.world()
        w:component("P", "float x, y;")
        w:component("Brain", "lua")
        for i = 1, 3 do w:spawn{P = {x = i}, Brain = {i}} end
        local fast, slow = w:query{"P"}, w:query{"P", "Brain"} -- FFI views under LuaJIT, and table views
        local seen = {}
        w:system{name = "again", writes = {"P", "Brain"}, run = function()
            for _, q in ipairs({fast, slow}) do
                for _, p in q:each() do p.y = 1; break end
                local n = 0
                for _ in q:each() do n = n + 1 end
                seen[#seen + 1] = n
            end
            local rows = 0
            fast:bulk(function(k) rows = rows + k end)
            seen[#seen + 1] = rows
        end}
        local dir, path = mod_folder("again", [[
local q = world:query{"P"}
world:system{name = "mod_again", writes = {"P"}, run = function()
    for e in q:each() do break end
    local n = 0
    q:bulk(function(k) n = n + k end)
    for e in q:each() do n = n + 1 end
    print(n)
end}
]])
        local lines = {}
        local mods = kiln.mods(w, {log = function(_, line) lines[#lines + 1] = line end})
        assert(mods:load(path))
        local ok, failures = w:progress(0.1)
        assert.are.same({}, failures or {})
        assert.is_true(ok)
        assert.are.same({3, 3, 3}, seen)
        local ys = 0
        for _, p in fast:each() do ys = ys + p.y end
        assert.are.equal(1, ys) -- the row each loop left was written back (the same row twice)
        assert.are.same({"6"}, lines)
        mods:close()
        w:close()
        remove_folder(dir)
    end)
end)

describe("a mod whose system ran out of memory once", function()
    it("runs its next frames: what the failed run built is collected", function()
        local dir, path = mod_folder("greedy", [[
local n = 0
world:system{name = "greedy", run = function()
    n = n + 1
    if n == 1 then local t, s = {}, string.rep("x", 4000); while true do t[#t + 1] = s .. #t end end
    local t = {}
    for i = 1, 200 do t[i] = string.rep("y", 100) .. i end
    print(n, #t)
end}
]])
        local w = kiln.world()
        local lines = {}
        local mods = kiln.mods(w, {memory = 4 * 1024 * 1024, instructions = 2e6, milliseconds = -1,
                                   log = function(_, line) lines[#lines + 1] = line end})
        assert(mods:load(path))
        local ok, failures = w:progress(0.1)
        assert.is_false(ok)
        assert.are.equal("mod 'greedy': not enough memory", failures[1].message)
        for frame = 2, 4 do
            ok, failures = w:progress(0.1)
            assert.is_true(ok, failures and failures[1] and failures[1].message)
        end
        assert.are.same({"2\t200", "3\t200", "4\t200"}, lines)
        assert.are.equal("running", mods:list()[1].state)
        mods:close()
        w:close()
        remove_folder(dir)
    end)
end)

describe("a mod's system that fails for its instructions", function()
    it("is no memory strike, though an allocation in it found memory full of another run's garbage", function()
        local dir, path = mod_folder("spender", [[
world:system{name = "fill", run = function()
    local t, s = {}, string.rep("x", 4000)
    while true do t[#t + 1] = s .. #t end
end}
world:system{name = "spin", after = {"fill"}, run = function()
    local t = {}
    for i = 1, 100 do t[i] = string.rep("y", 100) .. i end
    while true do end
end}
]])
        local w = kiln.world()
        local mods = kiln.mods(w, {memory = 2 * 1024 * 1024, instructions = 1e6, milliseconds = -1})
        assert(mods:load(path))
        for frame = 1, 4 do
            local ok, failures = w:progress(0.1)
            assert.is_false(ok)
            assert.are.equal(2, #failures)
            assert.are.equal("mod 'spender': not enough memory", failures[1].message)
            assert.are.equal("mod 'spender': system 'spin' ran past its budget of 1000000 instructions",
                failures[2].message)
        end
        assert.are.equal("running", mods:list()[1].state)
        mods:close()
        w:close()
        remove_folder(dir)
    end)
end)

describe("64-bit hashes and seeds", function()
    local JIT = type(jit) == "table"
    local TWO_60 = 2 ^ 60
    local w
    before_each(function()
        w = kiln.world()
        w:component("P", "int32_t v;")
        w:spawn{P = {v = 1}}
        w:seed(1)
    end)
    after_each(function() w:close() end)

    -- The world of tools' jit_hash reproducer: its hash came out rounded to a double under
    -- LuaJIT (4385189368782896293 under Lua 5.4 against ...128, before the hash took in the slots).
    local HASH_HEX = "c010f1c759f89cfe"

    it("world:hash('hex') gives every bit of the hash, the same text on either interpreter", function()
        assert.are.equal(HASH_HEX, w:hash("hex"))
        if not JIT then -- the pinned text is the 5.4 integer, so LuaJIT's text matches it too
            assert.are.equal(string.format("%016x", w:hash()), w:hash("hex"))
        end
        w:spawn{P = {v = 2}}
        assert.are_not.equal(HASH_HEX, w:hash("hex"))
        assert.are.equal("bad argument #1 to 'world:hash' (form 'dec' is not \"hex\")", message(w.hash, w, "dec"))
        -- a form with a NUL after "hex" is not "hex"; a long one is quoted in part
        assert.are.equal("bad argument #1 to 'world:hash' (form 'hex\\0x' is not \"hex\")", message(w.hash, w, "hex\0x"))
        assert.is_true(#message(w.hash, w, string.rep("h", 1e6)) < 400)
        assert.are.equal("bad argument #1 to 'world:hash' (\"hex\" or nil expected, got number)",
            message(w.hash, w, 16))
    end)

    it("world:content_hash leaves out the free slots world:hash takes in, in the same two forms", function()
        local content, hash = w:content_hash("hex"), w:hash("hex")
        assert.truthy(content:match("^" .. string.rep("%x", 16) .. "$"))
        assert.are_not.equal(hash, content)
        if not JIT then assert.are.equal(string.format("%016x", w:content_hash()), content) end
        w:despawn(w:spawn{P = {v = 2}}) -- a generation spent: the next handles differ, the content not
        assert.are_not.equal(hash, w:hash("hex"))
        assert.are.equal(content, w:content_hash("hex"))
        w:spawn{P = {v = 2}}
        assert.are_not.equal(content, w:content_hash("hex"))
        assert.are.equal("bad argument #1 to 'world:content_hash' (form 'dec' is not \"hex\")",
            message(w.content_hash, w, "dec"))
    end)

    it("world:seed('hex') reads a seed beyond 2^53 exactly; plain world:seed() raises for it under LuaJIT", function()
        local data = w:save{format = "json"}
        local big, n = data:gsub('"seed": 1\n', '"seed": "1152921504606846977"\n') -- 2^60 + 1
        assert.are.equal(1, n)
        local v = kiln.world()
        v:component("P", "int32_t v;")
        v:load(big)
        assert.are.equal("1000000000000001", v:seed("hex"))
        if JIT then
            assert.are.equal("world:seed: the seed (hex 1000000000000001) is outside [-2^53, 2^53], where " ..
                "LuaJIT's numbers hold every integer exactly: read it with world:seed(\"hex\")", message(v.seed, v))
        else
            assert.are.equal("1000000000000001", string.format("%016x", v:seed()))
        end
        v:close()
        assert.are.equal("0000000000000001", w:seed("hex"))
        w:seed(-1)
        assert.are.equal(-1, w:seed())
        assert.are.equal("ffffffffffffffff", w:seed("hex"))
    end)

    it("seeds and random bounds beyond 2^53 raise under LuaJIT instead of losing bits", function()
        w:seed(2 ^ 53)
        assert.are.equal("0020000000000000", w:seed("hex"))
        local r = w:random(-2 ^ 53, 2 ^ 53)
        assert.is_true(r >= -2 ^ 53 and r <= 2 ^ 53 and r == math.floor(r))
        if JIT then
            local beyond = "is outside [-2^53, 2^53], where LuaJIT's numbers hold every integer exactly)"
            assert.are.equal("bad argument #1 to 'world:seed' (1152921504606846976 " .. beyond,
                message(w.seed, w, TWO_60))
            assert.are.equal("bad argument #1 to 'world:seed' (-9007199254740994 " .. beyond,
                message(w.seed, w, -2 ^ 53 - 2))
            assert.are.equal("bad argument #2 to 'world:random' (1152921504606846976 " .. beyond,
                message(w.random, w, 1, TWO_60))
            assert.are.equal("bad argument #1 to 'world:random' (1152921504606846976 " .. beyond,
                message(w.random, w, TWO_60))
            assert.are.equal("0020000000000000", w:seed("hex")) -- the refused seed changed nothing
        else
            w:seed(TWO_60) -- exact in 5.4: a float with an integer value converts
            assert.are.equal("1000000000000000", w:seed("hex"))
            local x = w:random(1, TWO_60)
            assert.is_true(x >= 1 and x <= TWO_60)
        end
    end)
end)
