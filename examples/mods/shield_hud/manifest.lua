-- manifest.lua: what the mod manager reads before running a mod's code (data only).
return {
    name = "shield_hud",
    version = "1.0",
    depends = {"shield"},   -- loaded after shield; unloading shield needs this one gone first
    entry = "init.lua",
}
