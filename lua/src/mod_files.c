/* mod_files.c: what a mod is on disk: a folder with manifest.lua and an entry file, or one
 * name.lua file; the stamps poll() compares. Invariant: a manifest is data, read in a state
 * of its own with no library, a few instructions and a little memory. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mods.h"

#define MANIFEST "manifest.lua"
#define MANIFEST_MEMORY (256 * 1024)
#define MANIFEST_INSTRUCTIONS 100000

static bool valid_name(const char *s, size_t n) {
    if (n == 0 || n > KLUA_MOD_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

bool klua_mod_inside(const char *dir, const char *path, char *resolved) {
    char root[PATH_MAX];
    if (!realpath(dir, root) || !realpath(path, resolved)) return false;
    size_t n = strlen(root);
    return strncmp(root, resolved, n) == 0 && resolved[n] == '/';
}

/* ---- source files ------------------------------------------------------------------------ */

typedef struct source_reader {
    FILE *f;
    char lead[2]; /* what was read ahead to skip a byte-order mark or a # line */
    int leads;
    bool late;    /* the entry's time limit passed while the file was parsed */
    char why[KILN_MAX_NAME + 80];
    char buf[512]; /* a piece: the clock is read between them (the parser runs no hook) */
} source_reader;

static const char *read_source(lua_State *L, void *ud, size_t *size) {
    source_reader *r = ud;
    if (r->leads) {
        *size = (size_t)r->leads;
        r->leads = 0;
        return r->lead;
    }
    *size = 0;
    if ((r->late = klua_budget_late(L, r->why, sizeof r->why))) return NULL;
    *size = fread(r->buf, 1, sizeof r->buf, r->f);
    return *size ? r->buf : NULL;
}

int klua_mod_loadfile(lua_State *L, const char *path) {
    /* opened without blocking (a pipe no one writes to would wait for good), then only a
     * regular file of a bounded size is read: a device may never end */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        lua_pushfstring(L, "cannot open %s: %s", path, strerror(errno));
        return LUA_ERRFILE;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        lua_pushfstring(L, "%s is not a regular file", path);
        return LUA_ERRFILE;
    }
    if (st.st_size > KLUA_MOD_SOURCE_MAX) {
        close(fd);
        lua_pushfstring(L, "%s holds %I bytes, past the %d a mod's source file may hold", path,
                        (lua_Integer)st.st_size, KLUA_MOD_SOURCE_MAX);
        return LUA_ERRFILE;
    }
    /* charged by its size before it is read, when mod code asks (require): a file that does
     * not parse is read again at each call, and lexing a long comment allocates nothing */
    double steps = (double)st.st_size / KLUA_COST_BYTES_PER_STEP, left = klua_budget_left(L);
    if (left >= 0 && steps > left) {
        close(fd);
        lua_pushfstring(L, "%s: reading it would take more than what is left of the budget", path);
        return LUA_ERRFILE;
    }
    if (left >= 0 && steps > 0) klua_budget_charge(L, steps, "require"); /* within what is left */
    int flags = fcntl(fd, F_GETFL);
    source_reader r = {.f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL};
    if (!r.f) {
        int e = errno;
        close(fd);
        lua_pushfstring(L, "cannot open %s: %s", path, strerror(e));
        return LUA_ERRFILE;
    }
    /* as luaL_loadfile does: a UTF-8 byte-order mark is skipped, and a first line starting
     * with # (a script's #! line) is read as an empty line */
    int c = getc(r.f);
    if (c == 0xEF && getc(r.f) == 0xBB && getc(r.f) == 0xBF) c = getc(r.f);
    if (c == '#') {
        while ((c = getc(r.f)) != EOF && c != '\n') {}
        r.lead[r.leads++] = '\n';
        c = getc(r.f);
    }
    if (c != EOF) r.lead[r.leads++] = (char)c;
    lua_pushfstring(L, "@%s", path);
    int status = lua_load(L, read_source, &r, lua_tostring(L, -1), "t");
    lua_remove(L, -2); /* the chunk's name */
    if (r.late) { /* the error of the text cut short */
        lua_pop(L, 1);
        lua_pushstring(L, r.why);
        status = LUA_ERRRUN;
    }
    bool bad = ferror(r.f) != 0;
    fclose(r.f);
    if (status == LUA_OK && bad) {
        lua_pop(L, 1);
        lua_pushfstring(L, "cannot read %s", path);
        return LUA_ERRFILE;
    }
    return status;
}

/* ---- the manifest ------------------------------------------------------------------------ */

typedef struct small_mem {
    size_t used;
} small_mem;

static void *small_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    small_mem *m = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        m->used -= old;
        return NULL;
    }
    if (nsize > old && m->used - old + nsize > MANIFEST_MEMORY) return NULL;
    void *p = realloc(ptr, nsize);
    if (p) m->used = m->used - old + nsize;
    return p;
}

