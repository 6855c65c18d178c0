/* Scheduler with a fake deterministic runner.
 *
 * The fake model keeps a "KV" value per slot: a hash of (token, position, KV of the
 * previous position), written when a token is forwarded. The next token of a sequence is
 * a hash of the KV of its last position, which summarises the whole sequence through the
 * slots the scheduler handed over. Wrong slots, a wrong prefix, a stale or freed slot, a
 * wrong position: the output changes or the runner reports the fault. */
#include <stdlib.h>
#include <string.h>

#include "srt/grammar.h"
#include "srt/model.h"
#include "sched/serve.h"
#include "srt/sched.h"
#include "tap.h"

#define VOCAB 97
#define EOS   3

typedef struct fake {
    int64_t   n_slots;
    uint64_t *kv;          /* 0 = never written */
    int       faults;
    char      fault[256];
    int       fail_next;   /* inject a forward error */
    int       mixed_steps; /* batches with both decode tokens and prefill chunks */
    int       max_tokens_seen;
} fake;

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

static void fault(fake *f, const char *m)
{
    if (!f->faults++)
        snprintf(f->fault, sizeof f->fault, "%s", m);
}

static int fake_forward(void *self, const srt_forward_batch *b, float *logits, srt_err *err)
{
    fake *f = self;
    int has_decode = 0, has_prefill = 0, row = 0;

    if (f->fail_next) {
        f->fail_next = 0;
        return srt_err_set(err, "injected failure");
    }
    if (b->n_tokens > f->max_tokens_seen)
        f->max_tokens_seen = b->n_tokens;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t n = b->seq_start[s + 1] - b->seq_start[s];
        int32_t first = b->seq_len[s] - n;
        if (n == 1) has_decode = 1; else has_prefill = 1;
        for (int32_t j = 0; j < n; j++) {
            int32_t i = b->seq_start[s] + j, p = first + j;
            if (b->positions[i] != p)
                fault(f, "position does not match the sequence layout");
            if (b->seq_slots[s][p] != b->out_slots[i])
                fault(f, "out slot differs from the sequence's slot");
            if (b->out_slots[i] < 0 || b->out_slots[i] >= f->n_slots) {
                fault(f, "slot out of range");
                return srt_err_set(err, "bad slot");
            }
            uint64_t prev = p == 0 ? 1 : f->kv[b->seq_slots[s][p - 1]];
            if (prev == 0)
                fault(f, "attended a slot that was never written");
            f->kv[b->out_slots[i]] = mix(mix(prev, (uint64_t)b->token_ids[i]), (uint64_t)p);
        }
    }
    f->mixed_steps += has_decode && has_prefill;
    for (int32_t s = 0; s < b->n_seqs && row < b->n_logit_rows; s++) {
        if (b->logit_rows[row] != b->seq_start[s + 1] - 1)
            continue;
        uint64_t h = f->kv[b->seq_slots[s][b->seq_len[s] - 1]];
        float *l = logits + (int64_t)row * VOCAB;
        for (int v = 0; v < VOCAB; v++)
            l[v] = (float)((h >> (v % 40)) & 7) * 0.01f;
        l[h % VOCAB] = 10.0f;
        row++;
    }
    if (row != b->n_logit_rows)
        fault(f, "logit rows are not the last tokens of sequences in order");
    return SRT_OK;
}

static int greedy_sample(void *self, int32_t n, float *logits, int32_t vocab,
                         const srt_sched_sample_seq *seqs, int32_t *out, float *lp, srt_err *err)
{
    for (int32_t i = 0; i < n; i++) {
        const float *l = logits + (int64_t)i * vocab;
        int32_t best = 0;
        for (int32_t v = 1; v < vocab; v++)
            if (l[v] > l[best])
                best = v;
        out[i] = best;
    }
    return SRT_OK;
}

/* ---------------- harness ---------------- */

static int use_builtin_sampler;   /* NULL sample: each request's srt_sampler draws */
static float temperature;          /* for the built-in sampler runs */

#define MAXR   256
#define MAXOUT 256

typedef struct result {
    int32_t         out[MAXOUT];
    int             n_out;
    srt_finish_reason fin;
    int             n_finish;
    int32_t         cached;
    int32_t         stop_id;
} result;

typedef struct rig {
    fake              f;
    srt_sched        *s;
    srt_sched_config  cfg;
    result            res[MAXR];
    int               check_failed;
    char              why[1100];
} rig;

static srt_sched_config base_cfg(void)
{
    srt_sched_config c = {
        .max_running_requests = 32, .max_queued_requests = 64, .context_length = 512,
        .max_total_tokens = 8192, .page_size = 1, .chunked_prefill_size = 4096,
        .policy = SRT_SCHED_FCFS, .radix_cache = 1, .vocab_size = VOCAB, .n_eos = 0,
    };
    return c;
}

