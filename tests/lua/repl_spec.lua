-- repl_spec.lua: kiln.session, the REPL engine of the `kiln` command and the game console:
-- statements and commands, what a remote session offers, the world it opens on, completion
-- inside table constructors, and argument errors that name the session function.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- A session over a fresh environment whose `world` has the usual components.
local function session(opts)
    local env = setmetatable({kiln = kiln}, {__index = _G})
    env.world = H.world()
    return kiln.session(env, opts), env
end

local function message(f, ...)
    local ok, err = pcall(f, ...)
    assert.is_false(ok, "expected an error")
    return err
end

describe("a session", function()
    it("prints values so they read back, and entities by handle", function()
        local s = session()
        assert.are.same({"ok", "12345.678"}, {s:feed("12345.678")})
        assert.are.same({"ok", "9007199254740992.0"}, {s:feed("2^53")})
        assert.are.same({"ok", "5000000000"}, {s:feed("5000000000")})
        s:feed("a = world:spawn{Frozen = true}; b = world:spawn{Frozen = true}")
        assert.are.same({"ok", "{0v1, 1v1}"}, {s:feed("world:entities()")})
        assert.are.same({"ok", "true"}, {s:feed("kiln.entity('1v1') == b")})
        s:feed("world:despawn(a)")
        assert.are.same({"ok", "4294967296"}, {s:feed("a")})
    end)

    it("says :run's frame rate back to the driver, and refuses rates it cannot keep", function()
        local s = session()
        assert.are.same({"run", "60"}, {s:feed(":run")})
        assert.are.same({"run", "20"}, {s:feed(":run 20")})
        assert.are.same({"run", "0.5"}, {s:feed(":run 0.5")})
        for _, bad in ipairs{":run 0", ":run -5", ":run 1001", ":run fast", ":run 1e400"} do
            local status, text = s:feed(bad)
            assert.are.equal("error", status, bad)
            assert.truthy(text:find("above 0 and up to 1000", 1, true), text)
        end
    end)

    it("prints memory in :stats in B, KiB or MiB", function()
        local s, env = session()
        local _, text = s:feed(":stats")
        assert.truthy(text:find("\nmemory     %d+%.%d KiB\n"), text)
        for i = 1, 60000 do env.world:spawn{Health = {hp = i, max = i}, Position = {x = i, y = i}} end
        _, text = s:feed(":stats")
        assert.truthy(text:find("\nmemory     %d+%.%d MiB\n"), text)
    end)

    it("prints :stats with a point in a decimal-comma locale too", function()
        local s = session()
        local ran = H.in_comma_locale(function()
            local _, text = s:feed(":stats")
            assert.truthy(text:find("\nmemory     %d+%.%d KiB\n"), text)
            assert.truthy(text:find("\nframe      %d+%.%d%d%d ms %(Lua %d+%.%d%d%d ms%)"), text)
        end)
        if not ran then pending(H.COMMA_LOCALE_MISSING) end
    end)

    it("drops a statement being continued on :reset, and answers :poll and :complete between its lines", function()
        local s = session()
        assert.are.equal("more", s:feed("for i = 1, 2 do"))
        assert.are.same({"ok", "world:count"}, {s:feed(":complete world:cou")})
        assert.are.same({"ok", ""}, {s:feed(":poll")})
        assert.are.same({"ok", "1\n2"}, {s:feed("print(i) end")})
        assert.are.equal("more", s:feed("if true then"))
        assert.are.same({"ok", ""}, {s:feed(":reset")})
        assert.are.same({"ok", "3"}, {s:feed("1 + 2")})
    end)

    it("drops a statement continued past 1 MiB, and takes the next one", function()
        local s = session()
        assert.are.equal("more", s:feed("local t = {"))
        local line = string.rep("1, ", 2000) -- 6000 bytes a line
        local status, text
        for _ = 1, 200 do
            status, text = s:feed(line)
            if status ~= "more" then break end
        end
        assert.are.equal("error", status)
        assert.are.equal("a statement continued past 1048576 bytes was dropped", text)
        assert.are.same({"ok", "3"}, {s:feed("1 + 2")})
        -- one line of its own may be longer: the limit is on continuing
        assert.are.same({"ok", "2000"}, {s:feed("#{" .. line .. "}")})
    end)

    it("answers :poll with its watches", function()
        local s = session()
        s:feed(":watch world:count()")
        s:feed(":watch 1 + 1")
        assert.are.same({"ok", "[1] world:count() = 0\n[2] 1 + 1 = 2"}, {s:feed(":poll")})
    end)

    it("bounds the unknown command it quotes", function()
        local s = session()
        local status, text = s:feed(":" .. string.rep("z", 100000))
        assert.are.equal("error", status)
        assert.is_true(#text < 300, #text)
    end)
end)

describe("a remote session", function()
    it("lists in :help only the commands that work over the console", function()
        local local_help = select(2, session():feed(":help"))
        local s = session{remote = true}
        local _, help = s:feed(":help")
        for _, cmd in ipairs{":step", ":run", ":pause"} do
            assert.truthy(local_help:find(cmd, 1, true), cmd)
            assert.falsy(help:find(cmd, 1, true), cmd)
            assert.are.equal("error", (s:feed(cmd)))
        end
        for _, cmd in ipairs{":help", ":systems", ":stats", ":load", ":save", ":hash", ":watch", ":unwatch", ":quit"} do
            assert.truthy(help:find(cmd, 1, true), cmd)
        end
        assert.are.equal("ok", (s:feed(":stats")))
        assert.are.equal("ok", (s:feed(":watch 1")))
        assert.are.same({"ok", "[1] 1 = 1"}, {s:feed(":poll")})
    end)
end)

describe("world saves in the session", function()
    it(":save, :hash and :load of a save restore the world; :load still runs Lua files", function()
        local s = session()
        assert.are.equal("ok", (s:feed('world:component("Hp", "int32_t hp;")')))
        assert.are.equal("ok", (s:feed('e = world:spawn{Hp = {hp = 7}}')))
        local _, h = s:feed(":hash")
        assert.truthy(h:match("^" .. string.rep("%x", 16) .. "$"))
        local _, hex = s:feed('world:hash("hex")') -- all 16 digits, the same under LuaJIT
        assert.truthy(hex:find(h, 1, true))
        local _, content = s:feed('world:content_hash("hex")')
        assert.are.equal("ok", (s:feed('world:despawn(world:spawn{})')))
        assert.are.same({"ok", content}, {s:feed('world:content_hash("hex")')})
        assert.are_not.same({"ok", h}, {s:feed(":hash")})
        for _, name in ipairs{os.tmpname(), os.tmpname() .. ".json"} do
            assert.are.same({"ok", "saved 1 entities to " .. name}, {s:feed(":save " .. name)})
            assert.are.equal("ok", (s:feed("world:despawn(e)")))
            assert.are.same({"ok", "loaded 1 entities from " .. name}, {s:feed(":load " .. name)})
            -- a load adds to the world, with new handles: the value came back
            assert.are.equal("ok", (s:feed("e = world:entities()[1]")))
            assert.are.same({"ok", "7"}, {s:feed("world:get(e, 'Hp').hp")})
            assert.are_not.same({"ok", h}, {s:feed(":hash")})
            os.remove(name)
        end
        local status, err = s:feed(":load /nonexistent/save")
        assert.are.equal("error", status)
        assert.truthy(err:find("nonexistent", 1, true))
        assert.are.equal("error", (s:feed(":save")))
    end)
    it(":load of a named pipe says it is not a regular file, instead of waiting for a writer", function()
        -- opening a pipe to read its first bytes blocked until a writer came: a console
        -- client's :load of one held the game for good
        local fifo = os.tmpname()
        os.remove(fifo)
        assert(os.execute("mkfifo '" .. fifo .. "'"))
        local s = kiln.session({world = kiln.world()})
        local status, err = s:feed(":load " .. fifo)
        os.remove(fifo)
        assert.are.same({"error", fifo .. " is not a regular file"}, {status, err})
    end)

    -- :load tells a save from a Lua file by its first bytes: a save cut to under 8 bytes
    -- ("KILNS") was run as Lua and failed as a syntax error. It is a save, cut short.
    it(":load of a save cut inside its magic says the save is truncated", function()
        local s = session()
        assert.are.equal("ok", (s:feed('world:component("Hp", "int32_t hp;")')))
        assert.are.equal("ok", (s:feed('world:spawn{Hp = {hp = 7}}')))
        local name = os.tmpname()
        assert.are.same({"ok", "saved 1 entities to " .. name}, {s:feed(":save " .. name)})
        local f = assert(io.open(name, "rb"))
        local data = f:read("a")
        f:close()
        for n = 1, 7 do
            f = assert(io.open(name, "wb"))
            f:write(data:sub(1, n))
            f:close()
            local status, err = s:feed(":load " .. name)
            assert.are.equal("error", status)
            assert.truthy(err:find("truncated", 1, true), n .. " bytes: " .. err)
            assert.are.same({"ok", "1"}, {s:feed("world:count()")})
        end
        os.remove(name)
    end)

    -- :load hands a Lua file to load (in pieces, under a console statement's clock), not to
    -- loadfile: it still reads the file as loadfile would
    it(":load of a Lua file skips a #! line and a byte-order mark and names errors after the file", function()
        local s = session()
        local name = os.tmpname()
        local long = ("x = (x or 0) + 1\n"):rep(10000) -- over one piece
        for _, text in ipairs{"#!/usr/bin/env lua\n" .. long, "\239\187\191" .. long, long} do
            local f = assert(io.open(name, "wb"))
            f:write(text)
            f:close()
            assert.are.equal("ok", (s:feed("x = 0")))
            local st, msg = s:feed(":load " .. name)
            assert.are.same({"ok", ""}, {st, msg})
            assert.are.same({"ok", "10000"}, {s:feed("x")})
        end
        local f = assert(io.open(name, "wb"))
        f:write("x = 1\nx = = 2\n")
        f:close()
        local status, err = s:feed(":load " .. name)
        assert.are.equal("error", status)
        assert.truthy(err:find(name .. ":2:", 1, true), err)
        os.remove(name)
    end)
end)

describe("a world command stopped part way through", function()
    -- a spent budget or a console statement's time limit raises at every instruction: a
    -- stopped :load says so with the world as it was, and one that answers "ok" loaded whole
    -- (no Lua code may run after the load: its count of entities could be stopped)
    it("answers ok for a statement that ran to its end, also when showing its values is stopped", function()
        -- a statement that spawned, then a stop while its values were shown: "the statement
        -- ran past its budget" read as a spawn that did not happen, and the user spawned again
        local s, env = session()
        local done = {}
        env.done = done
        local feed, status, text = s.feed, nil, nil
        -- the statement's last act is a tail call into C: once done[1] is set, it has ended
        local line = "return rawset(done, 1, world:spawn{Position = {x = 1}})"
        H.every_stop(function() status, text = feed(s, line) end, function(n, ok, err)
            if done[1] then
                assert.is_true(ok and status == "ok", "ran, then answered " .. tostring(ok and text or err) ..
                               " at stop " .. n)
                done[1] = nil
            end
        end, 20000)
    end)

    it(":watch and :unwatch add or drop a watch whole or not at all", function()
        local s = session()
        local feed, status, text, before = s.feed, nil, nil, nil
        local function listed() local _, t = s:command(":watch") return t end
        before = listed() -- outside the hooked call: s:command is the session's own Lua code
        H.every_stop(function() status, text = feed(s, ":watch 1 + 1") end, function(n, ok, err)
            if not ok or status ~= "ok" then
                assert.are.equal(before, listed(), "a watch added, then " .. tostring(ok and text or err) .. " at stop " .. n)
            end
            before = listed()
        end, 20000)
        assert.are.equal("[1] 1 + 1", listed())
        before = listed() -- outside the hooked call: s:command is the session's own Lua code
        H.every_stop(function() status, text = feed(s, ":unwatch 1") end, function(n, ok, err)
            if not ok or status ~= "ok" then
                assert.are.equal(before, listed(), "a watch dropped, then " .. tostring(ok and text or err) .. " at stop " .. n)
            end
            before = listed()
        end, 20000)
        assert.are.equal("no watches", listed())
    end)

    it(":load of a save loads whole or not at all", function()
        local s, env = session()
        local w = env.world
        for i = 1, 20 do w:spawn{Position = {x = i}} end
        local name = os.tmpname()
        w:save(name)
        local feed, hash, count = s.feed, w.hash, w.count
        local h0, c0, status, text
        H.every_stop(function()
            h0, c0 = hash(w), count(w)
            status, text = feed(s, ":load " .. name)
        end, function(n, ok, err)
            local loaded = count(w) ~= c0
            if not ok or status ~= "ok" then
                assert.is_false(loaded, "loaded, then reported " .. tostring(ok and text or err) .. " at stop " .. n)
                assert.are.equal(h0, hash(w))
            else
                assert.are.equal(c0 + 20, count(w))
                assert.are.equal("loaded 20 entities from " .. name, text)
            end
        end, 20000)
        os.remove(name)
    end)
end)

describe("session:open_world", function()
    local function bare_session(env)
        return kiln.session(setmetatable(env, {__index = _G}))
    end

    it("keeps a `world` global", function()
        local w = kiln.world()
        w:spawn()
        local env = {world = w}
        assert.are.equal("world: the global `world` (1 entities)", bare_session(env):open_world(kiln.world()))
        assert.are.equal(w, env.world)
    end)

    it("takes the world a script returned", function()
        local w = kiln.world()
        local env = {}
        assert.are.equal("world: the one the script returned (0 entities)", bare_session(env):open_world(w))
        assert.are.equal(w, env.world)
    end)

    it("takes the one global that holds a world", function()
        local w = kiln.world()
        w:spawn()
        w:spawn()
        local env = {level = w, other = 5}
        assert.are.equal("world: the global `level` (2 entities)", bare_session(env):open_world())
        assert.are.equal(w, env.world)
    end)

    it("makes a fresh world and names the candidates when several globals hold worlds", function()
        local env = {b = kiln.world(), a = kiln.world()}
        local text = bare_session(env):open_world()
        assert.are.equal("world: a new, empty one (`a`, `b` hold worlds: set `world` to the one you want)", text)
        assert.are_not.equal(env.a, env.world)
        assert.are_not.equal(env.b, env.world)
        assert.are.equal(0, env.world:count())
    end)

    it("skips closed worlds and says when `world` is not a world", function()
        local closed = kiln.world()
        closed:close()
        local env = {old = closed}
        assert.are.equal("world: a new, empty one", bare_session(env):open_world(closed))
        env = {world = 42}
        assert.are.equal("world: the global `world` holds a number, not an open kiln.World: " ..
                         ":step, :run, :systems and :stats need one", bare_session(env):open_world())
        assert.are.equal(42, env.world)
    end)
end)

describe("completion", function()
    local s
    before_each(function()
        s = session()
        s.env.world:component("Heat", "float t;")
    end)

    it("offers component names for the keys of spawn{...}", function()
        assert.are.same({"Health", "Heat"}, s:complete("world:spawn{He"))
        assert.are.same({"Health", "Heat"}, s:complete("e = world:spawn({Position = {x = 1}, He"))
        assert.are.same({"Health", "Heat"}, s:complete("cmd:spawn{ He"))
    end)

    it("offers field names inside a component's value", function()
        assert.are.same({"x"}, s:complete("world:spawn{Position = {x"))
        assert.are.same({"y"}, s:complete("world:spawn{Position = {x = 1, y"))
        assert.are.same({"hp"}, s:complete("world:set(e, 'Health', {h"))
        assert.are.same({"max"}, s:complete("world:add(e, \"Health\", {hp = 1, m"))
    end)

    it("offers globals where a value goes, and nothing inside a comment", function()
        local got = s:complete("world:spawn{Position = {x = wor")
        assert.truthy(#got > 0 and got[1] == "world", table.concat(got, " "))
        assert.are.same({}, s:complete("x = 1 -- world:spawn{He"))
    end)

    it("still offers component names inside strings and methods after a colon", function()
        assert.are.same({"Health", "Heat"}, s:complete("world:get(e, 'He"))
        assert.are.same({"world:spawn"}, s:complete("world:spaw"))
    end)

    it("walks a bounded part of a big table and offers at most 200 names, in order", function()
        local big = {}
        for i = 1, 200000 do big[string.format("k%06d", i)] = i end
        s.env.big = big
        -- every key walked, every match sorted and offered: 4 million instructions before
        local spent, got = H.instructions(function() return s:complete("big.k") end)
        assert.is_true(spent < 1000000, spent)
        assert.are.equal(200, #got)
        for i = 2, #got do assert.is_true(got[i - 1] < got[i] and got[i]:find("^big%.k%d+$") ~= nil, got[i]) end
        if H.luajit then return end -- (LuaJIT's pairs calls no __pairs)
        local visited = 0
        s.env.wide = setmetatable({}, {__pairs = function()
            return function()
                if visited == 2000000 then return nil end
                visited = visited + 1
                return "k" .. visited, true
            end
        end})
        assert.are.equal(200, #s:complete("wide.k"))
        assert.is_true(visited <= 10000, visited)
    end)

    it("costs about what a short line costs on a 1 MiB line", function()
        -- the end of the line was matched from every byte of it and the line read a byte at
        -- a time in Lua: 16,000 bytes took 4 s, a 1 MiB line ran for more than 10 minutes.
        -- The hook stops a completion past the bound (old: past it in the byte loop).
        local long = string.rep("b", 1048576)
        local function within(fn)
            local count = 0
            if H.luajit then jit.off() end -- compiled code calls no hooks
            debug.sethook(function()
                count = count + 1
                if count == 301 then error("more than 30,000 instructions", 0) end
            end, "", 100)
            local ok, a, b = pcall(fn)
            debug.sethook()
            if H.luajit then jit.on() end
            assert(ok, a)
            return a, b
        end
        assert.are.same({}, within(function() return s:complete(long) end))
        assert.are.same({"world:spawn"}, within(function() return s:complete(long .. " = world:spaw") end))
        assert.are.same({}, within(function() return s:complete("world:" .. long) end))
        assert.are.same({"Health", "Heat"}, within(function() return s:complete(long .. " = world:spawn{He") end))
        assert.are.same({"x"}, within(function() return s:complete("world:spawn{Position = {" .. long .. ", x") end))
        assert.are.same({}, within(function() return s:complete(string.rep("(", 1048576) .. "world:spaw") end))
        -- and through the console's command, whose line had its spaces trimmed from every byte
        assert.are.same({"ok", "world:spawn"},
                        {within(function() return s:command(":complete " .. long .. string.rep(" ", 1048576) .. "world:spaw   ") end)})
        assert.are.same({"ok", "world:spawn"}, {within(function() return s:command(":complete world:spaw   ") end)})
    end)

    it("answers no names for a value whose __pairs or __index raises, and keeps the statement", function()
        -- completion raised, and a console or the kiln command dropped the statement being typed
        s.env.a = setmetatable({}, {__pairs = function() error("pairs!") end})
        s.env.b = setmetatable({}, {__index = function() error("index!") end})
        assert.are.equal("more", s:feed("for i = 1, 2 do"))
        assert.are.same({"ok", ""}, {s:feed(":complete a.")})
        assert.are.same({"ok", ""}, {s:feed(":complete b.x.")})
        assert.are.same({}, s:complete("a.k"))
        assert.are.same({"ok", "1\n2"}, {s:feed("print(i) end")})
    end)
end)

describe("a session stopped part way through", function()
    -- Ctrl-C in the kiln command raises once at the next instruction, wherever it lands; a
    -- spent budget raises at every one from there on: either way the print the statement ran
    -- with is the session's capture, and the environment's own comes back
    local function captured(sweep)
        local s, env = session()
        local own = function() end
        env.print = own
        local feed = s.feed
        sweep(function() feed(s, "print(1)") end, function(n)
            assert.are.equal(own, rawget(env, "print"), "print left captured after a stop at instruction " .. n)
        end, 5000)
        assert.are.same({"ok", "1"}, {s:feed("print(1)")})
    end
    it("once (Ctrl-C) leaves the environment's print in place", function() captured(H.every_raise) end)
    it("for good (a spent budget) leaves the environment's print in place", function() captured(H.every_stop) end)
end)

describe("a session's answer_bytes", function()
    it("keeps the answer's first bytes and counts the rest", function()
        local s = session{answer_bytes = 10}
        assert.are.same({"ok", "abc\tdefgh"}, {s:feed("print('abc', 'defgh')")})
        assert.are.same({"ok", "abcdef\nghi\n... (2 bytes not shown)"}, {s:feed("print('abcdef') print('ghijk')")})
        assert.are.same({"ok", "abc\tdefghi\n... (3 bytes not shown)"}, {s:feed("print('abc', 'defghijkl')")})
        assert.are.same({"ok", "0123456789\n... (2 bytes not shown)"}, {s:feed("print('0123456789') print('x')")})
        -- values and an error's traceback past the cut are counted as well
        assert.are.same({"ok", "yyyyyyyyyy\n... (16 bytes not shown)"}, {s:feed("print(('y'):rep(20)) return 12345")})
        local status, text = s:feed("print(('y'):rep(20)) error('boom')")
        assert.are.equal("error", status)
        assert.truthy(text:match("^yyyyyyyyyy\n%.%.%. %(%d+ bytes not shown%)$"), text)
    end)

    it("counts the bytes not shown when the statement's values cannot be shown either", function()
        -- kiln.pretty (reading v.name) and tostring both raise for this value: the answer is
        -- then made in C (session.c unshown_text)
        local s = session{answer_bytes = 10}
        local shy = "setmetatable({}, {__index = function() error('boom', 0) end, " ..
                    "__tostring = function() error('boom', 0) end})"
        assert.are.same({"ok", "yyyyyyyyyy\n... (10 bytes not shown)\n(the statement ran; its values were not shown: boom)"},
                        {s:feed("print(('y'):rep(20)) return " .. shy)})
        assert.are.same({"ok", "abc\n(the statement ran; its values were not shown: boom)"},
                        {s:feed("print('abc') return " .. shy)})
    end)

    it("cuts the text an unlimited session answers, at every limit", function()
        local code = "print('ab', 1, 'c') print('') print('defg', 'h') return 'ij', 42"
        local _, full = session():feed(code)
        assert.are.equal("ab\t1\tc\n\ndefg\th\n\"ij\"\n42", full)
        for limit = 1, #full + 1 do
            local want = full
            if #full > limit then want = full:sub(1, limit) .. "\n... (" .. (#full - limit) .. " bytes not shown)" end
            assert.are.same({"ok", want}, {session{answer_bytes = limit}:feed(code)}, "limit " .. limit)
        end
    end)

    it("must be an integer >= 1", function()
        for _, v in ipairs{0, -1, 1.5, "10", true} do
            local err = message(kiln.session, {}, {answer_bytes = v})
            assert.truthy(err:find("bad argument #2 to 'kiln.session' (answer_bytes: an integer >= 1 expected, got ",
                                   1, true), err)
        end
    end)
end)

describe("the session functions", function()
    it("raise argument errors that name the function", function()
        local s = session()
        local cases = {
            {"bad argument #1 to 'kiln.session' (table expected, got number)", kiln.session, 5},
            {"bad argument #2 to 'kiln.session' (table expected, got string)", kiln.session, {}, "remote"},
            {"bad argument #2 to 'kiln.session' (unknown key 'remtoe' (expected remote, dt, answer_bytes))",
             kiln.session, {}, {remtoe = true}},
            {"bad argument #2 to 'kiln.session' (unknown key [1] (expected remote, dt, answer_bytes))",
             kiln.session, {}, {true}},
            {"bad argument #2 to 'kiln.session' (unknown table key (expected remote, dt, answer_bytes))",
             kiln.session, {}, {[{}] = true}},
            {"bad argument #2 to 'kiln.session' (dt: a finite number >= 0 expected, got string)",
             kiln.session, {}, {dt = "fast"}},
            {"bad argument #1 to 'session:feed' (string expected, got nil)", s.feed, s},
            {"bad argument #1 to 'session:complete' (string expected, got number)", s.complete, s, 3},
            {"bad argument #1 to 'session:command' (string expected, got table)", s.command, s, {}},
            {"bad argument #1 to 'session:step' (frame count (integer >= 1) expected, got 0)", s.step, s, 0},
            {"bad argument #1 to 'session:call' (function expected, got string)", s.call, s, "print(1)"},
            {"calling 'session:feed' on bad self (kiln.Session expected, got string)", s.feed, "1 + 1"},
            {"calling 'session:open_world' on bad self (kiln.Session expected, got nil)", s.open_world},
        }
        for _, c in ipairs(cases) do
            assert.are.equal(c[1], message(c[2], table.unpack(c, 3, 5)))
        end
    end)

    it("point at the caller's line", function()
        local s = session()
        local ok, err = pcall(function()
            local r = s:feed(nil)
            return r
        end)
        assert.is_false(ok)
        assert.truthy(err:find("^[^:]*repl_spec%.lua:%d+: bad argument #1 to 'session:feed'"), err)
    end)
end)
