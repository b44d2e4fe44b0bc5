-- apidoc_test.lua: what tools/apidoc.lua promises, tried on small headers and pages of its own:
-- blocks follow the header, --check catches drift and changes nothing, nothing is left out.
-- usage: lua5.4 tests/docs/apidoc_test.lua   (from anywhere; ends with "N passed, N failed")

local here = arg[0]:match("^(.*)/[^/]*$") or "."
local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function capture(cmd)
  local p = assert(io.popen(cmd .. " 2>&1", "r"))
  local out = p:read("a")
  local ok = p:close()
  return ok == true, out
end
local _, root = capture("cd " .. shell_quote(here .. "/../..") .. " && pwd")
root = root:gsub("%s+$", "")
local tool = root .. "/tools/apidoc.lua"
local _, dir = capture("mktemp -d")
dir = dir:gsub("%s+$", "")

local function write(name, text)
  local f = assert(io.open(dir .. "/" .. name, "wb"))
  f:write(text)
  f:close()
  return dir .. "/" .. name
end
package.path = root .. "/tools/?.lua;" .. package.path
local read = require("textfile").read
local function apidoc(...)
  local args = { "lua5.4", shell_quote(tool) }
  for _, a in ipairs({ ... }) do args[#args + 1] = shell_quote(a) end
  return capture(table.concat(args, " "))
end

local header_text = [[
/* demo.h: a header for the apidoc tests.
 * Two lines. */
#ifndef DEMO_H
#define DEMO_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Functions in this header:
 *   kiln_demo_open, kiln_demo_close, kiln_demo_size.
 */

#define KILN_DEMO_VERSION 3

/* ------------------------------------------------------------------------------------------ */
/* Opening                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Opens a demo; see kiln_demo_close. A NULL name means "default".
 * # not a heading */
int kiln_demo_open(const char *name);

/* Closes it. NULL is a no-op. */
void kiln_demo_close(int handle);

/* ---- sizes ---------------------------------------------------------------------------------- */

/* The size of a handle. */
static inline int kiln_demo_size(int handle) {
    return handle * 2;
}

#ifdef __cplusplus
}
#endif
#endif
]]

local page_text = [[
# Demo

Hand-written text stays exactly as it is.

<!-- apidoc HEADER -->
<!-- /apidoc -->

Between the blocks, too.

<!-- apidoc HEADER "Opening" -->
old text that goes away
<!-- /apidoc -->

<!-- apidoc HEADER "sizes" -->
<!-- /apidoc -->
]]

local passed, failed = 0, 0
local function test(name, fn)
  local ok, err = pcall(fn)
  if ok then
    passed = passed + 1
    print("ok: " .. name)
  else
    failed = failed + 1
    print("FAILED: " .. name .. "\n    " .. tostring(err):gsub("\n", "\n    "))
  end
end
local function expect(cond, msg) if not cond then error(msg, 2) end end

local header = write("demo.h", header_text)
local function fresh_page(text)
  return write("page.md", (text or page_text):gsub("HEADER", header))
end

test("a page with a block for every section is rewritten from the header, then checks current", function()
  local page = fresh_page()
  local ok, out = apidoc(page, header)
  expect(ok, "rewrite failed: " .. out)
  local text = read(page)
  expect(text:find("int kiln_demo_open(const char *name);", 1, true), "the declaration is missing")
  expect(text:find("Opens a demo; see `kiln_demo_close`.", 1, true), "the comment is not prose with code names in backticks")
  expect(not text:find("old text that goes away", 1, true), "the old block content stayed")
  expect(text:find("#define KILN_DEMO_VERSION 3", 1, true), "the part before the first banner is missing")
  ok, out = apidoc("--check", page, header)
  expect(ok, "--check failed right after a rewrite: " .. out)
end)