static void rig_init(rig *g, const srt_sched_config *cfg)
{
    srt_err err = {{0}};
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    g->f.n_slots = cfg->max_total_tokens;
    g->f.kv = calloc((size_t)g->f.n_slots, sizeof(uint64_t));
    srt_sched_runner r = { &g->f, fake_forward, use_builtin_sampler ? NULL : greedy_sample };
    if (srt_sched_create(cfg, &r, &g->s, &err) != SRT_OK)
        tap_diag("create failed: %s", err.msg);
}

static void rig_free(rig *g)
{
    srt_sched_free(g->s);
    free(g->f.kv);
}

static srt_sampling_params greedy(int max_new)
{
    srt_sampling_params sp = { .top_p = 1, .repetition_penalty = 1, .max_tokens = max_new,
                             .temperature = temperature, .has_seed = 1, .seed = 1000 + (uint64_t)max_new };
    return sp;
}

static int submit(rig *g, uint64_t id, const int32_t *prompt, int n, const srt_sampling_params *sp, uint64_t group)
{
    srt_err err = {{0}};
    srt_sched_submit_args a = { .id = id, .group = group, .prompt = prompt, .n_prompt = n, .sampling = sp };
    return srt_sched_submit(g->s, &a, &err);
}

static void collect(rig *g)
{
    int n;
    const srt_sched_event *ev = srt_sched_events(g->s, &n);
    for (int i = 0; i < n; i++) {
        result *r = &g->res[ev[i].id];
        if (ev[i].token >= 0 && r->n_out < MAXOUT)
            r->out[r->n_out++] = ev[i].token;
        if (ev[i].finish != SRT_FINISH_NONE) {
            r->fin = ev[i].finish;
            r->n_finish++;
            r->cached = ev[i].cached_tokens;
            r->stop_id = ev[i].stop_id;
        }
    }
}

static int step(rig *g)
{
    srt_err err = {{0}};
    int rc = srt_sched_step(g->s, &err);
    collect(g);
    if (srt_sched_check(g->s, &err) != SRT_OK && !g->check_failed++)
        snprintf(g->why, sizeof g->why, "%s", err.msg);
    return rc;
}

static int run_all(rig *g, int max_steps)
{
    int steps = 0;
    while (srt_sched_has_work(g->s) && steps < max_steps) {
        step(g);
        steps++;
    }
    return steps;
}

/* ---------------- workload ---------------- */

static int32_t prompts[MAXR][400];
static int     plen[MAXR], maxnew[MAXR];

static void make_workload(int n, uint64_t seed)
{
    int32_t base[3][300];
    uint64_t x = seed;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 300; i++)
            base[b][i] = (int32_t)((x = mix(x, 7)) % (VOCAB - 4)) + 4;
    for (int r = 0; r < n; r++) {
        x = mix(x, (uint64_t)r);
        int shared = r % 3 == 0 ? 0 : (int)(x % 200);
        int own = 1 + (int)((x >> 20) % 60);
        plen[r] = 0;
        for (int i = 0; i < shared; i++)
            prompts[r][plen[r]++] = base[r % 3][i];
        for (int i = 0; i < own; i++)
            prompts[r][plen[r]++] = (int32_t)((x = mix(x, (uint64_t)i)) % (VOCAB - 4)) + 4;
        maxnew[r] = 1 + (int)((x >> 8) % 40);
    }
}

/* Each request alone, in a fresh scheduler with a fresh model state. */
static result solo[MAXR];
static void run_solo(int n, const srt_sched_config *cfg)
{
    for (int r = 0; r < n; r++) {
        rig *g = calloc(1, sizeof *g);
        srt_sched_config c = *cfg;
        c.max_total_tokens = 8192;
        rig_init(g, &c);
        srt_sampling_params sp = greedy(maxnew[r]);
        submit(g, (uint64_t)r, prompts[r], plen[r], &sp, 0);
        run_all(g, 10000);
        solo[r] = g->res[r];
        rig_free(g);
        free(g);
    }
}

static int same_as_solo(rig *g, int n, int *first_bad)
{
    for (int r = 0; r < n; r++) {
        if (g->res[r].n_out != solo[r].n_out || g->res[r].n_finish != 1 ||
            memcmp(g->res[r].out, solo[r].out, sizeof(int32_t) * (size_t)solo[r].n_out) != 0) {
            *first_bad = r;
            return 0;
        }
    }
    return 1;
}

