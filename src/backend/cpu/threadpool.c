/* Persistent worker threads. A run publishes (fn, arg) and bumps a generation counter;
 * workers spin on it briefly, then sleep on a futex, so back-to-back kernels in a decode
 * step cost no syscalls while an idle pool costs no CPU. The caller runs slice 0.
 *
 * Two kinds of run. srt_threadpool_run hands every thread its slice and waits for all of
 * them. srt_threadpool_run_items lets the threads claim items (thread t items t, t + nth, ...
 * from a counter of its own, then the others' leftovers from theirs: a decode region's ~40
 * claims then stay in each thread's own cache line instead of bouncing one line between the
 * cores) and closes the job once every item is claimed: a worker that has not entered it by then
 * (descheduled on a busy host, still waking from its futex) never does, and the caller
 * waits only for workers inside it. On a host with more runnable threads than cores a
 * decode step's ~250 kernels then do not each wait for the OS to run every worker.
 *
 * Entering a job (worker): active++, then re-read gen (a newer job: leave and take that
 * one) and closed (this job closed: leave without touching fn/arg). Closing (caller):
 * closed = gen, then wait for active == 0. Both sides are seq_cst, so either the caller
 * sees the worker's active++ and waits for it, or the worker sees closed and leaves. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/cpu_kernels.h"

#define MAX_THREADS 512

/* the next k of one thread's items, alone in its cache line */
struct item_queue {
    _Alignas(64) _Atomic int64_t k;
};

struct srt_threadpool {
    int n_threads;
    int n_started;                        /* workers actually created (slices 1..n_started) */
    pthread_t *threads;

    void (*fn)(void *arg, int ith, int nth);
    void *arg;

    _Alignas(64) _Atomic uint32_t gen;    /* bumped once per run; futex word for workers */
    _Atomic int  sleepers;                /* workers in futex_wait on gen */
    _Atomic int  stop;
    _Alignas(64) _Atomic uint32_t pending; /* workers still running this generation */
    _Atomic int  caller_sleeping;
    long spin_ns;

    /* items mode (srt_threadpool_run_items) */
    int items;                            /* the current job is an items job */
    void (*item_fn)(void *arg, int64_t item, int ith);
    int64_t n_items;
    struct item_queue *queue;             /* n_threads: thread t's items t + k * n_threads */
    _Alignas(64) _Atomic uint32_t active; /* workers inside the current job; futex word */
    _Atomic uint32_t closed;              /* gen of the last closed items job */
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static inline long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Spins until *word != seen or the spin budget runs out; returns 1 if it changed. After a
 * short pure spin it yields between checks, so a pool sharing cores with other work (an
 * oversubscribed host) hands the CPU to the thread it is waiting for. */
#define PURE_SPIN_NS 20000L

static int spin_until_changed(_Atomic uint32_t *word, uint32_t seen, long spin_ns)
{
    long start = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != seen)
            return 1;
        cpu_relax();
        if ((i & 255) == 0) {
            long t = now_ns();
            if (start == 0)
                start = t;
            else if (t - start >= spin_ns)
                return 0;
            else if (t - start >= PURE_SPIN_NS)
                sched_yield();
        }
    }
}

/* The pool whose task this thread is running, so a task that itself calls
 * srt_threadpool_run (a kernel inside a kernel) runs it inline instead of deadlocking. */
static _Thread_local srt_threadpool *running_in;

typedef struct { srt_threadpool *tp; int ith; } worker_arg;

static void leave(srt_threadpool *tp)
{
    if (atomic_fetch_sub(&tp->active, 1) == 1 && atomic_load(&tp->caller_sleeping))
        futex(&tp->active, FUTEX_WAKE_PRIVATE, 1);
}

/* this thread's own items, then every other thread's still unclaimed ones (a thread the OS
 * has not run yet leaves all of its own) */
static void claim_items(srt_threadpool *tp, int ith)
{
    int nth = tp->n_threads;
    for (int s = 0; s < nth; s++) {
        int u = (ith + s) % nth;
        for (;;) {
            int64_t i = u + atomic_fetch_add_explicit(&tp->queue[u].k, 1, memory_order_relaxed) * nth;
            if (i >= tp->n_items)
                break;
            tp->item_fn(tp->arg, i, ith);
        }
    }
}

static void *worker_main(void *p)
{
    srt_threadpool *tp = ((worker_arg *)p)->tp;
    int ith = ((worker_arg *)p)->ith;
    free(p);
    char name[16];
    snprintf(name, sizeof(name), "srt-cpu-%d", ith);
    pthread_setname_np(pthread_self(), name);
    running_in = tp;
    uint32_t seen = 0;
    for (;;) {
        if (!spin_until_changed(&tp->gen, seen, tp->spin_ns)) {
            atomic_fetch_add(&tp->sleepers, 1);
            while (atomic_load(&tp->gen) == seen)
                futex(&tp->gen, FUTEX_WAIT_PRIVATE, seen);
            atomic_fetch_sub(&tp->sleepers, 1);
        }
        seen = atomic_load_explicit(&tp->gen, memory_order_acquire);
        if (atomic_load(&tp->stop))
            return NULL;
        atomic_fetch_add(&tp->active, 1);
        if (atomic_load(&tp->gen) != seen || atomic_load(&tp->closed) == seen) {
            /* a newer job was published (the next turn takes it at once: gen != seen) or
             * this items job is closed: fn/arg may no longer be this job's */
            leave(tp);
            continue;
        }
        if (tp->items) {
            claim_items(tp, ith);
        } else {
            tp->fn(tp->arg, ith, tp->n_threads);
            if (atomic_fetch_sub(&tp->pending, 1) == 1 &&
                atomic_load(&tp->caller_sleeping))
                futex(&tp->pending, FUTEX_WAKE_PRIVATE, 1);
        }
        leave(tp);
    }
}

