-- threads_spec.lua: a Lua system (main thread) defining components, event types and queries
-- while C systems of its stage run on workers; the race itself is checked by the TSan suite.
local kiln = require "kiln"

describe("defining types from a Lua system while C systems run on workers", function()
    local function run(frames, per_frame)
        local w = kiln.world{workers = 2, transforms = true}
        local movers = {}
        for i = 1, 500 do movers[i] = w:spawn{LocalTransform = {position = {x = i}}} end
        local n, queries = 0, {}
        -- no declared access: it shares a stage with transform propagation on a worker
        w:system{name = "definer", run = function(world)
            for _ = 1, per_frame do
                n = n + 1
                world:component("C" .. n, "float a; int32_t b;")
                world:event("E" .. n, "int32_t v;")
                queries[n] = world:query{"C" .. n}
            end
        end}
        for _ = 1, frames do
            for _, p in w:query{"LocalTransform"}:each() do p.position.x = p.position.x + 1 end
            local ok, failures = w:progress(0.016)
            assert.is_true(ok, failures and failures[1].message)
        end
        return w, n, queries, movers
    end

    it("leaves every type usable and propagation right", function()
        local frames, per_frame = 20, 10
        local w, n, queries, movers = run(frames, per_frame)
        assert.are.equal(frames * per_frame, n)
        for k = 1, n do
            local e = w:spawn{["C" .. k] = {a = k, b = -k}}
            assert.are.same({a = k, b = -k}, w:get(e, "C" .. k))
            assert.are.equal(1, queries[k]:count())
            w:emit("E" .. k, {v = k})
            local seen = {}
            for ev in w:events("E" .. k) do seen[#seen + 1] = ev.v end
            assert.are.same({k}, seen)
        end
        -- the worker's propagation saw every frame's moves
        w:progress(0)
        for i, e in ipairs(movers) do
            assert.are.equal(i + frames, w:get(e, "WorldTransform").matrix[13])
        end
    end)
end)