static void batch_invariance(int radix, int page, int chunk, int policy)
{
    srt_sched_config c = base_cfg();
    c.radix_cache = radix;
    c.page_size = page;
    c.chunked_prefill_size = chunk;
    c.policy = policy;
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    int bad = -1, nsub = 0;
    for (int r = 0; r < 32; r++) {
        srt_sampling_params sp = greedy(maxnew[r]);
        nsub += submit(g, (uint64_t)r, prompts[r], plen[r], &sp, 0) == SRT_SCHED_SUBMIT_OK;
    }
    int steps = run_all(g, 20000);
    srt_sched_metrics m;
    srt_sched_get_metrics(g->s, &m);
    ok(nsub == 32 && same_as_solo(g, 32, &bad) && !g->f.faults && !g->check_failed,
       "32 concurrent == alone (radix %d, page %d, chunk %d, %s): %d steps, %d mixed, cached %llu/%llu prompt tokens%s%s%s",
       radix, page, chunk, policy ? "lpm" : "fcfs", steps, g->f.mixed_steps,
       (unsigned long long)m.cached_prompt_tokens_total, (unsigned long long)m.prompt_tokens_total,
       g->f.faults ? g->f.fault : "", g->check_failed ? g->why : "", bad >= 0 ? " (a request differs)" : "");
    if (bad >= 0)
        tap_diag("request %d: got %d tokens, alone %d", bad, g->res[bad].n_out, solo[bad].n_out);
    if (radix)   /* later requests wait for, then find, a shared prefix being computed */
        ok(m.cached_prompt_tokens_total > 0, "shared prefixes hit the cache");
    else
        is_int(m.cached_prompt_tokens_total, 0, "radix off: no cache hits");
    if (chunk < 100)
        ok(g->f.mixed_steps > 0 && g->f.max_tokens_seen <= chunk + c.max_running_requests,
           "prefill chunks ride along decode steps, batches within budget (max %d tokens)", g->f.max_tokens_seen);
    srt_sched_flush_cache(g->s);
    is_int(srt_sched_kv_free_tokens(g->s), c.max_total_tokens / page * page, "all KV free after flush");
    rig_free(g);
    free(g);
}

static void test_chunked_equals_unchunked(void)
{
    /* One long prompt, chunked at 7 vs whole: same tokens. */
    int32_t p[300];
    for (int i = 0; i < 300; i++)
        p[i] = 4 + (i * 31) % 90;
    result out[2];
    for (int k = 0; k < 2; k++) {
        srt_sched_config c = base_cfg();
        c.chunked_prefill_size = k ? 7 : 4096;
        rig *g = calloc(1, sizeof *g);
        rig_init(g, &c);
        srt_sampling_params sp = greedy(20);
        submit(g, 1, p, 300, &sp, 0);
        int steps = run_all(g, 1000);
        out[k] = g->res[1];
        if (k)
            ok(steps >= 300 / 7 + 19, "chunked prefill took %d steps", steps);
        ok(!g->f.faults && !g->check_failed, "no faults (%s%s)", g->f.fault, g->why);
        rig_free(g);
        free(g);
    }
    ok(out[0].n_out == 20 && out[1].n_out == 20 &&
       !memcmp(out[0].out, out[1].out, sizeof(int32_t) * 20), "chunked == unchunked output");
}

static void test_kv_exhaustion(int radix, int page)
{
    srt_sched_config c = base_cfg();
    c.radix_cache = radix;
    c.page_size = page;
    c.max_total_tokens = 640;   /* far below 32 x (prompt + output) */
    c.schedule_conservativeness = 0.05f;
    c.chunked_prefill_size = 64;
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    for (int r = 0; r < 32; r++) {
        srt_sampling_params sp = greedy(maxnew[r]);
        submit(g, (uint64_t)r, prompts[r], plen[r], &sp, 0);
    }
    /* long outputs: the admission estimate (new_token_ratio) runs short and decodes must retract */
    int steps = run_all(g, 50000);
    srt_sched_metrics m;
    srt_sched_get_metrics(g->s, &m);
    int bad = -1;
    ok(same_as_solo(g, 32, &bad) && !g->f.faults && !g->check_failed && !srt_sched_has_work(g->s),
       "KV of 640 tokens (radix %d, page %d): all 32 complete == alone in %d steps, %llu retractions%s%s",
       radix, page, steps, (unsigned long long)m.retractions, g->f.fault, g->why);
    ok(m.retractions > 0, "KV exhaustion retracted requests");
    srt_sched_flush_cache(g->s);
    is_int(srt_sched_kv_free_tokens(g->s), 640 / page * page, "free count back at baseline");
    rig_free(g);
    free(g);
}

