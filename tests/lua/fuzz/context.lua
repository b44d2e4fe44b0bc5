-- fuzz/context.lua: the state of a fuzz run and the plumbing every operation calls through:
-- counted, protected calls, expectations, failures, and the situations a run has reached.
local N = require "fuzz.num"
local M = require "fuzz.model"

local X = {}

-- Patterns the fuzzer once steered around while they crashed (pending entries of fuzz_spec.lua).
-- None is left: every one runs, unless KILN_FUZZ_SAFE=1 asks to steer around them again.
local UNSAFE = os.getenv("KILN_FUZZ_SAFE") ~= "1"
-- KILN_FUZZ_TRACE=1 writes every call to stderr; KILN_FUZZ_PARANOID=1 checks everything after
-- every operation (slow), so the first operation that breaks an invariant is the one reported.
local TRACE = os.getenv("KILN_FUZZ_TRACE")
local PARANOID = os.getenv("KILN_FUZZ_PARANOID")

local S = {} -- the current run: stats, worlds, failures (emptied by X.reset)

local function fail(fmt, ...)
    local msg = string.format(fmt, ...)
    S.failure_count = S.failure_count + 1
    if #S.failures < 30 then
        S.failures[#S.failures + 1] = string.format("[call %d, op %s] %s", S.calls, S.op or "?", msg)
    end
end

-- Errors that come from the test's own values (functions and metamethods that raise) or
-- that the API documents without a method name.
local FOREIGN = {"fuzz-raise", "garbage function raised", "odd __", "attempt to use a closed world",
                 "attempt to use a query of a closed world"}

-- Known bugs the fuzzer steers around are counted here, so the report can say how often.
local function known(id)
    S.known[id] = (S.known[id] or 0) + 1
end

-- The Lua layer's tools (lua/kiln): their messages are collected apart.
local TOOLS = {["kiln.handle"] = true, ["kiln.entity"] = true, ["kiln.pretty"] = true, ["kiln.table_text"] = true,
               ["kiln.systems_text"] = true, ["q:format"] = true, ["world:inspect"] = true,
               ["world:schema"] = true}

-- Misuse must raise a message that names the method: collects the ones that do not (for
-- methods called by name; metamethods and view assignments have none).
local function note_message(method, msg)
    if not method:find("^[%a_.]+[:.][%a_]+$") then return end
    local short = method:match("[:.](.*)$")
    if msg:find(short, 1, true) then return end
    for _, f in ipairs(FOREIGN) do
        if msg:find(f, 1, true) then return end
    end
    local key = method .. ": " .. msg:gsub("[%d]+", "N"):sub(1, 100)
    local list = TOOLS[method] and S.unnamed_tools or S.unnamed
    if not list[key] then
        list[key] = true
        list[#list + 1] = key
    end
end

-- Calls through a function named like the method, so an argument error can name it as it
-- would in a script ("bad argument #1 to 'spawn'"), even when self is something else.
-- The wrapper holds f weakly: LuaJIT has no ephemerons, so a value of this weak-keyed cache
-- that led back to its key kept every function ever called (and the worlds they hold) alive.
local named = setmetatable({}, {__mode = "k"})
local WEAK_VALUES = {__mode = "v"}
local function named_function(method, f)
    local short = method:match("[:.]([%a_][%w_]*)$")
    if not short or type(f) ~= "function" then return f end
    local w = named[f]
    if not w then
        -- not a tail call: LuaJIT names no function a tail call reached
        w = assert(load("local t, pass = ...; return function(...) return pass(t." .. short .. "(...)) end"))(
            setmetatable({[short] = f}, WEAK_VALUES), function(...) return ... end)
        named[f] = w
    end
    return w
end

-- Calls f(...) under pcall, counting it; returns the packed results.
local function call(method, f, ...)
    S.calls = S.calls + 1
    if TRACE then
        local parts = {}
        for i = 1, select("#", ...) do parts[i] = M.describe((select(i, ...))) end
        io.stderr:write(string.format("%d %s %s%s(%s)\n", S.calls, S.op or "?", S.label and (S.label .. " ") or "",
                                      method, table.concat(parts, ", ")))
    end
    S.by_method[method] = (S.by_method[method] or 0) + 1
    local r = N.pack(pcall(named_function(method, f), ...))
    if r[1] then
        S.ok_by_method[method] = (S.ok_by_method[method] or 0) + 1
    else
        S.err_by_method[method] = (S.err_by_method[method] or 0) + 1
        S.errors = S.errors + 1
        if type(r[2]) ~= "string" then
            fail("%s raised a %s instead of a message", method, type(r[2]))
        else
            note_message(method, r[2])
        end
    end
    return r
end

-- Counts a situation the run should reach (checked by the spec: a fuzzer that never gets
-- somewhere tests nothing there).
local function note(what)
    S.seen[what] = (S.seen[what] or 0) + 1
end

-- Compares the outcome with the prediction (nil: either is fine).
local function expect(method, want, r, what)
    if want == nil or want == r[1] then return true end
    if want then
        fail("%s should have succeeded (%s) but raised: %s", method, what or "", tostring(r[2]))
    else
        fail("%s should have raised (%s) but succeeded", method, what or "")
    end
    return false
end

-- Checker calls go through here: they must never raise.
local function ccall(what, f, ...)
    S.check_calls = S.check_calls + 1
    local r = N.pack(pcall(f, ...))
    if not r[1] then
        fail("checker: %s raised: %s", what, tostring(r[2]))
        return nil
    end
    return N.unpack(r, 2, r.n)
end

X.S, X.ops = S, {} -- X.ops: every operation by name, filled by the fuzz.ops_* modules
X.UNSAFE, X.TRACE, X.PARANOID = UNSAFE, TRACE, PARANOID
X.fail, X.known, X.note, X.call, X.expect, X.ccall = fail, known, note, call, expect, ccall
X.run_nested = nil -- set by fuzz.driver: a few random operations inside a loop or a system
X.maybe_yield = nil -- set by fuzz.ops_loops

-- Empties the run state for a new run.
function X.reset()
    for k in pairs(S) do S[k] = nil end
    S.calls, S.errors, S.check_calls, S.failure_count = 0, 0, 0, 0
    S.failures, S.by_method, S.ok_by_method, S.err_by_method = {}, {}, {}, {}
    S.unnamed, S.unnamed_tools, S.known, S.seen, S.tools_used = {}, {}, {}, {}, {}
    S.quick_checks, S.full_checks, S.pending_error_checks = 0, 0, 0
    S.depth, S.extra_comps, S.episodes = 0, 0, 0
    S.loops, S.in_co, S.co_base = {}, false, 0
end

return X
