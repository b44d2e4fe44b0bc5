-- fuzz/driver.lua: drives random, often malformed calls through the whole kiln Lua API and
-- checks after each error (and regularly) that every world still agrees with its model.
local N = require "fuzz.num"
local kiln = require "kiln"
local X = require "fuzz.context"
local gen = require "fuzz.gen"
local M = require "fuzz.model"

local R = math.random
local chance, pick = gen.chance, gen.pick
local S, ops = X.S, X.ops
local UNSAFE, TRACE = X.UNSAFE, X.TRACE
local fail, known, note, call, expect, ccall = X.fail, X.known, X.note, X.call, X.expect, X.ccall
local W = require "fuzz.worlds"
local pick_entity, pick_comp, pick_fields, user_comp_names = W.pick_entity, W.pick_comp, W.pick_fields, W.user_comp_names
local valid_field_value, invalid_field_value, random_float = W.valid_field_value, W.invalid_field_value, W.random_float
local extras, other_world, access_ok, wcall = W.extras, W.other_world, W.access_ok, W.wcall
local C = require "fuzz.check"
local after_error, same_list = C.after_error, C.same_list
local full_check = C.full_check
require "fuzz.ops_world"
require "fuzz.ops_loops"
require "fuzz.ops_bulk"
require "fuzz.ops_systems"
require "fuzz.ops_commands"
require "fuzz.ops_persist"

local PARANOID = X.PARANOID
local new_world, method_tables = W.new_world, W.method_tables
local D = {}

---------------------------------------------------------------------------------------------
-- Nested contexts.
---------------------------------------------------------------------------------------------

local NESTED_OPS = {
    spawn = 10, despawn = 5, is_alive = 2, count = 1, add = 10, remove = 6, has = 4, get = 5,
    set = 10, changed_tick = 2, query = 1, each = 1.5, bulk = 1, qcount = 1, qentities = 0.5, set_parent = 2,
    children = 1, despawn_recursive = 1, emit = 2, events = 1, resource = 2, commands = 4,
    systems = 0.3, enable = 0.3, progress = 0.5, confused = 1, other_world = 2, system = 0.2,
    failures = 0.2, max_failures = 0.1, tools = 0.3, close_busy = 0.3, gc_bomb = 1,
    remove_system = 0.1, dropped = 0.2,
}

local function run_nested(m, n)
    for _ = 1, n do
        local name = gen.weighted(NESTED_OPS)
        if name == "other_world" then
            local o = other_world(m)
            if o ~= m and not o.closed and o.cur_sys == nil then
                local pick_op = gen.pick({"spawn", "add", "set", "get", "despawn", "each", "progress"})
                S.op = "nested " .. pick_op
                ops[pick_op](o)
            end
        else
            S.op = "nested " .. name
            ops[name](m)
        end
        X.maybe_yield()
    end
end

X.run_nested = run_nested

---------------------------------------------------------------------------------------------
-- The run.
---------------------------------------------------------------------------------------------

local TOP_OPS = {
    spawn = 9, despawn = 4, is_alive = 3, count = 1, entities = 1, add = 10, remove = 6, has = 5,
    get = 6, getter = 2, set = 10, tick = 1, advance_tick = 1, trim = 1, changed_tick = 3, query = 2, each = 4, bulk = 2,
    manual_each = 1, qcount = 1, qentities = 0.5, system = 1.2, progress = 3, systems = 0.5, enable = 0.6,
    set_parent = 3, children = 2, despawn_recursive = 1.5, define_event = 0.5, emit = 2,
    events = 1.5, resource = 3, component = 1, commands = 5, confused = 3, tostrings = 0.3,
    tools = 1, failures = 0.3, max_failures = 0.2, new_world = 0.2, coroutine = 1.5, gc_bomb = 2,
    remove_system = 0.4, instructions = 0.2, hash = 0.3, save_load = 0.4, snapshot_restore = 0.4, names_and_clone = 0.3, random_misuse = 0.2, prefab_defs = 0.2,
    scenes = 0.2, ffi_loops = 0.3, dropped = 0.3,
}

