/* Ember's thread pool: the OpenMP entry points GCC's `#pragma omp parallel for` compiles to,
 * implemented for the cpu backend's model libraries (backends/cpu/threads.py says why).
 *
 * A parallel region of N threads is N tasks, task t being "OpenMP thread t". The calling
 * thread publishes the region and then claims tasks itself, as do the pool's workers; a task
 * is run by whoever claims it first. So a worker that is asleep, or queued behind another
 * process on a busy machine, never holds a region up: the caller runs its task instead, and a
 * region costs at most what it costs on one thread. The caller waits only for tasks a worker
 * has already started.
 *
 * Each thread claims its own task first (the caller task 0, worker k task k), then the others
 * in order: where every thread is there, task t runs on the same core region after region, so
 * a kernel that splits its data statically by thread number finds what its previous step
 * wrote in its own core's cache. Reading it from the other core's cache instead ran 5x slower
 * (24 against 120 GB/s on a Xeon VM); claiming tasks in arrival order gave task 0 to whichever
 * thread came first.
 *
 * Idle workers spin (PAUSE) for a budget after each region (EMBER_SPIN_US, default 5000 us),
 * then sleep on a futex. A model's regions come microseconds apart, and while other processes
 * share the cores a worker that stays runnable keeps its share of a core: one that sleeps is
 * woken, region after region, onto whichever core the scheduler picks, often the caller's own,
 * where it preempts the caller (a 20 us MLP on 2 threads under one competing process: 5% of its
 * runs at 0.3 ms and a median at one-thread speed with 0.02-0.1 ms budgets, against 0.02 ms
 * and 0.11-0.15 ms at p99 with 5 ms; ONNX Runtime's workers spin about 23 ms after a run, Intel
 * OpenMP's 200 ms). A worker stops spinning as soon as another Ember pool of the process
 * starts a region (another model, or another segment of the same one: ember_pool_share), so
 * a pipeline of models never has one model's idle workers spinning on the cores the next one
 * computes on. A caller left waiting on a started task spins only a few task times before it
 * sleeps and lends its core; and the worker that wakes it sleeps at once instead of spinning
 * on the core the caller needs.
 *
 * Every OpenMP entry point here has hidden visibility (ember_pool_share, the loader's, is the
 * one function exported): the model library's own references bind to them at link time,
 * dlsym never sees them, and another OpenMP runtime in the process (one a
 * vendor library brings) is left alone. The library links no OpenMP runtime: a pragma that
 * needs an entry point this file lacks fails the link (-z defs), never silently mixing two. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#define POOL_API __attribute__((visibility("hidden")))
#define POOL_MAX_THREADS 256
#define POOL_DEFAULT_SPIN_US 5000 /* EMBER_SPIN_US's default (backends/cpu/threads.py DEFAULT_SPIN_US) */
#define POOL_MAX_LOOPS 8          /* worksharing loops in one region (generated code has one) */

typedef void (*pool_task_fn)(void *);

typedef struct {
    _Atomic int state;  /* 0 unset, 1 being set, 2 ready */
    _Atomic long next;
    long end, incr, chunk;
} pool_loop;

static struct {
    /* (generation << 32) | tasks: one word, so a claim reads both from the same region */
    _Atomic uint64_t claim;
    _Atomic uint32_t generation;   /* futex word the workers sleep on */
    _Atomic int sleepers;          /* workers asleep on `generation` */
    _Atomic uint32_t finished;     /* tasks of the current region done (futex word of the caller) */
    _Atomic int caller_asleep;
    _Atomic int busy;              /* a region is in flight: another caller runs its own inline */
    _Atomic int64_t published_at;  /* when the current region began */
    _Atomic int64_t task_ns;       /* about how long one of its tasks takes (0: not known, or a shared loop) */
    unsigned site_index;           /* its entry in pool_sites */
    pool_task_fn fn;
    void *data;
    pool_loop loops[POOL_MAX_LOOPS];
    pthread_mutex_t start_lock;
    _Atomic int workers;           /* started and not yet ended (changed under start_lock) */
    int spin_ns;                   /* the spin budget, from EMBER_SPIN_US */
} pool = {.start_lock = PTHREAD_MUTEX_INITIALIZER};

