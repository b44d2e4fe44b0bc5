-- callbacks_test.lua: every callback in the public headers takes its user pointer first, or is
-- one of the exceptions docs/c-api.md's "Callbacks" convention lists (and every one listed is).
-- usage: lua5.4 tests/docs/callbacks_test.lua PAGE HEADER...   (ends with "N passed, N failed")

local page, headers = arg[1], { table.unpack(arg, 2) }
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../../tools/?.lua;" .. package.path
local read = require("textfile").read

-- The names a user pointer parameter goes by in the headers.
local USER_NAMES = { ud = true, user = true, ctx = true, arg = true }

-- Each function pointer a header declares (typedef or struct member): name, parameter list.
local function callbacks(text)
  local found = {}
  text = text:gsub("/%*.-%*/", " "):gsub("//[^\n]*", " "):gsub("%s+", " ")
  for name, params in text:gmatch("%(%s*%*%s*([%w_]+)%s*%)%s*(%b())") do
    found[#found + 1] = { name = name, params = params:sub(2, -2) }
  end
  return found
end

-- The 1-based position of the user pointer among params, or nil when there is none.
local function user_position(params)
  local i = 0
  for param in (params .. ","):gmatch("([^,]*),") do
    i = i + 1
    local ptr, pname = param:match("^%s*(.-)([%w_]+)%s*$")
    if ptr and ptr:match("^void%s*%*%s*$") and USER_NAMES[pname] then return i end
  end
  return nil
end

local text = read(page)
local bullet = text:match("\n%- %*%*Callbacks%.%*%*(.-)\n%- ")
local listed = {}
local passed, failed = 0, 0
local function check(ok, message)
  if ok then passed = passed + 1 else failed = failed + 1; print("FAIL " .. message) end
end
check(bullet ~= nil, page .. " has no \"Callbacks\" convention")
local exceptions = bullet and bullet:match("exceptions(.-)%.%s") or ""
for name in exceptions:gmatch("`(kiln_[%w_]+_fn)`") do listed[name] = false end

for _, header in ipairs(headers) do
  for _, cb in ipairs(callbacks(read(header))) do
    local pos = user_position(cb.params)
    if listed[cb.name] ~= nil then
      listed[cb.name] = true
      check(pos ~= nil and pos > 1, cb.name .. " is listed as an exception but takes its user pointer first")
    elseif pos ~= nil then
      check(pos == 1, header .. ": " .. cb.name .. " takes its user pointer as parameter " .. pos ..
            " (the convention says first; list it in " .. page .. " only if it cannot change)")
    end
  end
end
for name, seen in pairs(listed) do check(seen, name .. " is listed as an exception but no header declares it") end
print(passed .. " passed, " .. failed .. " failed")
os.exit(failed == 0 and 0 or 1)
