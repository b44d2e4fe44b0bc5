-- fuzz/run.lua: runs the fuzz body outside busted, for valgrind and for bug hunting:
--   LUA_CPATH='build/lua/?.so;;' lua5.4 tests/lua/fuzz/run.lua [calls] [seed]
local here = debug.getinfo(1, "S").source:match("^@(.*)/fuzz/run%.lua$") or "tests/lua"
package.path = here .. "/?.lua;" .. package.path
local driver = require "fuzz.driver"
local calls = tonumber(arg and arg[1]) or 100000
local seed = tonumber(arg and arg[2]) or 12345
local s = driver.run{calls = calls, seed = seed}
print(string.format("calls %d, errors caught %d, checker calls %d, full checks %d, %.1f s",
                    s.calls, s.errors, s.check_calls, s.full_checks, s.seconds))
local steered = {}
for what, n in pairs(s.known) do steered[#steered + 1] = string.format("  %s: %d", what, n) end
table.sort(steered)
if #steered > 0 then print("steered around:\n" .. table.concat(steered, "\n")) end
for _, f in ipairs(s.failures) do print("FAILURE " .. f) end
if s.failure_count > 0 then
    print(s.failure_count .. " failures")
    os.exit(1)
end
