/* The worker <-> scheduler channel across real processes: fork()ed schedulers and workers
 * share one MAP_SHARED mapping, exactly as nginx's forked processes share a zone. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/channel.h"
#include "chan_dir.h"
#include "tap.h"

static void *mem;
static size_t mem_size;

static srt_chan *make_chan(int slots, int tokens, int max_queued)
{
    srt_chan_config cfg;
    srt_err err;
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.model_path, sizeof(cfg.model_path), "/models/x.gguf");
    cfg.slots = slots;
    cfg.slot_tokens = tokens;
    cfg.max_queued_requests = max_queued;
    chan_dir_set(&cfg);
    if (mem)
        munmap(mem, mem_size);
    mem_size = srt_chan_size(&cfg);
    mem = mmap(NULL, mem_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED || srt_chan_format(mem, mem_size, &cfg, &err) != SRT_OK) {
        printf("Bail out! cannot make channel\n");
        exit(1);
    }
    return srt_chan_attach(mem, mem_size, &err);
}

static srt_request greedy(int max_new)
{
    srt_request sp;
    memset(&sp, 0, sizeof(sp));
    sp.sampling.top_p = 1.0f;
    sp.sampling.repetition_penalty = 1.0f;
    sp.sampling.max_tokens = max_new;
    return sp;
}

/* Wait for the worker doorbell the way nginx does: poll on the fd, no sleeping. */
static int wait_bell(srt_chan *c, int fd, int timeout_ms)
{
    struct pollfd p = { fd, POLLIN, 0 };
    int r = poll(&p, 1, timeout_ms);
    srt_chan_worker_drain(c);
    return r;
}

/* Wait until the slot is DONE, waking only on the doorbell. */
static int wait_done(srt_chan *c, int fd, uint32_t slot, uint32_t gen, srt_chan_output *out)
{
    int i;
    for (i = 0; i < 100; i++) {
        if (srt_chan_read(c, slot, gen, out) != SRT_OK)
            return -1;
        if (out->finish != SRT_FINISH_NONE)
            return 0;
        if (wait_bell(c, fd, 5000) <= 0)
            return -1;
    }
    return -1;
}

/* A scheduler that echoes each prompt reversed, one token per step, then finishes with LENGTH.
 * Pops everything queued first, so order is observable. Serves `count` requests, then exits. */
static void echo_scheduler(int count, int expect_order)
{
    srt_err err;
    srt_chan *c = srt_chan_attach(mem, mem_size, &err);
    uint64_t last_ticket = 0;
    int served = 0, bad_order = 0;
    if (c == NULL || srt_chan_sched_open(c, &err) != SRT_OK)
        _exit(10);
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, "ready", NULL);
    while (served < count) {
        srt_chan_req r;
        if (srt_chan_sched_wait(c, 2000) < 0)
            _exit(11);
        while (srt_chan_sched_pop_request(c, &r) == 1) {
            uint32_t i;
            if (r.ticket <= last_ticket)
                bad_order = 1;
            last_ticket = r.ticket;
            for (i = 0; i < r.n_prompt && i < (uint32_t)r.rq->sampling.max_tokens; i++) {
                int32_t id = r.prompt[r.n_prompt - 1 - i];
                float lp = -0.5f * (float)i;
                int32_t top[2] = { id, id + 1 };
                float toplp[2] = { lp, lp - 1.0f };
                if (srt_chan_sched_is_aborted(c, r.slot, r.gen))
                    break;
                srt_chan_sched_push_tokens(c, r.slot, r.gen, &id, &lp, 1, top, toplp, 2);
                srt_chan_sched_flush(c);
            }
            srt_chan_sched_finish(c, r.slot, r.gen,
                                  srt_chan_sched_is_aborted(c, r.slot, r.gen)
                                      ? SRT_FINISH_ABORT : SRT_FINISH_LENGTH,
                                  -1, 3, NULL);
            srt_chan_sched_flush(c);
            served++;
        }
    }
    srt_chan_detach(c);
    _exit(expect_order && bad_order ? 12 : 0);
}

/* Children die with the test, even when a timeout kills it mid-way. */
static void child_dies_with_parent(pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
}

static pid_t spawn(void (*fn)(int, int), int a, int b)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        child_dies_with_parent(parent);
        fn(a, b);
    }
    return pid;
}

/* Test only: wait (bounded) for a forked scheduler to come up. */
static void wait_ready(srt_chan *c)
{
    int i;
    for (i = 0; i < 10000; i++) {
        if (srt_chan_sched_state_get(c, NULL, 0) == SRT_CHAN_SCHED_READY)
            return;
        usleep(1000);
    }
    printf("Bail out! a forked scheduler never became ready\n");
    exit(1);
}

