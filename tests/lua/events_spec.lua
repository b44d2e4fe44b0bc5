-- events_spec.lua: event types from schemas, world:emit and world:events from Lua.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

describe("events", function()
    local function list(w, name, field)
        local out = {}
        for ev in w:events(name) do out[#out + 1] = field and ev[field] or ev end
        return out
    end

    it("define with a schema; the same schema gives the same id, another raises", function()
        local w = H.world()
        local id = w:event("Hit", "entity target; int32_t damage;")
        assert.are.equal(id, w:event("Hit", "entity target; int32_t damage;"))
        H.raises(function() w:event("Hit", "float damage;") end, "world:event", "Hit")
        H.raises(function() w:event("Bad", "lua") end, "world:event", "Bad")
        H.raises(function() w:event("Bad", "nonsense x;") end, "world:event", "Bad")
    end)

    it("are read over this frame and the previous one, and gone two progress calls later", function()
        local w = H.world()
        w:event("Hit", "entity target; int32_t damage;")
        local e = w:spawn()
        w:emit("Hit", {target = e, damage = 5})
        w:emit("Hit", {damage = 7})
        local now = list(w, "Hit")
        assert.are.same({{target = e, damage = 5}, {target = 0, damage = 7}}, now)
        w:progress(0)
        assert.are.same({5, 7}, list(w, "Hit", "damage"))
        w:emit("Hit", {damage = 9})
        assert.are.same({5, 7, 9}, list(w, "Hit", "damage"))
        w:progress(0)
        assert.are.same({9}, list(w, "Hit", "damage"))
        w:progress(0)
        assert.are.same({}, list(w, "Hit", "damage"))
    end)

    it("hand out copies", function()
        local w = H.world()
        w:event("Hit", "int32_t damage;")
        w:emit("Hit", {damage = 1})
        for ev in w:events("Hit") do ev.damage = 100 end
        assert.are.same({1}, list(w, "Hit", "damage"))
    end)

    it("tag events carry no fields", function()
        local w = H.world()
        w:event("Ping")
        w:emit("Ping", nil)
        assert.are.equal(1, #list(w, "Ping"))
        H.raises(function() w:emit("Ping", {a = 1}) end, "world:emit", "Ping")
        assert.are.equal(1, #list(w, "Ping"))
    end)

    it("emit(name) without a value emits a zeroed event", function()
        local w = H.world()
        w:event("Ping")
        w:event("Hit", "int32_t damage;")
        w:emit("Ping")
        w:emit("Hit")
        assert.are.equal(1, #list(w, "Ping"))
        assert.are.same({0}, list(w, "Hit", "damage"))
    end)

    it("bad emits raise naming the event or field and emit nothing", function()
        local w = H.world()
        w:event("Hit", "int32_t damage;")
        w:emit("Hit", {damage = 1})
        H.raises(function() w:emit("Nope", {}) end, "world:emit", "Nope")
        H.raises(function() w:events("Nope") end, "world:events", "Nope")
        H.raises(function() w:emit("Hit", {damage = "x"}) end, "world:emit", "'damage'", "Hit")
        H.raises(function() w:emit("Hit", {damage = 2^40}) end, "world:emit", "'damage'", "Hit")
        H.raises(function() w:emit("Hit", {dmg = 1}) end, "world:emit", "'dmg'", "Hit")
        H.raises(function() w:emit("Hit", 5) end, "world:emit", "Hit")
        assert.are.same({1}, list(w, "Hit", "damage"))
    end)
end)

