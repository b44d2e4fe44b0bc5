-- bench/lua/jit_bench.lua: the LuaJIT cases of kiln's Lua benchmarks (FFI views, spawn,
-- garbage), each timed against a plain LuaJIT baseline in the same process; medians reported.
--
-- Usage: LUA_CPATH=build-bench-jit/lua/?.so luajit bench/lua/jit_bench.lua [--json FILE]
--            [--quick] [--case NAME]
--   --json FILE   append one {"case", "ns", "baseline_ns", "ratio"} object per line to FILE
--   --quick       fewer repeats (a smoke run)
--   --case NAME   run only that case (jit_each, jit_each_shared, jit_bulk, jit_spawn, jit_garbage)
--   KILN_BENCH_ENTITIES=N runs the per-frame cases on N entities instead of 100k
if type(jit) ~= "table" then
    io.stderr:write("jit_bench.lua: run it under luajit\n")
    os.exit(2)
end
local kiln = require "kiln"
local ffi = require "ffi"

local measure = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "measure.lua")
local opts = measure.args("jit_bench.lua", {["--json"] = "value", ["--quick"] = "flag", ["--case"] = "value"},
                          {quick = false})
local N = tonumber(os.getenv("KILN_BENCH_ENTITIES") or "") or 100000
local REPEATS = opts.quick and 5 or 21
local FRAMES = opts.quick and 4 or 20
local OPS = opts.quick and 20000 or N
local DT = 1 / 60
local clock = os.clock

local function compare(subject, baseline, scale) return measure.compare(REPEATS, subject, baseline, scale) end

-- A world of n entities with Position and Velocity, and the same floats as four FFI arrays.
local function populate(n)
    local w = kiln.world()
    w:component("Position", "float x, y;")
    w:component("Velocity", "float x, y;")
    local arrays = {px = ffi.new("float[?]", n), py = ffi.new("float[?]", n),
                    vx = ffi.new("float[?]", n), vy = ffi.new("float[?]", n)}
    local seed = 12345
    local function rand()
        seed = (seed * 1103515245 + 12345) % 2147483648
        return seed / 2147483648
    end
    for i = 0, n - 1 do
        local x, y, dx, dy = rand() * 200 - 100, rand() * 200 - 100, rand() * 2 - 1, rand() * 2 - 1
        w:spawn{Position = {x = x, y = y}, Velocity = {x = dx, y = dy}}
        arrays.px[i], arrays.py[i], arrays.vx[i], arrays.vy[i] = x, y, dx, dy
    end
    return w, arrays
end

-- q:each(): under LuaJIT, FFI views (Position and Velocity read through FFI as their tables do)
local function move_each(q, dt)
    for _, p, v in q:each() do
        p.x = p.x + v.x * dt
        p.y = p.y + v.y * dt
    end
end

local function move_chunk(n, _, p, v, dt)
    for i = 0, n - 1 do
        local pi, vi = p[i], v[i]
        pi.x = pi.x + vi.x * dt
        pi.y = pi.y + vi.y * dt
    end
end

local function move_arrays(n, a, dt)
    local px, py, vx, vy = a.px, a.py, a.vx, a.vy
    for i = 0, n - 1 do
        px[i] = px[i] + vx[i] * dt
        py[i] = py[i] + vy[i] * dt
    end
end

-- The frames of one sample, in seconds.
local function frames(fn)
    local t0 = clock()
    for _ = 1, FRAMES do fn() end
    return clock() - t0
end

-- Fails the run when the views did not move the entities as the arrays moved their copies.
local function check_moved(w, a, label)
    local i = 0
    for _, p in w:query{"Position"}:each_ffi() do
        if math.abs(p.x - a.px[i]) > 1e-3 * (1 + math.abs(a.px[i])) then
            error(string.format("%s: entity %d at x=%g, the arrays at %g", label, i, p.x, a.px[i]))
        end
        i = i + 1
    end
    assert(i == N, label .. ": wrong row count")
end

local results, infos = {}, {}

-- The movement loop as gameplay code runs it: a system that declares Velocity read-only, so
-- only Position's rows are stamped changed (what kiln_iter_mark_changed would do in C). The
-- same loop outside systems, where every term is writable and stamped, is informational.
local function frame_case(name, kernel)
    local w, a = populate(N)
    local q = w:query{"Position", "Velocity"}
    w:system{name = "move", reads = {"Velocity"}, writes = {"Position"}, run = function(_, dt) kernel(q, dt) end}
    assert(w:progress(DT))
    move_arrays(N, a, DT)
    check_moved(w, a, name)
    local s, b = compare(function() return frames(function() w:progress(DT) end) end,
                         function() return frames(function() move_arrays(N, a, DT) end) end, 1e9 / FRAMES)
    results[#results + 1] = {case = name, ns = s, baseline_ns = b, ratio = s / b, unit = "ns/frame",
                             goal = "ratio <= 1.2", pass = s / b <= 1.2}
    infos[#infos + 1] = {case = name .. " per entity", ns = s / N, baseline_ns = b / N, ratio = s / b,
                         unit = "ns/entity"}
    local s2, b2 = compare(function() return frames(function() kernel(q, DT) end) end,
                           function() return frames(function() move_arrays(N, a, DT) end) end, 1e9 / FRAMES)
    infos[#infos + 1] = {case = name .. " outside systems (both stamped)", ns = s2, baseline_ns = b2,
                         ratio = s2 / b2, unit = "ns/frame"}
    w:close()
