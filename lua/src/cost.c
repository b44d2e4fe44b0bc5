/* cost.c: the worst case of the C library calls that can run long on one call (string.rep,
 * the pattern functions, table.concat, sort, move, insert, remove), charged before they run. */
#include <ctype.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "klua.h"

/* ---- the worst case of a Lua pattern ------------------------------------------------------
 * The matcher tries, for a quantified item (`*`, `+`, `-`), every length of its run, and for
 * each the rest of the pattern. When the item after it cannot match a character the run
 * took (their classes are disjoint), all but one of those tries fail at once: the run costs
 * its length, added. When they overlap, each length can go on matching: the run multiplies.
 * A `?` doubles, `%b` and back references are charged as overlapping runs, and an
 * unanchored search starts at every position. The estimate is an upper bound, reached by
 * patterns like "a*a*a*b" on "aaaa...". */

typedef struct charset {
    uint64_t bits[4];
} charset;

static void set_add(charset *cs, unsigned char ch) { cs->bits[ch >> 6] |= (uint64_t)1 << (ch & 63); }

static bool class_has(char cls, int ch) {
    switch (cls | 0x20) {
    case 'a': return isalpha(ch);
    case 'c': return iscntrl(ch);
    case 'd': return isdigit(ch);
    case 'g': return isgraph(ch);
    case 'l': return islower(ch);
    case 'p': return ispunct(ch);
    case 's': return isspace(ch);
    case 'u': return isupper(ch);
    case 'w': return isalnum(ch);
    case 'x': return isxdigit(ch);
    default: return ch == (unsigned char)cls;
    }
}

/* Adds the escape %cls to cs (an upper-case class letter is the complement). */
static void set_class(charset *cs, char cls) {
    bool letter = strchr("acdglpsuwxACDGLPSUWX", cls) && cls;
    for (int ch = 0; ch < 256; ch++) {
        bool in = class_has(cls, ch);
        if (letter && isupper((unsigned char)cls)) in = !in;
        if (in) set_add(cs, (unsigned char)ch);
    }
}

/* Reads one single-character item at p[*i] into cs; false for what is not one (%b, %f, a
 * back reference, a capture bracket). */
static bool read_item(const char *p, size_t m, size_t *i, charset *cs) {
    memset(cs, 0, sizeof *cs);
    char ch = p[*i];
    if (ch == '.') {
        memset(cs, 0xff, sizeof *cs);
        (*i)++;
    } else if (ch == '%' && *i + 1 < m) {
        char e = p[*i + 1];
        if (e == 'b' || e == 'f' || (e >= '0' && e <= '9')) return false;
        set_class(cs, e);
        *i += 2;
    } else if (ch == '[') {
        size_t k = *i + 1;
        bool negate = k < m && p[k] == '^';
        if (negate) k++;
        do {
            if (k >= m) break;
            if (p[k] == '%' && k + 1 < m) {
                set_class(cs, p[k + 1]);
                k += 2;
            } else if (k + 2 < m && p[k + 1] == '-' && p[k + 2] != ']') {
                for (int c = (unsigned char)p[k]; c <= (unsigned char)p[k + 2]; c++) set_add(cs, (unsigned char)c);
                k += 3;
            } else {
                set_add(cs, (unsigned char)p[k++]);
            }
        } while (k < m && p[k] != ']');
        if (negate)
            for (int w = 0; w < 4; w++) cs->bits[w] = ~cs->bits[w];
        *i = k + 1;
    } else if (ch == '(' || ch == ')') {
        return false;
    } else {
        set_add(cs, (unsigned char)ch);
        (*i)++;
    }
    return true;
}

static bool overlap(const charset *a, const charset *b) {
    for (int w = 0; w < 4; w++)
        if (a->bits[w] & b->bits[w]) return true;
    return false;
}

enum { ITEMS_MAX = 64 };

typedef struct item {
    charset cs;
    char quant;  /* 0, '*', '+', '-', '?' */
    bool opaque; /* %b, %f, a back reference: charged as an overlapping run */
} item;

