/* srt_sched_run across processes: a fork()ed scheduler process serving tiny-llama through
 * the shared-memory channel, and this process acting as an nginx worker. */
#define _GNU_SOURCE
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ipc/channel.h"
#include "srt/model.h"
#include "sched/serve.h"
#include "srt/sched.h"
#include "chan_dir.h"
#include "tap.h"

#define NREQ 12

static void  *mem;
static size_t mem_size;
static char   model_path[1024];
static int32_t prompts[NREQ][64];
static int     plen[NREQ];
static int32_t expect[NREQ][16];

static srt_chan *make_chan(void)
{
    srt_chan_config cfg;
    srt_err err = {{0}};
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.model_path, sizeof cfg.model_path, "%s", model_path);
    cfg.slots = 16;
    cfg.slot_tokens = 256;
    cfg.max_queued_requests = 16;
    cfg.max_running_requests = 8;
    cfg.max_total_tokens = 2048;
    cfg.chunked_prefill_size = 32;
    cfg.radix_cache = 1;
    cfg.page_size = 1;
    cfg.threads = 1;
    chan_dir_set(&cfg);
    mem_size = srt_chan_size(&cfg);
    mem = mmap(NULL, mem_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED || srt_chan_format(mem, mem_size, &cfg, &err) != SRT_OK) {
        printf("Bail out! cannot make channel: %s\n", err.msg);
        exit(1);
    }
    return srt_chan_attach(mem, mem_size, &err);
}

static srt_chan *sched_chan;

/* The metrics sink writes into the shared mapping, as the nginx helper would. */
static srt_sched_metrics *shared_metrics;
static void metrics_to_shm(const srt_sched_metrics *m, void *user)
{
    (void)user;
    *shared_metrics = *m;
}
static void on_term(int sig) { srt_chan_sched_request_stop(sched_chan, sig == SIGTERM ? 1 : 2); }

/* What the nginx helper process does around srt_sched_run. */
static void scheduler_process(void)
{
    srt_err err = {{0}};
    srt_chan *c = srt_chan_attach(mem, mem_size, &err);
    if (!c || srt_chan_sched_open(c, &err) != SRT_OK)
        _exit(10);
    sched_chan = c;
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    int rc = srt_sched_run(c, metrics_to_shm, NULL, &err);
    if (rc != SRT_OK)
        fprintf(stderr, "srt_sched_run: %s\n", err.msg);
    srt_chan_sched_close(c);
    _exit(rc == SRT_OK ? 0 : 11);
}

/* Greedy reference: each prompt alone through the scheduler in this process. */
static int reference(void)
{
    srt_err err = {{0}};
    srt_model *m;
    srt_sched_model_runner *mr;
    srt_sched *s;
    if (srt_model_load(model_path, &m, &err) != SRT_OK)
        return -1;
    srt_sched_config c = { .max_running_requests = 1, .max_queued_requests = 1, .context_length = 256,
                           .max_total_tokens = 1024, .page_size = 1, .chunked_prefill_size = 512,
                           .radix_cache = 0, .vocab_size = srt_model_config_of(m)->vocab_size };
    srt_sched_model_runner_create(m, &c, 1, 0, 0, &mr, &err);
    srt_sched_runner rn = srt_sched_model_runner_iface(mr);
    srt_sched_create(&c, &rn, &s, &err);
    for (int r = 0; r < NREQ; r++) {
        srt_sampling_params sp = { .top_p = 1, .repetition_penalty = 1, .max_tokens = 16, .ignore_eos = 1 };
        srt_sched_submit_args a = { .id = 1, .prompt = prompts[r], .n_prompt = plen[r], .sampling = &sp };
        srt_sched_submit(s, &a, &err);
        int k = 0;
        while (srt_sched_has_work(s)) {
            int n;
            srt_sched_step(s, &err);
            const srt_sched_event *ev = srt_sched_events(s, &n);
            for (int i = 0; i < n; i++)
                if (ev[i].token >= 0 && k < 16)
                    expect[r][k++] = ev[i].token;
        }
    }
    srt_sched_free(s);
    srt_sched_model_runner_free(mr);
    srt_model_free(m);
    return 0;
}

