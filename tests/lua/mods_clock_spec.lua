-- mods_clock_spec.lua: a mod's wall clock for a frame (opts.frame_milliseconds), shared by all
-- its system runs and the calls they make into other mods, beside the clock of one entry
-- (opts.milliseconds). Every folder made is removed at the end.
local kiln = require "kiln"
local M = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "mods_helpers.lua")

-- A mod of a reporter system (first, printing how many loop turns each spinner made in the
-- frame before) and n systems s1..sn, each spinning until a clock stops it.
local function spinners(n)
    local lines = {"local turns = {}", "local names = {}"}
    for k = 1, n do
        lines[#lines + 1] = ([[names[%d] = "s%d"; turns[%d] = 0
world:system{name = "s%d", run = function() turns[%d] = 0; while true do turns[%d] = turns[%d] + 1 end end}]])
            :format(k, k, k, k, k, k, k)
    end
    lines[#lines + 1] = [[world:system{name = "report", before = names, run = function()
    local out = {}
    for k = 1, #turns do out[k] = tostring(turns[k]) end
    print(table.concat(out, " "))
end}]]
    return table.concat(lines, "\n")
end

-- The failures (from M.frames) of mod name, by system name.
local function by_system(failures, name)
    local out = {}
    for _, f in ipairs(M.failures_of(failures, name)) do out[f.system] = f.message end
    return out
end

