-- reads_spec.lua: the garbage-free reads (world:get into a caller's table, world:getter), the
-- collector running normally across World methods, and q:bulk's blocks of rows.
local kiln = require "kiln"
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "helpers.lua")

local function body_world()
    local w = H.world()
    w:component("Body", "vec3 dir; int32_t hits[3]; char name[8]; mat4 m; float mass;")
    return w
end

describe("world:get(e, name, into)", function()
    it("fills the caller's table and returns it, leaving other keys alone", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1, y = 2}}
        local into = {note = "kept"}
        assert.are.equal(into, w:get(e, "Position", into))
        assert.are.same({x = 1.0, y = 2.0, note = "kept"}, into)
        w:set(e, "Position", {x = 5})
        w:get(e, "Position", into)
        assert.are.equal(5.0, into.x)
    end)

    it("refills vector, matrix and array fields in place, so the same tables come back", function()
        local w = body_world()
        local e = w:spawn{Body = {dir = {x = 1, y = 2, z = 3}, hits = {4, 5, 6}, name = "ab"}}
        local into = w:get(e, "Body", {})
        local dir, hits, m = into.dir, into.hits, into.m
        w:set(e, "Body", {dir = {y = 9}, hits = {[3] = 7}, name = "cd", m = {[16] = 2}})
        w:get(e, "Body", into)
        assert.are.equal(dir, into.dir)
        assert.are.equal(hits, into.hits)
        assert.are.equal(m, into.m)
        assert.are.same({x = 1.0, y = 9.0, z = 3.0}, dir)
        assert.are.same({4, 5, 7}, hits)
        assert.are.equal(2.0, m[16])
        assert.are.equal("cd", into.name)
    end)

    it("makes no garbage when the same table is reused", function()
        local w = body_world()
        local es = {}
        for i = 1, 50 do es[i] = w:spawn{Position = {x = i}, Body = {dir = {x = i}, name = "rock"}} end
        local into, body = {}, {}
        local kib = H.garbage_kib(function()
            for i = 1, #es do
                w:get(es[i], "Position", into)
                w:get(es[i], "Body", body)
            end
        end, 20)
        assert.are.equal(0, kib)
    end)

    it("returns nil for a component the entity lacks, true for a tag, and raises for a bad into", function()
        local w = H.world()
        local e = w:spawn{Frozen = true}
        local into = {}
        assert.is_nil(w:get(e, "Position", into))
        assert.are.same({}, into)
        assert.is_true(w:get(e, "Frozen", into))
        H.unchanged(w, nil, function() w:get(e, "Position", 5) end,
            "bad argument #3 to 'world:get' (table or nil expected, got number)")
    end)
end)

describe("world:getter(name, field)", function()
    it("returns a function reading one field of any entity, nil when it lacks the component", function()
        local w = body_world()
        local a = w:spawn{Position = {x = 1.5, y = 2}, Body = {dir = {z = 3}, hits = {1, 2, 3}, name = "ab"}}
        local b = w:spawn{Velocity = {}}
        local x = w:getter("Position", "x")
        assert.are.equal(1.5, x(a))
        assert.is_nil(x(b))
        w:set(a, "Position", {x = -4})
        assert.are.equal(-4.0, x(a))
        assert.are.same({x = 0.0, y = 0.0, z = 3.0}, w:getter("Body", "dir")(a))
        assert.are.same({1, 2, 3}, w:getter("Body", "hits")(a))
        assert.are.equal("ab", w:getter("Body", "name")(a))
        assert.are.equal(0.0, w:getter("Body", "mass")(a))
    end)

    it("makes no garbage reading a number", function()
        local w = H.world()
        local es = {}
        for i = 1, 100 do es[i] = w:spawn{Position = {x = i}} end
        local x, sum = w:getter("Position", "x"), 0
        local kib = H.garbage_kib(function()
            for i = 1, #es do sum = sum + x(es[i]) end
        end, 20)
        assert.are.equal(0, kib)
        assert.is_true(sum > 0)
    end)

    it("refuses an unknown component or field, and a bad or dead entity, in the established shapes", function()
        local w = H.world()
        w:component("Script", "lua")
        H.unchanged(w, nil, function() w:getter("Nope", "x") end,
            "bad argument #1 to 'world:getter' (unknown component 'Nope')")
        H.unchanged(w, nil, function() w:getter("Position", "z") end,
            "bad argument #2 to 'world:getter' (Position has no field 'z')")
        H.unchanged(w, nil, function() w:getter("Position", 1) end,
            "bad argument #2 to 'world:getter' (field name expected, got number)")
        H.unchanged(w, nil, function() w:getter("Script", "x") end, "Script has no field 'x'")
        local x = w:getter("Position", "x")
        local e = w:spawn{Position = {}}
        w:despawn(e)
        assert.are.equal("get Position.x: entity " .. H.entity_str(e) .. " is not alive", H.raises(function() x(e) end))
        assert.are.equal("bad argument #1 to 'get Position.x' (entity expected, got string)", H.raises(function() x("1") end))
        assert.are.equal("bad argument #1 to 'get Position.x' (entity expected, got a negative number)",
            H.raises(function() x(-1) end))
    end)

    it("keeps its world alive and raises once the world is closed", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 3}}
        local x = w:getter("Position", "x")
        w = nil
        collectgarbage()
        assert.are.equal(3.0, x(e))
        local w2 = H.world()
        local x2 = w2:getter("Position", "x")
        w2:close()
        assert.is_truthy(H.raises(function() x2(e) end):find("closed world", 1, true))
    end)

    it("checks the running system's declared reads", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 1}, Velocity = {}}
        local x = w:getter("Position", "x")
        local got
        w:system{name = "peek", reads = {"Velocity"}, run = function() got = H.raises(function() x(e) end) end}
        assert(w:progress(0))
        assert.are.equal("get Position.x: system 'peek' reads Position without declaring it in reads or writes", got)
        w:remove_system("peek")
        w:system{name = "ok", reads = {"Position"}, run = function() got = x(e) end}
        assert(w:progress(0))
        assert.are.equal(1.0, got)
    end)