end

local function case_each() frame_case("jit_each", function(q, dt) move_each(q, dt) end) end

-- Informational: the same loop run by SHARED systems each over a query of its own of the same
-- shape (Position, Velocity) on the same entities, so one compiled loop serves several queries
-- (under LuaJIT a loop over several closures of one prototype is compiled for none of them:
-- ffi.lua's steps are shared per shape). The baseline moves the arrays SHARED times a frame.
local SHARED = 4
local function case_each_shared()
    local w, a = populate(N)
    for k = 1, SHARED do
        local q = w:query{"Position", "Velocity"}
        w:system{name = "move" .. k, reads = {"Velocity"}, writes = {"Position"},
                 run = function(_, dt) move_each(q, dt) end}
    end
    assert(w:progress(DT))
    for _ = 1, SHARED do move_arrays(N, a, DT) end
    check_moved(w, a, "jit_each_shared")
    local s, b = compare(function() return frames(function() w:progress(DT) end) end,
                         function() return frames(function() for _ = 1, SHARED do move_arrays(N, a, DT) end end) end,
                         1e9 / FRAMES)
    infos[#infos + 1] = {case = string.format("jit_each_shared (%d queries of one shape)", SHARED), ns = s,
                         baseline_ns = b, ratio = s / b, unit = "ns/frame"}
    w:close()
end
local function case_bulk() frame_case("jit_bulk", function(q, dt) q:bulk_ffi(move_chunk, dt) end) end

local function case_spawn()
    local base = kiln.world()
    local function sample()
        local w = kiln.world()
        w:component("Position", "float x, y;")
        w:component("Velocity", "float x, y;")
        collectgarbage("collect")
        local t0 = clock()
        for i = 1, OPS do w:spawn{Position = {x = i, y = -i}, Velocity = {x = 1, y = 0.5}} end
        local t1 = clock()
        assert(w:count() == OPS, "jit_spawn: wrong entity count")
        w:close()
        return t1 - t0
    end
    local function empty()
        local t0 = clock()
        for _ = 1, OPS do base:count() end
        return clock() - t0
    end
    local s, b = compare(sample, empty, 1e9 / OPS)
    results[#results + 1] = {case = "jit_spawn", ns = s, baseline_ns = b, ratio = s / b, unit = "ns/entity",
                             goal = "ns <= 250", pass = s <= 250}
end

-- KiB the collector must reclaim per frame in steady state (the collector stopped while
-- the frames run), the worst of the each and bulk frames: the median of ROUNDS rounds of
-- FRAMES frames, as a round in which LuaJIT still compiles a trace (a side trace can get hot
-- after the warm-up) counts the trace's objects, which are not garbage a frame makes.
local ROUNDS = 5
local function case_garbage()
    local w = populate(N)
    local q = w:query{"Position", "Velocity"}
    local function per_frame(fn)
        for _ = 1, 20 do fn() end -- first use: states, compiled steps, traces
        local rounds = {}
        for r = 1, ROUNDS do
            collectgarbage("collect")
            collectgarbage("stop")
            local before = collectgarbage("count")
            for _ = 1, FRAMES do fn() end
            local after = collectgarbage("count")
            collectgarbage("restart")
            rounds[r] = (after - before) / FRAMES
        end
        return measure.median(rounds)
    end
    local each = per_frame(function() move_each(q, DT) end)
    local bulk = per_frame(function() q:bulk_ffi(move_chunk, DT) end)
    local worst = math.max(each, bulk)
    results[#results + 1] = {case = "jit_garbage", ns = worst, baseline_ns = 0, ratio = worst, unit = "KiB/frame",
                             goal = "<= 0.2", pass = worst <= 0.2}
    infos[#infos + 1] = {case = "garbage, q:each() frame", ns = each, baseline_ns = 0, ratio = each, unit = "KiB/frame"}
    infos[#infos + 1] = {case = "garbage, bulk_ffi frame", ns = bulk, baseline_ns = 0, ratio = bulk, unit = "KiB/frame"}
    w:close()
end

local cases = {{"jit_each", case_each}, {"jit_each_shared", case_each_shared}, {"jit_bulk", case_bulk},
               {"jit_spawn", case_spawn}, {"jit_garbage", case_garbage}}
measure.run_cases("jit_bench.lua", cases, opts.case)
measure.report(string.format("kiln LuaJIT benchmarks: %d entities, %s, %d samples per side (medians)", N, jit.version,
    REPEATS), results, infos)
if opts.json then measure.write_json(opts.json, results) end
