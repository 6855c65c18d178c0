/* The metrics the scheduler publishes for /metrics, as opaque bytes in two copies. The
 * writer (the scheduler) fills the older copy under that copy's own seqlock and then makes
 * it the newest; a reader copies the newest. A writer preempted mid-write holds only the
 * older copy, so a reader never waits on it (with one seqlocked copy a reader that gave up
 * after 100 tries served /metrics without the scheduler's figures: t/080 under load). */
#define _GNU_SOURCE
#include "ipc/channel_internal.h"

#include <string.h>

#define COPY_MAX (SRT_CHAN_METRICS_MAX / 2)

void srt_chan_sched_publish_metrics(srt_chan *c, const void *data, size_t len)
{
    chan_header *h = c->h;
    uint32_t gen = atomic_load_explicit(&h->metrics_gen, memory_order_relaxed);
    uint32_t k = (gen + 1) & 1;
    uint32_t seq = atomic_load_explicit(&h->metrics_seq[k], memory_order_relaxed);

    if (len > COPY_MAX)
        len = COPY_MAX;
    atomic_store_explicit(&h->metrics_seq[k], seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    memcpy(h->metrics[k], data, len);
    atomic_store_explicit(&h->metrics_len[k], (uint32_t)len, memory_order_relaxed);
    atomic_store_explicit(&h->metrics_seq[k], seq + 2, memory_order_release);
    atomic_store_explicit(&h->metrics_gen, gen + 1, memory_order_release);
}

size_t srt_chan_metrics_read(const srt_chan *c, void *buf, size_t cap)
{
    chan_header *h = c->h;
    /* A retry means the writer published twice during this copy (it refills the copy
     * being read only after making the other one the newest): rare, never unbounded
     * in practice, but capped all the same. */
    for (int tries = 0; tries < 1000; tries++) {
        uint32_t gen = atomic_load_explicit(&h->metrics_gen, memory_order_acquire), k = gen & 1;
        uint32_t s1 = atomic_load_explicit(&h->metrics_seq[k], memory_order_acquire), len;
        if (gen == 0)
            return 0;
        if (s1 & 1)
            continue;
        len = atomic_load_explicit(&h->metrics_len[k], memory_order_relaxed);
        if (len > COPY_MAX)
            len = COPY_MAX;
        if (len > cap)
            len = (uint32_t)cap;
        memcpy(buf, h->metrics[k], len);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&h->metrics_seq[k], memory_order_relaxed) == s1)
            return len;
    }
    return 0;
}
