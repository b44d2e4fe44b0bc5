/* mod_copy.c: values crossing from one Lua state to another (a mod's exports, what the host
 * grants): plain data is copied, functions become proxies that call into their own state
 * under its budget. Invariant: no error ever unwinds a state other than the one raising. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mods.h"

#define COPY_DEPTH 32           /* tables nested deeper are refused (cycles end here too) */
#define COPY_ITEMS 1000000      /* values one copy may make */
#define CROSS_RESERVE (1u << 20) /* C stack a call into another state must find left */

/* What a state keeps of the functions it hands out as proxies. Its registry holds, at book_key,
 * an anchor (a full userdata) whose user value is the table of kept functions: [light(link)] =
 * the function and [function] = the link's slot (its index in the book's slots), one link per
 * function however often it is handed out. A value read from the table is never taken for a
 * pointer: a host script reaches the table (debug.getuservalue of the registry's anchor) and
 * may write anything there, so a slot is looked up in the book, bounds checked, and its link
 * counts only when the table gives back the same function for it. Links and books are C
 * memory (malloc), not Lua objects: a handle in another state points at its link, so the link
 * must outlive whatever happens to the giving state's objects (a host script may replace the
 * registry's entries through debug.getregistry(), and a giving mod's state closes while other
 * mods still hold proxies into it). Each proxy, in the receiving state,
 * holds a handle (a full userdata with a __gc) that counts once among its link's holders while
 * it lives. A handle's __gc touches no Lua state (it may run while the giver runs, or from inside
 * the giver's own call): it drops the count and, at zero, puts the link on its book, or frees it
 * when the book's anchor is gone; the giver lets the function go (settle) when kiln is next in
 * that state between its code: keeping another function, calling into it, or the manager
 * between frames. Every link without holders is on the book while the anchor stands. */
static const char book_key = 'b';   /* registry of a giving state: its proxy_anchor */
static const char handle_key = 'h'; /* registry of a receiving state: the handles' metatable */
static const char anchor_meta_key = 'a'; /* registry: the anchors' metatable */

typedef struct proxy_link {
    struct proxy_book *book;
    struct proxy_link *next; /* on the book */
    int64_t holders;         /* live handles, in every state */
    int64_t slot;            /* in book->slots: what [function] holds in the table */
    bool queued;             /* on the book */
} proxy_link;

typedef struct proxy_book {
    proxy_link *settle; /* links to look at: those that had no holders when put here */
    proxy_link **slots; /* [slot] = its link, NULL when free */
    int64_t *spare;     /* the free slots below used, a stack */
    int64_t used, spares, cap; /* slots handed out at least once, free ones, room of both */
    int64_t links;      /* links not freed yet */
    bool anchored;      /* its anchor (and table of kept functions) still stands */
} proxy_book;

/* The registry's entry: only what push_kept made passes (check ties the bytes to the address
 * and the book, which no other userdata a script can put there has). */
typedef struct proxy_anchor {
    proxy_book *book; /* NULL once collected */
    uintptr_t check;
} proxy_anchor;

typedef struct proxy_handle {
    klua_mods *mods;
    uint64_t generation; /* of the giving mod (0: the host) */
    proxy_link *link;    /* in the giving state; NULL once let go (or never set) */
} proxy_handle;

typedef struct copy_ctx {
    lua_State *from, *to;
    klua_mods *mods;
    klua_mod *callee; /* the mod owning from, or NULL for the host */
    const char *what;
    int idx;          /* absolute, in from */
    int64_t items;
    size_t bytes;     /* of the strings made: one string held many times is made as many */
    bool functions;   /* functions become proxies (else they are refused) */
    int64_t *steps;   /* the work done, counted as it is done (a refused copy too), or NULL */
} copy_ctx;

/* ---- proxies ------------------------------------------------------------------------------ */

typedef struct call_ctx {
    lua_State *caller;
    klua_mods *mods;
    klua_mod *callee;
    proxy_link *link;
    int nargs;
    int64_t copied;   /* what copying the arguments cost, in steps (so far, when it failed) */
} call_ctx;

