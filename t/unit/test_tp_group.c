/* The scheduler's tensor-parallel rank group (src/sched/tp_group.c):
 *   - the batch wire form round-trips, and corrupt messages are refused;
 *   - rank processes forked before the model loads, fed each step by rank 0's batch
 *     broadcast, give the tp=1 logits and greedy tokens at tp=2 and tp=4 (tiny llama with
 *     8 heads / 4 KV heads and a vocabulary of 97, so the vocab-parallel embedding and lm_head
 *     have a short last shard; F32, CPU communicator);
 *   - kill -9 of a rank: the next forward and srt_tp_group_check fail with the rank named,
 *     instead of hanging; stopping reaps every rank. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hooks/registry.h"
#include "sched/tp_group.h"
#include "srt/sampling.h"
#include "tap.h"
#include "tiny_model_writer.h"

#define STEPS 5
#define NP    9

static void test_wire(void)
{
    int32_t ids[3] = { 5, 6, 7 }, pos[3] = { 0, 1, 0 }, out[3] = { 10, 11, 12 };
    int32_t start[3] = { 0, 2, 3 }, len[2] = { 2, 4 }, s0[2] = { 10, 11 }, s1[4] = { 1, 2, 3, 12 }, rows[1] = { 1 };
    uint64_t rid[3] = { 1, 1, 99 };
    const int32_t *ss[2] = { s0, s1 };
    srt_forward_batch b = { .n_tokens = 3, .token_ids = ids, .positions = pos, .out_slots = out, .n_seqs = 2,
                            .seq_start = start, .seq_len = len, .seq_slots = ss, .request_ids = rid,
                            .forward_mode = 2, .n_logit_rows = 1, .logit_rows = rows };
    size_t n = srt_tp_batch_encode(&b, NULL, 0);
    uint64_t *buf = calloc(1, n + 16);
    ok(srt_tp_batch_encode(&b, buf, n) == n, "encode writes %zu bytes", n);
    srt_forward_batch d;
    const int32_t *ptrs[4];
    srt_err err = { { 0 } };
    int rc = srt_tp_batch_decode(buf, n, 4, ptrs, &d, &err);
    ok(rc == SRT_OK && d.n_tokens == 3 && d.n_seqs == 2 && d.forward_mode == 2 && d.n_logit_rows == 1 &&
       d.logit_rows[0] == 1 && d.request_ids && d.request_ids[2] == 99 && memcmp(d.token_ids, ids, 12) == 0 &&
       memcmp(d.positions, pos, 12) == 0 && memcmp(d.out_slots, out, 12) == 0 &&
       memcmp(d.seq_start, start, 12) == 0 && memcmp(d.seq_len, len, 8) == 0 &&
       memcmp(d.seq_slots[0], s0, 8) == 0 && memcmp(d.seq_slots[1], s1, 16) == 0,
       "decode gives back every array %s", err.msg);
    b.request_ids = NULL, b.logit_rows = NULL;
    size_t n2 = srt_tp_batch_encode(&b, buf, n);
    rc = srt_tp_batch_decode(buf, n2, 4, ptrs, &d, &err);
    ok(rc == SRT_OK && !d.request_ids && !d.logit_rows && n2 == n - 24 - 4, "optional arrays stay absent");
    ok(srt_tp_batch_decode(buf, n2 - 4, 4, ptrs, &d, &err) == SRT_ERROR, "a short message is refused: %s", err.msg);
    ok(srt_tp_batch_decode(buf, 8, 4, ptrs, &d, &err) == SRT_ERROR, "a message shorter than its header: %s",
       err.msg);
    ok(srt_tp_batch_decode(buf, n2, 1, ptrs, &d, &err) == SRT_ERROR, "more sequences than the runner holds: %s",
       err.msg);
    int32_t *seq_len_wire = (int32_t *)((char *)buf + 32 + 3 * 12 + 12);   /* header, 3 token arrays, seq_start */
    seq_len_wire[0] = 5;
    ok(srt_tp_batch_decode(buf, n2, 4, ptrs, &d, &err) == SRT_ERROR, "a sequence overrunning the slots: %s",
       err.msg);
    seq_len_wire[0] = 2;
    ((uint32_t *)buf)[0] ^= 1;
    ok(srt_tp_batch_decode(buf, n2, 4, ptrs, &d, &err) == SRT_ERROR, "a bad magic: %s", err.msg);
    free(buf);
}

