-- manifest.lua: the beacons mod: no dependencies.
return { name = "beacons", version = "1.0" }