/* A lock key of this run only: concurrent runs of this test must not meet. */
static char lock_key[64];

static int reap(pid_t pid)
{
    int st = 0;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_layout(void)
{
    srt_err err;
    srt_chan *c = make_chan(4, 64, 0);
    char junk[256];
    ok(c != NULL, "format + attach");
    ok(strcmp(srt_chan_get_config(c)->model_path, "/models/x.gguf") == 0, "config round-trips");
    memset(junk, 0x5a, sizeof(junk));
    ok(srt_chan_attach(junk, sizeof(junk), &err) == NULL && strstr(err.msg, "channel"),
       "attach refuses memory that is not a channel: %s", err.msg);
    ok(srt_chan_attach(mem, 100, &err) == NULL, "attach refuses a short mapping");
    {
        srt_chan_config bad;
        memset(&bad, 0, sizeof(bad));
        ok(srt_chan_format(junk, sizeof(junk), &bad, &err) == SRT_ERROR, "zero slots refused");
        bad.slots = 4;
        bad.slot_tokens = 1024;
        ok(srt_chan_format(junk, sizeof(junk), &bad, &err) == SRT_ERROR,
           "too little memory refused: %s", err.msg);
    }
    {
        /* doorbells and locks are files in a 0700 directory, never abstract names that any
         * local user could bind first */
        srt_chan_config nd = *srt_chan_get_config(c);
        size_t sz = srt_chan_size(&nd);
        void *m2 = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        char bell[SRT_CHAN_SOCK_DIR_MAX + 64];
        struct stat st;
        int fd;
        nd.sock_dir[0] = 0;
        ok(srt_chan_format(m2, sz, &nd, &err) == SRT_ERROR && strstr(err.msg, "sock_dir"),
           "a channel without a sock_dir is refused: %s", err.msg);
        snprintf(nd.sock_dir, sizeof(nd.sock_dir), "relative/dir");
        ok(srt_chan_format(m2, sz, &nd, &err) == SRT_ERROR, "a relative sock_dir is refused");
        memset(nd.sock_dir, 'x', sizeof(nd.sock_dir));
        nd.sock_dir[0] = '/';
        ok(srt_chan_format(m2, sz, &nd, &err) == SRT_ERROR, "an unterminated sock_dir is refused");
        munmap(m2, sz);
        ok(stat(chan_dir_path, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700,
           "the test's sock_dir %s is a 0700 directory", chan_dir_path);
        fd = srt_chan_worker_open(c, &err);
        snprintf(bell, sizeof(bell), "%s/%016llx-w%d", chan_dir_path,
                 (unsigned long long)srt_chan_id(c), (int)getpid());
        ok(fd >= 0 && stat(bell, &st) == 0 && S_ISSOCK(st.st_mode),
           "the worker's doorbell is a socket file in it: %s", bell);
    }
    {
        /* reload: new directive values into the live channel, same geometry only */
        srt_chan_config nc = *srt_chan_get_config(c);
        snprintf(nc.model_path, sizeof(nc.model_path), "/models/y.gguf");
        nc.max_queued_requests = 7;
        nc.mem_fraction_static = 0.5f;
        ok(srt_chan_reconfigure(c, &nc, &err) == SRT_OK, "reconfigure with the same geometry");
        ok(strcmp(srt_chan_get_config(c)->model_path, "/models/y.gguf") == 0 &&
           srt_chan_get_config(c)->max_queued_requests == 7 &&
           srt_chan_get_config(c)->mem_fraction_static == 0.5f, "the new values are what the channel holds");
        nc.slot_tokens = 128;
        ok(srt_chan_reconfigure(c, &nc, &err) == SRT_ERROR && strstr(err.msg, "geometry"),
           "another geometry is refused: %s", err.msg);
        is_int(srt_chan_get_config(c)->slot_tokens, 64, "and leaves the channel as it was");
    }
    srt_chan_detach(c);
}

static void test_down_and_full(void)
{
    srt_chan *c = make_chan(3, 32, 2);
    srt_request sp = greedy(4);
    int32_t prompt[4] = { 1, 2, 3, 4 }, big[40] = { 0 };
    uint32_t slot, gen, s2, g2, s3, g3;
    srt_chan_stats st;

    is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &slot, &gen), SRT_CHAN_SUBMIT_DOWN,
           "no scheduler yet: DOWN");
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, "ok", NULL);
    is_int(srt_chan_submit(c, big, 40, &sp, 0, &slot, &gen), SRT_CHAN_SUBMIT_TOO_LONG,
           "prompt larger than a slot: TOO_LONG");
    is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &slot, &gen), SRT_CHAN_SUBMIT_OK, "submit 1");
    is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &s2, &g2), SRT_CHAN_SUBMIT_OK, "submit 2");
    is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &s3, &g3), SRT_CHAN_SUBMIT_FULL,
           "max_queued_requests=2 reached: FULL");
    srt_chan_stats_get(c, &st);
    is_int(st.queued, 2, "two queued");
    is_int(st.rejected_full, 1, "one rejection counted");
    srt_chan_release(c, slot, gen);
    srt_chan_release(c, s2, g2);
    srt_chan_stats_get(c, &st);
    is_int(st.queued + st.slots_used, 0, "withdrawn queued requests free their slots");
    srt_chan_detach(c);

    /* The queue limit counts what the scheduler cannot take: with max_running 1 and
     * max_queued 1, two requests arriving before it took either are both admitted. */
    c = make_chan(4, 32, 1);
    {
        srt_chan_model_info info;
        uint32_t s4, g4;
        memset(&info, 0, sizeof info);
        info.max_running_requests = 1;
        srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, NULL, &info);
        is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &slot, &gen), SRT_CHAN_SUBMIT_OK,
               "max_running 1, max_queued 1: the first");
        is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &s2, &g2), SRT_CHAN_SUBMIT_OK,
               "... and the second before the scheduler took the first (it will run one)");
        is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &s3, &g3), SRT_CHAN_SUBMIT_FULL,
               "... the third is over running + queued: FULL, though slots are free");
        srt_chan_stats_get(c, &st);
        ok(st.slots_used == 2 && st.slots_total == 4, "two of four slots used");
        srt_chan_release(c, slot, gen);
        is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &s4, &g4), SRT_CHAN_SUBMIT_OK,
               "one withdrawn: room again");
        srt_chan_release(c, s2, g2);
        srt_chan_release(c, s4, g4);
    }
    srt_chan_detach(c);

    /* No queue limit: the slots themselves are the bound. */
    c = make_chan(2, 32, 0);
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, "ok", NULL);
    is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &slot, &gen), SRT_CHAN_SUBMIT_OK, "slot 1 of 2");
    is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &s2, &g2), SRT_CHAN_SUBMIT_OK, "slot 2 of 2");
    is_int(srt_chan_submit(c, prompt, 4, &sp, 0, &s3, &g3), SRT_CHAN_SUBMIT_FULL,
           "all slots busy: FULL");
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_FAILED, "model load failed", NULL);
    {
        srt_chan_output o;
        srt_chan_read(c, slot, gen, &o);
        ok(o.finish == SRT_FINISH_ERROR && strstr(o.errmsg, "load failed"),
           "FAILED fails the queued requests with the message (%s)", o.errmsg);
    }
    srt_chan_detach(c);
}

