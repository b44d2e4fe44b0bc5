-- seeds.lua: writes the seed corpus (tests/fuzz/corpus): byte strings in the harness's input
-- format, each stressing one area of the API. Deterministic; run: lua5.4 tests/fuzz/seeds.lua DIR
local dir = assert(arg[1], "usage: lua5.4 seeds.lua DIR")

-- opcode (value mod 24; 244 and up: parallel_for, registration) and about how many
-- argument bytes the op reads
local ops = {
  spawn = {0, 0}, spawn_with = {2, 12}, spawn_batch = {3, 4}, despawn = {4, 1},
  add = {5, 7}, remove = {7, 2}, set = {8, 7}, get_mut = {9, 6}, tick = {10, 0},
  defer = {11, 1}, record = {12, 9}, apply = {14, 1}, clear = {15, 1},
  resource = {16, 3}, event = {17, 3}, iterate = {18, 12}, query = {20, 8},
  schedule = {21, 1}, hierarchy = {22, 3}, register = {248, 1}, event_register = {253, 1},
  parallel = {244, 2},
}

local areas = {
  entities = {"spawn", "spawn", "despawn", "add", "add", "remove", "set", "get_mut", "tick"},
  spawns = {"spawn_with", "spawn_batch", "despawn", "add", "tick"},
  deferred = {"spawn", "defer", "defer", "add", "remove", "set", "despawn", "spawn_with", "spawn_batch"},
  commands = {"spawn", "record", "record", "record", "apply", "clear", "despawn", "tick"},
  queries = {"spawn_with", "spawn_batch", "query", "iterate", "iterate", "add", "remove", "tick", "parallel"},
  resources = {"resource", "resource", "event", "event", "record", "apply", "tick"},
  registry = {"register", "register", "event_register", "spawn_with", "record", "apply", "query"},
  hierarchy = {"spawn", "spawn_with", "hierarchy", "hierarchy", "hierarchy", "add", "despawn", "defer", "tick"},
  schedule = {"spawn_with", "spawn_batch", "schedule", "schedule", "add", "hierarchy", "event", "tick"},
}

local function seed(name, area, flags, count, rng)
  local bytes = {flags}
  local pool = area and areas[area]
  local names = {}
  for k in pairs(ops) do names[#names + 1] = k end
  table.sort(names)
  for _ = 1, count do
    local op = pool and pool[rng(#pool)] or names[rng(#names)]
    local code, arity = ops[op][1], ops[op][2]
    if code < 24 then code = code + 24 * (rng(10) - 1) end -- same op, other high bits
    bytes[#bytes + 1] = code
    for _ = 1, arity do bytes[#bytes + 1] = rng(256) - 1 end
  end
  local f = assert(io.open(dir .. "/" .. name, "wb"))
  f:write(string.char(table.unpack(bytes)))
  f:close()
end

math.randomseed(14)
local rng = math.random
for _, area in ipairs({"entities", "spawns", "deferred", "commands", "queries", "resources", "hierarchy",
                       "registry"}) do
  seed(area .. "-short", area, 0, 12, rng)
  seed(area .. "-long", area, 0, 80, rng)
end
seed("schedule-short", "schedule", 1, 12, rng)
seed("schedule-long", "schedule", 1, 60, rng)
for i = 1, 4 do seed("mixed-" .. i, nil, i % 2, 40 * i, rng) end

-- Placeholders inside values, by hand: two spawns in buffer 0, Parent links between them (the
-- second closes a cycle), an apply; then a new batch linking to the old batch's placeholder
-- and to buffer 1's, each refused at its command, a clear in between.
do
  local rec, link, apply, clear = 12, 0xf6, 14, 15
  local bytes = {0,
    rec, 0, rec, 0,                -- spawn A, spawn B (buffer 0)
    rec, link, 3, 0,               -- B.Parent = A
    rec, link, 0, 1,               -- A.Parent = B: a cycle, refused
    apply, 0, clear, 0,
    rec, 0,                        -- spawn C: a new batch
    rec, link, 6, 0,               -- C.Parent = A's old placeholder: refused
    apply, 0, clear, 0,
    rec, 1,                        -- spawn D in buffer 1
    rec, 0,                        -- spawn E in buffer 0
    rec, link, 12, 3,              -- E.Parent = D (the other buffer's): refused
    apply, 0, apply, 1, clear, 0,
    rec, 0, rec, 0, rec, link, 18, 5, apply, 0}  -- F, G, G.Parent = F
  local f = assert(io.open(dir .. "/links", "wb"))
  f:write(string.char(table.unpack(bytes)))
  f:close()
end

-- kiln_commands_spawn_with, by hand: after a spawn (so the batch goes on), two small values
-- held in the spawn's slot, an Owned value moved in through its hook, a component listed
-- twice and an unknown one (each refused with nothing recorded), none, a 32-byte value with
-- a tag; then an apply.
do
  local rec, with, apply = 12, 0xe0, 14
  local bytes = {0,
    rec, 0,                             -- spawn (buffer 0)
    rec, with, 2, 0, 1, 5, 6, 1, 1, 9,  -- A {5, 6} and B 9, both held
    rec, with, 1, 4, 1, 3,              -- O, moved in
    rec, with, 2, 0, 0, 0, 0,           -- A twice: refused
    rec, with, 2, 31, 0, 1, 0,          -- an unknown component: refused
    rec, with, 0,                       -- no component
    rec, with, 2, 6, 1, 7, 2, 0,        -- W (its value out of the command) and the tag T
    apply, 0}
  local f = assert(io.open(dir .. "/spawn-with", "wb"))
  f:write(string.char(table.unpack(bytes)))
  f:close()
end
