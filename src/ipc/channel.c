/* The worker <-> scheduler channel: layout, slot state machine, doorbells. See channel.h. */
#define _GNU_SOURCE
#include "ipc/channel.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CHAN_MAGIC   0x314e414843545253ULL   /* "SRTCHAN1" */
#define CHAN_VERSION 4u

/* Slot state word: low byte is the state, ABORTED is a flag the worker sets. */
enum {
    ST_FREE    = 0,
    ST_WRITING = 1,
    ST_QUEUED  = 2,
    ST_RUNNING = 3,
    ST_DONE    = 4,
};
#define ST_MASK    0xffu
#define ST_ABORTED 0x100u

typedef struct chan_header {
    uint64_t          magic;
    uint32_t          version;
    uint32_t          n_slots;
    uint64_t          size;
    uint64_t          chan_id;
    uint64_t          slots_off;
    uint64_t          slot_stride;
    uint32_t          slot_tokens;
    uint32_t          pad0;
    srt_chan_config   cfg;

    _Atomic uint32_t  sched_state;
    _Atomic int32_t   sched_pid;
    /* Doorbell suppression (Dekker): a notifier bumps sched_events and rings only when
     * sched_sleeping says the scheduler is, or is about to be, blocked in poll(). */
    _Atomic uint64_t  sched_events;
    _Atomic uint32_t  sched_sleeping;
    uint32_t          pad_ev;
    char              sched_msg[256];
    srt_chan_model_info info;

    _Atomic uint64_t  next_ticket;
    _Atomic uint64_t  next_group;
    _Atomic uint32_t  queued;
    _Atomic uint32_t  running;
    _Atomic uint32_t  used;
    uint32_t          pad1;
    _Atomic uint64_t  submitted;
    _Atomic uint64_t  completed;
    _Atomic uint64_t  aborted;
    _Atomic uint64_t  rejected_full;
    _Atomic int32_t   workers[SRT_CHAN_MAX_WORKERS];  /* doorbells to ring on state changes */
    _Atomic uint32_t  metrics_seq;                    /* seqlock: odd while being written */
    _Atomic uint32_t  metrics_len;
    char              metrics[SRT_CHAN_METRICS_MAX];
    _Atomic uint32_t  admin_state;                    /* AD_* | AD_CANCELLED */
    _Atomic int32_t   admin_owner;                    /* worker pid */
    _Atomic uint64_t  admin_ticket;
    uint32_t          admin_req_len;
    int32_t           admin_status;
    uint32_t          admin_resp_len;
    uint32_t          pad2;
    char              admin_req[SRT_CHAN_ADMIN_REQ_MAX];
    char              admin_resp[SRT_CHAN_ADMIN_RESP_MAX];
    /* Bumped by the master each time a configuration adopts this channel: a scheduler
     * stopping gracefully hands over only if a newer configuration will serve it. */
    _Atomic uint32_t  generation;
    uint32_t          pad3;
    char              sock_dir[SRT_CHAN_SOCK_DIR_MAX];   /* cfg.sock_dir at format time */
    /* CLOCK_MONOTONIC of the scheduler's last step or wake-up (at least once a second
     * while it lives): a stopped or wedged scheduler shows as a stale stamp. */
    _Atomic uint64_t  heartbeat_ns;
    _Atomic uint64_t  withdrawn;   /* aborted before a scheduler took them (also in aborted) */
} chan_header;

enum { AD_FREE = 0, AD_WRITING = 1, AD_POSTED = 2, AD_TAKEN = 3, AD_DONE = 4 };
#define AD_MASK      0xffu
#define AD_CANCELLED 0x100u

typedef struct chan_slot {
    _Atomic uint32_t  state;
    _Atomic uint32_t  gen;
    _Atomic int32_t   owner;     /* worker pid */
    _Atomic int32_t   runner;    /* scheduler pid that popped it */
    uint32_t          n_prompt;
    uint64_t          ticket;
    uint64_t          group;
    srt_request       rq;        /* the request contract (srt/request.h), as submitted */
    _Atomic uint32_t  n_out;
    uint32_t          finish;
    int32_t           stop_id;
    uint32_t          cached_tokens;
    uint32_t          top_n;
    uint32_t          pad;
    uint64_t          t_submit_ns;
    uint64_t          t_pop_ns;
    uint64_t          t_done_ns;
    char              errmsg[160];
    uint64_t          act_len;   /* bytes in the activation area, set before finish */
    /* then: int32 prompt[T], int32 out_ids[T], float out_lp[T],
     *       int32 top_ids[RING*MAXTOP], float top_lps[RING*MAXTOP],
     *       activation area[cfg.act_bytes] (srt_act_record + data, srt/request.h) */
} chan_slot;

#define PENDING_MAX 256

struct srt_chan {
    chan_header          *h;
    size_t                size;
    int                   sched_fd;
    int                   worker_fd;
    int                   send_fd;      /* for ringing others, made on first use */
    int                   lock_fd;      /* the lock_key lock, while owner */
    int                   sched_lock_fd;/* sock_dir: the channel's scheduler lock, while owner */
    pid_t                 self;         /* this process, once it opened its side (getpid() is a syscall) */
    uint64_t              seen_events;  /* scheduler: sched_events when it last looked */
    uint32_t              spin_us;      /* scheduler: busy-wait this long before blocking */
    char                  lock_key[96];
    volatile sig_atomic_t stop;
    uint32_t              generation;   /* scheduler: the configuration it serves */
    uint32_t              claim_hint;
    int                   n_pending;
    pid_t                 pending[PENDING_MAX];
    int                   pending_overflow;
    struct timespec       last_reclaim;
};

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

uint64_t srt_chan_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static size_t slot_stride_for(uint32_t T, uint64_t act_bytes)
{
    size_t n = align64(sizeof(chan_slot));
    n += align64((size_t)T * 4) * 3;
    n += align64((size_t)SRT_CHAN_TOP_RING * SRT_REQ_MAX_TOP_LOGPROBS * 4) * 2;
    n += align64((size_t)act_bytes);
    return n;
}