static void test_order_and_tokens(void)
{
    srt_chan *c = make_chan(8, 64, 0);
    srt_err err;
    int fd = srt_chan_worker_open(c, &err);
    srt_request sp = greedy(16);
    uint32_t slot[5], gen[5];
    int i, bad = 0;
    pid_t sched;

    ok(fd >= 0, "worker doorbell bound");
    sp.sampling.logprobs = 1;
    sp.sampling.top_logprobs = 2;
    /* Queue before the scheduler exists (hand-over), so it sees all five at once. */
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_HANDOVER, "restarting", NULL);
    for (i = 0; i < 5; i++) {
        int32_t p[3] = { 100 * i + 1, 100 * i + 2, 100 * i + 3 };
        if (srt_chan_submit(c, p, 3, &sp, 0, &slot[i], &gen[i]) != SRT_CHAN_SUBMIT_OK)
            bad++;
    }
    is_int(bad, 0, "HANDOVER accepts submissions");
    sched = spawn(echo_scheduler, 5, 1);
    for (i = 0; i < 5; i++) {
        srt_chan_output o;
        int32_t tid[4];
        float tlp[4];
        if (wait_done(c, fd, slot[i], gen[i], &o) != 0) {
            bad++;
            continue;
        }
        if (o.n_out != 3 || o.ids[0] != 100 * i + 3 || o.ids[2] != 100 * i + 1
            || o.finish != SRT_FINISH_LENGTH || o.cached_tokens != 3
            || o.logprobs[1] != -0.5f)
            bad++;
        if (srt_chan_read_top(c, slot[i], gen[i], 2, tid, tlp, 4) != 2 || tid[1] != 100 * i + 2
            || tlp[1] != -2.0f)
            bad++;
        srt_chan_release(c, slot[i], gen[i]);
    }
    is_int(bad, 0, "5 requests: reversed prompt, logprobs, top-logprobs, finish, cached tokens");
    is_int(reap(sched), 0, "scheduler popped in submission (FIFO) order");
    {
        srt_chan_stats st;
        srt_chan_stats_get(c, &st);
        is_int(st.slots_used, 0, "all slots free again");
        is_int(st.completed, 5, "5 completed");
    }
    srt_chan_detach(c);
}

