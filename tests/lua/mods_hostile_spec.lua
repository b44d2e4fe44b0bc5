-- mods_hostile_spec.lua: mods written to break out, freeze or crash the host. Each attack is
-- a mod file in a scratch folder; each test asserts the host's frames complete, a bystander
-- mod's system keeps running, nothing escapes, and the failure names the attacking mod.
local kiln = require "kiln"
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local H = dofile(here .. "helpers.lua")
local M = dofile(here .. "mods_helpers.lua")

local BUDGET = 200000 -- instructions per entry into mod code: small, so the loops end fast
local CLOCK = 5000    -- ms a run may take: far past what the budget lets it do, even under ASan

local BYSTANDER = [[
world:component("Tally", "int64_t n;")
world:spawn{Tally = {n = 0}}
world:system{name = "bystander_sys", writes = {"Tally"}, query = {"Tally"},
             each = function(_, t) t.n = t.n + 1 end}
mod.exports.ok = true
]]

-- A host with a bystander mod; opts go to kiln.mods (the budget defaults to BUDGET).
local function arena(opts)
    opts = opts or {}
    opts.instructions, opts.milliseconds = opts.instructions or BUDGET, opts.milliseconds or CLOCK
    local a = {dir = M.folder()}
    a.w, a.mods, a.host = M.host(opts)
    M.write(a.dir, "bystander.lua", BYSTANDER)
    assert(a.mods:load(a.dir .. "/bystander.lua"))
    return a
end

local function tally(a)
    local es = M.entities_with(a.w, "Tally")
    return a.w:get(es[1], "Tally").n
end

-- Loads the attacking mod name from src (a single file); returns what mods:load returned.
local function attack(a, name, src)
    M.write(a.dir, name .. ".lua", src)
    return a.mods:load(a.dir .. "/" .. name .. ".lua")
end

-- Runs n frames: each returns; the host's system and the bystander's ran every frame.
-- Returns the failures of mod name, each naming it, and none its clock's: what stops an attack
-- is its budget (a count), not timed here; the clock stops only work the budget did not see.
local function survives(a, n, name)
    n = n or 3
    local runs, count = a.host.runs, tally(a)
    local failures = M.frames(a.w, n)
    assert.are.equal(runs + n, a.host.runs)
    assert.are.equal(count + n, tally(a))
    assert.are.same({}, M.failures_of(failures, "bystander"))
    local mine = name and M.failures_of(failures, name) or {}
    for _, f in ipairs(mine) do
        assert.matches("mod '" .. name .. "'", f.message, 1, true)
        assert.is_nil(f.message:find("time limit", 1, true) or f.message:find("ms for this frame", 1, true), f.message)
    end
    return mine
end

-- The attack's load (its results packed in r) must fail, naming the mod and (plainly) each
-- further argument.
local function refused(name, r, ...)
    local ok, err = r[1], r[2]
    assert.is_nil(ok)
    assert.matches("mod '" .. name .. "'", err, 1, true)
    for i = 1, select("#", ...) do assert.matches(select(i, ...), err, 1, true) end
end

