/* srt-bench-chan: the round trip of one request through the shared-memory channel, with no
 * HTTP and no model: a "worker" (this process, waiting in epoll as an nginx worker does)
 * submits a prompt, a "scheduler" (a forked child, in srt_chan_sched_wait as the real one)
 * takes it, answers one token at once and rings back.
 *
 *   srt-bench-chan [--requests N] [--spin US] [--warmup N]
 *
 * What it measures is the floor of what the two process hand-offs of every request cost on
 * this machine (wake-ups included): scripts/bench_http.py runs it next to nginx and reports
 * the module's added latency against it. Output: one line of key=value pairs (microseconds). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/channel.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_us(uint64_t *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return v[(int)((n - 1) * p)] / 1e3;
}

static int scheduler(srt_chan *c)
{
    srt_err err;
    srt_chan_model_info info;
    memset(&info, 0, sizeof info);
    info.vocab_size = 100;
    info.context_length = 64;
    if (srt_chan_sched_open(c, &err) != SRT_OK) {
        fprintf(stderr, "srt-bench-chan: %s\n", err.msg);
        return 1;
    }
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, NULL, &info);
    while (!srt_chan_sched_stopping(c)) {
        srt_chan_req rq;
        int32_t tok = 7;
        while (srt_chan_sched_pop_request(c, &rq) == 1) {
            srt_chan_sched_push_tokens(c, rq.slot, rq.gen, &tok, NULL, 1, NULL, NULL, 0);
            srt_chan_sched_finish(c, rq.slot, rq.gen, SRT_FINISH_LENGTH, -1, 0, NULL);
        }
        srt_chan_sched_flush(c);
        if (srt_chan_sched_wait(c, -1) < 0)
            return 1;
    }
    srt_chan_sched_close(c);
    return 0;
}

static srt_chan *sched_chan;
static void on_term(int sig)
{
    (void)sig;
    srt_chan_sched_request_stop(sched_chan, 2);
}

static int bench(const srt_chan_config *cfg, int n, int warm, int spin);

int main(int argc, char **argv)
{
    int n = 20000, warm = 2000, spin = 0, i;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--requests") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--spin") && i + 1 < argc)
            spin = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: srt-bench-chan [--requests N] [--warmup N] [--spin US]\n");
            return 2;
        }
    }
    if (n < 1 || warm < 0 || spin < 0) {
        fprintf(stderr, "srt-bench-chan: bad arguments\n");
        return 2;
    }

    srt_chan_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.slots = 4;
    cfg.slot_tokens = 64;
    cfg.max_queued_requests = 4;
    cfg.sched_spin_us = spin;
    srt_err err;
    /* the doorbells in a private 0700 directory, as nginx's srt_temp_path */
    if (srt_chan_sock_dir_make(cfg.sock_dir, sizeof cfg.sock_dir, &err) != SRT_OK) {
        fprintf(stderr, "srt-bench-chan: %s\n", err.msg);
        return 1;
    }
    int rc = bench(&cfg, n, warm, spin);
    srt_chan_sock_dir_remove(cfg.sock_dir);
    return rc;
}

/* One channel in cfg->sock_dir, a forked scheduler, n timed requests after warm ones. */
static int bench(const srt_chan_config *cfg, int n, int warm, int spin)
{
    srt_err err;
    int i;
    size_t size = srt_chan_size(cfg);
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED || srt_chan_format(mem, size, cfg, &err) != SRT_OK) {
        fprintf(stderr, "srt-bench-chan: cannot make a channel: %s\n",
                mem == MAP_FAILED ? strerror(errno) : err.msg);
        return 1;
    }
    srt_chan *c = srt_chan_attach(mem, size, &err);
    if (!c) {
        fprintf(stderr, "srt-bench-chan: %s\n", err.msg);
        return 1;
    }

    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        sched_chan = c;
        signal(SIGTERM, on_term);
        _exit(scheduler(c));
    }

    int fd = srt_chan_worker_open(c, &err);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN };
    if (fd < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        fprintf(stderr, "srt-bench-chan: worker doorbell: %s\n", fd < 0 ? err.msg : strerror(errno));
        kill(child, SIGKILL);
        return 1;
    }
    while (srt_chan_sched_state_get(c, NULL, 0) != SRT_CHAN_SCHED_READY)
        if (epoll_wait(ep, &ev, 1, 1000) > 0)
            srt_chan_worker_drain(c);

    uint64_t *rtt = malloc(sizeof(uint64_t) * (size_t)n);
    uint64_t *hand = malloc(sizeof(uint64_t) * (size_t)n);
    uint64_t *back = malloc(sizeof(uint64_t) * (size_t)n);
    if (!rtt || !hand || !back)
        return 1;
    int32_t prompt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    srt_request rq;
    memset(&rq, 0, sizeof rq);
    rq.sampling.max_tokens = 1;
    rq.sampling.repetition_penalty = 1;
    rq.sampling.top_p = 1;

    for (i = -warm; i < n; i++) {
        uint32_t slot, gen;
        srt_chan_output o;
        uint64_t t0 = srt_chan_now_ns(), t1;
        if (srt_chan_submit(c, prompt, 8, &rq, 0, &slot, &gen) != SRT_CHAN_SUBMIT_OK) {
            fprintf(stderr, "srt-bench-chan: submit failed\n");
            kill(child, SIGKILL);
            return 1;
        }
        for (;;) {
            if (srt_chan_read(c, slot, gen, &o) != SRT_OK) {
                fprintf(stderr, "srt-bench-chan: lost the slot\n");
                kill(child, SIGKILL);
                return 1;
            }
            if (o.finish != SRT_FINISH_NONE)
                break;
            if (epoll_wait(ep, &ev, 1, 1000) > 0)
                srt_chan_worker_drain(c);
        }
        t1 = srt_chan_now_ns();
        srt_chan_release(c, slot, gen);
        if (i >= 0) {
            rtt[i] = t1 - t0;
            hand[i] = o.t_pop_ns - o.t_submit_ns;
            back[i] = t1 - o.t_done_ns;
        }
    }
    kill(child, SIGTERM);
    waitpid(child, NULL, 0);
    printf("requests=%d spin_us=%d rtt_p50_us=%.1f rtt_p99_us=%.1f handoff_p50_us=%.1f notify_p50_us=%.1f\n",
           n, spin, pct_us(rtt, n, 0.5), pct_us(rtt, n, 0.99), pct_us(hand, n, 0.5), pct_us(back, n, 0.5));
    srt_chan_detach(c);
    return 0;
}