/* Task t's claim: the generation of the last region whose task t someone claimed (tasks of
 * the current region are unclaimed while theirs is older). One cache line each, since
 * threads claim different tasks at the same moment. */
static struct {
    _Atomic uint32_t generation;
    char pad[60];
} task_claims[POOL_MAX_THREADS];

/* Worker slots: worker k (1 <= k < POOL_MAX_THREADS) prefers task k. Changed under start_lock. */
static bool worker_slot_used[POOL_MAX_THREADS];
static uint32_t worker_slot_seen[POOL_MAX_THREADS];

/* Per parallel region (its outlined function's address, hashed): about how long it takes on one
 * thread, which tells a late worker whether joining still helps (claim_tasks). */
#define POOL_SITES 256
static _Atomic int64_t pool_sites[POOL_SITES];
/* Regions whose tasks share a schedule(dynamic) loop: a late worker still helps there (it
 * takes the chunks left), so it always joins them. */
static _Atomic unsigned char pool_site_shares_loop[POOL_SITES];

static __thread int task_id, task_count = 1, loop_index, in_region;
static __thread pool_loop *current_loop;           /* the worksharing loop _next takes chunks from */
static __thread pool_loop inline_loops[POOL_MAX_LOOPS];

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#if defined(__linux__)
/* Sleeps while *word == expected, at most `timeout` (NULL: no limit); false once timed out. */
static bool futex_wait_for(_Atomic uint32_t *word, uint32_t expected, const struct timespec *timeout) {
    return syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, timeout, NULL, 0) == 0 ||
           errno != ETIMEDOUT;
}
static void futex_wait(_Atomic uint32_t *word, uint32_t expected) { futex_wait_for(word, expected, NULL); }
static void futex_wake(_Atomic uint32_t *word, int count) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}
#else
static void futex_wait(_Atomic uint32_t *word, uint32_t expected) {
    (void)word; (void)expected;
    struct timespec pause_for = {0, 50000};
    nanosleep(&pause_for, NULL);
}
static bool futex_wait_for(_Atomic uint32_t *word, uint32_t expected, const struct timespec *timeout) {
    (void)timeout;
    futex_wait(word, expected);
    return true;
}
static void futex_wake(_Atomic uint32_t *word, int count) { (void)word; (void)count; }
#endif

/* Which pool of the process last started a region: a word of the loader's that every model
 * library shares (ember_pool_share), or this library's own until the loader hands one over. A
 * spinning worker of another pool sees it change and goes to sleep. */
static _Atomic uintptr_t own_last_pool;
static _Atomic uintptr_t *last_pool = &own_last_pool;

/* Called by the loader right after the library is loaded, before any region: `word` is the
 * process's one shared word (kept alive as long as the process). Not an OpenMP entry point,
 * so it is the one function here dlsym sees. */
__attribute__((visibility("default"))) void ember_pool_share(_Atomic uintptr_t *word) {
    if (word) last_pool = word;
}

static inline uintptr_t this_pool(void) { return (uintptr_t)&pool; }

/* Spins until *word != value or `budget_ns` is spent (or, with `yield_to_others`, another
 * pool of the process starts a region); true when *word changed. */
static bool spin_until_changed(_Atomic uint32_t *word, uint32_t value, int64_t budget_ns, bool yield_to_others) {
    int64_t start = now_ns();
    for (;;) {
        for (int i = 0; i < 16; i++) {
            if (atomic_load_explicit(word, memory_order_acquire) != value) return true;
            cpu_relax();
        }
        if (yield_to_others && atomic_load_explicit(last_pool, memory_order_relaxed) != this_pool()) return false;
        if (now_ns() - start > budget_ns) return false;
    }
}

/* Runs fn(data) as OpenMP thread `id` of `count`, restoring the thread's own task state after
 * (a nested region runs inside a task). kind: 1 a task of the pool's region, 2 of an inline one
 * (its worksharing loops run whole in each task's first call). */
static void run_as_task(pool_task_fn fn, void *data, int id, int count, int kind) {
    int saved_id = task_id, saved_count = task_count, saved_index = loop_index, saved_in = in_region;
    pool_loop *saved_loop = current_loop;
    task_id = id;
    task_count = count;
    loop_index = 0;
    in_region = kind;
    fn(data);
    task_id = saved_id;
    task_count = saved_count;
    loop_index = saved_index;
    in_region = saved_in;
    current_loop = saved_loop;
}

