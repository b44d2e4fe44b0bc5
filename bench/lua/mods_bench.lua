-- bench/lua/mods_bench.lua: what running Lua as a mod costs: the instruction budget armed on
-- an each-system, a sandboxed mod's world:get loop, and reloading a mod with live entities.
--
-- Usage: LUA_CPATH=build-bench/lua/?.so lua5.4 bench/lua/mods_bench.lua [--json FILE] [--quick]
--            [--runs N] [--case NAME]
--   --json FILE  append one {"case", "ns", "baseline_ns", "ratio"} object per line to FILE
--   --quick      fewer repeats (a smoke run; the figures are noisier)
--   --runs N     run every case N times and keep, per case, the run with the median ratio
--                (the machines are shared and noisy; bench-median passes 3)
--   --case NAME  run only that case (mod_budget_overhead, host_budget_overhead, mod_call_overhead,
--                mod_reload)
--
-- Times come from os.clock (process CPU time): everything here runs on one thread, and a
-- sample lasts milliseconds. Subject and baseline samples alternate; medians are reported.
local kiln = require "kiln"

local N = 100000
local DT = 1 / 60

-- ---- arguments ----------------------------------------------------------------------------

local measure = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "measure.lua")
local opts = measure.args("mods_bench.lua", {["--json"] = "value", ["--quick"] = "flag", ["--runs"] = "number",
                                            ["--case"] = "value"}, {quick = false, runs = 1})

local REPEATS = opts.quick and 5 or 21   -- samples per side, alternating subject / baseline
local FRAMES = opts.quick and 2 or 5     -- frames per sample
local RELOADS = opts.quick and 5 or 21   -- reloads timed (one sample each)

-- ---- helpers ------------------------------------------------------------------------------

local clock = os.clock

local median = measure.median

local function compare(subject, baseline, scale) return measure.compare(REPEATS, subject, baseline, scale) end

-- A scratch folder for the mods' files, removed at exit.
local scratch = os.tmpname()
os.remove(scratch)
assert(os.execute("mkdir -p '" .. scratch .. "'"))

local function write(name, text)
    local f = assert(io.open(scratch .. "/" .. name, "w"))
    f:write(text)
    f:close()
    return scratch .. "/" .. name
end

-- A world with n movers; returns it and their entities.
local function populate(n)
    local w = kiln.world()
    w:component("Position", "float x, y;")
    w:component("Velocity", "float x, y;")
    local ents = {}
    for i = 1, n do
        ents[i] = w:spawn { Position = { x = i % 100, y = -(i % 50) }, Velocity = { x = 1, y = 2 } }
    end
    return w, ents
end

-- Fails unless one frame moved the sampled entities by vel * dt, so no case can time a
-- system that does nothing.
local function check_moves(w, ents, label, frame)
    local before = {}
    for i = 1, #ents, 997 do before[i] = w:get(ents[i], "Position") end
    frame()
    for i, p0 in pairs(before) do
        local p, v = w:get(ents[i], "Position"), w:get(ents[i], "Velocity")
        if math.abs(p.x - (p0.x + v.x * DT)) > 1e-3 or math.abs(p.y - (p0.y + v.y * DT)) > 1e-3 then
            error(string.format("%s: entity %d did not move as expected", label, ents[i]))
        end
    end
end

-- ---- cases ----------------------------------------------------------------------------------

-- The movement each-system as a mod defines it (its budget armed on every run, a budget it
-- never reaches) against the same system defined by the host, unbudgeted; one of the two is
-- enabled at a time.
local MOVE = [[
world:component("Position", "float x, y;")
world:component("Velocity", "float x, y;")
world:system { name = "%s", query = { "Position", "Velocity" }, writes = { "Position" },
    each = function(_, p, v, dt)
        p.x = p.x + v.x * dt
        p.y = p.y + v.y * dt
    end }
]]

local function toggled_frames(w, on, off)
    w:enable(on, true)
    w:enable(off, false)
    local t0 = clock()
    for _ = 1, FRAMES do assert(w:progress(DT)) end
    return clock() - t0
end

local function case_budget()
    local w, ents = populate(N)
    local mods = kiln.mods(w, { instructions = 1 << 40 })
    write("mover.lua", MOVE:format("mod_move"))
    assert(mods:load(scratch .. "/mover.lua"))
    assert(load(MOVE:format("host_move"), "host_move", "t", { world = w }))()
    toggled_frames(w, "mod_move", "host_move")
    check_moves(w, ents, "mod_budget_overhead", function() assert(w:progress(DT)) end)
    local s, b = compare(function() return toggled_frames(w, "mod_move", "host_move") end,
        function() return toggled_frames(w, "host_move", "mod_move") end, 1e9 / FRAMES)
    local info = mods:list()[1]
    assert(info.failures == 0, "mod_budget_overhead: the mod's system failed: " .. tostring(info.error))
    mods:close()
    w:close()
    return { case = "mod_budget_overhead", ns = s, baseline_ns = b, ratio = s / b, unit = "ns/frame",
        goal = "ratio <= 1.10", pass = s / b <= 1.10 }
end

-- The same each-system in the host's own world with a budget armed (world:instructions)
-- against none: the host's state is not kiln's, so its rows take the slower check (budget.c).
local function case_host_budget()
    local w, ents = populate(N)
    assert(load(MOVE:format("move"), "move", "t", { world = w }))()
    local function frames(budget)
        w:instructions(budget)
        local t0 = clock()
        for _ = 1, FRAMES do assert(w:progress(DT)) end
        return clock() - t0
    end
    w:instructions(1 << 40)
    check_moves(w, ents, "host_budget_overhead", function() assert(w:progress(DT)) end)
    local s, b = compare(function() return frames(1 << 40) end, function() return frames(0) end, 1e9 / FRAMES)
    w:close()
    return { case = "host_budget_overhead", ns = s, baseline_ns = b, ratio = s / b, unit = "ns/frame",
        goal = "ratio <= 1.10 (the mods' goal, on a host world)", pass = s / b <= 1.10 }
