-- format.lua: required by shield_hud's init.lua (require finds files in the mod's folder).
local M = {}
function M.report(seconds, hits, absorbed, capacity)
    return string.format("[shield_hud] %ds: %d hits absorbed, %.0f damage (%.1f full shields)",
                         seconds, hits, absorbed, absorbed / capacity)
end
return M