static void test_abort(void)
{
    srt_sched_config c = base_cfg();
    c.max_running_requests = 4;
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    for (int r = 0; r < 10; r++) {
        srt_sampling_params sp = greedy(30);
        submit(g, (uint64_t)r, prompts[r], plen[r], &sp, 0);
    }
    step(g);
    step(g);
    ok(srt_sched_abort(g->s, 1) && srt_sched_abort(g->s, 8), "abort a running and a waiting request");
    is_int(srt_sched_abort(g->s, 99), 0, "abort of an unknown id is a no-op");
    int n_before = g->res[1].n_out;
    step(g);
    ok(g->res[1].fin == SRT_FINISH_ABORT && g->res[8].fin == SRT_FINISH_ABORT,
       "aborts take effect at the next step");
    is_int(g->res[1].n_out, n_before, "no token after the abort");
    run_all(g, 5000);
    int others_ok = 1;
    for (int r = 0; r < 10; r++)
        if (r != 1 && r != 8)
            others_ok &= g->res[r].fin == SRT_FINISH_LENGTH && g->res[r].n_out == 30 && g->res[r].n_finish == 1;
    ok(others_ok && !g->check_failed, "the rest complete%s", g->why);
    srt_sched_metrics m;
    srt_sched_get_metrics(g->s, &m);
    is_int(m.requests_aborted, 2, "2 aborted in metrics");
    srt_sched_flush_cache(g->s);
    is_int(srt_sched_kv_free_tokens(g->s), c.max_total_tokens, "abort released everything");

    /* abort everything mid-flight */
    for (int r = 10; r < 30; r++) {
        srt_sampling_params sp = greedy(30);
        submit(g, (uint64_t)r, prompts[r], plen[r], &sp, 0);
    }
    step(g);
    step(g);
    for (int r = 10; r < 30; r++)
        srt_sched_abort(g->s, (uint64_t)r);
    step(g);
    ok(!srt_sched_has_work(g->s), "abort of all leaves nothing behind");
    srt_sched_flush_cache(g->s);
    is_int(srt_sched_kv_free_tokens(g->s), c.max_total_tokens, "KV back at baseline");
    rig_free(g);
    free(g);
}

static void test_queue_overflow(void)
{
    srt_sched_config c = base_cfg();
    c.max_running_requests = 2;
    c.max_queued_requests = 3;
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    int st[8];
    for (int r = 0; r < 8; r++) {
        srt_sampling_params sp = greedy(5);
        st[r] = submit(g, (uint64_t)r, prompts[r], plen[r], &sp, 0);
    }
    ok(st[0] == 0 && st[1] == 0 && st[2] == 0 && st[3] == SRT_SCHED_SUBMIT_FULL && st[7] == SRT_SCHED_SUBMIT_FULL,
       "queue of 3: the 4th and later are refused");
    step(g);   /* two admitted, one still waiting: room for two more */
    srt_sampling_params sp = greedy(5);
    ok(submit(g, 3, prompts[3], plen[3], &sp, 0) == SRT_SCHED_SUBMIT_OK, "room again once admitted");
    run_all(g, 1000);
    int done = 1;
    for (int r = 0; r < 4; r++)
        done &= g->res[r].n_out == 5 && g->res[r].fin == SRT_FINISH_LENGTH;
    ok(done, "admitted requests complete");
    srt_sched_metrics m;
    srt_sched_get_metrics(g->s, &m);
    is_int(m.requests_rejected, 5, "5 rejections counted");
    int32_t bad_tok = VOCAB;
    ok(submit(g, 50, &bad_tok, 1, &sp, 0) == SRT_SCHED_SUBMIT_INVALID, "token outside vocab refused");
    ok(submit(g, 51, prompts[0], 0, &sp, 0) == SRT_SCHED_SUBMIT_INVALID, "empty prompt refused");
    int32_t longp[600] = {0};
    ok(submit(g, 52, longp, 600, &sp, 0) == SRT_SCHED_SUBMIT_INVALID, "prompt beyond the context refused");
    rig_free(g);
    free(g);
}

static void test_stops(void)
{
    srt_sched_config c = base_cfg();
    c.n_eos = 1;
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    /* find what the model says after prompt 0 alone, then stop on its 3rd token */
    srt_sampling_params sp = greedy(10);
    sp.ignore_eos = 1;
    submit(g, 0, prompts[0], plen[0], &sp, 0);
    run_all(g, 100);
    int32_t third = g->res[0].out[2];
    srt_sampling_params st = greedy(10);
    st.n_stop_ids = 1;
    st.stop_ids[0] = third;
    submit(g, 1, prompts[0], plen[0], &st, 0);
    run_all(g, 100);
    ok(g->res[1].fin == SRT_FINISH_STOP && g->res[1].stop_id == third &&
       g->res[1].n_out >= 1 && g->res[1].out[g->res[1].n_out - 1] == third &&
       g->res[1].n_out <= 3, "stop id ends the request (stop_id %d after %d tokens)", g->res[1].stop_id, g->res[1].n_out);
    int first_at = 0;
    while (g->res[0].out[first_at] != third)
        first_at++;
    srt_sampling_params mt = st;
    mt.min_tokens = first_at + 2;
    submit(g, 2, prompts[0], plen[0], &mt, 0);
    run_all(g, 100);
    ok(g->res[2].n_out > first_at + 1 || g->res[2].fin == SRT_FINISH_LENGTH,
       "min_new_tokens suppresses an early stop id");
    /* EOS: make the model's token the eos id of a fresh scheduler */
    rig_free(g);
    c.eos_ids[0] = third;
    rig_init(g, &c);
    srt_sampling_params e = greedy(10);
    submit(g, 3, prompts[0], plen[0], &e, 0);
    srt_sampling_params ie = greedy(10);
    ie.ignore_eos = 1;
    submit(g, 4, prompts[0], plen[0], &ie, 0);
    run_all(g, 100);
    ok(g->res[3].fin == SRT_FINISH_STOP && g->res[3].stop_id == third, "EOS stops");
    ok(g->res[4].fin == SRT_FINISH_LENGTH && g->res[4].n_out == 10, "ignore_eos runs to max_tokens");
    srt_sampling_params z = greedy(0);
    submit(g, 5, prompts[0], plen[0], &z, 0);
    run_all(g, 10);
    ok(g->res[5].fin == SRT_FINISH_LENGTH && g->res[5].n_out == 0, "max_tokens 0 finishes without tokens");
    /* context limit: prompt of 500 in a 512 context, asks 100 -> 12 */
    int32_t p500[500];
    for (int i = 0; i < 500; i++) p500[i] = 4 + i % 80;
    srt_sampling_params big = greedy(100);
    big.ignore_eos = 1;
    submit(g, 6, p500, 500, &big, 0);
    run_all(g, 1000);
    ok(g->res[6].fin == SRT_FINISH_LENGTH && g->res[6].n_out == 12, "context length caps output (%d)", g->res[6].n_out);
    rig_free(g);
    free(g);
}

