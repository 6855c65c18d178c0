/* Sampling: the effect of every parameter on synthetic logits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srt/sampling.h"
#include "tap.h"

#define V 8
static const int32_t EOS[1] = { 7 };

static srt_sampler_ws *ws;

static int init(srt_sampler *s, const srt_sampling_params *p, const int32_t *prompt, int n_prompt)
{
    srt_err err;
    int rc = srt_sampler_init(s, p, V, EOS, 1, prompt, n_prompt, &err);
    if (rc != SRT_OK)
        tap_diag("init: %s", err.msg);
    return rc;
}

static int draw(srt_sampler *s, const float *logits, srt_sample_result *res)
{
    float l[V];
    memcpy(l, logits, sizeof l);
    return srt_sampler_sample(s, ws, l, res);
}

/* frequencies of n draws (fresh sampler per draw sequence, one long request) */
static void histogram(const srt_sampling_params *p0, const float *logits, int n, int *h)
{
    srt_sampling_params p = *p0;
    srt_sampler s;
    srt_sample_result r;
    p.max_tokens = n;
    memset(h, 0, V * sizeof(int));
    init(&s, &p, NULL, 0);
    for (int i = 0; i < n; i++) {
        draw(&s, logits, &r);
        h[r.token]++;
    }
    srt_sampler_free(&s);
}

/* the loop srt_argmax must agree with: first index of the largest, NaN never */
static int32_t argmax_ref(const float *v, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[b])
            b = i;
    return b;
}

/* lengths around the 8-wide blocks, ties, signed zeros, infinities, NaNs */
static void check_argmax(void)
{
    static float v[100];
    const float pick[] = { 0.0f, -0.0f, 1.0f, -1.0f, 2.0f, INFINITY, -INFINITY, NAN };
    unsigned x = 12345;
    int bad = 0, cases = 0;
    for (int n = 1; n <= 100; n++)
        for (int round = 0; round < 200; round++, cases++) {
            for (int i = 0; i < n; i++) {
                x = x * 1103515245u + 12345u;
                v[i] = pick[(x >> 16) % (round % 2 ? 8 : 5)];
            }
            if (srt_argmax(v, n) != argmax_ref(v, n) && bad++ < 3)
                tap_diag("argmax n=%d round=%d: %d, expected %d", n, round,
                         srt_argmax(v, n), argmax_ref(v, n));
        }
    is_int(bad, 0, "srt_argmax equals the plain loop on 20,000 arrays (ties, -0, inf, NaN)");
    (void)cases;
}

