/* The admin mailbox: one srt_admin command at a time, from a worker to the scheduler and
 * its answer back; a dead holder's command is taken over or dropped. */
#define _GNU_SOURCE
#include "ipc/channel_internal.h"

#include <string.h>

enum { AD_FREE = 0, AD_WRITING = 1, AD_POSTED = 2, AD_TAKEN = 3, AD_DONE = 4 };
#define AD_MASK      0xffu
#define AD_CANCELLED 0x100u

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
