/* The metrics the scheduler publishes for /metrics: a seqlock (one writer, the
 * scheduler; readers retry on a torn copy) over opaque bytes. */
#define _GNU_SOURCE
#include "ipc/channel_internal.h"

#include <string.h>

void srt_chan_sched_publish_metrics(srt_chan *c, const void *data, size_t len)
{
    chan_header *h = c->h;
    uint32_t seq = atomic_load_explicit(&h->metrics_seq, memory_order_relaxed);
    if (len > SRT_CHAN_METRICS_MAX - 1)
        len = SRT_CHAN_METRICS_MAX - 1;
    atomic_store_explicit(&h->metrics_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    memcpy(h->metrics, data, len);
    atomic_store_explicit(&h->metrics_len, (uint32_t)len, memory_order_relaxed);
    atomic_store_explicit(&h->metrics_seq, seq + 2, memory_order_release);
}

size_t srt_chan_metrics_read(const srt_chan *c, void *buf, size_t cap)
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
