-- repl.lua: the REPL session behind both the `kiln` command and the console of a running
-- game: it turns lines into statements, evaluates them in an environment, and answers with
-- the text to show. It does no I/O of its own, so a terminal and a socket drive it alike.
local kiln, World, Query, layer = ...
local math_type, tointeger = layer.math_type, layer.tointeger
local pack = table.pack or function(...) return {n = select("#", ...), ...} end -- LuaJIT has none
local concat, sub = table.concat, string.sub

local Session = {}
Session.__index = Session
Session.__name = "kiln.Session"


local HELP_LOCAL = [[
Enter Lua statements or expressions (expressions print their value).
  :help            this text
  :step [n]        run the schedule n frames (default 1) with world:progress
  :run [fps]       keep stepping at fps (default 60) until :pause, Enter or Ctrl-C
  :pause           stop a :run
  :systems         the schedule's systems with stage, kind, enabled and timings
  :stats           entities, archetypes, memory and frame time
  :load file       run a Lua file in this session, or load a world save into the world
  :save file       save the world (JSON when file ends in .json, else binary)
  :hash            the world's content hash (world:hash)
  :watch expr      print expr after every step (:watch alone lists, :unwatch n drops)
  :mods            the mods of the global `mods` (a kiln.mods manager): state, memory, errors
  :reload name     reload a mod in place (:unload name [keep] unloads, :log name shows its log)
  :quit            leave
Values: entities print with their components; queries print as tables.]]

