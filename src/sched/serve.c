/* The scheduler process: the real model behind the scheduler's runner interface, and the
 * main loop between the shared-memory channel and srt_sched_step().
 *
 * The loop never sleeps on a timer: when there is nothing to run it blocks in
 * srt_chan_sched_wait() until a worker rings (new request, abort) or a stop is requested. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/kv_alloc.h"
#include "hooks/activations.h"
#include "hooks/registry.h"
#include "sched/tp_group.h"
#include "hooks/admin.h"
#include "srt/backend_cuda.h"
#include "srt/model.h"
#include "sched/grammar_cache.h"
#include "sched/serve.h"
#include "srt/sched.h"

/* ---------------- the model as a runner ---------------- */

struct srt_sched_model_runner {
    srt_runner   *runner;
    srt_kv_pool  *kv;
    srt_tp_group *tp;   /* tp > 1: rank 0 of this group (not owned) */
};

static int model_forward(void *self, const srt_forward_batch *b, float *logits, srt_err *err)
{
    srt_sched_model_runner *mr = self;
    if (mr->tp)
        return srt_tp_group_forward(mr->tp, mr->runner, mr->kv, b, logits, err);
    return srt_runner_forward(mr->runner, mr->kv, b, logits, err);
}

static int model_runner_create(srt_model *m, const srt_sched_config *cfg, int n_threads, srt_tp_group *tp,
                               int cuda, double mem_fraction, int graphs, int precise, int kv_dtype,
                               int weights_mmap, srt_hook_registry *hooks, srt_sched_model_runner **out,
                               srt_err *err);

int srt_sched_model_runner_create(srt_model *m, const srt_sched_config *cfg, int n_threads, int precise,
                                  int kv_dtype, srt_sched_model_runner **out, srt_err *err)
{
    return model_runner_create(m, cfg, n_threads, NULL, 0, 0, SRT_RUNNER_GRAPHS_AUTO, precise, kv_dtype, 0, NULL,
                               out, err);
}

/* cuda: the runner and its KV pool (bf16) on the CUDA backend; graphs: SRT_RUNNER_GRAPHS_*;
 * precise: f32 activations (srt_numerics exact); kv_dtype: 0 the device's default, else
 * 1 + the KV pool's srt_dtype (srt_kv_cache_dtype); weights_mmap: the CPU runner reads the
 * weights in place (srt_weights_mmap on) instead of its own copy */