end

-- A mod's system calling world:get for N entities, against the same loop as a host system
-- of the same world (no sandbox, no budget); only one of the two is enabled at a time.
local LOOP = [[
    local sum = 0
    for i = 1, #ENTS do
        local p = world:get(ENTS[i], "Position")
        sum = sum + p.x
    end
    SUM = sum
]]

local function case_call()
    local w, ents = populate(N)
    local mods = kiln.mods(w, { instructions = 1 << 40, allow = { ENTS = ents } })
    write("getter.lua", "world:system{name = 'mod_get', reads = {'Position'}, run = function(world)\n" ..
        LOOP .. "\nend}\n")
    assert(mods:load(scratch .. "/getter.lua"))
    local env = setmetatable({ ENTS = ents }, { __index = _G })
    local host_loop = assert(load("local world = ...\n" .. LOOP, "host_get", "t", env))
    w:system { name = "host_get", reads = { "Position" }, run = function(world) host_loop(world) end }
    local function frames(on, off) return toggled_frames(w, on, off) end
    frames("host_get", "mod_get")
    local expected = 0
    for i = 1, N do expected = expected + w:get(ents[i], "Position").x end
    assert(env.SUM == expected, "mod_call_overhead: the host loop summed " .. tostring(env.SUM))
    local s, b = compare(function() return frames("mod_get", "host_get") end,
        function() return frames("host_get", "mod_get") end, 1e9 / (FRAMES * N))
    local info = mods:list()[1]
    assert(info.failures == 0, "mod_call_overhead: the mod's loop failed: " .. tostring(info.error))
    mods:close()
    w:close()
    return { case = "mod_call_overhead", ns = s, baseline_ns = b, ratio = s / b, unit = "ns/get",
        goal = "ratio <= 1.2", pass = s / b <= 1.2 }
end

-- Reloading a mod with 3 systems while 1,000 of its entities live (its top level spawns them
-- only the first time); ns per reload against the 5 ms goal.
local RELOADED = [[
world:component("Crate", "float x, y;")
world:component("Speed", "float v;")
local have = world:query{"Crate"}:count()
for i = have + 1, 1000 do world:spawn{Crate = {x = i, y = 0}, Speed = {v = 1}} end
world:system{name = "crate_move", query = {"Crate", "Speed"}, reads = {"Speed"}, writes = {"Crate"},
             each = function(_, c, s, dt) c.x = c.x + s.v * dt end}
world:system{name = "crate_sum", reads = {"Crate"}, after = {"crate_move"}, run = function(w)
    local n = 0
    for _, c in w:query{"Crate"}:each() do n = n + c.x end
    TOTAL = n
end}
world:system{name = "crate_log", reads = {"Crate"}, after = {"crate_sum"}, run = function() end}
mod.exports.version = mod.version
]]

local function case_reload()
    local w = kiln.world()
    local mods = kiln.mods(w, {})
    write("crates.lua", RELOADED)
    assert(mods:load(scratch .. "/crates.lua"))
    assert(w:progress(DT))
    local samples = {}
    for r = 1, RELOADS do
        collectgarbage("collect")
        local t0 = clock()
        local info, err = mods:reload("crates")
        samples[r] = (clock() - t0) * 1e9
        assert(info, err)
        assert(info.entities == 1000 and #info.systems == 3, "mod_reload: the reload lost entities or systems")
        assert(w:progress(DT))
    end
    mods:close()
    w:close()
    local ns = median(samples)
    return { case = "mod_reload", ns = ns, baseline_ns = 5e6, ratio = ns / 5e6, unit = "ns/reload",
        goal = "ns <= 5e6", pass = ns <= 5e6 }
end

local cases = {
    { "mod_budget_overhead", case_budget },
    { "host_budget_overhead", case_host_budget },
    { "mod_call_overhead", case_call },
    { "mod_reload", case_reload },
}

-- ---- run ------------------------------------------------------------------------------------

local results = {}
for _, c in ipairs(cases) do
    if not opts.case or opts.case == c[1] then
        local runs = {}
        for r = 1, opts.runs do
            runs[r] = c[2]()
            collectgarbage("collect")
        end
        table.sort(runs, function(x, y) return x.ratio < y.ratio end)
        results[#results + 1] = runs[(#runs + 1) // 2]
    end
end
os.execute("rm -rf '" .. scratch .. "'")
if opts.case and #results == 0 then
    io.stderr:write("mods_bench.lua: no case named '", opts.case, "'\n")
    os.exit(2)
end

local function fmt(v)
    if v >= 100 then return string.format("%.1f", v) end
    return string.format("%.3f", v)
end

print(string.format("kiln mod benchmarks: %d entities, %s, %d samples per side (medians), best of %d run(s) by median ratio",
    N, _VERSION, REPEATS, opts.runs))
print(string.format("%-24s %14s %14s %9s  %-10s %-14s %s", "case", "ns", "baseline_ns", "ratio", "unit", "goal",
    "result"))
for _, r in ipairs(results) do
    print(string.format("%-24s %14s %14s %9s  %-10s %-14s %s", r.case, fmt(r.ns), fmt(r.baseline_ns),
        string.format("%.3f", r.ratio), r.unit, r.goal, r.pass and "PASS" or "MISS"))
end

if opts.json then measure.write_json(opts.json, results) end
