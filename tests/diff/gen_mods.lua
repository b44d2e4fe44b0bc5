-- gen_mods.lua: gen.lua's mod operations: mods written on the fly (components, entities,
-- queries, systems, faults), loaded, reloaded and unloaded by one manager over the world.
-- Mods run in LuaJIT's interpreter under LuaJIT and count instructions as each interpreter's
-- bytecode goes, so budgets are only ever met far from their edge: a loop that never ends
-- (instructions), strings kept without end (memory, hit long before the instructions its
-- allocations are charged), a string.rep refused before it runs; everything else stays
-- far below them. No wall clock (milliseconds = -1). Mod code prints through its own P (numbers
-- as doubles) and keeps its queries for good (the manager counts live queries, which the
-- collector closes at its own pace), so its log is the same text on both interpreters.
return function(G)
    local rand, chance, pick = G.rand, G.chance, G.pick

    -- The mods' own components: one schema each per seed, and another schema to be refused.
    local MOD_SHAPES = {
        {schema = "float x, y;", write = "a.x = a.x + 1; a.y = a.y * 0.5", bulk = "a.x[i] = a.x[i] * 2",
         init = "x = i, y = -i", bad = "x = 'a'"},
        {schema = "int32_t n; double d;", write = "a.n = a.n + 1; a.d = a.d + dt", bulk = "a.n[i] = a.n[i] - 1",
         init = "n = i, d = i * 0.5", bad = "n = 2^40"},
    }
    local MA = MOD_SHAPES[rand(#MOD_SHAPES)]
    local MB_SCHEMA = pick({"vec2 p; uint8_t k;", "float s;"})

    -- Host components a mod can reach (not "lua"-valued ones: their values live in the host).
    local host = {}
    for _, c in ipairs(G.comps) do if not c.shape.lua then host[#host + 1] = c end end

    -- What every mod begins with: P prints its arguments as the harness shows values.
    local PRELUDE = [[
local E = {}
local function S(v, d)
    local t = type(v)
    if t == "number" then return v ~= v and "nan" or string.format("%.17g", v) end
    if t == "function" or t == "userdata" or t == "thread" then return t end
    if t ~= "table" or (d or 0) > 4 then return t == "string" and string.format("%q", v) or tostring(v) end
    local k = {}
    for a, b in pairs(v) do k[#k + 1] = S(a, (d or 0) + 1) .. "=" .. S(b, (d or 0) + 1) end
    table.sort(k)
    return "{" .. table.concat(k, ",") .. "}"
end
local function P(...)
    local t = {}
    for i = 1, select("#", ...) do t[i] = S((select(i, ...))) end
    print(table.concat(t, " "))
end
local n = 0]]

    -- Memory without end: a new 4 KB string per turn (allocations are charged an instruction
    -- per 8 bytes), so the 1 MiB runs out at about a quarter of the instructions on both.
    local MEMORY_BOMB = "local t, s = {}, string.rep('x', 4000); while true do t[#t + 1] = s .. #t end"

    -- A run-system's statements: q is the mod's query over MA when it has one.
    local function run_lines(has_q, writes_host)
        local lines = {"n = n + 1"}
        for _ = 1, rand(3) do
            local pool = {
                "P('frame', n, math.random(100))",
                "P(pcall(world.spawn, world, {MA = {" .. MA.init:gsub("i", "n") .. "}}))",
                "world:emit('Ev', {x = n, n = n})",
                "local c = 0; for ev in world:events('Ev') do c = c + 1 end; P('events', c)",
                "if n == " .. rand(3) .. " then error('mod boom', 0) end",
                "if n >= " .. rand(3) .. " then while true do end end",
                "if n == " .. rand(3) .. " then " .. MEMORY_BOMB .. " end",
                "P(pcall(function() return io.open('x') end))",
                "P(type(io), type(debug), type(package), type(string.dump), type(loadstring), type(dofile))",
            }
            if has_q then
                pool[#pool + 1] = "for e, a in q:each() do " .. MA.write .. " end"
                pool[#pool + 1] = "q:bulk(function(cnt, ents, a) for i = 1, cnt do " .. MA.bulk .. " end end)"
                pool[#pool + 1] = "for e in q:each() do world:despawn(e); break end"
                pool[#pool + 1] = "for e in q:each() do P(pcall(world.set, world, e, 'MA', {" .. MA.bad .. "})); break end"
                pool[#pool + 1] = "P(q:count())"
                if writes_host then
                    local c = writes_host
                    pool[#pool + 1] = ("for e in q:each() do P(pcall(world.add, world, e, %q, %s)) end")
                        :format(c.name, G.comp_value(c, chance(0.2)))
                end
            end
            lines[#lines + 1] = pick(pool)
        end
        return table.concat(lines, "\n        ")
    end

    local function mod_source(name)
        local src = {PRELUDE}
        local function add(s) src[#src + 1] = s end
        local has_ma = chance(0.85)
        if has_ma then
            add(("world:component('MA', %q)"):format(chance(0.08) and MA.schema .. " int8_t extra;" or MA.schema))
        end
        if chance(0.4) then
            add(("P(pcall(world.component, world, 'MB', %q))"):format(chance(0.15) and "double other;" or MB_SCHEMA))
        end
        if chance(0.25) and #G.comps > 0 then -- a host component, with its schema or another
            local c = G.comps[rand(#G.comps)]
            add(("P(pcall(world.component, world, %q, %q))"):format(c.name, chance(0.5) and c.shape.schema or "int8_t q;"))
        end
        add(("P(mod.name, mod.version, math.random(1000), world:count(), world:tick())"))
        if has_ma then
            local extra = ""
            if #host > 0 and chance(0.5) then
                local c = host[rand(#host)]
                extra = (", %s = %s"):format(c.name, G.comp_value(c, chance(0.1)))
            end
            add(("for i = 1, %d do P(pcall(world.spawn, world, {MA = {%s}%s})) end"):format(rand(6), MA.init, extra))
            if chance(0.2) then add(("P(pcall(world.spawn, world, {MA = {%s}}))"):format(MA.bad)) end
            add("local q = world:query{'MA'}; KEEP = q") -- kept: list's count of queries is then the collector's
        end
        local writes_host = #host > 0 and chance(0.4) and host[rand(#host)] or nil
        for k = 1, rand(3) - 1 do
            local sname = ("%s_s%d"):format(name, k)
            local writes = {}
            if has_ma and chance(0.8) then writes[#writes + 1] = "'MA'" end
            if writes_host and chance(0.7) then writes[#writes + 1] = ("%q"):format(writes_host.name) end
            local decl = ("name = %q, writes = {%s}"):format(sname, table.concat(writes, ", "))
            if has_ma and chance(0.4) then
                add(("world:system{%s, query = {'MA'}, each = function(e, a, dt) %s%s end}")
                    :format(decl, MA.write, chance(0.2) and "; if a.y and a.y < -3 then error('row boom', 0) end" or ""))
            else
                add(("world:system{%s, run = function(w, dt)\n        %s\n    end}")
                    :format(decl, run_lines(has_ma, writes_host)))
            end
        end
        if name == "m1" and chance(0.7) then -- exports m4 imports (proxies run here, under m1's budget)
            add("mod.exports.v = {1, 2.5, 'z', {deep = true}}")
            add("mod.exports.f = function(a) n = n + 1; return a * 2, {a, 'x', n} end")
            if chance(0.3) then add("mod.exports.g = function() error('export boom', 0) end") end
            if chance(0.2) then add("mod.exports.h = function() while true do end end") end
            if chance(0.2) then add("mod.exports.k = function(t) return #t, t[1] end") end
        end
        if chance(0.25) then
            add(pick({
                "error('top boom', 0)",
                "while true do end",
                "io.open('x')",
                "local s = string.rep('x', 2^27)",
                MEMORY_BOMB,
                "world:progress(0)",
                "world:close()",
                "require('../x')",
                "setmetatable({}, {__gc = function() end})",
                "world:instructions(5)",
                "P(world:spawn{Nope = true})",
            }))
        end
        return table.concat(src, "\n")
    end

    local MODS = {"m1", "m2", "m3", "m1"} -- single files; m4 is a folder (mod_dep)
    local ALL = {"m1", "m2", "m3", "m4"}
    local ops = G.ops
    function ops.mod_load()
        local name = pick(MODS)
        return ("H.write(%q, [==[\n%s\n]==]); return H.modres(MODS:load(H.dir .. %q)), H.take()")
            :format(name .. ".lua", mod_source(name), "/" .. name .. ".lua")
    end
    function ops.mod_reload()
        local name = pick(MODS)
        return ("H.write(%q, [==[\n%s\n]==]); return H.modres(MODS:reload(%q)), H.take()")
            :format(name .. ".lua", mod_source(name), name)
    end
    function ops.mod_unload()
        return ("return H.modres(MODS:unload(%q%s)), H.take()"):format(pick(ALL), pick({"", ", {keep = true}"}))
    end
    function ops.mod_list()
        return ("return H.modlist(MODS:list()), H.modres(MODS:log(%q))"):format(pick(ALL))
    end
    -- m4: a folder mod that depends on m1 and calls its exports (copied values, proxies).
    function ops.mod_dep()
        local calls = {"P(pcall(m1.f, 21))", "P(pcall(m1.f, 1.5))", "P(pcall(m1.f, '4'))", "P(pcall(m1.g))",
            "P(pcall(m1.h))", "P(pcall(m1.k, {4, 5, 6}))", "P(pcall(m1.k, {print}))", "P(m1.v)"}
        local init = {PRELUDE, "local m1 = mod.import('m1')", "P('import', m1)"}
        for _ = 1, rand(3) do init[#init + 1] = pick(calls) end
        init[#init + 1] = ("world:system{name = 'm4_s1', run = function() n = n + 1; %s end}"):format(pick(calls))
        if chance(0.2) then init[#init + 1] = "P(pcall(mod.import, 'm2'))" end
        local manifest = ("return {name = 'm4', version = '%d', depends = {%s}}")
            :format(rand(3), chance(0.9) and "'m1'" or "'m1', 'nope'")
        return ("os.execute(\"mkdir -p '\" .. H.dir .. \"/m4'\"); H.write('m4/manifest.lua', %q)\n"
            .. "  H.write('m4/init.lua', [==[\n%s\n]==])\n  return H.modres(%s), H.take()")
            :format(manifest, table.concat(init, "\n"),
                chance(0.6) and "MODS:load(H.dir .. '/m4')" or "MODS:reload('m4')")
    end

    -- The host's own use of MA (a mod's component): spawns, and loops whose views may be FFI
    -- views under LuaJIT (both of MA's shapes read through FFI), reads before writes.
    function ops.mod_host()
        local field = MA.schema:match("^%a+%d*_?t? (%a+)")
        local value = field == "x" and pick({"0.5", "7", "-2"}) or pick({"7", "-2", "0"}) -- converts alike through FFI
        local loop = pick({
            ("for e, a in HQ:each() do H.reach(e, 'MA'); H.say(H.num(e) .. ':' .. H.num(a.%s)); a.%s = %s end")
                :format(field, field, value),
            ("HQ:bulk(function(n, ents, a) for i = 1, n do H.say(H.num(ents[i]) .. ':' .. H.num(a.%s[i])); a.%s[i] = %s end end)")
                :format(field, field, value),
            "H.say(H.res(pcall(w.spawn, w, {MA = {" .. MA.init:gsub("i", "3") .. "}})))",
            "H.say(HQ:count())",
        })
        return ("local ok, q = pcall(w.query, w, {'MA'}); if not ok then return q end\n"
            .. "  HQ = HQ or q; %s\n  return H.take()"):format(loop)
    end

    -- Frames with the mods' systems in them, and a manager call right after a loop left by
    -- break (under LuaJIT that loop ends only when the world or the manager is next used).
    function ops.mod_frames()
        if #G.queries > 0 and chance(0.3) then
            local j = rand(#G.queries)
            local reach = "" -- an FFI view stamps the row it reaches (gen.lua's loops say so too)
            if G.queries[j].ffi then
                local names = {}
                for i, c in ipairs(G.queries[j].terms) do names[i] = ("%q"):format(c.name) end
                reach = "H.reach(e, " .. table.concat(names, ", ") .. "); "
            end
            return ("for e in Q[%d]:each() do %sH.say(H.num(e)); break end\n  return %s, H.take()")
                :format(j, reach, pick({"H.modlist(MODS:list())", ("H.modres(MODS:reload(%q))"):format(pick(ALL)),
                    ("H.modres(MODS:unload(%q))"):format(pick(ALL))}))
        end
        return ("local t = {}; for i = 1, %d do local ok, f = w:progress(0.25); t[i] = tostring(ok) .. ' ' .. H.failures(f) end\n"
            .. "  return t, H.take()"):format(rand(3))
    end

    local setup = ([[
H.dir = os.tmpname(); os.remove(H.dir); os.execute("mkdir -p '" .. H.dir .. "'")
MODS = kiln.mods(w, {instructions = 400000, memory = 1024 * 1024, milliseconds = -1, entities = 40, seed = %d,
    log = function(mod, line) H.say(mod .. ': ' .. H.modmsg(line)) end})
local HQ]]):format(rand(1000))
    local weights = {{"mod_load", 3}, {"mod_reload", 2}, {"mod_unload", 1}, {"mod_list", 1}, {"mod_frames", 2}, {"mod_dep", 1}, {"mod_host", 2}}
    return setup, weights, {"MA", "MB"}
end
