-- mods_examples_spec.lua: the mods of examples/mods through the mod manager, as the sample
-- game loads them: shield_hud reads shield's exports, beacons spawns entities of its own and
-- is reloaded and unloaded.
local kiln = require "kiln"

local root = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "../../"

-- A world with what the mods expect of the game: Ship (with incoming damage), the Collision
-- event, LocalTransform (a world with transforms), and systems named impacts and hull.
local function game_world()
    local w = kiln.world{transforms = true}
    w:component("Ship", "float hull; float incoming;")
    w:event("Collision", "entity ship; float damage; uint64_t tick;")
    w:system{name = "impacts", writes = {"Ship"}, run = function() end}
    w:system{name = "hull", writes = {"Ship"}, after = {"impacts"}, run = function() end}
    local lines = {}
    local mods = kiln.mods(w, {seed = 1, allow = {game = {rate = 60, field_size = 4096}},
                               log = function(mod, line) lines[#lines + 1] = line end})
    return w, mods, lines
end

local function system_names(w)
    local names = {}
    for _, s in ipairs(w:systems()) do names[#names + 1] = s.name end
    return table.concat(names, " ")
end

describe("the example mods", function()
    it("load from their folder in dependency order and cooperate through exports", function()
        local w, mods, lines = game_world()
        local loaded, failed = mods:load_dir(root .. "examples/mods")
        assert.are.same({"beacons", "shield", "shield_hud"}, loaded)
        assert.are.same({}, failed)
        assert.are.equal("[shield_hud] loaded: watching shields of 40", lines[#lines])
        local ship = w:spawn{Ship = {hull = 100, incoming = 0}}
        for _ = 1, 3 * 60 do assert.is_true((w:progress(1 / 60))) end
        assert.truthy(w:get(ship, "Shield"), "shield fitted the ship")
        local hud
        for _, l in ipairs(lines) do hud = l:match("^%[shield_hud%] 3s: .*") or hud end
        assert.are.equal("[shield_hud] 3s: 0 hits absorbed, 0 damage (0.0 full shields)", hud)
        local ok, err = mods:unload("shield")
        assert.is_nil(ok)
        assert.are.equal("mods:unload: mod 'shield_hud' depends on 'shield'; unload it first", err)
    end)

    it("let beacons be reloaded in place and unloaded with its entities", function()
        local w, mods = game_world()
        local info = assert(mods:load(root .. "examples/mods/beacons"))
        assert.are.equal(24, info.entities)
        assert.are.same({"Beacon"}, info.components)
        local before = system_names(w)
        local beacons = w:query{"Beacon"}
        for _ = 1, 30 do w:progress(1 / 60) end
        local phases = {}
        for e, b in beacons:each() do phases[e] = b.phase end
        info = assert(mods:reload("beacons"))
        assert.are.equal(24, info.entities)         -- kept, not spawned again
        assert.are.equal(before, system_names(w))   -- its system in the same place
        for e, b in beacons:each() do assert.are.equal(phases[e], b.phase) end
        w:progress(1 / 60)
        for e, b in beacons:each() do assert.is_true(b.phase ~= phases[e]) end -- the new code runs
        assert.is_true(mods:unload("beacons"))
        assert.are.equal(0, beacons:count())
        assert.are.equal(0, w:count())
        assert.is_nil(system_names(w):find("beacons_pulse"))
    end)
end)
