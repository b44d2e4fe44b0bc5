/* test_persist_save_file.c: Check suite for kiln_save_file's failures: each is told, naming the
 * file, and leaves the older save whole. fsync, fstat, open and fchmod are wrapped at link time
 * (-Wl,--wrap). */
#define _XOPEN_SOURCE 700 /* mknod, S_IFCHR */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* ---- the injected failure points ---------------------------------------------------------- */

int __real_fsync(int fd);
int __real_fstat(int fd, struct stat *st);
int __wrap_fsync(int fd);
int __wrap_fstat(int fd, struct stat *st);
int __real_open(const char *path, int flags, ...);
int __wrap_open(const char *path, int flags, ...);
int __real_fchmod(int fd, mode_t mode);
int __wrap_fchmod(int fd, mode_t mode);

static int fail_fsync_of_folder, fail_fsync_of_file; /* an errno to fail with, or 0 */
static int fail_fstat;
static int fail_open_of_folder; /* an errno for an open of a folder to fail with, or 0 */
static int fail_fchmod;         /* an errno for fchmod to fail with, or 0 */
static int fchmods;             /* fchmod calls so far */
static int folder_opens;        /* opens of a folder so far */
static char syncs[8]; /* 'f' a file, 'd' a folder, in order */
static size_t nsyncs;

int __wrap_fstat(int fd, struct stat *st) {
    if (fail_fstat) {
        errno = fail_fstat;
        return -1;
    }
    return __real_fstat(fd, st);
}

/* (as on a file system that keeps no modes: vfat, some FUSE mounts, which say EPERM) */
int __wrap_fchmod(int fd, mode_t mode) {
    fchmods++;
    if (fail_fchmod) {
        errno = fail_fchmod;
        return -1;
    }
    return __real_fchmod(fd, mode);
}

/* (a folder for reading, as kiln_save_file opens the one it saves in: root may open any, so
 * permissions cannot make it fail in CI) */
int __wrap_open(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (flags & O_DIRECTORY) {
        folder_opens++;
        if (fail_open_of_folder) {
            errno = fail_open_of_folder;
            return -1;
        }
    }
    return __real_open(path, flags, mode);
}

int __wrap_fsync(int fd) {
    struct stat st;
    ck_assert_int_eq(__real_fstat(fd, &st), 0);
    bool folder = S_ISDIR(st.st_mode);
    if (nsyncs < sizeof syncs - 1) syncs[nsyncs++] = folder ? 'd' : 'f';
    int e = folder ? fail_fsync_of_folder : fail_fsync_of_file;
    if (e) {
        errno = e;
        return -1;
    }
    return __real_fsync(fd);
}

/* ---- a folder holding an older save ------------------------------------------------------- */

typedef struct saved_dir {
    pf_world w;
    char dir[32], path[64], tmp[72];
    pf_bytes old; /* the older save's bytes, as path holds them */
} saved_dir;

static bool read_all(const char *path, pf_bytes *dest) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    memset(dest, 0, sizeof *dest);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) ck_assert(pf_bytes_write(dest, chunk, n));
    fclose(f);
    return true;
}

