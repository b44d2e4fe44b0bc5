-- fuzz/num.lua: the integer tests and byte images the fuzz model needs, the same under Lua 5.4
-- and LuaJIT. LuaJIT's numbers are doubles: there an integer is what compat.h takes for one, an
-- integral double in [-2^63, 2^63), and the model keeps to values doubles hold exactly.
local N = {}

N.luajit = type(jit) == "table"
-- Under LuaJIT the ends of the int64 range as doubles: 2^63 is one past the largest integer.
N.maxinteger = math.maxinteger or 2 ^ 63
N.mininteger = math.mininteger or -2 ^ 63

-- math.type: "integer", "float", or nil for anything but a number.
N.mtype = math.type or function(v)
    if type(v) ~= "number" then return nil end
    if v == math.floor(v) and v >= -2 ^ 63 and v < 2 ^ 63 then return "integer" end
    return "float"
end

-- math.tointeger: numbers, and strings that convert to one (as lua_tointegerx).
N.tointeger = math.tointeger or function(v)
    if type(v) == "string" then v = tonumber(v) end
    if N.mtype(v) == "integer" then return v end
    return nil
end

N.rawlen = rawlen or function(t) return #t end -- LuaJIT's # ignores __len on tables
N.pack = table.pack or function(...) return {n = select("#", ...), ...} end
N.unpack = table.unpack or unpack

-- x // y, x << k, x >> k and x & (2^k - 1) on integers (x >= 0 for the last two) the model
-- keeps below 2^53; under Lua 5.4 the results are integers, as the operators give.
local toint = math.tointeger or function(x) return x end
function N.idiv(x, y) return math.floor(x / y) end
function N.shl(x, k) return toint(x * 2 ^ k) end
function N.shr(x, k) return math.floor(x / 2 ^ k) end
function N.low_bits(x, k) return toint(x % 2 ^ k) end

-- (seed * 1103515245 + 12345) & 0x7fffffff, exactly, with seed below 2^31.
function N.lcg(seed)
    local lo = seed * (1103515245 % 65536) -- below 2^47
    local hi = (seed * math.floor(1103515245 / 65536)) % 32768 -- its product times 2^16, mod 2^31
    return (lo + hi * 65536 + 12345) % 2147483648
end

-- The float nearest to v, and the little-endian bytes of an int64, a float and a double.
if string.pack then
    function N.f32(v) return (string.unpack("f", string.pack("f", v))) end
    function N.i8_bytes(v) return string.pack("<i8", v) end
    function N.f32_bytes(v) return string.pack("<f", v) end
    function N.f64_bytes(v) return string.pack("<d", v) end
else
    local ffi = require "ffi"
    assert(ffi.abi("le"), "fuzz/num.lua: the byte images are little-endian")
    local f, d, i = ffi.new("float[1]"), ffi.new("double[1]"), ffi.new("int64_t[1]")
    function N.f32(v)
        f[0] = v
        return f[0]
    end
    function N.i8_bytes(v)
        i[0] = v
        return ffi.string(i, 8)
    end
    function N.f32_bytes(v)
        f[0] = v
        return ffi.string(f, 4)
    end
    function N.f64_bytes(v)
        d[0] = v
        return ffi.string(d, 8)
    end
end

return N
