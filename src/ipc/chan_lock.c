/* The owner lock: one scheduler per model (the lock_key lock, then the channel's own), how a
 * successor waits for its predecessor, and how a scheduler stops or hands over. */
#define _GNU_SOURCE
#include "ipc/channel_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>

static int pidfd_wait_exit(pid_t pid, srt_chan *c)
{
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    struct pollfd p;
    if (fd < 0)
        return -1;
    p.fd = fd;
    p.events = POLLIN;
    while (!c->stop) {
        int r = poll(&p, 1, -1);
        if (r > 0)
            break;
        if (r < 0 && errno != EINTR)
            break;
    }
    close(fd);
    return 0;
}

void srt_chan_sched_set_lock_key(srt_chan *c, const char *key)
{
    snprintf(c->lock_key, sizeof(c->lock_key), "%.80s", key ? key : "");
}

/* With a sock_dir, locks are flock()s on files there: the kernel drops one with its
 * process, a waiter blocks in flock() until then, and a stop signal (no SA_RESTART)
 * interrupts the wait. Names come from the caller: '/' becomes '_'. */
static int file_lock(srt_chan *c, const char *name, int *out, srt_err *err)
{
    char path[SRT_CHAN_SOCK_DIR_MAX + 128];
    size_t d = strlen(c->h->sock_dir);
    int fd;

    snprintf(path, sizeof(path), "%s/%s", c->h->sock_dir, name);
    for (char *q = path + d + 1; *q; q++)
        if (*q == '/')
            *q = '_';
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return srt_err_set(err, "channel: lock file \"%s\": %s", path, strerror(errno));
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR || c->stop) {
            int e = errno;
            close(fd);
            return srt_err_set(err, "channel: lock file \"%s\": %s", path,
                               e == EINTR ? "stop requested while waiting for it" : strerror(e));
        }
    }
    *out = fd;
    return SRT_OK;
}

/* Without a sock_dir, the key lock is a listening abstract stream socket: only one process
 * can bind the name, the kernel drops it with its process, and a waiter learns the holder's
 * pid by connecting (SO_PEERCRED), then waits on the holder's pidfd. */
static int key_lock(srt_chan *c, srt_err *err)
{
    struct sockaddr_un a;
    socklen_t len;
    int n;

    if (c->h->sock_dir[0]) {
        char name[128];
        snprintf(name, sizeof(name), "lock-%s", c->lock_key);
        return file_lock(c, name, &c->lock_fd, err);
    }

    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "srt-lock-%s", c->lock_key);
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);

    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return srt_err_set(err, "channel: lock socket: %s", strerror(errno));
        /* waiters connect (never accepted) to learn our pid: room for many of them */
        if (bind(fd, (struct sockaddr *)&a, len) == 0 && listen(fd, SOMAXCONN) == 0) {
            c->lock_fd = fd;
            return SRT_OK;
        }
        if (errno != EADDRINUSE) {
            int e = errno;
            close(fd);
            return srt_err_set(err, "channel: lock \"%s\": %s", c->lock_key, strerror(e));
        }
        close(fd);
        if (c->stop)
            return srt_err_set(err, "channel: stop requested while waiting for the model lock");
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, len) == 0) {
            struct ucred cred;
            socklen_t cl = sizeof(cred);
            pid_t holder = 0;
            if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
                holder = cred.pid;
            close(fd);
            if (holder > 0 && holder != getpid() && pidfd_wait_exit(holder, c) == 0)
                continue;
        } else if (fd >= 0) {
            close(fd);
        }
        {
            struct timespec ts = { 0, 50 * 1000 * 1000 };
            nanosleep(&ts, NULL); /* holder between bind() and listen(), or just gone */
        }
    }
}

int srt_chan_sched_open(srt_chan *c, srt_err *err)
{
    if (c->lock_key[0] && c->lock_fd < 0 && key_lock(c, err) != SRT_OK)
        return SRT_ERROR;
    /* a file doorbell outlives its process: the channel's own lock says who owns it */
    if (c->h->sock_dir[0] && c->sched_lock_fd < 0) {
        char name[64];
        snprintf(name, sizeof(name), "%016llx-sched.lock", (unsigned long long)c->h->chan_id);
        if (file_lock(c, name, &c->sched_lock_fd, err) != SRT_OK)
            return SRT_ERROR;
    }
    for (;;) {
        pid_t owner;
        int fd;
        if (c->stop)
            return srt_err_set(err, "channel: stop requested before the scheduler started");
        fd = bell_bind(c->h, 0);
        if (fd >= 0) {
            c->sched_fd = fd;
            c->self = getpid();
            atomic_store(&c->h->sched_pid, c->self);
            c->spin_us = c->h->cfg.sched_spin_us > 0 ? (uint32_t)c->h->cfg.sched_spin_us : 0;
            clock_gettime(CLOCK_MONOTONIC, &c->last_reclaim);
            srt_chan_sched_reclaim(c); /* what a dead predecessor left running */
            return SRT_OK;
        }
        if (errno != EADDRINUSE)
            return srt_err_set(err, "channel: scheduler doorbell: %s", strerror(errno));
        /* Another scheduler (the one before a reload) still owns the model: wait for it. */
        owner = atomic_load(&c->h->sched_pid);
        if (owner <= 0 || owner == getpid() || pidfd_wait_exit(owner, c) != 0) {
            struct timespec ts = { 0, 50 * 1000 * 1000 };
            nanosleep(&ts, NULL); /* owner bound but not yet published its pid */
        }
    }
}

void srt_chan_sched_close(srt_chan *c)
{
    if (c->sched_fd < 0)
        return;
    srt_chan_sched_flush(c);
    /* HANDOVER keeps accepting requests for a successor; on a quit, or a reload that gave
     * the model a new channel, none will come and they would wait forever */
    if (c->stop == 1 && atomic_load(&c->h->generation) != c->generation)
        srt_chan_sched_set_state(c, SRT_CHAN_SCHED_HANDOVER, "scheduler restarting", NULL);
    else if (atomic_load(&c->h->sched_state) != SRT_CHAN_SCHED_FAILED)
        /* a load failure keeps its reason (503 bodies, /health) until the next attempt */
        srt_chan_sched_set_state(c, SRT_CHAN_SCHED_DOWN, "scheduler stopped", NULL);
    {
        int32_t me = getpid();
        atomic_compare_exchange_strong(&c->h->sched_pid, &me, 0);
    }
    close(c->sched_fd);
    c->sched_fd = -1;
    if (c->lock_fd >= 0) {
        close(c->lock_fd);
        c->lock_fd = -1;
    }
    if (c->sched_lock_fd >= 0) {
        close(c->sched_lock_fd);
        c->sched_lock_fd = -1;
    }
}

uint32_t srt_chan_adopt(srt_chan *c)
{
    return atomic_fetch_add(&c->h->generation, 1) + 1;
}

void srt_chan_sched_set_generation(srt_chan *c, uint32_t generation)
{
    c->generation = generation;
}

int srt_chan_sched_stopping(const srt_chan *c) { return (int)c->stop; }

void srt_chan_sched_request_stop(srt_chan *c, int how)
{
    if (how > c->stop)
        c->stop = how;
    atomic_fetch_add(&c->h->sched_events, 1);   /* lock-free: fine in a signal handler */
    if (c->sched_fd >= 0)
        bell_send(c->h, -1, 0);   /* from a signal handler: no shared socket */
}