/* A world with a scene, and an older save of it (before one more entity) at dir/world.bin. */
static void saved_open(saved_dir *s) {
    memset(s, 0, sizeof *s);
    fail_fsync_of_folder = fail_fsync_of_file = fail_fstat = fail_open_of_folder = fail_fchmod = 0;
    nsyncs = 0;
    memset(syncs, 0, sizeof syncs);
    snprintf(s->dir, sizeof s->dir, "/tmp/kiln-savefile-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s->dir));
    snprintf(s->path, sizeof s->path, "%s/world.bin", s->dir);
    snprintf(s->tmp, sizeof s->tmp, "%s.tmp", s->path);
    pf_open(&s->w, false);
    pf_populate(&s->w);
    ck_assert_int_eq(kiln_save_file(s->w.world, s->path, NULL), KILN_OK);
    ck_assert(read_all(s->path, &s->old));
    pf_pos p = {1, 2, 3};
    ck_assert_int_eq(kiln_spawn_with(s->w.world, &s->w.pos, (const void *const[]){&p}, 1, NULL), KILN_OK);
    nsyncs = 0;
}

/* path still holds the older save, byte for byte, and no temporary file is left. */
static void assert_older_whole(const saved_dir *s) {
    pf_bytes now;
    ck_assert(read_all(s->path, &now));
    ck_assert_uint_eq(now.size, s->old.size);
    ck_assert(memcmp(now.data, s->old.data, now.size) == 0);
    pf_bytes_free(&now);
    ck_assert_int_eq(access(s->tmp, F_OK), -1);
}

/* path holds the save of s's world as it is now: it loads back to the same hash. */
static void assert_path_holds_the_world(const saved_dir *s) {
    pf_world back;
    pf_open(&back, false);
    ck_assert_int_eq(kiln_load_file(back.world, s->path, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_world_hash(back.world), kiln_world_hash(s->w.world));
    pf_close(&back);
}

static void assert_error(kiln_world *world, const char *want) {
    ck_assert_str_eq(kiln_world_error(world), want);
}

static void saved_close(saved_dir *s) {
    fail_fsync_of_folder = fail_fsync_of_file = fail_fstat = fail_open_of_folder = fail_fchmod = 0;
    unlink(s->path);
    unlink(s->tmp);
    ck_assert_int_eq(rmdir(s->dir), 0);
    pf_bytes_free(&s->old);
    pf_close(&s->w);
}

/* The save gave r, refused with the message format (the temporary file's name, then errno e's
 * text), and left the older save whole; closes s. */
static void assert_refused(saved_dir *s, kiln_result r, const char *format, int e) {
    ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
    char want[256];
    snprintf(want, sizeof want, format, s->tmp, strerror(e));
    assert_error(s->w.world, want);
    assert_older_whole(s);
    saved_close(s);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP_WITH(save_file, .timeout = 60);

/* The file reaches the disk, then the rename does (the folder's sync): the folder was never
 * synced, so a power loss after a "successful" save could bring the older file back. */
KILN_TEST(save_file, a_file_save_syncs_the_file_then_its_folder) {
    saved_dir s;
    saved_open(&s);
    ck_assert_int_eq(kiln_save_file(s.w.world, s.path, NULL), KILN_OK);
    ck_assert_str_eq(syncs, "fd");
    assert_path_holds_the_world(&s);
    saved_close(&s);
}

KILN_TEST(save_file, a_failed_sync_of_the_file_fails_the_save_and_leaves_the_older_file) {
    saved_dir s;
    saved_open(&s);
    fail_fsync_of_file = EIO;
    assert_refused(&s, kiln_save_file(s.w.world, s.path, NULL), "kiln_save_file: writing %s failed: %s", EIO);
}

/* The new file is in place but may not survive a power loss: the caller is told so. A file
 * system that cannot sync a folder (EINVAL) is no failure. */
KILN_TEST(save_file, a_failed_sync_of_the_folder_is_told_naming_the_file) {
    saved_dir s;
    saved_open(&s);
    fail_fsync_of_folder = EIO;
    ck_assert_int_eq(kiln_save_file(s.w.world, s.path, NULL), KILN_ERR_INVALID_ARGUMENT);
    char want[256];
    snprintf(want, sizeof want, "kiln_save_file: %s is written, but syncing its folder failed: %s (a power "
             "loss may bring the older file back)", s.path, strerror(EIO));
    assert_error(s.w.world, want);
    ck_assert_int_eq(access(s.tmp, F_OK), -1);
    fail_fsync_of_folder = EINVAL;
    ck_assert_int_eq(kiln_save_file(s.w.world, s.path, NULL), KILN_OK);
    saved_close(&s);
}

/* fstat of the new file failing was taken for another save having replaced it: the save said
 * so, wrongly, and left its temporary file behind. */
KILN_TEST(save_file, a_failed_fstat_fails_the_save_naming_the_file_and_leaves_no_temporary_file) {
    saved_dir s;
    saved_open(&s);
    fail_fstat = EIO;
    kiln_result r = kiln_save_file(s.w.world, s.path, NULL);
    fail_fstat = 0;
    assert_refused(&s, r, "kiln_save_file: cannot write %s: %s", EIO);
}

/* The folder the file goes in cannot be opened for reading (EACCES, as a folder with no read
 * permission gives anyone but root): the save is refused naming the file, having written
 * nothing, no temporary file left, and synced nothing. */
KILN_TEST(save_file, a_folder_that_cannot_be_opened_fails_the_save_naming_the_file) {
    saved_dir s;
    saved_open(&s);
    folder_opens = 0;
    memset(syncs, 0, sizeof syncs);
    fail_open_of_folder = EACCES;
    kiln_result r = kiln_save_file(s.w.world, s.path, NULL);
    fail_open_of_folder = 0;
    ck_assert_int_eq(folder_opens, 1); /* (the wrap saw the save's open) */
    ck_assert_str_eq(syncs, "");
    ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
    char want[256];
    snprintf(want, sizeof want, "kiln_save_file: cannot open the folder of %s: %s", s.path, strerror(EACCES));
    assert_error(s.w.world, want);
    assert_older_whole(&s);
    /* the next save, the folder open again, lands */
    nsyncs = 0;
    ck_assert_int_eq(kiln_save_file(s.w.world, s.path, NULL), KILN_OK);
    ck_assert_str_eq(syncs, "fd");
    saved_close(&s);
}

/* A full disk, made by a file size limit of a few bytes (EFBIG where ENOSPC would be). */
KILN_TEST(save_file, a_full_disk_fails_the_save_and_leaves_the_older_file) {
    saved_dir s;
    saved_open(&s);
    struct rlimit was, small = {.rlim_cur = 16};
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
    small.rlim_max = was.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    kiln_result r = kiln_save_file(s.w.world, s.path, NULL);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &was), 0);
    assert_refused(&s, r, "kiln_save_file: writing %s failed: %s", EFBIG);
}

/* A save over a file keeps that file's permission bits, whatever the umask: a save the player
 * made private stays private, one made shared stays shared; a first save follows the umask. */
KILN_TEST(save_file, a_save_over_a_file_keeps_its_mode_and_a_first_save_follows_the_umask) {
    saved_dir s;
    saved_open(&s);
    mode_t was = umask(022);
    /* the set-ID and sticky bits of the old file are never given to the new one */
    static const mode_t modes[] = {0600, 0640, 0664, 0400, 04755, 02750, 01644};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        ck_assert_int_eq(chmod(s.path, modes[i]), 0);
        ck_assert_msg(kiln_save_file(s.w.world, s.path, NULL) == KILN_OK, "%s", kiln_world_error(s.w.world));
        struct stat st;
        ck_assert_int_eq(stat(s.path, &st), 0);
        ck_assert_int_eq(st.st_mode & 07777, modes[i] & 0777);
    }
    ck_assert_int_eq(unlink(s.path), 0);
    umask(077);
    ck_assert_int_eq(kiln_save_file(s.w.world, s.path, NULL), KILN_OK);
    struct stat first;
    ck_assert_int_eq(stat(s.path, &first), 0);
    ck_assert_int_eq(first.st_mode & 07777, 0600);
    umask(was);
    saved_close(&s);
}

