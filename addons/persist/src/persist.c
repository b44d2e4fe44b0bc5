/* persist.c: the addon's entry points: kiln_save / kiln_load and their file forms pick the
 * format, run the plan or the parser, and own every byte they allocate for the call. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h" /* kl_fail_in_hook */
#include "defer.h"
#include "persist_internal.h"
#include "scene_internal.h"

static const kiln_save_desc default_save;
static const kiln_load_desc default_load;

kiln_result pz_check_readable(kiln_world *world, const char *call) {
    /* A worker system may write any column meanwhile (one it declares), and the caller declares
     * none: a read of every column would race with it, and a file or hash would be torn. */
    if (atomic_load_explicit(&world->in_stage, memory_order_relaxed))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: called while a schedule runs systems that "
                       "are not exclusive (they may write any column meanwhile); call it from an "
                       "exclusive system or between runs", call);
    if (world->in_hook && world->in_check_of) return kl_fail_in_hook(world, call); /* a load's check hook */
    if (world->in_hook) /* access.h's kl_in_hook */
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: called from a component's destroy or move "
                       "hook while the world changes; call it once the change is done", call);
    return KILN_OK;
}

kiln_result pz_check_idle(kiln_world *world, const char *call) {
    kiln_result r = pz_check_readable(world, call);
    if (r != KILN_OK) return r;
    if (kiln_is_deferred(world))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: the world is deferred or iterating", call);
    return KILN_OK;
}

void pz_hold(kiln_world *world) {
    atomic_fetch_add_explicit(&world->iterating, 1, memory_order_relaxed);
    kl_defer_open(world);
}

kiln_result pz_release(kiln_world *world, const char *call, kiln_result r) {
    char msg[KL_ERROR_SIZE];
    if (r != KILN_OK) snprintf(msg, sizeof msg, "%s", kiln_world_error(world));
    atomic_fetch_sub_explicit(&world->iterating, 1, memory_order_relaxed);
    kiln_result landed = kl_defer_end(world, call);
    if (r == KILN_OK) return landed;
    if (landed != KILN_OK) kl_fail(world, r, "%s", msg); /* the call's own failure is the one told */
    return r;
}

kiln_result pz_resource_gone(kiln_world *world, const char *name) {
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                   "kiln_save: resource '%s' was removed while the save ran (by one of its callbacks)", name);
}

kiln_result kiln_save(kiln_world *world, const kiln_save_desc *desc, kiln_write_fn write, void *ud) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (!desc) desc = &default_save;
    if (!write) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save: write is NULL");
    kiln_result r = pz_check_idle(world, "kiln_save");
    if (r != KILN_OK) return r;
    if (desc->format != KILN_PERSIST_BINARY && desc->format != KILN_PERSIST_JSON)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save: unknown format %d", (int)desc->format);
    pz_plan plan;
    r = pz_plan_build(world, desc, &plan, "kiln_save");
    if (r != KILN_OK) return r;
    pz_out *out = kl_alloc(&world->alloc, sizeof *out);
    if (!out) {
        pz_plan_free(&plan);
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_save: out of memory");
    }
    out->write = write;
    out->ud = ud;
    out->failed = false;
    out->used = 0;
    out->offset = 0;
    pz_hold(world);
    r = desc->format == KILN_PERSIST_JSON ? pz_save_json(world, desc, &plan, out)
                                          : pz_save_binary(world, desc, &plan, out);
    if (r == KILN_OK && !pz_flush(out))
        r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save: the writer refused the data");
    r = pz_release(world, "kiln_save", r);
    kl_free(&world->alloc, out, sizeof *out);
    pz_plan_free(&plan);
    return r;
}

/* Renames a message's "kiln_save: " / "kiln_load: " prefix to the _file function's name. */
static kiln_result renamed(kiln_world *world, kiln_result r, const char *from, const char *to) {
    const char *msg = kiln_world_error(world);
    size_t n = strlen(from);
    if (r != KILN_OK && strncmp(msg, from, n) == 0 && msg[n] == ':') {
        char copy[KL_ERROR_SIZE];
        snprintf(copy, sizeof copy, "%s", msg + n);
        kl_fail(world, r, "%s%s", to, copy);
    }
    return r;
}

