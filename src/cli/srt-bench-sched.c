/* srt-bench-sched: offline throughput of the scheduler over a real model, no HTTP.
 *
 *   srt-bench-sched MODEL|fake [--dataset gsp|random] [--radix on|off] [--num N] [--groups G]
 *                   [--system-len L] [--question-len Q] [--input-len I] [--output-len O]
 *                   [--max-running R] [--chunk C] [--kv TOKENS] [--page P] [--threads T]
 *                   [--policy fcfs|lpm] [--seed S] [--schema FILE [--jump-forward on|off]]
 *                   [--numerics exact|fast] [--kv-cache-dtype f16|f32]
 *
 * The numerics and the KV cache's element type default to the server's (srt_numerics exact,
 * srt_kv_cache_dtype f16), so an offline figure is the same engine an HTTP one measures.
 *
 * All requests are submitted at once (SGLang's offline mode); ignore_eos, greedy. Prints one
 * line of figures: wall time, request and token throughput, cache hit rate, steps. MODEL
 * "fake" runs no model at all (constant logits): the time per step is the scheduler's own.
 * --schema: every request's output is constrained to that JSON schema (compiled against the
 * model's tokenizer, greedy, ending at EOS where the schema ends, --output-len at most), with
 * jump-forward on or off (srt_grammar_jump_forward): steps= shows the forward passes it saves.
 * Its prompts are "PROMPT (request N)" (--prompt, tokenized) instead of random tokens, and the first
 * request's output goes to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include "srt/grammar.h"
#include "srt/model.h"
#include "sched/serve.h"
#include "srt/sched.h"
#include "srt/tokenizer.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "fake" model: no compute, one fixed logit row, to time the scheduler itself. */
static int fake_forward(void *self, const srt_forward_batch *b, float *logits, srt_err *err)
{
    (void)self; (void)err;
    for (int32_t r = 0; r < b->n_logit_rows; r++)
        logits[(int64_t)r * 1000] = (float)(b->token_ids[b->logit_rows[r]] % 7);
    return SRT_OK;
}

static int fake_sample(void *self, int32_t n, float *logits, int32_t vocab, const srt_sched_sample_seq *seqs,
                       int32_t *out, float *lp, srt_err *err)
{
    (void)self; (void)seqs; (void)lp; (void)err;
    for (int32_t i = 0; i < n; i++)
        out[i] = 50 + (int32_t)logits[(int64_t)i * vocab];
    return SRT_OK;
}

