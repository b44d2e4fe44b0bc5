-- mods_indexes_spec.lua: mods that churn the links and names the world indexes (the children
-- and name indexes), looking each change up at once, in endless loops: each ends at its budget,
-- the host's frames go on, and the host's own links and names read as before.
local kiln = require "kiln"
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

describe("a hostile mod cannot stall the world's indexes", function()
    after_each(M.cleanup)

    -- Links set in place and renames among 4000 linked and named entities, each looked up
    -- at once, in an endless loop: a look-up catches the children and name indexes up on
    -- what changed (an index rebuilt per look-up made the loop's C work, which the budget
    -- does not count, take minutes), so the loop ends at the budget, and the host's own
    -- links and names read as before. (What the look-ups read of the indexes is counted, not
    -- timed, in tests/tools/test_mods_indexes.c, which can read the counters.)
    local CHURN = [[
local r1, r2, c = world:spawn{}, world:spawn{}, world:spawn{}
world:set_parent(c, r1)
world:name(c, "start")
for i = 1, 4000 do world:name(world:spawn{}, "kid" .. i) end -- named, and linked below
for _, e in ipairs(world:entities()) do
if e ~= r1 and e ~= r2 and e ~= c and world:name(e) and world:name(e):sub(1, 3) == "kid" then
    world:set_parent(e, r1)
end
end
local function churn(w, i)
w:set_parent(c, i %% 2 == 0 and r1 or r2)
local n = #w:children(r2) -- small: the answer's table costs the budget per child
w:name(c, "n" .. i)
local e = w:lookup("n" .. i)
end
%s]]
    local function host()
        local w = kiln.world{transforms = true}
        local root = w:spawn{}
        for _ = 1, 5 do w:set_parent(w:spawn{}, root) end
        w:name(root, "host_root")
        return w, root, kiln.mods(w, {instructions = 2000000})
    end
    local function intact(w, root)
        assert.are.equal(5, #w:children(root))
        assert.are.equal(root, w:lookup("host_root"))
    end

    it("at its top level, which fails at its budget, its entities undone", function()
        local w, root, mods = host()
        local dir = M.folder()
        M.write(dir, "churn.lua", CHURN:format("local i = 0\nwhile true do i = i + 1; churn(world, i) end"))
        local ok, err = mods:load(dir .. "/churn.lua")
        assert.is_nil(ok)
        -- its instruction budget stops it; on a loaded machine the wall clock may come first
        assert.is_truthy(err:match("^mods:load: mod 'churn'.*budget") or
                         err:match("^mods:load: mod 'churn'.*time limit"), err)
        assert.are.equal(6, #w:entities()) -- the host's root and its five
        intact(w, root)
        mods:close()
        w:close()
    end)

    it("in a system, which fails each frame (its budget, or its queued relinks), the frames going on", function()
        local w, root, mods = host()
        local dir = M.folder()
        M.write(dir, "churn.lua", CHURN:format([=[
world:system{name = "churn", writes = {"Parent", "Name"}, run = function(w)
local i = 0
while true do i = i + 1; churn(w, i) end
end}]=]))
        assert(mods:load(dir .. "/churn.lua"))
        local failures = M.frames(w, 3)
        assert.are.equal(3, #failures)
        for _, f in ipairs(failures) do -- the budget, or first the queued relinks' count
            assert.matches("mod 'churn'", f.message, 1, true)
            assert.is_truthy(f.message:find("ran past its budget", 1, true) or
                             f.message:find("may not reshape entities", 1, true), f.message)
        end
        intact(w, root)
        mods:close()
        w:close()
    end)
end)
