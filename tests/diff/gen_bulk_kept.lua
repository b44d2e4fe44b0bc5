-- gen_bulk_kept.lua: gen.lua's q:bulk operation that keeps a field array past its call and
-- stores into it afterwards (misuse with a defined outcome, docs/lua-api.md "The bulk path").
-- Where the docs fix the outcome, the next call's fn sees the column (the arrays are filled
-- again; else "undocumented:"): a term with a field that is not a single float (shared arrays, filled per chunk), a
-- float-only term the first call wrote, or a first call that raised. Where they allow either
-- (a float-only term the first call only read keeps its arrays), each row must be one of the
-- two (the column, or the stored value as if fn had stored it); the transcript says only
-- whether every row was (a row that was neither raises "undocumented:", which run.lua fails
-- on whatever both interpreters did), and the rows are then set back to the column (which stamps them all)
-- so the world is the same whichever happened. Each operation makes its own query, dropped
-- after it, so kept arrays never reach a later operation; its first call only reads, so the
-- arrays the next call hands out may be kept ones (a query's first call never keeps them).
return function(G)
    local rand, chance, pick = G.rand, G.chance, G.pick
    local NUMERIC = {float = true, double = true, int8 = true, int16 = true, int32 = true,
        uint8 = true, uint16 = true, uint32 = true}

    function G.ops.bulk_kept()
        local cands = {}
        for j, q in ipairs(G.queries) do
            for k, c in ipairs(q.req) do
                for _, f in ipairs(c.shape.fields) do
                    if NUMERIC[f[2]] and not f[3] then cands[#cands + 1] = {j, k, c, f[1]} end
                end
            end
        end
        if #cands == 0 then return G.ops.bulk() end
        local j, k, c, field = table.unpack(cands[rand(#cands)])
        local q = G.queries[j]
        local all_floats = true
        for _, f in ipairs(c.shape.fields) do
            if f[2] ~= "float" or f[3] then all_floats = false end
        end
        local args = {}
        for i = 1, #q.terms do args[i] = "t" .. i end
        local how = pick({"read", "read", "write", "raise"})
        local first = ({
            read = "",
            write = ("t%d.%s[1] = t%d.%s[1] == 1 and 2 or 1"):format(k, field, k, field), -- always a change
            raise = "error('kept boom', 0)",
        })[how]
        local junk = pick({"7.5", "0.25", "3", "-0.0", "'1'", "1e39", "true", "100"})
        local fixed = not all_floats or how ~= "read"
        return ([==[
local q, K = w:query%s, nil
  local before = {}
  for _, e in ipairs(q:entities()) do before[e] = w:get(e, %q).%s end
  pcall(q.bulk, q, function() end) -- a first call that only reads: the next may keep its arrays
  local ok1 = H.res(pcall(q.bulk, q, function(n, ents, %s) K = {n = n, a = t%d.%s}; %s end))
  if K then for i = 1, K.n do K.a[i] = %s end end
  local rows, ends, neither, changed = 0, true, 0, 0
  local ok2 = H.res(pcall(q.bulk, q, function(n, ents, %s)
    if ents[n + 1] ~= nil then ends = false end
    for i = 1, n do
      local v, was = t%d.%s[i], before[ents[i]]
      rows = rows + 1
      if v ~= was then
        changed = changed + 1
        if v ~= %s then neither = neither + 1 end
      end
    end
  end))
  local after = 0
  for e, was in pairs(before) do
    if w:is_alive(e) and w:has(e, %q) and w:get(e, %q).%s ~= was then after = after + 1 end
  end
  if not ends then error("undocumented: the entities array holds more than n", 0) end
  if %s then
    if %s and changed > 0 then error("undocumented: the arrays were not filled again: " .. changed .. " rows", 0) end
    return ok1, ok2, rows, changed, after
  end
  if neither > 0 or after > changed then error("undocumented: rows neither the column nor the stored value", 0) end
  for e, was in pairs(before) do
    if w:is_alive(e) and w:has(e, %q) then w:set(e, %q, {%s = was}) end
  end
  return ok1, "either", rows]==])
            :format(q.text, c.name, field, table.concat(args, ", "), k, field, first, junk,
                table.concat(args, ", "), k, field, junk, c.name, c.name, field,
                tostring(fixed), tostring(how ~= "write"), c.name, c.name, field)
    end
end