int main(void)
{
    srt_sampling_params p;
    srt_sampler s;
    srt_sample_result r;
    srt_err err;
    int h[V];
    ws = srt_sampler_ws_create(V);
    const float base[V] = { 1.0f, 3.0f, 2.0f, 0.5f, -1.0f, 2.9f, 0.0f, -2.0f };

    /* greedy */
    srt_sampling_params_default(&p);
    p.temperature = 0;
    init(&s, &p, NULL, 0);
    draw(&s, base, &r);
    is_int(r.token, 1, "greedy picks the argmax");
    srt_sampler_free(&s);
    const float tie[V] = { 0, 5, 5, 0, 0, 0, 0, 0 };
    init(&s, &p, NULL, 0);
    draw(&s, tie, &r);
    is_int(r.token, 1, "greedy breaks ties to the lowest id");
    srt_sampler_free(&s);
    check_argmax();

    /* temperature 1 follows the softmax: probs 1/6, 2/6, 3/6 */
    const float three[V] = { 0, logf(2), logf(3), -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    srt_sampling_params_default(&p);
    p.seed = 42;
    histogram(&p, three, 6000, h);
    ok(abs(h[0] - 1000) < 120 && abs(h[1] - 2000) < 150 && abs(h[2] - 3000) < 150 && h[3] + h[4] == 0,
       "temperature 1 samples the softmax (counts %d %d %d of 6000)", h[0], h[1], h[2]);
    /* low temperature concentrates, high temperature flattens */
    p.temperature = 0.1f;
    histogram(&p, three, 1000, h);
    ok(h[2] > 980, "temperature 0.1 almost always takes the best (%d/1000)", h[2]);
    p.temperature = 50.0f;
    histogram(&p, three, 3000, h);
    ok(abs(h[0] - 1000) < 120 && abs(h[2] - 1000) < 120, "temperature 50 is near uniform (%d %d %d)", h[0], h[1], h[2]);

    /* same seed, same tokens; another seed, other tokens */
    int32_t seq[3][64];
    uint64_t seeds[3] = { 7, 7, 8 };
    for (int k = 0; k < 3; k++) {
        srt_sampling_params_default(&p);
        p.seed = seeds[k];
        p.max_tokens = 64;
        init(&s, &p, NULL, 0);
        for (int i = 0; i < 64; i++) {
            draw(&s, base, &r);
            seq[k][i] = r.token;
        }
        srt_sampler_free(&s);
    }
    ok(memcmp(seq[0], seq[1], sizeof seq[0]) == 0, "same seed gives the same 64 tokens");
    ok(memcmp(seq[0], seq[2], sizeof seq[0]) != 0, "another seed gives other tokens");

    /* top_k */
    srt_sampling_params_default(&p);
    p.top_k = 2;
    p.temperature = 5;
    histogram(&p, base, 2000, h);
    ok(h[1] + h[5] == 2000 && h[1] > 500 && h[5] > 500, "top_k 2 keeps only the two best (%d, %d)", h[1], h[5]);

    /* top_p: probs 0.5 0.3 0.15 0.05 */
    const float pp[V] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f), -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    srt_sampling_params_default(&p);
    p.top_p = 0.7f;
    histogram(&p, pp, 3000, h);
    ok(h[0] + h[1] == 3000 && abs(h[0] - 1875) < 150, "top_p 0.7 keeps {0, 1}, renormalised (%d %d %d)", h[0], h[1], h[2]);
    p.top_p = 0.9f;
    histogram(&p, pp, 3000, h);
    ok(h[0] + h[1] + h[2] == 3000 && h[2] > 200, "top_p 0.9 keeps {0, 1, 2} (%d %d %d %d)", h[0], h[1], h[2], h[3]);
    p.top_p = 0.4f;
    histogram(&p, pp, 500, h);
    is_int(h[0], 500, "top_p 0.4 keeps only the best");

    /* top_p on a large vocabulary: the nucleus the draws come from equals the brute-force one */
    {
        enum { BV = 50000 };
        srt_sampler_ws *big = srt_sampler_ws_create(BV);
        float *lg = malloc(BV * sizeof(float)), *tmp = malloc(BV * sizeof(float)), *probs = malloc(BV * sizeof(float));
        uint64_t x = 3;
        for (int i = 0; i < BV; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            lg[i] = (float)((x >> 40) % 1000) / 100.0f;   /* ties included */
        }
        double sum = 0, mx = 0;
        for (int i = 0; i < BV; i++)
            mx = lg[i] > mx ? lg[i] : mx;
        for (int i = 0; i < BV; i++)
            sum += (probs[i] = expf(lg[i] - (float)mx));
        /* brute force: the smallest probability threshold whose mass reaches 0.5 */
        memcpy(tmp, probs, BV * sizeof(float));
        for (int i = 1; i < BV; i++) {   /* insertion sort, descending, done once */
            float v = tmp[i];
            int j = i;
            while (j > 0 && tmp[j - 1] < v) {
                tmp[j] = tmp[j - 1];
                j--;
            }
            tmp[j] = v;
        }
        double c = 0;
        float thr = 0;
        for (int i = 0; i < BV; i++) {
            c += tmp[i];
            if (c >= 0.5 * sum) {
                thr = tmp[i];
                break;
            }
        }
        srt_sampling_params_default(&p);
        p.top_p = 0.5f;
        p.max_tokens = 3000;
        srt_sampler bs;
        srt_sampler_init(&bs, &p, BV, NULL, 0, NULL, 0, &err);
        int outside = 0;
        for (int i = 0; i < 3000; i++) {
            memcpy(tmp, lg, BV * sizeof(float));
            srt_sampler_sample(&bs, big, tmp, &r);
            outside += probs[r.token] < thr;
        }
        ok(outside == 0, "top_p 0.5 over 50000 tokens draws only inside the brute-force nucleus");
        srt_sampler_free(&bs);
        srt_sampler_ws_free(big);
        free(lg);
        free(tmp);
        free(probs);
    }

    /* min_p: keep p >= 0.5 * pmax = 0.25 */
    srt_sampling_params_default(&p);
    p.min_p = 0.5f;
    histogram(&p, pp, 2000, h);
    ok(h[0] + h[1] == 2000 && h[1] > 500, "min_p 0.5 keeps {0, 1} (%d %d)", h[0], h[1]);

    /* repetition penalty (prompt and output): positive logits divided, negative multiplied */
    srt_sampling_params_default(&p);
    p.temperature = 0;
    p.repetition_penalty = 2.0f;
    int32_t prompt[3] = { 1, 4, 1 };
    init(&s, &p, prompt, 3);
    float l[V];
    memcpy(l, base, sizeof l);
    srt_sampler_sample(&s, ws, l, &r);
    ok(l[1] == 1.5f && l[4] == -2.0f && l[5] == 2.9f && r.token == 5,
       "repetition_penalty 2: 3 -> 1.5, -1 -> -2, others unchanged; greedy moves to token 5");
    memcpy(l, base, sizeof l);
    srt_sampler_sample(&s, ws, l, &r);
    ok(l[5] == 1.45f, "repetition_penalty also applies to generated tokens (2.9 -> %.3g)", l[5]);
    srt_sampler_free(&s);

    /* frequency and presence: output tokens only */
    srt_sampling_params_default(&p);
    p.temperature = 0;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    init(&s, &p, prompt, 3);
    memcpy(l, base, sizeof l);
    srt_sampler_sample(&s, ws, l, &r);
    ok(l[1] == 3.0f && r.token == 1, "no penalty for prompt tokens");
    memcpy(l, base, sizeof l);
    srt_sampler_sample(&s, ws, l, &r);   /* token 1 once: 3 - 0.5 - 0.25 = 2.25 -> token 5 */
    ok(l[1] == 2.25f && r.token == 5, "frequency 0.5 + presence 0.25 after one use: 3 -> %.3g, greedy -> %d", l[1], r.token);
    memcpy(l, base, sizeof l);
    srt_sampler_sample(&s, ws, l, &r);
    ok(l[1] == 2.25f && fabsf(l[5] - 2.15f) < 1e-6f, "each token penalised by its own count");
    srt_sampler_free(&s);

    /* logit_bias */
    srt_sampling_params_default(&p);
    p.temperature = 0;
    p.n_logit_bias = 2;
    p.logit_bias_ids[0] = 6, p.logit_bias[0] = 100;
    p.logit_bias_ids[1] = 1, p.logit_bias[1] = -100;
    init(&s, &p, NULL, 0);
    draw(&s, base, &r);
    is_int(r.token, 6, "logit_bias +100 forces a token");
    srt_sampler_free(&s);
    p.n_logit_bias = 1;
    p.logit_bias_ids[0] = 1, p.logit_bias[0] = -100;
    init(&s, &p, NULL, 0);
    draw(&s, base, &r);
    is_int(r.token, 5, "logit_bias -100 bans a token");
    srt_sampler_free(&s);

    /* EOS, min_tokens, ignore_eos, stop ids, max_tokens */
    const float eos_best[V] = { 0, 1, 0, 0, 0, 0, 0, 9 };
    srt_sampling_params_default(&p);
    p.temperature = 0;
    init(&s, &p, NULL, 0);
    draw(&s, eos_best, &r);
    ok(r.token == 7 && r.finish == SRT_FINISH_STOP, "EOS finishes with reason stop");
    ok(draw(&s, eos_best, &r) == SRT_ERROR, "sampling a finished request is an error");
    srt_sampler_free(&s);
    p.min_tokens = 3;
    init(&s, &p, NULL, 0);
    int toks[4];
    for (int i = 0; i < 4; i++) {
        draw(&s, eos_best, &r);
        toks[i] = r.token;
    }
    ok(toks[0] == 1 && toks[1] == 1 && toks[2] == 1 && toks[3] == 7 && r.finish == SRT_FINISH_STOP,
       "min_tokens 3 masks EOS for three tokens, then EOS ends it");
    srt_sampler_free(&s);
    srt_sampling_params_default(&p);
    p.temperature = 0;
    p.ignore_eos = 1;
    p.max_tokens = 5;
    init(&s, &p, NULL, 0);
    int n = 0;
    do {
        draw(&s, eos_best, &r);
        n++;
    } while (!r.finish);
    ok(n == 5 && r.token == 7 && r.finish == SRT_FINISH_LENGTH, "ignore_eos generates EOS and goes on to max_tokens (length)");
    srt_sampler_free(&s);
    p.ignore_eos = 0;
    p.n_stop_ids = 1;
    p.stop_ids[0] = 1;
    init(&s, &p, NULL, 0);
    draw(&s, base, &r);
    ok(r.token == 1 && r.finish == SRT_FINISH_STOP, "a stop token id finishes with reason stop");
    srt_sampler_free(&s);
    p.min_tokens = 1;
    init(&s, &p, NULL, 0);
    draw(&s, eos_best, &r);
    ok(r.token == 0 && r.finish == SRT_FINISH_NONE, "min_tokens masks stop ids too");
    srt_sampler_free(&s);
    p.n_stop_ids = 0;
    p.min_tokens = 0;
    p.max_tokens = 2;
    init(&s, &p, NULL, 0);
    draw(&s, base, &r);
    ok(r.finish == SRT_FINISH_NONE, "not finished before max_tokens");
    draw(&s, base, &r);
    ok(r.finish == SRT_FINISH_LENGTH, "max_tokens finishes with reason length");
    srt_sampler_free(&s);

    /* logprobs: of the raw distribution, top list sorted */
    srt_sampling_params_default(&p);
    p.temperature = 0;
    p.logprobs = 1;
    p.top_logprobs = 3;
    p.repetition_penalty = 3.0f;
    int32_t pr1[1] = { 1 };
    init(&s, &p, pr1, 1);
    draw(&s, base, &r);
    double lse = 0;
    for (int i = 0; i < V; i++)
        lse += exp(base[i]);
    lse = log(lse);
    ok(r.token == 5 && fabs(r.logprob - (2.9 - lse)) < 1e-5, "logprob of the chosen token from the raw logits (%.5f)", r.logprob);
    ok(r.n_top == 3 && r.top_ids[0] == 1 && r.top_ids[1] == 5 && r.top_ids[2] == 2 &&
       fabs(r.top_logprobs[0] - (3.0 - lse)) < 1e-5 && r.top_logprobs[1] > r.top_logprobs[2],
       "top_logprobs: 3 best raw tokens, best first");
    srt_sampler_free(&s);

    /* parameter checks name the field */
    static const struct { const char *field; int which; } bad[] = {
        { "temperature", 0 }, { "top_p", 1 }, { "min_p", 2 }, { "top_k", 3 }, { "repetition_penalty", 4 },
        { "frequency_penalty", 5 }, { "presence_penalty", 6 }, { "max_tokens", 7 }, { "min_tokens", 8 },
        { "stop_token_ids", 9 }, { "logit_bias", 10 }, { "top_logprobs", 11 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srt_sampling_params_default(&p);
        switch (bad[i].which) {
        case 0: p.temperature = -1; break;
        case 1: p.top_p = 0; break;
        case 2: p.min_p = 1.5f; break;
        case 3: p.top_k = -5; break;
        case 4: p.repetition_penalty = 0; break;
        case 5: p.frequency_penalty = 3; break;
        case 6: p.presence_penalty = -2.5f; break;
        case 7: p.max_tokens = 0; break;
        case 8: p.min_tokens = 99; break;
        case 9: p.n_stop_ids = 1, p.stop_ids[0] = V; break;
        case 10: p.n_logit_bias = 1, p.logit_bias_ids[0] = -1; break;
        case 11: p.top_logprobs = 21; break;
        }
        ok(srt_sampling_params_check(&p, V, &err) == SRT_ERROR && strstr(err.msg, bad[i].field),
           "bad %s is refused: %s", bad[i].field, err.msg);
    }

    /* A copy read from shared memory: counts that index arrays are forced into range, the
     * same bounds the check enforces (one set of limits, srt/request.h). */
    srt_sampling_params_default(&p);
    p.n_stop_ids = SRT_REQ_MAX_STOP_IDS + 1000;
    p.n_logit_bias = -3;
    p.top_logprobs = SRT_REQ_MAX_TOP_LOGPROBS + 1;
    srt_sampling_params_clamp(&p);
    ok(p.n_stop_ids == SRT_REQ_MAX_STOP_IDS && p.n_logit_bias == 0 && p.top_logprobs == SRT_REQ_MAX_TOP_LOGPROBS,
       "clamp: stop ids %d, logit bias %d, top logprobs %d", p.n_stop_ids, p.n_logit_bias, p.top_logprobs);
    p.n_stop_ids = 0;
    ok(srt_sampling_params_check(&p, V, &err) == SRT_OK, "clamped params pass the check: %s", err.msg);
    p.n_logit_bias = SRT_REQ_MAX_LOGIT_BIAS + 1;
    ok(srt_sampling_params_check(&p, V, &err) == SRT_ERROR && strstr(err.msg, "logit_bias"),
       "one logit_bias entry over SRT_REQ_MAX_LOGIT_BIAS is refused: %s", err.msg);

    /* srt_sampler_replace_tail (jump-forward): forced tokens join the history and the counts */
    {
        const float pen[V] = { 0, 2.0f, 1.9f, 0, 0, 0, 0, -5.0f };
        const int32_t forced[3] = { 2, 2, 3 }, bad[1] = { V };
        srt_sampling_params_default(&p);
        p.temperature = 0;
        p.max_tokens = 6;
        p.presence_penalty = 1.0f;
        p.n_stop_ids = 1;
        p.stop_ids[0] = 6;
        init(&s, &p, NULL, 0);
        draw(&s, pen, &r);                                  /* 1 */
        ok(srt_sampler_replace_tail(&s, 2, forced, 3) == SRT_ERROR &&
           srt_sampler_replace_tail(&s, 1, bad, 1) == SRT_ERROR && s.n_generated == 1,
           "replace_tail: more than the output, or an id outside the vocabulary, is refused, nothing changed");
        ok(srt_sampler_replace_tail(&s, 1, forced, 3) == SRT_OK && s.n_generated == 3 &&
           s.history[0] == 2 && s.history[2] == 3 && !s.finished,
           "replace_tail: the drawn token replaced by 3 forced ones (history, count)");
        draw(&s, pen, &r);
        is_int(r.token, 1, "replace_tail: penalties see the forced tokens (2 present: 1 wins)");
        ok(srt_sampler_replace_tail(&s, 0, forced, 3) == SRT_ERROR,
           "replace_tail: no room beyond max_tokens");
        const int32_t last[2] = { 3, 3 };
        ok(srt_sampler_replace_tail(&s, 0, last, 2) == SRT_OK && s.finished == SRT_FINISH_LENGTH,
           "replace_tail: reaching max_tokens finishes with length");
        srt_sampler_free(&s);
        init(&s, &p, NULL, 0);
        draw(&s, pen, &r);
        const int32_t stop[2] = { 6, 3 };
        ok(srt_sampler_replace_tail(&s, 0, stop, 2) == SRT_OK && s.finished == SRT_FINISH_STOP,
           "replace_tail: a stop id among the forced tokens finishes with stop");
        srt_sampler_free(&s);
    }
    srt_sampler_ws_free(ws);
    return tap_done();
}