static int model_runner_create(srt_model *m, const srt_sched_config *cfg, int n_threads, srt_tp_group *tp,
                               int cuda, double mem_fraction, int graphs, int precise, int kv_dtype,
                               int weights_mmap, srt_hook_registry *hooks, srt_sched_model_runner **out,
                               srt_err *err)
{
    srt_sched_model_runner *mr = calloc(1, sizeof *mr);
    *out = NULL;
    if (!mr)
        return srt_err_set(err, "out of memory");
    srt_runner_opts o = {
        .max_batch_tokens = srt_sched_max_batch_tokens(cfg),
        .max_seqs = cfg->max_running_requests,
        .n_threads = n_threads,
        .tp_rank = 0, .tp_size = 1,
        .device = cuda ? SRT_RUNNER_CUDA : SRT_RUNNER_CPU, .mem_fraction = mem_fraction,
        .graphs = graphs, .precise_matmul = precise, .kv_cache_dtype = kv_dtype,
        .weights_mmap = weights_mmap,
    };
    srt_dtype kvt = kv_dtype > 0 ? (srt_dtype)(kv_dtype - 1) : cuda ? SRT_BF16 : SRT_F32;
    mr->tp = tp;
    if (tp) {
        if (srt_tp_group_setup(tp, m, &o, (int32_t)cfg->max_total_tokens, &mr->runner, &mr->kv, err) != SRT_OK) {
            srt_sched_model_runner_free(mr);
            return SRT_ERROR;
        }
    } else if (srt_runner_create(m, &o, &mr->runner, err) != SRT_OK ||
               srt_kv_pool_create_on(srt_model_config_of(m), 1, (int32_t)cfg->max_total_tokens, kvt,
                                     srt_runner_backend(mr->runner), &mr->kv, err) != SRT_OK) {
        srt_sched_model_runner_free(mr);
        return SRT_ERROR;
    }
    /* hooks on device memory, and device hooks (ABI 1.1) on the backend's stream, before the
     * warm-up: graphs captured now hold the device hooks' work */
    if (cuda && hooks)
        srt_hook_registry_use_backend(hooks, srt_runner_backend(mr->runner));
    if (cuda && !tp) {   /* every decode batch size's CUDA graph now, not at its first step */
        srt_runner_graph_stats g0, g1;
        srt_err we = { { 0 } };
        struct timespec t0, t1;
        srt_runner_graph_stats_get(mr->runner, &g0);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int wrc = srt_runner_graphs_warmup(mr->runner, mr->kv, 0, &we);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        srt_runner_graph_stats_get(mr->runner, &g1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (wrc != SRT_OK)
            srt_log(SRT_LOG_WARN, "CUDA graph warm-up failed after %lld graphs (%.0f ms), decode steps capture lazily"
                                  " or run eagerly: %s", (long long)(g1.captures - g0.captures), ms, we.msg);
        else if (g1.enabled)
            srt_log(SRT_LOG_INFO, "CUDA graph warm-up: %lld decode graphs captured in %.0f ms",
                    (long long)(g1.captures - g0.captures), ms);
    }
    *out = mr;
    return SRT_OK;
}

srt_sched_runner srt_sched_model_runner_iface(srt_sched_model_runner *mr)
{
    srt_sched_runner r = { mr, model_forward, NULL };
    return r;
}

void srt_sched_model_runner_free(srt_sched_model_runner *mr)
{
    if (!mr)
        return;
    if (mr->kv)
        srt_kv_pool_free(mr->kv);
    if (mr->runner)
        srt_runner_free(mr->runner);
    free(mr);
}

/* ---------------- configuration ---------------- */

static uint64_t file_bytes(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
}

int srt_sched_config_from_chan(const srt_chan_config *cc, const srt_model_config *mc,
                               uint64_t device_bytes, srt_sched_config *out, srt_err *err)
{
    srt_sched_config c;
    memset(&c, 0, sizeof c);

    c.context_length = mc->max_position_embeddings > 0 ? mc->max_position_embeddings : 4096;
    if (cc->context_length > 0 && cc->context_length < c.context_length)
        c.context_length = cc->context_length;
    if (cc->slot_tokens > 0 && cc->slot_tokens < c.context_length)
        c.context_length = cc->slot_tokens;
    c.max_running_requests = cc->max_running_requests > 0 ? cc->max_running_requests : 64;
    if (cc->slots > 0 && c.max_running_requests > cc->slots)
        c.max_running_requests = cc->slots;
    c.max_queued_requests = cc->slots > 0 ? cc->slots : (cc->max_queued_requests > 0 ? cc->max_queued_requests : 256);
    c.page_size = cc->page_size > 0 ? cc->page_size : 1;
    /* unset (0): 2048 tokens per step; -1: off (whole prompts, up to max_prefill_tokens) */
    c.chunked_prefill_size = cc->chunked_prefill_size == 0 ? 2048 : cc->chunked_prefill_size;
    c.max_prefill_tokens = 16384;
    c.policy = cc->schedule_policy == SRT_CHAN_POLICY_LPM ? SRT_SCHED_LPM : SRT_SCHED_FCFS;
    c.radix_cache = cc->radix_cache != 0;
    c.vocab_size = mc->vocab_size;
    c.n_eos = mc->n_eos > 8 ? 8 : mc->n_eos;
    memcpy(c.eos_ids, mc->eos_token_ids, sizeof(int32_t) * (size_t)c.n_eos);

    if (cc->max_total_tokens > 0) {
        c.max_total_tokens = srt_kv_budget_tokens(cc->max_total_tokens, 0, 0, 0, 0, c.page_size);
    } else {
        /* CPU: a fraction of RAM after the weights, capped at what the running requests
         * could ever fill; the cap keeps a small model from taking the machine. */
        double frac = cc->mem_fraction_static > 0 ? cc->mem_fraction_static : 0.2;
        uint64_t per_tok = srt_kv_bytes_per_slot(mc, cc->kv_cache_dtype == SRT_CHAN_KV_F32 ? SRT_F32 : SRT_F16);
        c.max_total_tokens = srt_kv_budget_tokens(0, frac, device_bytes, file_bytes(cc->model_path),
                                                  per_tok, c.page_size);
        int64_t cap = (int64_t)c.max_running_requests * c.context_length;
        if (c.max_total_tokens > cap)
            c.max_total_tokens = cap / c.page_size * c.page_size;
    }
    if (c.max_total_tokens < c.context_length / 4 && c.max_total_tokens < 1024)
        return srt_err_set(err, "KV budget of %lld tokens is too small (srt_max_total_tokens / srt_mem_fraction_static)",
                           (long long)c.max_total_tokens);
    if (c.max_total_tokens > INT32_MAX / 2)
        c.max_total_tokens = INT32_MAX / 2 / c.page_size * c.page_size;
    *out = c;
    return SRT_OK;
}

/* ---------------- the loop ---------------- */

/* Where srt_sched_run publishes metrics, and when it last did. */
typedef struct metrics_out {
    srt_sched_metrics_sink fn;
    void                  *user;
    double                 last;
} metrics_out;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void publish_metrics(srt_sched *s, metrics_out *mo, int force)
{
    if (!mo->fn || (!force && mono_s() - mo->last < 0.05))
        return;
    srt_sched_metrics m;
    srt_sched_get_metrics(s, &m);
    mo->fn(&m, mo->user);
    mo->last = mono_s();
}

typedef struct live_req {
    uint64_t id;    /* (gen << 32) | slot */
    int      used;
} live_req;

static uint64_t req_id(uint32_t slot, uint32_t gen) { return ((uint64_t)gen << 32) | slot; }

/* A finishing request's captured activations into its slot: NULL, or why they could not be
 * returned (the request then fails rather than answer without them). */
static const char *put_activations(srt_chan *c, srt_act_capture *acts, const srt_sched_event *e,
                                   srt_err *err)
{
    uint64_t id = e->id;
    uint32_t slot = (uint32_t)id, gen = (uint32_t)(id >> 32);
    size_t cap, len;
    void *area = srt_chan_sched_act_area(c, slot, gen, &cap);

    if (area == NULL)
        return "return_activations: the slot has no activation area";
    if (srt_act_capture_write(acts, id, (int64_t)e->n_prompt + e->n_output - 2, area, cap, &len, err) != SRT_OK)
        return err->msg;
    srt_chan_sched_act_done(c, slot, gen, len);
    return NULL;
}

/* A request's hook selection dropped, on every rank at tp > 1. */
static void request_end(srt_tp_group *tp, srt_hook_registry *hooks, uint64_t id)
{
    if (tp)
        srt_tp_group_request_end(tp, hooks, id);
    else
        srt_hook_request_end(hooks, id);
}

static int any_finished(const srt_sched *s)
{
    int n;
    const srt_sched_event *ev = srt_sched_events(s, &n);
    for (int i = 0; i < n; i++)
        if (ev[i].finish != SRT_FINISH_NONE)
            return 1;
    return 0;
}

static void publish_events(srt_chan *c, srt_sched *s, live_req *live, int n_live,
                           srt_hook_registry *hooks, srt_act_capture *acts, srt_tp_group *tp)
{
    int n;
    const srt_sched_event *ev = srt_sched_events(s, &n);
    for (int i = 0; i < n; i++) {
        const srt_sched_event *e = &ev[i];
        uint32_t slot = (uint32_t)e->id, gen = (uint32_t)(e->id >> 32);
        if (e->token >= 0 &&
            srt_chan_sched_push_tokens(c, slot, gen, &e->token, &e->logprob, 1,
                                       e->n_top ? e->top_ids : NULL, e->n_top ? e->top_logprobs : NULL,
                                       (uint32_t)e->n_top) != SRT_OK &&
            e->finish == SRT_FINISH_NONE) {
            srt_sched_abort(s, e->id);   /* stale handle or output area full */
        }
        if (e->finish != SRT_FINISH_NONE) {
            srt_finish_reason fin = e->finish;
            const char *why = fin == SRT_FINISH_ERROR ? "the model failed on this batch" : NULL;
            srt_err ae = { { 0 } };
            request_end(tp, hooks, e->id);
            if ((fin == SRT_FINISH_STOP || fin == SRT_FINISH_LENGTH) && srt_act_capture_has(acts, e->id) &&
                (why = put_activations(c, acts, e, &ae)) != NULL)
                fin = SRT_FINISH_ERROR;
            srt_act_capture_end(acts, e->id);
            srt_chan_sched_finish(c, slot, gen, fin, e->stop_id, (uint32_t)e->cached_tokens, why);
            for (int k = 0; k < n_live; k++)
                if (live[k].used && live[k].id == e->id) {
                    live[k].used = 0;
                    break;
                }
        }
    }
}

/* A tensor-parallel rank died: fail every live request now, and leave so that the
 * supervisor restarts the whole group. */
static int tp_group_lost(srt_chan *c, live_req *live, int n_live, srt_err *err)
{
    srt_log(SRT_LOG_ERROR, "tensor-parallel group lost (%s): failing in-flight requests, restarting", err->msg);
    for (int k = 0; k < n_live; k++)
        if (live[k].used)
            srt_chan_sched_finish(c, (uint32_t)live[k].id, (uint32_t)(live[k].id >> 32), SRT_FINISH_ERROR, -1,
                                  0, "a tensor-parallel rank died; the model is restarting");
    srt_chan_sched_flush(c);
    /* DOWN, not FAILED: new requests wait for the restarted group (srt_wait_ready) */
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_DOWN, "restarting the tensor-parallel group", NULL);
    free(live);
    return SRT_ERROR;
}