/* prefill NP tokens then greedy decode; tp NULL: a plain runner */
static int generate(srt_model *m, srt_tp_group *tp, float *logits, int32_t *toks, char *msg)
{
    const srt_model_config *c = srt_model_config_of(m);
    srt_runner_opts o = { .max_batch_tokens = 16, .max_seqs = 2, .n_threads = 1 };
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL;
    srt_err err = { { 0 } };
    int rc = SRT_ERROR;
    int32_t slots[64], pos[64], ids[NP];
    for (int i = 0; i < 64; i++)
        slots[i] = 63 - i, pos[i] = i;
    for (int i = 0; i < NP; i++)
        ids[i] = (i * 37 + 5) % c->vocab_size;
    const int32_t *ss[1] = { slots };
    if (tp ? srt_tp_group_setup(tp, m, &o, 64, &r, &kv, &err) != SRT_OK
           : (srt_runner_create(m, &o, &r, &err) != SRT_OK ||
              srt_kv_pool_create(c, 64, SRT_F32, &kv, &err) != SRT_OK))
        goto out;
    for (int s = 0; s < STEPS; s++) {
        int32_t st[2] = { 0, s == 0 ? NP : 1 }, len = NP + s, tok = s ? toks[s - 1] : 0;
        srt_forward_batch b = { .n_tokens = st[1], .token_ids = s ? &tok : ids, .positions = pos + (s ? len - 1 : 0),
                                .out_slots = slots + (s ? len - 1 : 0), .n_seqs = 1, .seq_start = st, .seq_len = &len,
                                .seq_slots = ss, .forward_mode = s ? 2 : 1 };
        float *row = logits + (size_t)s * c->vocab_size;
        if ((tp ? srt_tp_group_forward(tp, r, kv, &b, row, &err) : srt_runner_forward(r, kv, &b, row, &err)) != SRT_OK)
            goto out;
        toks[s] = srt_argmax(row, c->vocab_size);
    }
    rc = SRT_OK;
out:
    snprintf(msg, 256, "%.200s", err.msg);
    srt_kv_pool_free(kv);
    srt_runner_free(r);
    return rc;
}

