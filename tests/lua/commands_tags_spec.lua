-- commands_tags_spec.lua: the tags that name a batch's placeholders. A batch takes a tag when
-- it first spawns, from its Lua state's counter (the odd tags; its mods share the even ones),
-- so a tag comes back only after 2^32 - 1 batches: a placeholder of any other batch can only
-- be refused. Past the last tag the counter goes round instead of refusing to spawn
-- (mods_tags_spec.lua runs it there).
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

local SHIFT = 2 ^ 20
local LIMIT = 2 ^ 33 -- the state's tags run to LIMIT - 1, odd
local KEY = "kiln.tags" -- the registry's counter: the last tag handed out (lua/src/klua.h)

local function tag_of(p) return math.floor(-p / SHIFT) end
local function index_of(p) return -p % SHIFT end

-- Runs f with the state's counter set to value, then puts back what was there.
local function with_counter(value, f)
    local reg = debug.getregistry()
    local saved = reg[KEY]
    assert.are.equal("number", type(saved))
    reg[KEY] = value
    local ok, err = pcall(f)
    reg[KEY] = saved
    if not ok then error(err, 0) end
end

describe("placeholder tags", function()
    it("are taken by a batch's first spawn only, one counter for every buffer of the state", function()
        local w = H.world()
        local a, b = kiln.commands(), kiln.commands()
        local e = w:spawn{Position = {}}
        local p1 = a:spawn()
        local t = tag_of(p1)
        assert.are.equal(1, index_of(p1))
        assert.are.equal(t, debug.getregistry()[KEY])
        -- b records and applies a batch without a spawn: no tag taken
        b:add(e, "Velocity", {x = 1})
        assert.are.equal(1, b:apply(w))
        b:remove(e, "Velocity")
        assert.are.equal(1, b:apply(w))
        assert.are.equal(t, debug.getregistry()[KEY])
        local p2 = a:spawn()
        assert.are.equal(t, tag_of(p2), "the same batch, the same tag")
        assert.are.equal(2, index_of(p2))
        local q = b:spawn()
        assert.are.equal(1, t % 2, "the host state's tags are odd")
        assert.are.equal(t + 2, tag_of(q))
        assert.are.equal(2, a:apply(w))
        local p3 = a:spawn() -- a's next batch
        assert.are.equal(t + 4, tag_of(p3))
        -- kiln.commands() itself takes none
        for _ = 1, 10 do kiln.commands() end
        assert.are.equal(t + 6, tag_of(kiln.commands():spawn()))
    end)

    it("never repeat over many batches of many buffers", function()
        local w = H.world()
        local bufs = {kiln.commands(), kiln.commands(), kiln.commands()}
        local seen, last = {}, tag_of(kiln.commands():spawn())
        for round = 1, 400 do
            local cmd = bufs[round % 3 + 1]
            local p = cmd:spawn()
            local t = tag_of(p)
            assert.is_true(t > last, "tag " .. t .. " after " .. last)
            assert.is_nil(seen[p])
            seen[p], last = true, t
            if round % 2 == 0 then cmd:apply(w) else cmd:clear() end
        end
    end)

    it("go round past the last tag to the first, old placeholders refused", function()
        local w = H.world()
        local cmd = kiln.commands()
        with_counter(LIMIT - 3, function()
            local p = cmd:spawn{Position = {x = 1}}
            assert.are.equal(LIMIT - 1, tag_of(p))
            assert.are.equal(math.floor(p), p)
            assert.are.equal(-(2 ^ 53) + SHIFT - 1, p) -- exact: below 2^53
            assert.are.equal(1, cmd:apply(w))
            assert.is_true(w:is_alive(cmd:resolved(p)))
            local q = cmd:spawn{Position = {x = 2}}
            assert.are.equal(1, tag_of(q))
            assert.are.equal(-(SHIFT + 1), q)
            H.raises(function() cmd:resolved(p) end, "commands:resolved", "is not a placeholder of this batch")
            local other = kiln.commands()
            assert.are.equal(3, tag_of(other:spawn{Position = {}}))
            H.raises(function() other:despawn(q) end, "is not from this buffer's current batch")
            assert.are.equal(1, cmd:apply(w))
            assert.are.equal(1, other:apply(w))
            assert.is_true(w:is_alive(cmd:resolved(q)))
        end)
    end)

    it("refuse a counter changed through the debug library", function()
        -- not an integer, out of range, or a tag of the mods' space (even)
        for _, bad in ipairs({"seven", -1, 1.5, {}, LIMIT, LIMIT - 2, 4}) do
            local cmd = kiln.commands()
            with_counter(bad, function()
                H.raises(function() cmd:spawn() end, "commands:spawn", "changed through the debug library")
            end)
            assert.are.equal(0, cmd:count())
        end
    end)
end)

describe("a batch's spawns", function()
    it("stop at 2^20 - 1, refused with nothing recorded, and the buffer goes on once applied", function()
        local w = H.world()
        local cmd = kiln.commands()
        local first = cmd:spawn()
        for _ = 2, SHIFT - 1 do cmd:spawn() end
        assert.are.equal(SHIFT - 1, cmd:count())
        H.raises(function() cmd:spawn() end, "commands:spawn", "too many spawns in one batch", "apply the buffer first")
        assert.are.equal(SHIFT - 1, cmd:count())
        assert.are.equal(tag_of(first), tag_of(first - (SHIFT - 2)), "one batch, one tag")
        cmd:clear()
        local next = cmd:spawn{Position = {x = 1}}
        assert.are.equal(1, index_of(next))
        assert.are.equal(1, cmd:apply(w))
        assert.is_true(w:is_alive(cmd:resolved(next)))
    end)
end)
