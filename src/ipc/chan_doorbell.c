/* Doorbells: a datagram socket per process, rung when the other side has something for it;
 * the scheduler's wait (a bounded spin, then poll) and the rings it owes the workers. */
#define _GNU_SOURCE
#include "ipc/channel_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

/* A doorbell is a datagram socket named after the channel and its process (0: the
 * scheduler): a file in sock_dir, where only the directory's owner can create one. */
socklen_t bell_addr(const chan_header *h, struct sockaddr_un *a, pid_t pid)
{
    int n;
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    if (pid > 0)
        n = snprintf(a->sun_path, sizeof(a->sun_path), "%s/%016llx-w%d", h->sock_dir,
                     (unsigned long long)h->chan_id, (int)pid);
    else
        n = snprintf(a->sun_path, sizeof(a->sun_path), "%s/%016llx-sched", h->sock_dir,
                     (unsigned long long)h->chan_id);
    if (n < 0 || (size_t)n >= sizeof(a->sun_path))
        n = (int)sizeof(a->sun_path) - 1;   /* cannot happen: sock_dir is bounded */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
}

/* The caller owns the name (a worker its pid; a scheduler holds the channel's lock): a
 * file left by a dead process of the same name is removed first. */
int bell_bind(const chan_header *h, pid_t pid)
{
    struct sockaddr_un a;
    socklen_t len = bell_addr(h, &a, pid);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    (void)unlink(a.sun_path);
    if (bind(fd, (struct sockaddr *)&a, len) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Ring a doorbell through send_fd (an unbound datagram socket; -1 = use a fresh one, as a
 * signal handler must). A full socket buffer means it is already rung, a missing one means
 * the process is gone: both are fine. */
void bell_send(const chan_header *h, int send_fd, pid_t pid)
{
    struct sockaddr_un a;
    socklen_t len = bell_addr(h, &a, pid);
    int fd = send_fd >= 0 ? send_fd : socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    char b = 1;
    if (fd < 0)
        return;
    if (sendto(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, len) < 0) {
        /* nothing to do: see above */
    }
    if (fd != send_fd)
        close(fd);
}

/* Ring from a channel handle: one sendto() on a socket kept for the purpose. */
void bell_ring_c(srt_chan *c, pid_t pid)
{
    if (c->send_fd < 0)
        c->send_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    bell_send(c->h, c->send_fd, pid);
}

/* Empties a doorbell socket; one syscall in the usual case of a few pending rings. */
void bell_drain(int fd)
{
    enum { BATCH = 16 };
    char buf[BATCH];
    struct iovec iov[BATCH];
    struct mmsghdr msgs[BATCH];
    int i, n;
    if (fd < 0)
        return;
    memset(msgs, 0, sizeof(msgs));
    for (i = 0; i < BATCH; i++) {
        iov[i].iov_base = &buf[i];
        iov[i].iov_len = 1;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    do
        n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
    while (n == BATCH || (n < 0 && errno == EINTR));
}

/* Something for the scheduler to look at. always_ring: callers off the hot path (aborts,
 * admin) ring regardless, so that only the submit path depends on the Dekker pairing. */
void sched_notify(srt_chan *c, int always_ring)
{
    atomic_fetch_add(&c->h->sched_events, 1);           /* seq_cst: ordered before the load */
    if (always_ring || atomic_load(&c->h->sched_sleeping))
        bell_ring_c(c, 0);
}

void note_pending(srt_chan *c, pid_t pid)
{
    int i;
    if (pid <= 0)
        return;
    for (i = 0; i < c->n_pending; i++)
        if (c->pending[i] == pid)
            return;
    if (c->n_pending < PENDING_MAX)
        c->pending[c->n_pending++] = pid;
    else
        c->pending_overflow = 1;
}

void srt_chan_sched_flush(srt_chan *c)
{
    int i;
    atomic_store_explicit(&c->h->heartbeat_ns, srt_chan_now_ns(), memory_order_relaxed);
    if (c->pending_overflow) {
        /* More distinct owners than we track: ring every owner of a live slot. */
        uint32_t k;
        c->n_pending = 0;
        c->pending_overflow = 0;
        for (k = 0; k < c->h->n_slots; k++) {
            chan_slot *s = slot_at(c, k);
            if ((atomic_load(&s->state) & ST_MASK) >= ST_QUEUED)
                bell_ring_c(c, atomic_load(&s->owner));
        }
        return;
    }
    for (i = 0; i < c->n_pending; i++)
        bell_ring_c(c, c->pending[i]);
    c->n_pending = 0;
}

int srt_chan_sched_fd(const srt_chan *c) { return c->sched_fd; }

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int sched_has_news(srt_chan *c)
{
    return atomic_load(&c->h->sched_events) != c->seen_events
           || atomic_load(&c->h->queued) > 0 || c->stop;
}

/* A bounded busy-wait (srt_scheduler_spin): a request that arrives within it is picked up
 * without the submitter's doorbell syscall and without the wake-up of an idle CPU. */
static int sched_spin(srt_chan *c)
{
    struct timespec t0, t;
    long spent_ns;
    unsigned i;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        for (i = 0; i < 64; i++) {
            if (sched_has_news(c))
                return 1;
            cpu_relax();
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        spent_ns = (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec);
        if (spent_ns >= (long)c->spin_us * 1000L)
            return 0;
    }
}

int srt_chan_sched_wait(srt_chan *c, int timeout_ms)
{
    struct pollfd p;
    struct timespec now;
    int r;

    srt_chan_sched_flush(c);
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > c->last_reclaim.tv_sec) {
        c->last_reclaim = now;
        srt_chan_sched_reclaim(c);
    }
    if (c->stop)
        return 1;
    if (c->sched_fd < 0)
        return SRT_ERROR;
    if (timeout_ms != 0) {
        if (sched_has_news(c) || (c->spin_us > 0 && sched_spin(c))) {
            timeout_ms = 0;
        } else {
            /* Dekker with sched_notify(): either the notifier sees sleeping and rings,
             * or this load sees its event and we do not block. */
            atomic_store(&c->h->sched_sleeping, 1);
            if (sched_has_news(c))
                timeout_ms = 0;
        }
    }
    if (timeout_ms < 0 || timeout_ms > 1000)
        timeout_ms = 1000; /* wake at least once a second to reclaim dead workers' slots */
    p.fd = c->sched_fd;
    p.events = POLLIN;
    r = poll(&p, 1, timeout_ms);
    atomic_store(&c->h->sched_sleeping, 0);
    if (r < 0)
        return errno == EINTR ? 1 : SRT_ERROR;
    if (r > 0)
        bell_drain(c->sched_fd);
    r = sched_has_news(c) || r > 0;
    c->seen_events = atomic_load(&c->h->sched_events);
    return r;
}

int srt_chan_worker_open(srt_chan *c, srt_err *err)
{
    int i;
    if (c->worker_fd >= 0)
        return c->worker_fd;
    c->self = getpid();
    c->worker_fd = bell_bind(c->h, c->self);
    if (c->worker_fd < 0)
        return srt_err_set(err, "channel: worker doorbell: %s", strerror(errno));
    /* entries of dead processes freed first, with their doorbell files: a worker killed with
     * -9 never detaches, and its file stayed in sock_dir (until its pid came round again) */
    for (i = 0; i < SRT_CHAN_MAX_WORKERS; i++) {
        int32_t old = atomic_load(&c->h->workers[i]);
        if (old > 0 && old != (int32_t)c->self && pid_gone(old)
            && atomic_compare_exchange_strong(&c->h->workers[i], &old, 0)) {
            struct sockaddr_un a;
            (void)bell_addr(c->h, &a, old);
            (void)unlink(a.sun_path);
        }
    }
    /* register for state-change rings: a free entry (dead ones were freed just above) */
    for (i = 0; i < SRT_CHAN_MAX_WORKERS; i++) {
        int32_t old = atomic_load(&c->h->workers[i]);
        if (old == 0 && atomic_compare_exchange_strong(&c->h->workers[i], &old, getpid()))
            break;
    }
    return c->worker_fd;
}

void srt_chan_worker_drain(srt_chan *c) { bell_drain(c->worker_fd); }
