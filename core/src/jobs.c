/* jobs.c: a worker pool over one locked ring queue. Invariant: a counter reaches zero only
 * after every job submitted with it has returned, and waiters are woken under the lock, so
 * no wake-up is lost. */
#include "jobs.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fork_mark.h"
#include "memory.h"
#include "spin.h"

typedef struct kl_queued {
    kiln_job job;
    kiln_counter *counter;
} kl_queued;

/* A scratch block: header, then the usable bytes. */
typedef struct kl_scratch {
    struct kl_scratch *next;
    size_t size;
} kl_scratch;

struct kiln_jobs {
    kl_allocator alloc;
    pthread_mutex_t lock;
    pthread_cond_t work;   /* signalled when jobs are queued or the pool stops */
    pthread_cond_t done;   /* broadcast when a counter reaches zero */
    kl_queued *ring;
    int64_t cap, head, count;
    bool stopping;
    int32_t worker_count;   /* threads running */
    int32_t thread_cap;     /* entries allocated in threads */
    pthread_t *threads;
    kl_scratch *free_scratch;
    kl_jobs_watcher *watchers; /* kl_jobs_watch's, linked under the lock */
    kl_fork_mark owner;        /* the process the workers are threads of (not a child forked since) */
};

/* True in a child forked since the pool started (a game's crash reporter or helper): it has none
 * of the workers, which are its parent's threads, and the lock may stay held for good by one of
 * the parent's other threads (submitting, taking a job) that the child has none of either. There
 * the pool runs each job in kiln_jobs_submit, on the calling thread, and takes no lock. */
static bool forked(const kiln_jobs *jobs) { return kl_fork_mark_forked(&jobs->owner); }

#define KL_MAX_WORKERS 256

static int32_t default_workers(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > KL_MAX_WORKERS) n = KL_MAX_WORKERS;
    return (int32_t)n - 1;
}

/* Takes the oldest job; the lock must be held and the queue non-empty. */
static kl_queued pop(kiln_jobs *jobs) {
    kl_queued q = jobs->ring[jobs->head];
    jobs->head = (jobs->head + 1) % jobs->cap;
    jobs->count--;
    return q;
}

static void finish(kiln_jobs *jobs, kiln_counter *counter) {
    if (__atomic_sub_fetch(&counter->pending, 1, __ATOMIC_ACQ_REL) == 0) {
        pthread_mutex_lock(&jobs->lock);
        pthread_cond_broadcast(&jobs->done);
        pthread_mutex_unlock(&jobs->lock);
    }
}

static void *worker_main(void *arg) {
    kiln_jobs *jobs = arg;
    pthread_mutex_lock(&jobs->lock);
    for (;;) {
        while (jobs->count == 0 && !jobs->stopping) pthread_cond_wait(&jobs->work, &jobs->lock);
        if (jobs->count == 0) break; /* stopping, and the queue is drained */
        kl_queued q = pop(jobs);
        pthread_mutex_unlock(&jobs->lock);
        q.job.fn(q.job.arg);
        finish(jobs, q.counter);
        pthread_mutex_lock(&jobs->lock);
    }
    pthread_mutex_unlock(&jobs->lock);
    return NULL;
}

kiln_jobs *kiln_jobs_create(const kiln_jobs_desc *desc) {
    kl_allocator alloc = {kl_default_alloc, NULL, 0, 0};
    int32_t workers = KILN_JOBS_DEFAULT;
    if (desc) {
        workers = desc->workers;
        if (desc->alloc) {
            alloc.fn = desc->alloc;
            alloc.ud = desc->alloc_ud;
        }
    }
    if (workers < KILN_JOBS_INLINE || workers > KL_MAX_WORKERS) return NULL;
    if (workers == KILN_JOBS_DEFAULT) workers = default_workers();
    else if (workers == KILN_JOBS_INLINE) workers = 0;
    kiln_jobs *jobs = kl_alloc(&alloc, sizeof *jobs);
    if (!jobs) return NULL;
    memset(jobs, 0, sizeof *jobs);
    jobs->alloc = alloc;
    kl_fork_mark_init(&jobs->owner);
    if (pthread_mutex_init(&jobs->lock, NULL) != 0) goto fail_mutex;
    if (pthread_cond_init(&jobs->work, NULL) != 0) goto fail_work;
    if (pthread_cond_init(&jobs->done, NULL) != 0) goto fail_done;
    if (workers > 0) {
        jobs->threads = kl_alloc(&jobs->alloc, sizeof(pthread_t) * (size_t)workers);
        if (!jobs->threads) goto fail_threads;
        jobs->thread_cap = workers;
        for (int32_t i = 0; i < workers; i++) {
            if (pthread_create(&jobs->threads[i], NULL, worker_main, jobs) != 0) {
                jobs->worker_count = i;
                kiln_jobs_destroy(jobs);
                return NULL;
            }
        }
    }
    jobs->worker_count = workers;
    return jobs;
fail_threads:
    pthread_cond_destroy(&jobs->done);
fail_done:
    pthread_cond_destroy(&jobs->work);
fail_work:
    pthread_mutex_destroy(&jobs->lock);
fail_mutex:
    kl_fork_mark_free(&jobs->owner);
    kl_free(&alloc, jobs, sizeof *jobs);
    return NULL;
}

