-- fuzz_spec.lua: 100,000 random, often malformed calls across the whole kiln Lua API with a
-- fixed seed: no crash, no hang, and after every error the world still agrees with a model.
local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
package.path = here .. "?.lua;" .. package.path
local driver = require "fuzz.driver"

local SEED, CALLS = 12345, 100000

-- Every entry point of the brief, and whether the run must see it succeed, raise, or both.
local MUST_SUCCEED_AND_RAISE = {
    "kiln.world", "world:component", "world:spawn", "world:despawn", "world:is_alive", "world:count",
    "world:add", "world:remove", "world:has", "world:get", "world:set", "world:tick",
    "world:advance_tick", "world:changed_tick", "world:query", "world:system", "world:progress",
    "world:systems", "world:enable", "world:set_parent", "world:children", "world:despawn_recursive",
    "world:event", "world:emit", "world:events", "world:resource", "world:close", "world:entities",
    "q:each", "q:bulk", "q:count", "q:entities", "commands:spawn", "commands:add", "commands:set",
    "commands:remove", "commands:despawn", "commands:apply", "commands:clear", "commands:resolved",
    "view write",
}
local MUST_SUCCEED = {"kiln.commands", "world:failures", "world:max_failures"}

-- Situations the run must reach: a fuzzer that never gets there tests nothing there.
local MUST_SEE = {
    "calls inside q:each", "calls inside a run system", "calls inside an each system",
    "break out of q:each", "raise inside q:each", "raise inside q:bulk", "bad view value ends q:each",
    "raise inside a run system", "raise inside an each system", "progress reports failures",
    "commands:apply stops at a failing record", "calls on a closed world", "wrong object as self",
    "coroutine closed inside a loop", "finalizers left to the collector",
}

describe("random calls across the whole Lua API (seed " .. SEED .. ")", function()
    local s

    setup(function()
        s = driver.run{seed = SEED, calls = CALLS}
        print(string.format("\nfuzz: %d calls, %d errors caught, %d checker calls (%d full checks, %d after-error "
                                .. "checks), %d episodes, %.1f s", s.calls, s.errors, s.check_calls, s.full_checks,
                            s.quick_checks, s.episodes, s.seconds))
        local steered = {}
        for what, n in pairs(s.known) do steered[#steered + 1] = string.format("%s (%d)", what, n) end
        table.sort(steered)
        if #steered > 0 then print("fuzz: steered around: " .. table.concat(steered, "; ")) end
    end)

    it("makes at least 100,000 calls without a crash or a hang, and the worlds agree with the model", function()
        assert.is_true(s.calls >= CALLS, "only " .. s.calls .. " calls")
        assert.is_true(s.errors > CALLS / 10, "too few calls raised: " .. s.errors)
        assert.are.equal(0, s.failure_count,
                         s.failure_count .. " failures, the first ones:\n" .. table.concat(s.failures, "\n"))
    end)

    it("reaches every method, both succeeding and raising", function()
        local missing = {}
        for _, name in ipairs(MUST_SUCCEED_AND_RAISE) do
            if not s.ok_by_method[name] then missing[#missing + 1] = name .. " (never succeeded)" end
            if not s.err_by_method[name] then missing[#missing + 1] = name .. " (never raised)" end
        end
        for _, name in ipairs(MUST_SUCCEED) do
            if not s.ok_by_method[name] then missing[#missing + 1] = name .. " (never succeeded)" end
        end
        assert.are.same({}, missing)
    end)

    it("calls inside loops, systems and coroutines, raising and breaking out of them", function()
        local missing = {}
        for _, what in ipairs(MUST_SEE) do
            if not s.seen[what] then missing[#missing + 1] = what end
        end
        assert.are.same({}, missing)
    end)

    it("raises only messages that name the method, for every misuse of World, Query and Commands", function()
        assert.are.same({}, s.unnamed)
        assert.are.same({}, s.unnamed_tools) -- the Lua layer's tools name themselves too
    end)

    it("knows every method of World, Query and Commands", function()
        -- a method added to a class after this test was written is not called until the
        -- fuzzer learns it (an operation, and its name in D.run's lists in fuzz/driver.lua)
        assert.are.same({}, s.unfuzzed, "methods the fuzzer does not call yet")
    end)
end)