static double pattern_cost(const char *p, size_t m, const char *subject, size_t n, bool may_anchor,
                           bool plain) {
    double starts = (double)n + 1, run = (double)n + 1;
    if (plain) return starts * ((double)m + 1);
    size_t i = 0;
    if (may_anchor && m > 0 && p[0] == '^') {
        starts = 1;
        i = 1;
    }
    item items[ITEMS_MAX];
    int count = 0;
    double ways = 1, added = 1;
    /* testing a character against a set reads the set's text up to the end: each step of
     * the match costs up to the longest item's (a class of 100k characters, tested at each
     * of 100k positions, ran 12 s on a charge of 200k steps) */
    double weight = 1;
    while (i < m) {
        if (p[i] == '(' || p[i] == ')') {
            i++;
            continue;
        }
        if (p[i] == '$' && i + 1 == m) break;
        item it = {0};
        size_t at = i;
        bool readable = read_item(p, m, &i, &it.cs);
        if (!readable) {
            i = at + 2 + (p[at + 1] == 'b' ? 2 : 0);
            if (p[at + 1] == 'f') {
                /* a frontier is a zero-width test: no run of its own, but its set's cost */
                if (i < m) read_item(p, m, &i, &it.cs);
                if (1 + (double)(i - at) / KLUA_COST_BYTES_PER_STEP > weight)
                    weight = 1 + (double)(i - at) / KLUA_COST_BYTES_PER_STEP;
                continue;
            }
            it.opaque = true;
        }
        if (1 + (double)(i - at) / KLUA_COST_BYTES_PER_STEP > weight)
            weight = 1 + (double)(i - at) / KLUA_COST_BYTES_PER_STEP;
        if (i < m && strchr("*+-?", p[i])) it.quant = p[i++];
        if (count == ITEMS_MAX) {
            ways *= run; /* past what is looked at closely: every further item multiplies */
            continue;
        }
        items[count++] = it;
    }
    if (starts > 1 && count > 0 && !items[0].opaque && (items[0].quant == 0 || items[0].quant == '+')) {
        /* a search gets past its first item only where that item matches: count those */
        double hits = 1;
        for (size_t k = 0; k < n; k++) {
            unsigned char ch = (unsigned char)subject[k];
            if (items[0].cs.bits[ch >> 6] >> (ch & 63) & 1) hits++;
        }
        starts = hits;
    }
    for (int k = 0; k < count; k++) {
        const item *it = &items[k];
        if (it->quant == '?') {
            ways *= 2;
        } else if (it->opaque) {
            ways *= run;
        } else if (it->quant) {
            bool overlapping = k + 1 < count && (items[k + 1].opaque || overlap(&it->cs, &items[k + 1].cs));
            if (overlapping) ways *= run;
            else added += run;
        }
        if (ways > 1e30) break;
    }
    return ((double)n + starts * ways * (added + (double)m + 1)) * weight;
}

static bool has_specials(const char *p, size_t m) {
    for (size_t i = 0; i < m; i++)
        if (strchr("^$*+?.([%-", p[i])) return true;
    return false;
}

/* Length of what #t gives without running a metamethod (0 for a non-table). */
static double raw_len(lua_State *L, int idx) {
    return lua_type(L, idx) == LUA_TTABLE ? (double)lua_rawlen(L, idx) : 0;
}

/* A number argument as the library reads it: a string that reads as a number counts
 * ("1e9" repeats a string 1e9 times); converting it leaves the argument as it is. */
static double int_arg(lua_State *L, int idx, double dflt) {
    if (!lua_isnumber(L, idx)) return dflt;
    return lua_tonumber(L, idx);
}

/* Bytes table.concat(t, sep, i, j) would build, counting raw entries (a value behind a
 * metamethod is charged when its Lua code runs). */
static double concat_bytes(lua_State *L, double left) {
    if (lua_type(L, 1) != LUA_TTABLE) return 0;
    double i = int_arg(L, 3, 1), j = int_arg(L, 4, raw_len(L, 1));
    if (!(j >= i) || i < -9e15 || j > 9e15) return 0; /* the original refuses what is no integer */
    double count = j - i + 1;
    if (count > left) return count * KLUA_COST_BYTES_PER_STEP; /* refused before a loop */
    size_t sep = lua_type(L, 2) == LUA_TSTRING ? lua_rawlen(L, 2) : 0;
    double bytes = count * (double)sep;
    for (lua_Integer k = (lua_Integer)i; k <= (lua_Integer)j; k++) {
        if (lua_rawgeti(L, 1, k) == LUA_TSTRING) bytes += (double)lua_rawlen(L, -1);
        else bytes += 24; /* a number's text */
        lua_pop(L, 1);
        if (bytes > KLUA_COST_RESULT_MAX) break;
    }
    return bytes;
}

