-- mods_redteam_spec.lua: attacks found by a red-team pass over the mod sandbox, each a mod
-- that broke the host before its fix. Every folder made is removed at the end.
local kiln = require "kiln"
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

-- spinner(name, call): a mod's system name spinning over a costly call, counting its turns,
-- and a system after it printing the count and the global last. A loop over C work is counted
-- in turns, not timed: work the budget does not charge ran a thousand instructions' worth of
-- turns (100) between two reads of the clock; charged, the run ends in a few. (The frame's
-- clock would refuse the count: hosts give frame_milliseconds = -1.)
local TURNS = [[
turns = 0
world:system{name = %q, run = function() while true do turns = turns + 1; %s end end}
world:system{name = %q, after = {%q}, run = function() print(turns, last) end}]]
local MAX_TURNS = 50
local function spinner(name, call) return TURNS:format(name, call, name .. "_count", name) end

-- The turns mod name's spinner made in its last run are at most max.
local function turns_within(mods, name, max)
    local log = mods:log(name)
    local turns = tonumber(log[#log]:match("^%d+"))
    assert.is_true(turns ~= nil and turns <= max, name .. " made " .. tostring(turns) .. " turns")
end

describe("a red-team mod", function()
    after_each(M.cleanup)

    it("printing a long value and then another leaves the host's memory whole", function()
        -- print's buffer moved onto the stack at the long value; a string pushed above it was
        -- then taken for its slot and the buffer freed under it (a use after free)
        local dir = M.folder()
        local lines = {}
        local _, mods = M.host{log = function(_, line) lines[#lines + 1] = line end}
        M.write(dir, "printer.lua", [[
            print(true, string.rep("y", 1200))
            print(string.rep("x", 2000), 1, string.rep("z", 5000), "end")
        ]])
        assert(mods:load(dir .. "/printer.lua"))
        -- the host's log gets each line cut at 236 bytes and "..."
        assert.are.equal("true\t" .. string.rep("y", 231) .. "...", lines[1])
        assert.are.equal(string.rep("x", 236) .. "...", lines[2])
    end)

    it("cannot make the host hold copies of one string it holds once", function()
        -- a table of 100 references to one 1 MiB string was copied into the host as 100 MiB
        -- (a million references to a 40 MiB one: terabytes), in C, past every budget
        local dir = M.folder()
        local got
        local _, mods = M.host{memory = 16777216, allow = {sink = function(t)
            got = 0
            for _, s in ipairs(t) do got = got + #s end
        end}}
        M.write(dir, "amplifier.lua", [[
            local s = string.rep("x", 1048576)
            local t = {}
            for i = 1, 100 do t[i] = s end
            print(pcall(sink, t))
        ]])
        assert(mods:load(dir .. "/amplifier.lua"))
        assert.is_nil(got)
        assert.matches("^false\tthe host: an argument holds more than 16777216 bytes of strings",
                       mods:log("amplifier")[1])
    end)

    it("cannot take or remove another mod's system by a name it once used and let go", function()
        -- the manager remembered every name a mod added, and took a system of that name for
        -- the mod's own though the mod had removed it and another mod added it since: the
        -- squatter's reload removed the victim's system (its unload too), or replaced it
        local dir = M.folder()
        local w, mods = M.host()
        M.write(dir, "squatter.lua", [[
            world:system{name = "setup", run = function()
                if not done then
                    done = true
                    world:system{name = "victim_sys", run = function() end}
                    world:remove_system("victim_sys")
                end
            end}
        ]])
        M.write(dir, "victim.lua", 'world:system{name = "victim_sys", run = function() print("ran") end}')
        assert(mods:load(dir .. "/squatter.lua"))
        M.frames(w, 1)
        assert(mods:load(dir .. "/victim.lua"))
        assert(mods:reload("squatter"))
        assert.are.same({"host_tick", "setup", "victim_sys"}, M.system_names(w))
        assert.are.same({"setup"}, M.info(mods, "squatter").systems)
        M.write(dir, "squatter.lua", 'world:system{name = "victim_sys", run = function() print("mine") end}')
        local ok, err = mods:reload("squatter")
        assert.is_nil(ok)
        assert.matches("(of mod 'victim')", err, 1, true)
        assert(mods:unload("squatter"))
        assert.are.same({"host_tick", "victim_sys"}, M.system_names(w))
        M.frames(w, 1)
        assert.are.same({"ran"}, mods:log("victim"))
    end)

    it("cannot run far past its time limit on calls that read a long string without allocating", function()
        -- the wall clock is read every 1000 instructions: a loop over utf8.len of 8 MB (14 ms a
        -- call), string.unpack of a long format, a long string's arithmetic or load of a long
        -- comment took seconds a run with a limit of 50 ms, and 256 such systems would hold a
        -- frame for minutes
        local dir = M.folder()
        local w, mods = M.host{instructions = 5e6, frame_instructions = 1e12, milliseconds = 50,
                               frame_milliseconds = -1}
        local loops = {
            number = 'local s = string.rep("1", 8e6); local f = tonumber',
            load = 'local s = "--" .. string.rep("x", 8e6); local f = load', -- a comment: parsed, not kept
            reader = 'local s = "--" .. string.rep("x", 8e6); local f = function(t) return load(function() return t end) end',
        }
        if utf8 then loops.len = 'local s = string.rep("a", 8e6); local f = utf8.len' end
        if string.unpack then
            loops.unpack = 'local s = "i1" .. string.rep("x", 2e6); local f = function(t) _, last = pcall(string.unpack, t, "") end'
        end
        if not jit then -- LuaJIT reads a string as a number in its VM, no metamethod to charge
            loops.arith = 'local s = string.rep("1", 8e6); local f = function(t) return t + 0 end'
        end
        local count = 0
        for name, setup in pairs(loops) do
            count = count + 1
            assert(mods:load(M.write(dir, name .. ".lua", setup .. "\n" .. spinner(name, "f(s)"))))
        end
        local ok, failures = w:progress(1 / 60)
        assert.is_false(ok)
        assert.are.equal(count, #failures)
        for name in pairs(loops) do
            if name == "unpack" then -- (its pcall catches the budget's refusal: many cheap turns)
                assert.matches("string.unpack could take %S+ steps, past what is left", mods:log(name)[1])
            else
                turns_within(mods, name, MAX_TURNS)
            end
        end
    end)

    it("cannot stop its budget's hook by spending the budget inside a reader given to load", function()
        -- LuaJIT left its hook marked active when a hook's error was caught by lua_load: no
        -- hook ran again in the mod's state, so the loop after the load ran to its end (or
        -- for good: the budget could not stop it, nor the time limit)
        local dir = M.folder()
        local w, mods = M.host{instructions = 1e6, milliseconds = -1}
        assert(mods:load(M.write(dir, "deafener.lua", [[
            world:system{name = "deafen", run = function()
                local f, err = load(function() while true do end end)
                local n = 0 -- (no call of the host's here: a charge would raise on its own)
                while n < 3e7 do n = n + 1 end
                error("escaped") -- (error is the interpreter's own, uncharged)
            end}
        ]])))
        local ok, failures = w:progress(1 / 60)
        assert.is_false(ok)
        assert.are.equal(1, #failures)
        assert.matches("system 'deafen' ran past its budget", failures[1].message, 1, true)
        assert.are.same({}, mods:log("deafener"))
        -- the hook is armed again for the next frame, and stops the same system again
        ok, failures = w:progress(1 / 60)
        assert.is_false(ok)
        assert.are.equal(1, #failures)
        assert.are.same({}, mods:log("deafener"))
    end)

    it("cannot stop its budget's hook by spending the budget inside any callback of a C function", function()
        -- each system spends its budget inside a function that a C function calls, which may
        -- catch the error; then runs a loop that calls nothing of the host's (no charge can
        -- raise there) and fails with its own error only if the hook stopped counting
        local dir = M.folder()
        local w, mods = M.host{instructions = 1e6, milliseconds = -1}
        local spots = {
            reader = "load(spin)",
            gsub = 'pcall(string.gsub, "abc", ".", spin)',
            sort = "pcall(table.sort, {3, 2, 1}, function() spin() end)",
            tostring = "pcall(tostring, setmetatable({}, {__tostring = spin}))",
            index = "pcall(function() return setmetatable({}, {__index = spin}).x end)",
            handler = 'xpcall(error, spin, "x")',
            wrap = "pcall(coroutine.wrap(spin))",
            resume = "coroutine.resume(coroutine.create(spin))",
            required = 'pcall(require, "spinner")',
        }
        local names = {}
        for name, call in pairs(spots) do
            names[#names + 1] = name
            M.folder_mod(dir, name, {name = name}, {
                ["init.lua"] = string.format([[
                    local function spin() while true do end end
                    world:system{name = %q, run = function()
                        %s
                        local n = 0
                        while n < 3e7 do n = n + 1 end
                        error("escaped", 0)
                    end}
                ]], name, call),
                ["spinner.lua"] = "while true do end",
            })
        end
        table.sort(names)
        for _, name in ipairs(names) do assert(mods:load(dir .. "/" .. name), name) end
        for _ = 1, 2 do
            local ok, failures = w:progress(1 / 60)
            assert.is_false(ok)
            assert.are.equal(#names, #failures)
            for _, f in ipairs(failures) do
                assert.matches("ran past its budget", f.message, 1, true)
            end
        end
    end)

    it("gets an error, not the host's memory, for a reader whose pieces outgrow its memory limit", function()
        local dir = M.folder()
        local _, mods = M.host{memory = 4 * 1024 * 1024}
        assert(mods:load(M.write(dir, "hoarder.lua", [[
            local piece, n = string.rep("-", 512 * 1024), 0
            print(pcall(load, function() n = n + 1; if n <= 20 then return piece end end))
            piece = nil
            collectgarbage()
            print("alive", n < 20)
        ]])))
        local log = mods:log("hoarder")
        assert.matches("^false\t.*not enough memory", log[1])
        assert.are.equal("alive\ttrue", log[2]) -- refused before the reader was done
    end)

    it("cannot run a dead coroutine's __close unhooked by closing it after its budget ran out", function()
        -- Lua 5.4 leaves hooks off in a coroutine a hook's error killed, and coroutine.close
        -- then runs its pending __close there: in a plain Lua state with a hook like the
        -- budget's, such a __close ran 3e7 iterations uncounted
        local dir = M.folder()
        local w, mods = M.host{instructions = 1e5, milliseconds = -1}
        assert(mods:load(M.write(dir, "closer.lua", [[
            world:system{name = "closer", run = function()
                local co = coroutine.create(function()
                    local guard <close> = setmetatable({}, {__close = function()
                        local i = 0
                        while i < 3e7 do i = i + 1 end
                        error("escaped in __close", 0)
                    end})
                    while true do end
                end)
                pcall(coroutine.resume, co)
                pcall(coroutine.close, co)
                error("escaped", 0)
            end}
        ]])))
        for _ = 1, 2 do
            local ok, failures = w:progress(1 / 60)
            assert.is_false(ok)
            assert.are.equal("mod 'closer': system 'closer' ran past its budget of 100000 instructions",
                             failures[1].message)
        end
    end)

    it("cannot run the __close of a coroutine its budget stopped unhooked, through wrap or a later close", function()
        -- the coroutine died with hooks off (Lua 5.4 turns them back on only where the hook's
        -- error is caught in that thread): coroutine.wrap's function closed it at once, and
        -- coroutine.close in the next frame, with a fresh budget, closed it later, each running
        -- the handler's loop unhooked (with no loop bound, the host hung for good)
        local dir = M.folder()
        local w, mods = M.host{instructions = 1e5, milliseconds = -1}
        assert(mods:load(M.write(dir, "closer.lua", [[
            local frame, co = 0
            local function body()
                local guard <close> = setmetatable({}, {__close = function()
                    local i = 0
                    while i < 3e7 do i = i + 1 end
                    print("escaped in __close")
                end})
                while true do end
            end
            world:system{name = "closer", run = function()
                frame = frame + 1
                if frame == 1 then
                    pcall(coroutine.wrap(body))
                elseif frame == 2 then
                    co = coroutine.create(body)
                    coroutine.resume(co)
                else
                    print(coroutine.status(co), coroutine.close(co))
                end
            end}
        ]])))
        for frame = 1, 3 do
            local ok, failures = w:progress(1 / 60)
            if frame < 3 then
                assert.is_false(ok)
                assert.are.equal("mod 'closer': system 'closer' ran past its budget of 100000 instructions",
                                 failures[1].message)
            else
                assert.is_true(ok)
            end
        end
        -- the handlers stopped at their first instruction, under the budget spent then
        assert.are.same({"dead\tfalse\tsystem 'closer' ran past its budget of 100000 instructions"},
                        mods:log("closer"))
    end)

    it("pays for its calls into another mod from its own frame budget, not the callee's", function()
        -- a call ran with the callee's view set to the calling system, so the callee's frame
        -- budget was charged: a dependent calling a looping export twice a frame made its
        -- library's own system fail every frame
        local w, mods = M.host_with_folder_mods({
            {"lib", init = [[
                mod.exports.work = function() while true do end end
                world:system{name = "lib_tick", run = function() local s = 0 for i = 1, 1000 do s = s + i end end}
            ]]},
            {"caller", depends = {"lib"}, init = [[
                local lib = mod.import("lib")
                world:system{name = "caller_a", before = {"lib_tick"}, run = function() pcall(lib.work) end}
                world:system{name = "caller_b", before = {"lib_tick"}, run = function() pcall(lib.work) end}
            ]]},
        }, {instructions = 1e6, frame_instructions = 2e6})
        local failures = M.frames(w, 3)
        assert.are.equal(0, #M.failures_of(failures, "lib"))
        assert.are.equal(6, #M.failures_of(failures, "caller"))
        assert.are.equal("running", M.info(mods, "lib").state)
    end)

    it("leaves a called state's stack as it was when the results cannot be copied back", function()
        -- a copy of the results that failed (the caller's memory full) raised in the caller
        -- and left the results on the callee's stack: the host's world:progress returned them
        -- after its own, and a library mod called so filled its memory for good
        local granted = function() return {1, 2, 3} end
        local w, mods = M.host_with_folder_mods({
            {"lib", init = "mod.exports.get = function() return {hp = 1} end"},
            {"filler", depends = {"lib"}, init = [[
                local lib = mod.import("lib")
                world:system{name = "filler", run = function()
                    local hog
                    local function big() hog = {hog, string.rep("x", 3000)} end
                    local function small() hog = {hog} end
                    while pcall(big) do end
                    while pcall(small) do end
                    local failed = 0
                    for _ = 1, 2000 do
                        if not pcall(granted) then failed = failed + 1 end
                        if not pcall(lib.get) then failed = failed + 1 end
                    end
                    hog = nil
                    collectgarbage() -- (LuaJIT does not collect when an allocation is refused)
                    print(failed > 0)
                end}
            ]]},
        }, {memory = 4194304, instructions = 1e8, milliseconds = 60000, allow = {granted = granted}})
        -- (the most its load took: LuaJIT collects only once the heap has doubled from the
        -- live size a mod now starts at, so what lib holds after is compared with that)
        local lib_before = M.info(mods, "lib").memory_peak
        for _ = 1, 3 do
            -- at its limit the filler may itself fail for memory anywhere (a call's frame is an allocation
            -- too; its long clock: a run passed 1000 ms under ASan, loaded); no results may be left behind
            local results = table.pack(w:progress(1 / 60))
            assert.is_true(results.n <= 2, tostring(results.n))
            for _, f in ipairs(results[2] or {}) do -- (the third in a row disables it)
                assert.matches("^mod 'filler': .*memory", f.message)
            end
        end
        for _, line in ipairs(mods:log("filler")) do assert.are.equal("true", line) end
        assert.is_true(M.info(mods, "lib").memory < lib_before + 65536)
        assert.are.equal("running", M.info(mods, "lib").state)
    end)

    it("whose top level fails leaves the host's entities and events as they were", function()
        -- a failed top level took back only its spawns and registrations: the host's entities
        -- it despawned stayed gone, components it added to them or removed from them stayed
        -- so, and the events it emitted reached the host's systems
        local dir = M.folder()
        local w, mods = M.host()
        w:component("Health", "int32_t hp;")
        w:event("Hit", "int32_t n;")
        local a = w:spawn{Position = {x = 1, y = 1}, Health = {hp = 100}}
        local b = w:spawn{Position = {x = 5, y = 5}}
        local function mod_text(tail)
            return string.format([[
                local a, b = %d, %d
                world:set(a, "Health", {hp = 50})        -- in place: stays, as a failing system's
                world:add(b, "Health", {hp = 3})         -- taken back
                world:name(b, "renamed")                 -- taken back
                world:emit("Hit", {n = 666})             -- lands only when the top level succeeds
                print(pcall(world.despawn, world, a))
                print(pcall(world.remove, world, a, "Health"))
                local mine = world:spawn{Position = {x = 0, y = 0}}
                world:add(mine, "Health", {hp = 1})      -- its own: free to change
                world:remove(mine, "Health")
            ]], a, b) .. tail
        end
        M.write(dir, "failer.lua", mod_text('error("boom", 0)'))
        local count = w:count()
        local ok, err = mods:load(dir .. "/failer.lua")
        assert.is_nil(ok)
        assert.are.equal("mods:load: mod 'failer': boom", err)
        assert.are.equal(count, w:count())
        assert.is_true(w:is_alive(a))
        assert.are.equal(50, w:get(a, "Health").hp)
        assert.is_false(w:has(b, "Health"))
        assert.is_nil(w:name(b))
        local function hits()
            local n = 0
            for hit in w:events("Hit") do n = n + hit.n end
            return n
        end
        assert.are.equal(0, hits())
        -- the same top level without the error: its changes land, its emit after it
        M.write(dir, "keeper.lua", mod_text(""))
        assert(mods:load(dir .. "/keeper.lua"))
        assert.are.same({
            "false\tworld:despawn: a mod's top level may despawn only the entities spawned while it runs (entity " ..
                kiln.handle(a) .. " was there before, and a failed load of mod 'keeper' could not bring it back); " ..
                "do it from a system",
            "false\tworld:remove: a mod's top level may remove from the entities there before it ran only the " ..
                "components it registers (entity " .. kiln.handle(a) .. " is one, and a failed load of mod " ..
                "'keeper' could not put the value back); do it from a system",
        }, mods:log("keeper"))
        assert.are.equal(3, w:get(b, "Health").hp)
        assert.are.equal("renamed", w:name(b))
        assert.are.equal(666, hits())
    end)

    it("cannot despawn the host's entities at its top level under a root of its own", function()
        -- a top level's despawn_recursive asked only the root's owner: a host entity linked
        -- under the mod's root went with it, and a failed load could not bring it back
        local dir = M.folder()
        local w = kiln.world{transforms = true}
        w:component("Position", "float x, y;")
        local mods = kiln.mods(w)
        local a = w:spawn{Position = {x = 1, y = 1}}
        local b = w:spawn{}
        w:set_parent(b, a) -- a's own child goes down with it
        local function mod_text(tail)
            return string.format([[
                local root = world:spawn{}
                local mid = world:spawn{}
                world:set_parent(mid, root)
                world:set_parent(%d, mid)
                print(pcall(world.despawn_recursive, world, root))
                local other = world:spawn{}
                world:set_parent(world:spawn{}, other)
                print(pcall(world.despawn_recursive, world, other)) -- all its own
            ]], a) .. tail
        end
        M.write(dir, "tree.lua", mod_text('error("boom", 0)'))
        local count = w:count()
        local ok, err = mods:load(dir .. "/tree.lua")
        assert.is_nil(ok)
        assert.are.equal("mods:load: mod 'tree': boom", err)
        assert.are.equal(count, w:count())
        assert.is_true(w:is_alive(a) and w:is_alive(b))
        assert.is_nil(w:get(a, "Parent"))
        assert.are.same({b}, w:children(a))
        M.write(dir, "keeper.lua", mod_text(""))
        assert(mods:load(dir .. "/keeper.lua"))
        assert.are.same({
            "false\tworld:despawn_recursive: a mod's top level may despawn only the entities spawned while it " ..
                "runs (entity " .. kiln.handle(a) .. " was there before, and a failed load of mod 'keeper' could " ..
                "not bring it back); do it from a system",
            "true",
        }, mods:log("keeper"))
        assert.are.equal(count + 2, w:count()) -- root and mid stay, a under them
        assert.is_true(w:is_alive(a) and w:is_alive(b))
        assert.is_true(w:is_alive(w:get(a, "Parent").entity))
    end)

    it("pays from its own memory for the records a failed top level would take back", function()
        -- the records of a top level's adds to the host's entities were kept in the host's
        -- memory, past the mod's limit: 200k tags added held 3 MiB of them under a 2 MiB limit
        local dir = M.folder()
        local w, mods = M.host{memory = 2 * 1048576}
        w:component("Flag")
        local first, last
        for i = 1, 200000 do
            last = w:spawn{Position = {x = i, y = 0}}
            first = first or last
        end
        M.write(dir, "recorder.lua", string.format('for e = %d, %d do world:add(e, "Flag") end', first, last))
        local hash = w:hash()
        local ok, err = mods:load(dir .. "/recorder.lua")
        assert.is_nil(ok)
        assert.matches("^mods:load: mod 'recorder': .*not enough memory", err)
        assert.are.equal(hash, w:hash())
        -- a tenth of them fit, and land
        M.write(dir, "recorder.lua", string.format('for e = %d, %d do world:add(e, "Flag") end', first, first + 19999))
        assert(mods:load(dir .. "/recorder.lua"))
        local n = 0
        for _ in w:query{"Flag"}:each() do n = n + 1 end
        assert.are.equal(20000, n)
    end)

    it("cannot hold the host in a JSON save past its budget or its time limit", function()
        -- world:save in JSON built the whole world's tree in C, where no hook runs, before
        -- writing any of it: a mod saving a host world of a million entities held the host
        -- 6.8 s past a 200 ms limit, the tree in the host's memory
        local dir = M.folder()
        local w, mods = M.host{instructions = 10000000}
        for i = 1, 100000 do w:spawn{Position = {x = i, y = 0}} end
        local text = [[
            print(pcall(world.save, world, {format = "json"}))
            print(#world:save() > 1600000) -- binary: its bytes are charged as memory
        ]]
        M.write(dir, "saver.lua", text)
        assert(mods:load(dir .. "/saver.lua"))
        local log = mods:log("saver")
        assert.matches("^false\t.*world:save could take [%d.e+]+ steps, past what is left of the budget of the " ..
                       "top level of mod 'saver'", log[1])
        assert.are.equal("true", log[2])
        -- with instructions to spare, the clock stops it, and a pcall does not outlive it
        local w2, timed = M.host{instructions = 1e12, milliseconds = 20}
        for i = 1, 100000 do w2:spawn{Position = {x = i, y = 0}} end
        M.write(dir, "timed.lua", "print(pcall(world.save, world, {format = 'json'})) print('after')")
        local ok, err = timed:load(dir .. "/timed.lua")
        assert.is_nil(ok)
        assert.are.equal("mods:load: mod 'timed': the top level of mod 'timed' ran past its time limit of 20 ms", err)
    end)

    it("pays for the C work of a hash, a long array and a schema, and reads no long name through", function()
        -- each of these did C work in one call that no hook could stop, uncharged: a loop of
        -- world:hash() on a fragmented host world of a million held the host 34 times its time
        -- limit, world:set of a 1 MiB value 12 times, world:component of a padded schema 3 times
        local dir = M.folder()
        local w, mods = M.host{instructions = 3000000, milliseconds = 5000}
        for i = 1, 60000 do w:spawn{Position = {x = i, y = 0}} end
        local texts = {
            hasher = [[
                print(pcall(world.hash, world))
                world:system{name = "hasher", run = function(w) print(pcall(w.hash, w)) end}
            ]],
            setter = [[
                world:component("Big", "float a[65536];")
                local arr = {}
                for i = 1, 65536 do arr[i] = i end
                local e = world:spawn{Big = {}}
                print(pcall(function() while true do world:set(e, "Big", {a = arr}) end end))
            ]],
            declarer = [[
                local padded = "float x;" .. string.rep(" ", 1048576)
                print(pcall(function() while true do world:component("Padded", padded) end end))
            ]],
            namer = [[print(pcall(world.get, world, world:spawn{}, string.rep("n", 1048576)))]],
        }
        for name, text in pairs(texts) do assert(mods:load(M.write(dir, name .. ".lua", text))) end
        assert(w:progress(1 / 60))
        local function past(what, steps, mod)
            return "^false\t.*" .. what .. " could take " .. steps .. " steps, past what is left of the budget of " ..
                   "the top level of mod '" .. mod .. "'"
        end
        assert.matches(past("world:hash", "3.84e%+06", "hasher"), mods:log("hasher")[1])
        assert.are.equal("false\tworld:hash: system 'hasher' is not exclusive: the hash reads every component",
                         mods:log("hasher")[2])
        assert.matches(past("world:set", "1.05e%+06", "setter"), mods:log("setter")[1])
        assert.matches(past("world:component", "1.31e%+05", "declarer"), mods:log("declarer")[1])
        assert.are.equal("false\tbad argument #2 to 'world:get' (unknown component '" .. string.rep("n", 64) .. "...')",
                         mods:log("namer")[1])
    end)

    it("pays for the free list a hash walks, not only the live entities", function()
        -- the hash walks the free list: 8 ms a call over a million freed slots, and a world of
        -- few live entities charged almost nothing for it
        local dir = M.folder()
        local w, mods = M.host{instructions = 3000000, milliseconds = 5000}
        local es = {}
        for i = 1, 301000 do es[i] = w:spawn{} end
        for i = 1001, 301000 do w:despawn(es[i]) end
        assert(mods:load(M.write(dir, "hasher.lua", "print(pcall(world.hash, world))")))
        assert.matches("^false\t.*world:hash could take 4%.86e%+06 steps, past what is left of the budget of " ..
                       "the top level of mod 'hasher'", mods:log("hasher")[1])
        -- the content hash walks no free list, but may sweep every slot: charged the same
        assert(mods:load(M.write(dir, "content.lua", "print(pcall(world.content_hash, world))")))
        assert.matches("^false\t.*world:content_hash could take 4%.86e%+06 steps, past what is left of the " ..
                       "budget of the top level of mod 'content'", mods:log("content")[1])
        assert.are.equal(1001, w:count())
    end)

    it("cannot have the host run a frame inside its top level or its systems", function()
        -- a granted function calling w:progress ran other mods' systems inside a loading top
        -- level, whose failure then took their changes back and refused their despawns
        local dir = M.folder()
        local w, mods
        w, mods = M.host{allow = {frame = function() w:progress(0) end}}
        M.write(dir, "framer.lua", [[
            print(pcall(frame))
            world:system{name = "framing", run = function() print(pcall(frame)) end}
        ]])
        assert(mods:load(dir .. "/framer.lua"))
        assert(w:progress(1 / 60))
        assert.are.same({
            "false\tthe host: world:progress: cannot run the schedule while a mod's code or a mods call runs",
            "false\tthe host: world:progress: cannot run the schedule from inside a system, a query loop or a " ..
                "deferred section",
        }, mods:log("framer"))
    end)

    it("runs a frame again after a host's restore with a fresh budget and the same random numbers", function()
        -- the per-frame books were kept by the tick, which a restore takes back: the frame run
        -- again inherited the instructions spent the first time and failed, and a system's
        -- random stream went on instead of starting again
        local dir = M.folder()
        local w, mods = M.host{instructions = 200000, frame_instructions = 300000}
        M.write(dir, "worker.lua", [[
            for _, name in ipairs{"work1", "work2"} do
                world:system{name = name, run = function() local x = 0 for i = 1, 60000 do x = x + i end end}
            end
        ]])
        assert(mods:load(dir .. "/worker.lua"))
        local drawn = {}
        w:system{name = "roller", run = function(ww) drawn[#drawn + 1] = ww:random(1000000) end}
        assert(w:progress(1 / 60))
        local snap = w:snapshot()
        assert(w:progress(1 / 60))
        w:restore(snap)
        local ok, failures = w:progress(1 / 60)
        assert.is_true(ok, failures and failures[1] and failures[1].message)
        assert.are.equal(drawn[2], drawn[3])
    end)

    it("takes back only its own spawns when host code it called gave one's handle to the host", function()
        -- a failed top level despawned every handle it had spawned: a granted function that
        -- restored a snapshot and spawned gave the host an entity with one of those handles
        local dir = M.folder()
        local w, mods, snap, hosts
        w, mods = M.host{allow = {rollback = function()
            w:restore(snap)
            hosts = w:spawn{Position = {x = 9, y = 9}}
        end}}
        snap = w:snapshot()
        M.write(dir, "undoer.lua", 'local mine = world:spawn{} rollback() error("boom", 0)')
        local ok, err = mods:load(dir .. "/undoer.lua")
        assert.is_nil(ok)
        assert.are.equal("mods:load: mod 'undoer': boom", err)
        assert.is_true(w:is_alive(hosts))
    end)

    it("counts what it holds from before against a reload's top level", function()
        -- a reload's top level counted only its own spawns: each reload, or poll of an edited
        -- file, added a whole entities and world_memory limit (100 entities under 10)
        local dir = M.folder()
        local w, mods = M.host{entities = 10}
        assert(mods:load(M.write(dir, "greedy.lua", [[
            local n = 0
            while pcall(world.spawn, world, {}) do n = n + 1 end
            print(n)
        ]])))
        for _ = 1, 3 do assert(mods:reload("greedy")) end
        assert.are.same({"10", "0", "0", "0"}, mods:log("greedy"))
        assert.are.equal(10, M.info(mods, "greedy").entities)
        -- nor may the host name a component after a mod's tag (the mod's unload took the
        -- host's entities that carried it)
        local ok, err = pcall(w.component, w, "kiln.mod.greedy")
        assert.is_false(ok)
        assert.matches("names starting 'kiln.mod.' tag the entities of mods", err)
    end)

    it("cannot make the table library loop to what a __len metamethod answers", function()
        -- table.insert, remove, sort and concat were charged by the raw length and ran to #t:
        -- a __len answering 2^26 over C metamethods ran 14 s in C, past every hook
        local dir = M.folder()
        local _, mods = M.host{milliseconds = -1}
        assert(mods:load(M.write(dir, "lengthy.lua", [[
            local t = setmetatable({}, {__len = function() return 2^40 end, __index = rawlen, __newindex = rawequal})
            for _, f in ipairs{table.insert, table.remove, table.sort, table.concat} do
                print(select(2, pcall(f, t, 1, 0)))
            end
        ]])))
        local log = mods:log("lengthy")
        assert.are.equal(4, #log)
        for i, name in ipairs{"insert", "remove", "sort", "concat"} do
            assert.truthy(log[i]:find("table." .. name .. ": a table whose length comes from a __len metamethod is refused",
                                      1, true), log[i])
        end
    end)

    it("cannot hold the host in the parser: an entry file, a required file and load stop at the time limit", function()
        -- the parser runs no hook, and an and-chain makes it quadratic: 60k took 5 s, 100k
        -- 18 s, and a 16 MiB file hours; the entry file was even parsed before its budget
        -- was armed. The text now goes to the parser in pieces, the clock read between them.
        local chain = "return " .. string.rep("a and ", 60000) .. "a"
        local dir = M.folder()
        local _, mods = M.host{milliseconds = 300}
        local ok, err = mods:load(M.write(dir, "entry.lua", chain))
        assert.is_nil(ok)
        assert.are.equal("mods:load: mod 'entry': the top level of mod 'entry' ran past its time limit of 300 ms", err)
        ok, err = mods:load(M.folder_mod(dir, "requirer", {name = "requirer", version = "1"},
                                         {["init.lua"] = 'require("chain")', ["chain.lua"] = chain}))
        assert.is_nil(ok)
        assert.truthy(err:find("the top level of mod 'requirer' ran past its time limit of 300 ms", 1, true), err)
        ok, err = mods:load(M.write(dir, "loader.lua", [[
            print(load("return " .. string.rep("a and ", 60000) .. "a"))
            print("still running")
        ]]))
        assert.is_nil(ok)
        assert.are.equal("mods:load: mod 'loader': the top level of mod 'loader' ran past its time limit of 300 ms", err)
        -- plain text still loads as load would, with its name and environment
        assert(mods:load(M.write(dir, "plain.lua", [[
            local f = load("return x", "=named", "t", {x = 7})
            print(f(), select(2, load("x x")), select(2, load("y y", "=given")))
        ]])))
        assert.matches('^7\t%[string "x x"%]:1: [^\t]+\tgiven:1: ', mods:log("plain")[1])
    end)

    it("loads from a reader function as the interpreter does, now that it reads the pieces first", function()
        local dir = M.folder()
        local _, mods = M.host()
        assert(mods:load(M.write(dir, "pieces.lua", [[
            local parts = {"return ", "1 +", " 41", "", "never read"}
            local f = assert(load(function() return table.remove(parts, 1) end))
            print(f(), #parts)
            parts = {"return x", nil}
            print(load(function() return table.remove(parts, 1) end, "=named", "t", {x = 7})())
            print(load(function() error("no more", 0) end))
            local function once(v) local done; return function() if not done then done = true; return v end end end
            print(load(once({})))
            print(load(once(12)))
            print(load(once("syntax error here")))
            print(pcall(load, once("return 1"), "x", "b"))
            local calls = 0
            print(load(function() calls = calls + 1 end), calls)
        ]])))
        local log = mods:log("pieces")
        assert.are.equal("42\t1", log[1]) -- the empty piece ends the text
        assert.are.equal("7", log[2])
        assert.are.equal("nil\tno more", log[3])
        assert.matches("^nil\treader function must return a string", log[4])
        assert.matches("^nil\t%(load%):1: .*near '12'", log[5]) -- a number is text, as the interpreter takes it
        assert.matches("^nil\t%(load%):1: .*near 'error'", log[6]) -- (a reader's chunk is named (load))
        assert.matches("^false\t.*mods load text chunks only %(mode 'b' refused%)", log[7])
        assert.matches("^function: .*\t1$", log[8])
    end)

    it("pays for the collection a refused query makes", function()
        -- at its query limit, each world:query ran a full collection of the mod's heap, free:
        -- a loop over pcall(world.query, ...) made one per few instructions, for good
        local dir = M.folder()
        local w, mods = M.host{instructions = 1e7, milliseconds = -1}
        assert(mods:load(M.write(dir, "hoarder.lua", [[
            keep = {}
            for i = 1, 256 do keep[i] = world:query{"Position"} end
            junk = {}
            for i = 1, 300000 do junk[i] = {} end
            world:system{name = "hoard", run = function()
                for _ = 1, 200 do pcall(world.query, world, {"Position"}) end
                print("done")
            end}
        ]])))
        local ok, failures = w:progress(1 / 60)
        assert.is_false(ok)
        assert.matches("system 'hoard' ran past its budget", failures[1].message, 1, true)
        assert.are.same({}, mods:log("hoarder"))
    end)

    it("adding and removing systems by fresh names does not slow the frames down for good", function()
        -- the manager kept every name a mod ever added, in host memory, and scanned them all at
        -- each add: 300 a frame made each frame slower than the last (300 ms by the 50th)
        local dir = M.folder()
        local w, mods = M.host()
        assert(mods:load(M.write(dir, "churn.lua", [[
            local n, f = 0, function() end
            world:system{name = "churn", run = function()
                for _ = 1, 300 do
                    n = n + 1
                    if not pcall(world.system, world, {name = "c" .. n, run = f}) then break end
                    world:remove_system("c" .. n)
                end
            end}
        ]])))
        -- the list is host memory, which tests/tools/test_mods_lua_memory.c counts through the
        -- host state's allocator from frame 10 to 50 (the same, not timed): here the frames run
        assert.are.same({}, M.frames(w, 50))
        assert.are.same({"churn"}, M.info(mods, "churn").systems)
    end)

    it("recursing through C functions that call back into it fails, not the host (LuaJIT)", function()
        -- LuaJIT checks no C stack depth: gsub's function, print's __tostring and require,
        -- each calling the next, or coroutines each resuming the next, ran the C stack out and
        -- crashed the host
        local dir = M.folder()
        local _, mods = M.host{milliseconds = -1} -- (the recursion takes seconds under ASan)
        M.folder_mod(dir, "deep", {name = "deep"}, {
            ["init.lua"] = [[
                local function f(s) return (s:gsub(".", f)) end
                print(pcall(f, "abc"))
                local t = setmetatable({}, {})
                getmetatable(t).__tostring = function(x) print(x) return "" end
                print(pcall(print, t))
                print(pcall(require, "again"))
                local function g() return coroutine.wrap(g)() end -- LuaJIT resumes on the C stack
                print(pcall(g))
                local function h() local _, e = coroutine.resume(coroutine.create(h)); error(e, 0) end
                print(pcall(h))
            ]],
            ["again.lua"] = 'return require("again")',
        })
        assert(mods:load(dir .. "/deep"))
        local log = mods:log("deep")
        assert.are.equal(5, #log)
        for i, line in ipairs(log) do -- (Lua 5.4's wrap adds a position a level: the line is cut)
            assert.matches(i <= 3 and "^false\t.*stack overflow" or "^false\t", line)
        end
    end)

    it("cannot insert past a table's ends (LuaJIT moved every slot between, 14 s a call)", function()
        local dir = M.folder()
        local _, mods = M.host()
        assert(mods:load(M.write(dir, "inserter.lua", [[
            print(pcall(table.insert, {}, 2^31, 1))
            print(pcall(table.insert, {1, 2}, -2^31, 1))
        ]])))
        -- refused, not timed: LuaJIT's own table.insert refused neither (it ran 14 s and went on)
        local log = mods:log("inserter")
        assert.matches("^false\t.*position out of bounds", log[1])
        assert.matches("^false\t.*position out of bounds", log[2])
    end)

    it("pays for each read of a file it requires, which does not parse and is read again", function()
        -- require read and lexed a file that failed again at each call (a long comment, then a
        -- syntax error): a loop over pcall(require) ran in C past its time limit, 100 reads
        local dir = M.folder()
        local w, mods = M.host{instructions = 5e6, frame_instructions = 1e12, milliseconds = 50, frame_milliseconds = -1}
        M.folder_mod(dir, "rereader", {name = "rereader"}, {
            ["init.lua"] = spinner("again", 'last = (last or 0) + (select(2, pcall(require, "big")):find("syntax") and 1 or 0)'),
            ["big.lua"] = "--" .. string.rep("x", 8e6) .. "\nthis does not parse",
        })
        assert(mods:load(dir .. "/rereader"))
        local ok, failures = w:progress(1 / 60)
        assert.is_false(ok)
        assert.are.equal(1, #failures)
        -- last counts the reads done, 1e6 steps each: 5 at most (the pcall catches a refused one)
        local reads = tonumber(mods:log("rereader")[1]:match("%d+$")) or 0 -- (nil: none done)
        assert.is_true(reads <= 5, reads .. " reads")
    end)

    it("pays for the copies of its arguments the host refuses, too", function()
        -- a copy refused at its cap had copied a mod's memory of strings first, uncharged: a
        -- loop over pcall(host_function, t) ran seconds past its time limit
        local dir = M.folder()
        local w, mods = M.host{instructions = 5e6, frame_instructions = 1e12, milliseconds = 50,
                               frame_milliseconds = -1, allow = {sink = function() end}}
        assert(mods:load(M.write(dir, "resender.lua", [[
            local s = string.rep("x", 4e6)
            local t = {}
            for i = 1, 20 do t[i] = s end
        ]] .. spinner("resend", "_, last = pcall(sink, t)"))))
        local ok, failures = w:progress(1 / 60)
        assert.is_false(ok)
        assert.are.equal(1, #failures)
        -- a refused copy took about 3 ms, uncharged: the run went on for 6 s, 2000 turns
        turns_within(mods, "resender", MAX_TURNS)
    end)
end)
