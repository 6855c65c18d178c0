/* The slot state machine (channel.h, "Life of a slot"): every transition is one CAS on the
 * state word; the worker side claims, submits, reads and releases, the scheduler side pops,
 * pushes, finishes and reclaims what dead processes left. */
#define _GNU_SOURCE
#include "ipc/channel_internal.h"

#include <stdio.h>
#include <string.h>

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
int slot_fail(srt_chan *c, chan_slot *s, const char *msg, int only_queued)
{
    uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);
    for (;;) {
        uint32_t base = st & ST_MASK;
        if (base != ST_QUEUED && (only_queued || base != ST_RUNNING))
            return 0;
        s->finish = SRT_FINISH_ERROR;
        s->stop_id = -1;
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", msg);
        if (!atomic_compare_exchange_weak(&s->state, &st, ST_DONE))
            continue;
        atomic_fetch_sub(base == ST_QUEUED ? &c->h->queued : &c->h->running, 1);
        if (st & ST_ABORTED) {
            /* its worker is gone: nobody will read it */
            atomic_fetch_add(&c->h->aborted, 1);
            slot_free(c, s);
        } else {
            atomic_fetch_add(&c->h->completed, 1);
            bell_ring_c(c, atomic_load(&s->owner));
        }
        return 1;
    }
}

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
