-- loop_sites.lua: under LuaJIT, whether the body of a `for e, ... in q:each()` loop can read e,
-- read once per loop site from its bytecode; a loop that provably never does is given no entity.
local _, _, _, layer = ...
if not layer.views then return end -- Lua 5.4, or a state without the ffi library
local ok_util, util = pcall(require, "jit.util")
local ok_vmdef, vmdef = pcall(require, "jit.vmdef")
if not ok_util or not ok_vmdef or type(vmdef) ~= "table" or type(vmdef.bcnames) ~= "string" then return end

-- Why: the entity is the generic for's control value, so a compiled loop loads and converts it
-- on every row even when the body ignores it, a third stream of memory beside the columns (about
-- a tenth of jit_each's time). Whatever the analysis cannot prove, it answers "may read".
local funcbc, funcinfo = util.funcbc, util.funcinfo
local band, shr = bit.band, bit.rshift
local pcall, type = pcall, type -- held: a script replacing the globals must not sway the answer
-- Opcode names by number, read once here: the analysis calls no string method a script could
-- replace (the string metatable) to make a body that reads its entity look as if it did not.
local OPNAMES = {}
for i = 0, #vmdef.bcnames / 6 - 1 do OPNAMES[i] = vmdef.bcnames:sub(6 * i + 1, 6 * i + 6):match("^%S+") end

-- Operand modes of lj_bc.h (BCMdst, BCMbase, BCMvar, BCMrbase).
local DST, BASE, VAR, RBASE = 1, 2, 3, 4

-- Instruction pc of func: its name, operand A, B and C (or nil), D, and the modes of A, B, C/D.
local function decode(func, pc)
    local ins, m = funcbc(func, pc)
    if not ins then return nil end
    local op = OPNAMES[band(ins, 0xff)]
    local ma, mb, mc = band(m, 7), band(shr(m, 3), 15), band(shr(m, 7), 15)
    local d = shr(ins, 16)
    local b, c
    if mb ~= 0 then b, c = shr(ins, 24), band(d, 0xff) end
    return op, band(shr(ins, 8), 0xff), b, c, d, ma, mb, mc
end

-- Instructions that read slots below their base A: a loop's generator, state and control, or
-- the table TSETM stores into.
local BELOW = {ITERC = 3, ITERN = 3, ISNEXT = 3, TSETM = 1}
-- Loop and jump instructions, which read nothing (UCLO closes upvalues: FNEW is what captures).
local NO_READ = {JMP = true, UCLO = true, LOOP = true, ILOOP = true, JLOOP = true, RET0 = true}

-- Whether the instruction at pc of func may read or write slot e (false only when it cannot).
local function touches(func, pc, e)
    local op, a, b, c, d, ma, mb, mc = decode(func, pc)
    if not op or op == "FNEW" then return true end -- a closure may capture e
    if NO_READ[op] then return false end
    if op == "RET1" then return a == e end
    if op == "RET" then return a <= e and e <= a + d - 2 end
    if op == "KNIL" then return a <= e and e <= d end
    if (ma == DST or ma == VAR) and a == e then return true end
    if (ma == BASE or ma == RBASE) and a - (BELOW[op] or 0) <= e then return true end
    if mb ~= 0 then
        if mb == VAR and b == e or mc == VAR and c == e then return true end
        if mb == RBASE and b <= e and e <= c then return true end -- CAT b..c
    elseif mc == VAR and d == e then
        return true
    end
    return false
end

-- Instructions that call a function (so one on the loop's line could be a wrapper whose
-- iterator hands kiln's entity to the body in another variable); the loop's own ITERC, which
-- carries the for's line, calls the iterator the line's CALL made.
local CALLS = {CALL = true, CALLM = true, CALLT = true, CALLMT = true}

-- The loop of func whose iterator call is on line: {first, last (its body's instructions),
-- slot (its first variable's)}, or nil when there is none or more than one (two loops written
-- on one line), or when the line makes any other call, before the loop's or in a body: only
-- then is the loop's call the one that reached q:each (for _, e in swap({q:each()}) must keep
-- its entity, and so must a q:each() called in another loop's body written on its line). The
-- parser writes
-- `CALL f; JMP => ITERC` before a generic for's body and `ITERC; ITERL` after it, the ITERC's
-- base three slots above the call's.
local function loop_at(func, line)
    local found, calls = nil, 0
    for pc = 1, funcinfo(func).bytecodes - 1 do
        local op, _, _, _, d = decode(func, pc)
        if CALLS[op] and funcinfo(func, pc).currentline == line then calls = calls + 1 end
        if op == "JMP" then
            local target = pc + d - 0x7fff
            local top, ta = decode(func, target)
            local cop, ca = decode(func, pc - 1)
            if top == "ITERC" and cop == "CALL" and ca + 3 == ta and funcinfo(func, pc - 1).currentline == line then
                if found then return nil end
                found = {first = pc + 1, last = target - 1, slot = ta, call = ca}
            end
        end
    end
    if calls ~= 1 then return nil end
    return found
end

-- The slot of the call of the loop written on line of func when its body provably never reads
-- its first variable, else false.
local function unread(func, line)
    -- a stripped chunk (luajit -b, string.dump(f, true)) gives every instruction one line
    local info = funcinfo(func)
    -- (lines 0 to 0); a one-line function is left alone as well
    if type(line) ~= "number" or line <= 0 or not info.lastlinedefined
        or info.lastlinedefined <= info.linedefined then
        return false
    end
    local loop = loop_at(func, line)
    if not loop then return false end
    for pc = loop.first, loop.last do
        if touches(func, pc, loop.slot) then return false end
    end
    return loop.call
end

-- How far above its caller's frame a frame called from slot A lies: A + 1, and one more
-- where frames hold two slots of link (a GC64 LuaJIT, flag 8 of string.dump's header).
local ok_dump, dumped = pcall(string.dump, function() end)
if not ok_dump or type(dumped) ~= "string" then return end -- then every loop keeps its entity
local LINK = 1 + (band(dumped:byte(5), 8) ~= 0 and 1 or 0)

local sites = setmetatable({}, {__mode = "k"}) -- function -> {[line] = unread(function, line)}

-- layer.entity_unread(func, line, callee): whether q:each was called by the loop written on
-- line of func (callee: how far above func's frame its callee's lies, jit_views.c) and that
-- loop never reads its entity; read once per site, any failure reads as "may read". The call
-- is checked on every loop: the loop's own call is the only call on its line, but an iterator
-- its ITERC calls, or a metamethod an instruction of that line runs, can tail-call q:each from
-- another slot and hand the result to a body that reads it in another variable.
function layer.entity_unread(func, line, callee)
    local lines = sites[func]
    if not lines then
        lines = {}
        sites[func] = lines
    end
    local call = lines[line]
    if call == nil then
        local ok, result = pcall(unread, func, line)
        call = ok and type(result) == "number" and result
        lines[line] = call
    end
    return call ~= false and callee == call + LINK
end