static chan_slot *slot_at(const srt_chan *c, uint32_t i)
{
    return (chan_slot *)((char *)c->h + c->h->slots_off + (size_t)i * c->h->slot_stride);
}

static int32_t *slot_prompt(const srt_chan *c, chan_slot *s)
{
    return (int32_t *)((char *)s + align64(sizeof(chan_slot)));
}

static int32_t *slot_out_ids(const srt_chan *c, chan_slot *s)
{
    return (int32_t *)((char *)slot_prompt(c, s) + align64((size_t)c->h->slot_tokens * 4));
}

static float *slot_out_lp(const srt_chan *c, chan_slot *s)
{
    return (float *)((char *)slot_out_ids(c, s) + align64((size_t)c->h->slot_tokens * 4));
}

static int32_t *slot_top_ids(const srt_chan *c, chan_slot *s)
{
    return (int32_t *)((char *)slot_out_lp(c, s) + align64((size_t)c->h->slot_tokens * 4));
}

static float *slot_top_lps(const srt_chan *c, chan_slot *s)
{
    return (float *)((char *)slot_top_ids(c, s)
                     + align64((size_t)SRT_CHAN_TOP_RING * SRT_REQ_MAX_TOP_LOGPROBS * 4));
}

static unsigned char *slot_act(const srt_chan *c, chan_slot *s)
{
    return (unsigned char *)slot_top_lps(c, s)
           + align64((size_t)SRT_CHAN_TOP_RING * SRT_REQ_MAX_TOP_LOGPROBS * 4);
}

/* ---- doorbells ---- */

/* A doorbell is a datagram socket named after the channel and its process (0: the
 * scheduler). With a sock_dir it is a file there (only the directory's owner can create
 * one); without, a name in the abstract namespace (tests and tools). */
static socklen_t bell_addr(const chan_header *h, struct sockaddr_un *a, pid_t pid)
{
    int n;
    char *p = a->sun_path;
    size_t cap = sizeof(a->sun_path);
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    if (h->sock_dir[0] == 0) {
        p++;            /* abstract: a leading NUL */
        cap--;
    }
    if (pid > 0)
        n = snprintf(p, cap, "%s%s%016llx-w%d", h->sock_dir, h->sock_dir[0] ? "/" : "srt-",
                     (unsigned long long)h->chan_id, (int)pid);
    else
        n = snprintf(p, cap, "%s%s%016llx-sched", h->sock_dir, h->sock_dir[0] ? "/" : "srt-",
                     (unsigned long long)h->chan_id);
    if (n < 0 || (size_t)n >= cap)
        n = (int)cap - 1;   /* cannot happen: sock_dir is bounded */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - a->sun_path) + (size_t)n
                       + (h->sock_dir[0] ? 1 : 0));
}

/* The caller owns the name (a worker its pid; a scheduler holds the channel's lock): a
 * file left by a dead process of the same name is removed first. */
static int bell_bind(const chan_header *h, pid_t pid)
{
    struct sockaddr_un a;
    socklen_t len = bell_addr(h, &a, pid);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (h->sock_dir[0])
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
static void bell_send(const chan_header *h, int send_fd, pid_t pid)
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
static void bell_ring_c(srt_chan *c, pid_t pid)
{
    if (c->send_fd < 0)
        c->send_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    bell_send(c->h, c->send_fd, pid);
}

/* Empties a doorbell socket; one syscall in the usual case of a few pending rings. */
static void bell_drain(int fd)
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

static pid_t self_pid(const srt_chan *c) { return c->self > 0 ? c->self : getpid(); }

/* Something for the scheduler to look at. always_ring: callers off the hot path (aborts,
 * admin) ring regardless, so that only the submit path depends on the Dekker pairing. */
static void sched_notify(srt_chan *c, int always_ring)
{
    atomic_fetch_add(&c->h->sched_events, 1);           /* seq_cst: ordered before the load */
    if (always_ring || atomic_load(&c->h->sched_sleeping))
        bell_ring_c(c, 0);
}

static void note_pending(srt_chan *c, pid_t pid)
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

static int pid_gone(pid_t pid);

/* ---- both sides ---- */

size_t srt_chan_size(const srt_chan_config *cfg)
{
    if (cfg->slots <= 0 || cfg->slot_tokens <= 0)
        return 0;
    return align64(sizeof(chan_header)) + (size_t)cfg->slots * slot_stride_for((uint32_t)cfg->slot_tokens,
                                                                           cfg->act_bytes);
}

int srt_chan_format(void *mem, size_t size, const srt_chan_config *cfg, srt_err *err)
{
    chan_header *h = mem;
    size_t need = srt_chan_size(cfg);
    uint64_t id = 0;

    if (need == 0 || cfg->slots > 1000000 || cfg->slot_tokens > (1 << 24) ||
        cfg->act_bytes > SRT_CHAN_ACT_MAX)
        return srt_err_set(err, "channel: bad geometry (slots %d, slot_tokens %d)",
                           (int)cfg->slots, (int)cfg->slot_tokens);
    if (mem == NULL || size < need)
        return srt_err_set(err, "channel: %zu bytes given, %zu needed", size, need);
    /* everything but the slots' activation areas, which are read only up to an act_len
     * written first: a large srt_max_activation_bytes costs memory only when used */
    memset(mem, 0, align64(sizeof(chan_header)));
    for (size_t i = 0; i < (size_t)cfg->slots; i++)
        memset((char *)mem + align64(sizeof(chan_header)) + i * slot_stride_for((uint32_t)cfg->slot_tokens,
                                                                                 cfg->act_bytes),
               0, slot_stride_for((uint32_t)cfg->slot_tokens, 0));
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
        id = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)mem;
    h->magic = CHAN_MAGIC;
    h->version = CHAN_VERSION;
    h->n_slots = (uint32_t)cfg->slots;
    h->size = need;
    h->chan_id = id;
    h->slots_off = align64(sizeof(chan_header));
    h->slot_stride = slot_stride_for((uint32_t)cfg->slot_tokens, cfg->act_bytes);
    h->slot_tokens = (uint32_t)cfg->slot_tokens;
    h->cfg = *cfg;
    h->cfg.model_path[SRT_CHAN_PATH_MAX - 1] = 0;
    h->cfg.served_name[SRT_CHAN_NAME_MAX - 1] = 0;
    h->cfg.hooks_path[SRT_CHAN_PATH_MAX - 1] = 0;
    h->cfg.chat_template[SRT_CHAN_PATH_MAX - 1] = 0;
    h->cfg.hooks_search[SRT_CHAN_PATH_MAX - 1] = 0;
    h->cfg.sock_dir[SRT_CHAN_SOCK_DIR_MAX - 1] = 0;
    memcpy(h->sock_dir, h->cfg.sock_dir, sizeof(h->sock_dir));
    atomic_store(&h->sched_state, SRT_CHAN_SCHED_NONE);
    atomic_store(&h->next_ticket, 1);
    atomic_store(&h->next_group, 1);
    return SRT_OK;
}

