-- fuzz/ops_systems.lua: Lua systems (run and each, exclusive or not, raising at random),
-- world:progress with the model following stages, failures, and the failure bookkeeping.
local N = require "fuzz.num"
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
local Lp = require "fuzz.ops_loops"
local loop_body, predict_write_back, commit_write_back = Lp.loop_body, Lp.predict_write_back, Lp.commit_write_back
local random_query_desc, predict_query, MAX_ITER_TERMS = Lp.random_query_desc, Lp.predict_query, Lp.MAX_ITER_TERMS

-- Systems ------------------------------------------------------------------------------------

local function list_set(list)
    local set = {}
    for _, c in ipairs(list) do set[c.name] = true end
    return set
end

local function system_enter(m, s)
    -- buffers of finished stages land before a later stage starts
    if s.stage then
        local due = {}
        for _, other in ipairs(m.systems) do
            if other.pending_queue and other.stage and other.stage < s.stage then due[#due + 1] = other end
        end
        table.sort(due, function(a, b)
            if a.stage ~= b.stage then return a.stage < b.stage end
            return a.index < b.index
        end)
        for _, other in ipairs(due) do
            local q = other.pending_queue
            other.pending_queue = nil
            m:apply_queue(q)
        end
    end
    s.queue = {}
    s.runs = s.runs + 1
    s.raised_in_body = false
    s.pending = nil
    s.state = {seen = {}, chunks = {}}
    m.cur_sys = s
    if s.exclusive then m.defer_depth = m.defer_depth - 1 end
    -- an each-system's own iteration defers the world too (which matters when exclusive)
    if s.kind == "each" then
        m:enter_loop()
        m.iterating = m.iterating + 1
    end
end

local function system_leave(m, s, ok)
    if s.kind == "each" then
        m.iterating = m.iterating - 1
        m:leave_loop()
    end
    if s.exclusive then m.defer_depth = m.defer_depth + 1 end
    m.cur_sys = nil
    if ok then
        s.failures = 0
        s.pending_queue = s.queue
    else
        s.failures = s.failures + 1
        m:drop_queue(s.queue)
        local disable = m.max_failures > 0 and s.failures >= m.max_failures
        if TRACE then io.stderr:write(string.format("  %s fails (%d in a row, max %d)\n", s.name, s.failures, m.max_failures)) end
        if disable then s.enabled = false end
        m.unreported[#m.unreported + 1] = {system = s.name, disabled = disable}
    end
    s.queue = nil
end

-- An each-system learns that its run ended only when the next system starts (or the frame
-- ends): its last row's write-back has happened by then.
local function leave_current(m)
    local s = m.cur_sys
    if s and s.kind == "each" then
        local wb = s.pending
        s.pending = nil
        commit_write_back(m, wb) -- all of it, or nothing of the row when a value is bad
        system_leave(m, s, not s.raised_in_body and not (wb and wb.fails))
    end
end

-- The next system in the frame's order. When it opens a stage, which systems of that stage
-- run is fixed now: a system enabled or disabled during its stage changes from the next frame.
local function next_in_frame(m)
    m.frame_pos = m.frame_pos + 1
    local t = m.frame_order[m.frame_pos]
    if t.stage ~= m.frame_stage then
        m.frame_stage = t.stage
        for _, u in ipairs(m.frame_order) do
            if u.stage == t.stage then u.run_now = u.enabled end
        end
    end
    return t
end

-- Systems of this frame that come before s and never showed up ran with no rows.
local function begin_system(m, s)
    leave_current(m)
    while m.frame_pos < #m.frame_order do
        local t = next_in_frame(m)
        if t == s then break end
        if t.run_now then
            system_enter(m, t)
            system_leave(m, t, true)
        end
    end
    if not s.run_now then fail("system %s ran though it was not enabled when its stage began", s.name) end
    system_enter(m, s)
end

local function end_frame(m)
    leave_current(m)
    while m.frame_pos < #m.frame_order do
        local t = next_in_frame(m)
        if t.run_now then
            system_enter(m, t)
            system_leave(m, t, true)
        end
    end
    local pending = {}
    for _, s in ipairs(m.systems) do
        if s.pending_queue then pending[#pending + 1] = s end
    end
    table.sort(pending, function(a, b)
        if a.stage ~= b.stage then return (a.stage or 0) < (b.stage or 0) end
        return a.index < b.index
    end)
    for _, s in ipairs(pending) do
        local q = s.pending_queue
        s.pending_queue = nil
        m:apply_queue(q)
    end
end

local function make_run(m, s)
    return function(world, dt)
        if not rawequal(world, m.world) then fail("system %s got world %s", s.name, tostring(world)) end
        if not M.same(dt, m.frame_dt) then fail("system %s got dt %s, expected %s", s.name, tostring(dt), tostring(m.frame_dt)) end
        begin_system(m, s)
        local depth = S.depth
        note("calls inside a run system")
        local ok, err = pcall(X.run_nested, m, R(0, s.nops))
        S.depth = depth
        if not ok then fail("harness error inside system %s: %s", s.name, tostring(err)) end
        local raise = chance(s.raise_p)
        system_leave(m, s, not raise)
        if raise then
            note("raise inside a run system")
            if chance(0.2) then error({"a table error"}) end
            error("fuzz-raise in system " .. s.name, 0)
        end
    end
end

-- Whether an each-system's row hands out FFI views (LuaJIT: a cdata among them).
local function ffi_views(views, n)
    for t = 1, n do
        if type(views[t]) == "cdata" then return true end
    end
    return false
end

-- The archetype of a model entity: its component names, sorted.
local function archetype_key(rec)
    local names = {}
    for name in pairs(rec.comps) do names[#names + 1] = name end
    table.sort(names)
    return table.concat(names, "\0")
end

local function make_each(m, s)
    return function(e, ...)
        local args = N.pack(...)
        local dt = args[#s.entry.terms + 1]
        if not M.same(dt, m.frame_dt) then fail("each system %s got dt %s", s.name, tostring(dt)) end
        if m.cur_sys ~= s then begin_system(m, s) end
        if TRACE then io.stderr:write(string.format("  each system %s visits %s\n", s.name, tostring(e))) end
        commit_write_back(m, s.pending)
        s.pending = nil
        local views = {}
        for t = 1, #s.entry.terms do views[t] = args[t] end
        local writable = {}
        for t, comp in ipairs(s.entry.terms) do writable[t] = s.exclusive or s.writes_set[comp.name] == true end
        local depth = S.depth
        if ffi_views(views, #s.entry.terms) then
            -- FFI views (LuaJIT): each chunk (an archetype's rows: structural changes wait
            -- while the system runs) was stamped before its first row ran, for every term the
            -- system writes, so a nested call sees the rows not visited yet stamped too; the
            -- views are only read here, and the callback does not raise (the rows of its chunk
            -- after it would be stamped but not visited)
            local rec = m.alive[e]
            local key = rec and archetype_key(rec)
            if key and not s.state.chunks[key] then
                s.state.chunks[key] = true
                for e2, rec2 in pairs(m.alive) do
                    if archetype_key(rec2) == key and Lp.matches(m, s.entry, e2) then
                        for t, comp in ipairs(s.entry.terms) do
                            if type(views[t]) == "cdata" and writable[t] and rec2.comps[comp.name] ~= nil then
                                rec2.ticks[comp.name] = m.tick
                            end
                        end
                    end
                end
            end
            if s.state.seen[e] then fail("each system %s visits %s twice", s.name, tostring(e)) end
            s.state.seen[e] = true
            if chance(0.3) and S.depth < 3 then
                S.depth = S.depth + 1
                note("calls inside an each system")
                X.run_nested(m, R(1, 3))
                S.depth = depth
            end
            return
        end
        S.depth = S.depth + 1
        local present, snaps = loop_body(m, s.entry, e, views, writable, "each system " .. s.name, s.state)
        S.depth = depth
        if chance(s.raise_p / 4) then
            note("raise inside an each system")
            s.raised_in_body = true
            error("fuzz-raise in each system " .. s.name, 0)
        end
        s.pending = predict_write_back(m, e, s.entry.terms, views, present, writable, snaps)
    end
end

function ops.system(m)
    if #m.systems >= 8 then return end
    local k = R(100)
    local desc = {}
    local name = "sys" .. R(1, 12)
    if k <= 8 then name = pick({"", string.rep("s", 64), 5, {}, nil}) end
    if m.system_by_name[name] and chance(0.7) then name = name .. "b" end
    desc.name = name
    local names = user_comp_names(m)
    local reads, writes = {}, {}
    for _ = 1, R(0, 3) do reads[#reads + 1] = chance(0.95) and pick(names) or pick_comp(m) end
    for _ = 1, R(0, 3) do writes[#writes + 1] = chance(0.95) and pick(names) or pick_comp(m) end
    desc.reads, desc.writes = reads, writes
    if chance(0.03) then desc.reads = "Pos" end
    desc.exclusive = chance(0.15)
    if #m.systems > 0 and chance(0.2) then desc.after = {m.systems[R(#m.systems)].name} end
    if chance(0.005) then desc.before = {"no_such_system"} end
    if chance(0.02) then desc.after = {5} end
    local s = {name = name, exclusive = desc.exclusive == true, nops = R(0, 5),
               raise_p = pick({0, 0, 0.1, 0.5, 1}), enabled = true, runs = 0, failures = 0,
               index = #m.systems + 1}
    local each = chance(0.4)
    local entry
    if each then
        local qdesc = random_query_desc(m)
        if type(qdesc) == "table" then
            while N.rawlen(qdesc) > 10 do rawset(qdesc, N.rawlen(qdesc), nil) end
            rawset(qdesc, "optional", nil)
        end
        desc.query = qdesc
        local want = predict_query(m, qdesc)
        if type(want) == "table" then
            entry = {with = want.with, optional = {}, without = want.without, terms = {}}
            for _, c in ipairs(want.with) do entry.terms[#entry.terms + 1] = c end
        elseif want == "either" then
            entry = "either"
        end
        desc.each = make_each(m, s)
        if chance(0.03) then desc.run = function() end end
    else
        desc.run = make_run(m, s)
        if chance(0.03) then desc.run = "not a function" end
        if chance(0.02) then desc.query = {"Pos"} end
    end
    -- predict, in the order world:system checks
    local ok = type(name) == "string" and #name >= 1 and #name <= 63 and not m.system_by_name[name]
    local rc, wc = {}, {}
    for _, pair in ipairs({{desc.reads, rc}, {desc.writes, wc}}) do
        local list, out = pair[1], pair[2]
        if type(list) ~= "table" then
            ok = false
        else
            local seen = {} -- a component listed twice in one list is refused
            for _, c in ipairs(list) do
                local comp = m:resolve(c)
                if not comp or seen[comp] then ok = false else out[#out + 1], seen[comp] = comp, true end
            end
        end
    end
    if desc.after and type(desc.after[1]) ~= "string" then ok = false end
    if type(desc.run) == "string" then ok = false end
    if desc.run and desc.each then ok = false end
    if desc.run and desc.query then ok = false end
    if each and entry == nil then ok = false end
    if entry == "either" and ok then ok = nil end
    local r = wcall(m, "system", desc)
    -- the model does not follow before/after chains through re-added names: a cycle the
    -- schedule refuses is the one outcome it cannot predict
    if ok and not r[1] and desc.after and tostring(r[2]):find("would form a cycle", 1, true) then
        ok = false
        X.note("after links refused as cycles")
    end
    expect("world:system", ok, r, M.describe(desc))
    if r[1] then
        s.reads_set, s.writes_set = list_set(rc), list_set(wc)
        if type(entry) == "table" then
            for _, c in ipairs(entry.terms) do
                if not s.writes_set[c.name] then s.reads_set[c.name] = true end
            end
            s.entry = entry
        elseif each then
            m.uncertain_systems = true
        end
        s.kind = each and "each" or "run"
        m.systems[#m.systems + 1] = s
        m.system_by_name[name] = s
        if desc.before then m.build = nil end
    else
        after_error(m, {}, "system")
    end
end

function ops.progress(m)
    if m.uncertain_systems then return end
    local dt = pick({0.016, 0, 1, -1, 1e300, "0.5", nil, 1 / 0})
    if chance(0.05) then dt = gen.garbage() end
    local dtn = dt == nil and 0.0 or ((type(dt) == "number" or type(dt) == "string") and tonumber(dt)) or nil
    local inside = m.cur_sys ~= nil or m.in_progress or m.defer_depth > 0
    if dtn and not inside and m.build ~= false then
        -- stages, from the schedule itself (this also builds it)
        local list = ccall("systems", S.WM.systems, m.world) or {}
        local built = true
        for _, info in ipairs(list) do
            local s = m.system_by_name[info.name]
            if s then s.stage = info.stage end
            if info.stage < 0 then built = false end
        end
        m.build = built
    end
    local ok = dtn ~= nil and not inside and m.build ~= false
    if ok then
        m.tick = m.tick + 1
        for _, name in ipairs(m.event_names) do
            local ev = m.events[name]
            ev.prev, ev.cur = ev.cur, {}
        end
        m.frame_dt = dtn + 0.0
        m.in_progress = true
        m.defer_depth = m.defer_depth + 1
        m.frame_order = {}
        for _, s in ipairs(m.systems) do m.frame_order[#m.frame_order + 1] = s end
        table.sort(m.frame_order, function(a, b)
            if a.stage ~= b.stage then return a.stage < b.stage end
            return a.index < b.index
        end)
        m.frame_pos, m.frame_stage = 0, nil
    end
    local depth = S.depth
    S.depth = S.depth + 1
    local r = wcall(m, "progress", dt)
    S.depth = depth
    if ok then
        end_frame(m)
        m.in_progress = false
        m.defer_depth = m.defer_depth - 1
        if m.defer_depth == 0 then
            local q = m.world_queue
            m.world_queue = {}
            m:apply_queue(q)
        end
    end
    expect("world:progress", ok, r, "dt " .. tostring(dt))
    if TRACE and ok then
        local got, want = {}, {}
        for _, f in ipairs(type(r[3]) == "table" and r[3] or {}) do got[#got + 1] = f.system .. (f.disabled and "!" or "") end
        for _, f in ipairs(m.unreported) do want[#want + 1] = f.system .. (f.disabled and "!" or "") end
        io.stderr:write(string.format("  progress %s: failures %s, model %s\n", m.label, table.concat(got, " "), table.concat(want, " ")))
    end
    if r[1] and ok then
        local failures = m.unreported
        m.unreported = {}
        if #failures == 0 then
            if r[2] ~= true then fail("progress returned %s with no failures", tostring(r[2])) end
        elseif r[2] ~= false or type(r[3]) ~= "table" then
            fail("progress returned %s, %s with %d failures", tostring(r[2]), tostring(r[3]), #failures)
        else
            note("progress reports failures")
            local got = r[3]
            if #got ~= #failures then fail("progress reported %d failures, model %d", #got, #failures) end
            for i = 1, math.min(#got, #failures) do
                local g, w = got[i], failures[i]
                if g.system ~= w.system or g.disabled ~= w.disabled or type(g.message) ~= "string"
                    or type(g.traceback) ~= "string" then
                    fail("failure %d = {%s, %s, disabled=%s}, model {%s, disabled=%s}", i, tostring(g.system),
                         tostring(g.message), tostring(g.disabled), w.system, tostring(w.disabled))
                elseif not g.message:find("fuzz-raise", 1, true) and not g.message:find("error object is a table", 1, true)
                    and not g.message:find("each:", 1, true) then
                    fail("system %s failed with an unexpected message: %s", g.system, g.message)
                end
            end
        end
    end
    if not r[1] then after_error(m, {}, "progress") end
end

function ops.systems(m)
    local r = wcall(m, "systems")
    expect("world:systems", not m.cur_sys or nil, r)
end

function ops.enable(m)
    local name = #m.systems > 0 and chance(0.85) and m.systems[R(#m.systems)].name or pick({"nope", 3, {}, nil})
    local with_flag = chance(0.8)
    local on = pick({true, false, nil, 0, "off"})
    local s = type(name) == "string" and not name:find("\0", 1, true) and m.system_by_name[name]
    local r = with_flag and wcall(m, "enable", name, on) or wcall(m, "enable", name)
    local ok = s and true or false
    if type(name) == "number" then ok = m.system_by_name[tostring(name)] ~= nil end
    expect("world:enable", ok, r, tostring(name))
    if r[1] and s then
        if with_flag then s.enabled = (on ~= nil and on ~= false) else s.enabled = true end
        -- the binding resets the failure count when it enables (the docs say it does not)
        if s.enabled then s.failures = 0 end
    end
end


-- world:remove_system between frames: the system leaves at once, later ones move down one
-- index. Inside a frame only a name no system has is tried (it must raise); removals during
-- a frame are pinned by systems_spec.lua.
function ops.remove_system(m)
    local inside = m.cur_sys ~= nil or m.in_progress
    local name
    if not inside and #m.systems > 0 and chance(0.8) then name = m.systems[R(#m.systems)].name
    else name = pick({"nope", "x\0y", 3, {}, nil}) end
    local s = type(name) == "string" and not name:find("\0", 1, true) and m.system_by_name[name]
    local r = wcall(m, "remove_system", name)
    expect("world:remove_system", s and true or false, r, tostring(name))
    if r[1] and s then
        table.remove(m.systems, s.index)
        for i, other in ipairs(m.systems) do other.index = i end
        m.system_by_name[name] = nil
    end
    if not r[1] then after_error(m, {}, "remove_system") end
end

-- world:instructions([n]): read, or set to 0 (no budget, as the fuzz worlds run); anything
-- but a non-negative integer raises.
function ops.instructions(m)
    local n = pick({nil, 0, 0.0, -1, 1.5, "0", {}, true})
    local r = wcall(m, "instructions", n)
    local ok = n == nil or n == 0
    expect("world:instructions", ok, r, tostring(n))
    if r[1] and ok and r[2] ~= 0 then fail("instructions() = %s, model 0", tostring(r[2])) end
    if not r[1] then after_error(m, {}, "instructions") end
end

function ops.failures(m)
    local r = wcall(m, "failures")
    if expect("world:failures", true, r) then
        local got, want = r[2], m.unreported
        m.unreported = {}
        if type(got) ~= "table" or #got ~= #want then
            fail("failures() = %s, model %d", M.describe(got), #want)
        else
            for i, w in ipairs(want) do
                if got[i].system ~= w.system or got[i].disabled ~= w.disabled then
                    fail("failures()[%d] = %s, model %s", i, tostring(got[i].system), w.system)
                end
            end
        end
    end
end

-- The world's drops only grow (the model does not predict which queued changes land), and a
-- message comes with the first.
function ops.dropped(m)
    local r = wcall(m, "dropped")
    if not expect("world:dropped", true, r) then return end
    local n, message = r[2], r[3]
    if type(n) ~= "number" or n % 1 ~= 0 or n < (m.dropped or 0) or (n > 0) ~= (type(message) == "string") then
        fail("dropped() = %s, %s after %d", tostring(n), tostring(message), m.dropped or 0)
    else
        m.dropped = n
    end
end

function ops.max_failures(m)
    local n = pick({0, 1, 2, 3, -1, 2 ^ 31, 2.0, 1.5, "2", {}, nil})
    local ni = (type(n) == "number" or type(n) == "string") and N.tointeger(n) or nil
    local ok = ni ~= nil and ni >= 0 and ni <= 2147483647
    local r = wcall(m, "max_failures", n)
    expect("world:max_failures", ok, r, tostring(n))
    if r[1] and ok then m.max_failures = ni end
end


return {}