static void copy_value(copy_ctx *c, int idx, int depth);

static void put_on_book(proxy_link *link) {
    if (link->queued) return;
    link->queued = true;
    link->next = link->book->settle;
    link->book->settle = link;
}

static void free_book(proxy_book *book) {
    free(book->slots);
    free(book->spare);
    free(book);
}

static void free_link(proxy_link *link) {
    proxy_book *book = link->book;
    book->slots[link->slot] = NULL;
    book->spare[book->spares++] = link->slot;
    free(link);
    if (--book->links == 0 && !book->anchored) free_book(book);
}

/* The link of slot s of book, or NULL (s is read from the table: anything may be there). */
static proxy_link *slot_link(proxy_book *book, lua_Integer s) {
    return s >= 0 && s < book->used ? book->slots[s] : NULL;
}

/* Room for one more slot; false when out of memory (nothing changed then). */
static bool slot_room(proxy_book *book) {
    if (book->spares > 0 || book->used < book->cap) return true;
    int64_t cap = book->cap ? 2 * book->cap : 16;
    proxy_link **slots = realloc(book->slots, (size_t)cap * sizeof *slots);
    if (!slots) return false;
    book->slots = slots;
    int64_t *spare = realloc(book->spare, (size_t)cap * sizeof *spare);
    if (!spare) return false; /* slots is larger, cap is not: the next try reallocates both */
    book->spare = spare;
    book->cap = cap;
    return true;
}

/* Gives the userdata at the top of L the metatable kept in L's registry at key (made if
 * missing): only gc, and hidden from getmetatable. Raises in L when out of memory. */
static void set_hidden_meta(lua_State *L, const void *key, lua_CFunction gc) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_createtable(L, 0, 2);
        lua_pushcfunction(L, gc);
        lua_setfield(L, -2, "__gc");
        lua_pushboolean(L, 0);
        lua_setfield(L, -2, "__metatable");
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, key);
    }
    lua_setmetatable(L, -2);
}

static uintptr_t anchor_check(const proxy_anchor *a) {
    return (uintptr_t)a ^ (uintptr_t)a->book ^ (uintptr_t)&book_key;
}

/* The anchor's __gc, in the giving state: its table goes with it, so the links left without
 * holders are freed, and those still held are freed by their last handle. */
static int anchor_gc(lua_State *F) {
    proxy_anchor *a = lua_touserdata(F, 1);
    if (!a || lua_rawlen(F, 1) != sizeof *a || !a->book || a->check != anchor_check(a)) return 0;
    proxy_book *book = a->book;
    a->book = NULL;
    book->anchored = false;
    book->links++; /* held while draining */
    while (book->settle) {
        proxy_link *link = book->settle;
        book->settle = link->next;
        link->next = NULL;
        link->queued = false;
        if (link->holders == 0) free_link(link);
    }
    if (--book->links == 0) free_book(book);
    return 0;
}

/* The anchor at idx of F, when it is one push_kept made. */
static proxy_anchor *to_anchor(lua_State *F, int idx) {
    proxy_anchor *a = lua_type(F, idx) == LUA_TUSERDATA ? lua_touserdata(F, idx) : NULL;
    if (!a || lua_rawlen(F, idx) != sizeof *a || !a->book || a->check != anchor_check(a)) return NULL;
    return a;
}

/* Pushes F's table of kept functions, made (with its anchor and book) if missing or replaced,
 * and returns its book. Raises in F when out of memory. */