describe("a mod's clock for a frame", function()
    after_each(M.cleanup)

    it("is shared by all its systems: once spent, its later systems of the frame are refused", function()
        -- the clock was per entry: 8 systems of one mod each took their 50 ms, 400 ms a frame
        -- (with the defaults, 24 systems of a costly C call held one frame 6.6 s)
        -- (clocks of 200 and 400 ms, not 50 and 100: the mod's top level, on the clock of one
        -- entry, is legitimate work, and a loaded machine stretched one of 30 ms past it)
        local dir = M.folder()
        local w, mods = M.host{instructions = 1e11, frame_instructions = 1e13, milliseconds = 200,
                               frame_milliseconds = 400}
        assert(mods:load(M.write(dir, "spin.lua", spinners(8))))
        local t0 = os.clock()
        local failures = M.frames(w, 1)
        local spent = os.clock() - t0
        local failed = by_system(failures, "spin")
        local entry, frame = 0, 0
        for k = 1, 8 do
            local msg = failed["s" .. k]
            assert.truthy(msg, "s" .. k .. " did not fail")
            assert.are.equal(1, select(2, msg:gsub("^mod 'spin': ", "")), msg)
            if msg:find("system 's" .. k .. "' ran past its time limit of 200 ms", 1, true) then
                entry = entry + 1
            else
                local want = "system 's" .. k .. "' ran past what was left of its mod's 400 ms for this frame"
                assert.truthy(msg:find(want, 1, true), msg)
                frame = frame + 1
            end
        end
        -- the first took its 200 ms, the second at most what was left, the others nothing
        assert.is_true(entry >= 1 and entry <= 2, "entry " .. entry)
        assert.is_true(frame >= 6, "frame " .. frame)
        -- the clock is the subject, so the frame is timed, but only to see it ended: 8 endless
        -- loops under clocks of 400 ms of the wall, with slack for ASan and a loaded machine
        -- (which clock stopped each system, the bug, is what the messages above show)
        assert.is_true(spent < 2, "one frame took " .. spent .. " s of CPU")
        -- the next frame's clock is full again; its reporter shows the turns of the first:
        -- two systems spun, the refused ones stopped at their first instructions
        local again = by_system(M.frames(w, 1), "spin")
        local turns, spun = {}, 0
        local log = mods:log("spin") -- the first frame's line (all 0), then the second's
        assert.are.equal(2, #log)
        for n in log[2]:gmatch("%d+") do turns[#turns + 1] = tonumber(n) end
        assert.are.equal(8, #turns)
        for k = 1, 8 do
            if turns[k] > 1000 then spun = spun + 1 else assert.is_true(turns[k] <= 1, "s" .. k .. ": " .. turns[k]) end
        end
        assert.is_true(spun >= 1 and spun <= 2, "spun " .. spun .. ": " .. log[2])
        local first = 0
        for _, msg in pairs(again) do
            if msg:find("ran past its time limit of 200 ms", 1, true) then first = first + 1 end
        end
        assert.is_true(first >= 1, "no system of the second frame had its own 200 ms")
    end)

    it("charges a run the clock stopped what it ran, not its whole budget, to the frame's instructions", function()
        -- a run the clock stopped counted its whole budget: the mod's next systems of the frame
        -- were refused with the instructions message, though the clock was what ran out
        local dir = M.folder()
        local w, mods = M.host{instructions = 1e9, frame_instructions = 1e9 + 5e5, milliseconds = 200,
                               frame_milliseconds = -1}
        assert(mods:load(M.write(dir, "slow.lua", [[
world:system{name = "wait", run = function()
    local t = os.clock() -- a C call a loop turn: 200 ms of it is far fewer than 5e5 instructions
    while os.clock() - t < 5 do end
end}
world:system{name = "work", after = {"wait"}, run = function()
    local n = 0
    for i = 1, 3e5 do n = n + i end -- about 1e6 instructions
    print("work done")
end}
world:system{name = "spin", after = {"work"}, run = function() while true do end end}
]])))
        local t0 = os.clock()
        local failed = by_system(M.frames(w, 1), "slow")
        -- timed only to see the 200 ms clock stopped wait's 5 s of CPU (two runs of 200 ms of
        -- the wall take at most that of CPU: the slack is for ASan and a loaded machine)
        assert.is_true(os.clock() - t0 < 4, "the frame took " .. (os.clock() - t0) .. " s of CPU")
        assert.truthy(failed.wait and failed.wait:find("system 'wait' ran past its time limit of 200 ms", 1, true),
                      failed.wait)
        assert.is_nil(failed.work, failed.work)
        assert.are.same({"work done"}, mods:log("slow"))
        -- the last one still has most of the frame's instructions: its own clock stops it
        assert.truthy(failed.spin and failed.spin:find("system 'spin' ran past its time limit of 200 ms", 1, true),
                      failed.spin)
    end)

    it("counts the calls a system makes into another mod, and bounds them by what it has left", function()
        -- a call got a fresh time limit: a caller with 1 ms left held the frame for another
        -- full time limit of the callee
        local w, mods = M.host_with_folder_mods({
            {"slow", init = [[
mod.exports.spin = function() while true do end end
world:system{name = "own", run = function() print("own ran") end}
]]},
            {"caller", depends = {"slow"}, init = [[
local slow = mod.import("slow")
world:system{name = "calls", run = function() slow.spin() end}
world:system{name = "later", after = {"calls"}, run = function() print("later ran") end}
]]},
        }, {instructions = 1e11, frame_instructions = 1e13, milliseconds = 1000, frame_milliseconds = 60})
        local t0 = os.clock()
        local failures = M.frames(w, 1)
        -- timed only to see the call did not get the callee's fresh 1000 ms: the frame's 60 ms of
        -- the wall take at most that of CPU (the messages below say which clock stopped it)
        assert.is_true(os.clock() - t0 < 0.9, "the call ran " .. (os.clock() - t0) .. " s of CPU")
        local failed = by_system(failures, "caller")
        assert.truthy(failed.calls:find("a call into mod 'slow' ran past the time its caller had left", 1, true),
                      failed.calls)
        assert.truthy(failed.later:find("system 'later' ran past what was left of its mod's 60 ms for this frame", 1,
                                        true), failed.later)
        -- the callee's own clock for the frame is not touched
        assert.are.same({}, by_system(failures, "slow"))
        assert.are.same({"own ran"}, mods:log("slow"))
        assert.are.same({}, mods:log("caller"))
    end)

    it("leaves a mod's top level to the clock of one entry: loading is not a frame", function()
        local dir = M.folder()
        -- 30 ms of the processor is at least 30 ms of the clock, past the frame's 20; the
        -- entry's limit is far above what a loaded machine may stretch them to
        local w, mods = M.host{instructions = 1e11, frame_instructions = 1e13, milliseconds = 5000,
                               frame_milliseconds = 20}
        assert(mods:load(M.write(dir, "busy.lua", [[
local t = os.clock()
while os.clock() - t < 0.03 do end
world:system{name = "tick", run = function() print("tick") end}
]])))
        assert.are.same({}, M.frames(w, 2))
        assert.are.same({"tick", "tick"}, mods:log("busy"))
    end)

    it("leaves a well-behaved mod alone, frame after frame", function()
        -- 8 systems of 3 ms each: 24 ms of the processor a frame under a clock of 1000 (a
        -- loaded machine stretches them), 120 ms over 5 frames
        local lines = {}
        for k = 1, 8 do
            lines[k] = ([[world:system{name = "w%d", run = function()
    local t = os.clock()
    while os.clock() - t < 0.003 do end
    print("w%d")
end}]]):format(k, k)
        end
        local dir = M.folder()
        local w, mods = M.host{milliseconds = 500, frame_milliseconds = 1000}
        assert(mods:load(M.write(dir, "calm.lua", table.concat(lines, "\n"))))
        assert.are.same({}, M.frames(w, 5))
        assert.are.equal(40, #mods:log("calm"))
        assert.are.equal(0, M.info(mods, "calm").failures)
    end)

    it("is an option of -1 (none), 0 (the default: milliseconds) or a positive count", function()
        local w = kiln.world()
        for _, case in ipairs{
            {-2, "frame_milliseconds must be an integer of at least -1"},
            {1.5, "frame_milliseconds must be an integer of at least -1"},
            {"8", "frame_milliseconds must be an integer of at least -1"},
            {2 ^ 31, "frame_milliseconds must be at most 2147483647"},
        } do
            local ok, err = pcall(kiln.mods, w, {frame_milliseconds = case[1]})
            assert.is_false(ok)
            assert.truthy(err:find("bad argument #2 to 'kiln.mods' (" .. case[2] .. ")", 1, true), err)
        end
        for _, good in ipairs{-1, 0, 1, 2 ^ 31 - 1} do
            local mods = kiln.mods(kiln.world(), {frame_milliseconds = good})
            mods:close()
        end
    end)

    it("is milliseconds by default: with the defaults, a mod's whole frame is bounded by one second", function()
        local dir = M.folder()
        -- (300 ms, not 30: the top level's clock is the same, and a loaded machine stretched the
        -- load of these five systems past 30 ms of the wall)
        local w, mods = M.host{instructions = 1e11, frame_instructions = 1e13, milliseconds = 300}
        assert(mods:load(M.write(dir, "spin.lua", spinners(4))))
        local failed = by_system(M.frames(w, 1), "spin")
        local frame = 0
        for k = 1, 4 do
            if failed["s" .. k]:find("ran past what was left of its mod's 300 ms for this frame", 1, true) then
                frame = frame + 1
            end
        end
        assert.is_true(frame >= 3, failed.s4)
    end)

    it("is none when set to -1: the clock of one entry stays", function()
        local dir = M.folder()
        -- (200 ms, not 20: the top level is on the same clock; see above)
        local w, mods = M.host{instructions = 1e11, frame_instructions = 1e13, milliseconds = 200,
                               frame_milliseconds = -1}
        assert(mods:load(M.write(dir, "spin.lua", spinners(3))))
        local failed = by_system(M.frames(w, 1), "spin")
        for k = 1, 3 do
            assert.truthy(failed["s" .. k]:find("system 's" .. k .. "' ran past its time limit of 200 ms", 1, true),
                          failed["s" .. k])
        end
    end)
end)