/* Raises when the table library would take the length of argument 1 from a __len metamethod:
 * it loops to what that answers, which no charge made before the call can know (charged by the
 * raw length, a __len answering 2^26 over C metamethods held a statement for 14 s unhooked). */
static void refuse_len_metamethod(lua_State *L, const char *name) {
    if (!lua_getmetatable(L, 1)) return;
    lua_pushliteral(L, "__len");
    int len = lua_rawget(L, -2);
    lua_pop(L, 2);
    if (len != LUA_TNIL)
        luaL_error(L, "%s: a table whose length comes from a __len metamethod is refused (what it answers "
                      "cannot be charged before the call)", name);
}

/* The words of s that make the parser join a jump list (and, or, elseif, break, goto): it
 * walks the list at each, so a chain of k costs about k * k / 2 list steps (100k took Lua
 * 5.4 18 s). Counted in strings and comments too: an upper bound. */
double klua_jump_words(const char *s, size_t n) {
    double k = 0;
    for (size_t i = 0; i < n;) {
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_')) i++;
        const char *w = s + start;
        switch (i - start) { /* by length: the scan reads each byte once, no word list */
        case 2: k += memcmp(w, "or", 2) == 0; break;
        case 3: k += memcmp(w, "and", 3) == 0; break;
        case 4: k += memcmp(w, "goto", 4) == 0; break;
        case 5: k += memcmp(w, "break", 5) == 0; break;
        case 6: k += memcmp(w, "elseif", 6) == 0; break;
        default: break;
        }
    }
    return k;
}

/* The parse of text: read, and with its jump lists. */
static double text_steps(const char *s, size_t n) {
    double k = klua_jump_words(s, n);
    return (double)n / KLUA_COST_BYTES_PER_STEP + k * k / 4;
}

/* loadfile's and dofile's parse of the file named at 1, as load's of its text: the file is
 * read here (at most KLUA_COST_FILE_MAX bytes) to count its jump words. Refused (raises): no
 * name (standard input, which would wait for the game's terminal), a file that is not regular
 * (a pipe, /dev/zero: it might never end) or is longer. */
static double file_steps(lua_State *L, const char *name) {
    if (lua_type(L, 1) != LUA_TSTRING)
        luaL_error(L, "console: %s of standard input is not available (it would wait for the game's terminal)", name);
    const char *path = lua_tostring(L, 1);
    struct stat st;
    if (stat(path, &st) != 0) return 0; /* the call itself says why */
    if (!S_ISREG(st.st_mode)) luaL_error(L, "console: %s of %s refused: not a regular file (it might never end)", name, path);
    if ((uint64_t)st.st_size > KLUA_COST_FILE_MAX)
        luaL_error(L, "console: %s of %s refused: longer than %d KiB (its parse would run past the clock); give "
                      "load its text, which is parsed in pieces: load(io.open(path):read('a'), '@' .. path)",
                   name, path, (int)(KLUA_COST_FILE_MAX >> 10));
    /* made before the file is opened: running out of memory leaves no descriptor open */
    /* (popped before returning: under LuaJIT the charge runs in the wrapper whose stack is the
     * call's own, where a value left above the arguments would become loadfile's mode) */
    char *text = lua_newuserdata(L, (size_t)st.st_size + 1);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* swapped for a pipe since: not waited on */
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        lua_pop(L, 1);
        return 0;
    }
    size_t n = fread(text, 1, (size_t)st.st_size + 1, f);
    fclose(f);
    if (n > (size_t)st.st_size) luaL_error(L, "console: %s of %s refused: it grows while read", name, path);
    double steps = text_steps(text, n); /* allocates nothing: text stays put until the pop */
    lua_pop(L, 1);
    return steps;
}

