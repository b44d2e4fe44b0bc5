-- mods_together_spec.lua: many mods loaded at once that call and use one another: a chain of
-- them must not take the host down together where none of them could alone.
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local M = dofile(here .. "mods_helpers.lua")
local H = dofile(here .. "helpers.lua")

-- The text of mod i of a chain: its export nests `nest` string.gsub callbacks (C calls of its
-- state, under Lua 5.4 and LuaJIT alike), or coroutines each resuming the next when `via` is
-- "coroutine", and then calls mod i-1's export. A failure anywhere comes back as "DEEP" when it says
-- the calls nest too deep, so the message does not grow with every mod it crosses.
local function chain_link(i, nest, via)
    local prev = i > 1 and string.format('mod.import("c%d").f', i - 1) or "function() return 0 end"
    return string.format([[
local prev = %s
local function down(n)
    if n == 0 then
        local ok, v = pcall(prev)
        if ok then return v + 1 end
        if v:find("nest too deep", 1, true) or v:find("DEEP", 1, true) then error("DEEP", 0) end
        error(v, 0)
    end
    local v
    if %s then
        local ok, err = coroutine.resume(coroutine.create(function() v = down(n - 1) end))
        if not ok then error(err, 0) end
    else
        string.gsub("x", "x", function() v = down(n - 1) end)
    end
    return v
end
mod.exports.f = function() return down(%d) end
]], prev, tostring(via == "coroutine"), nest)
end

-- A host with mods c1 .. cn loaded in a fresh folder, each chain_link(i, nest, via): world, mods, folder.
local function chain(n, nest, via)
    local w, mods = M.host()
    local dir = M.folder()
    for i = 1, n do
        assert(mods:load(M.folder_mod(dir, "c" .. i, {name = "c" .. i, version = "1",
                                                     depends = i > 1 and {"c" .. (i - 1)} or nil},
                                      {["init.lua"] = chain_link(i, nest, via)})))
    end
    return w, mods, dir
end