static int serve(srt_chan *c, srt_sched *s, const srt_sched_config *cfg, srt_hook_registry *hooks,
                 srt_act_capture *acts, srt_tp_group *tp, grammar_cache *gc, metrics_out *mo, srt_err *err)
{
    int n_live = cfg->max_running_requests + cfg->max_queued_requests;
    int cc_jump_forward = srt_chan_get_config(c)->grammar_jump_forward != 0;
    live_req *live = calloc((size_t)n_live, sizeof *live);
    int stepped_since_wait = 0;

    if (!live)
        return srt_err_set(err, "out of memory");
    for (;;) {
        if (tp && srt_tp_group_check(tp, err) != SRT_OK)
            return tp_group_lost(c, live, n_live, err);
        int stop = srt_chan_sched_stopping(c);
        if (stop == 2) {
            for (int k = 0; k < n_live; k++)
                if (live[k].used)
                    srt_sched_abort(s, live[k].id);
            while (srt_sched_has_work(s)) {
                srt_sched_step(s, err);
                publish_events(c, s, live, n_live, hooks, acts, tp);
            }
            srt_chan_sched_flush(c);
            break;
        }
        /* srt_admin commands touch the hook registry: only here, between forward passes.
         * KV cached under other hooks would replay their effect: drop it on a change. */
        uint64_t hook_gen = hooks ? srt_hook_registry_generation(hooks) : 0;
        if ((tp ? srt_tp_group_admin_serve(tp, c, hooks) : srt_chan_sched_admin_serve(c, hooks)) && hooks && srt_hook_registry_generation(hooks) != hook_gen)
            srt_sched_flush_cache(s);
        /* New requests, while the scheduler has room to hold them. */
        srt_chan_req rq;
        while (stop == 0 && srt_sched_num_waiting(s) < cfg->max_queued_requests &&
               srt_chan_sched_pop_request(c, &rq) == 1) {
            srt_err e2;
            srt_sampling_params sp = rq.rq->sampling;   /* one read of shared memory */
            if (sp.max_tokens > (int32_t)rq.max_output)
                sp.max_tokens = (int32_t)rq.max_output;
            srt_sched_submit_args a = { .id = req_id(rq.slot, rq.gen), .group = rq.group,
                                        .prompt = rq.prompt, .n_prompt = (int32_t)rq.n_prompt,
                                        .sampling = &sp, .cache_ns = rq.rq->cache_ns };
            if ((tp ? srt_tp_group_request_begin(tp, hooks, a.id, &rq.rq->hooks, &e2)
                    : srt_hook_request_begin(hooks, a.id, &rq.rq->hooks, &e2)) != SRT_OK) {
                srt_chan_sched_finish(c, rq.slot, rq.gen, SRT_FINISH_ERROR, -1, 0, e2.msg);
                continue;
            }
            /* returned activations: captured on rank 0 (model.layers.N's output is replicated
             * after the all-reduces); "all" and "mean" compute every prompt position */
            srt_request_activations ra = rq.rq->acts;   /* one read of shared memory */
            srt_request_activations_clamp(&ra);
            if (srt_act_capture_begin(acts, a.id, &ra, &e2) != SRT_OK) {
                request_end(tp, hooks, a.id);
                srt_chan_sched_finish(c, rq.slot, rq.gen, SRT_FINISH_ERROR, -1, 0, e2.msg);
                continue;
            }
            for (int k = 0; k < ra.n; k++)
                if (ra.spec[k].reduce != SRT_ACT_LAST)
                    a.own_prefix = 1;
            if (rq.rq->grammar.kind != SRT_GRAMMAR_NONE) {
                a.grammar = gc ? grammar_cache_get(gc, &rq.rq->grammar, &e2) : NULL;
                if (a.grammar == NULL) {
                    if (!gc)
                        srt_err_set(&e2, "out of memory for structured output");
                    request_end(tp, hooks, a.id);
                    srt_act_capture_end(acts, a.id);
                    srt_chan_sched_finish(c, rq.slot, rq.gen, SRT_FINISH_ERROR, -1, 0, e2.msg);
                    continue;
                }
            }
            /* a request returning activations decodes step by step: its "last" row is the one
             * its last token was sampled from, and a forced token is not sampled */
            if (a.grammar && cc_jump_forward && ra.n == 0)
                a.jump_forward = grammar_cache_tokenizer(gc);
            srt_sched_submit_status st = srt_sched_submit(s, &a, &e2);
            srt_grammar_free(a.grammar);     /* the request's matcher holds its own reference */
            if (st != SRT_SCHED_SUBMIT_OK) {
                request_end(tp, hooks, a.id);
                srt_act_capture_end(acts, a.id);
                srt_chan_sched_finish(c, rq.slot, rq.gen, SRT_FINISH_ERROR, -1, 0, e2.msg);
                continue;
            }
            for (int k = 0; k < n_live; k++)
                if (!live[k].used) {
                    live[k].used = 1;
                    live[k].id = a.id;
                    break;
                }
        }
        /* Client gone: the abort takes effect in this step. */
        for (int k = 0; k < n_live; k++)
            if (live[k].used && srt_chan_sched_is_aborted(c, (uint32_t)live[k].id, (uint32_t)(live[k].id >> 32)))
                srt_sched_abort(s, live[k].id);

        if (srt_sched_has_work(s)) {
            if (srt_sched_step(s, err) < 0)
                srt_log(SRT_LOG_ERROR, "scheduler step: %s", err->msg);
            /* the metrics that count a finished request go out before its finish does: a
             * client that got its answer and then reads /metrics finds it there */
            publish_metrics(s, mo, any_finished(s));
            publish_events(c, s, live, n_live, hooks, acts, tp);
            if (tp && srt_tp_group_check(tp, err) != SRT_OK)
                return tp_group_lost(c, live, n_live, err);
            srt_chan_sched_flush(c);
            /* Busy: drain doorbells and reclaim dead workers' slots now and then, without blocking. */
            if (++stepped_since_wait >= 16) {
                srt_chan_sched_wait(c, 0);
                stepped_since_wait = 0;
            }
            continue;
        }
        publish_metrics(s, mo, 1);
        if (stop == 1)
            break;
        stepped_since_wait = 0;
        if (srt_chan_sched_wait(c, -1) < 0) {
            srt_err_set(err, "waiting on the scheduler doorbell failed");
            free(live);
            return SRT_ERROR;
        }
    }
    free(live);
    return SRT_OK;
}