/* Wrap-safe: whether generation a comes before b (both within 2^31 regions of each other). */
static inline bool generation_before(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }

/* Claims task t of the region of `generation`: false where someone has (or the region is over:
 * all its tasks were claimed before it could end, and a later region's claims are newer). */
static bool claim_task(int t, uint32_t generation) {
    uint32_t seen = atomic_load_explicit(&task_claims[t].generation, memory_order_acquire);
    while (generation_before(seen, generation))
        if (atomic_compare_exchange_weak_explicit(&task_claims[t].generation, &seen, generation,
                                                  memory_order_acq_rel, memory_order_acquire))
            return true;
    return false;
}

/* Claims and runs tasks of the region of `generation` until none is left, its own task `self`
 * first, then the following ones in order; how many it ran. A worker arriving late (woken
 * after a long sleep, or queued behind another process) leaves a task alone when the threads
 * already at work would start it before it could finish it: the caller, going through the
 * tasks in order, reaches task t about t x (one task's time) after the region began. */
static int claim_tasks(uint32_t generation, int self, bool worker, bool *woke_caller) {
    uint64_t word = atomic_load_explicit(&pool.claim, memory_order_acquire);
    if ((uint32_t)(word >> 32) != generation) return 0;
    int tasks = (int)(word & 0xffff), ran = 0;
    int64_t task_ns = worker ? atomic_load_explicit(&pool.task_ns, memory_order_relaxed) : 0;
    int64_t late = worker ? now_ns() - atomic_load_explicit(&pool.published_at, memory_order_relaxed) : 0;
    for (int i = 0; i < tasks; i++) {
        int t = (self + i) % tasks;
        if (ran == 0 && t > 0 && task_ns > 0 && late > task_ns * t * 3 / 4) continue;
        if (!claim_task(t, generation)) continue;
        run_as_task(pool.fn, pool.data, t, tasks, 1);
        ran++;
        if (atomic_fetch_add(&pool.finished, 1) + 1 == (uint32_t)tasks && atomic_load(&pool.caller_asleep)) {
            futex_wake(&pool.finished, 1);
            *woke_caller = true;
        }
    }
    return ran;
}

/* A worker idle this long ends: every model library has a pool of its own, and a process that
 * loads many (a test run, a server of many models) should not keep threads for the idle ones.
 * The next region starts it again (tens of microseconds, which that region does not wait for). */
#define POOL_IDLE_EXIT_S 2

static void *worker_main(void *arg) {
    int slot = (int)(uintptr_t)arg;
    pthread_mutex_lock(&pool.start_lock);
    uint32_t seen = worker_slot_seen[slot];
    pthread_mutex_unlock(&pool.start_lock);
    const struct timespec idle = {POOL_IDLE_EXIT_S, 0};
    bool woke_caller = false;
    for (;;) {
        /* A worker that woke the caller sleeps at once: the caller slept because the worker's
         * task outlasted its spin (the worker was likely queued behind another process), and
         * now needs a core, which a spinning worker would hold. */
        if (woke_caller || !spin_until_changed(&pool.generation, seen, pool.spin_ns, true)) {
            atomic_fetch_add(&pool.sleepers, 1);
            while (atomic_load(&pool.generation) == seen) {
                if (futex_wait_for(&pool.generation, seen, &idle)) continue;
                pthread_mutex_lock(&pool.start_lock);
                bool still_idle = atomic_load(&pool.generation) == seen;
                if (still_idle) {
                    pool.workers--;
                    worker_slot_used[slot] = false;
                }
                pthread_mutex_unlock(&pool.start_lock);
                if (still_idle) {
                    atomic_fetch_sub(&pool.sleepers, 1);
                    return NULL;
                }
            }
            atomic_fetch_sub(&pool.sleepers, 1);
        }
        seen = atomic_load_explicit(&pool.generation, memory_order_acquire);
        woke_caller = false;
        claim_tasks(seen, slot, true, &woke_caller);
    }
    return NULL;
}

static void reset_after_fork(void) {
    /* The child has only the forking thread: it starts workers afresh when it needs them. */
    pthread_mutex_init(&pool.start_lock, NULL);
    pool.workers = 0;
    for (int k = 0; k < POOL_MAX_THREADS; k++) worker_slot_used[k] = false;
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.busy, 0);
    atomic_store(&pool.caller_asleep, 0);
}

