-- mods_placeholders_spec.lua: mods building command buffers with placeholders they were not
-- handed: numbers crafted to look like one, another buffer's, the host's, stale ones, counts
-- past the mod's limits. Each is refused with a clear error, the world exactly as it was.
local kiln = require "kiln"
local here = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
local M = dofile(here .. "mods_helpers.lua")

-- The mod's side: a Target component with entity fields and probe(label, f), which prints
-- "label|ok|message|count" for what f returned (or raised).
local PRELUDE = [[
world:component("Target", "entity who; entity also[2];")
local function probe(label, f, ...)
    local ok, a, b, c = pcall(f, ...)
    local accepted, message, count = true, nil, nil
    if not ok then accepted, message = false, a
    elseif a == nil and b ~= nil then accepted, message, count = false, b, c end -- apply's nil, message, count
    print(label .. "|" .. tostring(accepted) .. "|" .. tostring(message) .. "|" .. tostring(count))
end
]]

-- A host world (opts to kiln.mods; 100 entities per mod unless given), the mod loaded from
-- PRELUDE .. src. The world's hash must be what it was before the load, and two frames must
-- run clean. Returns the mod's printed lines as {label = {ok, message, count}}. A mod that
-- spawns and despawns entities of its own spends their slots' generations, which the hash
-- sees: spends(world) then does the same on a second host world, whose hash is the one to match.
local function attack(src, opts, spends)
    opts = opts or {}
    opts.instructions = opts.instructions or 2000000
    opts.entities = opts.entities or 100
    opts.memory = opts.memory or 4 * 1024 * 1024
    local dir = M.folder()
    local w, mods, host = M.host(opts)
    local before, count = w:hash(), #w:entities()
    if spends then
        local twin = M.host(opts)
        spends(twin)
        before = twin:hash()
    end
    M.write(dir, "forger.lua", PRELUDE .. src)
    local ok, err = mods:load(dir .. "/forger.lua")
    assert(ok, err)
    assert.are.equal(count, #w:entities())
    assert.are.equal(before, w:hash(), "the world changed")
    local runs = host.runs
    assert.are.same({}, M.frames(w, 2))
    assert.are.equal(runs + 2, host.runs)
    local out = {}
    for _, line in ipairs(mods:log("forger")) do
        local label, okv, msg, n = line:match("^(.-)|(.-)|(.-)|(.-)$")
        assert.is_not_nil(label, line)
        assert.is_nil(out[label], "probe " .. label .. " printed twice")
        out[label] = {ok = okv == "true", message = msg, count = n}
    end
    return out, w
end

-- Probe label failed (raised, or an apply returned nil) with a message holding each of ...;
-- an apply must also have applied nothing.
local function refused(out, label, ...)
    local r = out[label]
    assert.is_not_nil(r, "probe " .. label .. " did not run")
    assert.is_false(r.ok, label .. " was accepted")
    for i = 1, select("#", ...) do
        assert.matches(select(i, ...), r.message, 1, true)
    end
    if r.count ~= "nil" then assert.are.equal("0", r.count, label .. " applied commands") end
end

describe("a mod's command buffers", function()
    after_each(M.cleanup)

    it("refuse numbers crafted as placeholders when they are recorded", function()
        local out = attack [[
local cmd = kiln.commands()
local forged = {-1, -2, -16777217, -16777216 * 5 - 3, -(2 ^ 52), -0x7fffffffffffffff, math.mininteger or -2 ^ 63}
for i, v in ipairs(forged) do
    probe("despawn" .. i, cmd.despawn, cmd, v)
    probe("add" .. i, cmd.add, cmd, v, "Position", {})
    probe("set" .. i, cmd.set, cmd, v, "Position", {})
    probe("remove" .. i, cmd.remove, cmd, v, "Position")
    probe("resolved" .. i, cmd.resolved, cmd, v)
end
probe("count", function() return cmd:count() == 0 or error("recorded " .. cmd:count()) end)
]]
        for i = 1, 7 do
            for _, op in ipairs{"despawn", "add", "set", "remove"} do
                refused(out, op .. i, "to 'commands:" .. op .. "'")
                assert.is_truthy(out[op .. i].message:find("is not from this buffer's current batch", 1, true) or
                    out[op .. i].message:find("is neither an entity nor a placeholder", 1, true))
            end
            refused(out, "resolved" .. i, "to 'commands:resolved'")
        end
        assert.is_true(out.count.ok)
    end)

    it("refuse a whole apply whose values hold a crafted placeholder, spawning nothing", function()
        local out = attack [[
local cmd = kiln.commands()
local p = cmd:spawn{Position = {x = 1}}
cmd:spawn{Target = {who = p}}           -- spawn 2 names spawn 1: fine
cmd:spawn{Target = {who = p - 3}}       -- spawn 3 names spawn 4, recorded next: comes later
cmd:spawn{Position = {}}
probe("later", cmd.apply, cmd, world)
probe("kept", function() return cmd:count() == 4 or error("count " .. cmd:count()) end)
cmd:clear()
local q = cmd:spawn{Position = {}}
cmd:spawn{Target = {also = {q, q - 99}}} -- never handed out
probe("unknown", cmd.apply, cmd, world)
cmd:clear()
local cur = cmd:spawn{Position = {}}
cmd:spawn{Target = {who = cur + 0x200000}} -- the same spawn of the batch before (q's)
probe("batch", cmd.apply, cmd, world)
cmd:clear()
local r = cmd:spawn{}
cmd:spawn{Target = {who = r - 0xfffff + 1}} -- the batch's last spawn number
probe("huge number", cmd.apply, cmd, world)
]]
        refused(out, "later", "commands:apply: command 3 (spawn) on entity (new): field 'who' of Target holds placeholder",
            "whose spawn comes later in the buffer")
        assert.is_true(out.kept.ok)
        refused(out, "unknown", "command 2 (spawn)", "field 'also' of Target holds placeholder")
        refused(out, "batch", "command 2 (spawn)", "which is not from this buffer's current batch")
        refused(out, "huge number", "command 2 (spawn)", "field 'who' of Target holds placeholder")
    end)

    it("refuse a placeholder of another of the mod's buffers", function()
        local out = attack [[
local a, b = kiln.commands(), kiln.commands()
local pa = a:spawn{Position = {}}
local pb = b:spawn{Position = {}}
probe("differ", function() return pa ~= pb or error("two buffers handed out " .. pa) end)
probe("despawn", b.despawn, b, pa)
probe("add", b.add, b, pa, "Position", {x = 5})
b:spawn{Target = {who = pa}}
probe("value", b.apply, b, world)
probe("resolved", b.resolved, b, pa)
]]
        assert.is_true(out.differ.ok)
        refused(out, "despawn", "bad argument #1 to 'commands:despawn'", "is not from this buffer's current batch")
        refused(out, "add", "bad argument #1 to 'commands:add'", "is not from this buffer's current batch")
        refused(out, "value", "command 2 (spawn)", "which is not from this buffer's current batch")
        refused(out, "resolved", "is not a placeholder of this batch")
    end)

    it("refuse a placeholder of a host's buffer, handed over as a number", function()
        local hcmd = kiln.commands()
        local hp = hcmd:spawn{Position = {}}
        local out = attack([[
local cmd = kiln.commands()
local mine = cmd:spawn{Position = {}}
probe("differ", function() return mine ~= host_p or error("the mod's placeholder is the host's: " .. mine) end)
probe("despawn", cmd.despawn, cmd, host_p)
probe("set", cmd.set, cmd, host_p, "Position", {})
cmd:spawn{Target = {who = host_p}}
probe("value", cmd.apply, cmd, world)
]], {allow = {host_p = hp}})
        assert.is_true(out.differ.ok)
        refused(out, "despawn", "is not from this buffer's current batch")
        refused(out, "set", "is not from this buffer's current batch")
        refused(out, "value", "command 2 (spawn)", "which is not from this buffer's current batch")
        -- and the host's buffer still works, its placeholder its own
        local w = kiln.world()
        w:component("Position", "float x, y;")
        assert.are.equal(1, hcmd:apply(w))
        assert.is_true(w:is_alive(hcmd:resolved(hp)))
    end)

    it("take their tags from the mods' space: no mod's placeholder is the host's or another mod's", function()
        local tag_of = function(p) return math.floor(-p / 2 ^ 20) end
        local before = tag_of(kiln.commands():spawn())
        local src = [[
local cmd = kiln.commands()
probe("tag", function() return nil, tostring(cmd:spawn{Position = {}}) end)
cmd:clear()
]]
        local first = tag_of(tonumber(attack(src).tag.message))
        M.cleanup()
        local second = tag_of(tonumber(attack(src).tag.message)) -- another mod state
        local after = tag_of(kiln.commands():spawn())
        assert.is_true(first < second, ("mod %d, then mod %d"):format(first, second))
        assert.are.same({1, 0, 0, 1}, {before % 2, first % 2, second % 2, after % 2}, "host odd, mods even")
        assert.are.equal(before + 2, after, "the mods took none of the host's")
        -- the mods' counter is the host's registry's, apart from the host's own: at the host's
        -- last tag a mod's first spawn takes the mods' next; at the mods' last, their first
        local reg = debug.getregistry()
        local saved, saved_mods = reg["kiln.tags"], reg["kiln.mod_tags"]
        reg["kiln.tags"], reg["kiln.mod_tags"] = 2 ^ 33 - 1, 40
        local ok, out = pcall(attack, src)
        local ok2, out2
        if ok then
            reg["kiln.mod_tags"] = 2 ^ 33 - 2
            ok2, out2 = pcall(attack, src)
        end
        reg["kiln.tags"], reg["kiln.mod_tags"] = saved, saved_mods
        assert(ok, out)
        assert(ok2, out2)
        assert.are.equal(42, tag_of(tonumber(out.tag.message)))
        assert.are.equal(2, tag_of(tonumber(out2.tag.message)))
    end)

    it("refuse placeholders gone stale after an apply", function()
        local out, w = attack([[
local cmd = kiln.commands()
local p = cmd:spawn{Position = {x = 4}}
probe("first", cmd.apply, cmd, world)
local made = cmd:resolved(p)
probe("despawn", cmd.despawn, cmd, p)
probe("add", cmd.add, cmd, p, "Target", {})
cmd:spawn{Target = {who = p}}
probe("value", cmd.apply, cmd, world)
probe("resolved", cmd.resolved, cmd, p)
cmd:clear()
world:despawn(made)
]], nil, function(w) w:despawn(w:spawn{Position = {x = 4}}) end)
        assert.is_true(out.first.ok)
        refused(out, "despawn", "is not from this buffer's current batch")
        refused(out, "add", "is not from this buffer's current batch")
        refused(out, "value", "command 1 (spawn)", "which is not from this buffer's current batch")
        refused(out, "resolved", "is not a placeholder of this batch")
        assert.is_not_nil(w)
    end)

    it("refuse a buffer spawning more than the mod may, before anything lands", function()
        local out = attack([[
local cmd = kiln.commands()
local mine = world:spawn{Position = {}}
for i = 1, 6 do cmd:spawn{Position = {x = i}} end
probe("over", cmd.apply, cmd, world)
probe("kept", function() return cmd:count() == 6 or error("count " .. cmd:count()) end)
cmd:clear()
local ps = {}
for i = 1, 4 do ps[i] = cmd:spawn{Position = {x = i}} end
probe("within", cmd.apply, cmd, world)
for i = 1, 4 do world:despawn(cmd:resolved(ps[i])) end
world:despawn(mine)
]], {entities = 5}, function(w)
            local mine, ps = w:spawn{Position = {}}, {}
            for i = 1, 4 do ps[i] = w:spawn{Position = {x = i}} end
            for i = 1, 4 do w:despawn(ps[i]) end
            w:despawn(mine)
        end)
        refused(out, "over", "commands:apply: the buffer spawns 6 entities; the mod may spawn 4 more")
        assert.is_true(out.kept.ok)
        assert.is_true(out.within.ok)
    end)

    it("stop a mod recording without end at its budget, the world as it was", function()
        local dir = M.folder()
        local w, mods = M.host{instructions = 200000, memory = 1024 * 1024, entities = 100}
        local before = w:hash()
        M.write(dir, "flood.lua", [[
local cmd = kiln.commands()
for i = 1, 2 ^ 30 do cmd:spawn{Position = {x = i}} end
]])
        local ok, err = mods:load(dir .. "/flood.lua")
        assert.is_nil(ok)
        assert.matches("mod 'flood'", err, 1, true)
        assert.is_truthy(err:find("budget", 1, true) or err:find("memory", 1, true), err)
        assert.are.equal(before, w:hash())
        assert.are.same({}, M.frames(w, 1))
    end)
end)
