/* budget.c: the instruction budget of one entry into Lua code (a system run, a mod's top
 * level, a call into a mod). Invariant: once spent, it raises at every instruction until the
 * entry is disarmed, so no pcall inside the entry can swallow it. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "klua.h"
#include "../../core/src/number_text.h" /* (header-only: no call into core internals) */

#define BUDGET_STEP 1000 /* instructions between two charges */
static const char budget_key = 'b'; /* registry key (its address): the world being charged */

static klua_world *armed_world(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &budget_key);
    /* only what klua_budget_arm puts there: a host script can replace the entry through
     * debug.getregistry(), and a full userdata's bytes are not a world */
    klua_world *kw = lua_type(L, -1) == LUA_TLIGHTUSERDATA ? lua_touserdata(L, -1) : NULL;
    lua_pop(L, 1);
    return kw && kw->budget_limit > 0 ? kw : NULL;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Why the entry armed now is past its deadline, in one shape for every caller. */
static void late_message(const klua_world *kw, char *why, size_t size) {
    if (kw->deadline_from == KLUA_DEADLINE_FRAME)
        snprintf(why, size, "%s ran past what was left of its mod's %d ms for this frame", kw->budget_what,
                 (int)kw->frame_time_ms);
    else if (kw->deadline_from == KLUA_DEADLINE_CALLER)
        snprintf(why, size, "%s ran past the time its caller had left", kw->budget_what);
    else
        snprintf(why, size, "%s ran past its time limit of %d ms", kw->budget_what, (int)kw->time_limit_ms);
}

/* Spends the budget armed now; a clock that stops it first keeps what the count had reached
 * (budget_ran), so that the frame's instructions are charged what the run executed. */
static void spend(klua_world *kw, bool late) {
    if (late && kw->budget_used <= kw->budget_limit) kw->budget_ran = kw->budget_used;
    kw->budget_used = kw->budget_limit + 1;
}

static KLUA_NORETURN void spent(lua_State *L, klua_world *kw) {
    bool late = kw->deadline > 0 && now_seconds() > kw->deadline;
    spend(kw, late);
    lua_sethook(L, lua_gethook(L), LUA_MASKCOUNT, 1); /* raise at every instruction from now */
    if (late) {
        char why[sizeof kw->budget_what + 80];
        late_message(kw, why, sizeof why);
        klua_raise(L, "%s", why);
    }
    if (kw->frame_capped)
        klua_raise(L, "%s ran past what was left of its mod's %I instructions for this frame", kw->budget_what,
                   (lua_Integer)kw->frame_limit);
    klua_raise(L, "%s ran past its budget of %I instructions", kw->budget_what, (lua_Integer)kw->budget_limit);
}

/* Coroutines the entry creates inherit the hook, so their instructions are charged too. */
static void budget_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    klua_world *kw = armed_world(L);
    if (!kw) return;
    if (kw->budget_used <= kw->budget_limit) {
        kw->budget_used += lua_gethookcount(L);
        if (kw->mod_hooks && kw->mod_hooks->step) kw->mod_hooks->step(L, kw);
        /* the wall clock backs the count up: some single instructions (comparing long
         * strings, calls with huge argument lists) cost far more than others */
        bool late = kw->deadline > 0 && now_seconds() > kw->deadline;
        if (kw->budget_used <= kw->budget_limit && !late) return;
        if (late) spend(kw, true);
    }
    spent(L, kw);
}

static void count_again(lua_State *L, klua_world *kw) {
    int64_t left = kw->budget_limit - kw->budget_used;
    kw->row_cost = 0;
    kw->row_expected = false;
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, left < BUDGET_STEP ? (int)(left > 0 ? left : 0) + 1 : BUDGET_STEP);
}