static void test_group(const char *dir, int size, const float *ref, const int32_t *ref_toks, int vocab)
{
    srt_err err = { { 0 } };
    srt_tp_group *g = NULL;
    srt_tp_group_opts o = { .size = size, .model_path = dir, .n_threads = 1 };
    char msg[256] = "";
    if (!ok(srt_tp_group_start(&o, &g, &err) == SRT_OK, "tp=%d: group starts %s", size, err.msg))
        return;
    srt_model *m = NULL;
    float *lg = calloc((size_t)STEPS * vocab, sizeof(float));
    int32_t toks[STEPS];
    int rc = srt_model_load(dir, &m, &err) == SRT_OK ? generate(m, g, lg, toks, msg) : SRT_ERROR;
    ok(rc == SRT_OK, "tp=%d: prefill + %d decode steps over the broadcast %s %s", size, STEPS - 1, msg, err.msg);
    double worst = 0;
    for (size_t i = 0; i < (size_t)STEPS * vocab; i++) {
        double d = fabs((double)lg[i] - ref[i]);
        worst = d > worst || isnan(d) ? d : worst;
    }
    ok(rc == SRT_OK && worst < 1e-4, "tp=%d: logits = tp=1 within 1e-4 (worst %.3g)", size, worst);
    ok(rc == SRT_OK && memcmp(toks, ref_toks, sizeof toks) == 0, "tp=%d: greedy tokens = tp=1", size);
    ok(srt_tp_group_check(g, &err) == SRT_OK, "tp=%d: every rank alive", size);

    if (size == 2) {
        /* a rank dies: the next step errors out naming it, it does not hang */
        pid_t victim = srt_tp_group_pid(g, 1);
        kill(victim, SIGKILL);
        int32_t tok = 1, p = 0, sl = 0, st[2] = { 0, 1 }, len = 1;
        const int32_t *ss[1] = { &sl };
        srt_forward_batch b = { .n_tokens = 1, .token_ids = &tok, .positions = &p, .out_slots = &sl, .n_seqs = 1,
                                .seq_start = st, .seq_len = &len, .seq_slots = ss };
        /* rank 0's runner is gone with generate(); the check fires before it would be used */
        usleep(100000);
        ok(srt_tp_group_forward(g, NULL, NULL, &b, lg, &err) == SRT_ERROR && strstr(err.msg, "rank 1"),
           "tp=2: after kill -9 of rank 1 the forward fails: %s", err.msg);
        ok(srt_tp_group_check(g, &err) == SRT_ERROR, "tp=2: and the check reports it: %s", err.msg);
    }
    srt_tp_group_stop(g);
    int st, left = waitpid(-1, &st, WNOHANG) > 0;
    ok(!left, "tp=%d: stop reaped every rank", size);
    srt_model_free(m);
    free(lg);
}

/* ---- per-request hooks at tp > 1: every rank applies the selection rank 0 took ---- */

#define RQ_STEPS 5

/* Two sequences in every batch: request 7 (selects "steer" with its own scale when sel != NULL)
 * and request 8 (never). Prefill both, then decode both; logits [RQ_STEPS][2][V]. */
static int generate_hooked(srt_model *m, srt_tp_group *tp, srt_hook_registry *reg, const srt_request_hooks *sel,
                           float *logits, int32_t toks[RQ_STEPS][2], char *msg)
{
    const srt_model_config *c = srt_model_config_of(m);
    srt_runner_opts o = { .max_batch_tokens = 2 * NP, .max_seqs = 2, .n_threads = 1 };
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL;
    srt_err err = { { 0 } };
    int rc = SRT_ERROR, begun = 0;
    int32_t slots[2][32], ids[2][NP + RQ_STEPS];
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < 32; i++)
            slots[q][i] = q * 32 + i;
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < NP; i++)
            ids[q][i] = (i * 37 + 5 + 11 * q) % c->vocab_size;
    if (tp ? srt_tp_group_setup(tp, m, &o, 64, &r, &kv, &err) != SRT_OK
           : (srt_runner_create(m, &o, &r, &err) != SRT_OK ||
              srt_kv_pool_create(c, 64, SRT_F32, &kv, &err) != SRT_OK))
        goto out;
    if (sel) {
        if ((tp ? srt_tp_group_request_begin(tp, reg, 7, sel, &err) : srt_hook_request_begin(reg, 7, sel, &err)) !=
            SRT_OK)
            goto out;
        begun = 1;
    }
    for (int s = 0; s < RQ_STEPS; s++) {
        int32_t tok[2 * NP], pos[2 * NP], outs[2 * NP], start[3], len[2];
        uint64_t rid[2 * NP];
        const int32_t *ss[2] = { slots[0], slots[1] };
        int T = 0;
        for (int q = 0; q < 2; q++) {
            int from = s == 0 ? 0 : NP + s - 1, n = s == 0 ? NP : 1;
            start[q] = T;
            for (int j = 0; j < n; j++, T++) {
                tok[T] = ids[q][from + j];
                pos[T] = from + j;
                outs[T] = slots[q][from + j];
                rid[T] = q == 0 ? 7 : 8;
            }
            len[q] = from + n;
        }
        start[2] = T;
        srt_forward_batch b = { .n_tokens = T, .token_ids = tok, .positions = pos, .out_slots = outs, .n_seqs = 2,
                                .seq_start = start, .seq_len = len, .seq_slots = ss, .request_ids = rid,
                                .forward_mode = s ? SRT_FORWARD_DECODE : SRT_FORWARD_PREFILL };
        float *row = logits + (size_t)s * 2 * c->vocab_size;
        if ((tp ? srt_tp_group_forward(tp, r, kv, &b, row, &err) : srt_runner_forward(r, kv, &b, row, &err)) != SRT_OK)
            goto out;
        for (int q = 0; q < 2; q++) {
            toks[s][q] = srt_argmax(row + (size_t)q * c->vocab_size, c->vocab_size);
            ids[q][len[q]] = toks[s][q];
        }
    }
    rc = SRT_OK;