static double cpu_seconds(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

int main(void)
{
    const char *dir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    snprintf(model_path, sizeof model_path, "%s/tiny-llama", dir);
    for (int r = 0; r < NREQ; r++) {
        plen[r] = 10 + r * 3;
        for (int i = 0; i < plen[r]; i++)
            prompts[r][i] = i < 20 ? 100 + i : 1000 + 37 * r + i;   /* shared first 20 */
    }
    ok(reference() == 0, "reference outputs from %s", model_path);

    shared_metrics = mmap(NULL, sizeof *shared_metrics, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    srt_chan *c = make_chan();
    srt_err err = {{0}};
    int wfd = srt_chan_worker_open(c, &err);
    ok(wfd >= 0, "worker doorbell");
    pid_t pid = fork();
    if (pid == 0)
        scheduler_process();

    /* Wait for READY, woken by nothing but a bounded poll on the doorbell. */
    int st = 0;
    for (int i = 0; i < 600 && (st = srt_chan_sched_state_get(c, NULL, 0)) != SRT_CHAN_SCHED_READY &&
                    st != SRT_CHAN_SCHED_FAILED; i++) {
        struct pollfd p = { wfd, POLLIN, 0 };
        poll(&p, 1, 50);
        srt_chan_worker_drain(c);
    }
    ok(st == SRT_CHAN_SCHED_READY, "scheduler process READY");
    srt_chan_model_info info;
    srt_chan_model_info_get(c, &info);
    ok(info.max_total_tokens == 2048 && info.context_length == 256 && info.vocab_size > 0,
       "model info published (KV %lld, context %d)", (long long)info.max_total_tokens, info.context_length);

    double idle0 = cpu_seconds(pid);
    usleep(300000);
    double idle1 = cpu_seconds(pid);
    ok(idle0 >= 0 && idle1 - idle0 < 0.05, "idle scheduler blocks instead of spinning (%.3f s CPU in 0.3 s)", idle1 - idle0);

    uint32_t slot[NREQ], gen[NREQ];
    int submitted = 0;
    for (int r = 0; r < NREQ; r++) {
        srt_request rq;
        memset(&rq, 0, sizeof rq);
        rq.sampling.top_p = 1; rq.sampling.repetition_penalty = 1; rq.sampling.ignore_eos = 1;
        rq.sampling.max_tokens = r == 5 ? 200 : 16;
        submitted += srt_chan_submit(c, prompts[r], (uint32_t)plen[r], &rq, 0, &slot[r], &gen[r]) == SRT_CHAN_SUBMIT_OK;
    }
    is_int(submitted, NREQ, "12 requests submitted");
    /* Request 5 asks for 200 tokens; abort it once it has produced a few. */
    int done[NREQ] = {0}, n_done = 0, aborted = 0;
    for (int iter = 0; iter < 20000 && n_done < NREQ; iter++) {
        struct pollfd p = { wfd, POLLIN, 0 };
        if (poll(&p, 1, 5000) <= 0)
            break;
        srt_chan_worker_drain(c);
        for (int r = 0; r < NREQ; r++) {
            srt_chan_output out;
            if (done[r] || srt_chan_read(c, slot[r], gen[r], &out) != SRT_OK)
                continue;
            if (r == 5 && !aborted && out.n_out >= 3) {
                srt_chan_release(c, slot[r], gen[r]);
                aborted = 1;
                done[r] = 1;
                n_done++;
                continue;
            }
            if (out.finish == SRT_FINISH_NONE)
                continue;
            done[r] = 1;
            n_done++;
            int same = out.n_out == 16 && out.finish == SRT_FINISH_LENGTH &&
                       !memcmp(out.ids, expect[r], sizeof(int32_t) * 16);
            ok(same, "request %d over the channel == alone (%u tokens, cached %u)", r, out.n_out, out.cached_tokens);
            srt_chan_release(c, slot[r], gen[r]);
        }
    }
    is_int(n_done, NREQ, "every request answered");
    ok(aborted, "a release mid-stream aborted request 5");

    /* The abort freed its slot: the channel's slots are all free again. */
    srt_chan_stats stats;
    for (int i = 0; i < 100; i++) {
        srt_chan_stats_get(c, &stats);
        if (stats.slots_used == 0)
            break;
        usleep(10000);
    }
    is_int(stats.slots_used, 0, "no slot left in use");

    /* idle again: the scheduler published its metrics before blocking */
    for (int i = 0; i < 100 && shared_metrics->requests_finished + shared_metrics->requests_aborted < NREQ; i++)
        usleep(10000);
    ok(shared_metrics->requests_finished == NREQ - 1 && shared_metrics->requests_aborted == 1 &&
       shared_metrics->generation_tokens_total >= (NREQ - 1) * 16 && shared_metrics->kv_total_tokens == 2048 &&
       shared_metrics->num_running == 0 && shared_metrics->cached_prompt_tokens_total > 0,
       "metrics sink: %llu finished, %llu aborted, %llu generated, %llu cached prompt tokens",
       (unsigned long long)shared_metrics->requests_finished, (unsigned long long)shared_metrics->requests_aborted,
       (unsigned long long)shared_metrics->generation_tokens_total,
       (unsigned long long)shared_metrics->cached_prompt_tokens_total);
    kill(pid, SIGTERM);   /* graceful stop, as the nginx master asks on quit */
    int status = 0;
    waitpid(pid, &status, 0);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "graceful stop: srt_sched_run returned SRT_OK (status %d)", status);
    srt_chan_detach(c);
    return tap_done();
}
