/* Jump-forward (srt_sched_submit_args.jump_forward) over the real engine: with a JSON schema of
 * long fixed property names, a constrained request takes fewer forward steps than step by step,
 * its output still follows the grammar and parses as the schema says, and max_tokens, stop ids,
 * logprob requests (which decode step by step), events and the KV accounting stay right.
 *
 * Model: .cache/models/tiny-llama (scripts/make_tiny_models.py) with its tokenizer.json (SmolLM2's
 * byte-level BPE). SRT_MODEL_DIR overrides the directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_tree.h>

#include "srt/grammar.h"
#include "srt/model.h"
#include "srt/sched.h"
#include "srt/tokenizer.h"
#include "sched/serve.h"
#include "tap.h"

#define MAXOUT 256

static const char schema[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"customer_identification_number\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 99},"
    "\"shipping_address_postal_code_of_the_recipient\": {\"type\": \"string\", \"maxLength\": 6},"
    "\"is_priority_delivery_requested_by_the_customer\": {\"type\": \"boolean\"}},"
    "\"required\": [\"customer_identification_number\", \"shipping_address_postal_code_of_the_recipient\","
    "\"is_priority_delivery_requested_by_the_customer\"]}";

static srt_model     *model;
static srt_tokenizer *tok;
static srt_grammar   *gram;
static int32_t        eos;

typedef struct run_out {
    int32_t           out[MAXOUT];
    int32_t           n_out;         /* from the events */
    int               bad_events;    /* n_output not one more than the event before */
    srt_finish_reason fin;
    int32_t           stop_id;
    uint64_t          steps, gen_tokens;
    int               check_failed;
    int32_t           max_per_step;  /* most tokens one step produced */
} run_out;

/* One request (id 1, constrained) alone or beside an unconstrained one (id 2). */
static int run(int jump, int with_other, int32_t max_tokens, int32_t stop_id, int logprobs, run_out *o,
               char *why, size_t why_len)
{
    const srt_model_config *mc = srt_model_config_of(model);
    srt_sched_config cfg = {
        .max_running_requests = 4, .max_queued_requests = 4, .context_length = 512,
        .max_total_tokens = 2048, .page_size = 1, .chunked_prefill_size = 64,
        .policy = SRT_SCHED_FCFS, .radix_cache = 1, .vocab_size = mc->vocab_size,
        .n_eos = 1, .eos_ids = { eos },
    };
    srt_err err = {{0}};
    srt_sched_model_runner *mr;
    srt_sched *s;
    int32_t prompt[16], other[8];
    size_t np;
    int rc = 0;

    memset(o, 0, sizeof *o);
    o->fin = SRT_FINISH_NONE;
    if (srt_tokenizer_encode(tok, "Order record as JSON:", 21, 0, prompt, 16, &np, &err) != SRT_OK) {
        snprintf(why, why_len, "encode: %s", err.msg);
        return -1;
    }
    for (int i = 0; i < 8; i++)
        other[i] = 100 + i * 7;
    if (srt_sched_model_runner_create(model, &cfg, 2, 0, 0, &mr, &err) != SRT_OK) {
        snprintf(why, why_len, "runner: %s", err.msg);
        return -1;
    }
    srt_sched_runner runner = srt_sched_model_runner_iface(mr);
    if (srt_sched_create(&cfg, &runner, &s, &err) != SRT_OK) {
        snprintf(why, why_len, "sched: %s", err.msg);
        srt_sched_model_runner_free(mr);
        return -1;
    }
    srt_sampling_params sp;
    srt_sampling_params_default(&sp);
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    sp.logprobs = logprobs;
    if (stop_id >= 0) {
        sp.n_stop_ids = 1;
        sp.stop_ids[0] = stop_id;
    }
    srt_sched_submit_args a = { .id = 1, .prompt = prompt, .n_prompt = (int32_t)np, .sampling = &sp,
                                .grammar = gram, .jump_forward = jump ? tok : NULL };
    srt_sampling_params sp2;
    srt_sampling_params_default(&sp2);
    sp2.temperature = 0;
    sp2.max_tokens = 40;
    sp2.ignore_eos = 1;
    srt_sched_submit_args b = { .id = 2, .prompt = other, .n_prompt = 8, .sampling = &sp2,
                                .jump_forward = tok };   /* no grammar: no jump */
    if (srt_sched_submit(s, &a, &err) != SRT_SCHED_SUBMIT_OK ||
        (with_other && srt_sched_submit(s, &b, &err) != SRT_SCHED_SUBMIT_OK)) {
        snprintf(why, why_len, "submit: %s", err.msg);
        rc = -1;
    }
    for (int steps = 0; rc == 0 && srt_sched_has_work(s) && steps < 10000; steps++) {
        if (srt_sched_step(s, &err) < 0) {
            snprintf(why, why_len, "step: %s", err.msg);
            rc = -1;
        }
        if (srt_sched_check(s, &err) != SRT_OK && !o->check_failed) {
            o->check_failed = 1;
            snprintf(why, why_len, "check: %s", err.msg);
        }
        int n;
        int32_t this_step = 0;
        const srt_sched_event *ev = srt_sched_events(s, &n);
        for (int i = 0; i < n; i++) {
            if (ev[i].id != 1)
                continue;
            if (ev[i].token >= 0) {
                if (ev[i].n_output != o->n_out + 1)
                    o->bad_events++;
                if (o->n_out < MAXOUT)
                    o->out[o->n_out++] = ev[i].token;
                this_step++;
            }
            if (ev[i].finish != SRT_FINISH_NONE) {
                o->fin = ev[i].finish;
                o->stop_id = ev[i].stop_id;
            }
        }
        if (this_step > o->max_per_step)
            o->max_per_step = this_step;
    }
    srt_sched_metrics m;
    srt_sched_get_metrics(s, &m);
    o->steps = m.steps;
    o->gen_tokens = m.generation_tokens_total;
    srt_sched_free(s);
    srt_sched_model_runner_free(mr);
    return rc;
}