static bool file_write(void *ud, const void *data, size_t size) {
    return fwrite(data, 1, size, (FILE *)ud) == size;
}

/* Opens the folder path names its file in (for the calls below, made relative to it: a link
 * on the way swapped meanwhile does not move the save elsewhere) and points *name at the
 * file's name. Returns the folder's descriptor, or -1 with the world's message set. */
static int open_folder(kiln_world *world, const char *path, const char **name) {
    const char *slash = strrchr(path, '/');
    *name = slash ? slash + 1 : path;
    if (**name == '\0') {
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: %.200s names a folder, not a file", path);
        return -1;
    }
    char folder[4096];
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n == 0) snprintf(folder, sizeof folder, "%s", slash ? "/" : ".");
    else snprintf(folder, sizeof folder, "%.*s", (int)n, path);
    int dir = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: cannot open the folder of %.200s: %s", path,
                strerror(errno));
    return dir;
}

kiln_result kiln_save_file(kiln_world *world, const char *path, const kiln_save_desc *desc) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (!path) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: path is NULL");
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: path is too long");
    const char *name;
    int dir = open_folder(world, path, &name);
    if (dir < 0) return KILN_ERR_INVALID_ARGUMENT;
    const char *tmp_name = tmp + (name - path);
    /* A device, a pipe or a socket at path (or a link to one) is never replaced by the save: a
     * game run as root saving to /dev/null would have put a file in its place, for every
     * program on the machine. (A folder there fails at the rename, naming it.) */
    struct stat older;
    bool exists = fstatat(dir, name, &older, 0) == 0;
    if (exists && !S_ISREG(older.st_mode) && !S_ISDIR(older.st_mode)) {
        close(dir);
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: %.200s is not a regular file (a device, a "
                       "pipe or a socket is never replaced)", path);
    }
    /* The temporary file is made new: whatever had its name (a stale one, or a link or a pipe
     * someone put there) is unlinked first, and O_EXCL refuses to follow a link made since,
     * so the save never writes through a link into another file, nor waits on a pipe. */
    if (unlinkat(dir, tmp_name, 0) != 0 && errno != ENOENT) {
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: cannot write %.200s: %s", tmp, strerror(errno));
        close(dir);
        return KILN_ERR_INVALID_ARGUMENT;
    }
    /* A file path names keeps its permission bits: made anew under the umask, a save the
     * player had made private (0600) would come back readable by everyone on the machine.
     * Made 0600 first, so it is never more open meanwhile (nor after, where a file system
     * keeps no modes and fchmod fails). The read, write and run bits only: a set-user-ID,
     * set-group-ID or sticky bit on the old file (its owner's to set) is never given to a
     * file this process makes, which may run as another user (a game run as root). */
    bool keep_mode = exists && S_ISREG(older.st_mode);
    int fd = openat(dir, tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY | O_CLOEXEC, keep_mode ? 0600 : 0666);
    if (fd >= 0 && keep_mode) (void)fchmod(fd, older.st_mode & 0777);
    struct stat mine, now;
    FILE *f = fd >= 0 && fstat(fd, &mine) == 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlinkat(dir, tmp_name, 0);
        }
        close(dir);
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: cannot write %.200s: %s", tmp,
                       strerror(e));
    }
    kiln_result r = renamed(world, kiln_save(world, desc, file_write, f), "kiln_save", "kiln_save_file");
    /* The bytes reach the disk before the name does: renamed first, a crash or power loss could
     * leave path naming a file the disk holds part of (or none of), and the older save gone. */
    if (r == KILN_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: writing %.200s failed: %s", tmp,
                    strerror(errno));
    if (fclose(f) != 0 && r == KILN_OK)
        r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: writing %.200s failed: %s", tmp,
                    strerror(errno));
    /* Another save to the same path unlinks tmp and makes its own there: renamed now, path would
     * name that save's file while it is being written. The name is checked to still be this
     * file's, so the one the other save took fails instead, and tmp is left to its owner. */
    bool ours = fstatat(dir, tmp_name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == mine.st_dev &&
                now.st_ino == mine.st_ino;
    if (r == KILN_OK && !ours)
        r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: %.200s was replaced while the save "
                    "ran (another save to the same path?); %.200s is left as it was", tmp, path);
    if (r == KILN_OK && renameat(dir, tmp_name, dir, name) != 0)
        r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: cannot rename to %.200s: %s", path,
                    strerror(errno));
    if (r != KILN_OK && ours) unlinkat(dir, tmp_name, 0);
    /* The rename is the folder's change: until the folder reaches the disk too, a power loss may
     * bring the older file back (or, for a first save, no file). A file system that cannot sync
     * a folder says EINVAL; it keeps its folders by other means. */
    if (r == KILN_OK && fsync(dir) != 0 && errno != EINVAL)
        r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save_file: %.200s is written, but syncing its folder "
                    "failed: %s (a power loss may bring the older file back)", path, strerror(errno));
    close(dir);
    return r;
}