static void test_generation_reuse(void)
{
    srt_chan *c = make_chan(1, 32, 0);
    srt_err err;
    int fd = srt_chan_worker_open(c, &err);
    srt_request sp = greedy(2);
    int32_t p[2] = { 7, 8 };
    uint32_t s1, g1, s2, g2;
    srt_chan_output o;
    pid_t sched;

    sched = spawn(echo_scheduler, 2, 0);
    wait_ready(c);
    ok(srt_chan_submit(c, p, 2, &sp, 0, &s1, &g1) == SRT_CHAN_SUBMIT_OK, "submit A");
    ok(wait_done(c, fd, s1, g1, &o) == 0 && o.n_out == 2, "A done");
    srt_chan_release(c, s1, g1);
    ok(srt_chan_submit(c, p, 2, &sp, 0, &s2, &g2) == SRT_CHAN_SUBMIT_OK, "submit B");
    ok(s2 == s1 && g2 == g1 + 1, "B reuses the slot with the next generation (%u -> %u)", g1, g2);
    ok(srt_chan_read(c, s1, g1, &o) == SRT_ERROR, "A's stale handle no longer reads");
    srt_chan_release(c, s1, g1); /* a stale release must not touch B */
    ok(wait_done(c, fd, s2, g2, &o) == 0 && o.n_out == 2, "B done despite A's stale release");
    ok(srt_chan_sched_finish(c, s1, g1, SRT_FINISH_STOP, -1, 0, NULL) == SRT_ERROR,
       "finish with a stale generation is refused");
    ok(srt_chan_sched_is_aborted(c, s1, g1) == 1, "a stale handle reads as aborted");
    srt_chan_release(c, s2, g2);
    is_int(reap(sched), 0, "scheduler exits cleanly");
    srt_chan_detach(c);
}

/* Scheduler that takes one request and streams slowly until aborted. */
static void slow_scheduler(int unused1, int unused2)
{
    srt_err err;
    srt_chan *c = srt_chan_attach(mem, mem_size, &err);
    srt_chan_req r;
    int steps = 0;
    if (c == NULL || srt_chan_sched_open(c, &err) != SRT_OK)
        _exit(10);
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, "ready", NULL);
    while (srt_chan_sched_pop_request(c, &r) == 0)
        srt_chan_sched_wait(c, 1000);
    for (;;) {
        int32_t id = steps;
        if (srt_chan_sched_is_aborted(c, r.slot, r.gen))
            break;
        if (steps < 1000)
            srt_chan_sched_push_tokens(c, r.slot, r.gen, &id, NULL, 1, NULL, NULL, 0);
        steps++;
        srt_chan_sched_wait(c, 5); /* a model step */
        if (steps > 5000)
            _exit(13); /* never saw the abort */
    }
    if (srt_chan_sched_finish(c, r.slot, r.gen, SRT_FINISH_ABORT, -1, 0, NULL) != SRT_OK)
        _exit(14);
    srt_chan_detach(c);
    _exit(0);
}

static void test_abort(void)
{
    srt_chan *c = make_chan(2, 2048, 0);
    srt_err err;
    int fd = srt_chan_worker_open(c, &err);
    srt_request sp = greedy(1000);
    int32_t p[2] = { 1, 2 };
    uint32_t s, g;
    srt_chan_output o;
    srt_chan_stats st;
    pid_t sched = spawn(slow_scheduler, 0, 0);
    int i;

    wait_ready(c);
    ok(srt_chan_submit(c, p, 2, &sp, 0, &s, &g) == SRT_CHAN_SUBMIT_OK, "submit long request");
    for (i = 0; i < 100; i++) {
        wait_bell(c, fd, 2000);
        srt_chan_read(c, s, g, &o);
        if (o.n_out >= 3)
            break;
    }
    ok(o.n_out >= 3 && o.finish == SRT_FINISH_NONE, "streaming (%u tokens so far)", o.n_out);
    srt_chan_release(c, s, g); /* client went away mid-stream */
    is_int(reap(sched), 0, "scheduler saw the abort and finished the slot");
    srt_chan_stats_get(c, &st);
    is_int(st.slots_used, 0, "aborted slot freed by the scheduler's finish");
    is_int(st.aborted, 1, "counted as aborted");
    srt_chan_detach(c);
}

