/* The channel's layout in shared memory, the scheduler state and the counters both sides
 * read. See channel.h (the contract) and channel_internal.h (the files). */
#define _GNU_SOURCE
#include "ipc/channel_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>

#define CHAN_MAGIC   0x314e414843545253ULL   /* "SRTCHAN1" */
#define CHAN_VERSION 4u

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

int pid_gone(pid_t pid)
{
    return pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH);
}

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
    if (cfg->sock_dir[0] != '/' || memchr(cfg->sock_dir, 0, sizeof(cfg->sock_dir)) == NULL)
        return srt_err_set(err, "channel: sock_dir must be an absolute path of at most %d bytes "
                           "(a 0700 directory for the doorbells and locks)", SRT_CHAN_SOCK_DIR_MAX - 1);
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
        struct sockaddr_un a;
        close(c->worker_fd);
        (void)bell_addr(c->h, &a, c->self);
        (void)unlink(a.sun_path);
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
    CFG_STORE(weights_mmap);
    CFG_STORE(grammar_jump_forward);
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
