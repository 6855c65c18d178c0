/* srt-bench-tp: tensor parallelism on the CPU communicator, no HTTP.
 *
 *   srt-bench-tp MODEL TP [--steps N] [--batch B] [--prompt P] [--threads T] [--reduces R]
 *
 * Runs the scheduler's rank group (src/sched/tp_group.c: forked ranks, per-step batch
 * broadcast) at TP ranks (1: a plain runner): a prefill of P tokens for each of B sequences,
 * then N greedy decode steps of B tokens. Then, in a fresh group, R all-reduces of one decode
 * step's hidden state (B x hidden floats), the collective o_proj and down_proj run twice per
 * layer and the vocab-parallel embedding once per step, and R all-gathers of one rank's logit
 * slice (B x ceil(vocab/TP) floats), lm_head's once per step. Prints one line: decode tokens/s,
 * ms per step, and the collectives' cost per step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sched/tp_group.h"
#include "srt/sampling.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* seconds per all-reduce of n floats (gather: all-gather of n floats per rank) across tp processes */
static double collective_cost(int tp, size_t n, int gather, int reps, srt_err *err)
{
    srt_cpu_comm_group *g = srt_cpu_comm_group_create(tp, 1 << 20, err);
    if (!g)
        return -1;
    pid_t pids[16];
    for (int r = 1; r < tp; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            srt_err e;
            srt_comm *c = srt_cpu_comm_join(g, r, &e);
            float *buf = calloc(n, sizeof(float)), *all = calloc(n * (size_t)tp, sizeof(float));
            int ok = c && buf && all;
            for (int i = 0; ok && i < reps + 10; i++)
                ok = (gather ? srt_comm_all_gather_f32(c, buf, n, all, &e) : srt_comm_all_reduce_sum_f32(c, buf, n, &e)) ==
                     SRT_OK;
            _exit(ok ? 0 : 1);
        }
    }
    srt_comm *c = srt_cpu_comm_join(g, 0, err);
    float *buf = calloc(n, sizeof(float)), *all = calloc(n * (size_t)tp, sizeof(float));
    double t0 = 0, dt = -1;
    int ok = c && buf && all;
    for (int i = 0; ok && i < reps + 10; i++) {
        if (i == 10)
            t0 = now_s();
        ok = (gather ? srt_comm_all_gather_f32(c, buf, n, all, err) : srt_comm_all_reduce_sum_f32(c, buf, n, err)) ==
             SRT_OK;
    }
    if (ok)
        dt = (now_s() - t0) / reps;
    for (int r = 1; r < tp; r++)
        waitpid(pids[r], NULL, 0);
    free(buf);
    free(all);
    srt_comm_destroy(c);
    srt_cpu_comm_group_free(g);
    return dt;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: srt-bench-tp MODEL TP [--steps N] [--batch B] [--prompt P] [--threads T] [--reduces R]\n");
        return 2;
    }
    const char *path = argv[1];
    int tp = atoi(argv[2]), steps = 64, batch = 1, plen = 16, threads = 1, reduces = 2000;
    for (int i = 3; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--steps")) steps = v;
        else if (!strcmp(argv[i], "--batch")) batch = v;
        else if (!strcmp(argv[i], "--prompt")) plen = v;
        else if (!strcmp(argv[i], "--threads")) threads = v;
        else if (!strcmp(argv[i], "--reduces")) reduces = v;
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (tp < 1 || tp > 8 || batch < 1 || batch > 64 || plen < 1 || steps < 1 || plen + steps > 4096) {
        fprintf(stderr, "srt-bench-tp: bad arguments\n");
        return 2;
    }
    srt_err err = { { 0 } };
    srt_tp_group *g = NULL;
    srt_model *m = NULL;
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL;
    srt_tp_group_opts go = { .size = tp, .model_path = path, .n_threads = threads };
    if (tp > 1 && srt_tp_group_start(&go, &g, &err) != SRT_OK)
        goto fail;
    if (srt_model_load(path, &m, &err) != SRT_OK)
        goto fail;
    const srt_model_config *mc = srt_model_config_of(m);
    int ctx = plen + steps, n_slots = batch * ctx;
    srt_runner_opts ro = { .max_batch_tokens = batch * plen, .max_seqs = batch, .n_threads = threads };
    if (g ? srt_tp_group_setup(g, m, &ro, n_slots, &r, &kv, &err) != SRT_OK
          : (srt_runner_create(m, &ro, &r, &err) != SRT_OK ||
             srt_kv_pool_create(mc, n_slots, SRT_F32, &kv, &err) != SRT_OK))
        goto fail;

    int32_t *slots = malloc(sizeof(int32_t) * (size_t)n_slots), *pos = malloc(sizeof(int32_t) * (size_t)ctx);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(batch * plen)), *bpos = malloc(sizeof(int32_t) * (size_t)(batch * plen));
    int32_t *bslot = malloc(sizeof(int32_t) * (size_t)(batch * plen)), *start = malloc(sizeof(int32_t) * (size_t)(batch + 1));
    int32_t *len = malloc(sizeof(int32_t) * (size_t)batch), *next = malloc(sizeof(int32_t) * (size_t)batch);
    const int32_t **ss = malloc(sizeof(*ss) * (size_t)batch);
    float *logits = malloc(sizeof(float) * (size_t)batch * (size_t)mc->vocab_size);
    for (int i = 0; i < n_slots; i++)
        slots[i] = i;
    for (int i = 0; i < ctx; i++)
        pos[i] = i;
    for (int s = 0; s < batch; s++) {
        ss[s] = slots + (size_t)s * ctx;
        start[s] = s * plen;
        len[s] = plen;
        for (int i = 0; i < plen; i++) {
            ids[s * plen + i] = (int32_t)((s * 131 + i * 17 + 3) % mc->vocab_size);
            bpos[s * plen + i] = i;
            bslot[s * plen + i] = ss[s][i];
        }
    }
    start[batch] = batch * plen;
    srt_forward_batch b = { .n_tokens = batch * plen, .token_ids = ids, .positions = bpos, .out_slots = bslot,
                            .n_seqs = batch, .seq_start = start, .seq_len = len, .seq_slots = ss, .forward_mode = 1 };
    double t0 = now_s();
    if ((g ? srt_tp_group_forward(g, r, kv, &b, logits, &err) : srt_runner_forward(r, kv, &b, logits, &err)) != SRT_OK)
        goto fail;
    double t_prefill = now_s() - t0;
    t0 = now_s();
    for (int step = 0; step < steps; step++) {
        for (int s = 0; s < batch; s++) {
            next[s] = srt_argmax(logits + (size_t)s * mc->vocab_size, mc->vocab_size);
            start[s] = s;
            bpos[s] = len[s];
            bslot[s] = ss[s][len[s]];
            len[s]++;
        }
        start[batch] = batch;
        srt_forward_batch d = { .n_tokens = batch, .token_ids = next, .positions = bpos, .out_slots = bslot,
                                .n_seqs = batch, .seq_start = start, .seq_len = len, .seq_slots = ss, .forward_mode = 2 };
        if ((g ? srt_tp_group_forward(g, r, kv, &d, logits, &err) : srt_runner_forward(r, kv, &d, logits, &err)) != SRT_OK)
            goto fail;
    }
    double t_decode = now_s() - t0;
    srt_kv_pool_free(kv);
    srt_runner_free(r);
    kv = NULL, r = NULL;
    srt_tp_group_stop(g);
    g = NULL;

    size_t n_ar = (size_t)batch * mc->hidden_size, n_ag = (size_t)batch * ((mc->vocab_size + tp - 1) / tp);
    int per_step = 2 * mc->n_layers + 1;   /* o_proj, down_proj per layer; the embedding */
    double ar = tp > 1 ? collective_cost(tp, n_ar, 0, reduces, &err) : 0;
    double ag = tp > 1 ? collective_cost(tp, n_ag, 1, reduces, &err) : 0;
    double ms_step = t_decode / steps * 1e3, ms_coll = (ar * per_step + ag) * 1e3;
    printf("tp=%d threads/rank=%d batch=%d prompt=%d steps=%d: prefill %.1f ms, decode %.1f tok/s (%.2f ms/step), "
           "all-reduce %zu floats %.1f us x %d + all-gather %zu floats/rank %.1f us per step = %.3f ms/step "
           "(%.0f%% of a step)\n",
           tp, threads, batch, plen, steps, t_prefill * 1e3, batch * steps / t_decode, ms_step, n_ar, ar * 1e6,
           per_step, n_ag, ag * 1e6, ms_coll, 100.0 * ms_coll / ms_step);
    srt_model_free(m);
    return 0;
fail:
    fprintf(stderr, "srt-bench-tp: %s\n", err.msg);
    srt_kv_pool_free(kv);
    srt_runner_free(r);
    srt_tp_group_stop(g);
    srt_model_free(m);
    return 1;
}
