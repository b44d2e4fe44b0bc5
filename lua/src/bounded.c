/* bounded.c: which Lua functions run a bounded number of VM instructions per call (no loop,
 * no call of their own), read from their Lua 5.4 bytecode, so the budget can charge them whole. */
#include <string.h>

#include "klua.h"

/* Lua 5.4's opcodes that loop, call or close (lopcodes.h of 5.4.0 to 5.4.7, whose order the
 * dump header's version byte vouches for). Everything else runs each instruction at most once
 * when no jump goes back; a metamethod it triggers is a call, which the budget's call hook sees. */
enum {
    OP_CLOSE = 54,
    OP_TBC = 55,
    OP_JMP = 56,
    OP_CALL = 68,
    OP_TAILCALL = 69,
    OP_FORLOOP = 73,
    OP_FORPREP = 74,
    OP_TFORPREP = 75,
    OP_TFORCALL = 76,
    OP_TFORLOOP = 77,
    OP_LAST = 82 /* OP_EXTRAARG */
};

#define DUMP_CAP 16384 /* bytes of dump read; a longer function is not worth charging whole */
#define SJ_OFFSET ((1 << 24) - 1) /* the excess of a jump's 25-bit signed offset */

typedef struct dump_buf {
    unsigned char *bytes;
    size_t len;
    bool overflow;
} dump_buf;

static int collect(lua_State *L, const void *p, size_t n, void *ud) {
    (void)L;
    dump_buf *b = ud;
    if (b->overflow || n > DUMP_CAP - b->len) {
        b->overflow = true;
        return 1; /* stops the dump */
    }
    memcpy(b->bytes + b->len, p, n);
    b->len += n;
    return 0;
}

/* A size as lua_dump writes it: 7 bits a byte, most significant first, the last byte marked. */
static bool read_size(const dump_buf *b, size_t *at, size_t *out) {
    size_t x = 0;
    for (int i = 0; i < 10 && *at < b->len; i++) {
        unsigned char c = b->bytes[(*at)++];
        x = (x << 7) | (c & 0x7f);
        if (c & 0x80) {
            *out = x;
            return true;
        }
    }
    return false;
}

/* The instructions of the dumped main function, or -1 when it may loop or call. */
static int64_t cost_of_dump(const dump_buf *b) {
    static const unsigned char signature[] = "\x1bLua\x54\x00\x19\x93\r\n\x1a\n";
    size_t at = sizeof signature - 1;
    if (b->len < at + 3 || memcmp(b->bytes, signature, at) != 0) return -1;
    size_t isize = b->bytes[at], nsize_int = b->bytes[at + 1], nsize_num = b->bytes[at + 2];
    if (isize != 4) return -1;
    at += 3 + nsize_int + nsize_num + 1; /* check integer, check number, upvalue count */
    size_t source, n;
    if (!read_size(b, &at, &source)) return -1;
    if (source > b->len) return -1;
    if (source > 0) at += source - 1;           /* the source name (absent when stripped) */
    size_t ignored;
    if (!read_size(b, &at, &ignored) || !read_size(b, &at, &ignored)) return -1; /* lines */
    at += 3;                                     /* parameters, vararg flag, stack size */
    if (at >= b->len || !read_size(b, &at, &n) || n == 0 || n > (b->len - at) / 4) return -1;
    for (size_t i = 0; i < n; i++, at += 4) {
        uint32_t ins;
        memcpy(&ins, b->bytes + at, 4);
        unsigned op = ins & 0x7f;
        switch (op) {
        case OP_CLOSE: case OP_TBC: case OP_CALL: case OP_TAILCALL: case OP_FORLOOP: case OP_FORPREP:
        case OP_TFORPREP: case OP_TFORCALL: case OP_TFORLOOP:
            return -1;
        case OP_JMP:
            if ((int32_t)(ins >> 7) - SJ_OFFSET < 0) return -1; /* a jump back: a loop */
            break;
        default:
            if (op > OP_LAST) return -1;
        }
    }
    return (int64_t)n;
}

int64_t klua_bounded_cost(lua_State *L, int idx) {
    if (lua_type(L, idx) != LUA_TFUNCTION || lua_iscfunction(L, idx)) return -1;
    void *ud;
    lua_Alloc alloc = lua_getallocf(L, &ud);
    dump_buf b = {alloc(ud, NULL, 0, DUMP_CAP), 0, false};
    if (!b.bytes) return -1;
    lua_pushvalue(L, idx);
    int status = lua_dump(L, collect, &b, 1);
    lua_pop(L, 1);
    int64_t cost = status == 0 && !b.overflow ? cost_of_dump(&b) : -1;
    alloc(ud, b.bytes, DUMP_CAP, 0);
    return cost;
}