/* A worker that submits two requests and dies without releasing them. */
static void doomed_worker(int unused1, int unused2)
{
    srt_err err;
    srt_chan *c = srt_chan_attach(mem, mem_size, &err);
    srt_request sp = greedy(1000);
    int32_t p[2] = { 1, 2 };
    uint32_t s, g;
    srt_chan_submit(c, p, 2, &sp, 0, &s, &g);
    srt_chan_submit(c, p, 2, &sp, 0, &s, &g);
    kill(getpid(), SIGKILL);
    _exit(1);
}

static void test_dead_worker(void)
{
    srt_chan *c = make_chan(4, 64, 0), *sc;
    srt_err err;
    srt_chan_req r;
    srt_chan_stats st;
    int32_t id = 5;
    pid_t w;

    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, "ok", NULL);
    sc = srt_chan_attach(mem, mem_size, &err);
    ok(srt_chan_sched_open(sc, &err) == SRT_OK, "scheduler role taken");
    w = spawn(doomed_worker, 0, 0);
    is_int(reap(w), 128 + SIGKILL, "worker killed with 2 requests in flight");
    ok(srt_chan_sched_pop_request(sc, &r) == 1, "one of them is running");
    ok(srt_chan_sched_push_tokens(sc, r.slot, r.gen, &id, NULL, 1, NULL, NULL, 0) == SRT_OK,
       "tokens pushed for the dead worker");
    is_int(srt_chan_sched_reclaim(sc), 2, "reclaim finds both slots of the dead pid");
    ok(srt_chan_sched_is_aborted(sc, r.slot, r.gen), "running one is marked aborted");
    ok(srt_chan_sched_finish(sc, r.slot, r.gen, SRT_FINISH_ABORT, -1, 0, NULL) == SRT_OK,
       "scheduler finishes it");
    srt_chan_stats_get(sc, &st);
    is_int(st.slots_used, 0, "no slot leaked");
    srt_chan_detach(sc);
    srt_chan_detach(c);
}

static void test_dead_scheduler_and_lock(void)
{
    srt_chan *c = make_chan(4, 64, 0), *sup;
    srt_err err;
    int fd = srt_chan_worker_open(c, &err);
    srt_request sp = greedy(1000);
    int32_t p[2] = { 1, 2 };
    uint32_t s, g, s2, g2;
    srt_chan_output o;
    pid_t sched = spawn(slow_scheduler, 0, 0), second;
    int i;

    wait_ready(c);
    ok(srt_chan_submit(c, p, 2, &sp, 0, &s, &g) == SRT_CHAN_SUBMIT_OK, "submit");
    for (i = 0; i < 50; i++) {
        wait_bell(c, fd, 2000);
        srt_chan_read(c, s, g, &o);
        if (o.n_out >= 1)
            break;
    }
    /* A second scheduler must wait for the first to die before owning the channel. */
    second = spawn(echo_scheduler, 1, 0);
    usleep(100000);
    is_int(srt_chan_sched_pid(c), sched, "second scheduler blocked: first still owns the model");
    kill(sched, SIGKILL);
    reap(sched);
    sup = srt_chan_attach(mem, mem_size, &err);
    srt_chan_sched_crashed(sup, sched, "scheduler died (signal 9)");
    i = wait_done(c, fd, s, g, &o);
    /* The successor, already waiting on the model lock, may reclaim the slot before the
     * supervisor marks it: either way the request fails with a reason, never hangs. */
    ok(i == 0 && o.finish == SRT_FINISH_ERROR &&
       (strstr(o.errmsg, "signal 9") || strstr(o.errmsg, "scheduler process exited")),
       "in-flight request fails with the supervisor's or the successor's reason: %s", o.errmsg);
    srt_chan_release(c, s, g);
    for (i = 0; i < 2000 && srt_chan_sched_state_get(c, NULL, 0) != SRT_CHAN_SCHED_READY; i++)
        usleep(1000);
    ok(srt_chan_sched_pid(c) == second, "second scheduler took over after the first died");
    sp.sampling.max_tokens = 2;
    is_int(srt_chan_submit(c, p, 2, &sp, 0, &s2, &g2), SRT_CHAN_SUBMIT_OK, "submit again");
    ok(wait_done(c, fd, s2, g2, &o) == 0 && o.finish == SRT_FINISH_LENGTH && o.n_out == 2,
       "the new scheduler serves it");
    srt_chan_release(c, s2, g2);
    is_int(reap(second), 0, "second scheduler exits cleanly");
    srt_chan_detach(sup);
    srt_chan_detach(c);
}

static srt_chan *stop_chan;
static void on_term(int sig) { srt_chan_sched_request_stop(stop_chan, sig == SIGQUIT ? 1 : 2); }

