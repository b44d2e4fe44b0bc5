-- repl.lua: the REPL session behind both the `kiln` command and the console of a running
-- game: it turns lines into statements, evaluates them in an environment, and answers with
-- the text to show. It does no I/O of its own, so a terminal and a socket drive it alike.
local kiln, World, Query = ...

local Session = {}
Session.__index = Session

local HELP = [[
Enter Lua statements or expressions (expressions print their value).
  :help            this text
  :step [n]        run the schedule n frames (default 1) with world:progress
  :run [fps]       keep stepping at fps (default 60) until :pause, Enter or Ctrl-C
  :pause           stop a :run
  :systems         the schedule's systems with stage, kind, enabled and timings
  :stats           entities, archetypes, memory and frame time
  :load file       run a Lua file in this session
  :watch expr      print expr after every step (:watch alone lists, :unwatch n drops)
  :quit            leave
Values: entities print with their components; queries print as tables.]]

--- kiln.session(env, opts) -> a REPL session evaluating in env (default _G).
-- opts.remote: the session serves a console client (the host runs the frames).
function kiln.session(env, opts)
  opts = opts or {}
  return setmetatable({env = env or _G, buffer = nil, watches = {}, remote = opts.remote,
    dt = opts.dt or 1 / 60}, Session)
end

local function world_of(self)
  local w = rawget(self.env, "world")
  if w == nil then return nil end
  local ok = pcall(World.count, w)
  return ok and w or nil
end

