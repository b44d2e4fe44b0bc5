/* test_persist_in_schedule.c: Check suite for saves, hashes, snapshots and exports made by the
 * systems of a running schedule: refused beside other systems, whole from an exclusive one. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "persist_fixture.h"
#include "test_registry.h"

enum { FRAMES = 20, WRITES = 2000 };

/* What the systems share: the call to make, and what it gave back in the last frame. */
typedef struct frame_call {
    kiln_world *world;
    kiln_component pos;
    kiln_entity mover;
    int what;             /* which call the caller system makes (enum call) */
    uint64_t hash;        /* the last hash the caller got (0: refused) */
    kiln_result result;   /* the last result of a call returning one */
    char message[512];    /* the caller's world error after a refusal */
} frame_call;

enum call { HASH, CONTENT_HASH, EXPORT, SAVE, SNAPSHOT };

static const char *const names[] = {"kiln_world_hash", "kiln_world_content_hash", "kiln_export", "kiln_save",
                                    "kiln_snapshot_create"};

static bool discard(void *ud, const void *data, size_t size) { return (void)ud, (void)data, (void)size, true; }

/* Writes the mover's Pos in place, many times a frame, as a worker system does. */
static void move(const kiln_system_ctx *ctx) {
    frame_call *f = ctx->user;
    for (int i = 0; i < WRITES; i++) {
        pf_pos *p = kiln_get_mut(ctx->world, f->mover, f->pos);
        if (p) p->x += 1.0f;
    }
}

static void call(const kiln_system_ctx *ctx) {
    frame_call *f = ctx->user;
    f->result = KILN_OK;
    f->hash = 1;
    if (f->what == HASH) f->hash = kiln_world_hash(ctx->world);
    else if (f->what == CONTENT_HASH) f->hash = kiln_world_content_hash(ctx->world);
    else if (f->what == EXPORT) f->result = kiln_export(ctx->world, NULL, discard, NULL);
    else if (f->what == SAVE) f->result = kiln_save(ctx->world, NULL, discard, NULL);
    else {
        kiln_snapshot *snap = NULL;
        f->result = kiln_snapshot_create(ctx->world, &snap);
        kiln_snapshot_destroy(snap);
    }
    if (f->hash == 0 || f->result != KILN_OK) snprintf(f->message, sizeof f->message, "%s", kiln_world_error(ctx->world));
}

static void open_world(frame_call *f, int what) {
    memset(f, 0, sizeof *f);
    f->what = what;
    f->world = kiln_world_create(NULL);
    f->pos = pf_register(f->world, "Pos", sizeof(pf_pos), (const kiln_field[]){{"x", KILN_TYPE_FLOAT, 0, 0}}, 1);
    for (int i = 0; i < 64; i++)
        ck_assert_int_eq(kiln_spawn_with(f->world, &f->pos, (const void *[]){&(pf_pos){(float)i, 0, 0}}, 1,
                                         &f->mover), KILN_OK);
}

/* Runs FRAMES frames of a schedule on two workers: "move" writing Pos, and "call" making the
 * call, beside it (a worker or main-thread system) or after it alone (exclusive). */
static void run_frames(frame_call *f, bool main_thread, bool exclusive) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(f->world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "move", .run = move, .user = f,
                                                               .writes = {f->pos}}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "call", .run = call, .user = f,
                                                               .main_thread = main_thread,
                                                               .exclusive = exclusive}), KILN_OK);
    for (int i = 0; i < FRAMES; i++) ck_assert_int_eq(kiln_schedule_run(s, 0.016), KILN_OK);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
}

static void assert_refused(const frame_call *f) {
    char expected[512];
    snprintf(expected, sizeof expected, "%s: called while a schedule runs systems that are not exclusive (they "
             "may write any column meanwhile); call it from an exclusive system or between runs", names[f->what]);
    ck_assert_msg(f->hash == 0 || f->result == KILN_ERR_INVALID_ARGUMENT, "%s was not refused", names[f->what]);
    ck_assert_str_eq(f->message, expected);
}

/* Each call of [first, last] made by "call" beside "move" is refused, naming the call. */
static void assert_each_refused(int first, int last, bool main_thread) {
    for (int what = first; what <= last; what++) {
        frame_call f;
        open_world(&f, what);
        run_frames(&f, main_thread, false);
        assert_refused(&f);
        kiln_world_destroy(f.world);
    }
}

KILN_TEST_GROUP_WITH(in_schedule, .timeout = 60);

/* A worker system hashing the world read every column while "move" wrote Pos on another worker:
 * a data race (ThreadSanitizer saw it), and a hash of a world half moved. */