srt_chan *srt_chan_attach(void *mem, size_t size, srt_err *err)
{
    chan_header *h = mem;
    srt_chan *c;

    if (mem == NULL || size < sizeof(chan_header) || h->magic != CHAN_MAGIC
        || h->version != CHAN_VERSION) {
        srt_err_set(err, "channel: memory does not hold a channel");
        return NULL;
    }
    if (h->size > size || h->slots_off < sizeof(chan_header)
        || h->cfg.act_bytes > SRT_CHAN_ACT_MAX
        || h->slot_stride < slot_stride_for(h->slot_tokens, h->cfg.act_bytes)
        || h->slots_off + (uint64_t)h->n_slots * h->slot_stride > h->size) {
        srt_err_set(err, "channel: corrupt header");
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        srt_err_set(err, "channel: out of memory");
        return NULL;
    }
    c->h = h;
    c->size = size;
    c->sched_fd = -1;
    c->worker_fd = -1;
    c->send_fd = -1;
    c->lock_fd = -1;
    c->sched_lock_fd = -1;
    c->claim_hint = (uint32_t)getpid() * 2654435761u;
    return c;
}

void srt_chan_detach(srt_chan *c)
{
    if (c == NULL)
        return;
    if (c->sched_fd >= 0)
        srt_chan_sched_close(c);
    if (c->worker_fd >= 0) {
        close(c->worker_fd);
        if (c->h->sock_dir[0]) {
            struct sockaddr_un a;
            (void)bell_addr(c->h, &a, c->self);
            (void)unlink(a.sun_path);
        }
    }
    if (c->send_fd >= 0)
        close(c->send_fd);
    if (c->lock_fd >= 0)
        close(c->lock_fd);
    if (c->sched_lock_fd >= 0)
        close(c->sched_lock_fd);
    free(c);
}

const srt_chan_config *srt_chan_get_config(const srt_chan *c) { return &c->h->cfg; }

#define CFG_STORE(f) __atomic_store_n(&h->cfg.f, cfg->f, __ATOMIC_RELAXED)

/* A field appended to srt_chan_config must be stored below too. */
_Static_assert(offsetof(srt_chan_config, sock_dir) + SRT_CHAN_SOCK_DIR_MAX == sizeof(srt_chan_config),
               "srt_chan_reconfigure does not store every field of srt_chan_config");

int srt_chan_reconfigure(srt_chan *c, const srt_chan_config *cfg, srt_err *err)
{
    chan_header *h = c->h;
    if (cfg->slots != h->cfg.slots || cfg->slot_tokens != h->cfg.slot_tokens ||
        cfg->act_bytes != h->cfg.act_bytes)
        return srt_err_set(err, "channel: reconfigure: geometry changed (slots %d -> %d, slot_tokens %d -> %d, "
                           "activation bytes %llu -> %llu)", h->cfg.slots, cfg->slots, h->cfg.slot_tokens,
                           cfg->slot_tokens, (unsigned long long)h->cfg.act_bytes,
                           (unsigned long long)cfg->act_bytes);
    snprintf(h->cfg.model_path, sizeof h->cfg.model_path, "%s", cfg->model_path);
    snprintf(h->cfg.served_name, sizeof h->cfg.served_name, "%s", cfg->served_name);
    snprintf(h->cfg.hooks_path, sizeof h->cfg.hooks_path, "%s", cfg->hooks_path);
    snprintf(h->cfg.hooks_search, sizeof h->cfg.hooks_search, "%s", cfg->hooks_search);
    snprintf(h->cfg.chat_template, sizeof h->cfg.chat_template, "%s", cfg->chat_template);
    CFG_STORE(device);
    CFG_STORE(threads);
    CFG_STORE(context_length);
    CFG_STORE(max_running_requests);
    CFG_STORE(max_queued_requests);
    CFG_STORE(max_total_tokens);
    CFG_STORE(chunked_prefill_size);
    CFG_STORE(schedule_policy);
    CFG_STORE(tp_size);
    CFG_STORE(radix_cache);
    CFG_STORE(page_size);
    CFG_STORE(sched_spin_us);
    CFG_STORE(cuda_graph);
    CFG_STORE(numerics);
    CFG_STORE(kv_cache_dtype);
    snprintf(h->cfg.cvec_path, sizeof h->cfg.cvec_path, "%s", cfg->cvec_path);
    snprintf(h->cfg.cvec_name, sizeof h->cfg.cvec_name, "%s", cfg->cvec_name);
    __atomic_store(&h->cfg.cvec_scale, &cfg->cvec_scale, __ATOMIC_RELAXED);
    CFG_STORE(cvec_layer_start);
    CFG_STORE(cvec_layer_end);
    CFG_STORE(cvec_per_request);
    snprintf(h->cfg.sock_dir, sizeof h->cfg.sock_dir, "%s", cfg->sock_dir);
    __atomic_store(&h->cfg.mem_fraction_static, &cfg->mem_fraction_static, __ATOMIC_RELAXED);
    /* everything above before whatever the caller publishes next (the new scheduler) */
    atomic_thread_fence(memory_order_release);
    return SRT_OK;
}
uint64_t srt_chan_id(const srt_chan *c) { return c->h->chan_id; }
pid_t srt_chan_sched_pid(const srt_chan *c) { return atomic_load(&c->h->sched_pid); }