test("hand-written text outside the blocks is kept byte for byte", function()
  local page = fresh_page()
  assert(apidoc(page, header))
  local text = read(page)
  expect(text:sub(1, #"# Demo\n\nHand-written text stays exactly as it is.\n\n")
    == "# Demo\n\nHand-written text stays exactly as it is.\n\n", "the text before the first block changed")
  expect(text:find("<!-- /apidoc -->\n\nBetween the blocks, too.\n\n<!-- apidoc ", 1, true), "the text between blocks changed")
end)

test("a static inline function shows as its prototype, without its body", function()
  local page = fresh_page()
  assert(apidoc(page, header))
  local text = read(page)
  expect(text:find("static inline int kiln_demo_size(int handle);", 1, true), "no prototype")
  expect(not text:find("return handle * 2", 1, true), "the body leaked into the page")
end)

test("a comment line that Markdown would read as a heading is escaped", function()
  local page = fresh_page()
  assert(apidoc(page, header))
  expect(read(page):find("\n\\# not a heading", 1, true), "the # line is not escaped")
end)

test("--check fails on a stale page, names the command to regenerate, and changes nothing", function()
  local page = fresh_page()
  assert(apidoc(page, header))
  local before = read(page)
  write("demo.h", header_text:gsub("Closes it%.", "Closes it for good."))
  local ok, out = apidoc("--check", page, header)
  write("demo.h", header_text)
  expect(not ok, "--check passed on a stale page")
  expect(out:find("out of date", 1, true) and out:find("lua5.4 tools/apidoc.lua", 1, true),
    "the message does not say how to regenerate: " .. out)
  expect(out:find("Closes it for good.", 1, true), "the diff is not shown")
  expect(read(page) == before, "--check modified the page")
end)

test("a header section without a block fails and says which marker to add", function()
  local page = fresh_page(page_text:gsub('<!%-%- apidoc HEADER "sizes" %-%->\n<!%-%- /apidoc %-%->\n', ""))
  local ok, out = apidoc(page, header)
  expect(not ok, "a section left out was accepted")
  expect(out:find('section "sizes"', 1, true) and out:find('<!-- apidoc ' .. header .. ' "sizes" -->', 1, true),
    "the message does not name the section and its marker: " .. out)
end)

test("a block naming a section the header does not have fails", function()
  local page = fresh_page(page_text .. '\n<!-- apidoc HEADER "Closing" -->\n<!-- /apidoc -->\n')
  local ok, out = apidoc(page, header)
  expect(not ok and out:find('has no section "Closing"', 1, true), "accepted: " .. out)
end)

test("a block naming a header that is not given fails", function()
  local page = fresh_page(page_text .. '\n<!-- apidoc other.h -->\n<!-- /apidoc -->\n')
  local ok, out = apidoc(page, header)
  expect(not ok and out:find("other.h", 1, true), "accepted: " .. out)
end)

test("a page without any block fails", function()
  local page = write("page.md", "# Nothing here\n")
  local ok, out = apidoc(page, header)
  expect(not ok and out:find("no <!-- apidoc", 1, true), "accepted: " .. out)
end)

test("a function missing from the header's own index fails, and so does a listed one it lacks", function()
  write("demo.h", header_text:gsub("kiln_demo_open, kiln_demo_close, kiln_demo_size", "kiln_demo_open, kiln_demo_size, kiln_demo_gone"))
  local page = fresh_page()
  local ok, out = apidoc(page, header)
  write("demo.h", header_text)
  expect(not ok, "an index that disagrees with the header was accepted")
  expect(out:find("kiln_demo_close is declared but missing", 1, true), "the missing function is not named: " .. out)
  expect(out:find("lists kiln_demo_gone", 1, true), "the stray name is not named: " .. out)
end)

test("prose that names a function no header declares fails at its line", function()
  local page = fresh_page(page_text .. "\nCall `kiln_demo_open`, then `kiln_demo_shut` (see kiln_demo.h).\n")
  local ok, out = apidoc(page, header)
  expect(not ok, "a renamed function in the prose was accepted")
  local line = select(2, page_text:gsub("\n", "")) + 2
  expect(out:find(":" .. line .. ": names kiln_demo_shut", 1, true), "the name and line are not given: " .. out)
  expect(not out:find("kiln_demo_open,", 1, true) and not out:find("names kiln_demo\n", 1, true),
    "a declared name or a file name was reported: " .. out)
end)

test("a link to an anchor the page does not have fails; headings and declarations are anchors", function()
  local page = fresh_page(page_text .. "\nSee [open](#kiln_demo_open), [demo](#demo) and [gone](#kiln_demo_gone).\n")
  local ok, out = apidoc(page, header)
  expect(not ok and out:find("links to #kiln_demo_gone", 1, true), "a dead link was accepted: " .. out)
  expect(not out:find("#kiln_demo_open,", 1, true) and not out:find("links to #demo,", 1, true)
    and not out:find("links to #demo\n", 1, true), "a good link was reported: " .. out)
end)

test("a header without an extern \"C\" block is refused with the reason", function()
  local bare = write("bare.h", "int f(void);\n")
  local page = write("page.md", "<!-- apidoc " .. bare .. " -->\n<!-- /apidoc -->\n")
  local ok, out = apidoc(page, bare)
  expect(not ok and out:find('extern "C"', 1, true), "accepted: " .. out)
end)

capture("rm -rf " .. shell_quote(dir))
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