out:
    if (begun) {
        if (tp)
            srt_tp_group_request_end(tp, reg, 7);
        else
            srt_hook_request_end(reg, 7);
    }
    snprintf(msg, 256, "%.200s", err.msg);
    srt_kv_pool_free(kv);
    srt_runner_free(r);
    return rc;
}

static srt_hook_registry *hooked_registry(srt_model *m, const char *spec, int rank, int size, srt_err *err)
{
    int n_mod;
    srt_module *mods = srt_model_modules(m, &n_mod);
    srt_hook_registry *reg = srt_hook_registry_create(mods, n_mod, err);
    if (reg)
        srt_hook_registry_set_tp(reg, rank, size);
    if (reg && srt_hook_registry_load_file(reg, spec, err) != SRT_OK) {
        srt_hook_registry_free(reg);
        reg = NULL;
    }
    return reg;
}

static void test_request_hooks(const char *dir)
{
    char spec[512], msg[256] = "";
    srt_err err = { { 0 } };
    snprintf(spec, sizeof spec, "%s/steer.json", dir);
    FILE *f = fopen(spec, "w");
    fprintf(f, "{\"forward_hooks\": [{\"name\": \"steer\", \"per_request\": true, \"target_modules\": "
               "[\"model.layers.*\"], \"hook_factory\": \"%s/libsrt_hook_steer.so:srt_steer_factory\", "
               "\"config\": {\"vector\": [", HOOK_EXAMPLE_LIBDIR);
    for (int j = 0; j < 64; j++)
        fprintf(f, "%s%g", j ? ", " : "", (double)((j * 29) % 11 - 5) / 2.0);
    fprintf(f, "], \"scale\": 1}}]}\n");
    fclose(f);
    srt_request_hooks sel;
    memset(&sel, 0, sizeof sel);
    sel.n = 1;
    strcpy(sel.name[0], "steer");
    const char *cfg = "{\"layer\": 1, \"scale\": 3.5}";
    strcpy(sel.config_text, cfg);
    sel.config_len[0] = (uint32_t)strlen(cfg);

    srt_model *m = NULL;
    if (!ok(srt_model_load(dir, &m, &err) == SRT_OK, "request hooks: model loads %s", err.msg))
        return;
    int V = srt_model_config_of(m)->vocab_size;
    size_t nl = (size_t)RQ_STEPS * 2 * V;
    float *plain = calloc(nl, sizeof(float)), *ref = calloc(nl, sizeof(float)), *lg = calloc(nl, sizeof(float));
    int32_t tplain[RQ_STEPS][2], tref[RQ_STEPS][2], t2[RQ_STEPS][2];
    srt_hook_registry *reg = hooked_registry(m, spec, 0, 1, &err);
    int rc1 = reg && generate_hooked(m, NULL, reg, NULL, plain, tplain, msg) == SRT_OK &&
              generate_hooked(m, NULL, reg, &sel, ref, tref, msg) == SRT_OK;
    ok(rc1, "request hooks: tp=1 with and without the selection %s %s", msg, err.msg);
    int steered = 0, other_same = 1;
    for (int s = 0; s < RQ_STEPS; s++) {
        steered |= tref[s][0] != tplain[s][0];
        other_same &= memcmp(ref + ((size_t)s * 2 + 1) * V, plain + ((size_t)s * 2 + 1) * V, V * sizeof(float)) == 0;
    }
    double moved = 0;
    for (int s = 0; s < RQ_STEPS; s++)
        for (int i = 0; i < V; i++)
            moved = fmax(moved, fabs((double)ref[(size_t)s * 2 * V + i] - plain[(size_t)s * 2 * V + i]));
    tap_diag("steered %d other_same %d moved %g", steered, other_same, moved);
    ok(rc1 && steered && other_same, "request hooks: tp=1: the selecting request's greedy tokens move, the other's "
                                     "logits stay bit-identical");
    srt_hook_registry_free(reg);
    srt_model_free(m);

    /* tp=2: rank 1 loads the same file; rank 0 takes the selection and sends it */
    srt_tp_group *g = NULL;
    srt_tp_group_opts o = { .size = 2, .model_path = dir, .hooks_path = spec, .n_threads = 1 };
    m = NULL;
    reg = NULL;
    int rc2 = srt_tp_group_start(&o, &g, &err) == SRT_OK && srt_model_load(dir, &m, &err) == SRT_OK &&
              (reg = hooked_registry(m, spec, 0, 2, &err)) != NULL &&
              generate_hooked(m, g, reg, &sel, lg, t2, msg) == SRT_OK;
    ok(rc2, "request hooks: tp=2 with the selection %s %s", msg, err.msg);
    double worst = 0;
    for (size_t i = 0; i < nl; i++)
        worst = fmax(worst, fabs((double)lg[i] - ref[i]));
    ok(rc2 && worst < 1e-4 && memcmp(t2, tref, sizeof t2) == 0,
       "request hooks: tp=2 greedy tokens = tp=1's with the per-request steering, logits within 1e-4 (worst %.3g)",
       worst);
    /* a name that is no per-request spec: refused on rank 0, the ranks never hear of it */
    srt_request_hooks bad = sel;
    strcpy(bad.name[0], "nope");
    srt_err e2 = { { 0 } };
    ok(rc2 && srt_tp_group_request_begin(g, reg, 9, &bad, &e2) == SRT_ERROR && strstr(e2.msg, "'nope'") &&
       srt_tp_group_check(g, &err) == SRT_OK && !srt_hook_request_selected(reg, 9),
       "request hooks: tp=2: an unknown name fails the request on rank 0, the group stays up (%s)", e2.msg);
    ok(rc2 && !srt_hook_request_selected(reg, 7), "request hooks: tp=2: the selection was dropped at the end");
    srt_tp_group_stop(g);
    srt_hook_registry_free(reg);
    srt_model_free(m);
    free(plain);
    free(ref);
    free(lg);
}