/* The output follows the grammar (a fresh matcher accepts every token, then ends), and parses
 * as the schema says. */
static int valid(const run_out *o, char *text, size_t cap)
{
    srt_grammar_matcher *gm = srt_grammar_matcher_new(gram);
    int good = gm != NULL;
    int32_t n = o->n_out;

    if (n > 0 && o->out[n - 1] == eos)
        n--;
    for (int32_t i = 0; good && i < n; i++)
        good = srt_grammar_matcher_accept_token(gm, o->out[i]);
    good = good && srt_grammar_matcher_can_end(gm);
    srt_grammar_matcher_free(gm);
    char *t = NULL;
    size_t len = 0;
    srt_err err;
    text[0] = 0;
    if (srt_tokenizer_decode(tok, o->out, (size_t)n, SRT_DETOK_SKIP_SPECIAL, &t, &len, &err) == SRT_OK) {
        snprintf(text, cap, "%s", t);
        free(t);
    }
    if (!good)
        return 0;
    char eb[256];
    yajl_val v = yajl_tree_parse(text, eb, sizeof eb);
    const char *p1[] = { "customer_identification_number", NULL };
    const char *p2[] = { "shipping_address_postal_code_of_the_recipient", NULL };
    const char *p3[] = { "is_priority_delivery_requested_by_the_customer", NULL };
    good = v && YAJL_IS_OBJECT(v) && YAJL_IS_INTEGER(yajl_tree_get(v, p1, yajl_t_any)) &&
           YAJL_IS_STRING(yajl_tree_get(v, p2, yajl_t_string)) &&
           (YAJL_IS_TRUE(yajl_tree_get(v, p3, yajl_t_any)) || YAJL_IS_FALSE(yajl_tree_get(v, p3, yajl_t_any)));
    yajl_tree_free(v);
    return good;
}

