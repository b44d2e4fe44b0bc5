-- check_layout.lua: checks the layering rules the folders promise, so they cannot drift:
-- the core never names the transform addon, the binding's files call each other without a
-- circle, internal prototypes live in headers only, and no source file passes the size limit.
-- usage: lua5.4 tools/check_layout.lua [ROOT]   (prints one line per check, then
-- "N passed, N failed"; exits 1 when any failed)
local root = (arg[1] or "."):gsub("/$", "")
-- "About 800 lines": past that a file is usually two concepts. The limit allows 5% over. A
-- layer's one public header (*/include/*.h: kiln.h is the whole core API by design) gets
-- 900, since "one public header per layer" outranks the size guideline there.
local MAX_LINES = 840
local MAX_HEADER_LINES = 900

local passed, failed = 0, 0
local function check(ok, what, detail)
    if ok then
        passed = passed + 1
        print("ok   " .. what)
    else
        failed = failed + 1
        print("FAIL " .. what .. (detail and (": " .. detail) or ""))
    end
end

package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/?.lua;" .. package.path
local read = require("textfile").read

-- Files under dir whose names end with one of the suffixes (sorted, recursive).
local function files(dir, suffixes)
    local out = {}
    local p = io.popen('find "' .. root .. "/" .. dir .. '" -type f 2>/dev/null')
    for path in p:lines() do
        for _, suffix in ipairs(suffixes) do
            if path:sub(-#suffix) == suffix then out[#out + 1] = path end
        end
    end
    p:close()
    table.sort(out)
    return out
end

-- 1. The core knows nothing of the transform addon.
do
    local hits = {}
    for _, path in ipairs(files("core", {".c", ".h"})) do
        local n = 0
        for line in read(path):gmatch("[^\n]*") do
            n = n + 1
            if line:lower():find("transform", 1, true) then hits[#hits + 1] = path:sub(#root + 2) .. ":" .. n end
        end
    end
    check(#hits == 0, "core/ never names transforms", table.concat(hits, ", "))
end

-- 2. No source file over MAX_LINES lines (tests included: one suite per topic).
do
    local long = {}
    for _, dir in ipairs({"core", "addons", "lua", "bench", "examples", "tools", "tests"}) do
        for _, path in ipairs(files(dir, {".c", ".h", ".lua"})) do
            local _, lines = read(path):gsub("\n", "")
            local limit = path:match("/include/[^/]+%.h$") and MAX_HEADER_LINES or MAX_LINES
            if lines > limit then long[#long + 1] = string.format("%s (%d)", path:sub(#root + 2), lines) end
        end
    end
    check(#long == 0, "no source file over " .. MAX_LINES .. " lines (a public header over " .. MAX_HEADER_LINES .. ")",
          table.concat(long, ", "))
end

-- 3. Internal prototypes only in headers: a .c file declares no hidden function of its own.
do
    local shadows = {}
    for _, dir in ipairs({"core", "addons", "lua"}) do
        for _, path in ipairs(files(dir, {".c"})) do
            local n = 0
            for line in read(path):gmatch("[^\n]*") do
                n = n + 1
                if line:find("^%s*K[LU]?A?_HIDDEN") or line:find("^%s*KL_HIDDEN") then
                    shadows[#shadows + 1] = path:sub(#root + 2) .. ":" .. n
                end
            end
        end
    end
    check(#shadows == 0, "no shadow prototypes in .c files", table.concat(shadows, ", "))
end

-- 4. The binding's files call each other without a circle.
do
    local defined, calls = {}, {}
    local sources = files("lua/src", {".c"})
    for _, path in ipairs(sources) do
        local s = read(path):gsub("/%*.-%*/", "")
        local name = path:match("([^/]+)$")
        calls[name] = {}
        -- a definition: the name at the start of a line (after its return type) before "{"
        for fn in s:gmatch("\n[%w_ %*]-[%s%*](klua_[%w_]+)%s*%b()%s*{") do defined[fn] = name end
        for fn in s:gmatch("\n(klua_[%w_]+)%s*%b()%s*{") do defined[fn] = name end
        for fn in s:gmatch("(klua_[%w_]+)%s*%(") do calls[name][fn] = true end
    end
    local edges = {}
    for file, fns in pairs(calls) do
        edges[file] = {}
        for fn in pairs(fns) do
            local d = defined[fn]
            if d and d ~= file then edges[file][d] = true end
        end
    end
    local state, cycle = {}, nil
    local function visit(f, path)
        state[f] = "open"
        for g in pairs(edges[f]) do
            if cycle then return end
            if state[g] == "open" then
                cycle = table.concat(path, " -> ") .. " -> " .. g
            elseif not state[g] then
                path[#path + 1] = g
                visit(g, path)
                path[#path] = nil
            end
        end
        state[f] = "done"
    end
    local names = {}
    for f in pairs(edges) do names[#names + 1] = f end
    table.sort(names)
    for _, f in ipairs(names) do
        if not state[f] and not cycle then visit(f, {f}) end
    end
    check(#names > 0 and cycle == nil, "no call circle among lua/src files (" .. #names .. " files)", cycle)
end

print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