/* a rank killed while rank 0 is inside a collective: the collective returns an error */
static void test_death_in_step(const char *dir)
{
    srt_err err = { { 0 } };
    srt_tp_group *g = NULL;
    srt_tp_group_opts o = { .size = 2, .model_path = dir, .n_threads = 1 };
    if (!ok(srt_tp_group_start(&o, &g, &err) == SRT_OK, "group for the in-step death starts"))
        return;
    pid_t victim = srt_tp_group_pid(g, 1);
    pid_t killer = fork();
    if (killer == 0) {
        usleep(200000);
        kill(victim, SIGKILL);
        _exit(0);
    }
    /* rank 1 is killed while rank 0 waits in the setup broadcast for it */
    srt_model *m = NULL;
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL;
    srt_runner_opts ro = { .max_batch_tokens = 16, .max_seqs = 2, .n_threads = 1 };
    int rc = srt_model_load(dir, &m, &err);
    if (rc == SRT_OK) {
        /* wait for the killer: the setup must meet a dead rank, not a slow one */
        waitpid(killer, NULL, 0);
        rc = srt_tp_group_setup(g, m, &ro, 64, &r, &kv, &err);
    }
    ok(rc == SRT_ERROR && strstr(err.msg, "died"), "a rank dead during setup fails the collective: %s", err.msg);
    srt_tp_group_stop(g);
    srt_model_free(m);
}