int main(void)
{
    srt_err err = {{0}};
    char path[1024], tj[1100], tc[1100], why[1200] = "", text[4096];
    const char *dir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    srt_grammar_vocab *v = NULL;
    run_out step, jf, jf2, cut, stop, lp;

    snprintf(path, sizeof path, "%s/tiny-llama", dir);
    snprintf(tj, sizeof tj, "%s/tokenizer.json", path);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", path);
    if (srt_model_load(path, &model, &err) != SRT_OK ||
        srt_tokenizer_load_json(tj, tc, &tok, &err) != SRT_OK) {
        ok(0, "load %s (scripts/make_tiny_models.py): %s", path, err.msg);
        return tap_done();
    }
    eos = srt_tokenizer_eos_id(tok);
    if (srt_grammar_vocab_from_tokenizer(tok, (size_t)srt_model_config_of(model)->vocab_size, &eos, 1, &v,
                                         &err) != SRT_OK ||
        srt_grammar_compile_json_schema(v, schema, sizeof schema - 1, NULL, &gram, &err) != SRT_OK) {
        ok(0, "grammar: %s", err.msg);
        return tap_done();
    }

    ok(run(0, 0, 200, -1, 0, &step, why, sizeof why) == 0 && !step.check_failed, "step by step ran: %s", why);
    ok(valid(&step, text, sizeof text) && step.fin == SRT_FINISH_STOP,
       "step by step: %d tokens, finish %d, valid: %s", step.n_out, step.fin, text);
    ok(step.max_per_step == 1, "step by step: one token per step");

    ok(run(1, 0, 200, -1, 0, &jf, why, sizeof why) == 0 && !jf.check_failed, "jump-forward ran: %s", why);
    ok(valid(&jf, text, sizeof text) && jf.fin == SRT_FINISH_STOP,
       "jump-forward: %d tokens, finish %d, valid: %s", jf.n_out, jf.fin, text);
    ok(jf.bad_events == 0 && jf.gen_tokens == (uint64_t)jf.n_out,
       "jump-forward: one event per token, n_output counting up, usage counts them (%llu)",
       (unsigned long long)jf.gen_tokens);
    ok(jf.max_per_step > 3, "jump-forward: a step appended %d tokens", jf.max_per_step);
    /* the three property names alone are ~130 forced bytes */
    ok(jf.steps * 10 < step.steps * 7, "jump-forward: %llu forward steps vs %llu step by step (%d vs %d tokens)",
       (unsigned long long)jf.steps, (unsigned long long)step.steps, jf.n_out, step.n_out);

    /* beside an unconstrained request in the same batches: the same output */
    ok(run(1, 1, 200, -1, 0, &jf2, why, sizeof why) == 0 && !jf2.check_failed, "batched: ran: %s", why);
    ok(jf2.n_out == jf.n_out && memcmp(jf2.out, jf.out, sizeof(int32_t) * (size_t)jf.n_out) == 0,
       "batched with an unconstrained request: the same tokens");

    /* max_tokens ends inside a jump: exactly max_tokens, finish length */
    int32_t cap = 5;
    ok(run(1, 0, cap, -1, 0, &cut, why, sizeof why) == 0, "max_tokens %d: ran: %s", cap, why);
    ok(cut.n_out == cap && cut.fin == SRT_FINISH_LENGTH && cut.max_per_step > 1 &&
       memcmp(cut.out, jf.out, sizeof(int32_t) * (size_t)cap) == 0,
       "max_tokens %d inside a jump: %d tokens, finish %d, a prefix of the full output", cap, cut.n_out, cut.fin);

    /* a stop id that is a forced token: the output ends at its first occurrence */
    int32_t sid = jf.n_out > 3 ? jf.out[3] : -1, first = -1;
    for (int32_t i = 0; i < jf.n_out && first < 0; i++)
        if (jf.out[i] == sid)
            first = i;
    ok(run(1, 0, 200, sid, 0, &stop, why, sizeof why) == 0, "stop id %d: ran: %s", sid, why);
    ok(first >= 1 && stop.fin == SRT_FINISH_STOP && stop.stop_id == sid && stop.n_out == first + 1 &&
       memcmp(stop.out, jf.out, sizeof(int32_t) * (size_t)(first + 1)) == 0,
       "stop id inside a jump: ends there (%d tokens, first at %d)", stop.n_out, first);

    /* logprobs: step by step even with jump-forward on (forced tokens have none) */
    ok(run(1, 0, 200, -1, 1, &lp, why, sizeof why) == 0, "logprobs: ran: %s", why);
    ok(lp.steps == step.steps && lp.n_out == step.n_out &&
       memcmp(lp.out, step.out, sizeof(int32_t) * (size_t)step.n_out) == 0,
       "logprobs with jump-forward on: decoded step by step, the step-by-step output");

    srt_grammar_free(gram);
    srt_grammar_vocab_free(v);
    srt_tokenizer_free(tok);
    srt_model_free(model);
    return tap_done();
}