static void stoppable_scheduler(int generation, int unused2)
{
    srt_err err;
    srt_chan *c = srt_chan_attach(mem, mem_size, &err);
    struct sigaction sa;
    stop_chan = c;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_term;
    sigaction(SIGQUIT, &sa, NULL);
    if (c == NULL)
        _exit(10);
    srt_chan_sched_set_generation(c, (uint32_t)generation);
    if (srt_chan_sched_open(c, &err) != SRT_OK)
        _exit(10);
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, "ready", NULL);
    while (!srt_chan_sched_stopping(c))
        srt_chan_sched_wait(c, -1);
    srt_chan_sched_close(c);
    _exit(srt_chan_sched_stopping(c) == 1 ? 0 : 20);
}

static void test_stop(void)
{
    srt_chan *c = make_chan(2, 32, 0);
    uint32_t gen = srt_chan_adopt(c);
    pid_t sched = spawn(stoppable_scheduler, (int)gen, 0);
    srt_request sp = greedy(1);
    int32_t p[1] = { 1 };
    uint32_t s, g;
    wait_ready(c);
    srt_chan_adopt(c);      /* a reload: a newer configuration takes the channel */
    kill(sched, SIGQUIT);
    is_int(reap(sched), 0, "graceful stop wakes a scheduler blocked in wait(-1)");
    is_int(srt_chan_sched_state_get(c, NULL, 0), SRT_CHAN_SCHED_HANDOVER,
           "graceful stop after a reload adopted the channel leaves HANDOVER for the successor");
    is_int(srt_chan_submit(c, p, 1, &sp, 0, &s, &g), SRT_CHAN_SUBMIT_OK,
           "requests queue during the hand-over");
    srt_chan_detach(c);

    /* quit (or a reload that gave the model a new channel): no successor will come */
    c = make_chan(2, 32, 0);
    gen = srt_chan_adopt(c);
    sched = spawn(stoppable_scheduler, (int)gen, 0);
    wait_ready(c);
    is_int(srt_chan_submit(c, p, 1, &sp, 0, &s, &g), SRT_CHAN_SUBMIT_OK, "a request queued before the quit");
    kill(sched, SIGQUIT);
    is_int(reap(sched), 0, "the scheduler stops gracefully on quit");
    is_int(srt_chan_sched_state_get(c, NULL, 0), SRT_CHAN_SCHED_DOWN,
           "graceful stop with no newer configuration publishes DOWN, not HANDOVER");
    srt_chan_output o;
    is_int(srt_chan_read(c, s, g, &o) == SRT_OK && o.finish == SRT_FINISH_ERROR, 1,
           "the queued request is failed, not left waiting for a successor");
    srt_chan_release(c, s, g);
    is_int(srt_chan_submit(c, p, 1, &sp, 0, &s, &g), SRT_CHAN_SUBMIT_DOWN,
           "submissions after the quit are refused");
    srt_chan_detach(c);
}

static void test_state_ring(void)
{
    srt_chan *c = make_chan(2, 32, 0);
    srt_err err;
    int fd = srt_chan_worker_open(c, &err);
    struct pollfd p = { fd, POLLIN, 0 };
    is_int(poll(&p, 1, 0), 0, "doorbell quiet before any state change");
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, "ready", NULL);
    is_int(poll(&p, 1, 1000), 1, "a state change (model ready) rings registered workers");
    srt_chan_worker_drain(c);
    is_int(poll(&p, 1, 0), 0, "drained");
    srt_chan_detach(c);
}

/* A writer process publishing constantly; readers must never see a torn copy. */
static void metrics_writer(int rounds, int unused)
{
    srt_err err;
    srt_chan *c = srt_chan_attach(mem, mem_size, &err);
    char text[4096];
    int i;
    for (i = 0; i < rounds; i++) {
        int len = 100 + (i * 37) % 3000;
        memset(text, 'a' + i % 26, (size_t)len);
        srt_chan_sched_publish_metrics(c, text, (size_t)len);
    }
    _exit(0);
}

static void test_metrics(void)
{
    srt_chan *c = make_chan(2, 32, 0);
    char buf[4096];
    int i, torn = 0, seen = 0, empty = 0;
    pid_t w;
    is_int(srt_chan_metrics_read(c, buf, sizeof(buf)), 0, "no metrics before the first publish");
    srt_chan_sched_publish_metrics(c, "srt:x 1\n", 8);
    ok(srt_chan_metrics_read(c, buf, sizeof(buf)) == 8 && memcmp(buf, "srt:x 1\n", 8) == 0,
       "published metrics read back");
    w = spawn(metrics_writer, 200000, 0);
    /* read for as long as the writer writes */
    for (i = 0; waitpid(w, NULL, WNOHANG) == 0; i++) {
        size_t n = srt_chan_metrics_read(c, buf, sizeof(buf)), k;
        empty += n == 0;   /* something was published: a read must always find it */
        if (n == 0 || (n == 8 && memcmp(buf, "srt:x 1\n", 8) == 0))
            continue; /* nothing from the writer yet */
        seen++;
        for (k = 1; k < n; k++)
            if (buf[k] != buf[0]) {
                torn++;
                break;
            }
    }
    ok(seen > 0 && torn == 0, "%d reads concurrent with the writer, none torn", seen);
    is_int(empty, 0, "no read came back empty while the writer wrote (a reader never waits on it)");
    srt_chan_detach(c);
}

