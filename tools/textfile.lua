-- textfile.lua: a whole file's bytes for the Lua test tools (tools/check_layout.lua, tests/docs/).
-- A script finds it beside itself: it puts its own folder's tools/ on package.path, from arg[0].
local M = {}

-- The bytes of the file at path; raises io.open's message when it cannot be read.
function M.read(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("a")
    f:close()
    return s
end

return M