void kiln_jobs_destroy(kiln_jobs *jobs) {
    if (jobs == NULL) return;
    /* In a forked child joining the workers, or destroying the condition they wait on (which
     * waits for its waiters), blocked for good: it runs what the parent had queued itself. */
    bool child = forked(jobs);
    if (!child) {
        pthread_mutex_lock(&jobs->lock);
        jobs->stopping = true;
        pthread_cond_broadcast(&jobs->work);
        pthread_mutex_unlock(&jobs->lock);
    }
    for (int32_t i = 0; i < jobs->worker_count && !child; i++) pthread_join(jobs->threads[i], NULL);
    /* An inline pool may still hold jobs nobody waited for: run them, as a worker would. */
    while (jobs->count > 0) {
        kl_queued q = pop(jobs);
        q.job.fn(q.job.arg);
        __atomic_sub_fetch(&q.counter->pending, 1, __ATOMIC_ACQ_REL);
    }
    kl_allocator alloc = jobs->alloc;
    for (kl_scratch *s = jobs->free_scratch, *next; s; s = next) {
        next = s->next;
        kl_free(&alloc, s, sizeof *s + s->size);
    }
    kl_free(&alloc, jobs->threads, sizeof(pthread_t) * (size_t)jobs->thread_cap);
    kl_free(&alloc, jobs->ring, sizeof(kl_queued) * (size_t)jobs->cap);
    if (!child) {
        pthread_cond_destroy(&jobs->done);
        pthread_cond_destroy(&jobs->work);
        pthread_mutex_destroy(&jobs->lock);
    }
    kl_fork_mark_free(&jobs->owner);
    kl_free(&alloc, jobs, sizeof *jobs);
}

int32_t kiln_jobs_worker_count(const kiln_jobs *jobs) {
    KILN_ASSERT(jobs != NULL, "jobs is NULL");
    return forked(jobs) ? 0 : jobs->worker_count;
}

/* Grows the ring to hold need jobs, unrolling it; the lock must be held. */
static bool ring_reserve(kiln_jobs *jobs, int64_t need) {
    if (need <= jobs->cap) return true;
    int64_t ncap = jobs->cap ? jobs->cap * 2 : 64;
    while (ncap < need) ncap *= 2;
    kl_queued *ring = kl_alloc(&jobs->alloc, kl_mul(sizeof(kl_queued), (size_t)ncap));
    if (!ring) return false;
    for (int64_t i = 0; i < jobs->count; i++) ring[i] = jobs->ring[(jobs->head + i) % jobs->cap];
    kl_free(&jobs->alloc, jobs->ring, sizeof(kl_queued) * (size_t)jobs->cap);
    jobs->ring = ring;
    jobs->cap = ncap;
    jobs->head = 0;
    return true;
}