int srt_chan_sched_state_get(const srt_chan *c, char *msg, size_t msg_len)
{
    int st = (int)atomic_load_explicit(&c->h->sched_state, memory_order_acquire);
    if (msg && msg_len) {
        size_t n = strnlen(c->h->sched_msg, sizeof(c->h->sched_msg) - 1);
        if (n >= msg_len)
            n = msg_len - 1;
        memcpy(msg, c->h->sched_msg, n);
        msg[n] = 0;
    }
    return st;
}

int srt_chan_model_info_get(const srt_chan *c, srt_chan_model_info *info)
{
    if (atomic_load_explicit(&c->h->sched_state, memory_order_acquire) != SRT_CHAN_SCHED_READY
        && c->h->info.vocab_size == 0)
        return SRT_ERROR;
    *info = c->h->info;
    info->arch[sizeof(info->arch) - 1] = 0;
    info->device[sizeof(info->device) - 1] = 0;
    return SRT_OK;
}

void srt_chan_stats_get(const srt_chan *c, srt_chan_stats *st)
{
    st->slots_total = c->h->n_slots;
    st->slots_used = atomic_load(&c->h->used);
    st->queued = atomic_load(&c->h->queued);
    st->running = atomic_load(&c->h->running);
    st->submitted = atomic_load(&c->h->submitted);
    st->completed = atomic_load(&c->h->completed);
    st->aborted = atomic_load(&c->h->aborted);
    st->rejected_full = atomic_load(&c->h->rejected_full);
    st->withdrawn = atomic_load(&c->h->withdrawn);
}

uint64_t srt_chan_heartbeat_ns(const srt_chan *c) { return atomic_load(&c->h->heartbeat_ns); }

/* Move a slot to FREE: new generation first, so a later claimer never sees the old one. */
static void slot_free(srt_chan *c, chan_slot *s)
{
    atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
    atomic_store_explicit(&s->owner, 0, memory_order_relaxed);
    atomic_store_explicit(&s->state, ST_FREE, memory_order_release);
    atomic_fetch_sub(&c->h->used, 1);
}

static int slot_check(const srt_chan *c, uint32_t slot, uint32_t gen, chan_slot **out)
{
    chan_slot *s;
    if (slot >= c->h->n_slots)
        return SRT_ERROR;
    s = slot_at(c, slot);
    if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen)
        return SRT_ERROR;
    *out = s;
    return SRT_OK;
}

/* Complete a QUEUED or RUNNING slot from outside the scheduler loop (crash, failed load). */
static int slot_fail(srt_chan *c, chan_slot *s, const char *msg, int only_queued)
{
    uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);
    for (;;) {
        uint32_t base = st & ST_MASK;
        if (base != ST_QUEUED && (only_queued || base != ST_RUNNING))
            return 0;
        s->finish = SRT_FINISH_ERROR;
        s->stop_id = -1;
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", msg);
        if (st & ST_ABORTED) {
            if (atomic_compare_exchange_weak(&s->state, &st, ST_DONE)) {
                if (base == ST_QUEUED)
                    atomic_fetch_sub(&c->h->queued, 1);
                else
                    atomic_fetch_sub(&c->h->running, 1);
                atomic_fetch_add(&c->h->aborted, 1);
                slot_free(c, s);
                return 1;
            }
            continue;
        }
        if (atomic_compare_exchange_weak(&s->state, &st, ST_DONE)) {
            if (base == ST_QUEUED)
                atomic_fetch_sub(&c->h->queued, 1);
            else
                atomic_fetch_sub(&c->h->running, 1);
            atomic_fetch_add(&c->h->completed, 1);
            bell_ring_c(c, atomic_load(&s->owner));
            return 1;
        }
    }
}

/* ---- scheduler side ---- */

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