srt_threadpool *srt_threadpool_create(int n_threads)
{
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > MAX_THREADS)
        n_threads = MAX_THREADS;
    srt_threadpool *tp = aligned_alloc(64, (sizeof(*tp) + 63) / 64 * 64);
    if (!tp)
        return NULL;
    *tp = (srt_threadpool){ .n_threads = n_threads };
    const char *spin = getenv("SRT_SPIN_US");
    tp->spin_ns = (spin ? atol(spin) : 500) * 1000L;
    if (n_threads > 1) {
        tp->threads = calloc((size_t)n_threads, sizeof(pthread_t));
        tp->queue = aligned_alloc(64, (size_t)n_threads * sizeof *tp->queue);
        if (!tp->threads || !tp->queue) {
            free(tp->threads);
            free(tp->queue);
            free(tp);
            return NULL;
        }
    }
    /* Workers block every signal: the host process (an nginx helper) handles its signals
     * on its own thread, never on a kernel worker. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof(*wa));
        if (!wa)
            break;
        *wa = (worker_arg){ tp, i };
        if (pthread_create(&tp->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            break;
        }
        tp->n_started = i;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (tp->n_started != n_threads - 1) {
        /* Could not start every worker: run with what we have rather than fail. */
        tp->n_threads = tp->n_started + 1;
    }
    return tp;
}

void srt_threadpool_free(srt_threadpool *tp)
{
    if (!tp)
        return;
    atomic_store(&tp->stop, 1);
    atomic_fetch_add(&tp->gen, 1);
    futex(&tp->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
    for (int i = 1; i <= tp->n_started; i++)
        pthread_join(tp->threads[i], NULL);
    free(tp->threads);
    free(tp->queue);
    free(tp);
}

int srt_threadpool_size(const srt_threadpool *tp)
{
    return tp ? tp->n_threads : 1;
}

void srt_threadpool_run(srt_threadpool *tp, void (*fn)(void *arg, int ith, int nth), void *arg)
{
    if (!tp || tp->n_threads == 1 || running_in == tp) {
        fn(arg, 0, 1);
        return;
    }
    tp->items = 0;
    tp->fn = fn;
    tp->arg = arg;
    /* closed names a finished job, never this one, also after gen wraps around */
    atomic_store(&tp->closed, atomic_load_explicit(&tp->gen, memory_order_relaxed));
    atomic_store_explicit(&tp->pending, (uint32_t)(tp->n_threads - 1), memory_order_relaxed);
    atomic_fetch_add(&tp->gen, 1);                 /* seq_cst: pairs with sleepers below */
    if (atomic_load(&tp->sleepers) > 0)
        futex(&tp->gen, FUTEX_WAKE_PRIVATE, INT_MAX);

    running_in = tp;
    fn(arg, 0, tp->n_threads);
    running_in = NULL;

    for (;;) {
        uint32_t left = atomic_load_explicit(&tp->pending, memory_order_acquire);
        if (left == 0)
            return;
        /* Re-spin on every change; sleep only when no worker finishes for a while. */
        if (spin_until_changed(&tp->pending, left, tp->spin_ns))
            continue;
        atomic_store(&tp->caller_sleeping, 1);     /* seq_cst: pairs with the worker's check */
        left = atomic_load(&tp->pending);
        if (left != 0)
            futex(&tp->pending, FUTEX_WAIT_PRIVATE, left);
        atomic_store(&tp->caller_sleeping, 0);
    }
}

/* Waits until *word == 0: spins (re-spinning on every change), then sleeps on the futex. */
static void wait_zero(srt_threadpool *tp, _Atomic uint32_t *word)
{
    for (;;) {
        uint32_t left = atomic_load_explicit(word, memory_order_acquire);
        if (left == 0)
            return;
        if (spin_until_changed(word, left, tp->spin_ns))
            continue;
        atomic_store(&tp->caller_sleeping, 1);     /* seq_cst: pairs with the worker's check */
        left = atomic_load(word);
        if (left != 0)
            futex(word, FUTEX_WAIT_PRIVATE, left);
        atomic_store(&tp->caller_sleeping, 0);
    }
}

void srt_threadpool_run_items(srt_threadpool *tp, void (*fn)(void *arg, int64_t item, int ith), void *arg,
                              int64_t n_items)
{
    if (!tp || tp->n_threads == 1 || running_in == tp || n_items <= 1) {
        for (int64_t i = 0; i < n_items; i++)
            fn(arg, i, 0);
        return;
    }
    tp->items = 1;
    tp->item_fn = fn;
    tp->arg = arg;
    tp->n_items = n_items;
    for (int t = 0; t < tp->n_threads; t++)
        atomic_store_explicit(&tp->queue[t].k, 0, memory_order_relaxed);
    uint32_t g = atomic_fetch_add(&tp->gen, 1) + 1;   /* seq_cst: publishes the fields above */
    if (atomic_load(&tp->sleepers) > 0)
        futex(&tp->gen, FUTEX_WAKE_PRIVATE, INT_MAX);

    running_in = tp;
    claim_items(tp, 0);
    running_in = NULL;

    atomic_store(&tp->closed, g);                      /* seq_cst: pairs with the workers' entry */
    wait_zero(tp, &tp->active);
}