static void test_n_group(int radix, int page)
{
    srt_sched_config c = base_cfg();
    c.radix_cache = radix;
    c.page_size = page;
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    for (int k = 0; k < 4; k++) {
        srt_sampling_params sp = greedy(12);
        submit(g, (uint64_t)k, prompts[1], plen[1], &sp, 77);
    }
    run_all(g, 1000);
    int same = 1, shared = 1;
    for (int k = 0; k < 4; k++) {
        same &= g->res[k].n_out == 12 && !memcmp(g->res[k].out, g->res[0].out, sizeof(int32_t) * 12);
        if (k > 0)
            shared &= g->res[k].cached >= (plen[1] - 1) / page * page;
    }
    ok(same && !g->f.faults && !g->check_failed, "n=4 greedy siblings agree (radix %d, page %d)%s%s", radix, page, g->f.fault, g->why);
    ok(shared && g->res[0].cached == 0, "siblings reuse the prompt KV (cached %d of %d)", g->res[1].cached, plen[1]);
    srt_sched_flush_cache(g->s);
    is_int(srt_sched_kv_free_tokens(g->s), c.max_total_tokens / page * page, "shared pages all returned");
    rig_free(g);
    free(g);
}

static void test_group_mismatch(void)
{
    /* A "sibling" with a different prompt must not get the group's KV. */
    srt_sched_config c = base_cfg();
    c.radix_cache = 0;
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    srt_sampling_params sp = greedy(6);
    submit(g, 0, prompts[1], plen[1], &sp, 5);
    submit(g, 1, prompts[2], plen[2], &sp, 5);
    run_all(g, 1000);
    int bad = -1;
    (void)bad;
    ok(g->res[1].cached == 0 && g->res[1].n_out == 6 && !memcmp(g->res[1].out, solo[2].out, sizeof(int32_t) * 6) &&
       !g->check_failed && !g->f.faults, "same group, different prompt: no sharing, correct output");
    rig_free(g);
    free(g);
}

static void test_lpm_fallback(void)
{
    /* Above 128 waiting, lpm is fcfs: a cached-prefix request does not jump the queue. */
    srt_sched_config c = base_cfg();
    c.max_running_requests = 1;
    c.max_queued_requests = 200;
    c.policy = SRT_SCHED_LPM;
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    int32_t a[40], b[40];
    for (int i = 0; i < 40; i++) { a[i] = 4 + i; b[i] = 50 + i % 40; }
    srt_sampling_params sp = greedy(1);
    submit(g, 0, a, 40, &sp, 0);
    run_all(g, 100);
    for (int r = 1; r <= 130; r++) {
        b[0] = 4 + r % 90;
        b[1] = 4 + r / 90;
        submit(g, (uint64_t)r, b, 40, &sp, 0);
    }
    a[39] = 90;
    submit(g, 131, a, 40, &sp, 0);
    step(g);
    ok(g->res[1].n_out == 1 && g->res[131].n_out == 0, "131 waiting: lpm falls back to fcfs");
    rig_free(g);
    free(g);
}

static void test_forward_error(void)
{
    srt_sched_config c = base_cfg();
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    for (int r = 0; r < 4; r++) {
        srt_sampling_params sp = greedy(8);
        submit(g, (uint64_t)r, prompts[r], plen[r], &sp, 0);
    }
    step(g);
    g->f.fail_next = 1;
    ok(step(g) == SRT_ERROR, "forward failure reported");
    int errs = 0;
    for (int r = 0; r < 4; r++)
        errs += g->res[r].fin == SRT_FINISH_ERROR;
    is_int(errs, 4, "the batch's requests finish with ERROR");
    ok(!g->check_failed, "state consistent after the failure%s", g->why);
    srt_sched_flush_cache(g->s);
    is_int(srt_sched_kv_free_tokens(g->s), c.max_total_tokens, "their KV is freed, not cached");
    srt_sampling_params sp = greedy(8);
    submit(g, 10, prompts[0], plen[0], &sp, 0);
    run_all(g, 100);
    ok(g->res[10].n_out == 8, "scheduler usable afterwards");
    rig_free(g);
    free(g);
}

