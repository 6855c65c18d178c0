/* Scheduler over the real engine: greedy outputs of concurrent, chunked, prefix-sharing and
 * retracted requests equal each request's output alone.
 *
 * Models: .cache/models/tiny-llama (scripts/make_tiny_models.py) always; the SmolLM2 GGUF
 * (scripts/fetch-model.sh) too when it is there. SRT_MODEL_DIR overrides the directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "srt/model.h"
#include "srt_hooks.h"
#include "sched/serve.h"
#include "srt/sched.h"
#include "tap.h"

#define MAXR   32
#define MAXOUT 64

typedef struct result {
    int32_t         out[MAXOUT];
    int             n_out;
    int             n_finish;
    srt_finish_reason fin;
} result;

static srt_model *model;
static int32_t    vocab;
static int32_t    prompts[MAXR][200];
static int        plen[MAXR], maxnew[MAXR];
static result     alone[MAXR], got[MAXR];

static srt_sched_config make_cfg(int radix, int chunk, int64_t kv_tokens, int page)
{
    const srt_model_config *mc = srt_model_config_of(model);
    srt_sched_config c = {
        .max_running_requests = 32, .max_queued_requests = 64, .context_length = 512,
        .max_total_tokens = kv_tokens, .page_size = page, .chunked_prefill_size = chunk,
        .policy = SRT_SCHED_FCFS, .radix_cache = radix, .vocab_size = mc->vocab_size,
        .n_eos = 0,   /* run to max_tokens: longer outputs compare more */
    };
    return c;
}

/* Runs requests [from, to) submitted together, or one at a time when serial. */
static int run(const srt_sched_config *cfg, int from, int to, int serial, result *res,
               srt_sched_metrics *m_out, char *why, size_t why_len)
{
    srt_err err = {{0}};
    srt_sched_model_runner *mr;
    srt_sched *s;
    int rc = 0;

    if (srt_sched_model_runner_create(model, cfg, 2, 0, 0, &mr, &err) != SRT_OK) {
        snprintf(why, why_len, "runner: %s", err.msg);
        return -1;
    }
    srt_sched_runner runner = srt_sched_model_runner_iface(mr);
    if (srt_sched_create(cfg, &runner, &s, &err) != SRT_OK) {
        snprintf(why, why_len, "sched: %s", err.msg);
        srt_sched_model_runner_free(mr);
        return -1;
    }
    memset(res + from, 0, sizeof(result) * (size_t)(to - from));
    for (int r = from; r < to; ) {
        int last = serial ? r + 1 : to;
        for (int k = r; k < last; k++) {
            srt_sampling_params sp = { .temperature = 0, .top_p = 1, .repetition_penalty = 1,
                                     .max_tokens = maxnew[k] };
            srt_sched_submit_args a = { .id = (uint64_t)k, .prompt = prompts[k], .n_prompt = plen[k], .sampling = &sp };
            if (srt_sched_submit(s, &a, &err) != SRT_SCHED_SUBMIT_OK) {
                snprintf(why, why_len, "submit: %s", err.msg);
                rc = -1;
            }
        }
        for (int steps = 0; srt_sched_has_work(s) && steps < 100000; steps++) {
            if (srt_sched_step(s, &err) < 0) {
                snprintf(why, why_len, "step: %s", err.msg);
                rc = -1;
            }
            int n;
            const srt_sched_event *ev = srt_sched_events(s, &n);
            for (int i = 0; i < n; i++) {
                result *x = &res[ev[i].id];
                if (ev[i].token >= 0 && x->n_out < MAXOUT)
                    x->out[x->n_out++] = ev[i].token;
                if (ev[i].finish) {
                    x->n_finish++;
                    x->fin = ev[i].finish;
                }
            }
            if (srt_sched_check(s, &err) != SRT_OK && rc == 0) {
                snprintf(why, why_len, "check: %s", err.msg);
                rc = -1;
            }
        }
        r = last;
    }
    if (m_out)
        srt_sched_get_metrics(s, m_out);
    srt_sched_flush_cache(s);
    if (srt_sched_kv_free_tokens(s) != cfg->max_total_tokens / cfg->page_size * cfg->page_size && rc == 0) {
        snprintf(why, why_len, "KV not back at baseline");
        rc = -1;
    }
    srt_sched_free(s);
    srt_sched_model_runner_free(mr);
    return rc;
}

static int compare(int from, int to, int *bad)
{
    for (int r = from; r < to; r++)
        if (got[r].n_out != alone[r].n_out || got[r].n_finish != 1 ||
            memcmp(got[r].out, alone[r].out, sizeof(int32_t) * (size_t)alone[r].n_out)) {
            *bad = r;
            return 0;
        }
    return 1;
}