static proxy_book *push_kept(lua_State *F) {
    lua_rawgetp(F, LUA_REGISTRYINDEX, &book_key);
    proxy_anchor *a = to_anchor(F, -1);
    if (a && lua_getiuservalue(F, -1, 1) == LUA_TTABLE) {
        lua_remove(F, -2);
        return a->book;
    }
    if (a) lua_pop(F, 1);
    lua_pop(F, 1);
    a = lua_newuserdatauv(F, sizeof *a, 1);
    a->book = NULL;
    a->check = 0;
    set_hidden_meta(F, &anchor_meta_key, anchor_gc);
    lua_newtable(F);
    lua_setiuservalue(F, -2, 1);
    proxy_book *book = malloc(sizeof *book);
    if (!book) klua_no_memory(F);
    *book = (proxy_book){NULL, NULL, NULL, 0, 0, 0, 0, true};
    a->book = book;
    a->check = anchor_check(a);
    lua_pushvalue(F, -1);
    lua_rawsetp(F, LUA_REGISTRYINDEX, &book_key); /* the key is there (or this raises: a->book frees) */
    lua_getiuservalue(F, -1, 1);
    lua_remove(F, -2);
    return book;
}

/* Lets go of the functions of F's links left without holders (the table of kept functions at
 * t), and frees those links. Only keys that are there are cleared: nothing allocates, nothing
 * raises. */
static void settle_links(lua_State *F, proxy_book *book, int t) {
    while (book->settle) {
        proxy_link *link = book->settle;
        book->settle = link->next;
        link->next = NULL;
        link->queued = false;
        if (link->holders > 0) continue;
        if (lua_rawgetp(F, t, link) == LUA_TFUNCTION) {
            lua_pushvalue(F, -1);
            bool mine = lua_rawget(F, t) == LUA_TNUMBER && lua_tointeger(F, -1) == link->slot;
            lua_pop(F, 1);
            if (mine) {
                lua_pushnil(F);
                lua_rawset(F, t); /* [function] = nil */
            } else {
                lua_pop(F, 1);
            }
            lua_pushnil(F);
            lua_rawsetp(F, t, link); /* [light(link)] = nil */
        } else {
            lua_pop(F, 1);
        }
        free_link(link);
    }
}

/* Settles F's book, when F has one. Protected: F is between its code, no error unwinds it. */
static int settle_thunk(lua_State *F) {
    lua_rawgetp(F, LUA_REGISTRYINDEX, &book_key);
    proxy_anchor *a = to_anchor(F, -1);
    if (!a || lua_getiuservalue(F, -1, 1) != LUA_TTABLE) return 0;
    settle_links(F, a->book, lua_gettop(F));
    return 0;
}

void klua_mod_settle_proxies(lua_State *F) {
    if (!lua_checkstack(F, 8)) return;
    int top = lua_gettop(F);
    if (klua_pcall_c(F, settle_thunk, 0, 0, 0) != LUA_OK) lua_settop(F, top);
}

void klua_mods_settle_proxies(klua_mods *mods) {
    klua_mod_settle_proxies(klua_mods_host_thread(mods));
    for (int i = 0; i < mods->count && !mods->closed; i++)
        if (mods->list[i]->L && mods->list[i]->mem.depth == 0) klua_mod_settle_proxies(mods->list[i]->L);
}

/* Keeps the function at 1 of F (its table's book settled first) and pushes its link as a
 * light userdata; protected in F. A new link is on the book from the start, until its first
 * holder counts: whatever fails after it is made, the next settle lets it go. */
static int keep_function(lua_State *F) {
    luaL_checkstack(F, 8, "keeping a function");
    proxy_book *book = push_kept(F);
    settle_links(F, book, 2);
    lua_pushvalue(F, 1);
    if (lua_rawget(F, 2) == LUA_TNUMBER) {
        proxy_link *link = slot_link(book, lua_tointeger(F, -1));
        lua_pop(F, 1);
        if (link) {
            lua_rawgetp(F, 2, link);
            bool same = lua_rawequal(F, -1, 1);
            lua_pop(F, 1);
            if (same) {
                lua_pushlightuserdata(F, link);
                return 1;
            }
        }
    } else {
        lua_pop(F, 1);
    }
    if (!slot_room(book)) return klua_no_memory(F);
    proxy_link *link = malloc(sizeof *link);
    if (!link) return klua_no_memory(F);
    int64_t slot = book->spares > 0 ? book->spare[--book->spares] : book->used++;
    *link = (proxy_link){book, NULL, 0, slot, false};
    book->slots[slot] = link;
    book->links++;
    put_on_book(link);
    lua_pushvalue(F, 1);
    lua_rawsetp(F, 2, link); /* [light(link)] = function */
    lua_pushvalue(F, 1);
    lua_pushinteger(F, (lua_Integer)slot);
    lua_rawset(F, 2);        /* [function] = slot */
    lua_pushlightuserdata(F, link);
    return 1;
}

