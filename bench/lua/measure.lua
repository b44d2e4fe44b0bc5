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

return M