kiln_result kiln_jobs_submit(kiln_jobs *jobs, const kiln_job *list, int32_t count,
                             kiln_counter *counter) {
    KILN_ASSERT(jobs != NULL && counter != NULL, "jobs and counter are required");
    /* no world to name it in: the code alone says it (the queue and counter unchanged) */
    if (count < 0 || (count > 0 && list == NULL)) return KILN_ERR_INVALID_ARGUMENT;
    if (count == 0) return KILN_OK;
    if (forked(jobs)) {
        __atomic_add_fetch(&counter->pending, count, __ATOMIC_ACQ_REL);
        for (int32_t i = 0; i < count; i++) {
            list[i].fn(list[i].arg);
            __atomic_sub_fetch(&counter->pending, 1, __ATOMIC_ACQ_REL);
        }
        return KILN_OK;
    }
    pthread_mutex_lock(&jobs->lock);
    if (!ring_reserve(jobs, jobs->count + count)) {
        pthread_mutex_unlock(&jobs->lock);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    __atomic_add_fetch(&counter->pending, count, __ATOMIC_ACQ_REL);
    for (int32_t i = 0; i < count; i++) {
        jobs->ring[(jobs->head + jobs->count) % jobs->cap] = (kl_queued){list[i], counter};
        jobs->count++;
    }
    if (count == 1) pthread_cond_signal(&jobs->work);
    else pthread_cond_broadcast(&jobs->work);
    pthread_mutex_unlock(&jobs->lock);
    return KILN_OK;
}

#define KL_WAIT_SPIN_NS 50000 /* a waiter with nothing left to take spins this long first */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* True when counter reached zero within KL_WAIT_SPIN_NS. The jobs still running are the last
 * ones, often almost done: a sleep on the condition would add a wake-up (tens of
 * microseconds on a virtual machine) to every parallel section's end. */
static bool spin_until_done(kiln_counter *counter) {
    int64_t start = now_ns();
    for (int i = 1;; i++) {
        if (__atomic_load_n(&counter->pending, __ATOMIC_ACQUIRE) == 0) return true;
        kl_spin_pause();
        if (i % 64 == 0 && now_ns() - start > KL_WAIT_SPIN_NS) return false;
    }
}

/* A job the calling thread takes up (by 1) or finished (-1) in kiln_jobs_wait, counted for each
 * stage it watches (kl_jobs_watch); the lock is held. */
static void count_inline(kiln_jobs *jobs, int32_t by) {
    for (kl_jobs_watcher *w = jobs->watchers; w; w = w->next)
        if (pthread_equal(w->thread, pthread_self())) w->inline_jobs += by;
}

void kiln_jobs_wait(kiln_jobs *jobs, kiln_counter *counter) {
    KILN_ASSERT(jobs != NULL && counter != NULL, "jobs and counter are required");
    /* In a forked child the child's own jobs ran in their submit; what is left is the parent's
     * (one a worker was part-way through never ends here): waited for, it would block for good. */
    if (__atomic_load_n(&counter->pending, __ATOMIC_ACQUIRE) == 0 || forked(jobs)) return;
    pthread_mutex_lock(&jobs->lock);
    bool spun = false;
    while (__atomic_load_n(&counter->pending, __ATOMIC_ACQUIRE) > 0) {
        if (jobs->count > 0) {
            kl_queued q = pop(jobs);
            count_inline(jobs, 1);
            pthread_mutex_unlock(&jobs->lock);
            q.job.fn(q.job.arg);
            finish(jobs, q.counter);
            pthread_mutex_lock(&jobs->lock);
            count_inline(jobs, -1); /* the same watchers: a stage the job ran unwatched as it ended */
        } else if (!spun) {
            spun = true;
            pthread_mutex_unlock(&jobs->lock);
            bool done = spin_until_done(counter);
            pthread_mutex_lock(&jobs->lock);
            if (done) break;
        } else {
            pthread_cond_wait(&jobs->done, &jobs->lock);
        }
    }
    pthread_mutex_unlock(&jobs->lock);
}

void kl_jobs_watch(kiln_jobs *jobs, kl_jobs_watcher *w) {
    *w = (kl_jobs_watcher){pthread_self(), 0, NULL};
    if (forked(jobs)) return; /* no job is taken up in a wait there: nothing to count */
    pthread_mutex_lock(&jobs->lock);
    w->next = jobs->watchers;
    jobs->watchers = w;
    pthread_mutex_unlock(&jobs->lock);
}

void kl_jobs_unwatch(kiln_jobs *jobs, kl_jobs_watcher *w) {
    if (forked(jobs)) return;
    pthread_mutex_lock(&jobs->lock);
    kl_jobs_watcher **at = &jobs->watchers;
    while (*at && *at != w) at = &(*at)->next;
    if (*at) *at = w->next;
    pthread_mutex_unlock(&jobs->lock);
}

void *kl_jobs_scratch_acquire(kiln_jobs *jobs, size_t size) {
    kl_scratch *s = NULL;
    pthread_mutex_lock(&jobs->lock);
    for (kl_scratch **link = &jobs->free_scratch; *link; link = &(*link)->next) {
        if ((*link)->size >= size) {
            s = *link;
            *link = s->next;
            break;
        }
    }
    if (!s) {
        s = kl_alloc(&jobs->alloc, sizeof *s + size);
        if (s) s->size = size;
    }
    pthread_mutex_unlock(&jobs->lock);
    return s ? s + 1 : NULL;
}

void kl_jobs_scratch_release(kiln_jobs *jobs, void *block) {
    if (!block) return;
    kl_scratch *s = (kl_scratch *)block - 1;
    pthread_mutex_lock(&jobs->lock);
    s->next = jobs->free_scratch;
    jobs->free_scratch = s;
    pthread_mutex_unlock(&jobs->lock);
}