/* Holds the model lock `key` on its own channel until killed. */
static void key_holder(int unused1, int unused2)
{
    srt_err err;
    srt_chan *c = srt_chan_attach(mem, mem_size, &err);
    srt_chan_sched_set_lock_key(c, lock_key);
    if (srt_chan_sched_open(c, &err) != SRT_OK)
        _exit(10);
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, "ready", NULL);
    for (;;)
        srt_chan_sched_wait(c, -1);
}

static void test_key_lock(void)
{
    srt_chan *c1 = make_chan(2, 32, 0), *c2;
    void *mem1 = mem;
    size_t size1 = mem_size;
    srt_err err;
    pid_t holder, waiter;
    snprintf(lock_key, sizeof(lock_key), "test-key-lock-%d", (int)getpid());
    holder = spawn(key_holder, 0, 0);
    wait_ready(c1);
    /* a reload that changed the geometry: a new channel, the same model */
    mem = NULL;
    c2 = make_chan(4, 64, 0);
    waiter = fork();
    if (waiter == 0) {
        srt_chan *w = srt_chan_attach(mem, mem_size, &err);
        child_dies_with_parent(getppid());
        srt_chan_sched_set_lock_key(w, lock_key);
        if (srt_chan_sched_open(w, &err) != SRT_OK)
            _exit(10);
        srt_chan_sched_set_state(w, SRT_CHAN_SCHED_READY, "ready", NULL);
        _exit(0);
    }
    usleep(200000);
    is_int(srt_chan_sched_state_get(c2, NULL, 0), SRT_CHAN_SCHED_NONE,
           "a scheduler on a new channel waits for the holder of the same model lock");
    kill(holder, SIGKILL);
    reap(holder);
    is_int(reap(waiter), 0, "it takes the lock once the holder is gone");
    is_int(srt_chan_sched_state_get(c2, NULL, 0), SRT_CHAN_SCHED_READY, "and serves");
    srt_chan_detach(c2);
    srt_chan_detach(c1);    /* the handle, before its memory goes */
    munmap(mem1, size1);
}

/* A scheduler that pops one request and dies without anyone calling srt_chan_sched_crashed. */
static void popper(int unused1, int unused2)
{
    srt_err err;
    srt_chan *c = srt_chan_attach(mem, mem_size, &err);
    srt_chan_req r;
    if (srt_chan_sched_open(c, &err) != SRT_OK || srt_chan_sched_pop_request(c, &r) != 1)
        _exit(10);
    kill(getpid(), SIGKILL);
    _exit(11);
}

static void test_unsupervised_scheduler_death(void)
{
    srt_chan *c = make_chan(2, 32, 0), *succ;
    srt_err err;
    srt_request sp = greedy(5);
    int32_t p[2] = { 1, 2 };
    uint32_t s, g;
    srt_chan_output o;
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, "ok", NULL);
    ok(srt_chan_submit(c, p, 2, &sp, 0, &s, &g) == SRT_CHAN_SUBMIT_OK, "submit");
    is_int(reap(spawn(popper, 0, 0)), 128 + SIGKILL, "its scheduler died holding it");
    srt_chan_read(c, s, g, &o);
    is_int(o.finish, SRT_FINISH_NONE, "nobody noticed yet");
    succ = srt_chan_attach(mem, mem_size, &err);
    ok(srt_chan_sched_open(succ, &err) == SRT_OK, "a successor opens the channel");
    srt_chan_read(c, s, g, &o);
    ok(o.finish == SRT_FINISH_ERROR && strstr(o.errmsg, "scheduler process exited"),
       "and fails the orphaned request at once (%s)", o.errmsg);
    srt_chan_release(c, s, g);
    srt_chan_detach(succ);
    srt_chan_detach(c);
}

/* A scheduler that answers each request at once, as the serving loop does: wait(-1), pop,
 * finish, flush. srt_chan_sched_wait caps a sleep at 1 s, so a lost wake-up shows as a stall
 * of up to a second. Stops when the channel is stopped. */