local HELP_REMOTE = [[
Enter Lua statements or expressions (expressions print their value); they run in the
game between its frames.
  :help            this text
  :systems         the schedule's systems with stage, kind, enabled and timings
  :stats           entities, archetypes, memory and frame time
  :load file       run a Lua file (a path on the game's machine) in this session, or load
                   a world save into the world
  :save file       save the world (JSON when file ends in .json, else binary)
  :hash            the world's content hash (world:hash)
  :watch expr      print expr every second while the prompt waits (:watch alone lists,
                   :unwatch n drops); system failures show there as they happen
  :mods            the game's mods: state, memory, systems, failures, last error
  :reload name     reload a mod in place (:unload name [keep] unloads, :log name shows its log)
  :quit            leave (the game goes on)
Values: entities print with their components; queries print as tables.]]

-- ---- argument checks -------------------------------------------------------------------

local typename, bounded, bad_argument = layer.typename, layer.bounded, layer.bad_argument -- inspect.lua
local number_format = layer.number_format -- string.format of a number, "." its point in any locale

-- Raises (at the caller of the method) unless self is a session.
local function check_self(self, fname)
  if getmetatable(self) ~= Session then
    error(string.format("calling '%s' on bad self (kiln.Session expected, got %s)", fname, typename(self)), 3)
  end
end

local function check_string(v, n, fname)
  if type(v) ~= "string" then error(bad_argument(n, fname, "string expected, got " .. typename(v)), 3) end
end

local function usable_world(v)
  return typename(v) == "kiln.World" and pcall(World.count, v)
end

-- ---- sessions ----------------------------------------------------------------------------

--- kiln.session([env [, opts]]) -> a REPL session evaluating in env (default _G).
-- opts.remote: the session serves a console client (the host runs the frames).
-- opts.dt: the dt of :step (default 1/60).
-- opts.answer_bytes: the most bytes of a statement's answer kept (default: no limit); past
-- them the rest is counted, never built, and the text ends "\n... (N bytes not shown)".
function kiln.session(env, opts)
  if env ~= nil and type(env) ~= "table" then
    error(bad_argument(1, "kiln.session", "table expected, got " .. typename(env)), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(bad_argument(2, "kiln.session", "table expected, got " .. typename(opts)), 2)
  end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "remote" and k ~= "dt" and k ~= "answer_bytes" then
      local given = type(k) == "string" and string.format("key '%s'", bounded(k))
        or type(k) == "number" and string.format("key [%s]", tostring(k)) or typename(k) .. " key"
      error(bad_argument(2, "kiln.session", "unknown " .. given .. " (expected remote, dt, answer_bytes)"), 2)
    end
  end
  local dt = opts.dt
  if dt ~= nil and (type(dt) ~= "number" or not (dt >= 0 and dt < math.huge)) then
    error(bad_argument(2, "kiln.session", "dt: a finite number >= 0 expected, got " ..
      (type(dt) == "number" and tostring(dt) or typename(dt))), 2)
  end
  local limit = opts.answer_bytes
  if limit ~= nil and (not tointeger(limit) or limit < 1) then
    error(bad_argument(2, "kiln.session", "answer_bytes: an integer >= 1 expected, got " ..
      (type(limit) == "number" and tostring(limit) or typename(limit))), 2)
  end
  return setmetatable({env = env or _G, buffer = nil, watches = {}, remote = opts.remote and true or false,
    dt = dt or 1 / 60, answer_bytes = limit and tointeger(limit) or math.huge}, Session)
end

local function world_of(self)
  local w = rawget(self.env, "world")
  return usable_world(w) and w or nil
end

local function world_summary(w)
  return string.format("%d entities", w:count())
end

--- session:open_world([value]) -> a line saying which world the session works on.
-- Keeps a `world` global; else takes value (what a script returned) when it is a world,
-- else the one global that holds a world; else makes a fresh one.
function Session:open_world(value)
  check_self(self, "session:open_world")
  local env = self.env
  local current = rawget(env, "world")
  if current ~= nil then
    if usable_world(current) then return "world: the global `world` (" .. world_summary(current) .. ")" end
    return string.format("world: the global `world` holds a %s, not an open kiln.World: " ..
      ":step, :run, :systems and :stats need one", typename(current))
  end
  if usable_world(value) then
    rawset(env, "world", value)
    return "world: the one the script returned (" .. world_summary(value) .. ")"
  end
  local names = {}
  for k, v in next, env do
    if type(k) == "string" and usable_world(v) then names[#names + 1] = k end
  end
  table.sort(names)
  if #names == 1 then
    local w = rawget(env, names[1])
    rawset(env, "world", w)
    return string.format("world: the global `%s` (%s)", bounded(names[1]), world_summary(w))
  end
  rawset(env, "world", kiln.world())
  if #names > 1 then
    for i, n in ipairs(names) do names[i] = "`" .. bounded(n) .. "`" end
    return "world: a new, empty one (" .. table.concat(names, ", ") ..
      " hold worlds: set `world` to the one you want)"
  end
  return "world: a new, empty one"
end

local run_answer, answer, load_answer = layer.run_answer, layer.answer, layer.load_answer
local reload_answer, regular_file, step_answer = layer.reload_answer, layer.regular_file, layer.step_answer
local ran = layer.ran
-- xpcall's results, packed, with fn run through layer.ran, which marks box once fn ended
local function run_traced(fn, box, ...)
  return pack(xpcall(ran, debug.traceback, fn, box, ...))
end

-- A statement's answer as it is made: its lines (out[1..]), joined by newlines at the end.
-- At most out.limit bytes of that text are kept (out.bytes); past them a line is counted in
-- out.cut and never built, so a statement printing far past the limit costs the limit.
local function answer_lines(limit)
  return {bytes = 0, cut = 0, limit = limit}
end

-- Adds the line parts[1..n] joined by tabs (strings) to out: whole while it fits, else the
-- start that fits, the rest counted.
local function keep_line(out, parts, n)
  local len = n > 0 and n - 1 or 0
  for i = 1, n do len = len + #parts[i] end
  local sep = (#out > 0 or out.cut > 0) and 1 or 0
  local room = out.limit - out.bytes - sep
  if out.cut > 0 or room < 0 then
    out.cut = out.cut + sep + len
  elseif len <= room then
    out[#out + 1] = concat(parts, "\t", 1, n)
    out.bytes = out.bytes + sep + len
  else
    local kept, left = {}, room
    for i = 1, n do
      local p = parts[i]
      if #p >= left then kept[i] = sub(p, 1, left) break end
      kept[i], left = p, left - #p - 1
    end
    out[#out + 1] = concat(kept, "\t")
    out.bytes, out.cut = out.limit, len - room
  end
end

-- The answer's text: its kept lines, and how many bytes were not, when some were not (one
-- join: the kept text is copied once).
local function answer_text(out)
  if out.cut > 0 then out[#out + 1] = string.format("... (%d bytes not shown)", out.cut) end
  return concat(out, "\n")
end

-- The answer to a call that ran (results: xpcall's, packed): what it printed (out), then its
-- values shown by kiln.pretty, or its error's traceback.
local function describe(self, results, out)
  if not results[1] then
    -- The traceback down to the statement (cut at layer.ran's frame, the one above xpcall's);
    -- the REPL's own frames say nothing useful.
    local text = tostring(results[2]):gsub("\n[^\n]*\n%s*%[C%]: in function 'xpcall'.*$", "")
    keep_line(out, {text}, 1)
    return "error", answer_text(out)
  end
  local w = world_of(self)
  for i = 2, results.n do
    local ok, text = pcall(kiln.pretty, results[i], w)
    keep_line(out, {ok and text or tostring(results[i])}, 1)
  end
  return "ok", answer_text(out)
end

-- Runs fn with print captured; returns "ok" or "error" and the text. A tail call into C
-- (layer.run_answer), which swaps print in and back and makes the answer: a stop (Ctrl-C, a
-- spent budget) can neither leave the capture in place nor, once fn has ended, answer an
-- error for a call that ran.
local function run(self, fn, ...)
  local out = answer_lines(self.answer_bytes)
  return run_answer(self.env, function(...)
    local parts = pack(...)
    for i = 1, parts.n do parts[i] = tostring(parts[i]) end
    keep_line(out, parts, parts.n)
  end, run_traced, describe, self, out, {false}, fn, ...)
end

-- Runs fn with print captured; returns ok, text.
function Session:call(fn, ...)
  check_self(self, "session:call")
  if type(fn) ~= "function" then
    error(bad_argument(1, "session:call", "function expected, got " .. typename(fn)), 2)
  end
  local status, text = run(self, fn, ...)
  return status == "ok", text
end

--- session:feed(line) -> status, text. status: "ok", "more" (statement incomplete),
-- "error", "quit", "run" (text is the frame rate), "pause".
-- The most bytes a statement continued over several lines may hold.
local STATEMENT_MAX_BYTES = 1048576 -- 1 MiB

function Session:feed(line)
  check_self(self, "session:feed")
  check_string(line, 1, "session:feed")
  -- The driver's own requests (completion, watches, dropping a statement) come between the
  -- lines of a statement too, and leave it as it is.
  if line == ":reset" then
    self.buffer = nil
    return "ok", ""
  end
  if line == ":poll" or line:match("^:complete ") then return self:command(line) end
  if not self.buffer and line:match("^%s*:") then return self:command(line) end
  local code = self.buffer and (self.buffer .. "\n" .. line) or line
  -- every line parses the whole statement again: a statement continued without end would
  -- make each line cost more than the last, so one continued past the limit is dropped
  if self.buffer and #code > STATEMENT_MAX_BYTES then
    self.buffer = nil
    return "error", string.format("a statement continued past %d bytes was dropped", STATEMENT_MAX_BYTES)
  end
  local fn, experr = load("return " .. code, "=stdin", "t", self.env)
  if not fn then
    local err
    fn, err = load(code, "=stdin", "t", self.env)
    if not fn then
      if err:match("<eof>'?$") or experr:match("<eof>'?$") then -- LuaJIT quotes it
        self.buffer = code
        return "more", ""
      end
      self.buffer = nil
      return "error", err
    end
  end
  self.buffer = nil
  return run(self, fn) -- a tail call: nothing runs after the statement's answer
end

--- session:reset() drops a statement being continued.
function Session:reset()
  check_self(self, "session:reset")
  self.buffer = nil
end

local failure_lines -- below

-- At most n bytes of s, with "..." when cut.
local function clip(s, n)
  if #s <= n then return s end
  return s:sub(1, n) .. "..."
end

-- One line per watch: "[i] expr = value".
local function watch_lines(self, lines)
  for i, expr in ipairs(self.watches) do
    local fn, err = load("return " .. expr, "=watch", "t", self.env)
    local text
    if fn then
      local _, t = self:call(fn)
      text = t
    else
      text = err
    end
    lines[#lines + 1] = string.format("[%d] %s = %s", i, expr, text)
  end
  return lines
end

-- session:step's frames and answer; box[1] is set (by layer.ran) once a frame ran. Run by
-- layer.step_answer, a tail call into C: raising once a frame ran (no memory for the
-- answer, a frame after it that raised before it ran) answers "ok" and STEP_UNSHOWN.
local STEP_UNSHOWN = "(a frame or more ran; no memory was left to say more: world:tick() tells how many, " ..
  "world:failures() what failed)"
local function step_frames(self, w, n, box)
  local lines = {}
  for _ = 1, n do
    local ok, failures = ran(w.progress, box, w, self.dt)
    if not ok then
      for _, f in ipairs(failures or {}) do
        lines[#lines + 1] = string.format("system %s failed: %s", f.system, f.message)
      end
    end
  end
  watch_lines(self, lines)
  lines[#lines + 1] = string.format("tick %d, %s", w:tick(), world_summary(w))
  return "ok", table.concat(lines, "\n")
end

--- session:step(n) -> status, text: n frames, then failures, watches and the tick.
function Session:step(n)
  check_self(self, "session:step")
  if not tointeger(n) or n < 1 then
    error(bad_argument(1, "session:step", "frame count (integer >= 1) expected, got " ..
      (type(n) == "number" and tostring(n) or typename(n))), 2)
  end
  n = tointeger(n)
  local w = world_of(self)
  if not w then return "error", "no world: set the global `world` first" end
  return step_answer(step_frames, {false}, STEP_UNSHOWN, self, w, n)
end

-- Bytes in the largest unit that keeps the number at or above 1 (B, KiB, MiB, GiB).
local function bytes_text(n)
  if n < 1024 then return string.format("%d B", n) end
  local units = {"KiB", "MiB", "GiB", "TiB"}
  local v, i = n / 1024, 1
  while v >= 1023.95 and i < #units do v, i = v / 1024, i + 1 end
  return number_format("%.1f", v) .. " " .. units[i]
end

local function stats_text(w)
  local st = w:stats()
  local frame, lua_ms = 0, 0
  for _, s in ipairs(w:systems()) do
    frame = frame + (s.last_ms or 0)
    if s.kind == "lua" then lua_ms = lua_ms + (s.last_ms or 0) end
  end
  return string.format(
    "entities   %d\narchetypes %d\ncomponents %d\nqueries    %d\nmemory     %s\ntick       %d\nframe      %s ms (Lua %s ms)",
    st.entities, st.archetypes, st.components, st.queries, bytes_text(st.bytes), st.tick, number_format("%.3f", frame),
    number_format("%.3f", lua_ms))
end

local function not_here(cmd)
  return "error", ":" .. cmd .. " is not available here: the game runs its own frames"
end

-- Failures the host logged since this session last looked: a host keeps them in a global
-- `failures` table with n, the count so far, and the last lines at [n - 99 .. n]. Returns
-- lines and n, which the caller marks seen (self.failures_seen) once it has answered.
failure_lines = function(self, lines)
  local log = rawget(self.env, "failures")
  if type(log) ~= "table" then return lines end
  local n = rawget(log, "n")
  if math_type(n) ~= "integer" then return lines end
  local seen = self.failures_seen or n -- a new session starts from now
  for i = math.max(seen + 1, n - 99), n do
    local line = rawget(log, i)
    if line ~= nil then lines[#lines + 1] = clip(tostring(line), 400) end
  end
  return lines, n
end

-- The kiln.Mods in the global `mods`, or nil and why not.
local function mods_of(self)
  local m = rawget(self.env, "mods")
  if m == nil then return nil, "no mods: the global `mods` holds no mod manager (kiln.mods(world))" end
  if not tostring(m):match("^kiln%.Mods") then return nil, "the global `mods` is a " .. typename(m) .. ", not a kiln.Mods" end
  return m
end

local function mods_text(list)
  if #list == 0 then return "no mods loaded" end
  local lines = {}
  for _, m in ipairs(list) do
    lines[#lines + 1] = string.format("%-16s %-8s %-8s %7.1f KiB  %d systems  %d entities  %d failures",
      m.name, m.version, m.state, m.memory / 1024, #m.systems, m.entities, m.failures)
    if m.error then lines[#lines + 1] = "    last error: " .. clip(m.error, 300) end
  end
  return table.concat(lines, "\n")
end

-- :mods, :reload, :unload, :log against the global `mods`.
-- :reload and :unload end in tail calls into C (layer.reload_answer, layer.answer), which make
-- the call and answer: no Lua code runs after it, so a stop (a spent budget, a console
-- statement's time limit) cannot report a failure for a reload or an unload that was made.
local function mods_command(self, cmd, rest)
  local mods, why = mods_of(self)
  if not mods then return "error", why end
  local name, opt = rest:match("^(%S+)%s*(%S*)$")
  if cmd ~= "mods" and not name then return "error", ":" .. cmd .. " takes a mod name" end
  if cmd == "reload" then return reload_answer(mods.reload, mods, name) end
  if cmd == "unload" then
    if opt ~= "" and opt ~= "keep" then return "error", ":unload takes a mod name and, optionally, keep" end
    local text = "unloaded " .. name .. (opt == "keep" and " (its entities and components kept)" or "")
    return answer(text, mods.unload, mods, name, opt == "keep" and {keep = true} or nil)
  end
  local ok, a = pcall(function()
    if cmd == "mods" then return mods_text(mods:list()) end
    local lines, why = mods:log(name)
    if not lines then error(why, 0) end
    return #lines > 0 and table.concat(lines, "\n") or "(nothing printed)"
  end)
  if not ok then return "error", tostring(a) end
  return "ok", a
end

--- session:command(line) -> status, text for a ":" command.
function Session:command(line)
  check_self(self, "session:command")
  check_string(line, 1, "session:command")
  -- (not "%s*(.-)%s*$": from each byte of a long run of spaces the %s*$ would run to its end)
  local cmd, from = line:match("^%s*:(%a+)%s*()")
  if not cmd then return "error", "unknown command (try :help)" end
  local last = line:find("%S%s*$", from)
  local rest = last and line:sub(from, last) or ""
  if cmd == "help" then return "ok", self.remote and HELP_REMOTE or HELP_LOCAL end
  if cmd == "quit" or cmd == "q" or cmd == "exit" then return "quit", "" end
  if cmd == "complete" then
    -- a Tab over a value whose __pairs or __index raises answers an error, never raises: a
    -- raise would make the driver drop the statement being typed over several lines
    local ok, list = pcall(self.complete, self, rest)
    if not ok then return "error", "completion failed: " .. bounded(tostring(list)) end
    return "ok", table.concat(list, "\n")
  end
  if cmd == "poll" then
    -- what a console client shows while its prompt waits: new failures, then the watches.
    -- The failures are marked seen last, in C as the tail call: a poll stopped before (a
    -- watch that spends a console statement's budget) shows them again next time.
    local lines, seen = failure_lines(self, {})
    local text = table.concat(watch_lines(self, lines), "\n")
    if seen == nil then return "ok", text end
    return answer(text, rawset, self, "failures_seen", seen)
  end
  local w = world_of(self)
  if cmd == "step" then
    if self.remote then return not_here(cmd) end
    local n = rest == "" and 1 or tointeger(tonumber(rest))
    if not n or n < 1 then return "error", ":step takes a positive number of frames" end
    return self:step(n)
  elseif cmd == "run" then
    if self.remote then return not_here(cmd) end
    local fps = rest == "" and 60 or tonumber(rest)
    if not fps or not (fps > 0 and fps <= 1000) then
      return "error", ":run takes a rate above 0 and up to 1000 frames per second"
    end
    if not w then return "error", "no world: set the global `world` first" end
    return "run", tostring(fps)
  elseif cmd == "pause" then
    if self.remote then return not_here(cmd) end
    return "pause", "paused"
  elseif cmd == "systems" then
    if not w then return "error", "no world" end
    local list = w:systems()
    if #list == 0 then return "ok", "no systems" end
    return "ok", kiln.systems_text(list)
  elseif cmd == "stats" then
    if not w then return "error", "no world" end
    return "ok", stats_text(w)
  elseif cmd == "save" then
    if rest == "" then return "error", ":save takes a file name" end
    if not w then return "error", "no world" end
    -- tail calls into C, which make the save or the load and answer: no Lua code runs after
    -- them, so a stop (a spent budget) cannot report a failure for a call that was made
    local text = string.format("saved %d entities to %s", w:count(), rest) -- a save changes no count
    return answer(text, w.save, w, rest, {format = rest:match("%.json$") and "json" or "binary"})
  elseif cmd == "hash" then
    if not w then return "error", "no world" end
    return "ok", w:hash("hex")
  elseif cmd == "load" then
    if rest == "" then return "error", ":load takes a file name" end
    local regular, why = regular_file(rest)
    if not regular then return "error", why end
    local f = io.open(rest, "rb")
    local head = f and f:read(64) or ""
    if f then f:close() end
    -- a save cut inside its magic is still a save (world:load says it is truncated)
    local magic = head:sub(1, 8)
    if w and ((#magic > 0 and magic == ("KILNSAVE"):sub(1, #magic)) or head:match('^%s*{%s*"kiln"')) then
      return load_answer(w.load, w, rest) -- a tail call into C, as :save's
    end
    -- load, not loadfile, whose reading and parse run no hook (100 MB of source held the
    -- game 6.3 s): in a console statement the pieces a reader gives are read under the
    -- statement's clock (LuaJIT's console refuses a reader: it gets the text, charged as a
    -- load of it by its length)
    local src, ferr = io.open(rest, "rb")
    if not src then return "error", ferr end
    -- as loadfile reads a file: a UTF-8 byte-order mark skipped, a first line starting
    -- with # (#!/usr/bin/env lua) a comment
    local function opening(piece)
      if piece and piece:sub(1, 3) == "\239\187\191" then piece = piece:sub(4) end
      if piece and piece:sub(1, 1) == "#" then piece = "--" .. piece end
      return piece
    end
    local fn, err
    if jit then
      fn, err = load(opening(src:read("a")) or "", "@" .. rest, "t", self.env)
    else
      local first = true
      fn, err = load(function()
        local piece = src:read(65536)
        if first then first, piece = false, opening(piece) end
        return piece
      end, "@" .. rest, "t", self.env)
    end
    src:close()
    if not fn then return "error", err end
    return run(self, fn)
  elseif cmd == "mods" or cmd == "reload" or cmd == "unload" or cmd == "log" then
    return mods_command(self, cmd, rest)
  elseif cmd == "watch" then
    if rest == "" then
      local lines = {}
      for i, e in ipairs(self.watches) do lines[i] = string.format("[%d] %s", i, e) end
      return "ok", #lines > 0 and table.concat(lines, "\n") or "no watches"
    end
    local fn, err = load("return " .. rest, "=watch", "t", self.env)
    if not fn then return "error", err end
    -- added (and below removed) by the tail call into C, as :save: not reported failed once made
    local n = #self.watches + 1
    return answer(string.format("watching [%d] %s", n, rest), rawset, self.watches, n, rest)
  elseif cmd == "unwatch" then
    local i = tointeger(tonumber(rest))
    if not i or not self.watches[i] then return "error", ":unwatch takes a watch number" end
    local kept = {} -- swapped in whole (LuaJIT's table.remove is Lua code, which a stop splits)
    for k, e in ipairs(self.watches) do
      if k ~= i then kept[#kept + 1] = e end
    end
    return answer("removed", rawset, self, "watches", kept)
  end
  return "error", "unknown command :" .. bounded(cmd) .. " (try :help)"
end

-- ---- completion ------------------------------------------------------------------------

local KEYWORDS = {"and", "break", "do", "else", "elseif", "end", "false", "for", "function",
  "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"}

-- The methods of kiln's classes, read directly: their public __index is an empty view that
-- only __pairs iterates, which LuaJIT's pairs does not call.
local CLASS_METHODS = {["kiln.World"] = World, ["kiln.Query"] = Query}

-- What one completion may look at and answer: a Tab over a table of millions of keys (or an
-- endless __pairs) costs COMPLETE_VISIT_MAX keys, not the table, and offers at most
-- COMPLETE_MAX names (the least, sorted, of those it saw).
local COMPLETE_VISIT_MAX = 10000 -- keys and __index tables looked at, in all
local COMPLETE_MAX = 200

-- Adds the string keys of table t to out, taking each from budget.left, until pairs ends or
-- raises (a hostile __pairs: the keys it gave before count) or the budget is spent.
local function pairs_keys(t, out, budget)
  for k in pairs(t) do
    if budget.left <= 0 then break end
    budget.left = budget.left - 1
    if type(k) == "string" then out[k] = true end
  end
end

-- Adds to out the string keys of v and of its __index tables, taking what it looks at from
-- budget.left (a table counts as one); stops, leaving the rest unseen, when that is spent.
local function keys_of(v, out, seen, budget)
  if seen[v] or budget.left <= 0 then return end
  seen[v] = true
  budget.left = budget.left - 1
  if type(v) == "table" then pcall(pairs_keys, v, out, budget) end
  local mt = getmetatable(v)
  if type(mt) == "table" then
    local idx = CLASS_METHODS[rawget(mt, "__name")] or rawget(mt, "__index")
    if type(idx) == "table" then keys_of(idx, out, seen, budget) end
  end
end

-- The keys of keys (a set) that start with partial, each as prefix .. key, sorted, at most
-- COMPLETE_MAX of them; after a dot or colon (prefix not empty) no metamethod names.
local function candidates(keys, partial, prefix)
  local out = {}
  for k in pairs(keys) do
    if k:sub(1, #partial) == partial and (prefix == "" or not k:match("^__")) then out[#out + 1] = prefix .. k end
  end
  table.sort(out)
  for i = #out, COMPLETE_MAX + 1, -1 do out[i] = nil end
  return out
end

-- Reads line as Lua far enough to say where its end is: the brackets still open (each
-- {char=, at=}) and, when the end is inside a string, where that string starts. It jumps
-- from one character that matters to the next (find), so the Lua it runs is per bracket and
-- quote, not per byte; a line nesting deeper than Lua's parser takes (OPEN_MAX) is not Lua,
-- and completes nothing, as a comment does.
local OPEN_MAX = 200
local OUTSIDE = "[\"'%-{}()%[%]]"
local INSIDE = {['"'] = '[\\"]', ["'"] = "[\\']"}
local function scan(line)
  local open, quote, quote_at = {}, nil, nil
  local i = line:find(OUTSIDE)
  while i do
    local c = line:sub(i, i)
    if quote then
      if c == "\\" then i = i + 1 elseif c == quote then quote = nil end
    elseif c == '"' or c == "'" then
      quote, quote_at = c, i
    elseif c == "-" and line:sub(i + 1, i + 1) == "-" then
      return open, nil, true -- a comment: nothing to complete
    elseif c == "{" or c == "(" or c == "[" then
      if #open == OPEN_MAX then return open, nil, true end
      open[#open + 1] = {char = c, at = i}
    elseif c == "}" or c == ")" or c == "]" then
      open[#open] = nil
    end
    i = line:find(quote and INSIDE[quote] or OUTSIDE, i + 1)
  end
  return open, quote and quote_at or nil, false
end

-- The text before position at (at most COMPLETE_TAIL bytes of it) and, at the end of line,
-- the name path (a.b:c) completion works on, or nil when that path is longer than
-- COMPLETE_TAIL. The patterns matched against the end of a line are anchored only there, so
-- Lua retries them from every byte: given a whole line they cost the square of its length
-- (a Tab over a 1 MiB line ran for minutes), given a bounded tail a bounded amount.
local COMPLETE_TAIL = 256
local function tail(line, at)
  return line:sub(math.max(1, at - COMPLETE_TAIL), at - 1)
end
local function last_path(line)
  local t = tail(line, #line + 2) -- one byte more than a path may hold
  local from = t:find("[%w_%.:]*$")
  if from == 1 and #t > COMPLETE_TAIL then return nil end
  return t:sub(from)
end

local function matching(names, partial)
  local out = {}
  for _, name in ipairs(names) do
    if name:sub(1, #partial) == partial then out[#out + 1] = name end
  end
  table.sort(out)
  for i = #out, COMPLETE_MAX + 1, -1 do out[i] = nil end
  return out
end

local function component_names(w)
  local names = {}
  for _, c in ipairs(w:components()) do names[#names + 1] = c.name end
  return names
end

local function field_names(w, component)
  local info = w:component_info(component)
  if not info or type(info.fields) ~= "table" then return nil end
  local names = {}
  for _, f in ipairs(info.fields) do names[#names + 1] = f.name end
  return names
end

-- Candidates for a key of the innermost open table constructor: component names in
-- spawn{...}, field names in a component's value (spawn{Name = {...}}, add(e, "Name", {...})).
local function table_key_candidates(w, line, open)
  local inner = open[#open]
  if not inner or inner.char ~= "{" then return nil end
  -- (the second pattern is tried only from a comma or semicolon: a pass over the line)
  local partial = line:sub(inner.at + 1):match("^%s*([%w_]*)$") or line:sub(inner.at + 1):match("[,;]%s*([%w_]*)$")
  if not partial then return nil end
  local before = tail(line, inner.at)
  if before:match("spawn%s*%(?%s*$") then return matching(component_names(w), partial) end
  local quoted = before:match("[\"']([%w_]+)[\"']%s*,%s*$")
  local key = before:match("([%a_][%w_]*)%s*=%s*$")
  local outer = open[#open - 1]
  if not quoted and key and outer and outer.char == "{" and tail(line, outer.at):match("spawn%s*%(?%s*$") then
    quoted = key
  end
  if not quoted then return nil end
  local names = field_names(w, quoted)
  return names and matching(names, partial) or nil
end

--- session:complete(line) -> candidates that replace the last word of line.
function Session:complete(line)
  check_self(self, "session:complete")
  check_string(line, 1, "session:complete")
  local w = world_of(self)
  local open, string_at, comment = scan(line)
  if comment then return {} end
  -- Inside a string: component names.
  if string_at then
    local partial = line:sub(string_at + 1)
    if not w or not partial:match("^[%w_%.]*$") then return {} end
    return matching(component_names(w), partial)
  end
  if w then
    local out = table_key_candidates(w, line, open)
    if out then return out end
  end
  local name = last_path(line)
  if not name then return {} end
  -- a.b.c / a:b
  local path, sep, last = name:match("^([%w_%.:]-)([%.:])([%w_]*)$")
  if path and path ~= "" then
    local v = self.env
    for name in path:gmatch("[^%.:]+") do
      if type(v) ~= "table" and type(v) ~= "userdata" then v = nil break end
      local ok, nv = pcall(function() return v[name] end)
      v = ok and nv or nil
      if v == nil then break end
    end
    if v == nil then return {} end
    local keys = {}
    keys_of(v, keys, {}, {left = COMPLETE_VISIT_MAX})
    return candidates(keys, last, path .. sep)
  end
  local word = name:match("[%w_]*$")
  local keys = {}
  keys_of(self.env, keys, {}, {left = COMPLETE_VISIT_MAX})
  for _, k in ipairs(KEYWORDS) do keys[k] = true end
  return candidates(keys, word, "")
end