static void workload(int n, int max_shared, int max_own, int max_new)
{
    uint64_t x = 88172645463325252ull;
    int32_t base[2][200];
#define NEXT() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 200; i++)
            base[b][i] = (int32_t)(NEXT() % (uint64_t)(vocab - 10)) + 5;
    for (int r = 0; r < n; r++) {
        int shared = r % 4 == 0 ? 0 : (int)(NEXT() % (uint64_t)max_shared);
        int own = 1 + (int)(NEXT() % (uint64_t)max_own);
        plen[r] = 0;
        for (int i = 0; i < shared; i++)
            prompts[r][plen[r]++] = base[r % 2][i];
        for (int i = 0; i < own; i++)
            prompts[r][plen[r]++] = (int32_t)(NEXT() % (uint64_t)(vocab - 10)) + 5;
        maxnew[r] = 1 + (int)(NEXT() % (uint64_t)max_new);
    }
}

static void suite(const char *name, int n, int max_shared, int max_own, int max_new, int64_t small_kv)
{
    char why[1200] = "";
    int bad = -1;
    srt_sched_metrics m;

    workload(n, max_shared, max_own, max_new);
    srt_sched_config solo_cfg = make_cfg(0, 4096, 4096, 1);
    ok(run(&solo_cfg, 0, n, 1, alone, NULL, why, sizeof why) == 0, "%s: %d requests alone %s", name, n, why);

    struct { int radix, chunk, page; int64_t kv; const char *what; } v[] = {
        { 1, 4096, 1, 8192, "radix on" },
        { 0, 4096, 1, 8192, "radix off" },
        { 1, 32, 4, 8192, "radix on, chunk 32, page 4" },
        { 0, 32, 1, 8192, "radix off, chunk 32" },
        { 1, 256, 1, small_kv, "radix on, small KV pool (retract)" },
        { 0, 256, 2, small_kv, "radix off, page 2, small KV pool (retract)" },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        srt_sched_config c = make_cfg(v[i].radix, v[i].chunk, v[i].kv, v[i].page);
        if (v[i].kv == small_kv)
            c.schedule_conservativeness = 0.01f;   /* admit greedily: decodes must retract */
        why[0] = 0;
        bad = -1;
        int rc = run(&c, 0, n, 0, got, &m, why, sizeof why);
        ok(rc == 0 && compare(0, n, &bad), "%s: %d concurrent == alone (%s): %llu steps, cached %llu/%llu, %llu retractions %s",
           name, n, v[i].what, (unsigned long long)m.steps, (unsigned long long)m.cached_prompt_tokens_total,
           (unsigned long long)m.prompt_tokens_total, (unsigned long long)m.retractions, why);
        if (bad >= 0) {
            int k = 0;
            while (k < got[bad].n_out && k < alone[bad].n_out && got[bad].out[k] == alone[bad].out[k])
                k++;
            tap_diag("request %d (prompt %d): differs at output %d of %d/%d", bad, plen[bad], k,
                     got[bad].n_out, alone[bad].n_out);
        }
        if (v[i].kv == small_kv)
            ok(m.retractions > 0, "%s: the small KV pool forced retractions", name);
        if (v[i].radix && v[i].chunk < 100)
            ok(m.cached_prompt_tokens_total > 0, "%s: shared prefixes were served from the cache", name);
    }

    /* A prompt longer than the chunk: same output chunked at 7 as unchunked. */
    plen[0] = 150;
    maxnew[0] = 8;
    srt_sched_config whole = make_cfg(0, 4096, 4096, 1), chunked = make_cfg(0, 7, 4096, 1);
    why[0] = 0;
    run(&whole, 0, 1, 0, alone, NULL, why, sizeof why);
    run(&chunked, 0, 1, 0, got, &m, why, sizeof why);
    ok(got[0].n_out == 8 && alone[0].n_out == 8 && !memcmp(got[0].out, alone[0].out, sizeof(int32_t) * 8) &&
       m.steps >= 150 / 7 + 8, "%s: 150-token prompt chunked by 7 == unchunked (%llu steps) %s", name,
       (unsigned long long)m.steps, why);
}

/* The engine alone: a sequence's logits must not depend on what else is in the batch. The
 * scheduler's batch invariance rests on this; a failure here is the model runner's. */