-- Loads a mod calling c3 of a chain (chain_link's): its export answers 3, and a frame runs.
local function short_chain_runs(w, mods, dir)
    local short = M.folder_mod(dir, "short", {name = "short", version = "1", depends = {"c3"}},
                               {["init.lua"] = 'print(mod.import("c3").f())'})
    assert(mods:load(short))
    assert.are.equal("3", mods:log("short")[1])
    assert.is_true(w:progress(1 / 60))
end

-- The world_bytes mods:list() gives the mod of that name.
local function world_bytes(mods, name)
    for _, m in ipairs(mods:list()) do if m.name == name then return m.world_bytes end end
end

describe("mods together", function()
    after_each(M.cleanup)

    it("calling an export with big arguments each frame leaves the exporting mod room for its own work", function()
        -- b passes 10 MB to a's export before a's system runs; the copies are garbage in a's
        -- state once the call returns, and a's string.rep (a luaL_Buffer, which no emergency
        -- collection serves under Lua 5.4; LuaJIT makes none) failed for memory over them
        local w, mods = M.host_with_folder_mods({
            {"a", init = [[
mod.exports.size = function(t) return #t end
world:system{name = "a_work", run = function() return #string.rep("y", 5 * 1024 * 1024) end}
]]},
            {"b", depends = {"a"}, init = [[
local size = mod.import("a").size
local big = {}
for i = 1, 100 do big[i] = string.rep(string.char(65 + i % 26), 100000) .. i end
world:system{name = "b_feed", before = {"a_work"}, run = function() assert(size(big) == 100) end}
]]},
        }, {memory = 16 * 1024 * 1024})
        for _ = 1, 4 do
            local ok, failures = w:progress(1 / 60)
            assert.is_true(ok, failures and failures[1] and failures[1].message)
        end
        for _, m in ipairs(mods:list()) do assert.are.equal("running", m.state) end
    end)

    it("sharing a component: the registrar's unload hands it to the other, whose unload takes it off", function()
        local w, mods = M.host()
        local host = w:spawn{Position = {x = 0, y = 0}}
        local dir = M.folder()
        local a = M.folder_mod(dir, "a", {name = "a", version = "1"},
                               {["init.lua"] = 'world:component("Shield", "int32_t hp;")'})
        local b = M.folder_mod(dir, "b", {name = "b", version = "1"}, {["init.lua"] = string.format([[
world:component("Shield", "int32_t hp;")
world:add(%d, "Shield", {hp = 7})
world:spawn{Shield = {hp = 2}}
]], host)})
        assert(mods:load(a))
        assert(mods:load(b))
        local own = world_bytes(mods, "b")
        -- a goes: the Shield b uses stays, and is b's now (its value on the host's entity
        -- counts against b's world_memory)
        assert(mods:unload("a"))
        assert.are.equal(7, w:get(host, "Shield").hp)
        assert.is_true(world_bytes(mods, "b") > own)
        -- a failed reload of b keeps it as it was
        M.write(dir, "b/init.lua", "error('broken')")
        assert.is_nil((mods:reload("b")))
        assert.are.equal(7, w:get(host, "Shield").hp)
        -- b goes: nothing of it stays (before, the value stayed on the host's entity for good,
        -- counted against no mod, since neither unload took it as its own)
        assert(mods:unload("b"))
        assert.is_false(w:has(host, "Shield"))
        assert.are.equal(0, w:query{"Shield"}:count())
        assert.are.equal(2, w:count())
    end)

    it("sharing a component: an unload keeping the registrar's entities hands it on all the same", function()
        local w, mods = M.host()
        local host = w:spawn{Position = {x = 0, y = 0}}
        local dir = M.folder()
        local a = M.folder_mod(dir, "a", {name = "a", version = "1"}, {["init.lua"] = [[
world:component("Shield", "int32_t hp;")
world:component("Mark", "int32_t n;")
world:spawn{Shield = {hp = 3}, Mark = {n = 1}}
]]})
        local b = M.folder_mod(dir, "b", {name = "b", version = "1"}, {["init.lua"] = string.format([[
world:component("Shield", "int32_t hp;")
world:add(%d, "Shield", {hp = 7})
]], host)})
        assert(mods:load(a))
        assert(mods:load(b))
        local own = world_bytes(mods, "b")
        -- a goes keeping its entity: Shield is b's now, its values on the host's entity and on
        -- a's kept one count against b's world_memory (before, against no mod's)
        assert(mods:unload("a", {keep = true}))
        assert.are.equal(7, w:get(host, "Shield").hp)
        assert.are.equal(2, w:query{"Shield"}:count())
        assert.is_true(world_bytes(mods, "b") > own)
        -- b goes: Shield goes with it, off a's kept entity too; a's own Mark stays there
        assert(mods:unload("b"))
        assert.is_false(w:has(host, "Shield"))
        assert.are.equal(0, w:query{"Shield"}:count())
        assert.are.equal(1, w:query{"Mark"}:count())
        assert.are.equal(3, w:count())
    end)

    it("sharing a component the host declared too: the host's values stay through both unloads", function()
        local w, mods = M.host()
        local dir = M.folder()
        local text = 'world:component("Shield", "int32_t hp;")\nworld:spawn{Shield = {hp = 1}}'
        assert(mods:load(M.folder_mod(dir, "a", {name = "a", version = "1"}, {["init.lua"] = text})))
        w:component("Shield", "int32_t hp;")
        local mine = w:spawn{Shield = {hp = 9}}
        assert(mods:load(M.folder_mod(dir, "b", {name = "b", version = "1"}, {["init.lua"] = text})))
        assert(mods:unload("a"))
        assert(mods:unload("b"))
        assert.are.equal(9, w:get(mine, "Shield").hp)
        assert.are.equal(1, w:query{"Shield"}:count())
    end)

    it("calling down a chain of 60 mods, each nesting C calls, fail with a message instead of crashing", function()
        local n = 60
        local w, mods, dir = chain(n, 90)
        -- each state stops at its own limit of nested C calls (200 under Lua 5.4); 60 of them together passed the
        -- host's C stack and the process died
        local top = M.folder_mod(dir, "top", {name = "top", version = "1", depends = {"c" .. n}},
                                 {["init.lua"] = 'result = {pcall(mod.import("c' .. n .. '").f)}\n' ..
                                                 'print(tostring(result[1]) .. " " .. tostring(result[2]))'})
        assert(mods:load(top))
        local line = mods:log("top")[1]
        assert.are.equal("false mod 'c" .. n .. "': DEEP", line)
        -- the mods are whole and a short chain still runs
        short_chain_runs(w, mods, dir)
    end)

    it("calling down a chain of 100 mods, each nesting coroutines, fail with a message instead of crashing", function()
        -- a resume nests C calls as a callback does (Lua 5.4's limit of 200 counts them; LuaJIT's
        -- coroutines run on the same C stack): the check before a call into a state must see them
        local n = 100
        local w, mods, dir = chain(n, 95, "coroutine")
        -- from 1000 coroutines deep in the caller's own state too
        local top = M.folder_mod(dir, "top", {name = "top", version = "1", depends = {"c" .. n}},
                                 {["init.lua"] = 'local f = mod.import("c' .. n .. '").f\n' .. [[
local function deep(k) if k == 0 then return f() end return coroutine.wrap(function() return deep(k - 1) end)() end
for _, depth in ipairs({0, 1000}) do
    local ok, err = pcall(deep, depth)
    print(tostring(ok) .. " " .. tostring(err):sub(-60))
end]]})
        assert(mods:load(top))
        local log = mods:log("top")
        -- Lua 5.4 runs out of C stack part way down (LuaJIT's resumes take little: it may get to the end)
        local deep_end = log[1]:find("^false mod 'c" .. n .. "': DEEP$") -- (no chunk:line: of the caller's)
        assert.truthy(deep_end or (jit and log[1] == "true " .. n), log[1])
        -- 1000 deep in its own state: Lua 5.4 stops at its limit of nested C calls, LuaJIT goes on
        assert.truthy(log[2]:find("C stack overflow", 1, true) or log[2]:find("': DEEP", 1, true) or
                      (jit and log[2] == "true " .. n), log[2])
        short_chain_runs(w, mods, dir)
    end)

    it("on a stack of 512 KiB, 3 mods each nesting 190 string.format calls are refused, not a crash", function()
        -- one state's own nesting (190 __tostring calls through string.format, short of its limit of C calls) takes
        -- some 200 to 330 KiB of C stack: a call into a state must find that much left whatever the thread's size;
        -- a quarter of the stack (128 KiB) was let through and the process ran out of stack
        local dir = M.folder()
        local paths = {}
        for i = 1, 3 do
            local prev = i > 1 and string.format('mod.import("f%d").f', i - 1) or "function() return 0 end"
            paths[i] = M.folder_mod(dir, "f" .. i, {name = "f" .. i, version = "1",
                                                    depends = i > 1 and {"f" .. (i - 1)} or nil},
                                    {["init.lua"] = string.format([[
local prev = %s
local mt = {}
mt.__tostring = function(t)
    if t.n > 0 then return string.format("%%s", setmetatable({n = t.n - 1}, mt)) end
    local ok, v = pcall(prev)
    if ok then return tostring(v + 1) end
    error(v:find("nest too deep", 1, true) and "DEEP" or v, 0)
end
mod.exports.f = function() return tonumber(tostring(setmetatable({n = 190}, mt))) end
]], prev)})
        end
        local top = M.folder_mod(dir, "top", {name = "top", version = "1", depends = {"f3"}},
                                 {["init.lua"] = 'local ok, v = pcall(mod.import("f3").f)\n' ..
                                                 'print(tostring(ok) .. " " .. tostring(v))'})
        paths[4] = top
        local code = string.format([[
local kiln = require "kiln"
local mods = kiln.mods(kiln.world())
for _, path in ipairs({%q, %q, %q, %q}) do assert(mods:load(path)) end
print("top: " .. mods:log("top")[1])
]], paths[1], paths[2], paths[3], paths[4])
        local ok, out = H.run_isolated(code, 60, 512)
        assert.is_true(ok, out)
        assert.is_truthy(out:find("top: false mod 'f3': ", 1, true), out)
        assert.is_truthy(out:find("DEEP", 1, true) or out:find("nest too deep", 1, true), out)
    end)
end)