void srt_chan_sched_set_state(srt_chan *c, srt_chan_sched_state st, const char *msg,
                              const srt_chan_model_info *info)
{
    chan_header *h = c->h;
    uint32_t cur = atomic_load(&h->sched_state);
    uint32_t i;

    /* A successor loading after a graceful hand-over keeps accepting: requests queue for it. */
    if (st == SRT_CHAN_SCHED_LOADING && cur == SRT_CHAN_SCHED_HANDOVER)
        st = SRT_CHAN_SCHED_HANDOVER;
    if (info != NULL)
        h->info = *info;
    atomic_store(&h->heartbeat_ns, srt_chan_now_ns());
    snprintf(h->sched_msg, sizeof(h->sched_msg), "%s", msg ? msg : "");
    atomic_store_explicit(&h->sched_state, (uint32_t)st, memory_order_release);
    /* requests waiting for the model to become ready learn it now */
    for (i = 0; i < SRT_CHAN_MAX_WORKERS; i++) {
        int32_t pid = atomic_load(&h->workers[i]);
        if (pid > 0)
            bell_ring_c(c, pid);
    }
    if (st == SRT_CHAN_SCHED_FAILED || st == SRT_CHAN_SCHED_DOWN) {
        /* Nobody will serve what is queued: fail it now rather than let it hang. */
        for (i = 0; i < h->n_slots; i++)
            slot_fail(c, slot_at(c, i), msg ? msg : "scheduler unavailable", 1);
    }
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

int srt_chan_sched_pop_request(srt_chan *c, srt_chan_req *req)
{
    chan_header *h = c->h;
    if (c->stop)
        return 0;
    while (atomic_load_explicit(&h->queued, memory_order_acquire) > 0) {
        chan_slot *best = NULL;
        uint32_t best_i = 0, i, st;
        uint64_t best_ticket = UINT64_MAX;
        for (i = 0; i < h->n_slots; i++) {
            chan_slot *s = slot_at(c, i);
            if (atomic_load_explicit(&s->state, memory_order_acquire) == ST_QUEUED
                && s->ticket < best_ticket) {
                best = s;
                best_i = i;
                best_ticket = s->ticket;
            }
        }
        if (best == NULL)
            return 0; /* counter ahead of the state words for a moment */
        st = ST_QUEUED;
        if (!atomic_compare_exchange_strong(&best->state, &st, ST_RUNNING))
            continue; /* the worker withdrew it: look again */
        atomic_store(&best->runner, self_pid(c));
        best->t_pop_ns = srt_chan_now_ns();
        atomic_fetch_sub(&h->queued, 1);
        atomic_fetch_add(&h->running, 1);
        req->slot = best_i;
        req->gen = atomic_load(&best->gen);
        req->ticket = best->ticket;
        req->group = best->group;
        req->prompt = slot_prompt(c, best);
        req->n_prompt = best->n_prompt;
        req->max_output = h->slot_tokens - best->n_prompt;
        req->rq = &best->rq;
        return 1;
    }
    return 0;
}

int srt_chan_sched_push_tokens(srt_chan *c, uint32_t slot, uint32_t gen, const int32_t *ids,
                               const float *logprobs, uint32_t n, const int32_t *top_ids,
                               const float *top_lps, uint32_t top_n)
{
    chan_slot *s;
    uint32_t have, i, j, cap;
    int32_t *out;
    float *lp;

    if (slot_check(c, slot, gen, &s) != SRT_OK)
        return SRT_ERROR;
    if ((atomic_load_explicit(&s->state, memory_order_acquire) & ST_MASK) != ST_RUNNING)
        return SRT_ERROR;
    have = atomic_load_explicit(&s->n_out, memory_order_relaxed);
    cap = c->h->slot_tokens - s->n_prompt;
    if (n > cap - have)
        return SRT_ERROR;
    out = slot_out_ids(c, s);
    lp = slot_out_lp(c, s);
    if (top_n > SRT_REQ_MAX_TOP_LOGPROBS)
        top_n = SRT_REQ_MAX_TOP_LOGPROBS;
    for (i = 0; i < n; i++) {
        out[have + i] = ids[i];
        lp[have + i] = logprobs ? logprobs[i] : 0.0f;
        if (top_ids && top_lps && top_n) {
            uint32_t row = (have + i) % SRT_CHAN_TOP_RING;
            int32_t *ti = slot_top_ids(c, s) + row * SRT_REQ_MAX_TOP_LOGPROBS;
            float *tl = slot_top_lps(c, s) + row * SRT_REQ_MAX_TOP_LOGPROBS;
            for (j = 0; j < top_n; j++) {
                ti[j] = top_ids[i * top_n + j];
                tl[j] = top_lps[i * top_n + j];
            }
        }
    }
    if (top_ids && top_lps)
        s->top_n = top_n;
    atomic_store_explicit(&s->n_out, have + n, memory_order_release);
    note_pending(c, atomic_load(&s->owner));
    return SRT_OK;
}

int srt_chan_sched_finish(srt_chan *c, uint32_t slot, uint32_t gen, srt_finish_reason reason,
                          int32_t stop_id, uint32_t cached_tokens, const char *errmsg)
{
    chan_slot *s;
    uint32_t st;

    if (slot_check(c, slot, gen, &s) != SRT_OK)
        return SRT_ERROR;
    st = atomic_load_explicit(&s->state, memory_order_acquire);
    if ((st & ST_MASK) != ST_RUNNING)
        return SRT_ERROR;
    s->finish = (uint32_t)reason;
    s->stop_id = stop_id;
    s->cached_tokens = cached_tokens;
    s->t_done_ns = srt_chan_now_ns();
    if (errmsg && *errmsg)
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", errmsg);
    else
        s->errmsg[0] = 0;
    for (;;) {
        if (st & ST_ABORTED) {
            /* The worker is gone: nobody will read this, free the slot now. */
            if (atomic_compare_exchange_weak(&s->state, &st, ST_DONE)) {
                atomic_fetch_sub(&c->h->running, 1);
                atomic_fetch_add(&c->h->aborted, 1);
                slot_free(c, s);
                return SRT_OK;
            }
        } else if (atomic_compare_exchange_weak(&s->state, &st, ST_DONE)) {
            atomic_fetch_sub(&c->h->running, 1);
            if (reason == SRT_FINISH_ABORT)
                atomic_fetch_add(&c->h->aborted, 1);
            else
                atomic_fetch_add(&c->h->completed, 1);
            note_pending(c, atomic_load(&s->owner));
            return SRT_OK;
        }
        if ((st & ST_MASK) != ST_RUNNING)
            return SRT_ERROR;
    }
}

int srt_chan_sched_is_aborted(const srt_chan *c, uint32_t slot, uint32_t gen)
{
    chan_slot *s;
    if (slot_check(c, slot, gen, &s) != SRT_OK)
        return 1;
    return (atomic_load_explicit(&s->state, memory_order_acquire) & ST_ABORTED) != 0;
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

static int pid_gone(pid_t pid)
{
    return pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH);
}

int srt_chan_sched_reclaim(srt_chan *c)
{
    uint32_t i;
    int n = 0;
    for (i = 0; i < c->h->n_slots; i++) {
        chan_slot *s = slot_at(c, i);
        uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);
        uint32_t base = st & ST_MASK;
        pid_t owner;
        if (base == ST_FREE || (st & ST_ABORTED))
            continue;
        owner = atomic_load(&s->owner);
        if (base == ST_RUNNING) {
            /* popped by a scheduler that died unsupervised (its helper died first) */
            pid_t runner = atomic_load(&s->runner);
            if (runner > 0 && runner != self_pid(c) && pid_gone(runner)) {
                n += slot_fail(c, s, "scheduler process exited", 0);
                continue;
            }
        }
        if (!pid_gone(owner))
            continue;
        switch (base) {
        case ST_WRITING:
        case ST_DONE:
            if (atomic_compare_exchange_strong(&s->state, &st, ST_DONE | ST_ABORTED)) {
                slot_free(c, s);
                n++;
            }
            break;
        case ST_QUEUED:
            if (atomic_compare_exchange_strong(&s->state, &st, ST_DONE)) {
                atomic_fetch_sub(&c->h->queued, 1);
                atomic_fetch_add(&c->h->aborted, 1);
                atomic_fetch_add(&c->h->withdrawn, 1);
                slot_free(c, s);
                n++;
            }
            break;
        case ST_RUNNING:
            if (atomic_compare_exchange_strong(&s->state, &st, st | ST_ABORTED))
                n++;
            break;
        }
    }
    return n;
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

void srt_chan_sched_crashed(srt_chan *c, pid_t pid, const char *why)
{
    uint32_t i;
    int32_t owner = pid;
    const char *msg = why ? why : "scheduler died";
    for (i = 0; i < c->h->n_slots; i++) {
        chan_slot *s = slot_at(c, i);
        if (atomic_load(&s->runner) == pid)
            slot_fail(c, s, msg, 0);
    }
    /* Only the dead process's own state: a successor may already be serving. A load
     * failure keeps FAILED and its reason (503 bodies, /health) until the next attempt. */
    if (atomic_compare_exchange_strong(&c->h->sched_pid, &owner, 0)
        && atomic_load(&c->h->sched_state) != SRT_CHAN_SCHED_FAILED)
        srt_chan_sched_set_state(c, SRT_CHAN_SCHED_DOWN, msg, NULL);
}

/* ---- worker side ---- */

int srt_chan_worker_open(srt_chan *c, srt_err *err)
{
    int i;
    if (c->worker_fd >= 0)
        return c->worker_fd;
    c->self = getpid();
    c->worker_fd = bell_bind(c->h, c->self);
    if (c->worker_fd < 0)
        return srt_err_set(err, "channel: worker doorbell: %s", strerror(errno));
    /* register for state-change rings: a free entry, or one of a dead process */
    for (i = 0; i < SRT_CHAN_MAX_WORKERS; i++) {
        int32_t old = atomic_load(&c->h->workers[i]);
        if ((old == 0 || pid_gone(old))
            && atomic_compare_exchange_strong(&c->h->workers[i], &old, getpid()))
            break;
    }
    return c->worker_fd;
}

void srt_chan_worker_drain(srt_chan *c) { bell_drain(c->worker_fd); }

uint64_t srt_chan_new_group(srt_chan *c) { return atomic_fetch_add(&c->h->next_group, 1); }

srt_chan_submit_status srt_chan_submit(srt_chan *c, const int32_t *prompt, uint32_t n_prompt,
                                       const srt_request *rq, uint64_t group,
                                       uint32_t *slot, uint32_t *gen)
{
    chan_header *h = c->h;
    uint32_t st = atomic_load_explicit(&h->sched_state, memory_order_acquire);
    uint32_t i, n = h->n_slots;
    int32_t limit = h->cfg.max_queued_requests;

    if (st != SRT_CHAN_SCHED_READY && st != SRT_CHAN_SCHED_HANDOVER)
        return SRT_CHAN_SUBMIT_DOWN;
    if (n_prompt == 0 || n_prompt >= h->slot_tokens)
        return SRT_CHAN_SUBMIT_TOO_LONG;
    if (limit > 0) {
        /* Requests the scheduler has not taken yet count against max_queued_requests only
         * beyond the room it has: with max_running 1 and max_queued 1, two requests that
         * arrive together are one running and one queued, not two queued. */
        uint32_t q = atomic_load(&h->queued), run = atomic_load(&h->running);
        int32_t max_run = h->info.max_running_requests > 0 ? h->info.max_running_requests
                                                           : h->cfg.max_running_requests;
        if (q >= (uint32_t)limit && q + run >= (uint32_t)limit + (uint32_t)(max_run > 0 ? max_run : 0)) {
            atomic_fetch_add(&h->rejected_full, 1);
            return SRT_CHAN_SUBMIT_FULL;
        }
    }
    for (i = 0; i < n; i++) {
        uint32_t k = (c->claim_hint + i) % n;
        chan_slot *s = slot_at(c, k);
        uint32_t expect = ST_FREE;
        if (atomic_load_explicit(&s->state, memory_order_relaxed) != ST_FREE)
            continue;
        if (!atomic_compare_exchange_strong(&s->state, &expect, ST_WRITING))
            continue;
        atomic_fetch_add(&h->used, 1);
        atomic_store(&s->owner, self_pid(c));
        c->claim_hint = k + 1;
        memcpy(slot_prompt(c, s), prompt, (size_t)n_prompt * 4);
        s->n_prompt = n_prompt;
        s->rq = *rq;   /* the scheduler clamps its own copy (srt_sampling_params_clamp) */
        s->group = group;
        atomic_store(&s->runner, 0);
        s->finish = SRT_FINISH_NONE;
        s->stop_id = -1;
        s->cached_tokens = 0;
        s->top_n = 0;
        s->act_len = 0;
        s->errmsg[0] = 0;
        s->t_pop_ns = 0;
        s->t_done_ns = 0;
        s->t_submit_ns = srt_chan_now_ns();
        atomic_store_explicit(&s->n_out, 0, memory_order_relaxed);
        s->ticket = atomic_fetch_add(&h->next_ticket, 1);
        *slot = k;
        *gen = atomic_load(&s->gen);
        atomic_fetch_add(&h->queued, 1);
        atomic_store_explicit(&s->state, ST_QUEUED, memory_order_release);
        atomic_fetch_add(&h->submitted, 1);
        sched_notify(c, 0);
        return SRT_CHAN_SUBMIT_OK;
    }
    atomic_fetch_add(&h->rejected_full, 1);
    return SRT_CHAN_SUBMIT_FULL;
}

int srt_chan_read(srt_chan *c, uint32_t slot, uint32_t gen, srt_chan_output *out)
{
    chan_slot *s;
    uint32_t st;
    if (slot_check(c, slot, gen, &s) != SRT_OK)
        return SRT_ERROR;
    st = atomic_load_explicit(&s->state, memory_order_acquire);
    out->n_out = atomic_load_explicit(&s->n_out, memory_order_acquire);
    out->ids = slot_out_ids(c, s);
    out->logprobs = slot_out_lp(c, s);
    if ((st & ST_MASK) == ST_DONE) {
        out->finish = (srt_finish_reason)s->finish;
        out->stop_id = s->stop_id;
        out->cached_tokens = s->cached_tokens;
        out->errmsg = s->errmsg;
        out->t_done_ns = s->t_done_ns;
        out->n_out = atomic_load_explicit(&s->n_out, memory_order_acquire);
    } else {
        out->finish = SRT_FINISH_NONE;
        out->stop_id = -1;
        out->cached_tokens = 0;
        out->errmsg = "";
        out->t_done_ns = 0;
    }
    out->t_submit_ns = s->t_submit_ns;
    out->t_pop_ns = s->t_pop_ns;
    if (out->n_out > c->h->slot_tokens - s->n_prompt)
        out->n_out = c->h->slot_tokens - s->n_prompt;
    return SRT_OK;
}

uint32_t srt_chan_read_top(srt_chan *c, uint32_t slot, uint32_t gen, uint32_t i,
                           int32_t *ids, float *lps, uint32_t cap)
{
    chan_slot *s;
    uint32_t n_out, top_n, row, j;
    if (slot_check(c, slot, gen, &s) != SRT_OK)
        return 0;
    n_out = atomic_load_explicit(&s->n_out, memory_order_acquire);
    top_n = s->top_n;
    if (i >= n_out || n_out - i > SRT_CHAN_TOP_RING || top_n == 0)
        return 0;
    if (top_n > cap)
        top_n = cap;
    if (top_n > SRT_REQ_MAX_TOP_LOGPROBS)
        top_n = SRT_REQ_MAX_TOP_LOGPROBS;
    row = i % SRT_CHAN_TOP_RING;
    for (j = 0; j < top_n; j++) {
        ids[j] = slot_top_ids(c, s)[row * SRT_REQ_MAX_TOP_LOGPROBS + j];
        lps[j] = slot_top_lps(c, s)[row * SRT_REQ_MAX_TOP_LOGPROBS + j];
    }
    return top_n;
}

void srt_chan_release(srt_chan *c, uint32_t slot, uint32_t gen)
{
    chan_slot *s;
    uint32_t st;
    if (slot_check(c, slot, gen, &s) != SRT_OK)
        return;
    st = atomic_load_explicit(&s->state, memory_order_acquire);
    for (;;) {
        uint32_t base = st & ST_MASK;
        if (base == ST_DONE) {
            if (atomic_compare_exchange_weak(&s->state, &st, ST_DONE | ST_ABORTED)) {
                slot_free(c, s);
                return;
            }
        } else if (base == ST_QUEUED && !(st & ST_ABORTED)) {
            /* Not popped yet: withdraw it ourselves. */
            if (atomic_compare_exchange_weak(&s->state, &st, ST_DONE | ST_ABORTED)) {
                atomic_fetch_sub(&c->h->queued, 1);
                atomic_fetch_add(&c->h->aborted, 1);
                atomic_fetch_add(&c->h->withdrawn, 1);
                slot_free(c, s);
                return;
            }
        } else if (base == ST_RUNNING && !(st & ST_ABORTED)) {
            if (atomic_compare_exchange_weak(&s->state, &st, st | ST_ABORTED)) {
                sched_notify(c, 1);
                return;
            }
        } else {
            return;
        }
    }
}

/* ---- metrics (seqlock: one writer, the scheduler; readers retry on a torn copy) ---- */

void srt_chan_sched_publish_metrics(srt_chan *c, const char *text, size_t len)
{
    chan_header *h = c->h;
    uint32_t seq = atomic_load_explicit(&h->metrics_seq, memory_order_relaxed);
    if (len > SRT_CHAN_METRICS_MAX - 1)
        len = SRT_CHAN_METRICS_MAX - 1;
    atomic_store_explicit(&h->metrics_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    memcpy(h->metrics, text, len);
    atomic_store_explicit(&h->metrics_len, (uint32_t)len, memory_order_relaxed);
    atomic_store_explicit(&h->metrics_seq, seq + 2, memory_order_release);
}

size_t srt_chan_metrics_read(const srt_chan *c, char *buf, size_t cap)
{
    const chan_header *h = c->h;
    int tries;
    for (tries = 0; tries < 100; tries++) {
        uint32_t s1 = atomic_load_explicit((_Atomic uint32_t *)&h->metrics_seq, memory_order_acquire);
        uint32_t len;
        if (s1 & 1)
            continue;
        len = atomic_load_explicit((_Atomic uint32_t *)&h->metrics_len, memory_order_relaxed);
        if (len > SRT_CHAN_METRICS_MAX - 1)
            len = SRT_CHAN_METRICS_MAX - 1;
        if (len > cap)
            len = (uint32_t)cap;
        memcpy(buf, h->metrics, len);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit((_Atomic uint32_t *)&h->metrics_seq, memory_order_relaxed) == s1)
            return len;
    }
    return 0;
}

/* ---- admin mailbox ---- */

int srt_chan_admin_post(srt_chan *c, const char *req, size_t len, uint64_t *ticket)
{
    chan_header *h = c->h;
    uint32_t st = AD_FREE;

    if (len >= SRT_CHAN_ADMIN_REQ_MAX)
        return SRT_ERROR;
    if (!atomic_compare_exchange_strong(&h->admin_state, &st, AD_WRITING)) {
        /* held by a worker that died: take it over */
        pid_t owner = atomic_load(&h->admin_owner);
        if (owner <= 0 || !pid_gone(owner) ||
            !atomic_compare_exchange_strong(&h->admin_state, &st, AD_WRITING))
            return 1;
    }
    atomic_store(&h->admin_owner, getpid());
    memcpy(h->admin_req, req, len);
    h->admin_req[len] = 0;
    h->admin_req_len = (uint32_t)len;
    *ticket = atomic_fetch_add(&h->admin_ticket, 1) + 1;
    atomic_store(&h->admin_state, AD_POSTED);
    sched_notify(c, 1);
    return SRT_OK;
}

int srt_chan_admin_result(srt_chan *c, uint64_t ticket, int *status, char *body, size_t cap,
                          size_t *len)
{
    chan_header *h = c->h;
    uint32_t st = atomic_load(&h->admin_state);
    size_t n;

    if (atomic_load(&h->admin_ticket) != ticket || atomic_load(&h->admin_owner) != getpid()
        || (st & AD_CANCELLED) || (st & AD_MASK) == AD_FREE)
        return SRT_ERROR;
    if (st != AD_DONE)
        return 0;
    n = h->admin_resp_len < SRT_CHAN_ADMIN_RESP_MAX ? h->admin_resp_len : SRT_CHAN_ADMIN_RESP_MAX;
    if (n > cap)
        n = cap;
    memcpy(body, h->admin_resp, n);
    *len = n;
    *status = h->admin_status;
    atomic_store(&h->admin_state, AD_FREE);
    return 1;
}

void srt_chan_admin_cancel(srt_chan *c, uint64_t ticket)
{
    chan_header *h = c->h;
    uint32_t st = atomic_load(&h->admin_state);

    for (;;) {
        if (atomic_load(&h->admin_ticket) != ticket || atomic_load(&h->admin_owner) != getpid()
            || (st & AD_CANCELLED) || st == AD_FREE)
            return;
        /* POSTED or DONE: nobody else touches it now, free it; TAKEN: the scheduler frees */
        uint32_t to = (st == AD_POSTED || st == AD_DONE) ? AD_FREE : (st | AD_CANCELLED);
        if (atomic_compare_exchange_weak(&h->admin_state, &st, to))
            return;
    }
}

size_t srt_chan_sched_admin_take(srt_chan *c, char *req, size_t cap)
{
    chan_header *h = c->h;
    uint32_t st = atomic_load(&h->admin_state);
    size_t n;

    if (st != AD_POSTED) {
        /* a worker that died with a command posted, answered or half-written */
        pid_t owner = atomic_load(&h->admin_owner);
        if (st != AD_FREE && st != AD_TAKEN && owner > 0 && pid_gone(owner))
            atomic_compare_exchange_strong(&h->admin_state, &st, AD_FREE);
        return 0;
    }
    if (!atomic_compare_exchange_strong(&h->admin_state, &st, AD_TAKEN) || cap == 0)
        return 0;
    n = h->admin_req_len < SRT_CHAN_ADMIN_REQ_MAX ? h->admin_req_len : SRT_CHAN_ADMIN_REQ_MAX - 1;
    if (n >= cap)
        n = cap - 1;
    memcpy(req, h->admin_req, n);
    req[n] = 0;
    return n;
}

void srt_chan_sched_admin_reply(srt_chan *c, int status, const char *body, size_t len)
{
    chan_header *h = c->h;
    uint32_t st = AD_TAKEN;

    if (len > SRT_CHAN_ADMIN_RESP_MAX)
        len = SRT_CHAN_ADMIN_RESP_MAX;
    memcpy(h->admin_resp, body, len);
    h->admin_resp_len = (uint32_t)len;
    h->admin_status = status;
    if (!atomic_compare_exchange_strong(&h->admin_state, &st, AD_DONE)) {
        if (st == (AD_TAKEN | AD_CANCELLED))
            atomic_store(&h->admin_state, AD_FREE);
        return;
    }
    bell_ring_c(c, atomic_load(&h->admin_owner));
}

/* ---- returned activations (srt_max_activation_bytes) ---- */

void *srt_chan_sched_act_area(srt_chan *c, uint32_t slot, uint32_t gen, size_t *cap)
{
    chan_slot *s;
    *cap = 0;
    if (c->h->cfg.act_bytes == 0 || slot_check(c, slot, gen, &s) != SRT_OK ||
        (atomic_load_explicit(&s->state, memory_order_acquire) & ST_MASK) != ST_RUNNING)
        return NULL;
    *cap = (size_t)c->h->cfg.act_bytes;
    return slot_act(c, s);
}

int srt_chan_sched_act_done(srt_chan *c, uint32_t slot, uint32_t gen, size_t len)
{
    chan_slot *s;
    if (len > c->h->cfg.act_bytes || slot_check(c, slot, gen, &s) != SRT_OK)
        return SRT_ERROR;
    s->act_len = len;   /* published by srt_chan_sched_finish's release */
    return SRT_OK;
}

const void *srt_chan_read_act(srt_chan *c, uint32_t slot, uint32_t gen, size_t *len)
{
    chan_slot *s;
    *len = 0;
    if (slot_check(c, slot, gen, &s) != SRT_OK ||
        (atomic_load_explicit(&s->state, memory_order_acquire) & ST_MASK) != ST_DONE)
        return NULL;
    *len = (size_t)s->act_len;
    if (*len > c->h->cfg.act_bytes)
        *len = (size_t)c->h->cfg.act_bytes;
    return slot_act(c, s);
}