static void runner_invariance(const char *name)
{
    srt_err err = {{0}};
    const srt_model_config *mc = srt_model_config_of(model);
    srt_runner *r;
    srt_kv_pool *kv;
    srt_runner_opts o = { .max_batch_tokens = 512, .max_seqs = 4, .n_threads = 2 };
    if (srt_runner_create(model, &o, &r, &err) != SRT_OK || srt_kv_pool_create(mc, 1024, SRT_F32, &kv, &err) != SRT_OK) {
        ok(0, "%s: runner: %s", name, err.msg);
        return;
    }
    enum { NA = 14 };
    static const int companions[] = { 0, 1, 2, 3, 5, 37, 100, 333 };
    float *ref = malloc(sizeof(float) * (size_t)mc->vocab_size);
    float *got = malloc(sizeof(float) * 3 * (size_t)mc->vocab_size);
    int32_t tok[512], pos[512], out[512], slots_a[NA], slots_b[512];
    int bad_at = -1, rc_all = SRT_OK;
    float maxdiff = 0;
    for (size_t k = 0; k < sizeof companions / sizeof companions[0]; k++) {
        int nb = companions[k], n = 0;
        for (int i = 0; i < nb; i++) {
            slots_b[i] = 600 + i;
            tok[n] = 300 + 11 * i; pos[n] = i; out[n] = slots_b[i]; n++;
        }
        for (int i = 0; i < NA; i++) {
            slots_a[i] = (int32_t)(k * 20) + i;   /* fresh slots each time */
            tok[n] = 100 + 7 * i; pos[n] = i; out[n] = slots_a[i]; n++;
        }
        /* and a companion after it too, from the second case on */
        int nc = k ? 5 : 0;
        int32_t slots_c[8];
        for (int i = 0; i < nc; i++) {
            slots_c[i] = 950 + i;
            tok[n] = 900 + 3 * i; pos[n] = i; out[n] = slots_c[i]; n++;
        }
        int32_t start[4], len[3];
        const int32_t *ss[3];
        int ns = 0, probe;
        start[0] = 0;
        if (nb) { len[ns] = nb; ss[ns] = slots_b; start[ns + 1] = nb; ns++; }
        probe = ns;
        len[ns] = NA; ss[ns] = slots_a; start[ns + 1] = start[ns] + NA; ns++;
        if (nc) { len[ns] = nc; ss[ns] = slots_c; start[ns + 1] = n; ns++; }
        srt_forward_batch bt = { .n_tokens = n, .token_ids = tok, .positions = pos, .out_slots = out, .n_seqs = ns,
                                 .seq_start = start, .seq_len = len, .seq_slots = ss, .forward_mode = SRT_FORWARD_PREFILL };
        if (srt_runner_forward(r, kv, &bt, got, &err) != SRT_OK) {
            rc_all = SRT_ERROR;
            break;
        }
        float *mine = got + (size_t)probe * (size_t)mc->vocab_size;
        if (k == 0) {
            memcpy(ref, mine, sizeof(float) * (size_t)mc->vocab_size);
            continue;
        }
        for (int v = 0; v < mc->vocab_size; v++) {
            float d = ref[v] - mine[v];
            if (d < 0) d = -d;
            if (d > maxdiff) maxdiff = d;
            if (d != 0 && bad_at < 0) bad_at = nb;
        }
    }
    ok(rc_all == SRT_OK && bad_at < 0,
       "%s: runner batch invariance: a 14-token prompt's logits alone == between companions of 1..333 and 5 tokens "
       "(first differing companion %d, max |diff| %g)%s", name, bad_at, (double)maxdiff, err.msg);
    free(ref);
    free(got);
    srt_kv_pool_free(kv);
    srt_runner_free(r);
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

int main(void)
{
    srt_err err = {{0}};
    char path[1024];
    const char *dir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";

    snprintf(path, sizeof path, "%s/tiny-llama", dir);
    ok(exists(path), "tiny-llama present at %s (scripts/make_tiny_models.py)", path);
    if (srt_model_load(path, &model, &err) != SRT_OK) {
        ok(0, "load %s: %s", path, err.msg);
        return tap_done();
    }
    vocab = srt_model_config_of(model)->vocab_size;
    runner_invariance("tiny-llama");
    suite("tiny-llama", 32, 120, 40, 24, 600);
    srt_model_free(model);

    snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    if (exists(path) && !getenv("SRT_TEST_FAST")) {
        if (srt_model_load(path, &model, &err) != SRT_OK) {
            ok(0, "load %s: %s", path, err.msg);
            return tap_done();
        }
        vocab = srt_model_config_of(model)->vocab_size;
        runner_invariance("SmolLM2 Q4_1");
        suite("SmolLM2 Q4_1", 12, 60, 20, 16, 240);
        srt_model_free(model);
    } else {
        tap_diag("SmolLM2 GGUF not present (scripts/fetch-model.sh) or SRT_TEST_FAST set: tiny-llama only");
    }
    return tap_done();
}