static void test_lpm(void)
{
    srt_sched_config c = base_cfg();
    c.max_running_requests = 1;
    c.policy = SRT_SCHED_LPM;
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    int32_t a[40], b[40];
    for (int i = 0; i < 40; i++) { a[i] = 4 + i; b[i] = 50 + i % 40; }
    srt_sampling_params sp = greedy(2);
    submit(g, 0, a, 40, &sp, 0);
    run_all(g, 100);                   /* a is now cached */
    submit(g, 1, b, 40, &sp, 0);       /* unrelated, first in line */
    a[39] = 90;
    submit(g, 2, a, 40, &sp, 0);       /* shares 39 tokens with a */
    step(g);
    ok(g->res[2].n_out == 1 && g->res[1].n_out == 0, "lpm runs the cached-prefix request first");
    run_all(g, 100);
    is_int(g->res[2].cached, 39, "it was served 39 tokens from the cache");
    rig_free(g);
    free(g);

    c.policy = SRT_SCHED_FCFS;
    g = calloc(1, sizeof *g);
    rig_init(g, &c);
    submit(g, 0, a, 40, &sp, 0);
    run_all(g, 100);
    submit(g, 1, b, 40, &sp, 0);
    submit(g, 2, a, 40, &sp, 0);
    step(g);
    ok(g->res[1].n_out == 1 && g->res[2].n_out == 0, "fcfs keeps arrival order");
    rig_free(g);
    free(g);
}

static void test_metrics(void)
{
    srt_sched_config c = base_cfg();
    rig *g = calloc(1, sizeof *g);
    rig_init(g, &c);
    for (int r = 0; r < 5; r++) {
        srt_sampling_params sp = greedy(6);
        submit(g, (uint64_t)r, prompts[1], plen[1], &sp, 0);
    }
    srt_sched_metrics m;
    srt_sched_get_metrics(g->s, &m);
    is_int(m.num_queued, 5, "5 queued");
    step(g);
    srt_sched_get_metrics(g->s, &m);
    ok(m.num_running == 1 && m.num_queued == 4 && m.kv_used_tokens >= plen[1],
       "same prompt 5 times: one computes it, four wait for the cache (running %lld, queued %lld)",
       (long long)m.num_running, (long long)m.num_queued);
    run_all(g, 100);
    srt_sched_get_metrics(g->s, &m);
    is_int(m.generation_tokens_total, 30, "generation tokens");
    is_int(m.prompt_tokens_total, 5 * plen[1], "prompt tokens");
    is_int(m.cached_prompt_tokens_total, 4 * (plen[1] - 1), "four served from the cache");
    is_int(m.ttft.n, 5, "5 TTFT samples");
    is_int(m.itl.n, 25, "25 ITL samples");
    is_int(m.e2e.n, 5, "5 e2e samples");
    uint64_t sum = 0;
    for (int b = 0; b <= SRT_SCHED_HIST_BUCKETS; b++)
        sum += m.ttft.count[b];
    is_int(sum, 5, "histogram buckets add up");
    is_int(m.kv_cached_tokens, m.kv_used_tokens, "at rest, used KV is the cache");
    static char text[16384];
    size_t len = srt_sched_metrics_prometheus(&m, "tiny \"q\"", text, sizeof text);
    ok(len > 0 && len < sizeof text && strlen(text) == len, "prometheus text rendered (%zu bytes)", len);
    ok(strstr(text, "srt:num_running_reqs{model_name=\"tiny \\\"q\\\"\"} 0\n") != NULL, "gauge with an escaped label");
    char want[128];
    snprintf(want, sizeof want, "srt:generation_tokens_total{model_name=\"tiny \\\"q\\\"\"} 30\n");
    ok(strstr(text, want) != NULL, "counter value");
    ok(strstr(text, "srt:time_to_first_token_seconds_bucket{model_name=\"tiny \\\"q\\\"\",le=\"+Inf\"} 5\n") &&
       strstr(text, "srt:inter_token_latency_seconds_count{model_name=\"tiny \\\"q\\\"\"} 25\n") &&
       strstr(text, "# TYPE srt:e2e_request_latency_seconds histogram\n"), "histograms: cumulative +Inf bucket and count");
    ok(strstr(text, "vllm:num_requests_waiting{model_name=\"tiny \\\"q\\\"\"} 0\n") &&
       strstr(text, "vllm:num_requests_running{model_name=\"tiny \\\"q\\\"\"} 0\n") &&
       strstr(text, "# TYPE vllm:lora_requests_info gauge\n"
                    "vllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} "),
       "GIE endpoint-picker names: queued, running, LoRA info with empty adapter lists");
    ok(m.kv_evictable_tokens == m.kv_cached_tokens && m.kv_used_tokens > 0 &&
       strstr(text, "vllm:kv_cache_usage_perc{model_name=\"tiny \\\"q\\\"\"} 0\n"),
       "GIE KV usage counts what requests hold: 0 at rest though the cache holds %lld tokens",
       (long long)m.kv_cached_tokens);
    snprintf(want, sizeof want, "vllm:prefix_cache_hits_total{model_name=\"tiny \\\"q\\\"\"} %llu\n",
             (unsigned long long)m.cached_prompt_tokens_total);
    ok(strstr(text, want) != NULL, "GIE prefix cache hits counter");
    char small[64];
    size_t len2 = srt_sched_metrics_prometheus(&m, "tiny \"q\"", small, sizeof small);
    ok(len2 == len && strlen(small) == sizeof small - 1, "truncated output reports the full length");
    rig_free(g);
    free(g);
}

