-- apidoc.lua: rewrites the generated blocks of a Markdown page from the public C headers, so the
-- headers stay the one contract; every section of every header given must appear in a block.
--
-- usage: lua5.4 tools/apidoc.lua [--check] PAGE.md HEADER.h...   (paths from the repository root)
--   A block is  <!-- apidoc HEADER "Section" --> ... <!-- /apidoc -->  and receives that
--   section's declarations (in ```text fences) each followed by its comment as prose.
--   "Section" is the title of a banner comment; a block without one takes what comes before
--   the header's first banner. --check writes nothing and fails when the page is stale.

local check = false
local args = {}
for _, a in ipairs(arg) do
  if a == "--check" then check = true else args[#args + 1] = a end
end
if #args < 2 then
  io.stderr:write("usage: lua5.4 tools/apidoc.lua [--check] PAGE.md HEADER.h...\n")
  os.exit(2)
end

-- Paths are relative to the repository root (this file is ROOT/tools/apidoc.lua).
local root = (arg[0]:match("^(.*)/tools/[^/]*$") or (arg[0]:match("^tools/") and ".") or "..")
local function at_root(p) return p:sub(1, 1) == "/" and p or root .. "/" .. p end

local function fail(msg)
  io.stderr:write("apidoc: ", msg, "\n")
  os.exit(1)
end

local function read(p)
  local f, err = io.open(at_root(p), "rb")
  if not f then fail("cannot read " .. tostring(err)) end
  local s = f:read("a")
  f:close()
  return s
end

local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end

------------------------------------------------------------------------------------------------
-- Parsing a header: sections of entries; an entry is a leading comment and the code after it.
------------------------------------------------------------------------------------------------

-- The API part of a header: between the extern "C" opening and its closing.
local function api_lines(path, text)
  local lines = {}
  for line in (text .. "\n"):gmatch("(.-)\r?\n") do lines[#lines + 1] = line end
  local first, last
  for i, l in ipairs(lines) do
    if not first and l:match('^extern "C" {') then first = i + 2 end -- skip the #endif
    if first and i > first and l:match("^#ifdef __cplusplus") then last = i - 1 end
  end
  if not first or not last then
    fail(path .. ": no extern \"C\" block found (the API is read from inside it)")
  end
  local out = {}
  for i = first, last do out[#out + 1] = lines[i] end
  return out
end

-- Paragraphs: runs of lines separated by blank lines outside comments and braces.
local function paragraphs(lines)
  local list, cur = {}, {}
  local in_comment, depth = false, 0
  for _, l in ipairs(lines) do
    if l:match("^%s*$") and not in_comment and depth == 0 then
      if #cur > 0 then list[#list + 1] = cur; cur = {} end
    else
      cur[#cur + 1] = l
      -- Track comments and braces (code in these headers has no braces inside strings).
      local i = 1
      while i <= #l do
        local two = l:sub(i, i + 1)
        if in_comment then
          if two == "*/" then in_comment = false; i = i + 1 end
        elseif two == "/*" then in_comment = true; i = i + 1
        elseif two == "//" then break
        else
          local c = l:sub(i, i)
          if c == "{" then depth = depth + 1 elseif c == "}" then depth = depth - 1 end
        end
        i = i + 1
      end
    end
  end
  if #cur > 0 then list[#list + 1] = cur end
  return list
end

-- A banner: three comment lines, dashes / title / dashes, or one line /* ---- title ---- */.
local function banner_title(p)
  if #p == 3 and p[1]:match("^/%* %-%-%-%-+ %*/$") and p[3]:match("^/%* %-%-%-%-+ %*/$") then
    return trim(p[2]:match("^/%*(.-)%*/$") or "")
  end
  if #p == 1 then
    local t = p[1]:match("^/%* %-%-+ (.-) %-%-+ %*/$")
    if t then return trim(t) end
  end
end

-- Splits a paragraph into its leading comment (text without markers) and the code after it.
local function split_entry(p)
  local doc, code = {}, {}
  local i = 1
  if p[1]:match("^%s*/%*") then
    while i <= #p do
      local l = p[i]
      local closed = l:find("%*/")
      l = l:gsub("^%s*/%*+", ""):gsub("%*/.*$", ""):gsub("^%s*%* ?", "")
      doc[#doc + 1] = l
      i = i + 1
      if closed then break end
    end
  end
  for j = i, #p do code[#code + 1] = p[j] end
  return doc, code
end

-- A static inline function shows as its prototype; its body is not part of the contract.
local function shown_code(code)
  local text = table.concat(code, "\n")
  if text:match("^static inline") then
    local proto = text:match("^(.-)%s*{")
    if proto then return proto .. ";" end
  end
  return text
end

-- Names a block of code declares: functions, types, macros (for link anchors).
local function declared_names(code)
  local names, seen = {}, {}
  local function add(n) if n and not seen[n] then seen[n] = true; names[#names + 1] = n end end
  local text = shown_code(code)
  for line in (text .. "\n"):gmatch("(.-)\n") do
    add(line:match("^#define ([%w_]+)"))
    add(line:match("^typedef struct ([%w_]+) [%w_]+;"))
    add(line:match("^typedef struct ([%w_]+) {"))
    add(line:match("^typedef enum ([%w_]+) {"))
    add(line:match("^typedef union ([%w_]+) {"))
    add(line:match("^} ([%w_]+);"))
    add(line:match("^typedef [^(]-%(%*([%w_]+)%)"))
    add(line:match("^typedef [%w_ ]+ ([%w_]+);"))
    if not line:match("^%s") and not line:match("^typedef") and not line:match("^#") then
      add(line:match("([%w_]+)%(") )
    end
  end
  return names
end

-- Parses a header into an ordered list of sections {title =, entries = {{doc =, code =}}}.
-- The part before the first banner is the section with title "" (the header's own).
local function parse_header(path)
  local sections = { { title = "", entries = {} } }
  local by_title = { [""] = sections[1] }
  local index_names -- the "Functions in this header:" list, when the header has one
  for _, p in ipairs(paragraphs(api_lines(path, read(path)))) do
    local title = banner_title(p)
    if title then
      if by_title[title] then fail(path .. ": two sections titled \"" .. title .. "\"") end
      local s = { title = title, entries = {} }
      sections[#sections + 1] = s
      by_title[title] = s
    else
      local doc, code = split_entry(p)
      local joined = table.concat(doc, " ")
      if #code == 0 and joined:match("^%s*Functions in this header:") then
        -- the list runs to its closing period; prose may follow it in the same comment
        local list = joined:match("Functions in this header:(.-)%.%s") or joined:match("Functions in this header:(.*)$")
        index_names = {}
        for n in list:gmatch("[%w_]+") do index_names[n] = true end
      else
        local entries = sections[#sections].entries
        entries[#entries + 1] = { doc = doc, code = code }
      end
    end
  end
  if #sections[1].entries == 0 and #sections > 1 then table.remove(sections, 1); by_title[""] = nil end
  return { sections = sections, by_title = by_title, index = index_names }
end

------------------------------------------------------------------------------------------------
-- Rendering Markdown.
------------------------------------------------------------------------------------------------

-- Comment text as Markdown: code names in backticks (outside existing code spans), and no
-- line that Markdown would read as a heading, quote or rule.
local function prose(doc)
  local out = {}
  for _, l in ipairs(doc) do
    local parts, pos = {}, 1
    while pos <= #l do
      local s, e = l:find("`[^`]*`", pos)
      local plain = l:sub(pos, (s or #l + 1) - 1)
      plain = plain:gsub("%f[%w_]([%a_][%w_]*)", function(name)
        if name:match("^kiln_") or name:match("^KILN_") or name:match("^luaopen_")
            or name:match("^lua_") or name:match("^luaL_") or name:match("^glm_") then
          return "`" .. name .. "`"
        end
      end):gsub("`([%w_]+)`%(%)", "`%1()`")
      parts[#parts + 1] = plain
      if not s then break end
      parts[#parts + 1] = l:sub(s, e)
      pos = e + 1
    end
    local line = table.concat(parts)
    line = line:gsub("^(%s*)([#>=+|])", "%1\\%2")
    out[#out + 1] = line
  end
  return trim(table.concat(out, "\n"))
end

local function render_section(path, section)
  local out = {}
  for _, entry in ipairs(section.entries) do
    if #entry.code > 0 then
      local anchors = {}
      for _, n in ipairs(declared_names(entry.code)) do
        anchors[#anchors + 1] = string.format('<a id="%s"></a>', n)
      end
      if #anchors > 0 then out[#out + 1] = table.concat(anchors) end
      out[#out + 1] = "```text\n" .. shown_code(entry.code) .. "\n```"
    end
    local text = prose(entry.doc)
    if text ~= "" then out[#out + 1] = text end
  end
  return table.concat(out, "\n\n")
end

------------------------------------------------------------------------------------------------
-- The page: replace every block, then check that nothing of the headers is left out.
------------------------------------------------------------------------------------------------

local page_path = args[1]
local headers, parsed = {}, {}
for i = 2, #args do
  headers[#headers + 1] = args[i]
  parsed[args[i]] = parse_header(args[i])
end

local page = read(page_path)
local used = {}
local problems = {}
local count = 0
local new_page = page:gsub("(<!%-%- apidoc ([^\n]-) %-%->)\n(.-)(<!%-%- /apidoc %-%->)",
  function(open, spec, _, close)
    count = count + 1
    local header, title = spec:match('^(%S+)%s+"(.-)"$')
    if not header then header, title = spec:match("^(%S+)$"), "" end
    local h = header and parsed[header]
    if not h then
      problems[#problems + 1] = string.format("%s: block '%s' names a header not given on the command line", page_path, spec)
      return nil
    end
    local section = h.by_title[title]
    if not section then
      problems[#problems + 1] = string.format("%s: block '%s': %s has no section \"%s\"", page_path, spec, header, title)
      return nil
    end
    used[header .. "\0" .. title] = true
    local note = string.format("<!-- generated by tools/apidoc.lua from %s: edit the header, then `make docs` -->", header)
    return open .. "\n" .. note .. "\n\n" .. render_section(header, section) .. "\n\n" .. close
  end)

for _, header in ipairs(headers) do
  local h = parsed[header]
  for _, s in ipairs(h.sections) do
    if not used[header .. "\0" .. s.title] then
      problems[#problems + 1] = string.format(
        "%s: section \"%s\" of %s is in no block; add <!-- apidoc %s%s --> ... <!-- /apidoc -->",
        page_path, s.title, header, header, s.title == "" and "" or ' "' .. s.title .. '"')
    end
  end
  -- The header's own function index (cglm style) lists exactly the functions it declares.
  if h.index then
    -- Functions must be listed; a function-like macro may be (it reads like one).
    local declared, functions = {}, {}
    for _, s in ipairs(h.sections) do
      for _, e in ipairs(s.entries) do
        local code = shown_code(e.code)
        for _, n in ipairs(declared_names(e.code)) do
          declared[n] = true
          if not code:find("#define " .. n, 1, true) and code:find("[%s%*]" .. n .. "%(") then
            functions[n] = true
          end
        end
      end
    end
    for n in pairs(functions) do
      if not h.index[n] then
        problems[#problems + 1] = string.format("%s: %s is declared but missing from \"Functions in this header\"", header, n)
      end
    end
    for n in pairs(h.index) do
      if n:match("^kiln_") or n:match("^luaopen_") then
        if not declared[n] then
          problems[#problems + 1] = string.format("%s: \"Functions in this header\" lists %s, which it does not declare", header, n)
        end
      end
    end
  end
end
if count == 0 then problems[#problems + 1] = page_path .. ": no <!-- apidoc ... --> block" end

-- The hand-written prose must not drift either: every lowercase kiln_ name it quotes is
-- declared by a header given, and every #anchor link lands on a heading or a declaration.
-- (Read from the page as it is on disk, so line numbers match; only blocks are rewritten.)
local known, anchors = {}, {}
for _, header in ipairs(headers) do
  for _, s in ipairs(parsed[header].sections) do
    for _, e in ipairs(s.entries) do
      for _, n in ipairs(declared_names(e.code)) do known[n] = true; anchors[n] = true end
    end
  end
end
local in_block, in_fence, lineno = false, false, 0
for line in (page .. "\n"):gmatch("(.-)\n") do
  lineno = lineno + 1
  if line:match("^<!%-%- apidoc ") then in_block = true
  elseif line:match("^<!%-%- /apidoc %-%->") then in_block = false
  elseif not in_block then
    if line:match("^%s*```") or line:match("^%s*~~~") then in_fence = not in_fence
    elseif not in_fence then
      local heading = line:match("^#+%s+(.-)%s*$")
      if heading then
        anchors[heading:lower():gsub("[^%w%s_%-]", ""):gsub("%s", "-")] = true
      end
    end
  end
end
in_block, in_fence, lineno = false, false, 0
for line in (page .. "\n"):gmatch("(.-)\n") do
  lineno = lineno + 1
  if line:match("^<!%-%- apidoc ") then in_block = true
  elseif line:match("^<!%-%- /apidoc %-%->") then in_block = false
  elseif line:match("^%s*```") or line:match("^%s*~~~") then in_fence = not in_fence
  elseif not in_block and not in_fence then
    local text = line:gsub("%]%([^)]*%)", "]")  -- link targets are checked below, not as names
    for name, after in text:gmatch("%f[%w_](kiln_[%w_]*%w)(%.?%a?)") do
      if after ~= ".h" and not known[name] then
        problems[#problems + 1] = string.format(
          "%s:%d: names %s, which none of the headers declares (renamed or removed?)",
          page_path, lineno, name)
      end
    end
    for target in line:gmatch("%]%(#([^)%s]+)%)") do
      if not anchors[target] then
        problems[#problems + 1] = string.format(
          "%s:%d: links to #%s, which is neither a heading nor a declaration of the page",
          page_path, lineno, target)
      end
    end
  end
end

if #problems > 0 then
  table.sort(problems)
  fail(table.concat(problems, "\napidoc: "))
end

local regenerate = "lua5.4 tools/apidoc.lua " .. table.concat(args, " ") .. "   (or: make docs)"
if check then
  if new_page ~= page then
    local tmp = os.tmpname()
    local f = assert(io.open(tmp, "wb"))
    f:write(new_page)
    f:close()
    os.execute(string.format("diff -u '%s' '%s' | head -n 60 >&2", at_root(page_path), tmp))
    os.remove(tmp)
    fail(page_path .. " is out of date with the headers; regenerate it with\n    " .. regenerate)
  end
  print(page_path .. " is current with " .. table.concat(headers, ", "))
else
  if new_page ~= page then
    local f = assert(io.open(at_root(page_path), "wb"))
    f:write(new_page)
    f:close()
    print("apidoc: rewrote " .. count .. " blocks of " .. page_path)
  else
    print("apidoc: " .. page_path .. " was current")
  end
end
