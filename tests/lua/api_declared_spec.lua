-- api_declared_spec.lua: the API the module has at run time is the API its documents give.
-- docs/kiln.d.lua (what editors complete) declares every function of the kiln table and
-- every method of every class, and nothing the module lacks; the reference names each
-- (docs/lua-api.md, and docs/modding.md for the mod manager's).
local kiln = require "kiln"

local root = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "../../"

local function read(path)
    local f = assert(io.open(root .. path, "rb"))
    local text = f:read("*a")
    f:close()
    return text
end

-- {class = {method = true}} from the annotations: "---@class kiln.World" then
-- "local World = {}" ties the local to the class; "function World:m(" declares a method,
-- "function kiln.f(" a module function (class "kiln").
local function declared(text)
    local out, class_of, current = {kiln = {}}, {}, nil
    for line in text:gmatch("[^\n]+") do
        local class = line:match("^%-%-%-@class kiln%.(%u%w*)%s*$")
        if class then current = class end
        local name = line:match("^local (%u%w*) = {}")
        if name then
            class_of[name] = current
            out[current] = out[current] or {}
        end
        local owner, method = line:match("^function (%u%w*):([%w_]+)%(")
        if owner then
            assert(class_of[owner], "kiln.d.lua: method of an unknown local " .. owner)
            out[class_of[owner]][method] = true
        end
        local fn = line:match("^function kiln%.([%w_]+)%(")
        if fn then out.kiln[fn] = true end
    end
    return out
end

-- The sorted field names "---@field" lines give class kiln.NAME in text.
local function fields(text, class)
    local list, inside = {}, false
    for line in text:gmatch("[^\n]+") do
        if line:match("^%-%-%-@class ") then
            inside = line:match("^%-%-%-@class kiln%.(%u%w*)%s*$") == class
        elseif inside and line:match("^%-%-%-@field ") then
            list[#list + 1] = line:match("^%-%-%-@field ([%w_]+)")
        elseif not line:match("^%-%-%-") then
            inside = false
        end
    end
    table.sort(list)
    return list
end

-- One object of every class the module hands out, each made the documented way.
local function objects()
    local w = kiln.world()
    w:component("P", "float x;")
    w:spawn{P = {x = 1}}
    return {
        World = w,
        Query = w:query{"P"},
        Commands = kiln.commands(),
        Snapshot = w:snapshot(),
        Prefab = w:prefab{components = {P = {x = 2}}},
        Instance = w:instantiate('{"version": 1, "entities": [{"components": {"P": {"x": 3}}}]}'),
        Session = kiln.session{world = w},
        Mods = kiln.mods(w),
    }
end

-- The functions reachable through a value's metatable: its __index table's, or nil where
-- nothing can be listed (an __index function; under LuaJIT the public metatable's __index is
-- a read-only proxy, whose pairs lists nothing).
local function methods_of(value)
    local index = getmetatable(value).__index
    if type(index) ~= "table" then return nil end
    local out = {}
    for k, v in pairs(index) do
        if type(v) == "function" then out[k] = true end
    end
    return next(out) and out or nil
end

local function sorted_keys(set)
    local list = {}
    for k in pairs(set) do list[#list + 1] = k end
    table.sort(list)
    return list
end

-- Fails naming what the run time has undeclared (missing) and what is declared but absent.
local function same_as_declared(missing, extra)
    table.sort(missing)
    table.sort(extra)
    assert.are.same({}, missing, "undeclared in kiln.d.lua")
    assert.are.same({}, extra, "declared in kiln.d.lua, absent at run time")
end

describe("the documented Lua API", function()
    local decl = declared(read("docs/kiln.d.lua"))
    local reference = read("docs/lua-api.md") .. read("docs/modding.md")
    local objs = objects()

    it("finds a declaration for every class it checks", function()
        for class in pairs(objs) do
            assert.is_table(decl[class], "kiln.d.lua declares no class kiln." .. class)
        end
    end)

    it("declares every function of the kiln table, and only those", function()
        local missing, extra = {}, {}
        for k, v in pairs(kiln) do
            if type(v) == "function" and not decl.kiln[k] then missing[#missing + 1] = k end
        end
        for k in pairs(decl.kiln) do
            if type(kiln[k]) ~= "function" then extra[#extra + 1] = k end
        end
        same_as_declared(missing, extra)
    end)

    it("declares every method of every class, and only those", function()
        local missing, extra = {}, {}
        for class, value in pairs(objs) do
            local have = methods_of(value)
            for m in pairs(decl[class] or {}) do
                local ok, v = pcall(function() return value[m] end)
                if not ok or type(v) ~= "function" then extra[#extra + 1] = class .. ":" .. m end
            end
            for _, m in ipairs(have and sorted_keys(have) or {}) do
                if not (decl[class] or {})[m] then missing[#missing + 1] = class .. ":" .. m end
            end
        end
        same_as_declared(missing, extra)
    end)

    it("names every function and method in the reference", function()
        local unnamed = {}
        for k, v in pairs(kiln) do
            if type(v) == "function" and not reference:find("kiln." .. k .. "(", 1, true) then
                unnamed[#unnamed + 1] = "kiln." .. k
            end
        end
        for class, value in pairs(objs) do
            for _, m in ipairs(sorted_keys(methods_of(value) or decl[class] or {})) do
                if not (reference:find(":" .. m .. "(", 1, true) or reference:find(":" .. m .. "{", 1, true)
                        or reference:find(":" .. m .. "`", 1, true)) then
                    unnamed[#unnamed + 1] = class .. ":" .. m
                end
            end
        end
        table.sort(unnamed)
        assert.are.same({}, unnamed, "not named in docs/lua-api.md or docs/modding.md")
    end)

    it("lists the methods of every class but kiln.Instance under Lua 5.4", function()
        if type(jit) == "table" then return end -- the Lua 5.4 run checks that direction
        for class, value in pairs(objs) do
            if class ~= "Instance" then assert.is_table(methods_of(value), class) end
        end
    end)

    it("declares the keys every options table accepts", function()
        local cases = {
            WorldOptions = function(bad) return kiln.world(bad) end,
            ModsOptions = function(bad) return kiln.mods(kiln.world(), bad) end,
            SessionOptions = function(bad) return kiln.session({}, bad) end,
            SystemDesc = function(bad) return kiln.world():system(bad) end,
        }
        local text = read("docs/kiln.d.lua")
        for class, call in pairs(cases) do
            local ok, err = pcall(call, {["?"] = 1})
            assert.is_false(ok, class)
            local accepted = {}
            for key in assert(tostring(err):match("%(expected ([^)]*)%)"), err):gmatch("[%w_]+") do
                accepted[#accepted + 1] = key
            end
            table.sort(accepted)
            assert.are.same(accepted, fields(text, class), "kiln." .. class .. "'s fields")
        end
    end)

    it("can fail: a method the annotations lack is reported", function()
        local partial = declared("---@class kiln.Query\nlocal Query = {}\nfunction Query:count() end\n")
        assert.is_true(partial.Query.count)
        assert.is_nil(partial.Query.each)
        assert.is_function(objs.Query.each)
    end)
end)