/* A handle's __gc, in the receiving state: its link loses a holder, once. Reachable by the
 * collector only (no mod gets the handle or its metatable): a second run finds it let go. */
static int handle_gc(lua_State *L) {
    proxy_handle *h = lua_touserdata(L, 1);
    if (!h || lua_rawlen(L, 1) != sizeof *h || !h->link) return 0;
    proxy_link *link = h->link;
    h->link = NULL;
    if (link->holders > 0) link->holders--;
    if (link->holders > 0) return 0;
    if (link->book->anchored) put_on_book(link);
    else if (!link->queued) free_link(link); /* the giver's table is gone (its state closed) */
    return 0;
}

/* Pushes onto T a handle holding nothing yet (raises in T when out of memory). */
static proxy_handle *push_handle(lua_State *T, klua_mods *mods, uint64_t generation) {
    proxy_handle *h = lua_newuserdatauv(T, sizeof *h, 0);
    *h = (proxy_handle){mods, generation, NULL};
    set_hidden_meta(T, &handle_key, handle_gc);
    return h;
}

/* Runs in the callee's state, protected: the function, the arguments copied in, the call. */
static int call_thunk(lua_State *T) {
    call_ctx *cc = lua_touserdata(T, 1);
    lua_settop(T, 0);
    luaL_checkstack(T, 8, "calling a proxy");
    settle_links(T, push_kept(T), 1); /* the call's own link has a holder: the proxy */
    /* a held link's function is never let go: only a script replacing the registry's anchor
     * (debug.getregistry) loses it */
    if (lua_rawgetp(T, 1, cc->link) != LUA_TFUNCTION)
        klua_raise(T, "the function this proxy calls is gone (a script replaced its state's registry entry)");
    lua_replace(T, 1);
    lua_settop(T, 1);
    copy_ctx c = {cc->caller, T, cc->mods, NULL, "an argument", 0, 0, 0, false, &cc->copied};
    luaL_checkstack(T, cc->nargs + 4, "too many arguments");
    for (int i = 1; i <= cc->nargs; i++) copy_value(&c, i, 0);
    lua_call(T, cc->nargs, LUA_MULTRET);
    return lua_gettop(T);
}

typedef struct results_ctx {
    lua_State *from;
    int first, count; /* the results' slots in from */
    klua_mods *mods;
    klua_mod *callee;
} results_ctx;

/* Runs in the caller's state, protected: copies the results a call left in the callee's. */
static int copy_results(lua_State *L) {
    results_ctx *rc = lua_touserdata(L, 1);
    lua_pop(L, 1);
    luaL_checkstack(L, rc->count + 4, "too many results");
    for (int i = 0; i < rc->count; i++)
        klua_mod_copy(rc->from, rc->first + i, L, rc->mods, rc->callee, "a result");
    return rc->count;
}

/* Charges steps to the budget armed on the caller's view (none armed: nothing). Past it,
 * the caller's count hook fires at its next instruction and raises there (nothing raises
 * here: the callee's stack may still need cleaning). */
static void spend(lua_State *L, klua_world *ckw, int64_t steps) {
    if (ckw->budget_limit <= 0) return;
    ckw->budget_used += steps;
    if (ckw->budget_used <= ckw->budget_limit) return;
    lua_Hook hook = lua_gethook(L);
    if (hook && (lua_gethookmask(L) & LUA_MASKCOUNT)) lua_sethook(L, hook, LUA_MASKCOUNT, 1);
}

