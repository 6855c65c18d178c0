/* Private to src/ipc: the channel's shared layout and the helpers its files share.
 * channel.h is the contract (and the state machine it describes); the files, by job:
 *
 *   channel.c        layout (format, attach, reconfigure), scheduler state, counters
 *   chan_slots.c     the slot state machine: submit, pop, push, finish, read, release, reclaim;
 *                    the activation area (return_activations)
 *   chan_doorbell.c  doorbells: naming, ringing, draining; the scheduler's wait
 *   chan_lock.c      the owner lock: one scheduler per model, stop and hand-over
 *   chan_metrics.c   the metrics (two copies: readers never wait for the writer)
 *   chan_admin.c     the admin mailbox (srt_admin commands to the scheduler)
 */
#ifndef SRT_IPC_CHANNEL_INTERNAL_H
#define SRT_IPC_CHANNEL_INTERNAL_H

#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ipc/channel.h"

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
    _Atomic uint32_t  metrics_gen;                    /* copies published; the newest is [gen & 1] */
    _Atomic uint32_t  metrics_seq[2];                 /* per copy: odd while being written */
    _Atomic uint32_t  metrics_len[2];
    char              metrics[2][SRT_CHAN_METRICS_MAX / 2];
    _Atomic uint32_t  admin_state;                    /* AD_* | AD_CANCELLED (chan_admin.c) */
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
    int                   sched_lock_fd;/* the channel's scheduler lock, while owner */
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

static inline size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static inline chan_slot *slot_at(const srt_chan *c, uint32_t i)
{
    return (chan_slot *)((char *)c->h + c->h->slots_off + (size_t)i * c->h->slot_stride);
}

static inline int32_t *slot_prompt(const srt_chan *c, chan_slot *s)
{
    return (int32_t *)((char *)s + align64(sizeof(chan_slot)));
}

static inline int32_t *slot_out_ids(const srt_chan *c, chan_slot *s)
{
    return (int32_t *)((char *)slot_prompt(c, s) + align64((size_t)c->h->slot_tokens * 4));
}

static inline float *slot_out_lp(const srt_chan *c, chan_slot *s)
{
    return (float *)((char *)slot_out_ids(c, s) + align64((size_t)c->h->slot_tokens * 4));
}

static inline int32_t *slot_top_ids(const srt_chan *c, chan_slot *s)
{
    return (int32_t *)((char *)slot_out_lp(c, s) + align64((size_t)c->h->slot_tokens * 4));
}

static inline float *slot_top_lps(const srt_chan *c, chan_slot *s)
{
    return (float *)((char *)slot_top_ids(c, s)
                     + align64((size_t)SRT_CHAN_TOP_RING * SRT_REQ_MAX_TOP_LOGPROBS * 4));
}

static inline unsigned char *slot_act(const srt_chan *c, chan_slot *s)
{
    return (unsigned char *)slot_top_lps(c, s)
           + align64((size_t)SRT_CHAN_TOP_RING * SRT_REQ_MAX_TOP_LOGPROBS * 4);
}

static inline pid_t self_pid(const srt_chan *c) { return c->self > 0 ? c->self : getpid(); }

/* chan_doorbell.c */
socklen_t bell_addr(const chan_header *h, struct sockaddr_un *a, pid_t pid);
int bell_bind(const chan_header *h, pid_t pid);
void bell_send(const chan_header *h, int send_fd, pid_t pid);
void bell_ring_c(srt_chan *c, pid_t pid);
void bell_drain(int fd);
void sched_notify(srt_chan *c, int always_ring);
void note_pending(srt_chan *c, pid_t pid);

/* chan_slots.c */
int slot_fail(srt_chan *c, chan_slot *s, const char *msg, int only_queued);

/* channel.c */
int pid_gone(pid_t pid);

#endif