end)

describe("world:name(e) and world:lookup(name) in a system", function()
    it("check the system's declared reads of Name, which stopped the whole program before", function()
        -- neither checked the running system's reads: the core's guard aborted the process
        -- (a mod's system could stop the game this way)
        local w = H.world()
        local e = w:spawn{}
        w:name(e, "root")
        local got = {}
        w:system{name = "peek", run = function(ww)
            got[1] = H.raises(function() ww:lookup("root") end)
            got[2] = H.raises(function() ww:name(e) end)
        end}
        assert(w:progress(0))
        assert.are.same({"world:lookup: system 'peek' reads Name without declaring it in reads or writes",
                         "world:name: system 'peek' reads Name without declaring it in reads or writes"}, got)
        w:remove_system("peek")
        w:system{name = "ok", reads = {"Name"}, run = function(ww) got = {ww:lookup("root"), ww:name(e)} end}
        assert(w:progress(0))
        assert.are.same({e, "root"}, got)
    end)
end)

describe("the collector across World methods", function()
    it("runs again after World methods that raised", function()
        local w = H.world()
        for _ = 1, 100 do assert.is_false((pcall(w.query, w, {"Nope"}))) end -- holds, then raises
        local ring = {} -- kept a moment, so no compiler can leave the tables out
        local runs, calls = H.collector_runs(function(i) ring[i % 16 + 1] = {i} end)
        assert.is_true(runs, string.format("no cycle finished in %d allocations", calls))
    end)

    it("collects what world:get makes while a loop of calls runs", function()
        local w = H.world()
        local es = {}
        for i = 1, 1000 do es[i] = w:spawn{Position = {x = i}} end
        collectgarbage()
        collectgarbage("restart")
        local before = collectgarbage("count")
        local sink
        -- the collector finishes cycles while the loop runs, and what the reads made (about
        -- 100 bytes each) is garbage: a full collection after takes the heap back
        local runs, calls = H.collector_runs(function(i) sink = w:get(es[i % #es + 1], "Position").x end)
        assert.is_true(runs, string.format("no cycle finished in %d reads", calls))
        for i = 1, 100000 do sink = w:get(es[i % #es + 1], "Position").x end
        collectgarbage()
        local kept = (collectgarbage("count") - before) / 1024
        assert.is_true(kept < 1, string.format("%.1f MiB of what the reads made is still live", kept))
        assert.is_true(sink > 0)
    end)

    it("keeps running through add, remove, spawn and despawn", function()
        local w = H.world()
        collectgarbage()
        collectgarbage("restart")
        for i = 1, 20000 do
            local e = w:spawn{Position = {x = i, y = -i}, Velocity = {x = 1}}
            w:add(e, "Frozen")
            w:remove(e, "Frozen")
            w:despawn(e)
        end
        assert.is_true(collectgarbage("isrunning"))
        local runs, calls = H.collector_runs(function(i) w:despawn(w:spawn{Position = {x = i, y = -i}}) end)
        assert.is_true(runs, string.format("no cycle finished in %d spawns", calls))
    end)

    it("lets a finalizer that changes the world run between method calls without harm", function()
        local w = H.world()
        local es = {}
        for i = 1, 200 do es[i] = w:spawn{Position = {x = i}} end
        local spawned = 0
        local function bomb()
            H.finalizer(function()
                spawned = spawned + 1
                w:spawn{Position = {x = -1}, Velocity = {}}
                w:despawn(w:spawn{Velocity = {}})
            end)
        end
        for round = 1, 2000 do
            bomb()
            local i = round % #es + 1
            local p = w:get(es[i], "Position")
            assert.are.equal(i * 1.0, p.x)
            w:set(es[i], "Position", {y = round})
            w:add(es[i], "Velocity", {x = round})
            assert.are.equal(round * 1.0, w:get(es[i], "Velocity", {}).x)
            w:remove(es[i], "Velocity")
        end
        collectgarbage()
        assert.is_true(spawned > 0)
    end)
end)

describe("world:spawn and world:get through the schema cache", function()
    it("know a field by a long name (not interned) given as a fresh string", function()
        local w = kiln.world()
        local long = string.rep("f", 50)
        w:component("Long", "float " .. long .. "; float y;")
        local e = w:spawn{Long = {[string.rep("f", 25) .. string.rep("f", 25)] = 3, y = 4}}
        assert.are.same({[long] = 3.0, y = 4.0}, w:get(e, "Long"))
        H.raises(function() w:spawn{Long = {[string.rep("f", 49)] = 1}} end, "world:spawn", "Long", "no field")
        assert.are.equal(1, w:count())
    end)

    it("keep every value of a spawn whose later components grow the world's scratch", function()
        -- the fast path converts component by component into the scratch, growing it as it
        -- goes; an allocator that aligns the grown block otherwise (LuaJIT's 8-byte blocks)
        -- must not shift the values converted before
        for round = 1, 60 do
            local w = kiln.world()
            local small, other, big = "Small" .. round, "Other" .. round, "Big" .. round
            w:component(small, "int32 a[3]; uint8 bytes[5];")
            w:component(other, "float x, y; double d;")
            w:component(big, "vec3 b[" .. (20 + round) .. "];")
            local e0 = w:spawn{[small] = {a = {1}}} -- the C path (an array named): the scratch at its least size
            assert.is_nil(w:get(e0, other)) -- the schema cache made without the scratch
            assert.is_nil(w:get(e0, big))
            local list = {}
            for i = 1, 20 + round do list[i] = {x = i, y = -i, z = round} end
            local e = w:spawn{[small] = {a = {round, 2, 3}, bytes = {21, 22}}, [other] = {x = 1.5, y = round, d = 0.25},
                              [big] = {b = list}}
            assert.are.same({a = {round, 2, 3}, bytes = {21, 22, 0, 0, 0}}, w:get(e, small))
            assert.are.same({x = 1.5, y = round, d = 0.25}, w:get(e, other))
            assert.are.same(list, w:get(e, big).b)
            w:close()
        end
    end)

    it("keep each world's own fields when two worlds name a component alike", function()
        local a, b = kiln.world(), kiln.world()
        a:component("P", "float x, y;")
        b:component("P", "int32 y; float x; float z;")
        local ea = a:spawn{P = {x = 1, y = 2}}
        local eb = b:spawn{P = {x = 3, y = 4, z = 5}}
        assert.are.same({x = 1.0, y = 2.0}, a:get(ea, "P"))
        assert.are.same({x = 3.0, y = 4, z = 5.0}, b:get(eb, "P"))
        H.raises(function() a:spawn{P = {z = 1}} end, "world:spawn", "'z'")
        a:close()
        b:close()
    end)

    it("raise an unknown component before any bad value, in either order of the init table", function()
        local w = H.world()
        for _ = 1, 20 do -- fresh tables: whichever key the traversal meets first
            H.unchanged(w, nil, function() w:spawn{Position = {x = "a"}, Nope = {}} end, "unknown component 'Nope'")
            H.unchanged(w, nil, function() w:spawn{Frozen = false, Nope2 = true} end, "unknown component 'Nope2'")
        end
    end)

    it("convert every field type and keep the bits of -0.0 and the defaults of missing fields", function()
        local w = body_world()
        w:component("Mixed", "float a; double b; int16 c; bool d; vec2 v;")
        local e = w:spawn{Mixed = {a = -0.0, c = -7, d = true, v = {1, 2}},
                          Body = {dir = {z = 3}, hits = {1, 2, 3}, name = "ok", mass = 2.5}, Frozen = true}
        local m, body = w:get(e, "Mixed"), w:get(e, "Body")
        assert.are.equal(-math.huge, 1 / m.a)
        assert.are.same({b = 0.0, c = -7, d = true, v = {x = 1.0, y = 2.0}}, {b = m.b, c = m.c, d = m.d, v = m.v})
        assert.are.same({x = 0.0, y = 0.0, z = 3.0}, body.dir)
        assert.are.same({1, 2, 3}, body.hits)
        assert.are.equal("ok", body.name)
        assert.are.equal(2.5, body.mass)
        assert.is_true(w:get(e, "Frozen"))
    end)

    it("survive a finalizer that closes the world in the middle of a call", function()
        local calls = {
            get = function(w, e) return w:get(e, "Body") end,
            get_into = function(w, e) return w:get(e, "Body", {dir = {}, hits = {}}) end,
            spawn = function(w) return w:spawn{Position = {x = 1}, Body = {dir = {x = 2}, name = "n"}} end,
            add = function(w, e) return w:add(e, "Note", {}) end,
        }
        collectgarbage("setpause", 0) -- a collection step at nearly every allocation
        for name, call in pairs(calls) do
            for round = 1, 40 do -- the finalizer runs at another allocation of the call each time
                local w = body_world()
                w:component("Note", "lua")
                local e = w:spawn{Position = {x = 1}, Body = {dir = {x = 1}, hits = {1, 2, 3}}}
                local closed
                -- until a cycle finished (the finalizer ran): the more other spec files of the
                -- process left live, the more calls that takes
                for i = 1, 200000 do
                    if i % 2 == round % 2 then local _ = {round} end -- shifts where steps fall
                    H.finalizer(function() w:close() end)
                    local ok, err = pcall(call, w, e)
                    if not ok then
                        closed = tostring(err)
                        break
                    end
                end
                assert.is_truthy(closed and closed:find("closed world", 1, true), name .. ": " .. tostring(closed))
            end
        end
        collectgarbage("setpause", 200)
    end)

    it("refuse what the general path refuses, with its messages", function()
        local w = H.world()
        H.unchanged(w, nil, function() w:spawn{Position = {x = 1e39}} end, "world:spawn", "out of range for float")
        H.unchanged(w, nil, function() w:spawn{Position = {x = "1"}} end, "world:spawn", "'x'", "expected a number")
        H.unchanged(w, nil, function() w:spawn{Frozen = false} end, "Frozen is a tag")
        H.unchanged(w, nil, function() w:spawn{Position = {[1] = 2}} end, "world:spawn", "Position")
        H.unchanged(w, nil, function() w:spawn{Position = {}, [1] = {}} end, "world:spawn")
        assert.are.equal(0, w:count())
    end)
end)

describe("q:bulk() blocks", function()
    it("hands a large chunk to fn in blocks of at most 512 rows, each written back", function()
        local w = H.world()
        local es = {}
        for i = 1, 1300 do es[i] = w:spawn{Position = {x = i}, Velocity = {x = 1}} end
        local q = w:query{"Position", "Velocity"}
        local sizes, seen = {}, 0
        q:bulk(function(n, entities, p, v)
            sizes[#sizes + 1] = n
            for i = 1, n do
                seen = seen + 1
                p.x[i] = p.x[i] + v.x[i]
            end
        end)
        assert.are.same({512, 512, 276}, sizes)
        assert.are.equal(1300, seen)
        for i = 1, #es, 97 do assert.are.equal(i + 1.0, w:get(es[i], "Position").x) end
    end)

    it("writes nothing of a block with a bad value, and keeps the blocks before it", function()
        local w = H.world()
        local es = {}
        for i = 1, 600 do es[i] = w:spawn{Position = {x = i}} end
        local q = w:query{"Position"}
        local calls = 0
        local msg = H.raises(function()
            q:bulk(function(n, entities, p)
                calls = calls + 1
                for i = 1, n do p.x[i] = p.x[i] + 1000 end
                if calls == 2 then p.x[n] = "bad" end
            end)
        end)
        assert.is_truthy(msg:find("query:bulk: Position.x[88] (entity " .. H.entity_str(es[600]) .. ")", 1, true), msg)
        assert.are.equal(1001.0, w:get(es[1], "Position").x)
        assert.are.equal(1512.0, w:get(es[512], "Position").x)
        assert.are.equal(513.0, w:get(es[513], "Position").x)
        assert.are.equal(600.0, w:get(es[600], "Position").x)
    end)

    it("treats a number equal to what was filled as unchanged, and refuses a numeric string", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 0.1}}
        local q = w:query{"Position"}
        w:advance_tick()
        q:bulk(function(n, entities, p) p.x[1] = p.x[1] + 0 end)
        assert.are.equal(1, w:changed_tick(e, "Position"))
        local x = w:get(e, "Position").x
        H.unchanged(w, nil, function() q:bulk(function(n, entities, p) p.x[1] = tostring(x) end) end,
            "expected a number, got string")
    end)
end)

describe("q:each() views", function()
    it("have protected metatables, so no script code runs while a row is filled", function()
        local w = H.world()
        w:spawn{Position = {x = 1}, Velocity = {}}
        local q = w:query{"Position", "Velocity"}
        w:system{name = "watch", reads = {"Velocity"}, writes = {"Position"}, query = {"Position", "Velocity"},
            each = function(_, p, v)
                assert.are.equal("kiln.View", getmetatable(p))
                assert.are.equal("kiln.View", getmetatable(v))
            end}
        if H.ffi_each then -- FFI views: cdata, whose metatable is LuaJIT's own and protected
            w:remove_system("watch")
            for _, p, v in q:each() do
                assert.are.equal("cdata", type(p))
                assert.are.equal("ffi", getmetatable(p))
                H.raises(function() setmetatable(p, {}) end, "table expected, got cdata")
            end
            for _, p in q:each() do p.x = p.x + 1 end
            assert.are.equal(2.0, w:get(w:entities()[1], "Position").x)
            return
        end
        assert(w:progress(0))
        for _, p, v in q:each() do
            assert.are.equal("kiln.View", getmetatable(p))
            H.raises(function() setmetatable(p, {__newindex = print}) end, "protected metatable")
            H.raises(function() setmetatable(v, {}) end, "protected metatable")
        end
        for _, p in q:each() do p.x = p.x + 1 end
        assert.are.equal(2.0, w:get(w:entities()[1], "Position").x)
    end)

    it("refuse a numeric string even when it equals the value read", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 2}}
        local q = w:query{"Position"}
        local want = H.ffi_each and "cannot convert 'string' to 'float'" -- an FFI view
            or "query:each: field 'x' of Position on entity " .. H.entity_str(e) .. ": expected a number, got string"
        H.unchanged(w, nil, function()
            for _, p in q:each() do p.x = tostring(p.x) end
        end, want)
    end)

    it("work the same for a query with more fields than the step closure's upvalues hold", function()
        local w = H.world()
        local decl = {}
        for i = 1, 60 do decl[#decl + 1] = "float f" .. i .. ";" end
        local names = {}
        for c = 1, 5 do
            names[c] = "Wide" .. c
            w:component(names[c], table.concat(decl, " "))
        end
        local init = {}
        for c = 1, 5 do init[names[c]] = {f60 = c} end
        local e = w:spawn(init)
        local q = w:query(names)
        for _, a, b, c, d, last in q:each() do
            a.f1 = a.f60 + last.f60
            last.f2 = 7
        end
        assert.are.equal(6.0, w:get(e, "Wide1").f1)
        assert.are.equal(7.0, w:get(e, "Wide5").f2)
        assert.are.equal(5.0, w:get(e, "Wide5").f60)
    end)
end)

describe("a float written back through a view or a bulk array", function()
    -- a write that changes nothing is skipped, so "nothing" must mean the same bits
    local function sign_of(x) return 1 / x end

    it("is a change from 0.0 to -0.0, and marks its row", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 0.0, y = 0.0}}
        local q = w:query{"Position"}
        w:advance_tick()
        local before = w:changed_tick(e, "Position")
        w:advance_tick()
        for _, p in q:each() do p.x = -0.0 end
        assert.are.equal(-math.huge, sign_of(w:get(e, "Position").x))
        assert.is_true(w:changed_tick(e, "Position") > before)
        w:advance_tick()
        local after_each = w:changed_tick(e, "Position")
        q:bulk(function(n, ents, pos) for i = 1, n do pos.y[i] = -0.0 end end)
        assert.are.equal(-math.huge, sign_of(w:get(e, "Position").y))
        assert.is_true(w:changed_tick(e, "Position") > after_each)
    end)

    it("is no change when a NaN is left as it was", function()
        local w = H.world()
        local e = w:spawn{Position = {x = 0 / 0, y = 1}}
        local q = w:query{"Position"}
        w:advance_tick()
        local before = w:changed_tick(e, "Position")
        w:advance_tick()
        q:bulk(function(n, ents, pos) for i = 1, n do local _ = pos.x[i] end end)
        assert.are.equal(before, w:changed_tick(e, "Position"))
        for _, p in q:each() do local _ = p.x end
        -- FFI views stamp every row of a writable term they visit
        assert.are.equal(H.ffi_each and w:tick() or before, w:changed_tick(e, "Position"))
    end)
end)