-- The one line a mod printed at its top level.
local function said(a, name)
    local log = a.mods:log(name)
    assert.are.equal(1, #log, "expected one line, got: " .. table.concat(log, " | "))
    return log[1]
end

describe("a hostile mod", function()
    after_each(M.cleanup)

    describe("cannot reach the process", function()
        it("has no io, os.execute, os.getenv, package, debug, dofile, loadfile or string.dump", function()
            local a = arena()
            assert(attack(a, "snoop", [[
                local found = {}
                local function check(name, v) if v ~= nil then found[#found + 1] = name end end
                check("io", io); check("package", package); check("debug", debug)
                check("dofile", dofile); check("loadfile", loadfile); check("warn", warn)
                check("string.dump", string.dump); check(":dump", ("").dump)
                for _, f in ipairs{"execute", "getenv", "exit", "remove", "rename", "tmpname", "setlocale"} do
                    check("os." .. f, os[f])
                end
                check("kiln.world", kiln.world); check("kiln.mods", kiln.mods)
                local ok = pcall(collectgarbage, "stop")
                if ok then found[#found + 1] = "collectgarbage('stop')" end
                print(#found == 0 and "none" or table.concat(found, ","), type(os.time()), type(os.clock()))
            ]]))
            assert.are.equal("none\tnumber\tnumber", said(a, "snoop"))
            survives(a)
        end)

        it("has none of LuaJIT's extra loaders, finalizers and environment functions", function()
            local a = arena()
            assert(attack(a, "extras", [[
                local found = {}
                for _, name in ipairs{"loadstring", "newproxy", "getfenv", "setfenv", "gcinfo", "module",
                                      "unpack", "jit", "ffi", "bit", "require"} do
                    if rawget(_G, name) ~= nil and name ~= "require" then found[#found + 1] = name end
                end
                local ok = pcall(require, "ffi")
                if ok then found[#found + 1] = "require 'ffi'" end
                print(#found == 0 and "none" or table.concat(found, ","))
            ]]))
            assert.are.equal("none", said(a, "extras"))
            survives(a)
        end)

        it("cannot set a __gc finalizer, which would run outside its budget", function()
            local a = arena()
            assert(attack(a, "finalizer", [[
                print(pcall(setmetatable, {}, {__gc = function() while true do end end}))
            ]]))
            assert.matches("^false\t.*cannot set a __gc finalizer", said(a, "finalizer"))
            collectgarbage()
            survives(a)
        end)
    end)

    describe("cannot run bytecode", function()
        local BYTES = string.dump(function() print("bytecode ran") end)
        -- how the interpreter words the refusal (LuaJIT: "attempt to load chunk with wrong mode")
        local BINARY = type(jit) == "table" and "chunk with wrong mode" or "binary chunk"

        it("through load, given the bytes as a string or by a reader function", function()
            local a = arena{allow = {BYTES = BYTES}}
            assert(attack(a, "loader", [[
                local f, err = load(BYTES)
                local parts = {BYTES:sub(1, 4), BYTES:sub(5)}
                local g, err2 = load(function() return table.remove(parts, 1) end)
                local h, err3 = pcall(load, BYTES, "x", "b")
                print(f, err, g, err2, h)
            ]]))
            assert.matches("^nil\tattempt to load a? ?" .. BINARY .. ".*\tnil\tattempt to load a? ?" .. BINARY .. ".*\tfalse$",
                           said(a, "loader"))
            survives(a)
        end)

        it("as its entry file, single or named by a manifest", function()
            local a = arena()
            M.write(a.dir, "binary.lua", BYTES)
            refused("binary", {a.mods:load(a.dir .. "/binary.lua")}, BINARY)
            M.write(a.dir, "binfolder/manifest.lua", 'return {name = "binfolder", entry = "main.lua"}')
            M.write(a.dir, "binfolder/main.lua", BYTES)
            refused("binfolder", {a.mods:load(a.dir .. "/binfolder")}, BINARY)
            M.write(a.dir, "binmanifest/manifest.lua", string.dump(function() return {name = "x"} end))
            M.write(a.dir, "binmanifest/init.lua", "")
            local ok, err = a.mods:load(a.dir .. "/binmanifest")
            assert.is_nil(ok)
            assert.matches("bad manifest: .*" .. BINARY, err)
            survives(a)
        end)

        it("through require", function()
            local a = arena()
            M.folder_mod(a.dir, "req", {name = "req"}, {["init.lua"] = 'print(pcall(require, "compiled"))',
                                                        ["compiled.lua"] = BYTES})
            assert(a.mods:load(a.dir .. "/req"))
            assert.matches("^false\t.*" .. BINARY, said(a, "req"))
            survives(a)
        end)
    end)

    describe("cannot require outside its folder", function()
        local function escaper(a, requires)
            M.write(a.dir, "outside/secret.lua", "LEAKED = true; return 'secret'")
            M.write(a.dir, "outside/sub/other.lua", "LEAKED = true; return 'other'")
            local lines = {}
            for i, r in ipairs(requires) do
                lines[i] = string.format("print(%q, pcall(require, %q))", r, r)
            end
            lines[#lines + 1] = "print('leaked', LEAKED)"
            M.folder_mod(a.dir, "escape", {name = "escape"}, {["init.lua"] = table.concat(lines, "\n")})
            assert(os.execute("ln -s '" .. a.dir .. "/outside/secret.lua' '" .. a.dir .. "/escape/link.lua'"))
            assert(os.execute("ln -s '" .. a.dir .. "/outside/sub' '" .. a.dir .. "/escape/dirlink'"))
            assert(a.mods:load(a.dir .. "/escape"))
            return a.mods:log("escape")
        end

        it("by .., an absolute path, a symlinked file or a symlinked folder", function()
            local a = arena()
            local log = escaper(a, {"..outside.secret", "../outside/secret", a.dir .. "/outside/secret",
                                    "/etc/passwd", "link", "dirlink.other", ".hidden", "a..b"})
            assert.are.equal(9, #log)
            for i = 1, 8 do assert.matches("^[^\t]*\tfalse\trequire", log[i]) end
            assert.are.equal("leaked\tnil", log[9])
            survives(a)
        end)

        it("by naming an entry file outside its folder in the manifest", function()
            local a = arena()
            M.write(a.dir, "outside.lua", "print('outside ran')")
            M.write(a.dir, "up/manifest.lua", 'return {name = "up", entry = "../outside.lua"}')
            refused("up", {a.mods:load(a.dir .. "/up")}, "not a file inside the mod's folder")
            M.write(a.dir, "abs/manifest.lua", string.format("return {name = 'abs', entry = %q}", a.dir .. "/outside.lua"))
            refused("abs", {a.mods:load(a.dir .. "/abs")}, "not a file inside the mod's folder")
            survives(a)
        end)

        it("and a single-file mod has no folder to require from", function()
            local a = arena()
            M.write(a.dir, "neighbour.lua", "LEAKED = true")
            assert(attack(a, "single", 'local ok, err = pcall(require, "neighbour"); print(ok, err, LEAKED)'))
            assert.matches("^false\t.*single%-file mod has no folder.*\tnil$", said(a, "single"))
        end)
    end)

    describe("cannot run forever", function()
        it("at its top level, which fails naming the mod and leaves nothing behind", function()
            local a = arena()
            refused("spin", {attack(a, "spin", [[
                world:system{name = "spin_sys", run = function() end}
                while true do end
            ]])}, "ran past its budget of " .. BUDGET .. " instructions")
            assert.are.same({"host_tick", "bystander_sys"}, M.system_names(a.w))
            survives(a)
        end)

        local loops = {
            run = "world:system{name = 'NAME', run = function() while true do end end}",
            each = [[world:system{name = 'NAME', reads = {'Tally'}, query = {'Tally'},
                                  each = function() while true do end end}]],
            pcall_loop = [[world:system{name = 'NAME', run = function()
                              while true do pcall(function() while true do end end) end
                          end}]],
            pcall_error_loop = [[world:system{name = 'NAME', run = function()
                              local n = 0
                              while true do n = n + 1; pcall(error, n) end
                          end}]],
            xpcall_handler = [[world:system{name = 'NAME', run = function()
                              while true do
                                  xpcall(function() while true do end end, function() while true do end end)
                              end
                          end}]],
            coroutine = [[world:system{name = 'NAME', run = function()
                              local co = coroutine.wrap(function() while true do end end)
                              co()
                          end}]],
            yielding = [[world:system{name = 'NAME', run = function()
                              local co = coroutine.create(function() while true do coroutine.yield() end end)
                              while true do coroutine.resume(co) end
                          end}]],
            recursion = [[world:system{name = 'NAME', run = function()
                              local function f() return pcall(f) end
                              while true do f() end
                          end}]],
            close = [[world:system{name = 'NAME', run = function()
                              local guard <close> = setmetatable({}, {__close = function() while true do end end})
                              while true do end
                          end}]],
            gsub_callback = [[world:system{name = 'NAME', run = function()
                              string.gsub("abc", "%w", function() while true do end end)
                          end}]],
            sort_comparator = [[world:system{name = 'NAME', run = function()
                              local t = {3, 1, 2}
                              table.sort(t, function() while true do end end)
                          end}]],
            -- each callbacks with no loop and no call of their own, which the budget charges
            -- whole per row: a call out of them is counted instruction by instruction
            each_metamethod = [[local t = setmetatable({}, {__index = function() while true do end end})
                          world:system{name = 'NAME', reads = {'Tally'}, query = {'Tally'},
                                       each = function(_, c) local x = t.y end}]],
            each_environment = [[local env = setmetatable({}, {__index = function() while true do end end})
                          local f = load("return function(_, c) local x = missing end", "f", "t", env)()
                          world:system{name = 'NAME', reads = {'Tally'}, query = {'Tally'}, each = f}]],
            each_arithmetic = [[local t = setmetatable({}, {__add = function() while true do end end})
                          world:system{name = 'NAME', reads = {'Tally'}, query = {'Tally'},
                                       each = function(_, c) local x = t + c.n end}]],
            tostring_error = [[world:system{name = 'NAME', run = function()
                              error(setmetatable({}, {__tostring = function() while true do end end}))
                          end}]],
        }
        it("in a loop-free each over many rows: every row is charged", function()
            local a = arena{instructions = 20000}
            assert(attack(a, "rows", [[
                world:component("Crate", "float x;")
                world:system{name = "rows_sys", writes = {"Crate"}, query = {"Crate"},
                             each = function(_, c) c.x = c.x + 1 end}
            ]]))
            for i = 1, 6000 do a.w:spawn{Crate = {x = i}} end -- 4 instructions a row run, 5 charged
            local mine = survives(a, 2, "rows")
            assert.are.equal(2, #mine)
            assert.matches("system 'rows_sys' ran past its budget of 20000 instructions", mine[1].message, 1, true)
        end)

        local names = {}
        for k in pairs(loops) do names[#names + 1] = k end
        table.sort(names)
        for _, kind in ipairs(names) do
            it("in a system (" .. kind .. "): that system fails each frame, the frames go on", function()
                local a = arena()
                local name = "loop_" .. kind
                assert(attack(a, name, (loops[kind]:gsub("NAME", name))))
                local mine = survives(a, 3, name)
                assert.are.equal(3, #mine)
                assert.are.equal(name, mine[1].system)
                local info = M.info(a.mods, name)
                assert.are.equal(3, info.failures)
                assert.matches("system '" .. name .. "'", info.error, 1, true)
            end)
        end

        it("in a function another mod calls through its exports", function()
            local a = arena()
            M.folder_mod(a.dir, "trap", {name = "trap"},
                         {["init.lua"] = "mod.exports.spin = function() while true do end end"})
            M.folder_mod(a.dir, "victim", {name = "victim", depends = {"trap"}}, {["init.lua"] = [[
                local spin = mod.import("trap").spin
                world:system{name = "victim_sys", run = function() print(pcall(spin)) end}
            ]]})
            assert(a.mods:load(a.dir .. "/trap"))
            assert(a.mods:load(a.dir .. "/victim"))
            -- the call ran on the caller's budget: spent, the caller fails right after it
            local mine = survives(a, 2, "victim")
            assert.are.equal(2, #mine)
            assert.matches("system 'victim_sys' ran past its budget", mine[1].message, 1, true)
            assert.are.same({}, a.mods:log("victim"))
            assert.are.equal(0, M.info(a.mods, "trap").failures)
        end)

        it("in a function another mod's top level calls: the call spends the top level's budget", function()
            local a = arena()
            M.folder_mod(a.dir, "trap", {name = "trap"}, {["init.lua"] = "CALLS = 0 world:system{name = 'calls', " ..
                "run = function() print(CALLS) end} mod.exports.spin = function() CALLS = CALLS + 1 while true do end end"})
            M.folder_mod(a.dir, "careful", {name = "careful", depends = {"trap"}}, {["init.lua"] = [[
                local spin = mod.import("trap").spin
                while true do pcall(spin) end
            ]]})
            assert(a.mods:load(a.dir .. "/trap"))
            -- its budget stops it, not the clock (with a fresh budget a call, the clock did)
            refused("careful", {a.mods:load(a.dir .. "/careful")}, "the top level of mod 'careful' ran past its budget")
            survives(a)
            assert.are.same({"1", "1", "1"}, a.mods:log("trap")) -- counted: one call spent the budget
        end)

        it("by calling another mod's function in a pcall loop: each call spends the caller's budget", function()
            local a = arena()
            M.folder_mod(a.dir, "trap", {name = "trap"},
                         {["init.lua"] = "mod.exports.spin = function() while true do end end"})
            M.folder_mod(a.dir, "looper", {name = "looper", depends = {"trap"}}, {["init.lua"] = [[
                local spin = mod.import("trap").spin
                CALLS = 0
                world:system{name = "looper_sys", run = function()
                    while true do CALLS = CALLS + 1; pcall(spin) end
                end}
                world:system{name = "count", after = {"looper_sys"}, run = function() print(CALLS) end}
            ]]})
            assert(a.mods:load(a.dir .. "/trap"))
            assert(a.mods:load(a.dir .. "/looper"))
            local mine = survives(a, 2, "looper") -- (its budget stopped it, not the clock)
            assert.are.same({"1", "2"}, a.mods:log("looper")) -- counted: a call a frame spent it
            assert.are.equal(2, #mine)
            assert.matches("system 'looper_sys' ran past its budget", mine[1].message, 1, true)
        end)

        it("by disabling the budget it runs under: there is no hook to change", function()
            local a = arena()
            assert(attack(a, "unhook", [[
                print(debug == nil, pcall(function() return world:instructions(0) end))
            ]]))
            assert.matches("^true\tfalse\t.*world:instructions", said(a, "unhook"))
        end)
    end)

    describe("cannot run unbounded C code", function()
        local attacks = {
            slow_find = 'string.find(string.rep("a", 20000), string.rep("a*", 30) .. "b")',
            slow_match = 'string.match(string.rep("a", 20000), string.rep("(a?)", 30) .. string.rep("a", 30) .. "$")',
            slow_gmatch = 'for _ in string.gmatch(string.rep("a", 20000), string.rep("a-", 20) .. "b") do end',
            slow_gsub = 'string.gsub(string.rep("ab", 10000), "(.-)b(.-)b(.-)x", "%3")',
            rep_flood = 'local s = string.rep("x", 1073741824)',
            rep_method = 'local s = ("xy"):rep(536870912)',
            rep_sep = 'local s = string.rep("", 1073741824, "sep")',
            concat_flood = 'local big = string.rep("x", 65536); local t = {}; for i = 1, 20000 do t[i] = big end; local s = table.concat(t)',
            concat_sep = 'local t = {}; for i = 1, 1000 do t[i] = "" end; local s = table.concat(t, string.rep("x", 1048576))',
            copy_loop = 'local s = string.rep("x", 1048576); while true do local t = s:upper() end',
            concat_op = 'local s = string.rep("x", 1048576); local i = 0; while true do i = i + 1; local t = s .. i end',
            format_loop = 'local s = string.rep("x", 524288); while true do local t = string.format("%s%s", s, s) end',
            sort_big = 'local t = {}; for i = 1, 50000 do t[i] = -i end; table.sort(t, function(x, y) return x < y end)',
            move_big = 'local t = table.move({1}, 1, 1099511627776, 2)',
            insert_loop = 'local t = {}; for i = 1, 1e6 do table.insert(t, 1, i) end',
            unpack_loop = 'local t = {}; for i = 1, 30000 do t[i] = i end; while true do local n = select("#", table.unpack(t)) end',
            unpack_range = 'local n = select("#", table.unpack({}, 1, 1099511627776))',
            byte_loop = 'local s = string.rep("x", 30000); while true do local n = select("#", s:byte(1, -1)) end',
            codepoint_loop = 'local s = string.rep("x", 30000); while true do local n = select("#", utf8.codepoint(s, 1, -1)) end',
        }
        local names = {}
        for k in pairs(attacks) do names[#names + 1] = k end
        table.sort(names)
        for _, kind in ipairs(names) do
            it(kind .. " fails within the budget, naming the mod", function()
                local a = arena{memory = 8388608}
                local name = "c_" .. kind
                assert(attack(a, name, string.format("world:system{name = %q, run = function() %s end}", name,
                                                     attacks[kind])))
                local mine = survives(a, 2, name)
                assert.are.equal(2, #mine)
            end)
        end

        it("print floods reach the host's log a bounded number of times per entry", function()
            local lines = 0
            local a = arena{log = function() lines = lines + 1 end}
            assert(attack(a, "chatter", [[world:system{name = "chatter", run = function()
                while true do pcall(print, "spam") end
            end}]]))
            local mine = survives(a, 2, "chatter")
            assert.are.equal(2, #mine)
            assert.is_true(lines > 0 and lines <= 2 * BUDGET / 500, lines .. " lines reached the host")
            assert.are.equal(64, #a.mods:log("chatter"))
        end)

        it("a huge error message reaches the host's failures bounded", function()
            local a = arena{memory = 8388608}
            assert(attack(a, "shouter", [[world:system{name = "shouter", run = function()
                error(string.rep("A", 65536))
            end}]]))
            local mine = survives(a, 1, "shouter")
            assert.are.equal(1, #mine)
            assert.is_true(#mine[1].message < 1000, #mine[1].message .. " bytes")
            assert.matches("AAA%.%.%.$", mine[1].message)
        end)

        it("and a pcall around a refused call does not lift the budget", function()
            local a = arena()
            assert(attack(a, "retry", [[world:system{name = "retry", run = function()
                while true do pcall(string.rep, "x", 1073741824) end
            end}]]))
            assert.are.equal(2, #survives(a, 2, "retry"))
        end)
    end)

    describe("cannot exhaust memory", function()
        it("at its top level, which fails naming the mod", function()
            local a = arena{memory = 1048576, instructions = 10000000}
            refused("hog", {attack(a, "hog", "local t = {}; for i = 1, 1e8 do t[i] = {i} end")})
            survives(a)
        end)

        it("in a system: after failing for memory 3 times in a row it is disabled and its state released", function()
            local a = arena{memory = 1048576, instructions = 10000000}
            assert(attack(a, "hog", [[
                HOARD = {}
                world:system{name = "hog", run = function()
                    for i = 1, 1e8 do HOARD[#HOARD + 1] = {i} end
                end}
            ]]))
            local mine = survives(a, 5, "hog")
            assert.are.equal(3, #mine)
            assert.is_true(mine[3].disabled)
            assert.matches("disabled: its code ran out of its 1048576 bytes", mine[3].message, 1, true)
            local info = M.info(a.mods, "hog") -- list() releases the state
            assert.are.equal("disabled", info.state)
            assert.are.equal(0, info.memory)
            assert.are.same({}, info.systems)
            assert.are.same({"host_tick", "bystander_sys"}, M.system_names(a.w))
            survives(a, 2)
        end)

        it("and poll releases a disabled mod's state too, without reloading it", function()
            local a = arena{memory = 1048576, instructions = 10000000}
            assert(attack(a, "hog", "world:system{name = 'hog', run = function() local t = {} for i = 1, 1e8 do t[i] = i end end}"))
            survives(a, 3, "hog")
            local reloaded, failed = a.mods:poll()
            assert.are.same({}, reloaded)
            assert.are.same({}, failed)
            local info
            for _, m in ipairs(a.mods:list()) do if m.name == "hog" then info = m end end
            assert.are.equal(0, info.memory)
        end)

        it("by catching its own out-of-memory errors: it stays within its memory", function()
            local a = arena{memory = 1048576, instructions = 10000000}
            assert(attack(a, "catcher", [[world:system{name = "catcher", run = function()
                local keep = {}
                while true do pcall(function() keep[#keep + 1] = string.rep("x", 4096) .. #keep end) end
            end}]]))
            survives(a, 2, "catcher")
            assert.is_true(M.info(a.mods, "catcher").memory_peak <= (1048576) + (524288))
        end)
    end)

    describe("cannot flood the world with entities", function()
        it("in a system: spawns past the entities option fail, and a failed run's spawns are dropped", function()
            local a = arena{entities = 50}
            assert(attack(a, "flood", [[
                world:component("Junk", "int32_t v;")
                world:system{name = "flood", writes = {"Junk"}, run = function(w)
                    for i = 1, 1000 do w:spawn{Junk = {v = i}} end
                end}
            ]]))
            local mine = survives(a, 3, "flood")
            assert.are.equal(3, #mine)
            assert.matches("mod 'flood' has 50 live entities, its limit", mine[1].message, 1, true)
            assert.are.equal(0, #M.entities_with(a.w, "Junk"))
        end)

        it("in a system catching the refusals: it keeps at most its limit", function()
            local a = arena{entities = 50}
            assert(attack(a, "trickle", [[
                world:component("Junk", "int32_t v;")
                world:system{name = "trickle", writes = {"Junk"}, run = function(w)
                    for i = 1, 30 do pcall(w.spawn, w, {Junk = {v = i}}) end
                end}
            ]]))
            survives(a, 4, "trickle")
            assert.are.equal(50, #M.entities_with(a.w, "Junk"))
            assert.are.equal(50, M.info(a.mods, "trickle").entities)
        end)

        it("at its top level, whose spawns are undone with it", function()
            local a = arena{entities = 50}
            local before = a.w:count()
            refused("burst", {attack(a, "burst", 'world:component("Junk", "int32_t v;") for i = 1, 1000 do world:spawn{Junk = {v = i}} end')}, "has 50 live entities, its limit")
            assert.are.equal(before, a.w:count())
            survives(a)
        end)
    end)

    describe("cannot take over the world", function()
        it("cannot close it, run progress, or change max_failures or the budget, at its top level", function()
            local a = arena()
            assert(attack(a, "usurper", [[
                local out = {}
                for _, call in ipairs{
                    function() world:close() end, function() world:progress(1) end,
                    function() world:max_failures(0) end, function() world:instructions(0) end,
                    function() world:instructions(1e9) end,
                    function() local close = world.close; close(world) end,
                } do
                    local ok, err = pcall(call)
                    out[#out + 1] = ok and "ALLOWED" or err:match("world:[%a_]+")
                end
                print(table.concat(out, " "))
            ]]))
            assert.are.equal("world:close world:progress world:max_failures world:instructions world:instructions world:close",
                             said(a, "usurper"))
            survives(a)
        end)

        it("cannot instantiate scenes, read JSON prefabs or export the host's world", function()
            local a = arena()
            local before = a.w:count()
            assert(attack(a, "scener", [[
                local out = {}
                for _, call in ipairs{
                    function() world:instantiate('{"version": 1, "entities": [{}]}') end,
                    function() world:prefab('{"components": {}}') end,
                    function() world:export() end,
                } do
                    local ok, err = pcall(call)
                    out[#out + 1] = ok and "ALLOWED" or err:match("world:[%a_]+")
                end
                print(table.concat(out, " "))
            ]]))
            assert.are.equal("world:instantiate world:prefab world:export", said(a, "scener"))
            assert.are.equal(before, a.w:count())
            survives(a)
        end)

        it("cannot close it or run progress from a system", function()
            local a = arena()
            assert(attack(a, "usurper", [[world:system{name = "usurper", run = function(w)
                print(pcall(w.close, w))
                w:progress(1)
            end}]]))
            local mine = survives(a, 2, "usurper")
            assert.are.equal(2, #mine)
            assert.matches("a mod cannot run the schedule", mine[1].message, 1, true)
            assert.matches("^false\tworld:close: a mod cannot close the world", a.mods:log("usurper")[1])
        end)

        it("cannot collect it: dropping its view and collecting leaves the host's world whole", function()
            local a = arena()
            assert(attack(a, "dropper", "world = nil; collectgarbage(); collectgarbage()"))
            collectgarbage()
            survives(a)
            local e = a.w:spawn{Position = {x = 3}}
            assert.is_true(a.w:is_alive(e))
        end)

        it("cannot enable, disable or remove the host's or another mod's systems", function()
            local a = arena()
            assert(attack(a, "saboteur", [[
                for _, target in ipairs{"host_tick", "bystander_sys"} do
                    print(pcall(world.enable, world, target, false))
                    print(pcall(world.remove_system, world, target))
                end
            ]]))
            local log = a.mods:log("saboteur")
            assert.are.equal(4, #log)
            for _, line in ipairs(log) do assert.matches("^false\t.*is not a system of this mod", line) end
            assert.are.same({"host_tick", "bystander_sys"}, M.system_names(a.w))
            survives(a)
        end)

        it("cannot take the name of the host's or another mod's system, and the error names the owner", function()
            local a = arena()
            refused("impostor", {attack(a, "impostor", "world:system{name = 'host_tick', run = function() end}")}, "a system named 'host_tick' already exists (of the host)")
            refused("impostor2", {attack(a, "impostor2", "world:system{name = 'bystander_sys', run = function() end}")}, "a system named 'bystander_sys' already exists (of mod 'bystander')")
            survives(a)
        end)

        it("cannot redefine the host's or another mod's component with another schema; the error names both", function()
            local a = arena()
            a.w:event("Boom", "float power;")
            refused("redef_host", {attack(a, "redef_host", 'world:component("Position", "int32_t x;")')},
                    "component 'Position' is defined by the host with another schema; mod 'redef_host' cannot redefine it")
            refused("redef_mod", {attack(a, "redef_mod", 'world:component("Tally", "float n;")')},
                    "component 'Tally' is defined by mod 'bystander' with another schema; mod 'redef_mod' cannot redefine it")
            refused("redef_event", {attack(a, "redef_event", 'world:event("Boom", "int8_t x;")')}, "Boom", "the host")
            -- the same schema is shared, not redefined
            assert(attack(a, "sharer", 'world:component("Tally", "int64_t n;"); world:component("Position", "float x, y;")'))
            survives(a)
        end)

        it("cannot reach the host's Lua-valued components", function()
            local a = arena()
            a.w:component("Script", "lua")
            local e = a.w:spawn{Script = {secret = "host only"}, Position = {x = 1}}
            assert(attack(a, "peeker", string.format([[
                local e = %d
                local out = {}
                for _, call in ipairs{
                    function() return world:get(e, "Script") end,
                    function() return world:query{"Script"} end,
                    function() world:set(e, "Script", {}) end,
                    function() world:remove(e, "Script") end,
                    function() world:spawn{Script = {}} end,
                    function() world:component("Script") end,
                    function() world:component("Mine", "lua") end,
                } do
                    local ok, err = pcall(call)
                    out[#out + 1] = ok and "ALLOWED" or "refused"
                end
                print(table.concat(out, " "))
            ]], e)))
            assert.are.equal("refused refused refused refused refused refused refused", said(a, "peeker"))
            assert.are.equal("host only", a.w:get(e, "Script").secret)
            survives(a)
        end)

        it("cannot use kiln's own components (another mod's tag)", function()
            local a = arena()
            local bystander_e = M.entities_with(a.w, "Tally")[1]
            assert(attack(a, "tagger", string.format([[
                local e = %d
                local out = {}
                for _, call in ipairs{
                    function() world:remove(e, "kiln.mod.bystander") end,
                    function() world:add(e, "kiln.mod.tagger") end,
                    function() world:spawn{["kiln.mod.bystander"] = true} end,
                    function() world:query{"kiln.mod.bystander"} end,
                    function() world:component("kiln.mine") end,
                } do
                    out[#out + 1] = pcall(call) and "ALLOWED" or "refused"
                end
                print(table.concat(out, " "))
            ]], bystander_e)))
            assert.are.equal("refused refused refused refused refused", said(a, "tagger"))
            assert.are.equal(1, M.info(a.mods, "bystander").entities)
            survives(a)
        end)
    end)

    describe("cannot tamper with metatables", function()
        it("of the world: what getmetatable shows is a copy; the methods stay for everyone", function()
            local a = arena()
            assert(attack(a, "tamper", [[
                local mt = getmetatable(world)
                mt.__index = function() error("hijacked") end
                mt.spawn = nil
                rawset(mt, "__gc", function() end)
                print(pcall(setmetatable, world, {}))
                world:component("Mine", "int32_t v;")
                local e = world:spawn{Mine = {v = 7}}
                print(world:get(e, "Mine").v)
            ]]))
            local log = a.mods:log("tamper")
            assert.matches("^false", log[1])
            assert.are.equal("7", log[2])
            local e = a.w:spawn{Position = {x = 9}}
            assert.are.equal(9, a.w:get(e, "Position").x)
            survives(a)
        end)

        it("of strings: the metatable is protected, and the string library is the mod's own", function()
            local a = arena()
            assert(attack(a, "strmeta", [[
                print(getmetatable(""), pcall(setmetatable, "", {}))
                string.upper = function() return "pwned" end
                string.rep = function() return "pwned" end
            ]]))
            assert.matches("^string\tfalse", said(a, "strmeta"))
            assert(attack(a, "other", 'print(("abc"):upper(), ("ab"):rep(2))'))
            assert.are.equal("ABC\tabab", said(a, "other"))
            assert.are.equal("ABC", ("abc"):upper())
            survives(a)
        end)

        it("of kiln's other objects: queries and systems' views", function()
            local a = arena()
            assert(attack(a, "views", [[
                world:component("Mark", "int32_t v;")
                world:spawn{Mark = {v = 1}}
                local q = world:query{"Mark"}
                local mt = getmetatable(q)
                if type(mt) == "table" then mt.__index = nil; mt.each = nil end
                print(pcall(setmetatable, q, {}))
                local n = 0
                for e, m in q:each() do n = n + m.v end
                print(n)
            ]]))
            local log = a.mods:log("views")
            assert.matches("^false", log[1])
            assert.are.equal("1", log[2])
            survives(a)
        end)

        it("cannot use a view from one system's loop in another system", function()
            local a = arena()
            assert(attack(a, "smuggler", [[
                world:component("Mark", "int32_t v;")
                world:spawn{Mark = {v = 1}}
                local kept
                world:system{name = "smuggle_a", reads = {"Mark"}, query = {"Mark"}, each = function(_, m) kept = m end}
                world:system{name = "smuggle_b", writes = {"Mark"}, after = {"smuggle_a"},
                             run = function() kept.v = 99 end}
            ]]))
            local mine = survives(a, 2, "smuggler")
            assert.are.equal(2, #mine)
            assert.are.equal("smuggle_b", mine[1].system)
            assert.matches("view was used after its loop ended", mine[1].message, 1, true)
            assert.are.equal(1, a.w:get(M.entities_with(a.w, "Mark")[1], "Mark").v)
        end)
    end)

    describe("cannot abuse exports", function()
        it("a proxy whose mod went away raises naming that mod", function()
            local a = arena()
            M.folder_mod(a.dir, "lib", {name = "lib"}, {["init.lua"] = "mod.exports.f = function(x) return x + 1 end"})
            local user = M.folder_mod(a.dir, "user", {name = "user", depends = {"lib"}}, {["init.lua"] = [[
                local f = mod.import("lib").f
                world:system{name = "user_sys", run = function() print(pcall(f, 1)) end}
            ]]})
            assert(a.mods:load(a.dir .. "/lib"))
            assert(a.mods:load(user))
            survives(a, 1)
            -- lib's reload reloads user too; user's new code is broken, so the old one, holding
            -- a proxy into lib's previous version, runs on
            M.write(a.dir, "user/init.lua", "error('broken save')")
            M.write(a.dir, "lib/init.lua", "mod.exports.f = function(x) return x + 2 end")
            assert(a.mods:reload("lib"))
            survives(a, 1)
            local log = a.mods:log("user")
            assert.are.equal("true\t2", log[1])
            assert.matches("^false\t.*mod 'lib' is no longer loaded", log[2])
        end)

        it("functions cannot be passed as arguments into another mod", function()
            local a = arena()
            M.folder_mod(a.dir, "lib", {name = "lib"}, {["init.lua"] = "mod.exports.call = function(g) return g() end"})
            M.folder_mod(a.dir, "user", {name = "user", depends = {"lib"}},
                         {["init.lua"] = 'print(pcall(mod.import("lib").call, function() return 1 end))'})
            assert(a.mods:load(a.dir .. "/lib"))
            assert(a.mods:load(a.dir .. "/user"))
            assert.matches("^false\tmod 'lib': .*function", said(a, "user"))
        end)

        local hostile = {
            cycle = "local t = {}; t.self = t; mod.exports.t = t",
            deep = "local t = {}; local x = t; for i = 1, 100 do x.n = {}; x = x.n end; mod.exports.t = t",
            metatable = "mod.exports.t = setmetatable({}, {__index = function() while true do end end})",
            userdata = "mod.exports.w = world",
            thread = "mod.exports.co = coroutine.create(function() end)",
            huge = "local t = {}; for i = 1, 1100000 do t[i] = true end; mod.exports.t = t",
            result = "mod.exports.f = function() return world end",
        }
        local names = {}
        for k in pairs(hostile) do names[#names + 1] = k end
        table.sort(names)
        for _, kind in ipairs(names) do
            it("hostile exports (" .. kind .. ") fail the import with a message, not the host", function()
                local a = arena{instructions = 10000000, memory = 67108864}
                M.folder_mod(a.dir, "evil", {name = "evil"}, {["init.lua"] = hostile[kind]})
                M.folder_mod(a.dir, "user", {name = "user", depends = {"evil"}}, {["init.lua"] = [[
                    local ok, e = pcall(mod.import, "evil")
                    if ok and e.f then ok, e = pcall(e.f) end
                    print(ok, e)
                ]]})
                assert(a.mods:load(a.dir .. "/evil"))
                assert(a.mods:load(a.dir .. "/user"))
                assert.matches("^false\t", said(a, "user"))
                survives(a, 1)
            end)
        end
    end)

    describe("cannot be handed dangerous values by a careless host", function()
        local careless = {
            cycle = function() local t = {}; t.self = t; return t end,
            deep = function() local t = {}; local x = t; for _ = 1, 100 do x.n = {}; x = x.n end; return t end,
            userdata = function() return io.stdout end,
            metatable = function() return setmetatable({}, {}) end,
        }
        local names = {}
        for k in pairs(careless) do names[#names + 1] = k end
        table.sort(names)
        for _, kind in ipairs(names) do
            it("allow (" .. kind .. ") is refused when the manager is made, naming allow", function()
                local ok, err = pcall(M.host, {allow = {gift = careless[kind]()}})
                assert.is_false(ok)
                assert.matches("bad argument #2 to 'kiln.mods' %(allow ", err)
            end)
        end

        it("a host function granted by allow runs in the host, its errors named as the host's", function()
            local dir = M.folder()
            local calls = 0
            local _, mods = M.host{allow = {bump = function(n) calls = calls + n; return calls end}}
            M.write(dir, "caller.lua", [[
                local a, b = pcall(bump, "x")
                local c, d = pcall(bump, function() end)
                print(bump(2), a, b, c, d)
            ]])
            assert(mods:load(dir .. "/caller.lua"))
            local line = mods:log("caller")[1]
            assert.matches("^2\tfalse\tthe host: .*\tfalse\t.*function", line)
            assert.are.equal(2, calls)
        end)
    end)
end)