/* Row mode's hook must tell the callback's own call from a call out of it (a metamethod, an
 * __index function, the error handler), whose instructions must be counted, and do it on
 * every row at a small fraction of the row's cost. Two ways:
 * - a mod's state is kiln's own (mod_sandbox.c made it), so its threads' extra space
 *   (lua_getextraspace) holds the armed world, whose row_expected flag is set right before
 *   each row's call;
 * - a host's state and its extra space are the host's: there the hook's count (unused by a
 *   call hook) holds how many frames lie below the rows loop, and a call whose frame lies
 *   deeper than the callback's is a call out of it (a walk down the stack on every row). */
#define ROWS_MAX_DEPTH 200 /* deeper host stacks keep counting every instruction */

static void row_hook_mod(lua_State *L, lua_Debug *ar) {
    (void)ar;
    klua_world *kw;
    memcpy(&kw, lua_getextraspace(L), sizeof kw);
    if (kw->row_expected) {
        kw->row_expected = false;
        return;
    }
    count_again(L, kw);
}

static void row_hook_host(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_Debug below;
    if (!lua_getstack(L, lua_gethookcount(L) + 1, &below)) return;
    klua_world *kw = armed_world(L);
    if (kw) count_again(L, kw);
    else lua_sethook(L, budget_hook, LUA_MASKCOUNT, BUDGET_STEP);
}

static bool in_rows(lua_State *L) {
    lua_Hook h = lua_gethook(L);
    return h == row_hook_mod || h == row_hook_host;
}

void klua_budget_rows_begin(lua_State *L, klua_world *kw, int64_t cost) {
    if (cost <= 0 || kw->row_cost > 0 || armed_world(L) != kw || kw->budget_used > kw->budget_limit) return;
    if (lua_gethook(L) != budget_hook) return; /* a host's own hook stays as it is */
    kw->rows_charged = 0;
    kw->row_expected = false;
    if (kw->host) { /* a mod's view: see above */
        memcpy(lua_getextraspace(L), &kw, sizeof kw);
        kw->row_cost = cost;
        lua_sethook(L, row_hook_mod, LUA_MASKCALL, 0);
        return;
    }
    lua_Debug ar;
    int depth = 0; /* frames from the running C function (the rows loop's) down */
    while (lua_getstack(L, depth, &ar))
        if (++depth > ROWS_MAX_DEPTH) return;
    kw->row_cost = cost;
    lua_sethook(L, row_hook_host, LUA_MASKCALL, depth);
}

/* Called only while kw->row_cost > 0: a call out of a row, which counts again, zeroes it. */
void klua_budget_row_charge(lua_State *L, klua_world *kw) {
    kw->budget_used += kw->row_cost;
    bool late = ++kw->rows_charged == 256 && kw->deadline > 0 && now_seconds() > kw->deadline;
    if (kw->rows_charged == 256) kw->rows_charged = 0;
    if (kw->budget_used > kw->budget_limit || late) {
        kw->row_cost = 0;
        spent(L, kw);
    }
    kw->row_expected = true;
}

void klua_budget_rows_end(lua_State *L, klua_world *kw) {
    if (kw->row_cost <= 0) return;
    if (in_rows(L)) count_again(L, kw);
    kw->row_cost = 0;
    kw->row_expected = false;
}

void klua_budget_prepare(lua_State *L) {
    int t = lua_rawgetp(L, LUA_REGISTRYINDEX, &budget_key);
    lua_pop(L, 1);
    if (t != LUA_TNIL) return; /* made already: it may hold a budget armed now (kiln opened again) */
    lua_pushboolean(L, 0);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &budget_key);
}