static void instant_scheduler(int spin_us, int unused)
{
    srt_err err;
    srt_chan *c = srt_chan_attach(mem, mem_size, &err);
    (void)unused;
    if (c == NULL || srt_chan_sched_open(c, &err) != SRT_OK)
        _exit(10);
    (void)spin_us;   /* read from the channel config */
    stop_chan = c;
    signal(SIGTERM, on_term);
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, "ready", NULL);
    while (!srt_chan_sched_stopping(c)) {
        srt_chan_req r;
        int32_t id = 5;
        while (srt_chan_sched_pop_request(c, &r) == 1) {
            srt_chan_sched_push_tokens(c, r.slot, r.gen, &id, NULL, 1, NULL, NULL, 0);
            srt_chan_sched_finish(c, r.slot, r.gen, SRT_FINISH_LENGTH, -1, 0, NULL);
        }
        srt_chan_sched_flush(c);
        if (srt_chan_sched_wait(c, -1) < 0)
            _exit(11);
    }
    srt_chan_detach(c);
    _exit(0);
}

static uint64_t now_ns(void) { return srt_chan_now_ns(); }

/* The submit path rings the scheduler only when it sleeps (or is about to): hit every phase of
 * its wait (awake, spinning, between the flag and poll, asleep) with varied gaps and require
 * that no request ever waits for the 1 s fallback. Also checks the hand-off time stamps. */
static void test_no_lost_wakeups(int spin_us)
{
    srt_chan_config cfg;
    srt_err err;
    srt_chan *c;
    int fd, i, n = 3000, stamps_ok = 1, done_all = 1;
    uint64_t worst = 0, sum_hand = 0;
    pid_t pid;
    unsigned seed = 12345;

    memset(&cfg, 0, sizeof(cfg));
    cfg.slots = 4;
    cfg.slot_tokens = 16;
    cfg.max_queued_requests = 4;
    cfg.sched_spin_us = spin_us;
    chan_dir_set(&cfg);
    if (mem)
        munmap(mem, mem_size);
    mem_size = srt_chan_size(&cfg);
    mem = mmap(NULL, mem_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED || srt_chan_format(mem, mem_size, &cfg, &err) != SRT_OK) {
        printf("Bail out! cannot make channel\n");
        exit(1);
    }
    c = srt_chan_attach(mem, mem_size, &err);
    fd = srt_chan_worker_open(c, &err);
    pid = spawn(instant_scheduler, spin_us, 0);
    wait_ready(c);
    for (i = 0; i < n; i++) {
        int32_t p[2] = { 1, 2 };
        srt_request sp = greedy(1);
        srt_chan_output o;
        uint32_t s, g;
        uint64_t t0, dt;
        /* gaps from 0 to ~400 us: inside and beyond a spin window, around the sleep */
        unsigned gap = (seed = seed * 1103515245u + 12345u) >> 16;
        gap %= 5;
        if (gap == 1)
            sched_yield();
        else if (gap >= 2)
            usleep((useconds_t)((gap - 1) * 100));
        t0 = now_ns();
        if (srt_chan_submit(c, p, 2, &sp, 0, &s, &g) != SRT_CHAN_SUBMIT_OK
            || wait_done(c, fd, s, g, &o) != 0) {
            done_all = 0;
            break;
        }
        dt = now_ns() - t0;
        if (dt > worst)
            worst = dt;
        if (dt > 400u * 1000 * 1000) {
            srt_chan_release(c, s, g);
            i++;
            break;   /* a lost wake-up: one is enough, do not wait out the rest */
        }
        if (o.t_submit_ns == 0 || o.t_pop_ns < o.t_submit_ns || o.t_done_ns < o.t_pop_ns
            || o.t_submit_ns < t0)
            stamps_ok = 0;
        sum_hand += o.t_pop_ns - o.t_submit_ns;
        srt_chan_release(c, s, g);
    }
    ok(done_all && i >= n, "spin %d us: %d requests answered", spin_us, i);
    ok(worst < 400u * 1000 * 1000,
       "spin %d us: no request waited for the 1 s fallback (worst %.1f ms)", spin_us, worst / 1e6);
    ok(stamps_ok, "spin %d us: submit <= pop <= done stamps (mean hand-off %.1f us)", spin_us,
       i ? sum_hand / 1e3 / i : 0.0);
    kill(pid, SIGTERM);
    ok(reap(pid) == 0, "spin %d us: scheduler stopped cleanly", spin_us);
    srt_chan_detach(c);
}

int main(void)
{
    test_no_lost_wakeups(0);
    test_no_lost_wakeups(200);
    test_unsupervised_scheduler_death();
    test_key_lock();
    test_metrics();
    test_state_ring();
    test_layout();
    test_down_and_full();
    test_order_and_tokens();
    test_generation_reuse();
    test_abort();
    test_dead_worker();
    test_dead_scheduler_and_lock();
    test_stop();
    return tap_done();
}