static void manifest_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, manifest_hook, LUA_MASKCOUNT, 1);
    klua_raise(L, "the manifest ran past %d instructions", MANIFEST_INSTRUCTIONS);
}

/* Reads the manifest's table (at the top) into mod; runs protected in the manifest's state. */
static int read_manifest(lua_State *L) {
    klua_mod *mod = lua_touserdata(L, 1);
    const char *path = lua_tostring(L, 2);
    lua_settop(L, 2);
    if (klua_mod_loadfile(L, path) != LUA_OK) return lua_error(L);
    lua_newtable(L); /* an empty environment: the manifest is data */
#if KLUA_LUAJIT
    lua_setfenv(L, -2);
#else
    lua_setupvalue(L, -2, 1);
#endif
    lua_sethook(L, manifest_hook, LUA_MASKCOUNT, MANIFEST_INSTRUCTIONS);
    lua_call(L, 0, 1);
    lua_sethook(L, NULL, 0, 0);
    if (!lua_istable(L, 3)) return luaL_error(L, "the manifest must return a table");
    static const char *const keys[] = {"name", "version", "depends", "entry", "description", "author", NULL};
    lua_pushnil(L);
    while (lua_next(L, 3)) {
        bool known = false;
        for (int i = 0; keys[i] && lua_type(L, -2) == LUA_TSTRING; i++)
            known = known || strcmp(lua_tostring(L, -2), keys[i]) == 0;
        if (!known) return luaL_error(L, "the manifest has an unknown key (%s)", lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : luaL_typename(L, -2));
        lua_pop(L, 1);
    }
    size_t n;
    if (lua_getfield(L, 3, "name") != LUA_TSTRING) return luaL_error(L, "the manifest needs name = \"...\"");
    const char *name = lua_tolstring(L, -1, &n);
    if (!valid_name(name, n))
        return luaL_error(L, "the manifest's name must be 1 to %d letters, digits, _ or -", KLUA_MOD_NAME_MAX);
    memcpy(mod->name, name, n + 1);
    if (lua_getfield(L, 3, "version") != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "the manifest's version must be a string");
        const char *v = lua_tolstring(L, -1, &n);
        if (n == 0 || n >= sizeof mod->version) return luaL_error(L, "the manifest's version must be 1 to %d bytes", (int)sizeof mod->version - 1);
        memcpy(mod->version, v, n + 1);
    }
    if (lua_getfield(L, 3, "depends") != LUA_TNIL) {
        if (!lua_istable(L, -1)) return luaL_error(L, "the manifest's depends must be a list of mod names");
        lua_Integer len = (lua_Integer)lua_rawlen(L, -1);
        if (len > KLUA_MOD_MAX_DEPS) return luaL_error(L, "the manifest names more than %d depends", KLUA_MOD_MAX_DEPS);
        for (lua_Integer i = 1; i <= len; i++) {
            if (lua_rawgeti(L, -1, i) != LUA_TSTRING) return luaL_error(L, "depends[%I] must be a mod name", i);
            const char *d = lua_tolstring(L, -1, &n);
            if (!valid_name(d, n)) return luaL_error(L, "depends[%I] is not a valid mod name", i);
            memcpy(mod->depends[mod->depend_count++], d, n + 1);
            lua_pop(L, 1);
        }
    }
    const char *entry = "init.lua";
    if (lua_getfield(L, 3, "entry") != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "the manifest's entry must be a file name");
        entry = lua_tostring(L, -1);
    }
    char path_buf[KLUA_MOD_PATH];
    snprintf(path_buf, sizeof path_buf, "%.900s/%.100s", mod->dir, entry);
    char resolved[PATH_MAX];
    if (!klua_mod_inside(mod->dir, path_buf, resolved) || strlen(resolved) >= sizeof mod->entry)
        return luaL_error(L, "the entry file '%s' is not a file inside the mod's folder", entry);
    strcpy(mod->entry, resolved);
    return 0;
}

