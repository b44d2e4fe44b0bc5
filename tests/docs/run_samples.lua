-- run_samples.lua: runs every ```c, ```cpp and ```lua code block of the given Markdown files.
-- A ```c block is a complete program (compiled against the build, run, must exit 0), and so
-- is a ```cpp block (a C++11 host, compiled by c++); a ```lua block runs under lua5.4 with the
-- built module on LUA_CPATH and must exit 0.
--
-- Usage (from the repository root):
--   lua5.4 tests/docs/run_samples.lua BUILD_DIR docs/*.md README.md
-- Prints one line per sample (file:line ok/FAILED, with the output of a failure) and ends
-- with "N passed, N failed"; exits non-zero when any sample failed. Other fences (```sh,
-- ```text, untagged) are not run.

local build = arg[1]
if not build or #arg < 2 then
  io.stderr:write("usage: lua5.4 tests/docs/run_samples.lua BUILD_DIR FILE.md...\n")
  os.exit(2)
end

-- The repository root, from where this script lives (tests/docs/run_samples.lua).
local script_dir = arg[0]:match("^(.*)/[^/]*$") or "."
local root = script_dir .. "/../.."
if script_dir == "tests/docs" then root = "." end

local function quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- Runs a shell command; returns ok (exit status 0) and its combined output.
local function run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1", "r"))
  local out = p:read("a")
  local ok, how, code = p:close()
  if not ok then
    if how == "signal" then out = out .. string.format("(killed by signal %d)\n", code)
    elseif code == 124 and cmd:match("^timeout ") then out = out .. "(timed out)\n"
    else out = out .. string.format("(exit status %s)\n", tostring(code)) end
  end
  return ok == true, out
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- One `timeout` per sample keeps a hanging sample from hanging the suite.
local has_timeout = run("command -v timeout >/dev/null")
local function limited(cmd, seconds)
  if has_timeout then return "timeout " .. seconds .. " " .. cmd end
  return cmd
end

local ok_tmp, tmpdir = run("mktemp -d")
tmpdir = tmpdir:gsub("%s+$", "")
if not ok_tmp or tmpdir == "" then
  io.stderr:write("run_samples: cannot make a temporary directory\n")
  os.exit(2)
end

local function write_file(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- Fenced blocks of a Markdown file: {tag =, line =, code =}. A fence is ``` or ~~~ (three
-- or more) at the start of a line, up to three spaces in; the block ends at a fence of the
-- same character at least as long. The tag is the first word of the info string.
local function blocks_of(path)
  local f, err = io.open(path, "r")
  if not f then return nil, err end
  local list, open = {}, nil
  local n = 0
  for line in f:lines() do
    n = n + 1
    if open then
      local indent, fence, rest = line:match("^( ? ? ?)([`~][`~][`~]+)(.*)$")
      if fence and fence:sub(1, 1) == open.char and not fence:find("[^" .. open.char .. "]")
          and #fence >= #open.fence and rest:match("^%s*$") then
        open.code = table.concat(open.lines, "\n") .. "\n"
        open.lines = nil
        list[#list + 1] = open
        open = nil
      else
        -- Strip the fence's own indentation from the content, as CommonMark does.
        local strip = open.indent
        local i = 1
        while i <= strip and line:sub(i, i) == " " do i = i + 1 end
        open.lines[#open.lines + 1] = line:sub(i)
      end
    else
      local indent, fence, info = line:match("^( ? ? ?)([`~][`~][`~]+)%s*(.-)%s*$")
      if fence and not fence:find("[^" .. fence:sub(1, 1) .. "]") then
        open = {tag = (info:match("^([%w_+-]+)") or ""):lower(), line = n, fence = fence,
          char = fence:sub(1, 1), indent = #indent, lines = {}}
      end
    end
  end
  f:close()
  if open then
    open.unterminated = true
    open.code = table.concat(open.lines, "\n") .. "\n"
    list[#list + 1] = open
  end
  return list
end

local lua_cflags = select(2, run("pkg-config --cflags lua5.4")):gsub("%s+$", "")
local lib_kiln = build .. "/libkiln.a"
local lib_lua = build .. "/libkiln_lua.a"
local module = build .. "/lua/kiln.so"

local compilers = {c = "cc -std=c11 -D_POSIX_C_SOURCE=200809L", cpp = "c++ -std=c++11 -Wextra -Wpedantic"}

local function run_c(code, id, tag)
  local src = string.format("%s/sample%d.%s", tmpdir, id, tag)
  local exe = string.format("%s/sample%d", tmpdir, id)
  write_file(src, code)
  local cmd = table.concat({
    compilers[tag], "-Wall -Werror",
    "-I" .. quote(root .. "/core/include"), "-I" .. quote(root .. "/addons/transform/include"),
    "-I" .. quote(root .. "/addons/persist/include"), "-I" .. quote(root .. "/lua"), lua_cflags,
    quote(src), quote(lib_lua), quote(lib_kiln), "-llua5.4 -ljansson -lm -lpthread", "-o", quote(exe),
  }, " ")
  local ok, out = run(cmd)
  if not ok then return false, "compile failed:\n" .. out end
  ok, out = run(limited(quote(exe), 60))
  return ok, out
end

local function run_lua(code, id)
  local src = string.format("%s/sample%d.lua", tmpdir, id)
  write_file(src, code)
  local cpath = build .. "/lua/?.so"
  return run(limited("env LUA_CPATH=" .. quote(cpath) .. " lua5.4 " .. quote(src), 60))
end

local missing = {}
if not exists(lib_kiln) then missing[#missing + 1] = lib_kiln end
if not exists(lib_lua) then missing[#missing + 1] = lib_lua end
if not exists(module) then missing[#missing + 1] = module end

local passed, failed, id = 0, 0, 0
local function report(where, ok, out)
  if ok then
    passed = passed + 1
    print(where .. ": ok")
  else
    failed = failed + 1
    print(where .. ": FAILED")
    out = (out or ""):gsub("%s+$", "")
    if out ~= "" then print((out:gsub("[^\n]+", "    %0"))) end
  end
end

for i = 2, #arg do
  local path = arg[i]
  local blocks, err = blocks_of(path)
  if not blocks then
    report(path, false, "cannot read: " .. tostring(err))
  else
    for _, b in ipairs(blocks) do
      if b.tag == "c" or b.tag == "cpp" or b.tag == "lua" then
        id = id + 1
        local where = string.format("%s:%d", path, b.line)
        if b.unterminated then
          report(where, false, "the code fence is never closed")
        elseif #missing > 0 then
          report(where, false, "not built: " .. table.concat(missing, ", ")
            .. " (make lib lua " .. build .. "/libkiln_lua.a)")
        elseif b.tag ~= "lua" then
          report(where, run_c(b.code, id, b.tag))
        else
          report(where, run_lua(b.code, id))
        end
      end
    end
  end
end

run("rm -rf " .. quote(tmpdir))
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