/* A call's arguments, copied into the callee, are garbage once it returns, made outside the
 * callee's code: a caller passing 10 MB to an export each frame made the callee's own next
 * string.rep fail for memory, under Lua 5.4 too (a luaL_Buffer's allocation gets no emergency
 * collection). So the callee is collected, before a call and after it, once it grew halfway
 * from the least it held to its limit, as the budget's hook does between instructions under
 * LuaJIT. */
static void settle_callee(klua_mod *callee) {
    klua_mod_mem *m = &callee->mem;
    size_t room = m->limit > m->floor ? m->limit - m->floor : 0;
    if (!callee->L || m->depth > 0 || m->used <= m->floor + room / 2) return;
    lua_gc(callee->L, LUA_GCCOLLECT, 0);
    m->floor = m->used;
}

/* The proxy: upvalues its handle (the manager, the callee's generation, 0 for the host, and the
 * link of the function in the callee's state) and the callee's name for messages. Arguments
 * and results are copied; an error comes back as an error of the caller's, naming the callee.
 * Proxies live in mods' states only (no function is ever copied into the host's: arguments
 * cannot be functions), which the manager closes before it is freed, so h->mods stands. */
static int proxy(lua_State *L) {
    const proxy_handle *h = lua_touserdata(L, lua_upvalueindex(1));
    const char *callee_name = lua_tostring(L, lua_upvalueindex(2));
    klua_mods *mods = h ? h->mods : NULL;
    uint64_t gen = h ? h->generation : 0;
    /* a handle let go belongs to a proxy being collected (called by a finalizer of its state) */
    if (!h || !h->link) klua_fail(L, callee_name, "the proxy was released");
    if (!mods || mods->closed) klua_fail(L, callee_name, "the mod manager is closed");
    klua_mod *callee = NULL;
    lua_State *T;
    if (gen == 0) {
        T = klua_mods_host_thread(mods);
    } else {
        for (int i = 0; i < mods->count && !callee; i++)
            if (mods->list[i]->generation == gen) callee = mods->list[i];
        if (!callee || !callee->L) klua_raise(L, "%s is no longer loaded", callee_name);
        if (callee->mem.depth > 0) klua_raise(L, "cannot call into %s while its own code runs", callee_name);
        T = callee->L;
    }
    if (T == L) klua_fail(L, callee_name, "a proxy cannot call into its own state");
    /* each state stops its own C calls at its own limit, never the sum: 70 mods each calling
     * the next one's export from 180 nested pcalls ran the host's 8 MiB stack out */
    if (klua_c_stack_short(&mods->stack, CROSS_RESERVE))
        klua_fail(L, callee_name, "calls between mods nest too deep (the C stack is nearly spent)");
    int base = lua_gettop(T);
    if (!lua_checkstack(T, 8)) klua_fail(L, callee_name, "out of stack");
    call_ctx cc = {L, mods, callee, h->link, lua_gettop(L), 0};
    klua_system *borrowed = NULL;
    klua_armed saved;
    /* the callee's code (a mod's, or a host function granted to mods) is checked against the
     * access of the system calling it */
    klua_mod *caller = klua_mods_of_thread(mods, L); /* found while it loads too */
    klua_world *ckw = caller ? caller->kw : NULL; /* the calling mod's view, whose budget pays */
    borrowed = ckw ? ckw->current : NULL;
    klua_system *host_current = mods->kw->current;
    if (!callee) mods->kw->current = borrowed;
    if (callee) {
        settle_callee(callee); /* its garbage (an earlier call's copies, under LuaJIT its own) */
        /* the callee runs on what is left of the caller's budget, and its instructions are
         * charged back: a caller looping over pcall(proxy) cannot buy a fresh budget a call */
        int64_t limit = mods->instructions;
        if (ckw && ckw->budget_limit > 0) {
            int64_t left = ckw->budget_limit - ckw->budget_used;
            if (left <= 0) {
                spend(L, ckw, 1);
                klua_fail(L, callee_name, "the caller's budget is spent");
            }
            if (left < limit) limit = left;
        }
        char what[KILN_MAX_NAME + 40];
        snprintf(what, sizeof what, "a call into mod '%s'", callee->name);
        klua_budget_arm(T, callee->kw, limit, what, &saved);
        /* and before the caller's deadline: the call is on its clock (its own, or its mod's
         * for the frame), which a fresh time limit a call would multiply */
        if (saved.armed && ckw && ckw->budget_limit > 0 && ckw->deadline > 0 &&
            (callee->kw->deadline <= 0 || ckw->deadline < callee->kw->deadline)) {
            callee->kw->deadline = ckw->deadline;
            callee->kw->deadline_from = KLUA_DEADLINE_CALLER;
        }
        /* set after arming: a call is the caller's work, paid from its budget (and frame),
         * never from what the callee's own systems have left this frame */
        callee->kw->current = borrowed;
    }
    /* whatever a loading top level spawned so far, the callee may see (its arguments, the
     * world's queries) and keep: a failed load cannot give those slots back (mod_undo.c) */
    mods->calls++;
    if (mods->loading) mods->loading->load_shown = mods->loading->load_spawn_count;
    lua_pushlightuserdata(T, &cc);
    int status = klua_pcall_c(T, call_thunk, 1, LUA_MULTRET, 0);
    if (callee) {
        klua_budget_disarm(T, callee->kw, &saved);
        if (ckw) spend(L, ckw, callee->kw->budget_used);
        /* loops its code left open end with the call; what they held is its own queuing */
        klua_mods_end_loops(mods, T, callee->kw, callee);
        callee->kw->current = NULL;
    } else {
        /* loops the host function left open under the borrowed system end with the call */
        if (borrowed && !mods->kw->closed) klua_mods_end_loops(mods, T, mods->kw, NULL);
        mods->kw->current = host_current;
    }
    /* the host's copy of the arguments is the caller's work (a mod's copy was charged as the
     * callee's allocations) */
    if (ckw && !callee) spend(L, ckw, cc.copied);
    if (status != LUA_OK) {
        char msg[KLUA_MOD_ERROR];
        const char *m = lua_tostring(T, -1);
        snprintf(msg, sizeof msg, "%s", m ? m : "(error object is not a string)");
        lua_settop(T, base);
        if (callee) settle_callee(callee);
        klua_fail(L, callee_name, "%s", msg);
    }
    /* the results are copied under a protected call of the caller's, so that a copy that
     * fails (the caller's memory full, a value refused) still leaves T as it was */
    results_ctx rc = {T, base + 1, lua_gettop(T) - base, mods, callee};
    int top = lua_gettop(L);
    if (!lua_checkstack(L, 4)) {
        lua_settop(T, base);
        klua_fail(L, callee_name, "out of stack");
    }
    lua_pushlightuserdata(L, &rc);
    status = klua_pcall_c(L, copy_results, 1, LUA_MULTRET, 0);
    lua_settop(T, base);
    if (callee) settle_callee(callee);
    if (status == LUA_ERRMEM) return lua_error(L); /* the memory error stays one */
    if (status != LUA_OK) klua_fail(L, callee_name, "%s", lua_tostring(L, -1)); /* a result refused */
    return lua_gettop(L) - top;
}

