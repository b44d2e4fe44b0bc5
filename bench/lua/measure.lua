-- measure.lua: what the Lua benchmark scripts share: their argument parser, medians of
-- alternating samples, and the results file's JSON lines. Loaded with dofile beside them.
local M = {}

-- Parses arg by spec (option -> "flag" | "value" | "number"); exits 2 naming script on a
-- bad or unknown argument. Returns the options (by name without the dashes).
function M.args(script, spec, defaults)
    local opts = {}
    for k, v in pairs(defaults or {}) do opts[k] = v end
    local i = 1
    while i <= #arg do
        local a = arg[i]
        local kind = spec[a]
        if not kind then
            io.stderr:write(script, ": unknown argument '", tostring(a), "'\n")
            os.exit(2)
        end
        local key = a:gsub("^%-%-", "")
        if kind == "flag" then
            opts[key] = true
        else
            i = i + 1
            if arg[i] == nil then
                io.stderr:write(script, ": ", a, " needs a value\n")
                os.exit(2)
            end
            opts[key] = arg[i]
            if kind == "number" then
                opts[key] = tonumber(arg[i])
                if not opts[key] or opts[key] < 1 then
                    io.stderr:write(script, ": ", a, " needs a positive number\n")
                    os.exit(2)
                end
            end
        end
        i = i + 1
    end
    return opts
end

function M.median(list)
    local s = {}
    for i = 1, #list do s[i] = list[i] end
    table.sort(s)
    local n = #s
    local half = math.floor(n / 2) -- no //: LuaJIT runs these benchmarks too
    if n % 2 == 1 then return s[half + 1] end
    return (s[half] + s[half + 1]) / 2
end

-- Runs subject and baseline repeats times each, alternating, after one warm-up each (first
-- use growth and allocator warm-up stay out of the samples); each returns the seconds of one
-- sample, scale turns them into the unit reported. Returns the two medians.
function M.compare(repeats, subject, baseline, scale)
    local s, b = {}, {}
    subject()
    baseline()
    for r = 1, repeats do
        collectgarbage("collect")
        s[r] = subject() * scale
        collectgarbage("collect")
        b[r] = baseline() * scale
    end
    return M.median(s), M.median(b)
end

-- Appends one {"case", "ns", "baseline_ns", "ratio"} line per result to path.
function M.write_json(path, results)
    local f = assert(io.open(path, "a"))
    for _, r in ipairs(results) do
        f:write(string.format('{"case": "%s", "ns": %.4f, "baseline_ns": %.4f, "ratio": %.4f}\n', r.case,
            r.ns, r.baseline_ns, r.ratio))
    end
    f:close()
end

-- Runs each case {name, fn} of cases, or only the one named selected; exits with status 2,
-- naming script, when selected names none of them.
function M.run_cases(script, cases, selected)
    local ran = false
    for _, c in ipairs(cases) do
        if not selected or selected == c[1] then
            c[2]()
            ran = true
        end
    end
    if not ran then
        io.stderr:write(script, ": unknown case '", tostring(selected), "'\n")
        os.exit(2)
    end
end

local function fmt(v)
    if v >= 1e6 then return string.format("%.0f", v) end
    if v >= 100 then return string.format("%.1f", v) end
    return string.format("%.3f", v)
end

-- Prints title, then one row per result ({case, ns, baseline_ns, ratio, unit, goal, pass,
-- note}) and the informational rows after them.
function M.report(title, results, infos)
    local function row(r)
        local verdict = r.pass == nil and "" or (r.pass and "PASS" or "MISS")
        print(string.format("%-44s %14s %14s %9s  %-10s %-13s %s%s", r.case, fmt(r.ns), fmt(r.baseline_ns),
            string.format("%.3f", r.ratio), r.unit or "", r.goal or "", verdict,
            r.note and ("  (" .. r.note .. ")") or ""))
    end
    print(title)
    print(string.format("%-44s %14s %14s %9s  %-10s %-13s %s", "case", "ns", "baseline_ns", "ratio", "unit",
        "goal", "result"))
    for _, r in ipairs(results) do row(r) end
    if infos and #infos > 0 then
        print("informational (not written to the JSON file):")
        for _, r in ipairs(infos) do row(r) end
    end
end

return M