kiln_result kiln_load(kiln_world *world, const void *data, size_t size, const kiln_load_desc *desc) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (!desc) desc = &default_load;
    if (!data && size) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: data is NULL");
    if (desc->max_bytes && (uint64_t)size > desc->max_bytes)
        return kl_fail(world, KILN_ERR_LIMIT, "kiln_load: the save is larger than %llu bytes (%llu bytes)",
                       (unsigned long long)desc->max_bytes, (unsigned long long)size);
    kiln_result idle = pz_check_idle(world, "kiln_load");
    if (idle != KILN_OK) return idle;
    const uint8_t *p = data;
    size_t lead = 0;
    while (lead < size && (p[lead] == ' ' || p[lead] == '\t' || p[lead] == '\n' || p[lead] == '\r')) lead++;
    pz_doc doc;
    memset(&doc, 0, sizeof doc);
    doc.arena.alloc = &world->alloc;
    doc.desc = desc;
    kiln_result r;
    /* a save cut inside its magic is a binary save too: its reader says where it is cut */
    size_t magic = size < PZ_MAGIC_SIZE ? size : PZ_MAGIC_SIZE;
    if (size > 0 && memcmp(p, PZ_MAGIC, magic) == 0)
        r = pz_parse_binary(world, p, size, &doc);
    else if (lead < size && p[lead] == '{' && desc->max_json_bytes && (uint64_t)size > desc->max_json_bytes)
        r = kl_fail(world, KILN_ERR_LIMIT, "kiln_load: the JSON save is larger than %llu bytes (%llu bytes)",
                    (unsigned long long)desc->max_json_bytes, (unsigned long long)size);
    else if (lead < size && p[lead] == '{')
        r = pz_parse_json(world, p, size, &doc);
    else
        r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                    "kiln_load: at byte 0: neither a kiln save nor a JSON document");
    if (r == KILN_OK && !pz_keep_going(world, &doc, (uint64_t)size, (uint64_t)size, "bytes"))
        r = KILN_ERR_LIMIT;
    if (r == KILN_OK) r = pz_commit(world, &doc, desc);
    pz_arena_free(&doc.arena);
    return r;
}

bool pz_keep_going(kiln_world *world, const pz_doc *doc, uint64_t done, uint64_t total, const char *what) {
    if (!doc->desc || !doc->desc->keep_going || doc->desc->keep_going(doc->desc->ud)) return true;
    kl_fail(world, KILN_ERR_LIMIT, "kiln_load: stopped by the caller after %llu of %llu %s",
            (unsigned long long)done, (unsigned long long)total, what);
    return false;
}

kiln_result kiln_load_file(kiln_world *world, const char *path, const kiln_load_desc *desc) {
    KILN_ASSERT(world != NULL, "world is NULL");
    pz_bytes bytes = {.alloc = &world->alloc};
    kiln_result r = pz_read_file(world, path, "kiln_load_file", desc, &bytes); /* (a regular file only) */
    if (r == KILN_OK) r = renamed(world, kiln_load(world, bytes.data, bytes.size, desc), "kiln_load", "kiln_load_file");
    pz_bytes_free(&bytes);
    return r;
}