static void configure(void) {
    const char *text = getenv("EMBER_SPIN_US");
    long spin_us = text ? strtol(text, NULL, 10) : POOL_DEFAULT_SPIN_US;
    if (spin_us < 0) spin_us = 0;
    if (spin_us > 100000) spin_us = 100000;
    pool.spin_ns = (int)(spin_us * 1000);
    pthread_atfork(NULL, NULL, reset_after_fork);
}

/* Starts workers up to `wanted` (under the lock; a failed start leaves fewer: their tasks
 * then run on the threads there are). */
static void start_workers(int wanted) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, configure);
    pthread_mutex_lock(&pool.start_lock);
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);  /* signals stay with the application's threads */
    while (pool.workers < wanted) {
        int slot = 1;  /* the lowest free one: a worker that ended leaves its slot to the next */
        while (slot < POOL_MAX_THREADS && worker_slot_used[slot]) slot++;
        if (slot == POOL_MAX_THREADS) break;
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        worker_slot_seen[slot] = atomic_load(&pool.generation);
        int failed = pthread_create(&thread, &attr, worker_main, (void *)(uintptr_t)slot);
        pthread_attr_destroy(&attr);
        if (failed) break;
        worker_slot_used[slot] = true;
        pool.workers++;
    }
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    pthread_mutex_unlock(&pool.start_lock);
}

static void run_inline(pool_task_fn fn, void *data, int tasks) {
    /* A nested region, or one started while another thread's region holds the pool: its tasks
     * run here, one after another (as OpenMP runs a nested region on a team of one). */
    for (int t = 0; t < tasks; t++) run_as_task(fn, data, t, tasks, 2);
}

POOL_API void GOMP_parallel(pool_task_fn fn, void *data, unsigned num_threads, unsigned flags) {
    (void)flags;
    int tasks = num_threads == 0 ? 1 : (int)(num_threads > POOL_MAX_THREADS ? POOL_MAX_THREADS : num_threads);
    if (tasks == 1 || in_region) {
        run_inline(fn, data, tasks);
        return;
    }
    unsigned site_index = (unsigned)(((uintptr_t)fn >> 4) % POOL_SITES);
    _Atomic int64_t *site = &pool_sites[site_index];
    int64_t start = now_ns();
    int expected = 0;
    if (!atomic_compare_exchange_strong(&pool.busy, &expected, 1)) {
        run_inline(fn, data, tasks);
        atomic_store_explicit(site, now_ns() - start, memory_order_relaxed);
        return;
    }
    if (pool.workers < tasks - 1) start_workers(tasks - 1);
    if (atomic_load_explicit(last_pool, memory_order_relaxed) != this_pool())  /* read first: no store per region */
        atomic_store_explicit(last_pool, this_pool(), memory_order_relaxed);
    pool.fn = fn;
    pool.data = data;
    for (int i = 0; i < POOL_MAX_LOOPS; i++) atomic_store_explicit(&pool.loops[i].state, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.finished, 0, memory_order_relaxed);
    pool.site_index = site_index;
    bool shares_loop = atomic_load_explicit(&pool_site_shares_loop[site_index], memory_order_relaxed);
    atomic_store_explicit(&pool.task_ns, shares_loop ? 0 : atomic_load_explicit(site, memory_order_relaxed) / tasks,
                          memory_order_relaxed);
    atomic_store_explicit(&pool.published_at, start, memory_order_relaxed);
    uint32_t generation = atomic_load_explicit(&pool.generation, memory_order_relaxed) + 1;
    /* The region's tasks start unclaimed (however long ago a task of that number last ran, so
     * generation_before never compares across a wrap). */
    for (int t = 0; t < tasks; t++)
        atomic_store_explicit(&task_claims[t].generation, generation - 1, memory_order_relaxed);
    atomic_store_explicit(&pool.claim, ((uint64_t)generation << 32) | (uint64_t)tasks, memory_order_release);
    atomic_store(&pool.generation, generation);
    if (atomic_load(&pool.sleepers) > 0) futex_wake(&pool.generation, tasks - 1);
    bool unused = false;
    int ran = claim_tasks(generation, 0, false, &unused);
    uint32_t done = atomic_load_explicit(&pool.finished, memory_order_acquire);
    if (done != (uint32_t)tasks) {
        /* Only tasks a worker started are left: spin while they could still be running on a core
         * of their own (a few times a task's time), then sleep until the last one ends, giving
         * this core to a worker queued behind another process. Spinning the whole budget
         * instead held the core such a worker needed: a 20 us MLP's runs took 0.2-0.5 ms one
         * time in twenty under a competing process (Xeon, 2 cores). */
        int64_t task_ns = atomic_load_explicit(&pool.task_ns, memory_order_relaxed);
        int64_t budget = task_ns > 0 && 4 * task_ns + 20000 < pool.spin_ns ? 4 * task_ns + 20000 : pool.spin_ns;
        while (done != (uint32_t)tasks && spin_until_changed(&pool.finished, done, budget, false))
            done = atomic_load_explicit(&pool.finished, memory_order_acquire);
        if (done != (uint32_t)tasks) {
            atomic_store(&pool.caller_asleep, 1);
            while ((done = atomic_load(&pool.finished)) != (uint32_t)tasks) futex_wait(&pool.finished, done);
            atomic_store(&pool.caller_asleep, 0);
        }
    }
    /* The region's one-thread time, roughly: the caller's share of the tasks took this long. */
    atomic_store_explicit(site, (now_ns() - start) * tasks / (ran > 0 ? ran : 1), memory_order_relaxed);
    atomic_store(&pool.busy, 0);
}