int main(void)
{
    test_wire();

    char dir[256];
    tw_model tm;
    snprintf(dir, sizeof dir, "/tmp/srt_test_tp_group_%d", (int)getpid());
    tw_make_dims(&tm, "llama", 47, 64, 128, 8, 4, 8);
    tw_set_vocab(&tm, 97);   /* vocab parallel with a short last shard at tp=2 and tp=4 */
    tw_write_hf(&tm, dir, 1, "F32");

    srt_model *m = NULL;
    srt_err err = { { 0 } };
    char msg[256] = "";
    if (ok(srt_model_load(dir, &m, &err) == SRT_OK, "tiny llama (8 heads, 4 KV heads) loads %s", err.msg)) {
        int V = srt_model_config_of(m)->vocab_size;
        float *ref = calloc((size_t)STEPS * V, sizeof(float));
        int32_t toks[STEPS];
        ok(generate(m, NULL, ref, toks, msg) == SRT_OK, "tp=1 reference %s", msg);
        srt_model_free(m);
        test_group(dir, 2, ref, toks, V);
        test_group(dir, 4, ref, toks, V);
        free(ref);
    }
    test_death_in_step(dir);
    test_request_hooks(dir);

    /* srt_device cuda at tp=2 without a loadable NCCL: the setup fails on every rank and rank 0
     * reports why (no CUDA is touched: NCCL is loaded and agreed on first). Ranks take
     * SRT_NCCL_SO_PATH at the fork, rank 0 at the setup. */
    const char *fake = getenv("SRT_FAKE_NCCL") ? getenv("SRT_FAKE_NCCL") : "build/lib/libfake_nccl.so";
    const char *rank0_path[2] = { "/nonexistent/libnccl.so.2", fake };
    const char *expect[2] = { "/nonexistent/libnccl", "1 of 2 ranks could not load NCCL" };
    for (int i = 0; i < 2; i++) {
        srt_tp_group *g = NULL;
        srt_tp_group_opts o = { .size = 2, .model_path = dir, .n_threads = 1 };
        setenv("SRT_NCCL_SO_PATH", "/nonexistent/libnccl.so.2", 1);
        int started = srt_tp_group_start(&o, &g, &err) == SRT_OK;
        setenv("SRT_NCCL_SO_PATH", rank0_path[i], 1);
        srt_model *mc = NULL;
        srt_runner *r = NULL;
        srt_kv_pool *kv = NULL;
        srt_runner_opts ro = { .max_batch_tokens = 16, .max_seqs = 2, .n_threads = 1, .device = SRT_RUNNER_CUDA };
        ok(started && srt_model_load(dir, &mc, &err) == SRT_OK &&
           srt_tp_group_setup(g, mc, &ro, 64, &r, &kv, &err) == SRT_ERROR && strstr(err.msg, expect[i]),
           "tp=2 on cuda, NCCL missing on %s: the setup fails with the reason: %s", i ? "rank 1" : "every rank",
           err.msg);
        unsetenv("SRT_NCCL_SO_PATH");
        srt_tp_group_stop(g);
        srt_model_free(mc);
    }

    srt_tp_group *g = NULL;
    srt_tp_group_opts bad = { .size = 1, .model_path = dir };
    ok(srt_tp_group_start(&bad, &g, &err) == SRT_ERROR, "a group of 1 is refused: %s", err.msg);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        tap_diag("cannot remove %s", dir);
    tw_free(&tm);
    return tap_done();
}