void klua_budget_arm(lua_State *L, klua_world *kw, int64_t limit, const char *what, klua_armed *saved) {
    saved->hook = lua_gethook(L);
    saved->mask = lua_gethookmask(L);
    saved->count = lua_gethookcount(L);
    /* inside a console statement its hook stays: a world's budget armed there replaced the
     * statement's count, clock and charges for the whole run (a statement's own world with a
     * budget of 4e9 held the game for seconds, one of 1e12 for good) */
    saved->armed = limit > 0 && !klua_console_active(L);
    saved->framed = saved->clocked = false;
    if (kw->entry_depth) (*kw->entry_depth)++;
    if (kw->host) kw->host->guest_depth++;
    if (!saved->armed) return;
    /* a mod's system runs share one budget and one clock per frame, so many systems cannot
     * add up */
    saved->framed = kw->frame_limit > 0 && kw->current;
    saved->clocked = kw->frame_time_ms > 0 && kw->current;
    if ((saved->framed || saved->clocked) && klua_frame_key(kw->world) != kw->frame_tick) {
        kw->frame_tick = klua_frame_key(kw->world);
        kw->frame_used = 0;
        kw->frame_time_used = 0;
    }
    kw->frame_capped = false;
    if (saved->framed) {
        int64_t left = kw->frame_limit - kw->frame_used;
        if (left < limit) {
            limit = left > 0 ? left : 1;
            kw->frame_capped = true;
        }
    }
    /* the clock is read once here (and once at disarm when the frame's clock is charged) */
    double now = kw->time_limit_ms > 0 || saved->clocked ? now_seconds() : 0;
    kw->deadline = kw->time_limit_ms > 0 ? now + kw->time_limit_ms / 1000.0 : 0;
    kw->deadline_from = KLUA_DEADLINE_ENTRY;
    if (saved->clocked) {
        saved->start = now;
        double left = kw->frame_time_ms / 1000.0 - kw->frame_time_used;
        if (kw->deadline <= 0 || now + left < kw->deadline) {
            /* spent: past already, so the first check stops the run */
            kw->deadline = left > 0 ? now + left : now - 1;
            kw->deadline_from = KLUA_DEADLINE_FRAME;
        }
        if (left <= 0) limit = 1; /* refused at once: checked after its first instruction */
    }
    kw->budget_used = 0;
    kw->budget_ran = -1;
    kw->budget_limit = limit;
    snprintf(kw->budget_what, sizeof kw->budget_what, "%s", what);
    lua_pushlightuserdata(L, kw);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &budget_key);
    klua_compat_budget_jit_off(L); /* LuaJIT: a host's jit.on() since must not void the count */
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, limit < BUDGET_STEP ? (int)limit + 1 : BUDGET_STEP);
}

void klua_budget_disarm(lua_State *L, klua_world *kw, const klua_armed *saved) {
    if (kw->entry_depth) (*kw->entry_depth)--;
    if (kw->host) kw->host->guest_depth--;
    if (!saved->armed) return;
    kw->row_cost = 0;
    kw->row_expected = false;
    /* LuaJIT: a spent budget's error caught inside lua_load stopped every hook of the state
     * for good; the run is over, the next ones are counted again */
    if (kw->budget_used > kw->budget_limit) klua_compat_hook_revive(L);
    lua_sethook(L, saved->hook, saved->mask, saved->count);
    /* a run past its count is charged its whole budget; one the clock stopped, what it ran */
    if (saved->framed)
        kw->frame_used += kw->budget_used <= kw->budget_limit ? kw->budget_used
                          : kw->budget_ran >= 0                ? kw->budget_ran
                                                               : kw->budget_limit;
    if (saved->clocked) kw->frame_time_used += now_seconds() - saved->start;
    kw->budget_limit = 0;
    kw->deadline = 0;
    lua_pushboolean(L, 0); /* false, not nil: the slot stays, so arming again allocates nothing */
    lua_rawsetp(L, LUA_REGISTRYINDEX, &budget_key);
}

double klua_budget_left(lua_State *L) {
    klua_world *kw = armed_world(L);
    if (!kw) return -1;
    return kw->budget_used > kw->budget_limit ? 0 : (double)(kw->budget_limit - kw->budget_used);
}