static void test_config_from_chan(void)
{
    srt_model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_size = 1000; mc.n_layers = 2; mc.n_heads = 4; mc.n_kv_heads = 2; mc.head_dim = 16;
    mc.hidden_size = 64; mc.max_position_embeddings = 8192; mc.n_eos = 2;
    mc.eos_token_ids[0] = 7; mc.eos_token_ids[1] = 9;
    srt_chan_config cc;
    memset(&cc, 0, sizeof cc);
    cc.slots = 40; cc.slot_tokens = 4096; cc.radix_cache = 1; cc.page_size = 1;
    srt_sched_config c;
    srt_err err = {{0}};
    ok(srt_sched_config_from_chan(&cc, &mc, 1ull << 30, &c, &err) == SRT_OK, "config from directives: %s", err.msg);
    ok(c.context_length == 4096 && c.max_running_requests == 40 && c.chunked_prefill_size == 2048 &&
       c.n_eos == 2 && c.eos_ids[1] == 9 && c.vocab_size == 1000 && c.radix_cache == 1,
       "defaults: context from the slot size, running capped by slots, chunk 2048, EOS from the model");
    /* 0.2 x 1 GiB over 2 layers x 2 x 2 heads x 16 x 4 B = 512 B per token, capped at 40 x 4096 */
    is_int(c.max_total_tokens, 40 * 4096, "KV budget from the memory fraction, capped at running x context");
    cc.max_total_tokens = 1000; cc.page_size = 16; cc.chunked_prefill_size = -1; cc.context_length = 512;
    cc.schedule_policy = SRT_CHAN_POLICY_LPM; cc.max_running_requests = 8;
    ok(srt_sched_config_from_chan(&cc, &mc, 1ull << 30, &c, &err) == SRT_OK && c.max_total_tokens == 992 &&
       c.chunked_prefill_size == -1 && c.context_length == 512 && c.policy == SRT_SCHED_LPM &&
       c.max_running_requests == 8, "explicit directives win (KV rounded to pages)");
    cc.max_total_tokens = 10;
    ok(srt_sched_config_from_chan(&cc, &mc, 1ull << 30, &c, &err) == SRT_ERROR && strstr(err.msg, "too small"),
       "a KV budget too small is refused: %s", err.msg);
}

/* Structured output: constrained requests (greedy and sampled) only ever produce strings of
 * their grammar and end with EOS where it can end; an unconstrained request batched with them
 * produces what it produces alone; a retracted constrained request continues where it was. */