KILN_TEST(in_schedule, a_hash_from_a_worker_system_beside_a_writer_is_refused_naming_the_call) {
    assert_each_refused(HASH, CONTENT_HASH, false);
}

/* kiln_export from a worker system read every column beside the writer (release builds), or
 * aborted on its first undeclared read (debug builds). */
KILN_TEST(in_schedule, an_export_from_a_worker_system_beside_a_writer_is_refused_naming_the_call) {
    assert_each_refused(EXPORT, EXPORT, false);
}

/* A main-thread system runs on the stage's thread while workers write: refused alike, and a save
 * or snapshot says why instead of only "the world is deferred or iterating". */
KILN_TEST(in_schedule, a_save_snapshot_or_hash_from_a_main_thread_system_is_refused_naming_the_call) {
    assert_each_refused(HASH, SNAPSHOT, true);
}

/* An exclusive system runs alone: its hash is the one the world has between frames. */
KILN_TEST(in_schedule, a_hash_from_an_exclusive_system_after_the_writer_equals_the_hash_after_the_frame) {
    for (int what = HASH; what <= CONTENT_HASH; what++) {
        frame_call f;
        open_world(&f, what);
        run_frames(&f, false, true);
        uint64_t after = what == HASH ? kiln_world_hash(f.world) : kiln_world_content_hash(f.world);
        ck_assert_uint_ne(f.hash, 0);
        ck_assert_uint_eq(f.hash, after);
        const pf_pos *p = kiln_get(f.world, f.mover, f.pos);
        ck_assert(p->x == 63.0f + (float)(FRAMES * WRITES));
        kiln_world_destroy(f.world);
    }
}

/* The save and the snapshot of an exclusive system succeed, and the save loads as the world is. */
KILN_TEST(in_schedule, a_save_and_a_snapshot_from_an_exclusive_system_succeed) {
    for (int what = EXPORT; what <= SNAPSHOT; what++) {
        frame_call f;
        open_world(&f, what);
        run_frames(&f, false, true);
        ck_assert_msg(f.result == KILN_OK, "%s: %s", names[what], f.message);
        kiln_world_destroy(f.world);
    }
}

/* What the fsync below saw: this binary's definition stands in for the C library's, so a test
 * can tell whether a file save forced its bytes to the disk before renaming them into place. */
static struct {
    int calls;
    off_t size;         /* the synced file's size then */
    bool path_existed;  /* whether the save's final name existed then (it must not, yet) */
    char path[96];
} synced;

int fsync(int fd) {
    struct stat st;
    bool known = fstat(fd, &st) == 0;
    if (known && S_ISDIR(st.st_mode)) return 0; /* the folder's, after the rename (test_persist_save_file) */
    synced.calls++;
    synced.size = known ? st.st_size : -1;
    synced.path_existed = synced.path[0] && access(synced.path, F_OK) == 0;
    return 0;
}

static void autosave(const kiln_system_ctx *ctx) {
    frame_call *f = ctx->user;
    if (f->what++ == 0) f->result = kiln_save_file(ctx->world, synced.path, NULL);
}

/* An autosave from an exclusive system renamed path.tmp over the save without syncing it: a
 * crash or power loss after the rename could leave a file cut short and no older save. */
KILN_TEST(in_schedule, a_file_save_from_an_exclusive_system_reaches_the_disk_before_its_name) {
    char dir[] = "/tmp/kiln-autosave-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    memset(&synced, 0, sizeof synced);
    snprintf(synced.path, sizeof synced.path, "%s/auto.bin", dir);
    frame_call f;
    open_world(&f, 0);
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "move", .run = move, .user = &f,
                                                               .writes = {f.pos}}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "autosave", .run = autosave, .user = &f,
                                                               .exclusive = true}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.016), KILN_OK);
    ck_assert_msg(f.result == KILN_OK, "%s", kiln_world_error(f.world));
    struct stat st;
    ck_assert_int_eq(stat(synced.path, &st), 0);
    ck_assert_int_eq(synced.calls, 1);
    ck_assert(!synced.path_existed);
    ck_assert_int_eq((long)synced.size, (long)st.st_size);
    kiln_world *loaded = kiln_world_create(NULL);
    pf_register(loaded, "Pos", sizeof(pf_pos), (const kiln_field[]){{"x", KILN_TYPE_FLOAT, 0, 0}}, 1);
    ck_assert_int_eq(kiln_load_file(loaded, synced.path, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_world_hash(loaded), kiln_world_hash(f.world));
    kiln_world_destroy(loaded);
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
    ck_assert_int_eq(unlink(synced.path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
}