/* SRT_BENCH_TRACE=1: one line per forward (tokens, sequences, logit rows, ms) on stderr. */
static srt_sched_runner inner;
static int trace_forward(void *self, const srt_forward_batch *b, float *logits, srt_err *err)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = inner.forward(self, b, logits, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "forward tokens=%d seqs=%d rows=%d mode=%d ms=%.1f\n", b->n_tokens, b->n_seqs,
            b->n_logit_rows, b->forward_mode,
            (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
    return rc;
}

/* The schema's grammar against the model's tokenizer, loaded as the server loads it. */
static int load_schema(const char *model, const char *file, int32_t vocab, srt_tokenizer **tok,
                       srt_grammar_vocab **v, srt_grammar **g, int32_t *eos, srt_err *err)
{
    char *text = NULL;
    long n;
    FILE *f;
    int rc;

    if ((rc = srt_tokenizer_load_model(model, NULL, 0, tok, err)) != SRT_OK)
        return rc;
    *eos = srt_tokenizer_eos_id(*tok);
    if (!(f = fopen(file, "rb")) || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || !(text = malloc((size_t)n + 1)) || fread(text, 1, (size_t)n, f) != (size_t)n) {
        if (f)
            fclose(f);
        free(text);
        return srt_err_set(err, "%s: cannot read", file);
    }
    fclose(f);
    rc = srt_grammar_vocab_from_tokenizer(*tok, (size_t)vocab, eos, 1, v, err);
    if (rc == SRT_OK)
        rc = srt_grammar_compile_json_schema(*v, text, (size_t)n, NULL, g, err);
    free(text);
    return rc;
}

static uint64_t rng = 0x853c49e6748fea9bull;
static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *dataset = "gsp", *schema = NULL;
    int jump = 0;
    const char *prompt_text = "Write the order as JSON.";
    int radix = 1, num = 64, groups = 4, sys_len = 512, q_len = 32, in_len = 256, out_len = 32;
    int max_running = 32, chunk = 1024, threads = 0, page = 1, lpm = 0, precise = 1, kv_f16 = 1;
    long long kv = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (strcmp(a, name) == 0 && v && (i++, 1))
        if (OPT("--dataset")) dataset = v;
        else if (OPT("--radix")) radix = strcmp(v, "off") != 0;
        else if (OPT("--num")) num = atoi(v);
        else if (OPT("--groups")) groups = atoi(v);
        else if (OPT("--system-len")) sys_len = atoi(v);
        else if (OPT("--question-len")) q_len = atoi(v);
        else if (OPT("--input-len")) in_len = atoi(v);
        else if (OPT("--output-len")) out_len = atoi(v);
        else if (OPT("--max-running")) max_running = atoi(v);
        else if (OPT("--chunk")) chunk = atoi(v);
        else if (OPT("--kv")) kv = atoll(v);
        else if (OPT("--page")) page = atoi(v);
        else if (OPT("--threads")) threads = atoi(v);
        else if (OPT("--policy")) lpm = strcmp(v, "lpm") == 0;
        else if (OPT("--seed")) rng = strtoull(v, NULL, 10) | 1;
        else if (OPT("--schema")) schema = v;
        else if (OPT("--jump-forward")) jump = strcmp(v, "on") == 0;
        else if (OPT("--prompt")) prompt_text = v;
        else if (OPT("--numerics") && (!strcmp(v, "exact") || !strcmp(v, "fast"))) precise = !strcmp(v, "exact");
        else if (OPT("--kv-cache-dtype") && (!strcmp(v, "f16") || !strcmp(v, "f32"))) kv_f16 = !strcmp(v, "f16");
        else if (a[0] != '-' && !path) path = a;
        else {
            fprintf(stderr, "usage: %s MODEL [options] (see the source header)\n", argv[0]);
            return 2;
        }
    }
    if (!path || num < 1 || groups < 1 || out_len < 1) {
        fprintf(stderr, "usage: %s MODEL [--dataset gsp|random] [--radix on|off] ...\n", argv[0]);
        return 2;
    }
    srt_err err;
    srt_model *m = NULL;
    int fake = strcmp(path, "fake") == 0;
    if (!fake && srt_model_load(path, &m, &err) != SRT_OK) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 1;
    }
    int32_t vocab = fake ? 1000 : srt_model_config_of(m)->vocab_size;
    srt_tokenizer *tok = NULL;
    srt_grammar_vocab *gv = NULL;
    srt_grammar *gram = NULL;
    int32_t eos = -1;
    if (schema && (fake || load_schema(path, schema, vocab, &tok, &gv, &gram, &eos, &err) != SRT_OK)) {
        fprintf(stderr, "--schema: %s\n", fake ? "needs a model" : err.msg);
        return 1;
    }
    int gsp = strcmp(dataset, "gsp") == 0;
    int max_prompt = gsp ? sys_len + q_len : in_len;
    int32_t *prompts = malloc(sizeof(int32_t) * (size_t)num * (size_t)max_prompt);
    int32_t *sys = malloc(sizeof(int32_t) * (size_t)groups * (size_t)(sys_len > 0 ? sys_len : 1));
    int *plen = malloc(sizeof(int) * (size_t)num);
    for (int g = 0; g < groups * sys_len; g++)
        sys[g] = (int32_t)(next_u32() % (uint32_t)(vocab - 100)) + 50;
    for (int r = 0; r < num; r++) {
        int32_t *p = prompts + (size_t)r * (size_t)max_prompt;
        plen[r] = 0;
        if (gsp) {
            memcpy(p, sys + (size_t)(r % groups) * (size_t)sys_len, sizeof(int32_t) * (size_t)sys_len);
            plen[r] = sys_len;
            for (int k = 0; k < q_len; k++)
                p[plen[r]++] = (int32_t)(next_u32() % (uint32_t)(vocab - 100)) + 50;
        } else {
            for (int k = 0; k < in_len; k++)
                p[plen[r]++] = (int32_t)(next_u32() % (uint32_t)(vocab - 100)) + 50;
        }
    }
    for (int r = 0; gram && r < num; r++) {
        char text[1024];
        size_t n;
        int len = snprintf(text, sizeof text, "%s (request %d)\n", prompt_text, r);
        if (srt_tokenizer_encode(tok, text, (size_t)len, SRT_TOK_ADD_SPECIAL, prompts + (size_t)r * (size_t)max_prompt,
                                 (size_t)max_prompt, &n, &err) != SRT_OK) {
            fprintf(stderr, "--prompt: %s (more than --input-len %d tokens?)\n", err.msg, max_prompt);
            return 1;
        }
        plen[r] = (int)n;
    }
    srt_sched_config cfg = {
        .max_running_requests = max_running, .max_queued_requests = num, .context_length = max_prompt + out_len + 1,
        .max_total_tokens = kv > 0 ? kv : (long long)max_running * (max_prompt + out_len + 1) + (long long)groups * sys_len,
        .page_size = page, .chunked_prefill_size = chunk, .policy = lpm ? SRT_SCHED_LPM : SRT_SCHED_FCFS,
        .radix_cache = radix, .vocab_size = vocab, .n_eos = gram ? 1 : 0, .eos_ids = { eos },
    };
    srt_sched_model_runner *mr = NULL;
    srt_sched *s;
    srt_sched_runner runner = { NULL, fake_forward, fake_sample };
    if (!fake) {
        if (srt_sched_model_runner_create(m, &cfg, threads, precise, kv_f16 ? 1 + SRT_F16 : 0, &mr, &err) != SRT_OK) {
            fprintf(stderr, "runner: %s\n", err.msg);
            return 1;
        }
        runner = srt_sched_model_runner_iface(mr);
    }
    if (getenv("SRT_BENCH_TRACE")) {
        inner = runner;
        runner.forward = trace_forward;
    }
    if (srt_sched_create(&cfg, &runner, &s, &err) != SRT_OK) {
        fprintf(stderr, "sched: %s\n", err.msg);
        return 1;
    }
    double t0 = now_s();
    for (int r = 0; r < num; r++) {
        srt_sampling_params sp = { .top_p = 1, .repetition_penalty = 1, .max_tokens = out_len,
                                   .ignore_eos = !gram };
        srt_sched_submit_args a = { .id = (uint64_t)r, .prompt = prompts + (size_t)r * (size_t)max_prompt,
                                    .n_prompt = plen[r], .sampling = &sp, .grammar = gram,
                                    .jump_forward = jump ? tok : NULL };
        if (srt_sched_submit(s, &a, &err) != SRT_SCHED_SUBMIT_OK) {
            fprintf(stderr, "submit: %s\n", err.msg);
            return 1;
        }
    }
    int32_t *first = malloc(sizeof(int32_t) * (size_t)out_len), n_first = 0;
    while (srt_sched_has_work(s)) {
        if (srt_sched_step(s, &err) < 0) {
            fprintf(stderr, "step: %s\n", err.msg);
            return 1;
        }
        int n_ev;
        const srt_sched_event *ev = srt_sched_events(s, &n_ev);
        for (int i = 0; first && i < n_ev; i++)
            if (ev[i].id == 0 && ev[i].token >= 0 && n_first < out_len)
                first[n_first++] = ev[i].token;
    }
    if (gram && first) {
        char *text = NULL;
        size_t len;
        if (srt_tokenizer_decode(tok, first, (size_t)n_first, SRT_DETOK_SKIP_SPECIAL, &text, &len, &err) == SRT_OK)
            fprintf(stderr, "request 0 (%d tokens): %s\n", n_first, text);
        free(text);
    }
    free(first);
    double dt = now_s() - t0;
    srt_sched_metrics mt;
    srt_sched_get_metrics(s, &mt);
    if (gram)
        printf("schema=%s jump_forward=%s ", schema, jump ? "on" : "off");
    printf("dataset=%s radix=%s num=%d prompt_tokens=%llu output_tokens=%llu wall_s=%.3f req_per_s=%.2f "
           "output_tok_per_s=%.1f total_tok_per_s=%.1f cache_hit=%.3f steps=%llu forward_tokens=%llu "
           "ttft_mean_ms=%.1f itl_mean_ms=%.2f us_per_step=%.1f\n",
           dataset, radix ? "on" : "off", num, (unsigned long long)mt.prompt_tokens_total,
           (unsigned long long)mt.generation_tokens_total, dt, num / dt, mt.generation_tokens_total / dt,
           (mt.prompt_tokens_total + mt.generation_tokens_total) / dt,
           mt.prompt_tokens_total ? (double)mt.cached_prompt_tokens_total / (double)mt.prompt_tokens_total : 0,
           (unsigned long long)mt.steps, (unsigned long long)mt.forward_tokens_total,
           mt.ttft.n ? mt.ttft.sum / (double)mt.ttft.n * 1e3 : 0, mt.itl.n ? mt.itl.sum / (double)mt.itl.n * 1e3 : 0,
           mt.steps ? dt / (double)mt.steps * 1e6 : 0);
    srt_sched_free(s);
    srt_sched_model_runner_free(mr);
    srt_grammar_free(gram);
    srt_grammar_vocab_free(gv);
    srt_tokenizer_free(tok);
    if (m)
        srt_model_free(m);
    free(prompts);
    free(sys);
    free(plen);
    return 0;
}
