-- fuzz/gen.lua: random choices and malformed values for the kiln fuzz test.
-- Every draw goes through math.random, so a run is fully determined by its seed.
local N = require "fuzz.num"
local gen = {}

local R = math.random

function gen.chance(p) return R() < p end

function gen.int(lo, hi) return R(lo, hi) end

function gen.pick(list) return list[R(#list)] end

-- Picks a key of a {key = weight} table; keys are visited in sorted order so that the
-- choice does not depend on the table's (hash-seeded) traversal order.
function gen.weighted(weights)
    local keys, total = {}, 0
    for k, w in pairs(weights) do
        keys[#keys + 1] = k
        total = total + w
    end
    table.sort(keys)
    local x = R() * total
    for _, k in ipairs(keys) do
        x = x - weights[k]
        if x < 0 then return k end
    end
    return keys[#keys]
end

-- A random subset of list (order kept), each element kept with probability p.
function gen.subset(list, p)
    local out = {}
    for _, v in ipairs(list) do
        if R() < p then out[#out + 1] = v end
    end
    return out
end

function gen.shuffle(list)
    for i = #list, 2, -1 do
        local j = R(i)
        list[i], list[j] = list[j], list[i]
    end
    return list
end

-- Numbers at the edges of every field type and of Lua's own number types.
gen.edge_numbers = {
    0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769, 65535, 65536,
    2147483647, 2147483648, -2147483648, -2147483649, 4294967295, 4294967296,
    N.maxinteger, N.mininteger, N.maxinteger - 1, 2 ^ 53, -(2 ^ 53), 2 ^ 63, 2 ^ 64,
    0.5, -0.5, 1.5, -0.0, 1 / 0, -1 / 0, 0 / 0, 1e300, -1e300, 1e-300, 5e-324,
    3.4028234663852886e38, 3.4028235677973366e38, -3.4028235677973366e38, 1e39, 1e38,
    3.0, -7.0, 1e15, 123456789.125,
}

gen.edge_strings = {
    "", "x", "y", "Pos", "Tag", "12", "0x10", " 7 ", "1e2", "-3", "nan", "inf", "\0", "a\0b",
    "kiln.lua", "Parent", "LocalTransform", "WorldTransform", "Script",
    string.rep("n", 63), string.rep("n", 64), string.rep("z", 300), "\255\254", "é",
}

local function plain_garbage()
    local k = R(6)
    if k == 1 then return gen.pick(gen.edge_numbers) end
    if k == 2 then return gen.pick(gen.edge_strings) end
    if k == 3 then return R(-1000, 1000) end
    if k == 4 then return (R() - 0.5) * 10 ^ R(-5, 40) end
    if k == 5 then return R() < 0.5 end
    return nil
end

-- Tables whose metamethods raise or answer nonsense (never ones that touch a world).
local function odd_table()
    local k = R(5)
    if k == 1 then return setmetatable({}, {__index = function() error("odd __index", 0) end}) end
    if k == 2 then return setmetatable({}, {__index = function(_, key) return key end}) end
    if k == 3 then return setmetatable({x = 1}, {__newindex = function() error("odd __newindex", 0) end}) end
    if k == 4 then
        local t = {}
        t.self = t
        t[1] = t
        return t
    end
    return setmetatable({}, {__len = function() return 1e9 end, __pairs = function() error("odd __pairs", 0) end})
end

-- Any Lua value, favouring the shapes an API does not expect. extra: a list of userdata
-- and other live objects (worlds, queries, command buffers) to mix in.
function gen.garbage(extra, depth)
    depth = depth or 0
    local k = R(20)
    if k <= 8 then return plain_garbage() end
    if k <= 10 and depth < 3 then
        local t = {}
        for _ = 1, R(0, 4) do
            local key = R() < 0.6 and gen.pick({"x", "y", "z", "w", "hp", "on", "tag", "dir", "arr", "m", 1, 2})
                or plain_garbage()
            if key ~= nil and key == key then t[key] = gen.garbage(extra, depth + 1) end
        end
        return t
    end
    if k == 11 then return odd_table() end
    if k == 12 then return function() end end
    if k == 13 then return function() error("garbage function raised", 0) end end
    if k == 14 then return coroutine.create(function() end) end
    if k == 15 then return io.stdout end
    if k == 16 then return string.rep("s", R(0, 40)) end
    if extra and #extra > 0 then return extra[R(#extra)] end
    return {}
end

return gen
