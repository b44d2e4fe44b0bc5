-- api_consistency_spec.lua: rules that hold across every method the API declares, checked
-- table-driven from docs/kiln.d.lua, so a method added later that breaks one fails here.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

-- {{class = "world", method = "get", params = {"e", "name", "into"}}, ...}: every method the
-- annotations declare ("---@class kiln.World" then "local World = {}" ties a local to a class).
local function declared_methods()
    local list, class_of, current = {}, {}, nil
    for line in H.read_repo_file("docs/kiln.d.lua"):gmatch("[^\n]+") do
        current = line:match("^%-%-%-@class kiln%.(%u%w*)%s*$") or current
        local name = line:match("^local (%u%w*) = {}")
        if name then class_of[name] = current end
        local owner, method, args = line:match("^function (%u%w*):([%w_]+)%(([^)]*)%)")
        if owner then
            local params = {}
            for p in args:gmatch("[%w_]+") do params[#params + 1] = p end
            list[#list + 1] = {class = class_of[owner]:lower(), method = method, params = params}
        end
    end
    return list
end

-- One object of every class, made the documented way, each in a world of its own.
local function object(class)
    local w = H.world()
    w:spawn{Position = {x = 1, y = 2}}
    local make = {
        world = function() return w end,
        query = function() return w:query{"Position"} end,
        commands = function() return kiln.commands() end,
        snapshot = function() return w:snapshot() end,
        prefab = function() return w:prefab{components = {Position = {x = 2}}} end,
        instance = function() return w:instantiate(w:export()) end,
        session = function() return kiln.session{world = w} end,
        mods = function() return kiln.mods(w) end,
    }
    return assert(make[class], "no maker for class " .. class)()
end

-- The message of fn(...), which must raise.
local function raises(fn, ...)
    local ok, err = pcall(fn, ...)
    assert.is_false(ok, "expected an error, but the call returned normally")
    return tostring(err)
end

-- Methods whose first argument may be any value, each with the document that says so.
local takes_anything = {
    ["world:is_alive"] = "lua-api.md: false for non-integer values, never raises",
    ["session:open_world"] = "lua-api.md: picks the session's world from any value, and says which",
}

describe("every declared method", function()
    local methods = declared_methods()

    it("is declared in enough numbers for the rules below to mean something", function()
        assert.is_true(#methods > 80, "only " .. #methods .. " methods parsed from kiln.d.lua")
    end)

    it("raises naming itself when self is not its object", function()
        for _, m in ipairs(methods) do
            local obj = object(m.class)
            local call = m.class .. ":" .. m.method
            local msg = raises(obj[m.method], 5)
            assert.is_truthy(msg:find("calling '" .. call .. "' on bad self", 1, true),
                             string.format("%s: %q", call, msg))
        end
    end)

    it("raises naming itself and argument #1 for a value no method takes there", function()
        local odd = coroutine.create(function() end)
        for _, m in ipairs(methods) do
            local call = m.class .. ":" .. m.method
            if takes_anything[call] then
                local obj = object(m.class)
                assert.is_true(pcall(obj[m.method], obj, odd), call .. " no longer takes anything")
            elseif #m.params > 0 then
                local obj = object(m.class)
                local msg = raises(obj[m.method], obj, odd)
                assert.is_truthy(msg:find("bad argument #1 to '" .. call .. "'", 1, true),
                                 string.format("%s: %q", call, msg))
            end
        end
    end)
end)

describe("every function of the kiln table", function()
    local any = {pretty = "renders any value", commands = "takes no argument"}

    it("raises naming itself and argument #1 for a value none takes there", function()
        local odd = coroutine.create(function() end)
        for name, fn in pairs(kiln) do
            if type(fn) == "function" and not any[name] then
                local msg = raises(fn, odd)
                assert.is_truthy(msg:find("bad argument #1 to 'kiln." .. name .. "'", 1, true),
                                 string.format("kiln.%s: %q", name, msg))
            end
        end
    end)
end)

describe("a component argument", function()
    -- Every world method that takes a component, called with c in the place of a name.
    local function calls(w, e)
        return {
            get = function(c) return w:get(e, c) end,
            has = function(c) return w:has(e, c) end,
            set = function(c) return w:set(e, c, {x = 3}) end,
            add = function(c) return w:add(e, c, {x = 4}) end,
            changed_tick = function(c) return w:changed_tick(e, c) end,
            remove = function(c) return w:remove(e, c) end,
            getter = function(c) return w:getter(c, "x")(e) end,
            query = function(c) return w:query{c}:count() end,
            system = function(c) return w:system{name = "s" .. tostring(c), reads = {c}, run = function() end} end,
            spawn = function(c) return w:spawn{[c] = {x = 5}} end,
            component_info = function(c) return w:component_info(c).name end,
            schema = function(c) return w:schema(c) end,
        }
    end

    it("is taken as a name, an integer id or a float holding that id alike", function()
        local w = H.world()
        local id = w:component("Position", "float x, y;")
        for name in pairs(calls(w, w:spawn{Position = {}})) do
            for _, c in ipairs({"Position", id, id + 0.0}) do
                local w2 = H.world()
                local e = w2:spawn{Position = {x = 1, y = 2}}
                local ok, err = pcall(calls(w2, e)[name], c)
                assert.is_true(ok, string.format("world:%s with %s (%s): %s", name, tostring(c), type(c),
                                                  tostring(err)))
            end
        end
    end)

    it("that is a number but no id is refused naming the method", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1, y = 2}}
        for name, call in pairs(calls(w, e)) do
            if name == "component_info" then -- absence is no error: nil, as for an unknown name
                assert.is_nil(w:component_info(999), "component_info")
            else
                local msg = raises(call, 999)
                assert.is_truthy(msg:find("world:" .. name, 1, true), string.format("world:%s: %q", name, msg))
                assert.is_truthy(msg:find("999", 1, true), string.format("world:%s: %q", name, msg))
            end
        end
    end)
end)

describe("an entity argument", function()
    it("is taken as an integer or a float holding it, and refused as text naming the method", function()
        local cases = {
            get = function(w, e) return w:get(e, "Position") end,
            set = function(w, e) return w:set(e, "Position", {x = 9}) end,
            add = function(w, e) return w:add(e, "Velocity", {}) end,
            remove = function(w, e) return w:remove(e, "Position") end,
            changed_tick = function(w, e) return w:changed_tick(e, "Position") end,
            components = function(w, e) return w:components(e) end,
            inspect = function(w, e) return w:inspect(e) end,
            children = function(w, e) return w:children(e) end,
            set_parent = function(w, e) return w:set_parent(e, nil) end,
            name = function(w, e) return w:name(e, "hero") end,
            clone = function(w, e) return w:clone(e) end,
            despawn = function(w, e) return w:despawn(e) end,
            despawn_recursive = function(w, e) return w:despawn_recursive(e) end,
        }
        for name, call in pairs(cases) do
            for _, form in ipairs({"integer", "float"}) do
                local w = H.world()
                local e = w:spawn{Position = {x = 1, y = 2}}
                local ok, err = pcall(call, w, form == "float" and e + 0.0 or e)
                assert.is_true(ok, string.format("world:%s with a %s entity: %s", name, form, tostring(err)))
            end
            local w = H.world()
            local msg = raises(call, w, tostring(w:spawn{Position = {}}))
            assert.is_truthy(msg:find("bad argument #1 to 'world:" .. name .. "' (entity expected", 1, true),
                             string.format("world:%s: %q", name, msg))
        end
    end)

    it("that is the null handle is refused as null by every method that refuses a dead one", function()
        local cases = {
            get = function(w) return w:get(0, "Position") end,
            set = function(w) return w:set(0, "Position", {x = 9}) end,
            add = function(w) return w:add(0, "Velocity", {}) end,
            remove = function(w) return w:remove(0, "Position") end,
            changed_tick = function(w) return w:changed_tick(0, "Position") end,
            children = function(w) return w:children(0) end,
            name = function(w) return w:name(0, "hero") end,
            clone = function(w) return w:clone(0) end,
            despawn = function(w) return w:despawn(0) end,
            despawn_recursive = function(w) return w:despawn_recursive(0) end,
            set_parent = function(w) return w:set_parent(0, nil) end,
        }
        for name, call in pairs(cases) do
            local w = H.world()
            local role = name == "set_parent" and "child" or "entity"
            assert.are.equal("world:" .. name .. ": " .. role .. " is null", raises(call, w))
        end
    end)
end)

describe("an integer argument", function()
    -- Every count, limit or budget a call takes, given v; each returns something to compare.
    local function calls()
        local w = H.world()
        for i = 1, 3 do w:spawn{Position = {x = i, y = 0}} end
        local q = w:query{"Position"}
        return {
            ["kiln.world workers"] = function(v) return kiln.world{workers = v} ~= nil end,
            ["kiln.world max_failures"] = function(v) return kiln.world{max_failures = v} ~= nil end,
            ["kiln.world instructions"] = function(v) return kiln.world{instructions = v} ~= nil end,
            ["world:max_failures"] = function(v) w:max_failures(v) return true end,
            ["world:instructions"] = function(v) return w:instructions(v) end,
            ["world:random"] = function(v) w:seed(1) return w:random(v) end,
            ["query:entities"] = function(v) return #q:entities(v) end,
            ["query:format"] = function(v) return q:format(w, v) end,
            ["prefab:spawn"] = function(v) return #w:prefab{components = {Position = {}}}:spawn(v) end,
            ["kiln.table_text"] = function(v) return kiln.table_text({"a"}, {{"b"}}, v) end,
            ["session:step"] = function(v) return (select(2, kiln.session{world = kiln.world()}:step(v))) end,
            ["kiln.session answer_bytes"] = function(v)
                local s = kiln.session({world = w}, {answer_bytes = v})
                return (select(2, s:feed("return ('x'):rep(100)")))
            end,
        }
    end

    it("is taken as a float holding it too, the same answer under Lua 5.4 and LuaJIT", function()
        for name in pairs(calls()) do
            local ok, as_integer = pcall(calls()[name], 2)
            assert.is_true(ok, name .. " with 2: " .. tostring(as_integer))
            local ok_float, as_float = pcall(calls()[name], 2.0)
            assert.is_true(ok_float, name .. " with 2.0: " .. tostring(as_float))
            assert.are.equal(as_integer, as_float, name)
        end
    end)

    it("is refused as text by the calls written in Lua, as under LuaJIT", function()
        for _, name in ipairs({"prefab:spawn", "query:format", "kiln.table_text", "session:step",
                               "kiln.session answer_bytes"}) do
            local msg = raises(calls()[name], "2")
            assert.is_truthy(msg:find("bad argument", 1, true), name .. ": " .. msg)
        end
    end)
end)

describe("the mod manager given what its files or its loaded mods decide", function()
    it("answers reload, unload and log for a name no loaded mod has with nil and a message", function()
        local mods = kiln.mods(H.world())
        for _, call in ipairs({"reload", "unload", "log"}) do
            local ok, err = mods[call](mods, "ghost")
            assert.is_nil(ok, call)
            assert.are.equal("mods:" .. call .. ": no mod named 'ghost' is loaded", err, call)
        end
        local long = ("g"):rep(300)
        local _, err = mods:log(long)
        assert.are.equal("mods:log: no mod named '" .. long:sub(1, 64) .. "...' is loaded", err)
    end)

    it("answers load and load_dir for a path it cannot open with nil and a message, as modding.md says", function()
        local mods = kiln.mods(H.world())
        local ok, err = mods:load_dir("/nonexistent/kiln-mods")
        assert.is_nil(ok)
        assert.are.equal("mods:load_dir: cannot open folder /nonexistent/kiln-mods", err)
        ok, err = mods:load("/nonexistent/kiln-mods/m.lua")
        assert.is_nil(ok)
        assert.is_truthy(err:find("cannot open", 1, true), err)
        assert.are.equal(0, #mods:list())
    end)

    it("raises for misuse, naming the call", function()
        local mods = kiln.mods(H.world())
        raises(mods.log, mods, 7)
        raises(mods.load_dir, mods, {})
        local msg = raises(mods.log, mods, "ghost", -1)
        assert.are.equal("bad argument #2 to 'mods:log' (n must not be negative)", msg)
        msg = raises(mods.log, mods, "ghost", {})
        assert.are.equal("bad argument #2 to 'mods:log' (integer expected, got table)", msg)
    end)
end)

describe("the calls that take component names only", function()
    it("refuse an id, as the conventions list them, while a buffer's spawn reads its init as world:spawn", function()
        local w = H.world()
        local id = w:component("Position", "float x, y;")
        local e = w:spawn{}
        local c = kiln.commands()
        raises(c.add, c, e, id, {})
        raises(c.set, c, e, id, {})
        raises(c.remove, c, e, id)
        raises(w.resource, w, id)
        raises(w.prefab, w, {components = {[id] = {x = 1}}})
        c:spawn{[id] = {x = 4}}
        assert.are.equal(1, c:apply(w))
        assert.are.equal(1, #w:query{"Position"}:entities())
    end)
end)
