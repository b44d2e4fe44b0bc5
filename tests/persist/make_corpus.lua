-- make_corpus.lua: writes the seed corpus of the loader fuzz harnesses (tests/persist/corpus),
-- saves of small worlds with the components fuzz_load.c registers. Run: make persist-corpus.
-- (binary/v1-seed* to v3-seed* are the first three worlds saved in format versions 1 to 3, and
-- json/v1-seed* in JSON version 1, kept so the fuzzer also starts from the older layouts; this
-- script does not write them.)
local kiln = require "kiln"
local dir = assert(arg[1], "usage: make_corpus.lua DIR")

local function world()
    local w = kiln.world()
    w:component("Position", "float x, y;")
    w:component("Velocity", "float x, y;")
    w:component("Health", "int32_t hp, max;")
    w:component("Frozen")
    w:component("Link", "entity target; entity pair[2];")
    return w
end

local scenes = {
    function(w) w:spawn{Position = {x = 1, y = 2}} end,
    function(w)
        local a = w:spawn{Position = {x = 1}, Velocity = {y = -1}}
        local b = w:spawn{Health = {hp = 3, max = 5}, Frozen = true}
        w:spawn{Link = {target = a, pair = {b, a}}}
        w:set_parent(b, a)
        w:resource("Health", {hp = 9, max = 9})
    end,
    function(w)
        local prev
        for i = 1, 20 do
            local e = w:spawn{Position = {x = i, y = -i}}
            if prev then w:set_parent(e, prev) end
            if i % 3 == 0 then w:despawn(e) else prev = e end
        end
    end,
    function(w) -- a free list out of slot order, one slot reused at a later generation
        local es = {}
        for i = 1, 8 do es[i] = w:spawn{Health = {hp = i, max = 8}} end
        w:despawn(es[6])
        w:despawn(es[2])
        w:despawn(es[8])
        w:despawn(w:spawn{Frozen = true})
    end,
}

for i, make in ipairs(scenes) do
    local w = world()
    make(w)
    w:progress(0)
    for _, format in ipairs{"binary", "json"} do
        local f = assert(io.open(string.format("%s/%s/seed%d", dir, format, i), "wb"))
        f:write(w:save{format = format})
        f:close()
    end
end