local function closed_world_round(m)
    -- every method of a closed world raises, and so does every method of its queries
    local W = m.world
    local names = {}
    for name in pairs(S.WM) do names[#names + 1] = name end
    table.sort(names)
    for _ = 1, 40 do
        local method = pick(names)
        local args = {}
        for i = 1, R(0, 3) do args[i] = pick({pick_entity(m), pick_comp(m), gen.garbage(extras())}) end
        local r = call("world:" .. method, S.WM[method], W, N.unpack(args, 1, 3))
        note("calls on a closed world")
        if method ~= "close" then
            if r[1] then fail("closed world: %s succeeded", method)
            elseif type(r[2]) == "string" and not r[2]:find("closed world", 1, true) and method ~= "component" then
                -- argument checks may come first for some methods; the world must still raise
            end
        end
    end
    for _, entry in ipairs(m.queries) do
        for _, method in ipairs({"each", "bulk", "count", "terms"}) do
            local r = call("q:" .. method, S.QM[method], entry.q, function() end)
            expect("q:" .. method .. " on a closed world", false, r)
        end
    end
    local r = call("commands:apply", S.CM.apply, S.commands, W)
    expect("commands:apply on a closed world", false, r)
end

-- opts: {seed, calls (at least this many), episode_calls}
function D.run(opts)
    opts = opts or {}
    math.randomseed(opts.seed or 12345)
    C.reset()
    X.reset()
    local t0 = os.clock()
    -- a closed world and one of its queries, for misuse
    local cw = kiln.world()
    cw:component("Pos", "float x, y;")
    S.closed_query = cw:query{"Pos"}
    cw:close()
    S.closed_world = cw
    S.WM, S.QM, S.CM, S.Wmt, S.Qmt, S.Cmt = method_tables(kiln.world())
    S.known_world_methods = {}
    for _, name in ipairs({"close", "component", "spawn", "despawn", "is_alive", "count", "entities", "add",
                           "remove", "has", "get", "getter", "set", "tick", "advance_tick", "trim", "changed_tick", "query",
                           "system", "progress", "systems", "enable", "set_parent", "children",
                           "despawn_recursive", "event", "emit", "events", "resource", "failures",
                           "max_failures", "components", "component_info", "stats", "inspect", "schema",
                           "remove_system", "instructions", "save", "load", "hash", "content_hash", "snapshot",
                           "restore", "name", "lookup", "clone", "seed", "random", "prefab", "instantiate",
                           "export", "dropped"}) do
        S.known_world_methods[name] = true
    end
    -- methods added after this test was written are reported, not called
    S.unfuzzed = {}
    local known_q = {each = true, bulk = true, count = true, entities = true, terms = true, format = true, each_ffi = true,
                     bulk_ffi = true}
    local known_c = {spawn = true, add = true, set = true, remove = true, despawn = true, apply = true,
                     clear = true, resolved = true, count = true}
    for _, group in ipairs({{"world:", S.WM, S.known_world_methods}, {"q:", S.QM, known_q}, {"commands:", S.CM, known_c}}) do
        for name in pairs(group[2]) do
            if not group[3][name] then S.unfuzzed[#S.unfuzzed + 1] = group[1] .. name end
        end
    end
    table.sort(S.unfuzzed)
    local target = opts.calls or 100000
    local episode_calls = opts.episode_calls or 4000
    -- a hang shows up as a Lua-side instruction budget running out
    local budget = 0
    local old_hook = N.pack(debug.gethook())
    debug.sethook(function()
        budget = budget + 1
        if budget > 4000 then
            budget = 0
            fail("an operation ran for more than 4e9 instructions: a hang")
            error("fuzz watchdog", 0)
        end
    end, "", 1000000)
    while S.calls < target do
        S.episodes = S.episodes + 1
        S.extra_comps = 0
        local A = new_world("A", pick({false, {max_failures = 2}, {workers = 1}, {max_failures = 1, workers = 2}}) or nil)
        local B = new_world("B", nil)
        S.worlds = {A, B}
        S.commands = call("kiln.commands", kiln.commands)[2]
        S.cmd_model = {records = {}, spawns = 0, complete = false, resolved = {}, batch = nil}
        local stop = math.min(target, S.calls + episode_calls)
        local ops_done = 0
        while S.calls < stop do
            budget = 0
            local m = chance(0.85) and A or B
            -- keep the population between a handful and a few dozen
            local name = gen.weighted(TOP_OPS)
            if m:count() > 60 and (name == "spawn") then name = "despawn_recursive" end
            if m:count() < 5 and chance(0.5) then name = "spawn" end
            S.op = name
            ops[name](m)
            ops_done = ops_done + 1
            if PARANOID then
                full_check(A, "paranoid after " .. name)
                full_check(B, "paranoid after " .. name)
                if S.failure_count > 0 then
                    S.seconds = os.clock() - t0
                    debug.sethook(N.unpack(old_hook, 1, old_hook.n))
                    return S
                end
            end
            if ops_done % 300 == 0 then
                full_check(A, "periodic")
                full_check(B, "periodic")
            end
        end
        full_check(A, "episode end")
        full_check(B, "episode end")
        -- close A and keep using it; B goes to the garbage collector
        local r = call("world:close", S.WM.close, A.world)
        expect("world:close", true, r)
        A.closed = true
        closed_world_round(A)
        call("world:close", S.WM.close, A.world) -- closing twice is harmless
        if chance(0.5) then
            local r2 = call("world:close", S.WM.close, B.world)
            expect("world:close", true, r2)
        end
        S.worlds = nil
        collectgarbage()
    end
    debug.sethook(N.unpack(old_hook, 1, old_hook.n))
    collectgarbage()
    S.seconds = os.clock() - t0
    return S
end

return D