/* srt_kv_cache_dtype as model_runner_create's kv_dtype: auto is f16 on the CPU (half of
 * f32's memory; the CPU attention reads f16 rows), bf16 on CUDA */
static int kv_dtype_of(const srt_chan_config *cc, int cuda)
{
    switch (cc->kv_cache_dtype) {
    case SRT_CHAN_KV_F32: return 1 + SRT_F32;
    case SRT_CHAN_KV_F16: return 1 + SRT_F16;
    case SRT_CHAN_KV_BF16: return 1 + SRT_BF16;
    default: return 1 + (cuda ? SRT_BF16 : SRT_F16);
    }
}

int srt_sched_run(srt_chan *c, srt_sched_metrics_sink sink, void *sink_user, srt_err *err)
{
    metrics_out mo = { sink, sink_user, 0 };
    const srt_chan_config *cc = srt_chan_get_config(c);
    srt_model *m = NULL;
    srt_sched_model_runner *mr = NULL;
    srt_sched *s = NULL;
    srt_hook_registry *hooks = NULL;
    srt_act_capture *acts = NULL;
    srt_tp_group *tp = NULL;
    srt_sched_config cfg;
    int rc = SRT_ERROR;

    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_LOADING, "loading the model", NULL);
    int cuda = 0;
    srt_control_vector_opts co = { .path = cc->cvec_path, .name = cc->cvec_name,
                                   .scale = cc->cvec_scale, .layer_start = cc->cvec_layer_start,
                                   .layer_end = cc->cvec_layer_end,
                                   .per_request = cc->cvec_per_request };
    if (cc->tp_size > 1) {
        /* the ranks fork before anything is loaded or any device is touched */
        srt_tp_group_opts to = { .size = cc->tp_size, .model_path = cc->model_path, .hooks_path = cc->hooks_path,
                                 .hooks_search = cc->hooks_search, .n_threads = cc->threads,
                                 .cvec = cc->cvec_path[0] ? &co : NULL };
        if (srt_tp_group_start(&to, &tp, err) != SRT_OK)
            goto fail;
    }
    if (cc->device != SRT_CHAN_DEVICE_CPU) {
        /* probed here, never in the nginx master, and after the ranks forked: CUDA must not
         * be initialised before a fork. Rank k > 0 uses device k (NCCL tensor communicator). */
        char why[512] = "";
        int n_dev = srt_cuda_probe(why, sizeof why);
        if (n_dev > 0 && n_dev < cc->tp_size)
            snprintf(why, sizeof why, "srt_tp_size %d needs %d CUDA devices, %d found", (int)cc->tp_size,
                     (int)cc->tp_size, n_dev);
        else if (n_dev > 0)
            cuda = 1;
        if (!cuda && cc->device == SRT_CHAN_DEVICE_CUDA) {
            srt_err_set(err, "srt_device cuda: %s", why);
            goto fail;
        }
        if (!cuda)
            srt_log(SRT_LOG_INFO, "srt_device auto: running on the CPU (%s)", why);
    }
    if (srt_model_load(cc->model_path, &m, err) != SRT_OK)
        goto fail;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
    uint64_t ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : (8ull << 30);
    if (srt_sched_config_from_chan(cc, srt_model_config_of(m), ram, &cfg, err) != SRT_OK)
        goto fail;
    if (cc->hooks_path[0]) {
        int n_mod;
        srt_module *mods = srt_model_modules(m, &n_mod);
        hooks = srt_hook_registry_create(mods, n_mod, err);
        if (hooks && tp)
            srt_hook_registry_set_tp(hooks, 0, cc->tp_size);
        if (!hooks || srt_hook_registry_set_search_path(hooks, cc->hooks_search[0] ? cc->hooks_search : NULL, err) != SRT_OK ||
            srt_hook_registry_load_file(hooks, cc->hooks_path, err) != SRT_OK)
            goto fail;
    }
    if (cc->cvec_path[0]) {
        int n_mod;
        srt_module *mods = srt_model_modules(m, &n_mod);
        if (!hooks && !(hooks = srt_hook_registry_create(mods, n_mod, err)))
            goto fail;
        if (tp)
            srt_hook_registry_set_tp(hooks, 0, cc->tp_size);
        if (srt_hook_control_vector_load(hooks, &co, srt_model_config_of(m)->n_layers, err) != SRT_OK)
            goto fail;
    }
    if (cc->act_bytes > 0) {
        /* srt_max_activation_bytes: the capture's hooks go on this process's (rank 0's) modules */
        int n_mod;
        srt_module *mods = srt_model_modules(m, &n_mod);
        const srt_model_config *mcfg = srt_model_config_of(m);
        if (!hooks && !(hooks = srt_hook_registry_create(mods, n_mod, err)))
            goto fail;
        if (!(acts = srt_act_capture_new(hooks, mcfg->hidden_size, mcfg->n_layers, cc->act_bytes, err)))
            goto fail;
    }
    if (!cuda && cc->kv_cache_dtype == SRT_CHAN_KV_BF16) {
        srt_err_set(err, "srt_kv_cache_dtype bf16: the CPU backend keeps the KV cache in f16 or f32");
        goto fail;
    }
    if (model_runner_create(m, &cfg, cc->threads, tp, cuda, cc->mem_fraction_static,
                            cc->cuda_graph < 0 ? SRT_RUNNER_GRAPHS_OFF : SRT_RUNNER_GRAPHS_AUTO,
                            cc->numerics != SRT_CHAN_NUMERICS_FAST, kv_dtype_of(cc, cuda), cc->weights_mmap, hooks,
                            &mr, err) != SRT_OK)
        goto fail;
    /* a hook with only a device entry (ABI 1.1) cannot run without the backend's stream */
    if (hooks && srt_hook_registry_check_entries(hooks, err) != SRT_OK)
        goto fail;
    srt_sched_runner runner = srt_sched_model_runner_iface(mr);
    if (srt_sched_create(&cfg, &runner, &s, err) != SRT_OK)
        goto fail;

    const srt_model_config *mc = srt_model_config_of(m);
    srt_chan_model_info info;
    memset(&info, 0, sizeof info);
    info.vocab_size = mc->vocab_size;
    info.context_length = cfg.context_length;
    info.max_running_requests = cfg.max_running_requests;
    info.max_total_tokens = cfg.max_total_tokens;
    info.n_eos = cfg.n_eos;
    memcpy(info.eos_ids, cfg.eos_ids, sizeof info.eos_ids);
    snprintf(info.arch, sizeof info.arch, "%s", mc->architecture);
    snprintf(info.device, sizeof info.device, cuda ? "cuda" : "cpu");
    info.hidden_size = mc->hidden_size;
    info.n_layers = mc->n_layers;
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_READY, NULL, &info);
    size_t copied = srt_runner_weights_copied(mr->runner);
    char wdesc[64];
    snprintf(wdesc, sizeof wdesc, cuda ? "on the device" : copied ? "copied (%zu MB)" : "in place (mmap)",
             copied >> 20);
    srt_log(SRT_LOG_INFO, "scheduler ready: %s, context %d, %d running, KV %lld tokens (page %d), chunk %d, radix %s, %s, "
            "weights %s, on %s", cc->model_path, cfg.context_length, cfg.max_running_requests,
            (long long)cfg.max_total_tokens, cfg.page_size, cfg.chunked_prefill_size, cfg.radix_cache ? "on" : "off",
            cfg.policy == SRT_SCHED_LPM ? "lpm" : "fcfs", wdesc, info.device);
    grammar_cache *gc = grammar_cache_new(cc->model_path, cfg.vocab_size, cfg.eos_ids, cfg.n_eos);
    rc = serve(c, s, &cfg, hooks, acts, tp, gc, &mo, err);
    grammar_cache_free(gc);
    srt_act_capture_free(acts);
    srt_sched_free(s);
    srt_sched_model_runner_free(mr);
    srt_tp_group_stop(tp);
    srt_hook_registry_free(hooks);
    srt_model_free(m);
    return rc;
fail:
    srt_chan_sched_set_state(c, SRT_CHAN_SCHED_FAILED, err->msg, NULL);
    srt_sched_free(s);
    srt_sched_model_runner_free(mr);
    srt_tp_group_stop(tp);
    srt_act_capture_free(acts);
    if (hooks)
        srt_hook_registry_free(hooks);
    if (m)
        srt_model_free(m);
    return SRT_ERROR;
}
