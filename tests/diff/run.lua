-- run.lua [--build B] [--jit-build J] [--ops N] [--keep DIR] SEED[/OPS]... | FROM..TO: runs gen.lua's
-- program for each seed under lua5.4 (B/lua/kiln.so) and luajit (J/lua/kiln.so) and compares.
-- Differential test of issue 12's promise that scripts run unchanged on both interpreters:
-- each seed's two transcripts must be equal line for line. A difference prints the seed, the
-- first differing operation (both lines) and the program's text of that operation; the
-- program and the transcripts are kept in DIR (default build/diff) to rerun by hand. A run
-- that crashes or stops early is a difference too, and so is an outcome the program found
-- the docs do not allow ("undocumented:" in a line) even when both interpreters agree.
-- Ends with "N passed, N failed".
local here = arg[0]:match("^(.*[/\\])") or "./"
local build, jit_build, ops, keep = "build", "build-jit", 150, nil
local seeds = {}
local i = 1
while arg[i] do
    local a = arg[i]
    if a == "--build" then build = arg[i + 1]; i = i + 1
    elseif a == "--jit-build" then jit_build = arg[i + 1]; i = i + 1
    elseif a == "--ops" then ops = tonumber(arg[i + 1]); i = i + 1
    elseif a == "--keep" then keep = arg[i + 1]; i = i + 1
    else
        local from, to = a:match("^(%d+)%.%.(%d+)$")
        if from then
            for s = tonumber(from), tonumber(to) do seeds[#seeds + 1] = s end
        else -- SEED/OPS: a regression seed keeps the length it was found with
            local seed, n = a:match("^(%d+)/(%d+)$")
            seeds[#seeds + 1] = seed and {tonumber(seed), tonumber(n)} or assert(tonumber(a), "seed expected, got " .. a)
        end
    end
    i = i + 1
end
keep = keep or (build .. "/diff")
os.execute("mkdir -p '" .. keep .. "'")

local function sh(cmd)
    local p = assert(io.popen(cmd .. " 2>&1", "r"))
    local text = p:read("*a")
    local ok, how, code = p:close()
    return text, ok == true or (ok == 0), code
end

local function lines(text)
    local t = {}
    for l in (text .. "\n"):gmatch("(.-)\n") do t[#t + 1] = l end
    if t[#t] == "" then t[#t] = nil end
    return t
end

-- The text of operation n in the program (from its "-- op n:" line to the next).
local function op_text(prog, n)
    local from = prog:find("\n%-%- op " .. n .. ":")
    if not from then return "(setup)" end
    local to = prog:find("\n%-%- op ", from + 1) or #prog
    return prog:sub(from + 1, to - 1)
end

local passed, failed = 0, 0
local done = {} -- a regression seed also in the range runs once
for _, seed in ipairs(seeds) do
    local ops = ops
    if type(seed) == "table" then seed, ops = seed[1], seed[2] end
    if done[seed .. "/" .. ops] then goto next end
    done[seed .. "/" .. ops] = true
    local prog_path = ("%s/seed-%d.lua"):format(keep, seed)
    local prog, ok = sh(("lua5.4 %sgen.lua %d %d > '%s'"):format(here, seed, ops, prog_path))
    assert(ok, "gen.lua failed: " .. prog)
    local f = assert(io.open(prog_path))
    prog = f:read("*a")
    f:close()
    local a, a_ok = sh(("LUA_CPATH='%s/lua/?.so;;' lua5.4 '%s'"):format(build, prog_path))
    local b, b_ok = sh(("LUA_CPATH='%s/lua/?.so;;' luajit '%s'"):format(jit_build, prog_path))
    for name, text in pairs({lua = a, jit = b}) do
        local o = assert(io.open(("%s/seed-%d.%s.txt"):format(keep, seed, name), "w"))
        o:write(text)
        o:close()
    end
    local la, lb = lines(a), lines(b)
    local bad
    for k = 1, math.max(#la, #lb) do
        if la[k] ~= lb[k] then bad = k; break end
    end
    if not bad and not (a_ok and b_ok) then bad = #la + 1 end
    if not bad then -- an outcome the docs do not allow, though the same on both
        for k = 1, #la do if la[k]:find("undocumented:", 1, true) then bad = k; break end end
    end
    if not bad and not (la[#la] or ""):match("^" .. ops .. " ") then bad = #la + 1 end
    if bad then
        failed = failed + 1
        local n = tonumber((la[bad] or lb[bad] or ""):match("^(%-?%d+) ")) or bad
        print(("FAILED: seed %d differs at operation %d (%s/seed-%d.lua)"):format(seed, n, keep, seed))
        local x, y = la[bad] or "", lb[bad] or ""
        local at = 1
        while at <= #x and x:byte(at) == y:byte(at) do at = at + 1 end
        local function window(t) -- a long line: 120 bytes before the first difference, 200 after
            if #t <= 400 then return t end
            return (at > 121 and "..." or "") .. t:sub(math.max(1, at - 120), at + 200) .. (#t > at + 200 and "..." or "")
        end
        print("  lua5.4: " .. window(x) .. (a_ok and "" or "  [exited with an error]"))
        print("  luajit: " .. window(y) .. (b_ok and "" or "  [exited with an error]"))
        print("  " .. op_text(prog, n):gsub("\n", "\n  "))
    else
        passed = passed + 1
    end
    ::next::
end
print(("%d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and 0 or 1)
