-- mods_helpers.lua: fixtures of the mod manager specs: scratch folders holding mod files,
-- a world with a host system counting its frames, and failures collected across frames.
-- Load with dofile beside helpers.lua; every folder it makes is removed by M.cleanup().
local kiln = require "kiln"
local assert = require "luassert"

local M = {}
local made = {}

-- A fresh empty folder under the system's temporary directory.
function M.folder()
    local path = os.tmpname()
    os.remove(path)
    assert(os.execute("mkdir -p '" .. path .. "'"))
    made[#made + 1] = path
    return path
end

-- Writes text (binary-safe) to dir/name, making the folders on the way.
function M.write(dir, name, text)
    local sub = name:match("^(.*)/[^/]*$")
    if sub then assert(os.execute("mkdir -p '" .. dir .. "/" .. sub .. "'")) end
    local f = assert(io.open(dir .. "/" .. name, "wb"))
    f:write(text)
    f:close()
    return dir .. "/" .. name
end

-- A folder mod: dir/name with manifest.lua (manifest: a table written as Lua) and files.
function M.folder_mod(dir, name, manifest, files)
    local parts = {}
    for k, v in pairs(manifest) do
        if type(v) == "table" then
            local list = {}
            for i, d in ipairs(v) do list[i] = string.format("%q", d) end
            parts[#parts + 1] = k .. " = {" .. table.concat(list, ", ") .. "}"
        else
            parts[#parts + 1] = k .. " = " .. string.format("%q", v)
        end
    end
    M.write(dir, name .. "/manifest.lua", "return {" .. table.concat(parts, ", ") .. "}\n")
    for file, text in pairs(files) do M.write(dir, name .. "/" .. file, text) end
    return dir .. "/" .. name
end

function M.cleanup()
    for _, path in ipairs(made) do os.execute("rm -rf '" .. path .. "'") end
    made = {}
end

-- A world with a Position component, a host entity and a host system counting its runs,
-- and a manager over it (opts passed on). Returns world, mods, the host's run counter.
function M.host(opts)
    local w = kiln.world()
    w:component("Position", "float x, y;")
    w:spawn{Position = {x = 1, y = 2}}
    local host = {runs = 0}
    w:system{name = "host_tick", reads = {"Position"}, run = function() host.runs = host.runs + 1 end}
    local mods = kiln.mods(w, opts)
    return w, mods, host
end

-- M.host(opts) with folder mods made in a fresh folder and loaded in the order listed, each
-- {name, init = the text of its init.lua, depends = a list of names or nil} at version "1".
-- Returns world, mods, the folder (to write new versions into).
function M.host_with_folder_mods(list, opts)
    local w, mods = M.host(opts)
    local dir = M.folder()
    for _, m in ipairs(list) do
        local path = M.folder_mod(dir, m[1], {name = m[1], version = "1", depends = m.depends},
                                  {["init.lua"] = m.init})
        assert(mods:load(path))
    end
    return w, mods, dir
end

-- Asserts kiln.mods refuses option name given 0, a negative, 2^31, a fraction or a string.
function M.refuses_below_one(name)
    for _, bad in ipairs{0, -1, 2^31, 1.5, "8"} do
        local ok, err = pcall(kiln.mods, kiln.world(), {[name] = bad})
        assert.is_false(ok)
        assert.truthy(err:find(name .. " must be", 1, true), err)
    end
end

-- Runs n frames; every frame must return (true, or false with failures). Returns the
-- failures of all frames in one list.
function M.frames(w, n)
    local all = {}
    for _ = 1, n do
        local ok, failures = w:progress(1 / 60)
        assert.is_boolean(ok)
        for _, f in ipairs(failures or {}) do all[#all + 1] = f end
    end
    return all
end

-- The mods:list() entry of name, or nil.
function M.info(mods, name)
    for _, m in ipairs(mods:list()) do
        if m.name == name then return m end
    end
end

-- The live entities of w having component name.
function M.entities_with(w, name)
    local out = {}
    for _, e in ipairs(w:entities()) do
        if w:has(e, name) then out[#out + 1] = e end
    end
    table.sort(out)
    return out
end

-- The names of the world's systems, in schedule order.
function M.system_names(w)
    local names = {}
    for i, s in ipairs(w:systems()) do names[i] = s.name end
    return names
end

-- The failures (from M.frames) of mod name.
function M.failures_of(failures, name)
    local out = {}
    for _, f in ipairs(failures) do
        if f.mod == name then out[#out + 1] = f end
    end
    return out
end

return M