POOL_API int omp_get_thread_num(void) { return task_id; }
POOL_API int omp_get_num_threads(void) { return task_count; }

/* schedule(dynamic, chunk): every task of the region calls _start with the same bounds; the
 * first to arrive sets the loop up, and all take chunks from it. In an inline region each task
 * runs alone, so its first call takes the whole loop and the later tasks find it done. */
static bool next_chunk(pool_loop *loop, long *start, long *end) {
    long step = loop->chunk * loop->incr;
    long first = atomic_fetch_add_explicit(&loop->next, step, memory_order_relaxed);
    if (loop->incr > 0 ? first >= loop->end : first <= loop->end) return false;
    long last = first + step;
    if (loop->incr > 0 ? last > loop->end : last < loop->end) last = loop->end;
    *start = first;
    *end = last;
    return true;
}


POOL_API bool GOMP_loop_nonmonotonic_dynamic_start(long start, long end, long incr, long chunk, long *istart,
                                                   long *iend) {
    int index = loop_index++ % POOL_MAX_LOOPS;
    pool_loop *loop;
    if (in_region == 1) {
        atomic_store_explicit(&pool_site_shares_loop[pool.site_index], 1, memory_order_relaxed);
        loop = &pool.loops[index];
        int expected = 0;
        if (atomic_compare_exchange_strong(&loop->state, &expected, 1)) {
            atomic_store_explicit(&loop->next, start, memory_order_relaxed);
            loop->end = end;
            loop->incr = incr;
            loop->chunk = chunk > 0 ? chunk : 1;
            atomic_store_explicit(&loop->state, 2, memory_order_release);
        } else {
            while (atomic_load_explicit(&loop->state, memory_order_acquire) != 2) cpu_relax();
        }
    } else {
        /* outside the pool (inline or no region): task 0 takes the loop, the others nothing */
        loop = &inline_loops[index];
        atomic_store_explicit(&loop->next, task_id == 0 ? start : end, memory_order_relaxed);
        loop->end = end;
        loop->incr = incr;
        loop->chunk = chunk > 0 ? chunk : 1;
        if (task_id == 0) loop->chunk = (end - start) / (incr ? incr : 1) + 1;
    }
    current_loop = loop;
    return next_chunk(loop, istart, iend);
}

POOL_API bool GOMP_loop_nonmonotonic_dynamic_next(long *istart, long *iend) {
    return next_chunk(current_loop, istart, iend);
}

POOL_API bool GOMP_loop_dynamic_start(long start, long end, long incr, long chunk, long *istart, long *iend) {
    return GOMP_loop_nonmonotonic_dynamic_start(start, end, incr, chunk, istart, iend);
}

POOL_API bool GOMP_loop_dynamic_next(long *istart, long *iend) { return next_chunk(current_loop, istart, iend); }

POOL_API void GOMP_loop_end_nowait(void) {}