-- Runs fn with print captured; returns ok, text.
function Session:call(fn, ...)
  local out = {}
  local env = self.env
  local saved = rawget(env, "print")
  rawset(env, "print", function(...)
    local parts = table.pack(...)
    for i = 1, parts.n do parts[i] = tostring(parts[i]) end
    out[#out + 1] = table.concat(parts, "\t", 1, parts.n)
  end)
  local results = table.pack(xpcall(fn, debug.traceback, ...))
  rawset(env, "print", saved)
  if not results[1] then
    -- The traceback down to the statement; the REPL's own frames say nothing useful.
    local text = tostring(results[2]):gsub("\n%s*%[C%]: in function 'xpcall'.*$", "")
    out[#out + 1] = text
    return false, table.concat(out, "\n")
  end
  local w = world_of(self)
  for i = 2, results.n do
    local ok, text = pcall(kiln.pretty, results[i], w)
    out[#out + 1] = ok and text or tostring(results[i])
  end
  return true, table.concat(out, "\n")
end

--- session:feed(line) -> status, text. status: "ok", "more" (statement incomplete),
-- "error", "quit", "run" (text is the frame rate), "pause".
function Session:feed(line)
  if not self.buffer and line:match("^%s*:") then return self:command(line) end
  local code = self.buffer and (self.buffer .. "\n" .. line) or line
  local fn, experr = load("return " .. code, "=stdin", "t", self.env)
  if not fn then
    local err
    fn, err = load(code, "=stdin", "t", self.env)
    if not fn then
      if err:match("<eof>$") or experr:match("<eof>$") then
        self.buffer = code
        return "more", ""
      end
      self.buffer = nil
      return "error", err
    end
  end
  self.buffer = nil
  local ok, text = self:call(fn)
  return ok and "ok" or "error", text
end

--- session:reset() drops a statement being continued.
function Session:reset() self.buffer = nil end

function Session:step(n)
  local w = world_of(self)
  if not w then return "error", "no world: set the global `world` first" end
  local lines = {}
  for _ = 1, n do
    local ok, failures = w:progress(self.dt)
    if not ok then
      for _, f in ipairs(failures) do
        lines[#lines + 1] = string.format("system %s failed: %s", f.system, f.message)
      end
    end
  end
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
  lines[#lines + 1] = string.format("tick %d, %d entities", w:tick(), w:count())
  return "ok", table.concat(lines, "\n")
end

local function stats_text(w)
  local st = w:stats()
  local frame, lua_ms = 0, 0
  for _, s in ipairs(w:systems()) do
    frame = frame + (s.last_ms or 0)
    if s.kind == "lua" then lua_ms = lua_ms + (s.last_ms or 0) end
  end
  return string.format(
    "entities   %d\narchetypes %d\ncomponents %d\nqueries    %d\nmemory     %.1f KiB\ntick       %d\nframe      %.3f ms (Lua %.3f ms)",
    st.entities, st.archetypes, st.components, st.queries, st.bytes / 1024, st.tick, frame, lua_ms)
end

function Session:command(line)
  local cmd, rest = line:match("^%s*:(%a+)%s*(.-)%s*$")
  if not cmd then return "error", "unknown command (try :help)" end
  if cmd == "help" then return "ok", HELP end
  if cmd == "quit" or cmd == "q" or cmd == "exit" then return "quit", "" end
  if cmd == "complete" then return "ok", table.concat(self:complete(rest), "\n") end
  local w = world_of(self)
  if cmd == "step" then
    if self.remote then return "error", ":step is not available here: the game runs its own frames" end
    local n = rest == "" and 1 or math.tointeger(tonumber(rest))
    if not n or n < 1 then return "error", ":step takes a positive number of frames" end
    return self:step(n)
  elseif cmd == "run" then
    if self.remote then return "error", ":run is not available here: the game runs its own frames" end
    local fps = rest == "" and 60 or tonumber(rest)
    if not fps or fps <= 0 or fps > 1000 then return "error", ":run takes a rate from 1 to 1000 frames per second" end
    if not w then return "error", "no world: set the global `world` first" end
    return "run", tostring(fps)
  elseif cmd == "pause" then
    return "pause", "paused"
  elseif cmd == "systems" then
    if not w then return "error", "no world" end
    local list = w:systems()
    if #list == 0 then return "ok", "no systems" end
    return "ok", kiln.systems_text(list)
  elseif cmd == "stats" then
    if not w then return "error", "no world" end
    return "ok", stats_text(w)
  elseif cmd == "load" then
    if rest == "" then return "error", ":load takes a file name" end
    local fn, err = loadfile(rest, "t", self.env)
    if not fn then return "error", err end
    local ok, text = self:call(fn)
    return ok and "ok" or "error", text
  elseif cmd == "watch" then
    if rest == "" then
      local lines = {}
      for i, e in ipairs(self.watches) do lines[i] = string.format("[%d] %s", i, e) end
      return "ok", #lines > 0 and table.concat(lines, "\n") or "no watches"
    end
    local fn, err = load("return " .. rest, "=watch", "t", self.env)
    if not fn then return "error", err end
    self.watches[#self.watches + 1] = rest
    return "ok", string.format("watching [%d] %s", #self.watches, rest)
  elseif cmd == "unwatch" then
    local i = math.tointeger(tonumber(rest))
    if not i or not self.watches[i] then return "error", ":unwatch takes a watch number" end
    table.remove(self.watches, i)
    return "ok", "removed"
  end
  return "error", "unknown command :" .. cmd .. " (try :help)"
end

-- ---- completion ------------------------------------------------------------------------

local KEYWORDS = {"and", "break", "do", "else", "elseif", "end", "false", "for", "function",
  "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"}

local function keys_of(v, out, seen)
  seen = seen or {}
  if seen[v] then return end
  seen[v] = true
  if type(v) == "table" then
    for k in pairs(v) do if type(k) == "string" then out[k] = true end end
  end
  local mt = getmetatable(v)
  if type(mt) == "table" then
    local idx = rawget(mt, "__index")
    if type(idx) == "table" then keys_of(idx, out, seen) end
  end
end

--- session:complete(line) -> candidates that replace the last word of line.
function Session:complete(line)
  local w = world_of(self)
  local out = {}
  -- Inside a string: component (and event-free) names, or field names after a component.
  local before, partial = line:match('^(.*)["\']([%w_%.]*)$')
  if before and select(2, before:gsub('["\']', "")) % 2 == 0 and w then
    for _, c in ipairs(w:components()) do
      if c.name:sub(1, #partial) == partial then out[#out + 1] = c.name end
    end
    table.sort(out)
    return out
  end
  -- A field name inside a table after a component string: world:set(e, "Position", {x
  local comp, field = line:match('["\']([%w_]+)["\']%s*,%s*{[^}]-([%w_]*)$')
  if comp and w then
    local info = w:component_info(comp)
    if info and info.fields then
      for _, f in ipairs(info.fields) do
        if f.name:sub(1, #field) == field then out[#out + 1] = f.name end
      end
      table.sort(out)
      return out
    end
  end
  -- a.b.c / a:b
  local path, sep, last = line:match("([%w_%.:]-)([%.:])([%w_]*)$")
  if path and path ~= "" then
    local v = self.env
    for name in path:gmatch("[^%.:]+") do
      if type(v) ~= "table" and type(v) ~= "userdata" then v = nil break end
      local ok, nv = pcall(function() return v[name] end)
      v = ok and nv or nil
      if v == nil then break end
    end
    if v ~= nil then
      local keys = {}
      keys_of(v, keys)
      for k in pairs(keys) do
        if k:sub(1, #last) == last and not k:match("^__") then out[#out + 1] = path .. sep .. k end
      end
      table.sort(out)
    end
    return out
  end
  local word = line:match("([%w_]*)$") or ""
  local keys = {}
  keys_of(self.env, keys)
  for _, k in ipairs(KEYWORDS) do keys[k] = true end
  for k in pairs(keys) do
    if k:sub(1, #word) == word then out[#out + 1] = k end
  end
  table.sort(out)
  return out
end