/* Steps and bytes the call at hand (arguments from 1) may take at worst. */
void klua_cost(lua_State *L, klua_costly kind, double left, double *steps, double *bytes) {
    *steps = 0;
    *bytes = 0;
    static const char *const by_length[] = {[KLUA_COST_CONCAT] = "table.concat", [KLUA_COST_SORT] = "table.sort",
                                            [KLUA_COST_INSERT] = "table.insert", [KLUA_COST_REMOVE] = "table.remove"};
    if ((size_t)kind < sizeof by_length / sizeof *by_length && by_length[kind] &&
        (kind != KLUA_COST_CONCAT || lua_isnoneornil(L, 4)))
        refuse_len_metamethod(L, by_length[kind]);
    size_t n = 0, m = 0;
    const char *s = lua_type(L, 1) == LUA_TSTRING ? lua_tolstring(L, 1, &n) : NULL;
    const char *p = lua_type(L, 2) == LUA_TSTRING ? lua_tolstring(L, 2, &m) : NULL;
    switch (kind) {
    case KLUA_COST_REP: {
        double count = int_arg(L, 2, 0);
        size_t sep = lua_type(L, 3) == LUA_TSTRING ? lua_rawlen(L, 3) : 0;
        if (s && count > 0) *bytes = count * ((double)n + (double)sep);
        break;
    }
    case KLUA_COST_FIND:
        if (s && p) *steps = pattern_cost(p, m, s, n, true, lua_toboolean(L, 4) || !has_specials(p, m));
        break;
    case KLUA_COST_MATCH:
        if (s && p) *steps = pattern_cost(p, m, s, n, true, false);
        break;
    case KLUA_COST_GMATCH:
        if (s && p) *steps = pattern_cost(p, m, s, n, false, false);
        break;
    case KLUA_COST_GSUB:
        if (s && p) {
            *steps = pattern_cost(p, m, s, n, true, false);
            if (lua_type(L, 3) == LUA_TSTRING) {
                size_t r;
                const char *repl = lua_tolstring(L, 3, &r);
                double refs = 0;
                for (size_t i = 0; i < r; i++)
                    if (repl[i] == '%') refs++;
                *bytes = (double)n + ((double)n + 1) * ((double)r + refs * (double)n);
            }
        }
        break;
    case KLUA_COST_CONCAT:
        *bytes = concat_bytes(L, left);
        if (lua_type(L, 1) == LUA_TTABLE) {
            double i = int_arg(L, 3, 1), j = int_arg(L, 4, raw_len(L, 1));
            if (j >= i) *steps = j - i + 1; /* elements visited */
        }
        break;
    case KLUA_COST_SORT: {
        double len = raw_len(L, 1);
        double bits = 1; /* about log2(len + 1), without libm for a static archive's users */
        for (double rest = len + 1; rest >= 2; rest /= 2) bits++;
        *steps = len * bits * 4;
        break;
    }
    case KLUA_COST_MOVE: {
        double f = int_arg(L, 2, 0), e = int_arg(L, 3, 0);
        if (e >= f) *steps = e - f + 1;
        break;
    }
    case KLUA_COST_INSERT:
#if KLUA_LUAJIT
        /* Lua 5.4 refuses a position past the ends; LuaJIT cuts it to 32 bits and moves every
         * slot between it and the end, one by one: table.insert({}, 2^31, v) ran for 14 s */
        if (lua_gettop(L) == 3 && lua_type(L, 1) == LUA_TTABLE && lua_isnumber(L, 2)) {
            double pos = lua_tonumber(L, 2);
            if (!(pos >= 1 && pos <= raw_len(L, 1) + 1)) luaL_argerror(L, 2, "position out of bounds");
        }
#endif
        *steps = raw_len(L, 1) + 1;
        break;
    case KLUA_COST_REMOVE:
        *steps = raw_len(L, 1) + 1;
        break;
    case KLUA_COST_LOAD: /* a text: read, and parsed with its jump lists (the console's only) */
        if (s) *steps = text_steps(s, n);
        break;
    case KLUA_COST_LOADFILE:
    case KLUA_COST_DOFILE:
        *steps = file_steps(L, kind == KLUA_COST_LOADFILE ? "loadfile" : "dofile");
        break;
    default:
        break;
    }
    /* infinite arguments give an infinity less an infinity (table.move(t, math.huge,
     * math.huge, 1)) or an infinity times 0 (string.rep("", math.huge)): a NaN passes every
     * comparison with a budget and converts to no integer, so it is charged as unbounded */
    if (isnan(*steps)) *steps = INFINITY;
    if (isnan(*bytes)) *bytes = INFINITY;
}
