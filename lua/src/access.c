/* access.c: the declared access of the Lua system running now. A system may read what it
 * lists in reads or writes and write what it lists in writes; exclusive systems and code
 * outside any system may do anything, but a mod's code never writes what is read-only to mods. */
#include "klua.h"

static bool listed(const kiln_component *list, int n, kiln_component c) {
    for (int i = 0; i < n; i++)
        if (list[i] == c) return true;
    return false;
}

const char *klua_system_name(const klua_world *kw) { return kw->current ? kw->current->name : NULL; }

bool klua_system_writes(const klua_world *kw, kiln_component c) {
    const klua_system *s = kw->current;
    if (kw->host && klua_mod_readonly(kw, c)) return false;
    return !s || s->exclusive || listed(s->writes, s->write_count, c);
}

#if defined(__GNUC__)
#define COLD __attribute__((noinline, cold)) /* out of the checks' way: their frame stays small */
#else
#define COLD
#endif

/* The running system s did not declare c: the read-only message first for a mod's write. */
static COLD KLUA_NORETURN void refuse_undeclared(lua_State *L, klua_world *kw, const klua_system *s, kiln_component c,
                                            bool write, const char *fname) {
    if (write && kw->host) klua_mod_check_write(L, kw, c, fname);
    kiln_component_info info;
    kiln_component_info_get(kw->world, c, &info);
    if (write) klua_fail(L, fname, "system '%s' writes %s without declaring it in writes", s->name, info.name);
    klua_fail(L, fname, "system '%s' reads %s without declaring it in reads or writes", s->name, info.name);
}

/* The mods' check comes last, where the compiler makes it a jump, and the refusal is out of
 * line: world:set in a host system runs fewer instructions here than before the check. */
void klua_check_access(lua_State *L, klua_world *kw, kiln_component c, bool write, const char *fname) {
    const klua_system *s = kw->current;
    if (s && !s->exclusive &&
        !(write ? listed(s->writes, s->write_count, c)
                : listed(s->reads, s->read_count, c) || listed(s->writes, s->write_count, c)))
        refuse_undeclared(L, kw, s, c, write, fname);
    if (write && kw->host) klua_mod_check_write(L, kw, c, fname); /* whoever runs: any system, a top level */
}