void klua_budget_charge(lua_State *L, double steps, const char *what) {
    klua_world *kw = armed_world(L);
    if (!kw) return;
    if (kw->budget_used > kw->budget_limit) spent(L, kw);
    double left = (double)(kw->budget_limit - kw->budget_used);
    /* a NaN is refused, and so is 2^63 (left rounds up to it): neither converts to an int64_t */
    if (!(steps <= left && steps < 9223372036854775808.0)) { /* lua_pushfstring knows no %g: format here */
        char msg[256], num[32];
        snprintf(msg, sizeof msg, "%.40s could take %s steps, past what is left of the budget of %s", what,
                 kl_number_text(num, sizeof num, "%.3g", steps), kw->budget_what);
        klua_raise(L, "%s", msg); /* a budget's stop: no chunk:line: (docs/lua-api.md) */
    }
    kw->budget_used += (int64_t)steps;
}

void klua_budget_spend(lua_State *L, double steps) {
    klua_world *kw = armed_world(L);
    if (!kw || steps <= 0) return;
    if (!(steps <= (double)(kw->budget_limit - kw->budget_used) && steps < 9223372036854775808.0)) {
        /* spent as the hook spends it (without raising here): the next instruction raises */
        kw->budget_used = kw->budget_limit + 1;
        lua_sethook(L, lua_gethook(L), LUA_MASKCOUNT, 1);
        return;
    }
    kw->budget_used += (int64_t)steps;
}

bool klua_budget_watch_report(void *ud, int64_t units) {
    klua_budget_watch *w = ud;
    w->steps += (double)units * w->steps_per_unit;
    double left = klua_budget_left(w->L);
    const char *overdue = NULL;
    if (left >= 0 && w->steps > left) w->stopped = true;
    else if (klua_budget_late(w->L, w->late, sizeof w->late)) w->stopped = w->timed_out = true;
    else if ((overdue = klua_console_overdue(w->L))) { /* a console statement's own clock */
        snprintf(w->late, sizeof w->late, "%s", overdue);
        w->stopped = w->timed_out = true;
    }
    return !w->stopped;
}

bool klua_budget_watch_continue(void *watch) { return klua_budget_watch_report(watch, 0); }

void klua_budget_watch_end(klua_budget_watch *w, const char *what) {
    if (w->timed_out) klua_raise(w->L, "%s", w->late);
    klua_budget_charge(w->L, w->steps, what); /* past the budget: raises, naming what */
}

bool klua_budget_late(lua_State *L, char *why, size_t size) {
    klua_world *kw = armed_world(L);
    if (!kw || kw->deadline <= 0 || now_seconds() <= kw->deadline) return false;
    late_message(kw, why, size);
    /* spent as the hook spends it (without raising here): the next instruction raises */
    spend(kw, true);
    lua_sethook(L, lua_gethook(L), LUA_MASKCOUNT, 1);
    return true;
}

/* Text handed to the parser in pieces, so that the clock is read between them. */
typedef struct timed_text {
    const char *s;
    size_t left;
    bool late;
    char why[KILN_MAX_NAME + 80];
} timed_text;

#define PARSE_PIECE 512 /* bytes: the parser's work on one, even quadratic, is a few ms */

static const char *read_timed(lua_State *L, void *ud, size_t *size) {
    timed_text *t = ud;
    *size = 0;
    if (t->left == 0 || (t->late = klua_budget_late(L, t->why, sizeof t->why))) return NULL;
    const char *piece = t->s;
    *size = t->left < PARSE_PIECE ? t->left : PARSE_PIECE;
    t->s += *size;
    t->left -= *size;
    return piece;
}

int klua_budget_load(lua_State *L, const char *s, size_t n, const char *chunkname, const char *mode) {
    timed_text t = {s, n, false, ""};
    int status = lua_load(L, read_timed, &t, chunkname, mode);
    if (!t.late) return status;
    lua_pop(L, 1); /* the error of the text cut short */
    lua_pushstring(L, t.why);
    return LUA_ERRRUN;
}