static bool describe_folder(klua_mod *mod, const char *dir) {
    char manifest[KLUA_MOD_PATH];
    snprintf(manifest, sizeof manifest, "%.900s/%s", dir, MANIFEST);
    struct stat st;
    if (stat(manifest, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(mod->error, sizeof mod->error, "%.200s has no %s", dir, MANIFEST);
        return false;
    }
    small_mem mem = {0};
    lua_State *M = lua_newstate(small_alloc, &mem);
    if (!M) {
        snprintf(mod->error, sizeof mod->error, "out of memory reading %.200s", manifest);
        return false;
    }
    lua_pushlightuserdata(M, mod);
    lua_pushstring(M, manifest);
    bool ok = klua_pcall_c(M, read_manifest, 2, 0, 0) == LUA_OK;
    if (!ok) snprintf(mod->error, sizeof mod->error, "bad manifest: %s", lua_tostring(M, -1) ? lua_tostring(M, -1) : "error");
    lua_close(M);
    if (ok) klua_mod_watch(mod, manifest);
    return ok;
}

bool klua_mod_describe(klua_mod *mod, const char *path) {
    size_t len = strlen(path);
    if (len == 0 || len >= KLUA_MOD_PATH - 64) {
        snprintf(mod->error, sizeof mod->error, "the path is empty or too long");
        return false;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(mod->error, sizeof mod->error, "cannot open %.200s: %s", path, strerror(errno));
        return false;
    }
    strcpy(mod->path, path);
    strcpy(mod->version, "0");
    mod->depend_count = 0;
    if (S_ISDIR(st.st_mode)) {
        char resolved[PATH_MAX];
        if (!realpath(path, resolved) || strlen(resolved) >= sizeof mod->dir - 64) {
            snprintf(mod->error, sizeof mod->error, "cannot resolve %.200s", path);
            return false;
        }
        strcpy(mod->dir, resolved);
        return describe_folder(mod, resolved);
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (!S_ISREG(st.st_mode) || n < 5 || strcmp(base + n - 4, ".lua") != 0 || !valid_name(base, n - 4)) {
        snprintf(mod->error, sizeof mod->error,
                 "%.200s is neither a mod folder nor a file NAME.lua (NAME: letters, digits, _ or -)", path);
        return false;
    }
    memcpy(mod->name, base, n - 4);
    mod->name[n - 4] = '\0';
    mod->dir[0] = '\0';
    char resolved[PATH_MAX];
    if (!realpath(path, resolved) || strlen(resolved) >= sizeof mod->entry) {
        snprintf(mod->error, sizeof mod->error, "cannot resolve %.200s", path);
        return false;
    }
    strcpy(mod->entry, resolved);
    return true;
}

/* ---- stamps ------------------------------------------------------------------------------ */

static bool stamp(const char *path, klua_mod_file *f) {
    struct stat st;
    if (stat(path, &st) != 0) return false;
    f->mtime = st.st_mtim.tv_sec;
    f->mtime_ns = st.st_mtim.tv_nsec;
    f->size = (long long)st.st_size;
    return true;
}

void klua_mod_watch(klua_mod *mod, const char *path) {
    if (strlen(path) >= KLUA_MOD_PATH) return;
    for (int i = 0; i < mod->file_count; i++)
        if (strcmp(mod->files[i].path, path) == 0) return;
    if (mod->file_count == KLUA_MOD_MAX_FILES) return;
    klua_mod_file *f = &mod->files[mod->file_count++];
    strcpy(f->path, path);
    /* a file missing now (an editor's save renames over it) stays watched, stamped missing,
     * so poll sees it come back */
    if (!stamp(path, f)) {
        f->mtime = 0;
        f->mtime_ns = 0;
        f->size = -1;
    }
}

void klua_mod_restamp(klua_mod *mod) {
    int files = mod->file_count;
    mod->file_count = 0;
    for (int i = 0; i < files; i++) {
        char path[KLUA_MOD_PATH];
        strcpy(path, mod->files[i].path);
        klua_mod_watch(mod, path);
    }
}

bool klua_mod_changed(const klua_mod *mod) {
    for (int i = 0; i < mod->file_count; i++) {
        klua_mod_file now;
        const klua_mod_file *was = &mod->files[i];
        if (!stamp(was->path, &now)) {
            if (was->size != -1) return true;
            continue;
        }
        if (now.mtime != was->mtime || now.mtime_ns != was->mtime_ns || now.size != was->size) return true;
    }
    return false;
}

/* A walk over the loaded mods by their depends, each visited once (diamonds cost nothing
 * more), from each of mod's dependencies in turn. */
const char *klua_mod_depends_back(klua_mods *mods, const klua_mod *mod) {
    for (int d = 0; d < mod->depend_count; d++) {
        bool seen[KLUA_MODS_MAX] = {false};
        int queue[KLUA_MODS_MAX], head = 0, tail = 0;
        const char *first = mod->depends[d];
        if (strcmp(first, mod->name) == 0) return first;
        for (int i = 0; i < mods->count && i < KLUA_MODS_MAX; i++)
            if (strcmp(mods->list[i]->name, first) == 0) {
                seen[i] = true;
                queue[tail++] = i;
            }
        while (head < tail) {
            const klua_mod *m = mods->list[queue[head++]];
            for (int k = 0; k < m->depend_count; k++) {
                if (strcmp(m->depends[k], mod->name) == 0) return first;
                for (int i = 0; i < mods->count && i < KLUA_MODS_MAX; i++)
                    if (!seen[i] && strcmp(mods->list[i]->name, m->depends[k]) == 0) {
                        seen[i] = true;
                        queue[tail++] = i;
                    }
            }
        }
    }
    return NULL;
}