/* On a file system that keeps no modes fchmod fails (EPERM): the save still lands, whole, and
 * the new file keeps the 0600 it was made with, never more open than the old one was. */
KILN_TEST(save_file, a_save_where_fchmod_fails_lands_and_leaves_the_file_private) {
    saved_dir s;
    saved_open(&s);
    mode_t was = umask(0);
    ck_assert_int_eq(chmod(s.path, 0644), 0);
    fchmods = 0;
    fail_fchmod = EPERM;
    kiln_result r = kiln_save_file(s.w.world, s.path, NULL);
    fail_fchmod = 0;
    umask(was);
    ck_assert_msg(r == KILN_OK, "%s", kiln_world_error(s.w.world));
    ck_assert_int_eq(fchmods, 1); /* (the wrap saw the save's fchmod) */
    ck_assert_str_eq(syncs, "fd");
    struct stat st;
    ck_assert_int_eq(stat(s.path, &st), 0);
    ck_assert_int_eq(st.st_mode & 07777, 0600);
    ck_assert_int_eq(access(s.tmp, F_OK), -1);
    assert_path_holds_the_world(&s);
    saved_close(&s);
}

/* A pipe, a device or a link to one at path is refused and left in place: a save to
 * /dev/null by a game run as root used to put a file there. A device needs root to make. */
KILN_TEST(save_file, a_save_over_a_pipe_or_a_device_is_refused_and_leaves_it_in_place) {
    saved_dir s;
    saved_open(&s);
    char special[80], link_path[80], want[256];
    snprintf(link_path, sizeof link_path, "%s/link", s.dir);
    for (int kind = 0; kind < 2; kind++) {
        snprintf(special, sizeof special, "%s/%s", s.dir, kind ? "null" : "fifo");
        if (kind && mknod(special, S_IFCHR | 0666, makedev(1, 3)) != 0) {
            printf("a device at the path: not checked (making one needs root: %s)\n", strerror(errno));
            break;
        }
        if (!kind) ck_assert_int_eq(mkfifo(special, 0600), 0);
        ck_assert_int_eq(symlink(special, link_path), 0);
        for (int through_link = 0; through_link < 2; through_link++) {
            const char *path = through_link ? link_path : special;
            ck_assert_int_eq(kiln_save_file(s.w.world, path, NULL), KILN_ERR_INVALID_ARGUMENT);
            snprintf(want, sizeof want, "kiln_save_file: %s is not a regular file (a device, a pipe or a socket is "
                     "never replaced)", path);
            assert_error(s.w.world, want);
        }
        struct stat st, link_st;
        ck_assert_int_eq(lstat(special, &st), 0);
        ck_assert(kind ? S_ISCHR(st.st_mode) : S_ISFIFO(st.st_mode));
        ck_assert(lstat(link_path, &link_st) == 0 && S_ISLNK(link_st.st_mode));
        ck_assert_int_eq(unlink(link_path), 0);
        ck_assert_int_eq(unlink(special), 0);
    }
    assert_older_whole(&s);
    saved_close(&s);
}