/* Pushes into c->to a proxy of the function at idx of c->from. The handle is made first, so
 * that the function is kept only once the proxy can hold it (what fails after that is a
 * handle its collector lets go). */
static void push_proxy(copy_ctx *c, int idx) {
    lua_State *F = c->from, *T = c->to;
    if (!lua_checkstack(F, 4)) luaL_error(T, "%s: out of stack", c->what);
    proxy_handle *h = push_handle(T, c->mods, c->callee ? c->callee->generation : 0);
    lua_pushvalue(F, idx);
    if (klua_pcall_c(F, keep_function, 1, 1, 0) != LUA_OK) {
        lua_pop(F, 1);
        klua_no_memory(T); /* what keep_function can fail for: memory, F's or ours */
    }
    h->link = lua_touserdata(F, -1);
    h->link->holders++;
    lua_pop(F, 1);
    if (c->callee) lua_pushfstring(T, "mod '%s'", c->callee->name);
    else lua_pushliteral(T, "the host");
    lua_pushcclosure(T, proxy, 2);
}

/* ---- copying ----------------------------------------------------------------------------- */

static void copy_value(copy_ctx *c, int idx, int depth) {
    lua_State *F = c->from, *T = c->to;
    idx = lua_absindex(F, idx);
    if (++c->items > COPY_ITEMS) luaL_error(T, "%s holds more than %d values", c->what, COPY_ITEMS);
    if (c->steps) (*c->steps)++;
    luaL_checkstack(T, 4, "nested too deep");
    switch (lua_type(F, idx)) {
    case LUA_TNIL: lua_pushnil(T); break;
    case LUA_TBOOLEAN: lua_pushboolean(T, lua_toboolean(F, idx)); break;
    case LUA_TNUMBER:
        if (lua_isinteger(F, idx)) lua_pushinteger(T, lua_tointeger(F, idx));
        else lua_pushnumber(T, lua_tonumber(F, idx));
        break;
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(F, idx, &len);
        /* a string its state holds once may be copied a million times (a table of one long
         * string): no copy makes more than a mod may hold */
        c->bytes += len;
        if (c->bytes > c->mods->memory)
            luaL_error(T, "%s holds more than %I bytes of strings, a mod's memory", c->what, (lua_Integer)c->mods->memory);
        if (c->steps) *c->steps += (int64_t)(len / KLUA_COST_BYTES_PER_STEP);
        lua_pushlstring(T, s, len);
        break;
    }
    case LUA_TTABLE: {
        if (depth >= COPY_DEPTH)
            luaL_error(T, "%s nests tables deeper than %d (a cycle?)", c->what, COPY_DEPTH);
        if (lua_getmetatable(F, idx)) {
            lua_pop(F, 1);
            luaL_error(T, "%s holds a table with a metatable, which cannot be copied", c->what);
        }
        if (!lua_checkstack(F, 4)) luaL_error(T, "%s: out of stack", c->what);
        /* sized like the original's sequence, so a list stays a list (array part) */
        lua_Unsigned n = lua_rawlen(F, idx);
        lua_createtable(T, n < COPY_ITEMS ? (int)n : 0, 0);
        lua_pushnil(F);
        while (lua_next(F, idx)) {
            copy_value(c, -2, depth + 1);
            copy_value(c, -1, depth + 1);
            lua_rawset(T, -3);
            lua_pop(F, 1);
        }
        break;
    }
    case LUA_TFUNCTION:
        if (!c->functions) luaL_error(T, "%s is a function, which cannot be passed between mods", c->what);
        push_proxy(c, idx);
        break;
    default:
        luaL_error(T, "%s holds a %s, which cannot leave its Lua state", c->what, luaL_typename(F, idx));
    }
}

static int copy_thunk(lua_State *T) {
    copy_ctx *c = lua_touserdata(T, 1);
    lua_pop(T, 1);
    copy_value(c, c->idx, 0);
    return 1;
}

void klua_mod_copy(lua_State *from, int idx, lua_State *to, klua_mods *mods, klua_mod *callee,
                   const char *what) {
    copy_ctx c = {from, to, mods, callee, what, lua_absindex(from, idx), 0, 0, true, NULL};
    int from_top = lua_gettop(from);
    luaL_checkstack(to, 4, "out of stack");
    lua_pushlightuserdata(to, &c);
    int status = klua_pcall_c(to, copy_thunk, 1, 1, 0);
    lua_settop(from, from_top);
    if (status != LUA_OK) lua_error(to);
}