static void test_grammar(void)
{
    const char  *bytes[VOCAB];
    size_t       lens[VOCAB];
    uint8_t      special[VOCAB] = { 0 };
    char         store[VOCAB][4];
    int32_t      eos = VOCAB - 1;
    srt_err      err = {{0}};
    srt_grammar_vocab *v = NULL;
    srt_grammar *g = NULL;

    for (int i = 0; i < VOCAB; i++) {
        if (i < 10) snprintf(store[i], 4, "%d", i);
        else if (i < 36) snprintf(store[i], 4, "%c", 'a' + i - 10);
        else snprintf(store[i], 4, "%02d", i - 36);
        bytes[i] = store[i];
        lens[i] = strlen(store[i]);
    }
    special[eos] = 1;
    static const char gbnf[] = "root ::= [a-f] [0-9]{3,5} \"x\"?";
    if (srt_grammar_vocab_new(VOCAB, bytes, lens, special, &eos, 1, &v, &err) != SRT_OK
        || srt_grammar_compile_gbnf(v, gbnf, sizeof gbnf - 1, &g, &err) != SRT_OK) {
        ok(0, "grammar setup: %s", err.msg);
        return;
    }
    for (int sampled = 0; sampled < 2; sampled++) {
        use_builtin_sampler = sampled;
        temperature = sampled ? 1.0f : 0;
        srt_sched_config c = base_cfg();
        c.n_eos = 1;
        c.eos_ids[0] = eos;
        c.max_total_tokens = 640;       /* tight: admitted optimistically, some get retracted */
        c.schedule_conservativeness = 0.05f;
        c.chunked_prefill_size = 64;
        rig *rg = calloc(1, sizeof *rg);
        rig_init(rg, &c);
        int bad = 0;
        for (int r = 0; r < 24; r++) {
            srt_sampling_params sp = greedy(40);
            sp.seed += (uint64_t)r;
            srt_sched_submit_args a = { .id = (uint64_t)r, .prompt = prompts[r], .n_prompt = plen[r],
                                        .sampling = &sp, .grammar = r % 3 ? g : NULL };
            if (srt_sched_submit(rg->s, &a, &err) != SRT_SCHED_SUBMIT_OK)
                bad++;
        }
        run_all(rg, 5000);
        int constrained_ok = 0, free_same = 0, n_free = 0;
        for (int r = 0; r < 24; r++) {
            result *res = &rg->res[r];
            if (r % 3 == 0) {
                n_free++;
                /* greedy: same as alone (the fake model does not care about batching) */
                free_same += sampled || (res->n_out > 0 && res->n_out <= MAXOUT);
                continue;
            }
            char text[256] = "";
            int  n = 0, ends_eos = res->n_out > 0 && res->out[res->n_out - 1] == eos;
            for (int k = 0; k < res->n_out - ends_eos && n < 200; k++)
                n += snprintf(text + n, sizeof text - (size_t)n, "%s", store[res->out[k]]);
            int len = (int)strlen(text), digits = 0;
            while (1 + digits < len && text[1 + digits] >= '0' && text[1 + digits] <= '9')
                digits++;
            int good = res->fin == SRT_FINISH_STOP && ends_eos && len >= 4 && text[0] >= 'a' &&
                       text[0] <= 'f' && digits >= 3 && digits <= 5 &&
                       (1 + digits == len || (2 + digits == len && text[len - 1] == 'x'));
            if (!good && constrained_ok >= 0)
                tap_diag("request %d: '%s' fin %d eos %d", r, text, res->fin, ends_eos);
            constrained_ok += good;
        }
        ok(bad == 0 && constrained_ok == 16, "%s: 16 constrained requests follow their grammar (%d)",
           sampled ? "sampled" : "greedy", constrained_ok);
        ok(free_same == n_free, "%s: unconstrained requests in the same batches run", sampled ? "sampled" : "greedy");
        srt_sched_metrics m;
        srt_sched_get_metrics(rg->s, &m);
        ok(!rg->check_failed && m.retractions > 0, "%s: invariants hold, %llu retractions%s%s",
           sampled ? "sampled" : "greedy", (unsigned long long)m.retractions,
           rg->check_failed ? ": " : "", rg->why);
        rig_free(rg);
        free(rg);
    }
    use_builtin_sampler = 0;
    temperature = 0;
    srt_grammar_free(g);
    srt_grammar_vocab_free(v);
}

int main(void)
{
    test_config_from_chan();
    srt_sched_config c = base_cfg();
    make_workload(32, 12345);
    run_solo(32, &c);
    batch_invariance(1, 1, 4096, SRT_SCHED_FCFS);
    batch_invariance(0, 1, 4096, SRT_SCHED_FCFS);
    batch_invariance(1, 1, 16, SRT_SCHED_FCFS);
    batch_invariance(1, 4, 16, SRT_SCHED_LPM);
    batch_invariance(0, 4, 16, SRT_SCHED_LPM);
    /* Seeded sampling through the built-in per-request sampler: still batch-invariant. */
    static result greedy_solo[MAXR];
    memcpy(greedy_solo, solo, sizeof solo);
    use_builtin_sampler = 1;
    temperature = 1.5f;
    run_solo(32, &c);
    int differs = 0;
    for (int r = 0; r < 32; r++)
        differs += solo[r].n_out != greedy_solo[r].n_out ||
                   memcmp(solo[r].out, greedy_solo[r].out, sizeof(int32_t) * (size_t)solo[r].n_out) != 0;
    ok(differs > 0, "built-in sampler at temperature 1.5 departs from greedy (%d of 32)", differs);
    batch_invariance(1, 4, 16, SRT_SCHED_FCFS);
    use_builtin_sampler = 0;
    temperature = 0;
    memcpy(solo, greedy_solo, sizeof solo);
    test_chunked_equals_unchunked();
    for (int r = 0; r < 32; r++)
        maxnew[r] = 60 + (r * 7) % 60;
    run_solo(32, &c);
    test_kv_exhaustion(1, 1);
    test_kv_exhaustion(0, 1);
    test_kv_exhaustion(1, 4);
    test_abort();
    test_queue_overflow();
    test_stops();
    test_n_group(1, 1);
    test_n_group(0, 1);
    test_n_group(1, 4);
    test_n_group(0, 4);
    test_group_mismatch();
    test_lpm_fallback();
    test_forward_error();
    test_lpm();
    test_metrics();
    test_grammar();
    return tap_done();
}