/* A folder no one may make files in (root included): the save says which file it could not
 * make. */
KILN_TEST(save_file, a_save_into_a_folder_that_takes_no_files_is_refused_naming_the_file) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    ck_assert_int_eq(kiln_save_file(w.world, "/proc/self/world.bin", NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strncmp(kiln_world_error(w.world), "kiln_save_file: cannot write /proc/self/world.bin.tmp: ",
                          55) == 0, "%s", kiln_world_error(w.world));
    ck_assert_int_eq(kiln_save_file(w.world, "/nonexistent-kiln-folder/world.bin", NULL),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strncmp(kiln_world_error(w.world), "kiln_save_file: cannot open the folder of "
                          "/nonexistent-kiln-folder/world.bin: ", 77) == 0, "%s", kiln_world_error(w.world));
    pf_close(&w);
}

/* A folder at path is not replaced (rename refuses), nor is what it holds; a path ending in a
 * slash names no file at all. */
KILN_TEST(save_file, a_save_over_a_folder_is_refused_and_the_folder_is_left_as_it_was) {
    saved_dir s;
    saved_open(&s);
    char folder[80], inside[96];
    snprintf(folder, sizeof folder, "%s/slot", s.dir);
    snprintf(inside, sizeof inside, "%s/keep", folder);
    ck_assert_int_eq(mkdir(folder, 0700), 0);
    FILE *f = fopen(inside, "wb");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(kiln_save_file(s.w.world, folder, NULL), KILN_ERR_INVALID_ARGUMENT);
    char want[256], tmp[96];
    snprintf(want, sizeof want, "kiln_save_file: cannot rename to %s: %s", folder, strerror(EISDIR));
    assert_error(s.w.world, want);
    snprintf(tmp, sizeof tmp, "%s.tmp", folder);
    ck_assert_int_eq(access(tmp, F_OK), -1);
    ck_assert_int_eq(access(inside, F_OK), 0);
    snprintf(tmp, sizeof tmp, "%s/", s.dir);
    ck_assert_int_eq(kiln_save_file(s.w.world, tmp, NULL), KILN_ERR_INVALID_ARGUMENT);
    snprintf(want, sizeof want, "kiln_save_file: %s names a folder, not a file", tmp);
    assert_error(s.w.world, want);
    ck_assert_int_eq(unlink(inside), 0);
    ck_assert_int_eq(rmdir(folder), 0);
    assert_older_whole(&s);
    saved_close(&s);
}

/* path runs through a link to a folder, swapped for a link to another folder while the save
 * runs: the save lands in the folder the link named when it was called, and the other folder's
 * file is left as it was. It used to fail, naming its temporary file as replaced, and leave
 * that file behind in the first folder. */
static const char *swap_link, *swap_to;
static bool swap_folders(void *ud, int64_t units) {
    (void)ud, (void)units;
    if (!swap_link) return true;
    ck_assert_int_eq(unlink(swap_link), 0);
    ck_assert_int_eq(symlink(swap_to, swap_link), 0);
    swap_link = NULL;
    return true;
}

KILN_TEST(save_file, a_link_on_the_path_swapped_during_the_save_does_not_move_it) {
    saved_dir s;
    saved_open(&s); /* s.dir/world.bin: the older save, in the first folder */
    char other[] = "/tmp/kiln-savefile-XXXXXX", link[64], via[80], others[64], tmp[72];
    ck_assert_ptr_nonnull(mkdtemp(other));
    snprintf(link, sizeof link, "%s.link", other);
    snprintf(via, sizeof via, "%s/world.bin", link);
    snprintf(others, sizeof others, "%s/world.bin", other);
    ck_assert_int_eq(symlink(s.dir, link), 0);
    FILE *f = fopen(others, "wb");
    ck_assert_ptr_nonnull(f);
    fputs("the other folder's save", f);
    fclose(f);
    swap_link = link;
    swap_to = other;
    ck_assert_int_eq(kiln_save_file(s.w.world, via, &(kiln_save_desc){.progress = swap_folders}), KILN_OK);
    ck_assert_ptr_null(swap_link); /* the swap was made */
    assert_path_holds_the_world(&s);
    ck_assert_int_eq(access(s.tmp, F_OK), -1);
    pf_bytes theirs;
    ck_assert(read_all(others, &theirs));
    ck_assert_uint_eq(theirs.size, 23);
    ck_assert(memcmp(theirs.data, "the other folder's save", 23) == 0);
    pf_bytes_free(&theirs);
    snprintf(tmp, sizeof tmp, "%s.tmp", others);
    ck_assert_int_eq(access(tmp, F_OK), -1);
    ck_assert_int_eq(unlink(link), 0);
    ck_assert_int_eq(unlink(others), 0);
    ck_assert_int_eq(rmdir(other), 0);
    saved_close(&s);
}
