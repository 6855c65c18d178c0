/* The owner lock: one scheduler per model (the lock_key lock, then the channel's own) in the
 * 0700 sock_dir (and a fresh one for tests and tools), how a
 * successor waits for its predecessor, and how a scheduler stops or hands over. */
#define _GNU_SOURCE
#include "ipc/channel_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int srt_chan_sock_dir_make(char *dir, size_t cap, srt_err *err)
{
    const char *tmp = getenv("TMPDIR");
    /* "/srt-chan-XXXXXX" + the names in it must fit sun_path: a long $TMPDIR gives way to /tmp */
    if (tmp == NULL || tmp[0] != '/' || strlen(tmp) + 17 >= SRT_CHAN_SOCK_DIR_MAX)
        tmp = "/tmp";
    if (cap < SRT_CHAN_SOCK_DIR_MAX)
        return srt_err_set(err, "channel: sock_dir buffer of %zu bytes, %d needed", cap,
                           SRT_CHAN_SOCK_DIR_MAX);
    snprintf(dir, cap, "%s/srt-chan-XXXXXX", tmp);
    if (mkdtemp(dir) == NULL)   /* mode 0700, a new name: nobody else's */
        return srt_err_set(err, "channel: cannot make a directory like \"%s\": %s", dir,
                           strerror(errno));
    return SRT_OK;
}

/* unlinks the files in dir whose names start with a or b (NULL: none; "": every file) */
static void unlink_prefixed(const char *dir, const char *a, const char *b)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (n[0] != '.' && ((a && strncmp(n, a, strlen(a)) == 0) || (b && strncmp(n, b, strlen(b)) == 0)))
            (void)unlinkat(dirfd(d), n, 0);
    }
    closedir(d);
}

void srt_chan_sock_dir_remove(const char *dir)
{
    unlink_prefixed(dir, "", NULL);
    (void)rmdir(dir);
}

/* 1 when process pid is gone (or is gone_pid): no such process, or a zombie (an nginx killed
 * with -9 leaves its children to a PID 1 that may not reap them soon) */
static int named_pid_gone(long pid, int gone_pid)
{
    char path[32], buf[256];
    if (pid <= 0 || pid > INT32_MAX)
        return 0;
    if (pid == gone_pid || pid_gone((pid_t)pid))
        return 1;
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *st = strrchr(buf, ')');   /* "pid (comm) S ...": comm may hold ')' */
    return st != NULL && st[1] == ' ' && (st[2] == 'Z' || st[2] == 'X');
}

/* unlinks name (and also_name, if any) in dir if nobody holds name's flock */
static void unlink_unlocked(int dfd, const char *name, const char *also_name)
{
    int fd = openat(dfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        if (also_name)
            (void)unlinkat(dfd, also_name, 0);
        (void)unlinkat(dfd, name, 0);
    }
    close(fd);
}

void srt_chan_sock_dir_sweep(const char *dir, int gone_pid)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        size_t len = strlen(n);
        char *end;
        if (strncmp(n, "lock-", 5) == 0) {
            long pid = strtol(n + 5, &end, 10);
            if (end != n + 5 && *end == '-' && named_pid_gone(pid, gone_pid))
                unlink_unlocked(dirfd(d), n, NULL);
            continue;
        }
        if (len < 18 || n[16] != '-' || strspn(n, "0123456789abcdef") != 16)
            continue;
        if (strcmp(n + 16, "-sched.lock") == 0) {
            char sock[32];
            snprintf(sock, sizeof(sock), "%.16s-sched", n);
            unlink_unlocked(dirfd(d), n, sock);
        } else if (n[17] == 'w') {
            long pid = strtol(n + 18, &end, 10);
            if (end != n + 18 && *end == '\0' && named_pid_gone(pid, 0))
                (void)unlinkat(dirfd(d), n, 0);
        }
    }
    closedir(d);
}

void srt_chan_sock_dir_forget(const char *dir, uint64_t chan_id, int key_pid)
{
    char id[24], key[32];
    snprintf(id, sizeof(id), "%016llx-", (unsigned long long)chan_id);
    snprintf(key, sizeof(key), "lock-%d-", key_pid);
    unlink_prefixed(dir, id, key_pid > 0 ? key : NULL);
}

void srt_chan_sched_set_lock_key(srt_chan *c, const char *key)
{
    snprintf(c->lock_key, sizeof(c->lock_key), "%.80s", key ? key : "");
}

/* Locks are flock()s on files in sock_dir: the kernel drops one with its
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

/* The key lock (srt_chan_sched_set_lock_key) is a file lock in sock_dir. */
static int key_lock(srt_chan *c, srt_err *err)
{
    char name[128];
    snprintf(name, sizeof(name), "lock-%s", c->lock_key);
    return file_lock(c, name, &c->lock_fd, err);
}

int srt_chan_sched_open(srt_chan *c, srt_err *err)
{
    if (c->lock_key[0] && c->lock_fd < 0 && key_lock(c, err) != SRT_OK)
        return SRT_ERROR;
    /* a file doorbell outlives its process: the channel's own lock says who owns it */
    if (c->sched_lock_fd < 0) {
        char name[64];
        snprintf(name, sizeof(name), "%016llx-sched.lock", (unsigned long long)c->h->chan_id);
        if (file_lock(c, name, &c->sched_lock_fd, err) != SRT_OK)
            return SRT_ERROR;
    }
    /* the lock is ours, so is the name: a file left by a dead predecessor goes first */
    if (c->stop)
        return srt_err_set(err, "channel: stop requested before the scheduler started");
    c->sched_fd = bell_bind(c->h, 0);
    if (c->sched_fd < 0)
        return srt_err_set(err, "channel: scheduler doorbell in \"%s\": %s", c->h->sock_dir,
                           strerror(errno));
    c->self = getpid();
    atomic_store(&c->h->sched_pid, c->self);
    c->spin_us = c->h->cfg.sched_spin_us > 0 ? (uint32_t)c->h->cfg.sched_spin_us : 0;
    clock_gettime(CLOCK_MONOTONIC, &c->last_reclaim);
    srt_chan_sched_reclaim(c); /* what a dead predecessor left running */
    return SRT_OK;
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
