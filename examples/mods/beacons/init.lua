-- beacons: a mod that spawns entities of its own: a ring of navigation beacons around the
-- field's center that pulse. Unloading it despawns them and removes its Beacon component;
-- reloading it keeps them (and its system's place in the schedule).
local COUNT = 24

world:component("Beacon", "float phase; float rate; int32_t pulses;")

-- Spawn once: a reload finds the beacons of the previous version alive.
local beacons = world:query{"Beacon"}
if beacons:count() == 0 then
    local size = game.field_size
    for i = 1, COUNT do
        local angle = 2 * math.pi * i / COUNT
        world:spawn{
            Beacon = {phase = math.random() * 2 * math.pi, rate = 1 + math.random() * 2, pulses = 0},
            LocalTransform = {position = {size / 2 + math.cos(angle) * size / 3,
                                          size / 2 + math.sin(angle) * size / 3, 0}},
        }
    end
end

world:system{
    name = "beacons_pulse",
    writes = {"Beacon"},
    query = {"Beacon"},
    each = function(e, beacon, dt)
        beacon.phase = beacon.phase + beacon.rate * dt
        if beacon.phase > 2 * math.pi then
            beacon.phase = beacon.phase - 2 * math.pi
            beacon.pulses = beacon.pulses + 1
        end
    end,
}
print(string.format("[beacons] loaded: %d beacons", beacons:count()))
